/* exec_impl.cuh - the GPU executor's state, shared by its parts (exec.cu: upload and the decode
 * graph; the offload and prefill parts that build on it). Not a public header: src/ sees exec.h. */
#ifndef HM_EXEC_IMPL_CUH
#define HM_EXEC_IMPL_CUH
#include "exec.h"
#include <cuda_runtime.h>

typedef struct { int type; int64_t ne0, ne1; const void *d; } dmat; /* a matrix on the device */

typedef struct {
    const void **gate, **up, **down;   /* device arrays [n]: the expert pointer table */
    int type_gu, type_down, n;
} dexperts;

typedef struct {
    float *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm, *router_bias;
    dmat wq, wk, wv, wo, router;
    dmat wqkv;           /* q|k(|v) stacked when they share a type: one launch instead of 2-3 */
    int n_fused;         /* 0: none; 2: q|k; 3: q|k|v */
    int is_moe;
    dexperts exps;       /* routed experts */
    dexperts single;     /* dense FFN or shared expert as a one-entry table */
    int has_single;
} dlayer;

struct gpu_exec {
    const hm_model *m;
    int dev, n_ctx;
    cudaStream_t s;
    dlayer *L;
    float *out_norm; dmat output;
    float *kc, *vc;                       /* (n_layer, n_ctx, kv_dim) */
    float *x, *xn, *q, *k, *v, *att, *tmp, *part, *logits, *rlog, *ew, *act, *ey, *sh;
    int *ids, *zero_id, *d_pos;
    float *h_x, *h_logits; int *h_pos;    /* pinned */
    cudaGraphExec_t graph, graph_nolog;
    size_t vram;
    void **allocs; int n_allocs, cap_allocs;
    struct gpu_prefill *pf;               /* prefill workspace (prefill.cu), NULL until used */
};

void gpu_prefill_free(gpu_exec *g);       /* prefill.cu: releases g->pf */

#endif
