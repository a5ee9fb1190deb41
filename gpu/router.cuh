/* router.cuh - the MoE router's top-k on the GPU, exactly as cpu/router.c: softmax (sum in index
 * order on one lane, as the CPU does) or sigmoid, the selection-only bias, group-limited routing,
 * norm and scale. One block does one token; the decode step (ops.cu) and the batched prefill
 * (prefill_ops.cu, one block per token) both call router_topk. */
#ifndef HM_ROUTER_CUH
#define HM_ROUTER_CUH
#include <math.h>

#define ROUTER_MAX 4096

/* index of the largest v[i] among i in [0, n) with used[i] == 0; ties -> lowest index. One warp. */
static __device__ int warp_argmax(const float *v, const unsigned char *used, int n) {
    int lane = threadIdx.x & 31, bi = -1;
    float bv = -INFINITY;
    for (int i = lane; i < n; i += 32)
        if (!used[i] && (bi < 0 || v[i] > bv)) { bv = v[i]; bi = i; }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) { bv = ov; bi = oi; }
    }
    return bi;
}

/* threads for one token's router_topk: one per expert, whole warps, at most 1024 */
static inline int router_threads(int n) { return n <= 32 ? 32 : n >= 1024 ? 1024 : (n + 31) / 32 * 32; }
/* the decode step's: four per expert up to 256 experts (router_topk then counts a rank in a
 * quarter of the time) */
static inline int router_threads4(int n) { return n <= 256 ? router_threads(4 * n) : router_threads(n); }

/* isel[r], wsel[r] = the expert of rank r < k in choice's order (larger first, ties to the lower
 * index) and its score. P threads of a warp count one expert's rank, each over a P-th of the
 * choices (P = 4 when the block has 4 threads an expert, router_threads4, 2 when 2); rounds block-uniform:
 * the shuffles need whole warps. P a constant: no divisions in the loop. */
template <int P>
static __device__ void router_rank(const float *choice, const float *score, int n, int k, int *isel, float *wsel) {
    const int tid = threadIdx.x, q = tid % P, j0 = q * n / P, j1 = (q + 1) * n / P;
    for (int i0 = 0; i0 < n; i0 += blockDim.x / P) {
        const int i = i0 + tid / P;
        int r = 0;
        if (i < n) {
            const float c = choice[i];
            for (int j = j0; j < j1; j++) {
                const float cj = choice[j];
                r += cj > c || (cj == c && j < i);
            }
        }
        if (P > 1) r += __shfl_xor_sync(0xffffffffu, r, 1);
        if (P > 2) r += __shfl_xor_sync(0xffffffffu, r, 2);
        if (i < n && q == 0 && r < k) { isel[r] = i; wsel[r] = score[i]; }
    }
}

/* logits[n] -> ids[k], w[k] for one token; called by every thread of a block (blockDim.x a
 * multiple of 32, router_threads(n) is best). The selection is the CPU's: the k largest choices,
 * ties to the lower index. Each expert's rank in that order is counted at once (no k rounds of
 * arg-max); group-limited routing, and choices with a NaN (whose order the rank count would not
 * reproduce), take the k rounds of warp_argmax on warp 0 instead. */
template <int NMAX>   /* n <= NMAX <= ROUTER_MAX: the size of its shared arrays */
static __device__ void router_topk(const float *logits, const float *bias, int n, int k, int fn, int norm, float scale,
                                   int n_group, int topk_group, int *ids, float *w) {
    __shared__ float score[NMAX], choice[NMAX], gscore[64], red[32];
    __shared__ unsigned char used[NMAX], gused[64];
    __shared__ float total;
    const int tid = threadIdx.x, lane = tid & 31, nt = blockDim.x;
    if (fn == 2) {
        for (int i = tid; i < n; i += nt) score[i] = 1.0f / (1.0f + expf(-logits[i]));
    } else {
        float mx = -INFINITY;
        for (int i = tid; i < n; i += nt) mx = fmaxf(mx, logits[i]);
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        if (lane == 0) red[tid >> 5] = mx;
        __syncthreads();
        mx = red[0];
        for (int i = 1; i < nt / 32; i++) mx = fmaxf(mx, red[i]);
        /* sum in index order on one thread, as the CPU does, so both round alike */
        for (int i = tid; i < n; i += nt) score[i] = expf(logits[i] - mx);
        __syncthreads();
        if (tid == 0) { float s = 0; for (int i = 0; i < n; i++) s += score[i]; total = s; }
        __syncthreads();
        for (int i = tid; i < n; i += nt) score[i] /= total;
    }
    int nan = 0;
    for (int i = tid; i < n; i += nt) {
        choice[i] = score[i] + (bias ? bias[i] : 0.0f);
        used[i] = 0;
        nan |= choice[i] != choice[i];
    }
    const int has_nan = __syncthreads_or(nan);
    const bool grouped = n_group > 1 && topk_group < n_group;
    if (grouped && tid == 0) {
        int gs = n / n_group;
        for (int g = 0; g < n_group; g++) {
            /* sum of the group's two best, picked as the CPU's topk does */
            int b0 = -1, b1 = -1;
            for (int i = 0; i < gs; i++) {
                float v = choice[g * gs + i];
                if (b0 < 0 || v > choice[g * gs + b0]) { b1 = b0; b0 = i; }
                else if (b1 < 0 || v > choice[g * gs + b1]) b1 = i;
            }
            gscore[g] = choice[g * gs + b0] + (gs > 1 ? choice[g * gs + b1] : 0.0f);
            gused[g] = 0;
        }
        for (int j = 0; j < topk_group; j++) {
            int b = -1;
            for (int g = 0; g < n_group; g++) if (!gused[g] && (b < 0 || gscore[g] > gscore[b])) b = g;
            gused[b] = 1;
        }
        for (int g = 0; g < n_group; g++)
            if (!gused[g]) for (int i = 0; i < gs; i++) choice[g * gs + i] = -INFINITY;
    }
    __syncthreads();
    __shared__ float wsel[64];
    __shared__ int isel[64];
    if (!grouped && !has_nan) {   /* block-uniform */
        if (nt >= 4 * n) router_rank<4>(choice, score, n, k, isel, wsel);
        else if (nt >= 2 * n) router_rank<2>(choice, score, n, k, isel, wsel);   /* 128 experts in a GEMV block of 256 */
        else router_rank<1>(choice, score, n, k, isel, wsel);
    } else if (tid < 32) {
        for (int j = 0; j < k; j++) {
            int b = warp_argmax(choice, used, n);
            if (lane == 0) { used[b] = 1; isel[j] = b; wsel[j] = score[b]; }
            __syncwarp();
        }
    }
    __syncthreads();
    if (tid == 0) {
        float sum = 0;
        for (int j = 0; j < k; j++) sum += wsel[j];
        float den = fn == 2 ? sum + 1e-20f : sum;
        for (int j = 0; j < k; j++) {
            float x = wsel[j];
            if (norm) x /= den;
            ids[j] = isel[j];
            w[j] = x * scale;
        }
    }
}

#endif
