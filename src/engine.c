/* engine.c - the scheduler and generation loop. One engine thread owns the slots: between
 * steps it admits queued requests into free slots and drops finished or cancelled ones; each
 * step feeds every active slot either a chunk of its prompt or its last sampled token.
 * Handler threads see only the request's published text, under the engine lock. */
#define _GNU_SOURCE
#include "engine.h"
#include "tokenizer.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const double engine_hist_bounds[ENGINE_HIST_N] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30 };

enum { SLOT_FREE = 0, SLOT_PREFILL, SLOT_DECODE };

typedef struct {
    engine_req *r;
    int state;
    size_t n_fed;          /* prompt tokens fed so far */
    int pos;               /* next position */
    int32_t next_tok;      /* token to feed in the next decode step */
    sampler sm;
    tokenizer_stream ts;
    float *logits;         /* (n_vocab) */
    int has_logits;        /* this step produced logits for it */
} slot;

struct engine {
    const hm_model *m;
    engine_backend be;
    engine_params p;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;   /* something to do for the engine thread */
    int quit, stopping;
    slot *slots;           /* [n_slots] */
    engine_req *q_head, *q_tail; int q_len;
    engine_stats st;
    /* step scratch */
    int *b_slot, *b_pos; int32_t *b_tok; float **b_logits;
    int32_t *b_next;       /* ENGINE_NEXT_WANTED or -1 in; the greedy token when the backend wrote one */
    int chain_off;         /* the backend's chain answered -2 or failed: step by step from then on */
};

/* ---------------------------------------------------------------- requests */

engine_req *engine_req_new(void) {
    engine_req *r = hm_calloc(1, sizeof *r);
    r->sp = sampler_defaults();
    r->max_tokens = 1;
    r->slot = -1; r->stop_hit = -1;
    pthread_cond_init(&r->cv, NULL);
    return r;
}

void engine_req_free(engine_req *r) {
    if (!r) return;
    free(r->prompt); free(r->text);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static void hist_add(engine_hist *h, double v) {
    int i = 0;
    while (i < ENGINE_HIST_N && v > engine_hist_bounds[i]) i++;
    h->bucket[i]++; h->sum += v; h->count++;
}

/* Appends bytes to the request's text and applies the stop strings: a match truncates the text
 * and finishes the request; a tail that could still become a stop string is held back.
 * Returns 1 when a stop string matched. Engine lock held. */
static int req_append(engine_req *r, const char *s, size_t n) {
    if (r->gen_len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 256;
        while (cap < r->gen_len + n + 1) cap *= 2;
        char *t = realloc(r->text, cap);
        if (!t) abort();
        r->text = t; r->cap = cap;
    }
    memcpy(r->text + r->gen_len, s, n);
    r->gen_len += n; r->text[r->gen_len] = 0;
    size_t best = (size_t)-1;
    for (int i = 0; i < r->n_stop; i++) {
        size_t L = strlen(r->stop[i]);
        char *hit = L ? memmem(r->text + r->len, r->gen_len - r->len, r->stop[i], L) : NULL;
        if (hit && (size_t)(hit - r->text) < best) { best = (size_t)(hit - r->text); r->stop_hit = i; }
    }
    if (best != (size_t)-1) { r->gen_len = r->len = best; r->text[best] = 0; return 1; }
    size_t hold = 0;
    for (int i = 0; i < r->n_stop; i++) {
        size_t L = strlen(r->stop[i]);
        for (size_t k = L ? L - 1 : 0; k > hold; k--)
            if (k <= r->gen_len - r->len && !memcmp(r->text + r->gen_len - k, r->stop[i], k)) { hold = k; break; }
    }
    r->len = r->gen_len - hold;
    return 0;
}

/* ---------------------------------------------------------------- slots */

/* Ends the slot's request: publishes what is left, wakes its handler. Engine lock held. */
static void slot_finish(engine *en, slot *s, int why) {
    engine_req *r = s->r;
    if (why != ENGINE_FINISH_CANCELLED) {
        char buf[16];
        size_t k = tokenizer_stream_flush(&s->ts, buf, sizeof buf);
        if (k && !r->finish) req_append(r, buf, k);
    }
    if (!r->finish || why == ENGINE_FINISH_CANCELLED) r->finish = why;
    r->len = r->gen_len; /* a held-back partial stop string is ordinary text at the end */
    r->done = 1; r->t_done = hm_now();
    en->st.requests[why == ENGINE_FINISH_CANCELLED ? ENGINE_OUT_CANCELLED
                    : why == ENGINE_FINISH_TIMEOUT ? ENGINE_OUT_TIMEOUT : ENGINE_OUT_OK]++;
    r->slot = -1;
    pthread_cond_broadcast(&r->cv);
    sampler_free(&s->sm);
    s->r = NULL; s->state = SLOT_FREE;
    en->st.slots_busy--;
}

/* Takes the sampled token for a slot that got logits this step. Engine lock held. */
static void slot_take_token(engine *en, slot *s, int32_t t) {
    engine_req *r = s->r;
    const tokenizer *tok = en->m->tok;
    sampler_accept(&s->sm, t);
    if (t == tokenizer_eos(tok) || tokenizer_is_special(tok, t)) {
        r->stop_token = 1;
        slot_finish(en, s, ENGINE_FINISH_STOP);
        return;
    }
    double now = hm_now();
    if (!r->n_gen) { r->t_first = now; hist_add(&en->st.ttft, now - r->t_submit); }
    else hist_add(&en->st.itl, now - r->t_last);
    r->t_last = now;
    r->n_gen++; en->st.gen_tokens++;
    char buf[512];
    size_t k = tokenizer_stream_push(tok, &s->ts, t, buf, sizeof buf);
    if (req_append(r, buf, k)) { r->finish = ENGINE_FINISH_STOP; slot_finish(en, s, ENGINE_FINISH_STOP); return; }
    pthread_cond_broadcast(&r->cv);
    if (r->n_gen >= r->max_tokens || s->pos >= en->p.n_ctx) { slot_finish(en, s, ENGINE_FINISH_LENGTH); return; }
    s->next_tok = t; s->state = SLOT_DECODE;
}

/* Moves queued requests into free slots. Engine lock held. */
static void engine_admit(engine *en) {
    for (int i = 0; i < en->p.n_slots && en->q_head; i++) {
        slot *s = &en->slots[i];
        if (s->state != SLOT_FREE) continue;
        engine_req *r = en->q_head;
        en->q_head = r->next; if (!en->q_head) en->q_tail = NULL;
        en->q_len--; r->queued = 0; r->next = NULL;
        hm_error e;
        if (en->be.slot_open(en->be.ctx, i, &e)) { r->finish = ENGINE_FINISH_CANCELLED; r->done = 1; pthread_cond_broadcast(&r->cv); continue; }
        s->r = r; r->slot = i; s->state = SLOT_PREFILL; s->n_fed = 0; s->pos = 0;
        memset(&s->ts, 0, sizeof s->ts);
        sampler_init(&s->sm, &r->sp, en->m->cfg.n_vocab);
        for (size_t k = 0; k < r->n_prompt; k++) sampler_accept(&s->sm, r->prompt[k]);
        en->st.slots_busy++;
        en->st.prompt_tokens += r->n_prompt;
    }
}

/* Why a slot's request ends before its next step (cancelled, the engine stopping, its time limit
 * passed at now), or 0. Engine lock held. */
static int slot_ends(const engine *en, const engine_req *r, double now) {
    if (r->cancel || en->stopping) return ENGINE_FINISH_CANCELLED;
    if (r->time_limit_s > 0 && now - r->t_submit > r->time_limit_s) return ENGINE_FINISH_TIMEOUT;
    return 0;
}

/* The greedy chain (engine_backend's chain) of one decoding slot, when it is the step's only
 * entry: each token is taken as a step's would be (slot_take_token), and the chain ends when the
 * slot finishes, is cancelled or times out, the engine stops, or a request waits for a slot. */
typedef struct { engine *en; int si, pos0, given; } chain_run;

static int chain_stop(void *user, int i, int32_t t) {
    chain_run *c = user;
    engine *en = c->en;
    slot *s = &en->slots[c->si];
    pthread_mutex_lock(&en->mu);
    if (i) en->st.steps++;
    en->st.chain_tokens++;
    c->given = i + 1;
    s->pos = c->pos0 + i + 1;   /* step i fed position pos0 + i */
    int more = 0;
    if (s->state != SLOT_FREE) {
        slot_take_token(en, s, t);
        more = s->state == SLOT_DECODE && !en->q_head && !slot_ends(en, s->r, hm_now());
    }
    pthread_mutex_unlock(&en->mu);
    return !more;
}

/* Runs the chain for the step's one entry (engine lock held; released while the backend runs). */
static void engine_chain(engine *en) {
    const int si = en->b_slot[0], pos0 = en->b_pos[0];
    const engine_req *r = en->slots[si].r;
    int n = r->max_tokens - r->n_gen;
    if (n > en->p.n_ctx - pos0) n = en->p.n_ctx - pos0;
    chain_run c = { en, si, pos0, 0 };
    const int32_t tok = en->b_tok[0];
    pthread_mutex_unlock(&en->mu);
    hm_error e;
    const int rc = en->be.chain(en->be.ctx, si, tok, pos0, n, chain_stop, &c, &e);
    pthread_mutex_lock(&en->mu);
    if (rc >= 0) return;
    en->chain_off = 1;   /* the slot goes on step by step from the tokens given */
    if (rc == -1) fprintf(stderr, "hotmoe: greedy chain failed (slot %d, position %d): %s; stepping token by token\n", si,
                          pos0 + c.given, e.msg);
    if (!c.given) { en->slots[si].pos = pos0; en->st.steps--; }   /* its token is fed again */
}

static void *engine_main(void *arg) {
    engine *en = arg;
    int n_slots = en->p.n_slots;
    pthread_mutex_lock(&en->mu);
    for (;;) {
        engine_admit(en);
        int n = 0;
        double now = hm_now();
        for (int i = 0; i < n_slots; i++) {
            slot *s = &en->slots[i];
            if (s->state == SLOT_FREE) continue;
            engine_req *r = s->r;
            s->has_logits = 0;
            const int why = slot_ends(en, r, now);
            if (why) { slot_finish(en, s, why); continue; }
            if (s->state == SLOT_PREFILL) {
                size_t left = r->n_prompt - s->n_fed, take = left < (size_t)en->p.prefill_chunk ? left : (size_t)en->p.prefill_chunk;
                for (size_t k = 0; k < take; k++, n++) {
                    en->b_slot[n] = i; en->b_tok[n] = r->prompt[s->n_fed + k]; en->b_pos[n] = s->pos++;
                    en->b_logits[n] = s->n_fed + k + 1 == r->n_prompt ? s->logits : NULL;
                    en->b_next[n] = -1;
                }
                s->n_fed += take;
                s->has_logits = s->n_fed == r->n_prompt;
            } else {
                en->b_slot[n] = i; en->b_tok[n] = s->next_tok; en->b_pos[n] = s->pos++; en->b_logits[n] = s->logits;
                en->b_next[n] = sampler_greedy_only(&s->sm) ? ENGINE_NEXT_WANTED : -1;
                n++;
                s->has_logits = 1;
            }
        }
        if (!n) {
            /* n == 0 means every slot is free now. If requests are still queued, the scan above
             * just freed the slots (cancelled / timed out) after engine_admit() had found none:
             * go round to admit them. Sleeping here was a lost wakeup: nobody signals `work`
             * again, so the queued request waited forever (client hung, engine idle). */
            if (en->q_head) continue;
            if (en->quit) break;
            pthread_cond_wait(&en->work, &en->mu);
            continue;
        }
        en->st.steps++;
        if (n == 1 && en->b_next[0] == ENGINE_NEXT_WANTED && en->be.chain && !en->chain_off && !en->q_head) {
            engine_chain(en);
            continue;
        }
        pthread_mutex_unlock(&en->mu);
        en->be.step(en->be.ctx, n, en->b_slot, en->b_tok, en->b_pos, en->b_logits, en->b_next);
        /* sampling reads only slot-private state: no lock needed until publishing */
        int32_t picked[n_slots];
        for (int i = 0; i < n_slots; i++) picked[i] = -1;
        for (int k = 0; k < n; k++)   /* tokens the backend chose (greedy entries) */
            if (en->b_next[k] >= 0) picked[en->b_slot[k]] = en->b_next[k];
        for (int i = 0; i < n_slots; i++) {
            slot *s = &en->slots[i];
            if (picked[i] < 0 && s->state != SLOT_FREE && s->has_logits) picked[i] = sampler_sample(&s->sm, s->logits);
        }
        pthread_mutex_lock(&en->mu);
        for (int i = 0; i < n_slots; i++)
            if (picked[i] >= 0 && en->slots[i].state != SLOT_FREE) slot_take_token(en, &en->slots[i], picked[i]);
    }
    pthread_mutex_unlock(&en->mu);
    return NULL;
}

/* ---------------------------------------------------------------- public */

engine *engine_start(const hm_model *m, engine_backend *b, const engine_params *p, hm_error *e) {
    if (!m->tok) { hm_fail(e, "engine: the model %s has no tokenizer", m->path ? m->path : "?"); return NULL; }
    if (p->n_slots < 1 || p->n_slots > 256) { hm_fail(e, "engine: --parallel: expected 1..256 slots, found %d", p->n_slots); return NULL; }
    if (p->n_ctx < 2) { hm_fail(e, "engine: --ctx: expected at least 2 positions, found %d", p->n_ctx); return NULL; }
    engine *en = hm_calloc(1, sizeof *en);
    en->m = m; en->be = *b; en->p = *p;
    if (en->p.prefill_chunk < 1) en->p.prefill_chunk = 256;
    if (en->p.queue_cap < 0) en->p.queue_cap = 0;
    en->slots = hm_calloc((size_t)p->n_slots, sizeof *en->slots);
    for (int i = 0; i < p->n_slots; i++) en->slots[i].logits = hm_malloc(sizeof(float) * (size_t)m->cfg.n_vocab);
    size_t nb = (size_t)p->n_slots * (size_t)en->p.prefill_chunk;
    en->b_slot = hm_malloc(nb * sizeof(int)); en->b_pos = hm_malloc(nb * sizeof(int));
    en->b_tok = hm_malloc(nb * sizeof(int32_t)); en->b_logits = hm_malloc(nb * sizeof(float *));
    en->b_next = hm_malloc(nb * sizeof(int32_t));
    en->st.n_slots = p->n_slots; en->st.queue_cap = en->p.queue_cap;
    pthread_mutex_init(&en->mu, NULL);
    pthread_cond_init(&en->work, NULL);
    if (pthread_create(&en->thread, NULL, engine_main, en)) {
        hm_fail(e, "engine: cannot start the engine thread");
        b->free(b->ctx); /* fall through to a partial free */
        en->be.free = NULL;
        for (int i = 0; i < p->n_slots; i++) free(en->slots[i].logits);
        free(en->slots); free(en->b_slot); free(en->b_pos); free(en->b_tok); free(en->b_logits); free(en->b_next); free(en);
        return NULL;
    }
    return en;
}

void engine_shutdown(engine *en) {
    pthread_mutex_lock(&en->mu);
    en->stopping = 1;
    for (engine_req *r = en->q_head; r; r = r->next) {
        r->queued = 0; r->done = 1; r->finish = ENGINE_FINISH_CANCELLED; r->t_done = hm_now();
        en->st.requests[ENGINE_OUT_CANCELLED]++;
        pthread_cond_broadcast(&r->cv);
    }
    en->q_head = en->q_tail = NULL; en->q_len = 0;
    pthread_cond_signal(&en->work);
    pthread_mutex_unlock(&en->mu);
}

void engine_free(engine *en) {
    if (!en) return;
    engine_shutdown(en);
    pthread_mutex_lock(&en->mu);
    en->quit = 1;
    pthread_cond_signal(&en->work);
    pthread_mutex_unlock(&en->mu);
    pthread_join(en->thread, NULL);
    if (en->be.free) en->be.free(en->be.ctx);
    for (int i = 0; i < en->p.n_slots; i++) free(en->slots[i].logits);
    free(en->slots); free(en->b_slot); free(en->b_pos); free(en->b_tok); free(en->b_logits); free(en->b_next);
    pthread_mutex_destroy(&en->mu); pthread_cond_destroy(&en->work);
    free(en);
}

int engine_n_ctx(const engine *en) { return en->p.n_ctx; }

int engine_submit(engine *en, engine_req *r, hm_error *e) {
    if (!r->n_prompt) return hm_fail(e, "the prompt is empty: expected at least one token");
    if (r->n_prompt + (size_t)r->max_tokens > (size_t)en->p.n_ctx)
        return hm_fail(e, "prompt (%zu tokens) + max_tokens (%d) = %zu exceeds the context of %d tokens", r->n_prompt,
                       r->max_tokens, r->n_prompt + (size_t)r->max_tokens, en->p.n_ctx);
    pthread_mutex_lock(&en->mu);
    int free_slots = 0;
    for (int i = 0; i < en->p.n_slots; i++) free_slots += en->slots[i].state == SLOT_FREE;
    if (en->stopping || en->quit) { pthread_mutex_unlock(&en->mu); return hm_fail(e, "the server is shutting down"); }
    if (en->q_len >= free_slots + en->p.queue_cap) {
        en->st.requests[ENGINE_OUT_REJECTED]++;
        pthread_mutex_unlock(&en->mu);
        return hm_fail(e, "all %d slots are busy and the wait queue (%d) is full; retry later", en->p.n_slots, en->p.queue_cap);
    }
    r->t_submit = hm_now(); r->queued = 1; r->next = NULL;
    if (en->q_tail) en->q_tail->next = r; else en->q_head = r;
    en->q_tail = r; en->q_len++;
    pthread_cond_signal(&en->work);
    pthread_mutex_unlock(&en->mu);
    return 0;
}

int engine_poll(engine *en, engine_req *r, size_t *from, char **out, size_t *n_out, int timeout_ms) {
    *out = NULL; *n_out = 0;
    pthread_mutex_lock(&en->mu);
    if (r->len <= *from && !r->done && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000; ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        while (r->len <= *from && !r->done)
            if (pthread_cond_timedwait(&r->cv, &en->mu, &ts) == ETIMEDOUT) break;
    }
    if (r->len > *from) {
        *n_out = r->len - *from;
        *out = hm_malloc(*n_out + 1);
        memcpy(*out, r->text + *from, *n_out); (*out)[*n_out] = 0;
        *from = r->len;
    }
    int done = r->done && *from == r->len;
    pthread_mutex_unlock(&en->mu);
    return done;
}

void engine_release(engine *en, engine_req *r) {
    if (!r) return;
    pthread_mutex_lock(&en->mu);
    if (r->queued) { /* still waiting: unlink it */
        engine_req **pp = &en->q_head, *prev = NULL;
        while (*pp && *pp != r) { prev = *pp; pp = &(*pp)->next; }
        if (*pp) { *pp = r->next; if (en->q_tail == r) en->q_tail = prev; en->q_len--; }
        r->queued = 0; r->done = 1; r->finish = ENGINE_FINISH_CANCELLED;
        en->st.requests[ENGINE_OUT_CANCELLED]++;
    }
    if (!r->done) {
        r->cancel = 1;
        pthread_cond_signal(&en->work);
        while (!r->done) pthread_cond_wait(&r->cv, &en->mu);
    }
    pthread_mutex_unlock(&en->mu);
    engine_req_free(r);
}

void engine_stats_get(engine *en, engine_stats *out) {
    pthread_mutex_lock(&en->mu);
    *out = en->st;
    out->queue_len = en->q_len;
    pthread_mutex_unlock(&en->mu);
    if (en->be.stats) en->be.stats(en->be.ctx, out);   /* the backend's counters, outside the engine lock */
}

void engine_count_rejected(engine *en) {
    pthread_mutex_lock(&en->mu);
    en->st.requests[ENGINE_OUT_REJECTED]++;
    pthread_mutex_unlock(&en->mu);
}
