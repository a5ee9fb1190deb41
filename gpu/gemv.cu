/* gemv.cu - quantized GEMV for decode: one matrix (gpu_gemv) or k experts picked through a
 * device pointer table (gpu_gemv_experts, gpu_gemv_experts_swiglu), every type of the quant table.
 *
 * Shape of the work: a thread block owns GEMV_NR dot products (4 rows of one matrix, or 2 rows of
 * gate and the same 2 of up) and its 32..256 threads stride over the row's parts (qdev.cuh), so
 * each x value loaded from L1 serves 4 weight rows; weights are decoded in registers, summed in
 * F32, reduced by warp shuffles then across warps in a fixed order (deterministic). blockIdx.y is
 * the expert slot; its matrix comes from the table at run time, never from base + e*stride. */
#include <stdarg.h>
#include <stdint.h>
#include "gpu_gemv.h"
#include "gpu_check.h"
#include "qdev.cuh"
#include "qdev_k.cuh"
#include "gemv_q8.cuh"
#include "launch.cuh"
extern "C" {
#include "quant_blocks.h"
}

/* the device decoders agree with the CPU's block layouts */
static_assert(TQ4_0::BS == sizeof(hm_block_q4_0) && TQ4_0::QK == HM_QK, "q4_0");
static_assert(TQ4_1::BS == sizeof(hm_block_q4_1), "q4_1");
static_assert(TQ5_0::BS == sizeof(hm_block_q5_0), "q5_0");
static_assert(TQ5_1::BS == sizeof(hm_block_q5_1), "q5_1");
static_assert(TQ8_0::BS == sizeof(hm_block_q8_0), "q8_0");
static_assert(TMXFP4::BS == sizeof(hm_block_mxfp4), "mxfp4");
static_assert(TQ2_K::BS == sizeof(hm_block_q2_K) && TQ2_K::QK == HM_QK_K, "q2_K");
static_assert(TQ3_K::BS == sizeof(hm_block_q3_K), "q3_K");
static_assert(TQ4_K::BS == sizeof(hm_block_q4_K), "q4_K");
static_assert(TQ5_K::BS == sizeof(hm_block_q5_K), "q5_K");
static_assert(TQ6_K::BS == sizeof(hm_block_q6_K), "q6_K");
static_assert(TIQ4_XS::BS == sizeof(hm_block_iq4_xs), "iq4_xs");

static thread_local char g_err[256];

/* Records why a call failed (shared with dequant.cu); returns -1. */
int gemv_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return -1;
}

extern "C" const char *gpu_gemv_error(void) { return g_err; }

#define GEMV_NR 4             /* dot products per thread block */
#define GEMV_MAX_THREADS 256

struct gemv_params {
    const uint8_t *w;                      /* the matrix, when tab0 is NULL */
    const void *const *tab0, *const *tab1; /* device tables of expert matrices (tab1: up) */
    const int *ids;                        /* device [k] */
    const float *x;                        /* (k or 1, ncols), row stride x_stride */
    int64_t x_stride;
    float *y;                              /* (k, nrows), row stride y_stride */
    int64_t y_stride;
    int ncols, nrows;
    int xg;                                /* slot e reads x + (e / xg) * x_stride (0 or 1: e) */
    int yg;                                /* > 1: slot e writes y + (e / yg) * ygs + (e % yg) * y_stride */
    int64_t ygs;
    int trig;                              /* let the next kernel launch right after the wait (gpu_gemv_router's early) */
};

/* NMAT = 1: y = W x over NR rows per block; NMAT = 2: y = silu(gate x) * (up x) over NR/2 rows
 * per block. NR is GEMV_NR, or NMAT when there are too few rows to fill the GPU (a router). */
template <class T, int NMAT, int NR>
__global__ void __launch_bounds__(GEMV_MAX_THREADS) gemv_kernel(const gemv_params p) {
    constexpr int ROWS = NR / NMAT;
    hm_pdl_wait();
    if (p.trig) hm_pdl_trigger();
    const int e = blockIdx.y;
    const uint8_t *w0 = p.w, *w1 = nullptr;
    if (p.tab0) {
        const int id = p.ids[e];
        if (id < 0) return;   /* a skipped slot: its output is left as it is (another launch writes it) */
        w0 = (const uint8_t *)p.tab0[id];
        if (NMAT == 2) w1 = (const uint8_t *)p.tab1[id];
    }
    const float *x = p.x + (p.xg > 1 ? e / p.xg : e) * p.x_stride;
    const int nb = p.ncols / T::QK, nparts = nb * T::NT;
    const size_t rs = (size_t)nb * T::BS;
    const int r0 = blockIdx.x * ROWS;
    const uint8_t *rows[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) { /* past the last row: recompute the last row, write nothing */
        const int r = min(r0 + i % ROWS, p.nrows - 1);
        rows[i] = (NMAT == 2 && i >= ROWS ? w1 : w0) + (size_t)r * rs;
    }
    float acc[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) acc[i] = 0.f;
#pragma unroll 2
    for (int q = threadIdx.x; q < nparts; q += blockDim.x) {
        const int ib = q / T::NT;
        T::template dot<NR>(rows, ib, q % T::NT, x + (size_t)ib * T::QK, acc);
    }

    __shared__ float red[NR][GEMV_MAX_THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < NR; i++) {
        float v = acc[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
        if (lane == 0) red[i][warp] = v;
    }
    __syncthreads();
    const int i = threadIdx.x;
    if (i < ROWS && r0 + i < p.nrows) {
        const int nw = blockDim.x >> 5;
        float a = 0.f, b = 0.f;
        for (int w = 0; w < nw; w++) {
            a += red[i][w];
            if (NMAT == 2) b += red[ROWS + i][w];
        }
        p.y[(p.yg > 1 ? (e / p.yg) * p.ygs + (e % p.yg) * p.y_stride : e * p.y_stride) + r0 + i] = NMAT == 2 ? a / (1.f + expf(-a)) * b : a;
    }
    HM_KT_END();
}

template <class T>
static int gemv_launch(const gemv_params &p, int k, int nmat, cudaStream_t s) {
    const int nparts = p.ncols / T::QK * T::NT;
    int threads = (nparts + 31) / 32 * 32;
    threads = threads < 32 ? 32 : threads > GEMV_MAX_THREADS ? GEMV_MAX_THREADS : threads;
    /* one output per block when blocks of GEMV_NR would leave most SMs idle */
    const bool few = (long)(p.nrows * nmat + GEMV_NR - 1) / GEMV_NR * k < 256;
    const int rows = (few ? nmat : GEMV_NR) / nmat;
    const dim3 grid((unsigned)((p.nrows + rows - 1) / rows), (unsigned)k);
    if (nmat == 2) {
        if (few) hm_launch(gemv_kernel<T, 2, 2>, grid, threads, 0, s, p);
        else hm_launch(gemv_kernel<T, 2, GEMV_NR>, grid, threads, 0, s, p);
    } else {
        if (few) hm_launch(gemv_kernel<T, 1, 1>, grid, threads, 0, s, p);
        else hm_launch(gemv_kernel<T, 1, GEMV_NR>, grid, threads, 0, s, p);
    }
    CUDA_CHECK_LAUNCH();
    return 0;
}

/* float types: 16-byte vectors when every row and x slice starts 16-byte aligned, else scalars */
template <class TV, class TS>
static int gemv_launch_float(const gemv_params &p, int k, int nmat, cudaStream_t s) {
    if (p.ncols % TV::QK == 0) return gemv_launch<TV>(p, k, nmat, s);
    return gemv_launch<TS>(p, k, nmat, s);
}

typedef int (*gemv_fn)(const gemv_params &, int k, int nmat, cudaStream_t);
struct gemv_type {
    int type;
    const char *name;
    int blck;
    gemv_fn run;
};

static const gemv_type k_types[] = {
    { HM_TYPE_F32,     "F32",    1,        gemv_launch_float<TF32V, TF32S> },
    { HM_TYPE_F16,     "F16",    1,        gemv_launch_float<THalfV<false>, THalfS<false>> },
    { HM_TYPE_BF16,    "BF16",   1,        gemv_launch_float<THalfV<true>, THalfS<true>> },
    { HM_TYPE_Q4_0,    "Q4_0",   HM_QK,    gemv_launch<TQ4_0> },
    { HM_TYPE_Q4_1,    "Q4_1",   HM_QK,    gemv_launch<TQ4_1> },
    { HM_TYPE_Q5_0,    "Q5_0",   HM_QK,    gemv_launch<TQ5_0> },
    { HM_TYPE_Q5_1,    "Q5_1",   HM_QK,    gemv_launch<TQ5_1> },
    { HM_TYPE_Q8_0,    "Q8_0",   HM_QK,    gemv_launch<TQ8_0> },
    { HM_TYPE_MXFP4,   "MXFP4",  HM_QK,    gemv_launch<TMXFP4> },
    { HM_TYPE_Q2_K,    "Q2_K",   HM_QK_K,  gemv_launch<TQ2_K> },
    { HM_TYPE_Q3_K,    "Q3_K",   HM_QK_K,  gemv_launch<TQ3_K> },
    { HM_TYPE_Q4_K,    "Q4_K",   HM_QK_K,  gemv_launch<TQ4_K> },
    { HM_TYPE_Q5_K,    "Q5_K",   HM_QK_K,  gemv_launch<TQ5_K> },
    { HM_TYPE_Q6_K,    "Q6_K",   HM_QK_K,  gemv_launch<TQ6_K> },
    { HM_TYPE_IQ4_XS,  "IQ4_XS", HM_QK_K,  gemv_launch<TIQ4_XS> },
};

static const gemv_type *gemv_find(int type) {
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (k_types[i].type == type) return &k_types[i];
    return NULL;
}

extern "C" int gpu_gemv_supported(int type) { return gemv_find(type) != NULL; }

/* The checks every entry point shares; *out gets the type's row. */
static int gemv_check(const char *fn, int type, const float *x, int ncols, int nrows, int k, const gemv_type **out) {
    const gemv_type *t = gemv_find(type);
    if (!t) return gemv_fail("%s: ggml type %d has no GPU kernel", fn, type);
    if (ncols <= 0 || ncols % t->blck)
        return gemv_fail("%s: ncols %d must be a positive multiple of %s's block of %d", fn, ncols, t->name, t->blck);
    if (nrows < 0 || k < 0 || k > 65535) return gemv_fail("%s: nrows %d, k %d: expected nrows >= 0, 0 <= k <= 65535", fn, nrows, k);
    if ((uintptr_t)x % 16) return gemv_fail("%s: x at %p is not 16-byte aligned", fn, (const void *)x);
    *out = t;
    return 0;
}

static int gemv_q8x(int type, const void *W, const float *x, const void *xq, float *y, int ncols, int nrows, int early, void *stream) {
    const gemv_type *t;
    if (gemv_check("gpu_gemv", type, x, ncols, nrows, 1, &t)) return -1;
    if ((uintptr_t)W % 16) return gemv_fail("gpu_gemv: W at %p is not 16-byte aligned", W);
    if ((uintptr_t)xq % 16) return gemv_fail("gpu_gemv_q8x: records at %p are not 16-byte aligned", xq);
    if (nrows == 0) return 0;
    if (gemv_q8_mode()) { /* q8 + dp4a when it handles (type, ncols); else on to the F32 path */
        const int rc = gemv_q8_try(type, W, NULL, NULL, NULL, 1, x, 0, y, 0, ncols, nrows, 1, stream, 1, 1, 0, 1, xq);
        if (rc <= 0) return rc;
    }
    if (gpu_q8_inter_lshift(W) >= 0) return gemv_fail("gpu_gemv: an interleaved matrix needs the q8 path (made in mode 0, an executor keeps GGUF rows)");
    const gemv_params p = { (const uint8_t *)W, NULL, NULL, NULL, x, 0, y, 0, ncols, nrows, 1, 1, 0, early ? 1 : 0 };
    return t->run(p, 1, 1, (cudaStream_t)stream);
}

extern "C" int gpu_gemv_q8x(int type, const void *W, const float *x, const void *xq, float *y, int ncols, int nrows, void *stream) {
    return gemv_q8x(type, W, x, xq, y, ncols, nrows, 0, stream);
}

/* the rows gpu_gemv_q8x_post splits and the mode it needs (else it answers 1: not taken) */
static int post_rows_ok(int nrows, int rows0) { return nrows > 0 && rows0 >= 0 && rows0 <= nrows && gemv_q8_mode(); }

extern "C" int gpu_gemv_q8x_post(int type, const void *W, const float *x, const void *xq, int ncols, int nrows, const float *b0,
                                 const float *b1, float *d0, float *d1, int rows0, int hd, int n_rot, float theta, int kvd,
                                 const int *pos, void *stream) {
    const gemv_type *t;
    if (gemv_check("gpu_gemv_q8x_post", type, x, ncols, nrows, 1, &t)) return -1;
    if ((uintptr_t)W % 16 || (uintptr_t)xq % 16) return gemv_fail("gpu_gemv_q8x_post: W or records not 16-byte aligned");
    if (!post_rows_ok(nrows, rows0)) return 1;
    const int rc = gemv_q8_try_post(type, W, x, xq, ncols, nrows, b0, b1, d0, d1, rows0, hd, n_rot, theta, kvd, pos, stream);
    return rc > 0 ? 1 : rc;
}

extern "C" int gpu_gemv_q8x_post_ok(int type, const void *W, int ncols, int nrows, int rows0, int hd, int n_rot) {
    return gemv_find(type) && post_rows_ok(nrows, rows0) &&
           gemv_q8_try_post(type, W, NULL, NULL, ncols, nrows, NULL, NULL, NULL, NULL, rows0, hd, n_rot, 0.f, 0, NULL, NULL, 1) == 0;
}

extern "C" int gpu_gemv_router(int type, const void *W, const float *x, const void *xq, float *y, int ncols, int nrows, int early,
                               void *stream) {
    return gemv_q8x(type, W, x, xq, y, ncols, nrows, early, stream);
}

extern "C" int gpu_gemv(int type, const void *W, const float *x, float *y, int ncols, int nrows, void *stream) {
    return gpu_gemv_q8x(type, W, x, NULL, y, ncols, nrows, stream);
}

/* gpu_gemv_batch(_q8x), gpu_gemv_swiglu_rows and gpu_gemv_expert_rows (gpu_gemv.h): groups of up to
 * 4 vectors through the q8 path's batched kernel (on W, or on one slot's tables: tab1 set, SwiGLU
 * over tab0 and tab1), with the vectors' records when xq is given; what it does not take, one vector
 * at a time as the one-token step runs it */
static int batch_common(const char *fn, int type, const void *W, const void *const *tab0, const void *const *tab1, const int *id,
                        const float *x, int64_t x_stride, const void *xq, int64_t xq_stride, int nb, float *y, int64_t y_stride,
                        int ncols, int nrows, void *stream) {
    const gemv_type *t;
    if (gemv_check(fn, type, x, ncols, nrows, 1, &t)) return -1;
    if (tab0 ? !id : (uintptr_t)W % 16) return gemv_fail("%s: W at %p not 16-byte aligned, or a table without an id", fn, W);
    if (xq && ((uintptr_t)xq | (uintptr_t)xq_stride) % 16)
        return gemv_fail("%s: records at %p (stride %lld) not 16-byte aligned", fn, xq, (long long)xq_stride);
    if (nb < 1 || x_stride % 4 || x_stride < ncols || y_stride < nrows)
        return gemv_fail("%s: nb %d, x_stride %lld, y_stride %lld: expected nb >= 1, x_stride >= ncols (%d) and a multiple of 4, "
                         "y_stride >= nrows (%d)", fn, nb, (long long)x_stride, (long long)y_stride, ncols, nrows);
    if (nrows == 0) return 0;
    for (int b0 = 0; b0 < nb;) {
        const int n = nb - b0 < 4 ? nb - b0 : 4;
        const float *xb = x + (size_t)b0 * x_stride;
        const uint8_t *qb = xq ? (const uint8_t *)xq + (size_t)b0 * xq_stride : NULL;
        float *yb = y + (size_t)b0 * y_stride;
        int rc = 1;
        if (n > 1 && gemv_q8_mode())
            rc = gemv_q8_try_batch(type, tab0 ? NULL : W, xb, x_stride, yb, y_stride, n, ncols, nrows, stream, tab0, tab1, id,
                                   tab1 ? 2 : 1, qb, xq_stride);
        if (rc < 0) return rc;
        if (rc == 0) { b0 += n; continue; }
        rc = tab1   ? gpu_gemv_experts_swiglu_q8x(type, tab0, tab1, id, 1, xb, qb, yb, ncols, nrows, stream)
             : tab0 ? gpu_gemv_experts(type, tab0, id, 1, xb, yb, ncols, nrows, stream)
                    : gpu_gemv_q8x(type, W, xb, qb, yb, ncols, nrows, stream);
        if (rc) return -1;
        b0++;
    }
    return 0;
}

extern "C" int gpu_gemv_batch_q8x(int type, const void *W, const float *x, int64_t x_stride, const void *xq, int64_t xq_stride, float *y,
                                  int64_t y_stride, int nb, int ncols, int nrows, void *stream) {
    if (!xq) return gemv_fail("gpu_gemv_batch_q8x: NULL records");
    return batch_common("gpu_gemv_batch_q8x", type, W, NULL, NULL, NULL, x, x_stride, xq, xq_stride, nb, y, y_stride, ncols, nrows, stream);
}

extern "C" int gpu_gemv_batch(int type, const void *W, const float *x, int64_t x_stride, float *y, int64_t y_stride, int nb,
                              int ncols, int nrows, void *stream) {
    return batch_common("gpu_gemv_batch", type, W, NULL, NULL, NULL, x, x_stride, NULL, 0, nb, y, y_stride, ncols, nrows, stream);
}

extern "C" int gpu_gemv_swiglu_rows(int type, const void *const *gate_tab, const void *const *up_tab, const int *id, const float *x,
                                    int64_t x_stride, int nb, float *act, int64_t act_stride, int ncols, int nrows, void *stream,
                                    const void *xq, int64_t xq_stride) {
    if (!gate_tab || !up_tab) return gemv_fail("gpu_gemv_swiglu_rows: NULL table");
    return batch_common("gpu_gemv_swiglu_rows", type, NULL, gate_tab, up_tab, id, x, x_stride, xq, xq_stride, nb, act, act_stride, ncols,
                        nrows, stream);
}

extern "C" int gpu_gemv_expert_rows(int type, const void *const *w_tab, const int *id, const float *x, int64_t x_stride, int nb, float *y,
                                    int64_t y_stride, int ncols, int nrows, void *stream) {
    if (!w_tab) return gemv_fail("gpu_gemv_expert_rows: NULL table");
    return batch_common("gpu_gemv_expert_rows", type, NULL, w_tab, NULL, id, x, x_stride, NULL, 0, nb, y, y_stride, ncols, nrows, stream);
}

extern "C" int gpu_gemv_experts_swiglu_q8x(int type, const void *const *gate_tab, const void *const *up_tab, const int *ids, int k,
                                           const float *x, const void *xq, float *act, int ncols, int nrows, void *stream) {
    const gemv_type *t;
    if (gemv_check("gpu_gemv_experts_swiglu", type, x, ncols, nrows, k, &t)) return -1;
    if (!gate_tab || !up_tab || !ids) return gemv_fail("gpu_gemv_experts_swiglu: NULL table or ids");
    if ((uintptr_t)xq % 16) return gemv_fail("gpu_gemv_experts_swiglu_q8x: records at %p are not 16-byte aligned", xq);
    if (nrows == 0 || k == 0) return 0;
    if (gemv_q8_mode()) {
        const int rc = gemv_q8_try(type, NULL, gate_tab, up_tab, ids, k, x, 0, act, nrows, ncols, nrows, 2, stream, 1, 1, 0, k, xq);
        if (rc <= 0) return rc;
    }
    if (gpu_q8_inter_lshift(gate_tab) >= 0) return gemv_fail("gpu_gemv_experts_swiglu: interleaved matrices need the q8 path (made in mode 0, an executor keeps GGUF rows)");
    const gemv_params p = { NULL, gate_tab, up_tab, ids, x, 0, act, nrows, ncols, nrows, 1, 1, 0, 0 };
    return t->run(p, k, 2, (cudaStream_t)stream);
}

extern "C" int gpu_gemv_experts_routed_ok(int type, int ncols, int n_expert, int k) {
    return gemv_q8_mode() && gemv_q8_routed_ok(type, ncols, n_expert, k);
}

extern "C" int gpu_gemv_experts_swiglu_routed(int type, const void *const *gate_tab, const void *const *up_tab, const float *logits,
                                              const float *bias, int n_expert, int fn, int norm, float scale, int *ids, float *w,
                                              int k, const float *x, const void *xq, float *act, int ncols, int nrows, int xq_ready,
                                              void *stream) {
    const gemv_type *t = NULL;
    if (gemv_check("gpu_gemv_experts_swiglu_routed", type, x, ncols, nrows, k, &t)) return -1;
    if (!gate_tab || !up_tab || !logits || !ids || !w) return gemv_fail("gpu_gemv_experts_swiglu_routed: NULL table, logits, ids or weights");
    if ((uintptr_t)xq % 16) return gemv_fail("gpu_gemv_experts_swiglu_routed: records at %p are not 16-byte aligned", xq);
    if (!gpu_gemv_experts_routed_ok(type, ncols, n_expert, k))
        return gemv_fail("gpu_gemv_experts_swiglu_routed: %s x %d, %d of %d experts: not a shape the q8 path's routed launch takes",
                         t->name, ncols, k, n_expert);
    if (nrows == 0) return 0;
    const int rc = gemv_q8_try_routed(type, gate_tab, up_tab, logits, bias, n_expert, fn, norm, scale, ids, w, k, x, xq, act, ncols,
                                      nrows, xq_ready, stream);
    return rc > 0 ? gemv_fail("gpu_gemv_experts_swiglu_routed: the q8 path refused %s x %d", t->name, ncols) : rc;
}

extern "C" int gpu_gemv_experts_swiglu(int type, const void *const *gate_tab, const void *const *up_tab,
                                       const int *ids, int k, const float *x, float *act, int ncols,
                                       int nrows, void *stream) {
    return gpu_gemv_experts_swiglu_q8x(type, gate_tab, up_tab, ids, k, x, NULL, act, ncols, nrows, stream);
}

extern "C" int gpu_gemv_experts_swiglu_x(int type, const void *const *gate_tab, const void *const *up_tab, const int *ids, int k,
                                         const float *x, int64_t x_stride, int kx, float *act, int ncols, int nrows, void *stream) {
    const gemv_type *t;
    if (gemv_check("gpu_gemv_experts_swiglu_x", type, x, ncols, nrows, k, &t)) return -1;
    if (!gate_tab || !up_tab || !ids) return gemv_fail("gpu_gemv_experts_swiglu_x: NULL table or ids");
    if (kx < 1 || x_stride < ncols || x_stride % 4)
        return gemv_fail("gpu_gemv_experts_swiglu_x: kx %d, x_stride %lld: expected kx >= 1 and x_stride >= ncols (%d), a multiple of 4",
                         kx, (long long)x_stride, ncols);
    if (nrows == 0 || k == 0) return 0;
    if (gemv_q8_mode()) {
        const int rc = gemv_q8_try(type, NULL, gate_tab, up_tab, ids, k, x, x_stride, act, nrows, ncols, nrows, 2, stream, kx, 1, 0, kx);
        if (rc <= 0) return rc;
    }
    if (gpu_q8_inter_lshift(gate_tab) >= 0) return gemv_fail("gpu_gemv_experts_swiglu_x: interleaved matrices need the q8 path (made in mode 0, an executor keeps GGUF rows)");
    const gemv_params p = { NULL, gate_tab, up_tab, ids, x, x_stride, act, nrows, ncols, nrows, kx, 1, 0, 0 };
    return t->run(p, k, 2, (cudaStream_t)stream);
}

extern "C" int gpu_gemv_experts_y(int type, const void *const *w_tab, const int *ids, int k, const float *x, float *y, int ncols,
                                  int nrows, int ky, int64_t y_group_stride, void *stream) {
    const gemv_type *t;
    if (gemv_check("gpu_gemv_experts_y", type, x, ncols, nrows, k, &t)) return -1;
    if (!w_tab || !ids) return gemv_fail("gpu_gemv_experts_y: NULL table or ids");
    if (ky < 1 || y_group_stride < (int64_t)ky * nrows)
        return gemv_fail("gpu_gemv_experts_y: ky %d, group stride %lld: expected ky >= 1 and a stride >= ky * nrows (%d)", ky,
                         (long long)y_group_stride, nrows);
    if (nrows == 0 || k == 0) return 0;
    if (gemv_q8_mode()) {
        const int rc = gemv_q8_try(type, NULL, w_tab, NULL, ids, k, x, ncols, y, nrows, ncols, nrows, 1, stream, 1, ky, y_group_stride, ky);
        if (rc <= 0) return rc;
    }
    if (gpu_q8_inter_lshift(w_tab) >= 0) return gemv_fail("gpu_gemv_experts_y: interleaved matrices need the q8 path (made in mode 0, an executor keeps GGUF rows)");
    const gemv_params p = { NULL, w_tab, NULL, ids, x, ncols, y, nrows, ncols, nrows, 1, ky, y_group_stride, 0 };
    return t->run(p, k, 1, (cudaStream_t)stream);
}

extern "C" int gpu_gemv_experts(int type, const void *const *w_tab, const int *ids, int k, const float *x,
                                float *y, int ncols, int nrows, void *stream) {
    const gemv_type *t;
    if (gemv_check("gpu_gemv_experts", type, x, ncols, nrows, k, &t)) return -1;
    if (!w_tab || !ids) return gemv_fail("gpu_gemv_experts: NULL table or ids");
    if (nrows == 0 || k == 0) return 0;
    if (gemv_q8_mode()) {
        const int rc = gemv_q8_try(type, NULL, w_tab, NULL, ids, k, x, ncols, y, nrows, ncols, nrows, 1, stream, 1, 1, 0, k);
        if (rc <= 0) return rc;
    }
    if (gpu_q8_inter_lshift(w_tab) >= 0) return gemv_fail("gpu_gemv_experts: interleaved matrices need the q8 path (made in mode 0, an executor keeps GGUF rows)");
    const gemv_params p = { NULL, w_tab, NULL, ids, x, ncols, y, nrows, ncols, nrows, 1, 1, 0, 0 };
    return t->run(p, k, 1, (cudaStream_t)stream);
}
