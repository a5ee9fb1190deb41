/* quant.h - the one table of weight types (ggml type ids, block layouts) for CPU and GPU.
 * Layouts are bit-identical to ggml's so that stock GGUF files load. A new type is one row. */
#ifndef HM_QUANT_H
#define HM_QUANT_H
#include <stddef.h>
#include <stdint.h>

/* ggml type ids, as stored in GGUF tensor infos. */
enum hm_type {
    HM_TYPE_F32 = 0, HM_TYPE_F16 = 1, HM_TYPE_Q4_0 = 2, HM_TYPE_Q4_1 = 3,
    HM_TYPE_Q5_0 = 6, HM_TYPE_Q5_1 = 7, HM_TYPE_Q8_0 = 8, HM_TYPE_Q8_1 = 9,
    HM_TYPE_Q2_K = 10, HM_TYPE_Q3_K = 11, HM_TYPE_Q4_K = 12, HM_TYPE_Q5_K = 13,
    HM_TYPE_Q6_K = 14, HM_TYPE_Q8_K = 15, HM_TYPE_IQ4_XS = 23, HM_TYPE_BF16 = 30,
    HM_TYPE_MXFP4 = 39,
    HM_TYPE_COUNT = 40
};

typedef struct {
    const char *name;     /* ggml's name, e.g. "Q4_K" */
    int blck;             /* elements per block (1 for float types) */
    size_t type_size;     /* bytes per block */
    /* dst[0..n) = dequantized src; n is a multiple of blck. NULL if not supported yet. */
    void (*to_float)(const void *src, float *dst, int64_t n);
    /* reference quantizer (ggml's *_ref rounding); NULL if not supported yet. */
    void (*from_float)(const float *src, void *dst, int64_t n);
} hm_type_traits;

/* The traits of type t, or NULL when t is not a type this build knows. */
const hm_type_traits *hm_type_get(int t);
/* Name of type t, or "?" when unknown. */
const char *hm_type_name(int t);
/* Bytes of a row of n elements of type t; 0 if t is unknown or n % blck != 0. */
size_t hm_row_size(int t, int64_t n);

/* scalar conversions shared by every path */
float hm_fp16_to_f32(uint16_t h);
uint16_t hm_f32_to_fp16(float f);
static inline float hm_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v; v.u = (uint32_t)h << 16; return v.f;
}
uint16_t hm_f32_to_bf16(float f); /* round to nearest even, NaN kept quiet */

#endif
