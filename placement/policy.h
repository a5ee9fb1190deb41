/* policy.h - expert cache policies on per-layer slot state: LRU, LFU with decay, static,
 * Belady (offline optimal) and the histogram hot-expert exchange. The engine and the simulator
 * run these same functions. Pure: expert and slot indices in, decisions out; a policy never
 * touches a weight pointer, it tells the executor which slot to fill and what it evicts.
 *
 * Conventions (shared/data/routing/mixtral-8x7b/README.md): caches start empty (first uses are
 * misses); the experts of the token being served are never evicted to make room for each other;
 * static (pinned) experts live outside the slots and always hit. */
#ifndef HM_POLICY_H
#define HM_POLICY_H
#include <stdint.h>

typedef enum {
    POLICY_LRU,       /* evict the least recently used */
    POLICY_LFU,       /* evict the lowest decayed use count (ties: least recently used) */
    POLICY_STATIC,    /* pinned experts only; a miss is served cold and nothing is cached */
    POLICY_BELADY,    /* evict the expert used again furthest in the future (needs the future) */
    POLICY_EXCHANGE,  /* misses served cold; every interval tokens swap hot cold experts in */
    POLICY_COUNT
} policy_kind;

typedef struct {
    policy_kind kind;
    double lfu_decay;     /* LFU: counts multiplied by this every token; 1.0 = counts since start */
    int swap_interval;    /* exchange: tokens between rounds (the caller keeps the cadence) */
    int swap_max;         /* exchange: swaps per round, over all layers (global) or per layer */
    double swap_floor;    /* exchange: an incoming expert needs a decayed count >= floor */
    double swap_hyst;     /* exchange: a swap needs incoming count > hyst x outgoing count */
    double swap_decay;    /* exchange: per-token decay of the routing histograms */
    int swap_per_layer;   /* exchange scope: 0 = global (swap_max across layers), 1 = per layer */
} policy_params;

/* The defaults: LFU decay 0.995; exchange 64 / 64 / floor 4 / hysteresis 2.0 / global, decay 0.995
 * (the published dual-GPU recipe). */
policy_params policy_defaults(policy_kind kind);
const char *policy_name(policy_kind kind);
/* "lru", "lfu", "static", "belady", "exchange" -> kind; -1 for anything else. */
int policy_parse(const char *name);

/* One MoE layer's residency. Slots are the dynamic part; pinned experts are the static part. */
typedef struct {
    int n_expert;
    int n_slots;
    int64_t tick;           /* tokens this layer has served */
    int32_t *slot_expert;   /* (n_slots) expert held by each slot, -1 = empty */
    int32_t *expert_slot;   /* (n_expert) slot holding each expert, -1 = none */
    int64_t *slot_used;     /* (n_slots) tick of the last token that used the slot's expert */
    double *count;          /* (n_expert) decayed use counts (LFU order, exchange histogram) */
    uint8_t *pinned;        /* (n_expert) 1 = static: always resident, never in a slot */
} cache_layer;

/* Empty slots, no pins, zero counts. Returns 0, or -1 on bad sizes / no memory (nothing held). */
int cache_layer_init(cache_layer *c, int n_expert, int n_slots);
void cache_layer_free(cache_layer *c);

/* Pins the n experts with the highest score (ties: the lower id) as static; score is (n_expert).
 * Meant for start-up (stats file, or hindsight counts in the simulator): an expert that was in a
 * slot leaves it. */
void cache_layer_pin_top(cache_layer *c, const double *score, int n);

/* Places expert e into an empty slot (start placement of the exchange). Returns the slot or -1. */
int cache_layer_place(cache_layer *c, int e);

typedef struct {
    int slot;      /* slot holding the expert after the access; -1 = pinned or served cold */
    int evicted;   /* expert the executor must drop from `slot` before filling it; -1 = none */
    int hit;       /* 1 when the expert was resident (pinned or in a slot) before this token */
} cache_outcome;

/* Serves one token at this layer: ids are its k chosen experts (distinct, < n_expert). Updates
 * the counts and recency, and for LRU/LFU/Belady fills a slot for each miss (evicting per the
 * policy among slots not used by this token; when every slot is in use by this token the miss is
 * served cold). next_use (n_expert, Belady only, else NULL) holds, for each expert, when it is
 * next used after this token, in any increasing unit (token index; INT64_MAX: never). out[k] gets one outcome per id; returns hits. */
int cache_access(cache_layer *c, const policy_params *p, const int *ids, int k,
                 const int64_t *next_use, cache_outcome *out);

/* One swap of an exchange round: expert_in replaces expert_out (-1: the slot was empty). */
typedef struct { int layer, slot, expert_in, expert_out; } cache_swap;

/* Chooses an exchange round over n_layer layers: per layer, the hottest non-resident experts
 * (count >= floor) are paired with the coldest slots while in > hyst x out; the pairs with the
 * largest gain (in - out) are kept, at most swap_max in all (global) or per layer. Writes at most
 * max_out swaps to out, hottest first; returns how many, or -1 on no memory. Changes nothing:
 * the engine copies the incoming experts and applies the swaps at a token boundary. */
int exchange_plan(const cache_layer *layers, int n_layer, const policy_params *p,
                  cache_swap *out, int max_out);

/* Applies one swap to its layer (the flip at the token boundary). */
void cache_apply_swap(cache_layer *c, const cache_swap *s);

#endif
