#!/usr/bin/env bash
# ON THE DEVICE, one `run` call for the decode-kernel work: build the GPU targets, the GPU unit
# tests (ops, GEMV in both modes, model-level on tiny quantized models), the GEMV benchmark, then
# a3b and air: decode benchmark (default mode) and a per-op profile. Logs under $OUT.
#   run: bash tools/device/kern.sh [skip-bench] [shapes...]   (carry: .deps)
set -uo pipefail
OUT=${OUT:-/tmp/o}; mkdir -p "$OUT"; source tools/device/env.sh
BENCH=1; [ "${1:-}" = skip-bench ] && { BENCH=0; shift; }
SHAPES=${*:-a3b air}
t0=$(date +%s)
cmake -S . -B build-dev -DHOTMOE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-dev -j16 --target test_gpu_gemv test_gpu_ops test_gpu_model bench_decode hotmoe-gen >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "== built in $(( $(date +%s) - t0 )) s"
./build-dev/tests/test_gpu_ops >"$OUT/ops.log" 2>&1; grep -E "^FAIL" "$OUT/ops.log" | head; tail -1 "$OUT/ops.log"
./build-dev/tests/test_gpu_gemv >"$OUT/gemv.log" 2>&1; grep -E "^FAIL" "$OUT/gemv.log" | head; tail -1 "$OUT/gemv.log"
M=/tmp/m; mkdir -p $M; G=./build-dev/hotmoe-gen
for mix in q4_0 q4_k_m q3_k_m q6_k mxfp4; do [ -f "$M/tiny-$mix.gguf" ] || $G --shape tiny --mix $mix --seed 1 -o "$M/tiny-$mix.gguf" >/dev/null 2>&1; done
[ -f "$M/tinyglm-q3_k_m.gguf" ] || $G --shape tinyglm --mix q3_k_m --seed 2 -o "$M/tinyglm-q3_k_m.gguf" >/dev/null 2>&1
./build-dev/tests/test_gpu_model "$M"/tiny-*.gguf "$M"/tinyglm-*.gguf >"$OUT/gpu_model.log" 2>&1; grep -E "FAIL" "$OUT/gpu_model.log" | head; tail -1 "$OUT/gpu_model.log"
echo "== tests done $(( $(date +%s) - t0 )) s"
[ $BENCH = 1 ] && { ./build-dev/tests/test_gpu_gemv --bench >"$OUT/gemv_bench.log" 2>&1; grep -vE "^$" "$OUT/gemv_bench.log" | tail -22; }
for shape in $SHAPES; do
  rm -f $M/a3b.gguf $M/air.gguf; $G --shape $shape --seed 1 -o $M/$shape.gguf > $OUT/gen-$shape.log 2>&1
  ./build-dev/bench_decode -m $M/$shape.gguf --device cuda --runs 1 2>&1 | tail -1
  HOTMOE_GPU_PROFILE=1 ./build-dev/bench_decode -m $M/$shape.gguf --device cuda --runs 1 --prompt 16 --gen 32 2>&1 | grep -A14 "gpu profile"
  echo "== $shape done $(( $(date +%s) - t0 )) s"
done
