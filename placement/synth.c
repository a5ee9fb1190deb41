/* synth.c - synthetic routing: per layer a Zipf popularity over a random order of the experts
 * that drifts (topic drift), plus stickiness to the previous token's experts and to the last few
 * tokens'. Parameters are fitted per model class to published statistics by coordinate search. */
#include "synth.h"
#include "sim.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Targets: shared/data/routing/README.md and mixtral-8x7b/README.md. GLM: misses per token at
 * 170 slots over 42 layers x top-8 (336 selections): static 100.9, LRU 31.5, LFU 29.3, Belady 13.6. */
const synth_class synth_classes[] = {
    { "mixtral", "Mixtral-8x7B: 32 layers, 8 experts top-2", 32, 8, 2, 83, 32, 6, {
        { SYN_REUSE1, 0, 0.36, 1 }, { SYN_REUSE8, 0, 0.89, 1 }, { SYN_TOP_SHARE, 0, 0.20, 1 },
        { SYN_LRU, 4, 0.597, 1 }, { SYN_STATIC, 4, 0.634, 0 }, { SYN_BELADY, 4, 0.727, 0 } } },
    { "a3b", "Qwen3-30B-A3B: 48 layers, 128 experts top-8", 48, 128, 8, 512, 8, 3, {
        { SYN_REUSE1, 0, 0.45, 1 }, { SYN_REUSE8, 0, 0.80, 1 }, { SYN_LRU, 51, 0.925, 1 } } },
    { "air", "GLM-4.5-Air: 45 MoE layers, 128 experts top-8 (Qwen3/OLMoE-class statistics)", 45, 128, 8, 512, 8, 3, {
        { SYN_REUSE1, 0, 0.45, 1 }, { SYN_REUSE8, 0, 0.80, 1 }, { SYN_LRU, 51, 0.925, 1 } } },
    { "glm", "GLM-class 320B: 42 layers, 288 experts top-8 (the single-card recipe)", 42, 288, 8, 1000, 6, 5, {
        { SYN_LRU, 170, 1 - 31.5 / 336, 1 }, { SYN_STATIC, 170, 1 - 100.9 / 336, 1 },
        { SYN_LFU, 170, 1 - 29.3 / 336, 0 }, { SYN_BELADY, 170, 1 - 13.6 / 336, 0 },
        { SYN_TOUCHED1K, 0, 0.94, 0 } } },
    { NULL, NULL, 0, 0, 0, 0, 0, 0, { { 0, 0, 0, 0 } } },
};

const synth_class *synth_class_find(const char *name) {
    for (const synth_class *c = synth_classes; c->name; c++)
        if (!strcmp(c->name, name)) return c;
    return NULL;
}

static const char *metric_names[SYN_METRIC_COUNT] = {
    [SYN_REUSE1] = "reuse@t-1", [SYN_REUSE8] = "reuse<=8", [SYN_TOP_SHARE] = "top-expert share",
    [SYN_TOUCHED1K] = "touched/1k tok", [SYN_LRU] = "LRU", [SYN_LFU] = "LFU", [SYN_STATIC] = "static-best",
    [SYN_BELADY] = "Belady",
};
const char *synth_metric_name(synth_metric m) { return (unsigned)m < SYN_METRIC_COUNT ? metric_names[m] : "?"; }

/* ------------------------------------------------------------------ generation */

static uint64_t rng_next(uint64_t *s) {  /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unif(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }
static int rng_below(uint64_t *s, int n) { return (int)(rng_unif(s) * n); }

/* Rank drawn from the cumulative Zipf weights cum[0..n) (cum[n-1] = 1). */
static int zipf_rank(const double *cum, int n, double u) {
    int lo = 0, hi = n - 1;
    while (lo < hi) { int mid = (lo + hi) / 2; if (cum[mid] < u) lo = mid + 1; else hi = mid; }
    return lo;
}

/* A fresh popularity order for every layer (rank -> expert). */
static void shuffle_layers(int *perm, int L, int E, uint64_t *s) {
    for (int l = 0; l < L; l++) {
        int *p = perm + (size_t)l * E;
        for (int i = E - 1; i > 0; i--) { int j = rng_below(s, i + 1); int t = p[i]; p[i] = p[j]; p[j] = t; }
    }
}

void synth_generate(routing *r, const synth_params *sp, uint64_t seed) {
    int E = r->n_expert, K = r->k, L = r->n_layer;
    double *cum = malloc((size_t)E * sizeof *cum);
    int *perm = malloc((size_t)L * E * sizeof *perm);  /* (n_layer, n_expert) rank -> expert */
    if (!cum || !perm) { free(cum); free(perm); return; }
    double tot = 0;
    for (int i = 0; i < E; i++) { tot += pow(i + 1.0, -sp->zipf); cum[i] = tot; }
    for (int i = 0; i < E; i++) cum[i] /= tot;
    cum[E - 1] = 1.0;
    uint64_t s = seed ^ 0x5EEDF00Dull;
    for (int i = 0; i < L * E; i++) perm[i] = i % E;
    shuffle_layers(perm, L, E, &s);
    for (int64_t t = 0; t < r->n_tokens; t++) {
        /* topic drift: the topic changes (every layer's popularity order reshuffles) with
         * probability drift per token; within a topic the hot set holds still */
        if (t > 0 && rng_unif(&s) < sp->drift) shuffle_layers(perm, L, E, &s);
        for (int l = 0; l < L; l++) {
            int *p = perm + (size_t)l * E;
            uint16_t *row = r->ids + ((size_t)t * L + l) * K;
            for (int i = 0; i < K; i++) {
                int e = -1;
                for (int tries = 0; tries < 64; tries++) {
                    double u = rng_unif(&s);
                    int cand;
                    if (u < sp->stick && t >= 1)
                        cand = r->ids[((size_t)(t - 1) * L + l) * K + rng_below(&s, K)];
                    else if (u < sp->stick + sp->recent && t >= 2) {
                        int64_t d = 2 + rng_below(&s, sp->window - 1);
                        if (d > t) d = t;
                        cand = r->ids[((size_t)(t - d) * L + l) * K + rng_below(&s, K)];
                    } else
                        cand = p[zipf_rank(cum, E, rng_unif(&s))];
                    int dup = 0;
                    for (int j = 0; j < i; j++) dup |= row[j] == cand;
                    if (!dup) { e = cand; break; }
                }
                for (int x = 0; e < 0; x++) {  /* pathological skew: the most popular unused */
                    int dup = 0;
                    for (int j = 0; j < i; j++) dup |= row[j] == p[x];
                    if (!dup) e = p[x];
                }
                row[i] = (uint16_t)e;
            }
        }
    }
    free(cum); free(perm);
}

/* ------------------------------------------------------------------ measuring and fitting */

double synth_measure(const routing *r, synth_metric m, int slots) {
    static const policy_kind kinds[SYN_METRIC_COUNT] = {
        [SYN_LRU] = POLICY_LRU, [SYN_LFU] = POLICY_LFU, [SYN_STATIC] = POLICY_STATIC, [SYN_BELADY] = POLICY_BELADY };
    switch (m) {
    case SYN_REUSE1: return routing_reuse(r, 1);
    case SYN_REUSE8: return routing_reuse(r, 8);
    case SYN_TOP_SHARE: return routing_top_share(r);
    case SYN_TOUCHED1K: return routing_touched(r, r->n_tokens < 1000 ? (int)r->n_tokens : 1000);
    case SYN_LRU: case SYN_LFU: case SYN_STATIC: case SYN_BELADY: {
        policy_params p = policy_defaults(kinds[m]);
        sim_config cfg = { .n_slots = slots };
        sim_result res;
        if (sim_run(r, &p, &cfg, &res)) return -1;
        double h = sim_hit_rate(&res);
        sim_result_free(&res);
        return h;
    }
    default: return -1;
    }
}

static double fit_error(const synth_class *c, routing *r, const synth_params *sp, uint64_t seed, double *achieved) {
    synth_generate(r, sp, seed);
    double err = 0;
    for (int i = 0; i < c->n_targets; i++) {
        const synth_target *tg = &c->targets[i];
        double v = synth_measure(r, tg->metric, tg->slots);
        if (achieved) achieved[i] = v;
        if (tg->fit) err += (v - tg->target) * (v - tg->target);
    }
    return err;
}

static double clampd(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

static void params_clamp(synth_params *p) {
    p->zipf = clampd(p->zipf, 0.0, 3.0);
    p->stick = clampd(p->stick, 0.0, 0.95);
    p->recent = clampd(p->recent, 0.0, 0.95 - p->stick);
    p->drift = clampd(p->drift, 0.0, 0.5);
    p->window = p->window < 2 ? 2 : p->window > 256 ? 256 : p->window;
}

int synth_fit(const synth_class *c, uint64_t seed, synth_params *out, double *achieved) {
    routing r;
    int layers = c->fit_layers < c->n_layer ? c->fit_layers : c->n_layer;
    if (routing_init(&r, layers, c->n_expert, c->k, c->fit_tokens)) return -1;
    /* a few starts over the two parameters that trade off against each other (skew vs drift) */
    static const synth_params starts[] = {
        { 0.6, 0.2, 0.2, 0.0, 8 }, { 1.0, 0.2, 0.2, 0.005, 8 }, { 1.5, 0.2, 0.2, 0.02, 8 }, { 2.0, 0.2, 0.2, 0.05, 8 },
        { 0.6, 0.2, 0.4, 0.0, 32 }, { 1.0, 0.2, 0.4, 0.005, 32 }, { 1.5, 0.2, 0.4, 0.02, 32 },
    };
    synth_params best = starts[0];
    double best_err = 1e300;
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++) {
        double err = fit_error(c, &r, &starts[i], seed, NULL);
        if (err < best_err) { best_err = err; best = starts[i]; }
    }
    double step[5] = { 0.4, 0.2, 0.2, 0.01, 16 };
    for (int round = 0; round < 8; round++) {
        int improved = 1;
        for (int pass = 0; pass < 6 && improved; pass++) {
            improved = 0;
            for (int d = 0; d < 5; d++)
                for (int sgn = -1; sgn <= 1; sgn += 2) {
                    synth_params p = best;
                    if (d == 4) {
                        int dw = (int)step[4] < 1 ? 1 : (int)step[4];
                        p.window += sgn * dw;
                    } else {
                        double *f = d == 0 ? &p.zipf : d == 1 ? &p.stick : d == 2 ? &p.recent : &p.drift;
                        *f += sgn * step[d];
                    }
                    params_clamp(&p);
                    double err = fit_error(c, &r, &p, seed, NULL);
                    if (err < best_err - 1e-12) { best = p; best_err = err; improved = 1; }
                }
        }
        for (int d = 0; d < 5; d++) step[d] *= 0.5;
        if (best.drift < 4 * step[3]) step[3] = best.drift / 4 > 1e-4 ? best.drift / 4 : 1e-4;  /* small drifts matter too */
    }
    fit_error(c, &r, &best, seed, achieved);
    *out = best;
    routing_free(&r);
    return 0;
}

int synth_evaluate(const synth_class *c, uint64_t seed, const synth_params *sp, double *achieved) {
    routing r;
    int layers = c->fit_layers < c->n_layer ? c->fit_layers : c->n_layer;
    if (routing_init(&r, layers, c->n_expert, c->k, c->fit_tokens)) return -1;
    fit_error(c, &r, sp, seed, achieved);
    routing_free(&r);
    return 0;
}
