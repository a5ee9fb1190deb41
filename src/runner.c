/* runner.c - picks the target and forwards one token through it. */
#include "runner.h"
#include "exec.h"
#include "gpu.h"
#include <string.h>

int runner_parse_device(const char *s) {
    if (!strcmp(s, "cpu")) return HM_DEVICE_CPU;
    if (!strcmp(s, "cuda") || !strcmp(s, "gpu")) return HM_DEVICE_CUDA;
    if (!strcmp(s, "auto")) return HM_DEVICE_AUTO;
    return -1;
}

int runner_init(hm_runner *r, const hm_model *m, int device, int n_ctx, hm_error *e) {
    memset(r, 0, sizeof *r);
    r->m = m;
    if (device == HM_DEVICE_AUTO) device = gpu_device_count() > 0 ? HM_DEVICE_CUDA : HM_DEVICE_CPU;
    if (device == HM_DEVICE_CUDA) {
        if (!gpu_built()) return hm_fail(e, "--device cuda: this binary was built without CUDA (-DHOTMOE_CUDA=ON)");
        if (gpu_device_count() == 0) return hm_fail(e, "--device cuda: no CUDA device is present");
        char msg[1024];
        r->gpu = gpu_exec_create(m, 0, n_ctx, msg, sizeof msg);
        if (!r->gpu) return hm_fail(e, "%s", msg);
        r->device = HM_DEVICE_CUDA;
        return 0;
    }
    if (cpu_state_init(&r->cpu, &m->cfg, n_ctx)) return hm_fail(e, "context of %d tokens: cannot allocate the KV cache", n_ctx);
    r->device = HM_DEVICE_CPU;
    return 0;
}

int runner_forward(hm_runner *r, int32_t token, int pos, float *logits, hm_error *e) {
    if (r->device == HM_DEVICE_CUDA) {
        char msg[1024];
        if (gpu_exec_forward(r->gpu, token, pos, logits, msg, sizeof msg)) return hm_fail(e, "%s", msg);
        return 0;
    }
    if (pos < 0 || pos >= r->cpu.n_ctx) return hm_fail(e, "position %d outside the context of %d", pos, r->cpu.n_ctx);
    if (token < 0 || token >= r->m->cfg.n_vocab) return hm_fail(e, "token %d outside the vocabulary of %d", token, r->m->cfg.n_vocab);
    cpu_forward(r->m, &r->cpu, token, pos, logits);
    return 0;
}

int runner_prefill(hm_runner *r, const int32_t *tokens, int n, int pos0, float *logits_last, hm_error *e) {
    if (n <= 0) return hm_fail(e, "prefill of %d tokens (at least 1 expected)", n);
    if (r->device == HM_DEVICE_CUDA) {
        char msg[1024];
        if (gpu_exec_prefill(r->gpu, tokens, n, pos0, logits_last, msg, sizeof msg)) return hm_fail(e, "%s", msg);
        return 0;
    }
    if (pos0 < 0 || (long long)pos0 + n > r->cpu.n_ctx)
        return hm_fail(e, "positions %d..%lld outside the context of %d", pos0, (long long)pos0 + n - 1, r->cpu.n_ctx);
    for (int i = 0; i < n; i++)
        if (runner_forward(r, tokens[i], pos0 + i, i + 1 == n ? logits_last : NULL, e)) return -1;
    return 0;
}

void runner_free(hm_runner *r) {
    if (r->gpu) gpu_exec_free(r->gpu);
    if (r->device == HM_DEVICE_CPU) cpu_state_free(&r->cpu);
    memset(r, 0, sizeof *r);
}

const char *runner_device_name(const hm_runner *r) { return r->device == HM_DEVICE_CUDA ? "cuda" : "cpu"; }
