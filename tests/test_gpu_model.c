/* test_gpu_model.c - model level, GPU vs CPU reference: logits at every position of every
 * fixture (F32, BF16, F16 as HF and as GGUF, and each quant type on the generated tiny model)
 * within 1e-3 relative (max |diff| / max |ref|) with the GPU's exact GEMV path (mode 0); the
 * quantized models again with the default GEMV path (mode 1: activations quantized to int8, as the
 * CPU fast kernels do), within 2x the CPU fast kernels' own error (the [cuda] acceptance). Exits 77 (skipped) without a
 * CUDA device. */
#include "convert.h"
#include "gemv.h"
#include "gpu.h"
#ifdef HOTMOE_HAVE_CUDA
#include "gpu_gemv.h"
#endif
#include "loader.h"
#include "quant.h"
#include "runner.h"
#include "test_util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* CPU reference kernels vs GPU (must agree within 1e-3), and, reported beside it, the CPU fast
 * kernels' error against the same reference (the GPU's must be at most twice that, or 1e-3).
 * q8: the GPU in GEMV mode 1, whose error must be at most 2x the fast kernels' (or 1e-4). */
static void compare(const char *label, const hm_model *m, int q8) {
    hm_runner c, f, g; hm_error e;
    int n = 40, V = m->cfg.n_vocab;
#ifdef HOTMOE_HAVE_CUDA
    gpu_gemv_set_mode(q8); /* before runner_init: the decode graph captures the mode */
#endif
    if (runner_init(&c, m, HM_DEVICE_CPU, n, &e) || runner_init(&f, m, HM_DEVICE_CPU, n, &e) ||
        runner_init(&g, m, HM_DEVICE_CUDA, n, &e)) {
        printf("FAIL %s: %s\n", label, e.msg); n_fail++; return;
    }
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V), *q = malloc(sizeof(float) * V);
    double worst = 0, worst_fast = 0; int same_argmax = 1;
    uint64_t x = 99;
    for (int i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int32_t t = (int32_t)(x % (uint64_t)V);
        for (int v = 0; v < V; v++) b[v] = NAN;
        hm_kernels_set(HM_KERNELS_FAST);
        int rc = runner_forward(&f, t, i, q, &e);
        hm_kernels_set(HM_KERNELS_REF);
        if (rc || runner_forward(&c, t, i, a, &e) || runner_forward(&g, t, i, b, &e)) { printf("FAIL %s: %s\n", label, e.msg); n_fail++; goto out; }
        int ia = 0, ib = 0;
        for (int v = 0; v < V; v++) { if (a[v] > a[ia]) ia = v; if (b[v] > b[ib]) ib = v; }
        same_argmax &= ia == ib;
        double r = max_rel_err(b, a, V), rf = max_rel_err(q, a, V);
        if (!(r <= worst)) worst = r;
        if (!(rf <= worst_fast)) worst_fast = rf;
    }
    int ok = q8 ? worst <= 2 * worst_fast || worst <= 1e-4 : worst <= 1e-3 && (worst <= 2 * worst_fast || worst <= 1e-4);
    printf("%s %s%s: GPU vs CPU ref over %d positions: max rel err %.3g (%s); CPU fast kernels vs ref %.3g (ratio %.2f); argmax %s\n",
           ok ? "PASS" : "FAIL", label, q8 ? " (GEMV mode 1)" : "", n, worst, q8 ? "<= 2x fast" : "<= 1e-3", worst_fast,
           worst_fast > 0 ? worst / worst_fast : 0, same_argmax ? "identical" : "differs");
    ok ? n_pass++ : n_fail++;
out:
    free(a); free(b); free(q); runner_free(&c); runner_free(&f); runner_free(&g);
}

int main(int argc, char **argv) {
    if (!gpu_built() || gpu_device_count() == 0) { printf("SKIP: no CUDA device (test_gpu_model needs a GPU)\n"); return 77; }
    /* the CPU side runs the reference kernels (exact dequantization, F32 activations): the GPU
     * kernels dequantize exactly too, so the two differ only by summation order */
    hm_kernels_set(HM_KERNELS_REF);
    static const char *fixtures[] = { "qwen3moe", "qwen3moe-bf16", "glm4moe", "glm4moe-f16" };
    for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
        char dir[4096], gg[4096], label[4200];
        snprintf(dir, sizeof dir, "%s/fixtures/%s", HM_TESTS_DIR, fixtures[f]);
        hm_model m; hm_error e;
        if (model_load(&m, dir, &e)) { printf("FAIL %s\n", e.msg); n_fail++; continue; }
        snprintf(label, sizeof label, "%s (HF)", fixtures[f]);
        compare(label, &m, 0);
        snprintf(gg, sizeof gg, "%s/test_gpu_%s.gguf", HM_BUILD_DIR, fixtures[f]);
        int rc = convert_write_gguf(&m, gg, NULL, &e);
        model_free(&m);
        if (rc || model_load(&m, gg, &e)) { printf("FAIL %s\n", e.msg); n_fail++; continue; }
        snprintf(label, sizeof label, "%s (GGUF)", fixtures[f]);
        compare(label, &m, 0);
        model_free(&m);
    }
    /* extra models given on the command line (e.g. the quantized tiny models of the device script) */
    for (int i = 1; i < argc; i++) {
        hm_model m; hm_error e;
        if (model_load(&m, argv[i], &e)) { printf("FAIL %s\n", e.msg); n_fail++; continue; }
        compare(argv[i], &m, 0);
        compare(argv[i], &m, 1);
        model_free(&m);
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
