/* cpu.h - CPU target: reference kernels and the reference forward pass (F32 compute).
 * Every faster path (CPU fast kernels, GPU) is checked against these. */
#ifndef HM_CPU_H
#define HM_CPU_H
#include <stdint.h>
#include "model.h"

/* ---- kernels ---- */
/* out[0..ne0) = row `row` of t, dequantized exactly. */
void cpu_tensor_row(const hm_tensor *t, int64_t row, float *out);
/* y[ne1] = W[ne1][ne0] . x[ne0], F32 accumulation; OpenMP across rows. */
void cpu_matvec(float *y, const hm_tensor *W, const float *x);
/* Tests only (NULL otherwise): when set, cpu_matvec offers each product to it first; 0 means it
 * wrote y, anything else leaves the product to cpu_matvec. With the reference kernels every
 * product of cpu_forward passes here (the fast kernels' MoE experts do not: forward.c's
 * experts_fast). tests/test_gpu_q8_model_emu.cc runs the GPU's q8 GEMV arithmetic this way. */
extern int (*cpu_matvec_hook)(float *y, const hm_tensor *W, const float *x);
/* out = x / sqrt(mean(x^2) + eps) * w; out may alias x. */
void cpu_rmsnorm(float *out, const float *x, const hm_tensor *w, int n, float eps);
/* NeoX-style RoPE on the first n_rot dims of each of n_heads heads of v (in place). */
void cpu_rope_neox(float *v, int n_heads, int head_dim, int n_rot, int pos, float theta);
void cpu_softmax(float *x, int n);
/* y += b (b is a 1-D tensor of n values) */
void cpu_add_bias(float *y, const hm_tensor *b, int n);
/* SwiGLU FFN: out[n_embd] = down(silu(gate x) * up x); hb, hb2 are scratch of width ne1(gate). */
void cpu_ffn(float *out, const hm_ffn_w *f, const float *x, float *hb, float *hb2);

/* ---- forward ---- */
/* Called with each MoE layer's choice (for --record-routing and statistics); may be NULL. */
typedef void (*cpu_route_cb)(void *ud, int layer, int pos, const int *idx, const float *w, int k);

typedef struct {
    int n_ctx;
    float *k_cache, *v_cache;     /* (n_layer, n_ctx, kv_dim) */
    float *x;                     /* (n_embd) residual stream */
    float *xn;                    /* (n_embd) normed input */
    float *q, *k, *v;             /* (q_dim), (kv_dim), (kv_dim) */
    float *att_out;               /* (q_dim) */
    float *att;                   /* (n_head, n_ctx) scores */
    float *tmp;                   /* (n_embd) */
    float *moe;                   /* (n_embd) */
    float *hb, *hb2;              /* (max ffn width) */
    float *router_logits;         /* (n_expert) */
    float *bias;                  /* (n_expert) */
    int *exp_idx; float *exp_w;   /* (n_expert_used) */
    float *moe_gu;                /* (2, n_expert_used, n_ff_exp): gate and up of the chosen experts */
    float *moe_y;                 /* (n_expert_used, n_embd): their down outputs */
    uint8_t *moe_xq;              /* quantized activations: x, then each expert's hidden */
    cpu_route_cb route_cb; void *route_ud;
    const int *replay;            /* (n_layer, n_expert_used) or NULL: benchmark-only routing replay;
                                   * the choice is replaced, the weights follow the router's rule */
} cpu_state;

/* Allocates the state for up to n_ctx positions. Returns 0, -1 when n_ctx is out of range. */
int cpu_state_init(cpu_state *s, const hm_config *c, int n_ctx);
void cpu_state_free(cpu_state *s);
/* Runs token at position pos (0 <= pos < n_ctx; positions must be filled in order).
 * logits (n_vocab) may be NULL to skip the output projection. */
void cpu_forward(const hm_model *m, cpu_state *s, int32_t token, int pos, float *logits);

#endif
