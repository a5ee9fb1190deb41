/* test_gpu_ops.cu - every small op of the GPU forward pass (gpu/ops.cu) against its CPU
 * reference (cpu/kernels.c, cpu/router.c): random inputs, odd sizes, outputs poisoned (NaN)
 * before each launch, every element checked. Exits 77 (skipped) without a CUDA device. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "ops.cuh"
#include "gpu_gemv.h"
extern "C" {
#include "cpu.h"
#include "quant.h"
#include "quant_blocks.h"
#include "router.h"
#include "sampler.h"
}
#include "gemv_q8_ref.h"
#include "fnv.h"

static int n_pass, n_fail;
static uint64_t rng = 88172645463325252ull;
static float frand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1; }
static void fill(float *x, size_t n, float s) { for (size_t i = 0; i < n; i++) x[i] = s * frand(); }

static float *dup(const float *h, size_t n) {
    float *d; cudaMalloc(&d, n * sizeof(float)); cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice); return d;
}
static float *poisoned(size_t n) { float *d; cudaMalloc(&d, n * sizeof(float)); cudaMemset(d, 0xFF, n * sizeof(float)); return d; }
static void back(float *h, const float *d, size_t n) { cudaDeviceSynchronize(); cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost); }

/* every element within rel * max|ref| (+ a tiny absolute floor) */
static void check(const char *what, const float *got, const float *ref, size_t n, double rel) {
    double mr = 1e-30, md = 0; size_t bad = 0;
    for (size_t i = 0; i < n; i++) if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= rel * mr + 1e-30)) bad++;
        if (!(d <= md)) md = d;
    }
    printf("%s %s: %zu elements, max rel err %.3g%s\n", bad ? "FAIL" : "PASS", what, n, md / mr, bad ? " (elements out of tolerance or NaN)" : "");
    bad ? n_fail++ : n_pass++;
}

static hm_tensor vec_tensor(const float *data, int n) {
    hm_tensor t; memset(&t, 0, sizeof t);
    t.type = HM_TYPE_F32; t.n_dims = 1; t.ne[0] = n; t.ne[1] = t.ne[2] = t.ne[3] = 1; t.data = data; t.nbytes = (size_t)n * 4;
    return t;
}

static void test_rmsnorm(int n) {
    float *x = (float *)malloc(n * 4), *w = (float *)malloc(n * 4), *ref = (float *)malloc(n * 4), *got = (float *)malloc(n * 4);
    fill(x, n, 3); fill(w, n, 1);
    hm_tensor wt = vec_tensor(w, n);
    cpu_rmsnorm(ref, x, &wt, n, 1e-6f);
    float *dx = dup(x, n), *dw = dup(w, n), *dy = poisoned(n);
    op_rmsnorm(dx, dw, dy, n, 1e-6f, 0);
    back(got, dy, n);
    char what[64]; snprintf(what, sizeof what, "rmsnorm n=%d", n);
    check(what, got, ref, n, 1e-5);
    cudaFree(dx); cudaFree(dw); cudaFree(dy); free(x); free(w); free(ref); free(got);
}

static void test_residual_norm(int n, int k, int with_shared, int with_norm) {
    size_t nk = (size_t)n * k;
    float *x = (float *)malloc(n * 4), *y = (float *)malloc(nk * 4), *wt = (float *)malloc(k * 4), *sh = (float *)malloc(n * 4);
    float *w = (float *)malloc(n * 4), *rx = (float *)malloc(n * 4), *rn = (float *)malloc(n * 4), *gx = (float *)malloc(n * 4), *gn = (float *)malloc(n * 4);
    fill(x, n, 2); fill(y, nk, 1); fill(wt, k, 1); fill(sh, n, 1); fill(w, n, 1);
    for (int i = 0; i < n; i++) { /* the CPU's order: weighted sum, then shared, then into x */
        float acc = 0;
        for (int j = 0; j < k; j++) acc += wt[j] * y[(size_t)j * n + i];
        if (with_shared) acc += sh[i];
        rx[i] = x[i] + acc;
    }
    hm_tensor wtn = vec_tensor(w, n);
    if (with_norm) cpu_rmsnorm(rn, rx, &wtn, n, 1e-5f);
    float *dx = dup(x, n), *dy = dup(y, nk), *dwt = dup(wt, k), *dsh = dup(sh, n), *dw = dup(w, n), *dn = poisoned(n);
    op_residual_norm(dx, dy, dwt, k, with_shared ? dsh : NULL, with_norm ? dw : NULL, dn, n, 1e-5f, 0);
    back(gx, dx, n); back(gn, dn, n);
    char what[96]; snprintf(what, sizeof what, "residual n=%d k=%d shared=%d", n, k, with_shared);
    check(what, gx, rx, n, 1e-6);
    if (with_norm) { snprintf(what, sizeof what, "residual+norm n=%d k=%d shared=%d", n, k, with_shared); check(what, gn, rn, n, 1e-5); }
    cudaFree(dx); cudaFree(dy); cudaFree(dwt); cudaFree(dsh); cudaFree(dw); cudaFree(dn);
    free(x); free(y); free(wt); free(sh); free(w); free(rx); free(rn); free(gx); free(gn);
}

/* ---- the _q8 ops: the same output bit for bit, and its q8 records byte for byte what the
 * reference quantizer (gemv_q8_ref.h) makes of that output (records poisoned before the run) ---- */
static void check_records(const char *what, const void *dxq, const float *out, int n) {
    const size_t rb = gpu_q8_records_bytes(n);
    uint8_t *rec = (uint8_t *)malloc(rb);
    cudaDeviceSynchronize();
    cudaMemcpy(rec, dxq, rb, cudaMemcpyDeviceToHost);
    const int bad = q8r_records_differ(rec, out, n);
    printf("%s %s q8 records: %d groups%s\n", bad < 0 ? "PASS" : "FAIL", what, n / 32, bad < 0 ? " equal to the reference quantizer's" : " (differ)");
    if (bad >= 0) printf("  first differing group %d\n", bad);
    bad < 0 ? n_pass++ : n_fail++;
    free(rec);
}
static void *poisoned_rec(int n) { void *d; cudaMalloc(&d, gpu_q8_records_bytes(n)); cudaMemset(d, 0xA5, gpu_q8_records_bytes(n)); return d; }
static void check_same(const char *what, const float *a, const float *b, size_t n) {
    const int same = !memcmp(a, b, n * sizeof(float));
    printf("%s %s: output of the _q8 op bitwise the plain op's\n", same ? "PASS" : "FAIL", what);
    same ? n_pass++ : n_fail++;
}

static void test_norms_q8(int n, int k) {
    float *x = (float *)malloc(n * 4), *y = (float *)malloc((size_t)n * k * 4), *wt = (float *)malloc(k * 4), *w = (float *)malloc(n * 4);
    float *a = (float *)malloc(n * 4), *b = (float *)malloc(n * 4);
    fill(x, n, 2); fill(y, (size_t)n * k, 1); fill(wt, k, 1); fill(w, n, 1);
    for (int i = 40; i < 72 && i < n; i++) x[i] = 0.f;   /* an all-zero group in the rmsnorm's input */
    char what[96];
    float *dx = dup(x, n), *dw = dup(w, n), *dn = poisoned(n), *dn2 = poisoned(n);
    void *xq = poisoned_rec(n);
    op_rmsnorm(dx, dw, dn, n, 1e-6f, 0);
    op_rmsnorm_q8(dx, dw, dn2, xq, n, 1e-6f, 0);
    back(a, dn, n); back(b, dn2, n);
    snprintf(what, sizeof what, "rmsnorm_q8 n=%d", n);
    check_same(what, a, b, n);
    check_records(what, xq, b, n);
    float *dy = dup(y, (size_t)n * k), *dwt = dup(wt, k), *dx2 = dup(x, n);
    cudaMemset(xq, 0xA5, gpu_q8_records_bytes(n));
    op_residual_norm(dx, dy, dwt, k, NULL, dw, dn, n, 1e-5f, 0);
    op_residual_norm_q8(dx2, dy, dwt, k, NULL, dw, dn2, xq, n, 1e-5f, 0);
    back(a, dn, n); back(b, dn2, n);
    snprintf(what, sizeof what, "residual_norm_q8 n=%d k=%d", n, k);
    check_same(what, a, b, n);
    check_records(what, xq, b, n);
    cudaFree(dx); cudaFree(dw); cudaFree(dn); cudaFree(dn2); cudaFree(xq); cudaFree(dy); cudaFree(dwt); cudaFree(dx2);
    free(x); free(y); free(wt); free(w); free(a); free(b);
}

/* op_router_norm_q8 (the norm after the o-projection and the router's F32 GEMV in one launch)
 * against the two launches it replaces, every output bitwise: the normed row, its q8 records, the
 * logits, x left as it was; then op_residual_norm_q8_ex's x + pre against the stored update, and the norm that leaves x */
static int same_bytes(const char *what, const void *da, const void *db, size_t bytes) {
    uint8_t *a = (uint8_t *)malloc(bytes), *b = (uint8_t *)malloc(bytes);
    cudaDeviceSynchronize();
    cudaMemcpy(a, da, bytes, cudaMemcpyDeviceToHost); cudaMemcpy(b, db, bytes, cudaMemcpyDeviceToHost);
    size_t i = 0;
    while (i < bytes && a[i] == b[i]) i++;
    printf("%s %s: %zu bytes%s", i == bytes ? "PASS" : "FAIL", what, bytes, i == bytes ? " bitwise equal\n" : "");
    if (i < bytes) printf(", first difference at byte %zu\n", i);
    i == bytes ? n_pass++ : n_fail++;
    free(a); free(b);
    return i == bytes;
}

/* op_rmsnorm_rows / op_residual_norm_rows with each row's q8 records (a batched step's, row r's at
 * xq + r * rs): the rows' outputs and x bitwise those of the launch without records, and every
 * row's records the reference quantizer's of its output */
static void test_norm_rows_q8(int n, int rows) {
    const size_t rs = (gpu_q8_records_bytes(n) + 255) & ~(size_t)255, tot = (size_t)rows * n;
    float *x = (float *)malloc(tot * 4), *y = (float *)malloc(tot * 4), *w = (float *)malloc(n * 4), *o = (float *)malloc(tot * 4);
    fill(x, tot, 2); fill(y, tot, 1); fill(w, n, 1);
    uint8_t *xq, *h = (uint8_t *)malloc(rows * rs);
    cudaMalloc(&xq, rows * rs);
    float *dw = dup(w, n);
    for (int kind = 0; kind < 2; kind++) {   /* 0: rmsnorm rows, 1: residual norm rows */
        float *dx1 = dup(x, tot), *dx2 = dup(x, tot), *dy = dup(y, tot), *o1 = poisoned(tot), *o2 = poisoned(tot);
        cudaMemset(xq, 0xA5, rows * rs);
        if (kind == 0) {
            op_rmsnorm_rows(dx1, dw, o1, n, rows, 1e-5f, 0);
            op_rmsnorm_rows(dx2, dw, o2, n, rows, 1e-5f, 0, xq, (long long)rs);
        } else {
            op_residual_norm_rows(dx1, dy, n, NULL, 0, 1, NULL, dw, o1, n, rows, 1e-5f, 0);
            op_residual_norm_rows(dx2, dy, n, NULL, 0, 1, NULL, dw, o2, n, rows, 1e-5f, 0, xq, (long long)rs);
        }
        char what[128];
        snprintf(what, sizeof what, "%s rows n=%d rows=%d with records: the outputs", kind ? "residual norm" : "rmsnorm", n, rows);
        same_bytes(what, o1, o2, tot * 4);
        snprintf(what, sizeof what, "%s rows n=%d rows=%d with records: x", kind ? "residual norm" : "rmsnorm", n, rows);
        same_bytes(what, dx1, dx2, tot * 4);
        back(o, o2, tot);
        cudaMemcpy(h, xq, rows * rs, cudaMemcpyDeviceToHost);
        int bad = -1;
        for (int r = 0; r < rows && bad < 0; r++)
            if (q8r_records_differ(h + r * rs, o + (size_t)r * n, n) >= 0) bad = r;
        printf("%s %s rows n=%d rows=%d: every row's q8 records the reference quantizer's%s\n", bad < 0 ? "PASS" : "FAIL",
               kind ? "residual norm" : "rmsnorm", n, rows, bad < 0 ? "" : " (a row differs)");
        bad < 0 ? n_pass++ : n_fail++;
        cudaFree(dx1); cudaFree(dx2); cudaFree(dy); cudaFree(o1); cudaFree(o2);
    }
    cudaFree(xq); cudaFree(dw); free(x); free(y); free(w); free(o); free(h);
}

/* op_router_rows_gemv (a batched step's router logits): every row's logits bitwise gpu_gemv's (the
 * F32 GEMV the one-row step's router runs) on that row; rows of logits ls floats apart, the room
 * between them and past the last router row left as poisoned; a shape it does not take refused */
static void test_router_rows(int n, int ne, int nb) {
    const long long ls = ne + 3;
    float *x = (float *)malloc((size_t)nb * n * 4), *R = (float *)malloc((size_t)ne * n * 4);
    fill(x, (size_t)nb * n, 2); fill(R, (size_t)ne * n, 0.05f);
    float *dx = dup(x, (size_t)nb * n), *dR = dup(R, (size_t)ne * n), *dl = poisoned((size_t)nb * ls), *dl1 = poisoned((size_t)nb * ls);
    int rg = 0;
    for (int b = 0; b < nb; b++) rg |= gpu_gemv(HM_TYPE_F32, dR, dx + (size_t)b * n, dl1 + (size_t)b * ls, n, ne, 0);
    const int rc = op_router_rows_gemv(dR, dx, dl, n, ne, ls, nb, 0);
    char what[128];
    snprintf(what, sizeof what, "router rows n=%d experts=%d rows=%d: logits (and the poisoned room) bitwise gpu_gemv's", n, ne, nb);
    std::vector<float> h((size_t)nb * ls);
    back(h.data(), dl, h.size());
    int fin = 1;   /* every logit written (the poison is NaN) */
    for (int b = 0; b < nb; b++)
        for (int r = 0; r < ne; r++) fin &= isfinite(h[(size_t)b * ls + r]) != 0;
    if (rc || rg || !fin) { printf("FAIL %s: rc %d, gpu_gemv rc %d, all written %d\n", what, rc, rg, fin); n_fail++; }
    else same_bytes(what, dl, dl1, (size_t)nb * ls * 4);
    const int r2 = op_router_rows_gemv(dR, dx, dl, 1024, ne, ls, nb, 0), r3 = op_router_rows_gemv(dR, dx + 1, dl, n, ne, ls, nb, 0);
    printf("%s router rows n=1024 and an unaligned x refused (rc %d, %d)\n", r2 == -1 && r3 == -1 ? "PASS" : "FAIL", r2, r3);
    r2 == -1 && r3 == -1 ? n_pass++ : n_fail++;
    cudaFree(dx); cudaFree(dR); cudaFree(dl); cudaFree(dl1); free(x); free(R);
}

static void test_router_norm(int n, int ne, int k, int rpb) {
    float *x = (float *)malloc(n * 4), *y = (float *)malloc(n * 4), *w = (float *)malloc(n * 4), *R = (float *)malloc((size_t)ne * n * 4);
    float *ye = (float *)malloc((size_t)n * k * 4), *wt = (float *)malloc(k * 4), *sh = (float *)malloc(n * 4);
    fill(x, n, 4); fill(y, n, 2); fill(w, n, 1); fill(R, (size_t)ne * n, 0.05f); fill(ye, (size_t)n * k, 1); fill(wt, k, 1); fill(sh, n, 1);
    char what[96];
    snprintf(what, sizeof what, "router_norm n=%d experts=%d rows=%d", n, ne, rpb);
    float *dx = dup(x, n), *dx2 = dup(x, n), *dy = dup(y, n), *dw = dup(w, n), *dR = dup(R, (size_t)ne * n);
    if (!op_router_norm_ok(n, ne, rpb, dw, dR)) {
        printf("FAIL %s: op_router_norm_ok refuses a shape it takes\n", what); n_fail++;
        return;
    }
    float *dn = poisoned(n), *dn2 = poisoned(n), *dl = poisoned(ne), *dl2 = poisoned(ne);
    void *q = poisoned_rec(n), *q2 = poisoned_rec(n);
    op_residual_norm_q8(dx, dy, NULL, 1, NULL, dw, dn, q, n, 1e-5f, 0);
    gpu_gemv_router(HM_TYPE_F32, dR, dn, q, dl, n, ne, 0, 0);
    const int rc = op_router_norm_q8(dx2, dy, dw, dR, dl2, dn2, q2, n, ne, 1e-5f, 0, rpb, 0);
    printf("%s %s: launched (rc %d, %s)\n", rc == 0 && cudaDeviceSynchronize() == cudaSuccess ? "PASS" : "FAIL", what, rc,
           cudaGetErrorString(cudaGetLastError()));
    rc == 0 ? n_pass++ : n_fail++;
    char w2[192];
    snprintf(w2, sizeof w2, "%s normed row", what); same_bytes(w2, dn, dn2, (size_t)n * 4);
    snprintf(w2, sizeof w2, "%s q8 records", what); same_bytes(w2, q, q2, gpu_q8_records_bytes(n));
    snprintf(w2, sizeof w2, "%s logits", what); same_bytes(w2, dl, dl2, (size_t)ne * 4);
    float *dxo = dup(x, n);
    snprintf(w2, sizeof w2, "%s x not updated", what); same_bytes(w2, dx2, dxo, (size_t)n * 4);
    {   /* the logits alone, and beside them the norm that leaves x as it was (the shared expert's, exec.cu) */
        float *dx3 = dup(x, n), *dn3 = poisoned(n), *dl3 = poisoned(ne);
        void *q3 = poisoned_rec(n);
        const int r1 = op_router_norm_q8(dx3, dy, dw, dR, dl3, NULL, NULL, n, ne, 1e-5f, 0, rpb, 0);
        const int r2 = op_residual_norm_q8_ex(dx3, NULL, 0, dy, NULL, 1, NULL, dw, dn3, q3, n, 1e-5f, 0);
        printf("%s %s: logits only and the norm without x's store launched (rc %d, %d)\n", !r1 && !r2 ? "PASS" : "FAIL", what, r1, r2);
        !r1 && !r2 ? n_pass++ : n_fail++;
        snprintf(w2, sizeof w2, "%s logits only", what); same_bytes(w2, dl, dl3, (size_t)ne * 4);
        snprintf(w2, sizeof w2, "%s norm without x's store: normed row", what); same_bytes(w2, dn, dn3, (size_t)n * 4);
        snprintf(w2, sizeof w2, "%s norm without x's store: q8 records", what); same_bytes(w2, q, q3, gpu_q8_records_bytes(n));
        snprintf(w2, sizeof w2, "%s norm without x's store: x", what); same_bytes(w2, dx3, dxo, (size_t)n * 4);
        cudaFree(dx3); cudaFree(dn3); cudaFree(dl3); cudaFree(q3);
    }
    /* the layer's last norm: x (holding x + y) plus the experts, against x + y added first */
    float *dye = dup(ye, (size_t)n * k), *dwt = dup(wt, k), *dsh = dup(sh, n);
    cudaMemset(dn, 0xFF, n * 4); cudaMemset(dn2, 0xFF, n * 4);
    op_residual_norm_q8(dx, dye, dwt, k, dsh, dw, dn, q, n, 1e-5f, 0);
    op_residual_norm_q8_ex(dx2, dy, 1, dye, dwt, k, dsh, dw, dn2, q2, n, 1e-5f, 0);
    snprintf(w2, sizeof w2, "%s then x + pre: x", what); same_bytes(w2, dx, dx2, (size_t)n * 4);
    snprintf(w2, sizeof w2, "%s then x + pre: normed row", what); same_bytes(w2, dn, dn2, (size_t)n * 4);
    snprintf(w2, sizeof w2, "%s then x + pre: q8 records", what); same_bytes(w2, q, q2, gpu_q8_records_bytes(n));
    cudaFree(dx); cudaFree(dx2); cudaFree(dy); cudaFree(dw); cudaFree(dR); cudaFree(dn); cudaFree(dn2); cudaFree(dl); cudaFree(dl2);
    cudaFree(q); cudaFree(q2); cudaFree(dxo); cudaFree(dye); cudaFree(dwt); cudaFree(dsh);
    free(x); free(y); free(w); free(R); free(ye); free(wt); free(sh);
}

static void test_attention_q8(int n_head, int n_kv, int hd, int n_ctx, int pos) {
    const int qd = n_head * hd;
    const size_t cn = (size_t)n_ctx * n_kv * hd;
    float *q = (float *)malloc(qd * 4), *kc = (float *)malloc(cn * 4), *vc = (float *)malloc(cn * 4), *a = (float *)malloc(qd * 4), *b = (float *)malloc(qd * 4);
    fill(q, qd, 1); fill(kc, cn, 1); fill(vc, cn, 1);
    float *dq = dup(q, qd), *dk = dup(kc, cn), *dv = dup(vc, cn), *d1 = poisoned(qd), *d2 = poisoned(qd);
    float *part = poisoned(op_attn_part_floats(n_head, n_kv, hd));
    int *dpos; cudaMalloc(&dpos, 4); cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice);
    void *xq = poisoned_rec(qd);
    for (int form = 0; form < 3; form++) {   /* each form (ops.cuh) */
        cudaMemset(d1, 0xFF, qd * sizeof(float)); cudaMemset(d2, 0xFF, qd * sizeof(float));
        op_attn_decode(dq, dk, dv, d1, part, n_head, n_kv, hd, n_ctx, dpos, 0, form);
        op_attn_decode_q8(dq, dk, dv, d2, xq, part, n_head, n_kv, hd, n_ctx, dpos, 0, 1, form);
        back(a, d1, qd); back(b, d2, qd);
        char what[96];
        snprintf(what, sizeof what, "attention_q8 (form %d) heads %d/%d hd %d pos %d", form, n_head, n_kv, hd, pos);
        check_same(what, a, b, qd);
        check_records(what, xq, b, qd);
    }
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(d1); cudaFree(d2); cudaFree(part); cudaFree(dpos); cudaFree(xq);
    free(q); free(kc); free(vc); free(a); free(b);
}

/* bias, per-head RMSNorm, partial NeoX RoPE at pos, then k/v written to the caches */
static void test_qkv_post(int n_head, int n_kv, int hd, int n_rot, int bias, int qk_norm, int pos) {
    int qd = n_head * hd, kvd = n_kv * hd, n_ctx = pos + 3;
    float *q = (float *)malloc(qd * 4), *k = (float *)malloc(kvd * 4), *v = (float *)malloc(kvd * 4);
    float *bq = (float *)malloc(qd * 4), *bk = (float *)malloc(kvd * 4), *bv = (float *)malloc(kvd * 4);
    float *qn = (float *)malloc(hd * 4), *kn = (float *)malloc(hd * 4);
    fill(q, qd, 1); fill(k, kvd, 1); fill(v, kvd, 1); fill(bq, qd, 0.3f); fill(bk, kvd, 0.3f); fill(bv, kvd, 0.3f);
    fill(qn, hd, 1); fill(kn, hd, 1);
    float *rq = (float *)malloc(qd * 4), *rk = (float *)malloc(kvd * 4), *rv = (float *)malloc(kvd * 4);
    memcpy(rq, q, qd * 4); memcpy(rk, k, kvd * 4); memcpy(rv, v, kvd * 4);
    if (bias) { for (int i = 0; i < qd; i++) rq[i] += bq[i]; for (int i = 0; i < kvd; i++) { rk[i] += bk[i]; rv[i] += bv[i]; } }
    hm_tensor tq = vec_tensor(qn, hd), tk = vec_tensor(kn, hd);
    if (qk_norm) {
        for (int h = 0; h < n_head; h++) cpu_rmsnorm(rq + h * hd, rq + h * hd, &tq, hd, 1e-6f);
        for (int h = 0; h < n_kv; h++) cpu_rmsnorm(rk + h * hd, rk + h * hd, &tk, hd, 1e-6f);
    }
    cpu_rope_neox(rq, n_head, hd, n_rot, pos, 10000.0f);
    cpu_rope_neox(rk, n_kv, hd, n_rot, pos, 10000.0f);
    float *dq = dup(q, qd), *dk = dup(k, kvd), *dv = dup(v, kvd), *dbq = dup(bq, qd), *dbk = dup(bk, kvd), *dbv = dup(bv, kvd);
    float *dqn = dup(qn, hd), *dkn = dup(kn, hd), *kc = poisoned((size_t)n_ctx * kvd), *vc = poisoned((size_t)n_ctx * kvd);
    int *dpos; cudaMalloc(&dpos, 4); cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice);
    op_qkv_post(dq, dk, dv, bias ? dbq : NULL, bias ? dbk : NULL, bias ? dbv : NULL, qk_norm ? dqn : NULL, qk_norm ? dkn : NULL,
                n_head, n_kv, hd, n_rot, 10000.0f, 1e-6f, dpos, kc, vc, 0);
    float *gq = (float *)malloc(qd * 4), *gk = (float *)malloc(kvd * 4), *gv = (float *)malloc(kvd * 4);
    back(gq, dq, qd);
    back(gk, kc + (size_t)pos * kvd, kvd);
    back(gv, vc + (size_t)pos * kvd, kvd);
    char what[128];
    snprintf(what, sizeof what, "qkv post q: heads %d/%d hd %d rot %d bias %d qknorm %d pos %d", n_head, n_kv, hd, n_rot, bias, qk_norm, pos);
    check(what, gq, rq, qd, 2e-5);
    snprintf(what, sizeof what, "qkv post k cache row %d", pos); check(what, gk, rk, kvd, 2e-5);
    snprintf(what, sizeof what, "qkv post v cache row %d", pos); check(what, gv, rv, kvd, 1e-6);
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dbq); cudaFree(dbk); cudaFree(dbv); cudaFree(dqn); cudaFree(dkn);
    cudaFree(kc); cudaFree(vc); cudaFree(dpos);
    free(q); free(k); free(v); free(bq); free(bk); free(bv); free(qn); free(kn); free(rq); free(rk); free(rv); free(gq); free(gk); free(gv);
}

/* softmax(q . k / sqrt(hd)) v over positions 0..pos, GQA */
static void test_attention(int n_head, int n_kv, int hd, int n_ctx, int pos) {
    int qd = n_head * hd, kvd = n_kv * hd, grp = n_head / n_kv;
    size_t cn = (size_t)n_ctx * kvd;
    float *q = (float *)malloc(qd * 4), *kc = (float *)malloc(cn * 4), *vc = (float *)malloc(cn * 4), *ref = (float *)malloc(qd * 4);
    fill(q, qd, 1); fill(kc, cn, 1); fill(vc, cn, 1);
    float *att = (float *)malloc((size_t)(pos + 1) * 4);
    for (int h = 0; h < n_head; h++) {
        int kh = h / grp;
        for (int t = 0; t <= pos; t++) {
            float d = 0;
            for (int i = 0; i < hd; i++) d += q[h * hd + i] * kc[(size_t)t * kvd + kh * hd + i];
            att[t] = d / sqrtf((float)hd);
        }
        cpu_softmax(att, pos + 1);
        for (int i = 0; i < hd; i++) {
            float o = 0;
            for (int t = 0; t <= pos; t++) o += att[t] * vc[(size_t)t * kvd + kh * hd + i];
            ref[h * hd + i] = o;
        }
    }
    float *dq = dup(q, qd), *dk = dup(kc, cn), *dv = dup(vc, cn), *dout = poisoned(qd), *part = poisoned(op_attn_part_floats(n_head, n_kv, hd));
    int *dpos; cudaMalloc(&dpos, 4); cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice);
    float *got = (float *)malloc(qd * 4);
    char what[128];
    /* each form (ops.cuh: the one-round kernel, the long-context default, k_attn_long, k_attn_quad, the CPA
     * form), each twice: the second call finds the partials of the first. All but k_attn_long sum as the
     * one-round kernel: their outputs must be its bit for bit (what keeps a one-row step equal to the same
     * row of a batched one) */
    static const char *fname[] = { "", " (long: default)", " (long: k_attn_long)", " (long: k_attn_quad)", " (long: CPA)" };
    float *form0 = (float *)malloc(qd * 4);
    for (int call = 0; call < 10; call++) {
        const int form = call / 2;
        if (form && hd != 64 && hd != 128 && hd != 256) break;
        cudaMemset(dout, 0xFF, qd * sizeof(float));
        op_attn_decode(dq, dk, dv, dout, part, n_head, n_kv, hd, n_ctx, dpos, 0, form);
        back(got, dout, qd);
        snprintf(what, sizeof what, "attention%s heads %d/%d hd %d ctx %d pos %d (call %d)", fname[form], n_head, n_kv, hd, n_ctx, pos,
                 call % 2 + 1);
        check(what, got, ref, qd, 1e-5);
        if (call == 0) memcpy(form0, got, qd * 4);
        const char *al = getenv("HOTMOE_ATT_LONG");   /* =2: form 1 is k_attn_long, other sums */
        if (form == 3 || form == 4 || (form == 1 && !(al && al[0] == '2'))) {
            int diff = 0;
            for (int i = 0; i < qd; i++) diff += memcmp(&got[i], &form0[i], 4) != 0;
            printf("%s attention%s heads %d/%d hd %d pos %d (call %d): %d of %d elements differ from the one-round kernel's bits\n",
                   diff ? "FAIL" : "PASS", fname[form], n_head, n_kv, hd, pos, call % 2 + 1, diff, qd);
            diff ? n_fail++ : n_pass++;
        }
    }
    free(form0);
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(part); cudaFree(dpos);
    free(q); free(kc); free(vc); free(ref); free(att); free(got);
}

/* op_attn_decode_seq: rows tokens of four sequences (row r: sequence sq[r] at position ps[r], each
 * sequence its own caches n_ctx * kvd floats apart, its own q row, output row and partials) in the
 * batched forms (0 the one-round kernel, 3 k_attn_quad, 4 the CPA form): every row must be the
 * one-round kernel's one-row output for that sequence and position, bit for bit (what keeps a
 * batched step's rows equal to one-row steps; the one-row output is checked against the CPU in
 * test_attention). Outputs poisoned before each run; each form twice (the second finds the
 * partials of the first). */
static void test_attention_batch(int n_head, int n_kv, int hd, int n_ctx, int rows, const int *sq, const int *ps) {
    enum { NS = 4 };
    const int qd = n_head * hd, kvd = n_kv * hd;
    const size_t cn = (size_t)n_ctx * kvd, pf = op_attn_part_floats(n_head, n_kv, hd);
    float *q = (float *)malloc((size_t)rows * qd * 4), *kc = (float *)malloc(NS * cn * 4), *vc = (float *)malloc(NS * cn * 4);
    fill(q, (size_t)rows * qd, 1); fill(kc, NS * cn, 1); fill(vc, NS * cn, 1);
    float *dq = dup(q, (size_t)rows * qd), *dk = dup(kc, NS * cn), *dv = dup(vc, NS * cn);
    float *dout = poisoned((size_t)rows * qd), *d1 = poisoned(qd), *part = poisoned(pf * rows);
    int *dpos, *dseq, *dp1;
    cudaMalloc(&dpos, rows * 4); cudaMalloc(&dseq, rows * 4); cudaMalloc(&dp1, 4);
    cudaMemcpy(dpos, ps, rows * 4, cudaMemcpyHostToDevice); cudaMemcpy(dseq, sq, rows * 4, cudaMemcpyHostToDevice);
    float *want = (float *)malloc((size_t)rows * qd * 4), *got = (float *)malloc((size_t)rows * qd * 4);
    const size_t rs = (gpu_q8_records_bytes(qd) + 255) & ~(size_t)255;   /* a row's records, as the executor lays them out */
    uint8_t *xq;
    cudaMalloc(&xq, rows * rs);
    int maxp = 0;
    for (int r = 0; r < rows; r++) {   /* one-row steps, the one-round kernel */
        cudaMemcpy(dp1, &ps[r], 4, cudaMemcpyHostToDevice);
        cudaMemset(d1, 0xFF, qd * sizeof(float));
        op_attn_decode(dq + (size_t)r * qd, dk + sq[r] * cn, dv + sq[r] * cn, d1, part, n_head, n_kv, hd, n_ctx, dp1, 0, 0);
        back(want + (size_t)r * qd, d1, qd);
        if (ps[r] > maxp) maxp = ps[r];
    }
    for (int call = 0; call < 6; call++) {
        static const int forms[] = { 0, 3, 4 };
        static const char *fname[] = { "form 0, one-round", "form 3, k_attn_quad where it fits", "form 4, CPA where it fits" };
        const int form = forms[call / 2];
        cudaMemset(dout, 0xFF, (size_t)rows * qd * sizeof(float));
        cudaMemset(xq, 0xFF, rows * rs);
        /* the second call of each form makes each row's q8 records too (the o-projection's) */
        op_attn_decode_seq(dq, dk, dv, dout, part, n_head, n_kv, hd, n_ctx, dpos, dseq, (long long)cn, rows, qd, qd, (long long)pf, 0, form,
                           call % 2 ? xq : NULL, (long long)rs);
        back(got, dout, (size_t)rows * qd);
        const cudaError_t ce = cudaGetLastError();
        size_t diff = 0;
        for (size_t i = 0; i < (size_t)rows * qd; i++) diff += memcmp(&got[i], &want[i], 4) != 0;
        if (call % 2) {   /* the records: each row's the reference quantizer's of its output (every group's values and scale) */
            std::vector<uint8_t> a(rows * rs);
            cudaDeviceSynchronize();
            cudaMemcpy(a.data(), xq, rows * rs, cudaMemcpyDeviceToHost);
            for (int r = 0; r < rows; r++) diff += q8r_records_differ(a.data() + r * rs, got + (size_t)r * qd, qd) >= 0;
        }
        printf("%s attention batched (%s) heads %d/%d hd %d, %d rows up to pos %d (call %d%s): %zu of %zu elements differ from one-row "
               "steps' bits%s%s\n", diff || ce ? "FAIL" : "PASS", fname[call / 2], n_head, n_kv, hd, rows, maxp, call % 2 + 1,
               call % 2 ? ", with each row's q8 records (a row's records count 1)" : "", diff, (size_t)rows * qd, ce ? "; " : "",
               ce ? cudaGetErrorString(ce) : "");
        diff || ce ? n_fail++ : n_pass++;
    }
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(d1); cudaFree(part); cudaFree(dpos); cudaFree(dseq); cudaFree(dp1);
    cudaFree(xq);
    free(q); free(kc); free(vc); free(want); free(got);
}

static void test_router(int fn, int n, int k, int norm, float scale, int n_group, int topk_group, int with_bias, int ties) {
    float *lg = (float *)malloc(n * 4), *b = (float *)malloc(n * 4);
    fill(lg, n, 3); fill(b, n, 0.5f);
    if (ties) for (int i = 0; i < n; i++) lg[i] = (float)(i % 5);    /* many equal logits */
    if (ties == 2) for (int i = 0; i < n; i++) b[i] = -2.0f - (float)(i % 3);   /* negative choices, still tied (i % 15) */
    router_params p = { fn, n, k, norm, scale, n_group, topk_group };
    int ri[64]; float rw[64];
    router_select(&p, lg, with_bias ? b : NULL, ri, rw);
    float *dl = dup(lg, n), *db = dup(b, n), *dw = poisoned(k);
    int *di; cudaMalloc(&di, k * 4); cudaMemset(di, 0xFF, k * 4);
    op_router(dl, with_bias ? db : NULL, n, k, fn, norm, scale, n_group, topk_group, di, dw, 0);
    int gi[64]; float gw[64];
    cudaDeviceSynchronize();
    cudaMemcpy(gi, di, k * 4, cudaMemcpyDeviceToHost); cudaMemcpy(gw, dw, k * 4, cudaMemcpyDeviceToHost);
    int same = 1;
    for (int j = 0; j < k; j++) same &= gi[j] == ri[j] && fabsf(gw[j] - rw[j]) <= 1e-6f * fmaxf(1.0f, fabsf(rw[j]));
    printf("%s router %s n=%d k=%d norm %d scale %g groups %d/%d bias %d ties %d: ids and weights %s\n", same ? "PASS" : "FAIL",
           fn == 2 ? "sigmoid" : "softmax", n, k, norm, scale, topk_group, n_group, with_bias, ties, same ? "equal" : "differ");
    same ? n_pass++ : n_fail++;
    cudaFree(dl); cudaFree(db); cudaFree(dw); cudaFree(di); free(lg); free(b);
}

/* The greedy choice on the GPU (op_argmax_rows) against sampler_argmax on every row: kind 0
 * random, 1 few distinct values (ties), 2 NaNs sprinkled (also at x[0] of some rows), 3 every
 * value -inf or NaN, 4 +-0 only, 5 the largest value at the row's end. The scratch is reused over
 * launches (its counters must come back to zero). */
static void test_argmax(int n, int rows, int kind, void *scratch) {
    float *x = (float *)malloc((size_t)n * rows * 4);
    for (int r = 0; r < rows; r++) {
        float *xr = x + (size_t)r * n;
        for (int i = 0; i < n; i++) {
            const float u = frand();
            xr[i] = kind == 1 ? (float)(int)(3 * u) : kind == 3 ? (u < 0 ? -INFINITY : NAN) : kind == 4 ? (u < 0 ? -0.0f : 0.0f) : 20 * u;
            if (kind == 2 && frand() > 0.9f) xr[i] = NAN;
        }
        if (kind == 2 && r % 2) xr[0] = NAN;
        if (kind == 5) xr[n - 1] = 1e30f;
    }
    float *dx = dup(x, (size_t)n * rows);
    int *dout; cudaMalloc(&dout, rows * 4); cudaMemset(dout, 0xFF, rows * 4);
    op_argmax_rows(dx, n, rows, dout, scratch, 0);
    int got[8];
    cudaDeviceSynchronize();
    const cudaError_t ce = cudaGetLastError();
    cudaMemcpy(got, dout, rows * 4, cudaMemcpyDeviceToHost);
    int same = ce == cudaSuccess, want0 = -1;
    for (int r = 0; r < rows; r++) {
        const int want = sampler_argmax(x + (size_t)r * n, n);
        if (!r) want0 = want;
        same &= got[r] == want;
    }
    printf("%s argmax n=%d rows=%d kind %d: %s (row 0: %d, want %d)\n", same ? "PASS" : "FAIL", n, rows, kind,
           same ? "every row's index equal" : "differ", got[0], want0);
    same ? n_pass++ : n_fail++;
    cudaFree(dx); cudaFree(dout); free(x);
}

/* us a launch of nl launches captured into one graph by launch(s), over reps replays after a
 * warm-up; -1 when the graph cannot be made, *err the first error after the replays */
template <class F>
static float chain_us(cudaStream_t s, int nl, int reps, F launch, cudaError_t *err) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < nl; i++) launch(s);
    if (cudaStreamEndCapture(s, &g) != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
        *err = cudaGetLastError();
        return -1.f;
    }
    cudaGraphLaunch(ge, s);   /* warm-up */
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0, s);
    for (int r = 0; r < reps; r++) cudaGraphLaunch(ge, s);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    *err = cudaGetLastError();
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaGraphExecDestroy(ge); cudaGraphDestroy(g); cudaEventDestroy(e0); cudaEventDestroy(e1);
    return ms * 1e3f / (reps * nl);
}

/* --bench-attn: the decode attention with its merge and x's q8 records (op_attn_decode_q8) for air
 * (96/8 heads of 128) and a3b (32/4) at the bench's positions, as graphs of 200 launches in one PDL
 * chain, twice; us a launch over 20 replays and a hash of the output and records (a variant that
 * sums in another order gives another hash: the tests compare it with the CPU). */
static int bench_attn(void) {
    static const struct { const char *name; int nh, nkv, pos; } cs[] = {
        { "air", 96, 8, 127 }, { "air", 96, 8, 430 }, { "air", 96, 8, 640 }, { "a3b", 32, 4, 430 }, { "a3b", 32, 4, 640 },
    };
    const int hd = 128, n_ctx = 1024, nl = 200, reps = 20;
    int bad = 0;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    for (const auto &c : cs) {
        const int qd = c.nh * hd;
        const size_t cn = (size_t)n_ctx * c.nkv * hd;
        std::vector<float> q(qd), kc(cn), vc(cn), o(qd);
        std::vector<uint8_t> hq(gpu_q8_records_bytes(qd));
        fill(q.data(), qd, 1); fill(kc.data(), cn, 1); fill(vc.data(), cn, 1);
        float *dq = dup(q.data(), qd), *dk = dup(kc.data(), cn), *dv = dup(vc.data(), cn), *dout = poisoned(qd);
        float *part = poisoned(op_attn_part_floats(c.nh, c.nkv, hd));
        int *dpos; cudaMalloc(&dpos, 4); cudaMemcpy(dpos, &c.pos, 4, cudaMemcpyHostToDevice);
        void *xq = poisoned_rec(qd);
        for (int rep = 0; rep < 2; rep++) {
            cudaError_t ce;
            const float us = chain_us(s, nl, reps, [&](cudaStream_t st) {
                op_attn_decode_q8(dq, dk, dv, dout, xq, part, c.nh, c.nkv, hd, n_ctx, dpos, st, 1);
            }, &ce);
            if (us < 0) { printf("FAIL bench-attn: the graph: %s\n", cudaGetErrorString(ce)); return 1; }
            back(o.data(), dout, qd);
            cudaMemcpy(hq.data(), xq, hq.size(), cudaMemcpyDeviceToHost);
            const uint64_t h = fnv_bytes(fnv_words(FNV0, o.data(), qd), hq.data(), hq.size());
            printf("%s bench-attn %s heads %d/%d hd %d pos %d: %.3f us a launch in a PDL chain of %d, hash %016llx\n",
                   ce == cudaSuccess ? "PASS" : "FAIL", c.name, c.nh, c.nkv, hd, c.pos, us, nl, (unsigned long long)h);
            bad |= ce != cudaSuccess;
        }
        cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(part); cudaFree(dpos); cudaFree(xq);
    }
    return bad;
}

/* --bench-rn: air's residual norm after the experts (n 4096, 8 expert rows and the shared
 * expert's, the norm and x's q8 records: k_residual_norm_cl) as a graph of 200 launches in one PDL
 * chain, each on the last one's x; us a launch over 20 replays, and a hash of x and the records after
 * them (a variant must give the same hash). */
static int bench_rn(void) {
    const int n = 4096, k = 8, nl = 200, reps = 20;
    float *y = (float *)malloc((size_t)k * n * 4), *x = (float *)malloc(n * 4), *sh = (float *)malloc(n * 4), *w = (float *)malloc(n * 4), wt[8];
    fill(y, (size_t)k * n, 1e-3f); fill(x, n, 1); fill(sh, n, 1e-3f); fill(w, n, 1);
    for (int j = 0; j < k; j++) wt[j] = 0.1f + 0.01f * j;
    float *dy = dup(y, (size_t)k * n), *dx = dup(x, n), *dsh = dup(sh, n), *dw = dup(w, n), *dwt = dup(wt, k), *dout = poisoned(n);
    void *xq;
    cudaMalloc(&xq, gpu_q8_records_bytes(n));
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaError_t ce;
    const float us = chain_us(s, nl, reps, [&](cudaStream_t st) { op_residual_norm_q8(dx, dy, dwt, k, dsh, dw, dout, xq, n, 1e-5f, st); }, &ce);
    if (us < 0) { printf("FAIL bench-rn: the graph: %s\n", cudaGetErrorString(ce)); return 1; }
    std::vector<uint8_t> hq(gpu_q8_records_bytes(n));
    back(x, dx, n);
    cudaMemcpy(hq.data(), xq, hq.size(), cudaMemcpyDeviceToHost);
    const uint64_t h = fnv_bytes(fnv_words(FNV0, x, n), hq.data(), hq.size());
    printf("%s bench-rn residual norm n=%d k=%d: %.3f us a launch in a PDL chain of %d, hash %016llx\n", ce == cudaSuccess ? "PASS" : "FAIL",
           n, k, us, nl, (unsigned long long)h);
    return ce == cudaSuccess ? 0 : 1;
}

int main(int argc, char **argv) {
    int nd = 0;
    if (cudaGetDeviceCount(&nd) != cudaSuccess || nd == 0) { printf("SKIP: no CUDA device (test_gpu_ops needs a GPU)\n"); return 77; }
    if (argc > 1 && !strcmp(argv[1], "--bench-rn")) return bench_rn();
    if (argc > 1 && !strcmp(argv[1], "--bench-attn")) return bench_attn();
    for (int n : { 1, 64, 1000, 2048, 4096, 4097, 8192 }) test_rmsnorm(n);
    for (int k : { 1, 3, 8, 9, 17 }) {   /* widths 777-32768: the float4 kernel and the scalar one; k past 16 */
        test_residual_norm(2048, k, 0, 1); test_residual_norm(4097, k, 1, 1); test_residual_norm(777, k, 1, 0);
        test_residual_norm(4096, k, 1, 1); test_residual_norm(8192, k, 0, 0);
        test_residual_norm(7168, k, 1, 1); test_residual_norm(1024, k, 1, 1); test_residual_norm(32768, k, 0, 1);
    }
    /* records in the op (float4 kernel, n % 256 == 0), by a launch of their own (n % 256 != 0, the
     * scalar kernel past 8192), the merge writing them or one split having written the output */
    for (int n : { 4096, 2048, 2080, 32768 }) test_norms_q8(n, 8);
    for (int n : { 4096, 2048, 1024 }) test_norm_rows_q8(n, 3);   /* air's (the cluster form), a3b's, a small one */
    for (int nb : { 1, 2, 3, 4, 5 }) test_router_rows(4096, 128, nb);   /* air (5 rows: two launches) */
    test_router_rows(2048, 128, 4);   /* a3b */
    test_router_rows(2048, 62, 3);    /* router rows not a multiple of a block's 4 */
    for (int rpb : { 1, 2, 4 }) {   /* router rows a block (HOTMOE_ROUTER_NORM_ROWS) */
        test_router_norm(4096, 128, 8, rpb);   /* air: the norm's cluster form */
        test_router_norm(2048, 128, 8, rpb);   /* a3b: its one-block form */
        test_router_norm(4096, 162, 9, rpb);   /* a last block with fewer rows */
    }
    {   /* the shapes it refuses: the caller then runs the two launches */
        const int ok = !op_router_norm_ok(3072, 128, 1, NULL, NULL) && !op_router_norm_ok(4096, 2, 1, NULL, NULL) &&
                       !op_router_norm_ok(8192, 256, 1, NULL, NULL) && !op_router_norm_ok(4096, 128, 3, NULL, NULL) &&
                       !op_router_norm_ok(4096, 12, 4, NULL, NULL) &&
                       op_router_norm_q8(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 3072, 128, 1e-5f, 0, 1, 0) == -1;
        printf("%s router_norm: n 3072, 2 rows of 4096, n 8192, 3 rows a block, 3 blocks of 4096 refused\n", ok ? "PASS" : "FAIL");
        ok ? n_pass++ : n_fail++;
    }
    test_attention_q8(96, 8, 128, 640, 300);
    test_attention_q8(40, 2, 64, 100, 16);
    test_attention_q8(6, 3, 48, 300, 211);
    test_attention_q8(96, 8, 128, 640, 20);   /* one split: the merge only makes the records */
    test_attention_q8(8, 1, 128, 5000, 4999); /* 64 splits: the merge's values past the first 32 */
    test_attention_q8(96, 8, 128, 640, 600);  /* air past 512 positions: 19 splits, the merge over them */
    test_qkv_post(4, 2, 16, 16, 0, 1, 0);     /* Qwen3-like fixture */
    test_qkv_post(4, 2, 16, 8, 1, 0, 5);      /* GLM fixture: bias, partial rope */
    test_qkv_post(32, 4, 128, 128, 0, 1, 77); /* a3b */
    test_qkv_post(96, 8, 128, 64, 1, 1, 1000);/* air, with qk norm */
    test_qkv_post(6, 3, 48, 24, 1, 1, 3);     /* head_dim not a multiple of 32 */
    for (int pos : { 0, 1, 127, 128, 129, 700, 1023 }) test_attention(32, 4, 128, 1024, pos);
    test_attention(4, 2, 16, 40, 39);
    test_attention(6, 3, 48, 300, 211);
    test_attention(96, 8, 128, 4096, 4000);
    test_attention(96, 8, 128, 640, 300);     /* air at the bench's context */
    test_attention(96, 8, 128, 640, 600);     /* past 512 positions: 19 splits, a second round of blocks */
    test_attention(32, 8, 64, 1024, 1000);    /* hd 64 past 512 positions: 32 splits */
    test_attention(64, 1, 64, 200, 150);      /* 64 q heads per kv head: two head slabs */
    test_attention(8, 2, 256, 300, 299);      /* hd 256: tiles of 16 positions */
    test_attention(96, 8, 256, 600, 517);     /* hd 256 with 12 heads a group, 17 splits */
    test_attention(40, 2, 64, 100, 16);       /* 20 heads a group; 17 positions: one split writes the output */
    test_attention(8, 1, 128, 5000, 4999);    /* one kv head: 64 splits */
    test_attention(64, 4, 128, 600, 517);     /* 16 heads a group (a Qwen3-235B shape) */
    test_attention(24, 2, 256, 300, 200);     /* hd 256, 12 heads a group */
    for (int pos : { 0, 31, 32, 33, 95 }) test_attention(24, 2, 128, 128, pos);   /* air's group (12 heads, hd 128: the twelve-warp kernel), the step's row in each place of a tile */
    for (int pos : { 14, 15, 31, 32, 63 }) test_attention(12, 4, 32, 64, pos);   /* around the 32-position split edge; hd 32 */
    /* air at 256-1,025 positions (33 splits: one tile each, 8-33 splits with positions), the step's row last or first in its tile */
    for (int pos : { 255, 256, 511, 512, 767, 768, 1023, 1024 }) test_attention(96, 8, 128, 1100, pos);
    /* k_attn_long's splits of several tiles (air: 16 splits on 132 SMs), the step's row in tile 0,
     * 1 or a later one of the last split (its stage 0 or 1), a3b's shape (33 splits) */
    for (int pos : { 15, 543, 575, 1100, 1567, 2047, 2999 }) test_attention(96, 8, 128, 3000, pos);
    for (int pos : { 0, 100, 1055, 2111 }) test_attention(32, 4, 128, 2200, pos);
    test_attention_q8(96, 8, 128, 3000, 2500);
    test_attention_q8(32, 4, 128, 1100, 1024);
    {   /* batched steps: rows of sequences in any order, at short and long positions (air: a second round
         * of blocks past 512 positions a row; the step's row first, last or inside its tile) */
        static const int sq4[] = { 3, 0, 2, 1 }, sq2[] = { 1, 3 };
        static const int p_air[] = { 600, 127, 1500, 32 }, p_short[] = { 0, 31, 95, 300 }, p_a3b[] = { 2047, 640 };
        test_attention_batch(96, 8, 128, 1600, 4, sq4, p_air);   /* air: k_attn_quad<12> */
        test_attention_batch(96, 8, 128, 400, 4, sq4, p_short);
        test_attention_batch(32, 4, 128, 2100, 2, sq2, p_a3b);   /* a3b: k_attn_quad<8> */
        test_attention_batch(32, 8, 64, 1600, 4, sq4, p_air);   /* hd 64: the CPA form under forms 3 and 4 */
        test_attention_batch(6, 3, 48, 400, 2, sq2, p_short + 2);   /* hd 48: k_attn_gqa under every form */
    }
    {   /* fn, n, k, norm, scale, groups, groups kept, bias, ties (2: negative choices, still tied) */
        static const struct { int fn, n, k, norm; float scale; int ng, tg, bias, ties; } rc[] = {
            { 1, 128, 8, 1, 1.0f, 1, 1, 0, 0 }, { 1, 128, 8, 0, 1.0f, 1, 1, 0, 0 }, { 1, 60, 4, 1, 1.0f, 1, 1, 0, 1 },
            { 2, 128, 8, 1, 1.0f, 1, 1, 1, 0 }, { 2, 160, 8, 1, 2.5f, 1, 1, 1, 0 }, { 2, 256, 8, 1, 2.5f, 8, 4, 1, 0 },
            { 2, 288, 8, 1, 2.5f, 1, 1, 1, 0 }, { 2, 512, 16, 1, 1.0f, 1, 1, 1, 0 }, { 1, 512, 10, 1, 1.0f, 1, 1, 0, 1 },
            { 2, 4096, 8, 1, 1.0f, 1, 1, 1, 0 },   /* ROUTER_MAX: 4 experts a thread */
            { 2, 2000, 16, 1, 1.0f, 1, 1, 0, 1 },  /* ties over two experts a thread */
            { 1, 1000, 12, 1, 1.0f, 1, 1, 1, 1 },  /* softmax, a partial last warp */
            { 2, 33, 8, 1, 1.0f, 1, 1, 1, 1 },     /* one expert past a warp */
            /* the rank count on keys (router_rank_key: n a multiple of 16 at four threads an expert) */
            { 1, 128, 8, 1, 1.0f, 1, 1, 0, 1 }, { 2, 128, 8, 1, 1.0f, 1, 1, 1, 2 }, { 2, 64, 6, 1, 2.5f, 1, 1, 1, 2 },
            { 1, 160, 8, 0, 1.0f, 1, 1, 0, 1 }, { 2, 256, 8, 1, 1.0f, 1, 1, 1, 2 }, { 2, 256, 16, 1, 1.0f, 1, 1, 1, 0 },
        };
        for (const auto &c : rc) test_router(c.fn, c.n, c.k, c.norm, c.scale, c.ng, c.tg, c.bias, c.ties);
    }
    {
        void *sc; cudaMalloc(&sc, op_argmax_scratch_bytes(4)); cudaMemset(sc, 0, op_argmax_scratch_bytes(4));
        for (int kind = 0; kind < 6; kind++)
            for (int n : { 1, 3, 1001, 8192, 151552, 151936 }) test_argmax(n, kind % 2 ? 3 : 1, kind, sc);
        test_argmax(151552, 4, 2, sc);
        test_argmax(151552, 1, 0, sc);   /* after a launch of 4 rows: the first row's counter back at 0 */
        cudaFree(sc);
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
