/* bench/workers.c - CPU expert workers: GB/s of expert weights read per MoE-layer job (t tokens,
 * 8 cold experts each, a3b and air expert shapes) for 1..16 worker threads, against the DRAM read
 * ceiling measured here with the same thread count. The experts live in the pinned arena, in a
 * pool larger than the last-level cache, and each job picks fresh random experts from it.
 * usage: bench_workers [--shapes a3b,air] [--threads 1,2,4,8,16] [--tokens 1,4] [--runs N]
 *                      [--pool-mib MiB] [--spin-us US] [--no-bind] [--json FILE] */
#include "membw.h"
#include "util.h"
#include "arena.h"
#include "gemv.h"
#include "quant.h"
#include "workers.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RUNS 200
#define MAX_LIST 16
#define N_COLD 8

typedef struct { const char *name; int n_embd, n_ff, tgu, tdown; } shape;
/* BENCH.md: a3b = Qwen3-30B-A3B Q4_K_M (expert gate/up Q4_K, down Q6_K); air = GLM-4.5-Air
 * Q3_K_M-like (gate/up Q3_K, down Q4_0 since rows of 1408 are not a multiple of 256) */
static const shape shapes[] = {
    { "a3b", 2048, 768, HM_TYPE_Q4_K, HM_TYPE_Q6_K },
    { "air", 4096, 1408, HM_TYPE_Q3_K, HM_TYPE_Q4_0 },
};




static int parse_list(const char *s, int *out) {
    int n = 0;
    for (char *e; *s && n < MAX_LIST; s = *e ? e + 1 : e) {
        out[n] = (int)strtol(s, &e, 10);
        if (e == s || out[n] < 1) return -1;
        n++;
    }
    return n;
}


/* The same work for 1 token through the existing OpenMP path (gemv.h: hm_gemv_multi, one region
 * for the 16 gate/up matrices, one for the 8 downs): what the pool is to match or beat. */
static volatile uint64_t sink; /* keeps results the timing loop would otherwise drop */

static double omp_job_s(const hm_expert *ex, const int *ids, const float *x, int threads) {
    const hm_ffn_w *f0 = &ex[ids[0]].host;
    const int64_t d = f0->gate.ne[0], ff = f0->gate.ne[1];
    static float h[N_COLD][4096], u[N_COLD][4096], y[N_COLD][8192];
    static uint8_t xq[8192 * 2], hq[N_COLD][8192];
    const hm_tensor *W[2 * N_COLD];
    const void *xs[2 * N_COLD];
    float *ys[2 * N_COLD];
    omp_set_num_threads(threads);
    const double t0 = hm_now();
    hm_act_quantize(f0->gate.type, x, xq, d);
    for (int j = 0; j < N_COLD; j++) {
        W[2 * j] = &ex[ids[j]].host.gate; xs[2 * j] = xq; ys[2 * j] = h[j];
        W[2 * j + 1] = &ex[ids[j]].host.up; xs[2 * j + 1] = xq; ys[2 * j + 1] = u[j];
    }
    hm_gemv_multi(2 * N_COLD, W, xs, ys);
    for (int j = 0; j < N_COLD; j++) {
        for (int64_t i = 0; i < ff; i++) h[j][i] = h[j][i] / (1.0f + expf(-h[j][i])) * u[j][i];
        hm_act_quantize(f0->down.type, h[j], hq[j], ff);
        W[j] = &ex[ids[j]].host.down; xs[j] = hq[j]; ys[j] = y[j];
    }
    hm_gemv_multi(N_COLD, W, xs, ys);
    float s = 0;
    for (int64_t i = 0; i < d; i++)
        for (int j = 0; j < N_COLD; j++) s += 0.125f * y[j][i];
    const double dt = hm_now() - t0;
    sink = (uint64_t)s;
    return dt;
}

/* lets an OpenMP team that has just finished go to sleep before the pool is timed */
static void settle(void) {
    const struct timespec ts = { 0, 50 * 1000 * 1000 };
    nanosleep(&ts, NULL);
}

/* ---- the expert pool ---- */

static hm_tensor proto_tensor(int type, int64_t cols, int64_t rows) {
    const size_t rs = hm_row_size(type, cols);
    float *src = malloc(sizeof(float) * (size_t)cols);
    uint8_t *data = malloc(rs * (size_t)rows);
    uint32_t s = 777u + (uint32_t)type;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++) {
            s = s * 1664525u + 1013904223u;
            src[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.1f;
        }
        hm_type_get(type)->from_float(src, data + (size_t)r * rs, cols);
    }
    free(src);
    return (hm_tensor){ .type = type, .n_dims = 2, .ne = { cols, rows, 1, 1 }, .data = data, .nbytes = rs * (size_t)rows };
}

static size_t ffn_bytes(const hm_ffn_w *f) { return f->gate.nbytes + f->up.nbytes + f->down.nbytes; }

typedef struct { const char *shape; int threads, tokens, experts; double mb, us, gbs, ceil_gbs, omp_gbs; } result;

int main(int argc, char **argv) {
    const char *shape_list = "a3b,air", *json = NULL;
    int threads[MAX_LIST] = { 1, 2, 4, 8, 16 }, n_threads = 5, toks[MAX_LIST] = { 1, 4 }, n_toks = 2;
    int runs = 30, pool_mib = 1024, spin_us = -1, bind = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--shapes") && v) shape_list = argv[++i];
        else if (!strcmp(a, "--threads") && v) { if ((n_threads = parse_list(argv[++i], threads)) < 1) goto usage; }
        else if (!strcmp(a, "--tokens") && v) { if ((n_toks = parse_list(argv[++i], toks)) < 1) goto usage; }
        else if (!strcmp(a, "--runs") && v) runs = atoi(argv[++i]);
        else if (!strcmp(a, "--pool-mib") && v) pool_mib = atoi(argv[++i]);
        else if (!strcmp(a, "--spin-us") && v) spin_us = atoi(argv[++i]);
        else if (!strcmp(a, "--no-bind")) bind = 0;
        else if (!strcmp(a, "--json") && v) json = argv[++i];
        else goto usage;
    }
    if (runs < 1 || runs > MAX_RUNS || pool_mib < 64) goto usage;
    for (int i = 0; i < n_toks; i++) if (toks[i] > 64) goto usage;

    result res[2 * MAX_LIST * MAX_LIST];
    int n_res = 0;
    printf("bench_workers: gemv ISA %s, %d runs per point, expert pool %d MiB (fresh random experts per job)\n",
           hm_gemv_isa(), runs, pool_mib);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *sh = &shapes[si];
        if (!strstr(shape_list, sh->name)) continue;
        hm_ffn_w proto = { proto_tensor(sh->tgu, sh->n_embd, sh->n_ff), proto_tensor(sh->tgu, sh->n_embd, sh->n_ff),
                           proto_tensor(sh->tdown, sh->n_ff, sh->n_embd) };
        const size_t eb = arena_ffn_bytes(&proto);
        int n_pool = (int)(((size_t)pool_mib << 20) / eb);
        if (n_pool < 4 * N_COLD * 4) n_pool = 4 * N_COLD * 4;
        hm_arena ar;
        char err[512];
        if (arena_init(&ar, eb * (size_t)n_pool, -1, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        printf("\n%s: expert %.2f MB (gate/up %s, down %s), %d in the arena (%zu MiB, node %d, locked %d, THP %d)\n",
               sh->name, ffn_bytes(&proto) / 1e6, hm_type_name(sh->tgu), hm_type_name(sh->tdown), n_pool,
               ar.size >> 20, ar.node, ar.locked, ar.huge);
        if (ar.note[0]) printf("  arena note: %s\n", ar.note);
        hm_expert *ex = calloc((size_t)n_pool, sizeof *ex);
        for (int e = 0; e < n_pool; e++) arena_copy_ffn(&ar, &proto, &ex[e].host, NULL, 0);
        float *x = malloc(sizeof(float) * 64 * (size_t)sh->n_embd), *out = malloc(sizeof(float) * 64 * (size_t)sh->n_embd);
        for (int i = 0; i < 64 * sh->n_embd; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        printf("%7s %7s %8s %9s %10s %9s %11s %7s %10s\n", "threads", "tokens", "experts", "MB/job", "us/job", "GB/s",
               "ceiling", "%ceil", "OpenMP");
        for (int ti = 0; ti < n_threads; ti++) {
            const int nt = threads[ti];
            const double ceil = cpu_dram_read_gbs(ar.base, ar.used, nt, 5);
            settle();
            workers_config cfg = { .n_threads = nt, .numa_node = -1, .bind = bind, .spin_us = spin_us };
            workers *wk = workers_init(&cfg, err, sizeof err);
            if (!wk) { fprintf(stderr, "%s\n", err); return 1; }
            if (ti == n_threads - 1 || nt == 1) printf("  (%s)\n", workers_describe(wk));
            for (int k = 0; k < n_toks; k++) {
                const int nt_tok = toks[k];
                int n_cold[64], ids[64 * N_COLD];
                float w[64 * N_COLD];
                double t[MAX_RUNS], t_omp[MAX_RUNS], bytes_sum = 0;
                int uniq_sum = 0;
                uint32_t rs = 99u + (uint32_t)nt;
                unsigned char *seen = calloc((size_t)n_pool, 1);
                for (int r = -2; r < runs; r++) { /* two warm-ups */
                    memset(seen, 0, (size_t)n_pool);
                    int uniq = 0;
                    for (int tk = 0; tk < nt_tok; tk++) {
                        n_cold[tk] = N_COLD;
                        for (int j = 0; j < N_COLD; j++) {
                            int e, dup;
                            do { /* distinct within the token */
                                rs = rs * 1664525u + 1013904223u;
                                e = (int)((rs >> 8) % (uint32_t)n_pool);
                                dup = 0;
                                for (int q = 0; q < j; q++) dup |= ids[tk * N_COLD + q] == e;
                            } while (dup);
                            ids[tk * N_COLD + j] = e;
                            w[tk * N_COLD + j] = 0.125f;
                            if (!seen[e]) { seen[e] = 1; uniq++; }
                        }
                    }
                    workers_job job = { .n_tok = nt_tok, .n_embd = sh->n_embd, .x = x, .k = N_COLD, .n_cold = n_cold,
                                        .ids = ids, .w = w, .experts = ex, .n_expert = n_pool, .out = out };
                    const double t0 = hm_now();
                    if (workers_submit(wk, &job, err, sizeof err) < 0) { fprintf(stderr, "%s\n", err); return 1; }
                    workers_wait(wk);
                    const double dt = hm_now() - t0;
                    if (r >= 0) { t[r] = dt; bytes_sum += (double)uniq * (double)ffn_bytes(&proto); uniq_sum += uniq; }

                }
                free(seen);
                /* the OpenMP path after the pool's runs, not between them: an idle OpenMP team spins
                 * for a while after each region and would take the cores from the workers */
                if (nt_tok == 1) {
                    for (int r = -2; r < runs; r++) {
                        for (int j = 0; j < N_COLD; j++) {
                            rs = rs * 1664525u + 1013904223u;
                            ids[j] = (int)((rs >> 8) % (uint32_t)(n_pool / N_COLD)) * N_COLD + j; /* distinct */
                        }
                        const double dt = omp_job_s(ex, ids, x, nt);
                        if (r >= 0) t_omp[r] = dt;
                    }
                    settle();
                }
                const double mb = bytes_sum / runs / 1e6, us = hm_median(t, runs) * 1e6;
                result *o = &res[n_res++];
                const double omp_gbs = nt_tok == 1 ? mb / hm_median(t_omp, runs) * 1e-3 : 0;
                *o = (result){ sh->name, nt, nt_tok, (uniq_sum + runs / 2) / runs, mb, us, mb * 1e6 / (us * 1e-6) * 1e-9, ceil, omp_gbs };
                printf("%7d %7d %8d %9.1f %10.0f %9.2f %11.2f %6.0f%% ", nt, nt_tok, o->experts, mb, us, o->gbs, ceil,
                       100.0 * o->gbs / ceil);
                if (omp_gbs > 0) printf("%10.2f\n", omp_gbs); else printf("%10s\n", "-");
            }
            workers_free(wk);
        }
        free(ex); free(x); free(out);
        free((void *)proto.gate.data); free((void *)proto.up.data); free((void *)proto.down.data);
        arena_free(&ar);
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) { fprintf(stderr, "cannot write %s\n", json); return 1; }
        fprintf(f, "{\"bench\": \"workers\", \"isa\": \"%s\", \"runs\": %d, \"pool_mib\": %d, \"cold_per_token\": %d, \"results\": [\n",
                hm_gemv_isa(), runs, pool_mib, N_COLD);
        for (int i = 0; i < n_res; i++)
            fprintf(f, "  {\"shape\": \"%s\", \"threads\": %d, \"tokens\": %d, \"experts\": %d, \"mb_per_job\": %.3f, "
                    "\"us_per_job\": %.1f, \"gbs\": %.3f, \"ceiling_gbs\": %.3f, \"frac_of_ceiling\": %.3f, \"openmp_gbs\": %.3f}%s\n",
                    res[i].shape, res[i].threads, res[i].tokens, res[i].experts, res[i].mb, res[i].us, res[i].gbs,
                    res[i].ceil_gbs, res[i].gbs / res[i].ceil_gbs, res[i].omp_gbs, i + 1 < n_res ? "," : "");
        fprintf(f, "]}\n");
        fclose(f);
        printf("\nwrote %s\n", json);
    }
    return 0;
usage:
    fprintf(stderr, "usage: bench_workers [--shapes a3b,air] [--threads 1,2,4,8,16] [--tokens 1,4] [--runs N<=%d]\n"
                    "                     [--pool-mib MiB>=64] [--spin-us US] [--no-bind] [--json FILE]\n", MAX_RUNS);
    return 2;
}
