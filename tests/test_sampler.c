/* test_sampler.c - greedy, temperature, top-k, top-p, min-p, penalties and seeding; the fast
 * argmax against the plain loop, and sampler_sample (which sorts only the top of the vocabulary)
 * against sampler_sample_ref (which sorts all of it): the same token on every draw. */
#include "sampler.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;
#define CHECK(cond, ...) do { int ok_ = (cond); printf("%s ", ok_ ? "PASS" : "FAIL"); printf(__VA_ARGS__); printf("\n"); ok_ ? n_pass++ : n_fail++; } while (0)

static int32_t draw(sampler *s, const float *logits, int n) {
    float l[16]; memcpy(l, logits, sizeof(float) * n);
    return sampler_sample(s, l);
}

/* Frequencies of each token over `draws` draws. */
static void freq(sampler_params p, const float *logits, int n, int draws, double *f) {
    sampler s; sampler_init(&s, &p, n);
    for (int i = 0; i < n; i++) f[i] = 0;
    for (int i = 0; i < draws; i++) f[draw(&s, logits, n)] += 1.0 / draws;
    sampler_free(&s);
}

static uint64_t rs = 88172645463325252ull;
static double urand(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (double)(rs >> 11) * (1.0 / 9007199254740992.0); }
static double nrand(void) { return sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }

/* sampler_argmax against `if (x[i] > x[b]) b = i`: lengths 1..4099, values from a few levels
 * (ties), some +-0, some NaN (also at index 0) */
static void argmax_check(void) {
    float *x = malloc(sizeof(float) * 5000);
    int bad = 0, cases = 0;
    for (int it = 0; it < 4000; it++) {
        const int n = 1 + (int)(urand() * 4099), kind = it % 4;
        for (int i = 0; i < n; i++) {
            double u = urand();
            x[i] = kind == 0 ? (float)nrand() : (float)(int)(u * 5) - 2.f;
            if (kind >= 2 && urand() < 0.02) x[i] = NAN;
            if (kind == 3 && urand() < 0.3) x[i] = urand() < 0.5 ? 0.f : -0.f;
        }
        if (kind == 3 && it % 8 == 3) x[0] = NAN;
        if (kind == 2) for (int i = 1024; i < n; i += 1024) if (urand() < 0.5) x[i] = NAN;   /* a block's first value */
        int b = 0;
        for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
        cases++;
        if (sampler_argmax(x, n) != b) { if (!bad) printf("  n %d kind %d: %d vs %d\n", n, kind, sampler_argmax(x, n), b); bad++; }
    }
    CHECK(!bad, "sampler_argmax equals the plain loop on %d arrays (ties, +-0, NaN): %d differ", cases, bad);
    free(x);
}

/* sampler_sample vs sampler_sample_ref: same seed, same logits, 150 draws a setting, a vocabulary
 * of 8000 (peaked, spread and flat logits), each setting with a repetition penalty over the draws */
static void ref_check(void) {
    const int V = 8000, D = 150;
    struct { float t; int k; float p, mp, rep; } set[] = {
        { 1.0f, 0, 1.0f, 0.0f, 1.0f },  { 0.7f, 0, 0.9f, 0.0f, 1.0f }, { 1.0f, 40, 1.0f, 0.0f, 1.1f },
        { 0.8f, 0, 1.0f, 0.05f, 1.0f }, { 1.2f, 50, 0.95f, 0.02f, 1.1f }, { 0.5f, 0, 0.999f, 0.0f, 1.0f },
        { 2.0f, 0, 0.5f, 0.0f, 1.0f },  { 1.5f, 5000, 1.0f, 0.0f, 1.0f }, { 3.0f, 0, 0.99f, 0.0f, 1.3f },
    };
    float *base = malloc(sizeof(float) * V), *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    for (int shape = 0; shape < 3; shape++) {
        for (int i = 0; i < V; i++) base[i] = shape == 0 ? (float)(4 * nrand()) : shape == 1 ? (float)nrand() : (float)(int)(urand() * 3);
        if (shape == 0) base[17] = 25.f;   /* one dominant token */
        for (size_t si = 0; si < sizeof set / sizeof set[0]; si++) {
            sampler_params p = sampler_defaults();
            p.temperature = set[si].t; p.top_k = set[si].k; p.top_p = set[si].p; p.min_p = set[si].mp;
            p.repetition_penalty = set[si].rep; p.seed = 1000 + si + 100 * shape;
            sampler x, y;
            sampler_init(&x, &p, V); sampler_init(&y, &p, V);
            int diff = 0;
            for (int d = 0; d < D; d++) {
                memcpy(a, base, sizeof(float) * V); memcpy(b, base, sizeof(float) * V);
                const int32_t ta = sampler_sample(&x, a), tb = sampler_sample_ref(&y, b);
                diff += ta != tb;
                sampler_accept(&x, ta); sampler_accept(&y, tb);
            }
            CHECK(!diff, "logits %s, temperature %g top-k %d top-p %g min-p %g repetition %g: %d of %d draws differ from the full sort",
                  shape == 0 ? "peaked" : shape == 1 ? "spread" : "flat (ties)", set[si].t, set[si].k, set[si].p, set[si].mp, set[si].rep, diff, D);
            sampler_free(&x); sampler_free(&y);
        }
    }
    free(base); free(a); free(b);
}

int main(void) {
    float lg[4] = { logf(0.5f), logf(0.3f), logf(0.2f), -INFINITY };
    sampler_params p = sampler_defaults();
    sampler s; sampler_init(&s, &p, 4);
    CHECK(draw(&s, lg, 4) == 0, "greedy picks the argmax");
    float tie[4] = { 1, 3, 3, 0 };
    CHECK(draw(&s, tie, 4) == 1, "greedy ties go to the lowest id");
    sampler_free(&s);

    double f[4];
    p.temperature = 1.0f; p.seed = 7;
    freq(p, lg, 4, 40000, f);
    CHECK(fabs(f[0] - 0.5) < 0.015 && fabs(f[1] - 0.3) < 0.015 && fabs(f[2] - 0.2) < 0.015 && f[3] == 0,
          "temperature 1 follows softmax: %.3f %.3f %.3f %.3f", f[0], f[1], f[2], f[3]);
    p.temperature = 0.5f; /* p^2 renormalised: 0.25, 0.09, 0.04 / 0.38 */
    freq(p, lg, 4, 40000, f);
    CHECK(fabs(f[0] - 0.25 / 0.38) < 0.015 && fabs(f[2] - 0.04 / 0.38) < 0.015, "temperature 0.5 sharpens: %.3f %.3f %.3f", f[0], f[1], f[2]);
    p.temperature = 1.0f; p.top_k = 1;
    freq(p, lg, 4, 2000, f);
    CHECK(f[0] > 0.99999 && f[1] == 0, "top-k 1 is greedy");
    p.top_k = 2;
    freq(p, lg, 4, 40000, f);
    CHECK(f[2] == 0 && fabs(f[0] - 0.625) < 0.015, "top-k 2 keeps two, renormalised: %.3f %.3f", f[0], f[1]);
    p.top_k = 0; p.top_p = 0.6f;
    freq(p, lg, 4, 20000, f);
    CHECK(f[2] == 0 && f[1] > 0.3, "top-p 0.6 keeps {0, 1}: %.3f %.3f %.3f", f[0], f[1], f[2]);
    p.top_p = 0.4f;
    freq(p, lg, 4, 2000, f);
    CHECK(f[0] > 0.99999 && f[1] == 0, "top-p 0.4 keeps only the best");
    p.top_p = 1.0f; p.min_p = 0.5f; /* threshold 0.25: keeps 0.5 and 0.3 */
    freq(p, lg, 4, 20000, f);
    CHECK(f[2] == 0 && f[1] > 0.3, "min-p 0.5 keeps {0, 1}: %.3f %.3f %.3f", f[0], f[1], f[2]);
    p.min_p = 0;

    /* same seed, same sequence; another seed, another sequence */
    sampler a, b, c; sampler_params q = p; q.seed = 123;
    sampler_init(&a, &q, 4); sampler_init(&b, &q, 4); q.seed = 124; sampler_init(&c, &q, 4);
    int same = 1, diff = 0;
    for (int i = 0; i < 200; i++) { int x = draw(&a, lg, 4), y = draw(&b, lg, 4), z = draw(&c, lg, 4); same &= x == y; diff |= x != z; }
    CHECK(same && diff, "seeded: reproducible, and seeds differ");
    sampler_free(&a); sampler_free(&b); sampler_free(&c);

    /* penalties (greedy) */
    sampler_params g = sampler_defaults();
    g.repetition_penalty = 1.1f;
    sampler_init(&s, &g, 4);
    float r1[4] = { 2.0f, 1.9f, 0, -1 };
    sampler_accept(&s, 0);
    CHECK(draw(&s, r1, 4) == 1, "repetition penalty: 2.0/1.1 < 1.9");
    float r2[4] = { -1.0f, -1.05f, -5, -5 };
    CHECK(draw(&s, r2, 4) == 1, "repetition penalty multiplies negative logits: -1.1 < -1.05");
    sampler_free(&s);
    g = sampler_defaults(); g.presence_penalty = 0.5f;
    sampler_init(&s, &g, 4);
    float r3[4] = { 1.0f, 0.6f, 0, 0 };
    sampler_accept(&s, 0); sampler_accept(&s, 0);
    CHECK(draw(&s, r3, 4) == 1, "presence penalty 0.5 once, whatever the count");
    sampler_free(&s);
    g = sampler_defaults(); g.frequency_penalty = 0.3f;
    sampler_init(&s, &g, 4);
    float r4[4] = { 1.0f, 0.6f, 0, 0 }, r5[4] = { 1.0f, 0.3f, 0, 0 };
    sampler_accept(&s, 0);
    CHECK(draw(&s, r5, 4) == 0, "frequency penalty 0.3 x1: 0.7 > 0.3");
    sampler_accept(&s, 0);
    CHECK(draw(&s, r4, 4) == 1, "frequency penalty 0.3 x2: 0.4 < 0.6");
    sampler_free(&s);
    g = sampler_defaults(); g.presence_penalty = 5; g.penalty_last_n = 1;
    sampler_init(&s, &g, 4);
    float r6[4] = { 1.0f, 0.6f, 0, 0 };
    sampler_accept(&s, 0); sampler_accept(&s, 2);
    CHECK(draw(&s, r6, 4) == 0, "penalties look only at the last n tokens");
    sampler_free(&s);

    argmax_check();
    ref_check();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
