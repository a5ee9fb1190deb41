/* exec_impl.cuh - the GPU executor's state, shared by its parts (exec.cu: upload and the decode
 * graph; the offload and prefill parts that build on it). Not a public header: src/ sees exec.h. */
#ifndef HM_EXEC_IMPL_CUH
#define HM_EXEC_IMPL_CUH
#include "exec.h"
#include <cuda_runtime.h>

/* a matrix on the device; inter: in the GEMV's interleaved layout (gpu_q8_inter_pack, nmat 1, one
 * slot a token), registered as such */
typedef struct { int type; int64_t ne0, ne1; const void *d; int inter; } dmat;

typedef struct {
    const void **gate, **up, **down;   /* device arrays [n]: the expert pointer table */
    int type_gu, type_down, n;
    int inter_tok;   /* > 0: the matrices are in the GEMV's interleaved layout for launches of this many
                      * slots a token (gpu_q8_inter_pack); 0: GGUF rows */
} dexperts;

/* The on-GPU expert cache of one MoE layer (--cold stream). Every expert is one record of
 * `stride` bytes (gate | up | down at 0, off_up, off_down, each 256-byte aligned), the same in
 * VRAM and in pinned host RAM. VRAM holds n_static + n_slots records: the static experts in
 * records [0, n_static) for good, LFU slots after them. Host RAM holds every non-static expert
 * (hidx[e] is its record there), mapped into the device's address space. The device-side state
 * (scores, owners, the pointer tables) changes only in cache kernels: nothing goes to the host. */
/* One MoE layer's hand-off to the CPU workers (--cold cpu), in pinned host memory mapped into the
 * GPU: the GPU writes each token's cold experts (nt[t] entries of ids[t], w[t]), their count n over
 * the step's n_tok tokens and x (n_tok rows), then req = step; the dispatcher thread hands the job
 * to the workers, which write out (n_tok rows), then done = step (release order); the GPU waits
 * for done. A decode step has one token, a batched step (gpu_exec_forward_batch) up to HJOB_MAX_T. */
#define HJOB_MAX_K 64
#define HJOB_MAX_T 4
typedef struct {
    volatile uint32_t req, done;
    volatile uint32_t late;      /* set by the GPU's wait when the workers did not answer in time (the step that gave up) */
    int n;                       /* cold experts of this step, all tokens (0: nothing to wait for) */
    int n_tok;                   /* tokens of this step (1..HJOB_MAX_T) */
    int nt[HJOB_MAX_T];          /* cold experts per token */
    int ids[HJOB_MAX_T][HJOB_MAX_K];
    float w[HJOB_MAX_T][HJOB_MAX_K];
    float *x, *out;              /* (HJOB_MAX_T, n_embd) each, host addresses (device addresses: dx, dout) */
    float *dx, *dout;
} hjob;

typedef struct {
    int n_expert, n_static, n_slots;
    int copy_max;                    /* misses copied into slots per step: -1 any (stream), else a cap */
    int cpu;                         /* 1: misses not copied go to the CPU workers (ids -> n_expert, the zero record) */
    int async;                       /* cpu: swap-ins also computed by the CPU, copied on a side stream */
    int *ids_miss;                   /* --overlap-misses: device [k]: the copied misses (else -1); their slots
                                        in ids become -1, so the hits' GEMVs run while the copies are on the way */
    hjob *job;                       /* cpu: this layer's hand-off (device address) */
    int job_h;                       /* cpu: its index in gpu_exec.jobs */
    const int *step;                 /* cpu: device copy of the step number */
    const float *xn;                 /* cpu: the FFN input the workers need */
    float *w;                        /* cpu: the router weights (ew) */
    int n_embd;
    size_t stride, off_up, off_down;
    uint8_t *dev;                    /* VRAM records */
    uint8_t *host;                   /* pinned host records (device-accessible pointer) */
    uint8_t *host_h;                 /* the same records, host address (exchange copies) */
    int *hidx;                       /* device [n_expert]: host record, -1 for static experts */
    int *slot_of;                    /* device [n_expert]: VRAM record, -1 when cold */
    int *owner;                      /* device [n_static + n_slots]: expert in each record, -1 empty */
    float *score;                    /* device [n_expert]: decayed routing counts (LFU) */
    const uint8_t **miss_src;        /* device [k]: this step's copies: host record -> */
    uint8_t **miss_dst;              /*                                  VRAM record */
    int *miss_n;
    unsigned long long *stats;       /* device [5]: hits, misses copied in, misses read in place, misses on the CPU, prefetched
                                        (cpu: a swap-in counts as copied and as on the CPU) */
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
    int l0, l1, head;                     /* the layers [l0, l1) this executor runs; head: the output head too */
    float *h_xout;                        /* pinned: the residual stream after layer l1 - 1 (no head) */
    cudaStream_t s;
    cudaStream_t s2;                      /* v and the shared expert, forked from s and joined per layer */
    cudaEvent_t ev_fork, ev_join, ev_warm;
    cudaStream_t side;                    /* --cold cpu: swap-in copies (--swap-async) and the exchange's */
    cudaEvent_t side_fork, side_join;
    cudaEvent_t ov_fork, ov_join;         /* --overlap-misses: the copies' fork and join, per layer */
    int *ids_miss;                        /* --overlap-misses: device [64], the copied misses of the layer */
    int prefetch;                         /* --prefetch */
    cudaStream_t side2;                   /* --prefetch: the copies ahead */
    cudaEvent_t pf_fork, pf_join;
    float *pf_rlog, *pf_w; int *pf_ids;   /* --prefetch: the next layer's router on this layer's input */
    dlayer *L;
    struct up_pool *up;                   /* HOTMOE_UPLOAD_THREADS: the experts' staging, during gpu_exec_create */
    float *out_norm; dmat output;
    float *kc, *vc;                       /* (n_seq, n_layer, n_ctx, kv_dim) */
    void *k16, *vt16;                     /* the prefill's attention: one layer's K and V^T in F16, pf_kv16_bytes each */
    float *x, *xn, *q, *k, *v, *att, *tmp, *part, *logits, *rlog, *ew, *act, *ey, *sh;
    float *sh_act;                        /* (ff) the shared expert's activations (act is the routed ones') */
    float *xn2; void *xq_n2;              /* the shared expert's copy of xn and its records (exec.cu's router_norm_on) */
    void *xq_n, *xq_att;                  /* q8 records of xn and att, written by the ops that make them, read by the
                                             GEMVs instead of quantizing in every block; NULL: not used (HOTMOE_XQ=0) */
    int *ids, *zero_id, *d_pos;
    float *h_x, *h_logits; int *h_pos;    /* pinned */
    unsigned *head_tk;   /* the head's ticket counters (gpu_q8_head_tk, HOTMOE_HEAD_TK) */
    int *d_next, *h_next; void *am_scratch;   /* the greedy graphs' tokens (GPU_BATCH_MAX, device and pinned), argmax scratch */
    /* the greedy chain (gpu_exec_greedy_chain): the embedding table's GGUF rows in VRAM (embd_row bytes a
       row; made at the first chain), the ring each step's argmax writes its token into (pinned, mapped: h_ring
       on the host, d_ring for the kernel), the steps counted on the device, an event a ring slot */
    void *d_embd; size_t embd_row;
    int chain_failed;   /* its setup failed once (VRAM, pinned memory): steps token by token from then on */
    int *h_ring, *d_ring; unsigned *d_ring_n;
    cudaEvent_t ev_chain[GPU_CHAIN_RING];
    int n_seq;                            /* sequences with their own KV cache (serve's slots) */
    int att_long;                         /* op_attn_long_from's context (0: none): steps from there take the long-context graphs */
    cudaGraphExec_t *graphs;              /* [(STEP_FORMS * seq + form) * STEP_MODES + mode] (step_graph): a sequence's decode graphs (mode 0 without the head, 1
                                             with the logits, 2 with the greedy token only, 3 the greedy chain's step:
                                             captured at its first use) */
    size_t vram;
    size_t vram_by[4];                    /* bytes by category (enum below) */
    int cat;                              /* the category dalloc is counting now */
    size_t budget;                        /* --gpu-mem in bytes (0: none): the prefill workspace stays within it too */
    int pf_cap;                           /* largest prefill chunk reserved under the budget (0: no reservation) */
    size_t pf_reserved;                   /* its workspace bytes, kept free in the budget */
    int pf_min;                           /* --prefill-min (0: HOTMOE_PREFILL_MIN, else GPU_PREFILL_MIN) */
    int pf_chunk;                         /* --prefill-chunk (0: HOTMOE_PREFILL_CHUNK, else the default) */
    int n_streamed, n_static, n_slots;    /* expert cache: streamed MoE layers, records per layer */
    size_t rec_bytes;                     /* largest expert record */
    float decay;                          /* LFU score decay per token */
    int *d_rec, *d_replay, *h_rec, *h_replay;
    /* --cold cpu: the hand-off jobs (pinned, mapped), the step counter, the workers and their
     * dispatcher thread (gpu/hybrid.cu) */
    hjob *jobs; int n_jobs; size_t jobs_bytes;
    int *d_step; uint32_t *h_step;
    struct workers *pool;
    hm_expert *cpu_experts;           /* (n_layer, n_expert) host views into the pinned records */
    void *dispatcher;                      /* pthread_t, heap-held (not started with the host-function hand-off) */
    int hostfn;                            /* --cpu-handoff hostfn: each layer's job run by a host node of the graph */
    struct hostfn_arg { struct gpu_exec *g; int h; } *hf_args;   /* (n_jobs) */
    cudaStream_t side3;                    /* hostfn: the host nodes' branch */
    cudaEvent_t hf_fork, hf_join;
    volatile int stop;
    /* the dispatcher's place, for the message of a step whose CPU experts came late (late_jobs):
     * the job it is at, 0 waiting for its request / 1 handing it to the workers, the request it last took there */
    volatile int disp_h, disp_phase;
    volatile uint32_t disp_last;
    int *jobs_layer;                       /* (n_jobs) model layer of each job */
    void *zero_rec;                        /* an all-zero expert record: adds exactly 0 */
    int async_copies;                      /* the decode graph forks swap-in copies onto side */
    /* prefill staging (--staging N): two buffers of N expert records; while layer l computes, the
     * next streamed layer's cold experts are copied into the other one (prefill.cu) */
    uint8_t *stage[2]; int stage_n;
    const void **stage_tab[2];             /* device: gate | up | down tables, (n_expert + 1) each */
    const void **stage_htab[2];            /* pinned host mirrors */
    cudaStream_t stage_s;
    cudaEvent_t stage_done[2], stage_free[2];
    int swap_async;                        /* the caches' async flag (--swap-async) */
    /* --swap-interval N > 0: the histogram exchange (hybrid.cu), every N tokens at a token boundary */
    int xch_interval, xch_max, xch_per_layer;
    float xch_floor, xch_hyst;
    long long tokens, swaps;
    int cpu_threads;  /* route_io: (n_layer, k) choices out, replayed in */
    void *pinned;                         /* host records of all streamed layers (cudaHostAlloc) */
    size_t pinned_bytes;
    void **allocs; int n_allocs, cap_allocs;
    struct gpu_prefill *pf;               /* prefill workspace (prefill.cu), NULL until used */
    /* batched decode (gpu_exec_forward_batch, n_seq > 1): up to GPU_BATCH_MAX tokens of different
     * sequences per step, row r of each buffer is token r's; one graph per batch size */
    int nb_max;
    float *bx, *bxn, *bq, *batt, *btmp, *blogits, *brlog, *bew, *bact, *bey, *bsh, *bsh_act, *bpart;
    void *bxq_att;   /* the batched step's attention outputs' q8 records (batch_rec(q_dim) bytes a row), for the o-projection */
    void *bxq_n;     /* its normed rows' (bxn) q8 records (batch_rec(n_embd) bytes a row), for q|k|v, the shared expert and the head */
    int *bids, *bpos, *bseq, *bzero;      /* device: (nb, k) expert ids; each row's position and sequence; nb zeros */
    float *hb_x, *hb_logits, *hb_xout; int *hb_pos, *hb_seq;   /* pinned */
    cudaGraphExec_t bgraphs[GPU_BATCH_MAX + 1];
    cudaGraphExec_t bgraphs_g[GPU_BATCH_MAX + 1];   /* the same with the greedy tokens only (captured at first use) */
    long long xch_next;                   /* the exchange's next token count (--swap-interval) */
};

enum { VRAM_WEIGHTS, VRAM_EXPERTS, VRAM_KV, VRAM_WORKSPACE };

/* gpu/cache.cu: the expert cache's launchers (recorded into the decode graph after the router), and
 * the benchmark-only routing replay: forced[0] >= 0 replaces ids with forced[0..k) and recomputes
 * the weights from the router's logits (fn 1 softmax, 2 sigmoid; norm; scale) as cpu/router.c does. */
void route_replay(const float *logits, int n, int k, int fn, int norm, float scale, const int *forced, int *ids, float *w,
                  cudaStream_t s);
void cache_record_step(const dcache *c, int *ids, int k, float decay, const dexperts *tab, cudaStream_t s, cudaStream_t side,
                       cudaEvent_t fork);
/* The same for a batched step: nt tokens' ids (nt x kt, row-major) at once (a victim is never an
 * expert of any of them); --cold cpu: token t's CPU experts take their weights from w + t * wstride
 * and its x from xn + t * n_embd. --overlap-misses does not apply (every copy before the GEMVs). */
void cache_record_step_batch(const dcache *c, int *ids, int nt, int kt, const float *xn, float *w, int wstride, float decay,
                             const dexperts *tab, cudaStream_t s, cudaStream_t side, cudaEvent_t fork);
/* --prefetch: the predicted experts pids[0..k) into the cache's slots, copied on `side` (join on
 * `join`, waited for before that layer's own update). */
void cache_record_prefetch(const dcache *c, const int *pids, int k, const dexperts *tab, cudaStream_t s, cudaStream_t side,
                           cudaEvent_t fork, cudaEvent_t join);
/* --overlap-misses: the update, then this step's copies on `side` (fork after the update, join
 * recorded on `join` for the caller to wait on before the missed experts' GEMVs). */
void cache_record_step_overlap(const dcache *c, int *ids, int k, float decay, const dexperts *tab, cudaStream_t s,
                               cudaStream_t side, cudaEvent_t fork, cudaEvent_t join);
/* gpu/hybrid.cu: waits for the layer's CPU job and puts its result in y_row (weight 1 in w1). */
void hybrid_wait(const dcache *c, float *y_row, float *w1, int n_embd, cudaStream_t s);
/* The same for nt tokens: token t's result into y + t * ystride, weight 1 into w + t * wstride. */
void hybrid_wait_batch(const dcache *c, int nt, float *y, size_t ystride, float *w, int wstride, int n_embd, cudaStream_t s);
int hybrid_start(struct gpu_exec *g, int n_threads, int first_core, char *err, size_t errlen);
/* --cpu-handoff hostfn: records, after the layer's cache update, a host node on side3 that runs job
 * h on the workers and returns when it is done; the caller waits on hf_join before hybrid_wait. */
void hybrid_record_hostfn(struct gpu_exec *g, int h, cudaStream_t s);
int hybrid_exchange(struct gpu_exec *g, char *err, size_t errlen);
void hybrid_stop(struct gpu_exec *g);
void gpu_prefill_free(gpu_exec *g);       /* prefill.cu: releases g->pf */

#endif
