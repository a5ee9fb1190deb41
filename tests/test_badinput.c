/* test_badinput.c - corrupt model files must be refused, never crash: for each case the real CLI
 * (`hotmoe inspect -m FILE`) must exit non-zero, not by a signal, with exactly one line on stderr
 * naming the file and the field; model_load in-process must return -1 with the same kind of message.
 * Inputs are built byte by byte here (a small valid model, then one corruption per case), so every
 * field can be made wrong, including ones no writer would produce. */
#define _GNU_SOURCE
#include "gguf.h"
#include "loader.h"
#include "quant.h"
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef HM_TESTS_DIR
#define HM_TESTS_DIR "tests"
#endif
#ifndef HM_HOTMOE_BIN
#define HM_HOTMOE_BIN "hotmoe"
#endif

extern char **environ;

static char tmp[512];
static int n_pass, n_fail;

/* ---------------------------------------------------------------- byte buffer */

typedef struct { uint8_t *p; size_t n, cap; } buf;

static void b_put(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void b_u8(buf *b, uint8_t v) { b_put(b, &v, 1); }
static void b_u32(buf *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(buf *b, uint64_t v) { b_put(b, &v, 8); }
static void b_f32(buf *b, float v) { b_put(b, &v, 4); }
static void b_str(buf *b, const char *s) { b_u64(b, strlen(s)); b_put(b, s, strlen(s)); }
static void b_zero(buf *b, size_t n) { while (n--) b_u8(b, 0); }
static void b_printf(buf *b, const char *fmt, ...) {
    char tmpbuf[4096];
    va_list ap; va_start(ap, fmt);
    int n = vsnprintf(tmpbuf, sizeof tmpbuf, fmt, ap);
    va_end(ap);
    b_put(b, tmpbuf, (size_t)n);
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) || w != n ? -1 : 0;
}

/* ---------------------------------------------------------------- the tiny model */

/* qwen3moe: 1 layer, hidden 32, 2 heads / 1 kv head of 16, 4 experts (top 2) of width 16, vocab 32 */
enum { D = 32, NH = 2, NKV = 1, HD = 16, E = 4, EU = 2, F = 16, V = 32 };

typedef struct { const char *gguf, *hf; int n_dims; int64_t ne[3]; } wdef; /* ne in ggml order */
static const wdef weights[] = {
    { "token_embd.weight", "model.embed_tokens.weight", 2, { D, V } },
    { "output_norm.weight", "model.norm.weight", 1, { D } },
    { "output.weight", "lm_head.weight", 2, { D, V } },
    { "blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight", 1, { D } },
    { "blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", 2, { D, NH * HD } },
    { "blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj.weight", 2, { D, NKV * HD } },
    { "blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight", 2, { D, NKV * HD } },
    { "blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight", 2, { NH * HD, D } },
    { "blk.0.attn_q_norm.weight", "model.layers.0.self_attn.q_norm.weight", 1, { HD } },
    { "blk.0.attn_k_norm.weight", "model.layers.0.self_attn.k_norm.weight", 1, { HD } },
    { "blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight", 1, { D } },
    { "blk.0.ffn_gate_inp.weight", "model.layers.0.mlp.gate.weight", 2, { D, E } },
    { "blk.0.ffn_gate_exps.weight", NULL, 3, { D, F, E } },
    { "blk.0.ffn_up_exps.weight", NULL, 3, { D, F, E } },
    { "blk.0.ffn_down_exps.weight", "model.layers.0.mlp.experts.down_proj", 3, { F, D, E } },
    { NULL, "model.layers.0.mlp.experts.gate_up_proj", 3, { D, 2 * F, E } },
};
#define N_WEIGHTS (int)(sizeof weights / sizeof weights[0])

/* ---------------------------------------------------------------- GGUF builder */

typedef struct {
    char name[96];
    uint32_t n_dims;  /* written as is, with that many dims (up to 8) */
    uint64_t ne[8];
    uint32_t type;
    int64_t offset;   /* -1: laid out by the builder */
} g_tensor;

typedef struct {
    uint32_t magic, version;
    int64_t n_tensors_hdr, n_kv_hdr; /* -1: the real counts */
    buf kv; uint64_t n_kv;
    g_tensor t[32]; int n_t;
    uint32_t alignment;              /* the layout the builder uses (what general.alignment should say) */
} g_spec;

/* where the sections of the last built file start, for truncating at chosen points */
typedef struct { size_t kv, infos, data, end; } g_marks;

static void kv_key(g_spec *s, const char *k, uint32_t t) { b_str(&s->kv, k); b_u32(&s->kv, t); s->n_kv++; }
static void kv_u32(g_spec *s, const char *k, uint32_t v) { kv_key(s, k, GGUF_U32); b_u32(&s->kv, v); }
static void kv_f32(g_spec *s, const char *k, float v) { kv_key(s, k, GGUF_F32); b_f32(&s->kv, v); }
static void kv_str(g_spec *s, const char *k, const char *v) { kv_key(s, k, GGUF_STR); b_str(&s->kv, v); }

static void spec_free(g_spec *s) { free(s->kv.p); memset(s, 0, sizeof *s); }

/* The valid base model; arch_kv = 0 leaves out every metadata key (for cases that write their own). */
static void spec_base(g_spec *s, int arch_kv) {
    memset(s, 0, sizeof *s);
    s->magic = 0x46554747u; s->version = 3; s->alignment = 32;
    s->n_tensors_hdr = s->n_kv_hdr = -1;
    if (arch_kv) {
        kv_str(s, "general.architecture", "qwen3moe");
        kv_str(s, "general.name", "badinput");
        kv_u32(s, "qwen3moe.block_count", 1);
        kv_u32(s, "qwen3moe.context_length", 256);
        kv_u32(s, "qwen3moe.embedding_length", D);
        kv_u32(s, "qwen3moe.attention.head_count", NH);
        kv_u32(s, "qwen3moe.attention.head_count_kv", NKV);
        kv_u32(s, "qwen3moe.attention.key_length", HD);
        kv_u32(s, "qwen3moe.attention.value_length", HD);
        kv_f32(s, "qwen3moe.attention.layer_norm_rms_epsilon", 1e-6f);
        kv_f32(s, "qwen3moe.rope.freq_base", 1e6f);
        kv_u32(s, "qwen3moe.expert_count", E);
        kv_u32(s, "qwen3moe.expert_used_count", EU);
        kv_u32(s, "qwen3moe.expert_feed_forward_length", F);
    }
    for (int i = 0; i < N_WEIGHTS; i++) {
        if (!weights[i].gguf) continue;
        g_tensor *t = &s->t[s->n_t++];
        snprintf(t->name, sizeof t->name, "%s", weights[i].gguf);
        t->n_dims = (uint32_t)weights[i].n_dims;
        for (int d = 0; d < 8; d++) t->ne[d] = d < weights[i].n_dims ? (uint64_t)weights[i].ne[d] : 1;
        t->type = HM_TYPE_F32; t->offset = -1;
    }
}

static g_tensor *spec_tensor(g_spec *s, const char *name) {
    for (int i = 0; i < s->n_t; i++) if (!strcmp(s->t[i].name, name)) return &s->t[i];
    fprintf(stderr, "test_badinput: no tensor %s in the spec\n", name);
    abort();
}
static void spec_drop(g_spec *s, const char *name) {
    g_tensor *t = spec_tensor(s, name);
    memmove(t, t + 1, (size_t)(s->t + s->n_t - (t + 1)) * sizeof *t);
    s->n_t--;
}

/* Bytes of t's data as the builder lays it out; 0 when the shape or type is not one we can size
 * (the reader must refuse such a tensor before it looks at the data). */
static uint64_t g_nbytes(const g_tensor *t) {
    if (t->n_dims < 1 || t->n_dims > 4) return 0;
    uint64_t rows = 1;
    for (uint32_t d = 1; d < t->n_dims; d++) {
        if (t->ne[d] == 0 || t->ne[d] > (1u << 20) || rows * t->ne[d] > (1u << 20)) return 0;
        rows *= t->ne[d];
    }
    if (t->ne[0] > (1u << 20)) return 0;
    size_t rs = hm_row_size((int)t->type, (int64_t)t->ne[0]);
    return rs * rows > (1u << 24) ? 0 : rs * rows;
}

static void g_build(const g_spec *s, buf *out, g_marks *mk) {
    memset(out, 0, sizeof *out);
    b_u32(out, s->magic); b_u32(out, s->version);
    b_u64(out, s->n_tensors_hdr >= 0 ? (uint64_t)s->n_tensors_hdr : (uint64_t)s->n_t);
    b_u64(out, s->n_kv_hdr >= 0 ? (uint64_t)s->n_kv_hdr : s->n_kv);
    mk->kv = out->n;
    b_put(out, s->kv.p, s->kv.n);
    mk->infos = out->n;
    uint64_t off = 0, al = s->alignment;
    uint64_t offs[32];
    for (int i = 0; i < s->n_t; i++) {
        const g_tensor *t = &s->t[i];
        b_str(out, t->name); b_u32(out, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && d < 8; d++) b_u64(out, t->ne[d]);
        b_u32(out, t->type);
        offs[i] = off;
        b_u64(out, t->offset >= 0 ? (uint64_t)t->offset : off);
        off = (off + g_nbytes(t) + al - 1) / al * al;
    }
    b_zero(out, (al - out->n % al) % al);
    mk->data = out->n;
    for (int i = 0; i < s->n_t; i++) {
        /* small distinct values: inspect does not compute, but the bytes must be there */
        uint64_t n = g_nbytes(&s->t[i]);
        b_zero(out, mk->data + offs[i] - out->n);
        for (uint64_t j = 0; j < n; j++) b_u8(out, (uint8_t)(j * 7 + 1));
    }
    b_zero(out, mk->data + off - out->n);
    mk->end = out->n;
}

/* ---------------------------------------------------------------- HF directory builder */

typedef struct {
    char name[96];
    char dtype[16];
    int nd; int64_t shape[4];  /* HF order */
    const char *shape_json;    /* overrides shape in the header (data then 0 bytes) */
    const char *offs_json;     /* overrides data_offsets */
    int omit_dtype;
    int shard;                 /* 0: model.safetensors, else model-0000N-of-00002.safetensors */
} s_tensor;

typedef struct {
    char cfg[32][96]; int n_cfg;  /* "key": value fragments of config.json */
    const char *cfg_raw;          /* replaces config.json when set */
    s_tensor t[32]; int n_t;
    const char *header_raw;       /* replaces the safetensors header JSON when set */
    int64_t hlen_delta;           /* added to the written header length */
    int n_shards;                 /* 0: model.safetensors only; 2: index + two shards */
    const char *index_extra;      /* extra weight_map entries */
    const char *tokenizer_raw;    /* written as tokenizer.json when set */
    const char *tokenizer_copy;   /* copied to tokenizer.json when set */
} h_spec;

static void cfg_set(h_spec *h, const char *key, const char *val) {
    char frag[96]; snprintf(frag, sizeof frag, "\"%s\": %s", key, val);
    size_t kl = strlen(key) + 2;
    for (int i = 0; i < h->n_cfg; i++)
        if (!strncmp(h->cfg[i] + 1, key, kl - 2) && h->cfg[i][kl - 1] == '"') {
            if (val) snprintf(h->cfg[i], sizeof h->cfg[i], "%s", frag);
            else { memmove(h->cfg[i], h->cfg[i + 1], (size_t)(h->n_cfg - i - 1) * sizeof h->cfg[0]); h->n_cfg--; }
            return;
        }
    if (val) snprintf(h->cfg[h->n_cfg++], sizeof h->cfg[0], "%s", frag);
}

static int dtype_size(const char *dt) {
    static const struct { const char *n; int s; } t[] = { { "F32", 4 }, { "F16", 2 }, { "BF16", 2 }, { "I64", 8 }, { "I32", 4 } };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) if (!strcmp(dt, t[i].n)) return t[i].s;
    return 1;
}

static void h_base(h_spec *h) {
    memset(h, 0, sizeof *h);
    char v[32];
    cfg_set(h, "model_type", "\"qwen3_moe\"");
    cfg_set(h, "num_hidden_layers", "1");
    snprintf(v, sizeof v, "%d", D); cfg_set(h, "hidden_size", v);
    snprintf(v, sizeof v, "%d", NH); cfg_set(h, "num_attention_heads", v);
    snprintf(v, sizeof v, "%d", NKV); cfg_set(h, "num_key_value_heads", v);
    snprintf(v, sizeof v, "%d", HD); cfg_set(h, "head_dim", v);
    snprintf(v, sizeof v, "%d", V); cfg_set(h, "vocab_size", v);
    snprintf(v, sizeof v, "%d", F); cfg_set(h, "moe_intermediate_size", v);
    snprintf(v, sizeof v, "%d", EU); cfg_set(h, "num_experts_per_tok", v);
    snprintf(v, sizeof v, "%d", E); cfg_set(h, "num_experts", v);
    cfg_set(h, "rms_norm_eps", "1e-06");
    cfg_set(h, "rope_theta", "1000000.0");
    cfg_set(h, "norm_topk_prob", "true");
    cfg_set(h, "tie_word_embeddings", "false");
    for (int i = 0; i < N_WEIGHTS; i++) {
        if (!weights[i].hf) continue;
        s_tensor *t = &h->t[h->n_t++];
        snprintf(t->name, sizeof t->name, "%s", weights[i].hf);
        snprintf(t->dtype, sizeof t->dtype, "F32");
        t->nd = weights[i].n_dims;
        for (int d = 0; d < t->nd; d++) t->shape[d] = weights[i].ne[t->nd - 1 - d];
    }
}

static s_tensor *h_tensor(h_spec *h, const char *name) {
    for (int i = 0; i < h->n_t; i++) if (!strcmp(h->t[i].name, name)) return &h->t[i];
    fprintf(stderr, "test_badinput: no tensor %s in the HF spec\n", name);
    abort();
}

static uint64_t s_nbytes(const s_tensor *t) {
    if (t->shape_json) return 0;
    uint64_t n = (uint64_t)dtype_size(t->dtype);
    for (int d = 0; d < t->nd; d++) n *= (uint64_t)t->shape[d];
    return n;
}

static int h_write_shard(const h_spec *h, const char *dir, const char *fname, int shard) {
    buf hd = { 0 }, data = { 0 };
    if (h->header_raw) b_printf(&hd, "%s", h->header_raw);
    else {
        b_printf(&hd, "{\"__metadata__\": {\"format\": \"pt\"}");
        for (int i = 0; i < h->n_t; i++) {
            const s_tensor *t = &h->t[i];
            if (t->shard != shard) continue;
            uint64_t n = s_nbytes(t);
            b_printf(&hd, ", \"%s\": {", t->name);
            if (!t->omit_dtype) b_printf(&hd, "\"dtype\": \"%s\", ", t->dtype);
            if (t->shape_json) b_printf(&hd, "\"shape\": %s, ", t->shape_json);
            else {
                b_printf(&hd, "\"shape\": [");
                for (int d = 0; d < t->nd; d++) b_printf(&hd, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
                b_printf(&hd, "], ");
            }
            if (t->offs_json) b_printf(&hd, "\"data_offsets\": %s}", t->offs_json);
            else b_printf(&hd, "\"data_offsets\": [%llu, %llu]}", (unsigned long long)data.n, (unsigned long long)(data.n + n));
            for (uint64_t j = 0; j < n; j++) b_u8(&data, (uint8_t)(j % 61));
        }
        b_printf(&hd, "}");
    }
    while (hd.n % 8) b_u8(&hd, ' ');
    buf file = { 0 };
    b_u64(&file, (uint64_t)((int64_t)hd.n + h->hlen_delta));
    b_put(&file, hd.p, hd.n);
    if (data.n) b_put(&file, data.p, data.n);
    char path[1024]; snprintf(path, sizeof path, "%s/%s", dir, fname);
    int rc = write_file(path, file.p, file.n);
    free(hd.p); free(data.p); free(file.p);
    return rc;
}

static const char *shard_name(int shard) {
    return shard == 1 ? "model-00001-of-00002.safetensors" : shard == 2 ? "model-00002-of-00002.safetensors" : "model.safetensors";
}

static int h_write(const h_spec *h, const char *dir) {
    if (mkdir(dir, 0755) && errno != EEXIST) return -1;
    char path[1024];
    buf c = { 0 };
    if (h->cfg_raw) b_printf(&c, "%s", h->cfg_raw);
    else {
        b_printf(&c, "{");
        for (int i = 0; i < h->n_cfg; i++) b_printf(&c, "%s\n  %s", i ? "," : "", h->cfg[i]);
        b_printf(&c, "\n}\n");
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = write_file(path, c.p, c.n);
    free(c.p);
    if (rc) return -1;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (h->tokenizer_raw && write_file(path, h->tokenizer_raw, strlen(h->tokenizer_raw))) return -1;
    if (h->tokenizer_copy) {
        size_t n; hm_error e;
        char *t = hm_read_file(h->tokenizer_copy, &n, &e);
        if (!t) return -1;
        rc = write_file(path, t, n);
        free(t);
        if (rc) return -1;
    }
    if (!h->n_shards) return h_write_shard(h, dir, "model.safetensors", 0);
    buf ix = { 0 };
    b_printf(&ix, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < h->n_t; i++)
        b_printf(&ix, "%s\"%s\": \"%s\"", i ? ", " : "", h->t[i].name, shard_name(h->t[i].shard));
    if (h->index_extra) b_printf(&ix, ", %s", h->index_extra);
    b_printf(&ix, "}}\n");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    rc = write_file(path, ix.p, ix.n);
    free(ix.p);
    for (int s = 1; s <= h->n_shards && !rc; s++) {
        int used = 0;
        for (int i = 0; i < h->n_t; i++) used |= h->t[i].shard == s;
        if (used) rc = h_write_shard(h, dir, shard_name(s), s);
    }
    return rc;
}

/* ---------------------------------------------------------------- running the CLI */

typedef struct { int exited, status, signaled, timed_out; char err[8192]; } run_result;

static int run_inspect(const char *model, run_result *r) {
    memset(r, 0, sizeof *r);
    char errpath[600]; snprintf(errpath, sizeof errpath, "%s/stderr.txt", tmp);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char *argv[] = { (char *)HM_HOTMOE_BIN, (char *)"inspect", (char *)"-m", (char *)model, NULL };
    pid_t pid;
    int rc = posix_spawn(&pid, HM_HOTMOE_BIN, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) { snprintf(r->err, sizeof r->err, "posix_spawn %s: %s", HM_HOTMOE_BIN, strerror(rc)); return -1; }
    int st = 0;
    /* a hang is a failure too: poll for up to 60 s */
    for (int ms = 0;; ms += 5) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) return -1;
        if (ms > 60000) { kill(pid, SIGKILL); waitpid(pid, &st, 0); r->timed_out = 1; break; }
        nanosleep(&(struct timespec){ 0, 5000000 }, NULL);
    }
    r->exited = WIFEXITED(st); r->status = r->exited ? WEXITSTATUS(st) : 0;
    r->signaled = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    FILE *f = fopen(errpath, "rb");
    if (f) { size_t n = fread(r->err, 1, sizeof r->err - 1, f); r->err[n] = 0; fclose(f); }
    return 0;
}

/* ---------------------------------------------------------------- checks */

/* dst = src, truncated to cap, with newlines shown as '|' so a case prints on one line */
static void chomp_copy(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++) dst[i] = src[i] == '\n' ? '|' : src[i];
    dst[i] = 0;
}

/* Does msg contain one of the |-separated alternatives in w (case-insensitive)? */
static int has_any(const char *msg, const char *w) {
    char alt[256];
    for (const char *p = w;;) {
        const char *q = strchr(p, '|');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        snprintf(alt, sizeof alt, "%.*s", (int)n, p);
        if (strcasestr(msg, alt)) return 1;
        if (!q) return 0;
        p = q + 1;
    }
}

/* Each keyword of the ;-separated list (each a|b|c of alternatives) must occur in msg.
 * Returns the first one missing, or NULL. */
static const char *missing_word(const char *msg, const char *words) {
    static char w[256];
    const char *p = words;
    while (*p) {
        const char *q = strchr(p, ';');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        snprintf(w, sizeof w, "%.*s", (int)n, p);
        if (n && !has_any(msg, w)) return w;
        p += n + (q ? 1 : 0);
    }
    return NULL;
}

/* One case: path must be refused by the CLI and by model_load, both naming path and every word. */
static void expect_refused(const char *label, const char *path, const char *words) {
    char why[1024] = "", seen[1024] = "";
    run_result r;
    if (run_inspect(path, &r)) snprintf(why, sizeof why, "cannot run the CLI: %.900s", r.err);
    else {
        chomp_copy(seen, sizeof seen, r.err);
        size_t len = strlen(r.err);
        const char *nl = strchr(r.err, '\n');
        const char *mw = missing_word(r.err, words);
        if (r.timed_out) snprintf(why, sizeof why, "CLI timed out after 60 s");
        else if (r.signaled) snprintf(why, sizeof why, "CLI killed by signal %d (%s)", r.signaled, strsignal(r.signaled));
        else if (!r.exited || r.status == 0) snprintf(why, sizeof why, "CLI exit status %d, expected non-zero", r.status);
        else if (!len || !nl || nl != r.err + len - 1 || nl == r.err) snprintf(why, sizeof why, "stderr is not exactly one line");
        else if (!strstr(r.err, path)) snprintf(why, sizeof why, "stderr does not name the file %s", path);
        else if (mw) snprintf(why, sizeof why, "stderr lacks '%s'", mw);
    }
    if (!why[0]) {
        hm_model m; hm_error e; e.msg[0] = 0;
        int rc = model_load(&m, path, &e);
        const char *mw = missing_word(e.msg, words);
        if (rc == 0) { snprintf(why, sizeof why, "model_load accepted it"); model_free(&m); }
        else if (!e.msg[0]) snprintf(why, sizeof why, "model_load returned -1 with an empty message");
        else if (mw) snprintf(why, sizeof why, "model_load message lacks '%.100s': %.800s", mw, e.msg);
    }
    if (why[0]) { n_fail++; printf("FAIL %-34s %s; stderr: %s\n", label, why, seen); }
    else { n_pass++; printf("PASS %-34s %s\n", label, seen); }
    fflush(stdout);
}

static void expect_loads(const char *label, const char *path) {
    run_result r;
    hm_model m; hm_error e; e.msg[0] = 0;
    int rc = run_inspect(path, &r);
    int ok = !rc && r.exited && r.status == 0;
    int lrc = model_load(&m, path, &e);
    if (!lrc) model_free(&m);
    char seen[1024]; chomp_copy(seen, sizeof seen, r.err);
    if (ok && !lrc) { n_pass++; printf("PASS %-34s loads (control)\n", label); }
    else { n_fail++; printf("FAIL %-34s the valid control must load: CLI status %d, stderr: %s; model_load: %s\n", label, r.status, seen, lrc ? e.msg : "ok"); }
    fflush(stdout);
}

/* ---------------------------------------------------------------- GGUF cases */

static void gguf_case_raw(const char *label, const uint8_t *p, size_t n, const char *words) {
    char path[1024]; snprintf(path, sizeof path, "%s/%s.gguf", tmp, label);
    if (write_file(path, p, n)) { n_fail++; printf("FAIL %-34s cannot write %s\n", label, path); return; }
    expect_refused(label, path, words);
}

/* Builds s, optionally truncated to trunc bytes (0: whole), and expects it refused. Frees s. */
static void gguf_case(const char *label, g_spec *s, size_t trunc, const char *words) {
    buf b; g_marks mk;
    g_build(s, &b, &mk);
    gguf_case_raw(label, b.p, trunc ? trunc : b.n, words);
    free(b.p);
    spec_free(s);
}

static void gguf_cases(void) {
    g_spec s; buf b; g_marks mk;
    char path[1024];

    spec_base(&s, 1);
    g_build(&s, &b, &mk);
    snprintf(path, sizeof path, "%s/base.gguf", tmp);
    write_file(path, b.p, b.n);
    expect_loads("gguf_base", path);
    /* truncations at each section of the valid file */
    size_t cuts[][2] = { { 6, 0 }, { 20, 0 }, { mk.kv + 5, 0 }, { (mk.kv + mk.infos) / 2, 0 }, { mk.infos + 3, 0 },
                         { (mk.infos + mk.data) / 2, 0 }, { mk.data, 1 }, { (mk.data + mk.end) / 2, 1 }, { mk.end - 1, 1 } };
    const char *cut_names[] = { "trunc_header_version", "trunc_header_counts", "trunc_kv_first", "trunc_kv_middle",
                                "trunc_infos_first", "trunc_infos_middle", "trunc_data_start", "trunc_data_middle",
                                "trunc_data_last_byte" };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        /* a cut inside the metadata may first fail the count bound (counts x minimum entry size <= file size) */
        gguf_case_raw(cut_names[i], b.p, cuts[i][0], cuts[i][1] ? "data;truncated" : "truncated|count: expected at most");
    gguf_case_raw("empty_file", b.p, 0, "truncated;magic");
    free(b.p);
    spec_free(&s);

    spec_base(&s, 1); s.magic = 0x58554747u; gguf_case("bad_magic", &s, 0, "magic;expected");
    spec_base(&s, 1); s.magic = 0x47475546u; gguf_case("big_endian_magic", &s, 0, "magic;big-endian");
    spec_base(&s, 1); s.version = 1; gguf_case("version_1", &s, 0, "version;expected 2 or 3;found 1");
    spec_base(&s, 1); s.version = 4; gguf_case("version_4", &s, 0, "version;expected 2 or 3;found 4");
    spec_base(&s, 1); s.n_tensors_hdr = (int64_t)1 << 40; gguf_case("tensor_count_huge", &s, 0, "tensor count;expected");
    spec_base(&s, 1); s.n_kv_hdr = (int64_t)1 << 40; gguf_case("kv_count_huge", &s, 0, "metadata count;expected");
    spec_base(&s, 1); s.n_kv_hdr = (int64_t)s.n_kv + 1; gguf_case("kv_count_plus_one", &s, 0, "expected");

    /* tensor infos */
    spec_base(&s, 1); spec_tensor(&s, "blk.0.attn_q.weight")->offset = (int64_t)1 << 30;
    gguf_case("offset_out_of_range", &s, 0, "blk.0.attn_q.weight;data;expected within");
    spec_base(&s, 1); spec_tensor(&s, "blk.0.attn_q.weight")->offset = INT64_MAX - 31;
    gguf_case("offset_near_2^63", &s, 0, "blk.0.attn_q.weight;expected");
    spec_base(&s, 1); spec_tensor(&s, "blk.0.attn_k.weight")->offset = 4;
    gguf_case("offset_misaligned", &s, 0, "blk.0.attn_k.weight;offset;multiple of alignment");
    spec_base(&s, 1); { g_tensor *t = spec_tensor(&s, "token_embd.weight"); t->ne[0] = t->ne[1] = (uint64_t)1 << 40; }
    gguf_case("shape_product_huge", &s, 0, "token_embd.weight;expected <= 2^50");
    spec_base(&s, 1); { g_tensor *t = spec_tensor(&s, "blk.0.ffn_gate_exps.weight"); t->ne[1] = t->ne[2] = (uint64_t)1 << 26; }
    gguf_case("shape_bytes_huge", &s, 0, "blk.0.ffn_gate_exps.weight;expected");
    spec_base(&s, 1); spec_tensor(&s, "output_norm.weight")->ne[0] = (uint64_t)1 << 41;
    gguf_case("dim_over_2^40", &s, 0, "output_norm.weight;dimension 0");
    spec_base(&s, 1); spec_tensor(&s, "output.weight")->ne[1] = 0;
    gguf_case("dim_zero", &s, 0, "output.weight;dimension 1");
    spec_base(&s, 1); spec_tensor(&s, "output.weight")->ne[1] = UINT64_MAX;
    gguf_case("dim_2^64-1", &s, 0, "output.weight;dimension 1");
    spec_base(&s, 1); spec_tensor(&s, "blk.0.attn_norm.weight")->n_dims = 0;
    gguf_case("n_dims_0", &s, 0, "blk.0.attn_norm.weight;n_dims;found 0");
    spec_base(&s, 1); spec_tensor(&s, "blk.0.attn_norm.weight")->n_dims = 5;
    gguf_case("n_dims_5", &s, 0, "blk.0.attn_norm.weight;n_dims;found 5");
    spec_base(&s, 1); spec_tensor(&s, "blk.0.attn_v.weight")->type = 200;
    gguf_case("type_200", &s, 0, "blk.0.attn_v.weight;type;200");
    spec_base(&s, 1); spec_tensor(&s, "blk.0.attn_v.weight")->type = 4; /* Q4_2: removed from ggml */
    gguf_case("type_4_removed", &s, 0, "blk.0.attn_v.weight;type;found 4");
    spec_base(&s, 1); spec_tensor(&s, "blk.0.attn_v.weight")->type = UINT32_MAX;
    gguf_case("type_2^32-1", &s, 0, "blk.0.attn_v.weight;type");
    if (hm_type_get(HM_TYPE_Q8_0)) {
        spec_base(&s, 1); { g_tensor *t = spec_tensor(&s, "blk.0.ffn_norm.weight"); t->type = HM_TYPE_Q8_0; t->ne[0] = 33; }
        gguf_case("q8_0_row_33", &s, 0, "blk.0.ffn_norm.weight;row length;multiple;32;found 33");
    }
    spec_base(&s, 1); spec_drop(&s, "blk.0.attn_q.weight");
    gguf_case("missing_attn_q", &s, 0, "blk.0.attn_q.weight;expected present");
    spec_base(&s, 1); spec_drop(&s, "blk.0.ffn_down_exps.weight");
    gguf_case("missing_ffn_down_exps", &s, 0, "blk.0.ffn_down_exps.weight;expected present");
    spec_base(&s, 1); spec_drop(&s, "token_embd.weight");
    gguf_case("missing_token_embd", &s, 0, "token_embd.weight;expected present");
    spec_base(&s, 1); spec_tensor(&s, "blk.0.attn_k.weight")->ne[1] = NKV * HD + 1;
    gguf_case("misshaped_attn_k", &s, 0, "blk.0.attn_k.weight;shape expected");
    spec_base(&s, 1); spec_tensor(&s, "blk.0.ffn_up_exps.weight")->ne[2] = E - 1;
    gguf_case("misshaped_up_exps_experts", &s, 0, "blk.0.ffn_up_exps.weight;shape expected");
    spec_base(&s, 1); { g_tensor *t = spec_tensor(&s, "blk.0.attn_q_norm.weight"); t->n_dims = 2; t->ne[1] = 2; }
    gguf_case("misshaped_q_norm_2d", &s, 0, "blk.0.attn_q_norm.weight;shape expected");
    /* names from the file are quoted in messages: a newline or escape in one must not split the line */
    spec_base(&s, 1); { g_tensor *t = spec_tensor(&s, "blk.0.attn_v.weight"); snprintf(t->name, 96, "evil\nhotmoe: ok\x1b[2J"); t->type = 200; }
    gguf_case("control_chars_in_name", &s, 0, "evil;type");
    spec_base(&s, 1); snprintf(spec_tensor(&s, "blk.0.attn_v.weight")->name, 96, "blk.0.attn_k.weight");
    gguf_case("duplicate_tensor_name", &s, 0, "blk.0.attn_k.weight;duplicate");

    /* metadata values */
    spec_base(&s, 1); kv_key(&s, "test.nested", GGUF_ARR); b_u32(&s.kv, GGUF_ARR); b_u64(&s.kv, 1);
    b_u32(&s.kv, GGUF_U32); b_u64(&s.kv, 1); b_u32(&s.kv, 7);
    gguf_case("nested_array", &s, 0, "test.nested;array element type;found 9");
    spec_base(&s, 1); kv_key(&s, "qwen3moe.expert_weights_norm", GGUF_BOOL); b_u8(&s.kv, 7);
    gguf_case("bool_7", &s, 0, "qwen3moe.expert_weights_norm;bool;found 7");
    spec_base(&s, 1); kv_key(&s, "test.bad_vtype", 13); b_u32(&s.kv, 0);
    gguf_case("value_type_13", &s, 0, "test.bad_vtype;value type;found 13");
    spec_base(&s, 1); kv_key(&s, "general.description", GGUF_STR); b_u64(&s.kv, (uint64_t)1 << 40);
    gguf_case("string_length_past_eof", &s, 0, "general.description;truncated");
    spec_base(&s, 1); b_u64(&s.kv, UINT64_MAX); s.n_kv++;
    gguf_case("key_length_2^64-1", &s, 0, "metadata key;truncated");
    spec_base(&s, 1); kv_key(&s, "test.arr", GGUF_ARR); b_u32(&s.kv, GGUF_STR); b_u64(&s.kv, (uint64_t)1 << 61);
    gguf_case("string_array_count_huge", &s, 0, "test.arr;array");
    spec_base(&s, 1); kv_key(&s, "test.arr", GGUF_ARR); b_u32(&s.kv, GGUF_U64); b_u64(&s.kv, (uint64_t)1 << 61);
    gguf_case("u64_array_count_huge", &s, 0, "test.arr;array");
    spec_base(&s, 1); kv_key(&s, "test.arr", GGUF_ARR); b_u32(&s.kv, 77); b_u64(&s.kv, 1);
    gguf_case("array_element_type_77", &s, 0, "test.arr;array element type;found 77");
    spec_base(&s, 1); kv_u32(&s, "general.alignment", 48);
    gguf_case("alignment_48", &s, 0, "general.alignment;power of two");
    spec_base(&s, 1); kv_u32(&s, "general.alignment", 0);
    gguf_case("alignment_0", &s, 0, "general.alignment;power of two");
    spec_base(&s, 1); kv_key(&s, "general.alignment", GGUF_STR); b_str(&s.kv, "32");
    gguf_case("alignment_string", &s, 0, "general.alignment;u32");

    /* metadata the loader needs */
    spec_base(&s, 0);
    kv_u32(&s, "qwen3moe.block_count", 1);
    gguf_case("no_architecture", &s, 0, "general.architecture;expected");
    spec_base(&s, 0); kv_str(&s, "general.architecture", "llama");
    gguf_case("architecture_llama", &s, 0, "general.architecture;llama");
    spec_base(&s, 0); kv_str(&s, "general.architecture", "qwen3moe");
    gguf_case("no_block_count", &s, 0, "qwen3moe.block_count;expected");
    spec_base(&s, 0); kv_str(&s, "general.architecture", "qwen3moe"); kv_str(&s, "qwen3moe.block_count", "1");
    gguf_case("block_count_string", &s, 0, "qwen3moe.block_count;integer;string");
    {   /* hyperparameters: the minimal key set with one value wrong */
        spec_base(&s, 0);
        const char *a = "qwen3moe";
        char k[128];
        kv_str(&s, "general.architecture", a);
#define K(name, v) (snprintf(k, sizeof k, "%s." name, a), kv_u32(&s, k, v))
        K("block_count", 1); K("embedding_length", D); K("attention.head_count", NH); K("attention.head_count_kv", NKV);
        K("attention.key_length", HD); K("expert_count", E); K("expert_used_count", E + 1); K("expert_feed_forward_length", F);
        gguf_case("expert_used_gt_count", &s, 0, "n_expert_used");
        spec_base(&s, 0); kv_str(&s, "general.architecture", a);
        K("block_count", 1); K("embedding_length", D); K("attention.head_count", NH); K("attention.head_count_kv", 3);
        K("attention.key_length", HD); K("expert_count", E); K("expert_used_count", EU); K("expert_feed_forward_length", F);
        gguf_case("head_count_kv_3_of_2", &s, 0, "n_head_kv");
        spec_base(&s, 0); kv_str(&s, "general.architecture", a);
        K("block_count", 1); K("embedding_length", D); K("attention.head_count", NH); K("attention.key_length", HD);
        K("attention.value_length", HD * 2); K("expert_count", E); K("expert_used_count", EU); K("expert_feed_forward_length", F);
        gguf_case("value_length_ne_key_length", &s, 0, "value_length");
        spec_base(&s, 0); kv_str(&s, "general.architecture", a);
        K("block_count", 1); K("embedding_length", D); K("attention.head_count", NH); K("attention.key_length", HD);
        K("expert_count", E); K("expert_used_count", EU); K("expert_feed_forward_length", 0x7fffffff);
        K("expert_shared_count", 2);
        gguf_case("shexp_width_overflow", &s, 0, "expected");
        spec_base(&s, 0); kv_str(&s, "general.architecture", a);
        K("block_count", 1); K("embedding_length", D); K("attention.head_count", NH); K("attention.key_length", HD);
        K("expert_count", E); K("expert_used_count", EU); K("expert_feed_forward_length", F); K("nextn_predict_layers", 1);
        gguf_case("nextn_eq_block_count", &s, 0, "nextn_predict_layers");
        spec_base(&s, 0); kv_str(&s, "general.architecture", a);
        K("block_count", 0xffffffffu); K("embedding_length", D); K("attention.head_count", NH);
        K("expert_count", E); K("expert_used_count", EU); K("expert_feed_forward_length", F);
        gguf_case("block_count_2^32-1", &s, 0, "block_count");
#undef K
    }
}

/* ---------------------------------------------------------------- GGUF tokenizer metadata */

/* Appends kv (from a parsed file) to s unchanged. */
static void kv_copy(g_spec *s, const gguf_kv *kv) {
    static const int size[GGUF_VTYPE_COUNT] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    kv_key(s, kv->key, (uint32_t)kv->type);
    if (kv->type == GGUF_STR) { b_u64(&s->kv, kv->str.len); b_put(&s->kv, kv->str.s, kv->str.len); return; }
    if (kv->type == GGUF_ARR) {
        b_u32(&s->kv, (uint32_t)kv->arr_type); b_u64(&s->kv, kv->arr_n);
        if (kv->arr_type == GGUF_STR)
            for (uint64_t i = 0; i < kv->arr_n; i++) { b_u64(&s->kv, kv->arr_str[i].len); b_put(&s->kv, kv->arr_str[i].s, kv->arr_str[i].len); }
        else b_put(&s->kv, kv->arr_data, kv->arr_n * (size_t)size[kv->arr_type]);
        return;
    }
    if (kv->type == GGUF_F32) { b_f32(&s->kv, (float)kv->v.f); return; }
    if (kv->type == GGUF_F64) { b_put(&s->kv, &kv->v.f, 8); return; }
    if (kv->type == GGUF_BOOL) { b_u8(&s->kv, kv->v.b); return; }
    b_put(&s->kv, &kv->v.u, (size_t)size[kv->type]); /* little-endian: the low bytes */
}

/* The tiny model with src's tokenizer.* metadata (but skip) and a vocabulary of n_vocab rows. */
static void spec_with_tokenizer(g_spec *s, const gguf_file *src, const char *skip, uint64_t n_vocab) {
    spec_base(s, 1);
    for (uint64_t i = 0; i < src->n_kv; i++)
        if (!strncmp(src->kv[i].key, "tokenizer.", 10) && (!skip || strcmp(src->kv[i].key, skip))) kv_copy(s, &src->kv[i]);
    spec_tensor(s, "token_embd.weight")->ne[1] = n_vocab;
    spec_tensor(s, "output.weight")->ne[1] = n_vocab;
}

static void tokenizer_cases(const char *converted) {
    gguf_file src; hm_error e;
    if (gguf_open(&src, converted, &e)) { n_fail++; printf("FAIL %-34s %s\n", "tok_source", e.msg); return; }
    const gguf_kv *toks = gguf_find_kv(&src, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_ARR) { n_fail++; printf("FAIL %-34s %s has no tokenizer.ggml.tokens\n", "tok_source", converted); gguf_close(&src); return; }
    uint64_t nv = toks->arr_n;
    g_spec s; buf b; g_marks mk;
    char path[1024];
    spec_with_tokenizer(&s, &src, NULL, nv);
    g_build(&s, &b, &mk);
    snprintf(path, sizeof path, "%s/tok_base.gguf", tmp);
    write_file(path, b.p, b.n);
    free(b.p); spec_free(&s);
    expect_loads("tok_base", path);

    /* a tokenizer that can emit ids past the embedding table: generate would read out of bounds */
    spec_with_tokenizer(&s, &src, NULL, 32);
    gguf_case("tok_vocab_gt_model_vocab", &s, 0, "tokenizer;vocab");
    spec_with_tokenizer(&s, &src, "tokenizer.ggml.tokens", nv);
    kv_key(&s, "tokenizer.ggml.tokens", GGUF_ARR); b_u32(&s.kv, GGUF_I32); b_u64(&s.kv, 1); b_u32(&s.kv, 5);
    gguf_case("tok_tokens_not_strings", &s, 0, "tokenizer.ggml.tokens;strings");
    spec_with_tokenizer(&s, &src, "tokenizer.ggml.tokens", nv);
    kv_key(&s, "tokenizer.ggml.tokens", GGUF_ARR); b_u32(&s.kv, GGUF_STR); b_u64(&s.kv, 0);
    gguf_case("tok_tokens_empty", &s, 0, "tokenizer.ggml.tokens");
    spec_with_tokenizer(&s, &src, "tokenizer.ggml.token_type", nv);
    kv_key(&s, "tokenizer.ggml.token_type", GGUF_ARR); b_u32(&s.kv, GGUF_I32); b_u64(&s.kv, 3);
    for (int i = 0; i < 3; i++) b_u32(&s.kv, 1);
    gguf_case("tok_token_type_count", &s, 0, "tokenizer.ggml.token_type");
    spec_with_tokenizer(&s, &src, "tokenizer.ggml.token_type", nv);
    kv_key(&s, "tokenizer.ggml.token_type", GGUF_ARR); b_u32(&s.kv, GGUF_I32); b_u64(&s.kv, nv);
    for (uint64_t i = 0; i < nv; i++) b_u32(&s.kv, 99);
    gguf_case("tok_token_type_99", &s, 0, "type;99");
    spec_with_tokenizer(&s, &src, "tokenizer.ggml.token_type", nv);
    kv_key(&s, "tokenizer.ggml.token_type", GGUF_ARR); b_u32(&s.kv, GGUF_F32); b_u64(&s.kv, nv);
    for (uint64_t i = 0; i < nv; i++) b_f32(&s.kv, 1e30f);
    gguf_case("tok_token_type_f32", &s, 0, "tokenizer.ggml.token_type;integers");
    spec_with_tokenizer(&s, &src, "tokenizer.ggml.merges", nv);
    gguf_case("tok_merges_missing", &s, 0, "tokenizer.ggml.merges");
    spec_with_tokenizer(&s, &src, "tokenizer.ggml.merges", nv);
    kv_key(&s, "tokenizer.ggml.merges", GGUF_ARR); b_u32(&s.kv, GGUF_STR); b_u64(&s.kv, 1); b_str(&s.kv, "abc");
    gguf_case("tok_merge_without_space", &s, 0, "tokenizer.ggml.merges");
    spec_with_tokenizer(&s, &src, "tokenizer.ggml.bos_token_id", nv);
    kv_u32(&s, "tokenizer.ggml.bos_token_id", 100000);
    gguf_case("tok_bos_out_of_range", &s, 0, "tokenizer.ggml.bos_token_id");
    spec_with_tokenizer(&s, &src, "tokenizer.ggml.model", nv);
    kv_str(&s, "tokenizer.ggml.model", "llama");
    gguf_case("tok_model_llama", &s, 0, "tokenizer.ggml.model");
    spec_with_tokenizer(&s, &src, "tokenizer.ggml.pre", nv);
    kv_str(&s, "tokenizer.ggml.pre", "no-such-pre");
    gguf_case("tok_pre_unknown", &s, 0, "tokenizer.ggml.pre");
    gguf_close(&src);
}

/* ---------------------------------------------------------------- HF cases */

static int hf_n;
static void hf_case(const char *label, h_spec *h, const char *words) {
    char dir[1024]; snprintf(dir, sizeof dir, "%s/hf%02d_%s", tmp, hf_n++, label);
    if (h_write(h, dir)) { n_fail++; printf("FAIL %-34s cannot write %s\n", label, dir); return; }
    expect_refused(label, dir, words);
}

static void hf_cases(void) {
    h_spec h;
    char dir[1024];
    h_base(&h);
    snprintf(dir, sizeof dir, "%s/hf_base", tmp);
    if (h_write(&h, dir)) { n_fail++; printf("FAIL hf_base cannot write %s\n", dir); }
    else expect_loads("hf_base", dir);
    h_base(&h); h.n_shards = 2;
    for (int i = 0; i < h.n_t; i++) h.t[i].shard = 1 + (i % 2);
    snprintf(dir, sizeof dir, "%s/hf_base_sharded", tmp);
    if (h_write(&h, dir)) { n_fail++; printf("FAIL hf_base_sharded cannot write %s\n", dir); }
    else expect_loads("hf_base_sharded", dir);

    h_base(&h); h.hlen_delta = 1 << 20; hf_case("st_header_len_past_eof", &h, "model.safetensors;header length");
    h_base(&h); h.hlen_delta = INT64_MIN / 2; hf_case("st_header_len_huge", &h, "model.safetensors;header length");
    h_base(&h); h.header_raw = "{\"a\": {\"dtype\": \"F32\", "; hf_case("st_header_not_json", &h, "model.safetensors;header;JSON");
    h_base(&h); h.header_raw = "[1, 2, 3]"; hf_case("st_header_array", &h, "model.safetensors;header;JSON object");
    h_base(&h); h.header_raw = "\"str\""; hf_case("st_header_string", &h, "model.safetensors;header;JSON object");
    h_base(&h); h_tensor(&h, "model.norm.weight")->omit_dtype = 1;
    hf_case("st_tensor_no_dtype", &h, "model.norm.weight;dtype");
    h_base(&h); h_tensor(&h, "model.norm.weight")->offs_json = "[0, 1000000000]";
    hf_case("st_offsets_past_eof", &h, "model.norm.weight;data_offsets");
    h_base(&h); h_tensor(&h, "model.norm.weight")->offs_json = "[64, 0]";
    hf_case("st_offsets_reversed", &h, "model.norm.weight;data_offsets");
    h_base(&h); h_tensor(&h, "model.norm.weight")->offs_json = "[-128, 0]";
    hf_case("st_offsets_negative", &h, "model.norm.weight;data_offsets");
    h_base(&h); h_tensor(&h, "model.norm.weight")->offs_json = "[0]";
    hf_case("st_offsets_one_number", &h, "model.norm.weight;data_offsets");
    h_base(&h); h_tensor(&h, "model.norm.weight")->offs_json = "[0, 4]";
    hf_case("st_data_size_ne_shape", &h, "model.norm.weight;data size;expected 128");
    h_base(&h); snprintf(h_tensor(&h, "model.norm.weight")->dtype, 16, "I64");
    hf_case("st_required_tensor_i64", &h, "model.norm.weight;dtype;I64");
    h_base(&h); snprintf(h_tensor(&h, "model.norm.weight")->dtype, 16, "Q9_X");
    hf_case("st_unknown_dtype", &h, "model.norm.weight;dtype;Q9_X");
    h_base(&h); h_tensor(&h, "model.norm.weight")->shape_json = "[-32]";
    hf_case("st_shape_negative", &h, "model.norm.weight;shape");
    h_base(&h); h_tensor(&h, "model.norm.weight")->shape_json = "[1e300]";
    hf_case("st_shape_1e300", &h, "model.norm.weight;shape");
    h_base(&h); h_tensor(&h, "model.norm.weight")->shape_json = "[1000000000000, 1000000000000]";
    hf_case("st_shape_product_overflow", &h, "model.norm.weight;shape");
    h_base(&h); h_tensor(&h, "model.norm.weight")->shape_json = "[2, 2, 2, 2, 2]";
    hf_case("st_shape_5_dims", &h, "model.norm.weight;shape");
    h_base(&h); h_tensor(&h, "model.norm.weight")->shape_json = "[\"32\"]";
    hf_case("st_shape_string_dim", &h, "model.norm.weight;shape");
    h_base(&h); h_tensor(&h, "model.layers.0.self_attn.k_proj.weight")->shape[0] = NKV * HD + 2;
    hf_case("st_misshaped_k_proj", &h, "model.layers.0.self_attn.k_proj.weight;shape expected");
    h_base(&h); h.n_t--; /* drops the fused gate_up_proj, the last row */
    hf_case("st_missing_experts", &h, "model.layers.0.mlp.experts");
    h_base(&h); snprintf(h_tensor(&h, "model.layers.0.self_attn.q_proj.weight")->name, 96, "model.layers.0.self_attn.qproj.weight");
    hf_case("st_missing_q_proj", &h, "model.layers.0.self_attn.q_proj.weight;expected present");

    /* config.json */
    h_base(&h); h.cfg_raw = "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 32,";
    hf_case("cfg_malformed", &h, "config.json;JSON");
    h_base(&h); h.cfg_raw = "[\"qwen3_moe\"]";
    hf_case("cfg_not_object", &h, "config.json;JSON object");
    h_base(&h); cfg_set(&h, "hidden_size", NULL); hf_case("cfg_no_hidden_size", &h, "config.json;hidden_size;expected");
    h_base(&h); cfg_set(&h, "num_hidden_layers", "\"1\""); hf_case("cfg_layers_string", &h, "config.json;num_hidden_layers;integer");
    h_base(&h); cfg_set(&h, "num_hidden_layers", "1.5"); hf_case("cfg_layers_fraction", &h, "config.json;num_hidden_layers;integer");
    h_base(&h); cfg_set(&h, "num_hidden_layers", "1e12"); hf_case("cfg_layers_1e12", &h, "config.json;num_hidden_layers");
    h_base(&h); cfg_set(&h, "num_hidden_layers", "0"); hf_case("cfg_layers_0", &h, "config.json;n_layer");
    h_base(&h); cfg_set(&h, "model_type", "\"mixtral\""); hf_case("cfg_model_type_unknown", &h, "config.json;model_type;mixtral");
    h_base(&h); cfg_set(&h, "model_type", NULL); hf_case("cfg_no_model_type", &h, "config.json;model_type");
    h_base(&h); cfg_set(&h, "norm_topk_prob", "\"yes\""); hf_case("cfg_bool_string", &h, "config.json;norm_topk_prob;true or false");
    h_base(&h); cfg_set(&h, "num_experts_per_tok", "9"); hf_case("cfg_topk_gt_experts", &h, "config.json;n_expert_used");
    h_base(&h); cfg_set(&h, "partial_rotary_factor", "1e30"); hf_case("cfg_rotary_factor_1e30", &h, "config.json;partial_rotary_factor|n_rot");
    h_base(&h); cfg_set(&h, "model_type", "\"glm4_moe\""); cfg_set(&h, "n_routed_experts", "4");
    cfg_set(&h, "moe_intermediate_size", "2000000000"); cfg_set(&h, "n_shared_experts", "2");
    hf_case("cfg_shexp_width_overflow", &h, "expected");

    /* tokenizer.json */
    h_base(&h); h.tokenizer_raw = "{\"model\": {\"type\": \"BPE\", ";
    hf_case("tokenizer_json_malformed", &h, "tokenizer.json;JSON");
    h_base(&h); h.tokenizer_copy = HM_TESTS_DIR "/fixtures/qwen3moe/tokenizer.json"; /* 500 tokens, 32 embedding rows */
    hf_case("tokenizer_vocab_gt_model_vocab", &h, "tokenizer;vocab");

    /* sharded checkpoints */
    h_base(&h); h.n_shards = 2; for (int i = 0; i < h.n_t; i++) h.t[i].shard = 1;
    h.index_extra = "\"model.extra.weight\": \"model-00002-of-00002.safetensors\"";
    hf_case("index_missing_shard", &h, "model-00002-of-00002.safetensors;cannot open");
    h_base(&h); h.n_shards = 2; for (int i = 0; i < h.n_t; i++) h.t[i].shard = 1 + (i % 2);
    h.index_extra = "\"model.extra.weight\": \"model-00002-of-00002.safetensors\"";
    hf_case("index_tensor_not_in_shard", &h, "model.extra.weight;expected the tensor");
    h_base(&h); h.n_shards = 2; for (int i = 0; i < h.n_t; i++) h.t[i].shard = 1 + (i % 2);
    h.index_extra = "\"model.extra.weight\": \"../model.safetensors\"";
    hf_case("index_path_escape", &h, "weight_map;same directory");
    h_base(&h); h.n_shards = 2; for (int i = 0; i < h.n_t; i++) h.t[i].shard = 1 + (i % 2);
    h.index_extra = "\"model.extra.weight\": 7";
    hf_case("index_value_not_string", &h, "weight_map;model.extra.weight");
    h_base(&h); h.n_shards = 2;
    for (int i = 0; i < h.n_t; i++) h.t[i].shard = 1 + (i % 2);
    h.t[h.n_t] = h.t[0]; h.t[h.n_t].shard = 2 - (h.t[0].shard - 1); h.n_t++; /* the same name in both shards */
    hf_case("duplicate_across_shards", &h, "model.embed_tokens.weight;expected once");
}

/* ---------------------------------------------------------------- a real converted model, truncated */

static void converted_cases(void) {
    char out[1024], log[1024];
    snprintf(out, sizeof out, "%s/converted.gguf", tmp);
    snprintf(log, sizeof log, "%s/convert.txt", tmp);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' convert '%s/fixtures/qwen3moe' -o '%s' >'%s' 2>&1", HM_HOTMOE_BIN, HM_TESTS_DIR, out, log);
    if (system(cmd) != 0) {
        n_fail++;
        printf("FAIL %-34s hotmoe convert of tests/fixtures/qwen3moe failed (see %s)\n", "converted_fixture", log);
        return;
    }
    size_t n; hm_error e;
    char *b = hm_read_file(out, &n, &e);
    if (!b) { n_fail++; printf("FAIL %-34s %s\n", "converted_fixture", e.msg); return; }
    expect_loads("converted_fixture", out);
    gguf_case_raw("converted_trunc_half", (uint8_t *)b, n / 2, "truncated");
    gguf_case_raw("converted_trunc_minus_1", (uint8_t *)b, n - 1, "truncated");
    free(b);
    tokenizer_cases(out);
}

/* ---------------------------------------------------------------- main */

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

int main(void) {
    const char *td = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/hm_badinput.XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    if (access(HM_HOTMOE_BIN, X_OK)) { fprintf(stderr, "test_badinput: %s: not executable\n", HM_HOTMOE_BIN); return 1; }
    gguf_cases();
    hf_cases();
    converted_cases();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    if (n_fail) printf("inputs kept in %s\n", tmp);
    else nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return n_fail ? 1 : 0;
}
