/* exec_stub.c - the GPU executor in a build without it: nothing can be created. */
#include <stdio.h>
#include "exec.h"
size_t gpu_exec_vram_needed(const hm_model *m, int n_ctx) { (void)m; (void)n_ctx; return 0; }
gpu_exec *gpu_exec_create(const hm_model *m, int dev, int n_ctx, char *err, size_t errlen) {
    (void)m; (void)dev; (void)n_ctx;
    snprintf(err, errlen, "gpu: this binary was built without CUDA");
    return NULL;
}
void gpu_exec_free(gpu_exec *g) { (void)g; }
int gpu_exec_forward(gpu_exec *g, int32_t token, int pos, float *logits, char *err, size_t errlen) {
    (void)g; (void)token; (void)pos; (void)logits;
    snprintf(err, errlen, "gpu: this binary was built without CUDA");
    return -1;
}
size_t gpu_exec_vram_used(const gpu_exec *g) { (void)g; return 0; }
int gpu_exec_prefill(gpu_exec *g, const int32_t *tokens, int n, int pos0, float *logits_last, char *err, size_t errlen) {
    (void)g; (void)tokens; (void)n; (void)pos0; (void)logits_last;
    snprintf(err, errlen, "gpu: this binary was built without CUDA");
    return -1;
}
size_t gpu_exec_prefill_workspace(const hm_model *m, int chunk) { (void)m; (void)chunk; return 0; }
size_t gpu_exec_prefill_bytes(const gpu_exec *g) { (void)g; return 0; }
