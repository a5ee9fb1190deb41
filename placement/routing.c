/* routing.c - routing trace storage and its locality statistics (reuse distance, popularity). */
#include "routing.h"
#include <stdlib.h>
#include <string.h>

int routing_init(routing *r, int n_layer, int n_expert, int k, int64_t n_tokens) {
    memset(r, 0, sizeof *r);
    if (n_layer < 1 || n_expert < 1 || n_expert > ROUTING_MAX_EXPERT || k < 1 || k > n_expert || n_tokens < 0)
        return -1;
    size_t n = (size_t)n_tokens * (size_t)n_layer * (size_t)k;
    if (n_tokens > 0 && n / (size_t)n_tokens / (size_t)n_layer != (size_t)k) return -1;
    uint16_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return -1;
    memset(ids, 0xFF, n * sizeof *ids);  /* every row ROUTING_NONE */
    r->n_layer = n_layer; r->n_expert = n_expert; r->k = k; r->n_tokens = n_tokens; r->ids = ids;
    return 0;
}

void routing_free(routing *r) {
    free(r->ids);
    memset(r, 0, sizeof *r);
}

int64_t routing_count_rows(const routing *r) {
    int64_t n = 0;
    for (int64_t t = 0; t < r->n_tokens; t++)
        for (int l = 0; l < r->n_layer; l++) n += routing_row(r, t, l) != 0;
    return n;
}

void routing_count_experts(const routing *r, int64_t *counts) {
    memset(counts, 0, (size_t)r->n_layer * (size_t)r->n_expert * sizeof *counts);
    for (int64_t t = 0; t < r->n_tokens; t++)
        for (int l = 0; l < r->n_layer; l++) {
            const uint16_t *row = routing_row(r, t, l);
            if (row) for (int i = 0; i < r->k; i++) counts[(size_t)l * r->n_expert + row[i]]++;
        }
}

double routing_reuse(const routing *r, int w) {
    if (w < 1) return -1;
    /* last[l][e]: the last token that chose e at layer l; gap[l]: last token with no row. */
    int64_t *last = malloc((size_t)r->n_layer * r->n_expert * sizeof *last);
    int64_t *gap = malloc((size_t)r->n_layer * sizeof *gap);
    if (!last || !gap) { free(last); free(gap); return -1; }
    for (size_t i = 0; i < (size_t)r->n_layer * r->n_expert; i++) last[i] = -1;
    for (int l = 0; l < r->n_layer; l++) gap[l] = -1;
    int64_t num = 0, den = 0;
    for (int64_t t = 0; t < r->n_tokens; t++)
        for (int l = 0; l < r->n_layer; l++) {
            const uint16_t *row = routing_row(r, t, l);
            if (!row) { gap[l] = t; continue; }
            int64_t *ll = last + (size_t)l * r->n_expert;
            if (t >= w && gap[l] < t - w) {
                for (int i = 0; i < r->k; i++) { den++; num += ll[row[i]] >= t - w; }
            }
            for (int i = 0; i < r->k; i++) ll[row[i]] = t;
        }
    free(last); free(gap);
    return den ? (double)num / (double)den : -1;
}

double routing_top_share(const routing *r) {
    int64_t *c = malloc((size_t)r->n_layer * r->n_expert * sizeof *c);
    if (!c) return -1;
    routing_count_experts(r, c);
    double sum = 0; int used = 0;
    for (int l = 0; l < r->n_layer; l++) {
        int64_t tot = 0, top = 0;
        for (int e = 0; e < r->n_expert; e++) {
            int64_t x = c[(size_t)l * r->n_expert + e];
            tot += x; if (x > top) top = x;
        }
        if (tot) { sum += (double)top / (double)tot; used++; }
    }
    free(c);
    return used ? sum / used : -1;
}

double routing_touched(const routing *r, int window) {
    if (window < 1 || r->n_tokens < window) return -1;
    unsigned char *seen = malloc((size_t)r->n_expert);
    if (!seen) return -1;
    double sum = 0; int64_t n = 0;
    for (int l = 0; l < r->n_layer; l++)
        for (int64_t t0 = 0; t0 + window <= r->n_tokens; t0 += window) {
            memset(seen, 0, (size_t)r->n_expert);
            int touched = 0;
            for (int64_t t = t0; t < t0 + window; t++) {
                const uint16_t *row = routing_row(r, t, l);
                if (row) for (int i = 0; i < r->k; i++) if (!seen[row[i]]) { seen[row[i]] = 1; touched++; }
            }
            sum += (double)touched / r->n_expert; n++;
        }
    free(seen);
    return n ? sum / (double)n : -1;
}
