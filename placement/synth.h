/* synth.h - synthetic routing traces per model class (popularity skew, stickiness, topic drift),
 * fitted to the published statistics of shared/data/routing/README.md. Deterministic by seed.
 * Pure: fills a routing struct; the caller writes it out. */
#ifndef HM_SYNTH_H
#define HM_SYNTH_H
#include "routing.h"
#include <stdint.h>

typedef enum {
    SYN_REUSE1,     /* routing_reuse(1) */
    SYN_REUSE8,     /* routing_reuse(8) */
    SYN_TOP_SHARE,  /* routing_top_share */
    SYN_TOUCHED1K,  /* routing_touched(1000) (or over the whole trace when shorter) */
    SYN_LRU,        /* hit rate at `slots` slots per layer, empty start */
    SYN_LFU,        /* LFU, decay 0.995 */
    SYN_STATIC,     /* static top-`slots` by hindsight */
    SYN_BELADY,
    SYN_METRIC_COUNT
} synth_metric;

typedef struct {
    synth_metric metric;
    int slots;        /* cache metrics: slots per layer */
    double target;
    int fit;          /* 1: part of the fit objective; 0: reported only */
} synth_target;

typedef struct {
    const char *name;
    const char *about;
    int n_layer, n_expert, k;
    int fit_tokens, fit_layers;   /* the trace the fit runs on (a slice of the real shape) */
    int n_targets;
    synth_target targets[8];
} synth_class;

typedef struct {
    double zipf;     /* popularity: the expert of rank r gets weight 1 / (r + 1)^zipf */
    double stick;    /* per choice: probability of repeating an expert of token t-1 */
    double recent;   /* per choice: probability of repeating an expert of tokens t-window..t-2 */
    double drift;    /* per token: probability of a topic change (every layer's popularity order
                        is drawn afresh); within a topic the hot set holds still */
    int window;      /* how far back `recent` reaches (2..256 tokens) */
} synth_params;

/* The table of classes ("mixtral", "a3b", "air", "glm"); NULL-terminated by name. */
extern const synth_class synth_classes[];
const synth_class *synth_class_find(const char *name);

/* Fills every row of r (sized by routing_init) from params; same seed, same trace. */
void synth_generate(routing *r, const synth_params *sp, uint64_t seed);

/* One metric of a trace (hit rates via the simulator); -1 if it cannot be computed. */
double synth_measure(const routing *r, synth_metric m, int slots);
const char *synth_metric_name(synth_metric m);

/* Fits params to the class's targets on a fit-sized trace (coordinate search, fixed seed);
 * achieved gets the value of each target on that trace (n_targets). Returns 0 or -1 (memory). */
int synth_fit(const synth_class *c, uint64_t seed, synth_params *out, double *achieved);
/* The targets' values for given params on the fit-sized trace. Returns 0 or -1 (memory). */
int synth_evaluate(const synth_class *c, uint64_t seed, const synth_params *sp, double *achieved);

#endif
