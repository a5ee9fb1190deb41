/* bench/gemv.c - GEMV weight-read bandwidth per quant type and ISA, 1 thread and all threads,
 * against a DRAM read ceiling measured here at start (the roofline a decode step is judged by).
 * usage: bench_gemv [--size MiB] [--cols N] [--runs N] [--threads N] [--types A,B] [--isa A,B] [--json FILE] */
#include "membw.h"
#include "util.h"
#include "cpu.h"
#include "gemv.h"
#include "quant.h"
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RUNS 64




/* ---- GEMV ---- */

typedef struct { int type; const char *isa; int threads; double ms, gbs, frac, ideal_ms; } result;

static int in_list(const char *list, const char *name) {
    if (!list) return 1;
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* A weight matrix of ~bytes: a pool of rows quantized from random floats, copied around (the
 * kernels have no data-dependent branches, so content beyond validity does not change timing).
 * The copy runs in the threads' own shares so pages are first touched where they are read. */
static int make_matrix(hm_tensor *W, int t, int64_t cols, size_t bytes) {
    enum { POOL = 32 };
    const hm_type_traits *tr = hm_type_get(t);
    const size_t rs = hm_row_size(t, cols);
    const int64_t rows = (int64_t)(bytes / rs) / 16 * 16;
    uint8_t *pool = malloc(rs * POOL), *data = NULL;
    float *src = malloc(sizeof(float) * (size_t)cols);
    if (!pool || !src || posix_memalign((void **)&data, 4096, rs * (size_t)rows)) {
        free(pool); free(src);
        return -1;
    }
    uint32_t s = 12345u + (uint32_t)t;
    for (int r = 0; r < POOL; r++) {
        for (int64_t i = 0; i < cols; i++) {
            s = s * 1664525u + 1013904223u;
            src[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.1f;
        }
        tr->from_float(src, pool + (size_t)r * rs, cols);
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) memcpy(data + (size_t)r * rs, pool + (size_t)(r % POOL) * rs, rs);
    free(pool); free(src);
    *W = (hm_tensor){ .type = t, .n_dims = 2, .ne = { cols, rows, 1, 1 }, .data = data, .nbytes = rs * (size_t)rows };
    return 0;
}

static double time_gemv(const hm_tensor *W, const float *x, float *y, int threads, int runs) {
    double t[MAX_RUNS];
    omp_set_num_threads(threads);
    for (int r = -1; r < runs; r++) { /* one warm-up: thread team, page tables, activation buffer */
        const double t0 = hm_now();
        hm_gemv(y, W, x);
        if (r >= 0) t[r] = hm_now() - t0;
    }
    return hm_median(t, runs);
}

int main(int argc, char **argv) {
    size_t size_mib = 2048; /* well past the device's L3 (reported 300 MB) so no run is served from it */
    int64_t cols = 4096;
    int runs = 5, threads = omp_get_max_threads();
    const char *types_arg = NULL, *isa_arg = NULL, *json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "bench_gemv: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--size")) size_mib = (size_t)atol(v);
        else if (!strcmp(a, "--cols")) cols = atol(v);
        else if (!strcmp(a, "--runs")) runs = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--types")) types_arg = v;
        else if (!strcmp(a, "--isa")) isa_arg = v;
        else if (!strcmp(a, "--json")) json = v;
        else { fprintf(stderr, "bench_gemv: unknown option %s\n", a); return 2; }
        i++;
    }
    if (runs < 3) runs = 3;
    if (runs > MAX_RUNS) runs = MAX_RUNS;
    if (threads < 1 || size_mib < 1 || cols < 256 || cols % 256) {
        fprintf(stderr, "bench_gemv: need --threads >= 1, --size >= 1, --cols a multiple of 256 (got %d, %zu, %lld)\n",
                threads, size_mib, (long long)cols);
        return 2;
    }
    const size_t bytes = size_mib << 20;
    const int thread_set[2] = { 1, threads };
    const int n_thread_set = threads > 1 ? 2 : 1;

    /* the ceiling, on a buffer as large as the matrices */
    uint64_t *buf = NULL;
    if (posix_memalign((void **)&buf, 4096, bytes)) { fprintf(stderr, "bench_gemv: out of memory\n"); return 1; }
    omp_set_num_threads(threads);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < bytes / 8; i++) buf[i] = i;
    double ceiling[2];
    for (int k = 0; k < n_thread_set; k++) ceiling[k] = cpu_dram_read_gbs(buf, bytes, thread_set[k], runs);
    free(buf);
    printf("# DRAM read ceiling (%zu MiB, median of %d): 1 thread %.1f GB/s", size_mib, runs, ceiling[0]);
    if (n_thread_set > 1) printf(", %d threads %.1f GB/s", threads, ceiling[1]);
    printf("\n# best ISA here: %s; matrices of ~%zu MiB, rows of %lld\n", hm_gemv_isa(), size_mib, (long long)cols);

    static const int types[] = {
        HM_TYPE_Q4_K, HM_TYPE_Q8_0, HM_TYPE_Q2_K, HM_TYPE_Q3_K, HM_TYPE_Q5_K, HM_TYPE_Q6_K, HM_TYPE_IQ4_XS,
        HM_TYPE_Q4_0, HM_TYPE_Q4_1, HM_TYPE_Q5_0, HM_TYPE_Q5_1, HM_TYPE_MXFP4, HM_TYPE_F16, HM_TYPE_BF16, HM_TYPE_F32,
    };
    static const char *const isas[] = { "scalar", "avx2", "avx512" };
    const char *best = hm_gemv_isa();
    enum { NT = sizeof types / sizeof types[0], NI = sizeof isas / sizeof isas[0] };
    result *res = calloc(NT * NI * 2, sizeof *res);
    int nres = 0;
    float *x = malloc(sizeof(float) * (size_t)cols);
    for (int64_t i = 0; i < cols; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (int ti = 0; ti < NT; ti++) {
        const int t = types[ti];
        if (!in_list(types_arg, hm_type_name(t))) continue;
        hm_tensor W;
        omp_set_num_threads(threads);
        if (make_matrix(&W, t, cols, bytes)) { fprintf(stderr, "bench_gemv: out of memory for %s\n", hm_type_name(t)); return 1; }
        float *y = malloc(sizeof(float) * (size_t)W.ne[1]);
        for (int ii = 0; ii < NI; ii++) {
            if (!in_list(isa_arg, isas[ii]) || hm_gemv_force_isa(isas[ii])) continue;
            for (int k = 0; k < n_thread_set; k++) {
                const double s = time_gemv(&W, x, y, thread_set[k], runs);
                result *r = &res[nres++];
                *r = (result){ t, isas[ii], thread_set[k], s * 1e3, (double)W.nbytes / s * 1e-9, 0, 0 };
                r->frac = r->gbs / ceiling[k];
                r->ideal_ms = (double)W.nbytes / (ceiling[k] * 1e9) * 1e3;
                printf("%-6s %-6s %2d thr  %8.2f ms  %6.1f GB/s  %5.1f%% of ceiling\n", hm_type_name(t), isas[ii],
                       thread_set[k], r->ms, r->gbs, 100 * r->frac);
                fflush(stdout);
            }
        }
        hm_gemv_force_isa(best);
        free(y);
        free((void *)W.data);
    }

    printf("\n%-6s %-6s %7s %10s %10s %8s %8s\n", "type", "isa", "threads", "ms", "ideal ms", "GB/s", "ceiling");
    for (int i = 0; i < nres; i++)
        printf("%-6s %-6s %7d %10.2f %10.2f %8.1f %7.1f%%\n", hm_type_name(res[i].type), res[i].isa, res[i].threads,
               res[i].ms, res[i].ideal_ms, res[i].gbs, 100 * res[i].frac);

    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) { fprintf(stderr, "bench_gemv: cannot write %s\n", json); return 1; }
        fprintf(f, "{\n  \"bench\": \"gemv\",\n  \"size_mib\": %zu,\n  \"cols\": %lld,\n  \"runs\": %d,\n  \"threads\": %d,\n",
                size_mib, (long long)cols, runs, threads);
        fprintf(f, "  \"best_isa\": \"%s\",\n  \"ceiling_gbs\": {\"1\": %.3f", best, ceiling[0]);
        if (n_thread_set > 1) fprintf(f, ", \"%d\": %.3f", threads, ceiling[1]);
        fprintf(f, "},\n  \"results\": [\n");
        for (int i = 0; i < nres; i++)
            fprintf(f, "    {\"type\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"ms\": %.4f, \"ideal_ms\": %.4f, "
                       "\"gbs\": %.3f, \"frac_of_ceiling\": %.4f}%s\n",
                    hm_type_name(res[i].type), res[i].isa, res[i].threads, res[i].ms, res[i].ideal_ms, res[i].gbs,
                    res[i].frac, i + 1 < nres ? "," : "");
        fprintf(f, "  ]\n}\n");
        fclose(f);
    }
    free(res);
    free(x);
    return 0;
}
