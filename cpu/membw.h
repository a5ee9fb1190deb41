/* membw.h - the host's DRAM read ceiling, the one probe that bench/ and `hotmoe calibrate` use. */
#ifndef HM_MEMBW_H
#define HM_MEMBW_H
#include <stddef.h>

/* GB/s of reading bytes of buf with `threads` OpenMP threads, each summing its contiguous share
 * (AVX2 loads where the CPU has them): median of runs (1..64) after one warm-up pass. Make buf
 * larger than the last-level cache and first-touch it with the same threads. */
double cpu_dram_read_gbs(const void *buf, size_t bytes, int threads, int runs);

#endif
