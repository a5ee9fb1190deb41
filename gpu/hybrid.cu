/* hybrid.cu - --cold cpu: the cold experts of a decode step computed by the CPU workers
 * (cpu/workers.h) while the GPU computes the resident ones, inside the same CUDA graph.
 *
 * Per MoE layer: the cache update kernel (cache.cu) sends the misses it does not copy into a
 * slot (at most --swap-max copies per layer and step) to the layer's hand-off job in mapped
 * pinned memory (ids, weights, the FFN input x), then publishes req = step. A host thread (the
 * dispatcher) polls the jobs in layer order and hands each to the workers, which write out and
 * then done = step with release order. The GPU runs its experts meanwhile (the CPU's ids point at
 * a zero record: their GEMVs add exactly 0), then k_hybrid_wait spins on done, copies out into an
 * extra expert row of weight 1, and the usual weighted reduce adds it. No host synchronisation
 * sits on the step's path other than these two flags; the graph is launched as usual.
 *
 * The histogram exchange (--swap-interval N): every N tokens, between two steps, the layers'
 * decayed routing counts (the cache kernel's LFU scores) and residency go to placement/policy.c's
 * exchange_plan (the simulator's code). Each swap evicts at once (a kernel on the main stream:
 * the outgoing expert's tables point back at its pinned record, so later steps give it to the
 * CPU), copies the incoming expert into the freed slot on the side stream (cudaMemcpyAsync from
 * pinned RAM, beside the following steps), then flips it in with a kernel on the side stream:
 * tables first, then slot_of, so a step sees either the old state (CPU) or the new (slot) for
 * each expert, never a half. */
#include "exec_impl.cuh"
#include "launch.cuh"
extern "C" {
#include "policy.h"
#include "workers.h"
}
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

__global__ void k_hybrid_wait(const hjob *job, const int *step, int nt, float *y, size_t ystride, float *w, int wstride, int n) {
    __shared__ int have;
    if (threadIdx.x == 0) {
        const uint32_t want = (uint32_t)*step;
        have = *(const volatile int *)&job->n > 0;
        if (have) {
            /* a dead dispatcher must not hang the GPU for ever: give up after 5 s (the host sees late
             * after the step and fails it) */
            unsigned long long t0, t;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
            while (job->done != want) {
                __nanosleep(256);
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
                if (t - t0 > 5000000000ULL) { have = -1; ((hjob *)job)->late = want; break; }
            }
            __threadfence_system();
        }
        for (int t = 0; t < nt; t++) w[(size_t)t * wstride] = 1.0f;
    }
    __syncthreads();
    const volatile float *out = job->dout;
    for (int t = 0; t < nt; t++)
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            y[t * ystride + i] = have > 0 ? out[(size_t)t * n + i] : have < 0 ? __int_as_float(0x7fc00000) : 0.0f;
}

void hybrid_wait(const dcache *c, float *y_row, float *w1, int n_embd, cudaStream_t s) {
    hm_launch_pdl(k_hybrid_wait, 1, 1024, 0, s, 0, c->job, c->step, 1, y_row, 0, w1, 0, n_embd);
}

void hybrid_wait_batch(const dcache *c, int nt, float *y, size_t ystride, float *w, int wstride, int n_embd, cudaStream_t s) {
    hm_launch_pdl(k_hybrid_wait, 1, 1024, 0, s, 0, c->job, c->step, nt, y, ystride, w, wstride, n_embd);
}

/* evict: expert e leaves record r (its tables point at its host record again) */
__global__ void k_flip_out(const dcache c, const void **tg, const void **tu, const void **td, int e, int r) {
    const uint8_t *h = c.host + (size_t)c.hidx[e] * c.stride;
    c.slot_of[e] = -1;
    c.owner[r] = -1;
    __threadfence();
    tg[e] = h; tu[e] = h + c.off_up; td[e] = h + c.off_down;
}

/* flip in: expert e now lives in record r (copied there) */
__global__ void k_flip_in(const dcache c, const void **tg, const void **tu, const void **td, int e, int r) {
    uint8_t *d = c.dev + (size_t)r * c.stride;
    tg[e] = d; tu[e] = d + c.off_up; td[e] = d + c.off_down;
    __threadfence();
    c.owner[r] = e;
    c.slot_of[e] = r;
}

int hybrid_exchange(gpu_exec *g, char *err, size_t errlen) {
    const hm_config *c = &g->m->cfg;
    const int E = c->n_expert, S = g->n_static, C = g->n_slots;
    if (C <= 0 || g->n_jobs <= 0) return 0;
    if (cudaStreamSynchronize(g->side) != cudaSuccess) { snprintf(err, errlen, "exchange: the previous round's copies failed"); return -1; }
    cache_layer *L = (cache_layer *)calloc(g->n_jobs, sizeof(cache_layer));
    float *score = (float *)malloc(sizeof(float) * E);
    int *slot_of = (int *)malloc(sizeof(int) * E), *owner = (int *)malloc(sizeof(int) * (S + C));
    int *hidx = (int *)malloc(sizeof(int) * (size_t)E * g->n_jobs);   /* host record of each expert, per layer */
    cache_swap *sw = (cache_swap *)malloc(sizeof(cache_swap) * ((size_t)g->n_jobs * C + 1));
    int rc = -1, n = 0;
    for (int j = 0; j < g->n_jobs; j++) {
        const dcache *ca = g->L[g->jobs_layer[j]].cache;
        if (cache_layer_init(&L[j], E, C) ||
            cudaMemcpy(score, ca->score, sizeof(float) * E, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(slot_of, ca->slot_of, sizeof(int) * E, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(owner, ca->owner, sizeof(int) * (S + C), cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(hidx + (size_t)j * E, ca->hidx, sizeof(int) * E, cudaMemcpyDeviceToHost) != cudaSuccess) {
            snprintf(err, errlen, "exchange: cannot read the routing counts of layer %d", g->jobs_layer[j]);
            goto out;
        }
        for (int e = 0; e < E; e++) {
            L[j].count[e] = score[e];
            L[j].pinned[e] = slot_of[e] >= 0 && slot_of[e] < S;
            L[j].expert_slot[e] = slot_of[e] >= S ? slot_of[e] - S : -1;
        }
        for (int x = 0; x < C; x++) L[j].slot_expert[x] = owner[S + x];
    }
    {
        policy_params p = policy_defaults(POLICY_EXCHANGE);
        p.swap_interval = g->xch_interval; p.swap_max = g->xch_max; p.swap_floor = g->xch_floor; p.swap_hyst = g->xch_hyst;
        p.swap_per_layer = g->xch_per_layer; p.swap_decay = g->decay;
        n = exchange_plan(L, g->n_jobs, &p, sw, g->n_jobs * C);
        if (n < 0) { snprintf(err, errlen, "exchange: out of memory"); goto out; }
    }
    for (int i = 0; i < n; i++) {
        const int j = sw[i].layer, r = S + sw[i].slot, e = sw[i].expert_in;
        const dcache *ca = g->L[g->jobs_layer[j]].cache;
        const dexperts *x = &g->L[g->jobs_layer[j]].exps;
        const int h = hidx[(size_t)j * E + e];
        if (h < 0) continue;   /* a static expert is never cold: exchange_plan does not pick one */
        if (sw[i].expert_out >= 0) k_flip_out<<<1, 1, 0, g->s>>>(*ca, x->gate, x->up, x->down, sw[i].expert_out, r);
        if (cudaEventRecord(g->side_fork, g->s) != cudaSuccess || cudaStreamWaitEvent(g->side, g->side_fork, 0) != cudaSuccess ||
            cudaMemcpyAsync(ca->dev + (size_t)r * ca->stride, ca->host_h + (size_t)h * ca->stride, ca->stride,
                            cudaMemcpyHostToDevice, g->side) != cudaSuccess) {
            snprintf(err, errlen, "exchange: cannot queue the copy of expert %d of layer %d", e, g->jobs_layer[j]);
            goto out;
        }
        k_flip_in<<<1, 1, 0, g->side>>>(*ca, x->gate, x->up, x->down, e, r);
        g->swaps++;
    }
    if (cudaGetLastError() != cudaSuccess) { snprintf(err, errlen, "exchange: a flip kernel failed to launch"); goto out; }
    rc = 0;
out:
    for (int j = 0; j < g->n_jobs; j++) cache_layer_free(&L[j]);
    free(L); free(score); free(slot_of); free(owner); free(sw); free(hidx);
    return rc;
}

static void cpu_relax(void) { __builtin_ia32_pause(); }

/* The workers' job for hand-off h at step v (its ids, weights and x as the cache kernel left them). */
static workers_job make_job(gpu_exec *g, int h, uint32_t v) {
    const hm_config *c = &g->m->cfg;
    hjob *j = &g->jobs[h];
    const int l = g->jobs_layer[h];
    workers_job wj;
    memset(&wj, 0, sizeof wj);
    wj.layer = l; wj.n_tok = j->n_tok; wj.n_embd = c->n_embd; wj.x = j->x; wj.k = HJOB_MAX_K;
    wj.n_cold = j->nt; wj.ids = &j->ids[0][0]; wj.w = &j->w[0][0];
    wj.experts = g->cpu_experts + (size_t)l * c->n_expert; wj.n_expert = c->n_expert;
    wj.out = j->out; wj.flag = (uint32_t *)&j->done; wj.flag_value = v;
    return wj;
}

/* A failed submission: NaN out (the step's logits show it) and done, so the GPU does not wait. */
static void job_failed(gpu_exec *g, int h, uint32_t v, const char *err) {
    hjob *j = &g->jobs[h];
    fprintf(stderr, "hotmoe: cpu workers: %s\n", err);
    for (int i = 0; i < HJOB_MAX_T * g->m->cfg.n_embd; i++) j->out[i] = __builtin_nanf("");
    __atomic_store_n(&j->done, v, __ATOMIC_RELEASE);
}

/* --cpu-handoff hostfn: a host node of the graph, after the layer's cache update completed (its
 * ids, weights and x are in the mapped job): runs the job on the workers and returns when done. */
static void CUDART_CB hostfn_job(void *arg) {
    struct gpu_exec::hostfn_arg *a = (struct gpu_exec::hostfn_arg *)arg;
    gpu_exec *g = a->g;
    hjob *j = &g->jobs[a->h];
    const uint32_t v = *g->h_step;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (j->n <= 0) return;   /* the wait kernel does not wait for an empty job */
    char err[256];
    workers_job wj = make_job(g, a->h, v);
    if (workers_submit(g->pool, &wj, err, sizeof err) < 0) { job_failed(g, a->h, v, err); return; }
    workers_wait(g->pool);
}

void hybrid_record_hostfn(gpu_exec *g, int h, cudaStream_t s) {
    cudaEventRecord(g->hf_fork, s);
    cudaStreamWaitEvent(g->side3, g->hf_fork, 0);
    cudaLaunchHostFunc(g->side3, hostfn_job, &g->hf_args[h]);
    cudaEventRecord(g->hf_join, g->side3);
}

/* The dispatcher: jobs in layer order, each handled at its newest request. A step whose jobs were
 * all empty does not make the GPU wait, so the GPU may be a step ahead: a job's request is taken
 * as whatever step number it carries now (never an exact expected one, which could be skipped).
 * When a job's fields changed under the read (an empty job overwritten by the next step), the
 * result is tagged with the older step, which the GPU ignores, and the newer request is handled on
 * the next pass. */
static void *dispatch_main(void *arg) {
    gpu_exec *g = (gpu_exec *)arg;
    char err[256];
    uint32_t *last = (uint32_t *)calloc(g->n_jobs, sizeof(uint32_t));
    while (!g->stop) {
        for (int h = 0; h < g->n_jobs; h++) {
            hjob *j = &g->jobs[h];
            uint32_t v;
            g->disp_h = h; g->disp_phase = 0; g->disp_last = last[h];
            while ((v = j->req) == last[h]) {
                if (g->stop) { free(last); return NULL; }
                cpu_relax();
            }
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            last[h] = v;
            g->disp_last = v;
            if (j->n <= 0) continue;   /* the GPU does not wait for an empty job */
            g->disp_phase = 1;
            workers_job wj = make_job(g, h, v);
            if (workers_submit(g->pool, &wj, err, sizeof err) < 0) {
                if (j->req != v) continue;   /* torn by the next step's request: handled on the next pass */
                job_failed(g, h, v, err);
            }
        }
    }
    free(last);
    return NULL;
}

extern "C" void gpu_exec_cpu_stats(gpu_exec *g, uint64_t *bytes, double *busy_s, int reset) {
    *bytes = 0; *busy_s = 0;
    if (!g->pool) return;
    workers_counters c;
    workers_stats(g->pool, &c, reset);
    *bytes = c.bytes; *busy_s = c.busy_s;
}

int hybrid_start(gpu_exec *g, int n_threads, int first_core, char *err, size_t errlen) {
    workers_config wc = { n_threads, -1, 1, 5000, first_core };   /* workers spin 5 ms between layers before sleeping */
    g->pool = workers_init(&wc, err, errlen);
    if (!g->pool) return -1;
    if (g->hostfn) {   /* the graph's host nodes hand the jobs over: no dispatcher */
        g->hf_args = (struct gpu_exec::hostfn_arg *)calloc(g->n_jobs, sizeof *g->hf_args);
        for (int h = 0; h < g->n_jobs; h++) { g->hf_args[h].g = g; g->hf_args[h].h = h; }
        if (cudaStreamCreateWithFlags(&g->side3, cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreateWithFlags(&g->hf_fork, cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&g->hf_join, cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            snprintf(err, errlen, "cpu workers: cannot create the host-function stream");
            return -1;
        }
        return 0;
    }
    pthread_t *t = (pthread_t *)malloc(sizeof(pthread_t));
    g->stop = 0;
    if (pthread_create(t, NULL, dispatch_main, g)) {
        free(t);
        snprintf(err, errlen, "cpu workers: cannot start the dispatcher thread");
        return -1;
    }
    g->dispatcher = t;
    return 0;
}

void hybrid_stop(gpu_exec *g) {
    if (g->side3) { cudaStreamDestroy(g->side3); g->side3 = NULL; }
    if (g->hf_fork) { cudaEventDestroy(g->hf_fork); g->hf_fork = NULL; }
    if (g->hf_join) { cudaEventDestroy(g->hf_join); g->hf_join = NULL; }
    free(g->hf_args); g->hf_args = NULL;
    if (g->dispatcher) {
        g->stop = 1;
        pthread_join(*(pthread_t *)g->dispatcher, NULL);
        free(g->dispatcher);
        g->dispatcher = NULL;
    }
    workers_free(g->pool);
    g->pool = NULL;
}
