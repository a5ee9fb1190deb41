/* quant_k.c - ggml's 256-element super-block formats: Q2_K .. Q6_K, Q8_K (activations) and IQ4_XS.
 * The quantizers follow ggml's quantize_row_*_ref decisions (scale search, rounding, tie breaks)
 * operation for operation, so they produce the bytes ggml would; see quant_blocks.h for layouts. */
#include "quant_blocks.h"
#include <math.h>
#include <stdbool.h>
#include <string.h>

/* Bit-exactness needs a*b+c rounded twice, as ggml's scalar code and numpy do: no FMA contraction. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define GROUP_MAX_EPS 1e-15f /* below this a group counts as all zero */

const int8_t hm_kvalues_iq4nl[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int iclamp(int v, int lo, int hi) { return imax(lo, imin(hi, v)); }

/* Round to nearest, ties to even, by the float-add trick ggml uses; valid for |f| <= 2^22-1. */
static inline int nearest_int(float f) {
    float v = f + 12582912.f; /* 1.5 * 2^23: the integer lands in the low mantissa bits */
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* Symmetric scale for n values in [-nmax, nmax): start from max -> -nmax, then try 18 nearby
 * scales, keeping the one with the best weighted least-squares fit (weights x^2 when qw is NULL).
 * L[i] gets the level + nmax. Returns the scale. (ggml: make_qx_quants, rmse_type 1) */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *qw) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = iclamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = iclamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + iclamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's group scale: max -> -nmax, then up to 5 rounds of moving single levels while the
 * x^2-weighted fit improves. L[i] gets level + nmax. (ggml: make_q3_quants, do_rmse) */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = iclamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int new_l = iclamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l; sumlx = slx; suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric fit x ~ scale*L - the_min with L in [0, nmax]: a grid of nstep+1 candidate scales,
 * each solved for (scale, min) by weighted least squares, keeping the lowest weighted error
 * (absolute when use_mad). (ggml: make_qkx2_quants) */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                              bool use_mad) {
    float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)iclamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = iclamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* 2-bit fields: element 128h + 32j + l sits at bits 2j of byte 32h + l (Q2_K, Q3_K) */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < HM_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

static inline int get_2bit(const uint8_t *qs, int e) {
    return (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
}

/* ---- Q2_K ---- */

void hm_q2_K_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_q2_K *b = src;
    for (int64_t i = 0; i < n / HM_QK_K; i++, dst += HM_QK_K) {
        const float d = hm_fp16_to_f32(b[i].d), min = hm_fp16_to_f32(b[i].dmin);
        for (int g = 0; g < HM_QK_K / 16; g++) {
            const uint8_t sc = b[i].scales[g];
            const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
            for (int e = 16 * g; e < 16 * g + 16; e++) dst[e] = dl * get_2bit(b[i].qs, e) - ml;
        }
    }
}

void hm_q2_K_from_float(const float *x, void *dst, int64_t n) {
    hm_block_q2_K *y = dst;
    uint8_t L[HM_QK_K], Laux[16];
    float weights[16], mins[HM_QK_K / 16], scales[HM_QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / HM_QK_K; i++, x += HM_QK_K) {
        float max_scale = 0, max_min = 0; /* the min is subtracted, so scales are positive */
        for (int j = 0; j < HM_QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                         -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < HM_QK_K / 16; j++) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = hm_f32_to_fp16(max_scale / q4scale);
        } else {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = hm_f32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < HM_QK_K / 16; j++) y[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = hm_f32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = hm_f32_to_fp16(0.f);
        }
        /* requantize against the rounded scales that dequantization will see */
        for (int j = 0; j < HM_QK_K / 16; j++) {
            const float d = hm_fp16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = hm_fp16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (uint8_t)iclamp(nearest_int((x[16 * j + ii] + dm) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

/* ---- Q3_K: 16 six-bit scales; low nibbles in bytes 0..7 (j and j+8 share a byte), high pairs in 8..11 ---- */

static int q3_K_scale(const uint8_t *s, int j) {
    const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

void hm_q3_K_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_q3_K *b = src;
    for (int64_t i = 0; i < n / HM_QK_K; i++, dst += HM_QK_K) {
        const float d_all = hm_fp16_to_f32(b[i].d);
        for (int g = 0; g < HM_QK_K / 16; g++) {
            const float dl = d_all * q3_K_scale(b[i].scales, g);
            for (int e = 16 * g; e < 16 * g + 16; e++) {
                /* the high bit of element 128h + 32j + l is bit 4h + j of hmask[l] */
                const int hbit = (b[i].hmask[e % 32] >> (4 * (e / 128) + e % 128 / 32)) & 1;
                dst[e] = dl * (get_2bit(b[i].qs, e) - (hbit ? 0 : 4));
            }
        }
    }
}

void hm_q3_K_from_float(const float *x, void *dst, int64_t n) {
    hm_block_q3_K *y = dst;
    int8_t L[HM_QK_K];
    float scales[HM_QK_K / 16];
    for (int64_t i = 0; i < n / HM_QK_K; i++, x += HM_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < HM_QK_K / 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) { amax = fabsf(scales[j]); max_scale = scales[j]; }
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < HM_QK_K / 16; j++) {
                int l = iclamp((int8_t)nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                l >>= 4;
                y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            y[i].d = hm_f32_to_fp16(1 / iscale);
        } else {
            y[i].d = hm_f32_to_fp16(0.f);
        }
        for (int j = 0; j < HM_QK_K / 16; j++) {
            const float d = hm_fp16_to_f32(y[i].d) * q3_K_scale(y[i].scales, j);
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (int8_t)(iclamp(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
        }
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t Lu[HM_QK_K];
        for (int j = 0; j < HM_QK_K; j++) {
            int l = L[j];
            if (l > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1 << (j / 32));
                l -= 4;
            }
            Lu[j] = (uint8_t)l;
        }
        pack_2bit(Lu, y[i].qs);
    }
}

/* ---- Q4_K, Q5_K: 8 scales and 8 mins of 6 bits in 12 bytes ---- */

static void get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | (q[j - 4] >> 6) << 4);
        *m = (uint8_t)((q[j + 4] >> 4) | (q[j] >> 6) << 4);
    }
}

static void put_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t *q) {
    if (j < 4) {
        q[j] = ls;
        q[j + 4] = lm;
    } else {
        q[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
        q[j - 4] |= (uint8_t)((ls >> 4) << 6);
        q[j] |= (uint8_t)((lm >> 4) << 6);
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fits the 8 groups of 32, quantizes their scales
 * and mins to 6 bits, and requantizes x into L against the rounded values. */
static void k4_fit_superblock(const float *x, int nmax, float rmin, float rdelta, int nstep,
                              hm_half *dh, hm_half *dminh, uint8_t *sc12, uint8_t *L) {
    uint8_t Laux[32];
    float weights[32], mins[HM_QK_K / 32], scales[HM_QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < HM_QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                     rmin, rdelta, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < HM_QK_K / 32; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        put_scale_min_k4(j, ls < 63 ? ls : 63, lm < 63 ? lm : 63, sc12);
    }
    *dh = hm_f32_to_fp16(max_scale / 63.f);
    *dminh = hm_f32_to_fp16(max_min / 63.f);
    for (int j = 0; j < HM_QK_K / 32; j++) {
        uint8_t sc, m;
        get_scale_min_k4(j, sc12, &sc, &m);
        const float d = hm_fp16_to_f32(*dh) * sc;
        if (!d) continue;
        const float dm = hm_fp16_to_f32(*dminh) * m;
        for (int ii = 0; ii < 32; ii++)
            L[32 * j + ii] = (uint8_t)iclamp(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax);
    }
}

void hm_q4_K_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_q4_K *b = src;
    for (int64_t i = 0; i < n / HM_QK_K; i++, dst += HM_QK_K) {
        const float d = hm_fp16_to_f32(b[i].d), min = hm_fp16_to_f32(b[i].dmin);
        for (int g = 0; g < HM_QK_K / 32; g++) { /* group g: nibble g%2 of bytes 32*(g/2) .. +32 */
            uint8_t sc, m;
            get_scale_min_k4(g, b[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            const uint8_t *q = b[i].qs + 32 * (g / 2);
            for (int l = 0; l < 32; l++) dst[32 * g + l] = d1 * ((q[l] >> (4 * (g % 2))) & 0xF) - m1;
        }
    }
}

void hm_q4_K_from_float(const float *x, void *dst, int64_t n) {
    hm_block_q4_K *y = dst;
    uint8_t L[HM_QK_K];
    for (int64_t i = 0; i < n / HM_QK_K; i++, x += HM_QK_K) {
        memset(y[i].scales, 0, sizeof y[i].scales);
        k4_fit_superblock(x, 15, -1.f, 0.1f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int j = 0; j < HM_QK_K; j += 64)
            for (int l = 0; l < 32; l++) y[i].qs[j / 2 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
    }
}

void hm_q5_K_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_q5_K *b = src;
    for (int64_t i = 0; i < n / HM_QK_K; i++, dst += HM_QK_K) {
        const float d = hm_fp16_to_f32(b[i].d), min = hm_fp16_to_f32(b[i].dmin);
        for (int g = 0; g < HM_QK_K / 32; g++) { /* as Q4_K, plus bit g of qh[l] */
            uint8_t sc, m;
            get_scale_min_k4(g, b[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            const uint8_t *ql = b[i].qs + 32 * (g / 2);
            for (int l = 0; l < 32; l++)
                dst[32 * g + l] = d1 * (((ql[l] >> (4 * (g % 2))) & 0xF) + ((b[i].qh[l] >> g) & 1 ? 16 : 0)) - m1;
        }
    }
}

void hm_q5_K_from_float(const float *x, void *dst, int64_t n) {
    hm_block_q5_K *y = dst;
    uint8_t L[HM_QK_K];
    for (int64_t i = 0; i < n / HM_QK_K; i++, x += HM_QK_K) {
        memset(y[i].scales, 0, sizeof y[i].scales);
        k4_fit_superblock(x, 31, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int e = 0; e < HM_QK_K; e++)
            if (L[e] > 15) y[i].qh[e % 32] |= (uint8_t)(1 << (e / 32));
        for (int j = 0; j < HM_QK_K; j += 64)
            for (int l = 0; l < 32; l++)
                y[i].qs[j / 2 + l] = (uint8_t)((L[j + l] & 0xF) | (L[j + l + 32] & 0xF) << 4);
    }
}

/* ---- Q6_K: element 128h + 32k + l: low nibble (k>>1) of ql[64h + 32(k&1) + l], high bits 2k of qh[32h + l] ---- */

void hm_q6_K_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_q6_K *b = src;
    for (int64_t i = 0; i < n / HM_QK_K; i++, dst += HM_QK_K) {
        const float d = hm_fp16_to_f32(b[i].d);
        for (int e = 0; e < HM_QK_K; e++) {
            const int h = e / 128, k = e % 128 / 32, l = e % 32;
            const int lo = (b[i].ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF;
            const int hi = (b[i].qh[32 * h + l] >> (2 * k)) & 3;
            dst[e] = d * b[i].scales[e / 16] * (int8_t)((lo | hi << 4) - 32);
        }
    }
}

void hm_q6_K_from_float(const float *x, void *dst, int64_t n) {
    hm_block_q6_K *y = dst;
    int8_t L[HM_QK_K];
    float scales[HM_QK_K / 16];
    for (int64_t i = 0; i < n / HM_QK_K; i++, x += HM_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < HM_QK_K / 16; ib++) {
            scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, NULL);
            if (fabsf(scales[ib]) > max_abs_scale) { max_abs_scale = fabsf(scales[ib]); max_scale = scales[ib]; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = hm_f32_to_fp16(1 / iscale);
        for (int ib = 0; ib < HM_QK_K / 16; ib++) y[i].scales[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < HM_QK_K / 16; j++) {
            const float d = hm_fp16_to_f32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (int8_t)(iclamp(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0xF) | (Lh[l + 64] & 0xF) << 4);
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | (Lh[l + 96] & 0xF) << 4);
                qh[l] = (uint8_t)(Lh[l] >> 4 | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 | (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

/* ---- Q8_K ---- */

void hm_q8_K_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_q8_K *b = src;
    for (int64_t i = 0; i < n / HM_QK_K; i++, dst += HM_QK_K)
        for (int j = 0; j < HM_QK_K; j++) dst[j] = b[i].d * b[i].qs[j];
}

void hm_q8_K_from_float(const float *x, void *dst, int64_t n) {
    hm_block_q8_K *y = dst;
    for (int64_t i = 0; i < n / HM_QK_K; i++, x += HM_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < HM_QK_K; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        if (!amax) { /* ggml leaves bsums unwritten here; we zero them */
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max; /* 127, not 128: ggml's IQ2 AVX paths need it */
        for (int j = 0; j < HM_QK_K; j++) y[i].qs[j] = (int8_t)imin(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < HM_QK_K / 16; j++) {
            int sum = 0;
            for (int ii = 0; ii < 16; ii++) sum += y[i].qs[16 * j + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* ---- IQ4_XS: 8 groups of 32 on the non-linear iq4nl grid, 6-bit group scales ---- */

/* Index of the nearest of the 16 sorted values; ties go up. Comparing 2x with the (exact)
 * midpoint sum avoids rounding in the distances. (ggml: best_index_int8) */
static int best_index_iq4nl(float x) {
    const float x2 = x + x;
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        if (x2 >= (float)(hm_kvalues_iq4nl[j - 1] + hm_kvalues_iq4nl[j])) idx = j;
    }
    return idx;
}

void hm_iq4_xs_to_float(const void *src, float *dst, int64_t n) {
    const hm_block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        const float d = hm_fp16_to_f32(b[i].d);
        const uint8_t *qs = b[i].qs;
        for (int ib = 0; ib < HM_QK_K / 32; ib++, dst += 32, qs += 16) {
            const int ls = ((b[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | ((b[i].scales_h >> (2 * ib)) & 3) << 4;
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * hm_kvalues_iq4nl[qs[j] & 0xF];
                dst[j + 16] = dl * hm_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* Best scale for one group of 32 (weights x^2): start at max -> values[0], then 15 nearby. */
static float iq4_group_scale(const float *xb) {
    float amax = 0, max = 0, weight[32];
    for (int j = 0; j < 32; j++) {
        weight[j] = xb[j] * xb[j];
        if (fabsf(xb[j]) > amax) { amax = fabsf(xb[j]); max = xb[j]; }
    }
    if (amax < GROUP_MAX_EPS) return 0;
    const int8_t *values = hm_kvalues_iq4nl;
    const int ntry = 7;
    float d = -max / values[0], id = 1 / d, sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        const float q = values[best_index_iq4nl(id * xb[j])], w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; itry++) {
        id = (itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float q = values[best_index_iq4nl(id * xb[j])], w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

void hm_iq4_xs_from_float(const float *x, void *dst, int64_t n) {
    hm_block_iq4_xs *y = dst;
    float scales[HM_QK_K / 32];
    for (int64_t i = 0; i < n / HM_QK_K; i++, x += HM_QK_K) {
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < HM_QK_K / 32; ib++) {
            scales[ib] = iq4_group_scale(x + 32 * ib);
            if (fabsf(scales[ib]) > amax_scale) { amax_scale = fabsf(scales[ib]); max_scale = scales[ib]; }
        }
        const float d = -max_scale / 32, id = d ? 1 / d : 0.f;
        y[i].d = hm_f32_to_fp16(d);
        y[i].scales_h = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int ib = 0; ib < HM_QK_K / 32; ib++) {
            const int l = iclamp(nearest_int(id * scales[ib]), -32, 31);
            const float dl = d * l, idl = dl ? 1 / dl : 0.f; /* ggml uses the unrounded d here */
            const float *xb = x + 32 * ib;
            uint8_t *qs = y[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++)
                qs[j] = (uint8_t)(best_index_iq4nl(idl * xb[j]) | best_index_iq4nl(idl * xb[j + 16]) << 4);
            y[i].scales_l[ib / 2] |= (uint8_t)(((l + 32) & 0xF) << (4 * (ib % 2)));
            y[i].scales_h |= (uint16_t)(((l + 32) >> 4) << (2 * ib));
        }
    }
}
