/* gemv_q8.cu - the second decode GEMV path for the block types (gpu_gemv_set_mode(1)): x is
 * quantized to int8 per 32 values, weights are decoded to int8 lanes and multiplied with __dp4a
 * (gemv_q8.cuh has the formats, the rounding and the per-type math).
 *
 * Shape of the work. A thread block (256 threads) first issues the loads of its first weight
 * chunks, then quantizes all of x (ncols <= 32768) into shared memory, so every row it handles
 * reads activations from there (no x traffic per row, no scratch buffer, graph-capturable).
 * Lanes form groups of L = min(32, next power of two >= ncols/256); a group owns one dot product
 * (a row, or for SwiGLU the gate or the up half of a row, side by side), lane i of it takes chunks
 * i, i+L, ... of the row, one chunk of 256 elements in registers at a time (136..272 bytes in
 * flight per lane, 16-byte loads where the type's block sizes allow). Sums: per lane in chunk
 * order, then a shuffle butterfly inside the group, then one thread per row combines (SwiGLU) and
 * writes: a fixed order, so results are bitwise reproducible and independent of the grid size.
 * The grid is at most ~4 blocks per SM (times the k expert slots on blockIdx.y); blocks stride
 * over tiles of rows, prefetching their next tile's first chunk before the block barrier. */
#include <atomic>
#include <stdint.h>
#include <stdlib.h>
#include "gpu_gemv.h"
#include "gpu_check.h"
#include "gemv_q8.cuh"
extern "C" {
#include "quant_blocks.h"
}

int gemv_fail(const char *fmt, ...); /* gemv.cu: records the reason, returns -1 */

#define Q8_THREADS 256

/* the chunk decoders agree with the CPU's block layouts */
static_assert(Q8W_Q4_0::CB == 8 * sizeof(hm_block_q4_0) && Q8W_Q4_1::CB == 8 * sizeof(hm_block_q4_1), "q4");
static_assert(Q8W_Q5_0::CB == 8 * sizeof(hm_block_q5_0) && Q8W_Q5_1::CB == 8 * sizeof(hm_block_q5_1), "q5");
static_assert(Q8W_Q8_0::CB == 8 * sizeof(hm_block_q8_0) && Q8W_MXFP4::CB == 8 * sizeof(hm_block_mxfp4), "q8 mxfp4");
static_assert(Q8W_Q2_K::CB == sizeof(hm_block_q2_K) && Q8W_Q3_K::CB == sizeof(hm_block_q3_K), "q2 q3");
static_assert(Q8W_Q4_K::CB == sizeof(hm_block_q4_K) && Q8W_Q5_K::CB == sizeof(hm_block_q5_K), "q4k q5k");
static_assert(Q8W_Q6_K::CB == sizeof(hm_block_q6_K) && Q8W_IQ4_XS::CB == sizeof(hm_block_iq4_xs), "q6k iq4xs");
static_assert(Q8_CHUNK == 8 * HM_QK && Q8_CHUNK == HM_QK_K, "chunk");
static_assert(Q8_MAX_NCOLS / Q8_CHUNK * Q8_REC + 2 * Q8_THREADS * sizeof(float) <= 48 * 1024, "shared memory");

struct q8_params {
    const uint8_t *w;                      /* the matrix, when tab0 is NULL */
    const void *const *tab0, *const *tab1; /* device tables of expert matrices (tab1: up) */
    const int *ids;                        /* device [k] */
    const float *x;                        /* (k or 1, ncols), row stride x_stride */
    int64_t x_stride;
    float *y;                              /* (k, nrows), row stride y_stride */
    int64_t y_stride;
    int ncols, nrows;
    int lshift;                            /* lanes per dot product: 1 << lshift */
    int ntiles;                            /* tiles of rows per expert slot */
};

/* x[0..ncols) -> the chunk records at xs (gemv_q8.cuh). Eight lanes per 32-group, four values
 * each; the float operations are q8_quant32's (max is exact in any order, sums are integers), so
 * the records equal what q8_quant32 makes. ncols / 4 is a multiple of 64: warps run whole. */
__device__ __forceinline__ void q8_quantize_x(const float *x, int ncols, uint8_t *xs) {
    for (int i = threadIdx.x; i < ncols / 4; i += blockDim.x) {
        const float4 f = __ldg((const float4 *)(x + 4 * i));
        float amax = fmaxf(fmaxf(fabsf(f.x), fabsf(f.y)), fmaxf(fabsf(f.z), fabsf(f.w)));
#pragma unroll
        for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
        const bool nz = amax >= 0x1p-100f;
        const float id = nz ? q8_div(127.f, amax) : 0.f;
        const int q0 = nz ? q8_rint(q8_mul(f.x, id)) : 0, q1 = nz ? q8_rint(q8_mul(f.y, id)) : 0;
        const int q2 = nz ? q8_rint(q8_mul(f.z, id)) : 0, q3 = nz ? q8_rint(q8_mul(f.w, id)) : 0;
        int s = (q0 + q1) + (q2 + q3);
        s += __shfl_xor_sync(0xFFFFFFFFu, s, 1);
        s += __shfl_xor_sync(0xFFFFFFFFu, s, 2); /* the sum over this lane's 16-half */
        const int s1 = __shfl_down_sync(0xFFFFFFFFu, s, 4);
        const int b = i >> 3, l = i & 7;
        uint8_t *rec = xs + (b >> 3) * Q8_REC;
        *(uint32_t *)(rec + 32 * (b & 7) + 4 * l) =
            (uint32_t)(q0 & 0xFF) | (uint32_t)(q1 & 0xFF) << 8 | (uint32_t)(q2 & 0xFF) << 16 | (uint32_t)(q3 & 0xFF) << 24;
        if (l == 0)
            *(uint2 *)(rec + 256 + 8 * (b & 7)) =
                make_uint2(__float_as_uint(nz ? q8_div(amax, 127.f) : 0.f), ((uint32_t)s & 0xFFFFu) | (uint32_t)s1 << 16);
    }
}

/* NMAT = 1: y = W x; NMAT = 2: y = silu(gate x) * (up x). blockIdx.y: the expert slot. */
template <class T, int NMAT>
__global__ void __launch_bounds__(Q8_THREADS, 2) gemv_q8_kernel(const q8_params p) {
    extern __shared__ __align__(16) uint8_t xs[]; /* (ncols / 256) * Q8_REC */
    __shared__ float red[2][Q8_THREADS];          /* per dot product, double-buffered by tile */
    constexpr int NW = q8_nw(T::CB, T::A);
    const int e = blockIdx.y;
    const uint8_t *w0 = p.w, *w1 = nullptr;
    if (p.tab0) {
        const int id = p.ids[e];
        w0 = (const uint8_t *)p.tab0[id];
        if (NMAT == 2) w1 = (const uint8_t *)p.tab1[id];
    }
    const int nch = p.ncols / Q8_CHUNK;
    const size_t rs = (size_t)nch * T::CB;
    const int L = 1 << p.lshift, grp = threadIdx.x >> p.lshift, li = threadIdx.x & (L - 1);
    const int rpt = (Q8_THREADS >> p.lshift) / NMAT;        /* rows per tile */
    const int trow = NMAT == 2 ? grp >> 1 : grp;              /* this group's row in a tile */
    const uint8_t *wm = (NMAT == 2 && (grp & 1)) ? w1 : w0;  /* gate (even groups) or up (odd) */

    uint32_t w[NW];
    int tile = blockIdx.x, row = tile * rpt + trow;
    if (tile < p.ntiles && row < p.nrows && li < nch) q8_load_chunk<T::CB, T::A>(wm + (size_t)row * rs + (size_t)li * T::CB, w);
    q8_quantize_x(p.x + e * p.x_stride, p.ncols, xs);
    __syncthreads();

    for (int it = 0; tile < p.ntiles; it++) { /* uniform across the block */
        const bool ok = row < p.nrows;
        float acc = 0.f;
        for (int c = li; c < nch; c += L) {
            if (c != li && ok) q8_load_chunk<T::CB, T::A>(wm + (size_t)row * rs + (size_t)c * T::CB, w);
            if (ok) acc += T::dot(w, xs + c * Q8_REC);
        }
        for (int o = L >> 1; o > 0; o >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
        float *rd = red[it & 1];
        if (li == 0) rd[grp] = acc;
        const int next = tile + gridDim.x, nrow = next * rpt + trow;
        if (next < p.ntiles && nrow < p.nrows && li < nch) q8_load_chunk<T::CB, T::A>(wm + (size_t)nrow * rs + (size_t)li * T::CB, w);
        __syncthreads();
        const int i = threadIdx.x, r = tile * rpt + i;
        if (i < rpt && r < p.nrows) {
            if (NMAT == 2) {
                const float a = rd[2 * i], b = rd[2 * i + 1];
                p.y[e * p.y_stride + r] = a / (1.f + expf(-a)) * b;
            } else {
                p.y[e * p.y_stride + r] = rd[i];
            }
        }
        tile = next;
        row = nrow;
    }
}

static int q8_sm_count(void) {
    static std::atomic<int> cache[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) dev = 0;
    const int slot = dev < 64 ? dev : 63;
    int n = cache[slot].load(std::memory_order_relaxed);
    if (n <= 0) {
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
        cache[slot].store(n, std::memory_order_relaxed);
    }
    return n;
}

template <class T>
static int q8_launch(q8_params p, int k, int nmat, cudaStream_t s) {
    const int nch = p.ncols / Q8_CHUNK;
    int lshift = 0;
    while ((1 << lshift) < nch && lshift < 5) lshift++;
    p.lshift = lshift;
    const int rpt = (Q8_THREADS >> lshift) / nmat;
    p.ntiles = (p.nrows + rpt - 1) / rpt;
    int gx = (4 * q8_sm_count() + k - 1) / k;
    if (gx > p.ntiles) gx = p.ntiles;
    if (gx < 1) gx = 1;
    const dim3 grid((unsigned)gx, (unsigned)k);
    const size_t smem = (size_t)nch * Q8_REC;
    if (nmat == 2) gemv_q8_kernel<T, 2><<<grid, Q8_THREADS, smem, s>>>(p);
    else gemv_q8_kernel<T, 1><<<grid, Q8_THREADS, smem, s>>>(p);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return gemv_fail("gemv_q8: launch of %dx%d blocks failed: %s", gx, k, cudaGetErrorString(err));
    return 0;
}

typedef int (*q8_fn)(q8_params, int k, int nmat, cudaStream_t);
struct q8_type {
    int type;
    q8_fn run;
};

static const q8_type k_q8_types[] = {
    { HM_TYPE_Q4_0, q8_launch<Q8W_Q4_0> },   { HM_TYPE_Q4_1, q8_launch<Q8W_Q4_1> },
    { HM_TYPE_Q5_0, q8_launch<Q8W_Q5_0> },   { HM_TYPE_Q5_1, q8_launch<Q8W_Q5_1> },
    { HM_TYPE_Q8_0, q8_launch<Q8W_Q8_0> },   { HM_TYPE_MXFP4, q8_launch<Q8W_MXFP4> },
    { HM_TYPE_Q2_K, q8_launch<Q8W_Q2_K> },   { HM_TYPE_Q3_K, q8_launch<Q8W_Q3_K> },
    { HM_TYPE_Q4_K, q8_launch<Q8W_Q4_K> },   { HM_TYPE_Q5_K, q8_launch<Q8W_Q5_K> },
    { HM_TYPE_Q6_K, q8_launch<Q8W_Q6_K> },   { HM_TYPE_IQ4_XS, q8_launch<Q8W_IQ4_XS> },
};

int gemv_q8_try(int type, const void *w, const void *const *tab0, const void *const *tab1, const int *ids, int k,
                const float *x, int64_t x_stride, float *y, int64_t y_stride, int ncols, int nrows, int nmat, void *stream) {
    const q8_type *t = NULL;
    for (size_t i = 0; i < sizeof k_q8_types / sizeof k_q8_types[0]; i++)
        if (k_q8_types[i].type == type) t = &k_q8_types[i];
    if (!t || ncols <= 0 || ncols % Q8_CHUNK || ncols > Q8_MAX_NCOLS) return 1;
    /* x rows must stay 16-byte aligned for the float4 loads: x is, and x_stride is 0 or ncols */
    if (x_stride % 4) return 1;
    const q8_params p = { (const uint8_t *)w, tab0, tab1, ids, x, x_stride, y, y_stride, ncols, nrows, 0, 0 };
    return t->run(p, k, nmat, (cudaStream_t)stream);
}

static std::atomic<int> g_mode(-1);

int gemv_q8_mode(void) {
    int m = g_mode.load(std::memory_order_relaxed);
    if (m < 0) {
        const char *env = getenv("HOTMOE_GEMV_MODE");
        m = env && atoi(env) == 1 ? 1 : 0;
        g_mode.store(m, std::memory_order_relaxed);
    }
    return m;
}

extern "C" int gpu_gemv_set_mode(int mode) {
    if (mode != 0 && mode != 1) return gemv_fail("gpu_gemv_set_mode: mode %d: expected 0 (F32 activations) or 1 (q8 + dp4a)", mode);
    g_mode.store(mode, std::memory_order_relaxed);
    return 0;
}
