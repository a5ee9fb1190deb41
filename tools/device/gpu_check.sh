#!/usr/bin/env bash
# ON THE DEVICE, in one `run` call: build (Release, sm_90), every test (GPU ones included), the
# model-level GPU-vs-CPU check on generated models of every quant type, the GPU and CPU GEMV
# benchmarks, then for each named shape: generate it (when missing), --stats, and the decode
# benchmark (plus a per-op profile). Logs and JSON under $OUT; a short table printed last.
#   run: bash tools/device/gpu_check.sh [quick | "a3b air"]     (carry: .deps, and .whl for the gguf reader check)
set -uo pipefail
MODE=${1:-quick}
OUT=${OUT:-/tmp/hotmoe-out}; mkdir -p "$OUT"
source tools/device/env.sh
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
nproc; nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader
t0=$(date +%s)
cmake -S . -B build-dev -DHOTMOE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-dev -j"$(nproc)" >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "== built in $(( $(date +%s) - t0 )) s"
(cd build-dev && ctest --output-on-failure -j8 -E test_server >"$OUT/ctest.log" 2>&1); grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log"
grep -E "^FAIL" "$OUT/ctest.log" | head -20
[ -n "${LEAN:-}" ] || ./build-dev/tests/test_gpu_gemv --bench >"$OUT/gpu_gemv.log" 2>&1; grep -E "copy:|^Q4_K|^Q8_0|^Q6_K|^Q3_K|^F16" "$OUT/gpu_gemv.log"

M=${HOTMOE_MODELS:-/tmp/hotmoe-models}; mkdir -p "$M"
G=./build-dev/hotmoe-gen
for mix in f32 bf16 q8_0 q4_0 q4_k_m q6_k q5_k_m q3_k_m q2_k mxfp4 iq4_xs; do
  [ -f "$M/tiny-$mix.gguf" ] || $G --shape tiny --mix $mix --seed 1 -o "$M/tiny-$mix.gguf" >/dev/null 2>&1
done
[ -f "$M/tinyglm-q4_k_m.gguf" ] || $G --shape tinyglm --mix q4_k_m --seed 2 -o "$M/tinyglm-q4_k_m.gguf" >/dev/null 2>&1
./build-dev/tests/test_gpu_model "$M"/tiny-*.gguf "$M"/tinyglm-*.gguf >"$OUT/gpu_model.log" 2>&1; grep -E "FAIL|passed" "$OUT/gpu_model.log"
[ -n "${LEAN:-}" ] || OMP_PROC_BIND=spread OMP_PLACES=cores ./build-dev/bench_gemv --size 2048 --runs 3 --threads 16 --isa avx512 --types Q4_K,Q8_0 \
  --json "$OUT/cpu_gemv.json" >"$OUT/cpu_gemv.log" 2>&1; tail -6 "$OUT/cpu_gemv.log"

for shape in $([ "$MODE" = quick ] || echo $MODE); do
  f="$M/$shape.gguf"
  df -h /tmp | tail -1
  if [ ! -f "$f" ]; then
    rm -f "$M"/a3b.gguf "$M"/air.gguf   # the disk holds one big model at a time
    t1=$(date +%s); $G --shape $shape --seed 1 -o "$f" >"$OUT/gen-$shape.log" 2>&1
    echo "== generated $shape ($(du -h "$f" | cut -f1)) in $(( $(date +%s) - t1 )) s: $(tail -1 "$OUT/gen-$shape.log")"
  fi
  [ -n "${LEAN:-}" ] || python3 -c "import gguf,sys; r=gguf.GGUFReader(sys.argv[1]); print('gguf reader:', len(r.tensors), 'tensors,', sorted({t.tensor_type.name for t in r.tensors}))" "$f" 2>&1 | tail -1
  [ -n "${LEAN:-}" ] || { timeout 240 $G --stats-only "$f" --stats-tokens 32 >"$OUT/stats-$shape.log" 2>&1; tail -8 "$OUT/stats-$shape.log"; }
  ./build-dev/bench_decode -m "$f" --device cuda --runs 3 --json "$OUT/decode-$shape.json" 2>&1 | tee "$OUT/decode-$shape.log" | tail -1
  HOTMOE_GPU_PROFILE=1 ./build-dev/bench_decode -m "$f" --device cuda --runs 1 --prompt 16 --gen 32 2>&1 | grep -A14 "gpu profile"
done
echo "== all done in $(( $(date +%s) - t0 )) s"
