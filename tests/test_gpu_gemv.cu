/* test_gpu_gemv.cu - gpu/gpu_gemv.h against the CPU reference (cpu/quant.h's to_float, dot in double):
 * every type, odd shapes, outputs poisoned (NaN) before every launch, every element checked;
 * the expert variants through device pointer tables (rewritten between launches); dequant
 * bit-exact. Then all of it again in gpu_gemv_set_mode(1) (x quantized to int8, dp4a), where the
 * references of the shapes that path takes are tests/gemv_q8_ref.h's, plus q8-only checks: the
 * quantization bound against the exact dot, bitwise reproducibility, fallbacks, wide rows.
 * `--bench [mode [type]]` prints GB/s per type against a device-to-device copy instead, for both modes
 * (or the one given; a type name such as Q4_K: that type only, without the batch table).
 * Exit 0 when all pass, 1 on a failure, 77 (SKIP) without a CUDA device. */
#include <cuda_runtime.h>
#include <vector>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "gpu_gemv.h" /* by path: cpu/gemv.h (the CPU kernels) shares the name */
#include "gpu_check.h"
#include "ops.cuh"
#include "ops.cuh"
extern "C" {
#include "quant.h"
#include "quant_blocks.h"
}
#include "gemv_q8_ref.h"
#include "fnv.h"

#define CK(call) CUDA_CHECK_OR(call, exit(1))

static const int k_types[] = {
    HM_TYPE_F32, HM_TYPE_F16, HM_TYPE_BF16, HM_TYPE_Q8_0, HM_TYPE_Q4_0, HM_TYPE_Q4_1, HM_TYPE_Q5_0,
    HM_TYPE_Q5_1, HM_TYPE_Q2_K, HM_TYPE_Q3_K, HM_TYPE_Q4_K, HM_TYPE_Q5_K, HM_TYPE_Q6_K, HM_TYPE_MXFP4,
    HM_TYPE_IQ4_XS,
};
#define NTYPES (int)(sizeof k_types / sizeof k_types[0])

static int g_pass, g_fail;
static int g_q8; /* mode 1 is on: references of the shapes it takes come from gemv_q8_ref.h */

static void report(int ok, const char *what, const char *type, const char *detail) {
    printf("%s %s%s %s%s%s\n", ok ? "PASS" : "FAIL", g_q8 ? "q8 " : "", what, type, detail[0] ? ": " : "", detail);
    if (ok) g_pass++;
    else g_fail++;
}

/* ---- random data ---- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void) { /* splitmix64 */
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}
static float rndf(void) { return (float)((double)rnd32() / 2147483648.0 - 1.0); } /* [-1, 1) */

static int is_float_type(int t) { return t == HM_TYPE_F32 || t == HM_TYPE_F16 || t == HM_TYPE_BF16; }

/* byte offsets of the f16 scale fields of each block type (-1 ends the list) */
static const int *scale_fields(int t) {
    static const int d0[] = { 0, -1 }, dm0[] = { 0, 2, -1 }, q2k[] = { 80, 82, -1 }, q3k[] = { 108, -1 },
                     q6k[] = { 208, -1 }, none[] = { -1 };
    switch (t) {
    case HM_TYPE_Q4_0: case HM_TYPE_Q5_0: case HM_TYPE_Q8_0: case HM_TYPE_IQ4_XS: return d0;
    case HM_TYPE_Q4_1: case HM_TYPE_Q5_1: case HM_TYPE_Q4_K: case HM_TYPE_Q5_K: return dm0;
    case HM_TYPE_Q2_K: return q2k;
    case HM_TYPE_Q3_K: return q3k;
    case HM_TYPE_Q6_K: return q6k;
    default: return none;
    }
}

/* n elements of type t (n a multiple of its block): float types from random floats in [-1, 1),
 * block types as random valid blocks: random quant bits, moderate random scales. */
static void fill_weights(int t, void *buf, int64_t n) {
    const hm_type_traits *tr = hm_type_get(t);
    if (is_float_type(t)) {
        float *f = (float *)malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) f[i] = rndf();
        tr->from_float(f, buf, n);
        free(f);
        return;
    }
    uint8_t *b = (uint8_t *)buf;
    const int64_t nblk = n / tr->blck;
    for (int64_t i = 0; i < nblk * (int64_t)tr->type_size; i++) b[i] = (uint8_t)rnd32();
    for (int64_t i = 0; i < nblk; i++) {
        uint8_t *blk = b + i * tr->type_size;
        if (t == HM_TYPE_MXFP4) blk[0] = (uint8_t)(120 + rnd32() % 12); /* 2^-8 .. 2^3 */
        for (const int *f = scale_fields(t); *f >= 0; f++) {
            const uint16_t h = hm_f32_to_fp16(rndf() * 0.05f + (rnd32() & 1 ? 0.002f : -0.002f));
            memcpy(blk + *f, &h, 2);
        }
    }
}

/* ---- the CPU reference ---- */

/* y[r] = W[r] . x in double, and the error scale sum |w*x| */
static void ref_gemv(int t, const void *W, const float *x, int ncols, int nrows, double *y, double *yabs) {
    const hm_type_traits *tr = hm_type_get(t);
    if (g_q8 && q8r_handles(t, ncols)) { /* yabs: the scale of the q8 path's float terms */
        q8r_group *g = (q8r_group *)malloc(sizeof(q8r_group) * (ncols / 32));
        q8r_quantize(x, ncols, g);
        for (int r = 0; r < nrows; r++) y[r] = q8r_dot(t, (const uint8_t *)W + r * hm_row_size(t, ncols), g, ncols, &yabs[r]);
        free(g);
        return;
    }
    const size_t rs = hm_row_size(t, ncols);
    float *w = (float *)malloc((size_t)ncols * sizeof(float));
    for (int r = 0; r < nrows; r++) {
        tr->to_float((const uint8_t *)W + r * rs, w, ncols);
        double s = 0, a = 0;
        for (int c = 0; c < ncols; c++) {
            s += (double)w[c] * x[c];
            a += fabs((double)w[c] * x[c]);
        }
        y[r] = s;
        yabs[r] = a;
    }
    free(w);
}

/* counts mismatches of got against ref within 1e-4 of the error scale; describes the first */
static int compare(const float *got, const double *ref, const double *tol, int64_t n, char *msg, size_t cap) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double err = fabs((double)got[i] - ref[i]);
        if (!(err <= tol[i])) { /* NaN (an unwritten output) fails too */
            if (!bad) snprintf(msg, cap, "[%lld] got %.9g want %.9g (err %.3g > tol %.3g)", (long long)i, got[i], ref[i], err, tol[i]);
            bad++;
        }
    }
    return bad;
}

static void *dev_upload(const void *h, size_t n) {
    void *d;
    CK(cudaMalloc(&d, n ? n : 1));
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

/* ---- gpu_gemv ---- */

static int test_gemv_shape(int t, int nrows, int ncols, char *msg, size_t cap) {
    const size_t rs = hm_row_size(t, ncols);
    void *W = malloc(rs * nrows);
    float *x = (float *)malloc(ncols * sizeof(float)), *y = (float *)malloc(nrows * sizeof(float));
    double *ref = (double *)malloc(nrows * sizeof(double)), *tol = (double *)malloc(nrows * sizeof(double));
    fill_weights(t, W, (int64_t)nrows * ncols);
    for (int c = 0; c < ncols; c++) x[c] = rndf();
    ref_gemv(t, W, x, ncols, nrows, ref, tol);
    for (int r = 0; r < nrows; r++) tol[r] = 1e-4 * tol[r] + 1e-30;
    void *dW = dev_upload(W, rs * nrows);
    float *dx = (float *)dev_upload(x, ncols * sizeof(float)), *dy;
    CK(cudaMalloc(&dy, nrows * sizeof(float)));
    CK(cudaMemset(dy, 0xFF, nrows * sizeof(float)));
    int bad = -1;
    if (gpu_gemv(t, dW, dx, dy, ncols, nrows, NULL)) snprintf(msg, cap, "gpu_gemv returned -1: %s", gpu_gemv_error());
    else {
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(y, dy, nrows * sizeof(float), cudaMemcpyDeviceToHost));
        bad = compare(y, ref, tol, nrows, msg, cap);
    }
    CK(cudaFree(dW)); CK(cudaFree(dx)); CK(cudaFree(dy));
    free(W); free(x); free(y); free(ref); free(tol);
    return bad;
}

static void test_gemv(int t) {
    static const int rows[] = { 1, 7, 33, 129, 1000 };
    static const int cols32[] = { 32, 512, 1408, 4096 }, cols256[] = { 256, 512, 1536, 4096 },
                     colsf[] = { 1, 7, 512, 1411, 4096 };
    const int blck = hm_type_get(t)->blck;
    const int *cols = blck == 1 ? colsf : blck == 32 ? cols32 : cols256;
    const int ncol = blck == 1 ? 5 : 4;
    char msg[256] = "", detail[320] = "";
    int shapes = 0, failed = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < ncol; j++) {
            shapes++;
            const int bad = test_gemv_shape(t, rows[i], cols[j], msg, sizeof msg);
            if (bad && !failed++) snprintf(detail, sizeof detail, "%dx%d: %d bad rows, first %s", rows[i], cols[j], bad, msg);
        }
    if (!failed) snprintf(detail, sizeof detail, "%d shapes", shapes);
    report(!failed, "gemv", hm_type_name(t), detail);
}

/* ---- gpu_gemv_batch: nb vectors per call, each bitwise what gpu_gemv gives it ----
 * x rows padded to a stride (>= ncols, a multiple of 4), y rows to another; the padding and every
 * output poisoned before the call; nb 1..7 (groups of 4 and the rest), every element compared. */
static int test_batch_shape(int t, int nrows, int ncols, int nb, char *msg, size_t cap) {
    const size_t rs = hm_row_size(t, ncols);
    const int64_t xs = (ncols + 3) / 4 * 4 + 4, ys = nrows + 3;
    void *W = malloc(rs * nrows);
    float *x = (float *)malloc(nb * xs * sizeof(float)), *y = (float *)malloc(nb * ys * sizeof(float)),
          *y1 = (float *)malloc(nrows * sizeof(float));
    fill_weights(t, W, (int64_t)nrows * ncols);
    for (int64_t i = 0; i < nb * xs; i++) x[i] = i % xs < ncols ? rndf() : 1e30f;   /* padding must not be read */
    void *dW = dev_upload(W, rs * nrows);
    float *dx = (float *)dev_upload(x, nb * xs * sizeof(float)), *dy, *dy1;
    CK(cudaMalloc(&dy, nb * ys * sizeof(float))); CK(cudaMalloc(&dy1, nrows * sizeof(float)));
    CK(cudaMemset(dy, 0xFF, nb * ys * sizeof(float)));
    int bad = 0;
    if (gpu_gemv_batch(t, dW, dx, xs, dy, ys, nb, ncols, nrows, NULL)) {
        snprintf(msg, cap, "gpu_gemv_batch returned -1: %s", gpu_gemv_error());
        bad = -1;
    } else {
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(y, dy, nb * ys * sizeof(float), cudaMemcpyDeviceToHost));
        for (int b = 0; b < nb && bad >= 0; b++) {
            CK(cudaMemset(dy1, 0xFF, nrows * sizeof(float)));
            if (gpu_gemv(t, dW, dx + b * xs, dy1, ncols, nrows, NULL)) { snprintf(msg, cap, "gpu_gemv: %s", gpu_gemv_error()); bad = -1; break; }
            CK(cudaMemcpy(y1, dy1, nrows * sizeof(float), cudaMemcpyDeviceToHost));
            for (int r = 0; r < ys; r++) {
                const float g = y[b * ys + r];
                const int want_poison = r >= nrows;
                uint32_t gb, wb;
                memcpy(&gb, &g, 4);
                if (!want_poison) memcpy(&wb, &y1[r], 4);
                if (want_poison ? gb != 0xFFFFFFFFu : gb != wb) {
                    if (!bad++) snprintf(msg, cap, "vector %d row %d: %s %.9g, gpu_gemv %.9g", b, r,
                                         want_poison ? "padding written:" : "batch", g, want_poison ? 0.0 : y1[r]);
                }
            }
        }
    }
    CK(cudaFree(dW)); CK(cudaFree(dx)); CK(cudaFree(dy)); CK(cudaFree(dy1));
    free(W); free(x); free(y); free(y1);
    return bad;
}

static void test_batch(int t) {
    static const int rows[] = { 1, 33, 1000 }, nbs[] = { 1, 2, 3, 4, 7 };
    static const int cols32[] = { 32, 1408, 4096 }, cols256[] = { 256, 1536, 4096 }, colsf[] = { 7, 512, 1411 };
    const int blck = hm_type_get(t)->blck;
    const int *cols = blck == 1 ? colsf : blck == 32 ? cols32 : cols256;
    char msg[256] = "", detail[320] = "";
    int shapes = 0, failed = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int n = 0; n < 5; n++) {
                shapes++;
                const int bad = test_batch_shape(t, rows[i], cols[j], nbs[n], msg, sizeof msg);
                if (bad && !failed++) snprintf(detail, sizeof detail, "%dx%d nb %d: %s", rows[i], cols[j], nbs[n], msg);
            }
    if (!failed) snprintf(detail, sizeof detail, "%d shapes x nb 1-7, bitwise equal to gpu_gemv per vector", shapes);
    report(!failed, "gemv_batch", hm_type_name(t), detail);
}

/* ---- the expert variants: 128 experts in separate allocations, tables on the device ---- */

#define NEXP 128

typedef struct {
    int t, ncols, nrows;
    size_t rs;
    uint8_t *host[NEXP]; /* (nrows, ncols) each */
    void *dev[NEXP];
    void **tab;          /* device [NEXP] */
} expert_set;

static void experts_init(expert_set *s, int t, int ncols, int nrows) {
    s->t = t; s->ncols = ncols; s->nrows = nrows;
    s->rs = hm_row_size(t, ncols);
    for (int e = 0; e < NEXP; e++) {
        s->host[e] = (uint8_t *)malloc(s->rs * nrows);
        fill_weights(t, s->host[e], (int64_t)nrows * ncols);
        s->dev[e] = dev_upload(s->host[e], s->rs * nrows);
    }
    CK(cudaMalloc(&s->tab, NEXP * sizeof(void *)));
}

/* table entry e -> the matrix of expert map[e] */
static void experts_map(expert_set *s, const int *map) {
    void *h[NEXP];
    for (int e = 0; e < NEXP; e++) h[e] = s->dev[map[e]];
    CK(cudaMemcpy(s->tab, h, sizeof h, cudaMemcpyHostToDevice));
}

static void experts_free(expert_set *s) {
    for (int e = 0; e < NEXP; e++) { CK(cudaFree(s->dev[e])); free(s->host[e]); }
    CK(cudaFree(s->tab));
}

/* k distinct ids in [0, NEXP) */
static void pick_ids(int *ids, int k) {
    int all[NEXP];
    for (int i = 0; i < NEXP; i++) all[i] = i;
    for (int i = 0; i < k; i++) {
        const int j = i + (int)(rnd32() % (NEXP - i));
        const int tmp = all[i]; all[i] = all[j]; all[j] = tmp;
        ids[i] = all[i];
    }
}

/* Skipped slots (--overlap-misses): the same launch with the odd slots' ids set to -1 writes the
 * even slots only (the odd rows keep their poison), then one with the even slots' ids set to -1
 * writes the rest: together bitwise what the one launch wrote (full, k rows of n). */
static int check_split(const int *ids, int k, int n, const float *full, int (*launch)(const int *dids, float *dy, void *ctx),
                       void *ctx, char *msg, size_t cap) {
    int a[16], b[16];
    for (int j = 0; j < k; j++) { a[j] = j & 1 ? -1 : ids[j]; b[j] = j & 1 ? ids[j] : -1; }
    int *da = (int *)dev_upload(a, k * sizeof(int)), *db = (int *)dev_upload(b, k * sizeof(int));
    float *dy, *got = (float *)malloc(sizeof(float) * k * n);
    CK(cudaMalloc(&dy, sizeof(float) * k * n));
    CK(cudaMemset(dy, 0xFF, sizeof(float) * k * n));
    int bad = 0;
    for (int pass = 0; pass < 2 && !bad; pass++) {
        if (launch(pass ? db : da, dy, ctx)) { snprintf(msg, cap, "launch with skipped slots returned -1: %s", gpu_gemv_error()); bad = -1; break; }
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got, dy, sizeof(float) * k * n, cudaMemcpyDeviceToHost));
        for (int j = 0; j < k && !bad; j++)
            for (int r = 0; r < n && !bad; r++) {
                const uint32_t *g = (const uint32_t *)&got[j * n + r], *f = (const uint32_t *)&full[j * n + r];
                const int written = pass || !(j & 1);
                if (written ? *g != *f : *g != 0xFFFFFFFFu) {
                    snprintf(msg, cap, "skipped slots, pass %d: slot %d row %d is %08x, expected %08x", pass, j, r, *g,
                             written ? *f : 0xFFFFFFFFu);
                    bad = 1;
                }
            }
    }
    CK(cudaFree(da)); CK(cudaFree(db)); CK(cudaFree(dy));
    free(got);
    return bad;
}

struct split_ctx { expert_set *g, *u; const float *x; int k, ncols, nrows; };
static int launch_gu(const int *dids, float *dy, void *p) {
    const split_ctx *c = (const split_ctx *)p;
    return gpu_gemv_experts_swiglu(c->g->t, (const void *const *)c->g->tab, (const void *const *)c->u->tab, dids, c->k, c->x, dy,
                                   c->ncols, c->nrows, NULL);
}
static int launch_down(const int *dids, float *dy, void *p) {
    const split_ctx *c = (const split_ctx *)p;
    return gpu_gemv_experts(c->g->t, (const void *const *)c->g->tab, dids, c->k, c->x, dy, c->ncols, c->nrows, NULL);
}

/* one k: SwiGLU over (gate, up), then W x[j] over down, each checked against the CPU */
static int test_experts_k(expert_set *gate, expert_set *up, expert_set *down, const int *map, int k, char *msg, size_t cap) {
    const int t = gate->t, ncols = gate->ncols, nrows = gate->nrows, dcols = down->ncols, drows = down->nrows;
    int ids[16], *dids, bad = 0;
    pick_ids(ids, k);
    dids = (int *)dev_upload(ids, k * sizeof(int));
    const int nout = k * (nrows > drows ? nrows : drows);
    float *x = (float *)malloc(sizeof(float) * (ncols > dcols * k ? ncols : dcols * k));
    float *got = (float *)malloc(sizeof(float) * nout);
    double *ref = (double *)malloc(sizeof(double) * nout), *tol = (double *)malloc(sizeof(double) * nout);
    double *g = (double *)malloc(sizeof(double) * nrows * 4), *ga = g + nrows, *u = g + 2 * nrows, *ua = g + 3 * nrows;

    /* SwiGLU: act[j][r] = silu(g) * u; the error bound carries g's and u's through silu */
    for (int c = 0; c < ncols; c++) x[c] = rndf();
    float *dx = (float *)dev_upload(x, ncols * sizeof(float)), *dact;
    CK(cudaMalloc(&dact, sizeof(float) * k * nrows));
    CK(cudaMemset(dact, 0xFF, sizeof(float) * k * nrows));
    if (gpu_gemv_experts_swiglu(t, (const void *const *)gate->tab, (const void *const *)up->tab, dids, k, dx, dact, ncols, nrows, NULL)) {
        snprintf(msg, cap, "gpu_gemv_experts_swiglu returned -1: %s", gpu_gemv_error());
        bad = -1;
    } else {
        for (int j = 0; j < k; j++) {
            const int e = map[ids[j]];
            ref_gemv(t, gate->host[e], x, ncols, nrows, g, ga);
            ref_gemv(t, up->host[e], x, ncols, nrows, u, ua);
            for (int r = 0; r < nrows; r++) {
                const double sg = g[r] / (1 + exp(-g[r]));
                ref[j * nrows + r] = sg * u[r];
                tol[j * nrows + r] = 1e-4 * (1.1 * ga[r] * fabs(u[r]) + fabs(sg) * ua[r]) + 1e-5 * fabs(sg * u[r]) + 1e-30;
            }
        }
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got, dact, sizeof(float) * k * nrows, cudaMemcpyDeviceToHost));
        bad = compare(got, ref, tol, (int64_t)k * nrows, msg, cap);
        if (!bad && k > 1) {
            split_ctx sc = { gate, up, dx, k, ncols, nrows };
            bad = check_split(ids, k, nrows, got, launch_gu, &sc, msg, cap);
        }
    }
    CK(cudaFree(dx)); CK(cudaFree(dact));

    /* down: y[j] = W_ids[j] x[j] */
    if (!bad) {
        for (int i = 0; i < k * dcols; i++) x[i] = rndf();
        float *dxk = (float *)dev_upload(x, sizeof(float) * k * dcols), *dy;
        CK(cudaMalloc(&dy, sizeof(float) * k * drows));
        CK(cudaMemset(dy, 0xFF, sizeof(float) * k * drows));
        if (gpu_gemv_experts(t, (const void *const *)down->tab, dids, k, dxk, dy, dcols, drows, NULL)) {
            snprintf(msg, cap, "gpu_gemv_experts returned -1: %s", gpu_gemv_error());
            bad = -1;
        } else {
            for (int j = 0; j < k; j++) {
                ref_gemv(t, down->host[map[ids[j]]], x + j * dcols, dcols, drows, ref + j * drows, tol + j * drows);
                for (int r = 0; r < drows; r++) tol[j * drows + r] = 1e-4 * tol[j * drows + r] + 1e-30;
            }
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(got, dy, sizeof(float) * k * drows, cudaMemcpyDeviceToHost));
            bad = compare(got, ref, tol, (int64_t)k * drows, msg, cap);
            if (!bad && k > 1) {
                split_ctx sc = { down, NULL, dxk, k, dcols, drows };
                bad = check_split(ids, k, drows, got, launch_down, &sc, msg, cap);
            }
        }
        CK(cudaFree(dxk)); CK(cudaFree(dy));
    }
    CK(cudaFree(dids));
    free(x); free(got); free(ref); free(tol); free(g);
    return bad;
}

static void test_experts(int t, int ncols, int dcols = 0) {
    const int blck = hm_type_get(t)->blck;
    if (!dcols) dcols = blck == 256 ? 256 : blck == 32 ? 160 : 129; /* down's input width */
    expert_set gate, up, down;
    experts_init(&gate, t, ncols, 129);
    experts_init(&up, t, ncols, 129);
    experts_init(&down, t, dcols, 77);
    int map[NEXP];
    char msg[256] = "", detail[320] = "";
    int failed = 0;
    static const int ks[] = { 1, 8, 16 };
    /* round 0: identity tables; round 1: the tables rewritten in place to a permutation */
    for (int round = 0; round < 2 && !failed; round++) {
        for (int e = 0; e < NEXP; e++) map[e] = round ? (e * 37 + 11) % NEXP : e;
        experts_map(&gate, map); experts_map(&up, map); experts_map(&down, map);
        for (int i = 0; i < 3 && !failed; i++) {
            const int bad = test_experts_k(&gate, &up, &down, map, ks[i], msg, sizeof msg);
            if (bad) { failed = 1; snprintf(detail, sizeof detail, "k=%d round %d: %d bad, first %s", ks[i], round, bad, msg); }
        }
    }
    if (!failed) snprintf(detail, sizeof detail, "128 experts, gate/up 129x%d, down 77x%d, k=1,8,16, tables rewritten, skipped slots (id -1)", ncols, dcols);
    report(!failed, "experts", hm_type_name(t), detail);
    experts_free(&gate); experts_free(&up); experts_free(&down);
}

/* ---- gpu_embed_row (the greedy chain's embedding): the row at a device index, bit-exact to
 * to_float, every element poisoned before; the position counted; an index outside the table
 * clamped; a row length the kernel cannot take refused ---- */
static void test_embed_row(int t) {
    const hm_type_traits *tr = hm_type_get(t);
    const int n = tr->blck == 1 ? 1412 : tr->blck == 32 ? 1408 : 2048, V = 5;
    const size_t rb = hm_row_size(t, n);
    uint8_t *src = (uint8_t *)malloc(rb * V);
    if (is_float_type(t)) /* every bit pattern: NaNs, infinities, subnormals */
        for (size_t i = 0; i < rb * V; i++) src[i] = (uint8_t)rnd32();
    else
        fill_weights(t, src, (int64_t)n * V);
    float *want = (float *)malloc(sizeof(float) * n), *got = (float *)malloc(sizeof(float) * n);
    void *dsrc = dev_upload(src, rb * V);
    int *dv, hv[2];
    float *dout;
    CK(cudaMalloc(&dv, 2 * sizeof(int)));
    CK(cudaMalloc(&dout, sizeof(float) * n));
    char detail[320] = "";
    int failed = 0;
    const int toks[3] = { 3, 0, 9 };   /* 9: past the table, read as its last row */
    for (int c = 0; c < 3 && !failed; c++) {
        hv[0] = toks[c]; hv[1] = 41 + c;
        CK(cudaMemcpy(dv, hv, sizeof hv, cudaMemcpyHostToDevice));
        CK(cudaMemset(dout, 0xFF, sizeof(float) * n));
        if (gpu_embed_row(t, dsrc, rb, dv, V, dv + 1, dout, n, NULL)) {
            failed = 1;
            snprintf(detail, sizeof detail, "gpu_embed_row returned -1: %s", gpu_gemv_error());
            break;
        }
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got, dout, sizeof(float) * n, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hv, dv, sizeof hv, cudaMemcpyDeviceToHost));
        const int row = toks[c] < V ? toks[c] : V - 1;
        tr->to_float(src + rb * row, want, n);
        if (hv[1] != 42 + c) { failed = 1; snprintf(detail, sizeof detail, "the position went %d -> %d", 41 + c, hv[1]); }
        for (int i = 0; i < n && !failed; i++)
            if (memcmp(&got[i], &want[i], 4)) {
                failed = 1;
                snprintf(detail, sizeof detail, "token %d: [%d] got %.9g want %.9g", toks[c], i, got[i], want[i]);
            }
    }
    if (!failed && !gpu_embed_row(t, dsrc, rb, dv, V, NULL, dout, tr->blck == 1 ? 0 : n + tr->blck / 2, NULL)) {
        failed = 1;
        snprintf(detail, sizeof detail, "a row of %d values was not refused", tr->blck == 1 ? 0 : n + tr->blck / 2);
    }
    if (!failed) snprintf(detail, sizeof detail, "rows of %d values at tokens 3, 0 and 9 (clamped to 4), bit-exact, the position counted", n);
    report(!failed, "embed row", tr->name, detail);
    CK(cudaFree(dsrc)); CK(cudaFree(dv)); CK(cudaFree(dout));
    free(src); free(want); free(got);
}

/* ---- gpu_dequant: bit-exact to to_float + hm_f32_to_bf16/fp16 ---- */

static void test_dequant(int t) {
    const hm_type_traits *tr = hm_type_get(t);
    const int64_t n = tr->blck == 1 ? 4151 : (int64_t)tr->blck * 1037;
    const size_t bytes = hm_row_size(t, n);
    uint8_t *src = (uint8_t *)malloc(bytes);
    if (is_float_type(t)) /* every bit pattern: NaNs, infinities, subnormals */
        for (size_t i = 0; i < bytes; i++) src[i] = (uint8_t)rnd32();
    else
        fill_weights(t, src, n);
    float *f = (float *)malloc(n * sizeof(float));
    uint16_t *want = (uint16_t *)malloc(n * 2), *got = (uint16_t *)malloc(n * 2);
    tr->to_float(src, f, n);
    void *dsrc = dev_upload(src, bytes);
    uint16_t *ddst;
    CK(cudaMalloc(&ddst, n * 2));
    char detail[320] = "";
    int failed = 0;
    /* whole buffer, then a tile starting one block in (as a prefill tile of rows would) */
    for (int tile = 0; tile < 2 && !failed; tile++)
        for (int f16 = 0; f16 < 2 && !failed; f16++) {
            const int64_t off = tile ? tr->blck * (tr->blck == 1 ? 4 : 1) : 0, m = n - off;
            for (int64_t i = 0; i < m; i++) want[i] = f16 ? hm_f32_to_fp16(f[off + i]) : hm_f32_to_bf16(f[off + i]);
            CK(cudaMemset(ddst, 0xFF, n * 2));
            if (gpu_dequant(t, (const uint8_t *)dsrc + hm_row_size(t, off), ddst, m, f16, NULL)) {
                failed = 1;
                snprintf(detail, sizeof detail, "gpu_dequant returned -1: %s", gpu_gemv_error());
                break;
            }
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(got, ddst, m * 2, cudaMemcpyDeviceToHost));
            for (int64_t i = 0; i < m; i++)
                if (got[i] != want[i]) {
                    if (!failed++)
                        snprintf(detail, sizeof detail, "%s tile %d: [%lld] got 0x%04x want 0x%04x (from %.9g)", f16 ? "f16" : "bf16", tile,
                                 (long long)i, got[i], want[i], f[off + i]);
                }
        }
    if (!failed) snprintf(detail, sizeof detail, "%lld values, bf16 and f16, bit-exact", (long long)n);
    report(!failed, "dequant", tr->name, detail);
    CK(cudaFree(dsrc)); CK(cudaFree(ddst));
    free(src); free(f); free(want); free(got);
}

/* ---- mode 1 only: the q8 path against its reference (1e-5 of the term scale), the exact dot
 * within the quantization bound, two launches bitwise equal; shapes it does not take against the
 * exact reference (the F32 fallback) ---- */

static int test_q8_shape(int t, int nrows, int ncols, char *msg, size_t cap) {
    const size_t rs = hm_row_size(t, ncols);
    const int q8 = q8r_handles(t, ncols);
    void *W = malloc(rs * nrows);
    float *x = (float *)malloc(ncols * sizeof(float)), *y = (float *)malloc(nrows * sizeof(float)), *y2 = (float *)malloc(nrows * sizeof(float));
    float *wf = (float *)malloc(ncols * sizeof(float));
    double *ref = (double *)malloc(nrows * sizeof(double)), *sc = (double *)malloc(nrows * sizeof(double));
    double *ex = (double *)malloc(nrows * sizeof(double)), *exa = (double *)malloc(nrows * sizeof(double));
    q8r_group *g = (q8r_group *)malloc(sizeof(q8r_group) * (ncols / 32 + 1));
    fill_weights(t, W, (int64_t)nrows * ncols);
    for (int c = 0; c < ncols; c++) x[c] = rndf() * (c % 97 == 0 ? 8.f : 1.f); /* some outliers */
    for (int c = 0; c < 32 && ncols >= 64; c++) x[32 + c] = 0.f;                /* a zero group */
    const int keep = g_q8;
    g_q8 = 0;
    ref_gemv(t, W, x, ncols, nrows, ex, exa); /* exact */
    g_q8 = keep;
    if (q8) {
        q8r_quantize(x, ncols, g);
        for (int r = 0; r < nrows; r++) ref[r] = q8r_dot(t, (const uint8_t *)W + r * rs, g, ncols, &sc[r]);
    }
    void *dW = dev_upload(W, rs * nrows);
    float *dx = (float *)dev_upload(x, ncols * sizeof(float)), *dy;
    CK(cudaMalloc(&dy, nrows * sizeof(float)));
    int bad = 0;
    for (int rep = 0; rep < 2 && bad >= 0; rep++) {
        CK(cudaMemset(dy, 0xFF, nrows * sizeof(float)));
        if (gpu_gemv(t, dW, dx, dy, ncols, nrows, NULL)) {
            snprintf(msg, cap, "gpu_gemv returned -1: %s", gpu_gemv_error());
            bad = -1;
            break;
        }
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(rep ? y2 : y, dy, nrows * sizeof(float), cudaMemcpyDeviceToHost));
    }
    for (int r = 0; r < nrows && bad >= 0; r++) {
        const double err = fabs((double)y[r] - (q8 ? ref[r] : ex[r]));
        const double tol = q8 ? 1e-5 * sc[r] + 1e-30 : 1e-4 * exa[r] + 1e-30;
        if (!(err <= tol)) {
            if (!bad++) snprintf(msg, cap, "%s row %d: got %.9g want %.9g (err %.3g > tol %.3g)", q8 ? "q8" : "fallback", r, y[r], q8 ? ref[r] : ex[r], err, tol);
            continue;
        }
        if (q8) {
            hm_type_get(t)->to_float((const uint8_t *)W + r * rs, wf, ncols);
            const double bound = q8r_bound(wf, x, g, ncols);
            if (!(fabs((double)y[r] - ex[r]) <= bound)) {
                if (!bad++) snprintf(msg, cap, "row %d: %.9g vs exact %.9g: beyond the quantization bound %.3g", r, y[r], ex[r], bound);
                continue;
            }
        }
        if (memcmp(&y[r], &y2[r], sizeof(float)) && !bad++) snprintf(msg, cap, "row %d: two launches differ: %.9g %.9g", r, y[r], y2[r]);
    }
    CK(cudaFree(dW)); CK(cudaFree(dx)); CK(cudaFree(dy));
    free(W); free(x); free(y); free(y2); free(wf); free(ref); free(sc); free(ex); free(exa); free(g);
    return bad;
}

static void test_q8(int t) {
    /* 256: 1 lane per row; 768: 3 of 4 lanes; 5120: 20 of 32; 14336: two chunks for most lanes;
     * 32768: the widest taken; 33024: too wide (fallback); 1408, 96, 4128: not a multiple of 256
     * (the K-quants' fallback; the 32-block types end rows in a partial chunk) */
    static const struct { int rows, cols; } shapes[] = {
        { 1, 256 }, { 7, 256 }, { 1000, 256 }, { 33, 768 }, { 2049, 768 }, { 129, 2048 }, { 1000, 4096 },
        { 65, 5120 }, { 129, 14336 }, { 7, 32768 }, { 3, 33024 }, { 33, 1408 },
        { 33, 96 }, { 65, 4128 }, { 1000, 1408 }, /* 32-block types: only / after whole chunks a partial one */
    };
    char msg[256] = "", detail[320] = "";
    int failed = 0, n = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (shapes[i].cols % hm_type_get(t)->blck) continue;
        n++;
        const int bad = test_q8_shape(t, shapes[i].rows, shapes[i].cols, msg, sizeof msg);
        if (bad && !failed++) snprintf(detail, sizeof detail, "%dx%d: %d bad, first %s", shapes[i].rows, shapes[i].cols, bad, msg);
    }
    if (!failed) snprintf(detail, sizeof detail, "%d shapes: reference 1e-5, quantization bound, reproducible, fallbacks", n);
    report(!failed, "gemv-q8", hm_type_name(t), detail);
}

/* the contract's failures: -1 and a reason, nothing launched */
static void test_errors(void) {
    float *dx;
    CK(cudaMalloc(&dx, 4096));
    const int a = gpu_gemv(HM_TYPE_Q8_1, dx, dx, dx, 32, 1, NULL);           /* no kernel for Q8_1 */
    const int b = gpu_gemv(HM_TYPE_Q4_K, dx, dx, dx, 128, 1, NULL);          /* not a multiple of 256 */
    const int c = gpu_gemv(HM_TYPE_Q4_0, (char *)dx + 2, dx, dx, 32, 1, NULL); /* misaligned W */
    const int d = gpu_dequant(HM_TYPE_Q4_0, dx, dx, 33, 0, NULL);            /* partial block */
    const int e = gpu_gemv(HM_TYPE_Q4_0, dx, dx, dx, 32, 0, NULL);           /* no rows: nothing to do */
    const int f = gpu_gemv_set_mode(2);                                      /* no such mode */
    CK(cudaFree(dx));
    char detail[64];
    snprintf(detail, sizeof detail, "got %d %d %d %d %d %d, want -1 -1 -1 -1 0 -1", a, b, c, d, e, f);
    report(a == -1 && b == -1 && c == -1 && d == -1 && e == 0 && f == -1 && gpu_gemv_error()[0], "errors", "-", detail);
}

/* ---- --bench: GB/s of weight bytes read, beside a device-to-device copy ---- */

static float time_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

/* the copy ceiling: (read + write) bytes / time, as ../shared/design/DEVICE.md counts it */
static double bench_copy(cudaEvent_t e0, cudaEvent_t e1) {
    const size_t n = (size_t)1 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, n)); CK(cudaMalloc(&b, n));
    CK(cudaMemset(a, 1, n));
    CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 10; i++) CK(cudaMemcpyAsync(i & 1 ? a : b, i & 1 ? b : a, n, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaFree(a)); CK(cudaFree(b));
    return 2.0 * n * 10 / (time_ms(e0, e1) * 1e-3) / 1e9;
}

/* copies of one matrix of `bytes`, enough that L2 (60 MB) cannot hold them: a benchmark rotates
 * among them. Returns how many (2..64) are in w. */
static int rot_alloc(size_t bytes, void *w[64]) {
    int ncopy = (int)((512u << 20) / bytes) + 1;
    if (ncopy < 2) ncopy = 2;
    if (ncopy > 64) ncopy = 64;
    for (int i = 0; i < ncopy; i++) { CK(cudaMalloc(&w[i], bytes)); CK(cudaMemset(w[i], 0x11, bytes)); }
    return ncopy;
}

/* one matrix (nrows, ncols), rotated among copies (rot_alloc) */
static double bench_gemv(int t, int nrows, int ncols, cudaEvent_t e0, cudaEvent_t e1, double *us) {
    const size_t bytes = hm_row_size(t, ncols) * (size_t)nrows;
    void *w[64];
    const int ncopy = rot_alloc(bytes, w);
    float *x, *y;
    CK(cudaMalloc(&x, ncols * sizeof(float))); CK(cudaMemset(x, 0, ncols * sizeof(float)));
    CK(cudaMalloc(&y, nrows * sizeof(float)));
    const int iters = 100;
    for (int i = 0; i < 3; i++) if (gpu_gemv(t, w[i % ncopy], x, y, ncols, nrows, NULL)) { fprintf(stderr, "%s\n", gpu_gemv_error()); exit(1); }
    CK(cudaEventRecord(e0));
    for (int i = 0; i < iters; i++) gpu_gemv(t, w[i % ncopy], x, y, ncols, nrows, NULL);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    *us = time_ms(e0, e1) * 1e3 / iters;
    for (int i = 0; i < ncopy; i++) CK(cudaFree(w[i]));
    CK(cudaFree(x)); CK(cudaFree(y));
    return bytes / (*us * 1e-6) / 1e9;
}

/* gpu_gemv_batch of nb vectors against nb gpu_gemv calls on the same matrices: time per call of
 * each, matrices rotated past L2 as above */
static void bench_batch(int t, int nrows, int ncols, int nb, cudaEvent_t e0, cudaEvent_t e1, double *us_batch, double *us_single) {
    void *w[64];
    const int ncopy = rot_alloc(hm_row_size(t, ncols) * (size_t)nrows, w);
    float *x, *y;
    CK(cudaMalloc(&x, (size_t)nb * ncols * sizeof(float))); CK(cudaMemset(x, 0, (size_t)nb * ncols * sizeof(float)));
    CK(cudaMalloc(&y, (size_t)nb * nrows * sizeof(float)));
    const int iters = 100;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = -3; i < iters; i++) {
            if (i == 0) CK(cudaEventRecord(e0));
            const void *wi = w[(i + 3) % ncopy];
            int rc = 0;
            if (pass == 0) rc = gpu_gemv_batch(t, wi, x, ncols, y, nrows, nb, ncols, nrows, NULL);
            else for (int b = 0; b < nb && !rc; b++) rc = gpu_gemv(t, wi, x + (size_t)b * ncols, y + (size_t)b * nrows, ncols, nrows, NULL);
            if (rc) { fprintf(stderr, "%s\n", gpu_gemv_error()); exit(1); }
        }
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        *(pass ? us_single : us_batch) = time_ms(e0, e1) * 1e3 / iters;
    }
    for (int i = 0; i < ncopy; i++) CK(cudaFree(w[i]));
    CK(cudaFree(x)); CK(cudaFree(y));
}

/* one MoE layer's two launches: K of NEXP experts, gate/up (I, H) of type t, down (H, I) of type
 * td_type; time per launch */
static void bench_moe_shape(int t, int td_type, int H, int I, int K, cudaEvent_t e0, cudaEvent_t e1, double *us_gu, double *us_down) {
    const int NSETS = 64, iters = 200;
    const size_t gu_bytes = hm_row_size(t, H) * I, d_bytes = hm_row_size(td_type, I) * H;
    void *hg[NEXP], *hu[NEXP], *hd[NEXP];
    for (int e = 0; e < NEXP; e++) {
        CK(cudaMalloc(&hg[e], gu_bytes)); CK(cudaMemset(hg[e], 0x11, gu_bytes));
        CK(cudaMalloc(&hu[e], gu_bytes)); CK(cudaMemset(hu[e], 0x11, gu_bytes));
        CK(cudaMalloc(&hd[e], d_bytes)); CK(cudaMemset(hd[e], 0x11, d_bytes));
    }
    void *tg = dev_upload(hg, sizeof hg), *tu = dev_upload(hu, sizeof hu), *td = dev_upload(hd, sizeof hd);
    int ids[NSETS * K];
    for (int s = 0; s < NSETS; s++) pick_ids(ids + s * K, K);
    int *dids = (int *)dev_upload(ids, sizeof ids);
    float *x, *act, *y;
    CK(cudaMalloc(&x, H * sizeof(float))); CK(cudaMemset(x, 0, H * sizeof(float)));
    CK(cudaMalloc(&act, K * I * sizeof(float))); CK(cudaMemset(act, 0, K * I * sizeof(float)));
    CK(cudaMalloc(&y, K * H * sizeof(float)));
    for (int pass = 0; pass < 2; pass++) {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < iters; i++) {
            const int *di = dids + (i % NSETS) * K;
            const int rc = pass ? gpu_gemv_experts(td_type, (const void *const *)td, di, K, act, y, I, H, NULL)
                                : gpu_gemv_experts_swiglu(t, (const void *const *)tg, (const void *const *)tu, di, K, x, act, H, I, NULL);
            if (rc) { fprintf(stderr, "%s\n", gpu_gemv_error()); exit(1); }
        }
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        *(pass ? us_down : us_gu) = time_ms(e0, e1) * 1e3 / iters;
    }
    for (int e = 0; e < NEXP; e++) { CK(cudaFree(hg[e])); CK(cudaFree(hu[e])); CK(cudaFree(hd[e])); }
    CK(cudaFree(tg)); CK(cudaFree(tu)); CK(cudaFree(td)); CK(cudaFree(dids));
    CK(cudaFree(x)); CK(cudaFree(act)); CK(cudaFree(y));
}

/* MoE decode step of a Qwen3-30B-A3B layer: 128 experts, gate/up (768, 2048), down (2048, 768),
 * k = 8 random experts per call; GB/s over the bytes of the 8 experts' matrices */
static void bench_moe(int t, cudaEvent_t e0, cudaEvent_t e1, double *gbs_gu, double *gbs_down) {
    const int H = 2048, I = 768, K = 8;
    double ug, ud;
    bench_moe_shape(t, t, H, I, K, e0, e1, &ug, &ud);
    *gbs_gu = 2.0 * K * hm_row_size(t, H) * I / (ug * 1e-6) / 1e9;
    *gbs_down = K * hm_row_size(t, I) * H / (ud * 1e-6) / 1e9;
}

/* ---- x's records made once (gpu_q8_records) and handed to the GEMVs (gpu_gemv_q8x,
 * gpu_gemv_experts_swiglu_q8x): the records byte for byte the reference quantizer's, the results
 * bitwise those of the calls that quantize x in every block ---- */
static void test_q8x(int t) {
    static const int shapes[][2] = { { 67, 256 }, { 300, 4096 }, { 129, 1408 }, { 1024, 12288 }, { 33, 32 } };
    char msg[256] = "", detail[128];
    int bad = 0, n = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0] && !bad; si++) {
        const int nrows = shapes[si][0], ncols = shapes[si][1];
        if (!q8r_handles(t, ncols)) continue;
        const size_t rb = gpu_q8_records_bytes(ncols), wb = hm_row_size(t, ncols) * (size_t)nrows;
        void *hw = malloc(wb), *hw2 = malloc(wb);
        fill_weights(t, hw, (int64_t)nrows * ncols);
        fill_weights(t, hw2, (int64_t)nrows * ncols);
        float *hx = (float *)malloc(ncols * 4);
        for (int c = 0; c < ncols; c++) hx[c] = rndf() * (c % 97 == 5 ? 40.f : 1.f);
        for (int c = 64; c < 96 && c < ncols; c++) hx[c] = 0.f;   /* an all-zero group */
        uint8_t *hr = (uint8_t *)malloc(rb);
        float *y0 = (float *)malloc(sizeof(float) * 2 * nrows), *y1 = (float *)malloc(sizeof(float) * 2 * nrows);
        float *x = (float *)dev_upload(hx, ncols * 4), *y;
        void *w = dev_upload(hw, wb), *w2 = dev_upload(hw2, wb), *xq;
        CK(cudaMalloc(&y, sizeof(float) * 2 * nrows));
        CK(cudaMalloc(&xq, rb));
        CK(cudaMemset(xq, 0xA5, rb));   /* poisoned: every byte the GEMV reads must be written */
        if (gpu_q8_records(x, ncols, xq, NULL)) { bad = 1; snprintf(msg, sizeof msg, "gpu_q8_records: %s", gpu_gemv_error()); }
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(hr, xq, rb, cudaMemcpyDeviceToHost));
        const int dg = bad ? -1 : q8r_records_differ(hr, hx, ncols);
        if (dg >= 0) { bad = 1; snprintf(msg, sizeof msg, "group %d: the records differ from the reference quantizer's", dg); }
        /* gpu_gemv_q8x against gpu_gemv */
        for (int v = 0; v < 2 && !bad; v++) {
            CK(cudaMemset(y, 0xFF, sizeof(float) * nrows));
            const int rc = v ? gpu_gemv_q8x(t, w, x, xq, y, ncols, nrows, NULL) : gpu_gemv(t, w, x, y, ncols, nrows, NULL);
            if (rc) { bad = 1; snprintf(msg, sizeof msg, "launch: %s", gpu_gemv_error()); }
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(v ? y1 : y0, y, sizeof(float) * nrows, cudaMemcpyDeviceToHost));
        }
        if (!bad && memcmp(y0, y1, sizeof(float) * nrows)) { bad = 1; snprintf(msg, sizeof msg, "%dx%d: gpu_gemv_q8x differs from gpu_gemv", nrows, ncols); }
        /* the SwiGLU experts (two slots over two expert pairs) against the call without records */
        void *htab[2] = { w, w2 }, *hutab[2] = { w2, w };
        const int hids[2] = { 1, 0 };
        void **tab = (void **)dev_upload(htab, sizeof htab), **utab = (void **)dev_upload(hutab, sizeof hutab);
        int *ids = (int *)dev_upload(hids, sizeof hids);
        for (int v = 0; v < 2 && !bad; v++) {
            CK(cudaMemset(y, 0xFF, sizeof(float) * 2 * nrows));
            const int rc = v ? gpu_gemv_experts_swiglu_q8x(t, (const void *const *)tab, (const void *const *)utab, ids, 2, x, xq, y, ncols, nrows, NULL)
                             : gpu_gemv_experts_swiglu(t, (const void *const *)tab, (const void *const *)utab, ids, 2, x, y, ncols, nrows, NULL);
            if (rc) { bad = 1; snprintf(msg, sizeof msg, "experts launch: %s", gpu_gemv_error()); }
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(v ? y1 : y0, y, sizeof(float) * 2 * nrows, cudaMemcpyDeviceToHost));
        }
        if (!bad && memcmp(y0, y1, sizeof(float) * 2 * nrows)) { bad = 1; snprintf(msg, sizeof msg, "%dx%d: experts_swiglu_q8x differs", nrows, ncols); }
        for (int r = 0; r < 2 * nrows && !bad; r++)
            if (!(y0[r] == y0[r])) { bad = 1; snprintf(msg, sizeof msg, "%dx%d: unwritten output %d", nrows, ncols, r); }
        n++;
        CK(cudaFree(x)); CK(cudaFree(y)); CK(cudaFree(w)); CK(cudaFree(w2)); CK(cudaFree(xq));
        CK(cudaFree(tab)); CK(cudaFree(utab)); CK(cudaFree(ids));
        free(hw); free(hw2); free(hx); free(hr); free(y0); free(y1);
    }
    snprintf(detail, sizeof detail, "%d shapes: records = reference quantizer, q8x GEMV and SwiGLU bitwise equal", n);
    report(!bad, "gemv-q8x", hm_type_name(t), bad ? msg : detail);
}

/* ---- several tokens' expert slots in one launch (gpu_gemv_experts_swiglu_x, gpu_gemv_experts_y,
 * the batched decode's calls) bitwise what the single-token calls give each token, and
 * gpu_gemv_batch bitwise gpu_gemv, at model shapes: there the launcher lowers the lanes per row
 * (q8_lanes_shift_for), and it must do so from one token's rows, not from the launch's ---- */
static void test_tokens(int tgu, int tdn, int H, int I, int K, int NT) {
    enum { NMATS = 12 };   /* distinct matrices behind the NEXP table entries */
    const size_t gb = hm_row_size(tgu, H) * I, db = hm_row_size(tdn, I) * H;
    void *g[NMATS], *u[NMATS], *d[NMATS];
    uint8_t *h = (uint8_t *)malloc(gb > db ? gb : db);
    for (int m = 0; m < NMATS; m++) {
        fill_weights(tgu, h, (int64_t)I * H); g[m] = dev_upload(h, gb);
        fill_weights(tgu, h, (int64_t)I * H); u[m] = dev_upload(h, gb);
        fill_weights(tdn, h, (int64_t)H * I); d[m] = dev_upload(h, db);
    }
    free(h);
    void *hg[NEXP], *hu[NEXP], *hd[NEXP];
    for (int e = 0; e < NEXP; e++) { hg[e] = g[e % NMATS]; hu[e] = u[(e + 5) % NMATS]; hd[e] = d[(e + 7) % NMATS]; }
    void *tg = dev_upload(hg, sizeof hg), *tu = dev_upload(hu, sizeof hu), *td = dev_upload(hd, sizeof hd);
    int *ids = (int *)malloc(sizeof(int) * NT * K);
    for (int j = 0; j < NT; j++) pick_ids(ids + j * K, K);
    ids[K - 1] = -1;   /* a skipped slot (a copied miss): its rows keep the poison in both */
    float *hx = (float *)malloc(sizeof(float) * NT * H);
    for (int i = 0; i < NT * H; i++) hx[i] = rndf();
    const size_t na = (size_t)NT * K * I, ny = (size_t)NT * (K + 1) * H;   /* y: K + 1 rows a token, as the decode's */
    float *x = (float *)dev_upload(hx, sizeof(float) * NT * H), *a1, *a2, *y1, *y2;
    int *dids = (int *)dev_upload(ids, sizeof(int) * NT * K);
    CK(cudaMalloc(&a1, na * 4)); CK(cudaMalloc(&a2, na * 4)); CK(cudaMalloc(&y1, ny * 4)); CK(cudaMalloc(&y2, ny * 4));
    CK(cudaMemset(a1, 0xFF, na * 4)); CK(cudaMemset(a2, 0xFF, na * 4)); CK(cudaMemset(y1, 0xFF, ny * 4)); CK(cudaMemset(y2, 0xFF, ny * 4));
    int rc = 0;
    for (int j = 0; j < NT && !rc; j++) {   /* one token at a time, as the single-token step */
        rc |= gpu_gemv_experts_swiglu(tgu, (const void *const *)tg, (const void *const *)tu, dids + j * K, K, x + (size_t)j * H,
                                      a1 + (size_t)j * K * I, H, I, NULL);
        rc |= gpu_gemv_experts(tdn, (const void *const *)td, dids + j * K, K, a1 + (size_t)j * K * I, y1 + (size_t)j * (K + 1) * H, I, H, NULL);
    }
    rc |= gpu_gemv_experts_swiglu_x(tgu, (const void *const *)tg, (const void *const *)tu, dids, NT * K, x, H, K, a2, H, I, NULL);
    rc |= gpu_gemv_experts_y(tdn, (const void *const *)td, dids, NT * K, a2, y2, I, H, K, (int64_t)(K + 1) * H, NULL);
    char msg[256] = "", detail[256];
    int bad = 0;
    if (rc) { bad = 1; snprintf(msg, sizeof msg, "a launch failed: %s", gpu_gemv_error()); }
    float *b1 = (float *)malloc(ny * 4), *b2 = (float *)malloc(ny * 4);
    if (!bad) {
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(b1, a1, na * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(b2, a2, na * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < na && !bad; i++)
            if (memcmp(&b1[i], &b2[i], 4)) { bad = 1; snprintf(msg, sizeof msg, "gate/up: token %zu slot %zu row %zu: %.9g vs %.9g", i / ((size_t)K * I), i / I % K, i % I, b2[i], b1[i]); }
        CK(cudaMemcpy(b1, y1, ny * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(b2, y2, ny * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < ny && !bad; i++)
            if (memcmp(&b1[i], &b2[i], 4)) { bad = 1; snprintf(msg, sizeof msg, "down: token %zu row %zu of %d: %.9g vs %.9g", i / ((size_t)(K + 1) * H), i % ((size_t)(K + 1) * H), (K + 1) * H, b2[i], b1[i]); }
        for (int r = 0; r < H && !bad; r++)   /* the written slot really was written, the skipped one not */
            if (!(b1[r] == b1[r]) || b1[(size_t)(K - 1) * H + r] == b1[(size_t)(K - 1) * H + r]) { bad = 1; snprintf(msg, sizeof msg, "slot 0 unwritten or skipped slot written at row %d", r); }
    }
    /* gpu_gemv_batch at a dense shape of the same token count */
    if (!bad) {
        const int nrows = 4 * I > 8192 ? 4 * I : 8192;
        char m2[160];
        const int b = test_batch_shape(tgu, nrows, H, NT < 4 ? NT : 4, m2, sizeof m2);
        if (b) { bad = 1; snprintf(msg, sizeof msg, "gemv_batch %dx%d: %s", nrows, H, m2); }
    }
    snprintf(detail, sizeof detail, "%s/%s %dx%d, %d tokens x %d slots: swiglu_x, experts_y, gemv_batch bitwise the single-token calls",
             hm_type_name(tgu), hm_type_name(tdn), I, H, NT, K);
    report(!bad, "gemv-tokens", hm_type_name(tgu), bad ? msg : detail);
    for (int m = 0; m < NMATS; m++) { CK(cudaFree(g[m])); CK(cudaFree(u[m])); CK(cudaFree(d[m])); }
    CK(cudaFree(tg)); CK(cudaFree(tu)); CK(cudaFree(td)); CK(cudaFree(dids)); CK(cudaFree(x));
    CK(cudaFree(a1)); CK(cudaFree(a2)); CK(cudaFree(y1)); CK(cudaFree(y2));
    free(ids); free(hx); free(b1); free(b2);
}

/* Time of the register kernel with x's records made once (gpu_q8_records, outside the timing)
 * against each block quantizing x (--bench-xq); results bitwise equal. */
static int bench_xq(void) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const double copy = bench_copy(e0, e1);
    gpu_gemv_set_mode(1);
    static const int shp[][3] = { { HM_TYPE_Q4_K, 13312, 4096 }, { HM_TYPE_Q4_K, 4096, 12288 }, { HM_TYPE_Q6_K, 1024, 4096 },
                                  { HM_TYPE_Q4_K, 14336, 4096 }, { HM_TYPE_Q3_K, 22528, 4096 }, { HM_TYPE_Q4_0, 4096, 14336 } };
    int fails = 0;
    for (int si = 0; si < 6; si++) {
        const int t = shp[si][0], nrows = shp[si][1], ncols = shp[si][2];
        const size_t bytes = hm_row_size(t, ncols) * (size_t)nrows;
        void *h = malloc(bytes);
        fill_weights(t, h, (int64_t)nrows * ncols);
        float *hx = (float *)malloc(ncols * 4), *y0 = (float *)malloc(nrows * 4), *y1 = (float *)malloc(nrows * 4);
        for (int c = 0; c < ncols; c++) hx[c] = rndf();
        float *x = (float *)dev_upload(hx, ncols * 4), *y;
        void *xq;
        CK(cudaMalloc(&y, nrows * 4));
        CK(cudaMalloc(&xq, gpu_q8_records_bytes(ncols)));
        if (gpu_q8_records(x, ncols, xq, NULL)) { printf("FAIL gpu_q8_records\n"); return 1; }
        void *w[16];
        int ncopy = (int)((512u << 20) / bytes) + 1;
        if (ncopy > 16) ncopy = 16;
        for (int i = 0; i < ncopy; i++) w[i] = dev_upload(h, bytes);
        double us[2];
        for (int v = 0; v < 2; v++) {   /* 0: each block quantizes x; 1: records made once */
            CK(cudaMemset(y, 0xFF, nrows * 4));
            int rc = gpu_gemv_q8x(t, w[0], x, v ? xq : NULL, y, ncols, nrows, NULL);
            if (rc) { printf("FAIL launch %d\n", rc); return 1; }
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(v ? y1 : y0, y, nrows * 4, cudaMemcpyDeviceToHost));
            const int iters = 200;
            CK(cudaEventRecord(e0));
            for (int i = 0; i < iters; i++) gpu_gemv_q8x(t, w[i % ncopy], x, v ? xq : NULL, y, ncols, nrows, NULL);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            us[v] = time_ms(e0, e1) * 1e3 / iters;
        }
        const int same = memcmp(y0, y1, nrows * 4) == 0;
        fails += !same;
        const double g0 = bytes / (us[0] * 1e-6) / 1e9, g1 = bytes / (us[1] * 1e-6) / 1e9;
        printf("%s %-5s %5dx%-5d: quantized in each block %7.1f us (%4.1f%%), records made once %7.1f us (%4.1f%%): %.2fx, results %s\n",
               same ? "PASS" : "FAIL", hm_type_name(t), nrows, ncols, us[0], 100 * g0 / copy, us[1], 100 * g1 / copy, us[0] / us[1],
               same ? "bitwise equal" : "DIFFER");
        for (int i = 0; i < ncopy; i++) CK(cudaFree(w[i]));
        CK(cudaFree(x)); CK(cudaFree(y)); CK(cudaFree(xq));
        free(h); free(hx); free(y0); free(y1);
    }
    gpu_gemv_set_mode(0);
    return fails ? 1 : 0;
}

/* --bench-air: the q8 GEMV launches of one `air` decode layer (BENCH.md), time per launch and %
 * of the copy bandwidth over the bytes each reads; the environment picks the variant. */
static int bench_air(void) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const double copy = bench_copy(e0, e1);
    gpu_gemv_set_mode(1);
    static const struct { const char *name; int t, nrows, ncols; } plain[] = {
        { "q|k Q4_K 13312x4096", HM_TYPE_Q4_K, 13312, 4096 }, { "o Q4_K 4096x12288", HM_TYPE_Q4_K, 4096, 12288 },
        { "v Q6_K 1024x4096", HM_TYPE_Q6_K, 1024, 4096 }, { "head Q6_K 151552x4096", HM_TYPE_Q6_K, 151552, 4096 } };
    double tot = 0, us;
    for (int i = 0; i < 4; i++) {
        const double g = bench_gemv(plain[i].t, plain[i].nrows, plain[i].ncols, e0, e1, &us);
        printf("%-24s %7.1f us %5.1f%%\n", plain[i].name, us, 100 * g / copy);
        if (i < 3) tot += us;
    }
    double ug, ud;
    bench_moe_shape(HM_TYPE_Q3_K, HM_TYPE_Q4_0, 4096, 1408, 8, e0, e1, &ug, &ud);
    printf("%-24s %7.1f us %5.1f%%\n%-24s %7.1f us %5.1f%%\n", "routed g+u Q3_K 8x2816", ug,
           100 * 16.0 * hm_row_size(HM_TYPE_Q3_K, 4096) * 1408 / (ug * 1e-6) / 1e9 / copy, "routed down Q4_0 8x4096", ud,
           100 * 8.0 * hm_row_size(HM_TYPE_Q4_0, 1408) * 4096 / (ud * 1e-6) / 1e9 / copy);
    tot += ug + ud;
    bench_moe_shape(HM_TYPE_Q4_K, HM_TYPE_Q4_0, 4096, 1408, 1, e0, e1, &ug, &ud);
    printf("%-24s %7.1f us\n%-24s %7.1f us\n", "shared g+u Q4_K 2816", ug, "shared down Q4_0 4096", ud);
    printf("%-24s %7.1f us (v and the shared expert run beside the rest in the model)\n", "layer GEMVs, sum", tot + ug + ud);
    gpu_gemv_set_mode(0);
    return 0;
}

/* --bench-nb: the batched decode's weight reads (air's dense matrices, interleaved as the executor
 * uploads them, and its shared expert as a one-slot table): nb rows in one call (gpu_gemv_batch,
 * gpu_gemv_swiglu_rows, gpu_gemv_expert_rows) against one call a row, us per call and the weight
 * bytes over that time against the copy figure; copies rotated past L2 */
static int bench_nb(void) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const double copy = bench_copy(e0, e1);
    printf("copy %.0f GB/s\n", copy);
    gpu_gemv_set_mode(1);
    static const struct { int t, nrows, ncols, nmat; const char *name; } sh[] = {
        { HM_TYPE_Q4_K, 13312, 4096, 1, "q|k" }, { HM_TYPE_Q6_K, 1024, 4096, 1, "v" }, { HM_TYPE_Q4_K, 4096, 12288, 1, "o" },
        { HM_TYPE_Q4_K, 1408, 4096, 2, "shared gate|up" }, { HM_TYPE_Q4_0, 4096, 1408, 1, "shared down" },
        { HM_TYPE_Q6_K, 32768, 4096, 1, "head (a fifth)" },
    };
    for (size_t si = 0; si < sizeof sh / sizeof sh[0]; si++) {
        const int t = sh[si].t, nr = sh[si].nrows, nc = sh[si].ncols, nm = sh[si].nmat;
        const size_t ib = gpu_q8_inter_bytes(t, nc, nr, nm, 1);
        if (!ib) { printf("%s: not interleaved\n", sh[si].name); continue; }
        std::vector<uint8_t> a(hm_row_size(t, nc) * nr), in(ib);
        fill_weights(t, a.data(), (int64_t)nr * nc);
        if (gpu_q8_inter_pack(t, a.data(), nc, nr, nm, 1, in.data())) { printf("%s: pack failed\n", sh[si].name); continue; }
        int ncopy = (int)((512u << 20) / (ib * nm)) + 1;
        if (ncopy < 2) ncopy = 2;
        if (ncopy > 32) ncopy = 32;
        std::vector<void *> w(2 * ncopy);   /* plain: the matrices; one slot: [gate, up] tables of copy i */
        std::vector<void **> tabs(ncopy, nullptr);
        for (int i = 0; i < ncopy * nm; i++) w[i] = dev_upload(in.data(), ib);
        for (int i = 0; i < ncopy; i++) {
            if (nm == 1 && sh[si].name[0] != 's') { gpu_q8_inter_register((const void *const *)w[i], t, nc, nr, 1, 1); continue; }
            void *ht[2] = { w[nm * i], w[nm * i + nm - 1] };
            tabs[i] = (void **)dev_upload(ht, sizeof ht);
            gpu_q8_inter_register((const void *const *)tabs[i], t, nc, nr, nm, 1);
            if (nm == 2) gpu_q8_inter_register((const void *const *)tabs[i] + 1, t, nc, nr, nm, 1);
        }
        const int zero = 0;
        int *did = (int *)dev_upload(&zero, sizeof zero);
        float *x, *y;
        {
            std::vector<float> hx(4 * (size_t)nc);
            for (auto &v : hx) v = rndf();
            x = (float *)dev_upload(hx.data(), sizeof(float) * hx.size());
        }
        CK(cudaMalloc(&y, 4 * (size_t)nr * sizeof(float)));
        auto call = [&](int i, int nb, int single) {
            const int c = i % ncopy;
            int rc = 0;
            for (int b = 0; b < (single ? nb : 1); b++) {
                const int n = single ? 1 : nb;
                const float *xb = x + (size_t)b * nc;
                float *yb = y + (size_t)b * nr;
                if (!tabs[c]) rc |= n == 1 ? gpu_gemv(t, w[c], xb, yb, nc, nr, NULL) : gpu_gemv_batch(t, w[c], xb, nc, yb, nr, n, nc, nr, NULL);
                else if (nm == 2) rc |= gpu_gemv_swiglu_rows(t, (const void *const *)tabs[c], (const void *const *)tabs[c] + 1, did, xb, nc, n, yb, nr, nc, nr, NULL, NULL, 0);
                else rc |= gpu_gemv_expert_rows(t, (const void *const *)tabs[c], did, xb, nc, n, yb, nr, nc, nr, NULL);
            }
            if (rc) { fprintf(stderr, "bench-nb %s: %s\n", sh[si].name, gpu_gemv_error()); exit(1); }
        };
        const double gb = (double)ib * nm / 1e9;
        double one = 0;
        for (int nb = 1; nb <= 4; nb++) {
            double us[2];
            for (int single = 0; single < 2; single++) {
                const int iters = 60;
                for (int i = 0; i < 3; i++) call(i, nb, single);
                CK(cudaEventRecord(e0));
                for (int i = 0; i < iters; i++) call(i + 3, nb, single);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                us[single] = time_ms(e0, e1) * 1e3 / iters;
            }
            if (nb == 1) one = us[0];
            printf("%-15s %s %5dx%-5d nb %d: one call %7.2f us (%4.0f%% of copy, %.2fx one row's), a call a row %7.2f us\n", sh[si].name,
                   hm_type_name(t), nr, nc, nb, us[0], 100 * gb / (us[0] * 1e-6) / copy, us[0] / one, us[1]);
        }
        for (int i = 0; i < ncopy; i++) {
            if (tabs[i]) { gpu_q8_inter_unregister((const void *const *)tabs[i]); if (nm == 2) gpu_q8_inter_unregister((const void *const *)tabs[i] + 1); CK(cudaFree(tabs[i])); }
            else gpu_q8_inter_unregister((const void *const *)w[i]);
        }
        for (int i = 0; i < ncopy * nm; i++) CK(cudaFree(w[i]));
        CK(cudaFree(did)); CK(cudaFree(x)); CK(cudaFree(y));
    }
    return 0;
}

/* --bench-moe: air's routed experts as the decode step runs them (BENCH.md): the routed gate/up
 * with its top-k inside (Q3_K, 128 experts of 1408 x 4096, k 8, a sigmoid router with a selection
 * bias), then the routed down (Q4_0, 4096 x 1408) on the ids it stored, both interleaved in one
 * arena read affine, in one stream with PDL, as bench_decode's step has them; 16 routings cycled so
 * that each pair reads other experts (65 MB a pair; L2 holds 50). us a pair, and a hash of the last
 * pair's output (a variant set by the environment must give the same hash). Every expert gets a copy
 * of the same packed matrices: the timing reads each expert's own. */
static uint8_t *affine_arena(int E, int nm, void *const *const *src, const size_t *bytes, size_t *stride, size_t *off, void **tab[]);
static int bench_moe_air(void) {
    const int tgu = HM_TYPE_Q3_K, tdn = HM_TYPE_Q4_0, H = 4096, I = 1408, E = 128, k = 8, NR = 16, iters = 400;
    gpu_gemv_set_mode(1);
    const size_t bg = gpu_q8_inter_bytes(tgu, H, I, 2, k), bd = gpu_q8_inter_bytes(tdn, I, H, 1, k);
    if (!bg || !bd || !gpu_gemv_experts_routed_ok(tgu, H, E, k)) { printf("FAIL bench-moe: the shape is not taken\n"); return 1; }
    /* each matrix packed once, every expert a copy of it in one arena (affine_arena; its tables name
     * the next expert's matrices, which only a launch that reads them instead of the ids would see) */
    const size_t wg = hm_row_size(tgu, H) * I, wd = hm_row_size(tdn, I) * H;
    std::vector<uint8_t> w(wg > wd ? wg : wd), pk(bg > bd ? bg : bd);
    std::vector<void *> src[3];
    const size_t by[3] = { bg, bg, bd };
    for (int m = 0; m < 3; m++) {
        const int t = m < 2 ? tgu : tdn, nc = m < 2 ? H : I, nr = m < 2 ? I : H;
        fill_weights(t, w.data(), (int64_t)nr * nc);
        if (gpu_q8_inter_pack(t, w.data(), nc, nr, m < 2 ? 2 : 1, k, pk.data())) { printf("FAIL bench-moe: pack\n"); return 1; }
        src[m].assign(E, dev_upload(pk.data(), by[m]));
    }
    void *const *asrc[3] = { src[0].data(), src[1].data(), src[2].data() };
    size_t st, off[3];
    void **atab[3];
    uint8_t *arena = affine_arena(E, 3, asrc, by, &st, off, atab);
    const void *const *tab[3];
    for (int m = 0; m < 3; m++) {
        tab[m] = (const void *const *)atab[m];
        if (gpu_q8_inter_register(tab[m], m < 2 ? tgu : tdn, m < 2 ? H : I, m < 2 ? I : H, m < 2 ? 2 : 1, k) ||
            (gpu_q8_affine() && gpu_q8_inter_affine(tab[m], arena + off[m], (int64_t)st))) { printf("FAIL bench-moe: register\n"); return 1; }
    }
    std::vector<float> lg((size_t)NR * E), bias(E), x(H);
    for (auto &v : lg) v = rndf() * 4.f;
    for (auto &v : bias) v = rndf() * 0.5f;
    for (auto &v : x) v = rndf();
    float *dlog = (float *)dev_upload(lg.data(), sizeof(float) * lg.size()), *dbias = (float *)dev_upload(bias.data(), sizeof(float) * E);
    float *dx = (float *)dev_upload(x.data(), sizeof(float) * H), *act, *y, *wt;
    int *ids;
    void *xq;
    CK(cudaMalloc(&act, sizeof(float) * k * I)); CK(cudaMalloc(&y, sizeof(float) * k * H)); CK(cudaMalloc(&wt, sizeof(float) * k));
    CK(cudaMalloc(&ids, sizeof(int) * k)); CK(cudaMalloc(&xq, gpu_q8_records_bytes(H)));
    std::vector<int> i0(k);
    for (int j = 0; j < k; j++) i0[j] = j;
    CK(cudaMemcpy(ids, i0.data(), sizeof(int) * k, cudaMemcpyHostToDevice));   /* valid ids before the first router, as the executor has */
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (gpu_q8_records(dx, H, xq, s)) { printf("FAIL bench-moe: records\n"); return 1; }
    auto pair = [&](int it) {
        return gpu_gemv_experts_swiglu_routed(tgu, tab[0], tab[1], dlog + (size_t)(it % NR) * E, dbias, E, 2, 1, 2.5f, ids, wt, k, dx, xq, act, H,
                                              I, 0, s) |
               gpu_gemv_experts(tdn, tab[2], ids, k, act, y, I, H, s);
    };
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    int rc = 0;
    for (int it = 0; it < 2 * NR; it++) rc |= pair(it);   /* warm-up */
    CK(cudaEventRecord(e0, s));
    for (int it = 0; it < iters; it++) rc |= pair(it);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    if (rc) { printf("FAIL bench-moe: a launch failed\n"); return 1; }
    std::vector<float> hy((size_t)k * H);
    std::vector<int> hid(k);
    CK(cudaMemcpy(hy.data(), y, sizeof(float) * hy.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hid.data(), ids, sizeof(int) * k, cudaMemcpyDeviceToHost));
    const uint64_t h = fnv_words(FNV0, hy.data(), hy.size());
    const double us = time_ms(e0, e1) * 1e3 / iters, bytes = 2.0 * k * hm_row_size(tgu, H) * I + (double)k * hm_row_size(tdn, I) * H;
    printf("bench-moe air routed gate/up (top-k inside) + down: %.2f us a pair, %.0f GB/s; last pair's ids %d %d %d %d %d %d %d %d, "
           "output hash %016llx\n", us, bytes / (us * 1e-6) / 1e9, hid[0], hid[1], hid[2], hid[3], hid[4], hid[5], hid[6], hid[7],
           (unsigned long long)h);
    gpu_gemv_set_mode(0);
    return 0;
}

static int bench(int only_mode, const char *only_type) {   /* only_type: a type name, or NULL for all */
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const double copy = bench_copy(e0, e1);
    printf("device-to-device copy: %.0f GB/s (read + write)\n", copy);
  for (int mode = 0; mode < 2; mode++) {
    if (only_mode >= 0 && mode != only_mode) continue;
    CK(cudaDeviceSynchronize());
    if (gpu_gemv_set_mode(mode)) { fprintf(stderr, "%s\n", gpu_gemv_error()); exit(1); }
    printf("\nmode %d: %s\n", mode, mode ? "x quantized to int8 per 32, dp4a (gpu_gemv_set_mode(1))" : "F32 activations");
    printf("%-7s %6s | %9s %8s %5s | %9s %8s %5s | %8s %5s %8s %5s\n", "type", "bit/w", "14336x4096", "GB/s", "%cp",
           "4096x14336", "GB/s", "%cp", "moe g+u", "%cp", "moe down", "%cp");
    for (int i = 0; i < NTYPES; i++) {
        const int t = k_types[i];
        if (mode && is_float_type(t)) continue;
        if (only_type && strcasecmp(only_type, hm_type_name(t))) continue;
        double us1, us2, gu = 0, dn = 0;
        const double g1 = bench_gemv(t, 14336, 4096, e0, e1, &us1), g2 = bench_gemv(t, 4096, 14336, e0, e1, &us2);
        bench_moe(t, e0, e1, &gu, &dn);
        printf("%-7s %6.3f | %7.1fus %8.0f %4.0f%% | %7.1fus %8.0f %4.0f%% | %8.0f %4.0f%% %8.0f %4.0f%%\n", hm_type_name(t),
               8.0 * hm_row_size(t, 4096) / 4096, us1, g1, 100 * g1 / copy, us2, g2, 100 * g2 / copy, gu, 100 * gu / copy, dn,
               100 * dn / copy);
    }
  }
    if (only_mode != 0 && !only_type) {   /* several tokens' vectors per weight read (mode 1) */
        gpu_gemv_set_mode(1);
        printf("\ngpu_gemv_batch (mode 1) vs one gpu_gemv per vector, us per call (GB/s of weights read once):\n");
        static const int bt[] = { HM_TYPE_Q4_K, HM_TYPE_Q6_K, HM_TYPE_Q3_K, HM_TYPE_Q8_0, HM_TYPE_Q4_0 };
        static const int shp[][2] = { { 4096, 2048 }, { 12288, 4096 }, { 14336, 4096 } };
        for (size_t i = 0; i < sizeof bt / sizeof bt[0]; i++)
            for (int sh = 0; sh < 3; sh++)
                for (int nb = 2; nb <= 4; nb += 2) {
                    double ub = 0, us = 0;
                    bench_batch(bt[i], shp[sh][0], shp[sh][1], nb, e0, e1, &ub, &us);
                    const double gb = hm_row_size(bt[i], shp[sh][1]) * (double)shp[sh][0] / 1e9;
                    printf("%-7s %5dx%-5d nb %d: batch %7.1f us (%5.0f GB/s), %d singles %7.1f us: %.2fx\n", hm_type_name(bt[i]),
                           shp[sh][0], shp[sh][1], nb, ub, gb / (ub * 1e-6), nb, us, us / ub);
                }
    }
    gpu_gemv_set_mode(0);
    printf("\nGB/s: weight bytes read per call / time per call (100-200 calls, matrices rotated past L2);\n"
           "%%cp: of the copy figure above. moe: 128 experts (gate/up 768x2048, down 2048x768), k=8 random per call.\n");
    return 0;
}

/* HOTMOE_AFFINE's layout for a test: E experts' nm interleaved matrices (src[m][e], bytes[m] each)
 * copied into one arena, matrix m of expert e at e * *stride + off[m] (each 256-byte aligned), and
 * device tables tab[m] that name expert (e + 1) % E's matrix m: a launch that read a table instead of
 * computing base + id * stride would give other results. The caller frees the arena and tables. */
static uint8_t *affine_arena(int E, int nm, void *const *const *src, const size_t *bytes, size_t *stride, size_t *off, void **tab[]) {
    size_t st = 0;
    for (int m = 0; m < nm; m++) { off[m] = st; st += (bytes[m] + 255) & ~(size_t)255; }
    uint8_t *arena;
    CK(cudaMalloc(&arena, E * st));
    std::vector<void *> t(E);
    for (int m = 0; m < nm; m++) {
        for (int e = 0; e < E; e++) {
            CK(cudaMemcpy(arena + e * st + off[m], src[m][e], bytes[m], cudaMemcpyDeviceToDevice));
            t[e] = arena + (size_t)((e + 1) % E) * st + off[m];
        }
        tab[m] = (void **)dev_upload(t.data(), E * sizeof(void *));
    }
    *stride = st;
    return arena;
}

/* The interleaved layout (HOTMOE_INTER, gpu_q8_inter_pack): E experts' gate, up (H x I... rows of
 * ncols) and down matrices in the GGUF layout and interleaved for tok slots a token; the SwiGLU
 * launch of k slots, the down launch, and the same for nb tokens at once (x rows, one slot group
 * each) give bitwise the GGUF layout's results. One token: also the down launch on at most 44 and
 * 7 blocks (gpu_q8_grid_cap, HOTMOE_SHDOWN_GRID: more rounds a block, the same sums). */
static void test_inter(int tgu, int tdn, int H, int I, int k, int nb) {
    const int E = 16;
    char what[160];
    snprintf(what, sizeof what, "interleaved experts %dx%d / %dx%d, %d slots, %d tokens", I, H, H, I, k, nb);
    const size_t rg = hm_row_size(tgu, H), rd = hm_row_size(tdn, I);
    const size_t bg = gpu_q8_inter_bytes(tgu, H, I, 2, k), bd = gpu_q8_inter_bytes(tdn, I, H, 1, k);
    if (!bg || !bd) { report(0, what, "", "gpu_q8_inter_bytes: 0"); return; }
    void *hg[E], *hu[E], *hd[E], *ig[E], *iu[E], *id[E];
    void **tab;
    CK(cudaMalloc(&tab, 6 * E * sizeof(void *)));
    std::vector<uint8_t> buf(bg > bd ? bg : bd);
    for (int e = 0; e < E; e++) {
        std::vector<uint8_t> a(rg * I), b(rg * I), c(rd * H);
        fill_weights(tgu, a.data(), (int64_t)I * H); fill_weights(tgu, b.data(), (int64_t)I * H); fill_weights(tdn, c.data(), (int64_t)H * I);
        hg[e] = dev_upload(a.data(), a.size()); hu[e] = dev_upload(b.data(), b.size()); hd[e] = dev_upload(c.data(), c.size());
        if (gpu_q8_inter_pack(tgu, a.data(), H, I, 2, k, buf.data())) { report(0, what, "", "pack gate"); return; }
        ig[e] = dev_upload(buf.data(), bg);
        if (gpu_q8_inter_pack(tgu, b.data(), H, I, 2, k, buf.data())) { report(0, what, "", "pack up"); return; }
        iu[e] = dev_upload(buf.data(), bg);
        if (gpu_q8_inter_pack(tdn, c.data(), I, H, 1, k, buf.data())) { report(0, what, "", "pack down"); return; }
        id[e] = dev_upload(buf.data(), bd);
    }
    void *ht[6 * E];
    for (int e = 0; e < E; e++) { ht[e] = hg[e]; ht[E + e] = hu[e]; ht[2 * E + e] = hd[e]; ht[3 * E + e] = ig[e]; ht[4 * E + e] = iu[e]; ht[5 * E + e] = id[e]; }
    CK(cudaMemcpy(tab, ht, sizeof ht, cudaMemcpyHostToDevice));
    const void *const *t_g = (const void *const *)tab, *const *t_u = t_g + E, *const *t_d = t_g + 2 * E;
    const void *const *t_ig = t_g + 3 * E, *const *t_iu = t_g + 4 * E, *const *t_id = t_g + 5 * E;
    if (gpu_q8_inter_register(t_ig, tgu, H, I, 2, k) || gpu_q8_inter_register(t_iu, tgu, H, I, 2, k) ||
        gpu_q8_inter_register(t_id, tdn, I, H, 1, k)) { report(0, what, "", "register"); return; }
    /* the same interleaved experts in one arena at a fixed stride (gate | up | down, 256-byte
     * aligned), registered affine (HOTMOE_AFFINE); their tables name the NEXT expert's matrices, so a
     * launch that read a table instead of computing the address would give other results */
    void *const *asrc[3] = { ig, iu, id };
    const size_t abytes[3] = { bg, bg, bd };
    size_t st, off[3];
    void **atab[3];
    uint8_t *arena = affine_arena(E, 3, asrc, abytes, &st, off, atab);
    const void *const *t_ag = (const void *const *)atab[0], *const *t_au = (const void *const *)atab[1], *const *t_ad = (const void *const *)atab[2];
    if (gpu_q8_inter_register(t_ag, tgu, H, I, 2, k) || gpu_q8_inter_register(t_au, tgu, H, I, 2, k) ||
        gpu_q8_inter_register(t_ad, tdn, I, H, 1, k) || gpu_q8_inter_affine(t_ag, arena + off[0], (int64_t)st) ||
        gpu_q8_inter_affine(t_au, arena + off[1], (int64_t)st) || gpu_q8_inter_affine(t_ad, arena + off[2], (int64_t)st)) {
        report(0, what, "", "register the affine tables"); return;
    }
    if (gpu_q8_inter_affine(t_g, arena, (int64_t)st) != -1) { report(0, what, "", "gpu_q8_inter_affine took an unregistered table"); return; }
    const int affine0 = gpu_q8_affine();
    const int K = k * nb;
    std::vector<int> ids(K);
    for (int j = 0; j < K; j++) ids[j] = (int)(rnd32() % E);
    std::vector<float> x((size_t)nb * H);
    for (auto &v : x) v = rndf();
    int *dids = (int *)dev_upload(ids.data(), sizeof(int) * K);
    float *dx = (float *)dev_upload(x.data(), sizeof(float) * x.size()), *act[5], *y[5];
    const int NV = nb == 1 ? 5 : 3;
    for (int v = 0; v < NV; v++) { CK(cudaMalloc(&act[v], sizeof(float) * K * I)); CK(cudaMalloc(&y[v], sizeof(float) * K * H)); }
    int rc = 0;
    for (int v = 0; v < NV; v++) {   /* 0: GGUF layout, 1: interleaved, 2: interleaved in the arena, read affine; 3, 4: 1, 2 with the down capped */
        const int w = v > 2 ? v - 2 : v;
        const void *const *tg = w == 0 ? t_g : w == 1 ? t_ig : t_ag, *const *tu = w == 0 ? t_u : w == 1 ? t_iu : t_au,
                          *const *td = w == 0 ? t_d : w == 1 ? t_id : t_ad;
        gpu_q8_affine_set(w == 2);
        CK(cudaMemset(act[v], 0xFF, sizeof(float) * K * I)); CK(cudaMemset(y[v], 0xFF, sizeof(float) * K * H));
        if (nb == 1) rc |= gpu_gemv_experts_swiglu_q8x(tgu, tg, tu, dids, k, dx, NULL, act[v], H, I, NULL);
        else rc |= gpu_gemv_experts_swiglu_x(tgu, tg, tu, dids, K, dx, H, k, act[v], H, I, NULL);
        /* the down launch as the executor makes it: k slots a token (the lanes follow that) */
        if (v > 2) gpu_q8_grid_cap(v == 3 ? 44 : 7);
        rc |= nb == 1 ? gpu_gemv_experts(tdn, td, dids, K, act[v], y[v], I, H, NULL)
                      : gpu_gemv_experts_y(tdn, td, dids, K, act[v], y[v], I, H, k, (int64_t)k * H, NULL);
        gpu_q8_grid_cap(0);
        CK(cudaDeviceSynchronize());
    }
    gpu_q8_affine_set(affine0);
    std::vector<float> a0((size_t)K * I), y0((size_t)K * H), av(a0.size()), yv(y0.size());
    const size_t na = sizeof(float) * a0.size(), ny = sizeof(float) * y0.size();
    CK(cudaMemcpy(a0.data(), act[0], na, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y0.data(), y[0], ny, cudaMemcpyDeviceToHost));
    int finite = 1;
    for (float v : y0) finite &= isfinite(v);
    int bad = 0;   /* the first variant whose activations or outputs differ from the GGUF layout's */
    for (int v = 1; v < NV && !bad; v++) {
        CK(cudaMemcpy(av.data(), act[v], na, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(yv.data(), y[v], ny, cudaMemcpyDeviceToHost));
        if (memcmp(a0.data(), av.data(), na) || memcmp(y0.data(), yv.data(), ny)) bad = v;
    }
    static const char *differ[5] = { "", "differ", "the affine arena's differ", "the down on 44 blocks differs",
                                     "the affine down on 7 blocks differs" };
    const bool same = !rc && finite && !bad;
    report(same, what, hm_type_get(tgu)->name,
           same ? (NV > 3 ? "activations and outputs bitwise the GGUF layout's (tables and affine; the down on 44 and 7 blocks too)"
                          : "activations and outputs bitwise the GGUF layout's (tables and affine)")
           : rc ? gpu_gemv_error() : bad ? differ[bad] : "not finite");
    gpu_q8_inter_unregister(t_ig); gpu_q8_inter_unregister(t_iu); gpu_q8_inter_unregister(t_id);
    gpu_q8_inter_unregister(t_ag); gpu_q8_inter_unregister(t_au); gpu_q8_inter_unregister(t_ad);
    cudaFree(arena);
    for (int m = 0; m < 3; m++) cudaFree(atab[m]);
    for (int e = 0; e < E; e++) { cudaFree(hg[e]); cudaFree(hu[e]); cudaFree(hd[e]); cudaFree(ig[e]); cudaFree(iu[e]); cudaFree(id[e]); }
    cudaFree(tab); cudaFree(dids); cudaFree(dx);
    for (int v = 0; v < NV; v++) { cudaFree(act[v]); cudaFree(y[v]); }
}

/* A plain matrix (ncols x nrows rows: q|k|v, the o-projection, the head) interleaved with nmat 1 and
 * one slot a token, as the executor uploads them: gpu_gemv (one vector, x's records made by the
 * kernel and given by gpu_q8_records) and gpu_gemv_batch (2..5 vectors: the batched kernel and its
 * remainder) bitwise the GGUF rows' results; every output element poisoned before; gpu_dequant
 * refuses the interleaved matrix, and in mode 0 gpu_gemv refuses it instead of reading it as rows. */
/* gpu_gemv_swiglu_rows / gpu_gemv_expert_rows (the batched decode's shared expert and dense FFN):
 * nb rows of x through one expert slot, against the one-token calls (gpu_gemv_experts_swiglu_q8x
 * and gpu_gemv_experts with one slot) on each row: every activation and output bitwise equal and
 * written, in the GGUF layout and interleaved for one slot (as the executor uploads it). The tables
 * hold two experts and the id names the second. */
static void test_slot_rows(int tgu, int tdn, int H, int I, int nb) {
    char what[160];
    snprintf(what, sizeof what, "one slot, %d rows: swiglu %dx%d, down %dx%d", nb, I, H, H, I);
    const size_t rg = hm_row_size(tgu, H) * I, rd = hm_row_size(tdn, I) * H;
    /* a shape the interleaved layout does not take (rows not in whole groups: air's dense 10944) stays in
     * GGUF rows in the executor: then that layout only */
    const size_t bg0 = gpu_q8_inter_bytes(tgu, H, I, 2, 1), bd0 = gpu_q8_inter_bytes(tdn, I, H, 1, 1);
    const int nlay = bg0 && bd0 ? 2 : 1;
    const size_t bg = nlay == 2 ? bg0 : rg, bd = nlay == 2 ? bd0 : rd;
    std::vector<uint8_t> a(rg), b(rg), c(rd), j(rd), ia(bg), ib(bg), ic(bd), ij(bd);   /* j: expert 0's down */
    fill_weights(tgu, a.data(), (int64_t)I * H); fill_weights(tgu, b.data(), (int64_t)I * H);
    fill_weights(tdn, c.data(), (int64_t)H * I); fill_weights(tdn, j.data(), (int64_t)H * I);
    if (nlay == 2 && (gpu_q8_inter_pack(tgu, a.data(), H, I, 2, 1, ia.data()) || gpu_q8_inter_pack(tgu, b.data(), H, I, 2, 1, ib.data()) ||
                      gpu_q8_inter_pack(tdn, c.data(), I, H, 1, 1, ic.data()) || gpu_q8_inter_pack(tdn, j.data(), I, H, 1, 1, ij.data()))) {
        report(0, what, hm_type_get(tgu)->name, "pack");
        return;
    }
    void *ht[12] = { dev_upload(b.data(), rg), dev_upload(a.data(), rg), dev_upload(a.data(), rg), dev_upload(b.data(), rg),
                     dev_upload(j.data(), rd), dev_upload(c.data(), rd),
                     dev_upload(ib.data(), bg), dev_upload(ia.data(), bg), dev_upload(ia.data(), bg), dev_upload(ib.data(), bg),
                     dev_upload(ij.data(), bd), dev_upload(ic.data(), bd) };
    void **tab;   /* [layout][gate, up, down][2 experts]: expert 1 is the one */
    CK(cudaMalloc(&tab, sizeof ht));
    CK(cudaMemcpy(tab, ht, sizeof ht, cudaMemcpyHostToDevice));
    const void *const *T = (const void *const *)tab;
    if (nlay == 2 && (gpu_q8_inter_register(T + 6, tgu, H, I, 2, 1) || gpu_q8_inter_register(T + 8, tgu, H, I, 2, 1) ||
                      gpu_q8_inter_register(T + 10, tdn, I, H, 1, 1))) { report(0, what, hm_type_get(tgu)->name, "register"); return; }
    const int one = 1;
    int *did = (int *)dev_upload(&one, sizeof one);
    std::vector<float> x((size_t)nb * H);
    for (auto &v : x) v = rndf();
    float *dx = (float *)dev_upload(x.data(), sizeof(float) * x.size()), *act[2], *y[2];
    const size_t na = (size_t)nb * I, ny = (size_t)nb * H;
    for (int v = 0; v < 2; v++) { CK(cudaMalloc(&act[v], na * 4)); CK(cudaMalloc(&y[v], ny * 4)); }
    const size_t rstride = (gpu_q8_records_bytes(H) + 255) & ~(size_t)255;   /* the rows' records, as the executor lays them out */
    uint8_t *xq;
    CK(cudaMalloc(&xq, nb * rstride));
    int rc = 0, same = 1;
    std::vector<float> h0(ny > na ? ny : na), h1(h0.size());
    for (int lay = 0; lay < nlay && !rc; lay++) {   /* GGUF rows, interleaved */
        const void *const *tg = T + 6 * lay, *const *tu = tg + 2, *const *td = tg + 4;
        for (int v = 0; v < 2; v++) { CK(cudaMemset(act[v], 0xFF, na * 4)); CK(cudaMemset(y[v], 0xFF, ny * 4)); }
        for (int r = 0; r < nb; r++) {
            rc |= gpu_gemv_experts_swiglu_q8x(tgu, tg, tu, did, 1, dx + (size_t)r * H, NULL, act[0] + (size_t)r * I, H, I, NULL);
            rc |= gpu_gemv_experts(tdn, td, did, 1, act[0] + (size_t)r * I, y[0] + (size_t)r * H, I, H, NULL);
        }
        rc |= gpu_gemv_swiglu_rows(tgu, tg, tu, did, dx, H, nb, act[1], I, H, I, NULL, NULL, 0);
        rc |= gpu_gemv_expert_rows(tdn, td, did, act[1], I, nb, y[1], H, I, H, NULL);
        CK(cudaDeviceSynchronize());
        {   /* the gate/up again with the rows' records given: the same activations */
            CK(cudaMemcpy(h1.data(), act[1], na * 4, cudaMemcpyDeviceToHost));
            for (int r = 0; r < nb; r++) rc |= gpu_q8_records(dx + (size_t)r * H, H, xq + r * rstride, NULL);
            CK(cudaMemset(act[1], 0xFF, na * 4));
            rc |= gpu_gemv_swiglu_rows(tgu, tg, tu, did, dx, H, nb, act[1], I, H, I, NULL, xq, (int64_t)rstride);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(h0.data(), act[1], na * 4, cudaMemcpyDeviceToHost));
            same &= !memcmp(h0.data(), h1.data(), na * 4);
        }
        for (int k = 0; k < 2; k++) {
            const size_t n = k ? ny : na;
            CK(cudaMemcpy(h0.data(), k ? y[0] : act[0], n * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h1.data(), k ? y[1] : act[1], n * 4, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < n; i++) same &= isfinite(h0[i]) != 0;
            same &= !memcmp(h0.data(), h1.data(), n * 4);
        }
    }
    report(!rc && same, what, hm_type_get(tgu)->name,
           rc ? gpu_gemv_error() : !same ? "differ (or not finite)"
           : nlay == 2 ? "GGUF rows and interleaved: activations and outputs bitwise the one-token calls'"
                       : "GGUF rows (the shape is not interleaved): activations and outputs bitwise the one-token calls'");
    if (nlay == 2) { gpu_q8_inter_unregister(T + 6); gpu_q8_inter_unregister(T + 8); gpu_q8_inter_unregister(T + 10); }
    for (void *p : ht) CK(cudaFree(p));
    CK(cudaFree(tab)); CK(cudaFree(did)); CK(cudaFree(dx)); CK(cudaFree(xq));
    for (int v = 0; v < 2; v++) { CK(cudaFree(act[v])); CK(cudaFree(y[v])); }
}

static void test_inter_mat(int type, int ncols, int nrows) {
    char what[160];
    snprintf(what, sizeof what, "interleaved matrix %d x %d", nrows, ncols);
    const size_t rb = hm_row_size(type, ncols) * nrows, ib = gpu_q8_inter_bytes(type, ncols, nrows, 1, 1);
    if (!ib) { report(0, what, hm_type_get(type)->name, "gpu_q8_inter_bytes: 0"); return; }
    std::vector<uint8_t> a(rb), in(ib);
    fill_weights(type, a.data(), (int64_t)nrows * ncols);
    if (gpu_q8_inter_pack(type, a.data(), ncols, nrows, 1, 1, in.data())) { report(0, what, hm_type_get(type)->name, "pack"); return; }
    void *dw = dev_upload(a.data(), rb), *di = dev_upload(in.data(), ib);
    if (gpu_q8_inter_register((const void *const *)di, type, ncols, nrows, 1, 1)) { report(0, what, hm_type_get(type)->name, "register"); return; }
    const int NBV = 5;
    std::vector<float> x((size_t)NBV * ncols);
    for (auto &v : x) v = rndf();
    float *dx = (float *)dev_upload(x.data(), sizeof(float) * x.size()), *y[2];
    void *xq;
    CK(cudaMalloc(&xq, gpu_q8_records_bytes(ncols) + 16));
    const size_t ny = (size_t)NBV * nrows;
    for (int v = 0; v < 2; v++) CK(cudaMalloc(&y[v], sizeof(float) * ny));
    int rc = 0;
    std::vector<float> h0(ny), h1(ny);
    int same = 1;
    /* the 5 vectors' records, 256-byte aligned rows apart (gpu_gemv_batch_q8x) */
    const size_t rstride = (gpu_q8_records_bytes(ncols) + 255) & ~(size_t)255;
    uint8_t *xq5;
    CK(cudaMalloc(&xq5, NBV * rstride));
    for (int b = 0; b < NBV && !rc; b++) rc |= gpu_q8_records(dx + (size_t)b * ncols, ncols, xq5 + b * rstride, NULL);
    std::vector<float> hb(ny);
    for (int way = 0; way < 4 && !rc; way++) {   /* one vector; its records given; 5 vectors batched; 5 batched with their records */
        for (int v = 0; v < 2; v++) {
            CK(cudaMemset(y[v], 0xFF, sizeof(float) * ny));
            const void *W = v ? di : dw;
            if (way == 0) rc |= gpu_gemv(type, W, dx, y[v], ncols, nrows, NULL);
            else if (way == 1) rc |= gpu_q8_records(dx, ncols, xq, NULL) || gpu_gemv_q8x(type, W, dx, xq, y[v], ncols, nrows, NULL);
            else if (way == 2) rc |= gpu_gemv_batch(type, W, dx, ncols, y[v], nrows, NBV, ncols, nrows, NULL);
            else rc |= gpu_gemv_batch_q8x(type, W, dx, ncols, xq5, (int64_t)rstride, y[v], nrows, NBV, ncols, nrows, NULL);
        }
        CK(cudaDeviceSynchronize());
        const size_t n = way >= 2 ? ny : (size_t)nrows;
        if (way == 2) CK(cudaMemcpy(hb.data(), y[1], sizeof(float) * n, cudaMemcpyDeviceToHost));
        if (way == 3) {   /* with the records given: bitwise the batch that made its own */
            CK(cudaMemcpy(h1.data(), y[1], sizeof(float) * n, cudaMemcpyDeviceToHost));
            same &= !memcmp(hb.data(), h1.data(), sizeof(float) * n);
        }
        CK(cudaMemcpy(h0.data(), y[0], sizeof(float) * n, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h1.data(), y[1], sizeof(float) * n, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) same &= isfinite(h0[i]) != 0;
        same &= !memcmp(h0.data(), h1.data(), sizeof(float) * n);
    }
    report(!rc && same, what, hm_type_get(type)->name,
           rc ? gpu_gemv_error() : same ? "one vector, given records, 5 batched (with and without their records): bitwise the GGUF rows'"
                                        : "differ (or not finite)");
    CK(cudaFree(xq5));
    /* the refusals */
    void *dq;
    CK(cudaMalloc(&dq, sizeof(uint16_t) * (size_t)nrows * ncols));
    const int r1 = gpu_dequant(type, di, dq, (int64_t)nrows * ncols, 1, NULL);
    gpu_gemv_set_mode(0);
    const int r2 = gpu_gemv(type, di, dx, y[1], ncols, nrows, NULL);
    gpu_gemv_set_mode(1);
    report(r1 && r2, what, hm_type_get(type)->name, r1 && r2 ? "gpu_dequant and the mode-0 GEMV refuse it" : "not refused");
    gpu_q8_inter_unregister((const void *const *)di);
    cudaFree(dq); cudaFree(dw); cudaFree(di); cudaFree(dx); cudaFree(xq); cudaFree(y[0]); cudaFree(y[1]);
}

/* The head's units by ticket (gpu_q8_head_tk, HOTMOE_HEAD_TK set by gpu_q8_set_head_tk): an
 * interleaved matrix of nrows rows, x by gpu_gemv_q8x at each unit size, twice in a row (the second
 * launch finds the counters the first one zeroed, which is checked after each), every output
 * poisoned before: bitwise the indexed kernel's rows. */
static void test_head_tk(int type, int ncols, int nrows) {
    char what[160];
    snprintf(what, sizeof what, "head %d x %d, units by ticket", nrows, ncols);
    const size_t ib = gpu_q8_inter_bytes(type, ncols, nrows, 1, 1), rb = hm_row_size(type, ncols) * nrows;
    if (!ib) { report(0, what, hm_type_get(type)->name, "gpu_q8_inter_bytes: 0"); return; }
    std::vector<uint8_t> a(rb), in(ib);
    fill_weights(type, a.data(), (int64_t)nrows * ncols);
    if (gpu_q8_inter_pack(type, a.data(), ncols, nrows, 1, 1, in.data())) { report(0, what, hm_type_get(type)->name, "pack"); return; }
    std::vector<uint8_t>().swap(a);
    void *di = dev_upload(in.data(), ib);
    std::vector<uint8_t>().swap(in);
    if (gpu_q8_inter_register((const void *const *)di, type, ncols, nrows, 1, 1)) { report(0, what, hm_type_get(type)->name, "register"); return; }
    std::vector<float> x(ncols);
    for (auto &v : x) v = rndf();
    float *dx = (float *)dev_upload(x.data(), sizeof(float) * ncols), *y;
    void *xq;
    CK(cudaMalloc(&xq, gpu_q8_records_bytes(ncols) + 16));
    CK(cudaMalloc(&y, sizeof(float) * nrows));
    unsigned *ctr, hc[2];
    CK(cudaMalloc(&ctr, sizeof hc));
    CK(cudaMemset(ctr, 0, sizeof hc));
    std::vector<float> want(nrows), got(nrows);
    int rc = gpu_q8_records(dx, ncols, xq, NULL), bad = 0;
    char msg[200] = "";
    const int steps[] = { 0, 1, 3, 4, 64 };
    for (int si = 0; si < 5 && !rc && !bad; si++) {
        gpu_q8_set_head_tk(steps[si]);
        for (int rep = 0; rep < 2 && !rc && !bad; rep++) {
            CK(cudaMemset(y, 0xFF, sizeof(float) * nrows));
            const long n0 = gpu_q8_tk_launches();
            gpu_q8_head_tk(si ? ctr : NULL);
            rc = gpu_gemv_q8x(type, di, dx, xq, y, ncols, nrows, NULL);
            gpu_q8_head_tk(NULL);
            if (!rc && gpu_q8_tk_launches() - n0 != (si ? 1 : 0)) {
                bad = 1;
                snprintf(msg, sizeof msg, "%d steps a unit: %ld launches by ticket, expected %d", steps[si], gpu_q8_tk_launches() - n0, si ? 1 : 0);
            }
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(hc, ctr, sizeof hc, cudaMemcpyDeviceToHost));
            if (hc[0] || hc[1]) { bad = 1; snprintf(msg, sizeof msg, "%d steps a unit: counters %u, %u left after launch %d", steps[si], hc[0], hc[1], rep + 1); }
            CK(cudaMemcpy(si ? got.data() : want.data(), y, sizeof(float) * nrows, cudaMemcpyDeviceToHost));
            if (!si) {
                for (int r = 0; r < nrows && !bad; r++)
                    if (!isfinite(want[r])) { bad = 1; snprintf(msg, sizeof msg, "indexed: row %d not written (%g)", r, want[r]); }
                continue;
            }
            for (int r = 0; r < nrows && !bad; r++)
                if (memcmp(&got[r], &want[r], 4)) {
                    bad = 1;
                    snprintf(msg, sizeof msg, "%d steps a unit, launch %d: row %d: %.9g, indexed %.9g", steps[si], rep + 1, r, got[r], want[r]);
                }
        }
    }
    gpu_q8_set_head_tk(-1);
    report(!rc && !bad, what, hm_type_get(type)->name,
           rc ? gpu_gemv_error() : bad ? msg : "1, 3, 4 and 64 steps a unit, two launches each: bitwise the indexed kernel's rows");
    gpu_q8_inter_unregister((const void *const *)di);
    CK(cudaFree(di)); CK(cudaFree(dx)); CK(cudaFree(xq)); CK(cudaFree(y)); CK(cudaFree(ctr));
}

/* The q/k/v post in the GEMVs' epilogues (gpu_gemv_q8x_post, HOTMOE_QK_EPI): an interleaved q|k
 * matrix (rows0 q rows, heads of hd, n_rot rotated dims) and a v matrix, each x by its launch with
 * the bias, the rotation at pos and the cache rows written there, against gpu_gemv_q8x then
 * op_qkv_post: q, the k and v cache rows bitwise, every other cache row left as it was (poisoned). */
/* pair: both launches between gpu_q8_pair_begin and gpu_q8_pair_end, which must answer pair - 1
 * (2: they went out as one launch; 1: not a pairable pair of types, each alone, the parked one by
 * gpu_q8_pair_end) */
static void test_post_epi(int tqk, int tv, int ncols, int n_head, int n_kv, int hd, int n_rot, int pos, int bias = 1, int pair = 0) {
    char what[160];
    snprintf(what, sizeof what, "q/k/v post in the epilogue%s: %d/%d heads of %d, %d rotated, pos %d%s",
             pair == 2 ? ", q|k and v in one launch" : pair == 1 ? ", not paired" : "", n_head, n_kv, hd, n_rot, pos, bias ? "" : ", no biases");
    const int rows0 = n_head * hd, kvd = n_kv * hd, nqk = rows0 + kvd, n_ctx = pos + 2;
    void *W[2];
    const int types[2] = { tqk, tv }, rows[2] = { nqk, kvd };
    for (int m = 0; m < 2; m++) {
        const size_t rb = hm_row_size(types[m], ncols) * rows[m], ib = gpu_q8_inter_bytes(types[m], ncols, rows[m], 1, 1);
        if (!ib) { report(0, what, hm_type_get(types[m])->name, "gpu_q8_inter_bytes: 0"); return; }
        std::vector<uint8_t> a(rb), in(ib);
        fill_weights(types[m], a.data(), (int64_t)rows[m] * ncols);
        if (gpu_q8_inter_pack(types[m], a.data(), ncols, rows[m], 1, 1, in.data())) { report(0, what, "", "pack"); return; }
        W[m] = dev_upload(in.data(), ib);
        if (gpu_q8_inter_register((const void *const *)W[m], types[m], ncols, rows[m], 1, 1)) { report(0, what, "", "register"); return; }
    }
    std::vector<float> x(ncols), bq(rows0), bk(kvd), bv(kvd);
    for (auto &v : x) v = rndf();
    for (auto &v : bq) v = rndf() * 0.3f;
    for (auto &v : bk) v = rndf() * 0.3f;
    for (auto &v : bv) v = rndf() * 0.3f;
    float *dx = (float *)dev_upload(x.data(), sizeof(float) * ncols), *dbq = (float *)dev_upload(bq.data(), sizeof(float) * rows0);
    float *dbk = (float *)dev_upload(bk.data(), sizeof(float) * kvd), *dbv = (float *)dev_upload(bv.data(), sizeof(float) * kvd);
    void *xq;
    CK(cudaMalloc(&xq, gpu_q8_records_bytes(ncols)));
    int *dpos = (int *)dev_upload(&pos, sizeof(int));
    float *yqk, *yv, *q2, *kc[2], *vc[2];
    const size_t cn = (size_t)n_ctx * kvd;
    CK(cudaMalloc(&yqk, sizeof(float) * nqk)); CK(cudaMalloc(&yv, sizeof(float) * kvd)); CK(cudaMalloc(&q2, sizeof(float) * rows0));
    for (int v = 0; v < 2; v++) {
        CK(cudaMalloc(&kc[v], sizeof(float) * cn)); CK(cudaMalloc(&vc[v], sizeof(float) * cn));
        CK(cudaMemset(kc[v], 0xFF, sizeof(float) * cn)); CK(cudaMemset(vc[v], 0xFF, sizeof(float) * cn));
    }
    CK(cudaMemset(q2, 0xFF, sizeof(float) * rows0));
    int rc = gpu_q8_records(dx, ncols, xq, NULL);
    rc |= gpu_gemv_q8x(tqk, W[0], dx, xq, yqk, ncols, nqk, NULL) || gpu_gemv_q8x(tv, W[1], dx, xq, yv, ncols, kvd, NULL);
    const float *pbq = bias ? dbq : NULL, *pbk = bias ? dbk : NULL, *pbv = bias ? dbv : NULL;
    op_qkv_post(yqk, yqk + rows0, yv, pbq, pbk, pbv, NULL, NULL, n_head, n_kv, hd, n_rot, 10000.0f, 1e-6f, dpos, kc[0], vc[0], 0);
    const int ok0 = gpu_gemv_q8x_post_ok(tqk, W[0], ncols, nqk, rows0, hd, n_rot), ok1 = gpu_gemv_q8x_post_ok(tv, W[1], ncols, kvd, 0, hd, 0);
    if (pair) gpu_q8_pair_begin();
    const int r0 = gpu_gemv_q8x_post(tqk, W[0], dx, xq, ncols, nqk, pbq, pbk, q2, kc[1], rows0, hd, n_rot, 10000.0f, kvd, dpos, NULL);
    const int r1 = gpu_gemv_q8x_post(tv, W[1], dx, xq, ncols, kvd, NULL, pbv, NULL, vc[1], 0, hd, 0, 10000.0f, kvd, dpos, NULL);
    const int pe = pair ? gpu_q8_pair_end(NULL) : -2;
    CK(cudaDeviceSynchronize());
    std::vector<float> a(rows0), b(rows0), k0(cn), k1(cn), v0(cn), v1(cn);
    CK(cudaMemcpy(a.data(), yqk, sizeof(float) * rows0, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(b.data(), q2, sizeof(float) * rows0, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(k0.data(), kc[0], sizeof(float) * cn, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(k1.data(), kc[1], sizeof(float) * cn, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(v0.data(), vc[0], sizeof(float) * cn, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(v1.data(), vc[1], sizeof(float) * cn, cudaMemcpyDeviceToHost));
    int finite = 1;
    for (int i = 0; i < rows0; i++) finite &= isfinite(a[i]) != 0;
    for (int i = 0; i < kvd; i++) finite &= isfinite(k0[(size_t)pos * kvd + i]) && isfinite(v0[(size_t)pos * kvd + i]);
    const int same = finite && !memcmp(a.data(), b.data(), sizeof(float) * rows0) && !memcmp(k0.data(), k1.data(), sizeof(float) * cn) &&
                     !memcmp(v0.data(), v1.data(), sizeof(float) * cn);
    char detail[200];
    snprintf(detail, sizeof detail, "%s (taken %d/%d, rc %d/%d/%d, pair end %d)",
             same ? "q, the k and v cache bitwise the GEMV + op_qkv_post's, other rows untouched" : "differ", ok0, ok1, rc, r0, r1, pe);
    report(!rc && ok0 && ok1 && !r0 && !r1 && same && (!pair || pe == pair - 1), what, hm_type_get(tqk)->name, detail);
    for (int m = 0; m < 2; m++) gpu_q8_inter_unregister((const void *const *)W[m]);
    cudaFree(W[0]); cudaFree(W[1]); cudaFree(dx); cudaFree(dbq); cudaFree(dbk); cudaFree(dbv); cudaFree(xq); cudaFree(dpos);
    cudaFree(yqk); cudaFree(yv); cudaFree(q2);
    for (int v = 0; v < 2; v++) { cudaFree(kc[v]); cudaFree(vc[v]); }
}

/* gpu_gemv_q8x_post refuses what its epilogue cannot do: GGUF rows (not interleaved), a matrix of
 * more than one round of blocks (its rows for any lane count past the SMs' two blocks each) */
static void test_post_epi_refusals(void) {
    const char *what = "q/k/v post in the epilogue: refusals";
    const int ncols = 4096, tall = 262144;   /* 4 rounds of 256-row blocks at least */
    const size_t rb = hm_row_size(HM_TYPE_Q6_K, ncols) * tall, ib = gpu_q8_inter_bytes(HM_TYPE_Q6_K, ncols, tall, 1, 1);
    void *dw, *di;
    CK(cudaMalloc(&dw, rb)); CK(cudaMemset(dw, 0x11, rb));
    CK(cudaMalloc(&di, ib)); CK(cudaMemset(di, 0x11, ib));
    const int reg = ib && !gpu_q8_inter_register((const void *const *)di, HM_TYPE_Q6_K, ncols, tall, 1, 1);
    const int gguf = gpu_gemv_q8x_post_ok(HM_TYPE_Q6_K, dw, ncols, 1024, 0, 128, 0);
    const int rounds = gpu_gemv_q8x_post_ok(HM_TYPE_Q6_K, di, ncols, tall, 0, 128, 0);
    report(reg && !gguf && !rounds, what, "Q6_K", reg ? (!gguf && !rounds ? "GGUF rows and a 262144-row matrix not taken" : "taken") : "register");
    if (reg) gpu_q8_inter_unregister((const void *const *)di);
    cudaFree(dw); cudaFree(di);
}

/* The routed gate/up launch (gpu_gemv_experts_swiglu_routed: the router's top-k inside the GEMV's
 * blocks): for random router logits (sigmoid with a selection bias and a scale, softmax normed and
 * not, logits on a coarse grid so that ties occur), the ids and weights it stores are op_router's,
 * each bitwise, and its activations bitwise gpu_gemv_experts_swiglu_q8x's with those ids (every
 * output poisoned before); the refusals (k > 64, more than 256 experts). */
static void test_routed(int type, int H, int I, int E, int k) {
    char what[160];
    snprintf(what, sizeof what, "routed gate/up %dx%d, top-%d of %d", I, H, k, E);
    const size_t rg = hm_row_size(type, H) * I;
    std::vector<void *> hg(E), hu(E), ig(E), iu(E);
    std::vector<uint8_t> a(rg);
    /* the same experts interleaved too (as the executor uploads resident ones) */
    const size_t ib = gpu_q8_inter_bytes(type, H, I, 2, k);
    std::vector<uint8_t> pk(ib ? ib : 1);
    for (int e = 0; e < E; e++)
        for (int m = 0; m < 2; m++) {
            fill_weights(type, a.data(), (int64_t)I * H);
            (m ? hu : hg)[e] = dev_upload(a.data(), rg);
            if (ib && !gpu_q8_inter_pack(type, a.data(), H, I, 2, k, pk.data())) (m ? iu : ig)[e] = dev_upload(pk.data(), ib);
            else (m ? iu : ig)[e] = NULL;
        }
    const void **tg = (const void **)dev_upload(hg.data(), E * sizeof(void *)), **tu = (const void **)dev_upload(hu.data(), E * sizeof(void *));
    const void **itg = (const void **)dev_upload(ig.data(), E * sizeof(void *)), **itu = (const void **)dev_upload(iu.data(), E * sizeof(void *));
    const int inter = ib && ig[0] && !gpu_q8_inter_register(itg, type, H, I, 2, k) && !gpu_q8_inter_register(itu, type, H, I, 2, k);
    /* and in one arena at a fixed stride (gate | up), read affine (HOTMOE_AFFINE), with tables that
     * name the next expert's matrices: a launch that read a table would give other activations */
    uint8_t *arena = NULL;
    const void **atg = NULL, **atu = NULL;
    int affine = 0;
    if (inter) {
        void *const *asrc[2] = { ig.data(), iu.data() };
        const size_t abytes[2] = { ib, ib };
        size_t ast, off[2];
        void **atab[2];
        arena = affine_arena(E, 2, asrc, abytes, &ast, off, atab);
        atg = (const void **)atab[0]; atu = (const void **)atab[1];
        affine = !gpu_q8_inter_register(atg, type, H, I, 2, k) && !gpu_q8_inter_register(atu, type, H, I, 2, k) &&
                 !gpu_q8_inter_affine(atg, arena + off[0], (int64_t)ast) && !gpu_q8_inter_affine(atu, arena + off[1], (int64_t)ast);
    }
    const int affine0 = gpu_q8_affine();
    std::vector<float> x(H), lg(E), bias(E);
    for (auto &v : x) v = rndf();
    float *dx = (float *)dev_upload(x.data(), sizeof(float) * H), *dlog, *dbias, *act[2], *w[2];
    int *ids[2];
    CK(cudaMalloc(&dlog, sizeof(float) * E)); CK(cudaMalloc(&dbias, sizeof(float) * E));
    void *xq;
    CK(cudaMalloc(&xq, gpu_q8_records_bytes(H)));
    for (int v = 0; v < 2; v++) {
        CK(cudaMalloc(&act[v], sizeof(float) * k * I)); CK(cudaMalloc(&w[v], sizeof(float) * k)); CK(cudaMalloc(&ids[v], sizeof(int) * k));
    }
    static const struct { int fn, norm, bias, ties; float scale; } cf[] = {
        { 2, 1, 1, 0, 2.5f }, { 1, 1, 0, 0, 1.f }, { 1, 0, 0, 1, 1.f }, { 2, 0, 1, 1, 1.f },
    };
    int ok = 1;
    char detail[200] = "";
    for (const auto &c : cf) {
        for (int i = 0; i < E; i++) {
            lg[i] = c.ties ? (float)((int)(rndf() * 4.f)) * 0.25f : rndf() * 4.f;
            bias[i] = rndf() * 0.5f;
        }
        CK(cudaMemcpy(dlog, lg.data(), sizeof(float) * E, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dbias, bias.data(), sizeof(float) * E, cudaMemcpyHostToDevice));
        for (int v = 0; v < 2; v++) {
            CK(cudaMemset(act[v], 0xFF, sizeof(float) * k * I)); CK(cudaMemset(w[v], 0xFF, sizeof(float) * k));
            CK(cudaMemset(ids[v], 0xFF, sizeof(int) * k));
        }
        const float *b = c.bias ? dbias : NULL;
        op_router(dlog, b, E, k, c.fn, c.norm, c.scale, 1, 1, ids[0], w[0], 0);
        int rc = gpu_gemv_experts_swiglu_q8x(type, tg, tu, ids[0], k, dx, NULL, act[0], H, I, NULL);
        rc |= gpu_gemv_experts_swiglu_routed(type, tg, tu, dlog, b, E, c.fn, c.norm, c.scale, ids[1], w[1], k, dx, NULL, act[1], H, I, 0, NULL);
        CK(cudaDeviceSynchronize());
        std::vector<float> a0(k * I), a1(k * I), w0(k), w1(k);
        std::vector<int> i0(k), i1(k);
        CK(cudaMemcpy(a0.data(), act[0], sizeof(float) * k * I, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(a1.data(), act[1], sizeof(float) * k * I, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(w0.data(), w[0], sizeof(float) * k, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(w1.data(), w[1], sizeof(float) * k, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(i0.data(), ids[0], sizeof(int) * k, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(i1.data(), ids[1], sizeof(int) * k, cudaMemcpyDeviceToHost));
        /* x's records given and copied before the launch's wait (xq_ready, as the executor
         * passes them after the router GEMV): the same activations */
        std::vector<float> a2(k * I);
        CK(cudaMemset(act[1], 0xFF, sizeof(float) * k * I));
        rc |= gpu_q8_records(dx, H, xq, NULL);
        CK(cudaDeviceSynchronize());   /* the contract: complete before the previous kernel's wait */
        rc |= gpu_gemv_experts_swiglu_routed(type, tg, tu, dlog, b, E, c.fn, c.norm, c.scale, ids[1], w[1], k, dx, xq, act[1], H, I, 1, NULL);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(a2.data(), act[1], sizeof(float) * k * I, cudaMemcpyDeviceToHost));
        /* the interleaved experts: the same ids, weights and activations */
        std::vector<float> a3(a0), w3(w0);
        std::vector<int> i3(i0);
        if (inter) {
            CK(cudaMemset(act[1], 0xFF, sizeof(float) * k * I)); CK(cudaMemset(w[1], 0xFF, sizeof(float) * k));
            CK(cudaMemset(ids[1], 0xFF, sizeof(int) * k));
            rc |= gpu_gemv_experts_swiglu_routed(type, itg, itu, dlog, b, E, c.fn, c.norm, c.scale, ids[1], w[1], k, dx, NULL, act[1], H, I, 0,
                                                 NULL);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(a3.data(), act[1], sizeof(float) * k * I, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(w3.data(), w[1], sizeof(float) * k, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(i3.data(), ids[1], sizeof(int) * k, cudaMemcpyDeviceToHost));
        }
        /* the arena read affine */
        std::vector<float> a4(a0), w4(w0);
        std::vector<int> i4(i0);
        if (inter) {
            CK(cudaMemset(act[1], 0xFF, sizeof(float) * k * I)); CK(cudaMemset(w[1], 0xFF, sizeof(float) * k));
            CK(cudaMemset(ids[1], 0xFF, sizeof(int) * k));
            gpu_q8_affine_set(1);
            rc |= !affine || gpu_gemv_experts_swiglu_routed(type, (const void *const *)atg, (const void *const *)atu, dlog, b, E, c.fn, c.norm,
                                                            c.scale, ids[1], w[1], k, dx, NULL, act[1], H, I, 0, NULL);
            gpu_q8_affine_set(affine0);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(a4.data(), act[1], sizeof(float) * k * I, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(w4.data(), w[1], sizeof(float) * k, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(i4.data(), ids[1], sizeof(int) * k, cudaMemcpyDeviceToHost));
        }
        int finite = 1;
        for (float f : a0) finite &= isfinite(f) != 0;
        const int same = !rc && finite && i0 == i1 && !memcmp(w0.data(), w1.data(), sizeof(float) * k) &&
                         !memcmp(a0.data(), a1.data(), sizeof(float) * k * I) && !memcmp(a0.data(), a2.data(), sizeof(float) * k * I) &&
                         i0 == i3 && !memcmp(w0.data(), w3.data(), sizeof(float) * k) && !memcmp(a0.data(), a3.data(), sizeof(float) * k * I) &&
                         i0 == i4 && !memcmp(w0.data(), w4.data(), sizeof(float) * k) && !memcmp(a0.data(), a4.data(), sizeof(float) * k * I);
        if (!same && ok)
            snprintf(detail, sizeof detail, "fn %d norm %d bias %d ties %d: %s (ids %d/%d %d/%d)", c.fn, c.norm, c.bias, c.ties,
                     rc ? gpu_gemv_error() : "differ", i0[0], i1[0], i0[k - 1], i1[k - 1]);
        ok &= same;
    }
    if (ok)
        snprintf(detail, sizeof detail, "ids, weights and activations bitwise op_router + the GEMV's (4 settings; x's records given "
                 "before the wait too%s)", inter ? "; interleaved experts too, by table and affine" : "");
    report(ok, what, hm_type_get(type)->name, detail);
    const int r1 = gpu_gemv_experts_swiglu_routed(type, tg, tu, dlog, NULL, E, 2, 1, 1.f, ids[1], w[1], 65, dx, NULL, act[1], H, I, 0, NULL);
    const int r2 = gpu_gemv_experts_swiglu_routed(type, tg, tu, dlog, NULL, 257, 2, 1, 1.f, ids[1], w[1], k, dx, NULL, act[1], H, I, 0, NULL);
    report(r1 && r2 && !gpu_gemv_experts_routed_ok(type, H, 257, k), what, hm_type_get(type)->name,
           r1 && r2 ? "65 slots and 257 experts refused" : "not refused");
    gpu_q8_inter_unregister(itg); gpu_q8_inter_unregister(itu);   /* no-ops when not registered */
    if (atg) { gpu_q8_inter_unregister(atg); gpu_q8_inter_unregister(atu); cudaFree((void *)atg); cudaFree((void *)atu); cudaFree(arena); }
    for (int e = 0; e < E; e++) { cudaFree(hg[e]); cudaFree(hu[e]); if (ig[e]) cudaFree(ig[e]); if (iu[e]) cudaFree(iu[e]); }
    cudaFree((void *)tg); cudaFree((void *)tu); cudaFree((void *)itg); cudaFree((void *)itu); cudaFree(dx); cudaFree(dlog); cudaFree(dbias); cudaFree(xq);
    for (int v = 0; v < 2; v++) { cudaFree(act[v]); cudaFree(w[v]); cudaFree(ids[v]); }
}

/* The router's F32 GEMV (few rows, one a block): gpu_gemv, gpu_gemv_router with and without its
 * early trigger, and the same matrix through a one-entry expert table give bitwise the same
 * outputs. Checked against the CPU's sums too; outputs poisoned before each call. */
static void test_router_f32(int nrows, int ncols) {
    char what[120], msg[256] = "";
    snprintf(what, sizeof what, "router F32 %dx%d: gpu_gemv, gpu_gemv_router (early 0/1) bitwise the table path", nrows, ncols);
    const size_t rs = hm_row_size(HM_TYPE_F32, ncols);
    std::vector<float> W((size_t)nrows * ncols), x(ncols), y[4];
    fill_weights(HM_TYPE_F32, W.data(), (int64_t)nrows * ncols);
    for (auto &v : x) v = rndf();
    std::vector<double> ref(nrows), tol(nrows);
    ref_gemv(HM_TYPE_F32, W.data(), x.data(), ncols, nrows, ref.data(), tol.data());
    for (auto &v : tol) v = 1e-4 * v + 1e-30;
    void *dW = dev_upload(W.data(), rs * nrows);
    float *dx = (float *)dev_upload(x.data(), sizeof(float) * ncols), *dy;
    const int zero = 0;
    int *did = (int *)dev_upload(&zero, sizeof zero);
    void **tab = (void **)dev_upload(&dW, sizeof dW);
    CK(cudaMalloc(&dy, sizeof(float) * nrows));
    int bad = 0;
    for (int v = 0; v < 4 && !bad; v++) {
        CK(cudaMemset(dy, 0xFF, sizeof(float) * nrows));
        const int rc = v == 0 ? gpu_gemv(HM_TYPE_F32, dW, dx, dy, ncols, nrows, NULL)
                     : v < 3  ? gpu_gemv_router(HM_TYPE_F32, dW, dx, NULL, dy, ncols, nrows, v - 1, NULL)
                              : gpu_gemv_experts(HM_TYPE_F32, (const void *const *)tab, did, 1, dx, dy, ncols, nrows, NULL);
        if (rc) { bad = 1; snprintf(msg, sizeof msg, "call %d returned -1: %s", v, gpu_gemv_error()); break; }
        CK(cudaDeviceSynchronize());
        y[v].resize(nrows);
        CK(cudaMemcpy(y[v].data(), dy, sizeof(float) * nrows, cudaMemcpyDeviceToHost));
    }
    if (!bad) {
        const int nb = compare(y[3].data(), ref.data(), tol.data(), nrows, msg, sizeof msg);
        if (nb) bad = 1;
        for (int v = 0; v < 3 && !bad; v++)
            for (int r = 0; r < nrows; r++)
                if (memcmp(&y[v][r], &y[3][r], sizeof(float))) {
                    bad = 1;
                    snprintf(msg, sizeof msg, "call %d row %d: %.9g, the table path %.9g", v, r, y[v][r], y[3][r]);
                    break;
                }
    }
    report(!bad, what, "F32", msg);
    CK(cudaFree(dW)); CK(cudaFree(dx)); CK(cudaFree(dy)); CK(cudaFree(did)); CK(cudaFree(tab));
}

int main(int argc, char **argv) {
    int ndev = 0;
    const cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device (%s)\n", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s, sm_%d%d\n", prop.name, prop.major, prop.minor);
    if (gpu_gemv_set_mode(0)) return 1; /* whatever HOTMOE_GEMV_MODE says: mode 0 first */
    if (argc > 1 && !strcmp(argv[1], "--bench-xq")) return bench_xq();
    if (argc > 1 && !strcmp(argv[1], "--bench-air")) return bench_air();
    if (argc > 1 && !strcmp(argv[1], "--bench-moe")) return bench_moe_air();
    if (argc > 1 && !strcmp(argv[1], "--bench-nb")) return bench_nb();
    if (argc > 1 && !strcmp(argv[1], "--bench")) return bench(argc > 2 ? atoi(argv[2]) : -1, argc > 3 ? argv[3] : NULL); /* --bench [mode [type]] */

    for (int i = 0; i < NTYPES; i++) {
        const int t = k_types[i];
        test_gemv(t);
        test_batch(t);
        test_experts(t, 512);
        if (is_float_type(t)) test_experts(t, 515); /* the scalar path */
        test_dequant(t);
        test_embed_row(t);
    }
    test_errors();
    test_router_f32(128, 4096);   /* air's router */
    test_router_f32(128, 2048);   /* a3b's */
    test_router_f32(160, 5120);   /* GLM-4.6's */
    test_router_f32(256, 7168);   /* DeepSeek's */
    test_router_f32(60, 8200);    /* 1025 parts of 8 floats */
    test_router_f32(7, 24);       /* fewer parts than a warp */

    /* mode 1: the block types again through the q8 path (and its fallbacks) */
    if (gpu_gemv_set_mode(1)) { printf("FAIL gpu_gemv_set_mode(1): %s\n", gpu_gemv_error()); return 1; }
    g_q8 = 1;
    for (int i = 0; i < NTYPES; i++) {
        const int t = k_types[i];
        if (is_float_type(t)) continue;
        test_gemv(t);
        test_batch(t);
        test_experts(t, 512);
        test_experts(t, 2048, 768); /* Qwen3-30B-A3B's expert shapes (fewer rows) */
        if (hm_type_get(t)->blck == 32) test_experts(t, 1408, 1408); /* GLM-4.5-Air's: partial chunks */
        test_q8(t);
        test_q8x(t);
    }
    test_tokens(HM_TYPE_Q3_K, HM_TYPE_Q4_0, 4096, 1408, 8, 3);   /* air's experts */
    test_tokens(HM_TYPE_Q4_K, HM_TYPE_Q6_K, 2048, 768, 8, 4);    /* a3b's */
    test_inter(HM_TYPE_Q3_K, HM_TYPE_Q4_0, 4096, 1408, 8, 1);    /* air's routed experts */
    test_inter(HM_TYPE_Q3_K, HM_TYPE_Q4_0, 4096, 1408, 8, 3);    /* three tokens' slots at once */
    test_inter(HM_TYPE_Q4_K, HM_TYPE_Q4_0, 4096, 1408, 1, 1);    /* air's shared expert: empty chunk slots */
    test_inter(HM_TYPE_Q4_K, HM_TYPE_Q6_K, 2048, 768, 8, 1);     /* a3b's */
    test_inter(HM_TYPE_Q5_K, HM_TYPE_Q8_0, 2048, 768, 8, 2);
    for (int nb : { 2, 3, 4, 5 }) test_slot_rows(HM_TYPE_Q4_K, HM_TYPE_Q4_0, 4096, 1408, nb);   /* air's shared expert (5: 4 + 1) */
    test_slot_rows(HM_TYPE_Q4_K, HM_TYPE_Q4_0, 4096, 10944, 4);   /* air's dense layer (its down Q4_0: rows of 10944) */
    test_slot_rows(HM_TYPE_Q6_K, HM_TYPE_Q8_0, 2048, 768, 3);
    test_inter_mat(HM_TYPE_Q4_K, 4096, 13312);    /* air's q|k */
    test_inter_mat(HM_TYPE_Q6_K, 4096, 1024);     /* air's v */
    test_inter_mat(HM_TYPE_Q4_K, 12288, 4096);    /* air's o-projection */
    test_inter_mat(HM_TYPE_Q6_K, 4096, 65536);    /* a head's rows (tall) */
    test_head_tk(HM_TYPE_Q6_K, 4096, 151552);     /* air's head, its units by ticket */
    test_head_tk(HM_TYPE_Q6_K, 4096, 70000);      /* a partial last unit at 3 and 64 steps */
    test_inter_mat(HM_TYPE_Q4_K, 2048, 4608);     /* a3b's q|k */
    test_inter_mat(HM_TYPE_Q6_K, 2048, 512);      /* a3b's v */
    test_inter_mat(HM_TYPE_Q4_0, 1408, 4096);     /* a partial last chunk */
    test_inter_mat(HM_TYPE_Q8_0, 4096, 1024);
    test_inter_mat(HM_TYPE_Q5_K, 4096, 2048);
    test_inter_mat(HM_TYPE_Q3_K, 4096, 2048);
    test_post_epi(HM_TYPE_Q4_K, HM_TYPE_Q6_K, 4096, 96, 8, 128, 64, 300);   /* air's q|k and v */
    test_post_epi(HM_TYPE_Q4_K, HM_TYPE_Q6_K, 4096, 96, 8, 128, 64, 0);
    test_post_epi(HM_TYPE_Q4_K, HM_TYPE_Q6_K, 4096, 96, 8, 128, 32, 4095);   /* a quarter rotated, a far position */
    test_post_epi(HM_TYPE_Q4_K, HM_TYPE_Q6_K, 4096, 96, 8, 128, 64, 77, 0);   /* no biases: nothing added */
    test_post_epi(HM_TYPE_Q4_K, HM_TYPE_Q6_K, 4096, 96, 8, 128, 64, 300, 1, 2);   /* air's, in one launch (HOTMOE_QKV_PAIR) */
    test_post_epi(HM_TYPE_Q4_K, HM_TYPE_Q6_K, 4096, 96, 8, 128, 32, 4095, 0, 2);
    test_post_epi(HM_TYPE_Q5_K, HM_TYPE_Q6_K, 2048, 32, 4, 128, 32, 41, 1, 2);    /* the other pairable q|k type */
    test_post_epi(HM_TYPE_Q6_K, HM_TYPE_Q6_K, 4096, 96, 8, 128, 64, 300, 1, 1);   /* q|k of a type that is not paired */
    test_post_epi(HM_TYPE_Q4_K, HM_TYPE_Q4_K, 4096, 96, 8, 128, 64, 300, 1, 1);   /* q|k parked, v not Q6_K: q|k launched alone at the end */
    test_post_epi_refusals();
    test_routed(HM_TYPE_Q3_K, 4096, 1408, 128, 8);   /* air's routed experts */
    test_routed(HM_TYPE_Q4_K, 2048, 768, 128, 8);    /* a3b's */
    test_routed(HM_TYPE_Q8_0, 512, 96, 60, 4);
    test_routed(HM_TYPE_Q4_0, 1408, 64, 256, 16);
    g_q8 = 0;
    gpu_gemv_set_mode(0);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
