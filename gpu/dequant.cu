/* dequant.cu - weights to bf16/f16 for prefill (cuBLAS on dequantized tiles), bit-identical to
 * the CPU: each value is computed by the type's deq4 (qdev.cuh), which repeats cpu/quant*.c's
 * float operations in order, then rounded by device copies of hm_f32_to_bf16 / hm_f32_to_fp16.
 * Built without fast-math (no flush-to-zero), as those copies and the CPU need. */
#include <stdint.h>
#include "gpu_gemv.h"
#include "gpu_check.h"
#include "qdev.cuh"
#include "qdev_k.cuh"
extern "C" {
#include "quant.h"
}

int gemv_fail(const char *fmt, ...); /* gemv.cu */

/* ---- cpu/quant.c's scalar conversions, operation for operation ---- */

__device__ __forceinline__ float dev_fp16_to_f32(uint32_t h) {
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF, u;
    if (exp == 0) {
        if (mant == 0) u = sign;
        else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            mant &= 0x3FF;
            u = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 31) u = sign | 0x7F800000u | (mant << 13);
    else u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    return __uint_as_float(u);
}

__device__ __forceinline__ uint32_t dev_f32_to_fp16(float f) {
    const uint32_t x = __float_as_uint(f), sign = (x >> 16) & 0x8000, ax = x & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u) return sign | 0x7C00 | (ax > 0x7F800000u ? 0x200 : 0);
    if (ax >= 0x477FF000u) return sign | 0x7C00; /* overflow -> inf */
    if (ax < 0x38800000u) /* subnormal or zero in half: units of 2^-24, nearest even */
        return sign | (uint32_t)__float2int_rn(__fmul_rn(__uint_as_float(ax), 16777216.0f));
    const uint32_t mant = ax & 0x7FFFFF, exp = (ax >> 23) - 127 + 15, rem = mant & 0x1FFF;
    uint32_t h = (exp << 10) | (mant >> 13);
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return sign | h;
}

__device__ __forceinline__ uint32_t dev_f32_to_bf16(float f) {
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 64;
    return (u + (0x7FFF + ((u >> 16) & 1))) >> 16;
}

template <bool F16>
__device__ __forceinline__ uint32_t dev_round(float f) { return F16 ? dev_f32_to_fp16(f) : dev_f32_to_bf16(f); }

/* ---- kernels: one thread per 4 outputs of a block type, one per output of a float type ---- */

template <class T, bool F16>
__global__ void dequant_kernel(const uint8_t *__restrict__ src, uint16_t *__restrict__ dst, int64_t nruns) {
    constexpr int RPB = T::QK / 4; /* runs of 4 per block */
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nruns; i += (int64_t)gridDim.x * blockDim.x) {
        float v[4];
        T::deq4(src + (i / RPB) * T::BS, (int)(i % RPB), v);
        uint2 o;
        o.x = dev_round<F16>(v[0]) | dev_round<F16>(v[1]) << 16;
        o.y = dev_round<F16>(v[2]) | dev_round<F16>(v[3]) << 16;
        *(uint2 *)(dst + 4 * i) = o;
    }
}

/* IN: 0 F32, 1 F16, 2 BF16 */
template <int IN, bool F16>
__global__ void dequant_float_kernel(const void *__restrict__ src, uint16_t *__restrict__ dst, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float f;
        if (IN == 0) f = ((const float *)src)[i];
        else if (IN == 1) f = dev_fp16_to_f32(((const uint16_t *)src)[i]);
        else f = __uint_as_float((uint32_t)((const uint16_t *)src)[i] << 16);
        dst[i] = (uint16_t)dev_round<F16>(f);
    }
}

static unsigned dequant_grid(int64_t items) {
    const int64_t b = (items + 255) / 256;
    return (unsigned)(b < 65536 ? b : 65536); /* grid-stride beyond */
}

template <class T>
static int dequant_launch(const void *src, void *dst, int64_t n, int f16, cudaStream_t s) {
    if ((uintptr_t)dst % 8) return gemv_fail("gpu_dequant: dst at %p is not 8-byte aligned", dst);
    const int64_t nruns = n / 4;
    if (f16) dequant_kernel<T, true><<<dequant_grid(nruns), 256, 0, s>>>((const uint8_t *)src, (uint16_t *)dst, nruns);
    else dequant_kernel<T, false><<<dequant_grid(nruns), 256, 0, s>>>((const uint8_t *)src, (uint16_t *)dst, nruns);
    CUDA_CHECK_LAUNCH();
    return 0;
}

template <int IN>
static int dequant_launch_float(const void *src, void *dst, int64_t n, int f16, cudaStream_t s) {
    if ((uintptr_t)src % (IN == 0 ? 4 : 2) || (uintptr_t)dst % 2) return gemv_fail("gpu_dequant: misaligned src %p or dst %p", src, dst);
    if (f16) dequant_float_kernel<IN, true><<<dequant_grid(n), 256, 0, s>>>(src, (uint16_t *)dst, n);
    else dequant_float_kernel<IN, false><<<dequant_grid(n), 256, 0, s>>>(src, (uint16_t *)dst, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

/* ---- one embedding row chosen on the GPU (gpu_embed_row) ---- */

/* the row of table at *tok (clamped into [0, nvocab)) as F32, each value the CPU's to_float's; block
 * 0's thread 0 adds 1 to *pos first when pos is given */
template <class T>
__global__ void embed_kernel(const uint8_t *__restrict__ table, size_t row_bytes, const int *__restrict__ tok, int nvocab,
                             int *pos, float *__restrict__ out, int nruns) {
    if (pos && blockIdx.x == 0 && threadIdx.x == 0) *pos += 1;
    constexpr int RPB = T::QK / 4;
    int t = *tok;
    t = t < 0 ? 0 : t >= nvocab ? nvocab - 1 : t;
    const uint8_t *row = table + (size_t)t * row_bytes;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nruns; i += gridDim.x * blockDim.x) {
        float v[4];
        T::deq4(row + (size_t)(i / RPB) * T::BS, i % RPB, v);
        *(float4 *)(out + 4 * i) = make_float4(v[0], v[1], v[2], v[3]);
    }
}

template <int IN>   /* 0 F32, 1 F16, 2 BF16 */
__global__ void embed_float_kernel(const uint8_t *__restrict__ table, size_t row_bytes, const int *__restrict__ tok, int nvocab,
                                   int *pos, float *__restrict__ out, int n) {
    if (pos && blockIdx.x == 0 && threadIdx.x == 0) *pos += 1;
    int t = *tok;
    t = t < 0 ? 0 : t >= nvocab ? nvocab - 1 : t;
    const uint8_t *row = table + (size_t)t * row_bytes;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        if (IN == 0) out[i] = ((const float *)row)[i];
        else if (IN == 1) out[i] = dev_fp16_to_f32(((const uint16_t *)row)[i]);
        else out[i] = __uint_as_float((uint32_t)((const uint16_t *)row)[i] << 16);
    }
}

template <class T>
static void embed_launch(const uint8_t *table, size_t row_bytes, const int *tok, int nvocab, int *pos, float *out, int n, cudaStream_t s) {
    const int nruns = n / 4;
    embed_kernel<T><<<(nruns + 255) / 256, 256, 0, s>>>(table, row_bytes, tok, nvocab, pos, out, nruns);
}
template <int IN>
static void embed_launch_float(const uint8_t *table, size_t row_bytes, const int *tok, int nvocab, int *pos, float *out, int n,
                               cudaStream_t s) {
    embed_float_kernel<IN><<<(n + 255) / 256, 256, 0, s>>>(table, row_bytes, tok, nvocab, pos, out, n);
}

typedef void (*embed_fn)(const uint8_t *table, size_t row_bytes, const int *tok, int nvocab, int *pos, float *out, int n, cudaStream_t s);

typedef int (*dequant_fn)(const void *src, void *dst, int64_t n, int f16, cudaStream_t s);
struct dequant_type {
    int type;
    const char *name;
    int blck;
    dequant_fn run;
    embed_fn embed;   /* gpu_embed_row's launch */
};

static const dequant_type k_types[] = {
    { HM_TYPE_F32,     "F32",    1,        dequant_launch_float<0>, embed_launch_float<0> },
    { HM_TYPE_F16,     "F16",    1,        dequant_launch_float<1>, embed_launch_float<1> },
    { HM_TYPE_BF16,    "BF16",   1,        dequant_launch_float<2>, embed_launch_float<2> },
    { HM_TYPE_Q4_0,    "Q4_0",   TQ4_0::QK,   dequant_launch<TQ4_0>, embed_launch<TQ4_0> },
    { HM_TYPE_Q4_1,    "Q4_1",   TQ4_1::QK,   dequant_launch<TQ4_1>, embed_launch<TQ4_1> },
    { HM_TYPE_Q5_0,    "Q5_0",   TQ5_0::QK,   dequant_launch<TQ5_0>, embed_launch<TQ5_0> },
    { HM_TYPE_Q5_1,    "Q5_1",   TQ5_1::QK,   dequant_launch<TQ5_1>, embed_launch<TQ5_1> },
    { HM_TYPE_Q8_0,    "Q8_0",   TQ8_0::QK,   dequant_launch<TQ8_0>, embed_launch<TQ8_0> },
    { HM_TYPE_MXFP4,   "MXFP4",  TMXFP4::QK,  dequant_launch<TMXFP4>, embed_launch<TMXFP4> },
    { HM_TYPE_Q2_K,    "Q2_K",   TQ2_K::QK,   dequant_launch<TQ2_K>, embed_launch<TQ2_K> },
    { HM_TYPE_Q3_K,    "Q3_K",   TQ3_K::QK,   dequant_launch<TQ3_K>, embed_launch<TQ3_K> },
    { HM_TYPE_Q4_K,    "Q4_K",   TQ4_K::QK,   dequant_launch<TQ4_K>, embed_launch<TQ4_K> },
    { HM_TYPE_Q5_K,    "Q5_K",   TQ5_K::QK,   dequant_launch<TQ5_K>, embed_launch<TQ5_K> },
    { HM_TYPE_Q6_K,    "Q6_K",   TQ6_K::QK,   dequant_launch<TQ6_K>, embed_launch<TQ6_K> },
    { HM_TYPE_IQ4_XS,  "IQ4_XS", TIQ4_XS::QK, dequant_launch<TIQ4_XS>, embed_launch<TIQ4_XS> },
};

static const dequant_type *dequant_find(int type) {
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (k_types[i].type == type) return &k_types[i];
    return NULL;
}

extern "C" int gpu_dequant(int type, const void *src, void *dst, int64_t n, int out_f16, void *stream) {
    const dequant_type *t = dequant_find(type);
    if (!t) return gemv_fail("gpu_dequant: ggml type %d has no GPU kernel", type);
    if (gpu_q8_inter_lshift(src) >= 0) return gemv_fail("gpu_dequant: %p is an interleaved matrix (pf_deq_mat_inter reads those)", src);
    if (n < 0 || n % t->blck) return gemv_fail("gpu_dequant: n %lld must be a multiple of %s's block of %d", (long long)n, t->name, t->blck);
    if ((uintptr_t)src % 2 && type != HM_TYPE_MXFP4) /* MXFP4's 17-byte blocks are read bytewise */
        return gemv_fail("gpu_dequant: src at %p is not 2-byte aligned", src);
    if (n == 0) return 0;
    return t->run(src, dst, n, out_f16, (cudaStream_t)stream);
}

extern "C" int gpu_embed_row_ok(int type, int n) {
    const dequant_type *t = dequant_find(type);
    return t && n > 0 && n % t->blck == 0;
}

extern "C" int gpu_embed_row(int type, const void *table, size_t row_bytes, const int *tok, int nvocab, int *pos, float *out, int n,
                             void *stream) {
    if (!gpu_embed_row_ok(type, n)) return gemv_fail("gpu_embed_row: ggml type %d with rows of %d values has no GPU kernel", type, n);
    if ((uintptr_t)out % 16) return gemv_fail("gpu_embed_row: out at %p is not 16-byte aligned", out);
    dequant_find(type)->embed((const uint8_t *)table, row_bytes, tok, nvocab, pos, out, n, (cudaStream_t)stream);
    CUDA_CHECK_LAUNCH();
    return 0;
}
