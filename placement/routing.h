/* routing.h - a routing trace in memory (which experts each token chose at each layer) and the
 * locality statistics the cache policies depend on. Pure: arrays in, numbers out. */
#ifndef HM_ROUTING_H
#define HM_ROUTING_H
#include <stddef.h>
#include <stdint.h>

/* Marks a (token, layer) whose choice was not recorded (a dropped row, a dense layer). */
#define ROUTING_NONE 0xFFFFu
/* Largest expert count a trace can hold (ids are uint16 in memory, ROUTING_NONE reserved). */
#define ROUTING_MAX_EXPERT 65535

typedef struct {
    int n_layer;      /* MoE layers recorded */
    int n_expert;     /* routed experts per layer */
    int k;            /* experts chosen per token per layer (top-k) */
    int64_t n_tokens;
    uint16_t *ids;    /* (n_tokens, n_layer, k) expert ids; a row is all ROUTING_NONE or all valid */
} routing;

/* The k ids of token t at layer l, or NULL when that row was not recorded. */
static inline const uint16_t *routing_row(const routing *r, int64_t t, int l) {
    const uint16_t *p = r->ids + ((size_t)t * (size_t)r->n_layer + (size_t)l) * (size_t)r->k;
    return p[0] == ROUTING_NONE ? 0 : p;
}

/* Allocates ids for n_tokens tokens, all rows ROUTING_NONE. Returns 0, or -1 when the sizes are
 * out of range (nothing allocated). routing_free releases it; both accept a zeroed struct. */
int routing_init(routing *r, int n_layer, int n_expert, int k, int64_t n_tokens);
void routing_free(routing *r);

/* Recorded rows (token, layer pairs with a choice) and routed selections (rows x k). */
int64_t routing_count_rows(const routing *r);

/* Per-layer expert use counts over the whole trace: counts is (n_layer, n_expert). */
void routing_count_experts(const routing *r, int64_t *counts);

/* Reuse within a window: the fraction of selections at token t whose expert was also chosen at
 * the same layer by one of tokens t-w..t-1, over selections whose w previous rows were all
 * recorded (the convention of shared/data/routing/mixtral-8x7b/README.md). -1 if none qualify. */
double routing_reuse(const routing *r, int w);

/* Mean over layers of the share of selections that go to the layer's most popular expert. */
double routing_top_share(const routing *r);

/* Mean over layers and over windows of `window` tokens of the fraction of experts touched. */
double routing_touched(const routing *r, int window);

#endif
