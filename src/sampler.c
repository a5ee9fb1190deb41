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
    s->key = hm_calloc((size_t)n_vocab, sizeof(uint64_t));
    s->ktmp = hm_calloc((size_t)n_vocab, sizeof(uint64_t));
}

void sampler_free(sampler *s) {
    free(s->hist); free(s->count); free(s->order); free(s->prob); free(s->key); free(s->ktmp);
    memset(s, 0, sizeof *s);
}

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

/* The first index of the largest value (NaNs never win; x[0] NaN: 0), as the plain loop
 * `if (x[i] > x[b]) b = i` gives. Blocks of 1024: each block's maximum by 16 running maxima
 * (no index, no branch: the compiler vectorizes it), the first block whose maximum beats all
 * before it remembered, and only that block scanned for the index. The plain loop's
 * compare-and-reload chain took 627 us a token over a 151K vocabulary on the device's host. */
int32_t sampler_argmax(const float *x, int n) {
    if (n <= 0) return 0;
    float best = x[0];
    int bb = 0;
    for (int s = 0; s < n; s += 1024) {
        const int e = s + 1024 < n ? s + 1024 : n;
        float m[16];
        for (int j = 0; j < 16; j++) m[j] = -INFINITY;
        int i = s;
        for (; i + 16 <= e; i += 16)
            for (int j = 0; j < 16; j++) { const float v = x[i + j]; m[j] = v > m[j] ? v : m[j]; }
        for (; i < e; i++) { const float v = x[i]; m[0] = v > m[0] ? v : m[0]; }
        float mx = m[0];
        for (int j = 1; j < 16; j++) mx = m[j] > mx ? m[j] : mx;
        if (mx > best) { best = mx; bb = s; }
    }
    for (int i = bb; i < n; i++)
        if (x[i] == best) return i;
    return 0;   /* x[0] is NaN */
}

static const float *g_sort_key;
static int by_prob_desc(const void *a, const void *b) {
    float x = g_sort_key[*(const int *)a], y = g_sort_key[*(const int *)b];
    if (x != y) return x < y ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

/* Sorts a[0..n) ascending: LSD radix, 8 bits a pass, passes where every key has the same digit
 * skipped; t is scratch of n. */
static void radix_sort64(uint64_t *a, uint64_t *t, int n) {
    if (n < 2) return;
    uint64_t *src = a, *dst = t;
    for (int sh = 0; sh < 64; sh += 8) {
        int cnt[256] = { 0 };
        for (int i = 0; i < n; i++) cnt[(src[i] >> sh) & 255]++;
        if (cnt[(src[0] >> sh) & 255] == n) continue;
        for (int b = 0, pos = 0; b < 256; b++) { const int c = cnt[b]; cnt[b] = pos; pos += c; }
        for (int i = 0; i < n; i++) dst[cnt[(src[i] >> sh) & 255]++] = src[i];
        uint64_t *x = src; src = dst; dst = x;
    }
    if (src != a) memcpy(a, src, sizeof(uint64_t) * (size_t)n);
}

/* order[0..m) = the ids with probability >= cut (all when cut is 0), sorted by probability
 * descending then id ascending (by_prob_desc's order): a probability's bits, complemented, above
 * the id make a key whose ascending order is that one (probabilities are >= 0). Returns m. */
static int top_sorted(sampler *s, float cut) {
    int m = 0;
    for (int i = 0; i < s->n_vocab; i++)
        if (s->prob[i] >= cut || cut == 0.f) {
            uint32_t b;
            memcpy(&b, &s->prob[i], 4);
            s->key[m++] = (uint64_t)(~b) << 32 | (uint32_t)i;
        }
    radix_sort64(s->key, s->ktmp, m);
    for (int k = 0; k < m; k++) s->order[k] = (int)(uint32_t)s->key[k];
    return m;
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

/* softmax of logits at the temperature into s->prob; returns the largest probability */
static float softmax_t(sampler *s, const float *logits) {
    const int n = s->n_vocab;
    float mx = logits[sampler_argmax(logits, n)];
    double sum = 0;
    for (int i = 0; i < n; i++) { s->prob[i] = expf((logits[i] - mx) / s->p.temperature); sum += s->prob[i]; }
    float pmax = 0.f;
    for (int i = 0; i < n; i++) { s->prob[i] = (float)(s->prob[i] / sum); if (s->prob[i] > pmax) pmax = s->prob[i]; }
    return pmax;
}

int sampler_greedy_only(const sampler *s) {
    const sampler_params *p = &s->p;
    return p->temperature <= 0.0f && p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f;
}

int32_t sampler_sample(sampler *s, float *logits) {
    const int n = s->n_vocab;
    penalties(s, logits);
    if (s->p.temperature <= 0.0f) return sampler_argmax(logits, n);
    const float pmax = softmax_t(s, logits);
    const double u = next_unit(s);
    double tot_all = -1;   /* no truncation: the sum of every probability (index order) */
    /* The truncations and the draw read the tokens in the order (probability descending, id
     * ascending) from the top and stop early; so only the top of that order is sorted: the tokens
     * with probability >= cut, exactly its first m entries. Where a step would read past them, the
     * cut is lowered (at last to 0: every token) and the steps redone. With a truncation the kept
     * tokens, their order, their sum and so the draw are those of sorting the whole vocabulary
     * (sampler_sample_ref); without one the sum runs in index order (the same up to rounding).
     * qsort of a 151K vocabulary took ~20 ms a token; a radix sort of it takes a few ms. */
    for (float cut = s->p.min_p > 0.0f ? s->p.min_p * pmax : pmax * 0x1p-10f;; cut = cut > 0x1p-40f ? cut * 0x1p-8f : 0.f) {
        const int m = top_sorted(s, cut);   /* cut 0: all, NaNs too */
        const int all = m == n;
        int keep = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;
        if (s->p.min_p > 0.0f) {   /* cut <= thr: every token past the m sorted ones is below thr */
            const float thr = s->p.min_p * s->prob[s->order[0]];
            int k = 1;
            while (k < keep && k < m && s->prob[s->order[k]] >= thr) k++;
            keep = k;
        }
        if (s->p.top_p < 1.0f) {
            double c = 0; int k = 0, hit = 0;
            while (k < keep && k < m) { c += s->prob[s->order[k]]; k++; if (c >= s->p.top_p) { hit = 1; break; } }
            if (!hit && k < keep && !all) continue;   /* the nucleus reaches past the cut */
            keep = k;
        }
        if (keep < n || all) {
            if (keep > m) continue;   /* top-k past the cut */
            double tot = 0;
            for (int k = 0; k < keep; k++) tot += s->prob[s->order[k]];
            double r = u * tot, c = 0;
            for (int k = 0; k < keep; k++) { c += s->prob[s->order[k]]; if (r < c) return s->order[k]; }
            return s->order[keep - 1];
        }
        if (tot_all < 0) { tot_all = 0; for (int i = 0; i < n; i++) tot_all += s->prob[i]; }
        double r = u * tot_all, c = 0;
        for (int k = 0; k < m; k++) { c += s->prob[s->order[k]]; if (r < c) return s->order[k]; }
        /* the draw lies past the cut: lower it */
    }
}

/* The reference: the whole vocabulary sorted every time (tests and bench_decode --sampler-ref). */
int32_t sampler_sample_ref(sampler *s, float *logits) {
    const int n = s->n_vocab;
    penalties(s, logits);
    if (s->p.temperature <= 0.0f) {
        int32_t b = 0;
        for (int i = 1; i < n; i++) if (logits[i] > logits[b]) b = i;
        return b;
    }
    softmax_t(s, logits);
    for (int i = 0; i < n; i++) s->order[i] = i;
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
