/* sim.h - the cache-policy simulator: replays a routing trace through the policies of policy.h
 * (the very functions the engine calls) and counts hits, misses and expert loads. Pure. */
#ifndef HM_SIM_H
#define HM_SIM_H
#include "policy.h"
#include "routing.h"

typedef struct {
    int n_slots;          /* dynamic slots per layer (cache slots, or exchange-managed slots) */
    int n_static;         /* experts pinned per layer, chosen by hindsight (top by trace count) */
    int exchange_warm;    /* exchange: start with the slots holding the next hottest experts by
                             hindsight (what --swap-stats gives the engine); 0 = empty start */
} sim_config;

typedef struct {
    policy_kind kind;
    int n_layer;
    int n_slots, n_static;   /* as run; the static policy pins n_slots + n_static and has no slots */
    int64_t n_tokens;
    int64_t selections;      /* routed selections over all layers (recorded rows x k) */
    int64_t hits;
    int64_t loads;           /* experts copied into slots: cached misses, or swaps in */
    int64_t rounds;          /* exchange rounds run */
    int64_t *layer_hits;     /* (n_layer) */
    int64_t *layer_sel;      /* (n_layer) */
} sim_result;

/* Runs one policy over the whole trace. Returns 0, or -1 on bad sizes (n_slots + n_static
 * larger than n_expert) or no memory; res is then zeroed. */
int sim_run(const routing *r, const policy_params *p, const sim_config *cfg, sim_result *res);
void sim_result_free(sim_result *res);

double sim_hit_rate(const sim_result *res);          /* hits / selections */
double sim_misses_per_token(const sim_result *res);  /* misses over all layers / tokens */

#endif
