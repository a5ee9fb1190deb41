/* sim.c - replays a routing trace through one cache policy, token by token across all layers
 * (so that a global exchange round sees every layer at the same point in time). */
#include "sim.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* For every selection (t, l, i): the next token > t that chooses the same expert at layer l
 * (INT64_MAX: never). Belady's oracle. */
static int64_t *next_uses(const routing *r) {
    size_t n = (size_t)r->n_tokens * r->n_layer * r->k;
    int64_t *nxt = malloc((n ? n : 1) * sizeof *nxt);
    int64_t *seen = malloc((size_t)r->n_expert * sizeof *seen);
    if (!nxt || !seen) { free(nxt); free(seen); return NULL; }
    for (int l = 0; l < r->n_layer; l++) {
        for (int e = 0; e < r->n_expert; e++) seen[e] = INT64_MAX;
        for (int64_t t = r->n_tokens - 1; t >= 0; t--) {
            const uint16_t *row = routing_row(r, t, l);
            if (!row) continue;
            size_t base = ((size_t)t * r->n_layer + l) * r->k;
            for (int i = 0; i < r->k; i++) nxt[base + i] = seen[row[i]];
            for (int i = 0; i < r->k; i++) seen[row[i]] = t;
        }
    }
    free(seen);
    return nxt;
}

void sim_result_free(sim_result *res) {
    free(res->layer_hits); free(res->layer_sel);
    memset(res, 0, sizeof *res);
}

double sim_hit_rate(const sim_result *res) {
    return res->selections ? (double)res->hits / (double)res->selections : 0.0;
}

double sim_misses_per_token(const sim_result *res) {
    return res->n_tokens ? (double)(res->selections - res->hits) / (double)res->n_tokens : 0.0;
}

/* Static pins and (exchange, warm) start placement from hindsight counts. */
static void sim_place(cache_layer *c, const int64_t *counts, const policy_params *p, const sim_config *cfg,
                      int n_pin, double *score) {
    for (int e = 0; e < c->n_expert; e++) score[e] = (double)counts[e];
    cache_layer_pin_top(c, score, n_pin);
    if (p->kind != POLICY_EXCHANGE || !cfg->exchange_warm) return;
    for (int i = 0; i < c->n_slots; i++) {
        int best = -1;
        for (int e = 0; e < c->n_expert; e++)
            if (!c->pinned[e] && c->expert_slot[e] < 0 && (best < 0 || score[e] > score[best])) best = e;
        if (best < 0 || cache_layer_place(c, best) < 0) break;
    }
}

int sim_run(const routing *r, const policy_params *p, const sim_config *cfg, sim_result *res) {
    memset(res, 0, sizeof *res);
    int is_static = p->kind == POLICY_STATIC;
    int n_slots = is_static ? 0 : cfg->n_slots;
    int n_pin = is_static ? cfg->n_slots + cfg->n_static : cfg->n_static;
    if (cfg->n_slots < 0 || cfg->n_static < 0 || cfg->n_slots + cfg->n_static > r->n_expert) return -1;
    int L = r->n_layer, K = r->k;
    cache_layer *layers = calloc((size_t)L, sizeof *layers);
    int64_t *counts = malloc((size_t)L * r->n_expert * sizeof *counts);
    double *score = malloc((size_t)r->n_expert * sizeof *score);
    int64_t *next_use = malloc((size_t)L * r->n_expert * sizeof *next_use);
    int64_t *nxt = p->kind == POLICY_BELADY ? next_uses(r) : NULL;
    int *ids = malloc((size_t)K * sizeof *ids);
    cache_outcome *out = malloc((size_t)K * sizeof *out);
    cache_swap *swaps = malloc((size_t)(L * (n_slots ? n_slots : 1)) * sizeof *swaps);
    res->layer_hits = calloc((size_t)L, sizeof *res->layer_hits);
    res->layer_sel = calloc((size_t)L, sizeof *res->layer_sel);
    int rc = -1;
    if (!layers || !counts || !score || !next_use || !ids || !out || !swaps || !res->layer_hits ||
        !res->layer_sel || (p->kind == POLICY_BELADY && !nxt))
        goto done;
    routing_count_experts(r, counts);
    for (int l = 0; l < L; l++) {
        if (cache_layer_init(&layers[l], r->n_expert, n_slots) != 0) goto done;
        sim_place(&layers[l], counts + (size_t)l * r->n_expert, p, cfg, n_pin, score);
    }
    for (size_t i = 0; i < (size_t)L * r->n_expert; i++) next_use[i] = INT64_MAX;

    res->kind = p->kind; res->n_layer = L; res->n_tokens = r->n_tokens;
    res->n_slots = n_slots; res->n_static = n_pin;
    for (int64_t t = 0; t < r->n_tokens; t++) {
        for (int l = 0; l < L; l++) {
            const uint16_t *row = routing_row(r, t, l);
            if (!row) continue;
            for (int i = 0; i < K; i++) ids[i] = row[i];
            int64_t *nu = next_use + (size_t)l * r->n_expert;
            int h = cache_access(&layers[l], p, ids, K, nu, out);
            if (nxt) {  /* the oracle: token indices order the future like the layer's ticks */
                const int64_t *nx = nxt + ((size_t)t * L + l) * K;
                for (int i = 0; i < K; i++) nu[ids[i]] = nx[i];
            }
            for (int i = 0; i < K; i++) res->loads += !out[i].hit && out[i].slot >= 0;
            res->hits += h; res->layer_hits[l] += h;
            res->selections += K; res->layer_sel[l] += K;
        }
        if (p->kind == POLICY_EXCHANGE && p->swap_interval > 0 && (t + 1) % p->swap_interval == 0) {
            int n = exchange_plan(layers, L, p, swaps, L * (n_slots ? n_slots : 1));
            if (n < 0) goto done;
            for (int i = 0; i < n; i++) cache_apply_swap(&layers[swaps[i].layer], &swaps[i]);
            res->loads += n; res->rounds++;
        }
    }
    rc = 0;
done:
    if (layers) for (int l = 0; l < L; l++) cache_layer_free(&layers[l]);
    free(layers); free(counts); free(score); free(next_use); free(nxt);
    free(ids); free(out); free(swaps);
    if (rc != 0) sim_result_free(res);
    return rc;
}
