#!/usr/bin/env python3
"""quant_reference.py - writes tests/quant/<TYPE>.bin, the reference data of tests/test_quant.c.

For every block type, using the gguf package (gguf.quants) as the reference implementation:
  * random raw blocks (half-precision scale fields replaced by finite values, plus edge blocks)
    and gguf-py's dequantization of them: our to_float must match bit for bit;
  * deterministic float inputs (a splitmix64 generator mirrored in test_quant.c, so the inputs
    are not stored) and reference quantized bytes: gguf-py's where it has a quantizer
    ("gguf-py"), a numpy transcription of ggml's quantize_row_q8_K_ref for Q8_K ("numpy-ref"),
    otherwise our own quantizer's bytes: "ggml-c" when --ggml-quantizer confirmed that ggml's C
    quantize_row_*_ref produces the same bytes, else "golden" (a regression guard whose error the
    test bounds); plus gguf-py's dequantization of those bytes, which our to_float must match.
Our quantizer's bytes come from `test_quant --dump-quant DIR`, so build the test first:

    cmake --build build --target test_quant
    python tools/quant_reference.py --test-bin build/tests/test_quant [--ggml-quantizer PROG]

PROG (optional, not part of this repository) is any program linked with ggml's ggml-quants.c such
that `PROG TYPE FILE` reads float32 values from FILE and writes quantize_row_<type>_ref's bytes to
stdout. The committed data was checked this way against ggml-org/ggml d99724f2 for every type.

File layout (little endian): "HMQ1", u32 type, blck, type_size, n_deq, n_q, u64 q_seed, u32 q_kind,
u32 0, then raw[n_deq*type_size], f32 deq[n_deq*blck], q[n_q*type_size], f32 qdeq[n_q*blck].
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES, quants

OUT_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "quant")

Q_GGUF_PY, Q_GOLDEN, Q_NUMPY_REF, Q_GGML_C = 0, 1, 2, 3
KIND_NAMES = ["gguf-py", "golden", "numpy-ref", "ggml-c"]

# byte offsets of the IEEE half fields (scales) in each block; Q8_K's scale is a float at 0,
# MXFP4's an E8M0 byte at 0
HALF_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_XS: [0], T.Q8_K: [], T.MXFP4: [],
}
TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
         T.Q8_K, T.IQ4_XS, T.MXFP4]
GGUF_PY_QUANTIZES = {T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.MXFP4}

# ---- deterministic inputs: must stay identical to gen_inputs() in tests/test_quant.c ----

M64 = np.uint64


def mix64(seed, ctr):
    """splitmix64 output number ctr (array) of stream seed"""
    with np.errstate(over="ignore"):
        z = M64(seed) + (ctr.astype(M64) + M64(1)) * M64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> M64(30))) * M64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> M64(27))) * M64(0x94D049BB133111EB)
    return z ^ (z >> M64(31))


def uni(seed, ctr):
    return (mix64(seed, ctr) >> M64(40)).astype(np.float32) * np.float32(2.0 ** -24)


N_PROFILES = 10
PROF_ZERO, PROF_TINY = 4, 7


def gen_inputs(seed, blck, nblocks):
    f = np.float32
    c = 3 * np.arange(nblocks * blck, dtype=np.uint64)
    u0, u1, u2 = uni(seed, c), uni(seed, c + M64(1)), uni(seed, c + M64(2))
    g = ((u0 + u1) + u2 - f(1.5)) * f(2.0)
    bseed = seed ^ 0xABCDEF
    bi = np.arange(nblocks, dtype=np.uint64)
    r0, r1 = uni(bseed, 2 * bi), uni(bseed, 2 * bi + M64(1))
    prof = np.repeat(np.arange(nblocks) % N_PROFILES, blck)
    x = np.select(
        [prof == 0, prof == 1, prof == 2, prof == 3, prof == 4, prof == 5, prof == 6, prof == 7, prof == 8],
        [u0 * f(2.0) - f(1.0), g, g * f(2.0 ** -7), g * f(64.0), np.zeros_like(g), g, u0 + f(0.5),
         g * f(2.0 ** -12), np.repeat(r0 * f(2.0) - f(1.0), blck)],
        np.where(u1 < f(0.25), f(0.0), np.floor(g * f(4.0)) * f(0.25))).astype(np.float32)
    for b in range(5, nblocks, N_PROFILES):
        x[b * blck + int(r0[b] * f(blck))] = f(-12.0) if r1[b] < f(0.5) else f(12.0)
    return x


def q_blocks_for(blck):
    return 200 if blck == 32 else 100


def q_seed_for(t):
    return 0x51AB0000 + int(t)


# ---- random raw blocks for the dequantization check ----

def gen_raw_blocks(t, nblocks, rng):
    blck, ts = GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(nblocks, ts), dtype=np.uint8)
    raw[0, :] = 0x00                       # all zero
    raw[1, :] = 0xFF                       # extreme ints
    raw[3, :] = 0xFF
    raw[6, :] = 0x00
    raw[7, :] = np.where(np.arange(ts) % 2 == 0, 0x55, 0xAA)
    # scale values for blocks 0..7, then random in [-2, 2]
    edge = [0.0, 1.0, 0.0, 65504.0, None, -0.0, -1.5, 0.5]
    for off in HALF_FIELDS[t]:
        h = rng.uniform(-2, 2, size=nblocks).astype(np.float16).view(np.uint16).copy()
        for b, v in enumerate(edge):
            if v is None:   # random subnormal of random sign
                h[b] = int(rng.integers(1, 0x400)) | (0x8000 if rng.integers(0, 2) else 0)
            else:
                h[b] = np.array(v, dtype=np.float16).view(np.uint16)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(nblocks, 2)
    if t == T.Q8_K:
        d = rng.uniform(-2, 2, size=nblocks).astype(np.float32)
        d[:8] = [0.0, 1.0, 0.0, 1e30, 1e-40, -0.0, -1.5, 0.5]
        raw[:, 0:4] = d.view(np.uint8).reshape(nblocks, 4)
    if t == T.MXFP4:
        raw[:8, 0] = [0, 255, 1, 254, 2, 127, 128, 126]
    return raw


# ---- Q8_K: gguf-py has no class for it; a transcription of ggml's C reference ----

def q8_K_quantize(x):
    xb = x.reshape(-1, 256)
    out = np.zeros((xb.shape[0], 292), dtype=np.uint8)
    for i, blk in enumerate(xb):
        imax = int(np.argmax(np.abs(blk)))   # first of equals, like ggml's strict '>'
        if blk[imax] == 0:
            continue
        iscale = np.float32(-127.0) / blk[imax]
        qs = np.minimum(np.rint(iscale * blk), 127).astype(np.int8)   # nearest_int: ties to even
        bsums = qs.reshape(16, 16).astype(np.int32).sum(axis=1).astype(np.int16)
        d = np.float32(1.0) / iscale
        out[i] = np.concatenate([np.array([d], np.float32).view(np.uint8), qs.view(np.uint8), bsums.view(np.uint8)])
    return out.reshape(-1)


def q8_K_dequantize(raw):
    b = raw.reshape(-1, 292)
    d = b[:, 0:4].copy().view(np.float32)
    qs = b[:, 4:260].view(np.int8).astype(np.float32)
    return (d * qs).reshape(-1)


def dequantize(raw, t):
    if t == T.Q8_K:
        return q8_K_dequantize(raw)
    return quants.dequantize(raw, t).reshape(-1).astype(np.float32, copy=False)


def quantize(x, t):
    if t == T.Q8_K:
        return q8_K_quantize(x)
    return quants.quantize(x, t).reshape(-1)


def rel_rms(x, y, blck):
    xb, db = x.reshape(-1, blck).astype(np.float64), (y.reshape(-1, blck) - x.reshape(-1, blck)).astype(np.float64)
    prof = np.arange(xb.shape[0]) % N_PROFILES
    keep = (prof != PROF_ZERO) & (prof != PROF_TINY) & ((xb ** 2).sum(1) > 0)
    return float(np.sqrt(np.mean((db[keep] ** 2).sum(1) / (xb[keep] ** 2).sum(1))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--test-bin", required=True, help="the built test_quant executable")
    ap.add_argument("--ggml-quantizer", help="program running ggml's reference quantizers (see above)")
    ap.add_argument("--out", default=OUT_DEFAULT, help="output directory (default tests/quant)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    problems = 0
    with tempfile.TemporaryDirectory() as dump:
        subprocess.run([args.test_bin, "--dump-quant", dump], check=True)
        for t in TYPES:
            blck, ts = GGML_QUANT_SIZES[t]
            name = t.name
            rng = np.random.default_rng(1000 + int(t))
            n_deq = 256 if blck == 32 else 32
            raw = gen_raw_blocks(t, n_deq, rng)
            with np.errstate(over="ignore"):
                deq = dequantize(raw.reshape(-1), t)

            n_q, seed = q_blocks_for(blck), q_seed_for(t)
            x = gen_inputs(seed, blck, n_q)
            ours = np.fromfile(os.path.join(dump, name + ".q.bin"), dtype=np.uint8)
            ours_deq = np.fromfile(os.path.join(dump, name + ".qdeq.bin"), dtype=np.float32)
            assert ours.size == n_q * ts, f"{name}: dump has {ours.size} bytes, expected {n_q * ts}"
            if t in GGUF_PY_QUANTIZES:
                kind, qb = Q_GGUF_PY, quantize(x, t)
            elif t == T.Q8_K:
                kind, qb = Q_NUMPY_REF, quantize(x, t)
            else:
                kind, qb = Q_GOLDEN, ours
            if args.ggml_quantizer:
                xfile = os.path.join(dump, name + ".x.bin")
                x.tofile(xfile)
                gq = np.frombuffer(subprocess.run([args.ggml_quantizer, name, xfile], capture_output=True,
                                                  check=True).stdout, dtype=np.uint8)
                g_bad = int((gq.reshape(-1, ts) != ours.reshape(-1, ts)).any(1).sum())
                print(f"{name:7s} ggml C reference bytes differ from ours in {g_bad}/{n_q} blocks")
                problems += 1 if g_bad else 0
                if kind == Q_GOLDEN and not g_bad:
                    kind = Q_GGML_C
            with np.errstate(over="ignore"):   # MXFP4 scale 255 times 12 is inf, in ggml too
                qdeq = dequantize(qb, t)

            same_bytes = np.array_equal(qb.reshape(-1, ts), ours.reshape(-1, ts))
            bad_blocks = int((qb.reshape(-1, ts) != ours.reshape(-1, ts)).any(1).sum())
            bad_deq = int((qdeq.view(np.uint32).reshape(-1, blck) != ours_deq.view(np.uint32).reshape(-1, blck)).any(1).sum())
            print(f"{name:7s} q_ref={KIND_NAMES[kind]:9s} our bytes differ in {bad_blocks}/{n_q} blocks, "
                  f"gguf-py dequant differs from ours in {bad_deq} blocks, rel rms {rel_rms(x, qdeq, blck):.5f}")
            problems += (0 if same_bytes else 1) + (1 if bad_deq else 0)

            path = os.path.join(args.out, name + ".bin")
            with open(path, "wb") as f:
                f.write(struct.pack("<4sIIIIIQII", b"HMQ1", int(t), blck, ts, n_deq, n_q, seed, kind, 0))
                f.write(raw.tobytes())
                f.write(deq.astype("<f4").tobytes())
                f.write(qb.astype(np.uint8).tobytes())
                f.write(qdeq.astype("<f4").tobytes())
    print(f"wrote {args.out}; {problems} disagreement(s) with our implementation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
