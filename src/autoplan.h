/* autoplan.h - `--cold auto` (the default placement when a GPU budget is given without an
 * explicit cold path): the planner (placement/plan.h) priced on this model, budget and routing
 * trace decides the cold path and the static/slot split; src/cmd_plan.c implements it. */
#ifndef HM_AUTOPLAN_H
#define HM_AUTOPLAN_H
#include "model.h"
#include "routing.h"
#include "runner.h"
#include "util.h"

typedef struct {
    int cold;              /* GPU_COLD_STREAM or GPU_COLD_CPU (exec.h) */
    int n_static;          /* static experts per MoE layer (the executor fills the rest with slots) */
    int swap_max;          /* cpu: misses copied per layer and step beside the CPU's (mixed) */
    int mixed;             /* 1: the plan mixes PCIe copies that serve the step with the CPU's experts */
    double decode_tok_s;   /* the planner's prediction */
    float lfu_decay;       /* with a trace: the LFU decay whose simulated hit rate is best (0: none chosen) */
    double hit_default, hit_best;   /* simulated hit rates at 0.995 and at lfu_decay */
    int split_layer;       /* two GPUs: the second GPU's first layer in the plan (0: one GPU) */
    char why[256];         /* one line: what the planner chose and its bottleneck */
} autoplan;

/* The planner's placement of m on one GPU with gpu_mem_gib of VRAM for the engine (a --gpu-mem less
 * --gpu-reserve: runner_engine_gib; autoplan_apply passes it) and ctx positions; routing: a
 * trace (NULL: uniform). Rates come from `hotmoe calibrate`'s file when present. Returns 0, or -1
 * with e (a budget too small names the minimum). */
int autoplan_choose(const hm_model *m, double gpu_mem_gib, const char *routing, int ctx, autoplan *out, hm_error *e);
/* The same over two GPUs (budgets gib0, gib1): the plan's layer split, cold path and the first
 * GPU's static count. */
int autoplan_choose2(const hm_model *m, double gib0, double gib1, const char *routing, int ctx, autoplan *out, hm_error *e);

/* The LFU decay (of 0.995, 0.98, 0.95, 0.9, 0.8) whose hit rate is best when trace r runs through
 * placement/policy.c's LFU (what the cache kernel does) with n_static + n_slots per layer; the hit
 * rates at 0.995 and at the pick. 0 when no simulation could run. */
float autoplan_lfu_decay(const routing *r, int n_static, int n_slots, double *hit_default, double *hit_best);

/* Resolves o->cold == RUNNER_COLD_AUTO for a run of model m on device with n_ctx positions: no GPU
 * budget (or a CPU target) -> everything resident (GPU_COLD_NONE); else the planner's choice for the
 * engine's budgets (runner_engine_gib), with the static count and swap settings it implies where
 * the flags left them open. First, whatever the cold path, runner_check_budget. Prints the choice
 * on stderr unless quiet. Returns 0, or -1 with e. */
int autoplan_apply(runner_opts *o, const hm_model *m, int device, int n_ctx, int quiet, hm_error *e);

#endif
