#!/usr/bin/env bash
# ON THE DEVICE (after a build in build-dev): Nsight Compute on the q8 decode GEMV kernels of
# test_gpu_gemv --bench, one launch of each shape asked for: speed of light (DRAM and SM
# throughput), warp stall reasons, occupancy. Output under $OUT/ncu-*.txt, summary lines printed.
#   bash tools/device/ncu_gemv.sh "Q4_K:dense2 Q3_K:gu"      (dense1 14336x4096, dense2 4096x14336, gu / down: the MoE bench)
set -uo pipefail
OUT=${OUT:-/tmp/hotmoe-out}; NCU=${NCU:-/usr/local/cuda/bin/ncu}
for spec in ${1:-"Q4_K:dense2 Q3_K:gu"}; do
  IFS=: read -r t what <<<"$spec"
  case $what in   # demangled names read "gemv_q8_kernel<Q8W_Q3_K, (int)2, (int)1, (int)1>"; launches of the matching kernel to skip: 3 warm-ups + 100 timed per dense shape
    dense1) re="gemv_q8_kernel<.*, \\(int\\)1, \\(int\\)[0-9]+, \\(int\\)1>"; skip=5 ;;
    dense2) re="gemv_q8_kernel<.*, \\(int\\)1, \\(int\\)[0-9]+, \\(int\\)1>"; skip=108 ;;
    gu) re="gemv_q8_kernel<.*, \\(int\\)2, \\(int\\)[0-9]+, \\(int\\)1>"; skip=5 ;;
    down) re="gemv_q8_kernel<.*, \\(int\\)1, \\(int\\)[0-9]+, \\(int\\)1>"; skip=210 ;;
  esac
  timeout 90 "$NCU" --kernel-name-base demangled --kernel-name "regex:$re" --launch-skip $skip --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
    ./build-dev/tests/test_gpu_gemv --bench 1 "$t" >"$OUT/ncu-$t-$what.txt" 2>&1
  echo "== ncu $t $what rc=$?"
  grep -E "gemv_q8_kernel|Duration|DRAM Throughput|Memory Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|L1/TEX Hit|Mem Pipes|Compute \(SM\)|Achieved Occupancy|Registers Per|Grid Size|Stall|Warp Cycles Per Issued|Issued Warp|ERR|error" "$OUT/ncu-$t-$what.txt" | head -30
done
