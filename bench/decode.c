/* decode.c - the decode and prefill benchmark of ../shared/design/BENCH.md on one target:
 * 128-token prompt (one runner_prefill), 512 greedy tokens (EOS ignored), median of >= 3 runs;
 * bytes read per token (weights actually touched + KV cache) over time per token, as a fraction of
 * the measured ceiling. With --prefill N,M,...: prefill only, prompts of N, M, ... random tokens,
 * prefill tok/s and time to first token (the prompt's pass up to the last token's logits), median
 * of --runs after one uncounted warm-up pass.
 * usage: bench_decode -m MODEL [--device cpu|cuda] [--prompt 128] [--gen 512] [--runs 3] [--json FILE]
 *        [--prefill 8192,32768] [--chunk 4096]
 *        [--gpu-mem GiB --cold auto|stream|cpu [--static-experts N] [--cache-slots N] [--routing TRACE] ...]
 *        (--gpu-mem: the process's VRAM per GPU; the engine's budget is it less --gpu-reserve, default 1 GiB)
 *        [--replay-routing TRACE] [--record-routing OUT]   (replay: each run replays the trace from token 0;
 *        the prompt then runs token by token, as the routing side channels need)
 *        [--quick]   (on a GPU, all resident: without the replays after the runs, the steps without
 *        logits and the greedy steps both ways, ~3 x runs x gen steps more than the runs take)
 * With an expert cache it also reports it over the decode phase: hit rate, misses and PCIe bytes
 * per token, CPU experts per token, and the rate the cache's copy kernel reaches from pinned host
 * RAM beside cudaMemcpyAsync's (the 55 GB/s of DEVICE.md). */
#include "exec.h"
#include "gpu.h"
#include "loader.h"
#include "membw.h"
#include "autoplan.h"
#include "routeio.h"
#include "runner.h"
#include "sampler.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void random_tokens(int32_t *t, int n, int n_vocab, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; t[i] = (int32_t)(x % (uint64_t)n_vocab); }
}

/* --prefill: prompts of each size, median of runs; one table line and one JSON object per size. */
static int bench_prefill(hm_runner *r, const hm_model *m, const runner_opts *ro, const char *model, const int *sizes,
                         int n_sizes, int runs, const char *json, double tl) {
    const hm_config *c = &m->cfg;
    int nmax = 0;
    for (int i = 0; i < n_sizes; i++) if (sizes[i] > nmax) nmax = sizes[i];
    int32_t *tok = hm_malloc(sizeof(int32_t) * (size_t)nmax);
    float *logits = hm_malloc(sizeof(float) * c->n_vocab);
    hm_error e;
    /* warm-up: loads cuBLAS kernels and allocates the workspace for a default chunk (8192 tokens on
     * the GPU); the chunk, VRAM and workspace columns are read after each size's runs */
    int nw = nmax < 8192 ? nmax : 8192;
    random_tokens(tok, nw, c->n_vocab, 777);
    double tw = hm_now();
    if (runner_prefill(r, tok, nw, 0, logits, &e)) { fprintf(stderr, "bench_decode: %s\n", e.msg); return 1; }
    tw = hm_now() - tw;
    const int cuda = r->device == HM_DEVICE_CUDA;
    gpu_exec_layout lay;
    memset(&lay, 0, sizeof lay);
    if (cuda) runner_layout(r, &lay);
    const char *ce = getenv("HOTMOE_PREFILL_CHUNK");
    FILE *f = json ? fopen(json, "w") : NULL;
    if (f) fprintf(f, "[");
    printf("\n| model | device | prompt tokens | chunk | prefill tok/s | TTFT s | runs (tok/s) | VRAM device | engine | workspace | load s | warm-up %d tok s |\n", nw);
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int si = 0; si < n_sizes; si++) {
        int n = sizes[si];
        double rate[32], ttft[32];
        for (int run = 0; run < runs; run++) {
            random_tokens(tok, n, c->n_vocab, 12345 + 1000 * si + run);
            double t0 = hm_now();
            if (runner_prefill(r, tok, n, 0, logits, &e)) { fprintf(stderr, "bench_decode: %s\n", e.msg); return 1; }
            ttft[run] = hm_now() - t0;
            rate[run] = n / ttft[run];
        }
        double med = hm_median(rate, runs), mt = hm_median(ttft, runs);
        const size_t vram = cuda ? gpu_mem_used(0) : 0, ws = cuda ? gpu_exec_prefill_bytes(r->gpu) : 0;
        const size_t engine = lay.vram_total + ws;   /* what the engine allocated: its layout and the prefill workspace */
        const int chunk = cuda ? gpu_exec_prefill_chunk(r->gpu) : ce && atoi(ce) > 0 ? atoi(ce) : 4096;
        printf("| %s | %s | %d | %d | %.0f | %.3f | ", model, runner_device_name(r), n, chunk, med, mt);
        for (int i = 0; i < runs; i++) printf("%s%.0f", i ? ", " : "", rate[i]);
        printf(" | %.2f GiB | %.2f GiB | %.2f GiB | %.1f | %.2f |\n", vram / 1073741824.0, engine / 1073741824.0, ws / 1073741824.0, tl, tw);
        if (f) {
            fprintf(f, "%s{\"model\":\"%s\",\"device\":\"%s\",\"n_prompt\":%d,\"chunk\":%d,\"runs\":%d,\"prefill_tok_s\":%.3f,"
                       "\"ttft_s\":%.4f,\"vram_bytes\":%zu,\"engine_vram_bytes\":%zu,\"workspace_bytes\":%zu,\"gpu_mem_gib\":%.2f,"
                       "\"gpu_reserve_gib\":%.2f,\"prefill_runs_tok_s\":[",
                    si ? "," : "", model, runner_device_name(r), n, chunk, runs, med, mt, vram, engine, ws, ro->gpu_mem_gib,
                    ro->gpu_reserve_gib);
            for (int i = 0; i < runs; i++) fprintf(f, "%s%.3f", i ? "," : "", rate[i]);
            fprintf(f, "]}");
        }
        fflush(stdout);
    }
    if (f) { fprintf(f, "]\n"); fclose(f); }
    free(tok); free(logits);
    return 0;
}

/* --streams N: N sequences decoded together, each with its own KV cache in one executor (as
 * `serve --parallel N` runs them): every round one greedy token per sequence, up to GPU_BATCH_MAX
 * of them per batched step (gpu_exec_forward_batch; --no-batch: one step per sequence, for
 * comparison), all sharing the expert cache. Reports the summed and the per-sequence rate and the
 * cache's hit rate. */
static int bench_streams(const hm_model *m, const runner_opts *ro, const char *model, int n_streams, int n_prompt, int n_gen,
                         int runs, int no_batch, int host_argmax, const char *json) {
    const hm_config *c = &m->cfg;
    gpu_exec *g1, *g2;
    hm_error e;
    if (runner_gpu_create(m, n_prompt + n_gen, ro, n_streams, &g1, &g2, &e)) { fprintf(stderr, "bench_decode: %s\n", e.msg); return 1; }
    float *logits = hm_malloc(sizeof(float) * c->n_vocab * (size_t)n_streams), *x = hm_malloc(sizeof(float) * c->n_embd * GPU_BATCH_MAX);
    const int nbm = no_batch ? 1 : runner_gpu_batch_max(g1, g2);
    int sq[GPU_BATCH_MAX], ps[GPU_BATCH_MAX];
    int32_t tk[GPU_BATCH_MAX];
    printf("bench_decode: %d streams, %s, %s\n", n_streams, nbm > 1 ? "batched steps of up to 4 sequences" : "one step per sequence",
           host_argmax ? "logits copied out + host argmax" : "greedy tokens from the GPU");
    int32_t *ptok = hm_malloc(sizeof(int32_t) * (size_t)n_prompt), *nxt = hm_malloc(sizeof(int32_t) * (size_t)n_streams);
    double rate[32];
    uint64_t st[GPU_CACHE_STATS] = { 0 };
    char msg[1024];
    for (int run = 0; run < runs; run++) {
        for (int q = 0; q < n_streams; q++) {   /* each sequence its own prompt: one batched prefill (as the server), or token by token */
            random_tokens(ptok, n_prompt, c->n_vocab, 12345 + 100 * run + q);
            float *lq = logits + (size_t)q * c->n_vocab;
            if (!g2 && n_prompt > 1 && !gpu_exec_prefill_seq(g1, q, ptok, n_prompt, 0, lq, msg, sizeof msg)) continue;
            for (int i = 0; i < n_prompt; i++)
                if (runner_gpu_step(g1, g2, x, q, ptok[i], i, i + 1 == n_prompt ? lq : NULL, msg, sizeof msg)) {
                    fprintf(stderr, "bench_decode: %s\n", msg);
                    return 1;
                }
        }
        uint64_t v[GPU_CACHE_STATS];
        gpu_exec *stg[2] = { g1, g2 };
        for (int i = 0; i < 2; i++) if (stg[i]) gpu_exec_cache_stats(stg[i], v, 1, msg, sizeof msg);   /* the prompts' counts dropped */
        for (int q = 0; q < n_streams; q++) nxt[q] = sampler_argmax(logits + (size_t)q * c->n_vocab, c->n_vocab);
        double t0 = hm_now();
        for (int i = 0; i < n_gen; i++)
            for (int q0 = 0; q0 < n_streams; q0 += nbm > 1 ? nbm : 1) {
                const int nb = nbm > 1 ? (n_streams - q0 < nbm ? n_streams - q0 : nbm) : 1;
                for (int q = q0; q < q0 + nb; q++) {   /* greedy: each sequence's next token (the GPU's, or from its last logits) */
                    const int best = host_argmax ? sampler_argmax(logits + (size_t)q * c->n_vocab, c->n_vocab) : nxt[q];
                    sq[q - q0] = q; tk[q - q0] = best; ps[q - q0] = n_prompt + i;
                }
                float *l = logits + (size_t)q0 * c->n_vocab;
                int rc;
                if (host_argmax)
                    rc = nb > 1 ? runner_gpu_step_batch(g1, g2, x, nb, sq, tk, ps, l, msg, sizeof msg)
                                : runner_gpu_step(g1, g2, x, q0, tk[0], ps[0], l, msg, sizeof msg);
                else
                    rc = nb > 1 ? runner_gpu_step_batch_greedy(g1, g2, x, nb, sq, tk, ps, nxt + q0, msg, sizeof msg)
                                : runner_gpu_step_greedy(g1, g2, x, q0, tk[0], ps[0], nxt + q0, msg, sizeof msg);
                if (rc) { fprintf(stderr, "bench_decode: %s\n", msg); return 1; }
            }
        rate[run] = (double)n_streams * n_gen / (hm_now() - t0);
        for (int i = 0; i < 2; i++)
            if (stg[i] && !gpu_exec_cache_stats(stg[i], v, 1, msg, sizeof msg)) for (int j = 0; j < GPU_CACHE_STATS; j++) st[j] += v[j];
    }
    const double med = hm_median(rate, runs), sel = (double)(st[0] + st[1] + st[2] + st[3]);
    printf("\n| model | streams | summed decode tok/s | per stream | runs (summed) | expert cache hit rate | CPU experts/token |\n|---|---|---|---|---|---|---|\n");
    printf("| %s | %d | %.1f | %.1f | ", model, n_streams, med, med / n_streams);
    for (int i = 0; i < runs; i++) printf("%s%.1f", i ? ", " : "", rate[i]);
    printf(" | %.4f | %.2f |\n", sel > 0 ? st[0] / sel : 1.0, (double)st[3] / ((double)n_streams * n_gen * runs));
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "{\"model\":\"%s\",\"streams\":%d,\"batched\":%d,\"n_prompt\":%d,\"n_gen\":%d,\"runs\":%d,\"decode_tok_s\":%.3f,"
                       "\"per_stream_tok_s\":%.3f,\"hit_rate\":%.5f,\"runs_tok_s\":[", model, n_streams, nbm > 1, n_prompt, n_gen, runs, med,
                    med / n_streams, sel > 0 ? st[0] / sel : 1.0);
            for (int i = 0; i < runs; i++) fprintf(f, "%s%.3f", i ? "," : "", rate[i]);
            fprintf(f, "]}\n");
            fclose(f);
        }
    }
    gpu_exec_free(g1); gpu_exec_free(g2);
    free(logits); free(x); free(ptok); free(nxt);
    return 0;
}

int main(int argc, char **argv) {
    const char *model = NULL, *json = NULL, *dev = "auto", *record = NULL, *replay = NULL;
    int n_prompt = 128, n_gen = 512, runs = 3, sizes[16], n_sizes = 0, n_streams = 1, no_batch = 0, sref = 0, host_argmax = 0, quick = 0;
    sampler_params sp = sampler_defaults();   /* --temp, --top-k, --top-p, --min-p: the decode loop samples (default greedy) */
    long prompt_seed = 12345;   /* --prompt-seed: run r's random prompt is seeded with this + r */
    runner_opts ro; runner_opts_init(&ro);
    hm_error e;
    for (int i = 1; i < argc; i++) {
        int took = runner_opts_flag(&ro, argv[i], i + 1 < argc ? argv[i + 1] : NULL, &e);
        if (took < 0) { fprintf(stderr, "bench_decode: %s\n", e.msg); return 2; }
        if (took) { i += took == 1; continue; }
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) n_prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gen") && i + 1 < argc) n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--streams") && i + 1 < argc) n_streams = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-batch")) no_batch = 1;   /* --streams: one step per sequence */
        else if (!strcmp(argv[i], "--prompt-seed") && i + 1 < argc) prompt_seed = atol(argv[++i]);   /* a profiling run on other prompts */
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--temp") && i + 1 < argc) sp.temperature = (float)atof(argv[++i]);
        else if (!strcmp(argv[i], "--top-k") && i + 1 < argc) sp.top_k = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--top-p") && i + 1 < argc) sp.top_p = (float)atof(argv[++i]);
        else if (!strcmp(argv[i], "--min-p") && i + 1 < argc) sp.min_p = (float)atof(argv[++i]);
        else if (!strcmp(argv[i], "--sampler-ref")) sref = 1;   /* the reference sampler (whole-vocabulary sort, plain argmax loop) */
        else if (!strcmp(argv[i], "--host-argmax")) host_argmax = 1;   /* greedy: the logits copied out, the argmax on the host */
        else if (!strcmp(argv[i], "--quick")) quick = 1;   /* no replays after the runs (steps without logits, greedy both ways) */
        else if (!strcmp(argv[i], "--replay-routing") && i + 1 < argc) replay = argv[++i];
        else if (!strcmp(argv[i], "--record-routing") && i + 1 < argc) record = argv[++i];
        else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) {
            for (char *t = strtok(argv[++i], ","); t && n_sizes < 16; t = strtok(NULL, ",")) sizes[n_sizes++] = atoi(t);
            for (int k = 0; k < n_sizes; k++) if (sizes[k] < 1) { fprintf(stderr, "bench_decode: bad --prefill size\n"); return 2; }
        } else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) setenv("HOTMOE_PREFILL_CHUNK", argv[++i], 1);
        else { fprintf(stderr, "usage: bench_decode -m MODEL [--device cpu|cuda] [--prompt N] [--gen N] [--runs N] [--json FILE] [--prefill N,M] [--chunk N] [--streams N [--no-batch]] [--prompt-seed S] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--sampler-ref] [--quick] (and runner flags)\n"); return 2; }
    }
    if (!model || n_prompt < 1 || n_gen < 1 || runs < 1 || runs > 32) { fprintf(stderr, "bench_decode: -m MODEL is required\n"); return 2; }
    hm_model m;
    double tl = hm_now();
    if (model_load(&m, model, &e)) { fprintf(stderr, "bench_decode: %s\n", e.msg); return 1; }
    hm_runner r;
    int device = runner_parse_device(dev);
    int64_t *counts = NULL;
    if (ro.routing && routeio_counts(ro.routing, &m, &counts, &e)) { fprintf(stderr, "bench_decode: %s\n", e.msg); return 1; }
    ro.counts = counts;
    ro.route_io = record || replay;
    int n_ctx = n_prompt + n_gen;
    if (n_sizes) { n_ctx = 0; for (int k = 0; k < n_sizes; k++) if (sizes[k] > n_ctx) n_ctx = sizes[k]; }
    if (autoplan_apply(&ro, &m, device, n_ctx, 0, &e)) { fprintf(stderr, "bench_decode: %s\n", e.msg); return 1; }
    if (n_streams != 1) {
        if (n_streams < 1 || n_streams > 64 || device != HM_DEVICE_CUDA || record || replay || n_sizes) {
            fprintf(stderr, "bench_decode: --streams N: 1..64 sequences on --device cuda, without routing side channels or --prefill\n");
            return 2;
        }
        free(counts);
        int rc = bench_streams(&m, &ro, model, n_streams, n_prompt, n_gen, runs, no_batch, host_argmax, json);
        model_free(&m);
        return rc;
    }
    size_t used0 = 0;   /* device memory in use on every GPU, before: the pipeline uses two */
    for (int d = 0; d < gpu_device_count(); d++) used0 += gpu_mem_used(d);
    routeio io;
    if (device < 0 || runner_init_opts(&r, &m, device, n_ctx, &ro, &e) || routeio_open(&io, &m, record, replay, &e) ||
        routeio_attach(&io, &r, &e)) { fprintf(stderr, "bench_decode: %s\n", device < 0 ? "bad --device" : e.msg); return 1; }
    free(counts);
    tl = hm_now() - tl;
    if (n_sizes) {
        int rc = bench_prefill(&r, &m, &ro, model, sizes, n_sizes, runs, json, tl);
        routeio_close(&io, NULL); runner_free(&r); model_free(&m);
        return rc;
    }
    double ceiling = r.device == HM_DEVICE_CUDA ? gpu_measure_d2d(0) : 94.0; /* CPU: DEVICE.md's DRAM read */
    size_t vram = 0;
    for (int d = 0; r.device == HM_DEVICE_CUDA && d < gpu_device_count(); d++) vram += gpu_mem_used(d);
    vram = vram > used0 ? vram - used0 : 0;
    gpu_exec_layout lay = { 0 };
    runner_layout(&r, &lay);
    uint64_t st[GPU_CACHE_STATS] = { 0 }, tmp[GPU_CACHE_STATS], cpu_bytes = 0;
    double cpu_busy = 0;
    const hm_config *c = &m.cfg;
    float *logits = hm_malloc(sizeof(float) * c->n_vocab);
    sampler sm;
    sampler_init(&sm, &sp, c->n_vocab);
    double samp_s = 0;   /* host time in the sampler, all runs */
    int32_t *gen = hm_malloc(sizeof(int32_t) * (size_t)n_gen);   /* the last run's tokens, replayed without logits below */
    int32_t *chain_out = hm_malloc(sizeof(int32_t) * (size_t)(n_gen > 0 ? n_gen : 1));   /* the greedy chain's tokens */
    int chained = 0;   /* whether the runs' steps went through the greedy chain (HOTMOE_CHAIN, on unless 0) */
    /* greedy on a GPU: the argmax beside the step, only the token copied back (--host-argmax: the
     * logits copied out and the argmax on the host, as before) */
    const int gpu_greedy = r.device == HM_DEVICE_CUDA && sampler_greedy_only(&sm) && !sref && !host_argmax && !record && !replay;
    double dec[32], pre[32];
    /* the greedy chain's table and ring (HOTMOE_CHAIN, on unless 0) before the runs; its step graph is captured in the first run,
     * as the step-by-step greedy graph is */
    if (gpu_greedy && runner_greedy_chain(&r, 0, 0, 0, NULL, NULL, NULL, &e) == -1) { fprintf(stderr, "%s\n", e.msg); return 1; }
    for (int run = 0; run < runs; run++) {
        /* position 0 restarts the sequence: the KV cache is overwritten in order */
        int32_t *ptok = hm_malloc(sizeof(int32_t) * (size_t)n_prompt);
        random_tokens(ptok, n_prompt, c->n_vocab, (uint64_t)prompt_seed + run);
        double t0 = hm_now();
        if (!record && !replay) {
            if (runner_prefill(&r, ptok, n_prompt, 0, logits, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
        } else   /* the routing side channels see every token: the prompt goes token by token */
            for (int i = 0; i < n_prompt; i++) {
                routeio_before(&io, i);
                if (runner_forward(&r, ptok[i], i, i + 1 == n_prompt ? logits : NULL, &e) || routeio_after(&io, &e)) {
                    fprintf(stderr, "%s\n", e.msg);
                    return 1;
                }
            }
        free(ptok);
        if (lay.n_streamed && runner_cache_stats(&r, tmp, 1, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
        if (lay.cpu_threads) { uint64_t b; double bs; runner_cpu_stats(&r, &b, &bs, 1); }
        double t1 = hm_now();
        int32_t nx = -1;   /* the GPU's greedy token of the last step (-1: sample from the logits) */
        int i0 = 0;        /* the steps the greedy chain took (HOTMOE_CHAIN, on unless 0): the loop below takes the rest */
        if (gpu_greedy && n_gen > 0) {
            gen[0] = sampler_sample(&sm, logits);
            const int rc = runner_greedy_chain(&r, gen[0], n_prompt, n_gen, chain_out, NULL, NULL, &e);
            if (rc == -1) { fprintf(stderr, "%s\n", e.msg); return 1; }
            if (rc == n_gen) {
                for (int i = 1; i < n_gen; i++) gen[i] = chain_out[i - 1];
                i0 = n_gen;
                chained = 1;
            }
        }
        for (int i = i0; i < n_gen; i++) {
            const double ts = hm_now();
            const int best = nx >= 0 ? nx : sref ? sampler_sample_ref(&sm, logits) : sampler_sample(&sm, logits);   /* greedy unless --temp */
            samp_s += hm_now() - ts;
            gen[i] = best;
            routeio_before(&io, n_prompt + i);
            if ((gpu_greedy ? runner_forward_greedy(&r, best, n_prompt + i, logits, &nx, &e) : runner_forward(&r, best, n_prompt + i, logits, &e)) ||
                routeio_after(&io, &e)) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
        }
        double t2 = hm_now();
        pre[run] = n_prompt / (t1 - t0); dec[run] = n_gen / (t2 - t1);
        if (lay.n_streamed) {
            if (runner_cache_stats(&r, tmp, 1, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
            for (int j = 0; j < GPU_CACHE_STATS; j++) st[j] += tmp[j];
            if (lay.cpu_threads) { uint64_t b; double bs; runner_cpu_stats(&r, &b, &bs, 1); cpu_bytes += b; cpu_busy += bs; }
        }
    }
    double tok_s = hm_median(dec, runs), pre_s = hm_median(pre, runs), w = model_decode_bytes(&m);
    double kv = 2.0 * c->n_layer * c->kv_dim * 4 * (n_prompt + n_gen / 2.0); /* average KV bytes read per token */
    double gbs = (w + kv) * tok_s / 1e9;
    printf("\n| model | device | weights/token | KV/token | decode tok/s | GB/s | of ceiling (%.0f GB/s) | prompt tok/s | VRAM | load s |\n",
           ceiling);
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    printf("| %s | %s | %.1f MB | %.1f MB | %.1f | %.0f | %.1f%% | %.1f | %.2f GiB | %.1f |\n", model, runner_device_name(&r),
           w / 1e6, kv / 1e6, tok_s, gbs, 100 * gbs / ceiling, pre_s, vram / 1073741824.0, tl);
    printf("\nsampler (%s%s): %.1f us a token on the host, inside the decode time\n", sref ? "reference, " : "",
           chained ? "greedy on the GPU, chained: no host between steps" : gpu_greedy ? "greedy on the GPU" : sp.temperature > 0 ? "sampling" : "greedy",
           1e6 * samp_s / ((double)n_gen * runs));
    {   /* the last run's tokens, for comparing builds and layouts on the same prompts */
        uint64_t hsh = 1469598103934665603ull;
        for (int i = 0; i < n_gen; i++) { hsh ^= (uint32_t)gen[i]; hsh *= 1099511628211ull; }
        printf("tokens of the last run: %d, hash %016llx\n", n_gen, (unsigned long long)hsh);
    }
    if (r.device == HM_DEVICE_CUDA && !lay.n_streamed && !record && !replay && !quick) {
        /* the last run's steps again, same tokens and positions (the KV cache rewritten with the same
         * rows), without logits: no output head, no copy out, no sampler. The gap to the decode rate
         * is what a step costs past the layers. */
        double rr[32];
        for (int run = 0; run < runs; run++) {
            const double a = hm_now();
            for (int i = 0; i < n_gen; i++)
                if (runner_forward(&r, gen[i], n_prompt + i, NULL, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
            rr[run] = n_gen / (hm_now() - a);
        }
        const double nl = hm_median(rr, runs);
        printf("steps without logits (the last run's tokens and positions): %.1f tok/s; head, copy out and sampler: %.1f us a token\n",
               nl, 1e6 * (1 / tok_s - 1 / nl));
        if (sampler_greedy_only(&sm)) {   /* the same steps both ways: the greedy token on the GPU, the logits + host argmax */
            double ga[32], ha[32];
            int same = 1;
            for (int run = 0; run < runs; run++) {
                double a = hm_now();
                for (int i = 0; i < n_gen; i++) {
                    int32_t t;
                    if (runner_forward_greedy(&r, gen[i], n_prompt + i, logits, &t, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
                    if (i + 1 < n_gen && t != gen[i + 1]) same = 0;
                }
                ga[run] = n_gen / (hm_now() - a);
                a = hm_now();
                for (int i = 0; i < n_gen; i++) {
                    if (runner_forward(&r, gen[i], n_prompt + i, logits, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
                    if (i + 1 < n_gen && sampler_argmax(logits, c->n_vocab) != gen[i + 1]) same = 0;
                }
                ha[run] = n_gen / (hm_now() - a);
            }
            printf("greedy steps (the same tokens): argmax on the GPU %.1f tok/s, logits copied out + host argmax %.1f tok/s (%.3fx); "
                   "tokens %s\n", hm_median(ga, runs), hm_median(ha, runs), hm_median(ga, runs) / hm_median(ha, runs),
                   same ? "the run's, both ways" : "DIFFER from the run's");
        }
    }
    double hit = 0, mpt = 0, pcie_tok = 0, cpu_tok = 0, copy_gbs = 0, h2d = 0;
    runner_layout(&r, &lay);   /* the exchange's swaps so far */
    if (lay.n_streamed) {
        /* --swap-async: a swap-in is computed by the CPU in its step (counted there) and copied beside it */
        const double miss = (double)(st[2] + st[3] + (lay.swap_async ? 0 : st[1])), sel = st[0] + miss, toks = (double)n_gen * runs;
        hit = sel ? st[0] / sel : 0;
        mpt = miss / toks;
        pcie_tok = (st[1] + st[2] + st[4]) / toks * (double)lay.expert_bytes;   /* [4]: --prefetch's copies ahead */
        cpu_tok = st[3] / toks * (double)lay.expert_bytes;
        copy_gbs = gpu_cache_copy_rate(c->n_expert_used, lay.expert_bytes, 20);
        h2d = gpu_measure_h2d(0);
        printf("\n| expert cache | static + slots / layer | hit rate | misses/token (copied in, read in place, on CPU) | PCIe/token | "
               "PCIe GB/s at decode rate | CPU experts/token | DRAM GB/s at decode rate | copy kernel GB/s (of cudaMemcpy %.1f) | "
               "pinned host | VRAM (engine / device) | exchange swaps |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n", h2d);
        printf("| %d MoE layers%s | %d + %d of %d | %.4f | %.2f (%.2f, %.2f, %.2f) | %.1f MB | %.1f | %.1f MB | %.1f | %.1f (%.0f%%) | %.2f GiB | %.2f / %.2f GiB | %lld |\n",
               lay.n_streamed, lay.cpu_threads ? ", cpu workers" : "", lay.n_static, lay.n_slots, c->n_expert, hit, mpt,
               st[1] / toks, st[2] / toks, st[3] / toks, pcie_tok / 1e6, pcie_tok * tok_s / 1e9, cpu_tok / 1e6,
               cpu_tok * tok_s / 1e9, copy_gbs, h2d > 0 ? 100 * copy_gbs / h2d : 0, lay.pinned_host / 1073741824.0,
               lay.vram_total / 1073741824.0, vram / 1073741824.0, lay.swaps);
        if (st[4]) printf("\n--prefetch: %.2f experts/token copied ahead (in PCIe/token above)\n", st[4] / toks);
    }
    double cpu_gbs = 0, dram = 0;
    if (cpu_busy > 0) {   /* the CPU workers' read rate while they compute, beside the DRAM ceiling now */
        const size_t nb = (size_t)2 << 30;
        uint8_t *buf = malloc(nb);
        if (buf) {
            const int t = lay.cpu_threads;
#pragma omp parallel for num_threads(t) schedule(static)
            for (long i = 0; i < (long)(nb >> 12); i++) memset(buf + ((size_t)i << 12), 1, 4096);
            dram = cpu_dram_read_gbs(buf, nb, t, 3);
            free(buf);
        }
        cpu_gbs = cpu_bytes / cpu_busy / 1e9;
        printf("\nCPU workers (%d threads): %.2f GB of expert weights in %.3f s of jobs: %.1f GB/s while computing, %.0f%% of the "
               "DRAM read ceiling measured now (%.1f GB/s, %d threads)\n", lay.cpu_threads, cpu_bytes / 1e9, cpu_busy, cpu_gbs,
               dram > 0 ? 100 * cpu_gbs / dram : 0, dram, lay.cpu_threads);
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "{\"model\":\"%s\",\"device\":\"%s\",\"n_prompt\":%d,\"n_gen\":%d,\"runs\":%d,\"decode_tok_s\":%.3f,"
                       "\"prompt_tok_s\":%.3f,\"weight_bytes_per_token\":%.0f,\"kv_bytes_per_token\":%.0f,\"gb_s\":%.2f,"
                       "\"ceiling_gb_s\":%.1f,\"fraction_of_ceiling\":%.4f,\"vram_bytes\":%zu,\"decode_runs\":[",
                    model, runner_device_name(&r), n_prompt, n_gen, runs, tok_s, pre_s, w, kv, gbs, ceiling, gbs / ceiling, vram);
            for (int i = 0; i < runs; i++) fprintf(f, "%s%.3f", i ? "," : "", dec[i]);
            /* gpu_mem_gib bounds the process on each GPU; the engine (engine_vram_bytes) keeps within it less gpu_reserve_gib */
            fprintf(f, "],\"gpu_mem_gib\":%.2f,\"gpu_reserve_gib\":%.2f,\"engine_vram_bytes\":%zu,\"streamed_layers\":%d,"
                       "\"static_experts\":%d,\"cache_slots\":%d,\"pinned_host_bytes\":%zu,\"hit_rate\":%.5f,\"misses_per_token\":%.4f,"
                       "\"pcie_bytes_per_token\":%.0f,\"cpu_expert_bytes_per_token\":%.0f,\"cpu_threads\":%d,\"copy_kernel_gb_s\":%.2f,\"h2d_gb_s\":%.2f,"
                       "\"cpu_gb_s_busy\":%.2f,\"dram_ceiling_gb_s\":%.2f,\"swaps\":%lld}\n",
                    ro.gpu_mem_gib, ro.gpu_reserve_gib, lay.vram_total, lay.n_streamed, lay.n_static, lay.n_slots, lay.pinned_host, hit,
                    mpt, pcie_tok, cpu_tok, lay.cpu_threads, copy_gbs, h2d, cpu_gbs, dram, lay.swaps);
            fclose(f);
        }
    }
    if (routeio_close(&io, &e)) { fprintf(stderr, "bench_decode: %s\n", e.msg); return 1; }
    free(logits); free(gen); free(chain_out); sampler_free(&sm); runner_free(&r); model_free(&m);
    return 0;
}
