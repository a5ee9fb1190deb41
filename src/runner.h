/* runner.h - one sequence's forward pass on the chosen target (CPU reference or GPU executor),
 * so that commands and the engine do not care where the model runs. */
#ifndef HM_RUNNER_H
#define HM_RUNNER_H
#include "cpu.h"
#include "model.h"
#include "util.h"

enum hm_device { HM_DEVICE_AUTO = 0, HM_DEVICE_CPU = 1, HM_DEVICE_CUDA = 2 };

typedef struct {
    int device;               /* the target in use: HM_DEVICE_CPU or HM_DEVICE_CUDA */
    const hm_model *m;
    cpu_state cpu;
    struct gpu_exec *gpu;
} hm_runner;

/* Parses "cpu" / "cuda" / "auto". Returns -1 for anything else. */
int runner_parse_device(const char *s);
/* device AUTO: CUDA when this build has it and a GPU is present, else CPU. */
int runner_init(hm_runner *r, const hm_model *m, int device, int n_ctx, hm_error *e);
/* Runs token at pos; logits (n_vocab) may be NULL. */
int runner_forward(hm_runner *r, int32_t token, int pos, float *logits, hm_error *e);
/* Runs the n prompt tokens at positions pos0.. (batched on the GPU, token by token on the CPU);
 * writes the last token's logits when logits_last is not NULL. Decode continues at pos0 + n. */
int runner_prefill(hm_runner *r, const int32_t *tokens, int n, int pos0, float *logits_last, hm_error *e);
void runner_free(hm_runner *r);
const char *runner_device_name(const hm_runner *r);

#endif
