/* bench_gpu.cuh - what bench/chain.cu and bench/cluster.cu share: a stand-in int8 GEMV row (dp4a,
 * weights not kept in L1, as the model's GEMVs read them), and graph_us, the timing of one CUDA
 * graph (body(s) captured once, replayed reps times in each of three rounds; the best round's us a
 * replay). The includer defines CK(x), its error check. */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {   /* a weight word, not kept in L1 */
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ int dot16(uint4 w, uint4 x, int acc) {
    acc = __dp4a((int)w.x, (int)x.x, acc);
    acc = __dp4a((int)w.y, (int)x.y, acc);
    acc = __dp4a((int)w.z, (int)x.z, acc);
    return __dp4a((int)w.w, (int)x.w, acc);
}
__device__ __forceinline__ int warp_isum(int v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}
/* one int8 row's dot on a warp: a lane's LPR words at lane, lane + 32, ... (each load instruction of the warp reads 512
 * contiguous bytes; rows of 32 LPR 16 bytes) against x's words in shared memory */
template <int LPR>
__device__ __forceinline__ int row_dot(const uint4 *w, const uint4 *xs, int lane) {
    uint4 v[LPR];
#pragma unroll
    for (int j = 0; j < LPR; j++) v[j] = ld_stream(w + lane + 32 * j);
    int acc = 0;
#pragma unroll
    for (int j = 0; j < LPR; j++) acc = dot16(v[j], xs[lane + 32 * j], acc);
    return warp_isum(acc);
}

template <class F>
static double graph_us(cudaStream_t s, int reps, F body) {
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    body(s);
    CK(cudaStreamEndCapture(s, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    double best = 1e30;
    for (int round = 0; round < 3; round++) {   /* the best of three rounds of reps replays */
        CK(cudaEventRecord(e0, s));
        for (int r = 0; r < reps; r++) CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best) best = ms;
    }
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge); cudaGraphDestroy(gr);
    return 1e3 * best / reps;
}
