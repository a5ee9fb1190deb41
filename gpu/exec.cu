/* exec.cu - the GPU executor: uploads the canonical model, builds per-layer expert pointer
 * tables on the device, and runs one decode step as one CUDA graph (the position and the token's
 * embedding are read from pinned host buffers by the graph's own copy nodes). */
#include "exec_impl.cuh"
#include "gpu_gemv.h"
#include "ops.cuh"
#include "prefill_size.h"
#include "launch.cuh"
#include "host_par.h"
extern "C" {
#include "quant.h"
}
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
extern "C" {
#include "workers.h"
}

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fail(err, errlen, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); goto bad; } } while (0)

static int fail(char *err, size_t n, const char *fmt, ...) {
    if (err && n) { va_list ap; va_start(ap, fmt); vsnprintf(err, n, fmt, ap); va_end(ap); }
    return -1;
}

static void *dalloc(gpu_exec *g, size_t n, char *err, size_t errlen) {
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0; cudaMemGetInfo(&fr, &tot);
        fail(err, errlen, "cuda: out of device memory allocating %.1f MiB (%.1f MiB free of %.1f MiB; model needs %.1f MiB)",
             n / 1048576.0, fr / 1048576.0, tot / 1048576.0, gpu_exec_vram_needed(g->m, g->n_ctx) / 1048576.0);
        return NULL;
    }
    if (g->n_allocs == g->cap_allocs) { g->cap_allocs = g->cap_allocs ? 2 * g->cap_allocs : 256; g->allocs = (void **)realloc(g->allocs, g->cap_allocs * sizeof(void *)); }
    g->allocs[g->n_allocs++] = p;
    g->vram += n;
    g->vram_by[g->cat] += n;
    return p;
}

/* n host bytes into device memory at dst: 0, or -1 with err set */
static int put(void *dst, const void *src, size_t n, char *err, size_t errlen) {
    if (cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice) == cudaSuccess) return 0;
    cudaGetLastError();
    return fail(err, errlen, "cuda: upload failed");
}

/* HOTMOE_UPLOAD_THREADS (unset: the host's CPUs, at most 16; 0 or 1: one matrix at a time, each
 * packed on up to 16 threads and copied from pageable memory; the forty-first pass: air's load 22.8 s
 * on one, 6.7 s on 16; a3b's 11.1 and 2.1 s, the same tokens): N host threads upload the model
 * through staged_put. A layer's experts go an expert a chunk: its gate | up | down packed into a
 * pinned buffer laid out as its VRAM (expert_image), a range of experts a thread. Every other matrix
 * of at least 4 MiB goes in 16 MiB chunks, packed by row groups or copied. Each chunk goes up with
 * one cudaMemcpyAsync on its thread's stream, two buffers a thread, so the next chunk is packed while
 * the last crosses PCIe. The same bytes in VRAM either way. With an expert cache (--cold
 * stream|cpu) the cold experts' pinned host records are copied on as many threads (cache_setup).
 * gpu_exec_upload_threads_set: for tests. */
#define UP_MAX 64
/* staged_put's chunk (the pool's least buffer) and the least matrix it takes: 16 and 4 MiB
 * (gpu_exec_upload_test_sizes: smaller, for the tests' small models) */
static size_t up_chunk = (size_t)16 << 20, up_staged_min = (size_t)4 << 20;
extern "C" void gpu_exec_upload_test_sizes(size_t chunk, size_t min_bytes) {
    up_chunk = chunk ? chunk : (size_t)16 << 20;
    up_staged_min = chunk ? min_bytes : (size_t)4 << 20;
}
static std::atomic<int> up_threads_env{ -1 }, up_threads_over{ -1 };
static int upload_threads(void) {
    const int o = up_threads_over.load(std::memory_order_relaxed);
    if (o >= 0) return o;
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return hm_env_int("HOTMOE_UPLOAD_THREADS", 0, UP_MAX, cpus < 1 ? 1 : cpus > 16 ? 16 : (int)cpus, up_threads_env);
}
extern "C" void gpu_exec_upload_threads_set(int n) { up_threads_over.store(n < 0 ? -1 : n > UP_MAX ? UP_MAX : n); }

struct up_worker { uint8_t *buf[2]; cudaStream_t s; cudaEvent_t ev[2]; };
struct up_pool { int n; size_t bytes; up_worker w[UP_MAX]; };

static void up_pool_free(gpu_exec *g) {
    up_pool *p = g->up;
    if (!p) return;
    for (int i = 0; i < p->n; i++) {
        up_worker *w = &p->w[i];
        if (w->s) { cudaStreamSynchronize(w->s); cudaStreamDestroy(w->s); }
        for (int k = 0; k < 2; k++) {
            if (w->ev[k]) cudaEventDestroy(w->ev[k]);
            if (w->buf[k]) cudaFreeHost(w->buf[k]);
        }
    }
    cudaGetLastError();
    free(p);
    g->up = NULL;
}

/* g->up with nt workers of bytes a buffer (made, or remade when smaller): 0, or -1 with err set */
static int up_pool_get(gpu_exec *g, int nt, size_t bytes, char *err, size_t errlen) {
    if (bytes < up_chunk) bytes = up_chunk;   /* one pool for the experts' images and the chunks */
    if (g->up && g->up->n >= nt && g->up->bytes >= bytes) return 0;
    up_pool_free(g);
    up_pool *p = (up_pool *)calloc(1, sizeof(up_pool));
    if (!p) return fail(err, errlen, "out of host memory for the upload's staging");
    g->up = p;
    p->bytes = bytes;
    for (; p->n < nt; p->n++) {
        up_worker *w = &p->w[p->n];
        if (cudaStreamCreateWithFlags(&w->s, cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreateWithFlags(&w->ev[0], cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&w->ev[1], cudaEventDisableTiming) != cudaSuccess ||
            cudaMallocHost((void **)&w->buf[0], bytes) != cudaSuccess || cudaMallocHost((void **)&w->buf[1], bytes) != cudaSuccess) {
            cudaGetLastError();
            p->n++;   /* what was made of this one is freed too */
            up_pool_free(g);
            return fail(err, errlen, "cuda: %d pinned staging buffers of %.1f MiB for the upload not allocated "
                        "(HOTMOE_UPLOAD_THREADS=%d; fewer threads, or 0, need less)", 2 * nt, bytes / 1048576.0, nt);
        }
    }
    return 0;
}

/* n bytes into dst through the pool's pinned buffers on nt threads, a contiguous range of chunks a
 * thread: chunk c of ceil(n / chunk) is filled by fill(c, buf) (its bytes returned, 0: it failed)
 * and copied to dst + c * chunk on its thread's stream, two buffers a thread; 0, or -1 with err
 * naming the first chunk that failed (what: its noun) */
template <class F>
static int staged_put(gpu_exec *g, uint8_t *dst, size_t n, size_t chunk, int nt, F fill, const char *what, char *err,
                      size_t errlen) {
    if (!n) return 0;
    const int nc = (int)((n + chunk - 1) / chunk);
    if (nt > nc) nt = nc;
    if (up_pool_get(g, nt, chunk, err, errlen)) return -1;
    std::atomic<int> bad{ -1 }, packing{ 0 };   /* the first chunk that failed; whether its fill did */
    auto failed = [&](int c, bool in_fill) { int x = -1; if (bad.compare_exchange_strong(x, c)) packing.store(in_fill); };
    const int dev = g->dev;
    up_pool *p = g->up;
    hm_host_parallel_w(nc, (unsigned)nt, [&](unsigned wi, int c0, int c1) {
        up_worker *u = &p->w[wi];
        if (cudaSetDevice(dev) != cudaSuccess) { failed(c0, false); return; }
        for (int c = c0; c < c1 && bad.load(std::memory_order_relaxed) < 0; c++) {
            const int k = (c - c0) & 1;
            if (c - c0 >= 2 && cudaEventSynchronize(u->ev[k]) != cudaSuccess) { failed(c, false); break; }
            const size_t len = fill(c, u->buf[k]);
            if (!len) { failed(c, true); break; }
            if (cudaMemcpyAsync(dst + (size_t)c * chunk, u->buf[k], len, cudaMemcpyHostToDevice, u->s) != cudaSuccess ||
                cudaEventRecord(u->ev[k], u->s) != cudaSuccess) { failed(c, false); break; }
        }
        if (cudaStreamSynchronize(u->s) != cudaSuccess) failed(c0, false);
    });
    if (bad.load() < 0) return 0;
    cudaGetLastError();
    return fail(err, errlen, packing.load() ? "gpu: packing %s %d failed" : "cuda: upload of %s %d failed", what, bad.load());
}

/* host bytes in up to three arrays, one after another: a matrix's GGUF rows (q|k|v from its three
 * matrices, without a copy into one buffer first); p[i] holds bytes[i] bytes, rows[i] rows */
struct hrows { int n; const void *p[3]; int rows[3]; size_t bytes[3]; };
static hrows hrows_of(const void *p, int64_t rows, size_t bytes) {
    hrows h = {};
    h.n = 1; h.p[0] = p; h.rows[0] = (int)rows; h.bytes[0] = bytes;
    return h;
}
static void hrows_add(hrows *h, const void *p, int64_t rows, size_t bytes) {
    h->p[h->n] = p; h->rows[h->n] = (int)rows; h->bytes[h->n++] = bytes;
}
static size_t hrows_bytes(const hrows &h) { size_t n = 0; for (int i = 0; i < h.n; i++) n += h.bytes[i]; return n; }
static int64_t hrows_rows(const hrows &h) { int64_t n = 0; for (int i = 0; i < h.n; i++) n += h.rows[i]; return n; }
/* bytes [o, o + len) of h into b */
static void hrows_copy(const hrows &h, size_t o, size_t len, uint8_t *b) {
    for (int i = 0; i < h.n && len; i++) {
        if (o >= h.bytes[i]) { o -= h.bytes[i]; continue; }
        const size_t k = h.bytes[i] - o < len ? h.bytes[i] - o : len;
        memcpy(b, (const uint8_t *)h.p[i] + o, k);
        b += k; len -= k; o = 0;
    }
}

/* h's bytes into a new allocation (large ones staged on upload_threads() threads) */
static const void *upload_h(gpu_exec *g, const hrows &h, char *err, size_t errlen) {
    const size_t n = hrows_bytes(h);
    uint8_t *d = (uint8_t *)dalloc(g, n, err, errlen);
    if (!d) return NULL;
    const int nt = upload_threads();
    if (nt > 1 && n >= up_staged_min) {
        auto fill = [&](int c, uint8_t *buf) {
            const size_t o = (size_t)c * up_chunk, len = n - o < up_chunk ? n - o : up_chunk;
            hrows_copy(h, o, len, buf);
            return len;
        };
        return staged_put(g, d, n, up_chunk, nt, fill, "chunk", err, errlen) ? NULL : d;
    }
    size_t o = 0;
    for (int i = 0; i < h.n; o += h.bytes[i++])
        if (put(d + o, h.p[i], h.bytes[i], err, errlen)) return NULL;
    return d;
}
/* n host bytes into a new allocation */
static const void *upload(gpu_exec *g, const void *src, size_t n, char *err, size_t errlen) {
    return upload_h(g, hrows_of(src, 0, n), err, errlen);
}

/* 1-D tensors go up as F32 whatever their file type. */
static float *upload_vec(gpu_exec *g, const hm_tensor *t, char *err, size_t errlen) {
    if (!t->data) return NULL;
    int64_t n = t->ne[0];
    float *tmp = (float *)malloc(sizeof(float) * n);
    hm_type_get(t->type)->to_float(t->data, tmp, n);
    float *d = (float *)upload(g, tmp, sizeof(float) * n, err, errlen);
    free(tmp);
    return d;
}

static int upload_mat(gpu_exec *g, dmat *d, const hm_tensor *t, char *err, size_t errlen) {
    d->type = t->type; d->ne0 = t->ne[0]; d->ne1 = t->ne[1]; d->inter = 0;
    d->d = upload(g, t->data, t->nbytes, err, errlen);
    return d->d ? 0 : -1;
}

/* Resident expert matrices (routed, shared, dense FFN) are uploaded in the q8 register kernel's
 * interleaved layout (gpu_q8_inter_pack: each load of a warp reads whole lines); the batched prefill
 * dequantizes them with pf_deq_tab_inter. Not when the executor is made in GEMV mode 0 (the F32
 * path, --kernels ref, reads GGUF rows only). So are the attention projections and the head
 * (upload_rows). HOTMOE_INTER=0: GGUF rows everywhere; 1: the experts only. */
int gemv_q8_mode(void);   /* gemv_q8.cu: 1 when the q8 path (the only one that reads the interleaved layout) is on */
static int inter_on(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("HOTMOE_INTER"); v = e && (e[0] == '0' || e[0] == '1') ? e[0] - '0' : 2; }
    return v;
}

/* the router's top-k inside the routed experts' gate/up launch (gpu_gemv_experts_swiglu_routed)
 * instead of its own kernel (op_router) before it: on by default (air 265.8 against 259.8 tok/s,
 * bench/README seventeenth pass); HOTMOE_TOPK_FUSE=0: op_router's own kernel */
static int route_fuse_on(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("HOTMOE_TOPK_FUSE"); v = !(e && e[0] == '0'); }
    return v;
}

/* HOTMOE_ROUTER_EARLY: the router GEMV of a layer whose routed gate/up launch runs the top-k lets
 * that launch start right after its PDL wait, and the launch copies x's records before its own
 * wait (they come from the norm before the router). 1 (default): in layers without a shared
 * expert (a3b 493.4 tok/s against 485.9 with 0, session 21); 2: in every such layer (air 249.9
 * against 268.3: with a shared expert the early blocks likely hold the SM slots the shared
 * expert's launches on the second stream need; session 22: with the routed grid at two blocks a
 * SM to leave them slots, 232.3 against 269.4; session 40, after the fused router-norm launch: 311.4
 * against 321.2, 324.1); 0: never. */
static int router_early(const dlayer *l) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("HOTMOE_ROUTER_EARLY"); v = e && e[0] >= '0' && e[0] <= '2' ? e[0] - '0' : 1; }
    return v == 2 || (v == 1 && !l->has_single);
}

/* HOTMOE_ROUTER_NORM: 1 (the default; 0 turns it off), in MoE layers with an F32 router the
 * residual norm after the o-projection and the router GEMV in one launch (op_router_norm_q8: every
 * block norms x itself), one launch and its boundary fewer on the routing chain; x's update is added
 * by the layer's last residual norm (op_residual_norm_q8_ex). With a shared expert the norm also runs
 * on the second stream (its own copy, xn2), so that the shared expert starts as early as before;
 * forking it after the fused launch instead lost 2.0% on air. Bitwise the same outputs (the hashes
 * stay). nvidia-h200, session 39 (bench/README.md, thirty-seventh pass): a3b 528.3, 530.2, 526.6
 * tok/s against 518.4, 519.1, 517.5 in the same calls (+1.8-2.1%); air 323.1, 323.8 against 322.0,
 * 320.8 (+0.6%). */
static int router_norm_on(void) {
    static std::atomic<int> c(-1);
    return hm_env_digit("HOTMOE_ROUTER_NORM", 0, 1, 1, c);
}

/* HOTMOE_ROUTER_NORM_ROWS: the fused launch's router rows a block, 1, 2 or 4 (the default), so that
 * a quarter of the blocks read x and the o-projection's output and make the norm (air: 32 blocks
 * instead of 128); the logits are the same. nvidia-h200, session 40 (bench/README.md, thirty-eighth
 * pass), one call: air 325.8, 326.6 tok/s (2: 326.5, 326.1) against 321.2, 324.1 with 1; a3b 529.3
 * against 528.9. Hashes unchanged. */
static int router_norm_rows(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("HOTMOE_ROUTER_NORM_ROWS"); v = e && (e[0] == '1' || e[0] == '2') ? e[0] - '0' : 4; }
    return v;
}

/* HOTMOE_OWARM: 1 (the default; 0 turns it off), while the attention and its merge run (HBM idle
 * but for ~3 MB of KV), the first step of every row group of the o-projection's interleaved matrix
 * (each warp's first loads of it, a third of air's 28 MB) is read into L2 by op_l2_warm on the second
 * stream, forked after q|k|v in layers whose shared expert joins that stream back. nvidia-h200, air
 * resident, session 37 (bench/README.md, thirty-fifth pass): 322.9, 321.1, 323.1, 323.3 tok/s against
 * 319.3, 317.8, 319.3, 319.7 in the same calls; the whole matrix lost 1.7% (its traffic slowed the
 * attention and the merge more than the o-projection gained), its first 25-40% +0.3-1.2%, the fork
 * with an empty launch +0.5%, the same warm forked between the attention and the merge -2.6%.
 * Session 38 (bench/README.md, thirty-sixth pass), all lost or neutral, removed:
 * two steps of each row group (313.4 against 319.6), one 4-byte L2::128B load a line instead of
 * 16-byte loads (319.9, 321.8 against 321.6, 321.9; two steps 319.9, 320.7; the whole matrix
 * 314.5), the router's matrix warmed after it (319.6; with evict_last 319.0), and the next layer's
 * q|k first steps warmed beside the residual norm after the experts (one step 320.1, 322.8 against
 * 323.1, 322.0; two 319.0, 317.9; four 310.8): that window is too short for its traffic. */
static int owarm_on(void) {
    static std::atomic<int> c(-1);
    return hm_env_digit("HOTMOE_OWARM", 0, 1, 1, c);
}

/* HOTMOE_SHDOWN_GRID=n (0, the default: the launcher's grid): a MoE layer's shared down on at most n
 * blocks, more rounds each, the same lanes and sums. Its 128 blocks (air) are placed ~6 us into the
 * routed gate/up: the 44 that fit beside it at once, the rest one by one as gate/up blocks leave,
 * and the routed down's blocks are placed only after the last of them (bench/README.md, seventy-first
 * pass: its wait returns 1.16 us after the gate/up's end, against ~0.65 at the other boundaries).
 * On at most 44 blocks it would be placed at once, beside the gate/up, in the SMs that hold two of
 * its blocks instead of three. */
static int shdown_grid(void) {
    static std::atomic<int> c(-1);
    return hm_env_int("HOTMOE_SHDOWN_GRID", 0, 4096, 0, c);
}

/* HOTMOE_QKV_PAIR: with the post in the epilogues, q|k and v (of another type: Q4_K or Q5_K, then
 * Q6_K) in one launch (gpu_q8_pair_begin), a PDL chain q|k|v -> attention, instead of v beside q|k
 * on the second stream, whose join made the attention's launch wait for both without PDL (KTRACE,
 * air at position 427: ~4.7 us from v's last block to the attention's first). 1 (default); 0: the
 * second stream. The same rows, lanes and sums. nvidia-h200, session 32, one call: air 302.4, 304.6
 * tok/s against 300.4, 299.9; a3b 511.1 against 511.6 (its Q6_K v layers only); v after q|k on the
 * step's stream instead lost (294.3). */
static int qkv_pair(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("HOTMOE_QKV_PAIR"); v = !(e && e[0] == '0'); }
    return v;
}

/* The q/k/v post inside the q|k and v GEMVs (gpu_gemv_q8x_post) where they take it, one launch
 * fewer a layer on the step's critical path (HOTMOE_QK_EPI=0: the post launch); resident
 * executors only (record_step), every executor with HOTMOE_QK_EPI=2. H200, air resident (bench/README.md, twenty-seventh pass): 288.0 /
 * 288.2 tok/s against 285.9 / 285.9, and 286.7 / 286.9 against 284.8, the same tokens. */
static int qk_epi_on(void) {   /* 0 off, 1 resident executors (default), 2 every executor (to test the offload paths with it) */
    static int v = -1;
    if (v < 0) { const char *e = getenv("HOTMOE_QK_EPI"); v = e && (*e == '0' || *e == '2') ? *e - '0' : 1; }
    return v;
}

/* HOTMOE_DIAG_SKIP=name[/name...] (a diagnostic: the OUTPUT IS WRONG): the decode step leaves out
 * those launches of every layer, so that the step's time without them measures what each costs on
 * the step's critical path (what ktrace's stamps, which include waits, cannot): v, qk (q|k or
 * q|k|v), post (k_qkv_post), attn (attention and merge), oproj, norm1 (the norm after the
 * o-projection), router (its GEMV), topk (op_router; inside the routed launch: that launch's top-k,
 * the experts then read by table from ids fixed at 0 .. k-1, so each layer's bytes stay the same), gateup
 * (the routed gate/up), down (the routed down), shared (the shared expert or dense FFN), reduce,
 * merge (the attention's merge alone: the o-projection reads the last step's records), norm2 (the
 * shared expert's own norm on the second stream, under HOTMOE_ROUTER_NORM: the shared gate/up reads
 * the last layer's row), shdown (the shared expert's down alone) */
enum { D_V, D_QK, D_POST, D_ATTN, D_OPROJ, D_NORM1, D_ROUTER, D_TOPK, D_GATEUP, D_DOWN, D_SHARED, D_REDUCE, D_MERGE, D_NORM2, D_SHDOWN,
       D_COUNT };
static int diag_skip(int what) {
    static int mask = -1;
    if (mask < 0) {
        static const char *names[D_COUNT] = { "v", "qk", "post", "attn", "oproj", "norm1", "router", "topk", "gateup", "down", "shared", "reduce", "merge", "norm2", "shdown" };
        mask = 0;
        const char *e = getenv("HOTMOE_DIAG_SKIP");
        for (const char *p = e; p && *p;) {
            const size_t n = strcspn(p, "/,");
            for (int i = 0; i < D_COUNT; i++)
                if (strlen(names[i]) == n && !strncmp(p, names[i], n)) mask |= 1 << i;
            p += n + (p[n] != 0);
        }
        if (mask) fprintf(stderr, "hotmoe: HOTMOE_DIAG_SKIP=%s: launches left out of every layer, the output is wrong (timing only)\n", e);
    }
    return mask >> what & 1;
}

/* whether a plain matrix (q|k|v, the o-projection, the head; not the router, which the prefill reads
 * as GGUF rows) of this shape is uploaded interleaved: HOTMOE_INTER unset or 2 (1: experts only) */
static int inter_mat(int type, int64_t ne0, int64_t ne1) {
    return inter_on() == 2 && gemv_q8_mode() && gpu_q8_inter_bytes(type, (int)ne0, (int)ne1, 1, 1);
}
static size_t mat_bytes(int type, int64_t ne0, int64_t ne1, size_t nbytes) {
    return inter_mat(type, ne0, ne1) ? gpu_q8_inter_bytes(type, (int)ne0, (int)ne1, 1, 1) : nbytes;
}

/* whether experts like f (tok slots a token) are uploaded interleaved */
static int inter_for(const hm_ffn_w *f, int tok) {
    const hm_tensor *g0 = &f->gate, *d0 = &f->down;
    return inter_on() && gemv_q8_mode() && g0->data && d0->data && gpu_q8_inter_bytes(g0->type, (int)g0->ne[0], (int)g0->ne[1], 2, tok) &&
           gpu_q8_inter_bytes(d0->type, (int)d0->ne[0], (int)d0->ne[1], 1, tok);
}

/* one matrix of h's GGUF rows of ne0 values in the interleaved layout, into dst (device memory the
 * caller owns, gpu_q8_inter_bytes of it) or, dst NULL, a new allocation; NULL with err set on
 * failure */
static const void *upload_inter(gpu_exec *g, int type, int64_t ne0, const hrows &h, int nmat, int tok, char *err, size_t errlen,
                                void *dst = NULL) {
    const int64_t ne1 = hrows_rows(h);
    const size_t nb = gpu_q8_inter_bytes(type, (int)ne0, (int)ne1, nmat, tok);
    const int nt = upload_threads();
    int ng = 0;
    size_t sb = 0, gsz = 0;
    if (nt > 1 && nb >= up_staged_min && !gpu_q8_inter_groups(type, (int)ne0, (int)ne1, nmat, tok, &ng, &sb, &gsz) && gsz <= up_chunk) {
        /* packed by row groups straight into the pinned chunks, up_chunk / gsz groups a chunk */
        void *d = dst ? dst : dalloc(g, nb, err, errlen);
        if (!d) return NULL;
        const int gpc = (int)(up_chunk / gsz);
        auto fill = [&](int c, uint8_t *buf) -> size_t {
            const int g0 = c * gpc, g1 = g0 + gpc < ng ? g0 + gpc : ng;
            return gpu_q8_inter_pack_src(type, h.p, h.rows, h.n, (int)ne0, nmat, tok, buf, g0, g1, 1) ? 0 : (size_t)(g1 - g0) * gsz;
        };
        return staged_put(g, (uint8_t *)d, nb, (size_t)gpc * gsz, nt, fill, "chunk", err, errlen) ? NULL : d;
    }
    void *b = malloc(nb);
    if (!b) { fail(err, errlen, "out of host memory for an interleaved matrix (%zu bytes)", nb); return NULL; }
    const void *d = NULL;
    if (gpu_q8_inter_pack_src(type, h.p, h.rows, h.n, (int)ne0, nmat, tok, b, 0, -1, 0)) fail(err, errlen, "gpu: interleaving failed");
    else if (!dst) d = upload(g, b, nb, err, errlen);
    else if (!put(dst, b, nb, err, errlen)) d = dst;
    free(b);
    return d;
}

static const void *upload_inter_t(gpu_exec *g, const hm_tensor *t, int nmat, int tok, char *err, size_t errlen, void *dst = NULL) {
    return upload_inter(g, t->type, t->ne[0], hrows_of(t->data, t->ne[1], t->nbytes), nmat, tok, err, errlen, dst);
}
static size_t al256(size_t n) { return (n + 255) & ~(size_t)255; }

/* a plain matrix of h's GGUF rows of ne0 values into d: interleaved and registered when inter_mat
 * says so */
static int upload_rows(gpu_exec *g, dmat *d, int type, int64_t ne0, const hrows &h, char *err, size_t errlen) {
    const int64_t ne1 = hrows_rows(h);
    d->type = type; d->ne0 = ne0; d->ne1 = ne1; d->inter = 0;
    if (!inter_mat(type, ne0, ne1)) {
        d->d = upload_h(g, h, err, errlen);
        return d->d ? 0 : -1;
    }
    if (!(d->d = upload_inter(g, type, ne0, h, 1, 1, err, errlen))) return -1;
    if (gpu_q8_inter_register((const void *const *)d->d, type, (int)ne0, (int)ne1, 1, 1))
        return fail(err, errlen, "gpu: too many interleaved matrices");
    d->inter = 1;
    return 0;
}
static int upload_w(gpu_exec *g, dmat *d, const hm_tensor *t, char *err, size_t errlen) {
    return upload_rows(g, d, t->type, t->ne[0], hrows_of(t->data, t->ne[1], t->nbytes), err, errlen);
}

static size_t tsz(const hm_tensor *t) { return t->data ? t->nbytes : 0; }
static size_t vsz(const hm_tensor *t) { return t->data ? (size_t)t->ne[0] * 4 : 0; }
static size_t fsz(const hm_ffn_w *f) { return tsz(&f->gate) + tsz(&f->up) + tsz(&f->down); }
/* an expert's VRAM as upload_experts lays it out (interleaved: chunks padded, rows' slots in whole
 * steps; each matrix 256-byte aligned, up at *ou, down at *od): its stride in the layer's arena */
static size_t fsz_up_at(const hm_ffn_w *f, int tok, size_t *ou, size_t *od) {
    size_t gb = tsz(&f->gate), ub = tsz(&f->up), db = tsz(&f->down);
    if (inter_for(f, tok)) {
        const hm_tensor *g0 = &f->gate, *d0 = &f->down;
        gb = ub = gpu_q8_inter_bytes(g0->type, (int)g0->ne[0], (int)g0->ne[1], 2, tok);
        db = gpu_q8_inter_bytes(d0->type, (int)d0->ne[0], (int)d0->ne[1], 1, tok);
    }
    *ou = al256(gb); *od = *ou + al256(ub);
    return *od + al256(db);
}
static size_t fsz_up(const hm_ffn_w *f, int tok) { size_t ou, od; return fsz_up_at(f, tok, &ou, &od); }

/* expert f's VRAM image (fsz_up_at's layout, stride bytes, gaps zero) into b; 0, or -1 */
static int expert_image(const hm_ffn_w *f, int inter, int tok, size_t ou, size_t od, size_t stride, uint8_t *b) {
    const hm_tensor *m[3] = { &f->gate, &f->up, &f->down };
    const size_t at[4] = { 0, ou, od, stride };
    for (int j = 0; j < 3; j++) {
        const hm_tensor *t = m[j];
        size_t nb = t->nbytes;
        if (inter) {
            nb = gpu_q8_inter_bytes(t->type, (int)t->ne[0], (int)t->ne[1], j < 2 ? 2 : 1, tok);
            if (gpu_q8_inter_pack_nt(t->type, t->data, (int)t->ne[0], (int)t->ne[1], j < 2 ? 2 : 1, tok, b + at[j], 1)) return -1;
        } else
            memcpy(b + at[j], t->data, nb);
        memset(b + at[j] + nb, 0, at[j + 1] - at[j] - nb);
    }
    return 0;
}

extern "C" size_t gpu_exec_expert_image(const hm_ffn_w *f, int tok, void *dst) {
    size_t ou, od;
    const size_t stride = fsz_up_at(f, tok, &ou, &od);
    return !dst || !expert_image(f, inter_for(f, tok), tok, ou, od, stride, (uint8_t *)dst) ? stride : 0;
}

/* Uploads n experts and the tables; tok: expert slots a token takes from these tables (the
 * interleaved layout's lanes follow it). The n experts go into one allocation, expert e's gate | up |
 * down at e * stride (each 256-byte aligned; fsz_up): cudaMalloc rounds every allocation up to 2 MiB,
 * which with an allocation per matrix cost air 21.5 GiB of 71.8 (session 26). Interleaved experts are
 * then registered affine (gpu_q8_inter_affine, unless HOTMOE_AFFINE=0): the routed launches compute an
 * expert's address from its id instead of loading it from the table. */
static int upload_experts(gpu_exec *g, dexperts *x, const hm_ffn_w *const *w, int n, int tok, char *err, size_t errlen) {
    x->n = n; x->type_gu = w[0]->gate.type; x->type_down = w[0]->down.type;
    const hm_tensor *g0 = &w[0]->gate, *d0 = &w[0]->down;
    const int inter = inter_for(w[0], tok);
    size_t ou, od;
    const size_t stride = fsz_up_at(w[0], tok, &ou, &od);
    uint8_t *arena = (uint8_t *)dalloc(g, (size_t)n * stride, err, errlen);
    if (!arena) return -1;
    const void **hg = (const void **)malloc(3 * n * sizeof(void *)), **hu = hg + n, **hd = hg + 2 * n;
    for (int e = 0; e < n; e++) {
        const hm_ffn_w *f = w[e];
        if (f->gate.type != x->type_gu || f->up.type != x->type_gu || f->down.type != x->type_down ||
            f->gate.nbytes != g0->nbytes || f->up.nbytes != w[0]->up.nbytes || f->down.nbytes != d0->nbytes) {
            free(hg);
            return fail(err, errlen, "gpu: experts of one layer must share gate/up and down types and shapes (expert %d differs)", e);
        }
    }
    for (int e = 0; e < n; e++) {
        uint8_t *b = arena + (size_t)e * stride;
        hg[e] = b; hu[e] = b + ou; hd[e] = b + od;
    }
    const int nt = upload_threads() < n ? upload_threads() : n;
    int rc = 0;
    if (nt > 1) {   /* an expert a chunk */
        auto fill = [&](int e, uint8_t *buf) -> size_t { return expert_image(w[e], inter, tok, ou, od, stride, buf) ? 0 : stride; };
        rc = staged_put(g, arena, (size_t)n * stride, stride, nt, fill, "expert", err, errlen);
    }
    for (int e = 0; e < n && nt <= 1 && !rc; e++) {
        const hm_ffn_w *f = w[e];
        uint8_t *b = arena + (size_t)e * stride;
        if (inter)
            rc = !upload_inter_t(g, &f->gate, 2, tok, err, errlen, b) || !upload_inter_t(g, &f->up, 2, tok, err, errlen, b + ou) ||
                 !upload_inter_t(g, &f->down, 1, tok, err, errlen, b + od);
        else
            rc = put(b, f->gate.data, f->gate.nbytes, err, errlen) || put(b + ou, f->up.data, f->up.nbytes, err, errlen) ||
                 put(b + od, f->down.data, f->down.nbytes, err, errlen);
    }
    if (rc) { free(hg); return -1; }
    x->gate = (const void **)upload(g, hg, n * sizeof(void *), err, errlen);
    x->up = (const void **)upload(g, hu, n * sizeof(void *), err, errlen);
    x->down = (const void **)upload(g, hd, n * sizeof(void *), err, errlen);
    free(hg);
    if (!(x->gate && x->up && x->down)) return -1;
    if (!inter) return 0;
    x->inter_tok = tok;
    if (gpu_q8_inter_register((const void *const *)x->gate, g0->type, (int)g0->ne[0], (int)g0->ne[1], 2, tok) ||
        gpu_q8_inter_register((const void *const *)x->up, g0->type, (int)g0->ne[0], (int)g0->ne[1], 2, tok) ||
        gpu_q8_inter_register((const void *const *)x->down, d0->type, (int)d0->ne[0], (int)d0->ne[1], 1, tok))
        return fail(err, errlen, "gpu: too many interleaved expert tables");
    if (gpu_q8_affine() && (gpu_q8_inter_affine((const void *const *)x->gate, arena, (int64_t)stride) ||
                            gpu_q8_inter_affine((const void *const *)x->up, arena + ou, (int64_t)stride) ||
                            gpu_q8_inter_affine((const void *const *)x->down, arena + od, (int64_t)stride)))
        return fail(err, errlen, "gpu: affine expert tables not registered");
    return 0;
}

/* Floats of each batched-decode buffer per row (GPU_BATCH_MAX rows each, allocated when n_seq > 1). */
typedef struct { size_t x, q, att, logits, rlog, ew, act, ey, sh_act, part; } batch_sizes;
static batch_sizes batch_rows(const hm_config *c) {
    int ff = c->n_ff > c->n_ff_exp ? c->n_ff : c->n_ff_exp;
    if (c->n_ff_shexp > ff) ff = c->n_ff_shexp;
    const size_t k = (size_t)c->n_expert_used;
    batch_sizes b = { (size_t)c->n_embd, (size_t)c->q_dim + 2 * (size_t)c->kv_dim, (size_t)c->q_dim, (size_t)c->n_vocab,
                      (size_t)c->n_expert, k + 1, (size_t)ff * k, (size_t)c->n_embd * (k + 1), (size_t)ff,
                      op_attn_part_floats(c->n_head, c->n_head_kv, c->head_dim) };
    return b;
}
/* bytes a row of the batched step's q8 records of n values take (gpu_q8_records' layout, 256-byte aligned rows): the
 * attention outputs' (n = q_dim) and the normed rows' (n = n_embd) */
static size_t batch_rec(int n) { return (gpu_q8_records_bytes(n) + 255) & ~(size_t)255; }
static size_t batch_workspace(const hm_config *c) {
    const batch_sizes b = batch_rows(c);   /* x, xn, tmp, sh: n_embd each */
    return GPU_BATCH_MAX * (sizeof(float) * (4 * b.x + b.q + b.att + b.logits + b.rlog + b.ew + b.act + b.ey + b.sh_act + b.part) +
                            sizeof(int) * ((size_t)c->n_expert_used + 3) + batch_rec(c->q_dim) + batch_rec(c->n_embd)) + 4096 + 512;
}

/* a plain matrix's VRAM as upload_w lays it out; q|k|v as the upload fuses them */
static size_t msz(const hm_tensor *t) { return t->data ? mat_bytes(t->type, t->ne[0], t->ne[1], t->nbytes) : 0; }
static size_t qkv_sz(const hm_layer *l) {
    if (!l->wq.data || l->wq.type != l->wk.type) return msz(&l->wq) + msz(&l->wk) + msz(&l->wv);
    const int v3 = l->wv.type == l->wq.type;
    const size_t fused = mat_bytes(l->wq.type, l->wq.ne[0], l->wq.ne[1] + l->wk.ne[1] + (v3 ? l->wv.ne[1] : 0),
                                   l->wq.nbytes + l->wk.nbytes + (v3 ? l->wv.nbytes : 0));
    return fused + (v3 ? 0 : msz(&l->wv));
}

extern "C" size_t gpu_exec_vram_needed(const hm_model *m, int n_ctx) {
    return gpu_exec_vram_needed_range(m, n_ctx, 0, m->cfg.n_layer, 1);
}

extern "C" size_t gpu_exec_vram_needed_range(const hm_model *m, int n_ctx, int l0, int l1, int n_seq) {
    const hm_config *c = &m->cfg;
    size_t n = l1 == c->n_layer ? vsz(&m->output_norm) + msz(&m->output) : 0;
    for (int il = l0; il < l1; il++) {
        const hm_layer *l = &m->layers[il];
        n += vsz(&l->attn_norm) + vsz(&l->ffn_norm) + vsz(&l->bq) + vsz(&l->bk) + vsz(&l->bv) + vsz(&l->q_norm) +
             vsz(&l->k_norm) + vsz(&l->router_bias) + qkv_sz(l) + msz(&l->wo) +
             tsz(&l->router) + fsz_up(&l->dense, 1) + fsz_up(&l->shexp, 1);
        if (l->is_moe) for (int e = 0; e < c->n_expert; e++) n += fsz_up(&l->experts[e].host, c->n_expert_used) + 3 * sizeof(void *);
    }
    n += 2 * (size_t)n_seq * (l1 - l0) * n_ctx * c->kv_dim * sizeof(float) + 2 * pf_kv16_bytes(m, n_ctx);
    int ff = c->n_ff > c->n_ff_exp ? c->n_ff : c->n_ff_exp;
    if (c->n_ff_shexp > ff) ff = c->n_ff_shexp;
    n += sizeof(float) * ((size_t)c->n_embd * (7 + c->n_expert_used) + c->q_dim * 2 + c->kv_dim * 2 + c->n_vocab +
                          c->n_expert * 2 + (size_t)ff * (c->n_expert_used + 1) +
                          op_attn_part_floats(c->n_head, c->n_head_kv, c->head_dim));
    n += 2 * gpu_q8_records_bytes(c->n_embd) + gpu_q8_records_bytes(c->q_dim) + op_argmax_scratch_bytes(GPU_BATCH_MAX) + 768 +
         2 * sizeof(unsigned);   /* the head's ticket counters */
    if (n_seq > 1) n += batch_workspace(c);
    return n;
}

/* Profiling: HOTMOE_GPU_PROFILE=1 runs the step outside the graph with an event after each op
 * group (launch-bound at decode sizes: it measures the CPU's launch rate more than the GPU);
 * HOTMOE_GPU_PROFILE=2 captures one more graph of the step (sequence 0, with logits) with the
 * events inside it as event-record nodes and runs that one: the GPU's own time per group, with
 * the graph's launch overhead gone (a group boundary does cost the programmatic launch across
 * it). Times are summed per group and printed when the executor is freed. */
enum { P_NORM, P_QKV, P_ROPE, P_ATTN, P_OPROJ, P_ROUTER, P_MOE_GU, P_MOE_DOWN, P_REDUCE, P_DENSE, P_OUTPUT, P_CACHE, P_CPUWAIT, P_COUNT };
static const char *prof_names[P_COUNT] = { "rmsnorm", "q/k/v gemv", "qkv post+rope", "attention", "o-proj+res+norm",
                                           "router gemv+topk", "experts gate/up", "experts down", "moe reduce+norm",
                                           "dense/shared ffn", "output head+copy", "expert cache", "wait for CPU experts" };
typedef struct {
    int on, quiet;                /* mode 1 / 2; quiet: no marks (the executor's own captures in mode 2) */
    cudaEvent_t ev[2048]; int grp[2048]; int n; double ms[P_COUNT]; long steps;
    gpu_exec *owner; cudaGraphExec_t graph; int graph_n;   /* mode 2: the profiled graph, its events */
} prof_t;
static prof_t prof;
static void mark(gpu_exec *g, int grp) {
    if (!prof.on || prof.quiet || prof.n >= 2048) return;
    if (!prof.ev[prof.n]) cudaEventCreate(&prof.ev[prof.n]);
    /* in a capture, a plain record is only a dependency point; External makes it a graph node */
    if (prof.on == 2) cudaEventRecordWithFlags(prof.ev[prof.n], g->s, cudaEventRecordExternal);
    else cudaEventRecord(prof.ev[prof.n], g->s);
    prof.grp[prof.n++] = grp;
}

/* the profiled step's times between its marks, added to their groups */
static void prof_add(void) {
    for (int i = 1; i < prof.n; i++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, prof.ev[i - 1], prof.ev[i]);
        if (prof.grp[i] >= 0) prof.ms[prof.grp[i]] += ms;
    }
    prof.steps++;
}

/* sequence seq's decode graph of a mode (record_step's with_logits: STEP_MODES of them) and an
 * attention form (STEP_FORMS: op_attn_decode_q8's, step_form) */
enum { STEP_MODES = 4, STEP_FORMS = 2 };
static cudaGraphExec_t *step_graph(gpu_exec *g, int seq, int mode, int form = 0) {
    return &g->graphs[(STEP_FORMS * seq + form) * STEP_MODES + mode];
}
/* the attention's form for a step at position pos: the long-context one from op_attn_long_from's
 * context on (its graphs captured at their first use) */
static int step_form(const gpu_exec *g, int pos) { return g->att_long > 0 && pos + 1 >= g->att_long; }

/* Records one decode step into the stream (captured into a graph by the caller). */
/* with_logits: 0 no head, 1 the logits copied out, 2 only the greedy token (h_next), 3 the greedy
 * chain's step (gpu_exec_greedy_chain): the token and position from the step before, on the GPU, the
 * token into the ring. form: the attention's (op_attn_decode_q8, step_form). */
static void record_step(gpu_exec *g, int with_logits, int seq, int form) {
    const hm_config *c = &g->m->cfg;
    cudaStream_t s = g->s;
    int D = c->n_embd;
    if (with_logits == 3)   /* x = the embedding of the last step's token (d_next), d_pos + 1 */
        gpu_embed_row(g->m->tok_embd.type, g->d_embd, g->embd_row, g->d_next, c->n_vocab, g->d_pos, g->x, D, s);
    else {
        cudaMemcpyAsync(g->x, g->h_x, sizeof(float) * D, cudaMemcpyHostToDevice, s);
        cudaMemcpyAsync(g->d_pos, g->h_pos, sizeof(int), cudaMemcpyHostToDevice, s);
    }
    const size_t nk = (size_t)c->n_layer * c->n_expert_used;
    if (g->d_replay) cudaMemcpyAsync(g->d_replay, g->h_replay, sizeof(int) * nk, cudaMemcpyHostToDevice, s);
    if (g->d_step) cudaMemcpyAsync(g->d_step, g->h_step, sizeof(int), cudaMemcpyHostToDevice, s);
    mark(g, -1);
    op_rmsnorm_q8(g->x, g->L[g->l0].attn_norm, g->xn, g->xq_n, D, c->rms_eps, s);   /* xq_n NULL: no records */
    mark(g, P_NORM);
    const int nl = g->l1 - g->l0;
    /* the post in the GEMVs' epilogues only when every expert is resident (no cache, no CPU
     * workers): of seven device runs of test_gpu_stream with it everywhere (HOTMOE_QK_EPI=2), one
     * had a --cold cpu case time out waiting on the CPU workers (1 of 288 cases), not yet understood */
    int all_resident = 1;
    for (int il = g->l0; il < g->l1; il++) all_resident &= g->L[il].cache == NULL;
    const int qe = qk_epi_on(), epi_on = (qe == 2 || (qe == 1 && all_resident)) && !diag_skip(D_V) && !diag_skip(D_QK) && !diag_skip(D_POST);
    int pf_for = -1;   /* --prefetch: the layer whose copies ahead are on the way (joined before its update) */
    for (int il = g->l0; il < g->l1; il++) {
        dlayer *l = &g->L[il];
        size_t kvoff = ((size_t)seq * nl + (il - g->l0)) * g->n_ctx * c->kv_dim;
        /* the norm that follows this layer: the next layer's, or the output's (a stage without the
         * head hands on the raw residual stream: the next stage starts with its first layer's norm) */
        const float *next_norm = il + 1 < g->l1 ? g->L[il + 1].attn_norm : with_logits && g->head ? g->out_norm : NULL;
        /* qk_epi_on: the q/k/v post in the q|k and v launches' epilogues, k and v straight into
         * the cache (q|k fused, v on its own type, no q/k norms; shapes gpu_gemv_q8x_post takes) */
        const int epi = epi_on && l->n_fused == 2 && !l->q_norm && !l->k_norm &&
                        gpu_gemv_q8x_post_ok(l->wqkv.type, l->wqkv.d, D, (int)l->wqkv.ne1, c->q_dim, c->head_dim, c->n_rot) &&
                        gpu_gemv_q8x_post_ok(l->wv.type, l->wv.d, D, c->kv_dim, 0, c->head_dim, 0);
        auto v_proj = [&](cudaStream_t vs) {   /* v on its own type */
            if (epi)
                gpu_gemv_q8x_post(l->wv.type, l->wv.d, g->xn, g->xq_n, D, c->kv_dim, NULL, l->bv, NULL, g->vc + kvoff, 0, c->head_dim, 0,
                                  c->rope_theta, c->kv_dim, g->d_pos, vs);
            else if (!diag_skip(D_V)) gpu_gemv_q8x(l->wv.type, l->wv.d, g->xn, g->xq_n, g->v, D, c->kv_dim, vs);
        };
        const int pair = epi && l->n_fused != 3 && qkv_pair() && gpu_q8_pair_ok(l->wqkv.type, l->wv.type);   /* q|k and v in one launch (gpu_q8_pair_begin) */
        const int vs2 = l->n_fused != 3 && !pair;   /* v beside q|k on the second stream, joined below */
        if (pair) gpu_q8_pair_begin();
        if (vs2) {
            cudaEventRecord(g->ev_fork, s);
            cudaStreamWaitEvent(g->s2, g->ev_fork, 0);
            v_proj(g->s2);
            cudaEventRecord(g->ev_join, g->s2);
        }
        if (diag_skip(D_QK)) {
        } else if (epi) {
            gpu_gemv_q8x_post(l->wqkv.type, l->wqkv.d, g->xn, g->xq_n, D, (int)l->wqkv.ne1, l->bq, l->bk, g->q, g->kc + kvoff, c->q_dim,
                              c->head_dim, c->n_rot, c->rope_theta, c->kv_dim, g->d_pos, s);
        } else if (l->n_fused) {
            gpu_gemv_q8x(l->wqkv.type, l->wqkv.d, g->xn, g->xq_n, g->q, D, (int)l->wqkv.ne1, s);
        } else {
            gpu_gemv_q8x(l->wq.type, l->wq.d, g->xn, g->xq_n, g->q, D, c->q_dim, s);
            gpu_gemv_q8x(l->wk.type, l->wk.d, g->xn, g->xq_n, g->k, D, c->kv_dim, s);
        }
        if (vs2) cudaStreamWaitEvent(s, g->ev_join, 0);
        if (pair) {   /* v's launch takes the parked q|k with it (or goes alone, q|k after it) */
            v_proj(s);
            gpu_q8_pair_end(s);
        }
        mark(g, P_QKV);
        if (owarm_on() && l->is_moe && l->has_single && l->wo.inter) {   /* joined with the shared expert's stream */
            int ng = 0;
            size_t sb = 0, gb = 0;
            if (!gpu_q8_inter_groups(l->wo.type, (int)l->wo.ne0, (int)l->wo.ne1, 1, 1, &ng, &sb, &gb)) {
                cudaEventRecord(g->ev_warm, s);
                cudaStreamWaitEvent(g->s2, g->ev_warm, 0);
                op_l2_warm(l->wo.d, (size_t)ng, sb, gb, g->s2);
            }
        }
        if (!diag_skip(D_POST) && !epi)
            op_qkv_post(g->q, g->k, g->v, l->bq, l->bk, l->bv, l->q_norm, l->k_norm, c->n_head, c->n_head_kv, c->head_dim,
                        c->n_rot, c->rope_theta, c->rms_eps, g->d_pos, g->kc + kvoff, g->vc + kvoff, s);
        mark(g, P_ROPE);
        if (!diag_skip(D_ATTN))
            op_attn_decode_q8(g->q, g->kc + kvoff, g->vc + kvoff, g->att, g->xq_att, g->part, c->n_head, c->n_head_kv, c->head_dim,
                              g->n_ctx, g->d_pos, s, !diag_skip(D_MERGE), form);
        mark(g, P_ATTN);
        if (!diag_skip(D_OPROJ)) gpu_gemv_q8x(l->wo.type, l->wo.d, g->att, g->xq_att, g->tmp, c->q_dim, D, s);
        /* the norm and the router in one launch (router_norm_on); x + tmp is then left to the last norm */
        const int rnf = router_norm_on() && g->xq_n && l->is_moe && l->router.type == HM_TYPE_F32 && !diag_skip(D_NORM1) &&
                        !diag_skip(D_ROUTER) && op_router_norm_ok(D, c->n_expert, router_norm_rows(), l->ffn_norm, (const float *)l->router.d);
        const int early_r = rnf && router_early(l);   /* the routed launch, if it comes next, may start at the router's wait */
        /* with a shared expert, the norm also runs on the second stream (x left as it was, its own copy
         * of the normed row, xn2), so that the shared expert starts when it did, not after the router */
        const int rn2 = rnf && l->has_single;
        if (rn2) {
            cudaEventRecord(g->ev_fork, s);
            cudaStreamWaitEvent(g->s2, g->ev_fork, 0);
            if (!diag_skip(D_NORM2))
                op_residual_norm_q8_ex(g->x, NULL, 0, g->tmp, NULL, 1, NULL, l->ffn_norm, g->xn2, g->xq_n2, D, c->rms_eps, g->s2);
        }
        if (rnf) op_router_norm_q8(g->x, g->tmp, l->ffn_norm, (const float *)l->router.d, g->rlog, g->xn, g->xq_n, D, c->n_expert,
                                   c->rms_eps, early_r, router_norm_rows(), s);
        else if (!diag_skip(D_NORM1)) op_residual_norm_q8(g->x, g->tmp, NULL, 1, NULL, l->ffn_norm, g->xn, g->xq_n, D, c->rms_eps, s);
        mark(g, P_OPROJ);
        const float *shared = NULL;
        if (l->has_single) { /* dense FFN, or the shared expert */
            dexperts *x = &l->single;
            int ff = l->is_moe ? c->n_ff_shexp : c->n_ff;
            /* the shared expert runs beside the router and the routed experts (its own stream and
             * activation buffer), joined before the reduction that adds it */
            cudaStream_t ss = l->is_moe ? g->s2 : s;
            if (l->is_moe && !rn2) { cudaEventRecord(g->ev_fork, s); cudaStreamWaitEvent(ss, g->ev_fork, 0); }
            if (!diag_skip(D_SHARED)) {
                gpu_gemv_experts_swiglu_q8x(x->type_gu, x->gate, x->up, g->zero_id, 1, rn2 ? g->xn2 : g->xn, rn2 ? g->xq_n2 : g->xq_n,
                                            g->sh_act, D, ff, ss);
                if (!diag_skip(D_SHDOWN)) {
                    if (l->is_moe && shdown_grid()) gpu_q8_grid_cap(shdown_grid());
                    gpu_gemv_experts(x->type_down, x->down, g->zero_id, 1, g->sh_act, g->sh, ff, D, ss);
                    gpu_q8_grid_cap(0);
                }
            }
            if (l->is_moe) cudaEventRecord(g->ev_join, ss);
            shared = g->sh;
            if (!l->is_moe) {
                op_residual_norm_q8(g->x, g->sh, NULL, 1, NULL, next_norm, g->xn, g->xq_n, D, c->rms_eps, s);
                mark(g, P_DENSE);
                continue;
            }
            mark(g, P_DENSE);
        }
        /* resident experts, no recorded routing, no group limit: the routed
         * gate/up launch runs the top-k itself (gpu_gemv_experts_swiglu_routed), one kernel fewer */
        const int routed = !diag_skip(D_TOPK) && route_fuse_on() && !l->cache && !g->d_rec && !(c->n_group > 1 && c->topk_group < c->n_group) &&
                           gpu_gemv_experts_routed_ok(l->exps.type_gu, D, c->n_expert, c->n_expert_used);
        /* the routed launch then follows the router GEMV directly (router_early) */
        /* (under rnf x's records come from the router's own launch: none to copy before the wait) */
        const int early = routed && !diag_skip(D_ROUTER) && !diag_skip(D_GATEUP) && router_early(l) && !rnf;
        if (!diag_skip(D_ROUTER) && !rnf) gpu_gemv_router(l->router.type, l->router.d, g->xn, g->xq_n, g->rlog, D, c->n_expert, early, s);
        if (!routed && !diag_skip(D_TOPK))
            op_router(g->rlog, l->router_bias, c->n_expert, c->n_expert_used, c->router_fn, c->norm_topk, c->routed_scale,
                      c->n_group, c->topk_group, g->ids, g->ew, s);
        if (g->d_rec) {
            const int k = c->n_expert_used;
            route_replay(g->rlog, c->n_expert, k, c->router_fn, c->norm_topk, c->routed_scale, g->d_replay + (size_t)il * k,
                         g->ids, g->ew, s);
            cudaMemcpyAsync(g->d_rec + (size_t)il * k, g->ids, sizeof(int) * k, cudaMemcpyDeviceToDevice, s);
        }
        mark(g, P_ROUTER);
        dexperts *x = &l->exps;
        if (pf_for == il) cudaStreamWaitEvent(s, g->pf_join, 0);
        const int overlap = l->cache && l->cache->ids_miss;
        if (overlap) {   /* the hits' GEMVs (copied misses skipped: id -1) beside the copies, then the misses' */
            cache_record_step_overlap(l->cache, g->ids, c->n_expert_used, g->decay, x, s, g->side, g->ov_fork, g->ov_join);
            mark(g, P_CACHE);
        } else if (l->cache) {
            cache_record_step(l->cache, g->ids, c->n_expert_used, g->decay, x, s, g->side, g->side_fork);
            mark(g, P_CACHE);
        }
        if (l->cache && l->cache->cpu && g->hostfn) hybrid_record_hostfn(g, l->cache->job_h, s);   /* beside the GPU's experts */
        if (g->prefetch && l->cache) {   /* the next MoE layer's likely experts, copied beside this layer's work */
            int nx = il + 1;
            while (nx < g->l1 && !g->L[nx].cache) nx++;
            if (nx < g->l1) {
                const dlayer *ln = &g->L[nx];
                gpu_gemv(ln->router.type, ln->router.d, g->xn, g->pf_rlog, D, c->n_expert, s);
                op_router(g->pf_rlog, ln->router_bias, c->n_expert, c->n_expert_used, c->router_fn, c->norm_topk, c->routed_scale,
                          c->n_group, c->topk_group, g->pf_ids, g->pf_w, s);
                cache_record_prefetch(ln->cache, g->pf_ids, c->n_expert_used, &ln->exps, s, g->side2, g->pf_fork, g->pf_join);
                pf_for = nx;
                mark(g, P_CACHE);
            }
        }
        if (diag_skip(D_GATEUP)) {
        } else if (routed)
            gpu_gemv_experts_swiglu_routed(x->type_gu, x->gate, x->up, g->rlog, l->router_bias, c->n_expert, c->router_fn,
                                           c->norm_topk, c->routed_scale, g->ids, g->ew, c->n_expert_used, g->xn, g->xq_n, g->act, D,
                                           c->n_ff_exp, early, s);
        else
            gpu_gemv_experts_swiglu_q8x(x->type_gu, x->gate, x->up, g->ids, c->n_expert_used, g->xn, g->xq_n, g->act, D, c->n_ff_exp, s);
        mark(g, P_MOE_GU);
        if (!diag_skip(D_DOWN)) gpu_gemv_experts(x->type_down, x->down, g->ids, c->n_expert_used, g->act, g->ey, c->n_ff_exp, D, s);
        mark(g, P_MOE_DOWN);
        if (overlap) {
            cudaStreamWaitEvent(s, g->ov_join, 0);
            gpu_gemv_experts_swiglu_q8x(x->type_gu, x->gate, x->up, g->ids_miss, c->n_expert_used, g->xn, g->xq_n, g->act, D,
                                        c->n_ff_exp, s);
            gpu_gemv_experts(x->type_down, x->down, g->ids_miss, c->n_expert_used, g->act, g->ey, c->n_ff_exp, D, s);
            mark(g, P_MOE_DOWN);
        }
        int kk = c->n_expert_used;
        if (l->cache && l->cache->cpu) {   /* the CPU's share arrives as one more expert row of weight 1 */
            if (g->hostfn) cudaStreamWaitEvent(s, g->hf_join, 0);
            hybrid_wait(l->cache, g->ey + (size_t)kk * D, g->ew + kk, D, s);
            kk++;
            mark(g, P_CPUWAIT);
        }
        if (shared) cudaStreamWaitEvent(s, g->ev_join, 0);
        if (!diag_skip(D_REDUCE))
            op_residual_norm_q8_ex(g->x, rnf ? g->tmp : NULL, 1, g->ey, g->ew, kk, shared, next_norm, g->xn, g->xq_n, D, c->rms_eps, s);
        mark(g, P_REDUCE);
    }
    if (g->d_rec) cudaMemcpyAsync(g->h_rec, g->d_rec, sizeof(int) * nk, cudaMemcpyDeviceToHost, s);
    if (g->async_copies) {   /* the step ends when this step's swap-ins are in */
        cudaEventRecord(g->side_join, g->side);
        cudaStreamWaitEvent(s, g->side_join, 0);
    }
    if (!g->head) {   /* a pipeline stage: x goes on to the next one */
        cudaMemcpyAsync(g->h_xout, g->x, sizeof(float) * D, cudaMemcpyDeviceToHost, s);
        return;
    }
    if (!with_logits) return;
    gpu_q8_head_tk(g->head_tk);
    gpu_gemv_q8x(g->output.type, g->output.d, g->xn, g->xq_n, g->logits, D, c->n_vocab, s);
    gpu_q8_head_tk(NULL);
    if (with_logits == 3)   /* the chain: the token stays in d_next for the next step and goes into the ring */
        op_argmax_rows(g->logits, c->n_vocab, 1, g->d_next, g->am_scratch, s, g->d_ring, g->d_ring_n, GPU_CHAIN_RING);
    else if (with_logits == 2) {   /* the greedy token only: 4 bytes come back instead of the logits */
        op_argmax_rows(g->logits, c->n_vocab, 1, g->d_next, g->am_scratch, s);
        cudaMemcpyAsync(g->h_next, g->d_next, sizeof(int), cudaMemcpyDeviceToHost, s);
    } else {
        cudaMemcpyAsync(g->h_logits, g->logits, sizeof(float) * c->n_vocab, cudaMemcpyDeviceToHost, s);
    }
    mark(g, P_OUTPUT);
}

/* The batched step's attention form (op_attn_decode_seq; HOTMOE_ATT_BATCH, the default 3):
 * k_attn_quad where it applies (hd 128, 8 or 12 q heads a kv head), else the CPA form; 4 the CPA
 * form; 0 the one-round kernel. All three give every row a one-row step's bits. A batched step's
 * grid is rows times a one-row step's, so it takes a second round of blocks at a context rows times
 * shorter (bench/README.md, fifty-fifth pass). */
static int batch_attn_form(void) {
    static std::atomic<int> c(-1);
    const int f = hm_env_digit("HOTMOE_ATT_BATCH", 0, 4, 3, c);
    return f == 3 || f == 4 ? f : 0;
}

/* Records one batched decode step of nb tokens (rows of the b* buffers; each row's sequence and
 * position in bseq/bpos). The same sums as record_step per row, so each row's results are its
 * single step's bit for bit; the dense part's matrices (and the shared expert's) are read once for
 * up to 4 rows (gpu_gemv_batch_q8x, gpu_gemv_swiglu_rows: each chunk decoded once, the rows' q8
 * records made by the norms and the attention's merge), the router's logits of every row come from
 * one launch, the expert cache and the CPU hand-off run once per layer for all rows. */
static void record_step_batch(gpu_exec *g, int nb, int greedy) {
    const hm_config *c = &g->m->cfg;
    cudaStream_t s = g->s;
    const int D = c->n_embd, k = c->n_expert_used, E = c->n_expert, QKV = c->q_dim + 2 * c->kv_dim, V = c->n_vocab;
    const batch_sizes b = batch_rows(c);
    const long long seq_stride = (long long)(g->l1 - g->l0) * g->n_ctx * c->kv_dim;
    cudaMemcpyAsync(g->bx, g->hb_x, sizeof(float) * D * nb, cudaMemcpyHostToDevice, s);
    cudaMemcpyAsync(g->bpos, g->hb_pos, sizeof(int) * nb, cudaMemcpyHostToDevice, s);
    cudaMemcpyAsync(g->bseq, g->hb_seq, sizeof(int) * nb, cudaMemcpyHostToDevice, s);
    if (g->d_step) cudaMemcpyAsync(g->d_step, g->h_step, sizeof(int), cudaMemcpyHostToDevice, s);
    mark(g, -1);
    /* every norm of the step writes its rows' q8 records beside them (bxq_n, xr bytes a row): the GEMVs on xn copy them;
     * the attention's merge writes its outputs' (bxq_att, ar bytes a row) for the o-projection */
    const long long xr = (long long)batch_rec(c->n_embd), ar = (long long)batch_rec(c->q_dim);
    op_rmsnorm_rows(g->bx, g->L[g->l0].attn_norm, g->bxn, D, nb, c->rms_eps, s, g->bxq_n, xr);
    mark(g, P_NORM);
    for (int il = g->l0; il < g->l1; il++) {
        dlayer *l = &g->L[il];
        const size_t kvl = (size_t)(il - g->l0) * g->n_ctx * c->kv_dim;   /* the layer's cache within a sequence's */
        const float *next_norm = il + 1 < g->l1 ? g->L[il + 1].attn_norm : g->head ? g->out_norm : NULL;
        if (l->n_fused) gpu_gemv_batch_q8x(l->wqkv.type, l->wqkv.d, g->bxn, D, g->bxq_n, xr, g->bq, QKV, nb, D, (int)l->wqkv.ne1, s);
        else {
            gpu_gemv_batch_q8x(l->wq.type, l->wq.d, g->bxn, D, g->bxq_n, xr, g->bq, QKV, nb, D, c->q_dim, s);
            gpu_gemv_batch_q8x(l->wk.type, l->wk.d, g->bxn, D, g->bxq_n, xr, g->bq + c->q_dim, QKV, nb, D, c->kv_dim, s);
        }
        if (l->n_fused != 3)
            gpu_gemv_batch_q8x(l->wv.type, l->wv.d, g->bxn, D, g->bxq_n, xr, g->bq + c->q_dim + c->kv_dim, QKV, nb, D, c->kv_dim, s);
        mark(g, P_QKV);
        op_qkv_post_seq(g->bq, g->bq + c->q_dim, g->bq + c->q_dim + c->kv_dim, l->bq, l->bk, l->bv, l->q_norm, l->k_norm, c->n_head,
                        c->n_head_kv, c->head_dim, c->n_rot, c->rope_theta, c->rms_eps, g->bpos, g->kc + kvl, g->vc + kvl, g->bseq,
                        seq_stride, nb, QKV, s);
        mark(g, P_ROPE);
        op_attn_decode_seq(g->bq, g->kc + kvl, g->vc + kvl, g->batt, g->bpart, c->n_head, c->n_head_kv, c->head_dim, g->n_ctx,
                           g->bpos, g->bseq, seq_stride, nb, QKV, c->q_dim, (long long)b.part, s, batch_attn_form(), g->bxq_att,
                           ar);
        mark(g, P_ATTN);
        /* the merge made each row's records: the o-projection's blocks copy them instead of quantizing the rows */
        gpu_gemv_batch_q8x(l->wo.type, l->wo.d, g->batt, c->q_dim, g->bxq_att, ar, g->btmp, D, nb, c->q_dim, D, s);
        op_residual_norm_rows(g->bx, g->btmp, D, NULL, 0, 1, NULL, l->ffn_norm, g->bxn, D, nb, c->rms_eps, s, g->bxq_n, xr);
        mark(g, P_OPROJ);
        int shared = 0;
        /* a MoE layer's shared expert runs on the second stream beside the router, the top-k and the routed experts (as
         * record_step's), joined before the residual norm that adds it: +4.4% at 4 streams on an H100 (bench/README.md,
         * fifty-eighth pass) */
        cudaStream_t ss = l->has_single && l->is_moe ? g->s2 : s;
        if (l->has_single) {   /* dense FFN, or the shared expert: one slot per row */
            dexperts *x = &l->single;
            const int ff = l->is_moe ? c->n_ff_shexp : c->n_ff;
            if (ss != s) {
                cudaEventRecord(g->ev_fork, s);
                cudaStreamWaitEvent(ss, g->ev_fork, 0);
            }
            if (ff % 4 == 0) {   /* each weight row read once for up to 4 rows, each row's values the one-row step's */
                gpu_gemv_swiglu_rows(x->type_gu, x->gate, x->up, g->bzero, g->bxn, D, nb, g->bsh_act, ff, D, ff, ss, g->bxq_n, xr);
                gpu_gemv_expert_rows(x->type_down, x->down, g->bzero, g->bsh_act, ff, nb, g->bsh, D, ff, D, ss);
            } else {   /* a slot per row */
                gpu_gemv_experts_swiglu_x(x->type_gu, x->gate, x->up, g->bzero, nb, g->bxn, D, 1, g->bsh_act, D, ff, ss);
                gpu_gemv_experts_y(x->type_down, x->down, g->bzero, nb, g->bsh_act, g->bsh, ff, D, 1, D, ss);
            }
            if (ss != s) cudaEventRecord(g->ev_join, ss);
            if (!l->is_moe) {
                op_residual_norm_rows(g->bx, g->bsh, D, NULL, 0, 1, NULL, next_norm, g->bxn, D, nb, c->rms_eps, s, g->bxq_n, xr);
                mark(g, P_DENSE);
                continue;
            }
            mark(g, P_DENSE);
            shared = 1;
        }
        if (l->router.type != HM_TYPE_F32 || op_router_rows_gemv((const float *)l->router.d, g->bxn, g->brlog, D, E, b.rlog, nb, s))
            gpu_gemv_batch(l->router.type, l->router.d, g->bxn, D, g->brlog, b.rlog, nb, D, E, s);
        op_router_rows(g->brlog, l->router_bias, E, k, c->router_fn, c->norm_topk, c->routed_scale, c->n_group, c->topk_group,
                       g->bids, g->bew, (int)b.ew, nb, s);
        mark(g, P_ROUTER);
        dexperts *x = &l->exps;
        if (l->cache)
            cache_record_step_batch(l->cache, g->bids, nb, k, g->bxn, g->bew, (int)b.ew, g->decay, x, s, g->side, g->side_fork);
        if (l->cache && l->cache->cpu && g->hostfn) hybrid_record_hostfn(g, l->cache->job_h, s);
        mark(g, P_CACHE);
        /* every row's k experts in one launch each: row r's slots read its x, write its rows of ey */
        gpu_gemv_experts_swiglu_x(x->type_gu, x->gate, x->up, g->bids, nb * k, g->bxn, D, k, g->bact, D, c->n_ff_exp, s);
        mark(g, P_MOE_GU);
        gpu_gemv_experts_y(x->type_down, x->down, g->bids, nb * k, g->bact, g->bey, c->n_ff_exp, D, k, (int64_t)b.ey, s);
        mark(g, P_MOE_DOWN);
        int kk = k;
        if (l->cache && l->cache->cpu) {   /* each row's CPU share arrives as one more expert row of weight 1 */
            if (g->hostfn) cudaStreamWaitEvent(s, g->hf_join, 0);
            hybrid_wait_batch(l->cache, nb, g->bey + (size_t)k * D, b.ey, g->bew + k, (int)b.ew, D, s);
            kk++;
            mark(g, P_CPUWAIT);
        }
        if (ss != s) cudaStreamWaitEvent(s, g->ev_join, 0);
        op_residual_norm_rows(g->bx, g->bey, (long long)b.ey, g->bew, (int)b.ew, kk, shared ? g->bsh : NULL, next_norm, g->bxn, D, nb,
                              c->rms_eps, s, g->bxq_n, xr);
        mark(g, P_REDUCE);
    }
    if (g->async_copies) {   /* the step ends when this step's swap-ins are in */
        cudaEventRecord(g->side_join, g->side);
        cudaStreamWaitEvent(s, g->side_join, 0);
    }
    if (!g->head) {
        cudaMemcpyAsync(g->hb_xout, g->bx, sizeof(float) * D * nb, cudaMemcpyDeviceToHost, s);
        mark(g, P_OUTPUT);
        return;
    }
    gpu_gemv_batch_q8x(g->output.type, g->output.d, g->bxn, D, g->bxq_n, xr, g->blogits, V, nb, D, V, s);
    if (greedy) {   /* each row's greedy token only */
        op_argmax_rows(g->blogits, V, nb, g->d_next, g->am_scratch, s);
        cudaMemcpyAsync(g->h_next, g->d_next, sizeof(int) * nb, cudaMemcpyDeviceToHost, s);
    } else {
        cudaMemcpyAsync(g->hb_logits, g->blogits, sizeof(float) * V * nb, cudaMemcpyDeviceToHost, s);
    }
    mark(g, P_OUTPUT);
}

#ifdef HM_KTRACE
/* The traced step's kernels (gpu/launch.cuh) in the order their first block returned from the
 * wait, times in us from the first: one line each on stderr ("kt" lines; tools/device/ktrace.py
 * sums them per layer position). */
static int kt_cmp(const void *a, const void *b) {
    const unsigned long long x = ~((const hm_kstamp *)a)->first_ret_n, y = ~((const hm_kstamp *)b)->first_ret_n;
    return x < y ? -1 : x > y;
}
static void kt_print(long step, int pos) {
    static hm_kstamp all[8 * HM_KT_N];
    int n = 0;
    for (hm_kt_reader rd : hm_kt_readers()) n += rd(all + n, 8 * HM_KT_N - n);
    qsort(all, n, sizeof all[0], kt_cmp);
    const unsigned long long t0 = n ? ~all[0].first_ret_n : 0;
    fprintf(stderr, "kt step %ld pos %d: %d kernels; columns: index, grid blocks, threads a block, blocks stamped, "
                    "first block placed, first and last block past the wait, first and last block at its end (HM_KT_END; "
                    "- where the kernel does not mark it) (us from the first kernel's wait)\n", step, pos, n);
    for (int i = 0; i < n; i++) {
        fprintf(stderr, "kt %4d %6u %5u %6u %9.2f %9.2f %9.2f", i, all[i].gsz, all[i].bsz, all[i].nblk,
                1e-3 * (double)(long long)(~all[i].first_arrive_n - t0), 1e-3 * (double)(long long)(~all[i].first_ret_n - t0),
                1e-3 * (double)(long long)(all[i].last_ret - t0));
        if (all[i].nend)
            fprintf(stderr, " %9.2f %9.2f\n", 1e-3 * (double)(long long)(~all[i].first_end_n - t0),
                    1e-3 * (double)(long long)(all[i].last_end - t0));
        else
            fprintf(stderr, " %9s %9s\n", "-", "-");
    }
}
#endif

/* The decode step as a graph: one sequence's (nb 0: record_step), or a batched step of nb tokens. */
static int capture(gpu_exec *g, int nb, int with_logits, int seq, cudaGraphExec_t *out, char *err, size_t errlen, int form = 0) {
    cudaGraph_t graph;
    CK(cudaStreamBeginCapture(g->s, cudaStreamCaptureModeThreadLocal));
    if (nb) record_step_batch(g, nb, with_logits == 2);
    else record_step(g, with_logits, seq, form);
    CK(cudaStreamEndCapture(g->s, &graph));
    CK(cudaGraphInstantiate(out, graph, 0));
    cudaGraphDestroy(graph);
    return 0;
bad:
    return -1;
}

#define ALIGN256(x) (((x) + (size_t)255) & ~(size_t)255)

/* One expert's record (VRAM slot or pinned host copy): gate | up | down, each 256-byte aligned. */
static size_t rec_layout(const hm_ffn_w *f, size_t *off_up, size_t *off_down) {
    *off_up = ALIGN256(f->gate.nbytes);
    *off_down = *off_up + ALIGN256(f->up.nbytes);
    return ALIGN256(*off_down + f->down.nbytes);
}

/* VRAM of a streamed layer's cache besides its records: pointer tables, hidx, slot_of, score,
 * owner (at most n_expert), the copy list and the counters. */
static size_t cache_meta(int n_expert, int k) {
    return (size_t)(n_expert + 1) * (3 * sizeof(void *) + 4 * sizeof(int)) + (size_t)k * 2 * sizeof(void *) + sizeof(int) + 4 * 8;
}

/* Host RAM the kernel reports as available (bytes), 0 when unknown. */
static size_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256]; size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

/* Expert ids of one layer, most routed first (ties: lower id); identity without counts. */
static void popularity_order(const int64_t *cnt, int n, int *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    if (!cnt) return;
    for (int i = 1; i < n; i++) { /* insertion sort: stable, n <= 4096 once per layer */
        int v = order[i], j = i;
        while (j > 0 && cnt[order[j - 1]] < cnt[v]) { order[j] = order[j - 1]; j--; }
        order[j] = v;
    }
}

/* Builds layer l's expert cache: S static experts and C LFU slots (order[0..S+C) start resident),
 * every other expert's record in pinned host RAM at hrec (device address hrec_dev). */
static int cache_setup(gpu_exec *g, dlayer *l, const hm_layer *ly, int n_expert, int k, int S, int C, const int *order,
                       uint8_t *hrec, uint8_t *hrec_dev, hm_expert *views, char *err, size_t errlen) {
    const hm_ffn_w *f0 = &ly->experts[0].host;
    dcache hc;
    memset(&hc, 0, sizeof hc);
    hc.n_expert = n_expert; hc.n_static = S; hc.n_slots = C;
    hc.stride = rec_layout(f0, &hc.off_up, &hc.off_down);
    dexperts *x = &l->exps;
    x->n = n_expert; x->type_gu = f0->gate.type; x->type_down = f0->down.type;
    for (int e = 0; e < n_expert; e++) {
        const hm_ffn_w *f = &ly->experts[e].host;
        if (f->gate.type != x->type_gu || f->up.type != x->type_gu || f->down.type != x->type_down ||
            f->gate.nbytes != f0->gate.nbytes || f->up.nbytes != f0->up.nbytes || f->down.nbytes != f0->down.nbytes)
            return fail(err, errlen, "gpu: experts of one layer must share gate/up and down types and sizes (expert %d differs)", e);
    }
    const int R = S + C;
    g->cat = VRAM_EXPERTS;
    if (!(hc.dev = (uint8_t *)dalloc(g, (size_t)(R ? R : 1) * hc.stride, err, errlen))) return -1;
    int *hidx = (int *)malloc(sizeof(int) * (3 * (size_t)n_expert + R + 1)), *slot_of = hidx + n_expert,
        *owner = slot_of + n_expert;
    float *score = (float *)calloc(n_expert, sizeof(float));
    const int nt = n_expert + 1;   /* entry n_expert: the zero record (--cold cpu: the CPU's experts) */
    const void **tab = (const void **)malloc(3 * sizeof(void *) * nt);
    int rc = -1;
    for (int e = 0; e < n_expert; e++) hidx[e] = slot_of[e] = -1;
    for (int r = 0; r < R; r++) { owner[r] = order[r]; slot_of[order[r]] = r; }
    for (int i = S, nh = 0; i < n_expert; i++) hidx[order[i]] = nh++;
    /* the cold experts' host records, on upload_threads() threads (one: on this one) */
    hm_host_parallel(n_expert, upload_threads() > 1 ? (unsigned)upload_threads() : 1, [&](int e0, int e1) {
        for (int e = e0; e < e1; e++) {
            if (hidx[e] < 0) continue;
            const hm_ffn_w *f = &ly->experts[e].host;
            uint8_t *h = hrec + (size_t)hidx[e] * hc.stride;
            memcpy(h, f->gate.data, f->gate.nbytes);
            memcpy(h + hc.off_up, f->up.data, f->up.nbytes);
            memcpy(h + hc.off_down, f->down.data, f->down.nbytes);
        }
    });
    for (int e = 0; e < n_expert; e++) {
        const hm_ffn_w *f = &ly->experts[e].host;
        const hm_tensor *mt[3] = { &f->gate, &f->up, &f->down };
        const size_t off[3] = { 0, hc.off_up, hc.off_down };
        uint8_t *base;
        if (hidx[e] >= 0) {
            uint8_t *h = hrec + (size_t)hidx[e] * hc.stride;
            if (views) {   /* the CPU workers read the pinned copy */
                views[e] = ly->experts[e];
                views[e].host.gate.data = h; views[e].host.up.data = h + off[1]; views[e].host.down.data = h + off[2];
            }
        } else if (views)
            views[e] = ly->experts[e];
        if (slot_of[e] >= 0) {
            base = hc.dev + (size_t)slot_of[e] * hc.stride;
            for (int i = 0; i < 3; i++)
                if (cudaMemcpy(base + off[i], mt[i]->data, mt[i]->nbytes, cudaMemcpyHostToDevice) != cudaSuccess) {
                    fail(err, errlen, "cuda: upload of expert %d failed", e);
                    goto done;
                }
        } else
            base = hrec_dev + (size_t)hidx[e] * hc.stride;
        for (int i = 0; i < 3; i++) tab[(size_t)i * nt + e] = base + off[i];
    }
    {
        const size_t off[3] = { 0, hc.off_up, hc.off_down };
        for (int i = 0; i < 3; i++) tab[(size_t)i * nt + n_expert] = g->zero_rec ? (const uint8_t *)g->zero_rec + off[i] : NULL;
    }
    if (!(x->gate = (const void **)upload(g, tab, nt * sizeof(void *), err, errlen)) ||
        !(x->up = (const void **)upload(g, tab + nt, nt * sizeof(void *), err, errlen)) ||
        !(x->down = (const void **)upload(g, tab + 2 * (size_t)nt, nt * sizeof(void *), err, errlen)) ||
        !(hc.hidx = (int *)upload(g, hidx, sizeof(int) * n_expert, err, errlen)) ||
        !(hc.slot_of = (int *)upload(g, slot_of, sizeof(int) * n_expert, err, errlen)) ||
        !(hc.owner = (int *)upload(g, owner, sizeof(int) * (R ? R : 1), err, errlen)) ||
        !(hc.score = (float *)upload(g, score, sizeof(float) * n_expert, err, errlen)) ||
        !(hc.miss_src = (const uint8_t **)dalloc(g, sizeof(void *) * k, err, errlen)) ||
        !(hc.miss_dst = (uint8_t **)dalloc(g, sizeof(void *) * k, err, errlen)) ||
        !(hc.miss_n = (int *)dalloc(g, sizeof(int), err, errlen)) ||
        !(hc.stats = (unsigned long long *)dalloc(g, GPU_CACHE_STATS * 8, err, errlen)))
        goto done;
    if (cudaMemset(hc.miss_n, 0, sizeof(int)) != cudaSuccess || cudaMemset(hc.stats, 0, GPU_CACHE_STATS * 8) != cudaSuccess) {
        fail(err, errlen, "cuda: memset failed");
        goto done;
    }
    hc.host = hrec_dev; hc.host_h = hrec;
    hc.copy_max = -1;
    l->cache = (dcache *)malloc(sizeof(dcache));
    *l->cache = hc;
    rc = 0;
done:
    free(hidx); free(score); free(tab);
    return rc;
}

extern "C" gpu_exec *gpu_exec_create(const hm_model *m, int dev, int n_ctx, char *err, size_t errlen) {
    return gpu_exec_create_opts(m, dev, n_ctx, NULL, err, errlen);
}

extern "C" gpu_exec *gpu_exec_create_opts(const hm_model *m, int dev, int n_ctx, const gpu_exec_opts *o, char *err, size_t errlen) {
    const hm_config *c = &m->cfg;
    gpu_exec_opts none;
    memset(&none, 0, sizeof none);
    none.n_static = none.n_slots = none.swap_max = -1; none.quiet = 1;
    if (!o) o = &none;
    size_t pin_off = 0;
    gpu_exec *g = (gpu_exec *)calloc(1, sizeof(gpu_exec));
    g->decay = o->decay > 0 ? o->decay : 0.995f;
    g->n_seq = o->n_seq > 0 ? o->n_seq : 1;
    g->pf_chunk = o->prefill_chunk > 0 ? o->prefill_chunk : 0;
    g->pf_min = o->prefill_min > 0 ? o->prefill_min : 0;
    {
        const char *pe = getenv("HOTMOE_GPU_PROFILE");
        prof.on = pe && (*pe == '1' || *pe == '2') ? *pe - '0' : 0;
        prof.quiet = prof.on == 2;
    }
    g->m = m; g->dev = dev; g->n_ctx = n_ctx;
    g->l0 = o->layer_last > 0 ? o->layer_first : 0;
    g->l1 = o->layer_last > 0 ? o->layer_last : c->n_layer;
    g->head = g->l1 == c->n_layer;
    int D = c->n_embd, ff = c->n_ff > c->n_ff_exp ? c->n_ff : c->n_ff_exp;
    if (c->n_ff_shexp > ff) ff = c->n_ff_shexp;
    if (g->l0 < 0 || g->l0 >= g->l1 || g->l1 > c->n_layer) {
        fail(err, errlen, "gpu: layers [%d, %d) outside the model's %d", g->l0, g->l1, c->n_layer);
        goto bad;
    }
    if (c->head_dim > 256 || c->head_dim % 4 || c->n_expert > 4096 || c->n_expert_used > 64) {
        fail(err, errlen, "gpu: unsupported shape (head_dim %d <= 256 and a multiple of 4, n_expert %d <= 4096, top-k %d <= 64 expected)",
             c->head_dim, c->n_expert, c->n_expert_used);
        goto bad;
    }
    {
        size_t need = gpu_exec_vram_needed_range(m, n_ctx, g->l0, g->l1, g->n_seq), fr = 0, tot = 0;
        CK(cudaSetDevice(dev));
        CK(cudaMemGetInfo(&fr, &tot));
        const double GiB = 1073741824.0;
        const size_t budget = o->gpu_mem_gib > 0 ? (size_t)(o->gpu_mem_gib * GiB) : 0, limit = budget ? budget : fr;
        g->budget = budget;
        if (o->cold != GPU_COLD_STREAM && o->cold != GPU_COLD_CPU) {
            if (need > limit) {
                fail(err, errlen, "gpu %d: the model needs %.2f GiB of VRAM (weights + KV cache for %d tokens), %s %.2f GiB%s",
                     dev, need / GiB, n_ctx, budget ? "the budget (--gpu-mem) is" : "only", limit / GiB,
                     budget ? "; --cold stream keeps cold experts in host RAM" : " are free; --cold stream with --gpu-mem keeps cold experts in host RAM");
                goto bad;
            }
        } else {
            /* the cache's plan: what is fixed (dense weights, KV, workspace, per-layer metadata),
             * then as many expert records per MoE layer as the rest of the budget holds */
            size_t experts = 0, strides = 0, max_stride = 0, meta = 0, ou, od;
            int n_moe = 0, E = c->n_expert, k = c->n_expert_used;
            for (int il = g->l0; il < g->l1; il++) {
                const hm_layer *ly = &m->layers[il];
                if (!ly->is_moe) continue;
                n_moe++;
                experts += (size_t)E * (fsz(&ly->experts[0].host) + 3 * sizeof(void *));
                const size_t st = rec_layout(&ly->experts[0].host, &ou, &od);
                strides += st;
                if (st > max_stride) max_stride = st;
                meta += cache_meta(E, k);
            }
            const size_t stg = o->staging > 0 ? 2 * (size_t)o->staging * max_stride + 6 * (size_t)(E + 1) * sizeof(void *) : 0;
            size_t fixed = need - experts + meta + stg + 4096 + 64 * (size_t)c->n_layer +   /* small buffers the estimate leaves out */
                           (o->route_io ? 2 * sizeof(int) * (size_t)c->n_layer * k : 0) +
                           (o->cold == GPU_COLD_CPU ? max_stride + sizeof(float) * (c->n_embd + 1) + sizeof(int) : 0) +
                           (o->overlap_misses ? 256 : 0) + (o->prefetch ? sizeof(float) * (E + 128) + 512 : 0);
            /* the prefill workspace of a chunk (--prefill-chunk, 1024 by default) is reserved in the
             * budget, so prompts run batched; a budget too tight for it halves the chunk (down to 64) */
            g->pf_cap = budget ? (o->prefill_chunk > 0 ? o->prefill_chunk : 1024) : 0;
            while (g->pf_cap > 64 && fixed + gpu_exec_prefill_workspace(m, g->pf_cap) > limit) g->pf_cap /= 2;
            g->pf_reserved = g->pf_cap ? gpu_exec_prefill_workspace(m, g->pf_cap) : 0;
            fixed += g->pf_reserved;
            if (fixed > limit) {
                fail(err, errlen, "gpu %d: %s %.4g GiB is too small: the dense weights, the KV cache for %d tokens and the "
                     "workspace need at least %.4g GiB (everything resident: %.4g GiB)", dev,
                     budget ? "--gpu-mem" : "free VRAM of", limit / GiB, n_ctx, fixed / GiB, need / GiB);
                goto bad;
            }
            long r = strides ? (long)((limit - fixed) / strides) : 0;
            if (r > E) r = E;
            int S = o->n_static, C = o->n_slots;
            if (S > E || C > E) {
                fail(err, errlen, "gpu: --static-experts %d / --cache-slots %d: the model has %d experts per layer", S, C, E);
                goto bad;
            }
            if (S < 0 && C < 0) { S = o->counts ? (int)(r / 4) : 0; C = (int)r - S; }
            else if (S < 0) S = (int)(r - C > 0 ? r - C : 0);
            else if (C < 0) C = (int)(r - S > 0 ? r - S : 0);
            if (S + C > E) C = E - S;
            if (fixed + (size_t)(S + C) * strides > limit) {
                fail(err, errlen, "gpu %d: %d static experts + %d cache slots per layer need %.2f GiB of VRAM, %s %.2f GiB",
                     dev, S, C, (fixed + (size_t)(S + C) * strides) / GiB, budget ? "the budget (--gpu-mem) is" : "free:", limit / GiB);
                goto bad;
            }
            g->n_static = S; g->n_slots = C;
            if (S + C < E && n_moe) {
                size_t pin = 0;
                for (int il = g->l0; il < g->l1; il++)
                    if (m->layers[il].is_moe) pin += (size_t)(E - S) * rec_layout(&m->layers[il].experts[0].host, &ou, &od);
                const size_t avail = mem_available();
                if (avail && pin > avail / 10 * 9) {
                    fail(err, errlen, "--cold %s: %.2f GiB of cold experts must be pinned in host RAM, %.2f GiB are available "
                         "(raise --gpu-mem or free host memory)", o->cold == GPU_COLD_CPU ? "cpu" : "stream", pin / GiB, avail / GiB);
                    goto bad;
                }
                if (o->ram_gib > 0 && pin > (size_t)(o->ram_gib * GiB)) {
                    fail(err, errlen, "--ram %.4g GiB: the cold experts need %.2f GiB of pinned host RAM (raise --ram or --gpu-mem)",
                         o->ram_gib, pin / GiB);
                    goto bad;
                }
                if (cudaHostAlloc(&g->pinned, pin, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
                    cudaGetLastError();
                    g->pinned = NULL;
                    fail(err, errlen, "--cold stream: cannot pin %.2f GiB of host RAM for the cold experts (cudaHostAlloc failed; "
                         "%.2f GiB available): raise --gpu-mem or free host memory", pin / GiB, avail / GiB);
                    goto bad;
                }
                g->pinned_bytes = pin;
                g->n_streamed = n_moe;
                if (o->cold == GPU_COLD_CPU) {
                    g->cat = VRAM_EXPERTS;
                    if (!(g->zero_rec = dalloc(g, max_stride, err, errlen))) goto bad;
                    CK(cudaMemset(g->zero_rec, 0, max_stride));
                    /* the hand-off jobs and their x/out vectors, pinned and mapped */
                    g->n_jobs = n_moe;
                    g->jobs_bytes = (size_t)n_moe * (sizeof(hjob) + 2 * ALIGN256(sizeof(float) * HJOB_MAX_T * c->n_embd));
                    if (cudaHostAlloc((void **)&g->jobs, g->jobs_bytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
                        cudaGetLastError(); g->jobs = NULL;
                        fail(err, errlen, "--cold cpu: cannot pin %zu bytes for the CPU hand-off", g->jobs_bytes);
                        goto bad;
                    }
                    memset(g->jobs, 0, g->jobs_bytes);
                    uint8_t *hb = (uint8_t *)(g->jobs + n_moe), *db = NULL;
                    CK(cudaHostGetDevicePointer((void **)&db, g->jobs, 0));
                    db += (size_t)n_moe * sizeof(hjob);
                    for (int j = 0; j < n_moe; j++) {
                        const size_t v = ALIGN256(sizeof(float) * HJOB_MAX_T * c->n_embd), off = 2 * v * j;
                        g->jobs[j].x = (float *)(hb + off); g->jobs[j].out = (float *)(hb + off + v);
                        g->jobs[j].dx = (float *)(db + off); g->jobs[j].dout = (float *)(db + off + v);
                    }
                    g->jobs_layer = (int *)malloc(sizeof(int) * n_moe);
                    g->cpu_experts = (hm_expert *)calloc((size_t)c->n_layer * E, sizeof(hm_expert));
                    CK(cudaMallocHost(&g->h_step, sizeof(uint32_t)));
                    *g->h_step = 0;
                    g->cat = VRAM_WORKSPACE;
                    if (!(g->d_step = (int *)dalloc(g, sizeof(int), err, errlen))) goto bad;
                }
            }
        }
    }
    CK(cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&g->s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&g->ev_fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&g->ev_warm, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&g->ev_join, cudaEventDisableTiming));
    g->L = (dlayer *)calloc(c->n_layer, sizeof(dlayer));
    for (int il = g->l0; il < g->l1; il++) {
        const hm_layer *ly = &m->layers[il];
        dlayer *l = &g->L[il];
        g->cat = VRAM_WEIGHTS;
        l->attn_norm = upload_vec(g, &ly->attn_norm, err, errlen);
        l->ffn_norm = upload_vec(g, &ly->ffn_norm, err, errlen);
        if (!l->attn_norm || !l->ffn_norm) goto bad;
        l->bq = upload_vec(g, &ly->bq, err, errlen); l->bk = upload_vec(g, &ly->bk, err, errlen);
        l->bv = upload_vec(g, &ly->bv, err, errlen);
        l->q_norm = upload_vec(g, &ly->q_norm, err, errlen); l->k_norm = upload_vec(g, &ly->k_norm, err, errlen);
        l->router_bias = upload_vec(g, &ly->router_bias, err, errlen);
        if (ly->wq.type == ly->wk.type) {
            /* q|k(|v) in one allocation, rows in that order, so one GEMV fills q, k (and v), which
             * are contiguous too */
            l->n_fused = ly->wv.type == ly->wq.type ? 3 : 2;
            hrows h = hrows_of(ly->wq.data, ly->wq.ne[1], ly->wq.nbytes);
            hrows_add(&h, ly->wk.data, ly->wk.ne[1], ly->wk.nbytes);
            if (l->n_fused == 3) hrows_add(&h, ly->wv.data, ly->wv.ne[1], ly->wv.nbytes);
            if (upload_rows(g, &l->wqkv, ly->wq.type, ly->wq.ne[0], h, err, errlen)) goto bad;
            if (l->n_fused == 2 && upload_w(g, &l->wv, &ly->wv, err, errlen)) goto bad;
        } else if (upload_w(g, &l->wq, &ly->wq, err, errlen) || upload_w(g, &l->wk, &ly->wk, err, errlen) ||
                   upload_w(g, &l->wv, &ly->wv, err, errlen))
            goto bad;
        if (upload_w(g, &l->wo, &ly->wo, err, errlen)) goto bad;
        l->is_moe = ly->is_moe;
        const hm_ffn_w *single = ly->is_moe ? (c->n_shared_exp ? &ly->shexp : NULL) : &ly->dense;
        if (single) { l->has_single = 1; if (upload_experts(g, &l->single, &single, 1, 1, err, errlen)) goto bad; }
        if (!ly->is_moe) continue;
        if (upload_mat(g, &l->router, &ly->router, err, errlen)) goto bad;
        if (g->n_streamed) {
            size_t ou, od, st = rec_layout(&ly->experts[0].host, &ou, &od);
            int *order = (int *)malloc(sizeof(int) * c->n_expert);
            popularity_order(o->counts ? o->counts + (size_t)il * c->n_expert : NULL, c->n_expert, order);
            uint8_t *hdev = NULL;
            if (cudaHostGetDevicePointer((void **)&hdev, g->pinned, 0) != cudaSuccess) {
                free(order);
                fail(err, errlen, "cuda: no device address for the pinned expert records");
                goto bad;
            }
            int rc = cache_setup(g, l, ly, c->n_expert, c->n_expert_used, g->n_static, g->n_slots, order,
                                 (uint8_t *)g->pinned + pin_off, hdev + pin_off,
                                 g->cpu_experts ? g->cpu_experts + (size_t)il * c->n_expert : NULL, err, errlen);
            free(order);
            if (rc) goto bad;
            pin_off += (size_t)(c->n_expert - g->n_static) * st;
            if (st > g->rec_bytes) g->rec_bytes = st;
            continue;
        }
        g->cat = VRAM_EXPERTS;
        const hm_ffn_w **ws = (const hm_ffn_w **)malloc(c->n_expert * sizeof(void *));
        for (int e = 0; e < c->n_expert; e++) ws[e] = &ly->experts[e].host;
        int rc = upload_experts(g, &l->exps, ws, c->n_expert, c->n_expert_used, err, errlen);
        free(ws);
        if (rc) goto bad;
    }
    g->cat = VRAM_WEIGHTS;
    if (g->head && (!(g->out_norm = upload_vec(g, &m->output_norm, err, errlen)) || upload_w(g, &g->output, &m->output, err, errlen)))
        goto bad;
    {
        size_t kv = (size_t)g->n_seq * (g->l1 - g->l0) * n_ctx * c->kv_dim * sizeof(float);
#define A(ptr, n) if (!(ptr = (float *)dalloc(g, sizeof(float) * (size_t)(n), err, errlen))) goto bad
        g->cat = VRAM_KV;
        if (!(g->kc = (float *)dalloc(g, kv, err, errlen)) || !(g->vc = (float *)dalloc(g, kv, err, errlen)) ||
            !(g->k16 = dalloc(g, pf_kv16_bytes(m, n_ctx), err, errlen)) || !(g->vt16 = dalloc(g, pf_kv16_bytes(m, n_ctx), err, errlen)))
            goto bad;
        g->cat = VRAM_WORKSPACE;
        A(g->x, D); A(g->xn, D); A(g->xn2, D); A(g->q, c->q_dim + 2 * c->kv_dim); A(g->att, c->q_dim);
        g->k = g->q + c->q_dim; g->v = g->k + c->kv_dim; /* contiguous: the fused q|k|v GEMV writes all three */
        A(g->tmp, D); A(g->logits, c->n_vocab); A(g->rlog, c->n_expert); A(g->ew, c->n_expert_used + 1);
        A(g->act, (size_t)ff * c->n_expert_used); A(g->ey, (size_t)D * (c->n_expert_used + 1)); A(g->sh, D); A(g->sh_act, ff);
        A(g->part, op_attn_part_floats(c->n_head, c->n_head_kv, c->head_dim));
        {   /* the activations' q8 records (HOTMOE_XQ=0: every GEMV block quantizes its x itself) */
            const char *e = getenv("HOTMOE_XQ");
            const size_t bn = gpu_q8_records_bytes(D), ba = gpu_q8_records_bytes(c->q_dim);
            if (!(e && e[0] == '0') && bn && ba &&
                (!(g->xq_n = dalloc(g, bn, err, errlen)) || !(g->xq_att = dalloc(g, ba, err, errlen)) ||
                 !(g->xq_n2 = dalloc(g, bn, err, errlen))))
                goto bad;
        }
        if (!(g->ids = (int *)dalloc(g, sizeof(int) * 64, err, errlen)) || !(g->zero_id = (int *)dalloc(g, sizeof(int), err, errlen)) ||
            !(g->d_pos = (int *)dalloc(g, sizeof(int), err, errlen)) ||
            !(g->d_next = (int *)dalloc(g, sizeof(int) * GPU_BATCH_MAX, err, errlen)) ||
            !(g->am_scratch = dalloc(g, op_argmax_scratch_bytes(GPU_BATCH_MAX), err, errlen)) ||
            !(g->head_tk = (unsigned *)dalloc(g, 2 * sizeof(unsigned), err, errlen)))
            goto bad;
        CK(cudaMemset(g->zero_id, 0, sizeof(int)));
        CK(cudaMemset(g->head_tk, 0, 2 * sizeof(unsigned)));
        {   /* valid, distinct ids before any router ran (HOTMOE_DIAG_SKIP=gateup, topk: the experts then stay 0, 1, ...) */
            int h[64];
            for (int i = 0; i < 64; i++) h[i] = c->n_expert > 0 ? i % c->n_expert : 0;
            CK(cudaMemcpy(g->ids, h, sizeof h, cudaMemcpyHostToDevice));
        }
        CK(cudaMemset(g->am_scratch, 0, op_argmax_scratch_bytes(GPU_BATCH_MAX)));
        if (g->n_seq > 1) {   /* batched decode: GPU_BATCH_MAX rows of each buffer (in the estimate: batch_workspace) */
            const batch_sizes b = batch_rows(c);
            const size_t R = GPU_BATCH_MAX;
            A(g->bx, R * b.x); A(g->bxn, R * b.x); A(g->btmp, R * b.x); A(g->bsh, R * b.x); A(g->bq, R * b.q);
            A(g->batt, R * b.att); A(g->blogits, R * b.logits); A(g->brlog, R * b.rlog); A(g->bew, R * b.ew);
            A(g->bact, R * b.act); A(g->bey, R * b.ey); A(g->bsh_act, R * b.sh_act); A(g->bpart, R * b.part);
            if (!(g->bxq_att = dalloc(g, R * batch_rec(c->q_dim), err, errlen)) || !(g->bxq_n = dalloc(g, R * batch_rec(D), err, errlen)))
                goto bad;
            if (!(g->bids = (int *)dalloc(g, sizeof(int) * R * c->n_expert_used, err, errlen)) ||
                !(g->bzero = (int *)dalloc(g, sizeof(int) * R, err, errlen)) ||
                !(g->bpos = (int *)dalloc(g, sizeof(int) * R, err, errlen)) || !(g->bseq = (int *)dalloc(g, sizeof(int) * R, err, errlen)))
                goto bad;
            CK(cudaMemset(g->bzero, 0, sizeof(int) * R));
            CK(cudaMallocHost(&g->hb_x, sizeof(float) * R * D));
            CK(cudaMallocHost(&g->hb_xout, sizeof(float) * R * D));
            CK(cudaMallocHost(&g->hb_logits, sizeof(float) * R * c->n_vocab));
            CK(cudaMallocHost(&g->hb_pos, sizeof(int) * R));
            CK(cudaMallocHost(&g->hb_seq, sizeof(int) * R));
            /* the cache kernel takes the union of the tokens' choices, at most 64 */
            g->nb_max = c->n_expert_used * GPU_BATCH_MAX <= 64 ? GPU_BATCH_MAX : 64 / c->n_expert_used;
        }
        CK(cudaMallocHost(&g->h_x, sizeof(float) * D));
        CK(cudaMallocHost(&g->h_logits, sizeof(float) * c->n_vocab));
        CK(cudaMallocHost(&g->h_pos, sizeof(int)));
        CK(cudaMallocHost(&g->h_next, sizeof(int) * GPU_BATCH_MAX));
        CK(cudaMallocHost(&g->h_xout, sizeof(float) * D));
        if (o->route_io) {
            const size_t nk = (size_t)c->n_layer * c->n_expert_used;
            if (!(g->d_rec = (int *)dalloc(g, sizeof(int) * nk, err, errlen)) || !(g->d_replay = (int *)dalloc(g, sizeof(int) * nk, err, errlen)))
                goto bad;
            CK(cudaMallocHost(&g->h_rec, sizeof(int) * nk));
            CK(cudaMallocHost(&g->h_replay, sizeof(int) * nk));
            for (size_t i = 0; i < nk; i++) g->h_rec[i] = g->h_replay[i] = -1;
            CK(cudaMemset(g->d_rec, 0xFF, sizeof(int) * nk));
        }
#undef A
    }
    if (g->n_streamed && o->staging > 0) {   /* prefill staging: two buffers, tables, a copy stream */
        g->cat = VRAM_WORKSPACE;
        g->stage_n = o->staging < c->n_expert ? o->staging : c->n_expert;
        for (int b = 0; b < 2; b++) {
            if (!(g->stage[b] = (uint8_t *)dalloc(g, (size_t)g->stage_n * g->rec_bytes, err, errlen)) ||
                !(g->stage_tab[b] = (const void **)dalloc(g, 3 * sizeof(void *) * (size_t)(c->n_expert + 1), err, errlen)))
                goto bad;
            CK(cudaMallocHost((void **)&g->stage_htab[b], 3 * sizeof(void *) * (size_t)(c->n_expert + 1)));
            CK(cudaEventCreateWithFlags(&g->stage_done[b], cudaEventDisableTiming));
            CK(cudaEventCreateWithFlags(&g->stage_free[b], cudaEventDisableTiming));
        }
        CK(cudaStreamCreateWithFlags(&g->stage_s, cudaStreamNonBlocking));
    }
    if (g->jobs) {   /* --cold cpu: each streamed layer's cache hands its misses to its job */
        hjob *dj = NULL;
        CK(cudaHostGetDevicePointer((void **)&dj, g->jobs, 0));
        for (int il = g->l0, j = 0; il < g->l1; il++) {
            dcache *ca = g->L[il].cache;
            if (!ca) continue;
            ca->cpu = 1;
            if (o->swap_interval > 0) { ca->async = 0; ca->copy_max = 0; }   /* the exchange moves experts, between steps */
            else { ca->async = o->swap_async; ca->copy_max = o->swap_max >= 0 ? o->swap_max : 1; }
            g->async_copies |= ca->async && ca->copy_max != 0;
            g->swap_async = ca->async;
            ca->job = dj + j; ca->job_h = j; ca->step = g->d_step; ca->xn = g->xn; ca->w = g->ew; ca->n_embd = D;
            g->jobs_layer[j++] = il;
        }
        int nt = o->cpu_threads;
        if (nt <= 0) { long n = sysconf(_SC_NPROCESSORS_ONLN); nt = n > 2 ? (int)n - 2 : 1; }   /* a core each for the main and dispatcher threads */
        if (nt > HM_WORKERS_MAX) nt = HM_WORKERS_MAX;
        g->hostfn = o->cpu_handoff == 1;
        if (hybrid_start(g, nt, o->cpu_first_core, err, errlen)) goto bad;
        CK(cudaStreamCreateWithFlags(&g->side, cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&g->side_fork, cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&g->side_join, cudaEventDisableTiming));
        g->cpu_threads = nt;
        if (o->swap_interval > 0) {
            g->xch_interval = o->swap_interval; g->xch_max = o->swap_max >= 0 ? o->swap_max : 64;
            g->xch_floor = o->swap_floor > 0 ? (float)o->swap_floor : 4.f; g->xch_hyst = o->swap_hyst > 0 ? (float)o->swap_hyst : 2.f;
            g->xch_per_layer = o->swap_per_layer;
        }
    }
    if (o->overlap_misses && g->n_streamed) {   /* --overlap-misses: the copies on the side stream */
        g->cat = VRAM_WORKSPACE;
        if (!(g->ids_miss = (int *)dalloc(g, sizeof(int) * 64, err, errlen))) goto bad;
        if (!g->side) CK(cudaStreamCreateWithFlags(&g->side, cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&g->ov_fork, cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&g->ov_join, cudaEventDisableTiming));
        for (int il = g->l0; il < g->l1; il++)
            if (g->L[il].cache && !g->L[il].cache->async) g->L[il].cache->ids_miss = g->ids_miss;
    }
    if (o->prefetch && g->n_streamed && !g->xch_interval) {   /* --prefetch (the exchange owns the slots when on) */
        g->cat = VRAM_WORKSPACE;
        if (!(g->pf_rlog = (float *)dalloc(g, sizeof(float) * (c->n_expert + 128), err, errlen)) ||
            !(g->pf_ids = (int *)dalloc(g, sizeof(int) * 64, err, errlen)))
            goto bad;
        g->pf_w = g->pf_rlog + c->n_expert;
        CK(cudaStreamCreateWithFlags(&g->side2, cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&g->pf_fork, cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&g->pf_join, cudaEventDisableTiming));
        g->prefetch = 1;
    }
    if (g->n_streamed) hm_carveout_def.store(-1);   /* cold experts: each kernel's carveout the driver's (launch.cuh) */
    g->graphs = (cudaGraphExec_t *)calloc((size_t)STEP_MODES * STEP_FORMS * g->n_seq, sizeof(cudaGraphExec_t));
    g->att_long = op_attn_long_from(c->n_head, c->n_head_kv, c->head_dim);
    for (int q = 0; q < g->n_seq; q++)
        if (capture(g, 0, 1, q, step_graph(g, q, 1), err, errlen) || capture(g, 0, 0, q, step_graph(g, q, 0), err, errlen)) goto bad;
    if ((o->cold == GPU_COLD_STREAM || o->cold == GPU_COLD_CPU) && !o->quiet) {
        const double GiB = 1073741824.0;
        const char *mode = o->cold == GPU_COLD_CPU ? "cpu" : "stream";
        if (g->n_streamed)
            fprintf(stderr, "gpu %d: --cold %s: %d MoE layers x %d experts: %d static + %d LFU slots in VRAM, %d cold per layer "
                    "in %.2f GiB of pinned host RAM (%.1f MiB per expert)%s\n", dev, mode, g->n_streamed, c->n_expert, g->n_static,
                    g->n_slots, c->n_expert - g->n_static - g->n_slots, g->pinned_bytes / GiB, g->rec_bytes / 1048576.0,
                    g->pool ? "; misses beyond the swap-ins on the CPU workers" : "");
        if (g->pool) fprintf(stderr, "gpu %d: cpu workers: %s; swap-ins per layer and step: %d (side stream)\n", dev,
                             workers_describe(g->pool), o->swap_max >= 0 ? o->swap_max : 1);
        if (!g->n_streamed)
            fprintf(stderr, "gpu %d: --cold %s: every expert fits in the budget; nothing is cold\n", dev, mode);
        fprintf(stderr, "gpu %d: VRAM: weights %.2f GiB, experts %.2f GiB, KV cache %.2f GiB, workspace %.3f GiB = %.2f GiB; "
                "prefill chunk of %d tokens %.2f GiB (reserved, allocated at the first prompt) = %.2f GiB%s\n", dev,
                g->vram_by[VRAM_WEIGHTS] / GiB, g->vram_by[VRAM_EXPERTS] / GiB, g->vram_by[VRAM_KV] / GiB,
                g->vram_by[VRAM_WORKSPACE] / GiB, g->vram / GiB, g->pf_cap, g->pf_reserved / GiB, (g->vram + g->pf_reserved) / GiB,
                o->gpu_mem_gib > 0 ? " (within --gpu-mem)" : "");
    }
    up_pool_free(g);
    return g;
bad:
    gpu_exec_free(g);
    return NULL;
}

extern "C" int gpu_exec_forward(gpu_exec *g, int32_t token, int pos, float *logits, char *err, size_t errlen) {
    return gpu_exec_forward_seq(g, 0, token, pos, logits, err, errlen);
}

extern "C" int gpu_exec_forward_seq(gpu_exec *g, int seq, int32_t token, int pos, float *logits, char *err, size_t errlen) {
    if (!g->head || g->l0) return fail(err, errlen, "gpu: this executor is a pipeline stage (layers %d..%d): use gpu_exec_forward_stage",
                                      g->l0, g->l1 - 1);
    return gpu_exec_forward_stage(g, seq, token, NULL, pos, logits, NULL, err, errlen);
}

/* --swap-interval N: the histogram exchange between two steps, every N tokens */
static int exchange_due(gpu_exec *g, char *err, size_t errlen) {
    if (!g->xch_interval || g->tokens < g->xch_next) return 0;
    g->xch_next = g->tokens + g->xch_interval;
    return g->tokens > 0 && hybrid_exchange(g, err, errlen) ? -1 : 0;
}

/* A step whose CPU experts did not come back in time (the GPU's wait gave up) fails, naming the layer. */
static int late_jobs(gpu_exec *g, char *err, size_t errlen) {
    for (int h = 0; h < g->n_jobs; h++)
        if (g->jobs[h].late) {
            const unsigned st = g->jobs[h].late;
            g->jobs[h].late = 0;
            char where[160] = "", pool[200] = "";
            if (g->dispatcher) {
                const int dh = g->disp_h;
                snprintf(where, sizeof where, "; the dispatcher at layer %d's job, %s, its last request there %u",
                         dh >= 0 && dh < g->n_jobs ? g->jobs_layer[dh] : -1, g->disp_phase ? "handing it to the workers" : "waiting for its request",
                         (unsigned)g->disp_last);
            }
            if (g->pool) workers_debug(g->pool, pool, sizeof pool);
            return fail(err, errlen, "gpu: the CPU workers did not return layer %d's experts of step %u within 5 s "
                        "(its request %u, done %u%s; workers: %s)", g->jobs_layer[h], st, g->jobs[h].req, g->jobs[h].done, where, pool);
        }
    return 0;
}

/* A token's input row into out (n_embd, pinned): x_in (the residual stream from the previous stage)
 * when given, else the token's embedding (host-side table). */
static int step_input(gpu_exec *g, int32_t token, const float *x_in, float *out, char *err, size_t errlen) {
    const hm_config *c = &g->m->cfg;
    if (x_in) { memcpy(out, x_in, sizeof(float) * c->n_embd); return 0; }
    if (token < 0 || token >= c->n_vocab) return fail(err, errlen, "gpu: token %d outside the vocabulary of %d", token, c->n_vocab);
    const hm_tensor *te = &g->m->tok_embd;
    hm_type_get(te->type)->to_float((const uint8_t *)te->data + (size_t)token * hm_row_size(te->type, te->ne[0]), out, te->ne[0]);
    return 0;
}

/* Before a step of n tokens: the device, the exchange when it is due, the token and step counters
 * (the dispatcher expects steps 1, 2, ... in order). */
static int step_begin(gpu_exec *g, int n, char *err, size_t errlen) {
    CK(cudaSetDevice(g->dev));   /* stages of a pipeline live on different devices of one process */
    if (exchange_due(g, err, errlen)) return -1;
    g->tokens += n;
    if (g->h_step) ++*g->h_step;
    return 0;
bad:
    return -1;
}

/* HOTMOE_STEP_GAP=1 (a diagnostic): events around every step's graph launch; at exit, the GPU's
 * time inside the steps and between them (the end of one step's graph to the start of the next:
 * what the host's synchronize, input and launch leave the GPU idle), as means over the steps */
#define GAPM_N 65536
static struct { int on; cudaEvent_t beg, end, prev; double in_ms, gap_ms; long n; float gaps[GAPM_N]; } gapm;   /* on: 0 unread (the environment is read at the first step), 1 off, 2 on */
static int gapm_cmp(const void *a, const void *b) { const float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }
static void gapm_report(void) {
    if (gapm.n < 2) return;
    const long m = gapm.n - 1 < GAPM_N ? gapm.n - 1 : GAPM_N;
    qsort(gapm.gaps, m, sizeof(float), gapm_cmp);
    fprintf(stderr, "hotmoe: HOTMOE_STEP_GAP: %ld steps, %.2f us a step in the graph (mean), between steps %.2f us (mean), "
            "%.2f us (median), %.2f us (10th percentile)\n", gapm.n, 1e3 * gapm.in_ms / gapm.n, 1e3 * gapm.gap_ms / (gapm.n - 1),
            1e3 * gapm.gaps[m / 2], 1e3 * gapm.gaps[m / 10]);
}
static void gapm_before(cudaStream_t s) {
    if (!gapm.on) {
        const char *e = getenv("HOTMOE_STEP_GAP");
        gapm.on = e && *e == '1' ? 2 : 1;
        if (gapm.on == 2) {
            cudaEventCreate(&gapm.beg); cudaEventCreate(&gapm.end); cudaEventCreate(&gapm.prev);
            atexit(gapm_report);
        }
    }
    if (gapm.on == 2) cudaEventRecord(gapm.beg, s);
}
static void gapm_after(cudaStream_t s) {   /* after the step's launch; the caller synchronizes next */
    if (gapm.on == 2) cudaEventRecord(gapm.end, s);
}
static void gapm_done(void) {   /* after the synchronize */
    if (gapm.on != 2) return;
    float a = 0, b = 0;
    cudaEventElapsedTime(&a, gapm.beg, gapm.end);
    if (gapm.n > 0 && cudaEventElapsedTime(&b, gapm.prev, gapm.beg) == cudaSuccess) {
        gapm.gap_ms += b;
        if (gapm.n - 1 < GAPM_N) gapm.gaps[gapm.n - 1] = b;
    }
    gapm.in_ms += a;
    gapm.n++;
    cudaEvent_t t = gapm.prev; gapm.prev = gapm.end; gapm.end = t;
}

/* One step of sequence seq: logits (n_vocab) or next (the greedy token) from the stage with the
 * head, x_out from the others; neither: the step without the head. */
static int forward_one(gpu_exec *g, int seq, int32_t token, const float *x_in, int pos, float *logits, int32_t *next, float *x_out,
                       char *err, size_t errlen) {
    const hm_config *c = &g->m->cfg;
    if (next && !g->head) return fail(err, errlen, "gpu: stage of layers %d..%d has no output head for a greedy token", g->l0, g->l1 - 1);
    const int mode = next ? 2 : logits ? 1 : 0;
    if (seq < 0 || seq >= g->n_seq) return fail(err, errlen, "gpu: sequence %d outside [0, %d)", seq, g->n_seq);
    if (pos < 0 || pos >= g->n_ctx) return fail(err, errlen, "gpu: position %d outside the context of %d", pos, g->n_ctx);
    if (!g->head && !x_out) return fail(err, errlen, "gpu: stage of layers %d..%d: x_out expected", g->l0, g->l1 - 1);
    if (step_input(g, token, x_in, g->h_x, err, errlen)) return -1;
    *g->h_pos = pos;
    if (step_begin(g, 1, err, errlen)) return -1;
    /* mode 2 profiles one executor's steps of sequence 0 with logits; the others run as usual */
    int profiled;
    profiled = prof.on == 1 || (prof.on == 2 && seq == 0 && mode == 1 && (!prof.owner || prof.owner == g));
    if (profiled && prof.on == 2 && !prof.graph) {   /* the step once more, with the marks: event-record nodes */
        prof.owner = g; prof.n = 0; prof.quiet = 0;
        const int rc = capture(g, 0, 1, 0, &prof.graph, err, errlen);
        prof.quiet = 1; prof.graph_n = prof.n;
        if (rc) { prof.owner = NULL; prof.graph = NULL; return -1; }
    }
#ifdef HM_KTRACE
    static long kt_step = -1, kt_n = 0;
    if (kt_step < 0) { const char *e = getenv("HOTMOE_KTRACE"); kt_step = e ? atol(e) : 0; }
    const int traced = kt_step > 0 && ++kt_n == kt_step && !profiled;
    if (traced) { CK(cudaStreamSynchronize(g->s)); for (hm_kt_reader rd : hm_kt_readers()) rd(NULL, 0); }   /* cleared */
#endif
    if (profiled && prof.on == 1) {
        prof.n = 0;
        record_step(g, mode, seq, 0);   /* the profile times the one-round attention, as its graph (prof.graph) does */
    } else {
        if (profiled) prof.n = prof.graph_n;
        const int form = step_form(g, pos);
        if (!profiled && !*step_graph(g, seq, mode, form) && capture(g, 0, mode, seq, step_graph(g, seq, mode, form), err, errlen, form))
            return -1;
        gapm_before(g->s);
        CK(cudaGraphLaunch(profiled ? prof.graph : *step_graph(g, seq, mode, form), g->s));
        gapm_after(g->s);
    }
    CK(cudaStreamSynchronize(g->s));
    if (!profiled) gapm_done();
#ifdef HM_KTRACE
    if (traced) kt_print(kt_step, pos);
#endif
    if (profiled) prof_add();
    if (late_jobs(g, err, errlen)) return -1;
    if (logits && g->head) memcpy(logits, g->h_logits, sizeof(float) * c->n_vocab);
    if (next) *next = *g->h_next;
    if (!g->head) memcpy(x_out, g->h_xout, sizeof(float) * c->n_embd);
    if ((!g->head || g->l0) && g->pool) workers_park(g->pool);   /* a stage: the other stage's workers get the cores */
    return 0;
bad:
    return -1;
}

extern "C" int gpu_exec_forward_stage(gpu_exec *g, int seq, int32_t token, const float *x_in, int pos, float *logits, float *x_out,
                                      char *err, size_t errlen) {
    return forward_one(g, seq, token, x_in, pos, logits, NULL, x_out, err, errlen);
}

extern "C" int gpu_exec_forward_greedy(gpu_exec *g, int seq, int32_t token, const float *x_in, int pos, int32_t *next, char *err,
                                       size_t errlen) {
    if (!next) return fail(err, errlen, "gpu: a greedy step needs somewhere to put its token");
    if (!x_in && g->l0) return fail(err, errlen, "gpu: stage of layers %d..%d: x_in expected", g->l0, g->l1 - 1);
    return forward_one(g, seq, token, x_in, pos, NULL, next, NULL, err, errlen);
}

/* HOTMOE_CHAIN: gpu_exec_greedy_chain runs (unset or 1, the default: +1.3% on air, +1.2% on a3b in the
 * forty-first pass, the same tokens; 0: it answers -2, and greedy decoding steps token by token) */
static int chain_on(void) {
    static std::atomic<int> c(-1);
    return hm_env_digit("HOTMOE_CHAIN", 0, 1, 1, c) == 1;
}

/* the chain's table, ring and events, made at its first use: 0, or -1 with err set */
static int chain_setup(gpu_exec *g, char *err, size_t errlen) {
    if (g->d_embd) return 0;
    const hm_tensor *te = &g->m->tok_embd;
    const int cat = g->cat;
    g->cat = VRAM_WEIGHTS;
    const void *d = upload(g, te->data, te->nbytes, err, errlen);
    g->cat = cat;
    if (!d) return -1;
    if (!(g->d_ring_n = (unsigned *)dalloc(g, sizeof(unsigned), err, errlen))) return -1;
    if (cudaHostAlloc((void **)&g->h_ring, sizeof(int) * GPU_CHAIN_RING, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer((void **)&g->d_ring, g->h_ring, 0) != cudaSuccess) {
        cudaGetLastError();
        return fail(err, errlen, "cuda: no mapped pinned ring for the greedy chain");
    }
    for (int i = 0; i < GPU_CHAIN_RING; i++)
        if (cudaEventCreateWithFlags(&g->ev_chain[i], cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            return fail(err, errlen, "cuda: no events for the greedy chain");
        }
    g->embd_row = hm_row_size(te->type, te->ne[0]);
    g->d_embd = (void *)d;
    return 0;
}

extern "C" int gpu_exec_greedy_chain(gpu_exec *g, int seq, int32_t token, int pos, int n, int32_t *out,
                                     int (*stop)(void *user, int i, int32_t token), void *user, char *err, size_t errlen) {
    const hm_config *c = &g->m->cfg;
    const hm_tensor *te = &g->m->tok_embd;
    if (!chain_on()) { fail(err, errlen, "gpu: the greedy chain is off (HOTMOE_CHAIN=0)"); return -2; }
    if (g->chain_failed) { fail(err, errlen, "gpu: the greedy chain's setup failed before; stepping token by token"); return -2; }
    if (!g->head || g->l0 || g->d_rec || g->d_replay || g->h_step || g->n_streamed || g->n_jobs || g->xch_interval || prof.on ||
        !te->data || !gpu_embed_row_ok(te->type, (int)te->ne[0]) || te->ne[0] != c->n_embd) {
        fail(err, errlen, "gpu: this executor steps token by token (the greedy chain takes a whole model, its experts resident, "
             "no routing record or replay, no profile, and an embedding type the GPU dequantizes)");
        return -2;
    }
#ifdef HM_KTRACE
    fail(err, errlen, "gpu: a KTRACE build steps token by token");
    return -2;
#endif
    if (seq < 0 || seq >= g->n_seq) return fail(err, errlen, "gpu: sequence %d outside [0, %d)", seq, g->n_seq);
    if (n < 0 || pos < 0 || (long long)pos + n > g->n_ctx)
        return fail(err, errlen, "gpu: %d chained steps from position %d leave the context of %d", n, pos, g->n_ctx);
    if (token < 0 || token >= c->n_vocab) return fail(err, errlen, "gpu: token %d outside the vocabulary of %d", token, c->n_vocab);
    if (!g->d_embd && g->budget && g->vram + te->nbytes > g->budget) {   /* the table would break --gpu-mem */
        fail(err, errlen, "gpu: the greedy chain's embedding table (%.1f MiB) does not fit the --gpu-mem budget", te->nbytes / 1048576.0);
        return -2;
    }
    CK(cudaSetDevice(g->dev));
    if (chain_setup(g, err, errlen)) {   /* no VRAM or pinned memory for it: the caller steps token by token */
        g->chain_failed = 1;
        return -2;
    }
    if (!n) return 0;   /* the table and the ring made: a timed run does not pay for them */
    for (int form = step_form(g, pos); form <= step_form(g, pos + n - 1); form++)   /* the forms the steps take */
        if (!*step_graph(g, seq, 3, form) && capture(g, 0, 3, seq, step_graph(g, seq, 3, form), err, errlen, form)) return -1;
    {
        cudaStream_t s = g->s;
        *g->h_next = token;
        *g->h_pos = pos - 1;   /* each step's first kernel adds 1 */
        CK(cudaMemcpyAsync(g->d_next, g->h_next, sizeof(int), cudaMemcpyHostToDevice, s));
        CK(cudaMemcpyAsync(g->d_pos, g->h_pos, sizeof(int), cudaMemcpyHostToDevice, s));
        CK(cudaMemsetAsync(g->d_ring_n, 0, sizeof(unsigned), s));
        int queued = 0, done = 0, given = -1;   /* given: the tokens given when stop said so (-1: not stopped) */
        while (done < n) {
            while (given < 0 && queued < n && queued - done <= GPU_CHAIN_AHEAD) {
                CK(cudaGraphLaunch(*step_graph(g, seq, 3, step_form(g, pos + queued)), s));
                CK(cudaEventRecord(g->ev_chain[queued % GPU_CHAIN_RING], s));
                queued++;
                g->tokens++;
            }
            if (done == queued) break;   /* stopped, and every queued step is in */
            CK(cudaEventSynchronize(g->ev_chain[done % GPU_CHAIN_RING]));
            const int32_t t = ((volatile int *)g->h_ring)[done % GPU_CHAIN_RING];
            done++;
            if (given >= 0) continue;
            if (out) out[done - 1] = t;
            if (stop && stop(user, done - 1, t)) given = done;
        }
        return given >= 0 ? given : n;
    }
bad:
    return -1;
}

static int forward_batch(gpu_exec *g, int nb, const int *seq, const int32_t *tokens, const float *x_in, const int *pos, float *logits,
                         int32_t *next, float *x_out, char *err, size_t errlen) {
    const hm_config *c = &g->m->cfg;
    const int D = c->n_embd;
    if (next && !g->head) return fail(err, errlen, "gpu: stage of layers %d..%d has no output head for greedy tokens", g->l0, g->l1 - 1);
    if (nb == 1) return forward_one(g, seq[0], tokens ? tokens[0] : 0, x_in, pos[0], logits, next, x_out, err, errlen);
    if (!g->nb_max) return fail(err, errlen, "gpu: a batched step needs an executor with several sequences (it has %d)", g->n_seq);
    if (g->d_rec) return fail(err, errlen, "gpu: a batched step does not record or replay routing (run the sequences one by one)");
    if (nb < 1 || nb > g->nb_max) return fail(err, errlen, "gpu: a batched step takes 1 to %d tokens, found %d", g->nb_max, nb);
    if (!g->head && !x_out) return fail(err, errlen, "gpu: stage of layers %d..%d: x_out expected", g->l0, g->l1 - 1);
    if (!x_in && g->l0) return fail(err, errlen, "gpu: stage of layers %d..%d: x_in expected", g->l0, g->l1 - 1);
    for (int r = 0; r < nb; r++) {
        if (seq[r] < 0 || seq[r] >= g->n_seq) return fail(err, errlen, "gpu: sequence %d outside [0, %d)", seq[r], g->n_seq);
        for (int q = 0; q < r; q++)
            if (seq[q] == seq[r]) return fail(err, errlen, "gpu: sequence %d twice in one batched step", seq[r]);
        if (pos[r] < 0 || pos[r] >= g->n_ctx) return fail(err, errlen, "gpu: position %d outside the context of %d", pos[r], g->n_ctx);
        if (step_input(g, x_in ? 0 : tokens[r], x_in ? x_in + (size_t)r * D : NULL, g->hb_x + (size_t)r * D, err, errlen)) return -1;
        g->hb_pos[r] = pos[r]; g->hb_seq[r] = seq[r];
    }
    if (step_begin(g, nb, err, errlen)) return -1;
    cudaGraphExec_t *ge = next ? &g->bgraphs_g[nb] : &g->bgraphs[nb];
    if (prof.on == 1) {   /* HOTMOE_GPU_PROFILE=1: ungraphed, events between the op groups */
        prof.n = 0;
        record_step_batch(g, nb, next != NULL);
        CK(cudaStreamSynchronize(g->s));
        prof_add();
    } else {
        if (!*ge && capture(g, nb, next ? 2 : 1, 0, ge, err, errlen)) return -1;
        CK(cudaGraphLaunch(*ge, g->s));
        CK(cudaStreamSynchronize(g->s));
    }
    if (late_jobs(g, err, errlen)) return -1;
    if (logits && g->head) memcpy(logits, g->hb_logits, sizeof(float) * c->n_vocab * nb);
    if (next) memcpy(next, g->h_next, sizeof(int32_t) * nb);
    if (!g->head) memcpy(x_out, g->hb_xout, sizeof(float) * D * nb);
    if ((!g->head || g->l0) && g->pool) workers_park(g->pool);
    return 0;
bad:
    return -1;
}

extern "C" int gpu_exec_forward_batch(gpu_exec *g, int nb, const int *seq, const int32_t *tokens, const float *x_in, const int *pos,
                                      float *logits, float *x_out, char *err, size_t errlen) {
    return forward_batch(g, nb, seq, tokens, x_in, pos, logits, NULL, x_out, err, errlen);
}

extern "C" int gpu_exec_forward_batch_greedy(gpu_exec *g, int nb, const int *seq, const int32_t *tokens, const float *x_in,
                                             const int *pos, int32_t *next, char *err, size_t errlen) {
    if (!next) return fail(err, errlen, "gpu: a greedy step needs somewhere to put its tokens");
    return forward_batch(g, nb, seq, tokens, x_in, pos, NULL, next, NULL, err, errlen);
}

extern "C" size_t gpu_exec_vram_used(const gpu_exec *g) { return g->vram; }

extern "C" const int *gpu_exec_route_ids(const gpu_exec *g) { return g->h_rec; }
extern "C" int *gpu_exec_replay_ids(gpu_exec *g) { return g->h_replay; }

extern "C" void gpu_exec_info(const gpu_exec *g, gpu_exec_layout *out) {
    memset(out, 0, sizeof *out);
    out->vram_weights = g->vram_by[VRAM_WEIGHTS]; out->vram_experts = g->vram_by[VRAM_EXPERTS];
    out->vram_kv = g->vram_by[VRAM_KV]; out->vram_workspace = g->vram_by[VRAM_WORKSPACE]; out->vram_total = g->vram;
    out->pinned_host = g->pinned_bytes; out->n_streamed = g->n_streamed;
    out->n_static = g->n_static; out->n_slots = g->n_slots; out->expert_bytes = g->rec_bytes;
    out->cpu_threads = g->cpu_threads; out->swaps = g->swaps; out->swap_async = g->swap_async;
    out->prefill_chunk = g->pf_cap; out->prefill_reserved = g->pf_reserved; out->vram_prefill = gpu_exec_prefill_bytes(g);
    out->batch_max = g->d_rec || g->nb_max < 1 ? 1 : g->nb_max;
}

extern "C" int gpu_exec_cache_stats(gpu_exec *g, uint64_t out[GPU_CACHE_STATS], int reset, char *err, size_t errlen) {
    for (int i = 0; i < GPU_CACHE_STATS; i++) out[i] = 0;
    CK(cudaSetDevice(g->dev));
    for (int il = 0; il < g->m->cfg.n_layer; il++) {
        const dcache *c = g->L[il].cache;
        if (!c) continue;
        unsigned long long v[GPU_CACHE_STATS];
        CK(cudaMemcpy(v, c->stats, sizeof v, cudaMemcpyDeviceToHost));
        for (int i = 0; i < GPU_CACHE_STATS; i++) out[i] += v[i];
        if (reset) CK(cudaMemset(c->stats, 0, sizeof v));
    }
    return 0;
bad:
    return -1;
}

extern "C" void gpu_exec_free(gpu_exec *g) {
    if (!g) return;
    cudaSetDevice(g->dev);
    gpu_prefill_free(g);
    if (prof.on == 2 && prof.owner == g) {
        if (prof.graph) cudaGraphExecDestroy(prof.graph);
        prof.graph = NULL; prof.owner = NULL;
    }
    if (prof.on && prof.steps) {
        double tot = 0;
        for (int i = 0; i < P_COUNT; i++) tot += prof.ms[i];
        fprintf(stderr, "gpu profile over %ld steps (%s, events between op groups): %.3f ms/step\n", prof.steps,
                prof.on == 2 ? "one graph with event nodes" : "ungraphed", tot / prof.steps);
        for (int i = 0; i < P_COUNT; i++)
            if (prof.ms[i] > 0) fprintf(stderr, "  %-18s %8.1f us/step %5.1f%%\n", prof_names[i], 1e3 * prof.ms[i] / prof.steps, 100 * prof.ms[i] / tot);
        memset(prof.ms, 0, sizeof prof.ms);   /* the next executor's profile starts from zero */
        prof.steps = 0;
    }
    hybrid_stop(g);   /* before the pinned memory the workers read goes */
    up_pool_free(g);
    for (int i = 0; g->graphs && i < STEP_MODES * STEP_FORMS * g->n_seq; i++)
        if (g->graphs[i]) cudaGraphExecDestroy(g->graphs[i]);
    free(g->graphs);
    for (int i = 0; i <= GPU_BATCH_MAX; i++) {
        if (g->bgraphs[i]) cudaGraphExecDestroy(g->bgraphs[i]);
        if (g->bgraphs_g[i]) cudaGraphExecDestroy(g->bgraphs_g[i]);
    }
    if (g->output.inter) gpu_q8_inter_unregister((const void *const *)g->output.d);
    for (int il = 0; g->L && il < g->m->cfg.n_layer; il++) {   /* interleaved matrices and tables are forgotten first */
        const dmat *ms[5] = { &g->L[il].wqkv, &g->L[il].wq, &g->L[il].wk, &g->L[il].wv, &g->L[il].wo };
        for (int j = 0; j < 5; j++)
            if (ms[j]->inter) gpu_q8_inter_unregister((const void *const *)ms[j]->d);
        const dexperts *xs[2] = { &g->L[il].exps, &g->L[il].single };
        for (int j = 0; j < 2; j++) {
            if (xs[j]->gate) gpu_q8_inter_unregister((const void *const *)xs[j]->gate);
            if (xs[j]->up) gpu_q8_inter_unregister((const void *const *)xs[j]->up);
            if (xs[j]->down) gpu_q8_inter_unregister((const void *const *)xs[j]->down);
        }
    }
    for (int i = 0; i < g->n_allocs; i++) cudaFree(g->allocs[i]);
    void *hb[] = { g->hb_x, g->hb_xout, g->hb_logits, g->hb_pos, g->hb_seq };
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++)
        if (hb[i]) cudaFreeHost(hb[i]);
    if (g->h_x) cudaFreeHost(g->h_x);
    if (g->h_logits) cudaFreeHost(g->h_logits);
    if (g->h_pos) cudaFreeHost(g->h_pos);
    if (g->h_next) cudaFreeHost(g->h_next);
    if (g->h_ring) cudaFreeHost(g->h_ring);
    for (int i = 0; i < GPU_CHAIN_RING; i++)
        if (g->ev_chain[i]) cudaEventDestroy(g->ev_chain[i]);
    if (g->h_xout) cudaFreeHost(g->h_xout);
    if (g->pinned) cudaFreeHost(g->pinned);
    if (g->h_rec) cudaFreeHost(g->h_rec);
    if (g->h_replay) cudaFreeHost(g->h_replay);
    if (g->jobs) cudaFreeHost(g->jobs);
    if (g->h_step) cudaFreeHost(g->h_step);
    free(g->jobs_layer); free(g->cpu_experts);
    for (int il = 0; g->L && il < g->m->cfg.n_layer; il++) free(g->L[il].cache);
    if (g->s) cudaStreamDestroy(g->s);
    if (g->s2) cudaStreamDestroy(g->s2);
    if (g->side) cudaStreamDestroy(g->side);
    if (g->ev_fork) cudaEventDestroy(g->ev_fork);
    if (g->ev_warm) cudaEventDestroy(g->ev_warm);
    if (g->ev_join) cudaEventDestroy(g->ev_join);
    if (g->side_fork) cudaEventDestroy(g->side_fork);
    for (int b = 0; b < 2; b++) {
        if (g->stage_htab[b]) cudaFreeHost(g->stage_htab[b]);
        if (g->stage_done[b]) cudaEventDestroy(g->stage_done[b]);
        if (g->stage_free[b]) cudaEventDestroy(g->stage_free[b]);
    }
    if (g->stage_s) cudaStreamDestroy(g->stage_s);
    if (g->side_join) cudaEventDestroy(g->side_join);
    if (g->ov_fork) cudaEventDestroy(g->ov_fork);
    if (g->pf_fork) cudaEventDestroy(g->pf_fork);
    if (g->pf_join) cudaEventDestroy(g->pf_join);
    if (g->side2) cudaStreamDestroy(g->side2);
    if (g->ov_join) cudaEventDestroy(g->ov_join);
    free(g->allocs); free(g->L); free(g);
}
