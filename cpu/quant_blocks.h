/* quant_blocks.h - ggml's block layouts, byte for byte, and the row converters behind quant.h's table.
 * Kernels that work on blocks directly (dot products, GPU uploads) include this; others use quant.h. */
#ifndef HM_QUANT_BLOCKS_H
#define HM_QUANT_BLOCKS_H
#include <assert.h>
#include <stdint.h>
#include "quant.h"

#define HM_QK   32  /* elements per block of the legacy types and MXFP4 */
#define HM_QK_K 256 /* elements per K-quant super-block */

typedef uint16_t hm_half; /* IEEE binary16 bits; hm_fp16_to_f32 reads them */

typedef struct { hm_half d; uint8_t qs[HM_QK / 2]; } hm_block_q4_0;                  /* x = d*(q-8) */
typedef struct { hm_half d, m; uint8_t qs[HM_QK / 2]; } hm_block_q4_1;               /* x = d*q + m */
typedef struct { hm_half d; uint8_t qh[4]; uint8_t qs[HM_QK / 2]; } hm_block_q5_0;   /* x = d*(q-16) */
typedef struct { hm_half d, m; uint8_t qh[4]; uint8_t qs[HM_QK / 2]; } hm_block_q5_1;/* x = d*q + m */
typedef struct { hm_half d; int8_t qs[HM_QK]; } hm_block_q8_0;                       /* x = d*q */
/* x = e2m1(q) * 2^(e-127); e is an E8M0 exponent, q's low nibble holds element j, high j+16 */
typedef struct { uint8_t e; uint8_t qs[HM_QK / 2]; } hm_block_mxfp4;

typedef struct {
    uint8_t scales[HM_QK_K / 16]; /* per 16: low nibble scale, high nibble min (4 bits each) */
    uint8_t qs[HM_QK_K / 4];      /* 2-bit quants */
    hm_half d, dmin;              /* super-block scale for scales and for mins */
} hm_block_q2_K;
typedef struct {
    uint8_t hmask[HM_QK_K / 8];   /* high bit of each quant (set means no -4 offset) */
    uint8_t qs[HM_QK_K / 4];      /* low 2 bits */
    uint8_t scales[12];           /* 16 signed 6-bit scales, packed */
    hm_half d;
} hm_block_q3_K;
typedef struct {
    hm_half d, dmin;
    uint8_t scales[12];           /* 8 scales and 8 mins, 6 bits each, packed */
    uint8_t qs[HM_QK_K / 2];      /* 4-bit quants */
} hm_block_q4_K;
typedef struct {
    hm_half d, dmin;
    uint8_t scales[12];           /* as Q4_K */
    uint8_t qh[HM_QK_K / 8];      /* fifth bit */
    uint8_t qs[HM_QK_K / 2];      /* low 4 bits */
} hm_block_q5_K;
typedef struct {
    uint8_t ql[HM_QK_K / 2];      /* low 4 bits */
    uint8_t qh[HM_QK_K / 4];      /* high 2 bits */
    int8_t scales[HM_QK_K / 16];  /* 8-bit scales */
    hm_half d;
} hm_block_q6_K;
typedef struct {                  /* activations: quantized on the fly for dot products */
    float d;
    int8_t qs[HM_QK_K];
    int16_t bsums[HM_QK_K / 16];  /* sum of qs per group of 16 */
} hm_block_q8_K;
typedef struct {
    hm_half d;
    uint16_t scales_h;            /* high 2 bits of the 8 block scales */
    uint8_t scales_l[HM_QK_K / 64];/* low 4 bits */
    uint8_t qs[HM_QK_K / 2];      /* indices into hm_kvalues_iq4nl */
} hm_block_iq4_xs;

static_assert(sizeof(hm_block_q4_0) == 18, "q4_0 layout");
static_assert(sizeof(hm_block_q4_1) == 20, "q4_1 layout");
static_assert(sizeof(hm_block_q5_0) == 22, "q5_0 layout");
static_assert(sizeof(hm_block_q5_1) == 24, "q5_1 layout");
static_assert(sizeof(hm_block_q8_0) == 34, "q8_0 layout");
static_assert(sizeof(hm_block_mxfp4) == 17, "mxfp4 layout");
static_assert(sizeof(hm_block_q2_K) == 84, "q2_K layout");
static_assert(sizeof(hm_block_q3_K) == 110, "q3_K layout");
static_assert(sizeof(hm_block_q4_K) == 144, "q4_K layout");
static_assert(sizeof(hm_block_q5_K) == 176, "q5_K layout");
static_assert(sizeof(hm_block_q6_K) == 210, "q6_K layout");
static_assert(sizeof(hm_block_q8_K) == 292, "q8_K layout");
static_assert(sizeof(hm_block_iq4_xs) == 136, "iq4_xs layout");

/* Value tables shared with dot-product kernels. */
extern const int8_t hm_kvalues_mxfp4[16]; /* e2m1 values, doubled */
extern const int8_t hm_kvalues_iq4nl[16];

/* MXFP4's scale, halved to match the doubled e2m1 table: 2^(e-128) exactly, e in 0..255. */
static inline float hm_e8m0_to_f32_half(uint8_t e) {
    union { uint32_t u; float f; } v;
    v.u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return v.f;
}

/* Row converters of quant_k.c (K-quants, Q8_K, IQ4_XS); same contract as hm_type_traits. */
void hm_q2_K_to_float(const void *src, float *dst, int64_t n);
void hm_q2_K_from_float(const float *src, void *dst, int64_t n);
void hm_q3_K_to_float(const void *src, float *dst, int64_t n);
void hm_q3_K_from_float(const float *src, void *dst, int64_t n);
void hm_q4_K_to_float(const void *src, float *dst, int64_t n);
void hm_q4_K_from_float(const float *src, void *dst, int64_t n);
void hm_q5_K_to_float(const void *src, float *dst, int64_t n);
void hm_q5_K_from_float(const float *src, void *dst, int64_t n);
void hm_q6_K_to_float(const void *src, float *dst, int64_t n);
void hm_q6_K_from_float(const float *src, void *dst, int64_t n);
void hm_q8_K_to_float(const void *src, float *dst, int64_t n);
void hm_q8_K_from_float(const float *src, void *dst, int64_t n);
void hm_iq4_xs_to_float(const void *src, float *dst, int64_t n);
void hm_iq4_xs_from_float(const float *src, void *dst, int64_t n);

#endif
