/* cmd_simulate.c - `hotmoe simulate`: replays a routing trace (ours or Mixtral JSONL) through the
 * cache policies the engine runs and prints hit rates and misses per token; also converts traces
 * (--write) and generates calibrated synthetic ones (--generate CLASS). */
#define _GNU_SOURCE
#include "sim.h"
#include "synth.h"
#include "trace.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_simulate(int argc, char **argv);

typedef struct {
    const char *trace, *write, *generate, *policy, *params;
    int slots[16], n_slots, n_static, experts, json, per_layer, stats, warm;
    int64_t tokens;
    uint64_t seed;
    policy_params pp;   /* LFU / exchange knobs; kind set per run */
} sim_opts;

static const char usage[] =
    "usage: hotmoe simulate --trace FILE --slots N[,N...] [--static N] [--policy lru|lfu|static|exchange|belady|all]\n"
    "                       [--json] [--per-layer] [--stats] [--experts N] [--write OUT.hmrt]\n"
    "                       [--lfu-decay D] [--swap-interval N] [--swap-max N] [--swap-floor X] [--swap-hyst X]\n"
    "                       [--swap-decay D] [--swap-scope global|layer] [--swap-warm]\n"
    "       hotmoe simulate --generate mixtral|a3b|air|glm [--tokens N] [--seed S] [--write OUT.hmrt] [--slots N ...]\n"
    "                       [--params zipf,stick,recent,window,drift]   (skip the fit)\n";

static int bad(const char *flag, const char *want, const char *found) {
    fprintf(stderr, "hotmoe simulate: %s: expected %s, found '%s'\n", flag, want, found ? found : "(nothing)");
    return -1;
}

static int num_i(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end; errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || x < lo || x > hi) {
        char want[64]; snprintf(want, sizeof want, "an integer in [%ld, %ld]", lo, hi);
        return bad(flag, want, v);
    }
    *out = x; return 0;
}

static int num_d(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end; errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || errno || end == v || *end || !(x >= lo && x <= hi)) {
        char want[64]; snprintf(want, sizeof want, "a number in [%g, %g]", lo, hi);
        return bad(flag, want, v);
    }
    *out = x; return 0;
}

static int parse(sim_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    o->policy = "all"; o->tokens = 512; o->seed = 1; o->pp = policy_defaults(POLICY_LRU);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x; double d;
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (!strcmp(a, "--per-layer")) { o->per_layer = 1; continue; }
        if (!strcmp(a, "--stats")) { o->stats = 1; continue; }
        if (!strcmp(a, "--swap-warm")) { o->warm = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); exit(0); }
        i++;
        if (!strcmp(a, "--trace")) o->trace = v;
        else if (!strcmp(a, "--write")) o->write = v;
        else if (!strcmp(a, "--generate")) o->generate = v;
        else if (!strcmp(a, "--params")) o->params = v;
        else if (!strcmp(a, "--policy")) o->policy = v;
        else if (!strcmp(a, "--slots")) {
            char *s = v ? strdup(v) : NULL, *save = NULL;
            o->n_slots = 0;
            for (char *tok = s ? strtok_r(s, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save)) {
                if (o->n_slots == 16 || num_i(a, tok, 0, ROUTING_MAX_EXPERT, &x)) { free(s); return o->n_slots == 16 ? bad(a, "at most 16 counts", v) : -1; }
                o->slots[o->n_slots++] = (int)x;
            }
            free(s);
            if (!o->n_slots) return bad(a, "a slot count per layer, or a list N,N,...", v);
        }
        else if (!strcmp(a, "--static")) { if (num_i(a, v, 0, ROUTING_MAX_EXPERT, &x)) return -1; o->n_static = (int)x; }
        else if (!strcmp(a, "--experts")) { if (num_i(a, v, 1, ROUTING_MAX_EXPERT, &x)) return -1; o->experts = (int)x; }
        else if (!strcmp(a, "--tokens")) { if (num_i(a, v, 1, 100000000, &x)) return -1; o->tokens = x; }
        else if (!strcmp(a, "--seed")) { if (num_i(a, v, 0, 2147483647, &x)) return -1; o->seed = (uint64_t)x; }
        else if (!strcmp(a, "--lfu-decay")) { if (num_d(a, v, 0.0, 1.0, &d)) return -1; o->pp.lfu_decay = d; }
        else if (!strcmp(a, "--swap-interval")) { if (num_i(a, v, 1, 1 << 30, &x)) return -1; o->pp.swap_interval = (int)x; }
        else if (!strcmp(a, "--swap-max")) { if (num_i(a, v, 0, 1 << 30, &x)) return -1; o->pp.swap_max = (int)x; }
        else if (!strcmp(a, "--swap-floor")) { if (num_d(a, v, 0.0, 1e12, &d)) return -1; o->pp.swap_floor = d; }
        else if (!strcmp(a, "--swap-hyst")) { if (num_d(a, v, 0.0, 1e6, &d)) return -1; o->pp.swap_hyst = d; }
        else if (!strcmp(a, "--swap-decay")) { if (num_d(a, v, 0.0, 1.0, &d)) return -1; o->pp.swap_decay = d; }
        else if (!strcmp(a, "--swap-scope")) {
            if (v && !strcmp(v, "global")) o->pp.swap_per_layer = 0;
            else if (v && !strcmp(v, "layer")) o->pp.swap_per_layer = 1;
            else return bad(a, "global or layer", v);
        }
        else { fprintf(stderr, "hotmoe simulate: unknown option '%s'\n%s", a, usage); return -1; }
        if (!v) return bad(a, "a value after it", NULL);
    }
    if (!!o->trace == !!o->generate) { fprintf(stderr, "hotmoe simulate: expected exactly one of --trace FILE or --generate CLASS\n%s", usage); return -1; }
    if (strcmp(o->policy, "all") && policy_parse(o->policy) < 0) return bad("--policy", "lru, lfu, static, exchange, belady or all", o->policy);
    if (o->trace && !o->n_slots && !o->write && !o->stats) return bad("--slots", "a slot count per layer (or --write / --stats)", NULL);
    return 0;
}

static void print_stats(const routing *r, FILE *f) {
    fprintf(f, "locality: reuse at t-1 %.3f, within 2/4/8 tokens %.3f/%.3f/%.3f, top expert share %.3f, "
            "experts touched per %d tokens %.3f\n", routing_reuse(r, 1), routing_reuse(r, 2), routing_reuse(r, 4),
            routing_reuse(r, 8), routing_top_share(r), r->n_tokens < 1000 ? (int)r->n_tokens : 1000,
            routing_touched(r, r->n_tokens < 1000 ? (int)r->n_tokens : 1000));
}

/* Generates a fitted synthetic trace into r and prints the fit (to stderr with --json). */
static int generate(const sim_opts *o, routing *r) {
    const synth_class *c = synth_class_find(o->generate);
    if (!c) return bad("--generate", "mixtral, a3b, air or glm", o->generate);
    FILE *f = o->json ? stderr : stdout;
    synth_params sp; double got[8];
    if (o->params) {  /* given, not fitted: the "fit" column measures them on the fit-sized trace */
        if (sscanf(o->params, "%lf,%lf,%lf,%d,%lf", &sp.zipf, &sp.stick, &sp.recent, &sp.window, &sp.drift) != 5 ||
            sp.zipf < 0 || sp.stick < 0 || sp.recent < 0 || sp.stick + sp.recent > 1 || sp.window < 2 || sp.drift < 0)
            return bad("--params", "zipf,stick,recent,window,drift (stick + recent <= 1, window >= 2)", o->params);
        if (synth_evaluate(c, o->seed, &sp, got)) { fprintf(stderr, "hotmoe simulate: out of memory\n"); return -1; }
    } else if (synth_fit(c, o->seed, &sp, got)) { fprintf(stderr, "hotmoe simulate: out of memory fitting\n"); return -1; }
    fprintf(f, "class %s (%s); fit on %d tokens x %d layers, seed %llu\n", c->name, c->about, c->fit_tokens,
            c->fit_layers < c->n_layer ? c->fit_layers : c->n_layer, (unsigned long long)o->seed);
    fprintf(f, "params: zipf %.3f, stick %.3f, recent %.3f over %d tokens, drift %.4f\n", sp.zipf, sp.stick, sp.recent,
            sp.window, sp.drift);
    if (routing_init(r, c->n_layer, c->n_expert, c->k, o->tokens)) { fprintf(stderr, "hotmoe simulate: --tokens too large\n"); return -1; }
    synth_generate(r, &sp, o->seed);
    fprintf(f, "%-18s %6s %8s %8s %10s\n", "statistic", "slots", "target", "fit", "generated");
    for (int i = 0; i < c->n_targets; i++) {
        const synth_target *t = &c->targets[i];
        char slots[16] = "";
        if (t->slots) snprintf(slots, sizeof slots, "%d", t->slots);
        fprintf(f, "%-18s %6s %8.3f %8.3f %10.3f%s\n", synth_metric_name(t->metric), slots, t->target, got[i],
                synth_measure(r, t->metric, t->slots), t->fit ? "" : "   (reported, not fitted)");
    }
    fprintf(f, "generated %lld tokens x %d layers, %d experts top-%d\n", (long long)r->n_tokens, r->n_layer, r->n_expert, r->k);
    return 0;
}

static void json_result(const sim_result *res, int last) {
    printf("  \"%s\": {\"hit_rate\": %.6f, \"misses_per_token\": %.4f, \"loads_per_token\": %.4f, \"hits\": %lld, "
           "\"selections\": %lld, \"slots\": %d, \"static\": %d, \"layer_hit_rate\": [",
           policy_name(res->kind), sim_hit_rate(res), sim_misses_per_token(res),
           res->n_tokens ? (double)res->loads / res->n_tokens : 0.0, (long long)res->hits, (long long)res->selections,
           res->n_slots, res->n_static);
    for (int l = 0; l < res->n_layer; l++)
        printf("%s%.4f", l ? ", " : "", res->layer_sel[l] ? (double)res->layer_hits[l] / res->layer_sel[l] : 0.0);
    printf("]}%s\n", last ? "" : ",");
}

static int simulate(const sim_opts *o, const routing *r, int slots) {
    sim_result res[POLICY_COUNT];
    int kinds[POLICY_COUNT], n = 0;
    for (int k = 0; k < POLICY_COUNT; k++)
        if (!strcmp(o->policy, "all") || k == policy_parse(o->policy)) kinds[n++] = k;
    if (slots + o->n_static > r->n_expert) {
        fprintf(stderr, "hotmoe simulate: --slots %d + --static %d: expected at most the %d experts per layer\n",
                slots, o->n_static, r->n_expert);
        return -1;
    }
    sim_config cfg = { .n_slots = slots, .n_static = o->n_static, .exchange_warm = o->warm };
    for (int i = 0; i < n; i++) {
        policy_params p = o->pp; p.kind = (policy_kind)kinds[i];
        if (sim_run(r, &p, &cfg, &res[i])) { fprintf(stderr, "hotmoe simulate: out of memory\n"); return -1; }
    }
    if (o->json) {
        printf("{\n  \"trace\": \"%s\", \"n_tokens\": %lld, \"n_layer\": %d, \"n_expert\": %d, \"k\": %d, "
               "\"slots\": %d, \"static\": %d,\n", o->trace ? o->trace : o->generate, (long long)r->n_tokens,
               r->n_layer, r->n_expert, r->k, slots, o->n_static);
        for (int i = 0; i < n; i++) json_result(&res[i], i == n - 1);
        printf("}\n");
    } else {
        printf("\n%d slots + %d static per layer (static-best pins %d by hindsight)\n", slots, o->n_static, slots + o->n_static);
        printf("%-9s %9s %13s %12s %7s\n", "policy", "hit rate", "misses/token", "loads/token", "rounds");
        for (int i = 0; i < n; i++)
            printf("%-9s %9.4f %13.2f %12.2f %7lld\n", policy_name(res[i].kind), sim_hit_rate(&res[i]),
                   sim_misses_per_token(&res[i]), r->n_tokens ? (double)res[i].loads / r->n_tokens : 0.0,
                   (long long)res[i].rounds);
        if (o->per_layer) {
            printf("%5s", "layer");
            for (int i = 0; i < n; i++) printf(" %8s", policy_name(res[i].kind));
            printf("\n");
            for (int l = 0; l < r->n_layer; l++) {
                printf("%5d", l);
                for (int i = 0; i < n; i++)
                    printf(" %8.3f", res[i].layer_sel[l] ? (double)res[i].layer_hits[l] / res[i].layer_sel[l] : 0.0);
                printf("\n");
            }
        }
    }
    for (int i = 0; i < n; i++) sim_result_free(&res[i]);
    return 0;
}

int cmd_simulate(int argc, char **argv) {
    sim_opts o;
    if (parse(&o, argc, argv)) return 2;
    routing r; trace_info info; hm_error e = { "" };
    if (o.generate) {
        if (generate(&o, &r)) return 2;
    } else {
        if (trace_load(o.trace, &r, &info, &e)) { fprintf(stderr, "hotmoe simulate: %s\n", e.msg); return 1; }
        if (o.experts && trace_conform(o.trace, &r, &info, r.n_layer, o.experts, r.k, &e)) {
            fprintf(stderr, "hotmoe simulate: %s\n", e.msg); routing_free(&r); return 1;
        }
        if (!o.json)
            printf("trace %s: %s%s, %lld tokens x %d layers, %d experts top-%d (%lld rows, %lld unrecorded)\n", o.trace,
                   info.format == TRACE_JSONL ? "JSON lines" : "hotmoe binary", info.unclosed ? " (writer never closed)" : "",
                   (long long)r.n_tokens, r.n_layer, r.n_expert, r.k, (long long)info.rows, (long long)info.missing_rows);
    }
    if (o.stats) print_stats(&r, o.json ? stderr : stdout);
    int rc = 0;
    if (o.write) {
        if (trace_save(o.write, &r, &e)) { fprintf(stderr, "hotmoe simulate: %s\n", e.msg); rc = 1; }
        else fprintf(o.json ? stderr : stdout, "wrote %s\n", o.write);
    }
    for (int i = 0; i < o.n_slots && !rc; i++)
        if (simulate(&o, &r, o.slots[i])) rc = 2;
    routing_free(&r);
    return rc;
}
