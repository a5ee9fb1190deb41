/* test_quant_model.c - model level on quantized weights. For every block type (and the Q4_K_M /
 * Q3_K_M mixes) the generated `tiny` model (rows of 256) is quantized by our converter; with the
 * reference kernels its logits must equal those of the same model dequantized exactly to F32
 * within 1e-4 (max |diff| / max |ref|) at every position. Reported beside it: the fast kernels'
 * error against that reference, and the KL divergence of each quantization to the F32 original. */
#include "convert.h"
#include "gemv.h"
#include "loader.h"
#include "quant.h"
#include "quantize.h"
#include "runner.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPOS 24
static int n_pass, n_fail;

/* logits[NPOS][V] of m on a fixed token sequence, with the given kernels */
static float *run(const hm_model *m, int kernels) {
    int V = m->cfg.n_vocab;
    hm_runner r; hm_error e;
    hm_kernels_set(kernels);
    if (runner_init(&r, m, HM_DEVICE_CPU, NPOS, &e)) { printf("FAIL runner: %s\n", e.msg); return NULL; }
    float *out = malloc(sizeof(float) * V * NPOS);
    uint64_t x = 7;
    for (int i = 0; i < NPOS; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        for (int v = 0; v < V; v++) out[(size_t)i * V + v] = NAN;
        runner_forward(&r, (int32_t)(x % (uint64_t)V), i, out + (size_t)i * V, &e);
    }
    runner_free(&r);
    hm_kernels_set(HM_KERNELS_FAST);
    return out;
}

static double max_rel(const float *a, const float *ref, int V) {
    double worst = 0;
    for (int i = 0; i < NPOS; i++) {
        double md = 0, mr = 0;
        for (int v = 0; v < V; v++) {
            double d = fabs((double)a[(size_t)i * V + v] - ref[(size_t)i * V + v]);
            if (!(d <= md)) md = d;
            if (fabs(ref[(size_t)i * V + v]) > mr) mr = fabs(ref[(size_t)i * V + v]);
        }
        if (!(md / mr <= worst)) worst = md / mr;
    }
    return worst;
}

/* mean over positions of KL(softmax(p) || softmax(q)) */
static double kl(const float *p, const float *q, int V) {
    double tot = 0;
    for (int i = 0; i < NPOS; i++) {
        const float *a = p + (size_t)i * V, *b = q + (size_t)i * V;
        double ma = a[0], mb = b[0], sa = 0, sb = 0, k = 0;
        for (int v = 1; v < V; v++) { if (a[v] > ma) ma = a[v]; if (b[v] > mb) mb = b[v]; }
        for (int v = 0; v < V; v++) { sa += exp(a[v] - ma); sb += exp(b[v] - mb); }
        for (int v = 0; v < V; v++) {
            double la = a[v] - ma - log(sa), lb = b[v] - mb - log(sb);
            k += exp(la) * (la - lb);
        }
        tot += k;
    }
    return tot / NPOS;
}

int main(void) {
    char src[4096], cmd[8192];
    snprintf(src, sizeof src, "%s/test_quant_model_f32.gguf", HM_BUILD_DIR);
    snprintf(cmd, sizeof cmd, "'%s/hotmoe-gen' --shape tiny --mix f32 --seed 5 -o '%s' >/dev/null 2>&1", HM_BUILD_DIR, src);
    if (system(cmd) != 0) { printf("FAIL cannot generate the tiny model (%s)\n", cmd); return 1; }
    hm_model base; hm_error e;
    if (model_load(&base, src, &e)) { printf("FAIL %s\n", e.msg); return 1; }
    int V = base.cfg.n_vocab;
    float *f32 = run(&base, HM_KERNELS_REF);
    static const struct { const char *name; int type; } kinds[] = {
        { "Q8_0", HM_TYPE_Q8_0 }, { "Q4_0", HM_TYPE_Q4_0 }, { "Q4_1", HM_TYPE_Q4_1 }, { "Q5_0", HM_TYPE_Q5_0 },
        { "Q5_1", HM_TYPE_Q5_1 }, { "Q2_K", HM_TYPE_Q2_K }, { "Q3_K", HM_TYPE_Q3_K }, { "Q4_K", HM_TYPE_Q4_K },
        { "Q5_K", HM_TYPE_Q5_K }, { "Q6_K", HM_TYPE_Q6_K }, { "MXFP4", HM_TYPE_MXFP4 }, { "IQ4_XS", HM_TYPE_IQ4_XS },
        { "BF16", HM_TYPE_BF16 }, { "F16", HM_TYPE_F16 }, { "Q4_K_M", -1 }, { "Q3_K_M", -1 },
    };
    printf("%-7s %12s %14s %12s\n", "type", "ref err", "fast err", "KL to F32");
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char q[4096], dq[4096];
        snprintf(q, sizeof q, "%s/test_quant_model_q.gguf", HM_BUILD_DIR);
        snprintf(dq, sizeof dq, "%s/test_quant_model_dq.gguf", HM_BUILD_DIR);
        int type = kinds[k].type, f32t = HM_TYPE_F32;
        const quant_mix *mx = type < 0 ? quant_mix_find(kinds[k].name) : NULL;
        convert_opts qo = { mx ? quant_mix_choose : convert_policy_outtype, mx ? (void *)mx : (void *)&type, -1, 0 };
        convert_opts fo = { convert_policy_outtype, &f32t, -1, 0 };
        hm_model mq, mdq;
        if (convert_write_gguf(&base, q, &qo, &e) || model_load(&mq, q, &e)) { printf("FAIL %s: %s\n", kinds[k].name, e.msg); n_fail++; continue; }
        /* every matrix of the expert table really has the type (pure types) */
        int typed = mx || mq.layers[0].experts[0].host.gate.type == type;
        if (convert_write_gguf(&mq, dq, &fo, &e) || model_load(&mdq, dq, &e)) { printf("FAIL %s: %s\n", kinds[k].name, e.msg); n_fail++; model_free(&mq); continue; }
        float *ref = run(&mdq, HM_KERNELS_REF), *qr = run(&mq, HM_KERNELS_REF), *qf = run(&mq, HM_KERNELS_FAST);
        double er = max_rel(qr, ref, V), ef = max_rel(qf, ref, V), d = kl(f32, qf, V);
        int ok = typed && er <= 1e-4 && isfinite(ef) && isfinite(d);
        printf("%-7s %12.3g %14.3g %12.4g  %s\n", kinds[k].name, er, ef, d, ok ? "PASS" : "FAIL (ref err > 1e-4, wrong type or not finite)");
        ok ? n_pass++ : n_fail++;
        free(ref); free(qr); free(qf); model_free(&mq); model_free(&mdq);
        remove(q); remove(dq);
    }
    free(f32); model_free(&base); remove(src);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
