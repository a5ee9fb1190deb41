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

#ifdef __cplusplus
}
#endif
#endif
