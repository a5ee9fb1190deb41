/* prefill.cu - batched prefill on the GPU executor: the prompt runs in chunks of tokens, each layer
 * as GEMMs (weights dequantized to F16 tiles, cuBLAS with F32 accumulation, F32 outputs), a
 * tensor-core flash attention over the F32 KV cache (prefill_mma.cu), and MoE with tokens grouped
 * by expert on the device (stable counting sort), the used experts' weights dequantized through
 * the device pointer table, one grouped GEMM launch per projection per group of experts.
 * Kernel choices (environment, for tests and benchmarks): HOTMOE_PREFILL_ATTN = mma (default) |
 * mma2 | wmma | simple; HOTMOE_PREFILL_MOE = grouped (default) | cublas; HOTMOE_PREFILL_GEMM_STAGES
 * = 2 (default) | 4; HOTMOE_PREFILL_CHUNK (tokens, default 4096); HOTMOE_PREFILL_PROFILE=1.
 *
 * Precision: activations entering a GEMM are rounded to F16 (as are the dequantized weights);
 * the residual stream, norms, RoPE, softmax statistics, router logits (an F32 GEMM on F32 router
 * weights) and the KV cache stay F32. Routing repeats op_router's selection rule exactly. */
#include "exec_impl.cuh"
#include "gpu_gemv.h"
#include "prefill.cuh"
#include "qdev.cuh"
#include "qdev_k.cuh"
extern "C" {
#include "quant.h"
}
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <math.h>
#include <mma.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <thread>
#include <vector>

#define PF_CHUNK_DEFAULT 4096
#define PF_EXPERT_WS (512ull << 20) /* bytes of F16 expert weights dequantized per group */

struct gpu_prefill {
    int chunk;                /* tokens per pass */
    int grp;                  /* experts dequantized per group */
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
    __half *k16, *vt16;       /* (n_ctx rounded up to 64) x kv_dim each: one layer's K and V^T in F16
                               * (mma2 attention only, allocated on its first use) */
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

typedef struct {
    size_t emb, x, xh, qkv, atth, gu, act, xg, ye, rlog, nk, wbuf, cnt, tiles;
    int grp;
} pf_layout;

static int any_moe(const hm_model *m) {
    for (int il = 0; il < m->cfg.n_layer; il++) if (m->layers[il].is_moe) return 1;
    return 0;
}

static pf_layout layout(const hm_model *m, int chunk) {
    const hm_config *c = &m->cfg;
    pf_layout l;
    size_t C = (size_t)chunk, D = c->n_embd, K = any_moe(m) ? c->n_expert_used : 0, E = c->n_expert;
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

static size_t layout_bytes(const pf_layout *l) {
    return 4 * (l->x * 2 + l->qkv + l->x + l->gu + l->ye + l->rlog + l->nk * 4 + l->cnt + l->cnt) +
           2 * (l->xh + l->atth + l->act + l->xg) + 16 * l->tiles + l->wbuf + 16 * 256;
}

extern "C" size_t gpu_exec_prefill_workspace(const hm_model *m, int chunk) {
    if (chunk < 1) chunk = PF_CHUNK_DEFAULT;
    pf_layout l = layout(m, chunk);
    return layout_bytes(&l);
}

static void pf_release(gpu_prefill *p) {
    if (!p) return;
    for (void *a : p->allocs) cudaFree(a);
    if (p->h_emb) cudaFreeHost(p->h_emb);
    if (p->h_cnt) cudaFreeHost(p->h_cnt);
    if (p->h_tiles) cudaFreeHost(p->h_tiles);
    if (p->blas) cublasDestroy(p->blas);
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
    if (g->pf && g->pf->chunk >= want) return 0;
    gpu_prefill_free(g);
    for (int chunk = want; chunk >= 64 || chunk == want; chunk /= 2) {
        gpu_prefill *p = new gpu_prefill();
        pf_layout l = layout(g->m, chunk);
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
        if (!bad && cublasCreate(&p->blas) != CUBLAS_STATUS_SUCCESS) { p->blas = NULL; bad = 1; }
        if (!bad && cublasSetStream(p->blas, g->s) != CUBLAS_STATUS_SUCCESS) bad = 1;
        if (!bad) {
            p->bytes = layout_bytes(&l);
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

/* ------------------------------------------------------------------ kernels */

static __device__ float pf_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ float pf_block_sum(float v) {
    __shared__ float red[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = pf_warp_sum(v);
    __syncthreads();
    if (lane == 0) red[wid] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    if (wid == 0) v = pf_warp_sum(v);
    if (threadIdx.x == 0) red[0] = v;
    __syncthreads();
    return red[0];
}

/* one block per token: out = rmsnorm(x) * w, as F32 and F16 (ops.cu's k_rmsnorm per row) */
__global__ void k_pf_rmsnorm(const float *x, const float *w, float *outf, __half *outh, int n, float eps) {
    const float *xr = x + (size_t)blockIdx.x * n;
    float ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
    ss = pf_block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float o = w[i] * (xr[i] * inv);
        outf[(size_t)blockIdx.x * n + i] = o;
        outh[(size_t)blockIdx.x * n + i] = __float2half_rn(o);
    }
}

/* one block per token: x += acc, where acc = y[t] (rowidx NULL), or sum_j wt[t][j] * y[rowidx[t][j]]
 * (the MoE combine, in j order as the CPU), then + shared[t]; then the next norm when w is given.
 * Same order of additions as ops.cu's k_residual_norm and cpu/forward.c. */
__global__ void k_pf_resid_norm(float *x, const float *y, const float *wt, const int *rowidx, int k, const float *shared,
                                const float *w, float *outf, __half *outh, int n, float eps) {
    const size_t t = blockIdx.x;
    float *xr = x + t * n, ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float acc;
        if (rowidx) {
            acc = 0;
            for (int j = 0; j < k; j++) acc += wt[t * k + j] * y[(size_t)rowidx[t * k + j] * n + i];
        } else acc = y[t * n + i];
        if (shared) acc += shared[t * n + i];
        float v = xr[i] + acc;
        xr[i] = v;
        ss += v * v;
    }
    if (!w) return;
    ss = pf_block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float o = w[i] * (xr[i] * inv);
        outf[t * n + i] = o;
        outh[t * n + i] = __float2half_rn(o);
    }
}

/* grid (tokens, n_head + n_head_kv): ops.cu's k_qkv_post for the token of row blockIdx.x at
 * position pos0 + blockIdx.x; rows of qkv are q | k | v (ld floats apart) */
__global__ void k_pf_qkv_post(float *qkv, int ld, const float *bq, const float *bk, const float *bv, const float *qn,
                              const float *kn, int n_head, int n_head_kv, int hd, int n_rot, float theta, float eps,
                              int pos0, float *kcache, float *vcache) {
    __shared__ float buf[1024];
    int h = blockIdx.y, i = threadIdx.x, on = i < hd, pos = pos0 + blockIdx.x;
    float *q = qkv + (size_t)blockIdx.x * ld, *k = q + n_head * hd;
    const float *v = k + n_head_kv * hd;
    int is_q = h < n_head;
    int hh = is_q ? h : h - n_head;
    float *p = (is_q ? q : k) + hh * hd;
    const float *b = is_q ? bq : bk, *nw = is_q ? qn : kn;
    float x = on ? p[i] : 0.0f;
    if (b && on) x += b[hh * hd + i];
    if (nw) {
        float ss = pf_block_sum(x * x);
        if (on) x = nw[i] * (x * (1.0f / sqrtf(ss / (float)hd + eps)));
    }
    buf[i] = x;
    __syncthreads();
    int half = n_rot / 2;
    if (i < n_rot) {
        int j = i < half ? i : i - half;
        float inv = 1.0f / powf(theta, (float)(2 * j) / (float)n_rot);
        float ang = (float)pos * inv, c = cosf(ang), sn = sinf(ang);
        float a = buf[j], bb = buf[j + half];
        x = i < half ? a * c - bb * sn : bb * c + a * sn;
    }
    if (!on) return;
    if (is_q) p[i] = x;
    else {
        size_t off = (size_t)pos * n_head_kv * hd + hh * hd + i;
        kcache[off] = x;
        float vv = v[hh * hd + i];
        if (bv) vv += bv[hh * hd + i];
        vcache[off] = vv;
    }
}

/* Flash attention, causal, over the F32 KV cache: grid (q tiles of 64 tokens, n_head), 4 warps of
 * 16 query rows each. K/V tiles of 64 positions are converted to F16 in shared memory; S = Q K^T
 * and O += P V on tensor cores (WMMA 16x16x16, F32 accumulation); the online softmax runs in F32,
 * two lanes per row. O lives in shared memory (F32) so that rows can be rescaled. Token t of the
 * chunk is at position pos0 + t and sees positions [0, pos0 + t]. */
#define FA_BR 64
#define FA_BC 64
template <int HD>
__global__ void __launch_bounds__(128) k_pf_flash(const float *qkv, int ld, const float *kc, const float *vc,
                                                  __half *out, int n, int pos0, int n_head, int n_head_kv, float scale) {
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char smem[];
    __half *sQ = (__half *)smem;           /* [BR][HD] */
    __half *sK = sQ + FA_BR * HD;           /* [BC][HD] */
    __half *sV = sK + FA_BC * HD;           /* [BC][HD] */
    float *sS = (float *)(sV + FA_BC * HD); /* [4][16][BC] */
    __half *sP = (__half *)(sS + FA_BR * FA_BC); /* [4][16][BC] */
    float *sO = (float *)(sP + FA_BR * FA_BC);   /* [4][16][HD] */
    const int h = blockIdx.y, kvh = h / (n_head / n_head_kv), kvd = n_head_kv * HD;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * FA_BR; /* the longest tiles first */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i < FA_BR * HD; i += blockDim.x) {
        int r = i / HD, c = i % HD;
        float v = q0 + r < n ? qkv[(size_t)(q0 + r) * ld + h * HD + c] : 0.0f;
        sQ[i] = __float2half_rn(v);
        sO[i] = 0;
    }
    const int last = min(q0 + FA_BR, n) - 1;
    const int kv_end = pos0 + last + 1; /* positions [0, kv_end) */
    const int r = lane >> 1, hf = lane & 1, qpos = pos0 + q0 + warp * 16 + r;
    float m_r = -INFINITY, l_r = 0;
    float *S = sS + warp * 16 * FA_BC;
    __half *P = sP + warp * 16 * FA_BC;
    float *O = sO + warp * 16 * HD;
    __syncthreads();
    for (int t0 = 0; t0 < kv_end; t0 += FA_BC) {
        for (int i = threadIdx.x; i < FA_BC * HD / 4; i += blockDim.x) {
            int rr = (4 * i) / HD, c = (4 * i) % HD, t = t0 + rr;
            float4 a = make_float4(0, 0, 0, 0), b = a;
            if (t < kv_end) {
                a = *(const float4 *)(kc + (size_t)t * kvd + kvh * HD + c);
                b = *(const float4 *)(vc + (size_t)t * kvd + kvh * HD + c);
            }
            __half2 *dk = (__half2 *)(sK + rr * HD + c), *dv = (__half2 *)(sV + rr * HD + c);
            dk[0] = __floats2half2_rn(a.x, a.y); dk[1] = __floats2half2_rn(a.z, a.w);
            dv[0] = __floats2half2_rn(b.x, b.y); dv[1] = __floats2half2_rn(b.z, b.w);
        }
        __syncthreads();
        /* skip the math when every row of this warp is before the tile (the block's later rows need it) */
        if (pos0 + q0 + warp * 16 + 15 >= t0) {
#pragma unroll
            for (int nb = 0; nb < FA_BC / 16; nb++) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
                wmma::fill_fragment(acc, 0.0f);
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
                    wmma::load_matrix_sync(a, sQ + warp * 16 * HD + kk * 16, HD);
                    wmma::load_matrix_sync(b, sK + nb * 16 * HD + kk * 16, HD);
                    wmma::mma_sync(acc, a, b, acc);
                }
                wmma::store_matrix_sync(S + nb * 16, acc, FA_BC, wmma::mem_row_major);
            }
            __syncwarp();
            float *Sr = S + r * FA_BC + hf * 32;
            __half *Pr = P + r * FA_BC + hf * 32;
            float mx = -INFINITY;
            for (int c = 0; c < 32; c++) {
                int t = t0 + hf * 32 + c;
                float v = t <= qpos ? Sr[c] * scale : -INFINITY;
                Sr[c] = v;
                mx = fmaxf(mx, v);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            float mn = fmaxf(m_r, mx); /* finite: position 0 is in every row's range */
            float corr = m_r == -INFINITY ? 0.0f : expf(m_r - mn), sum = 0;
            for (int c = 0; c < 32; c++) {
                float p = Sr[c] == -INFINITY ? 0.0f : expf(Sr[c] - mn);
                __half ph = __float2half_rn(p);
                Pr[c] = ph;
                sum += __half2float(ph); /* l sums what P V uses */
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            l_r = l_r * corr + sum;
            m_r = mn;
            float *Or = O + r * HD;
            for (int c = hf; c < HD; c += 2) Or[c] *= corr;
            __syncwarp();
#pragma unroll
            for (int nb = 0; nb < HD / 16; nb++) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
                wmma::load_matrix_sync(acc, O + nb * 16, HD, wmma::mem_row_major);
#pragma unroll
                for (int kk = 0; kk < FA_BC / 16; kk++) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
                    wmma::load_matrix_sync(a, P + kk * 16, FA_BC);
                    wmma::load_matrix_sync(b, sV + kk * 16 * HD + nb * 16, HD);
                    wmma::mma_sync(acc, a, b, acc);
                }
                wmma::store_matrix_sync(O + nb * 16, acc, HD, wmma::mem_row_major);
            }
            __syncwarp();
        }
        __syncthreads();
    }
    const int q = q0 + warp * 16 + r;
    if (q < n) {
        float inv = 1.0f / l_r;
        __half *o = out + (size_t)q * n_head * HD + h * HD;
        for (int c = hf; c < HD; c += 2) o[c] = __float2half_rn(O[r * HD + c] * inv);
    }
}

static size_t flash_smem(int hd) {
    return (size_t)(FA_BR + 2 * FA_BC) * hd * 2 + (size_t)FA_BR * FA_BC * (4 + 2) + (size_t)FA_BR * hd * 4;
}

/* Plain attention, F32 on CUDA cores: one warp per (token, head), online softmax over [0, pos].
 * The fallback for head sizes the tensor-core kernel does not take, and a reference
 * (HOTMOE_PREFILL_ATTN=simple). */
__global__ void k_pf_attn_simple(const float *qkv, int ld, const float *kc, const float *vc, __half *out, int n,
                                 int pos0, int n_head, int n_head_kv, int hd, float scale) {
    int wg = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (wg >= n * n_head) return;
    int t = wg / n_head, h = wg % n_head, kvh = h / (n_head / n_head_kv), kvd = n_head_kv * hd, per = (hd + 31) / 32;
    int pos = pos0 + t;
    float qv[8], o[8];
    for (int r = 0; r < per; r++) { int c = lane + 32 * r; qv[r] = c < hd ? qkv[(size_t)t * ld + h * hd + c] : 0.0f; o[r] = 0; }
    float m = -INFINITY, l = 0;
    for (int s = 0; s <= pos; s++) {
        const float *kr = kc + (size_t)s * kvd + kvh * hd, *vr = vc + (size_t)s * kvd + kvh * hd;
        float d = 0;
        for (int r = 0; r < per; r++) if (lane + 32 * r < hd) d += qv[r] * kr[lane + 32 * r];
        d = pf_warp_sum(d) * scale;
        float mn = fmaxf(m, d), c = expf(m - mn), e = expf(d - mn);
        l = l * c + e;
        for (int r = 0; r < per; r++) o[r] = o[r] * c + (lane + 32 * r < hd ? e * vr[lane + 32 * r] : 0.0f);
        m = mn;
    }
    for (int r = 0; r < per; r++)
        if (lane + 32 * r < hd) out[(size_t)t * n_head * hd + h * hd + lane + 32 * r] = __float2half_rn(o[r] / l);
}

/* gu rows are gate (ff) | up (ff): act = silu(gate) * up, as cpu/forward.c */
__global__ void k_pf_swiglu(const float *gu, __half *act, int64_t rows, int ff) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * ff; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / ff; int c = (int)(i % ff);
        float g = gu[r * 2 * ff + c], u = gu[r * 2 * ff + ff + c];
        act[i] = __float2half_rn(g / (1.0f + expf(-g)) * u);
    }
}

/* F32 copy of a F16/BF16 matrix (exact) */
__global__ void k_pf_widen(const uint16_t *src, float *dst, int64_t n, int bf16) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = bf16 ? __uint_as_float((uint32_t)src[i] << 16) : __half2float(__ushort_as_half(src[i]));
}

/* ---- routing: ops.cu's k_router, one warp (block) per token; kept operation for operation ---- */

static __device__ int pf_warp_argmax(const float *v, const unsigned char *used, int n) {
    int lane = threadIdx.x & 31, bi = -1;
    float bv = -INFINITY;
    for (int i = lane; i < n; i += 32)
        if (!used[i] && (bi < 0 || v[i] > bv)) { bv = v[i]; bi = i; }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) { bv = ov; bi = oi; }
    }
    return bi;
}

#define PF_ROUTER_MAX 4096
__global__ void k_pf_router(const float *logits_all, const float *bias, int n, int k, int fn, int norm, float scale,
                            int n_group, int topk_group, int *ids_all, float *w_all) {
    __shared__ float score[PF_ROUTER_MAX], choice[PF_ROUTER_MAX], gscore[64];
    __shared__ unsigned char used[PF_ROUTER_MAX], gused[64];
    const float *logits = logits_all + (size_t)blockIdx.x * n;
    int *ids = ids_all + (size_t)blockIdx.x * k;
    float *w = w_all + (size_t)blockIdx.x * k;
    int lane = threadIdx.x;
    if (fn == 2) {
        for (int i = lane; i < n; i += 32) score[i] = 1.0f / (1.0f + expf(-logits[i]));
    } else {
        float mx = -INFINITY;
        for (int i = lane; i < n; i += 32) mx = fmaxf(mx, logits[i]);
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        for (int i = lane; i < n; i += 32) score[i] = expf(logits[i] - mx);
        __syncwarp();
        __shared__ float total;
        if (lane == 0) { float s = 0; for (int i = 0; i < n; i++) s += score[i]; total = s; }
        __syncwarp();
        for (int i = lane; i < n; i += 32) score[i] /= total;
    }
    for (int i = lane; i < n; i += 32) { choice[i] = score[i] + (bias ? bias[i] : 0.0f); used[i] = 0; }
    __syncwarp();
    if (n_group > 1 && topk_group < n_group) {
        int gs = n / n_group;
        if (lane == 0) {
            for (int g = 0; g < n_group; g++) {
                int b0 = -1, b1 = -1;
                for (int i = 0; i < gs; i++) {
                    float v = choice[g * gs + i];
                    if (b0 < 0 || v > choice[g * gs + b0]) { b1 = b0; b0 = i; }
                    else if (b1 < 0 || v > choice[g * gs + b1]) b1 = i;
                }
                gscore[g] = choice[g * gs + b0] + (gs > 1 ? choice[g * gs + b1] : 0.0f);
                gused[g] = 0;
            }
            for (int j = 0; j < topk_group; j++) {
                int b = -1;
                for (int g = 0; g < n_group; g++) if (!gused[g] && (b < 0 || gscore[g] > gscore[b])) b = g;
                gused[b] = 1;
            }
            for (int g = 0; g < n_group; g++)
                if (!gused[g]) for (int i = 0; i < gs; i++) choice[g * gs + i] = -INFINITY;
        }
        __syncwarp();
    }
    __shared__ float wsel[64];
    __shared__ int isel[64];
    for (int j = 0; j < k; j++) {
        int b = pf_warp_argmax(choice, used, n);
        if (lane == 0) { used[b] = 1; isel[j] = b; wsel[j] = score[b]; }
        __syncwarp();
    }
    if (lane == 0) {
        float sum = 0;
        for (int j = 0; j < k; j++) sum += wsel[j];
        float den = fn == 2 ? sum + 1e-20f : sum;
        for (int j = 0; j < k; j++) {
            float x = wsel[j];
            if (norm) x /= den;
            ids[j] = isel[j];
            w[j] = x * scale;
        }
    }
}

/* ---- grouping by expert: a stable counting sort of the (token, slot) assignments ---- */

/* grid n_expert: cnt[e] = assignments to expert e */
__global__ void k_pf_count(const int *ids, int na, int *cnt) {
    int e = blockIdx.x, c = 0;
    for (int a = threadIdx.x; a < na; a += blockDim.x) c += ids[a] == e;
    float s = pf_block_sum((float)c); /* exact: na < 2^24 */
    if (threadIdx.x == 0) cnt[e] = (int)s;
}

/* one thread: off[e] = sum of cnt before e (off[E] = total); used[] = experts with rows; cnt[2E+1] = n_used */
__global__ void k_pf_scan(int *cnt, int ne, int *used) {
    int *off = cnt + ne, nu = 0, s = 0;
    for (int e = 0; e < ne; e++) {
        off[e] = s;
        s += cnt[e];
        if (cnt[e]) used[nu++] = e;
    }
    off[ne] = s;
    cnt[2 * ne + 1] = nu;
}

/* grid n_expert, 256 threads: expert e's rows in assignment order: perm[row] = a, rowidx[a] = row */
__global__ void k_pf_fill(const int *ids, int na, const int *cnt, int ne, int *perm, int *rowidx) {
    __shared__ int wtot[8];
    int e = blockIdx.x, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int base = cnt[ne + e];
    for (int a0 = 0; a0 < na; a0 += 256) {
        int a = a0 + threadIdx.x, f = a < na && ids[a] == e;
        unsigned b = __ballot_sync(0xffffffffu, f);
        if (lane == 0) wtot[wid] = __popc(b);
        __syncthreads();
        int before = 0, tot = 0;
        for (int w = 0; w < 8; w++) { if (w < wid) before += wtot[w]; tot += wtot[w]; }
        if (f) {
            int row = base + before + __popc(b & ((1u << lane) - 1));
            perm[row] = a;
            rowidx[a] = row;
        }
        base += tot;
        __syncthreads();
    }
}

/* xg[row] = xh[token of perm[row]] */
__global__ void k_pf_gather(const __half *xh, const int *perm, int k, __half *xg, int n) {
    const size_t row = blockIdx.x, tok = perm[row] / k;
    const __half *src = xh + tok * n;
    __half *dst = xg + row * n;
    if (n % 8 == 0) {
        for (int i = threadIdx.x; i < n / 8; i += blockDim.x) ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    }
}

/* ---- dequantization of experts read through the device pointer table ---- */

/* grid (x, slots): slot s dequantizes tab[ids[s]] (nper values) to dst + s * dstride, F16 */
template <class T>
__global__ void k_pf_deq_tab(const void *const *tab, const int *ids, int64_t nper, __half *dst, int64_t dstride) {
    constexpr int RPB = T::QK / 4;
    const uint8_t *src = (const uint8_t *)tab[ids[blockIdx.y]];
    __half *d = dst + blockIdx.y * dstride;
    const int64_t nruns = nper / 4;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nruns; i += (int64_t)gridDim.x * blockDim.x) {
        float v[4];
        T::deq4(src + (i / RPB) * T::BS, (int)(i % RPB), v);
        __half2 *o = (__half2 *)(d + 4 * i);
        o[0] = __floats2half2_rn(v[0], v[1]);
        o[1] = __floats2half2_rn(v[2], v[3]);
    }
}

/* IN: 0 F32, 1 F16, 2 BF16 */
template <int IN>
__global__ void k_pf_deq_tab_float(const void *const *tab, const int *ids, int64_t nper, __half *dst, int64_t dstride) {
    const void *src = tab[ids[blockIdx.y]];
    __half *d = dst + blockIdx.y * dstride;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nper; i += (int64_t)gridDim.x * blockDim.x) {
        float f;
        if (IN == 0) f = ((const float *)src)[i];
        else if (IN == 1) f = __half2float(__ushort_as_half(((const uint16_t *)src)[i]));
        else f = __uint_as_float((uint32_t)((const uint16_t *)src)[i] << 16);
        d[i] = __float2half_rn(f);
    }
}

typedef void (*deq_tab_fn)(dim3, cudaStream_t, const void *const *, const int *, int64_t, __half *, int64_t);
template <class T>
static void deq_tab_launch(dim3 gr, cudaStream_t s, const void *const *tab, const int *ids, int64_t nper, __half *d, int64_t ds) {
    k_pf_deq_tab<T><<<gr, 256, 0, s>>>(tab, ids, nper, d, ds);
}
template <int IN>
static void deq_tab_launch_float(dim3 gr, cudaStream_t s, const void *const *tab, const int *ids, int64_t nper, __half *d, int64_t ds) {
    k_pf_deq_tab_float<IN><<<gr, 256, 0, s>>>(tab, ids, nper, d, ds);
}

static const struct { int type, blck, per_thread; deq_tab_fn run; } k_deq_types[] = {
    { HM_TYPE_F32, 1, 1, deq_tab_launch_float<0> },     { HM_TYPE_F16, 1, 1, deq_tab_launch_float<1> },
    { HM_TYPE_BF16, 1, 1, deq_tab_launch_float<2> },    { HM_TYPE_Q4_0, TQ4_0::QK, 4, deq_tab_launch<TQ4_0> },
    { HM_TYPE_Q4_1, TQ4_1::QK, 4, deq_tab_launch<TQ4_1> }, { HM_TYPE_Q5_0, TQ5_0::QK, 4, deq_tab_launch<TQ5_0> },
    { HM_TYPE_Q5_1, TQ5_1::QK, 4, deq_tab_launch<TQ5_1> }, { HM_TYPE_Q8_0, TQ8_0::QK, 4, deq_tab_launch<TQ8_0> },
    { HM_TYPE_MXFP4, TMXFP4::QK, 4, deq_tab_launch<TMXFP4> }, { HM_TYPE_Q2_K, TQ2_K::QK, 4, deq_tab_launch<TQ2_K> },
    { HM_TYPE_Q3_K, TQ3_K::QK, 4, deq_tab_launch<TQ3_K> }, { HM_TYPE_Q4_K, TQ4_K::QK, 4, deq_tab_launch<TQ4_K> },
    { HM_TYPE_Q5_K, TQ5_K::QK, 4, deq_tab_launch<TQ5_K> }, { HM_TYPE_Q6_K, TQ6_K::QK, 4, deq_tab_launch<TQ6_K> },
    { HM_TYPE_IQ4_XS, TIQ4_XS::QK, 4, deq_tab_launch<TIQ4_XS> },
};

/* dst[s] = the F16 values of tab[ids[s]] (nper each, dstride apart), s < nslots; one launch */
static int deq_tab(int type, const void *const *tab, const int *ids, int nslots, int64_t nper, __half *dst, int64_t dstride,
                   cudaStream_t s, char *err, size_t errlen) {
    for (size_t i = 0; i < sizeof k_deq_types / sizeof k_deq_types[0]; i++) {
        if (k_deq_types[i].type != type) continue;
        if (nper % k_deq_types[i].blck) return fail(err, errlen, "gpu prefill: %lld values are not whole blocks of type %d", (long long)nper, type);
        int64_t items = nper / k_deq_types[i].per_thread, bx = (items + 255) / 256;
        if (bx > 4096) bx = 4096;
        k_deq_types[i].run(dim3((unsigned)bx, (unsigned)nslots), s, tab, ids, nper, dst, dstride);
        PLAUNCH();
        return 0;
    }
    return fail(err, errlen, "gpu prefill: no dequantizer for ggml type %d", type);
}

/* ------------------------------------------------------------------ host side */

/* Y (n, m) F32 row-major = X (n, k) F16 row-major . W (m, k)^T F16 */
static int gemm_h(gpu_prefill *p, const __half *W, const __half *X, float *Y, int m, int n, int k, char *err, size_t errlen) {
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasGemmEx(p->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, W, CUDA_R_16F, k, X, CUDA_R_16F, k,
                                     &zero, Y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return fail(err, errlen, "gpu prefill: cublasGemmEx (%d x %d x %d) failed: %s", m, n, k, cublasGetStatusString(st));
    return 0;
}

/* Y = X . W^T, all F32 (the router: its logits decide the routing, so no F16 rounding) */
static int gemm_f(gpu_prefill *p, const float *W, const float *X, float *Y, int m, int n, int k, char *err, size_t errlen) {
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasSgemm(p->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, W, k, X, k, &zero, Y, m);
    if (st != CUBLAS_STATUS_SUCCESS) return fail(err, errlen, "gpu prefill: cublasSgemm (%d x %d x %d) failed: %s", m, n, k, cublasGetStatusString(st));
    return 0;
}

static int deq(const dmat *w, void *dst, cudaStream_t s, char *err, size_t errlen) {
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
    if (deq_tab(x->type_gu, x->gate, g->zero_id, 1, (int64_t)ff * D, wgu, 0, g->s, err, errlen) ||
        deq_tab(x->type_gu, x->up, g->zero_id, 1, (int64_t)ff * D, wgu + (size_t)ff * D, 0, g->s, err, errlen) ||
        deq_tab(x->type_down, x->down, g->zero_id, 1, (int64_t)ff * D, wd, 0, g->s, err, errlen) ||
        gemm_h(p, wgu, p->xh, p->gu, 2 * ff, n, D, err, errlen))
        return -1;
    int64_t tot = (int64_t)n * ff;
    k_pf_swiglu<<<(unsigned)((tot + 255) / 256 < 65536 ? (tot + 255) / 256 : 65536), 256, 0, g->s>>>(p->gu, p->act, n, ff);
    PLAUNCH();
    return gemm_h(p, wd, p->act, p->tmp, D, n, ff, err, errlen);
}

/* Routed experts of layer l for n rows of xh: leaves the expert outputs in ye (rowidx maps
 * (token, slot) to its row) and the routing weights in wts. */
static int moe_routed(gpu_exec *g, const dlayer *l, int n, pf_prof *pr, char *err, size_t errlen) {
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
        k_pf_widen<<<1024, 256, 0, s>>>(h16, w32, (int64_t)E * D, bf);
        PLAUNCH();
        wr = w32;
    }
    if (gemm_f(p, wr, p->xn, p->rlog, E, n, D, err, errlen)) return -1;
    k_pf_router<<<n, 32, 0, s>>>(p->rlog, l->router_bias, E, K, c->router_fn, c->norm_topk, c->routed_scale, c->n_group,
                                 c->topk_group, p->ids, p->wts);
    PLAUNCH();
    qmark(pr, s, Q_ROUTER);
    k_pf_count<<<E, 256, 0, s>>>(p->ids, na, p->cnt);
    k_pf_scan<<<1, 1, 0, s>>>(p->cnt, E, p->used);
    k_pf_fill<<<E, 256, 0, s>>>(p->ids, na, p->cnt, E, p->perm, p->rowidx);
    k_pf_gather<<<na, 128, 0, s>>>(p->xh, p->perm, K, p->xg, D);
    PLAUNCH();
    PCK(cudaMemcpyAsync(p->h_cnt, p->cnt, sizeof(int) * (2 * E + 2), cudaMemcpyDeviceToHost, s));
    PCK(cudaStreamSynchronize(s));
    qmark(pr, s, Q_SORT);
    const int *cnt = p->h_cnt, *off = p->h_cnt + E, nu = p->h_cnt[2 * E + 1];
    std::vector<int> used;
    for (int e = 0; e < E; e++) if (cnt[e]) used.push_back(e);
    if ((int)used.size() != nu || off[E] != na) return fail(err, errlen, "gpu prefill: expert grouping is inconsistent (%d used, %d rows of %d)", nu, off[E], na);
    const dexperts *x = &l->exps;
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
        if (deq_tab(x->type_gu, x->gate, p->used + g0, gn, (int64_t)F * D, wgu, per_gu, s, err, errlen) ||
            deq_tab(x->type_gu, x->up, p->used + g0, gn, (int64_t)F * D, wgu + (size_t)F * D, per_gu, s, err, errlen) ||
            deq_tab(x->type_down, x->down, p->used + g0, gn, (int64_t)F * D, wd, per_d, s, err, errlen))
            return -1;
        qmark(pr, s, Q_EXP_DEQ);
        if (grouped) {
            int t0 = tile0[gi], ntl = tile0[gi + 1] - t0;
            if (pf_ggemm(wgu, (int64_t)per_gu, p->xg, p->gu, p->tiles + t0, ntl, 2 * F, D, stages, s)) return fail(err, errlen, "gpu prefill: grouped GEMM refused");
            PLAUNCH();
            int r0 = off[used[g0]], r1 = off[used[g0 + gn - 1]] + cnt[used[g0 + gn - 1]];
            int64_t tot = (int64_t)(r1 - r0) * F;
            k_pf_swiglu<<<(unsigned)((tot + 255) / 256 < 65536 ? (tot + 255) / 256 : 65536), 256, 0, s>>>(
                p->gu + (size_t)r0 * 2 * F, p->act + (size_t)r0 * F, r1 - r0, F);
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
        int64_t tot = (int64_t)(r1 - r0) * F;
        k_pf_swiglu<<<(unsigned)((tot + 255) / 256 < 65536 ? (tot + 255) / 256 : 65536), 256, 0, s>>>(
            p->gu + (size_t)r0 * 2 * F, p->act + (size_t)r0 * F, r1 - r0, F);
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
    /* mma (default, validated on the device), mma2 (F16 K/V scratch + cp.async; not yet run on a
     * GPU), wmma, simple */
    const char *ae = getenv("HOTMOE_PREFILL_ATTN");
    int simple = ae && !strcmp(ae, "simple"), wmma = ae && !strcmp(ae, "wmma"), mma2 = ae && !strcmp(ae, "mma2");
    if (mma2 && !p->k16) {
        size_t kv16 = (size_t)(g->n_ctx + 63) / 64 * 64 * c->kv_dim;
        if (pf_alloc(p, &p->k16, kv16) || pf_alloc(p, &p->vt16, kv16))
            return fail(err, errlen, "gpu prefill: out of device memory for the F16 K/V scratch (%.1f MiB)", 4.0 * kv16 / 1048576.0);
        p->bytes += 4 * kv16;
    }
    if (mma2 &&
        pf_flash_mma2(p->qkv, ld, kc, vc, p->k16, p->vt16, p->atth, n, pos0, c->n_head, c->n_head_kv, hd, scale, g->s) == 0) {
        /* F16 K/V^T scratch, double-buffered register-resident kernel */
    } else if (!simple && !wmma && pf_flash_mma(p->qkv, ld, kc, vc, p->atth, n, pos0, c->n_head, c->n_head_kv, hd, scale, g->s) == 0) {
        /* the register-resident kernel took it */
    } else if (!simple && (hd == 64 || hd == 128 || hd == 256 || hd == 16 || hd == 32)) {
        size_t sm = flash_smem(hd);
        dim3 gr((n + FA_BR - 1) / FA_BR, c->n_head);
#define FLASH(HD) do { static int set = 0; \
            if (!set) { PCK(cudaFuncSetAttribute(k_pf_flash<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm)); set = 1; } \
            k_pf_flash<HD><<<gr, 128, sm, g->s>>>(p->qkv, ld, kc, vc, p->atth, n, pos0, c->n_head, c->n_head_kv, scale); } while (0)
        switch (hd) {
        case 16: FLASH(16); break;
        case 32: FLASH(32); break;
        case 64: FLASH(64); break;
        case 128: FLASH(128); break;
        default: FLASH(256); break;
        }
#undef FLASH
    } else {
        if (hd > 256) return fail(err, errlen, "gpu prefill: head_dim %d > 256", hd);
        int warps = n * c->n_head;
        k_pf_attn_simple<<<(warps + 3) / 4, 128, 0, g->s>>>(p->qkv, ld, kc, vc, p->atth, n, pos0, c->n_head, c->n_head_kv, hd, scale);
    }
    PLAUNCH();
    return 0;
}

/* One chunk: n tokens (embeddings already in p->x) at positions pos0.. */
static int run_chunk(gpu_exec *g, int n, int pos0, int with_logits, pf_prof *pr, char *err, size_t errlen) {
    gpu_prefill *p = g->pf;
    const hm_config *c = &g->m->cfg;
    cudaStream_t s = g->s;
    int D = c->n_embd, QKV = c->q_dim + 2 * c->kv_dim;
    k_pf_rmsnorm<<<n, 256, 0, s>>>(p->x, g->L[0].attn_norm, p->xn, p->xh, D, c->rms_eps);
    PLAUNCH();
    qmark(pr, s, Q_NORM);
    for (int il = 0; il < c->n_layer; il++) {
        const dlayer *l = &g->L[il];
        size_t kvoff = (size_t)il * g->n_ctx * c->kv_dim;
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
        k_pf_qkv_post<<<dim3(n, c->n_head + c->n_head_kv), (c->head_dim + 31) / 32 * 32, 0, s>>>(
            p->qkv, QKV, l->bq, l->bk, l->bv, l->q_norm, l->k_norm, c->n_head, c->n_head_kv, c->head_dim, c->n_rot,
            c->rope_theta, c->rms_eps, pos0, g->kc + kvoff, g->vc + kvoff);
        PLAUNCH();
        qmark(pr, s, Q_ROPE);
        if (attention(g, g->kc + kvoff, g->vc + kvoff, n, pos0, err, errlen)) return -1;
        qmark(pr, s, Q_ATTN);
        if (deq(&l->wo, w, s, err, errlen) || gemm_h(p, w, p->atth, p->tmp, D, n, c->q_dim, err, errlen)) return -1;
        k_pf_resid_norm<<<n, 256, 0, s>>>(p->x, p->tmp, NULL, NULL, 0, NULL, l->ffn_norm, p->xn, p->xh, D, c->rms_eps);
        PLAUNCH();
        qmark(pr, s, Q_OPROJ);
        const float *shared = NULL;
        if (l->has_single) {
            if (ffn_single(g, &l->single, l->is_moe ? c->n_ff_shexp : c->n_ff, n, err, errlen)) return -1;
            shared = p->tmp;
            qmark(pr, s, Q_DENSE);
        }
        if (!l->is_moe) {
            k_pf_resid_norm<<<n, 256, 0, s>>>(p->x, p->tmp, NULL, NULL, 0, NULL, next_norm, p->xn, p->xh, D, c->rms_eps);
            PLAUNCH();
            qmark(pr, s, Q_DENSE);
            continue;
        }
        if (moe_routed(g, l, n, pr, err, errlen)) return -1;
        k_pf_resid_norm<<<n, 256, 0, s>>>(p->x, p->ye, p->wts, p->rowidx, c->n_expert_used, shared, next_norm, p->xn, p->xh, D,
                                          c->rms_eps);
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
    unsigned nt = std::thread::hardware_concurrency();
    if (nt > 16) nt = 16;
    if (nt < 1) nt = 1;
    if ((unsigned)n < nt * 16) nt = 1;
    auto work = [&](unsigned w) {
        for (int i = (int)((int64_t)n * w / nt); i < (int)((int64_t)n * (w + 1) / nt); i++)
            tt->to_float((const uint8_t *)te->data + (size_t)tok[i] * rs, out + (size_t)i * D, D);
    };
    if (nt == 1) { work(0); return; }
    std::vector<std::thread> th;
    for (unsigned w = 1; w < nt; w++) th.emplace_back(work, w);
    work(0);
    for (auto &t : th) t.join();
}

extern "C" int gpu_exec_prefill(gpu_exec *g, const int32_t *tokens, int n, int pos0, float *logits_last, char *err, size_t errlen) {
    const hm_config *c = &g->m->cfg;
    if (n <= 0) return fail(err, errlen, "gpu prefill: %d tokens (at least 1 expected)", n);
    if (pos0 < 0 || (int64_t)pos0 + n > g->n_ctx)
        return fail(err, errlen, "gpu prefill: positions %d..%lld outside the context of %d", pos0, (long long)pos0 + n - 1, g->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->n_vocab)
            return fail(err, errlen, "gpu prefill: token %d (at %d) outside the vocabulary of %d", tokens[i], i, c->n_vocab);
    if (c->n_expert > PF_ROUTER_MAX || c->n_expert_used > 64 || c->head_dim > 256 || c->head_dim > 1024)
        return fail(err, errlen, "gpu prefill: unsupported shape");
    int chunk = PF_CHUNK_DEFAULT;
    const char *ce = getenv("HOTMOE_PREFILL_CHUNK");
    if (ce && atoi(ce) > 0) chunk = atoi(ce);
    /* a workspace for min(chunk, n) tokens; a larger one from an earlier call is kept */
    if (pf_ensure(g, chunk < n ? chunk : n, err, errlen)) return -1;
    gpu_prefill *p = g->pf;
    if (p->chunk < chunk) chunk = p->chunk; /* smaller when VRAM was short */
    static pf_prof pr;
    if (!pr.on) { const char *e = getenv("HOTMOE_PREFILL_PROFILE"); pr.on = e && *e == '1'; }
    if (pr.on) { memset(pr.ms, 0, sizeof pr.ms); pr.n = 0; qmark(&pr, g->s, -1); }
    for (int c0 = 0; c0 < n; c0 += chunk) {
        int cn = n - c0 < chunk ? n - c0 : chunk;
        PCK(cudaStreamSynchronize(g->s)); /* h_emb is free again */
        embed_rows(&g->m->tok_embd, tokens + c0, cn, p->h_emb);
        PCK(cudaMemcpyAsync(p->x, p->h_emb, sizeof(float) * cn * c->n_embd, cudaMemcpyHostToDevice, g->s));
        qmark(&pr, g->s, Q_EMBED);
        if (run_chunk(g, cn, pos0 + c0, logits_last && c0 + cn == n, &pr, err, errlen)) {
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
    if (logits_last) memcpy(logits_last, g->h_logits, sizeof(float) * c->n_vocab);
    return 0;
}

extern "C" size_t gpu_exec_prefill_bytes(const gpu_exec *g) { return g->pf ? g->pf->bytes : 0; }
