/* main.c - the hotmoe command line: one table of subcommands; only this file exits. */
#define _GNU_SOURCE
#include "convert.h"
#include "cpu.h"
#include "gemv.h"
#include "gguf.h"
#include "gpu.h"
#include "loader.h"
#include "quant.h"
#include "quantize.h"
#include "routeio.h"
#include "autoplan.h"
#include "config.h"
#include "runner.h"
#include "sampler.h"
#include "tokenizer.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* ---------------------------------------------------------------- options */

typedef struct {
    const char *model, *prompt, *tokens, *out, *text, *tokenizer_path, *outtype, *record, *replay;
    int n_predict, n_ctx, ignore_eos, quiet, device;
    sampler_params sp;
    runner_opts ro;          /* --gpu-mem --cold --static-experts --cache-slots --routing --lfu-decay */
    const char *positional[4]; int n_pos;
} opts;

static void die(const char *fmt, const char *a) { fprintf(stderr, "hotmoe: "); fprintf(stderr, fmt, a); fputc('\n', stderr); exit(2); }

static long parse_int(const char *flag, const char *v, long lo, long hi) {
    char *end; errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "hotmoe: %s: expected an integer in [%ld, %ld], found '%s'\n", flag, lo, hi, v);
        exit(2);
    }
    return x;
}
static float parse_float(const char *flag, const char *v) {
    char *end; errno = 0;
    float x = strtof(v, &end);
    if (errno || end == v || *end) { fprintf(stderr, "hotmoe: %s: expected a number, found '%s'\n", flag, v); exit(2); }
    return x;
}

static void parse_opts(opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    o->n_predict = 64; o->n_ctx = 0; o->sp = sampler_defaults();
    runner_opts_init(&o->ro);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        hm_error re;
        int took = runner_opts_flag(&o->ro, a, v, &re);
        if (took < 0) { fprintf(stderr, "hotmoe: %s\n", re.msg); exit(2); }
        if (took) { i += took == 1; continue; }
#define VAL() (v ? (i++, v) : (die("%s: expected a value after it", a), ""))
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = VAL();
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = VAL();
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) o->n_predict = (int)parse_int(a, VAL(), 0, 1 << 24);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) o->n_ctx = (int)parse_int(a, VAL(), 1, 1 << 24);
        else if (!strcmp(a, "--temp")) o->sp.temperature = parse_float(a, VAL());
        else if (!strcmp(a, "--seed")) o->sp.seed = (uint64_t)parse_int(a, VAL(), 0, LONG_MAX);
        else if (!strcmp(a, "--top-k")) o->sp.top_k = (int)parse_int(a, VAL(), 0, INT_MAX);
        else if (!strcmp(a, "--top-p")) o->sp.top_p = parse_float(a, VAL());
        else if (!strcmp(a, "--min-p")) o->sp.min_p = parse_float(a, VAL());
        else if (!strcmp(a, "--repeat-penalty")) o->sp.repetition_penalty = parse_float(a, VAL());
        else if (!strcmp(a, "--presence-penalty")) o->sp.presence_penalty = parse_float(a, VAL());
        else if (!strcmp(a, "--frequency-penalty")) o->sp.frequency_penalty = parse_float(a, VAL());
        else if (!strcmp(a, "--repeat-last-n")) o->sp.penalty_last_n = (int)parse_int(a, VAL(), 0, INT_MAX);
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = 1;
        else if (!strcmp(a, "--record-routing")) o->record = VAL();
        else if (!strcmp(a, "--replay-routing")) o->replay = VAL();
        else if (!strcmp(a, "--tokens")) o->tokens = VAL();
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) o->out = VAL();
        else if (!strcmp(a, "--text")) o->text = VAL();
        else if (!strcmp(a, "--tokenizer")) o->tokenizer_path = VAL();
        else if (!strcmp(a, "--outtype") || !strcmp(a, "--type")) o->outtype = VAL();
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--kernels")) {
            const char *k = VAL();
            if (!strcmp(k, "ref")) hm_kernels_set(HM_KERNELS_REF);
            else if (!strcmp(k, "fast")) hm_kernels_set(HM_KERNELS_FAST);
            else die("--kernels: expected fast or ref, found '%s'", k);
        }
        else if (!strcmp(a, "--device")) {
            o->device = runner_parse_device(VAL());
            if (o->device < 0) die("--device: expected cpu, cuda or auto, found '%s'", v);
        }
        else if (a[0] == '-' && a[1]) die("unknown option '%s' (see hotmoe help)", a);
        else if (o->n_pos < 4) o->positional[o->n_pos++] = a;
        else die("unexpected argument '%s'", a);
#undef VAL
    }
}


/* parse_opts after a --config FILE's keys for cmd (placed before the command line, which wins).
 * *cfg holds the strings o points to: config_free it after the command. */
static void parse_opts_config(opts *o, const char *cmd, int argc, char **argv, config_set *cfg) {
    char **args = NULL;
    hm_error e;
    int n = config_apply(cfg, cmd, argc, argv, &args, &e);
    if (n < 0) { fprintf(stderr, "hotmoe: %s\n", e.msg); config_free(cfg); free(args); exit(2); }
    parse_opts(o, n, args);
    free(args);
}

static void load_or_die(hm_model *m, const opts *o) {
    hm_error e;
    const char *path = o->model ? o->model : model_demo_path();
    if (model_load(m, path, &e)) { fprintf(stderr, "hotmoe: %s\n", e.msg); exit(1); }
}

static int ctx_for(const opts *o, int need) {
    int n = o->n_ctx ? o->n_ctx : need;
    if (n < need) {
        fprintf(stderr, "hotmoe: context: expected room for %d tokens, --ctx is %d\n", need, n);
        exit(1);
    }
    return n;
}

/* The target with its placement; --routing's counts are read here (freed with the runner's model). */
static int init_runner(hm_runner *r, const hm_model *m, opts *o, int n_ctx, hm_error *e) {
    int64_t *counts = NULL;
    if (o->ro.routing && routeio_counts(o->ro.routing, m, &counts, e)) return -1;
    o->ro.counts = counts;
    o->ro.route_io = o->record || o->replay;
    int rc = autoplan_apply(&o->ro, m, o->device, n_ctx, o->quiet, e) ? -1 : runner_init_opts(r, m, o->device, n_ctx, &o->ro, e);
    free(counts);   /* the executor has placed its experts: the counts are not kept */
    o->ro.counts = NULL;
    return rc;
}

/* ---------------------------------------------------------------- commands */

static int32_t *parse_tokens(const char *s, size_t *n, int n_vocab) {
    size_t cap = 16; int32_t *t = hm_malloc(cap * sizeof *t); *n = 0;
    const char *p = s;
    while (*p) {
        char *end; errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= n_vocab) {
            fprintf(stderr, "hotmoe: --tokens: expected comma-separated ids in [0, %d), found '%.20s'\n", n_vocab, p);
            exit(2);
        }
        if (*n == cap) { cap *= 2; t = realloc(t, cap * sizeof *t); if (!t) abort(); }
        t[(*n)++] = (int32_t)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) { fprintf(stderr, "hotmoe: --tokens: expected ',' between ids, found '%c'\n", *p); exit(2); }
    }
    if (!*n) { fprintf(stderr, "hotmoe: --tokens: expected at least one id\n"); exit(2); }
    return t;
}

static int cmd_logits(int argc, char **argv) {
    opts o; config_set cfg; parse_opts_config(&o, "generate", argc, argv, &cfg);   /* generate's keys */
    if (!o.tokens || !o.out) die("%s", "logits: usage: hotmoe logits -m PATH --tokens 1,2,3 -o FILE");
    hm_model m; load_or_die(&m, &o);
    size_t n; int32_t *toks = parse_tokens(o.tokens, &n, m.cfg.n_vocab);
    hm_runner r; hm_error e; routeio io;
    if (init_runner(&r, &m, &o, ctx_for(&o, (int)n), &e) || routeio_open(&io, &m, o.record, o.replay, &e) ||
        routeio_attach(&io, &r, &e)) { fprintf(stderr, "hotmoe: %s\n", e.msg); return 1; }
    FILE *f = fopen(o.out, "wb");
    if (!f) die("logits: cannot create '%s'", o.out);
    float *logits = hm_malloc(sizeof(float) * (size_t)m.cfg.n_vocab);
    for (size_t i = 0; i < n; i++) {
        routeio_before(&io, (int64_t)i);
        if (runner_forward(&r, toks[i], (int)i, logits, &e) || routeio_after(&io, &e)) { fprintf(stderr, "hotmoe: %s\n", e.msg); return 1; }
        if (fwrite(logits, sizeof(float), (size_t)m.cfg.n_vocab, f) != (size_t)m.cfg.n_vocab) die("logits: write to '%s' failed", o.out);
    }
    if (fclose(f)) die("logits: write to '%s' failed", o.out);
    if (routeio_close(&io, &e)) { fprintf(stderr, "hotmoe: %s\n", e.msg); return 1; }
    free(logits); free(toks); runner_free(&r); model_free(&m); config_free(&cfg);
    return 0;
}

/* generate's output: a token accepted and written, or 1 at the end of the text (eos or a special
 * token unless ignore_eos); n counts the tokens written */
typedef struct { const hm_model *m; sampler *sm; tokenizer_stream *ts; int ignore_eos, n; } gen_out;
static int gen_emit(void *u, int i, int32_t t) {
    gen_out *go = u;
    char buf[256];
    (void)i;
    sampler_accept(go->sm, t);
    if (!go->ignore_eos && (t == tokenizer_eos(go->m->tok) || tokenizer_is_special(go->m->tok, t))) return 1;
    size_t k = tokenizer_stream_push(go->m->tok, go->ts, t, buf, sizeof buf);
    fwrite(buf, 1, k, stdout); fflush(stdout);
    go->n++;
    return 0;
}

static int cmd_generate(int argc, char **argv) {
    opts o; config_set cfg; parse_opts_config(&o, "generate", argc, argv, &cfg);
    if (!o.prompt && o.n_pos) o.prompt = o.positional[0];
    if (!o.prompt) die("%s", "generate: usage: hotmoe generate -m PATH -p TEXT [-n N] [--temp T] [--seed S]");
    hm_model m; load_or_die(&m, &o);
    if (!m.tok) die("generate: %s has no tokenizer", m.path);
    hm_error e; int32_t *ids; size_t n;
    if (tokenizer_encode(m.tok, o.prompt, strlen(o.prompt), &ids, &n, &e)) die("%s", e.msg);
    if (!n) die("%s", "generate: the prompt encodes to no tokens");
    int n_ctx = ctx_for(&o, (int)n + o.n_predict);
    hm_runner r; routeio io;
    if (init_runner(&r, &m, &o, n_ctx, &e) || routeio_open(&io, &m, o.record, o.replay, &e) || routeio_attach(&io, &r, &e)) {
        fprintf(stderr, "hotmoe: %s\n", e.msg);
        return 1;
    }
    sampler sm; sampler_init(&sm, &o.sp, m.cfg.n_vocab);
    float *logits = hm_malloc(sizeof(float) * (size_t)m.cfg.n_vocab);
    double t0 = hm_now();
    if (!io.rec && !io.has_replay) { /* the prompt in one batched pass */
        if (runner_prefill(&r, ids, (int)n, 0, logits, &e)) { fprintf(stderr, "hotmoe: %s\n", e.msg); return 1; }
        for (size_t i = 0; i < n; i++) sampler_accept(&sm, ids[i]);
    } else for (size_t i = 0; i < n; i++) { /* routing side channels need each token's choice */
        routeio_before(&io, (int64_t)i);
        if (runner_forward(&r, ids[i], (int)i, i + 1 == n ? logits : NULL, &e) || routeio_after(&io, &e)) {
            fprintf(stderr, "hotmoe: %s\n", e.msg);
            return 1;
        }
        sampler_accept(&sm, ids[i]);
    }
    double t1 = hm_now();
    tokenizer_stream ts = { 0 };
    char buf[256];
    int gen = 0, pos = (int)n;
    fputs(o.prompt, stdout);
    const int greedy = sampler_greedy_only(&sm);   /* then the next token comes back instead of the logits */
    int chain = greedy && !io.rec && !io.has_replay;   /* try the greedy chain once (HOTMOE_CHAIN, on unless 0) */
    gen_out go = { &m, &sm, &ts, o.ignore_eos, 0 };
    int32_t t = -1;
    for (; gen < o.n_predict; gen++) {
        if (t < 0) t = sampler_sample(&sm, logits);
        if (gen_emit(&go, gen, t)) break;
        if (gen + 1 < o.n_predict && chain) {   /* the rest without the host between steps, when the runner can */
            const int rc = runner_greedy_chain(&r, t, pos, o.n_predict - gen - 1, NULL, gen_emit, &go, &e);
            if (rc == -1) { fprintf(stderr, "hotmoe: %s\n", e.msg); return 1; }
            chain = 0;
            if (rc >= 0) { gen = go.n; break; }
        }
        if (gen + 1 < o.n_predict) {
            routeio_before(&io, pos);
            int32_t nx = -1;
            if ((greedy ? runner_forward_greedy(&r, t, pos, logits, &nx, &e) : runner_forward(&r, t, pos, logits, &e)) ||
                routeio_after(&io, &e)) {
                fprintf(stderr, "hotmoe: %s\n", e.msg);
                return 1;
            }
            t = nx;   /* -1: sample from the logits */
            pos++;
        }
    }
    size_t k = tokenizer_stream_flush(&ts, buf, sizeof buf);
    fwrite(buf, 1, k, stdout); fputc('\n', stdout);
    double t2 = hm_now();
    if (!o.quiet)
        fprintf(stderr, "hotmoe: %s: prompt %zu tokens %.1f tok/s, generated %d tokens %.1f tok/s\n", runner_device_name(&r), n,
                n / (t1 - t0 + 1e-9), gen, gen / (t2 - t1 + 1e-9));
    if (routeio_close(&io, &e)) { fprintf(stderr, "hotmoe: %s\n", e.msg); return 1; }
    free(logits); free(ids); sampler_free(&sm); runner_free(&r); model_free(&m); config_free(&cfg);
    return 0;
}

static int cmd_tokenize(int argc, char **argv) {
    opts o; parse_opts(&o, argc, argv);
    hm_error e; hm_model m; memset(&m, 0, sizeof m);
    tokenizer *tok = NULL;
    if (o.tokenizer_path) {
        if (!(tok = tokenizer_load_json(o.tokenizer_path, &e))) { fprintf(stderr, "hotmoe: %s\n", e.msg); return 1; }
    } else {
        load_or_die(&m, &o);
        if (!m.tok) die("tokenize: %s has no tokenizer", m.path);
        tok = m.tok;
    }
    char *text; size_t len;
    if (o.text) { text = hm_strdup(o.text); len = strlen(text); }
    else {
        size_t cap = 4096; len = 0; text = hm_malloc(cap);
        size_t r;
        while ((r = fread(text + len, 1, cap - len, stdin)) > 0) { len += r; if (len == cap) { cap *= 2; text = realloc(text, cap); if (!text) abort(); } }
    }
    int32_t *ids; size_t n;
    if (tokenizer_encode(tok, text, len, &ids, &n, &e)) { fprintf(stderr, "hotmoe: %s\n", e.msg); return 1; }
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids); free(text);
    if (o.tokenizer_path) tokenizer_free(tok); else model_free(&m);
    return 0;
}

static int cmd_inspect(int argc, char **argv) {
    opts o; parse_opts(&o, argc, argv);
    hm_model m; load_or_die(&m, &o);
    const hm_config *c = &m.cfg;
    printf("model:        %s (%s)\n", m.path, m.from_gguf ? "GGUF" : "HF safetensors");
    printf("architecture: %s\n", hm_arch_name(c->arch));
    printf("layers:       %d (+%d MTP), dense leading %d\n", c->n_layer, c->n_nextn, c->n_dense_lead);
    printf("hidden:       %d, heads %d / kv %d, head_dim %d, rotary dims %d, rope theta %g, rms eps %g\n", c->n_embd,
           c->n_head, c->n_head_kv, c->head_dim, c->n_rot, c->rope_theta, c->rms_eps);
    printf("experts:      %d routed, top-%d, ff %d; shared %d (ff %d); dense ff %d\n", c->n_expert, c->n_expert_used,
           c->n_ff_exp, c->n_shared_exp, c->n_ff_shexp, c->n_ff);
    printf("router:       %s, norm_topk %d, scale %g, groups %d/%d\n", c->router_fn == 2 ? "sigmoid+bias" : "softmax",
           c->norm_topk, c->routed_scale, c->topk_group, c->n_group);
    printf("attention:    qkv bias %d, qk norm %d; output %s; vocab %d; trained ctx %d\n", c->qkv_bias, c->qk_norm,
           c->tied_output ? "tied" : "untied", c->n_vocab, c->n_ctx_train);
    /* tensor count, bytes by type (from the file's own table) */
    size_t bytes[HM_TYPE_COUNT] = { 0 }, count[HM_TYPE_COUNT] = { 0 }, n_t = 0;
    const gguf_file *g = model_gguf(&m);   /* the file the loader already has open */
    for (uint64_t i = 0; g && i < g->n_tensors; i++) { bytes[g->tensors[i].type] += g->tensors[i].nbytes; count[g->tensors[i].type]++; }
    if (g) n_t = g->n_tensors;
    if (n_t) {
        printf("tensors:      %zu\n", n_t);
        for (int t = 0; t < HM_TYPE_COUNT; t++)
            if (count[t]) printf("  %-6s %6zu tensors %12.2f MiB\n", hm_type_name(t), count[t], bytes[t] / 1048576.0);
    }
    printf("weights:      %.2f MiB\n", model_weight_bytes(&m) / 1048576.0);
    printf("tokenizer:    %s\n", m.tok ? "yes" : "none");
    char buf[256];
    int nd = gpu_device_count();
    printf("gpu:          %s\n", nd ? gpu_describe(0, buf, sizeof buf) : gpu_built() ? "CUDA build, no device" : "CPU-only build");
    model_free(&m);
    return 0;
}

static int cmd_convert(int argc, char **argv) {
    opts o; parse_opts(&o, argc, argv);
    if (!o.model && o.n_pos) o.model = o.positional[0];
    if (!o.model || !o.out) die("%s", "convert: usage: hotmoe convert IN (HF dir or GGUF) -o OUT.gguf [--outtype f32|f16|bf16]");
    int type = -1;
    convert_opts co = { NULL, &type, -1, 0 };
    if (o.outtype) {
        for (int t = 0; t < HM_TYPE_COUNT; t++)
            if (hm_type_get(t) && !strcasecmp(hm_type_name(t), o.outtype)) type = t;
        if (type < 0) die("convert: --outtype: expected f32, f16, bf16 or a block type name, found '%s'", o.outtype);
        co.choose = convert_policy_outtype;
    }
    hm_model m; load_or_die(&m, &o);
    hm_error e;
    if (convert_write_gguf(&m, o.out, &co, &e)) { fprintf(stderr, "hotmoe: %s\n", e.msg); model_free(&m); return 1; }
    if (!o.quiet) fprintf(stderr, "hotmoe: wrote %s\n", o.out);
    model_free(&m);
    return 0;
}

static int cmd_quantize(int argc, char **argv) {
    opts o; parse_opts(&o, argc, argv);
    if (o.n_pos >= 1 && !o.model) o.model = o.positional[0];
    if (o.n_pos >= 2 && !o.out) o.out = o.positional[1];
    if (!o.model || !o.out || !o.outtype)
        die("%s", "quantize: usage: hotmoe quantize IN OUT.gguf --type Q4_K_M (IN: HF directory or F32/F16/BF16 GGUF)");
    const quant_mix *mx = quant_mix_find(o.outtype);
    if (!mx) { fprintf(stderr, "hotmoe: quantize: --type: expected one of %s, found '%s'\n", quant_mix_names(), o.outtype); return 2; }
    hm_model m; load_or_die(&m, &o);
    convert_opts co = { quant_mix_choose, (void *)mx, mx->ftype, !o.quiet };
    hm_error e;
    double t0 = hm_now();
    if (convert_write_gguf(&m, o.out, &co, &e)) { fprintf(stderr, "hotmoe: %s\n", e.msg); model_free(&m); return 1; }
    if (!o.quiet) fprintf(stderr, "hotmoe: wrote %s (%s) in %.1f s\n", o.out, mx->name, hm_now() - t0);
    model_free(&m);
    return 0;
}

static int cmd_help(int argc, char **argv);
int cmd_simulate(int argc, char **argv); /* src/cmd_simulate.c */
int cmd_serve(int argc, char **argv);    /* src/cmd_serve.c */
int cmd_plan(int argc, char **argv);      /* src/cmd_plan.c */
int cmd_calibrate(int argc, char **argv); /* src/cmd_plan.c */

static const struct { const char *name; int (*fn)(int, char **); const char *help; } commands[] = {
    { "serve",    cmd_serve,    "serve [-m PATH] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--parallel N] [--ctx N] [--queue N]\n"
                                "                  [--body-limit BYTES] [--timeout S] [--keepalive S] [--alias NAME] [--any-model] [--chat-template FAMILY]" },
    { "generate", cmd_generate, "generate -m PATH -p TEXT [-n N] [--temp T] [--seed S] [--top-k K] [--top-p P] [--min-p P] [--device cpu|cuda]\n"
                                "                  [--gpu-mem GiB [--gpu-reserve 1]] [--cold auto|none|stream|cpu] [--static-experts N]\n"
                                "                  [--cache-slots N] [--routing TRACE] [--lfu-decay D] [--cpu-threads N] [--swap-max N]\n"
                                "                  [--record-routing FILE] [--replay-routing FILE (benchmarks only)]" },
    { "logits",   cmd_logits,   "logits -m PATH --tokens 1,2,3 -o FILE [--device cpu|cuda]  (float32 [n_tokens][n_vocab])" },
    { "tokenize", cmd_tokenize, "tokenize (-m PATH | --tokenizer tokenizer.json) [--text S]   (stdin without --text)" },
    { "inspect",  cmd_inspect,  "inspect -m PATH" },
    { "convert",  cmd_convert,  "convert IN -o OUT.gguf [--outtype f32|f16|bf16]" },
    { "quantize", cmd_quantize, "quantize IN OUT.gguf --type Q8_0|Q4_K_M|Q3_K_M|Q2_K|Q4_0|Q6_K|MXFP4_MOE|..." },
    { "simulate", cmd_simulate, "simulate --trace FILE --slots N[,N..] [--static N] [--policy lru|lfu|static|exchange|belady|all] [--json]\n"
                                "                  | --generate mixtral|a3b|air|glm [--tokens N] [--seed S] [--write OUT]" },
    { "plan",     cmd_plan,     "plan -m PATH [--gpu-mem GiB[,GiB]] [--gpu-reserve GiB] [--ram GiB] [--routing TRACE] [--ctx N] [--streams N]\n"
                                "                  [--cold auto|stream|cpu] [--static-experts N] [--cache-slots N] [--cpu-experts N|N0,N1]\n"
                                "                  [--gpu-split W0,W1] [--config FILE] [--json]" },
    { "calibrate", cmd_calibrate, "calibrate [--out FILE]   (measures DRAM, CPU GEMV, PCIe, HBM rates; plan reads the file)" },
    { "help",     cmd_help,     "help" },
};

static int cmd_help(int argc, char **argv) {
    (void)argc; (void)argv;
    printf("hotmoe - fast inference for Mixture-of-Experts models larger than GPU memory\n\nusage:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) printf("  hotmoe %s\n", commands[i].help);
    printf("\n-m takes a GGUF file or an HF directory; without -m, the bundled demo model.\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return cmd_help(0, NULL);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 2, argv + 2);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) return cmd_help(0, NULL);
    fprintf(stderr, "hotmoe: unknown command '%s' (expected serve, generate, logits, tokenize, inspect, convert, quantize, simulate, plan, calibrate, help)\n", argv[1]);
    return 2;
}
