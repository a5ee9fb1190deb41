/* dot_scalar.c - reference dot products of weight rows with quantized activations: the integer
 * math of ggml's generic vec_dot kernels, summed exactly in int32 per (super-)block and combined
 * in float once per block. Every SIMD kernel is tested against these. */
#include "dot.h"
#include "quant_blocks.h"
#include <string.h>

/* The reference combines in a fixed order; keep the compiler from fusing a*b+c into an FMA. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static inline float h2f(hm_half h) { return hm_fp16_to_f32(h); }

/* ---- float weights, F32 activations: float products summed in double, as ggml_vec_dot_f32 ---- */

static float dot_f32(const void *w, const void *xq, int64_t n) {
    const float *a = w, *x = xq;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(a[i] * x[i]);
    return (float)s;
}

static float dot_f16(const void *w, const void *xq, int64_t n) {
    const uint16_t *a = w;
    const float *x = xq;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(hm_fp16_to_f32(a[i]) * x[i]);
    return (float)s;
}

static float dot_bf16(const void *w, const void *xq, int64_t n) {
    const uint16_t *a = w;
    const float *x = xq;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(hm_bf16_to_f32(a[i]) * x[i]);
    return (float)s;
}

/* ---- 32-element blocks against Q8_0 ---- */

static float dot_q4_0(const void *w, const void *xq, int64_t n) {
    const hm_block_q4_0 *x = w;
    const hm_block_q8_0 *y = xq;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / HM_QK; ib++) {
        int sumi = 0;
        for (int j = 0; j < HM_QK / 2; j++) {
            sumi += ((x[ib].qs[j] & 0x0F) - 8) * y[ib].qs[j];
            sumi += ((x[ib].qs[j] >> 4) - 8) * y[ib].qs[j + HM_QK / 2];
        }
        sumf += sumi * (h2f(x[ib].d) * h2f(y[ib].d));
    }
    return sumf;
}

/* x = d*q + m: the m part needs the activation block's sum, which Q8_0 lacks (ggml's Q8_1 stores
 * it rounded to fp16); we sum the int8s exactly instead. */
static float dot_q4_1(const void *w, const void *xq, int64_t n) {
    const hm_block_q4_1 *x = w;
    const hm_block_q8_0 *y = xq;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / HM_QK; ib++) {
        int sumi = 0, sumy = 0;
        for (int j = 0; j < HM_QK / 2; j++) {
            sumi += (x[ib].qs[j] & 0x0F) * y[ib].qs[j] + (x[ib].qs[j] >> 4) * y[ib].qs[j + HM_QK / 2];
            sumy += y[ib].qs[j] + y[ib].qs[j + HM_QK / 2];
        }
        const float dy = h2f(y[ib].d);
        sumf += sumi * (h2f(x[ib].d) * dy) + h2f(x[ib].m) * (dy * sumy);
    }
    return sumf;
}

static uint32_t load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float dot_q5_0(const void *w, const void *xq, int64_t n) {
    const hm_block_q5_0 *x = w;
    const hm_block_q8_0 *y = xq;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / HM_QK; ib++) {
        const uint32_t qh = load_u32le(x[ib].qh);
        int sumi = 0;
        for (int j = 0; j < HM_QK / 2; j++) {
            const int x0 = (int)((x[ib].qs[j] & 0x0F) | ((qh >> j) & 1) << 4) - 16;
            const int x1 = (int)((x[ib].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16;
            sumi += x0 * y[ib].qs[j] + x1 * y[ib].qs[j + HM_QK / 2];
        }
        sumf += sumi * (h2f(x[ib].d) * h2f(y[ib].d));
    }
    return sumf;
}

static float dot_q5_1(const void *w, const void *xq, int64_t n) {
    const hm_block_q5_1 *x = w;
    const hm_block_q8_0 *y = xq;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / HM_QK; ib++) {
        const uint32_t qh = load_u32le(x[ib].qh);
        int sumi = 0, sumy = 0;
        for (int j = 0; j < HM_QK / 2; j++) {
            const int x0 = (int)((x[ib].qs[j] & 0x0F) | ((qh >> j) & 1) << 4);
            const int x1 = (int)((x[ib].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
            sumi += x0 * y[ib].qs[j] + x1 * y[ib].qs[j + HM_QK / 2];
            sumy += y[ib].qs[j] + y[ib].qs[j + HM_QK / 2];
        }
        const float dy = h2f(y[ib].d);
        sumf += sumi * (h2f(x[ib].d) * dy) + h2f(x[ib].m) * (dy * sumy);
    }
    return sumf;
}

static float dot_q8_0(const void *w, const void *xq, int64_t n) {
    const hm_block_q8_0 *x = w, *y = xq;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / HM_QK; ib++) {
        int sumi = 0;
        for (int j = 0; j < HM_QK; j++) sumi += x[ib].qs[j] * y[ib].qs[j];
        sumf += sumi * (h2f(x[ib].d) * h2f(y[ib].d));
    }
    return sumf;
}

static float dot_mxfp4(const void *w, const void *xq, int64_t n) {
    const hm_block_mxfp4 *x = w;
    const hm_block_q8_0 *y = xq;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / HM_QK; ib++) {
        int sumi = 0;
        for (int j = 0; j < HM_QK / 2; j++)
            sumi += y[ib].qs[j] * hm_kvalues_mxfp4[x[ib].qs[j] & 0x0F] +
                    y[ib].qs[j + HM_QK / 2] * hm_kvalues_mxfp4[x[ib].qs[j] >> 4];
        sumf += (h2f(y[ib].d) * hm_e8m0_to_f32_half(x[ib].e)) * sumi;
    }
    return sumf;
}

/* ---- 256-element super-blocks against Q8_K ---- */

/* ggml's packing of Q4_K/Q5_K's 6-bit scale and min of group j (quant_k.c has the same) */
static void scale_min_k4(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

static float dot_q2_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q2_K *x = w;
    const hm_block_q8_K *y = xq;
    float sumf = 0;
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        const uint8_t *sc = x[i].scales;
        int summs = 0, isum = 0;
        for (int g = 0; g < 16; g++) summs += y[i].bsums[g] * (sc[g] >> 4);
        /* element 128k + 32j + l: bits 2j of qs[32k + l]; group (of 16) 8k + 2j + l/16 */
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 4; j++)
                for (int h = 0; h < 2; h++) {
                    int s = 0;
                    for (int l = 16 * h; l < 16 * h + 16; l++)
                        s += y[i].qs[128 * k + 32 * j + l] * ((x[i].qs[32 * k + l] >> (2 * j)) & 3);
                    isum += (sc[8 * k + 2 * j + h] & 0xF) * s;
                }
        const float dall = y[i].d * h2f(x[i].d), dmin = y[i].d * h2f(x[i].dmin);
        sumf += dall * isum - dmin * summs;
    }
    return sumf;
}

static int q3_K_scale(const uint8_t *s, int j) {
    const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

static float dot_q3_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q3_K *x = w;
    const hm_block_q8_K *y = xq;
    float sumf = 0;
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        int isum = 0;
        /* element 128h + 32j + l: bits 2j of qs[32h + l], high bit 4h + j of hmask[l] */
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int half = 0; half < 2; half++) {
                    int s = 0;
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        const int q = ((x[i].qs[32 * h + l] >> (2 * j)) & 3) -
                                      ((x[i].hmask[l] >> (4 * h + j)) & 1 ? 0 : 4);
                        s += q * y[i].qs[128 * h + 32 * j + l];
                    }
                    isum += q3_K_scale(x[i].scales, 8 * h + 2 * j + half) * s;
                }
        sumf += h2f(x[i].d) * y[i].d * isum;
    }
    return sumf;
}

static float dot_q4_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q4_K *x = w;
    const hm_block_q8_K *y = xq;
    float sumf = 0;
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        int isum = 0, summ = 0;
        for (int g = 0; g < 8; g++) { /* group g: nibble g%2 of qs[32(g/2) ..] */
            int sc, m, s = 0;
            scale_min_k4(g, x[i].scales, &sc, &m);
            for (int l = 0; l < 32; l++)
                s += ((x[i].qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 0xF) * y[i].qs[32 * g + l];
            isum += sc * s;
            summ += m * (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
        }
        const float d = h2f(x[i].d) * y[i].d, dmin = h2f(x[i].dmin) * y[i].d;
        sumf += d * isum - dmin * summ;
    }
    return sumf;
}

static float dot_q5_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q5_K *x = w;
    const hm_block_q8_K *y = xq;
    float sumf = 0;
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        int isum = 0, summ = 0;
        for (int g = 0; g < 8; g++) { /* as Q4_K, plus bit g of qh[l] */
            int sc, m, s = 0;
            scale_min_k4(g, x[i].scales, &sc, &m);
            for (int l = 0; l < 32; l++) {
                const int q = ((x[i].qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 0xF) | ((x[i].qh[l] >> g) & 1) << 4;
                s += q * y[i].qs[32 * g + l];
            }
            isum += sc * s;
            summ += m * (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
        }
        const float d = h2f(x[i].d) * y[i].d, dmin = h2f(x[i].dmin) * y[i].d;
        sumf += d * isum - dmin * summ;
    }
    return sumf;
}

static float dot_q6_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q6_K *x = w;
    const hm_block_q8_K *y = xq;
    float sumf = 0;
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        int isum = 0;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int e = 16 * g; e < 16 * g + 16; e++) {
                const int h = e / 128, k = e % 128 / 32, l = e % 32;
                const int lo = (x[i].ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF;
                const int hi = (x[i].qh[32 * h + l] >> (2 * k)) & 3;
                s += ((lo | hi << 4) - 32) * y[i].qs[e];
            }
            isum += x[i].scales[g] * s;
        }
        sumf += h2f(x[i].d) * y[i].d * isum;
    }
    return sumf;
}

static float dot_iq4_xs(const void *w, const void *xq, int64_t n) {
    const hm_block_iq4_xs *x = w;
    const hm_block_q8_K *y = xq;
    float sumf = 0;
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        int isum = 0;
        for (int g = 0; g < 8; g++) {
            const int ls = ((x[i].scales_l[g / 2] >> (4 * (g % 2))) & 0xF) | ((x[i].scales_h >> (2 * g)) & 3) << 4;
            const uint8_t *qs = x[i].qs + 16 * g;
            const int8_t *q8 = y[i].qs + 32 * g;
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += q8[j] * hm_kvalues_iq4nl[qs[j] & 0xF] + q8[j + 16] * hm_kvalues_iq4nl[qs[j] >> 4];
            isum += (ls - 32) * s;
        }
        sumf += h2f(x[i].d) * y[i].d * isum;
    }
    return sumf;
}

/* The reference quantizers are the table's own (ggml's quantize_row_q8_0_ref / q8_K_ref). */
static void quant_q8_0(const float *x, void *xq, int64_t n) { hm_type_get(HM_TYPE_Q8_0)->from_float(x, xq, n); }
static void quant_q8_K(const float *x, void *xq, int64_t n) { hm_type_get(HM_TYPE_Q8_K)->from_float(x, xq, n); }

const hm_dot_isa hm_dot_isa_scalar = {
    .name = "scalar",
    .dot = {
        [HM_TYPE_F32] = dot_f32,       [HM_TYPE_F16] = dot_f16,       [HM_TYPE_BF16] = dot_bf16,
        [HM_TYPE_Q4_0] = dot_q4_0,     [HM_TYPE_Q4_1] = dot_q4_1,     [HM_TYPE_Q5_0] = dot_q5_0,
        [HM_TYPE_Q5_1] = dot_q5_1,     [HM_TYPE_Q8_0] = dot_q8_0,     [HM_TYPE_MXFP4] = dot_mxfp4,
        [HM_TYPE_Q2_K] = dot_q2_K,     [HM_TYPE_Q3_K] = dot_q3_K,     [HM_TYPE_Q4_K] = dot_q4_K,
        [HM_TYPE_Q5_K] = dot_q5_K,     [HM_TYPE_Q6_K] = dot_q6_K,     [HM_TYPE_IQ4_XS] = dot_iq4_xs,
    },
    .quant_q8_0 = quant_q8_0,
    .quant_q8_K = quant_q8_K,
};
