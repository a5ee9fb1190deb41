/* gemv_q8.cuh - device helpers of the second decode GEMV path (gemv_q8.cu): activations quantized
 * to int8 per 32 values (a q8_1-style format), weights decoded to int8 lanes in registers and
 * multiplied with __dp4a (4 MACs per instruction), scales applied once per 16/32-value group.
 *
 * Units of work. A "chunk" is 256 consecutive elements of a row: 8 blocks of the 32-element types,
 * one super-block of the K-quants. A lane loads its chunk's CB bytes into registers w[] with the
 * widest loads its alignment allows (ALIGN: 16, 8 or 4 bytes, every chunk of a row-major matrix
 * with ncols % 256 == 0 starts at a multiple of ALIGN when the matrix does; ALIGN 1: the aligned
 * 16-byte words covering the chunk, realigned in registers), then T::dot(w, xs) returns the
 * chunk's dot product with the quantized activations xs. The 32-element types also take
 * ncols % 256 != 0: the last chunk of a row is then partial (q8_load_part zero-fills it, and the
 * activation record's groups past ncols are zero). With SM the same loaders read a copy of the
 * chunk's 16-byte words in shared memory (the cp.async pipeline of gemv_q8.cu) instead.
 *
 * Activation record (shared memory, Q8_REC bytes per chunk): q[256] int8 at 0, then for each
 * 32-group g a pair {float d; int16 s0, s1} at 256 + 8g (s0 / s1: sums of q over the group's
 * first / second 16 values), 16 bytes of padding (336 = 84 words: consecutive chunks start 20 banks
 * apart, so lanes reading chunk c, c+1, ... conflict-free).
 * Quantization of 32 values x (q8_quant32, the same code on the GPU and in the CPU emulation):
 *   amax = max |x_i|; if !(amax >= 2^-100) the group is all zero (d = 0);
 *   else d = amax / 127 and q_i = round_half_even(x_i * (127 / amax)), each op IEEE-rounded F32.
 * Exactness: the integer sums are exact; only the float combination per group rounds.
 *
 * This header also compiles as plain host C++ (tests/test_gpu_decode_emu.cc, through tests/emu/):
 * the few intrinsics used here go through q8_* wrappers with portable fallbacks. */
#ifndef HM_GEMV_Q8_CUH
#define HM_GEMV_Q8_CUH
#include <stdint.h>
#include <string.h>
#include "qdev.cuh"
#include "qdev_k.cuh"   /* q3k_v, q3r_v */

#define Q8_CHUNK 256 /* elements per chunk */
#define Q8_REC 336   /* shared-memory bytes per chunk of activations */
#define Q8_MAX_NCOLS 32768 /* 128 chunks: 43008 bytes of records, under the 48 KB static limit */

/* lanes per row (1 << the result): the largest power of two <= 32 (and <= the chunks, rounded up)
 * that leaves at most 10% of the lane-steps idle, else the larger of the first two tried. The
 * launcher's choice (gemv_q8.cu) and the CPU emulation's (tests). */
static inline int q8_lanes_shift(int nchunks) {
    int l = 0;
    while ((1 << l) < nchunks && l < 5) l++;
    for (int t = l; t >= 0 && t >= l - 1; t--) {
        const int L = 1 << t, steps = (nchunks + L - 1) / L;
        if (10 * nchunks >= 9 * L * steps) return t;
    }
    return l;
}

/* Lanes per row for a launch whose token has `items` rows to compute (rows of one matrix, x2 for
 * SwiGLU's gate and up, x the expert slots of one token), on a grid of `cap` lanes a round (two
 * blocks per SM): when the rows fit one round, q8_lanes_shift's choice is halved while they still
 * do not fill more than a round (each lane then takes more chunks of its row, the per-row work
 * and the butterfly are paid fewer times); rows of several rounds keep it (a warp's rows, and the
 * L2 prefetch of its next ones, stay small). cap 0: q8_lanes_shift alone. From the shape of one
 * token only, never from how many share a launch, so batched rows sum in the single-token order.
 * H200, test_gpu_gemv --bench-air per launch: Q4_0 down 8 x 4096 x 1408 17.6 -> 13.9 us (2 lanes
 * instead of 8), Q4_K 13312 x 4096 15.6 -> 15.1 (4 instead of 16); the head (151552 rows) 185 us
 * at 16 lanes, 260 at 1. */
static inline int q8_lanes_shift_for(int nchunks, long items, long cap) {
    int l = q8_lanes_shift(nchunks);
    if (cap > 0 && items <= cap)
        while (l > 0 && items * (1L << l) > cap) l--;
    return l;
}
#define Q8_LANES_H200 (2 * 132 * 256) /* cap on the device of bench/ (the tests' CPU emulation uses it) */

/* ---- intrinsics with host fallbacks ---- */

__device__ __forceinline__ int q8_dp4a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDACC__
    return __dp4a((int)a, (int)b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
#endif
}

/* c + the two signed 16-bit halves of a times the signed bytes 2 HI, 2 HI + 1 of b */
template <int HI>
__device__ __forceinline__ int q8_dp2a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDACC__
    return HI ? __dp2a_hi((int)a, (int)b, c) : __dp2a_lo((int)a, (int)b, c);
#else
    return c + (int)(int16_t)(a & 0xFFFFu) * (int)(int8_t)(b >> (16 * HI)) + (int)(int16_t)(a >> 16) * (int)(int8_t)(b >> (16 * HI + 8));
#endif
}

/* the low 32 bits of (hi:lo) >> sh, sh in 0..31 */
__device__ __forceinline__ uint32_t q8_funnel(uint32_t lo, uint32_t hi, int sh) {
#ifdef __CUDACC__
    return __funnelshift_r(lo, hi, sh);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh & 31));
#endif
}

__host__ __device__ __forceinline__ float q8_div(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
__host__ __device__ __forceinline__ float q8_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
__host__ __device__ __forceinline__ int q8_rint(float a) { /* round half to even */
#ifdef __CUDA_ARCH__
    return __float2int_rn(a);
#else
    return (int)nearbyintf(a);
#endif
}

/* Quantizes x[0..32) (the contract above): q[0..32), *d, the two 16-sums packed as
 * (s0 & 0xFFFF) | s1 << 16. The same float operations on every target. */
__host__ __device__ __forceinline__ void q8_quant32(const float *x, int8_t *q, float *d, uint32_t *s01) {
    float amax = 0.f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    int s0 = 0, s1 = 0;
    if (!(amax >= 0x1p-100f)) {
        for (int i = 0; i < 32; i++) q[i] = 0;
        *d = 0.f;
    } else {
        const float id = q8_div(127.f, amax);
        for (int i = 0; i < 32; i++) {
            const int v = q8_rint(q8_mul(x[i], id));
            q[i] = (int8_t)v;
            if (i < 16) s0 += v;
            else s1 += v;
        }
        *d = q8_div(amax, 127.f);
    }
    *s01 = ((uint32_t)s0 & 0xFFFFu) | (uint32_t)s1 << 16;
}

#ifdef __CUDACC__
/* ---- writing chunk records on the GPU (every way gives q8_quant32's bytes) ----
 * q8_quant_f4: one float4 f = x[4i .. 4i+3] into the records at xs. Called by all 32 lanes of a
 * warp together, holding consecutive i (the 8 lanes of i / 8 form one 32-group); a lane with
 * !in (past the end) takes part in the shuffles and writes nothing. */
__device__ __forceinline__ void q8_quant_f4(float4 f, int i, bool in, uint8_t *xs) {
    float amax = fmaxf(fmaxf(fabsf(f.x), fabsf(f.y)), fmaxf(fabsf(f.z), fabsf(f.w)));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    const bool nz = amax >= 0x1p-100f;
    const float id = nz ? q8_div(127.f, amax) : 0.f;
    const int q0 = nz ? q8_rint(q8_mul(f.x, id)) : 0, q1 = nz ? q8_rint(q8_mul(f.y, id)) : 0;
    const int q2 = nz ? q8_rint(q8_mul(f.z, id)) : 0, q3 = nz ? q8_rint(q8_mul(f.w, id)) : 0;
    int s = (q0 + q1) + (q2 + q3);
    s += __shfl_xor_sync(0xFFFFFFFFu, s, 1);
    s += __shfl_xor_sync(0xFFFFFFFFu, s, 2); /* the sum over this lane's 16-half */
    const int s1 = __shfl_down_sync(0xFFFFFFFFu, s, 4);
    if (!in) return;
    const int b = i >> 3, l = i & 7;
    uint8_t *rec = xs + (b >> 3) * Q8_REC;
    *(uint32_t *)(rec + 32 * (b & 7) + 4 * l) =
        (uint32_t)(q0 & 0xFF) | (uint32_t)(q1 & 0xFF) << 8 | (uint32_t)(q2 & 0xFF) << 16 | (uint32_t)(q3 & 0xFF) << 24;
    if (l == 0)
        *(uint2 *)(rec + 256 + 8 * (b & 7)) =
            make_uint2(__float_as_uint(nz ? q8_div(amax, 127.f) : 0.f), ((uint32_t)s & 0xFFFFu) | (uint32_t)s1 << 16);
}

/* Asks L2 for the 16-byte granules covering [p, p + n) (no registers, no wait): the rows a kernel
 * takes next are in flight from DRAM while it computes (or waits for the kernel before). Only
 * granules that overlap the span are touched (the chunk loaders rely on the same). */
__device__ __forceinline__ void q8_prefetch_l2(const uint8_t *p, size_t n) {
    const uintptr_t a = (uintptr_t)p & ~(uintptr_t)15, e = ((uintptr_t)p + n + 15) & ~(uintptr_t)15;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"((unsigned)(e - a)) : "memory");
#elif defined(__CUDA_ARCH__)
    for (uintptr_t q = a; q < e; q += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(q));
#endif
}

/* q8_quant_lane: one value v = x[j] per lane, the 32 lanes of a warp holding one 32-group
 * (j % 32 == lane), into the records at xs. */
__device__ __forceinline__ void q8_quant_lane(float v, int j, uint8_t *xs) {
    float amax = fabsf(v);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    const bool nz = amax >= 0x1p-100f;
    const int q = nz ? q8_rint(q8_mul(v, q8_div(127.f, amax))) : 0;
    int s = q;
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o); /* the sum over this lane's 16-half */
    const int s1 = __shfl_down_sync(0xFFFFFFFFu, s, 16);
    uint8_t *rec = xs + (j >> 8) * Q8_REC;
    rec[j & 255] = (uint8_t)(q & 0xFF);
    if ((j & 31) == 0)
        *(uint2 *)(rec + 256 + 8 * ((j >> 5) & 7)) =
            make_uint2(__float_as_uint(nz ? q8_div(amax, 127.f) : 0.f), ((uint32_t)s & 0xFFFFu) | (uint32_t)s1 << 16);
}
#endif

/* ---- the activations of group g (0..7) of a chunk record ---- */

struct q8_act {
    uint32_t a[8]; /* q[32g + 4i .. +3] packed */
    float d;
    int s0, s1;
};

__device__ __forceinline__ q8_act q8_load_act(const uint8_t *xs, int g) {
    q8_act r;
    const uint4 a0 = *(const uint4 *)(xs + 32 * g), a1 = *(const uint4 *)(xs + 32 * g + 16);
    r.a[0] = a0.x; r.a[1] = a0.y; r.a[2] = a0.z; r.a[3] = a0.w;
    r.a[4] = a1.x; r.a[5] = a1.y; r.a[6] = a1.z; r.a[7] = a1.w;
    const uint2 ds = *(const uint2 *)(xs + 256 + 8 * g);
    r.d = __uint_as_float(ds.x);
    r.s0 = (int)(int16_t)(ds.y & 0xFFFFu);
    r.s1 = (int)(int32_t)ds.y >> 16;
    return r;
}

/* ---- chunk registers: w[k] = bytes 4k..4k+3 of the chunk (little-endian); after unrolling every
 * byte offset b below is a compile-time constant, so these are 0 or 1 instructions ---- */

__device__ __forceinline__ uint32_t wat(const uint32_t *w, int b) {
    return (b & 3) ? q8_funnel(w[b >> 2], w[(b >> 2) + 1], 8 * (b & 3)) : w[b >> 2];
}
__device__ __forceinline__ uint32_t wat8(const uint32_t *w, int b) { return (w[b >> 2] >> (8 * (b & 3))) & 0xFFu; }
__device__ __forceinline__ float wf16(const uint32_t *w, int b) {
    return __half2float(__ushort_as_half((unsigned short)(wat(w, b) & 0xFFFFu)));
}

/* words the loader fills for a chunk of CB bytes at alignment A (room for wat's w[k+1] and, for
 * A == 1, for the covering words and their realignment) */
__host__ __device__ constexpr int q8_nw(int cb, int a) { return a == 1 ? 4 * ((cb + 30) / 16) + 4 : (cb + 3) / 4 + 2; }

/* a 16-byte word of a weight matrix, read once a step: through the read-only path but not kept in
 * L1 (L1::no_allocate). H200, air resident decode: +4.7-5.6% against the path's default, which
 * allocates the lines in L1 (bench/README's thirty-second pass); HM_LDP=0 builds that default for
 * comparison. The L2 side's hints measured there (a 256-byte fetch, evict_first) did not help. */
#ifndef HM_LDP
#define HM_LDP 1
#endif
__device__ __forceinline__ uint4 q8_ldw(const void *p) {
#if HM_LDP == 0 || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 700   /* the eviction qualifiers: sm_70 on */
    return __ldg((const uint4 *)p);
#else
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
#endif
}

/* a chunk's 2-byte tail in the interleaved layout (HM_Q8_SLOT_BYTES), read as q8_ldw reads words */
__device__ __forceinline__ uint32_t q8_ldt(const void *p) {
#if HM_LDP == 0 || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 700
    return __ldg((const unsigned short *)p);
#else
    unsigned short r;
    asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(r) : "l"(p));
    return r;
#endif
}

/* Loads a chunk of CB bytes at p (a multiple of A; any address when A == 1). For A == 1 it reads
 * the 16-byte words that overlap [p, p + CB) (never a word wholly outside it, so never past the
 * allocation's last 16-byte granule) and shifts them into place: two word-select stages and one
 * funnel shift per word, all with compile-time register indices. */
/* a 16-byte word from global memory (q8_ldw) or, SM, from shared memory */
template <bool SM>
__device__ __forceinline__ uint4 q8_ld16(const uint8_t *p) {
    if constexpr (SM) return *(const uint4 *)p;
    else return q8_ldw(p);
}

/* The unaligned load (A == 1) of up to CB bytes at p: the 16-byte words that overlap [p, p + n)
 * (n <= CB; no other word is read), shifted into w[0..] (w has q8_nw(CB, 1) words). */
template <int CB, bool SM>
__device__ __forceinline__ void q8_gather(const uint8_t *p, uint32_t *w, int n) {
    constexpr int NW = q8_nw(CB, 1), NL = (CB + 30) / 16, NU = (CB + 3) / 4 + 1; /* words loaded; words used */
    static_assert(4 * NL + 4 == NW && NU + 4 <= NW, "sizes");
    const uint8_t *base = (const uint8_t *)((uintptr_t)p & ~(uintptr_t)15);
    const int o = (int)((uintptr_t)p & 15);
#pragma unroll
    for (int j = 0; j < NL; j++) {
        uint4 u = { 0, 0, 0, 0 };
        if (16 * j < n || 16 * j < o + n) u = q8_ld16<SM>(base + 16 * j);   /* the first test: known at compile time when n is */
        w[4 * j] = u.x; w[4 * j + 1] = u.y; w[4 * j + 2] = u.z; w[4 * j + 3] = u.w;
    }
#pragma unroll
    for (int k = 4 * NL; k < NW; k++) w[k] = 0;
    const bool s1 = o & 4, s2 = o & 8;
#pragma unroll
    for (int k = 0; k <= NU + 2; k++) w[k] = s1 ? w[k + 1] : w[k];
#pragma unroll
    for (int k = 0; k <= NU; k++) w[k] = s2 ? w[k + 2] : w[k];
    const int sh = 8 * (o & 3);
#pragma unroll
    for (int k = 0; k < NU; k++) w[k] = q8_funnel(w[k], w[k + 1], sh);
}

template <int CB, int A, bool SM = false>
__device__ __forceinline__ void q8_load_chunk(const uint8_t *p, uint32_t *w) {
    constexpr int NW = q8_nw(CB, A);
    static_assert(!SM || A == 16 || A == 1, "shared-memory copies are whole 16-byte words");
    if constexpr (A == 16) {
        static_assert(CB % 16 == 0, "A");
#pragma unroll
        for (int j = 0; j < CB / 16; j++) {
            const uint4 u = q8_ld16<SM>(p + 16 * j);
            w[4 * j] = u.x; w[4 * j + 1] = u.y; w[4 * j + 2] = u.z; w[4 * j + 3] = u.w;
        }
#pragma unroll
        for (int k = CB / 4; k < NW; k++) w[k] = 0;
    } else if constexpr (A == 8) {
        static_assert(CB % 8 == 0, "A");
#pragma unroll
        for (int j = 0; j < CB / 8; j++) {
            const uint2 u = __ldg((const uint2 *)(p + 8 * j));
            w[2 * j] = u.x; w[2 * j + 1] = u.y;
        }
#pragma unroll
        for (int k = CB / 4; k < NW; k++) w[k] = 0;
    } else if constexpr (A == 4) {
        static_assert(CB % 4 == 0, "A");
#pragma unroll
        for (int j = 0; j < CB / 4; j++) w[j] = __ldg((const unsigned int *)(p + 4 * j));
#pragma unroll
        for (int k = CB / 4; k < NW; k++) w[k] = 0;
    } else {
        static_assert(A == 1, "A is 16, 8, 4 or 1");
        q8_gather<CB, SM>(p, w, CB);
    }
}

/* The last, partial chunk of a row of a 32-element-block type (ncols % 256 != 0): its nb < CB bytes
 * at p (2-byte aligned) into w, every byte from nb on zero (the dot then adds exact zeros: the
 * activation record's missing groups are zero too). Reads only 16-byte words that overlap
 * [p, p + nb), as the A == 1 loader does. */
template <int CB, bool SM = false>
__device__ __forceinline__ void q8_load_part(const uint8_t *p, uint32_t *w, int nb) {
    constexpr int NW = q8_nw(CB, 1);
    q8_gather<CB, SM>(p, w, nb);
#pragma unroll
    for (int k = 0; k < NW; k++) {
        const int keep = nb - 4 * k; /* bytes of word k that belong to the chunk */
        w[k] = keep >= 4 ? w[k] : keep <= 0 ? 0u : w[k] & ((1u << (8 * keep)) - 1u);
    }
}

/* ---- per type: CB (chunk bytes), A (load alignment), dot(w, xs) = the chunk's dot product ---- */

#define Q8_M4 0x0F0F0F0Fu

/* nibble v (bits 0..3) spread to bit 4 of bytes 0..3 (Q5's fifth bits) */
__device__ __forceinline__ uint32_t q8_bit4(uint32_t v) { return ((v & 0xFu) * 0x02040810u) & 0x10101010u; }

/* elements 4i..4i+3 of a nibble table lookup: lo / hi = the entries of the low / high nibbles of q */
__device__ __forceinline__ void q8_lut(uint32_t q, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3, uint32_t *lo, uint32_t *hi) {
    const uint32_t v0 = lut16(q, t0, t1, t2, t3), v1 = lut16(q >> 16, t0, t1, t2, t3);
    *lo = __byte_perm(v0, v1, 0x6420u);
    *hi = __byte_perm(v0, v1, 0x7531u);
}

/* 8 blocks of {d; qs[32]} at 34g: x = d*q */
struct Q8W_Q8_0 {
    static constexpr int CB = 272, A = 16;
    __device__ static float dot(const uint32_t *w, const uint8_t *xs) {
        float acc = 0.f;
#pragma unroll
        for (int g = 0; g < 8; g++) {
            const q8_act x = q8_load_act(xs, g);
            int s = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) s = q8_dp4a(wat(w, 34 * g + 2 + 4 * i), x.a[i], s);
            acc = fmaf(wf16(w, 34 * g) * x.d, (float)s, acc);
        }
        return acc;
    }
};

/* 8 blocks: Q4_0 {d; qs[16]} (x = d*(q-8)), Q4_1 {d, m; qs[16]} (x = d*q + m);
 * qs byte j: element j (low nibble), j + 16 (high). R (Q4_0 only): the chunk in the interleaved
 * layout by default (HOTMOE_Q4R=0: GGUF blocks) ("q4r", q4r_pack_chunk): the 8 blocks' d first (bytes 2g), then block
 * g's qs at 16 + 16g, so that every word of a block is aligned (GGUF's 18-byte blocks put half of
 * them across words: a funnel shift each); the same integers and float operations. */
template <bool MIN, bool R = false>
struct Q8W_Q4 {
    static_assert(!(MIN && R), "q4r: Q4_0 only");
    static constexpr int BS = MIN ? 20 : 18, QS = MIN ? 4 : 2, CB = 8 * BS, A = 16;
    __device__ static float dot(const uint32_t *w, const uint8_t *xs) {
        float acc = 0.f;
#pragma unroll
        for (int g = 0; g < 8; g++) {
            const q8_act x = q8_load_act(xs, g);
            int s = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t q = wat(w, (R ? 16 + 16 * g : BS * g + QS) + 4 * i);
                s = q8_dp4a(q & Q8_M4, x.a[i], s);
                s = q8_dp4a((q >> 4) & Q8_M4, x.a[4 + i], s);
            }
            if (MIN) acc = fmaf(wf16(w, BS * g + 2) * x.d, (float)(x.s0 + x.s1), acc);
            else s -= 8 * (x.s0 + x.s1);
            acc = fmaf(wf16(w, R ? 2 * g : BS * g) * x.d, (float)s, acc);
        }
        return acc;
    }
};
typedef Q8W_Q4<false> Q8W_Q4_0;
typedef Q8W_Q4<true> Q8W_Q4_1;

typedef Q8W_Q4<false, true> Q8W_Q4R;
/* GGUF Q4_0 blocks (n bytes: whole 18-byte blocks, up to 8) -> a q4r chunk (144 bytes; the missing
 * blocks' bytes zero) */
static inline void q4r_pack_chunk(const uint8_t *src, int n, uint8_t *dst) {
    for (int i = 0; i < 144; i++) dst[i] = 0;
    for (int g = 0; g < 8 && 18 * g + 18 <= n; g++) {
        dst[2 * g] = src[18 * g]; dst[2 * g + 1] = src[18 * g + 1];
        for (int i = 0; i < 16; i++) dst[16 + 16 * g + i] = src[18 * g + 2 + i];
    }
}

/* 8 blocks: Q5_0 {d; qh[4]; qs[16]} (x = d*(q-16)), Q5_1 {d, m; qh[4]; qs[16]} (x = d*q + m);
 * element j's fifth bit is bit j of qh */
template <bool MIN>
struct Q8W_Q5 {
    static constexpr int BS = MIN ? 24 : 22, QH = MIN ? 4 : 2, CB = 8 * BS, A = 16;
    __device__ static float dot(const uint32_t *w, const uint8_t *xs) {
        float acc = 0.f;
#pragma unroll
        for (int g = 0; g < 8; g++) {
            const q8_act x = q8_load_act(xs, g);
            const uint32_t qh = wat(w, BS * g + QH);
            int s = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t q = wat(w, BS * g + QH + 4 + 4 * i);
                s = q8_dp4a((q & Q8_M4) | q8_bit4(qh >> (4 * i)), x.a[i], s);
                s = q8_dp4a(((q >> 4) & Q8_M4) | q8_bit4(qh >> (16 + 4 * i)), x.a[4 + i], s);
            }
            if (MIN) acc = fmaf(wf16(w, BS * g + 2) * x.d, (float)(x.s0 + x.s1), acc);
            else s -= 16 * (x.s0 + x.s1);
            acc = fmaf(wf16(w, BS * g) * x.d, (float)s, acc);
        }
        return acc;
    }
};
typedef Q8W_Q5<false> Q8W_Q5_0;
typedef Q8W_Q5<true> Q8W_Q5_1;

/* 8 blocks of {e (E8M0); qs[16]}: x = kvalues_mxfp4[q] * 2^(e-128) */
struct Q8W_MXFP4 {
    static constexpr int CB = 136, A = 8;
    __device__ static float dot(const uint32_t *w, const uint8_t *xs) {
        float acc = 0.f;
#pragma unroll
        for (int g = 0; g < 8; g++) {
            const q8_act x = q8_load_act(xs, g);
            int s = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t lo, hi;
                q8_lut(wat(w, 17 * g + 1 + 4 * i), HM_MXFP4_T0, HM_MXFP4_T1, HM_MXFP4_T2, HM_MXFP4_T3, &lo, &hi);
                s = q8_dp4a(lo, x.a[i], s);
                s = q8_dp4a(hi, x.a[4 + i], s);
            }
            acc = fmaf(e8m0_half(wat8(w, 17 * g)) * x.d, (float)s, acc);
        }
        return acc;
    }
};

/* {d; scales_h; scales_l[4]; qs[128]}: group g: x = d*(ls_g - 32)*kvalues_iq4nl[q], qs[16g + j]
 * holds elements 32g + j (low nibble) and 32g + 16 + j (high) */
struct Q8W_IQ4_XS {
    static constexpr int CB = 136, A = 8;
    __device__ static float dot(const uint32_t *w, const uint8_t *xs) {
        const uint32_t sh = wat(w, 2) & 0xFFFFu, sl = wat(w, 4);
        float acc = 0.f;
#pragma unroll
        for (int g = 0; g < 8; g++) {
            const q8_act x = q8_load_act(xs, g);
            int s = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t lo, hi;
                q8_lut(wat(w, 8 + 16 * g + 4 * i), HM_IQ4NL_T0, HM_IQ4NL_T1, HM_IQ4NL_T2, HM_IQ4NL_T3, &lo, &hi);
                s = q8_dp4a(lo, x.a[i], s);
                s = q8_dp4a(hi, x.a[4 + i], s);
            }
            const int ls = (int)(((sl >> (4 * g)) & 0xFu) | ((sh >> (2 * g)) & 3u) << 4) - 32;
            acc = fmaf(x.d, (float)(ls * s), acc);
        }
        return wf16(w, 0) * acc;
    }
};

/* {scales[16]; qs[64]; d, dmin}: element 128h + 32j + l is bits 2j of qs[32h + l]; its 16-group
 * 8h + 2j + l/16 has scale sc & 15 and min sc >> 4: x = d*(sc&15)*q - dmin*(sc>>4) */
struct Q8W_Q2_K {
    static constexpr int CB = 84, A = 4;
    __device__ static float dot(const uint32_t *w, const uint8_t *xs) {
        float ad = 0.f, am = 0.f;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const q8_act x = q8_load_act(xs, 4 * h + j);
                int lo = 0, hi = 0;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const uint32_t q = (w[4 + 8 * h + i] >> (2 * j)) & 0x03030303u;
                    if (i < 4) lo = q8_dp4a(q, x.a[i], lo);
                    else hi = q8_dp4a(q, x.a[i], hi);
                }
                const int c0 = (int)wat8(w, 8 * h + 2 * j), c1 = (int)wat8(w, 8 * h + 2 * j + 1);
                ad = fmaf(x.d, (float)((c0 & 15) * lo + (c1 & 15) * hi), ad);
                am = fmaf(x.d, (float)((c0 >> 4) * x.s0 + (c1 >> 4) * x.s1), am);
            }
        return fmaf(wf16(w, 80), ad, -wf16(w, 82) * am);
    }
};

/* {hmask[32]; qs[64]; scales[12]; d}: element 128h + 32j + l: q = (bits 2j of qs[32h + l]) +
 * 4*(bit 4h + j of hmask[l]) - 4; x = d*scale(16-group)*q with 6-bit signed scales. PACKED (the
 * default) unpacks the 16 scales four at a time from the three scale words (a byte each; a 6-bit
 * field biased by 32, so sign-extending (v ^ 32) gives v - 32), fewer instructions a chunk than
 * one scale at a time (!PACKED, HOTMOE_Q3K_SCALES=0: routed gate+up of air 24.9 against 23.7 us
 * alone); the same integers either way. */
template <bool PACKED>
struct Q8W_Q3_KT {
    static constexpr int CB = 110, A = 1;
    __device__ static int scale(const uint32_t *w, int j) { /* cpu/dot_scalar.c: q3_K_scale */
        const int lo = j < 8 ? (int)(wat8(w, 96 + j) & 0xFu) : (int)(wat8(w, 96 + j - 8) >> 4);
        const int hi = (int)(wat8(w, 104 + j % 4) >> (2 * (j / 4))) & 3;
        return (lo | hi << 4) - 32;
    }
    /* sc[q] byte m: scale 4q + m as a 6-bit field xor 32 */
    __device__ static void scales(const uint32_t *w, uint32_t *sc) {
        const uint32_t a0 = wat(w, 96), a1 = wat(w, 100), a2 = wat(w, 104);
        sc[0] = ((a0 & 0x0F0F0F0Fu) | ((a2 << 4) & 0x30303030u)) ^ 0x20202020u;
        sc[1] = ((a1 & 0x0F0F0F0Fu) | ((a2 << 2) & 0x30303030u)) ^ 0x20202020u;
        sc[2] = (((a0 >> 4) & 0x0F0F0F0Fu) | (a2 & 0x30303030u)) ^ 0x20202020u;
        sc[3] = (((a1 >> 4) & 0x0F0F0F0Fu) | ((a2 >> 2) & 0x30303030u)) ^ 0x20202020u;
    }
    __device__ static int sc_at(const uint32_t *sc, int j) { return (int)((sc[j >> 2] << (26 - 8 * (j & 3)))) >> 26; }
    __device__ static float dot(const uint32_t *w, const uint8_t *xs) {
        float acc = 0.f;
        uint32_t sc[4];
        if (PACKED) scales(w, sc);
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const q8_act x = q8_load_act(xs, 4 * h + j);
                int lo = 0, hi = 0;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const uint32_t q = ((w[8 + 8 * h + i] >> (2 * j)) & 0x03030303u) | ((w[i] >> (4 * h + j)) & 0x01010101u) << 2;
                    if (i < 4) lo = q8_dp4a(q, x.a[i], lo);
                    else hi = q8_dp4a(q, x.a[i], hi);
                }
                const int j0 = 8 * h + 2 * j;
                const int s0 = PACKED ? sc_at(sc, j0) : scale(w, j0), s1 = PACKED ? sc_at(sc, j0 + 1) : scale(w, j0 + 1);
                const int s = s0 * (lo - 4 * x.s0) + s1 * (hi - 4 * x.s1);
                acc = fmaf(x.d, (float)s, acc);
            }
        return wf16(w, 108) * acc;
    }
};
typedef Q8W_Q3_KT<true> Q8W_Q3_K;

/* Q3_K in the interleaved layout (by default; HOTMOE_Q3R=0: GGUF chunks) ("q3r", q3r_pack_chunk): the same 110 bytes, the
 * first 96 (hmask and qs) rearranged so that each 3-bit value v = 2 low bits + 4 * high bit sits in
 * one place. 32-group g (elements 32g..32g+31) owns bytes 12g..12g+11, words W0, W1, W2; the
 * element 32g + 4i + b (dp4a operand i, its byte b) is, in byte b of:
 *   i = 0, 1: W0 bits 3i..3i+2;  i = 2, 3: W1 bits 3(i-2)..;  i = 4, 5: W2 bits 3(i-4)..;
 *   i = 6: low 2 bits in W0 bits 6-7, high bit in W2 bit 6;  i = 7: W1 bits 6-7, W2 bit 7.
 * An operand then costs 1-2 instructions (4 for i = 6, 7) instead of ~4.3: 17 a group of 8 against
 * ~34; a group's two scales are applied by one dp2a. Scales and d stay at bytes 96 and 108; the
 * integers are Q8W_Q3_K's, so are the results. SASS of the interleaved gate/up loop: 359
 * instructions a chunk against 487. */
struct Q8W_Q3_KR {
    static constexpr int CB = 110, A = 16;
    __device__ static float dot(const uint32_t *w, const uint8_t *xs) {
        float acc = 0.f;
        uint32_t sc[4];
        Q8W_Q3_K::scales(w, sc);
        /* each byte 4 (scale - 32) as an int8 (the 6-bit field's sign lands on bit 7; bits 6-7
         * of every byte are zero, so nothing crosses bytes), for one dp2a a group below */
#pragma unroll
        for (int q = 0; q < 4; q++) sc[q] <<= 2;
        constexpr uint32_t M7 = 0x07070707u, M3 = 0x03030303u, M4 = 0x04040404u;
#pragma unroll
        for (int g = 0; g < 8; g++) {
            const q8_act x = q8_load_act(xs, g);
            const uint32_t W0 = w[3 * g], W1 = w[3 * g + 1], W2 = w[3 * g + 2];
            int lo = q8_dp4a(W0 & M7, x.a[0], 0);
            lo = q8_dp4a((W0 >> 3) & M7, x.a[1], lo);
            lo = q8_dp4a(W1 & M7, x.a[2], lo);
            lo = q8_dp4a((W1 >> 3) & M7, x.a[3], lo);
            int hi = q8_dp4a(W2 & M7, x.a[4], 0);
            hi = q8_dp4a((W2 >> 3) & M7, x.a[5], hi);
            hi = q8_dp4a(((W0 >> 6) & M3) | ((W2 >> 4) & M4), x.a[6], hi);
            hi = q8_dp4a(((W1 >> 6) & M3) | ((W2 >> 5) & M4), x.a[7], hi);
            /* the group's scales 2g, 2g + 1 are bytes 2 (g & 1), + 1 of sc[g >> 1]: one dp2a of
             * (lo - 4 s0, hi - 4 s1) as int16 (|.| <= 16 * 7 * 127 + 4 * 16 * 127 < 2^15) gives
             * 4 (sc0 (lo - 4 s0) + sc1 (hi - 4 s1)), exactly Q8W_Q3_K's s times 4 */
            const uint32_t t = ((uint32_t)(lo - 4 * x.s0) & 0xFFFFu) | (uint32_t)(hi - 4 * x.s1) << 16;
            const int s = ((g & 1) ? q8_dp2a<1>(t, sc[g >> 1], 0) : q8_dp2a<0>(t, sc[g >> 1], 0)) >> 2;
            acc = fmaf(x.d, (float)s, acc);
        }
        return wf16(w, 108) * acc;
    }
};

/* GGUF Q3_K chunk (110 bytes) -> q3r (110 bytes; dst may not alias src). A word at a time (the
 * upload packs every resident expert's chunks: ~265 M of them on air): operand i of group g is byte
 * k = 0..3 of word i of its 32 qs bytes (2 bits at 2 (g % 4)) and of word i of hmask (bit g). */
static inline void q3r_pack_chunk(const uint8_t *src, uint8_t *dst) {
    uint32_t hm[8], qs[16];
    memcpy(hm, src, 32);
    memcpy(qs, src + 32, 64);
    for (int g = 0; g < 8; g++) {
        uint32_t v[8];
        const uint32_t *q = qs + 8 * (g >> 2);
        for (int i = 0; i < 8; i++)
            v[i] = (q[i] >> (2 * (g & 3)) & 0x03030303u) | (hm[i] >> g & 0x01010101u) << 2;
        const uint32_t w[3] = { v[0] | v[1] << 3 | (v[6] & 0x03030303u) << 6, v[2] | v[3] << 3 | (v[7] & 0x03030303u) << 6,
                                v[4] | v[5] << 3 | (v[6] >> 2 & 0x01010101u) << 6 | (v[7] >> 2 & 0x01010101u) << 7 };
        memcpy(dst + 12 * g, w, 12);
    }
    memcpy(dst + 96, src + 96, 14);
}

/* Q4_K {d, dmin; scales[12]; qs[128]}, Q5_K {.. ; qh[32]; qs[128]}: group g (32 elements) is
 * nibble g%2 of qs[32(g/2) + l] (+16 from bit g of qh[l]); x = d*sc_g*q - dmin*m_g */
template <bool HIGH>
struct Q8W_Q45_K {
    static constexpr int CB = HIGH ? 176 : 144, A = 16, QS = HIGH ? 48 : 16;
    __device__ static void scale_min(const uint32_t *w, int j, int *sc, int *m) { /* get_scale_min_k4 */
        const int b = 4; /* scales at byte 4 */
        if (j < 4) {
            *sc = (int)wat8(w, b + j) & 63;
            *m = (int)wat8(w, b + j + 4) & 63;
        } else {
            *sc = (int)(wat8(w, b + j + 4) & 0xFu) | (int)(wat8(w, b + j - 4) >> 6) << 4;
            *m = (int)(wat8(w, b + j + 4) >> 4) | (int)(wat8(w, b + j) >> 6) << 4;
        }
    }
    __device__ static float dot(const uint32_t *w, const uint8_t *xs) {
        float ad = 0.f, am = 0.f;
#pragma unroll
        for (int p = 0; p < 4; p++) {
            const q8_act xa = q8_load_act(xs, 2 * p), xb = q8_load_act(xs, 2 * p + 1);
            int sa = 0, sb = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint32_t q = w[QS / 4 + 8 * p + i];
                uint32_t lo = q & Q8_M4, hi = (q >> 4) & Q8_M4;
                if (HIGH) {
                    const uint32_t qh = w[4 + i];
                    lo |= ((qh >> (2 * p)) & 0x01010101u) << 4;
                    hi |= ((qh >> (2 * p + 1)) & 0x01010101u) << 4;
                }
                sa = q8_dp4a(lo, xa.a[i], sa);
                sb = q8_dp4a(hi, xb.a[i], sb);
            }
            int sca, ma, scb, mb;
            scale_min(w, 2 * p, &sca, &ma);
            scale_min(w, 2 * p + 1, &scb, &mb);
            ad = fmaf(xa.d, (float)(sca * sa), ad);
            ad = fmaf(xb.d, (float)(scb * sb), ad);
            am = fmaf(xa.d, (float)(ma * (xa.s0 + xa.s1)), am);
            am = fmaf(xb.d, (float)(mb * (xb.s0 + xb.s1)), am);
        }
        return fmaf(wf16(w, 0), ad, -wf16(w, 2) * am);
    }
    /* dot for nb (<= NB) activation sets xs + b * xrec: the chunk's nibbles and scales decoded once,
     * each set's integer sums and float operations those of dot, in its order (so out[b] is dot's) */
    template <int NB>
    __device__ static void dot_nb(const uint32_t *w, const uint8_t *xs, int xrec, int nb, float *out) {
        float ad[NB], am[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) ad[b] = am[b] = 0.f;
#pragma unroll
        for (int p = 0; p < 4; p++) {
            uint32_t lo[8], hi[8];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint32_t q = w[QS / 4 + 8 * p + i];
                lo[i] = q & Q8_M4; hi[i] = (q >> 4) & Q8_M4;
                if (HIGH) {
                    const uint32_t qh = w[4 + i];
                    lo[i] |= ((qh >> (2 * p)) & 0x01010101u) << 4;
                    hi[i] |= ((qh >> (2 * p + 1)) & 0x01010101u) << 4;
                }
            }
            int sca, ma, scb, mb;
            scale_min(w, 2 * p, &sca, &ma);
            scale_min(w, 2 * p + 1, &scb, &mb);
#pragma unroll
            for (int b = 0; b < NB; b++) {
                if (b >= nb) break;
                const q8_act xa = q8_load_act(xs + b * xrec, 2 * p), xb = q8_load_act(xs + b * xrec, 2 * p + 1);
                int sa = 0, sb = 0;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    sa = q8_dp4a(lo[i], xa.a[i], sa);
                    sb = q8_dp4a(hi[i], xb.a[i], sb);
                }
                ad[b] = fmaf(xa.d, (float)(sca * sa), ad[b]);
                ad[b] = fmaf(xb.d, (float)(scb * sb), ad[b]);
                am[b] = fmaf(xa.d, (float)(ma * (xa.s0 + xa.s1)), am[b]);
                am[b] = fmaf(xb.d, (float)(mb * (xb.s0 + xb.s1)), am[b]);
            }
        }
#pragma unroll
        for (int b = 0; b < NB; b++)
            if (b < nb) out[b] = fmaf(wf16(w, 0), ad[b], -wf16(w, 2) * am[b]);
    }
};
typedef Q8W_Q45_K<false> Q8W_Q4_K;
typedef Q8W_Q45_K<true> Q8W_Q5_K;

/* {ql[128]; qh[64]; scales[16] (int8); d}: element 128h + 32k + l: low 4 bits from nibble k/2 of
 * ql[64h + 32(k&1) + l], high 2 from bits 2k of qh[32h + l]; x = d*sc*(q - 32) per 16-group */
struct Q8W_Q6_K {
    static constexpr int CB = 210, A = 1;
    __device__ static float dot(const uint32_t *w, const uint8_t *xs) {
        float acc = 0.f;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const q8_act x = q8_load_act(xs, 4 * h + k);
                int lo = 0, hi = 0;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const uint32_t q = ((w[16 * h + 8 * (k & 1) + i] >> (4 * (k >> 1))) & Q8_M4) |
                                       ((w[32 + 8 * h + i] >> (2 * k)) & 0x03030303u) << 4;
                    if (i < 4) lo = q8_dp4a(q, x.a[i], lo);
                    else hi = q8_dp4a(q, x.a[i], hi);
                }
                const int c0 = (int)(int8_t)wat8(w, 192 + 8 * h + 2 * k), c1 = (int)(int8_t)wat8(w, 192 + 8 * h + 2 * k + 1);
                acc = fmaf(x.d, (float)(c0 * (lo - 32 * x.s0) + c1 * (hi - 32 * x.s1)), acc);
            }
        return wf16(w, 208) * acc;
    }
    /* dot for nb (<= NB) activation sets (Q8W_Q45_K::dot_nb): each group's 6-bit values decoded once */
    template <int NB>
    __device__ static void dot_nb(const uint32_t *w, const uint8_t *xs, int xrec, int nb, float *out) {
        float acc[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) acc[b] = 0.f;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                uint32_t q[8];
#pragma unroll
                for (int i = 0; i < 8; i++)
                    q[i] = ((w[16 * h + 8 * (k & 1) + i] >> (4 * (k >> 1))) & Q8_M4) | ((w[32 + 8 * h + i] >> (2 * k)) & 0x03030303u) << 4;
                const int c0 = (int)(int8_t)wat8(w, 192 + 8 * h + 2 * k), c1 = (int)(int8_t)wat8(w, 192 + 8 * h + 2 * k + 1);
#pragma unroll
                for (int b = 0; b < NB; b++) {
                    if (b >= nb) break;
                    const q8_act x = q8_load_act(xs + b * xrec, 4 * h + k);
                    int lo = 0, hi = 0;
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        if (i < 4) lo = q8_dp4a(q[i], x.a[i], lo);
                        else hi = q8_dp4a(q[i], x.a[i], hi);
                    }
                    acc[b] = fmaf(x.d, (float)(c0 * (lo - 32 * x.s0) + c1 * (hi - 32 * x.s1)), acc[b]);
                }
            }
#pragma unroll
        for (int b = 0; b < NB; b++)
            if (b < nb) out[b] = wf16(w, 208) * acc[b];
    }
};

/* types with dot_nb (the batched kernel decodes a chunk once for all its vectors) */
template <class T> struct q8_dot_nb { static constexpr bool v = false; };
template <bool H> struct q8_dot_nb<Q8W_Q45_K<H>> { static constexpr bool v = true; };
template <> struct q8_dot_nb<Q8W_Q6_K> { static constexpr bool v = true; };

/* ---- host side (gemv_q8.cu) ---- */

/* The q8 path's entry, called by gemv.cu after its own argument checks: 1 when (type, ncols) is
 * not handled here (the caller falls back to the F32-activation kernels), else the result of the
 * launch (0, or -1 with the reason recorded). nmat 2: SwiGLU over (tab0, tab1). tok: expert slots
 * per token (the lane choice depends on a token's rows only). xq: x's records (gpu_q8_records'
 * layout), used when x is shared by every slot (x_stride 0), else ignored. */
int gemv_q8_routed_ok(int type, int ncols, int rn, int k);
int gemv_q8_try_routed(int type, const void *const *tab0, const void *const *tab1, const float *rlog, const float *rbias, int rn,
                       int rfn, int rnorm, float rscale, int *rids, float *rw, int k, const float *x, const void *xq, float *act,
                       int ncols, int nrows, int xq_ready, void *stream);
int gemv_q8_try(int type, const void *w, const void *const *tab0, const void *const *tab1, const int *ids, int k,
                const float *x, int64_t x_stride, float *y, int64_t y_stride, int ncols, int nrows, int nmat, void *stream, int xg = 1, int yg = 1, int64_t ygs = 0,
                int tok = 1, const void *xq = nullptr);

/* One interleaved matrix times x with k_qkv_post's bias and NeoX rotation in the launch's epilogue:
 * rows [0, rows0) (q) plus b0 into d0, the rest (k or v) plus b1 into the cache row d1 + *pos * kvd;
 * heads of hd rows, the first n_rot dims of each rotated at *pos by theta (n_rot 0: none). Bitwise
 * the GEMV followed by k_qkv_post. 0, -1, or 1 (not taken: not interleaved, more than one round of
 * blocks, or rotation pairs across blocks). dry: the check only (pointers may be NULL), nothing launched. */
int gemv_q8_try_post(int type, const void *w, const float *x, const void *xq, int ncols, int nrows, const float *b0, const float *b1,
                     float *d0, float *d1, int rows0, int hd, int n_rot, float theta, int kvd, const int *pos, void *stream,
                     int dry = 0);

/* the mode set by gpu_gemv_set_mode (or HOTMOE_GEMV_MODE at first use): 0 or 1 */
int gemv_q8_mode(void);
/* nb (2..4) vectors x + b * xb_stride times the matrix w in one launch, each weight row read once;
 * results bitwise those of nb single calls. 0, -1 (launch failed), or 1 (not taken). tab0 set:
 * expert ids[0]'s matrix of tab0 instead of w (one slot, as a one-slot launch: the same lanes), and
 * nmat 2 SwiGLU over tab0 (gate) and tab1 (up), as gpu_gemv_experts_swiglu_q8x's one slot. xq: the
 * vectors' q8 records made beforehand (vector b's at xq + b * xq_stride; 16-byte aligned), copied
 * instead of each block quantizing x (the same records: bitwise the same results). */
int gemv_q8_try_batch(int type, const void *w, const float *x, int64_t xb_stride, float *y, int64_t yb_stride, int nb,
                      int ncols, int nrows, void *stream, const void *const *tab0 = nullptr, const void *const *tab1 = nullptr,
                      const int *ids = nullptr, int nmat = 1, const void *xq = nullptr, int64_t xq_stride = 0);

#endif
