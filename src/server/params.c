/* params.c - readers for request fields that check type and range and answer 400 naming the
 * field, what was expected and what was found; the sampling fields shared by all APIs; the
 * small endpoints /v1/models, /tokenize and /detokenize. */
#define _GNU_SOURCE
#include "server.h"
#include "tokenizer.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *json_kind(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an unknown value";
}

int req_get_bool(http_req *h, const cJSON *o, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) { http_error(h, 400, "invalid_request_error", "'%s': expected a boolean, found %s", key, json_kind(v)); return -1; }
    *out = cJSON_IsTrue(v);
    return 1;
}

int req_get_num(http_req *h, const cJSON *o, const char *key, double lo, double hi, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) { http_error(h, 400, "invalid_request_error", "'%s': expected a number, found %s", key, json_kind(v)); return -1; }
    double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi) {
        http_error(h, 400, "invalid_request_error", "'%s': expected a number in [%g, %g], found %g", key, lo, hi, x);
        return -1;
    }
    *out = x;
    return 1;
}

int req_get_int(http_req *h, const cJSON *o, const char *key, long lo, long hi, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!cJSON_IsNumber(v) || x != floor(x) || x < (double)lo || x > (double)hi) {
        if (cJSON_IsNumber(v)) http_error(h, 400, "invalid_request_error", "'%s': expected an integer in [%ld, %ld], found %g", key, lo, hi, x);
        else http_error(h, 400, "invalid_request_error", "'%s': expected an integer, found %s", key, json_kind(v));
        return -1;
    }
    *out = (long)x;
    return 1;
}

int req_get_str(http_req *h, const cJSON *o, const char *key, const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) { http_error(h, 400, "invalid_request_error", "'%s': expected a string, found %s", key, json_kind(v)); return -1; }
    *out = v->valuestring;
    return 1;
}

int req_sampling(http_req *h, const cJSON *o, engine_req *r, const char *stop_key) {
    sampler_params *p = &r->sp;
    double x; long k;
    int rc;
    p->temperature = 1.0f; /* the OpenAI and Anthropic default */
    p->penalty_last_n = 64;
    if ((rc = req_get_num(h, o, "temperature", 0, 100, &x)) < 0) return -1; else if (rc) p->temperature = (float)x;
    if ((rc = req_get_num(h, o, "top_p", 0, 1, &x)) < 0) return -1; else if (rc) p->top_p = x <= 0 ? 1e-6f : (float)x;
    if ((rc = req_get_int(h, o, "top_k", -1, 1 << 30, &k)) < 0) return -1; else if (rc) p->top_k = (int)k;
    if ((rc = req_get_num(h, o, "min_p", 0, 1, &x)) < 0) return -1; else if (rc) p->min_p = (float)x;
    if ((rc = req_get_num(h, o, "presence_penalty", -2, 2, &x)) < 0) return -1; else if (rc) p->presence_penalty = (float)x;
    if ((rc = req_get_num(h, o, "frequency_penalty", -2, 2, &x)) < 0) return -1; else if (rc) p->frequency_penalty = (float)x;
    if ((rc = req_get_num(h, o, "repetition_penalty", 0.01, 100, &x)) < 0) return -1; else if (rc) p->repetition_penalty = (float)x;
    if ((rc = req_get_int(h, o, "seed", -(1L << 53), 1L << 53, &k)) < 0) return -1;
    else if (rc) p->seed = (uint64_t)k * 0x9e3779b97f4a7c15ull + 1;
    else {
        struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
        p->seed = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)r;
        if (!p->seed) p->seed = 1;
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, stop_key);
    if (st && !cJSON_IsNull(st)) {
        if (cJSON_IsString(st)) {
            if (*st->valuestring) r->stop[r->n_stop++] = hm_strdup(st->valuestring);
        } else if (cJSON_IsArray(st)) {
            int n = cJSON_GetArraySize(st);
            if (n > ENGINE_MAX_STOP) {
                http_error(h, 400, "invalid_request_error", "'%s': expected at most %d strings, found %d", stop_key, ENGINE_MAX_STOP, n);
                return -1;
            }
            for (const cJSON *e = st->child; e; e = e->next) {
                if (!cJSON_IsString(e)) {
                    http_error(h, 400, "invalid_request_error", "'%s': expected an array of strings, found an element that is %s", stop_key, json_kind(e));
                    return -1;
                }
                if (strlen(e->valuestring) > 1024) {
                    http_error(h, 400, "invalid_request_error", "'%s': each stop string must be at most 1024 bytes", stop_key);
                    return -1;
                }
                if (*e->valuestring) r->stop[r->n_stop++] = hm_strdup(e->valuestring);
            }
        } else {
            http_error(h, 400, "invalid_request_error", "'%s': expected a string or an array of strings, found %s", stop_key, json_kind(st));
            return -1;
        }
    }
    return 0;
}

int req_check_model(http_req *h, const cJSON *o) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) { http_error(h, 400, "invalid_request_error", "'model': expected a string, found %s", json_kind(v)); return -1; }
    if (h->s->any_model || !strcmp(v->valuestring, h->s->model_id)) return 0;
    http_error(h, 404, "model_not_found", "model '%.200s' is not served here; expected '%s' (see GET /v1/models)", v->valuestring, h->s->model_id);
    return -1;
}

int req_tokenize(http_req *h, const char *text, int32_t **ids, size_t *n) {
    hm_error e;
    if (tokenizer_encode(h->s->m->tok, text, strlen(text), ids, n, &e)) {
        http_error(h, 400, "invalid_request_error", "cannot tokenize the prompt: %s", e.msg);
        return -1;
    }
    return 0;
}

int req_fit_context(http_req *h, engine_req *r, long max_tokens, const char *max_key) {
    long n_ctx = engine_n_ctx(h->s->en);
    if (!r->n_prompt) { http_error(h, 400, "invalid_request_error", "the prompt is empty: expected at least one token"); return -1; }
    if (max_tokens < 0) {
        max_tokens = n_ctx - (long)r->n_prompt;
        if (max_tokens < 1) {
            http_error(h, 400, "invalid_request_error", "the prompt is %zu tokens; the context is %ld tokens, leaving no room to generate",
                       r->n_prompt, n_ctx);
            return -1;
        }
    }
    if ((long)r->n_prompt + max_tokens > n_ctx) {
        http_error(h, 400, "invalid_request_error", "prompt (%zu tokens) + %s (%ld) = %ld tokens exceeds the context of %ld tokens",
                   r->n_prompt, max_key, max_tokens, (long)r->n_prompt + max_tokens, n_ctx);
        return -1;
    }
    r->max_tokens = (int)max_tokens;
    r->time_limit_s = h->s->time_limit_s;
    return 0;
}

void req_make_id(char *buf, size_t cap, const char *prefix) {
    static const char hex[] = "0123456789abcdef";
    struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
    static uint64_t ctr;
    uint64_t x = ((uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)ts.tv_sec << 32) ^ __atomic_add_fetch(&ctr, 0x632be59bd9b4e019ull, __ATOMIC_RELAXED);
    size_t n = (size_t)snprintf(buf, cap, "%s", prefix);
    for (int i = 0; i < 24 && n + 1 < cap; i++) {
        x ^= x >> 29; x *= 0xbf58476d1ce4e5b9ull; x ^= x >> 32;
        buf[n++] = hex[x & 15];
    }
    buf[n] = 0;
}

/* ---------------------------------------------------------------- small endpoints */

void api_openai_models(http_req *h) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", h->s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)(long)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "hotmoe");
    if (server_ready(h->s) && h->s->en) {
        cJSON_AddNumberToObject(m, "context_length", engine_n_ctx(h->s->en));
        cJSON_AddStringToObject(m, "chat_template", chat_family_name(h->s->family));
    }
    cJSON_AddItemToArray(d, m);
    http_send_json(h, 200, o);
}

void api_tokenize(http_req *h) {
    const char *text = NULL;
    int rc = req_get_str(h, h->body, "content", &text);
    if (rc < 0) return;
    if (!rc) { http_error(h, 400, "invalid_request_error", "'content': expected a string to tokenize, found nothing"); return; }
    int32_t *ids; size_t n;
    if (req_tokenize(h, text, &ids, &n)) return;
    cJSON *o = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    free(ids);
    http_send_json(h, 200, o);
}

void api_detokenize(http_req *h) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(h->body, "tokens");
    if (!cJSON_IsArray(t)) { http_error(h, 400, "invalid_request_error", "'tokens': expected an array of token ids, found %s", t ? json_kind(t) : "nothing"); return; }
    int n = cJSON_GetArraySize(t), nv = tokenizer_n_vocab(h->s->m->tok), i = 0;
    int32_t *ids = hm_malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    for (const cJSON *e = t->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 || e->valuedouble >= nv) {
            http_error(h, 400, "invalid_request_error", "'tokens'[%d]: expected an integer id in [0, %d), found %s", i, nv,
                       cJSON_IsNumber(e) ? "an out-of-range number" : json_kind(e));
            free(ids);
            return;
        }
        ids[i] = (int32_t)e->valuedouble;
    }
    size_t len;
    char *s = tokenizer_decode(h->s->m->tok, ids, (size_t)n, &len);
    free(ids);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", s ? s : "");
    free(s);
    http_send_json(h, 200, o);
}
