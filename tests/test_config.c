/* test_config.c - deployment files: keys become flags before the command's own, the command line
 * wins, unknown keys and malformed JSON are errors naming what is wrong, every file in configs/
 * loads, configs/README.md names every key, and `plan --config` end to end on a fixture. And
 * --gpu-reserve: the engine's budget is --gpu-mem less it, in the runner, --cold auto and plan. */
#define _GNU_SOURCE
#include "autoplan.h"
#include "config.h"
#include "exec.h"
#include "loader.h"
#include "trace.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef HM_TESTS_DIR
#define HM_TESTS_DIR "tests"
#endif

int cmd_plan(int argc, char **argv);

static int n_pass, n_fail;
#define CHECK(cond, ...) do { int ok_ = (cond); printf("%s ", ok_ ? "PASS" : "FAIL"); printf(__VA_ARGS__); \
    printf("\n"); ok_ ? n_pass++ : n_fail++; } while (0)

/* The value of the last occurrence of flag in argv (how the option parsers treat repeats). */
static const char *last_value(int argc, char **argv, const char *flag) {
    const char *v = NULL;
    for (int i = 0; i + 1 < argc; i++) if (!strcmp(argv[i], flag)) v = argv[i + 1];
    return v;
}
static int has(int argc, char **argv, const char *flag) {
    for (int i = 0; i < argc; i++) if (!strcmp(argv[i], flag)) return 1;
    return 0;
}

static void test_keys(void) {
    config_set c;
    hm_error e = { { 0 } };
    const char *js = "{\"gpu-mem\": [24, 24.5], \"cold\": \"stream\", \"ctx\": 8192, \"no-swap\": true,"
                     " \"ignore-eos\": false, \"_comment\": {\"any\": 1}, \"ram\": 125.5, \"cpu_experts\": 100}";
    int rc = config_parse(&c, js, "t.json", &e);
    CHECK(rc == 0 && c.n == 7, "parse: 7 keys (comment skipped): %s", rc ? e.msg : "ok");
    if (rc) return;
    char *argv[] = { "-m", "model.gguf", "--cold", "cpu" };
    char **v;
    int n = config_argv(&c, "plan", 4, argv, &v);
    CHECK(n == 14 && !strcmp(v[0], "--gpu-mem") && !strcmp(v[1], "24,24.5") && !strcmp(last_value(n, v, "--ctx"), "8192") &&
          !strcmp(last_value(n, v, "--ram"), "125.5") && !strcmp(last_value(n, v, "--cpu-experts"), "100"),
          "plan: gpu-mem 24,24.5, ctx 8192, ram 125.5, cpu_experts -> --cpu-experts 100 (%d args)", n);
    CHECK(!has(n, v, "--no-swap") && !has(n, v, "--ignore-eos"), "plan: keys of other commands left out");
    CHECK(!strcmp(last_value(n, v, "--cold"), "cpu") && !strcmp(v[n - 1], "cpu") && !strcmp(v[n - 4], "-m"),
          "the command line comes last: --cold cpu wins over the file's stream");
    free(v);
    n = config_argv(&c, "serve", 0, NULL, &v);
    CHECK(has(n, v, "--no-swap") && !has(n, v, "--ignore-eos") && has(n, v, "--gpu-mem"),
          "serve: true boolean -> --no-swap, false -> nothing, generate-only key left out");
    free(v);
    n = config_argv(&c, "generate", 0, NULL, &v);
    CHECK(!has(n, v, "--ignore-eos") && has(n, v, "--no-swap"), "generate: ignore-eos false gives no flag");
    free(v);
    config_free(&c);
}

static void test_errors(void) {
    config_set c;
    hm_error e = { { 0 } };
    int rc = config_parse(&c, "{\"gpu-mem\": 24, \"gpu-memory\": 3}", "a.json", &e);
    CHECK(rc == -1 && strstr(e.msg, "a.json") && strstr(e.msg, "unknown key 'gpu-memory'"), "unknown key named: %s", e.msg);
    rc = config_parse(&c, "{\"ctx\": 12,,}", "b.json", &e);
    CHECK(rc == -1 && strstr(e.msg, "b.json") && strstr(e.msg, "malformed JSON at byte"), "malformed JSON: %s", e.msg);
    rc = config_parse(&c, "{\"ctx\": 12", "b2.json", &e);
    CHECK(rc == -1 && strstr(e.msg, "malformed JSON"), "truncated JSON: %s", e.msg);
    rc = config_parse(&c, "[1, 2]", "c.json", &e);
    CHECK(rc == -1 && strstr(e.msg, "expected a JSON object"), "top level not an object: %s", e.msg);
    rc = config_parse(&c, "{\"ctx\": 1.5}", "d.json", &e);
    CHECK(rc == -1 && strstr(e.msg, "'ctx'") && strstr(e.msg, "expected an integer"), "ctx 1.5: %s", e.msg);
    rc = config_parse(&c, "{\"no-swap\": 1}", "e.json", &e);
    CHECK(rc == -1 && strstr(e.msg, "'no-swap'") && strstr(e.msg, "true or false"), "boolean key given 1: %s", e.msg);
    rc = config_parse(&c, "{\"cold\": null}", "f.json", &e);
    CHECK(rc == -1 && strstr(e.msg, "found null"), "null value: %s", e.msg);
    rc = config_parse(&c, "{\"gpu-mem\": [24, {\"x\": 1}]}", "g.json", &e);
    CHECK(rc == -1 && strstr(e.msg, "'gpu-mem'"), "object inside a list: %s", e.msg);
    rc = config_parse(&c, "{\"ctx\": 1, \"ctx\": 2}", "h.json", &e);
    CHECK(rc == -1 && strstr(e.msg, "given twice"), "duplicate key: %s", e.msg);
    rc = config_load(&c, "/nonexistent/x.json", &e);
    CHECK(rc == -1 && strstr(e.msg, "/nonexistent/x.json"), "missing file: %s", e.msg);
}

static void test_files(void) {
    static const char *files[] = { "single-gpu-stream.json", "dual-gpu-cpu-workers.json", "cpu-only.json" };
    for (int i = 0; i < 3; i++) {
        char path[1024];
        config_set c;
        hm_error e = { { 0 } };
        snprintf(path, sizeof path, "%s/../configs/%s", HM_TESTS_DIR, files[i]);
        int rc = config_load(&c, path, &e);
        CHECK(rc == 0 && c.n > 3, "configs/%s loads (%d keys) %s", files[i], c.n, rc ? e.msg : "");
        if (!rc) config_free(&c);
    }
    char path[1024];
    size_t len;
    hm_error e;
    snprintf(path, sizeof path, "%s/../configs/README.md", HM_TESTS_DIR);
    char *readme = hm_read_file(path, &len, &e);
    int missing = 0;
    for (const config_key *k = config_keys; readme && k->name; k++) {
        char want[64];
        snprintf(want, sizeof want, "| `%s` |", k->name);
        if (!strstr(readme, want)) { printf("  not in configs/README.md: %s\n", k->name); missing++; }
    }
    CHECK(readme && !missing, "configs/README.md lists every key (%d missing)", missing);
    free(readme);
}

/* Runs cmd_plan with stdout captured; returns its output (malloc'd). */
static char *run_plan(int argc, char **argv, int *rc) {
    char tmpl[] = "/tmp/hm_test_config_XXXXXX";
    int fd = mkstemp(tmpl);
    fflush(stdout);
    int saved = dup(1);
    dup2(fd, 1);
    *rc = cmd_plan(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved); close(fd);
    size_t len;
    hm_error e;
    char *out = hm_read_file(tmpl, &len, &e);
    unlink(tmpl);
    return out;
}

static void test_plan_config(void) {
    char cfg[] = "/tmp/hm_test_config_cfg_XXXXXX";
    int fd = mkstemp(cfg);
    /* gpu-reserve 0: the whole 2 MiB for the engine (the default 1 GiB reserve would refuse it) */
    const char *js = "{\"gpu-mem\": 0.002, \"gpu-reserve\": 0, \"cold\": \"cpu\", \"ctx\": 256, \"ram\": 1, \"workspace-mib\": 0.1,"
                     " \"staging\": 2, \"port\": 9000, \"no-swap\": true}";
    if (write(fd, js, strlen(js)) != (ssize_t)strlen(js)) printf("  cannot write %s\n", cfg);
    close(fd);
    char *argv[] = { "--config", cfg, "-m", HM_TESTS_DIR "/fixtures/glm4moe", "--cold", "stream", "--json" };
    int rc;
    char *out = run_plan(7, argv, &rc);
    CHECK(rc == 0 && out && strstr(out, "\"cold\":\"stream\"") && strstr(out, "\"ctx\":256"),
          "plan --config: file's ctx 256 applied, --cold stream on the command line wins over cpu");
    free(out);
    char *argv2[] = { "--config", cfg, "-m", HM_TESTS_DIR "/fixtures/glm4moe", "--json" };
    out = run_plan(5, argv2, &rc);
    CHECK(rc == 0 && out && strstr(out, "\"cold\":\"cpu\"") && strstr(out, "\"gpu_reserve\":0,"),
          "plan --config without the flag: the file's cold cpu and gpu-reserve 0");
    free(out);
    char *argv3[] = { "--config", cfg, "-m", HM_TESTS_DIR "/fixtures/glm4moe", "--gpu-reserve", "1", "--json" };
    out = run_plan(7, argv3, &rc);
    CHECK(rc == 2, "plan --config with --gpu-reserve 1 on the command line: the file's gpu-mem 0.002 is refused (rc %d)", rc);
    free(out);
    unlink(cfg);
}

/* --cold auto's planner on a fixture: a budget plans a cold path and a static count; with a trace
 * of topic drift the simulated LFU decay is faster than 0.995 with a better hit rate; a budget
 * below the dense part is an error naming the minimum. */
static void test_autoplan(void) {
    char dir[4096], tr[4200];
    snprintf(dir, sizeof dir, "%s/fixtures/glm4moe", HM_TESTS_DIR);
    hm_model m; hm_error e;
    if (model_load(&m, dir, &e)) { CHECK(0, "autoplan: %s", e.msg); return; }
    const hm_config *c = &m.cfg;
    int n_moe = 0;
    for (int l = 0; l < c->n_layer; l++) n_moe += m.layers[l].is_moe;
    routing r = { 0 };
    const int T = 2000, E = c->n_expert, k = c->n_expert_used;
    routing_init(&r, n_moe, E, k, T);
    /* topic drift: every 250 tokens the routing moves to the other half of the experts (4 of 8 at
     * random per token): a slowly decaying LFU keeps the old topic's experts for long */
    uint64_t x = 12345;
    for (int l = 0; l < n_moe; l++)
        for (int t = 0; t < T; t++) {
            const int base = (t / 250) % 2 ? E / 2 : 0;
            uint16_t *row = r.ids + ((size_t)t * n_moe + l) * k;
            for (int j = 0; j < k; j++) {
                int cand, dup;
                do {
                    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                    cand = base + (int)(x % (uint64_t)(E / 2)); dup = 0;
                    for (int q = 0; q < j; q++) dup |= row[q] == cand;
                } while (dup);
                row[j] = (uint16_t)cand;
            }
        }
    snprintf(tr, sizeof tr, "%s/test_autoplan.hmrt", HM_BUILD_DIR);
    int rc = trace_save(tr, &r, &e);
    routing_free(&r);
    if (rc) { CHECK(0, "autoplan: %s", e.msg); model_free(&m); return; }
    autoplan a;
    rc = autoplan_choose(&m, 1.0, tr, 256, &a, &e);
    CHECK(rc == 0 && (a.cold == GPU_COLD_STREAM || a.cold == GPU_COLD_CPU) && a.n_static >= 0 && a.n_static <= E,
          "autoplan: a generous budget plans (cold %d, %d static): %s", a.cold, a.n_static, rc ? e.msg : a.why);
    /* the decay choice itself, at 8 slots of 16: the drifting trace wants a faster decay */
    routing rt = { 0 };
    trace_info info;
    double h0 = 0, h1 = 0;
    float d = trace_load(tr, &rt, &info, &e) ? -1 : autoplan_lfu_decay(&rt, 0, 8, &h0, &h1);
    CHECK(d > 0 && d < 0.995f && h1 > h0 + 0.05, "LFU decay for a drifting trace: %.3g (simulated hit rate %.3f, %.3f at 0.995)", d, h1, h0);
    routing_free(&rt);
    rc = autoplan_choose2(&m, 0.5, 0.5, tr, 256, &a, &e);
    CHECK(rc == 0 && a.split_layer > 0 && a.split_layer < c->n_layer && strstr(a.why, "on the second"),
          "autoplan over two GPUs: layers split at %d of %d: %s", a.split_layer, c->n_layer, rc ? e.msg : a.why);
    rc = autoplan_choose(&m, 1e-6, tr, 256, &a, &e);
    CHECK(rc == -1 && strstr(e.msg, "at least"), "autoplan: a budget below the dense part names the minimum: %s", e.msg);
    model_free(&m);
}

/* --gpu-reserve in the runner: the default, the flag and its range, the executor's budget
 * (--gpu-mem less the reserve), a --gpu-mem not above the reserve refused naming both (either
 * GPU), and the deployment file's key reaching the runner. */
static void test_reserve_flag(void) {
    runner_opts o;
    gpu_exec_opts go;
    hm_error e = { { 0 } };
    runner_opts_init(&o);
    CHECK(o.gpu_reserve_gib == 1.0, "--gpu-reserve defaults to 1 GiB (%g)", o.gpu_reserve_gib);
    int took = runner_opts_flag(&o, "--gpu-mem", "24", &e);
    runner_gpu_opts(&o, 1, &go);
    CHECK(took == 1 && runner_engine_gib(&o, 24) == 23 && go.gpu_mem_gib == 23 && !runner_check_budget(&o, &e),
          "--gpu-mem 24: the executor's budget is 23 GiB (%g)", go.gpu_mem_gib);
    CHECK(runner_engine_gib(&o, 0) == 0, "--gpu-mem 0 (no budget): no engine budget either");
    took = runner_opts_flag(&o, "--gpu-reserve", "0.5", &e);
    runner_gpu_opts(&o, 1, &go);
    CHECK(took == 1 && o.gpu_reserve_gib == 0.5 && go.gpu_mem_gib == 23.5, "--gpu-reserve 0.5: the executor's budget is 23.5 GiB (%g)",
          go.gpu_mem_gib);
    took = runner_opts_flag(&o, "--gpu-reserve", "0", &e);
    runner_gpu_opts(&o, 1, &go);
    CHECK(took == 1 && go.gpu_mem_gib == 24, "--gpu-reserve 0: the whole --gpu-mem for the engine (%g)", go.gpu_mem_gib);
    static const char *bad[] = { "-1", "64.5", "x", NULL };
    for (int i = 0; i < 4; i++) {
        took = runner_opts_flag(&o, "--gpu-reserve", bad[i], &e);
        CHECK(took == -1 && strstr(e.msg, "--gpu-reserve") && strstr(e.msg, "[0, 64]"), "--gpu-reserve %s refused: %s",
              bad[i] ? bad[i] : "without a value", e.msg);
    }
    runner_opts_init(&o);
    runner_opts_flag(&o, "--gpu-mem", "0.8", &e);
    int rc = runner_check_budget(&o, &e);
    CHECK(rc == -1 && strstr(e.msg, "--gpu-mem 0.8:") && strstr(e.msg, "--gpu-reserve 1 ") && strstr(e.msg, "CUDA context"),
          "--gpu-mem 0.8 under the default reserve refused: %s", e.msg);
    runner_opts_flag(&o, "--gpu-mem", "1", &e);
    rc = runner_check_budget(&o, &e);
    CHECK(rc == -1 && strstr(e.msg, "--gpu-mem 1:"), "--gpu-mem equal to the reserve refused: %s", e.msg);
    runner_opts_flag(&o, "--gpu-mem", "16,0.75", &e);
    rc = runner_check_budget(&o, &e);
    CHECK(rc == -1 && strstr(e.msg, "--gpu-mem 0.75 (the second GPU)"), "--gpu-mem 16,0.75: the second GPU's budget refused: %s", e.msg);
    runner_opts_flag(&o, "--gpu-reserve", "0.5", &e);
    CHECK(!runner_check_budget(&o, &e) && runner_engine_gib(&o, o.gpu_mem2_gib) == 0.25,
          "--gpu-mem 16,0.75 --gpu-reserve 0.5: accepted, 0.25 GiB for the second GPU's engine");

    /* the key: "gpu_reserve" reads as gpu-reserve, for the run commands and plan alike */
    config_set c;
    rc = config_parse(&c, "{\"gpu-mem\": 8, \"gpu_reserve\": 0.25}", "r.json", &e);
    CHECK(rc == 0, "a file with gpu_reserve parses: %s", rc ? e.msg : "ok");
    if (rc) return;
    static const char *cmds[] = { "serve", "generate", "bench", "plan" };
    for (int i = 0; i < 4; i++) {
        char **v;
        int n = config_argv(&c, cmds[i], 0, NULL, &v);
        const char *r = last_value(n, v, "--gpu-reserve");
        runner_opts_init(&o);
        for (int j = 0; j + 1 < n; j += 2) runner_opts_flag(&o, v[j], v[j + 1], &e);
        CHECK(r && !strcmp(r, "0.25") && o.gpu_reserve_gib == 0.25 && runner_engine_gib(&o, o.gpu_mem_gib) == 7.75,
              "%s: gpu_reserve 0.25 -> --gpu-reserve %s, 7.75 GiB of gpu-mem 8 for the engine", cmds[i], r ? r : "(none)");
        free(v);
    }
    config_free(&c);
}

/* cmd_plan --json on the glm4moe fixture, parsed; NULL when it failed (*rc its code). */
static cJSON *plan_json(int argc, char **argv, int *rc) {
    char *out = run_plan(argc, argv, rc);
    cJSON *j = *rc == 0 && out ? cJSON_Parse(out) : NULL;
    free(out);
    return j;
}

static double gpu0(const cJSON *j, const char *key) {
    const cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "gpus"), 0);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(g, key);
    return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

/* The plan's placement: layers and gpus (what the engine gets), printed for comparison. */
static char *placement_of(const cJSON *j) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddItemToObject(p, "layers", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(j, "layers"), 1));
    cJSON_AddItemToObject(p, "gpus", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(j, "gpus"), 1));
    char *s = cJSON_PrintUnformatted(p);
    cJSON_Delete(p);
    return s;
}

/* `hotmoe plan --gpu-mem 8` plans with 7 GiB for the engine: the same plan as --gpu-mem 7
 * --gpu-reserve 0; at a budget that binds on the fixture (a few MiB for the engine) the reserve
 * changes the plan, which stays within the engine's share; the readable output says so and its
 * run line keeps the user's --gpu-mem. */
static void test_plan_reserve(void) {
    const double GIB = 1073741824.0;
    char fx[] = HM_TESTS_DIR "/fixtures/glm4moe";
    int rc;
    char *a8[] = { "-m", fx, "--ctx", "256", "--gpu-mem", "8", "--json" };
    char *a7[] = { "-m", fx, "--ctx", "256", "--gpu-mem", "7", "--gpu-reserve", "0", "--json" };
    cJSON *j8 = plan_json(7, a8, &rc), *j7 = plan_json(9, a7, &rc);
    const cJSON *r8 = cJSON_GetObjectItemCaseSensitive(j8, "gpu_reserve");
    CHECK(j8 && cJSON_IsNumber(r8) && r8->valuedouble == GIB && gpu0(j8, "budget") == 7 * GIB && gpu0(j8, "total") > 0 &&
          gpu0(j8, "total") <= 7 * GIB, "plan --gpu-mem 8: gpu_reserve %.0f bytes, the engine's budget %.0f = 7 GiB, VRAM total %.0f",
          cJSON_IsNumber(r8) ? r8->valuedouble : -1, gpu0(j8, "budget"), gpu0(j8, "total"));
    char *p8 = j8 ? placement_of(j8) : NULL, *p7 = j7 ? placement_of(j7) : NULL;
    CHECK(p8 && p7 && !strcmp(p8, p7), "plan --gpu-mem 8 = plan --gpu-mem 7 --gpu-reserve 0 (layers and VRAM)");
    free(p8); free(p7); cJSON_Delete(j8); cJSON_Delete(j7);

    /* 5.4 MiB for the engine: one static expert per layer (16 with the whole 1.0053 GiB) */
    char *b1[] = { "-m", fx, "--ctx", "256", "--gpu-mem", "1.0053", "--json" };
    char *b0[] = { "-m", fx, "--ctx", "256", "--gpu-mem", "0.0053", "--gpu-reserve", "0", "--json" };
    char *bn[] = { "-m", fx, "--ctx", "256", "--gpu-mem", "1.0053", "--gpu-reserve", "0", "--json" };
    cJSON *k1 = plan_json(7, b1, &rc), *k0 = plan_json(9, b0, &rc), *kn = plan_json(9, bn, &rc);
    p8 = k1 ? placement_of(k1) : NULL; p7 = k0 ? placement_of(k0) : NULL;
    char *pn = kn ? placement_of(kn) : NULL;
    CHECK(p8 && p7 && pn && !strcmp(p8, p7) && strcmp(p8, pn) && gpu0(k1, "total") <= (1.0053 - 1) * GIB,
          "plan --gpu-mem 1.0053 = --gpu-mem 0.0053 --gpu-reserve 0 (VRAM total %.0f <= %.0f), not --gpu-reserve 0's plan",
          gpu0(k1, "total"), (1.0053 - 1) * GIB);
    free(p8); free(p7); free(pn); cJSON_Delete(k1); cJSON_Delete(k0); cJSON_Delete(kn);

    char *t8[] = { "-m", fx, "--ctx", "256", "--gpu-mem", "8" };
    char *out = run_plan(6, t8, &rc);
    CHECK(rc == 0 && out && strstr(out, "GPU 0 8 GiB (7 GiB for the engine, 1 GiB reserved for the CUDA context and cuBLAS)") &&
          strstr(out, "run      --gpu-mem 8 --cold") && strstr(out, "7.00 GiB\n"),
          "plan --gpu-mem 8, readable: the budget line names the engine's 7 GiB, the run line the user's --gpu-mem 8");
    free(out);
    char *t2[] = { "-m", fx, "--ctx", "256", "--gpu-mem", "8,4", "--gpu-reserve", "0.5" };
    out = run_plan(8, t2, &rc);
    CHECK(rc == 0 && out && strstr(out, "(7.5 GiB, 3.5 GiB for the engine, 0.5 GiB each reserved") &&
          strstr(out, "run      --gpu-mem 8,4 --gpus 0,1 --gpu-reserve 0.5 --cold"),
          "plan --gpu-mem 8,4 --gpu-reserve 0.5: both GPUs' engine budgets, the reserve in the run line");
    free(out);
    char *lo[] = { "-m", fx, "--gpu-mem", "0.8", "--json" };
    out = run_plan(5, lo, &rc);
    CHECK(rc == 2 && out && !*out, "plan --gpu-mem 0.8 (not above the reserve): refused, rc %d", rc);
    free(out);
    char *lo2[] = { "-m", fx, "--gpu-mem", "8,1", "--json" };
    out = run_plan(5, lo2, &rc);
    CHECK(rc == 2, "plan --gpu-mem 8,1: the second GPU's budget equal to the reserve refused, rc %d", rc);
    free(out);
}

/* --cold auto plans with the engine's budget: autoplan_apply at --gpu-mem 1.0053 chooses what the
 * planner chooses for 0.0053 GiB, not for 1.0053; a --gpu-mem not above the reserve is refused
 * before any planning, and by runner_check_placement (the GPU and CPU targets' check). */
static void test_autoplan_reserve(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/fixtures/glm4moe", HM_TESTS_DIR);
    hm_model m; hm_error e;
    if (model_load(&m, dir, &e)) { CHECK(0, "autoplan reserve: %s", e.msg); return; }
    autoplan eng, all;
    int rc0 = autoplan_choose(&m, 1.0053 - 1.0, NULL, 256, &eng, &e), rc1 = autoplan_choose(&m, 1.0053, NULL, 256, &all, &e);
    runner_opts o;
    runner_opts_init(&o);
    runner_opts_flag(&o, "--gpu-mem", "1.0053", &e);
    int rc = autoplan_apply(&o, &m, HM_DEVICE_CUDA, 256, 1, &e);
    CHECK(!rc0 && !rc1 && !rc && eng.n_static != all.n_static && o.n_static == eng.n_static,
          "--cold auto at --gpu-mem 1.0053: %d static experts, the plan of the engine's 0.0053 GiB (%d; the whole 1.0053: %d)",
          o.n_static, eng.n_static, all.n_static);
    runner_opts_init(&o);
    runner_opts_flag(&o, "--gpu-mem", "1.000001", &e);
    rc = autoplan_apply(&o, &m, HM_DEVICE_CUDA, 256, 1, &e);
    CHECK(rc == -1 && strstr(e.msg, "at least") && strstr(e.msg, "engine's: each --gpu-mem less --gpu-reserve"),
          "--cold auto at --gpu-mem 1.000001: too small, the budget named is the engine's: %s", e.msg);
    runner_opts_init(&o);
    runner_opts_flag(&o, "--gpu-mem", "0.8", &e);
    rc = autoplan_apply(&o, &m, HM_DEVICE_CUDA, 256, 1, &e);
    CHECK(rc == -1 && strstr(e.msg, "--gpu-reserve"), "--cold auto at --gpu-mem 0.8: refused before planning: %s", e.msg);
    o.cold = GPU_COLD_STREAM;
    rc = autoplan_apply(&o, &m, HM_DEVICE_CPU, 256, 1, &e);
    int rc2 = runner_check_placement(&o, &m, &e);
    CHECK(rc == -1 && rc2 == -1 && strstr(e.msg, "--gpu-reserve"), "--cold stream / the CPU target: refused too: %s", e.msg);
    model_free(&m);
}

int main(void) {
    test_autoplan();
    test_keys();
    test_errors();
    test_files();
    test_plan_config();
    test_reserve_flag();
    test_plan_reserve();
    test_autoplan_reserve();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
