/* test_util.h - what several C tests share: PASS/FAIL lines with counters, and a seeded
 * splitmix64 generator (each test sets its own seed, so its data stays its own). Header-only:
 * every test is one translation unit. */
#ifndef HM_TEST_UTIL_H
#define HM_TEST_UTIL_H
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static int n_pass, n_fail;

/* Prints "PASS ..." or "FAIL ..." and counts it; main ends with "N passed, M failed". */
static inline void report(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) n_pass++; else n_fail++;
}

/* max |a - ref| / max |ref| over n values (a NaN in a makes it NaN, so a bound check fails) */
static inline double max_rel_err(const float *a, const float *ref, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return md / mr;
}

static uint64_t rng;
static inline void rng_seed(uint64_t s) { rng = s; }
static inline uint64_t next_u64(void) { /* splitmix64 */
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float uniform(void) { return (float)((next_u64() >> 40) * (1.0 / 16777216.0)); }
/* roughly normal (sum of four uniforms), mean 0 */
static inline float gauss(void) { return uniform() + uniform() + uniform() + uniform() - 2.0f; }
static inline int rand_int(int n) { return (int)(next_u64() % (uint64_t)n); }

#endif
