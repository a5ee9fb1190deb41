/* exec.cu - the GPU executor: uploads the canonical model, builds per-layer expert pointer
 * tables on the device, and runs one decode step as one CUDA graph (the position and the token's
 * embedding are read from pinned host buffers by the graph's own copy nodes). */
#include "exec_impl.cuh"
#include "gpu_gemv.h"
#include "ops.cuh"
extern "C" {
#include "quant.h"
}
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fail(err, errlen, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); goto bad; } } while (0)

static int fail(char *err, size_t n, const char *fmt, ...) {
    if (err && n) { va_list ap; va_start(ap, fmt); vsnprintf(err, n, fmt, ap); va_end(ap); }
    return -1;
}

static void *dalloc(gpu_exec *g, size_t n, char *err, size_t errlen) {
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0; cudaMemGetInfo(&fr, &tot);
        fail(err, errlen, "cuda: out of device memory allocating %.1f MiB (%.1f MiB free of %.1f MiB; model needs %.1f MiB)",
             n / 1048576.0, fr / 1048576.0, tot / 1048576.0, gpu_exec_vram_needed(g->m, g->n_ctx) / 1048576.0);
        return NULL;
    }
    if (g->n_allocs == g->cap_allocs) { g->cap_allocs = g->cap_allocs ? 2 * g->cap_allocs : 256; g->allocs = (void **)realloc(g->allocs, g->cap_allocs * sizeof(void *)); }
    g->allocs[g->n_allocs++] = p;
    g->vram += n;
    return p;
}

static const void *upload(gpu_exec *g, const void *src, size_t n, char *err, size_t errlen) {
    void *d = dalloc(g, n, err, errlen);
    if (d && cudaMemcpy(d, src, n, cudaMemcpyHostToDevice) != cudaSuccess) { fail(err, errlen, "cuda: upload failed"); return NULL; }
    return d;
}

/* 1-D tensors go up as F32 whatever their file type. */
static float *upload_vec(gpu_exec *g, const hm_tensor *t, char *err, size_t errlen) {
    if (!t->data) return NULL;
    int64_t n = t->ne[0];
    float *tmp = (float *)malloc(sizeof(float) * n);
    hm_type_get(t->type)->to_float(t->data, tmp, n);
    float *d = (float *)upload(g, tmp, sizeof(float) * n, err, errlen);
    free(tmp);
    return d;
}

static int upload_mat(gpu_exec *g, dmat *d, const hm_tensor *t, char *err, size_t errlen) {
    d->type = t->type; d->ne0 = t->ne[0]; d->ne1 = t->ne[1];
    d->d = upload(g, t->data, t->nbytes, err, errlen);
    return d->d ? 0 : -1;
}

/* Uploads n experts (each its own allocation, so residency can change per expert) and the tables. */
static int upload_experts(gpu_exec *g, dexperts *x, const hm_ffn_w *const *w, int n, char *err, size_t errlen) {
    x->n = n; x->type_gu = w[0]->gate.type; x->type_down = w[0]->down.type;
    const void **hg = (const void **)malloc(3 * n * sizeof(void *)), **hu = hg + n, **hd = hg + 2 * n;
    for (int e = 0; e < n; e++) {
        if (w[e]->gate.type != x->type_gu || w[e]->up.type != x->type_gu || w[e]->down.type != x->type_down) {
            free(hg);
            return fail(err, errlen, "gpu: experts of one layer must share gate/up and down types (expert %d differs)", e);
        }
        if (!(hg[e] = upload(g, w[e]->gate.data, w[e]->gate.nbytes, err, errlen)) ||
            !(hu[e] = upload(g, w[e]->up.data, w[e]->up.nbytes, err, errlen)) ||
            !(hd[e] = upload(g, w[e]->down.data, w[e]->down.nbytes, err, errlen))) { free(hg); return -1; }
    }
    x->gate = (const void **)upload(g, hg, n * sizeof(void *), err, errlen);
    x->up = (const void **)upload(g, hu, n * sizeof(void *), err, errlen);
    x->down = (const void **)upload(g, hd, n * sizeof(void *), err, errlen);
    free(hg);
    return x->gate && x->up && x->down ? 0 : -1;
}

static size_t tsz(const hm_tensor *t) { return t->data ? t->nbytes : 0; }
static size_t vsz(const hm_tensor *t) { return t->data ? (size_t)t->ne[0] * 4 : 0; }
static size_t fsz(const hm_ffn_w *f) { return tsz(&f->gate) + tsz(&f->up) + tsz(&f->down); }

extern "C" size_t gpu_exec_vram_needed(const hm_model *m, int n_ctx) {
    const hm_config *c = &m->cfg;
    size_t n = vsz(&m->output_norm) + tsz(&m->output);
    for (int il = 0; il < c->n_layer; il++) {
        const hm_layer *l = &m->layers[il];
        n += vsz(&l->attn_norm) + vsz(&l->ffn_norm) + vsz(&l->bq) + vsz(&l->bk) + vsz(&l->bv) + vsz(&l->q_norm) +
             vsz(&l->k_norm) + vsz(&l->router_bias) + tsz(&l->wq) + tsz(&l->wk) + tsz(&l->wv) + tsz(&l->wo) +
             tsz(&l->router) + fsz(&l->dense) + fsz(&l->shexp);
        if (l->is_moe) for (int e = 0; e < c->n_expert; e++) n += fsz(&l->experts[e].host) + 3 * sizeof(void *);
    }
    n += 2 * (size_t)c->n_layer * n_ctx * c->kv_dim * sizeof(float);
    int ff = c->n_ff > c->n_ff_exp ? c->n_ff : c->n_ff_exp;
    if (c->n_ff_shexp > ff) ff = c->n_ff_shexp;
    n += sizeof(float) * ((size_t)c->n_embd * (6 + c->n_expert_used) + c->q_dim * 2 + c->kv_dim * 2 + c->n_vocab +
                          c->n_expert * 2 + (size_t)ff * c->n_expert_used +
                          (size_t)c->n_head * ((n_ctx + HM_ATTN_CHUNK - 1) / HM_ATTN_CHUNK) * (c->head_dim + 2));
    return n;
}

/* Profiling (HOTMOE_GPU_PROFILE=1): the step runs outside the graph with an event after each
 * op group; times are summed per group and printed when the executor is freed. */
enum { P_NORM, P_QKV, P_ROPE, P_ATTN, P_OPROJ, P_ROUTER, P_MOE_GU, P_MOE_DOWN, P_REDUCE, P_DENSE, P_OUTPUT, P_COUNT };
static const char *prof_names[P_COUNT] = { "rmsnorm", "q/k/v gemv", "qkv post+rope", "attention", "o-proj+res+norm",
                                           "router gemv+topk", "experts gate/up", "experts down", "moe reduce+norm",
                                           "dense/shared ffn", "output head+copy" };
typedef struct { int on; cudaEvent_t ev[2048]; int grp[2048]; int n; double ms[P_COUNT]; long steps; } prof_t;
static prof_t prof;
static void mark(gpu_exec *g, int grp) {
    if (!prof.on || prof.n >= 2048) return;
    if (!prof.ev[prof.n]) cudaEventCreate(&prof.ev[prof.n]);
    cudaEventRecord(prof.ev[prof.n], g->s);
    prof.grp[prof.n++] = grp;
}

/* Records one decode step into the stream (captured into a graph by the caller). */
static void record_step(gpu_exec *g, int with_logits) {
    const hm_config *c = &g->m->cfg;
    cudaStream_t s = g->s;
    int D = c->n_embd;
    cudaMemcpyAsync(g->x, g->h_x, sizeof(float) * D, cudaMemcpyHostToDevice, s);
    cudaMemcpyAsync(g->d_pos, g->h_pos, sizeof(int), cudaMemcpyHostToDevice, s);
    mark(g, -1);
    op_rmsnorm(g->x, g->L[0].attn_norm, g->xn, D, c->rms_eps, s);
    mark(g, P_NORM);
    for (int il = 0; il < c->n_layer; il++) {
        dlayer *l = &g->L[il];
        size_t kvoff = (size_t)il * g->n_ctx * c->kv_dim;
        /* the norm that follows this layer: the next layer's, or the output's */
        const float *next_norm = il + 1 < c->n_layer ? g->L[il + 1].attn_norm : with_logits ? g->out_norm : NULL;
        if (l->n_fused) {
            gpu_gemv(l->wqkv.type, l->wqkv.d, g->xn, g->q, D, (int)l->wqkv.ne1, s);
            if (l->n_fused == 2) gpu_gemv(l->wv.type, l->wv.d, g->xn, g->v, D, c->kv_dim, s);
        } else {
            gpu_gemv(l->wq.type, l->wq.d, g->xn, g->q, D, c->q_dim, s);
            gpu_gemv(l->wk.type, l->wk.d, g->xn, g->k, D, c->kv_dim, s);
            gpu_gemv(l->wv.type, l->wv.d, g->xn, g->v, D, c->kv_dim, s);
        }
        mark(g, P_QKV);
        op_qkv_post(g->q, g->k, g->v, l->bq, l->bk, l->bv, l->q_norm, l->k_norm, c->n_head, c->n_head_kv, c->head_dim,
                    c->n_rot, c->rope_theta, c->rms_eps, g->d_pos, g->kc + kvoff, g->vc + kvoff, s);
        mark(g, P_ROPE);
        op_attn_decode(g->q, g->kc + kvoff, g->vc + kvoff, g->att, g->part, c->n_head, c->n_head_kv, c->head_dim,
                       g->n_ctx, g->d_pos, s);
        mark(g, P_ATTN);
        gpu_gemv(l->wo.type, l->wo.d, g->att, g->tmp, c->q_dim, D, s);
        op_residual_norm(g->x, g->tmp, NULL, 1, NULL, l->ffn_norm, g->xn, D, c->rms_eps, s);
        mark(g, P_OPROJ);
        const float *shared = NULL;
        if (l->has_single) { /* dense FFN, or the shared expert */
            dexperts *x = &l->single;
            int ff = l->is_moe ? c->n_ff_shexp : c->n_ff;
            gpu_gemv_experts_swiglu(x->type_gu, x->gate, x->up, g->zero_id, 1, g->xn, g->act, D, ff, s);
            gpu_gemv_experts(x->type_down, x->down, g->zero_id, 1, g->act, g->sh, ff, D, s);
            shared = g->sh;
            if (!l->is_moe) {
                op_residual_norm(g->x, g->sh, NULL, 1, NULL, next_norm, g->xn, D, c->rms_eps, s);
                mark(g, P_DENSE);
                continue;
            }
            mark(g, P_DENSE);
        }
        gpu_gemv(l->router.type, l->router.d, g->xn, g->rlog, D, c->n_expert, s);
        op_router(g->rlog, l->router_bias, c->n_expert, c->n_expert_used, c->router_fn, c->norm_topk, c->routed_scale,
                  c->n_group, c->topk_group, g->ids, g->ew, s);
        mark(g, P_ROUTER);
        dexperts *x = &l->exps;
        gpu_gemv_experts_swiglu(x->type_gu, x->gate, x->up, g->ids, c->n_expert_used, g->xn, g->act, D, c->n_ff_exp, s);
        mark(g, P_MOE_GU);
        gpu_gemv_experts(x->type_down, x->down, g->ids, c->n_expert_used, g->act, g->ey, c->n_ff_exp, D, s);
        mark(g, P_MOE_DOWN);
        op_residual_norm(g->x, g->ey, g->ew, c->n_expert_used, shared, next_norm, g->xn, D, c->rms_eps, s);
        mark(g, P_REDUCE);
    }
    if (!with_logits) return;
    gpu_gemv(g->output.type, g->output.d, g->xn, g->logits, D, c->n_vocab, s);
    cudaMemcpyAsync(g->h_logits, g->logits, sizeof(float) * c->n_vocab, cudaMemcpyDeviceToHost, s);
    mark(g, P_OUTPUT);
}

static int capture(gpu_exec *g, int with_logits, cudaGraphExec_t *out, char *err, size_t errlen) {
    cudaGraph_t graph;
    CK(cudaStreamBeginCapture(g->s, cudaStreamCaptureModeThreadLocal));
    record_step(g, with_logits);
    CK(cudaStreamEndCapture(g->s, &graph));
    CK(cudaGraphInstantiate(out, graph, 0));
    cudaGraphDestroy(graph);
    return 0;
bad:
    return -1;
}

extern "C" gpu_exec *gpu_exec_create(const hm_model *m, int dev, int n_ctx, char *err, size_t errlen) {
    const hm_config *c = &m->cfg;
    gpu_exec *g = (gpu_exec *)calloc(1, sizeof(gpu_exec));
    prof.on = getenv("HOTMOE_GPU_PROFILE") && *getenv("HOTMOE_GPU_PROFILE") == '1';
    g->m = m; g->dev = dev; g->n_ctx = n_ctx;
    int D = c->n_embd, ff = c->n_ff > c->n_ff_exp ? c->n_ff : c->n_ff_exp;
    if (c->n_ff_shexp > ff) ff = c->n_ff_shexp;
    if (c->head_dim > 256 || c->n_expert > 4096 || c->n_expert_used > 64) {
        fail(err, errlen, "gpu: unsupported shape (head_dim %d <= 256, n_expert %d <= 4096, top-k %d <= 64 expected)",
             c->head_dim, c->n_expert, c->n_expert_used);
        goto bad;
    }
    {
        size_t need = gpu_exec_vram_needed(m, n_ctx), fr = 0, tot = 0;
        CK(cudaSetDevice(dev));
        CK(cudaMemGetInfo(&fr, &tot));
        if (need > fr) {
            fail(err, errlen, "gpu %d: the model needs %.2f GiB of VRAM (weights + KV cache for %d tokens), %.2f GiB are free",
                 dev, need / 1073741824.0, n_ctx, fr / 1073741824.0);
            goto bad;
        }
    }
    CK(cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking));
    g->L = (dlayer *)calloc(c->n_layer, sizeof(dlayer));
    for (int il = 0; il < c->n_layer; il++) {
        const hm_layer *ly = &m->layers[il];
        dlayer *l = &g->L[il];
        l->attn_norm = upload_vec(g, &ly->attn_norm, err, errlen);
        l->ffn_norm = upload_vec(g, &ly->ffn_norm, err, errlen);
        if (!l->attn_norm || !l->ffn_norm) goto bad;
        l->bq = upload_vec(g, &ly->bq, err, errlen); l->bk = upload_vec(g, &ly->bk, err, errlen);
        l->bv = upload_vec(g, &ly->bv, err, errlen);
        l->q_norm = upload_vec(g, &ly->q_norm, err, errlen); l->k_norm = upload_vec(g, &ly->k_norm, err, errlen);
        l->router_bias = upload_vec(g, &ly->router_bias, err, errlen);
        if (ly->wq.type == ly->wk.type) {
            /* q|k(|v) in one allocation, rows in that order, so one GEMV fills q, k (and v), which
             * are contiguous too */
            l->n_fused = ly->wv.type == ly->wq.type ? 3 : 2;
            size_t nb = ly->wq.nbytes + ly->wk.nbytes + (l->n_fused == 3 ? ly->wv.nbytes : 0);
            uint8_t *d = (uint8_t *)dalloc(g, nb, err, errlen);
            if (!d || cudaMemcpy(d, ly->wq.data, ly->wq.nbytes, cudaMemcpyHostToDevice) != cudaSuccess ||
                cudaMemcpy(d + ly->wq.nbytes, ly->wk.data, ly->wk.nbytes, cudaMemcpyHostToDevice) != cudaSuccess ||
                (l->n_fused == 3 && cudaMemcpy(d + ly->wq.nbytes + ly->wk.nbytes, ly->wv.data, ly->wv.nbytes, cudaMemcpyHostToDevice) != cudaSuccess)) {
                if (d) fail(err, errlen, "cuda: upload failed");
                goto bad;
            }
            l->wqkv.type = ly->wq.type; l->wqkv.ne0 = ly->wq.ne[0];
            l->wqkv.ne1 = ly->wq.ne[1] + ly->wk.ne[1] + (l->n_fused == 3 ? ly->wv.ne[1] : 0);
            l->wqkv.d = d;
            if (l->n_fused == 2 && upload_mat(g, &l->wv, &ly->wv, err, errlen)) goto bad;
        } else if (upload_mat(g, &l->wq, &ly->wq, err, errlen) || upload_mat(g, &l->wk, &ly->wk, err, errlen) ||
                   upload_mat(g, &l->wv, &ly->wv, err, errlen))
            goto bad;
        if (upload_mat(g, &l->wo, &ly->wo, err, errlen)) goto bad;
        l->is_moe = ly->is_moe;
        const hm_ffn_w *single = ly->is_moe ? (c->n_shared_exp ? &ly->shexp : NULL) : &ly->dense;
        if (single) { l->has_single = 1; if (upload_experts(g, &l->single, &single, 1, err, errlen)) goto bad; }
        if (!ly->is_moe) continue;
        if (upload_mat(g, &l->router, &ly->router, err, errlen)) goto bad;
        const hm_ffn_w **ws = (const hm_ffn_w **)malloc(c->n_expert * sizeof(void *));
        for (int e = 0; e < c->n_expert; e++) ws[e] = &ly->experts[e].host;
        int rc = upload_experts(g, &l->exps, ws, c->n_expert, err, errlen);
        free(ws);
        if (rc) goto bad;
    }
    if (!(g->out_norm = upload_vec(g, &m->output_norm, err, errlen)) || upload_mat(g, &g->output, &m->output, err, errlen))
        goto bad;
    {
        size_t kv = (size_t)c->n_layer * n_ctx * c->kv_dim * sizeof(float);
        int n_split = (n_ctx + HM_ATTN_CHUNK - 1) / HM_ATTN_CHUNK;
#define A(ptr, n) if (!(ptr = (float *)dalloc(g, sizeof(float) * (size_t)(n), err, errlen))) goto bad
        if (!(g->kc = (float *)dalloc(g, kv, err, errlen)) || !(g->vc = (float *)dalloc(g, kv, err, errlen))) goto bad;
        A(g->x, D); A(g->xn, D); A(g->q, c->q_dim + 2 * c->kv_dim); A(g->att, c->q_dim);
        g->k = g->q + c->q_dim; g->v = g->k + c->kv_dim; /* contiguous: the fused q|k|v GEMV writes all three */
        A(g->tmp, D); A(g->logits, c->n_vocab); A(g->rlog, c->n_expert); A(g->ew, c->n_expert_used);
        A(g->act, (size_t)ff * c->n_expert_used); A(g->ey, (size_t)D * c->n_expert_used); A(g->sh, D);
        A(g->part, (size_t)c->n_head * n_split * (c->head_dim + 2));
#undef A
        if (!(g->ids = (int *)dalloc(g, sizeof(int) * 64, err, errlen)) || !(g->zero_id = (int *)dalloc(g, sizeof(int), err, errlen)) ||
            !(g->d_pos = (int *)dalloc(g, sizeof(int), err, errlen)))
            goto bad;
        CK(cudaMemset(g->zero_id, 0, sizeof(int)));
        CK(cudaMallocHost(&g->h_x, sizeof(float) * D));
        CK(cudaMallocHost(&g->h_logits, sizeof(float) * c->n_vocab));
        CK(cudaMallocHost(&g->h_pos, sizeof(int)));
    }
    if (capture(g, 1, &g->graph, err, errlen) || capture(g, 0, &g->graph_nolog, err, errlen)) goto bad;
    return g;
bad:
    gpu_exec_free(g);
    return NULL;
}

extern "C" int gpu_exec_forward(gpu_exec *g, int32_t token, int pos, float *logits, char *err, size_t errlen) {
    const hm_config *c = &g->m->cfg;
    if (pos < 0 || pos >= g->n_ctx) return fail(err, errlen, "gpu: position %d outside the context of %d", pos, g->n_ctx);
    if (token < 0 || token >= c->n_vocab) return fail(err, errlen, "gpu: token %d outside the vocabulary of %d", token, c->n_vocab);
    const hm_tensor *te = &g->m->tok_embd;
    hm_type_get(te->type)->to_float((const uint8_t *)te->data + (size_t)token * hm_row_size(te->type, te->ne[0]), g->h_x, te->ne[0]);
    *g->h_pos = pos;
    if (prof.on) {
        prof.n = 0;
        record_step(g, logits != NULL);
        CK(cudaStreamSynchronize(g->s));
        for (int i = 1; i < prof.n; i++) {
            float ms = 0;
            cudaEventElapsedTime(&ms, prof.ev[i - 1], prof.ev[i]);
            if (prof.grp[i] >= 0) prof.ms[prof.grp[i]] += ms;
        }
        prof.steps++;
    } else {
        CK(cudaGraphLaunch(logits ? g->graph : g->graph_nolog, g->s));
        CK(cudaStreamSynchronize(g->s));
    }
    if (logits) memcpy(logits, g->h_logits, sizeof(float) * c->n_vocab);
    return 0;
bad:
    return -1;
}

extern "C" size_t gpu_exec_vram_used(const gpu_exec *g) { return g->vram; }

extern "C" void gpu_exec_free(gpu_exec *g) {
    if (!g) return;
    gpu_prefill_free(g);
    if (prof.on && prof.steps) {
        double tot = 0;
        for (int i = 0; i < P_COUNT; i++) tot += prof.ms[i];
        fprintf(stderr, "gpu profile over %ld steps (ungraphed, events between op groups): %.3f ms/step\n", prof.steps, tot / prof.steps);
        for (int i = 0; i < P_COUNT; i++)
            if (prof.ms[i] > 0) fprintf(stderr, "  %-18s %8.1f us/step %5.1f%%\n", prof_names[i], 1e3 * prof.ms[i] / prof.steps, 100 * prof.ms[i] / tot);
    }
    if (g->graph) cudaGraphExecDestroy(g->graph);
    if (g->graph_nolog) cudaGraphExecDestroy(g->graph_nolog);
    for (int i = 0; i < g->n_allocs; i++) cudaFree(g->allocs[i]);
    if (g->h_x) cudaFreeHost(g->h_x);
    if (g->h_logits) cudaFreeHost(g->h_logits);
    if (g->h_pos) cudaFreeHost(g->h_pos);
    if (g->s) cudaStreamDestroy(g->s);
    free(g->allocs); free(g->L); free(g);
}
