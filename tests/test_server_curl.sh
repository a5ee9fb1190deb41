#!/usr/bin/env bash
# test_server_curl.sh - the HTTP API driven by curl, as a user would from a shell: chat
# (non-streaming and SSE), completions, Anthropic messages (SSE event names) and count_tokens,
# errors (bad key 401, malformed JSON 400, context overflow 400 naming both numbers).
# usage: test_server_curl.sh HOTMOE_BIN MODEL_DIR
set -u
BIN=$1; MODEL=$2
command -v curl >/dev/null || { echo "SKIP curl not installed"; exit 77; }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 18089)
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# the CPU-only deployment file, with the command line winning (port, ctx, parallel)
"$BIN" serve --config "$ROOT/configs/cpu-only.json" -m "$MODEL" --port "$PORT" --api-key k123 --parallel 2 --ctx 256 >/tmp/hm_curl_$PORT.log 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null' EXIT
U="http://127.0.0.1:$PORT"
for i in $(seq 1 200); do curl -s -o /dev/null -w '%{http_code}' "$U/health" 2>/dev/null | grep -q 200 && break; sleep 0.05; done
pass=0; fail=0
# a failure prints what the server answered (its first 800 bytes), so that a rare one can be read from CI's log
check() { if eval "$2"; then echo "PASS $1"; pass=$((pass+1)); else echo "FAIL $1"; printf '  got: %.800s\n' "$out"; fail=$((fail+1)); fi; }
C=(curl -s --max-time 60 -H "Authorization: Bearer k123" -H "Content-Type: application/json")

out=$("${C[@]}" "$U/v1/chat/completions" -d '{"model":"qwen3moe","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0}')
check "chat completion: object, choices, usage" '[[ "$out" == *"\"chat.completion\""* && "$out" == *"\"choices\""* && "$out" == *"\"completion_tokens\""* ]]'
out=$("${C[@]}" -N "$U/v1/chat/completions" -d '{"model":"qwen3moe","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}')
check "chat stream: data: chunks and [DONE]" '[[ "$out" == *"data: {"* && "$out" == *"chat.completion.chunk"* && "$out" == *"data: [DONE]"* ]]'
out=$("${C[@]}" "$U/v1/completions" -d '{"model":"qwen3moe","prompt":"Once upon","max_tokens":6}')
check "completions: text_completion" '[[ "$out" == *"text_completion"* ]]'
# greedy (temperature 0): a sampled reply may end at its first token and so carry no text delta
out=$("${C[@]}" -N "$U/v1/messages?beta=true" -H "anthropic-version: 2023-06-01" -d '{"model":"qwen3moe","max_tokens":8,"stream":true,"temperature":0,"messages":[{"role":"user","content":"hi"}]}')
check "messages stream: Anthropic events in order" '[[ "$out" == *"event: message_start"* && "$out" == *"event: content_block_delta"* && "$out" == *"event: message_stop"* ]]'
out=$("${C[@]}" "$U/v1/messages/count_tokens" -d '{"model":"qwen3moe","messages":[{"role":"user","content":"hello there"}]}')
check "count_tokens: input_tokens" '[[ "$out" == *"\"input_tokens\""* ]]'
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer nope" "$U/v1/models")
check "wrong key: 401" '[ "$code" = 401 ]'
out=$("${C[@]}" -w ' HTTP%{http_code}' "$U/v1/chat/completions" -d '{"model":"qwen3moe","messages":[')
check "malformed JSON: 400 in OpenAI error format" '[[ "$out" == *"\"error\""* && "$out" == *"HTTP400"* ]]'
# 100,000 '[' overflowed a civetweb worker's ~100 KB stack inside cJSON (SIGSEGV, the server gone): now a 400 before the parse
out=$(head -c 100000 /dev/zero | tr '\0' '[' | "${C[@]}" -w ' HTTP%{http_code}' "$U/v1/chat/completions" --data-binary @-)
code=$(curl -s -o /dev/null -w '%{http_code}' "$U/health")
check "JSON nested 100,000 deep: 400 naming the limit, the server still up" '[[ "$out" == *"HTTP400"* && "$out" == *"more than 64 deep"* && "$code" = 200 ]]'
out=$("${C[@]}" -w ' HTTP%{http_code}' "$U/v1/chat/completions" -d '{"model":"qwen3moe","messages":[{"role":"user","content":"hi"}],"max_tokens":100000}')
check "prompt + max_tokens over the context: 400 naming both numbers" '[[ "$out" == *"HTTP400"* && "$out" == *"100000"* && "$out" == *"256"* ]]'
out=$("$BIN" serve -m "$MODEL" --replay-routing x.hmrt 2>&1); rc=$?
check "serve refuses --replay-routing (benchmark only)" '[ $rc = 2 ] && [[ "$out" == *"benchmarks only"* ]]'
printf '{"port": 1, "colour": "blue"}' > /tmp/hm_curl_bad_$PORT.json
out=$("$BIN" serve --config /tmp/hm_curl_bad_$PORT.json 2>&1); rc=$?
check "serve --config with an unknown key: error naming it" '[ $rc = 2 ] && [[ "$out" == *"colour"* ]]'
rm -f /tmp/hm_curl_bad_$PORT.json
check "server still up" '[ "$(curl -s -o /dev/null -w "%{http_code}" "$U/health")" = 200 ]'
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
