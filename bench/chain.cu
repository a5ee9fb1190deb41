/* chain.cu - what a dependent GEMV's boundary costs, and what one persistent grid would save.
 *
 * The decode step is a chain of launches, each a GEMV whose input is the one before's output. On
 * both cards a one-wave GEMV launch costs ~1.9 us past its bytes (bench_layout --sweep): the launch,
 * the ramp to full rate and the tail, during which HBM is partly idle. The question this answers
 * is whether one persistent grid (every block resident, a counter per step instead of a kernel
 * boundary) would get that time back by staging its share of the NEXT matrix in shared memory
 * while it waits for the rest of the grid: the weights do not depend on the step before, so the
 * only thing a block must wait for is x.
 *
 * The chain: L matrices W_i (rows x cols int8, each its own copy; together past L2), x_0 given;
 * step i computes y_i = W_i x_i (dp4a, int32), and x_{i+1} is the int8 (y ^ y >> 7) of y_i's first
 * cols rows. Block b of G takes rows [b R / G, (b + 1) R / G), warp w of them the rows lo + w,
 * lo + w + 8, ...; a lane eight 16-byte loads a row (L1::no_allocate, as the model's GEMVs). Forms:
 *   pdl      one launch a step, each waiting (griddepcontrol.wait) and triggering its dependents
 *            right after (hm_launch: the decode step's way);
 *   plain    the same without the programmatic attribute (full serialization); and pdl with the
 *            trigger left to the blocks' exit, and pdl with 50 KB of shared memory a block (two a SM
 *            at the 50% carveout: no room for a dependent's block before this launch's leave);
 *   grid S   one cooperative launch for all L steps: a block ends step i, arrives on counter i
 *            (release), copies the first S rows of each of its warps' rows of W_{i+1} into shared
 *            memory (cp.async), then waits for counter i to reach G (acquire) and reads x_{i+1}
 *            from L2; S = 0 stages nothing (the software wait alone). "a row in registers": each warp's
 *            first row past the staged ones also loaded into registers before the wait;
 *            "no wait": the same grid without the counters' wait (timing only, x may be stale): the
 *            chain's time if a boundary cost nothing, what the forms above are set against.
 * Every form sums in the same order: the last step's outputs must be bitwise pdl's (checked, and the
 * program fails otherwise). Time: one CUDA graph of the chain, replayed; us a step and the step's
 * bytes against the device's copy bandwidth, and what each step costs past its bytes at that rate.
 *
 *   bench_chain [--steps L] [--reps N]     (exit 77 without a GPU) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <vector>
#include "launch.cuh"
#include "blockops.cuh"   /* cp_async16 */
#include "gpu.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "bench_chain: %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#include "bench_gpu.cuh"   /* row_dot, dot16, warp_isum, graph_us */

enum { NT = 256, NW = NT / 32, LPR = 8 };   /* threads a block, warps, 16-byte loads a lane a row (rows of 4096) */

__device__ __forceinline__ int row_dot_smem(const uint4 *w, const uint4 *xs, int lane) {
    int acc = 0;
#pragma unroll
    for (int j = 0; j < LPR; j++) acc = dot16(w[lane + 32 * j], xs[lane + 32 * j], acc);
    return warp_isum(acc);
}
__device__ __forceinline__ void put(int *y, int8_t *xo, int r, int cols, int v) {
    y[r] = v;
    if (r < cols) xo[r] = (int8_t)(v ^ (v >> 7));
}
/* x (cols int8, written by the step before, maybe in this grid) into shared memory, from L2 */
__device__ __forceinline__ void load_x(uint4 *xs, const int8_t *x, int cols) {
    for (int i = threadIdx.x; i < cols / 16; i += NT) xs[i] = __ldcg((const uint4 *)x + i);
}

/* pdl / plain: one step */
__global__ void __launch_bounds__(NT, 2) k_step(const uint8_t *w, const int8_t *x, int *y, int8_t *xo, int rows, int cols, int trig) {
    extern __shared__ uint4 xs[];
    hm_pdl_wait();
    if (trig) hm_pdl_trigger();   /* else as the block exits */
    load_x(xs, x, cols);
    __syncthreads();
    const int lo = (int)((long long)rows * blockIdx.x / gridDim.x), hi = (int)((long long)rows * (blockIdx.x + 1) / gridDim.x);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = lo + warp; r < hi; r += NW) {
        const int v = row_dot<LPR>((const uint4 *)(w + (size_t)r * cols), xs, lane);
        if (lane == 0) put(y, xo, r, cols, v);
    }
}

/* the first S rows of each warp's rows of this block (rows lo + w + 8 k, k < S) into st, S * NW rows of cols bytes */
__device__ __forceinline__ void stage(uint4 *st, const uint8_t *w, int lo, int hi, int cols, int S) {
    const int c16 = cols / 16;
    for (int k = 0; k < S; k++) {
        const int r = lo + (threadIdx.x / 32) + NW * k;
        if (r < hi)
            for (int i = threadIdx.x % 32; i < c16; i += 32) cp_async16(st + (size_t)(k * NW + threadIdx.x / 32) * c16 + i, w + (size_t)r * cols + 16 * i, true);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* grid S: every step in one cooperative launch; cnt[i] counts the blocks done with step i (zeroed before the launch) */
__global__ void __launch_bounds__(NT, 2) k_chain(const uint8_t *w0, size_t wstride, const int8_t *x0, int *y0, int8_t *xo0, int rows, int cols,
                                                 int steps, unsigned *cnt, int S, int mode) {
    extern __shared__ uint4 sm[];
    uint4 *xs = sm, *st = sm + cols / 16;
    const int lo = (int)((long long)rows * blockIdx.x / gridDim.x), hi = (int)((long long)rows * (blockIdx.x + 1) / gridDim.x);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c16 = cols / 16;
    if (S) stage(st, w0, lo, hi, cols, S);
    for (int i = 0; i < steps; i++) {
        const uint8_t *w = w0 + wstride * i;
        int *y = y0 + (size_t)rows * i;
        int8_t *xo = xo0 + (size_t)cols * i;
        /* mode 1: the warp's first row past the staged ones in registers before the wait (it does not depend on x) */
        const int r1 = lo + warp + NW * S;
        uint4 v1[LPR];
        if ((mode & 1) && r1 < hi)
#pragma unroll
            for (int j = 0; j < LPR; j++) v1[j] = ld_stream((const uint4 *)(w + (size_t)r1 * cols) + lane + 32 * j);
        if (i > 0 && !(mode & 2)) {   /* mode 2: no wait at all (timing only: x may be read before it is written) */
            if (threadIdx.x == 0) {
                unsigned v;
                do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(cnt + i - 1) : "memory");
                while (v < gridDim.x);
            }
            __syncthreads();
        }
        load_x(xs, i ? xo0 + (size_t)cols * (i - 1) : x0, cols);
        if (S) asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
        int k = 0;
        for (int r = lo + warp; r < hi; r += NW, k++) {
            int v;
            if (k < S) v = row_dot_smem(st + (size_t)(k * NW + warp) * c16, xs, lane);
            else if (k == S && (mode & 1)) {
                int acc = 0;
#pragma unroll
                for (int j = 0; j < LPR; j++) acc = dot16(v1[j], xs[lane + 32 * j], acc);
                v = warp_isum(acc);
            } else v = row_dot<LPR>((const uint4 *)(w + (size_t)r * cols), xs, lane);
            if (lane == 0) put(y, xo, r, cols, v);
        }
        __syncthreads();   /* every store of the block before the arrive; x's and the stage's reads done before they are refilled */
        if (threadIdx.x == 0) {
            __threadfence();
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(cnt + i) : "memory");
        }
        if (S && i + 1 < steps) stage(st, w + wstride, lo, hi, cols, S);
    }
}


int main(int argc, char **argv) {
    int steps = 32, reps = 20;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else { fprintf(stderr, "usage: bench_chain [--steps L] [--reps N]\n"); return 2; }
    if (steps < 2 || reps < 1) { fprintf(stderr, "bench_chain: --steps >= 2, --reps >= 1\n"); return 2; }
    int nd = 0;
    if (cudaGetDeviceCount(&nd) != cudaSuccess || !nd) { printf("SKIP: no CUDA device (bench_chain needs a GPU)\n"); return 77; }
    int sms = 0, coop = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    const double ceil_gbs = gpu_measure_d2d(0);
    const int cols = 32 * LPR * 16, G = 2 * sms;
    printf("bench_chain: %d dependent steps a graph, %d blocks of %d, rows of %d int8, device copy bandwidth %.0f GB/s\n\n", steps, G, NT,
           cols, ceil_gbs);
    printf("| rows (MB a step) | form | staged KB a block | us a step | of copy BW | us past bytes | last step's y |\n|---|---|---|---|---|---|---|\n");
    const int rowss[] = { 2560, 7680 };   /* ~10 and ~31 MB a step: air's smaller and larger launches */
    int bad = 0;
    for (int rows : rowss) {
        const size_t mb = (size_t)rows * cols;
        uint8_t *w;
        CK(cudaMalloc(&w, mb * steps));
        {   /* every step's matrix different (a xorshift per word), so no two steps read the same bytes */
            std::vector<uint32_t> h(mb / 4);
            uint64_t s = 0x9E3779B97F4A7C15ull;
            for (int i = 0; i < steps; i++) {
                for (auto &v : h) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; v = (uint32_t)(s >> 20); }
                CK(cudaMemcpy(w + mb * i, h.data(), mb, cudaMemcpyHostToDevice));
            }
        }
        int8_t *x0, *xo;
        int *y;
        unsigned *cnt;
        CK(cudaMalloc(&x0, cols));
        CK(cudaMalloc(&xo, (size_t)cols * steps));
        CK(cudaMalloc(&y, sizeof(int) * rows * steps));
        CK(cudaMalloc(&cnt, sizeof(unsigned) * steps));
        {
            std::vector<int8_t> h(cols);
            for (int i = 0; i < cols; i++) h[i] = (int8_t)((i * 37 + 11) % 255 - 127);
            CK(cudaMemcpy(x0, h.data(), cols, cudaMemcpyHostToDevice));
        }
        std::vector<int> ref(rows), got(rows);
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        const double bytes_us = mb / (ceil_gbs * 1e3);   /* a step's bytes at the copy bandwidth, us */
        auto report = [&](const char *form, int kb, double us, bool check) {
            CK(cudaMemcpy(got.data(), y + (size_t)rows * (steps - 1), sizeof(int) * rows, cudaMemcpyDeviceToHost));
            const bool same = !check || memcmp(got.data(), ref.data(), sizeof(int) * rows) == 0;
            bad += !same;
            printf("| %d (%.1f) | %s | %d | %.2f | %.1f%% | %.2f | %s |\n", rows, mb / 1e6, form, kb, us, 100 * bytes_us / us, us - bytes_us,
                   check ? (same ? "= pdl" : "DIFFERS") : strcmp(form, "pdl") ? "not checked" : "reference");
        };
        /* {pdl, trigger after the wait, shared memory a block}: k_step's 74 registers let a third block on a SM, so
         * a dependent placed early takes it; 50 KB a block leaves room for two only (at the 50% carveout every
         * launch here asks for, hm_carveout_set: ~114 KB a SM) */
        static const int sforms[][3] = { { 1, 1, 0 }, { 0, 0, 0 }, { 1, 0, 0 }, { 1, 1, 50 << 10 } };
        static const char *sname[] = { "pdl", "plain", "pdl, trigger at exit", "pdl, two blocks a SM at most" };
        for (int fi = 0; fi < 4; fi++) {
            const int pdl = sforms[fi][0], trig = sforms[fi][1];
            const size_t smem = sforms[fi][2] ? (size_t)sforms[fi][2] : (size_t)cols;
            if (smem > 48 * 1024) CK(cudaFuncSetAttribute(k_step, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            CK(cudaMemset(y, 0xFF, sizeof(int) * rows * steps));
            const double us = graph_us(s, reps, [&](cudaStream_t st) {
                for (int i = 0; i < steps; i++)
                    CK(hm_launch_pdl(k_step, dim3(G), dim3(NT), smem, st, pdl, w + mb * i, i ? xo + (size_t)cols * (i - 1) : x0,
                                     y + (size_t)rows * i, xo + (size_t)cols * i, rows, cols, trig));
            }) / steps;
            if (fi == 0) CK(cudaMemcpy(ref.data(), y + (size_t)rows * (steps - 1), sizeof(int) * rows, cudaMemcpyDeviceToHost));
            report(sname[fi], 0, us, fi != 0);
        }
        if (!coop) { printf("| %d | grid | - | no cooperative launch on this device | | | |\n", rows); }
        static const int forms[][2] = { { 0, 0 }, { 1, 0 }, { 2, 0 }, { 3, 0 }, { 0, 1 }, { 1, 1 }, { 2, 1 }, { 1, 2 }, { 1, 3 } };   /* {S, mode} */
        for (int fi = 0; coop && fi < (int)(sizeof forms / sizeof forms[0]); fi++) {
            const int S = forms[fi][0], mode = forms[fi][1];
            const size_t smem = (size_t)cols + (size_t)S * NW * cols;
            if (smem > 48 * 1024) CK(cudaFuncSetAttribute(k_chain, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            int per = 0;
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_chain, NT, smem));
            if (per < 2) { printf("| %d | grid | %zu | does not fit two blocks a SM | | | |\n", rows, S * NW * (size_t)cols / 1024); continue; }
            CK(cudaMemset(y, 0xFF, sizeof(int) * rows * steps));
            const double us = graph_us(s, reps, [&](cudaStream_t st) {
                CK(cudaMemsetAsync(cnt, 0, sizeof(unsigned) * steps, st));
                cudaLaunchConfig_t cfg = {};
                cfg.gridDim = dim3(G);
                cfg.blockDim = dim3(NT);
                cfg.dynamicSmemBytes = smem;
                cfg.stream = st;
                cudaLaunchAttribute at[1];
                at[0].id = cudaLaunchAttributeCooperative;
                at[0].val.cooperative = 1;
                cfg.attrs = at;
                cfg.numAttrs = 1;
                CK(cudaLaunchKernelEx(&cfg, k_chain, (const uint8_t *)w, mb, (const int8_t *)x0, y, xo, rows, cols, steps, cnt, S, mode));
            }) / steps;
            static const char *fname[] = { "grid", "grid, a row in registers", "grid, no wait (timing only)", "grid, regs, no wait (timing only)" };
            report(fname[mode], (int)(S * NW * (size_t)cols / 1024), us, !(mode & 2));
        }
        cudaStreamDestroy(s);
        cudaFree(w); cudaFree(x0); cudaFree(xo); cudaFree(y); cudaFree(cnt);
    }
    printf("\n%s\n", bad ? "FAIL: a form's last outputs differ from pdl's" : "every form's last outputs bitwise pdl's");
    return bad != 0;
}
