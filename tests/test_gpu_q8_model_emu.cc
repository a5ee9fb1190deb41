/* test_gpu_q8_model_emu.cc - GEMV mode 1 (the q8 path, gpu/gemv_q8.cuh) at model level without a
 * GPU: the CPU reference forward with every product the q8 path takes computed by the device
 * helpers (q8_quant32 records, the chunk loaders, each type's dp4a dot, run on the CPU through
 * emu/ as in test_gpu_decode_emu) in gemv_q8_kernel's order (a lane's chunks, then the butterfly);
 * other products stay on the reference, as the GPU's F32-activation kernels. Against the reference
 * kernels and beside the CPU fast kernels, on generated tiny models: test_gpu_model's acceptance
 * for mode 1 (max rel err over 40 positions at most 2x the fast kernels', or 1e-4) checked in CI.
 *
 * The expert choices of both are pinned to the reference's (cpu_state.replay). Left free, a router
 * near-tie flips under the activations' quantization (the router logits, rms 1.5, move by 5e-3 rms
 * through the q8 products before them, both paths alike; the 160 choices of tiny q4_0 seed 1 have
 * top-k margins down to 3e-4, 1% under 1.2e-3) and one flip moves that position's logits by
 * 0.01-0.1 relative: the max over positions then says which path drew a flip, not how precise its
 * products are (tiny q4_0 seed 1, free: q8 0.0511 vs fast 0.0214, the q8 path's flip at a margin of
 * 1.2e-3 that the fast kernels' did not take; pinned: 0.0096 vs 0.0118). The free-routing numbers
 * and the choices unlike the reference's are printed beside the judged ones, not judged. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../gpu/gemv_q8.cuh"
extern "C" {
#include "cpu.h"
#include "gemv.h"
#include "loader.h"
#include "quant_blocks.h"
}

#define NPOS 40
static int n_pass, n_fail;

/* ---- the q8 GEMV of gemv_q8.cu, on the CPU ---- */

template <class T, bool B32>
static void q8_gemv(const hm_tensor *W, const float *x, float *y) {
    const int ncols = (int)W->ne[0], nrows = (int)W->ne[1], nch = ncols / Q8_CHUNK;
    const int nbl = B32 ? ncols % Q8_CHUNK / 32 * (T::CB / 8) : 0, nchunks = nch + (nbl > 0);
    const size_t rs = (size_t)nch * T::CB + nbl;
    /* the records q8_quantize_x writes: groups past ncols (of a partial last chunk) zero */
    uint8_t *rec = (uint8_t *)calloc((size_t)nchunks, Q8_REC);
    for (int b = 0; b < ncols / 32; b++) {
        int8_t q[32];
        float d;
        uint32_t s01;
        q8_quant32(x + 32 * b, q, &d, &s01);
        uint8_t *r = rec + (size_t)(b / 8) * Q8_REC;
        memcpy(r + 32 * (b % 8), q, 32);
        memcpy(r + 256 + 8 * (b % 8), &d, 4);
        memcpy(r + 260 + 8 * (b % 8), &s01, 4);
    }
    /* the launcher's choice for a plain matrix (an expert launch also counts the token's slots, and
     * two matrices for SwiGLU, so it may take fewer lanes: another order, the same bound) */
    const int L = 1 << q8_lanes_shift_for(nchunks, nrows, Q8_LANES_H200);
    alignas(16) uint8_t buf[(T::CB + 15) / 16 * 16];
    for (int r = 0; r < nrows; r++) {
        const uint8_t *row = (const uint8_t *)W->data + (size_t)r * rs;
        float acc[32];
        for (int li = 0; li < L; li++) {
            acc[li] = 0.f;
            for (int c = li; c < nchunks; c += L) {
                uint32_t w[q8_nw(T::CB, 1)];
                memset(buf, 0, sizeof buf);
                memcpy(buf, row + (size_t)c * T::CB, c < nch ? T::CB : nbl);
                if (c < nch) q8_load_chunk<T::CB, 1>(buf, w);
                else q8_load_part<T::CB>(buf, w, nbl);
                acc[li] += T::dot(w, rec + (size_t)c * Q8_REC);
            }
        }
        for (int o = L >> 1; o > 0; o >>= 1) { /* __shfl_xor_sync butterfly: lane 0's sum */
            float n[32];
            for (int li = 0; li < L; li++) n[li] = acc[li] + acc[li ^ o];
            memcpy(acc, n, sizeof n);
        }
        y[r] = acc[0];
    }
    free(rec);
}

/* gemv_q8_try's choice: the types of the q8 path, ncols a multiple of 32 (32-element blocks) or 256 */
static int q8_hook(float *y, const hm_tensor *W, const float *x) {
    const int64_t n = W->ne[0];
    if (n <= 0 || n > Q8_MAX_NCOLS || n % 32) return 1;
    switch (W->type) {
    case HM_TYPE_Q4_0: q8_gemv<Q8W_Q4_0, true>(W, x, y); return 0;
    case HM_TYPE_Q4_1: q8_gemv<Q8W_Q4_1, true>(W, x, y); return 0;
    case HM_TYPE_Q5_0: q8_gemv<Q8W_Q5_0, true>(W, x, y); return 0;
    case HM_TYPE_Q5_1: q8_gemv<Q8W_Q5_1, true>(W, x, y); return 0;
    case HM_TYPE_Q8_0: q8_gemv<Q8W_Q8_0, true>(W, x, y); return 0;
    case HM_TYPE_MXFP4: q8_gemv<Q8W_MXFP4, true>(W, x, y); return 0;
    default: break;
    }
    if (n % Q8_CHUNK) return 1;
    switch (W->type) {
    case HM_TYPE_Q2_K: q8_gemv<Q8W_Q2_K, false>(W, x, y); return 0;
    case HM_TYPE_Q3_K: q8_gemv<Q8W_Q3_K, false>(W, x, y); return 0;
    case HM_TYPE_Q4_K: q8_gemv<Q8W_Q4_K, false>(W, x, y); return 0;
    case HM_TYPE_Q5_K: q8_gemv<Q8W_Q5_K, false>(W, x, y); return 0;
    case HM_TYPE_Q6_K: q8_gemv<Q8W_Q6_K, false>(W, x, y); return 0;
    case HM_TYPE_IQ4_XS: q8_gemv<Q8W_IQ4_XS, false>(W, x, y); return 0;
    default: return 1;
    }
}

/* ---- runs ---- */

enum { K_REF, K_FAST, K_Q8 };
static int *g_ids; /* the step's (n_layer, k) choices, -1 for dense layers */
static void on_route(void *ud, int layer, int pos, const int *idx, const float *w, int k) {
    (void)ud; (void)pos; (void)w;
    memcpy(g_ids + layer * k, idx, sizeof(int) * k);
}

/* logits[NPOS][V] and choices[NPOS][L*k] of m on a fixed token sequence (test_gpu_model's), the
 * choices replaced by pin's (NULL: free) */
static int run(const hm_model *m, int kind, const int *pin, float *logits, int *ids) {
    const hm_config *c = &m->cfg;
    const int V = c->n_vocab, Lk = c->n_layer * c->n_expert_used;
    cpu_state s;
    if (cpu_state_init(&s, c, NPOS)) return -1;
    s.route_cb = on_route;
    hm_kernels_set(kind == K_FAST ? HM_KERNELS_FAST : HM_KERNELS_REF);
    cpu_matvec_hook = kind == K_Q8 ? q8_hook : NULL;
    uint64_t x = 99;
    for (int i = 0; i < NPOS; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        g_ids = ids + (size_t)i * Lk;
        for (int j = 0; j < Lk; j++) g_ids[j] = -1;
        s.replay = pin ? pin + (size_t)i * Lk : NULL;
        cpu_forward(m, &s, (int32_t)(x % (uint64_t)V), i, logits + (size_t)i * V);
    }
    cpu_matvec_hook = NULL;
    hm_kernels_set(HM_KERNELS_FAST);
    cpu_state_free(&s);
    return 0;
}

/* max over positions of max |a - ref| / max |ref| (test_gpu_model's measure) */
static double max_rel(const float *a, const float *ref, int V) {
    double worst = 0;
    for (int i = 0; i < NPOS; i++) {
        double md = 0, mr = 0;
        for (int v = 0; v < V; v++) {
            const double d = fabs((double)a[(size_t)i * V + v] - ref[(size_t)i * V + v]);
            if (!(d <= md)) md = d;
            if (fabs(ref[(size_t)i * V + v]) > mr) mr = fabs(ref[(size_t)i * V + v]);
        }
        if (!(md / mr <= worst)) worst = md / mr;
    }
    return worst;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* (position, layer) choices whose expert sets differ from ref's */
static int flips(const int *ids, const int *ref, int nrow, int k) {
    int n = 0;
    for (int r = 0; r < nrow; r++) {
        int a[64], b[64];
        memcpy(a, ids + (size_t)r * k, sizeof(int) * k);
        memcpy(b, ref + (size_t)r * k, sizeof(int) * k);
        qsort(a, (size_t)k, sizeof(int), cmp_int);
        qsort(b, (size_t)k, sizeof(int), cmp_int);
        n += memcmp(a, b, sizeof(int) * k) != 0;
    }
    return n;
}

static void check_model(const char *label, const char *gen_args) {
    char path[4096], cmd[8192];
    snprintf(path, sizeof path, "%s/test_gpu_q8_model_emu.gguf", HM_BUILD_DIR);
    snprintf(cmd, sizeof cmd, "'%s/hotmoe-gen' %s -o '%s' >/dev/null 2>&1", HM_BUILD_DIR, gen_args, path);
    hm_model m;
    hm_error e;
    if (system(cmd) != 0) { printf("FAIL %s: cannot generate the model (%s)\n", label, cmd); n_fail++; return; }
    if (model_load(&m, path, &e)) { printf("FAIL %s: %s\n", label, e.msg); n_fail++; remove(path); return; }
    const hm_config *c = &m.cfg;
    const int V = c->n_vocab, k = c->n_expert_used, Lk = c->n_layer * k;
    float *lg[5];
    int *ids[5];
    for (int r = 0; r < 5; r++) {
        lg[r] = (float *)malloc(sizeof(float) * NPOS * V);
        ids[r] = (int *)malloc(sizeof(int) * NPOS * Lk);
    }
    /* 0 ref; 1 fast, 2 q8 pinned to ref's choices; 3 fast, 4 q8 free */
    if (k > 64 || run(&m, K_REF, NULL, lg[0], ids[0]) || run(&m, K_FAST, ids[0], lg[1], ids[1]) ||
        run(&m, K_Q8, ids[0], lg[2], ids[2]) || run(&m, K_FAST, NULL, lg[3], ids[3]) || run(&m, K_Q8, NULL, lg[4], ids[4])) {
        printf("FAIL %s: cannot run\n", label);
        n_fail++;
    } else {
        const double f = max_rel(lg[1], lg[0], V), q = max_rel(lg[2], lg[0], V);
        const double ff = max_rel(lg[3], lg[0], V), qf = max_rel(lg[4], lg[0], V);
        const int ok = (q <= 2 * f || q <= 1e-4) && flips(ids[1], ids[0], NPOS * c->n_layer, k) == 0 &&
                       flips(ids[2], ids[0], NPOS * c->n_layer, k) == 0;
        printf("%s %s: routing pinned: q8 vs ref max rel err %.3g (<= 2x fast), fast %.3g (ratio %.2f) | free routing "
               "(not judged): q8 %.3g, fast %.3g (ratio %.2f), choices unlike the reference's: q8 %d, fast %d of %d\n",
               ok ? "PASS" : "FAIL", label, q, f, f > 0 ? q / f : 0, qf, ff, ff > 0 ? qf / ff : 0,
               flips(ids[4], ids[0], NPOS * c->n_layer, k), flips(ids[3], ids[0], NPOS * c->n_layer, k),
               NPOS * (c->n_layer - c->n_dense_lead));
        ok ? n_pass++ : n_fail++;
    }
    for (int r = 0; r < 5; r++) { free(lg[r]); free(ids[r]); }
    model_free(&m);
    remove(path);
}

int main(void) {
    static const struct { const char *label, *args; } models[] = {
        /* the fixtures of tools/device/gpu_check.sh */
        { "tiny q8_0", "--shape tiny --mix q8_0 --seed 1" },
        { "tiny q4_0", "--shape tiny --mix q4_0 --seed 1" },
        { "tiny q4_k_m", "--shape tiny --mix q4_k_m --seed 1" },
        { "tiny q6_k", "--shape tiny --mix q6_k --seed 1" },
        { "tiny q5_k_m", "--shape tiny --mix q5_k_m --seed 1" },
        { "tiny q3_k_m", "--shape tiny --mix q3_k_m --seed 1" },
        { "tiny q2_k", "--shape tiny --mix q2_k --seed 1" },
        { "tiny mxfp4", "--shape tiny --mix mxfp4 --seed 1" },
        { "tiny iq4_xs", "--shape tiny --mix iq4_xs --seed 1" },
        { "tinyglm q4_k_m (seed 2)", "--shape tinyglm --mix q4_k_m --seed 2" },
        /* the other 32-element types, more seeds of Q4_0, and Q4_0 expert down rows of 352 (a
         * partial last chunk: q8_load_part) */
        { "tiny q4_1", "--shape tiny --mix q4_1 --seed 1" },
        { "tiny q5_0", "--shape tiny --mix q5_0 --seed 1" },
        { "tiny q5_1", "--shape tiny --mix q5_1 --seed 1" },
        { "tiny q4_0 (seed 2)", "--shape tiny --mix q4_0 --seed 2" },
        { "tiny q4_0 (seed 5)", "--shape tiny --mix q4_0 --seed 5" },
        { "tiny q3_k_m ff_exp 352", "--shape tiny --custom ff_exp=352 --mix q3_k_m --seed 1" },
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) check_model(models[i].label, models[i].args);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
