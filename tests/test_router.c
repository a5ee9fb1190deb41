/* test_router.c - router math against hand-computed values: softmax vs sigmoid, the
 * selection-only bias, renormalisation, the routed scaling factor, ties, group limits. */
#include "router.h"
#include <math.h>
#include <stdio.h>

static int n_pass, n_fail;

static void check(const char *name, const router_params *p, const float *logits, const float *bias,
                  const int *want_idx, const float *want_w) {
    int idx[16]; float w[16];
    for (int j = 0; j < p->k; j++) { idx[j] = -7; w[j] = NAN; } /* poisoned */
    router_select(p, logits, bias, idx, w);
    int ok = 1;
    for (int j = 0; j < p->k; j++) ok &= idx[j] == want_idx[j] && fabsf(w[j] - want_w[j]) <= 1e-6f;
    printf("%s %s:", ok ? "PASS" : "FAIL", name);
    for (int j = 0; j < p->k; j++) printf(" %d:%.6f", idx[j], w[j]);
    if (!ok) { printf("  (want"); for (int j = 0; j < p->k; j++) printf(" %d:%.6f", want_idx[j], want_w[j]); printf(")"); }
    printf("\n");
    ok ? n_pass++ : n_fail++;
}

int main(void) {
    /* softmax of [1,2,3,0]: e^x / 31.192931 = [0.087144, 0.236883, 0.643914, 0.032059] */
    float l1[4] = { 1, 2, 3, 0 };
    router_params sm = { 1, 4, 2, 0, 1.0f, 1, 1 };
    check("softmax top2, no renorm", &sm, l1, NULL, (int[]){ 2, 1 }, (float[]){ 0.643914f, 0.236883f });
    sm.norm_topk = 1; /* e^3/(e^3+e^2) = sigmoid(1) */
    check("softmax top2, renorm", &sm, l1, NULL, (int[]){ 2, 1 }, (float[]){ 0.731059f, 0.268941f });
    sm.scale = 2.0f;
    check("softmax top2, renorm, scale 2", &sm, l1, NULL, (int[]){ 2, 1 }, (float[]){ 1.462117f, 0.537883f });

    /* ties: equal logits -> lower expert id first */
    float l2[4] = { 1, 1, 1, 1 };
    router_params tie = { 1, 4, 2, 0, 1.0f, 1, 1 };
    check("ties, no renorm", &tie, l2, NULL, (int[]){ 0, 1 }, (float[]){ 0.25f, 0.25f });
    tie.norm_topk = 1;
    check("ties, renorm", &tie, l2, NULL, (int[]){ 0, 1 }, (float[]){ 0.5f, 0.5f });

    /* sigmoid: scores [0.5, 0.731059, 0.268941, 0.880797]; without bias top2 = 3, 1 */
    float l3[4] = { 0, 1, -1, 2 };
    router_params sg = { 2, 4, 2, 0, 1.0f, 1, 1 };
    check("sigmoid, no bias", &sg, l3, NULL, (int[]){ 3, 1 }, (float[]){ 0.880797f, 0.731059f });
    /* bias for the choice only: choice [1.0, 0.131059, 1.268941, 0.880797] -> 2, 0; weights stay sigmoid */
    float b3[4] = { 0.5f, -0.6f, 1.0f, 0.0f };
    check("sigmoid, bias selects only", &sg, l3, b3, (int[]){ 2, 0 }, (float[]){ 0.268941f, 0.5f });
    sg.norm_topk = 1;
    check("sigmoid, bias, renorm", &sg, l3, b3, (int[]){ 2, 0 }, (float[]){ 0.349755f, 0.650245f });
    sg.scale = 2.5f;
    check("sigmoid, bias, renorm, scale 2.5", &sg, l3, b3, (int[]){ 2, 0 }, (float[]){ 0.874388f, 1.625612f });

    /* groups: 4 groups of 2; group score = sum of its 2 best: g0 1.0, g1 1.462117, g2 1.848284, g3 1.0.
     * Keep g2, g1 -> experts 4, 5 (0.924142 each) although expert 0 (0.952574) scores higher alone. */
    float l4[8] = { 3, -3, 1, 1, 2.5f, 2.5f, 0, 0 };
    router_params gr = { 2, 8, 2, 0, 1.0f, 1, 1 };
    check("sigmoid, no groups", &gr, l4, NULL, (int[]){ 0, 4 }, (float[]){ 0.952574f, 0.924142f });
    gr.n_group = 4; gr.topk_group = 2;
    check("sigmoid, 2 of 4 groups", &gr, l4, NULL, (int[]){ 4, 5 }, (float[]){ 0.924142f, 0.924142f });
    gr.norm_topk = 1;
    check("sigmoid, 2 of 4 groups, renorm", &gr, l4, NULL, (int[]){ 4, 5 }, (float[]){ 0.5f, 0.5f });

    /* masked groups are out of the race even when every kept choice score is negative:
     * choice [-0.5, -0.5, -0.4, -0.45]; group 1 (-0.85) beats group 0 (-1.0) -> 2, 3 */
    float l5[4] = { 0, 0, 0, 0 }, b5[4] = { -1.0f, -1.0f, -0.9f, -0.95f };
    router_params neg = { 2, 4, 2, 0, 1.0f, 2, 1 };
    check("sigmoid, 1 of 2 groups, negative choices", &neg, l5, b5, (int[]){ 2, 3 }, (float[]){ 0.5f, 0.5f });

    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
