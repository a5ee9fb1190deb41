/* quant.c - the weight-type table: float types here, block formats in quant_blocks.c. */
#include "quant.h"
#include <string.h>
#include <math.h>

float hm_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    if (exp == 0) {
        if (mant == 0) u = sign;
        else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            mant &= 0x3ff;
            u = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 31) u = sign | 0x7f800000u | (mant << 13);
    else u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    float f; memcpy(&f, &u, 4); return f;
}

uint16_t hm_f32_to_fp16(float f) {
    /* round-to-nearest-even, as the F16C instruction does */
    uint32_t x; memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow -> inf */
    if (ax < 0x38800000u) { /* subnormal or zero in half */
        float af; memcpy(&af, &ax, 4);
        float r = af * 16777216.0f; /* 2^24: units of the smallest half subnormal */
        uint32_t m = (uint32_t)lrintf(r);
        return (uint16_t)(sign | m);
    }
    uint32_t mant = ax & 0x7fffff, exp = (ax >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

uint16_t hm_f32_to_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

static void f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f32_from_float(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = hm_fp16_to_f32(s[i]);
}
static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = hm_f32_to_fp16(src[i]);
}
static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = hm_bf16_to_f32(s[i]);
}
static void bf16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = hm_f32_to_bf16(src[i]);
}

/* Block formats (quant_blocks.c) register their rows through this hook. */
extern const hm_type_traits *hm_block_type_get(int t);

static const hm_type_traits float_types[] = {
    [HM_TYPE_F32]  = { "F32",  1, 4, f32_to_float,  f32_from_float },
    [HM_TYPE_F16]  = { "F16",  1, 2, f16_to_float,  f16_from_float },
    [HM_TYPE_BF16] = { "BF16", 1, 2, bf16_to_float, bf16_from_float },
};

const hm_type_traits *hm_type_get(int t) {
    if (t < 0 || t >= HM_TYPE_COUNT) return NULL;
    if (t < (int)(sizeof float_types / sizeof float_types[0]) && float_types[t].name) return &float_types[t];
    return hm_block_type_get(t);
}

const char *hm_type_name(int t) {
    const hm_type_traits *tr = hm_type_get(t);
    return tr ? tr->name : "?";
}

size_t hm_row_size(int t, int64_t n) {
    const hm_type_traits *tr = hm_type_get(t);
    if (!tr || n < 0 || n % tr->blck) return 0;
    return (size_t)(n / tr->blck) * tr->type_size;
}
