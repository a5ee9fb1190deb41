/* graph_us.cuh - a bench program's timing of one CUDA graph: body(s) captured once, replayed reps
 * times in each of three rounds; the best round's us a replay. The includer defines CK(x), its
 * error check (bench/chain.cu, bench/cluster.cu). */
#pragma once
#include <cuda_runtime.h>

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
