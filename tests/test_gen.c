/* test_gen.c - the synthetic model generator end to end: deterministic bytes (same seed, any thread
 * count), a different seed changes them, files load with the intended types and weight scales,
 * one forward step gives finite logits, the tokenizer loads, --stats passes, the gguf Python
 * reader (when installed) agrees, and bad arguments fail cleanly. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include "cpu.h"
#include "gguf.h"
#include "loader.h"
#include "quant.h"
#include "tokenizer.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef HM_BUILD_DIR
#define HM_BUILD_DIR "."
#endif

static int n_pass, n_fail;
static char gen_bin[4096], dir[256];

static void check(int ok, const char *fmt, ...) HM_PRINTF(2, 3);
static void check(int ok, const char *fmt, ...) {
    va_list ap; va_start(ap, fmt);
    printf("%s ", ok ? "PASS" : "FAIL"); vprintf(fmt, ap); printf("\n");
    va_end(ap);
    ok ? n_pass++ : n_fail++;
}

/* Runs hotmoe-gen with args; its output goes to dir/log. Returns the exit status. */
static int gen(const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s > %s/log 2>&1", gen_bin, args, dir);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        char x[65536], y[65536];
        size_t na = fread(x, 1, sizeof x, fa), nb = fread(y, 1, sizeof y, fb);
        if (na != nb || memcmp(x, y, na)) same = 0;
        if (na == 0 || na < sizeof x) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static int type_of(const gguf_file *g, const char *name) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    return t ? t->type : -1;
}

/* std of the dequantized tensor (first rows) */
static double tensor_std(const hm_tensor *t, int rows) {
    float *x = malloc(sizeof(float) * (size_t)t->ne[0]);
    double s1 = 0, s2 = 0; long n = 0;
    for (int r = 0; r < rows && r < t->ne[1]; r++) {
        cpu_tensor_row(t, r, x);
        for (int64_t i = 0; i < t->ne[0]; i++) { s1 += x[i]; s2 += (double)x[i] * x[i]; n++; }
    }
    free(x);
    return sqrt(s2 / n - (s1 / n) * (s1 / n));
}

/* Loads path, checks one forward step and the tokenizer. */
static void check_model(const char *path, const char *label) {
    hm_model m; hm_error e;
    if (model_load(&m, path, &e)) { check(0, "%s: model_load: %s", label, e.msg); return; }
    check(1, "%s: model_load (%d layers + %d MTP, %d experts, %.1f MB)", label, m.cfg.n_layer, m.cfg.n_nextn,
          m.cfg.n_expert, model_weight_bytes(&m) / 1e6);
    cpu_state s;
    cpu_state_init(&s, &m.cfg, 4);
    float *logits = malloc(sizeof(float) * (size_t)m.cfg.n_vocab);
    int finite = 1; float mx = 0;
    for (int pos = 0; pos < 2; pos++) {
        cpu_forward(&m, &s, 300 + pos, pos, logits);
        for (int i = 0; i < m.cfg.n_vocab; i++) { finite &= isfinite(logits[i]) != 0; if (fabsf(logits[i]) > mx) mx = fabsf(logits[i]); }
    }
    check(finite && mx > 0.1f && mx < 100, "%s: forward gives finite logits (max |logit| %.2f)", label, mx);
    double want = 1.0 / sqrt((double)m.cfg.n_embd), got = tensor_std(&m.layers[0].wq, 64);
    check(fabs(got / want - 1) < 0.1, "%s: attn_q std %.4f, intended 1/sqrt(n_embd) = %.4f", label, got, want);
    got = tensor_std(&m.tok_embd, 64);
    check(fabs(got / 2 - 1) < 0.1, "%s: token_embd std %.3f, intended 2 (the embd_std default)", label, got);
    check(m.tok != NULL, "%s: tokenizer loaded from the GGUF metadata", label);
    if (m.tok) {
        int32_t *ids = NULL; size_t n = 0;
        const char *text = "hello babe xo";
        int rc = tokenizer_encode(m.tok, text, strlen(text), &ids, &n, &e);
        size_t len = 0;
        char *back = rc ? NULL : tokenizer_decode(m.tok, ids, n, &len);
        check(!rc && back && len == strlen(text) && !memcmp(back, text, len) && n < strlen(text),
              "%s: tokenizer round trip \"%s\" in %zu tokens (merges used), eos %d", label, text, n, tokenizer_eos(m.tok));
        free(ids); free(back);
    }
    free(logits);
    cpu_state_free(&s);
    model_free(&m);
}

int main(void) {
    const char *env = getenv("HM_GEN_BIN");
    snprintf(gen_bin, sizeof gen_bin, "%s", env ? env : HM_BUILD_DIR "/hotmoe-gen");
    snprintf(dir, sizeof dir, "/tmp/hm_test_gen_XXXXXX");
    if (!mkdtemp(dir)) { printf("FAIL cannot create a temp dir\n0 passed, 1 failed\n"); return 1; }
    char a[512], b[512], c[512], args[2048];
    static const char *mixes[] = { "f32", "q4_k_m", "q8_0" };
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/%s_a.gguf", dir, mixes[i]);
        snprintf(b, sizeof b, "%s/%s_b.gguf", dir, mixes[i]);
        snprintf(c, sizeof c, "%s/%s_c.gguf", dir, mixes[i]);
        snprintf(args, sizeof args, "--shape tiny --mix %s --seed 7 -o %s", mixes[i], a);
        int rc = gen(args);
        check(rc == 0, "tiny %s: generated (exit %d)", mixes[i], rc);
        snprintf(args, sizeof args, "--shape tiny --mix %s --seed 7 --threads 1 -o %s", mixes[i], b);
        gen(args);
        check(same_file(a, b), "tiny %s: same seed, 1 thread vs all: byte-identical", mixes[i]);
        snprintf(args, sizeof args, "--shape tiny --mix %s --seed 8 -o %s", mixes[i], c);
        gen(args);
        check(!same_file(a, c), "tiny %s: another seed gives another file", mixes[i]);
        check_model(a, mixes[i]);
    }
    /* intended types */
    gguf_file g; hm_error e;
    snprintf(a, sizeof a, "%s/q4_k_m_a.gguf", dir);
    if (gguf_open(&g, a, &e)) check(0, "gguf_open %s: %s", a, e.msg);
    else {
        int ok = type_of(&g, "token_embd.weight") == HM_TYPE_Q4_K && type_of(&g, "output.weight") == HM_TYPE_Q6_K &&
                 type_of(&g, "blk.0.attn_q.weight") == HM_TYPE_Q4_K && type_of(&g, "blk.0.attn_v.weight") == HM_TYPE_Q4_K &&
                 type_of(&g, "blk.3.attn_v.weight") == HM_TYPE_Q6_K && type_of(&g, "blk.2.ffn_down_exps.weight") == HM_TYPE_Q6_K &&
                 type_of(&g, "blk.1.ffn_down_exps.weight") == HM_TYPE_Q4_K &&
                 type_of(&g, "blk.0.ffn_gate_exps.weight") == HM_TYPE_Q4_K && type_of(&g, "blk.0.ffn_gate_inp.weight") == HM_TYPE_F32 &&
                 type_of(&g, "blk.0.attn_norm.weight") == HM_TYPE_F32;
        check(ok, "tiny q4_k_m: Q4_K base, Q6_K output and use_more_bits attn_v/ffn_down, F32 norms and router");
        gguf_close(&g);
    }
    snprintf(a, sizeof a, "%s/f32_a.gguf", dir);
    if (!gguf_open(&g, a, &e)) {
        int ok = 1;
        for (uint64_t i = 0; i < g.n_tensors; i++) ok &= g.tensors[i].type == HM_TYPE_F32;
        check(ok, "tiny f32: every tensor F32");
        gguf_close(&g);
    }
    /* glm4moe with the air mix: Q3_K experts, fallback of 1408-wide rows to Q4_0, MTP layer, biases */
    snprintf(a, sizeof a, "%s/glm.gguf", dir);
    snprintf(args, sizeof args, "--shape tinyglm --mix q3_k_m --custom ff_exp=352,ff_shexp=352 --seed 3 -o %s", a);
    int rc = gen(args);
    check(rc == 0, "tinyglm q3_k_m (expert ff 352) generated (exit %d)", rc);
    if (!rc && !gguf_open(&g, a, &e)) {
        int ok = type_of(&g, "blk.1.ffn_gate_exps.weight") == HM_TYPE_Q3_K &&
                 type_of(&g, "blk.1.ffn_down_exps.weight") == HM_TYPE_Q4_0 && type_of(&g, "blk.0.ffn_down.weight") == HM_TYPE_Q4_K &&
                 type_of(&g, "blk.1.exp_probs_b.bias") == HM_TYPE_F32 && type_of(&g, "blk.0.attn_q.bias") == HM_TYPE_F32 &&
                 type_of(&g, "blk.4.nextn.eh_proj.weight") == HM_TYPE_Q4_K && type_of(&g, "blk.4.post_attention_norm.weight") == HM_TYPE_F32;
        check(ok, "tinyglm q3_k_m: Q3_K gate, Q4_0 down on rows of 352, F32 biases, nextn tensors present");
        gguf_close(&g);
        check_model(a, "tinyglm q3_k_m");
    }
    /* every other mix generates, loads and runs */
    static const char *more[] = { "q2_k", "q6_k", "q5_k_m", "q4_0", "mxfp4", "iq4_xs", "bf16", "q5_1" };
    for (int i = 0; i < (int)(sizeof more / sizeof more[0]); i++) {
        snprintf(a, sizeof a, "%s/more.gguf", dir);
        snprintf(args, sizeof args, "--shape tinyglm --mix %s --seed 5 -o %s", more[i], a);
        rc = gen(args);
        hm_model m;
        int ok = rc == 0 && !model_load(&m, a, &e);
        if (ok) {
            cpu_state s; cpu_state_init(&s, &m.cfg, 2);
            float *lg = malloc(sizeof(float) * (size_t)m.cfg.n_vocab);
            cpu_forward(&m, &s, 400, 0, lg);
            for (int j = 0; j < m.cfg.n_vocab; j++) ok &= isfinite(lg[j]) != 0;
            free(lg); cpu_state_free(&s); model_free(&m);
        }
        check(ok, "tinyglm %s: generates, loads, finite logits", more[i]);
    }
    /* --stats: non-degenerate routing, finite logits (exit 0) */
    snprintf(a, sizeof a, "%s/f32_a.gguf", dir);
    snprintf(args, sizeof args, "--stats-only %s --stats-tokens 24", a);
    rc = gen(args);
    check(rc == 0, "--stats on tiny f32: routing not degenerate, logits finite (exit %d)", rc);
    /* the gguf Python reader, when installed */
    if (system("python3 -c 'import gguf' > /dev/null 2>&1") != 0) printf("SKIP gguf Python package not importable\n");
    else {
        char cmd[4096];
        snprintf(cmd, sizeof cmd,
                 "python3 -c \"import gguf,sys,numpy as np\n"
                 "from gguf.quants import dequantize\n"
                 "for p in sys.argv[1:]:\n"
                 "  r=gguf.GGUFReader(p); ty={t.name:t.tensor_type.name for t in r.tensors}\n"
                 "  assert len(r.fields['tokenizer.ggml.tokens'].data)==1024\n"
                 "  for t in r.tensors:\n"
                 "    x=dequantize(t.data,t.tensor_type); assert np.isfinite(x).all(), t.name\n"
                 "print('ok')\" %s/q4_k_m_a.gguf %s/glm.gguf > %s/py.log 2>&1", dir, dir, dir);
        rc = system(cmd);
        check(rc == 0, "gguf Python reader: q4_k_m and q3_k_m files parse, every tensor dequantizes finite");
    }
    /* bad input */
    snprintf(a, sizeof a, "%s/bad.gguf", dir);
    snprintf(args, sizeof args, "--shape nosuch -o %s", a); rc = gen(args);
    check(rc != 0 && access(a, F_OK) != 0, "unknown shape: exit %d, no file", rc);
    snprintf(args, sizeof args, "--shape tiny --custom heads=3 -o %s", a); rc = gen(args);
    check(rc != 0 && access(a, F_OK) != 0, "inconsistent --custom (heads 3 over kv 2): exit %d, no file", rc);
    snprintf(args, sizeof args, "--shape tiny --custom bogus=1 -o %s", a); rc = gen(args);
    check(rc != 0, "unknown --custom key: exit %d", rc);
    snprintf(args, sizeof args, "--shape tiny --mix q9_9 -o %s", a); rc = gen(args);
    check(rc != 0, "unknown mix: exit %d", rc);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    if (system(args)) {}
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
