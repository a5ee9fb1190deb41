/* test_gemv.c - the fast GEMV kernels: scalar dot vs exactly dequantized math, every ISA vs scalar,
 * activation quantizers byte-equal across ISAs, cpu_matvec fast vs ref, hm_gemv_multi vs rows. */
#include "cpu.h"
#include "gemv.h"
#include "quant.h"
#include "quant_blocks.h"
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* values with a per-row scale, an offset (so the d*q+m types see one-sided rows) and outliers */
static void fill(float *v, int64_t n, float scale, float offset) {
    for (int64_t i = 0; i < n; i++) {
        v[i] = scale * gauss() + offset;
        if (next_u64() % 97 == 0) v[i] *= 8.0f;
    }
}

static const int test_types[] = {
    HM_TYPE_F32, HM_TYPE_F16, HM_TYPE_BF16, HM_TYPE_Q8_0, HM_TYPE_Q4_0, HM_TYPE_Q4_1, HM_TYPE_Q5_0,
    HM_TYPE_Q5_1, HM_TYPE_MXFP4, HM_TYPE_Q2_K, HM_TYPE_Q3_K, HM_TYPE_Q4_K, HM_TYPE_Q5_K, HM_TYPE_Q6_K,
    HM_TYPE_IQ4_XS,
};
static const char *const isa_names[] = { "avx2", "avx512" };
static const int rows_list[] = { 1, 7, 33, 129 };
/* plus one odd length per type (odd_cols): vector tails and an odd count of blocks */
static const int cols_list[] = { 256, 512, 4096, 0 };
static int64_t odd_cols(int t) {
    const int blck = hm_type_get(t)->blck;
    return blck == 1 ? 301 : blck == HM_QK ? 9 * HM_QK : 3 * HM_QK_K;
}

/* One matrix of type t with its float source, dequantized copy, and a quantized x. */
typedef struct {
    hm_tensor W;
    int64_t rows, cols;
    float *wf;   /* (rows, cols) exact dequantization of W */
    float *x;    /* (cols) */
    float *xd;   /* (cols) exact dequantization of the scalar-quantized x */
    void *xq;    /* scalar-quantized x */
    double *S;   /* (rows) sum |w_i x~_i|: the scale of float rounding in a row's dot */
    double *ex;  /* (rows) exact dot of wf and xd, in double */
} mat;

static void mat_init(mat *m, int t, int64_t rows, int64_t cols) {
    const hm_type_traits *tr = hm_type_get(t);
    const size_t rs = hm_row_size(t, cols);
    m->rows = rows; m->cols = cols;
    uint8_t *data = malloc(rs * (size_t)rows);
    float *src = malloc(sizeof(float) * (size_t)cols);
    m->wf = malloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t r = 0; r < rows; r++) {
        fill(src, cols, 0.02f * (1 + (float)(r % 5)), (r % 3 == 1) ? 0.03f : 0.0f);
        tr->from_float(src, data + (size_t)r * rs, cols);
        tr->to_float(data + (size_t)r * rs, m->wf + r * cols, cols);
    }
    free(src);
    m->W = (hm_tensor){ .type = t, .n_dims = 2, .ne = { cols, rows, 1, 1 }, .data = data, .nbytes = rs * (size_t)rows };
    m->x = malloc(sizeof(float) * (size_t)cols);
    fill(m->x, cols, 1.0f, 0.1f);
    if (cols >= 512 && cols % 256 == 0) memset(m->x + 256, 0, sizeof(float) * 256); /* an all-zero activation block */
    hm_gemv_force_isa("scalar");
    m->xq = malloc(hm_act_size(t, cols));
    hm_act_quantize(t, m->x, m->xq, cols);
    m->xd = malloc(sizeof(float) * (size_t)cols);
    const int at = hm_act_type(t);
    if (at == HM_TYPE_F32) memcpy(m->xd, m->x, sizeof(float) * (size_t)cols);
    else hm_type_get(at)->to_float(m->xq, m->xd, cols);
    m->S = malloc(sizeof(double) * (size_t)rows);
    m->ex = malloc(sizeof(double) * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) {
        double s = 0, e = 0;
        for (int64_t i = 0; i < cols; i++) {
            const double p = (double)m->wf[r * cols + i] * m->xd[i];
            e += p;
            s += fabs(p);
        }
        m->ex[r] = e;
        m->S[r] = s;
    }
}

static void mat_free(mat *m) {
    free((void *)m->W.data); free(m->wf); free(m->x); free(m->xd); free(m->xq); free(m->S); free(m->ex);
}

static void poison(float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = NAN; }

/* worst |a - b| / (1e-5 * S + tiny) over the rows: <= 1 passes; NaN fails */
static double worst_ratio(const float *a, const double *b, const double *S, int64_t rows) {
    double w = 0;
    for (int64_t r = 0; r < rows; r++) {
        const double q = fabs((double)a[r] - b[r]) / (1e-5 * S[r] + 1e-30);
        if (!(q <= w)) w = q; /* NaN sticks */
    }
    return w;
}

static void test_type(int t) {
    const char *name = hm_type_name(t);
    double w_exact = 0, w_isa[2] = { 0, 0 }, w_fr = 0, w_fr_f = 0;
    int isa_ok[2] = { 1, 1 }, quant_same[2] = { 1, 1 }, isa_ran[2] = { 0, 0 };
    for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++)
        for (size_t ci = 0; ci < sizeof cols_list / sizeof cols_list[0]; ci++) {
            const int64_t rows = rows_list[ri], cols = cols_list[ci] ? cols_list[ci] : odd_cols(t);
            mat m;
            mat_init(&m, t, rows, cols);
            float *ys = malloc(sizeof(float) * (size_t)rows), *yi = malloc(sizeof(float) * (size_t)rows);
            double *ysd = malloc(sizeof(double) * (size_t)rows);
            /* (a) scalar against exact dequantized math */
            hm_gemv_force_isa("scalar");
            poison(ys, rows);
            hm_gemv_rows(&m.W, m.xq, ys, 0, rows);
            double q = worst_ratio(ys, m.ex, m.S, rows);
            if (!(q <= w_exact)) w_exact = q;
            for (int64_t r = 0; r < rows; r++) ysd[r] = ys[r];
            /* (b) each ISA against scalar, with its own quantizer (which must give the same bytes) */
            for (int k = 0; k < 2; k++) {
                if (hm_gemv_force_isa(isa_names[k])) { isa_ok[k] = 0; continue; }
                isa_ran[k] = 1;
                const size_t asz = hm_act_size(t, cols);
                void *xq = malloc(asz);
                hm_act_quantize(t, m.x, xq, cols);
                if (memcmp(xq, m.xq, asz)) quant_same[k] = 0;
                poison(yi, rows);
                hm_gemv_rows(&m.W, xq, yi, 0, rows);
                q = worst_ratio(yi, ysd, m.S, rows);
                if (!(q <= w_isa[k])) w_isa[k] = q;
                free(xq);
            }
            /* (c) cpu_matvec fast (best ISA) vs ref: apart from rounding, the difference is w . (x~ - x) */
            hm_gemv_force_isa(isa_ok[1] ? "avx512" : isa_ok[0] ? "avx2" : "scalar");
            hm_kernels_set(HM_KERNELS_REF);
            poison(yi, rows);
            cpu_matvec(yi, &m.W, m.x);
            hm_kernels_set(HM_KERNELS_FAST);
            poison(ys, rows);
            cpu_matvec(ys, &m.W, m.x);
            for (int64_t r = 0; r < rows; r++) {
                double bound = 0, sref = 0;
                for (int64_t i = 0; i < cols; i++) {
                    const double wv = fabs((double)m.wf[r * cols + i]);
                    bound += wv * fabs((double)m.xd[i] - m.x[i]);
                    sref += wv * fabs((double)m.x[i]);
                }
                const double d = fabs((double)ys[r] - yi[r]);
                const double qr = d / (bound + 1e-5 * (sref + m.S[r]) + 1e-30);
                if (!(qr <= w_fr)) w_fr = qr;
                /* how much of the bound is used, for the report */
                const double f = d / (bound + 1e-30);
                if (bound > 0 && f > w_fr_f) w_fr_f = f;
            }
            free(ys); free(yi); free(ysd);
            mat_free(&m);
        }
    report(w_exact <= 1, "%-6s scalar dot == exact dequantized dot (worst err / 1e-5*sum|terms| = %.3g)", name, w_exact);
    for (int k = 0; k < 2; k++) {
        if (!isa_ok[k] || !isa_ran[k]) {
            printf("SKIP %-6s %s (not supported by this CPU)\n", name, isa_names[k]);
            continue;
        }
        report(w_isa[k] <= 1, "%-6s %s dot == scalar dot (worst err / 1e-5*sum|terms| = %.3g)", name, isa_names[k], w_isa[k]);
        if (hm_act_type(t) != HM_TYPE_F32)
            report(quant_same[k], "%-6s %s activation quantizer gives the scalar bytes", name, isa_names[k]);
    }
    report(w_fr <= 1, "%-6s cpu_matvec fast vs ref within activation-quantization bound (worst %.3g of bound, %.3g raw)",
           name, w_fr, w_fr_f);
}

/* Rounding ties and the all-zero block, where a vector quantizer could round differently. */
static void test_quant_edges(void) {
    float x[512];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) + 0.5f;
    x[5] = 127.0f; /* amax 127: d = 1, id = 1, so x * id lands exactly on halves */
    for (int j = 32; j < 64; j++) x[j] = 0.0f;
    for (int j = 64; j < 512; j++) x[j] = (float)((j % 21) - 10) + 0.5f;
    x[100] = -127.0f; x[300] = 127.0f; x[301] = -127.0f;          /* signed-max ties in Q8_K */
    for (int k = 0; k < 2; k++) {
        if (hm_gemv_force_isa(isa_names[k])) { printf("SKIP quantizer ties %s\n", isa_names[k]); continue; }
        int ok = 1;
        const int at[2] = { HM_TYPE_Q8_0, HM_TYPE_Q4_K };
        for (int a = 0; a < 2; a++) {
            const size_t sz = hm_act_size(at[a], 512);
            void *p = malloc(sz), *ref = malloc(sz);
            hm_act_quantize(at[a], x, p, 512);
            hm_gemv_force_isa("scalar");
            hm_act_quantize(at[a], x, ref, 512);
            hm_gemv_force_isa(isa_names[k]);
            ok &= !memcmp(p, ref, sz);
            free(p); free(ref);
        }
        report(ok, "quantizer ties and zero blocks %s == scalar (Q8_0 and Q8_K)", isa_names[k]);
    }
}

/* hm_gemv_multi must give each matrix exactly what hm_gemv_rows gives, for any thread count. */
static void test_multi(void) {
    const int types[] = { HM_TYPE_Q4_K, HM_TYPE_Q8_0, HM_TYPE_Q6_K, HM_TYPE_F16, HM_TYPE_Q4_K };
    const int rows[] = { 129, 7, 300, 33, 1000 };
    enum { NM = 5 };
    mat m[NM];
    const hm_tensor *W[NM];
    const void *xq[NM];
    float *y[NM], *yr[NM];
    for (int i = 0; i < NM; i++) {
        mat_init(&m[i], types[i], rows[i], 512);
        W[i] = &m[i].W;
        y[i] = malloc(sizeof(float) * (size_t)rows[i]);
        yr[i] = malloc(sizeof(float) * (size_t)rows[i]);
    }
    hm_gemv_force_isa("scalar"); /* any ISA: both paths use the same one */
    for (int i = 0; i < NM; i++) {
        xq[i] = m[i].xq;
        hm_gemv_rows(W[i], xq[i], yr[i], 0, rows[i]);
    }
    int ok = 1;
    const int saved = omp_get_max_threads();
    for (int nt = 1; nt <= 7; nt++) {
        omp_set_num_threads(nt);
        for (int i = 0; i < NM; i++) poison(y[i], rows[i]);
        hm_gemv_multi(NM, W, xq, y);
        for (int i = 0; i < NM; i++) ok &= !memcmp(y[i], yr[i], sizeof(float) * (size_t)rows[i]);
    }
    omp_set_num_threads(saved);
    report(ok, "hm_gemv_multi == hm_gemv_rows for 5 mixed matrices, 1..7 threads");
    for (int i = 0; i < NM; i++) { free(y[i]); free(yr[i]); mat_free(&m[i]); }
}

int main(void) {
    rng_seed(0x9E3779B97F4A7C15ull);
    printf("# best ISA on this CPU: %s\n", hm_gemv_isa());
    for (size_t i = 0; i < sizeof test_types / sizeof test_types[0]; i++) {
        const hm_type_traits *tr = hm_type_get(test_types[i]);
        if (!tr || !tr->to_float || !tr->from_float) {
            printf("SKIP %s (no to_float/from_float in the table)\n", hm_type_name(test_types[i]));
            continue;
        }
        test_type(test_types[i]);
    }
    test_quant_edges();
    test_multi();
    /* an unsupported type makes hm_gemv refuse, so cpu_matvec takes the reference path */
    hm_tensor bad = { .type = HM_TYPE_Q8_K, .n_dims = 2, .ne = { 256, 1, 1, 1 } };
    float yb = 0;
    report(hm_gemv(&yb, &bad, NULL) == -1 && !hm_gemv_supported(HM_TYPE_Q8_K), "unsupported type is refused");
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
