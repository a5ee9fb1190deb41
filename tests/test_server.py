#!/usr/bin/env python3
"""test_server.py - end-to-end tests of `hotmoe serve` on the tiny Qwen3-MoE fixture: OpenAI chat
and completions (stream and not, usage, stop, seed), Anthropic messages and count_tokens,
Responses, tokenize, health, metrics, API key, bad input (every error in the API's format),
queue-full 503, mid-stream disconnects freeing their slots, graceful SIGTERM; tool calls and
reasoning through a replay server (scripted model output). The openai / anthropic /
prometheus_client parts print SKIP when the package is missing.
A hung server must fail the test, not stall it: every client socket has a timeout
(REQ_TIMEOUT), and a watchdog (HM_TEST_WATCHDOG seconds, default 540, under ctest's 600)
prints every Python thread's stack and the live servers' thread backtraces (gdb, when
installed), kills the servers and exits 1.
Usage: test_server.py HOTMOE_BINARY [REPO_ROOT]"""
import faulthandler, http.client, json, os, shutil, signal, socket, subprocess, sys, threading, time

BIN = sys.argv[1] if len(sys.argv) > 1 else "hotmoe"
ROOT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODEL = os.path.join(ROOT, "tests", "fixtures", "qwen3moe")
KEY = "sk-test-123"
REQ_TIMEOUT = 60   # seconds per request / socket read; the slowest request here takes a few seconds
failures = []
servers = []       # live Server objects, for the watchdog

def watchdog_fire(limit):
    print("WATCHDOG: test_server did not finish within %d s; Python stacks:" % limit, flush=True)
    faulthandler.dump_traceback(all_threads=True)
    for sv in list(servers):
        if sv.p.poll() is None and shutil.which("gdb"):
            print("WATCHDOG: threads of server pid %d (port %d):" % (sv.p.pid, sv.port), flush=True)
            try: subprocess.run(["gdb", "-p", str(sv.p.pid), "-batch", "-ex", "thread apply all bt"], timeout=120,
                                stdout=sys.stdout, stderr=subprocess.DEVNULL)
            except Exception as e: print("gdb failed:", e)
        sv.p.kill()
    sys.stdout.flush()
    os._exit(1)

def start_watchdog():
    limit = int(os.environ.get("HM_TEST_WATCHDOG", "540"))
    t = threading.Timer(limit, watchdog_fire, args=(limit,))
    t.daemon = True
    t.start()
    faulthandler.dump_traceback_later(limit + 180, exit=True)  # backstop if the timer thread cannot run

def raw_connect(port):
    return socket.create_connection(("127.0.0.1", port), timeout=REQ_TIMEOUT)

def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

class Server:
    def __init__(self, *args):
        self.port = free_port()
        self.p = subprocess.Popen([BIN, "serve", "-m", MODEL, "--port", str(self.port)] + list(args),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        servers.append(self)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if self.req("GET", "/health")[0] == 200: return
            except OSError:
                pass
            if self.p.poll() is not None: break
            time.sleep(0.05)
        raise SystemExit("server did not start: " + (self.p.stdout.read() if self.p.poll() is not None else "timeout"))

    def req(self, method, path, body=None, key=KEY, headers=None, raw=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQ_TIMEOUT)
        h = dict(headers or {})
        if key: h["Authorization"] = "Bearer " + key
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None: h["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace")
        c.close()
        try: js = json.loads(text)
        except ValueError: js = None
        return r.status, js, text, r

    def sse(self, path, body, key=KEY):
        st, _, text, r = self.req("POST", path, body, key=key)
        events = []
        for block in text.split("\n\n"):
            ev, data = None, None
            for line in block.split("\n"):
                if line.startswith("event: "): ev = line[7:]
                elif line.startswith("data: "): data = line[6:]
            if data is not None: events.append((ev, data))
        return st, events

    def metrics(self):
        return self.req("GET", "/metrics")[2]

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try: rc = self.p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.p.kill(); rc = "hung"
        if self in servers: servers.remove(self)
        out = self.p.stdout.read()
        check(rc == 0, "SIGTERM: clean exit (rc %s)" % rc)
        check("ERROR: AddressSanitizer" not in out and "runtime error" not in out, "sanitizer report:\n" + out[-3000:])
        return out

def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") : return float(line.split()[-1])
    return None

CHAT = "/v1/chat/completions"
def msgs(t="hello"): return [{"role": "user", "content": t}]

def test_basic(s):
    check(s.req("GET", "/health", key=None)[0] == 200, "/health without a key: 200")
    st, js, _, _ = s.req("GET", "/v1/models", key=None)
    check(st == 401 and "API key" in js["error"]["message"], "no key: 401 with a message")
    check(s.req("GET", "/v1/models", key="wrong")[0] == 401, "wrong key: 401")
    st, js, _, _ = s.req("GET", "/v1/models", key=None, headers={"x-api-key": KEY})
    check(st == 200 and js["data"][0]["id"] == "qwen3moe", "x-api-key accepted, model listed")

    prompt = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    st, tk, _, _ = s.req("POST", "/tokenize", {"content": prompt})
    check(st == 200 and len(tk["tokens"]) > 0, "/tokenize")
    st, dt, _, _ = s.req("POST", "/detokenize", {"tokens": tk["tokens"]})
    check(st == 200 and dt["content"] == prompt, "/detokenize round trip")

    body = {"model": "qwen3moe", "messages": msgs(), "max_tokens": 12, "temperature": 0}
    st, js, _, _ = s.req("POST", CHAT, body)
    check(st == 200, "chat: 200")
    u = js["usage"]
    check(u["prompt_tokens"] == len(tk["tokens"]), "usage.prompt_tokens = tokens of the rendered ChatML prompt (%s vs %d)" % (u, len(tk["tokens"])))
    check(u["completion_tokens"] <= 12 and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], "usage sums")
    check(js["choices"][0]["finish_reason"] in ("stop", "length"), "finish_reason")
    text = js["choices"][0]["message"]["content"]
    st, js2, _, _ = s.req("POST", CHAT, body)
    check(js2["choices"][0]["message"]["content"] == text, "temperature 0 is deterministic")

    st, ev = s.sse(CHAT, dict(body, stream=True, stream_options={"include_usage": True}))
    check(st == 200 and ev[-1][1] == "[DONE]", "stream ends with [DONE]")
    chunks = [json.loads(d) for _, d in ev[:-1]]
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    check(streamed == text, "streamed text = non-streamed text (%r vs %r)" % (streamed, text))
    check(chunks[-1]["usage"]["completion_tokens"] == u["completion_tokens"], "include_usage chunk")

    seeded = dict(body, temperature=1.0, seed=42, max_tokens=16)
    a = s.req("POST", CHAT, seeded)[1]["choices"][0]["message"]["content"]
    b = s.req("POST", CHAT, seeded)[1]["choices"][0]["message"]["content"]
    check(a == b, "same seed, same text")

    long = s.req("POST", CHAT, dict(body, max_tokens=40))[1]
    t = long["choices"][0]["message"]["content"]
    if len(t) >= 8:
        stop = t[4:7]
        js = s.req("POST", CHAT, dict(body, max_tokens=40, stop=[stop]))[1]
        got = js["choices"][0]["message"]["content"]
        check(got == t[:t.index(stop)] and js["choices"][0]["finish_reason"] == "stop", "stop sequence cuts the text (%r, stop %r -> %r)" % (t, stop, got))

    st, js, _, _ = s.req("POST", "/v1/completions", {"prompt": "hello", "max_tokens": 5, "temperature": 0})
    check(st == 200 and js["object"] == "text_completion" and js["usage"]["completion_tokens"] <= 5, "completions")
    st, ev = s.sse("/v1/completions", {"prompt": "hello", "max_tokens": 5, "temperature": 0, "stream": True})
    check("".join(json.loads(d)["choices"][0]["text"] for _, d in ev[:-1]) == js["choices"][0]["text"], "completions stream = non-stream")

    st, js, _, _ = s.req("POST", "/v1/messages/count_tokens", {"model": "qwen3moe", "messages": msgs()})
    check(st == 200 and js["input_tokens"] == len(tk["tokens"]), "count_tokens")
    st, js, _, _ = s.req("POST", "/v1/messages?beta=true", {"model": "qwen3moe", "max_tokens": 8, "messages": msgs(), "temperature": 0})
    check(st == 200 and js["type"] == "message" and js["usage"]["input_tokens"] == len(tk["tokens"]), "anthropic messages (?beta=true ignored)")
    st, ev = s.sse("/v1/messages", {"max_tokens": 8, "messages": msgs(), "stream": True, "temperature": 0})
    kinds = [e for e, _ in ev]
    check(kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds, "anthropic stream events %s" % kinds)
    st, js, _, _ = s.req("POST", "/v1/responses", {"input": "hello", "max_output_tokens": 8, "temperature": 0})
    check(st == 200 and js["object"] == "response" and js["usage"]["output_tokens"] <= 8, "responses")

def test_errors(s):
    def err(st, js, code, words, api="openai"):
        ok = st == code and js is not None
        if ok and api == "openai": msg = js.get("error", {}).get("message", "")
        elif ok: msg = js.get("error", {}).get("message", "") if js.get("type") == "error" else ""
        else: msg = ""
        check(ok and all(w in msg for w in words), "error %d %s: got %s %s" % (code, words, st, js))
    st, js, _, _ = s.req("POST", CHAT, raw=b'{"messages": [')
    err(st, js, 400, ["not valid JSON"])
    st, js, _, _ = s.req("POST", CHAT, raw=b'')
    err(st, js, 400, ["not valid JSON"])
    st, js, _, _ = s.req("POST", CHAT, raw=b'[1,2]')
    err(st, js, 400, ["expected a JSON object"])
    # a NUL would cut the string in C: refused, not read as "a"
    err(*s.req("POST", CHAT, raw=b'{"messages": [{"role": "user", "content": "a\\u0000bc"}]}')[:2], 400, ["NUL", "\\u0000", "byte 44"])
    err(*s.req("POST", CHAT, raw=b'{"messages": [{"role": "user", "content": "a\x00bc"}]}')[:2], 400, ["NUL", "zero byte", "byte 44"])
    err(*s.req("POST", CHAT, {"messages": "hi"})[:2], 400, ["'messages'", "expected an array"])
    err(*s.req("POST", CHAT, {"messages": [{"role": 5}]})[:2], 400, ["role", "expected a string"])
    err(*s.req("POST", CHAT, {"messages": msgs(), "temperature": "hot"})[:2], 400, ["'temperature'", "expected a number"])
    err(*s.req("POST", CHAT, {"messages": msgs(), "max_tokens": -3})[:2], 400, ["'max_tokens'"])
    err(*s.req("POST", CHAT, {"messages": msgs(), "stop": [1]})[:2], 400, ["'stop'"])
    err(*s.req("POST", CHAT, {"messages": msgs(), "model": "gpt-9"})[:2], 404, ["gpt-9", "qwen3moe"])
    err(*s.req("POST", CHAT, {"messages": msgs(), "max_tokens": 100000})[:2], 400, ["100000", "512"])
    err(*s.req("POST", CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})[:2], 400, ["image_url"])
    err(*s.req("POST", CHAT, raw=b'{"messages": "' + b"x" * 70000 + b'"}')[:2], 413, ["limit"])
    err(*s.req("GET", CHAT)[:2], 405, ["GET"])
    err(*s.req("GET", "/nowhere")[:2], 404, ["/nowhere"])
    err(*s.req("POST", "/v1/messages", {"messages": msgs()})[:2], 400, ["max_tokens"], api="anthropic")
    err(*s.req("POST", "/v1/messages", {"max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]})[:2], 400, ["role"], api="anthropic")
    err(*s.req("POST", "/detokenize", {"tokens": [1, 99999]})[:2], 400, ["tokens"])
    # random junk bodies never crash the server
    import random
    rnd = random.Random(7)
    seeds = [b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}', b'{"input":[{"type":"function_call"}]}',
             b'{"max_tokens":3,"messages":[{"role":"user","content":[{"type":"tool_result","content":[1]}]}]}']
    for i in range(300):
        b = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(1, 6)):
            op = rnd.randint(0, 2); pos = rnd.randrange(len(b))
            if op == 0: b[pos] = rnd.randrange(256)
            elif op == 1: del b[pos]
            else: b.insert(pos, rnd.choice(b'{}[]",:0-e\\u'))
        path = rnd.choice([CHAT, "/v1/completions", "/v1/messages", "/v1/responses", "/v1/messages/count_tokens", "/tokenize"])
        st = s.req("POST", path, raw=bytes(b))[0]
        check(st in (200, 400, 404, 413), "fuzz body %d on %s: status %d" % (i, path, st))
    check(s.req("GET", "/health")[0] == 200, "alive after bad input")

def test_concurrency_and_disconnects(s):
    results = []
    def one(i):
        st, ev = s.sse(CHAT, {"messages": msgs("stream %d" % i), "max_tokens": 30, "stream": True, "seed": i})
        results.append(st == 200 and ev and ev[-1][1] == "[DONE]")
    ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    [t.start() for t in ts]; [t.join() for t in ts]
    check(len(results) == 4 and all(results), "4 concurrent streams complete")

    body = json.dumps({"messages": msgs("disconnect"), "max_tokens": 400, "stream": True}).encode()
    n = int(os.environ.get("HM_DISCONNECTS", "200"))
    import random
    rnd = random.Random(1)
    for i in range(n):
        c = raw_connect(s.port)
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        want = rnd.randint(0, 3000)
        got = 0
        try:
            while got < want:
                d = c.recv(4096)
                if not d: break
                got += len(d)
        except socket.timeout:
            check(False, "disconnect %d: no response bytes for %d s (%d of %d read): the server hung" % (i, REQ_TIMEOUT, got, want))
            c.close()
            break
        c.close()
    # the queued requests of closed connections end at their first write; on a loaded 2-core machine
    # that took longer than 20 s once (session 12), so wait up to 60 s (a leak never frees them)
    deadline = time.time() + 60
    while True:
        m = s.metrics()
        busy, ql = metric(m, "hotmoe_slots_busy"), metric(m, "hotmoe_queue_length")
        if (busy == 0 and ql == 0) or time.time() >= deadline: break
        time.sleep(0.1)
    check(busy == 0 and ql == 0, "slots freed after %d disconnects (60 s after the last: %s busy, %s queued; requests: %s)" %
          (n, busy, ql, "; ".join(l for l in m.splitlines() if l.startswith("hotmoe_requests"))))
    check(s.req("POST", CHAT, {"messages": msgs(), "max_tokens": 3})[0] == 200, "serving after disconnects")

def test_metrics(s):
    m = s.metrics()
    for name in ("hotmoe_prompt_tokens_total", "hotmoe_generated_tokens_total", "hotmoe_slots_busy", "hotmoe_queue_length",
                 "hotmoe_expert_cache_hits_total", "hotmoe_pcie_bytes_total", "hotmoe_expert_cpu_share", "hotmoe_time_to_first_token_seconds_count"):
        check(metric(m, name) is not None, "metric %s present" % name)
    g0 = metric(m, "hotmoe_generated_tokens_total")
    s.req("POST", CHAT, {"messages": msgs(), "max_tokens": 5, "temperature": 0})
    check(metric(s.metrics(), "hotmoe_generated_tokens_total") > g0, "generated-token counter moves")
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        print("SKIP prometheus_client parser (pip install prometheus_client)"); return
    fams = {f.name: f for f in text_string_to_metric_families(s.metrics())}
    check("hotmoe_time_to_first_token_seconds" in fams and fams["hotmoe_time_to_first_token_seconds"].type == "histogram", "prometheus parse")

def test_queue_full():
    # The slot must stay busy while the second request arrives: a long prompt keeps it in prefill
    # for seconds (a replay generation of 400 tokens ends in ~20 ms, which raced with the probe),
    # and the probe waits until the slot is taken (the SSE headers go out before the submit).
    s = Server("--parallel", "1", "--queue", "0", "--ctx", "2048")
    c = raw_connect(s.port)
    body = json.dumps({"prompt": "hello " * 300, "max_tokens": 400, "stream": True}).encode()
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    c.recv(100)
    deadline = time.time() + 20
    while time.time() < deadline and metric(s.metrics(), "hotmoe_slots_busy") != 1: time.sleep(0.01)
    st, js, _, r = s.req("POST", CHAT, {"messages": msgs(), "max_tokens": 2})
    check(st == 503 and r.getheader("Retry-After") and "queue" in js["error"]["message"], "full queue: 503 + Retry-After (%s %s)" % (st, js))
    c.close()
    s.stop()

def test_queue_after_cancel():
    """Regression: a request queued behind a slot that is then cancelled or times out must be
    admitted. The engine used to free the slot in its pre-step scan and then sleep with the
    request still queued (nothing signalled it again): the queued client waited forever.
    One slot, --timeout 1 and a long prompt: A times out in prefill while B waits in the queue."""
    s = Server("--parallel", "1", "--queue", "4", "--timeout", "1", "--ctx", "2048")
    res = {}
    def run_a():
        try: res["a"] = s.req("POST", "/v1/completions", {"prompt": "hello " * 400, "max_tokens": 8})[0]
        except OSError as e: res["a"] = repr(e)
    ta = threading.Thread(target=run_a); ta.start()
    deadline = time.time() + 20
    while time.time() < deadline and metric(s.metrics(), "hotmoe_slots_busy") != 1: time.sleep(0.01)
    try: st = s.req("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})[0]
    except OSError as e: st = repr(e)
    check(st == 200, "request queued behind a timed-out slot is answered (got %s)" % st)
    ta.join(REQ_TIMEOUT + 5)
    check(res.get("a") == 200, "long request answered after its time limit (got %s)" % res.get("a"))
    m = s.metrics()
    check(metric(m, "hotmoe_slots_busy") == 0 and metric(m, "hotmoe_queue_length") == 0, "queue-after-cancel: slots and queue empty")
    if not metric(m, 'hotmoe_requests_total{outcome="timeout"}'):
        print("NOTE queue-after-cancel: the long prompt finished within 1 s; the timed-out-slot path was not exercised")
    s.stop()

REPLAY = '<think>\nchecking\n</think>\n\nSure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]

def test_replay_sdks():
    s = Server("--replay", REPLAY, "--api-key", KEY, "--parallel", "2")
    st, js, _, _ = s.req("POST", CHAT, {"messages": msgs(), "tools": TOOLS})
    m = js["choices"][0]["message"]
    check(m["tool_calls"][0]["function"]["name"] == "get_weather" and json.loads(m["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"},
          "tool call parsed: %s" % m)
    check(m["reasoning_content"] == "checking" and m["content"] == "Sure." and js["choices"][0]["finish_reason"] == "tool_calls", "reasoning split")
    try:
        import openai
    except ImportError:
        print("SKIP openai SDK tests (pip install openai)")
    else:
        cl = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key=KEY, timeout=REQ_TIMEOUT, max_retries=0)
        r = cl.chat.completions.create(model="qwen3moe", messages=msgs(), tools=TOOLS)
        check(r.choices[0].message.tool_calls[0].function.name == "get_weather", "openai SDK: tool call")
        calls, content = {}, ""
        for ch in cl.chat.completions.create(model="qwen3moe", messages=msgs(), tools=TOOLS, stream=True):
            if not ch.choices: continue
            d = ch.choices[0].delta
            content += d.content or ""
            for tc in d.tool_calls or []:
                calls.setdefault(tc.index, ["", ""])
                if tc.function.name: calls[tc.index][0] += tc.function.name
                if tc.function.arguments: calls[tc.index][1] += tc.function.arguments
        check(content == "Sure." and calls[0][0] == "get_weather" and json.loads(calls[0][1]) == {"city": "Paris"}, "openai SDK: streamed tool call")
        with cl.responses.stream(model="qwen3moe", input="hi", tools=[{"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}]) as rs:
            for _ in rs: pass
            fin = rs.get_final_response()
        fc = [o for o in fin.output if o.type == "function_call"]
        check(fin.output_text == "Sure." and fc and fc[0].name == "get_weather", "openai SDK: responses stream")
    try:
        import anthropic
    except ImportError:
        print("SKIP anthropic SDK tests (pip install anthropic)")
    else:
        cl = anthropic.Anthropic(base_url="http://127.0.0.1:%d" % s.port, api_key=KEY, timeout=REQ_TIMEOUT, max_retries=0)
        atools = [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}]
        r = cl.messages.create(model="qwen3moe", max_tokens=200, messages=msgs(), tools=atools)
        kinds = [b.type for b in r.content]
        check(kinds == ["thinking", "text", "tool_use"] and r.content[2].input == {"city": "Paris"} and r.stop_reason == "tool_use", "anthropic SDK: %s" % kinds)
        with cl.messages.stream(model="qwen3moe", max_tokens=200, messages=msgs(), tools=atools) as st:
            fin = st.get_final_message()
        check([b.type for b in fin.content] == ["thinking", "text", "tool_use"] and fin.content[2].input == {"city": "Paris"}, "anthropic SDK: stream")
        n = cl.messages.count_tokens(model="qwen3moe", messages=msgs())
        check(n.input_tokens > 0, "anthropic SDK: count_tokens")
    s.stop()

CHAIN_TEXT = "The quick brown fox jumps over the lazy dog. One two three four five six seven eight nine ten."

def replay_answers(chain):
    """The engine's greedy chain (engine_backend's chain; the replay backend keeps its contract) against
    step-by-step decoding: greedy requests that end at the script's EOS, at max_tokens, at a stop string,
    streamed, and two at once (two slots: a request that arrives during a chain ends it, and the two
    then step together). Returns the answers, each (text, finish_reason)."""
    old = os.environ.get("HOTMOE_CHAIN")
    os.environ["HOTMOE_CHAIN"] = "1" if chain else "0"
    try: s = Server("--replay", CHAIN_TEXT, "--api-key", KEY, "--parallel", "2", "--queue", "4")
    finally:
        if old is None: del os.environ["HOTMOE_CHAIN"]
        else: os.environ["HOTMOE_CHAIN"] = old
    out = {}
    def one(name, **kw):
        st, js, text, _ = s.req("POST", "/v1/completions", dict({"prompt": "hello", "temperature": 0, "max_tokens": 100}, **kw))
        check(st == 200 and js, "chain=%d %s: HTTP %s %s" % (chain, name, st, text[:200]))
        out[name] = (js["choices"][0]["text"], js["choices"][0]["finish_reason"]) if js else None
    one("whole"); one("length", max_tokens=5); one("stop", stop=["fox"]); one("stop-late", stop=["nine"])
    st, ev = s.sse("/v1/completions", {"prompt": "hello", "temperature": 0, "max_tokens": 100, "stream": True})
    text = "".join(json.loads(d)["choices"][0].get("text") or "" for _, d in ev if d != "[DONE]")
    out["stream"] = (text, None)
    ts = [threading.Thread(target=one, args=("pair%d" % i,)) for i in range(2)]
    for t in ts: t.start()
    for t in ts: t.join()
    chained = metric(s.metrics(), "hotmoe_chain_tokens_total")
    s.stop()
    return out, chained

def test_replay_chain():
    (a, ca), (b, cb) = replay_answers(True), replay_answers(False)
    check(ca and ca > 0 and cb == 0, "hotmoe_chain_tokens_total: %s with the chain, %s without (HOTMOE_CHAIN=0)" % (ca, cb))
    check(a == b, "the greedy chain's answers are step-by-step decoding's:\n%s\n%s" % (a, b))
    check(a.get("whole") == (CHAIN_TEXT, "stop"), "chain: the whole script, then EOS: %s" % (a.get("whole"),))
    check(a.get("stop") == ("The quick brown ", "stop"), "chain: cut at a stop string: %s" % (a.get("stop"),))
    check(a.get("stop-late") == (CHAIN_TEXT[:CHAIN_TEXT.index("nine")], "stop"), "chain: cut at a late stop string: %s" % (a.get("stop-late"),))
    check(a.get("length") and a["length"][1] == "length" and CHAIN_TEXT.startswith(a["length"][0]) and 0 < len(a["length"][0]) < 40,
          "chain: max_tokens 5: %s" % (a.get("length"),))
    check(a.get("stream") == (CHAIN_TEXT, None), "chain: streamed: %s" % (a.get("stream"),))
    check(a.get("pair0") == (CHAIN_TEXT, "stop") and a.get("pair1") == (CHAIN_TEXT, "stop"), "chain: two requests, one queued: %s %s" %
          (a.get("pair0"), a.get("pair1")))

def main():
    start_watchdog()
    s = Server("--parallel", "4", "--api-key", KEY, "--body-limit", "65536", "--ctx", "512")
    try:
        test_basic(s)
        test_errors(s)
        test_concurrency_and_disconnects(s)
        test_metrics(s)
    finally:
        s.stop()
    test_queue_full()
    test_queue_after_cancel()
    test_replay_sdks()
    test_replay_chain()
    if failures:
        print("test_server: %d failure(s)" % len(failures)); sys.exit(1)
    print("test_server: all passed")

if __name__ == "__main__":
    main()
