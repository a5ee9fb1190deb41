/* test_chat.c - chat templates and reply parsing: the Qwen3 and DeepSeek-V3 renderers against
 * Jinja2's rendering of the real templates (tests/fixtures/chat_cases.json, written by
 * tests/chat_reference.py), family detection, and the streaming reasoning/tool-call parser fed
 * in every split of its input. */
#define _GNU_SOURCE
#include "chat.h"
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

int main(void) {
    test_json_dumps();
    test_detect();
    test_reference_renders();
    test_parser();
    if (failures) { fprintf(stderr, "test_chat: %d failure(s)\n", failures); return 1; }
    printf("test_chat: all passed\n");
    return 0;
}
