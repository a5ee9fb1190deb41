/* cost.c - link rates and the small formulas of the cost model (see cost.h). */
#include "cost.h"
#include <math.h>
#include <string.h>

cost_rates cost_rates_defaults(void) {
    cost_rates r;
    memset(&r, 0, sizeof r);
    r.hbm = 4234; r.pcie = 55; r.dram = 94;
    r.eff_hbm = 0.70; r.eff_pcie = 0.90; r.eff_cpu = 0.85;
    r.gpu_tflops = 100; r.cpu_gflops = 1000;
    r.gpu_layer_us = 6; r.cpu_sync_us = 10;
    return r;
}

static const char *const class_names[COST_CLASS_COUNT] = { "float", "q8", "q4", "k" };
static const char *const link_names[COST_LINK_COUNT] = { "HBM", "PCIe", "DRAM/CPU", "compute" };

const char *cost_class_name(cost_class c) { return c >= 0 && c < COST_CLASS_COUNT ? class_names[c] : "?"; }
const char *cost_link_name(cost_link l) { return l >= 0 && l < COST_LINK_COUNT ? link_names[l] : "?"; }

int cost_class_parse(const char *name) {
    for (int i = 0; i < COST_CLASS_COUNT; i++)
        if (name && !strcmp(name, class_names[i])) return i;
    return -1;
}

double cost_hbm_bps(const cost_rates *r) { return r->hbm * r->eff_hbm * 1e9; }
double cost_pcie_bps(const cost_rates *r) { return r->pcie * r->eff_pcie * 1e9; }

double cost_cpu_bps(const cost_rates *r, int cls) {
    double g = cls >= 0 && cls < COST_CLASS_COUNT && r->cpu_gemv[cls] > 0 ? r->cpu_gemv[cls] : r->dram;
    return g * r->eff_cpu * 1e9;
}

double cost_touch(double q, int n) {
    if (q <= 0 || n <= 0) return 0;
    if (q >= 1) return 1;
    if (n == 1) return q;
    return -expm1((double)n * log1p(-q));
}

cost_link cost_argmax(const double *t) {
    int best = 0;
    for (int i = 1; i < COST_LINK_COUNT; i++)
        if (t[i] > t[best]) best = i;
    return (cost_link)best;
}
