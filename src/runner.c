/* runner.c - picks the target and forwards one token through it. */
#include "runner.h"
#include "exec.h"
#include "gpu.h"
#include "sampler.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void runner_opts_init(runner_opts *o) {
    memset(o, 0, sizeof *o);
    o->cold = RUNNER_COLD_AUTO; o->n_static = o->n_slots = o->swap_max = -1;
    o->gpu_reserve_gib = RUNNER_GPU_RESERVE_GIB;
}

double runner_engine_gib(const runner_opts *o, double gib) {
    if (gib <= 0) return 0;
    const double x = gib - (o ? o->gpu_reserve_gib : 0);
    /* runner_check_budget refuses a budget not above the reserve first; should one get here, the
     * smallest budget (1 KiB), which the executor refuses naming the minimum, never "no budget" */
    return x > 0 ? x : 1.0 / 1048576;
}

int runner_check_budget(const runner_opts *o, hm_error *e) {
    if (!o) return 0;
    const double g[2] = { o->gpu_mem_gib, o->gpu_mem2_gib };
    for (int i = 0; i < 2; i++)
        if (g[i] > 0 && g[i] <= o->gpu_reserve_gib)
            return hm_fail(e, "--gpu-mem %g%s: expected more than --gpu-reserve %g (GiB of VRAM kept for the CUDA context and "
                           "cuBLAS); raise --gpu-mem or lower --gpu-reserve", g[i], i ? " (the second GPU)" : "", o->gpu_reserve_gib);
    return 0;
}

/* What a GPU's budget of gib leaves the engine, for its line and its budget errors; "" without a
 * budget or a reserve. */
static void budget_note(const runner_opts *o, double gib, char *buf, size_t cap) {
    buf[0] = 0;
    if (o && gib > 0 && o->gpu_reserve_gib > 0)
        snprintf(buf, cap, "--gpu-mem %g GiB less --gpu-reserve %g for the CUDA context and cuBLAS: %g GiB for the engine", gib,
                 o->gpu_reserve_gib, runner_engine_gib(o, gib));
}

/* gpu_exec_create_opts on device dev with o's budget gib: the budget's line first (unless quiet),
 * and a budget error of the executor's (it names the engine's --gpu-mem) with what it was made of. */
static gpu_exec *create_stage(const hm_model *m, int dev, int n_ctx, const gpu_exec_opts *go, const runner_opts *o, double gib,
                              char *msg, size_t cap) {
    char note[256];
    budget_note(o, gib, note, sizeof note);
    if (*note && !go->quiet) fprintf(stderr, "gpu %d: %s\n", dev, note);
    gpu_exec *g = gpu_exec_create_opts(m, dev, n_ctx, go, msg, cap);
    if (!g && *note && strstr(msg, "--gpu-mem")) {
        const size_t n = strlen(msg);
        if (n + strlen(note) + 4 < cap) snprintf(msg + n, cap - n, " (%s)", note);
    }
    return g;
}

static int parse_num(const char *flag, const char *v, double lo, double hi, double *out, hm_error *e) {
    char *end; errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || errno || end == v || *end || !isfinite(x) || x < lo || x > hi)
        return hm_fail(e, "%s: expected a number in [%g, %g], found '%s'", flag, lo, hi, v ? v : "(nothing)");
    *out = x;
    return 0;
}

/* a whole number in [lo, hi] */
static int parse_whole(const char *flag, const char *v, double lo, double hi, int *out, hm_error *e) {
    double x;
    if (parse_num(flag, v, lo, hi, &x, e)) return -1;
    if (x != (int)x) return hm_fail(e, "%s: expected a whole number, found '%s'", flag, v);
    *out = (int)x;
    return 0;
}

void runner_gpu_opts(const runner_opts *o, int n_seq, gpu_exec_opts *go) {
    memset(go, 0, sizeof *go);
    go->cold = GPU_COLD_NONE; go->n_static = go->n_slots = go->swap_max = -1; go->n_seq = n_seq;
    if (!o) return;
    go->gpu_mem_gib = runner_engine_gib(o, o->gpu_mem_gib); go->n_static = o->n_static; go->n_slots = o->n_slots;
    go->counts = o->counts; go->decay = o->decay; go->route_io = o->route_io;
    go->cpu_threads = o->cpu_threads; go->swap_max = o->swap_max; go->swap_async = o->swap_async; go->ram_gib = o->ram_gib;
    go->swap_interval = o->swap_interval; go->swap_floor = o->swap_floor; go->swap_hyst = o->swap_hyst;
    go->swap_per_layer = o->swap_per_layer; go->prefill_chunk = o->prefill_chunk; go->prefill_min = o->prefill_min; go->staging = o->staging;
    go->overlap_misses = o->overlap_misses; go->prefetch = o->prefetch; go->cpu_handoff = o->cpu_handoff;
    /* unresolved auto (no planner in this caller): stream within a budget, else everything resident */
    go->cold = o->cold == RUNNER_COLD_AUTO ? (o->gpu_mem_gib > 0 ? GPU_COLD_STREAM : GPU_COLD_NONE) : o->cold;
}

int runner_opts_flag(runner_opts *o, const char *flag, const char *val, hm_error *e) {
    double x;
    if (!strcmp(flag, "--no-swap")) { o->swap_max = 0; return 2; }
    if (!strcmp(flag, "--overlap-misses")) { o->overlap_misses = 1; return 2; }
    if (!strcmp(flag, "--prefetch")) { o->prefetch = 1; return 2; }
    if (!strcmp(flag, "--cpu-handoff")) {
        if (val && !strcmp(val, "flags")) o->cpu_handoff = 0;
        else if (val && !strcmp(val, "hostfn")) o->cpu_handoff = 1;
        else return hm_fail(e, "--cpu-handoff: expected flags or hostfn, found '%s'", val ? val : "(nothing)"), -1;
        return 1;
    }
    if (!strcmp(flag, "--swap-async")) { o->swap_async = 1; return 2; }
    if (!strcmp(flag, "--gpu-mem") || !strcmp(flag, "--gpu-split") || !strcmp(flag, "--gpus")) {
        /* one value, or two: one per GPU of a two-stage pipeline */
        double v[2] = { 0, 0 };
        int n = 0;
        char buf[128];
        if (!val || strlen(val) >= sizeof buf) return hm_fail(e, "%s: expected a value, found '%s'", flag, val ? val : "(nothing)"), -1;
        snprintf(buf, sizeof buf, "%s", val);
        for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
            if (n == 2) return hm_fail(e, "%s: expected at most 2 values (two GPUs), found '%s'", flag, val), -1;
            if (parse_num(flag, t, 0, 1 << 20, &v[n], e)) return -1;
            n++;
        }
        if (!n) return hm_fail(e, "%s: expected a value, found '%s'", flag, val), -1;
        if (!strcmp(flag, "--gpus")) {
            for (int i = 0; i < n; i++)
                if (v[i] != (int)v[i]) return hm_fail(e, "--gpus: expected device numbers, found '%s'", val), -1;
            o->n_gpus = n; o->gpus[0] = (int)v[0]; o->gpus[1] = (int)v[1];
        } else if (!strcmp(flag, "--gpu-split")) {
            if (n != 2 || v[0] <= 0 || v[1] <= 0) return hm_fail(e, "--gpu-split: expected two positive weights W0,W1, found '%s'", val), -1;
            o->split[0] = v[0]; o->split[1] = v[1]; o->n_split = 2;
        } else {
            o->gpu_mem_gib = v[0]; o->gpu_mem2_gib = n == 2 ? v[1] : 0;
            if (n == 2 && o->n_gpus < 2) { o->n_gpus = 2; o->gpus[0] = 0; o->gpus[1] = 1; }
        }
        return 1;
    }
    if (!strcmp(flag, "--staging")) return parse_whole(flag, val, 0, 65535, &o->staging, e) ? -1 : 1;
    if (!strcmp(flag, "--static-experts")) return parse_whole(flag, val, 0, 65535, &o->n_static, e) ? -1 : 1;
    if (!strcmp(flag, "--cache-slots")) return parse_whole(flag, val, 0, 65535, &o->n_slots, e) ? -1 : 1;
    if (!strcmp(flag, "--cpu-threads")) return parse_whole(flag, val, 0, 4096, &o->cpu_threads, e) ? -1 : 1;
    if (!strcmp(flag, "--swap-max")) return parse_whole(flag, val, 0, 4096, &o->swap_max, e) ? -1 : 1;
    if (!strcmp(flag, "--swap-interval")) return parse_whole(flag, val, 0, 1 << 24, &o->swap_interval, e) ? -1 : 1;
    if (!strcmp(flag, "--prefill-chunk")) return parse_whole(flag, val, 1, 1 << 16, &o->prefill_chunk, e) ? -1 : 1;
    if (!strcmp(flag, "--prefill-min")) return parse_whole(flag, val, 1, 1 << 16, &o->prefill_min, e) ? -1 : 1;
    if (!strcmp(flag, "--gpu-reserve")) { if (parse_num(flag, val, 0, 64, &x, e)) return -1; o->gpu_reserve_gib = x; return 1; }
    if (!strcmp(flag, "--ram")) { if (parse_num(flag, val, 0, 1 << 24, &x, e)) return -1; o->ram_gib = x; return 1; }
    if (!strcmp(flag, "--swap-floor")) { if (parse_num(flag, val, 0, 1e9, &x, e)) return -1; o->swap_floor = x; return 1; }
    if (!strcmp(flag, "--swap-hyst")) { if (parse_num(flag, val, 1, 1e9, &x, e)) return -1; o->swap_hyst = x; return 1; }
    if (!strcmp(flag, "--swap-scope")) {
        if (val && !strcmp(val, "global")) o->swap_per_layer = 0;
        else if (val && !strcmp(val, "layer")) o->swap_per_layer = 1;
        else return hm_fail(e, "--swap-scope: expected global or layer, found '%s'", val ? val : "(nothing)"), -1;
        return 1;
    }
    if (!strcmp(flag, "--cpu-experts")) {   /* N, or N0,N1 for the two GPUs of --gpus */
        const char *v = val ? val : "";
        char *end;
        o->n_cpu_experts = 0;
        for (int i = 0; i < 2 && *v; i++) {
            long n = strtol(v, &end, 10);
            if (end == v || n < 0 || n > 1 << 20 || (*end && *end != ',')) break;
            o->cpu_experts[o->n_cpu_experts++] = (int)n;
            v = *end ? end + 1 : end;
        }
        if (!o->n_cpu_experts || *v)
            return hm_fail(e, "--cpu-experts: expected N or N0,N1 (routed experts per layer on the CPU, per GPU), found '%s'",
                           val ? val : "(nothing)"), -1;
        return 1;
    }
    if (!strcmp(flag, "--swap-stats")) {   /* the dual-GPU recipe's name for the start placement's stats file */
        if (!val) return hm_fail(e, "--swap-stats: expected a trace file"), -1;
        o->routing = val;
        return 1;
    }
    if (!strcmp(flag, "--lfu-decay")) {
        if (parse_num(flag, val, 0, 1, &x, e)) return -1;
        if (x <= 0) return hm_fail(e, "%s: expected a number in (0, 1], found '%s'", flag, val), -1;
        o->decay = (float)x;
        return 1;
    }
    if (!strcmp(flag, "--cold")) {
        if (val && !strcmp(val, "stream")) o->cold = GPU_COLD_STREAM;
        else if (val && !strcmp(val, "cpu")) o->cold = GPU_COLD_CPU;
        else if (val && !strcmp(val, "none")) o->cold = GPU_COLD_NONE;
        else if (val && !strcmp(val, "auto")) o->cold = RUNNER_COLD_AUTO;
        else return hm_fail(e, "--cold: expected auto, none, stream or cpu, found '%s'", val ? val : "(nothing)"), -1;
        return 1;
    }
    if (!strcmp(flag, "--routing")) {
        if (!val) return hm_fail(e, "--routing: expected a trace file"), -1;
        o->routing = val;
        return 1;
    }
    return 0;
}

int runner_check_placement(const runner_opts *o, const hm_model *m, hm_error *e) {
    if (!o) return 0;
    if (runner_check_budget(o, e)) return -1;
    const int E = m->cfg.n_expert;
    for (int i = 0; i < o->n_cpu_experts; i++)
        if (o->cpu_experts[i] > E)
            return hm_fail(e, "--cpu-experts %d: the model has %d routed experts per layer", o->cpu_experts[i], E);
    if (o->n_cpu_experts && o->cold != GPU_COLD_CPU && o->cold != RUNNER_COLD_AUTO)
        return hm_fail(e, "--cpu-experts: expected --cold cpu (or auto), found another --cold");
    if (o->n_cpu_experts == 2 && o->n_gpus != 2) return hm_fail(e, "--cpu-experts N0,N1: expected --gpus A,B (one count per GPU)");
    if (o->n_cpu_experts && o->n_static > E - o->cpu_experts[0])
        return hm_fail(e, "--static-experts %d + --cpu-experts %d: more than the model's %d experts per layer", o->n_static,
                       o->cpu_experts[0], E);
    return 0;
}

/* --cpu-experts: stage's N experts per layer on the CPU, the rest on the GPU: the static ones
 * (--static-experts, else none) and LFU slots, so the exchange (or the swap-ins) can move any. */
static void apply_cpu_experts(const runner_opts *o, const hm_model *m, int stage, gpu_exec_opts *go) {
    if (!o || !o->n_cpu_experts) return;
    const int E = m->cfg.n_expert, n = o->cpu_experts[stage < o->n_cpu_experts ? stage : 0];
    go->cold = GPU_COLD_CPU;
    go->n_static = o->n_static > 0 ? o->n_static : 0;
    go->n_slots = E - n - go->n_static > 0 ? E - n - go->n_static : 0;
}

int runner_parse_device(const char *s) {
    if (!strcmp(s, "cpu")) return HM_DEVICE_CPU;
    if (!strcmp(s, "cuda") || !strcmp(s, "gpu")) return HM_DEVICE_CUDA;
    if (!strcmp(s, "auto")) return HM_DEVICE_AUTO;
    return -1;
}

/* --gpus A,B: layers [0, s) on A and [s, n_layer) on B, s from --gpu-split (or the budgets' ratio,
 * or half); each stage its own budget, KV cache, expert cache and CPU workers (the cores split
 * between the stages, side by side); the residual stream goes A -> host -> B each step. */
static int pipeline_create(const hm_model *m, int n_ctx, const runner_opts *o, const gpu_exec_opts *base, gpu_exec **g1,
                           gpu_exec **g2, hm_error *e) {
    const int L = m->cfg.n_layer, ng = gpu_device_count();
    for (int i = 0; i < 2; i++)
        if (o->gpus[i] < 0 || o->gpus[i] >= ng) return hm_fail(e, "--gpus %d,%d: expected devices in [0, %d)", o->gpus[0], o->gpus[1], ng);
    if (L < 2) return hm_fail(e, "--gpus: a model of %d layer(s) cannot be split across two GPUs", L);
    /* the engine's budgets' ratio, as the planner splits them */
    const double gib0 = o->gpu_mem_gib, gib1 = o->gpu_mem2_gib > 0 ? o->gpu_mem2_gib : o->gpu_mem_gib;
    double w0 = o->n_split == 2 ? o->split[0] : o->gpu_mem_gib > 0 && o->gpu_mem2_gib > 0 ? runner_engine_gib(o, gib0) : 1;
    double w1 = o->n_split == 2 ? o->split[1] : o->gpu_mem_gib > 0 && o->gpu_mem2_gib > 0 ? runner_engine_gib(o, gib1) : 1;
    int s = o->split_layer > 0 ? o->split_layer : (int)lround(L * w0 / (w0 + w1));
    if (s < 1) s = 1;
    if (s > L - 1) s = L - 1;
    gpu_exec_opts a = *base, b = *base;
    apply_cpu_experts(o, m, 0, &a); apply_cpu_experts(o, m, 1, &b);
    a.layer_first = 0; a.layer_last = s;
    b.layer_first = s; b.layer_last = L;
    b.gpu_mem_gib = runner_engine_gib(o, gib1);
    if (a.cold == GPU_COLD_CPU) {
        /* both stages' workers on the same cores: a token goes through the stages one after the
         * other, so one pool works while the other sleeps (a stage parks its pool after its step:
         * gpu_exec_forward_stage, workers_park). Measured with the cores split between the pools instead (air,
         * 2 x 16 GiB, x2 kind, 2026-11-30): each stage's 14-15 workers read experts at 38.6 GB/s,
         * a third of the DRAM ceiling, against 72 GB/s for one GPU's 30 workers in the same call. */
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        int total = base->cpu_threads > 0 ? base->cpu_threads : nc > 3 ? (int)nc - 3 : 2;
        a.cpu_threads = b.cpu_threads = total;
        a.cpu_first_core = b.cpu_first_core = 0;
    }
    char msg[1024];
    if (!(*g1 = create_stage(m, o->gpus[0], n_ctx, &a, o, gib0, msg, sizeof msg)))
        return hm_fail(e, "GPU %d (layers 0..%d): %s", o->gpus[0], s - 1, msg);
    if (!(*g2 = create_stage(m, o->gpus[1], n_ctx, &b, o, gib1, msg, sizeof msg))) {
        gpu_exec_free(*g1); *g1 = NULL;
        return hm_fail(e, "GPU %d (layers %d..%d): %s", o->gpus[1], s, L - 1, msg);
    }
    return 0;
}

int runner_gpu_create(const hm_model *m, int n_ctx, const runner_opts *o, int n_seq, gpu_exec **g1, gpu_exec **g2, hm_error *e) {
    *g1 = *g2 = NULL;
    gpu_exec_opts go;
    if (runner_check_placement(o, m, e)) return -1;
    runner_gpu_opts(o, n_seq, &go);
    if (o && o->n_gpus == 2) return pipeline_create(m, n_ctx, o, &go, g1, g2, e);
    apply_cpu_experts(o, m, 0, &go);
    const int dev = o && o->n_gpus == 1 ? o->gpus[0] : 0;
    if (dev < 0 || dev >= gpu_device_count()) return hm_fail(e, "--gpus %d: expected a device in [0, %d)", dev, gpu_device_count());
    char msg[1024];
    if (!(*g1 = create_stage(m, dev, n_ctx, &go, o, o ? o->gpu_mem_gib : 0, msg, sizeof msg))) return hm_fail(e, "%s", msg);
    return 0;
}

int runner_init(hm_runner *r, const hm_model *m, int device, int n_ctx, hm_error *e) {
    return runner_init_opts(r, m, device, n_ctx, NULL, e);
}

int runner_init_opts(hm_runner *r, const hm_model *m, int device, int n_ctx, const runner_opts *o, hm_error *e) {
    memset(r, 0, sizeof *r);
    r->m = m;
    if (device == HM_DEVICE_AUTO) device = gpu_device_count() > 0 ? HM_DEVICE_CUDA : HM_DEVICE_CPU;
    if (device == HM_DEVICE_CUDA && o && (o->cold == GPU_COLD_NONE || o->cold == GPU_COLD_STREAM) &&
        (o->cpu_threads > 0 || o->swap_max >= 0 || o->cpu_handoff))
        return hm_fail(e, "--cpu-threads / --swap-max / --cpu-handoff: expected --cold cpu");
    if (device == HM_DEVICE_CUDA) {
        if (!gpu_built()) return hm_fail(e, "--device cuda: this binary was built without CUDA (-DHOTMOE_CUDA=ON)");
        if (gpu_device_count() == 0) return hm_fail(e, "--device cuda: no CUDA device is present");
        if (runner_gpu_create(m, n_ctx, o, 1, &r->gpu, &r->gpu2, e)) return -1;
        if (r->gpu2) r->xbuf = hm_malloc(sizeof(float) * (size_t)m->cfg.n_embd);
        r->device = HM_DEVICE_CUDA;
        return 0;
    }
    /* the CPU target: every expert is on the CPU, so --cold cpu (configs/cpu-only.json) is what it does;
     * the placement flags are still checked against the model first, to name a count it lacks
     * (the GPU target's are checked by runner_gpu_create) */
    if (runner_check_placement(o, m, e)) return -1;
    if (o && ((o->cold != GPU_COLD_NONE && o->cold != RUNNER_COLD_AUTO && o->cold != GPU_COLD_CPU) || o->gpu_mem_gib > 0 ||
              o->n_static >= 0 || o->n_slots >= 0 || o->n_gpus > 0 || o->n_split || o->n_cpu_experts || o->overlap_misses ||
              o->prefetch))
        return hm_fail(e, "--gpu-mem / --cold / --static-experts / --cache-slots / --cpu-experts / --overlap-misses / --prefetch / "
                       "--gpus / --gpu-split: expected --device cuda, found the CPU target");
    if (o && (o->cpu_threads > 0 || o->swap_max >= 0 || o->cpu_handoff))
        return hm_fail(e, "--cpu-threads / --swap-max / --cpu-handoff: expected --cold cpu on the GPU target (--device cuda)");
    if (cpu_state_init(&r->cpu, &m->cfg, n_ctx)) return hm_fail(e, "context of %d tokens: cannot allocate the KV cache", n_ctx);
    r->device = HM_DEVICE_CPU;
    return 0;
}

int runner_forward(hm_runner *r, int32_t token, int pos, float *logits, hm_error *e) {
    if (r->device == HM_DEVICE_CUDA) {
        char msg[1024];
        if (runner_gpu_step(r->gpu, r->gpu2, r->xbuf, 0, token, pos, logits, msg, sizeof msg)) return hm_fail(e, "%s", msg);
        return 0;
    }
    if (pos < 0 || pos >= r->cpu.n_ctx) return hm_fail(e, "position %d outside the context of %d", pos, r->cpu.n_ctx);
    if (token < 0 || token >= r->m->cfg.n_vocab) return hm_fail(e, "token %d outside the vocabulary of %d", token, r->m->cfg.n_vocab);
    cpu_forward(r->m, &r->cpu, token, pos, logits);
    return 0;
}

int runner_forward_greedy(hm_runner *r, int32_t token, int pos, float *scratch, int32_t *next, hm_error *e) {
    if (r->device == HM_DEVICE_CUDA) {
        char msg[1024];
        if (runner_gpu_step_greedy(r->gpu, r->gpu2, r->xbuf, 0, token, pos, next, msg, sizeof msg)) return hm_fail(e, "%s", msg);
        return 0;
    }
    if (runner_forward(r, token, pos, scratch, e)) return -1;
    *next = sampler_argmax(scratch, r->m->cfg.n_vocab);
    return 0;
}

int runner_greedy_chain(hm_runner *r, int32_t token, int pos, int n, int32_t *out, int (*stop)(void *user, int i, int32_t token),
                        void *user, hm_error *e) {
    if (r->device != HM_DEVICE_CUDA || r->gpu2) { hm_fail(e, "the greedy chain takes one GPU"); return -2; }
    char msg[1024];
    const int rc = gpu_exec_greedy_chain(r->gpu, 0, token, pos, n, out, stop, user, msg, sizeof msg);
    if (rc < 0) hm_fail(e, "%s", msg);
    return rc;
}

int runner_prefill(hm_runner *r, const int32_t *tokens, int n, int pos0, float *logits_last, hm_error *e) {
    if (n <= 0) return hm_fail(e, "prefill of %d tokens (at least 1 expected)", n);
    if (r->device == HM_DEVICE_CUDA && !r->gpu2) {   /* a pipeline runs the prompt token by token (below) */
        char msg[1024];
        if (gpu_exec_prefill(r->gpu, tokens, n, pos0, logits_last, msg, sizeof msg)) return hm_fail(e, "%s", msg);
        return 0;
    }
    if (r->device == HM_DEVICE_CPU && (pos0 < 0 || (long long)pos0 + n > r->cpu.n_ctx))   /* a pipeline's stages check their own */
        return hm_fail(e, "positions %d..%lld outside the context of %d", pos0, (long long)pos0 + n - 1, r->cpu.n_ctx);
    for (int i = 0; i < n; i++)
        if (runner_forward(r, tokens[i], pos0 + i, i + 1 == n ? logits_last : NULL, e)) return -1;
    return 0;
}

void runner_free(hm_runner *r) {
    if (r->gpu) gpu_exec_free(r->gpu);
    if (r->gpu2) gpu_exec_free(r->gpu2);
    free(r->xbuf);
    if (r->device == HM_DEVICE_CPU) cpu_state_free(&r->cpu);
    memset(r, 0, sizeof *r);
}

const char *runner_device_name(const hm_runner *r) { return r->device == HM_DEVICE_CUDA ? r->gpu2 ? "cuda x2" : "cuda" : "cpu"; }

/* One token through one executor or the two stages of a pipeline (the first hands x on); the stage
 * with the head writes logits, or only the greedy token when next is not NULL. */
static int gpu_step(gpu_exec *g1, gpu_exec *g2, float *x, int seq, int32_t token, int pos, float *logits, int32_t *next, char *err,
                    size_t errlen) {
    const float *x_in = NULL;
    if (g2) {
        if (gpu_exec_forward_stage(g1, seq, token, NULL, pos, NULL, x, err, errlen)) return -1;
        g1 = g2; x_in = x;
    }
    return next ? gpu_exec_forward_greedy(g1, seq, token, x_in, pos, next, err, errlen)
                : gpu_exec_forward_stage(g1, seq, token, x_in, pos, logits, NULL, err, errlen);
}

/* The same for n tokens of n sequences in one batched step. */
static int gpu_step_batch(gpu_exec *g1, gpu_exec *g2, float *x, int n, const int *seq, const int32_t *tok, const int *pos, float *logits,
                          int32_t *next, char *err, size_t errlen) {
    const float *x_in = NULL;
    if (g2) {
        if (gpu_exec_forward_batch(g1, n, seq, tok, NULL, pos, NULL, x, err, errlen)) return -1;
        g1 = g2; x_in = x;
    }
    return next ? gpu_exec_forward_batch_greedy(g1, n, seq, tok, x_in, pos, next, err, errlen)
                : gpu_exec_forward_batch(g1, n, seq, tok, x_in, pos, logits, NULL, err, errlen);
}

int runner_gpu_step(gpu_exec *g1, gpu_exec *g2, float *x, int seq, int32_t token, int pos, float *logits, char *err,
                    size_t errlen) {
    return gpu_step(g1, g2, x, seq, token, pos, logits, NULL, err, errlen);
}

int runner_gpu_step_greedy(gpu_exec *g1, gpu_exec *g2, float *x, int seq, int32_t token, int pos, int32_t *next, char *err,
                           size_t errlen) {
    return gpu_step(g1, g2, x, seq, token, pos, NULL, next, err, errlen);
}

int runner_gpu_step_batch(gpu_exec *g1, gpu_exec *g2, float *x, int n, const int *seq, const int32_t *tok, const int *pos,
                          float *logits, char *err, size_t errlen) {
    return gpu_step_batch(g1, g2, x, n, seq, tok, pos, logits, NULL, err, errlen);
}

int runner_gpu_step_batch_greedy(gpu_exec *g1, gpu_exec *g2, float *x, int n, const int *seq, const int32_t *tok, const int *pos,
                                 int32_t *next, char *err, size_t errlen) {
    return gpu_step_batch(g1, g2, x, n, seq, tok, pos, NULL, next, err, errlen);
}

int runner_gpu_batch_max(gpu_exec *g1, gpu_exec *g2) {
    gpu_exec_layout a, b;
    gpu_exec_info(g1, &a);
    if (!g2) return a.batch_max;
    gpu_exec_info(g2, &b);
    return a.batch_max < b.batch_max ? a.batch_max : b.batch_max;
}

int runner_cache_stats(hm_runner *r, uint64_t out[GPU_CACHE_STATS], int reset, hm_error *e) {
    for (int j = 0; j < GPU_CACHE_STATS; j++) out[j] = 0;
    gpu_exec *st[2] = { r->gpu, r->gpu2 };
    for (int i = 0; i < 2; i++) {
        if (!st[i]) continue;
        uint64_t v[GPU_CACHE_STATS];
        char msg[512];
        if (gpu_exec_cache_stats(st[i], v, reset, msg, sizeof msg)) return hm_fail(e, "%s", msg);
        for (int j = 0; j < GPU_CACHE_STATS; j++) out[j] += v[j];
    }
    return 0;
}

void runner_cpu_stats(hm_runner *r, uint64_t *bytes, double *busy_s, int reset) {
    *bytes = 0; *busy_s = 0;
    gpu_exec *st[2] = { r->gpu, r->gpu2 };
    for (int i = 0; i < 2; i++) {
        if (!st[i]) continue;
        uint64_t b; double s;
        gpu_exec_cpu_stats(st[i], &b, &s, reset);
        *bytes += b; *busy_s += s;
    }
}

void runner_layout(const hm_runner *r, gpu_exec_layout *out) {
    memset(out, 0, sizeof *out);
    if (!r->gpu) return;
    gpu_exec_info(r->gpu, out);
    if (!r->gpu2) return;
    gpu_exec_layout b;
    gpu_exec_info(r->gpu2, &b);
    out->vram_weights += b.vram_weights; out->vram_experts += b.vram_experts; out->vram_kv += b.vram_kv;
    out->vram_workspace += b.vram_workspace; out->vram_total += b.vram_total; out->pinned_host += b.pinned_host;
    out->n_streamed += b.n_streamed; out->cpu_threads += b.cpu_threads; out->swaps += b.swaps;
    out->prefill_reserved += b.prefill_reserved; out->vram_prefill += b.vram_prefill;
    if (b.expert_bytes > out->expert_bytes) out->expert_bytes = b.expert_bytes;
}
