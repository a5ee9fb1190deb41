/* gemv_q8_ref.h - CPU reference of the q8 GEMV path (gpu/gemv_q8.cuh, gpu_gemv_set_mode(1)),
 * written from the block layouts (cpu/quant_blocks.h) and cpu/dot_scalar.c's formulas, not from
 * the device code: x quantized per 32 values with the documented rounding, exact integer dot
 * products per scale group, combined in double. Shared by tests/test_gpu_gemv.cu (against the GPU)
 * and tests/test_gpu_decode_emu.cc (against the device helpers run on the CPU). The includer
 * includes quant.h and quant_blocks.h first (inside extern "C" from C++). */
#ifndef HM_GEMV_Q8_REF_H
#define HM_GEMV_Q8_REF_H
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int8_t q[32];
    float d;
    int s0, s1; /* sums of q[0..16), q[16..32) */
} q8r_group;

/* the types and widths the q8 path takes; everything else stays on the F32 path */
static inline int q8r_handles(int t, int ncols) {
    switch (t) {
    case HM_TYPE_Q4_0: case HM_TYPE_Q4_1: case HM_TYPE_Q5_0: case HM_TYPE_Q5_1: case HM_TYPE_Q8_0: case HM_TYPE_MXFP4:
        return ncols > 0 && ncols % 32 == 0 && ncols <= 32768; /* a partial last chunk is fine */
    case HM_TYPE_Q2_K: case HM_TYPE_Q3_K: case HM_TYPE_Q4_K: case HM_TYPE_Q5_K: case HM_TYPE_Q6_K: case HM_TYPE_IQ4_XS:
        return ncols > 0 && ncols % 256 == 0 && ncols <= 32768;
    default:
        return 0;
    }
}

/* amax = max|x|; all zero unless amax >= 2^-100; d = amax/127; q = round-half-even(x * (127/amax)) */
static inline void q8r_quantize(const float *x, int n, q8r_group *g) {
    for (int b = 0; b < n / 32; b++) {
        const float *v = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(v[i]));
        q8r_group *o = &g[b];
        o->s0 = o->s1 = 0;
        if (!(amax >= 0x1p-100f)) {
            memset(o->q, 0, sizeof o->q);
            o->d = 0.0f;
            continue;
        }
        const float id = 127.0f / amax;
        for (int i = 0; i < 32; i++) {
            const float p = v[i] * id;
            o->q[i] = (int8_t)(int)nearbyintf(p);
            if (i < 16) o->s0 += o->q[i];
            else o->s1 += o->q[i];
        }
        o->d = amax / 127.0f;
    }
}

/* The first 32-group of x[0..ncols) whose bytes in the GPU's chunk records at rec (gemv_q8.cuh:
 * 336 bytes a chunk of 256, q[256] then {float d; int16 s0, s1} per group) differ from
 * q8r_quantize's, or -1 */
static inline int q8r_records_differ(const uint8_t *rec, const float *x, int ncols) {
    for (int g = 0; g < ncols / 32; g++) {
        q8r_group r;
        q8r_quantize(x + 32 * g, 32, &r);
        const uint8_t *c = rec + (size_t)(g / 8) * 336;
        float d;
        int16_t s0, s1;
        memcpy(&d, c + 256 + 8 * (g % 8), 4);
        memcpy(&s0, c + 260 + 8 * (g % 8), 2);
        memcpy(&s1, c + 262 + 8 * (g % 8), 2);
        if (memcmp(c + 32 * (g % 8), r.q, 32) || memcmp(&d, &r.d, 4) || s0 != r.s0 || s1 != r.s1) return g;
    }
    return -1;
}

static inline double q8r_h(uint16_t h) { return hm_fp16_to_f32(h); }

/* adds one product term to the sum and its magnitude to the error scale */
static inline void q8r_add(double term, double *sum, double *scale) {
    *sum += term;
    *scale += fabs(term);
}

/* 16 activations starting at element e of the row: sum of q*w over them is computed by callers */
static inline int q8r_act(const q8r_group *g, int e) { return g[e / 32].q[e % 32]; }

/* One row (ncols elements of type t) dotted with the quantized activations; *scale gets the sum
 * of the magnitudes of the float terms (the error scale of a float evaluation). */
static inline double q8r_dot(int t, const uint8_t *row, const q8r_group *g, int ncols, double *scale) {
    double sum = 0;
    *scale = 0;
    const int nb32 = ncols / 32, nb256 = ncols / 256;
    switch (t) {
    case HM_TYPE_Q8_0:
        for (int ib = 0; ib < nb32; ib++) {
            const hm_block_q8_0 *b = (const hm_block_q8_0 *)row + ib;
            int s = 0;
            for (int j = 0; j < 32; j++) s += b->qs[j] * g[ib].q[j];
            q8r_add(q8r_h(b->d) * g[ib].d * s, &sum, scale);
        }
        break;
    case HM_TYPE_Q4_0:
        for (int ib = 0; ib < nb32; ib++) {
            const hm_block_q4_0 *b = (const hm_block_q4_0 *)row + ib;
            int s = 0;
            for (int j = 0; j < 16; j++) s += ((b->qs[j] & 15) - 8) * g[ib].q[j] + ((b->qs[j] >> 4) - 8) * g[ib].q[j + 16];
            q8r_add(q8r_h(b->d) * g[ib].d * s, &sum, scale);
        }
        break;
    case HM_TYPE_Q4_1:
        for (int ib = 0; ib < nb32; ib++) {
            const hm_block_q4_1 *b = (const hm_block_q4_1 *)row + ib;
            int s = 0;
            for (int j = 0; j < 16; j++) s += (b->qs[j] & 15) * g[ib].q[j] + (b->qs[j] >> 4) * g[ib].q[j + 16];
            q8r_add(q8r_h(b->d) * g[ib].d * s, &sum, scale);
            q8r_add(q8r_h(b->m) * g[ib].d * (g[ib].s0 + g[ib].s1), &sum, scale);
        }
        break;
    case HM_TYPE_Q5_0: case HM_TYPE_Q5_1:
        for (int ib = 0; ib < nb32; ib++) {
            const int min = t == HM_TYPE_Q5_1;
            const uint8_t *b = row + ib * (min ? sizeof(hm_block_q5_1) : sizeof(hm_block_q5_0));
            const uint8_t *qhp = b + (min ? 4 : 2), *qs = qhp + 4;
            const uint32_t qh = qhp[0] | qhp[1] << 8 | qhp[2] << 16 | (uint32_t)qhp[3] << 24;
            int s = 0;
            for (int j = 0; j < 16; j++) {
                const int x0 = (int)((qs[j] & 15) | ((qh >> j) & 1) << 4) - (min ? 0 : 16);
                const int x1 = (int)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - (min ? 0 : 16);
                s += x0 * g[ib].q[j] + x1 * g[ib].q[j + 16];
            }
            uint16_t d, m;
            memcpy(&d, b, 2);
            memcpy(&m, b + 2, 2);
            q8r_add(q8r_h(d) * g[ib].d * s, &sum, scale);
            if (min) q8r_add(q8r_h(m) * g[ib].d * (g[ib].s0 + g[ib].s1), &sum, scale);
        }
        break;
    case HM_TYPE_MXFP4:
        for (int ib = 0; ib < nb32; ib++) {
            const hm_block_mxfp4 *b = (const hm_block_mxfp4 *)row + ib;
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += hm_kvalues_mxfp4[b->qs[j] & 15] * g[ib].q[j] + hm_kvalues_mxfp4[b->qs[j] >> 4] * g[ib].q[j + 16];
            q8r_add((double)hm_e8m0_to_f32_half(b->e) * g[ib].d * s, &sum, scale);
        }
        break;
    case HM_TYPE_Q2_K:
        for (int ib = 0; ib < nb256; ib++) {
            const hm_block_q2_K *b = (const hm_block_q2_K *)row + ib;
            const q8r_group *a = g + 8 * ib;
            for (int G = 0; G < 16; G++) {
                int s = 0, sa = 0;
                for (int e = 16 * G; e < 16 * G + 16; e++) {
                    const int h = e / 128, j = e % 128 / 32, l = e % 32;
                    const int q = (b->qs[32 * h + l] >> (2 * j)) & 3;
                    s += q * q8r_act(a, e);
                    sa += q8r_act(a, e);
                }
                const double dx = a[G / 2].d;
                q8r_add(q8r_h(b->d) * dx * (b->scales[G] & 15) * s, &sum, scale);
                q8r_add(-q8r_h(b->dmin) * dx * (b->scales[G] >> 4) * sa, &sum, scale);
            }
        }
        break;
    case HM_TYPE_Q3_K:
        for (int ib = 0; ib < nb256; ib++) {
            const hm_block_q3_K *b = (const hm_block_q3_K *)row + ib;
            const q8r_group *a = g + 8 * ib;
            for (int G = 0; G < 16; G++) {
                int s = 0;
                for (int e = 16 * G; e < 16 * G + 16; e++) {
                    const int h = e / 128, j = e % 128 / 32, l = e % 32;
                    const int q = ((b->qs[32 * h + l] >> (2 * j)) & 3) - ((b->hmask[l] >> (4 * h + j)) & 1 ? 0 : 4);
                    s += q * q8r_act(a, e);
                }
                const int lo = G < 8 ? b->scales[G] & 15 : b->scales[G - 8] >> 4;
                const int hi = (b->scales[8 + G % 4] >> (2 * (G / 4))) & 3;
                q8r_add(q8r_h(b->d) * a[G / 2].d * ((lo | hi << 4) - 32) * s, &sum, scale);
            }
        }
        break;
    case HM_TYPE_Q4_K: case HM_TYPE_Q5_K:
        for (int ib = 0; ib < nb256; ib++) {
            const int high = t == HM_TYPE_Q5_K;
            const uint8_t *b = row + ib * (high ? sizeof(hm_block_q5_K) : sizeof(hm_block_q4_K));
            const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + (high ? 48 : 16);
            const q8r_group *a = g + 8 * ib;
            uint16_t d, dmin;
            memcpy(&d, b, 2);
            memcpy(&dmin, b + 2, 2);
            for (int G = 0; G < 8; G++) {
                int scv, m, s = 0;
                if (G < 4) {
                    scv = sc[G] & 63;
                    m = sc[G + 4] & 63;
                } else {
                    scv = (sc[G + 4] & 15) | (sc[G - 4] >> 6) << 4;
                    m = (sc[G + 4] >> 4) | (sc[G] >> 6) << 4;
                }
                for (int l = 0; l < 32; l++) {
                    int q = (qs[32 * (G / 2) + l] >> (4 * (G % 2))) & 15;
                    if (high) q |= ((qh[l] >> G) & 1) << 4;
                    s += q * a[G].q[l];
                }
                q8r_add(q8r_h(d) * a[G].d * scv * s, &sum, scale);
                q8r_add(-q8r_h(dmin) * a[G].d * m * (a[G].s0 + a[G].s1), &sum, scale);
            }
        }
        break;
    case HM_TYPE_Q6_K:
        for (int ib = 0; ib < nb256; ib++) {
            const hm_block_q6_K *b = (const hm_block_q6_K *)row + ib;
            const q8r_group *a = g + 8 * ib;
            for (int G = 0; G < 16; G++) {
                int s = 0;
                for (int e = 16 * G; e < 16 * G + 16; e++) {
                    const int h = e / 128, k = e % 128 / 32, l = e % 32;
                    const int lo = (b->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
                    const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
                    s += ((lo | hi << 4) - 32) * q8r_act(a, e);
                }
                q8r_add(q8r_h(b->d) * a[G / 2].d * b->scales[G] * s, &sum, scale);
            }
        }
        break;
    case HM_TYPE_IQ4_XS:
        for (int ib = 0; ib < nb256; ib++) {
            const hm_block_iq4_xs *b = (const hm_block_iq4_xs *)row + ib;
            const q8r_group *a = g + 8 * ib;
            for (int G = 0; G < 8; G++) {
                const int ls = ((b->scales_l[G / 2] >> (4 * (G % 2))) & 15) | ((b->scales_h >> (2 * G)) & 3) << 4;
                int s = 0;
                for (int j = 0; j < 16; j++)
                    s += hm_kvalues_iq4nl[b->qs[16 * G + j] & 15] * a[G].q[j] + hm_kvalues_iq4nl[b->qs[16 * G + j] >> 4] * a[G].q[j + 16];
                q8r_add(q8r_h(b->d) * a[G].d * (ls - 32) * s, &sum, scale);
            }
        }
        break;
    default:
        *scale = NAN;
        return NAN;
    }
    return sum;
}

/* The activation-quantization bound of |q8 result - exact result| for one row: w = the exactly
 * dequantized row (to_float), x the float activations, g their quantization. Each x_c is off by at
 * most d/2 (rounding) plus a few ulps of x_c (127/amax and amax/127 each round once); add a
 * float-rounding allowance for both evaluations. */
static inline double q8r_bound(const float *w, const float *x, const q8r_group *g, int ncols) {
    double b = 0, a = 0;
    for (int c = 0; c < ncols; c++) {
        b += fabs((double)w[c]) * (0.5 * g[c / 32].d + 4e-7 * fabs((double)x[c]));
        a += fabs((double)w[c] * x[c]);
    }
    return 1.0001 * b + 1e-4 * a;
}

#endif
