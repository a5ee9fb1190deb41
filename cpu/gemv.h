/* gemv.h - fast CPU matrix-vector products straight on ggml-quantized weights.
 * As in ggml, each weight type has a vec_dot activation format: x is quantized once per product
 * (Q8_0 blocks of 32, Q8_K blocks of 256, or F32 for float weights) and every row is dotted with it
 * in integer arithmetic. The ISA (scalar, AVX2, AVX-512/VNNI) is picked once at start-up by CPUID. */
#ifndef HM_GEMV_H
#define HM_GEMV_H
#include <stddef.h>
#include <stdint.h>
#include "model.h"

/* Which kernels cpu_matvec uses: FAST (this file, the default) or REF (cpu/kernels.c: exact
 * dequantization, F32 activations and accumulation; `--kernels ref`). */
enum { HM_KERNELS_FAST = 0, HM_KERNELS_REF = 1 };
void hm_kernels_set(int mode);
int hm_kernels_get(void);

/* Name of the ISA in use: "scalar", "avx2" or "avx512". The start-up choice is the best one this
 * CPU supports, unless the environment variable HM_GEMV_ISA names another supported one. */
const char *hm_gemv_isa(void);
/* Selects an ISA by name (tests, benchmarks). Returns 0, or -1 when the name is unknown or this
 * CPU (or build) lacks it; then the ISA in use is unchanged. Not while kernels run. */
int hm_gemv_force_isa(const char *name);

/* 1 when weight type t has fast kernels, else 0 (cpu_matvec then takes the reference path). */
int hm_gemv_supported(int t);
/* The activation type of weight type t (HM_TYPE_Q8_0, HM_TYPE_Q8_K or HM_TYPE_F32), -1 if none. */
int hm_act_type(int t);
/* Bytes of the activation of n elements for weight type t; 0 if t is unsupported or n is not a
 * multiple of the activation block. */
size_t hm_act_size(int t, int64_t n);
/* xq = x[0..n) in the activation format of weight type t (hm_act_size(t, n) bytes). */
void hm_act_quantize(int t, const float *x, void *xq, int64_t n);

/* y[r] = row r of W . xq for r in [r0, r1), on the calling thread; xq from hm_act_quantize with
 * W's type and n = W->ne[0]. W's type must be supported and W->ne[0] a multiple of its block. */
void hm_gemv_rows(const hm_tensor *W, const void *xq, float *y, int64_t r0, int64_t r1);

/* y = W . x, x quantized once, rows split over the OpenMP threads (contiguous runs of rows).
 * Returns 0, or -1 (y untouched) when W's type is unsupported or its row length not a multiple
 * of the block: the caller then uses the reference kernel. */
int hm_gemv(float *y, const hm_tensor *W, const float *x);

/* n independent products y[i] = W[i] . xq[i] (MoE: the chosen experts' gate/up/down) in ONE
 * OpenMP region: all rows of all matrices are split by bytes into one contiguous run per thread,
 * so small experts still use every core. xq[i] is in W[i]'s activation format (the same buffer
 * may serve several matrices of one activation type); every W[i] must be supported. */
void hm_gemv_multi(int n, const hm_tensor *const *W, const void *const *xq, float *const *y);

#endif
