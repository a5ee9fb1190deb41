/* emu/cuda_warp.h - a warp of 32 lanes on one host thread, enough of CUDA's warp vocabulary to run
 * barrier-free warp code of gpu/'s headers on the CPU (tests/test_router_emu.cc). Each lane runs in
 * its own context (ucontext); a shuffle parks the lane until all 32 have
 * reached one, the values are exchanged, and the lanes go on in order. Every lane must therefore
 * make the same sequence of calls, as on a GPU: a lane that calls another intrinsic than the others,
 * or returns while they wait, stops the test. Warps run one after another: code that synchronizes
 * a block (__syncthreads) cannot run here and aborts. */
#ifndef HM_EMU_CUDA_WARP_H
#define HM_EMU_CUDA_WARP_H
#include "cuda_fp16.h"   /* the shared vocabulary: __device__, EMU_CHECK, uint4, __float_as_uint, ... */
#include <algorithm>
#include <functional>
#include <ucontext.h>
#include <vector>

#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct emu_dim3 { unsigned x, y, z; };
static emu_dim3 threadIdx, blockDim;   /* threadIdx: the running lane's (the scheduler sets it) */

/* the warp: the scheduler's context, each lane's, its parked intrinsic (op, 0: returned) and value */
struct emu_warp {
    ucontext_t sched, lane[32];
    int op[32], base;
    uint64_t in[32], out[32];
    const std::function<void()> *f;
};
static emu_warp *emu_w;
static int emu_lane;

/* this lane's value in, after all 32 have come: out[] holds every lane's value (or the reduction) */
static inline const uint64_t *emu_exchange(int op, uint64_t v) {
    EMU_CHECK(emu_w, "a warp intrinsic outside emu_run_warp");
    const int l = emu_lane;
    emu_w->op[l] = op;
    emu_w->in[l] = v;
    swapcontext(&emu_w->lane[l], &emu_w->sched);   /* back when every lane has parked here */
    return emu_w->out;
}

template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int o) {
    static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
    EMU_CHECK(mask == 0xffffffffu, "partial masks are not emulated");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    const int l = emu_lane;
    const uint64_t *all = emu_exchange(1, u);
    T r;
    memcpy(&r, &all[l ^ (o & 31)], sizeof r);
    return r;
}
static inline void __syncthreads() { EMU_CHECK(0, "__syncthreads: block-wide code cannot run on the warp emulator"); }
static inline int __syncthreads_or(int) { EMU_CHECK(0, "__syncthreads_or: block-wide code cannot run on the warp emulator"); return 0; }
static inline void __syncwarp() {}
using std::max;
using std::min;

static void emu_lane_main(void) {
    emu_w->f[0]();
    emu_w->op[emu_lane] = 0;   /* returned; uc_link goes back to the scheduler */
}

/* runs f on the 32 lanes of warp w (threadIdx.x = 32 w + lane) of a block of nthreads threads */
static inline void emu_run_warp(int w, int nthreads, const std::function<void()> &f) {
    enum { STACK = 256 * 1024 };
    static std::vector<char> stacks((size_t)32 * STACK);
    emu_warp warp;
    emu_w = &warp;
    warp.f = &f;
    warp.base = 32 * w;
    blockDim = { (unsigned)nthreads, 1, 1 };
    for (int l = 0; l < 32; l++) {
        getcontext(&warp.lane[l]);
        warp.lane[l].uc_stack.ss_sp = stacks.data() + (size_t)l * STACK;
        warp.lane[l].uc_stack.ss_size = STACK;
        warp.lane[l].uc_link = &warp.sched;
        makecontext(&warp.lane[l], emu_lane_main, 0);
        warp.op[l] = -1;
    }
    for (;;) {   /* one round: each lane runs to its next intrinsic (or returns) */
        for (int l = 0; l < 32; l++) {
            emu_lane = l;
            threadIdx = { (unsigned)(warp.base + l), 0, 0 };
            swapcontext(&warp.sched, &warp.lane[l]);
        }
        int ret = 0;
        for (int l = 0; l < 32; l++) ret += warp.op[l] == 0;
        if (ret == 32) break;
        EMU_CHECK(ret == 0, "some lanes of a warp returned while others wait in an intrinsic (divergent warp code)");
        for (int l = 1; l < 32; l++)
            EMU_CHECK(warp.op[l] == warp.op[0], "the lanes of a warp called different intrinsics (divergent warp code)");
        for (int l = 0; l < 32; l++) warp.out[l] = warp.in[l];
        for (int l = 0; l < 32; l++) warp.op[l] = -1;
    }
    emu_w = nullptr;
}
#endif
