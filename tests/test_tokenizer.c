/* test_tokenizer.c - the tokenizer against HF `tokenizers` ids (tests/tokenizer/reference.json, made by
 * tools/tok_reference.py) for the real Qwen3 and DeepSeek-V3 tokenizer.json files, plus decode
 * round trips, streaming decode, GGUF export/reload, error paths and an encode-speed figure.
 *   test_tokenizer                                  the committed reference, both real tokenizers
 *   test_tokenizer REF.json                         another reference file (e.g. tok_reference.py --fuzz)
 *   test_tokenizer REF.json TOKENIZER.json MODEL    one tokenizer.json against REF's ids for MODEL */
#define _GNU_SOURCE
#include "tokenizer.h"
#include "gguf.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef HM_TESTS_DIR
#define HM_TESTS_DIR "tests"
#endif

static int n_fail;
#define CHECK(cond, ...) do { if (!(cond)) { n_fail++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static char tmpdir[256];

/* Decompresses gz into tmpdir/<name> with the system gzip (the product does not link zlib). */
static int gunzip_to(const char *gz, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", tmpdir, name);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s' > '%s'", gz, out);
    return system(cmd) == 0 ? 0 : -1;
}

static int copy_file(const char *src, const char *dst) {
    hm_error e; size_t n;
    char *buf = hm_read_file(src, &n, &e);
    if (!buf) return -1;
    FILE *f = fopen(dst, "wb");
    int ok = f && fwrite(buf, 1, n, f) == n;
    if (f) fclose(f);
    free(buf);
    return ok ? 0 : -1;
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs(text, f); fclose(f);
    return 0;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static char *unhex(const char *h, size_t *n) {
    size_t l = strlen(h);
    char *s = malloc(l / 2 + 1);
    for (size_t i = 0; i + 1 < l; i += 2) s[i / 2] = (char)(hexval(h[i]) * 16 + hexval(h[i + 1]));
    *n = l / 2; s[*n] = 0;
    return s;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s (%zu):", label, n);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* Every reference case for one model: ids equal HF's; decode(encode(s)) == s when it should. */
/* has_nfc: 0 no normalizer, 1 NFC (round trip only for NFC text), -1 no round-trip check at all */
static int check_reference(const tokenizer *t, const cJSON *cases, const char *model, int has_nfc) {
    int n = 0, pass = 0; const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const cJSON *want = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "ids"), model);
        if (!want) continue;
        size_t len; char *s = unhex(cJSON_GetObjectItem(c, "hex")->valuestring, &len);
        int32_t *ids; size_t nids; hm_error e = {{0}};
        int ok = tokenizer_encode(t, s, len, &ids, &nids, &e) == 0;
        if (!ok) fprintf(stderr, "FAIL %s case %d: encode error: %s\n", model, n, e.msg);
        int same = ok && (size_t)cJSON_GetArraySize(want) == nids;
        for (size_t i = 0; same && i < nids; i++) same = cJSON_GetArrayItem(want, (int)i)->valueint == ids[i];
        if (ok && !same) {
            fprintf(stderr, "FAIL %s case %d: ids differ for \"%.80s\"\n", model, n, s);
            int32_t *w = malloc(sizeof *w * (size_t)(cJSON_GetArraySize(want) + 1)); size_t nw = 0; const cJSON *x;
            cJSON_ArrayForEach(x, want) w[nw++] = x->valueint;
            print_ids("hf ", w, nw); print_ids("ours", ids, nids);
            free(w);
        }
        int rt_ok = 1;
        if (ok && has_nfc >= 0 && cJSON_IsTrue(cJSON_GetObjectItem(c, "valid_utf8")) &&
            (!has_nfc || cJSON_IsTrue(cJSON_GetObjectItem(c, "nfc")))) {
            size_t dl; char *d = tokenizer_decode(t, ids, nids, &dl);
            rt_ok = dl == len && memcmp(d, s, len) == 0;
            if (!rt_ok) fprintf(stderr, "FAIL %s case %d: decode(encode(s)) != s for \"%.80s\"\n", model, n, s);
            free(d);
        }
        pass += ok && same && rt_ok;
        n++;
        if (ok) free(ids);
        free(s);
    }
    printf("%-12s reference: %d/%d strings identical to HF tokenizers\n", model, pass, n);
    n_fail += n - pass;
    return n;
}

/* Streaming decode equals the full decode and never emits a partial UTF-8 character. */
static void check_stream(const tokenizer *t, const char *model) {
    static const char *texts[] = { "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80\xf0\x9d\x90\x80 \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9",
                                   "\xe1\xb8\x80\xe1\xb8\x81\xea\x99\xae\xf0\x90\x80\x80 abc" };
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
        int32_t *ids; size_t n; hm_error e;
        if (tokenizer_encode(t, texts[k], strlen(texts[k]), &ids, &n, &e)) { CHECK(0, "%s", e.msg); continue; }
        tokenizer_stream st = {0};
        char out[4096]; size_t o = 0; int held = 0;
        for (size_t i = 0; i < n; i++) {
            size_t w = tokenizer_stream_push(t, &st, ids[i], out + o, sizeof out - o);
            for (size_t j = 0; j < w;) { /* each chunk is whole characters */
                unsigned char b = (unsigned char)out[o + j];
                size_t cl = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
                CHECK(j + cl <= w, "%s: stream chunk ends inside a character", model);
                j += cl;
            }
            held += st.n_pending > 0;
            o += w;
        }
        o += tokenizer_stream_flush(&st, out + o, sizeof out - o);
        CHECK(o == strlen(texts[k]) && memcmp(out, texts[k], o) == 0, "%s: stream decode differs", model);
        CHECK(held > 0, "%s: expected some character split across tokens in text %zu", model, k);
        free(ids);
    }
    /* a lone lead byte is held, then flushed as is; a stray continuation passes through */
    char b1[] = { (char)0xC3, 0 }; /* 'Ã' is the byte-level image of 0xC3 */
    int32_t lead = tokenizer_find(t, "\xc3\x83"), cont = tokenizer_find(t, "\xc2\xa9"); /* bytes 0xC3, 0xA9 */
    CHECK(lead >= 0 && cont >= 0, "%s: byte tokens not found", model);
    tokenizer_stream st = {0}; char out[16];
    CHECK(tokenizer_stream_push(t, &st, lead, out, sizeof out) == 0 && st.n_pending == 1, "%s: lead byte not held", model);
    size_t w = tokenizer_stream_flush(&st, out, sizeof out);
    CHECK(w == 1 && out[0] == b1[0] && st.n_pending == 0, "%s: flush", model);
    tokenizer_stream_push(t, &st, lead, out, sizeof out);
    w = tokenizer_stream_push(t, &st, cont, out, sizeof out);
    CHECK(w == 2 && memcmp(out, "\xc3\xa9", 2) == 0, "%s: split 'é' not joined", model);
    w = tokenizer_stream_push(t, &st, cont, out, sizeof out);
    CHECK(w == 1 && (unsigned char)out[0] == 0xA9, "%s: stray continuation byte", model);
    CHECK(tokenizer_stream_push(t, &st, -5, out, sizeof out) == 0, "%s: bad id in stream", model);
}

/* Exports to GGUF, reopens, and checks every reference string encodes the same. */
static void check_gguf_roundtrip(const tokenizer *t, const cJSON *cases, const char *model) {
    char path[512]; snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, model);
    hm_error e = {{0}};
    gguf_writer *w = gguf_writer_new();
    int rc = tokenizer_export_gguf(t, w, &e);
    CHECK(rc == 0, "%s: export: %s", model, e.msg);
    FILE *f = fopen(path, "wb");
    if (rc == 0 && f) rc = gguf_writer_begin(w, f, &e);
    if (f) fclose(f);
    gguf_writer_free(w);
    gguf_file g; tokenizer *r = NULL;
    if (rc == 0 && gguf_open(&g, path, &e) == 0) {
        r = tokenizer_load_gguf(&g, &e);
        CHECK(r != NULL, "%s: reload from GGUF: %s", model, e.msg);
        char *pre = gguf_get_str(&g, "tokenizer.ggml.pre");
        printf("%-12s GGUF export: pre=\"%s\"\n", model, pre ? pre : "?");
        free(pre);
        gguf_close(&g);
    } else {
        CHECK(0, "%s: GGUF write/open failed: %s", model, e.msg);
    }
    if (!r) return;
    CHECK(tokenizer_n_vocab(r) == tokenizer_n_vocab(t), "%s: n_vocab %d vs %d", model, tokenizer_n_vocab(r), tokenizer_n_vocab(t));
    CHECK(tokenizer_bos(r) == tokenizer_bos(t) && tokenizer_eos(r) == tokenizer_eos(t), "%s: bos/eos lost", model);
    int n = 0, same = 0; const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        size_t len; char *s = unhex(cJSON_GetObjectItem(c, "hex")->valuestring, &len);
        int32_t *a, *b; size_t na, nb;
        if (tokenizer_encode(t, s, len, &a, &na, &e) == 0) {
            if (tokenizer_encode(r, s, len, &b, &nb, &e) == 0) {
                same += na == nb && memcmp(a, b, na * sizeof *a) == 0;
                free(b);
            }
            free(a);
        }
        n++; free(s);
    }
    for (int32_t id = 0; id < tokenizer_n_vocab(t); id++) {
        size_t l1, l2; const char *p1 = tokenizer_token_bytes(t, id, &l1), *p2 = tokenizer_token_bytes(r, id, &l2);
        if (l1 != l2 || memcmp(p1, p2, l1) || tokenizer_is_special(t, id) != tokenizer_is_special(r, id)) {
            CHECK(0, "%s: token %d differs after GGUF reload", model, id);
            break;
        }
    }
    printf("%-12s GGUF export -> reload: %d/%d strings encode identically\n", model, same, n);
    n_fail += n - same;
    tokenizer_free(r);
}

static void check_speed(const tokenizer *t, const cJSON *cases, const char *model) {
    /* ~2 MB of the reference strings concatenated (code, prose, CJK, emoji, whitespace runs) */
    size_t cap = 1 << 21, n = 0; char *buf = malloc(cap + 65536); const cJSON *c;
    while (n < cap) {
        cJSON_ArrayForEach(c, cases) {
            size_t l; char *s = unhex(cJSON_GetObjectItem(c, "hex")->valuestring, &l);
            if (n + l + 1 < cap + 65536) { memcpy(buf + n, s, l); n += l; buf[n++] = '\n'; }
            free(s);
        }
    }
    int32_t *ids; size_t nids; hm_error e;
    double t0 = hm_now();
    int rc = tokenizer_encode(t, buf, n, &ids, &nids, &e);
    double dt = hm_now() - t0;
    CHECK(rc == 0, "%s: long encode: %s", model, e.msg);
    if (rc == 0) {
        printf("%-12s encode speed: %.2f MB -> %zu tokens in %.3f s (%.1f MB/s, %.2f M tokens/s)\n", model, n / 1e6,
               nids, dt, n / 1e6 / dt, nids / 1e6 / dt);
        size_t dl; char *d = tokenizer_decode(t, ids, nids, &dl);
        free(d); free(ids);
    }
    /* pathological pieces: long whitespace and letter runs */
    size_t big = 200000; char *p = malloc(big + 1);
    memset(p, ' ', big); p[big - 1] = 'x';
    rc = tokenizer_encode(t, p, big, &ids, &nids, &e); CHECK(rc == 0, "%s: long spaces: %s", model, e.msg); if (!rc) free(ids);
    memset(p, 'a', big);
    rc = tokenizer_encode(t, p, big, &ids, &nids, &e); CHECK(rc == 0, "%s: long word: %s", model, e.msg); if (!rc) free(ids);
    free(p); free(buf);
}

static void check_errors(void) {
    hm_error e = {{0}};
    tokenizer *t = tokenizer_load_json("/nonexistent/dir/tokenizer.json", &e);
    CHECK(!t && strstr(e.msg, "cannot open"), "missing file: %s", e.msg);
    char p[512]; snprintf(p, sizeof p, "%s/bad.json", tmpdir);
    static const struct { const char *json, *expect; } bad[] = {
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", "malformed JSON" },
        { "", "malformed JSON" },
        { "[1, 2, 3]", "model.vocab missing" },
        { "{\"model\": {\"type\": \"Unigram\", \"vocab\": {\"a\": 0}}}", "expected \"BPE\"" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}", "bad id" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", "used twice" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", "not in the vocab" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}", "is not \"a b\"" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": \"NFKC\"},"
          "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "unsupported normalizer \"NFKC\"" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Metaspace\"}}",
          "unsupported pre_tokenizer \"Metaspace\"" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\","
          "\"pattern\": {\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\"}}", "pre_tokenizer regex" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": null}", "pre_tokenizer is null" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"},"
          "\"decoder\": {\"type\": \"WordPiece\"}}", "unsupported decoder" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": 1}]}", "added_tokens" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(p, bad[i].json);
        memset(&e, 0, sizeof e);
        t = tokenizer_load_json(p, &e);
        CHECK(!t && strstr(e.msg, bad[i].expect), "bad json %zu: expected \"%s\", got \"%s\"", i, bad[i].expect, e.msg);
        tokenizer_free(t);
    }
    /* a tiny valid tokenizer built by hand: merges, an unknown GGUF pre regex on export */
    write_text(p, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\xc4\xa0\": 3},"
                  "\"merges\": [[\"a\", \"b\"]]}, \"added_tokens\": [{\"id\": 4, \"content\": \"<x>\", \"special\": true,"
                  "\"normalized\": false, \"rstrip\": true}], \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
                  "{\"type\": \"Split\", \"pattern\": {\"String\": \"b\"}, \"behavior\": \"MergedWithPrevious\"},"
                  "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}}");
    t = tokenizer_load_json(p, &e);
    CHECK(t != NULL, "tiny tokenizer: %s", e.msg);
    if (t) {
        int32_t *ids; size_t n;
        int rc = tokenizer_encode(t, "abab<x>  ab\xff", 12, &ids, &n, &e);
        /* "ab","ab" (b merged into its previous), <x> eats the spaces (rstrip), "ab", U+FFFD has no token */
        CHECK(rc == 0 && n == 4 && ids[0] == 2 && ids[1] == 2 && ids[2] == 4 && ids[3] == 2, "tiny encode (n=%zu)", n);
        if (!rc) free(ids);
        CHECK(tokenizer_find(t, "<x>") == 4 && tokenizer_is_special(t, 4) && tokenizer_find(t, "zz") == -1, "tiny find");
        CHECK(tokenizer_token_bytes(t, 99, NULL) == NULL && tokenizer_token_bytes(t, -1, NULL) == NULL, "out of range");
        size_t l; const char *s3 = tokenizer_token_bytes(t, 3, &l);
        CHECK(l == 1 && s3[0] == ' ', "byte-level decode of \xc4\xa0");
        gguf_writer *w = gguf_writer_new();
        memset(&e, 0, sizeof e);
        CHECK(tokenizer_export_gguf(t, w, &e) != 0 && strstr(e.msg, "rstrip"), "export must refuse: %s", e.msg);
        gguf_writer_free(w);
        tokenizer_free(t);
    }
    write_text(p, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {"
                  "\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\d+\"},"
                  "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false}]}}");
    t = tokenizer_load_json(p, &e);
    CHECK(t != NULL, "tiny tokenizer 2: %s", e.msg);
    if (t) {
        gguf_writer *w = gguf_writer_new();
        CHECK(tokenizer_export_gguf(t, w, &e) != 0 && strstr(e.msg, "regex \"\\d+\""), "unknown regex export: %s", e.msg);
        gguf_writer_free(w);
        tokenizer_free(t);
    }
    unlink(p);
}

/* Writes a GGUF holding only what fill() puts in, reopens it and expects tokenizer_load_gguf to fail
 * with a message containing expect. */
static void expect_gguf_error(void (*fill)(gguf_writer *), const char *expect) {
    char path[512]; snprintf(path, sizeof path, "%s/bad.gguf", tmpdir);
    hm_error e = {{0}};
    gguf_writer *w = gguf_writer_new();
    fill(w);
    FILE *f = fopen(path, "wb");
    int rc = f ? gguf_writer_begin(w, f, &e) : -1;
    if (f) fclose(f);
    gguf_writer_free(w);
    gguf_file g;
    if (rc || gguf_open(&g, path, &e)) { CHECK(0, "cannot write/open %s: %s", path, e.msg); return; }
    tokenizer *t = tokenizer_load_gguf(&g, &e);
    CHECK(!t && strstr(e.msg, expect), "bad gguf: expected \"%s\", got \"%s\"", expect, e.msg);
    tokenizer_free(t);
    gguf_close(&g);
    unlink(path);
}

static const char *const g_toks[] = { "a", "b", "<s>" };
static const char *const g_bad_merge[] = { "a b" };
static void g_model_llama(gguf_writer *w) { gguf_w_str(w, "tokenizer.ggml.model", "llama"); }
static void g_pre_unknown(gguf_writer *w) {
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2"); gguf_w_str(w, "tokenizer.ggml.pre", "foo");
}
static void g_no_tokens(gguf_writer *w) {
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2"); gguf_w_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_w_arr_str(w, "tokenizer.ggml.merges", g_bad_merge, 0);
}
static void g_tokens_as_ints(gguf_writer *w) {
    int32_t v[3] = { 1, 2, 3 };
    g_no_tokens(w); gguf_w_arr_i32(w, "tokenizer.ggml.tokens", v, 3);
}
static void g_types_len(gguf_writer *w) {
    int32_t ty[2] = { 1, 1 };
    g_no_tokens(w); gguf_w_arr_str(w, "tokenizer.ggml.tokens", g_toks, 3);
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", ty, 2);
}
static void g_type_range(gguf_writer *w) {
    int32_t ty[3] = { 1, 1, 9 };
    g_no_tokens(w); gguf_w_arr_str(w, "tokenizer.ggml.tokens", g_toks, 3);
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", ty, 3);
}
static void g_merge_missing(gguf_writer *w) {
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2"); gguf_w_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", g_toks, 3);
    gguf_w_arr_str(w, "tokenizer.ggml.merges", g_bad_merge, 1);
}
static void g_bos_range(gguf_writer *w) {
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2"); gguf_w_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", g_toks, 3);
    gguf_w_arr_str(w, "tokenizer.ggml.merges", g_bad_merge, 0);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 7);
}

static void check_gguf_errors(void) {
    expect_gguf_error(g_model_llama, "expected \"gpt2\"");
    expect_gguf_error(g_pre_unknown, "tokenizer.ggml.pre \"foo\" unknown");
    expect_gguf_error(g_no_tokens, "tokenizer.ggml.tokens missing");
    expect_gguf_error(g_tokens_as_ints, "should be an array of strings");
    expect_gguf_error(g_types_len, "token_type has 2 entries");
    expect_gguf_error(g_type_range, "has type 9");
    expect_gguf_error(g_merge_missing, "not in the vocab");
    expect_gguf_error(g_bos_range, "bos_token_id = 7");
}

/* Random bytes (valid or not) never fail or crash, and give ids in range. */
static void check_random_bytes(const tokenizer *t, const char *model) {
    uint64_t x = 88172645463325252ull;
    int bad = 0;
    for (int k = 0; k < 2000; k++) {
        char s[96]; size_t n = (size_t)(k % 96);
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            s[i] = (char)(k & 1 ? x : (x % 3 ? 0x20 + x % 95 : 0x80 + x % 128));
        }
        int32_t *ids; size_t nids; hm_error e;
        if (tokenizer_encode(t, s, n, &ids, &nids, &e)) { bad++; continue; }
        for (size_t i = 0; i < nids; i++) bad += ids[i] < 0 || ids[i] >= tokenizer_n_vocab(t);
        free(ids);
    }
    CHECK(bad == 0, "%s: %d problems encoding random bytes", model, bad);
}

int main(int argc, char **argv) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hm_test_tokenizer_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    const char *ref_path = argc > 1 ? argv[1] : HM_TESTS_DIR "/tokenizer/reference.json";
    hm_error e = {{0}}; size_t len;
    char *ref_text = hm_read_file(ref_path, &len, &e);
    cJSON *ref = ref_text ? cJSON_ParseWithLength(ref_text, len) : NULL;
    if (!ref) { fprintf(stderr, "cannot read %s: %s\n", ref_path, e.msg); return 1; }
    const cJSON *cases = cJSON_GetObjectItem(ref, "cases");
    if (argc > 3) { /* one given tokenizer.json (tok_reference.py --variant) */
        tokenizer *t = tokenizer_load_json(argv[2], &e);
        if (!t) { fprintf(stderr, "%s\n", e.msg); return 1; }
        check_reference(t, cases, argv[3], -1);
        hm_error ee = {{0}}; gguf_writer *w = gguf_writer_new();
        if (tokenizer_export_gguf(t, w, &ee) == 0) check_gguf_roundtrip(t, cases, argv[3]);
        else printf("%-12s GGUF export refused: %s\n", argv[3], ee.msg);
        gguf_writer_free(w);
        tokenizer_free(t);
        cJSON_Delete(ref); free(ref_text); rmdir(tmpdir);
        printf(n_fail ? "test_tokenizer: %d FAILURES\n" : "test_tokenizer: all passed\n", n_fail);
        return n_fail ? 1 : 0;
    }
    static const struct { const char *name; int nfc; int32_t bos, eos, im_end; } models[] = {
        { "qwen3", 1, -1, 151645, 151645 }, { "deepseek-v3", 0, 0, 1, -1 } };
    for (int m = 0; m < 2; m++) {
        char gz[512], json[512], cfg[512], cfg_src[512];
        snprintf(gz, sizeof gz, "%s/tokenizer/%s.json.gz", HM_TESTS_DIR, models[m].name);
        snprintf(cfg_src, sizeof cfg_src, "%s/tokenizer/%s_tokenizer_config.json", HM_TESTS_DIR, models[m].name);
        snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", tmpdir);
        if (gunzip_to(gz, "tokenizer.json", json, sizeof json) || copy_file(cfg_src, cfg)) {
            CHECK(0, "cannot prepare %s", gz);
            continue;
        }
        double t0 = hm_now();
        tokenizer *t = tokenizer_load_json(json, &e);
        if (!t) { CHECK(0, "%s: %s", models[m].name, e.msg); continue; }
        printf("%-12s loaded %d tokens in %.3f s\n", models[m].name, tokenizer_n_vocab(t), hm_now() - t0);
        CHECK(tokenizer_bos(t) == models[m].bos && tokenizer_eos(t) == models[m].eos, "%s: bos %d eos %d",
              models[m].name, tokenizer_bos(t), tokenizer_eos(t));
        if (models[m].im_end >= 0)
            CHECK(tokenizer_find(t, "<|im_end|>") == models[m].im_end && tokenizer_is_special(t, models[m].im_end),
                  "%s: <|im_end|>", models[m].name);
        check_reference(t, cases, models[m].name, models[m].nfc);
        check_stream(t, models[m].name);
        check_random_bytes(t, models[m].name);
        if (argc <= 1) {
            check_gguf_roundtrip(t, cases, models[m].name);
            check_speed(t, cases, models[m].name);
        }
        tokenizer_free(t);
        unlink(json); unlink(cfg);
    }
    check_errors();
    check_gguf_errors();
    cJSON_Delete(ref); free(ref_text);
    char cmd[300]; snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir);
    printf(n_fail ? "test_tokenizer: %d FAILURES\n" : "test_tokenizer: all passed\n", n_fail);
    return n_fail ? 1 : 0;
}
