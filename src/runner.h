/* runner.h - one sequence's forward pass on the chosen target (CPU reference or GPU executor),
 * so that commands and the engine do not care where the model runs. */
#ifndef HM_RUNNER_H
#define HM_RUNNER_H
#include "cpu.h"
#include "exec.h"
#include "model.h"
#include "util.h"

enum hm_device { HM_DEVICE_AUTO = 0, HM_DEVICE_CPU = 1, HM_DEVICE_CUDA = 2 };
/* runner_opts.cold beside exec.h's GPU_COLD_*: decided by the planner (src/autoplan.h) */
#define RUNNER_COLD_AUTO 3
/* --gpu-reserve's default, GiB: the CUDA context (~0.43 GiB on the H200) and cuBLAS (~0.55 GiB,
 * loaded at the first batched prefill) that the process holds beside what the engine allocates */
#define RUNNER_GPU_RESERVE_GIB 1.0

typedef struct {
    int device;               /* the target in use: HM_DEVICE_CPU or HM_DEVICE_CUDA */
    const hm_model *m;
    cpu_state cpu;
    struct gpu_exec *gpu;
    struct gpu_exec *gpu2;    /* --gpus 0,1: the second pipeline stage, or NULL */
    float *xbuf;              /* (n_embd) the residual stream handed from stage 1 to stage 2 */
} hm_runner;

/* Placement of the GPU target (flags of generate, logits and the benchmarks; `serve --config`
 * keys of the same names). Zeroed by runner_opts_init. */
typedef struct {
    double gpu_mem_gib;      /* --gpu-mem GiB: the process's VRAM budget per GPU; 0 = all free VRAM */
    double gpu_reserve_gib;  /* --gpu-reserve GiB: of each budget, what the engine leaves to the CUDA context and cuBLAS */
    double ram_gib;          /* --ram GiB: most host RAM to pin for cold experts; 0 = what the kernel reports available */
    int cold;                /* --cold auto|none|stream|cpu (RUNNER_COLD_AUTO, GPU_COLD_*); default auto */
    int n_static, n_slots;   /* --static-experts N, --cache-slots N per MoE layer; -1 = from the budget */
    const char *routing;     /* --routing FILE: a routing trace whose counts choose the static experts */
    const int64_t *counts;   /* (n_layer, n_expert), filled from routing by the caller (routeio_counts) */
    float decay;             /* --lfu-decay: LFU score decay per token (0.995) */
    int route_io;            /* set by the caller when --record-routing / --replay-routing are given */
    int cpu_threads;         /* --cpu-threads N (--cold cpu); 0: one per core but two */
    int swap_max;            /* --swap-max N: misses copied into LFU slots per layer and step (--cold cpu); -1: 1 */
    int swap_async;          /* --swap-async: swap-ins computed by the CPU and copied on a side stream */
    int swap_interval;       /* --swap-interval N: the histogram exchange every N tokens (0: LFU swap-ins per step) */
    double swap_floor, swap_hyst;   /* --swap-floor 4, --swap-hyst 2.0 */
    int swap_per_layer;      /* --swap-scope layer (1) | global (0) */
    int staging;             /* --staging N: prefill stages up to N cold experts per layer ahead (two buffers) */
    int prefill_chunk;       /* --prefill-chunk N: prompt tokens per batched prefill chunk (GPU); 0: the default */
    int prefill_min;         /* --prefill-min N: pieces shorter than N go token by token (GPU); 0: the default */
    int n_gpus, gpus[2];     /* --gpus 0[,1]: one device, or a two-stage layer pipeline */
    double gpu_mem2_gib;     /* --gpu-mem A,B: the second GPU's budget */
    double split[2]; int n_split;   /* --gpu-split W0,W1: layers split in this ratio (default: the budgets', else half) */
    int split_layer;         /* the second stage's first layer when the planner chose it (--cold auto); 0: from the above */
    int cpu_experts[2], n_cpu_experts;   /* --cpu-experts N | N0,N1: routed experts per MoE layer on the CPU (per GPU) */
    int overlap_misses;      /* --overlap-misses: copies of missed experts beside the hits' GEMVs (opt-in: no gain measured) */
    int prefetch;            /* --prefetch: the next MoE layer's predicted experts copied ahead (off by default) */
    int cpu_handoff;         /* --cpu-handoff flags|hostfn (--cold cpu): 0 mapped flags + a dispatcher thread, 1 graph host nodes */
} runner_opts;

/* Placement flags checked against the model (expert counts) and runner_check_budget; the
 * executor checks the budgets against the model. */
int runner_check_placement(const runner_opts *o, const hm_model *m, hm_error *e);
/* Each --gpu-mem given (> 0) must exceed --gpu-reserve. Returns 0, or -1 with e naming both. */
int runner_check_budget(const runner_opts *o, hm_error *e);
/* The engine's VRAM budget on a GPU whose --gpu-mem is gib: gib less o's --gpu-reserve (0 for gib
 * 0: no budget). The one place the reserve is subtracted: the executor's budgets, the pipeline's
 * and the planner's (autoplan_apply, `hotmoe plan`) all come from it. */
double runner_engine_gib(const runner_opts *o, double gib);

void runner_opts_init(runner_opts *o);
/* The executor's options (gpu/exec.h) for o; n_seq: KV caches (slots). o->cold must be resolved. */
void runner_gpu_opts(const runner_opts *o, int n_seq, gpu_exec_opts *out);
/* The GPU target of o with n_seq KV caches: one executor (*g2 NULL), or the two stages of
 * --gpus A,B. Returns 0, or -1 with e. */
int runner_gpu_create(const hm_model *m, int n_ctx, const runner_opts *o, int n_seq, struct gpu_exec **g1, struct gpu_exec **g2,
                      hm_error *e);
/* If flag is one of runner_opts' flags, parses val into o and returns 1 (val used) or 2 (a flag
 * without a value: --no-swap); unknown flag: 0; a bad value: -1 with e naming the flag, what was
 * expected and what was found. */
int runner_opts_flag(runner_opts *o, const char *flag, const char *val, hm_error *e);

/* Parses "cpu" / "cuda" / "auto". Returns -1 for anything else. */
int runner_parse_device(const char *s);
/* device AUTO: CUDA when this build has it and a GPU is present, else CPU. */
int runner_init(hm_runner *r, const hm_model *m, int device, int n_ctx, hm_error *e);
/* The same with a placement (o may be NULL: everything resident). */
int runner_init_opts(hm_runner *r, const hm_model *m, int device, int n_ctx, const runner_opts *o, hm_error *e);
/* Runs token at pos; logits (n_vocab) may be NULL. */
int runner_forward(hm_runner *r, int32_t token, int pos, float *logits, hm_error *e);
/* Runs token at pos and writes the greedy choice (sampler_argmax of the logits) to *next: on the
 * GPU only that token is copied back; the CPU target writes the logits to scratch (n_vocab floats)
 * and takes their argmax. For requests whose choice is the plain argmax (sampler_greedy_only). */
int runner_forward_greedy(hm_runner *r, int32_t token, int pos, float *scratch, int32_t *next, hm_error *e);
/* n greedy steps from token at pos without the host between them (gpu_exec_greedy_chain,
 * HOTMOE_CHAIN, on unless 0): out[i] (out may be NULL) the greedy choice after step i, what n calls of
 * runner_forward_greedy give; stop (may be NULL) sees each token and ends the chain by returning
 * nonzero. Returns the tokens given, -2 when this runner cannot chain (the CPU, a pipeline, an
 * expert cache, the switch off: step with runner_forward_greedy instead), -1 with e set on failure. */
int runner_greedy_chain(hm_runner *r, int32_t token, int pos, int n, int32_t *out, int (*stop)(void *user, int i, int32_t token),
                        void *user, hm_error *e);
/* Runs the n prompt tokens at positions pos0.. (batched on the GPU, token by token on the CPU);
 * writes the last token's logits when logits_last is not NULL. Decode continues at pos0 + n. */
int runner_prefill(hm_runner *r, const int32_t *tokens, int n, int pos0, float *logits_last, hm_error *e);
void runner_free(hm_runner *r);
/* One token of sequence seq through one executor, or through the two stages of a pipeline (g2 not
 * NULL; x: n_embd floats between them). Returns 0, or -1 with err. */
int runner_gpu_step(struct gpu_exec *g1, struct gpu_exec *g2, float *x, int seq, int32_t token, int pos, float *logits,
                    char *err, size_t errlen);
/* The same with the greedy token only (gpu_exec_forward_greedy on the stage with the head). */
int runner_gpu_step_greedy(struct gpu_exec *g1, struct gpu_exec *g2, float *x, int seq, int32_t token, int pos, int32_t *next,
                           char *err, size_t errlen);
/* n tokens (1..GPU_BATCH_MAX) of n different sequences in one batched step (gpu_exec_forward_batch),
 * through one executor or the two stages (x: n * n_embd floats between them); logits: (n, n_vocab).
 * Returns 0, or -1 with err. */
int runner_gpu_step_batch(struct gpu_exec *g1, struct gpu_exec *g2, float *x, int n, const int *seq, const int32_t *tok,
                          const int *pos, float *logits, char *err, size_t errlen);
/* The same with each token's greedy choice only (next[n]; gpu_exec_forward_batch_greedy). */
int runner_gpu_step_batch_greedy(struct gpu_exec *g1, struct gpu_exec *g2, float *x, int n, const int *seq, const int32_t *tok,
                                 const int *pos, int32_t *next, char *err, size_t errlen);
/* The most tokens runner_gpu_step_batch takes at once on g1 (and g2); 1: none batched. */
int runner_gpu_batch_max(struct gpu_exec *g1, struct gpu_exec *g2);
/* The GPU target's expert cache and CPU workers, summed over its stages (zeros on the CPU target). */
int runner_cache_stats(hm_runner *r, uint64_t out[GPU_CACHE_STATS], int reset, hm_error *e);
void runner_cpu_stats(hm_runner *r, uint64_t *bytes, double *busy_s, int reset);
void runner_layout(const hm_runner *r, gpu_exec_layout *out);
const char *runner_device_name(const hm_runner *r);

#endif
