/* http.c - the civetweb front: one route table, API-key check, bounded body read and JSON parse,
 * response and SSE helpers, /health. Every request body is hostile: size-limited, parsed by
 * cJSON, and every failure answers in the API's own error format. */
#define _GNU_SOURCE
#include "server.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- responses */

static void count_status(http_req *h, int status) {
    int k = status / 100;
    if (k < 1 || k > 5) k = 0;
    pthread_mutex_lock(&h->s->mu);
    h->s->http_by_status[k]++;
    pthread_mutex_unlock(&h->s->mu);
}

static const char *status_text(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
    }
}

void http_send_text(http_req *h, int status, const char *ctype, const char *text, size_t n) {
    if (h->responded) return;
    h->responded = 1;
    count_status(h, status);
    mg_printf(h->c,
              "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-cache\r\n%s\r\n",
              status, status_text(status), ctype, n, status == 503 ? "Retry-After: 1\r\n" : "");
    if (n) mg_write(h->c, text, n);
}

void http_send_json(http_req *h, int status, cJSON *obj) {
    char *s = cJSON_PrintUnformatted(obj);
    http_send_text(h, status, "application/json", s ? s : "{}", s ? strlen(s) : 2);
    free(s);
    cJSON_Delete(obj);
}

void http_error(http_req *h, int status, const char *type, const char *fmt, ...) {
    char msg[1024];
    va_list ap; va_start(ap, fmt); vsnprintf(msg, sizeof msg, fmt, ap); va_end(ap);
    cJSON *o = cJSON_CreateObject();
    if (h->api == API_ANTHROPIC) {
        /* Anthropic: {"type":"error","error":{"type":...,"message":...}} */
        const char *t = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                      : status == 413 ? "request_too_large" : status == 503 ? "overloaded_error"
                      : status >= 500 ? "api_error" : "invalid_request_error";
        cJSON_AddStringToObject(o, "type", "error");
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "type", t);
        cJSON_AddStringToObject(e, "message", msg);
    } else {
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "message", msg);
        cJSON_AddStringToObject(e, "type", type);
        cJSON_AddNullToObject(e, "param");
        cJSON_AddNumberToObject(e, "code", status);
    }
    if (h->responded == 2) { /* mid-stream: an error event, then the stream ends */
        http_sse_event(h, h->api == API_ANTHROPIC ? "error" : NULL, o);
        return;
    }
    http_send_json(h, status, o);
}

int http_sse_begin(http_req *h) {
    if (h->responded) return -1;
    h->responded = 2;
    count_status(h, 200);
    int n = mg_printf(h->c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                            "Connection: close\r\nX-Accel-Buffering: no\r\n\r\n");
    return n > 0 ? 0 : -1;
}

int http_sse_raw(http_req *h, const char *text) {
    size_t n = strlen(text);
    return mg_write(h->c, text, n) == (int)n ? 0 : -1;
}

int http_sse_event(http_req *h, const char *event, cJSON *data) {
    char *s = cJSON_PrintUnformatted(data);
    cJSON_Delete(data);
    if (!s) return -1;
    size_t n = strlen(s) + (event ? strlen(event) : 0) + 32;
    char *buf = hm_malloc(n);
    int k = event ? snprintf(buf, n, "event: %s\ndata: %s\n\n", event, s) : snprintf(buf, n, "data: %s\n\n", s);
    int rc = mg_write(h->c, buf, (size_t)k) == k ? 0 : -1;
    free(buf); free(s);
    return rc;
}

/* ---------------------------------------------------------------- small endpoints */

static void api_health(http_req *h) {
    cJSON *o = cJSON_CreateObject();
    if (!server_ready(h->s)) { cJSON_AddStringToObject(o, "status", "loading"); http_send_json(h, 503, o); return; }
    cJSON_AddStringToObject(o, "status", server_stopping(h->s) ? "stopping" : "ok");
    http_send_json(h, server_stopping(h->s) ? 503 : 200, o);
}

/* ---------------------------------------------------------------- routing */

typedef struct {
    const char *method, *path;
    void (*fn)(http_req *h);
    int api;          /* error format */
    int auth;         /* needs the API key (when one is set) */
    int needs_model;  /* answers 503 until the model is loaded */
    int json_body;    /* POST with a JSON object body */
} route;

static const route routes[] = {
    { "GET", "/health", api_health, API_OPENAI, 0, 0, 0 },
    { "GET", "/metrics", api_metrics, API_OPENAI, 1, 0, 0 },
    { "GET", "/v1/models", api_openai_models, API_OPENAI, 1, 0, 0 },
    { "POST", "/v1/chat/completions", api_openai_chat, API_OPENAI, 1, 1, 1 },
    { "POST", "/v1/completions", api_openai_completions, API_OPENAI, 1, 1, 1 },
    { "POST", "/v1/responses", api_responses, API_OPENAI, 1, 1, 1 },
    { "POST", "/v1/messages", api_anthropic_messages, API_ANTHROPIC, 1, 1, 1 },
    { "POST", "/v1/messages/count_tokens", api_anthropic_count_tokens, API_ANTHROPIC, 1, 1, 1 },
    { "POST", "/tokenize", api_tokenize, API_OPENAI, 1, 1, 1 },
    { "POST", "/detokenize", api_detokenize, API_OPENAI, 1, 1, 1 },
};

/* Constant-time comparison: the time does not depend on where the strings differ. */
static int key_equal(const char *given, const char *want) {
    size_t ng = strlen(given), nw = strlen(want);
    unsigned d = (unsigned)(ng ^ nw);
    for (size_t i = 0; i < nw; i++) d |= (unsigned char)(i < ng ? given[i] : 0) ^ (unsigned char)want[i];
    return d == 0;
}

static int auth_ok(http_req *h) {
    const char *want = h->s->api_key;
    if (!want || !*want) return 1;
    const char *x = mg_get_header(h->c, "x-api-key");
    if (x && key_equal(x, want)) return 1;
    const char *a = mg_get_header(h->c, "Authorization");
    if (a && !strncasecmp(a, "Bearer ", 7)) {
        a += 7;
        while (*a == ' ') a++;
        if (key_equal(a, want)) return 1;
    }
    return 0;
}

/* Reads the body, at most body_limit bytes. Returns a malloc'd NUL-terminated buffer, or NULL
 * after sending the error. */
static char *read_body(http_req *h, size_t *len) {
    size_t limit = h->s->body_limit;
    long long cl = h->ri->content_length;
    if (cl > (long long)limit) {
        http_error(h, 413, "invalid_request_error", "request body is %lld bytes; the limit is %zu bytes (--body-limit)", cl, limit);
        return NULL;
    }
    size_t cap = cl > 0 ? (size_t)cl + 1 : 4096, n = 0;
    char *buf = hm_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > limit) { free(buf); http_error(h, 413, "invalid_request_error", "request body exceeds the limit of %zu bytes (--body-limit)", limit); return NULL; }
            cap *= 2;
            char *t = realloc(buf, cap);
            if (!t) abort();
            buf = t;
        }
        int k = mg_read(h->c, buf + n, cap - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
        if (cl >= 0 && n >= (size_t)cl) break;
    }
    if (n > limit) { free(buf); http_error(h, 413, "invalid_request_error", "request body exceeds the limit of %zu bytes (--body-limit)", limit); return NULL; }
    buf[n] = 0; *len = n;
    return buf;
}

static int dispatch(struct mg_connection *c, void *cbdata) {
    server *s = cbdata;
    http_req h = { .s = s, .c = c, .ri = mg_get_request_info(c), .api = API_OPENAI };
    const char *path = h.ri->local_uri ? h.ri->local_uri : "/";
    const route *r = NULL;
    int path_known = 0;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(routes[i].path, path)) {
            path_known = 1; h.api = routes[i].api;
            if (!strcmp(routes[i].method, h.ri->request_method)) { r = &routes[i]; break; }
        }
    if (!r && !strncmp(path, "/v1/messages", 12)) h.api = API_ANTHROPIC;
    if (!r) {
        if (path_known) http_error(&h, 405, "invalid_request_error", "method %s is not allowed on %s", h.ri->request_method, path);
        else http_error(&h, 404, "not_found_error", "no route %s %s; expected one of /v1/chat/completions, /v1/completions, "
                        "/v1/models, /v1/responses, /v1/messages, /v1/messages/count_tokens, /tokenize, /detokenize, /health, /metrics",
                        h.ri->request_method, path);
        return 1;
    }
    if (r->auth && !auth_ok(&h)) {
        http_error(&h, 401, "authentication_error", "invalid or missing API key: expected 'Authorization: Bearer KEY' or 'x-api-key: KEY'");
        return 1;
    }
    if (r->needs_model && (!server_ready(s) || server_stopping(s))) {
        http_error(&h, 503, "server_error", server_stopping(s) ? "the server is shutting down" : "the model is still loading; retry shortly");
        return 1;
    }
    if (r->json_body) {
        size_t n = 0;
        char *body = read_body(&h, &n);
        if (!body) return 1;
        const char *err = NULL;
        size_t where = 0;
        const int why = hm_json_scan(body, n, HM_JSON_MAX_DEPTH, &where);
        if (why != HM_JSON_OK) {   /* cJSON would recurse past the thread's stack, or cut a string at a NUL */
            if (why == HM_JSON_DEEP)
                http_error(&h, 400, "invalid_request_error", "request body nests arrays and objects more than %d deep (at byte %zu of %zu)",
                           HM_JSON_MAX_DEPTH, where, n);
            else
                http_error(&h, 400, "invalid_request_error", "request body holds a NUL character (%s at byte %zu of %zu); expected text "
                           "without U+0000: a string would be cut there", body[where] ? "the escape \\u0000" : "a zero byte", where, n);
            free(body);
            return 1;
        }
        h.body = cJSON_ParseWithLengthOpts(body, n, &err, 0);
        if (!h.body) {
            size_t at = err && err >= body && err <= body + n ? (size_t)(err - body) : 0;
            http_error(&h, 400, "invalid_request_error", "request body is not valid JSON (error near byte %zu of %zu)%s", at, n,
                       n ? "" : ": the body is empty");
            free(body);
            return 1;
        }
        free(body);
        if (!cJSON_IsObject(h.body)) {
            http_error(&h, 400, "invalid_request_error", "request body: expected a JSON object, found %s",
                       cJSON_IsArray(h.body) ? "an array" : cJSON_IsString(h.body) ? "a string" : "a scalar");
            cJSON_Delete(h.body);
            return 1;
        }
    }
    r->fn(&h);
    if (!h.responded) http_error(&h, 500, "server_error", "internal error: the handler sent no response");
    cJSON_Delete(h.body);
    return 1;
}

/* ---------------------------------------------------------------- lifecycle */

int server_start(server *s, hm_error *e) {
    char ports[300], threads[16];
    if (strchr(s->host, ':')) snprintf(ports, sizeof ports, "[%s]:%d", s->host, s->port);
    else snprintf(ports, sizeof ports, "%s:%d", s->host, s->port);
    int n_threads = 64;
    snprintf(threads, sizeof threads, "%d", n_threads);
    const char *opts[] = {
        "listening_ports", ports,
        "num_threads", threads,
        "request_timeout_ms", "120000",
        "enable_keep_alive", "yes",
        "keep_alive_timeout_ms", "2000",
        "tcp_nodelay", "1",
        NULL
    };
    struct mg_callbacks cb;
    memset(&cb, 0, sizeof cb);
    pthread_mutex_init(&s->mu, NULL);
    s->started = hm_now();
    mg_init_library(0);
    char why[256] = "";
    unsigned code = 0;
    struct mg_init_data init = { &cb, s, opts };
    struct mg_error_data ed = { &code, why, sizeof why };
    s->ctx = mg_start2(&init, &ed);
    if (!s->ctx) return hm_fail(e, "serve: cannot listen on %s: %s", ports, why[0] ? why : "port in use or bad --host?");
    mg_set_request_handler(s->ctx, "/", dispatch, s);
    return 0;
}

void server_stop(server *s) {
    if (s->ctx) mg_stop(s->ctx);
    s->ctx = NULL;
    mg_exit_library();
    pthread_mutex_destroy(&s->mu);
}
