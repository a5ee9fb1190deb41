/* gen_model.c - hotmoe-gen: writes a synthetic MoE model of a named shape (../shared/design/BENCH.md)
 * as GGUF, in a chosen quant mix, deterministic from a seed, at disk speed: blocks are generated
 * directly in their quantized form, one tensor at a time, while the previous one is written. */
#define _GNU_SOURCE
#include "gen_blocks.h"
#include "gen_model.h"
#include "convert.h"
#include "gguf.h"
#include "model.h"
#include "names.h"
#include "quant.h"
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

/* ---------------------------------------------------------------- shapes */

/* Scales of the random weights: chosen so the residual stream stays bounded over every layer
 * (pre-norm blocks add O(gain) per layer whatever the depth) and routing is not degenerate. */
typedef struct {
    float gain;          /* linear weights: std = gain / sqrt(fan_in) */
    float router_spread; /* std of the router logits for a unit-rms input */
    float embd_std;      /* token embeddings */
    float norm_std;      /* norm weights: 1 +- this */
    float bias_std;      /* q/k/v biases */
    float rbias_std;     /* exp_probs_b: selection-only bias of sigmoid routers */
} gen_knobs;

typedef struct {
    const char *name, *about, *mix;
    hm_config c;         /* n_layer excludes the n_nextn MTP layers stored after them */
    gen_knobs k;
} gen_shape;

/* embd_std 2: with 1.0 the sequence-common part of the residual (attention averages, growing with
 * depth) dominates the deep layers of a 46-layer model and one expert wins every token of a short
 * run; 2.0 keeps every layer's top-share < 0.75 with reuse still above chance (see --stats). */
#define KNOBS { 1.0f, 1.5f, 2.0f, 0.05f, 0.05f, 0.01f }
#define QWEN3(...) { .arch = HM_ARCH_QWEN3MOE, .rope_theta = 1e6f, .rms_eps = 1e-6f, .n_ctx_train = 40960, \
                     .router_fn = HM_ROUTER_SOFTMAX, .norm_topk = 1, .routed_scale = 1.0f, .n_group = 1,   \
                     .topk_group = 1, .qk_norm = 1, __VA_ARGS__ }
#define GLM4(...) { .arch = HM_ARCH_GLM4MOE, .rope_theta = 1e6f, .rms_eps = 1e-5f, .n_ctx_train = 131072,   \
                    .router_fn = HM_ROUTER_SIGMOID, .norm_topk = 1, .n_group = 1,                           \
                    .topk_group = 1, .qkv_bias = 1, .n_shared_exp = 1, __VA_ARGS__ }

static const gen_shape shapes[] = {
    { "tiny", "qwen3moe-like CI/demo model: 4 layers, 16 experts top-4", "q4_k_m",
      QWEN3(.n_layer = 4, .n_embd = 256, .n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_rot = 64, .n_vocab = 1024,
            .n_ff = 768, .n_expert = 16, .n_expert_used = 4, .n_ff_exp = 256), KNOBS },
    { "tinyglm", "glm4moe-like CI model: 1 dense + 3 MoE layers + 1 MTP, shared expert, sigmoid router", "q4_k_m",
      GLM4(.n_layer = 4, .n_nextn = 1, .n_embd = 256, .n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_rot = 32,
           .n_vocab = 1024, .n_ff = 512, .n_dense_lead = 1, .n_expert = 16, .n_expert_used = 4, .n_ff_exp = 256,
           .n_ff_shexp = 256, .routed_scale = 1.0f), KNOBS },
    { "a3b", "Qwen3-30B-A3B", "q4_k_m",
      QWEN3(.n_layer = 48, .n_embd = 2048, .n_head = 32, .n_head_kv = 4, .head_dim = 128, .n_rot = 128,
            .n_vocab = 151936, .n_ff = 6144, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768), KNOBS },
    { "air", "GLM-4.5-Air: 1 dense + 45 MoE layers + 1 MTP layer", "q3_k_m",
      GLM4(.n_layer = 46, .n_nextn = 1, .n_embd = 4096, .n_head = 96, .n_head_kv = 8, .head_dim = 128, .n_rot = 64,
           .n_vocab = 151552, .n_ff = 10944, .n_dense_lead = 1, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 1408,
           .n_ff_shexp = 1408, .routed_scale = 1.0f), KNOBS },
    /* GLM-class ~312B: 3 dense (as GLM-4.5) + 42 MoE layers x 288 experts of 3 x 4096 x 2048
     * (9.1 MB = 8.7 MiB each in the q2_k mix, 2.9 bpw); routed scale 2.5 as GLM-4.5; no MTP layer */
    { "flash", "GLM-class 320B: 3 dense + 42 MoE layers x 288 experts top-8 + 1 shared", "q2_k",
      GLM4(.n_layer = 45, .n_embd = 4096, .n_head = 96, .n_head_kv = 8, .head_dim = 128, .n_rot = 64,
           .n_vocab = 151552, .n_ff = 12288, .n_dense_lead = 3, .n_expert = 288, .n_expert_used = 8, .n_ff_exp = 2048,
           .n_ff_shexp = 2048, .routed_scale = 2.5f), KNOBS },
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* --custom keys: one row each. */
enum { K_INT, K_FLOAT, K_ARCH, K_ROUTER };
typedef struct { const char *key; int kind; size_t off; } gen_key;
#define CI(key, f) { key, K_INT, offsetof(gen_shape, c.f) }
#define CF(key, f) { key, K_FLOAT, offsetof(gen_shape, c.f) }
#define CK(key, f) { key, K_FLOAT, offsetof(gen_shape, k.f) }
static const gen_key keys[] = {
    { "arch", K_ARCH, offsetof(gen_shape, c.arch) }, { "router", K_ROUTER, offsetof(gen_shape, c.router_fn) },
    CI("layers", n_layer), CI("nextn", n_nextn), CI("vocab", n_vocab), CI("embd", n_embd), CI("heads", n_head),
    CI("kv_heads", n_head_kv), CI("head_dim", head_dim), CI("rot", n_rot), CF("theta", rope_theta),
    CF("eps", rms_eps), CI("ctx", n_ctx_train), CI("ff", n_ff), CI("dense", n_dense_lead), CI("experts", n_expert),
    CI("used", n_expert_used), CI("ff_exp", n_ff_exp), CI("shared", n_shared_exp), CI("ff_shexp", n_ff_shexp),
    CI("norm_topk", norm_topk), CF("routed_scale", routed_scale), CI("groups", n_group),
    CI("topk_group", topk_group), CI("qkv_bias", qkv_bias), CI("qk_norm", qk_norm), CI("tied", tied_output),
    CK("gain", gain), CK("router_spread", router_spread), CK("embd_std", embd_std), CK("norm_std", norm_std),
    CK("bias_std", bias_std), CK("rbias_std", rbias_std),
};
#define N_KEYS ((int)(sizeof keys / sizeof keys[0]))

/* Applies "k=v,k=v" to sh. Returns 0, or -1 naming the bad pair. */
static int apply_custom(gen_shape *sh, const char *spec, hm_error *e) {
    char *s = hm_strdup(spec), *save = NULL;
    int rc = 0;
    for (char *kv = strtok_r(s, ",", &save); kv && !rc; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) { rc = hm_fail(e, "--custom: expected key=value, found '%s'", kv); break; }
        *eq = 0;
        const char *v = eq + 1;
        const gen_key *k = NULL;
        for (int i = 0; i < N_KEYS; i++) if (!strcmp(keys[i].key, kv)) k = &keys[i];
        if (!k) { rc = hm_fail(e, "--custom: unknown key '%s' (see --help)", kv); break; }
        void *p = (char *)sh + k->off;
        char *end = NULL;
        if (k->kind == K_INT) { long x = strtol(v, &end, 10); *(int *)p = (int)x; }
        else if (k->kind == K_FLOAT) *(float *)p = strtof(v, &end);
        else if (k->kind == K_ARCH) {
            int a = hm_arch_from_name(v);
            if (a < 0) rc = hm_fail(e, "--custom: arch: expected qwen3moe or glm4moe, found '%s'", v);
            *(int *)p = a; end = (char *)v + strlen(v);
        } else {
            int r = !strcmp(v, "softmax") ? HM_ROUTER_SOFTMAX : !strcmp(v, "sigmoid") ? HM_ROUTER_SIGMOID : -1;
            if (r < 0) rc = hm_fail(e, "--custom: router: expected softmax or sigmoid, found '%s'", v);
            *(int *)p = r; end = (char *)v + strlen(v);
        }
        if (!rc && (!end || *end || end == v)) rc = hm_fail(e, "--custom: %s: expected a number, found '%s'", kv, v);
    }
    free(s);
    return rc;
}

static int check_shape(gen_shape *sh, hm_error *e) {
    hm_config *c = &sh->c;
    if (c->n_shared_exp > 0 && c->n_ff_shexp <= 0) c->n_ff_shexp = c->n_ff_exp * c->n_shared_exp;
    if (c->n_rot <= 0 || c->n_rot > c->head_dim) c->n_rot = c->head_dim;
    model_config_derive(c);
    if (c->n_layer < 1 || c->n_embd < 32 || c->n_head < 1 || c->n_head_kv < 1 || c->n_head % c->n_head_kv ||
        c->head_dim < 2 || c->head_dim % 2 || c->n_rot % 2 || c->n_expert < 1 || c->n_expert_used < 1 ||
        c->n_expert_used > c->n_expert || c->n_ff_exp < 1 || c->n_dense_lead < 0 || c->n_dense_lead > c->n_layer ||
        (c->n_dense_lead > 0 && c->n_ff < 1) || c->n_nextn < 0 || c->n_group < 1 || c->n_expert % c->n_group ||
        c->topk_group < 1 || c->topk_group > c->n_group || c->n_vocab < 260)
        return hm_fail(e, "gen: shape %s: inconsistent hyperparameters (layers %d embd %d heads %d/%d head_dim %d rot %d "
                       "experts %d used %d ff_exp %d dense %d ff %d nextn %d groups %d/%d vocab %d)", sh->name,
                       c->n_layer, c->n_embd, c->n_head, c->n_head_kv, c->head_dim, c->n_rot, c->n_expert,
                       c->n_expert_used, c->n_ff_exp, c->n_dense_lead, c->n_ff, c->n_nextn, c->n_group, c->topk_group,
                       c->n_vocab);
    if (c->arch == HM_ARCH_QWEN3MOE && (c->n_shared_exp || c->n_nextn || c->n_dense_lead))
        return hm_fail(e, "gen: shape %s: qwen3moe has no shared experts, MTP or dense layers (found %d, %d, %d)",
                       sh->name, c->n_shared_exp, c->n_nextn, c->n_dense_lead);
    return 0;
}

/* ---------------------------------------------------------------- quant mixes */

/* What a 2-D weight is, for the mix (1-D weights and the router are always F32, as llama.cpp keeps them). */
enum { R_EMBD, R_OUTPUT, R_ATTN, R_ATTN_V, R_FFN, R_FFN_DOWN, R_EXP, R_EXP_DOWN, R_EH, R_COUNT };

typedef struct {
    const char *name, *about;
    int ftype;                  /* general.file_type (llama_ftype) */
    int type[R_COUNT];
    int more_bits;              /* llama.cpp's Q4_K_M rule: attn_v and ffn_down of some layers in Q6_K */
} gen_mix;

#define ALL(t) { t, t, t, t, t, t, t, t, t }
static const gen_mix mixes[] = {
    { "f32", "all F32", 0, ALL(HM_TYPE_F32), 0 },
    { "f16", "all F16", 1, ALL(HM_TYPE_F16), 0 },
    { "bf16", "all BF16", 32, ALL(HM_TYPE_BF16), 0 },
    { "q8_0", "all Q8_0", 7, ALL(HM_TYPE_Q8_0), 0 },
    { "q4_0", "Q4_0, output Q6_K", 2,
      { HM_TYPE_Q4_0, HM_TYPE_Q6_K, HM_TYPE_Q4_0, HM_TYPE_Q4_0, HM_TYPE_Q4_0, HM_TYPE_Q4_0, HM_TYPE_Q4_0, HM_TYPE_Q4_0,
        HM_TYPE_Q4_0 }, 0 },
    { "q4_k_m", "Q4_K; attn_v, ffn_down of use_more_bits layers and output Q6_K (llama.cpp Q4_K_M)", 15,
      { HM_TYPE_Q4_K, HM_TYPE_Q6_K, HM_TYPE_Q4_K, HM_TYPE_Q4_K, HM_TYPE_Q4_K, HM_TYPE_Q4_K, HM_TYPE_Q4_K, HM_TYPE_Q4_K,
        HM_TYPE_Q4_K }, 1 },
    { "q5_k_m", "Q5_K; attn_v, ffn_down of use_more_bits layers and output Q6_K", 17,
      { HM_TYPE_Q5_K, HM_TYPE_Q6_K, HM_TYPE_Q5_K, HM_TYPE_Q5_K, HM_TYPE_Q5_K, HM_TYPE_Q5_K, HM_TYPE_Q5_K, HM_TYPE_Q5_K,
        HM_TYPE_Q5_K }, 1 },
    { "q6_k", "all Q6_K", 18, ALL(HM_TYPE_Q6_K), 0 },
    { "q3_k_m", "BENCH air mix: expert gate/up Q3_K, expert down Q4_K (Q4_0 on rows of 1408), attention and "
                "dense/shared FFN Q4_K, attn_v and output Q6_K", 12,
      { HM_TYPE_Q4_K, HM_TYPE_Q6_K, HM_TYPE_Q4_K, HM_TYPE_Q6_K, HM_TYPE_Q4_K, HM_TYPE_Q4_K, HM_TYPE_Q3_K, HM_TYPE_Q4_K,
        HM_TYPE_Q4_K }, 0 },
    { "q2_k", "BENCH flash mix: expert gate/up Q2_K, expert down Q3_K, attention and dense/shared FFN Q4_K, "
              "attn_v and output Q6_K", 10,
      { HM_TYPE_Q4_K, HM_TYPE_Q6_K, HM_TYPE_Q4_K, HM_TYPE_Q6_K, HM_TYPE_Q4_K, HM_TYPE_Q4_K, HM_TYPE_Q2_K, HM_TYPE_Q3_K,
        HM_TYPE_Q4_K }, 0 },
    { "mxfp4", "routed experts MXFP4, the rest Q8_0 (gpt-oss style)", 38,
      { HM_TYPE_Q8_0, HM_TYPE_Q8_0, HM_TYPE_Q8_0, HM_TYPE_Q8_0, HM_TYPE_Q8_0, HM_TYPE_Q8_0, HM_TYPE_MXFP4, HM_TYPE_MXFP4,
        HM_TYPE_Q8_0 }, 0 },
    { "iq4_xs", "IQ4_XS, output Q6_K", 30,
      { HM_TYPE_IQ4_XS, HM_TYPE_Q6_K, HM_TYPE_IQ4_XS, HM_TYPE_IQ4_XS, HM_TYPE_IQ4_XS, HM_TYPE_IQ4_XS, HM_TYPE_IQ4_XS,
        HM_TYPE_IQ4_XS, HM_TYPE_IQ4_XS }, 0 },
};
#define N_MIXES ((int)(sizeof mixes / sizeof mixes[0]))

/* A mix by name, or a single type name (e.g. "q5_0": every 2-D weight in that type). */
static int find_mix(const char *name, gen_mix *out, hm_error *e) {
    for (int i = 0; i < N_MIXES; i++) if (!strcasecmp(mixes[i].name, name)) { *out = mixes[i]; return 0; }
    for (int t = 0; t < HM_TYPE_COUNT; t++) {
        if (!gen_type_supported(t) || strcasecmp(hm_type_name(t), name)) continue;
        *out = (gen_mix){ name, "one type", -1, ALL(t), 0 };
        return 0;
    }
    return hm_fail(e, "gen: --mix '%s': expected a mix (f32 f16 bf16 q8_0 q4_0 q4_k_m q5_k_m q6_k q3_k_m q2_k mxfp4 "
                   "iq4_xs) or a type name", name);
}

/* llama.cpp's use_more_bits(i_layer, n_layers). */
static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* The type rows of ne0 elements can take: t itself, or the fallback ggml-style engines use when
 * a row is not a whole number of blocks (BENCH: 1408-wide rows of Q3_K/Q4_K experts become Q4_0). */
static int fit_type(int t, int64_t ne0) {
    while (hm_row_size(t, ne0) == 0 || !gen_type_supported(t)) {
        switch (t) {
        case HM_TYPE_Q2_K: case HM_TYPE_Q3_K: case HM_TYPE_Q4_K: case HM_TYPE_IQ4_XS: t = HM_TYPE_Q4_0; break;
        case HM_TYPE_Q5_K: t = HM_TYPE_Q5_0; break;
        case HM_TYPE_Q6_K: t = HM_TYPE_Q8_0; break;
        case HM_TYPE_F16: case HM_TYPE_BF16: case HM_TYPE_F32: return HM_TYPE_F32;
        default: t = HM_TYPE_F16; break;
        }
    }
    return t;
}

/* ---------------------------------------------------------------- the tensor plan */

typedef struct {
    char name[96];
    int type, n_dims;
    int64_t ne[4];
    float std, mean;
    size_t nbytes;
} gen_tensor;

typedef struct { gen_tensor *t; int n, cap; size_t bytes; } gen_plan;

static void plan_add(gen_plan *p, const gen_shape *sh, const gen_mix *mx, int slot, int layer, int role,
                     int64_t ne0, int64_t ne1, int64_t ne2, float std, float mean) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        gen_tensor *nt = realloc(p->t, sizeof *nt * (size_t)p->cap);
        if (!nt) abort();
        p->t = nt;
    }
    gen_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    names_get(t->name, sizeof t->name, slot, 1, sh->c.arch, layer, 0);
    t->n_dims = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    t->ne[0] = ne0; t->ne[1] = ne1; t->ne[2] = ne2; t->ne[3] = 1;
    t->std = std; t->mean = mean;
    int n_blk = sh->c.n_layer + sh->c.n_nextn;
    if (role < 0) t->type = HM_TYPE_F32;
    else {
        int ty = mx->type[role];
        if (mx->more_bits && (role == R_ATTN_V || role == R_FFN_DOWN || role == R_EXP_DOWN) && more_bits(layer, n_blk))
            ty = HM_TYPE_Q6_K;
        t->type = fit_type(ty, ne0);
    }
    t->nbytes = hm_row_size(t->type, ne0) * (size_t)ne1 * (size_t)ne2;
    p->bytes += t->nbytes;
}

static void plan_build(gen_plan *p, const gen_shape *sh, const gen_mix *mx) {
    const hm_config *c = &sh->c;
    const gen_knobs *k = &sh->k;
    int64_t D = c->n_embd, V = c->n_vocab, E = c->n_expert, F = c->n_ff_exp;
#define LIN(fan_in) (k->gain / sqrtf((float)(fan_in)))
#define ADD(slot, il, role, a, b, cc, std, mean) plan_add(p, sh, mx, slot, il, role, a, b, cc, std, mean)
    ADD(SLOT_TOK_EMBD, 0, R_EMBD, D, V, 1, k->embd_std, 0);
    for (int il = 0; il < c->n_layer + c->n_nextn; il++) {
        ADD(SLOT_ATTN_NORM, il, -1, D, 1, 1, k->norm_std, 1);
        ADD(SLOT_WQ, il, R_ATTN, D, c->q_dim, 1, LIN(D), 0);
        ADD(SLOT_WK, il, R_ATTN, D, c->kv_dim, 1, LIN(D), 0);
        ADD(SLOT_WV, il, R_ATTN_V, D, c->kv_dim, 1, LIN(D), 0);
        ADD(SLOT_WO, il, R_ATTN, c->q_dim, D, 1, LIN(c->q_dim), 0);
        if (c->qkv_bias) {
            ADD(SLOT_BQ, il, -1, c->q_dim, 1, 1, k->bias_std, 0);
            ADD(SLOT_BK, il, -1, c->kv_dim, 1, 1, k->bias_std, 0);
            ADD(SLOT_BV, il, -1, c->kv_dim, 1, 1, k->bias_std, 0);
        }
        if (c->qk_norm) {
            ADD(SLOT_Q_NORM, il, -1, c->head_dim, 1, 1, k->norm_std, 1);
            ADD(SLOT_K_NORM, il, -1, c->head_dim, 1, 1, k->norm_std, 1);
        }
        ADD(SLOT_FFN_NORM, il, -1, D, 1, 1, k->norm_std, 1);
        if (il < c->n_dense_lead) {
            ADD(SLOT_FFN_GATE, il, R_FFN, D, c->n_ff, 1, LIN(D), 0);
            ADD(SLOT_FFN_UP, il, R_FFN, D, c->n_ff, 1, LIN(D), 0);
            ADD(SLOT_FFN_DOWN, il, R_FFN_DOWN, c->n_ff, D, 1, LIN(c->n_ff), 0);
            continue;
        }
        ADD(SLOT_ROUTER, il, -1, D, E, 1, k->router_spread / sqrtf((float)D), 0);
        if (c->router_fn == HM_ROUTER_SIGMOID) ADD(SLOT_ROUTER_BIAS, il, -1, E, 1, 1, k->rbias_std, 0);
        ADD(SLOT_EXPS_GATE, il, R_EXP, D, F, E, LIN(D), 0);
        ADD(SLOT_EXPS_UP, il, R_EXP, D, F, E, LIN(D), 0);
        ADD(SLOT_EXPS_DOWN, il, R_EXP_DOWN, F, D, E, LIN(F), 0);
        if (c->n_shared_exp > 0) {
            ADD(SLOT_SHEXP_GATE, il, R_FFN, D, c->n_ff_shexp, 1, LIN(D), 0);
            ADD(SLOT_SHEXP_UP, il, R_FFN, D, c->n_ff_shexp, 1, LIN(D), 0);
            ADD(SLOT_SHEXP_DOWN, il, R_FFN_DOWN, c->n_ff_shexp, D, 1, LIN(c->n_ff_shexp), 0);
        }
        if (il >= c->n_layer) { /* MTP layer: llama.cpp's nextn.* (embed_tokens and shared_head_head optional) */
            ADD(SLOT_NEXTN_EH_PROJ, il, R_EH, 2 * D, D, 1, LIN(2 * D), 0);
            ADD(SLOT_NEXTN_ENORM, il, -1, D, 1, 1, k->norm_std, 1);
            ADD(SLOT_NEXTN_HNORM, il, -1, D, 1, 1, k->norm_std, 1);
            ADD(SLOT_NEXTN_HEAD_NORM, il, -1, D, 1, 1, k->norm_std, 1);
        }
    }
    ADD(SLOT_OUTPUT_NORM, 0, -1, D, 1, 1, k->norm_std, 1);
    if (!c->tied_output) ADD(SLOT_OUTPUT, 0, R_OUTPUT, D, V, 1, LIN(D), 0);
#undef ADD
#undef LIN
}

/* ---------------------------------------------------------------- writing */

static void write_meta(gguf_writer *w, const gen_shape *sh, const gen_mix *mx, uint64_t seed) {
    char name[128];
    snprintf(name, sizeof name, "hotmoe-synthetic %s %s seed %llu", sh->name, mx->name, (unsigned long long)seed);
    convert_write_hparams(w, &sh->c, name, mx->ftype);
}

/* The previous tensor is written by this thread while the next one is generated. */
typedef struct { gguf_writer *w; FILE *f; const void *data; size_t n; int rc; hm_error e; } write_job;
static void *write_main(void *arg) {
    write_job *j = arg;
    j->rc = gguf_writer_data(j->w, j->f, j->data, j->n, &j->e);
    return NULL;
}

static uint64_t name_key(const char *s) { /* FNV-1a: the PRNG key of a tensor is its name */
    uint64_t h = 0xCBF29CE484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
    return h;
}

static int write_model(const gen_plan *p, const gen_shape *sh, const gen_mix *mx, uint64_t seed, const char *path,
                       hm_error *e) {
    gguf_writer *w = gguf_writer_new();
    write_meta(w, sh, mx, seed);
    if (gen_tokenizer_write(w, sh->c.n_vocab, sh->c.arch == HM_ARCH_GLM4MOE ? "glm4" : "qwen2", e)) {
        gguf_writer_free(w); return -1;
    }
    for (int i = 0; i < p->n; i++) gguf_w_tensor(w, p->t[i].name, p->t[i].type, p->t[i].n_dims, p->t[i].ne);
    size_t max = 0;
    for (int i = 0; i < p->n; i++) if (p->t[i].nbytes > max) max = p->t[i].nbytes;
    FILE *f = fopen(path, "wb");
    if (!f) { gguf_writer_free(w); return hm_fail(e, "%s: cannot create the output file", path); }
    uint8_t *buf[2] = { hm_malloc(max), hm_malloc(max) };
    int rc = gguf_writer_begin(w, f, e), busy = 0;
    pthread_t th;
    write_job job;
    for (int i = 0; i < p->n && !rc; i++) {
        const gen_tensor *t = &p->t[i];
        gen_tensor_fill(t->type, buf[i & 1], t->nbytes, seed, name_key(t->name), t->std, t->mean);
        if (busy) { pthread_join(th, NULL); busy = 0; if (job.rc) { *e = job.e; rc = -1; break; } }
        job = (write_job){ w, f, buf[i & 1], t->nbytes, 0, { { 0 } } };
        if (pthread_create(&th, NULL, write_main, &job)) { write_main(&job); if (job.rc) { *e = job.e; rc = -1; } }
        else busy = 1;
    }
    if (busy) { pthread_join(th, NULL); if (job.rc && !rc) { *e = job.e; rc = -1; } }
    if (fclose(f) && !rc) rc = hm_fail(e, "%s: write failed (disk full?)", path);
    if (rc) remove(path);
    free(buf[0]); free(buf[1]);
    gguf_writer_free(w);
    return rc;
}

/* ---------------------------------------------------------------- CLI */

static void usage(FILE *o) {
    fprintf(o, "usage: hotmoe-gen --shape NAME [--custom k=v,...] [--mix MIX] [--seed S] -o OUT.gguf\n"
               "                  [--stats [--stats-tokens N]] [--threads N] [--dry-run]\n"
               "       hotmoe-gen --stats-only FILE.gguf [--stats-tokens N]\n\nshapes:\n");
    for (int i = 0; i < N_SHAPES; i++) fprintf(o, "  %-8s %s (default mix %s)\n", shapes[i].name, shapes[i].about, shapes[i].mix);
    fprintf(o, "mixes (or any type name, e.g. q5_0):\n");
    for (int i = 0; i < N_MIXES; i++) fprintf(o, "  %-8s %s\n", mixes[i].name, mixes[i].about);
    fprintf(o, "custom keys:");
    for (int i = 0; i < N_KEYS; i++) fprintf(o, " %s", keys[i].key);
    fprintf(o, "\n");
}

static void print_plan(const gen_plan *p, const gen_shape *sh, const gen_mix *mx) {
    const hm_config *c = &sh->c;
    printf("shape %s (%s): arch %s, %d layers (%d dense lead) + %d MTP, embd %d, heads %d/%d x %d (rot %d), vocab %d,\n"
           "  %d experts top-%d x ff %d, shared %d x %d, dense ff %d, router %s, routed scale %g, qkv bias %d, qk norm %d\n",
           sh->name, sh->about, hm_arch_name(c->arch), c->n_layer, c->n_dense_lead, c->n_nextn, c->n_embd, c->n_head,
           c->n_head_kv, c->head_dim, c->n_rot, c->n_vocab, c->n_expert, c->n_expert_used, c->n_ff_exp, c->n_shared_exp,
           c->n_ff_shexp, c->n_ff, c->router_fn == HM_ROUTER_SIGMOID ? "sigmoid+bias" : "softmax", c->routed_scale,
           c->qkv_bias, c->qk_norm);
    size_t by_type[HM_TYPE_COUNT] = { 0 };
    for (int i = 0; i < p->n; i++) by_type[p->t[i].type] += p->t[i].nbytes;
    printf("mix %s: %d tensors, %.3f GB (%.3f GiB):", mx->name, p->n, p->bytes / 1e9, p->bytes / 1073741824.0);
    for (int t = 0; t < HM_TYPE_COUNT; t++) if (by_type[t]) printf(" %s %.1f%%", hm_type_name(t), 100.0 * by_type[t] / p->bytes);
    printf("\n");
}

int main(int argc, char **argv) {
    const char *shape = NULL, *custom = NULL, *mixname = NULL, *out = NULL, *stats_only = NULL;
    uint64_t seed = 1;
    int stats = 0, stats_tokens = 32, dry = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && (i++, 1))
        if (ARG("--shape")) shape = v;
        else if (ARG("--custom")) custom = v;
        else if (ARG("--mix")) mixname = v;
        else if (ARG("--seed")) seed = strtoull(v, NULL, 0);
        else if (ARG("-o")) out = v;
        else if (ARG("--stats-tokens")) stats_tokens = atoi(v);
        else if (ARG("--stats-only")) stats_only = v;
        else if (ARG("--threads")) omp_set_num_threads(atoi(v));
        else if (!strcmp(a, "--stats")) stats = 1;
        else if (!strcmp(a, "--dry-run")) dry = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else { fprintf(stderr, "hotmoe-gen: unknown or incomplete argument '%s'\n", a); usage(stderr); return 2; }
#undef ARG
    }
    hm_error e = { { 0 } };
    if (stats_only) {
        int rc = gen_stats_run(stats_only, stats_tokens, stdout, &e);
        if (rc < 0) fprintf(stderr, "hotmoe-gen: %s\n", e.msg);
        return rc ? 1 : 0;
    }
    if (!shape || (!out && !dry)) { usage(stderr); return 2; }
    if (gen_blocks_init(&e)) { fprintf(stderr, "hotmoe-gen: %s\n", e.msg); return 1; }
    gen_shape sh;
    int found = 0;
    for (int i = 0; i < N_SHAPES; i++) if (!strcmp(shapes[i].name, shape)) { sh = shapes[i]; found = 1; }
    if (!found) { fprintf(stderr, "hotmoe-gen: unknown shape '%s'\n", shape); usage(stderr); return 2; }
    gen_mix mx;
    if ((custom && apply_custom(&sh, custom, &e)) || check_shape(&sh, &e) || find_mix(mixname ? mixname : sh.mix, &mx, &e)) {
        fprintf(stderr, "hotmoe-gen: %s\n", e.msg); return 2;
    }
    gen_plan p = { 0 };
    plan_build(&p, &sh, &mx);
    print_plan(&p, &sh, &mx);
    if (dry) { free(p.t); return 0; }
    char dir[4096]; snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (slash) slash[slash == dir ? 1 : 0] = 0; else strcpy(dir, ".");
    struct statvfs vfs;
    struct stat st;
    int is_dev = stat(out, &st) == 0 && !S_ISREG(st.st_mode); /* e.g. /dev/null to time generation alone */
    if (!is_dev && statvfs(dir, &vfs) == 0 && (double)vfs.f_bavail * vfs.f_frsize < (double)p.bytes + 64e6) {
        fprintf(stderr, "hotmoe-gen: %s: needs %.2f GB, only %.2f GB free\n", dir, p.bytes / 1e9,
                (double)vfs.f_bavail * vfs.f_frsize / 1e9);
        free(p.t); return 1;
    }
    double t0 = hm_now();
    if (write_model(&p, &sh, &mx, seed, out, &e)) { fprintf(stderr, "hotmoe-gen: %s\n", e.msg); free(p.t); return 1; }
    double dt = hm_now() - t0;
    printf("wrote %s: %.3f GB in %.2f s, %.0f MB/s (%d threads)\n", out, p.bytes / 1e9, dt, p.bytes / 1e6 / dt,
           omp_get_max_threads());
    fflush(stdout);
    free(p.t);
    if (!stats) return 0;
    int rc = gen_stats_run(out, stats_tokens, stdout, &e);
    if (rc < 0) fprintf(stderr, "hotmoe-gen: %s\n", e.msg);
    return rc ? 1 : 0;
}
