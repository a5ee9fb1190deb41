/* gpu_stub.c - the CUDA target's C interface in a CPU-only build: no devices. */
#include "gpu.h"
#include <stdio.h>

int gpu_device_count(void) { return 0; }
const char *gpu_describe(int dev, char *buf, size_t cap) { snprintf(buf, cap, "no CUDA in this build"); (void)dev; return buf; }
int gpu_built(void) { return 0; }
double gpu_measure_d2d(int dev) { (void)dev; return 0; }
double gpu_measure_h2d(int dev) { (void)dev; return 0; }
size_t gpu_mem_used(int dev) { (void)dev; return 0; }
