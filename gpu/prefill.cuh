/* prefill.cuh - launchers of prefill_mma.cu's tensor-core kernels, for prefill.cu. */
#ifndef HM_PREFILL_CUH
#define HM_PREFILL_CUH
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* Causal flash attention for n tokens at positions pos0.. (q rows of qkv, ld floats apart) over the
 * F32 caches kc/vc ([pos][n_head_kv * hd]); out (n, n_head * hd) F16. -1 when hd is not 16, 32, 64
 * or 128 (nothing launched). */
int pf_flash_mma(const float *qkv, int ld, const float *kc, const float *vc, __half *out, int n, int pos0, int n_head,
                 int n_head_kv, int hd, float scale, cudaStream_t s);
/* The same with K and V converted once per call to F16 scratch (k16: np x kv_dim, vt16: kv_dim x np
 * halves, np = pos0 + n rounded up to 64) and double-buffered cp.async tiles (not yet run on a GPU;
 * HOTMOE_PREFILL_ATTN=mma2). -1 when hd is not 16, 32, 64 or 128 (nothing launched). */
int pf_flash_mma2(const float *qkv, int ld, const float *kc, const float *vc, __half *k16, __half *vt16, __half *out,
                  int n, int pos0, int n_head, int n_head_kv, int hd, float scale, cudaStream_t s);
/* For each tile {slot, row0, nrows, -} of tiles[0..n_tiles) (device): Y[row0 + r] (M floats) =
 * X[row0 + r] (K halves) . W_slot^T, W_slot = W + slot * wstride ([M][K] halves), r < nrows <= 128.
 * stages: 2 (the validated pipeline) or 4 (deeper, not yet run on a GPU). -1 when K % 8 != 0
 * (nothing launched). */
int pf_ggemm(const __half *W, int64_t wstride, const __half *X, float *Y, const int4 *tiles, int n_tiles, int M, int K,
             int stages, cudaStream_t s);

#endif
