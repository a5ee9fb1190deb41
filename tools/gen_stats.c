/* gen_stats.c - hotmoe-gen --stats: the natural routing statistics of a short greedy run on the
 * CPU reference forward (per-layer popularity, reuse at t-1 and within 8 tokens) and the size of the
 * residual stream per layer, to show a synthetic model is bounded and its routing not degenerate. */
#include "cpu.h"
#include "gen_model.h"
#include "loader.h"
#include "tokenizer.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_PROMPT 8
#define WINDOW 8

typedef struct {
    const cpu_state *s;
    int n_embd, n_pos, k;
    int *sel;          /* (n_layer, n_pos, k) chosen experts; -1: dense layer */
    float *xmax, *xrms;/* (n_layer, n_pos) residual stream entering the layer's FFN */
} stats_ud;

static void on_route(void *ud, int layer, int pos, const int *idx, const float *w, int k) {
    stats_ud *u = ud;
    memcpy(u->sel + ((size_t)layer * u->n_pos + pos) * u->k, idx, sizeof(int) * (size_t)k);
    double m = 0, s2 = 0;
    for (int i = 0; i < u->n_embd; i++) { double a = fabs(u->s->x[i]); if (a > m || a != a) m = a; s2 += a * a; }
    u->xmax[(size_t)layer * u->n_pos + pos] = (float)m;
    u->xrms[(size_t)layer * u->n_pos + pos] = (float)sqrt(s2 / u->n_embd);
}

static int in_set(const int *set, int k, int x) { for (int j = 0; j < k; j++) if (set[j] == x) return 1; return 0; }

int gen_stats_run(const char *path, int n_gen, FILE *out, hm_error *e) {
    hm_model m;
    if (model_load(&m, path, e)) return -1;
    const hm_config *c = &m.cfg;
    int L = c->n_layer, E = c->n_expert, k = c->n_expert_used, V = c->n_vocab;
    if (n_gen < 1) n_gen = 1;
    int n_pos = N_PROMPT + n_gen;
    cpu_state s;
    if (cpu_state_init(&s, c, n_pos)) { model_free(&m); return hm_fail(e, "stats: cannot allocate the state for %d positions", n_pos); }
    stats_ud u = { &s, c->n_embd, n_pos, k, malloc(sizeof(int) * (size_t)L * n_pos * k),
                   calloc((size_t)L * n_pos, sizeof(float)), calloc((size_t)L * n_pos, sizeof(float)) };
    for (size_t i = 0; i < (size_t)L * n_pos * k; i++) u.sel[i] = -1;
    s.route_cb = on_route; s.route_ud = &u;
    float *logits = malloc(sizeof(float) * (size_t)V);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)n_pos);
    int n_nonfinite = 0;
    float lmin = INFINITY, lmax = -INFINITY, xfin = 0;
    int n_ctrl = V > 16 ? 3 : 0; /* the generator puts control tokens last; keep the prompt off them */
    for (int i = 0; i < N_PROMPT; i++) toks[i] = (int32_t)((300 + 7919 * (int64_t)i) % (V - n_ctrl));
    double t0 = hm_now();
    for (int pos = 0; pos < n_pos; pos++) {
        cpu_forward(&m, &s, toks[pos], pos, logits);
        int best = 0;
        for (int i = 0; i < V; i++) {
            if (!isfinite(logits[i])) { n_nonfinite++; continue; }
            if (logits[i] < lmin) lmin = logits[i];
            if (logits[i] > lmax) lmax = logits[i];
            if (logits[i] > logits[best] || !isfinite(logits[best])) best = i;
        }
        if (pos + 1 < n_pos && pos + 1 >= N_PROMPT) toks[pos + 1] = best;
        for (int i = 0; i < c->n_embd; i++) if (fabsf(s.x[i]) > xfin) xfin = fabsf(s.x[i]);
    }
    double dt = hm_now() - t0;
    fprintf(out, "stats: %s: %d layers (%d MoE), %d experts top-%d, %d positions (%d prompt + %d greedy), %.3f s/token\n",
            path, L, L - c->n_dense_lead, E, k, n_pos, N_PROMPT, n_gen, dt / n_pos);
    fprintf(out, "layer touched  top-share entropy reuse@t-1 reuse@%d  |x|max   x-rms\n", WINDOW);
    int *count = malloc(sizeof(int) * (size_t)E);
    double sum_touch = 0, sum_top = 0, sum_h = 0, sum_r1 = 0, sum_rw = 0, worst_top = 0, worst_r1 = 0;
    int n_moe = 0, min_touch = E;
    for (int l = 0; l < L; l++) {
        const int *sl = u.sel + (size_t)l * n_pos * k;
        if (sl[0] < 0) { fprintf(out, "%5d dense\n", l); continue; }
        memset(count, 0, sizeof(int) * (size_t)E);
        for (int i = 0; i < n_pos * k; i++) count[sl[i]]++;
        int touched = 0, top = 0;
        double h = 0;
        for (int x = 0; x < E; x++) {
            if (count[x]) { touched++; double p = (double)count[x] / (n_pos * k); h -= p * log(p); }
            if (count[x] > top) top = count[x];
        }
        double r1 = 0, rw = 0;
        int n1 = 0, nw = 0, t_w0 = n_pos > WINDOW + 1 ? WINDOW : 1;
        for (int t = 1; t < n_pos; t++) {
            int hit1 = 0, hitw = 0;
            for (int j = 0; j < k; j++) {
                int x = sl[t * k + j];
                hit1 += in_set(sl + (t - 1) * k, k, x);
                int seen = 0;
                for (int d = 1; d <= WINDOW && d <= t && !seen; d++) seen = in_set(sl + (t - d) * k, k, x);
                hitw += seen;
            }
            r1 += (double)hit1 / k; n1++;
            if (t >= t_w0) { rw += (double)hitw / k; nw++; }
        }
        r1 /= n1; rw /= nw;
        double topshare = (double)top / n_pos, hn = E > 1 ? h / log(E) : 1;
        float xm = 0; double xr = 0;
        for (int t = 0; t < n_pos; t++) { if (u.xmax[l * n_pos + t] > xm) xm = u.xmax[l * n_pos + t]; xr += u.xrms[l * n_pos + t]; }
        fprintf(out, "%5d %4d/%-4d %7.3f %8.3f %9.3f %8.3f %8.2f %7.3f\n", l, touched, E, topshare, hn, r1, rw, xm, xr / n_pos);
        sum_touch += touched; sum_top += topshare; sum_h += hn; sum_r1 += r1; sum_rw += rw; n_moe++;
        if (topshare > worst_top) worst_top = topshare;
        if (r1 > worst_r1) worst_r1 = r1;
        if (touched < min_touch) min_touch = touched;
    }
    int ok = 1;
    if (n_moe) {
        fprintf(out, " mean %9.1f %7.3f %8.3f %9.3f %8.3f   (uniform top-share would be ~%.3f)\n", sum_touch / n_moe,
                sum_top / n_moe, sum_h / n_moe, sum_r1 / n_moe, sum_rw / n_moe, (double)k / E);
        /* non-degenerate: many experts used, no expert in (nearly) every token, tokens not all alike;
         * judged only on >= 2 selections per expert (shorter runs give top-shares near 1 by chance) */
        int want_touch = E / 2 < n_pos * k / 2 ? E / 2 : n_pos * k / 2, enough = n_pos * k >= 2 * E;
        ok = !enough || (min_touch >= want_touch && worst_top < 0.9 && sum_r1 / n_moe < 0.9);
        fprintf(out, "routing: %s (min touched %d >= %d, max top-share %.3f < 0.9, mean reuse@t-1 %.3f < 0.9)\n",
                !enough ? "no verdict: too few tokens (need positions x top-k >= 2 x experts)"
                        : ok ? "not degenerate" : "DEGENERATE", min_touch, want_touch, worst_top, sum_r1 / n_moe);
    }
    fprintf(out, "logits: %s, range [%.3f, %.3f]; final residual |x|max %.2f\n",
            n_nonfinite ? "NON-FINITE" : "finite", lmin, lmax, xfin);
    fprintf(out, "greedy ids:");
    for (int t = N_PROMPT; t < n_pos; t++) fprintf(out, " %d", toks[t]);
    fprintf(out, "\n");
    if (m.tok) {
        size_t len;
        char *txt = tokenizer_decode(m.tok, toks + N_PROMPT, (size_t)n_gen, &len);
        if (txt) fprintf(out, "greedy text: \"%.*s\"\n", (int)(len < 400 ? len : 400), txt);
        free(txt);
    }
    free(count); free(logits); free(toks); free(u.sel); free(u.xmax); free(u.xrms);
    cpu_state_free(&s);
    model_free(&m);
    return ok && !n_nonfinite ? 0 : 1;
}
