/* dot_avx512.c - AVX-512 (F/BW/VL/DQ) + VNNI dot products for the float types, Q8_0 and the
 * 256-element types: 64 elements per zmm, maddubs + vpdpwssd where the scale changes every 16 or
 * 32 elements, vpdpbusd for Q8_0. Built with -mavx512* flags, reached only after CPUID said yes. */
#include "dot.h"
#include "quant_blocks.h"
#include <immintrin.h>
#include <string.h>

static inline float h2f(hm_half h) { return _cvtsh_ss(h); }

static inline __m512i cat256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

static inline __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* s8*s8 pair sums to int16 through |x| * (y negated where x < 0): exact while |x|, |y| <= 127 */
static inline __m512i maddubs_ss(__m512i x, __m512i y) {
    const __m512i sy = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(x), _mm512_setzero_si512(), y);
    return _mm512_maddubs_epi16(_mm512_abs_epi8(x), sy);
}

/* ---- float weights, F32 activations; the tail is one masked step ---- */

static inline __m512 load_f32(const void *p, int64_t i, __mmask16 k) { return _mm512_maskz_loadu_ps(k, (const float *)p + i); }
static inline __m512 load_f16(const void *p, int64_t i, __mmask16 k) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i));
}
static inline __m512 load_bf16(const void *p, int64_t i, __mmask16 k) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i)), 16));
}

#define DOT_FLOAT(name, load, esize)                                                          \
    static float name(const void *w, const void *xq, int64_t n) {                            \
        const float *x = xq;                                                                  \
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                           \
        int64_t i = 0;                                                                        \
        for (; i + 64 <= n; i += 64) {                                                        \
            HM_PREFETCH((const char *)w + i * (esize), 64 * (esize), hm_gemv_pf);             \
            s0 = _mm512_fmadd_ps(load(w, i, 0xFFFF), _mm512_loadu_ps(x + i), s0);             \
            s1 = _mm512_fmadd_ps(load(w, i + 16, 0xFFFF), _mm512_loadu_ps(x + i + 16), s1);   \
            s2 = _mm512_fmadd_ps(load(w, i + 32, 0xFFFF), _mm512_loadu_ps(x + i + 32), s2);   \
            s3 = _mm512_fmadd_ps(load(w, i + 48, 0xFFFF), _mm512_loadu_ps(x + i + 48), s3);   \
        }                                                                                     \
        for (; i < n; i += 16) {                                                              \
            const __mmask16 k = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);      \
            s0 = _mm512_fmadd_ps(load(w, i, k), _mm512_maskz_loadu_ps(k, x + i), s0);         \
        }                                                                                     \
        return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3))); \
    }
DOT_FLOAT(dot_f32, load_f32, 4)
DOT_FLOAT(dot_f16, load_f16, 2)
DOT_FLOAT(dot_bf16, load_bf16, 2)

/* ---- 32-element blocks against Q8_0 ----
 * Q8_0 and Q4_0 have kernels here, one block per ymm. Q4_0/Q4_1/Q5_0/Q5_1/MXFP4 with two blocks per
 * zmm (vpdpbusd, the offset taken out through the activation sum) measured 25-45% slower than AVX2
 * at 16 threads on the device: the two fp16 scales per block and the inserts that pair blocks cost
 * more than VNNI saves. Q4_1/Q5_0/Q5_1/MXFP4 run the AVX2 kernels (gemv.c fills this table's holes
 * from AVX2). */

/* Q8_0 one block per ymm: pairing blocks into a zmm costs two inserts per pair, and the 16-bit
 * fp16 scales dominate anyway; VNNI replaces maddubs + madd. Two accumulators hide FMA latency. */
static inline __m256i dpbssd256(__m256i x, __m256i y) {
    const __m256i sy = _mm256_mask_sub_epi8(y, _mm256_movepi8_mask(x), _mm256_setzero_si256(), y);
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(x), sy);
}

static float dot_q8_0(const void *w, const void *xq, int64_t n) {
    const hm_block_q8_0 *x = w, *y = xq;
    const int64_t nb = n / HM_QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t ib = 0;
    for (; ib + 1 < nb; ib += 2) {
        HM_PREFETCH(&x[ib], 2 * sizeof x[ib], hm_gemv_pf);
        const __m256i p0 = dpbssd256(load256(x[ib].qs), load256(y[ib].qs));
        const __m256i p1 = dpbssd256(load256(x[ib + 1].qs), load256(y[ib + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].d) * h2f(y[ib].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib + 1].d) * h2f(y[ib + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    if (ib < nb) {
        const __m256i p = dpbssd256(load256(x[ib].qs), load256(y[ib].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].d) * h2f(y[ib].d)), _mm256_cvtepi32_ps(p), acc0);
    }
    return hm_hsum256_ps(_mm256_add_ps(acc0, acc1));
}

/* Q4_0, one block per ymm: vpdpbusd of the unsigned nibbles with the activation, less 8 times the
 * activation's sum (a second vpdpbusd); the fp16 scales of 8 blocks gathered and converted together
 * (per block: one permute instead of two scalar conversions, a multiply and a broadcast). */
/* one Q4_0 block against one Q8_0 block: the 8 int32 partial sums of (q - 8) * y */
static inline __m256i q4_0_block(const hm_block_q4_0 *x, const hm_block_q8_0 *y) {
    const __m128i t = _mm_loadu_si128((const __m128i *)x->qs);
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
    const __m256i v = load256(y->qs), z = _mm256_setzero_si256();
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(z, q, v), _mm256_dpbusd_epi32(z, _mm256_set1_epi8(8), v));
}

static float dot_q4_0(const void *w, const void *xq, int64_t n) {
    const hm_block_q4_0 *x = w;
    const hm_block_q8_0 *y = xq;
    const int64_t nb = n / HM_QK;
    const __m256i ix = _mm256_setr_epi32(0, 18, 36, 54, 72, 90, 108, 126), iy = _mm256_setr_epi32(0, 34, 68, 102, 136, 170, 204, 238);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t ib = 0;
    for (; ib + 8 <= nb; ib += 8) {
        HM_PREFETCH(&x[ib], 8 * sizeof x[ib], hm_gemv_pf);
        /* 32-bit words at each block's start: d in the low half (the rest is the block's own qs) */
        const __m128i hx = _mm256_cvtepi32_epi16(_mm256_i32gather_epi32((const int *)&x[ib], ix, 1));
        const __m128i hy = _mm256_cvtepi32_epi16(_mm256_i32gather_epi32((const int *)&y[ib], iy, 1));
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(hx), _mm256_cvtph_ps(hy));
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m256i p = q4_0_block(&x[ib + j], &y[ib + j]);
            const __m256 dj = _mm256_permutexvar_ps(_mm256_set1_epi32(j), d);
            if (j & 1) acc1 = _mm256_fmadd_ps(dj, _mm256_cvtepi32_ps(p), acc1);
            else acc0 = _mm256_fmadd_ps(dj, _mm256_cvtepi32_ps(p), acc0);
        }
    }
    for (; ib < nb; ib++)
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].d) * h2f(y[ib].d)), _mm256_cvtepi32_ps(q4_0_block(&x[ib], &y[ib])), acc0);
    return hm_hsum256_ps(_mm256_add_ps(acc0, acc1));
}

/* ---- 256-element super-blocks against Q8_K ----
 * Q2_K, Q3_K and Q6_K share a shape: a 128-element chunk is two zmm of 64 elements, and 16-bit
 * lane group L (16 elements) of part p of chunk h has scale group 8h + 4p + L. */

/* The 16 int8 scales of a super-block as int16 in the low half of a zmm (scale_quad's input). */
static inline __m512i scales16(__m128i sc) { return _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc)); }

/* 32 int16 lanes: scale g0 + L in 128-bit lane L (s16: scales16); one permute */
static inline __m512i scale_quad(__m512i s16, int g0) {
    const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16((short)g0),
                                         _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2,
                                                          1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
    return _mm512_permutexvar_epi16(idx, s16);
}

/* the bytes of a 32-byte field twice, shifted right per 16-bit lane by s0 (low half), s1 (high) */
static inline __m512i shifted2(__m256i v, int s0, int s1) {
    const __m512i cnt = cat256(_mm256_set1_epi16((short)s0), _mm256_set1_epi16((short)s1));
    return _mm512_srlv_epi16(cat256(v, v), cnt);
}

/* acc += f * (the 8 partial sums of scale[g] * bsums[g] over the 16 groups of 16): reduced once
 * per row instead of a horizontal sum per super-block */
static inline __m256 scaled_bsums_acc(__m256 acc, float f, __m512i s16, const int16_t *bsums) {
    const __m256i m = _mm256_madd_epi16(_mm512_castsi512_si256(s16), load256(bsums));
    return _mm256_fmadd_ps(_mm256_set1_ps(f), _mm256_cvtepi32_ps(m), acc);
}

static float dot_q2_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q2_K *x = w;
    const hm_block_q8_K *y = xq;
    const __m512i m3 = _mm512_set1_epi8(3);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        HM_PREFETCH(&x[i], sizeof x[i], hm_gemv_pf);
        const __m128i sc = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m512i scl = scales16(_mm_and_si128(sc, _mm_set1_epi8(0x0F)));
        const __m512i mins = scales16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0F)));
        __m512i sumi = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m256i q2 = load256(x[i].qs + 32 * h);
            for (int p = 0; p < 2; p++) { /* elements 128h + 64p + (0..63): bit pairs 4p, 4p+2 */
                const __m512i qv = _mm512_and_si512(shifted2(q2, 4 * p, 4 * p + 2), m3);
                const __m512i qy = _mm512_loadu_si512(y[i].qs + 128 * h + 64 * p);
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(qv, qy), scale_quad(scl, 8 * h + 4 * p));
            }
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(y[i].d * h2f(x[i].d)), _mm512_cvtepi32_ps(sumi), acc);
        accm = scaled_bsums_acc(accm, y[i].d * h2f(x[i].dmin), mins, y[i].bsums);
    }
    return _mm512_reduce_add_ps(acc) - hm_hsum256_ps(accm);
}

static float dot_q3_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q3_K *x = w;
    const hm_block_q8_K *y = xq;
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    __m512 acc = _mm512_setzero_ps();
    __m256 acco = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        HM_PREFETCH(&x[i], sizeof x[i], hm_gemv_pf);
        const __m512i sc = scales16(hm_q3_K_scales(x[i].scales));
        const __m512i hm = cat256(load256(x[i].hmask), load256(x[i].hmask));
        __m512i sumi = _mm512_setzero_si512();
        /* w = q + 4 = low 2 bits + 4 * high bit (bit 4h + j of hmask[l]); the 4 returns via bsums */
        for (int h = 0; h < 2; h++) {
            const __m256i q3 = load256(x[i].qs + 32 * h);
            for (int p = 0; p < 2; p++) {
                const int j0 = 2 * p; /* j = j0 in the low half, j0 + 1 in the high half */
                const __m512i hbit = cat256(_mm256_set1_epi8((char)(1 << (4 * h + j0))), _mm256_set1_epi8((char)(1 << (4 * h + j0 + 1))));
                __m512i qv = _mm512_and_si512(shifted2(q3, 2 * j0, 2 * j0 + 2), m3);
                qv = _mm512_mask_add_epi8(qv, _mm512_test_epi8_mask(hm, hbit), qv, four);
                const __m512i qy = _mm512_loadu_si512(y[i].qs + 128 * h + 64 * p);
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(qv, qy), scale_quad(sc, 8 * h + 4 * p));
            }
        }
        const float d = h2f(x[i].d) * y[i].d;
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
        acco = scaled_bsums_acc(acco, 4 * d, sc, y[i].bsums);
    }
    return _mm512_reduce_add_ps(acc) - hm_hsum256_ps(acco);
}

static float dot_q6_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q6_K *x = w;
    const hm_block_q8_K *y = xq;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
    __m512 acc = _mm512_setzero_ps();
    __m256 acco = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        HM_PREFETCH(&x[i], sizeof x[i], hm_gemv_pf);
        const __m512i sc = scales16(_mm_loadu_si128((const __m128i *)x[i].scales));
        __m512i sumi = _mm512_setzero_si512();
        /* w = q + 32 in 0..63; chunk h: ql[64h..] low nibbles are elements 0..63, high 64..127 */
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512(x[i].ql + 64 * h);
            const __m256i qh = load256(x[i].qh + 32 * h);
            const __m512i lo[2] = { _mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4) };
            for (int p = 0; p < 2; p++) { /* high bits 2k of qh[l] for k = 2p (low half), 2p + 1 */
                const __m512i hi = _mm512_slli_epi16(_mm512_and_si512(shifted2(qh, 4 * p, 4 * p + 2), m3), 4);
                const __m512i qv = _mm512_or_si512(lo[p], hi);
                const __m512i qy = _mm512_loadu_si512(y[i].qs + 128 * h + 64 * p);
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(qv, qy), scale_quad(sc, 8 * h + 4 * p));
            }
        }
        const float d = h2f(x[i].d) * y[i].d;
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
        acco = scaled_bsums_acc(acco, 32 * d, sc, y[i].bsums);
    }
    return _mm512_reduce_add_ps(acc) - hm_hsum256_ps(acco);
}

/* Q4_K/Q5_K: 8 six-bit scales (bytes 0..7) and mins (8..15), ggml's unpacking */
static inline void k4_scales_mins(const uint8_t *s, uint32_t utmp[4]) {
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    memcpy(utmp, s, 12);
    utmp[3] = ((utmp[2] >> 4) & k2) | (((utmp[1] >> 6) & k3) << 4);
    const uint32_t uaux = utmp[1] & k1;
    utmp[1] = (utmp[2] & k2) | (((utmp[0] >> 6) & k3) << 4);
    utmp[2] = uaux;
    utmp[0] &= k1;
}

/* min[g] * (bsums[2g] + bsums[2g+1]) in 8 int32 lanes; summed into a vector, reduced per row */
static inline __m256i k4_mins_prod(const uint32_t utmp[4], const int16_t *bsums) {
    const __m128i m8 = _mm_set_epi32(0, 0, (int)utmp[3], (int)utmp[2]);
    const __m128i dup = _mm_shuffle_epi8(m8, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
    return _mm256_madd_epi16(_mm256_cvtepu8_epi16(dup), load256(bsums));
}

/* pshufb pattern: 128-bit lanes 0-1 take int16 element a of their lane, lanes 2-3 element b */
static inline __m512i pick16(int a, int b) {
    return cat256(_mm256_set1_epi16((short)((2 * a + 1) << 8 | 2 * a)), _mm256_set1_epi16((short)((2 * b + 1) << 8 | 2 * b)));
}


/* Q4_K/Q5_K walk 128 elements per step: one 64-byte load of qs holds groups 4jj..4jj+3, low
 * nibbles = groups 4jj and 4jj+2, high = 4jj+1 and 4jj+3; the activation halves are paired to
 * match. Scale g of the 8 (int16, replicated in every 128-bit lane) is picked by pshufb. */
#define K4_BODY(extra_bits)                                                                       \
    uint32_t utmp[4];                                                                             \
    k4_scales_mins(x[i].scales, utmp);                                                            \
    /* from registers: a 64-bit load of utmp's two 32-bit stores would miss store forwarding */  \
    const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)utmp[1], (int)utmp[0]))); \
    __m512i sumi = _mm512_setzero_si512();                                                        \
    _Pragma("GCC unroll 2")                                                                       \
    for (int jj = 0; jj < 2; jj++) {                                                              \
        const __m512i q = _mm512_loadu_si512(x[i].qs + 64 * jj);                                  \
        __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4); \
        extra_bits                                                                                \
        const int8_t *q8 = y[i].qs + 128 * jj;                                                    \
        const __m512i ylo = cat256(load256(q8), load256(q8 + 64));                                \
        const __m512i yhi = cat256(load256(q8 + 32), load256(q8 + 96));                           \
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(lo, ylo), _mm512_shuffle_epi8(sc, pick16(4 * jj, 4 * jj + 2))); \
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(hi, yhi), _mm512_shuffle_epi8(sc, pick16(4 * jj + 1, 4 * jj + 3))); \
    }                                                                                             \
    acc = _mm512_fmadd_ps(_mm512_set1_ps(h2f(x[i].d) * y[i].d), _mm512_cvtepi32_ps(sumi), acc);   \
    accm = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].dmin) * y[i].d), _mm256_cvtepi32_ps(k4_mins_prod(utmp, y[i].bsums)), accm);

static float dot_q4_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q4_K *x = w;
    const hm_block_q8_K *y = xq;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        HM_PREFETCH(&x[i], sizeof x[i], hm_gemv_pf);
        K4_BODY()
    }
    return _mm512_reduce_add_ps(acc) - hm_hsum256_ps(accm);
}

static float dot_q5_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q5_K *x = w;
    const hm_block_q8_K *y = xq;
    const __m512i m4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        HM_PREFETCH(&x[i], sizeof x[i], hm_gemv_pf);
        /* the fifth bit of group g's element l is bit g of qh[l] */
        const __m512i hb = cat256(load256(x[i].qh), load256(x[i].qh));
        K4_BODY(
            const __m512i blo = cat256(_mm256_set1_epi8((char)(1 << (4 * jj))), _mm256_set1_epi8((char)(1 << (4 * jj + 2))));
            const __m512i bhi = cat256(_mm256_set1_epi8((char)(1 << (4 * jj + 1))), _mm256_set1_epi8((char)(1 << (4 * jj + 3))));
            lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(hb, blo), lo, sixteen);
            hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(hb, bhi), hi, sixteen);)
    }
    return _mm512_reduce_add_ps(acc) - hm_hsum256_ps(accm);
}

/* per-16-bit shift counts 0, 4, 0, 4 for the four 128-bit lanes: low nibbles, high, low, high */
static inline __m512i nib_shift(void) {
    const long long c4 = 0x0004000400040004LL;
    return _mm512_set_epi64(c4, c4, 0, 0, c4, c4, 0, 0);
}

static float dot_iq4_xs(const void *w, const void *xq, int64_t n) {
    const hm_block_iq4_xs *x = w;
    const hm_block_q8_K *y = xq;
    const __m512i values = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)hm_kvalues_iq4nl));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i cnt = nib_shift();
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        HM_PREFETCH(&x[i], sizeof x[i], hm_gemv_pf);
        __m512i sumi = _mm512_setzero_si512();
        for (int p = 0; p < 4; p++) { /* groups 2p, 2p+1: 16 bytes each -> lanes [lo, hi, lo, hi] */
            const __m512i q = _mm512_shuffle_i64x2(_mm512_castsi256_si512(load256(x[i].qs + 32 * p)),
                                                   _mm512_castsi256_si512(load256(x[i].qs + 32 * p)),
                                                   _MM_SHUFFLE(1, 1, 0, 0));
            const __m512i qx = _mm512_shuffle_epi8(values, _mm512_and_si512(_mm512_srlv_epi16(q, cnt), m4));
            const __m512i qy = _mm512_loadu_si512(y[i].qs + 64 * p);
            const int g = 2 * p;
            const int ls0 = ((x[i].scales_l[p] & 0xF) | ((x[i].scales_h >> (2 * g)) & 3) << 4) - 32;
            const int ls1 = ((x[i].scales_l[p] >> 4) | ((x[i].scales_h >> (2 * g + 2)) & 3) << 4) - 32;
            const __m512i scv = cat256(_mm256_set1_epi16((short)ls0), _mm256_set1_epi16((short)ls1));
            sumi = _mm512_dpwssd_epi32(sumi, maddubs_ss(qx, qy), scv);
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(h2f(x[i].d) * y[i].d), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

const hm_dot_isa hm_dot_isa_avx512 = {
    .name = "avx512",
    .dot = {
        [HM_TYPE_F32] = dot_f32,       [HM_TYPE_F16] = dot_f16,       [HM_TYPE_BF16] = dot_bf16,
        [HM_TYPE_Q8_0] = dot_q8_0,     [HM_TYPE_Q4_0] = dot_q4_0,
        [HM_TYPE_Q2_K] = dot_q2_K,     [HM_TYPE_Q3_K] = dot_q3_K,     [HM_TYPE_Q4_K] = dot_q4_K,
        [HM_TYPE_Q5_K] = dot_q5_K,     [HM_TYPE_Q6_K] = dot_q6_K,     [HM_TYPE_IQ4_XS] = dot_iq4_xs,
    },
    /* quantizers: AVX2's (filled in by gemv.c); quantizing x is a tiny share of a GEMV */
};
