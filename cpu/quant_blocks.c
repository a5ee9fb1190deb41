/* quant_blocks.c - ggml's 32-element block formats (Q4_0 .. Q8_0, MXFP4) and the block-type table.
 * Dequantizers and reference quantizers reproduce ggml's float operations in ggml's order so that
 * results are bit-identical with ggml and gguf-py; the K-quants live in quant_k.c. */
#include "quant_blocks.h"
#include <float.h>
#include <math.h>
#include <string.h>

/* Bit-exactness needs a*b+c rounded twice, as ggml's scalar code and numpy do: no FMA contraction. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

const int8_t hm_kvalues_mxfp4[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };

/* ---- Q4_0 ---- */

static void q4_0_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / HM_QK; i++, dst += HM_QK) {
        const float d = hm_fp16_to_f32(b[i].d);
        for (int j = 0; j < HM_QK / 2; j++) {
            dst[j] = ((b[i].qs[j] & 0x0F) - 8) * d;
            dst[j + HM_QK / 2] = ((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* The element of largest magnitude, sign kept (first one on ties), as the symmetric types need. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    return max;
}

static void min_max(const float *x, int n, float *min, float *max) {
    *min = FLT_MAX; *max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

static void q4_0_from_float(const float *src, void *dst, int64_t n) {
    hm_block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / HM_QK; i++, src += HM_QK) {
        const float d = signed_absmax(src, HM_QK) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        b[i].d = hm_f32_to_fp16(d);
        for (int j = 0; j < HM_QK / 2; j++) {
            /* truncation after +8.5 is ggml's rounding; the max element lands on 16 and is clipped */
            const int q0 = (int8_t)(src[j] * id + 8.5f), q1 = (int8_t)(src[j + HM_QK / 2] * id + 8.5f);
            b[i].qs[j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
    }
}

/* ---- Q4_1 ---- */

static void q4_1_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / HM_QK; i++, dst += HM_QK) {
        const float d = hm_fp16_to_f32(b[i].d), m = hm_fp16_to_f32(b[i].m);
        for (int j = 0; j < HM_QK / 2; j++) {
            dst[j] = (b[i].qs[j] & 0x0F) * d + m;
            dst[j + HM_QK / 2] = (b[i].qs[j] >> 4) * d + m;
        }
    }
}

static void q4_1_from_float(const float *src, void *dst, int64_t n) {
    hm_block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / HM_QK; i++, src += HM_QK) {
        float min, max;
        min_max(src, HM_QK, &min, &max);
        const float d = (max - min) / 15, id = d ? 1.0f / d : 0.0f;
        b[i].d = hm_f32_to_fp16(d);
        b[i].m = hm_f32_to_fp16(min);
        for (int j = 0; j < HM_QK / 2; j++) {
            const int q0 = (int8_t)((src[j] - min) * id + 0.5f);
            const int q1 = (int8_t)((src[j + HM_QK / 2] - min) * id + 0.5f);
            b[i].qs[j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
    }
}

/* ---- Q5_0, Q5_1: the fifth bits of elements 0..31 are bits 0..31 of little-endian qh ---- */

static uint32_t load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_u32le(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

/* q[0..32) from the nibbles and the high bits */
static void unpack5(const uint8_t *qs, const uint8_t *qh, int *q) {
    const uint32_t h = load_u32le(qh);
    for (int j = 0; j < HM_QK / 2; j++) {
        q[j] = (qs[j] & 0x0F) | ((h >> j) & 1) << 4;
        q[j + HM_QK / 2] = (qs[j] >> 4) | ((h >> (j + HM_QK / 2)) & 1) << 4;
    }
}

static void pack5(const int *q, uint8_t *qs, uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < HM_QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | (q[j + HM_QK / 2] & 0x0F) << 4);
        h |= (uint32_t)(q[j] >> 4 & 1) << j | (uint32_t)(q[j + HM_QK / 2] >> 4 & 1) << (j + HM_QK / 2);
    }
    store_u32le(qh, h);
}

static void q5_0_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_q5_0 *b = src;
    int q[HM_QK];
    for (int64_t i = 0; i < n / HM_QK; i++, dst += HM_QK) {
        const float d = hm_fp16_to_f32(b[i].d);
        unpack5(b[i].qs, b[i].qh, q);
        for (int j = 0; j < HM_QK; j++) dst[j] = (q[j] - 16) * d;
    }
}

static void q5_0_from_float(const float *src, void *dst, int64_t n) {
    hm_block_q5_0 *b = dst;
    int q[HM_QK];
    for (int64_t i = 0; i < n / HM_QK; i++, src += HM_QK) {
        const float d = signed_absmax(src, HM_QK) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        b[i].d = hm_f32_to_fp16(d);
        for (int j = 0; j < HM_QK; j++) {
            const int v = (int8_t)(src[j] * id + 16.5f);
            q[j] = v < 31 ? v : 31;
        }
        pack5(q, b[i].qs, b[i].qh);
    }
}

static void q5_1_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_q5_1 *b = src;
    int q[HM_QK];
    for (int64_t i = 0; i < n / HM_QK; i++, dst += HM_QK) {
        const float d = hm_fp16_to_f32(b[i].d), m = hm_fp16_to_f32(b[i].m);
        unpack5(b[i].qs, b[i].qh, q);
        for (int j = 0; j < HM_QK; j++) dst[j] = q[j] * d + m;
    }
}

static void q5_1_from_float(const float *src, void *dst, int64_t n) {
    hm_block_q5_1 *b = dst;
    int q[HM_QK];
    for (int64_t i = 0; i < n / HM_QK; i++, src += HM_QK) {
        float min, max;
        min_max(src, HM_QK, &min, &max);
        const float d = (max - min) / 31, id = d ? 1.0f / d : 0.0f;
        b[i].d = hm_f32_to_fp16(d);
        b[i].m = hm_f32_to_fp16(min);
        for (int j = 0; j < HM_QK; j++) {
            const int v = (uint8_t)((src[j] - min) * id + 0.5f);
            q[j] = v < 31 ? v : 31;
        }
        pack5(q, b[i].qs, b[i].qh);
    }
}

/* ---- Q8_0 ---- */

static void q8_0_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / HM_QK; i++, dst += HM_QK) {
        const float d = hm_fp16_to_f32(b[i].d);
        for (int j = 0; j < HM_QK; j++) dst[j] = b[i].qs[j] * d;
    }
}

static void q8_0_from_float(const float *src, void *dst, int64_t n) {
    hm_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / HM_QK; i++, src += HM_QK) {
        float amax = 0.0f;
        for (int j = 0; j < HM_QK; j++) amax = fmaxf(amax, fabsf(src[j]));
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        b[i].d = hm_f32_to_fp16(d);
        for (int j = 0; j < HM_QK; j++) b[i].qs[j] = (int8_t)roundf(src[j] * id); /* half away from 0 */
    }
}

/* ---- MXFP4 (OCP microscaling): nibble j is element j, nibble j+16 the high half of byte j ---- */

static void mxfp4_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / HM_QK; i++, dst += HM_QK) {
        const float d = hm_e8m0_to_f32_half(b[i].e);
        for (int j = 0; j < HM_QK / 2; j++) {
            dst[j] = hm_kvalues_mxfp4[b[i].qs[j] & 0x0F] * d;
            dst[j + HM_QK / 2] = hm_kvalues_mxfp4[b[i].qs[j] >> 4] * d;
        }
    }
}

/* nearest table entry; the first of equals wins, as in ggml */
static int mxfp4_best_index(float x, float d) {
    int best = 0;
    float best_err = fabsf(hm_kvalues_mxfp4[0] * d - x);
    for (int k = 1; k < 16; k++) {
        const float err = fabsf(hm_kvalues_mxfp4[k] * d - x);
        if (err < best_err) { best = k; best_err = err; }
    }
    return best;
}

static void mxfp4_from_float(const float *src, void *dst, int64_t n) {
    hm_block_mxfp4 *b = dst;
    for (int64_t i = 0; i < n / HM_QK; i++, src += HM_QK) {
        float amax = 0.0f;
        for (int j = 0; j < HM_QK; j++) amax = fmaxf(amax, fabsf(src[j]));
        /* largest e2m1 magnitude is 6 = 1.5*2^2, hence floor(log2(amax)) - 2; ggml leaves
         * amax < 2^-125 undefined (negative exponent), we clamp it to the smallest scale */
        const float ef = amax > 0.0f ? floorf(log2f(amax)) - 2 + 127 : 0.0f;
        const uint8_t e = ef > 0.0f ? (uint8_t)ef : 0;
        const float d = hm_e8m0_to_f32_half(e);
        b[i].e = e;
        for (int j = 0; j < HM_QK / 2; j++)
            b[i].qs[j] = (uint8_t)(mxfp4_best_index(src[j], d) | mxfp4_best_index(src[j + HM_QK / 2], d) << 4);
    }
}

/* ---- the table: one row per type ---- */

static const hm_type_traits block_types[HM_TYPE_COUNT] = {
    [HM_TYPE_Q4_0]   = { "Q4_0",   HM_QK,   sizeof(hm_block_q4_0),   q4_0_to_float,      q4_0_from_float },
    [HM_TYPE_Q4_1]   = { "Q4_1",   HM_QK,   sizeof(hm_block_q4_1),   q4_1_to_float,      q4_1_from_float },
    [HM_TYPE_Q5_0]   = { "Q5_0",   HM_QK,   sizeof(hm_block_q5_0),   q5_0_to_float,      q5_0_from_float },
    [HM_TYPE_Q5_1]   = { "Q5_1",   HM_QK,   sizeof(hm_block_q5_1),   q5_1_to_float,      q5_1_from_float },
    [HM_TYPE_Q8_0]   = { "Q8_0",   HM_QK,   sizeof(hm_block_q8_0),   q8_0_to_float,      q8_0_from_float },
    [HM_TYPE_Q2_K]   = { "Q2_K",   HM_QK_K, sizeof(hm_block_q2_K),   hm_q2_K_to_float,   hm_q2_K_from_float },
    [HM_TYPE_Q3_K]   = { "Q3_K",   HM_QK_K, sizeof(hm_block_q3_K),   hm_q3_K_to_float,   hm_q3_K_from_float },
    [HM_TYPE_Q4_K]   = { "Q4_K",   HM_QK_K, sizeof(hm_block_q4_K),   hm_q4_K_to_float,   hm_q4_K_from_float },
    [HM_TYPE_Q5_K]   = { "Q5_K",   HM_QK_K, sizeof(hm_block_q5_K),   hm_q5_K_to_float,   hm_q5_K_from_float },
    [HM_TYPE_Q6_K]   = { "Q6_K",   HM_QK_K, sizeof(hm_block_q6_K),   hm_q6_K_to_float,   hm_q6_K_from_float },
    [HM_TYPE_Q8_K]   = { "Q8_K",   HM_QK_K, sizeof(hm_block_q8_K),   hm_q8_K_to_float,   hm_q8_K_from_float },
    [HM_TYPE_IQ4_XS] = { "IQ4_XS", HM_QK_K, sizeof(hm_block_iq4_xs), hm_iq4_xs_to_float, hm_iq4_xs_from_float },
    [HM_TYPE_MXFP4]  = { "MXFP4",  HM_QK,   sizeof(hm_block_mxfp4),  mxfp4_to_float,     mxfp4_from_float },
};

const hm_type_traits *hm_block_type_get(int t) {
    if (t < 0 || t >= HM_TYPE_COUNT || !block_types[t].name) return NULL;
    return &block_types[t];
}
