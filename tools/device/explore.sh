set -uo pipefail
OUT=${OUT:-/tmp/o}; source tools/device/env.sh
t0=$(date +%s)
cmake -S . -B build-dev -DHOTMOE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-dev -j16 >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "== built in $(( $(date +%s) - t0 )) s"
(cd build-dev && ctest --output-on-failure -j8 -E "test_server|test_gpu_model" >"$OUT/ctest.log" 2>&1); grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log"
grep -E "FAIL" "$OUT/ctest.log" | head -20
./build-dev/tests/test_gpu_gemv --bench >"$OUT/gpu_gemv.log" 2>&1; cat "$OUT/gpu_gemv.log" | tail -45
M=/tmp/m; mkdir -p $M
for shape in a3b air; do
 rm -f $M/*.gguf; ./build-dev/hotmoe-gen --shape $shape --seed 1 -o $M/$shape.gguf > $OUT/gen-$shape.log 2>&1
 for mode in 0 1; do HOTMOE_GEMV_MODE=$mode ./build-dev/bench_decode -m $M/$shape.gguf --device cuda --runs 1 2>&1 | tail -1; done
 HOTMOE_GEMV_MODE=1 HOTMOE_GPU_PROFILE=1 ./build-dev/bench_decode -m $M/$shape.gguf --device cuda --runs 1 --prompt 16 --gen 32 2>&1 | grep -A14 "gpu profile"
 echo "== $shape done $(( $(date +%s) - t0 )) s"
done
