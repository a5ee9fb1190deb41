/* quantize.c - which type each tensor gets under a named mix. The shape of the rules follows
 * llama.cpp's (more bits for attn_v / ffn_down in the first, last and every third layer, Q6_K
 * output, routers kept F32) so that files we write look like the ones users already have. */
#include "quantize.h"
#include "names.h"
#include "quant.h"
#include <strings.h>

static const quant_mix mixes[] = {
    { "F32", HM_TYPE_F32, 0 },     { "F16", HM_TYPE_F16, 1 },     { "BF16", HM_TYPE_BF16, 32 },
    { "Q8_0", HM_TYPE_Q8_0, 7 },   { "Q4_0", HM_TYPE_Q4_0, 2 },   { "Q5_0", HM_TYPE_Q5_0, 8 },
    { "Q6_K", HM_TYPE_Q6_K, 18 },  { "Q5_K_M", HM_TYPE_Q5_K, 17 }, { "Q4_K_M", HM_TYPE_Q4_K, 15 },
    { "Q4_K_S", HM_TYPE_Q4_K, 14 }, { "Q3_K_M", HM_TYPE_Q3_K, 12 }, { "Q2_K", HM_TYPE_Q2_K, 10 },
    { "MXFP4_MOE", HM_TYPE_MXFP4, 38 }, { "IQ4_XS", HM_TYPE_IQ4_XS, 30 },
};

const quant_mix *quant_mix_find(const char *name) {
    /* llama.cpp's aliases */
    if (!strcasecmp(name, "Q4_K")) name = "Q4_K_M";
    else if (!strcasecmp(name, "Q5_K")) name = "Q5_K_M";
    else if (!strcasecmp(name, "Q3_K")) name = "Q3_K_M";
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++)
        if (!strcasecmp(name, mixes[i].name)) return &mixes[i];
    return NULL;
}

const char *quant_mix_names(void) {
    return "F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q6_K, Q5_K_M, Q4_K_M, Q4_K_S, Q3_K_M, Q2_K, MXFP4_MOE, IQ4_XS";
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between. */
static int more_bits(int il, int n) { return il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2; }

/* A type whose block fits rows of length n, for types that do not (K-quants need 256). */
static int fit(int type, int64_t n) {
    const hm_type_traits *tr = hm_type_get(type);
    if (tr && n % tr->blck == 0) return type;
    switch (type) {
    case HM_TYPE_Q2_K: case HM_TYPE_Q3_K: case HM_TYPE_IQ4_XS: return n % 32 ? HM_TYPE_F16 : HM_TYPE_Q4_0;
    case HM_TYPE_Q4_K: return n % 32 ? HM_TYPE_F16 : HM_TYPE_Q5_0;
    case HM_TYPE_Q5_K: return n % 32 ? HM_TYPE_F16 : HM_TYPE_Q5_1;
    case HM_TYPE_Q6_K: return n % 32 ? HM_TYPE_F16 : HM_TYPE_Q8_0;
    default: return n % 32 ? HM_TYPE_F16 : type;
    }
}

int quant_mix_choose(void *ud, const hm_config *c, const convert_tensor *t) {
    const quant_mix *mx = ud;
    /* never quantized: 1-D tensors, the router and its bias (selection is sensitive to them) */
    if (t->n_dims == 1 || t->slot == SLOT_ROUTER || t->slot == SLOT_ROUTER_BIAS) return HM_TYPE_F32;
    int base = mx->base, ty = base, n = c->n_layer, il = t->layer;
    if (base == HM_TYPE_MXFP4) { /* MXFP4_MOE: only the routed experts are MXFP4, as in llama.cpp */
        int exps = t->slot == SLOT_EXPS_GATE || t->slot == SLOT_EXPS_UP || t->slot == SLOT_EXPS_DOWN;
        return fit(exps ? HM_TYPE_MXFP4 : HM_TYPE_Q8_0, t->ne[0]);
    }
    int kquant = base == HM_TYPE_Q2_K || base == HM_TYPE_Q3_K || base == HM_TYPE_Q4_K || base == HM_TYPE_Q5_K;
    int is_down = t->slot == SLOT_FFN_DOWN || t->slot == SLOT_EXPS_DOWN || t->slot == SLOT_SHEXP_DOWN;
    if (t->slot == SLOT_OUTPUT || (t->slot == SLOT_TOK_EMBD && c->tied_output)) {
        if (kquant || base == HM_TYPE_IQ4_XS || base == HM_TYPE_MXFP4) ty = HM_TYPE_Q6_K;
    } else if (t->slot == SLOT_TOK_EMBD) {
        if (base == HM_TYPE_Q2_K || base == HM_TYPE_Q3_K) ty = HM_TYPE_Q4_K;
    } else if (t->slot == SLOT_WV) {
        if (mx->ftype == 15 || mx->ftype == 17) ty = more_bits(il, n) ? HM_TYPE_Q6_K : base;     /* Q4_K_M, Q5_K_M */
        else if (mx->ftype == 12) ty = il < 2 ? HM_TYPE_Q5_K : HM_TYPE_Q4_K;                   /* Q3_K_M */
        else if (mx->ftype == 10) ty = HM_TYPE_Q3_K;                                           /* Q2_K */
    } else if (is_down) {
        if (mx->ftype == 15 || mx->ftype == 17) ty = more_bits(il, n) ? HM_TYPE_Q6_K : base;
        else if (mx->ftype == 12) ty = il < n / 16 ? HM_TYPE_Q5_K : more_bits(il, n) ? HM_TYPE_Q4_K : HM_TYPE_Q3_K;
        else if (mx->ftype == 10) ty = HM_TYPE_Q3_K;
    } else if (t->slot == SLOT_WO) {
        if (mx->ftype == 12 || mx->ftype == 10) ty = HM_TYPE_Q4_K;
    }
    return fit(ty, t->ne[0]);
}
