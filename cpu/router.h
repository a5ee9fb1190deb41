/* router.h - MoE routing math: router logits -> chosen experts and their weights. Pure functions. */
#ifndef HM_ROUTER_H
#define HM_ROUTER_H

typedef struct {
    int fn;            /* 1 softmax, 2 sigmoid (enum hm_router_fn) */
    int n_expert, k;
    int norm_topk;     /* renormalise the k weights to sum 1 */
    float scale;       /* routed_scaling_factor, applied last */
    int n_group, topk_group; /* group-limited selection (sigmoid routers); 1, 1 = off */
} router_params;

/* Chooses k experts from logits[n_expert]. bias (may be NULL) is added to the scores for the
 * choice only, never to the weights. Writes idx[k] (by descending selection score, ties to the
 * lower expert id) and w[k]. */
void router_select(const router_params *p, const float *logits, const float *bias, int *idx, float *w);

/* The weights router_select would give to the experts idx[k] (chosen elsewhere: a replayed
 * trace). Same rule: softmax probability or sigmoid score, renormalised, scaled. */
void router_weights(const router_params *p, const float *logits, const int *idx, float *w);

#endif
