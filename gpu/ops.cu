/* ops.cu - small ops of the forward pass. The math mirrors cpu/kernels.c, cpu/forward.c and
 * cpu/router.c so that GPU and CPU agree to float rounding. */
#include "ops.cuh"
#include "launch.cuh"
#include "blockops.cuh"
#include "router.cuh"
#include <math.h>
#include <stdint.h>


__global__ void k_rmsnorm(const float *x, const float *w, float *out, int n, float eps) {
    hm_pdl_wait();
    x += (size_t)blockIdx.y * n; out += (size_t)blockIdx.y * n;   /* row blockIdx.y of a batched step */
    float ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
    ss = block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = w[i] * (x[i] * inv);
}

/* n % 4 == 0, 16-byte aligned: float4 per thread, one pass of loads, x kept in registers (n <= 4 *
 * 1024 * RN_V) between the sum of squares and the output */
#define RN_V 2
/* out = w * v * 1/sqrt(mean of squares + eps) for the block's float4s v (ss: this thread's sum of
 * squares); every thread of the block calls it (block_sum synchronizes) */
static __device__ void rn_store4(const float4 *v, float ss, const float *w, float *out, int n, int n4, float eps) {
    ss = block_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)n + eps);
#pragma unroll
    for (int r = 0; r < RN_V; r++) {
        const int i = threadIdx.x + r * blockDim.x;
        if (i >= n4) continue;
        const float4 ww = ((const float4 *)w)[i];
        ((float4 *)out)[i] = make_float4(ww.x * (v[r].x * inv), ww.y * (v[r].y * inv), ww.z * (v[r].z * inv), ww.w * (v[r].w * inv));
    }
}

__global__ void __launch_bounds__(1024) k_rmsnorm4(const float *__restrict__ x, const float *__restrict__ w,
                                                   float *__restrict__ out, int n, float eps) {
    hm_pdl_wait();
    x += (size_t)blockIdx.y * n; out += (size_t)blockIdx.y * n;   /* row blockIdx.y of a batched step */
    const int n4 = n / 4;
    float4 v[RN_V];
    float ss = 0;
#pragma unroll
    for (int r = 0; r < RN_V; r++) {
        const int i = threadIdx.x + r * blockDim.x;
        v[r] = i < n4 ? ((const float4 *)x)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        ss += v[r].x * v[r].x + v[r].y * v[r].y + v[r].z * v[r].z + v[r].w * v[r].w;
    }
    rn_store4(v, ss, w, out, n, n4, eps);
}

static bool vec4_ok(int n, const void *a, const void *b, const void *c) {
    return n % 4 == 0 && n <= 4 * 1024 * RN_V && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}
static int vec4_threads(int n) {
    const int per = (n / 4 + RN_V - 1) / RN_V;
    return (per + 31) / 32 * 32 < 32 ? 32 : (per + 31) / 32 * 32;
}

void op_rmsnorm_rows(const float *x, const float *w, float *out, int n, int rows, float eps, cudaStream_t s) {
    const dim3 grid(1, rows);
    if (vec4_ok(n, x, w, out)) hm_launch(k_rmsnorm4, grid, vec4_threads(n), 0, s, x, w, out, n, eps);
    else hm_launch(k_rmsnorm, grid, 1024, 0, s, x, w, out, n, eps);
}

void op_rmsnorm(const float *x, const float *w, float *out, int n, float eps, cudaStream_t s) {
    op_rmsnorm_rows(x, w, out, n, 1, eps, s);
}

/* x += sum_j wt[j] * y[j] (+ shared), then out = rmsnorm(x) * w when w is given: the residual
 * update and the next norm in one launch (one block: the norm needs all of x). Same order of
 * additions as the CPU: the weighted sum first, then the shared part, then into x. */
/* row blockIdx.y of a batched step: x, shared, out + r * n; y + r * ys; wt + r * ws */
#define RN_ROW()                                                                   \
    do {                                                                           \
        const size_t r_ = blockIdx.y;                                              \
        x += r_ * n; y += r_ * ys;                                                 \
        if (wt) wt += r_ * ws;                                                     \
        if (shared) shared += r_ * n;                                              \
        if (out) out += r_ * n;                                                    \
    } while (0)

__global__ void k_residual_norm(float *x, const float *y, const float *wt, int k, const float *shared, const float *w,
                                float *out, int n, float eps, long long ys, int ws) {
    hm_pdl_wait();
    RN_ROW();
    float ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float acc = 0;
        for (int j = 0; j < k; j++) acc += (wt ? wt[j] : 1.0f) * y[(size_t)j * n + i];
        if (shared) acc += shared[i];
        float v = x[i] + acc;
        x[i] = v;
        ss += v * v;
    }
    if (!w) return;
    ss = block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = w[i] * (x[i] * inv);
}

/* k_residual_norm with float4 and all k expert rows loaded before they are summed (in the same
 * order: the weighted sum over j, then shared, then into x). n % 4 == 0, n <= 4 * 1024 * RN_V. */
__global__ void __launch_bounds__(1024) k_residual_norm4(float *__restrict__ x, const float *__restrict__ y,
                                                         const float *__restrict__ wt, int k,
                                                         const float *__restrict__ shared, const float *__restrict__ w,
                                                         float *__restrict__ out, int n, float eps, long long ys, int ws) {
    hm_pdl_wait();
    RN_ROW();
    __shared__ float swt[64];
    for (int j = threadIdx.x; j < k; j += blockDim.x) swt[j] = wt ? wt[j] : 1.0f;
    __syncthreads();
    const int n4 = n / 4;
    float4 v[RN_V];
    float ss = 0;
#pragma unroll
    for (int r = 0; r < RN_V; r++) {
        const int i = threadIdx.x + r * blockDim.x;
        v[r] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i >= n4) continue;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        int j = 0;
        for (; j + 4 <= k; j += 4) {
            float4 t[4];
#pragma unroll
            for (int u = 0; u < 4; u++) t[u] = ((const float4 *)y)[(size_t)(j + u) * n4 + i];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const float c = swt[j + u];
                acc.x += c * t[u].x; acc.y += c * t[u].y; acc.z += c * t[u].z; acc.w += c * t[u].w;
            }
        }
        for (; j < k; j++) {
            const float4 t = ((const float4 *)y)[(size_t)j * n4 + i];
            const float c = swt[j];
            acc.x += c * t.x; acc.y += c * t.y; acc.z += c * t.z; acc.w += c * t.w;
        }
        if (shared) {
            const float4 t = ((const float4 *)shared)[i];
            acc.x += t.x; acc.y += t.y; acc.z += t.z; acc.w += t.w;
        }
        const float4 xo = ((const float4 *)x)[i];
        v[r] = make_float4(xo.x + acc.x, xo.y + acc.y, xo.z + acc.z, xo.w + acc.w);
        ((float4 *)x)[i] = v[r];
        ss += v[r].x * v[r].x + v[r].y * v[r].y + v[r].z * v[r].z + v[r].w * v[r].w;
    }
    if (!w) return;
    rn_store4(v, ss, w, out, n, n4, eps);
}

void op_residual_norm_rows(float *x, const float *y, long long ys, const float *wt, int ws, int k, const float *shared,
                           const float *w, float *out, int n, int rows, float eps, cudaStream_t s) {
    const dim3 grid(1, rows);
    if (k <= 64 && vec4_ok(n, x, y, out) && ((uintptr_t)shared | (uintptr_t)w) % 16 == 0 && ys % 4 == 0)
        hm_launch(k_residual_norm4, grid, vec4_threads(n), 0, s, x, y, wt, k, shared, w, out, n, eps, ys, ws);
    else
        hm_launch(k_residual_norm, grid, 1024, 0, s, x, y, wt, k, shared, w, out, n, eps, ys, ws);
}

void op_residual_norm(float *x, const float *y, const float *wt, int k, const float *shared, const float *w, float *out,
                      int n, float eps, cudaStream_t s) {
    op_residual_norm_rows(x, y, 0, wt, 0, k, shared, w, out, n, 1, eps, s);
}

/* one block per head (q heads first, then kv heads); blockDim = hd rounded up to a warp */
__global__ void k_qkv_post(float *q, float *k, const float *v, const float *bq, const float *bk, const float *bv,
                           const float *qn, const float *kn, int n_head, int n_head_kv, int hd, int n_rot, float theta,
                           float eps, const int *pos_p, float *kcache, float *vcache, const int *seq_p, long long seq_stride,
                           long long qs) {
    hm_pdl_wait();
    const int r = blockIdx.y;   /* a batched step: row r's q|k|v, position and sequence (its cache) */
    q += r * qs; k += r * qs; v += r * qs; pos_p += r;
    const long long so = seq_p ? seq_p[r] * seq_stride : 0;
    qkv_post_head(q, k, v, bq, bk, bv, qn, kn, n_head, n_head_kv, hd, n_rot, theta, eps, blockIdx.x, *pos_p, kcache + so, vcache + so);
}

void op_qkv_post_seq(float *q, float *k, const float *v, const float *bq, const float *bk, const float *bv,
                     const float *qn, const float *kn, int n_head, int n_head_kv, int hd, int n_rot, float theta,
                     float eps, const int *pos, float *kcache, float *vcache, const int *seq, long long seq_stride, int rows,
                     long long qs, cudaStream_t s) {
    hm_launch(k_qkv_post, dim3(n_head + n_head_kv, rows), (hd + 31) / 32 * 32, 0, s, q, k, v, bq, bk, bv, qn, kn, n_head, n_head_kv,
              hd, n_rot, theta, eps, pos, kcache, vcache, seq, seq_stride, qs);
}

void op_qkv_post(float *q, float *k, const float *v, const float *bq, const float *bk, const float *bv,
                 const float *qn, const float *kn, int n_head, int n_head_kv, int hd, int n_rot, float theta,
                 float eps, const int *pos, float *kcache, float *vcache, cudaStream_t s) {
    op_qkv_post_seq(q, k, v, bq, bk, bv, qn, kn, n_head, n_head_kv, hd, n_rot, theta, eps, pos, kcache, vcache, NULL, 0, 1, 0, s);
}

/* Decode attention: flash decoding in one launch. Block (kv head, split, head slab x row) takes a
 * contiguous slice of the positions [0, pos] for the slab's q heads (up to HS of the kv head's
 * group); its AT_W warps split the slice again, and each warp walks its positions AT_U at a time:
 * lane i holds dims i, i+32, ... (DPL of them) of every q head, K and V rows are read straight from
 * the cache (coalesced, all AT_U rows' loads issued before any use), a head's score is the warp sum
 * of the lanes' partial dots, and the softmax runs online in base 2 (scores scaled by log2(e)/sqrt(hd)).
 * The warps' states merge in shared memory. The split count follows pos (AT_MINPOS positions a
 * split at least, at most the grid's), so short contexts use few blocks and a single split writes
 * the output directly; otherwise each split writes (m, l, o[hd]) to part and the last block of the
 * (row, kv head, slab) to finish, found by an atomic counter that it resets, merges them in split
 * order. part: op_attn_part_floats; its counters (the first op_attn_part_counters floats) must be
 * zero before the first call (every call leaves them zero). */
#define AT_W 4        /* warps per block */
#define AT_U 4        /* positions a warp loads together */
#define AT_MINPOS 32  /* positions a split takes at least */
#define AT_LOG2E 1.4426950408889634f

static int attn_nsplit(int n_head_kv) {
    int n = (264 + n_head_kv - 1) / n_head_kv; /* ~2 blocks per SM of an H100/H200 at long context */
    return n < 1 ? 1 : n > 64 ? 64 : n;
}
static __host__ __device__ int attn_hs(int grp) { return grp <= 4 ? 4 : grp <= 8 ? 8 : grp <= 12 ? 12 : 16; }
static __host__ __device__ int attn_dpl(int hd) { return hd <= 32 ? 1 : hd <= 64 ? 2 : hd <= 128 ? 4 : 8; }
static __host__ __device__ int attn_nslab(int grp, int hd) {
    int hs = attn_hs(grp);
    if (attn_dpl(hd) == 8 && hs > 8) hs = 8;
    return (grp + hs - 1) / hs;
}

static __host__ __device__ size_t attn_ctr(int n_head, int n_head_kv, int hd) {
    return ((size_t)n_head_kv * attn_nslab(n_head / n_head_kv, hd) + 3) & ~(size_t)3;
}
size_t op_attn_part_counters(int n_head, int n_head_kv, int hd) { return attn_ctr(n_head, n_head_kv, hd); }
size_t op_attn_part_floats(int n_head, int n_head_kv, int hd) {
    return attn_ctr(n_head, n_head_kv, hd) + (size_t)n_head * attn_nsplit(n_head_kv) * (hd + 2);
}

template <int DPL, int HS>
__global__ void __launch_bounds__(AT_W * 32) k_attn_fd(const float *__restrict__ q, const float *__restrict__ kc,
                                                      const float *__restrict__ vc, float *__restrict__ out, float *part,
                                                      int n_head, int n_head_kv, int hd, const int *pos_p, const int *seq_p,
                                                      long long seq_stride, int nslab, long long qs, long long os, long long ps) {
    hm_pdl_wait();
    extern __shared__ float at_sm[]; /* [AT_W][HS][hd + 2]: each warp's m, l, o per head; later [HS][64] */
    const int row = blockIdx.z / nslab, slab = blockIdx.z - row * nslab;
    q += row * qs; out += row * os; part += row * ps; pos_p += row;
    if (seq_p) { kc += seq_p[row] * seq_stride; vc += seq_p[row] * seq_stride; }
    const int kvh = blockIdx.x, sp = blockIdx.y, nmax = gridDim.y;
    const int grp = n_head / n_head_kv, h0 = slab * HS, ng = min(HS, grp - h0), kvd = n_head_kv * hd;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, hw = hd + 2;
    const int n = *pos_p + 1;
    int ns = min(nmax, (n + AT_MINPOS - 1) / AT_MINPOS);
    const int len = (n + ns - 1) / ns;
    ns = (n + len - 1) / len; /* every split below ns is non-empty */
    if (sp >= ns) return;
    const int t0 = sp * len, t1 = min(t0 + len, n);
    const int wl = (t1 - t0 + AT_W - 1) / AT_W, w0 = min(t0 + warp * wl, t1), w1 = min(w0 + wl, t1);
    const float sc = AT_LOG2E / sqrtf((float)hd);
    const int head0 = kvh * grp + h0;
    float qr[HS][DPL], o[HS][DPL], m[HS], l[HS];
#pragma unroll
    for (int h = 0; h < HS; h++) {
        m[h] = -INFINITY; l[h] = 0.f;
#pragma unroll
        for (int r = 0; r < DPL; r++) {
            const int d = lane + 32 * r;
            qr[h][r] = h < ng && d < hd ? q[(size_t)(head0 + h) * hd + d] : 0.f;
            o[h][r] = 0.f;
        }
    }
    const float *kb = kc + (size_t)kvh * hd, *vb = vc + (size_t)kvh * hd;
    for (int t = w0; t < w1; t += AT_U) {
        const int nu = min(AT_U, w1 - t);
        float kr[AT_U][DPL], vr[AT_U][DPL];
#pragma unroll
        for (int u = 0; u < AT_U; u++)
#pragma unroll
            for (int r = 0; r < DPL; r++) {
                const int d = lane + 32 * r;
                const bool ok = u < nu && d < hd;
                kr[u][r] = ok ? kb[(size_t)(t + u) * kvd + d] : 0.f;
                vr[u][r] = ok ? vb[(size_t)(t + u) * kvd + d] : 0.f;
            }
#pragma unroll
        for (int h = 0; h < HS; h++) {
            if (h >= ng) break; /* warp-uniform */
            float s[AT_U];
#pragma unroll
            for (int u = 0; u < AT_U; u++) {
                float d = 0.f;
#pragma unroll
                for (int r = 0; r < DPL; r++) d = fmaf(qr[h][r], kr[u][r], d);
                s[u] = u < nu ? warp_sum(d) * sc : -INFINITY;
            }
            const float mn = fmaxf(m[h], fmaxf(fmaxf(s[0], s[1]), fmaxf(s[2], s[3])));
            const float c = exp2f(m[h] - mn);
            float p[AT_U], ps_ = 0.f;
#pragma unroll
            for (int u = 0; u < AT_U; u++) { p[u] = exp2f(s[u] - mn); ps_ += p[u]; }
            l[h] = fmaf(l[h], c, ps_);
#pragma unroll
            for (int r = 0; r < DPL; r++) {
                float acc = o[h][r] * c;
#pragma unroll
                for (int u = 0; u < AT_U; u++) acc = fmaf(p[u], vr[u][r], acc);
                o[h][r] = acc;
            }
            m[h] = mn;
        }
    }
    /* this warp's states into shared memory, then the block's merge */
#pragma unroll
    for (int h = 0; h < HS; h++) {
        if (h >= ng) break;
        float *st = at_sm + ((size_t)warp * HS + h) * hw;
        if (lane == 0) { st[0] = m[h]; st[1] = l[h]; }
#pragma unroll
        for (int r = 0; r < DPL; r++)
            if (lane + 32 * r < hd) st[2 + lane + 32 * r] = o[h][r];
    }
    __syncthreads();
    float *ctr = part + (size_t)kvh * nslab + slab; /* the counters come first */
    float *pp = part + attn_ctr(n_head, n_head_kv, hd);
    for (int i = threadIdx.x; i < ng * hd; i += AT_W * 32) {
        const int h = i / hd, d = i - h * hd;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < AT_W; w++) M = fmaxf(M, at_sm[((size_t)w * HS + h) * hw]);
        float L = 0.f, O = 0.f;
#pragma unroll
        for (int w = 0; w < AT_W; w++) {
            const float *st = at_sm + ((size_t)w * HS + h) * hw;
            if (st[0] == -INFINITY) continue; /* a warp without positions */
            const float c = exp2f(st[0] - M);
            L = fmaf(st[1], c, L);
            O = fmaf(st[2 + d], c, O);
        }
        if (ns == 1) out[(size_t)(head0 + h) * hd + d] = O / L;
        else {
            float *dst = pp + ((size_t)(head0 + h) * nmax + sp) * hw;
            if (d == 0) { dst[0] = M; dst[1] = L; }
            dst[2 + d] = O;
        }
    }
    if (ns == 1) return;
    __shared__ int last;
    __threadfence(); /* this split's partials are visible before the counter says so */
    __syncthreads();
    if (threadIdx.x == 0) {
        const int prev = atomicAdd((int *)ctr, 1);
        last = prev == ns - 1;
        if (last) *(int *)ctr = 0; /* every other split has counted: ready for the next call */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    /* the splits' weights per head: warp h takes head h, lanes the splits (ns <= 64) */
    float *cw = at_sm; /* [HS][64] (the warp states are consumed) */
    for (int h = warp; h < ng; h += AT_W) {
        const float *src = pp + (size_t)(head0 + h) * nmax * hw;
        const float m0 = lane < ns ? __ldcg(src + (size_t)lane * hw) : -INFINITY;
        const float m1 = lane + 32 < ns ? __ldcg(src + (size_t)(lane + 32) * hw) : -INFINITY;
        const float l0 = lane < ns ? __ldcg(src + (size_t)lane * hw + 1) : 0.f;
        const float l1 = lane + 32 < ns ? __ldcg(src + (size_t)(lane + 32) * hw + 1) : 0.f;
        float M = fmaxf(m0, m1);
        for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
        const float c0 = lane < ns ? exp2f(m0 - M) : 0.f, c1 = lane + 32 < ns ? exp2f(m1 - M) : 0.f;
        const float L = warp_sum(fmaf(l0, c0, l1 * c1));
        cw[h * 64 + lane] = c0 / L;
        cw[h * 64 + lane + 32] = c1 / L;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < ng * hd; i += AT_W * 32) {
        const int h = i / hd, d = i - h * hd;
        const float *src = pp + (size_t)(head0 + h) * nmax * hw + 2 + d;
        float O = 0.f;
#pragma unroll 8
        for (int s2 = 0; s2 < ns; s2++) O = fmaf(cw[h * 64 + s2], __ldcg(src + (size_t)s2 * hw), O);
        out[(size_t)(head0 + h) * hd + d] = O;
    }
}

void op_attn_decode(const float *q, const float *kcache, const float *vcache, float *out, float *part, int n_head,
                    int n_head_kv, int hd, int n_ctx, const int *pos, cudaStream_t s) {
    op_attn_decode_seq(q, kcache, vcache, out, part, n_head, n_head_kv, hd, n_ctx, pos, NULL, 0, 1, 0, 0, 0, s);
}

template <int DPL, int HS>
static void attn_go(dim3 grid, int hd, cudaStream_t s, const float *q, const float *kc, const float *vc, float *out, float *part,
                    int n_head, int n_head_kv, const int *pos, const int *seq, long long seq_stride, int nslab, long long qs,
                    long long os, long long ps) {
    const size_t smem = sizeof(float) * HS * (size_t)(AT_W * (hd + 2) > 64 ? AT_W * (hd + 2) : 64);   /* warp states, then split weights */
    hm_launch(k_attn_fd<DPL, HS>, grid, AT_W * 32, smem, s, q, kc, vc, out, part, n_head, n_head_kv, hd, pos, seq, seq_stride, nslab,
              qs, os, ps);
}

void op_attn_decode_seq(const float *q, const float *kcache, const float *vcache, float *out, float *part, int n_head,
                        int n_head_kv, int hd, int n_ctx, const int *pos, const int *seq, long long seq_stride, int rows,
                        long long qs, long long os, long long ps, cudaStream_t s) {
    (void)n_ctx;
    const int grp = n_head / n_head_kv, dpl = attn_dpl(hd), nslab = attn_nslab(grp, hd);
    const int hs = (grp + nslab - 1) / nslab <= 4 ? 4 : (grp + nslab - 1) / nslab <= 8 ? 8 : (grp + nslab - 1) / nslab <= 12 ? 12 : 16;
    const dim3 grid(n_head_kv, attn_nsplit(n_head_kv), nslab * rows);
#define AT_GO(D, H) attn_go<D, H>(grid, hd, s, q, kcache, vcache, out, part, n_head, n_head_kv, pos, seq, seq_stride, nslab, qs, os, ps)
#define AT_HS(D) do { if (hs == 4) AT_GO(D, 4); else if (hs == 8) AT_GO(D, 8); else if (hs == 12) AT_GO(D, 12); else AT_GO(D, 16); } while (0)
    if (dpl == 1) AT_HS(1);
    else if (dpl == 2) AT_HS(2);
    else if (dpl == 4) AT_HS(4);
    else if (hs == 4) AT_GO(8, 4);
    else AT_GO(8, 8);
#undef AT_HS
#undef AT_GO
}

__global__ void k_router(const float *logits, const float *bias, int n, int k, int fn, int norm, float scale,
                         int n_group, int topk_group, int *ids, float *w, int ws) {
    hm_pdl_wait();
    logits += (size_t)blockIdx.x * n; ids += blockIdx.x * k; w += blockIdx.x * ws;   /* row blockIdx.x of a batched step */
    router_topk(logits, bias, n, k, fn, norm, scale, n_group, topk_group, ids, w);
}

void op_router_rows(const float *logits, const float *bias, int n, int k, int fn, int norm, float scale, int n_group,
                    int topk_group, int *ids, float *w, int ws, int rows, cudaStream_t s) {
    hm_launch(k_router, rows, 32, 0, s, logits, bias, n, k, fn, norm, scale, n_group, topk_group, ids, w, ws);
}

void op_router(const float *logits, const float *bias, int n, int k, int fn, int norm, float scale, int n_group,
               int topk_group, int *ids, float *w, cudaStream_t s) {
    op_router_rows(logits, bias, n, k, fn, norm, scale, n_group, topk_group, ids, w, 0, 1, s);
}

