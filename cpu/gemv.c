/* gemv.c - the fast CPU GEMV: activation format per weight type, the ISA table picked once at
 * start-up, and OpenMP partitioning (one matrix, or many MoE experts in one region). */
#include "gemv.h"
#include "dot.h"
#include "quant_blocks.h"
#include <assert.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* vec_dot activation type of each weight type, as in ggml's type traits (0: no fast kernel). */
static const struct { uint8_t ok; uint8_t act; } wtypes[HM_TYPE_COUNT] = {
    [HM_TYPE_F32]  = { 1, HM_TYPE_F32 },  [HM_TYPE_F16]  = { 1, HM_TYPE_F32 },  [HM_TYPE_BF16] = { 1, HM_TYPE_F32 },
    [HM_TYPE_Q4_0] = { 1, HM_TYPE_Q8_0 }, [HM_TYPE_Q4_1] = { 1, HM_TYPE_Q8_0 }, [HM_TYPE_Q5_0] = { 1, HM_TYPE_Q8_0 },
    [HM_TYPE_Q5_1] = { 1, HM_TYPE_Q8_0 }, [HM_TYPE_Q8_0] = { 1, HM_TYPE_Q8_0 }, [HM_TYPE_MXFP4] = { 1, HM_TYPE_Q8_0 },
    [HM_TYPE_Q2_K] = { 1, HM_TYPE_Q8_K }, [HM_TYPE_Q3_K] = { 1, HM_TYPE_Q8_K }, [HM_TYPE_Q4_K] = { 1, HM_TYPE_Q8_K },
    [HM_TYPE_Q5_K] = { 1, HM_TYPE_Q8_K }, [HM_TYPE_Q6_K] = { 1, HM_TYPE_Q8_K }, [HM_TYPE_IQ4_XS] = { 1, HM_TYPE_Q8_K },
};

/* Below this many weight bytes one thread is faster than waking the team. */
#define PAR_MIN_BYTES (64 * 1024)
/* Thread boundaries fall on multiples of this many rows so that no two threads write one cache
 * line of y (16 floats = 64 bytes). */
#define ROW_ALIGN 16

/* Prefetch distance: 4 KiB ahead measured best on the Sapphire Rapids device (bench/README.md:
 * 0 or 256 bytes lose 20-30% on Q4_K/Q8_0 at 16 threads). HM_GEMV_PF=bytes overrides it (0: off). */
int hm_gemv_pf = 4096;

static int g_mode = HM_KERNELS_FAST;
static hm_dot_isa g_isa; /* the table in use, holes filled from the lower ISAs (isa_install) */

void hm_kernels_set(int mode) { g_mode = mode == HM_KERNELS_REF ? HM_KERNELS_REF : HM_KERNELS_FAST; }
int hm_kernels_get(void) { return g_mode; }
const char *hm_gemv_isa(void) { return g_isa.name; }

/* ---- ISA choice ---- */

typedef struct { const hm_dot_isa *isa; int (*usable)(void); } isa_row;

static int usable_always(void) { return 1; }
#if defined(__x86_64__) || defined(__i386__)
static int usable_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
static int usable_avx512(void) {
    /* libgcc's checks include the OS saving zmm state (XGETBV) */
    return usable_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}
#endif

/* best last */
static const isa_row isas[] = {
    { &hm_dot_isa_scalar, usable_always },
#if defined(__x86_64__) || defined(__i386__)
    { &hm_dot_isa_avx2, usable_avx2 },
    { &hm_dot_isa_avx512, usable_avx512 },
#endif
};
#define N_ISAS ((int)(sizeof isas / sizeof isas[0]))

/* Installs ISA k; a type it has no kernel for takes the next lower ISA's (AVX-512 -> AVX2 -> scalar). */
static void isa_install(int k) {
    g_isa = *isas[k].isa;
    for (int j = k - 1; j >= 0; j--) {
        const hm_dot_isa *lower = isas[j].isa;
        for (int i = 0; i < HM_TYPE_COUNT; i++)
            if (!g_isa.dot[i]) g_isa.dot[i] = lower->dot[i];
        if (!g_isa.quant_q8_0) g_isa.quant_q8_0 = lower->quant_q8_0;
        if (!g_isa.quant_q8_K) g_isa.quant_q8_K = lower->quant_q8_K;
    }
}

int hm_gemv_force_isa(const char *name) {
    for (int i = 0; i < N_ISAS; i++)
        if (name && !strcmp(name, isas[i].isa->name)) {
            if (!isas[i].usable()) return -1;
            isa_install(i);
            return 0;
        }
    return -1;
}

/* Runs before main: the kernels never see a half-set table, and no call pays for CPUID. */
__attribute__((constructor)) static void gemv_init(void) {
    for (int i = N_ISAS - 1; i >= 0; i--)
        if (isas[i].usable()) {
            isa_install(i);
            break;
        }
    const char *env = getenv("HM_GEMV_ISA");
    if (env && *env) hm_gemv_force_isa(env); /* unknown or unsupported: keep the best one */
    const char *pf = getenv("HM_GEMV_PF");
    if (pf && *pf) hm_gemv_pf = atoi(pf) < 0 ? 0 : atoi(pf);
}

/* ---- activations ---- */

int hm_gemv_supported(int t) { return t >= 0 && t < HM_TYPE_COUNT && wtypes[t].ok; }
int hm_act_type(int t) { return hm_gemv_supported(t) ? wtypes[t].act : -1; }

size_t hm_act_size(int t, int64_t n) {
    return hm_gemv_supported(t) ? hm_row_size(wtypes[t].act, n) : 0;
}

void hm_act_quantize(int t, const float *x, void *xq, int64_t n) {
    assert(hm_act_size(t, n) > 0);
    switch (wtypes[t].act) {
    case HM_TYPE_Q8_0: g_isa.quant_q8_0(x, xq, n); break;
    case HM_TYPE_Q8_K: g_isa.quant_q8_K(x, xq, n); break;
    default: memcpy(xq, x, (size_t)n * sizeof(float)); break;
    }
}

/* ---- products ---- */

void hm_gemv_rows(const hm_tensor *W, const void *xq, float *y, int64_t r0, int64_t r1) {
    const int64_t n = W->ne[0];
    const size_t rs = hm_row_size(W->type, n);
    assert(hm_gemv_supported(W->type) && rs > 0);
    const hm_dot_fn dot = g_isa.dot[W->type];
    const uint8_t *p = (const uint8_t *)W->data + (size_t)r0 * rs;
    for (int64_t r = r0; r < r1; r++, p += rs) y[r] = dot(p, xq, n);
}

/* The activation buffer of the calling thread: grown, never shrunk, so a matvec allocates only
 * the first time it sees a larger x. */
static _Thread_local void *scratch;
static _Thread_local size_t scratch_size;

static void *scratch_get(size_t size) {
    if (size > scratch_size) {
        void *p = NULL;
        if (posix_memalign(&p, 64, size)) return NULL;
        free(scratch);
        scratch = p;
        scratch_size = size;
    }
    return scratch;
}

/* first row of thread t's share of rows, on a ROW_ALIGN boundary */
static int64_t split_rows(int64_t rows, int t, int nt) {
    const int64_t units = (rows + ROW_ALIGN - 1) / ROW_ALIGN;
    const int64_t r = units * t / nt * ROW_ALIGN;
    return r < rows ? r : rows;
}

int hm_gemv(float *y, const hm_tensor *W, const float *x) {
    const int64_t n = W->ne[0], rows = W->ne[1];
    const size_t asize = hm_act_size(W->type, n), rs = hm_row_size(W->type, n);
    if (!asize || !rs) return -1;
    const void *xq = x;
    if (wtypes[W->type].act != HM_TYPE_F32) { /* float weights read x as it is */
        void *buf = scratch_get(asize);
        if (!buf) return -1;
        hm_act_quantize(W->type, x, buf, n);
        xq = buf;
    }
#pragma omp parallel if ((size_t)rows * rs >= PAR_MIN_BYTES)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        hm_gemv_rows(W, xq, y, split_rows(rows, t, nt), split_rows(rows, t + 1, nt));
    }
    return 0;
}

/* A position in the concatenation of all matrices' rows: matrix m, row r (r == rows of m is the
 * same place as row 0 of m + 1). */
typedef struct { int m; int64_t r; } multi_pos;

/* Where thread t of nt starts: byte offset total*t/nt, moved to a ROW_ALIGN row boundary of the
 * matrix it falls in. Monotonic in t, so consecutive threads' ranges tile every row once. */
static multi_pos multi_split(int n, const hm_tensor *const *W, size_t total, int t, int nt) {
    if (t >= nt) return (multi_pos){ n, 0 };
    size_t pos = (size_t)((uint64_t)total * (uint64_t)t / (uint64_t)nt), acc = 0; /* total < 2^54 */
    for (int m = 0; m < n; m++) {
        const size_t rs = hm_row_size(W[m]->type, W[m]->ne[0]), bytes = rs * (size_t)W[m]->ne[1];
        if (pos < acc + bytes) {
            const int64_t rows = W[m]->ne[1];
            int64_t r = (int64_t)((pos - acc) / rs + ROW_ALIGN / 2) / ROW_ALIGN * ROW_ALIGN;
            return (multi_pos){ m, r < rows ? r : rows };
        }
        acc += bytes;
    }
    return (multi_pos){ n, 0 };
}

void hm_gemv_multi(int n, const hm_tensor *const *W, const void *const *xq, float *const *y) {
    size_t total = 0;
    for (int m = 0; m < n; m++) {
        assert(hm_gemv_supported(W[m]->type) && hm_row_size(W[m]->type, W[m]->ne[0]) > 0);
        total += hm_row_size(W[m]->type, W[m]->ne[0]) * (size_t)W[m]->ne[1];
    }
#pragma omp parallel if (total >= PAR_MIN_BYTES)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const multi_pos a = multi_split(n, W, total, t, nt), b = multi_split(n, W, total, t + 1, nt);
        for (int m = a.m; m <= b.m && m < n; m++) {
            const int64_t r0 = m == a.m ? a.r : 0, r1 = m == b.m ? b.r : W[m]->ne[1];
            if (r0 < r1) hm_gemv_rows(W[m], xq[m], y[m], r0, r1);
        }
    }
}
