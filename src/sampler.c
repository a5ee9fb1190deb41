/* sampler.c - penalties, then temperature, then top-k / top-p / min-p truncation, then a draw
 * from a seeded xorshift generator; temperature <= 0 is exact argmax (lowest id on ties). */
#include "sampler.h"
#include "util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

sampler_params sampler_defaults(void) {
    sampler_params p = { .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
                         .repetition_penalty = 1.0f, .presence_penalty = 0.0f, .frequency_penalty = 0.0f,
                         .penalty_last_n = 64, .seed = 0x5eed };
    return p;
}

void sampler_init(sampler *s, const sampler_params *p, int n_vocab) {
    memset(s, 0, sizeof *s);
    s->p = *p; s->n_vocab = n_vocab;
    s->rng = p->seed ? p->seed : 0x9e3779b97f4a7c15ull;
    s->count = hm_calloc((size_t)n_vocab, sizeof(int));
    s->order = hm_calloc((size_t)n_vocab, sizeof(int));
    s->prob = hm_calloc((size_t)n_vocab, sizeof(float));
}

void sampler_free(sampler *s) { free(s->hist); free(s->count); free(s->order); free(s->prob); memset(s, 0, sizeof *s); }

void sampler_accept(sampler *s, int32_t tok) {
    if (s->n_hist == s->cap_hist) {
        s->cap_hist = s->cap_hist ? s->cap_hist * 2 : 256;
        int32_t *nh = realloc(s->hist, s->cap_hist * sizeof *nh);
        if (!nh) abort();
        s->hist = nh;
    }
    s->hist[s->n_hist++] = tok;
}

static double next_unit(sampler *s) { /* xorshift64*, 53-bit uniform in [0, 1) */
    s->rng ^= s->rng >> 12; s->rng ^= s->rng << 25; s->rng ^= s->rng >> 27;
    return (double)((s->rng * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}

static int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

static const float *g_sort_key;
static int by_prob_desc(const void *a, const void *b) {
    float x = g_sort_key[*(const int *)a], y = g_sort_key[*(const int *)b];
    if (x != y) return x < y ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

static void penalties(sampler *s, float *logits) {
    const sampler_params *p = &s->p;
    if (p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f) return;
    size_t from = p->penalty_last_n > 0 && s->n_hist > (size_t)p->penalty_last_n ? s->n_hist - (size_t)p->penalty_last_n : 0;
    for (size_t i = from; i < s->n_hist; i++) if (s->hist[i] >= 0 && s->hist[i] < s->n_vocab) s->count[s->hist[i]]++;
    for (size_t i = from; i < s->n_hist; i++) {
        int32_t t = s->hist[i];
        if (t < 0 || t >= s->n_vocab || !s->count[t]) continue;
        float l = logits[t];
        if (p->repetition_penalty != 1.0f) l = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
        l -= p->presence_penalty + p->frequency_penalty * (float)s->count[t];
        logits[t] = l;
        s->count[t] = 0; /* each token once */
    }
}

int32_t sampler_sample(sampler *s, float *logits) {
    int n = s->n_vocab;
    penalties(s, logits);
    if (s->p.temperature <= 0.0f) return argmax(logits, n);
    /* softmax at temperature over all tokens, then truncate */
    float mx = logits[argmax(logits, n)];
    double sum = 0;
    for (int i = 0; i < n; i++) { s->prob[i] = expf((logits[i] - mx) / s->p.temperature); sum += s->prob[i]; }
    for (int i = 0; i < n; i++) { s->prob[i] = (float)(s->prob[i] / sum); s->order[i] = i; }
    int keep = n;
    if (s->p.top_k > 0 && s->p.top_k < n) keep = s->p.top_k;
    g_sort_key = s->prob;
    qsort(s->order, (size_t)n, sizeof(int), by_prob_desc);
    if (s->p.min_p > 0.0f) {
        float thr = s->p.min_p * s->prob[s->order[0]];
        int k = 1;
        while (k < keep && s->prob[s->order[k]] >= thr) k++;
        keep = k;
    }
    if (s->p.top_p < 1.0f) {
        double c = 0; int k = 0;
        while (k < keep) { c += s->prob[s->order[k]]; k++; if (c >= s->p.top_p) break; }
        keep = k;
    }
    double tot = 0;
    for (int k = 0; k < keep; k++) tot += s->prob[s->order[k]];
    double r = next_unit(s) * tot, c = 0;
    for (int k = 0; k < keep; k++) { c += s->prob[s->order[k]]; if (r < c) return s->order[k]; }
    return s->order[keep - 1];
}
