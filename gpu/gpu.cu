/* gpu.cu - CUDA target: device discovery (kernels arrive with the [cuda] work). */
#include "gpu.h"
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" int gpu_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n;
}

extern "C" const char *gpu_describe(int dev, char *buf, size_t cap) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) { cudaGetLastError(); snprintf(buf, cap, "device %d: unavailable", dev); return buf; }
    snprintf(buf, cap, "device %d: %s, %.1f GiB, sm_%d%d, %d SMs", dev, p.name, (double)p.totalGlobalMem / (1 << 30),
             p.major, p.minor, p.multiProcessorCount);
    return buf;
}

extern "C" int gpu_built(void) { return 1; }
