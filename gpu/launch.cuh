/* launch.cuh - kernel launches with Programmatic Dependent Launch (sm_90): a kernel launched by
 * hm_launch may be scheduled while the kernel before it in the stream is still draining, runs
 * what does not depend on it (e.g. prefetching weights), and calls hm_pdl_wait() before it reads
 * anything an earlier kernel wrote, or writes anything one may still read. Every kernel launched
 * through hm_launch must call hm_pdl_wait() first thing (or after such independent work).
 * HOTMOE_PDL=0 launches plainly (full serialization), for comparison. CUDA sources only. */
#ifndef HM_LAUNCH_CUH
#define HM_LAUNCH_CUH
#include <atomic>
#include <stdlib.h>
#include <cuda_runtime.h>

__device__ __forceinline__ void hm_pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static inline int hm_pdl_enabled(void) {
    static std::atomic<int> on(-1);
    int v = on.load(std::memory_order_relaxed);
    if (v < 0) {
        const char *env = getenv("HOTMOE_PDL");
        v = env && env[0] == '0' ? 0 : 1;
        on.store(v, std::memory_order_relaxed);
    }
    return v;
}

/* kernel<<<grid, block, smem, s>>>(args...) with the programmatic-serialization attribute */
template <typename... KArgs, typename... Args>
static inline cudaError_t hm_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                    Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = hm_pdl_enabled() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
}

#endif
