/* engine_backend.c - the backends the engine steps through: the CPU reference forward (one
 * cpu_state per slot), the GPU executor, and a test-only replay backend that forces a scripted
 * token sequence. */
#include "engine.h"
#include "cpu.h"
#include "exec.h"
#include "runner.h"
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- CPU */

typedef struct {
    const hm_model *m;
    int n_slots;
    cpu_state *st;   /* [n_slots] */
} cpu_backend;

static int cpu_slot_open(void *ctx, int slot, hm_error *e) {
    cpu_backend *b = ctx;
    if (slot < 0 || slot >= b->n_slots) return hm_fail(e, "engine: slot %d out of range [0, %d)", slot, b->n_slots);
    return 0; /* positions restart at 0: the KV cache is overwritten in order */
}

static void cpu_step(void *ctx, int n, const int *slot, const int32_t *tok, const int *pos, float *const *logits, int32_t *next) {
    (void)next;   /* the engine samples from the logits */
    cpu_backend *b = ctx;
    for (int i = 0; i < n; i++) cpu_forward(b->m, &b->st[slot[i]], tok[i], pos[i], logits[i]);
}

static void cpu_free(void *ctx) {
    cpu_backend *b = ctx;
    for (int i = 0; i < b->n_slots; i++) cpu_state_free(&b->st[i]);
    free(b->st); free(b);
}

int engine_backend_cpu(engine_backend *out, const hm_model *m, int n_slots, int n_ctx, hm_error *e) {
    cpu_backend *b = hm_calloc(1, sizeof *b);
    b->m = m; b->n_slots = n_slots;
    b->st = hm_calloc((size_t)n_slots, sizeof *b->st);
    for (int i = 0; i < n_slots; i++) {
        if (cpu_state_init(&b->st[i], &m->cfg, n_ctx)) {
            b->n_slots = i; cpu_free(b);
            return hm_fail(e, "engine: cannot allocate the KV cache for slot %d (n_ctx %d)", i, n_ctx);
        }
    }
    *out = (engine_backend){ .name = "cpu", .ctx = b, .slot_open = cpu_slot_open, .step = cpu_step, .free = cpu_free };
    return 0;
}

/* ---------------------------------------------------------------- GPU */

typedef struct {
    gpu_exec *g, *g2;    /* g2: the second stage of a two-GPU pipeline, or NULL */
    float *x;            /* (GPU_BATCH_MAX, n_embd) the residual stream between the stages */
    float *lbuf;         /* (GPU_BATCH_MAX, n_vocab) a batched step's logits */
    int n_slots, n_vocab, batch;   /* batch: most decode tokens per step (1: one by one) */
    int32_t eos;
} gpu_backend;

static int gpu_slot_open(void *ctx, int slot, hm_error *e) {
    gpu_backend *b = ctx;
    if (slot < 0 || slot >= b->n_slots) return hm_fail(e, "engine: slot %d out of range [0, %d)", slot, b->n_slots);
    return 0;
}

/* A failed step ends its sequence: the next sampled token is EOS. */
static void gpu_step_failed(gpu_backend *b, int slot, int pos, float *logits, const char *err) {
    fprintf(stderr, "hotmoe: gpu step failed (slot %d, position %d): %s; ending the sequence\n", slot, pos, err);
    if (!logits) return;
    for (int v = 0; v < b->n_vocab; v++) logits[v] = -1e30f;
    if (b->eos >= 0 && b->eos < b->n_vocab) logits[b->eos] = 0.0f;
}

/* The pending decode tokens (entries idx[0..n) of the step, distinct slots) in one batched step. */
/* One token of one slot: the greedy token only when the engine asks for it (next[i]), else the logits. */
static void gpu_one(gpu_backend *b, int i, const int *slot, const int32_t *tok, const int *pos, float *const *logits, int32_t *next) {
    char err[1024];
    if (next && next[i] == ENGINE_NEXT_WANTED && logits[i]) {
        int32_t t = -1;
        if (!runner_gpu_step_greedy(b->g, b->g2, b->x, slot[i], tok[i], pos[i], &t, err, sizeof err)) { next[i] = t; return; }
        gpu_step_failed(b, slot[i], pos[i], logits[i], err);   /* the engine samples EOS from these */
        return;
    }
    if (runner_gpu_step(b->g, b->g2, b->x, slot[i], tok[i], pos[i], logits[i], err, sizeof err))
        gpu_step_failed(b, slot[i], pos[i], logits[i], err);
}

static void gpu_flush(gpu_backend *b, int n, const int *idx, const int *slot, const int32_t *tok, const int *pos, float *const *logits,
                      int32_t *next) {
    char err[1024];
    if (n == 1) { gpu_one(b, idx[0], slot, tok, pos, logits, next); return; }
    int sq[GPU_BATCH_MAX] = { 0 }, ps[GPU_BATCH_MAX] = { 0 }, greedy = 1;
    int32_t tk[GPU_BATCH_MAX] = { 0 }, nx[GPU_BATCH_MAX];
    for (int q = 0; q < n; q++) {
        sq[q] = slot[idx[q]]; tk[q] = tok[idx[q]]; ps[q] = pos[idx[q]];
        greedy &= next && next[idx[q]] == ENGINE_NEXT_WANTED;
    }
    if (greedy) {   /* every token's request takes the plain argmax: only the tokens come back */
        if (runner_gpu_step_batch_greedy(b->g, b->g2, b->x, n, sq, tk, ps, nx, err, sizeof err)) {
            for (int q = 0; q < n; q++) gpu_step_failed(b, sq[q], ps[q], logits[idx[q]], err);
            return;
        }
        for (int q = 0; q < n; q++) next[idx[q]] = nx[q];
        return;
    }
    if (runner_gpu_step_batch(b->g, b->g2, b->x, n, sq, tk, ps, b->lbuf, err, sizeof err)) {
        for (int q = 0; q < n; q++) gpu_step_failed(b, sq[q], ps[q], logits[idx[q]], err);
        return;
    }
    for (int q = 0; q < n; q++) memcpy(logits[idx[q]], b->lbuf + (size_t)q * b->n_vocab, sizeof(float) * b->n_vocab);
}

static void gpu_step(void *ctx, int n, const int *slot, const int32_t *tok, const int *pos, float *const *logits, int32_t *next) {
    gpu_backend *b = ctx;
    char err[1024];
    int pend[GPU_BATCH_MAX], np = 0;   /* decode tokens of different slots, run together */
    for (int i = 0; i < n; i++) {
        /* a slot's prompt chunk (consecutive positions, logits only at its end): one batched prefill */
        int j = i;
        while (j + 1 < n && slot[j + 1] == slot[i] && pos[j + 1] == pos[j] + 1 && !logits[j]) j++;
        if (j == i && logits[i] && b->batch > 1) {   /* one decode token: batched with the other slots' */
            for (int q = 0; q < np; q++)
                if (slot[pend[q]] == slot[i]) { gpu_flush(b, np, pend, slot, tok, pos, logits, next); np = 0; break; }
            pend[np++] = i;
            if (np == b->batch) { gpu_flush(b, np, pend, slot, tok, pos, logits, next); np = 0; }
            continue;
        }
        if (np) { gpu_flush(b, np, pend, slot, tok, pos, logits, next); np = 0; }
        if (j > i && !b->g2 && !gpu_exec_prefill_seq(b->g, slot[i], tok + i, j - i + 1, pos[i], logits[j], err, sizeof err)) {
            i = j;
            continue;
        }   /* else (one token, a pipeline, or a prefill that could not run): token by token */
        gpu_one(b, i, slot, tok, pos, logits, next);
    }
    if (np) gpu_flush(b, np, pend, slot, tok, pos, logits, next);
}

/* /metrics: the expert caches' device counters (hits, copied in, read in place, on the CPU) of
 * both stages, the exchange's swaps, and the bytes that crossed PCIe for experts. */
static void gpu_stats(void *ctx, engine_stats *st) {
    gpu_backend *b = ctx;
    gpu_exec *stage[2] = { b->g, b->g2 };
    uint64_t tot[GPU_CACHE_STATS] = { 0 }, swaps = 0, pcie = 0;
    for (int i = 0; i < 2; i++) {
        if (!stage[i]) continue;
        uint64_t v[GPU_CACHE_STATS];
        char err[256];
        gpu_exec_layout lay;
        gpu_exec_info(stage[i], &lay);
        if (!lay.n_streamed || gpu_exec_cache_stats(stage[i], v, 0, err, sizeof err)) continue;
        for (int j = 0; j < GPU_CACHE_STATS; j++) tot[j] += v[j];
        swaps += (uint64_t)lay.swaps;
        pcie += (v[1] + v[2] + v[4]) * (uint64_t)lay.expert_bytes + (uint64_t)lay.swaps * lay.expert_bytes;
    }
    const uint64_t sel = tot[0] + tot[1] + tot[2] + tot[3];
    st->expert_hits = tot[0];
    st->expert_misses = tot[1] + tot[2] + tot[3];
    st->expert_swaps = swaps;
    st->pcie_bytes = pcie;
    st->expert_cpu_share = sel ? (double)tot[3] / (double)sel : 0;
}

/* The slot's greedy tokens chained on the GPU (gpu_exec_greedy_chain: one executor, its experts
 * resident; else -2 and the engine steps) */
static int gpu_chain(void *ctx, int slot, int32_t tok, int pos, int n, int (*stop)(void *user, int i, int32_t token), void *user,
                     hm_error *e) {
    gpu_backend *b = ctx;
    if (b->g2) { hm_fail(e, "the greedy chain takes one GPU"); return -2; }
    char err[1024];
    const int rc = gpu_exec_greedy_chain(b->g, slot, tok, pos, n, NULL, stop, user, err, sizeof err);
    if (rc < 0) hm_fail(e, "%s", err);
    return rc;
}

static void gpu_free(void *ctx) {
    gpu_backend *b = ctx;
    gpu_exec_free(b->g);
    gpu_exec_free(b->g2);
    free(b->x); free(b->lbuf);
    free(b);
}

int engine_backend_gpu(engine_backend *out, const hm_model *m, int n_slots, int n_ctx, const runner_opts *o, int32_t eos_id,
                       hm_error *e) {
    gpu_exec *g, *g2;
    if (runner_gpu_create(m, n_ctx, o, n_slots, &g, &g2, e)) return -1;
    gpu_backend *b = hm_calloc(1, sizeof *b);
    b->g = g; b->g2 = g2; b->n_slots = n_slots; b->n_vocab = m->cfg.n_vocab; b->eos = eos_id;
    b->x = hm_malloc(sizeof(float) * GPU_BATCH_MAX * (size_t)m->cfg.n_embd);
    b->lbuf = hm_malloc(sizeof(float) * GPU_BATCH_MAX * (size_t)m->cfg.n_vocab);
    const char *nob = getenv("HOTMOE_NO_BATCH");   /* decode tokens one by one (for comparison) */
    b->batch = nob && *nob == '1' ? 1 : runner_gpu_batch_max(g, g2);
    *out = (engine_backend){ .name = "cuda", .ctx = b, .slot_open = gpu_slot_open, .step = gpu_step, .free = gpu_free,
                             .stats = gpu_stats, .chain = gpu_chain };
    return 0;
}

/* ---------------------------------------------------------------- replay */

typedef struct {
    int n_vocab, n_slots;
    int32_t *script; size_t n;
    int32_t eos;
    size_t *cursor;  /* [n_slots]: next script index */
} replay_backend;

static int replay_slot_open(void *ctx, int slot, hm_error *e) {
    replay_backend *b = ctx;
    if (slot < 0 || slot >= b->n_slots) return hm_fail(e, "engine: slot %d out of range [0, %d)", slot, b->n_slots);
    b->cursor[slot] = 0;
    return 0;
}

static void replay_step(void *ctx, int n, const int *slot, const int32_t *tok, const int *pos, float *const *logits, int32_t *next) {
    (void)next;
    replay_backend *b = ctx;
    (void)tok; (void)pos; /* the script decides, whatever was fed */
    for (int i = 0; i < n; i++) {
        if (!logits[i]) continue;
        size_t *c = &b->cursor[slot[i]];
        int32_t want = *c < b->n ? b->script[*c] : b->eos;
        (*c)++;
        for (int v = 0; v < b->n_vocab; v++) logits[i][v] = -30.0f;
        if (want >= 0 && want < b->n_vocab) logits[i][want] = 30.0f;
    }
}

/* The chain's contract on the script (so that the engine's chain is tested without a GPU): the
 * script's next tokens, then EOS, one a step until n or until stop says so. HOTMOE_CHAIN=0: -2,
 * as the GPU's chain answers when it is off. */
static int replay_chain(void *ctx, int slot, int32_t tok, int pos, int n, int (*stop)(void *user, int i, int32_t token), void *user,
                        hm_error *e) {
    (void)tok; (void)pos;
    replay_backend *b = ctx;
    const char *v = getenv("HOTMOE_CHAIN");
    if (v && !strcmp(v, "0")) { hm_fail(e, "the greedy chain is off (HOTMOE_CHAIN=0)"); return -2; }
    for (int i = 0; i < n; i++) {
        size_t *c = &b->cursor[slot];
        const int32_t t = *c < b->n ? b->script[*c] : b->eos;
        (*c)++;
        if (stop(user, i, t)) return i + 1;
    }
    return n;
}

static void replay_free(void *ctx) {
    replay_backend *b = ctx;
    free(b->script); free(b->cursor); free(b);
}

int engine_backend_replay(engine_backend *out, const hm_model *m, int n_slots, const int32_t *script, size_t n,
                          int32_t eos_id, hm_error *e) {
    replay_backend *b = hm_calloc(1, sizeof *b);
    b->n_vocab = m->cfg.n_vocab; b->n_slots = n_slots; b->eos = eos_id; b->n = n;
    b->script = hm_malloc((n ? n : 1) * sizeof *script);
    if (n) memcpy(b->script, script, n * sizeof *script);
    b->cursor = hm_calloc((size_t)n_slots, sizeof *b->cursor);
    for (size_t i = 0; i < n; i++)
        if (script[i] < 0 || script[i] >= b->n_vocab) {
            replay_free(b);
            return hm_fail(e, "replay: token %d at index %zu is outside the vocabulary [0, %d)", script[i], i, m->cfg.n_vocab);
        }
    *out = (engine_backend){ .name = "replay", .ctx = b, .slot_open = replay_slot_open, .step = replay_step, .free = replay_free,
                             .chain = replay_chain };
    return 0;
}
