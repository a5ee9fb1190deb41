#!/usr/bin/env python3
"""tok_reference.py - token ids from HF `tokenizers` for tests/test_tokenizer.c.

Encodes a fixed list of edge-case strings with the real Qwen3 and DeepSeek-V3 tokenizer.json files
and writes tests/tokenizer/reference.json. Inputs are stored as hex of their bytes, so invalid UTF-8
survives; HF only takes text, so such inputs are encoded as bytes.decode('utf-8', 'replace'), which
is the substitution (U+FFFD per maximal invalid subpart) the C tokenizer applies too.

  python3 tools/tok_reference.py                       # regenerate the committed reference
  python3 tools/tok_reference.py --fuzz 5000 --seed 1 --out /tmp/fuzz.json   # random strings (not committed)
  python3 tools/tok_reference.py --ucd src/tokenizer_ucd.h   # Unicode class additions, see ucd_table()
  python3 tools/tok_reference.py --variant bytelevel --fuzz 3000 --out /tmp/v.json   # also writes /tmp/v.json.tokenizer.json
      then: test_tokenizer /tmp/v.json /tmp/v.json.tokenizer.json bytelevel
  Variants edit the Qwen3 tokenizer.json to exercise options the two real files do not use.
"""
import argparse
import gzip
import json
import os
import random
import sys
import unicodedata

from tokenizers import Tokenizer, __version__ as TOKENIZERS_VERSION

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["qwen3", "deepseek-v3"]

CODE_PY = '''def fib(n: int) -> int:
\t"""Return the n-th Fibonacci number."""
    if n < 2:
        return n
\treturn fib(n - 1) + fib(n - 2)


class Foo(object):
    def __init__(self):
        self.x = {'a': 1, "b": [1, 2, 3]}  # comment
'''

CODE_C = ("#include <stdio.h>\r\nint main(void) {\r\n\tfor (int i = 0; i < 10; ++i) {\r\n\t\tprintf(\"%d\\n\", i);"
          "\r\n\t}\r\n\treturn 0;\r\n}\r\n")

LONG_TEXT = (
    "The quick brown fox jumps over the lazy dog. " * 3
    + "Numbers: 3.14159265358979323846264338327950288419716939937510, 1,000,000 and 2024-01-31T12:34:56Z. "
    + "混合中文和English的句子，包含标点符号。日本語のテキストもあります：カタカナ、ひらがな。 "
    + "Emoji 👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽 and symbols ∑∫√∞ ≠ ≤ ≥ ± × ÷ → ← ↔ ™ © ®. "
    + CODE_PY + CODE_C
    + "Arabic: مرحبا بالعالم، كيف حالك؟ Hindi: नमस्ते दुनिया, आप कैसे हैं? Russian: Привет, мир! "
    + "Greek: Γειά σου Κόσμε. Korean: 안녕하세요 세계. Thai: สวัสดีชาวโลก. Hebrew: שלום עולם. "
    + "   multiple   spaces\t\ttabs\n\n\nnewlines \r\n CRLF   \n  trailing   ")


def cases():
    s = [
        "", " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\n ", " \t \n \r\n ",
        "a", "A", "hello", "Hello world", " Hello world", "Hello  world", "Hello   world  ",
        "hello\nworld", "hello\r\nworld\r\n", "line1\n\n\nline2", "trailing space ", "  leading spaces",
        # contractions and case variants
        "I'm", "you're", "we've", "they'll", "he'd", "it's", "don't", "I'M", "YOU'RE", "WE'VE", "THEY'LL",
        "HE'D", "IT'S", "DON'T", "It'S", "wE'Ve", "'s", "'t 're 've 'm 'll 'd", "rock'n'roll", "'ſ 'K",
        "O'Neil's", "the dog's bone", "can't won't shan't", "'''", "\"quoted\" 'single'",
        # numbers
        "0", "12", "123", "1234", "12345", "1234567890", "3.14159", "1,000,000", "-42", "+1e-10", "0x1F",
        "2024-01-31", "12:34:56", "١٢٣٤٥ (Arabic-Indic digits)", "१२३४ (Devanagari digits)", "½ ⅓ ² ³ ⑴ Ⅻ",
        "31415926535897932384626433832795028841971693993751058209749445923078164062862089986280348253421170679",
        "version 1.2.3-beta.4+build.567",
        # code
        CODE_PY, CODE_C, "\tindented\n\t\tdouble\n    spaces4\n        spaces8\n",
        "if (a && b || !c) { return x->y[0]; }", "x = [1,2,3]\nprint(x[::-1])", "<div class=\"a\">&nbsp;</div>",
        "SELECT * FROM t WHERE id = 1;", "path/to/file.txt", "https://example.com/a?b=c&d=e#f",
        "foo_bar_baz __init__ camelCaseWord snake_case_123", "    \n    \n", "a\tb\tc\t", "{{{{}}}}",
        "!!!???...", "...", "—–-", "'\"`", "#!/bin/sh\necho $HOME", "```python\nprint('hi')\n```",
        # emoji
        "😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇺🇸🇯🇵", "hi 👋 there", "🤖🤖🤖🤖🤖", "1️⃣#️⃣",
        # CJK / other scripts
        "你好", "你好，世界！", "中文English混合", "日本語のテキスト", "カタカナ ひらがな", "한국어 텍스트",
        "漢字かな交じり文。", "繁體中文測試", "中文 123 数字4567", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３",
        "مرحبا بالعالم", "السلام عليكم ورحمة الله", "नमस्ते दुनिया", "हिन्दी भाषा", "Привет, мир!",
        "Γειά σου Κόσμε", "שלום עולם", "สวัสดีชาวโลก", "Tiếng Việt có dấu", "ไทย ລາວ ខ្មែរ",
        # combining marks: NFC and non-NFC forms
        "café", "cafe\u0301", "e\u0301", "\u00e9", "A\u030a", "\u00c5ngstr\u00f6m", "Å",
        "n\u0303", "\u1e9b\u0323", "q\u0307\u0323", "\u0915\u093c", "\uac00", "\u1100\u1161",
        "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f",
        "\u0041\u030a\u0301", "\u2126 \u212b \u2160", "ﬁ ﬂ ﬀ",
        # special / added token text
        "<|im_start|>user\nhi<|im_end|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|>", "<|endoftext|><|endoftext|>", "a<|im_end|>b", " <|im_end|> ", "<think>\nhmm\n</think>\n\n",
        "<tool_call>{\"name\": \"f\"}</tool_call>", "<|im_start", "im_start|>", "<|im_start|", "<|im_end|x",
        "<|IM_START|>", "<<|im_start|>>", "<|im_start|><|im_start|>",
        "<｜begin▁of▁sentence｜>", "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>",
        "<｜User｜>hi<｜Assistant｜>", "<｜begin▁of▁sentence", "begin▁of▁sentence｜>", "<｜tool▁sep｜>x",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get", "▁▁▁", "<|fim_prefix|>x<|fim_suffix|>",
        # whitespace variety
        "a\u00a0b", "a\u2009b", "a\u3000b", "a\u200bb", "a\u2028b", "a\u0085b", "a\u180eb", "a\ufeffb",
        "a\u1680b", "a\u202fb", "\u00a0\u00a0", " \u00a0 ", "\x0b\x0c", "a\x0bb\x0cc",
        # control characters / NUL
        "\x00", "a\x00b", "\x01\x02\x03\x1f\x7f", "\u0080\u009f",
        # misc unicode
        "Ω≈ç√∫˜µ≤≥÷", "∑∫√∞", "™©®", "\U0001d400\U0001d401 math bold", "\U00010000\U0010fffd",
        "\ufffd", "\U0001f600" * 20, "a" * 300, " " * 100, "\n" * 50, "ab " * 100, "-" * 80, "=" * 64,
        "!@#$%^&*()_+-=[]{}|;':\",./<>?", "word. Word! WORD? word,word;word:word",
        "mixedCASEandNumbers123abc456", "ALLCAPS SENTENCE HERE", "Ünïcödé Çäsé", "ǅǆǄ ǈ", "İstanbul ıi",
        "straße STRASSE", "ﬆ ſt", "Zürich", "naïve coöperate",
        LONG_TEXT,
    ]
    out = [x.encode("utf-8") for x in s]
    # invalid / odd UTF-8 byte sequences (HF sees them after lossy decoding)
    out += [b"\xff", b"a\xffb", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82(", b"\xf0\x9f\x98",
            b"\xed\xa0\x80", b"\xc0\xaf", b"\x80\x80", b"\xf5\x80\x80\x80", b"ok\xe4\xbd\xa0\xe5\xa5"]
    return out


def fuzz_cases(n, seed):
    rng = random.Random(seed)
    frags = ["a", "Z", "the", " ", "  ", "\t", "\n", "\r\n", "'s", "'LL", "1", "23", "456", "7890", ".", ",",
             "!?", "...", "(", ")", "{", "}", "_", "-", "é", "e\u0301", "ü", "中", "文字", "ひら", "カタ",
             "한", "ب", "ा", "न", "😀", "👍🏽", "‍", "\u00a0", "\u3000", "\u2028", "\u0085", "<|im_end|>",
             "<|im_start|>", "<think>", "<｜end▁of▁sentence｜>", "<｜tool▁sep｜>", "<|", "|>", "｜", "▁",
             "\x00", "\x7f", "ß", "İ", "ſ", "Ω", "½", "²", "٣", "\U0001d400", "#", "$", "@", "'", '"', "`",
             "</think>", "cafe\u0301", "café", "qzxq", "x", " x ", "ſt", "aeiou", "\u0301"]
    out = []
    for _ in range(n):
        k = rng.randint(0, 12)
        s = "".join(rng.choice(frags) if rng.random() < 0.8 else chr(rng.choice(
            [rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff), rng.randint(0x3000, 0xd7ff),
             rng.randint(0xe000, 0xffff), rng.randint(0x10000, 0x1fbff)])) for _ in range(k))
        out.append(s.encode("utf-8"))
    return out


def ucd_table(out_path):
    """Writes src/tokenizer_ucd.h: for \\p{L} \\p{N} \\p{M} \\p{P} \\p{S}, the code points HF's regex engine
    (Oniguruma, newer Unicode) puts in the class but Python's unicodedata (the Unicode version of the PCRE2 we
    link, 14.0 for PCRE2 10.42) does not: code points assigned since. The C side appends them to each class."""
    from tokenizers import Regex, pre_tokenizers
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    text = "".join(map(chr, cps))

    def onig_set(pat):
        rest = set()
        for _, (a, b) in pre_tokenizers.Split(Regex(pat), "removed").pre_tokenize_str(text):
            rest.update(range(a, b))
        return {cps[i] for i in range(len(cps)) if i not in rest}

    lines = ["/* tokenizer_ucd.h - generated by tools/tok_reference.py --ucd; do not edit.",
             " * Code points in HF tokenizers' (Oniguruma) \\p{X} classes but unassigned in Unicode %s (the" % unicodedata.unidata_version,
             " * tables of PCRE2 10.42): appended to each class so that PCRE2 splits text as HF does. */",
             "#ifndef HM_TOKENIZER_UCD_H", "#define HM_TOKENIZER_UCD_H", "",
             "static const char *const tk_ucd_extra[5] = {"]
    for cat in "LNMPS":
        onig = onig_set(r"\p{%s}" % cat)
        base = {c for c in cps if unicodedata.category(chr(c)).startswith(cat)}
        if base - onig:
            sys.exit(f"{cat}: {len(base - onig)} code points left the class; a subtraction would be needed")
        add = sorted(onig - base)
        ranges, i = [], 0
        while i < len(add):
            j = i
            while j + 1 < len(add) and add[j + 1] == add[j] + 1:
                j += 1
            ranges.append("\\\\x{%X}" % add[i] if i == j else "\\\\x{%X}-\\\\x{%X}" % (add[i], add[j]))
            i = j + 1
        lines.append(f"    /* {cat}: {len(add)} code points in {len(ranges)} ranges */")
        chunk = ""
        for r in ranges:
            if len(chunk) + len(r) > 96:
                lines.append(f'    "{chunk}"')
                chunk = ""
            chunk += r
        lines.append(f'    "{chunk}",')
    lines += ["};", "", "#endif"]
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"-> {out_path}", file=sys.stderr)


VARIANTS = {
    # GPT-2 style: ByteLevel with its own regex and a prefix space, no normalizer
    "bytelevel": {"normalizer": None,
                  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}},
    # Llama-3 style: its regex, ignore_merges
    "llama3": {"normalizer": None, "ignore_merges": True,
               "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                   {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                    "behavior": "Isolated", "invert": False},
                   {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}},
    # GLM-4 style: the Llama-3 regex without ignore_merges (GGUF pre "glm4")
    "glm4": {"normalizer": None, "ignore_merges": False, "pre_tokenizer": None},
    # every Split behaviour, invert, a literal pattern, Digits
    "splits": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "Split", "pattern": {"Regex": " "}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[aeiou]+"}, "behavior": "Contiguous", "invert": True},
        {"type": "Split", "pattern": {"String": "x"}, "behavior": "Removed", "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\p{P}"}, "behavior": "MergedWithPrevious", "invert": False},
        {"type": "Digits", "individual_digits": False},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": False}]}},
    # added-token flags: lstrip, rstrip, single_word, normalized (with NFC), non-NFC content
    "added": {"added_flags": {"<|im_start|>": {"lstrip": True}, "<|im_end|>": {"rstrip": True},
                              "<think>": {"single_word": True}, "</think>": {"normalized": True, "lstrip": True,
                                                                             "rstrip": True}},
              "added_new": [{"content": "cafe\u0301", "normalized": True}, {"content": "qzxq", "single_word": True},
                            {"content": "ſt", "normalized": False}, {"content": " x ", "normalized": True}]},
}


VARIANTS["glm4"]["pre_tokenizer"] = VARIANTS["llama3"]["pre_tokenizer"]


def make_variant(name):
    doc = json.loads(gzip.open(os.path.join(ROOT, "tests", "tokenizer", "qwen3.json.gz")).read())
    v = VARIANTS[name]
    for k in ("normalizer", "pre_tokenizer"):
        if k in v:
            doc[k] = v[k]
    if "ignore_merges" in v:
        doc["model"]["ignore_merges"] = v["ignore_merges"]
    for a in doc["added_tokens"]:
        a.update(v.get("added_flags", {}).get(a["content"], {}))
    next_id = max(a["id"] for a in doc["added_tokens"]) + 1
    for a in v.get("added_new", []):
        doc["added_tokens"].append({"id": next_id, "content": a["content"], "single_word": a.get("single_word", False),
                                    "lstrip": False, "rstrip": False, "normalized": a["normalized"] if "normalized" in a
                                    else True, "special": False})
        next_id += 1
    return json.dumps(doc, ensure_ascii=False)


def load(model):
    path = os.path.join(os.path.dirname(ROOT), "shared", "data", "tokenizers", model, "tokenizer.json.gz")
    if not os.path.exists(path):
        path = os.path.join(ROOT, "tests", "tokenizer", model + ".json.gz")
    with gzip.open(path, "rb") as f:
        return Tokenizer.from_str(f.read().decode("utf-8"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "tokenizer", "reference.json"))
    ap.add_argument("--fuzz", type=int, default=0, help="random strings instead of the fixed list")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ucd", metavar="C_FILE", help="write the Unicode class-addition table (src/tokenizer_ucd.h) instead")
    ap.add_argument("--variant", choices=sorted(VARIANTS), help="an edited Qwen3 tokenizer (see VARIANTS)")
    args = ap.parse_args()
    if args.ucd:
        return ucd_table(args.ucd)
    models = MODELS
    if args.variant:
        text = make_variant(args.variant)
        with open(args.out + ".tokenizer.json", "w") as f:
            f.write(text)
        toks, models = {args.variant: Tokenizer.from_str(text)}, [args.variant]
    else:
        toks = {m: load(m) for m in MODELS}
    inputs = fuzz_cases(args.fuzz, args.seed) if args.fuzz else cases()
    if args.variant:
        inputs += cases()
    recs = []
    for b in inputs:
        text = b.decode("utf-8", "replace")
        try:
            b.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        recs.append({
            "hex": b.hex(),
            "valid_utf8": valid,
            "nfc": unicodedata.normalize("NFC", text) == text,
            "ids": {m: toks[m].encode(text, add_special_tokens=False).ids for m in models},
        })
    doc = {"generator": "tools/tok_reference.py", "tokenizers_version": TOKENIZERS_VERSION,
           "models": models, "cases": recs}
    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{len(recs)} cases -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
