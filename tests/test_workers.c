/* test_workers.c - the CPU expert workers and the cold-expert arena: worker results against the
 * sum of cpu_ffn over the same experts (bit-equal with the same kernels, within the activation
 * quantization's error against the reference kernels), for F32 and quantized experts of odd
 * sizes, 1-4 tokens and a 37-token chunk, 0 / some / all experts cold, 1-3 threads; 1000 small
 * jobs against races; malformed jobs; the arena's copies; clean shutdown. */
#include "arena.h"
#include "cpu.h"
#include "gemv.h"
#include "quant.h"
#include "workers.h"
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "test_util.h"

#define N_EXPERT 12
#define N_TOK 37  /* the prefill chunk; decode jobs use its first 1..4 tokens */
#define POISON 12345.0f
#define GUARD 16

/* One test shape: expert weight types and sizes (odd where the blocks allow it). */
typedef struct { const char *name; int tgu, tdown, n_embd, n_ff; } shape;
static const shape shapes[] = {
    { "F32/F32", HM_TYPE_F32, HM_TYPE_F32, 67, 45 },
    { "Q8_0/Q8_0", HM_TYPE_Q8_0, HM_TYPE_Q8_0, 96, 160 },
    { "Q4_0/F32", HM_TYPE_Q4_0, HM_TYPE_F32, 160, 77 },
    { "Q4_K/Q6_K", HM_TYPE_Q4_K, HM_TYPE_Q6_K, 512, 256 },
    { "Q4_K/Q8_0", HM_TYPE_Q4_K, HM_TYPE_Q8_0, 256, 352 },
    { "Q6_K/Q4_0", HM_TYPE_Q6_K, HM_TYPE_Q4_0, 256, 224 },
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* a (rows x cols) tensor of `type` quantized from random floats with the type table's from_float */
static hm_tensor make_tensor(int type, int64_t cols, int64_t rows) {
    hm_tensor t = { .type = type, .n_dims = 2, .ne = { cols, rows, 1, 1 } };
    const size_t rs = hm_row_size(type, cols);
    float *src = malloc(sizeof(float) * (size_t)(cols * rows));
    const float scale = 1.0f / sqrtf((float)cols);
    for (int64_t i = 0; i < cols * rows; i++) src[i] = scale * gauss();
    void *data = malloc(rs * (size_t)rows);
    for (int64_t r = 0; r < rows; r++)
        hm_type_get(type)->from_float(src + r * cols, (uint8_t *)data + (size_t)r * rs, cols);
    free(src);
    t.data = data;
    t.nbytes = rs * (size_t)rows;
    return t;
}

/* A layer's worth of experts of shape s, their inputs, and each (expert, token) FFN output
 * computed by cpu_ffn with the fast (F) and the reference (R) kernels. */
typedef struct {
    const shape *s;
    hm_expert experts[N_EXPERT];
    float *x;   /* (N_TOK, n_embd) */
    float *F, *R; /* (N_EXPERT, N_TOK, n_embd) */
} fixture;

static void fixture_init(fixture *f, const shape *s) {
    memset(f, 0, sizeof *f);
    f->s = s;
    const int d = s->n_embd, ff = s->n_ff;
    for (int e = 0; e < N_EXPERT; e++) {
        hm_ffn_w *w = &f->experts[e].host;
        w->gate = make_tensor(s->tgu, d, ff);
        w->up = make_tensor(s->tgu, d, ff);
        w->down = make_tensor(s->tdown, ff, d);
    }
    f->x = malloc(sizeof(float) * (size_t)N_TOK * d);
    for (int i = 0; i < N_TOK * d; i++) f->x[i] = gauss();
    f->F = malloc(sizeof(float) * (size_t)N_EXPERT * N_TOK * d);
    f->R = malloc(sizeof(float) * (size_t)N_EXPERT * N_TOK * d);
    float *hb = malloc(sizeof(float) * ff), *hb2 = malloc(sizeof(float) * ff);
    for (int mode = 0; mode < 2; mode++) {
        hm_kernels_set(mode ? HM_KERNELS_REF : HM_KERNELS_FAST);
        for (int e = 0; e < N_EXPERT; e++)
            for (int t = 0; t < N_TOK; t++)
                cpu_ffn((mode ? f->R : f->F) + ((size_t)e * N_TOK + t) * d, &f->experts[e].host,
                        f->x + (size_t)t * d, hb, hb2);
    }
    hm_kernels_set(HM_KERNELS_FAST);
    free(hb);
    free(hb2);
}

/* frees what fixture_init allocated */
static void fixture_free(fixture *f) {
    for (int e = 0; e < N_EXPERT; e++) {
        free((void *)f->experts[e].host.gate.data);
        free((void *)f->experts[e].host.up.data);
        free((void *)f->experts[e].host.down.data);
    }
    free(f->x); free(f->F); free(f->R);
}

/* A job's routing: per token up to k cold experts (distinct ids, random weights). */
typedef struct { int n_tok, k; int n_cold[N_TOK]; int ids[N_TOK * N_EXPERT]; float w[N_TOK * N_EXPERT]; } routing;

enum { COLD_NONE, COLD_SOME, COLD_ALL };
static void routing_make(routing *r, int n_tok, int how) {
    r->n_tok = n_tok;
    r->k = how == COLD_SOME ? 4 : N_EXPERT;
    for (int t = 0; t < n_tok; t++) {
        int perm[N_EXPERT];
        for (int e = 0; e < N_EXPERT; e++) perm[e] = e;
        for (int e = N_EXPERT - 1; e > 0; e--) { int j = rand_int(e + 1), tmp = perm[e]; perm[e] = perm[j]; perm[j] = tmp; }
        r->n_cold[t] = how == COLD_NONE ? 0 : how == COLD_ALL ? N_EXPERT : rand_int(r->k + 1);
        for (int j = 0; j < r->n_cold[t]; j++) {
            r->ids[t * r->k + j] = perm[j];
            r->w[t * r->k + j] = 0.05f + uniform();
        }
        for (int j = r->n_cold[t]; j < r->k; j++) {   /* the unused entries defined too (check_errors reads them) */
            r->ids[t * r->k + j] = perm[j];
            r->w[t * r->k + j] = 0.f;
        }
    }
}

/* expected out of token t: the sum, in list order, as forward.c's moe() accumulates it */
static void expected(const fixture *f, const routing *r, const float *per, int t, float *out) {
    const int d = f->s->n_embd;
    for (int i = 0; i < d; i++) out[i] = 0;
    for (int j = 0; j < r->n_cold[t]; j++) {
        const float *y = per + ((size_t)r->ids[t * r->k + j] * N_TOK + t) * d;
        const float wj = r->w[t * r->k + j];
        for (int i = 0; i < d; i++) out[i] += wj * y[i];
    }
}

/* max |a-b| over max |b| (0 when both are all zero) */
static double rel_err(const float *a, const float *b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = d; /* NaN propagates */
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

/* Runs r through the pool on the experts `ex`; out has GUARD poisoned floats past the end. 0 ok. */
static int run_job(workers *wk, const fixture *f, const hm_expert *ex, const routing *r, float *out,
                   uint32_t *flag, uint32_t flag_value, int use_poll) {
    const int d = f->s->n_embd;
    for (int i = 0; i < r->n_tok * d + GUARD; i++) out[i] = i < r->n_tok * d ? NAN : POISON;
    workers_job j = { .layer = 7, .n_tok = r->n_tok, .n_embd = d, .x = f->x, .k = r->k, .n_cold = r->n_cold,
                      .ids = r->ids, .w = r->w, .experts = ex, .n_expert = N_EXPERT, .out = out,
                      .flag = flag, .flag_value = flag_value };
    char err[256];
    if (workers_submit(wk, &j, err, sizeof err) < 0) {
        printf("  submit: %s\n", err);
        return -1;
    }
    if (use_poll) while (!workers_poll(wk)) {}
    else workers_wait(wk);
    for (int i = 0; i < GUARD; i++)
        if (out[r->n_tok * d + i] != POISON) return -1;
    return 0;
}

/* Every token count and cold pattern for shape f, `nt` threads, one kernel mode. */
static void check_shape(const fixture *f, int nt, int ref) {
    workers_config cfg = { .n_threads = nt, .numa_node = -1, .bind = 1, .spin_us = 20 };
    char err[256];
    workers *wk = workers_init(&cfg, err, sizeof err);
    if (!wk) { report(0, "%s threads=%d: workers_init: %s", f->s->name, nt, err); return; }
    hm_kernels_set(ref ? HM_KERNELS_REF : HM_KERNELS_FAST);
    const int d = f->s->n_embd;
    float *out = malloc(sizeof(float) * ((size_t)N_TOK * d + GUARD)), *want = malloc(sizeof(float) * d);
    static const int toks[] = { 1, 2, 3, 4, N_TOK };
    int jobs = 0, bad = 0;
    double worst_exact = 0, worst_vs_ref = 0;
    uint32_t flag = 0;
    for (int ti = 0; ti < 5; ti++)
        for (int how = COLD_NONE; how <= COLD_ALL; how++) {
            routing r;
            routing_make(&r, toks[ti], how);
            const uint32_t fv = 0x1000u + (uint32_t)jobs;
            if (run_job(wk, f, f->experts, &r, out, &flag, fv, jobs & 1) || flag != fv) { bad++; continue; }
            jobs++;
            for (int t = 0; t < r.n_tok; t++) {
                expected(f, &r, ref ? f->R : f->F, t, want); /* same kernels: must be bit-equal */
                const double e = rel_err(out + (size_t)t * d, want, d);
                if (!(e <= worst_exact)) worst_exact = e;
                expected(f, &r, f->R, t, want);              /* against the reference kernels */
                const double e2 = rel_err(out + (size_t)t * d, want, d);
                if (!(e2 <= worst_vs_ref)) worst_vs_ref = e2;
            }
        }
    /* activation quantization (Q8_0 / Q8_K of x and of h) costs up to ~2.5% of the largest output here (random
     * zero-mean weights: outputs are sums of cancelling terms); the same as cpu_ffn's own error */
    const double tol = f->s->tgu == HM_TYPE_F32 && f->s->tdown == HM_TYPE_F32 ? 1e-5 : 4e-2;
    report(!bad && worst_exact == 0 && worst_vs_ref <= tol,
           "%-10s threads=%d %s: %d jobs (1-4, %d tokens; 0/some/all cold) equal the sum of cpu_ffn "
           "(max rel diff %.1e), vs reference kernels %.1e (tol %.0e)%s",
           f->s->name, nt, ref ? "ref " : "fast", jobs, N_TOK, worst_exact, worst_vs_ref, tol,
           bad ? " - a job failed or wrote past its output" : "");
    hm_kernels_set(HM_KERNELS_FAST);
    free(out);
    free(want);
    workers_free(wk);
}

/* 1000 small jobs (1 token, 1-3 cold experts, wait and poll alternating) against races. */
static void check_many(const fixture *f, int nt) {
    workers_config cfg = { .n_threads = nt, .numa_node = -1, .bind = 1, .spin_us = 20 };
    char err[256];
    workers *wk = workers_init(&cfg, err, sizeof err);
    if (!wk) { report(0, "many jobs: workers_init: %s", err); return; }
    const int d = f->s->n_embd;
    float *out = malloc(sizeof(float) * ((size_t)N_TOK * d + GUARD)), *want = malloc(sizeof(float) * d);
    int bad = 0;
    uint32_t flag = 0;
    for (int i = 0; i < 1000; i++) {
        routing r;
        r.n_tok = 1; r.k = 3;
        r.n_cold[0] = 1 + rand_int(3);
        for (int j = 0; j < r.n_cold[0]; j++) { r.ids[j] = (i + 5 * j) % N_EXPERT; r.w[j] = uniform(); }
        if (run_job(wk, f, f->experts, &r, out, &flag, (uint32_t)i + 1, i & 1) || flag != (uint32_t)i + 1) { bad++; continue; }
        expected(f, &r, f->F, 0, want);
        if (memcmp(out, want, sizeof(float) * d)) bad++;
    }
    report(!bad, "%s threads=%d: 1000 small jobs bit-equal, flag written each time (%d bad)", f->s->name, nt, bad);
    /* the state line for a stalled waiter's message: after the last job, every worker out of it and
     * the last job's phases all done */
    char line[256], want_head[96], want_out[48];
    workers_wait(wk);
    workers_debug(wk, line, sizeof line);
    snprintf(want_head, sizeof want_head, "job 1000 submitted, 1000 finished, ");
    snprintf(want_out, sizeof want_out, " of %d out", nt);
    const char *q = strstr(line, "; phases ");
    int phases_done = q != NULL, nph = 0, taken, done, planned, used;
    for (q = q ? q + 9 : NULL; q && sscanf(q, "%d/%d/%d%n", &taken, &done, &planned, &used) == 3; q += used, nph++)
        phases_done &= done == planned && taken >= planned;   /* taken / done / planned */
    phases_done &= nph >= 2;
    report(!strncmp(line, want_head, strlen(want_head)) && strstr(line, want_out) && phases_done,
           "%s threads=%d: workers_debug after the jobs: \"%s\"", f->s->name, nt, line);
    char tiny[16];
    workers_debug(wk, tiny, sizeof tiny);   /* cut short, still terminated */
    report(strlen(tiny) == sizeof tiny - 1, "workers_debug into 16 bytes: \"%s\"", tiny);
    free(out);
    free(want);
    workers_free(wk);
}

/* workers_park: workers that would spin for a second after a job sleep at once instead (the
 * process's CPU time over 50 ms of idle wall time stays near zero; without the park both workers
 * spin through it), and the next submit wakes them: jobs after a park are still bit-equal. */
static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static void idle_ms(int ms) {
    struct timespec t = { 0, ms * 1000000L };
    nanosleep(&t, NULL);
}
static void check_park(const fixture *f) {
    workers_config cfg = { .n_threads = 2, .numa_node = -1, .bind = 1, .spin_us = 1000000 };
    char err[256];
    workers *wk = workers_init(&cfg, err, sizeof err);
    if (!wk) { report(0, "park: workers_init: %s", err); return; }
    const int d = f->s->n_embd;
    float *out = malloc(sizeof(float) * ((size_t)N_TOK * d + GUARD)), *want = malloc(sizeof(float) * d);
    uint32_t flag = 0;
    int bad = 0;
    double spun = 0, parked = 0;
    for (int i = 0; i < 6; i++) {
        routing r;
        r.n_tok = 1; r.k = 2; r.n_cold[0] = 2; r.ids[0] = i % N_EXPERT; r.ids[1] = (i + 3) % N_EXPERT; r.w[0] = 0.25f; r.w[1] = 0.75f;
        if (run_job(wk, f, f->experts, &r, out, &flag, (uint32_t)i + 1, 0) || flag != (uint32_t)i + 1) { bad++; continue; }
        expected(f, &r, f->F, 0, want);
        if (memcmp(out, want, sizeof(float) * d)) bad++;
        if (i & 1) workers_park(wk);
        idle_ms(5); /* the workers leave the job and start their wait */
        const double c0 = cpu_seconds();
        idle_ms(50);
        const double c = cpu_seconds() - c0;
        if (i & 1) parked += c; else spun += c;
    }
    report(!bad && parked < 0.3 * spun && parked < 0.03,
           "park: idle workers' CPU time over 3 x 50 ms: %.0f ms spinning, %.1f ms parked; jobs after a park bit-equal (%d bad)",
           spun * 1e3, parked * 1e3, bad);
    free(out);
    free(want);
    workers_free(wk);
}

/* Malformed jobs are refused with a message and leave the pool usable. */
static void check_errors(const fixture *f, const fixture *other) {
    workers_config cfg = { .n_threads = 2, .numa_node = -1, .bind = 1, .spin_us = 20 };
    char err[256] = "";
    workers *wk = workers_init(&cfg, err, sizeof err);
    const int d = f->s->n_embd;
    float *out = malloc(sizeof(float) * ((size_t)N_TOK * d + GUARD));
    routing r;
    routing_make(&r, 2, COLD_SOME);
    r.n_cold[0] = 1;
    r.n_cold[1] = 1;
    uint32_t flag = 0;
    workers_job j = { .layer = 3, .n_tok = 2, .n_embd = d, .x = f->x, .k = r.k, .n_cold = r.n_cold, .ids = r.ids,
                      .w = r.w, .experts = f->experts, .n_expert = N_EXPERT, .out = out, .flag = &flag, .flag_value = 9 };
    int ok = 1;
    r.ids[0] = N_EXPERT; /* out of range */
    ok &= workers_submit(wk, &j, err, sizeof err) < 0 && strstr(err, "out of range");
    printf("  (expected) %s\n", err);
    r.ids[0] = 0;
    r.n_cold[1] = r.k + 1;
    ok &= workers_submit(wk, &j, err, sizeof err) < 0 && strstr(err, "cold experts");
    printf("  (expected) %s\n", err);
    r.n_cold[1] = 1;
    hm_expert mixed[N_EXPERT];
    memcpy(mixed, f->experts, sizeof mixed);
    mixed[r.ids[r.k]] = other->experts[0]; /* token 1's expert from a model of another width */
    j.experts = mixed;
    ok &= workers_submit(wk, &j, err, sizeof err) < 0 && strstr(err, "shapes");
    printf("  (expected) %s\n", err);
    mixed[r.ids[r.k]].host.down.data = NULL;
    ok &= workers_submit(wk, &j, err, sizeof err) < 0 && strstr(err, "absent");
    printf("  (expected) %s\n", err);
    ok &= flag == 0;
    j.experts = f->experts;
    ok &= workers_submit(wk, &j, err, sizeof err) > 0;
    workers_wait(wk);
    ok &= flag == 9;
    workers_free(wk);
    workers_config bad = { .n_threads = 0 };
    ok &= workers_init(&bad, err, sizeof err) == NULL;
    printf("  (expected) %s\n", err);
    report(ok, "malformed jobs refused with a message, nothing written, pool usable after");
    free(out);
}

/* The arena: experts copied in give the same results; full arena and bad node refused. */
static void check_arena(const fixture *f) {
    hm_arena a;
    char err[256] = "";
    size_t need = 0;
    for (int e = 0; e < N_EXPERT; e++) need += arena_ffn_bytes(&f->experts[e].host);
    int ok = arena_init(&a, need, -1, err, sizeof err) == 0;
    printf("  arena: %zu bytes at %p, node %d, locked %d, huge %d; note: %s\n", a.size, (void *)a.base,
           a.node, a.locked, a.huge, a.note[0] ? a.note : "(none)");
    hm_expert ex[N_EXPERT];
    memcpy(ex, f->experts, sizeof ex);
    for (int e = 0; e < N_EXPERT && ok; e++) {
        ok &= arena_copy_ffn(&a, &f->experts[e].host, &ex[e].host, err, sizeof err) == 0;
        ok &= (const uint8_t *)ex[e].host.down.data >= a.base && (const uint8_t *)ex[e].host.down.data < a.base + a.size;
        ok &= ((uintptr_t)ex[e].host.gate.data % HM_ARENA_ALIGN) == 0;
        ok &= !memcmp(ex[e].host.up.data, f->experts[e].host.up.data, f->experts[e].host.up.nbytes);
    }
    report(ok, "arena: %d experts copied, views inside the arena and aligned", N_EXPERT);
    /* full: a->size is page-rounded, so fill what is left and ask for one more expert */
    if (a.size > a.used) arena_alloc(&a, a.size - a.used - (a.size - a.used) % HM_ARENA_ALIGN);
    hm_ffn_w v;
    const size_t used = a.used;
    const int full = arena_copy_ffn(&a, &f->experts[0].host, &v, err, sizeof err);
    printf("  (expected) %s\n", err);
    report(full == -1 && a.used == used && strstr(err, "full"), "arena: a full arena refuses the copy and keeps its state");

    workers_config cfg = { .n_threads = 3, .numa_node = -1, .bind = 1, .spin_us = 20 };
    workers *wk = workers_init(&cfg, err, sizeof err);
    const int d = f->s->n_embd;
    float *out = malloc(sizeof(float) * ((size_t)N_TOK * d + GUARD)), *want = malloc(sizeof(float) * d);
    routing r;
    routing_make(&r, N_TOK, COLD_SOME);
    int same = run_job(wk, f, ex, &r, out, NULL, 0, 0) == 0;
    for (int t = 0; t < N_TOK && same; t++) {
        expected(f, &r, f->F, t, want);
        same = !memcmp(out + (size_t)t * d, want, sizeof(float) * d);
    }
    report(same, "arena: a %d-token job on the arena's copies equals cpu_ffn on the originals", N_TOK);
    workers_free(wk);
    free(out);
    free(want);
    arena_free(&a);
    report(a.base == NULL && a.size == 0, "arena: arena_free leaves a zeroed arena");

    /* arena_copy_experts over a one-layer model: the picked experts only, bytes equal */
    hm_layer ly = { .is_moe = 1, .experts = (hm_expert *)f->experts };
    hm_model m = { .cfg = { .n_layer = 1, .n_expert = N_EXPERT }, .layers = &ly };
    uint8_t pick[N_EXPERT] = { 0 };
    pick[1] = pick[5] = pick[11] = 1;
    hm_ffn_w views[N_EXPERT] = { 0 };
    int cok = arena_init(&a, 3 * arena_ffn_bytes(&f->experts[0].host), 0, err, sizeof err) == 0 &&
              arena_copy_experts(&a, &m, 0, pick, views, err, sizeof err) == 3;
    for (int e = 0; e < N_EXPERT && cok; e++)
        cok = pick[e] ? !memcmp(views[e].down.data, f->experts[e].host.down.data, views[e].down.nbytes)
                      : views[e].gate.data == NULL;
    cok &= arena_copy_experts(&a, &m, 0, NULL, views, err, sizeof err) == -1 && strstr(err, "full");
    printf("  (expected) %s\n", err);
    cok &= arena_copy_experts(&a, &m, 1, NULL, views, err, sizeof err) == -1;
    printf("  (expected) %s\n", err);
    report(cok, "arena: arena_copy_experts copies the picked experts; full arena and bad layer refused");
    arena_free(&a);
    hm_arena b;
    const int bad = arena_init(&b, 1 << 20, 4095, err, sizeof err);
    printf("  (expected) %s\n", err);
    report(bad == -1 && b.base == NULL, "arena: a NUMA node that does not exist is refused");
}

/* Pools started and stopped, idle or with a job in flight. */
static void check_shutdown(const fixture *f) {
    int ok = 1;
    char err[256];
    const int d = f->s->n_embd;
    float *out = malloc(sizeof(float) * ((size_t)N_TOK * d));
    for (int i = 0; i < 20; i++) {
        workers_config cfg = { .n_threads = 1 + i % 3, .numa_node = -1, .bind = i % 2, .spin_us = i % 4 ? 20 : 0 };
        workers *wk = workers_init(&cfg, err, sizeof err);
        if (!wk) { ok = 0; break; }
        if (i == 0) printf("  %s\n", workers_describe(wk));
        if (i % 2) { /* free with a job in flight: waits for it */
            routing r;
            routing_make(&r, N_TOK, COLD_ALL);
            workers_job j = { .n_tok = N_TOK, .n_embd = d, .x = f->x, .k = r.k, .n_cold = r.n_cold, .ids = r.ids,
                              .w = r.w, .experts = f->experts, .n_expert = N_EXPERT, .out = out };
            ok &= workers_submit(wk, &j, err, sizeof err) > 0;
        }
        ok &= workers_threads(wk) == 1 + i % 3;
        workers_free(wk);
    }
    workers_free(NULL);
    report(ok, "20 pools started and freed (idle, or with a 37-token job in flight)");
    free(out);
}

/* workers_stats: jobs, the bytes of each job's distinct experts (tokens sharing an expert read it
 * once), a positive busy time, and reset. */
static void check_counters(const fixture *f) {
    workers_config cfg = { .n_threads = 2, .numa_node = -1, .bind = 0, .spin_us = 20 };
    char err[256];
    workers *wk = workers_init(&cfg, err, sizeof err);
    if (!wk) { report(0, "counters: workers_init: %s", err); return; }
    float *out = malloc(sizeof(float) * ((size_t)N_TOK * f->s->n_embd + GUARD));
    uint64_t want = 0;
    int ok = 1;
    for (int job = 0; job < 3; job++) {
        routing r;
        routing_make(&r, job + 2, COLD_SOME);
        unsigned char seen[N_EXPERT] = { 0 };
        for (int t = 0; t < r.n_tok; t++)
            for (int j = 0; j < r.n_cold[t]; j++) {
                const int e = r.ids[t * r.k + j];
                if (seen[e]++) continue;
                const hm_ffn_w *w = &f->experts[e].host;
                want += w->gate.nbytes + w->up.nbytes + w->down.nbytes;
            }
        ok &= run_job(wk, f, f->experts, &r, out, NULL, 0, 0) == 0;
    }
    workers_counters c, z;
    workers_stats(wk, &c, 1);
    workers_stats(wk, &z, 0);
    report(ok && c.jobs == 3 && c.bytes == want && c.busy_s > 0 && z.jobs == 0 && z.bytes == 0 && z.busy_s == 0,
           "workers_stats: %lld jobs, %llu bytes (expected 3, %llu: distinct experts once per job), busy %.6f s > 0; "
           "then reset to zero", (long long)c.jobs, (unsigned long long)c.bytes, (unsigned long long)want, c.busy_s);
    free(out);
    workers_free(wk);
}

int main(void) {
    rng_seed(0x243F6A8885A308D3ull);
    omp_set_num_threads(1); /* the references; an idle OpenMP team would only spin beside the workers */
    printf("gemv ISA %s\n", hm_gemv_isa());
    fixture fx[N_SHAPES];
    for (int s = 0; s < N_SHAPES; s++) fixture_init(&fx[s], &shapes[s]);
    for (int s = 0; s < N_SHAPES; s++)
        for (int nt = 1; nt <= 3; nt++)
            for (int ref = 0; ref < 2; ref++) check_shape(&fx[s], nt, ref);
    check_many(&fx[1], 3);
    check_many(&fx[4], 2);
    check_park(&fx[1]);
    check_errors(&fx[3], &fx[4]);
    check_arena(&fx[3]);
    check_shutdown(&fx[5]);
    check_counters(&fx[3]);
    for (int s = 0; s < N_SHAPES; s++) fixture_free(&fx[s]);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
