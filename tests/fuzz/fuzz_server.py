#!/usr/bin/env python3
"""fuzz_server.py - a black-box fuzzer for `hotmoe serve`: starts the server on a model, sends
mutated API requests (every endpoint's valid request with fields deleted, retyped, repeated or
replaced by odd values: huge and negative numbers, lone surrogates, NULs, 5,000-byte strings,
deep arrays; bodies truncated, byte-flipped or 100,000 '[' deep; other methods; streaming on and
off), and stops at the first request after which the server is gone. Prints the HTTP codes seen.
Best on the sanitizer build (tools/test.sh's build-asan): its log then names the fault.
Found so far (session 51): a body nested 100,000 deep, and a GLM tool call's arguments nested
deep, overflowed a civetweb worker's stack (util.h's hm_json_scan).

usage: tests/fuzz/fuzz_server.py HOTMOE_BIN MODEL_DIR SECONDS [SEED [serve options...]]
   e.g. tests/fuzz/fuzz_server.py build-asan/hotmoe tests/fixtures/glm4moe 300 1 --chat-template glm-4.5
exit status: 1 when the server died (the last request is printed), 0 otherwise.
"""
import json, random, socket, subprocess, sys, time, os, copy, http.client
BIN, MODEL, SECS = sys.argv[1], sys.argv[2], float(sys.argv[3])
seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
MODEL_NAME = os.path.basename(MODEL.rstrip("/"))
EXTRA = sys.argv[5:]
random.seed(seed)
s = socket.socket(); s.bind(("127.0.0.1", 0)); PORT = s.getsockname()[1]; s.close()
log = open(f"/tmp/fuzz_srv_{PORT}.log", "w")
env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
srv = subprocess.Popen([BIN, "serve", "-m", MODEL, "--port", str(PORT), "--parallel", "2", "--ctx", "256"] + EXTRA, stdout=log, stderr=subprocess.STDOUT, env=env)
for i in range(400):
    try:
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=2); c.request("GET", "/health"); r = c.getresponse(); r.read()
        if r.status == 200: break
    except Exception: pass
    time.sleep(0.05)
base = {
 "/v1/chat/completions": {"model": MODEL_NAME, "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": [1]}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}, {"role": "user", "content": "and?"}], "max_tokens": 4, "temperature": 0.7, "top_p": 0.9, "stream": False, "stop": ["\n"], "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}], "tool_choice": "auto", "seed": 3, "presence_penalty": 0.1, "logprobs": True, "top_logprobs": 2, "n": 1, "response_format": {"type": "json_object"}},
 "/v1/completions": {"model": MODEL_NAME, "prompt": "Once upon", "max_tokens": 4, "temperature": 0, "stream": False, "echo": False, "stop": "x", "logprobs": 1},
 "/v1/responses": {"model": MODEL_NAME, "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}], "max_output_tokens": 4, "instructions": "x", "stream": False, "reasoning": {"effort": "low"}},
 "/v1/messages": {"model": MODEL_NAME, "max_tokens": 4, "system": [{"type": "text", "text": "s"}], "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}], "stream": False, "thinking": {"type": "enabled", "budget_tokens": 16}, "tools": [{"name": "f", "input_schema": {"type": "object"}}], "stop_sequences": ["z"], "top_k": 5},
 "/v1/messages/count_tokens": {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hello"}], "system": "s"},
 "/tokenize": {"content": "hello <|im_start|>", "add_special": True, "with_pieces": True},
 "/detokenize": {"tokens": [1, 2, 3]},
}
weird = [None, True, False, 0, -1, 1e308, -1e308, 2**63, -2**63 - 1, 3.5, "", "x" * 5000, "\ud800", "\u0000", [], {}, [[[[[]]]]], {"a": {"b": {}}}, "NaN", -0.0, 1e-320, 4294967297, 1.5e10]
def mutate(o):
    if isinstance(o, dict):
        o = dict(o)
        if o and random.random() < 0.5:
            k = random.choice(list(o)); r = random.random()
            if r < 0.3: del o[k]
            elif r < 0.8: o[k] = random.choice(weird) if random.random() < 0.6 else mutate(o[k])
            else: o[k] = [o[k]] * random.randint(0, 40)
        else:
            for k in list(o):
                if random.random() < 0.3: o[k] = mutate(o[k])
        if random.random() < 0.1: o[random.choice(["stream", "n", "max_tokens", "top_k", "min_p", "frequency_penalty", "logit_bias", "stream_options", "parallel_tool_calls", "user", "metadata"])] = random.choice(weird + [True, 1, 8, {"1": 100}, {"include_usage": True}])
        return o
    if isinstance(o, list):
        o = list(o)
        r = random.random()
        if o and r < 0.3: o[random.randrange(len(o))] = mutate(o[random.randrange(len(o))])
        elif r < 0.45: o = o * random.randint(0, 30)
        elif r < 0.6 and o: o.pop(random.randrange(len(o)))
        else: o.append(random.choice(weird))
        return o
    if isinstance(o, str):
        r = random.random()
        if r < 0.3: return o * random.randint(0, 300)
        if r < 0.5: return "".join(chr(random.randint(1, 0x2FFFF)) for _ in range(random.randint(0, 40)))
        if r < 0.6: return "<|im_start|>user\n" + o + "<|im_end|><think></think>"
        if r < 0.7: return "[" * random.randint(1, 5000) + o
        return random.choice(weird)
    if isinstance(o, bool): return random.choice(weird)
    if isinstance(o, (int, float)): return random.choice(weird + [o * 1000, -o, o + 1])
    return random.choice(weird)
def raw_mutate(b):
    b = bytearray(b); r = random.random()
    if r < 0.3 and b: del b[random.randrange(len(b)):]
    elif r < 0.6:
        for _ in range(random.randint(1, 10)):
            if b: b[random.randrange(len(b))] = random.randrange(256)
    elif r < 0.8: b = b + bytes(random.randrange(256) for _ in range(random.randint(1, 50)))
    else: b = b"[" * 100000
    return bytes(b)
def send(path, body, method="POST", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    h = {"Content-Type": "application/json"}
    if headers: h.update(headers)
    c.request(method, path, body=body, headers=h)
    r = c.getresponse(); data = r.read(); c.close(); return r.status, data
t_end = time.time() + SECS; n = 0; codes = {}
crashed = suspect = None   # suspect: the first request whose connection the server dropped
while time.time() < t_end:
    path = random.choice(list(base))
    o = base[path]
    for _ in range(random.choice([0, 1, 1, 1, 2, 3])): o = mutate(o)
    if isinstance(o, dict) and random.random() < 0.3: o["stream"] = True
    if isinstance(o, dict):
        for k in ("max_tokens", "max_output_tokens"):
            if isinstance(o.get(k), (int, float)) and not isinstance(o.get(k), bool) and o[k] > 8 and random.random() < 0.9: o[k] = 8
    try: body = json.dumps(o).encode("utf-8", "surrogatepass")
    except Exception: body = b"{}"
    if random.random() < 0.15: body = raw_mutate(body)
    method = "POST" if random.random() < 0.97 else random.choice(["GET", "PUT", "DELETE", "OPTIONS"])
    last = (method, path, body[:3000])
    try:
        st, data = send(path, body, method)
        codes[st] = codes.get(st, 0) + 1
        if st >= 500: print("5xx", st, path, body[:300], data[:300], flush=True)
    except Exception as e:
        codes[type(e).__name__] = codes.get(type(e).__name__, 0) + 1
        if suspect is None and isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError)): suspect = last
    n += 1
    if srv.poll() is not None:
        crashed = last; break
if crashed:
    print("SERVER DIED rc", srv.returncode, "after", n, "requests; the first dropped:", suspect, "; the last:", crashed, flush=True)
else:
    srv.terminate(); srv.wait(timeout=30)
print("requests", n, "codes", codes, "rc", srv.returncode, "log", log.name)
sys.exit(1 if crashed else 0)
