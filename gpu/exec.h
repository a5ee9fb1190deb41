/* exec.h - the GPU executor: a whole model resident on one GPU, one decode step = one CUDA graph.
 * Plain C so that src/ can drive it; every entry point reports failure through err. */
#ifndef HM_GPU_EXEC_H
#define HM_GPU_EXEC_H
#include <stddef.h>
#include <stdint.h>
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpu_exec gpu_exec;

/* Bytes of VRAM gpu_exec_create would allocate for m with n_ctx positions. */
size_t gpu_exec_vram_needed(const hm_model *m, int n_ctx);
/* Uploads m to device dev (everything but the token embeddings, which stay in host memory) and
 * allocates the KV cache for n_ctx positions. NULL on failure, with err naming what and how much. */
gpu_exec *gpu_exec_create(const hm_model *m, int dev, int n_ctx, char *err, size_t errlen);
void gpu_exec_free(gpu_exec *g);
/* Runs token at position pos (positions in order from 0). logits (n_vocab floats, host) may be
 * NULL to skip the output head. Returns 0, or -1 with err set. */
int gpu_exec_forward(gpu_exec *g, int32_t token, int pos, float *logits, char *err, size_t errlen);
size_t gpu_exec_vram_used(const gpu_exec *g);

/* Batched prefill (gpu/prefill.cu): runs tokens[0..n) at positions pos0..pos0+n-1 in chunks
 * (4096 tokens, or HOTMOE_PREFILL_CHUNK; smaller when VRAM is short), fills the KV cache so that
 * decode continues at pos0 + n, and writes the last token's logits (n_vocab floats) when
 * logits_last is not NULL. Weights are dequantized to F16 and multiplied with F16 activations
 * (F32 accumulation), so logits differ from gpu_exec_forward's by that rounding. The workspace is
 * allocated on the first call and kept until gpu_exec_free. Returns 0, or -1 with err set (n <= 0,
 * positions past n_ctx, a token outside the vocabulary, out of memory, a CUDA error). */
int gpu_exec_prefill(gpu_exec *g, const int32_t *tokens, int n, int pos0, float *logits_last, char *err, size_t errlen);
/* Bytes of VRAM the prefill workspace takes for chunks of chunk tokens (<= 0: the default). The
 * opt-in HOTMOE_PREFILL_ATTN=mma2 kernel adds 4 * n_ctx * kv_dim bytes (F16 copies of one layer's K, V). */
size_t gpu_exec_prefill_workspace(const hm_model *m, int chunk);
/* Bytes the prefill workspace of g holds now (0 before the first prefill). */
size_t gpu_exec_prefill_bytes(const gpu_exec *g);

#ifdef __cplusplus
}
#endif
#endif
