/* trace.h - routing trace files: hotmoe's compact binary format (written by the engine's
 * --record-routing through trace_writer, read back for replay and simulation) and the Mixtral
 * JSON-lines traces of shared/data/routing/, told apart by content. The format is documented in
 * placement/README.md. */
#ifndef HM_TRACE_H
#define HM_TRACE_H
#include "routing.h"
#include "util.h"
#include <stdint.h>

#define TRACE_MAGIC "HMRT"
#define TRACE_VERSION 1u
#define TRACE_HEADER_BYTES 32u
/* n_tokens in the header while a writer still has the file open (never closed: a crash). */
#define TRACE_TOKENS_OPEN UINT64_MAX

typedef enum { TRACE_BINARY, TRACE_JSONL } trace_format;

typedef struct {
    trace_format format;
    int unclosed;          /* binary: the writer never closed it; n_tokens taken from the size */
    int64_t rows;          /* recorded (token, layer) rows */
    int64_t missing_rows;  /* (token, layer) rows with no choice recorded */
} trace_info;

/* Loads a trace of either format. JSONL: n_layer and n_expert are inferred (max + 1), tokens are
 * rebuilt from token_pos/token_idx and row order (a new token whenever the layer does not
 * increase). Returns 0, or -1 with e naming the file, the line or token/layer, the field, what
 * was expected and what was found. info may be NULL. */
int trace_load(const char *path, routing *r, trace_info *info, hm_error *e);

/* Checks a loaded trace against a model (layers, experts, k). A JSONL trace, whose expert count
 * is only inferred, may have fewer experts: it is widened to n_expert. Returns 0 or -1. */
int trace_conform(const char *path, routing *r, const trace_info *info,
                  int n_layer, int n_expert, int k, hm_error *e);

/* Writes r in the binary format. Returns 0 or -1. */
int trace_save(const char *path, const routing *r, hm_error *e);

/* Streaming writer for the engine: open, one call per token, close (patches n_tokens). */
typedef struct trace_writer trace_writer;
trace_writer *trace_writer_open(const char *path, int n_layer, int n_expert, int k, hm_error *e);
/* ids is (n_layer, k); a layer whose ids are negative (all k) had no routed choice (dense). */
int trace_writer_token(trace_writer *w, const int *ids, hm_error *e);
/* Patches the token count and closes; frees w whatever happens. Returns 0 or -1. */
int trace_writer_close(trace_writer *w, hm_error *e);

#endif
