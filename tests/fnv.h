/* fnv.h - FNV-1a hashes of a run's output, for the GPU benches (a variant must give the same hash):
 * over 32-bit words (a float array), then over bytes. */
#ifndef HM_TEST_FNV_H
#define HM_TEST_FNV_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define FNV0 1469598103934665603ull
static inline uint64_t fnv_words(uint64_t h, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) { uint32_t u; memcpy(&u, &x[i], 4); h = (h ^ u) * 1099511628211ull; }
    return h;
}
static inline uint64_t fnv_bytes(uint64_t h, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
#endif
