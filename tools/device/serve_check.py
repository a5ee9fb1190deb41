"""ON THE DEVICE: `hotmoe serve` on the GPU (--device cuda with the expert cache and with CPU
workers, 2 slots) answers the same greedy chat completions as the CPU server, for 4 concurrent
requests, and for 4 one at a time (the greedy chain). Every server runs the exact kernels (--kernels ref; HOTMOE_GEMV_MODE=0 on the GPU), so
the two targets differ by summation order only. Usage: python3 tools/device/serve_check.py BIN MODEL"""
import json, os, socket, subprocess, sys, threading, time, urllib.request

BIN, MODEL = sys.argv[1], sys.argv[2]

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def start(port, extra):
    p = subprocess.Popen([BIN, "serve", "-m", MODEL, "--port", str(port), "--parallel", "2", "--ctx", "256", "--kernels", "ref"] + extra,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=dict(os.environ, HOTMOE_GEMV_MODE="0"))
    for _ in range(300):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).status == 200:
                return p
        except Exception:
            time.sleep(0.1)
    p.kill()
    raise SystemExit(f"FAIL serve {extra}: no /health: {p.stderr.read()[-2000:]}")

def ask(port, text):
    model = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10))["data"][0]["id"]
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 24, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body, {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["message"]["content"]

def answers(port, serial=False):
    """The 4 answers (serial: one request at a time, so that each decodes alone: the greedy chain); a
    failed request raises here (an error is never an answer equal to another error)."""
    prompts = ["Hello there", "What is 2+2?", "Name a color", "Tell me a story"]
    out = [None] * len(prompts)
    def one(i):
        try: out[i] = ask(port, prompts[i])
        except Exception as e: out[i] = e
    if serial:
        for i in range(len(prompts)): one(i)
    else:
        ts = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        [t.start() for t in ts]; [t.join() for t in ts]
    bad = [o for o in out if not isinstance(o, str)]
    if bad: raise SystemExit(f"FAIL a request to the server on port {port} failed: {bad[0]!r}")
    return out

def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {l.split()[0]: float(l.split()[1]) for l in text.splitlines() if l.startswith("hotmoe_expert") or l.startswith("hotmoe_pcie") or l.startswith("hotmoe_chain")}

ok = True
P = free_port()
cpu = start(P, ["--device", "cpu"]); ref = answers(P); cpu.terminate(); cpu.wait()
# --prefill-chunk 1: prompts token by token through the decode graph (exact); the batched prefill
# (F16 GEMMs, ~3e-3 from the reference) is checked below for answering, not for equal text
for name, extra in [("cuda, all resident", ["--device", "cuda", "--prefill-chunk", "1"]),
                    ("cuda, --cold stream 0 static + 2 slots", ["--device", "cuda", "--prefill-chunk", "1", "--cold", "stream",
                                                                  "--static-experts", "0", "--cache-slots", "2"]),
                    ("cuda, --cold cpu 1 static + 2 slots", ["--device", "cuda", "--prefill-chunk", "1", "--cold", "cpu",
                                                               "--static-experts", "1", "--cache-slots", "2", "--cpu-threads", "4"])]:
    P = free_port()
    p = start(P, extra)
    got = answers(P)
    mt = metrics(P)
    p.terminate(); p.wait()
    same = got == ref
    ok &= same
    print(f"{'PASS' if same else 'FAIL'} serve {name}: 4 concurrent greedy chat completions {'equal' if same else 'differ from'} the CPU server's"
          + ("" if same else f": {got!r} vs {ref!r}"))
    if "--cold" in extra:   # /metrics: the expert cache's counters (0 slots for the stream server: every expert a miss)
        cpu = "cpu" in extra
        good = mt.get("hotmoe_expert_cache_misses_total", 0) > 0 and (mt.get("hotmoe_expert_cpu_share", 0) > 0 if cpu else
                                                                       mt.get("hotmoe_pcie_bytes_total", 0) > 0)
        ok &= good
        print(f"{'PASS' if good else 'FAIL'} serve {name}: /metrics expert counters {mt}")
# one request at a time, all resident: each decodes alone, through the greedy chain (engine_chain,
# gpu_exec_greedy_chain); /metrics counts its tokens
P = free_port()
p = start(P, ["--device", "cuda", "--prefill-chunk", "1"])
got = answers(P, serial=True)
mt = metrics(P)
p.terminate(); p.wait()
same = got == ref and mt.get("hotmoe_chain_tokens_total", 0) > 0
ok &= same
print(f"{'PASS' if same else 'FAIL'} serve cuda, all resident, one request at a time: 4 greedy answers "
      f"{'equal' if got == ref else 'differ from'} the CPU server's, {mt.get('hotmoe_chain_tokens_total', 0):.0f} tokens chained"
      + ("" if got == ref else f": {got!r} vs {ref!r}"))
P = free_port()
p = start(P, ["--device", "cuda", "--cold", "stream", "--static-experts", "0", "--cache-slots", "2"])
got = answers(P)
p.terminate(); p.wait()
fine = all(isinstance(g, str) and g for g in got)
ok &= fine
same = sum(g == r for g, r in zip(got, ref))
print(f"{'PASS' if fine else 'FAIL'} serve cuda --cold stream with batched prefill: 4 concurrent answers, {same} of 4 equal to the CPU server's text")
sys.exit(0 if ok else 1)
