/* prefill.cuh - launchers of prefill's kernels (prefill_ops.cu: the small batched ops and the
 * fallback attention kernels; prefill_mma.cu: the tensor-core kernels), for prefill.cu. Each
 * enqueues on s and returns at once; launch errors surface at the caller's cudaGetLastError. */
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

/* ---- prefill_ops.cu; rows: tokens of the chunk, n: row width ---- */

/* outf, outh (rows, n) = rmsnorm(x) * w, F32 and F16 */
void pf_rmsnorm(const float *x, const float *w, float *outf, __half *outh, int rows, int n, float eps, cudaStream_t s);
/* per row t: x += y[t] (rowidx NULL) or sum_j wt[t][j] * y[rowidx[t][j]] (j < k), then + shared[t]
 * (may be NULL); then, when w is not NULL, outf/outh = rmsnorm(x) * w */
void pf_resid_norm(float *x, const float *y, const float *wt, const int *rowidx, int k, const float *shared, const float *w,
                   float *outf, __half *outh, int rows, int n, float eps, cudaStream_t s);
/* per row (token at position pos0 + row) of qkv (q | k | v, ld floats): bias, q/k norm, NeoX RoPE on
 * n_rot dims; q rewritten in place, k and v (+ bias) written to the caches at the position */
void pf_qkv_post(float *qkv, int ld, const float *bq, const float *bk, const float *bv, const float *qn, const float *kn,
                 int n_head, int n_head_kv, int hd, int n_rot, float theta, float eps, int pos0, int rows, float *kcache,
                 float *vcache, cudaStream_t s);
/* Causal attention as pf_flash_mma: WMMA tiles with O in shared memory (hd 16, 32, 64, 128, 256;
 * else -1, nothing launched), or plain F32 (any hd <= 256, slow; a reference). */
int pf_attn_wmma(const float *qkv, int ld, const float *kc, const float *vc, __half *out, int n, int pos0, int n_head,
                 int n_head_kv, int hd, float scale, cudaStream_t s);
void pf_attn_simple(const float *qkv, int ld, const float *kc, const float *vc, __half *out, int n, int pos0, int n_head,
                    int n_head_kv, int hd, float scale, cudaStream_t s);
/* act (rows, ff) F16 = silu(gate) * up, gu rows gate (ff) | up (ff) */
void pf_swiglu(const float *gu, __half *act, int64_t rows, int ff, cudaStream_t s);
/* dst = src as F32 (F16, or BF16 when bf16) */
void pf_widen(const uint16_t *src, float *dst, int64_t n, int bf16, cudaStream_t s);
/* op_router per row: logits (rows, n) -> ids, w (rows, k); n <= 4096, k <= 64 */
void pf_router(const float *logits, const float *bias, int rows, int n, int k, int fn, int norm, float scale, int n_group,
               int topk_group, int *ids, float *w, cudaStream_t s);
/* The na = rows * k assignments ids[] grouped by expert, stably: cnt (2 ne + 2 ints) = counts, row
 * offsets (ne + 1), number used; used = the experts with rows, in order; perm[row] = assignment,
 * rowidx[assignment] = row; xg[row] = xh[assignment / k] (n halves) */
void pf_group(const int *ids, int na, int ne, int *cnt, int *used, int *perm, int *rowidx, const __half *xh, int k, __half *xg,
              int n, cudaStream_t s);
/* dst + s * dstride = the F16 values of expert ids[s]'s matrix tab[ids[s]] (nper values), s < nslots.
 * 0; -1 no kernel for the type; -2 nper is not whole blocks (nothing launched either way). */
int pf_deq_tab(int type, const void *const *tab, const int *ids, int nslots, int64_t nper, __half *dst, int64_t dstride,
               cudaStream_t s);
/* the same for tables whose matrices are in the decode GEMV's interleaved layout (gpu_q8_inter_pack
 * with type, ncols, nrows, nmat, tok): the values as GGUF rows. 0; -1 no such layout for the type and
 * shape; -2 dst or dstride not in 16-byte steps (nothing launched either way). */
int pf_deq_tab_inter(int type, const void *const *tab, const int *ids, int nslots, int ncols, int nrows, int nmat, int tok,
                     __half *dst, int64_t dstride, cudaStream_t s);
/* one plain matrix interleaved with nmat 1, one slot a token (the executor's attention projections and
 * head), to F16 GGUF rows at dst; the same returns */
int pf_deq_mat_inter(int type, const void *w, int ncols, int nrows, __half *dst, cudaStream_t s);

#endif
