/* dot_avx2.c - AVX2/FMA/F16C dot products and activation quantizers (ggml's x86 tricks: maddubs on
 * unsigned x signed bytes, nibbles unpacked 32 at a time). Compiled with -mavx2 -mfma -mf16c and
 * reached only through the table after CPUID said yes. */
#include "dot.h"
#include "quant_blocks.h"
#include <immintrin.h>
#include <math.h>
#include <string.h>

static inline float h2f(hm_half h) { return _cvtsh_ss(h); }

static inline int hsum_epi32(__m256i v) {
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

/* Sums of 4 adjacent u8*s8 products in 8 int32 lanes. maddubs saturates its int16 pair sums, so
 * callers keep |u*s| pairs below 2^15: weights of <= 7 bits or the sign trick below. */
static inline __m256i dot_us(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* s8*s8 through |x| * (y with x's sign); exact while y != -128 (our quantizers stop at -127). */
static inline __m256i dot_ss(__m256i x, __m256i y) {
    return dot_us(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15), then high ones (16..31) */
static inline __m256i nibbles32(const uint8_t *qs) {
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

/* 32 bits (little endian) -> 32 bytes, 0xFF where bit j is set */
static inline __m256i bits32(const uint8_t *qh) {
    uint32_t x32;
    memcpy(&x32, qh, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)); /* every bit but bit (byte % 8) */
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* 16 int16 lanes: scales[2p] in the low 8, scales[2p+1] in the high 8 (a 32-element chunk of
 * two 16-element groups); scales are 16 int8 in sc. */
static inline __m256i scale_pair(__m128i sc, int p) {
    const __m128i idx = _mm_set_epi64x((long long)(0x0101010101010101ULL * (uint64_t)(2 * p + 1)),
                                       (long long)(0x0101010101010101ULL * (uint64_t)(2 * p)));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, idx));
}

/* ---- float weights, F32 activations ---- */

static float dot_f32(const void *w, const void *xq, int64_t n) {
    const float *a = w, *x = xq;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        HM_PREFETCH(a + i, 32 * sizeof *a, hm_gemv_pf);
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(x + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(x + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(x + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s0);
    float s = hm_hsum256_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * x[i];
    return s;
}

static inline __m256 load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 load_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

#define DOT_HALF(name, load, scalar)                                                          \
    static float name(const void *w, const void *xq, int64_t n) {                            \
        const uint16_t *a = w;                                                                \
        const float *x = xq;                                                                  \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                           \
        int64_t i = 0;                                                                        \
        for (; i + 32 <= n; i += 32) {                                                        \
            HM_PREFETCH(a + i, 32 * sizeof *a, hm_gemv_pf);                                   \
            s0 = _mm256_fmadd_ps(load(a + i), _mm256_loadu_ps(x + i), s0);                    \
            s1 = _mm256_fmadd_ps(load(a + i + 8), _mm256_loadu_ps(x + i + 8), s1);            \
            s2 = _mm256_fmadd_ps(load(a + i + 16), _mm256_loadu_ps(x + i + 16), s2);          \
            s3 = _mm256_fmadd_ps(load(a + i + 24), _mm256_loadu_ps(x + i + 24), s3);          \
        }                                                                                     \
        for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load(a + i), _mm256_loadu_ps(x + i), s0); \
        float s = hm_hsum256_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));       \
        for (; i < n; i++) s += scalar(a[i]) * x[i];                                          \
        return s;                                                                             \
    }
DOT_HALF(dot_f16, load_f16, hm_fp16_to_f32)
DOT_HALF(dot_bf16, load_bf16, hm_bf16_to_f32)

/* ---- 32-element blocks against Q8_0; two accumulators hide the FMA latency ---- */

static float dot_q8_0(const void *w, const void *xq, int64_t n) {
    const hm_block_q8_0 *x = w, *y = xq;
    const int64_t nb = n / HM_QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t ib = 0;
    for (; ib + 1 < nb; ib += 2) {
        HM_PREFETCH(&x[ib], 2 * sizeof x[ib], hm_gemv_pf);
        const __m256i p0 = dot_ss(_mm256_loadu_si256((const __m256i *)x[ib].qs), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const __m256i p1 = dot_ss(_mm256_loadu_si256((const __m256i *)x[ib + 1].qs), _mm256_loadu_si256((const __m256i *)y[ib + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].d) * h2f(y[ib].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib + 1].d) * h2f(y[ib + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; ib < nb; ib++) {
        const __m256i p = dot_ss(_mm256_loadu_si256((const __m256i *)x[ib].qs), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].d) * h2f(y[ib].d)), _mm256_cvtepi32_ps(p), acc0);
    }
    return hm_hsum256_ps(_mm256_add_ps(acc0, acc1));
}

static float dot_q4_0(const void *w, const void *xq, int64_t n) {
    const hm_block_q4_0 *x = w;
    const hm_block_q8_0 *y = xq;
    const int64_t nb = n / HM_QK;
    const __m256i off = _mm256_set1_epi8(8);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t ib = 0;
    for (; ib + 1 < nb; ib += 2) {
        HM_PREFETCH(&x[ib], 2 * sizeof x[ib], hm_gemv_pf);
        const __m256i p0 = dot_ss(_mm256_sub_epi8(nibbles32(x[ib].qs), off), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const __m256i p1 = dot_ss(_mm256_sub_epi8(nibbles32(x[ib + 1].qs), off), _mm256_loadu_si256((const __m256i *)y[ib + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].d) * h2f(y[ib].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib + 1].d) * h2f(y[ib + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; ib < nb; ib++) {
        const __m256i p = dot_ss(_mm256_sub_epi8(nibbles32(x[ib].qs), off), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].d) * h2f(y[ib].d)), _mm256_cvtepi32_ps(p), acc0);
    }
    return hm_hsum256_ps(_mm256_add_ps(acc0, acc1));
}

/* d*q + m types: unsigned q straight into maddubs, plus m times the activation block's sum */
static float dot_q4_1(const void *w, const void *xq, int64_t n) {
    const hm_block_q4_1 *x = w;
    const hm_block_q8_0 *y = xq;
    const __m256i ones = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps(), accm = acc;
    for (int64_t ib = 0; ib < n / HM_QK; ib++) {
        HM_PREFETCH(&x[ib], sizeof x[ib], hm_gemv_pf);
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[ib].qs);
        const float dy = h2f(y[ib].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].d) * dy), _mm256_cvtepi32_ps(dot_us(nibbles32(x[ib].qs), qy)), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].m) * dy), _mm256_cvtepi32_ps(dot_us(ones, qy)), accm);
    }
    return hm_hsum256_ps(_mm256_add_ps(acc, accm));
}

static float dot_q5_0(const void *w, const void *xq, int64_t n) {
    const hm_block_q5_0 *x = w;
    const hm_block_q8_0 *y = xq;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / HM_QK; ib++) {
        HM_PREFETCH(&x[ib], sizeof x[ib], hm_gemv_pf);
        /* a clear fifth bit means q - 16 < 0: or-ing 0xF0 makes the byte that negative value */
        const __m256i hi = _mm256_andnot_si256(bits32(x[ib].qh), _mm256_set1_epi8((char)0xF0));
        const __m256i qx = _mm256_or_si256(nibbles32(x[ib].qs), hi);
        const __m256i p = dot_ss(qx, _mm256_loadu_si256((const __m256i *)y[ib].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].d) * h2f(y[ib].d)), _mm256_cvtepi32_ps(p), acc);
    }
    return hm_hsum256_ps(acc);
}

static float dot_q5_1(const void *w, const void *xq, int64_t n) {
    const hm_block_q5_1 *x = w;
    const hm_block_q8_0 *y = xq;
    const __m256i ones = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps(), accm = acc;
    for (int64_t ib = 0; ib < n / HM_QK; ib++) {
        HM_PREFETCH(&x[ib], sizeof x[ib], hm_gemv_pf);
        const __m256i hi = _mm256_and_si256(bits32(x[ib].qh), _mm256_set1_epi8(0x10));
        const __m256i qx = _mm256_or_si256(nibbles32(x[ib].qs), hi);
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[ib].qs);
        const float dy = h2f(y[ib].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].d) * dy), _mm256_cvtepi32_ps(dot_us(qx, qy)), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].m) * dy), _mm256_cvtepi32_ps(dot_us(ones, qy)), accm);
    }
    return hm_hsum256_ps(_mm256_add_ps(acc, accm));
}

static float dot_mxfp4(const void *w, const void *xq, int64_t n) {
    const hm_block_mxfp4 *x = w;
    const hm_block_q8_0 *y = xq;
    const __m128i values = _mm_loadu_si128((const __m128i *)hm_kvalues_mxfp4);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / HM_QK; ib++) {
        HM_PREFETCH(&x[ib], sizeof x[ib], hm_gemv_pf);
        const __m128i q = _mm_loadu_si128((const __m128i *)x[ib].qs);
        const __m128i lo = _mm_shuffle_epi8(values, _mm_and_si128(q, m4));
        const __m128i hi = _mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
        const __m256i p = dot_ss(_mm256_set_m128i(hi, lo), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(y[ib].d) * hm_e8m0_to_f32_half(x[ib].e)), _mm256_cvtepi32_ps(p), acc);
    }
    return hm_hsum256_ps(acc);
}

/* ---- 256-element super-blocks against Q8_K ---- */

/* acc += f * (the 8 partial sums of scale[g] * bsums[g], the offset and min corrections): reduced
 * once per row instead of a horizontal sum per super-block */
static inline __m256 scaled_bsums_acc(__m256 acc, float f, __m128i sc8, const int16_t *bsums) {
    const __m256i m = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)bsums));
    return _mm256_fmadd_ps(_mm256_set1_ps(f), _mm256_cvtepi32_ps(m), acc);
}

static float dot_q2_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q2_K *x = w;
    const hm_block_q8_K *y = xq;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        HM_PREFETCH(&x[i], sizeof x[i], hm_gemv_pf);
        const __m128i sc = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m128i mins = _mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0F));
        const __m128i scl = _mm_and_si128(sc, _mm_set1_epi8(0x0F));
        __m256i sumi = _mm256_setzero_si256();
        for (int k = 0; k < 2; k++) {
            const __m256i q2 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * k));
            for (int j = 0; j < 4; j++) { /* elements 128k + 32j + l: bits 2j of q2 byte l */
                const __m256i qv = _mm256_and_si256(_mm256_srli_epi16(q2, 2 * j), m3);
                const __m256i qy = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * k + 32 * j));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale_pair(scl, 4 * k + j), _mm256_maddubs_epi16(qv, qy)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * h2f(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
        accm = scaled_bsums_acc(accm, y[i].d * h2f(x[i].dmin), mins, y[i].bsums);
    }
    return hm_hsum256_ps(acc) - hm_hsum256_ps(accm);
}

static float dot_q3_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q3_K *x = w;
    const hm_block_q8_K *y = xq;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    __m256 acco = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        HM_PREFETCH(&x[i], sizeof x[i], hm_gemv_pf);
        const __m128i sc = hm_q3_K_scales(x[i].scales);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
        /* w = q + 4 = low 2 bits + 4 * high bit, in 0..7; the 4 comes back out through bsums */
        for (int h = 0; h < 2; h++) {
            const __m256i q3 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const __m256i ql = _mm256_and_si256(_mm256_srli_epi16(q3, 2 * j), m3);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one);
                const __m256i qv = _mm256_or_si256(ql, _mm256_slli_epi16(hb, 2));
                const __m256i qy = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * j));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale_pair(sc, 4 * h + j), _mm256_maddubs_epi16(qv, qy)));
            }
        }
        const float d = h2f(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acco = scaled_bsums_acc(acco, 4 * d, sc, y[i].bsums);
    }
    return hm_hsum256_ps(acc) - hm_hsum256_ps(acco);
}

/* Q4_K/Q5_K: the 8 six-bit scales (bytes 0..7) and mins (8..15), ggml's unpacking */
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
    return _mm256_madd_epi16(_mm256_cvtepu8_epi16(dup), _mm256_loadu_si256((const __m256i *)bsums));
}

static float dot_q4_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q4_K *x = w;
    const hm_block_q8_K *y = xq;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        HM_PREFETCH(&x[i], sizeof x[i], hm_gemv_pf);
        uint32_t utmp[4];
        k4_scales_mins(x[i].scales, utmp);
        const uint8_t *sc = (const uint8_t *)utmp;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) { /* 64 elements: low nibbles group 2j, high nibbles 2j+1 */
            const __m256i q4 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            const __m256i ql = _mm256_and_si256(q4, m4), qh = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            const __m256i pl = _mm256_maddubs_epi16(ql, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j)));
            const __m256i ph = _mm256_maddubs_epi16(qh, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j + 32)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_set1_epi16(sc[2 * j]), pl));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_set1_epi16(sc[2 * j + 1]), ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].dmin) * y[i].d), _mm256_cvtepi32_ps(k4_mins_prod(utmp, y[i].bsums)), accm);
    }
    return hm_hsum256_ps(_mm256_sub_ps(acc, accm));
}

static float dot_q5_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q5_K *x = w;
    const hm_block_q8_K *y = xq;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        HM_PREFETCH(&x[i], sizeof x[i], hm_gemv_pf);
        uint32_t utmp[4];
        k4_scales_mins(x[i].scales, utmp);
        const uint8_t *sc = (const uint8_t *)utmp;
        const __m256i hb = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) { /* group g's fifth bits are bit g of qh[0..32) */
            const __m256i q5 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            const __m256i hl = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * j), one), 4);
            const __m256i hh = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * j + 1), one), 4);
            const __m256i ql = _mm256_or_si256(_mm256_and_si256(q5, m4), hl);
            const __m256i qh = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q5, 4), m4), hh);
            const __m256i pl = _mm256_maddubs_epi16(ql, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j)));
            const __m256i ph = _mm256_maddubs_epi16(qh, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j + 32)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_set1_epi16(sc[2 * j]), pl));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_set1_epi16(sc[2 * j + 1]), ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].dmin) * y[i].d), _mm256_cvtepi32_ps(k4_mins_prod(utmp, y[i].bsums)), accm);
    }
    return hm_hsum256_ps(_mm256_sub_ps(acc, accm));
}

static float dot_q6_K(const void *w, const void *xq, int64_t n) {
    const hm_block_q6_K *x = w;
    const hm_block_q8_K *y = xq;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    __m256 acco = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        HM_PREFETCH(&x[i], sizeof x[i], hm_gemv_pf);
        const __m128i sc = _mm_loadu_si128((const __m128i *)x[i].scales);
        __m256i sumi = _mm256_setzero_si256();
        /* w = q + 32 in 0..63 (unsigned for maddubs); the 32 comes back out through bsums */
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            const __m256i lo[4] = { _mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                                    _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4) };
            for (int k = 0; k < 4; k++) { /* elements 128h + 32k + l */
                const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m3), 4);
                const __m256i qv = _mm256_or_si256(lo[k], hi);
                const __m256i qy = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * k));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale_pair(sc, 4 * h + k), _mm256_maddubs_epi16(qv, qy)));
            }
        }
        const float d = h2f(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acco = scaled_bsums_acc(acco, 32 * d, sc, y[i].bsums);
    }
    return hm_hsum256_ps(acc) - hm_hsum256_ps(acco);
}

static float dot_iq4_xs(const void *w, const void *xq, int64_t n) {
    const hm_block_iq4_xs *x = w;
    const hm_block_q8_K *y = xq;
    const __m128i values = _mm_loadu_si128((const __m128i *)hm_kvalues_iq4nl);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        HM_PREFETCH(&x[i], sizeof x[i], hm_gemv_pf);
        __m256i sumi = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            const int ls = ((x[i].scales_l[g / 2] >> (4 * (g % 2))) & 0xF) | ((x[i].scales_h >> (2 * g)) & 3) << 4;
            const __m128i q = _mm_loadu_si128((const __m128i *)(x[i].qs + 16 * g));
            const __m256i qx = _mm256_set_m128i(_mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16(q, 4), m4)),
                                                _mm_shuffle_epi8(values, _mm_and_si128(q, m4)));
            const __m256i qy = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * g));
            /* |value| <= 127 and |y| <= 127: pair sums stay below 2^15 */
            const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, _mm256_set1_epi16((short)(ls - 32))));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hm_hsum256_ps(acc);
}

/* ---- activation quantizers: the bytes of quantize_row_q8_0_ref / q8_K_ref ---- */

static inline float hmax_ps(__m256 v) {
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* roundf (half away from zero) exactly: truncate, then step away from zero when |frac| >= 0.5 */
static inline __m256i roundf_epi32(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t)); /* exact for |v| < 2^23 */
    const __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    const __m256 up = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), step);
    return _mm256_cvttps_epi32(_mm256_add_ps(t, up));
}

/* 4 x 8 int32 (elements in order) -> 32 int8 in order, saturating */
static inline __m256i pack32(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    const __m256i a = _mm256_packs_epi32(i0, i1), b = _mm256_packs_epi32(i2, i3);
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void quant_q8_0(const float *x, void *xq, int64_t n) {
    hm_block_q8_0 *y = xq;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t ib = 0; ib < n / HM_QK; ib++, x += HM_QK) {
        __m256 v[4], amax = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
        }
        const float d = hmax_ps(amax) / 127, id = d ? 1.0f / d : 0.0f;
        y[ib].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT); /* round to nearest even, as hm_f32_to_fp16 */
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = roundf_epi32(_mm256_mul_ps(v[k], vid));
        _mm256_storeu_si256((__m256i *)y[ib].qs, pack32(q[0], q[1], q[2], q[3]));
    }
}

static void quant_q8_K(const float *x, void *xq, int64_t n) {
    hm_block_q8_K *y = xq;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / HM_QK_K; i++, x += HM_QK_K) {
        __m256 vmax = _mm256_setzero_ps();
        for (int j = 0; j < HM_QK_K; j += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        const float amax = hmax_ps(vmax);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the reference keeps the sign of the first element of largest magnitude */
        float max = amax;
        for (int j = 0; j < HM_QK_K; j++)
            if (fabsf(x[j]) == amax) { max = x[j]; break; }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int j = 0; j < HM_QK_K; j += 32) {
            __m256i q[4]; /* cvtps rounds to nearest even, as the reference's nearest_int */
            for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vs));
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), pack32(q[0], q[1], q[2], q[3]));
            y[i].bsums[j / 16] = (int16_t)hsum_epi32(_mm256_add_epi32(q[0], q[1]));
            y[i].bsums[j / 16 + 1] = (int16_t)hsum_epi32(_mm256_add_epi32(q[2], q[3]));
        }
        y[i].d = 1 / iscale;
    }
}

const hm_dot_isa hm_dot_isa_avx2 = {
    .name = "avx2",
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
