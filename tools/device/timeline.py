#!/usr/bin/env python3
"""Summarize an Nsight Systems kernel trace of decode (nsys stats -r cuda_gpu_trace -f csv):
per kernel name the launches and GPU time per decode step, the step's wall time against the
union of its kernels' intervals (the rest is gaps between kernels), and one layer's sequence.
usage: timeline.py TRACE.csv N_LAYER"""
import csv, re, sys

rows = list(csv.DictReader(open(sys.argv[1])))
nl = int(sys.argv[2])
def col(r, *names):
    for n in names:
        for k in r:
            if k.startswith(n):
                return r[k]
    return ''
K = []
for r in rows:
    name = col(r, 'Name')
    if not name or name.startswith('[CUDA'):
        continue
    s, d = int(float(col(r, 'Start'))), int(float(col(r, 'Duration')))
    K.append((s, d, name, col(r, 'Strm')))
K.sort()
def short(n):
    n = n.replace('void ', '')
    n = n[:n.rindex('>') + 1] if '>' in n else n.split('(')[0]
    return n.replace('(int)', '').replace('(bool)', '')[:70]
att = [k for k in K if 'k_attn_gqa' in k[2]]
if not att:
    sys.exit('no decode attention kernels in the trace')
steps = len(att) // nl
if steps < 4:
    sys.exit(f'{len(att)} decode attention launches: fewer than 4 steps of {nl} layers')
# step i: from layer 0's attention of step i to that of step i + 1 (host time between steps included);
# steps 1 .. steps - 2 (the first follows the graph's upload, the last has no successor)
use = steps - 2
t0, t1 = att[nl][0], att[(steps - 1) * nl][0]
W = [k for k in K if t0 <= k[0] < t1]
span = t1 - t0
iv = sorted((k[0], k[0] + k[1]) for k in W)
busy, cs, ce = 0, None, None
for a, b in iv:
    if ce is None or a > ce:
        if ce is not None:
            busy += ce - cs
        cs, ce = a, b
    else:
        ce = max(ce, b)
if ce is not None:
    busy += ce - cs
print(f'decode steps in window: {use}, wall {span / use / 1000:.1f} us/step, kernels busy (union) {busy / use / 1000:.1f} us/step, '
      f'idle gaps {(span - busy) / use / 1000:.1f} us/step, kernel sum {sum(k[1] for k in W) / use / 1000:.1f} us/step, '
      f'{len(W) / use:.0f} kernels/step')
agg = {}
for k in W:
    a = agg.setdefault(short(k[2]), [0, 0])
    a[0] += 1; a[1] += k[1]
print('| kernel | launches/step | us/step | mean us |')
print('|---|---|---|---|')
for n, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f'| {n} | {c / use:.1f} | {t / use / 1000:.1f} | {t / c / 1000:.2f} |')
# one layer in the middle: from its q/k/v-side fork to the next attention
a0 = [k for k in att if k[0] >= t0]
if len(a0) > nl // 2 + 2:
    L0, L1 = a0[nl // 2][0], a0[nl // 2 + 1][0]
    seq = [k for k in W if L0 <= k[0] < L1]
    print(f'\none layer (attention to attention): {(L1 - L0) / 1000:.1f} us')
    prev_end = None
    for s, d, n, st in seq:
        gap = '' if prev_end is None else f'{(s - prev_end) / 1000:+.1f}'
        print(f'  {(s - L0) / 1000:7.1f} us  {d / 1000:6.1f} us  gap {gap:>6}  strm {st:>3}  {short(n)}')
        prev_end = max(prev_end or 0, s + d)
