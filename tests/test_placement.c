/* test_placement.c - cache policies, exchange and simulator: hand-made tiny traces with
 * hand-counted hits, and the real Mixtral trace against the table of its README. */
#include "policy.h"
#include "sim.h"
#include "synth.h"
#include "trace.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HM_TESTS_DIR
#define HM_TESTS_DIR "tests"
#endif

static int n_pass, n_fail;
#define CHECK(cond, ...) do { int ok_ = (cond); printf("%s ", ok_ ? "PASS" : "FAIL"); printf(__VA_ARGS__); \
    printf("\n"); ok_ ? n_pass++ : n_fail++; } while (0)

/* One layer, k ids per token from a flat list (-1 = unrecorded row). */
static void tiny(routing *r, int n_expert, int k, const int *ids, int n_tokens) {
    routing_init(r, 1, n_expert, k, n_tokens);
    for (int i = 0; i < n_tokens * k; i++) r->ids[i] = ids[i] < 0 ? ROUTING_NONE : (uint16_t)ids[i];
}

static int64_t hits_of(const routing *r, policy_params p, int slots, int n_static) {
    sim_config cfg = { .n_slots = slots, .n_static = n_static };
    sim_result res;
    if (sim_run(r, &p, &cfg, &res)) return -1;
    int64_t h = res.hits;
    sim_result_free(&res);
    return h;
}

static void test_single_choice(void) {
    /* k=1, 2 slots, tokens 0 1 0 2 1.
     * LRU: miss miss hit miss(evicts 1, least recent) miss -> 1 hit.
     * LFU (counts since start): at token 3 counts 0:2 1:1 -> evicts 1 -> token 4 misses -> 1 hit.
     * Belady: at token 3 evicts 0 (never used again) and keeps 1 -> token 4 hits -> 2 hits.
     * static-best (2 pinned by hindsight: 0 and 1, two uses each) -> 4 hits, first uses included. */
    routing r; tiny(&r, 4, 1, (int[]){ 0, 1, 0, 2, 1 }, 5);
    policy_params lfu = policy_defaults(POLICY_LFU); lfu.lfu_decay = 1.0;
    CHECK(hits_of(&r, policy_defaults(POLICY_LRU), 2, 0) == 1, "LRU 0 1 0 2 1 @2: 1 hit");
    CHECK(hits_of(&r, lfu, 2, 0) == 1, "LFU 0 1 0 2 1 @2: 1 hit");
    CHECK(hits_of(&r, policy_defaults(POLICY_BELADY), 2, 0) == 2, "Belady 0 1 0 2 1 @2: 2 hits");
    CHECK(hits_of(&r, policy_defaults(POLICY_STATIC), 2, 0) == 4, "static-best 0 1 0 2 1 @2: 4 hits");
    /* 1 slot + 1 pinned (0, the first by count with ties to the lower id): LRU over 1 2 1 -> 0 hits
     * in the slot, 2 pinned hits. */
    CHECK(hits_of(&r, policy_defaults(POLICY_LRU), 1, 1) == 2, "LRU 1 slot + 1 static: 2 hits");
    routing_free(&r);

    /* LRU vs LFU: 0 0 0 1 2 0 @2. LRU: token 4 evicts 0 (least recent) -> token 5 misses: 2 hits.
     * LFU: token 4 evicts 1 (count 1 < 3) -> token 5 hits: 3 hits. With decay 0.5 the counts at
     * token 4 are 0: 0.4375, 1: 0.5 -> LFU evicts 0 like LRU: 2 hits. */
    tiny(&r, 4, 1, (int[]){ 0, 0, 0, 1, 2, 0 }, 6);
    CHECK(hits_of(&r, policy_defaults(POLICY_LRU), 2, 0) == 2, "LRU 0 0 0 1 2 0 @2: 2 hits");
    CHECK(hits_of(&r, lfu, 2, 0) == 3, "LFU (no decay) 0 0 0 1 2 0 @2: 3 hits");
    lfu.lfu_decay = 0.5;
    CHECK(hits_of(&r, lfu, 2, 0) == 2, "LFU (decay 0.5) 0 0 0 1 2 0 @2: 2 hits");
    routing_free(&r);

    /* unrecorded rows are skipped, not counted: 0 - 0 -> 1 hit of 2 selections */
    tiny(&r, 4, 1, (int[]){ 0, -1, 0 }, 3);
    sim_config cfg = { .n_slots = 1 };
    policy_params p = policy_defaults(POLICY_LRU);
    sim_result res; sim_run(&r, &p, &cfg, &res);
    CHECK(res.hits == 1 && res.selections == 2 && fabs(sim_misses_per_token(&res) - 1.0 / 3) < 1e-12,
          "unrecorded row: hits %lld of %lld selections", (long long)res.hits, (long long)res.selections);
    sim_result_free(&res);
    routing_free(&r);
}

static void test_current_token_protected(void) {
    /* k=2, 2 slots: {0,1} {2,3} {2,3}: the second token's two misses must not evict each other,
     * so the third token hits twice. */
    cache_layer c; cache_layer_init(&c, 8, 2);
    policy_params kinds[3] = { policy_defaults(POLICY_LRU), policy_defaults(POLICY_LFU), policy_defaults(POLICY_BELADY) };
    int64_t never[8]; for (int e = 0; e < 8; e++) never[e] = INT64_MAX;
    for (int i = 0; i < 3; i++) {
        cache_layer_free(&c); cache_layer_init(&c, 8, 2);
        cache_outcome o[2];
        int h0 = cache_access(&c, &kinds[i], (int[]){ 0, 1 }, 2, never, o);
        int h1 = cache_access(&c, &kinds[i], (int[]){ 2, 3 }, 2, never, o);
        int ev_ok = o[0].evicted >= 0 && o[1].evicted >= 0 && o[0].evicted != o[1].evicted && o[0].slot != o[1].slot;
        int h2 = cache_access(&c, &kinds[i], (int[]){ 2, 3 }, 2, never, o);
        CHECK(h0 == 0 && h1 == 0 && ev_ok && h2 == 2, "%s: current token's experts never evict each other",
              policy_name(kinds[i].kind));
    }
    /* fewer slots than k: the second miss is served cold */
    cache_layer_free(&c); cache_layer_init(&c, 8, 1);
    cache_outcome o[2];
    cache_access(&c, &kinds[0], (int[]){ 4, 5 }, 2, NULL, o);
    CHECK(o[0].slot == 0 && o[1].slot == -1 && o[1].evicted == -1, "1 slot, k=2: one cached, one cold");
    cache_layer_free(&c);
}

static void test_exchange(void) {
    /* two layers, 4 experts, 1 slot each; hand-set histograms */
    cache_layer L[2];
    for (int l = 0; l < 2; l++) cache_layer_init(&L[l], 4, 1);
    policy_params p = policy_defaults(POLICY_EXCHANGE);
    p.swap_floor = 4; p.swap_hyst = 2.0; p.swap_max = 1;
    cache_layer_place(&L[0], 0); cache_layer_place(&L[1], 0);
    double c0[4] = { 3, 10, 5, 0 }, c1[4] = { 2, 9, 0, 0 };
    memcpy(L[0].count, c0, sizeof c0); memcpy(L[1].count, c1, sizeof c1);
    cache_swap s[4];
    /* gains: layer 0: 10 - 3 = 7 (10 > 6); layer 1: 9 - 2 = 7 (9 > 4): equal gains -> lower layer */
    int n = exchange_plan(L, 2, &p, s, 4);
    CHECK(n == 1 && s[0].layer == 0 && s[0].expert_in == 1 && s[0].expert_out == 0, "global max 1: one swap, best gain");
    p.swap_max = 4;
    n = exchange_plan(L, 2, &p, s, 4);
    CHECK(n == 2, "global max 4: both layers swap (%d)", n);
    L[0].count[0] = 6;  /* 10 > 2 x 6 fails: hysteresis blocks layer 0 */
    n = exchange_plan(L, 2, &p, s, 4);
    CHECK(n == 1 && s[0].layer == 1, "hysteresis blocks a swap");
    L[1].count[1] = 3.5;  /* below the floor */
    n = exchange_plan(L, 2, &p, s, 4);
    CHECK(n == 0, "floor blocks a swap");
    L[0].count[0] = 3; L[1].count[1] = 9;
    p.swap_per_layer = 1; p.swap_max = 1;
    n = exchange_plan(L, 2, &p, s, 4);
    CHECK(n == 2, "per-layer scope, max 1 each: 2 swaps");
    cache_apply_swap(&L[0], &s[0]);
    CHECK(L[0].slot_expert[0] == 1 && L[0].expert_slot[1] == 0 && L[0].expert_slot[0] == -1, "swap applied");
    for (int l = 0; l < 2; l++) cache_layer_free(&L[l]);

    /* through the simulator: k=1, 1 slot, interval 2, floor 1, no decay; tokens 0 0 | 1 1 | 1 1 | 1 1.
     * Round 1 fills the empty slot with 0 (2 > 2 x 0). Tokens 2..7 ask for 1, whose count (2 at
     * round 2, 4 at round 3) never exceeds 2 x 2: no hit. With hysteresis 1, round 3 (4 > 2) swaps
     * 1 in and tokens 6, 7 hit. */
    routing r; tiny(&r, 4, 1, (int[]){ 0, 0, 1, 1, 1, 1, 1, 1 }, 8);
    p = policy_defaults(POLICY_EXCHANGE);
    p.swap_interval = 2; p.swap_floor = 1; p.swap_decay = 1.0;
    CHECK(hits_of(&r, p, 1, 0) == 0, "exchange hyst 2: no hit");
    p.swap_hyst = 1.0;
    CHECK(hits_of(&r, p, 1, 0) == 2, "exchange hyst 1: 2 hits");
    routing_free(&r);
}

static void test_stats_and_synth(void) {
    /* reuse at t-1 over 0 1 1 2 (k=1): token 1 no, 2 yes, 3 no -> 1/3 */
    routing r; tiny(&r, 4, 1, (int[]){ 0, 1, 1, 2 }, 4);
    CHECK(fabs(routing_reuse(&r, 1) - 1.0 / 3) < 1e-12, "reuse at t-1: 1/3");
    CHECK(fabs(routing_reuse(&r, 2) - 1.0 / 2) < 1e-12, "reuse within 2: 1/2 (tokens 2, 3)");
    routing_free(&r);

    synth_params sp = { .zipf = 1.0, .stick = 0.3, .recent = 0.2, .drift = 0.01, .window = 8 };
    routing a, b, c;
    routing_init(&a, 4, 64, 8, 200); routing_init(&b, 4, 64, 8, 200); routing_init(&c, 4, 64, 8, 200);
    synth_generate(&a, &sp, 7); synth_generate(&b, &sp, 7); synth_generate(&c, &sp, 8);
    size_t n = (size_t)200 * 4 * 8;
    CHECK(!memcmp(a.ids, b.ids, n * 2) && memcmp(a.ids, c.ids, n * 2), "synth: same seed same trace, other seed differs");
    int valid = 1;
    for (int64_t t = 0; t < a.n_tokens; t++)
        for (int l = 0; l < a.n_layer; l++) {
            const uint16_t *row = routing_row(&a, t, l);
            for (int i = 0; i < 8; i++) {
                valid &= row && row[i] < 64;
                for (int j = 0; j < i; j++) valid &= row[i] != row[j];
            }
        }
    CHECK(valid, "synth: every row has k distinct valid experts");
    routing_free(&a); routing_free(&b); routing_free(&c);

    const synth_class *mx = synth_class_find("mixtral");
    double got[8];
    synth_fit(mx, 1, &sp, got);
    int fit_ok = 1;
    for (int i = 0; i < mx->n_targets; i++)
        if (mx->targets[i].fit) fit_ok &= fabs(got[i] - mx->targets[i].target) < 0.03;
    CHECK(fit_ok, "synth: mixtral fit within 0.03 of every fitted target");
}

/* The table of shared/data/routing/mixtral-8x7b/README.md (hit rate at 2/4/6 slots). */
static void test_mixtral_table(void) {
    const char *path = HM_TESTS_DIR "/data/routing/decode_83.jsonl";
    routing r; trace_info info; hm_error e = { "" };
    if (trace_load(path, &r, &info, &e)) { CHECK(0, "load %s: %s", path, e.msg); return; }
    CHECK(r.n_tokens == 83 && r.n_layer == 32 && r.n_expert == 8 && r.k == 2 && info.rows == 2579,
          "decode_83: 83 tokens x 32 layers, 8 experts top-2, 2579 rows");
    static const struct { policy_kind kind; double want[3]; } table[] = {
        { POLICY_LRU,    { .355, .597, .806 } },
        { POLICY_LFU,    { .355, .615, .806 } },  /* counts since start */
        { POLICY_BELADY, { .355, .727, .881 } },
        { POLICY_STATIC, { .360, .634, .845 } },
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        for (int j = 0; j < 3; j++) {
            policy_params p = policy_defaults(table[i].kind); p.lfu_decay = 1.0;
            sim_config cfg = { .n_slots = 2 + 2 * j };
            sim_result res;
            sim_run(&r, &p, &cfg, &res);
            double h = sim_hit_rate(&res);
            CHECK(fabs(h - table[i].want[j]) <= 0.005, "mixtral %-6s @%d: %.4f (README %.3f)", policy_name(table[i].kind),
                  cfg.n_slots, h, table[i].want[j]);
            sim_result_free(&res);
        }
    routing_free(&r);
}

int main(void) {
    test_single_choice();
    test_current_token_protected();
    test_exchange();
    test_stats_and_synth();
    test_mixtral_table();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
