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

/* A choice as an unsigned key in the same order (no NaNs): -0 as +0, negatives below positives */
static __device__ __forceinline__ unsigned router_key(float c) {
    unsigned b = __float_as_uint(c);
    if (b == 0x80000000u) b = 0u;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* r += a > b, as a predicated add (C's r += (a > b) becomes an add and a predicated move) */
static __device__ __forceinline__ void rank_count(int &r, unsigned long long a, unsigned long long b) {
#ifdef __CUDA_ARCH__
    asm("{\n\t.reg .pred p;\n\tsetp.gt.u64 p, %1, %2;\n\t@p add.s32 %0, %0, 1;\n\t}" : "+r"(r) : "l"(a), "l"(b));
#else   /* the host's compile: tests/test_router_emu.cc runs the ranks on the CPU */
    r += a > b;
#endif
}

/* router_rank on keys (router_key of the choices; no NaNs), n % (4 P) == 0: the same ranks. The
 * order "larger first, ties to the lower index" is that of the 64-bit (key << 32 | lo(j)) with lo
 * decreasing in j; each thread counts over its quarter/half of the keys, four at a time (one
 * 16-byte load), the low words compared against constants: lo(j0 + 4c + t) = 2^31 - 4c - t >
 * lo(i) = 2^31 - (i - j0) <=> j < i, tracked as li = lo(i) + 4c. Two compares and an add a key
 * (router_rank: ~10 instructions a choice). */
template <int P>
static __device__ void router_rank_key(const unsigned *key, const float *score, int n, int k, int *isel, float *wsel) {
    const int tid = threadIdx.x, q = tid % P, len = n / P, j0 = q * len;
    const uint4 *kp = (const uint4 *)(key + j0);
    for (int i0 = 0; i0 < n; i0 += blockDim.x / P) {
        const int i = i0 + tid / P;
        int r = 0;
        if (i < n) {
            const unsigned long long hi = (unsigned long long)key[i] << 32;
            unsigned li = 0x80000000u - (unsigned)(i - j0);
#pragma unroll 4
            for (int c = 0; c < len / 4; c++, li += 4u) {
                const uint4 v = kp[c];
                const unsigned long long ki = hi | li;
                rank_count(r, ((unsigned long long)v.x << 32) | 0x80000000u, ki);
                rank_count(r, ((unsigned long long)v.y << 32) | 0x7FFFFFFFu, ki);
                rank_count(r, ((unsigned long long)v.z << 32) | 0x7FFFFFFEu, ki);
                rank_count(r, ((unsigned long long)v.w << 32) | 0x7FFFFFFDu, ki);
            }
        }
        if (P > 1) r += __shfl_xor_sync(0xffffffffu, r, 1);
        if (P > 2) r += __shfl_xor_sync(0xffffffffu, r, 2);
        if (i < n && q == 0 && r < k) { isel[r] = i; wsel[r] = score[i]; }
    }
}

/* logits[n] -> the k chosen experts of one token in rank order, *isel (ids) and *wsel (their
 * scores) in shared memory, complete for every thread when it returns; called by every thread of a
 * block (blockDim.x a multiple of 32, router_threads(n) is best). The selection is the CPU's: the
 * k largest choices, ties to the lower index. Each expert's rank in that order is counted at once
 * (no k rounds of arg-max; on keys, router_rank_key, where the sizes allow); group-limited
 * routing, and choices with a NaN (whose order the rank count would not reproduce), take the k
 * rounds of warp_argmax on warp 0 instead. */
template <int NMAX>   /* n <= NMAX <= ROUTER_MAX: the size of its shared arrays */
static __device__ void router_select(const float *logits, const float *bias, int n, int k, int fn, int n_group, int topk_group,
                                     const int **isel_out, const float **wsel_out, bool bias_early = false) {
    __shared__ float score[NMAX], choice[NMAX], gscore[64], red[32];
    __shared__ unsigned char used[NMAX], gused[64];
    __shared__ float total;
    constexpr bool KEYED = NMAX <= 1024;   /* router_rank_key's keys beside the choices (ROUTER_MAX: no room) */
    __shared__ __align__(16) unsigned ckey[KEYED ? NMAX : 4];
    const int tid = threadIdx.x, lane = tid & 31, nt = blockDim.x;
    int nan = 0;
    /* bias_early (sigmoid only): each choice made in the score's loop, the bias loaded with the
     * logit, so that its load does not wait for the score's store (a generic load may alias shared
     * memory: the compiler keeps it after the store); the same values */
    const bool fused = fn == 2 && bias_early;
    if (fused) {
        for (int i = tid; i < n; i += nt) {
            const float l = logits[i], b = bias ? bias[i] : 0.0f;
            const float sc = 1.0f / (1.0f + expf(-l)), c = sc + b;
            score[i] = sc;
            choice[i] = c;
            if (KEYED) ckey[i] = router_key(c);
            used[i] = 0;
            nan |= c != c;
        }
    } else if (fn == 2) {
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
    for (int i = fused ? n : tid; i < n; i += nt) {
        const float c = score[i] + (bias ? bias[i] : 0.0f);
        choice[i] = c;
        if (KEYED) ckey[i] = router_key(c);
        used[i] = 0;
        nan |= c != c;
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
    if (grouped) __syncthreads();   /* block-uniform; else __syncthreads_or above ordered the choices */
    __shared__ float wsel[64];
    __shared__ int isel[64];
    if (!grouped && !has_nan) {   /* block-uniform */
        if (nt >= 4 * n) {
            if (KEYED && n % 16 == 0) router_rank_key<4>(ckey, score, n, k, isel, wsel);
            else router_rank<4>(choice, score, n, k, isel, wsel);
        } else if (nt >= 2 * n) {   /* 128 experts in a GEMV block of 256 */
            if (KEYED && n % 8 == 0) router_rank_key<2>(ckey, score, n, k, isel, wsel);
            else router_rank<2>(choice, score, n, k, isel, wsel);
        } else {
            if (KEYED && n % 4 == 0) router_rank_key<1>(ckey, score, n, k, isel, wsel);
            else router_rank<1>(choice, score, n, k, isel, wsel);
        }
    } else if (tid < 32) {
        for (int j = 0; j < k; j++) {
            int b = warp_argmax(choice, used, n);
            if (lane == 0) { used[b] = 1; isel[j] = b; wsel[j] = score[b]; }
            __syncwarp();
        }
    }
    __syncthreads();
    *isel_out = isel;
    *wsel_out = wsel;
}

/* One thread: the chosen experts' weights from their scores wsel[k] (rank order): their sum,
 * norm and scale (the CPU's order), with their ids isel[] to ids[], w[] */
static __device__ __forceinline__ void router_weights(const int *isel, const float *wsel, int k, int fn, int norm, float scale, int *ids,
                                                      float *w) {
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

/* logits[n] -> ids[k], w[k] for one token (router_select, then thread 0 the weights); every thread of a block */
template <int NMAX>
static __device__ void router_topk(const float *logits, const float *bias, int n, int k, int fn, int norm, float scale,
                                   int n_group, int topk_group, int *ids, float *w) {
    const int *isel;
    const float *wsel;
    router_select<NMAX>(logits, bias, n, k, fn, n_group, topk_group, &isel, &wsel);
    if (threadIdx.x == 0) router_weights(isel, wsel, k, fn, norm, scale, ids, w);
}

#endif
