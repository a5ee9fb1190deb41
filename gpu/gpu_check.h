/* gpu_check.h - CUDA error checks that name file:line. For CUDA translation units only.
 * CUDA_CHECK returns -1 from the enclosing int function; CUDA_CHECK_OR runs any action instead
 * (e.g. `goto fail`, or `exit(1)` in a test's main). */
#ifndef HM_GPU_CHECK_H
#define HM_GPU_CHECK_H
#include <cuda_runtime.h>
#include <stdio.h>

#define CUDA_CHECK_OR(call, action)                                                          \
    do {                                                                                     \
        cudaError_t hm_err_ = (call);                                                        \
        if (hm_err_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,        \
                    cudaGetErrorName(hm_err_), cudaGetErrorString(hm_err_));                 \
            action;                                                                          \
        }                                                                                    \
    } while (0)

#define CUDA_CHECK(call) CUDA_CHECK_OR(call, return -1)

/* After a <<<launch>>>: configuration errors surface here, execution errors at the next sync. */
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#endif
