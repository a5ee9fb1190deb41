/* test_gpu_stream.c - --cold stream is exact: with the expert cache (any budget, any static/slot
 * split, 0 slots, every expert cold) the logits of 64 greedy tokens equal those of the
 * all-in-VRAM executor bit for bit (same kernels, same bytes), the tokens are identical, and the
 * cache's counters add up (hits + misses = MoE layers x top-k x tokens). Also the error paths: a
 * budget below the dense part, more static experts than the model has. Models: the fixtures, plus
 * any GGUF named on the command line (the device script passes generated tiny models and a3b).
 * Exits 77 (skipped) without a CUDA device. */
#include "convert.h"
#include "cpu.h"
#include "exec.h"
#include "gemv.h"
#include "gpu.h"
#include "loader.h"
#include "runner.h"
#include "test_util.h"
#ifdef HOTMOE_HAVE_CUDA
#include "gpu_gemv.h"
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTOK 64

static gpu_exec_opts mk(double gib, int cold, int S, int C, const int64_t *counts, int route_io) {
    gpu_exec_opts o = { .gpu_mem_gib = gib, .cold = cold, .n_static = S, .n_slots = C, .counts = counts, .quiet = 1,
                        .route_io = route_io, .swap_max = -1 };
    return o;
}

static void check(int ok, const char *fmt, const char *label, const char *what) {
    char line[2048];
    snprintf(line, sizeof line, fmt, what);
    report(ok, "%s: %s", label, line);
}

/* Greedy decode of NTOK tokens from a fixed 4-token prompt; logits of every position into out
 * (NTOK+3 rows), tokens into tok (force: feed these instead of the argmax). Returns the
 * executor's counters in st (NULL: not streamed). */
static int run_forced(const hm_model *m, const gpu_exec_opts *o, float *out, int32_t *tok, const int32_t *force, uint64_t st[GPU_CACHE_STATS],
                      gpu_exec_layout *lay, char *err, size_t n) {
    gpu_exec *g = gpu_exec_create_opts(m, 0, NTOK + 4, o, err, n);
    if (!g) return -1;
    const int V = m->cfg.n_vocab;
    int32_t t = 1 % V;
    int rc = 0;
    for (int i = 0; i < NTOK + 3 && !rc; i++) {
        float *l = out + (size_t)i * V;
        rc = gpu_exec_forward(g, t, i, l, err, n);
        if (i < 3) t = (int32_t)((7 * i + 3) % V);
        else {
            int b = 0;
            for (int v = 1; v < V; v++) if (l[v] > l[b]) b = v;
            t = tok[i - 3] = b;
            if (force) t = force[i - 3];
        }
    }
    if (!rc && st) rc = gpu_exec_cache_stats(g, st, 0, err, n);
    if (lay) gpu_exec_info(g, lay);
    gpu_exec_free(g);
    return rc;
}

static int run(const hm_model *m, const gpu_exec_opts *o, float *out, int32_t *tok, uint64_t st[GPU_CACHE_STATS], gpu_exec_layout *lay,
               char *err, size_t n) {
    return run_forced(m, o, out, tok, NULL, st, lay, err, n);
}

/* The GEMV path the executors are created with: 0 exact (F32 activations), 1 q8 (the default). */
static void gemv_mode(int q8) {
#ifdef HOTMOE_HAVE_CUDA
    gpu_gemv_set_mode(q8);
#else
    (void)q8;
#endif
}

/* quick: large models (the forced-miss and one CPU case only); q8: the default GEMV path, whose
 * stream runs must equal its own all-resident run bit for bit (the CPU cases need the exact path) */
static void model_tests(const char *label, const hm_model *m, int quick, int q8) {
    const hm_config *c = &m->cfg;
    const int V = c->n_vocab, E = c->n_expert, k = c->n_expert_used;
    size_t rows = (size_t)(NTOK + 3) * V;
    float *ref = malloc(sizeof(float) * rows), *got = malloc(sizeof(float) * rows);
    int32_t rt[NTOK], gt[NTOK];
    char err[1024], what[1400];
    gemv_mode(q8);
    gpu_exec_opts all = mk(0, GPU_COLD_NONE, -1, -1, NULL, 0);
    if (run(m, &all, ref, rt, NULL, NULL, err, sizeof err)) { check(0, "all resident: %s", label, err); goto out; }
    int n_moe = 0;
    for (int l = 0; l < c->n_layer; l++) n_moe += m->layers[l].is_moe;
    /* counts that make experts E-1, E-2, ... the most popular (static set != the low ids) */
    int64_t *counts = calloc((size_t)c->n_layer * E, sizeof *counts);
    for (int l = 0; l < c->n_layer; l++) for (int x = 0; x < E; x++) counts[(size_t)l * E + x] = x;
    struct { int S, C; const int64_t *cnt; const char *name; int ov; } cfg[] = {
        { 0, 0, NULL, "every expert cold (0 static, 0 slots)", 0 },
        { 0, 1, NULL, "1 slot: misses copied every step", 0 },
        { 0, k, NULL, "k slots", 0 },
        { 1, k + 1, counts, "1 static + k+1 slots (by counts)", 0 },
        { E / 4, E / 2, counts, "E/4 static + E/2 slots", 0 },
        { E - 1, 0, counts, "all static but one", 0 },
        { 0, E - 1, NULL, "E-1 slots", 0 },
        { 0, 1, NULL, "1 slot, --overlap-misses (copies beside the hits' GEMVs)", 1 },
        { 1, k + 1, counts, "1 static + k+1 slots, --overlap-misses", 1 },
        { 0, k, NULL, "k slots, --prefetch (the next layer's predicted experts copied ahead)", 2 },
        { 1, k + 1, counts, "1 static + k+1 slots, --prefetch --overlap-misses", 3 },
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        if ((quick || q8) && i != 1 && i != 7 && i != 9 && !(q8 && i == 0)) continue;   /* large models: the forced-miss cases (each case pins anew) */
        printf("-- %s: %s%s\n", label, cfg[i].name, q8 ? " (q8 GEMV)" : "");
        gpu_exec_opts o = mk(0, GPU_COLD_STREAM, cfg[i].S, cfg[i].C, cfg[i].cnt, 0);
        o.overlap_misses = cfg[i].ov & 1; o.prefetch = cfg[i].ov >> 1;
        uint64_t st[GPU_CACHE_STATS];
        for (size_t j = 0; j < rows; j++) got[j] = -1e30f;
        if (run(m, &o, got, gt, st, NULL, err, sizeof err)) { check(0, "%s", label, err); continue; }
        size_t bad = 0;
        for (size_t j = 0; j < rows; j++) bad += memcmp(&got[j], &ref[j], sizeof(float)) != 0;
        int same_tok = !memcmp(gt, rt, sizeof rt);
        uint64_t sel = st[0] + st[1] + st[2] + st[3], want = (uint64_t)n_moe * k * (NTOK + 3);
        int counters = sel == want && st[3] == 0 && (cfg[i].S + cfg[i].C > 0 || st[0] == 0) && (cfg[i].C > 0 || st[1] == 0);
        if (cfg[i].C == 1 && k > 1) counters &= st[1] + st[2] >= (uint64_t)n_moe * (k - 1) * (NTOK + 3);
        counters &= o.prefetch ? n_moe < 2 || st[4] > 0 : st[4] == 0;   /* copies ahead happen with --prefetch only */
        snprintf(what, sizeof what, "%s: %zu of %zu logits differ from all-resident, %d greedy tokens %s; "
                 "hits %llu, copied %llu, read in place %llu (sum %llu, expected %llu), prefetched %llu", cfg[i].name, bad, rows, NTOK,
                 same_tok ? "identical" : "DIFFER", (unsigned long long)st[0], (unsigned long long)st[1],
                 (unsigned long long)st[2], (unsigned long long)sel, (unsigned long long)want, (unsigned long long)st[4]);
        check(bad == 0 && same_tok && counters, "%s", label, what);
    }
    /* the all-GPU fast path's error against the exact all-resident run, fed the same tokens: the
     * CPU cases with the fast kernels must stay within twice it (the [cpu-workers] bar) */
    double gpu_fast = 0;
    if (!q8) {
        float *f = malloc(sizeof(float) * rows);
        int32_t ft[NTOK];
        gemv_mode(1);
        gpu_exec_opts all1 = mk(0, GPU_COLD_NONE, -1, -1, NULL, 0);
        if (run_forced(m, &all1, f, ft, rt, NULL, NULL, err, sizeof err)) check(0, "all resident, q8 GEMV: %s", label, err);
        else
            for (int p = 0; p < NTOK + 3; p++) {
                double e = max_rel_err(f + (size_t)p * V, ref + (size_t)p * V, V);
                if (!(e <= gpu_fast)) gpu_fast = e;
            }
        gemv_mode(0);
        free(f);
    }
    /* --cold cpu: the misses not copied are computed by the CPU workers (reference kernels there:
     * the sums differ from the GPU's only in order), fed the reference tokens */
    struct { int S, C, swap, interval; const char *name; } cc[] = {
        { 0, 0, 0, 0, "--cold cpu, every expert on the CPU" },
        { 1, k, 1, 0, "--cold cpu, 1 static + k slots, 1 swap-in per layer and step" },
        { E / 4, E / 4, 0, 0, "--cold cpu, E/4 static + E/4 slots, no swap-ins" },
        { 1, k, 64, 1, "--cold cpu, exchange forced at every token (floor 0.01, hysteresis 0.01)" },
        { 1, k, 2, -1, "--cold cpu --swap-async, 1 static + k slots, 2 swap-ins per layer and step on the side stream" },
        { 0, E / 2, 8, 8, "--cold cpu, exchange every 8 tokens, at most 8 swaps" },
        { 1, k, 1, -2, "--cold cpu --overlap-misses, 1 static + k slots, 1 swap-in per layer and step" },
        { 1, k, 1, -3, "--cold cpu --prefetch, 1 static + k slots, 1 swap-in per layer and step" },
        { 1, k, 1, -4, "--cold cpu --cpu-handoff hostfn (graph host nodes), 1 static + k slots, 1 swap-in per layer and step" },
        { 0, 0, 0, -4, "--cold cpu --cpu-handoff hostfn, every expert on the CPU" },
    };
    for (size_t i = 0; i < sizeof cc / sizeof cc[0] && !q8; i++) {
        if (quick && i != 1 && i != 3 && i != 6 && i != 8) continue;
        for (int fast = 0; fast < 2; fast++) {
            if (fast && i) break;
            printf("-- %s: %s (%s)\n", label, cc[i].name, fast ? "fast" : "ref");
            gpu_exec_opts o = mk(0, GPU_COLD_CPU, cc[i].S, cc[i].C, counts, 0);
            o.swap_max = cc[i].swap; o.cpu_threads = 4; o.swap_interval = cc[i].interval > 0 ? cc[i].interval : 0;
            o.swap_async = cc[i].interval == -1;
            o.overlap_misses = cc[i].interval == -2;
            o.prefetch = cc[i].interval == -3;
            o.cpu_handoff = cc[i].interval == -4;
            if (cc[i].interval == 1) { o.swap_floor = 0.01; o.swap_hyst = 0.01; }   /* any warm CPU expert displaces a slot */
            uint64_t st[GPU_CACHE_STATS];
            gpu_exec_layout lay;
            hm_kernels_set(fast ? HM_KERNELS_FAST : HM_KERNELS_REF);
            int rc = run_forced(m, &o, got, gt, rt, st, &lay, err, sizeof err);
            hm_kernels_set(HM_KERNELS_FAST);
            if (rc) { check(0, "%s", label, err); continue; }
            double worst = 0;
            int same_argmax = 1;
            for (int p = 0; p < NTOK + 3; p++) {
                const float *a = got + (size_t)p * V, *r = ref + (size_t)p * V;
                double e = max_rel_err(a, r, V);
                if (!(e <= worst)) worst = e;
                if (p >= 3) same_argmax &= gt[p - 3] == rt[p - 3];
            }
            /* --swap-async: a swap-in is computed by the CPU in its step and copied beside it (copied <=
             * on the CPU); else it is copied first and served from VRAM (a selection of its own) */
            uint64_t sel = st[0] + st[2] + st[3] + (o.swap_async ? 0 : st[1]), want = (uint64_t)n_moe * k * (NTOK + 3);
            int counters = sel == want && st[2] == 0 && (!o.swap_async || st[1] <= st[3]) && (cc[i].swap > 0 || st[1] == 0) &&
                           (cc[i].S + cc[i].C > 0 || st[3] == want) && (cc[i].interval <= 0 || st[1] == 0) &&
                           (cc[i].interval != 1 || lay.swaps >= NTOK / 2);
            char bar[96];
            if (fast) snprintf(bar, sizeof bar, "<= 2x the all-GPU fast path's %.3g, or 1e-4", gpu_fast);
            else snprintf(bar, sizeof bar, "<= 1e-4");
            snprintf(what, sizeof what, "%s (%s kernels on the CPU): max rel err vs all-resident %.3g (%s), argmax %s; "
                     "hits %llu, copied %llu, on the CPU %llu (sum %llu, expected %llu), exchange swaps %lld", cc[i].name, fast ? "fast" : "ref",
                     worst, bar, same_argmax ? "identical" : "differs", (unsigned long long)st[0],
                     (unsigned long long)st[1], (unsigned long long)st[3], (unsigned long long)sel, (unsigned long long)want, lay.swaps);
            check((worst <= 1e-4 || (fast && worst <= 2 * gpu_fast)) && counters, "%s", label, what);
        }
    }
    /* a budget from --gpu-mem alone: everything but half the routed experts' bytes */
    if (!q8) {
        printf("-- %s: budget from --gpu-mem\n", label);
        size_t all_b = gpu_exec_vram_needed(m, NTOK + 4), exp_b = 0;
        for (int l = 0; l < c->n_layer; l++) {
            if (!m->layers[l].is_moe) continue;
            const hm_ffn_w *f = &m->layers[l].experts[0].host;
            exp_b += (size_t)E * (f->gate.nbytes + f->up.nbytes + f->down.nbytes);
        }
        gpu_exec_opts o = mk(0, GPU_COLD_STREAM, -1, -1, counts, 0);
        o.gpu_mem_gib = (all_b - exp_b / 2 + gpu_exec_prefill_workspace(m, 64)) / 1073741824.0;   /* + the smallest prefill reserve */
        uint64_t st[GPU_CACHE_STATS];
        gpu_exec_layout lay;
        if (run(m, &o, got, gt, st, &lay, err, sizeof err)) check(0, "budget: all but half the experts: %s", label, err);
        else {
            size_t bad = 0;
            for (size_t j = 0; j < rows; j++) bad += memcmp(&got[j], &ref[j], sizeof(float)) != 0;
            int within = lay.vram_total + lay.prefill_reserved <= (size_t)(o.gpu_mem_gib * 1073741824.0) && lay.n_streamed > 0;
            snprintf(what, sizeof what, "--gpu-mem %.4f GiB (all-resident less half the experts, plus a 64-token prefill chunk): %d static + %d slots, engine VRAM %zu "
                     "+ a prefill chunk of %d tokens reserved %zu <= budget %s, %zu logits differ", o.gpu_mem_gib, lay.n_static,
                     lay.n_slots, lay.vram_total, lay.prefill_chunk, lay.prefill_reserved, within ? "yes" : "NO", bad);
            check(bad == 0 && within && !memcmp(gt, rt, sizeof rt), "%s", label, what);
        }
    }
    /* error paths */
    if (!q8) {
        gpu_exec_opts o = mk(1e-6, GPU_COLD_STREAM, -1, -1, NULL, 0);
        gpu_exec *g = gpu_exec_create_opts(m, 0, NTOK + 4, &o, err, sizeof err);
        check(!g && strstr(err, "at least") && strstr(err, "GiB"), "budget below the dense part is refused: %s", label, g ? "(created)" : err);
        gpu_exec_free(g);
        gpu_exec_opts o2 = mk(0, GPU_COLD_STREAM, E + 1, 0, NULL, 0);
        g = gpu_exec_create_opts(m, 0, NTOK + 4, &o2, err, sizeof err);
        check(!g && strstr(err, "experts per layer"), "more static experts than the model has: %s", label, g ? "(created)" : err);
        gpu_exec_free(g);
        gpu_exec_opts o3 = mk(1e-6, GPU_COLD_NONE, -1, -1, NULL, 0);
        g = gpu_exec_create_opts(m, 0, NTOK + 4, &o3, err, sizeof err);
        check(!g && strstr(err, "--cold stream"), "a budget too small without --cold stream says so: %s", label, g ? "(created)" : err);
        gpu_exec_free(g);
    }
    free(counts);
out:
    gemv_mode(0);
    free(ref); free(got);
}

/* --record-routing / --replay-routing on the GPU: the recorded choices equal the CPU reference's,
 * and a replayed (forced) choice gives the CPU reference's logits under the same replay (1e-3
 * relative, reference kernels), with and without the expert cache (bit-identical between those). */
static int cpu_ids[64 * 64];
static void on_route(void *ud, int layer, int pos, const int *idx, const float *w, int k) {
    (void)ud; (void)pos; (void)w;
    memcpy(cpu_ids + layer * k, idx, sizeof(int) * k);
}

/* The cache kernel's decisions against a host replay of its rule (gpu/cache.cu): the GPU records
 * each step's choices (route_io), the host runs them through the same LFU (float scores decayed
 * by 0.995 with fmaf, +1 per choice; a miss takes the lowest-scoring slot not used by the token,
 * an empty one first, ties to the lowest slot; static experts and the warm slots from the counts'
 * order) and must count the same hits and copies. The end-to-end tests above cannot see a wrong
 * victim: the logits stay exact, only the hit rate suffers. */
static void lfu_reference_tests(const char *label, const hm_model *m) {
    printf("-- %s: lfu reference tests\n", label);
    const hm_config *c = &m->cfg;
    const int E = c->n_expert, k = c->n_expert_used, L = c->n_layer, n = 40, S = 1, C = k + 1, R = S + C;
    if (R >= E || L * k > 64 * 64) return;
    int64_t *counts = calloc((size_t)L * E, sizeof *counts);
    for (int l = 0; l < L; l++) for (int x = 0; x < E; x++) counts[(size_t)l * E + x] = x;   /* order: E-1, E-2, ... */
    gpu_exec_opts o = mk(0, GPU_COLD_STREAM, S, C, counts, 1);
    char err[1024], what[512];
    gpu_exec *g = gpu_exec_create_opts(m, 0, n, &o, err, sizeof err);
    int *rec = malloc(sizeof(int) * (size_t)n * L * k);
    float *lg = malloc(sizeof(float) * c->n_vocab);
    uint64_t st[GPU_CACHE_STATS] = { 0 };
    int rc = !g;
    for (int i = 0; i < n && !rc; i++) {
        rc = gpu_exec_forward(g, (int32_t)((i * 977 + 5) % c->n_vocab), i, lg, err, sizeof err);
        if (!rc) memcpy(rec + (size_t)i * L * k, gpu_exec_route_ids(g), sizeof(int) * L * k);
    }
    if (!rc) rc = gpu_exec_cache_stats(g, st, 0, err, sizeof err);
    gpu_exec_free(g);
    uint64_t hits = 0, copied = 0;
    float *score = malloc(sizeof(float) * E);
    int *slot_of = malloc(sizeof(int) * E), *owner = malloc(sizeof(int) * R);
    for (int l = 0; l < L && !rc; l++) {
        if (!m->layers[l].is_moe) continue;
        for (int e = 0; e < E; e++) { score[e] = 0; slot_of[e] = -1; }
        for (int r = 0; r < R; r++) { owner[r] = E - 1 - r; slot_of[E - 1 - r] = r; }
        for (int i = 0; i < n; i++) {
            const int *ids = rec + ((size_t)i * L + l) * k;
            for (int e = 0; e < E; e++) {
                float add = 0;
                for (int j = 0; j < k; j++) add = ids[j] == e ? 1.f : add;
                score[e] = fmaf(score[e], 0.995f, add);
            }
            for (int j = 0; j < k; j++) {
                const int e = ids[j];
                if (slot_of[e] >= 0) { hits++; continue; }
                int v = -1; float best = INFINITY;
                for (int r = S; r < R; r++) {
                    const int ow = owner[r];
                    int cur = 0;
                    for (int q = 0; q < k; q++) cur |= ow >= 0 && ids[q] == ow;
                    if (cur) continue;
                    const float key = ow < 0 ? -INFINITY : score[ow];
                    if (v < 0 || key < best) { best = key; v = r; }
                }
                if (v < 0) continue;
                if (owner[v] >= 0) slot_of[owner[v]] = -1;
                owner[v] = e; slot_of[e] = v;
                copied++;
            }
        }
    }
    snprintf(what, sizeof what, "cache decisions vs a host replay of the kernel's LFU rule (1 static + k+1 slots, %d steps): "
             "hits %llu / %llu, copied %llu / %llu", n, (unsigned long long)st[0], (unsigned long long)hits,
             (unsigned long long)st[1], (unsigned long long)copied);
    check(!rc && st[0] == hits && st[1] == copied, "%s", label, rc ? err : what);
    free(counts); free(rec); free(lg); free(score); free(slot_of); free(owner);
}

static void route_tests(const char *label, const hm_model *m) {
    printf("-- %s: route tests\n", label);
    const hm_config *c = &m->cfg;
    const int V = c->n_vocab, E = c->n_expert, k = c->n_expert_used, L = c->n_layer, n = 24;
    if (L * k > 64 * 64) return;
    char err[1024], what[512];
    gpu_exec_opts res = mk(0, GPU_COLD_NONE, -1, -1, NULL, 1), str = mk(0, GPU_COLD_STREAM, 0, 1, NULL, 1);
    gpu_exec *g = gpu_exec_create_opts(m, 0, n, &res, err, sizeof err), *gs = gpu_exec_create_opts(m, 0, n, &str, err, sizeof err);
    cpu_state cs;
    if (!g || !gs || cpu_state_init(&cs, c, n)) { check(0, "route io: %s", label, err); gpu_exec_free(g); gpu_exec_free(gs); return; }
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V), *bs = malloc(sizeof(float) * V);
    int *forced = malloc(sizeof(int) * L * k);
    int same_rec = 1; size_t diff_s = 0; double worst = 0;
    hm_kernels_set(HM_KERNELS_REF);
    cs.route_cb = on_route;
    for (int pass = 0; pass < 2; pass++) {     /* 0: record and compare; 1: replay forced choices */
        cs.replay = pass ? forced : NULL;
        for (int i = 0; i < n; i++) {
            const int32_t t = (int32_t)((i * 37 + 11) % V);
            for (int l = 0; l < L; l++)
                for (int j = 0; j < k; j++) forced[l * k + j] = pass ? (i * 3 + l + j * (E / k)) % E : -1;
            memcpy(gpu_exec_replay_ids(g), forced, sizeof(int) * L * k);
            memcpy(gpu_exec_replay_ids(gs), forced, sizeof(int) * L * k);
            for (int l = 0; l < L * k; l++) cpu_ids[l] = -1;
            cpu_forward(m, &cs, t, i, a);
            if (gpu_exec_forward(g, t, i, b, err, sizeof err) || gpu_exec_forward(gs, t, i, bs, err, sizeof err)) {
                check(0, "route io: %s", label, err); goto out;
            }
            same_rec &= !memcmp(gpu_exec_route_ids(g), cpu_ids, sizeof(int) * L * k) &&
                        !memcmp(gpu_exec_route_ids(gs), cpu_ids, sizeof(int) * L * k);
            for (int v = 0; v < V; v++) diff_s += memcmp(&b[v], &bs[v], sizeof(float)) != 0;
            const double r = max_rel_err(b, a, V);
            if (pass && !(r <= worst)) worst = r;
        }
    }
    snprintf(what, sizeof what, "GPU recorded choices %s the CPU's (natural and replayed); replayed logits vs CPU replay: "
             "max rel err %.3g (<= 1e-3); with the cache (1 slot): %zu logits differ", same_rec ? "equal" : "DIFFER from", worst, diff_s);
    check(same_rec && worst <= 1e-3 && diff_s == 0, "%s", label, what);
out:
    hm_kernels_set(HM_KERNELS_FAST);
    free(a); free(b); free(bs); free(forced); cpu_state_free(&cs); gpu_exec_free(g); gpu_exec_free(gs);
}

/* Batched prefill through the cache: experts resident, read in place from pinned RAM, or staged
 * into the prefill buffers (--staging) are the same bytes, so the logits of the prompt's last token
 * and of the decode steps after it equal the all-resident executor's bit for bit. 300 tokens: the
 * staging path takes chunks of 256 and more. */
static void prefill_tests(const char *label, const hm_model *m) {
    const hm_config *c = &m->cfg;
    const int V = c->n_vocab, E = c->n_expert, n = 300, extra = 4;
    int32_t *tok = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) tok[i] = (int32_t)((i * 7919 + 13) % V);
    float *ref = malloc(sizeof(float) * V * (extra + 1)), *got = malloc(sizeof(float) * V * (extra + 1));
    char err[1024], what[1600];
    struct { int cold, S, C, staging; const char *name; } cfg[] = {
        { GPU_COLD_NONE, -1, -1, 0, "resident" },
        { GPU_COLD_STREAM, 0, 1, 0, "--cold stream, cold experts read in place" },
        { GPU_COLD_STREAM, 0, 1, E, "--cold stream --staging E (every cold expert staged)" },
        { GPU_COLD_STREAM, 1, 1, 2, "--cold stream --staging 2 (some staged, the rest in place)" },
        { GPU_COLD_CPU, 1, 1, E, "--cold cpu --staging E" },
    };
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        printf("-- %s: prefill, %s\n", label, cfg[ci].name);
        gpu_exec_opts o = mk(0, cfg[ci].cold, cfg[ci].S, cfg[ci].C, NULL, 0);
        o.staging = cfg[ci].staging; o.cpu_threads = 2;
        float *out = ci ? got : ref;
        const int cpu = cfg[ci].cold == GPU_COLD_CPU;
        if (cpu) hm_kernels_set(HM_KERNELS_REF);   /* the decode steps' CPU experts: the GPU's sums up to order */
        gpu_exec *g = gpu_exec_create_opts(m, 0, n + extra + 1, &o, err, sizeof err);
        int rc = !g || gpu_exec_prefill(g, tok, n, 0, out, err, sizeof err);
        for (int i = 0; i < extra && !rc; i++) {
            int b = 0;
            const float *l = out + (size_t)i * V;
            for (int v = 1; v < V; v++) if (l[v] > l[b]) b = v;
            rc = gpu_exec_forward(g, b, n + i, out + (size_t)(i + 1) * V, err, sizeof err);
        }
        gpu_exec_free(g);
        hm_kernels_set(HM_KERNELS_FAST);
        if (!ci) { if (rc) { check(0, "prefill (resident): %s", label, err); break; } continue; }
        /* the prompt's logits bit for bit (the prefill runs every expert on the GPU); the decode
         * steps too, or within 1e-4 where the CPU workers computed the cold experts */
        size_t bad = 0, nb = cpu ? (size_t)V : (size_t)V * (extra + 1);
        for (size_t j = 0; !rc && j < nb; j++) bad += memcmp(&got[j], &ref[j], sizeof(float)) != 0;
        double worst = 0;
        for (int i = 1; cpu && !rc && i <= extra; i++) {
            double e = max_rel_err(got + (size_t)i * V, ref + (size_t)i * V, V);
            if (!(e <= worst)) worst = e;
        }
        snprintf(what, sizeof what, "prefill of %d tokens + %d decode steps, %s: %zu of %zu logits differ from all-resident%s%.3g", n,
                 extra, cfg[ci].name, bad, nb, cpu ? "; decode steps (CPU experts, ref kernels) max rel err (<= 1e-4) " : "", worst);
        check(!rc && bad == 0 && worst <= 1e-4, "%s", label, rc ? err : what);
    }
    free(tok); free(ref); free(got);
}

/* A two-stage pipeline (layers [0, s) then [s, L); the second stage on device 1 when there are two
 * GPUs, else on device 0 too) gives the whole executor's logits: the same kernels, the boundary
 * norm run by the second stage's first op. Resident, and each stage with its own expert cache
 * (stream, cpu). */
static void pipeline_tests(const char *label, const hm_model *m) {
    const int dev_b = gpu_device_count() > 1 ? 1 : 0;
    const hm_config *c = &m->cfg;
    const int V = c->n_vocab, L = c->n_layer, s = L / 2 > 0 ? L / 2 : 1, n = 24;
    if (L < 2) return;
    float *ref = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V), *x = malloc(sizeof(float) * c->n_embd);
    char err[1024], what[1600];
    struct { int cold, S, C; const char *name; } cfg[] = {
        { GPU_COLD_NONE, -1, -1, "resident" }, { GPU_COLD_STREAM, 0, 1, "--cold stream, 1 slot per stage" },
        { GPU_COLD_CPU, 1, 1, "--cold cpu, 1 static + 1 slot per stage" },
    };
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        printf("-- %s: pipeline, %s\n", label, cfg[ci].name);
        gpu_exec_opts full = mk(0, GPU_COLD_NONE, -1, -1, NULL, 0), a = mk(0, cfg[ci].cold, cfg[ci].S, cfg[ci].C, NULL, 0), b;
        a.cpu_threads = 2; b = a;
        const int cpu = cfg[ci].cold == GPU_COLD_CPU;
        if (cpu) hm_kernels_set(HM_KERNELS_REF);   /* the CPU's experts: the GPU's sums up to order */
        a.layer_first = 0; a.layer_last = s; b.layer_first = s; b.layer_last = L; b.cpu_first_core = 2;
        gpu_exec *g = gpu_exec_create_opts(m, 0, n, &full, err, sizeof err), *ga = g ? gpu_exec_create_opts(m, 0, n, &a, err, sizeof err) : NULL,
                 *gb = ga ? gpu_exec_create_opts(m, dev_b, n, &b, err, sizeof err) : NULL;
        double worst = 0;
        int same = 1, rc = !gb;
        for (int i = 0; i < n && !rc; i++) {
            const int32_t t = (int32_t)((i * 131 + 7) % V);
            rc = gpu_exec_forward(g, t, i, ref, err, sizeof err) || gpu_exec_forward_stage(ga, 0, t, NULL, i, NULL, x, err, sizeof err) ||
                 gpu_exec_forward_stage(gb, 0, t, x, i, got, NULL, err, sizeof err);
            if (rc) break;
            double e = max_rel_err(got, ref, V);
            if (!(e <= worst)) worst = e;
            int ia = 0, ib = 0;
            for (int v = 1; v < V; v++) { if (ref[v] > ref[ia]) ia = v; if (got[v] > got[ib]) ib = v; }
            same &= ia == ib;
        }
        hm_kernels_set(HM_KERNELS_FAST);
        const double tol = cpu ? 1e-4 : 1e-5;
        if (rc) snprintf(what, sizeof what, "pipeline %s: %s", cfg[ci].name, err);
        else snprintf(what, sizeof what, "pipeline of layers [0, %d) on GPU 0 + [%d, %d) on GPU %d, %s: max rel err vs the whole "
                      "executor %.3g (<= %g) over %d positions, argmax %s", s, s, L, dev_b, cfg[ci].name, worst, tol, n,
                      same ? "identical" : "DIFFERS");
        check(!rc && worst <= tol && same, "%s", label, what);
        gpu_exec_free(g); gpu_exec_free(ga); gpu_exec_free(gb);
    }
    /* the runner's pipeline (--gpus 0,B) runs a prompt through both stages: its last logits are the
     * whole executor's; a prompt past the context is refused with the position named */
    {
        runner_opts o;
        runner_opts_init(&o);
        o.n_gpus = 2; o.gpus[0] = 0; o.gpus[1] = dev_b; o.cold = GPU_COLD_NONE;
        hm_runner r;
        hm_error e = { 0 };
        int32_t *tk = malloc(sizeof(int32_t) * n);
        for (int i = 0; i < n; i++) tk[i] = (int32_t)((i * 131 + 7) % V);
        gpu_exec *g = gpu_exec_create(m, 0, n, err, sizeof err);
        int rc = !g || runner_init_opts(&r, m, HM_DEVICE_CUDA, n, &o, &e);
        for (int i = 0; i < n && !rc; i++) rc = gpu_exec_forward(g, tk[i], i, ref, err, sizeof err);
        if (!rc) rc = runner_prefill(&r, tk, n, 0, got, &e);
        double worst = rc ? 1 : max_rel_err(got, ref, V);
        check(!rc && worst <= 1e-5, "%s", label, rc ? (e.msg[0] ? e.msg : err) : "runner pipeline prefill: last logits equal the whole executor's");
        if (!rc) {
            int bad = runner_prefill(&r, tk, n, 1, got, &e);
            check(bad && strstr(e.msg, "position"), "%s", label, bad ? e.msg : "runner pipeline prefill past the context accepted");
            runner_free(&r);
        }
        gpu_exec_free(g); free(tk);
    }
    /* a stage refuses what needs the whole model */
    gpu_exec_opts a = mk(0, GPU_COLD_NONE, -1, -1, NULL, 0);
    a.layer_first = 0; a.layer_last = s;
    gpu_exec *ga = gpu_exec_create_opts(m, 0, n, &a, err, sizeof err);
    int32_t tk = 1;
    int r1 = ga ? gpu_exec_forward(ga, 1, 0, got, err, sizeof err) : -2;
    int r2 = ga ? gpu_exec_prefill(ga, &tk, 1, 0, got, err, sizeof err) : -2;
    a.layer_first = s; a.layer_last = L + 1;
    gpu_exec *bad = gpu_exec_create_opts(m, 0, n, &a, err, sizeof err);
    check(ga && r1 == -1 && r2 == -1 && !bad && strstr(err, "outside"), "a stage refuses forward/prefill of the whole model; "
          "layers past the model are refused: %s", label, err);
    gpu_exec_free(ga); gpu_exec_free(bad);
    free(ref); free(got); free(x);
}

/* Batched decode (gpu_exec_forward_batch): 4 sequences started one step apart (so a step batches
 * 1-4 tokens at different positions, listed in reverse sequence order) against the same executor
 * configuration run one sequence at a time with gpu_exec_forward_seq: every logit equal bit for
 * bit (the same kernels per row), and with CPU experts (reference kernels) within 1e-4. Also a
 * two-stage pipeline batched against the whole executor, and the error paths. */
static void batch_tests(const char *label, const hm_model *m, int q8) {
    const hm_config *c = &m->cfg;
    const int V = c->n_vocab, NS = 4, NP = 10, n_ctx = NP, steps = NP + NS - 1, L = c->n_layer;
    float *ref = malloc(sizeof(float) * (size_t)V * NS * NP), *got = malloc(sizeof(float) * (size_t)V * NS * NP);
    float *lb = malloc(sizeof(float) * (size_t)V * NS), *x = malloc(sizeof(float) * (size_t)c->n_embd * NS);
    char err[1024], what[1600];
    struct { int cold, S, C, xch, pipe; const char *name; } cfg[] = {
        { GPU_COLD_NONE, -1, -1, 0, 0, "resident" },
        { GPU_COLD_STREAM, 0, 1, 0, 0, "--cold stream, 1 slot (the tokens' union mostly read in place)" },
        { GPU_COLD_STREAM, 1, 2 * 4, 0, 0, "--cold stream, 1 static + 8 slots" },
        { GPU_COLD_CPU, 1, 1, 0, 0, "--cold cpu, 1 static + 1 slot" },
        { GPU_COLD_CPU, 0, 0, 0, 0, "--cold cpu, every expert on the CPU" },
        { GPU_COLD_CPU, 1, 2, 2, 0, "--cold cpu, exchange every 2 steps" },
        { GPU_COLD_NONE, -1, -1, 0, 1, "pipeline of two stages, resident" },
        { GPU_COLD_CPU, 1, 1, 0, 1, "pipeline of two stages, --cold cpu" },
    };
    gemv_mode(q8);
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        const int cpu = cfg[ci].cold == GPU_COLD_CPU;
        if (q8 && (cpu || cfg[ci].pipe)) continue;   /* q8: the GPU-only paths (the CPU's sums differ from the q8 GEMVs) */
        if (cfg[ci].pipe && L < 2) continue;
        printf("-- %s: batched decode, %s%s\n", label, cfg[ci].name, q8 ? " (q8 GEMVs)" : "");
        if (cpu) hm_kernels_set(HM_KERNELS_REF);
        gpu_exec_opts o = mk(0, cfg[ci].cold, cfg[ci].S, cfg[ci].C, NULL, 0), a, b;
        o.n_seq = NS; o.cpu_threads = 2;
        if (cfg[ci].xch) { o.swap_interval = cfg[ci].xch; o.swap_floor = 0.01; o.swap_hyst = 0.01; }
        a = o; b = o;
        const int sp = L / 2 > 0 ? L / 2 : 1;
        a.layer_first = 0; a.layer_last = sp; b.layer_first = sp; b.layer_last = L; b.cpu_first_core = 2;
        gpu_exec *r = gpu_exec_create_opts(m, 0, n_ctx, &o, err, sizeof err), *g = NULL, *g2 = NULL;
        if (r && cfg[ci].pipe) {
            g = gpu_exec_create_opts(m, 0, n_ctx, &a, err, sizeof err);
            g2 = g ? gpu_exec_create_opts(m, gpu_device_count() > 1 ? 1 : 0, n_ctx, &b, err, sizeof err) : NULL;
        } else if (r)
            g = gpu_exec_create_opts(m, 0, n_ctx, &o, err, sizeof err);
        int rc = !r || !g || (cfg[ci].pipe && !g2), maxnb = 0;
        for (int st = 0; st < steps && !rc; st++) {
            int sq[4], ps[4], nb = 0;
            int32_t tk[4];
            for (int q = NS - 1; q >= 0; q--) {   /* sequence q runs positions 0..NP-1 from step q on */
                const int p = st - q;
                if (p < 0 || p >= NP) continue;
                sq[nb] = q; ps[nb] = p; tk[nb] = (int32_t)((p * 131 + 7 + 17 * q) % V);
                rc = rc || gpu_exec_forward_seq(r, q, tk[nb], p, ref + ((size_t)q * NP + p) * V, err, sizeof err);
                nb++;
            }
            if (rc || !nb) continue;
            if (nb > maxnb) maxnb = nb;
            rc = runner_gpu_step_batch(g, g2, x, nb, sq, tk, ps, lb, err, sizeof err);
            for (int j = 0; j < nb && !rc; j++) memcpy(got + ((size_t)sq[j] * NP + ps[j]) * V, lb + (size_t)j * V, sizeof(float) * V);
        }
        size_t diff = 0;
        double worst = 0;
        if (!rc) {
            for (size_t i = 0; i < (size_t)V * NS * NP; i++) diff += memcmp(&got[i], &ref[i], sizeof(float)) != 0;
            for (int q = 0; q < NS * NP; q++) {
                const double e = max_rel_err(got + (size_t)q * V, ref + (size_t)q * V, V);
                if (!(e <= worst)) worst = e;
            }
        }
        hm_kernels_set(HM_KERNELS_FAST);
        const int exact = !cpu;
        if (rc) snprintf(what, sizeof what, "batched decode, %s: %s", cfg[ci].name, err);
        else if (exact) snprintf(what, sizeof what, "batched decode (1-%d tokens per step), %s%s: %zu of %zu logits differ from one "
                                 "sequence at a time", maxnb, cfg[ci].name, q8 ? " (q8)" : "", diff, (size_t)V * NS * NP);
        else snprintf(what, sizeof what, "batched decode (1-%d tokens per step), %s (ref kernels on the CPU): max rel err vs one "
                      "sequence at a time %.3g (<= 1e-4), %zu of %zu logits not bitwise equal", maxnb, cfg[ci].name, worst,
                      diff, (size_t)V * NS * NP);
        check(!rc && maxnb == NS && (exact ? diff == 0 : worst <= 1e-4), "%s", label, what);
        gpu_exec_free(r); gpu_exec_free(g); gpu_exec_free(g2);
    }
    gemv_mode(0);
    if (!q8) {   /* refused: the same sequence twice, more tokens than the batch takes, an executor of one sequence */
        gpu_exec_opts o = mk(0, GPU_COLD_NONE, -1, -1, NULL, 0);
        o.n_seq = NS;
        gpu_exec *g = gpu_exec_create_opts(m, 0, n_ctx, &o, err, sizeof err), *g1 = gpu_exec_create(m, 0, n_ctx, err, sizeof err);
        int sq[5] = { 0, 0, 1, 2, 3 }, ps[5] = { 0 };
        int32_t tk[5] = { 1, 1, 1, 1, 1 };
        char e1[512] = "", e2[512] = "", e3[512] = "";
        const int r1 = g ? gpu_exec_forward_batch(g, 2, sq, tk, NULL, ps, lb, NULL, e1, sizeof e1) : 0;
        const int r2 = g ? gpu_exec_forward_batch(g, 5, sq, tk, NULL, ps, lb, NULL, e2, sizeof e2) : 0;
        const int r3 = g1 ? gpu_exec_forward_batch(g1, 2, sq + 1, tk, NULL, ps, lb, NULL, e3, sizeof e3) : 0;
        snprintf(what, sizeof what, "batched decode refuses a sequence twice (%s), 5 tokens (%s), a one-sequence executor (%s)", e1, e2, e3);
        check(r1 == -1 && r2 == -1 && r3 == -1 && strstr(e1, "twice") && strstr(e2, "5") && strstr(e3, "several"), "%s", label, what);
        gpu_exec_free(g); gpu_exec_free(g1);
    }
    free(ref); free(got); free(lb); free(x);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);   /* a stalled case shows as the last "-- " line */
    if (!gpu_built() || gpu_device_count() == 0) { printf("SKIP: no CUDA device (test_gpu_stream needs a GPU)\n"); return 77; }
    gemv_mode(0);
    static const char *fixtures[] = { "qwen3moe", "glm4moe" };
    for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/fixtures/%s", HM_TESTS_DIR, fixtures[f]);
        hm_model m; hm_error e;
        if (model_load(&m, dir, &e)) { printf("FAIL %s\n", e.msg); n_fail++; continue; }
        model_tests(fixtures[f], &m, 0, 0);
        model_tests(fixtures[f], &m, 0, 1);
        route_tests(fixtures[f], &m);
        lfu_reference_tests(fixtures[f], &m);
        pipeline_tests(fixtures[f], &m);
        prefill_tests(fixtures[f], &m);
        batch_tests(fixtures[f], &m, 0);
        batch_tests(fixtures[f], &m, 1);
        model_free(&m);
    }
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) { quick = 1; continue; }   /* for the models named after it */
        hm_model m; hm_error e;
        if (model_load(&m, argv[i], &e)) { printf("FAIL %s\n", e.msg); n_fail++; continue; }
        model_tests(argv[i], &m, quick, 0);
        model_tests(argv[i], &m, 1, 1);
        if (!quick) { route_tests(argv[i], &m); lfu_reference_tests(argv[i], &m); pipeline_tests(argv[i], &m); prefill_tests(argv[i], &m); }
        batch_tests(argv[i], &m, 1);
        model_free(&m);
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
