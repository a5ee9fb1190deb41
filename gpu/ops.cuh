/* ops.cuh - launchers of the small GPU ops of the forward pass (norms, RoPE, attention, router,
 * reductions). Each has a CPU reference in cpu/ and a test in tests/test_gpu_ops.cu. */
#pragma once
#include <cuda_runtime.h>


void op_rmsnorm(const float *x, const float *w, float *out, int n, float eps, cudaStream_t s);
/* q/k/v post-processing for one token: bias, per-head RMSNorm (q_norm/k_norm may be NULL),
 * NeoX RoPE on the first n_rot dims at position *pos, then k and v written to the caches at *pos. */
void op_qkv_post(float *q, float *k, const float *v, const float *bq, const float *bk, const float *bv,
                 const float *qn, const float *kn, int n_head, int n_head_kv, int hd, int n_rot, float theta,
                 float eps, const int *pos, float *kcache, float *vcache, cudaStream_t s);
/* Batched steps: rows tokens at once (row r: q|k|v at q + r * qs, position pos[r], the caches of
 * sequence seq[r], kcache + seq[r] * seq_stride); op_qkv_post is rows 1 without seq. */
void op_qkv_post_seq(float *q, float *k, const float *v, const float *bq, const float *bk, const float *bv,
                     const float *qn, const float *kn, int n_head, int n_head_kv, int hd, int n_rot, float theta,
                     float eps, const int *pos, float *kcache, float *vcache, const int *seq, long long seq_stride, int rows,
                     long long qs, cudaStream_t s);
/* Decode attention (split-K flash decoding, one pass over each kv head for all its q heads; the
 * splits used follow *pos) over positions [0, *pos]; out (n_head*hd). hd % 4 == 0, hd <= 256,
 * n_head % n_head_kv == 0; q, caches 16-byte aligned. part: scratch of op_attn_part_floats(n_head,
 * n_head_kv, hd) floats. */
size_t op_attn_part_floats(int n_head, int n_head_kv, int hd);
void op_attn_decode(const float *q, const float *kcache, const float *vcache, float *out, float *part, int n_head,
                    int n_head_kv, int hd, int n_ctx, const int *pos, cudaStream_t s, int form = 0);
/* form (op_attn_decode and op_attn_decode_q8): 0 the attention for contexts that fit one round of
 * blocks; 1 the long-context one, as HOTMOE_ATT_LONG says: k_attn_quad (3, the default) or
 * k_attn_long (2) where it applies (hd 128, 8 or 12 q heads a kv head), else the CPA form (head sizes
 * 64, 128, 256 with a warp a head; else form 0's kernel). The CPA form and k_attn_quad give form 0's
 * values bit for bit (the same splits and sums); k_attn_long sums otherwise. Forms 2, 3 and 4 ask
 * for k_attn_long, k_attn_quad and the CPA form whatever the setting (tests).
 * op_attn_long_from: the context length (positions) from which form 1 runs in fewer rounds than form
 * 0 on this device, 0 when never (or HOTMOE_ATT_LONG=0). */
int op_attn_long_from(int n_head, int n_head_kv, int hd);
/* The same for rows tokens (row r: q + r * qs, out + r * os, part + r * ps (op_attn_part_floats
 * each), position pos[r], the caches of sequence seq[r] as op_qkv_post_seq). form as above: 0,
 * 3 (k_attn_quad) and 4 (the CPA form) give every row the bits of a one-row step. xq: each row's
 * output's q8 records too, row r's at xq + r * xqs (gpu_q8_records' layout; 16-byte aligned). */
void op_attn_decode_seq(const float *q, const float *kcache, const float *vcache, float *out, float *part, int n_head,
                        int n_head_kv, int hd, int n_ctx, const int *pos, const int *seq, long long seq_stride, int rows,
                        long long qs, long long os, long long ps, cudaStream_t s, int form = 0, void *xq = nullptr,
                        long long xqs = 0);
/* A batched step's router logits (F32 router R, nrows x n; n 2048 or 4096): logits[b * ls + r] =
 * R[r] . x[b * n ..] for b < nb, each bitwise gpu_gemv's for that row. -1 (nothing launched) for
 * other shapes or unaligned pointers. */
int op_router_rows_gemv(const float *R, const float *x, float *logits, int n, int nrows, long long ls, int nb, cudaStream_t s);
/* rows vectors of n (x, out: row stride n), one block each; xq (or NULL): each row's output's q8
 * records too, row r's at xq + r * xqs (xqs >= gpu_q8_records_bytes(n), a multiple of 16; the
 * same for op_residual_norm_rows) */
void op_rmsnorm_rows(const float *x, const float *w, float *out, int n, int rows, float eps, cudaStream_t s, void *xq = nullptr,
                     long long xqs = 0);
/* op_residual_norm for rows tokens: row r's x, shared, out at + r * n, its y at + r * ys, its wt at + r * ws */
void op_residual_norm_rows(float *x, const float *y, long long ys, const float *wt, int ws, int k, const float *shared,
                           const float *w, float *out, int n, int rows, float eps, cudaStream_t s, void *xq = nullptr,
                           long long xqs = 0);
/* op_router for rows tokens: row r's logits at + r * n, ids at + r * k, w at + r * ws */
void op_router_rows(const float *logits, const float *bias, int n, int k, int fn, int norm, float scale, int n_group,
                    int topk_group, int *ids, float *w, int ws, int rows, cudaStream_t s);
/* x += sum_j wt[j] * y[j] (+ shared) (wt NULL: weights 1; y: [k][n]); then, when w is not NULL,
 * out = rmsnorm(x) * w. One launch for the residual update and the next norm. */
void op_residual_norm(float *x, const float *y, const float *wt, int k, const float *shared, const float *w, float *out,
                      int n, float eps, cudaStream_t s);
/* The same ops also writing their output's q8 records at xq (gpu_gemv.h: gpu_q8_records's bytes,
 * for gpu_gemv_q8x and gpu_gemv_experts_swiglu_q8x): inside the op where the output's 32-groups
 * fall on whole warps (n % 256 == 0; heads of hd % 32 == 0), else by one more launch. xq NULL:
 * the plain op. */
void op_rmsnorm_q8(const float *x, const float *w, float *out, void *xq, int n, float eps, cudaStream_t s);
void op_residual_norm_q8(float *x, const float *y, const float *wt, int k, const float *shared, const float *w, float *out,
                         void *xq, int n, float eps, cudaStream_t s);
/* op_residual_norm_q8 with x + pre for x (pre NULL: the same op; an update op_router_norm_q8 left
 * unstored, added first, the order it had), and !store_x: x's update is not stored (-1 where the
 * shape takes the scalar kernel, which cannot leave it) */
int op_residual_norm_q8_ex(float *x, const float *pre, int store_x, const float *y, const float *wt, int k, const float *shared,
                           const float *w, float *out, void *xq, int n, float eps, cudaStream_t s);
/* The residual norm after the o-projection (x + y, normed by w into out and its q8 records xq) and
 * the router's F32 GEMV (R: nrows x n) into logits, in one launch, bitwise the two launches'
 * outputs; x is not updated (op_residual_norm_q8_ex adds y later); out and xq NULL: the logits
 * only. early: the next launch may start at this one's wait (it then must not read out or xq
 * before its own). rpb: router rows a block, 1, 2 or 4 (the same logits). op_router_norm_ok: the
 * shapes and weights it takes (n 2048 or 4096 on the norm's cluster or one-block form, at least
 * n / 1024 blocks; w and R 16-byte aligned, as x, y, out and xq must be). -1: not taken, nothing
 * launched. */
int op_router_norm_ok(int n, int nrows, int rpb, const float *w, const float *R);
int op_router_norm_q8(const float *x, const float *y, const float *w, const float *R, float *logits, float *out, void *xq, int n,
                      int nrows, float eps, int early, int rpb, cudaStream_t s);
/* Reads `count` spans of `unit` bytes, `stride` bytes apart from p (16-byte multiples), and
 * discards them, so that they sit in L2 for the kernel that reads them next: plain 16-byte loads,
 * one block a SM. (bench_layout --pf: a GEMV whose matrix a read kernel went through just before
 * runs ~1.35x faster; after cp.async.bulk.prefetch.L2 over it, ~1.04x.) For a second stream
 * beside latency-bound launches (exec.cu's HOTMOE_OWARM). */
void op_l2_warm(const void *p, size_t count, size_t unit, size_t stride, cudaStream_t s);
/* merge 0 (a diagnostic, HOTMOE_DIAG_SKIP=merge): the attention without its merge, out and xq left as they were */
void op_attn_decode_q8(const float *q, const float *kcache, const float *vcache, float *out, void *xq, float *part, int n_head,
                       int n_head_kv, int hd, int n_ctx, const int *pos, cudaStream_t s, int merge = 1, int form = 0);
/* Router: logits[n] -> ids[k], w[k], exactly as cpu/router.c (fn 1 softmax, 2 sigmoid). */
void op_router(const float *logits, const float *bias, int n, int k, int fn, int norm, float scale, int n_group,
               int topk_group, int *ids, float *w, cudaStream_t s);
/* The greedy choice of each of rows (1..AM_MAXROWS) rows of n logits (x: row stride n) into
 * out[rows] (device): sampler_argmax's rule (the first index of the largest value, NaNs never
 * win, x[0] NaN: 0). scratch: op_argmax_scratch_bytes(rows) bytes of device memory, zeroed once
 * before the first launch (the kernel leaves its counters zeroed again); launches of any rows up
 * to the scratch's may share it, one at a time. ring (one row; the greedy chain): the token also
 * into ring[*ring_n % ring_len], pinned host memory, and *ring_n (device) counted up. */
#define AM_BLOCKS 32
#define AM_MAXROWS 64
size_t op_argmax_scratch_bytes(int rows);
void op_argmax_rows(const float *x, int n, int rows, int *out, void *scratch, cudaStream_t s, int *ring = NULL, unsigned *ring_n = NULL,
                    int ring_len = 0);
