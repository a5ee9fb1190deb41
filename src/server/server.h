/* server.h - what the HTTP server's files share: the server state, the per-request context,
 * JSON/SSE response helpers, request-field readers that name what was wrong, and the
 * generation driver that turns engine output into content/reasoning/tool-call events. */
#ifndef HM_SERVER_H
#define HM_SERVER_H
#include <civetweb.h>
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdint.h>
#include "chat.h"
#include "engine.h"
#include "loader.h"

enum api_kind { API_OPENAI = 0, API_ANTHROPIC };

typedef struct server {
    /* configuration */
    const char *host; int port;
    const char *api_key;            /* NULL: no key */
    size_t body_limit;              /* bytes */
    double time_limit_s;            /* per request, 0: none */
    int keepalive_s;                /* SSE comment/ping interval */
    const char *model_id;           /* name reported and accepted in "model" */
    int any_model;                  /* accept any "model" value */
    /* state */
    hm_model *m;
    engine *en;
    int family;                     /* enum chat_family */
    int ready, stopping;            /* set by the main thread: read through server_ready / server_stopping */
    struct mg_context *ctx;
    pthread_mutex_t mu;
    uint64_t http_by_status[6];     /* 1xx..5xx, by first digit */
    uint64_t served_by_api[8];
    double started;
} server;

/* ready and stopping are written by the main thread while handler threads run. Read them with
 * acquire loads: the main thread sets up s->m, s->en and s->family before its release store of
 * ready, and the acquire makes those writes visible to the handler (plain reads of the flag are
 * a data race, and ThreadSanitizer reports every later use of the model as one). */
static inline int server_ready(const server *s) { return __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE); }
static inline int server_stopping(const server *s) { return __atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE); }

/* One HTTP request being handled. */
typedef struct {
    server *s;
    struct mg_connection *c;
    const struct mg_request_info *ri;
    int api;                        /* error format: enum api_kind */
    cJSON *body;                    /* parsed JSON body (POST), owned */
    int responded;
} http_req;

/* ---- responses (http.c) ---- */
/* Sends obj as JSON with status; frees obj. */
void http_send_json(http_req *h, int status, cJSON *obj);
void http_send_text(http_req *h, int status, const char *ctype, const char *text, size_t n);
/* Sends an error in the request's API format; type e.g. "invalid_request_error". */
void http_error(http_req *h, int status, const char *type, const char *fmt, ...) HM_PRINTF(4, 5);
/* SSE: headers once, then events. Each returns 0, or -1 when the client is gone. */
int http_sse_begin(http_req *h);
int http_sse_event(http_req *h, const char *event, cJSON *data); /* frees data; event NULL: data only */
int http_sse_raw(http_req *h, const char *text);

/* ---- request fields (params.c) ---- */
/* Each returns 0 when absent, 1 when present and valid, -1 after sending a 400 naming the field. */
int req_get_bool(http_req *h, const cJSON *o, const char *key, int *out);
int req_get_num(http_req *h, const cJSON *o, const char *key, double lo, double hi, double *out);
int req_get_int(http_req *h, const cJSON *o, const char *key, long lo, long hi, long *out);
int req_get_str(http_req *h, const cJSON *o, const char *key, const char **out);
/* Sampling fields common to the APIs (temperature, top_p, top_k, min_p, seed, penalties,
 * repetition_penalty) and stop (string or array; key names the field). -1: error sent. */
int req_sampling(http_req *h, const cJSON *o, engine_req *r, const char *stop_key);
/* "model": absent or ours; otherwise 404 in the API's format. -1: error sent. */
int req_check_model(http_req *h, const cJSON *o);
/* Tokenizes prompt text. -1: error sent. */
int req_tokenize(http_req *h, const char *text, int32_t **ids, size_t *n);
/* Checks n_prompt + max_tokens against the context; max_tokens < 0: fill the rest. -1: error sent. */
int req_fit_context(http_req *h, engine_req *r, long max_tokens, const char *max_key);
/* Text of a message content: string, null (*out NULL) or an array of text parts. -1: error sent. */
int req_content_text(http_req *h, const cJSON *v, const char *where, char **out);
/* A random id with prefix, e.g. "chatcmpl-3f9a..."; buf >= 40 bytes. */
void req_make_id(char *buf, size_t cap, const char *prefix);

/* ---- generation (gen.c) ---- */
typedef struct {
    void *ud;
    /* content / reasoning text or a whole tool call (id filled in). Return -1 to stop (client gone). */
    int (*on_event)(void *ud, int ev, const char *text, size_t n, const chat_tool_call *call);
    int (*on_keepalive)(void *ud); /* may be NULL */
} gen_sink;

typedef struct {
    int n_prompt, n_gen;
    int finish;         /* enum engine_finish */
    int stop_hit;       /* stop string index or -1 */
    int n_calls;
    int client_gone;
} gen_result;

/* Submits r (which gen_run owns from here on), streams its events to sink through the chat
 * parser (parse != 0) or as plain content, releases r. Returns 0, or -1 after sending the
 * error (queue full: 503 + Retry-After). */
int gen_run(http_req *h, engine_req *r, int parse, int starts_in_reasoning, gen_sink *sink, gen_result *out);
/* Renders conv with the model's template family and tokenizes it into r->prompt. *opens_think
 * tells whether the reply starts inside <think>. -1: error sent. */
int gen_prompt_from_chat(http_req *h, const chat_conv *conv, engine_req *r, int *opens_think);

/* ---- endpoints ---- */
void api_openai_chat(http_req *h);
void api_openai_completions(http_req *h);
void api_openai_models(http_req *h);
void api_anthropic_messages(http_req *h);
void api_anthropic_count_tokens(http_req *h);
void api_responses(http_req *h);
void api_metrics(http_req *h);
void api_tokenize(http_req *h);
void api_detokenize(http_req *h);

/* ---- lifecycle (http.c) ---- */
int server_start(server *s, hm_error *e);
void server_stop(server *s);

#endif
