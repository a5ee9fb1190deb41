/* membw.c - DRAM read ceiling: every thread sums its contiguous share of a large buffer. */
#include "membw.h"
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
    }
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    uint64_t s = t[0] + t[1] + t[2] + t[3];
    for (; i < n; i++) s += p[i];
    return s;
}
#endif

static uint64_t sum_plain(const uint64_t *p, size_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) { s0 += p[i]; s1 += p[i + 1]; s2 += p[i + 2]; s3 += p[i + 3]; }
    for (; i < n; i++) s0 += p[i];
    return s0 + s1 + s2 + s3;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static volatile uint64_t sink; /* keeps the sums, so the reads are not optimised away */

double cpu_dram_read_gbs(const void *buf, size_t bytes, int threads, int runs) {
    double t[64];
    const uint64_t *p = buf;
    const size_t n = bytes / sizeof(uint64_t);
    if (runs < 1) runs = 1;
    if (runs > 64) runs = 64;
#if defined(__x86_64__)
    const int avx2 = __builtin_cpu_supports("avx2");
#endif
    for (int r = -1; r < runs; r++) {
        uint64_t total = 0;
        const double t0 = now_s();
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            const int k = omp_get_thread_num(), nt = omp_get_num_threads();
            const size_t a = n * (size_t)k / (size_t)nt, b = n * (size_t)(k + 1) / (size_t)nt;
#if defined(__x86_64__)
            total += avx2 ? sum_avx2(p + a, b - a) : sum_plain(p + a, b - a);
#else
            total += sum_plain(p + a, b - a);
#endif
        }
        const double dt = now_s() - t0;
        sink = total;
        if (r >= 0) t[r] = dt;
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_double);
    const double med = runs % 2 ? t[runs / 2] : 0.5 * (t[runs / 2 - 1] + t[runs / 2]);
    return (double)(n * sizeof(uint64_t)) / med * 1e-9;
}
