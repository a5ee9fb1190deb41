#!/usr/bin/env bash
# ON THE DEVICE, after a build in build-dev and with the model generated: where a decode step's
# time goes, kernel by kernel, in graph mode. Nsight Systems traces the graph's kernel nodes
# (--cuda-graph-trace=node) over a short bench_decode; timeline.py prints per kernel the GPU time
# per step, the step's wall time against the union of its kernels (the rest: gaps), one layer's
# sequence. Output under $OUT/timeline-*.
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
  python3 - "$OUT/timeline-$tag-ncu.csv" <<'PY' | tee "$OUT/timeline-$tag.txt" | head -30
import csv, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
agg, n = {}, 0
for r in csv.DictReader(lines):
    if r.get('Metric Name') != 'gpu__time_duration.sum':
        continue
    k = r['Kernel Name'].replace('void ', '')
    k = k[:k.rindex('>') + 1] if '>' in k else k.split('(')[0]
    a = agg.setdefault(k.replace('(int)', '')[:70], [0, 0.0]); a[0] += 1; a[1] += float(r['Metric Value'].replace(',', '')); n += 1
tot = sum(v[1] for v in agg.values())
print(f'{n} kernels profiled alone, {tot / 1000:.1f} us in all')
for k, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f'| {k} | {c} | {t / 1000:.1f} us | {t / c / 1000:.2f} us |')
PY
  exit 0
fi
rm -f /tmp/tl-$tag.nsys-rep /tmp/tl-$tag*.csv
timeout 200 "$NSYS" profile -t cuda --cuda-graph-trace=node -o /tmp/tl-$tag ./build-dev/bench_decode -m "$m" --device cuda --runs 1 --gen 24 "$@" \
  >"$OUT/timeline-$tag-nsys.log" 2>&1 || { echo "-- timeline $tag: nsys rc=$?"; tail -5 "$OUT/timeline-$tag-nsys.log"; }
timeout 120 "$NSYS" stats -r cuda_gpu_trace -f csv -o /tmp/tl-$tag /tmp/tl-$tag.nsys-rep >>"$OUT/timeline-$tag-nsys.log" 2>&1
csv=$(ls /tmp/tl-$tag*cuda_gpu_trace*.csv 2>/dev/null | head -1)
[ -n "$csv" ] || { echo "-- timeline $tag: no trace csv"; tail -5 "$OUT/timeline-$tag-nsys.log"; exit 0; }
python3 tools/device/timeline.py "$csv" "$nl" >"$OUT/timeline-$tag.txt" 2>&1
echo "-- timeline $tag"; head -30 "$OUT/timeline-$tag.txt"
