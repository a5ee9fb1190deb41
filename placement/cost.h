/* cost.h - the cost model's link rates and formulas: how long bytes take over HBM, PCIe and DRAM
 * (CPU GEMV) and FLOPs on either side, and how many distinct experts a batch of tokens touches.
 * Pure arithmetic; the planner (plan.c) sums these per layer. Rates are the measured ceilings of
 * ../shared/design/DEVICE.md (or `hotmoe calibrate`) times an efficiency that says how much of a
 * ceiling the engine's kernels reach. */
#ifndef HM_COST_H
#define HM_COST_H

/* CPU GEMV speed classes of weight types (src/cmd_plan.c maps hm_type onto these). */
typedef enum {
    COST_CLASS_FLOAT,   /* F32, F16, BF16 */
    COST_CLASS_Q8,      /* Q8_0, Q8_1 */
    COST_CLASS_Q4,      /* Q4_0, Q4_1, Q5_0, Q5_1, IQ4_XS, MXFP4: one scale per 32 */
    COST_CLASS_K,       /* Q2_K .. Q6_K: super-blocks of 256 */
    COST_CLASS_COUNT
} cost_class;

/* Where time goes; the largest share of a prediction is its bottleneck. */
typedef enum { COST_HBM, COST_PCIE, COST_CPU, COST_COMPUTE, COST_LINK_COUNT } cost_link;

typedef struct {
    /* measured ceilings, GB/s (1e9 bytes/s) */
    double hbm;                         /* GPU memory copy (read + write bytes / time) */
    double pcie;                        /* host -> GPU, pinned, large chunks */
    double dram;                        /* host DRAM read, all threads */
    double cpu_gemv[COST_CLASS_COUNT];  /* CPU expert GEMV, weight bytes read per second; 0 = dram */
    /* fraction of a ceiling the engine reaches (1 = the ceiling itself) */
    double eff_hbm, eff_pcie, eff_cpu;
    /* compute, for prefill: effective TFLOP/s of quantized GEMM on one GPU, GFLOP/s of the CPU */
    double gpu_tflops, cpu_gflops;
    /* fixed latencies: per layer per decode step on the GPU (kernels of a graph), and per layer
     * whose experts are partly computed by CPU workers (hand-off to the host and back) */
    double gpu_layer_us, cpu_sync_us;
} cost_rates;

/* DEVICE.md's H200 box: HBM 4234, PCIe 55, DRAM 94 GB/s (all CPU classes at DRAM speed);
 * efficiencies 0.70 / 0.90 / 0.85; 100 TFLOP/s GPU, 1000 GFLOP/s CPU; 6 us per GPU layer, 10 us
 * per CPU hand-off. The efficiencies and latencies are estimates to be replaced by measurement. */
cost_rates cost_rates_defaults(void);
const char *cost_class_name(cost_class c);     /* "float", "q8", "q4", "k" */
int cost_class_parse(const char *name);        /* -1 when unknown */
const char *cost_link_name(cost_link l);       /* "HBM", "PCIe", "DRAM/CPU", "compute" */

/* Achieved bytes per second of each path (ceiling x efficiency, in bytes/s). */
double cost_hbm_bps(const cost_rates *r);
double cost_pcie_bps(const cost_rates *r);
double cost_cpu_bps(const cost_rates *r, int cls);   /* cpu_gemv[cls], or dram when 0 */

/* Probability that a batch of n tokens selects an expert chosen with probability q by one token
 * (tokens independent): 1 - (1 - q)^n; q is clamped to [0, 1]. */
double cost_touch(double q, int n);

/* Index of the largest of t[COST_LINK_COUNT]. */
cost_link cost_argmax(const double *t);

#endif
