/* blockops.cuh - device pieces the decode step (ops.cu) and the batched prefill (prefill_ops.cu,
 * prefill_mma.cu) share: warp and block sums, 16-byte cp.async copies, and one head's q/k/v
 * post-processing (bias, per-head RMSNorm, NeoX RoPE on the first n_rot dims, K and V into the
 * cache), as cpu/forward.c does them. */
#ifndef HM_BLOCKOPS_CUH
#define HM_BLOCKOPS_CUH
#include <math.h>

/* 16 bytes global -> shared, asynchronously; zeros when !valid (nothing is read) */
static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
    unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    int sz = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gmem), "r"(sz));
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* sum over a block of up to 1024 threads; every thread calls it */
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

/* What one head's post needs besides q|k|v: its bias and norm weight at dim threadIdx.x (whether
 * the head has them: has_b, has_nw), a kv head's v bias there (bvv, 0 without one) and the RoPE
 * rotation at pos (weights and pos only, so a decode kernel reads them before hm_pdl_wait: the
 * biases are cold in L2 each step) */
struct qkv_pre { float b, nw, c, sn, bvv; bool has_b, has_nw; };
/* the NeoX rotation of dim i < n_rot at pos: *c, *sn (cos and sin of pos / theta^(2j / n_rot), j = i
 * mod n_rot / 2); k_qkv_post and k_pf_qkv_post take it from here */
static __device__ __forceinline__ void rope_cs(float theta, int n_rot, int i, int pos, float *c, float *sn) {
    const int half = n_rot / 2, j = i < half ? i : i - half;
    const float inv = 1.0f / powf(theta, (float)(2 * j) / (float)n_rot);
    const float ang = (float)pos * inv;
    *c = cosf(ang); *sn = sinf(ang);
}

static __device__ qkv_pre qkv_post_prep(const float *bq, const float *bk, const float *bv, const float *qn, const float *kn, int n_head,
                                        int hd, int n_rot, float theta, int h, int pos) {
    const int i = threadIdx.x, is_q = h < n_head, hh = is_q ? h : h - n_head;
    const float *b = is_q ? bq : bk, *nw = is_q ? qn : kn;
    qkv_pre r = { 0.f, 0.f, 1.f, 0.f, 0.f, b != nullptr, nw != nullptr };
    if (b && i < hd) r.b = b[hh * hd + i];
    if (!is_q && bv && i < hd) r.bvv = bv[hh * hd + i];
    if (nw && i < hd) r.nw = nw[i];
    if (i < n_rot) rope_cs(theta, n_rot, i, pos, &r.c, &r.sn);
    return r;
}

/* Bias, q/k norm and RoPE of head h (q heads first, then kv heads) of one token at position pos; a
 * kv head's k and v go into the cache. One block, blockDim = hd rounded up to a warp; q, k, v: the
 * token's rows; pr: qkv_post_prep's values for this thread. */
static __device__ void qkv_post_head(float *q, float *k, const float *v, const float *bv, int n_head, int n_head_kv, int hd,
                                     int n_rot, float eps, int h, int pos, float *kcache, float *vcache, const qkv_pre &pr) {
    __shared__ float buf[1024];
    int i = threadIdx.x, on = i < hd;
    int is_q = h < n_head;
    int hh = is_q ? h : h - n_head;
    float *p = (is_q ? q : k) + hh * hd;
    float x = on ? p[i] : 0.0f;
    const float vin = !is_q && on ? v[hh * hd + i] : 0.0f;   /* a kv head's v, loaded beside its k */
    if (pr.has_b && on) x += pr.b;
    if (pr.has_nw) {
        float ss = block_sum(x * x);
        if (on) x = pr.nw * (x * (1.0f / sqrtf(ss / (float)hd + eps)));
    }
    buf[i] = x;
    __syncthreads();
    int half = n_rot / 2;
    if (i < n_rot) {
        int j = i < half ? i : i - half;
        float a = buf[j], bb = buf[j + half];
        x = i < half ? a * pr.c - bb * pr.sn : bb * pr.c + a * pr.sn;
    }
    if (!on) return;
    if (is_q) p[i] = x;
    else {
        size_t off = (size_t)pos * n_head_kv * hd + hh * hd + i;
        kcache[off] = x;
        float vv = vin;
        if (bv) vv += pr.bvv;
        vcache[off] = vv;
    }
}

#endif
