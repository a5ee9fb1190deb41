/* prefill.cu - batched prefill on the GPU executor: the prompt runs in chunks of tokens, each layer
 * as GEMMs (weights dequantized to F16 tiles, cuBLAS with F32 accumulation, F32 outputs), a
 * tensor-core flash attention (prefill_mma.cu: on F16 copies of the layer's K and V^T made from the
 * F32 KV cache once per chunk), and MoE with tokens grouped by expert on the device (stable
 * counting sort), the used experts' weights dequantized through the device pointer table, one
 * grouped GEMM launch per projection per group of experts.
 * Kernel choices (environment, for tests and benchmarks): HOTMOE_PREFILL_ATTN = mma2 (default: the
 * layer's K and V^T converted to F16 once per chunk, the executor's k16/vt16) | mma (on the F32
 * cache) | wmma | simple; HOTMOE_PREFILL_MOE = grouped (default) | cublas; HOTMOE_PREFILL_GEMM_STAGES
 * = 2 (default) | 4; HOTMOE_PREFILL_CHUNK (tokens, default 8192:
 * with the whole model in VRAM one 8K prompt dequantizes each expert once, not twice); HOTMOE_PREFILL_PROFILE=1.
 *
 * Precision: activations entering a GEMM are rounded to F16 (as are the dequantized weights);
 * the residual stream, norms, RoPE, softmax statistics, router logits (an F32 GEMM on F32 router
 * weights) and the KV cache stay F32. Routing repeats op_router's selection rule exactly. */
#include "exec_impl.cuh"
#include "gpu_gemv.h"
#include "prefill.cuh"
#include "prefill_size.h"
extern "C" {
#include "quant.h"
}
#include "blas.cuh"
#include <cuda_fp16.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "host_par.h"

#define PF_CHUNK_DEFAULT 8192
#define PF_HEADROOM ((size_t)1 << 30)   /* free VRAM an unbudgeted workspace leaves (above) */

struct gpu_prefill {
    int chunk;                /* tokens per pass */
    int grp;                  /* experts dequantized per group */
    const hm_blas *B;                    /* the loaded cuBLAS's entry points */
    cublasHandle_t blas;
    float *h_emb;             /* pinned (chunk, n_embd): token embeddings as F32 */
    int *h_cnt;               /* pinned (2 * n_expert + 2): counts, offsets, n_used */
    float *x, *xn;            /* (chunk, n_embd): residual stream, its norm */
    __half *xh;               /* (chunk, n_embd): the norm as GEMM input */
    float *qkv;               /* (chunk, q_dim + 2 kv_dim) */
    __half *atth;             /* (chunk, q_dim): attention output */
    float *tmp;               /* (chunk, n_embd): o-proj / dense / shared-expert output */
    float *gu;                /* (rows, 2 ff): gate | up */
    __half *act;              /* (rows, ff) */
    __half *xg;               /* (chunk * top-k, n_embd): rows gathered by expert */
    float *ye;                /* (chunk * top-k, n_embd): expert outputs */
    float *rlog;              /* (chunk, n_expert) */
    float *wts;               /* (chunk, top-k) */
    int *ids, *rowidx, *perm; /* (chunk * top-k) */
    int *cnt;                 /* (2 * n_expert + 2): counts, offsets (n_expert + 1), n_used */
    int *used;                /* (n_expert): the used experts in order */
    int4 *tiles, *h_tiles;    /* (n_tiles): grouped-GEMM row tiles {slot, row0, rows, -}; device, pinned */
    void *wbuf;               /* dequantized weights */
    size_t bytes;
    std::vector<void *> allocs;
};

static int fail(char *err, size_t n, const char *fmt, ...) {
    if (err && n) { va_list ap; va_start(ap, fmt); vsnprintf(err, n, fmt, ap); va_end(ap); }
    return -1;
}

#define PCK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
    return fail(err, errlen, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); } while (0)
#define PLAUNCH() PCK(cudaGetLastError())

/* ------------------------------------------------------------------ sizes */



extern "C" size_t gpu_exec_prefill_workspace(const hm_model *m, int chunk) {
    if (chunk < 1) chunk = PF_CHUNK_DEFAULT;
    pf_layout l = pf_layout_of(m, chunk);
    return pf_layout_bytes(&l);
}

static void pf_release(gpu_prefill *p) {
    if (!p) return;
    for (void *a : p->allocs) cudaFree(a);
    if (p->h_emb) cudaFreeHost(p->h_emb);
    if (p->h_cnt) cudaFreeHost(p->h_cnt);
    if (p->h_tiles) cudaFreeHost(p->h_tiles);
    if (p->blas) p->B->destroy(p->blas);
    delete p;
}

void gpu_prefill_free(gpu_exec *g) {
    pf_release(g->pf);
    g->pf = NULL;
}

template <class T>
static int pf_alloc(gpu_prefill *p, T **ptr, size_t n) {
    void *d = NULL;
    if (cudaMalloc(&d, n ? n * sizeof(T) : 16) != cudaSuccess) { cudaGetLastError(); return -1; }
    p->allocs.push_back(d);
    *ptr = (T *)d;
    return 0;
}

/* The workspace for chunk tokens; on out-of-memory, halves the chunk down to 64. */
static int pf_ensure(gpu_exec *g, int want, char *err, size_t errlen) {
    if (g->budget) {   /* --gpu-mem: the workspace fits in what the executor left (a chunk of pf_cap was reserved) */
        if (g->pf_cap && want > g->pf_cap) want = g->pf_cap;
        while (want > 64 && g->vram + gpu_exec_prefill_workspace(g->m, want) > g->budget) want /= 2;
        if (g->vram + gpu_exec_prefill_workspace(g->m, want) > g->budget)
            return fail(err, errlen, "gpu prefill: --gpu-mem leaves %.1f MiB; a chunk of %d tokens needs %.1f MiB of workspace",
                        (g->budget - (g->vram < g->budget ? g->vram : g->budget)) / 1048576.0, want,
                        gpu_exec_prefill_workspace(g->m, want) / 1048576.0);
    } else if (!(g->pf && g->pf->chunk >= want)) {
        /* no budget: a smaller chunk where the workspace would leave less than PF_HEADROOM of the free
         * VRAM (cuBLAS loads ~0.55 GiB with the first workspace; decode graphs are instantiated later) */
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
            const size_t have = fr + (g->pf ? g->pf->bytes : 0);   /* the old workspace is freed first */
            while (want > 64 && gpu_exec_prefill_workspace(g->m, want) + PF_HEADROOM > have) want /= 2;
        } else {
            cudaGetLastError();
        }
    }
    if (g->pf && g->pf->chunk >= want) return 0;
    const hm_blas *B = hm_blas_get(err, errlen);
    if (!B) return -1;
    gpu_prefill_free(g);
    for (int chunk = want; chunk >= 64 || chunk == want; chunk /= 2) {
        gpu_prefill *p = new gpu_prefill();
        p->B = B;
        pf_layout l = pf_layout_of(g->m, chunk);
        p->chunk = chunk; p->grp = l.grp;
        int bad = pf_alloc(p, &p->x, l.x) || pf_alloc(p, &p->xn, l.x) || pf_alloc(p, &p->xh, l.xh) ||
                  pf_alloc(p, &p->qkv, l.qkv) || pf_alloc(p, &p->atth, l.atth) || pf_alloc(p, &p->tmp, l.x) ||
                  pf_alloc(p, &p->gu, l.gu) || pf_alloc(p, &p->act, l.act) || pf_alloc(p, &p->xg, l.xg) ||
                  pf_alloc(p, &p->ye, l.ye) || pf_alloc(p, &p->rlog, l.rlog) || pf_alloc(p, &p->wts, l.nk) ||
                  pf_alloc(p, &p->ids, l.nk) || pf_alloc(p, &p->rowidx, l.nk) || pf_alloc(p, &p->perm, l.nk) ||
                  pf_alloc(p, &p->cnt, l.cnt) || pf_alloc(p, &p->used, l.cnt) || pf_alloc(p, &p->tiles, l.tiles) ||
                  pf_alloc(p, (uint8_t **)&p->wbuf, l.wbuf);
        if (!bad && (cudaMallocHost(&p->h_emb, l.emb * sizeof(float)) != cudaSuccess ||
                     cudaMallocHost(&p->h_cnt, l.cnt * sizeof(int)) != cudaSuccess ||
                     cudaMallocHost(&p->h_tiles, l.tiles * sizeof(int4)) != cudaSuccess)) { cudaGetLastError(); bad = 1; }
        if (!bad && B->create(&p->blas) != CUBLAS_STATUS_SUCCESS) { p->blas = NULL; bad = 1; }
        if (!bad && B->set_stream(p->blas, g->s) != CUBLAS_STATUS_SUCCESS) bad = 1;
        if (!bad) {
            p->bytes = pf_layout_bytes(&l);
            g->pf = p;
            return 0;
        }
        pf_release(p);
        if (chunk < 128) break;
    }
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    return fail(err, errlen, "gpu prefill: cannot allocate the workspace (%.1f MiB for a chunk of 64 tokens; %.1f MiB free)",
                gpu_exec_prefill_workspace(g->m, 64) / 1048576.0, fr / 1048576.0);
}

/* ------------------------------------------------------------------ host side */

/* pf_deq_tab with the error named */
static int deq_tab(int type, const void *const *tab, const int *ids, int nslots, int64_t nper, __half *dst, int64_t dstride,
                   cudaStream_t s, char *err, size_t errlen) {
    int rc = pf_deq_tab(type, tab, ids, nslots, nper, dst, dstride, s);
    if (rc == -1) return fail(err, errlen, "gpu prefill: no dequantizer for ggml type %d", type);
    if (rc == -2) return fail(err, errlen, "gpu prefill: %lld values are not whole blocks of type %d", (long long)nper, type);
    PLAUNCH();
    return 0;
}

/* one matrix (nrows x ncols, nmat 2 for gate and up) of each of nslots experts of tab to F16 rows:
 * tab's matrices interleaved for inter_tok slots a token (dexperts.inter_tok), or GGUF rows (0) */
static int deq_x(int inter_tok, int type, const void *const *tab, const int *ids, int nslots, int ncols, int nrows, int nmat,
                 __half *dst, int64_t dstride, cudaStream_t s, char *err, size_t errlen) {
    if (!inter_tok) return deq_tab(type, tab, ids, nslots, (int64_t)ncols * nrows, dst, dstride, s, err, errlen);
    int rc = pf_deq_tab_inter(type, tab, ids, nslots, ncols, nrows, nmat, inter_tok, dst, dstride, s);
    if (rc == -1) return fail(err, errlen, "gpu prefill: no interleaved layout of %d x %d for ggml type %d", nrows, ncols, type);
    if (rc == -2) return fail(err, errlen, "gpu prefill: workspace %p, stride %lld: expected 16-byte steps", (void *)dst, (long long)dstride);
    PLAUNCH();
    return 0;
}

/* Y (n, m) F32 row-major = X (n, k) F16 row-major . W (m, k)^T F16 */
static int gemm_h(gpu_prefill *p, const __half *W, const __half *X, float *Y, int m, int n, int k, char *err, size_t errlen) {
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = p->B->gemm_ex(p->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, W, CUDA_R_16F, k, X, CUDA_R_16F, k,
                                     &zero, Y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return fail(err, errlen, "gpu prefill: cublasGemmEx (%d x %d x %d) failed: %s", m, n, k, p->B->status_string(st));
    return 0;
}

/* Y = X . W^T, all F32 (the router: its logits decide the routing, so no F16 rounding) */
static int gemm_f(gpu_prefill *p, const float *W, const float *X, float *Y, int m, int n, int k, char *err, size_t errlen) {
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = p->B->sgemm(p->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, W, k, X, k, &zero, Y, m);
    if (st != CUBLAS_STATUS_SUCCESS) return fail(err, errlen, "gpu prefill: cublasSgemm (%d x %d x %d) failed: %s", m, n, k, p->B->status_string(st));
    return 0;
}

static int deq(const dmat *w, void *dst, cudaStream_t s, char *err, size_t errlen) {
    if (w->inter) {
        const int rc = pf_deq_mat_inter(w->type, w->d, (int)w->ne0, (int)w->ne1, (__half *)dst, s);
        if (rc) return fail(err, errlen, "gpu prefill: the interleaved %lld x %lld matrix of type %d: %s", (long long)w->ne1,
                            (long long)w->ne0, w->type, rc == -1 ? "no such layout" : "workspace not 16-byte aligned");
        PLAUNCH();
        return 0;
    }
    if (gpu_dequant(w->type, w->d, dst, w->ne0 * w->ne1, 1, s)) return fail(err, errlen, "gpu prefill: %s", gpu_gemv_error());
    return 0;
}

/* Profiling (HOTMOE_PREFILL_PROFILE=1): events between op groups, summed, printed per call. */
enum { Q_NORM, Q_QKV, Q_ROPE, Q_ATTN, Q_OPROJ, Q_ROUTER, Q_SORT, Q_EXP_DEQ, Q_EXP_GEMM, Q_COMBINE, Q_DENSE, Q_OUTPUT, Q_EMBED, Q_COUNT };
static const char *q_names[Q_COUNT] = { "norm", "q/k/v deq+gemm", "qkv post+rope+kv", "attention", "o-proj+res+norm",
                                        "router gemm+topk", "sort+gather (+sync)", "experts dequant", "experts gemm+swiglu",
                                        "moe combine+norm", "dense/shared ffn", "output head", "embed+upload" };
typedef struct { int on; std::vector<cudaEvent_t> ev; std::vector<int> grp; size_t n; double ms[Q_COUNT]; } pf_prof;
static void qmark(pf_prof *pr, cudaStream_t s, int grp) {
    if (!pr->on) return;
    if (pr->n == pr->ev.size()) { cudaEvent_t e; cudaEventCreate(&e); pr->ev.push_back(e); pr->grp.push_back(0); }
    cudaEventRecord(pr->ev[pr->n], s);
    pr->grp[pr->n++] = grp;
}
static void qflush(pf_prof *pr, cudaStream_t s) {
    if (!pr->on || pr->n < 2) { pr->n = 0; return; }
    cudaStreamSynchronize(s);
    for (size_t i = 1; i < pr->n; i++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, pr->ev[i - 1], pr->ev[i]);
        if (pr->grp[i] >= 0) pr->ms[pr->grp[i]] += ms;
    }
    cudaEventRecord(pr->ev[0], s); /* the next span starts here */
    pr->grp[0] = -1;
    pr->n = 1;
}

/* Dense FFN or shared expert (a one-entry table) over all n rows: tmp = down(silu(gate x) * up x). */
static int ffn_single(gpu_exec *g, const dexperts *x, int ff, int n, char *err, size_t errlen) {
    gpu_prefill *p = g->pf;
    const hm_config *c = &g->m->cfg;
    int D = c->n_embd;
    __half *wgu = (__half *)p->wbuf, *wd = wgu + (size_t)2 * ff * D;
    if (deq_x(x->inter_tok, x->type_gu, x->gate, g->zero_id, 1, D, ff, 2, wgu, 0, g->s, err, errlen) ||
        deq_x(x->inter_tok, x->type_gu, x->up, g->zero_id, 1, D, ff, 2, wgu + (size_t)ff * D, 0, g->s, err, errlen) ||
        deq_x(x->inter_tok, x->type_down, x->down, g->zero_id, 1, ff, D, 1, wd, 0, g->s, err, errlen) ||
        gemm_h(p, wgu, p->xh, p->gu, 2 * ff, n, D, err, errlen))
        return -1;
    pf_swiglu(p->gu, p->act, n, ff, g->s);
    PLAUNCH();
    return gemm_h(p, wd, p->act, p->tmp, D, n, ff, err, errlen);
}

/* Routed experts of layer l for n rows of xh: leaves the expert outputs in ye (rowidx maps
 * (token, slot) to its row) and the routing weights in wts. */
/* --staging: the residency of the streamed layers, read once per call (prefill does not change it) */
struct pf_stage {
    std::vector<std::vector<int>> slot_of, hidx;   /* per layer, empty when not streamed */
    std::vector<int> moe;                          /* the streamed layers in order */
};

/* Stages layer il's cold experts (up to g->stage_n of them) into buffer b on the copy stream, after
 * the layer that last used b has dequantized its experts, and fills b's tables: resident experts
 * point at their slots, staged ones at the buffer, the rest at their pinned records (read in
 * place). */
static int stage_layer(gpu_exec *g, const pf_stage *st, int il, int b, char *err, size_t errlen) {
    const dcache *ca = g->L[il].cache;
    const int E = g->m->cfg.n_expert, nt = E + 1;
    PCK(cudaEventSynchronize(g->stage_done[b]));   /* b's pinned tables are free to rewrite */
    PCK(cudaStreamWaitEvent(g->stage_s, g->stage_free[b], 0));
    const void **h = g->stage_htab[b];
    const size_t off[3] = { 0, ca->off_up, ca->off_down };
    int rank = 0;
    for (int e = 0; e < E; e++) {
        const int so = st->slot_of[il][e], hi = st->hidx[il][e];
        const uint8_t *base;
        if (so >= 0) base = ca->dev + (size_t)so * ca->stride;
        else if (rank < g->stage_n) {
            uint8_t *dst = g->stage[b] + (size_t)rank++ * ca->stride;
            PCK(cudaMemcpyAsync(dst, ca->host_h + (size_t)hi * ca->stride, ca->stride, cudaMemcpyHostToDevice, g->stage_s));
            base = dst;
        } else
            base = ca->host + (size_t)hi * ca->stride;
        for (int i = 0; i < 3; i++) h[(size_t)i * nt + e] = base + off[i];
    }
    for (int i = 0; i < 3; i++) h[(size_t)i * nt + E] = h[(size_t)i * nt];
    PCK(cudaMemcpyAsync(g->stage_tab[b], h, 3 * sizeof(void *) * (size_t)nt, cudaMemcpyHostToDevice, g->stage_s));
    PCK(cudaEventRecord(g->stage_done[b], g->stage_s));
    return 0;
}

static int moe_routed(gpu_exec *g, const dlayer *l, int n, pf_prof *pr, const void *const *const *tabs, char *err,
                      size_t errlen) {
    gpu_prefill *p = g->pf;
    const hm_config *c = &g->m->cfg;
    cudaStream_t s = g->s;
    int D = c->n_embd, E = c->n_expert, K = c->n_expert_used, F = c->n_ff_exp, na = n * K;
    /* router logits in F32 */
    const float *wr = (const float *)l->router.d;
    if (l->router.type != HM_TYPE_F32) {
        int bf = l->router.type == HM_TYPE_BF16;
        uint16_t *h16 = (uint16_t *)p->wbuf;
        float *w32 = (float *)((uint8_t *)p->wbuf + (size_t)E * D * 2);
        if (gpu_dequant(l->router.type, l->router.d, h16, (int64_t)E * D, !bf, s)) return fail(err, errlen, "gpu prefill: %s", gpu_gemv_error());
        pf_widen(h16, w32, (int64_t)E * D, bf, s);
        PLAUNCH();
        wr = w32;
    }
    if (gemm_f(p, wr, p->xn, p->rlog, E, n, D, err, errlen)) return -1;
    pf_router(p->rlog, l->router_bias, n, E, K, c->router_fn, c->norm_topk, c->routed_scale, c->n_group, c->topk_group,
              p->ids, p->wts, s);
    PLAUNCH();
    qmark(pr, s, Q_ROUTER);
    pf_group(p->ids, na, E, p->cnt, p->used, p->perm, p->rowidx, p->xh, K, p->xg, D, s);
    PLAUNCH();
    PCK(cudaMemcpyAsync(p->h_cnt, p->cnt, sizeof(int) * (2 * E + 2), cudaMemcpyDeviceToHost, s));
    PCK(cudaStreamSynchronize(s));
    qmark(pr, s, Q_SORT);
    const int *cnt = p->h_cnt, *off = p->h_cnt + E, nu = p->h_cnt[2 * E + 1];
    std::vector<int> used;
    for (int e = 0; e < E; e++) if (cnt[e]) used.push_back(e);
    if ((int)used.size() != nu || off[E] != na) return fail(err, errlen, "gpu prefill: expert grouping is inconsistent (%d used, %d rows of %d)", nu, off[E], na);
    const dexperts *x = &l->exps;
    /* tabs: the staged tables of this layer (gate, up, down), else the cache's own */
    const void *const *tg = tabs ? tabs[0] : x->gate, *const *tu = tabs ? tabs[1] : x->up, *const *td = tabs ? tabs[2] : x->down;
    const int itok = tabs ? 0 : x->inter_tok;   /* staged tables hold GGUF rows */
    size_t per_gu = (size_t)2 * F * D, per_d = (size_t)D * F;
    __half *wgu = (__half *)p->wbuf, *wd = wgu + (size_t)p->grp * per_gu;
    /* grouped GEMM (default): row tiles of <= 128 rows of every used expert, all groups, one upload */
    const char *me = getenv("HOTMOE_PREFILL_MOE"); /* grouped (default), cublas: one cuBLAS call per expert */
    int grouped = !(me && !strcmp(me, "cublas")) && D % 8 == 0 && F % 8 == 0;
    const char *se = getenv("HOTMOE_PREFILL_GEMM_STAGES"); /* 2 (default, validated) or 4 (not yet run on a GPU) */
    int stages = se && atoi(se) == 4 ? 4 : 2;
    std::vector<int> tile0; /* first tile of each group, and the end */
    if (grouped) {
        int nt = 0;
        for (int g0 = 0; g0 < nu; g0 += p->grp) {
            tile0.push_back(nt);
            for (int j = 0; j < p->grp && g0 + j < nu; j++) {
                int e = used[g0 + j];
                for (int r = 0; r < cnt[e]; r += 128) p->h_tiles[nt++] = make_int4(j, off[e] + r, cnt[e] - r < 128 ? cnt[e] - r : 128, 0);
            }
        }
        tile0.push_back(nt);
        PCK(cudaMemcpyAsync(p->tiles, p->h_tiles, sizeof(int4) * nt, cudaMemcpyHostToDevice, s));
    }
    for (int g0 = 0, gi = 0; g0 < nu; g0 += p->grp, gi++) {
        int gn = nu - g0 < p->grp ? nu - g0 : p->grp;
        if (deq_x(itok, x->type_gu, tg, p->used + g0, gn, D, F, 2, wgu, per_gu, s, err, errlen) ||
            deq_x(itok, x->type_gu, tu, p->used + g0, gn, D, F, 2, wgu + (size_t)F * D, per_gu, s, err, errlen) ||
            deq_x(itok, x->type_down, td, p->used + g0, gn, F, D, 1, wd, per_d, s, err, errlen))
            return -1;
        qmark(pr, s, Q_EXP_DEQ);
        if (grouped) {
            int t0 = tile0[gi], ntl = tile0[gi + 1] - t0;
            if (pf_ggemm(wgu, (int64_t)per_gu, p->xg, p->gu, p->tiles + t0, ntl, 2 * F, D, stages, s)) return fail(err, errlen, "gpu prefill: grouped GEMM refused");
            PLAUNCH();
            int r0 = off[used[g0]], r1 = off[used[g0 + gn - 1]] + cnt[used[g0 + gn - 1]];
            pf_swiglu(p->gu + (size_t)r0 * 2 * F, p->act + (size_t)r0 * F, r1 - r0, F, s);
            PLAUNCH();
            if (pf_ggemm(wd, (int64_t)per_d, p->act, p->ye, p->tiles + t0, ntl, D, F, stages, s)) return fail(err, errlen, "gpu prefill: grouped GEMM refused");
            PLAUNCH();
            qmark(pr, s, Q_EXP_GEMM);
            continue;
        }
        for (int j = 0; j < gn; j++) {
            int e = used[g0 + j];
            if (gemm_h(p, wgu + j * per_gu, p->xg + (size_t)off[e] * D, p->gu + (size_t)off[e] * 2 * F, 2 * F, cnt[e], D, err, errlen)) return -1;
        }
        int r0 = off[used[g0]], r1 = off[used[g0 + gn - 1]] + cnt[used[g0 + gn - 1]];
        pf_swiglu(p->gu + (size_t)r0 * 2 * F, p->act + (size_t)r0 * F, r1 - r0, F, s);
        PLAUNCH();
        for (int j = 0; j < gn; j++) {
            int e = used[g0 + j];
            if (gemm_h(p, wd + j * per_d, p->act + (size_t)off[e] * F, p->ye + (size_t)off[e] * D, D, cnt[e], F, err, errlen)) return -1;
        }
        qmark(pr, s, Q_EXP_GEMM);
    }
    return 0;
}

static int attention(gpu_exec *g, float *kc, float *vc, int n, int pos0, char *err, size_t errlen) {
    gpu_prefill *p = g->pf;
    const hm_config *c = &g->m->cfg;
    int hd = c->head_dim, ld = c->q_dim + 2 * c->kv_dim;
    float scale = 1.0f / sqrtf((float)hd);
    /* mma2 (default: F16 K/V^T copies + cp.async; H200, a3b 8K: 14,443 tok/s against 8,155 with mma,
     * bench/README.md, twelfth pass), mma (on the F32 cache), wmma, simple; each declines shapes it lacks */
    const char *ae = getenv("HOTMOE_PREFILL_ATTN");
    int simple = ae && !strcmp(ae, "simple"), wmma = ae && !strcmp(ae, "wmma"), mma2 = !ae || !strcmp(ae, "mma2");
    if (mma2 && pf_flash_mma2(p->qkv, ld, kc, vc, (__half *)g->k16, (__half *)g->vt16, p->atth, n, pos0, c->n_head,
                              c->n_head_kv, hd, scale, g->s) == 0) {
        /* F16 K/V^T scratch, double-buffered register-resident kernel */
    } else if (!simple && !wmma && pf_flash_mma(p->qkv, ld, kc, vc, p->atth, n, pos0, c->n_head, c->n_head_kv, hd, scale, g->s) == 0) {
        /* the register-resident kernel took it */
    } else if (simple || pf_attn_wmma(p->qkv, ld, kc, vc, p->atth, n, pos0, c->n_head, c->n_head_kv, hd, scale, g->s)) {
        if (hd > 256) return fail(err, errlen, "gpu prefill: head_dim %d > 256", hd);
        pf_attn_simple(p->qkv, ld, kc, vc, p->atth, n, pos0, c->n_head, c->n_head_kv, hd, scale, g->s);
    }
    PLAUNCH();
    return 0;
}

/* One chunk: n tokens (embeddings already in p->x) at positions pos0.. */
static int run_chunk(gpu_exec *g, int seq, int n, int pos0, int with_logits, pf_prof *pr, const pf_stage *st, char *err,
                     size_t errlen) {
    gpu_prefill *p = g->pf;
    const hm_config *c = &g->m->cfg;
    cudaStream_t s = g->s;
    int D = c->n_embd, QKV = c->q_dim + 2 * c->kv_dim;
    /* staging: only for chunks that use (nearly) every expert; the first two streamed layers'
     * copies start now, and each later one's as soon as the layer two before it has read its
     * buffer, so copying layer l+1's experts overlaps layer l's work */
    const int staged = st && !st->moe.empty() && n >= 256;
    int si = 0;   /* index in st->moe of the next streamed layer */
    for (int i = 0; staged && i < 2 && i < (int)st->moe.size(); i++)
        if (stage_layer(g, st, st->moe[i], i, err, errlen)) return -1;
    pf_rmsnorm(p->x, g->L[0].attn_norm, p->xn, p->xh, n, D, c->rms_eps, s);
    PLAUNCH();
    qmark(pr, s, Q_NORM);
    for (int il = 0; il < c->n_layer; il++) {
        const dlayer *l = &g->L[il];
        size_t kvoff = ((size_t)seq * c->n_layer + il) * g->n_ctx * c->kv_dim;   /* sequence seq's cache (serve's slots) */
        const float *next_norm = il + 1 < c->n_layer ? g->L[il + 1].attn_norm : with_logits ? g->out_norm : NULL;
        /* q|k|v: one F16 matrix of QKV rows, one GEMM */
        __half *w = (__half *)p->wbuf;
        if (l->n_fused == 3) { if (deq(&l->wqkv, w, s, err, errlen)) return -1; }
        else if (l->n_fused == 2) {
            if (deq(&l->wqkv, w, s, err, errlen) || deq(&l->wv, w + (size_t)(c->q_dim + c->kv_dim) * D, s, err, errlen)) return -1;
        } else if (deq(&l->wq, w, s, err, errlen) || deq(&l->wk, w + (size_t)c->q_dim * D, s, err, errlen) ||
                   deq(&l->wv, w + (size_t)(c->q_dim + c->kv_dim) * D, s, err, errlen))
            return -1;
        if (gemm_h(p, w, p->xh, p->qkv, QKV, n, D, err, errlen)) return -1;
        qmark(pr, s, Q_QKV);
        pf_qkv_post(p->qkv, QKV, l->bq, l->bk, l->bv, l->q_norm, l->k_norm, c->n_head, c->n_head_kv, c->head_dim, c->n_rot,
                    c->rope_theta, c->rms_eps, pos0, n, g->kc + kvoff, g->vc + kvoff, s);
        PLAUNCH();
        qmark(pr, s, Q_ROPE);
        if (attention(g, g->kc + kvoff, g->vc + kvoff, n, pos0, err, errlen)) return -1;
        qmark(pr, s, Q_ATTN);
        if (deq(&l->wo, w, s, err, errlen) || gemm_h(p, w, p->atth, p->tmp, D, n, c->q_dim, err, errlen)) return -1;
        pf_resid_norm(p->x, p->tmp, NULL, NULL, 0, NULL, l->ffn_norm, p->xn, p->xh, n, D, c->rms_eps, s);
        PLAUNCH();
        qmark(pr, s, Q_OPROJ);
        const float *shared = NULL;
        if (l->has_single) {
            if (ffn_single(g, &l->single, l->is_moe ? c->n_ff_shexp : c->n_ff, n, err, errlen)) return -1;
            shared = p->tmp;
            qmark(pr, s, Q_DENSE);
        }
        if (!l->is_moe) {
            pf_resid_norm(p->x, p->tmp, NULL, NULL, 0, NULL, next_norm, p->xn, p->xh, n, D, c->rms_eps, s);
            PLAUNCH();
            qmark(pr, s, Q_DENSE);
            continue;
        }
        const void *const *tabs3[3];
        const void *const *const *tabs = NULL;
        if (staged && l->cache) {   /* this layer's staged copies are in */
            const int b = si & 1;
            PCK(cudaStreamWaitEvent(s, g->stage_done[b], 0));
            for (int i = 0; i < 3; i++) tabs3[i] = g->stage_tab[b] + (size_t)i * (c->n_expert + 1);
            tabs = tabs3;
        }
        if (moe_routed(g, l, n, pr, tabs, err, errlen)) return -1;
        if (tabs) {   /* its buffer has been read: the streamed layer after the next one goes there */
            const int b = si & 1;
            PCK(cudaEventRecord(g->stage_free[b], s));
            if (si + 2 < (int)st->moe.size() && stage_layer(g, st, st->moe[si + 2], b, err, errlen)) return -1;
            si++;
        }
        pf_resid_norm(p->x, p->ye, p->wts, p->rowidx, c->n_expert_used, shared, next_norm, p->xn, p->xh, n, D, c->rms_eps, s);
        PLAUNCH();
        qmark(pr, s, Q_COMBINE);
        qflush(pr, s);
    }
    if (with_logits) {
        if (gpu_gemv(g->output.type, g->output.d, p->xn + (size_t)(n - 1) * D, g->logits, D, c->n_vocab, s))
            return fail(err, errlen, "gpu prefill: output head: %s", gpu_gemv_error());
        PCK(cudaMemcpyAsync(g->h_logits, g->logits, sizeof(float) * c->n_vocab, cudaMemcpyDeviceToHost, s));
        qmark(pr, s, Q_OUTPUT);
    }
    return 0;
}

/* token embeddings of tok[0..n) into out (n, n_embd), F32, on a few host threads */
static void embed_rows(const hm_tensor *te, const int32_t *tok, int n, float *out) {
    const hm_type_traits *tt = hm_type_get(te->type);
    size_t rs = hm_row_size(te->type, te->ne[0]);
    int64_t D = te->ne[0];
    const unsigned nt = hm_host_threads();
    hm_host_parallel(n, (unsigned)n < nt * 16 ? 1 : nt, [&](int i0, int i1) {
        for (int i = i0; i < i1; i++) tt->to_float((const uint8_t *)te->data + (size_t)tok[i] * rs, out + (size_t)i * D, D);
    });
}

extern "C" int gpu_exec_prefill(gpu_exec *g, const int32_t *tokens, int n, int pos0, float *logits_last, char *err, size_t errlen) {
    return gpu_exec_prefill_seq(g, 0, tokens, n, pos0, logits_last, err, errlen);
}

/* pieces shorter than this go token by token (GPU_PREFILL_MIN in exec.h says why) */
static int pf_min_tokens(const gpu_exec *g) {
    if (g->pf_min > 0) return g->pf_min;
    const char *e = getenv("HOTMOE_PREFILL_MIN");
    if (e && atoi(e) > 0) return atoi(e);
    return GPU_PREFILL_MIN;
}

/* tokens[0..n) at pos0.. through the decode step, one at a time; logits of the last only */
static int pf_by_token(gpu_exec *g, int seq, const int32_t *tokens, int n, int pos0, float *logits_last, char *err, size_t errlen) {
    for (int i = 0; i < n; i++)
        if (gpu_exec_forward_seq(g, seq, tokens[i], pos0 + i, i + 1 == n ? logits_last : NULL, err, errlen)) return -1;
    return 0;
}

extern "C" int gpu_exec_prefill_seq(gpu_exec *g, int seq, const int32_t *tokens, int n, int pos0, float *logits_last, char *err,
                                    size_t errlen) {
    const hm_config *c = &g->m->cfg;
    if (seq < 0 || seq >= g->n_seq) return fail(err, errlen, "gpu prefill: sequence %d outside [0, %d)", seq, g->n_seq);
    PCK(cudaSetDevice(g->dev));
    if (g->l0 || !g->head) return fail(err, errlen, "gpu prefill: a pipeline stage (layers %d..%d) runs token by token", g->l0, g->l1 - 1);
    if (n <= 0) return fail(err, errlen, "gpu prefill: %d tokens (at least 1 expected)", n);
    if (pos0 < 0 || (int64_t)pos0 + n > g->n_ctx)
        return fail(err, errlen, "gpu prefill: positions %d..%lld outside the context of %d", pos0, (long long)pos0 + n - 1, g->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->n_vocab)
            return fail(err, errlen, "gpu prefill: token %d (at %d) outside the vocabulary of %d", tokens[i], i, c->n_vocab);
    const int pmin = pf_min_tokens(g);
    if (n < pmin) return pf_by_token(g, seq, tokens, n, pos0, logits_last, err, errlen);
    if (c->n_expert > 4096 /* the router kernel's shared arrays */ || c->n_expert_used > 64 || c->head_dim > 256 || c->head_dim > 1024)
        return fail(err, errlen, "gpu prefill: unsupported shape");
    int chunk = PF_CHUNK_DEFAULT;
    const char *ce = getenv("HOTMOE_PREFILL_CHUNK");   /* bench_decode --chunk */
    if (g->pf_chunk > 0) chunk = g->pf_chunk;
    else if (ce && atoi(ce) > 0) chunk = atoi(ce);
    /* a workspace for min(chunk, n) tokens; a larger one from an earlier call is kept */
    if (pf_ensure(g, chunk < n ? chunk : n, err, errlen)) return -1;
    gpu_prefill *p = g->pf;
    if (p->chunk < chunk) chunk = p->chunk; /* smaller when VRAM was short */
    static pf_prof pr;
    if (!pr.on) { const char *e = getenv("HOTMOE_PREFILL_PROFILE"); pr.on = e && *e == '1'; }
    pf_stage st;   /* --staging: the streamed layers' residency for this call */
    if (g->stage_n) {
        st.slot_of.resize(c->n_layer); st.hidx.resize(c->n_layer);
        for (int il = 0; il < c->n_layer; il++) {
            const dcache *ca = g->L[il].cache;
            if (!ca) continue;
            st.slot_of[il].resize(c->n_expert); st.hidx[il].resize(c->n_expert);
            PCK(cudaMemcpy(st.slot_of[il].data(), ca->slot_of, sizeof(int) * c->n_expert, cudaMemcpyDeviceToHost));
            PCK(cudaMemcpy(st.hidx[il].data(), ca->hidx, sizeof(int) * c->n_expert, cudaMemcpyDeviceToHost));
            st.moe.push_back(il);
        }
    }
    if (pr.on) { memset(pr.ms, 0, sizeof pr.ms); pr.n = 0; qmark(&pr, g->s, -1); }
    int tail = 0;
    for (int c0 = 0; c0 < n; c0 += chunk) {
        int cn = n - c0 < chunk ? n - c0 : chunk;
        PCK(cudaStreamSynchronize(g->s)); /* h_emb is free again */
        if (c0 > 0 && cn < chunk && cn < pmin) {   /* a short remainder: token by token, its logits written there */
            if (pf_by_token(g, seq, tokens + c0, cn, pos0 + c0, logits_last, err, errlen)) return -1;
            tail = 1;
            break;
        }
        embed_rows(&g->m->tok_embd, tokens + c0, cn, p->h_emb);
        PCK(cudaMemcpyAsync(p->x, p->h_emb, sizeof(float) * cn * c->n_embd, cudaMemcpyHostToDevice, g->s));
        qmark(&pr, g->s, Q_EMBED);
        if (run_chunk(g, seq, cn, pos0 + c0, logits_last && c0 + cn == n, &pr, g->stage_n ? &st : NULL, err, errlen)) {
            cudaStreamSynchronize(g->s);
            return -1;
        }
    }
    PCK(cudaStreamSynchronize(g->s));
    if (pr.on) {
        qflush(&pr, g->s);
        double tot = 0;
        for (int i = 0; i < Q_COUNT; i++) tot += pr.ms[i];
        fprintf(stderr, "gpu prefill profile: %d tokens in chunks of %d, %.1f ms on the stream\n", n, chunk, tot);
        for (int i = 0; i < Q_COUNT; i++)
            if (pr.ms[i] > 0) fprintf(stderr, "  %-22s %9.2f ms %5.1f%%\n", q_names[i], pr.ms[i], 100 * pr.ms[i] / tot);
    }
    if (logits_last && !tail) memcpy(logits_last, g->h_logits, sizeof(float) * c->n_vocab);
    return 0;
}

extern "C" size_t gpu_exec_prefill_bytes(const gpu_exec *g) { return g->pf ? g->pf->bytes : 0; }
extern "C" int gpu_exec_prefill_chunk(const gpu_exec *g) { return g->pf ? g->pf->chunk : 0; }
