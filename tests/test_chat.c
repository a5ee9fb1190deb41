/* test_chat.c - chat templates and reply parsing: the Qwen3 and DeepSeek-V3 renderers against
 * Jinja2's rendering of the real templates (tests/fixtures/chat_cases.json, written by
 * tests/chat_reference.py), family detection, the streaming reasoning/tool-call parser fed
 * in every split of its input, and JSON nested deeper than HM_JSON_MAX_DEPTH (from a request or a
 * reply) on a thread with a stack as small as the HTTP server's. */
#define _GNU_SOURCE
#include "chat.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HM_TESTS_DIR
#define HM_TESTS_DIR "tests"
#endif

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static int family_of(const char *name) {
    for (int f = 0; f < CHAT_FAMILY_COUNT; f++) if (!strcmp(chat_family_name(f), name)) return f;
    return -1;
}

/* OpenAI-style JSON conversation -> chat_conv (test inputs are trusted). */
static void conv_from_json(chat_conv *c, const cJSON *j) {
    memset(c, 0, sizeof *c);
    const cJSON *agp = cJSON_GetObjectItem(j, "add_generation_prompt");
    c->add_generation_prompt = agp ? cJSON_IsTrue(agp) : 1;
    const cJSON *et = cJSON_GetObjectItem(j, "enable_thinking");
    c->enable_thinking = et ? cJSON_IsTrue(et) : -1;
    const cJSON *tools = cJSON_GetObjectItem(j, "tools");
    if (tools) c->tools = cJSON_Duplicate(tools, 1);
    for (const cJSON *m = cJSON_GetObjectItem(j, "messages")->child; m; m = m->next) {
        const cJSON *content = cJSON_GetObjectItem(m, "content");
        chat_msg *cm = chat_conv_add(c, cJSON_GetObjectItem(m, "role")->valuestring, cJSON_IsString(content) ? content->valuestring : NULL);
        const cJSON *rc = cJSON_GetObjectItem(m, "reasoning_content");
        if (cJSON_IsString(rc)) cm->reasoning = strdup(rc->valuestring);
        const cJSON *tcs = cJSON_GetObjectItem(m, "tool_calls");
        for (const cJSON *tc = tcs ? tcs->child : NULL; tc; tc = tc->next) {
            const cJSON *fn = cJSON_GetObjectItem(tc, "function");
            chat_msg_add_call(cm, cJSON_GetObjectItem(tc, "id")->valuestring, cJSON_GetObjectItem(fn, "name")->valuestring,
                              cJSON_GetObjectItem(fn, "arguments")->valuestring);
        }
    }
}

static void show_diff(const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    fprintf(stderr, "  first difference at byte %zu\n  want: ...%.80s\n  got:  ...%.80s\n", i, want + (i > 20 ? i - 20 : 0),
            got + (i > 20 ? i - 20 : 0));
}

static void test_reference_renders(void) {
    size_t n;
    hm_error e;
    char *text = hm_read_file(HM_TESTS_DIR "/fixtures/chat_cases.json", &n, &e);
    if (!text) { CHECK(0, "%s", e.msg); return; }
    cJSON *cases = cJSON_Parse(text);
    free(text);
    CHECK(cJSON_IsArray(cases), "chat_cases.json: expected an array");
    int count[CHAT_FAMILY_COUNT] = { 0 }, i = 0;
    for (const cJSON *k = cases ? cases->child : NULL; k; k = k->next, i++) {
        int fam = family_of(cJSON_GetObjectItem(k, "family")->valuestring);
        chat_conv c;
        conv_from_json(&c, cJSON_GetObjectItem(k, "conv"));
        char *got = chat_render(fam, &c);
        const char *want = cJSON_GetObjectItem(k, "expected")->valuestring;
        if (strcmp(got, want)) { CHECK(0, "case %d (%s): render differs from Jinja2", i, chat_family_name(fam)); show_diff(want, got); }
        else count[fam]++;
        free(got);
        chat_conv_free(&c);
    }
    CHECK(count[CHAT_QWEN3] >= 20, "expected >= 20 identical Qwen3 renders, found %d", count[CHAT_QWEN3]);
    CHECK(count[CHAT_DEEPSEEK3] >= 20, "expected >= 20 identical DeepSeek-V3 renders, found %d", count[CHAT_DEEPSEEK3]);
    printf("reference renders: qwen3 %d, deepseek-v3 %d identical\n", count[CHAT_QWEN3], count[CHAT_DEEPSEEK3]);
    cJSON_Delete(cases);
}

static void test_detect(void) {
    int known;
    const char *paths[] = { "/../../shared/data/tokenizers/qwen3/tokenizer_config.json", "/../../shared/data/tokenizers/deepseek-v3/tokenizer_config.json",
                            "/fixtures/qwen3moe/tokenizer_config.json" };
    int want[] = { CHAT_QWEN3, CHAT_DEEPSEEK3, CHAT_CHATML };
    for (int i = 0; i < 3; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s%s", HM_TESTS_DIR, paths[i]);
        size_t n; hm_error e;
        char *t = hm_read_file(p, &n, &e);
        if (!t) { printf("SKIP detect %s (%s)\n", p, e.msg); continue; }
        cJSON *j = cJSON_Parse(t);
        const cJSON *tm = cJSON_GetObjectItem(j, "chat_template");
        int f = chat_detect(cJSON_IsString(tm) ? tm->valuestring : NULL, &known);
        CHECK(f == want[i] && known, "%s: detected %s (known %d), expected %s", p, chat_family_name(f), known, chat_family_name(want[i]));
        cJSON_Delete(j); free(t);
    }
    CHECK(chat_detect("{{ messages }}", &known) == CHAT_CHATML && !known, "unknown template: expected the ChatML fallback");
    CHECK(chat_detect("[gMASK]<sop>{% for m in messages %}", &known) == CHAT_GLM4 && known, "GLM template not detected");
}

/* ---------------------------------------------------------------- parser */

typedef struct { char content[1024], reasoning[1024], calls[1024]; } collected;

static void collect(void *ud, int ev, const char *text, size_t n, const chat_tool_call *call) {
    collected *c = ud;
    if (ev == CHAT_EV_TOOL_CALL) { strcat(c->calls, call->name); strcat(c->calls, call->arguments); strcat(c->calls, ";"); return; }
    strncat(ev == CHAT_EV_CONTENT ? c->content : c->reasoning, text, n);
}

/* the deep replies' events: dropped (the test is that parsing them returns) */
static void ignore_event(void *ud, int ev, const char *text, size_t n, const chat_tool_call *call) {
    (void)ud; (void)ev; (void)text; (void)n; (void)call;
}

/* Feeds text split at every position (and byte by byte); all runs must agree with want. */
static void parse_case(int family, int opens, const char *text, const char *content, const char *reasoning, const char *calls) {
    size_t n = strlen(text);
    for (size_t split = 0; split <= n + 1; split++) {
        collected c = { { 0 }, { 0 }, { 0 } };
        chat_parser p;
        chat_parser_init(&p, family, opens, collect, &c);
        if (split == n + 1) for (size_t i = 0; i < n; i++) chat_parser_feed(&p, text + i, 1);
        else { chat_parser_feed(&p, text, split); chat_parser_feed(&p, text + split, n - split); }
        chat_parser_finish(&p);
        chat_parser_free(&p);
        int ok = !strcmp(c.content, content) && !strcmp(c.reasoning, reasoning) && !strcmp(c.calls, calls);
        CHECK(ok, "%s split %zu of '%s':\n  content '%s' (want '%s')\n  reasoning '%s' (want '%s')\n  calls '%s' (want '%s')",
              chat_family_name(family), split, text, c.content, content, c.reasoning, reasoning, c.calls, calls);
        if (!ok) return;
    }
}

static void test_parser(void) {
    parse_case(CHAT_QWEN3, 0, "Hello world", "Hello world", "", "");
    parse_case(CHAT_QWEN3, 0, "<think>\nplan\n</think>\n\nAnswer.", "Answer.", "plan", "");
    parse_case(CHAT_QWEN3, 1, "plan\n</think>\n\nAnswer.", "Answer.", "plan", "");
    parse_case(CHAT_QWEN3, 0, "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", "Sure.", "", "f{\"a\":1};");
    parse_case(CHAT_QWEN3, 0, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"x\": \"y\"}}\n</tool_call>",
               "", "", "f{};g{\"x\":\"y\"};");
    parse_case(CHAT_QWEN3, 0, "a <tool_call>not json</tool_call> b", "a <tool_call>not json</tool_call> b", "", "");
    parse_case(CHAT_QWEN3, 0, "x < y and <tool", "x < y and <tool", "", "");
    parse_case(CHAT_GLM4, 0, "<think>hm</think>\nok<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
               "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>", "ok", "hm", "get_weather{\"city\":\"Paris\",\"days\":3};");
    parse_case(CHAT_DEEPSEEK3, 0, "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
               "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "Let me look.", "", "get_weather{\"city\":\"Paris\"};");
    CHECK(chat_prompt_opens_think("<|im_start|>assistant\n<think>\n"), "open <think> at the end of the prompt not seen");
    CHECK(!chat_prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n"), "closed <think> taken as open");
}

static void test_json_dumps(void) {
    cJSON *j = cJSON_Parse("{\"a\": [1, 2.5, true, null], \"b\": \"q\\\"\\n\\u0001é\", \"c\": {}}");
    char *s = chat_json_dumps(j);
    CHECK(!strcmp(s, "{\"a\": [1, 2.5, true, null], \"b\": \"q\\\"\\n\\u0001é\", \"c\": {}}"), "json dumps: %s", s);
    free(s); cJSON_Delete(j);
}

/* ---------------------------------------------------------------- deep JSON */

static void test_nesting(void) {
    size_t at = 0;
    CHECK(hm_json_scan("[[]]", 4, 2, NULL) == HM_JSON_OK, "[[]] at 2 deep");
    CHECK(hm_json_scan("[[]]", 4, 1, &at) == HM_JSON_DEEP && at == 1, "[[]] over 1 deep: expected byte 1, got %zu", at);
    const char *obj = "{\"a\": [{\"b\": [1]}], \"c\": {}}";
    CHECK(hm_json_scan(obj, strlen(obj), 4, NULL) == HM_JSON_OK, "4 deep at 4");
    CHECK(hm_json_scan(obj, strlen(obj), 3, &at) == HM_JSON_DEEP && at == 13, "4 deep over 3: expected byte 13, got %zu", at);
    const char *str = "[\"[[[{{\\\"[[\", \"\\\\\", []]";   /* brackets in strings, an escaped quote, an escaped backslash */
    CHECK(hm_json_scan(str, strlen(str), 2, NULL) == HM_JSON_OK, "brackets inside strings counted: %s", str);
    CHECK(hm_json_scan(str, strlen(str), 1, &at) == HM_JSON_DEEP && at == strlen(str) - 3, "the array after the strings: byte %zu of %s", at, str);
}

/* a NUL, raw or as the escape \u0000 in a string, is refused where it stands (cJSON would cut the
 * string there); an escaped backslash before "u0000", \u0001 and \u000 at the end are not NULs */
static void test_nul(void) {
    static const struct { const char *s; size_t n; int want; size_t at; } c[] = {
        { "{\"c\": \"a\\u0000bc\"}", 0, HM_JSON_NUL, 8 },
        { "[\"x\", \"\\u00001\"]", 0, HM_JSON_NUL, 7 },
        { "[\"\\\\u0000\"]", 0, HM_JSON_OK, 0 },     /* ["\\u0000"]: a backslash, then the text u0000 */
        { "[\"\\u0001\"]", 0, HM_JSON_OK, 0 },
        { "[\"ab\\u000", 0, HM_JSON_OK, 0 },          /* cut short: cJSON's to refuse, not a NUL */
        { "{\"c\": \"a\0b\"}", 12, HM_JSON_NUL, 8 }, /* a zero byte inside a string */
        { "[1]\0", 4, HM_JSON_NUL, 3 },                /* and outside one */
        { "[\"\\\0\"]", 6, HM_JSON_NUL, 3 },        /* and right after a backslash */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const size_t n = c[i].n ? c[i].n : strlen(c[i].s);
        size_t at = 99;
        const int got = hm_json_scan(c[i].s, n, 8, &at);
        CHECK(got == c[i].want && (got == HM_JSON_OK || at == c[i].at), "case %zu (%zu bytes): expected %d at %zu, got %d at %zu",
              i, n, c[i].want, c[i].at, got, at);
    }
    cJSON *j = chat_json_parse("{\"arguments\": \"x\\u0000y\"}");
    CHECK(!j, "chat_json_parse took a string with \\u0000");
    cJSON_Delete(j);
}

/* n opening brackets then n closing ones, between pre and post */
static char *deep(const char *pre, int n, const char *post) {
    const size_t a = strlen(pre), b = strlen(post);
    char *s = malloc(a + 2 * (size_t)n + b + 1);
    memcpy(s, pre, a);
    memset(s + a, '[', (size_t)n);
    memset(s + a + n, ']', (size_t)n);
    memcpy(s + a + 2 * (size_t)n, post, b + 1);
    return s;
}

/* On a small stack (the HTTP server's threads are civetweb's, ~100 KB; cJSON recurses at every
 * level up to its own limit of 1000): a GLM conversation whose tool call's arguments are nested
 * 20,000 deep (a client's), and replies of each family with such a call (a model's). Before
 * chat_json_parse these overflowed the stack; now such arguments are not JSON: the render has the
 * call without keys, and the parsers take them as they take invalid JSON. */
static void *deep_worker(void *arg) {
    int *bad = arg;
    char *args = deep("", 20000, "");
    chat_conv c = { 0 };
    c.enable_thinking = -1;
    chat_conv_add(&c, "user", "hi");
    chat_msg *m = chat_conv_add(&c, "assistant", "");
    chat_msg_add_call(m, "c1", "f", args);
    char *r = chat_render(CHAT_GLM4, &c);
    if (!r || !strstr(r, "<tool_call>f") || strstr(r, "<arg_key>")) (*bad)++;
    free(r);
    chat_conv_free(&c);
    struct { int fam; const char *pre, *post; } rep[] = {
        { CHAT_QWEN3, "<tool_call>\n", "\n</tool_call>" },
        { CHAT_GLM4, "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>", "</arg_value>\n</tool_call>" },
        { CHAT_DEEPSEEK3, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n", "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>" },
    };
    for (size_t i = 0; i < sizeof rep / sizeof *rep; i++) {
        char *t = deep(rep[i].pre, 20000, rep[i].post);
        chat_parser p;
        chat_parser_init(&p, rep[i].fam, 0, ignore_event, NULL);
        chat_parser_feed(&p, t, strlen(t));
        chat_parser_finish(&p);
        chat_parser_free(&p);
        free(t);
    }
    free(args);
    return NULL;
}

static void test_deep_json(void) {
    pthread_attr_t at;
    pthread_attr_init(&at);
    /* civetweb's workers (Debian's build): cJSON's frames, ~96 bytes, two a level, overflowed one at
     * ~410 levels, ~100 KB; cJSON's own limit of 1000 levels needs ~190 KB. Without the guard this
     * thread overflows, in the plain and in the ASan build alike (both checked). */
    pthread_attr_setstacksize(&at, 96 << 10);
    pthread_t th;
    int bad = 0;
    CHECK(!pthread_create(&th, &at, deep_worker, &bad), "no thread");
    pthread_join(th, NULL);
    pthread_attr_destroy(&at);
    CHECK(!bad, "deep tool-call arguments: the GLM render kept keys or lost the call");
}

int main(void) {
    test_nesting();
    test_nul();
    test_deep_json();
    test_json_dumps();
    test_detect();
    test_reference_renders();
    test_parser();
    if (failures) { fprintf(stderr, "test_chat: %d failure(s)\n", failures); return 1; }
    printf("test_chat: all passed\n");
    return 0;
}
