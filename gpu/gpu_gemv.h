/* gpu_gemv.h - quantized matrix-vector products for decode and dequantization for prefill tiles, on
 * the GPU, for every type of cpu/quant.h's table (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K
 * Q4_K Q5_K Q6_K MXFP4 IQ4_XS). Plain C; streams are cudaStream_t passed as void* (NULL: default).
 *
 * Weights are row-major, row r at W + r * hm_row_size(type, ncols), in device memory that is
 * 16-byte aligned (cudaMalloc gives 256). x, y, act: device float arrays, 16-byte aligned.
 * Accumulation is F32 with F32 activations (no quantization of x): the result is the dot
 * product of the exactly dequantized weights with x, up to F32 rounding of the sum.
 * Every function enqueues on the stream and returns at once: 0, or -1 (nothing enqueued) for an
 * unsupported type, a bad size or alignment, or a failed launch; gpu_gemv_error() says which.
 * Execution errors surface at the caller's next synchronization. */
#ifndef HM_GPU_GEMV_H
#define HM_GPU_GEMV_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the GEMV and dequant kernels handle type (a ggml type id), else 0. */
int gpu_gemv_supported(int type);

/* y[r] = sum_c W[r][c] x[c] for r < nrows. ncols: a positive multiple of the type's block size. */
int gpu_gemv(int type, const void *W, const float *x, float *y, int ncols, int nrows, void *stream);

/* gpu_gemv with x's q8 records (made by gpu_q8_records or by an op that writes them beside its
 * output, see gpu/ops.cuh) at xq, NULL for none: the q8 path (mode 1) copies them instead of
 * quantizing x in every thread block; the results are bitwise gpu_gemv's. xq: 16-byte aligned,
 * gpu_q8_records_bytes(ncols) bytes, made from this x. */
int gpu_gemv_q8x(int type, const void *W, const float *x, const void *xq, float *y, int ncols, int nrows, void *stream);
/* gpu_gemv_q8x with the q/k/v post (bias, NeoX rotation, the cache write) in the launch's epilogue
 * (HOTMOE_QK_EPI): rows [0, rows0) plus b0 (may be NULL) rotated into d0, the others plus b1 rotated
 * into the cache row d1 + *pos * kvd; heads of hd rows whose first n_rot dims rotate at *pos by
 * theta (n_rot 0: a v matrix). Bitwise gpu_gemv_q8x followed by op_qkv_post. 0; -1 (error); 1 when
 * the launch does not take the shape (it needs mode 1, an interleaved matrix whose launch is one
 * round of blocks, and whole rotation pairs in each block's rows): the caller runs the two instead. */
int gpu_gemv_q8x_post(int type, const void *W, const float *x, const void *xq, int ncols, int nrows, const float *b0, const float *b1,
                      float *d0, float *d1, int rows0, int hd, int n_rot, float theta, int kvd, const int *pos, void *stream);
/* whether gpu_gemv_q8x_post takes this matrix and shape (1) or would answer 1 (0) */
int gpu_gemv_q8x_post_ok(int type, const void *W, int ncols, int nrows, int rows0, int hd, int n_rot);
/* gpu_gemv_q8x for the router: early 1 lets the next kernel on the stream launch as soon as every
 * block of the F32 path has passed its PDL wait (the q8 path's blocks let it at their last round
 * either way), so that a routed launch after it (xq_ready) copies x's records while it runs */
int gpu_gemv_router(int type, const void *W, const float *x, const void *xq, float *y, int ncols, int nrows, int early,
                    void *stream);

/* Bytes of x's q8 records (ncols a positive multiple of 32, at most 32768; else 0: the q8 path
 * does not take such rows), and one launch writing them (q8_quant32's values, gemv_q8.cuh). */
size_t gpu_q8_records_bytes(int ncols);
int gpu_q8_records(const float *x, int ncols, void *xq, void *stream);
/* The interleaved layout of expert matrices (resident experts by default; HOTMOE_INTER=0: off), laid
 * out for the register kernel's warps (gemv_q8.cu): bytes of the layout (0: not possible), the host
 * repack, and the registration of a device table whose matrices are so laid out (its launches must
 * take that layout's lanes). The batched prefill reads them with pf_deq_tab_inter. */
size_t gpu_q8_inter_bytes(int type, int ncols, int nrows, int nmat, int tok);
/* a chunk slot's bytes in that layout: a chunk of CB bytes padded to whole 16-byte words, except
 * one of words and a 2-byte tail (Q6_K's 210: 13 words and d), whose tails lie after the step's
 * words, 2 bytes a lane, with no padding */
#define HM_Q8_SLOT_BYTES(cb) ((cb) % 16 == 2 ? (cb) : ((cb) + 15) & ~15)
/* the lane shift of that layout (log2 of the lanes a row), or -1 */
int gpu_q8_inter_lanes(int type, int ncols, int nrows, int nmat, int tok);
/* the current device's SM count (cached per device; 132 when it cannot be read) */
int gpu_sm_count(void);
/* its row groups: how many, the bytes of one step of a group, the bytes from a group to the next */
int gpu_q8_inter_groups(int type, int ncols, int nrows, int nmat, int tok, int *ngroups, size_t *step_bytes, size_t *group_bytes);
int gpu_q8_inter_pack(int type, const void *src, int ncols, int nrows, int nmat, int tok, void *dst);
/* the same on threads host threads (0: its own choice, up to 16 for a big matrix; the same bytes
 * whatever the count) */
int gpu_q8_inter_pack_nt(int type, const void *src, int ncols, int nrows, int nmat, int tok, void *dst, int threads);
/* the same for a matrix whose GGUF rows are src[0]'s rows[0] rows, then src[1]'s rows[1], ... (nsrc
 * of them; q|k|v from its three matrices), and only its row groups [g0, g1) (gpu_q8_inter_groups; 0,
 * -1: all) into dst, which takes them from its start: the bytes gpu_q8_inter_pack puts at g0's group
 * onward; threads as above (1 for a staged chunk) */
int gpu_q8_inter_pack_src(int type, const void *const *src, const int *rows, int nsrc, int ncols, int nmat, int tok, void *dst,
                          int g0, int g1, int threads);
int gpu_q8_inter_register(const void *const *tab, int type, int ncols, int nrows, int nmat, int tok);
/* HOTMOE_AFFINE (1 by default, 0 turns it off; gpu_q8_affine_set for tests): a registered
 * table whose expert id's matrix is at base + id * stride is read that way (the launches compute
 * the address instead of loading it); gpu_exec then uploads a layer's resident experts into one
 * allocation at a fixed stride and says so here. -1: tab not registered or stride <= 0. */
int gpu_q8_affine(void);
void gpu_q8_affine_set(int on);
int gpu_q8_inter_affine(const void *const *tab, const void *base, int64_t stride);
/* forgets a table (before its memory is freed: an address reused by another table must not match) */
void gpu_q8_inter_unregister(const void *const *tab);
/* 1 when interleaved matrices of the type hold rearranged chunks (Q3_K: q3r unless HOTMOE_Q3R=0;
 * Q4_0: q4r unless HOTMOE_Q4R=0; read once; gemv_q8.cuh) */
int gpu_q8_rearranged(int type);
/* the lane shift tab's matrices are interleaved for, or -1 (not interleaved) */
int gpu_q8_inter_lshift(const void *tab);
/* gpu_q8_pair_begin, two gpu_gemv_q8x_post calls of one x (q|k of Q4_K or Q5_K, then v of Q6_K),
 * gpu_q8_pair_end: both GEMVs in one launch (the same rows, lanes and sums as two). End answers 1
 * when they went out as one, 0 when the first went alone after the second (or nothing was parked),
 * -1 when that launch failed. */
int gpu_q8_pair_ok(int t1, int t2);   /* 1: those types go out as one */
void gpu_q8_pair_begin(void);
int gpu_q8_pair_end(void *stream);
/* the next single-vector q8 launch on this thread on at most n blocks (n <= 0: no cap; spent by that
 * launch, which a post launch ignores): more rounds of rows a block, the same lanes and sums. For
 * HOTMOE_SHDOWN_GRID (gpu/exec.cu). */
void gpu_q8_grid_cap(int n);

/* The routed experts' SwiGLU launch that also picks them: every block runs the router's top-k
 * (router.cuh's router_topk: the op_router rule, groups not limited) over logits[n_expert] with
 * the selection bias (NULL: none), fn 2 sigmoid else softmax, norm, scale; block 0 stores the k
 * ids and weights to ids, w (for the down launch and the reduction); act as
 * gpu_gemv_experts_swiglu_q8x with those ids. q8 path only: gpu_gemv_experts_routed_ok says
 * whether it takes the shape (else -1). xq_ready 1 (with xq): the records were complete before
 * the previous kernel on the stream passed its PDL wait (they come from a kernel before the
 * router GEMV that precedes this launch), so every block copies them before its own wait. */
int gpu_gemv_experts_routed_ok(int type, int ncols, int n_expert, int k);
int gpu_gemv_experts_swiglu_routed(int type, const void *const *gate_tab, const void *const *up_tab, const float *logits,
                                   const float *bias, int n_expert, int fn, int norm, float scale, int *ids, float *w, int k,
                                   const float *x, const void *xq, float *act, int ncols, int nrows, int xq_ready, void *stream);

/* For b < nb: y[b * y_stride + r] = sum_c W[r][c] x[b * x_stride + c] (several tokens' vectors
 * times one matrix). In mode 1 the q8 path multiplies up to 4 vectors per launch, reading each
 * weight row once, with every vector's result bitwise that of gpu_gemv on it; otherwise (mode 0,
 * float types, shapes the q8 path does not take) the vectors go one by one through gpu_gemv.
 * x_stride: >= ncols, a multiple of 4 (rows stay 16-byte aligned); y_stride >= nrows. */
int gpu_gemv_batch(int type, const void *W, const float *x, int64_t x_stride, float *y, int64_t y_stride, int nb,
                   int ncols, int nrows, void *stream);
/* The same with the vectors' q8 records made beforehand (gpu_q8_records' layout, vector b's at xq +
 * b * xq_stride; both 16-byte aligned): copied instead of made again, bitwise the same results
 * (gpu_gemv_q8x on each vector where the batched kernel does not take the shape). */
int gpu_gemv_batch_q8x(int type, const void *W, const float *x, int64_t x_stride, const void *xq, int64_t xq_stride, float *y,
                       int64_t y_stride, int nb, int ncols, int nrows, void *stream);

/* For j < k, e = ids[j]: act[j][r] = silu(gate_e[r] . x) * (up_e[r] . x), one launch.
 * gate_tab, up_tab: DEVICE arrays of per-expert matrix pointers ([nrows][ncols] each), read at
 * run time (a cache manager may rewrite them between launches); ids: device [k]; x: [ncols],
 * shared by all k; act: [k][nrows]. k <= 65535. */
int gpu_gemv_experts_swiglu(int type, const void *const *gate_tab, const void *const *up_tab,
                            const int *ids, int k, const float *x, float *act, int ncols,
                            int nrows, void *stream);

/* The same with x's q8 records at xq (see gpu_gemv_q8x); bitwise the same results. */
int gpu_gemv_experts_swiglu_q8x(int type, const void *const *gate_tab, const void *const *up_tab, const int *ids, int k,
                                const float *x, const void *xq, float *act, int ncols, int nrows, void *stream);

/* The same with one x per group of kx consecutive slots: slot j reads x + (j / kx) * x_stride
 * (several tokens' experts in one launch: kx = top-k, x_stride = n_embd). Each slot's results are
 * those of gpu_gemv_experts_swiglu on its x, bit for bit. x_stride >= ncols, a multiple of 4. */
int gpu_gemv_experts_swiglu_x(int type, const void *const *gate_tab, const void *const *up_tab, const int *ids, int k,
                              const float *x, int64_t x_stride, int kx, float *act, int ncols, int nrows, void *stream);

/* For j < k: y[j] = W_{ids[j]} x[j], one launch (down projections; the caller combines the k
 * rows with the routing weights). w_tab: device table as above; x: [k][ncols]; y: [k][nrows]. */
int gpu_gemv_experts(int type, const void *const *w_tab, const int *ids, int k, const float *x,
                     float *y, int ncols, int nrows, void *stream);

/* gpu_gemv_experts with the slots' outputs in groups of ky: slot j writes y + (j / ky) *
 * y_group_stride + (j % ky) * nrows (several tokens' experts in one launch, each token's rows
 * followed by room for more, e.g. the CPU's row). Each slot's results are gpu_gemv_experts's. */
int gpu_gemv_experts_y(int type, const void *const *w_tab, const int *ids, int k, const float *x, float *y, int ncols,
                       int nrows, int ky, int64_t y_group_stride, void *stream);

/* One expert slot (expert *id: the shared expert, a dense FFN as a one-entry table) for nb vectors
 * (several tokens): act[b * act_stride + r] = silu(gate[r] . x_b) * (up[r] . x_b), and
 * y[b * y_stride + r] = down[r] . x_b, with x_b = x + b * x_stride. Each vector's results are bitwise
 * what gpu_gemv_experts_swiglu_q8x (one slot) and gpu_gemv_experts (one slot) give it; in mode 1
 * the q8 path reads each weight row once for up to 4 vectors. Strides multiples of 4, x_stride >=
 * ncols, act_stride / y_stride >= nrows. xq (or NULL): the rows' q8 records (gpu_gemv_batch_q8x's). */
int gpu_gemv_swiglu_rows(int type, const void *const *gate_tab, const void *const *up_tab, const int *id, const float *x,
                         int64_t x_stride, int nb, float *act, int64_t act_stride, int ncols, int nrows, void *stream,
                         const void *xq, int64_t xq_stride);
int gpu_gemv_expert_rows(int type, const void *const *w_tab, const int *id, const float *x, int64_t x_stride, int nb, float *y,
                         int64_t y_stride, int ncols, int nrows, void *stream);

/* dst[i] = the i-th value of src dequantized exactly as the CPU's to_float does, rounded to
 * bf16 (out_f16 == 0) or f16 (out_f16 != 0) as hm_f32_to_bf16 / hm_f32_to_fp16 do: bit-identical
 * to the CPU path. n: element count, a multiple of the block size; src 2-byte aligned (block
 * boundaries of a matrix are; any address for MXFP4; 4 for F32), dst 8-byte aligned unless the
 * type is F32/F16/BF16 (then 2). */
int gpu_dequant(int type, const void *src, void *dst, int64_t n, int out_f16, void *stream);

/* out[0..n) = the row of an embedding table (GGUF rows of n values, row_bytes apart, on the device)
 * whose index is at *tok on the device (read when the kernel runs; clamped into [0, nvocab)), each
 * value as the CPU's to_float gives it; when pos is not NULL, *pos += 1 first (gpu_exec's greedy
 * chain: the step's token and position come from the step before). out 16-byte aligned.
 * gpu_embed_row_ok: whether a table of that type and row length has the kernel. */
int gpu_embed_row_ok(int type, int n);
int gpu_embed_row(int type, const void *table, size_t row_bytes, const int *tok, int nvocab, int *pos, float *out, int n, void *stream);

/* Selects the GEMV path of the block types for launches enqueued after the call, process-wide
 * (captured CUDA graphs keep what they captured): 0: F32 activations as described above;
 * 1 (default) x quantized to int8 per 32 values (d = amax/127, q = round-half-even(x * 127/amax),
 * see gpu/gemv_q8.cuh) and integer dot products (__dp4a): faster, and the result then differs from
 * the F32 one by the activation quantization (as the CPU's fast kernels do). Mode 1 covers
 * Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 MXFP4 when ncols % 32 == 0, Q2_K..Q6_K IQ4_XS when ncols % 256 == 0,
 * both up to ncols 32768; other calls stay on the F32 path. The initial mode is 0 when the
 * environment variable HOTMOE_GEMV_MODE is "0", else 1. Returns 0, or -1 for another mode. */
int gpu_gemv_set_mode(int mode);
/* the next single-vector q8 launch on this thread, if it is of a plain interleaved matrix (the output
 * head), runs its warps' units of HOTMOE_HEAD_TK steps by ticket (0, the default: not), the same
 * sums; counters: two unsigned on the device, zero, the launch's own (a launch leaves them zero),
 * NULL: none. Spent by that launch. */
void gpu_q8_head_tk(unsigned *counters);
/* HOTMOE_HEAD_TK's value from now on (0..64; -1: the environment's again), for the tests */
void gpu_q8_set_head_tk(int steps);
/* launches by ticket so far (gpu_q8_head_tk), for the tests */
long gpu_q8_tk_launches(void);

/* The reason for the last -1 returned on this thread by a function above. */
const char *gpu_gemv_error(void);

#ifdef __cplusplus
}
#endif
#endif
