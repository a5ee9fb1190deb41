/* exec_stub.c - the GPU executor in a build without it: nothing can be created. */
#include <stdio.h>
#include <string.h>
#include "exec.h"
size_t gpu_exec_vram_needed(const hm_model *m, int n_ctx) { (void)m; (void)n_ctx; return 0; }
gpu_exec *gpu_exec_create(const hm_model *m, int dev, int n_ctx, char *err, size_t errlen) {
    (void)m; (void)dev; (void)n_ctx;
    snprintf(err, errlen, "gpu: this binary was built without CUDA");
    return NULL;
}
void gpu_exec_free(gpu_exec *g) { (void)g; }
void gpu_exec_upload_threads_set(int n) { (void)n; }
void gpu_exec_upload_test_sizes(size_t chunk, size_t min_bytes) { (void)chunk; (void)min_bytes; }
size_t gpu_exec_expert_image(const hm_ffn_w *f, int tok, void *dst) { (void)f; (void)tok; (void)dst; return 0; }
int gpu_exec_forward(gpu_exec *g, int32_t token, int pos, float *logits, char *err, size_t errlen) {
    (void)g; (void)token; (void)pos; (void)logits;
    snprintf(err, errlen, "gpu: this binary was built without CUDA");
    return -1;
}
int gpu_exec_forward_stage(gpu_exec *g, int seq, int32_t token, const float *x_in, int pos, float *logits, float *x_out,
                           char *err, size_t errlen) {
    (void)g; (void)seq; (void)token; (void)x_in; (void)pos; (void)logits; (void)x_out;
    snprintf(err, errlen, "gpu: this binary was built without CUDA");
    return -1;
}
int gpu_exec_forward_greedy(gpu_exec *g, int seq, int32_t token, const float *x_in, int pos, int32_t *next, char *err,
                            size_t errlen) {
    (void)g; (void)seq; (void)token; (void)x_in; (void)pos; (void)next;
    snprintf(err, errlen, "gpu: this binary was built without CUDA");
    return -1;
}
int gpu_exec_greedy_chain(gpu_exec *g, int seq, int32_t token, int pos, int n, int32_t *out, int (*stop)(void *user, int i, int32_t token),
                          void *user, char *err, size_t errlen) {
    (void)g; (void)seq; (void)token; (void)pos; (void)n; (void)out; (void)stop; (void)user;
    snprintf(err, errlen, "gpu: this binary was built without CUDA");
    return -2;
}
int gpu_exec_forward_batch_greedy(gpu_exec *g, int nb, const int *seq, const int32_t *tokens, const float *x_in, const int *pos,
                                  int32_t *next, char *err, size_t errlen) {
    (void)g; (void)nb; (void)seq; (void)tokens; (void)x_in; (void)pos; (void)next;
    snprintf(err, errlen, "gpu: this binary was built without CUDA");
    return -1;
}
int gpu_exec_forward_batch(gpu_exec *g, int nb, const int *seq, const int32_t *tokens, const float *x_in, const int *pos,
                           float *logits, float *x_out, char *err, size_t errlen) {
    (void)g; (void)nb; (void)seq; (void)tokens; (void)x_in; (void)pos; (void)logits; (void)x_out;
    snprintf(err, errlen, "gpu: this binary was built without CUDA");
    return -1;
}
size_t gpu_exec_vram_needed_range(const hm_model *m, int n_ctx, int l0, int l1, int n_seq) {
    (void)m; (void)n_ctx; (void)l0; (void)l1; (void)n_seq;
    return 0;
}
size_t gpu_exec_vram_used(const gpu_exec *g) { (void)g; return 0; }
gpu_exec *gpu_exec_create_opts(const hm_model *m, int dev, int n_ctx, const gpu_exec_opts *o, char *err, size_t errlen) {
    (void)o;
    return gpu_exec_create(m, dev, n_ctx, err, errlen);
}
void gpu_exec_info(const gpu_exec *g, gpu_exec_layout *out) { (void)g; memset(out, 0, sizeof *out); }
int gpu_exec_cache_stats(gpu_exec *g, uint64_t out[GPU_CACHE_STATS], int reset, char *err, size_t errlen) {
    (void)g; (void)reset; for (int i = 0; i < GPU_CACHE_STATS; i++) out[i] = 0;
    snprintf(err, errlen, "gpu: this binary was built without CUDA");
    return -1;
}
void gpu_exec_cpu_stats(gpu_exec *g, uint64_t *bytes, double *busy_s, int reset) {
    (void)g; (void)reset; *bytes = 0; *busy_s = 0;
}
double gpu_cache_copy_rate(int n, size_t bytes, int reps) { (void)n; (void)bytes; (void)reps; return -1; }
const int *gpu_exec_route_ids(const gpu_exec *g) { (void)g; return NULL; }
int *gpu_exec_replay_ids(gpu_exec *g) { (void)g; return NULL; }
int gpu_exec_forward_seq(gpu_exec *g, int seq, int32_t token, int pos, float *logits, char *err, size_t errlen) {
    (void)seq;
    return gpu_exec_forward(g, token, pos, logits, err, errlen);
}
int gpu_exec_prefill(gpu_exec *g, const int32_t *tokens, int n, int pos0, float *logits_last, char *err, size_t errlen) {
    (void)g; (void)tokens; (void)n; (void)pos0; (void)logits_last;
    snprintf(err, errlen, "gpu: this binary was built without CUDA");
    return -1;
}
int gpu_exec_prefill_seq(gpu_exec *g, int seq, const int32_t *tokens, int n, int pos0, float *logits_last, char *err,
                         size_t errlen) {
    (void)seq;
    return gpu_exec_prefill(g, tokens, n, pos0, logits_last, err, errlen);
}
size_t gpu_exec_prefill_workspace(const hm_model *m, int chunk) { (void)m; (void)chunk; return 0; }
size_t gpu_exec_prefill_bytes(const gpu_exec *g) { (void)g; return 0; }
int gpu_exec_prefill_chunk(const gpu_exec *g) { (void)g; return 0; }
