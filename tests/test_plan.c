/* test_plan.c - the placement planner on hand-computed cases: budgets exactly at the boundary,
 * the too-small error with its minimum, static experts by frequency, a two-GPU split in
 * proportion to the budgets, overrides, and predicted tok/s equal to the cost model by hand. */
#include "plan.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static int n_pass, n_fail;
#define CHECK(cond, ...) do { int ok_ = (cond); printf("%s ", ok_ ? "PASS" : "FAIL"); printf(__VA_ARGS__); \
    printf("\n"); ok_ ? n_pass++ : n_fail++; } while (0)

#define GIB 1073741824ull

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(b)); }

/* n MoE layers of 8 experts top-2: experts of 1 GiB, 2 GiB dense, no KV, no workspace, no output;
 * ideal links (efficiency 1, no latencies), no staging. */
static void setup(plan_inputs *in, plan_layer_in *L, int n) {
    plan_inputs_init(in);
    memset(L, 0, sizeof *L * (size_t)n);
    for (int l = 0; l < n; l++)
        L[l] = (plan_layer_in){ .is_moe = 1, .n_expert = 8, .k = 2, .expert_bytes = GIB, .dense_bytes = 2 * GIB };
    in->n_layer = n; in->layer = L;
    in->n_gpu = 1; in->ctx = 1; in->staging_experts = 0;
    in->rates.eff_hbm = in->rates.eff_pcie = in->rates.eff_cpu = 1;
    in->rates.gpu_layer_us = in->rates.cpu_sync_us = 0;
}

static void test_boundary(void) {
    plan_inputs in; plan_layer_in L[2]; plan p; char err[1024];
    setup(&in, L, 2);
    in.gpu_mem[0] = 4 * GIB;   /* exactly the dense part of two layers */
    int rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && p.layer[0].n_static + p.layer[0].n_slots == 0 && p.layer[1].n_stream + p.layer[1].n_cpu == 8 &&
          p.gpu[0].total == 4 * GIB, "budget = dense part: plan with no resident experts, total %llu",
          rc ? 0ull : (unsigned long long)p.gpu[0].total);
    if (!rc) plan_free(&p);
    in.gpu_mem[0] = 4 * GIB - 1;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "GPU 0") && strstr(err, "needs at least 4 GiB"),
          "one byte less: error naming the minimum 4 GiB: %s", err);
    in.gpu_mem[0] = 20 * GIB;  /* everything: all static, nothing cold, no pinned host copies */
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && p.layer[1].n_static == 8 && p.layer[1].n_slots == 0 && p.host_pinned == 0 && p.gpu[0].total == 20 * GIB &&
          p.decode_limit == COST_HBM, "budget = whole model: 8 static per layer, nothing pinned");
    if (!rc) plan_free(&p);
    in.gpu_mem[0] = 20 * GIB - 1;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && p.layer[0].n_static + p.layer[0].n_slots == 7 && p.layer[1].n_static + p.layer[1].n_slots == 7,
          "one byte less: 7 resident experts in each layer (the engine keeps the same count in every layer)");
    if (!rc) plan_free(&p);
    /* KV and workspace count: ctx 1024 x 2 streams x 1 MiB per token per layer = 4 GiB more */
    L[0].kv_bytes = L[1].kv_bytes = 1 << 20;
    in.ctx = 1024; in.streams = 2; in.workspace_bytes = GIB; in.gpu_mem[0] = 8 * GIB;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "needs at least 9 GiB") && strstr(err, "KV 4"), "KV + workspace: minimum 9 GiB: %s", err);
}

static void test_frequency(void) {
    plan_inputs in; plan_layer_in L[1]; plan p; char err[1024];
    static const double freq[8] = { 1, 5, 3, 0, 9, 2, 7, 4 };   /* order: 4 6 1 7 2 5 0 3 */
    setup(&in, L, 1);
    L[0].freq = freq;
    in.cold = PLAN_COLD_STREAM;
    in.gpu_mem[0] = 5 * GIB;   /* dense + 3 experts */
    int rc = plan_build(&p, &in, err, sizeof err);
    const plan_layer *pl = &p.layer[0];
    CHECK(rc == 0 && pl->n_static == 0 && pl->n_slots == 3 && pl->n_stream == 5 && pl->order[0] == 4 && pl->order[1] == 6 &&
          pl->order[2] == 1 && pl->where[4] == PLAN_SLOT && pl->where[3] == PLAN_STREAM,
          "3 resident = the 3 most routed (4, 6, 1), in slots (3/4 -> 0 static)");
    CHECK(rc == 0 && near(pl->miss_rate, 1 - 21.0 / 31), "miss rate = mass of the cold experts (10/31): %g",
          rc ? -1 : pl->miss_rate);
    if (!rc) plan_free(&p);
    in.static_experts = 2;
    rc = plan_build(&p, &in, err, sizeof err);
    pl = &p.layer[0];
    CHECK(rc == 0 && pl->n_static == 2 && pl->n_slots == 1 && pl->where[4] == PLAN_STATIC && pl->where[6] == PLAN_STATIC &&
          pl->where[1] == PLAN_SLOT, "--static-experts 2: static 4 and 6, slot 1");
    if (!rc) plan_free(&p);
    in.cache_slots = 2;   /* 2 + 2 = 4 experts = 6 GiB > 5 */
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "needs at least 6 GiB"), "static 2 + slots 2 over budget: %s", err);
    in.static_experts = 5; in.cache_slots = 4;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "at most the 8 experts"), "static 5 + slots 4 > 8 experts: %s", err);
}

static void test_two_gpus(void) {
    plan_inputs in; plan_layer_in L[6]; plan p; char err[1024];
    setup(&in, L, 6);   /* 10 GiB per layer, 60 in all */
    in.n_gpu = 2; in.gpu_mem[0] = 24 * GIB; in.gpu_mem[1] = 12 * GIB;
    int rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && p.gpu[0].first_layer == 0 && p.gpu[0].last_layer == 3 && p.gpu[1].first_layer == 4 &&
          p.gpu[1].last_layer == 5 && p.layer[3].gpu == 0 && p.layer[4].gpu == 1,
          "24 + 12 GiB: layers 0-3 on GPU 0, 4-5 on GPU 1 (2:1)");
    CHECK(rc == 0 && p.layer[0].n_static + p.layer[0].n_slots == 4 && p.layer[5].n_static + p.layer[5].n_slots == 4 &&
          p.gpu[0].total == 24 * GIB && p.gpu[1].total == 12 * GIB, "each GPU fills its budget: 4 resident experts per layer");
    if (!rc) plan_free(&p);
    in.gpu_split[0] = 1; in.gpu_split[1] = 1;   /* explicit split 1:1 -> 3 + 3 layers */
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && p.gpu[0].last_layer == 2 && p.gpu[1].first_layer == 3, "--gpu-split 1,1: layers 0-2 and 3-5");
    if (!rc) plan_free(&p);
    in.gpu_split[0] = in.gpu_split[1] = 0;
    in.gpu_mem[1] = 3 * GIB;   /* 24:3 -> GPU 1 gets layer 5 (needs 2 GiB)... */
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && p.gpu[1].first_layer == 5, "24 + 3 GiB: GPU 1 gets the last layer");
    if (!rc) plan_free(&p);
    in.gpu_mem[0] = 12 * GIB; in.gpu_mem[1] = 12 * GIB;   /* 3 layers each: 6 GiB dense + 6 for experts */
    in.n_cpu_experts = 2; in.cpu_experts[0] = 6; in.cpu_experts[1] = 7;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && p.layer[0].n_cpu == 6 && p.layer[0].n_slots == 2 && p.layer[5].n_cpu == 7 && p.layer[5].n_slots == 1,
          "--cpu-experts 6,7: per device CPU experts, the rest in exchange slots");
    if (!rc) plan_free(&p);
    in.n_cpu_experts = 0;
    in.gpu_mem[1] = 3.5 * GIB;   /* shares 10:1.5 -> GPU 1 holds layer 5: dense 2 + workspace 2 > 3.5 */
    in.workspace_bytes = 2 * GIB;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "GPU 1") && strstr(err, "layer 5 ") && strstr(err, "needs at least 4 GiB"), "GPU 1 too small with 2 GiB workspace: %s", err);
}

static void test_cost(void) {
    plan_inputs in; plan_layer_in L[1]; plan p; char err[1024];
    setup(&in, L, 1);
    /* 1 layer, 4 experts top-1 of 1e9 bytes, dense 1e9; 2 experts resident; HBM 1000, PCIe 50, CPU 100 GB/s */
    L[0] = (plan_layer_in){ .is_moe = 1, .n_expert = 4, .k = 1, .expert_bytes = 1000000000, .dense_bytes = 1000000000 };
    in.rates.hbm = 1000; in.rates.pcie = 50; in.rates.dram = 100;
    in.gpu_mem[0] = 3000000000ull;
    in.cold = PLAN_COLD_STREAM;
    in.prompt = in.chunk = 100;
    int rc = plan_build(&p, &in, err, sizeof err);
    /* decode: dense 1 ms + resident and streamed experts from VRAM (0.5e9 + 0.5e9) / 1e12 = 1 ms, after
     * the streamed ones' copy 0.5e9 / 50e9 = 10 ms (copied, then computed) = 12 ms */
    CHECK(rc == 0 && near(p.decode_tok_s, 1 / 0.012) && p.decode_limit == COST_PCIE && near(p.miss_per_token, 0.5),
          "stream: 1 / (1 ms + 1 ms + 10 ms) = %.4f tok/s, bottleneck %s", rc ? 0 : p.decode_tok_s,
          rc ? "-" : cost_link_name(p.decode_limit));
    /* prefill of 100 tokens: every expert touched (1 - 0.75^100); HBM (1 + 2) GB / 1e12 = 3 ms,
     * PCIe 2 GB / 50e9 = 40 ms -> 100 / 0.040 */
    double touch = 1 - pow(0.75, 100);
    CHECK(rc == 0 && near(p.prefill_tok_s, 100 / (2e9 * touch / 50e9)) && p.prefill_limit == COST_PCIE,
          "stream prefill: 100 / 40 ms = %.2f tok/s", rc ? 0 : p.prefill_tok_s);
    if (!rc) plan_free(&p);
    /* cold on the CPU: dense 1 ms + resident experts 0.5 ms, then the layer waits for the CPU's
     * 0.5e9 / 100e9 = 5 ms (the executor does not hide it) -> 6.5 ms */
    in.cold = PLAN_COLD_CPU;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && near(p.decode_tok_s, 1 / 0.0065) && p.decode_limit == COST_CPU, "cpu: 1 / 6.5 ms = %.4f tok/s",
          rc ? 0 : p.decode_tok_s);
    if (!rc) plan_free(&p);
    /* auto: each cold expert where it adds less: on the CPU 2.5 ms, streamed 5 ms copy + 0.25 ms read
     * -> both on the CPU, as --cold cpu (6.5 ms); with a 40 GB/s CPU (6.25 ms each) both streamed
     * -> 12 ms as --cold stream */
    in.cold = PLAN_COLD_AUTO;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && p.layer[0].n_cpu == 2 && p.layer[0].n_stream == 0 && near(p.decode_tok_s, 1 / 0.0065),
          "auto: the cold experts on the faster CPU, 1 / 6.5 ms = %.4f tok/s", rc ? 0 : p.decode_tok_s);
    if (!rc) plan_free(&p);
    in.rates.dram = 40;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && p.layer[0].n_cpu == 0 && p.layer[0].n_stream == 2 && near(p.decode_tok_s, 1 / 0.012),
          "auto: streamed past a slower CPU, 1 / 12 ms = %.4f tok/s", rc ? 0 : p.decode_tok_s);
    if (!rc) plan_free(&p);
    in.rates.dram = 100;
    /* the CPU's hand-off is paid once per layer: with 3 ms of it each expert alone is cheaper
     * streamed (2.5 + 3 > 5.25 ms), both together are not (3 + 2.5 + 2.5 < 10.5) -> both on the CPU */
    in.rates.cpu_sync_us = 3000;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && p.layer[0].n_cpu == 2 && p.layer[0].n_stream == 0 && near(p.decode_tok_s, 1 / 0.0095),
          "auto: the hand-off paid once per layer, both experts on the CPU, 1 / 9.5 ms = %.4f tok/s", rc ? 0 : p.decode_tok_s);
    if (!rc) plan_free(&p);
    in.rates.cpu_sync_us = 0;
    /* latencies add per layer: 6 us on the GPU (layer + output head), 10 us CPU hand-off */
    in.cold = PLAN_COLD_CPU; in.rates.gpu_layer_us = 6; in.rates.cpu_sync_us = 10;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && near(p.decode_tok_s, 1 / (0.0065 + 12e-6 + 10e-6)), "latencies: 1 / 6.522 ms = %.4f tok/s",
          rc ? 0 : p.decode_tok_s);
    if (!rc) plan_free(&p);
    /* 2 streams: each expert touched with 1 - 0.75^2 (resident ones from VRAM, cold ones on the CPU); KV 1e6 per token x decode_pos 100 x 2 */
    in.rates.gpu_layer_us = in.rates.cpu_sync_us = 0;
    in.streams = 2; in.decode_pos = 100; L[0].kv_bytes = 1000000; in.gpu_mem[0] = 3000000000ull + 2000000;
    rc = plan_build(&p, &in, err, sizeof err);
    double t2 = (1e9 + 2 * 1e6 * 100) / 1e12 + 2 * (1 - 0.5625) * 1e9 / 1e12 + 2 * (1 - 0.5625) * 1e9 / 100e9;
    CHECK(rc == 0 && near(p.decode_tok_s, 2 / t2), "2 streams: 2 / %.4f ms = %.4f tok/s", t2 * 1e3, rc ? 0 : p.decode_tok_s);
    if (!rc) plan_free(&p);
    /* CPU only: dense 1e9 / 100e9 + experts 1e9 (k x all mass) / 100e9 = 20 ms */
    in.n_gpu = 0; in.streams = 1; L[0].kv_bytes = 0;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == 0 && near(p.decode_tok_s, 50) && p.decode_limit == COST_CPU && p.layer[0].gpu == -1 &&
          p.host_total == 5000000000ull, "CPU only: 50 tok/s, everything in host RAM");
    if (!rc) plan_free(&p);
    in.host_ram = 4000000000ull;
    rc = plan_build(&p, &in, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "host RAM") && strstr(err, "needs at least 4.66 GiB"), "host RAM too small: %s", err);
}

int main(void) {
    test_boundary();
    test_frequency();
    test_two_gpus();
    test_cost();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
