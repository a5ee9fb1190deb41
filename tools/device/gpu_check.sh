#!/usr/bin/env bash
# ON THE DEVICE, in one `run` call: build (Release, sm_90), run every test (GPU ones included),
# the GPU kernel benchmark, the model-level GPU-vs-CPU check and the decode benchmarks; logs and
# JSON under $OUT, a short table printed last.
#   run: bash tools/device/gpu_check.sh [quick | "a3b air"]     (carry: .deps)
set -uo pipefail
MODE=${1:-quick}
OUT=${OUT:-/tmp/hotmoe-out}; mkdir -p "$OUT"
source tools/device/env.sh
nproc; nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader
t0=$(date +%s)
cmake -S . -B build-dev -DHOTMOE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-dev -j"$(nproc)" >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "== built in $(( $(date +%s) - t0 )) s"
(cd build-dev && ctest --output-on-failure -j4 >"$OUT/ctest.log" 2>&1); grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log"
grep -E "^(PASS|FAIL)" build-dev/Testing/Temporary/LastTest.log | grep -E "FAIL" | head -20
./build-dev/tests/test_gpu_gemv --bench >"$OUT/gpu_gemv_bench.log" 2>&1; tail -25 "$OUT/gpu_gemv_bench.log"
if [ -x build-dev/bench_gemv ]; then ./build-dev/bench_gemv --json "$OUT/cpu_gemv.json" >"$OUT/cpu_gemv.log" 2>&1; tail -25 "$OUT/cpu_gemv.log"; fi
# ---- models: generated here when missing (never committed), then GPU-vs-CPU and decode benchmarks
M=${HOTMOE_MODELS:-/tmp/hotmoe-models}; mkdir -p "$M"
G=./build-dev/hotmoe-gen
for mix in f32 q8_0 q4_0 q4_k_m q6_k q5_k_m q3_k_m q2_k; do
  [ -f "$M/tiny-$mix.gguf" ] || $G --shape tiny --mix $mix --seed 1 -o "$M/tiny-$mix.gguf" >/dev/null 2>&1
done
[ -f "$M/tinyglm-q4_k_m.gguf" ] || $G --shape tinyglm --mix q4_k_m --seed 2 -o "$M/tinyglm-q4_k_m.gguf" >/dev/null 2>&1
./build-dev/tests/test_gpu_model "$M"/tiny-*.gguf "$M"/tinyglm-*.gguf >"$OUT/gpu_model.log" 2>&1; grep -E "FAIL|passed" "$OUT/gpu_model.log"
if [ "$MODE" != quick ]; then
  for shape in $MODE; do
    f="$M/$shape.gguf"
    if [ ! -f "$f" ]; then t1=$(date +%s); $G --shape $shape --seed 1 -o "$f" >"$OUT/gen-$shape.log" 2>&1; echo "== generated $shape ($(du -h "$f" | cut -f1)) in $(( $(date +%s) - t1 )) s"; fi
    ./build-dev/bench_decode -m "$f" --device cuda --runs 3 --json "$OUT/decode-$shape-cuda.json" 2>&1 | tee "$OUT/decode-$shape.log" | tail -3
  done
fi
echo "== all done in $(( $(date +%s) - t0 )) s"
