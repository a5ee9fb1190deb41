/* config.c - deployment JSON files turned into flags placed before a command's own arguments
 * (see config.h); the table of keys below is the one list of what a file may say. */
#define _GNU_SOURCE
#include "config.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN "serve generate bench"
#define RUNP "serve generate bench plan"

const config_key config_keys[] = {
    /* model and workload */
    { "model", CONFIG_STRING, RUNP, "model path: a GGUF file or an HF directory (-m)" },
    { "ctx", CONFIG_INT, RUNP, "KV cache positions per sequence (-c)" },
    { "device", CONFIG_STRING, RUN, "cpu | cuda | auto" },
    { "kernels", CONFIG_STRING, RUN, "fast | ref" },
    { "prefill-chunk", CONFIG_INT, RUNP, "prompt tokens per prefill chunk" },
    { "prefill-min", CONFIG_INT, RUN, "GPU: prompt pieces shorter than this go token by token (1 = always batched)" },
    { "streams", CONFIG_INT, "bench plan", "sequences decoded together (serve: parallel)" },
    { "decode-pos", CONFIG_INT, "plan", "mean context position while decoding (KV read per step)" },
    { "prompt", CONFIG_INT, "plan", "prompt tokens priced for prefill" },
    /* placement */
    { "gpu-mem", CONFIG_LIST, RUNP, "VRAM budget per GPU in GiB, the whole process: 24 or [32, 32]; 0 = CPU only" },
    { "gpu-reserve", CONFIG_NUMBER, RUNP, "GiB of each gpu-mem kept for the CUDA context and cuBLAS (1)" },
    { "gpus", CONFIG_LIST, RUN, "CUDA devices to use: [0, 1]" },
    { "gpu-split", CONFIG_LIST, RUNP, "layer split weights per GPU (GiB), e.g. [31.8, 31]" },
    { "ram", CONFIG_NUMBER, RUNP, "host RAM the plan may use, GiB" },
    { "cold", CONFIG_STRING, RUNP, "cold experts: auto | stream | cpu" },
    { "static-experts", CONFIG_INT, RUNP, "static (pinned) GPU experts per MoE layer" },
    { "cache-slots", CONFIG_INT, RUNP, "GPU cache (LFU or exchange) slots per MoE layer" },
    { "cpu-experts", CONFIG_LIST, RUNP, "experts per MoE layer on the CPU, per GPU: 100 or [96, 102]" },
    { "staging", CONFIG_INT, RUNP, "experts per prefill staging buffer (two buffers); 0 = none" },
    { "workspace-mib", CONFIG_NUMBER, RUNP, "GPU workspace estimate override, MiB" },
    { "routing", CONFIG_STRING, RUNP, "routing trace (.hmrt or Mixtral JSONL): expert popularity" },
    { "calibration", CONFIG_STRING, RUNP, "link rates from `hotmoe calibrate`" },
    { "pcie-gbs", CONFIG_NUMBER, RUNP, "host->GPU GB/s (overrides calibration)" },
    { "dram-gbs", CONFIG_NUMBER, RUNP, "host DRAM read GB/s (overrides calibration)" },
    { "hbm-gbs", CONFIG_NUMBER, RUNP, "GPU memory copy GB/s (overrides calibration)" },
    { "lfu-decay", CONFIG_NUMBER, RUN, "LFU score decay per token (0.995)" },
    { "record-routing", CONFIG_STRING, RUN, "write every token's expert choices to this .hmrt file" },
    /* CPU workers and the exchange */
    { "cpu-threads", CONFIG_INT, RUN, "CPU expert worker threads" },
    { "cpu-handoff", CONFIG_STRING, RUN, "flags | hostfn: how a layer's CPU job is handed over" },
    { "swap-interval", CONFIG_INT, RUN, "decode tokens between exchange rounds (64)" },
    { "swap-max", CONFIG_INT, RUN, "swaps per exchange round (64)" },
    { "swap-floor", CONFIG_NUMBER, RUN, "minimum decayed count of an incoming expert (4)" },
    { "swap-hyst", CONFIG_NUMBER, RUN, "incoming count must exceed hyst x outgoing (2.0)" },
    { "swap-scope", CONFIG_STRING, RUN, "global | layer" },
    { "swap-stats", CONFIG_STRING, RUN, "routing counts for the start placement (.hmrt)" },
    { "no-swap", CONFIG_BOOL, RUN, "turn the exchange off" },
    { "overlap-misses", CONFIG_BOOL, RUN, "copy missed experts beside the hits' GEMVs" },
    { "prefetch", CONFIG_BOOL, RUN, "copy the next MoE layer's predicted experts ahead" },
    /* HTTP server */
    { "host", CONFIG_STRING, "serve", "listen address (127.0.0.1)" },
    { "port", CONFIG_INT, "serve", "listen port (8080)" },
    { "api-key", CONFIG_STRING, "serve", "required bearer / x-api-key" },
    { "parallel", CONFIG_INT, "serve", "sequences decoded together" },
    { "queue", CONFIG_INT, "serve", "waiting requests before 503" },
    { "body-limit", CONFIG_INT, "serve", "request body limit, bytes" },
    { "timeout", CONFIG_INT, "serve", "per-request time limit, seconds" },
    { "keepalive", CONFIG_INT, "serve", "SSE keepalive, seconds" },
    { "alias", CONFIG_STRING, "serve", "model name reported by /v1/models" },
    { "chat-template", CONFIG_STRING, "serve", "chatml | qwen3 | glm-4.5 | deepseek-v3" },
    { "any-model", CONFIG_BOOL, "serve", "accept any model name in requests" },
    /* sampling defaults of generate */
    { "n-predict", CONFIG_INT, "generate", "tokens to generate (-n)" },
    { "temp", CONFIG_NUMBER, "generate", "sampling temperature" },
    { "seed", CONFIG_INT, "generate", "sampler seed" },
    { "top-k", CONFIG_INT, "generate", "top-k" },
    { "top-p", CONFIG_NUMBER, "generate", "top-p" },
    { "min-p", CONFIG_NUMBER, "generate", "min-p" },
    { "repeat-penalty", CONFIG_NUMBER, "generate", "repetition penalty" },
    { "presence-penalty", CONFIG_NUMBER, "generate", "presence penalty" },
    { "frequency-penalty", CONFIG_NUMBER, "generate", "frequency penalty" },
    { "repeat-last-n", CONFIG_INT, "generate", "penalty window" },
    { "ignore-eos", CONFIG_BOOL, "generate", "keep generating after EOS" },
    { NULL, 0, NULL, NULL }
};

static const char *const kind_names[] = { "a string", "an integer", "a number", "true or false",
                                          "a number, a string or an array of them" };

const config_key *config_key_find(const char *name) {
    for (const config_key *k = config_keys; k->name; k++) {
        const char *a = k->name, *b = name;
        while (*a && *b && (*a == *b || (*a == '-' && *b == '_'))) { a++; b++; }
        if (!*a && !*b) return k;
    }
    return NULL;
}

static int takes(const config_key *k, const char *cmd) {
    size_t n = strlen(cmd);
    for (const char *p = k->cmds; (p = strstr(p, cmd)); p += n)
        if ((p == k->cmds || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return 1;
    return 0;
}

/* A JSON number as a flag argument: integers without a fraction, others with %.17g. */
static void fmt_number(char *buf, size_t cap, double v) {
    if (fabs(v) < 9e15 && v == floor(v)) snprintf(buf, cap, "%.0f", v);
    else snprintf(buf, cap, "%.17g", v);
}

static int value_of(const cJSON *x, const config_key *k, const char *name, char **out, hm_error *e) {
    char buf[64];
    const char *want = kind_names[k->kind];
    if (cJSON_IsBool(x)) {
        if (k->kind != CONFIG_BOOL) goto bad;
        *out = hm_strdup(cJSON_IsTrue(x) ? "1" : "0");
        return 0;
    }
    if (k->kind == CONFIG_BOOL) goto bad;
    if (cJSON_IsNumber(x)) {
        if (k->kind == CONFIG_STRING) goto bad;
        if (k->kind == CONFIG_INT && x->valuedouble != floor(x->valuedouble)) goto bad;
        fmt_number(buf, sizeof buf, x->valuedouble);
        *out = hm_strdup(buf);
        return 0;
    }
    if (cJSON_IsString(x)) { *out = hm_strdup(x->valuestring); return 0; }
    if (cJSON_IsArray(x) && k->kind == CONFIG_LIST) {
        size_t cap = 16, len = 0;
        char *s = hm_malloc(cap);
        s[0] = 0;
        for (const cJSON *c = x->child; c; c = c->next) {
            const char *piece;
            if (cJSON_IsNumber(c)) { fmt_number(buf, sizeof buf, c->valuedouble); piece = buf; }
            else if (cJSON_IsString(c)) piece = c->valuestring;
            else { free(s); goto bad; }
            size_t pl = strlen(piece);
            if (len + pl + 2 > cap) { while (len + pl + 2 > cap) cap *= 2; s = realloc(s, cap); if (!s) abort(); }
            if (len) s[len++] = ',';
            memcpy(s + len, piece, pl + 1);
            len += pl;
        }
        if (!len) { free(s); return hm_fail(e, "%s: key '%s': expected %s, found an empty array", name, k->name, want); }
        *out = s;
        return 0;
    }
bad:;
    const char *found = cJSON_IsNull(x) ? "null" : cJSON_IsObject(x) ? "an object" : cJSON_IsArray(x) ? "an array"
                        : cJSON_IsBool(x) ? "a boolean" : cJSON_IsNumber(x) ? "a number" : "a string";
    return hm_fail(e, "%s: key '%s': expected %s, found %s", name, k->name, want, found);
}

int config_parse(config_set *c, const char *json, const char *name, hm_error *e) {
    memset(c, 0, sizeof *c);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        size_t off = end ? (size_t)(end - json) : 0;
        if (!end || !*end)
            return hm_fail(e, "%s: malformed JSON at byte %zu: expected a JSON object of flag names, found the end of "
                           "the text", name, off);
        return hm_fail(e, "%s: malformed JSON at byte %zu: expected a JSON object of flag names, found '%.20s'", name,
                       off, end);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return hm_fail(e, "%s: expected a JSON object of flag names at the top, found another JSON value", name);
    }
    int n = cJSON_GetArraySize(root);
    c->kv = hm_calloc((size_t)(n ? n : 1), sizeof *c->kv);
    for (const cJSON *x = root->child; x; x = x->next) {
        if (x->string[0] == '_') continue;
        const config_key *k = config_key_find(x->string);
        if (!k) {
            hm_fail(e, "%s: unknown key '%s' (the keys are the long names of hotmoe's flags; see configs/README.md)",
                    name, x->string);
            goto fail;
        }
        for (int i = 0; i < c->n; i++)
            if (c->kv[i].key == k) { hm_fail(e, "%s: key '%s' given twice", name, x->string); goto fail; }
        if (value_of(x, k, name, &c->kv[c->n].value, e)) goto fail;
        c->kv[c->n].flag = hm_malloc(strlen(k->name) + 3);
        sprintf(c->kv[c->n].flag, "--%s", k->name);
        c->kv[c->n++].key = k;
    }
    cJSON_Delete(root);
    c->path = hm_strdup(name);
    return 0;
fail:
    cJSON_Delete(root);
    config_free(c);
    return -1;
}

int config_load(config_set *c, const char *path, hm_error *e) {
    memset(c, 0, sizeof *c);
    size_t len;
    char *text = hm_read_file(path, &len, e);
    if (!text) return -1;
    if (strlen(text) != len) { free(text); return hm_fail(e, "%s: expected JSON text, found a NUL byte", path); }
    int rc = config_parse(c, text, path, e);
    free(text);
    return rc;
}

void config_free(config_set *c) {
    for (int i = 0; i < c->n; i++) { free(c->kv[i].value); free(c->kv[i].flag); }
    free(c->kv); free(c->path);
    memset(c, 0, sizeof *c);
}

int config_argv(const config_set *c, const char *cmd, int argc, char **argv, char ***out_argv) {
    char **v = hm_malloc(sizeof *v * (size_t)(2 * c->n + argc + 1));
    int n = 0;
    for (int i = 0; i < c->n; i++) {
        const config_kv *kv = &c->kv[i];
        if (!takes(kv->key, cmd)) continue;
        if (kv->key->kind == CONFIG_BOOL) {
            if (strcmp(kv->value, "1")) continue;
        }
        v[n++] = kv->flag;
        if (kv->key->kind != CONFIG_BOOL) v[n++] = kv->value;
    }
    for (int i = 0; i < argc; i++) v[n++] = argv[i];
    v[n] = NULL;
    *out_argv = v;
    return n;
}

int config_apply(config_set *c, const char *cmd, int argc, char **argv, char ***out_argv, hm_error *e) {
    memset(c, 0, sizeof *c);
    const char *path = NULL;
    int at = -1;
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) return hm_fail(e, "--config: expected a file after it");
            path = argv[i + 1]; at = i;
        }
    if (path && config_load(c, path, e)) return -1;
    char **rest = hm_malloc(sizeof *rest * (size_t)(argc + 1));
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (i == at || (at >= 0 && i == at + 1)) continue;
        if (!strcmp(argv[i], "--config")) { i++; continue; }
        rest[n++] = argv[i];
    }
    int m = config_argv(c, cmd, n, rest, out_argv);
    free(rest);
    return m;
}
