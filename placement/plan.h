/* plan.h - the placement planner: from a model's sizes, the devices' budgets, measured link rates
 * and routing statistics to a plan (which GPU runs each layer; per MoE layer which experts are
 * static on the GPU, how many LFU/exchange slots it has, which experts are cold and whether they
 * are streamed over PCIe or computed by CPU workers; VRAM by category) and the cost model's
 * predicted decode and prefill tok/s with the bottleneck named. Pure: numbers in, numbers out
 * (src/cmd_plan.c builds the inputs from a model file and prints the plan). */
#ifndef HM_PLAN_H
#define HM_PLAN_H
#include "cost.h"
#include <stddef.h>
#include <stdint.h>

#define PLAN_MAX_GPU 8

/* The cold path: what happens to an expert that is not resident on the GPU. */
typedef enum { PLAN_COLD_AUTO, PLAN_COLD_STREAM, PLAN_COLD_CPU } plan_cold;
const char *plan_cold_name(plan_cold c);   /* "auto", "stream", "cpu" */
int plan_cold_parse(const char *name);     /* -1 when unknown */

/* Where one expert lives at start. */
typedef enum { PLAN_STATIC, PLAN_SLOT, PLAN_STREAM, PLAN_CPU } plan_where;

/* One transformer block as the planner sees it (bytes as they sit in memory, quantized). */
typedef struct {
    int is_moe;
    int n_expert, k;            /* routed experts and experts chosen per token (0, 0 if dense) */
    uint64_t expert_bytes;      /* one routed expert: gate + up + down */
    uint64_t dense_bytes;       /* attention, norms, router, shared expert or dense FFN */
    uint64_t kv_bytes;          /* KV cache per token of context (K and V, all kv heads) */
    double dense_flops;         /* matmul FLOPs per token outside the routed experts */
    double expert_flops;        /* FLOPs of one routed expert for one token */
    double attn_flops;          /* attention FLOPs per token per position of context */
    int cpu_class;              /* cost_class of the expert weights (CPU GEMV speed) */
    const double *freq;         /* (n_expert) routing counts or frequencies; NULL = uniform */
    int has_hit_rate;           /* 1: hit_rate below replaces the frequency estimate in the cost */
    double hit_rate;            /* share of selections served by resident experts under the cache
                                   policy, as the simulator measured it for this plan's residency */
} plan_layer_in;

typedef struct {
    int n_layer;
    const plan_layer_in *layer;   /* (n_layer) the forward pass, in order */
    uint64_t output_bytes;        /* final norm + output head: on the last GPU */
    uint64_t host_only_bytes;     /* kept in host RAM, not pinned: token embeddings, MTP layers */
    uint64_t workspace_bytes;     /* activations, logits, scratch: on every GPU */
    /* devices */
    int n_gpu;                          /* 0 = CPU only */
    uint64_t gpu_mem[PLAN_MAX_GPU];     /* VRAM budget of each GPU, bytes */
    double gpu_split[PLAN_MAX_GPU];     /* layer split weights (e.g. 31.8,31); all 0 = by budget */
    uint64_t host_ram;                  /* bytes; 0 = not checked */
    cost_rates rates;
    /* workload */
    int ctx;          /* KV cache positions per stream */
    int streams;      /* sequences decoded together */
    int decode_pos;   /* mean context position while decoding (KV bytes read per step) */
    int prompt;       /* prefill: prompt tokens */
    int chunk;        /* prefill: tokens per chunk */
    /* policy; -1 = the planner decides */
    plan_cold cold;
    int static_experts;                 /* per MoE layer */
    int cache_slots;                    /* per MoE layer */
    int cpu_experts[PLAN_MAX_GPU];      /* per MoE layer of each GPU's layers */
    int n_cpu_experts;                  /* entries given (1 = same for all GPUs); 0 = none */
    int staging_experts;                /* experts per staging buffer (two buffers); -1 = 32 */
} plan_inputs;

/* Zeroes in and sets the defaults: rates of DEVICE.md, ctx 4096, 1 stream, decode position 384
 * (BENCH.md's 128-token prompt + 512 generated), prompt 8192, chunk 4096, cold auto, no overrides. */
void plan_inputs_init(plan_inputs *in);

typedef struct {
    int gpu;                 /* device running the layer, -1 = CPU */
    int is_moe, n_expert;
    int n_static, n_slots, n_stream, n_cpu;  /* n_static + n_slots + n_stream + n_cpu = n_expert */
    int *order;              /* (n_expert) ids, most frequent first: static, slots, then cold */
    uint8_t *where;          /* (n_expert) plan_where of each expert id */
    double miss_rate;        /* expected share of selections that hit no resident expert: the
                                routing mass of the cold experts, or 1 - hit_rate when measured */
    double decode_us;        /* predicted time of this layer in one decode step */
    cost_link decode_limit;  /* what bounds this layer's decode time */
} plan_layer;

/* VRAM of one GPU by category, bytes. */
typedef struct {
    int first_layer, last_layer;   /* contiguous range; first > last: no layers */
    uint64_t budget;
    uint64_t weights;      /* dense parts of its layers, static experts, output head */
    uint64_t kv;
    uint64_t slots;        /* cache / exchange slots */
    uint64_t staging;      /* prefill staging: two buffers */
    uint64_t workspace;
    uint64_t total;
} plan_gpu;

typedef struct {
    int n_layer, n_gpu;
    plan_layer *layer;            /* (n_layer) */
    plan_gpu gpu[PLAN_MAX_GPU];
    uint64_t kv_host;             /* CPU only: KV cache in host RAM */
    uint64_t host_pinned;         /* cold + slot experts' host copies (page-locked) */
    uint64_t host_total;          /* pinned + host_only (+ everything, CPU only) */
    double decode_tok_s, prefill_tok_s;
    cost_link decode_limit, prefill_limit;
    double decode_time[COST_LINK_COUNT];   /* seconds per step by link: the parts of each layer (HBM
                                              reads, PCIe copies, CPU experts, latency) add up */
    double prefill_time[COST_LINK_COUNT];  /* seconds for the whole prompt, by bottleneck */
    double prefill_bytes[COST_LINK_COUNT]; /* bytes per prompt token over HBM, PCIe, DRAM (CPU) */
    double decode_bytes[COST_LINK_COUNT];  /* bytes per token over HBM, PCIe, DRAM (CPU) */
    double miss_per_token;        /* expected cold experts per token, all layers */
} plan;

/* Builds the plan. Returns 0, or -1 with err (cap bytes) saying what does not fit and how much is
 * needed: a GPU budget too small for the dense part and the KV cache of its layers names the
 * minimum in GiB; an override that does not fit names the GiB it needs. p is then empty. */
int plan_build(plan *p, const plan_inputs *in, char *err, size_t cap);
void plan_free(plan *p);

/* Per-layer rows are "alike" when they differ only in expert ids (for compressed tables). */
int plan_layers_alike(const plan_layer *a, const plan_layer *b);

#endif
