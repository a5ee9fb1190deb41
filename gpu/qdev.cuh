/* qdev.cuh - device-side decoders of cpu/quant_blocks.h's formats: helpers, the float types and
 * the 32-element block types (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 MXFP4); the K-quants are in qdev_k.cuh.
 *
 * A type is a struct with:
 *   QK, BS  elements and bytes of one block (the float types use a vector of QK elements);
 *   NT      threads that share one block in a dot product; thread t of NT handles one "part";
 *   dot<NR>(rows, ib, t, xb, acc)  acc[r] += (part t of block ib of rows[r]) . (the same part of
 *           xb = x + ib*QK), for NR rows at once, so that each x value loaded serves NR rows;
 *   deq4(b, r, o)  o[0..4) = elements 4r..4r+3 of block b, computed exactly as cpu/quant*.c does
 *           (same float operations, same order, no FMA contraction): dequantization is bit-exact;
 *           generic loads only, so b may be in global or shared memory.
 * Dot products may reassociate (scales factored out of sums); only deq4 must be bit-exact.
 * Alignment: blocks of a 16-byte aligned matrix are at multiples of gcd(BS, 16); each dot reads
 * with the widest load that this guarantees. */
#ifndef HM_QDEV_CUH
#define HM_QDEV_CUH
#include <cuda_fp16.h>
#include <stdint.h>

/* ---- loads: weights and x through the read-only path ---- */

__device__ __forceinline__ uint32_t ld_u8(const uint8_t *p) { return __ldg(p); }
__device__ __forceinline__ uint32_t ld_u16(const uint8_t *p) { return __ldg((const unsigned short *)p); }
__device__ __forceinline__ uint32_t ld_u32(const uint8_t *p) { return __ldg((const unsigned int *)p); }
/* four bytes at a 2-byte aligned address */
__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t *p) { return ld_u16(p) | ld_u16(p + 2) << 16; }
/* four bytes at any address */
__device__ __forceinline__ uint32_t ld_u32_a1(const uint8_t *p) {
    return ld_u8(p) | ld_u8(p + 1) << 8 | ld_u8(p + 2) << 16 | ld_u8(p + 3) << 24;
}
__device__ __forceinline__ uint2 ld_u64(const uint8_t *p) { return __ldg((const uint2 *)p); }
__device__ __forceinline__ uint4 ld_u128(const uint8_t *p) { return __ldg((const uint4 *)p); }
__device__ __forceinline__ float ld_f16(const uint8_t *p) { return __half2float(__ushort_as_half((unsigned short)ld_u16(p))); }
__device__ __forceinline__ float4 ld_x4(const float *p) { return __ldg((const float4 *)p); }
/* generic loads (global or shared memory): what deq4 reads with, so that a dequantizer may run
 * it on a block staged in shared memory (the interleaved layout's prefill dequantizer) */
__device__ __forceinline__ uint32_t gen_u16(const uint8_t *p) { return *(const unsigned short *)p; }
__device__ __forceinline__ float gen_f16(const uint8_t *p) { return __half2float(__ushort_as_half((unsigned short)gen_u16(p))); }

/* 4 consecutive x values into v[0..4) */
__device__ __forceinline__ void ld_x4v(const float *p, float *v) {
    const float4 f = ld_x4(p);
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
}

/* ---- integer -> float without I2F (a quarter-rate instruction on sm_90) ---- */

/* byte k of w (an unsigned 0..255) minus off, exactly: the byte becomes the low mantissa bits of
 * 2^23, and one subtraction removes 2^23 + off. k must be a compile-time constant after
 * unrolling, or a run-time 0..3 (one extra instruction). off: a small integer. */
__device__ __forceinline__ float bytef(uint32_t w, int k, float off) {
    return __int_as_float((int)__byte_perm(w, 0x4B000000u, 0x7650u | (uint32_t)k)) - (8388608.f + off);
}

/* each 4-bit v (0..15) spread to bit 0 of bytes 0..3 (the shifted copies do not overlap) */
__device__ __forceinline__ uint32_t spread4(uint32_t v) { return (v * 0x00204081u) & 0x01010101u; }

/* Four table lookups: nibble n (bits 4n..4n+3, n < 4) of s indexes a 16-entry int8 table packed
 * little-endian in t0..t3; byte n of the result is the entry. */
__device__ __forceinline__ uint32_t lut16(uint32_t s, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3) {
    const uint32_t s7 = s & 0x7777u;
    const uint32_t lo = __byte_perm(t0, t1, s7), hi = __byte_perm(t2, t3, s7);
    return __byte_perm(lo, hi, 0x3210u | ((s & 0x8888u) >> 1));
}

__host__ __device__ constexpr uint32_t pack_i8x4(int a, int b, int c, int d) {
    return (uint32_t)(uint8_t)a | (uint32_t)(uint8_t)b << 8 | (uint32_t)(uint8_t)c << 16 | (uint32_t)(uint8_t)d << 24;
}

/* MXFP4's doubled e2m1 values and IQ4_NL's grid (cpu/quant_blocks.c, quant_k.c), packed */
#define HM_MXFP4_T0 pack_i8x4(0, 1, 2, 3)
#define HM_MXFP4_T1 pack_i8x4(4, 6, 8, 12)
#define HM_MXFP4_T2 pack_i8x4(0, -1, -2, -3)
#define HM_MXFP4_T3 pack_i8x4(-4, -6, -8, -12)
#define HM_IQ4NL_T0 pack_i8x4(-127, -104, -83, -65)
#define HM_IQ4NL_T1 pack_i8x4(-49, -35, -22, -10)
#define HM_IQ4NL_T2 pack_i8x4(1, 13, 25, 38)
#define HM_IQ4NL_T3 pack_i8x4(53, 69, 89, 113)

/* entry i of a packed table, as a float (for the exact dequantizers) */
__device__ __forceinline__ float lut_entry(int i, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3) {
    const uint32_t w = i < 4 ? t0 : i < 8 ? t1 : i < 12 ? t2 : t3;
    return (float)(int8_t)(w >> (8 * (i & 3)));
}

/* hm_e8m0_to_f32_half: 2^(e-128) exactly */
__device__ __forceinline__ float e8m0_half(uint32_t e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* ---- float types: QK-element vectors (V) when rows and x allow 16-byte loads, else scalars (S) ---- */

struct TF32V {
    static constexpr int QK = 8, BS = 32, NT = 1;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        float xv[8];
        ld_x4v(xb, xv); ld_x4v(xb + 4, xv + 4);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const float *w = (const float *)(rows[r] + (size_t)ib * BS);
            float wv[8];
            ld_x4v(w, wv); ld_x4v(w + 4, wv + 4);
#pragma unroll
            for (int i = 0; i < 8; i++) acc[r] = fmaf(wv[i], xv[i], acc[r]);
        }
    }
};
struct TF32S {
    static constexpr int QK = 1, BS = 4, NT = 1;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        const float xv = __ldg(xb);
#pragma unroll
        for (int r = 0; r < NR; r++) acc[r] = fmaf(__ldg((const float *)(rows[r] + (size_t)ib * BS)), xv, acc[r]);
    }
};

/* two halves (F16) or bfloat16s of a word, low first */
__device__ __forceinline__ float2 f16x2(uint32_t w) {
    return make_float2(__half2float(__ushort_as_half((unsigned short)w)), __half2float(__ushort_as_half((unsigned short)(w >> 16))));
}
__device__ __forceinline__ float2 bf16x2(uint32_t w) { return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u)); }

template <bool BF>
struct THalfV {
    static constexpr int QK = 8, BS = 16, NT = 1;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        float xv[8];
        ld_x4v(xb, xv); ld_x4v(xb + 4, xv + 4);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint4 u = ld_u128(rows[r] + (size_t)ib * BS);
            const uint32_t w[4] = { u.x, u.y, u.z, u.w };
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float2 f = BF ? bf16x2(w[i]) : f16x2(w[i]);
                acc[r] = fmaf(f.x, xv[2 * i], acc[r]);
                acc[r] = fmaf(f.y, xv[2 * i + 1], acc[r]);
            }
        }
    }
};
template <bool BF>
struct THalfS {
    static constexpr int QK = 1, BS = 2, NT = 1;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        const float xv = __ldg(xb);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint32_t h = ld_u16(rows[r] + (size_t)ib * BS);
            const float w = BF ? __uint_as_float(h << 16) : __half2float(__ushort_as_half((unsigned short)h));
            acc[r] = fmaf(w, xv, acc[r]);
        }
    }
};

/* ---- 32-element blocks. NT = 4: part t holds bytes 4t..4t+3 of the quants, i.e. elements
 * 4t..4t+3 (low nibbles) and 16+4t..16+4t+3 (high nibbles); Q8_0's part is elements 8t..8t+7. ---- */

/* x for a nibble part: v[0..4) = x[4t..], v[4..8) = x[16+4t..] */
__device__ __forceinline__ void ld_x_nib(const float *xb, int t, float *v) {
    ld_x4v(xb + 4 * t, v);
    ld_x4v(xb + 16 + 4 * t, v + 4);
}

/* sum_k (lo byte k - off) v[k] + (hi byte k - off) v[4+k] */
__device__ __forceinline__ float dot_nib(uint32_t lo, uint32_t hi, float off, const float *v) {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        s = fmaf(bytef(lo, k, off), v[k], s);
        s = fmaf(bytef(hi, k, off), v[4 + k], s);
    }
    return s;
}

__device__ __forceinline__ float sum8(const float *v) {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/* element j (0..31) of a nibble-packed qs: low nibble of byte j for j < 16, else high of j-16 */
__device__ __forceinline__ int nib32(const uint8_t *qs, int j) {
    const int byte = qs[j & 15];
    return j < 16 ? byte & 0xF : byte >> 4;
}

/* d at 0, qs at 2; x = d*(q-8) */
struct TQ4_0 {
    static constexpr int QK = 32, BS = 18, NT = 4;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        float xv[8];
        ld_x_nib(xb, t, xv);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint8_t *b = rows[r] + (size_t)ib * BS;
            const uint32_t q = ld_u32_a2(b + 2 + 4 * t);
            acc[r] = fmaf(ld_f16(b), dot_nib(q & 0x0F0F0F0Fu, (q >> 4) & 0x0F0F0F0Fu, 8.f, xv), acc[r]);
        }
    }
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const float d = gen_f16(b);
        for (int i = 0; i < 4; i++) o[i] = __fmul_rn((float)(nib32(b + 2, 4 * r + i) - 8), d);
    }
};

/* Q4_0 chunks in the q4r arrangement (gemv_q8.cuh: Q8W_Q4R, the default for interleaved Q4_0): TQ4_0's deq4 on them,
 * bitwise, over a 256-element chunk (the prefill's dequantizer of interleaved experts) */
struct TQ4R {
    static constexpr int QK = 256, BS = 144;
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const int g = r >> 3;   /* 8 parts of 4 a block */
        const float d = gen_f16(b + 2 * g);
        for (int i = 0; i < 4; i++) o[i] = __fmul_rn((float)(nib32(b + 16 + 16 * g, 4 * (r & 7) + i) - 8), d);
    }
};

/* d, m at 0, 2; qs at 4; x = d*q + m */
struct TQ4_1 {
    static constexpr int QK = 32, BS = 20, NT = 4;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        float xv[8];
        ld_x_nib(xb, t, xv);
        const float sx = sum8(xv);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint8_t *b = rows[r] + (size_t)ib * BS;
            const uint32_t q = ld_u32(b + 4 + 4 * t), dm = ld_u32(b);
            const float2 f = f16x2(dm);
            acc[r] = fmaf(f.x, dot_nib(q & 0x0F0F0F0Fu, (q >> 4) & 0x0F0F0F0Fu, 0.f, xv), fmaf(f.y, sx, acc[r]));
        }
    }
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const float d = gen_f16(b), m = gen_f16(b + 2);
        for (int i = 0; i < 4; i++) o[i] = __fadd_rn(__fmul_rn((float)nib32(b + 4, 4 * r + i), d), m);
    }
};

/* the fifth bits of a part: element j's bit is bit j of qh; returns them at bit 4 of each byte */
__device__ __forceinline__ void q5_high(uint32_t qh, int t, uint32_t *hlo, uint32_t *hhi) {
    *hlo = spread4((qh >> (4 * t)) & 0xF) << 4;
    *hhi = spread4((qh >> (16 + 4 * t)) & 0xF) << 4;
}

__device__ __forceinline__ int q5_elem(const uint8_t *qh, const uint8_t *qs, int j) {
    const uint32_t h = qh[0] | qh[1] << 8 | qh[2] << 16 | (uint32_t)qh[3] << 24;
    return nib32(qs, j) | ((h >> j) & 1) << 4;
}

/* d at 0, qh at 2, qs at 6; x = d*(q-16) */
struct TQ5_0 {
    static constexpr int QK = 32, BS = 22, NT = 4;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        float xv[8];
        ld_x_nib(xb, t, xv);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint8_t *b = rows[r] + (size_t)ib * BS;
            const uint32_t q = ld_u32_a2(b + 6 + 4 * t);
            uint32_t hl, hh;
            q5_high(ld_u32_a2(b + 2), t, &hl, &hh);
            acc[r] = fmaf(ld_f16(b), dot_nib((q & 0x0F0F0F0Fu) | hl, ((q >> 4) & 0x0F0F0F0Fu) | hh, 16.f, xv), acc[r]);
        }
    }
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const float d = gen_f16(b);
        for (int i = 0; i < 4; i++) o[i] = __fmul_rn((float)(q5_elem(b + 2, b + 6, 4 * r + i) - 16), d);
    }
};

/* d, m at 0, 2; qh at 4; qs at 8; x = d*q + m */
struct TQ5_1 {
    static constexpr int QK = 32, BS = 24, NT = 4;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        float xv[8];
        ld_x_nib(xb, t, xv);
        const float sx = sum8(xv);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint8_t *b = rows[r] + (size_t)ib * BS;
            const uint32_t q = ld_u32(b + 8 + 4 * t);
            uint32_t hl, hh;
            q5_high(ld_u32(b + 4), t, &hl, &hh);
            const float2 f = f16x2(ld_u32(b));
            acc[r] = fmaf(f.x, dot_nib((q & 0x0F0F0F0Fu) | hl, ((q >> 4) & 0x0F0F0F0Fu) | hh, 0.f, xv), fmaf(f.y, sx, acc[r]));
        }
    }
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const float d = gen_f16(b), m = gen_f16(b + 2);
        for (int i = 0; i < 4; i++) o[i] = __fadd_rn(__fmul_rn((float)q5_elem(b + 4, b + 8, 4 * r + i), d), m);
    }
};

/* d at 0, qs (int8) at 2; x = d*q. Part t: elements 8t..8t+7. */
struct TQ8_0 {
    static constexpr int QK = 32, BS = 34, NT = 4;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        float xv[8];
        ld_x4v(xb + 8 * t, xv); ld_x4v(xb + 8 * t + 4, xv + 4);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint8_t *b = rows[r] + (size_t)ib * BS;
            const uint32_t q0 = ld_u32_a2(b + 2 + 8 * t) ^ 0x80808080u, q1 = ld_u32_a2(b + 6 + 8 * t) ^ 0x80808080u;
            float s = 0.f;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                s = fmaf(bytef(q0, k, 128.f), xv[k], s);
                s = fmaf(bytef(q1, k, 128.f), xv[4 + k], s);
            }
            acc[r] = fmaf(ld_f16(b), s, acc[r]);
        }
    }
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const float d = gen_f16(b);
        for (int i = 0; i < 4; i++) o[i] = __fmul_rn((float)(int8_t)b[2 + 4 * r + i], d);
    }
};

/* e (E8M0) at 0, qs at 1; x = table[q] * 2^(e-128). Blocks are byte aligned: byte loads. */
struct TMXFP4 {
    static constexpr int QK = 32, BS = 17, NT = 4;
    template <int NR>
    __device__ static void dot(const uint8_t *const *rows, int ib, int t, const float *xb, float *acc) {
        float xv[8];
        ld_x_nib(xb, t, xv);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint8_t *b = rows[r] + (size_t)ib * BS;
            const uint32_t q = ld_u32_a1(b + 1 + 4 * t);
            /* the nibbles of q in order are elements 4t, 16+4t, 4t+1, 16+4t+1, ... */
            const uint32_t v0 = lut16(q, HM_MXFP4_T0, HM_MXFP4_T1, HM_MXFP4_T2, HM_MXFP4_T3) ^ 0x80808080u;
            const uint32_t v1 = lut16(q >> 16, HM_MXFP4_T0, HM_MXFP4_T1, HM_MXFP4_T2, HM_MXFP4_T3) ^ 0x80808080u;
            float s = 0.f;
#pragma unroll
            for (int k = 0; k < 2; k++) {
                s = fmaf(bytef(v0, 2 * k, 128.f), xv[k], s);
                s = fmaf(bytef(v0, 2 * k + 1, 128.f), xv[4 + k], s);
                s = fmaf(bytef(v1, 2 * k, 128.f), xv[2 + k], s);
                s = fmaf(bytef(v1, 2 * k + 1, 128.f), xv[6 + k], s);
            }
            acc[r] = fmaf(e8m0_half(ld_u8(b)), s, acc[r]);
        }
    }
    __device__ static void deq4(const uint8_t *b, int r, float *o) {
        const float d = e8m0_half(b[0]);
        for (int i = 0; i < 4; i++)
            o[i] = __fmul_rn(lut_entry(nib32(b + 1, 4 * r + i), HM_MXFP4_T0, HM_MXFP4_T1, HM_MXFP4_T2, HM_MXFP4_T3), d);
    }
};

#endif
