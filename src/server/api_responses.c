/* api_responses.c - OpenAI POST /v1/responses: input as a string or items (messages,
 * function_call, function_call_output), instructions, function tools, reasoning; the response
 * object with reasoning / message / function_call output items, and its streaming events
 * (response.created ... response.output_text.delta ... response.completed). Stateless:
 * previous_response_id and store are not supported. */
#define _GNU_SOURCE
#include "server.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int parse_input(http_req *h, chat_conv *conv) {
    const cJSON *b = h->body;
    const char *instr = NULL;
    if (req_get_str(h, b, "instructions", &instr) < 0) return -1;
    if (instr) chat_conv_add(conv, "system", instr);
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(b, "input");
    if (cJSON_IsString(in)) { chat_conv_add(conv, "user", in->valuestring); return 0; }
    if (!cJSON_IsArray(in)) { http_error(h, 400, "invalid_request_error", "'input': expected a string or an array of input items"); return -1; }
    int i = 0;
    char where[64];
    for (const cJSON *it = in->child; it; it = it->next, i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "type"), *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        const char *type = cJSON_IsString(t) ? t->valuestring : "message";
        if (!strcmp(type, "message")) {
            if (!cJSON_IsString(role)) { http_error(h, 400, "invalid_request_error", "'input'[%d].role: expected a string", i); return -1; }
            const char *r = !strcmp(role->valuestring, "developer") ? "system" : role->valuestring;
            if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")) {
                http_error(h, 400, "invalid_request_error", "'input'[%d].role: expected user, assistant, system or developer", i);
                return -1;
            }
            snprintf(where, sizeof where, "'input'[%d].content", i);
            char *c;
            if (req_content_text(h, cJSON_GetObjectItemCaseSensitive(it, "content"), where, &c)) return -1;
            chat_conv_add(conv, r, c ? c : "");
            free(c);
        } else if (!strcmp(type, "function_call")) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name"), *args = cJSON_GetObjectItemCaseSensitive(it, "arguments");
            const cJSON *cid = cJSON_GetObjectItemCaseSensitive(it, "call_id");
            if (!cJSON_IsString(name) || !cJSON_IsString(args)) {
                http_error(h, 400, "invalid_request_error", "'input'[%d]: a function_call needs string 'name' and 'arguments'", i);
                return -1;
            }
            chat_msg *last = conv->n_msgs ? &conv->msgs[conv->n_msgs - 1] : NULL;
            if (!last || strcmp(last->role, "assistant")) last = chat_conv_add(conv, "assistant", NULL);
            chat_msg_add_call(last, cJSON_IsString(cid) ? cid->valuestring : "", name->valuestring, args->valuestring);
        } else if (!strcmp(type, "function_call_output")) {
            const cJSON *out = cJSON_GetObjectItemCaseSensitive(it, "output"), *cid = cJSON_GetObjectItemCaseSensitive(it, "call_id");
            char *o;
            snprintf(where, sizeof where, "'input'[%d].output", i);
            if (req_content_text(h, out, where, &o)) return -1;
            chat_msg *m = chat_conv_add(conv, "tool", o ? o : "");
            free(o);
            if (cJSON_IsString(cid)) m->tool_call_id = hm_strdup(cid->valuestring);
        } else if (!strcmp(type, "reasoning")) {
            continue; /* earlier reasoning is not replayed into the prompt */
        } else {
            http_error(h, 400, "invalid_request_error", "'input'[%d].type: '%.40s' is not supported; expected message, function_call, "
                       "function_call_output or reasoning", i, type);
            return -1;
        }
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(b, "tools");
    if (cJSON_IsArray(tools) && cJSON_GetArraySize(tools)) {
        conv->tools = cJSON_CreateArray();
        int k = 0;
        for (const cJSON *t = tools->child; t; t = t->next, k++) {
            const cJSON *tt = cJSON_GetObjectItemCaseSensitive(t, "type"), *name = cJSON_GetObjectItemCaseSensitive(t, "name");
            if (!cJSON_IsString(tt) || strcmp(tt->valuestring, "function") || !cJSON_IsString(name)) {
                http_error(h, 400, "invalid_request_error", "'tools'[%d]: expected {\"type\": \"function\", \"name\": ...} (built-in tools are not supported)", k);
                return -1;
            }
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "type", "function");
            cJSON *f = cJSON_AddObjectToObject(o, "function");
            cJSON_AddStringToObject(f, "name", name->valuestring);
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "description"), *p = cJSON_GetObjectItemCaseSensitive(t, "parameters");
            if (cJSON_IsString(d)) cJSON_AddStringToObject(f, "description", d->valuestring);
            if (p) cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(p, 1));
            cJSON_AddItemToArray(conv->tools, o);
        }
    }
    const cJSON *eff = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "reasoning"), "effort");
    if (cJSON_IsString(eff) && (!strcmp(eff->valuestring, "none") || !strcmp(eff->valuestring, "minimal"))) conv->enable_thinking = 0;
    return 0;
}

/* ---------------------------------------------------------------- events */

typedef struct {
    http_req *h;
    int stream, seq;
    char id[64];
    long created;
    cJSON *output;        /* finished output items */
    int open;             /* -1 none, CHAT_EV_CONTENT or CHAT_EV_REASONING: an item is open */
    char item_id[64];
    char *text; size_t n;
} rs_state;

static int rs_send(rs_state *st, const char *type, cJSON *o) {
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "sequence_number", st->seq++);
    return http_sse_event(st->h, type, o);
}

static cJSON *item_json(rs_state *st, int kind, const char *text, int done) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", st->item_id);
    cJSON_AddStringToObject(it, "type", kind == CHAT_EV_REASONING ? "reasoning" : "message");
    cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
    if (kind == CHAT_EV_REASONING) {
        cJSON_AddArrayToObject(it, "summary");
        cJSON *c = cJSON_AddArrayToObject(it, "content");
        if (done) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "reasoning_text");
            cJSON_AddStringToObject(p, "text", text ? text : "");
            cJSON_AddItemToArray(c, p);
        }
    } else {
        cJSON_AddStringToObject(it, "role", "assistant");
        cJSON *c = cJSON_AddArrayToObject(it, "content");
        if (done) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "output_text");
            cJSON_AddStringToObject(p, "text", text ? text : "");
            cJSON_AddArrayToObject(p, "annotations");
            cJSON_AddItemToArray(c, p);
        }
    }
    return it;
}

static cJSON *part_json(int kind, const char *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", kind == CHAT_EV_REASONING ? "reasoning_text" : "output_text");
    cJSON_AddStringToObject(p, "text", text);
    if (kind != CHAT_EV_REASONING) cJSON_AddArrayToObject(p, "annotations");
    return p;
}

static int item_close(rs_state *st) {
    if (st->open < 0) return 0;
    int kind = st->open, rc = 0, idx = cJSON_GetArraySize(st->output);
    st->open = -1;
    const char *txt = st->text ? st->text : "";
    if (st->stream) {
        const char *dtype = kind == CHAT_EV_REASONING ? "response.reasoning_text.done" : "response.output_text.done";
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "item_id", st->item_id);
        cJSON_AddNumberToObject(o, "output_index", idx);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddStringToObject(o, "text", txt);
        rc |= rs_send(st, dtype, o);
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "item_id", st->item_id);
        cJSON_AddNumberToObject(o, "output_index", idx);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddItemToObject(o, "part", part_json(kind, txt));
        rc |= rs_send(st, "response.content_part.done", o);
        o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "output_index", idx);
        cJSON_AddItemToObject(o, "item", item_json(st, kind, txt, 1));
        rc |= rs_send(st, "response.output_item.done", o);
    }
    cJSON_AddItemToArray(st->output, item_json(st, kind, txt, 1));
    free(st->text); st->text = NULL; st->n = 0;
    return rc;
}

static int rs_event(void *ud, int ev, const char *text, size_t n, const chat_tool_call *call) {
    rs_state *st = ud;
    if (ev != st->open && item_close(st)) return -1;
    int idx = cJSON_GetArraySize(st->output);
    if (ev == CHAT_EV_TOOL_CALL) {
        cJSON *it = cJSON_CreateObject();
        char fid[64];
        req_make_id(fid, sizeof fid, "fc_");
        cJSON_AddStringToObject(it, "id", fid);
        cJSON_AddStringToObject(it, "type", "function_call");
        cJSON_AddStringToObject(it, "status", "completed");
        cJSON_AddStringToObject(it, "call_id", call->id);
        cJSON_AddStringToObject(it, "name", call->name);
        cJSON_AddStringToObject(it, "arguments", call->arguments);
        int rc = 0;
        if (st->stream) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "output_index", idx);
            cJSON *added = cJSON_Duplicate(it, 1);
            cJSON_ReplaceItemInObject(added, "arguments", cJSON_CreateString(""));
            cJSON_ReplaceItemInObject(added, "status", cJSON_CreateString("in_progress"));
            cJSON_AddItemToObject(o, "item", added);
            rc |= rs_send(st, "response.output_item.added", o);
            o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "item_id", fid);
            cJSON_AddNumberToObject(o, "output_index", idx);
            cJSON_AddStringToObject(o, "delta", call->arguments);
            rc |= rs_send(st, "response.function_call_arguments.delta", o);
            o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "item_id", fid);
            cJSON_AddNumberToObject(o, "output_index", idx);
            cJSON_AddStringToObject(o, "arguments", call->arguments);
            rc |= rs_send(st, "response.function_call_arguments.done", o);
            o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "output_index", idx);
            cJSON_AddItemToObject(o, "item", cJSON_Duplicate(it, 1));
            rc |= rs_send(st, "response.output_item.done", o);
        }
        cJSON_AddItemToArray(st->output, it);
        return rc;
    }
    int rc = 0;
    if (st->open != ev) {
        st->open = ev;
        req_make_id(st->item_id, sizeof st->item_id, ev == CHAT_EV_REASONING ? "rs_" : "msg_");
        if (st->stream) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "output_index", idx);
            cJSON_AddItemToObject(o, "item", item_json(st, ev, NULL, 0));
            rc |= rs_send(st, "response.output_item.added", o);
            o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "item_id", st->item_id);
            cJSON_AddNumberToObject(o, "output_index", idx);
            cJSON_AddNumberToObject(o, "content_index", 0);
            cJSON_AddItemToObject(o, "part", part_json(ev, ""));
            rc |= rs_send(st, "response.content_part.added", o);
        }
    }
    char *t = realloc(st->text, st->n + n + 1); if (!t) abort();
    memcpy(t + st->n, text, n); st->n += n; t[st->n] = 0; st->text = t;
    if (st->stream) {
        char *d = hm_strndup(text, n);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "item_id", st->item_id);
        cJSON_AddNumberToObject(o, "output_index", idx);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddStringToObject(o, "delta", d);
        free(d);
        rc |= rs_send(st, ev == CHAT_EV_REASONING ? "response.reasoning_text.delta" : "response.output_text.delta", o);
    }
    return rc;
}

static int rs_keepalive(void *ud) { rs_state *st = ud; return http_sse_raw(st->h, ": keepalive\n\n"); }

static cJSON *response_json(rs_state *st, const char *status, const gen_result *g, int with_output) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", st->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)st->created);
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddStringToObject(o, "model", st->h->s->model_id);
    cJSON_AddItemToObject(o, "output", with_output ? cJSON_Duplicate(st->output, 1) : cJSON_CreateArray());
    cJSON_AddBoolToObject(o, "parallel_tool_calls", 1);
    cJSON_AddStringToObject(o, "tool_choice", "auto");
    cJSON_AddArrayToObject(o, "tools");
    cJSON_AddNullToObject(o, "error");
    if (g && !strcmp(status, "incomplete")) {
        cJSON *d = cJSON_AddObjectToObject(o, "incomplete_details");
        cJSON_AddStringToObject(d, "reason", "max_output_tokens");
    } else cJSON_AddNullToObject(o, "incomplete_details");
    if (g) {
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "input_tokens", g->n_prompt);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", 0);
        cJSON_AddNumberToObject(u, "output_tokens", g->n_gen);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", 0);
        cJSON_AddNumberToObject(u, "total_tokens", g->n_prompt + g->n_gen);
    } else cJSON_AddNullToObject(o, "usage");
    return o;
}

void api_responses(http_req *h) {
    engine_req *r = engine_req_new();
    chat_conv conv = { .add_generation_prompt = 1, .enable_thinking = -1 };
    int stream = 0, opens = 0, rc;
    long max_tokens = -1;
    if (req_check_model(h, h->body) || req_sampling(h, h->body, r, "stop") || req_get_bool(h, h->body, "stream", &stream) < 0 ||
        (rc = req_get_int(h, h->body, "max_output_tokens", 1, 1 << 30, &max_tokens)) < 0 || parse_input(h, &conv) ||
        gen_prompt_from_chat(h, &conv, r, &opens) || req_fit_context(h, r, max_tokens, "max_output_tokens")) {
        engine_req_free(r); chat_conv_free(&conv);
        return;
    }
    chat_conv_free(&conv);
    rs_state st = { .h = h, .stream = stream, .created = (long)time(NULL), .output = cJSON_CreateArray(), .open = -1 };
    req_make_id(st.id, sizeof st.id, "resp_");
    if (stream) {
        cJSON *o = cJSON_CreateObject();
        if (http_sse_begin(h)) { engine_req_free(r); goto out; }
        cJSON_AddItemToObject(o, "response", response_json(&st, "in_progress", NULL, 0));
        if (rs_send(&st, "response.created", o)) { engine_req_free(r); goto out; }
        o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "response", response_json(&st, "in_progress", NULL, 0));
        if (rs_send(&st, "response.in_progress", o)) { engine_req_free(r); goto out; }
    }
    gen_sink sink = { &st, rs_event, stream ? rs_keepalive : NULL };
    gen_result g;
    if (gen_run(h, r, 1, opens, &sink, &g) || g.client_gone || item_close(&st)) goto out;
    const char *status = g.finish == ENGINE_FINISH_STOP ? "completed" : "incomplete";
    if (stream) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "response", response_json(&st, status, &g, 1));
        rs_send(&st, !strcmp(status, "completed") ? "response.completed" : "response.incomplete", o);
    } else {
        cJSON *o = response_json(&st, status, &g, 1);
        /* output_text: the SDK's convenience field, all message text joined */
        http_send_json(h, 200, o);
    }
out:
    cJSON_Delete(st.output); free(st.text);
}
