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
 * sits on the step's path other than these two flags; the graph is launched as usual. */
#include "exec_impl.cuh"
extern "C" {
#include "workers.h"
}
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

__global__ void k_hybrid_wait(const hjob *job, const int *step, float *y_row, float *w1, int n) {
    __shared__ int have;
    if (threadIdx.x == 0) {
        const uint32_t want = (uint32_t)*step;
        have = *(const volatile int *)&job->n > 0;
        if (have) {
            /* a dead dispatcher must not hang the GPU for ever: give up after ~30 s */
            long long t0 = clock64();
            while (job->done != want) {
                __nanosleep(256);
                if (clock64() - t0 > 60000000000LL) { have = -1; break; }
            }
            __threadfence_system();
        }
        *w1 = 1.0f;
    }
    __syncthreads();
    const volatile float *out = job->dout;
    for (int i = threadIdx.x; i < n; i += blockDim.x) y_row[i] = have > 0 ? out[i] : have < 0 ? __int_as_float(0x7fc00000) : 0.0f;
}

void hybrid_wait(const dcache *c, float *y_row, float *w1, int n_embd, cudaStream_t s) {
    k_hybrid_wait<<<1, 1024, 0, s>>>(c->job, c->step, y_row, w1, n_embd);
}

static void cpu_relax(void) { __builtin_ia32_pause(); }

/* The dispatcher: jobs in layer order, one step after another (steps are numbered from 1 by
 * gpu_exec_forward). */
static void *dispatch_main(void *arg) {
    gpu_exec *g = (gpu_exec *)arg;
    const hm_config *c = &g->m->cfg;
    char err[256];
    for (uint32_t step = 1; !g->stop; step++) {
        for (int h = 0; h < g->n_jobs; h++) {
            hjob *j = &g->jobs[h];
            while (j->req != step) {
                if (g->stop) return NULL;
                cpu_relax();
            }
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (j->n <= 0) continue;   /* the GPU does not wait for an empty job */
            const int l = g->jobs_layer[h];
            workers_job wj;
            memset(&wj, 0, sizeof wj);
            wj.layer = l; wj.n_tok = 1; wj.n_embd = c->n_embd; wj.x = j->x; wj.k = HJOB_MAX_K;
            wj.n_cold = &j->n; wj.ids = j->ids; wj.w = j->w;
            wj.experts = g->cpu_experts + (size_t)l * c->n_expert; wj.n_expert = c->n_expert;
            wj.out = j->out; wj.flag = (uint32_t *)&j->done; wj.flag_value = step;
            if (workers_submit(g->pool, &wj, err, sizeof err) < 0) {
                fprintf(stderr, "hotmoe: cpu workers: %s\n", err);
                for (int i = 0; i < c->n_embd; i++) j->out[i] = __builtin_nanf("");
                __atomic_store_n(&j->done, step, __ATOMIC_RELEASE);
            }
        }
    }
    return NULL;
}

int hybrid_start(gpu_exec *g, int n_threads, char *err, size_t errlen) {
    workers_config wc = { n_threads, -1, 1, 5000 };   /* workers spin 5 ms between layers before sleeping */
    g->pool = workers_init(&wc, err, errlen);
    if (!g->pool) return -1;
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
    if (g->dispatcher) {
        g->stop = 1;
        pthread_join(*(pthread_t *)g->dispatcher, NULL);
        free(g->dispatcher);
        g->dispatcher = NULL;
    }
    workers_free(g->pool);
    g->pool = NULL;
}
