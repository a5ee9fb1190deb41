/* cmd_serve.c - `hotmoe serve`: options, start-up order (listen first so /health answers 503
 * while the model loads), and graceful shutdown on SIGINT/SIGTERM: stop admitting, cancel
 * running generations, let handlers finish, then free. */
#define _GNU_SOURCE
#include "server/server.h"
#include "autoplan.h"
#include "config.h"
#include "loader.h"
#include "routeio.h"
#include "exec.h"
#include "gpu.h"
#include "gemv.h"
#include "tokenizer.h"
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig; g_stop = 1; }

typedef struct {
    const char *model, *host, *api_key, *alias, *replay, *family;
    long port, parallel, ctx, queue, body_limit, keepalive, prefill_chunk;
    double timeout;
    int any_model, device;
    runner_opts ro;   /* the GPU placement: --gpu-mem --cold --static-experts --cache-slots --routing --lfu-decay --cpu-threads --swap-max */
} serve_opts;

#define SERVE_PREFILL_CPU 256    /* --prefill-chunk defaults: prompt tokens per engine step */
#define SERVE_PREFILL_GPU 2048

static const char usage[] =
    "usage: hotmoe serve [-m PATH] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--parallel N]\n"
    "                    [--ctx N] [--queue N] [--body-limit BYTES] [--timeout SECONDS] [--keepalive SECONDS]\n"
    "                    [--alias NAME] [--any-model] [--chat-template FAMILY] [--prefill-chunk N] [--prefill-min N]\n"
    "                    [--config FILE] [--device auto|cpu|cuda] [--kernels fast|ref]   (auto: cuda when --gpu-mem is given)\n"
    "                    [--gpu-mem GiB [--gpu-reserve 1]] [--cold auto|none|stream|cpu] [--static-experts N] [--cache-slots N]\n"
    "                    [--routing TRACE] [--lfu-decay D] [--cpu-threads N] [--swap-max N] [--ram GiB]\n"
    "  --gpu-mem: the process's VRAM per GPU; the engine's own allocations stay within it less --gpu-reserve\n"
    "  (GiB, default 1: the CUDA context and cuBLAS).\n"
    "  --prefill-chunk: prompt tokens per engine step (default 256 on the CPU, 2048 on the GPU, where a step's\n"
    "  piece is one batched prefill); with --gpu-mem also the chunk reserved in the budget (default 1024).\n"
    "  --prefill-min: on the GPU, pieces of fewer prompt tokens run token by token (default 48; 1: always batched).\n"
    "  --api-key also reads HOTMOE_API_KEY; /health never needs it.\n"
    "  --chat-template: chatml | qwen3 | glm-4.5 | deepseek-v3 (default: detected from the model's template)\n"
    "  --replay TEXT: test only; every request generates TEXT's tokens then EOS.\n";

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end; errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "hotmoe serve: %s: expected an integer in [%ld, %ld], found '%s'\n", flag, lo, hi, v ? v : "nothing");
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_args(serve_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1"; o->port = 8080; o->parallel = 1; o->queue = 16; o->body_limit = 8 << 20;
    o->keepalive = 15; o->timeout = 600; o->prefill_chunk = 0;   /* 0: SERVE_PREFILL_CPU / _GPU by device */
    o->api_key = getenv("HOTMOE_API_KEY");
    runner_opts_init(&o->ro);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1, rc = 0;
        hm_error re;
        int took = runner_opts_flag(&o->ro, a, v, &re);
        if (took < 0) { fprintf(stderr, "hotmoe serve: %s\n", re.msg); return -1; }
        if (took) { i += took == 1; continue; }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--host")) o->host = v;
        else if (!strcmp(a, "--port")) rc = parse_long(a, v, 0, 65535, &o->port);
        else if (!strcmp(a, "--api-key")) o->api_key = v;
        else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) rc = parse_long(a, v, 1, 256, &o->parallel);
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) rc = parse_long(a, v, 2, 1 << 24, &o->ctx);
        else if (!strcmp(a, "--queue")) rc = parse_long(a, v, 0, 1 << 16, &o->queue);
        else if (!strcmp(a, "--body-limit")) rc = parse_long(a, v, 1024, 1L << 34, &o->body_limit);
        else if (!strcmp(a, "--keepalive")) rc = parse_long(a, v, 1, 3600, &o->keepalive);
        else if (!strcmp(a, "--timeout")) { long t; rc = parse_long(a, v, 0, 1 << 24, &t); o->timeout = (double)t; }
        else if (!strcmp(a, "--alias")) o->alias = v;
        else if (!strcmp(a, "--replay")) o->replay = v;
        else if (!strcmp(a, "--chat-template")) o->family = v;
        else if (!strcmp(a, "--any-model")) { o->any_model = 1; used = 0; }
        else if (!strcmp(a, "--device")) {
            if (!v || (o->device = runner_parse_device(v)) < 0) {
                fprintf(stderr, "hotmoe serve: --device: expected auto, cpu or cuda, found '%s'\n", v ? v : "");
                return -1;
            }
        } else if (!strcmp(a, "--kernels")) {
            if (v && !strcmp(v, "ref")) hm_kernels_set(HM_KERNELS_REF);
            else if (v && !strcmp(v, "fast")) hm_kernels_set(HM_KERNELS_FAST);
            else { fprintf(stderr, "hotmoe serve: --kernels: expected fast or ref, found '%s'\n", v ? v : ""); return -1; }
        } else if (!strcmp(a, "--replay-routing")) {
            fprintf(stderr, "hotmoe serve: --replay-routing is for benchmarks only (it replaces the model's routing) and is refused by serve\n");
            return -1;
        } else if (!strcmp(a, "--workspace-mib") || !strcmp(a, "--calibration") || !strcmp(a, "--pcie-gbs") ||
                   !strcmp(a, "--dram-gbs") || !strcmp(a, "--hbm-gbs") || !strcmp(a, "--record-routing")) {
            /* the placement flags themselves are the runner's (taken above) */
            fprintf(stderr, "hotmoe serve: %s: not supported by serve (a flag of `hotmoe plan` or of the benchmarks)\n", a);
            return -1;
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); return 1; }
        else { fprintf(stderr, "hotmoe serve: unknown option '%s'\n%s", a, usage); return -1; }
        if (rc) return -1;
        if (used) {
            if (!v) { fprintf(stderr, "hotmoe serve: %s: expected a value after it\n", a); return -1; }
            i++;
        }
    }
    if (o->ro.prefill_chunk > 0) o->prefill_chunk = o->ro.prefill_chunk;   /* --prefill-chunk: the engine's chunk and the GPU's */
    return 0;
}


static int family_from_name(const char *name) {
    for (int f = 0; f < CHAT_FAMILY_COUNT; f++) if (!strcmp(chat_family_name(f), name)) return f;
    return -1;
}

int cmd_serve(int argc, char **argv) {
    serve_opts o;
    /* --config FILE: the file's keys become flags placed before ours, so the command line wins */
    config_set cfg; char **args = NULL; hm_error ce;
    int n_args = config_apply(&cfg, "serve", argc, argv, &args, &ce);
    if (n_args < 0) { fprintf(stderr, "hotmoe serve: %s\n", ce.msg); config_free(&cfg); free(args); return 2; }
    int rc = parse_args(&o, n_args, args);
    if (rc) { config_free(&cfg); free(args); return rc > 0 ? 0 : 2; }
    const char *path = o.model ? o.model : model_demo_path();
    static server s;
    memset(&s, 0, sizeof s);
    s.host = o.host; s.port = (int)o.port; s.api_key = o.api_key && *o.api_key ? o.api_key : NULL;
    s.body_limit = (size_t)o.body_limit; s.time_limit_s = o.timeout; s.keepalive_s = (int)o.keepalive;
    s.any_model = o.any_model;
    const char *base = strrchr(path, '/');
    char *model_id = hm_strdup(o.alias ? o.alias : base && base[1] ? base + 1 : path);
    s.model_id = model_id;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    hm_error e;
    if (server_start(&s, &e)) { fprintf(stderr, "hotmoe: %s\n", e.msg); free(model_id); config_free(&cfg); free(args); return 1; }
    struct mg_server_port ports[4];
    int np = mg_get_server_ports(s.ctx, 4, ports);
    fprintf(stderr, "hotmoe: listening on http://%s:%d (loading %s)\n", o.host, np > 0 ? ports[0].port : (int)o.port, path);

    hm_model m;
    int status = 1;
    if (model_load(&m, path, &e)) { fprintf(stderr, "hotmoe: %s\n", e.msg); goto stop_http; }
    s.m = &m;
    if (!m.tok) { fprintf(stderr, "hotmoe: serve: %s has no tokenizer\n", path); goto free_model; }
    int known;
    s.family = chat_detect(m.chat_template, &known);
    if (o.family) {
        if ((s.family = family_from_name(o.family)) < 0) {
            fprintf(stderr, "hotmoe: --chat-template: expected chatml, qwen3, glm-4.5 or deepseek-v3, found '%s'\n", o.family);
            goto free_model;
        }
    } else if (!known) {
        fprintf(stderr, "hotmoe: warning: %s; using the ChatML fallback (<|im_start|>role\\ncontent<|im_end|>\\n); "
                        "pick a family with --chat-template\n",
                m.chat_template ? "the model's chat template is not one of the known families" : "the model has no chat template");
    }
    long n_ctx = o.ctx ? o.ctx : (m.cfg.n_ctx_train > 0 && m.cfg.n_ctx_train < 4096 ? m.cfg.n_ctx_train : 4096);
    engine_backend be;
    if (o.replay) {
        int32_t *ids; size_t n;
        if (tokenizer_encode(m.tok, o.replay, strlen(o.replay), &ids, &n, &e) ||
            engine_backend_replay(&be, &m, (int)o.parallel, ids, n, tokenizer_eos(m.tok), &e)) {
            fprintf(stderr, "hotmoe: --replay: %s\n", e.msg);
            goto free_model;
        }
        free(ids);
    } else {
        /* auto: the GPU when a GPU budget is given and a GPU is present (the GPU backend is new: opt in) */
        int dev = o.device != HM_DEVICE_AUTO ? o.device : o.ro.gpu_mem_gib > 0 && gpu_device_count() > 0 ? HM_DEVICE_CUDA : HM_DEVICE_CPU;
        runner_opts *ro = &o.ro;
        int64_t *counts = NULL;
        if (dev == HM_DEVICE_CUDA) {
            if (!gpu_built() || gpu_device_count() == 0) {
                fprintf(stderr, "hotmoe: --device cuda: %s\n", gpu_built() ? "no CUDA device is present" : "this binary was built without CUDA");
                goto free_model;
            }
            if ((ro->routing && routeio_counts(ro->routing, &m, &counts, &e)) || autoplan_apply(ro, &m, dev, (int)n_ctx, 0, &e)) {
                fprintf(stderr, "hotmoe: %s\n", e.msg);
                free(counts);
                goto free_model;
            }
            ro->counts = counts;
            int rc2 = engine_backend_gpu(&be, &m, (int)o.parallel, (int)n_ctx, ro, tokenizer_eos(m.tok), &e);
            free(counts);
            ro->counts = NULL;
            if (rc2) { fprintf(stderr, "hotmoe: %s\n", e.msg); goto free_model; }
        } else {
            /* the CPU target: a CPU-only deployment (configs/cpu-only.json: gpu-mem 0, cold cpu) is accepted */
            if (ro->gpu_mem_gib > 0 || ro->cold == GPU_COLD_STREAM || ro->n_static >= 0 || ro->n_slots >= 0 || ro->routing) {
                fprintf(stderr, "hotmoe: serve: --gpu-mem / --cold stream / --static-experts / --cache-slots / --routing place experts "
                        "on a GPU: expected --device cuda (a GPU), found the CPU target\n");
                goto free_model;
            }
            if (engine_backend_cpu(&be, &m, (int)o.parallel, (int)n_ctx, &e)) {
                fprintf(stderr, "hotmoe: %s\n", e.msg);
                goto free_model;
            }
        }
    }
    /* prompt tokens per engine step when --prefill-chunk is not given: on the GPU each step's prompt
     * piece is one batched prefill whose fixed cost (every used expert dequantized once, ~185 ms a
     * piece on air, 50 on a3b: bench/README thirteenth pass) 256-token pieces would pay 32 times for
     * an 8K prompt; the CPU runs prompts token by token, where the piece only sets how long other
     * slots wait between their tokens */
    if (o.prefill_chunk <= 0) o.prefill_chunk = be.name && !strcmp(be.name, "cuda") ? SERVE_PREFILL_GPU : SERVE_PREFILL_CPU;
    engine_params ep = { .n_slots = (int)o.parallel, .n_ctx = (int)n_ctx, .queue_cap = (int)o.queue, .prefill_chunk = (int)o.prefill_chunk };
    s.en = engine_start(&m, &be, &ep, &e);
    if (!s.en) { fprintf(stderr, "hotmoe: %s\n", e.msg); goto free_model; }
    __atomic_store_n(&s.ready, 1, __ATOMIC_RELEASE); /* publishes s.m, s.en, s.family: see server_ready */
    fprintf(stderr, "hotmoe: ready: model '%s' (%s), template %s, %ld slot(s) x %ld tokens, prompts in pieces of %ld, backend %s%s\n",
            s.model_id, hm_arch_name(m.cfg.arch), chat_family_name(s.family), o.parallel, n_ctx, o.prefill_chunk, be.name,
            s.api_key ? ", API key required" : "");
    while (!g_stop) {
        struct timespec ts = { 0, 100 * 1000000L };
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "hotmoe: shutting down\n");
    __atomic_store_n(&s.stopping, 1, __ATOMIC_RELEASE);
    engine_shutdown(s.en);
    status = 0;
stop_http:
    server_stop(&s); /* waits for the handlers, which see their requests cancelled */
    if (s.en) engine_free(s.en);
    if (s.m) model_free(&m);
    free(model_id);
    config_free(&cfg); free(args);
    return status;
free_model:
    server_stop(&s);
    model_free(&m);
    free(model_id);
    config_free(&cfg); free(args);
    return 1;
}
