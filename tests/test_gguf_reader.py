#!/usr/bin/env python3
"""test_gguf_reader.py - files hotmoe writes are read by the reference `gguf` package (PyPI):
`hotmoe quantize --type Q4_K_M` output has the types of llama.cpp's Q4_K_M mix, the metadata
llama.cpp reads, and tensors that gguf-py dequantizes to exactly what `hotmoe` computes with.
usage: test_gguf_reader.py BUILD_DIR. Exits 77 (skipped) when the gguf package is missing."""
import os, subprocess, sys, tempfile

try:
    import numpy as np
    import gguf
except ImportError:
    print("SKIP gguf reader checks (pip install gguf numpy)")
    sys.exit(77)

build = sys.argv[1]
fails, n = [], [0]
def check(ok, what):
    n[0] += 1
    print(("PASS " if ok else "FAIL ") + what)
    if not ok: fails.append(what)

with tempfile.TemporaryDirectory() as d:
    src, q = os.path.join(d, "f32.gguf"), os.path.join(d, "q4km.gguf")
    subprocess.check_call([os.path.join(build, "hotmoe-gen"), "--shape", "tiny", "--mix", "f32", "--seed", "3", "-o", src],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.check_call([os.path.join(build, "hotmoe"), "quantize", src, q, "--type", "Q4_K_M", "-q"])
    r = gguf.GGUFReader(q)
    types = {t.name: t.tensor_type.name for t in r.tensors}
    arch = r.fields["general.architecture"]
    check(bytes(arch.parts[arch.data[0]]).decode() == "qwen3moe", "general.architecture")
    ft = r.fields["general.file_type"]
    check(int(ft.parts[ft.data[0]][0]) == 15, "general.file_type = 15 (MOSTLY_Q4_K_M)")
    check(types["blk.0.ffn_gate_exps.weight"] == "Q4_K", "expert gate Q4_K")
    # llama.cpp's use_more_bits on 4 layers: layers 2 and 3 get Q6_K for attn_v and ffn_down
    check(types["blk.3.ffn_down_exps.weight"] == "Q6_K" and types["blk.0.ffn_down_exps.weight"] == "Q4_K", "ffn_down Q6_K on more-bits layers only")
    check(types["blk.2.attn_v.weight"] == "Q6_K" and types["blk.1.attn_v.weight"] == "Q4_K", "attn_v Q6_K on more-bits layers only")
    check(types["blk.1.attn_q.weight"] == "Q4_K", "attn_q Q4_K")
    check(types["output.weight"] == "Q6_K", "output Q6_K")
    check(types["blk.0.ffn_gate_inp.weight"] == "F32" and types["blk.0.attn_norm.weight"] == "F32", "router and norms F32")
    # gguf-py's dequantization of what we wrote equals our exact dequantization (via convert --outtype f32)
    dq = os.path.join(d, "dq.gguf")
    subprocess.check_call([os.path.join(build, "hotmoe"), "convert", q, "-o", dq, "--outtype", "f32", "-q"])
    ours = {t.name: np.array(t.data) for t in gguf.GGUFReader(dq).tensors}
    same = True
    for t in r.tensors:
        ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1)
        mine = ours[t.name].reshape(-1).astype(np.float32)
        if ref.shape != mine.shape or not np.array_equal(ref.astype(np.float32).view(np.uint32), mine.view(np.uint32)):
            same = False; print("  differs:", t.name, t.tensor_type.name)
    check(same, "every tensor: gguf-py dequantize == hotmoe's, bit for bit (%d tensors)" % len(r.tensors))

print("%d passed, %d failed" % (n[0] - len(fails), len(fails)))
sys.exit(1 if fails else 0)
