#!/usr/bin/env bash
# ON THE DEVICE, in one `run` call: the expert cache (--cold stream, issue [stream]).
# Build; test_gpu_stream on the fixtures, generated tiny models and a3b (exactness against the
# all-resident executor); then BENCH.md's S5 (a3b, 8 GiB) and S1 (air, 24 GiB) beside the
# all-resident run of the same file in the same call.
#   run: bash tools/device/stream_check.sh [RUNS] [GEN]      (carry: .deps)
set -uo pipefail
RUNS=${1:-3}; GEN=${2:-512}
OUT=${OUT:-/tmp/hotmoe-out}; mkdir -p "$OUT"
source tools/device/env.sh
t0=$(date +%s)
cmake -S . -B build-dev -DHOTMOE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-dev -j"$(nproc)" >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "== built in $(( $(date +%s) - t0 )) s"
M=${HOTMOE_MODELS:-/tmp/hotmoe-models}; mkdir -p "$M"
G=./build-dev/hotmoe-gen
for mix in q4_k_m q8_0; do [ -f "$M/tiny-$mix.gguf" ] || $G --shape tiny --mix $mix --seed 1 -o "$M/tiny-$mix.gguf" >/dev/null 2>&1; done
[ -f "$M/tinyglm-q4_k_m.gguf" ] || $G --shape tinyglm --mix q4_k_m --seed 2 -o "$M/tinyglm-q4_k_m.gguf" >/dev/null 2>&1
./build-dev/tests/test_gpu_stream "$M"/tiny-*.gguf "$M"/tinyglm-*.gguf >"$OUT/stream_test.log" 2>&1; grep -E "FAIL|passed" "$OUT/stream_test.log"
B=./build-dev/bench_decode
for spec in "a3b 8" "air 24"; do
  set -- $spec; shape=$1; gib=$2; f="$M/$shape.gguf"
  if [ ! -f "$f" ]; then rm -f "$M"/a3b.gguf "$M"/air.gguf; $G --shape $shape --seed 1 -o "$f" >"$OUT/gen-$shape.log" 2>&1; fi
  [ "$shape" = a3b ] && { ./build-dev/tests/test_gpu_stream --quick "$f" >"$OUT/stream_test_a3b.log" 2>&1; grep -E "FAIL|passed" "$OUT/stream_test_a3b.log"; }
  echo "== $shape: all resident, then --gpu-mem $gib --cold stream ($(( $(date +%s) - t0 )) s)"
  $B -m "$f" --device cuda --runs $RUNS --gen $GEN --json "$OUT/decode-$shape-resident.json" 2>&1 | tail -1
  $B -m "$f" --device cuda --runs $RUNS --gen $GEN --gpu-mem $gib --cold stream --json "$OUT/decode-$shape-stream.json" 2>&1 | tee "$OUT/decode-$shape-stream.log" | grep -E "^gpu|^\|" | grep -v -- "---"
done
echo "== all done in $(( $(date +%s) - t0 )) s"
