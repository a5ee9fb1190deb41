/* routeio.c - recording and replaying expert choices around the forward pass. */
#include "routeio.h"
#include "exec.h"
#include <stdlib.h>
#include <string.h>

static void on_route(void *ud, int layer, int pos, const int *idx, const float *w, int k) {
    routeio *io = ud;
    (void)pos; (void)w;
    if (io->row && layer < io->n_layer) memcpy(io->row + layer * io->k, idx, sizeof(int) * (size_t)k);
}

int routeio_open(routeio *io, const hm_model *m, const char *record, const char *replay, hm_error *e) {
    memset(io, 0, sizeof *io);
    io->n_layer = m->cfg.n_layer; io->k = m->cfg.n_expert_used;
    size_t n = (size_t)io->n_layer * io->k;
    if (record) {
        if (!(io->rec = trace_writer_open(record, io->n_layer, m->cfg.n_expert, io->k, e))) return -1;
        io->row = malloc(sizeof(int) * n);
        for (size_t i = 0; i < n; i++) io->row[i] = -1;
    }
    if (replay) {
        trace_info info;
        int n_moe = 0;
        for (int l = 0; l < io->n_layer; l++) n_moe += m->layers[l].is_moe;
        if (trace_load(replay, &io->replay, &info, e)) { routeio_close(io, NULL); return -1; }
        const int all = io->replay.n_layer == io->n_layer && io->n_layer != n_moe;
        if (trace_conform(replay, &io->replay, &info, all ? io->n_layer : n_moe, m->cfg.n_expert, io->k, e)) {
            routeio_close(io, NULL);
            return -1;
        }
        io->tl = malloc(sizeof(int) * (size_t)io->n_layer);
        for (int l = 0, j = 0; l < io->n_layer; l++) {
            io->tl[l] = all || m->layers[l].is_moe ? j : -1;
            j += all || m->layers[l].is_moe;
        }
        if (io->replay.n_tokens < 1) { routeio_close(io, NULL); return hm_fail(e, "%s: expected at least one token, found none", replay); }
        io->has_replay = 1;
        io->replay_row = malloc(sizeof(int) * n);
    }
    return 0;
}

int routeio_attach(routeio *io, hm_runner *r, hm_error *e) {
    if (!io->rec && !io->has_replay) return 0;
    if (r->device == HM_DEVICE_CUDA) {
        if (r->gpu2) return hm_fail(e, "--record-routing / --replay-routing: expected one GPU, found a two-GPU pipeline");
        if (!gpu_exec_route_ids(r->gpu))
            return hm_fail(e, "--record-routing / --replay-routing: the GPU target was created without route_io");
        io->gpu = r->gpu;
        return 0;
    }
    if (io->rec) { r->cpu.route_cb = on_route; r->cpu.route_ud = io; }
    if (io->has_replay) r->cpu.replay = io->replay_row;
    return 0;
}

void routeio_before(routeio *io, int64_t t) {
    if (!io->has_replay) return;
    const uint16_t *row;
    for (int l = 0; l < io->n_layer; l++) {
        row = io->tl[l] < 0 ? NULL : routing_row(&io->replay, t % io->replay.n_tokens, io->tl[l]);
        for (int j = 0; j < io->k; j++) io->replay_row[l * io->k + j] = row ? row[j] : -1;
    }
    if (io->gpu) memcpy(gpu_exec_replay_ids(io->gpu), io->replay_row, sizeof(int) * (size_t)io->n_layer * io->k);
}

int routeio_after(routeio *io, hm_error *e) {
    if (!io->rec) return 0;
    if (io->gpu) memcpy(io->row, gpu_exec_route_ids(io->gpu), sizeof(int) * (size_t)io->n_layer * io->k);
    int rc = trace_writer_token(io->rec, io->row, e);
    for (size_t i = 0; i < (size_t)io->n_layer * io->k; i++) io->row[i] = -1;
    return rc;
}

int routeio_close(routeio *io, hm_error *e) {
    int rc = 0;
    if (io->rec) rc = trace_writer_close(io->rec, e);
    if (io->has_replay || io->replay.ids) routing_free(&io->replay);
    free(io->row); free(io->replay_row); free(io->tl);
    memset(io, 0, sizeof *io);
    return rc;
}

int routeio_counts(const char *path, const hm_model *m, int64_t **counts, hm_error *e) {
    const hm_config *c = &m->cfg;
    routing r = { 0 };
    trace_info info;
    *counts = NULL;
    if (trace_load(path, &r, &info, e)) return -1;
    int n_moe = 0;
    for (int l = 0; l < c->n_layer; l++) n_moe += m->layers[l].is_moe;
    const int all = r.n_layer == c->n_layer && r.n_layer != n_moe;
    if (trace_conform(path, &r, &info, all ? c->n_layer : n_moe, c->n_expert, c->n_expert_used, e)) {
        routing_free(&r);
        return -1;
    }
    int64_t *cnt = calloc((size_t)r.n_layer * (size_t)r.n_expert, sizeof *cnt);
    int64_t *out = calloc((size_t)c->n_layer * (size_t)c->n_expert, sizeof *out);
    if (!cnt || !out) { free(cnt); free(out); routing_free(&r); return hm_fail(e, "%s: out of memory", path); }
    routing_count_experts(&r, cnt);
    for (int l = 0, j = 0; l < c->n_layer; l++) {
        if (!m->layers[l].is_moe) { j += all; continue; }
        memcpy(out + (size_t)l * c->n_expert, cnt + (size_t)j * r.n_expert, sizeof *out * (size_t)c->n_expert);
        j++;
    }
    free(cnt);
    routing_free(&r);
    *counts = out;
    return 0;
}
