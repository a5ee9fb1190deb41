/* engine.h - sessions, scheduler and generation loop: N slots decoded together, one token per
 * active slot per step; requests join and leave between steps (continuous batching).
 * The engine runs model steps through a small backend interface (CPU now, GPU later, and a
 * scripted "replay" backend for tests). HTTP handler threads submit requests and poll output. */
#ifndef HM_ENGINE_H
#define HM_ENGINE_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "model.h"
#include "runner.h"
#include "sampler.h"
#include "util.h"

/* ---- backend ---- */

struct engine_stats;

/* What the engine needs from a target. Entries of one step may belong to several slots; the
 * entries of one slot are in position order. logits[i] (n_vocab floats) or NULL to skip. */
#define ENGINE_NEXT_WANTED (-2)
typedef struct engine_backend {
    const char *name;
    void *ctx;
    /* Starts a new sequence in slot (positions restart at 0). Returns 0 or -1 with e set. */
    int (*slot_open)(void *ctx, int slot, hm_error *e);
    /* next[i] == ENGINE_NEXT_WANTED (an entry with logits whose request takes the plain argmax):
     * the backend may write the greedy token (sampler_argmax of its logits) to next[i] instead of
     * the logits; any other entry, or one it leaves as it is, gets its logits. */
    void (*step)(void *ctx, int n, const int *slot, const int32_t *tok, const int *pos, float *const *logits, int32_t *next);
    void (*free)(void *ctx);
    /* Optional: fills the expert residency counters of st (totals since start). Called from the
     * thread that reads the statistics, beside the engine's steps: a snapshot. */
    void (*stats)(void *ctx, struct engine_stats *st);
    /* Optional: greedy decoding of one slot without the engine between steps (the GPU's chain,
     * gpu_exec_greedy_chain). Feeds tok at pos, then each step's greedy token (sampler_argmax's
     * rule), at most n steps; stop(user, i, token) sees step i's token as it comes and ends the
     * chain by returning nonzero (steps already queued may run on: their tokens are dropped and
     * their positions rewritten later). Returns the tokens given, -2 with e set when the backend
     * cannot chain (the engine steps from then on), -1 with e set on failure. */
    int (*chain)(void *ctx, int slot, int32_t tok, int pos, int n, int (*stop)(void *user, int i, int32_t token), void *user,
                 hm_error *e);
} engine_backend;

/* CPU backend: one cpu_state (KV cache of n_ctx positions) per slot, cpu_forward per entry. */
int engine_backend_cpu(engine_backend *b, const hm_model *m, int n_slots, int n_ctx, hm_error *e);
/* The GPU executor with a KV cache per slot and the placement of o (runner.h; o->cold resolved,
 * o->counts loaded by the caller). A failed step ends the slot's sequence (EOS) with a message. */
int engine_backend_gpu(engine_backend *b, const hm_model *m, int n_slots, int n_ctx, const runner_opts *o, int32_t eos_id,
                       hm_error *e);
/* Test-only replay backend: every request "generates" script[0..n) and then EOS (eos_id),
 * whatever its prompt, through the real sampler and server path. The script is copied. */
int engine_backend_replay(engine_backend *b, const hm_model *m, int n_slots, const int32_t *script,
                          size_t n, int32_t eos_id, hm_error *e);

/* ---- requests ---- */

enum engine_finish {
    ENGINE_RUNNING = 0,
    ENGINE_FINISH_STOP,      /* EOS / special token or a stop string */
    ENGINE_FINISH_LENGTH,    /* max_tokens or the context */
    ENGINE_FINISH_TIMEOUT,   /* the per-request time limit */
    ENGINE_FINISH_CANCELLED, /* client gone or server stopping */
};

enum engine_outcome { ENGINE_OUT_OK = 0, ENGINE_OUT_CANCELLED, ENGINE_OUT_TIMEOUT, ENGINE_OUT_REJECTED, ENGINE_OUT_COUNT };

#define ENGINE_MAX_STOP 16

/* One generation. The caller fills the inputs, engine_submit()s it, polls output with
 * engine_poll() and releases it with engine_release() (which cancels it if still running). */
typedef struct engine_req {
    /* in (owned by the request; freed by engine_req_free) */
    int32_t *prompt; size_t n_prompt;
    int max_tokens;                    /* >= 1 */
    sampler_params sp;
    char *stop[ENGINE_MAX_STOP]; int n_stop;
    double time_limit_s;               /* 0: none */
    /* out: guarded by the engine lock; read through engine_poll */
    char *text; size_t len, gen_len, cap; /* text[0..len) is final; [len..gen_len) held back (stop prefix) */
    int n_gen;                         /* tokens generated (EOS not counted) */
    int finish;                        /* enum engine_finish */
    int stop_token;                    /* 1 when it stopped on EOS / a special token */
    int stop_hit;                      /* index of the stop string that matched, -1: none */
    double t_submit, t_first, t_last, t_done;
    int done, cancel, queued;
    pthread_cond_t cv;
    /* engine-private */
    struct engine_req *next;           /* wait queue link */
    int slot;
} engine_req;

engine_req *engine_req_new(void);
void engine_req_free(engine_req *r);

/* ---- statistics (for /metrics) ---- */

#define ENGINE_HIST_N 12
extern const double engine_hist_bounds[ENGINE_HIST_N]; /* seconds, upper bounds */
typedef struct { uint64_t bucket[ENGINE_HIST_N + 1]; double sum; uint64_t count; } engine_hist;

typedef struct engine_stats {
    uint64_t prompt_tokens, gen_tokens;
    uint64_t requests[ENGINE_OUT_COUNT];
    engine_hist ttft, itl;
    int slots_busy, n_slots, queue_len, queue_cap;
    uint64_t steps;
    uint64_t chain_tokens;   /* tokens taken from the backend's greedy chain (engine_backend's chain) */
    /* expert residency counters: filled by the GPU backend when it exists; 0 on the CPU */
    uint64_t expert_hits, expert_misses, expert_swaps, pcie_bytes;
    double expert_cpu_share;
} engine_stats;

/* ---- engine ---- */

typedef struct engine engine;

typedef struct {
    int n_slots;        /* --parallel */
    int n_ctx;          /* positions per slot */
    int queue_cap;      /* waiting requests beyond the slots; full: engine_submit fails */
    int prefill_chunk;  /* prompt tokens per slot per step */
} engine_params;

/* Starts the engine thread. The engine owns b (freed by engine_free). Returns NULL with e set. */
engine *engine_start(const hm_model *m, engine_backend *b, const engine_params *p, hm_error *e);
/* Cancels everything, joins the thread, frees the backend. */
void engine_free(engine *en);
int engine_n_ctx(const engine *en);

/* Queues r. Returns 0, or -1 (queue full or engine stopping) with e set; r is then untouched. */
int engine_submit(engine *en, engine_req *r, hm_error *e);
/* Waits up to timeout_ms for output past *from (or completion). Copies the new final bytes to
 * a malloc'd *out (NULL when none), advances *from. Returns 1 when the request is done. */
int engine_poll(engine *en, engine_req *r, size_t *from, char **out, size_t *n_out, int timeout_ms);
/* Cancels r if running, waits until the engine has let go of it, frees it. */
void engine_release(engine *en, engine_req *r);
/* Stops admitting work and cancels all requests (graceful shutdown). */
void engine_shutdown(engine *en);
void engine_stats_get(engine *en, engine_stats *out);
void engine_count_rejected(engine *en);

#endif
