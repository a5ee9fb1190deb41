/* dot.h - internal contract between gemv.c and the per-ISA kernel files (dot_scalar.c, dot_avx2.c,
 * dot_avx512.c): one table of function pointers per ISA, indexed by weight type. */
#ifndef HM_DOT_H
#define HM_DOT_H
#include <stdint.h>
#include "quant.h"

/* Dot product of one weight row (n elements of the row's type, n a multiple of its block) with an
 * activation already in the type's vec_dot format (gemv.h: hm_act_type). */
typedef float (*hm_dot_fn)(const void *w, const void *xq, int64_t n);
/* Activation quantizer, x[n] -> xq; n a multiple of the activation block. Every ISA's version
 * writes exactly the bytes of the scalar reference (quant.h's from_float of Q8_0 / Q8_K). */
typedef void (*hm_quant_fn)(const float *x, void *xq, int64_t n);

typedef struct {
    const char *name;               /* "scalar", "avx2", "avx512" */
    hm_dot_fn dot[HM_TYPE_COUNT];   /* NULL: no kernel here; gemv.c takes the next lower ISA's */
    hm_quant_fn quant_q8_0, quant_q8_K; /* NULL: likewise */
} hm_dot_isa;

/* How far ahead of the weights being read (bytes) the SIMD kernels prefetch; 0 turns it off.
 * A quantized kernel spends ~100 instructions per 144-byte block, so the out-of-order window
 * alone keeps too few cache misses in flight to stream at DRAM speed. gemv.c sets it once. */
extern int hm_gemv_pf;
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
/* prefetch the lines of the `size` bytes at p + hm_gemv_pf (pf: a local copy of hm_gemv_pf) */
#define HM_PREFETCH(p, size, pf)                                                   \
    do {                                                                           \
        if (pf)                                                                    \
            for (int o_ = 0; o_ < (int)(size); o_ += 64)                           \
                _mm_prefetch((const char *)(p) + (pf) + o_, _MM_HINT_T0);           \
    } while (0)
#endif

#if defined(__AVX2__)
#include <immintrin.h>
#include <string.h>
/* the sum of a vector's 8 floats */
static inline float hm_hsum256_ps(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* Q3_K's 16 six-bit scales as int8 (value - 32), in registers (dot_avx2.c, dot_avx512.c): the low
 * nibbles of bytes 0..7 are scales 0..7, their high nibbles scales 8..15; byte 8 + j holds the
 * high bit pairs of scales j, 4 + j, 8 + j, 12 + j (bits 0-1, 2-3, 4-5, 6-7). A scalar unpack
 * through memory stalled on the store-to-load forward of its 32-bit words: the Q3_K kernels ran
 * at half the speed of Q2_K's. */
static inline __m128i hm_q3_K_scales(const uint8_t *s) {
    uint32_t t;
    memcpy(&t, s + 8, 4);
    const __m128i lo8 = _mm_loadl_epi64((const __m128i *)s), m4 = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(lo8, m4), _mm_and_si128(_mm_srli_epi16(lo8, 4), m4));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)t), _mm_set_epi32(6, 4, 2, 0)), _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi32(hi, 4)), _mm_set1_epi8(32));
}
#endif

extern const hm_dot_isa hm_dot_isa_scalar;
#if defined(__x86_64__) || defined(__i386__)
extern const hm_dot_isa hm_dot_isa_avx2;
extern const hm_dot_isa hm_dot_isa_avx512;
#endif

#endif
