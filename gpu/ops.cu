/* ops.cu - small ops of the forward pass. The math mirrors cpu/kernels.c, cpu/forward.c and
 * cpu/router.c so that GPU and CPU agree to float rounding. */
#include "ops.cuh"
#include <math.h>

static __device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* sum over a block of up to 1024 threads */
static __device__ float block_sum(float v) {
    __shared__ float red[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[wid] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    if (wid == 0) v = warp_sum(v);
    if (threadIdx.x == 0) red[0] = v;
    __syncthreads();
    return red[0];
}

__global__ void k_rmsnorm(const float *x, const float *w, float *out, int n, float eps) {
    float ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
    ss = block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = w[i] * (x[i] * inv);
}

void op_rmsnorm(const float *x, const float *w, float *out, int n, float eps, cudaStream_t s) {
    k_rmsnorm<<<1, 1024, 0, s>>>(x, w, out, n, eps);
}

/* x += sum_j wt[j] * y[j] (+ shared), then out = rmsnorm(x) * w when w is given: the residual
 * update and the next norm in one launch (one block: the norm needs all of x). Same order of
 * additions as the CPU: the weighted sum first, then the shared part, then into x. */
__global__ void k_residual_norm(float *x, const float *y, const float *wt, int k, const float *shared, const float *w,
                                float *out, int n, float eps) {
    float ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float acc = 0;
        for (int j = 0; j < k; j++) acc += (wt ? wt[j] : 1.0f) * y[(size_t)j * n + i];
        if (shared) acc += shared[i];
        float v = x[i] + acc;
        x[i] = v;
        ss += v * v;
    }
    if (!w) return;
    ss = block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = w[i] * (x[i] * inv);
}

void op_residual_norm(float *x, const float *y, const float *wt, int k, const float *shared, const float *w, float *out,
                      int n, float eps, cudaStream_t s) {
    k_residual_norm<<<1, 1024, 0, s>>>(x, y, wt, k, shared, w, out, n, eps);
}

/* one block per head (q heads first, then kv heads); blockDim = hd rounded up to a warp */
__global__ void k_qkv_post(float *q, float *k, const float *v, const float *bq, const float *bk, const float *bv,
                           const float *qn, const float *kn, int n_head, int n_head_kv, int hd, int n_rot, float theta,
                           float eps, const int *pos_p, float *kcache, float *vcache) {
    __shared__ float buf[1024];
    int h = blockIdx.x, i = threadIdx.x, pos = *pos_p, on = i < hd;
    int is_q = h < n_head;
    int hh = is_q ? h : h - n_head;
    float *p = (is_q ? q : k) + hh * hd;
    const float *b = is_q ? bq : bk, *nw = is_q ? qn : kn;
    float x = on ? p[i] : 0.0f;
    if (b && on) x += b[hh * hd + i];
    if (nw) {
        float ss = block_sum(x * x);
        if (on) x = nw[i] * (x * (1.0f / sqrtf(ss / (float)hd + eps)));
    }
    buf[i] = x;
    __syncthreads();
    int half = n_rot / 2;
    if (i < n_rot) {
        int j = i < half ? i : i - half;
        float inv = 1.0f / powf(theta, (float)(2 * j) / (float)n_rot);
        float ang = (float)pos * inv, c = cosf(ang), sn = sinf(ang);
        float a = buf[j], bb = buf[j + half];
        x = i < half ? a * c - bb * sn : bb * c + a * sn;
    }
    if (!on) return;
    if (is_q) p[i] = x;
    else {
        size_t off = (size_t)pos * n_head_kv * hd + hh * hd + i;
        kcache[off] = x;
        float vv = v[hh * hd + i];
        if (bv) vv += bv[hh * hd + i];
        vcache[off] = vv;
    }
}

void op_qkv_post(float *q, float *k, const float *v, const float *bq, const float *bk, const float *bv,
                 const float *qn, const float *kn, int n_head, int n_head_kv, int hd, int n_rot, float theta,
                 float eps, const int *pos, float *kcache, float *vcache, cudaStream_t s) {
    k_qkv_post<<<n_head + n_head_kv, (hd + 31) / 32 * 32, 0, s>>>(q, k, v, bq, bk, bv, qn, kn, n_head, n_head_kv, hd, n_rot, theta, eps,
                                                 pos, kcache, vcache);
}

/* grid (n_head, n_split), 4 warps; each warp walks the block's chunk 4 positions at a time (four
 * independent loads in flight, then four reductions) with an online softmax; lanes hold hd/32 dims
 * each (hd <= 256). Partials: m, l, o[hd]. */
#define ATTN_WARPS 4
#define ATTN_ILP 4
__global__ void k_attn_part(const float *q, const float *kc, const float *vc, float *part, int n_head, int n_head_kv,
                            int hd, const int *pos_p) {
    int h = blockIdx.x, sp = blockIdx.y, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int pos = *pos_p, kvh = h / (n_head / n_head_kv), kvd = n_head_kv * hd, per = (hd + 31) / 32;
    int t0 = sp * HM_ATTN_CHUNK, t1 = min(t0 + HM_ATTN_CHUNK, pos + 1);
    float qv[8], o[8];
    for (int r = 0; r < per; r++) { int c = lane + 32 * r; qv[r] = c < hd ? q[h * hd + c] : 0.0f; o[r] = 0; }
    float m = -INFINITY, l = 0, scale = 1.0f / sqrtf((float)hd);
    for (int tb = t0 + wid * ATTN_ILP; tb < t1; tb += ATTN_WARPS * ATTN_ILP) {
        float d[ATTN_ILP];
#pragma unroll
        for (int u = 0; u < ATTN_ILP; u++) {
            d[u] = 0;
            int t = tb + u;
            if (t < t1) {
                const float *kr = kc + (size_t)t * kvd + kvh * hd;
                for (int r = 0; r < per; r++) if (lane + 32 * r < hd) d[u] += qv[r] * kr[lane + 32 * r];
            }
        }
#pragma unroll
        for (int u = 0; u < ATTN_ILP; u++) d[u] = warp_sum(d[u]) * scale;
#pragma unroll
        for (int u = 0; u < ATTN_ILP; u++) {
            int t = tb + u;
            if (t >= t1) break;
            const float *vr = vc + (size_t)t * kvd + kvh * hd;
            float mn = fmaxf(m, d[u]), c = expf(m - mn), e = expf(d[u] - mn);
            l = l * c + e;
            for (int r = 0; r < per; r++) o[r] = o[r] * c + (lane + 32 * r < hd ? e * vr[lane + 32 * r] : 0.0f);
            m = mn;
        }
    }
    __shared__ float sm[ATTN_WARPS], sl[ATTN_WARPS], so[ATTN_WARPS][256];
    if (lane == 0) { sm[wid] = m; sl[wid] = l; }
    for (int r = 0; r < per; r++) if (lane + 32 * r < 256) so[wid][lane + 32 * r] = o[r];
    __syncthreads();
    if (wid != 0) return;
    float M = -INFINITY;
    for (int w = 0; w < ATTN_WARPS; w++) M = fmaxf(M, sm[w]);
    float L = 0, acc[8] = { 0 };
    for (int w = 0; w < ATTN_WARPS; w++) {
        float c = sm[w] == -INFINITY ? 0.0f : expf(sm[w] - M);
        L += sl[w] * c;
        for (int r = 0; r < per; r++) if (lane + 32 * r < 256) acc[r] += so[w][lane + 32 * r] * c;
    }
    float *dst = part + ((size_t)h * gridDim.y + sp) * (hd + 2);
    if (lane == 0) { dst[0] = M; dst[1] = L; }
    for (int r = 0; r < per; r++) if (lane + 32 * r < hd) dst[2 + lane + 32 * r] = acc[r];
}

/* one block per head: merge the n_split partials */
__global__ void k_attn_combine(const float *part, float *out, int hd, int n_split) {
    int h = blockIdx.x;
    const float *p = part + (size_t)h * n_split * (hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, p[s * (hd + 2)]);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float L = 0, acc = 0;
        for (int s = 0; s < n_split; s++) {
            float m = p[s * (hd + 2)];
            if (m == -INFINITY) continue;
            float c = expf(m - M);
            L += p[s * (hd + 2) + 1] * c;
            acc += p[s * (hd + 2) + 2 + i] * c;
        }
        out[h * hd + i] = acc / L;
    }
}

void op_attn_decode(const float *q, const float *kcache, const float *vcache, float *out, float *part, int n_head,
                    int n_head_kv, int hd, int n_ctx, const int *pos, cudaStream_t s) {
    int n_split = (n_ctx + HM_ATTN_CHUNK - 1) / HM_ATTN_CHUNK;
    k_attn_part<<<dim3(n_head, n_split), 32 * ATTN_WARPS, 0, s>>>(q, kcache, vcache, part, n_head, n_head_kv, hd, pos);
    k_attn_combine<<<n_head, hd < 1024 ? hd : 1024, 0, s>>>(part, out, hd, n_split);
}


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

#define ROUTER_MAX 4096
__global__ void k_router(const float *logits, const float *bias, int n, int k, int fn, int norm, float scale,
                         int n_group, int topk_group, int *ids, float *w) {
    __shared__ float score[ROUTER_MAX], choice[ROUTER_MAX], gscore[64];
    __shared__ unsigned char used[ROUTER_MAX], gused[64];
    int lane = threadIdx.x;
    if (fn == 2) {
        for (int i = lane; i < n; i += 32) score[i] = 1.0f / (1.0f + expf(-logits[i]));
    } else {
        float mx = -INFINITY;
        for (int i = lane; i < n; i += 32) mx = fmaxf(mx, logits[i]);
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        /* sum in index order on one lane, as the CPU does, so both round alike */
        for (int i = lane; i < n; i += 32) score[i] = expf(logits[i] - mx);
        __syncwarp();
        __shared__ float total;
        if (lane == 0) { float s = 0; for (int i = 0; i < n; i++) s += score[i]; total = s; }
        __syncwarp();
        for (int i = lane; i < n; i += 32) score[i] /= total;
    }
    for (int i = lane; i < n; i += 32) { choice[i] = score[i] + (bias ? bias[i] : 0.0f); used[i] = 0; }
    __syncwarp();
    if (n_group > 1 && topk_group < n_group) {
        int gs = n / n_group;
        if (lane == 0) {
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
        __syncwarp();
    }
    __shared__ float wsel[64];
    __shared__ int isel[64];
    for (int j = 0; j < k; j++) {
        int b = warp_argmax(choice, used, n);
        if (lane == 0) { used[b] = 1; isel[j] = b; wsel[j] = score[b]; }
        __syncwarp();
    }
    if (lane == 0) {
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

void op_router(const float *logits, const float *bias, int n, int k, int fn, int norm, float scale, int n_group,
               int topk_group, int *ids, float *w, cudaStream_t s) {
    k_router<<<1, 32, 0, s>>>(logits, bias, n, k, fn, norm, scale, n_group, topk_group, ids, w);
}

