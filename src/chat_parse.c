/* chat_parse.c - splits generated text into content, reasoning (<think>...</think>) and tool
 * calls in each family's syntax, incrementally: text is released as soon as it can no longer be
 * the start of a marker, and a tool call is released whole when its closing marker arrives. */
#define _GNU_SOURCE
#include "chat.h"
#include <stdlib.h>
#include <string.h>

enum { ST_CONTENT = 0, ST_REASONING, ST_TOOL };

#define DS_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"
#define DS_CALL_BEGIN "<｜tool▁call▁begin｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"
#define DS_SEP "<｜tool▁sep｜>"

static const char *tool_open(int fam) { return fam == CHAT_DEEPSEEK3 ? DS_CALLS_BEGIN : "<tool_call>"; }
static const char *tool_close(int fam) { return fam == CHAT_DEEPSEEK3 ? DS_CALLS_END : "</tool_call>"; }

void chat_parser_init(chat_parser *p, int family, int starts_in_reasoning, chat_event_fn fn, void *ud) {
    memset(p, 0, sizeof *p);
    p->family = family; p->fn = fn; p->ud = ud;
    p->state = starts_in_reasoning ? ST_REASONING : ST_CONTENT;
}

void chat_parser_free(chat_parser *p) { free(p->buf); p->buf = NULL; p->len = p->cap = 0; }

int chat_prompt_opens_think(const char *prompt) {
    const char *o = NULL;
    for (const char *h = prompt; (h = strstr(h, "<think>")); h += 7) o = h;
    return o && !strstr(o, "</think>");
}

static void consume(chat_parser *p, size_t n) {
    if (p->len > n) memmove(p->buf, p->buf + n, p->len - n);
    p->len -= n;
}

/* Length of the longest proper prefix of marker that buf[0..n) ends with. */
static size_t partial(const char *buf, size_t n, const char *marker) {
    size_t L = strlen(marker);
    for (size_t k = L - 1; k > 0; k--)
        if (k <= n && !memcmp(buf + n - k, marker, k)) return k;
    return 0;
}

static void emit_text(chat_parser *p, int ev, const char *s, size_t n) {
    int *seen = ev == CHAT_EV_REASONING ? &p->seen_reasoning : &p->seen_content;
    if (!*seen) while (n && (*s == '\n')) { s++; n--; }
    if (!n) return;
    *seen = 1;
    p->fn(p->ud, ev, s, n, NULL);
}

static void emit_call(chat_parser *p, const char *name, const char *args) {
    chat_tool_call c = { NULL, (char *)name, (char *)args };
    p->n_calls++;
    p->fn(p->ud, CHAT_EV_TOOL_CALL, NULL, 0, &c);
}

static char *trim_dup(const char *s, size_t n) {
    while (n && strchr(" \t\r\n", *s)) { s++; n--; }
    while (n && strchr(" \t\r\n", s[n - 1])) n--;
    return hm_strndup(s, n);
}

/* {"name": ..., "arguments": {...}} (Hermes / Qwen). Returns 1 when it was a call. */
static int parse_json_call(chat_parser *p, const char *body, size_t n) {
    char *t = trim_dup(body, n);
    cJSON *j = chat_json_parse(t);
    free(t);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    int ok = cJSON_IsString(name) && (!args || cJSON_IsObject(args) || cJSON_IsString(args));
    if (ok) {
        char *a = !args ? hm_strdup("{}") : cJSON_IsString(args) ? hm_strdup(args->valuestring) : cJSON_PrintUnformatted(args);
        emit_call(p, name->valuestring, a);
        free(a);
    }
    cJSON_Delete(j);
    return ok;
}

/* name<arg_key>k</arg_key><arg_value>v</arg_value>... (GLM-4.5); values that parse as JSON stay JSON. */
static int parse_glm_call(chat_parser *p, const char *body, size_t n) {
    char *t = trim_dup(body, n);
    char *k = strstr(t, "<arg_key>");
    char *nl = strchr(t, '\n');
    char *end = k && (!nl || k < nl) ? k : nl ? nl : t + strlen(t);
    char *name = trim_dup(t, (size_t)(end - t));
    int ok = *name && !strchr(name, '<') && !strchr(name, '{');
    cJSON *args = cJSON_CreateObject();
    for (char *q = k; ok && q; q = strstr(q, "<arg_key>")) {
        q += 9;
        char *ke = strstr(q, "</arg_key>");
        char *vs = ke ? strstr(ke, "<arg_value>") : NULL;
        char *ve = vs ? strstr(vs, "</arg_value>") : NULL;
        if (!ve) { ok = 0; break; }
        char *key = hm_strndup(q, (size_t)(ke - q));
        char *val = hm_strndup(vs + 11, (size_t)(ve - vs - 11));
        cJSON *v = chat_json_parse(val);
        if (!v) v = cJSON_CreateString(val);
        cJSON_AddItemToObject(args, key, v);
        free(key); free(val);
        q = ve + 12;
    }
    if (ok) { char *a = cJSON_PrintUnformatted(args); emit_call(p, name, a); free(a); }
    cJSON_Delete(args); free(name); free(t);
    return ok;
}

/* <｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n```<｜tool▁call▁end｜> ... (DeepSeek-V3) */
static int parse_deepseek_calls(chat_parser *p, const char *body, size_t n) {
    char *t = hm_strndup(body, n);
    int found = 0, ok = 1;
    for (char *q = strstr(t, DS_CALL_BEGIN); q; q = strstr(q, DS_CALL_BEGIN)) {
        q += strlen(DS_CALL_BEGIN);
        char *sep = strstr(q, DS_SEP);
        char *fence = sep ? strstr(sep, "```json") : NULL;
        char *close = fence ? strstr(fence + 7, "```") : NULL;
        if (!close) { ok = 0; break; }
        char *name = trim_dup(sep + strlen(DS_SEP), (size_t)(fence - sep - strlen(DS_SEP)));
        char *args = trim_dup(fence + 7, (size_t)(close - fence - 7));
        cJSON *j = chat_json_parse(args);
        if (j && cJSON_IsObject(j)) { char *a = cJSON_PrintUnformatted(j); emit_call(p, name, a); free(a); found++; }
        else ok = 0;
        cJSON_Delete(j); free(name); free(args);
        q = close + 3;
    }
    free(t);
    return ok && found;
}

static int parse_calls(chat_parser *p, const char *body, size_t n) {
    switch (p->family) {
    case CHAT_GLM4: return parse_glm_call(p, body, n);
    case CHAT_DEEPSEEK3: return parse_deepseek_calls(p, body, n);
    default: return parse_json_call(p, body, n);
    }
}

/* Releases what can be classified now; at_end: nothing more will come. */
static void parser_run(chat_parser *p, int at_end) {
    for (;;) {
        if (p->state == ST_CONTENT) {
            const char *m_tool = tool_open(p->family);
            char *h_tool = p->len ? memmem(p->buf, p->len, m_tool, strlen(m_tool)) : NULL;
            char *h_think = !p->seen_content && p->len ? memmem(p->buf, p->len, "<think>", 7) : NULL;
            if (h_think && (!h_tool || h_think < h_tool)) {
                emit_text(p, CHAT_EV_CONTENT, p->buf, (size_t)(h_think - p->buf));
                consume(p, (size_t)(h_think - p->buf) + 7);
                p->state = ST_REASONING;
                continue;
            }
            if (h_tool) {
                size_t pre = (size_t)(h_tool - p->buf), keep = pre;
                while (keep && p->buf[keep - 1] == '\n') keep--;
                emit_text(p, CHAT_EV_CONTENT, p->buf, keep);
                consume(p, pre + strlen(m_tool));
                p->state = ST_TOOL;
                continue;
            }
            size_t hold = 0;
            if (!at_end) {
                hold = partial(p->buf, p->len, m_tool);
                if (!p->seen_content) { size_t h2 = partial(p->buf, p->len, "<think>"); if (h2 > hold) hold = h2; }
                while (hold < p->len && p->buf[p->len - hold - 1] == '\n') hold++;
            }
            emit_text(p, CHAT_EV_CONTENT, p->buf, p->len - hold);
            consume(p, p->len - hold);
            return;
        }
        if (p->state == ST_REASONING) {
            char *h = p->len ? memmem(p->buf, p->len, "</think>", 8) : NULL;
            if (h) {
                size_t n = (size_t)(h - p->buf);
                while (n && p->buf[n - 1] == '\n') n--;
                emit_text(p, CHAT_EV_REASONING, p->buf, n);
                consume(p, (size_t)(h - p->buf) + 8);
                p->state = ST_CONTENT;
                p->seen_content = 0; /* drop the newlines that follow </think> */
                continue;
            }
            size_t hold = 0;
            if (!at_end) {
                hold = partial(p->buf, p->len, "</think>");
                while (hold < p->len && p->buf[p->len - hold - 1] == '\n') hold++;
            }
            emit_text(p, CHAT_EV_REASONING, p->buf, p->len - hold);
            consume(p, p->len - hold);
            return;
        }
        /* ST_TOOL */
        const char *m_close = tool_close(p->family);
        char *h = p->len ? memmem(p->buf, p->len, m_close, strlen(m_close)) : NULL;
        if (!h && !at_end) return;
        size_t body = h ? (size_t)(h - p->buf) : p->len;
        if (!parse_calls(p, p->buf, body)) {
            /* not a well-formed call: show the text as it came */
            const char *m_open = tool_open(p->family);
            p->seen_content = 1;
            p->fn(p->ud, CHAT_EV_CONTENT, m_open, strlen(m_open), NULL);
            if (h) body += strlen(m_close);
            if (body) p->fn(p->ud, CHAT_EV_CONTENT, p->buf, body, NULL);
            consume(p, body);
        } else {
            consume(p, h ? body + strlen(m_close) : body);
        }
        p->state = ST_CONTENT;
        p->seen_content = 0; /* newlines between calls are not content */
        if (at_end && !p->len) return;
    }
}

void chat_parser_feed(chat_parser *p, const char *s, size_t n) {
    if (!n) return;
    if (p->len + n + 1 > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->len + n + 1) cap *= 2;
        char *t = realloc(p->buf, cap);
        if (!t) abort();
        p->buf = t; p->cap = cap;
    }
    memcpy(p->buf + p->len, s, n);
    p->len += n;
    parser_run(p, 0);
}

void chat_parser_finish(chat_parser *p) { parser_run(p, 1); }
