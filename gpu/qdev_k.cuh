/* qdev_k.cuh - device-side decoders of the 256-element super-block formats (Q2_K Q3_K Q4_K Q5_K
 * Q6_K IQ4_XS); the contract of a type struct is in qdev.cuh. Parts:
 *   NT = 16 (Q2_K Q3_K Q6_K): thread t takes half h = t/8 and the 4 positions l0 = 4(t%8) ..+3
 *     within each of the 4 32-element runs of that half: elements 128h + 32j + l0 + i, whose
 *     2-bit fields share one 4-byte word; s = (l0 >= 16) picks the 16-element scale group.
 *   NT = 8 (Q4_K Q5_K): thread t takes 16 bytes of quants (one 16-byte load): low nibbles are
 *     elements 64p + 16u + i of group 2p, high nibbles 64p + 32 + 16u + i of group 2p+1 (p = t/2,
 *     u = t%2).
 *   NT = 16 (IQ4_XS): thread t takes 8 bytes of group t/2: elements 32g + 8u + i (low nibbles)
 *     and 32g + 16 + 8u + i (high). */
#ifndef HM_QDEV_K_CUH
#define HM_QDEV_K_CUH
#include "qdev.cuh"

/* x for a NT=16 part of the 2-bit-field layouts: v[4j + i] = x[128h + 32j + l0 + i] */
__device__ __forceinline__ void ld_x_k16(const float *xb, int t, float *v) {
    const float *p = xb + 128 * (t >> 3) + 4 * (t & 7);
#pragma unroll
    for (int j = 0; j < 4; j++) ld_x4v(p + 32 * j, v + 4 * j);
}

/* sum_i (byte i of q - off) * v[i] */
__device__ __forceinline__ float dot4(uint32_t q, float off, const float *v) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++) s = fmaf(bytef(q, i, off), v[i], s);
    return s;
}

/* scales[16] (low nibble scale, high nibble min) at 0, qs[64] at 16, d, dmin at 80.
 * x = d*(sc&15)*q - dmin*(sc>>4) */
struct TQ2_K {
    static constexpr int QK = 256, BS = 84, NT = 16;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        const int h = t >> 3, l0 = 4 * (t & 7), s = (t >> 2) & 1;
        float xv[16], sx[4];
        ld_x_k16(xb, t, xv);
#pragma unroll
        for (int j = 0; j < 4; j++) sx[j] = (xv[4 * j] + xv[4 * j + 1]) + (xv[4 * j + 2] + xv[4 * j + 3]);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint8_t *b = rows[r] + (size_t)ib * BS;
            const uint32_t q = ld_u32(b + 16 + 32 * h + l0);
            const uint32_t sc0 = ld_u32(b + 8 * h), sc1 = ld_u32(b + 8 * h + 4);
            const float2 dm = f16x2(ld_u32(b + 80));
            float sq = 0.f, sm = 0.f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t w = j < 2 ? sc0 : sc1; /* scale group 8h + 2j + s */
                const int k = 2 * (j & 1) + s;
                sq = fmaf(bytef(w & 0x0F0F0F0Fu, k, 0.f), dot4((q >> (2 * j)) & 0x03030303u, 0.f, xv + 4 * j), sq);
                sm = fmaf(bytef((w >> 4) & 0x0F0F0F0Fu, k, 0.f), sx[j], sm);
            }
            acc[r] = fmaf(dm.x, sq, fmaf(-dm.y, sm, acc[r]));
        }
    }
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const float d = gen_f16(b + 80), mn = gen_f16(b + 82);
        for (int i = 0; i < 4; i++) {
            const int e = 4 * r + i, sc = b[e / 16];
            const float dl = __fmul_rn(d, (float)(sc & 0xF)), ml = __fmul_rn(mn, (float)(sc >> 4));
            const int q = (b[16 + 32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
            o[i] = __fsub_rn(__fmul_rn(dl, (float)q), ml);
        }
    }
};

/* hmask[32] at 0, qs[64] at 32, scales[12] at 96, d at 108. x = d*(scale-32)*(q2 + 4*hbit - 4) */
struct TQ3_K {
    static constexpr int QK = 256, BS = 110, NT = 16;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        const int h = t >> 3, l0 = 4 * (t & 7), s = (t >> 2) & 1;
        float xv[16];
        ld_x_k16(xb, t, xv);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint8_t *b = rows[r] + (size_t)ib * BS;
            const uint32_t qs = ld_u32_a2(b + 32 + 32 * h + l0), hm = ld_u32_a2(b + l0);
            const uint32_t s0 = ld_u32_a2(b + 96), s1 = ld_u32_a2(b + 100), s2 = ld_u32_a2(b + 104);
            /* the 8 six-bit scales (+32) of half h, one a byte: groups 8h..8h+3 in a, 8h+4.. in c */
            const uint32_t a = ((s0 >> (4 * h)) & 0x0F0F0F0Fu) | ((s2 >> (4 * h)) & 0x03030303u) << 4;
            const uint32_t c = ((s1 >> (4 * h)) & 0x0F0F0F0Fu) | ((s2 >> (4 * h + 2)) & 0x03030303u) << 4;
            float sq = 0.f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t q = ((qs >> (2 * j)) & 0x03030303u) | ((hm >> (4 * h + j)) & 0x01010101u) << 2;
                sq = fmaf(bytef(j < 2 ? a : c, 2 * (j & 1) + s, 32.f), dot4(q, 4.f, xv + 4 * j), sq);
            }
            acc[r] = fmaf(ld_f16(b + 108), sq, acc[r]);
        }
    }
    __device__ static int scale(const uint8_t *sc, int j) { /* cpu/quant_k.c: q3_K_scale */
        const int lo = j < 8 ? sc[j] & 0xF : sc[j - 8] >> 4;
        const int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
        return (lo | hi << 4) - 32;
    }
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const float d = gen_f16(b + 108);
        for (int i = 0; i < 4; i++) {
            const int e = 4 * r + i;
            const float dl = __fmul_rn(d, (float)scale(b + 96, e / 16));
            const int hbit = (b[e % 32] >> (4 * (e / 128) + e % 128 / 32)) & 1;
            const int q2 = (b[32 + 32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
            o[i] = __fmul_rn(dl, (float)(q2 - (hbit ? 0 : 4)));
        }
    }
};

/* element e's 3-bit value (2 low bits + 4 * high bit) of a GGUF Q3_K chunk, and of a q3r one */
__host__ __device__ __forceinline__ int q3k_v(const uint8_t *b, int e) {
    const int g = e >> 5, l = e & 31;
    return ((b[32 + 32 * (g >> 2) + l] >> (2 * (g & 3))) & 3) | ((b[l] >> g) & 1) << 2;
}
__host__ __device__ __forceinline__ int q3r_v(const uint8_t *b, int e) {
    const int g = e >> 5, i = (e >> 2) & 7, k = e & 3;
    const uint8_t *q = b + 12 * g + k;
    if (i < 6) return (q[4 * (i >> 1)] >> (3 * (i & 1))) & 7;
    return ((q[4 * (i - 6)] >> 6) & 3) | ((q[8] >> i) & 1) << 2;
}
/* Q3_K chunks in the q3r arrangement (gemv_q8.cuh: Q8W_Q3_KR, the default for interleaved Q3_K): TQ3_K's deq4 on them,
 * bitwise (the prefill's dequantizer of interleaved experts) */
struct TQ3R {
    static constexpr int QK = 256, BS = 110;
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const float d = gen_f16(b + 108);
        for (int i = 0; i < 4; i++) {
            const int e = 4 * r + i, v = q3r_v(b, e);
            const float dl = __fmul_rn(d, (float)TQ3_K::scale(b + 96, e / 16));
            o[i] = __fmul_rn(dl, (float)(v - 4));
        }
    }
};

/* Q4_K/Q5_K: the 6-bit scales and mins of groups 2p and 2p+1 (bytes 2(p&1), +1 of the words)
 * from the 12 packed bytes s0..s2 at offset 4 (cpu/quant_k.c: get_scale_min_k4) */
__device__ __forceinline__ void k4_scales(const uint8_t *b, int p, uint32_t *sc, uint32_t *mn) {
    const uint32_t s0 = ld_u32(b + 4), s1 = ld_u32(b + 8), s2 = ld_u32(b + 12);
    if (p < 2) {
        *sc = s0 & 0x3F3F3F3Fu;
        *mn = s1 & 0x3F3F3F3Fu;
    } else {
        *sc = (s2 & 0x0F0F0F0Fu) | ((s0 >> 6) & 0x03030303u) << 4;
        *mn = ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 6) & 0x03030303u) << 4;
    }
}

__device__ __forceinline__ void k4_scale_min(const uint8_t *q, int j, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

/* x for a NT=8 part: va[i] = x[64p + 16u + i], vb[i] = x[64p + 32 + 16u + i] */
__device__ __forceinline__ void ld_x_k8(const float *xb, int t, float *va, float *vb) {
    const float *p = xb + 64 * (t >> 1) + 16 * (t & 1);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        ld_x4v(p + 4 * i, va + 4 * i);
        ld_x4v(p + 32 + 4 * i, vb + 4 * i);
    }
}

__device__ __forceinline__ float sum16(const float *v) {
    float s[4];
#pragma unroll
    for (int i = 0; i < 4; i++) s[i] = (v[4 * i] + v[4 * i + 1]) + (v[4 * i + 2] + v[4 * i + 3]);
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* Q4_K (HIGH = false): d, dmin at 0, scales at 4, qs[128] at 16; x = d*sc*q - dmin*m.
 * Q5_K (HIGH = true): qh[32] at 16, qs at 48; q gains 16 from bit g of qh[l]. */
template <bool HIGH>
struct TQ45_K {
    static constexpr int QK = 256, BS = HIGH ? 176 : 144, NT = 8, QS = HIGH ? 48 : 16;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        const int p = t >> 1, u = t & 1, k = 2 * (p & 1);
        float va[16], vb[16];
        ld_x_k8(xb, t, va, vb);
        const float sxa = sum16(va), sxb = sum16(vb);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint8_t *b = rows[r] + (size_t)ib * BS;
            const uint4 q4 = ld_u128(b + QS + 32 * p + 16 * u);
            const uint32_t q[4] = { q4.x, q4.y, q4.z, q4.w };
            uint32_t qh[4] = { 0, 0, 0, 0 };
            if (HIGH) {
                const uint4 h4 = ld_u128(b + 16 + 16 * u);
                qh[0] = h4.x; qh[1] = h4.y; qh[2] = h4.z; qh[3] = h4.w;
            }
            uint32_t sc, mn;
            k4_scales(b, p, &sc, &mn);
            const float2 dm = f16x2(ld_u32(b));
            float pa = 0.f, pb = 0.f;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t lo = q[i] & 0x0F0F0F0Fu, hi = (q[i] >> 4) & 0x0F0F0F0Fu;
                if (HIGH) {
                    lo |= ((qh[i] >> (2 * p)) & 0x01010101u) << 4;
                    hi |= ((qh[i] >> (2 * p + 1)) & 0x01010101u) << 4;
                }
                pa += dot4(lo, 0.f, va + 4 * i);
                pb += dot4(hi, 0.f, vb + 4 * i);
            }
            const float sq = fmaf(bytef(sc, k, 0.f), pa, bytef(sc, k + 1, 0.f) * pb);
            const float sm = fmaf(bytef(mn, k, 0.f), sxa, bytef(mn, k + 1, 0.f) * sxb);
            acc[r] = fmaf(dm.x, sq, fmaf(-dm.y, sm, acc[r]));
        }
    }
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const float d = gen_f16(b), mn = gen_f16(b + 2);
        for (int i = 0; i < 4; i++) {
            const int e = 4 * r + i, g = e / 32, l = e % 32;
            int sc, m;
            k4_scale_min(b + 4, g, &sc, &m);
            const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(mn, (float)m);
            int q = (b[QS + 32 * (g / 2) + l] >> (4 * (g % 2))) & 0xF;
            if (HIGH) q += (b[16 + l] >> g) & 1 ? 16 : 0;
            o[i] = __fsub_rn(__fmul_rn(d1, (float)q), m1);
        }
    }
};
typedef TQ45_K<false> TQ4_K;
typedef TQ45_K<true> TQ5_K;

/* ql[128] at 0, qh[64] at 128, scales[16] (int8) at 192, d at 208. x = d*sc*(q - 32) */
struct TQ6_K {
    static constexpr int QK = 256, BS = 210, NT = 16;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        const int h = t >> 3, l0 = 4 * (t & 7), s = (t >> 2) & 1;
        float xv[16];
        ld_x_k16(xb, t, xv);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint8_t *b = rows[r] + (size_t)ib * BS;
            const uint32_t ql0 = ld_u32_a2(b + 64 * h + l0), ql1 = ld_u32_a2(b + 64 * h + 32 + l0);
            const uint32_t qh = ld_u32_a2(b + 128 + 32 * h + l0);
            /* scales of groups 8h + 2k + s, offset by 128 to make them unsigned */
            const uint32_t sc0 = ld_u32_a2(b + 192 + 8 * h) ^ 0x80808080u, sc1 = ld_u32_a2(b + 196 + 8 * h) ^ 0x80808080u;
            float sq = 0.f;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t lo = ((k & 1 ? ql1 : ql0) >> (4 * (k >> 1))) & 0x0F0F0F0Fu;
                const uint32_t q = lo | ((qh >> (2 * k)) & 0x03030303u) << 4;
                sq = fmaf(bytef(k < 2 ? sc0 : sc1, 2 * (k & 1) + s, 128.f), dot4(q, 32.f, xv + 4 * k), sq);
            }
            acc[r] = fmaf(ld_f16(b + 208), sq, acc[r]);
        }
    }
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const float d = gen_f16(b + 208);
        for (int i = 0; i < 4; i++) {
            const int e = 4 * r + i, h = e / 128, k = e % 128 / 32, l = e % 32;
            const int lo = (b[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF;
            const int hi = (b[128 + 32 * h + l] >> (2 * k)) & 3;
            const int q = (int8_t)((lo | hi << 4) - 32);
            o[i] = __fmul_rn(__fmul_rn(d, (float)(int8_t)b[192 + e / 16]), (float)q);
        }
    }
};

/* d at 0, scales_h (u16) at 2, scales_l[4] at 4, qs[128] at 8. x = d*(ls-32)*iq4nl[q] */
struct TIQ4_XS {
    static constexpr int QK = 256, BS = 136, NT = 16;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        const int g = t >> 1, u = t & 1;
        float xl[8], xh[8];
        ld_x4v(xb + 32 * g + 8 * u, xl); ld_x4v(xb + 32 * g + 8 * u + 4, xl + 4);
        ld_x4v(xb + 32 * g + 16 + 8 * u, xh); ld_x4v(xb + 32 * g + 20 + 8 * u, xh + 4);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint8_t *b = rows[r] + (size_t)ib * BS;
            const uint2 q2 = ld_u64(b + 8 + 16 * g + 8 * u);
            const uint32_t q[2] = { q2.x, q2.y };
            const uint32_t dsh = ld_u32(b), sl = ld_u8(b + 4 + (g >> 1));
            const uint32_t ls = ((sl >> (4 * (g & 1))) & 0xF) | ((dsh >> (16 + 2 * g)) & 3) << 4;
            float s = 0.f;
#pragma unroll
            for (int w = 0; w < 2; w++) {
                /* nibbles in order: elements lo(4w), hi(4w), lo(4w+1), hi(4w+1), ... */
                const uint32_t v0 = lut16(q[w], HM_IQ4NL_T0, HM_IQ4NL_T1, HM_IQ4NL_T2, HM_IQ4NL_T3) ^ 0x80808080u;
                const uint32_t v1 = lut16(q[w] >> 16, HM_IQ4NL_T0, HM_IQ4NL_T1, HM_IQ4NL_T2, HM_IQ4NL_T3) ^ 0x80808080u;
#pragma unroll
                for (int k = 0; k < 2; k++) {
                    s = fmaf(bytef(v0, 2 * k, 128.f), xl[4 * w + k], s);
                    s = fmaf(bytef(v0, 2 * k + 1, 128.f), xh[4 * w + k], s);
                    s = fmaf(bytef(v1, 2 * k, 128.f), xl[4 * w + 2 + k], s);
                    s = fmaf(bytef(v1, 2 * k + 1, 128.f), xh[4 * w + 2 + k], s);
                }
            }
            const float dl = __half2float(__ushort_as_half((unsigned short)dsh)) * (__int_as_float(0x4B000000 | (int)ls) - 8388640.f);
            acc[r] = fmaf(dl, s, acc[r]);
        }
    }
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const float d = gen_f16(b);
        const uint32_t sh = gen_u16(b + 2);
        for (int i = 0; i < 4; i++) {
            const int e = 4 * r + i, g = e / 32;
            const int ls = ((b[4 + g / 2] >> (4 * (g % 2))) & 0xF) | ((sh >> (2 * g)) & 3) << 4;
            const float dl = __fmul_rn(d, (float)(ls - 32));
            o[i] = __fmul_rn(dl, lut_entry(nib32(b + 8 + 16 * g, e % 32), HM_IQ4NL_T0, HM_IQ4NL_T1, HM_IQ4NL_T2, HM_IQ4NL_T3));
        }
    }
};

#endif
