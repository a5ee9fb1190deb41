/* chat.h - chat templates by family detection (no Jinja interpreter): the model's template text
 * picks a family whose renderer reproduces that template's output byte for byte (Qwen3 and
 * DeepSeek-V3 are checked against Jinja2 in tests); reply parsing splits reasoning and tool calls
 * out of the generated text, incrementally for streaming. */
#ifndef HM_CHAT_H
#define HM_CHAT_H
#include <stddef.h>
#include <cjson/cJSON.h>
#include "util.h"

enum chat_family {
    CHAT_CHATML = 0,  /* plain ChatML: <|im_start|>role\ncontent<|im_end|>\n (also the fallback) */
    CHAT_QWEN3,       /* Qwen3: ChatML + tools (<tool_call> JSON), <think>, enable_thinking */
    CHAT_GLM4,        /* GLM-4.5/4.6: [gMASK]<sop>, <|user|>..., <arg_key>/<arg_value> tool calls */
    CHAT_DEEPSEEK3,   /* DeepSeek-V3: <｜User｜>/<｜Assistant｜>, <｜tool▁calls▁begin｜> */
    CHAT_FAMILY_COUNT
};

typedef struct {
    char *id;          /* "call_..." */
    char *name;
    char *arguments;   /* JSON object text, as the OpenAI API carries it */
} chat_tool_call;

typedef struct {
    char *role;        /* system | user | assistant | tool */
    char *content;     /* NULL: none (null in the API) */
    char *reasoning;   /* NULL: absent; reasoning_content of earlier assistant turns */
    chat_tool_call *calls; int n_calls;
    char *tool_call_id;
} chat_msg;

typedef struct {
    chat_msg *msgs; int n_msgs, cap;
    cJSON *tools;               /* owned: array of tool objects as the request gave them, or NULL */
    int add_generation_prompt;
    int enable_thinking;        /* -1: not given, 0: false, 1: true */
} chat_conv;

/* Picks the family of a template text (NULL: none). *known = 0 when it fell back to ChatML. */
int chat_detect(const char *tmpl, int *known);
const char *chat_family_name(int family);

chat_msg *chat_conv_add(chat_conv *c, const char *role, const char *content);
void chat_msg_add_call(chat_msg *m, const char *id, const char *name, const char *arguments);
void chat_conv_free(chat_conv *c);

/* Renders the conversation as the family's template would. Returns a malloc'd string. */
char *chat_render(int family, const chat_conv *c);

/* Python json.dumps(x, ensure_ascii=False) of a cJSON value (what HF's `tojson` gives):
 * ", " and ": " separators, key order kept, non-ASCII raw. malloc'd. */
char *chat_json_dumps(const cJSON *x);
/* cJSON_Parse of text from a request or a model's reply, NULL also when it nests deeper than
 * HM_JSON_MAX_DEPTH (util.h: the server's threads have small stacks), a string holds \u0000 (cJSON
 * would cut it there; util.h's hm_json_scan) or s is NULL. */
cJSON *chat_json_parse(const char *s);

/* ---- reply parsing (chat_parse.c) ---- */

enum chat_event { CHAT_EV_CONTENT = 0, CHAT_EV_REASONING, CHAT_EV_TOOL_CALL };
typedef void (*chat_event_fn)(void *ud, int ev, const char *text, size_t n, const chat_tool_call *call);

typedef struct {
    int family;
    int state;                 /* content / reasoning / tool call body */
    char *buf; size_t len, cap; /* text not yet classified */
    int n_calls;
    int seen_content;          /* leading newlines after </think> are dropped */
    int seen_reasoning;
    chat_event_fn fn; void *ud;
} chat_parser;

/* starts_in_reasoning: the prompt ended inside an open <think> (the template opened it). */
void chat_parser_init(chat_parser *p, int family, int starts_in_reasoning, chat_event_fn fn, void *ud);
/* Feeds generated text; events come out as soon as they are certain. */
void chat_parser_feed(chat_parser *p, const char *s, size_t n);
/* End of generation: flushes held-back text (an unterminated tool call becomes content). */
void chat_parser_finish(chat_parser *p);
void chat_parser_free(chat_parser *p);
/* Whether the rendered prompt leaves the model inside <think> (so its reply starts as reasoning). */
int chat_prompt_opens_think(const char *prompt);

#endif
