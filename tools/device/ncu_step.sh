#!/usr/bin/env bash
# ON THE DEVICE, after a build in build-dev and with the model generated: Nsight Compute on the
# decode kernels matching REGEX inside bench_decode (graph nodes, steady decode): speed of light,
# warp stalls, occupancy, launch, source counters. Output under $OUT/ncu-step-TAG.txt, summary printed.
#   bash tools/device/ncu_step.sh MODEL.gguf TAG REGEX [SKIP] [COUNT] [bench_decode args...]
# NCU_EXTRA: more ncu options, e.g. "--cache-control none --clock-control none" (closer to the graph's
# conditions: warm L2, free clocks). REGEX matches ncu's demangled names, which spell template
# arguments as (int)2, (bool)0: e.g. "gemv_q8_kernel<Q8W_Q3_KR".
set -uo pipefail
OUT=${OUT:-/tmp/hotmoe-out}; NCU=${NCU:-/usr/local/cuda/bin/ncu}
m=$1; tag=$2; re=$3; skip=${4:-200}; count=${5:-3}; shift 5 2>/dev/null || shift $#
timeout ${NCU_S:-200} "$NCU" --kernel-name-base demangled --kernel-name "regex:$re" --launch-skip $skip --launch-count $count \
  --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
  --section SchedulerStats --section SourceCounters ${NCU_EXTRA:-} \
  ./build-dev/bench_decode -m "$m" --device cuda --runs 1 --gen 32 "$@" >"$OUT/ncu-step-$tag.txt" 2>&1
echo "== ncu step $tag rc=$?"
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Grid Size|Block Size|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall|ERR|error" "$OUT/ncu-step-$tag.txt" | head -${NCU_LINES:-60}
