/* prefill_size.h - the sizes of the batched prefill's workspace for a chunk of tokens (what
 * gpu/prefill.cu allocates), as plain C so that the planner (src/cmd_plan.c) prices the same bytes
 * the engine reserves under --gpu-mem, in CPU-only builds too. */
#ifndef HM_PREFILL_SIZE_H
#define HM_PREFILL_SIZE_H
#include "model.h"
#include <stddef.h>

#define PF_EXPERT_WS (512ull << 20) /* bytes of F16 expert weights dequantized per group */

typedef struct {
    size_t emb, x, xh, qkv, atth, gu, act, xg, ye, rlog, nk, wbuf, cnt, tiles;   /* elements */
    int grp;   /* experts dequantized per group */
} pf_layout;

static inline pf_layout pf_layout_of(const hm_model *m, int chunk) {
    const hm_config *c = &m->cfg;
    pf_layout l;
    int moe = 0;
    for (int il = 0; il < c->n_layer; il++) moe |= m->layers[il].is_moe;
    size_t C = (size_t)chunk, D = c->n_embd, K = moe ? c->n_expert_used : 0, E = c->n_expert;
    size_t ffd = c->n_ff > c->n_ff_shexp ? c->n_ff : c->n_ff_shexp; /* widths over all C rows */
    size_t rows_e = C * K, fe = c->n_ff_exp;
    l.emb = C * D;
    l.x = C * D;
    l.xh = C * D;
    l.qkv = C * (c->q_dim + 2 * c->kv_dim);
    l.atth = C * c->q_dim;
    l.gu = C * 2 * ffd > rows_e * 2 * fe ? C * 2 * ffd : rows_e * 2 * fe;
    l.act = C * ffd > rows_e * fe ? C * ffd : rows_e * fe;
    l.xg = rows_e * D;
    l.ye = rows_e * D;
    l.rlog = C * E;
    l.nk = rows_e;
    l.cnt = 2 * E + 2;
    l.tiles = rows_e / 128 + E + 2;
    size_t per = 3 * fe * D * 2; /* one expert's F16 weights */
    l.grp = 1;
    if (K && per) {
        size_t g = PF_EXPERT_WS / per;
        l.grp = g < 1 ? 1 : g > E ? (int)E : (int)g;
    }
    size_t wb = (size_t)(c->q_dim + 2 * c->kv_dim) * D * 2;
    if ((size_t)c->q_dim * D * 2 > wb) wb = (size_t)c->q_dim * D * 2;
    if (3 * ffd * D * 2 > wb) wb = 3 * ffd * D * 2;
    if (K && E * D * 6 > wb) wb = E * D * 6;
    if (K && l.grp * per > wb) wb = l.grp * per;
    l.wbuf = wb;
    return l;
}

/* Device bytes of that workspace (F32 and F16 buffers, tile lists, the weight buffer, padding). */
static inline size_t pf_layout_bytes(const pf_layout *l) {
    return 4 * (l->x * 2 + l->qkv + l->x + l->gu + l->ye + l->rlog + l->nk * 4 + l->cnt + l->cnt) +
           2 * (l->xh + l->atth + l->act + l->xg) + 16 * l->tiles + l->wbuf + 16 * 256;
}

/* Bytes of each of the prefill attention's two F16 copies of one layer's K and V^T (positions
 * rounded up to its 64-row tiles); the executor allocates them with the KV cache. */
static inline size_t pf_kv16_bytes(const hm_model *m, int n_ctx) {
    return (size_t)(n_ctx + 63) / 64 * 64 * m->cfg.kv_dim * 2;
}

/* The workspace of a chunk of `chunk` prompt tokens. */
static inline size_t pf_workspace_bytes(const hm_model *m, int chunk) {
    pf_layout l = pf_layout_of(m, chunk);
    return pf_layout_bytes(&l);
}
#endif
