#!/usr/bin/env python3
"""Where a decode step's time goes, kernel by kernel.
  timeline.py ncu NCU.csv           Nsight Compute's gpu__time_duration per launch (ncu --csv): each kernel
                                    alone, summed per kernel name
  timeline.py nsys TRACE.csv N_LAYER  an Nsight Systems kernel trace (nsys stats -r cuda_gpu_trace -f csv):
                                    per kernel the launches and GPU time per decode step, the step's wall
                                    time against the union of its kernels (the rest: gaps), one layer's sequence
"""
import csv, sys


def short(n):
    """a kernel's name without 'void', its argument list and the template arguments' casts"""
    n = n.replace('void ', '')
    n = n[:n.rindex('>') + 1] if '>' in n else n.split('(')[0]
    return n.replace('(int)', '').replace('(bool)', '')[:70]


def table(agg, per=1.0):
    """| kernel | launches | us | mean us |, largest total first; per: launches and time divided by it"""
    print('| kernel | launches | us | mean us |')
    print('|---|---|---|---|')
    for n, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print(f'| {n} | {c / per:.1f} | {t / per / 1000:.1f} | {t / c / 1000:.2f} |')


def add(agg, name, ns):
    a = agg.setdefault(short(name), [0, 0.0])
    a[0] += 1
    a[1] += ns


def ncu(path):
    lines = [l for l in open(path) if l.startswith('"')]   # ncu prints the program's own output around the CSV
    agg, n = {}, 0
    for r in csv.DictReader(lines):
        if r.get('Metric Name') == 'gpu__time_duration.sum':
            add(agg, r['Kernel Name'], float(r['Metric Value'].replace(',', '')))
            n += 1
    print(f'{n} kernels profiled alone, {sum(v[1] for v in agg.values()) / 1000:.1f} us in all')
    table(agg)


def nsys(path, nl):
    K = []
    for r in csv.DictReader(open(path)):
        col = lambda p: next((r[k] for k in r if k.startswith(p)), '')
        name = col('Name')
        if name and not name.startswith('[CUDA'):
            K.append((int(float(col('Start'))), int(float(col('Duration'))), name, col('Strm')))
    K.sort()
    att = [k for k in K if 'k_attn_gqa' in k[2]]
    steps = len(att) // nl
    if steps < 4:
        sys.exit(f'{len(att)} decode attention launches: fewer than 4 steps of {nl} layers')
    # step i: from layer 0's attention of step i to that of step i + 1 (host time between steps
    # included); steps 1 .. steps - 2 (the first follows the graph's upload, the last has no successor)
    use = steps - 2
    t0, t1 = att[nl][0], att[(steps - 1) * nl][0]
    W = [k for k in K if t0 <= k[0] < t1]
    busy, cs, ce = 0, None, None   # the union of the kernels' intervals
    for a, b in sorted((k[0], k[0] + k[1]) for k in W):
        if ce is None or a > ce:
            busy += 0 if ce is None else ce - cs
            cs, ce = a, b
        else:
            ce = max(ce, b)
    busy += 0 if ce is None else ce - cs
    span = t1 - t0
    print(f'decode steps in window: {use}, wall {span / use / 1000:.1f} us/step, kernels busy (union) {busy / use / 1000:.1f} '
          f'us/step, idle gaps {(span - busy) / use / 1000:.1f} us/step, kernel sum {sum(k[1] for k in W) / use / 1000:.1f} '
          f'us/step, {len(W) / use:.0f} kernels/step (launches and us below: per step)')
    agg = {}
    for k in W:
        add(agg, k[2], k[1])
    table(agg, use)
    L0, L1 = att[nl + nl // 2][0], att[nl + nl // 2 + 1][0]   # one layer in the middle of step 1
    print(f'\none layer (attention to attention): {(L1 - L0) / 1000:.1f} us')
    prev_end = None
    for s, d, n, st in (k for k in W if L0 <= k[0] < L1):
        gap = '' if prev_end is None else f'{(s - prev_end) / 1000:+.1f}'
        print(f'  {(s - L0) / 1000:7.1f} us  {d / 1000:6.1f} us  gap {gap:>6}  strm {st:>3}  {short(n)}')
        prev_end = max(prev_end or 0, s + d)


if len(sys.argv) == 3 and sys.argv[1] == 'ncu':
    ncu(sys.argv[2])
elif len(sys.argv) == 4 and sys.argv[1] == 'nsys':
    nsys(sys.argv[2], int(sys.argv[3]))
else:
    sys.exit(__doc__)
