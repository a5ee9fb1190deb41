/* model.h - the one canonical model description every target sees, whatever file it came from.
 * Weights are views (type + shape + pointer) into the mapped file; experts are reached only
 * through the expert table, because where an expert lives changes at run time. */
#ifndef HM_MODEL_H
#define HM_MODEL_H
#include <stddef.h>
#include <stdint.h>

enum hm_arch { HM_ARCH_QWEN3MOE = 0, HM_ARCH_GLM4MOE = 1, HM_ARCH_COUNT };
enum hm_router_fn { HM_ROUTER_SOFTMAX = 1, HM_ROUTER_SIGMOID = 2 }; /* = GGUF expert_gating_func */

/* A weight view. ne[0] is the row (contiguous, input) dimension, ne[1] the rows (outputs),
 * ne[2] the expert index for stacked experts. data == NULL: the tensor is absent. */
typedef struct {
    int type;          /* enum hm_type */
    int n_dims;
    int64_t ne[4];
    const void *data;
    size_t nbytes;
} hm_tensor;

/* All hyperparameters, flat; derived sizes come from model_config_derive(). */
typedef struct {
    int arch;              /* enum hm_arch */
    int n_layer;           /* transformer blocks in the forward pass (MTP layers not counted) */
    int n_nextn;           /* MTP ("nextn") layers stored after them: loaded, not yet used */
    int n_vocab;
    int n_embd;            /* hidden size */
    int n_head, n_head_kv, head_dim;
    int n_rot;             /* rotary dims per head (partial RoPE: < head_dim), NeoX pairing */
    float rope_theta;
    float rms_eps;
    int n_ctx_train;
    int n_ff;              /* dense FFN width (leading dense layers) */
    int n_dense_lead;      /* first_k_dense_replace: layers [0, n_dense_lead) are dense */
    int n_expert, n_expert_used, n_ff_exp;
    int n_shared_exp, n_ff_shexp;  /* shared expert(s): count and total width */
    int router_fn;         /* enum hm_router_fn */
    int norm_topk;         /* renormalise the chosen k weights to sum 1 */
    float routed_scale;    /* routed_scaling_factor, applied after renormalisation */
    int n_group, topk_group; /* group-limited routing (1, 1: off) */
    int qkv_bias, qk_norm, tied_output;
    /* derived */
    int q_dim, kv_dim;     /* n_head*head_dim, n_head_kv*head_dim */
} hm_config;

typedef struct { hm_tensor gate, up, down; } hm_ffn_w; /* gate/up (n_ff, n_embd), down (n_embd, n_ff) */

enum hm_expert_where { HM_EXPERT_HOST = 0, HM_EXPERT_GPU = 1 };

/* One routed expert: where it lives now and its weights on each target. */
typedef struct {
    int where;             /* enum hm_expert_where */
    hm_ffn_w host;         /* views into host memory (mapped file or loader buffer) */
    hm_ffn_w gpu;          /* device copies when resident (filled by gpu/) */
} hm_expert;

typedef struct {
    hm_tensor eh_proj;          /* (2*n_embd -> n_embd) */
    hm_tensor embed_tokens;     /* optional: (n_vocab, n_embd) */
    hm_tensor enorm, hnorm;     /* (n_embd) */
    hm_tensor shared_head_norm; /* (n_embd) */
    hm_tensor shared_head_head; /* optional: (n_vocab, n_embd) */
} hm_nextn_w;

typedef struct {
    hm_tensor attn_norm;        /* (n_embd) */
    hm_tensor wq, wk, wv;       /* (q_dim|kv_dim, n_embd) */
    hm_tensor bq, bk, bv;       /* (q_dim|kv_dim), qkv_bias only */
    hm_tensor q_norm, k_norm;   /* (head_dim), qk_norm only */
    hm_tensor wo;               /* (n_embd, q_dim) */
    hm_tensor ffn_norm;         /* (n_embd) post-attention norm */
    int is_moe;
    hm_ffn_w dense;             /* !is_moe: (n_ff) */
    hm_tensor router;           /* (n_expert, n_embd) */
    hm_tensor router_bias;      /* (n_expert), selection only; sigmoid routers */
    hm_ffn_w shexp;             /* (n_ff_shexp) when n_shared_exp > 0 */
    hm_expert *experts;         /* expert table: [n_expert] */
    hm_nextn_w nextn;           /* MTP layers only */
} hm_layer;

typedef struct hm_model_store hm_model_store; /* the files behind the views (loader-private) */

typedef struct {
    hm_config cfg;
    hm_tensor tok_embd;         /* (n_vocab, n_embd) */
    hm_tensor output_norm;      /* (n_embd) */
    hm_tensor output;           /* (n_vocab, n_embd); == tok_embd when tied */
    hm_layer *layers;           /* [n_layer + n_nextn] */
    struct tokenizer *tok;      /* NULL when the file carries none */
    char *chat_template;        /* NULL when none */
    hm_model_store *store;
    char *path;
    int from_gguf;
} hm_model;

const char *hm_arch_name(int arch);
int hm_arch_from_name(const char *name); /* -1 when unknown */
/* Fills the derived fields of c. */
void model_config_derive(hm_config *c);

#endif
