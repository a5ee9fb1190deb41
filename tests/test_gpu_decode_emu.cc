/* test_gpu_decode_emu.cc - the GPU decoders of gpu/qdev*.cuh run on the CPU (through the shim in
 * emu/), so CI without a GPU checks their bit logic: every part of every block, as the GEMV
 * kernel's threads would visit them, against cpu/quant.h's to_float; deq4 bit-exact. Loads are
 * checked for natural alignment. What this cannot see (the kernels' indexing, reductions,
 * launches) tests/test_gpu_gemv.cu checks on a GPU. Compile with -ffp-contract=off.
 * Also the q8 path (gpu/gemv_q8.cuh): chunk loaders at every alignment, the activation quantizer
 * against tests/gemv_q8_ref.h, and each type's dp4a dot of whole chunks against that reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "../gpu/qdev_k.cuh"
#include "../gpu/gemv_q8.cuh"
extern "C" {
#include "quant_blocks.h"
}
#include "gemv_q8_ref.h"

static int g_pass, g_fail;
static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd32(void) { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return (uint32_t)(g_rng >> 16); }
static float rndf(void) { return (float)((double)rnd32() / 2147483648.0 - 1.0); }

/* random valid blocks: random bits, then moderate f16 scales at the given offsets (or E8M0) */
static void fill(int t, uint8_t *b, int64_t nblk, const int *f16_at) {
    const hm_type_traits *tr = hm_type_get(t);
    if (tr->blck == 1) { /* float types: random floats in [-1, 1) converted */
        float *f = (float *)malloc(nblk * sizeof(float));
        for (int64_t i = 0; i < nblk; i++) f[i] = rndf();
        tr->from_float(f, b, nblk);
        free(f);
        return;
    }
    const size_t bs = tr->type_size;
    for (int64_t i = 0; i < nblk * (int64_t)bs; i++) b[i] = (uint8_t)rnd32();
    for (int64_t i = 0; i < nblk; i++) {
        if (t == HM_TYPE_MXFP4) b[i * bs] = (uint8_t)(120 + rnd32() % 12);
        for (const int *f = f16_at; *f >= 0; f++) {
            const uint16_t h = hm_f32_to_fp16(rndf() * 0.05f);
            memcpy(b + i * bs + *f, &h, 2);
        }
    }
}

/* NR rows of ncols, dotted part by part as gemv_kernel's threads do, against double references */
template <class T, bool DEQ = true>
static void check(int t, const char *name, const int *f16_at) {
    const int NR = 4, ncols = T::QK == 256 ? 1024 : T::QK == 1 ? 1411 : 1408, nb = ncols / T::QK;
    const size_t rs = (size_t)nb * T::BS;
    uint8_t *w = (uint8_t *)aligned_alloc(64, (rs * NR + 63) / 64 * 64);
    float *x = (float *)aligned_alloc(64, (ncols * sizeof(float) + 63) / 64 * 64), *f = (float *)malloc(ncols * sizeof(float));
    fill(t, w, (int64_t)ncols / hm_type_get(t)->blck * NR, f16_at);
    for (int c = 0; c < ncols; c++) x[c] = rndf();
    const uint8_t *rows[NR];
    for (int r = 0; r < NR; r++) rows[r] = w + r * rs;
    float acc[NR] = { 0, 0, 0, 0 };
    for (int ib = 0; ib < nb; ib++)
        for (int p = 0; p < T::NT; p++) T::template dot<NR>(rows, ib, p, x + ib * T::QK, acc);
    int bad = 0;
    char msg[200] = "";
    for (int r = 0; r < NR; r++) {
        hm_type_get(t)->to_float(rows[r], f, ncols);
        double s = 0, a = 0;
        for (int c = 0; c < ncols; c++) { s += (double)f[c] * x[c]; a += fabs((double)f[c] * x[c]); }
        if (!(fabs(acc[r] - s) <= 1e-5 * a)) {
            if (!bad++) snprintf(msg, sizeof msg, "dot row %d: got %.9g want %.9g", r, acc[r], s);
        }
        /* deq4: bit-exact */
        if constexpr (DEQ)
        for (int ib = 0; ib < nb; ib++)
            for (int q = 0; q < T::QK / 4; q++) {
                float o[4];
                T::deq4(rows[r] + ib * T::BS, q, o);
                for (int i = 0; i < 4; i++)
                    if (memcmp(&o[i], &f[ib * T::QK + 4 * q + i], 4)) {
                        if (!bad++) snprintf(msg, sizeof msg, "deq4 row %d elem %d: got %.9g want %.9g", r, ib * T::QK + 4 * q + i, o[i], f[ib * T::QK + 4 * q + i]);
                    }
            }
    }
    printf("%s decode %s%s%s\n", bad ? "FAIL" : "PASS", name, bad ? ": " : "", msg);
    if (bad) g_fail++;
    else g_pass++;
    free(w); free(x); free(f);
}

/* ---- the q8 path (gemv_q8.cuh): loaders, activation quantization, per-type dp4a dots ---- */

static void result(int bad, const char *what, const char *name, const char *msg) {
    printf("%s %s %s%s%s\n", bad ? "FAIL" : "PASS", what, name, bad ? ": " : "", msg);
    if (bad) g_fail++;
    else g_pass++;
}

/* q8_load_chunk<CB, 1> at every offset mod 16 gives the chunk's bytes; A = 16/8/4 at their own */
template <int CB, int A>
static void check_q8_load(void) {
    uint8_t *buf = (uint8_t *)aligned_alloc(64, 512);
    for (int i = 0; i < 512; i++) buf[i] = (uint8_t)rnd32();
    int bad = 0;
    char msg[160] = "";
    for (int o = 0; o < 32; o += A) {
        uint32_t w[q8_nw(CB, A)];
        q8_load_chunk<CB, A>(buf + 64 + o, w);
        for (int b = 0; b < CB; b++)
            if (((w[b / 4] >> (8 * (b % 4))) & 0xFF) != buf[64 + o + b]) {
                if (!bad++) snprintf(msg, sizeof msg, "offset %d byte %d", o, b);
            }
        for (int b = 0; b + 4 <= CB; b++) {
            uint32_t want;
            memcpy(&want, buf + 64 + o + b, 4);
            if (wat(w, b) != want && !bad++) snprintf(msg, sizeof msg, "offset %d: wat(%d)", o, b);
        }
    }
    char name[32];
    snprintf(name, sizeof name, "CB=%d A=%d", CB, A);
    result(bad, "q8 load", name, msg);
    free(buf);
}

/* q8_load_part<CB> at every even offset, for every partial length of whole 32-blocks (BS bytes
 * each): the chunk's first nb bytes, zeros after them */
template <int CB>
static void check_q8_load_part(void) {
    constexpr int BS = CB / 8;
    uint8_t *buf = (uint8_t *)aligned_alloc(64, 512);
    for (int i = 0; i < 512; i++) buf[i] = (uint8_t)rnd32();
    int bad = 0;
    char msg[160] = "";
    for (int o = 0; o < 32; o += 2)
        for (int nbk = 1; nbk < 8; nbk++) {
            const int nb = nbk * BS;
            uint32_t w[q8_nw(CB, 1)];
            q8_load_part<CB>(buf + 64 + o, w, nb);
            for (int b = 0; b < 4 * q8_nw(CB, 1); b++) {
                const uint32_t got = (w[b / 4] >> (8 * (b % 4))) & 0xFF, want = b < nb ? buf[64 + o + b] : 0;
                if (got != want && !bad++) snprintf(msg, sizeof msg, "offset %d nb %d byte %d: 0x%02x want 0x%02x", o, nb, b, got, want);
            }
        }
    char name[32];
    snprintf(name, sizeof name, "CB=%d", CB);
    result(bad, "q8 load partial", name, msg);
    free(buf);
}

/* x with ordinary, zero, tiny and tie-prone groups */
static void fill_x(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = rndf();
    for (int i = 0; i < 32 && n >= 96; i++) {
        x[32 + i] = 0.0f;                              /* a zero group */
        x[64 + i] = (float)((int)(rnd32() % 255) - 127); /* integers: x*127/127 ties and exact values */
    }
    for (int i = 0; i < 32 && n >= 160; i++) {
        x[96 + i] = 1e-32f * rndf();  /* amax below 2^-100: an all-zero group */
        x[128 + i] = 1e-29f * rndf(); /* tiny but quantized */
    }
}

/* rows of ncols = 768 (3 chunks): rows start at every phase their size allows */
template <class T>
static void check_q8(int t, const char *name, const int *f16_at) {
    const int ncols = 768, nrows = 16, nch = ncols / Q8_CHUNK;
    const size_t rs = (size_t)nch * T::CB;
    uint8_t *w = (uint8_t *)aligned_alloc(64, (rs * nrows + 63) / 64 * 64);
    fill(t, w, (int64_t)ncols / hm_type_get(t)->blck * nrows, f16_at);
    float *x = (float *)malloc(ncols * sizeof(float)), *f = (float *)malloc(ncols * sizeof(float));
    fill_x(x, ncols);
    /* the records as the kernel builds them, from q8_quant32 */
    uint8_t *rec = (uint8_t *)aligned_alloc(64, (nch * Q8_REC + 63) / 64 * 64);   /* sizes: multiples of the alignment (C11) */
    q8r_group *g = (q8r_group *)malloc(sizeof(q8r_group) * ncols / 32);
    q8r_quantize(x, ncols, g);
    int bad = 0;
    char msg[200] = "";
    for (int b = 0; b < ncols / 32; b++) {
        int8_t q[32];
        float d;
        uint32_t s01;
        q8_quant32(x + 32 * b, q, &d, &s01);
        memcpy(rec + (b / 8) * Q8_REC + 32 * (b % 8), q, 32);
        memcpy(rec + (b / 8) * Q8_REC + 256 + 8 * (b % 8), &d, 4);
        memcpy(rec + (b / 8) * Q8_REC + 260 + 8 * (b % 8), &s01, 4);
        if (memcmp(q, g[b].q, 32) || memcmp(&d, &g[b].d, 4) || (int)(int16_t)(s01 & 0xFFFF) != g[b].s0 || (int)(int16_t)(s01 >> 16) != g[b].s1)
            if (!bad++) snprintf(msg, sizeof msg, "q8_quant32 group %d differs from the reference quantizer", b);
    }
    for (int r = 0; r < nrows; r++) {
        float acc = 0.f;
        for (int c = 0; c < nch; c++) {
            uint32_t wv[q8_nw(T::CB, T::A)];
            q8_load_chunk<T::CB, T::A>(w + r * rs + c * T::CB, wv);
            acc += T::dot(wv, rec + c * Q8_REC);
        }
        double scale;
        const double want = q8r_dot(t, w + r * rs, g, ncols, &scale);
        if (!(fabs(acc - want) <= 1e-5 * scale + 1e-30)) {
            if (!bad++) snprintf(msg, sizeof msg, "row %d (offset %% 16 = %d): got %.9g want %.9g (scale %.3g)", r, (int)(r * rs % 16), acc, want, scale);
        }
        /* and the quantization bound against the exact float dot */
        hm_type_get(t)->to_float(w + r * rs, f, ncols);
        double exact = 0;
        for (int c = 0; c < ncols; c++) exact += (double)f[c] * x[c];
        if (!(fabs(want - exact) <= q8r_bound(f, x, g, ncols))) {
            if (!bad++) snprintf(msg, sizeof msg, "row %d: q8 %.9g vs exact %.9g beyond the quantization bound %.3g", r, want, exact, q8r_bound(f, x, g, ncols));
        }
    }
    result(bad, "q8 dot", name, msg);
    free(w); free(x); free(f); free(rec); free(g);
}

/* one chunk's activation record (Q8_REC bytes) as the kernel builds it, from random x */
static void random_record(uint8_t *rec) {
    float x[256];
    fill_x(x, 256);
    for (int b = 0; b < 8; b++) {
        int8_t q[32];
        float d;
        uint32_t s01;
        q8_quant32(x + 32 * b, q, &d, &s01);
        memcpy(rec + 32 * b, q, 32);
        memcpy(rec + 256 + 8 * b, &d, 4);
        memcpy(rec + 260 + 8 * b, &s01, 4);
    }
}

/* TA's dot of chunk a and TB's of chunk b (cb <= 144 bytes each, in zero-padded words) with the
 * record rec, into *fa, *fb: whether they differ in any bit */
template <class TA, class TB>
static bool dots_differ(const uint8_t *a, const uint8_t *b, int cb, const uint8_t *rec, float *fa, float *fb) {
    uint32_t wa[40] = { 0 }, wb[40] = { 0 };
    memcpy(wa, a, cb); memcpy(wb, b, cb);
    *fa = TA::dot(wa, rec); *fb = TB::dot(wb, rec);
    return memcmp(fa, fb, sizeof *fa) != 0;
}

/* HOTMOE_Q3R's arrangement of Q3_K chunks (gemv_q8.cuh: q3r_pack_chunk, Q8W_Q3_KR; qdev_k.cuh:
 * TQ3R): on random chunks, every element's 3-bit value where the kernels read it, TQ3R's deq4
 * bitwise TQ3_K's on the GGUF chunk, and Q8W_Q3_KR's dot bitwise Q8W_Q3_K's (random records). */
static void check_q3r(void) {
    static const int q3k[] = { 108, -1 };
    uint8_t src[110], dst[110];
    uint8_t *rec = (uint8_t *)aligned_alloc(64, (Q8_REC + 63) / 64 * 64);
    int bad = 0;
    char msg[200] = "";
    for (int rep = 0; rep < 2000 && !bad; rep++) {
        fill(HM_TYPE_Q3_K, src, 1, q3k);
        q3r_pack_chunk(src, dst);
        for (int e = 0; e < 256 && !bad; e++)
            if (q3r_v(dst, e) != q3k_v(src, e)) { bad = 1; snprintf(msg, sizeof msg, "chunk %d element %d: %d, GGUF %d", rep, e, q3r_v(dst, e), q3k_v(src, e)); }
        for (int r = 0; r < 64 && !bad; r++) {
            float o0[4], o1[4];
            TQ3_K::deq4(src, r, o0);
            TQ3R::deq4(dst, r, o1);
            if (memcmp(o0, o1, sizeof o0)) { bad = 1; snprintf(msg, sizeof msg, "chunk %d: deq4 part %d differs (%g vs %g)", rep, r, o1[0], o0[0]); }
        }
        random_record(rec);
        float a, b;
        if (!bad && dots_differ<Q8W_Q3_K, Q8W_Q3_KR>(src, dst, 110, rec, &a, &b)) { bad = 1; snprintf(msg, sizeof msg, "chunk %d: dot %.9g, GGUF %.9g", rep, b, a); }
    }
    result(bad, "q3r chunks", "Q3_K", msg);
    free(rec);
}

/* HOTMOE_Q4R's arrangement of Q4_0 chunks (q4r_pack_chunk, Q8W_Q4R, TQ4R), whole and partial (4 of
 * 8 blocks: air's rows of 1408): TQ4R's deq4 bitwise TQ4_0's block by block, Q8W_Q4R's dot bitwise
 * Q8W_Q4_0's on the GGUF chunk (zero-filled past a partial chunk's blocks), random records. */
static void check_q4r(void) {
    static const int d0[] = { 0, -1 };
    uint8_t src[144], dst[144];
    uint8_t *rec = (uint8_t *)aligned_alloc(64, (Q8_REC + 63) / 64 * 64);
    int bad = 0;
    char msg[200] = "";
    for (int rep = 0; rep < 2000 && !bad; rep++) {
        const int nblk = rep & 1 ? 4 : 8;
        memset(src, 0, sizeof src);
        fill(HM_TYPE_Q4_0, src, nblk, d0);
        q4r_pack_chunk(src, 18 * nblk, dst);
        for (int r = 0; r < 8 * nblk && !bad; r++) {
            float o0[4], o1[4];
            TQ4_0::deq4(src + 18 * (r >> 3), r & 7, o0);
            TQ4R::deq4(dst, r, o1);
            if (memcmp(o0, o1, sizeof o0)) { bad = 1; snprintf(msg, sizeof msg, "chunk %d: deq4 part %d differs (%g vs %g)", rep, r, o1[0], o0[0]); }
        }
        random_record(rec);
        float a, b;
        if (!bad && dots_differ<Q8W_Q4_0, Q8W_Q4R>(src, dst, 144, rec, &a, &b))
            { bad = 1; snprintf(msg, sizeof msg, "chunk %d (%d blocks): dot %.9g, GGUF %.9g", rep, nblk, b, a); }
    }
    result(bad, "q4r chunks", "Q4_0", msg);
    free(rec);
}

/* The lane choice of the q8 launcher (q8_lanes_shift_for): the air layer's launches against the
 * lanes measured best per launch (bench/README.md, eighth pass), and its properties: never more
 * than q8_lanes_shift's choice, rows of one round fill at most a round (unless one lane a row
 * already does not), rows of several rounds keep the old choice, cap 0 is the old choice. */
static void check_lanes(void) {
    const long cap = Q8_LANES_H200;
    static const struct { const char *name; int nchunks; long items; int lanes; } air[] = {
        { "q|k 13312x4096", 16, 13312, 4 }, { "o-proj 4096x12288", 48, 4096, 16 }, { "v 1024x4096", 16, 1024, 16 },
        { "routed gate+up 8x2x1408", 16, 22528, 2 }, { "routed down 8x4096 (1408 columns)", 6, 32768, 2 },
        { "head 151552x4096", 16, 151552, 16 }, { "shared gate+up 2x1408", 16, 2816, 16 }, { "shared down 4096", 6, 4096, 8 } };
    char msg[160] = "";
    int bad = 0;
    for (const auto &a : air) {
        const int got = 1 << q8_lanes_shift_for(a.nchunks, a.items, cap);
        if (got != a.lanes && !bad++) snprintf(msg, sizeof msg, "%s: %d lanes, expected %d", a.name, got, a.lanes);
    }
    for (int nch = 1; nch <= 128 && !bad; nch++)
        for (long items = 1; items <= 1L << 20 && !bad; items = items * 3 / 2 + 1) {
            const int old = q8_lanes_shift(nch), l = q8_lanes_shift_for(nch, items, cap);
            const bool ok = l <= old && q8_lanes_shift_for(nch, items, 0) == old &&
                            (items > cap ? l == old : (items << l) <= cap || l == 0) &&
                            (items > cap || l == old || (items << (l + 1)) > cap);
            if (!ok) { bad = 1; snprintf(msg, sizeof msg, "%d chunks, %ld rows: %d lanes (q8_lanes_shift: %d)", nch, items, 1 << l, 1 << old); }
        }
    result(bad, "q8 lanes", "per row", msg);
}

int main(void) {
    check_lanes();
    check_q3r();
    check_q4r();
    static const int none[] = { -1 }, d0[] = { 0, -1 }, dm0[] = { 0, 2, -1 }, q2k[] = { 80, 82, -1 }, q3k[] = { 108, -1 }, q6k[] = { 208, -1 };
    for (int rep = 0; rep < 20; rep++) {
        check<TF32V, false>(HM_TYPE_F32, "F32 (vector)", none);
        check<TF32S, false>(HM_TYPE_F32, "F32 (scalar)", none);
        check<THalfV<false>, false>(HM_TYPE_F16, "F16 (vector)", none);
        check<THalfS<false>, false>(HM_TYPE_F16, "F16 (scalar)", none);
        check<THalfV<true>, false>(HM_TYPE_BF16, "BF16 (vector)", none);
        check<THalfS<true>, false>(HM_TYPE_BF16, "BF16 (scalar)", none);
        check<TQ4_0>(HM_TYPE_Q4_0, "Q4_0", d0);
        check<TQ4_1>(HM_TYPE_Q4_1, "Q4_1", dm0);
        check<TQ5_0>(HM_TYPE_Q5_0, "Q5_0", d0);
        check<TQ5_1>(HM_TYPE_Q5_1, "Q5_1", dm0);
        check<TQ8_0>(HM_TYPE_Q8_0, "Q8_0", d0);
        check<TMXFP4>(HM_TYPE_MXFP4, "MXFP4", none);
        check<TQ2_K>(HM_TYPE_Q2_K, "Q2_K", q2k);
        check<TQ3_K>(HM_TYPE_Q3_K, "Q3_K", q3k);
        check<TQ4_K>(HM_TYPE_Q4_K, "Q4_K", dm0);
        check<TQ5_K>(HM_TYPE_Q5_K, "Q5_K", dm0);
        check<TQ6_K>(HM_TYPE_Q6_K, "Q6_K", q6k);
        check<TIQ4_XS>(HM_TYPE_IQ4_XS, "IQ4_XS", d0);
        check_q8<Q8W_Q4_0>(HM_TYPE_Q4_0, "Q4_0", d0);
        check_q8<Q8W_Q4_1>(HM_TYPE_Q4_1, "Q4_1", dm0);
        check_q8<Q8W_Q5_0>(HM_TYPE_Q5_0, "Q5_0", d0);
        check_q8<Q8W_Q5_1>(HM_TYPE_Q5_1, "Q5_1", dm0);
        check_q8<Q8W_Q8_0>(HM_TYPE_Q8_0, "Q8_0", d0);
        check_q8<Q8W_MXFP4>(HM_TYPE_MXFP4, "MXFP4", none);
        check_q8<Q8W_Q2_K>(HM_TYPE_Q2_K, "Q2_K", q2k);
        check_q8<Q8W_Q3_K>(HM_TYPE_Q3_K, "Q3_K", q3k);
        check_q8<Q8W_Q4_K>(HM_TYPE_Q4_K, "Q4_K", dm0);
        check_q8<Q8W_Q5_K>(HM_TYPE_Q5_K, "Q5_K", dm0);
        check_q8<Q8W_Q6_K>(HM_TYPE_Q6_K, "Q6_K", q6k);
        check_q8<Q8W_IQ4_XS>(HM_TYPE_IQ4_XS, "IQ4_XS", d0);
    }
    check_q8_load<110, 1>(); check_q8_load<210, 1>(); check_q8_load<84, 1>(); check_q8_load<272, 1>();
    check_q8_load<136, 8>(); check_q8_load<84, 4>(); check_q8_load<144, 16>(); check_q8_load<272, 16>();
    check_q8_load_part<144>(); check_q8_load_part<160>(); check_q8_load_part<176>(); check_q8_load_part<192>();
    check_q8_load_part<272>(); check_q8_load_part<136>();
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
