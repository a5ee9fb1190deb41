/* forward.c - the CPU reference forward pass, one token at a time; reads like the math. */
#include "cpu.h"
#include "gemv.h"
#include "router.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int cpu_state_init(cpu_state *s, const hm_config *c, int n_ctx) {
    memset(s, 0, sizeof *s);
    if (n_ctx < 1 || n_ctx > (1 << 24)) return -1;
    s->n_ctx = n_ctx;
    size_t kv = (size_t)c->n_layer * (size_t)n_ctx * (size_t)c->kv_dim;
    int ffw = c->n_ff_exp;
    if (c->n_ff > ffw) ffw = c->n_ff;
    if (c->n_ff_shexp > ffw) ffw = c->n_ff_shexp;
    s->k_cache = calloc(kv, sizeof(float)); s->v_cache = calloc(kv, sizeof(float));
    s->x = calloc((size_t)c->n_embd, sizeof(float)); s->xn = calloc((size_t)c->n_embd, sizeof(float));
    s->q = calloc((size_t)c->q_dim, sizeof(float)); s->k = calloc((size_t)c->kv_dim, sizeof(float));
    s->v = calloc((size_t)c->kv_dim, sizeof(float)); s->att_out = calloc((size_t)c->q_dim, sizeof(float));
    s->att = calloc((size_t)c->n_head * (size_t)n_ctx, sizeof(float));
    s->tmp = calloc((size_t)c->n_embd, sizeof(float)); s->moe = calloc((size_t)c->n_embd, sizeof(float));
    s->hb = calloc((size_t)ffw, sizeof(float)); s->hb2 = calloc((size_t)ffw, sizeof(float));
    s->router_logits = calloc((size_t)c->n_expert, sizeof(float)); s->bias = calloc((size_t)c->n_expert, sizeof(float));
    s->exp_idx = calloc((size_t)c->n_expert_used, sizeof(int)); s->exp_w = calloc((size_t)c->n_expert_used, sizeof(float));
    s->moe_gu = calloc((size_t)2 * c->n_expert_used * c->n_ff_exp, sizeof(float));
    s->moe_y = calloc((size_t)c->n_expert_used * c->n_embd, sizeof(float));
    /* activations are at most 4 bytes per element (F32 weights); x plus one hidden per expert */
    size_t big = (size_t)(c->n_embd > c->n_ff_exp ? c->n_embd : c->n_ff_exp);
    s->moe_xq = calloc((size_t)(c->n_expert_used + 3) * big, 4);
    if (!s->k_cache || !s->v_cache || !s->att) { cpu_state_free(s); return -1; }
    return 0;
}

void cpu_state_free(cpu_state *s) {
    free(s->k_cache); free(s->v_cache); free(s->x); free(s->xn); free(s->q); free(s->k); free(s->v);
    free(s->att_out); free(s->att); free(s->tmp); free(s->moe); free(s->hb); free(s->hb2);
    free(s->router_logits); free(s->bias); free(s->exp_idx); free(s->exp_w);
    free(s->moe_gu); free(s->moe_y); free(s->moe_xq);
    memset(s, 0, sizeof *s);
}

static void attention(const hm_model *m, cpu_state *s, const hm_layer *ly, int il, int pos) {
    const hm_config *c = &m->cfg;
    int hd = c->head_dim, kvd = c->kv_dim, grp = c->n_head / c->n_head_kv;
    cpu_matvec(s->q, &ly->wq, s->xn);
    cpu_matvec(s->k, &ly->wk, s->xn);
    cpu_matvec(s->v, &ly->wv, s->xn);
    if (c->qkv_bias) { cpu_add_bias(s->q, &ly->bq, c->q_dim); cpu_add_bias(s->k, &ly->bk, kvd); cpu_add_bias(s->v, &ly->bv, kvd); }
    if (c->qk_norm) {
        for (int h = 0; h < c->n_head; h++) cpu_rmsnorm(s->q + h * hd, s->q + h * hd, &ly->q_norm, hd, c->rms_eps);
        for (int h = 0; h < c->n_head_kv; h++) cpu_rmsnorm(s->k + h * hd, s->k + h * hd, &ly->k_norm, hd, c->rms_eps);
    }
    cpu_rope_neox(s->q, c->n_head, hd, c->n_rot, pos, c->rope_theta);
    cpu_rope_neox(s->k, c->n_head_kv, hd, c->n_rot, pos, c->rope_theta);
    float *kc = s->k_cache + (size_t)il * s->n_ctx * kvd, *vc = s->v_cache + (size_t)il * s->n_ctx * kvd;
    memcpy(kc + (size_t)pos * kvd, s->k, sizeof(float) * kvd);
    memcpy(vc + (size_t)pos * kvd, s->v, sizeof(float) * kvd);
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(static) if (c->n_head * pos > 4096)
    for (int h = 0; h < c->n_head; h++) {
        const float *q = s->q + h * hd;
        float *att = s->att + (size_t)h * s->n_ctx, *o = s->att_out + h * hd;
        int kvh = h / grp;
        for (int t = 0; t <= pos; t++) {
            const float *k = kc + (size_t)t * kvd + kvh * hd;
            float d = 0;
            for (int i = 0; i < hd; i++) d += q[i] * k[i];
            att[t] = d * scale;
        }
        cpu_softmax(att, pos + 1);
        memset(o, 0, sizeof(float) * hd);
        for (int t = 0; t <= pos; t++) {
            const float *v = vc + (size_t)t * kvd + kvh * hd;
            for (int i = 0; i < hd; i++) o[i] += att[t] * v[i];
        }
    }
    cpu_matvec(s->tmp, &ly->wo, s->att_out);
    for (int i = 0; i < c->n_embd; i++) s->x[i] += s->tmp[i];
}

/* The chosen experts with the fast kernels: all gate/up products in one parallel region, then all
 * down products in another (hm_gemv_multi), instead of 3 regions per expert. Same products as
 * cpu_ffn per expert, bit for bit. Returns 0, or -1 when some weight type has no fast kernel. */
static int experts_fast(const hm_config *c, cpu_state *s, const hm_layer *ly) {
    int k = c->n_expert_used, F = c->n_ff_exp, D = c->n_embd;
    const hm_tensor *W[3 * 64];
    const void *xq[3 * 64];
    float *y[3 * 64];
    if (k > 64) return -1;
    for (int j = 0; j < k; j++) {
        const hm_ffn_w *f = &ly->experts[s->exp_idx[j]].host;
        if (!hm_gemv_supported(f->gate.type) || !hm_gemv_supported(f->up.type) || !hm_gemv_supported(f->down.type) ||
            hm_act_size(f->gate.type, D) == 0 || hm_act_size(f->up.type, D) == 0 || hm_act_size(f->down.type, F) == 0)
            return -1;
    }
    /* x in the activation formats gate and up need (they may differ: one buffer per format) */
    size_t big = (size_t)(D > F ? D : F) * 4;
    uint8_t *xg = s->moe_xq, *xu = s->moe_xq + big;
    const hm_ffn_w *f0 = &ly->experts[s->exp_idx[0]].host;
    int tg = hm_act_type(f0->gate.type), tu = hm_act_type(f0->up.type);
    hm_act_quantize(f0->gate.type, s->xn, xg, D);
    if (tu != tg) hm_act_quantize(f0->up.type, s->xn, xu, D);
    for (int j = 0; j < k; j++) {
        const hm_ffn_w *f = &ly->experts[s->exp_idx[j]].host;
        if (hm_act_type(f->gate.type) != tg || hm_act_type(f->up.type) != tu) return -1;
        W[2 * j] = &f->gate; xq[2 * j] = xg; y[2 * j] = s->moe_gu + (size_t)j * F;
        W[2 * j + 1] = &f->up; xq[2 * j + 1] = tu != tg ? xu : xg; y[2 * j + 1] = s->moe_gu + (size_t)(k + j) * F;
    }
    hm_gemv_multi(2 * k, W, xq, y);
    uint8_t *hq = s->moe_xq + 2 * big;
    size_t hstep = big;
    for (int j = 0; j < k; j++) {
        float *g = s->moe_gu + (size_t)j * F, *u = s->moe_gu + (size_t)(k + j) * F;
        for (int i = 0; i < F; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        const hm_ffn_w *f = &ly->experts[s->exp_idx[j]].host;
        hm_act_quantize(f->down.type, g, hq + (size_t)j * hstep, F);
        W[j] = &f->down; xq[j] = hq + (size_t)j * hstep; y[j] = s->moe_y + (size_t)j * D;
    }
    hm_gemv_multi(k, W, xq, y);
    memset(s->moe, 0, sizeof(float) * D);
    for (int j = 0; j < k; j++)
        for (int i = 0; i < D; i++) s->moe[i] += s->exp_w[j] * s->moe_y[(size_t)j * D + i];
    return 0;
}

static void moe(const hm_model *m, cpu_state *s, const hm_layer *ly, int il, int pos) {
    const hm_config *c = &m->cfg;
    router_params rp = { c->router_fn, c->n_expert, c->n_expert_used, c->norm_topk, c->routed_scale,
                         c->n_group, c->topk_group };
    cpu_matvec(s->router_logits, &ly->router, s->xn);
    const float *bias = NULL;
    if (ly->router_bias.data) { cpu_tensor_row(&ly->router_bias, 0, s->bias); bias = s->bias; }
    router_select(&rp, s->router_logits, bias, s->exp_idx, s->exp_w);
    if (s->replay && s->replay[il * c->n_expert_used] >= 0) {
        memcpy(s->exp_idx, s->replay + il * c->n_expert_used, sizeof(int) * c->n_expert_used);
        router_weights(&rp, s->router_logits, s->exp_idx, s->exp_w);
    }
    if (s->route_cb) s->route_cb(s->route_ud, il, pos, s->exp_idx, s->exp_w, c->n_expert_used);
    if (hm_kernels_get() != HM_KERNELS_FAST || experts_fast(c, s, ly)) {
        memset(s->moe, 0, sizeof(float) * c->n_embd);
        for (int j = 0; j < c->n_expert_used; j++) {
            const hm_expert *ex = &ly->experts[s->exp_idx[j]];
            cpu_ffn(s->tmp, &ex->host, s->xn, s->hb, s->hb2);
            for (int i = 0; i < c->n_embd; i++) s->moe[i] += s->exp_w[j] * s->tmp[i];
        }
    }
    if (c->n_shared_exp > 0) {
        cpu_ffn(s->tmp, &ly->shexp, s->xn, s->hb, s->hb2);
        for (int i = 0; i < c->n_embd; i++) s->moe[i] += s->tmp[i];
    }
    for (int i = 0; i < c->n_embd; i++) s->x[i] += s->moe[i];
}

void cpu_forward(const hm_model *m, cpu_state *s, int32_t token, int pos, float *logits) {
    const hm_config *c = &m->cfg;
    cpu_tensor_row(&m->tok_embd, token, s->x);
    for (int il = 0; il < c->n_layer; il++) {
        const hm_layer *ly = &m->layers[il];
        cpu_rmsnorm(s->xn, s->x, &ly->attn_norm, c->n_embd, c->rms_eps);
        attention(m, s, ly, il, pos);
        cpu_rmsnorm(s->xn, s->x, &ly->ffn_norm, c->n_embd, c->rms_eps);
        if (ly->is_moe) moe(m, s, ly, il, pos);
        else {
            cpu_ffn(s->tmp, &ly->dense, s->xn, s->hb, s->hb2);
            for (int i = 0; i < c->n_embd; i++) s->x[i] += s->tmp[i];
        }
    }
    if (!logits) return;
    cpu_rmsnorm(s->xn, s->x, &m->output_norm, c->n_embd, c->rms_eps);
    cpu_matvec(logits, &m->output, s->xn);
}
