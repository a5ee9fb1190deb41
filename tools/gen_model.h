/* gen_model.h - pieces of hotmoe-gen shared between its files: the byte-level demo tokenizer and
 * the --stats run. */
#ifndef HM_GEN_MODEL_H
#define HM_GEN_MODEL_H
#include <stdio.h>
#include "gguf.h"
#include "util.h"

/* Writes tokenizer.ggml.* for a vocab of n_vocab ids: the 256 byte tokens (GPT-2 byte-to-unicode),
 * pseudo-words built by valid merges, and three control tokens at the end (<|endoftext|> = EOS).
 * pre is the tokenizer.ggml.pre name. Returns 0, or -1 when n_vocab < 260. */
int gen_tokenizer_write(gguf_writer *w, int n_vocab, const char *pre, hm_error *e);

/* Loads path with model_load, decodes n_gen tokens greedily after a fixed prompt on the CPU
 * reference forward, and prints per-layer routing statistics and the residual size to out.
 * Returns 0 when the logits stayed finite and the routing is not degenerate, 1 when it ran but a
 * check failed, -1 with e set when the model could not be loaded. */
int gen_stats_run(const char *path, int n_gen, FILE *out, hm_error *e);

#endif
