/* host_par.h - a host loop over [0, n) cut into nt contiguous ranges run on nt host threads (the
 * caller's thread takes the first; a range whose thread cannot be made runs on the caller too).
 * For the uploads' packing and the prefill's embedding rows; nt from hm_host_threads() or 1. */
#ifndef HM_HOST_PAR_H
#define HM_HOST_PAR_H
#include <stdint.h>
#include <thread>
#include <vector>

/* host threads for such loops: the hardware's, at most 16 */
static inline unsigned hm_host_threads(void) {
    const unsigned nt = std::thread::hardware_concurrency();
    return nt < 1 ? 1 : nt > 16 ? 16 : nt;
}

/* fn(w, i0, i1) for the ranges [n w / nt, n (w + 1) / nt), w < nt: w names the range's thread */
template <class F>
static void hm_host_parallel_w(int n, unsigned nt, F fn) {
    if (nt < 1) nt = 1;
    auto part = [&](unsigned w) { fn(w, (int)((int64_t)n * w / nt), (int)((int64_t)n * (w + 1) / nt)); };
    std::vector<std::thread> th;
    for (unsigned w = 1; w < nt; w++) {
        try { th.emplace_back(part, w); } catch (...) { part(w); }
    }
    part(0);
    for (auto &t : th) t.join();
}

/* fn(i0, i1) for the same ranges */
template <class F>
static void hm_host_parallel(int n, unsigned nt, F fn) {
    hm_host_parallel_w(n, nt, [&](unsigned, int i0, int i1) { fn(i0, i1); });
}
#endif
