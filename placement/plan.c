/* plan.c - the placement planner and its cost model (see plan.h). Order of decisions: split the
 * layers over the GPUs in proportion to their budgets; check that each GPU holds the dense part
 * and KV cache of its layers; give the rest of each budget to experts, most routed first, in
 * order of expected hits per byte across all layers of that GPU; split each layer's residents into
 * static experts and cache slots; send the cold ones to PCIe streaming or the CPU workers; then
 * price one decode step and the prefill of a prompt link by link. */
#include "plan.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0

static int fail(char *err, size_t cap, const char *fmt, ...) {
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* GiB rounded up to 0.01 (to 3 significant digits below 1 GiB), so that "needs at least X" is
 * never below the true need. */
static double gib_up(double bytes) {
    double g = bytes / GIB, q = 100.0;
    while (g > 0 && g * q < 100.0 && q < 1e12) q *= 10;
    return ceil(g * q - 1e-9) / q;
}

static const char *const cold_names[] = { "auto", "stream", "cpu" };
const char *plan_cold_name(plan_cold c) { return c >= 0 && c <= PLAN_COLD_CPU ? cold_names[c] : "?"; }
int plan_cold_parse(const char *name) {
    for (int i = 0; i <= PLAN_COLD_CPU; i++)
        if (name && !strcmp(name, cold_names[i])) return i;
    return -1;
}

void plan_inputs_init(plan_inputs *in) {
    memset(in, 0, sizeof *in);
    in->rates = cost_rates_defaults();
    in->ctx = 4096; in->streams = 1; in->decode_pos = 384; in->prompt = 8192;
    in->chunk = 1024;   /* the prefill chunk the engine reserves under --gpu-mem (gpu/exec.cu) */
    in->cold = PLAN_COLD_AUTO;
    in->static_experts = -1; in->cache_slots = -1; in->staging_experts = -1;
}

void plan_free(plan *p) {
    if (p->layer)
        for (int l = 0; l < p->n_layer; l++) { free(p->layer[l].order); free(p->layer[l].where); }
    free(p->layer);
    memset(p, 0, sizeof *p);
}

int plan_layers_alike(const plan_layer *a, const plan_layer *b) {
    return a->gpu == b->gpu && a->is_moe == b->is_moe && a->n_expert == b->n_expert && a->n_static == b->n_static &&
           a->n_slots == b->n_slots && a->n_stream == b->n_stream && a->n_cpu == b->n_cpu &&
           fabs(a->miss_rate - b->miss_rate) < 5e-4 && a->decode_limit == b->decode_limit;
}

/* ---------------------------------------------------------------- routing probabilities */

typedef struct { double p; int id; } ranked;

static int by_prob(const void *x, const void *y) {
    const ranked *a = x, *b = y;
    if (a->p != b->p) return a->p > b->p ? -1 : 1;
    return a->id - b->id;
}

/* prob[e] = freq[e] / sum (uniform when freq is NULL or sums to 0); order = ids by prob desc. */
static void layer_probs(const plan_layer_in *li, double *prob, int *order) {
    int n = li->n_expert;
    double sum = 0;
    for (int e = 0; li->freq && e < n; e++) sum += li->freq[e] > 0 ? li->freq[e] : 0;
    ranked *r = malloc(sizeof *r * (size_t)n);
    for (int e = 0; e < n; e++) {
        prob[e] = sum > 0 ? (li->freq[e] > 0 ? li->freq[e] / sum : 0) : 1.0 / n;
        r[e] = (ranked){ prob[e], e };
    }
    qsort(r, (size_t)n, sizeof *r, by_prob);
    for (int e = 0; e < n; e++) order[e] = r[e].id;
    free(r);
}

/* ---------------------------------------------------------------- layer split */

static uint64_t fixed_bytes(const plan_inputs *in, int l) {
    const plan_layer_in *li = &in->layer[l];
    return li->dense_bytes + li->kv_bytes * (uint64_t)in->ctx * (uint64_t)in->streams;
}
static uint64_t expert_total(const plan_layer_in *li) {
    return li->is_moe ? li->expert_bytes * (uint64_t)li->n_expert : 0;
}

/* Contiguous layer ranges: layer l goes to the GPU whose cumulative share holds the midpoint of
 * its cumulative size. */
static void split_layers(const plan_inputs *in, const double *share, int *first, int *last) {
    double tot_share = 0, tot_w = 0;
    for (int d = 0; d < in->n_gpu; d++) tot_share += share[d];
    for (int l = 0; l < in->n_layer; l++) tot_w += (double)(fixed_bytes(in, l) + expert_total(&in->layer[l]));
    for (int d = 0; d < in->n_gpu; d++) { first[d] = in->n_layer; last[d] = -1; }
    double cum = 0;
    for (int l = 0; l < in->n_layer; l++) {
        double w = (double)(fixed_bytes(in, l) + expert_total(&in->layer[l]));
        double mid = tot_w > 0 ? (cum + w / 2) / tot_w : (l + 0.5) / in->n_layer;
        cum += w;
        int d = 0;
        double s = tot_share > 0 ? share[0] / tot_share : 1.0 / in->n_gpu;
        while (d < in->n_gpu - 1 && mid > s + 1e-12) { d++; s += tot_share > 0 ? share[d] / tot_share : 1.0 / in->n_gpu; }
        if (l < first[d]) first[d] = l;
        last[d] = l;
    }
}

/* ---------------------------------------------------------------- residency */

/* Per-layer resident counts for GPU d: lo[l] forced, then the same count R in every MoE layer
 * (clamped to [lo, hi]), the largest R whose bytes fit in avail: the engine keeps one slab of
 * static experts + slots per layer, the same count in each (gpu/exec.cu), so the plan prices that
 * layout. Returns the bytes left. */
static uint64_t fill_residents(const plan_inputs *in, int first, int last, const int *lo, const int *hi, int *res,
                               uint64_t avail) {
    int top = 0;
    for (int l = first; l <= last; l++) {
        res[l] = lo[l];
        if (!in->layer[l].is_moe) continue;
        avail -= (uint64_t)lo[l] * in->layer[l].expert_bytes;
        if (hi[l] > top) top = hi[l];
    }
    for (int R = top; R > 0; R--) {
        uint64_t b = 0;
        for (int l = first; l <= last; l++)
            if (in->layer[l].is_moe && R > lo[l]) b += (uint64_t)((R < hi[l] ? R : hi[l]) - lo[l]) * in->layer[l].expert_bytes;
        if (b > avail) continue;
        for (int l = first; l <= last; l++)
            if (in->layer[l].is_moe && R > lo[l]) res[l] = R < hi[l] ? R : hi[l];
        return avail - b;
    }
    return avail;
}

/* Cold experts of one layer in auto mode: each goes to the path that adds less to the step,
 * streamed (copied, then read from VRAM) or on the CPU. The executor runs the two one after the
 * other (price_decode), and the CPU's hand-off is paid once per layer whatever the number of its
 * experts, so the layer's best is one of two: everything streamed, or every expert on its cheaper
 * path with the hand-off paid once. (Deciding expert by expert with the hand-off charged to the
 * first CPU expert never pays it: every expert alone is cheaper streamed.) */
static void assign_auto(const plan_inputs *in, const plan_layer_in *li, const double *prob, plan_layer *pl,
                        int from) {
    const cost_rates *r = &in->rates;
    double pcie = cost_pcie_bps(r), hbm = cost_hbm_bps(r), cpu = cost_cpu_bps(r, li->cpu_class);
    double all_stream = 0, mixed = r->cpu_sync_us * 1e-6;
    for (int i = from; i < li->n_expert; i++) {   /* each on its cheaper path, the two totals beside */
        int e = pl->order[i];
        double b = cost_touch(li->k * prob[e], in->streams) * (double)li->expert_bytes;
        double ts = b / pcie + b / hbm, tc = b / cpu;
        all_stream += ts;
        mixed += fmin(ts, tc);
        pl->where[e] = ts <= tc ? PLAN_STREAM : PLAN_CPU;
    }
    for (int i = from; i < li->n_expert; i++) {
        int e = pl->order[i];
        if (mixed >= all_stream) pl->where[e] = PLAN_STREAM;   /* the hand-off costs more than the CPU saves */
        if (pl->where[e] == PLAN_CPU) pl->n_cpu++; else pl->n_stream++;
    }
}

/* ---------------------------------------------------------------- cost */

static void price_decode(plan *p, const plan_inputs *in, double *const *prob) {
    const cost_rates *r = &in->rates;
    double hbm = cost_hbm_bps(r), pcie = cost_pcie_bps(r), dram = cost_cpu_bps(r, -1);
    double s = in->streams, lat = r->gpu_layer_us * 1e-6;
    double *t = p->decode_time, *by = p->decode_bytes;
    for (int l = 0; l < in->n_layer; l++) {
        const plan_layer_in *li = &in->layer[l];
        plan_layer *pl = &p->layer[l];
        double fixed = (double)li->dense_bytes + s * (double)li->kv_bytes * in->decode_pos;
        double b[4] = { 0 };   /* by plan_where */
        for (int e = 0; li->is_moe && e < li->n_expert; e++)
            b[pl->where[e]] += cost_touch(li->k * prob[l][e], in->streams) * (double)li->expert_bytes;
        if (li->is_moe && li->has_hit_rate && pl->gpu >= 0) {
            /* a cache policy moves experts: the measured split of selections replaces the static one */
            double res = b[PLAN_STATIC] + b[PLAN_SLOT], cold = b[PLAN_STREAM] + b[PLAN_CPU], all = res + cold;
            double hit = fmin(fmax(li->hit_rate, 0), 1);
            if (res > 0) { b[PLAN_STATIC] *= hit * all / res; b[PLAN_SLOT] *= hit * all / res; }
            if (cold > 0) { b[PLAN_STREAM] *= (1 - hit) * all / cold; b[PLAN_CPU] *= (1 - hit) * all / cold; }
        }
        if (pl->gpu < 0) {
            double tl = fixed / dram + b[PLAN_CPU] / cost_cpu_bps(r, li->cpu_class);
            t[COST_CPU] += tl; by[COST_CPU] += fixed + b[PLAN_CPU];
            pl->decode_us = tl * 1e6; pl->decode_limit = COST_CPU;
            continue;
        }
        /* as the executor runs it: a streamed miss is copied, then computed from VRAM, and the layer
         * waits for the CPU's experts before its reduction. Measured on the device (a3b, 8 GiB,
         * 2026-11-30): the CPU's share is not hidden behind the GPU's experts (the hand-off's round
         * trip is as long as a layer's resident experts), so the three add up. */
        double part[COST_LINK_COUNT] = { 0 };
        part[COST_HBM] = (fixed + b[PLAN_STATIC] + b[PLAN_SLOT] + b[PLAN_STREAM]) / hbm;
        part[COST_PCIE] = b[PLAN_STREAM] / pcie;
        part[COST_CPU] = pl->n_cpu ? b[PLAN_CPU] / cost_cpu_bps(r, li->cpu_class) + r->cpu_sync_us * 1e-6 : 0;
        part[COST_COMPUTE] = lat;
        for (int i = 0; i < COST_LINK_COUNT; i++) t[i] += part[i];
        by[COST_HBM] += fixed + b[PLAN_STATIC] + b[PLAN_SLOT] + b[PLAN_STREAM]; by[COST_PCIE] += b[PLAN_STREAM]; by[COST_CPU] += b[PLAN_CPU];
        pl->decode_us = (part[COST_HBM] + part[COST_PCIE] + part[COST_CPU] + lat) * 1e6;
        pl->decode_limit = cost_argmax(part);
    }
    if (in->n_gpu > 0) { t[COST_HBM] += (double)in->output_bytes / hbm; t[COST_COMPUTE] += lat; by[COST_HBM] += (double)in->output_bytes; }
    else { t[COST_CPU] += (double)in->output_bytes / dram; by[COST_CPU] += (double)in->output_bytes; }
    double step = 0;
    for (int i = 0; i < COST_LINK_COUNT; i++) { step += t[i]; by[i] /= s; }
    p->decode_tok_s = step > 0 ? s / step : 0;
    p->decode_limit = cost_argmax(t);
}

/* One prefill chunk of tc tokens at mean position pos: per GPU the larger of compute (+ HBM),
 * PCIe and CPU time, as the staging double buffer overlaps them; a cold CPU expert is computed
 * on the CPU or streamed, whichever is faster for this chunk. */
static void price_chunk(plan *p, const plan_inputs *in, double *const *prob, double tc, double pos) {
    const cost_rates *r = &in->rates;
    double gflop_s = r->gpu_tflops * 1e12, cflop_s = r->cpu_gflops * 1e9;
    double hbm = cost_hbm_bps(r), pcie = cost_pcie_bps(r);
    int n_dev = in->n_gpu > 0 ? in->n_gpu : 1;
    for (int d = 0; d < n_dev; d++) {
        double fl = 0, hb = 0, pb = 0, ct = 0, cpu_fl = 0;
        int layers = 0;
        for (int l = 0; l < in->n_layer; l++) {
            const plan_layer_in *li = &in->layer[l];
            const plan_layer *pl = &p->layer[l];
            if (in->n_gpu > 0 && pl->gpu != d) continue;
            layers++;
            fl += tc * (li->dense_flops + li->attn_flops * pos);
            hb += (double)li->dense_bytes;
            double lfl = 0, lby = 0;   /* this layer's CPU experts */
            for (int e = 0; li->is_moe && e < li->n_expert; e++) {
                double q = li->k * prob[l][e], sel = tc * q * li->expert_flops;
                double by = cost_touch(q, (int)tc) * (double)li->expert_bytes;
                switch (pl->where[e]) {
                case PLAN_STATIC: case PLAN_SLOT: fl += sel; hb += by; break;
                case PLAN_STREAM: fl += sel; pb += by; break;
                default: lfl += sel; lby += by; break;
                }
            }
            if (in->n_gpu == 0) { cpu_fl += lfl; continue; }
            if (pl->n_cpu == 0) continue;
            double on_cpu = fmax(lfl / cflop_s, lby / cost_cpu_bps(r, li->cpu_class)) + r->cpu_sync_us * 1e-6;
            if (p->gpu[d].staging > 0 && lby / pcie < on_cpu) { pb += lby; fl += lfl; }
            else { ct += on_cpu; p->prefill_bytes[COST_CPU] += lby; }
        }
        p->prefill_bytes[in->n_gpu ? COST_HBM : COST_CPU] += hb; p->prefill_bytes[COST_PCIE] += pb;
        double part[COST_LINK_COUNT] = { 0 };
        if (in->n_gpu == 0) {
            part[COST_CPU] = (fl + cpu_fl) / cflop_s;
        } else {
            part[COST_COMPUTE] = fl / gflop_s + hb / hbm;
            part[COST_PCIE] = pb / pcie;
            part[COST_CPU] = ct;
        }
        cost_link w = cost_argmax(part);
        p->prefill_time[w] += part[w];
        if (in->n_gpu > 0) p->prefill_time[COST_COMPUTE] += layers * r->gpu_layer_us * 1e-6;
    }
}

static void price_prefill(plan *p, const plan_inputs *in, double *const *prob) {
    int chunk = in->chunk < in->prompt ? in->chunk : in->prompt;
    for (int start = 0; chunk > 0 && start < in->prompt; start += chunk) {
        int tc = in->prompt - start < chunk ? in->prompt - start : chunk;
        price_chunk(p, in, prob, tc, start + tc / 2.0);
    }
    double tot = 0;
    for (int i = 0; i < COST_LINK_COUNT; i++) { tot += p->prefill_time[i]; p->prefill_bytes[i] /= in->prompt; }
    p->prefill_tok_s = tot > 0 ? in->prompt / tot : 0;
    p->prefill_limit = cost_argmax(p->prefill_time);
}

/* ---------------------------------------------------------------- build */

static int check_inputs(const plan_inputs *in, char *err, size_t cap) {
    if (in->n_layer < 1 || !in->layer) return fail(err, cap, "plan: expected at least one layer, found %d", in->n_layer);
    if (in->n_gpu < 0 || in->n_gpu > PLAN_MAX_GPU)
        return fail(err, cap, "plan: GPU count: expected 0..%d, found %d", PLAN_MAX_GPU, in->n_gpu);
    if (in->ctx < 1 || in->streams < 1 || in->prompt < 1 || in->chunk < 1 || in->decode_pos < 0)
        return fail(err, cap, "plan: workload: expected ctx, streams, prompt, chunk >= 1, found %d, %d, %d, %d",
                    in->ctx, in->streams, in->prompt, in->chunk);
    for (int l = 0; l < in->n_layer; l++) {
        const plan_layer_in *li = &in->layer[l];
        if (li->is_moe && (li->n_expert < 1 || li->k < 1 || li->k > li->n_expert))
            return fail(err, cap, "plan: layer %d: expected 1 <= k <= experts, found k %d of %d experts", l, li->k,
                        li->n_expert);
    }
    for (int d = 0; d < in->n_cpu_experts && d < PLAN_MAX_GPU; d++)
        if (in->cpu_experts[d] < 0) return fail(err, cap, "plan: --cpu-experts: expected >= 0, found %d", in->cpu_experts[d]);
    return 0;
}

/* Per-layer bounds on the resident count of GPU d from the overrides. */
static int resident_bounds(const plan_inputs *in, int d, int first, int last, int *lo, int *hi, char *err, size_t cap) {
    for (int l = first; l <= last; l++) {
        const plan_layer_in *li = &in->layer[l];
        int n = li->is_moe ? li->n_expert : 0;
        lo[l] = 0; hi[l] = n;
        if (!li->is_moe) continue;
        int S = in->static_experts, C = in->cache_slots;
        if (in->n_cpu_experts > 0) {
            int N = in->cpu_experts[in->n_cpu_experts > d ? d : 0];
            if (N > n) return fail(err, cap, "plan: --cpu-experts %d: expected at most the %d experts of layer %d", N, n, l);
            lo[l] = hi[l] = n - N;
            if (S > n - N)
                return fail(err, cap, "plan: --static-experts %d: expected at most the %d GPU experts of layer %d "
                            "(--cpu-experts %d)", S, n - N, l, N);
        } else if (S >= 0 && C >= 0) {
            if (S + C > n)
                return fail(err, cap, "plan: --static-experts %d + --cache-slots %d: expected at most the %d experts "
                            "of layer %d", S, C, n, l);
            lo[l] = hi[l] = S + C;
        } else if (S >= 0 || C >= 0) {
            int x = S >= 0 ? S : C;
            if (x > n) return fail(err, cap, "plan: %s %d: expected at most the %d experts of layer %d",
                                   S >= 0 ? "--static-experts" : "--cache-slots", x, n, l);
            lo[l] = x;
        }
    }
    return 0;
}

static void split_resident(const plan_inputs *in, plan_layer *pl, int res) {
    int n = pl->n_expert, S = in->static_experts, C = in->cache_slots;
    int cpu = in->cold == PLAN_COLD_CPU || in->n_cpu_experts > 0;
    if (S >= 0 && C >= 0) { pl->n_static = S; pl->n_slots = C; }
    else if (S >= 0) { pl->n_static = S < res ? S : res; pl->n_slots = res - pl->n_static; }
    else if (C >= 0) { pl->n_slots = C < res ? C : res; pl->n_static = res - pl->n_slots; }
    else if (res == n) { pl->n_static = n; pl->n_slots = 0; }
    else if (cpu) { pl->n_static = 0; pl->n_slots = res; }
    else { pl->n_static = res / 4; pl->n_slots = res - pl->n_static; }
}

/* GPU d: staging need, the minimum check, residents, static/slot split and cold paths. */
static int place_gpu(plan *p, const plan_inputs *in, double *const *prob, int *const *order, int d, uint64_t stage,
                     int *lo, int *hi, int *res, char *err, size_t cap) {
    plan_gpu *g = &p->gpu[d];
    uint64_t dense = 0, kv = 0, experts = 0;
    for (int l = g->first_layer; l <= g->last_layer; l++) {
        dense += in->layer[l].dense_bytes;
        kv += in->layer[l].kv_bytes * (uint64_t)in->ctx * (uint64_t)in->streams;
        experts += expert_total(&in->layer[l]);
    }
    uint64_t out = d == in->n_gpu - 1 ? in->output_bytes : 0;
    uint64_t base = dense + out + kv + in->workspace_bytes;
    int forced = in->static_experts >= 0 || in->cache_slots >= 0 || in->n_cpu_experts > 0;
    g->staging = base + experts <= g->budget && !forced ? 0 : (experts ? stage : 0);
    uint64_t need = base + g->staging;
    if (need > g->budget) {
        char range[48] = "no layers";
        if (g->first_layer < g->last_layer) snprintf(range, sizeof range, "layers %d-%d", g->first_layer, g->last_layer);
        else if (g->first_layer == g->last_layer) snprintf(range, sizeof range, "layer %d", g->first_layer);
        return fail(err, cap, "plan: GPU %d: budget %g GiB is too small for the dense part and KV cache of its %s "
                    "(ctx %d x %d stream%s): needs at least %g GiB (dense weights %.3g + output %.3g, KV %.3g, "
                    "staging %.3g, workspace %.3g GiB)", d, g->budget / GIB, range, in->ctx, in->streams,
                    in->streams == 1 ? "" : "s", gib_up((double)need), dense / GIB, out / GIB, kv / GIB,
                    g->staging / GIB, in->workspace_bytes / GIB);
    }
    if (resident_bounds(in, d, g->first_layer, g->last_layer, lo, hi, err, cap)) return -1;
    uint64_t forced_b = 0;
    for (int l = g->first_layer; l <= g->last_layer; l++)
        if (in->layer[l].is_moe) forced_b += (uint64_t)lo[l] * in->layer[l].expert_bytes;
    if (forced_b > g->budget - need) {
        char what[96] = "";
        size_t w = 0;
        if (in->static_experts >= 0) w += snprintf(what + w, sizeof what - w, " --static-experts %d", in->static_experts);
        if (in->cache_slots >= 0) w += snprintf(what + w, sizeof what - w, " --cache-slots %d", in->cache_slots);
        if (in->n_cpu_experts > 0)
            snprintf(what + w, sizeof what - w, " --cpu-experts %d", in->cpu_experts[in->n_cpu_experts > d ? d : 0]);
        return fail(err, cap, "plan: GPU %d:%s: the experts kept on the GPU need %.3g GiB on top of %.3g GiB (dense "
                    "part, KV, staging, workspace): needs at least %g GiB, budget %g GiB", d, what, forced_b / GIB,
                    need / GIB, gib_up((double)(need + forced_b)), g->budget / GIB);
    }
    fill_residents(in, g->first_layer, g->last_layer, lo, hi, res, g->budget - need);
    for (int l = g->first_layer; l <= g->last_layer; l++) {
        const plan_layer_in *li = &in->layer[l];
        plan_layer *pl = &p->layer[l];
        pl->gpu = d;
        g->weights += li->dense_bytes;
        g->kv += li->kv_bytes * (uint64_t)in->ctx * (uint64_t)in->streams;
        if (!li->is_moe) continue;
        split_resident(in, pl, res[l]);
        for (int i = 0; i < li->n_expert; i++) pl->where[pl->order[i]] = i < pl->n_static ? PLAN_STATIC : PLAN_SLOT;
        int cold_from = pl->n_static + pl->n_slots;
        plan_cold mode = in->cold == PLAN_COLD_AUTO && in->n_cpu_experts > 0 ? PLAN_COLD_CPU : in->cold;
        if (mode == PLAN_COLD_AUTO) assign_auto(in, li, prob[l], pl, cold_from);
        else
            for (int i = cold_from; i < li->n_expert; i++) {
                pl->where[pl->order[i]] = mode == PLAN_COLD_CPU ? PLAN_CPU : PLAN_STREAM;
                if (mode == PLAN_COLD_CPU) pl->n_cpu++; else pl->n_stream++;
            }
        pl->miss_rate = 0;
        for (int i = cold_from; i < li->n_expert; i++) pl->miss_rate += prob[l][pl->order[i]];
        if (li->has_hit_rate && cold_from < li->n_expert) pl->miss_rate = 1 - fmin(fmax(li->hit_rate, 0), 1);
        g->weights += (uint64_t)pl->n_static * li->expert_bytes;
        g->slots += (uint64_t)pl->n_slots * li->expert_bytes;
        if (pl->n_static < li->n_expert) p->host_pinned += (uint64_t)(li->n_expert - pl->n_static) * li->expert_bytes;
    }
    g->weights += out;
    g->workspace = in->workspace_bytes;
    g->total = g->weights + g->kv + g->slots + g->staging + g->workspace;
    return 0;
}

int plan_build(plan *p, const plan_inputs *in, char *err, size_t cap) {
    memset(p, 0, sizeof *p);
    if (check_inputs(in, err, cap)) return -1;
    int L = in->n_layer;
    p->n_layer = L; p->n_gpu = in->n_gpu;
    p->layer = calloc((size_t)L, sizeof *p->layer);
    double **prob = calloc((size_t)L, sizeof *prob);
    int **order = calloc((size_t)L, sizeof *order);
    int *lo = calloc((size_t)L * 3, sizeof *lo), *hi = lo + L, *res = lo + 2 * L;
    uint64_t max_eb = 0;
    int max_n = 0, rc = -1;
    for (int l = 0; l < L; l++) {
        const plan_layer_in *li = &in->layer[l];
        plan_layer *pl = &p->layer[l];
        pl->is_moe = li->is_moe; pl->gpu = -1;
        if (!li->is_moe) continue;
        pl->n_expert = li->n_expert;
        pl->order = malloc(sizeof *pl->order * (size_t)li->n_expert);
        pl->where = calloc((size_t)li->n_expert, 1);
        prob[l] = malloc(sizeof **prob * (size_t)li->n_expert);
        order[l] = pl->order;
        layer_probs(li, prob[l], pl->order);
        if (li->expert_bytes > max_eb) max_eb = li->expert_bytes;
        if (li->n_expert > max_n) max_n = li->n_expert;
    }
    if (in->n_gpu == 0) {   /* CPU only: everything in host RAM, every expert on the CPU */
        uint64_t all = in->output_bytes + in->host_only_bytes + in->workspace_bytes;
        for (int l = 0; l < L; l++) {
            const plan_layer_in *li = &in->layer[l];
            plan_layer *pl = &p->layer[l];
            p->kv_host += li->kv_bytes * (uint64_t)in->ctx * (uint64_t)in->streams;
            all += li->dense_bytes + expert_total(li);
            if (!li->is_moe) continue;
            for (int e = 0; e < li->n_expert; e++) pl->where[e] = PLAN_CPU;
            pl->n_cpu = li->n_expert; pl->miss_rate = 1;
        }
        p->host_total = all + p->kv_host;
    } else {
        int S = in->staging_experts < 0 ? 0 : in->staging_experts;   /* the engine stages only with --staging N */
        if (S > max_n) S = max_n;
        uint64_t stage = 2 * (uint64_t)S * max_eb;
        double share[PLAN_MAX_GPU];
        int has_split = 0;
        for (int d = 0; d < in->n_gpu; d++) has_split |= in->gpu_split[d] > 0;
        for (int d = 0; d < in->n_gpu; d++) {
            double over = (double)in->workspace_bytes + (d == in->n_gpu - 1 ? (double)in->output_bytes : 0) + (double)stage;
            share[d] = has_split ? in->gpu_split[d] : fmax((double)in->gpu_mem[d] - over, 0);
        }
        int first[PLAN_MAX_GPU], last[PLAN_MAX_GPU];
        split_layers(in, share, first, last);
        for (int d = 0; d < in->n_gpu; d++) {
            p->gpu[d].first_layer = first[d]; p->gpu[d].last_layer = last[d]; p->gpu[d].budget = in->gpu_mem[d];
            if (place_gpu(p, in, prob, order, d, stage, lo, hi, res, err, cap)) goto done;
        }
        p->host_total = p->host_pinned + in->host_only_bytes;
    }
    if (in->host_ram && p->host_total > in->host_ram) {
        fail(err, cap, "plan: host RAM: budget %g GiB is too small: the plan keeps %.3g GiB in host RAM (%.3g GiB of "
             "it pinned experts): needs at least %g GiB", in->host_ram / GIB, p->host_total / GIB,
             p->host_pinned / GIB, gib_up((double)p->host_total));
        goto done;
    }
    price_decode(p, in, prob);
    price_prefill(p, in, prob);
    for (int l = 0; l < L; l++)
        if (in->layer[l].is_moe) p->miss_per_token += in->layer[l].k * p->layer[l].miss_rate;
    rc = 0;
done:
    for (int l = 0; l < L; l++) free(prob[l]);
    free(prob); free(order); free(lo);
    if (rc) plan_free(p);
    return rc;
}
