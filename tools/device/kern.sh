#!/usr/bin/env bash
# ON THE DEVICE, one `run` call for the decode-kernel work: build the GPU targets, the GPU unit
# tests (ops, the q8 GEMVs, model-level on tiny quantized models), air and a3b decode (a3b also
# without PDL), then the mode-1 GEMV benchmark. The big models need ~53 / ~19 GB of free disk in /tmp (df is printed; a full disk
# shows as a failed generation). Logs under $OUT. The ungraphed per-op profile is left out: at these kernel
# sizes it measures the CPU's launch rate, not the GPU.
#   run: bash tools/device/kern.sh   (carry: .deps)
set -uo pipefail
OUT=${OUT:-/tmp/o}; mkdir -p "$OUT"; source tools/device/env.sh
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
rm -f $M/a3b.gguf $M/air.gguf; df -h /tmp | tail -1
$G --shape air --seed 1 -o $M/air.gguf > $OUT/gen-air.log 2>&1 || { rm -f $M/air.gguf; echo "full air does not fit: 112 experts (same bytes per token)"; $G --shape air --custom experts=112 --seed 1 -o $M/air.gguf > $OUT/gen-air.log 2>&1; }
tail -1 $OUT/gen-air.log
echo "air:"; ./build-dev/bench_decode -m $M/air.gguf --device cuda --runs 1 2>&1 | tail -1
echo "== air done $(( $(date +%s) - t0 )) s"
rm -f $M/air.gguf; $G --shape a3b --seed 1 -o $M/a3b.gguf > $OUT/gen-a3b.log 2>&1
tail -1 $OUT/gen-a3b.log
echo "a3b:"; ./build-dev/bench_decode -m $M/a3b.gguf --device cuda --runs 1 2>&1 | tail -1
echo "a3b, no PDL:"; HOTMOE_PDL=0 ./build-dev/bench_decode -m $M/a3b.gguf --device cuda --runs 1 2>&1 | tail -1
echo "== a3b done $(( $(date +%s) - t0 )) s"
./build-dev/tests/test_gpu_gemv --bench 1 >"$OUT/gemv_bench.log" 2>&1; grep -E "copy|^Q|^MX|^IQ" "$OUT/gemv_bench.log"
