/* gen_blocks.c - per-type generators of random valid blocks: quant fields are random bytes, the
 * scale fields are set so the weights have the requested std and zero mean, and are always finite.
 * One row per type; the unit std of each row is measured once through the type's own decoder. */
#include "gen_blocks.h"
#include "quant_blocks.h"
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BYTES (1u << 20) /* work item: ~1 MiB of blocks, the PRNG key's third part */

/* Fills dst[0..nb) blocks with scale s (the per-type multiplier of unit-std weights). Quant bytes
 * are already random when a block generator runs; float generators write every element. */
typedef void (*gen_fn)(uint8_t *dst, int64_t nb, gen_rng *r, float s, float mean);

/* Per-block scales come from small tables built once per chunk (a few hundred conversions per MiB),
 * so a block costs one random word: 64 fp16 scales spread over [0.75, 1.25) x s (blocks of real
 * models differ), a random sign where the format is symmetric (it cancels the -0.5 offset of the
 * q - 8, q - 16, int8 grids), and for the K-quants 256 random sub-block scale patterns. */
typedef struct { hm_half d[64], m[64]; } dtab;
static void dtab_init(dtab *t, float s, float mfac) {
    for (int j = 0; j < 64; j++) {
        t->d[j] = hm_f32_to_fp16(s * (0.75f + 0.5f * ((float)j + 0.5f) / 64.0f));
        t->m[j] = hm_f32_to_fp16(mfac * hm_fp16_to_f32(t->d[j]));
    }
}
/* d from bits 0-5 of u, its sign from bit 6 when signed */
static inline hm_half pick_d(const dtab *t, uint64_t u, int sign) {
    return (hm_half)(t->d[u & 63] ^ (sign ? (uint16_t)((u >> 6) & 1) << 15 : 0));
}
#define NPAT 256

/* f32 -> fp16 with the same rounding as hm_f32_to_fp16, inline for the normal range. */
static inline hm_half h16_fast(float f) {
    uint32_t x; memcpy(&x, &f, 4);
    uint32_t ax = x & 0x7fffffffu;
    if (ax < 0x38800000u || ax >= 0x477ff000u) return hm_f32_to_fp16(f);
    uint32_t h = ((ax >> 23) - 112) << 10 | (ax & 0x7fffff) >> 13, rem = ax & 0x1fff;
    h += rem > 0x1000 || (rem == 0x1000 && (h & 1));
    return (hm_half)(((x >> 16) & 0x8000) | h);
}

/* ---- float types: a sum of four 16-bit uniforms (Irwin-Hall, near Gaussian, bounded) ---- */
static inline float noise(gen_rng *r) {
    uint64_t u = gen_next(r);
    float s = (float)((u & 0xFFFF) + ((u >> 16) & 0xFFFF) + ((u >> 32) & 0xFFFF) + (u >> 48));
    return s * (1.0f / 65536.0f) - 2.0f; /* (-2, 2), var 1/3 */
}
static void gen_f32(uint8_t *dst, int64_t n, gen_rng *r, float s, float mean) {
    for (int64_t i = 0; i < n; i++) { float v = mean + s * noise(r); memcpy(dst + 4 * i, &v, 4); }
}
static void gen_f16(uint8_t *dst, int64_t n, gen_rng *r, float s, float mean) {
    for (int64_t i = 0; i < n; i++) { hm_half v = h16_fast(mean + s * noise(r)); memcpy(dst + 2 * i, &v, 2); }
}
static void gen_bf16(uint8_t *dst, int64_t n, gen_rng *r, float s, float mean) {
    for (int64_t i = 0; i < n; i++) { uint16_t v = hm_f32_to_bf16(mean + s * noise(r)); memcpy(dst + 2 * i, &v, 2); }
}

/* ---- legacy 32-element types: only the fp16 scale (and min) are set ---- */
/* x = d*(q-8), d*(q-16), d*q (signed d); x = d*q + m with m = -7.5 d, -15.5 d (centred) */
#define GEN_LEGACY(fname, btype, sign, mfac, has_m)                                  \
    static void fname(uint8_t *dst, int64_t nb, gen_rng *r, float s, float mean) {   \
        btype *b = (btype *)dst;                                                     \
        dtab t; dtab_init(&t, s, mfac);                                              \
        for (int64_t i = 0; i < nb; i += 8) {                                        \
            uint64_t u = gen_next(r);                                                \
            for (int64_t j = i; j < i + 8 && j < nb; j++, u >>= 8) {                 \
                hm_half d = pick_d(&t, u, sign);                                     \
                memcpy(&b[j].d, &d, 2);                                              \
                if (has_m) memcpy((uint8_t *)&b[j].d + 2, &t.m[u & 63], 2);          \
            }                                                                        \
        }                                                                            \
    }
GEN_LEGACY(gen_q4_0, hm_block_q4_0, 1, 0.0f, 0)
GEN_LEGACY(gen_q5_0, hm_block_q5_0, 1, 0.0f, 0)
GEN_LEGACY(gen_q8_0, hm_block_q8_0, 1, 0.0f, 0)
GEN_LEGACY(gen_q4_1, hm_block_q4_1, 0, -7.5f, 1)
GEN_LEGACY(gen_q5_1, hm_block_q5_1, 0, -15.5f, 1)
static_assert(offsetof(hm_block_q4_1, m) == 2 && offsetof(hm_block_q5_1, m) == 2, "min follows d");

/* MXFP4: the scale is a power of two, 2^(e-128) against the doubled e2m1 table; the exponent is
 * e0 or e0+1 with the probability that makes the mean square exactly s^2. */
static void gen_mxfp4(uint8_t *dst, int64_t nb, gen_rng *r, float s, float mean) {
    hm_block_mxfp4 *b = (hm_block_mxfp4 *)dst;
    int e0 = (int)floorf(log2f(s));
    float p = (s * s / ldexpf(1.0f, 2 * e0) - 1.0f) / 3.0f;
    uint32_t thr = (uint32_t)(p * 65536.0f);
    for (int64_t i = 0; i < nb; i += 4) {
        uint64_t u = gen_next(r);
        for (int64_t j = i; j < i + 4 && j < nb; j++, u >>= 16) {
            int e = e0 + 128 + ((uint32_t)(u & 0xFFFF) < thr);
            b[j].e = (uint8_t)(e < 1 ? 1 : e > 254 ? 254 : e);
        }
    }
}

/* ---- K-quants (256-element super-blocks): scale patterns, then one word per block ---- */
/* Q2_K: x = d*sc*q - dmin*m, q in 0..3, sc in 8..15; dmin = 1.5 d and m = sc centre each group exactly. */
static void pat_q2_K(uint8_t *p, gen_rng *r) {
    uint64_t u = gen_next(r);
    for (int g = 0; g < 16; g++) { int sc = 8 + (int)((u >> (3 * g)) & 7); p[g] = (uint8_t)(sc | sc << 4); }
}
/* Q3_K: x = d*(L-32)*(q - 4*!hbit); 16 signed 6-bit scales |L-32| in 16..31, random signs. */
static void pat_q3_K(uint8_t *p, gen_rng *r) {
    uint64_t u = gen_next(r), sg = gen_next(r);
    memset(p, 0, 12);
    for (int j = 0; j < 16; j++) {
        int mag = 16 + (int)((u >> (4 * j)) & 15), l = (sg >> j) & 1 ? 32 - mag : 32 + mag;
        if (j < 8) p[j] = (uint8_t)(l & 0xF);
        else p[j - 8] |= (uint8_t)((l & 0xF) << 4);
        p[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
    }
}
/* Q4_K/Q5_K scales: 8 (scale, min) pairs of 6 bits, packed as ggml's get_scale_min_k4 reads them. */
static void pack_k4(uint8_t *q, const uint8_t *sc, const uint8_t *m) {
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}
/* Q4_K: x = d*sc*q - dmin*m, q in 0..15; dmin = 4 d, sc in {16, 24, 32}, m = 15 sc / 8 centre exactly. */
static void pat_q4_K(uint8_t *p, gen_rng *r) {
    uint64_t u = gen_next(r);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) { sc[j] = (uint8_t)(16 + 8 * (((u >> (4 * j)) & 15) % 3)); m[j] = (uint8_t)(15 * sc[j] / 8); }
    pack_k4(p, sc, m);
}
/* Q5_K: as Q4_K with q in 0..31: sc in {8, 16}, m = 31 sc / 8. */
static void pat_q5_K(uint8_t *p, gen_rng *r) {
    uint64_t u = gen_next(r);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) { sc[j] = (uint8_t)(8 + 8 * ((u >> j) & 1)); m[j] = (uint8_t)(31 * sc[j] / 8); }
    pack_k4(p, sc, m);
}
/* Q6_K: x = d*sc*(q-32); 16 int8 scales of magnitude 64..127, random signs. */
static void pat_q6_K(uint8_t *p, gen_rng *r) {
    uint64_t u = gen_next(r);
    for (int j = 0; j < 16; j++) {
        int mag = 64 + (int)((u >> (3 * j)) & 63);
        p[j] = (uint8_t)(int8_t)((u >> (48 + j)) & 1 ? -mag : mag);
    }
}
/* IQ4_XS: x = d*(ls-32)*kvalues[q]; 8 signed 6-bit scales |ls-32| in 16..31, random signs (the
 * table's mean, -5.9, cancels); the pattern is scales_h (2 bytes) then scales_l (4 bytes). */
static void pat_iq4_xs(uint8_t *p, gen_rng *r) {
    uint64_t u = gen_next(r);
    uint16_t h = 0;
    memset(p, 0, 6);
    for (int j = 0; j < 8; j++) {
        int mag = 16 + (int)((u >> (4 * j)) & 15), l = (u >> (32 + j)) & 1 ? 32 - mag : 32 + mag;
        p[2 + j / 2] |= (uint8_t)((l & 0xF) << (4 * (j % 2)));
        h |= (uint16_t)((l >> 4) << (2 * j));
    }
    memcpy(p, &h, 2);
}

/* A K-quant: its scale-pattern maker, where the pattern and d (and dmin) sit in the block, and dmin/d. */
#define GEN_K(fname, btype, patfn, pfield, plen, mfac, has_m)                          \
    static void fname(uint8_t *dst, int64_t nb, gen_rng *r, float s, float mean) {     \
        btype *b = (btype *)dst;                                                       \
        dtab t; dtab_init(&t, s, mfac);                                                \
        uint8_t pat[NPAT][plen];                                                       \
        for (int j = 0; j < NPAT; j++) patfn(pat[j], r);                               \
        for (int64_t i = 0; i < nb; i++) {                                             \
            uint64_t u = gen_next(r);                                                  \
            memcpy((uint8_t *)&b[i] + offsetof(btype, pfield), pat[(u >> 8) & 255], plen); \
            memcpy(&b[i].d, &t.d[u & 63], 2);                                          \
            if (has_m) memcpy((uint8_t *)&b[i].d + 2, &t.m[u & 63], 2);                \
        }                                                                              \
    }
GEN_K(gen_q2_K, hm_block_q2_K, pat_q2_K, scales, 16, 1.5f, 1)
GEN_K(gen_q3_K, hm_block_q3_K, pat_q3_K, scales, 12, 0.0f, 0)
GEN_K(gen_q4_K, hm_block_q4_K, pat_q4_K, scales, 12, 4.0f, 1)
GEN_K(gen_q5_K, hm_block_q5_K, pat_q5_K, scales, 12, 4.0f, 1)
GEN_K(gen_q6_K, hm_block_q6_K, pat_q6_K, scales, 16, 0.0f, 0)
GEN_K(gen_iq4_xs, hm_block_iq4_xs, pat_iq4_xs, scales_h, 6, 0.0f, 0)
static_assert(offsetof(hm_block_q2_K, dmin) == offsetof(hm_block_q2_K, d) + 2, "dmin follows d");
static_assert(offsetof(hm_block_q4_K, dmin) == 2 && offsetof(hm_block_q5_K, dmin) == 2, "dmin follows d");
static_assert(offsetof(hm_block_iq4_xs, scales_l) == offsetof(hm_block_iq4_xs, scales_h) + 2, "iq4_xs scales");

/* ---- the table ---- */
typedef struct { gen_fn fn; int is_float; } gen_row;
static const gen_row rows[HM_TYPE_COUNT] = {
    [HM_TYPE_F32] = { gen_f32, 1 }, [HM_TYPE_F16] = { gen_f16, 1 }, [HM_TYPE_BF16] = { gen_bf16, 1 },
    [HM_TYPE_Q4_0] = { gen_q4_0 }, [HM_TYPE_Q4_1] = { gen_q4_1 }, [HM_TYPE_Q5_0] = { gen_q5_0 },
    [HM_TYPE_Q5_1] = { gen_q5_1 }, [HM_TYPE_Q8_0] = { gen_q8_0 }, [HM_TYPE_MXFP4] = { gen_mxfp4 },
    [HM_TYPE_Q2_K] = { gen_q2_K }, [HM_TYPE_Q3_K] = { gen_q3_K }, [HM_TYPE_Q4_K] = { gen_q4_K },
    [HM_TYPE_Q5_K] = { gen_q5_K }, [HM_TYPE_Q6_K] = { gen_q6_K }, [HM_TYPE_IQ4_XS] = { gen_iq4_xs },
};
static float unit_std[HM_TYPE_COUNT]; /* measured std at s = 1 */

int gen_type_supported(int t) {
    return t >= 0 && t < HM_TYPE_COUNT && rows[t].fn && hm_type_get(t) && unit_std[t] > 0;
}

/* Generates chunk c of a tensor: random bytes, then the type's scale fields. */
static void fill_chunk(int t, uint8_t *dst, int64_t nb, gen_rng *r, float s, float mean) {
    const hm_type_traits *tr = hm_type_get(t);
    if (!rows[t].is_float) {
        size_t n = (size_t)nb * tr->type_size, i = 0;
        for (; i + 8 <= n; i += 8) { uint64_t v = gen_next(r); memcpy(dst + i, &v, 8); }
        if (i < n) { uint64_t v = gen_next(r); memcpy(dst + i, &v, n - i); }
    }
    rows[t].fn(dst, nb, r, s, mean);
}

int gen_blocks_init(hm_error *e) {
    enum { N_ELEM = 1 << 18 }; /* enough that the sample mean of float types is within 0.01 std */
    for (int t = 0; t < HM_TYPE_COUNT; t++) {
        if (!rows[t].fn) continue;
        const hm_type_traits *tr = hm_type_get(t);
        if (!tr || !tr->to_float) continue; /* not in this build: the type stays unsupported */
        int64_t NB = N_ELEM / tr->blck, n = N_ELEM;
        uint8_t *buf = hm_malloc((size_t)NB * tr->type_size);
        float *x = hm_malloc(sizeof(float) * (size_t)n);
        gen_rng r = gen_stream(0x5EED, (uint64_t)t, 0);
        fill_chunk(t, buf, NB, &r, 1.0f, 0.0f);
        tr->to_float(buf, x, n);
        double s1 = 0, s2 = 0;
        for (int64_t i = 0; i < n; i++) { s1 += x[i]; s2 += (double)x[i] * x[i]; }
        free(buf); free(x);
        double mu = s1 / n, sd = sqrt(s2 / n - mu * mu);
        if (!isfinite(sd) || sd <= 0 || fabs(mu) > 0.05 * sd)
            return hm_fail(e, "gen: type %s: calibration expected a finite std > 0 and |mean| < 0.05 std, found std %g mean %g",
                           tr->name, sd, mu);
        unit_std[t] = (float)sd;
    }
    return 0;
}

void gen_tensor_fill(int t, void *dst, size_t nbytes, uint64_t seed, uint64_t tensor_id, float std, float mean) {
    const hm_type_traits *tr = hm_type_get(t);
    int64_t nb = (int64_t)(nbytes / tr->type_size);
    int64_t per = CHUNK_BYTES / tr->type_size; /* depends on the type only, never on threads */
    if (per < 1) per = 1;
    int64_t n_chunks = (nb + per - 1) / per;
    float s = std / unit_std[t];
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t c = 0; c < n_chunks; c++) {
        gen_rng r = gen_stream(seed, tensor_id, (uint64_t)c);
        int64_t b0 = c * per, n = nb - b0 < per ? nb - b0 : per;
        fill_chunk(t, (uint8_t *)dst + (size_t)b0 * tr->type_size, n, &r, s, mean);
    }
}
