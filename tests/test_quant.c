/* test_quant.c - block formats against gguf-py: dequantization bit for bit, reference quantizers
 * byte for byte (gguf-py's bytes where it has a quantizer, else ggml C's bytes recorded at generation
 * time, or a numpy transcription for Q8_K), and each quantizer's RMS error under a per-type bound.
 * Reference data: tests/quant/<TYPE>.bin, written by tools/quant_reference.py, which runs
 * `test_quant --dump-quant DIR` to get our quantizer's bytes for the types gguf-py cannot quantize. */
#include "quant.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HM_TESTS_DIR
#define HM_TESTS_DIR "tests"
#endif

/* How the reference bytes of a file's quantization section were made. */
enum { Q_GGUF_PY = 0, Q_GOLDEN = 1, Q_NUMPY_REF = 2, Q_GGML_C = 3 };
static const char *q_kind_name[] = { "gguf-py", "golden", "numpy-ref", "ggml-c" };

typedef struct {
    int type;
    double rms_bound; /* RMS(dequant - x) / RMS(x), averaged over blocks, for our quantizer */
} type_case;

static const type_case cases[] = {
    { HM_TYPE_Q4_0, 0.12 }, { HM_TYPE_Q4_1, 0.10 }, { HM_TYPE_Q5_0, 0.06 }, { HM_TYPE_Q5_1, 0.05 },
    { HM_TYPE_Q8_0, 0.01 }, { HM_TYPE_Q2_K, 0.30 }, { HM_TYPE_Q3_K, 0.16 }, { HM_TYPE_Q4_K, 0.08 },
    { HM_TYPE_Q5_K, 0.04 }, { HM_TYPE_Q6_K, 0.02 }, { HM_TYPE_Q8_K, 0.012 }, { HM_TYPE_IQ4_XS, 0.08 },
    { HM_TYPE_MXFP4, 0.15 },
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* ---- deterministic inputs, mirrored exactly in tools/quant_reference.py ---- */

/* splitmix64 used as a counter-based generator: value number ctr of stream seed */
static uint64_t mix64(uint64_t seed, uint64_t ctr) {
    uint64_t z = seed + (ctr + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0,1), exactly representable */
static float uni(uint64_t seed, uint64_t ctr) { return (float)(mix64(seed, ctr) >> 40) * 0x1p-24f; }

#define N_PROFILES 10
enum { PROF_ZERO = 4, PROF_TINY = 7 }; /* left out of the RMS statistics */

/* x[0 .. nblocks*blck): block b follows profile b % 10 (uniform, gaussian-ish at several scales,
 * zero, outlier, positive, tiny, constant, sparse grid values). Only exact float ops, so Python matches. */
static void gen_inputs(uint64_t seed, int blck, int nblocks, float *x) {
    const uint64_t bseed = seed ^ 0xABCDEFull;
    for (int b = 0; b < nblocks; b++) {
        const int prof = b % N_PROFILES;
        const float r0 = uni(bseed, 2 * (uint64_t)b), r1 = uni(bseed, 2 * (uint64_t)b + 1);
        float *xb = x + (size_t)b * blck;
        for (int e = 0; e < blck; e++) {
            const uint64_t c = 3 * ((uint64_t)b * blck + e);
            const float u0 = uni(seed, c), u1 = uni(seed, c + 1), u2 = uni(seed, c + 2);
            const float g = ((u0 + u1) + u2 - 1.5f) * 2.0f;
            float v;
            switch (prof) {
            case 0: v = u0 * 2.0f - 1.0f; break;
            case 1: v = g; break;
            case 2: v = g * 0x1p-7f; break;
            case 3: v = g * 64.0f; break;
            case 4: v = 0.0f; break;
            case 5: v = g; break;
            case 6: v = u0 + 0.5f; break;
            case 7: v = g * 0x1p-12f; break;
            case 8: v = r0 * 2.0f - 1.0f; break;
            default: v = u1 < 0.25f ? 0.0f : floorf(g * 4.0f) * 0.25f; break; /* sparse, on a grid: ties */
            }
            xb[e] = v;
        }
        if (prof == 5) xb[(int)(r0 * (float)blck)] = r1 < 0.5f ? -12.0f : 12.0f;
    }
}

/* the quantization section's size and seed, shared by dump mode and the reference script */
static int q_blocks_for(const hm_type_traits *tr) { return tr->blck == 32 ? 200 : 100; }
static uint64_t q_seed_for(int type) { return 0x51AB0000ull + (uint64_t)type; }

/* ---- reference file ---- */

typedef struct {
    uint32_t type, blck, type_size, n_deq, n_q, q_kind;
    uint64_t q_seed;
    uint8_t *deq_raw;  /* n_deq blocks */
    float *deq_out;    /* n_deq*blck: gguf-py's dequantization of deq_raw */
    uint8_t *q_bytes;  /* n_q blocks: reference quantization of gen_inputs(q_seed) */
    float *q_deq;      /* n_q*blck: gguf-py's dequantization of q_bytes */
    uint8_t *buf;
} ref_file;

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* 0 on success; on failure prints why and returns -1 */
static int ref_load(ref_file *r, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/quant/%s.bin", HM_TESTS_DIR, name);
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "rb");
    if (!f) { printf("  cannot open %s (run tools/quant_reference.py)\n", path); return -1; }
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    r->buf = malloc((size_t)size);
    if (size < 40 || !r->buf || fread(r->buf, 1, (size_t)size, f) != (size_t)size) {
        printf("  cannot read %s\n", path); fclose(f); return -1;
    }
    fclose(f);
    const uint8_t *p = r->buf;
    if (memcmp(p, "HMQ1", 4)) { printf("  %s: bad magic\n", path); return -1; }
    r->type = rd32(p + 4); r->blck = rd32(p + 8); r->type_size = rd32(p + 12);
    r->n_deq = rd32(p + 16); r->n_q = rd32(p + 20);
    r->q_seed = rd32(p + 24) | (uint64_t)rd32(p + 28) << 32;
    r->q_kind = rd32(p + 32);
    const size_t raw = (size_t)r->n_deq * r->type_size, deq = (size_t)r->n_deq * r->blck * 4;
    const size_t qb = (size_t)r->n_q * r->type_size, qd = (size_t)r->n_q * r->blck * 4;
    if ((size_t)size != 40 + raw + deq + qb + qd || r->q_kind > Q_GGML_C) {
        printf("  %s: size %ld does not match its header\n", path, size); return -1;
    }
    r->deq_raw = r->buf + 40;
    r->deq_out = malloc(deq ? deq : 1); memcpy(r->deq_out, r->deq_raw + raw, deq);
    r->q_bytes = r->deq_raw + raw + deq;
    r->q_deq = malloc(qd ? qd : 1); memcpy(r->q_deq, r->q_bytes + qb, qd);
    return 0;
}

static void ref_free(ref_file *r) { free(r->buf); free(r->deq_out); free(r->q_deq); }

/* ---- checks ---- */

static void poison_f32(float *x, size_t n) {
    const uint32_t nan = 0x7FC00000u;
    for (size_t i = 0; i < n; i++) memcpy(&x[i], &nan, 4);
}

/* number of blocks of blck floats in which got and want differ in any bit */
static int count_bad_blocks(const float *got, const float *want, size_t nblocks, int blck, const char *what) {
    int bad = 0;
    for (size_t b = 0; b < nblocks; b++) {
        for (int j = 0; j < blck; j++) {
            const size_t i = b * blck + j;
            if (memcmp(&got[i], &want[i], 4)) {
                if (bad < 3) printf("    %s: block %zu elem %d: got %.9g want %.9g\n", what, b, j, got[i], want[i]);
                bad++;
                break;
            }
        }
    }
    return bad;
}

typedef struct { int deq_blocks, deq_bad, q_blocks, q_bad, qdeq_bad, other_bad; double rms; const char *q_ref; } type_result;

static void check_type(const type_case *tc, type_result *res) {
    const hm_type_traits *tr = hm_type_get(tc->type);
    memset(res, 0, sizeof *res);
    res->rms = NAN;
    res->q_ref = "?";
    if (!tr || !tr->to_float) { printf("  %s: no to_float\n", hm_type_name(tc->type)); res->other_bad++; return; }
    ref_file r;
    if (ref_load(&r, tr->name)) { res->other_bad++; ref_free(&r); return; }
    if (r.type != (uint32_t)tc->type || r.blck != (uint32_t)tr->blck || r.type_size != tr->type_size) {
        printf("  %s: file says type %u blck %u size %u, table says %d %d %zu\n", tr->name,
               r.type, r.blck, r.type_size, tc->type, tr->blck, tr->type_size);
        res->other_bad++; ref_free(&r); return;
    }
    res->q_ref = q_kind_name[r.q_kind];
    const int blck = tr->blck;
    const size_t ts = tr->type_size, guard = 64;

    /* 1. dequantize random and edge-case blocks; a trailing guard must stay poisoned */
    size_t n = (size_t)r.n_deq * blck;
    float *out = malloc((n + guard) * 4);
    poison_f32(out, n + guard);
    tr->to_float(r.deq_raw, out, (int64_t)n);
    res->deq_blocks = (int)r.n_deq;
    res->deq_bad = count_bad_blocks(out, r.deq_out, r.n_deq, blck, "dequant");
    for (size_t i = n; i < n + guard; i++)
        if (!isnan(out[i])) { res->other_bad++; printf("    to_float wrote past n\n"); break; }
    /* a single block from the middle, to catch state carried across blocks */
    poison_f32(out, (size_t)blck);
    tr->to_float(r.deq_raw + ts * (r.n_deq / 2), out, blck);
    res->deq_bad += count_bad_blocks(out, r.deq_out + (size_t)(r.n_deq / 2) * blck, 1, blck, "dequant(1 block)");
    free(out);

    /* 2. quantize deterministic inputs */
    if (!tr->from_float) { printf("  %s: no from_float\n", tr->name); res->other_bad++; ref_free(&r); return; }
    n = (size_t)r.n_q * blck;
    float *x = malloc(n * 4), *deq = malloc((n + guard) * 4);
    uint8_t *q = malloc(r.n_q * ts + guard);
    gen_inputs(r.q_seed, blck, (int)r.n_q, x);
    memset(q, 0xA5, r.n_q * ts + guard);
    tr->from_float(x, q, (int64_t)n);
    res->q_blocks = (int)r.n_q;
    for (uint32_t b = 0; b < r.n_q; b++) {
        if (memcmp(q + b * ts, r.q_bytes + b * ts, ts)) {
            if (res->q_bad < 3)
                printf("    quantize: block %u (profile %u) differs from %s bytes\n", b, b % N_PROFILES,
                       q_kind_name[r.q_kind]);
            res->q_bad++;
        }
    }
    for (size_t i = r.n_q * ts; i < r.n_q * ts + guard; i++)
        if (q[i] != 0xA5) { res->other_bad++; printf("    from_float wrote past n\n"); break; }

    /* 3. our dequantization of our bytes against gguf-py's dequantization of the reference bytes
     * (identical bytes when step 2 passed), and the error against the input */
    poison_f32(deq, n + guard);
    tr->to_float(q, deq, (int64_t)n);
    res->qdeq_bad = count_bad_blocks(deq, r.q_deq, r.n_q, blck, "dequant(quantized)");
    double sum_rel2 = 0;
    int counted = 0;
    for (uint32_t b = 0; b < r.n_q; b++) {
        const int prof = b % N_PROFILES;
        if (prof == PROF_ZERO || prof == PROF_TINY) continue;
        double e2 = 0, x2 = 0;
        for (int j = 0; j < blck; j++) {
            const double xv = x[(size_t)b * blck + j], d = deq[(size_t)b * blck + j] - xv;
            e2 += d * d; x2 += xv * xv;
        }
        if (x2 > 0) { sum_rel2 += e2 / x2; counted++; }
    }
    res->rms = counted ? sqrt(sum_rel2 / counted) : 0;
    if (!(res->rms < tc->rms_bound)) {
        printf("    quantization RMS error %.5f over bound %.3f\n", res->rms, tc->rms_bound);
        res->other_bad++;
    }
    free(x); free(deq); free(q);
    ref_free(&r);
}

/* table-level contracts: unknown ids, names, row sizes */
static int check_table(void) {
    int bad = 0;
    const int unknown[] = { -1, 4, 5, 9, 16, 22, 24, 29, 31, 38, HM_TYPE_COUNT, 1000 };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        if (hm_type_get(unknown[i]) || strcmp(hm_type_name(unknown[i]), "?") || hm_row_size(unknown[i], 256)) {
            printf("  type %d should be unknown\n", unknown[i]); bad++;
        }
    }
    static const struct { int t; const char *name; int blck; size_t size; } rows[] = {
        { HM_TYPE_F32, "F32", 1, 4 },         { HM_TYPE_F16, "F16", 1, 2 },       { HM_TYPE_BF16, "BF16", 1, 2 },
        { HM_TYPE_Q4_0, "Q4_0", 32, 18 },     { HM_TYPE_Q4_1, "Q4_1", 32, 20 },   { HM_TYPE_Q5_0, "Q5_0", 32, 22 },
        { HM_TYPE_Q5_1, "Q5_1", 32, 24 },     { HM_TYPE_Q8_0, "Q8_0", 32, 34 },   { HM_TYPE_Q2_K, "Q2_K", 256, 84 },
        { HM_TYPE_Q3_K, "Q3_K", 256, 110 },   { HM_TYPE_Q4_K, "Q4_K", 256, 144 }, { HM_TYPE_Q5_K, "Q5_K", 256, 176 },
        { HM_TYPE_Q6_K, "Q6_K", 256, 210 },   { HM_TYPE_Q8_K, "Q8_K", 256, 292 }, { HM_TYPE_IQ4_XS, "IQ4_XS", 256, 136 },
        { HM_TYPE_MXFP4, "MXFP4", 32, 17 },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const hm_type_traits *tr = hm_type_get(rows[i].t);
        if (!tr || strcmp(tr->name, rows[i].name) || strcmp(hm_type_name(rows[i].t), rows[i].name) ||
            tr->blck != rows[i].blck || tr->type_size != rows[i].size) {
            printf("  type %d: expected %s blck %d size %zu\n", rows[i].t, rows[i].name, rows[i].blck, rows[i].size);
            bad++; continue;
        }
        const int64_t nel = 4096;
        if (hm_row_size(rows[i].t, nel) != (size_t)(nel / rows[i].blck) * rows[i].size ||
            hm_row_size(rows[i].t, 0) != 0 || (rows[i].blck > 1 && hm_row_size(rows[i].t, nel + 1) != 0)) {
            printf("  hm_row_size(%s) wrong: %zu for %lld\n", rows[i].name, hm_row_size(rows[i].t, nel), (long long)nel);
            bad++;
        }
    }
    return bad;
}

/* --dump-quant DIR: our quantization of the deterministic inputs, and our dequantization of it */
static int dump_quant(const char *dir) {
    for (int c = 0; c < N_CASES; c++) {
        const hm_type_traits *tr = hm_type_get(cases[c].type);
        if (!tr || !tr->from_float || !tr->to_float) continue;
        const int nb = q_blocks_for(tr);
        const size_t n = (size_t)nb * tr->blck;
        float *x = malloc(n * 4), *d = malloc(n * 4);
        uint8_t *q = malloc((size_t)nb * tr->type_size);
        gen_inputs(q_seed_for(cases[c].type), tr->blck, nb, x);
        tr->from_float(x, q, (int64_t)n);
        tr->to_float(q, d, (int64_t)n);
        char path[512];
        int ok = 1;
        snprintf(path, sizeof path, "%s/%s.q.bin", dir, tr->name);
        FILE *f = fopen(path, "wb");
        ok = ok && f && fwrite(q, tr->type_size, (size_t)nb, f) == (size_t)nb;
        if (f) fclose(f);
        snprintf(path, sizeof path, "%s/%s.qdeq.bin", dir, tr->name);
        f = fopen(path, "wb");
        ok = ok && f && fwrite(d, 4, n, f) == n;
        if (f) fclose(f);
        free(x); free(d); free(q);
        if (!ok) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--dump-quant")) return dump_quant(argv[2]);
    if (argc != 1) { fprintf(stderr, "usage: %s [--dump-quant DIR]\n", argv[0]); return 2; }

    int failures = check_table();
    printf("table: %s\n", failures ? "FAIL" : "ok");
    printf("%-7s %8s %6s %8s %6s %8s %9s %7s %s\n", "type", "deq_blk", "bad", "q_blk", "bad", "qdeq_bad", "rms_err", "bound", "q_ref");
    for (int c = 0; c < N_CASES; c++) {
        type_result res;
        check_type(&cases[c], &res);
        const int bad = res.deq_bad + res.q_bad + res.qdeq_bad + res.other_bad;
        printf("%-7s %8d %6d %8d %6d %8d %9.5f %7.3f %-9s %s\n", hm_type_name(cases[c].type), res.deq_blocks,
               res.deq_bad, res.q_blocks, res.q_bad, res.qdeq_bad, res.rms, cases[c].rms_bound, res.q_ref, bad ? "FAIL" : "ok");
        failures += bad;
    }
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
