/* gpu.h - the CUDA target behind a plain C header. In a CPU-only build every query answers
 * "no GPU" (gpu_stub.c), so callers need no #ifdefs. */
#ifndef HM_GPU_H
#define HM_GPU_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 in a CPU-only build or when no driver/device is present. */
int gpu_device_count(void);
/* One line describing device dev (name, memory), written into buf. Returns buf. */
const char *gpu_describe(int dev, char *buf, size_t cap);
/* Whether this binary was built with the CUDA target. */
int gpu_built(void);
/* Measured device-to-device copy bandwidth of device dev in GB/s (read + write bytes / time,
 * the convention of ../shared/design/DEVICE.md), or 0 without a GPU. */
double gpu_measure_d2d(int dev);
/* Pinned host-to-device cudaMemcpyAsync bandwidth in GB/s (best of several 256 MiB copies), 0 without a GPU. */
double gpu_measure_h2d(int dev);
/* Bytes of device memory in use on dev (total - free), 0 without a GPU. */
size_t gpu_mem_used(int dev);

#ifdef __cplusplus
}
#endif
#endif
