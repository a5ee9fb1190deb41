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

/* The on-GPU expert cache of one MoE layer (--cold stream). Every expert is one record of
 * `stride` bytes (gate | up | down at 0, off_up, off_down, each 256-byte aligned), the same in
 * VRAM and in pinned host RAM. VRAM holds n_static + n_slots records: the static experts in
 * records [0, n_static) for good, LFU slots after them. Host RAM holds every non-static expert
 * (hidx[e] is its record there), mapped into the device's address space. The device-side state
 * (scores, owners, the pointer tables) changes only in cache kernels: nothing goes to the host. */
typedef struct {
    int n_expert, n_static, n_slots;
    size_t stride, off_up, off_down;
    uint8_t *dev;                    /* VRAM records */
    uint8_t *host;                   /* pinned host records (device-accessible pointer) */
    int *hidx;                       /* device [n_expert]: host record, -1 for static experts */
    int *slot_of;                    /* device [n_expert]: VRAM record, -1 when cold */
    int *owner;                      /* device [n_static + n_slots]: expert in each record, -1 empty */
    float *score;                    /* device [n_expert]: decayed routing counts (LFU) */
    const uint8_t **miss_src;        /* device [k]: this step's copies: host record -> */
    uint8_t **miss_dst;              /*                                  VRAM record */
    int *miss_n;
    unsigned long long *stats;       /* device [3]: hits, misses copied in, misses read in place */
} dcache;

typedef struct {
    float *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm, *router_bias;
    dmat wq, wk, wv, wo, router;
    dmat wqkv;           /* q|k(|v) stacked when they share a type: one launch instead of 2-3 */
    int n_fused;         /* 0: none; 2: q|k; 3: q|k|v */
    int is_moe;
    dexperts exps;       /* routed experts */
    dexperts single;     /* dense FFN or shared expert as a one-entry table */
    int has_single;
    dcache *cache;       /* NULL: every routed expert resident */
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
    size_t vram_by[4];                    /* bytes by category (enum below) */
    int cat;                              /* the category dalloc is counting now */
    int n_streamed, n_static, n_slots;    /* expert cache: streamed MoE layers, records per layer */
    size_t rec_bytes;                     /* largest expert record */
    float decay;                          /* LFU score decay per token */
    int *d_rec, *d_replay, *h_rec, *h_replay;  /* route_io: (n_layer, k) choices out, replayed in */
    void *pinned;                         /* host records of all streamed layers (cudaHostAlloc) */
    size_t pinned_bytes;
    void **allocs; int n_allocs, cap_allocs;
};

enum { VRAM_WEIGHTS, VRAM_EXPERTS, VRAM_KV, VRAM_WORKSPACE };

/* gpu/cache.cu: the expert cache's launchers (recorded into the decode graph after the router), and
 * the benchmark-only routing replay: forced[0] >= 0 replaces ids with forced[0..k) and recomputes
 * the weights from the router's logits (fn 1 softmax, 2 sigmoid; norm; scale) as cpu/router.c does. */
void route_replay(const float *logits, int n, int k, int fn, int norm, float scale, const int *forced, int *ids, float *w,
                  cudaStream_t s);
void cache_record_step(const dcache *c, int *ids, int k, float decay, const dexperts *tab, cudaStream_t s);

#endif
