/* tokenizer.c - byte-level BPE encode/decode matching HF `tokenizers`: added-token extraction,
 * NFC, regex pre-tokenization (PCRE2), priority-queue BPE merges, streaming UTF-8 decode.
 * Building a tokenizer (tokenizer.json, GGUF, export) lives in tokenizer_load.c. */
#include "tokenizer_impl.h"
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* realloc that aborts on exhaustion, like hm_malloc (running out of memory is not an input error). */
void *tk_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) { free(p); return hm_malloc(SIZE_MAX); /* hm_malloc reports and aborts */ }
    return q;
}

/* ---------------- byte-level alphabet ---------------- */

static int tk_printable(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174); }

uint32_t tk_byte_to_cp(uint8_t b) {
    if (tk_printable(b)) return b;
    if (b <= 32) return 256u + b;
    if (b <= 160) return 256u + 33u + (b - 127u);
    return 256u + 67u; /* 173 */
}

int tk_cp_to_byte(uint32_t cp) {
    if (cp < 256) return tk_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t n = cp - 256;
    if (n < 33) return (int)n;
    if (n < 67) return (int)(127 + n - 33);
    return 173;
}

/* Length of the valid UTF-8 character at s (and its code point), or 0 if the bytes there are not one. */
size_t tk_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t b = s[0];
    if (b < 0x80) { *cp = b; return 1; }
    size_t len; uint32_t c; uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) { len = 2; c = b & 0x1F; }
    else if (b >= 0xE0 && b <= 0xEF) { len = 3; c = b & 0x0F; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
    else if (b >= 0xF0 && b <= 0xF4) { len = 4; c = b & 0x07; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
    else return 0;
    for (size_t i = 1; i < len; i++) {
        if (i >= n) return 0;
        uint8_t x = s[i];
        if (x < lo || x > hi) return 0;
        lo = 0x80; hi = 0xBF;
        c = (c << 6) | (x & 0x3F);
    }
    *cp = c;
    return len;
}

/* Bytes of the maximal invalid subpart at s (what one U+FFFD replaces; Python and Rust agree). */
static size_t tk_utf8_bad_len(const uint8_t *s, size_t n) {
    uint8_t b = s[0], lo = 0x80, hi = 0xBF; size_t len;
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b >= 0xE0 && b <= 0xEF) { len = 3; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
    else if (b >= 0xF0 && b <= 0xF4) { len = 4; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
    else return 1;
    size_t i = 1;
    for (; i < len && i < n; i++) {
        if (s[i] < lo || s[i] > hi) break;
        lo = 0x80; hi = 0xBF;
    }
    return i;
}

/* A copy of s with each invalid subpart replaced by U+FFFD, or NULL when s is valid UTF-8. */
static char *tk_sanitize(const char *s, size_t n, size_t *out_n) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0; uint32_t cp;
    while (i < n) { size_t l = tk_utf8_decode(u + i, n - i, &cp); if (!l) break; i += l; }
    if (i == n) return NULL;
    char *out = hm_malloc(n * 3 + 1); size_t o = 0;
    memcpy(out, s, i); o = i;
    while (i < n) {
        size_t l = tk_utf8_decode(u + i, n - i, &cp);
        if (l) { memcpy(out + o, s + i, l); o += l; i += l; continue; }
        memcpy(out + o, "\xEF\xBF\xBD", 3); o += 3;
        i += tk_utf8_bad_len(u + i, n - i);
    }
    out[o] = 0; *out_n = o;
    return out;
}

/* ---------------- tables shared with tokenizer_load.c ---------------- */

uint64_t tk_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= (uint8_t)s[i]; h *= 1099511628211ull; }
    return h ^ (h >> 29);
}

int32_t tk_vocab_lookup(const tokenizer *t, const char *s, size_t n) {
    if (!t->vocab_cap) return -1;
    uint32_t mask = t->vocab_cap - 1, i = (uint32_t)tk_hash(s, n) & mask;
    for (;;) {
        int32_t v = t->vocab_ht[i];
        if (!v) return -1;
        const tk_span *sp = &t->text[v - 1];
        if (sp->len == n && memcmp(t->arena + sp->off, s, n) == 0) return v - 1;
        i = (i + 1) & mask;
    }
}

tk_pair *tk_pair_slot(const tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)(b + 1);
    uint32_t mask = t->pair_cap - 1, i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
    while (t->pair_ht[i].key && t->pair_ht[i].key != key) i = (i + 1) & mask;
    return &t->pair_ht[i];
}

int32_t tk_trie_child(const tk_trie *tr, int32_t node, uint8_t b) {
    for (int32_t c = tr->nodes[node].child; c >= 0; c = tr->nodes[c].sibling)
        if (tr->nodes[c].byte == b) return c;
    return -1;
}

/* ---------------- encoding ---------------- */

typedef struct { int32_t id, prev, next; } tk_sym;        /* id -1: merged into its left neighbour */
typedef struct { int32_t rank, pos, id; } tk_heap_item;   /* a candidate merge of sym[pos] and its next */
typedef struct { uint64_t h; uint32_t woff, wlen, ioff, nid; } tk_cache_slot;

#define TK_CACHE_SLOTS (1u << 13)
#define TK_CACHE_MAX_WORD 64

/* Per-call state: encode is reentrant, the tokenizer itself is never written. */
typedef struct {
    const tokenizer *t;
    hm_error *e;
    int32_t *ids; size_t n_ids, cap_ids;
    tk_sym *sym; size_t cap_sym;
    tk_heap_item *heap; size_t cap_heap;
    char *bl; size_t cap_bl;                  /* byte-level form of a word (ignore_merges look-up) */
    pcre2_match_data *md;
    pcre2_match_context *mctx; pcre2_jit_stack *jstack; /* only after a JIT stack overflow */
    tk_cache_slot *cache; uint32_t n_cached;
    char *cw; size_t n_cw, cap_cw;            /* cached words */
    int32_t *ci; size_t n_ci, cap_ci;         /* their ids */
} tk_ctx;

/* Ensures array p (capacity cap elements) holds need elements. */
#define TK_GROW(p, cap, need)                                  \
    do {                                                       \
        if ((need) > (cap)) {                                  \
            size_t c_ = (cap) ? (cap) : 64;                    \
            while (c_ < (need)) c_ *= 2;                       \
            (p) = tk_realloc((p), c_ * sizeof *(p));           \
            (cap) = c_;                                        \
        }                                                      \
    } while (0)

static void tk_push(tk_ctx *c, int32_t id) {
    TK_GROW(c->ids, c->cap_ids, c->n_ids + 1);
    c->ids[c->n_ids++] = id;
}

static int tk_heap_less(const tk_heap_item *a, const tk_heap_item *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void tk_heap_push(tk_ctx *c, size_t *n, tk_heap_item it) {
    TK_GROW(c->heap, c->cap_heap, *n + 1);
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!tk_heap_less(&it, &c->heap[p])) break;
        c->heap[i] = c->heap[p]; i = p;
    }
    c->heap[i] = it;
}

static tk_heap_item tk_heap_pop(tk_ctx *c, size_t *n) {
    tk_heap_item top = c->heap[0], last = c->heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l >= *n) break;
        m = (l + 1 < *n && tk_heap_less(&c->heap[l + 1], &c->heap[l])) ? l + 1 : l;
        if (!tk_heap_less(&c->heap[m], &last)) break;
        c->heap[i] = c->heap[m]; i = m;
    }
    if (*n) c->heap[i] = last;
    return top;
}

static const tk_pair *tk_pair_find(const tokenizer *t, int32_t a, int32_t b) {
    if (!t->pair_cap) return NULL;
    const tk_pair *p = tk_pair_slot(t, a, b);
    return p->key ? p : NULL;
}

static tk_cache_slot *tk_cache_find(tk_ctx *c, const char *w, size_t n, uint64_t h) {
    uint32_t mask = TK_CACHE_SLOTS - 1, i = (uint32_t)h & mask;
    for (;;) {
        tk_cache_slot *s = &c->cache[i];
        if (!s->wlen || (s->h == h && s->wlen == n && memcmp(c->cw + s->woff, w, n) == 0)) return s;
        i = (i + 1) & mask;
    }
}

/* BPE of one pre-token (raw bytes): HF's Word::merge_all, lowest rank first, leftmost on ties. */
static void tk_bpe_word(tk_ctx *c, const char *w, size_t n) {
    const tokenizer *t = c->t;
    if (t->ignore_merges) {
        TK_GROW(c->bl, c->cap_bl, 2 * n);
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t cp = tk_byte_to_cp((uint8_t)w[i]);
            if (cp < 0x80) c->bl[o++] = (char)cp;
            else { c->bl[o++] = (char)(0xC0 | (cp >> 6)); c->bl[o++] = (char)(0x80 | (cp & 0x3F)); }
        }
        int32_t id = tk_vocab_lookup(t, c->bl, o);
        if (id >= 0) { tk_push(c, id); return; }
    }
    uint64_t h = 0; tk_cache_slot *slot = NULL;
    if (n > 1 && n <= TK_CACHE_MAX_WORD) {
        if (!c->cache) c->cache = hm_calloc(TK_CACHE_SLOTS, sizeof *c->cache);
        h = tk_hash(w, n);
        slot = tk_cache_find(c, w, n, h);
        if (slot->wlen) {
            for (uint32_t i = 0; i < slot->nid; i++) tk_push(c, c->ci[slot->ioff + i]);
            return;
        }
    }
    /* initial symbols: one per byte; a byte without a token becomes unk (fused if asked) or vanishes */
    TK_GROW(c->sym, c->cap_sym, n);
    int32_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[(uint8_t)w[i]];
        if (id < 0) {
            if (t->unk_id < 0) continue;
            if (t->fuse_unk && ns > 0 && c->sym[ns - 1].id == t->unk_id) continue;
            id = t->unk_id;
        }
        c->sym[ns] = (tk_sym){ id, ns - 1, ns + 1 };
        ns++;
    }
    if (ns > 0) c->sym[ns - 1].next = -1;
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < ns; i++) {
        const tk_pair *p = tk_pair_find(t, c->sym[i].id, c->sym[i + 1].id);
        if (p) tk_heap_push(c, &nh, (tk_heap_item){ p->rank, i, p->id });
    }
    while (nh) {
        tk_heap_item top = tk_heap_pop(c, &nh);
        tk_sym *s = &c->sym[top.pos];
        if (s->id < 0 || s->next < 0) continue;
        tk_sym *r = &c->sym[s->next];
        const tk_pair *p = tk_pair_find(t, s->id, r->id);
        if (!p || p->id != top.id) continue; /* stale entry */
        s->id = top.id;
        int32_t rn = r->next;
        r->id = -1;
        s->next = rn;
        if (rn >= 0) c->sym[rn].prev = top.pos;
        if (s->prev >= 0) {
            p = tk_pair_find(t, c->sym[s->prev].id, s->id);
            if (p) tk_heap_push(c, &nh, (tk_heap_item){ p->rank, s->prev, p->id });
        }
        if (rn >= 0) {
            p = tk_pair_find(t, s->id, c->sym[rn].id);
            if (p) tk_heap_push(c, &nh, (tk_heap_item){ p->rank, top.pos, p->id });
        }
    }
    size_t first = c->n_ids;
    for (int32_t i = 0; i < ns; i++)
        if (c->sym[i].id >= 0) tk_push(c, c->sym[i].id);
    if (slot && c->n_cached < TK_CACHE_SLOTS / 2) {
        size_t k = c->n_ids - first;
        TK_GROW(c->cw, c->cap_cw, c->n_cw + n);
        TK_GROW(c->ci, c->cap_ci, c->n_ci + k);
        memcpy(c->cw + c->n_cw, w, n);
        memcpy(c->ci + c->n_ci, c->ids + first, k * sizeof *c->ci);
        *slot = (tk_cache_slot){ h, (uint32_t)c->n_cw, (uint32_t)n, (uint32_t)c->n_ci, (uint32_t)k };
        c->n_cw += n; c->n_ci += k; c->n_cached++;
    }
}

/* Next match of re in s[0..n) at or after pos; 1 found, 0 none, -1 error (e set). */
static int tk_regex_next(tk_ctx *c, const pcre2_code *re, const char *s, size_t n, size_t pos, size_t *ms,
                         size_t *me) {
    for (int attempt = 0;; attempt++) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | (attempt == 2 ? PCRE2_NO_JIT : 0),
                             c->md, c->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
            *ms = ov[0]; *me = ov[1];
            return 1;
        }
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && attempt == 0) { /* a long piece: give JIT a bigger stack */
            if (!c->mctx) c->mctx = pcre2_match_context_create(NULL);
            if (!c->jstack) c->jstack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
            if (c->mctx && c->jstack) pcre2_jit_stack_assign(c->mctx, NULL, c->jstack);
            continue;
        }
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && attempt == 1) continue;
        PCRE2_UCHAR msg[256]; pcre2_get_error_message(rc, msg, sizeof msg);
        return hm_fail(c->e, "pre-tokenizer regex failed on a %zu-byte piece: %s", n, (char *)msg);
    }
}

typedef struct { size_t a, b; int m; } tk_seg;

static int tk_pretok(tk_ctx *c, int k, const char *s, size_t n);

/* One Split stage (HF NormalizedString::split) on s[0..n); resulting pieces go to stage k + 1. */
static int tk_split(tk_ctx *c, int k, const char *s, size_t n) {
    const tk_step *st = &c->t->steps[k];
    tk_seg *seg = NULL; size_t nseg = 0, cap = 0;
    size_t pos = 0, prev = 0, ms = 0, me = 0;
    int rc = 0, stream = st->behavior == TK_ISOLATED || st->behavior == TK_REMOVED;
    for (;;) {
        int r = tk_regex_next(c, st->re, s, n, pos, &ms, &me);
        if (r < 0) { rc = -1; break; }
        tk_seg two[2] = { { prev, ms, st->invert }, { ms, me, !st->invert } };
        if (!r) two[0].b = n;
        for (int i = 0; i < (r ? 2 : 1); i++) {
            if (two[i].a == two[i].b && (i == 0 || stream)) continue; /* empty gaps never make a piece */
            if (stream) {
                if (st->behavior == TK_REMOVED && two[i].m) continue;
                if ((rc = tk_pretok(c, k + 1, s + two[i].a, two[i].b - two[i].a)) != 0) break;
            } else {
                TK_GROW(seg, cap, nseg + 1);
                seg[nseg++] = two[i];
            }
        }
        if (rc || !r) break;
        prev = me;
        if (me > ms) pos = me;
        else { /* empty match: step over one character */
            if (ms >= n) break;
            uint32_t cp; size_t l = tk_utf8_decode((const uint8_t *)s + ms, n - ms, &cp);
            pos = ms + (l ? l : 1);
        }
        if (pos > n) break;
    }
    if (!stream && rc == 0) {
        /* fold matches into neighbours as HF does (is_match m), then emit the non-empty pieces */
        size_t na = 0; int prev_m = 0;
        if (st->behavior == TK_MERGED_NEXT) {
            for (size_t i = nseg; i-- > 0;) {
                tk_seg g = seg[i];
                if (g.m && !prev_m && na > 0) seg[nseg - na].a = g.a; /* acc grows from the back */
                else { seg[nseg - 1 - na] = g; na++; }
                prev_m = g.m;
            }
            memmove(seg, seg + nseg - na, na * sizeof *seg);
        } else {
            for (size_t i = 0; i < nseg; i++) {
                tk_seg g = seg[i];
                int merge = st->behavior == TK_MERGED_PREV ? (g.m && !prev_m) : (g.m == prev_m);
                if (merge && na > 0) seg[na - 1].b = g.b;
                else seg[na++] = g;
                prev_m = g.m;
            }
        }
        for (size_t i = 0; i < na && rc == 0; i++)
            if (seg[i].b > seg[i].a) rc = tk_pretok(c, k + 1, s + seg[i].a, seg[i].b - seg[i].a);
    }
    free(seg);
    return rc;
}

/* Pre-tokenizer stage k on a piece; past the last stage the piece is a word for BPE. */
static int tk_pretok(tk_ctx *c, int k, const char *s, size_t n) {
    if (n == 0) return 0;
    if (k == c->t->n_steps) { tk_bpe_word(c, s, n); return 0; }
    const tk_step *st = &c->t->steps[k];
    char *tmp = NULL;
    if (st->prefix_space && s[0] != ' ') {
        tmp = hm_malloc(n + 1); tmp[0] = ' '; memcpy(tmp + 1, s, n);
        s = tmp; n++;
    }
    int rc = st->re ? tk_split(c, k, s, n) : tk_pretok(c, k + 1, s, n);
    free(tmp);
    return rc;
}

static int tk_is_ws(uint32_t cp) { /* Unicode White_Space (Rust regex \s) */
    return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* Whether cp is in tk_ucd_extra[k] (code points assigned after utf8proc's and PCRE2's Unicode). */
static int tk_ucd_has(int k, uint32_t cp) {
    for (const char *p = tk_ucd_extra[k]; (p = strstr(p, "\\x{")) != NULL;) {
        char *end;
        unsigned long lo = strtoul(p + 3, &end, 16), hi = lo;
        p = end + 1;
        if (strncmp(p, "-\\x{", 4) == 0) { hi = strtoul(p + 4, &end, 16); p = end + 1; }
        if (cp >= lo && cp <= hi) return 1;
    }
    return 0;
}

static int tk_is_word(uint32_t cp) { /* Rust regex \w: alphanumeric, marks, connector punctuation, joiners */
    if (cp == 0x200C || cp == 0x200D) return 1;
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    if (cat == UTF8PROC_CATEGORY_CN) return tk_ucd_has(0, cp) || tk_ucd_has(1, cp) || tk_ucd_has(2, cp);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_ND) || cat == UTF8PROC_CATEGORY_NL ||
           cat == UTF8PROC_CATEGORY_PC;
}

/* Code point of the last character of s[0..n) (valid UTF-8), or -1 when empty. */
static int64_t tk_last_cp(const char *s, size_t n, size_t *len) {
    if (n == 0) return -1;
    size_t i = n - 1;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80 && n - i < 4) i--;
    uint32_t cp = 0xFFFD; size_t l = tk_utf8_decode((const uint8_t *)s + i, n - i, &cp);
    *len = l ? l : 1;
    return cp;
}

static int tk_encode_norm(tk_ctx *c, const char *s, size_t n);

/* HF AddedVocabulary::find_matches with a leftmost-longest trie; gaps go to `gap`. */
static int tk_split_added(tk_ctx *c, const tk_trie *tr, const char *s, size_t n,
                          int (*gap)(tk_ctx *, const char *, size_t)) {
    if (!tr->nodes) return gap(c, s, n);
    const tokenizer *t = c->t;
    size_t start_offset = 0, i = 0;
    while (i < n) {
        if (!tr->first[(uint8_t)s[i]]) { i++; continue; }
        int32_t node = 0, best = -1; size_t best_len = 0;
        for (size_t j = i; j < n; j++) {
            node = tk_trie_child(tr, node, (uint8_t)s[j]);
            if (node < 0) break;
            if (tr->nodes[node].added >= 0) { best = tr->nodes[node].added; best_len = j + 1 - i; }
        }
        if (best < 0) { i++; continue; }
        const tk_added *a = &t->added[best];
        size_t start = i, stop = i + best_len, l;
        uint32_t cp;
        i = stop;
        if (a->single_word) {
            int64_t before = tk_last_cp(s, start, &l);
            int start_space = before < 0 || !tk_is_word((uint32_t)before);
            size_t fl = stop < n ? tk_utf8_decode((const uint8_t *)s + stop, n - stop, &cp) : 0;
            int stop_space = stop == n || !fl || !tk_is_word(cp);
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            for (int64_t b; (b = tk_last_cp(s, ns, &l)) >= 0 && tk_is_ws((uint32_t)b);) ns -= l;
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip)
            while (stop < n && (l = tk_utf8_decode((const uint8_t *)s + stop, n - stop, &cp)) && tk_is_ws(cp)) stop += l;
        if (start_offset < start && gap(c, s + start_offset, start - start_offset)) return -1;
        tk_push(c, a->id);
        start_offset = stop;
    }
    if (start_offset < n) return gap(c, s + start_offset, n - start_offset);
    return 0;
}

static int tk_pretok0(tk_ctx *c, const char *s, size_t n) { return tk_pretok(c, 0, s, n); }

/* A piece between non-normalized added tokens: normalize, then split on the normalized ones. */
static int tk_encode_norm(tk_ctx *c, const char *s, size_t n) {
    int ascii = 1;
    for (size_t i = 0; i < n && ascii; i++) ascii = (uint8_t)s[i] < 0x80;
    if (!c->t->nfc || ascii) return tk_split_added(c, &c->t->trie_norm, s, n, tk_pretok0);
    utf8proc_uint8_t *d = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &d,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0) { free(d); return hm_fail(c->e, "NFC normalization failed: %s", utf8proc_errmsg(r)); }
    int rc = tk_split_added(c, &c->t->trie_norm, (const char *)d, (size_t)r, tk_pretok0);
    free(d);
    return rc;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids,
                     hm_error *e) {
    *ids = NULL; *n_ids = 0;
    if (!t || (!text && len)) return hm_fail(e, "tokenizer_encode: NULL argument");
    size_t sn = 0;
    char *clean = len ? tk_sanitize(text, len, &sn) : NULL;
    if (clean) { text = clean; len = sn; }
    tk_ctx c = { .t = t, .e = e };
    c.md = pcre2_match_data_create(1, NULL);
    int rc = c.md ? tk_split_added(&c, &t->trie_raw, text, len, tk_encode_norm)
                  : hm_fail(e, "tokenizer_encode: out of memory");
    pcre2_match_data_free(c.md);
    pcre2_match_context_free(c.mctx);
    if (c.jstack) pcre2_jit_stack_free(c.jstack);
    free(c.sym); free(c.heap); free(c.bl); free(c.cache); free(c.cw); free(c.ci); free(clean);
    if (rc) { free(c.ids); return -1; }
    *ids = c.ids ? c.ids : hm_malloc(sizeof(int32_t));
    *n_ids = c.n_ids;
    return 0;
}

/* ---------------- decoding and look-ups ---------------- */

int tokenizer_n_vocab(const tokenizer *t) { return t->n_vocab; }

const char *tokenizer_token_bytes(const tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) { if (len) *len = 0; return NULL; }
    if (len) *len = t->bytes[id].len;
    return t->arena + t->bytes[id].off;
}

int32_t tokenizer_find(const tokenizer *t, const char *piece) {
    size_t n = strlen(piece);
    for (int32_t i = 0; i < t->n_added; i++) { /* added tokens first, as HF token_to_id */
        const tk_span *sp = &t->text[t->added[i].id];
        if (sp->len == n && memcmp(t->arena + sp->off, piece, n) == 0) return t->added[i].id;
    }
    return tk_vocab_lookup(t, piece, n);
}

int32_t tokenizer_bos(const tokenizer *t) { return t->bos; }
int32_t tokenizer_eos(const tokenizer *t) { return t->eos; }

int tokenizer_is_special(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->type[id] == TK_CONTROL;
}

char *tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, size_t *out_len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < t->n_vocab) total += t->bytes[ids[i]].len;
    char *out = hm_malloc(total + 1); size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) continue;
        memcpy(out + o, t->arena + t->bytes[ids[i]].off, t->bytes[ids[i]].len);
        o += t->bytes[ids[i]].len;
    }
    out[o] = 0;
    if (out_len) *out_len = o;
    return out;
}

/* How many trailing bytes of b[0..n) are the start of a UTF-8 character still missing bytes. */
static size_t tk_incomplete_tail(const uint8_t *b, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        uint8_t x = b[n - k];
        if ((x & 0xC0) == 0x80) continue;
        size_t need = (x >= 0xC2 && x <= 0xDF) ? 2 : (x >= 0xE0 && x <= 0xEF) ? 3 : (x >= 0xF0 && x <= 0xF4) ? 4 : 0;
        return need > k ? k : 0;
    }
    return 0;
}

size_t tokenizer_stream_push(const tokenizer *t, tokenizer_stream *s, int32_t id, char *out, size_t cap) {
    size_t len = 0;
    const char *tok = tokenizer_token_bytes(t, id, &len);
    if (s->n_pending < 0 || s->n_pending > 3) s->n_pending = 0;
    uint8_t buf[1024]; size_t np = (size_t)s->n_pending, o = 0;
    if (!tok || len > sizeof buf - np) { /* unknown id, or a huge token: pass it on whole */
        size_t w = np < cap ? np : cap;
        memcpy(out, s->pending, w); o = w;
        if (tok) { size_t m = len < cap - o ? len : cap - o; memcpy(out + o, tok, m); o += m; }
        s->n_pending = 0;
        return o;
    }
    memcpy(buf, s->pending, np); memcpy(buf + np, tok, len);
    size_t total = np + len, hold = tk_incomplete_tail(buf, total), emit = total - hold;
    o = emit < cap ? emit : cap;
    memcpy(out, buf, o);
    memcpy(s->pending, buf + emit, hold);
    s->n_pending = (int)hold;
    return o;
}

size_t tokenizer_stream_flush(tokenizer_stream *s, char *out, size_t cap) {
    size_t np = s->n_pending > 0 && s->n_pending <= (int)sizeof s->pending ? (size_t)s->n_pending : 0;
    size_t w = np < cap ? np : cap;
    memcpy(out, s->pending, w);
    s->n_pending = 0;
    return w;
}
