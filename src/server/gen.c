/* gen.c - the generation driver every API shares: prompt from a chat (template family +
 * tokenizer), submit to the engine, poll its text, split it into content / reasoning / tool-call
 * events, keep SSE streams alive, and stop the generation when the client goes away. */
#define _GNU_SOURCE
#include "server.h"
#include "tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gen_prompt_from_chat(http_req *h, const chat_conv *conv, engine_req *r, int *opens_think) {
    if (!conv->n_msgs) { http_error(h, 400, "invalid_request_error", "'messages': expected at least one message, found none"); return -1; }
    char *prompt = chat_render(h->s->family, conv);
    *opens_think = chat_prompt_opens_think(prompt);
    int rc = req_tokenize(h, prompt, &r->prompt, &r->n_prompt);
    free(prompt);
    return rc;
}

/* Replaces invalid UTF-8 with U+FFFD so that every JSON string we emit is valid. */
static char *utf8_clean(const char *s, size_t n, size_t *out_n) {
    char *o = hm_malloc(n * 3 + 1);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = len && i + len <= n && !(len == 2 && c < 0xc2) && !(len == 4 && c > 0xf4);
        for (size_t j = 1; ok && j < len; j++) ok = ((unsigned char)s[i + j] & 0xc0) == 0x80;
        if (ok && len == 3) {
            unsigned char c1 = (unsigned char)s[i + 1];
            ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);
        }
        if (ok && len == 4) {
            unsigned char c1 = (unsigned char)s[i + 1];
            ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
        }
        if (ok && c == 0) ok = 0; /* NUL would cut C strings */
        if (ok) { memcpy(o + k, s + i, len); k += len; i += len; }
        else { memcpy(o + k, "\xef\xbf\xbd", 3); k += 3; i++; }
    }
    o[k] = 0; *out_n = k;
    return o;
}

typedef struct {
    gen_sink *sink;
    int failed;
    int n_calls;
} relay;

static void relay_event(void *ud, int ev, const char *text, size_t n, const chat_tool_call *call) {
    relay *rl = ud;
    if (rl->failed) return;
    if (ev == CHAT_EV_TOOL_CALL) {
        char id[48];
        req_make_id(id, sizeof id, "call_");
        chat_tool_call c = *call;
        c.id = id;
        size_t nn, na;
        char *name = utf8_clean(call->name, strlen(call->name), &nn), *args = utf8_clean(call->arguments, strlen(call->arguments), &na);
        c.name = name; c.arguments = args;
        rl->n_calls++;
        if (rl->sink->on_event(rl->sink->ud, ev, NULL, 0, &c)) rl->failed = 1;
        free(name); free(args);
        return;
    }
    size_t cn;
    char *clean = utf8_clean(text, n, &cn);
    if (rl->sink->on_event(rl->sink->ud, ev, clean, cn, NULL)) rl->failed = 1;
    free(clean);
}

int gen_run(http_req *h, engine_req *r, int parse, int starts_in_reasoning, gen_sink *sink, gen_result *out) {
    server *s = h->s;
    memset(out, 0, sizeof *out);
    out->stop_hit = -1;
    out->n_prompt = (int)r->n_prompt;
    hm_error e;
    if (engine_submit(s->en, r, &e)) {
        http_error(h, 503, "server_error", "%s", e.msg);
        engine_req_free(r);
        return -1;
    }
    relay rl = { sink, 0, 0 };
    chat_parser p;
    chat_parser_init(&p, s->family, starts_in_reasoning, relay_event, &rl);
    size_t from = 0;
    double last_sent = hm_now();
    int done = 0;
    while (!done && !rl.failed) {
        char *chunk; size_t n;
        done = engine_poll(s->en, r, &from, &chunk, &n, 250);
        if (n) {
            if (parse) chat_parser_feed(&p, chunk, n);
            else relay_event(&rl, CHAT_EV_CONTENT, chunk, n, NULL);
            last_sent = hm_now();
        }
        free(chunk);
        if (done && parse && !rl.failed) chat_parser_finish(&p);
        if (!done && !rl.failed && sink->on_keepalive && hm_now() - last_sent >= s->keepalive_s) {
            if (sink->on_keepalive(sink->ud)) rl.failed = 1;
            last_sent = hm_now();
        }
    }
    chat_parser_free(&p);
    out->n_gen = r->n_gen;
    out->finish = r->done ? r->finish : ENGINE_FINISH_CANCELLED;
    out->stop_hit = r->stop_hit;
    out->n_calls = rl.n_calls;
    out->client_gone = rl.failed;
    engine_release(s->en, r); /* cancels a generation whose client went away, frees its slot */
    if (!rl.failed && out->finish == ENGINE_FINISH_CANCELLED && server_stopping(s)) {
        http_error(h, 503, "server_error", "the server is shutting down; the generation was stopped");
        return -1;
    }
    return 0;
}
