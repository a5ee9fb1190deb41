/* tokenizer_impl.h - the tokenizer struct and helpers shared by tokenizer.c (encode/decode) and
 * tokenizer_load.c (building from tokenizer.json or GGUF metadata, export). Not part of the public API. */
#ifndef HM_TOKENIZER_IMPL_H
#define HM_TOKENIZER_IMPL_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include "tokenizer.h"

/* Token types, numbered as GGUF's tokenizer.ggml.token_type. */
enum { TK_NORMAL = 1, TK_UNKNOWN = 2, TK_CONTROL = 3, TK_USER = 4, TK_UNUSED = 5, TK_BYTE = 6 };

/* HF SplitDelimiterBehavior. */
enum { TK_ISOLATED, TK_REMOVED, TK_MERGED_PREV, TK_MERGED_NEXT, TK_CONTIGUOUS };

#define TK_MAX_STEPS 8
#define TK_MAX_VOCAB (1 << 24)

typedef struct { uint32_t off, len; } tk_span; /* into tokenizer.arena */

/* One pre-tokenizer stage: split each piece by a regex (NULL: pass through) after optionally
 * prepending a space (ByteLevel add_prefix_space). The last stage feeds BPE. */
typedef struct {
    char *pattern;        /* as written in tokenizer.json (after JSON unescaping) */
    pcre2_code *re;       /* compiled from the pattern with UTF|UCP, JIT when available */
    int behavior, invert; /* TK_ISOLATED ...; invert swaps matches and gaps */
    int prefix_space;
    int is_bytelevel;     /* the ByteLevel stage (its regex, if any, is GPT-2's) */
} tk_step;

typedef struct {
    int32_t id;
    uint8_t special, normalized, lstrip, rstrip, single_word;
} tk_added;

/* Byte trie over added-token contents for leftmost-longest matching. */
typedef struct { int32_t child, sibling, added; uint8_t byte; } tk_trie_node;
typedef struct {
    tk_trie_node *nodes; /* (n_nodes); node 0 is the root */
    int32_t n_nodes, cap;
    uint8_t first[256];  /* whether some token starts with this byte */
} tk_trie;

typedef struct { uint64_t key; int32_t rank, id; } tk_pair; /* key = (left+1) << 32 | (right+1); 0 = empty */

struct tokenizer {
    int32_t n_vocab;
    char *arena; size_t arena_len, arena_cap;  /* NUL-terminated strings */
    tk_span *text;      /* (n_vocab) token as written: byte-level form, or an added token's content */
    tk_span *bytes;     /* (n_vocab) raw bytes the token decodes to */
    uint8_t *type;      /* (n_vocab) TK_* */
    uint8_t *in_model;  /* (n_vocab) part of the BPE model vocab (merge results, ignore_merges look-ups) */

    int32_t *vocab_ht; uint32_t vocab_cap;  /* model vocab text -> id + 1 (0 empty) */
    tk_pair *pair_ht; uint32_t pair_cap;    /* merge pair -> (rank, merged id) */
    int32_t (*merges)[2]; int32_t n_merges; /* (n_merges, 2) in rank order, for export */
    int32_t byte_id[256];                   /* id of the single-byte token for each byte, -1 none */
    int32_t unk_id; int fuse_unk;

    tk_added *added; int32_t n_added;
    tk_trie trie_raw, trie_norm;            /* non-normalized / normalized added tokens */

    tk_step steps[TK_MAX_STEPS]; int n_steps;
    int nfc;                                /* normalizer: NFC (else none) */
    int ignore_merges;
    int32_t bos, eos, pad;
};

/* The GPT-2 byte <-> unicode mapping used by ByteLevel. */
uint32_t tk_byte_to_cp(uint8_t b);
int tk_cp_to_byte(uint32_t cp); /* -1 if cp is not an image of a byte */

/* Shared tables (tokenizer.c); the builders are in tokenizer_load.c. */
uint64_t tk_hash(const char *s, size_t n);
int32_t tk_vocab_lookup(const tokenizer *t, const char *s, size_t n); /* model vocab text -> id, or -1 */
tk_pair *tk_pair_slot(const tokenizer *t, int32_t a, int32_t b);     /* the pair's slot, or the empty one to fill */
int32_t tk_trie_child(const tk_trie *tr, int32_t node, uint8_t b);    /* -1 if none */
void *tk_realloc(void *p, size_t n); /* aborts on exhaustion */

/* tk_ucd_extra[5]: code points to append to \p{L} \p{N} \p{M} \p{P} \p{S} (PCRE2 class syntax). */
#include "tokenizer_ucd.h"

/* UTF-8 helpers. */
size_t tk_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp); /* bytes of a valid char at s, 0 if invalid */

#endif
