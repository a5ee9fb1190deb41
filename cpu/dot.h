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

extern const hm_dot_isa hm_dot_isa_scalar;
#if defined(__x86_64__) || defined(__i386__)
extern const hm_dot_isa hm_dot_isa_avx2;
extern const hm_dot_isa hm_dot_isa_avx512;
#endif

#endif
