/* exec.h - the GPU executor: a whole model resident on one GPU, one decode step = one CUDA graph.
 * Plain C so that src/ can drive it; every entry point reports failure through err. */
#ifndef HM_GPU_EXEC_H
#define HM_GPU_EXEC_H
#include <stddef.h>
#include <stdint.h>
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpu_exec gpu_exec;

enum { GPU_COLD_NONE = 0, GPU_COLD_STREAM = 1, GPU_COLD_CPU = 2 };

/* How the executor places the model (gpu_exec_create_opts). Zeroed = everything resident. */
typedef struct {
    double gpu_mem_gib;     /* VRAM the executor may allocate (weights, experts, KV, workspace); 0 = no limit */
    int cold;               /* GPU_COLD_NONE: every expert in VRAM; GPU_COLD_STREAM: the expert cache fed over
                               PCIe; GPU_COLD_CPU: the same cache, misses beyond swap_max computed by CPU workers */
    int n_static, n_slots;  /* per MoE layer; -1: from the budget (static: a quarter when counts are given) */
    const int64_t *counts;  /* (n_layer, n_expert) routing counts: the static set and warm slots; NULL: none */
    float decay;            /* LFU score decay per token; 0: 0.995 */
    int quiet;              /* 1: no layout line on stderr */
    int route_io;           /* 1: record each step's expert choices and accept replayed ones (below) */
    int cpu_threads;        /* GPU_COLD_CPU: worker threads; 0: one per core but two (main, dispatcher) */
    int cpu_first_core;     /* GPU_COLD_CPU: bind the workers from this core on (pipeline stages side by side) */
    int swap_max;           /* GPU_COLD_CPU: misses copied into LFU slots per layer and step (-1: 1); with
                               swap_interval, swaps per exchange round (-1: 64) */
    int swap_interval;      /* GPU_COLD_CPU: > 0: the histogram exchange every N tokens instead of per-step swap-ins */
    double swap_floor, swap_hyst;   /* exchange: incoming count >= floor (0: 4) and > hyst x outgoing (0: 2.0) */
    int swap_per_layer;     /* exchange: swap_max per layer instead of over all layers */
    double ram_gib;         /* most host RAM to pin for cold experts; 0: 90% of what the kernel reports available */
    int cpu_handoff;        /* GPU_COLD_CPU: 0 mapped flags polled by a dispatcher thread (default); 1 a host
                               function node in the graph per layer (--cpu-handoff hostfn), beside the GPU's experts */
    int prefetch;           /* --prefetch: after a MoE layer's routing, the next MoE layer's router on the same
                               input predicts its experts and those are copied ahead into its slots */
    int overlap_misses;     /* --overlap-misses: a step's copied misses move on a side stream while the hit
                               experts' GEMVs run; the missed ones are computed after their copies */
    int staging;            /* --staging N: prefill copies up to N cold experts of the next layer beside the
                               current one (two buffers of N records, in the budget); 0: read in place */
    int prefill_chunk;      /* prefill tokens per chunk (0: HOTMOE_PREFILL_CHUNK, else 8192); with a budget and
                               a cold path its workspace is reserved in the budget (0: 1024 reserved) */
    int prefill_min;        /* pieces of fewer tokens (a whole prompt, or a chunk's remainder) run token by token
                               through the decode step, whose cost has no per-piece part; 0: HOTMOE_PREFILL_MIN,
                               else GPU_PREFILL_MIN; 1: every piece batched */
    int layer_first, layer_last;   /* run layers [first, last) only (a pipeline stage); 0, 0: all. The stage
                               that ends at n_layer has the output head; the others hand on x */
    int n_seq;              /* sequences with their own KV cache of n_ctx positions (serve's slots); 0: 1 */
    int swap_async;         /* GPU_COLD_CPU: 0 (default): a swap-in is copied before the experts run and served
                               from VRAM, beside the CPU's experts (PCIe and CPU at once); 1: the CPU computes it
                               too and the copy runs on a side stream beside the rest of the step */
} gpu_exec_opts;

/* Where things went (gpu_exec_info). */
typedef struct {
    size_t vram_weights, vram_experts, vram_kv, vram_workspace, vram_total;  /* bytes allocated */
    size_t pinned_host;     /* cold expert records in page-locked host RAM */
    int n_streamed;         /* MoE layers with an expert cache */
    int n_static, n_slots;  /* per streamed layer */
    int cpu_threads;        /* --cold cpu: worker threads (0: none) */
    long long swaps;        /* exchange swaps so far */
    int swap_async;         /* --cold cpu: swap-ins computed by the CPU and copied on the side (counted on the CPU too) */
    size_t expert_bytes;    /* one expert record (gate + up + down, aligned) */
    int prefill_chunk;      /* --gpu-mem: the prefill chunk whose workspace is reserved in the budget */
    size_t prefill_reserved, vram_prefill;   /* that reservation; the prefill workspace allocated now (0 before a prompt) */
    int batch_max;          /* most tokens gpu_exec_forward_batch takes in one step (1: no batched decode) */
} gpu_exec_layout;

/* Bytes of VRAM gpu_exec_create would allocate for m with n_ctx positions. */
size_t gpu_exec_vram_needed(const hm_model *m, int n_ctx);
/* Uploads m to device dev (everything but the token embeddings, which stay in host memory) and
 * allocates the KV cache for n_ctx positions. NULL on failure, with err naming what and how much. */
gpu_exec *gpu_exec_create(const hm_model *m, int dev, int n_ctx, char *err, size_t errlen);
/* The same with a placement: --gpu-mem, --cold stream, static experts and cache slots. A budget too
 * small for the dense weights and the KV cache, or host RAM that cannot be pinned, fails with err
 * naming the minimum. */
gpu_exec *gpu_exec_create_opts(const hm_model *m, int dev, int n_ctx, const gpu_exec_opts *o, char *err, size_t errlen);
void gpu_exec_free(gpu_exec *g);
/* host threads that upload the model (HOTMOE_UPLOAD_THREADS; unset: the host's CPUs, at most 16; 0 or
 * 1: one matrix at a time), set for the executors created after the call; n < 0 goes back to the
 * variable's */
void gpu_exec_upload_threads_set(int n);
/* for tests: the threaded upload's chunk and the least matrix it stages (0, 0: 16 MiB and 4 MiB),
 * so that small models take every path */
void gpu_exec_upload_test_sizes(size_t chunk, size_t min_bytes);
/* expert f's VRAM image as the threaded upload stages it (tok slots a token: the interleaved layout's
 * lanes), into dst (NULL: only its size); its bytes, or 0 when it cannot be made. Host only, for tests. */
size_t gpu_exec_expert_image(const hm_ffn_w *f, int tok, void *dst);
void gpu_exec_info(const gpu_exec *g, gpu_exec_layout *out);
/* Expert cache counters summed over layers since creation or the last reset: [0] hits, [1] misses
 * copied into a slot, [2] misses read in place from host RAM, [3] misses computed by the CPU
 * workers, [4] experts copied ahead by --prefetch (not selections: [0..3] sum to the routed
 * selections). Returns 0, or -1 with err set. */
#define GPU_CACHE_STATS 5
int gpu_exec_cache_stats(gpu_exec *g, uint64_t out[GPU_CACHE_STATS], int reset, char *err, size_t errlen);
/* With route_io: the (n_layer, k) choices of the last step (-1 rows: dense layers), and the
 * pinned (n_layer, k) row the next step replaces the router's choice with (benchmark-only
 * --replay-routing; a row starting with -1 keeps the router's choice; weights are recomputed from
 * the router's logits as cpu/router.c's router_weights does). NULL without route_io. */
const int *gpu_exec_route_ids(const gpu_exec *g);
int *gpu_exec_replay_ids(gpu_exec *g);
/* --cold cpu: expert weight bytes the CPU workers read and their busy time (submit to finish,
 * summed over jobs) since creation or the last reset; zeros without workers. */
void gpu_exec_cpu_stats(gpu_exec *g, uint64_t *bytes, double *busy_s, int reset);
/* GB/s of the cache's copy kernel moving n records of bytes (multiple of 256) from pinned host RAM. */
double gpu_cache_copy_rate(int n, size_t bytes, int reps);
/* Runs token at position pos (positions in order from 0). logits (n_vocab floats, host) may be
 * NULL to skip the output head. Returns 0, or -1 with err set. */
int gpu_exec_forward(gpu_exec *g, int32_t token, int pos, float *logits, char *err, size_t errlen);
/* The same for sequence seq (0 <= seq < n_seq); each sequence has its own positions. */
int gpu_exec_forward_seq(gpu_exec *g, int seq, int32_t token, int pos, float *logits, char *err, size_t errlen);
/* A pipeline stage's step: x_in (n_embd floats, the residual stream entering layer_first; NULL:
 * the token's embedding) through its layers; the last stage writes logits (may be NULL), the
 * others x_out (n_embd floats). */
int gpu_exec_forward_stage(gpu_exec *g, int seq, int32_t token, const float *x_in, int pos, float *logits, float *x_out,
                           char *err, size_t errlen);
/* The same step on the stage with the output head, but only the greedy token comes back: the
 * argmax of the logits is taken on the GPU (sampler_argmax's rule: the first index of the largest
 * value, NaNs never win) and *next is that token; the logits are not copied out. For requests
 * whose choice is the plain argmax (greedy, no penalties). x_in as gpu_exec_forward_stage. */
int gpu_exec_forward_greedy(gpu_exec *g, int seq, int32_t token, const float *x_in, int pos, int32_t *next, char *err,
                            size_t errlen);
/* Greedy decoding with the host out of the loop (HOTMOE_CHAIN, on by default; 0 turns it off):
 * n steps of sequence seq, the first on token at pos, each later step's token the greedy choice of
 * the step before, taken and embedded on the GPU (gpu_embed_row), so that steps are queued back to
 * back, GPU_CHAIN_AHEAD of them ahead of the one whose token the host reads. out[i] (out may be
 * NULL) is step i's greedy token: what gpu_exec_forward_greedy gives for the same steps, bit for
 * bit. stop (may be NULL) sees each token (i, token) as it comes back; when it returns nonzero no
 * further step is queued, those already queued finish (at most GPU_CHAIN_AHEAD, within positions
 * pos..pos+n-1; their tokens are dropped) and the tokens given so far are counted. Takes only a
 * whole-model executor (one stage, with the head) whose experts are all resident, without routing
 * record or replay, and an embedding type gpu_embed_row takes; the table goes into VRAM (its GGUF
 * bytes) at the first chain (n = 0 makes it and runs nothing). Returns the count of tokens given
 * (n unless stopped), -2 with err set when the switch is off, this executor cannot chain or the
 * table or ring cannot be made (the caller steps token by token), or -1 on failure. */
#define GPU_CHAIN_RING 8
#define GPU_CHAIN_AHEAD 2
int gpu_exec_greedy_chain(gpu_exec *g, int seq, int32_t token, int pos, int n, int32_t *out, int (*stop)(void *user, int i, int32_t token),
                          void *user, char *err, size_t errlen);
/* Batched decode: nb tokens (1..GPU_BATCH_MAX) of nb different sequences in one step (one CUDA
 * graph per batch size): token r of sequence seq[r] at position pos[r]. Every weight matrix of
 * the dense part (attention, router, shared expert, output head) is read once for all of them, the
 * expert cache is updated once for the union of their experts (a victim is never an expert of any
 * of them), and with --cold cpu the workers get one job per layer for all tokens. Each token's
 * logits equal those of gpu_exec_forward_seq on it, bit for bit (the same kernels per row; CPU
 * experts: the same per-token arithmetic). x_in: NULL (the tokens' embeddings) or (nb, n_embd),
 * the residual stream entering a pipeline stage; logits: (nb, n_vocab) or NULL (the last stage);
 * x_out: (nb, n_embd) for a stage without the head. Needs an executor made with n_seq > 1 and
 * without route_io; sequences must be distinct. Returns 0, or -1 with err set. */
#define GPU_BATCH_MAX 4
/* Prompt pieces shorter than this run token by token (gpu_exec_opts.prefill_min): a batched
 * prefill pays per piece for every expert its tokens use (dequantized to F16 once a chunk) and
 * for its launches, which a few tokens do not amortize; the decode step's cost is per token.
 * H200 (bench/README, fourteenth pass): token by token (no logits but the last) 485 tok/s on a3b
 * and 231 on air at any length; batched a3b 268 / 510 / 830 at 8 / 24 / 48 tokens, air 148 / 192 /
 * 238 at 32 / 48 / 64: the break-even is ~22 tokens on a3b and ~62 on air. 48 keeps the worst loss
 * on either near 40 ms of TTFT. */
#define GPU_PREFILL_MIN 48
int gpu_exec_forward_batch(gpu_exec *g, int nb, const int *seq, const int32_t *tokens, const float *x_in, const int *pos,
                           float *logits, float *x_out, char *err, size_t errlen);
/* The same with each token's greedy choice only (next[nb]; gpu_exec_forward_greedy's rule) from the
 * stage with the head: one argmax per row on the GPU, the logits not copied out. */
int gpu_exec_forward_batch_greedy(gpu_exec *g, int nb, const int *seq, const int32_t *tokens, const float *x_in, const int *pos,
                                  int32_t *next, char *err, size_t errlen);
/* VRAM for layers [l0, l1) (with the output head when l1 == n_layer) and n_seq KV caches. */
size_t gpu_exec_vram_needed_range(const hm_model *m, int n_ctx, int l0, int l1, int n_seq);
size_t gpu_exec_vram_used(const gpu_exec *g);

/* Batched prefill (gpu/prefill.cu): runs tokens[0..n) at positions pos0..pos0+n-1 in chunks
 * (8192 tokens, or HOTMOE_PREFILL_CHUNK; smaller when VRAM is short), fills the KV cache so that
 * decode continues at pos0 + n, and writes the last token's logits (n_vocab floats) when
 * logits_last is not NULL. Weights are dequantized to F16 and multiplied with F16 activations
 * (F32 accumulation), so logits differ from gpu_exec_forward's by that rounding. The workspace is
 * allocated on the first call and kept until gpu_exec_free. Returns 0, or -1 with err set (n <= 0,
 * positions past n_ctx, a token outside the vocabulary, out of memory, a CUDA error). */
int gpu_exec_prefill(gpu_exec *g, const int32_t *tokens, int n, int pos0, float *logits_last, char *err, size_t errlen);
/* Bytes of VRAM the prefill workspace takes for chunks of chunk tokens (<= 0: the default). The
 * opt-in HOTMOE_PREFILL_ATTN=mma2 kernel adds 4 * n_ctx * kv_dim bytes (F16 copies of one layer's K, V). */
/* The same for sequence seq's KV cache (0 <= seq < n_seq). */
int gpu_exec_prefill_seq(gpu_exec *g, int seq, const int32_t *tokens, int n, int pos0, float *logits_last, char *err,
                         size_t errlen);
size_t gpu_exec_prefill_workspace(const hm_model *m, int chunk);
/* Bytes the prefill workspace of g holds now (0 before the first prefill). */
size_t gpu_exec_prefill_bytes(const gpu_exec *g);
/* The chunk of the prefill workspace allocated now (0 before the first prompt). */
int gpu_exec_prefill_chunk(const gpu_exec *g);

#ifdef __cplusplus
}
#endif
#endif
