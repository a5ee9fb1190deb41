#!/usr/bin/env bash
# ON THE DEVICE, in one `run` call: build (Release, sm_90, outside the tree so a warm machine
# rebuilds incrementally), the prefill test on the fixtures and generated tiny models, then the
# prefill benchmark (BENCH.md: 8,192 and 32,768-token prompts, the default chunk, median of 3) on each
# named shape, each phase under a time guard. Logs and JSON under $OUT; a short table last.
#   run: cd .wt/prefill && ln -sfn ../../.deps .deps && source tools/device/env.sh && bash tools/device/prefill_check.sh "a3b"
set -uo pipefail
SHAPES=${1:-a3b}
SIZES=${SIZES:-8192,32768}
BUDGET=${BUDGET:-225}          # seconds this script may take
OUT=${OUT:-/tmp/hotmoe-out}; mkdir -p "$OUT"
B=${BUILD:-/tmp/pf-build}
M=${HOTMOE_MODELS:-/tmp/hotmoe-models}; mkdir -p "$M"
t0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader
if [ -n "${TARGETS:-}" ] && type hm_prebuilt >/dev/null 2>&1 && hm_prebuilt $TARGETS; then B=build-dev   # PREBUILT=1 (env.sh)
else
  cmake -S . -B "$B" -DHOTMOE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
  cmake --build "$B" -j"$(nproc)" ${TARGETS:+--target $TARGETS} >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
fi
echo "== built in $(( $(date +%s) - t0 )) s"

G=$B/hotmoe-gen
for mix in q4_k_m q8_0 q3_k_m f16 mxfp4; do
  [ -f "$M/tiny-$mix.gguf" ] || $G --shape tiny --mix $mix --seed 1 -o "$M/tiny-$mix.gguf" >/dev/null 2>&1
done
for mix in q4_k_m q3_k_m; do
  [ -f "$M/tinyglm-$mix.gguf" ] || $G --shape tinyglm --mix $mix --seed 2 -o "$M/tinyglm-$mix.gguf" >/dev/null 2>&1
done
timeout 90 "$B"/tests/test_gpu_prefill "$M"/tiny-*.gguf "$M"/tinyglm-*.gguf >"$OUT/test_gpu_prefill.log" 2>&1
echo "== test_gpu_prefill rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "^FAIL" "$OUT/test_gpu_prefill.log" | head -20
grep -E "grouped GEMM" "$OUT/test_gpu_prefill.log"
tail -2 "$OUT/test_gpu_prefill.log"
if grep -E "^FAIL grouped GEMM.*: 2 stages" "$OUT/test_gpu_prefill.log" >/dev/null; then export HOTMOE_PREFILL_MOE=cublas; echo "== grouped GEMM FAILED: benchmarks run with HOTMOE_PREFILL_MOE=cublas"; fi
if [ -n "${CTEST:-}" ] && [ "$(left)" -gt 120 ]; then
  (cd "$B" && timeout 60 ctest -j8 -R "test_gpu_model|test_gpu_ops" --output-on-failure >"$OUT/ctest_gpu.log" 2>&1); grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest_gpu.log"
fi

for shape in $SHAPES; do
  f="$M/$shape.gguf"
  if [ ! -f "$f" ]; then
    rm -f "$M"/a3b.gguf "$M"/air.gguf   # the disk holds one big model at a time
    t1=$(date +%s); $G --shape $shape --seed 1 -o "$f" >"$OUT/gen-$shape.log" 2>&1
    echo "== generated $shape ($(du -h "$f" | cut -f1)) in $(( $(date +%s) - t1 )) s"
  fi
  lim=$(( $(left) - 5 )); [ $lim -lt 20 ] && { echo "== no time left for $shape"; break; }
  timeout $lim "$B"/bench_decode -m "$f" --device cuda --prefill "$SIZES" --runs 3 --json "$OUT/prefill-$shape.json" \
    >"$OUT/prefill-$shape.log" 2>&1
  echo "== bench $shape rc=$? at $(( $(date +%s) - t0 )) s"
  lim=$(( $(left) - 5 ))
  if [ $lim -gt 25 ] && [ -z "${NO_PROFILE:-}" ]; then
    HOTMOE_PREFILL_PROFILE=1 timeout $lim "$B"/bench_decode -m "$f" --device cuda --prefill 8192 --runs 1 >"$OUT/profile-$shape.log" 2>&1
    grep -A14 "profile: 8192" "$OUT/profile-$shape.log" | head -16
  fi
  # the other paths at 8K, for the ratios (VARIANTS=1): one cuBLAS GEMM per expert; the attention
  # on the F32 cache; chunks of 4096 (the experts dequantized twice for 8K instead of once).
  # PF_SIZES: the prompt sizes of the variants (8192); e.g. short pieces with HOTMOE_PREFILL_MIN=1
  # (always batched) against HOTMOE_PREFILL_MIN=100000 (always token by token)
  for v in ${PF_VARIANTS:-HOTMOE_PREFILL_MOE=cublas HOTMOE_PREFILL_ATTN=mma HOTMOE_PREFILL_CHUNK=4096}; do
    lim=$(( $(left) - 5 ))
    [ -n "${VARIANTS:-}" ] && [ $lim -gt 25 ] || continue
    env $v timeout $lim "$B"/bench_decode -m "$f" --device cuda --prefill ${PF_SIZES:-8192} --runs 3 >"$OUT/prefill-$shape-${v//=/}.log" 2>&1
    echo "== variant $v:"; grep -E "^\| /" "$OUT/prefill-$shape-${v//=/}.log"
  done
done
echo "== all done in $(( $(date +%s) - t0 )) s"
for shape in $SHAPES; do grep -E "^\|" "$OUT/prefill-$shape.log"; tail -3 "$OUT/prefill-$shape.log" | grep -v "^|"; done
