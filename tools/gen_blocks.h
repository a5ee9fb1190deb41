/* gen_blocks.h - random but valid weight blocks of every GGUF type at a chosen weight std, for the
 * synthetic model generator. Bytes come from a counter-based PRNG keyed by (seed, tensor, chunk),
 * so a file is identical whatever the thread count. */
#ifndef HM_GEN_BLOCKS_H
#define HM_GEN_BLOCKS_H
#include <stddef.h>
#include <stdint.h>
#include "util.h"

/* wyrand: one add and one 64x64->128 multiply per 64 random bits (~7 GB/s a core); a stream is
 * one 64-bit counter, its start derived from the key by splitmix64's mixer. */
typedef struct { uint64_t s; } gen_rng;

static inline uint64_t gen_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline uint64_t gen_next(gen_rng *r) {
    r->s += 0xA0761D6478BD642Full;
    __uint128_t t = (__uint128_t)r->s * (r->s ^ 0xE7037ED1A0B428DBull);
    return (uint64_t)(t >> 64) ^ (uint64_t)t;
}
/* A stream for the key (a, b, c): independent of every other key. */
static inline gen_rng gen_stream(uint64_t a, uint64_t b, uint64_t c) {
    gen_rng r = { gen_mix64(gen_mix64(gen_mix64(a) ^ (b + 0x632BE59BD9B4E019ull)) ^ (c + 0x2545F4914F6CDD1Dull)) };
    return r;
}
/* Uniform in [0, 1), 24 bits. */
static inline float gen_unif(gen_rng *r) { return (float)(gen_next(r) >> 40) * (1.0f / 16777216.0f); }

/* Measures, for every type this generator knows, the std of its blocks at unit scale (through the
 * type table's own to_float, so the result holds for the real decoder). Call once before use.
 * Returns 0, or -1 when a type's decoder is missing or gives non-finite values. */
int gen_blocks_init(hm_error *e);
/* Whether type t can be generated. */
int gen_type_supported(int t);
/* Fills nbytes (a whole number of rows of type t) at dst with weights of mean `mean` (float types
 * only; block types are centred on 0) and standard deviation `std`, in parallel chunks of ~1 MiB.
 * The bytes depend only on (seed, tensor_id, t, nbytes, std, mean). */
void gen_tensor_fill(int t, void *dst, size_t nbytes, uint64_t seed, uint64_t tensor_id, float std, float mean);

#endif
