/* test_config.c - deployment files: keys become flags before the command's own, the command line
 * wins, unknown keys and malformed JSON are errors naming what is wrong, every file in configs/
 * loads, configs/README.md names every key, and `plan --config` end to end on a fixture. */
#define _GNU_SOURCE
#include "autoplan.h"
#include "config.h"
#include "exec.h"
#include "loader.h"
#include "trace.h"
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
    const char *js = "{\"gpu-mem\": 0.002, \"cold\": \"cpu\", \"ctx\": 256, \"ram\": 1, \"workspace-mib\": 0.1,"
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
    CHECK(rc == 0 && out && strstr(out, "\"cold\":\"cpu\""), "plan --config without the flag: the file's cold cpu");
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

int main(void) {
    test_autoplan();
    test_keys();
    test_errors();
    test_files();
    test_plan_config();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
