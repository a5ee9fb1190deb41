#!/usr/bin/env python3
"""Are a change's default GPU kernels the old ones, instruction for instruction?

Compiles CUDA sources of gpu/ at a base commit (a temporary git worktree) and in the working tree
(nvcc -O3, sm_90, the build's flags), disassembles both (cuobjdump -sass) and compares every kernel
by its demangled name, constants and addresses masked. A kernel that gained trailing template
arguments (an experiment's own instances, e.g. `..., 2, false>` for `..., 2>`) is matched to its old
name when the added arguments are false or 0; the added instances are listed. Exit status 1 when a
matched kernel changed or an old one is missing.

Why (session 22): an experiment's code compiled into every instance of a hot kernel behind a
run-time test slowed main's default path by 2-3% although the switch was off; an experiment must
leave the default instances as they were, and this checks it before the device is asked.

    python3 tools/sass_diff.py BASE_COMMIT [gpu/gemv_q8.cu gpu/gemv.cu ...]   (default: every gpu/*.cu)
    CUOBJDUMP=/path/to/cuobjdump   (CUDA's, or `pip download nvidia-cuda-cuobjdump --no-deps` unpacked; formerly -cu13)
    nvdisasm on PATH too (CUDA's, or `pip download nvidia-cuda-nvdisasm --no-deps` unpacked: nvidia/cu13/bin)
"""
import os, re, shutil, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_cuobjdump():
    for c in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if c and os.path.exists(c):
            return c
    sys.exit("sass_diff: no cuobjdump (set CUOBJDUMP; the CUDA toolkit's, or the PyPI wheel nvidia-cuda-cuobjdump "
             "unpacked: its nvidia/cu13/bin/cuobjdump)")


def nvcc():
    for c in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if c and os.path.exists(c):
            return c
    sys.exit("sass_diff: no nvcc")


def sass(tree, src, out_o, objdump):
    inc = [f"-I{tree}/{d}" for d in ("placement", "cpu", "src", "gpu")]
    cmd = [nvcc(), "-DHOTMOE_HAVE_CUDA=1", *inc, "-O3", "-DNDEBUG", "--generate-code=arch=compute_90,code=sm_90",
           "-std=c++17", "-c", os.path.join(tree, src), "-o", out_o]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"sass_diff: {src} in {tree} did not compile:\n{r.stderr[-2000:]}")
    r = subprocess.run([objdump, "-sass", out_o], capture_output=True, text=True)
    text = r.stdout
    if "Function :" not in text:   # e.g. cuobjdump without nvdisasm on PATH: nothing to compare is a failure, not a match
        sys.exit(f"sass_diff: cuobjdump -sass gave no kernels for {src}:\n{r.stderr[-2000:]}")
    kernels, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            cur = m.group(1)
            kernels[cur] = []
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m and cur:
            kernels[cur].append(re.sub(r"0x[0-9a-f]+", "X", m.group(1)))
    names = list(kernels)
    dem = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return {d: kernels[n] for n, d in zip(names, dem)}


def strip_defaults(name):
    """name with trailing template arguments that are false or 0 removed one by one (all variants), each
    also without its last parameter (a kernel that gained a parameter only its added instances read)"""
    out = []
    m = re.match(r"(.*<.*?)(, (?:false|0))>(\(.*)$", name)
    while m:
        name = m.group(1) + ">" + m.group(3)
        out.append(name)
        m = re.match(r"(.*<.*?)(, (?:false|0))>(\(.*)$", name)
    m = re.match(r"void (\w+)<(?:false|0)>(\(.*)$", name)   # a kernel made a template of one such argument
    if m:
        out.append(m.group(1) + m.group(2))
    for n in list(out):
        p = re.match(r"(.*\(.*), [^,()]+\)$", n)
        if p:
            out.append(p.group(1) + ")")
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    base = sys.argv[1]
    srcs = sys.argv[2:] or sorted("gpu/" + f for f in os.listdir(os.path.join(ROOT, "gpu")) if f.endswith(".cu"))
    objdump = find_cuobjdump()
    tmp = tempfile.mkdtemp(prefix="sass_diff.")
    wt = os.path.join(tmp, "base")
    if subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", wt, base], capture_output=True).returncode:
        sys.exit(f"sass_diff: no worktree at {base}")
    bad = 0
    try:
        for src in srcs:
            if not os.path.exists(os.path.join(wt, src)):
                print(f"{src}: new (no base)")
                continue
            old = sass(wt, src, os.path.join(tmp, "old.o"), objdump)
            new = sass(ROOT, src, os.path.join(tmp, "new.o"), objdump)
            matched, added = {}, []
            for n, v in new.items():
                if n in old:
                    matched[n] = v
                    continue
                hit = next((s for s in strip_defaults(n) if s in old and s not in new), None)
                if hit:
                    matched.setdefault(hit, v)
                else:
                    added.append(n)
            same = [n for n in old if n in matched and matched[n] == old[n]]
            diff = [n for n in old if n in matched and matched[n] != old[n]]
            gone = [n for n in old if n not in matched]
            print(f"{src}: {len(same)} kernels the same, {len(diff)} changed, {len(gone)} gone, {len(added)} added")
            for n in diff:
                print(f"  changed ({len(old[n])} -> {len(matched[n])} instructions): {n[:150]}")
            for n in gone:
                print(f"  gone: {n[:150]}")
            for n in added:
                print(f"  added: {n[:150]}")
            bad |= bool(diff or gone)
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", wt], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
