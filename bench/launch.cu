/* launch.cu - what a kernel boundary costs inside a decode-step graph on this GPU: a CUDA graph of
 * N kernels captured on one stream, replayed, time per kernel. Each kernel waits for the one before
 * (griddepcontrol.wait, as every decode kernel does, gpu/launch.cuh), reads the value it wrote and
 * writes the next, so every boundary carries a real dependency. Shapes: 1 block (a norm), 104
 * blocks of 128 (qkv post), 264 of 256 (a GEMV's grid at two blocks per SM), 128 of 384 (the
 * attention's), and in thread block clusters that meet at one cluster barrier after the wait: 8
 * of 128 in one cluster (the residual norm's k_residual_norm_cl), 128 of 384 in clusters of 8 and
 * of 16 (session 13's k_attn_cl); each with the programmatic launch attribute (hm_launch, the
 * decode step's way) and without (HOTMOE_PDL=0's). Every thread stores a word just before the
 * barrier (as the residual norm stores x), and each cluster shape runs twice: with
 * cooperative_groups' cluster sync (its arrive has release semantics: sm_90's SASS is MEMBAR.ALL.GPU
 * before the arrive, so each thread waits for its store to reach L2) and with a relaxed arrive and a
 * wait ("fence" no: what k_residual_norm_clm's barrier is); the difference is the fence's cost.
 * With --work US each block also spins US microseconds (clock64) after its wait: the boundary's
 * cost is then the time per kernel minus US. Prints one line per case and a JSON line.
 *
 *   bench_launch [--kernels N] [--replays R] [--work US]
 *
 * It needs a GPU (exit 77 without one). The numbers bound what fusing kernels can save: a kernel
 * removed from the chain saves at most its boundary plus its own critical-path work. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "launch.cuh"
#include <cooperative_groups.h>

/* CL: the blocks of a cluster meet at one cluster barrier after the wait (1: cooperative groups'
 * sync, release/acquire; 2: relaxed arrive, then wait), 0: a block barrier. Each thread first
 * stores a word of scratch (a fence before the barrier waits for it). */
template <int CL>
__global__ void k_step(int *v, int *scratch, long long spin) {
    hm_pdl_wait();
    if (spin > 0) {
        const long long t0 = clock64();
        while (clock64() - t0 < spin) {}
    }
    scratch[blockIdx.x * blockDim.x + threadIdx.x] = v[0];
#if __CUDA_ARCH__ >= 900
    if (CL == 1) cooperative_groups::this_cluster().sync();
    else if (CL == 2) asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
    else __syncthreads();
#else
    __syncthreads();
#endif
    if (blockIdx.x == 0 && threadIdx.x == 0) v[1] = v[0] + 1, v[0] = v[1];
}

static cudaError_t launch(int pdl, int blocks, int threads, int cluster, int fence, cudaStream_t s, int *v, int *scratch,
                          long long spin) {
    return hm_launch_ex(cluster < 2 ? k_step<0> : fence ? k_step<1> : k_step<2>, dim3((unsigned)blocks), dim3((unsigned)threads), 0, s,
                        pdl, (unsigned)cluster, v, scratch, spin);
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "bench_launch: %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

int main(int argc, char **argv) {
    int n = 700, replays = 20;
    double work_us = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kernels") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--replays") && i + 1 < argc) replays = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--work") && i + 1 < argc) work_us = atof(argv[++i]);
        else { fprintf(stderr, "usage: bench_launch [--kernels N] [--replays R] [--work US]\n"); return 2; }
    }
    if (n < 1 || replays < 1 || work_us < 0) { fprintf(stderr, "bench_launch: --kernels and --replays >= 1, --work >= 0\n"); return 2; }
    int nd = 0;
    if (cudaGetDeviceCount(&nd) != cudaSuccess || nd == 0) { printf("SKIP: no CUDA device\n"); return 77; }
    int clk_khz = 0;
    CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));
    const long long spin = (long long)(work_us * clk_khz / 1000.0);
    int *v, *scratch;
    CK(cudaMalloc(&v, 2 * sizeof(int)));
    CK(cudaMalloc(&scratch, 264 * 512 * sizeof(int)));   /* a word a thread of the largest shape */
    CK(cudaMemset(v, 0, 2 * sizeof(int)));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    static const int shapes[][3] = { { 1, 512, 1 },   { 104, 128, 1 }, { 264, 256, 1 }, { 128, 384, 1 },
                                     { 8, 128, 8 },   { 128, 384, 8 }, { 128, 384, 16 } };
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    const int clusters = hm_cluster_ok();
    for (auto k : { k_step<1>, k_step<2> })
        if (clusters && cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) cudaGetLastError();
    int ncases = 0;
    printf("bench_launch: graph of %d dependent kernels, %d replays, work %.1f us a kernel (clock %d MHz)\n", n, replays, work_us, clk_khz / 1000);
    printf("| blocks x threads | cluster | fence | PDL | us per kernel | us per boundary (minus work) |\n|---|---|---|---|---|---|\n");
    for (int si = 0; si < nshapes; si++)
        for (int c = 0; c < 4; c++) {
            const int pdl = !(c & 1), fence = !(c & 2);   /* with the fence first, as before */
            if (shapes[si][2] > 1 && !clusters) continue;
            if (shapes[si][2] < 2 && !fence) continue;   /* a block barrier has no fence to leave out */
            ncases++;
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < n; i++) CK(launch(pdl, shapes[si][0], shapes[si][1], shapes[si][2], fence, s, v, scratch, spin));
            CK(cudaStreamEndCapture(s, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            CK(cudaGraphLaunch(ge, s));   /* warm-up */
            CK(cudaStreamSynchronize(s));
            CK(cudaEventRecord(e0, s));
            for (int r = 0; r < replays; r++) CK(cudaGraphLaunch(ge, s));
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            const double us = 1000.0 * ms / ((double)replays * n);
            printf("| %d x %d | %d | %s | %s | %.2f | %.2f |\n", shapes[si][0], shapes[si][1], shapes[si][2],
                   shapes[si][2] < 2 ? "-" : fence ? "yes" : "no", pdl ? "yes" : "no", us, us - work_us);
            printf("{\"blocks\": %d, \"threads\": %d, \"cluster\": %d, \"fence\": %d, \"pdl\": %d, \"work_us\": %.2f, "
                   "\"us_per_kernel\": %.3f}\n", shapes[si][0], shapes[si][1], shapes[si][2], fence, pdl, work_us, us);
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(g));
        }
    CK(cudaFree(scratch));
    int h[2];
    CK(cudaMemcpy(h, v, sizeof h, cudaMemcpyDeviceToHost));
    const long long want = (long long)n * (replays + 1) * ncases;
    if (h[0] != (int)want) { fprintf(stderr, "bench_launch: the chain counted %d, expected %lld\n", h[0], want); return 1; }
    return 0;
}
