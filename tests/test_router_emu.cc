/* test_router_emu.cc - the routed launch's rank counts of gpu/router.cuh (router_rank, router_rank_key)
 * run on the CPU through the warp emulator in emu/cuda_warp.h (each lane a thread,
 * the shuffles exchanged between barriers), so that CI without a GPU checks
 * that each gives every rank < k the expert the plain count gives: larger choice first, ties to the
 * lower index; distinct, few-valued (many ties) and all-equal choices, 32 to 256 experts, k 1 to 32,
 * blocks of 1 to 8 warps. Every rank and its score are checked; isel / wsel are poisoned first.
 * tests/test_gpu_gemv.cu runs the same code on a GPU inside the routed launch. */
#include "cuda_warp.h"
#include "router.cuh"

static int g_pass, g_fail;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void) { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return (uint32_t)(g_rng >> 16); }

/* the plain count: isel[r] for every rank r < k */
static void ref_ranks(const float *c, int n, int k, int *isel) {
    for (int i = 0; i < n; i++) {
        int r = 0;
        for (int j = 0; j < n; j++) r += c[j] > c[i] || (c[j] == c[i] && j < i);
        if (r < k) isel[r] = i;
    }
}

static void check(const char *what, int n, int k, int nt, const int *want, const int *isel, const float *wsel, const float *score) {
    int ok = 1, bad = -1;
    for (int r = 0; r < k && ok; r++)
        if (isel[r] != want[r] || wsel[r] != score[want[r]]) { ok = 0; bad = r; }
    if (ok) g_pass++;
    else {
        g_fail++;
        printf("FAIL %s n=%d k=%d threads=%d: rank %d is expert %d (score %g), expected %d (score %g)\n", what, n, k, nt, bad,
               isel[bad], wsel[bad], want[bad], score[want[bad]]);
    }
}

/* the rank counts of P = 1, 2, 4 threads an expert */
static void (*const rank_key_fn[3])(const unsigned *, const float *, int, int, int *, float *) = { router_rank_key<1>, router_rank_key<2>,
                                                                                              router_rank_key<4> };
static void (*const rank_fn[3])(const float *, const float *, int, int, int *, float *) = { router_rank<1>, router_rank<2>, router_rank<4> };
static const char *const rank_key_name[3] = { "router_rank_key<1>", "router_rank_key<2>", "router_rank_key<4>" };
static const char *const rank_name[3] = { "router_rank<1>", "router_rank<2>", "router_rank<4>" };

int main(void) {
    static const int ns[] = { 32, 64, 96, 128, 160, 256 }, ks[] = { 1, 2, 4, 6, 8, 16, 32 };
    int cases = 0;
    for (int t = 0; t < 400; t++) {
        const int n = ns[rnd32() % 6], k = ks[rnd32() % 7], mode = (int)(rnd32() % 4);
        if (k > n) continue;
        std::vector<float> c(n), score(n);
        std::vector<unsigned> key(n);
        for (int i = 0; i < n; i++) {
            /* 0, 1: distinct; 2: a few values (ties everywhere); 3: all equal (+0 and -0 alike) */
            c[i] = mode < 2 ? (float)((int)(rnd32() % 2000000) - 1000000) * 1e-3f : mode == 2 ? (float)(rnd32() % 5) * 0.25f - 0.5f
                                                                                 : (rnd32() & 1 ? 0.0f : -0.0f);
            score[i] = (float)i + 0.5f;
            key[i] = router_key(c[i]);
        }
        std::vector<int> want(k), isel(64);
        std::vector<float> wsel(64);
        ref_ranks(c.data(), n, k, want.data());
        /* f on every warp of a block of nt threads (isel, wsel poisoned first), then every rank checked */
        auto run = [&](const char *what, int nt, const std::function<void()> &f) {
            for (int r = 0; r < 64; r++) { isel[r] = -7; wsel[r] = NAN; }
            for (int w = 0; w < nt / 32; w++) emu_run_warp(w, nt, f);
            check(what, n, k, nt, want.data(), isel.data(), wsel.data(), score.data());
        };
        /* router_rank_key<P> and router_rank<P>, P threads an expert, as router_select calls them */
        for (int pi = 0; pi < 3; pi++) {
            const int P = 1 << pi, nt = (P * n + 31) / 32 * 32;
            if (nt > 1024) continue;
            if (n % (4 * P) == 0)
                run(rank_key_name[pi], nt, [&] { rank_key_fn[pi](key.data(), score.data(), n, k, isel.data(), wsel.data()); });
            run(rank_name[pi], nt, [&] { rank_fn[pi](c.data(), score.data(), n, k, isel.data(), wsel.data()); });
        }
        cases++;
    }
    printf("%s router ranks on the warp emulator: %d cases, %d checks passed, %d failed\n", g_fail ? "FAIL" : "PASS", cases, g_pass, g_fail);
    return g_fail ? 1 : 0;
}
