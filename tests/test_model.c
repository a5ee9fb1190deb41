/* test_model.c - model-level check against HF transformers: for every fixture, as an HF
 * directory and as a GGUF written by our converter, logits at every position within 1e-4
 * (max |diff| / max |ref|) and 16 greedy tokens identical; one run goes through the real CLI. */
#include "convert.h"
#include "cpu.h"
#include "loader.h"
#include "test_util.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fixtures[] = { "qwen3moe", "qwen3moe-bf16", "glm4moe", "glm4moe-f16" };

static float *read_f32(const char *path, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *b = malloc(n * sizeof(float));
    size_t r = fread(b, sizeof(float), n, f);
    fclose(f);
    if (r != n) { free(b); return NULL; }
    return b;
}

static double rel_err(const float *a, const float *b, int n) {
    double md = 0, mr = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = fabs((double)a[i] - b[i]);
        if (d > md) md = d;
        if (fabs(b[i]) > mr) mr = fabs(b[i]);
    }
    return md / mr;
}

static int argmax(const float *x, int n) { int b = 0; for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i; return b; }


/* Runs every reference sequence of fixture dir through model m. */
static void check_model(const hm_model *m, const char *dir, const char *label) {
    char path[4096]; snprintf(path, sizeof path, "%s/ref/ref.json", dir);
    hm_error e;
    char *txt = hm_read_file(path, NULL, &e);
    cJSON *j = txt ? cJSON_Parse(txt) : NULL; free(txt);
    cJSON *seqs = j ? cJSON_GetObjectItem(j, "sequences") : NULL;
    if (!cJSON_IsArray(seqs)) { report(0, "%s %s: cannot read references", dir, label); cJSON_Delete(j); return; }
    int V = m->cfg.n_vocab, si = 0;
    cJSON *s;
    cJSON_ArrayForEach(s, seqs) {
        cJSON *toks = cJSON_GetObjectItem(s, "tokens"), *greedy = cJSON_GetObjectItem(s, "greedy");
        int n = cJSON_GetArraySize(toks), ng = cJSON_GetArraySize(greedy);
        snprintf(path, sizeof path, "%s/ref/%s", dir, cJSON_GetObjectItem(s, "logits")->valuestring);
        float *ref = read_f32(path, (size_t)n * V);
        if (!ref || cJSON_GetObjectItem(s, "n_vocab")->valueint != V) { report(0, "%s %s seq %d: bad reference", dir, label, si); free(ref); si++; continue; }
        cpu_state st; cpu_state_init(&st, &m->cfg, n + ng);
        float *lg = malloc(sizeof(float) * V);
        double worst = 0;
        for (int i = 0; i < n; i++) {
            for (int v = 0; v < V; v++) lg[v] = NAN; /* poisoned */
            cpu_forward(m, &st, cJSON_GetArrayItem(toks, i)->valueint, i, lg);
            double r = rel_err(lg, ref + (size_t)i * V, V);
            if (!(r <= worst)) worst = r;
        }
        report(worst <= 1e-4, "%s %s seq %d: logits max rel err %.3g (<= 1e-4)", dir, label, si, worst);
        int same = 1, pos = n;
        for (int g = 0; g < ng; g++) {
            int t = argmax(lg, V);
            same &= t == cJSON_GetArrayItem(greedy, g)->valueint;
            cpu_forward(m, &st, t, pos++, lg);
        }
        report(same, "%s %s seq %d: %d greedy tokens identical", dir, label, si, ng);
        free(lg); free(ref); cpu_state_free(&st);
        si++;
    }
    cJSON_Delete(j);
}

/* The CLI form other tools rely on: hotmoe logits -m PATH --tokens ... -o FILE. */
static void check_cli(const char *model, const char *dir) {
    char path[4096]; snprintf(path, sizeof path, "%s/ref/ref.json", dir);
    char *txt = hm_read_file(path, NULL, NULL);
    cJSON *j = txt ? cJSON_Parse(txt) : NULL; free(txt);
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "sequences"), 0);
    cJSON *toks = cJSON_GetObjectItem(s, "tokens");
    int n = cJSON_GetArraySize(toks), V = cJSON_GetObjectItem(s, "n_vocab")->valueint;
    char cmd[8192], list[4096] = "", out[4096];
    for (int i = 0; i < n; i++) snprintf(list + strlen(list), sizeof list - strlen(list), i ? ",%d" : "%d", cJSON_GetArrayItem(toks, i)->valueint);
    snprintf(out, sizeof out, "%s/test_model_cli.f32", HM_BUILD_DIR);
    remove(out);
    snprintf(cmd, sizeof cmd, "'%s' logits -m '%s' --tokens %s -o '%s'", HM_HOTMOE_BIN, model, list, out);
    int rc = system(cmd);
    snprintf(path, sizeof path, "%s/ref/%s", dir, cJSON_GetObjectItem(s, "logits")->valuestring);
    float *a = read_f32(out, (size_t)n * V), *b = read_f32(path, (size_t)n * V);
    double worst = a && b ? 0 : INFINITY;
    FILE *f = fopen(out, "rb");
    long size = -1;
    if (f) { fseek(f, 0, SEEK_END); size = ftell(f); fclose(f); }
    for (int i = 0; a && b && i < n; i++) { double r = rel_err(a + (size_t)i * V, b + (size_t)i * V, V); if (!(r <= worst)) worst = r; }
    int ok = rc == 0 && size == (long)n * V * 4 && worst <= 1e-4;
    report(ok, "CLI logits -m %s: exit 0, a file of n_tokens*n_vocab floats, max rel err %.3g", model, worst);
    free(a); free(b); cJSON_Delete(j);
}

int main(void) {
    for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
        char dir[4096], gg[4096];
        snprintf(dir, sizeof dir, "%s/fixtures/%s", HM_TESTS_DIR, fixtures[f]);
        snprintf(gg, sizeof gg, "%s/test_model_%s.gguf", HM_BUILD_DIR, fixtures[f]);
        hm_model m; hm_error e;
        if (model_load(&m, dir, &e)) { printf("FAIL load %s: %s\n", dir, e.msg); n_fail++; continue; }
        check_model(&m, dir, "HF");
        int rc = convert_write_gguf(&m, gg, NULL, &e);
        model_free(&m);
        if (rc) { printf("FAIL convert %s: %s\n", dir, e.msg); n_fail++; continue; }
        if (model_load(&m, gg, &e)) { printf("FAIL load %s: %s\n", gg, e.msg); n_fail++; continue; }
        check_model(&m, dir, "GGUF");
        model_free(&m);
        if (f == 0 || f == 2) { check_cli(dir, dir); check_cli(gg, dir); }
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
