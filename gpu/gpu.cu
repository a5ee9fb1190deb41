/* gpu.cu - CUDA target: device discovery (kernels arrive with the [cuda] work). */
#include "gpu.h"
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

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

extern "C" double gpu_measure_d2d(int dev) {
    size_t n = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0, e1;
    if (cudaSetDevice(dev) != cudaSuccess || cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) {
        cudaGetLastError(); cudaFree(a); return 0;
    }
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    float best = 1e30f;
    for (int i = 0; i < 5; i++) {
        float ms;
        cudaEventRecord(e0);
        cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1); cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        if (ms < best) best = ms;
    }
    cudaEventDestroy(e0); cudaEventDestroy(e1); cudaFree(a); cudaFree(b);
    return 2.0 * n / (best * 1e-3) / 1e9;
}

extern "C" size_t gpu_mem_used(int dev) {
    size_t fr = 0, tot = 0;
    if (cudaSetDevice(dev) != cudaSuccess || cudaMemGetInfo(&fr, &tot) != cudaSuccess) { cudaGetLastError(); return 0; }
    return tot - fr;
}

extern "C" double gpu_measure_h2d(int dev) {
    size_t n = (size_t)256 << 20;
    void *h = NULL, *d = NULL;
    cudaEvent_t e0, e1;
    if (cudaSetDevice(dev) != cudaSuccess || cudaMallocHost(&h, n) != cudaSuccess || cudaMalloc(&d, n) != cudaSuccess) {
        cudaGetLastError(); if (h) cudaFreeHost(h); return 0;
    }
    memset(h, 1, n);
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    float best = 1e30f;
    for (int i = 0; i < 5; i++) {
        float ms;
        cudaEventRecord(e0);
        cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, 0);
        cudaEventRecord(e1); cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        if (ms < best) best = ms;
    }
    cudaEventDestroy(e0); cudaEventDestroy(e1); cudaFreeHost(h); cudaFree(d);
    return (double)n / (best * 1e-3) / 1e9;
}
