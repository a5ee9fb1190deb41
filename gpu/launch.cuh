/* launch.cuh - kernel launches with Programmatic Dependent Launch (sm_90): a kernel launched by
 * hm_launch may be scheduled while the kernel before it in the stream is still draining, runs
 * what does not depend on it (e.g. prefetching weights), and calls hm_pdl_wait() before it reads
 * anything an earlier kernel wrote, or writes anything one may still read. Every kernel launched
 * through hm_launch must call hm_pdl_wait() first thing (or after such independent work).
 * HOTMOE_PDL=0 launches plainly (full serialization), for comparison. Kernels trigger their
 * dependents where hm_pdl_trigger_mode says (the q8 GEMVs at their blocks' last round, the small
 * kernels right after their wait; every kernel right after its wait measured slower in session 8,
 * `air` 154.5 against 159.2 tok/s, bench/README.md). CUDA sources only. */
#ifndef HM_LAUNCH_CUH
#define HM_LAUNCH_CUH
#include <atomic>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#ifdef HM_KTRACE
/* A timeline of the kernels of one decode step, from inside the graph (this device has no Nsight
 * Systems), in builds configured with -DHOTMOE_KTRACE=ON only: every kernel passes hm_pdl_wait,
 * where block thread 0 stamps %globaltimer before and after the wait into its launch's slot (found
 * by %gridid). Per launch: the first block's arrival (blocks are placed), the first and the last
 * block's return from the wait (the kernel before has finished; its end is the next kernel's
 * first return on the same stream), blocks, grid and block size. Each CUDA source has its own
 * table (static device memory); each registers a reader (hm_kt_readers) that exec.cu uses to
 * clear them before a traced step and collect them after (HOTMOE_KTRACE=STEP). Times are stored
 * as ~t where the earliest is wanted, so that zeroed slots work with atomicMax. */
#include <vector>
struct hm_kstamp {
    unsigned long long grid, first_arrive_n, first_ret_n, last_ret; /* _n: ~time */
    unsigned nblk, gsz, bsz, nend;
    unsigned long long first_end_n, last_end;   /* the first and the last block at HM_KT_END (kernels that call it) */
};
#define HM_KT_N 2048
static __device__ hm_kstamp hm_kt[HM_KT_N];
__device__ __forceinline__ unsigned long long hm_gtime(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
/* this launch's slot (%gridid hashed, claimed by its first caller) */
__device__ __forceinline__ hm_kstamp *hm_kt_slot(void) {
    unsigned long long g;
    asm("mov.u64 %0, %%gridid;" : "=l"(g));
    g += 1;   /* 0 marks a free slot */
    unsigned i = (unsigned)((g * 0x9E3779B97F4A7C15ull) >> 53) & (HM_KT_N - 1);
    for (int probe = 0; probe < HM_KT_N; probe++, i = (i + 1) & (HM_KT_N - 1)) {
        const unsigned long long old = atomicCAS(&hm_kt[i].grid, 0ull, g);
        if (old == 0 || old == g) break;
    }
    return &hm_kt[i];
}
__device__ __forceinline__ void hm_kt_stamp(unsigned long long t0, unsigned long long t1) {
    if (threadIdx.x | threadIdx.y | threadIdx.z) return;
    hm_kstamp *k = hm_kt_slot();
    atomicMax(&k->first_arrive_n, ~t0);
    atomicMax(&k->first_ret_n, ~t1);
    atomicMax(&k->last_ret, t1);
    if (atomicAdd(&k->nblk, 1u) == 0) {
        k->gsz = gridDim.x * gridDim.y * gridDim.z;
        k->bsz = blockDim.x * blockDim.y * blockDim.z;
    }
}
/* a block's end, where a kernel marks it (HM_KT_END, after its last store): thread 0's time there, no
 * barrier (threads that returned earlier cannot hang it); blocks that return before it are not
 * counted (nend) */
__device__ __forceinline__ void hm_kt_end(void) {
    if (threadIdx.x | threadIdx.y | threadIdx.z) return;
    const unsigned long long t = hm_gtime();
    hm_kstamp *k = hm_kt_slot();
    atomicMax(&k->first_end_n, ~t);
    atomicMax(&k->last_end, t);
    atomicAdd(&k->nend, 1u);
}
#define HM_KT_END() hm_kt_end()
typedef int (*hm_kt_reader)(hm_kstamp *out, int max);   /* copies this source's table out and clears it; returns entries */
inline std::vector<hm_kt_reader> &hm_kt_readers(void) {
    static std::vector<hm_kt_reader> v;
    return v;
}
static int hm_kt_read(hm_kstamp *out, int max) {
    static hm_kstamp buf[HM_KT_N];
    if (cudaMemcpyFromSymbol(buf, hm_kt, sizeof buf) != cudaSuccess) return 0;
    int n = 0;
    for (int i = 0; i < HM_KT_N && n < max; i++)
        if (buf[i].grid) out[n++] = buf[i];
    memset(buf, 0, sizeof buf);
    cudaMemcpyToSymbol(hm_kt, buf, sizeof buf);
    return n;
}
static struct hm_kt_reg { hm_kt_reg() { hm_kt_readers().push_back(hm_kt_read); } } hm_kt_reg_here;
#else
#define HM_KT_END() ((void)0)   /* only KTRACE builds stamp a block's end */
#endif

__device__ __forceinline__ void hm_pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#ifdef HM_KTRACE
    const unsigned long long t0 = hm_gtime();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    hm_kt_stamp(t0, hm_gtime());
#else
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#endif
}

/* Lets the next kernel in the stream be scheduled (its blocks fill the SMs this grid's blocks leave,
 * and run what precedes their hm_pdl_wait) once every block of this grid has called it or exited;
 * the first call of a block counts. Memory written here is visible to the next kernel only after
 * its hm_pdl_wait, which waits for this whole grid. */
__device__ __forceinline__ void hm_pdl_trigger(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The digit lo..hi that environment variable name starts with, else def; read once per cache (a
 * static of the caller's). */
static inline int hm_env_digit(const char *name, int lo, int hi, int def, std::atomic<int> &cache) {
    int v = cache.load(std::memory_order_relaxed);
    if (v < 0) {
        const char *env = getenv(name);
        v = env && env[0] >= '0' + lo && env[0] <= '0' + hi ? env[0] - '0' : def;
        cache.store(v, std::memory_order_relaxed);
    }
    return v;
}

/* hm_env_digit for a whole decimal number lo..hi (all of the value, else def) */
static inline int hm_env_int(const char *name, int lo, int hi, int def, std::atomic<int> &cache) {
    int v = cache.load(std::memory_order_relaxed);
    if (v < 0) {
        const char *env = getenv(name);
        char *end = NULL;
        const long n = env ? strtol(env, &end, 10) : -1;
        v = env && end != env && *end == 0 && n >= lo && n <= hi ? (int)n : def;
        cache.store(v, std::memory_order_relaxed);
    }
    return v;
}

/* HOTMOE_PDL_TRIGGER: where the decode kernels let the next kernel launch. 0: as their blocks
 * exit; 1: the q8 GEMVs when a block starts its last round of rows (its last copies issued); 2:
 * the same, but not in a block's first round (launches of one round trigger as their blocks
 * exit); 3 (default): as 1, and the small kernels right after their wait (hm_small_pdl). The
 * next kernel's blocks then take the SMs this one leaves and run what precedes their wait
 * (weights asked for, KV rows read) while it finishes. H200 (bench/README.md, ninth pass), air
 * resident tok/s: 0 182.9, 1 186.8, 3 190.2; a3b: 0 313.3, 3 334.2. */
static inline int hm_pdl_trigger_mode(void) {
    static std::atomic<int> on(-1);
    return hm_env_digit("HOTMOE_PDL_TRIGGER", 0, 3, 3, on);
}

/* The small decode kernels' flags (an int argument, hm_small_pdl()): HM_PDL_PRE, they read what
 * does not depend on the kernel before (weights, the step's position, earlier KV rows) before
 * their wait (default; HOTMOE_PREWAIT=0 waits first); HM_PDL_TRIG, they trigger their dependents
 * right after it (HOTMOE_PDL_TRIGGER=3). Such a kernel calls hm_pdl_pre(f), its independent
 * reads, then hm_pdl_wait_f(f). */
#define HM_PDL_PRE 1
#define HM_PDL_TRIG 2
__device__ __forceinline__ void hm_pdl_pre(int f) {
    if (!(f & HM_PDL_PRE)) hm_pdl_wait();
}
__device__ __forceinline__ void hm_pdl_wait_f(int f) {
    hm_pdl_wait();   /* a second wait returns at once */
    if (f & HM_PDL_TRIG) hm_pdl_trigger();
}
static inline int hm_small_pdl(void) {
    static std::atomic<int> pre(-1);
    return (hm_env_digit("HOTMOE_PREWAIT", 0, 0, 1, pre) ? HM_PDL_PRE : 0) | (hm_pdl_trigger_mode() >= 3 ? HM_PDL_TRIG : 0);
}

static inline int hm_pdl_enabled(void) {
    static std::atomic<int> on(-1);
    return hm_env_digit("HOTMOE_PDL", 0, 0, 1, on);
}

/* The share of each SM's unified L1/shared memory that kernels launched here prefer as shared
 * memory, set per kernel and device at its launches: the same for every kernel, so that kernels with
 * different shared memory needs stop asking an SM to change its carveout, which it can only do once
 * the blocks on it have drained; a dependent launch's early start (PDL) cannot land on such an SM.
 * 50 by default (hm_carveout_def); an executor with cold experts (--cold stream|cpu) sets -1, the
 * driver's choice per kernel (a kernel that needs more shared memory gets more: the value is a
 * preference). H200 (bench/README.md, twenty-third and twenty-fourth passes), tok/s in one call:
 * 100 vs the driver's choice, resident air 280.6 vs 276.7, a3b 509.9 vs 499.2; a3b at 8 GiB
 * --cold stream 103.8 vs 108.2, --cold cpu 157.1 vs 164.8. 50 vs 100 in four calls: air 282.9 vs
 * 279.0, 285.2 vs 282.2, 284.9 vs 281.3, 284.3 vs 282.1 (+1.1%); a3b 506.3 vs 508.5, 511.9 vs
 * 514.9, 511.4 vs 511.1, 512.3 vs 513.9 (-0.3%); 75: air +1%, a3b -0.7%. Prefill 8K at 50 vs 100
 * (session 27): a3b 17,140 vs 17,156, air 5,787 vs 5,791.
 * HOTMOE_CARVEOUT=N (0-100) sets N for every executor, HOTMOE_CARVEOUT=off the driver's choice. */
inline std::atomic<int> hm_carveout_def{50};
static inline int hm_carveout(void) {
    static std::atomic<int> v(-3);   /* -3: not read yet; -2: unset */
    int c = v.load(std::memory_order_relaxed);
    if (c == -3) {
        const char *e = getenv("HOTMOE_CARVEOUT");
        c = !e || !e[0] ? -2 : e[0] >= '0' && e[0] <= '9' ? atoi(e) : -1;
        if (c > 100) c = 100;
        v.store(c, std::memory_order_relaxed);
    }
    return c == -2 ? hm_carveout_def.load(std::memory_order_relaxed) : c;
}
/* each kernel's preference as set (per translation unit: a kernel is launched from its own), -1
 * the driver's default; set again when hm_carveout() has changed since */
static inline void hm_carveout_set(const void *kernel) {
    enum { NDEV = 8, NK = 1024 };
    static std::atomic<const void *> done[NDEV][NK];
    static std::atomic<int> val[NDEV][NK];
    static std::atomic<int> n[NDEV];
    const int c = hm_carveout();
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= NDEV) { cudaGetLastError(); return; }
    const int m = n[dev].load(std::memory_order_acquire);
    int i = 0;
    while (i < m && i < NK && done[dev][i].load(std::memory_order_relaxed) != kernel) i++;
    if (i < m && i < NK) {
        if (val[dev][i].load(std::memory_order_relaxed) == c) return;
    } else {
        if (c < 0) return;   /* never set: the driver's choice already */
        i = n[dev].fetch_add(1, std::memory_order_acq_rel);   /* a kernel entered twice by racing threads does no harm */
    }
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, c < 0 ? -1 : c) != cudaSuccess) cudaGetLastError();
    if (i < NK) {
        val[dev][i].store(c, std::memory_order_relaxed);
        done[dev][i].store(kernel, std::memory_order_release);
    }
}

/* kernel<<<grid, block, smem, s>>>(args...), with the programmatic-serialization attribute when
 * pdl is set (bench/launch.cu compares both in one process), in clusters of cx blocks along x when
 * cx > 1 (grid.x a multiple of cx; sm_90) */
template <typename... KArgs, typename... Args>
static inline cudaError_t hm_launch_ex(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, int pdl,
                                       unsigned cx, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[2];
    int na = 0;
    if (pdl) {
        at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[na++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cx > 1) {
        at[na].id = cudaLaunchAttributeClusterDimension;
        at[na].val.clusterDim.x = cx; at[na].val.clusterDim.y = 1; at[na++].val.clusterDim.z = 1;
    }
    cfg.attrs = at;
    cfg.numAttrs = na;
    hm_carveout_set((const void *)kernel);
    return cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
}
template <typename... KArgs, typename... Args>
static inline cudaError_t hm_launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, int pdl,
                                        Args... args) {
    return hm_launch_ex(kernel, grid, block, smem, s, pdl, 1, args...);
}

/* whether the current device (0..63) launches thread block clusters (sm_90 on) */
static inline bool hm_cluster_ok(void) {
    static std::atomic<int> cache[64];   /* 0 unknown, 1 no, 2 yes */
    int dev = 0, a = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev > 63) return false;
    int v = cache[dev].load(std::memory_order_relaxed);
    if (!v) {
        v = cudaDeviceGetAttribute(&a, cudaDevAttrClusterLaunch, dev) == cudaSuccess && a ? 2 : 1;
        cache[dev].store(v, std::memory_order_relaxed);
    }
    return v == 2;
}

/* kernel<<<grid, block, smem, s>>>(args...) with PDL unless HOTMOE_PDL=0 */
template <typename... KArgs, typename... Args>
static inline cudaError_t hm_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                    Args... args) {
    return hm_launch_pdl(kernel, grid, block, smem, s, hm_pdl_enabled(), args...);
}

/* Device dev's (0..63) opt-in limit of dynamic shared memory per block (48 KB if unknown). */
static inline int hm_smem_optin(int dev) {
    static std::atomic<int> cache[64];
    int n = cache[dev].load(std::memory_order_relaxed);
    if (n <= 0) {
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || n <= 0) n = 48 * 1024;
        cache[dev].store(n, std::memory_order_relaxed);
    }
    return n;
}

/* Lets kernel take smem bytes of dynamic shared memory beside stat bytes of static: past the 48 KB
 * default the limit is raised to the device's opt-in once per kernel and device (raised: one bit
 * per device, a static of the caller's for each kernel). Past 48 KB the kernel's own static size
 * counts when it is larger than stat (a caller that passes 0 for a kernel with static shared
 * memory would otherwise ask for more than the device allows, and the raise would fail). 0, or 1
 * when it does not fit (the caller takes another path or reports the launch). */
template <typename K>
static inline int hm_allow_smem(K kernel, size_t smem, size_t stat, std::atomic<unsigned long long> &raised) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev > 63) return 1;
    const int optin = hm_smem_optin(dev);
    if (smem > 48 * 1024) {
        cudaFuncAttributes fa;
        if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) cudaGetLastError();
        else if (fa.sharedSizeBytes > stat) stat = fa.sharedSizeBytes;
    }
    if (smem + stat > (size_t)optin) return 1;
    if (smem > 48 * 1024 && !(raised.load(std::memory_order_relaxed) >> dev & 1)) {
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - (int)stat) != cudaSuccess) {
            cudaGetLastError();
            return 1;
        }
        raised.fetch_or(1ull << dev, std::memory_order_relaxed);
    }
    return 0;
}

#endif
