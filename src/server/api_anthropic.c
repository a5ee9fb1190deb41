/* api_anthropic.c - Anthropic Messages: POST /v1/messages (streamed as message_start /
 * content_block_* / message_delta / message_stop events, with thinking and tool_use blocks)
 * and POST /v1/messages/count_tokens. Query strings such as ?beta=true are ignored. */
#define _GNU_SOURCE
#include "server.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Anthropic content (string or blocks) of one message into the conversation. -1: error sent. */
static int add_message(http_req *h, chat_conv *conv, const char *role, const cJSON *content, int i) {
    if (cJSON_IsString(content)) { chat_conv_add(conv, role, content->valuestring); return 0; }
    if (!cJSON_IsArray(content)) {
        http_error(h, 400, "invalid_request_error", "messages.%d.content: expected a string or an array of content blocks", i);
        return -1;
    }
    char *text = hm_strdup(""), *thinking = NULL;
    size_t n = 0;
    chat_msg tmp = { 0 };
    int k = 0;
    for (const cJSON *b = content->child; b; b = b->next, k++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "type");
        const char *type = cJSON_IsString(t) ? t->valuestring : "";
        if (!strcmp(type, "text")) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, "text");
            if (!cJSON_IsString(x)) { http_error(h, 400, "invalid_request_error", "messages.%d.content.%d.text: expected a string", i, k); goto fail; }
            size_t L = strlen(x->valuestring);
            text = realloc(text, n + L + 1); if (!text) abort();
            memcpy(text + n, x->valuestring, L + 1); n += L;
        } else if (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, "thinking");
            if (cJSON_IsString(x) && !thinking) thinking = hm_strdup(x->valuestring);
        } else if (!strcmp(type, "tool_use") && !strcmp(role, "assistant")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id"), *name = cJSON_GetObjectItemCaseSensitive(b, "name");
            const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
            if (!cJSON_IsString(name)) { http_error(h, 400, "invalid_request_error", "messages.%d.content.%d.name: expected a string", i, k); goto fail; }
            char *a = input ? cJSON_PrintUnformatted(input) : hm_strdup("{}");
            chat_msg_add_call(&tmp, cJSON_IsString(id) ? id->valuestring : "", name->valuestring, a);
            free(a);
        } else if (!strcmp(type, "tool_result") && !strcmp(role, "user")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(b, "content");
            char where[64], *out = NULL;
            snprintf(where, sizeof where, "messages.%d.content.%d.content", i, k);
            if (req_content_text(h, c, where, &out)) goto fail;
            chat_msg *m = chat_conv_add(conv, "tool", out ? out : "");
            free(out);
            if (cJSON_IsString(id)) m->tool_call_id = hm_strdup(id->valuestring);
        } else {
            http_error(h, 400, "invalid_request_error", "messages.%d.content.%d.type: '%.40s' is not supported in a %s message; expected text%s",
                       i, k, type, role, !strcmp(role, "user") ? ", tool_result" : ", thinking, tool_use");
            goto fail;
        }
    }
    if (n || tmp.n_calls || thinking || !strcmp(role, "assistant")) {
        chat_msg *m = chat_conv_add(conv, role, text);
        m->reasoning = thinking; thinking = NULL;
        m->calls = tmp.calls; m->n_calls = tmp.n_calls; tmp.calls = NULL;
        if (!n && tmp.n_calls && !strcmp(role, "assistant")) { free(m->content); m->content = NULL; }
    }
    free(text); free(thinking);
    return 0;
fail:
    free(text); free(thinking);
    for (int c = 0; c < tmp.n_calls; c++) { free(tmp.calls[c].id); free(tmp.calls[c].name); free(tmp.calls[c].arguments); }
    free(tmp.calls);
    return -1;
}

/* The request's system, messages, tools and thinking -> conversation. -1: error sent. */
static int parse_request(http_req *h, chat_conv *conv) {
    const cJSON *b = h->body;
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(b, "system");
    if (sys && !cJSON_IsNull(sys)) {
        char *s;
        if (req_content_text(h, sys, "system", &s)) return -1;
        chat_conv_add(conv, "system", s ? s : "");
        free(s);
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(b, "messages");
    if (!cJSON_IsArray(msgs)) { http_error(h, 400, "invalid_request_error", "messages: expected an array of messages"); return -1; }
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant"))) {
            http_error(h, 400, "invalid_request_error", "messages.%d.role: expected \"user\" or \"assistant\"", i);
            return -1;
        }
        if (add_message(h, conv, role->valuestring, cJSON_GetObjectItemCaseSensitive(m, "content"), i)) return -1;
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(b, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(b, "tool_choice");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(choice, "type");
    int none = cJSON_IsString(ct) && !strcmp(ct->valuestring, "none");
    if (cJSON_IsArray(tools) && cJSON_GetArraySize(tools) && !none) {
        conv->tools = cJSON_CreateArray();
        int k = 0;
        for (const cJSON *t = tools->child; t; t = t->next, k++) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
            if (!cJSON_IsString(name)) { http_error(h, 400, "invalid_request_error", "tools.%d.name: expected a string", k); return -1; }
            const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description"), *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
            cJSON *o = cJSON_CreateObject(), *f;
            cJSON_AddStringToObject(o, "type", "function");
            f = cJSON_AddObjectToObject(o, "function");
            cJSON_AddStringToObject(f, "name", name->valuestring);
            if (cJSON_IsString(desc)) cJSON_AddStringToObject(f, "description", desc->valuestring);
            if (schema) cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(schema, 1));
            cJSON_AddItemToArray(conv->tools, o);
        }
    } else if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) {
        http_error(h, 400, "invalid_request_error", "tools: expected an array of tools");
        return -1;
    }
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(b, "thinking");
    const cJSON *tt = cJSON_GetObjectItemCaseSensitive(th, "type");
    if (cJSON_IsString(tt)) conv->enable_thinking = !strcmp(tt->valuestring, "enabled");
    return 0;
}

/* ---------------------------------------------------------------- streaming state */

typedef struct {
    http_req *h;
    int stream;
    int open_type;        /* block open now: -1 none, else enum chat_event */
    int index;            /* index of the next block */
    cJSON *blocks;        /* non-streaming: finished blocks */
    char *text; size_t n; /* non-streaming: the open block's text */
} am_state;

static int am_send(am_state *st, const char *type, cJSON *o) {
    cJSON_AddStringToObject(o, "type", type);
    /* "type" first reads better, but clients key on it wherever it is */
    return http_sse_event(st->h, type, o);
}

static int block_close(am_state *st) {
    if (st->open_type < 0) return 0;
    int kind = st->open_type;
    st->open_type = -1;
    if (!st->stream) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", kind == CHAT_EV_REASONING ? "thinking" : "text");
        cJSON_AddStringToObject(b, kind == CHAT_EV_REASONING ? "thinking" : "text", st->text ? st->text : "");
        if (kind == CHAT_EV_REASONING) cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToArray(st->blocks, b);
        free(st->text); st->text = NULL; st->n = 0;
        return 0;
    }
    int rc = 0;
    if (kind == CHAT_EV_REASONING) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", st->index);
        cJSON *d = cJSON_AddObjectToObject(o, "delta");
        cJSON_AddStringToObject(d, "type", "signature_delta");
        cJSON_AddStringToObject(d, "signature", "");
        rc = am_send(st, "content_block_delta", o);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", st->index++);
    return rc | am_send(st, "content_block_stop", o);
}

static cJSON *tool_use_block(const chat_tool_call *c, int with_input) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    char id[48];
    snprintf(id, sizeof id, "toolu_%s", c->id + (strncmp(c->id, "call_", 5) ? 0 : 5));
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "name", c->name);
    cJSON *in = with_input ? chat_json_parse(c->arguments) : NULL;
    cJSON_AddItemToObject(b, "input", in ? in : cJSON_CreateObject());
    return b;
}

static int am_event(void *ud, int ev, const char *text, size_t n, const chat_tool_call *call) {
    am_state *st = ud;
    if (ev != st->open_type && block_close(st)) return -1;
    if (ev == CHAT_EV_TOOL_CALL) {
        if (!st->stream) { cJSON_AddItemToArray(st->blocks, tool_use_block(call, 1)); return 0; }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", st->index);
        cJSON_AddItemToObject(o, "content_block", tool_use_block(call, 0));
        if (am_send(st, "content_block_start", o)) return -1;
        o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", st->index);
        cJSON *d = cJSON_AddObjectToObject(o, "delta");
        cJSON_AddStringToObject(d, "type", "input_json_delta");
        cJSON_AddStringToObject(d, "partial_json", call->arguments);
        if (am_send(st, "content_block_delta", o)) return -1;
        o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", st->index++);
        return am_send(st, "content_block_stop", o);
    }
    int think = ev == CHAT_EV_REASONING;
    if (!st->stream) {
        st->open_type = ev;
        char *t = realloc(st->text, st->n + n + 1); if (!t) abort();
        memcpy(t + st->n, text, n); st->n += n; t[st->n] = 0; st->text = t;
        return 0;
    }
    if (st->open_type != ev) {
        st->open_type = ev;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", st->index);
        cJSON *b = cJSON_AddObjectToObject(o, "content_block");
        cJSON_AddStringToObject(b, "type", think ? "thinking" : "text");
        cJSON_AddStringToObject(b, think ? "thinking" : "text", "");
        if (think) cJSON_AddStringToObject(b, "signature", "");
        if (am_send(st, "content_block_start", o)) return -1;
    }
    char *t = hm_strndup(text, n);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", st->index);
    cJSON *d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "type", think ? "thinking_delta" : "text_delta");
    cJSON_AddStringToObject(d, think ? "thinking" : "text", t);
    free(t);
    return am_send(st, "content_block_delta", o);
}

static int am_ping(void *ud) {
    am_state *st = ud;
    return am_send(st, "ping", cJSON_CreateObject());
}

static const char *stop_reason(const gen_result *g) {
    if (g->finish == ENGINE_FINISH_STOP) return g->n_calls ? "tool_use" : g->stop_hit >= 0 ? "stop_sequence" : "end_turn";
    return "max_tokens";
}

/* Common parsing: model, sampling, stop_sequences, max_tokens (required), prompt. -1: error sent. */
static int am_prepare(http_req *h, engine_req *r, int need_max, int *opens_think) {
    chat_conv conv = { .add_generation_prompt = 1, .enable_thinking = -1 };
    long max_tokens = -1;
    int rc;
    if (req_check_model(h, h->body)) return -1;
    if (need_max) {
        if ((rc = req_get_int(h, h->body, "max_tokens", 1, 1 << 30, &max_tokens)) < 0) return -1;
        if (!rc) { http_error(h, 400, "invalid_request_error", "max_tokens: expected an integer >= 1 (the field is required)"); return -1; }
        if (req_sampling(h, h->body, r, "stop_sequences")) return -1;
    }
    if (parse_request(h, &conv) || gen_prompt_from_chat(h, &conv, r, opens_think)) { chat_conv_free(&conv); return -1; }
    chat_conv_free(&conv);
    return need_max ? req_fit_context(h, r, max_tokens, "max_tokens") : 0;
}

void api_anthropic_count_tokens(http_req *h) {
    engine_req *r = engine_req_new();
    int opens;
    if (!am_prepare(h, r, 0, &opens)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "input_tokens", (double)r->n_prompt);
        http_send_json(h, 200, o);
    }
    engine_req_free(r);
}

void api_anthropic_messages(http_req *h) {
    engine_req *r = engine_req_new();
    int opens = 0, stream = 0;
    if (req_get_bool(h, h->body, "stream", &stream) < 0 || am_prepare(h, r, 1, &opens)) { engine_req_free(r); return; }
    am_state st = { .h = h, .stream = stream, .open_type = -1, .blocks = cJSON_CreateArray() };
    char id[64];
    req_make_id(id, sizeof id, "msg_");
    cJSON *msg = cJSON_CreateObject();
    cJSON_AddStringToObject(msg, "id", id);
    cJSON_AddStringToObject(msg, "type", "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    cJSON_AddStringToObject(msg, "model", h->s->model_id);
    int n_prompt = (int)r->n_prompt;
    if (stream) {
        if (http_sse_begin(h)) goto out_free;
        cJSON *m = cJSON_Duplicate(msg, 1);
        cJSON_AddArrayToObject(m, "content");
        cJSON_AddNullToObject(m, "stop_reason");
        cJSON_AddNullToObject(m, "stop_sequence");
        cJSON *u = cJSON_AddObjectToObject(m, "usage");
        cJSON_AddNumberToObject(u, "input_tokens", n_prompt);
        cJSON_AddNumberToObject(u, "output_tokens", 0);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "message", m);
        if (am_send(&st, "message_start", o)) goto out_free;
    }
    gen_sink sink = { &st, am_event, stream ? am_ping : NULL };
    gen_result g;
    int n_stop = r->n_stop;
    char *stops[ENGINE_MAX_STOP];
    for (int i = 0; i < n_stop; i++) stops[i] = hm_strdup(r->stop[i]);
    int rc = gen_run(h, r, 1, opens, &sink, &g);
    r = NULL;
    if (!rc && !g.client_gone && !block_close(&st)) {
        const char *sr = stop_reason(&g);
        if (stream) {
            cJSON *o = cJSON_CreateObject();
            cJSON *d = cJSON_AddObjectToObject(o, "delta");
            cJSON_AddStringToObject(d, "stop_reason", sr);
            if (g.stop_hit >= 0 && g.stop_hit < n_stop) cJSON_AddStringToObject(d, "stop_sequence", stops[g.stop_hit]);
            else cJSON_AddNullToObject(d, "stop_sequence");
            cJSON *u = cJSON_AddObjectToObject(o, "usage");
            cJSON_AddNumberToObject(u, "output_tokens", g.n_gen);
            if (!am_send(&st, "message_delta", o)) am_send(&st, "message_stop", cJSON_CreateObject());
        } else {
            cJSON_AddItemToObject(msg, "content", st.blocks); st.blocks = NULL;
            cJSON_AddStringToObject(msg, "stop_reason", sr);
            if (g.stop_hit >= 0 && g.stop_hit < n_stop) cJSON_AddStringToObject(msg, "stop_sequence", stops[g.stop_hit]);
            else cJSON_AddNullToObject(msg, "stop_sequence");
            cJSON *u = cJSON_AddObjectToObject(msg, "usage");
            cJSON_AddNumberToObject(u, "input_tokens", g.n_prompt);
            cJSON_AddNumberToObject(u, "output_tokens", g.n_gen);
            http_send_json(h, 200, msg); msg = NULL;
        }
    }
    for (int i = 0; i < n_stop; i++) free(stops[i]);
out_free:
    if (r) engine_req_free(r);
    cJSON_Delete(msg); cJSON_Delete(st.blocks); free(st.text);
}
