/* test_trace.c - routing trace files: binary round trips (uint8 and uint16 ids, unrecorded rows,
 * an unclosed writer), every kind of malformed header and record, the Mixtral JSONL layouts
 * (token-major, layer-major, both in one file) and mismatches against a model. */
#define _GNU_SOURCE
#include "trace.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef HM_TESTS_DIR
#define HM_TESTS_DIR "tests"
#endif

static int n_pass, n_fail;
#define CHECK(cond, ...) do { int ok_ = (cond); printf("%s ", ok_ ? "PASS" : "FAIL"); printf(__VA_ARGS__); \
    printf("\n"); ok_ ? n_pass++ : n_fail++; } while (0)

static char dir[256];

static const char *tmp(const char *name) {
    static char p[4][512]; static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
    return p[i];
}

static void put(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb"); fwrite(data, 1, n, f); fclose(f);
}

/* Loads path and expects failure with every needle in the message. */
static void expect_error(const char *what, const char *path, const char *needle1, const char *needle2) {
    routing r; hm_error e = { "" };
    int rc = trace_load(path, &r, NULL, &e);
    int ok = rc != 0 && strstr(e.msg, needle1) && (!needle2 || strstr(e.msg, needle2));
    CHECK(ok, "%s -> %s", what, rc ? e.msg : "(loaded!)");
    if (!rc) routing_free(&r);
}

static void test_roundtrip(int n_expert) {
    const char *path = tmp("rt.hmrt");
    hm_error e = { "" };
    trace_writer *w = trace_writer_open(path, 3, n_expert, 2, &e);
    int tok[3][3][2] = {
        { { 0, 1 }, { -1, -1 }, { n_expert - 1, 2 } },
        { { 5, 4 }, { 3, 0 }, { 1, n_expert - 2 } },
        { { 2, 7 }, { 6, 5 }, { -1, -1 } },
    };
    int ok = w != NULL;
    for (int t = 0; t < 3 && ok; t++) ok = trace_writer_token(w, &tok[t][0][0], &e) == 0;
    ok = ok && trace_writer_close(w, &e) == 0;
    routing r; trace_info info;
    ok = ok && trace_load(path, &r, &info, &e) == 0;
    if (ok) {
        ok = r.n_tokens == 3 && r.n_layer == 3 && r.n_expert == n_expert && r.k == 2 && info.format == TRACE_BINARY &&
             info.rows == 7 && info.missing_rows == 2 && !info.unclosed;
        for (int t = 0; t < 3; t++)
            for (int l = 0; l < 3; l++) {
                const uint16_t *row = routing_row(&r, t, l);
                if (tok[t][l][0] < 0) ok &= row == NULL;
                else ok &= row && row[0] == tok[t][l][0] && row[1] == tok[t][l][1];
            }
        routing_free(&r);
    }
    long size = 0; FILE *f = fopen(path, "rb"); if (f) { fseek(f, 0, SEEK_END); size = ftell(f); fclose(f); }
    int width = n_expert <= 255 ? 1 : 2;
    CHECK(ok && size == 32 + 3 * 3 * 2 * width, "round trip, %d experts (%d-byte ids, %ld bytes) %s", n_expert, width, size, e.msg);
}

static void test_writer_errors(void) {
    hm_error e = { "" };
    trace_writer *w = trace_writer_open(tmp("bad.hmrt"), 2, 8, 2, &e);
    int rc1 = trace_writer_token(w, (int[]){ 0, 8, 1, 2 }, &e);
    CHECK(rc1 && strstr(e.msg, "token 0 layer 0") && strstr(e.msg, "found 8"), "writer: id out of range -> %s", e.msg);
    int rc2 = trace_writer_token(w, (int[]){ 0, 1, 3, 3 }, &e);
    CHECK(rc2 && strstr(e.msg, "distinct"), "writer: duplicate id -> %s", e.msg);
    int rc3 = trace_writer_token(w, (int[]){ 0, 1, -1, 3 }, &e);
    CHECK(rc3 && strstr(e.msg, "mix"), "writer: half-recorded row -> %s", e.msg);
    trace_writer_close(w, NULL);
    CHECK(trace_writer_open(tmp("bad.hmrt"), 2, 8, 9, &e) == NULL && strstr(e.msg, "found 2, 8, 9"), "writer: k > n_expert -> %s", e.msg);
}

/* A valid 2-token, 2-layer, 8-expert top-2 file; tests corrupt copies of it. */
static size_t good(uint8_t *b) {
    memset(b, 0, 64);
    memcpy(b, "HMRT", 4);
    b[4] = 1; b[8] = 32; b[12] = 2; b[16] = 8; b[20] = 2; b[24] = 2;
    uint8_t ids[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
    memcpy(b + 32, ids, 8);
    return 40;
}

static void test_malformed(void) {
    uint8_t b[64]; size_t n; const char *p = tmp("m.hmrt");
    n = good(b); put(p, b, n);
    routing r; hm_error e = { "" };
    CHECK(trace_load(p, &r, NULL, &e) == 0 && r.n_tokens == 2, "hand-made file loads %s", e.msg);
    if (!e.msg[0]) routing_free(&r);
    n = good(b); b[0] = 'X'; put(p, b, n); expect_error("bad magic", p, "format", "HMRT");
    n = good(b); b[4] = 9; put(p, b, n); expect_error("bad version", p, "version: expected 1, found 9", NULL);
    n = good(b); b[8] = 40; put(p, b, n); expect_error("bad header size", p, "header_bytes", NULL);
    n = good(b); b[12] = 0; put(p, b, n); expect_error("zero layers", p, "n_layer", NULL);
    n = good(b); b[20] = 9; put(p, b, n); expect_error("k > n_expert", p, "k: expected", "found 9");
    n = good(b); put(p, b, n - 1); expect_error("truncated", p, "size", "found 39 bytes");
    n = good(b); b[24] = 3; put(p, b, n); expect_error("n_tokens too large", p, "n_tokens 3", NULL);
    n = good(b); put(p, b, 20); expect_error("short header", p, "header", "20-byte");
    n = good(b); b[32 + 5] = 8; put(p, b, n); expect_error("id out of range", p, "token 1 layer 0", "found 8");
    n = good(b); b[32 + 5] = 4; put(p, b, n); expect_error("duplicate ids", p, "token 1 layer 0", "distinct");
    n = good(b); b[32 + 6] = 0xFF; put(p, b, n); expect_error("half-recorded row", p, "token 1 layer 1", "mix");
    put(p, "", 0); expect_error("empty file", p, "empty", NULL);
    /* unclosed writer: n_tokens is all ones, the size says 2 tokens */
    n = good(b); memset(b + 24, 0xFF, 8); put(p, b, n);
    trace_info info;
    int rc = trace_load(p, &r, &info, &e);
    CHECK(rc == 0 && info.unclosed && r.n_tokens == 2, "unclosed writer: tokens from the size");
    if (!rc) routing_free(&r);
    n = good(b); memset(b + 24, 0xFF, 8); put(p, b, n - 3); expect_error("unclosed and torn", p, "not closed", NULL);
}

static void test_jsonl(void) {
    const char *p = tmp("t.jsonl");
    routing r; trace_info info; hm_error e = { "" };
    /* token-major, layer 1 of token 1 dropped, token 2 has no layer 0 row (position tells) */
    const char *tm =
        "{\"layer\": 0, \"token_pos\": 0, \"experts\": [1, 2]}\n"
        "{\"layer\": 1, \"token_pos\": 0, \"experts\": [3, 0]}\n"
        "{\"layer\": 0, \"token_pos\": 1, \"experts\": [4, 2]}\n"
        "\n"
        "{\"layer\": 1, \"token_pos\": 2, \"experts\": [5, 6]}\n";
    put(p, tm, strlen(tm));
    int rc = trace_load(p, &r, &info, &e);
    CHECK(rc == 0 && info.format == TRACE_JSONL && r.n_tokens == 3 && r.n_layer == 2 && r.n_expert == 7 && r.k == 2 &&
          info.rows == 4 && !routing_row(&r, 1, 1) && !routing_row(&r, 2, 0) && routing_row(&r, 2, 1)[1] == 6,
          "JSONL token-major with dropped rows %s", e.msg);
    if (!rc) {
        CHECK(trace_conform(p, &r, &info, 2, 8, 2, &e) == 0 && r.n_expert == 8, "JSONL widened to the model's 8 experts");
        CHECK(trace_conform(p, &r, &info, 3, 8, 2, &e) && strstr(e.msg, "n_layer: expected 3") && strstr(e.msg, "found 2"),
              "mismatched layers -> %s", e.msg);
        CHECK(trace_conform(p, &r, &info, 2, 8, 4, &e) && strstr(e.msg, "k: expected 4"), "mismatched k -> %s", e.msg);
        routing_free(&r);
    }
    /* decode rows without positions: a new token whenever the layer does not increase */
    const char *np = "{\"layer\": 0, \"experts\": [1]}\n{\"layer\": 2, \"experts\": [1]}\n{\"layer\": 1, \"experts\": [0]}\n";
    put(p, np, strlen(np));
    rc = trace_load(p, &r, &info, &e);
    CHECK(rc == 0 && r.n_tokens == 2 && r.n_layer == 3 && !routing_row(&r, 0, 1) && routing_row(&r, 1, 1), "JSONL by row order");
    if (!rc) routing_free(&r);
    /* prompt rows (runs per layer, token_idx) followed by decode rows (all position 0) */
    const char *mixed =
        "{\"layer\": 0, \"token_idx\": 0, \"experts\": [0]}\n{\"layer\": 0, \"token_idx\": 1, \"experts\": [1]}\n"
        "{\"layer\": 1, \"token_idx\": 0, \"experts\": [2]}\n{\"layer\": 1, \"token_idx\": 1, \"experts\": [3]}\n"
        "{\"layer\": 0, \"token_idx\": 0, \"experts\": [4]}\n{\"layer\": 1, \"token_idx\": 0, \"experts\": [5]}\n"
        "{\"layer\": 0, \"token_idx\": 0, \"experts\": [6]}\n{\"layer\": 1, \"token_idx\": 0, \"experts\": [7]}\n";
    put(p, mixed, strlen(mixed));
    rc = trace_load(p, &r, &info, &e);
    CHECK(rc == 0 && r.n_tokens == 4 && routing_row(&r, 1, 1)[0] == 3 && routing_row(&r, 2, 0)[0] == 4 &&
          routing_row(&r, 3, 1)[0] == 7, "JSONL prompt runs then decode rows: 2 + 2 tokens %s", e.msg);
    if (!rc) routing_free(&r);

    const char *bad[][3] = {
        { "{\"layer\": 0, \"experts\": [1, 2]}\n{\"layer\": 1, \"experts\": [1, 2\n", ":2:", "malformed" },
        { "{\"layer\": 0, \"experts\": [1, 2]}\n{\"layer\": 1, \"experts\": [1, 2, 3]}\n", ":2: experts", "expected 2 ids" },
        { "{\"layer\": 0, \"experts\": [1, 1]}\n", ":1: experts", "distinct" },
        { "{\"layer\": -1, \"experts\": [1]}\n", ":1: layer", "integer" },
        { "{\"experts\": [1]}\n", ":1: layer", "no such field" },
        { "{\"layer\": 0, \"experts\": [1.5]}\n", ":1: experts[0]", "expert id" },
        { "{\"layer\": 0, \"experts\": []}\n", ":1: experts", "non-empty" },
        { "{\"layer\": 0, \"token_pos\": 0, \"experts\": [1]}\n{\"layer\": 0, \"token_pos\": 0, \"experts\": [1]}\n", ":2:", "second (first on line 1)" },
        { "  \n\n", "format", NULL },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put(p, bad[i][0], strlen(bad[i][0]));
        char what[64]; snprintf(what, sizeof what, "bad JSONL #%zu", i);
        expect_error(what, p, bad[i][1], bad[i][2]);
    }
}

static void test_mixtral(void) {
    routing d, raw; trace_info info; hm_error e = { "" };
    int rc = trace_load(HM_TESTS_DIR "/data/routing/decode_83.jsonl", &d, &info, &e);
    CHECK(rc == 0 && d.n_tokens == 83 && info.missing_rows == 83 * 32 - 2579, "decode_83.jsonl: 83 tokens, 77 rows dropped %s", e.msg);
    if (rc) return;
    /* JSONL -> binary -> same routing */
    const char *bin = tmp("d83.hmrt");
    routing back;
    rc = trace_save(bin, &d, &e) || trace_load(bin, &back, &info, &e);
    CHECK(!rc && back.n_tokens == d.n_tokens && !memcmp(back.ids, d.ids, (size_t)83 * 32 * 2 * 2) && info.format == TRACE_BINARY,
          "decode_83 JSONL -> binary -> identical %s", e.msg);
    if (!rc) routing_free(&back);
    /* the decode part of routing_raw.jsonl (shared data beside the repository, when present) */
    const char *rawp = HM_TESTS_DIR "/../../shared/data/routing/mixtral-8x7b/routing_raw.jsonl";
    if (access(rawp, R_OK) == 0) {
        rc = trace_load(rawp, &raw, &info, &e);
        int same = rc == 0 && raw.n_tokens == 135 + 83;
        if (same) same = !memcmp(raw.ids + (size_t)135 * 32 * 2, d.ids, (size_t)83 * 32 * 2 * 2);
        CHECK(same, "routing_raw.jsonl: 135 prompt + 83 decode tokens, the decode part equals decode_83 %s", e.msg);
        if (!rc) routing_free(&raw);
    } else {
        printf("SKIP routing_raw.jsonl not found at %s\n", rawp);
    }
    routing_free(&d);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/hm_test_trace.XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_roundtrip(8);
    test_roundtrip(300);
    test_writer_errors();
    test_malformed();
    test_jsonl();
    test_mixtral();
    char cmd[300]; snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
