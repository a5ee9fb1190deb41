/* prefill_mma.cu - the tensor-core kernels of prefill (mma.sync m16n8k16, F16 inputs, F32
 * accumulation): a causal flash attention with S and O in registers (FlashAttention-2 layout), on
 * F16 copies of the layer's K and V^T (the default, pf_flash_mma2) or on the F32 KV cache
 * (pf_flash_mma), and a grouped GEMM that runs every expert of a group in one launch. */
#include "prefill.cuh"
#include "launch.cuh"
#include "blockops.cuh"
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

/* D += A B for one m16n8k16 tile. Fragments (g = lane / 4, t = lane % 4):
 *   A (16x16, row-major): a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..]
 *   B (16x8, k x n):      b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]
 *   C (16x8):             c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1] */
__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, const uint32_t *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t pack_h2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&h;
}

__device__ __forceinline__ uint32_t lds32(const __half *p) { return *(const uint32_t *)p; }

/* ------------------------------------------------------------------ flash attention */

/* grid (q tiles of 64 tokens, n_head), 4 warps of 16 query rows. Per tile of 64 positions the
 * block converts K (row-major, [pos][HD+8]) and V (transposed, [d][64+8]) to F16 in shared memory
 * (the +8 pads make the fragment loads bank-conflict free); each warp computes its S (16x64) in
 * registers, masks it causally, updates the running max and sum, rescales O, and adds P V with P
 * taken straight from S's registers. Token t of the chunk is at position pos0 + t and sees [0, pos0 + t]. */
#define FM_BR 64
#define FM_BC 64

/* This thread's A fragments of q (two rows r0, r1 of head h; rows past n are zero), F16 straight
 * from the F32 q rows (row stride ld). */
template <int HD>
__device__ __forceinline__ void load_q_frags(const float *qkv, int ld, int h, int r0, int r1, int n, int t, uint32_t (*qf)[4]) {
    const float *q_0 = qkv + (size_t)r0 * ld + h * HD, *q_1 = qkv + (size_t)r1 * ld + h * HD;
    const bool v0 = r0 < n, v1 = r1 < n;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        int c = ks * 16 + 2 * t;
        qf[ks][0] = v0 ? pack_h2(q_0[c], q_0[c + 1]) : 0u;
        qf[ks][1] = v1 ? pack_h2(q_1[c], q_1[c + 1]) : 0u;
        qf[ks][2] = v0 ? pack_h2(q_0[c + 8], q_0[c + 9]) : 0u;
        qf[ks][3] = v1 ? pack_h2(q_1[c + 8], q_1[c + 9]) : 0u;
    }
}

/* One tile of 64 positions at t0 for this warp's 16 rows: S = Q K^T in registers, causal mask,
 * online softmax (running max m, partial sums l of this thread's columns), O = O * corr + P V. */
template <int HD>
__device__ __forceinline__ void fm_tile(const __half *sK, const __half *sVt, const uint32_t (*qf)[4], float (*o)[4],
                                        float &m0, float &m1, float &l0, float &l1, int t0, int qp0, int qp1, int g,
                                        int t, float scale) {
    constexpr int KS = HD + 8, VS = FM_BC + 8, NKS = HD / 16, NDT = HD / 8;
    float s[FM_BC / 8][4];
#pragma unroll
    for (int nt = 0; nt < FM_BC / 8; nt++) {
        s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
        const __half *kr = sK + (nt * 8 + g) * KS + 2 * t;
#pragma unroll
        for (int ks = 0; ks < NKS; ks++) {
            uint32_t b[2] = { lds32(kr + ks * 16), lds32(kr + ks * 16 + 8) };
            mma16816(s[nt], qf[ks], b);
        }
    }
    /* causal mask, scale, row max over the quad */
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < FM_BC / 8; nt++) {
        int p = t0 + nt * 8 + 2 * t;
        s[nt][0] = p <= qp0 ? s[nt][0] * scale : -INFINITY;
        s[nt][1] = p + 1 <= qp0 ? s[nt][1] * scale : -INFINITY;
        s[nt][2] = p <= qp1 ? s[nt][2] * scale : -INFINITY;
        s[nt][3] = p + 1 <= qp1 ? s[nt][3] * scale : -INFINITY;
        mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
        mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    /* position 0 is in every row's range, so after the first tile the maxima are finite */
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    const float c0 = m0 == -INFINITY ? 0.0f : expf(m0 - n0), c1 = m1 == -INFINITY ? 0.0f : expf(m1 - n1);
    m0 = n0; m1 = n1;
    uint32_t pf[FM_BC / 16][4];
    float sum0 = 0, sum1 = 0;
#pragma unroll
    for (int nt = 0; nt < FM_BC / 8; nt++) {
        float p0 = s[nt][0] == -INFINITY ? 0.0f : expf(s[nt][0] - n0);
        float p1 = s[nt][1] == -INFINITY ? 0.0f : expf(s[nt][1] - n0);
        float p2 = s[nt][2] == -INFINITY ? 0.0f : expf(s[nt][2] - n1);
        float p3 = s[nt][3] == -INFINITY ? 0.0f : expf(s[nt][3] - n1);
        uint32_t lo = pack_h2(p0, p1), hi = pack_h2(p2, p3);
        /* the sums add what P V uses: the F16 values */
        float2 flo = __half22float2(*(__half2 *)&lo), fhi = __half22float2(*(__half2 *)&hi);
        sum0 += flo.x + flo.y;
        sum1 += fhi.x + fhi.y;
        pf[nt / 2][(nt & 1) * 2 + 0] = lo; /* A regs: [0] row g k lo, [1] row g+8, [2] row g k+8, [3] row g+8 k+8 */
        pf[nt / 2][(nt & 1) * 2 + 1] = hi;
    }
    l0 = l0 * c0 + sum0;
    l1 = l1 * c1 + sum1;
#pragma unroll
    for (int i = 0; i < NDT; i++) { o[i][0] *= c0; o[i][1] *= c0; o[i][2] *= c1; o[i][3] *= c1; }
#pragma unroll
    for (int kk = 0; kk < FM_BC / 16; kk++) {
#pragma unroll
        for (int nd = 0; nd < NDT; nd++) {
            const __half *vr = sVt + (nd * 8 + g) * VS + kk * 16 + 2 * t;
            uint32_t b[2] = { lds32(vr), lds32(vr + 8) };
            mma16816(o[nd], pf[kk], b);
        }
    }
}

template <int HD>
__global__ void __launch_bounds__(128) k_pf_flash_mma(const float *qkv, int ld, const float *kc, const float *vc,
                                                      __half *out, int n, int pos0, int n_head, int n_head_kv,
                                                      float scale) {
    constexpr int KS = HD + 8, VS = FM_BC + 8, NKS = HD / 16, NDT = HD / 8;
    __shared__ __align__(16) __half sK[FM_BC * KS];
    __shared__ __align__(16) __half sVt[HD * VS];
    const int h = blockIdx.y, kvh = h / (n_head / n_head_kv), kvd = n_head_kv * HD;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * FM_BR; /* the longest tiles first */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r0 = q0 + warp * 16 + g, r1 = r0 + 8; /* this thread's two rows (chunk indices) */
    const int qp0 = pos0 + r0, qp1 = pos0 + r1;
    /* Q fragments, F16, straight from the F32 q rows */
    uint32_t qf[NKS][4];
    load_q_frags<HD>(qkv, ld, h, r0, r1, n, t, qf);
    float o[NDT][4];
#pragma unroll
    for (int i = 0; i < NDT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
    const int last = min(q0 + FM_BR, n) - 1;
    const int kv_end = pos0 + last + 1;                 /* positions [0, kv_end) */
    const int warp_last = pos0 + q0 + warp * 16 + 15;   /* this warp's last position */
    for (int t0 = 0; t0 < kv_end; t0 += FM_BC) {
        __syncthreads(); /* the previous tile is consumed */
        /* K: thread i takes 4 values of one row (coalesced) */
        for (int i = threadIdx.x; i < FM_BC * HD / 4; i += blockDim.x) {
            int rr = i / (HD / 4), c = (i % (HD / 4)) * 4, p = t0 + rr;
            float4 a = make_float4(0, 0, 0, 0);
            if (p < kv_end) a = *(const float4 *)(kc + (size_t)p * kvd + kvh * HD + c);
            __half2 *d = (__half2 *)(sK + rr * KS + c);
            d[0] = __floats2half2_rn(a.x, a.y);
            d[1] = __floats2half2_rn(a.z, a.w);
        }
        /* V transposed: consecutive threads take consecutive positions of one 4-column group */
        for (int i = threadIdx.x; i < FM_BC * HD / 4; i += blockDim.x) {
            int rr = i % FM_BC, c = (i / FM_BC) * 4, p = t0 + rr;
            float4 a = make_float4(0, 0, 0, 0);
            if (p < kv_end) a = *(const float4 *)(vc + (size_t)p * kvd + kvh * HD + c);
            sVt[(c + 0) * VS + rr] = __float2half_rn(a.x);
            sVt[(c + 1) * VS + rr] = __float2half_rn(a.y);
            sVt[(c + 2) * VS + rr] = __float2half_rn(a.z);
            sVt[(c + 3) * VS + rr] = __float2half_rn(a.w);
        }
        __syncthreads();
        if (warp_last < t0) continue; /* every row of this warp is before the tile (warp-uniform) */
        fm_tile<HD>(sK, sVt, qf, o, m0, m1, l0, l1, t0, qp0, qp1, g, t, scale);
    }
    /* the quad's partial sums */
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float i0 = 1.0f / l0, i1 = 1.0f / l1;
#pragma unroll
    for (int nd = 0; nd < NDT; nd++) {
        int c = h * HD + nd * 8 + 2 * t;
        if (r0 < n) *(__half2 *)(out + (size_t)r0 * n_head * HD + c) = __floats2half2_rn(o[nd][0] * i0, o[nd][1] * i0);
        if (r1 < n) *(__half2 *)(out + (size_t)r1 * n_head * HD + c) = __floats2half2_rn(o[nd][2] * i1, o[nd][3] * i1);
    }
}

int pf_flash_mma(const float *qkv, int ld, const float *kc, const float *vc, __half *out, int n, int pos0, int n_head,
                 int n_head_kv, int hd, float scale, cudaStream_t s) {
    dim3 gr((n + FM_BR - 1) / FM_BR, n_head);
    switch (hd) {
    case 16: k_pf_flash_mma<16><<<gr, 128, 0, s>>>(qkv, ld, kc, vc, out, n, pos0, n_head, n_head_kv, scale); break;
    case 32: k_pf_flash_mma<32><<<gr, 128, 0, s>>>(qkv, ld, kc, vc, out, n, pos0, n_head, n_head_kv, scale); break;
    case 64: k_pf_flash_mma<64><<<gr, 128, 0, s>>>(qkv, ld, kc, vc, out, n, pos0, n_head, n_head_kv, scale); break;
    case 128: k_pf_flash_mma<128><<<gr, 128, 0, s>>>(qkv, ld, kc, vc, out, n, pos0, n_head, n_head_kv, scale); break;
    default: return -1;
    }
    return 0;
}

/* F16 copies of the first np positions (np a multiple of 64, >= kv_end) of one layer's caches:
 * k16 [pos][kv_dim] as the cache, vt16 [d][ld_vt] transposed (positions contiguous), zeros from
 * kv_end on. grid (np / 32, kv_dim / 32), block (32, 8): a 32 x 32 tile through shared memory. */
__global__ void k_pf_kv_f16(const float *kc, const float *vc, __half *k16, __half *vt16, int kv_end, int kvd, int ld_vt) {
    __shared__ float tv[32][33];
    const int p0 = blockIdx.x * 32, d0 = blockIdx.y * 32, tx = threadIdx.x;
    for (int j = threadIdx.y; j < 32; j += 8) {
        int p = p0 + j;
        size_t o = (size_t)p * kvd + d0 + tx;
        bool v = p < kv_end;
        k16[o] = __float2half_rn(v ? kc[o] : 0.0f);
        tv[j][tx] = v ? vc[o] : 0.0f;
    }
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += 8) vt16[(size_t)(d0 + j) * ld_vt + p0 + tx] = __float2half_rn(tv[tx][j]);
}

/* As k_pf_flash_mma, with K and V^T already F16 (k_pf_kv_f16) and copied to shared memory by
 * cp.async in two stages: tile j + 1 loads while tile j computes. Dynamic shared memory:
 * 2 x (64 x (HD + 8) + HD x 72) halves. */
template <int HD>
__global__ void __launch_bounds__(128, 3) k_pf_flash_mma2(const float *qkv, int ld, const __half *k16, const __half *vt16,
                                                       int ld_vt, __half *out, int n, int pos0, int n_head,
                                                       int n_head_kv, float scale) {
    constexpr int KS = HD + 8, VS = FM_BC + 8, NKS = HD / 16, NDT = HD / 8, STAGE = FM_BC * KS + HD * VS;
    extern __shared__ __align__(16) unsigned char fm_smem[];
    __half *sm = (__half *)fm_smem;
    const int h = blockIdx.y, kvh = h / (n_head / n_head_kv), kvd = n_head_kv * HD;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * FM_BR;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r0 = q0 + warp * 16 + g, r1 = r0 + 8;
    const int qp0 = pos0 + r0, qp1 = pos0 + r1;
    const int last = min(q0 + FM_BR, n) - 1;
    const int kv_end = pos0 + last + 1, ntiles = (kv_end + FM_BC - 1) / FM_BC;
    const int warp_last = pos0 + q0 + warp * 16 + 15;
    auto load = [&](int st, int t0) {
        __half *dK = sm + st * STAGE, *dV = dK + FM_BC * KS;
        for (int i = threadIdx.x; i < FM_BC * HD / 8; i += blockDim.x) {
            int r = i / (HD / 8), c = (i % (HD / 8)) * 8;
            cp_async16(dK + r * KS + c, k16 + (size_t)(t0 + r) * kvd + kvh * HD + c, true);
        }
        for (int i = threadIdx.x; i < HD * FM_BC / 8; i += blockDim.x) {
            int r = i / (FM_BC / 8), c = (i % (FM_BC / 8)) * 8;
            cp_async16(dV + r * VS + c, vt16 + (size_t)(kvh * HD + r) * ld_vt + t0 + c, true);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    load(0, 0);
    uint32_t qf[NKS][4];
    load_q_frags<HD>(qkv, ld, h, r0, r1, n, t, qf);
    float o[NDT][4];
#pragma unroll
    for (int i = 0; i < NDT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
    for (int j = 0; j < ntiles; j++) {
        const int st = j & 1, t0 = j * FM_BC;
        if (j + 1 < ntiles) {
            load(st ^ 1, t0 + FM_BC);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        const __half *sK = sm + st * STAGE, *sVt = sK + FM_BC * KS;
        if (warp_last >= t0) fm_tile<HD>(sK, sVt, qf, o, m0, m1, l0, l1, t0, qp0, qp1, g, t, scale);
        __syncthreads(); /* stage st is refilled by the next iteration's load */
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float i0 = 1.0f / l0, i1 = 1.0f / l1;
#pragma unroll
    for (int nd = 0; nd < NDT; nd++) {
        int c = h * HD + nd * 8 + 2 * t;
        if (r0 < n) *(__half2 *)(out + (size_t)r0 * n_head * HD + c) = __floats2half2_rn(o[nd][0] * i0, o[nd][1] * i0);
        if (r1 < n) *(__half2 *)(out + (size_t)r1 * n_head * HD + c) = __floats2half2_rn(o[nd][2] * i1, o[nd][3] * i1);
    }
}

template <int HD>
static int flash2_launch(dim3 gr, const float *qkv, int ld, const __half *k16, const __half *vt16, int ld_vt, __half *out,
                         int n, int pos0, int n_head, int n_head_kv, float scale, cudaStream_t s) {
    const int smem = 2 * (FM_BC * (HD + 8) + HD * (FM_BC + 8)) * 2;
    static std::atomic<unsigned long long> raised(0);   /* per device: a pipeline's second GPU raises its own */
    if (hm_allow_smem(k_pf_flash_mma2<HD>, smem, 0, raised)) return -1;
    k_pf_flash_mma2<HD><<<gr, 128, smem, s>>>(qkv, ld, k16, vt16, ld_vt, out, n, pos0, n_head, n_head_kv, scale);
    return 0;
}

int pf_flash_mma2(const float *qkv, int ld, const float *kc, const float *vc, __half *k16, __half *vt16, __half *out,
                  int n, int pos0, int n_head, int n_head_kv, int hd, float scale, cudaStream_t s) {
    if (hd != 16 && hd != 32 && hd != 64 && hd != 128) return -1;
    const int kvd = n_head_kv * hd, kv_end = pos0 + n, np = (kv_end + FM_BC - 1) / FM_BC * FM_BC;
    if (kvd % 32) return -1;
    k_pf_kv_f16<<<dim3(np / 32, kvd / 32), dim3(32, 8), 0, s>>>(kc, vc, k16, vt16, kv_end, kvd, np);
    dim3 gr((n + FM_BR - 1) / FM_BR, n_head);
    switch (hd) {
    case 16: return flash2_launch<16>(gr, qkv, ld, k16, vt16, np, out, n, pos0, n_head, n_head_kv, scale, s);
    case 32: return flash2_launch<32>(gr, qkv, ld, k16, vt16, np, out, n, pos0, n_head, n_head_kv, scale, s);
    case 64: return flash2_launch<64>(gr, qkv, ld, k16, vt16, np, out, n, pos0, n_head, n_head_kv, scale, s);
    default: return flash2_launch<128>(gr, qkv, ld, k16, vt16, np, out, n, pos0, n_head, n_head_kv, scale, s);
    }
}

/* ------------------------------------------------------------------ grouped GEMM */

/* Y[row0 + r][0..M) = X[row0 + r][0..K) . W_slot[0..M)[0..K)^T for the r < nrows of each tile
 * {slot, row0, nrows}: grid (ceil(M / 128), tiles), 8 warps as 2 (rows) x 4 (cols), each warp 64 rows
 * x 32 cols; K in steps of 32, GG_ST shared-memory stages filled by cp.async (rows padded to 40
 * halves: conflict-free fragment loads). GG_ST 2 is what ran on the device (and looked latency
 * bound there: each expert's weights are read by ~2 row tiles only, straight from HBM); GG_ST 4
 * keeps three tiles in flight (not yet run on a GPU). Out-of-range rows and columns are zero-filled and not
 * stored. K % 8 == 0. */
#define GG_BM 128 /* rows (tokens) */
#define GG_BN 128 /* output columns */
#define GG_BK 32
#define GG_LD 40


template <int GG_ST>
__global__ void __launch_bounds__(256) k_pf_ggemm(const __half *W, int64_t wstride, const __half *X, float *Y,
                                                  const int4 *tiles, int M, int K) {
    extern __shared__ __align__(16) unsigned char gg_smem[];
    __half *const sm = (__half *)gg_smem; /* stage st: A (GG_BM x GG_LD) then B (GG_BN x GG_LD) */
#define SA(st) (sm + (st) * (GG_BM + GG_BN) * GG_LD)
#define SB(st) (SA(st) + GG_BM * GG_LD)
    const int4 tl = tiles[blockIdx.y];
    const __half *Wt = W + (size_t)tl.x * wstride;
    const int row0 = tl.y, nr = tl.z, m0 = blockIdx.x * GG_BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wm = warp >> 2, wn = warp & 3;
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    const int nk = (K + GG_BK - 1) / GG_BK;
    auto load = [&](int st, int kb) {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            int i = threadIdx.x + u * 256, r = i >> 2, cc = (i & 3) * 8, k = kb * GG_BK + cc;
            bool va = r < nr && k < K, vb = m0 + r < M && k < K;
            cp_async16(SA(st) + r * GG_LD + cc, va ? (const void *)(X + (size_t)(row0 + r) * K + k) : (const void *)X, va);
            cp_async16(SB(st) + r * GG_LD + cc, vb ? (const void *)(Wt + (size_t)(m0 + r) * K + k) : (const void *)Wt, vb);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    if (GG_ST == 2) load(0, 0); /* the schedule validated on the device */
    else /* tiles 0 .. GG_ST-2 in flight (empty groups past the end keep the group count uniform) */
        for (int st = 0; st < GG_ST - 1; st++) {
            if (st < nk) load(st, st);
            else asm volatile("cp.async.commit_group;\n" ::);
        }
    for (int kb = 0; kb < nk; kb++) {
        const int st = kb % GG_ST;
        if (GG_ST == 2) {
            if (kb + 1 < nk) {
                load(st ^ 1, kb + 1);
                asm volatile("cp.async.wait_group 1;\n" ::);
            } else {
                asm volatile("cp.async.wait_group 0;\n" ::);
            }
            __syncthreads();
        } else {
            asm volatile("cp.async.wait_group %0;\n" ::"n"(GG_ST - 2)); /* tile kb has landed */
            __syncthreads(); /* ... for every thread; and stage (kb - 1) % GG_ST is consumed */
            if (kb + GG_ST - 1 < nk) load((kb + GG_ST - 1) % GG_ST, kb + GG_ST - 1);
            else asm volatile("cp.async.commit_group;\n" ::);
        }
#pragma unroll
        for (int ks = 0; ks < GG_BK / 16; ks++) {
            uint32_t af[4][4], bf[4][2];
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                const __half *a = SA(st) + (wm * 64 + mt * 16 + g) * GG_LD + ks * 16 + 2 * t;
                af[mt][0] = lds32(a);
                af[mt][1] = lds32(a + 8 * GG_LD);
                af[mt][2] = lds32(a + 8);
                af[mt][3] = lds32(a + 8 * GG_LD + 8);
            }
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                const __half *b = SB(st) + (wn * 32 + nt * 8 + g) * GG_LD + ks * 16 + 2 * t;
                bf[nt][0] = lds32(b);
                bf[nt][1] = lds32(b + 8);
            }
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++) mma16816(acc[mt][nt], af[mt], bf[nt]);
        }
        if (GG_ST == 2) __syncthreads(); /* the stage is refilled next iteration */
    }
#undef SA
#undef SB
#pragma unroll
    for (int mt = 0; mt < 4; mt++) {
        int ra = wm * 64 + mt * 16 + g, rb = ra + 8;
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
            int c = m0 + wn * 32 + nt * 8 + 2 * t;
            if (ra < nr) {
                float *y = Y + (size_t)(row0 + ra) * M + c;
                if (c < M) y[0] = acc[mt][nt][0];
                if (c + 1 < M) y[1] = acc[mt][nt][1];
            }
            if (rb < nr) {
                float *y = Y + (size_t)(row0 + rb) * M + c;
                if (c < M) y[0] = acc[mt][nt][2];
                if (c + 1 < M) y[1] = acc[mt][nt][3];
            }
        }
    }
}

template <int ST>
static int ggemm_launch(const __half *W, int64_t wstride, const __half *X, float *Y, const int4 *tiles, int n_tiles, int M,
                        int K, cudaStream_t s) {
    const int smem = ST * (GG_BM + GG_BN) * GG_LD * 2;
    static std::atomic<unsigned long long> raised(0);
    if (hm_allow_smem(k_pf_ggemm<ST>, smem, 0, raised)) return -1;
    k_pf_ggemm<ST><<<dim3((M + GG_BN - 1) / GG_BN, n_tiles), 256, smem, s>>>(W, wstride, X, Y, tiles, M, K);
    return 0;
}

int pf_ggemm(const __half *W, int64_t wstride, const __half *X, float *Y, const int4 *tiles, int n_tiles, int M, int K,
             int stages, cudaStream_t s) {
    if (K % 8 || n_tiles <= 0) return -1;
    return stages == 4 ? ggemm_launch<4>(W, wstride, X, Y, tiles, n_tiles, M, K, s)
                       : ggemm_launch<2>(W, wstride, X, Y, tiles, n_tiles, M, K, s);
}
