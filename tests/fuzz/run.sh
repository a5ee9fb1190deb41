#!/bin/sh
# run.sh - builds the libFuzzer targets with clang and runs both, in parallel, for SECONDS each.
# usage: tests/fuzz/run.sh [SECONDS=60] [WORKDIR=/tmp/hotmoe-fuzz]
# Corpora grow in WORKDIR/corpus/{gguf,safetensors}; crashes land in WORKDIR/crash-*; logs in WORKDIR/*.log.
# Exit status: non-zero when either fuzzer found a crash, leak or timeout.
set -eu
secs=${1:-60}
work=${2:-/tmp/hotmoe-fuzz}
root=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CC:-clang}
case "$($cc --version 2>/dev/null | head -1)" in *clang*) ;; *) echo "run.sh: needs clang (set CC), found '$cc'" >&2; exit 2;; esac
flags="-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
common="src/util.c cpu/quant.c cpu/quant_blocks.c cpu/quant_k.c"
mkdir -p "$work"
cd "$root"
# shellcheck disable=SC2086
$cc $flags -Isrc -Icpu tests/fuzz/fuzz_gguf.c src/gguf.c $common -lm -o "$work/fuzz_gguf"
# shellcheck disable=SC2086
$cc $flags -Isrc -Icpu tests/fuzz/fuzz_safetensors.c src/safetensors.c $common -lcjson -lm -o "$work/fuzz_safetensors"
python3 tests/fuzz/make_corpus.py "$work/seeds"
mkdir -p "$work/corpus/gguf" "$work/corpus/safetensors"

run() { # name, seed dir
    "$work/fuzz_$1" "$work/corpus/$1" "$work/seeds/$2" $(ls -d "$root/tests/fuzz/regress/$1" 2>/dev/null) \
        -dict="$root/tests/fuzz/$1.dict" \
        -max_total_time="$secs" -max_len=8192 -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/crash-$1-" >"$work/$1.log" 2>&1
}
run gguf gguf & p1=$!
run safetensors safetensors & p2=$!
rc=0
wait $p1 || rc=1
wait $p2 || rc=1
for n in gguf safetensors; do
    echo "== $n: $(grep -E '^#[0-9]+.*(DONE|pulse)' "$work/$n.log" | tail -1)"
    grep -E 'stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$work/$n.log" || true
    grep -E 'ERROR|SUMMARY|crash-|leak' "$work/$n.log" || true
done
exit $rc
