/* emu/cuda_fp16.h - just enough of CUDA's device vocabulary to compile gpu/qdev*.cuh as plain
 * host C++ (test_gpu_decode_emu.cc): the decoders' bit logic then runs on any CPU. __ldg asserts
 * natural alignment, which checks each decoder's claim about its load widths. */
#ifndef HM_EMU_CUDA_FP16_H
#define HM_EMU_CUDA_FP16_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "quant.h"
}

/* an assert that NDEBUG (CMake's Release) does not remove */
#define EMU_CHECK(cond, what) \
    do { if (!(cond)) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, what); abort(); } } while (0)

#define __device__
#define __host__
#define __forceinline__ inline

struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
static inline float2 make_float2(float a, float b) { float2 f = { a, b }; return f; }

template <class T> static inline T __ldg(const T *p) {
    EMU_CHECK((uintptr_t)p % sizeof(T) == 0, "misaligned load");
    T v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }

/* CUDA: byte n of the result is byte (s >> 4n) & 7 of the 8 bytes {y:x}; the decoders never set
 * a selector's bit 3 (PRMT's sign-replicate mode), and this checks it. */
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = (uint64_t)y << 32 | x;
    unsigned r = 0;
    for (int n = 0; n < 4; n++) {
        const unsigned sel = (s >> (4 * n)) & 0xF;
        EMU_CHECK(sel < 8, "selector with the sign-replicate bit");
        r |= (unsigned)((v >> (8 * sel)) & 0xFF) << (8 * n);
    }
    return r;
}

struct __half { uint16_t h; };
static inline __half __ushort_as_half(unsigned short h) { __half v = { h }; return v; }
static inline float __half2float(__half h) { return hm_fp16_to_f32(h.h); }

static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }

#endif
