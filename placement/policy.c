/* policy.c - the expert cache policies: per-layer slot bookkeeping, victim choice per policy
 * (one table row each) and the histogram exchange's round planning. */
#include "policy.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Victim among the slots not used by the current token (slot_used < now); -1 if none. */
typedef int (*victim_fn)(const cache_layer *c, const int64_t *next_use, int64_t now);

static int victim_lru(const cache_layer *c, const int64_t *next_use, int64_t now) {
    (void)next_use;
    int best = -1;
    for (int s = 0; s < c->n_slots; s++)
        if (c->slot_used[s] < now && (best < 0 || c->slot_used[s] < c->slot_used[best])) best = s;
    return best;
}

static int victim_lfu(const cache_layer *c, const int64_t *next_use, int64_t now) {
    (void)next_use;
    int best = -1;
    for (int s = 0; s < c->n_slots; s++) {
        if (c->slot_used[s] >= now) continue;
        if (best < 0) { best = s; continue; }
        double a = c->count[c->slot_expert[s]], b = c->count[c->slot_expert[best]];
        if (a < b || (a == b && c->slot_used[s] < c->slot_used[best])) best = s;
    }
    return best;
}

static int victim_belady(const cache_layer *c, const int64_t *next_use, int64_t now) {
    assert(next_use && "Belady needs the next use of each expert");
    int best = -1;
    for (int s = 0; s < c->n_slots; s++) {
        if (c->slot_used[s] >= now) continue;
        if (best < 0) { best = s; continue; }
        int64_t a = next_use[c->slot_expert[s]], b = next_use[c->slot_expert[best]];
        if (a > b || (a == b && c->slot_used[s] < c->slot_used[best])) best = s;
    }
    return best;
}

static const struct {
    const char *name;
    victim_fn victim;   /* NULL: a miss is served cold, nothing is cached on demand */
    int counts;         /* keeps decayed counts (0: none, 1: lfu_decay, 2: swap_decay) */
} policy_table[POLICY_COUNT] = {
    [POLICY_LRU]      = { "lru",      victim_lru,    0 },
    [POLICY_LFU]      = { "lfu",      victim_lfu,    1 },
    [POLICY_STATIC]   = { "static",   NULL,          0 },
    [POLICY_BELADY]   = { "belady",   victim_belady, 0 },
    [POLICY_EXCHANGE] = { "exchange", NULL,          2 },
};

policy_params policy_defaults(policy_kind kind) {
    policy_params p = {
        .kind = kind, .lfu_decay = 0.995,
        .swap_interval = 64, .swap_max = 64, .swap_floor = 4.0, .swap_hyst = 2.0,
        .swap_decay = 0.995, .swap_per_layer = 0,
    };
    return p;
}

const char *policy_name(policy_kind kind) {
    return (unsigned)kind < POLICY_COUNT ? policy_table[kind].name : "?";
}

int policy_parse(const char *name) {
    for (int i = 0; i < POLICY_COUNT; i++)
        if (!strcmp(name, policy_table[i].name)) return i;
    return -1;
}

int cache_layer_init(cache_layer *c, int n_expert, int n_slots) {
    memset(c, 0, sizeof *c);
    if (n_expert < 1 || n_slots < 0 || n_slots > n_expert) return -1;
    c->n_expert = n_expert; c->n_slots = n_slots;
    c->slot_expert = malloc((size_t)(n_slots ? n_slots : 1) * sizeof *c->slot_expert);
    c->slot_used = malloc((size_t)(n_slots ? n_slots : 1) * sizeof *c->slot_used);
    c->expert_slot = malloc((size_t)n_expert * sizeof *c->expert_slot);
    c->count = calloc((size_t)n_expert, sizeof *c->count);
    c->pinned = calloc((size_t)n_expert, 1);
    if (!c->slot_expert || !c->slot_used || !c->expert_slot || !c->count || !c->pinned) {
        cache_layer_free(c);
        return -1;
    }
    for (int s = 0; s < n_slots; s++) { c->slot_expert[s] = -1; c->slot_used[s] = -1; }
    for (int e = 0; e < n_expert; e++) c->expert_slot[e] = -1;
    return 0;
}

void cache_layer_free(cache_layer *c) {
    free(c->slot_expert); free(c->slot_used); free(c->expert_slot); free(c->count); free(c->pinned);
    memset(c, 0, sizeof *c);
}

void cache_layer_pin_top(cache_layer *c, const double *score, int n) {
    if (n > c->n_expert) n = c->n_expert;
    for (int i = 0; i < n; i++) {
        int best = -1;
        for (int e = 0; e < c->n_expert; e++)
            if (!c->pinned[e] && (best < 0 || score[e] > score[best])) best = e;
        if (best < 0) break;  /* everything pinned already */
        c->pinned[best] = 1;
        int s = c->expert_slot[best];
        if (s >= 0) { c->slot_expert[s] = -1; c->slot_used[s] = -1; c->expert_slot[best] = -1; }
    }
}

int cache_layer_place(cache_layer *c, int e) {
    assert(e >= 0 && e < c->n_expert);
    if (c->pinned[e] || c->expert_slot[e] >= 0) return c->expert_slot[e];
    for (int s = 0; s < c->n_slots; s++)
        if (c->slot_expert[s] < 0) {
            c->slot_expert[s] = e; c->expert_slot[e] = s; c->slot_used[s] = c->tick - 1;
            return s;
        }
    return -1;
}

static int slot_empty(const cache_layer *c) {
    for (int s = 0; s < c->n_slots; s++) if (c->slot_expert[s] < 0) return s;
    return -1;
}

int cache_access(cache_layer *c, const policy_params *p, const int *ids, int k,
                 const int64_t *next_use, cache_outcome *out) {
    assert((unsigned)p->kind < POLICY_COUNT);
    int64_t now = c->tick++;
    int counts = policy_table[p->kind].counts;
    if (counts) {
        double d = counts == 1 ? p->lfu_decay : p->swap_decay;
        if (d != 1.0) for (int e = 0; e < c->n_expert; e++) c->count[e] *= d;
        for (int i = 0; i < k; i++) c->count[ids[i]] += 1.0;
    }
    /* Hits first, so that every expert of this token is marked in use before any eviction. */
    int hits = 0;
    for (int i = 0; i < k; i++) {
        int e = ids[i];
        assert(e >= 0 && e < c->n_expert);
        int s = c->expert_slot[e];
        out[i].evicted = -1;
        out[i].slot = c->pinned[e] ? -1 : s;
        out[i].hit = c->pinned[e] || s >= 0;
        if (s >= 0) c->slot_used[s] = now;
        hits += out[i].hit;
    }
    victim_fn victim = policy_table[p->kind].victim;
    if (!victim) return hits;
    for (int i = 0; i < k; i++) {
        if (out[i].hit) continue;
        int e = ids[i];
        int s = slot_empty(c);
        if (s < 0) s = victim(c, next_use, now);
        if (s < 0) continue;  /* every slot serves this token: this one is computed cold */
        int old = c->slot_expert[s];
        if (old >= 0) c->expert_slot[old] = -1;
        out[i].slot = s; out[i].evicted = old;
        c->slot_expert[s] = e; c->expert_slot[e] = s; c->slot_used[s] = now;
    }
    return hits;
}

/* ------------------------------------------------------------------ exchange */

typedef struct { double gain; cache_swap s; } swap_cand;

static int cand_by_gain(const void *a, const void *b) {
    const swap_cand *x = a, *y = b;
    if (x->gain != y->gain) return x->gain > y->gain ? -1 : 1;
    if (x->s.layer != y->s.layer) return x->s.layer - y->s.layer;
    return x->s.slot - y->s.slot;
}

/* Sorts idx[0..n) by key: descending when desc, ties by the lower index (insertion sort: n is
 * an expert count per layer, and this runs once per round). */
static void sort_by(int *idx, int n, const double *key, int desc) {
    for (int i = 1; i < n; i++) {
        int v = idx[i], j = i;
        while (j > 0) {
            double a = key[idx[j - 1]], b = key[v];
            int before = desc ? (b > a) : (b < a);
            if (!before) break;
            idx[j] = idx[j - 1]; j--;
        }
        idx[j] = v;
    }
}

/* Appends the worthwhile pairs of one layer to cand; returns how many. */
static int layer_candidates(const cache_layer *c, int layer, const policy_params *p,
                            int *in, int *outs, double *slot_key, swap_cand *cand) {
    int n_in = 0, n_out = 0;
    for (int e = 0; e < c->n_expert; e++)
        if (!c->pinned[e] && c->expert_slot[e] < 0 && c->count[e] >= p->swap_floor) in[n_in++] = e;
    sort_by(in, n_in, c->count, 1);
    for (int s = 0; s < c->n_slots; s++) {
        slot_key[s] = c->slot_expert[s] < 0 ? -1.0 : c->count[c->slot_expert[s]];
        outs[n_out++] = s;
    }
    sort_by(outs, n_out, slot_key, 0);
    int n = 0;
    for (int i = 0; i < n_in && i < n_out; i++) {
        int s = outs[i], old = c->slot_expert[s];
        double cin = c->count[in[i]], cout = old < 0 ? 0.0 : c->count[old];
        if (!(cin > p->swap_hyst * cout)) break;  /* sorted: no later pair does better */
        cand[n].gain = cin - cout;
        cand[n].s = (cache_swap){ .layer = layer, .slot = s, .expert_in = in[i], .expert_out = old };
        n++;
    }
    return n;
}

int exchange_plan(const cache_layer *layers, int n_layer, const policy_params *p,
                  cache_swap *out, int max_out) {
    int max_e = 1, max_s = 1;
    for (int l = 0; l < n_layer; l++) {
        if (layers[l].n_expert > max_e) max_e = layers[l].n_expert;
        if (layers[l].n_slots > max_s) max_s = layers[l].n_slots;
    }
    size_t n_cand_max = p->swap_per_layer ? (size_t)max_s : (size_t)max_s * (size_t)n_layer;
    int *in = malloc((size_t)max_e * sizeof *in), *outs = malloc((size_t)max_s * sizeof *outs);
    double *slot_key = malloc((size_t)max_s * sizeof *slot_key);
    swap_cand *cand = malloc((n_cand_max ? n_cand_max : 1) * sizeof *cand);
    if (!in || !outs || !slot_key || !cand) { free(in); free(outs); free(slot_key); free(cand); return -1; }
    int n_out = 0;
    if (p->swap_per_layer) {
        for (int l = 0; l < n_layer; l++) {
            int n = layer_candidates(&layers[l], l, p, in, outs, slot_key, cand);
            for (int i = 0; i < n && i < p->swap_max && n_out < max_out; i++) out[n_out++] = cand[i].s;
        }
    } else {
        int n = 0;
        for (int l = 0; l < n_layer; l++) n += layer_candidates(&layers[l], l, p, in, outs, slot_key, cand + n);
        qsort(cand, (size_t)n, sizeof *cand, cand_by_gain);
        for (int i = 0; i < n && i < p->swap_max && n_out < max_out; i++) out[n_out++] = cand[i].s;
    }
    free(in); free(outs); free(slot_key); free(cand);
    return n_out;
}

void cache_apply_swap(cache_layer *c, const cache_swap *s) {
    assert(s->slot >= 0 && s->slot < c->n_slots && c->slot_expert[s->slot] == s->expert_out);
    if (s->expert_out >= 0) c->expert_slot[s->expert_out] = -1;
    c->slot_expert[s->slot] = s->expert_in;
    c->expert_slot[s->expert_in] = s->slot;
    c->slot_used[s->slot] = c->tick - 1;
}
