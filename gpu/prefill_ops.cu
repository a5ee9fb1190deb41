/* prefill_ops.cu - the small batched kernels of prefill (norms, residual + norm, q/k/v post-processing
 * and KV writes, routing and grouping by expert, SwiGLU, expert dequantization through the device
 * pointer table) and the two fallback attention kernels (WMMA, plain); launchers in prefill.cuh.
 * The per-token math repeats ops.cu's decode kernels so that prefill and decode agree. */
#include "prefill.cuh"
#include "launch.cuh"
#include "router.cuh"
#include "blockops.cuh"
#include "qdev.cuh"
#include "qdev_k.cuh"
extern "C" {
#include "quant.h"
#include "gpu_gemv.h"
}
#include <cuda_fp16.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>

/* ------------------------------------------------------------------ kernels */


/* one block per token: out = rmsnorm(x) * w, as F32 and F16 (ops.cu's k_rmsnorm per row) */
__global__ void k_pf_rmsnorm(const float *x, const float *w, float *outf, __half *outh, int n, float eps) {
    const float *xr = x + (size_t)blockIdx.x * n;
    float ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss);
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
    ss = block_sum(ss);
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
    float *q = qkv + (size_t)blockIdx.x * ld, *k = q + n_head * hd;
    const qkv_pre pr = qkv_post_prep(bq, bk, bv, qn, kn, n_head, hd, n_rot, theta, blockIdx.y, pos0 + blockIdx.x);
    qkv_post_head(q, k, k + n_head_kv * hd, bv, n_head, n_head_kv, hd, n_rot, eps, blockIdx.y, pos0 + blockIdx.x, kcache, vcache, pr);
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
        d = warp_sum(d) * scale;
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

/* ---- routing: router.cuh's top-k (the decode step's), one block per token ---- */

__global__ void k_pf_router(const float *logits_all, const float *bias, int n, int k, int fn, int norm, float scale,
                            int n_group, int topk_group, int *ids_all, float *w_all) {
    router_topk<ROUTER_MAX>(logits_all + (size_t)blockIdx.x * n, bias, n, k, fn, norm, scale, n_group, topk_group,
                ids_all + (size_t)blockIdx.x * k, w_all + (size_t)blockIdx.x * k);
}

/* ---- grouping by expert: a stable counting sort of the (token, slot) assignments ---- */

/* grid n_expert: cnt[e] = assignments to expert e */
__global__ void k_pf_count(const int *ids, int na, int *cnt) {
    int e = blockIdx.x, c = 0;
    for (int a = threadIdx.x; a < na; a += blockDim.x) c += ids[a] == e;
    float s = block_sum((float)c); /* exact: na < 2^24 */
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

/* 16 values, runs j0..j0 + 3 of block b (the type's deq4 each), as F16 at dst (16-byte aligned): two
 * 16-byte stores */
template <class T>
__device__ __forceinline__ void deq16(const uint8_t *b, int j0, __half *dst) {
    __half2 h[8];
#pragma unroll
    for (int u = 0; u < 4; u++) {
        float v[4];
        T::deq4(b, j0 + u, v);
        h[2 * u] = __floats2half2_rn(v[0], v[1]);
        h[2 * u + 1] = __floats2half2_rn(v[2], v[3]);
    }
    uint4 *o = (uint4 *)dst;
    o[0] = *(const uint4 *)&h[0];
    o[1] = *(const uint4 *)&h[4];
}

/* k_pf_deq_tab with 16 elements a thread (four runs of one block, the same deq4 each): the run's
 * index arithmetic once per 16, the output as two 16-byte stores. dst 16-byte aligned, dstride % 8
 * == 0 (pf_deq_tab checks). Bitwise the same values. */
template <class T>
__global__ void k_pf_deq_tab16(const void *const *tab, const int *ids, int64_t nper, __half *dst, int64_t dstride) {
    constexpr int RPB = T::QK / 4;
    static_assert(RPB % 4 == 0, "four runs of one block");
    const uint8_t *src = (const uint8_t *)tab[ids[blockIdx.y]];
    __half *d = dst + blockIdx.y * dstride;
    const int64_t n16 = nper / 16;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r0 = 4 * i;
        deq16<T>(src + (r0 / RPB) * T::BS, (int)(r0 % RPB), d + 16 * i);
    }
}

/* HOTMOE_PREFILL_DEQ=4: four elements a thread (k_pf_deq_tab) instead of 16 */
static int deq16_on(void) {
    const char *e = getenv("HOTMOE_PREFILL_DEQ");   /* read at each launch: the test switches it */
    return !(e && atoi(e) == 4);
}

typedef void (*deq_tab_fn)(dim3, cudaStream_t, const void *const *, const int *, int64_t, __half *, int64_t);
template <class T>
static void deq_tab_launch(dim3 gr, cudaStream_t s, const void *const *tab, const int *ids, int64_t nper, __half *d, int64_t ds) {
    if (deq16_on() && (uintptr_t)d % 16 == 0 && ds % 8 == 0 && nper % 16 == 0) {
        const int64_t n16 = nper / 16, bx = (n16 + 255) / 256;
        k_pf_deq_tab16<T><<<dim3((unsigned)(bx > 4096 ? 4096 : bx), gr.y), 256, 0, s>>>(tab, ids, nper, d, ds);
    } else {
        k_pf_deq_tab<T><<<gr, 256, 0, s>>>(tab, ids, nper, d, ds);
    }
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

/* dst[s] = the F16 values of tab[ids[s]] (nper each, dstride apart), s < nslots; one launch.
 * 0; -1: no kernel for the type; -2: nper is not whole blocks (nothing launched). */
int pf_deq_tab(int type, const void *const *tab, const int *ids, int nslots, int64_t nper, __half *dst, int64_t dstride,
               cudaStream_t s) {
    for (size_t i = 0; i < sizeof k_deq_types / sizeof k_deq_types[0]; i++) {
        if (k_deq_types[i].type != type) continue;
        if (nper % k_deq_types[i].blck) return -2;
        int64_t items = nper / k_deq_types[i].per_thread, bx = (items + 255) / 256;
        if (bx > 4096) bx = 4096;
        k_deq_types[i].run(dim3((unsigned)bx, (unsigned)nslots), s, tab, ids, nper, dst, dstride);
        return 0;
    }
    return -1;
}

/* ---- dequantization of experts in the decode GEMV's interleaved layout (gpu_q8_inter_pack) ----
 * A matrix is tiles of Q = RW L chunk slots (RW rows of a warp, L lanes a row), each slot a 256-element
 * chunk in SB = HM_Q8_SLOT_BYTES(CB) bytes; word j of slot q at tile + 16 (j Q + q) (Q6_K: its 2-byte
 * tail at tile + 16 (13 Q) + 2 q); tile (row group gr, step t) at (gr S + t) Q SB (S steps of L chunks
 * a row). Slot q holds chunk t L + q / RW of row gr RW + q % RW. A
 * block copies a tile's words to shared memory as Q GGUF chunks and runs the types' deq4 on them
 * (bitwise k_pf_deq_tab16's values); chunks past a row's end (the last step's empty slots, a partial
 * last chunk's tail) write nothing. */
template <class T>
__global__ void __launch_bounds__(256) k_pf_deq_inter(const void *const *tab, const int *ids, const void *one, int ncols, int nrows,
                                                      int ls, int rw, int steps, __half *dst, int64_t dstride) {
    constexpr int CB = 256 / T::QK * T::BS, CBP = (CB + 15) & ~15, SB = HM_Q8_SLOT_BYTES(CB), W = SB / 16;
    __shared__ __align__(16) uint8_t sm[32 * CBP];
    const int L = 1 << ls, Q = rw * L, ntiles = nrows / rw * steps;
    const uint8_t *src = (const uint8_t *)(one ? one : tab[ids[blockIdx.y]]);
    __half *d = dst + blockIdx.y * dstride;
    for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const uint4 *ts = (const uint4 *)(src + (size_t)tile * Q * SB);
        for (int w = threadIdx.x; w < Q * W; w += blockDim.x) {
            const int j = w / Q, q = w - j * Q;
            *(uint4 *)(sm + q * CBP + 16 * j) = __ldg(ts + w);
        }
        if (SB % 16)   /* the 2-byte tails after the words */
            for (int q = threadIdx.x; q < Q; q += blockDim.x) *(unsigned short *)(sm + q * CBP + 16 * W) = __ldg((const unsigned short *)(ts + Q * W) + q);
        __syncthreads();
        const int gr = tile / steps, t = tile - gr * steps;
        for (int i = threadIdx.x; i < Q * 16; i += blockDim.x) {
            const int q = i >> 4, u = i & 15;
            const int col = ((t << ls) + q / rw) * 256 + 16 * u;
            if (col >= ncols) continue;
            deq16<T>(sm + q * CBP + (16 * u / T::QK) * T::BS, 16 * u % T::QK / 4, d + (size_t)(gr * rw + q % rw) * ncols + col);
        }
        __syncthreads();
    }
}

template <class T>
static void deq_inter_launch(const void *const *tab, const int *ids, const void *one, int nslots, int ncols, int nrows, int ls, int rw,
                             int steps, __half *d, int64_t ds, cudaStream_t s) {
    const int ntiles = nrows / rw * steps;
    k_pf_deq_inter<T><<<dim3((unsigned)(ntiles < 2048 ? ntiles : 2048), (unsigned)nslots), 256, 0, s>>>(tab, ids, one, ncols, nrows, ls,
                                                                                                       rw, steps, d, ds);
}

/* pf_deq_tab for tables interleaved by gpu_q8_inter_pack(type, ncols, nrows, nmat, tok): the values
 * as GGUF rows (nrows x ncols, row-major F16). 0; -1: no such layout for the type and shape;
 * -2: dst or dstride not 16-byte multiples (nothing launched). */
static int deq_inter(int type, const void *const *tab, const int *ids, const void *one, int nslots, int ncols, int nrows, int nmat,
                     int tok, __half *dst, int64_t dstride, cudaStream_t s) {
    const int ls = gpu_q8_inter_lanes(type, ncols, nrows, nmat, tok);
    if (ls < 0 || !gpu_q8_inter_bytes(type, ncols, nrows, nmat, tok)) return -1;
    if ((uintptr_t)dst % 16 || dstride % 8) return -2;
    const int L = 1 << ls, rw = (32 >> ls) / nmat, steps = ((ncols + 255) / 256 + L - 1) / L;
    switch (type) {
    case HM_TYPE_Q3_K:   /* q3r chunks unless HOTMOE_Q3R=0 (gpu_q8_inter_pack) */
        if (gpu_q8_rearranged(type)) deq_inter_launch<TQ3R>(tab, ids, one, nslots, ncols, nrows, ls, rw, steps, dst, dstride, s);
        else deq_inter_launch<TQ3_K>(tab, ids, one, nslots, ncols, nrows, ls, rw, steps, dst, dstride, s);
        return 0;
    case HM_TYPE_Q4_0:   /* q4r chunks unless HOTMOE_Q4R=0 (gpu_q8_inter_pack) */
        if (gpu_q8_rearranged(type)) deq_inter_launch<TQ4R>(tab, ids, one, nslots, ncols, nrows, ls, rw, steps, dst, dstride, s);
        else deq_inter_launch<TQ4_0>(tab, ids, one, nslots, ncols, nrows, ls, rw, steps, dst, dstride, s);
        return 0;
    case HM_TYPE_Q4_K: deq_inter_launch<TQ4_K>(tab, ids, one, nslots, ncols, nrows, ls, rw, steps, dst, dstride, s); return 0;
    case HM_TYPE_Q5_K: deq_inter_launch<TQ5_K>(tab, ids, one, nslots, ncols, nrows, ls, rw, steps, dst, dstride, s); return 0;
    case HM_TYPE_Q6_K: deq_inter_launch<TQ6_K>(tab, ids, one, nslots, ncols, nrows, ls, rw, steps, dst, dstride, s); return 0;
    case HM_TYPE_Q8_0: deq_inter_launch<TQ8_0>(tab, ids, one, nslots, ncols, nrows, ls, rw, steps, dst, dstride, s); return 0;
    default: return -1;
    }
}

int pf_deq_tab_inter(int type, const void *const *tab, const int *ids, int nslots, int ncols, int nrows, int nmat, int tok,
                     __half *dst, int64_t dstride, cudaStream_t s) {
    return deq_inter(type, tab, ids, NULL, nslots, ncols, nrows, nmat, tok, dst, dstride, s);
}

int pf_deq_mat_inter(int type, const void *w, int ncols, int nrows, __half *dst, cudaStream_t s) {
    return deq_inter(type, NULL, NULL, w, 1, ncols, nrows, 1, 1, dst, 0, s);
}

/* ------------------------------------------------------------------ launchers */

void pf_rmsnorm(const float *x, const float *w, float *outf, __half *outh, int rows, int n, float eps, cudaStream_t s) {
    k_pf_rmsnorm<<<rows, 256, 0, s>>>(x, w, outf, outh, n, eps);
}

void pf_resid_norm(float *x, const float *y, const float *wt, const int *rowidx, int k, const float *shared, const float *w,
                   float *outf, __half *outh, int rows, int n, float eps, cudaStream_t s) {
    k_pf_resid_norm<<<rows, 256, 0, s>>>(x, y, wt, rowidx, k, shared, w, outf, outh, n, eps);
}

void pf_qkv_post(float *qkv, int ld, const float *bq, const float *bk, const float *bv, const float *qn, const float *kn,
                 int n_head, int n_head_kv, int hd, int n_rot, float theta, float eps, int pos0, int rows, float *kcache,
                 float *vcache, cudaStream_t s) {
    k_pf_qkv_post<<<dim3(rows, n_head + n_head_kv), (hd + 31) / 32 * 32, 0, s>>>(qkv, ld, bq, bk, bv, qn, kn, n_head, n_head_kv,
                                                                               hd, n_rot, theta, eps, pos0, kcache, vcache);
}

int pf_attn_wmma(const float *qkv, int ld, const float *kc, const float *vc, __half *out, int n, int pos0, int n_head,
                 int n_head_kv, int hd, float scale, cudaStream_t s) {
    size_t sm = flash_smem(hd);
    dim3 gr((n + FA_BR - 1) / FA_BR, n_head);
#define FLASH(HD) do { static std::atomic<unsigned long long> raised(0); \
        if (hm_allow_smem(k_pf_flash<HD>, sm, 0, raised)) return -1; \
        k_pf_flash<HD><<<gr, 128, sm, s>>>(qkv, ld, kc, vc, out, n, pos0, n_head, n_head_kv, scale); } while (0)
    switch (hd) {
    case 16: FLASH(16); break;
    case 32: FLASH(32); break;
    case 64: FLASH(64); break;
    case 128: FLASH(128); break;
    case 256: FLASH(256); break;
    default: return -1;
    }
#undef FLASH
    return 0;
}

void pf_attn_simple(const float *qkv, int ld, const float *kc, const float *vc, __half *out, int n, int pos0, int n_head,
                    int n_head_kv, int hd, float scale, cudaStream_t s) {
    int warps = n * n_head;
    k_pf_attn_simple<<<(warps + 3) / 4, 128, 0, s>>>(qkv, ld, kc, vc, out, n, pos0, n_head, n_head_kv, hd, scale);
}

void pf_swiglu(const float *gu, __half *act, int64_t rows, int ff, cudaStream_t s) {
    int64_t tot = rows * ff, b = (tot + 255) / 256;
    if (tot > 0) k_pf_swiglu<<<(unsigned)(b < 65536 ? b : 65536), 256, 0, s>>>(gu, act, rows, ff);
}

void pf_widen(const uint16_t *src, float *dst, int64_t n, int bf16, cudaStream_t s) {
    k_pf_widen<<<1024, 256, 0, s>>>(src, dst, n, bf16);
}

void pf_router(const float *logits, const float *bias, int rows, int n, int k, int fn, int norm, float scale, int n_group,
               int topk_group, int *ids, float *w, cudaStream_t s) {
    k_pf_router<<<rows, router_threads(n), 0, s>>>(logits, bias, n, k, fn, norm, scale, n_group, topk_group, ids, w);
}

void pf_group(const int *ids, int na, int ne, int *cnt, int *used, int *perm, int *rowidx, const __half *xh, int k, __half *xg,
              int n, cudaStream_t s) {
    k_pf_count<<<ne, 256, 0, s>>>(ids, na, cnt);
    k_pf_scan<<<1, 1, 0, s>>>(cnt, ne, used);
    k_pf_fill<<<ne, 256, 0, s>>>(ids, na, cnt, ne, perm, rowidx);
    k_pf_gather<<<na, 128, 0, s>>>(xh, perm, k, xg, n);
}
