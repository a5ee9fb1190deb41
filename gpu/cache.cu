/* cache.cu - the on-GPU expert cache of --cold stream (dcache in exec_impl.cuh), device side.
 *
 * Per MoE layer and decode step, right after the router wrote ids[k], two launches recorded in the
 * step's graph:
 *   k_cache_update (one block): decays every expert's LFU score and adds 1 to the chosen ones;
 *     for each chosen expert that is not in VRAM, picks the LFU slot with the lowest score whose
 *     owner is not chosen by this token (an empty slot first; ties: the lowest slot), points the
 *     evicted expert's table entries back at its host record and the new one's at the slot, and
 *     appends (host record -> slot) to the layer's copy list. With no slot to give (0 slots, or
 *     every slot held by this token's experts) the expert is read in place from pinned host RAM
 *     through its table entry, which always points at a valid copy.
 *   k_cache_copy (many blocks): copies the listed records over PCIe (reads of mapped host
 *     memory, 16-byte words, several loads in flight per thread); nothing to do: blocks exit.
 * --cold cpu (hybrid.cu): misses beyond --swap-max go to the CPU workers while the swap-ins are
 * copied (and then served from VRAM in the same step); with --swap-async a swap-in is computed by
 * the CPU too and copied on a side stream (c->async) that the step joins at its end, so the copy
 * overlaps the rest of the step and the slot serves from the next step on.
 * --overlap-misses: the copies go to a side stream and the copied misses' slots of ids become -1
 * (listed in ids_miss), so the hits' GEMVs run beside the copies and the misses' after the join.
 * --prefetch: k_cache_prefetch installs the experts that the next layer's router predicts from
 * this layer's input into that layer's slots, copied on a side stream that the layer waits for.
 * The expert GEMVs that follow read weights through the tables, so the logits are those of the
 * all-resident model bit for bit: the same bytes, the same kernels. Hit and miss counters stay on
 * the device; the host reads them between runs (gpu_exec_cache_stats). */
#include "exec_impl.cuh"
#include "launch.cuh"
#include <math.h>

#define CACHE_THREADS 256
#define COPY_BLOCKS 1056   /* 8 per SM of an H100/H200 */
#define COPY_UNROLL 4
#define ASYNC_COPY_BLOCKS 64  /* a side-stream copy leaves the SMs to the step (64 x 256 x 64 B in flight is plenty for PCIe) */

/* The LFU slot for a miss, by the whole block: the lowest score among the slots whose owner is
 * not one of sid[0..k) (an empty slot first; ties: the lowest slot); -1 when there is none. */
__device__ int pick_victim(const dcache &c, const int *sid, int k) {
    __shared__ float wkey[CACHE_THREADS / 32];
    __shared__ int widx[CACHE_THREADS / 32], victim;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, R = c.n_static + c.n_slots;
    float best = INFINITY; int bi = -1;
    for (int r = c.n_static + tid; r < R; r += blockDim.x) {
        const int o = c.owner[r];
        float key = -INFINITY;
        if (o >= 0) {
            bool cur = false;
            for (int jj = 0; jj < k; jj++) cur |= sid[jj] == o;
            if (cur) continue;
            key = c.score[o];
        }
        if (bi < 0 || key < best) { best = key; bi = r; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ok = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || ok < best || (ok == best && oi < bi))) { best = ok; bi = oi; }
    }
    if (lane == 0) { wkey[warp] = best; widx[warp] = bi; }
    __syncthreads();
    if (tid == 0) {
        float b = INFINITY; int vv = -1;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
            if (widx[w] >= 0 && (vv < 0 || wkey[w] < b || (wkey[w] == b && widx[w] < vv))) { b = wkey[w]; vv = widx[w]; }
        victim = vv;
    }
    __syncthreads();
    const int v = victim;
    __syncthreads();   /* every thread has read it before a later call writes it */
    return v;
}

/* Expert e into record v (one thread): the evicted owner's tables back at its host record, e's at
 * the slot, and the copy (host record -> slot) as entry n of the layer's copy list. */
__device__ void install(const dcache &c, int v, int e, const void **tg, const void **tu, const void **td, int n) {
    const int old = c.owner[v];
    if (old >= 0) {
        const uint8_t *h = c.host + (size_t)c.hidx[old] * c.stride;
        c.slot_of[old] = -1;
        tg[old] = h; tu[old] = h + c.off_up; td[old] = h + c.off_down;
    }
    uint8_t *d = c.dev + (size_t)v * c.stride;
    c.owner[v] = e; c.slot_of[e] = v;
    tg[e] = d; tu[e] = d + c.off_up; td[e] = d + c.off_down;
    c.miss_src[n] = c.host + (size_t)c.hidx[e] * c.stride;
    c.miss_dst[n] = d;
}

/* ids: nt tokens' choices, kt each (k = nt * kt <= 64; a decode step: nt 1). --cold cpu: token t's
 * CPU experts take their weights from w[t * wstride + j] and its x from xn + t * n_embd. */
__global__ void __launch_bounds__(CACHE_THREADS) k_cache_update(const dcache c, int *ids, int nt, int kt, const float *xn,
                                                                const float *w, int wstride, int overlap, float decay,
                                                                const void **tg, const void **tu, const void **td) {
    __shared__ int sid[64], nmiss, ncpu[HJOB_MAX_T];
    const int tid = threadIdx.x, k = nt * kt;
    int *ids_miss = overlap ? c.ids_miss : NULL;
    if (tid < k) sid[tid] = ids[tid];
    if (tid < k && ids_miss) ids_miss[tid] = -1;
    if (tid < HJOB_MAX_T) ncpu[tid] = 0;
    if (tid == 0) nmiss = 0;
    __syncthreads();
    for (int e = tid; e < c.n_expert; e += blockDim.x) {
        float add = 0.f;
        for (int j = 0; j < k; j++) add = sid[j] == e ? 1.f : add;
        c.score[e] = c.score[e] * decay + add;
    }
    __syncthreads();
    unsigned long long hits = 0, copied = 0, direct = 0, oncpu = 0;
    for (int j = 0; j < k; j++) {
        const int e = sid[j], t = j / kt;
        if (e < 0 || e >= c.n_expert) continue;          /* never produced by the router */
        if (c.slot_of[e] >= 0) { hits++; continue; }      /* the same value in every thread */
        int v = -1;
        if (c.copy_max < 0 || copied < (unsigned long long)c.copy_max) v = pick_victim(c, sid, k);
        if (tid == 0) {
            if (v >= 0) {
                install(c, v, e, tg, tu, td, nmiss++);
                if (ids_miss && !(c.cpu && c.async)) { ids_miss[j] = e; ids[j] = -1; }   /* computed after its copy */
            }
            if (c.cpu && (v < 0 || c.async)) {   /* the workers compute it; the GPU runs the zero record */
                c.job->ids[t][ncpu[t]] = e;
                c.job->w[t][ncpu[t]] = w[t * wstride + j - t * kt];
                ncpu[t]++;
                ids[j] = c.n_expert;
            }
        }
        if (v >= 0) copied++;
        if (c.cpu && (v < 0 || c.async)) oncpu++; else if (v < 0) direct++;
        __syncthreads();   /* owners, slot_of and victim settle before the next miss */
    }
    if (c.cpu) {
        hjob *jb = c.job;
        float *dx = jb->dx;
        for (int i = tid; i < nt * c.n_embd; i += blockDim.x) dx[i] = xn[i];
        __syncthreads();
        if (tid == 0) {
            int n = 0;
            for (int t = 0; t < nt; t++) { jb->nt[t] = ncpu[t]; n += ncpu[t]; }
            jb->n_tok = nt;
            jb->n = n;
            __threadfence_system();
            jb->req = (uint32_t)*c.step;
        }
    }
    if (tid == 0) {
        *c.miss_n = nmiss;
        c.stats[0] += hits; c.stats[1] += copied; c.stats[2] += direct; c.stats[3] += oncpu;
    }
}

/* --prefetch: the experts pids[0..k) that the next layer's router predicts (from this layer's FFN
 * input) into that layer's slots ahead of its own routing: victims as for a miss (the predicted
 * experts are kept), no score or counter of the routing touched; the copies are listed for a copy
 * kernel on a side stream that the layer waits for before its own update. stats[4] counts them. */
__global__ void __launch_bounds__(CACHE_THREADS) k_cache_prefetch(const dcache c, const int *pids, int k, const void **tg,
                                                                  const void **tu, const void **td) {
    __shared__ int sid[64], n;
    const int tid = threadIdx.x;
    if (tid < k) sid[tid] = pids[tid];
    if (tid == 0) n = 0;
    __syncthreads();
    for (int j = 0; j < k; j++) {
        const int e = sid[j];
        if (e < 0 || e >= c.n_expert || c.slot_of[e] >= 0) continue;   /* the same value in every thread */
        const int v = pick_victim(c, sid, k);
        if (v < 0) break;
        if (tid == 0) install(c, v, e, tg, tu, td, n++);
        __syncthreads();   /* owners and slot_of settle before the next one */
    }
    if (tid == 0) { *c.miss_n = n; c.stats[4] += n; }
}

__global__ void __launch_bounds__(CACHE_THREADS) k_cache_copy(const uint8_t *const *src, uint8_t *const *dst,
                                                              const int *n, size_t stride) {
    const int nm = *n;
    if (!nm) return;
    const size_t words = stride / 16, total = (size_t)nm * words, G = (size_t)gridDim.x * blockDim.x;
    for (size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i0 < total; i0 += G * COPY_UNROLL) {
        uint4 v[COPY_UNROLL];
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; u++) {
            const size_t i = i0 + u * G;
            if (i < total) v[u] = ((const uint4 *)src[i / words])[i % words];
        }
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; u++) {
            const size_t i = i0 + u * G;
            if (i < total) ((uint4 *)dst[i / words])[i % words] = v[u];
        }
    }
}

/* The layer's listed copies on `side`, forked from s after what s has recorded so far (join: NULL,
 * or recorded after the copies for the caller to wait on). Few blocks: PCIe is saturated by 64 x
 * 256 threads with 64 B each in flight; the rest of the SMs go on with the step meanwhile. */
static void copy_beside(const dcache *c, cudaStream_t s, cudaStream_t side, cudaEvent_t fork, cudaEvent_t join) {
    cudaEventRecord(fork, s);
    cudaStreamWaitEvent(side, fork, 0);
    hm_launch_pdl(k_cache_copy, ASYNC_COPY_BLOCKS, CACHE_THREADS, 0, side, 0, c->miss_src, c->miss_dst, c->miss_n, c->stride);
    if (join) cudaEventRecord(join, side);
}

void cache_record_step_batch(const dcache *c, int *ids, int nt, int kt, const float *xn, float *w, int wstride, float decay,
                             const dexperts *tab, cudaStream_t s, cudaStream_t side, cudaEvent_t fork) {
    hm_launch_pdl(k_cache_update, 1, CACHE_THREADS, 0, s, 0, *c, ids, nt, kt, xn, w, wstride, 0, decay, tab->gate, tab->up, tab->down);
    if (c->async) copy_beside(c, s, side, fork, NULL);   /* swap-ins beside the rest of the step (joined at its end) */
    else hm_launch_pdl(k_cache_copy, COPY_BLOCKS, CACHE_THREADS, 0, s, 0, c->miss_src, c->miss_dst, c->miss_n, c->stride);
}

void cache_record_step(const dcache *c, int *ids, int k, float decay, const dexperts *tab, cudaStream_t s, cudaStream_t side,
                       cudaEvent_t fork) {
    cache_record_step_batch(c, ids, 1, k, c->xn, c->w, 0, decay, tab, s, side, fork);
}

void cache_record_step_overlap(const dcache *c, int *ids, int k, float decay, const dexperts *tab, cudaStream_t s,
                               cudaStream_t side, cudaEvent_t fork, cudaEvent_t join) {
    hm_launch_pdl(k_cache_update, 1, CACHE_THREADS, 0, s, 0, *c, ids, 1, k, c->xn, c->w, 0, 1, decay, tab->gate, tab->up, tab->down);
    copy_beside(c, s, side, fork, join);   /* the hits' GEMVs meanwhile */
}

void cache_record_prefetch(const dcache *c, const int *pids, int k, const dexperts *tab, cudaStream_t s, cudaStream_t side,
                           cudaEvent_t fork, cudaEvent_t join) {
    hm_launch_pdl(k_cache_prefetch, 1, CACHE_THREADS, 0, s, 0, *c, pids, k, tab->gate, tab->up, tab->down);
    copy_beside(c, s, side, fork, join);
}

__global__ void k_route_replay(const float *logits, int n, int k, int fn, int norm, float scale, const int *forced,
                               int *ids, float *w) {
    if (threadIdx.x || forced[0] < 0) return;
    float mx = logits[0], sum = 0.f, tot = 0.f;
    if (fn != 2) {
        for (int i = 1; i < n; i++) if (logits[i] > mx) mx = logits[i];
        for (int i = 0; i < n; i++) sum += expf(logits[i] - mx);
    }
    for (int j = 0; j < k; j++) {
        const int e = forced[j];
        const float l = logits[e];
        ids[j] = e;
        w[j] = fn == 2 ? 1.0f / (1.0f + expf(-l)) : expf(l - mx) / sum;
        tot += w[j];
    }
    if (norm) {
        const float den = fn == 2 ? tot + 1e-20f : tot;
        for (int j = 0; j < k; j++) w[j] /= den;
    }
    for (int j = 0; j < k; j++) w[j] *= scale;
}

void route_replay(const float *logits, int n, int k, int fn, int norm, float scale, const int *forced, int *ids, float *w,
                  cudaStream_t s) {
    hm_launch_pdl(k_route_replay, 1, 32, 0, s, 0, logits, n, k, fn, norm, scale, forced, ids, w);
}

/* Copies n records of `bytes` (a multiple of 256) host -> device with the cache's copy kernel and
 * returns GB/s (bench: the PCIe rate the copy kernel reaches, beside cudaMemcpyAsync's). */
extern "C" double gpu_cache_copy_rate(int n, size_t bytes, int reps) {
    uint8_t *h = NULL, *d = NULL; const uint8_t **src = NULL; uint8_t **dst = NULL; int *dn = NULL;
    double gbs = -1;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    if (cudaHostAlloc(&h, n * bytes, cudaHostAllocMapped) != cudaSuccess || cudaMalloc(&d, n * bytes) != cudaSuccess ||
        cudaMalloc(&src, n * sizeof(void *)) != cudaSuccess || cudaMalloc(&dst, n * sizeof(void *)) != cudaSuccess ||
        cudaMalloc(&dn, sizeof(int)) != cudaSuccess) {
        cudaGetLastError();
        goto done;
    }
    {
        memset(h, 1, n * bytes);
        const uint8_t **hs = (const uint8_t **)malloc(n * sizeof(void *)); uint8_t **hd = (uint8_t **)malloc(n * sizeof(void *));
        uint8_t *hdev = NULL;
        cudaHostGetDevicePointer((void **)&hdev, h, 0);
        for (int i = 0; i < n; i++) { hs[i] = hdev + (size_t)i * bytes; hd[i] = d + (size_t)i * bytes; }
        cudaMemcpy(src, hs, n * sizeof(void *), cudaMemcpyHostToDevice);
        cudaMemcpy(dst, hd, n * sizeof(void *), cudaMemcpyHostToDevice);
        cudaMemcpy(dn, &n, sizeof(int), cudaMemcpyHostToDevice);
        free(hs); free(hd);
        k_cache_copy<<<COPY_BLOCKS, CACHE_THREADS>>>(src, dst, dn, bytes);   /* warm-up */
        cudaEventRecord(e0);
        for (int r = 0; r < reps; r++) k_cache_copy<<<COPY_BLOCKS, CACHE_THREADS>>>(src, dst, dn, bytes);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (cudaGetLastError() == cudaSuccess && ms > 0) gbs = (double)n * bytes * reps / (ms * 1e-3) / 1e9;
    }
done:
    cudaFreeHost(h); cudaFree(d); cudaFree(src); cudaFree(dst); cudaFree(dn);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    return gbs;
}
