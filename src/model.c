/* model.c - the loader: file formats stop here. GGUF metadata or HF config.json become one
 * hm_config; GGUF or HF tensor names become canonical slots (names.c); stacked or per-expert
 * weights become one expert table. */
#define _GNU_SOURCE
#include "loader.h"
#include "gguf.h"
#include "safetensors.h"
#include "names.h"
#include "quant.h"
#include "tokenizer.h"
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <limits.h>
#include <unistd.h>

#ifndef HOTMOE_DEMO_MODEL
#define HOTMOE_DEMO_MODEL "demo/demo.gguf"
#endif

const char *model_demo_path(void) {
    const char *env = getenv("HOTMOE_DEMO_MODEL");
    if (env && *env) return env;
    if (access(HOTMOE_DEMO_MODEL, R_OK) == 0) return HOTMOE_DEMO_MODEL;
    static char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 32);
    if (n > 0) {
        buf[n] = 0;
        char *slash = strrchr(buf, '/');
        if (slash) { strcpy(slash + 1, "demo/demo.gguf"); if (access(buf, R_OK) == 0) return buf; }
    }
    return HOTMOE_DEMO_MODEL;
}

struct hm_model_store {
    gguf_file gguf;
    st_set st;
    int is_gguf;
};

static const char *arch_names[HM_ARCH_COUNT] = { [HM_ARCH_QWEN3MOE] = "qwen3moe", [HM_ARCH_GLM4MOE] = "glm4moe" };
const char *hm_arch_name(int a) { return a >= 0 && a < HM_ARCH_COUNT ? arch_names[a] : "?"; }
int hm_arch_from_name(const char *n) {
    for (int i = 0; i < HM_ARCH_COUNT; i++) if (!strcmp(n, arch_names[i])) return i;
    return -1;
}

void model_config_derive(hm_config *c) {
    c->q_dim = c->n_head * c->head_dim;
    c->kv_dim = c->n_head_kv * c->head_dim;
}

/* ---------------------------------------------------------------- hyperparameters */

static int check_config(const hm_config *c, const char *src, hm_error *e) {
#define NEED(cond, what, val) \
    if (!(cond)) return hm_fail(e, "%s: %s: expected %s, found %lld", src, what, #cond, (long long)(val))
    NEED(c->n_layer >= 1 && c->n_layer <= 1024, "n_layer", c->n_layer);
    NEED(c->n_embd >= 1 && c->n_embd <= 65536, "n_embd", c->n_embd);
    NEED(c->n_head >= 1 && c->n_head <= 1024, "n_head", c->n_head);
    NEED(c->n_head_kv >= 1 && c->n_head % c->n_head_kv == 0, "n_head_kv", c->n_head_kv);
    NEED(c->head_dim >= 2 && c->head_dim <= 1024 && c->head_dim % 2 == 0, "head_dim", c->head_dim);
    NEED(c->n_rot >= 0 && c->n_rot <= c->head_dim && c->n_rot % 2 == 0, "n_rot", c->n_rot);
    NEED(c->n_vocab >= 1, "n_vocab", c->n_vocab);
    NEED(c->n_expert >= 1 && c->n_expert <= 4096, "n_expert", c->n_expert);
    NEED(c->n_expert_used >= 1 && c->n_expert_used <= c->n_expert, "n_expert_used", c->n_expert_used);
    NEED(c->n_ff_exp >= 1, "n_ff_exp", c->n_ff_exp);
    NEED(c->n_shared_exp >= 0 && c->n_shared_exp <= c->n_expert, "n_shared_exp", c->n_shared_exp);
    NEED(c->n_shared_exp == 0 || (c->n_ff_shexp >= 1 && c->n_ff_shexp < INT32_MAX), "n_ff_shexp", c->n_ff_shexp);
    NEED(c->n_dense_lead >= 0 && c->n_dense_lead <= c->n_layer, "n_dense_lead", c->n_dense_lead);
    NEED(c->n_dense_lead == 0 || c->n_ff >= 1, "n_ff", c->n_ff);
    NEED(c->n_group >= 1 && c->n_expert % c->n_group == 0, "n_group", c->n_group);
    NEED(c->topk_group >= 1 && c->topk_group <= c->n_group, "topk_group", c->topk_group);
    NEED(c->router_fn == HM_ROUTER_SOFTMAX || c->router_fn == HM_ROUTER_SIGMOID, "expert_gating_func", c->router_fn);
    NEED(c->rms_eps > 0 && c->rms_eps < 1, "rms_eps (x1e9)", (long long)(c->rms_eps * 1e9));
    NEED(c->rope_theta > 0, "rope_theta", (long long)c->rope_theta);
#undef NEED
    return 0;
}

/* a*b for sizes read from a file: clamped to INT32_MAX instead of overflowing (check_config refuses it) */
static int mul_sat(int a, int b) {
    int64_t p = (int64_t)a * b;
    return p > INT32_MAX ? INT32_MAX : p < INT32_MIN ? INT32_MIN : (int)p;
}

static int kv_int(const gguf_file *g, const char *arch, const char *k, int def, int required, int *out, hm_error *e) {
    char key[256]; snprintf(key, sizeof key, "%s.%s", arch, k);
    if (!gguf_find_kv(g, key)) {
        if (required) return hm_fail(e, "%s: metadata key '%s': expected an integer, found nothing", g->path, key);
        *out = def; return 0;
    }
    uint64_t v;
    if (gguf_get_u64(g, key, &v, e)) return -1;
    if (v > INT32_MAX) return hm_fail(e, "%s: metadata key '%s': expected <= %d, found %" PRIu64, g->path, key, INT32_MAX, v);
    *out = (int)v;
    return 0;
}
static int kv_float(const gguf_file *g, const char *arch, const char *k, float def, float *out, hm_error *e) {
    char key[256]; snprintf(key, sizeof key, "%s.%s", arch, k);
    if (!gguf_find_kv(g, key)) { *out = def; return 0; }
    double v;
    if (gguf_get_f64(g, key, &v, e)) return -1;
    *out = (float)v;
    return 0;
}
static int kv_bool(const gguf_file *g, const char *arch, const char *k, int def, int *out, hm_error *e) {
    char key[256]; snprintf(key, sizeof key, "%s.%s", arch, k);
    if (!gguf_find_kv(g, key)) { *out = def; return 0; }
    bool b;
    if (gguf_get_bool(g, key, &b, e)) return -1;
    *out = b;
    return 0;
}

static int config_from_gguf(hm_config *c, const gguf_file *g, hm_error *e) {
    memset(c, 0, sizeof *c);
    char *an = gguf_get_str(g, "general.architecture");
    if (!an) return hm_fail(e, "%s: metadata key 'general.architecture': expected a string, found nothing", g->path);
    c->arch = hm_arch_from_name(an);
    if (c->arch < 0) {
        hm_fail(e, "%s: general.architecture: expected qwen3moe or glm4moe, found '%.64s'", g->path, an);
        free(an); return -1;
    }
    const char *a = hm_arch_name(c->arch);
    free(an);
    int n_total, vlen;
    if (kv_int(g, a, "block_count", 0, 1, &n_total, e) || kv_int(g, a, "nextn_predict_layers", 0, 0, &c->n_nextn, e) ||
        kv_int(g, a, "embedding_length", 0, 1, &c->n_embd, e) ||
        kv_int(g, a, "attention.head_count", 0, 1, &c->n_head, e) ||
        kv_int(g, a, "attention.head_count_kv", c->n_head, 0, &c->n_head_kv, e) ||
        kv_int(g, a, "attention.key_length", c->n_head ? c->n_embd / c->n_head : 0, 0, &c->head_dim, e) ||
        kv_int(g, a, "attention.value_length", c->head_dim, 0, &vlen, e) ||
        kv_int(g, a, "rope.dimension_count", c->head_dim, 0, &c->n_rot, e) ||
        kv_float(g, a, "rope.freq_base", 10000.0f, &c->rope_theta, e) ||
        kv_float(g, a, "attention.layer_norm_rms_epsilon", 1e-6f, &c->rms_eps, e) ||
        kv_int(g, a, "context_length", 4096, 0, &c->n_ctx_train, e) ||
        kv_int(g, a, "feed_forward_length", 0, 0, &c->n_ff, e) ||
        kv_int(g, a, "leading_dense_block_count", 0, 0, &c->n_dense_lead, e) ||
        kv_int(g, a, "expert_count", 0, 1, &c->n_expert, e) ||
        kv_int(g, a, "expert_used_count", 0, 1, &c->n_expert_used, e) ||
        kv_int(g, a, "expert_feed_forward_length", 0, 1, &c->n_ff_exp, e) ||
        kv_int(g, a, "expert_shared_count", 0, 0, &c->n_shared_exp, e) ||
        kv_int(g, a, "expert_gating_func", HM_ROUTER_SOFTMAX, 0, &c->router_fn, e) ||
        kv_bool(g, a, "expert_weights_norm", c->arch == HM_ARCH_QWEN3MOE, &c->norm_topk, e) ||
        kv_float(g, a, "expert_weights_scale", 1.0f, &c->routed_scale, e) ||
        kv_int(g, a, "expert_group_count", 1, 0, &c->n_group, e) ||
        kv_int(g, a, "expert_group_used_count", 1, 0, &c->topk_group, e) ||
        kv_int(g, a, "expert_shared_feed_forward_length", mul_sat(c->n_ff_exp, c->n_shared_exp), 0, &c->n_ff_shexp, e))
        return -1;
    if (vlen != c->head_dim)
        return hm_fail(e, "%s: %s.attention.value_length: expected equal to key_length %d, found %d", g->path, a, c->head_dim, vlen);
    if (c->n_nextn < 0 || c->n_nextn >= n_total)
        return hm_fail(e, "%s: %s.nextn_predict_layers: expected < block_count %d, found %d", g->path, a, n_total, c->n_nextn);
    c->n_layer = n_total - c->n_nextn;
    if (c->routed_scale == 0.0f) c->routed_scale = 1.0f;
    const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    if (!te) return hm_fail(e, "%s: tensor 'token_embd.weight': expected present, found nothing", g->path);
    c->n_vocab = (int)te->ne[1];
    c->qkv_bias = gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    c->qk_norm = gguf_find_tensor(g, "blk.0.attn_q_norm.weight") != NULL;
    c->tied_output = gguf_find_tensor(g, "output.weight") == NULL;
    model_config_derive(c);
    return check_config(c, g->path, e);
}

/* config.json readers: absent -> default; present with the wrong type -> error. */
static int js_int(cJSON *o, const char *k, int def, int required, int *out, const char *src, hm_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v)) {
        if (required) return hm_fail(e, "%s: %s: expected an integer, found nothing", src, k);
        *out = def; return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 2e9)
        return hm_fail(e, "%s: %s: expected an integer, found %s", src, k,
                       !cJSON_IsNumber(v) ? "another type" : v->valuedouble != floor(v->valuedouble) ? "a non-integer"
                                                                                                  : "an out-of-range number");
    *out = (int)v->valuedouble;
    return 0;
}
static int js_float(cJSON *o, const char *k, float def, float *out, const char *src, hm_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v)) { *out = def; return 0; }
    if (!cJSON_IsNumber(v)) return hm_fail(e, "%s: %s: expected a number, found another type", src, k);
    *out = (float)v->valuedouble;
    return 0;
}
static int js_bool(cJSON *o, const char *k, int def, int *out, const char *src, hm_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v)) { *out = def; return 0; }
    if (!cJSON_IsBool(v)) return hm_fail(e, "%s: %s: expected true or false, found another type", src, k);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int config_from_hf(hm_config *c, const char *dir, hm_error *e) {
    memset(c, 0, sizeof *c);
    char path[4096]; snprintf(path, sizeof path, "%s/config.json", dir);
    char *txt = hm_read_file(path, NULL, e);
    if (!txt) return -1;
    cJSON *j = cJSON_Parse(txt); free(txt);
    if (!cJSON_IsObject(j)) {
        const char *found = j ? "another JSON value" : "malformed JSON";
        cJSON_Delete(j);
        return hm_fail(e, "%s: expected a JSON object, found %s", path, found);
    }
    int rc = -1;
    cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    const char *mts = cJSON_IsString(mt) ? mt->valuestring : "";
    if (!strcmp(mts, "qwen3_moe")) c->arch = HM_ARCH_QWEN3MOE;
    else if (!strcmp(mts, "glm4_moe")) c->arch = HM_ARCH_GLM4MOE;
    else { hm_fail(e, "%s: model_type: expected \"qwen3_moe\" or \"glm4_moe\", found \"%.64s\"", path, mts); goto out; }
    int glm = c->arch == HM_ARCH_GLM4MOE;
    /* rope: transformers 5 nests it in rope_parameters; older files keep it at the top level */
    cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    if (!cJSON_IsObject(rp)) rp = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    float prf = 1.0f;
    if (js_float(j, "rope_theta", 10000.0f, &c->rope_theta, path, e) ||
        js_float(j, "partial_rotary_factor", glm ? 0.5f : 1.0f, &prf, path, e)) goto out;
    if (cJSON_IsObject(rp)) {
        cJSON *rt = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
        if (!rt) rt = cJSON_GetObjectItemCaseSensitive(rp, "type");
        if (cJSON_IsString(rt) && strcmp(rt->valuestring, "default")) {
            hm_fail(e, "%s: rope type: expected \"default\", found \"%.32s\" (RoPE scaling is not supported yet)", path, rt->valuestring);
            goto out;
        }
        if (js_float(rp, "rope_theta", c->rope_theta, &c->rope_theta, path, e) ||
            js_float(rp, "partial_rotary_factor", prf, &prf, path, e)) goto out;
    }
    int sparse_step = 1;
    if (js_int(j, "num_hidden_layers", 0, 1, &c->n_layer, path, e) ||
        js_int(j, "hidden_size", 0, 1, &c->n_embd, path, e) ||
        js_int(j, "num_attention_heads", 0, 1, &c->n_head, path, e) ||
        js_int(j, "num_key_value_heads", c->n_head, 0, &c->n_head_kv, path, e) ||
        js_int(j, "head_dim", c->n_head ? c->n_embd / c->n_head : 0, 0, &c->head_dim, path, e) ||
        js_int(j, "vocab_size", 0, 1, &c->n_vocab, path, e) ||
        js_float(j, "rms_norm_eps", 1e-6f, &c->rms_eps, path, e) ||
        js_int(j, "max_position_embeddings", 4096, 0, &c->n_ctx_train, path, e) ||
        js_int(j, "intermediate_size", 0, 0, &c->n_ff, path, e) ||
        js_int(j, "moe_intermediate_size", 0, 1, &c->n_ff_exp, path, e) ||
        js_int(j, "num_experts_per_tok", 0, 1, &c->n_expert_used, path, e) ||
        js_bool(j, "norm_topk_prob", glm ? 1 : 0, &c->norm_topk, path, e) ||
        js_bool(j, "attention_bias", glm ? 1 : 0, &c->qkv_bias, path, e) ||
        js_bool(j, "tie_word_embeddings", 0, &c->tied_output, path, e))
        goto out;
    if (glm) {
        if (js_int(j, "n_routed_experts", 0, 1, &c->n_expert, path, e) ||
            js_int(j, "n_shared_experts", 0, 0, &c->n_shared_exp, path, e) ||
            js_int(j, "first_k_dense_replace", 0, 0, &c->n_dense_lead, path, e) ||
            js_float(j, "routed_scaling_factor", 1.0f, &c->routed_scale, path, e) ||
            js_int(j, "n_group", 1, 0, &c->n_group, path, e) ||
            js_int(j, "topk_group", 1, 0, &c->topk_group, path, e) ||
            js_bool(j, "use_qk_norm", 0, &c->qk_norm, path, e) ||
            js_int(j, "num_nextn_predict_layers", 0, 0, &c->n_nextn, path, e))
            goto out;
        c->router_fn = HM_ROUTER_SIGMOID;
        c->n_ff_shexp = mul_sat(c->n_ff_exp, c->n_shared_exp);
    } else {
        /* hub files say num_experts; transformers 5 writes num_local_experts */
        const char *ne_key = cJSON_GetObjectItemCaseSensitive(j, "num_experts") ? "num_experts" : "num_local_experts";
        if (js_int(j, ne_key, 0, 1, &c->n_expert, path, e) ||
            js_int(j, "decoder_sparse_step", 1, 0, &sparse_step, path, e))
            goto out;
        cJSON *mlp_only = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
        if (sparse_step != 1 || (cJSON_IsArray(mlp_only) && cJSON_GetArraySize(mlp_only) > 0)) {
            hm_fail(e, "%s: decoder_sparse_step/mlp_only_layers: expected every layer MoE (1, []), found another layout", path);
            goto out;
        }
        c->router_fn = HM_ROUTER_SOFTMAX;
        c->qk_norm = 1;
        c->routed_scale = 1.0f;
        c->n_group = c->topk_group = 1;
    }
    if (!(prf > 0 && prf <= 1)) { /* also keeps the float -> int conversion below defined */
        hm_fail(e, "%s: partial_rotary_factor: expected a number in (0, 1], found %g", path, prf);
        goto out;
    }
    c->n_rot = (int)(c->head_dim * prf);
    model_config_derive(c);
    rc = check_config(c, path, e);
out:
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- tensors */

typedef struct { hm_model *m; hm_model_store *s; const char *src; } loader;

/* Finds a tensor by file name. Returns 1 found, 0 absent, -1 error (a dtype we cannot use). */
static int find(loader *L, const char *name, hm_tensor *t, hm_error *e) {
    memset(t, 0, sizeof *t);
    if (L->s->is_gguf) {
        const gguf_tensor *g = gguf_find_tensor(&L->s->gguf, name);
        if (!g) return 0;
        t->type = g->type; t->n_dims = g->n_dims; memcpy(t->ne, g->ne, sizeof t->ne);
        t->data = g->data; t->nbytes = g->nbytes;
        return 1;
    }
    const st_tensor *st = st_find(&L->s->st, name);
    if (!st) return 0;
    if (st->type < 0)
        return hm_fail(e, "%s: tensor '%s': dtype expected F32, F16 or BF16, found %s", L->src, name, st->dtype);
    t->type = st->type; t->n_dims = st->n_dims; memcpy(t->ne, st->ne, sizeof t->ne);
    t->data = st->data; t->nbytes = st->nbytes;
    return 1;
}

/* Loads slot into t, checking its shape against (ne0, ne1, ne2); 0 means "any" for ne2 only.
 * required: absent is an error. Returns 1 loaded, 0 absent (optional), -1 error. */
static int get(loader *L, hm_tensor *t, int slot, int layer, int required, int64_t ne0, int64_t ne1, int64_t ne2,
               hm_error *e) {
    char name[256];
    if (names_get(name, sizeof name, slot, L->s->is_gguf, L->m->cfg.arch, layer, 0)) {
        memset(t, 0, sizeof *t);
        if (required) return hm_fail(e, "%s: slot %d has no name in this format", L->src, slot);
        return 0;
    }
    int r = find(L, name, t, e);
    if (r < 0) return -1;
    if (!r) {
        if (required) return hm_fail(e, "%s: tensor '%s': expected present, found nothing", L->src, name);
        return 0;
    }
    int64_t want[3] = { ne0, ne1 ? ne1 : 1, ne2 ? ne2 : 1 };
    if (t->ne[0] != want[0] || t->ne[1] != want[1] || t->ne[2] != want[2] || t->ne[3] != 1)
        return hm_fail(e, "%s: tensor '%s': shape expected [%" PRId64 ", %" PRId64 ", %" PRId64 "] (ggml order), found [%" PRId64
                       ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", L->src, name, want[0], want[1], want[2],
                       t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    return 1;
}

/* A view of expert e of a stacked [ne0, ne1, n] tensor, or of rows [r0, r0+rows) of it. */
static hm_tensor expert_view(const hm_tensor *s, int e, int n, int64_t r0, int64_t rows) {
    hm_tensor t = *s;
    size_t per = s->nbytes / (size_t)n, row = per / (size_t)s->ne[1];
    t.n_dims = 2; t.ne[1] = rows; t.ne[2] = 1;
    t.data = (const uint8_t *)s->data + (size_t)e * per + (size_t)r0 * row;
    t.nbytes = row * (size_t)rows;
    return t;
}

static int load_experts(loader *L, hm_layer *ly, int il, hm_error *e) {
    const hm_config *c = &L->m->cfg;
    int E = c->n_expert, D = c->n_embd, F = c->n_ff_exp;
    ly->experts = hm_calloc((size_t)E, sizeof(hm_expert));
    if (L->s->is_gguf) {
        hm_tensor g, u, d;
        if (get(L, &g, SLOT_EXPS_GATE, il, 1, D, F, E, e) < 0 || get(L, &u, SLOT_EXPS_UP, il, 1, D, F, E, e) < 0 ||
            get(L, &d, SLOT_EXPS_DOWN, il, 1, F, D, E, e) < 0)
            return -1;
        for (int x = 0; x < E; x++) {
            ly->experts[x].host.gate = expert_view(&g, x, E, 0, F);
            ly->experts[x].host.up = expert_view(&u, x, E, 0, F);
            ly->experts[x].host.down = expert_view(&d, x, E, 0, D);
        }
        return 0;
    }
    hm_tensor gu, dn;
    int r = get(L, &gu, SLOT_EXPS_GATE_UP, il, 0, D, 2 * F, E, e);
    if (r < 0) return -1;
    if (r == 1) { /* transformers 5 fused layout */
        if (get(L, &dn, SLOT_EXPS_DOWN_FUSED, il, 1, F, D, E, e) < 0) return -1;
        for (int x = 0; x < E; x++) {
            ly->experts[x].host.gate = expert_view(&gu, x, E, 0, F);
            ly->experts[x].host.up = expert_view(&gu, x, E, F, F);
            ly->experts[x].host.down = expert_view(&dn, x, E, 0, D);
        }
        return 0;
    }
    static const int slots[3] = { SLOT_EXP_GATE, SLOT_EXP_UP, SLOT_EXP_DOWN };
    for (int x = 0; x < E; x++) {
        hm_tensor *dst[3] = { &ly->experts[x].host.gate, &ly->experts[x].host.up, &ly->experts[x].host.down };
        for (int k = 0; k < 3; k++) {
            char name[256];
            names_get(name, sizeof name, slots[k], 0, c->arch, il, x);
            int f = find(L, name, dst[k], e);
            if (f < 0) return -1;
            if (!f) return hm_fail(e, "%s: tensor '%s': expected present, found nothing", L->src, name);
            int64_t w0 = k == 2 ? F : D, w1 = k == 2 ? D : F;
            if (dst[k]->ne[0] != w0 || dst[k]->ne[1] != w1 || dst[k]->ne[2] != 1)
                return hm_fail(e, "%s: tensor '%s': shape expected [%" PRId64 ", %" PRId64 "] (ggml order), found [%" PRId64
                               ", %" PRId64 ", %" PRId64 "]", L->src, name, w0, w1, dst[k]->ne[0], dst[k]->ne[1], dst[k]->ne[2]);
        }
    }
    return 0;
}

static int load_ffn(loader *L, hm_ffn_w *f, int slot0, int il, int width, hm_error *e) {
    int D = L->m->cfg.n_embd;
    if (get(L, &f->gate, slot0, il, 1, D, width, 0, e) < 0 || get(L, &f->up, slot0 + 1, il, 1, D, width, 0, e) < 0 ||
        get(L, &f->down, slot0 + 2, il, 1, width, D, 0, e) < 0)
        return -1;
    return 0;
}

static int load_layer(loader *L, int il, int nextn, hm_error *e) {
    const hm_config *c = &L->m->cfg;
    hm_layer *ly = &L->m->layers[il];
    int D = c->n_embd, hd = c->head_dim;
    if (get(L, &ly->attn_norm, SLOT_ATTN_NORM, il, 1, D, 0, 0, e) < 0 ||
        get(L, &ly->wq, SLOT_WQ, il, 1, D, c->q_dim, 0, e) < 0 || get(L, &ly->wk, SLOT_WK, il, 1, D, c->kv_dim, 0, e) < 0 ||
        get(L, &ly->wv, SLOT_WV, il, 1, D, c->kv_dim, 0, e) < 0 || get(L, &ly->wo, SLOT_WO, il, 1, c->q_dim, D, 0, e) < 0 ||
        get(L, &ly->ffn_norm, SLOT_FFN_NORM, il, 1, D, 0, 0, e) < 0)
        return -1;
    if (c->qkv_bias && (get(L, &ly->bq, SLOT_BQ, il, 1, c->q_dim, 0, 0, e) < 0 ||
                        get(L, &ly->bk, SLOT_BK, il, 1, c->kv_dim, 0, 0, e) < 0 ||
                        get(L, &ly->bv, SLOT_BV, il, 1, c->kv_dim, 0, 0, e) < 0))
        return -1;
    if (c->qk_norm && (get(L, &ly->q_norm, SLOT_Q_NORM, il, 1, hd, 0, 0, e) < 0 ||
                       get(L, &ly->k_norm, SLOT_K_NORM, il, 1, hd, 0, 0, e) < 0))
        return -1;
    ly->is_moe = il >= c->n_dense_lead;
    if (!ly->is_moe) return load_ffn(L, &ly->dense, SLOT_FFN_GATE, il, c->n_ff, e);
    if (get(L, &ly->router, SLOT_ROUTER, il, 1, D, c->n_expert, 0, e) < 0) return -1;
    if (c->router_fn == HM_ROUTER_SIGMOID &&
        get(L, &ly->router_bias, SLOT_ROUTER_BIAS, il, c->arch == HM_ARCH_GLM4MOE, c->n_expert, 0, 0, e) < 0)
        return -1;
    if (c->n_shared_exp > 0 && load_ffn(L, &ly->shexp, SLOT_SHEXP_GATE, il, c->n_ff_shexp, e)) return -1;
    if (load_experts(L, ly, il, e)) return -1;
    if (nextn) {
        hm_nextn_w *n = &ly->nextn;
        if (get(L, &n->eh_proj, SLOT_NEXTN_EH_PROJ, il, 1, 2 * D, D, 0, e) < 0 ||
            get(L, &n->enorm, SLOT_NEXTN_ENORM, il, 1, D, 0, 0, e) < 0 ||
            get(L, &n->hnorm, SLOT_NEXTN_HNORM, il, 1, D, 0, 0, e) < 0 ||
            get(L, &n->shared_head_norm, SLOT_NEXTN_HEAD_NORM, il, 1, D, 0, 0, e) < 0 ||
            get(L, &n->embed_tokens, SLOT_NEXTN_EMBED, il, 0, D, c->n_vocab, 0, e) < 0 ||
            get(L, &n->shared_head_head, SLOT_NEXTN_HEAD, il, 0, D, c->n_vocab, 0, e) < 0)
            return -1;
    }
    return 0;
}

static int load_tensors(hm_model *m, hm_error *e) {
    loader L = { m, m->store, m->path };
    hm_config *c = &m->cfg;
    if (get(&L, &m->tok_embd, SLOT_TOK_EMBD, 0, 1, c->n_embd, c->n_vocab, 0, e) < 0 ||
        get(&L, &m->output_norm, SLOT_OUTPUT_NORM, 0, 1, c->n_embd, 0, 0, e) < 0)
        return -1;
    if (!c->tied_output) {
        if (get(&L, &m->output, SLOT_OUTPUT, 0, 1, c->n_embd, c->n_vocab, 0, e) < 0) return -1;
    } else m->output = m->tok_embd;
    /* HF checkpoints may or may not carry the MTP layer; GGUF files that declare it must */
    if (!m->store->is_gguf && c->n_nextn > 0) {
        char name[256]; hm_tensor t;
        names_get(name, sizeof name, SLOT_NEXTN_EH_PROJ, 0, c->arch, c->n_layer, 0);
        if (find(&L, name, &t, e) <= 0) c->n_nextn = 0;
    }
    m->layers = hm_calloc((size_t)(c->n_layer + c->n_nextn), sizeof(hm_layer));
    for (int il = 0; il < c->n_layer + c->n_nextn; il++)
        if (load_layer(&L, il, il >= c->n_layer, e)) return -1;
    return 0;
}

/* ---------------------------------------------------------------- entry points */

/* A tokenizer that can produce ids past the embedding table would make the forward pass read
 * outside the mapped file (generate feeds encoded ids straight to cpu_forward). */
static int check_tokenizer(const hm_model *m, hm_error *e) {
    if (m->tok && tokenizer_n_vocab(m->tok) > m->cfg.n_vocab)
        return hm_fail(e, "%s: tokenizer vocab: expected at most %d tokens (the embedding rows), found %d", m->path,
                       m->cfg.n_vocab, tokenizer_n_vocab(m->tok));
    return 0;
}

int model_load(hm_model *m, const char *path, hm_error *e) {
    memset(m, 0, sizeof *m);
    m->path = hm_strdup(path);
    m->store = hm_calloc(1, sizeof(hm_model_store));
    struct stat st;
    if (stat(path, &st) != 0) { hm_fail(e, "%s: expected a .gguf file or an HF model directory, found nothing", path); goto fail; }
    if (S_ISDIR(st.st_mode)) {
        if (config_from_hf(&m->cfg, path, e) || st_open_dir(&m->store->st, path, e)) goto fail;
        if (load_tensors(m, e)) goto fail;
        char tp[4096]; snprintf(tp, sizeof tp, "%s/tokenizer.json", path);
        if (stat(tp, &st) == 0 && !(m->tok = tokenizer_load_json(tp, e))) goto fail;
        snprintf(tp, sizeof tp, "%s/tokenizer_config.json", path);
        char *txt = hm_read_file(tp, NULL, NULL);
        if (txt) {
            cJSON *j = cJSON_Parse(txt);
            cJSON *ct = j ? cJSON_GetObjectItemCaseSensitive(j, "chat_template") : NULL;
            if (cJSON_IsString(ct)) m->chat_template = hm_strdup(ct->valuestring);
            cJSON_Delete(j); free(txt);
        }
        if (check_tokenizer(m, e)) goto fail;
    } else {
        m->store->is_gguf = 1; m->from_gguf = 1;
        if (gguf_open(&m->store->gguf, path, e) || config_from_gguf(&m->cfg, &m->store->gguf, e)) goto fail;
        if (load_tensors(m, e)) goto fail;
        if (gguf_find_kv(&m->store->gguf, "tokenizer.ggml.model") && !(m->tok = tokenizer_load_gguf(&m->store->gguf, e)))
            goto fail;
        m->chat_template = gguf_get_str(&m->store->gguf, "tokenizer.chat_template");
        if (check_tokenizer(m, e)) goto fail;
    }
    return 0;
fail:
    model_free(m);
    return -1;
}

void model_free(hm_model *m) {
    if (m->layers)
        for (int i = 0; i < m->cfg.n_layer + m->cfg.n_nextn; i++) free(m->layers[i].experts);
    free(m->layers);
    if (m->tok) tokenizer_free(m->tok);
    if (m->store) {
        if (m->store->is_gguf) gguf_close(&m->store->gguf);
        else st_close(&m->store->st);
        free(m->store);
    }
    free(m->chat_template); free(m->path);
    memset(m, 0, sizeof *m);
}

const gguf_file *model_gguf(const hm_model *m) { return m->store && m->store->is_gguf ? &m->store->gguf : NULL; }

static size_t tb(const hm_tensor *t) { return t->data ? t->nbytes : 0; }
static size_t ffn_bytes(const hm_ffn_w *f) { return tb(&f->gate) + tb(&f->up) + tb(&f->down); }

size_t model_weight_bytes(const hm_model *m) {
    size_t n = tb(&m->tok_embd) + tb(&m->output_norm) + (m->cfg.tied_output ? 0 : tb(&m->output));
    for (int i = 0; i < m->cfg.n_layer + m->cfg.n_nextn; i++) {
        const hm_layer *l = &m->layers[i];
        n += tb(&l->attn_norm) + tb(&l->wq) + tb(&l->wk) + tb(&l->wv) + tb(&l->wo) + tb(&l->bq) + tb(&l->bk) + tb(&l->bv) +
             tb(&l->q_norm) + tb(&l->k_norm) + tb(&l->ffn_norm) + ffn_bytes(&l->dense) + tb(&l->router) +
             tb(&l->router_bias) + ffn_bytes(&l->shexp);
        if (l->experts) for (int x = 0; x < m->cfg.n_expert; x++) n += ffn_bytes(&l->experts[x].host);
        n += tb(&l->nextn.eh_proj) + tb(&l->nextn.enorm) + tb(&l->nextn.hnorm) + tb(&l->nextn.shared_head_norm) +
             tb(&l->nextn.embed_tokens) + tb(&l->nextn.shared_head_head);
    }
    return n;
}

static size_t tb_(const hm_tensor *t) { return t->data ? t->nbytes : 0; }
static size_t fb_(const hm_ffn_w *f) { return tb_(&f->gate) + tb_(&f->up) + tb_(&f->down); }

double model_decode_bytes(const hm_model *m) {
    const hm_config *c = &m->cfg;
    double n = tb_(&m->output) + tb_(&m->output_norm) + (double)c->n_embd * 4;
    for (int il = 0; il < c->n_layer; il++) {
        const hm_layer *l = &m->layers[il];
        n += tb_(&l->attn_norm) + tb_(&l->ffn_norm) + tb_(&l->wq) + tb_(&l->wk) + tb_(&l->wv) + tb_(&l->wo) + tb_(&l->bq) +
             tb_(&l->bk) + tb_(&l->bv) + tb_(&l->q_norm) + tb_(&l->k_norm) + fb_(&l->dense) + fb_(&l->shexp) +
             tb_(&l->router) + tb_(&l->router_bias);
        if (l->is_moe && l->experts) n += (double)c->n_expert_used * fb_(&l->experts[0].host);
    }
    return n;
}
