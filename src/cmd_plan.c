/* cmd_plan.c - `hotmoe plan` (the placement planner on a model file: what lives where and the
 * predicted tok/s, as a table or JSON) and `hotmoe calibrate` (measures the link rates the cost
 * model uses and caches them in a small JSON file that plan reads). The planner itself is pure
 * (placement/plan.h); this file turns a loaded model, a routing trace and flags into its inputs. */
#define _GNU_SOURCE
#include "autoplan.h"
#include "prefill_size.h"
#include "config.h"
#include "exec.h"
#include "membw.h"
#include "gemv.h"
#include "gpu.h"
#include "loader.h"
#include "plan.h"
#include "quant.h"
#include "sim.h"
#include "trace.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cmd_plan(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);

#define GIB 1073741824.0
/* after a planner's budget error: the budgets it names are the engine's */
#define RESERVE_NOTE " (the budgets named are the engine's: each --gpu-mem less --gpu-reserve)"


/* ---------------------------------------------------------------- options */

typedef struct {
    const char *model, *routing, *calibration;
    int json;
    double gpu_mem[PLAN_MAX_GPU], gpu_split[PLAN_MAX_GPU], ram, workspace_mib;
    double gpu_reserve;   /* --gpu-reserve GiB: subtracted from each --gpu-mem (runner_engine_gib) */
    int n_gpu_mem, n_gpu_split, n_cpu_experts;
    double pcie, dram, hbm, hbm_eff, gpu_layer_us;
    plan_inputs in;
} plan_opts;

static const char plan_usage[] =
    "usage: hotmoe plan -m MODEL [--gpu-mem GiB[,GiB...]] [--gpu-reserve GiB] [--ram GiB] [--routing TRACE] [--ctx N] [--streams N]\n"
    "                   [--cold auto|stream|cpu] [--static-experts N] [--cache-slots N] [--cpu-experts N|N0,N1]\n"
    "                   [--gpu-split W0,W1] [--staging N] [--workspace-mib X] [--prompt N] [--prefill-chunk N]\n"
    "                   [--decode-pos N] [--calibration FILE] [--pcie-gbs X] [--dram-gbs X] [--hbm-gbs X]\n"
    "                   [--hbm-eff F] [--gpu-layer-us U]   (the share of --hbm-gbs the decode kernels reach; latency per layer)\n"
    "                   [--config FILE] [--json]\n"
    "  --gpu-mem 0 (or no GPU and no --gpu-mem): CPU only. --gpu-mem is the process's VRAM per GPU: the engine plans\n"
    "  with it less --gpu-reserve (default 1 GiB, kept for the CUDA context and cuBLAS). Rates: --calibration FILE,\n"
    "  else the file of `hotmoe calibrate` when present, else ../shared/design/DEVICE.md's; --*-gbs override either.\n";

static int bad(const char *flag, const char *want, const char *found) {
    fprintf(stderr, "hotmoe plan: %s: expected %s, found '%s'\n", flag, want, found ? found : "nothing");
    return -1;
}

static int num(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end; errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || errno || end == v || *end || !(x >= lo && x <= hi)) {
        char want[80]; snprintf(want, sizeof want, "a number in [%g, %g]", lo, hi);
        return bad(flag, want, v);
    }
    *out = x;
    return 0;
}

static int inum(const char *flag, const char *v, int lo, int hi, int *out) {
    double x;
    if (num(flag, v, lo, hi, &x)) return -1;
    if (x != floor(x)) return bad(flag, "an integer", v);
    *out = (int)x;
    return 0;
}

/* "24" or "24,24": up to PLAN_MAX_GPU numbers. Returns the count or -1. */
static int num_list(const char *flag, const char *v, double lo, double hi, double *out) {
    if (!v) return bad(flag, "a number or a comma-separated list", v);
    char *s = strdup(v), *save = NULL;
    int n = 0;
    for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == PLAN_MAX_GPU) { free(s); return bad(flag, "at most 8 values", v); }
        if (num(flag, tok, lo, hi, &out[n++])) { free(s); return -1; }
    }
    free(s);
    return n ? n : bad(flag, "at least one value", v);
}

static int parse_plan(plan_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    plan_inputs_init(&o->in);
    o->gpu_layer_us = -1;
    o->n_gpu_mem = -1; o->ram = -1; o->workspace_mib = -1; o->gpu_reserve = RUNNER_GPU_RESERVE_GIB;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double cpu[PLAN_MAX_GPU];
        int rc = 0;
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(plan_usage, stdout); return 1; }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--routing")) o->routing = v;
        else if (!strcmp(a, "--calibration")) o->calibration = v;
        else if (!strcmp(a, "--gpu-mem")) rc = (o->n_gpu_mem = num_list(a, v, 0, 1 << 20, o->gpu_mem)) < 0;
        else if (!strcmp(a, "--gpu-reserve")) rc = num(a, v, 0, 64, &o->gpu_reserve);
        else if (!strcmp(a, "--gpu-split")) rc = (o->n_gpu_split = num_list(a, v, 0, 1 << 20, o->gpu_split)) < 0;
        else if (!strcmp(a, "--ram")) rc = num(a, v, 0, 1 << 24, &o->ram);
        else if (!strcmp(a, "--workspace-mib")) rc = num(a, v, 0, 1 << 24, &o->workspace_mib);
        else if (!strcmp(a, "--pcie-gbs")) rc = num(a, v, 0.001, 1e6, &o->pcie);
        else if (!strcmp(a, "--dram-gbs")) rc = num(a, v, 0.001, 1e6, &o->dram);
        else if (!strcmp(a, "--hbm-gbs")) rc = num(a, v, 0.001, 1e6, &o->hbm);
        else if (!strcmp(a, "--hbm-eff")) rc = num(a, v, 0.001, 1, &o->hbm_eff);
        else if (!strcmp(a, "--gpu-layer-us")) rc = num(a, v, 0, 1e6, &o->gpu_layer_us);
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) rc = inum(a, v, 1, 1 << 24, &o->in.ctx);
        else if (!strcmp(a, "--streams")) rc = inum(a, v, 1, 4096, &o->in.streams);
        else if (!strcmp(a, "--decode-pos")) rc = inum(a, v, 0, 1 << 24, &o->in.decode_pos);
        else if (!strcmp(a, "--prompt")) rc = inum(a, v, 1, 1 << 24, &o->in.prompt);
        else if (!strcmp(a, "--prefill-chunk")) rc = inum(a, v, 1, 1 << 20, &o->in.chunk);
        else if (!strcmp(a, "--static-experts")) rc = inum(a, v, 0, 65535, &o->in.static_experts);
        else if (!strcmp(a, "--cache-slots")) rc = inum(a, v, 0, 65535, &o->in.cache_slots);
        else if (!strcmp(a, "--staging")) rc = inum(a, v, 0, 65535, &o->in.staging_experts);
        else if (!strcmp(a, "--cpu-experts")) {
            rc = (o->n_cpu_experts = num_list(a, v, 0, 65535, cpu)) < 0;
            for (int d = 0; !rc && d < o->n_cpu_experts; d++) {
                if (cpu[d] != floor(cpu[d])) { rc = bad(a, "integers", v); break; }
                o->in.cpu_experts[d] = (int)cpu[d];
            }
            o->in.n_cpu_experts = rc ? 0 : o->n_cpu_experts;
        } else if (!strcmp(a, "--cold")) {
            int c = plan_cold_parse(v);
            if (c < 0) rc = bad(a, "auto, stream or cpu", v);
            else o->in.cold = (plan_cold)c;
        } else { fprintf(stderr, "hotmoe plan: unknown option '%s'\n%s", a, plan_usage); return -1; }
        if (rc) return -1;
        if (!v) return bad(a, "a value after it", v);
    }
    if (!o->model) { fprintf(stderr, "hotmoe plan: expected -m MODEL\n%s", plan_usage); return -1; }
    return 0;
}

/* ---------------------------------------------------------------- model -> planner inputs */

static uint64_t tb(const hm_tensor *t) { return t->data ? t->nbytes : 0; }
static uint64_t vb(const hm_tensor *t) { return t->data ? (uint64_t)t->ne[0] * 4 : 0; }   /* vectors: f32 */
static double mflops(const hm_tensor *t) { return t->data ? 2.0 * (double)t->ne[0] * (double)t->ne[1] : 0; }
static uint64_t ffn_b(const hm_ffn_w *f) { return tb(&f->gate) + tb(&f->up) + tb(&f->down); }
static double ffn_f(const hm_ffn_w *f) { return mflops(&f->gate) + mflops(&f->up) + mflops(&f->down); }

static int type_class(int t) {
    switch (t) {
    case HM_TYPE_F32: case HM_TYPE_F16: case HM_TYPE_BF16: return COST_CLASS_FLOAT;
    case HM_TYPE_Q8_0: case HM_TYPE_Q8_1: case HM_TYPE_Q8_K: return COST_CLASS_Q8;
    case HM_TYPE_Q2_K: case HM_TYPE_Q3_K: case HM_TYPE_Q4_K: case HM_TYPE_Q5_K: case HM_TYPE_Q6_K: return COST_CLASS_K;
    default: return COST_CLASS_Q4;
    }
}

/* The class that holds most of an expert's bytes. */
static int expert_class(const hm_ffn_w *f) {
    const hm_tensor *m[3] = { &f->gate, &f->up, &f->down };
    uint64_t by[COST_CLASS_COUNT] = { 0 };
    for (int i = 0; i < 3; i++) by[type_class(m[i]->type)] += tb(m[i]);
    int best = 0;
    for (int c = 1; c < COST_CLASS_COUNT; c++) if (by[c] > by[best]) best = c;
    return best;
}

static uint64_t layer_dense(const hm_layer *l) {
    return vb(&l->attn_norm) + vb(&l->ffn_norm) + vb(&l->bq) + vb(&l->bk) + vb(&l->bv) + vb(&l->q_norm) +
           vb(&l->k_norm) + vb(&l->router_bias) + tb(&l->wq) + tb(&l->wk) + tb(&l->wv) + tb(&l->wo) + tb(&l->router) +
           ffn_b(&l->dense) + ffn_b(&l->shexp);
}

/* Activations of a decode step (as gpu/exec.cu sizes them) plus the prefill workspace of a chunk,
 * which the engine reserves under --gpu-mem, and the prefill attention's F16 K and V^T copies of
 * one layer (gpu/prefill_size.h: the bytes it allocates). */
static uint64_t workspace_estimate(const hm_model *m, int ctx, int chunk) {
    const hm_config *c = &m->cfg;
    double ff = c->n_ff, fe = (double)c->n_ff_exp * c->n_expert_used;
    if (fe > ff) ff = fe;
    if (c->n_ff_shexp > ff) ff = c->n_ff_shexp;
    double dec = (double)c->n_embd * (6 + c->n_expert_used) + 2.0 * c->q_dim + 2.0 * c->kv_dim + c->n_vocab +
                 2.0 * c->n_expert + ff + (double)c->n_head * ((ctx + 255) / 256) * (c->head_dim + 2);
    return (uint64_t)(4 * dec) + pf_workspace_bytes(m, chunk) + 2 * pf_kv16_bytes(m, ctx);
}

/* Fills in->layer (allocated; caller frees) from m; freq stays NULL (uniform). */
static void model_inputs(const hm_model *m, plan_inputs *in, plan_layer_in **layers) {
    const hm_config *c = &m->cfg;
    plan_layer_in *L = calloc((size_t)c->n_layer, sizeof *L);
    for (int l = 0; l < c->n_layer; l++) {
        const hm_layer *ly = &m->layers[l];
        plan_layer_in *li = &L[l];
        li->dense_bytes = layer_dense(ly);
        li->kv_bytes = 2ull * (uint64_t)c->kv_dim * 4;   /* K and V in f32, as gpu/exec.cu keeps them */
        li->dense_flops = mflops(&ly->wq) + mflops(&ly->wk) + mflops(&ly->wv) + mflops(&ly->wo) + mflops(&ly->router) +
                          ffn_f(&ly->dense) + ffn_f(&ly->shexp);
        li->attn_flops = 4.0 * c->q_dim;
        li->cpu_class = COST_CLASS_FLOAT;
        if (ly->is_moe && ly->experts) {
            li->is_moe = 1; li->n_expert = c->n_expert; li->k = c->n_expert_used;
            li->expert_bytes = ffn_b(&ly->experts[0].host);
            li->expert_flops = ffn_f(&ly->experts[0].host);
            li->cpu_class = expert_class(&ly->experts[0].host);
        }
    }
    uint64_t mtp = 0;
    for (int l = c->n_layer; l < c->n_layer + c->n_nextn; l++) {
        const hm_layer *ly = &m->layers[l];
        mtp += layer_dense(ly) + tb(&ly->nextn.eh_proj) + tb(&ly->nextn.embed_tokens) + tb(&ly->nextn.shared_head_head);
        for (int e = 0; ly->experts && e < c->n_expert; e++) mtp += ffn_b(&ly->experts[e].host);
    }
    in->n_layer = c->n_layer;
    in->layer = L;
    in->output_bytes = vb(&m->output_norm) + tb(&m->output);
    in->host_only_bytes = tb(&m->tok_embd) + mtp;
    in->workspace_bytes = workspace_estimate(m, in->ctx, in->chunk);
    *layers = L;
}

/* Per-layer expert counts from a routing trace of the MoE layers (or of all layers). r keeps the
 * trace and tl[l] its layer for model layer l (-1: none) for routing_hit_rates. */
static int routing_freq(const char *path, const hm_model *m, plan_layer_in *L, double **store, routing *r, int *tl,
                        hm_error *e) {
    const hm_config *c = &m->cfg;
    trace_info info;
    if (trace_load(path, r, &info, e)) return -1;
    int n_moe = 0;
    for (int l = 0; l < c->n_layer; l++) n_moe += L[l].is_moe;
    int all = r->n_layer == c->n_layer && r->n_layer != n_moe;
    if (trace_conform(path, r, &info, all ? c->n_layer : n_moe, c->n_expert, c->n_expert_used, e)) {
        routing_free(r);
        return -1;
    }
    int64_t *cnt = calloc((size_t)r->n_layer * (size_t)r->n_expert, sizeof *cnt);
    routing_count_experts(r, cnt);
    double *f = calloc((size_t)c->n_layer * (size_t)c->n_expert, sizeof *f);
    for (int l = 0, j = 0; l < c->n_layer; l++) {
        tl[l] = -1;
        if (!L[l].is_moe) { j += all; continue; }
        for (int x = 0; x < c->n_expert; x++) f[(size_t)l * c->n_expert + x] = (double)cnt[(size_t)j * r->n_expert + x];
        L[l].freq = f + (size_t)l * c->n_expert;
        tl[l] = j++;
    }
    free(cnt);
    *store = f;
    return 0;
}

/* Replays the trace through the cache policy each layer will run (LFU slots for the stream and auto
 * paths, the histogram exchange for the CPU path), with the plan's static and slot counts, and
 * stores each layer's hit rate in L. One simulator run per distinct (static, slots) pair. */
static void routing_hit_rates(const routing *r, const int *tl, const plan *p, plan_layer_in *L, int cpu_path) {
    policy_params pp = policy_defaults(cpu_path ? POLICY_EXCHANGE : POLICY_LFU);
    char *done = calloc((size_t)p->n_layer, 1);
    for (int l = 0; l < p->n_layer; l++) {
        const plan_layer *pl = &p->layer[l];
        if (done[l] || !pl->is_moe || tl[l] < 0 || pl->gpu < 0) continue;
        sim_config cfg = { .n_slots = pl->n_slots, .n_static = pl->n_static, .exchange_warm = 1 };
        sim_result res;
        if (sim_run(r, &pp, &cfg, &res)) continue;
        for (int x = l; x < p->n_layer; x++) {
            const plan_layer *q = &p->layer[x];
            if (done[x] || !q->is_moe || tl[x] < 0 || q->n_slots != pl->n_slots || q->n_static != pl->n_static) continue;
            done[x] = 1;
            if (res.layer_sel[tl[x]] > 0) {
                L[x].has_hit_rate = 1;
                L[x].hit_rate = (double)res.layer_hits[tl[x]] / (double)res.layer_sel[tl[x]];
            }
        }
        sim_result_free(&res);
    }
    free(done);
}

/* plan_build, and with a trace (r not NULL) the same residency built again, priced with the hit
 * rates the cache policy reaches on the trace (LFU, or the exchange for the CPU path). */
static int plan_build_traced(plan *p, plan_inputs *in, const routing *r, const int *tl, plan_layer_in *layers, char *err,
                             size_t cap) {
    if (plan_build(p, in, err, cap)) return -1;
    if (!r || in->n_gpu == 0) return 0;
    routing_hit_rates(r, tl, p, layers, in->cold == PLAN_COLD_CPU || in->n_cpu_experts > 0);
    plan_free(p);
    return plan_build(p, in, err, cap);
}

/* ---------------------------------------------------------------- calibration file */

static void default_calibration(char *buf, size_t cap) {
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (x && *x) snprintf(buf, cap, "%s/hotmoe/calibration.json", x);
    else snprintf(buf, cap, "%s/.cache/hotmoe/calibration.json", h && *h ? h : ".");
}

static double jnum(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(x) && x->valuedouble > 0 ? x->valuedouble : 0;
}

/* Reads rates from a calibration file into r (fields present and > 0 only). */
static int calibration_read(const char *path, cost_rates *r, hm_error *e) {
    size_t len;
    char *text = hm_read_file(path, &len, e);
    if (!text) return -1;
    cJSON *o = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(o)) { cJSON_Delete(o); return hm_fail(e, "%s: expected a JSON object from hotmoe calibrate", path); }
    double v;
    if ((v = jnum(o, "hbm_gbs"))) r->hbm = v;
    if ((v = jnum(o, "pcie_gbs"))) r->pcie = v;
    if ((v = jnum(o, "dram_gbs"))) r->dram = v;
    if ((v = jnum(o, "hbm_eff"))) r->eff_hbm = v;
    const cJSON *lu = cJSON_GetObjectItemCaseSensitive(o, "gpu_layer_us");
    if (cJSON_IsNumber(lu) && lu->valuedouble >= 0) r->gpu_layer_us = lu->valuedouble;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "cpu_gemv_gbs");
    for (int c = 0; c < COST_CLASS_COUNT && cJSON_IsObject(g); c++)
        if ((v = jnum(g, cost_class_name(c)))) r->cpu_gemv[c] = v;
    cJSON_Delete(o);
    return 0;
}

/* ---------------------------------------------------------------- output */

static const char *fmt_b(char *buf, double b) {
    if (b >= GIB) snprintf(buf, 32, "%.2f GiB", b / GIB);
    else if (b >= 1048576) snprintf(buf, 32, "%.1f MiB", b / 1048576);
    else snprintf(buf, 32, "%.1f KiB", b / 1024);
    return buf;
}

static void print_links(const char *what, const double *t, double scale, const char *unit, int n) {
    printf("%s", what);
    for (int i = 0; i < n; i++) printf("%s %s %.3g %s", i ? "," : "", cost_link_name(i), t[i] * scale, unit);
}

static void print_text(const plan *p, const plan_inputs *in, const plan_opts *o, const hm_model *m, const char *rates_from) {
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], b7[32];
    const hm_config *c = &m->cfg;
    int n_moe = 0;
    uint64_t eb = 0;
    for (int l = 0; l < in->n_layer; l++) if (in->layer[l].is_moe) { n_moe++; eb = in->layer[l].expert_bytes; }
    printf("model    %s: %s, %d layers (%d MoE), %d experts top-%d, %s per expert\n", m->path ? m->path : o->model,
           hm_arch_name(c->arch), c->n_layer, n_moe, c->n_expert, c->n_expert_used, fmt_b(b1, (double)eb));
    /* the user's --gpu-mem per GPU, and what the planner got: the engine's share (in->gpu_mem) */
    printf("budget   ");
    if (!in->n_gpu) printf("CPU only");
    for (int d = 0; d < in->n_gpu; d++) printf("%sGPU %d %.15g GiB", d ? ", " : "", d, o->gpu_mem[d]);
    if (in->n_gpu && o->gpu_reserve > 0) {
        printf(" (");
        for (int d = 0; d < in->n_gpu; d++) printf("%s%.4g GiB", d ? ", " : "", in->gpu_mem[d] / GIB);
        printf(" for the engine, %.15g GiB%s reserved for the CUDA context and cuBLAS)", o->gpu_reserve, in->n_gpu > 1 ? " each" : "");
    }
    printf("; host RAM %s; ctx %d x %d stream%s; cold %s; routing %s\n", in->host_ram ? fmt_b(b1, (double)in->host_ram) : "unchecked",
           in->ctx, in->streams, in->streams == 1 ? "" : "s", plan_cold_name(in->cold), o->routing ? o->routing : "uniform");
    const cost_rates *r = &in->rates;
    printf("rates    HBM %.0f x %.2f, PCIe %.1f x %.2f, DRAM %.1f x %.2f GB/s (%s)\n\n", r->hbm, r->eff_hbm, r->pcie,
           r->eff_pcie, r->dram, r->eff_cpu, rates_from);
    printf("%-9s %4s %7s %6s %7s %5s %7s %10s  %s\n", "layers", "gpu", "static", "slots", "stream", "cpu", "miss", "us/step",
           "limit");
    for (int l = 0; l < p->n_layer;) {
        int e = l;
        double us = p->layer[l].decode_us;
        while (e + 1 < p->n_layer && plan_layers_alike(&p->layer[l], &p->layer[e + 1])) us += p->layer[++e].decode_us;
        const plan_layer *pl = &p->layer[l];
        char range[24], gpu[8];
        snprintf(range, sizeof range, l == e ? "%d" : "%d-%d", l, e);
        snprintf(gpu, sizeof gpu, pl->gpu < 0 ? "cpu" : "%d", pl->gpu);
        if (!pl->is_moe) printf("%-9s %4s %7s %6s %7s %5s %7s %10.1f  %s\n", range, gpu, "dense", "-", "-", "-", "-",
                                us / (e - l + 1), cost_link_name(pl->decode_limit));
        else printf("%-9s %4s %7d %6d %7d %5d %6.1f%% %10.1f  %s\n", range, gpu, pl->n_static, pl->n_slots, pl->n_stream,
                    pl->n_cpu, 100 * pl->miss_rate, us / (e - l + 1), cost_link_name(pl->decode_limit));
        l = e + 1;
    }
    printf("\n%-7s %9s %10s %10s %10s %10s %10s %10s  %s\n", "VRAM", "layers", "weights", "KV", "slots", "staging",
           "workspace", "total", "engine budget");
    for (int d = 0; d < p->n_gpu; d++) {
        const plan_gpu *g = &p->gpu[d];
        char range[24];
        snprintf(range, sizeof range, g->first_layer <= g->last_layer ? "%d-%d" : "none", g->first_layer, g->last_layer);
        printf("GPU %-3d %9s %10s %10s %10s %10s %10s %10s  %s\n", d, range, fmt_b(b1, g->weights), fmt_b(b2, g->kv),
               fmt_b(b3, g->slots), fmt_b(b4, g->staging), fmt_b(b5, g->workspace), fmt_b(b6, g->total), fmt_b(b7, g->budget));
    }
    printf("host     pinned experts %s, total %s", fmt_b(b1, p->host_pinned), fmt_b(b2, p->host_total));
    if (p->kv_host) printf(" (KV %s)", fmt_b(b3, p->kv_host));
    printf("\n\ndecode   %.1f tok/s (%d stream%s), bottleneck %s, %.2f cold experts/token\n", p->decode_tok_s, in->streams,
           in->streams == 1 ? "" : "s", cost_link_name(p->decode_limit), p->miss_per_token);
    print_links("         per step by bottleneck:", p->decode_time, 1e3, "ms", COST_LINK_COUNT);
    print_links("\n         per token:", p->decode_bytes, 1e-9, "GB", COST_COMPUTE);
    printf("\nprefill  %.0f tok/s (%d-token prompt, chunks of %d), bottleneck %s\n", p->prefill_tok_s, in->prompt,
           in->chunk, cost_link_name(p->prefill_limit));
    print_links("         time by bottleneck:", p->prefill_time, 1.0, "s", COST_LINK_COUNT);
    print_links("\n         per token:", p->prefill_bytes, 1e-9, "GB", COST_COMPUTE);
    printf("\n");
    /* the run-time flags of this plan (the executor keeps one static/slot split for all MoE layers:
     * the first MoE layer's; the slots fill what the budget leaves) */
    const plan_layer *pl = NULL;
    for (int l = 0; l < p->n_layer && !pl; l++) if (p->layer[l].is_moe && p->layer[l].gpu >= 0) pl = &p->layer[l];
    if (pl && p->n_gpu > 0) {
        /* the user's values as given (%.15g gives back what strtod read): the run subtracts the reserve itself */
        printf("\nrun      --gpu-mem %.15g", o->gpu_mem[0]);
        if (p->n_gpu > 1) printf(",%.15g --gpus 0,1", o->gpu_mem[1]);
        if (o->gpu_reserve != RUNNER_GPU_RESERVE_GIB) printf(" --gpu-reserve %.15g", o->gpu_reserve);
        const char *cold = in->cold == PLAN_COLD_CPU || (in->cold == PLAN_COLD_AUTO && pl->n_cpu > 0) ? "cpu" : "stream";
        printf(" --cold %s --static-experts %d", cold, pl->n_static);
        if (o->routing) printf(" --routing %s", o->routing);
        printf("\n");
    }
}

static cJSON *ids_of(const plan_layer *pl, int from, int to) {
    cJSON *a = cJSON_CreateArray();
    for (int i = from; i < to; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(pl->order[i]));
    return a;
}

static cJSON *links_json(const double *t) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < COST_LINK_COUNT; i++) cJSON_AddNumberToObject(o, cost_link_name(i), t[i]);
    return o;
}

static void print_json(const plan *p, const plan_inputs *in, const plan_opts *o, const char *rates_from) {
    cJSON *j = cJSON_CreateObject(), *w = cJSON_AddObjectToObject(j, "workload"), *r = cJSON_AddObjectToObject(j, "rates");
    cJSON_AddStringToObject(j, "model", o->model);
    cJSON_AddStringToObject(j, "cold", plan_cold_name(in->cold));
    cJSON_AddStringToObject(j, "routing", o->routing ? o->routing : "uniform");
    cJSON_AddNumberToObject(j, "gpu_reserve", o->gpu_reserve * GIB);   /* bytes of each --gpu-mem left out of gpus[].budget */
    cJSON_AddNumberToObject(w, "ctx", in->ctx); cJSON_AddNumberToObject(w, "streams", in->streams);
    cJSON_AddNumberToObject(w, "decode_pos", in->decode_pos); cJSON_AddNumberToObject(w, "prompt", in->prompt);
    cJSON_AddNumberToObject(w, "prefill_chunk", in->chunk);
    cJSON_AddStringToObject(r, "source", rates_from);
    cJSON_AddNumberToObject(r, "hbm_gbs", in->rates.hbm); cJSON_AddNumberToObject(r, "pcie_gbs", in->rates.pcie);
    cJSON_AddNumberToObject(r, "dram_gbs", in->rates.dram);
    cJSON *layers = cJSON_AddArrayToObject(j, "layers");
    for (int l = 0; l < p->n_layer; l++) {
        const plan_layer *pl = &p->layer[l];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "layer", l);
        cJSON_AddNumberToObject(x, "gpu", pl->gpu);
        cJSON_AddBoolToObject(x, "moe", pl->is_moe);
        if (pl->is_moe) {
            int a = pl->n_static, b = a + pl->n_slots;
            cJSON_AddItemToObject(x, "static", ids_of(pl, 0, a));
            cJSON_AddItemToObject(x, "slots", ids_of(pl, a, b));   /* start contents, most routed first */
            cJSON *st = cJSON_AddArrayToObject(x, "stream"), *cp = cJSON_AddArrayToObject(x, "cpu");
            for (int i = b; i < pl->n_expert; i++)
                cJSON_AddItemToArray(pl->where[pl->order[i]] == PLAN_CPU ? cp : st, cJSON_CreateNumber(pl->order[i]));
            cJSON_AddNumberToObject(x, "miss_rate", pl->miss_rate);
        }
        cJSON_AddNumberToObject(x, "decode_us", pl->decode_us);
        cJSON_AddStringToObject(x, "limit", cost_link_name(pl->decode_limit));
        cJSON_AddItemToArray(layers, x);
    }
    cJSON *gpus = cJSON_AddArrayToObject(j, "gpus");
    for (int d = 0; d < p->n_gpu; d++) {
        const plan_gpu *g = &p->gpu[d];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "gpu", d);
        cJSON_AddNumberToObject(x, "first_layer", g->first_layer); cJSON_AddNumberToObject(x, "last_layer", g->last_layer);
        cJSON_AddNumberToObject(x, "budget", (double)g->budget); cJSON_AddNumberToObject(x, "weights", (double)g->weights);
        cJSON_AddNumberToObject(x, "kv", (double)g->kv); cJSON_AddNumberToObject(x, "slots", (double)g->slots);
        cJSON_AddNumberToObject(x, "staging", (double)g->staging);
        cJSON_AddNumberToObject(x, "workspace", (double)g->workspace); cJSON_AddNumberToObject(x, "total", (double)g->total);
        cJSON_AddItemToArray(gpus, x);
    }
    cJSON *h = cJSON_AddObjectToObject(j, "host");
    cJSON_AddNumberToObject(h, "pinned", (double)p->host_pinned); cJSON_AddNumberToObject(h, "total", (double)p->host_total);
    cJSON_AddNumberToObject(h, "kv", (double)p->kv_host);
    cJSON *dec = cJSON_AddObjectToObject(j, "decode"), *pre = cJSON_AddObjectToObject(j, "prefill");
    cJSON_AddNumberToObject(dec, "tok_s", p->decode_tok_s);
    cJSON_AddStringToObject(dec, "bottleneck", cost_link_name(p->decode_limit));
    cJSON_AddNumberToObject(dec, "cold_experts_per_token", p->miss_per_token);
    cJSON_AddItemToObject(dec, "seconds_per_step", links_json(p->decode_time));
    cJSON_AddItemToObject(dec, "bytes_per_token", links_json(p->decode_bytes));
    cJSON_AddNumberToObject(pre, "tok_s", p->prefill_tok_s);
    cJSON_AddStringToObject(pre, "bottleneck", cost_link_name(p->prefill_limit));
    cJSON_AddItemToObject(pre, "seconds", links_json(p->prefill_time));
    cJSON_AddItemToObject(pre, "bytes_per_token", links_json(p->prefill_bytes));
    char *s = cJSON_PrintUnformatted(j);
    printf("%s\n", s);
    free(s);
    cJSON_Delete(j);
}

/* ---------------------------------------------------------------- hotmoe plan */

int cmd_plan(int argc, char **argv) {
    config_set cfg;
    char **args = NULL;
    hm_error e = { { 0 } };
    int n = config_apply(&cfg, "plan", argc, argv, &args, &e), rc = 1;
    plan_opts o;
    if (n < 0) { fprintf(stderr, "hotmoe plan: %s\n", e.msg); config_free(&cfg); return 2; }
    int pr = parse_plan(&o, n, args);
    free(args);
    if (pr) { config_free(&cfg); return pr > 0 ? 0 : 2; }
    plan_inputs *in = &o.in;
    /* rates: DEVICE.md defaults <- calibration file <- flags */
    char path[4096];
    const char *rates_from = "DEVICE.md defaults";
    if (o.calibration) snprintf(path, sizeof path, "%s", o.calibration); else default_calibration(path, sizeof path);
    if (o.calibration || access(path, R_OK) == 0) {
        if (calibration_read(path, &in->rates, &e)) { fprintf(stderr, "hotmoe plan: %s\n", e.msg); config_free(&cfg); return 1; }
        rates_from = path;
    }
    if (o.pcie > 0) in->rates.pcie = o.pcie;
    if (o.dram > 0) in->rates.dram = o.dram;
    if (o.hbm > 0) in->rates.hbm = o.hbm;
    if (o.hbm_eff > 0) in->rates.eff_hbm = o.hbm_eff;
    if (o.gpu_layer_us >= 0) in->rates.gpu_layer_us = o.gpu_layer_us;
    if (o.n_gpu_mem < 0) {
        if (gpu_device_count() > 0) {
            fprintf(stderr, "hotmoe plan: expected --gpu-mem GiB[,GiB] (the VRAM budget of each GPU)\n");
            config_free(&cfg);
            return 2;
        }
        o.n_gpu_mem = 0;
    }
    in->n_gpu = o.n_gpu_mem == 1 && o.gpu_mem[0] == 0 ? 0 : o.n_gpu_mem;
    /* the plan gets each budget less the reserve: the engine's, as a run's executor does */
    runner_opts ro;
    runner_opts_init(&ro);
    ro.gpu_reserve_gib = o.gpu_reserve;
    for (int d = 0; d < in->n_gpu; d++) {
        ro.gpu_mem_gib = o.gpu_mem[d];
        if (runner_check_budget(&ro, &e)) {
            if (in->n_gpu > 1) fprintf(stderr, "hotmoe plan: GPU %d: %s\n", d, e.msg);
            else fprintf(stderr, "hotmoe plan: %s\n", e.msg);
            config_free(&cfg);
            return 2;
        }
        in->gpu_mem[d] = (uint64_t)(runner_engine_gib(&ro, o.gpu_mem[d]) * GIB);
    }
    if (o.n_gpu_split && o.n_gpu_split != in->n_gpu) {
        fprintf(stderr, "hotmoe plan: --gpu-split: expected %d values (one per GPU of --gpu-mem), found %d\n", in->n_gpu,
                o.n_gpu_split);
        config_free(&cfg);
        return 2;
    }
    for (int d = 0; d < o.n_gpu_split; d++) in->gpu_split[d] = o.gpu_split[d];
    if (o.n_cpu_experts > 1 && o.n_cpu_experts != in->n_gpu) {
        fprintf(stderr, "hotmoe plan: --cpu-experts: expected 1 or %d values (one per GPU), found %d\n", in->n_gpu,
                o.n_cpu_experts);
        config_free(&cfg);
        return 2;
    }
    if (o.ram >= 0) in->host_ram = (uint64_t)(o.ram * GIB);
    else in->host_ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);

    hm_model m;
    if (model_load(&m, o.model, &e)) { fprintf(stderr, "hotmoe plan: %s\n", e.msg); config_free(&cfg); return 1; }
    plan_layer_in *layers = NULL;
    double *freq = NULL;
    model_inputs(&m, in, &layers);
    if (o.workspace_mib >= 0) in->workspace_bytes = (uint64_t)(o.workspace_mib * 1048576.0);
    plan p;
    char err[1024];
    routing r = { 0 };
    int *tl = calloc((size_t)in->n_layer, sizeof *tl);
    if (o.routing && routing_freq(o.routing, &m, layers, &freq, &r, tl, &e)) fprintf(stderr, "hotmoe plan: %s\n", e.msg);
    else if (plan_build_traced(&p, in, o.routing ? &r : NULL, tl, layers, err, sizeof err))
        fprintf(stderr, "hotmoe %s%s\n", err, in->n_gpu && o.gpu_reserve > 0 && strstr(err, "budget") ? RESERVE_NOTE : "");
    else {
        if (o.json) print_json(&p, in, &o, rates_from);
        else print_text(&p, in, &o, &m, rates_from);
        plan_free(&p);
        rc = 0;
    }
    routing_free(&r);
    free(tl); free(freq); free(layers);
    model_free(&m);
    config_free(&cfg);
    return rc;
}

/* ---------------------------------------------------------------- --cold auto */

float autoplan_lfu_decay(const routing *r, int n_static, int n_slots, double *hit_default, double *hit_best) {
    static const float decays[] = { 0.995f, 0.98f, 0.95f, 0.9f, 0.8f };
    double best = -1;
    float pick = 0;
    *hit_default = *hit_best = 0;
    for (size_t i = 0; i < sizeof decays / sizeof decays[0]; i++) {
        policy_params pp = policy_defaults(POLICY_LFU);
        pp.lfu_decay = decays[i];
        sim_config sc = { .n_slots = n_slots, .n_static = n_static };
        sim_result res;
        if (sim_run(r, &pp, &sc, &res)) continue;
        const double h = sim_hit_rate(&res);
        sim_result_free(&res);
        if (i == 0) *hit_default = h;
        if (h > best + 1e-4) { best = h; pick = decays[i]; }   /* a faster decay must win by more than noise */
    }
    *hit_best = best > 0 ? best : 0;
    return pick;
}

int autoplan_choose(const hm_model *m, double gpu_mem_gib, const char *routing_path, int ctx, autoplan *out, hm_error *e) {
    return autoplan_choose2(m, gpu_mem_gib, 0, routing_path, ctx, out, e);
}

int autoplan_choose2(const hm_model *m, double gib0, double gib1, const char *routing_path, int ctx, autoplan *out, hm_error *e) {
    memset(out, 0, sizeof *out);
    plan_inputs in;
    plan_inputs_init(&in);
    char path[4096];
    default_calibration(path, sizeof path);
    if (access(path, R_OK) == 0 && calibration_read(path, &in.rates, e)) return -1;
    in.n_gpu = gib1 > 0 ? 2 : 1;
    in.gpu_mem[0] = (uint64_t)(gib0 * GIB);
    in.gpu_mem[1] = (uint64_t)(gib1 * GIB);
    in.host_ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    in.ctx = ctx;
    if (in.decode_pos > ctx) in.decode_pos = ctx;
    plan_layer_in *layers = NULL;
    double *freq = NULL;
    model_inputs(m, &in, &layers);
    routing r = { 0 };
    int *tl = calloc((size_t)in.n_layer, sizeof *tl), rc = -1;
    plan p;
    char err[1024];
    memset(&p, 0, sizeof p);
    if (routing_path && routing_freq(routing_path, m, layers, &freq, &r, tl, e)) goto out;
    if (plan_build_traced(&p, &in, routing_path ? &r : NULL, tl, layers, err, sizeof err)) { hm_fail(e, "--cold auto: %s", err); goto out; }
    /* the executor runs one static/slot split for every MoE layer: the plan's first MoE layer's */
    const plan_layer *pl = NULL;
    for (int l = 0; l < p.n_layer && !pl; l++) if (p.layer[l].is_moe) pl = &p.layer[l];
    out->cold = pl && pl->n_cpu > 0 ? GPU_COLD_CPU : GPU_COLD_STREAM;
    out->n_static = pl ? pl->n_static : 0;
    if (in.n_gpu == 2) {
        out->split_layer = p.gpu[1].first_layer;
        for (int l = 0; l < p.n_layer; l++) if (p.layer[l].n_cpu > 0) out->cold = GPU_COLD_CPU;
    }
    if (routing_path && pl && pl->n_slots > 0)
        out->lfu_decay = autoplan_lfu_decay(&r, pl->n_static, pl->n_slots, &out->hit_default, &out->hit_best);
    out->decode_tok_s = p.decode_tok_s;
    if (pl && pl->n_cpu > 0 && pl->n_stream > 0) {   /* PCIe and the CPU at once: copies that serve the step */
        const plan_layer_in *li = &layers[pl - p.layer];
        double share = (double)pl->n_stream / (pl->n_stream + pl->n_cpu);
        out->swap_max = (int)lround(li->k * pl->miss_rate * share);
        if (out->swap_max < 1) out->swap_max = 1;
        out->mixed = 1;
    } else
        out->swap_max = -1;
    int w = snprintf(out->why, sizeof out->why, "--cold auto: the planner chose --cold %s%s, %d static experts per layer; predicted %.1f tok/s (%s-bound)",
                     out->cold == GPU_COLD_CPU ? "cpu" : "stream", out->mixed ? " with PCIe copies beside the CPU" : "",
                     out->n_static, p.decode_tok_s, cost_link_name(p.decode_limit));
    if (out->split_layer > 0 && w > 0 && (size_t)w < sizeof out->why)
        w += snprintf(out->why + w, sizeof out->why - w, "; layers 0..%d on the first GPU, %d..%d on the second",
                      out->split_layer - 1, out->split_layer, p.n_layer - 1);
    if (out->lfu_decay > 0 && w > 0 && (size_t)w < sizeof out->why)
        snprintf(out->why + w, sizeof out->why - w, "; LFU decay %.3g (simulated hit rate %.3f on the trace, %.3f at 0.995)",
                 out->lfu_decay, out->hit_best, out->hit_default);
    rc = 0;
out:
    plan_free(&p);
    routing_free(&r);
    free(tl); free(freq); free(layers);
    return rc;
}

int autoplan_apply(runner_opts *o, const hm_model *m, int device, int n_ctx, int quiet, hm_error *e) {
    if (runner_check_budget(o, e)) return -1;   /* before any target is chosen: every command's first look at the budgets */
    if (o->cold == RUNNER_COLD_AUTO && o->n_cpu_experts) o->cold = GPU_COLD_CPU;   /* --cpu-experts is an explicit split */
    if (o->cold != RUNNER_COLD_AUTO) return 0;
    if (device == HM_DEVICE_AUTO) device = gpu_device_count() > 0 ? HM_DEVICE_CUDA : HM_DEVICE_CPU;
    if (device != HM_DEVICE_CUDA || o->gpu_mem_gib <= 0) { o->cold = GPU_COLD_NONE; return 0; }
    autoplan a;
    /* the engine's budgets: the executor's (runner_gpu_opts), so the plan's VRAM is what it allocates */
    const double gib0 = runner_engine_gib(o, o->gpu_mem_gib),
                 gib1 = runner_engine_gib(o, o->gpu_mem2_gib > 0 ? o->gpu_mem2_gib : o->gpu_mem_gib);
    if (o->n_gpus == 2 ? autoplan_choose2(m, gib0, gib1, o->routing, n_ctx, &a, e) : autoplan_choose(m, gib0, o->routing, n_ctx, &a, e)) {
        const size_t n = strlen(e->msg);
        if (o->gpu_reserve_gib > 0 && strstr(e->msg, "budget") && n + sizeof RESERVE_NOTE < sizeof e->msg)
            memcpy(e->msg + n, RESERVE_NOTE, sizeof RESERVE_NOTE);
        return -1;
    }
    /* two GPUs: the plan's layer split too (unless --gpu-split gives one) */
    if (o->n_gpus == 2 && !o->n_split && a.split_layer > 0) o->split_layer = a.split_layer;
    o->cold = a.cold;
    if (o->n_static < 0 && o->n_slots < 0) o->n_static = a.n_static;
    if (a.cold == GPU_COLD_CPU && o->swap_max < 0) o->swap_max = a.swap_max;
    if (o->decay <= 0 && a.lfu_decay > 0) o->decay = a.lfu_decay;
    if (!quiet) fprintf(stderr, "hotmoe: %s\n", a.why);
    return 0;
}

/* ---------------------------------------------------------------- hotmoe calibrate */


/* CPU GEMV on a zero-filled matrix of type t (zero blocks are valid), weight GB/s; 0 if unsupported. */
static double gemv_rate(int type, void *buf, size_t cap) {
    const int64_t cols = 4096;
    size_t row = hm_row_size(type, cols);
    if (!row || !hm_gemv_supported(type)) return 0;
    hm_tensor W = { .type = type, .n_dims = 2, .ne = { cols, (int64_t)(cap / row), 1, 1 }, .data = buf };
    W.nbytes = row * (size_t)W.ne[1];
    float *x = malloc(sizeof *x * cols), *y = malloc(sizeof *y * (size_t)W.ne[1]);
    for (int64_t i = 0; i < cols; i++) x[i] = (float)((i * 7919) % 97) / 97.0f - 0.5f;
    double best = 0;
    for (int rep = 0; rep < 4; rep++) {
        double t0 = hm_now();
        if (hm_gemv(y, &W, x)) { best = 0; break; }
        double dt = hm_now() - t0;
        if (rep && W.nbytes / dt / 1e9 > best) best = W.nbytes / dt / 1e9;
    }
    free(x); free(y);
    return best;
}

static int mkdirs(const char *file) {
    char d[4096];
    snprintf(d, sizeof d, "%s", file);
    for (char *s = d + 1; *s; s++)
        if (*s == '/') { *s = 0; if (mkdir(d, 0755) && errno != EEXIST) return -1; *s = '/'; }
    return 0;
}

int cmd_calibrate(int argc, char **argv) {
    char out[4096];
    default_calibration(out, sizeof out);
    double mib = 1024;
    const char *model = NULL;
    for (int i = 0; i < argc; i++) {
        if ((!strcmp(argv[i], "--out") || !strcmp(argv[i], "-o")) && i + 1 < argc) snprintf(out, sizeof out, "%s", argv[++i]);
        else if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc) { if (num("--mib", argv[++i], 16, 1 << 20, &mib)) return 2; }
        else {
            fprintf(stderr, "usage: hotmoe calibrate [--out FILE] [--mib BUFFER_MIB] [-m MODEL]\n  default FILE: %s\n"
                    "  -m: a model that fits in VRAM, decoded on the GPU: the share of the HBM rate the decode kernels reach\n", out);
            return strcmp(argv[i], "-h") && strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    size_t n = (size_t)(mib * 1048576.0) & ~(size_t)63;
    uint64_t *buf = aligned_alloc(64, n);
    if (!buf) { fprintf(stderr, "hotmoe calibrate: cannot allocate %.0f MiB\n", mib); return 1; }
    int threads = omp_get_max_threads();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n / 8; i++) buf[i] = 0;   /* first touch by the threads that read it */
    cJSON *j = cJSON_CreateObject(), *g = cJSON_CreateObject();
    char host[256] = "?", when[32];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddStringToObject(j, "host", host);
    cJSON_AddStringToObject(j, "created", when);
    cJSON_AddNumberToObject(j, "threads", threads);
    double d1 = cpu_dram_read_gbs(buf, n, 1, 3), dn = cpu_dram_read_gbs(buf, n, threads, 3);
    printf("DRAM read        1 thread %7.1f GB/s, %d threads %7.1f GB/s (%.0f MiB buffer)\n", d1, threads, dn, mib);
    cJSON_AddNumberToObject(j, "dram_gbs_1", d1);
    cJSON_AddNumberToObject(j, "dram_gbs", dn);
    static const int types[COST_CLASS_COUNT] = { HM_TYPE_F16, HM_TYPE_Q8_0, HM_TYPE_Q4_0, HM_TYPE_Q4_K };
    for (int c = 0; c < COST_CLASS_COUNT; c++) {
        double r = gemv_rate(types[c], buf, n);
        printf("CPU GEMV %-7s %-6s %7.1f GB/s of weights (%s)\n", cost_class_name(c), hm_type_name(types[c]), r,
               r > 0 ? hm_gemv_isa() : "no fast kernel");
        if (r > 0) cJSON_AddNumberToObject(g, cost_class_name(c), r);
    }
    cJSON_AddItemToObject(j, "cpu_gemv_gbs", g);
    free(buf);
    int ng = gpu_device_count();
    cJSON_AddNumberToObject(j, "gpus", ng);
    if (ng > 0) {
        char desc[256];
        double hbm = gpu_measure_d2d(0), h2d = gpu_measure_h2d(0);
        printf("GPU 0            %s\nHBM copy         %7.1f GB/s\n", gpu_describe(0, desc, sizeof desc), hbm);
        if (h2d > 0) printf("PCIe H2D pinned  %7.1f GB/s\n", h2d);
        else printf("PCIe H2D pinned  not measured: plan uses 55 GB/s\n");
        cJSON_AddStringToObject(j, "gpu", desc);
        if (hbm > 0) cJSON_AddNumberToObject(j, "hbm_gbs", hbm);
        if (h2d > 0) cJSON_AddNumberToObject(j, "pcie_gbs", h2d);
        if (model && hbm > 0) {   /* the decode kernels' effective rate: weights + KV read per token x tok/s */
            hm_model m; hm_runner r; hm_error e;
            const int n = 64;
            if (model_load(&m, model, &e) || runner_init(&r, &m, HM_DEVICE_CUDA, n + 1, &e)) {
                fprintf(stderr, "hotmoe calibrate: -m %s: %s\n", model, e.msg);
                cJSON_Delete(j);
                return 1;
            }
            float *lg = malloc(sizeof(float) * (size_t)m.cfg.n_vocab);
            int rc = 0;
            double t0 = 0;
            for (int i = 0; i <= n && !rc; i++) {   /* token 0 warms up, then n timed steps */
                if (i == 1) t0 = hm_now();
                rc = runner_forward(&r, (int32_t)((i * 7919) % m.cfg.n_vocab), i, lg, &e);
            }
            const double dt = hm_now() - t0, bytes = model_decode_bytes(&m) + 2.0 * m.cfg.n_layer * m.cfg.kv_dim * 4 * (n / 2.0);
            free(lg); runner_free(&r); model_free(&m);
            if (rc) { fprintf(stderr, "hotmoe calibrate: -m %s: %s\n", model, e.msg); cJSON_Delete(j); return 1; }
            const double eff = bytes * n / dt / 1e9 / hbm;
            printf("GPU decode       %7.1f tok/s on %s: %.1f GB/s, %.3f of the HBM copy rate\n", n / dt, model,
                   bytes * n / dt / 1e9, eff);
            cJSON_AddNumberToObject(j, "hbm_eff", eff < 1 ? eff : 1);
            cJSON_AddNumberToObject(j, "gpu_layer_us", 0);   /* in the effective rate already */
        }
    } else {
        printf("GPU              none: plan keeps DEVICE.md's PCIe and HBM rates\n");
        if (model) printf("-m %s: not measured (it is decoded on a GPU)\n", model);
    }
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    FILE *f = mkdirs(out) ? NULL : fopen(out, "w");
    int bad_write = !f || fputs(s, f) < 0 || fputc('\n', f) < 0;
    if ((f && fclose(f)) || bad_write) {
        fprintf(stderr, "hotmoe calibrate: cannot write '%s': %s\n", out, strerror(errno));
        free(s);
        return 1;
    }
    printf("wrote %s\n", out);
    free(s);
    return 0;
}
