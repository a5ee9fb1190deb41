/* api_openai.c - OpenAI /v1/chat/completions and /v1/completions, streaming (SSE chunks,
 * stream_options.include_usage) and not, with reasoning split out (reasoning_content and
 * reasoning) and tool calls parsed into structured calls. */
#define _GNU_SOURCE
#include "server.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Text of a message content: a string, null, or an array of {type:text|input_text|output_text,
 * text}. Returns 0 (*out malloc'd, NULL for null), -1 after sending a 400 naming where. */
int req_content_text(http_req *h, const cJSON *v, const char *where, char **out) {
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) { *out = hm_strdup(v->valuestring); return 0; }
    if (!cJSON_IsArray(v)) {
        http_error(h, 400, "invalid_request_error", "%s: expected a string or an array of content parts", where);
        return -1;
    }
    size_t n = 0, cap = 64;
    char *s = hm_malloc(cap); s[0] = 0;
    int i = 0;
    for (const cJSON *p = v->child; p; p = p->next, i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
        const char *type = cJSON_IsString(t) ? t->valuestring : "";
        if (cJSON_IsString(p)) tx = p;
        else if (strcmp(type, "text") && strcmp(type, "input_text") && strcmp(type, "output_text")) {
            http_error(h, 400, "invalid_request_error", "%s[%d]: content part type '%.60s' is not supported; expected 'text'%s",
                       where, i, type, strstr(type, "image") ? " (this model takes no images)" : "");
            free(s);
            return -1;
        }
        if (!cJSON_IsString(tx)) {
            http_error(h, 400, "invalid_request_error", "%s[%d].text: expected a string", where, i);
            free(s);
            return -1;
        }
        size_t k = strlen(tx->valuestring);
        if (n + k + 1 > cap) { while (n + k + 1 > cap) cap *= 2; s = realloc(s, cap); if (!s) abort(); }
        memcpy(s + n, tx->valuestring, k + 1); n += k;
    }
    *out = s;
    return 0;
}

/* messages[] -> conversation. -1: error sent. */
static int parse_messages(http_req *h, const cJSON *msgs, chat_conv *conv) {
    if (!cJSON_IsArray(msgs)) { http_error(h, 400, "invalid_request_error", "'messages': expected an array of messages"); return -1; }
    int i = 0;
    char where[64];
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        if (!cJSON_IsObject(m)) { http_error(h, 400, "invalid_request_error", "'messages'[%d]: expected an object", i); return -1; }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role)) { http_error(h, 400, "invalid_request_error", "'messages'[%d].role: expected a string", i); return -1; }
        const char *r = role->valuestring;
        if (!strcmp(r, "developer")) r = "system";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")) {
            http_error(h, 400, "invalid_request_error", "'messages'[%d].role: expected system, developer, user, assistant or tool, found '%.40s'", i, r);
            return -1;
        }
        snprintf(where, sizeof where, "'messages'[%d].content", i);
        char *content;
        if (req_content_text(h, cJSON_GetObjectItemCaseSensitive(m, "content"), where, &content)) return -1;
        if (!content && strcmp(r, "assistant")) content = hm_strdup("");
        chat_msg *cm = chat_conv_add(conv, r, NULL);
        cm->content = content;
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (!cJSON_IsString(rc)) rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning");
        if (cJSON_IsString(rc)) cm->reasoning = hm_strdup(rc->valuestring);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        if (cJSON_IsString(id)) cm->tool_call_id = hm_strdup(id->valuestring);
        const cJSON *tcs = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (tcs && !cJSON_IsNull(tcs)) {
            if (!cJSON_IsArray(tcs)) { http_error(h, 400, "invalid_request_error", "'messages'[%d].tool_calls: expected an array", i); return -1; }
            int k = 0;
            for (const cJSON *tc = tcs->child; tc; tc = tc->next, k++) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
                const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
                const cJSON *tid = cJSON_GetObjectItemCaseSensitive(tc, "id");
                if (!cJSON_IsString(name)) {
                    http_error(h, 400, "invalid_request_error", "'messages'[%d].tool_calls[%d].function.name: expected a string", i, k);
                    return -1;
                }
                char *a = cJSON_IsString(args) ? hm_strdup(args->valuestring) : args ? cJSON_PrintUnformatted(args) : hm_strdup("{}");
                chat_msg_add_call(cm, cJSON_IsString(tid) ? tid->valuestring : "", name->valuestring, a);
                free(a);
            }
        }
    }
    return 0;
}

/* tools, tool_choice, chat_template_kwargs, reasoning_effort -> conversation options. */
static int parse_tools(http_req *h, const cJSON *b, chat_conv *conv) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(b, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(b, "tool_choice");
    if (tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools)) { http_error(h, 400, "invalid_request_error", "'tools': expected an array of tools"); return -1; }
        int i = 0;
        for (const cJSON *t = tools->child; t; t = t->next, i++) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name"))) {
                http_error(h, 400, "invalid_request_error", "'tools'[%d]: expected {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
                return -1;
            }
        }
        if (!(cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")) && cJSON_GetArraySize(tools))
            conv->tools = cJSON_Duplicate(tools, 1);
    }
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(b, "chat_template_kwargs");
    int et;
    if (cJSON_IsObject(kw)) { int rc = req_get_bool(h, kw, "enable_thinking", &et); if (rc < 0) return -1; if (rc) conv->enable_thinking = et; }
    const char *effort = NULL;
    if (req_get_str(h, b, "reasoning_effort", &effort) < 0) return -1;
    if (effort && (!strcmp(effort, "none") || !strcmp(effort, "minimal"))) conv->enable_thinking = 0;
    return 0;
}

/* ---------------------------------------------------------------- responses */

typedef struct {
    http_req *h;
    int stream, chat;
    char id[64];
    long created;
    /* non-streaming accumulators */
    char *content; size_t n_content;
    char *reasoning; size_t n_reasoning;
    cJSON *calls;
} oai_state;

static void append(char **s, size_t *n, const char *t, size_t k) {
    char *x = realloc(*s, *n + k + 1);
    if (!x) abort();
    memcpy(x + *n, t, k); *n += k; x[*n] = 0; *s = x;
}

static cJSON *chunk_new(oai_state *st) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", st->id);
    cJSON_AddStringToObject(o, "object", st->chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)st->created);
    cJSON_AddStringToObject(o, "model", st->h->s->model_id);
    cJSON_AddStringToObject(o, "system_fingerprint", "hotmoe");
    return o;
}

static cJSON *tool_call_json(const chat_tool_call *c, int index) {
    cJSON *t = cJSON_CreateObject();
    if (index >= 0) cJSON_AddNumberToObject(t, "index", index);
    cJSON_AddStringToObject(t, "id", c->id);
    cJSON_AddStringToObject(t, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(t, "function");
    cJSON_AddStringToObject(f, "name", c->name);
    cJSON_AddStringToObject(f, "arguments", c->arguments);
    return t;
}

static int oai_event(void *ud, int ev, const char *text, size_t n, const chat_tool_call *call) {
    oai_state *st = ud;
    if (!st->stream) {
        if (ev == CHAT_EV_CONTENT) append(&st->content, &st->n_content, text, n);
        else if (ev == CHAT_EV_REASONING) append(&st->reasoning, &st->n_reasoning, text, n);
        else cJSON_AddItemToArray(st->calls, tool_call_json(call, -1));
        return 0;
    }
    cJSON *o = chunk_new(st);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    char *t = text ? hm_strndup(text, n) : NULL;
    if (!st->chat) {
        cJSON_AddStringToObject(c, "text", t ? t : "");
        cJSON_AddNullToObject(c, "logprobs");
    } else {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (ev == CHAT_EV_CONTENT) cJSON_AddStringToObject(d, "content", t);
        else if (ev == CHAT_EV_REASONING) { cJSON_AddStringToObject(d, "reasoning_content", t); cJSON_AddStringToObject(d, "reasoning", t); }
        else {
            cJSON *a = cJSON_AddArrayToObject(d, "tool_calls");
            cJSON_AddItemToArray(a, tool_call_json(call, cJSON_GetArraySize(st->calls)));
            cJSON_AddItemToArray(st->calls, cJSON_CreateNull()); /* counts the calls streamed */
        }
    }
    cJSON_AddNullToObject(c, "finish_reason");
    free(t);
    return http_sse_event(st->h, NULL, o);
}

static int oai_keepalive(void *ud) { oai_state *st = ud; return http_sse_raw(st->h, ": keepalive\n\n"); }

static const char *finish_name(const gen_result *g) {
    if (g->n_calls && g->finish == ENGINE_FINISH_STOP) return "tool_calls";
    return g->finish == ENGINE_FINISH_STOP ? "stop" : "length";
}

static cJSON *usage_json(const gen_result *g) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", g->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", g->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", g->n_prompt + g->n_gen);
    return u;
}

/* Runs r and answers in the chat or completion format, streamed or not. */
static void oai_respond(http_req *h, engine_req *r, int chat, int stream, int include_usage, int opens_think) {
    oai_state st = { .h = h, .stream = stream, .chat = chat, .created = (long)time(NULL), .calls = cJSON_CreateArray() };
    req_make_id(st.id, sizeof st.id, chat ? "chatcmpl-" : "cmpl-");
    gen_sink sink = { &st, oai_event, stream ? oai_keepalive : NULL };
    if (stream) {
        if (http_sse_begin(h)) { engine_req_free(r); cJSON_Delete(st.calls); return; }
        if (chat) { /* first chunk: the role */
            cJSON *o = chunk_new(&st);
            cJSON *c = cJSON_CreateObject();
            cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
            cJSON_AddNumberToObject(c, "index", 0);
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            cJSON_AddStringToObject(d, "role", "assistant");
            cJSON_AddStringToObject(d, "content", "");
            cJSON_AddNullToObject(c, "finish_reason");
            if (http_sse_event(h, NULL, o)) { engine_req_free(r); cJSON_Delete(st.calls); return; }
        }
    }
    gen_result g;
    if (gen_run(h, r, chat, opens_think, &sink, &g) || g.client_gone) goto out;
    if (stream) {
        cJSON *o = chunk_new(&st);
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
        cJSON_AddNumberToObject(c, "index", 0);
        if (chat) cJSON_AddObjectToObject(c, "delta");
        else { cJSON_AddStringToObject(c, "text", ""); cJSON_AddNullToObject(c, "logprobs"); }
        cJSON_AddStringToObject(c, "finish_reason", finish_name(&g));
        if (http_sse_event(h, NULL, o)) goto out;
        if (include_usage) {
            o = chunk_new(&st);
            cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToObject(o, "usage", usage_json(&g));
            if (http_sse_event(h, NULL, o)) goto out;
        }
        http_sse_raw(h, "data: [DONE]\n\n");
        goto out;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", st.id);
    cJSON_AddStringToObject(o, "object", chat ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)st.created);
    cJSON_AddStringToObject(o, "model", h->s->model_id);
    cJSON_AddStringToObject(o, "system_fingerprint", "hotmoe");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (st.content || !g.n_calls) cJSON_AddStringToObject(m, "content", st.content ? st.content : "");
        else cJSON_AddNullToObject(m, "content");
        if (st.reasoning) { cJSON_AddStringToObject(m, "reasoning_content", st.reasoning); cJSON_AddStringToObject(m, "reasoning", st.reasoning); }
        if (g.n_calls) { cJSON_AddItemToObject(m, "tool_calls", st.calls); st.calls = NULL; }
    } else {
        cJSON_AddStringToObject(c, "text", st.content ? st.content : "");
        cJSON_AddNullToObject(c, "logprobs");
    }
    cJSON_AddStringToObject(c, "finish_reason", finish_name(&g));
    cJSON_AddItemToObject(o, "usage", usage_json(&g));
    http_send_json(h, 200, o);
out:
    free(st.content); free(st.reasoning); cJSON_Delete(st.calls);
}

/* Fields common to both endpoints. -1: error sent. */
static int common_fields(http_req *h, engine_req *r, int *stream, int *include_usage, long *max_tokens, const char **max_key) {
    long n;
    int rc;
    if (req_check_model(h, h->body) || req_sampling(h, h->body, r, "stop")) return -1;
    if (req_get_bool(h, h->body, "stream", stream) < 0) return -1;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(h->body, "stream_options");
    if (cJSON_IsObject(so) && req_get_bool(h, so, "include_usage", include_usage) < 0) return -1;
    if ((rc = req_get_int(h, h->body, "n", 1, 1, &n)) < 0) return -1;
    *max_key = "max_tokens";
    if ((rc = req_get_int(h, h->body, "max_completion_tokens", 1, 1 << 30, max_tokens)) < 0) return -1;
    if (rc) *max_key = "max_completion_tokens";
    else if ((rc = req_get_int(h, h->body, "max_tokens", 1, 1 << 30, max_tokens)) < 0) return -1;
    return 0;
}

void api_openai_chat(http_req *h) {
    engine_req *r = engine_req_new();
    chat_conv conv = { .add_generation_prompt = 1, .enable_thinking = -1 };
    int stream = 0, include_usage = 0, opens_think = 0;
    long max_tokens = -1;
    const char *max_key;
    if (common_fields(h, r, &stream, &include_usage, &max_tokens, &max_key) ||
        parse_messages(h, cJSON_GetObjectItemCaseSensitive(h->body, "messages"), &conv) || parse_tools(h, h->body, &conv) ||
        gen_prompt_from_chat(h, &conv, r, &opens_think) || req_fit_context(h, r, max_tokens, max_key)) {
        engine_req_free(r); chat_conv_free(&conv);
        return;
    }
    chat_conv_free(&conv);
    oai_respond(h, r, 1, stream, include_usage, opens_think);
}

void api_openai_completions(http_req *h) {
    engine_req *r = engine_req_new();
    int stream = 0, include_usage = 0;
    long max_tokens = 16; /* the OpenAI default for completions */
    const char *max_key;
    if (common_fields(h, r, &stream, &include_usage, &max_tokens, &max_key)) { engine_req_free(r); return; }
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(h->body, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) p = p->child;
    if (cJSON_IsString(p)) {
        if (req_tokenize(h, p->valuestring, &r->prompt, &r->n_prompt)) { engine_req_free(r); return; }
    } else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0 && cJSON_IsNumber(p->child)) {
        int n = cJSON_GetArraySize(p), i = 0, nv = h->s->m->cfg.n_vocab;
        r->prompt = hm_malloc(sizeof(int32_t) * (size_t)n);
        for (const cJSON *e = p->child; e; e = e->next, i++) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= nv || e->valuedouble != (int32_t)e->valuedouble) {
                http_error(h, 400, "invalid_request_error", "'prompt'[%d]: expected a token id in [0, %d)", i, nv);
                engine_req_free(r);
                return;
            }
            r->prompt[i] = (int32_t)e->valuedouble;
        }
        r->n_prompt = (size_t)n;
    } else {
        http_error(h, 400, "invalid_request_error", "'prompt': expected a string, a one-string array or an array of token ids");
        engine_req_free(r);
        return;
    }
    if (req_fit_context(h, r, max_tokens, max_key)) { engine_req_free(r); return; }
    oai_respond(h, r, 0, stream, include_usage, 0);
}
