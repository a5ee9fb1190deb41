/* layout.cu - does the weights' layout in memory bound the decode GEMV? The q8 register kernel's
 * math (gpu/gemv_q8.cuh: L lanes a row, a lane's chunks li, li + L, ... decoded from registers and
 * dotted with x's q8 records in shared memory, a butterfly over the row's lanes) on the same rows
 * laid out four ways:
 *   rows    the GGUF rows as they are (Q3_K: 110-byte chunks, realigned in registers; Q4_K: 144);
 *   pad     each chunk padded to a multiple of 16 bytes (Q3_K 112), so every load is a whole word;
 *   inter   padded chunks interleaved per warp: the 16-byte word j of the chunk that lane i takes
 *           at step t sits at warp_base + (t * W + j) * 512 + 16 i (W words a chunk), so each load
 *           instruction of a warp reads 512 contiguous bytes instead of 32 scattered 16-byte words;
 *   inter2  inter with the next step's words loaded before this step's dot (two chunks in flight).
 * Every layout sums in the same order, so the outputs must be bitwise equal (checked). One more
 * for Q3_K with a ncols of 4096, not the register kernel's math (its sums in another order, so
 * checked against the rows layout within 1e-5 of the largest output):
 *   oct     eight rows a warp, each lane 128 columns of all eight (k_oct below): a byte lane of a
 *           word holds 2-3 rows' 3-bit values of one column, so one x word serves eight rows and
 *           the fields come out by masks alone (no shifts), the scales as int8 a row and group.
 * Shapes:
 * air's routed gate|up (8 experts x 2 x 1408 rows of 4096, Q3_K, 2 lanes a row), its routed down (8 x
 * 4096 rows of 1408, Q4_0: rows of 792 bytes, the last chunk partial; padded: six whole chunks, the
 * sixth half zero blocks) and q|k (13312 x 4096, Q4_K, 4 lanes a row): one warp takes 32 / L rows,
 * one round, as the model's launches do.
 * Each launch reads a different copy of the matrix (enough copies to overflow L2), 100 launches
 * per CUDA graph; us a launch and the fraction of the device's copy bandwidth.
 *
 *   bench_layout [--reps N]        (exit 77 without a GPU) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <vector>
#include <math.h>
#include <cuda_fp16.h>
#include "gemv_q8.cuh"
#include "gpu_gemv.h"
#include "gpu.h"

enum { L_ROWS = 0, L_PAD = 1, L_INTER = 2, L_INTER2 = 3 };
static const char *lname[] = { "rows", "pad", "inter", "inter2" };

/* the chunk's words for layout LAY: lane li's chunk c of row `row` (warp w, lane, step t); rows:
 * loads at alignment RA, the row's last chunk partial (nbl bytes) when nbl > 0 */
template <class T, int CBP, int LAY, int RA>
__device__ __forceinline__ void ld_chunk(const uint8_t *m, size_t rowbytes, int row, int c, int w, int lane, int t, int rpw,
                                         int nch, int nbl, uint32_t *wd) {
    if (LAY == L_ROWS) {
        const uint8_t *p = m + (size_t)row * rowbytes + (size_t)c * T::CB;
        if constexpr (RA == 1) {
            if (nbl && c == nch - 1) q8_load_part<T::CB>(p, wd, nbl);
            else q8_load_chunk<T::CB, 1>(p, wd);
        } else {
            q8_load_chunk<T::CB, RA>(p, wd);
        }
    } else if (LAY == L_PAD) {
        q8_load_chunk<CBP, 16>(m + (size_t)row * rowbytes + (size_t)c * CBP, wd);
    } else {
        constexpr int W = CBP / 16;
        const uint8_t *b = m + (size_t)w * rpw * nch * CBP + (size_t)t * 32 * CBP + 16 * lane;
#pragma unroll
        for (int j = 0; j < W; j++) {
            const uint4 u = __ldg((const uint4 *)(b + 512 * j));
            wd[4 * j] = u.x; wd[4 * j + 1] = u.y; wd[4 * j + 2] = u.z; wd[4 * j + 3] = u.w;
        }
#pragma unroll
        for (int k = 4 * W; k < q8_nw(CBP, 16); k++) wd[k] = 0;
    }
}

template <class T, int CBP, int LAY, int RA>
__global__ void __launch_bounds__(256, 2) k_layout(const uint8_t *m, size_t rowbytes, const uint8_t *xq, int nrows, int nch, int nbl,
                                                   int lshift, float *y) {
    extern __shared__ __align__(16) uint8_t xs[];
    for (int i = threadIdx.x; i < nch * Q8_REC / 16; i += blockDim.x) ((uint4 *)xs)[i] = __ldg((const uint4 *)xq + i);
    __syncthreads();
    const int L = 1 << lshift, rpw = 32 >> lshift, lane = threadIdx.x & 31, li = lane & (L - 1);
    const int w = blockIdx.x * 8 + (threadIdx.x >> 5), row = w * rpw + (lane >> lshift);
    if (w * rpw >= nrows) return;   /* warp-uniform */
    constexpr int NW = LAY == L_ROWS ? q8_nw(T::CB, RA) : q8_nw(CBP, 16);
    const int steps = nch >> lshift;   /* nch a multiple of L */
    float acc = 0.f;
    if (LAY == L_INTER2) {
        uint32_t a[NW], b[NW];
        ld_chunk<T, CBP, LAY, RA>(m, rowbytes, row, li, w, lane, 0, rpw, nch, nbl, a);
        for (int t = 0; t < steps; t += 2) {
            if (t + 1 < steps) ld_chunk<T, CBP, LAY, RA>(m, rowbytes, row, li + (t + 1) * L, w, lane, t + 1, rpw, nch, nbl, b);
            acc += T::dot(a, xs + (li + t * L) * Q8_REC);
            if (t + 2 < steps) ld_chunk<T, CBP, LAY, RA>(m, rowbytes, row, li + (t + 2) * L, w, lane, t + 2, rpw, nch, nbl, a);
            if (t + 1 < steps) acc += T::dot(b, xs + (li + (t + 1) * L) * Q8_REC);
        }
    } else {
        for (int t = 0; t < steps; t++) {
            uint32_t a[NW];
            ld_chunk<T, CBP, LAY, RA>(m, rowbytes, row, li + t * L, w, lane, t, rpw, nch, nbl, a);
            acc += T::dot(a, xs + (li + t * L) * Q8_REC);
        }
    }
    for (int o = L >> 1; o > 0; o >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
    if (li == 0 && row < nrows) y[row] = acc;
}

/* ---- oct: eight rows a warp, the lanes over the columns (Q3_K, ncols = 32 * 16 * NG) ----
 * Lane l of octet o (rows 8o .. 8o + 7) takes columns [l CPL, (l + 1) CPL), CPL = 16 NG, inside
 * one 256-column chunk. Its 16-byte words, word j at o * WPL * 512 + j * 512 + 16 l (each load of
 * a warp reads 512 contiguous bytes): 0: the eight rows' F16 d of the chunk; 1 .. NG / 2: int8
 * (scale - 32) of row r and group g at byte 8 g + r; then three words a group g of 16 columns: 4
 * steps of 4 columns, 3 words W0, W1, W2 a step, byte k of each for column 4 i + k:
 *   W0 = q0 | q1 << 3 | (q6 & 3) << 6,  W1 = q2 | q3 << 3 | (q7 & 3) << 6,
 *   W2 = q4 | q5 << 3 | (q6 >> 2) << 6 | (q7 >> 2) << 7          (q = 3-bit value + 4, 0 .. 7)
 * Unsigned x signed dp4a of a word and of it masked (0x38, 0xC0; 0x40, 0x80 in W2) give every
 * row's sum by differences: D(W0) - D(W0 & 0x38) - D(W0 & 0xC0) = sum q0 x, and so on, with the
 * -4 sum(x) of each row folded into the accumulators' start values; rows 1, 3, 5 stay 8 times
 * their sum (exact in float: |8 s| < 2^22), rows 6 and 7 are shifted down by 6 (exact). */
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

template <int NG, int BPS>
__global__ void __launch_bounds__(256, BPS) k_oct(const uint8_t *m, const uint8_t *xq, int nrows, int nch, float *y) {
    extern __shared__ __align__(16) uint8_t xs[];
    for (int i = threadIdx.x; i < nch * Q8_REC / 16; i += blockDim.x) ((uint4 *)xs)[i] = __ldg((const uint4 *)xq + i);
    __syncthreads();
    constexpr int WPL = 1 + NG / 2 + 3 * NG, CPL = 16 * NG;
    const int lane = threadIdx.x & 31, o = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (o * 8 >= nrows) return;   /* warp-uniform */
    const uint4 *b = (const uint4 *)(m + (size_t)o * WPL * 512) + lane;
    const uint4 dv = __ldg(b);
    uint4 sv[NG / 2];
#pragma unroll
    for (int k = 0; k < NG / 2; k++) sv[k] = __ldg(b + 32 * (1 + k));
    const int col0 = lane * CPL;
    const uint8_t *rec = xs + (col0 >> 8) * Q8_REC;
    float acc[8];
#pragma unroll
    for (int r = 0; r < 8; r++) acc[r] = 0.f;
    constexpr uint32_t M38 = 0x38383838u, MC0 = 0xC0C0C0C0u, M40 = 0x40404040u, M80 = 0x80808080u;
#pragma unroll
    for (int g2 = 0; g2 < NG / 2; g2++) {
        int s[8];
        float xd = 0.f;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int g = 2 * g2 + h, off = (col0 & 255) + 16 * g;
            const uint4 q0 = __ldg(b + 32 * (1 + NG / 2 + 3 * g)), q1 = __ldg(b + 32 * (2 + NG / 2 + 3 * g)),
                        q2 = __ldg(b + 32 * (3 + NG / 2 + 3 * g));
            const uint32_t W[12] = { q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w, q2.x, q2.y, q2.z, q2.w };
            const uint4 xv = *(const uint4 *)(rec + off);
            const uint2 ds = *(const uint2 *)(rec + 256 + 8 * (off >> 5));
            const int sx = (off & 16) ? ((int)ds.y >> 16) : (int)(int16_t)(ds.y & 0xFFFFu);
            xd = __uint_as_float(ds.x);
            const uint32_t X[4] = { xv.x, xv.y, xv.z, xv.w };
            /* start values: D0 = sum (q0 + 8 q1 + 64 l6) x - 292 sx, D1 = 8 sum q1 x - 32 sx, D2 = 64 sum l6 x - 256 sx */
            int d0 = -292 * sx, d1 = -32 * sx, d2 = -256 * sx, e0 = -292 * sx, e1 = -32 * sx, e2 = -256 * sx;
            int f0 = -36 * sx, f1 = -32 * sx, f2 = 0, f3 = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t w0 = W[3 * i], w1 = W[3 * i + 1], w2 = W[3 * i + 2], x = X[i];
                d0 = dp4a_us(w0, x, d0); d1 = dp4a_us(w0 & M38, x, d1); d2 = dp4a_us(w0 & MC0, x, d2);
                e0 = dp4a_us(w1, x, e0); e1 = dp4a_us(w1 & M38, x, e1); e2 = dp4a_us(w1 & MC0, x, e2);
                f0 = dp4a_us(w2, x, f0); f1 = dp4a_us(w2 & M38, x, f1); f2 = dp4a_us(w2 & M40, x, f2); f3 = dp4a_us(w2 & M80, x, f3);
            }
            /* each row's sum of (q - 4) x (rows 1, 3, 5: times 8) */
            const int a[8] = { d0 - d1 - d2, d1, e0 - e1 - e2, e1, f0 - f1 - f2 - f3, f1, (d2 + 4 * f2) >> 6, (e2 + 2 * f3) >> 6 };
            const uint4 S = sv[g >> 1];
            const uint32_t lo = (g & 1) ? S.z : S.x, hi = (g & 1) ? S.w : S.y;
#pragma unroll
            for (int r = 0; r < 8; r++) {
                const int sc = (int)(int8_t)(((r < 4) ? lo : hi) >> (8 * (r & 3)));
                s[r] = (h ? s[r] : 0) + sc * a[r];
            }
        }
#pragma unroll
        for (int r = 0; r < 8; r++) acc[r] = fmaf(xd, (float)s[r], acc[r]);
    }
    const uint32_t dw[4] = { dv.x, dv.y, dv.z, dv.w };
#pragma unroll
    for (int r = 0; r < 8; r++) {
        const float d = __half2float(__ushort_as_half((unsigned short)(dw[r >> 1] >> (16 * (r & 1)))));
        float v = acc[r] * d * ((r == 1 || r == 3 || r == 5) ? 0.125f : 1.f);
        for (int o2 = 16; o2 > 0; o2 >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o2);
        if (lane == 0 && 8 * o + r < nrows) y[8 * o + r] = v;
    }
}

/* GGUF Q3_K chunk -> its 256 values q + 4 (0 .. 7) and 16 scales - 32 */
static void q3k_unpack(const uint8_t *blk, uint8_t *q, int *sc) {
    const uint8_t *hm = blk, *qs = blk + 32, *scb = blk + 96;
    for (int j = 0; j < 16; j++) {   /* 6-bit scales: low 4 bits in bytes 0-7, high 2 in 8-11 */
        const int low = j < 8 ? scb[j] & 15 : scb[j - 8] >> 4, high = (scb[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
        sc[j] = (low | high << 4) - 32;
    }
    for (int i = 0; i < 256; i++) {
        const int n = i >> 7, j = (i >> 5) & 3, l = i & 31;   /* half, shift pair, byte */
        const int q2 = (qs[32 * n + l] >> (2 * j)) & 3, hb = (hm[l] >> (4 * n + j)) & 1;
        q[i] = (uint8_t)(q2 | hb << 2);
    }
}

/* R rows of GGUF Q3_K (N chunks each, ncols = 4096) -> the oct layout */
static std::vector<uint8_t> oct_pack(const std::vector<uint8_t> &rows, int R, int N) {
    const int NG = N * 256 / 32 / 16, CPL = 16 * NG, WPL = 1 + NG / 2 + 3 * NG;
    std::vector<uint8_t> h((size_t)(R / 8) * WPL * 512, 0);
    std::vector<uint8_t> q((size_t)8 * N * 256);
    std::vector<int> sc((size_t)8 * N * 16);
    std::vector<uint16_t> d((size_t)8 * N);
    for (int o = 0; o < R / 8; o++) {
        for (int r = 0; r < 8; r++)
            for (int c = 0; c < N; c++) {
                const uint8_t *blk = &rows[((size_t)(8 * o + r) * N + c) * 110];
                q3k_unpack(blk, &q[((size_t)r * N + c) * 256], &sc[((size_t)r * N + c) * 16]);
                memcpy(&d[(size_t)r * N + c], blk + 108, 2);
            }
        for (int l = 0; l < 32; l++) {
            uint8_t *lw = &h[(size_t)o * WPL * 512 + 16 * l];
            auto word = [&](int j) { return lw + (size_t)j * 512; };
            const int col0 = l * CPL, c = col0 >> 8;
            for (int r = 0; r < 8; r++) memcpy(word(0) + 2 * r, &d[(size_t)r * N + c], 2);
            for (int g = 0; g < NG; g++) {
                const int col = col0 + 16 * g;
                for (int r = 0; r < 8; r++) word(1 + g / 2)[8 * (g & 1) + r] = (uint8_t)(int8_t)sc[((size_t)r * N + c) * 16 + (col & 255) / 16];
                for (int i = 0; i < 4; i++)
                    for (int k = 0; k < 4; k++) {
                        const int cc = col + 4 * i + k;
                        int v[8];
                        for (int r = 0; r < 8; r++) v[r] = q[(size_t)r * N * 256 + cc];
                        const uint8_t b0 = (uint8_t)(v[0] | v[1] << 3 | (v[6] & 3) << 6), b1 = (uint8_t)(v[2] | v[3] << 3 | (v[7] & 3) << 6),
                                      b2 = (uint8_t)(v[4] | v[5] << 3 | (v[6] >> 2) << 6 | (v[7] >> 2) << 7);
                        const int wi = 3 * i;   /* words W0..W2 of step i: 32-bit words wi .. wi + 2 of the group's 12 */
                        const uint8_t bb[3] = { b0, b1, b2 };
                        for (int t = 0; t < 3; t++) word(1 + NG / 2 + 3 * g + (wi + t) / 4)[4 * ((wi + t) % 4) + k] = bb[t];
                    }
            }
        }
    }
    return h;
}

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }

/* random blocks of cb bytes with a small positive F16 d at d_off (and dmin at d_off + 2 for Q4_K) */
static void fill_blocks(uint8_t *p, size_t nblk, int cb, int d_off, int two) {
    for (size_t b = 0; b < nblk; b++) {
        uint8_t *q = p + b * cb;
        for (int i = 0; i < cb; i++) q[i] = (uint8_t)rnd();
        const uint16_t d = 0x1C00 + (rnd() & 0x3FF);   /* ~0.004 .. 0.008 */
        memcpy(q + d_off, &d, 2);
        if (two) memcpy(q + d_off + 2, &d, 2);
    }
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "bench_layout: %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

/* type: 3 Q3_K, 4 Q4_K, 0 Q4_0; ncols: the row's elements (a partial last chunk when not a
 * multiple of 256: 32-element types only; the padded layouts fill it with zero blocks) */
struct Case { const char *name; int type; int nrows, ncols, lshift; int q3r; };

template <class T, int CBP, int LAY, int RA>
static double run_one(const Case &cs, const std::vector<uint8_t> &rows, const uint8_t *dxq, int reps, float *dy,
                      std::vector<float> &out, double *bytes) {
    const int R = cs.nrows, N = (cs.ncols + 255) / 256, L = 1 << cs.lshift, rpw = 32 / L;
    const size_t rb_in = (size_t)cs.ncols / 256 * T::CB + (cs.ncols % 256) / 32 * (T::CB / 8);   /* GGUF row bytes */
    const int nbl = (int)(rb_in - (size_t)(cs.ncols / 256) * T::CB);                          /* partial chunk bytes */
    const size_t rb = LAY == L_ROWS ? rb_in : (size_t)N * CBP;
    std::vector<uint8_t> h((size_t)R * rb, 0);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < N; c++) {
            const uint8_t *src = &rows[(size_t)r * rb_in + (size_t)c * T::CB];
            const int nb = c == N - 1 && nbl ? nbl : T::CB;   /* bytes of this chunk in the GGUF row */
            if (LAY == L_ROWS) { memcpy(&h[(size_t)r * rb + (size_t)c * T::CB], src, nb); continue; }
            if (LAY == L_PAD) { memcpy(&h[(size_t)r * rb + (size_t)c * CBP], src, nb); continue; }
            const int w = r / rpw, lane = (r % rpw) * L + c % L, t = c / L;   /* warp, lane, step */
            for (int j = 0; j < CBP / 16; j++) {
                uint8_t word[16] = { 0 };
                for (int k = 0; k < 16; k++) if (16 * j + k < nb) word[k] = src[16 * j + k];
                memcpy(&h[(size_t)w * rpw * N * CBP + (size_t)t * 32 * CBP + (size_t)j * 512 + 16 * lane], word, 16);
            }
        }
    const size_t l2 = 64u << 20;
    const int ncopy = (int)(3 * l2 / h.size()) + 2;
    uint8_t *dm;
    CK(cudaMalloc(&dm, h.size() * ncopy + 64));
    for (int i = 0; i < ncopy; i++) CK(cudaMemcpy(dm + h.size() * i, h.data(), h.size(), cudaMemcpyHostToDevice));
    const int warps = (R + rpw - 1) / rpw, blocks = (warps + 7) / 8;
    const size_t smem = (size_t)N * Q8_REC;
    CK(cudaMemset(dy, 0xFF, sizeof(float) * R));
    k_layout<T, CBP, LAY, RA><<<blocks, 256, smem>>>(dm, rb, dxq, R, N, nbl, cs.lshift, dy);
    CK(cudaDeviceSynchronize());
    out.resize(R);
    CK(cudaMemcpy(out.data(), dy, sizeof(float) * R, cudaMemcpyDeviceToHost));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    const int per = 100;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per; i++)
        k_layout<T, CBP, LAY, RA><<<blocks, 256, smem, s>>>(dm + h.size() * (i % ncopy), rb, dxq, R, N, nbl, cs.lshift, dy);
    CK(cudaStreamEndCapture(s, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0, s);
    for (int i = 0; i < reps; i++) CK(cudaGraphLaunch(ge, s));
    cudaEventRecord(e1, s);
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaGraphExecDestroy(ge); cudaGraphDestroy(gr); cudaStreamDestroy(s); cudaFree(dm);
    *bytes = (double)R * rb_in;
    return 1e3 * ms / ((double)reps * per);
}

/* the oct layout of the same rows (Q3_K, ncols 4096), BPS blocks a SM; its time a launch as run_one's */
template <int BPS>
static double run_oct(const Case &cs, const std::vector<uint8_t> &rows, const uint8_t *dxq, int reps, float *dy, std::vector<float> &out) {
    const int R = cs.nrows, N = cs.ncols / 256;
    const std::vector<uint8_t> h = oct_pack(rows, R, N);
    const size_t l2 = 64u << 20;
    const int ncopy = (int)(3 * l2 / h.size()) + 2;
    uint8_t *dm;
    CK(cudaMalloc(&dm, h.size() * ncopy + 64));
    for (int i = 0; i < ncopy; i++) CK(cudaMemcpy(dm + h.size() * i, h.data(), h.size(), cudaMemcpyHostToDevice));
    const int blocks = (R / 8 + 7) / 8;
    const size_t smem = (size_t)N * Q8_REC;
    CK(cudaMemset(dy, 0xFF, sizeof(float) * R));
    k_oct<8, BPS><<<blocks, 256, smem>>>(dm, dxq, R, N, dy);
    CK(cudaDeviceSynchronize());
    out.resize(R);
    CK(cudaMemcpy(out.data(), dy, sizeof(float) * R, cudaMemcpyDeviceToHost));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    const int per = 100;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per; i++) k_oct<8, BPS><<<blocks, 256, smem, s>>>(dm + h.size() * (i % ncopy), dxq, R, N, dy);
    CK(cudaStreamEndCapture(s, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0, s);
    for (int i = 0; i < reps; i++) CK(cudaGraphLaunch(ge, s));
    cudaEventRecord(e1, s);
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaGraphExecDestroy(ge); cudaGraphDestroy(gr); cudaStreamDestroy(s); cudaFree(dm);
    return 1e3 * ms / ((double)reps * per);
}

template <class T, int CBP, int RA>
static int run_case(const Case &cs, int reps, double ceil_gbs) {
    const int R = cs.nrows, N = (cs.ncols + 255) / 256;
    const size_t rb_in = (size_t)cs.ncols / 256 * T::CB + (cs.ncols % 256) / 32 * (T::CB / 8);
    const int bsz = cs.type == 0 ? 18 : T::CB, d_off = cs.type == 3 ? 108 : 0;   /* GGUF blocks: Q4_0 18 bytes, d first */
    std::vector<uint8_t> rows((size_t)R * rb_in + T::CB);
    fill_blocks(rows.data(), (size_t)R * rb_in / bsz, bsz, d_off, cs.type == 4);
    std::vector<float> x((size_t)N * 256, 0.f);
    for (int i = 0; i < cs.ncols; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.f;
    float *dx, *dy;
    void *dxq;
    CK(cudaMalloc(&dx, sizeof(float) * x.size()));
    CK(cudaMalloc(&dxq, gpu_q8_records_bytes(N * 256)));
    CK(cudaMalloc(&dy, sizeof(float) * R));
    CK(cudaMemcpy(dx, x.data(), sizeof(float) * x.size(), cudaMemcpyHostToDevice));
    if (gpu_q8_records(dx, N * 256, dxq, NULL)) { fprintf(stderr, "bench_layout: q8 records failed\n"); return 1; }
    CK(cudaDeviceSynchronize());
    std::vector<float> ref, got;
    double by = 0, t_rows = 0;
    int bad = 0;
    std::vector<uint8_t> krows = rows;   /* the kernel's chunks: q3r (the model's Q3_K layout) repacked from GGUF's */
    if (cs.q3r)
        for (size_t c = 0; c + 110 <= (size_t)R * rb_in; c += 110) q3r_pack_chunk(&rows[c], &krows[c]);
    for (int lay = 0; lay < 4; lay++) {
        double t;
        switch (lay) {
        case 0: t = run_one<T, CBP, L_ROWS, RA>(cs, krows, (const uint8_t *)dxq, reps, dy, got, &by); break;
        case 1: t = run_one<T, CBP, L_PAD, RA>(cs, krows, (const uint8_t *)dxq, reps, dy, got, &by); break;
        case 2: t = run_one<T, CBP, L_INTER, RA>(cs, krows, (const uint8_t *)dxq, reps, dy, got, &by); break;
        default: t = run_one<T, CBP, L_INTER2, RA>(cs, krows, (const uint8_t *)dxq, reps, dy, got, &by); break;
        }
        if (lay == 0) { ref = got; t_rows = t; }
        const bool same = !memcmp(ref.data(), got.data(), sizeof(float) * R);
        bad += !same;
        /* the fraction counts the GGUF bytes (what the model reads), padding not included */
        printf("| %s | %s | %.2f us | %.0f GB/s | %.1f%% | %.2fx | %s |\n", cs.name, lname[lay], t, by / t / 1e3,
               100 * by / t / 1e3 / ceil_gbs, t_rows / t, same ? "bitwise equal" : "DIFFERS");
    }
    if (cs.q3r && cs.ncols == 4096 && cs.nrows % 8 == 0)   /* oct: another order of the same sums */
        for (int bps = 2; bps <= 3; bps++) {
            const double t = bps == 2 ? run_oct<2>(cs, rows, (const uint8_t *)dxq, reps, dy, got)
                                      : run_oct<3>(cs, rows, (const uint8_t *)dxq, reps, dy, got);
            double emax = 0, rmax = 0;
            for (int r = 0; r < R; r++) { emax = fmax(emax, fabs((double)got[r] - ref[r])); rmax = fmax(rmax, fabs((double)ref[r])); }
            const bool ok = emax <= 1e-5 * rmax;   /* NaN fails */
            bad += !ok;
            printf("| %s | oct, %d blocks a SM | %.2f us | %.0f GB/s | %.1f%% | %.2fx | %s (max err %.2g of %.3g) |\n", cs.name, bps, t,
                   by / t / 1e3, 100 * by / t / 1e3 / ceil_gbs, t_rows / t, ok ? "within 1e-5" : "DIFFERS", emax, rmax);
        }
    cudaFree(dx); cudaFree(dxq); cudaFree(dy);
    return bad;
}

int main(int argc, char **argv) {
    int reps = 5;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    int nd = 0;
    if (cudaGetDeviceCount(&nd) != cudaSuccess || !nd) { printf("SKIP: no CUDA device (bench_layout needs a GPU)\n"); return 77; }
    const double ceil_gbs = gpu_measure_d2d(0);
    printf("bench_layout: device copy bandwidth %.0f GB/s; fractions of it count the GGUF bytes\n\n", ceil_gbs);
    printf("| shape | layout | us a launch | GB/s | of copy BW | vs rows | outputs |\n|---|---|---|---|---|---|---|\n");
    int bad = 0;
    bad += run_case<Q8W_Q3_K, 112, 1>({ "air gate|up Q3_K 22528x4096, 2 lanes", 3, 22528, 4096, 1, 0 }, reps, ceil_gbs);
    bad += run_case<Q8W_Q3_KR, 112, 1>({ "air gate|up Q3_K as q3r 22528x4096, 4 lanes", 3, 22528, 4096, 2, 1 }, reps, ceil_gbs);
    bad += run_case<Q8W_Q4_0, 144, 1>({ "air down Q4_0 32768x1408, 2 lanes", 0, 32768, 1408, 1, 0 }, reps, ceil_gbs);
    bad += run_case<Q8W_Q4_K, 144, 16>({ "air q|k Q4_K 13312x4096, 4 lanes", 4, 13312, 4096, 2, 0 }, reps, ceil_gbs);
    bad += run_case<Q8W_Q4_K, 144, 16>({ "Q4_K 13312x4096, 2 lanes", 4, 13312, 4096, 1, 0 }, reps, ceil_gbs);
    printf("\n%s\n", bad ? "FAIL: a layout's outputs differ" : "every layout's outputs bitwise equal");
    return bad != 0;
}
