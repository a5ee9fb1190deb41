#!/usr/bin/env python3
"""make_corpus.py - writes small valid GGUF and safetensors seeds for the fuzz targets.

usage: make_corpus.py OUTDIR   (creates OUTDIR/gguf/ and OUTDIR/safetensors/)
Every GGUF metadata value type appears, arrays of each element type (strings included),
general.alignment variants, and tensors of float and block-quantized types."""
import json, os, struct, sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
       U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (block elements, block bytes)
TYPES = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144), 14: (256, 210)}


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, vals = v
        return struct.pack("<IQ", et, len(vals)) + b"".join(gval(et, x) for x in vals)
    return struct.pack(FMT[t], v)


def gguf(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, type, [ne...])]. Data is a byte ramp."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + gval(t, v)
    infos, blobs, off = b"", [], 0
    for name, ty, ne in tensors:
        blk, bs = TYPES[ty]
        rows = 1
        for d in ne[1:]:
            rows *= d
        nbytes = ne[0] // blk * bs * rows
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", ty, off)
        blobs.append((off, bytes((i * 7 + 1) & 0xFF for i in range(nbytes))))
        off = (off + nbytes + alignment - 1) // alignment * alignment
    out += infos
    out += b"\0" * (-len(out) % alignment)
    data = bytearray(off)
    for o, b in blobs:
        data[o:o + len(b)] = b
    return out + bytes(data)


def st(tensors, meta=None):
    """tensors: [(name, dtype, shape)]."""
    size = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I8": 1, "U8": 1, "BOOL": 1, "F64": 8}
    hdr, off = {}, 0
    if meta:
        hdr["__metadata__"] = meta
    for name, dt, shape in tensors:
        n = size[dt]
        for d in shape:
            n *= d
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(i & 0xFF for i in range(off))


def main():
    outdir = sys.argv[1]
    gdir, sdir = os.path.join(outdir, "gguf"), os.path.join(outdir, "safetensors")
    os.makedirs(gdir, exist_ok=True)
    os.makedirs(sdir, exist_ok=True)
    every = [("u8", U8, 200), ("i8", I8, -5), ("u16", U16, 60000), ("i16", I16, -300), ("u32", U32, 1 << 31),
             ("i32", I32, -7), ("f32", F32, 1.5), ("bool", BOOL, 1), ("str", STR, "héllo"),
             ("u64", U64, 1 << 40), ("i64", I64, -(1 << 40)), ("f64", F64, 2.25)]
    arrays = [("arr." + n, ARR, (t, [v, v, v])) for n, t, v in every]
    arrays.append(("arr.empty", ARR, (STR, [])))
    arrays.append(("tokenizer.ggml.tokens", ARR, (STR, ["<s>", "a", "", "bb", "\u0120c"])))
    seeds = {
        "empty.gguf": gguf([], []),
        "v2.gguf": gguf([("general.architecture", STR, "qwen3moe")], [("t", 0, [4])], version=2),
        "every_type.gguf": gguf(every + arrays, [("a.weight", 0, [4, 2]), ("b.weight", 1, [8])]),
        "align64.gguf": gguf([("general.alignment", U32, 64)], [("x", 0, [3]), ("y", 30, [5, 1, 2])], alignment=64),
        "align1.gguf": gguf([("general.alignment", U32, 1)], [("x", 1, [3]), ("y", 0, [1])], alignment=1),
        "quant.gguf": gguf([("general.architecture", STR, "qwen3moe"), ("qwen3moe.block_count", U32, 1)],
                           [("q4_0", 2, [32, 2]), ("q8_0", 8, [64]), ("q4_k", 12, [256]), ("q6_k", 14, [256, 1, 1, 1])]),
        "dims4.gguf": gguf([("k", STR, "v")], [("d4", 0, [2, 2, 2, 2]), ("d3", 1, [1, 3, 1])]),
    }
    for name, b in seeds.items():
        with open(os.path.join(gdir, name), "wb") as f:
            f.write(b)
    sseeds = {
        "one.safetensors": st([("w", "F32", [2, 3])]),
        "mixed.safetensors": st([("a", "F16", [4]), ("b", "BF16", [2, 2]), ("c", "I64", [3]), ("s", "F32", []),
                                 ("z", "U8", [0, 4])], meta={"format": "pt"}),
        "four.safetensors": st([("model.layers.0.mlp.experts.gate_up_proj", "BF16", [2, 2, 2, 2]), ("x", "F64", [1])]),
        "empty.safetensors": st([]),
    }
    for name, b in sseeds.items():
        with open(os.path.join(sdir, name), "wb") as f:
            f.write(b)


if __name__ == "__main__":
    main()
