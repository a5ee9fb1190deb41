/* router.c - expert selection as HF transformers computes it for Qwen3-MoE (softmax, optional
 * renormalisation) and GLM-4.5 / DeepSeek-V3 (sigmoid, selection-only bias, group limit,
 * renormalisation, routed scaling). */
#include "router.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Indices of the k largest values of v[n] (descending; ties -> lower index). */
static void topk(const float *v, int n, int k, int *idx) {
    for (int j = 0; j < k; j++) idx[j] = -1;
    for (int i = 0; i < n; i++) {
        int pos = k;
        while (pos > 0 && (idx[pos - 1] < 0 || v[i] > v[idx[pos - 1]])) pos--;
        if (pos >= k) continue;
        for (int j = k - 1; j > pos; j--) idx[j] = idx[j - 1];
        idx[pos] = i;
    }
}

void router_select(const router_params *p, const float *logits, const float *bias, int *idx, float *w) {
    int n = p->n_expert, k = p->k;
    float *score = malloc(sizeof(float) * (size_t)n * 2), *choice = score + n;
    if (p->fn == 2) {
        for (int i = 0; i < n; i++) score[i] = 1.0f / (1.0f + expf(-logits[i]));
    } else {
        float mx = logits[0], sum = 0;
        for (int i = 1; i < n; i++) if (logits[i] > mx) mx = logits[i];
        for (int i = 0; i < n; i++) { score[i] = expf(logits[i] - mx); sum += score[i]; }
        for (int i = 0; i < n; i++) score[i] /= sum;
    }
    for (int i = 0; i < n; i++) choice[i] = score[i] + (bias ? bias[i] : 0.0f);
    if (p->n_group > 1 && p->topk_group < p->n_group) {
        /* group score = sum of the group's two best choice scores; keep the topk_group best
         * groups; experts of the other groups are masked out (-inf), as HF transformers 5 and llama.cpp do */
        int gs = n / p->n_group;
        float *gscore = malloc(sizeof(float) * (size_t)p->n_group);
        int *gidx = malloc(sizeof(int) * (size_t)p->n_group), top2[2];
        for (int g = 0; g < p->n_group; g++) {
            int m = gs < 2 ? gs : 2;
            topk(choice + g * gs, gs, m, top2);
            gscore[g] = 0;
            for (int j = 0; j < m; j++) gscore[g] += choice[g * gs + top2[j]];
        }
        topk(gscore, p->n_group, p->topk_group, gidx);
        for (int g = 0; g < p->n_group; g++) {
            int keep = 0;
            for (int j = 0; j < p->topk_group; j++) keep |= gidx[j] == g;
            if (!keep) for (int i = 0; i < gs; i++) choice[g * gs + i] = -INFINITY;
        }
        free(gscore); free(gidx);
    }
    topk(choice, n, k, idx);
    float sum = 0;
    for (int j = 0; j < k; j++) { w[j] = score[idx[j]]; sum += w[j]; }
    if (p->norm_topk) {
        float den = p->fn == 2 ? sum + 1e-20f : sum;
        for (int j = 0; j < k; j++) w[j] /= den;
    }
    for (int j = 0; j < k; j++) w[j] *= p->scale;
    free(score);
}

void router_weights(const router_params *p, const float *logits, const int *idx, float *w) {
    int n = p->n_expert, k = p->k;
    float mx = logits[0], sum = 0;
    if (p->fn != 2) {
        for (int i = 1; i < n; i++) if (logits[i] > mx) mx = logits[i];
        for (int i = 0; i < n; i++) sum += expf(logits[i] - mx);
    }
    float tot = 0;
    for (int j = 0; j < k; j++) {
        float l = logits[idx[j]];
        w[j] = p->fn == 2 ? 1.0f / (1.0f + expf(-l)) : expf(l - mx) / sum;
        tot += w[j];
    }
    if (p->norm_topk) {
        float den = p->fn == 2 ? tot + 1e-20f : tot;
        for (int j = 0; j < k; j++) w[j] /= den;
    }
    for (int j = 0; j < k; j++) w[j] *= p->scale;
}
