/* routeio.h - the routing side channels of a run: --record-routing FILE writes every token's
 * expert choices (src/trace.h format); --replay-routing FILE (benchmark only) replaces the
 * router's choice with a trace's, compute unchanged. */
#ifndef HM_ROUTEIO_H
#define HM_ROUTEIO_H
#include "routing.h"
#include "runner.h"
#include "trace.h"

typedef struct {
    struct trace_writer *rec;
    routing replay; int has_replay;
    int n_layer, k;
    int *row;          /* (n_layer, k): the token being recorded */
    int *replay_row;   /* (n_layer, k): the token being replayed, -1 where the trace has none */
    struct gpu_exec *gpu; /* the GPU target (created with route_io), or NULL */
    int *tl;           /* (n_layer): the replayed trace's layer for each model layer, -1: none */
} routeio;

/* Opens what is asked for (either path may be NULL) for model m. A replayed trace may cover all
 * layers or the MoE layers only. Returns 0 or -1. */
int routeio_open(routeio *io, const hm_model *m, const char *record, const char *replay, hm_error *e);
/* Hooks io into r (the GPU target must have been created with runner_opts.route_io). Returns 0 or -1. */
int routeio_attach(routeio *io, hm_runner *r, hm_error *e);
/* Before token number t of the run (replay wraps around the trace). */
void routeio_before(routeio *io, int64_t t);
/* After the token's forward pass: writes its record. */
int routeio_after(routeio *io, hm_error *e);
int routeio_close(routeio *io, hm_error *e);

/* Per-layer expert use counts from a routing trace (binary or JSONL) of model m, recorded over
 * all layers or over the MoE layers only: *counts is (m's n_layer, n_expert), zero for dense
 * layers; free() it. A trace of another shape (layers, experts, top-k) is an error naming both. */
int routeio_counts(const char *path, const hm_model *m, int64_t **counts, hm_error *e);

#endif
