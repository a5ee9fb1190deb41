/* tokenizer_load.c - builds a tokenizer from an HF tokenizer.json or from GGUF tokenizer.ggml.*
 * metadata (llama.cpp convention), and writes those GGUF keys back out. */
#include "tokenizer_impl.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---------------- construction ---------------- */


static uint32_t tk_pow2(uint64_t n) { uint32_t c = 16; while (c < n * 2) c <<= 1; return c; }

static tokenizer *tk_new(int32_t n_vocab) {
    tokenizer *t = hm_calloc(1, sizeof *t);
    t->n_vocab = n_vocab;
    t->text = hm_calloc((size_t)n_vocab, sizeof *t->text);
    t->bytes = hm_calloc((size_t)n_vocab, sizeof *t->bytes);
    t->type = hm_calloc((size_t)n_vocab, 1);
    t->in_model = hm_calloc((size_t)n_vocab, 1);
    for (int32_t i = 0; i < n_vocab; i++) t->type[i] = TK_UNUSED;
    t->arena_cap = 1 << 20; t->arena = hm_malloc(t->arena_cap);
    t->arena[0] = 0; t->arena_len = 1; /* offset 0: the empty string */
    t->unk_id = t->bos = t->eos = t->pad = -1;
    return t;
}

static uint32_t tk_arena_add(tokenizer *t, const char *s, size_t n) {
    if (n == 0) return 0;
    while (t->arena_len + n + 1 > t->arena_cap) {
        t->arena_cap *= 2;
        t->arena = tk_realloc(t->arena, t->arena_cap);
    }
    uint32_t off = (uint32_t)t->arena_len;
    memcpy(t->arena + off, s, n); t->arena[off + n] = 0;
    t->arena_len += n + 1;
    return off;
}

static void tk_set_token(tokenizer *t, int32_t id, const char *s, size_t n, int type, int in_model, int raw) {
    t->text[id].off = tk_arena_add(t, s, n); t->text[id].len = (uint32_t)n;
    t->type[id] = (uint8_t)type; t->in_model[id] = (uint8_t)in_model;
    if (type == TK_UNUSED) { t->bytes[id].off = 0; t->bytes[id].len = 0; return; }
    if (!raw) { /* HF ByteLevel decoder: map every char back to its byte, or keep the text as is */
        char buf[256]; size_t o = 0, i = 0; uint32_t cp;
        while (i < n && o < sizeof buf) {
            size_t l = tk_utf8_decode((const uint8_t *)s + i, n - i, &cp);
            int b = l ? tk_cp_to_byte(cp) : -1;
            if (b < 0) break;
            buf[o++] = (char)b; i += l;
        }
        if (i == n) { t->bytes[id].off = tk_arena_add(t, buf, o); t->bytes[id].len = (uint32_t)o; return; }
    }
    t->bytes[id] = t->text[id];
}

static int tk_build_vocab_index(tokenizer *t, hm_error *e) {
    t->vocab_cap = tk_pow2((uint64_t)t->n_vocab);
    t->vocab_ht = hm_calloc(t->vocab_cap, sizeof *t->vocab_ht);
    uint32_t mask = t->vocab_cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!t->in_model[id]) continue;
        const char *s = t->arena + t->text[id].off; size_t n = t->text[id].len;
        int32_t dup = tk_vocab_lookup(t, s, n);
        if (dup >= 0) return hm_fail(e, "vocab: token \"%.64s\" appears twice (ids %d and %d)", s, dup, id);
        uint32_t i = (uint32_t)tk_hash(s, n) & mask;
        while (t->vocab_ht[i]) i = (i + 1) & mask;
        t->vocab_ht[i] = id + 1;
    }
    return 0;
}

static int tk_add_merge(tokenizer *t, const char *a, size_t na, const char *b, size_t nb, hm_error *e) {
    int32_t ia = tk_vocab_lookup(t, a, na), ib = tk_vocab_lookup(t, b, nb);
    if (ia < 0 || ib < 0)
        return hm_fail(e, "merge %d (\"%.*s\" \"%.*s\"): \"%.*s\" is not in the vocab", t->n_merges, (int)na, a,
                       (int)nb, b, ia < 0 ? (int)na : (int)nb, ia < 0 ? a : b);
    char stackbuf[512]; char *ab = na + nb <= sizeof stackbuf ? stackbuf : hm_malloc(na + nb);
    memcpy(ab, a, na); memcpy(ab + na, b, nb);
    int32_t iab = tk_vocab_lookup(t, ab, na + nb);
    if (ab != stackbuf) free(ab);
    if (iab < 0)
        return hm_fail(e, "merge %d (\"%.*s\" \"%.*s\"): the merged token is not in the vocab", t->n_merges,
                       (int)na, a, (int)nb, b);
    if ((uint64_t)(t->n_merges + 1) * 2 > t->pair_cap) { /* grow (and size the rank list) */
        uint32_t old_cap = t->pair_cap; tk_pair *old = t->pair_ht;
        t->pair_cap = old_cap ? old_cap * 2 : 1 << 16;
        t->pair_ht = hm_calloc(t->pair_cap, sizeof *t->pair_ht);
        for (uint32_t i = 0; i < old_cap; i++) {
            if (!old[i].key) continue;
            int32_t l = (int32_t)(old[i].key >> 32) - 1, r = (int32_t)(old[i].key & 0xffffffffu) - 1;
            *tk_pair_slot(t, l, r) = old[i];
        }
        free(old);
        t->merges = tk_realloc(t->merges, (size_t)t->pair_cap / 2 * sizeof *t->merges);
    }
    tk_pair *p = tk_pair_slot(t, ia, ib); /* a repeated pair keeps its last rank, as in HF */
    p->key = ((uint64_t)(uint32_t)(ia + 1) << 32) | (uint32_t)(ib + 1);
    p->rank = t->n_merges; p->id = iab;
    t->merges[t->n_merges][0] = ia; t->merges[t->n_merges][1] = ib;
    t->n_merges++;
    return 0;
}

static void tk_trie_insert(tk_trie *tr, const char *s, size_t n, int32_t added) {
    if (!tr->nodes) {
        tr->cap = 256; tr->nodes = hm_malloc((size_t)tr->cap * sizeof *tr->nodes);
        tr->nodes[0] = (tk_trie_node){ -1, -1, -1, 0 }; tr->n_nodes = 1;
    }
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = tk_trie_child(tr, node, b);
        if (c < 0) {
            if (tr->n_nodes == tr->cap) {
                tr->cap *= 2;
                tr->nodes = tk_realloc(tr->nodes, (size_t)tr->cap * sizeof *tr->nodes);
            }
            c = tr->n_nodes++;
            tr->nodes[c] = (tk_trie_node){ -1, tr->nodes[node].child, -1, b };
            tr->nodes[node].child = c;
        }
        node = c;
    }
    if (tr->nodes[node].added < 0) tr->nodes[node].added = added; /* first token with this text wins */
    tr->first[(uint8_t)s[0]] = 1;
}

static int tk_add_added(tokenizer *t, const tk_added *a, hm_error *e) {
    if (a->id < 0 || a->id >= t->n_vocab) return hm_fail(e, "added token id %d out of range", a->id);
    if (t->text[a->id].len == 0) return 0; /* HF ignores empty added tokens */
    t->added = tk_realloc(t->added, (size_t)(t->n_added + 1) * sizeof *t->added);
    t->added[t->n_added++] = *a;
    return 0;
}

/* Rewrites an HF (Oniguruma) regex so that PCRE2 matches what Oniguruma matches:
 * - `(?i:'s|'t|...)`: Oniguruma folds these ASCII letters only ('ſ does not match 's), PCRE2 folds
 *   Unicode-wide, so purely literal ASCII caseless groups are spelled out as [sS] classes;
 * - `\s`/`\S`: Oniguruma's is Unicode White_Space, PCRE2's also takes U+180E; an explicit list;
 * - `\p{L|N|M|P|S}`: Oniguruma's Unicode is newer than PCRE2 10.42's (14.0), so the code points
 *   assigned since are appended to each class (tokenizer_ucd.c). */
static const char tk_ws_class[] =
    "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

typedef struct { char *p; size_t n, cap; } tk_buf;

static void tk_put(tk_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = tk_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n); b->n += n; b->p[b->n] = 0;
}
static void tk_puts(tk_buf *b, const char *s) { tk_put(b, s, strlen(s)); }

/* Copies a purely literal ASCII `(?i:...)` group at p as ASCII classes; returns its length, 0 if not one. */
static size_t tk_rewrite_caseless(tk_buf *b, const char *p) {
    if (strncmp(p, "(?i:", 4) != 0) return 0;
    size_t j = 4;
    for (; p[j] && p[j] != ')'; j++) {
        unsigned char ch = (unsigned char)p[j];
        if (!(ch == '\'' || ch == '|' || (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z')))
            return 0;
    }
    if (!p[j]) return 0;
    tk_puts(b, "(?:");
    for (size_t k = 4; k < j; k++) {
        char lo = (char)(p[k] | 0x20);
        if (lo >= 'a' && lo <= 'z') { char cls[4] = { '[', lo, (char)(lo - 32), ']' }; tk_put(b, cls, 4); }
        else tk_put(b, p + k, 1);
    }
    tk_puts(b, ")");
    return j + 1;
}

static char *tk_rewrite_pattern(const char *p) {
    tk_buf b = { 0 };
    tk_puts(&b, "");
    size_t n = strlen(p), i = 0, l;
    int in_class = 0;
    while (i < n) {
        if (!in_class && (l = tk_rewrite_caseless(&b, p + i))) { i += l; continue; }
        if (p[i] == '\\' && i + 1 < n) {
            char c = p[i + 1];
            const char *cat = i + 4 < n && c == 'p' && p[i + 2] == '{' && p[i + 4] == '}' ? strchr("LNMPS", p[i + 3]) : NULL;
            if (c == 's' || (c == 'S' && !in_class) || (cat && p[i + 3])) {
                if (!in_class) tk_puts(&b, c == 'S' ? "[^" : "[");
                if (cat) { tk_put(&b, p + i, 5); tk_puts(&b, tk_ucd_extra[cat - "LNMPS"]); }
                else tk_puts(&b, tk_ws_class);
                if (!in_class) tk_puts(&b, "]");
                i += cat ? 5 : 2;
                continue;
            }
            tk_put(&b, p + i, 2); i += 2;
            continue;
        }
        if (!in_class && p[i] == '[') {
            in_class = 1; tk_put(&b, p + i++, 1);
            if (p[i] == '^') tk_put(&b, p + i++, 1);
            if (p[i] == ']') tk_put(&b, p + i++, 1); /* a leading ] is a literal */
            continue;
        }
        if (in_class && p[i] == '[' && p[i + 1] == ':') { /* POSIX [:name:] inside a class */
            const char *end = strstr(p + i + 2, ":]");
            size_t m = end ? (size_t)(end - (p + i)) + 2 : 2;
            tk_put(&b, p + i, m); i += m;
            continue;
        }
        if (in_class && p[i] == ']') in_class = 0;
        tk_put(&b, p + i++, 1);
    }
    return b.p;
}

static int tk_add_step(tokenizer *t, const char *pattern, int literal, int behavior, int invert, int prefix_space,
                int is_bytelevel, hm_error *e) {
    if (t->n_steps == TK_MAX_STEPS) return hm_fail(e, "pre_tokenizer: more than %d stages", TK_MAX_STEPS);
    tk_step *st = &t->steps[t->n_steps];
    memset(st, 0, sizeof *st);
    st->behavior = behavior; st->invert = invert; st->prefix_space = prefix_space; st->is_bytelevel = is_bytelevel;
    if (pattern) {
        char *rw = literal ? hm_strdup(pattern) : tk_rewrite_pattern(pattern);
        int err; PCRE2_SIZE off;
        st->re = pcre2_compile((PCRE2_SPTR)rw, PCRE2_ZERO_TERMINATED,
                               PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP), &err, &off,
                               NULL);
        free(rw);
        if (!st->re) {
            PCRE2_UCHAR msg[256]; pcre2_get_error_message(err, msg, sizeof msg);
            return hm_fail(e, "pre_tokenizer regex \"%.200s\": %s at offset %zu", pattern, (char *)msg, (size_t)off);
        }
        pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE); /* optional: interpreted matching if unavailable */
        st->pattern = hm_strdup(pattern);
    }
    t->n_steps++;
    return 0;
}

static int tk_finish(tokenizer *t, hm_error *e) {
    if (t->n_steps == 0 || !t->steps[t->n_steps - 1].is_bytelevel)
        return hm_fail(e, "pre_tokenizer: expected a ByteLevel stage last (byte-level BPE only)");
    for (int b = 0; b < 256; b++) {
        char s[4]; uint32_t cp = tk_byte_to_cp((uint8_t)b);
        size_t n = cp < 0x80 ? (s[0] = (char)cp, 1) : (s[0] = (char)(0xC0 | (cp >> 6)), s[1] = (char)(0x80 | (cp & 0x3F)), 2);
        t->byte_id[b] = tk_vocab_lookup(t, s, n);
    }
    for (int32_t i = 0; i < t->n_added; i++) {
        const tk_added *a = &t->added[i];
        const char *s = t->arena + t->text[a->id].off; size_t n = t->text[a->id].len;
        if (a->normalized && t->nfc) {
            utf8proc_uint8_t *d = NULL;
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &d,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (r < 0) return hm_fail(e, "added token %d: not valid UTF-8", a->id);
            if (r > 0) tk_trie_insert(&t->trie_norm, (const char *)d, (size_t)r, i);
            free(d);
        } else {
            tk_trie_insert(a->normalized ? &t->trie_norm : &t->trie_raw, s, n, i);
        }
    }
    return 0;
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_steps; i++) { pcre2_code_free(t->steps[i].re); free(t->steps[i].pattern); }
    free(t->arena); free(t->text); free(t->bytes); free(t->type); free(t->in_model);
    free(t->vocab_ht); free(t->pair_ht); free(t->merges); free(t->added);
    free(t->trie_raw.nodes); free(t->trie_norm.nodes);
    free(t);
}


/* ---------------- known pre-tokenizers (GGUF tokenizer.ggml.pre names) ---------------- */

/* Regexes exactly as the HF tokenizer.json files of each family write them; llama.cpp uses the
 * same names for the same splits. llama-bpe and glm4 share a regex and differ in ignore_merges. */
#define TK_RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define TK_RE_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define TK_RE_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define TK_RE_DSV3_CJK "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+"
#define TK_RE_DSV3_MAIN "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|" \
                        " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"

typedef struct { const char *name; int n_re; const char *re[3]; int nfc, ignore_merges; } tk_pre_def;

static const tk_pre_def tk_pre_defs[] = {
    { "gpt-2",       1, { TK_RE_GPT2 },                                     0, 0 },
    { "qwen2",       1, { TK_RE_QWEN2 },                                    1, 0 },
    { "deepseek-v3", 3, { "\\p{N}{1,3}", TK_RE_DSV3_CJK, TK_RE_DSV3_MAIN }, 0, 0 },
    { "llama-bpe",   1, { TK_RE_LLAMA3 },                                   0, 1 },
    { "glm4",        1, { TK_RE_LLAMA3 },                                   0, 0 },
};
#define TK_N_PRE_DEFS ((int)(sizeof tk_pre_defs / sizeof tk_pre_defs[0]))

/* The table row matching t's pre-tokenizer, or NULL with e naming what did not match. */
static const tk_pre_def *tk_pre_match(const tokenizer *t, hm_error *e) {
    const char *re[TK_MAX_STEPS]; int n = 0;
    for (int i = 0; i < t->n_steps; i++) {
        const tk_step *st = &t->steps[i];
        if (st->prefix_space) { hm_fail(e, "GGUF export: ByteLevel add_prefix_space has no GGUF equivalent"); return NULL; }
        if (!st->re) continue;
        if (st->behavior != TK_ISOLATED || st->invert) {
            hm_fail(e, "GGUF export: Split on \"%.200s\" is not Isolated/non-inverted; no GGUF pre name for it", st->pattern);
            return NULL;
        }
        re[n++] = st->pattern;
    }
    const tk_pre_def *same_re = NULL;
    for (int d = 0; d < TK_N_PRE_DEFS; d++) {
        const tk_pre_def *p = &tk_pre_defs[d];
        int ok = p->n_re == n;
        for (int i = 0; ok && i < n; i++) ok = strcmp(p->re[i], re[i]) == 0;
        if (!ok) continue;
        if (p->nfc == t->nfc && p->ignore_merges == t->ignore_merges) return p;
        same_re = p;
    }
    if (same_re)
        hm_fail(e, "GGUF export: regexes match pre \"%s\" but normalizer NFC=%d/ignore_merges=%d differ (expected %d/%d)",
                same_re->name, t->nfc, t->ignore_merges, same_re->nfc, same_re->ignore_merges);
    else
        hm_fail(e, "GGUF export: no known tokenizer.ggml.pre for the pre-tokenizer regex \"%.300s\"%s",
                n ? re[0] : "(none)", n > 1 ? " (and more stages)" : "");
    return NULL;
}

/* ---------------- tokenizer.json ---------------- */

/* Puts "prefix: " in front of the message already in e (from a helper that does not know the file). */
static int tk_fail_prefixed(hm_error *e, const char *prefix) {
    if (!e) return -1;
    char m[sizeof e->msg];
    memcpy(m, e->msg, sizeof m); m[sizeof m - 1] = 0;
    return hm_fail(e, "%.300s: %.700s", prefix, m);
}

static int tk_json_bool(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static const char *tk_json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A token id from a JSON number: an integer in [0, TK_MAX_VOCAB). */
static int tk_json_id(const cJSON *v, int32_t *id) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= TK_MAX_VOCAB ||
        v->valuedouble != (double)(int32_t)v->valuedouble) return -1;
    *id = (int32_t)v->valuedouble;
    return 0;
}

static int tk_parse_normalizer(tokenizer *t, const cJSON *n, const char *path, hm_error *e) {
    if (!n || cJSON_IsNull(n)) return 0;
    const char *type = tk_json_str(n, "type");
    if (type && strcmp(type, "NFC") == 0) { t->nfc = 1; return 0; }
    if (type && strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *it;
        if (!cJSON_IsArray(list)) return hm_fail(e, "%s: normalizer Sequence without a \"normalizers\" array", path);
        cJSON_ArrayForEach(it, list) if (tk_parse_normalizer(t, it, path, e)) return -1;
        return 0;
    }
    return hm_fail(e, "%s: unsupported normalizer \"%s\" (supported: null, NFC, Sequence of NFC)", path,
                   type ? type : "?");
}

static int tk_parse_pre_one(tokenizer *t, const cJSON *p, const char *path, hm_error *e) {
    const char *type = tk_json_str(p, "type");
    if (t->n_steps && t->steps[t->n_steps - 1].is_bytelevel)
        return hm_fail(e, "%s: pre_tokenizer \"%s\" after ByteLevel is not supported", path, type ? type : "?");
    if (type && strcmp(type, "ByteLevel") == 0)
        return tk_add_step(t, tk_json_bool(p, "use_regex", 1) ? TK_RE_GPT2 : NULL, 0, TK_ISOLATED, 0,
                           tk_json_bool(p, "add_prefix_space", 1), 1, e);
    if (type && strcmp(type, "Digits") == 0)
        return tk_add_step(t, tk_json_bool(p, "individual_digits", 0) ? "\\p{N}" : "\\p{N}+", 0, TK_ISOLATED, 0, 0, 0, e);
    if (type && strcmp(type, "Split") == 0) {
        static const char *const names[] = { "Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous" };
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const char *re = tk_json_str(pat, "Regex"), *lit = tk_json_str(pat, "String");
        const char *beh = tk_json_str(p, "behavior");
        int b = -1;
        for (int i = 0; beh && i < 5; i++) if (strcmp(beh, names[i]) == 0) b = i;
        if (!re && !lit) return hm_fail(e, "%s: Split pre_tokenizer needs pattern.Regex or pattern.String", path);
        if (b < 0) return hm_fail(e, "%s: Split behavior \"%s\" unknown", path, beh ? beh : "(missing)");
        return tk_add_step(t, re ? re : lit, re == NULL, b, tk_json_bool(p, "invert", 0), 0, 0, e);
    }
    return hm_fail(e, "%s: unsupported pre_tokenizer \"%s\" (supported: ByteLevel, Split, Digits, Sequence)", path,
                   type ? type : "?");
}

static int tk_parse_pre(tokenizer *t, const cJSON *p, const char *path, hm_error *e) {
    if (!p || cJSON_IsNull(p)) return hm_fail(e, "%s: pre_tokenizer is null; byte-level BPE needs ByteLevel", path);
    const char *type = tk_json_str(p, "type");
    if (type && strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers"), *it;
        if (!cJSON_IsArray(list)) return hm_fail(e, "%s: pre_tokenizer Sequence without \"pretokenizers\"", path);
        cJSON_ArrayForEach(it, list) if (tk_parse_pre_one(t, it, path, e)) return -1;
        return 0;
    }
    return tk_parse_pre_one(t, p, path, e);
}

static int tk_parse_model_opts(tokenizer *t, const cJSON *m, const char *path, hm_error *e) {
    const char *type = tk_json_str(m, "type");
    if (type && strcmp(type, "BPE") != 0) return hm_fail(e, "%s: model.type is \"%s\", expected \"BPE\"", path, type);
    if (tk_json_bool(m, "byte_fallback", 0)) return hm_fail(e, "%s: model.byte_fallback=true is not supported", path);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (d && !cJSON_IsNull(d) && !(cJSON_IsNumber(d) && d->valuedouble == 0))
        return hm_fail(e, "%s: model.dropout is set; only deterministic BPE is supported", path);
    const char *pre = tk_json_str(m, "continuing_subword_prefix"), *suf = tk_json_str(m, "end_of_word_suffix");
    if ((pre && *pre) || (suf && *suf))
        return hm_fail(e, "%s: continuing_subword_prefix/end_of_word_suffix are not supported", path);
    t->ignore_merges = tk_json_bool(m, "ignore_merges", 0);
    t->fuse_unk = tk_json_bool(m, "fuse_unk", 0);
    const char *unk = tk_json_str(m, "unk_token");
    if (unk && (t->unk_id = tk_vocab_lookup(t, unk, strlen(unk))) < 0)
        return hm_fail(e, "%s: model.unk_token \"%.64s\" is not in the vocab", path, unk);
    return 0;
}

static int tk_parse_merges(tokenizer *t, const cJSON *merges, const char *path, hm_error *e) {
    if (!cJSON_IsArray(merges)) return hm_fail(e, "%s: model.merges missing or not an array", path);
    const cJSON *it; int i = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *a, *b; size_t na, nb;
        if (cJSON_IsString(it)) {
            a = it->valuestring;
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) return hm_fail(e, "%s: merge %d \"%.64s\" is not \"a b\"", path, i, a);
            na = (size_t)(sp - a); b = sp + 1; nb = strlen(b);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(it->child) &&
                   cJSON_IsString(it->child->next)) {
            a = it->child->valuestring; b = it->child->next->valuestring; na = strlen(a); nb = strlen(b);
        } else {
            return hm_fail(e, "%s: merge %d is neither \"a b\" nor [a, b]", path, i);
        }
        if (tk_add_merge(t, a, na, b, nb, e)) {
            return tk_fail_prefixed(e, path);
        }
        i++;
    }
    return 0;
}

/* bos/eos/pad from tokenizer_config.json next to tokenizer.json, when there is one. */
static int tk_load_config(tokenizer *t, const char *path, hm_error *e) {
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path + 1) : 0;
    char *cfg_path = hm_malloc(dl + 32);
    memcpy(cfg_path, path, dl); strcpy(cfg_path + dl, "tokenizer_config.json");
    FILE *f = fopen(cfg_path, "rb");
    if (!f) { free(cfg_path); return 0; }
    fclose(f);
    size_t len; char *buf = hm_read_file(cfg_path, &len, e);
    cJSON *root = buf ? cJSON_ParseWithLength(buf, len) : NULL;
    int rc = 0;
    if (!root) rc = buf ? hm_fail(e, "%s: not valid JSON", cfg_path) : -1;
    static const char *const keys[3] = { "bos_token", "eos_token", "pad_token" };
    int32_t *dst[3] = { &t->bos, &t->eos, &t->pad };
    for (int k = 0; root && k < 3; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
        const char *s = cJSON_IsString(v) ? v->valuestring : tk_json_str(v, "content");
        if (s && (*dst[k] = tokenizer_find(t, s)) < 0) {
            rc = hm_fail(e, "%s: %s \"%.64s\" is not a token", cfg_path, keys[k], s);
            break;
        }
    }
    cJSON_Delete(root); free(buf); free(cfg_path);
    return rc;
}

static int tk_build_json(tokenizer **out, const cJSON *root, const char *path, hm_error *e) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), *it;
    if (!cJSON_IsObject(model) || !cJSON_IsObject(vocab)) return hm_fail(e, "%s: model.vocab missing", path);
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return hm_fail(e, "%s: added_tokens is not an array", path);
    int32_t n = 0, id;
    cJSON_ArrayForEach(it, vocab) {
        if (tk_json_id(it, &id)) return hm_fail(e, "%s: vocab entry \"%.64s\" has a bad id", path, it->string);
        if (id + 1 > n) n = id + 1;
    }
    cJSON_ArrayForEach(it, added) {
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, "content")) ||
            tk_json_id(cJSON_GetObjectItemCaseSensitive(it, "id"), &id))
            return hm_fail(e, "%s: an added_tokens entry lacks a string content or a valid id", path);
        if (id + 1 > n) n = id + 1;
    }
    if (n == 0) return hm_fail(e, "%s: empty vocab", path);
    tokenizer *t = *out = tk_new(n);
    cJSON_ArrayForEach(it, vocab) {
        tk_json_id(it, &id);
        if (t->type[id] != TK_UNUSED) return hm_fail(e, "%s: vocab id %d used twice", path, id);
        tk_set_token(t, id, it->string, strlen(it->string), TK_NORMAL, 1, 0);
    }
    if (tk_build_vocab_index(t, e)) return -1;
    cJSON_ArrayForEach(it, added) {
        const char *s = tk_json_str(it, "content");
        tk_json_id(cJSON_GetObjectItemCaseSensitive(it, "id"), &id);
        tk_added a = { id, (uint8_t)tk_json_bool(it, "special", 0), (uint8_t)tk_json_bool(it, "normalized", 1),
                       (uint8_t)tk_json_bool(it, "lstrip", 0), (uint8_t)tk_json_bool(it, "rstrip", 0),
                       (uint8_t)tk_json_bool(it, "single_word", 0) };
        int in_model = t->in_model[id];
        if (in_model && (t->text[id].len != strlen(s) || memcmp(t->arena + t->text[id].off, s, t->text[id].len)))
            return hm_fail(e, "%s: added token %d \"%.64s\" differs from the vocab's token with that id", path, id, s);
        tk_set_token(t, id, s, strlen(s), a.special ? TK_CONTROL : TK_USER, in_model, 0);
        if (tk_add_added(t, &a, e)) return -1;
    }
    if (tk_parse_model_opts(t, model, path, e) ||
        tk_parse_merges(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), path, e) ||
        tk_parse_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), path, e) ||
        tk_parse_pre(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), path, e))
        return -1;
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    const char *dt = tk_json_str(dec, "type");
    if (dec && !cJSON_IsNull(dec) && (!dt || strcmp(dt, "ByteLevel") != 0))
        return hm_fail(e, "%s: unsupported decoder \"%s\" (expected ByteLevel)", path, dt ? dt : "?");
    if (tk_finish(t, e)) return tk_fail_prefixed(e, path);
    return tk_load_config(t, path, e);
}

tokenizer *tokenizer_load_json(const char *path, hm_error *e) {
    size_t len;
    char *buf = hm_read_file(path, &len, e);
    if (!buf) return NULL;
    cJSON *root = cJSON_ParseWithLength(buf, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= buf && at <= buf + len ? (size_t)(at - buf) : 0;
        hm_fail(e, "%s: malformed JSON near byte %zu", path, off);
        free(buf);
        return NULL;
    }
    tokenizer *t = NULL;
    int rc = tk_build_json(&t, root, path, e);
    cJSON_Delete(root); free(buf);
    if (rc) { tokenizer_free(t); return NULL; }
    return t;
}

/* ---------------- GGUF ---------------- */

static const gguf_kv *tk_gguf_arr(const gguf_file *g, const char *key, int elem, hm_error *e) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv) { hm_fail(e, "%s: %s missing", g->path, key); return NULL; }
    int ok = kv->type == GGUF_ARR && (elem == GGUF_STR ? kv->arr_type == GGUF_STR && kv->arr_str
                                                       : kv->arr_type != GGUF_STR && kv->arr_type != GGUF_F32 &&
                                                         kv->arr_type != GGUF_F64 && kv->arr_type != GGUF_BOOL);
    if (!ok) {
        hm_fail(e, "%s: %s should be an array of %s, found %s of %s", g->path, key, elem == GGUF_STR ? "strings" : "integers",
                gguf_vtype_name(kv->type), kv->type == GGUF_ARR ? gguf_vtype_name(kv->arr_type) : "-");
        return NULL;
    }
    return kv;
}

static int tk_build_gguf(tokenizer **out, const gguf_file *g, hm_error *e) {
    char *model = gguf_get_str(g, "tokenizer.ggml.model"), *pre = gguf_get_str(g, "tokenizer.ggml.pre");
    int rc = 0;
    if (!model || strcmp(model, "gpt2") != 0)
        rc = hm_fail(e, "%s: tokenizer.ggml.model is \"%s\", expected \"gpt2\" (byte-level BPE)", g->path,
                     model ? model : "(missing)");
    const tk_pre_def *def = NULL;
    for (int d = 0; !rc && pre && d < TK_N_PRE_DEFS; d++) if (strcmp(pre, tk_pre_defs[d].name) == 0) def = &tk_pre_defs[d];
    if (!rc && !def)
        rc = hm_fail(e, "%s: tokenizer.ggml.pre \"%s\" unknown (known: gpt-2, qwen2, deepseek-v3, llama-bpe, glm4)",
                     g->path, pre ? pre : "(missing)");
    free(model); free(pre);
    if (rc) return -1;
    const gguf_kv *toks = tk_gguf_arr(g, "tokenizer.ggml.tokens", GGUF_STR, e);
    const gguf_kv *merges = tk_gguf_arr(g, "tokenizer.ggml.merges", GGUF_STR, e);
    const gguf_kv *types = gguf_find_kv(g, "tokenizer.ggml.token_type") ? tk_gguf_arr(g, "tokenizer.ggml.token_type", GGUF_I32, e) : NULL;
    if (!toks || !merges || (gguf_find_kv(g, "tokenizer.ggml.token_type") && !types)) return -1;
    if (toks->arr_n == 0 || toks->arr_n > TK_MAX_VOCAB)
        return hm_fail(e, "%s: tokenizer.ggml.tokens has %llu entries (expected 1..%d)", g->path,
                       (unsigned long long)toks->arr_n, TK_MAX_VOCAB);
    if (types && types->arr_n != toks->arr_n)
        return hm_fail(e, "%s: tokenizer.ggml.token_type has %llu entries, tokens has %llu", g->path,
                       (unsigned long long)types->arr_n, (unsigned long long)toks->arr_n);
    int32_t n = (int32_t)toks->arr_n;
    tokenizer *t = *out = tk_new(n);
    for (int32_t i = 0; i < n; i++) {
        int64_t ty = types ? gguf_arr_i64(types, (uint64_t)i) : TK_NORMAL;
        if (ty < TK_NORMAL || ty > TK_BYTE) return hm_fail(e, "%s: token %d has type %lld (expected 1..6)", g->path, i, (long long)ty);
        const gguf_str *s = &toks->arr_str[i];
        if (s->len > UINT32_MAX / 2) return hm_fail(e, "%s: token %d is too long", g->path, i);
        int added = ty == TK_CONTROL || ty == TK_USER;
        tk_set_token(t, i, s->s, (size_t)s->len, (int)ty, !added && ty != TK_UNUSED, added);
        if (ty == TK_UNKNOWN && t->unk_id < 0) t->unk_id = i;
    }
    if (tk_build_vocab_index(t, e)) return -1;
    for (int32_t i = 0; i < n; i++) {
        if (t->type[i] != TK_CONTROL && t->type[i] != TK_USER) continue;
        tk_added a = { i, t->type[i] == TK_CONTROL, 0, 0, 0, 0 };
        if (tk_add_added(t, &a, e)) return -1;
    }
    for (uint64_t i = 0; i < merges->arr_n; i++) {
        const gguf_str *s = &merges->arr_str[i];
        const char *sp = s->len ? memchr(s->s, ' ', (size_t)s->len) : NULL;
        if (!sp || memchr(sp + 1, ' ', (size_t)(s->s + s->len - sp - 1)))
            return hm_fail(e, "%s: tokenizer.ggml.merges[%llu] \"%.*s\" is not \"a b\"", g->path, (unsigned long long)i,
                           (int)(s->len < 64 ? s->len : 64), s->s);
        if (tk_add_merge(t, s->s, (size_t)(sp - s->s), sp + 1, (size_t)(s->s + s->len - sp - 1), e)) {
            return tk_fail_prefixed(e, g->path);
        }
    }
    for (int i = 0; i < def->n_re; i++) if (tk_add_step(t, def->re[i], 0, TK_ISOLATED, 0, 0, 0, e)) return -1;
    if (tk_add_step(t, NULL, 0, TK_ISOLATED, 0, 0, 1, e)) return -1;
    t->nfc = def->nfc; t->ignore_merges = def->ignore_merges;
    static const char *const keys[3] = { "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                         "tokenizer.ggml.padding_token_id" };
    int32_t *dst[3] = { &t->bos, &t->eos, &t->pad };
    for (int k = 0; k < 3; k++) {
        uint64_t v;
        if (!gguf_find_kv(g, keys[k])) continue;
        if (gguf_get_u64(g, keys[k], &v, e)) return -1;
        if (v >= (uint64_t)n) return hm_fail(e, "%s: %s = %llu, vocab has %d tokens", g->path, keys[k], (unsigned long long)v, n);
        *dst[k] = (int32_t)v;
    }
    return tk_finish(t, e);
}

tokenizer *tokenizer_load_gguf(const gguf_file *g, hm_error *e) {
    tokenizer *t = NULL;
    if (tk_build_gguf(&t, g, e)) { tokenizer_free(t); return NULL; }
    return t;
}

int tokenizer_export_gguf(const tokenizer *t, gguf_writer *w, hm_error *e) {
    for (int32_t i = 0; i < t->n_added; i++) {
        const tk_added *a = &t->added[i];
        if (a->lstrip || a->rstrip || a->single_word)
            return hm_fail(e, "GGUF export: added token %d \"%.64s\" has lstrip/rstrip/single_word, which GGUF cannot hold",
                           a->id, t->arena + t->text[a->id].off);
    }
    const tk_pre_def *def = tk_pre_match(t, e);
    if (!def) return -1;
    int32_t n = t->n_vocab;
    const char **toks = hm_calloc((size_t)n, sizeof *toks);
    char **owned = hm_calloc((size_t)n, sizeof *owned);
    int32_t *types = hm_malloc((size_t)n * sizeof *types);
    int rc = 0;
    for (int32_t i = 0; i < n && !rc; i++) {
        const tk_span *sp = &t->text[i];
        types[i] = t->type[i];
        if (sp->len == 0) { /* a hole in the id space: llama.cpp's placeholder */
            owned[i] = hm_malloc(24); snprintf(owned[i], 24, "[PAD%d]", i); toks[i] = owned[i];
            types[i] = TK_UNUSED;
        } else if (strlen(t->arena + sp->off) != sp->len) {
            rc = hm_fail(e, "GGUF export: token %d contains a NUL byte", i);
        } else {
            toks[i] = t->arena + sp->off;
        }
        if (i == t->unk_id && types[i] == TK_NORMAL) types[i] = TK_UNKNOWN;
    }
    char **mer = hm_calloc((size_t)t->n_merges + 1, sizeof *mer);
    for (int32_t i = 0; i < t->n_merges && !rc; i++) {
        const tk_span *a = &t->text[t->merges[i][0]], *b = &t->text[t->merges[i][1]];
        mer[i] = hm_malloc((size_t)a->len + b->len + 2);
        memcpy(mer[i], t->arena + a->off, a->len); mer[i][a->len] = ' ';
        memcpy(mer[i] + a->len + 1, t->arena + b->off, b->len); mer[i][a->len + 1 + b->len] = 0;
    }
    if (!rc) {
        gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_w_str(w, "tokenizer.ggml.pre", def->name);
        gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
        gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n);
        gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)mer, (uint64_t)t->n_merges);
        if (t->bos >= 0) gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos);
        if (t->eos >= 0) gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos);
        if (t->pad >= 0) gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)t->pad);
    }
    for (int32_t i = 0; i < n; i++) free(owned[i]);
    for (int32_t i = 0; i < t->n_merges; i++) free(mer[i]);
    free(owned); free(toks); free(types); free(mer);
    return rc;
}
