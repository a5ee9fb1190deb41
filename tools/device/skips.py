#!/usr/bin/env python3
"""Sets each config of a stream_check.sh call against the call's main configs: the decode JSONs
($OUT/decode-SHAPE-resident-*.json) of one model, their tok/s, the change, and the us a layer the
config saves or costs: (1 / main - 1 / config) / N_LAYER. For a HOTMOE_DIAG_SKIP config (a launch
left out of every layer), also that launch's bytes a layer at the call's measured copy ceiling and
what is left: the launch's cost on the step's critical path beyond its bytes (air's launches only,
the byte counts of bench/README.md's passes). Main: the configs named env-HM_X=*, env-HM_BASE=* or
plain `resident` (their mean).
    python3 tools/device/skips.py OUT_DIR [SHAPE] [N_LAYER]      (default air 46)"""
import glob
import json
import os
import re
import sys

# MB a layer each HOTMOE_DIAG_SKIP name leaves unread on air (bench/README.md: thirty-fifth, forty-eighth
# and fifty-second passes): the routed gate/up, the routed down, the o-projection, q|k, the shared expert
AIR_MB = {"gateup": 39.6, "down": 26.0, "oproj": 28.3, "qk": 30.7, "shared": 9.7, "shdown": 3.2}

args = sys.argv[1:]
if not args:
    sys.exit(__doc__)
out, shape = args[0], args[1] if len(args) > 1 else "air"
n_layer = int(args[2]) if len(args) > 2 else 46
rows = []
for p in sorted(glob.glob(os.path.join(out, f"decode-{shape}-resident*.json"))):
    tag = os.path.basename(p)[len(f"decode-{shape}-"):-len(".json")]
    try:
        j = json.load(open(p))
    except (OSError, ValueError) as e:
        print(f"{tag}: unreadable ({e})", file=sys.stderr)
        continue
    if j.get("decode_tok_s", 0) > 0:
        rows.append((tag, j["decode_tok_s"], j.get("ceiling_gb_s", 0), j.get("fraction_of_ceiling", 0)))
if not rows:
    sys.exit(f"no decode-{shape}-resident*.json with a decode rate in {out}")
is_main = lambda t: t == "resident" or re.match(r"resident-(HM_X|HM_BASE)=", t)
mains = [r[1] for r in rows if is_main(r[0])]
if not mains:
    sys.exit("no main config (env-HM_X=..., env-HM_BASE=... or resident) among: " + ", ".join(r[0] for r in rows))
main = sum(mains) / len(mains)
ceil = [r[2] for r in rows if r[2] > 0]
ceil = sum(ceil) / len(ceil) if ceil else 0
print(f"{shape}: main {main:.1f} tok/s (mean of {len(mains)}), {1e6 / main:.0f} us a token; copy ceiling {ceil:.0f} GB/s")
print(f"{'config':<44} {'tok/s':>7} {'of ceil':>7} {'change':>7} {'us/layer':>8} {'bytes us':>8} {'beyond':>7}")
for tag, tok, c, frac in rows:
    d = (1 / main - 1 / tok) * 1e6 / n_layer
    m = re.match(r"resident-HOTMOE_DIAG_SKIP=(\w+)$", tag)
    mb = AIR_MB.get(m.group(1)) if m and shape == "air" else None
    by = mb * 1e6 / (ceil * 1e9) * 1e6 if mb and ceil else None
    extra = f"{by:8.2f} {d - by:7.2f}" if by is not None else ""
    print(f"{tag:<44} {tok:7.1f} {100 * frac:6.1f}% {100 * (tok / main - 1):+6.1f}% {d:8.2f} {extra}")
