#!/usr/bin/env python3
"""Sums a HOTMOE_KTRACE timeline (the "kt" lines a -DHOTMOE_KTRACE=ON build prints for one decode
step, gpu/launch.cuh) per kernel shape: how many launches, the mean time from its first block's
return from the wait to the next kernel's (its slot on the step's critical path when both are on
the step's stream), how long before that its first block was placed (what PDL overlapped), and
the spread of its blocks' returns. Then one layer's sequence (the middle one); where a kernel marks
its blocks' ends (HM_KT_END, the last two columns), also its work (first block past the wait to the
last block's end) and the gap from that end to the next kernel's first return from its wait.
With --vs LOG2 (and N_LAYER), instead: each kernel of a MoE layer, in the step's order, as the mean
over every full MoE layer of both logs side by side (two cards, or two builds), and the difference.
    python3 tools/device/ktrace.py LOG [N_LAYER] [--vs LOG2]"""
import sys
from collections import defaultdict


def load(path):
    rows, ends = [], []
    for line in open(path, errors="replace"):
        p = line.split()
        if len(p) in (8, 10) and p[0] == "kt" and p[1].isdigit():
            rows.append((int(p[2]), int(p[3]), int(p[4]), float(p[5]), float(p[6]), float(p[7])))
            ends.append((float(p[8]), float(p[9])) if len(p) == 10 and p[9] != "-" else None)
    if not rows:
        sys.exit("no kt lines in " + path)
    return rows, ends


def mid_layer(rows, n_layer):
    """a MoE layer's kernel count (the dense layer and the head have fewer) and the middle
    layer's first index"""
    per = round(len(rows) / n_layer)
    return per, (n_layer // 2) * per


def layer_means(rows, ends, n_layer):
    """per kernel of a MoE layer (the middle layer's sequence of shapes), the means over the
    layers whose kernels have that sequence: to next, work (None without ends), blocks spread,
    placed early; and how many layers matched"""
    per, mid = mid_layer(rows, n_layer)
    shape = [rows[i][:2] for i in range(mid, mid + per)]
    acc = [[0.0, 0.0, 0.0, 0.0, 0] for _ in range(per)]
    n = 0
    for s in range(0, len(rows) - per):
        if [rows[s + k][:2] for k in range(per)] != shape:
            continue
        n += 1
        for k in range(per):
            i = s + k
            g, b, nb, arr, r0, r1 = rows[i]
            a = acc[k]
            a[0] += rows[i + 1][4] - r0; a[2] += r1 - r0; a[3] += r0 - arr
            if ends[i]: a[1] += ends[i][1] - r0; a[4] += 1
    return shape, [(a[0] / n, a[1] / a[4] if a[4] else None, a[2] / n, a[3] / n) for a in acc], n


args, vs = sys.argv[1:], None
if "--vs" in args:
    j = args.index("--vs")
    if j + 1 >= len(args):
        sys.exit("--vs needs a second log")
    vs = args[j + 1]
    del args[j:j + 2]
rows, ends = load(args[0])
n_layer = int(args[1]) if len(args) > 1 else 0
if vs:
    if not n_layer:
        sys.exit("--vs needs N_LAYER")
    sa, ma, na = layer_means(rows, ends, n_layer)
    rows2, ends2 = load(vs)
    sb, mb, nb_ = layer_means(rows2, ends2, n_layer)
    if sa != sb:
        sys.exit("the two logs' layers are not the same kernels: %s against %s" % (sa, sb))
    f = lambda v: f"{v:7.2f}" if v is not None else "      -"
    print(f"means over {na} and {nb_} MoE layers (us): A = {args[0]}, B = {vs}")
    print(f"{'grid x block':>16} | {'to next A':>9} {'B':>7} {'B-A':>7} | {'work A':>7} {'B':>7} {'B-A':>7} | {'spread A':>8} {'B':>7} | {'early A':>7} {'B':>7}")
    tot = [0.0, 0.0]
    for (g, b), x, y in zip(sa, ma, mb):
        tot[0] += x[0]; tot[1] += y[0]
        dw = y[1] - x[1] if x[1] is not None and y[1] is not None else None
        print(f"{g:>8} x {b:<5} | {x[0]:9.2f} {y[0]:7.2f} {y[0] - x[0]:7.2f} | {f(x[1])} {f(y[1])} {f(dw)} | {x[2]:8.2f} {y[2]:7.2f} | {x[3]:7.2f} {y[3]:7.2f}")
    print(f"{'a layer':>16} | {tot[0]:9.2f} {tot[1]:7.2f} {tot[1] - tot[0]:7.2f} |")
    sys.exit(0)
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
    per, mid = mid_layer(rows, n_layer)
    print(f"\none layer ({per} kernels from index {mid}):")
    for i in range(mid, min(mid + per, len(rows) - 1)):
        g, b, nb, arr, r0, r1 = rows[i]
        nxt = rows[i + 1][4]
        e = ends[i]
        tail = f"  work {e[1] - r0:6.2f} gap {nxt - e[1]:6.2f}" if e else ""
        print(f"  {i:4d} {g:6d} x {b:<5d} placed {arr:9.2f} waited {r0:9.2f} .. {r1:9.2f}  next {nxt - r0:6.2f}{tail}")
