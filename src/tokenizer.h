/* tokenizer.h - byte-level BPE (GPT-2 style, as used by Qwen, GLM, DeepSeek, Llama-3),
 * loaded from tokenizer.json or from GGUF metadata; ids identical to HF `tokenizers`. */
#ifndef HM_TOKENIZER_H
#define HM_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>
#include "util.h"
#include "gguf.h"

typedef struct tokenizer tokenizer;

/* From an HF tokenizer.json (model.type BPE with a ByteLevel pre-tokenizer/decoder). */
tokenizer *tokenizer_load_json(const char *path, hm_error *e);
/* From GGUF metadata: tokenizer.ggml.model ("gpt2"), .tokens, .merges, .token_type, .pre,
 * .bos_token_id/.eos_token_id when present. */
tokenizer *tokenizer_load_gguf(const gguf_file *g, hm_error *e);
void tokenizer_free(tokenizer *t);

/* Writes tokenizer.ggml.* keys (model "gpt2", pre name, tokens, token_type, merges, special ids)
 * so that tokenizer_load_gguf (and llama.cpp) rebuild the same tokenizer. */
int tokenizer_export_gguf(const tokenizer *t, gguf_writer *w, hm_error *e);

/* Encodes text[0..len) (any bytes; invalid UTF-8 handled as HF does) without adding BOS/EOS;
 * special/added tokens written in the text are recognised as HF `tokenizers` does.
 * *ids is malloc'd (caller frees). Returns 0, or -1 with e set. */
int tokenizer_encode(const tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids,
                     hm_error *e);

int tokenizer_n_vocab(const tokenizer *t);
/* The raw bytes a token stands for (byte-level decoded), NULL for an id out of range. */
const char *tokenizer_token_bytes(const tokenizer *t, int32_t id, size_t *len);
/* Id of a token given by its exact text (e.g. "<|im_end|>"), or -1. */
int32_t tokenizer_find(const tokenizer *t, const char *piece);
int32_t tokenizer_bos(const tokenizer *t); /* -1 if none */
int32_t tokenizer_eos(const tokenizer *t); /* -1 if none */
/* Whether id is a special (control) token: generation stops at EOS-like ones. */
int tokenizer_is_special(const tokenizer *t, int32_t id);

/* Decodes ids to a malloc'd NUL-terminated string (len in *out_len). */
char *tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, size_t *out_len);

/* Streaming decode: feed one id at a time; complete UTF-8 characters are returned, an
 * incomplete trailing sequence is held back until the next token completes it. */
typedef struct { char pending[8]; int n_pending; } tokenizer_stream;
/* Appends the printable bytes for id to out (up to cap bytes, returns count written). */
size_t tokenizer_stream_push(const tokenizer *t, tokenizer_stream *s, int32_t id, char *out, size_t cap);
/* Flushes whatever is held back (invalid/incomplete bytes at the end of generation). */
size_t tokenizer_stream_flush(tokenizer_stream *s, char *out, size_t cap);

#endif
