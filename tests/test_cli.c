/* test_cli.c - end to end through the real binary: the command forms other tools rely on
 * (tokenize, generate, inspect, convert, quantize), the bundled demo model, and usage errors. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static int n_pass, n_fail;

/* Runs cmd with sh, capturing stdout (up to cap bytes); returns the exit status, or -1 on a signal. */
static int run(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return -2;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void check(int ok, const char *what, const char *detail) {
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", what, detail ? ": " : "", detail ? detail : "");
    ok ? n_pass++ : n_fail++;
}

int main(void) {
    char cmd[8192], out[65536];
    const char *bin = HM_HOTMOE_BIN, *fx = HM_TESTS_DIR "/fixtures/qwen3moe";
    /* the ids the fixture's tokenizer gives for this text, recorded from HF tokenizers */
    snprintf(cmd, sizeof cmd, "'%s' tokenize --tokenizer '%s/tokenizer.json' --text 'Hello world, 12345 <|im_end|>'", bin, fx);
    int rc = run(cmd, out, sizeof out);
    check(rc == 0 && !strcmp(out, "39 68 75 295 308 333 11 220 16 17 18 19 20 220 499\n"), "tokenize --tokenizer --text", out);
    snprintf(cmd, sizeof cmd, "printf 'Hello world, 12345 <|im_end|>' | '%s' tokenize -m '%s'", bin, fx);
    rc = run(cmd, out, sizeof out);
    check(rc == 0 && !strcmp(out, "39 68 75 295 308 333 11 220 16 17 18 19 20 220 499\n"), "tokenize -m from stdin", out);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' --text ''", bin, fx);
    rc = run(cmd, out, sizeof out);
    check(rc == 0 && !strcmp(out, "\n"), "tokenize of the empty string is an empty line", NULL);

    snprintf(cmd, sizeof cmd, "'%s' generate -p hi -n 8 --seed 3 --temp 0.7 -q 2>/dev/null", bin);
    rc = run(cmd, out, sizeof out);
    check(rc == 0 && !strncmp(out, "hi", 2), "generate -p hi on the bundled demo model", NULL);
    char first[65536]; strcpy(first, out);
    rc = run(cmd, out, sizeof out);
    check(rc == 0 && !strcmp(first, out), "generate with a seed is reproducible", NULL);
    snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p 'Hello' -n 16 -q 2>/dev/null", bin, fx);
    rc = run(cmd, out, sizeof out);
    check(rc == 0 && !strncmp(out, "Hello", 5), "generate -m HF dir, greedy", NULL);

    snprintf(cmd, sizeof cmd, "'%s' inspect -m '%s/fixtures/glm4moe'", bin, HM_TESTS_DIR);
    rc = run(cmd, out, sizeof out);
    check(rc == 0 && strstr(out, "glm4moe") && strstr(out, "sigmoid") && strstr(out, "shared 1"), "inspect glm4moe", NULL);

    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s/test_cli_q8.gguf' --type Q8_0 -q && '%s' inspect -m '%s/test_cli_q8.gguf'",
             bin, fx, HM_BUILD_DIR, bin, HM_BUILD_DIR);
    rc = run(cmd, out, sizeof out);
    /* hidden 64 is a multiple of 32: matrices become Q8_0, norms and the router stay F32 */
    check(rc == 0 && strstr(out, "Q8_0") && strstr(out, "F32"), "quantize --type Q8_0, then inspect", NULL);
    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s/test_cli_bad.gguf' --type Q9_Z 2>&1", bin, fx, HM_BUILD_DIR);
    rc = run(cmd, out, sizeof out);
    check(rc != 0 && rc != -1 && strstr(out, "Q9_Z") && strstr(out, "Q4_K_M"), "quantize refuses an unknown type, listing the known ones", out);
    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s/test_cli_q4.gguf' --type Q4_K_M -q 2>&1", bin, fx, HM_BUILD_DIR);
    rc = run(cmd, out, sizeof out);
    check(rc == 0, "quantize Q4_K_M-like mix on rows of 64 falls back to types that fit", out);

    snprintf(cmd, sizeof cmd, "'%s' frobnicate 2>&1", bin);
    rc = run(cmd, out, sizeof out);
    check(rc == 2 && strstr(out, "frobnicate"), "unknown command: exit 2, named", NULL);
    snprintf(cmd, sizeof cmd, "'%s' logits -m '%s' --tokens 1,x -o /dev/null 2>&1", bin, fx);
    rc = run(cmd, out, sizeof out);
    check(rc == 2 && strstr(out, "--tokens"), "logits with a malformed --tokens list", out);
    snprintf(cmd, sizeof cmd, "'%s' logits -m '%s' --tokens 1,500 -o /dev/null 2>&1", bin, fx);
    rc = run(cmd, out, sizeof out);
    check(rc == 2 && strstr(out, "[0, 500)"), "logits with a token id out of the vocabulary", out);
    snprintf(cmd, sizeof cmd, "'%s' generate -m /nonexistent -p hi 2>&1", bin);
    rc = run(cmd, out, sizeof out);
    check(rc == 1 && strstr(out, "/nonexistent"), "a missing model path is named", out);

    /* placement flags: malformed values and the wrong target are named */
    static const struct { const char *args, *want; int rc; } bad[] = {
        { "--cold bogus", "--cold", 2 }, { "--gpu-mem -1", "--gpu-mem", 2 }, { "--gpu-mem lots", "--gpu-mem", 2 },
        { "--gpu-reserve 65", "--gpu-reserve", 2 }, { "--gpu-reserve x", "--gpu-reserve", 2 },
        /* --gpu-mem must exceed --gpu-reserve (1 GiB by default), whatever the target */
        { "--gpu-mem 0.8", "--gpu-mem 0.8: expected more than --gpu-reserve 1 ", 1 },
        { "--gpu-mem 2 --gpu-reserve 2", "--gpu-mem 2: expected more than --gpu-reserve 2 ", 1 },
        { "--device cpu --gpu-mem 24,0.5", "--gpu-mem 0.5 (the second GPU): expected more than --gpu-reserve 1 ", 1 },
        { "--static-experts 1.5", "--static-experts", 2 }, { "--cache-slots -2", "--cache-slots", 2 },
        { "--swap-max x", "--swap-max", 2 }, { "--swap-scope wide", "--swap-scope", 2 }, { "--swap-hyst 0.5", "--swap-hyst", 2 }, { "--lfu-decay 0", "--lfu-decay", 2 }, { "--routing", "--routing", 2 },
        { "--device cpu --gpu-mem 8", "--device cuda", 1 }, { "--device cpu --cold stream", "--device cuda", 1 },
        { "--device cpu --cpu-threads 4", "--cold cpu", 1 }, { "--gpus 0,1,2", "--gpus", 2 }, { "--gpu-split 1", "--gpu-split", 2 },
        { "--device cpu --gpus 0,1", "--device cuda", 1 },
        { "--cpu-experts x", "--cpu-experts", 2 }, { "--cpu-experts 1,2,3", "--cpu-experts", 2 },
        { "--device cpu --cpu-experts 99", "the model has 16 routed experts", 1 },   /* more than the model has */
        { "--device cpu --cpu-experts 4,4", "--gpus", 1 }, { "--device cpu --cpu-experts 4 --cold stream", "--cold cpu", 1 },
        { "--device cpu --cpu-experts 4", "--device cuda", 1 }, { "--device cpu --overlap-misses", "--device cuda", 1 },
        { "--device cpu --prefetch", "--device cuda", 1 },
        { "--cpu-handoff pigeon", "--cpu-handoff", 2 }, { "--device cpu --cpu-handoff hostfn", "--cold cpu", 1 },
        { "--device cpu --routing /nonexistent.hmrt", "/nonexistent.hmrt", 1 },
        { "--device cpu --routing " HM_TESTS_DIR "/data/routing/decode_83.jsonl", "decode_83.jsonl", 1 },   /* another model's trace */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p hi -n 2 %s 2>&1", bin, fx, bad[i].args);
        rc = run(cmd, out, sizeof out);
        char what[256];
        snprintf(what, sizeof what, "generate %s: exit %d, names %s", bad[i].args, bad[i].rc, bad[i].want);
        check(rc == bad[i].rc && strstr(out, bad[i].want), what, out);
    }

    /* --gpu-reserve in serve's and plan's own parsers */
    snprintf(cmd, sizeof cmd, "timeout 60 '%s' serve -m '%s' --port 0 --gpu-reserve 70 2>&1", bin, fx);   /* refused before it listens */
    rc = run(cmd, out, sizeof out);
    check(rc == 2 && strstr(out, "--gpu-reserve"), "serve --gpu-reserve 70: exit 2, named", out);
    snprintf(cmd, sizeof cmd, "'%s' plan -m '%s/fixtures/glm4moe' --gpu-reserve 70 2>&1", bin, HM_TESTS_DIR);
    rc = run(cmd, out, sizeof out);
    check(rc == 2 && strstr(out, "--gpu-reserve"), "plan --gpu-reserve 70: exit 2, named", out);
    snprintf(cmd, sizeof cmd, "'%s' plan -m '%s/fixtures/glm4moe' --gpu-mem 0.8 2>&1", bin, HM_TESTS_DIR);
    rc = run(cmd, out, sizeof out);
    check(rc == 2 && strstr(out, "--gpu-mem 0.8: expected more than --gpu-reserve 1 "), "plan --gpu-mem 0.8: exit 2, both named", out);

    /* generate --config: the deployment files of configs/ (the CPU-only one runs here; the GPU ones
     * name what they need) */
    snprintf(cmd, sizeof cmd, "'%s' generate --config '%s/../configs/cpu-only.json' -m '%s' -p hi -n 4 --device cpu -q 2>&1", bin,
             HM_TESTS_DIR, fx);
    rc = run(cmd, out, sizeof out);
    check(rc == 0 && !strncmp(out, "hi", 2), "generate --config configs/cpu-only.json", out);
    snprintf(cmd, sizeof cmd, "'%s' generate --config '%s/../configs/single-gpu-stream.json' -m '%s' -p hi -n 4 --device cpu 2>&1",
             bin, HM_TESTS_DIR, fx);
    rc = run(cmd, out, sizeof out);
    check(rc == 1 && strstr(out, "--device cuda"), "generate --config single-gpu-stream.json on the CPU target names --device cuda", out);
    snprintf(cmd, sizeof cmd, "'%s' generate --config '%s/../configs/dual-gpu-cpu-workers.json' -m '%s' -p hi -n 4 --device cpu 2>&1",
             bin, HM_TESTS_DIR, fx);
    rc = run(cmd, out, sizeof out);
    check(rc == 1 && strstr(out, "--device cuda") && strstr(out, "--gpus"), "generate --config dual-gpu-cpu-workers.json on the CPU "
          "target names --device cuda", out);

    /* routing record -> replay: the replayed choices are the model's own, so logits are identical */
    const char *g4 = HM_TESTS_DIR "/fixtures/glm4moe";
    snprintf(cmd, sizeof cmd, "'%s' logits -m '%s' --tokens 5,6,7,8,9 -o '%s/cli_a.f32' --device cpu --record-routing '%s/cli.hmrt' && "
             "'%s' logits -m '%s' --tokens 5,6,7,8,9 -o '%s/cli_b.f32' --device cpu --replay-routing '%s/cli.hmrt' && cmp '%s/cli_a.f32' '%s/cli_b.f32'",
             bin, g4, HM_BUILD_DIR, HM_BUILD_DIR, bin, g4, HM_BUILD_DIR, HM_BUILD_DIR, HM_BUILD_DIR, HM_BUILD_DIR);
    rc = run(cmd, out, sizeof out);
    check(rc == 0, "--record-routing then --replay-routing of the same run: identical logits", NULL);
    snprintf(cmd, sizeof cmd, "'%s' simulate --trace '%s/cli.hmrt' --slots 4 --policy lru --json", bin, HM_BUILD_DIR);
    rc = run(cmd, out, sizeof out);
    check(rc == 0 && strstr(out, "\"lru\"") && strstr(out, "hit_rate"), "the recorded trace feeds the simulator", NULL);
    snprintf(cmd, sizeof cmd, "'%s' logits -m '%s' --tokens 5,6 -o /dev/null --device cpu --replay-routing '%s/data/routing/decode_83.jsonl' 2>&1",
             bin, g4, HM_TESTS_DIR);
    rc = run(cmd, out, sizeof out);
    check(rc == 1 && strstr(out, "decode_83.jsonl"), "a trace of another model (32 layers, top-2) is refused, named", out);

    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
