/* workers.c - the CPU expert workers (workers.h): a pthread pool bound to cores with hwloc, one
 * job per MoE layer, split into four phases of small work items that every thread takes from a
 * shared counter, so that even 1 token x 2 cold experts keeps all threads busy:
 *   QX    per token: quantize x into each activation format the experts' gate/up need
 *   GU    per (expert, block of ffn rows): gate and up rows for every token routed to the expert,
 *         then h = silu(gate) * up, while the block's weights are still in cache
 *   QH    per (token, expert) pair: quantize h into the down projection's activation format
 *   DOWN  per block of n_embd rows: every pair's down rows, then each token's weighted sum
 * A phase's items are all done before any thread starts the next (a counter per phase). The
 * thread that finishes the last DOWN item publishes completion. */
#define _GNU_SOURCE
#include "workers.h"
#include "cpu.h"
#include "gemv.h"
#include "quant.h"
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#ifdef HM_HAVE_HWLOC
#include <hwloc.h>
#endif

enum { PH_QX, PH_GU, PH_QH, PH_DOWN, N_PHASES };
enum { SLOT_F32, SLOT_Q8_0, SLOT_Q8_K, N_SLOTS }; /* activation formats (gemv.h: hm_act_type) */

/* Row blocks are multiples of this (16 floats = one cache line of output), so no two items
 * write one line; and at most ROWS_MAX rows, so that one item's weights stay in L2 while it is
 * dotted with every token routed to the expert. */
#define ROWS_ALIGN 16
#define ROWS_MAX 256
/* items per thread aimed at in a phase: enough for the fast threads to make up for slow ones */
#define ITEMS_PER_THREAD 4

typedef struct { int g, r0, r1; } gu_item; /* expert group g, ffn rows [r0, r1) */

/* A 64-byte-aligned buffer that only grows (submit-time planning allocates only when a job is
 * larger than every earlier one). */
typedef struct { void *p; size_t cap; } scratch;
enum { B_PAIR_TOK, B_PAIR_E, B_PAIR_W, B_TOK_P0, B_GRP_E, B_GRP_P0, B_GRP_PAIRS, B_COUNT, B_GU,
       B_XQ0, B_H = B_XQ0 + N_SLOTS, B_HQ, N_BUFS };

typedef struct {
    pthread_t th;
    struct workers *pool;
    int id;
    int core;                 /* OS index of the PU it is bound to, -1 when unbound */
    scratch ybuf;             /* DOWN: (n_pairs, rb_down) floats, the pairs' rows of one block */
    scratch row;              /* (2 * max(n_embd, n_ff)) floats: up rows (GU), a dequantized row (REF) */
} worker;

struct workers {
    int n;
    int spin_us;
    worker *t;
    /* synchronisation */
    _Atomic uint32_t gen;       /* futex word of the workers: bumped for each job and at stop */
    _Atomic int sleepers;       /* workers asleep (or about to be) on gen */
    _Atomic int parked;         /* 1 from workers_park to the next submit: idle workers sleep at once */
    _Atomic uint32_t done_seq;  /* futex word of workers_wait: low bits of the last finished seq */
    _Atomic int waiters;
    _Atomic int left;           /* workers that are out of the current job */
    _Atomic int started;
    _Atomic int stop;
    _Atomic int next[N_PHASES], done[N_PHASES];
    int n_items[N_PHASES];
    int64_t seq;                /* last submitted job */
    /* counters (workers_stats): written by job_finish, once per job, read when idle */
    double t_submit, busy_us;   /* submit time of the job in flight; sum of submit-to-finish times */
    uint64_t cur_bytes, bytes;  /* expert weight bytes of the job in flight; summed over finished jobs */
    int64_t jobs;
    /* the job in flight and its plan, written by workers_submit while every worker is out */
    workers_job job;
    int ref;                    /* HM_KERNELS_REF at submit */
    int n_pairs, n_groups, nff_max, rb_gu, rb_down;
    int *pair_tok, *pair_e;     /* (n_pairs) token-major: token t's j-th cold expert */
    float *pair_w;              /* (n_pairs) its routing weight */
    int *tok_p0;                /* (n_tok + 1) first pair of each token */
    int *grp_e, *grp_p0;        /* (n_groups), (n_groups + 1): expert and first member */
    int *grp_pairs;             /* (n_pairs) the pairs of each group, group by group */
    int *count;                 /* (n_expert) counting-sort scratch */
    gu_item *gu;                /* (n_items[PH_GU]) */
    int slot_type[N_SLOTS];     /* a weight type whose activation is this slot; -1: not needed */
    uint8_t *xq[N_SLOTS];       /* (n_tok, xq_stride[s]) x in each activation format */
    size_t xq_stride[N_SLOTS];
    float *h;                   /* (n_pairs, h_stride) silu(gate) * up */
    size_t h_stride;
    uint8_t *hq;                /* (n_pairs, hq_stride) h in down's activation format */
    size_t hq_stride;
    int need_qh;                /* some expert's down takes quantized activations */
    scratch mem[N_BUFS];        /* the memory behind the arrays above */
    char desc[256];
#ifdef HM_HAVE_HWLOC
    hwloc_topology_t topo;
#endif
};

/* ---- small helpers ---- */

/* err = the formatted message, when err is given */
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* the spin-loop hint (PAUSE on x86): saves power and the sibling hyperthread's cycles */
static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* one step of a spin loop; yields now and then so that more threads than cores still progress */
static inline void relax(unsigned *k) {
    cpu_pause();
    if ((++*k & 1023) == 0) sched_yield();
}

/* monotonic clock, microseconds */
static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

/* Sleeps while *a == v (returns at once when it is not; may return spuriously), and wakes every
 * sleeper of a. Elsewhere than Linux: a yield, and nothing. */
#ifdef __linux__
static void futex_wait(_Atomic uint32_t *a, uint32_t v) {
    syscall(SYS_futex, (uint32_t *)a, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}
static void futex_wake(_Atomic uint32_t *a) {
    syscall(SYS_futex, (uint32_t *)a, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
static void futex_wait(_Atomic uint32_t *a, uint32_t v) { (void)a; (void)v; sched_yield(); }
static void futex_wake(_Atomic uint32_t *a) { (void)a; }
#endif

/* Waits until *word != seen: spins for spin_us, then sleeps on the futex, counted in *sleepers
 * so that the writer only pays for a wake-up syscall when somebody sleeps. Returns the new value. */
static uint32_t wait_change(_Atomic uint32_t *word, uint32_t seen, _Atomic int *sleepers, int spin_us,
                            _Atomic int *parked) {
    uint32_t v;
    unsigned k = 0;
    const double end = now_us() + spin_us;
    for (;;) {
        if ((v = atomic_load_explicit(word, memory_order_acquire)) != seen) return v;
        relax(&k);
        if ((k & 63) == 0 && (now_us() > end || (parked && atomic_load_explicit(parked, memory_order_relaxed)))) break;
    }
    atomic_fetch_add(sleepers, 1); /* seq_cst: pairs with the writer's store, then load */
    while ((v = atomic_load(word)) == seen) futex_wait(word, seen);
    atomic_fetch_sub(sleepers, 1);
    return v;
}

/* s grown to at least `bytes` (contents are not kept); NULL when memory is short. */
static void *scratch_get(scratch *s, size_t bytes) {
    if (bytes > s->cap || !s->p) {
        bytes += bytes / 2 + 64;
        void *q = NULL;
        if (posix_memalign(&q, 64, bytes)) return NULL;
        free(s->p);
        s->p = q;
        s->cap = bytes;
    }
    return s->p;
}

/* n rounded up to a multiple of a */
static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* the scratch slot of an activation type (hm_act_type's answer) */
static int slot_of(int act_type) {
    return act_type == HM_TYPE_Q8_0 ? SLOT_Q8_0 : act_type == HM_TYPE_Q8_K ? SLOT_Q8_K : SLOT_F32;
}

/* rows per block for `rows` rows of work shared by n threads */
static int block_rows(int64_t rows, int n) {
    int64_t rb = rows / ((int64_t)n * ITEMS_PER_THREAD) / ROWS_ALIGN * ROWS_ALIGN;
    return rb < ROWS_ALIGN ? ROWS_ALIGN : rb > ROWS_MAX ? ROWS_MAX : (int)rb;
}

/* ---- the math of one item ---- */

/* y[r] = row r of W . x for r in [r0, r1). FAST: the gemv.h kernels on xq (x's activation form).
 * REF: row dequantized exactly into `row`, then an F32 dot in cpu_matvec's order (bit-equal). */
static void mat_rows(int ref, const hm_tensor *W, const float *x, const void *xq, float *y,
                     int64_t r0, int64_t r1, float *row) {
    if (!ref) {
        hm_gemv_rows(W, xq, y, r0, r1);
        return;
    }
    const int64_t n = W->ne[0];
    for (int64_t r = r0; r < r1; r++) {
        cpu_tensor_row(W, r, row);
        float s = 0;
        for (int64_t i = 0; i < n; i++) s += row[i] * x[i];
        y[r] = s;
    }
}

/* token t's FFN input in the activation format of weight type `type` */
static const void *x_act(const struct workers *w, int type, int t) {
    const int s = slot_of(hm_act_type(type));
    if (w->ref || s == SLOT_F32) return w->job.x + (size_t)t * w->job.n_embd;
    return w->xq[s] + (size_t)t * w->xq_stride[s];
}

/* QX item: token t's x quantized into every slot the job's gate/up weights need */
static void item_qx(struct workers *w, int t) {
    const float *x = w->job.x + (size_t)t * w->job.n_embd;
    for (int s = SLOT_Q8_0; s < N_SLOTS; s++)
        if (w->slot_type[s] >= 0)
            hm_act_quantize(w->slot_type[s], x, w->xq[s] + (size_t)t * w->xq_stride[s], w->job.n_embd);
}

/* GU item: rows [r0, r1) of h = silu(gate x) * up x for every token routed to the group's expert */
static void item_gu(struct workers *w, worker *me, const gu_item *it) {
    const hm_ffn_w *f = &w->job.experts[w->grp_e[it->g]].host;
    for (int k = w->grp_p0[it->g]; k < w->grp_p0[it->g + 1]; k++) {
        const int p = w->grp_pairs[k], t = w->pair_tok[p];
        const float *x = w->job.x + (size_t)t * w->job.n_embd;
        /* gate lands in h, up in u (the first nff_max floats of row), REF dequantizes after them */
        float *h = w->h + (size_t)p * w->h_stride, *u = me->row.p, *deq = u + w->nff_max;
        mat_rows(w->ref, &f->gate, x, x_act(w, f->gate.type, t), h, it->r0, it->r1, deq);
        mat_rows(w->ref, &f->up, x, x_act(w, f->up.type, t), u, it->r0, it->r1, deq);
        for (int r = it->r0; r < it->r1; r++) h[r] = h[r] / (1.0f + expf(-h[r])) * u[r];
    }
}

/* QH item: pair p's h quantized for its expert's down projection (nothing for F32 activations) */
static void item_qh(struct workers *w, int p) {
    const hm_tensor *d = &w->job.experts[w->pair_e[p]].host.down;
    if (slot_of(hm_act_type(d->type)) != SLOT_F32)
        hm_act_quantize(d->type, w->h + (size_t)p * w->h_stride, w->hq + (size_t)p * w->hq_stride, d->ne[0]);
}

/* DOWN item i: rows [i*rb, (i+1)*rb) of every pair's down projection, then of every token's
 * weighted sum, written to out */
static void item_down(struct workers *w, worker *me, int i) {
    const workers_job *j = &w->job;
    const int rb = w->rb_down, r0 = i * rb, r1 = r0 + rb < j->n_embd ? r0 + rb : j->n_embd;
    float *ybuf = me->ybuf.p;
    for (int g = 0; g < w->n_groups; g++) {
        const hm_tensor *d = &j->experts[w->grp_e[g]].host.down;
        hm_tensor sub = *d; /* rows [r0, r1) as a matrix of their own, written to ybuf[0..) */
        sub.data = (const uint8_t *)d->data + (size_t)r0 * hm_row_size(d->type, d->ne[0]);
        sub.ne[1] = r1 - r0;
        const int f32 = w->ref || slot_of(hm_act_type(d->type)) == SLOT_F32;
        for (int k = w->grp_p0[g]; k < w->grp_p0[g + 1]; k++) {
            const int p = w->grp_pairs[k];
            const float *h = w->h + (size_t)p * w->h_stride;
            const void *hq = f32 ? (const void *)h : w->hq + (size_t)p * w->hq_stride;
            mat_rows(w->ref, &sub, h, hq, ybuf + (size_t)p * rb, 0, r1 - r0, me->row.p);
        }
    }
    /* each token's sum in the order of its list, as a sequential `out += w * ffn` would do it */
    for (int t = 0; t < j->n_tok; t++) {
        float *o = j->out + (size_t)t * j->n_embd;
        for (int r = r0; r < r1; r++) {
            float s = 0;
            for (int p = w->tok_p0[t]; p < w->tok_p0[t + 1]; p++) s += w->pair_w[p] * ybuf[(size_t)p * rb + (r - r0)];
            o[r] = s;
        }
    }
}

/* ---- the worker thread ---- */

/* Publishes the end of the job: the caller's flag, then done_seq (waking workers_wait). Called
 * once, by the thread that completed the last DOWN item, after every write to out. */
static void job_finish(struct workers *w) {
    w->busy_us += now_us() - w->t_submit;
    w->bytes += w->cur_bytes;
    w->jobs++;
    if (w->job.flag) __atomic_store_n(w->job.flag, w->job.flag_value, __ATOMIC_RELEASE);
    atomic_store(&w->done_seq, (uint32_t)w->seq); /* seq_cst: then the waiters count is read */
    if (atomic_load(&w->waiters) > 0) futex_wake(&w->done_seq);
}

/* One worker's part of the current job: items of each phase until none are left, then waits
 * until the phase's last item is done (the next phase reads its results). */
static void job_run(struct workers *w, worker *me) {
    for (int ph = 0; ph < N_PHASES; ph++) {
        const int n = w->n_items[ph];
        int i;
        while ((i = atomic_fetch_add_explicit(&w->next[ph], 1, memory_order_relaxed)) < n) {
            switch (ph) {
            case PH_QX: item_qx(w, i); break;
            case PH_GU: item_gu(w, me, &w->gu[i]); break;
            case PH_QH: item_qh(w, i); break;
            default: item_down(w, me, i); break;
            }
            if (atomic_fetch_add_explicit(&w->done[ph], 1, memory_order_acq_rel) + 1 == n && ph == PH_DOWN)
                job_finish(w);
        }
        if (ph == PH_DOWN) break; /* nothing follows: no need to wait for the others */
        unsigned k = 0;
        while (atomic_load_explicit(&w->done[ph], memory_order_acquire) < n) relax(&k);
    }
}

/* The worker thread: waits for a job (or stop), runs its share, checks out (left). */
static void *worker_main(void *arg) {
    worker *me = arg;
    struct workers *w = me->pool;
    uint32_t seen = 0;
    atomic_fetch_add(&w->started, 1);
    for (;;) {
        seen = wait_change(&w->gen, seen, &w->sleepers, w->spin_us, &w->parked);
        if (atomic_load_explicit(&w->stop, memory_order_acquire)) break;
        job_run(w, me);
        atomic_fetch_add_explicit(&w->left, 1, memory_order_release);
    }
    return NULL;
}

/* ---- binding ---- */

/* Binds the workers to cores (hwloc): cores of cfg->numa_node (all when -1), the first one left
 * for the main thread when there are more cores than workers, round robin when fewer. Writes
 * what happened to w->desc. Failing to bind leaves the threads where the OS puts them. */
static void bind_workers(struct workers *w, const workers_config *cfg) {
    int off = snprintf(w->desc, sizeof w->desc, "%d worker%s", w->n, w->n == 1 ? "" : "s");
    if (!cfg->bind) {
        snprintf(w->desc + off, sizeof w->desc - off, ", unbound (binding off)");
        return;
    }
#ifdef HM_HAVE_HWLOC
    hwloc_topology_t topo = w->topo;
    hwloc_const_cpuset_t scope = hwloc_topology_get_topology_cpuset(topo);
    if (cfg->numa_node >= 0) {
        hwloc_obj_t node = NULL;
        for (hwloc_obj_t o = NULL; (o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, o));)
            if ((int)o->os_index == cfg->numa_node) node = o;
        if (!node) {
            snprintf(w->desc + off, sizeof w->desc - off, ", unbound: NUMA node %d not found", cfg->numa_node);
            return;
        }
        scope = node->cpuset;
    }
    hwloc_obj_type_t type = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    const int n_cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, scope, type);
    if (n_cores <= 0) {
        snprintf(w->desc + off, sizeof w->desc - off, ", unbound: no cores found");
        return;
    }
    const int skip = n_cores > w->n ? 1 : 0;
    off += snprintf(w->desc + off, sizeof w->desc - off, " on %s", type == HWLOC_OBJ_CORE ? "cores" : "PUs");
    int failed = 0;
    for (int i = 0; i < w->n; i++) {
        hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(topo, scope, type,
                                                               (unsigned)((i + skip + (cfg->first_core > 0 ? cfg->first_core : 0)) % n_cores));
        hwloc_bitmap_t set = hwloc_bitmap_dup(core->cpuset);
        hwloc_bitmap_singlify(set); /* one PU of the core: the thread never migrates */
        if (hwloc_set_thread_cpubind(topo, w->t[i].th, set, HWLOC_CPUBIND_THREAD) == 0)
            w->t[i].core = hwloc_bitmap_first(set);
        else
            failed++;
        hwloc_bitmap_free(set);
        if (i < 16 && off < (int)sizeof w->desc)
            off += snprintf(w->desc + off, sizeof w->desc - off, "%s%d", i ? "," : " ", w->t[i].core);
    }
    if (w->n > 16 && off < (int)sizeof w->desc) off += snprintf(w->desc + off, sizeof w->desc - off, ",...");
    if (w->n > n_cores && off < (int)sizeof w->desc)
        off += snprintf(w->desc + off, sizeof w->desc - off, " (%d workers share %d cores)", w->n, n_cores);
    if (failed && off < (int)sizeof w->desc)
        snprintf(w->desc + off, sizeof w->desc - off, " (%d could not be bound: unbound)", failed);
#else
    snprintf(w->desc + off, sizeof w->desc - off, ", unbound (built without hwloc)");
#endif
}

/* ---- the public functions: contracts in workers.h ---- */

workers *workers_init(const workers_config *cfg, char *err, size_t errlen) {
    if (!cfg || cfg->n_threads < 1 || cfg->n_threads > HM_WORKERS_MAX) {
        set_err(err, errlen, "workers: thread count %d out of range (1..%d)", cfg ? cfg->n_threads : 0, HM_WORKERS_MAX);
        return NULL;
    }
    struct workers *w = calloc(1, sizeof *w);
    if (!w || !(w->t = calloc((size_t)cfg->n_threads, sizeof *w->t))) {
        free(w);
        set_err(err, errlen, "workers: out of memory");
        return NULL;
    }
    w->n = cfg->n_threads;
    w->spin_us = cfg->spin_us < 0 ? 50 : cfg->spin_us;
    atomic_store(&w->left, w->n); /* no job: everybody is out */
#ifdef HM_HAVE_HWLOC
    if (hwloc_topology_init(&w->topo) != 0 || hwloc_topology_load(w->topo) != 0) {
        set_err(err, errlen, "workers: hwloc cannot read the machine's topology");
        free(w->t);
        free(w);
        return NULL;
    }
#endif
    for (int i = 0; i < w->n; i++) {
        w->t[i] = (worker){ .pool = w, .id = i, .core = -1 };
        if (pthread_create(&w->t[i].th, NULL, worker_main, &w->t[i]) != 0) {
            set_err(err, errlen, "workers: cannot start thread %d of %d", i + 1, w->n);
            w->n = i; /* join the ones started */
            workers_free(w);
            return NULL;
        }
    }
    bind_workers(w, cfg);
    unsigned k = 0;
    while (atomic_load(&w->started) < w->n) relax(&k);
    return w;
}

void workers_free(workers *w) {
    if (!w) return;
    workers_wait(w);
    unsigned k = 0;
    while (atomic_load_explicit(&w->left, memory_order_acquire) < w->n) relax(&k);
    atomic_store_explicit(&w->stop, 1, memory_order_release);
    atomic_fetch_add(&w->gen, 1);
    futex_wake(&w->gen);
    for (int i = 0; i < w->n; i++) pthread_join(w->t[i].th, NULL);
    for (int i = 0; i < w->n; i++) { free(w->t[i].ybuf.p); free(w->t[i].row.p); }
    for (int b = 0; b < N_BUFS; b++) free(w->mem[b].p);
#ifdef HM_HAVE_HWLOC
    hwloc_topology_destroy(w->topo);
#endif
    free(w->t);
    free(w);
}

int workers_threads(const workers *w) { return w->n; }

void workers_stats(workers *w, workers_counters *out, int reset) {
    workers_wait(w);   /* the counters are written by the job in flight */
    out->jobs = w->jobs; out->bytes = w->bytes; out->busy_s = w->busy_us * 1e-6;
    if (reset) { w->jobs = 0; w->bytes = 0; w->busy_us = 0; }
}
const char *workers_describe(const workers *w) { return w->desc; }

char *workers_debug(const workers *w, char *buf, size_t n) {
    struct workers *m = (struct workers *)w;   /* atomic loads of a const pool */
    int off = snprintf(buf, n, "job %lld submitted, %u finished, %d of %d out, %d asleep, generation %u",
                       (long long)w->seq, atomic_load(&m->done_seq), atomic_load(&m->left), w->n, atomic_load(&m->sleepers),
                       atomic_load(&m->gen));
    for (int ph = 0; ph < N_PHASES && off > 0 && (size_t)off < n; ph++)
        off += snprintf(buf + off, n - off, "%s%d/%d/%d", ph ? " " : "; phases ", atomic_load(&m->next[ph]), atomic_load(&m->done[ph]),
                        w->n_items[ph]);
    return buf;
}

int workers_poll(const workers *w) {
    return atomic_load_explicit(&((workers *)w)->done_seq, memory_order_acquire) == (uint32_t)w->seq;
}

void workers_wait(workers *w) {
    const uint32_t target = (uint32_t)w->seq;
    uint32_t v = atomic_load_explicit(&w->done_seq, memory_order_acquire);
    while (v != target) v = wait_change(&w->done_seq, v, &w->waiters, w->spin_us, NULL);
}

/* ---- submit: check the job, plan its items ---- */

/* Checks one expert's tensors: present, shapes that chain (n_embd -> n_ff -> n_embd), types with
 * kernels for this mode. Returns 0, or -1 with why filled. */
static int check_ffn(const hm_ffn_w *f, int n_embd, int ref, char *why, size_t n) {
    const hm_tensor *t[3] = { &f->gate, &f->up, &f->down };
    static const char *const name[3] = { "gate", "up", "down" };
    for (int i = 0; i < 3; i++) {
        if (!t[i]->data) { set_err(why, n, "ffn_%s absent", name[i]); return -1; }
        const hm_type_traits *tr = hm_type_get(t[i]->type);
        const int ok = hm_row_size(t[i]->type, t[i]->ne[0]) > 0 &&
                       (ref ? tr && tr->to_float : hm_act_size(t[i]->type, t[i]->ne[0]) > 0);
        if (!ok) {
            set_err(why, n, "ffn_%s: no %s kernel for type %s with rows of %lld", name[i],
                    ref ? "reference" : "fast", hm_type_name(t[i]->type), (long long)t[i]->ne[0]);
            return -1;
        }
    }
    const int64_t ff = f->gate.ne[1];
    if (f->gate.ne[0] != n_embd || f->up.ne[0] != n_embd || f->up.ne[1] != ff || f->down.ne[0] != ff ||
        f->down.ne[1] != n_embd || ff < 1 || ff > INT_MAX / 2) {
        set_err(why, n, "shapes do not chain: gate %lldx%lld, up %lldx%lld, down %lldx%lld, n_embd %d",
                (long long)f->gate.ne[1], (long long)f->gate.ne[0], (long long)f->up.ne[1],
                (long long)f->up.ne[0], (long long)f->down.ne[1], (long long)f->down.ne[0], n_embd);
        return -1;
    }
    return 0;
}

#define GET(b, type, n) ((type *)scratch_get(&w->mem[b], sizeof(type) * (size_t)(n)))

/* Fills the plan (pairs, expert groups, items, scratch) for job j. 0, or -1 with err filled. */
static int plan(struct workers *w, const workers_job *j, char *err, size_t errlen) {
    if (j->n_tok < 1 || j->n_embd < 1 || j->k < 0 || !j->x || !j->out || (j->k > 0 && !j->n_cold)) {
        set_err(err, errlen, "workers: layer %d: malformed job (n_tok %d, n_embd %d, k %d, x %s, out %s)",
                j->layer, j->n_tok, j->n_embd, j->k, j->x ? "set" : "NULL", j->out ? "set" : "NULL");
        return -1;
    }
    int64_t np = 0;
    for (int t = 0; t < j->n_tok; t++) {
        const int c = j->k ? j->n_cold[t] : 0;
        if (c < 0 || c > j->k) {
            set_err(err, errlen, "workers: layer %d token %d: %d cold experts (0..%d expected)", j->layer, t, c, j->k);
            return -1;
        }
        np += c;
    }
    if (np > INT_MAX / 4) {
        set_err(err, errlen, "workers: layer %d: %lld (token, expert) pairs is too many", j->layer, (long long)np);
        return -1;
    }
    const int n_pairs = (int)np, n_expert = n_pairs ? j->n_expert : 0;
    if (n_pairs > 0 && (!j->ids || !j->w || !j->experts || j->n_expert < 1)) {
        set_err(err, errlen, "workers: layer %d: cold experts given without ids, weights or expert table", j->layer);
        return -1;
    }
    w->pair_tok = GET(B_PAIR_TOK, int, n_pairs + 1);
    w->pair_e = GET(B_PAIR_E, int, n_pairs + 1);
    w->pair_w = GET(B_PAIR_W, float, n_pairs + 1);
    w->grp_pairs = GET(B_GRP_PAIRS, int, n_pairs + 1);
    w->tok_p0 = GET(B_TOK_P0, int, j->n_tok + 1);
    w->count = GET(B_COUNT, int, n_expert + 1);
    if (!w->pair_tok || !w->pair_e || !w->pair_w || !w->grp_pairs || !w->tok_p0 || !w->count) goto oom;

    /* pairs, token-major, in each token's list order (the order of its weighted sum) */
    memset(w->count, 0, sizeof(int) * (size_t)(n_expert + 1));
    int p = 0;
    for (int t = 0; t < j->n_tok; t++) {
        w->tok_p0[t] = p;
        const int c = j->k ? j->n_cold[t] : 0;
        for (int i = 0; i < c; i++, p++) {
            const int e = j->ids[(size_t)t * j->k + i];
            if (e < 0 || e >= j->n_expert) {
                set_err(err, errlen, "workers: layer %d token %d: expert id %d out of range (0..%d)",
                        j->layer, t, e, j->n_expert - 1);
                return -1;
            }
            w->pair_tok[p] = t;
            w->pair_e[p] = e;
            w->pair_w[p] = j->w[(size_t)t * j->k + i];
            w->count[e]++;
        }
    }
    w->tok_p0[j->n_tok] = p;

    /* groups: the distinct experts, by id, each checked once; their pairs by counting sort */
    int ng = 0;
    for (int e = 0; e < n_expert; e++) ng += w->count[e] > 0;
    w->grp_e = GET(B_GRP_E, int, ng + 1);
    w->grp_p0 = GET(B_GRP_P0, int, ng + 1);
    if (!w->grp_e || !w->grp_p0) goto oom;
    for (int s = 0; s < N_SLOTS; s++) w->slot_type[s] = -1;
    w->nff_max = 0;
    w->need_qh = 0;
    size_t hq_row = 0;
    int64_t gu_rows = 0;
    for (int e = 0, g = 0, acc = 0; e < n_expert; e++) {
        if (!w->count[e]) continue;
        const hm_ffn_w *f = &j->experts[e].host;
        char why[192];
        if (check_ffn(f, j->n_embd, w->ref, why, sizeof why)) {
            set_err(err, errlen, "workers: layer %d expert %d: %s", j->layer, e, why);
            return -1;
        }
        const int ff = (int)f->gate.ne[1];
        if (ff > w->nff_max) w->nff_max = ff;
        gu_rows += ff;
        if (!w->ref) {
            w->slot_type[slot_of(hm_act_type(f->gate.type))] = f->gate.type;
            w->slot_type[slot_of(hm_act_type(f->up.type))] = f->up.type;
            if (slot_of(hm_act_type(f->down.type)) != SLOT_F32) {
                const size_t a = hm_act_size(f->down.type, ff);
                w->need_qh = 1;
                if (a > hq_row) hq_row = a;
            }
        }
        w->grp_e[g] = e;
        w->grp_p0[g] = acc;
        acc += w->count[e];
        w->count[e] = w->grp_p0[g]; /* from here on: where the group's next pair goes */
        g++;
    }
    w->grp_p0[ng] = n_pairs;
    w->slot_type[SLOT_F32] = -1; /* F32 activations are x itself */
    for (int q = 0; q < n_pairs; q++) w->grp_pairs[w->count[w->pair_e[q]]++] = q;
    w->n_groups = ng;
    w->n_pairs = n_pairs;

    /* items and row blocks */
    w->rb_gu = block_rows(gu_rows, w->n);
    w->rb_down = block_rows(j->n_embd, w->n);
    int n_gu = 0;
    for (int g = 0; g < ng; g++) n_gu += (int)((j->experts[w->grp_e[g]].host.gate.ne[1] + w->rb_gu - 1) / w->rb_gu);
    if (!(w->gu = GET(B_GU, gu_item, n_gu + 1))) goto oom;
    for (int g = 0, i = 0; g < ng; g++) {
        const int ff = (int)j->experts[w->grp_e[g]].host.gate.ne[1];
        for (int r = 0; r < ff; r += w->rb_gu) w->gu[i++] = (gu_item){ g, r, r + w->rb_gu < ff ? r + w->rb_gu : ff };
    }

    /* scratch: activations, h, each worker's buffers */
    int need_qx = 0;
    for (int s = SLOT_Q8_0; s < N_SLOTS; s++) {
        if (w->slot_type[s] < 0) continue;
        w->xq_stride[s] = round_up(hm_act_size(w->slot_type[s], j->n_embd), 64);
        if (!(w->xq[s] = GET(B_XQ0 + s, uint8_t, (size_t)j->n_tok * w->xq_stride[s]))) goto oom;
        need_qx = 1;
    }
    w->h_stride = round_up((size_t)w->nff_max, ROWS_ALIGN);
    if (!(w->h = GET(B_H, float, (size_t)n_pairs * w->h_stride + 1))) goto oom;
    w->hq_stride = round_up(hq_row, 64);
    if (w->need_qh && !(w->hq = GET(B_HQ, uint8_t, (size_t)n_pairs * w->hq_stride))) goto oom;
    const size_t row_n = (size_t)w->nff_max + (size_t)(j->n_embd > w->nff_max ? j->n_embd : w->nff_max);
    for (int i = 0; i < w->n; i++)
        if (!scratch_get(&w->t[i].ybuf, sizeof(float) * ((size_t)n_pairs * (size_t)w->rb_down + 1)) ||
            !scratch_get(&w->t[i].row, sizeof(float) * row_n))
            goto oom;

    w->n_items[PH_QX] = need_qx ? j->n_tok : 0;
    w->n_items[PH_GU] = n_gu;
    w->n_items[PH_QH] = w->need_qh ? n_pairs : 0;
    w->n_items[PH_DOWN] = (j->n_embd + w->rb_down - 1) / w->rb_down;
    return 0;
oom:
    set_err(err, errlen, "workers: out of memory planning layer %d (%d tokens, %d pairs)", j->layer, j->n_tok, n_pairs);
    return -1;
}

int64_t workers_submit(workers *w, const workers_job *job, char *err, size_t errlen) {
    workers_wait(w);
    unsigned k = 0; /* the last workers may still be leaving the previous job */
    while (atomic_load_explicit(&w->left, memory_order_acquire) < w->n) relax(&k);
    w->ref = hm_kernels_get() == HM_KERNELS_REF;
    w->job = *job;
    if (plan(w, job, err, errlen)) return -1;
    w->cur_bytes = 0;   /* each distinct expert's weights are read once per job */
    for (int g = 0; g < w->n_groups; g++) {
        const hm_ffn_w *f = &job->experts[w->grp_e[g]].host;
        w->cur_bytes += f->gate.nbytes + f->up.nbytes + f->down.nbytes;
    }
    w->t_submit = now_us();
    for (int ph = 0; ph < N_PHASES; ph++) {
        atomic_store_explicit(&w->next[ph], 0, memory_order_relaxed);
        atomic_store_explicit(&w->done[ph], 0, memory_order_relaxed);
    }
    atomic_store_explicit(&w->left, 0, memory_order_relaxed);
    w->seq++;
    atomic_store_explicit(&w->parked, 0, memory_order_relaxed);
    atomic_fetch_add(&w->gen, 1); /* seq_cst: publishes the plan, then the sleepers count is read */
    if (atomic_load(&w->sleepers) > 0) futex_wake(&w->gen);
    return w->seq;
}

void workers_park(workers *w) {
    if (w) atomic_store_explicit(&w->parked, 1, memory_order_relaxed);
}
