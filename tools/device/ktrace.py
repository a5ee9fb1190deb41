#!/usr/bin/env python3
"""Sums a HOTMOE_KTRACE timeline (the "kt" lines a -DHOTMOE_KTRACE=ON build prints for one decode
step, gpu/launch.cuh) per kernel shape: how many launches, the mean time from its first block's
return from the wait to the next kernel's (its slot on the step's critical path when both are on
the step's stream), how long before that its first block was placed (what PDL overlapped), and
the spread of its blocks' returns. Then one layer's sequence (the middle one); where a kernel marks
its blocks' ends (HM_KT_END, the last two columns), also its work (first block past the wait to the
last block's end) and the gap from that end to the next kernel's first return from its wait.
    python3 tools/device/ktrace.py LOG [N_LAYER]"""
import sys
from collections import defaultdict

rows, ends = [], []
for line in open(sys.argv[1], errors="replace"):
    p = line.split()
    if len(p) in (8, 10) and p[0] == "kt" and p[1].isdigit():
        rows.append((int(p[2]), int(p[3]), int(p[4]), float(p[5]), float(p[6]), float(p[7])))
        ends.append((float(p[8]), float(p[9])) if len(p) == 10 and p[9] != "-" else None)
if not rows:
    sys.exit("no kt lines in " + sys.argv[1])
n_layer = int(sys.argv[2]) if len(sys.argv) > 2 else 0
step = rows[-1][4] - rows[0][4]
print(f"{len(rows)} kernels, {step:.1f} us from the first kernel's wait to the last one's"
      + (f" ({step / n_layer:.2f} us a layer)" if n_layer else ""))
agg = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
for i, (g, b, nb, arr, r0, r1) in enumerate(rows):
    nxt = rows[i + 1][4] if i + 1 < len(rows) else r0
    a = agg[(g, b)]
    a[0] += 1; a[1] += nxt - r0; a[2] += r0 - arr; a[3] += r1 - r0
print(f"{'grid x block':>16} {'launches':>8} {'to next us':>10} {'placed early us':>15} {'blocks spread us':>16} {'total us':>9}")
for (g, b), (n, d, e, sp) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{g:>8} x {b:<5} {n:>8} {d / n:>10.2f} {e / n:>15.2f} {sp / n:>16.2f} {d:>9.1f}")
if n_layer:
    per = round(len(rows) / n_layer)   # a MoE layer's kernels (the dense layer and the head have fewer)
    mid = (n_layer // 2) * per
    print(f"\none layer ({per} kernels from index {mid}):")
    for i in range(mid, min(mid + per, len(rows) - 1)):
        g, b, nb, arr, r0, r1 = rows[i]
        nxt = rows[i + 1][4]
        e = ends[i]
        tail = f"  work {e[1] - r0:6.2f} gap {nxt - e[1]:6.2f}" if e else ""
        print(f"  {i:4d} {g:6d} x {b:<5d} placed {arr:9.2f} waited {r0:9.2f} .. {r1:9.2f}  next {nxt - r0:6.2f}{tail}")
