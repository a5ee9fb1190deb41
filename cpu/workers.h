/* workers.h - the CPU expert workers: a pool of N threads, each bound to one core (hwloc), that
 * compute the cold experts of one MoE layer for 1-4 decode tokens or a prefill chunk while the
 * main thread stays free to drive the GPU. Plain pthreads, not OpenMP: the pool must run beside
 * the main thread, not in place of it. Completion is a word in memory that any thread (later the
 * GPU, through mapped memory) can poll, plus a blocking wait for CPU-only use. Idle workers spin
 * briefly, then sleep on a futex. */
#ifndef HM_WORKERS_H
#define HM_WORKERS_H
#include <stddef.h>
#include <stdint.h>
#include "model.h"

typedef struct {
    int n_threads;   /* worker threads (--cpu-threads N), 1..HM_WORKERS_MAX */
    int numa_node;   /* take cores of this NUMA node only; -1: any core */
    int bind;        /* 1: bind each worker to one core with hwloc; 0: the OS places them */
    int spin_us;     /* how long an idle worker (or workers_wait) spins before sleeping; < 0: 50 */
    int first_core;  /* bind from this core on (after the one left for the main thread): pools side by side */
} workers_config;

#define HM_WORKERS_MAX 256

/* One layer's cold-expert work for t tokens. Pointers are the caller's; x must stay valid and out
 * untouched until the job completes; n_cold, ids and w are read during workers_submit only. */
typedef struct {
    int layer;               /* for messages only */
    int n_tok;               /* t: 1..4 in decode, a prefill chunk's token count (>= 1) */
    int n_embd;
    const float *x;          /* (n_tok, n_embd) each token's FFN input (after ffn_norm) */
    int k;                   /* row stride of ids and w: the most cold experts a token may have */
    const int *n_cold;       /* (n_tok) how many entries of a token's row of ids/w are used (0..k) */
    const int *ids;          /* (n_tok, k) the token's cold expert ids, any order, no repeats */
    const float *w;          /* (n_tok, k) their routing weights (already normalised and scaled) */
    const hm_expert *experts;/* (n_expert) the layer's expert table; experts[e].host is read */
    int n_expert;
    float *out;              /* (n_tok, n_embd) OVERWRITTEN with sum_j w[j] * FFN_{ids[j]}(x) in
                              * the order of the token's list; 0 for a token without cold experts */
    uint32_t *flag;          /* optional (NULL: none): set to flag_value, with release order, once
                              * every element of out is written (host or mapped GPU memory) */
    uint32_t flag_value;
} workers_job;

typedef struct workers workers;

/* Starts the pool: n_threads workers, bound to cores as cfg says (a core left free for the main
 * thread when there are more cores than workers). Returns the pool, or NULL with err filled when
 * cfg is out of range or threads cannot be made. Binding that cannot be done (no hwloc topology,
 * fewer cores than workers, a container that forbids it) is not an error: workers_describe says
 * what happened. */
workers *workers_init(const workers_config *cfg, char *err, size_t errlen);

/* Stops and joins the threads (after the job in flight, if any, completes) and frees the pool.
 * NULL is allowed. */
void workers_free(workers *w);

/* Hands a job to the pool and returns without waiting for it. The previous job must have been
 * submitted by this same thread; if it is still running, this waits for it first. Which kernels
 * run follows hm_kernels_get() at submit time (FAST: the gemv.h kernels, REF: exact dequantized
 * rows and F32 math, bit-equal to cpu_matvec's reference path).
 * Returns the job's sequence number (> 0), or -1 with err filled (and nothing started; the flag
 * is not written) when the job is malformed: counts out of range, an expert id >= n_expert, an
 * absent or misshapen expert tensor, or a weight type without kernels. */
int64_t workers_submit(workers *w, const workers_job *job, char *err, size_t errlen);

/* 1 when the last submitted job is complete (or none was submitted), else 0. Never blocks. */
int workers_poll(const workers *w);

/* Blocks until the last submitted job is complete: spins for spin_us, then sleeps on a futex.
 * Returns at once when there is none. */
void workers_wait(workers *w);

/* Idle workers stop spinning and sleep until the next submit (which wakes them): for a pool that
 * will not get work for a while, so that it leaves its cores to another pool (the other stage of
 * a two-GPU pipeline shares them). */
void workers_park(workers *w);

/* Counters since start or the last reset: jobs finished, expert weight bytes they read (each
 * distinct expert once per job) and the time from submit to finish summed over jobs, so that
 * bytes / busy_s is the DRAM rate while the workers compute. Waits for the job in flight. */
typedef struct { int64_t jobs; uint64_t bytes; double busy_s; } workers_counters;
void workers_stats(workers *w, workers_counters *out, int reset);

/* One line of the pool's hand-off state into buf (n bytes), for the message of a waiter that gave
 * up on a job: the last job submitted and the last finished, the workers out of the job in flight,
 * those asleep, the wake-up generation, each phase's items taken / done / planned. Reads the
 * state without waiting or locking (a snapshot, possibly torn); returns buf. */
char *workers_debug(const workers *w, char *buf, size_t n);

/* The pool's threads and a one-line description of where they run (cores, binding notes). */
int workers_threads(const workers *w);
const char *workers_describe(const workers *w);

#endif
