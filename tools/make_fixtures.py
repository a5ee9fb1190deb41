#!/usr/bin/env python3
"""Generate tiny random-weight MoE test fixtures + HF transformers reference outputs.

Usage:  python tools/make_fixtures.py [--out tests/fixtures]

Deterministic: fixed seeds, CPU, float32 reference math. Re-running produces
byte-identical files (checked by hashing; see summary at the end).

Produces, for each fixture dir:
  config.json, generation_config.json, model*.safetensors (+index for sharded),
  tokenizer.json, tokenizer_config.json,
  ref/ref.json, ref/logits{i}.f32  (raw little-endian f32 [n_tokens][n_vocab])
plus tests/fixtures/tokenizer_cases.json (encode/decode reference for the shared tokenizer).

config.json layout: qwen3moe / glm4moe keep transformers-5 native layout
(rope_parameters={rope_theta, partial_rotary_factor, rope_type}, "dtype", Qwen3's
"num_local_experts"); qwen3moe-bf16 / glm4moe-f16 are rewritten to the Hub (4.x) layout
(top-level rope_theta / partial_rotary_factor, rope_scaling null, "torch_dtype",
Qwen3's "num_experts"), so a loader must handle both.
Expert weights on disk are per-expert (mlp.experts.{e}.{gate,up,down}_proj.weight):
transformers 5 save_pretrained reverts its fused in-memory layout by default.
Seeds: each fixture takes the first seed (base, base+1, ...) whose greedy argmax and
router top-k margins clear the MIN_* thresholds below.
At the end an independent numpy forward (np_forward) re-checks every logits file and
greedy continuation from config.json + safetensors alone.

Fixtures:
  qwen3moe       Qwen3MoeForCausalLM f32, norm_topk_prob=True, untied
  qwen3moe-bf16  same arch, other seed, norm_topk_prob=False, tied, bf16 on disk,
                 sharded into 2 safetensors files + model.safetensors.index.json
  glm4moe        Glm4MoeForCausalLM f32, layer 0 dense, shared expert, sigmoid router
                 with e_score_correction_bias, partial rotary 0.5, attn bias, untied
  glm4moe-f16    like glm4moe + qk-norm, n_group 4 / topk_group 2, tied, f16 on disk
                 (router gate.weight / e_score_correction_bias stay f32: transformers'
                 _keep_in_fp32_modules_strict)
"""
import argparse
import gzip
import hashlib
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

import transformers
from transformers import (
    AutoTokenizer,
    Glm4MoeConfig,
    Glm4MoeForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

# Exact Qwen2/Qwen3 split regex (copied from Qwen3 tokenizer.json pre_tokenizer).
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_TOTAL = 500  # including the 3 special tokens

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# --------------------------------------------------------------------------------------
# corpus
# --------------------------------------------------------------------------------------
PROSE = [
    "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times.",
    "In the beginning the engine loaded the weights from disk, mapped them into memory, and began to think.",
    "A mixture of experts routes every token to a small number of specialists, and only they do the work.",
    "She said that they'd arrived early, but we're sure it isn't true; you'll see what I mean, won't you?",
    "Once upon a time there was a little model that could predict the next word, one token at a time.",
    "Rivers flow to the sea, mountains rise to the sky, and the wind carries the seeds of the forest far away.",
    "The committee met on Tuesday to discuss the budget, the schedule, and the color of the new building.",
    "Attention is all you need, they wrote; then everyone needed a great deal more memory than before.",
]
CODE = [
    "def forward(self, x):\n    h = self.norm(x)\n    return x + self.mlp(h)\n",
    "for (int i = 0; i < n; i++) {\n    y[i] += a * x[i];\n}\n",
    "static float dot(const float *a, const float *b, size_t n) {\n\tfloat s = 0.0f;\n\tfor (size_t i = 0; i < n; ++i) s += a[i] * b[i];\n\treturn s;\n}\n",
    "import numpy as np\nlogits = np.array([1.5, -2.25, 3.0])\nprint(logits.argmax())\n",
    "if (err != 0) {\n    fprintf(stderr, \"error: %s\\n\", strerror(err));\n    return -1;\n}\n",
    "{\"name\": \"hotmoe\", \"version\": \"0.1.0\", \"layers\": 48, \"experts\": [128, 8]}\n",
]
UNICODE = [
    "Café, naïve, résumé, coöperate — “quotes” and ‘apostrophes’…",
    "日本語のテキストと中文文本。한국어 문장도 있습니다.",
    "Emoji: 😀 🚀 🤖 ✨ and math: α + β = γ, ∑ x² ≤ ∞, π ≈ 3.14159.",
    "Привет, мир! Ελληνικά γράμματα. עברית. العربية.",
]


def build_corpus():
    rng = np.random.RandomState(1234)
    lines = []
    for rep in range(6):
        lines += PROSE + CODE + UNICODE
    words = " ".join(PROSE).replace(",", "").replace(".", "").split()
    for _ in range(300):
        n = rng.randint(4, 14)
        lines.append(" ".join(words[rng.randint(len(words))] for _ in range(n)).capitalize() + ".")
    for _ in range(200):
        a, b = rng.randint(0, 100000), rng.randint(0, 1000)
        lines.append(f"{a} + {b} = {a + b}; {a}*{b}={a * b}, {a / (b + 1):.4f}")
    for _ in range(50):
        lines.append("\t" + " " * rng.randint(0, 8) + f"x_{rng.randint(100)} = y[{rng.randint(50)}] + {rng.randint(9)};\n")
    return lines


def build_tokenizer():
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TOTAL - len(SPECIALS),
        min_frequency=2,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(build_corpus(), trainer=trainer)
    tok.add_special_tokens(SPECIALS)
    d = json.loads(tok.to_str())
    # match Qwen3's tokenizer.json layout: post_processor ByteLevel
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    d["post_processor"] = dict(bl)
    d["decoder"] = dict(bl)
    tok = Tokenizer.from_str(json.dumps(d))
    # sanity: full byte alphabet present
    vocab = tok.get_vocab()
    for ch in pre_tokenizers.ByteLevel.alphabet():
        assert ch in vocab, ch
    assert tok.get_vocab_size() == VOCAB_TOTAL, tok.get_vocab_size()
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == VOCAB_TOTAL - len(SPECIALS) + i
    return tok


TOKENIZER_CASES = [
    "Hello world",
    " leading space and  double  spaces   and trailing   ",
    "line one\nline two\r\n\n\ttabbed\n\n\n",
    "I'm sure you'll see they'd said IT'S fine, we've won, don't we? O'Neil's",
    "numbers 1234567890 3.14159 -42 1e-5 0x7fff 100,000",
    "Café naïve résumé — “quotes” …",
    "e\u0301 vs \u00e9 (NFC must merge the combining accent)",
    "日本語のテキストと中文文本。한국어",
    "Emoji 😀🚀🤖✨ math α+β=γ ∑x²≤∞",
    "def f(x):\n    return x ** 2  # comment\n",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "",
    "   ",
    "a",
]


def save_tokenizer_cases(tok, path):
    cases = []
    for t in TOKENIZER_CASES:
        ids = tok.encode(t, add_special_tokens=False).ids
        dec = tok.decode(ids, skip_special_tokens=False)
        cases.append({"text": t, "ids": ids, "decoded": dec})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"note": "ids = tokenizer.json encode(text, add_special_tokens=False); special tokens in text ARE "
                   "matched as added tokens; decoded = decode(ids, skip_special_tokens=False)",
                   "vocab_size": tok.get_vocab_size(), "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")


def save_tokenizer(tok, d):
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(json.loads(tok.to_str()), ensure_ascii=False, indent=2))
        f.write("\n")
    cfg = {
        "tokenizer_class": "Qwen2Tokenizer",
        "bos_token": None,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "model_max_length": 512,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(tok.token_to_id(s)): {
                "content": s, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": True,
            }
            for s in SPECIALS
        },
    }
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


# --------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------
REF_TEXTS = [
    "Hello world, it is",
    "def forward(self, x):\n    h = self.norm(x)\n    return x + self.mlp(h)  # café ✨ 42",
    "The committee met on Tuesday to discuss the budget. 日本語のテキスト and α + β = γ; "
    "for (int i = 0; i < n; i++) { y[i] += a * x[i]; } She said they'd arrived early, "
    "but we're sure it isn't true: 12345 + 678 = 13023. Emoji 😀🚀 done.",
]
REF_LENS = [5, 20, 60]
N_GREEDY = 16


def randomize(model, seed, std, bias_std=0.2):
    """Overwrite every parameter/persistent buffer with deterministic random values."""
    g = torch.Generator().manual_seed(seed)
    sd = model.state_dict()
    seen = set()
    with torch.no_grad():
        for name in sorted(sd.keys()):
            t = sd[name]
            if t.data_ptr() in seen:  # tied lm_head
                continue
            seen.add(t.data_ptr())
            if name.endswith("e_score_correction_bias"):
                v = torch.randn(t.shape, generator=g) * bias_std
            elif "norm" in name and name.endswith("weight"):
                v = 1.0 + 0.1 * torch.randn(t.shape, generator=g)
            elif name.endswith("bias"):
                v = 0.1 * torch.randn(t.shape, generator=g)
            elif "embed_tokens" in name:
                v = torch.randn(t.shape, generator=g)
            elif "lm_head" in name:
                v = torch.randn(t.shape, generator=g) * 0.25
            else:
                v = torch.randn(t.shape, generator=g) * std
            t.copy_(v.to(t.dtype))


def make_qwen3(vocab, seed, norm_topk, tie):
    cfg = Qwen3MoeConfig(
        vocab_size=vocab,
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_experts=16,
        num_experts_per_tok=4,
        norm_topk_prob=norm_topk,
        tie_word_embeddings=tie,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rms_norm_eps=1e-6,
        max_position_embeddings=512,
        initializer_range=0.2,
        bos_token_id=None,
        eos_token_id=VOCAB_TOTAL - 3,
        pad_token_id=None,
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    m = Qwen3MoeForCausalLM(cfg).float().eval()
    randomize(m, seed, std=0.2)
    return m


def make_glm(vocab, seed, qk_norm, n_group, topk_group, tie):
    cfg = Glm4MoeConfig(
        vocab_size=vocab,
        hidden_size=64,
        num_hidden_layers=3,
        first_k_dense_replace=1,
        intermediate_size=96,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        attention_bias=True,
        use_qk_norm=qk_norm,
        n_routed_experts=16,
        num_experts_per_tok=4,
        n_shared_experts=1,
        moe_intermediate_size=32,
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        n_group=n_group,
        topk_group=topk_group,
        tie_word_embeddings=tie,
        rms_norm_eps=1e-5,
        max_position_embeddings=512,
        initializer_range=0.2,
        num_mtp_layers=0,
        bos_token_id=None,
        eos_token_id=VOCAB_TOTAL - 3,
        pad_token_id=None,
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    m = Glm4MoeForCausalLM(cfg).float().eval()
    randomize(m, seed, std=0.2)
    return m


# --------------------------------------------------------------------------------------
# reference computation
# --------------------------------------------------------------------------------------
def routing_stats(model, kind, ids_list):
    """Recompute router decisions per MoE layer from captured MLP inputs."""
    layers = model.model.layers
    inputs = {}
    hooks = []
    for li, layer in enumerate(layers):
        mlp = layer.mlp
        if not hasattr(mlp, "gate"):
            continue

        def hook(mod, args, li=li):
            inputs.setdefault(li, []).append(args[0].detach().reshape(-1, args[0].shape[-1]).clone())

        hooks.append(mlp.register_forward_pre_hook(hook))
    with torch.no_grad():
        for ids in ids_list:
            model(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    out = []
    cfg = model.config
    k = cfg.num_experts_per_tok
    for li in sorted(inputs):
        x = torch.cat(inputs[li]).float()
        gate = layers[li].mlp.gate
        logits = x @ gate.weight.float().t()
        if kind == "qwen3":
            score = torch.softmax(logits, -1)
            sel = torch.topk(score, k, -1)[1]
            s_sorted = torch.sort(score, -1, descending=True)[0]
            kmargin = (s_sorted[:, k - 1] - s_sorted[:, k]).min().item()
            top1 = (s_sorted[:, 0] - s_sorted[:, 1])
            gmargin = None
        else:
            s = torch.sigmoid(logits) + gate.e_score_correction_bias.float()
            ng = cfg.n_group
            gs = s.view(-1, ng, s.shape[-1] // ng).topk(2, -1)[0].sum(-1)
            if ng > 1:
                gsort = torch.sort(gs, -1, descending=True)[0]
                gmargin = (gsort[:, cfg.topk_group - 1] - gsort[:, cfg.topk_group]).min().item()
            else:
                gmargin = None
            gidx = torch.topk(gs, cfg.topk_group, -1)[1]
            gmask = torch.zeros_like(gs).scatter_(1, gidx, 1).bool()
            smask = gmask.unsqueeze(-1).expand(-1, ng, s.shape[-1] // ng).reshape(s.shape)
            sm = s.masked_fill(~smask, float("-inf"))
            sel = torch.topk(sm, k, -1)[1]
            s_sorted = torch.sort(sm, -1, descending=True)[0]
            kmargin = (s_sorted[:, k - 1] - s_sorted[:, k]).min().item()
            top1 = (s_sorted[:, 0] - s_sorted[:, 1])
        counts = torch.bincount(sel.reshape(-1), minlength=logits.shape[-1])
        out.append(
            {
                "layer": li,
                "tokens": x.shape[0],
                "distinct_experts": int((counts > 0).sum()),
                "max_load": int(counts.max()),
                "min_load": int(counts.min()),
                "top1_margin_mean": round(top1.mean().item(), 4),
                "top1_margin_min": float(f"{top1.min().item():.3g}"),
                "k_vs_k+1_margin_min": float(f"{kmargin:.3g}"),
                "group_margin_min": None if gmargin is None else float(f"{gmargin:.3g}"),
            }
        )
    return out


def greedy_nocache(model, ids, n):
    seq = list(ids)
    margins = []
    with torch.no_grad():
        for _ in range(n):
            lg = model(torch.tensor([seq]), use_cache=False).logits[0, -1]
            s = torch.sort(lg, descending=True)[0]
            margins.append((s[0] - s[1]).item())
            seq.append(int(lg.argmax()))
    return seq[len(ids):], min(margins)


def compute_refs(model_dir, tok, kind):
    cls = Qwen3MoeForCausalLM if kind == "qwen3" else Glm4MoeForCausalLM
    m = cls.from_pretrained(model_dir, dtype="auto", attn_implementation="eager")
    load_dtypes = sorted({str(p.dtype) for p in m.state_dict().values()})
    m = m.float().eval()
    refdir = os.path.join(model_dir, "ref")
    os.makedirs(refdir, exist_ok=True)
    seqs = []
    ids_list = []
    info = []
    for i, (text, n) in enumerate(zip(REF_TEXTS, REF_LENS)):
        ids = tok.encode(text, add_special_tokens=False).ids
        assert len(ids) >= n, (len(ids), n, text)
        ids = ids[:n]
        ids_list.append(ids)
        with torch.no_grad():
            logits = m(torch.tensor([ids]), use_cache=False).logits[0].float().contiguous()
        assert torch.isfinite(logits).all()
        arr = logits.numpy().astype("<f4")
        fn = f"logits{i}.f32"
        arr.tofile(os.path.join(refdir, fn))
        # greedy continuation with generate (KV cache) ...
        with torch.no_grad():
            gen = m.generate(
                torch.tensor([ids]),
                max_new_tokens=N_GREEDY,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
                use_cache=True,
            )[0, len(ids):].tolist()
        # ... cross-checked against no-cache full recompute
        gen2, gmargin = greedy_nocache(m, ids, N_GREEDY)
        assert gen == gen2, (gen, gen2)
        assert len(gen) == N_GREEDY
        seqs.append({"tokens": ids, "logits": fn, "n_vocab": int(arr.shape[1]), "greedy": gen})
        sl = np.sort(arr, axis=1)
        info.append(
            {
                "len": len(ids),
                "logit_absmax": round(float(np.abs(arr).max()), 3),
                "logit_std": round(float(arr.std()), 3),
                "prefill_top1_margin_min": float(f"{float((sl[:, -1] - sl[:, -2]).min()):.3g}"),
                "greedy_top1_margin_min": float(f"{gmargin:.3g}"),
            }
        )
    with open(os.path.join(refdir, "ref.json"), "w") as f:
        json.dump({"sequences": seqs}, f, indent=1)
        f.write("\n")
    return m, ids_list, info, load_dtypes


# --------------------------------------------------------------------------------------
# safetensors inspection
# --------------------------------------------------------------------------------------
def st_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def list_tensors(model_dir):
    rows = []
    for fn in sorted(os.listdir(model_dir)):
        if fn.endswith(".safetensors"):
            for k, v in st_header(os.path.join(model_dir, fn)).items():
                rows.append((fn, k, v["dtype"], v["shape"]))
    return rows


def compact_listing(rows):
    """Collapse per-layer / per-expert indices so the listing stays short."""
    import re

    groups = {}
    for fn, k, dt, sh in rows:
        kk = re.sub(r"experts\.\d+\.", "experts.{e}.", k)
        kk = re.sub(r"layers\.\d+\.", "layers.{L}.", kk)
        key = (kk, dt, tuple(sh))
        groups.setdefault(key, set()).add(k)
    lines = []
    for (kk, dt, sh), names in sorted(groups.items()):
        lines.append(f"  {kk:<55} {dt:<5} {list(sh)}  x{len(names)}")
    return lines


def dir_size(d):
    tot = 0
    for root, _, files in os.walk(d):
        for f in files:
            tot += os.path.getsize(os.path.join(root, f))
    return tot


def tree_hash(d):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(d)):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            h.update(os.path.relpath(p, d).encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------
# independent numpy re-implementation (reads only config.json + safetensors by name, the
# way the C engine does) -- validates the fixture files and documents the exact math.
# --------------------------------------------------------------------------------------
def np_load_weights(d):
    dt = {"F32": np.float32, "F16": np.float16}
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    W = {}
    for fn in files:
        p = os.path.join(d, fn)
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            h = json.loads(f.read(n))
            base = 8 + n
            raw = open(p, "rb").read()
        h.pop("__metadata__", None)
        for k, v in h.items():
            a, b = v["data_offsets"]
            buf = raw[base + a: base + b]
            if v["dtype"] == "BF16":
                u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
                arr = u.view(np.float32)
            else:
                arr = np.frombuffer(buf, dtype=dt[v["dtype"]]).astype(np.float32)
            W[k] = arr.reshape(v["shape"])
    return W


def np_rmsnorm(x, w, eps):
    return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def np_forward(d, ids):
    c = json.load(open(os.path.join(d, "config.json")))
    W = np_load_weights(d)
    rp = c.get("rope_parameters") or {}
    theta = rp.get("rope_theta", c.get("rope_theta"))
    prf = rp.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
    glm = c["model_type"] == "glm4_moe"
    H, nh, nkv, hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    eps, k = c["rms_norm_eps"], c["num_experts_per_tok"]
    E = c.get("n_routed_experts") or c.get("num_experts") or c.get("num_local_experts")
    T = len(ids)
    rd = int(hd * prf)  # rotary dims: the FIRST rd dims of each head, NeoX half-split pairs (i, i+rd/2)
    inv = 1.0 / theta ** (np.arange(0, rd, 2, dtype=np.float32) / rd)
    ang = np.arange(T, dtype=np.float32)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(x):  # x [T, heads, hd]
        x = x.copy()
        a, b = x[..., : rd // 2].copy(), x[..., rd // 2: rd].copy()
        cc, ss = cos[:, None, :], sin[:, None, :]
        x[..., : rd // 2] = a * cc - b * ss
        x[..., rd // 2: rd] = b * cc + a * ss
        return x

    def lin(x, name, bias=True):
        y = x @ W[name + ".weight"].T
        if bias and name + ".bias" in W:
            y = y + W[name + ".bias"]
        return y

    def silu(x):
        return x / (1 + np.exp(-x))

    def mlp(x, pre):
        return lin(silu(lin(x, pre + ".gate_proj")) * lin(x, pre + ".up_proj"), pre + ".down_proj")

    x = W["model.embed_tokens.weight"][ids]
    for L in range(c["num_hidden_layers"]):
        p = f"model.layers.{L}."
        h = np_rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = lin(h, p + "self_attn.q_proj").reshape(T, nh, hd)
        kk = lin(h, p + "self_attn.k_proj").reshape(T, nkv, hd)
        v = lin(h, p + "self_attn.v_proj").reshape(T, nkv, hd)
        if p + "self_attn.q_norm.weight" in W:  # per-head RMSNorm over head_dim, BEFORE rope
            q = np_rmsnorm(q, W[p + "self_attn.q_norm.weight"], eps)
            kk = np_rmsnorm(kk, W[p + "self_attn.k_norm.weight"], eps)
        q, kk = rope(q), rope(kk)
        o = np.zeros((T, nh, hd), np.float32)
        for hh in range(nh):
            g = hh // (nh // nkv)
            s = (q[:, hh] @ kk[:, g].T) / np.sqrt(hd)
            s = s + np.triu(np.full((T, T), -np.inf, np.float32), 1)
            s = np.exp(s - s.max(-1, keepdims=True))
            o[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, g]
        x = x + lin(o.reshape(T, nh * hd), p + "self_attn.o_proj")
        h = np_rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        if p + "mlp.gate.weight" not in W:
            x = x + mlp(h, p + "mlp")
            continue
        logits = h @ W[p + "mlp.gate.weight"].T
        if glm:
            sc = 1 / (1 + np.exp(-logits))
            sel_sc = sc + W[p + "mlp.gate.e_score_correction_bias"]
            ng, tg = c["n_group"], c["topk_group"]
            grp = np.sort(sel_sc.reshape(T, ng, E // ng), -1)[..., -2:].sum(-1)  # top-2 sum per group
            keep = np.argsort(-grp, -1, kind="stable")[:, :tg]
            mask = np.zeros((T, ng), bool)
            np.put_along_axis(mask, keep, True, -1)
            sel_sc = np.where(np.repeat(mask, E // ng, -1), sel_sc, -np.inf)
            idx = np.argsort(-sel_sc, -1, kind="stable")[:, :k]
            wts = np.take_along_axis(sc, idx, -1)  # weights from the UNBIASED sigmoid
            if c["norm_topk_prob"]:
                wts = wts / (wts.sum(-1, keepdims=True) + 1e-20)
            wts = wts * c["routed_scaling_factor"]
        else:
            pr = np.exp(logits - logits.max(-1, keepdims=True))
            pr = pr / pr.sum(-1, keepdims=True)
            idx = np.argsort(-pr, -1, kind="stable")[:, :k]
            wts = np.take_along_axis(pr, idx, -1)
            if c["norm_topk_prob"]:
                wts = wts / wts.sum(-1, keepdims=True)
        y = np.zeros_like(x)
        for t in range(T):
            for j in range(k):
                y[t] += wts[t, j] * mlp(h[t: t + 1], p + f"mlp.experts.{idx[t, j]}")[0]
        if glm:
            y = y + mlp(h, p + "mlp.shared_experts")
        x = x + y
    x = np_rmsnorm(x, W["model.norm.weight"], eps)
    lm = W.get("lm_head.weight", W["model.embed_tokens.weight"])  # tied: no lm_head on disk
    return x @ lm.T


def np_verify(d):
    ref = json.load(open(os.path.join(d, "ref", "ref.json")))
    worst = 0.0
    for sq in ref["sequences"]:
        want = np.fromfile(os.path.join(d, "ref", sq["logits"]), dtype="<f4").reshape(len(sq["tokens"]), sq["n_vocab"])
        got = np_forward(d, sq["tokens"])
        worst = max(worst, float(np.abs(got - want).max()))
        # greedy continuation by full recompute
        seq = list(sq["tokens"])
        for _ in range(len(sq["greedy"])):
            seq.append(int(np_forward(d, seq)[-1].argmax()))
        assert seq[len(sq["tokens"]):] == sq["greedy"], (d, seq, sq["greedy"])
    assert worst < 1e-3, (d, worst)
    return worst


MAX_SEED_TRIES = 40
MIN_GREEDY_MARGIN = 0.005  # logit units, top1 - top2 at every greedy step
MIN_K_MARGIN = 1e-4        # router score units, k-th vs (k+1)-th selected expert, every token
MIN_GROUP_MARGIN = 1e-3    # group score units (group-limited routing)
MIN_DISTINCT = 10          # distinct experts used per MoE layer over the ref sequences


def acceptable(kind, res):
    d, rows, info, rstats, load_dtypes, reload_diff = res
    g = min(i["greedy_top1_margin_min"] for i in info)
    k = min(r["k_vs_k+1_margin_min"] for r in rstats)
    gm = min([r["group_margin_min"] for r in rstats if r["group_margin_min"] is not None] or [1.0])
    dist = min(r["distinct_experts"] for r in rstats)
    score = min(g / MIN_GREEDY_MARGIN, k / MIN_K_MARGIN, gm / MIN_GROUP_MARGIN, dist / MIN_DISTINCT)
    return score >= 1.0, score, f"greedy {g:.3g} k {k:.3g} group {gm:.3g} distinct {dist}"


def hubify_config(d):
    """Rewrite config.json in the layout of real Hub checkpoints (transformers 4.x style):
    rope_theta / partial_rotary_factor top-level, rope_scaling null, num_experts instead of
    num_local_experts (Qwen3), torch_dtype instead of dtype. transformers 5 still loads it."""
    p = os.path.join(d, "config.json")
    cfg = json.load(open(p))
    rp = cfg.pop("rope_parameters")
    assert rp.get("rope_type", "default") == "default"
    cfg["rope_theta"] = rp["rope_theta"]
    if "partial_rotary_factor" in rp:
        cfg["partial_rotary_factor"] = rp["partial_rotary_factor"]
    cfg["rope_scaling"] = None
    if "num_local_experts" in cfg and cfg["model_type"] == "qwen3_moe":
        cfg["num_experts"] = cfg.pop("num_local_experts")
    cfg["torch_dtype"] = cfg.pop("dtype")
    cfg = dict(sorted(cfg.items()))
    with open(p, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def build_fixture(d, tok, V, kind, kw, dtype, shard, hub_cfg):
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    m = make_qwen3(V, **kw) if kind == "qwen3" else make_glm(V, **kw)
    if dtype != torch.float32:
        # save f32 to a temp dir, reload in half dtype the way transformers does it
        # (honours _keep_in_fp32_modules_strict), then save that.
        tmp = d + ".tmp"
        m.save_pretrained(tmp, safe_serialization=True)
        m = type(m).from_pretrained(tmp, dtype=dtype, attn_implementation="eager").eval()
        shutil.rmtree(tmp)
    m.generation_config.eos_token_id = None
    m.generation_config.bos_token_id = None
    save_kw = dict(safe_serialization=True)
    if shard:
        save_kw["max_shard_size"] = shard
    m.save_pretrained(d, **save_kw)
    if hub_cfg:
        hubify_config(d)
    save_tokenizer(tok, d)
    for root, _, files in os.walk(d):
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)

    # AutoTokenizer must agree with raw tokenizers
    at = AutoTokenizer.from_pretrained(d)
    for t in REF_TEXTS:
        assert at(t, add_special_tokens=False)["input_ids"] == tok.encode(t, add_special_tokens=False).ids

    mref, ids_list, info, load_dtypes = compute_refs(d, tok, kind)
    # in-memory (pre-save) model in f32 must give the same logits as the reloaded one
    with torch.no_grad():
        a = m.float()(torch.tensor([ids_list[2]]), use_cache=False).logits
        b = mref(torch.tensor([ids_list[2]]), use_cache=False).logits
    reload_diff = (a - b).abs().max().item()
    assert reload_diff == 0.0, reload_diff
    rstats = routing_stats(mref, kind, ids_list)
    rows = list_tensors(d)
    return d, rows, info, rstats, load_dtypes, reload_diff


# --------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    print(f"transformers {transformers.__version__}  torch {torch.__version__}")

    tok = build_tokenizer()
    V = tok.get_vocab_size()
    print(f"tokenizer: vocab {V} (merges {V - 256 - len(SPECIALS)})")
    for t, n in zip(REF_TEXTS, REF_LENS):
        print(f"  ref text -> {len(tok.encode(t, add_special_tokens=False).ids)} tokens (using {n})")

    os.makedirs(out, exist_ok=True)
    save_tokenizer_cases(tok, os.path.join(out, "tokenizer_cases.json"))
    for t, n in zip(REF_TEXTS, REF_LENS):
        print(f"  ref seq {n}: {tok.decode(tok.encode(t, add_special_tokens=False).ids[:n])!r}")

    specs = [
        # name, kind, model kwargs, on-disk dtype, max_shard_size, hub-style config.json
        ("qwen3moe", "qwen3", dict(seed=1000, norm_topk=True, tie=False), torch.float32, None, False),
        ("qwen3moe-bf16", "qwen3", dict(seed=2000, norm_topk=False, tie=True), torch.bfloat16, "600KB", True),
        ("glm4moe", "glm", dict(seed=3000, qk_norm=False, n_group=1, topk_group=1, tie=False), torch.float32, None, False),
        ("glm4moe-f16", "glm", dict(seed=4000, qk_norm=True, n_group=4, topk_group=2, tie=True), torch.float16, None, True),
    ]
    summary = []
    for name, kind, kw, dtype, shard, hub_cfg in specs:
        d = os.path.join(out, name)
        base_seed = kw.pop("seed")
        best = None
        # Deterministic seed search: take the first seed whose greedy continuations and
        # routing decisions have comfortable margins (so a C reimplementation with a
        # different f32 summation order cannot flip an argmax / expert choice).
        for j in range(MAX_SEED_TRIES):
            seed = base_seed + j
            res = build_fixture(d, tok, V, kind, dict(kw, seed=seed), dtype, shard, hub_cfg)
            ok, score, why = acceptable(kind, res)
            print(f"{name}: seed {seed} -> {'OK' if ok else 'rejected'} (score {score:.3g}: {why})")
            if ok:
                best = None
                break
            if best is None or score > best[0]:
                best = (score, seed)
        if best is not None:  # nothing passed: rebuild the best one
            seed = best[1]
            res = build_fixture(d, tok, V, kind, dict(kw, seed=seed), dtype, shard, hub_cfg)
            print(f"{name}: no seed passed all thresholds, using best seed {seed}")
        summary.append((name, seed) + res)

    # ---------------------------------------------------------------- summary
    print("\n================ SUMMARY ================")
    for name, seed, d, rows, info, rstats, load_dtypes, reload_diff in summary:
        files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
        print(f"\n## {name} (seed {seed}): {dir_size(d)/1024:.1f} KiB, files {files}, tree hash {tree_hash(d)}")
        print(f"   dtypes after from_pretrained(dtype='auto'): {load_dtypes}; save->load max|dlogit| {reload_diff:.2e}")
        cfg = json.load(open(os.path.join(d, "config.json")))
        keys = ["architectures", "model_type", "dtype", "torch_dtype", "vocab_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "moe_intermediate_size",
                "num_experts", "n_routed_experts", "num_experts_per_tok", "n_shared_experts", "first_k_dense_replace",
                "norm_topk_prob", "routed_scaling_factor", "n_group", "topk_group", "use_qk_norm", "attention_bias",
                "tie_word_embeddings", "rms_norm_eps", "rope_parameters", "rope_theta", "partial_rotary_factor", "rope_scaling", "num_local_experts",
                "decoder_sparse_step", "mlp_only_layers", "use_sliding_window", "sliding_window", "hidden_act",
                "eos_token_id", "bos_token_id"]
        print("   config: " + json.dumps({k: cfg[k] for k in keys if k in cfg}))
        print("   tensors (name dtype shape xcount):")
        for line in compact_listing(rows):
            print(line)
        if len(files) > 1:
            idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
            per = {}
            for k, f in idx["weight_map"].items():
                per[f] = per.get(f, 0) + 1
            print(f"   index: metadata={idx.get('metadata')} tensors per file={per}")
        for i in info:
            print(f"   ref {i}")
        for r in rstats:
            print(f"   routing {r}")
    print("\nindependent numpy re-implementation vs reference (max |dlogit|, greedy must match):")
    for name, seed, d, *_ in summary:
        print(f"   {name}: {np_verify(d):.2e}  greedy OK")
    tot = dir_size(out)
    print(f"\ntotal tests/fixtures size: {tot/1024/1024:.2f} MiB")
    assert tot < 15 * 1024 * 1024


if __name__ == "__main__":
    main()
