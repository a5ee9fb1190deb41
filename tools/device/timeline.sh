#!/usr/bin/env bash
# ON THE DEVICE, after a build in build-dev and with the model generated: where a decode step's
# time goes, kernel by kernel, in graph mode. Nsight Systems traces the graph's kernel nodes
# (--cuda-graph-trace=node) over a short bench_decode; timeline.py prints per kernel the GPU time
# per step, the step's wall time against the union of its kernels (the rest: gaps), one layer's
# sequence. Without Nsight Systems, Nsight Compute times 700 launches of one step each alone.
# Output under $OUT/timeline-*.
#   bash tools/device/timeline.sh MODEL.gguf N_LAYER TAG [bench_decode args...]
set -uo pipefail
OUT=${OUT:-/tmp/hotmoe-out}; m=$1; nl=$2; tag=$3; shift 3
NSYS=${NSYS:-$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)}
if [ ! -x "$NSYS" ]; then   # Nsight Compute instead: each kernel of one step alone (serialized), no gaps
  NCU=${NCU:-/usr/local/cuda/bin/ncu}
  timeout 240 "$NCU" --metrics gpu__time_duration.sum --cache-control none --clock-control none --launch-skip ${NCU_SKIP:-4000} \
    --launch-count ${NCU_COUNT:-700} --csv --print-units base ./build-dev/bench_decode -m "$m" --device cuda --runs 1 --gen 24 "$@" \
    >"$OUT/timeline-$tag-ncu.csv" 2>"$OUT/timeline-$tag-ncu.err"
  echo "-- timeline $tag (no nsys; ncu, kernels alone) rc=$?"
  python3 tools/device/timeline.py ncu "$OUT/timeline-$tag-ncu.csv" | tee "$OUT/timeline-$tag.txt" | head -30
  exit 0
fi
rm -f /tmp/tl-$tag.nsys-rep /tmp/tl-$tag*.csv
timeout 200 "$NSYS" profile -t cuda --cuda-graph-trace=node -o /tmp/tl-$tag ./build-dev/bench_decode -m "$m" --device cuda --runs 1 --gen 24 "$@" \
  >"$OUT/timeline-$tag-nsys.log" 2>&1 || { echo "-- timeline $tag: nsys rc=$?"; tail -5 "$OUT/timeline-$tag-nsys.log"; }
timeout 120 "$NSYS" stats -r cuda_gpu_trace -f csv -o /tmp/tl-$tag /tmp/tl-$tag.nsys-rep >>"$OUT/timeline-$tag-nsys.log" 2>&1
csv=$(ls /tmp/tl-$tag*cuda_gpu_trace*.csv 2>/dev/null | head -1)
[ -n "$csv" ] || { echo "-- timeline $tag: no trace csv"; tail -5 "$OUT/timeline-$tag-nsys.log"; exit 0; }
python3 tools/device/timeline.py nsys "$csv" "$nl" >"$OUT/timeline-$tag.txt" 2>&1
echo "-- timeline $tag"; head -30 "$OUT/timeline-$tag.txt"
