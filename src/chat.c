/* chat.c - chat template families: detection from the template text and one renderer per
 * family, each a line-by-line transcription of that family's Jinja template (so the prompt is
 * byte-identical to what HF's apply_chat_template gives). Unknown templates fall back to ChatML. */
#define _GNU_SOURCE
#include "chat.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- strings */

typedef struct { char *s; size_t n, cap; } sbuf;

static void sb_addn(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) abort();
        b->s = t; b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n; b->s[b->n] = 0;
}
static void sb_add(sbuf *b, const char *s) { sb_addn(b, s ? s : "", s ? strlen(s) : 0); }
static char *sb_take(sbuf *b) { if (!b->s) sb_addn(b, "", 0); return b->s; }

/* Python str helpers on [s, s+n): the pieces the templates use. */
static int starts_with(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }
static int ends_with(const char *s, const char *p) { size_t a = strlen(s), b = strlen(p); return a >= b && !memcmp(s + a - b, p, b); }
static void lstrip_nl(const char **s, size_t *n) { while (*n && **s == '\n') { (*s)++; (*n)--; } }
static void rstrip_nl(const char *s, size_t *n) { while (*n && s[*n - 1] == '\n') (*n)--; }
static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }
static void strip_ws(const char **s, size_t *n) {
    while (*n && is_ws(**s)) { (*s)++; (*n)--; }
    while (*n && is_ws((*s)[*n - 1])) (*n)--;
}
/* s.split(sep)[0] and s.split(sep)[-1] */
static size_t split_first_len(const char *s, const char *sep) { const char *h = strstr(s, sep); return h ? (size_t)(h - s) : strlen(s); }
static const char *split_last(const char *s, size_t n, const char *sep) {
    size_t L = strlen(sep); const char *last = s;
    for (const char *h = s; (h = memmem(h, n - (size_t)(h - s), sep, L)); h += L) last = h + L;
    return last;
}

/* Splits an assistant message into (reasoning, content) as the Qwen3/GLM templates do. */
static void split_think(const char *content, char **rc, char **ct) {
    size_t n = strlen(content);
    const char *after = split_last(content, n, "</think>");
    size_t an = n - (size_t)(after - content);
    lstrip_nl(&after, &an);
    *ct = hm_strndup(after, an);
    size_t fn = split_first_len(content, "</think>");
    rstrip_nl(content, &fn);
    const char *r = split_last(content, fn, "<think>");
    size_t rn = fn - (size_t)(r - content);
    lstrip_nl(&r, &rn);
    *rc = hm_strndup(r, rn);
}

/* ---------------------------------------------------------------- JSON as Python dumps it */

static void dumps_str(sbuf *b, const char *s) {
    sb_addn(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': sb_addn(b, "\\\"", 2); break;
        case '\\': sb_addn(b, "\\\\", 2); break;
        case '\n': sb_addn(b, "\\n", 2); break;
        case '\r': sb_addn(b, "\\r", 2); break;
        case '\t': sb_addn(b, "\\t", 2); break;
        case '\b': sb_addn(b, "\\b", 2); break;
        case '\f': sb_addn(b, "\\f", 2); break;
        default:
            if (*p < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", *p); sb_add(b, esc); }
            else sb_addn(b, (const char *)p, 1);
        }
    }
    sb_addn(b, "\"", 1);
}

static void dumps(sbuf *b, const cJSON *x, int depth) {
    char num[64];
    if (depth > 64) { sb_add(b, "null"); return; }
    if (cJSON_IsObject(x) || cJSON_IsArray(x)) {
        int obj = cJSON_IsObject(x);
        sb_add(b, obj ? "{" : "[");
        for (const cJSON *c = x->child; c; c = c->next) {
            if (obj) { dumps_str(b, c->string ? c->string : ""); sb_add(b, ": "); }
            dumps(b, c, depth + 1);
            if (c->next) sb_add(b, ", ");
        }
        sb_add(b, obj ? "}" : "]");
    } else if (cJSON_IsString(x)) dumps_str(b, x->valuestring);
    else if (cJSON_IsNumber(x)) {
        double v = x->valuedouble;
        if (v == (double)(long long)v && v > -1e15 && v < 1e15) snprintf(num, sizeof num, "%lld", (long long)v);
        else {
            for (int p = 1; p <= 17; p++) { snprintf(num, sizeof num, "%.*g", p, v); if (strtod(num, NULL) == v) break; }
        }
        sb_add(b, num);
    } else if (cJSON_IsTrue(x)) sb_add(b, "true");
    else if (cJSON_IsFalse(x)) sb_add(b, "false");
    else sb_add(b, "null");
}

char *chat_json_dumps(const cJSON *x) { sbuf b = { 0 }; dumps(&b, x, 0); return sb_take(&b); }

cJSON *chat_json_parse(const char *s) {
    return s && hm_json_scan(s, strlen(s), HM_JSON_MAX_DEPTH, NULL) == HM_JSON_OK ? cJSON_Parse(s) : NULL;
}

/* ---------------------------------------------------------------- conversations */

chat_msg *chat_conv_add(chat_conv *c, const char *role, const char *content) {
    if (c->n_msgs == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 8;
        chat_msg *t = realloc(c->msgs, (size_t)c->cap * sizeof *t);
        if (!t) abort();
        c->msgs = t;
    }
    chat_msg *m = &c->msgs[c->n_msgs++];
    memset(m, 0, sizeof *m);
    m->role = hm_strdup(role);
    m->content = content ? hm_strdup(content) : NULL;
    return m;
}

void chat_msg_add_call(chat_msg *m, const char *id, const char *name, const char *arguments) {
    chat_tool_call *t = realloc(m->calls, (size_t)(m->n_calls + 1) * sizeof *t);
    if (!t) abort();
    m->calls = t;
    t[m->n_calls++] = (chat_tool_call){ hm_strdup(id ? id : ""), hm_strdup(name ? name : ""), hm_strdup(arguments ? arguments : "{}") };
}

void chat_conv_free(chat_conv *c) {
    for (int i = 0; i < c->n_msgs; i++) {
        chat_msg *m = &c->msgs[i];
        free(m->role); free(m->content); free(m->reasoning); free(m->tool_call_id);
        for (int k = 0; k < m->n_calls; k++) { free(m->calls[k].id); free(m->calls[k].name); free(m->calls[k].arguments); }
        free(m->calls);
    }
    free(c->msgs);
    cJSON_Delete(c->tools);
    memset(c, 0, sizeof *c);
}

static const char *str_or_empty(const char *s) { return s ? s : ""; }
static int role_is(const chat_msg *m, const char *r) { return !strcmp(m->role, r); }

/* ---------------------------------------------------------------- ChatML (fallback) */

/* {% for m in messages %}<|im_start|>{role}\n{content}<|im_end|>\n{% endfor %}
 * + <|im_start|>assistant\n. Tool turns keep their role; assistant tool calls are written in the
 * Hermes/Qwen form so that replies parse the same way. */
static void render_chatml(sbuf *b, const chat_conv *c) {
    for (int i = 0; i < c->n_msgs; i++) {
        const chat_msg *m = &c->msgs[i];
        sb_add(b, "<|im_start|>"); sb_add(b, m->role); sb_add(b, "\n"); sb_add(b, str_or_empty(m->content));
        for (int k = 0; k < m->n_calls; k++) {
            sb_add(b, "\n<tool_call>\n{\"name\": \""); sb_add(b, m->calls[k].name);
            sb_add(b, "\", \"arguments\": "); sb_add(b, m->calls[k].arguments); sb_add(b, "}\n</tool_call>");
        }
        sb_add(b, "<|im_end|>\n");
    }
    if (c->add_generation_prompt) sb_add(b, "<|im_start|>assistant\n");
}

/* ---------------------------------------------------------------- Qwen3 */

static void render_qwen3(sbuf *b, const chat_conv *c) {
    const chat_msg *ms = c->msgs;
    int n = c->n_msgs;
    int has_tools = c->tools && cJSON_GetArraySize(c->tools) > 0;
    if (has_tools) {
        sb_add(b, "<|im_start|>system\n");
        if (n && role_is(&ms[0], "system")) { sb_add(b, str_or_empty(ms[0].content)); sb_add(b, "\n\n"); }
        sb_add(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                  "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for (const cJSON *t = c->tools->child; t; t = t->next) { char *j = chat_json_dumps(t); sb_add(b, "\n"); sb_add(b, j); free(j); }
        sb_add(b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
                  "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                  "<args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (n && role_is(&ms[0], "system")) {
        sb_add(b, "<|im_start|>system\n"); sb_add(b, str_or_empty(ms[0].content)); sb_add(b, "<|im_end|>\n");
    }
    int multi_step = 1, last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        const char *ct = str_or_empty(ms[i].content);
        if (multi_step && role_is(&ms[i], "user") && !(starts_with(ct, "<tool_response>") && ends_with(ct, "</tool_response>"))) {
            multi_step = 0; last_query = i;
        }
    }
    for (int i = 0; i < n; i++) {
        const chat_msg *m = &ms[i];
        if (role_is(m, "user") || (role_is(m, "system") && i)) {
            sb_add(b, "<|im_start|>"); sb_add(b, m->role); sb_add(b, "\n"); sb_add(b, str_or_empty(m->content)); sb_add(b, "<|im_end|>\n");
        } else if (role_is(m, "assistant")) {
            char *content, *rc;
            if (m->reasoning) { content = hm_strdup(str_or_empty(m->content)); rc = hm_strdup(m->reasoning); }
            else if (strstr(str_or_empty(m->content), "</think>")) split_think(m->content, &rc, &content);
            else { content = hm_strdup(str_or_empty(m->content)); rc = hm_strdup(""); }
            if (i > last_query && (i == n - 1 || *rc)) {
                const char *r = rc; size_t rn = strlen(rc);
                lstrip_nl(&r, &rn); rstrip_nl(r, &rn);
                const char *ct = content; size_t cn = strlen(content);
                lstrip_nl(&ct, &cn);
                sb_add(b, "<|im_start|>"); sb_add(b, m->role); sb_add(b, "\n<think>\n"); sb_addn(b, r, rn);
                sb_add(b, "\n</think>\n\n"); sb_addn(b, ct, cn);
            } else {
                sb_add(b, "<|im_start|>"); sb_add(b, m->role); sb_add(b, "\n"); sb_add(b, content);
            }
            for (int k = 0; k < m->n_calls; k++) {
                if ((k == 0 && *content) || k) sb_add(b, "\n");
                sb_add(b, "<tool_call>\n{\"name\": \""); sb_add(b, m->calls[k].name);
                sb_add(b, "\", \"arguments\": "); sb_add(b, m->calls[k].arguments); sb_add(b, "}\n</tool_call>");
            }
            sb_add(b, "<|im_end|>\n");
            free(content); free(rc);
        } else if (role_is(m, "tool")) {
            if (i == 0 || !role_is(&ms[i - 1], "tool")) sb_add(b, "<|im_start|>user");
            sb_add(b, "\n<tool_response>\n"); sb_add(b, str_or_empty(m->content)); sb_add(b, "\n</tool_response>");
            if (i == n - 1 || !role_is(&ms[i + 1], "tool")) sb_add(b, "<|im_end|>\n");
        }
    }
    if (c->add_generation_prompt) {
        sb_add(b, "<|im_start|>assistant\n");
        if (c->enable_thinking == 0) sb_add(b, "<think>\n\n</think>\n\n");
    }
}

/* ---------------------------------------------------------------- GLM-4.5 / 4.6 */

/* Transcribed from the GLM-4.5 template's structure; not yet checked byte-for-byte against the
 * released file (no copy in shared/data). Arguments are written one <arg_key>/<arg_value> pair
 * per top-level key, strings raw and everything else as JSON. */
static void render_glm4(sbuf *b, const chat_conv *c) {
    const chat_msg *ms = c->msgs;
    int n = c->n_msgs;
    sb_add(b, "[gMASK]<sop>");
    if (c->tools && cJSON_GetArraySize(c->tools) > 0) {
        sb_add(b, "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                  "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n");
        for (const cJSON *t = c->tools->child; t; t = t->next) { char *j = chat_json_dumps(t); sb_add(b, j); sb_add(b, "\n"); free(j); }
        sb_add(b, "</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n"
                  "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
                  "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>");
    }
    int last_user = -1;
    for (int i = 0; i < n; i++) if (role_is(&ms[i], "user")) last_user = i;
    for (int i = 0; i < n; i++) {
        const chat_msg *m = &ms[i];
        const char *ct0 = str_or_empty(m->content);
        if (role_is(m, "user")) {
            sb_add(b, "<|user|>\n"); sb_add(b, ct0);
            if (c->enable_thinking == 0 && !ends_with(ct0, "/nothink")) sb_add(b, "/nothink");
        } else if (role_is(m, "assistant")) {
            char *content, *rc;
            if (m->reasoning) { content = hm_strdup(ct0); rc = hm_strdup(m->reasoning); }
            else if (strstr(ct0, "</think>")) split_think(ct0, &rc, &content);
            else { content = hm_strdup(ct0); rc = hm_strdup(""); }
            sb_add(b, "<|assistant|>");
            const char *r = rc; size_t rn = strlen(rc);
            strip_ws(&r, &rn);
            if (i > last_user && *rc) { sb_add(b, "\n<think>"); sb_addn(b, r, rn); sb_add(b, "</think>"); }
            else sb_add(b, "\n<think></think>");
            const char *ct = content; size_t cn = strlen(content);
            strip_ws(&ct, &cn);
            if (cn) { sb_add(b, "\n"); sb_addn(b, ct, cn); }
            for (int k = 0; k < m->n_calls; k++) {
                sb_add(b, "\n<tool_call>"); sb_add(b, m->calls[k].name); sb_add(b, "\n");
                cJSON *args = chat_json_parse(m->calls[k].arguments);
                for (const cJSON *a = cJSON_IsObject(args) ? args->child : NULL; a; a = a->next) {
                    sb_add(b, "<arg_key>"); sb_add(b, a->string); sb_add(b, "</arg_key>\n<arg_value>");
                    if (cJSON_IsString(a)) sb_add(b, a->valuestring);
                    else { char *j = chat_json_dumps(a); sb_add(b, j); free(j); }
                    sb_add(b, "</arg_value>\n");
                }
                cJSON_Delete(args);
                sb_add(b, "</tool_call>");
            }
            free(content); free(rc);
        } else if (role_is(m, "tool")) {
            if (i == 0 || !role_is(&ms[i - 1], "tool")) sb_add(b, "<|observation|>");
            sb_add(b, "\n<tool_response>\n"); sb_add(b, ct0); sb_add(b, "\n</tool_response>");
        } else if (role_is(m, "system")) {
            sb_add(b, "<|system|>\n"); sb_add(b, ct0);
        }
    }
    if (c->add_generation_prompt) {
        sb_add(b, "<|assistant|>");
        if (c->enable_thinking == 0) sb_add(b, "\n<think></think>");
    }
}

/* ---------------------------------------------------------------- DeepSeek-V3 */

/* Keeps the released template's quirks: `is_first` is never reset, so only the first tool-call
 * turn opens <｜tool▁calls▁begin｜>, and a lone call never writes <｜tool▁calls▁end｜>. */
static void render_deepseek3(sbuf *b, const chat_conv *c) {
    const chat_msg *ms = c->msgs;
    int n = c->n_msgs;
    int is_first = 0, is_tool = 0, is_output_first = 1, first_sp = 1;
    sbuf sp = { 0 };
    for (int i = 0; i < n; i++)
        if (role_is(&ms[i], "system")) {
            if (!first_sp) sb_add(&sp, "\n\n");
            sb_add(&sp, str_or_empty(ms[i].content)); first_sp = 0;
        }
    sb_add(b, "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
    if (sp.s) sb_add(b, sp.s);
    free(sp.s);
    for (int i = 0; i < n; i++) {
        const chat_msg *m = &ms[i];
        if (role_is(m, "user")) { is_tool = 0; sb_add(b, "<｜User｜>"); sb_add(b, str_or_empty(m->content)); }
        if (role_is(m, "assistant") && !m->content) {
            is_tool = 0;
            for (int k = 0; k < m->n_calls; k++) {
                int opening = !is_first;
                sb_add(b, opening ? "<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                                  : "\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>");
                sb_add(b, m->calls[k].name); sb_add(b, "\n```json\n"); sb_add(b, m->calls[k].arguments);
                sb_add(b, "\n```<｜tool▁call▁end｜>");
                if (opening) is_first = 1;
                else sb_add(b, "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>");
            }
        }
        if (role_is(m, "assistant") && m->content) {
            if (is_tool) { sb_add(b, "<｜tool▁outputs▁end｜>"); sb_add(b, m->content); sb_add(b, "<｜end▁of▁sentence｜>"); is_tool = 0; }
            else { sb_add(b, "<｜Assistant｜>"); sb_add(b, m->content); sb_add(b, "<｜end▁of▁sentence｜>"); }
        }
        if (role_is(m, "tool")) {
            is_tool = 1;
            if (is_output_first) {
                sb_add(b, "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>"); sb_add(b, str_or_empty(m->content));
                sb_add(b, "<｜tool▁output▁end｜>"); is_output_first = 0;
            } else {
                sb_add(b, "\n<｜tool▁output▁begin｜>"); sb_add(b, str_or_empty(m->content)); sb_add(b, "<｜tool▁output▁end｜>");
            }
        }
    }
    if (is_tool) sb_add(b, "<｜tool▁outputs▁end｜>");
    if (c->add_generation_prompt && !is_tool) sb_add(b, "<｜Assistant｜>");
}

/* ---------------------------------------------------------------- families */

typedef struct {
    const char *name;
    const char *marker;  /* a substring of the template that identifies the family */
    void (*render)(sbuf *b, const chat_conv *c);
} chat_family_row;

/* Order matters: the first row whose marker the template contains wins. */
static const chat_family_row families[CHAT_FAMILY_COUNT] = {
    [CHAT_DEEPSEEK3] = { "deepseek-v3", "<｜User｜>", render_deepseek3 },
    [CHAT_GLM4] = { "glm-4.5", "[gMASK]<sop>", render_glm4 },
    [CHAT_QWEN3] = { "qwen3", "<tool_call>", render_qwen3 },
    [CHAT_CHATML] = { "chatml", "<|im_start|>", render_chatml },
};
static const int detect_order[] = { CHAT_DEEPSEEK3, CHAT_GLM4, CHAT_QWEN3, CHAT_CHATML };

int chat_detect(const char *tmpl, int *known) {
    *known = 0;
    if (!tmpl) return CHAT_CHATML;
    for (size_t i = 0; i < sizeof detect_order / sizeof *detect_order; i++) {
        int f = detect_order[i];
        if (strstr(tmpl, families[f].marker)) {
            /* Qwen3 also needs <|im_start|>: other templates mention <tool_call> too */
            if (f == CHAT_QWEN3 && !strstr(tmpl, "<|im_start|>")) continue;
            *known = 1;
            return f;
        }
    }
    return CHAT_CHATML;
}

const char *chat_family_name(int family) {
    return family >= 0 && family < CHAT_FAMILY_COUNT ? families[family].name : "?";
}

char *chat_render(int family, const chat_conv *c) {
    sbuf b = { 0 };
    if (family < 0 || family >= CHAT_FAMILY_COUNT) family = CHAT_CHATML;
    families[family].render(&b, c);
    return sb_take(&b);
}
