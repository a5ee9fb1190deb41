#!/usr/bin/env python3
"""chat_reference.py - writes tests/fixtures/chat_cases.json: conversations rendered by Jinja2 with
the real Qwen3 and DeepSeek-V3 templates, set up the way HF transformers renders chat templates
(trim_blocks, lstrip_blocks, loopcontrols, tojson = json.dumps(ensure_ascii=False)).
test_chat.c renders the same conversations in C and compares byte for byte.
Usage: python3 tests/chat_reference.py [SHARED_TOKENIZERS_DIR]  (needs PyPI jinja2)"""
import json, os, sys
import jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

here = os.path.dirname(os.path.abspath(__file__))
tokdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, '..', '..', 'shared', 'data', 'tokenizers')

def env():
    e = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    e.filters['tojson'] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    def raise_exception(msg): raise jinja2.exceptions.TemplateError(msg)
    e.globals['raise_exception'] = raise_exception
    return e

W = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city, °C",
     "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "e.g. \"Paris\"\n"}},
                    "required": ["city"]}}}
T = {"type": "function", "function": {"name": "get_time", "description": "Current time",
     "parameters": {"type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}, "n": {"type": "integer", "minimum": 0}}}}}
def call(i, name, args): return {"id": "call_%d" % i, "type": "function", "function": {"name": name, "arguments": args}}

U = lambda c: {"role": "user", "content": c}
A = lambda c, **k: dict({"role": "assistant", "content": c}, **k)
S = lambda c: {"role": "system", "content": c}
TL = lambda c, i=0: {"role": "tool", "content": c, "tool_call_id": "call_%d" % i}

convs = [
    dict(messages=[U("Hello")]),
    dict(messages=[U("Hello")], add_generation_prompt=False),
    dict(messages=[S("You are terse."), U("Hi")]),
    dict(messages=[S("Sys"), U("a"), A("b"), U("c")]),
    dict(messages=[U("a"), A("b"), U("c"), A("d")], add_generation_prompt=False),
    dict(messages=[U("Hi")], enable_thinking=False),
    dict(messages=[U("Hi")], enable_thinking=True),
    dict(messages=[U("a"), A("<think>\nhmm\n</think>\n\nb"), U("c")]),
    dict(messages=[U("a"), A("<think>\nhmm\n</think>\n\nanswer")], add_generation_prompt=False),
    dict(messages=[U("a"), A("final", reasoning_content="I reasoned")], add_generation_prompt=False),
    dict(messages=[U("a"), A("x", reasoning_content="r1"), U("b"), A("y", reasoning_content="r2")], add_generation_prompt=False),
    dict(messages=[U("Weather in Paris?")], tools=[W]),
    dict(messages=[S("Be helpful."), U("Weather in Paris?")], tools=[W, T]),
    dict(messages=[U("Weather?"), A("", tool_calls=[call(0, "get_weather", "{\"city\": \"Paris\"}")]), TL("{\"temp\": 21}")], tools=[W]),
    dict(messages=[U("Weather?"), A("Let me check.", tool_calls=[call(0, "get_weather", "{\"city\": \"Paris\"}"),
                                                                   call(1, "get_time", "{\"tz\": \"CET\"}")]),
                   TL("21C", 0), TL("12:00", 1)], tools=[W, T]),
    dict(messages=[U("Weather?"), A("", tool_calls=[call(0, "get_weather", "{\"city\": \"Paris\"}")]), TL("21C"),
                   A("It is 21C."), U("thanks")], tools=[W]),
    dict(messages=[U("q"), A("", tool_calls=[call(0, "get_weather", "{}")], reasoning_content="need tool"), TL("x")], tools=[W]),
    dict(messages=[U("Unicode: héllo 世界 🌍"), A("ça va")], add_generation_prompt=True),
    dict(messages=[U("multi\nline\n\ntext"), A("\n\nleading newlines"), U("<tool_response>\nfake\n</tool_response>")]),
    dict(messages=[S("one"), S("two"), U("hi")]),
    dict(messages=[U("a"), A("b"), U("c")], tools=[T], enable_thinking=False),
    dict(messages=[U("x"), A("<think>only thinking</think>")], add_generation_prompt=False),
]

def render(tmpl, conv, ctx):
    kw = dict(messages=conv["messages"], add_generation_prompt=conv.get("add_generation_prompt", True), **ctx)
    if conv.get("tools"): kw["tools"] = conv["tools"]
    if "enable_thinking" in conv: kw["enable_thinking"] = conv["enable_thinking"]
    return env().from_string(tmpl).render(**kw)


cases = []
for fam, d, ctx in (("qwen3", "qwen3", {}), ("deepseek-v3", "deepseek-v3", {"bos_token": "<｜begin▁of▁sentence｜>"})):
    cfg = json.load(open(os.path.join(tokdir, d, "tokenizer_config.json")))
    for conv in convs:
        c = json.loads(json.dumps(conv))
        if fam == "deepseek-v3":  # the API sends null content with tool calls
            for m in c["messages"]:
                if m.get("tool_calls") and m["content"] == "": m["content"] = None
        cases.append({"family": fam, "conv": c, "expected": render(cfg["chat_template"], c, ctx)})
out = os.path.join(here, "fixtures", "chat_cases.json")
json.dump(cases, open(out, "w"), ensure_ascii=False, indent=1)
print("wrote %d cases to %s" % (len(cases), out))
