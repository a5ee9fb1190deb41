/* ops.cu - small ops of the forward pass. The math mirrors cpu/kernels.c, cpu/forward.c and
 * cpu/router.c so that GPU and CPU agree to float rounding. */
#include "ops.cuh"
#include "launch.cuh"
#include "blockops.cuh"
#include "router.cuh"
#include "gemv_q8.cuh"
#include "gpu_gemv.h"
#include <cooperative_groups.h>
#include <math.h>
#include <type_traits>
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
#define RN_NOX 4   /* a flag beside hm_small_pdl's (the float4 kernels): x's update is not stored */
#define RN_K 8 /* expert rows a residual-norm thread loads at once (one float4 a thread) */
/* out = w * v * 1/sqrt(mean of squares + eps) for the block's float4s v (ss: this thread's sum of
 * squares; wv: its float4s of w, rn_load_w); every thread of the block calls it (block_sum
 * synchronizes) */
static __device__ void rn_store4(const float4 *v, float ss, const float4 *wv, float *out, int n, int n4, float eps,
                                 uint8_t *xq = nullptr) {
    ss = block_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)n + eps);
#pragma unroll
    for (int r = 0; r < RN_V; r++) {
        const int i = threadIdx.x + r * blockDim.x;
        if (i - (threadIdx.x & 31) >= n4) continue;   /* warp-uniform: the warp's float4s start past n */
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < n4) {
            const float4 ww = wv[r];
            o = make_float4(ww.x * (v[r].x * inv), ww.y * (v[r].y * inv), ww.z * (v[r].z * inv), ww.w * (v[r].w * inv));
            ((float4 *)out)[i] = o;
        }
        if (xq) q8_quant_f4(o, i, i < n4, xq);   /* the q8 records of out (n % 256 == 0: whole chunks) */
    }
}

/* this thread's float4s of the norm weight w (NULL: none), read before hm_pdl_wait (weights do not
 * depend on the kernel before) */
static __device__ __forceinline__ void rn_load_w(const float *w, int n4, float4 *wv) {
#pragma unroll
    for (int r = 0; r < RN_V; r++) {
        const int i = threadIdx.x + r * blockDim.x;
        wv[r] = w && i < n4 ? __ldg((const float4 *)w + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

/* R: a batched step's rows each with their q8 records, row r's at xq + r * xqs (the kernels below too) */
template <bool R = false>
__global__ void __launch_bounds__(1024) k_rmsnorm4(const float *__restrict__ x, const float *__restrict__ w,
                                                   float *__restrict__ out, int n, float eps, uint8_t *__restrict__ xq, int f,
                                                   long long xqs) {
    const int n4 = n / 4;
    float4 wv[RN_V];
    hm_pdl_pre(f);
    rn_load_w(w, n4, wv);
    hm_pdl_wait_f(f);
    x += (size_t)blockIdx.y * n; out += (size_t)blockIdx.y * n;   /* row blockIdx.y of a batched step */
    if constexpr (R) { if (xq) xq += (size_t)blockIdx.y * xqs; }
    float4 v[RN_V];
    float ss = 0;
#pragma unroll
    for (int r = 0; r < RN_V; r++) {
        const int i = threadIdx.x + r * blockDim.x;
        v[r] = i < n4 ? ((const float4 *)x)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        ss += v[r].x * v[r].x + v[r].y * v[r].y + v[r].z * v[r].z + v[r].w * v[r].w;
    }
    rn_store4(v, ss, wv, out, n, n4, eps, xq);
}

static bool vec4_ok(int n, const void *a, const void *b, const void *c) {
    return n % 4 == 0 && n <= 4 * 1024 * RN_V && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}
static int vec4_threads(int n) {
    const int per = (n / 4 + RN_V - 1) / RN_V;
    return (per + 31) / 32 * 32 < 32 ? 32 : (per + 31) / 32 * 32;
}

/* The records the float4 kernel (v4) writes beside the norm's output (rows of them xqs bytes apart):
 * xq when they are whole chunks, else NULL (the launcher then makes them with q8_records_rows) */
static uint8_t *xq_in_kernel(bool v4, int n, uint8_t *xq, int rows = 1, long long xqs = 0) {
    return v4 && xq && n % Q8_CHUNK == 0 && n <= Q8_MAX_NCOLS && ((uintptr_t)xq | (uintptr_t)(rows > 1 ? xqs : 0)) % 16 == 0 ? xq
                                                                                                                            : nullptr;
}
/* rows rows of n floats (os apart) quantized to their q8 records (xqs bytes apart), a launch each */
static void q8_records_rows(const float *out, long long os, int n, int rows, uint8_t *xq, long long xqs, cudaStream_t s) {
    for (int r = 0; r < rows; r++) gpu_q8_records(out + r * os, n, xq + r * xqs, s);
}

/* xq: the rows' records too, row r's at xq + r * xqs (a multiple of 16 when rows > 1) */
static void rmsnorm_launch(const float *x, const float *w, float *out, uint8_t *xq, int n, int rows, float eps, cudaStream_t s,
                           long long xqs = 0) {
    const dim3 grid(1, rows);
    const bool v4 = vec4_ok(n, x, w, out);
    uint8_t *kq = xq_in_kernel(v4, n, xq, rows, xqs);
    if (v4 && rows > 1 && kq) hm_launch(k_rmsnorm4<true>, grid, vec4_threads(n), 0, s, x, w, out, n, eps, kq, hm_small_pdl(), xqs);
    else if (v4) hm_launch(k_rmsnorm4<false>, grid, vec4_threads(n), 0, s, x, w, out, n, eps, kq, hm_small_pdl(), 0LL);
    else hm_launch(k_rmsnorm, grid, 1024, 0, s, x, w, out, n, eps);
    if (xq && !kq) q8_records_rows(out, n, n, rows, xq, xqs, s);
}

void op_rmsnorm_rows(const float *x, const float *w, float *out, int n, int rows, float eps, cudaStream_t s, void *xq, long long xqs) {
    rmsnorm_launch(x, w, out, (uint8_t *)xq, n, rows, eps, s, xqs);
}

void op_rmsnorm(const float *x, const float *w, float *out, int n, float eps, cudaStream_t s) {
    rmsnorm_launch(x, w, out, NULL, n, 1, eps, s);
}

void op_rmsnorm_q8(const float *x, const float *w, float *out, void *xq, int n, float eps, cudaStream_t s) {
    rmsnorm_launch(x, w, out, (uint8_t *)xq, n, 1, eps, s);
}

/* x += sum_j wt[j] * y[j] (+ shared), then out = rmsnorm(x) * w when w is given: the residual
 * update and the next norm in one launch (one block: the norm needs all of x). Same order of
 * additions as the CPU: the weighted sum first, then the shared part, then into x. */
/* row blockIdx.y of a batched step: x, shared, out + r * n; y + r * ys; wt + r * ws */
#define RN_ROW()                                                                   \
    do {                                                                           \
        const size_t r_ = blockIdx.y;                                              \
        x += r_ * n; y += r_ * ys;                                                 \
        if (pre) pre += r_ * n;                                                    \
        if (wt) wt += r_ * ws;                                                     \
        if (shared) shared += r_ * n;                                              \
        if (out) out += r_ * n;                                                    \
    } while (0)

__global__ void k_residual_norm(float *x, const float *pre, const float *y, const float *wt, int k, const float *shared, const float *w,
                                float *out, int n, float eps, long long ys, int ws) {
    hm_pdl_wait();
    RN_ROW();
    float ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float acc = 0;
        for (int j = 0; j < k; j++) acc += (wt ? wt[j] : 1.0f) * y[(size_t)j * n + i];
        if (shared) acc += shared[i];
        float v = (pre ? x[i] + pre[i] : x[i]) + acc;
        x[i] = v;
        ss += v * v;
    }
    if (!w) return;
    ss = block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = w[i] * (x[i] * inv);
}

/* x's float4 i plus its residual (the weighted sum over the k expert rows of y, then shared), the
 * CPU's order of additions: the rows loaded RN_K at a time, all before their sum (one L2 round trip
 * a group, not one a row). !in: zeros, nothing read. Every thread of the block calls it (it
 * synchronizes). */
/* x's float4 i, plus pre's when given (an update op_router_norm_q8 left unstored: added first, the
 * order it had) */
static __device__ __forceinline__ float4 f4_add(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
static __device__ __forceinline__ float4 rn_x_pre(const float *__restrict__ x, const float *__restrict__ pre, int i) {
    const float4 a = ((const float4 *)x)[i];
    return pre ? f4_add(a, ((const float4 *)pre)[i]) : a;
}

static __device__ __forceinline__ float4 rn_residual1(const float *__restrict__ x, const float *__restrict__ pre, const float *__restrict__ y,
                                                      const float *__restrict__ wt, int k, const float *__restrict__ shared,
                                                      int n4, int i, bool in) {
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 xo = in ? rn_x_pre(x, pre, i) : z, sh = shared && in ? ((const float4 *)shared)[i] : z;
    float4 acc = z;
    __shared__ float cw[RN_K];
    for (int j0 = 0; j0 < k; j0 += RN_K) {
        float4 t[RN_K];
#pragma unroll
        for (int u = 0; u < RN_K; u++) t[u] = j0 + u < k && in ? ((const float4 *)y)[(size_t)(j0 + u) * n4 + i] : z;
        if (j0) __syncthreads();   /* the last group's weights are used */
        if (threadIdx.x < RN_K && j0 + threadIdx.x < k) cw[threadIdx.x] = wt ? wt[j0 + threadIdx.x] : 1.0f;
        __syncthreads();
#pragma unroll
        for (int u = 0; u < RN_K; u++) {
            if (j0 + u >= k) break;
            const float c = cw[u];
            acc.x += c * t[u].x; acc.y += c * t[u].y; acc.z += c * t[u].z; acc.w += c * t[u].w;
        }
    }
    if (shared) { acc.x += sh.x; acc.y += sh.y; acc.z += sh.z; acc.w += sh.w; }
    return in ? make_float4(xo.x + acc.x, xo.y + acc.y, xo.z + acc.z, xo.w + acc.w) : z;
}

/* k_residual_norm4 with one float4 a thread (n / 4 <= blockDim.x <= 1024, rn_residual1). */
template <bool R = false>
__global__ void __launch_bounds__(1024) k_residual_norm1(float *__restrict__ x, const float *__restrict__ pre, const float *__restrict__ y,
                                                         const float *__restrict__ wt, int k,
                                                         const float *__restrict__ shared, const float *__restrict__ w,
                                                         float *__restrict__ out, int n, float eps, long long ys, int ws,
                                                         uint8_t *__restrict__ xq, int f, long long xqs) {
    const int n4 = n / 4, i = threadIdx.x;
    const bool in = i < n4;
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    float4 wv[RN_V];
    hm_pdl_pre(f);
    rn_load_w(w, n4, wv);
    hm_pdl_wait_f(f);
    RN_ROW();
    if constexpr (R) { if (xq) xq += (size_t)blockIdx.y * xqs; }
    float4 v[RN_V];
    v[0] = rn_residual1(x, pre, y, wt, k, shared, n4, i, in);
#pragma unroll
    for (int r = 1; r < RN_V; r++) v[r] = z;
    if (in && !(f & RN_NOX)) ((float4 *)x)[i] = v[0];
    if (!w) return;
    rn_store4(v, v[0].x * v[0].x + v[0].y * v[0].y + v[0].z * v[0].z + v[0].w * v[0].w, wv, out, n, n4, eps, xq);
    HM_KT_END();
}

/* k_residual_norm1 spread over a cluster of RN_CL blocks, one float4 a thread: block b takes float4s
 * [b * blockDim.x, (b + 1) * blockDim.x), so its loads (on `air` the 8 expert rows, shared and x
 * are 160 KB) come through its own SM instead of queueing on one. Each block's sum of squares
 * (block_sum) travels by st.async into every block's shared memory at its rank and completes a
 * transaction barrier there; each block then adds the RN_CL partials in rank order, so all blocks
 * scale by the same factor. Not a cluster barrier after the partials: its arrive releases at
 * cluster scope, which on sm_90 is a MEMBAR.ALL.GPU that waits for this thread's x store to reach
 * L2, an L2 round trip on the step's critical path (forty-third pass: 2.29 against 2.53 us a launch
 * in a PDL chain, air +0.4-0.6%). The one cluster barrier left (every block's transaction barrier
 * is initialized) arrives before the PDL wait and is long complete when the partials go out. */
#define RN_CL 8
template <bool R = false>
__global__ void __launch_bounds__(1024) k_residual_norm_cl(float *__restrict__ x, const float *__restrict__ pre, const float *__restrict__ y,
                                                           const float *__restrict__ wt, int k, const float *__restrict__ shared,
                                                           const float *__restrict__ w, float *__restrict__ out, int n, float eps,
                                                           long long ys, int ws, uint8_t *__restrict__ xq, int f, long long xqs) {
#if __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;   /* n / 4 == gridDim.x * blockDim.x */
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    __shared__ __align__(8) uint64_t mbar;
    const unsigned mba = (unsigned)__cvta_generic_to_shared(&mbar);
    if (w) {   /* w: uniform over the cluster, as the wait below */
        if (threadIdx.x == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(mba) : "memory");
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mba), "r"(cl.num_blocks() * 4) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    }
    hm_pdl_pre(f);
    const float4 wv = w ? __ldg((const float4 *)w + i) : z;
    hm_pdl_wait_f(f);
    RN_ROW();
    if constexpr (R) { if (xq) xq += (size_t)blockIdx.y * xqs; }
    const float4 v = rn_residual1(x, pre, y, wt, k, shared, n / 4, i, true);
    if (!(f & RN_NOX)) ((float4 *)x)[i] = v;
    if (!w) return;   /* uniform over the cluster: no barrier below */
    const float ss = block_sum(v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w);
    __shared__ float part[RN_CL];
    const unsigned nb = cl.num_blocks(), rank = cl.block_rank();
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");   /* every block's mbar is set up */
    if (threadIdx.x < nb) {
        unsigned rp, rb;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rp) : "r"((unsigned)__cvta_generic_to_shared(&part[rank])), "r"(threadIdx.x));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(mba), "r"(threadIdx.x));
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(rp), "r"(__float_as_uint(ss)),
                     "r"(rb) : "memory");
    }
    asm volatile("{\n\t.reg .pred p;\n\tRN_MB_WAIT:\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n\t@!p bra RN_MB_WAIT;\n\t}"
                 ::"r"(mba) : "memory");
    float tot = 0.f;
    for (unsigned r = 0; r < nb; r++) tot += part[r];
    const float inv = 1.0f / sqrtf(tot / (float)n + eps);
    const float4 o = make_float4(wv.x * (v.x * inv), wv.y * (v.y * inv), wv.z * (v.z * inv), wv.w * (v.w * inv));
    ((float4 *)out)[i] = o;
    if (xq) q8_quant_f4(o, i, true, xq);
    HM_KT_END();
#else
    __trap();
#endif
}

/* HOTMOE_RN_CLUSTER=0: the residual norm in one block (k_residual_norm1) instead of a cluster */
static bool rn_cluster(void) {
    static std::atomic<int> c(-1);
    return hm_env_digit("HOTMOE_RN_CLUSTER", 0, 1, 1, c) == 1 && hm_cluster_ok();
}

/* k_residual_norm with float4 and all k expert rows loaded before they are summed (in the same
 * order: the weighted sum over j, then shared, then into x). n % 4 == 0, n <= 4 * 1024 * RN_V. */
template <bool R = false>
__global__ void __launch_bounds__(1024) k_residual_norm4(float *__restrict__ x, const float *__restrict__ pre, const float *__restrict__ y,
                                                         const float *__restrict__ wt, int k,
                                                         const float *__restrict__ shared, const float *__restrict__ w,
                                                         float *__restrict__ out, int n, float eps, long long ys, int ws,
                                                         uint8_t *__restrict__ xq, int f, long long xqs) {
    float4 wv[RN_V];
    hm_pdl_pre(f);
    rn_load_w(w, n / 4, wv);
    hm_pdl_wait_f(f);
    RN_ROW();
    if constexpr (R) { if (xq) xq += (size_t)blockIdx.y * xqs; }
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
        const float4 xo = rn_x_pre(x, pre, i);
        v[r] = make_float4(xo.x + acc.x, xo.y + acc.y, xo.z + acc.z, xo.w + acc.w);
        if (!(f & RN_NOX)) ((float4 *)x)[i] = v[r];
        ss += v[r].x * v[r].x + v[r].y * v[r].y + v[r].z * v[r].z + v[r].w * v[r].w;
    }
    if (!w) return;
    rn_store4(v, ss, wv, out, n, n4, eps, xq);
    HM_KT_END();
}

/* HOTMOE_RN_WIDE=0: the residual norm with two float4s a thread (the loads of a row after the last's sums) */
static bool rn_wide(void) {
    static std::atomic<int> c(-1);
    return hm_env_digit("HOTMOE_RN_WIDE", 0, 1, 1, c) == 1;
}

/* the residual norm's kernel for a row of n (v4: float4 loads allowed): k_residual_norm_cl, when each
 * of its blocks gets at least 128 float4s (H200, bench/README.md, eleventh pass: `air`, n 4096,
 * 198.0 tok/s against 195.5 in one block; `a3b`, n 2048 (64 a block), 323.3 against 327.3);
 * k_residual_norm1 (one float4 a thread); k_residual_norm4; the scalar k_residual_norm.
 * k_router_norm follows the first two's sums (router_norm_vw). */
enum rn_form { RN_FORM_CL, RN_FORM_ONE, RN_FORM_V4, RN_FORM_SCALAR };
static rn_form rn_form_for(int n, bool v4) {
    const int n4 = n / 4;
    if (v4 && n4 % (128 * RN_CL) == 0 && n4 <= 1024 * RN_CL && rn_cluster()) return RN_FORM_CL;
    if (v4 && n4 <= 1024 && rn_wide()) return RN_FORM_ONE;
    return v4 ? RN_FORM_V4 : RN_FORM_SCALAR;
}

/* xq: the rows' records too, row r's at xq + r * xqs (a multiple of 16 when rows > 1) */
static int residual_norm_launch(float *x, const float *pre, const float *y, long long ys, const float *wt, int ws, int k,
                                const float *shared, const float *w, float *out, uint8_t *xq, int n, int rows, float eps,
                                cudaStream_t s, bool store_x = true, long long xqs = 0) {
    const dim3 grid(1, rows);
    const int f = hm_small_pdl() | (store_x ? 0 : RN_NOX);
    const bool v4 = k <= 64 && vec4_ok(n, x, y, out) && ((uintptr_t)shared | (uintptr_t)w | (uintptr_t)pre) % 16 == 0 && ys % 4 == 0;
    if (!w) xq = NULL;   /* no norm, no output */
    uint8_t *kq = xq_in_kernel(v4, n, xq, rows, xqs);
    const rn_form form = rn_form_for(n, v4);
    auto go = [&](auto r) {
        constexpr bool R = decltype(r)::value;
        const long long qs = R ? xqs : 0;
        if (form == RN_FORM_CL)
            hm_launch_ex(k_residual_norm_cl<R>, dim3(RN_CL, rows), n / 4 / RN_CL, 0, s, hm_pdl_enabled(), RN_CL, x, pre, y, wt, k, shared, w,
                         out, n, eps, ys, ws, kq, f, qs);
        else if (form == RN_FORM_ONE)
            hm_launch(k_residual_norm1<R>, grid, (n / 4 + 31) / 32 * 32, 0, s, x, pre, y, wt, k, shared, w, out, n, eps, ys, ws, kq, f, qs);
        else hm_launch(k_residual_norm4<R>, grid, vec4_threads(n), 0, s, x, pre, y, wt, k, shared, w, out, n, eps, ys, ws, kq, f, qs);
    };
    if (form == RN_FORM_CL || form == RN_FORM_ONE || form == RN_FORM_V4) {
        if (rows > 1 && kq) go(std::true_type());
        else go(std::false_type());
    } else if (!store_x) return -1;   /* only the float4 kernels leave x as it was */
    else hm_launch(k_residual_norm, grid, 1024, 0, s, x, pre, y, wt, k, shared, w, out, n, eps, ys, ws);
    if (xq && !kq) q8_records_rows(out, n, n, rows, xq, xqs, s);
    return 0;
}

void op_residual_norm_rows(float *x, const float *y, long long ys, const float *wt, int ws, int k, const float *shared,
                           const float *w, float *out, int n, int rows, float eps, cudaStream_t s, void *xq, long long xqs) {
    residual_norm_launch(x, NULL, y, ys, wt, ws, k, shared, w, out, (uint8_t *)xq, n, rows, eps, s, true, xqs);
}

void op_residual_norm(float *x, const float *y, const float *wt, int k, const float *shared, const float *w, float *out,
                      int n, float eps, cudaStream_t s) {
    residual_norm_launch(x, NULL, y, 0, wt, 0, k, shared, w, out, NULL, n, 1, eps, s);
}

void op_residual_norm_q8(float *x, const float *y, const float *wt, int k, const float *shared, const float *w, float *out,
                         void *xq, int n, float eps, cudaStream_t s) {
    residual_norm_launch(x, NULL, y, 0, wt, 0, k, shared, w, out, (uint8_t *)xq, n, 1, eps, s);
}

int op_residual_norm_q8_ex(float *x, const float *pre, int store_x, const float *y, const float *wt, int k, const float *shared,
                           const float *w, float *out, void *xq, int n, float eps, cudaStream_t s) {
    return residual_norm_launch(x, pre, y, 0, wt, 0, k, shared, w, out, (uint8_t *)xq, n, 1, eps, s, store_x != 0);
}

/* The residual update after the o-projection, the FFN norm and the router's F32 GEMV in one launch
 * (exec.cu's HOTMOE_ROUTER_NORM): block r makes router row r's logit, and every block forms x + y
 * and its norm itself, so the norm's launch and its boundary go. x + y is not stored: the layer's
 * last residual norm adds y first (op_residual_norm_q8_ex). Every sum is the unfused launches'
 * in their order, so the outputs are bitwise theirs: the sum of squares as residual_norm_launch's
 * kernel makes it (k_residual_norm_cl's RN_CL blocks, or k_residual_norm1's one; vw warps a block,
 * each warp's sum over 32 consecutive float4s, the blocks' sums added in order), the logit as
 * gemv_kernel<TF32V, 1, 1> (parts of 8 floats, part t and t + 256 for thread t, the warps' sums in
 * order). Blocks 0 .. n / 1024 - 1 also write a 1,024-float slice of the normed row and its q8
 * records (out NULL: not written; a norm launch beside it writes them). n 2048 or 4096. RPB router
 * rows a block (each row's dot the same either way): fewer blocks read x and y. */
#define RTN_T 256
#define RTN_NMAX 4096
/* block blockIdx.x's RPB router rows (past the last row: the last row again, written nowhere) as
 * thread t's parts (float4 pairs 2 (t + j RTN_T) and + 1, j < np), loaded before the wait */
template <int RPB, int NP>
static __device__ __forceinline__ void router_rows_load(const float *__restrict__ R, int nrows, int n, int t, int np,
                                                        float4 (&rw)[RPB][2 * NP]) {
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int k = 0; k < RPB; k++) {
        const float4 *row = (const float4 *)(R + (size_t)min(blockIdx.x * RPB + k, nrows - 1) * n);
#pragma unroll
        for (int j = 0; j < NP; j++) {
            rw[k][2 * j] = j < np ? __ldg(row + 2 * (t + j * RTN_T)) : z;
            rw[k][2 * j + 1] = j < np ? __ldg(row + 2 * (t + j * RTN_T) + 1) : z;
        }
    }
}
/* a plus the part (w0, w1) . (x0, x1): eight fmaf in element order, as gemv_kernel<TF32V, 1, 1> */
static __device__ __forceinline__ float router_part(float a, float4 w0, float4 w1, float4 x0, float4 x1) {
    a = fmaf(w0.x, x0.x, a); a = fmaf(w0.y, x0.y, a); a = fmaf(w0.z, x0.z, a); a = fmaf(w0.w, x0.w, a);
    a = fmaf(w1.x, x1.x, a); a = fmaf(w1.y, x1.y, a); a = fmaf(w1.z, x1.z, a); a = fmaf(w1.w, x1.w, a);
    return a;
}
/* each of the RPB router rows' dot with one x, this thread's share in acc[k] (the caller sums the warp): part j of x is
 * (xf(2 j), xf(2 j + 1)), the parts j < np in order (k_router_norm's x from shared memory, k_router_rows' from registers) */
template <int RPB, int NP, class XF>
static __device__ __forceinline__ void router_dots(const float4 (&rw)[RPB][2 * NP], int np, XF xf, float (&acc)[RPB]) {
#pragma unroll
    for (int k = 0; k < RPB; k++) acc[k] = 0.f;
#pragma unroll
    for (int j = 0; j < NP; j++) {
        if (j >= np) continue;
        const float4 x0 = xf(2 * j), x1 = xf(2 * j + 1);
#pragma unroll
        for (int k = 0; k < RPB; k++) acc[k] = router_part(acc[k], rw[k][2 * j], rw[k][2 * j + 1], x0, x1);
    }
}
template <int RPB>
__global__ void __launch_bounds__(RTN_T) k_router_norm(const float *__restrict__ x, const float *__restrict__ y,
                                                       const float *__restrict__ w, const float *__restrict__ R,
                                                       float *__restrict__ logits, float *__restrict__ out,
                                                       uint8_t *__restrict__ xq, int n, int nrows, int vw, float eps, int f) {
    constexpr int NR = RTN_NMAX / 4 / RTN_T, NP = RTN_NMAX / 8 / RTN_T;   /* float4 rounds, 8-float parts a thread (at most) */
    __shared__ __align__(16) float sx[RTN_NMAX];
    __shared__ float sw[RTN_NMAX / 128], red[RPB][RTN_T / 32], sb[RTN_T / 32];
    const int t = threadIdx.x, lane = t & 31, wid = t >> 5, nr = n / (4 * RTN_T), np = n / (8 * RTN_T);
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    float4 wv[NR], rw[RPB][2 * NP];
    hm_pdl_pre(f);   /* the norm's weights and the router rows do not depend on the o-projection */
#pragma unroll
    for (int r = 0; r < NR; r++) wv[r] = r < nr ? __ldg((const float4 *)w + t + r * RTN_T) : z;
    router_rows_load<RPB, NP>(R, nrows, n, t, np, rw);
    hm_pdl_wait_f(f);
    float4 v[NR];
    {
        /* every row's loads first, unconditional (rows past nr read the last one again and are
         * dropped): one round trip; loaded under `r < nr` the compiler put each row's loads next
         * to its sum, a round trip a row (HOTMOE_XEARLY's former bit 16) */
        float4 a[NR], b[NR];
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const int i = t + min(r, nr - 1) * RTN_T;
            a[r] = ((const float4 *)x)[i];
            b[r] = ((const float4 *)y)[i];
        }
#pragma unroll
        for (int r = 0; r < NR; r++) v[r] = r < nr ? f4_add(a[r], b[r]) : z;
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
        if (r >= nr) continue;
        const float ss = warp_sum(v[r].x * v[r].x + v[r].y * v[r].y + v[r].z * v[r].z + v[r].w * v[r].w);
        if (lane == 0) sw[r * (RTN_T / 32) + wid] = ss;   /* warp 8r + wid: float4s [32 (8r + wid), +32) */
    }
    __syncthreads();
    const int nvb = n / 128 / vw;   /* the norm's blocks (at most RTN_T / 32): warp b sums block b's warps, as its block_sum */
    if (wid < nvb) {
        const float bs = warp_sum(lane < vw ? sw[wid * vw + lane] : 0.f);
        if (lane == 0) sb[wid] = bs;
    }
    __syncthreads();
    float tot = 0.f;
    for (int b = 0; b < nvb; b++) tot += sb[b];
    const float inv = 1.0f / sqrtf(tot / (float)n + eps);
#pragma unroll
    for (int r = 0; r < NR; r++) {
        if (r >= nr) continue;
        const int i = t + r * RTN_T;
        const float4 ww = wv[r];
        const float4 o = make_float4(ww.x * (v[r].x * inv), ww.y * (v[r].y * inv), ww.z * (v[r].z * inv), ww.w * (v[r].w * inv));
        ((float4 *)sx)[i] = o;
        if (out && blockIdx.x == r) {   /* block r: the slice of round r */
            ((float4 *)out)[i] = o;
            q8_quant_f4(o, i, true, xq);
        }
    }
    __syncthreads();
    float acc[RPB];
    router_dots<RPB, NP>(rw, np, [&](int i) { return ((const float4 *)sx)[2 * (t + (i >> 1) * RTN_T) + (i & 1)]; }, acc);
#pragma unroll
    for (int k = 0; k < RPB; k++) {
        const float a = warp_sum(acc[k]);
        if (lane == 0) red[k][wid] = a;
    }
    __syncthreads();
    if (t < RPB && blockIdx.x * RPB + t < nrows) {
        float a = 0.f;
        for (int k = 0; k < RTN_T / 32; k++) a += red[t][k];
        logits[blockIdx.x * RPB + t] = a;
    }
    HM_KT_END();
}

/* warps a block of the residual norm residual_norm_launch runs for one row of n with the q8
 * records (what k_router_norm's sum of squares follows), 0 when k_router_norm cannot follow it */
static int router_norm_vw(int n) {
    if (n != 2048 && n != 4096) return 0;
    const rn_form form = rn_form_for(n, true);
    return form == RN_FORM_CL ? n / 4 / RN_CL / 32 : form == RN_FORM_ONE ? n / 4 / 32 : 0;
}

int op_router_norm_ok(int n, int nrows, int rpb, const float *w, const float *R) {
    return router_norm_vw(n) > 0 && (rpb == 1 || rpb == 2 || rpb == 4) && (nrows + rpb - 1) / rpb >= n / 1024 && nrows <= 1020 &&
           ((uintptr_t)w | (uintptr_t)R) % 16 == 0;
}

int op_router_norm_q8(const float *x, const float *y, const float *w, const float *R, float *logits, float *out, void *xq, int n,
                      int nrows, float eps, int early, int rpb, cudaStream_t s) {
    const int vw = router_norm_vw(n);
    if (!op_router_norm_ok(n, nrows, rpb, w, R) || !out != !xq || ((uintptr_t)x | (uintptr_t)y | (uintptr_t)out | (uintptr_t)xq) % 16)
        return -1;
    /* the next launch starts at this one's wait only when early (the router GEMV's rule, exec.cu's router_early) */
    const int f = (hm_small_pdl() & HM_PDL_PRE) | (early ? HM_PDL_TRIG : 0);
    const dim3 grid((nrows + rpb - 1) / rpb);
    if (rpb == 4) hm_launch(k_router_norm<4>, grid, RTN_T, 0, s, x, y, w, R, logits, out, (uint8_t *)xq, n, nrows, vw, eps, f);
    else if (rpb == 2) hm_launch(k_router_norm<2>, grid, RTN_T, 0, s, x, y, w, R, logits, out, (uint8_t *)xq, n, nrows, vw, eps, f);
    else hm_launch(k_router_norm<1>, grid, RTN_T, 0, s, x, y, w, R, logits, out, (uint8_t *)xq, n, nrows, vw, eps, f);
    return 0;
}

/* The router's logits of a batched step: logits[b * ls + r] = R[r] . x[b * n ..] for nb rows (up to
 * RTR_NB a launch), RPB router rows a block, each row's weights read once for every row of x;
 * each dot as gemv_kernel<TF32V, 1, 1> makes it for one row (k_router_norm's order: parts of 8
 * floats, part t and t + 256 for thread t, the warps' sums in order), so bitwise gpu_gemv's. */
#define RTR_NB 4
template <int RPB>
__global__ void __launch_bounds__(RTN_T) k_router_rows(const float *__restrict__ R, const float *__restrict__ x,
                                                       float *__restrict__ logits, int n, int nrows, long long ls, int nb, int f) {
    constexpr int NP = RTN_NMAX / 8 / RTN_T;
    __shared__ float red[RPB][RTR_NB][RTN_T / 32];
    const int t = threadIdx.x, lane = t & 31, wid = t >> 5, np = n / (8 * RTN_T);
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    float4 rw[RPB][2 * NP];
    hm_pdl_pre(f);   /* the router's rows do not depend on the kernel before */
    router_rows_load<RPB, NP>(R, nrows, n, t, np, rw);
    hm_pdl_wait_f(f);
#pragma unroll
    for (int b = 0; b < RTR_NB; b++) {
        if (b >= nb) break;
        float4 xv[2 * NP];
#pragma unroll
        for (int j = 0; j < NP; j++) {
            const int q = t + j * RTN_T;
            xv[2 * j] = j < np ? ((const float4 *)(x + (size_t)b * n))[2 * q] : z;
            xv[2 * j + 1] = j < np ? ((const float4 *)(x + (size_t)b * n))[2 * q + 1] : z;
        }
        float acc[RPB];
        router_dots<RPB, NP>(rw, np, [&](int i) { return xv[i]; }, acc);
#pragma unroll
        for (int k = 0; k < RPB; k++) {
            const float a = warp_sum(acc[k]);
            if (lane == 0) red[k][b][wid] = a;
        }
    }
    __syncthreads();
    if (t < RPB * nb) {
        const int k = t % RPB, b = t / RPB;
        if (blockIdx.x * RPB + k < nrows) {
            float a = 0.f;
            for (int w = 0; w < RTN_T / 32; w++) a += red[k][b][w];
            logits[(size_t)b * ls + blockIdx.x * RPB + k] = a;
        }
    }
}

int op_router_rows_gemv(const float *R, const float *x, float *logits, int n, int nrows, long long ls, int nb, cudaStream_t s) {
    if ((n != 2048 && n != 4096) || nrows < 1 || nb < 1 || ls < nrows || ((uintptr_t)R | (uintptr_t)x) % 16) return -1;
    for (int b0 = 0; b0 < nb; b0 += RTR_NB) {
        const int m = nb - b0 < RTR_NB ? nb - b0 : RTR_NB;
        hm_launch(k_router_rows<4>, dim3((nrows + 3) / 4), RTN_T, 0, s, R, x + (size_t)b0 * n, logits + (size_t)b0 * ls, n, nrows, ls, m,
                  hm_small_pdl());
    }
    return 0;
}

/* one block per head (q heads first, then kv heads); blockDim = hd rounded up to a warp */
__global__ void k_qkv_post(float *q, float *k, const float *v, const float *bq, const float *bk, const float *bv,
                           const float *qn, const float *kn, int n_head, int n_head_kv, int hd, int n_rot, float theta,
                           float eps, const int *pos_p, float *kcache, float *vcache, const int *seq_p, long long seq_stride,
                           long long qs, int f) {
    const int r = blockIdx.y;   /* a batched step: row r's q|k|v, position and sequence (its cache) */
    q += r * qs; k += r * qs; v += r * qs; pos_p += r;
    /* weights, and the position (copied in before the step's first kernel), before the wait */
    hm_pdl_pre(f);
    const int pos = *pos_p;
    const qkv_pre pr = qkv_post_prep(bq, bk, bv, qn, kn, n_head, hd, n_rot, theta, blockIdx.x, pos);
    hm_pdl_wait_f(f);
    const long long so = seq_p ? seq_p[r] * seq_stride : 0;
    qkv_post_head(q, k, v, bv, n_head, n_head_kv, hd, n_rot, eps, blockIdx.x, pos, kcache + so, vcache + so, pr);
}

void op_qkv_post_seq(float *q, float *k, const float *v, const float *bq, const float *bk, const float *bv,
                     const float *qn, const float *kn, int n_head, int n_head_kv, int hd, int n_rot, float theta,
                     float eps, const int *pos, float *kcache, float *vcache, const int *seq, long long seq_stride, int rows,
                     long long qs, cudaStream_t s) {
    hm_launch(k_qkv_post, dim3(n_head + n_head_kv, rows), (hd + 31) / 32 * 32, 0, s, q, k, v, bq, bk, bv, qn, kn, n_head, n_head_kv,
              hd, n_rot, theta, eps, pos, kcache, vcache, seq, seq_stride, qs, hm_small_pdl());
}

void op_qkv_post(float *q, float *k, const float *v, const float *bq, const float *bk, const float *bv,
                 const float *qn, const float *kn, int n_head, int n_head_kv, int hd, int n_rot, float theta,
                 float eps, const int *pos, float *kcache, float *vcache, cudaStream_t s) {
    op_qkv_post_seq(q, k, v, bq, bk, bv, qn, kn, n_head, n_head_kv, hd, n_rot, theta, eps, pos, kcache, vcache, NULL, 0, 1, 0, s);
}

/* Decode attention, split-K over positions with GQA sharing: block (kv head, split, head slab)
 * stages tiles of ATT_TP positions of K and V in shared memory once and serves all the q heads of
 * that kv head from them (up to ATT_MAXG per slab: 8 warps x 4 heads; k_attn_gqa_w takes 8, 12 or
 * 16 warps, attn_w_launch). The split count is fixed
 * per kv-head count (graph-capturable); each split takes a contiguous slice of [0, pos] of at least
 * ATT_MINPOS positions; the splits past the last non-empty one return at once, and a single
 * split writes the output itself. Scores: thread per (head, position), dot over hd from shared (K
 * rows padded by 4 floats: the float4 reads of 8 lanes fall on distinct banks). Online softmax per
 * warp-head: lanes own positions for the max/sum, dims (lane + 32r) for the output. Several
 * splits: each writes its partials (m, l, o[hd]) and k_attn_combine merges them. */
#define ATT_THREADS 256
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_HPW 4 /* q heads per warp */
#define ATT_MAXG (ATT_WARPS * ATT_HPW)
#define ATT_MINPOS 32

static int attn_nsplit(int n_head_kv) {
    int n = (264 + n_head_kv - 1) / n_head_kv; /* ~2 blocks per SM of an H100/H200 */
    return n < 1 ? 1 : n > 64 ? 64 : n;
}
static int attn_tp(int hd) { return hd <= 128 ? 32 : 16; }

size_t op_attn_part_floats(int n_head, int n_head_kv, int hd) {
    return (size_t)n_head * attn_nsplit(n_head_kv) * (hd + 2);
}

/* positions per split for n positions over nsplit splits; the splits that have positions are the
 * first ceil(n / len) (k_attn_gqa and k_attn_combine both derive them from pos) */
static __device__ __forceinline__ int attn_len(int n, int nsplit) { return max((n + nsplit - 1) / nsplit, ATT_MINPOS); }

/* K and V rows [tb, tb + nt) of kv head kvh (hd floats each, rows kvd floats apart in the cache)
 * into shared memory, K rows ks floats apart, V rows hd; 4 rows' loads in flight a thread */
template <int NT = ATT_THREADS>
static __device__ __forceinline__ void attn_load_tile(const float *__restrict__ kc, const float *__restrict__ vc, float *sk, float *sv,
                                                      int tb, int nt, int kvd, int kvh, int hd, int ks) {
    const int hd4 = hd / 4;
    for (int i0 = threadIdx.x; i0 < nt * hd4; i0 += 4 * NT) {
        float4 kv[4], vv[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = i0 + u * NT, t = i / hd4, c = i - t * hd4;
            const size_t g = (size_t)(tb + t) * kvd + (size_t)kvh * hd + 4 * c;
            if (i < nt * hd4) { kv[u] = *(const float4 *)(kc + g); vv[u] = *(const float4 *)(vc + g); }
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = i0 + u * NT, t = i / hd4, c = i - t * hd4;
            if (i < nt * hd4) { *(float4 *)(sk + t * ks + 4 * c) = kv[u]; *(float4 *)(sv + t * hd + 4 * c) = vv[u]; }
        }
    }
}

/* attn_load_tile's rows by cp.async, straight into shared memory (no registers held); the caller
 * waits on them (attn_cp_wait<0>) before a barrier (k_attn_gqa_w's CPA form) */
template <int NT>
static __device__ __forceinline__ void attn_cp_tile(const float *__restrict__ kc, const float *__restrict__ vc, float *sk, float *sv,
                                                    int tb, int nt, int kvd, int kvh, int hd, int ks) {
    const int hd4 = hd / 4;
    for (int i = threadIdx.x; i < nt * hd4; i += NT) {
        const int t = i / hd4, c = i - t * hd4;
        const size_t g = (size_t)(tb + t) * kvd + (size_t)kvh * hd + 4 * c;
        cp_async16(sk + t * ks + 4 * c, kc + g, true);
        cp_async16(sv + t * hd + 4 * c, vc + g, true);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
static __device__ __forceinline__ void attn_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/* one tile's online-softmax step for the head of a warp whose lane t holds position t's score s (in: t is in the tile;
 * s is then -INFINITY outside it): the running max m and sum l move on; returns lane t's probability (0 outside) and
 * sets *c, the factor for the output summed so far. Every decode attention kernel's, so their heads' values agree. */
static __device__ __forceinline__ float attn_online(float s, bool in, float &m, float &l, float *c) {
    float mt = s;
    for (int off = 16; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
    const float mn = fmaxf(m, mt);
    *c = expf(m - mn);
    const float pe = in ? expf(s - mn) : 0.f;
    l = l * *c + warp_sum(pe);
    m = mn;
    return pe;
}

/* a slab's q heads (n4 float4 from qg, consecutive) into shared memory: the score loops read them
 * from there (through L1 they missed and waited on L2 at every step) */
template <int NT = ATT_THREADS>
static __device__ __forceinline__ void attn_stage_q(const float *qg, float *sq, int n4) {
    for (int i = threadIdx.x; i < n4; i += NT) ((float4 *)sq)[i] = ((const float4 *)qg)[i];
}

__global__ void __launch_bounds__(ATT_THREADS) k_attn_gqa(const float *__restrict__ q, const float *__restrict__ kc,
                                                          const float *__restrict__ vc, float *__restrict__ out, float *part,
                                                          int n_head, int n_head_kv, int hd, int tp, const int *pos_p,
                                                          const int *seq_p, long long seq_stride, int nslab, long long qs,
                                                          long long os, long long ps) {
    hm_pdl_wait();
    const int row = blockIdx.z / nslab, slab = blockIdx.z - row * nslab;   /* a batched step: row's q, partials, position */
    q += row * qs; out += row * os; part += row * ps; pos_p += row;
    if (seq_p) { kc += seq_p[row] * seq_stride; vc += seq_p[row] * seq_stride; }   /* and its sequence's cache */
    extern __shared__ __align__(16) float att_sm[];
    const int kvh = blockIdx.x, sp = blockIdx.y, nsplit = gridDim.y;
    const int grp = n_head / n_head_kv, h0 = slab * ATT_MAXG, ng = min(ATT_MAXG, grp - h0);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, kvd = n_head_kv * hd, ks = hd + 4, per = (hd + 31) / 32;
    float *sk = att_sm, *sv = sk + tp * ks, *sc = sv + tp * hd, *sq = sc + ATT_MAXG * tp; /* [tp][hd+4], [tp][hd], [ATT_MAXG][tp], [ng][hd] */
    const int n = *pos_p + 1;
    const int len = attn_len(n, nsplit), ns = (n + len - 1) / len; /* splits with positions */
    if (sp >= ns) return;
    const int t0 = sp * len, t1 = min(t0 + len, n);
    const float scale = 1.0f / sqrtf((float)hd);
    attn_stage_q(q + (size_t)(kvh * grp + h0) * hd, sq, ng * hd / 4);   /* this slab's heads */
    float m[ATT_HPW], l[ATT_HPW], o[ATT_HPW][8];
#pragma unroll
    for (int j = 0; j < ATT_HPW; j++) {
        m[j] = -INFINITY; l[j] = 0.f;
#pragma unroll
        for (int r = 0; r < 8; r++) o[j][r] = 0.f;
    }
    for (int tb = t0; tb < t1; tb += tp) {
        const int nt = min(tp, t1 - tb);
        __syncthreads(); /* the previous tile is consumed */
        attn_load_tile(kc, vc, sk, sv, tb, nt, kvd, kvh, hd, ks);
        __syncthreads();
        for (int i = threadIdx.x; i < ng * tp; i += ATT_THREADS) {
            const int h = i / tp, t = i - h * tp;
            if (t >= nt) continue;
            const float *qh = sq + (size_t)h * hd, *kr = sk + t * ks;
            float d = 0.f;
#pragma unroll 8
            for (int c = 0; c < hd; c += 4) {
                const float4 a = *(const float4 *)(qh + c), b = *(const float4 *)(kr + c);
                d += a.x * b.x; d += a.y * b.y; d += a.z * b.z; d += a.w * b.w;
            }
            sc[h * tp + t] = d * scale;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < ATT_HPW; j++) {
            const int h = wid + ATT_WARPS * j;
            if (h >= ng) break; /* warp-uniform */
            const float s = lane < nt ? sc[h * tp + lane] : -INFINITY;
            float c;
            const float pe = attn_online(s, lane < nt, m[j], l[j], &c);
#pragma unroll
            for (int r = 0; r < 8; r++) o[j][r] *= c;
            for (int t = 0; t < nt; t++) {
                const float pt = __shfl_sync(0xffffffffu, pe, t);
                const float *vr = sv + t * hd;
#pragma unroll
                for (int r = 0; r < 8; r++)
                    if (r < per && lane + 32 * r < hd) o[j][r] += pt * vr[lane + 32 * r];
            }
        }
    }
#pragma unroll
    for (int j = 0; j < ATT_HPW; j++) {
        const int h = wid + ATT_WARPS * j;
        if (h >= ng) break;
        if (ns == 1) {   /* one split: the output */
            const float il = 1.0f / l[j];
#pragma unroll
            for (int r = 0; r < 8; r++)
                if (r < per && lane + 32 * r < hd) out[(size_t)(kvh * grp + h0 + h) * hd + lane + 32 * r] = o[j][r] * il;
            continue;
        }
        float *dst = part + ((size_t)(kvh * grp + h0 + h) * nsplit + sp) * (hd + 2);
        if (lane == 0) { dst[0] = m[j]; dst[1] = l[j]; }
#pragma unroll
        for (int r = 0; r < 8; r++)
            if (r < per && lane + 32 * r < hd) dst[2 + lane + 32 * r] = o[j][r];
    }
}

/* After the wait: the slab's q (n4 float4, attn_stage_q's) and, row set, the step's own K and V
 * row (position t of the cache, into skr and svr) are loaded before either is stored, a thread's
 * first float4 of q in a register (the rest, for groups past NT float4, as attn_stage_q; one a
 * thread takes all of air's 12 heads of 128 on 12 warps and a3b's 8 on 8). Loaded one after the
 * other (attn_load_tile's row, then attn_stage_q: HOTMOE_XEARLY's former bit 32), the row's loads,
 * their shared stores and only then q's loads made two L2 round trips in a row for warp 0 of the
 * split that holds the step's position (the compiler keeps a load behind shared stores); now one.
 * Same values. */
template <int NT>
static __device__ __forceinline__ void attn_stage_q_row(const float *qg, float *sq, int n4, bool row, const float *__restrict__ kc,
                                                        const float *__restrict__ vc, float *skr, float *svr, int t, int kvd, int kvh,
                                                        int hd) {
    const int hd4 = hd / 4;
    const bool rw = row && (int)threadIdx.x < hd4;
    const size_t g = (size_t)t * kvd + (size_t)kvh * hd + 4 * threadIdx.x;
    const bool q1 = (int)threadIdx.x < n4;
    float4 kr = make_float4(0.f, 0.f, 0.f, 0.f), vr = kr, qv = kr;
    if (rw) { kr = *(const float4 *)(kc + g); vr = *(const float4 *)(vc + g); }
    if (q1) qv = ((const float4 *)qg)[threadIdx.x];
    if (rw) { *(float4 *)(skr + 4 * threadIdx.x) = kr; *(float4 *)(svr + 4 * threadIdx.x) = vr; }
    if (q1) ((float4 *)sq)[threadIdx.x] = qv;
    for (int i = threadIdx.x + NT; i < n4; i += NT) ((float4 *)sq)[i] = ((const float4 *)qg)[i];
}

/* k_attn_gqa for head sizes 32 * DPL (64, 128, 256), with every step in registers: a warp takes
 * a q head, lane t scores position t of the tile against it (the K row read from shared memory,
 * two partial sums), the warp's online softmax needs no shared scores, and lane i accumulates
 * dims [DPL i, DPL i + DPL) of the output from float4 rows of V. Same blocks, splits and partials
 * as k_attn_gqa (k_attn_combine merges either); a warp runs about a fifth of the instructions. */
/* CPA (the long-context form, op_attn_long_from): a head a warp (the slab's heads fit the warps)
 * and the tiles by cp.async straight into shared memory, no registers held for them: air's
 * 384-thread blocks fit two a SM (the one-stage form's 99 registers, one), so the 264 blocks of
 * contexts past 16 x 32 positions run in one round instead of two. The same splits and sums, so
 * the same results bit for bit. (Two blocks a SM lose at shorter contexts: placed early on the SMs
 * the q|k|v launch frees first, they pack two to a SM; bench/README.md, forty-sixth pass.) */
template <int DPL, int NW, bool CPA = false>   /* DPL 2, 4 or 8; NW warps (a head each up to NW heads, ATT_MAXG a slab as k_attn_gqa) */
__global__ void __launch_bounds__(32 * NW, CPA ? 2 : 1) k_attn_gqa_w(const float *__restrict__ q, const float *__restrict__ kc,
                                                            const float *__restrict__ vc, float *__restrict__ out, float *part,
                                                            int n_head, int n_head_kv, const int *pos_p, const int *seq_p,
                                                            long long seq_stride, int nslab, long long qs, long long os, long long ps,
                                                            int f) {
    constexpr int HD = 32 * DPL, KS = HD + 4, TP = 32, HD4 = HD / 4, NT = 32 * NW, HPW = CPA ? 1 : (ATT_MAXG + NW - 1) / NW;
    hm_pdl_pre(f);
    const int row = blockIdx.z / nslab, slab = blockIdx.z - row * nslab;
    q += row * qs; out += row * os; part += row * ps; pos_p += row;
    if (seq_p) { kc += seq_p[row] * seq_stride; vc += seq_p[row] * seq_stride; }
    extern __shared__ __align__(16) float att_sm[];
    float *sk = att_sm, *sv = sk + TP * KS, *sq = sv + TP * HD; /* [TP][HD+4], [TP][HD], [ng][HD] */
    const int kvh = blockIdx.x, sp = blockIdx.y, nsplit = gridDim.y;
    const int grp = n_head / n_head_kv, h0 = slab * ATT_MAXG, ng = min(ATT_MAXG, grp - h0);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, kvd = n_head_kv * HD;
    /* before the wait: the position and sequence (copied in before the step's first kernel) and the
     * first tile's rows of earlier positions (written by earlier steps); after it, the row of this
     * step's position (the kernel before writes it) and q */
    const int n = *pos_p + 1;
    const int len = attn_len(n, nsplit), ns = (n + len - 1) / len;
    if (sp >= ns) return;
    const int t0 = sp * len, t1 = min(t0 + len, n);
    const int nt0 = min(TP, t1 - t0), npre = t0 + nt0 == n ? nt0 - 1 : nt0;
    if constexpr (CPA) attn_cp_tile<NT>(kc, vc, sk, sv, t0, npre, kvd, kvh, HD, KS);
    else attn_load_tile<NT>(kc, vc, sk, sv, t0, npre, kvd, kvh, HD, KS);
    hm_pdl_wait_f(f);
    static_assert(HD4 <= NT, "the row is one float4 of K and one of V a thread");
    attn_stage_q_row<NT>(q + (size_t)(kvh * grp + h0) * HD, sq, ng * HD4, npre < nt0, kc, vc, sk + npre * KS, sv + npre * HD, t0 + npre,
                         kvd, kvh, HD);
    const float scale = 1.0f / sqrtf((float)HD);
    float m[HPW], l[HPW], o[HPW][DPL];
#pragma unroll
    for (int j = 0; j < HPW; j++) {
        m[j] = -INFINITY; l[j] = 0.f;
#pragma unroll
        for (int d = 0; d < DPL; d++) o[j][d] = 0.f;
    }
    for (int tb = t0; tb < t1; tb += TP) {
        const int nt = min(TP, t1 - tb);
        if (tb != t0) {   /* the first tile is in */
            __syncthreads(); /* the previous tile is consumed */
            if constexpr (CPA) attn_cp_tile<NT>(kc, vc, sk, sv, tb, nt, kvd, kvh, HD, KS);
            else attn_load_tile<NT>(kc, vc, sk, sv, tb, nt, kvd, kvh, HD, KS);
        }
        if constexpr (CPA) attn_cp_wait<0>();
        __syncthreads(); /* the tile (and q) are in */
#pragma unroll
        for (int j = 0; j < HPW; j++) {
            const int h = wid + NW * j;
            if (h >= ng) break; /* warp-uniform */
            float s = -INFINITY;
            if (lane < nt) {
                const float4 *qh = (const float4 *)(sq + h * HD), *kr = (const float4 *)(sk + lane * KS);
                float d0 = 0.f, d1 = 0.f;
#pragma unroll
                for (int c = 0; c < HD4; c += 2) {
                    const float4 a = qh[c], b = kr[c], a2 = qh[c + 1], b2 = kr[c + 1];
                    d0 = fmaf(a.x, b.x, d0); d0 = fmaf(a.y, b.y, d0); d0 = fmaf(a.z, b.z, d0); d0 = fmaf(a.w, b.w, d0);
                    d1 = fmaf(a2.x, b2.x, d1); d1 = fmaf(a2.y, b2.y, d1); d1 = fmaf(a2.z, b2.z, d1); d1 = fmaf(a2.w, b2.w, d1);
                }
                s = (d0 + d1) * scale;
            }
            float c;
            const float pe = attn_online(s, lane < nt, m[j], l[j], &c);
#pragma unroll
            for (int d = 0; d < DPL; d++) o[j][d] *= c;
            for (int t = 0; t < nt; t++) {
                const float pt = __shfl_sync(0xffffffffu, pe, t);
                const float *vr = sv + t * HD + lane * DPL;
                if constexpr (DPL % 4 == 0) {
#pragma unroll
                    for (int d = 0; d < DPL; d += 4) {
                        const float4 v = *(const float4 *)(vr + d);
                        o[j][d] = fmaf(pt, v.x, o[j][d]); o[j][d + 1] = fmaf(pt, v.y, o[j][d + 1]);
                        o[j][d + 2] = fmaf(pt, v.z, o[j][d + 2]); o[j][d + 3] = fmaf(pt, v.w, o[j][d + 3]);
                    }
                } else {   /* hd 64: two dims a lane */
                    const float2 v = *(const float2 *)vr;
                    o[j][0] = fmaf(pt, v.x, o[j][0]); o[j][1] = fmaf(pt, v.y, o[j][1]);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < HPW; j++) {
        const int h = wid + NW * j;
        if (h >= ng) break;
        float *dst;
        float f = 1.f;
        if (ns == 1) { dst = out + (size_t)(kvh * grp + h0 + h) * HD; f = 1.0f / l[j]; }
        else {
            float *pp = part + ((size_t)(kvh * grp + h0 + h) * nsplit + sp) * (HD + 2);
            if (lane == 0) { pp[0] = m[j]; pp[1] = l[j]; }
            dst = pp + 2;
        }
#pragma unroll
        for (int d = 0; d < DPL; d++) dst[lane * DPL + d] = o[j][d] * f;
    }
    HM_KT_END();
}

/* A batched step's rows for k_attn_long and k_attn_quad (B): row blockIdx.z's q (+ row qs), output
 * (+ row os), partials (+ row ps), position (pos_p[row]) and, seq set, its sequence's caches (+
 * seq[row] seq_stride), as k_attn_gqa_w's; one-row steps (B false) compile without them. */
struct attn_rows {
    const int *seq;
    long long seq_stride, qs, os, ps;
};
template <bool B>
static __device__ __forceinline__ void attn_row(const float *__restrict__ &q, const float *__restrict__ &kc, const float *__restrict__ &vc,
                                                float *__restrict__ &out, float *&part, const int *&pos_p, const attn_rows &r) {
    if constexpr (B) {
        const int row = blockIdx.z;
        q += row * r.qs; out += row * r.os; part += row * r.ps; pos_p += row;
        if (r.seq) { kc += r.seq[row] * r.seq_stride; vc += r.seq[row] * r.seq_stride; }
    }
}

/* The long-context attention for hd 128 and G = 8 or 12 q heads a kv head (op_attn_long_from,
 * HOTMOE_ATT_LONG=2): one block a SM (attn_long_splits splits a kv head, several 32-position tiles
 * each), its tiles in two stages by cp.async (tile i + 1 in flight while tile i is summed; tiles 0
 * and 1 asked for before the wait, less the row of this step's position), and each K and V element
 * read from shared memory once per head quad instead of once per head: k_attn_gqa_w's G warps each
 * re-read the whole tile (~3,500 wavefronts a tile for 12 heads, the SM's shared memory busy ~1.8 us,
 * which bounds a split of many tiles). Warp (dq, quad) scores its quad's four heads on dims
 * [32 dq, 32 dq + 32) of K row (tile base + lane); warp h sums head h's four partial scores and runs
 * its online softmax; warp (dq, quad) then adds the quad's heads over V rows 8 dq .. 8 dq + 7
 * (dims 4 lane .. + 3); the four quarters' outputs are summed at the end. Partials as k_attn_gqa
 * (k_attn_combine merges them); other sums than k_attn_gqa_w's, so other bits (and other tokens
 * where greedy picks between near-equal logits). H100, air, 64-token runs (bench/README.md,
 * fifty-third pass): prompt 1,024 268.9 tok/s against the CPA form's 263.6 and the one-round
 * kernel's 251.8, 4,096 222.2 against 214.6 and 194.9; 128 + 512 284.8 against 284.0. Not the
 * default: a one-row step would then sum otherwise than the same row in a batched step (form 0). */
template <int G, bool B = false>
__global__ void __launch_bounds__(32 * G, 1) k_attn_long(const float *__restrict__ q, const float *__restrict__ kc,
                                                        const float *__restrict__ vc, float *__restrict__ out, float *part,
                                                        int n_head_kv, const int *pos_p, int f, attn_rows rw) {
    static_assert(G % 4 == 0, "head quads");
    constexpr int HD = 128, KS = HD + 4, TP = 32, NT = 32 * G;
    extern __shared__ __align__(16) float att_sm[];   /* attn_long_smem(G) bytes */
    float *sk = att_sm, *sv = sk + 2 * TP * KS, *sq = sv + 2 * TP * HD;   /* [2][TP][KS], [2][TP][HD], [G][HD] */
    float *ssc = sq + G * HD, *spr = ssc + 4 * G * TP, *scl = spr + G * TP;   /* [4][G][TP], [G][TP], [G] */
    float *so = att_sm;   /* [4][G][HD] after the last tile, over the stages */
    hm_pdl_pre(f);
    attn_row<B>(q, kc, vc, out, part, pos_p, rw);
    const int kvh = blockIdx.x, sp = blockIdx.y, nsplit = gridDim.y;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, dq = w & 3, g4 = (w >> 2) * 4, kvd = n_head_kv * HD;
    const int n = *pos_p + 1;
    const int len = attn_len(n, nsplit), ns = (n + len - 1) / len;
    if (sp >= ns) return;
    const int t0 = sp * len, t1 = min(t0 + len, n);
    for (int i = 0; i < 2 && t0 + i * TP < t1; i++) {   /* tiles 0 and 1 before the wait; row n - 1 is this step's */
        const int tb = t0 + i * TP, nt = min(TP, t1 - tb);
        attn_cp_tile<NT>(kc, vc, sk + i * TP * KS, sv + i * TP * HD, tb, tb + nt == n ? nt - 1 : nt, kvd, kvh, HD, KS);
    }
    hm_pdl_wait_f(f);
    {   /* q, and row n - 1 where it falls in tile 0 or 1 (a later tile loads it with the rest) */
        const int ow = n - 1 - t0, oi = ow / TP, at = (oi & 1) * TP + ow - oi * TP;
        attn_stage_q_row<NT>(q + (size_t)kvh * G * HD, sq, G * HD / 4, t1 == n && oi < 2, kc, vc, sk + at * KS, sv + at * HD, n - 1, kvd,
                             kvh, HD);
    }
    const float scale = 1.0f / sqrtf((float)HD);
    float m = -INFINITY, l = 0.f;   /* head w's */
    float4 acc[4];
#pragma unroll
    for (int h = 0; h < 4; h++) acc[h] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int tb = t0, it = 0; tb < t1; tb += TP, it++) {
        const int nt = min(TP, t1 - tb);
        if (tb + TP < t1) attn_cp_wait<1>();   /* the next tile stays in flight */
        else attn_cp_wait<0>();
        __syncthreads();   /* tile it (and q) in; the last tile's probabilities consumed */
        const float *K = sk + (it & 1) * TP * KS, *V = sv + (it & 1) * TP * HD;
        {
            float4 kr[8];
#pragma unroll
            for (int c = 0; c < 8; c++) kr[c] = lane < nt ? *(const float4 *)(K + lane * KS + 32 * dq + 4 * c) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int h = 0; h < 4; h++) {
                const float *qh = sq + (g4 + h) * HD + 32 * dq;
                float d0 = 0.f, d1 = 0.f;
#pragma unroll
                for (int c = 0; c < 8; c += 2) {
                    const float4 a = *(const float4 *)(qh + 4 * c), a2 = *(const float4 *)(qh + 4 * c + 4);
                    d0 = fmaf(a.x, kr[c].x, d0); d0 = fmaf(a.y, kr[c].y, d0); d0 = fmaf(a.z, kr[c].z, d0); d0 = fmaf(a.w, kr[c].w, d0);
                    d1 = fmaf(a2.x, kr[c + 1].x, d1); d1 = fmaf(a2.y, kr[c + 1].y, d1); d1 = fmaf(a2.z, kr[c + 1].z, d1);
                    d1 = fmaf(a2.w, kr[c + 1].w, d1);
                }
                ssc[(dq * G + g4 + h) * TP + lane] = d0 + d1;
            }
        }
        __syncthreads();
        {   /* warp w: head w */
            const float s = lane < nt ? (((ssc[w * TP + lane] + ssc[(G + w) * TP + lane]) + ssc[(2 * G + w) * TP + lane]) +
                                         ssc[(3 * G + w) * TP + lane]) * scale
                                      : -INFINITY;
            float c;
            const float pe = attn_online(s, lane < nt, m, l, &c);
            spr[w * TP + lane] = pe;
            if (lane == 0) scl[w] = c;
        }
        __syncthreads();
        {
            float4 vr[8];
#pragma unroll
            for (int j = 0; j < 8; j++) vr[j] = 8 * dq + j < nt ? *(const float4 *)(V + (8 * dq + j) * HD + 4 * lane) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int h = 0; h < 4; h++) {
                const float c = scl[g4 + h];
                const float4 p0 = *(const float4 *)(spr + (g4 + h) * TP + 8 * dq), p1 = *(const float4 *)(spr + (g4 + h) * TP + 8 * dq + 4);
                const float p[8] = { p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w };
                float4 a = acc[h];
                a.x *= c; a.y *= c; a.z *= c; a.w *= c;
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    a.x = fmaf(p[j], vr[j].x, a.x); a.y = fmaf(p[j], vr[j].y, a.y);
                    a.z = fmaf(p[j], vr[j].z, a.z); a.w = fmaf(p[j], vr[j].w, a.w);
                }
                acc[h] = a;
            }
        }
        if (tb + 2 * TP < t1) {   /* tile it + 2 into this stage, once every warp is done with it */
            __syncthreads();
            const int tb2 = tb + 2 * TP;
            attn_cp_tile<NT>(kc, vc, sk + (it & 1) * TP * KS, sv + (it & 1) * TP * HD, tb2, min(TP, t1 - tb2), kvd, kvh, HD, KS);
        }
    }
    __syncthreads();   /* every warp done with the stages: so lies over them */
#pragma unroll
    for (int h = 0; h < 4; h++) *(float4 *)(so + (dq * G + g4 + h) * HD + 4 * lane) = acc[h];
    __syncthreads();
    const float4 o0 = *(const float4 *)(so + w * HD + 4 * lane), o1 = *(const float4 *)(so + (G + w) * HD + 4 * lane);
    const float4 o2 = *(const float4 *)(so + (2 * G + w) * HD + 4 * lane), o3 = *(const float4 *)(so + (3 * G + w) * HD + 4 * lane);
    float4 o = make_float4(((o0.x + o1.x) + o2.x) + o3.x, ((o0.y + o1.y) + o2.y) + o3.y, ((o0.z + o1.z) + o2.z) + o3.z,
                           ((o0.w + o1.w) + o2.w) + o3.w);
    if (ns == 1) {
        const float il = 1.0f / l;
        o.x *= il; o.y *= il; o.z *= il; o.w *= il;
        *(float4 *)(out + (size_t)(kvh * G + w) * HD + 4 * lane) = o;
    } else {
        float *pp = part + ((size_t)(kvh * G + w) * nsplit + sp) * (HD + 2);
        if (lane == 0) { pp[0] = m; pp[1] = l; }
        float *d = pp + 2 + 4 * lane;   /* 8-byte aligned: (HD + 2) floats a partial */
        d[0] = o.x; d[1] = o.y; d[2] = o.z; d[3] = o.w;
    }
    HM_KT_END();
}
/* k_attn_long<G>'s shared memory: the two stages of K and V, q, the partial scores, probabilities
 * and rescales (its layout above) */
static size_t attn_long_smem(int G) { return sizeof(float) * ((size_t)2 * 32 * (132 + 128) + (size_t)G * 128 + (size_t)5 * G * 32 + G); }

/* The CPA form's arithmetic with each K and V element read from shared memory once per head quad
 * (HOTMOE_ATT_LONG=3; hd 128, G = 8 or 12 q heads a kv head; the same blocks, splits, tiles by
 * cp.async and two blocks a SM as k_attn_gqa_w<4, G, true>). k_attn_gqa_w's G warps each re-read
 * the whole tile for their head: past a few tiles a split the SM's shared memory bounds it
 * (k_attn_long). Here, a tile at a time:
 *   scores: thread (quad, t) of the first G * 8 threads makes position t's dots for the quad's four
 *           heads, each in k_attn_gqa_w's order (two chains over alternate float4s), one K row read;
 *   softmax: warp h, head h, lane t, as k_attn_gqa_w (the same max, exps and warp sum);
 *   P.V: warp (quad, dq), lane i: dim 32 dq + i of the quad's four heads, rescaled by c and summed
 *        over t with fmaf in t's order, as k_attn_gqa_w's lane for that dim.
 * So every value is k_attn_gqa_w's bit for bit (test_gpu_ops checks), with ~a third of the shared
 * memory wavefronts a tile (each K row read by one thread a quad; a V row by one warp a quad). */
template <int G, bool B = false>
__global__ void __launch_bounds__(32 * G, 2) k_attn_quad(const float *__restrict__ q, const float *__restrict__ kc,
                                                        const float *__restrict__ vc, float *__restrict__ out, float *part,
                                                        int n_head_kv, const int *pos_p, int f, attn_rows rw) {
    static_assert(G % 4 == 0, "head quads");
    constexpr int HD = 128, KS = HD + 4, TP = 32, HD4 = HD / 4, NT = 32 * G;
    extern __shared__ __align__(16) float att_sm[];   /* attn_quad_smem(G) bytes */
    float *sk = att_sm, *sv = sk + TP * KS, *sq = sv + TP * HD;   /* [TP][KS], [TP][HD], [G][HD] */
    float *ssc = sq + G * HD, *spr = ssc + G * TP, *scl = spr + TP * G, *sml = scl + G;   /* [G][TP], [TP][G], [G], [2][G] */
    hm_pdl_pre(f);
    attn_row<B>(q, kc, vc, out, part, pos_p, rw);
    const int kvh = blockIdx.x, sp = blockIdx.y, nsplit = gridDim.y;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, kvd = n_head_kv * HD;
    const int n = *pos_p + 1;
    const int len = attn_len(n, nsplit), ns = (n + len - 1) / len;
    if (sp >= ns) return;
    const int t0 = sp * len, t1 = min(t0 + len, n);
    const int nt0 = min(TP, t1 - t0), npre = t0 + nt0 == n ? nt0 - 1 : nt0;
    attn_cp_tile<NT>(kc, vc, sk, sv, t0, npre, kvd, kvh, HD, KS);
    hm_pdl_wait_f(f);
    attn_stage_q_row<NT>(q + (size_t)kvh * G * HD, sq, G * HD4, npre < nt0, kc, vc, sk + npre * KS, sv + npre * HD, t0 + npre, kvd, kvh,
                         HD);
    const float scale = 1.0f / sqrtf((float)HD);
    float m = -INFINITY, l = 0.f;   /* head w's (warp w < G) */
    const int pq = w >> 2, dq = w & 3;   /* P.V: warp w takes quad pq's heads at dims [32 dq, 32 dq + 32) */
    float o[4] = { 0.f, 0.f, 0.f, 0.f };
    for (int tb = t0; tb < t1; tb += TP) {
        const int nt = min(TP, t1 - tb);
        if (tb != t0) {
            __syncthreads();   /* the previous tile is consumed */
            attn_cp_tile<NT>(kc, vc, sk, sv, tb, nt, kvd, kvh, HD, KS);
        }
        attn_cp_wait<0>();
        __syncthreads();   /* the tile (and q) are in */
        if (threadIdx.x < G * 8) {   /* scores: quad threadIdx.x / 32, position lane */
            const int g4 = 4 * (threadIdx.x >> 5);
            if (lane < nt) {
                const float4 *kr = (const float4 *)(sk + lane * KS);
                float d0[4] = { 0.f, 0.f, 0.f, 0.f }, d1[4] = { 0.f, 0.f, 0.f, 0.f };
#pragma unroll 1
                for (int c = 0; c < HD4; c += 2) {
                    const float4 b = kr[c], b2 = kr[c + 1];
#pragma unroll
                    for (int h = 0; h < 4; h++) {
                        const float4 *qh = (const float4 *)(sq + (g4 + h) * HD);
                        const float4 a = qh[c], a2 = qh[c + 1];
                        d0[h] = fmaf(a.x, b.x, d0[h]); d0[h] = fmaf(a.y, b.y, d0[h]); d0[h] = fmaf(a.z, b.z, d0[h]); d0[h] = fmaf(a.w, b.w, d0[h]);
                        d1[h] = fmaf(a2.x, b2.x, d1[h]); d1[h] = fmaf(a2.y, b2.y, d1[h]); d1[h] = fmaf(a2.z, b2.z, d1[h]);
                        d1[h] = fmaf(a2.w, b2.w, d1[h]);
                    }
                }
#pragma unroll
                for (int h = 0; h < 4; h++) ssc[(g4 + h) * TP + lane] = (d0[h] + d1[h]) * scale;
            }
        }
        __syncthreads();
        {   /* warp w: head w's online softmax, as k_attn_gqa_w's */
            const float s = lane < nt ? ssc[w * TP + lane] : -INFINITY;
            float c;
            const float pe = attn_online(s, lane < nt, m, l, &c);
            spr[lane * G + w] = pe;
            if (lane == 0) scl[w] = c;
        }
        __syncthreads();
        {
            const float4 c4 = *(const float4 *)(scl + 4 * pq);
            o[0] *= c4.x; o[1] *= c4.y; o[2] *= c4.z; o[3] *= c4.w;
            const float *vd = sv + 32 * dq + lane;
            for (int t = 0; t < nt; t++) {
                const float v = vd[t * HD];
                const float4 p4 = *(const float4 *)(spr + t * G + 4 * pq);
                o[0] = fmaf(p4.x, v, o[0]); o[1] = fmaf(p4.y, v, o[1]); o[2] = fmaf(p4.z, v, o[2]); o[3] = fmaf(p4.w, v, o[3]);
            }
        }
    }
    if (lane == 0) { sml[w] = m; sml[G + w] = l; }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 4; h++) {
        const int hh = 4 * pq + h, d = 32 * dq + lane;
        if (ns == 1) out[(size_t)(kvh * G + hh) * HD + d] = o[h] * (1.0f / sml[G + hh]);
        else {
            float *pp = part + ((size_t)(kvh * G + hh) * nsplit + sp) * (HD + 2);
            if (dq == 0 && lane == 0) { pp[0] = sml[hh]; pp[1] = sml[G + hh]; }
            pp[2 + d] = o[h];
        }
    }
    HM_KT_END();
}
/* k_attn_quad<G>'s shared memory: a K and a V tile, q, the scores, probabilities, rescales, m and l */
static size_t attn_quad_smem(int G) { return sizeof(float) * ((size_t)32 * (132 + 128) + (size_t)G * 128 + (size_t)2 * G * 32 + 3 * G); }

/* op_l2_warm: word i of the spans (u16 words each, s16 apart) by a grid-stride loop, eight loads in
 * flight a thread; an xor of every word is kept so that no load is dropped (the store never happens:
 * only one value would make it) */
__global__ void __launch_bounds__(256) k_l2_warm(const uint4 *__restrict__ p, size_t n16, size_t u16, size_t s16, unsigned *sink) {
    constexpr int U = 8;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    auto at = [&](size_t i) { return p + i / u16 * s16 + i % u16; };
    unsigned acc = 0;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n16; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = __ldg(at(i + u * stride));
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) { const uint4 v = __ldg(at(i)); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
    if (acc == 0x9E3779B9u && sink) *sink = acc;
}

void op_l2_warm(const void *p, size_t count, size_t unit, size_t stride, cudaStream_t s) {
    unit &= ~(size_t)15;
    if (!count || !unit) return;
    k_l2_warm<<<gpu_sm_count(), 256, 0, s>>>((const uint4 *)p, count * (unit / 16), unit / 16, count > 1 ? stride / 16 : unit / 16, nullptr);
}

#define CB_PRE 32 /* splits whose values a merge thread loads before the weights are known */
/* One block per q head (and row): the splits' weights exp(m_s - M) / L once (warp 0, lanes over
 * the splits, nsplit <= 64), then a thread per dim sums o_s[d] times them. Nothing to do when one
 * split took every position (k_attn_gqa wrote the output). */
/* R: a batched step's rows each with their records, row r's at xq + r * xqs */
template <bool R = false>
__global__ void k_attn_combine(const float *__restrict__ part, float *__restrict__ out, int hd, int n_split, const int *pos_p,
                               long long ps, long long os, uint8_t *__restrict__ xq, int f, long long xqs) {
    const int h = blockIdx.x, row = blockIdx.y;
    if constexpr (R) xq += row * xqs;
    hm_pdl_pre(f);   /* the position is copied in before the step's first kernel */
    const int n = pos_p[row] + 1, len = attn_len(n, n_split), ns = (n + len - 1) / len;
    hm_pdl_wait_f(f);
    if (ns == 1) {   /* the attention kernel wrote the output: only its records are left to make */
        if (xq && threadIdx.x < hd) q8_quant_lane(out[row * os + (size_t)h * hd + threadIdx.x], h * hd + threadIdx.x, xq);
        HM_KT_END();
        return;
    }
    __shared__ float cw[64];
    const int hw = hd + 2, lane = threadIdx.x & 31, d = threadIdx.x;   /* blockDim >= hd: one dim a thread */
    const float *p = part + row * ps + (size_t)h * n_split * hw;
    out += row * os;
    /* the first CB_PRE splits' values of this dim are loaded before the weights are made (their
     * loads overlap); summed in split order as the rest */
    float pv[CB_PRE];
#pragma unroll
    for (int s = 0; s < CB_PRE; s++) pv[s] = s < ns && d < hd ? p[(size_t)s * hw + 2 + d] : 0.f;
    if (threadIdx.x < 32) {
        const float m0 = lane < ns ? p[(size_t)lane * hw] : -INFINITY, m1 = lane + 32 < ns ? p[(size_t)(lane + 32) * hw] : -INFINITY;
        const float l0 = lane < ns ? p[(size_t)lane * hw + 1] : 0.f, l1 = lane + 32 < ns ? p[(size_t)(lane + 32) * hw + 1] : 0.f;
        float M = fmaxf(m0, m1);
        for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
        const float c0 = lane < ns ? expf(m0 - M) : 0.f, c1 = lane + 32 < ns ? expf(m1 - M) : 0.f;
        const float L = warp_sum(fmaf(l0, c0, l1 * c1));
        cw[lane] = c0 / L;
        cw[lane + 32] = c1 / L;
    }
    __syncthreads();
    if (d < hd) {
        float O = 0.f;
#pragma unroll
        for (int s = 0; s < CB_PRE; s++)
            if (s < ns) O = fmaf(cw[s], pv[s], O);
        for (int s = CB_PRE; s < ns; s++) O = fmaf(cw[s], p[(size_t)s * hw + 2 + d], O);
        out[(size_t)h * hd + d] = O;
        if (xq) q8_quant_lane(O, h * hd + d, xq);   /* whole warps per 32-group: hd % 32 == 0, blockDim == hd */
    }
    HM_KT_END();
}

template <int DPL, int NW, bool CPA>
static void attn_w_go(dim3 grid, size_t smem, cudaStream_t s, const float *q, const float *kc, const float *vc, float *out,
                      float *part, int n_head, int n_head_kv, const int *pos, const int *seq, long long seq_stride, int nslab,
                      long long qs, long long os, long long ps) {
    static std::atomic<unsigned long long> raised(0);
    hm_allow_smem(k_attn_gqa_w<DPL, NW, CPA>, smem, 0, raised);   /* past the opt-in, the launch fails and the step reports it */
    hm_launch(k_attn_gqa_w<DPL, NW, CPA>, grid, 32 * NW, smem, s, q, kc, vc, out, part, n_head, n_head_kv, pos, seq, seq_stride, nslab,
              qs, os, ps, hm_small_pdl());
}

/* warps a block: 12 for groups of 9 to 12 q heads (air's 12: no warp takes two heads one after
 * the other), 16 for hd 64 past 8 heads (12 would spill), else 8; HOTMOE_ATT_WARPS=0: always 8.
 * Each head's work is the same code whichever warp runs it (bitwise the same results). 16 warps
 * for hd 128/256 past 12 heads is left for a measurement (the device ran the tests above only).
 * f (the callee's argument) is std::integral_constant of the warps. */
template <int DPL, class F>
static void attn_w_warps(int grp, F f) {
    static std::atomic<int> c(-1);
    const int on = hm_env_digit("HOTMOE_ATT_WARPS", 0, 1, 1, c);
    if constexpr (DPL == 2) {
        if (on && grp > 8) f(std::integral_constant<int, 16>());
        else f(std::integral_constant<int, 8>());
    } else {
        if (on && grp > 8 && grp <= 12) f(std::integral_constant<int, 12>());
        else f(std::integral_constant<int, 8>());
    }
}

/* the register kernel, one-stage or (cpa, when the slab's heads fit the warps) its CPA form */
template <int DPL>
static void attn_w_launch(bool cpa, dim3 grid, size_t smem, cudaStream_t s, const float *q, const float *kc, const float *vc, float *out,
                          float *part, int n_head, int n_head_kv, const int *pos, const int *seq, long long seq_stride, int nslab,
                          long long qs, long long os, long long ps) {
    const int grp = n_head / n_head_kv;
    attn_w_warps<DPL>(grp, [&](auto nw) {
        constexpr int NW = decltype(nw)::value;
        if (cpa && grp <= NW)
            attn_w_go<DPL, NW, true>(grid, smem, s, q, kc, vc, out, part, n_head, n_head_kv, pos, seq, seq_stride, nslab, qs, os, ps);
        else
            attn_w_go<DPL, NW, false>(grid, smem, s, q, kc, vc, out, part, n_head, n_head_kv, pos, seq, seq_stride, nslab, qs, os, ps);
    });
}

static size_t attn_w_smem(int hd, int grp) {   /* a K and a V tile of 32 positions (K rows padded by 4 floats), the slab's q */
    return sizeof(float) * ((size_t)32 * (2 * hd + 4) + (size_t)min(grp, ATT_MAXG) * hd);
}

/* ops.cuh. The one-stage form runs one block a SM for air (12 heads a kv head on 12 warps, 99
 * registers), so past 16 splits of 32 positions (8 kv heads x 16 = 128 blocks on 132 SMs) its
 * blocks take two rounds, and past 33 x 32 positions every block runs its tiles one after the
 * other; the CPA form runs the same 264 blocks two a SM. H100, air, 64-token runs (bench/README.md,
 * fifty-third pass): prompt 1,024 266.4 tok/s against 254.1, 2,048 246.5 against 234.8, 4,096 216.2
 * against 195.6, the same tokens; 128 + 512 the same 287.0. k_attn_quad (the same values, a third of
 * the shared memory reads; fifty-fourth pass, H100, against the CPA form in one call): 1,024 264.8
 * against 262.5-263.5, 4,096 220.5-220.8 against 214.2, the same tokens. HOTMOE_ATT_LONG: 3 (the
 * default) k_attn_quad where it applies, else the CPA form; 1 the CPA form; 2 k_attn_long where it
 * applies (other sums), else the CPA form; 0 neither (the one-round kernel always). */
static int attn_long_mode(void) {
    static std::atomic<int> c(-1);
    return hm_env_digit("HOTMOE_ATT_LONG", 0, 3, 3, c);
}
static bool attn_long_fits(int n_head, int n_head_kv, int hd) {   /* k_attn_long's shapes */
    return hd == 128 && n_head_kv > 0 && (n_head == 8 * n_head_kv || n_head == 12 * n_head_kv);
}
static int attn_long_splits(int n_head_kv) {   /* k_attn_long's: one block a SM, at most attn_nsplit's (the partials' room) */
    const int n = gpu_sm_count() / n_head_kv, cap = attn_nsplit(n_head_kv);
    return n < 1 ? 1 : n > cap ? cap : n;
}

int op_attn_long_from(int n_head, int n_head_kv, int hd) {
    const int mode = attn_long_mode();
    if (!mode || (hd != 64 && hd != 128 && hd != 256) || n_head_kv < 1 || n_head % n_head_kv) return 0;
    const int grp = n_head / n_head_kv, nslab = (grp + ATT_MAXG - 1) / ATT_MAXG;
    const bool lk = mode == 2 && attn_long_fits(n_head, n_head_kv, hd);
    const size_t smem = attn_w_smem(hd, grp);
    int from = 0;
    auto f = [&](auto dpl) {
        constexpr int DPL = decltype(dpl)::value;
        attn_w_warps<DPL>(grp, [&](auto nw) {
            constexpr int NW = decltype(nw)::value;
            if (grp > NW && !lk) return;   /* a warp takes several heads: no CPA form */
            int one = 0, two = 0;
            static std::atomic<unsigned long long> r1(0), r2(0);
            hm_allow_smem(k_attn_gqa_w<DPL, NW, false>, smem, 0, r1);
            hm_allow_smem(k_attn_gqa_w<DPL, NW, true>, smem, 0, r2);
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&one, k_attn_gqa_w<DPL, NW, false>, 32 * NW, smem) != cudaSuccess ||
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&two, k_attn_gqa_w<DPL, NW, true>, 32 * NW, smem) != cudaSuccess) {
                cudaGetLastError();
                return;
            }
            const int wave = one * gpu_sm_count() / (n_head_kv * nslab);   /* splits of the one-stage form in one round */
            if (lk) from = min(wave, attn_nsplit(n_head_kv)) * 32 + 1;   /* past one round, or past a tile a split */
            else if (two > one && wave < attn_nsplit(n_head_kv)) from = wave * 32 + 1;
        });
    };
    if (hd == 64) f(std::integral_constant<int, 2>());
    else if (hd == 128) f(std::integral_constant<int, 4>());
    else f(std::integral_constant<int, 8>());
    return from;
}

static void attn_launch(const float *q, const float *kcache, const float *vcache, float *out, float *part, int n_head,
                        int n_head_kv, int hd, int n_ctx, const int *pos, const int *seq, long long seq_stride, int rows,
                        long long qs, long long os, long long ps, uint8_t *xq, cudaStream_t s, bool merge = true, int form = 0,
                        long long xqs = 0) {
    (void)n_ctx;
    int nsplit = attn_nsplit(n_head_kv);
    const int tp = attn_tp(hd), grp = n_head / n_head_kv;
    const int nslab = (grp + ATT_MAXG - 1) / ATT_MAXG;
    const dim3 grid(n_head_kv, nsplit, nslab * rows);
    /* the long form asked for: form 1 HOTMOE_ATT_LONG's (2 k_attn_long, 3 k_attn_quad, else the CPA form), else form itself
     * (ops.cuh); k_attn_long and k_attn_quad where they apply, else the CPA form */
    const int lf = form == 1 ? (attn_long_mode() >= 2 ? attn_long_mode() : 4) : form;
    const bool lfit = attn_long_fits(n_head, n_head_kv, hd);
    if ((lf == 2 || lf == 3) && lfit) {   /* k_attn_long or k_attn_quad (the same arguments; 8 or 12 q heads a kv head) */
        if (lf == 2) nsplit = attn_long_splits(n_head_kv);
        const attn_rows rw = { seq, seq_stride, qs, os, ps };
        auto go = [&](auto g) {
            constexpr int G = decltype(g)::value;
            auto run = [&](auto b) {   /* B: a batched step's rows (blockIdx.z) */
                constexpr bool B = decltype(b)::value;
                const auto k = lf == 2 ? k_attn_long<G, B> : k_attn_quad<G, B>;
                const size_t sm = lf == 2 ? attn_long_smem(G) : attn_quad_smem(G);
                static std::atomic<unsigned long long> raised[2];
                hm_allow_smem(k, sm, 0, raised[lf - 2]);
                hm_launch(k, dim3(n_head_kv, nsplit, rows), 32 * G, sm, s, q, kcache, vcache, out, part, n_head_kv, pos, hm_small_pdl(),
                          rw);
            };
            if (rows > 1 || seq) run(std::true_type());
            else run(std::false_type());
        };
        if (grp == 8) go(std::integral_constant<int, 8>());
        else go(std::integral_constant<int, 12>());
    } else if (hd == 64 || hd == 128 || hd == 256) {   /* the register kernel: tiles of 32 positions, q in shared memory */
        const size_t smem = attn_w_smem(hd, grp);
        const bool cpa = form != 0;
        if (hd == 64) attn_w_launch<2>(cpa, grid, smem, s, q, kcache, vcache, out, part, n_head, n_head_kv, pos, seq, seq_stride, nslab, qs, os, ps);
        else if (hd == 128) attn_w_launch<4>(cpa, grid, smem, s, q, kcache, vcache, out, part, n_head, n_head_kv, pos, seq, seq_stride, nslab, qs, os, ps);
        else attn_w_launch<8>(cpa, grid, smem, s, q, kcache, vcache, out, part, n_head, n_head_kv, pos, seq, seq_stride, nslab, qs, os, ps);
    } else {
        const size_t smem = sizeof(float) * ((size_t)tp * (hd + 4) + (size_t)tp * hd + (size_t)ATT_MAXG * tp + (size_t)min(grp, ATT_MAXG) * hd);
        static std::atomic<unsigned long long> raised(0);
        hm_allow_smem(k_attn_gqa, smem, 0, raised);
        hm_launch(k_attn_gqa, grid, ATT_THREADS, smem, s, q, kcache, vcache, out, part, n_head, n_head_kv, hd, tp, pos, seq, seq_stride,
                  nslab, qs, os, ps);
    }
    if (!merge) return;   /* HOTMOE_DIAG_SKIP=merge (exec.cu): the partials only */
    /* x's q8 records for the o-projection (each row's at xq + r * xqs): in the merge when each head is
     * whole 32-groups */
    const bool fused = xq && hd % 32 == 0 && (size_t)n_head * hd % Q8_CHUNK == 0 && n_head * hd <= Q8_MAX_NCOLS &&
                       ((uintptr_t)xq | (uintptr_t)(rows > 1 ? xqs : 0)) % 16 == 0;
    if (rows > 1 && fused)
        hm_launch(k_attn_combine<true>, dim3(n_head, rows), (hd + 31) / 32 * 32, 0, s, part, out, hd, nsplit, pos, ps, os, xq,
                  hm_small_pdl(), xqs);
    else
        hm_launch(k_attn_combine<false>, dim3(n_head, rows), (hd + 31) / 32 * 32, 0, s, part, out, hd, nsplit, pos, ps, os,
                  fused ? xq : nullptr, hm_small_pdl(), 0LL);   /* whole warps */
    if (xq && !fused) q8_records_rows(out, os, n_head * hd, rows, xq, xqs, s);
}

void op_attn_decode(const float *q, const float *kcache, const float *vcache, float *out, float *part, int n_head,
                    int n_head_kv, int hd, int n_ctx, const int *pos, cudaStream_t s, int form) {
    attn_launch(q, kcache, vcache, out, part, n_head, n_head_kv, hd, n_ctx, pos, NULL, 0, 1, 0, 0, 0, NULL, s, true, form);
}

void op_attn_decode_q8(const float *q, const float *kcache, const float *vcache, float *out, void *xq, float *part, int n_head,
                       int n_head_kv, int hd, int n_ctx, const int *pos, cudaStream_t s, int merge, int form) {
    attn_launch(q, kcache, vcache, out, part, n_head, n_head_kv, hd, n_ctx, pos, NULL, 0, 1, 0, 0, 0, (uint8_t *)xq, s, merge != 0, form);
}

void op_attn_decode_seq(const float *q, const float *kcache, const float *vcache, float *out, float *part, int n_head,
                        int n_head_kv, int hd, int n_ctx, const int *pos, const int *seq, long long seq_stride, int rows,
                        long long qs, long long os, long long ps, cudaStream_t s, int form, void *xq, long long xqs) {
    attn_launch(q, kcache, vcache, out, part, n_head, n_head_kv, hd, n_ctx, pos, seq, seq_stride, rows, qs, os, ps, (uint8_t *)xq, s, true,
                form, xqs);
}

/* NMAX: the most experts (ROUTER_SMALL: arrays of that size, the bias read into shared memory
 * before the wait; ROUTER_MAX: the bias read where it is used) */
#define ROUTER_SMALL 256
template <int NMAX>
__global__ void k_router(const float *logits, const float *bias, int n, int k, int fn, int norm, float scale,
                         int n_group, int topk_group, int *ids, float *w, int ws, int f) {
    constexpr bool SMALL = NMAX <= ROUTER_SMALL;
    __shared__ float sb[SMALL ? NMAX : 1];   /* each thread reads back the entries it wrote (router_topk's stride) */
    hm_pdl_pre(f);
    if (SMALL && bias)
        for (int i = threadIdx.x; i < n; i += blockDim.x) sb[i] = __ldg(bias + i);
    hm_pdl_wait_f(f);
    logits += (size_t)blockIdx.x * n; ids += blockIdx.x * k; w += blockIdx.x * ws;   /* row blockIdx.x of a batched step */
    router_topk<NMAX>(logits, SMALL && bias ? sb : bias, n, k, fn, norm, scale, n_group, topk_group, ids, w);
}

/* HOTMOE_TOPK4=0: the top-k with one thread an expert (router_topk counts each rank alone) */
static int topk4(void) {
    static std::atomic<int> c(-1);
    return hm_env_digit("HOTMOE_TOPK4", 0, 1, 1, c);
}

void op_router_rows(const float *logits, const float *bias, int n, int k, int fn, int norm, float scale, int n_group,
                    int topk_group, int *ids, float *w, int ws, int rows, cudaStream_t s) {
    if (n <= ROUTER_SMALL)
        hm_launch(k_router<ROUTER_SMALL>, rows, topk4() ? router_threads4(n) : router_threads(n), 0, s, logits, bias, n, k, fn, norm, scale, n_group, topk_group, ids, w, ws, hm_small_pdl());
    else
        hm_launch(k_router<ROUTER_MAX>, rows, router_threads(n), 0, s, logits, bias, n, k, fn, norm, scale, n_group, topk_group, ids, w, ws, hm_small_pdl());
}

void op_router(const float *logits, const float *bias, int n, int k, int fn, int norm, float scale, int n_group,
               int topk_group, int *ids, float *w, cudaStream_t s) {
    op_router_rows(logits, bias, n, k, fn, norm, scale, n_group, topk_group, ids, w, 0, 1, s);
}

/* ---- the greedy choice on the GPU ----
 * Each block scans a strided share of its row (float4 loads when the row allows) keeping the
 * first index of its largest value (strict >, so NaNs never win), the block's threads combine
 * (value, index) pairs (larger value, then lower index), and the last block of a row to finish
 * (a counter per row, reset by that block for the next launch) combines the blocks' pairs. The
 * result is sampler_argmax's: the first index of the largest value; 0 when x[0] is NaN or no
 * value is larger than -inf. */
#define AM_THREADS 256
__device__ __forceinline__ void am_take(float v, int i, float &bv, int &bi) {
    if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; }
}
__device__ __forceinline__ void am_block(float &bv, int &bi) {
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int si[AM_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) am_take(__shfl_xor_sync(0xFFFFFFFFu, bv, o), __shfl_xor_sync(0xFFFFFFFFu, bi, o), bv, bi);
    const int w = threadIdx.x >> 5;
    __syncthreads();   /* a second call reuses the arrays */
    if ((threadIdx.x & 31) == 0) { sv[w] = bv; si[w] = bi; }
    __syncthreads();
    bv = sv[0]; bi = si[0];
    for (int k = 1; k < AM_THREADS / 32; k++) am_take(sv[k], si[k], bv, bi);
}
/* RING (the greedy chain, gpu_exec_greedy_chain): the token also into ring[*ring_n % ring_len] (pinned host
 * memory the host reads after the step), *ring_n counting the steps */
template <bool RING>
static __device__ __forceinline__ void argmax_body(const float *x, int n, float *pv, int *pi, unsigned *cnt, int *out, int f, int *ring,
                                                   unsigned *ring_n, int ring_len) {
    hm_pdl_pre(f);
    hm_pdl_wait_f(f);
    const int r = blockIdx.y, nb = gridDim.x;
    x += (size_t)r * n;
    float bv = -INFINITY;
    int bi = n;   /* nothing yet */
    const int t0 = blockIdx.x * AM_THREADS + threadIdx.x, step = nb * AM_THREADS;
    if ((n & 3) == 0 && ((uintptr_t)x & 15) == 0) {
        const float4 *x4 = (const float4 *)x;
        for (int i = t0; i < n / 4; i += step) {   /* a thread's indices rise: strict > keeps the first */
            const float4 v = __ldcs(x4 + i);
            if (v.x > bv) { bv = v.x; bi = 4 * i; }
            if (v.y > bv) { bv = v.y; bi = 4 * i + 1; }
            if (v.z > bv) { bv = v.z; bi = 4 * i + 2; }
            if (v.w > bv) { bv = v.w; bi = 4 * i + 3; }
        }
    } else {
        for (int i = t0; i < n; i += step) {
            const float v = x[i];
            if (v > bv) { bv = v; bi = i; }
        }
    }
    am_block(bv, bi);
    __shared__ bool last;
    if (threadIdx.x == 0) {
        pv[r * nb + blockIdx.x] = bv; pi[r * nb + blockIdx.x] = bi;
        __threadfence();
        last = atomicAdd(cnt + r, 1u) == (unsigned)nb - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    bv = -INFINITY; bi = n;
    for (int b = threadIdx.x; b < nb; b += AM_THREADS) am_take(__ldcg(pv + r * nb + b), __ldcg(pi + r * nb + b), bv, bi);
    am_block(bv, bi);
    if (threadIdx.x == 0) {
        const int tk = isnan(x[0]) || bi >= n ? 0 : bi;
        out[r] = tk;
        cnt[r] = 0;   /* for the next launch (the graph replays this one) */
        if (RING) {
            const unsigned j = *ring_n;
            ring[j % (unsigned)ring_len] = tk;
            *ring_n = j + 1;
        }
    }
}
__global__ void __launch_bounds__(AM_THREADS) k_argmax(const float *x, int n, float *pv, int *pi, unsigned *cnt, int *out, int f) {
    argmax_body<false>(x, n, pv, pi, cnt, out, f, NULL, NULL, 0);
}
__global__ void __launch_bounds__(AM_THREADS) k_argmax_ring(const float *x, int n, float *pv, int *pi, unsigned *cnt, int *out, int f,
                                                            int *ring, unsigned *ring_n, int ring_len) {
    argmax_body<true>(x, n, pv, pi, cnt, out, f, ring, ring_n, ring_len);
}

/* scratch: the rows' counters first, at fixed places whatever rows a launch has (a launch with
 * more rows writes its partial results past them), then the blocks' values and indices */
size_t op_argmax_scratch_bytes(int rows) { return AM_MAXROWS * sizeof(unsigned) + (size_t)rows * AM_BLOCKS * (sizeof(float) + sizeof(int)); }

void op_argmax_rows(const float *x, int n, int rows, int *out, void *scratch, cudaStream_t s, int *ring, unsigned *ring_n, int ring_len) {
    unsigned *cnt = (unsigned *)scratch;
    float *pv = (float *)(cnt + AM_MAXROWS);
    int *pi = (int *)(pv + (size_t)rows * AM_BLOCKS);
    if (ring && rows == 1)
        hm_launch(k_argmax_ring, dim3(AM_BLOCKS, rows), AM_THREADS, 0, s, x, n, pv, pi, cnt, out, hm_small_pdl(), ring, ring_n, ring_len);
    else
        hm_launch(k_argmax, dim3(AM_BLOCKS, rows), AM_THREADS, 0, s, x, n, pv, pi, cnt, out, hm_small_pdl());
}
