/* cluster.cu - whether q|k|v and the attention could share one launch of thread-block clusters.
 *
 * The lead (bench/README.md, fifty-sixth pass): one cluster per kv head computes that head's q, k
 * and v rows, stages the head's past K/V in its shared memory while the GEMV streams, then merges
 * the attention inside the cluster (distributed shared memory) instead of through a second launch.
 * That drops two boundaries a layer and the K/V round trip after q|k|v, which is where the H200's
 * extra ~1.4 us a layer goes (fifty-third pass). Before anyone writes it, three facts decide it:
 *   1. whether 8 clusters of 16 blocks (air: 8 kv heads) are resident at once at one block a SM
 *      with ~100 KB of shared memory each (cudaOccupancyMaxActiveClusters; GPCs differ in SMs);
 *   2. what a GEMV of q|k|v's size (~33 MB) costs on 128 blocks in clusters against the decode's
 *      grid of two blocks a SM (each launch on its own copy of the matrix: no L2 reuse);
 *   3. what the cluster's barrier and a gather of 12 heads x 128 floats from the other 15 blocks'
 *      shared memory add after it.
 * Forms (one launch a step, PDL-chained as the decode's launches, in one CUDA graph):
 *   grid        2 x SMs blocks, 2 a SM, no cluster (the decode's GEMV grid);
 *   cl16        128 blocks in clusters of 16 (non-portable size), 1 a SM (100 KB of shared memory);
 *   cl8         128 blocks in clusters of 8, 1 a SM;
 *   cl16+merge  cl16, then cluster.sync() and each block reads its 1/16 of the head's 12 x 128
 *               floats from the other blocks' shared memory, sums and writes them (the merge's shape).
 * Every form computes the same rows with the same sums: the GEMV outputs must equal the grid's
 * (checked; the program fails otherwise).
 *
 *   bench_cluster [--steps L] [--reps N]     (exit 77 without a GPU) */
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <vector>
#include "launch.cuh"
#include "gpu.h"

namespace cg = cooperative_groups;

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "bench_cluster: %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#include "bench_gpu.cuh"   /* row_dot, graph_us */

enum { NT = 256, NW = NT / 32, LPR = 8, COLS = 32 * LPR * 16, HEADS = 12, HD = 128, STAGE = 100 << 10 };

/* block b of the grid takes rows [b R / G, (b + 1) R / G); MERGE (clusters only): then the cluster's
 * barrier and each block's share of the head's HEADS x HD floats gathered from every block's shared
 * memory (the attention's split outputs, here the block's own rows' sums as floats) */
template <bool MERGE>
__global__ void __launch_bounds__(NT, 1) k_gemv(const uint8_t *w, const int8_t *x, int *y, float *m, int rows) {
    extern __shared__ uint4 sm[];
    uint4 *xs = sm;                                   /* x: COLS bytes */
    float *part = (float *)(sm + COLS / 16);          /* HEADS x HD floats: this block's "split" */
    hm_pdl_wait();
    hm_pdl_trigger();
    for (int i = threadIdx.x; i < COLS / 16; i += NT) xs[i] = __ldg((const uint4 *)x + i);
    __syncthreads();
    const int lo = (int)((long long)rows * blockIdx.x / gridDim.x), hi = (int)((long long)rows * (blockIdx.x + 1) / gridDim.x);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int last = 0;
    for (int r = lo + warp; r < hi; r += NW) {
        const int v = row_dot<LPR>((const uint4 *)(w + (size_t)r * COLS), xs, lane);
        if (lane == 0) y[r] = v;
        last = v;
    }
    if constexpr (MERGE) {
        cg::cluster_group cl = cg::this_cluster();
        for (int i = threadIdx.x; i < HEADS * HD; i += NT) part[i] = (float)(last + i);
        cl.sync();   /* every block's part is written */
        const int nb = (int)cl.num_blocks(), me = (int)cl.block_rank(), per = HEADS * HD / nb;
        for (int i = me * per + threadIdx.x; i < (me + 1) * per; i += NT) {
            float s = 0.f;
            for (int b = 0; b < nb; b++) s += cl.map_shared_rank(part, b)[i];
            m[(size_t)(blockIdx.x / nb) * HEADS * HD + i] = s;
        }
        cl.sync();   /* no block leaves while another still reads its shared memory */
    }
}


/* a launch of k on grid blocks, cluster blocks a cluster (0: none), PDL after the launch before */
template <bool MERGE>
static void launch(int grid, int cluster, size_t smem, cudaStream_t s, const uint8_t *w, const int8_t *x, int *y, float *m, int rows) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(NT);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[2];
    int n = 0;
    at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[n++].val.programmaticStreamSerializationAllowed = 1;
    if (cluster) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = cluster; at[n].val.clusterDim.y = 1; at[n++].val.clusterDim.z = 1;
    }
    cfg.attrs = at;
    cfg.numAttrs = n;
    CK(cudaLaunchKernelEx(&cfg, k_gemv<MERGE>, w, x, y, m, rows));
}

int main(int argc, char **argv) {
    int steps = 16, reps = 20;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else { fprintf(stderr, "usage: bench_cluster [--steps L] [--reps N]\n"); return 2; }
    if (steps < 2 || reps < 1) { fprintf(stderr, "bench_cluster: --steps >= 2, --reps >= 1\n"); return 2; }
    int nd = 0;
    if (cudaGetDeviceCount(&nd) != cudaSuccess || !nd) { printf("SKIP: no CUDA device (bench_cluster needs a GPU)\n"); return 77; }
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const double ceil_gbs = gpu_measure_d2d(0);
    const size_t smem1 = COLS + sizeof(float) * HEADS * HD;   /* the grid form's, and what the merge needs */
    const size_t smemc = STAGE;                                /* the cluster forms': one block a SM, room for K/V */
    for (int mg = 0; mg < 2; mg++) {
        auto k = mg ? k_gemv<true> : k_gemv<false>;
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smemc));
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    }
    /* 1. how many clusters of 8 and 16 are resident at once */
    printf("bench_cluster: %d SMs, device copy bandwidth %.0f GB/s, %d KB of shared memory a clustered block\n\n", sms, ceil_gbs,
           (int)(smemc >> 10));
    printf("| cluster size | clusters resident at once (1 block a SM) | blocks |\n|---|---|---|\n");
    int fit16 = 0;
    for (int cs : { 8, 16 }) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(128);
        cfg.blockDim = dim3(NT);
        cfg.dynamicSmemBytes = smemc;
        cudaLaunchAttribute at;
        at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim.x = cs; at.val.clusterDim.y = 1; at.val.clusterDim.z = 1;
        cfg.attrs = &at;
        cfg.numAttrs = 1;
        int nc = 0;
        const cudaError_t e = cudaOccupancyMaxActiveClusters(&nc, k_gemv<true>, &cfg);
        if (e != cudaSuccess) { printf("| %d | %s | |\n", cs, cudaGetErrorString(e)); cudaGetLastError(); continue; }
        printf("| %d | %d | %d |\n", cs, nc, nc * cs);
        if (cs == 16) fit16 = nc >= 8;
    }
    /* 2, 3: the GEMV at q|k|v's size and at a third of it, each step its own matrix */
    printf("\n| rows (MB a launch) | form | blocks | us a launch | of copy BW | us past bytes | outputs |\n|---|---|---|---|---|---|---|\n");
    int bad = 0;
    for (int rows : { 8192, 2560 }) {
        const size_t mb = (size_t)rows * COLS;
        uint8_t *w;
        CK(cudaMalloc(&w, mb * steps));
        {
            std::vector<uint32_t> h(mb / 4);
            uint64_t s = 0x9E3779B97F4A7C15ull;
            for (int i = 0; i < steps; i++) {
                for (auto &v : h) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; v = (uint32_t)(s >> 20); }
                CK(cudaMemcpy(w + mb * i, h.data(), mb, cudaMemcpyHostToDevice));
            }
        }
        int8_t *x;
        int *y;
        float *m;
        CK(cudaMalloc(&x, COLS));
        CK(cudaMalloc(&y, sizeof(int) * rows * steps));
        CK(cudaMalloc(&m, sizeof(float) * HEADS * HD * 16));
        {
            std::vector<int8_t> h(COLS);
            for (int i = 0; i < COLS; i++) h[i] = (int8_t)((i * 37 + 11) % 255 - 127);
            CK(cudaMemcpy(x, h.data(), COLS, cudaMemcpyHostToDevice));
        }
        std::vector<int> ref((size_t)rows * steps), got((size_t)rows * steps);
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        const double bytes_us = mb / (ceil_gbs * 1e3);
        struct form { const char *name; int grid, cluster, merge; size_t smem; };
        const form forms[] = { { "grid (2 a SM)", 2 * sms, 0, 0, smem1 }, { "cl16 (1 a SM)", 128, 16, 0, smemc },
                               { "cl8 (1 a SM)", 128, 8, 0, smemc }, { "cl16 + merge", 128, 16, 1, smemc } };
        for (int fi = 0; fi < 4; fi++) {
            const form &f = forms[fi];
            if (f.cluster == 16 && !fit16) { printf("| %d | %s | | 8 clusters of 16 are not resident at once: not run | | | |\n", rows, f.name); continue; }
            CK(cudaMemset(y, 0xFF, sizeof(int) * rows * steps));
            const double us = graph_us(s, reps, [&](cudaStream_t st) {
                for (int i = 0; i < steps; i++) {
                    if (f.merge) launch<true>(f.grid, f.cluster, f.smem, st, w + mb * i, x, y + (size_t)rows * i, m, rows);
                    else launch<false>(f.grid, f.cluster, f.smem, st, w + mb * i, x, y + (size_t)rows * i, m, rows);
                }
            }) / steps;
            CK(cudaMemcpy(got.data(), y, sizeof(int) * rows * steps, cudaMemcpyDeviceToHost));
            if (fi == 0) ref = got;
            const bool same = got == ref;
            bad += !same;
            printf("| %d (%.1f) | %s | %d | %.2f | %.1f%% | %.2f | %s |\n", rows, mb / 1e6, f.name, f.grid, us, 100 * bytes_us / us,
                   us - bytes_us, fi == 0 ? "reference" : same ? "= grid" : "DIFFER");
        }
        cudaStreamDestroy(s);
        cudaFree(w); cudaFree(x); cudaFree(y); cudaFree(m);
    }
    printf("\n%s\n", bad ? "FAIL: a form's outputs differ from the grid's" : "every form's outputs equal the grid's");
    return bad != 0;
}
