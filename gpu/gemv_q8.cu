/* gemv_q8.cu - the second decode GEMV path for the block types (gpu_gemv_set_mode(1)): x is
 * quantized to int8 per 32 values, weights are decoded to int8 lanes and multiplied with __dp4a
 * (gemv_q8.cuh has the formats, the rounding and the per-type math).
 *
 * Shape of the work. A thread block (256 threads) quantizes all of x (ncols <= 32768) into shared
 * memory once, or copies x's records when its producer wrote them (gpu_gemv_q8x: the norms and the
 * attention merge of the decode step do), then its lanes stream weight rows with no block barrier:
 * lanes form groups of L (a power of two <= 32 picked so that the row's 256-element chunks spread
 * evenly over them, then lowered while a token's rows still fill one round of the grid,
 * q8_lanes_shift_for); a
 * group owns one output row of one matrix (for SwiGLU the gate row and the up row go to two
 * neighbouring groups of a warp, joined by a shuffle), lane i of it takes chunks i, i+L, ... of the
 * row. Work items are rows; when x is shared by the k expert slots (SwiGLU, or a single matrix) the
 * items of all slots form one list, so one block's quantized x serves rows of several experts; else
 * blockIdx.y is the slot. Sums: per lane in chunk order, then a shuffle butterfly inside the group,
 * written by its lane 0: a fixed order, so results are bitwise reproducible and independent of the
 * grid. gemv_q8_kernel: a lane loads its chunk into registers and decodes it; lane 0 of a warp asks
 * L2 for the rows the warp takes next (cp.async.bulk.prefetch, one span per matrix and slot); a
 * group's (slot, row) advance without divisions; grid at most 2 blocks per SM (3 for some types),
 * rounds balanced. (A pipelined kernel that copied rows into shared memory through cp.async ran
 * beside it until session 36; with the weight loads out of L1 it no longer won: bench/README.md,
 * thirty-third and thirty-fourth passes.)
 * Launched with PDL (launch.cuh): a plain matrix's first rows are requested before the
 * previous kernel has finished, except the large ones' (q8_nopf: their requests slowed the merge
 * and the norm before them more than they helped). The register kernel also multiplies one
 * matrix by up to Q8_NB vectors (several tokens, gpu_gemv_batch): each chunk loaded and decoded
 * once, dotted with every vector's records, each vector's sums in the single-vector order
 * (bitwise its results). */
#include <atomic>
#include <type_traits>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "gpu_gemv.h"
#include "gpu_check.h"
#include "gemv_q8.cuh"
#include "host_par.h"
#include "launch.cuh"
#include "router.cuh"
extern "C" {
#include "quant_blocks.h"
}

int gemv_fail(const char *fmt, ...); /* gemv.cu: records the reason, returns -1 */

#define Q8_THREADS 256

/* the chunk decoders agree with the CPU's block layouts */
static_assert(Q8W_Q4_0::CB == 8 * sizeof(hm_block_q4_0) && Q8W_Q4_1::CB == 8 * sizeof(hm_block_q4_1), "q4");
static_assert(Q8W_Q5_0::CB == 8 * sizeof(hm_block_q5_0) && Q8W_Q5_1::CB == 8 * sizeof(hm_block_q5_1), "q5");
static_assert(Q8W_Q8_0::CB == 8 * sizeof(hm_block_q8_0) && Q8W_MXFP4::CB == 8 * sizeof(hm_block_mxfp4), "q8 mxfp4");
static_assert(Q8W_Q2_K::CB == sizeof(hm_block_q2_K) && Q8W_Q3_K::CB == sizeof(hm_block_q3_K), "q2 q3");
static_assert(Q8W_Q4_K::CB == sizeof(hm_block_q4_K) && Q8W_Q5_K::CB == sizeof(hm_block_q5_K), "q4k q5k");
static_assert(Q8W_Q6_K::CB == sizeof(hm_block_q6_K) && Q8W_IQ4_XS::CB == sizeof(hm_block_iq4_xs), "q6k iq4xs");
static_assert(Q8_CHUNK == 8 * HM_QK && Q8_CHUNK == HM_QK_K, "chunk");
static_assert(Q8_MAX_NCOLS / Q8_CHUNK * Q8_REC + 2 * 64 * sizeof(void *) + 4096 <= 48 * 1024, "shared memory (4096: a routed launch's top-k)");

#define Q8_MAXK 64 /* expert slots whose matrix pointers a block keeps in shared memory */
#define Q8_ROUTE_MAX 256 /* the most experts a routed launch chooses from (router_topk's shared arrays) */
#define Q8_XB 8    /* float4 of x per thread loaded together by the quantizer */
#define Q8_XR 2    /* uint4 of x's records a thread held in registers across a routed launch's top-k */
#define Q8_XC 4    /* uint4 of x's records a thread loads together when it copies them (q8_stage_x) */

struct q8_params {
    const uint8_t *w;                      /* the matrix, when tab0 is NULL */
    const void *const *tab0, *const *tab1; /* device tables of expert matrices (tab1: up) */
    const int *ids;                        /* device [k] */
    const float *x;                        /* (k or 1, ncols), row stride x_stride */
    int64_t x_stride;
    float *y;                              /* (k, nrows), row stride y_stride */
    int64_t y_stride;
    int ncols, nrows, k;
    int lshift;                            /* lanes per dot product: 1 << lshift */
    int flat;                              /* x shared by all slots: items = k * nrows, one list */
    int nitems;                            /* items per blockIdx.y */
    int nch, nbl;                          /* whole chunks per row; bytes of the partial chunk (0: none) */
    int nb;                                /* vectors per weight read (one matrix only): 1..Q8_NB */
    int64_t xb_stride, yb_stride;          /* nb > 1: vector b at x + b * xb_stride, its result at y + b * yb_stride */
    int xg;                                /* not flat: slot e reads x + (e / xg) * x_stride (0 or 1: e) */
    int yg;                                /* not flat, > 1: slot e writes y + (e / yg) * ygs + (e % yg) * y_stride */
    int64_t ygs;
    int tok;                               /* expert slots per token (1: a plain matrix), for the lane choice */
    const uint8_t *xq;                     /* x's chunk records made beforehand (gpu_q8_records, a fused producer), or NULL */
    int trig;                              /* hm_pdl_trigger_mode(): when a block lets the next kernel launch */
    int xpre;                              /* routed launch: 1 x's records complete before the previous kernel began (gpu_gemv_experts_swiglu_routed's xq_ready); 2 loaded before the top-k (HOTMOE_XEARLY) */
    /* rlog != NULL (SwiGLU over flat slots only): the router's top-k in every block before the
     * tables: router_topk over rlog (rn experts, the selection bias rbias, its fn/norm/scale) picks
     * the k slots' ids; block (0, 0) stores them and their weights to rids, rw (gpu_gemv_experts_routed) */
    const float *rlog, *rbias;
    int rn, rfn, rnorm;
    float rscale;
    int *rids;
    float *rw;
    /* astride > 0 (HOTMOE_AFFINE, gpu_q8_inter_affine): expert id's matrices at ab0 + id * astride
     * (gate or the one matrix) and ab1 + id * astride (up), the tables not read */
    const uint8_t *ab0, *ab1;
    int64_t astride;
    /* ed1 != NULL (HOTMOE_QK_EPI, gemv_q8_try_post): the q/k/v post in the launch's epilogue, one
     * matrix of one round whose blocks hold whole rotation pairs: row r < erows0 gets bias eb0[r]
     * and the NeoX rotation of its head (dims < erot of ehd) at *epos and goes to ed0[r]; a row r
     * past erows0 gets eb1[r - erows0], the rotation, and goes to ed1[*epos * ekvd + r - erows0]
     * (the k or v cache row). k_qkv_post's arithmetic (bitwise its results). */
    const float *eb0, *eb1;
    float *ed0, *ed1;
    const int *epos;
    int erows0, ehd, erot, ekvd;
    float etheta;
    int edry;   /* gemv_q8_try_post's check only (the pointers may be NULL): 0 when the launch would take it, nothing launched */
    int idpre;  /* affine expert launches (HOTMOE_XEARLY bit 2): the slots' ids loaded before x is staged, their matrices after */
    int64_t xqb_stride;   /* nb > 1 with xq: vector b's records at xq + b * xqb_stride */
    /* tk != NULL (HOTMOE_HEAD_TK, gemv_q8_tk_kernel): the warps take units of tk_steps of their
     * steps by ticket from tk[0] (tk[1] counts the warps done; the last one zeroes both) */
    unsigned *tk;
    int tk_steps;
};
#define Q8_NB 4 /* the most vectors one launch of the batched kernel multiplies by a matrix */

/* x[0..ncols) -> the chunk records at xs (gemv_q8.cuh). Eight lanes per 32-group, four values
 * each; the float operations are q8_quant32's (max is exact in any order, sums are integers), so
 * the records equal what q8_quant32 makes. ncols % 32 == 0: warps run whole (lanes past the end
 * compute zeros and store nothing); the groups of a partial last chunk past ncols are zeroed. */
__device__ __forceinline__ void q8_quantize_x(const float *x, int ncols, uint8_t *xs) {   /* x: read-only in the kernel */
    const int n4 = ncols / 4, n4r = (n4 + 31) & ~31;
    /* batches of Q8_XB float4 per thread, all loaded before any is used: one L2 round trip per
     * batch instead of one per float4 (the shuffles would otherwise serialize them) */
    for (int i0 = threadIdx.x; i0 < n4r; i0 += Q8_XB * blockDim.x) {
        float4 fb[Q8_XB];
#pragma unroll
        for (int u = 0; u < Q8_XB; u++) {
            const int i = i0 + u * blockDim.x;
            fb[u] = i < n4 ? __ldg((const float4 *)(x + 4 * i)) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < Q8_XB; u++) {
            const int i = i0 + u * blockDim.x;
            if (i >= n4r) break; /* warp-uniform: n4r and blockDim are multiples of 32 */
            q8_quant_f4(fb[u], i, i < n4, xs);
        }
    }
    const int gl = (ncols / 32) & 7; /* groups present in a partial last chunk */
    if (gl) {
        uint8_t *rec = xs + (ncols / Q8_CHUNK) * Q8_REC;
        for (int i = threadIdx.x; i < (8 - gl) * 10; i += blockDim.x) {
            const int g = gl + i / 10, j = i % 10;
            *(uint32_t *)(j < 8 ? rec + 32 * g + 4 * j : rec + 256 + 8 * g + 4 * (j - 8)) = 0u;
        }
    }
}

/* U of x's record words a thread, i0 + u * st for u < U (those below n16; st: the block's threads),
 * into v and from v into xs: all U loads are issued before any store (one L2 round trip) */
template <int U>
__device__ __forceinline__ void q8_rec_load(const q8_params &p, int i0, int st, int n16, uint4 (&v)[U]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int i = i0 + u * st;
        if (i < n16) v[u] = __ldg((const uint4 *)p.xq + i);
    }
}
template <int U>
__device__ __forceinline__ void q8_rec_store(uint8_t *xs, int i0, int st, int n16, const uint4 (&v)[U]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int i = i0 + u * st;
        if (i < n16) ((uint4 *)xs)[i] = v[u];
    }
}

/* Slot e's x as chunk records in xs (nchunks of them, whole 16-byte words): copied from its
 * producer's (p.xq, gpu_gemv_q8x), or quantized here */
__device__ __forceinline__ void q8_stage_x(const q8_params &p, int e, int nchunks, uint8_t *xs) {
    const int n16 = nchunks * Q8_REC / 16;
    if (p.xq) {
        /* Q8_XC words a thread in flight at once: one L2 round trip per batch (a plain copy loop
         * keeps each load behind the last one's shared store: o-projection of 12288 columns, 4 of
         * them; HOTMOE_XEARLY's former bit 8) */
        for (int i0 = threadIdx.x; i0 < n16; i0 += Q8_XC * blockDim.x) {
            uint4 v[Q8_XC];
            q8_rec_load(p, i0, blockDim.x, n16, v);
            q8_rec_store(xs, i0, blockDim.x, n16, v);
        }
    } else
        q8_quantize_x(p.x + (p.flat ? 0 : (p.xg > 1 ? e / p.xg : e) * p.x_stride), p.ncols, xs);
}

/* 32-element-block types: rows may end in a partial chunk and start at any even address */
template <class T> struct q8_b32 { static constexpr bool v = false; };
template <> struct q8_b32<Q8W_Q4_0> { static constexpr bool v = true; };
template <> struct q8_b32<Q8W_Q4_1> { static constexpr bool v = true; };
template <> struct q8_b32<Q8W_Q5_0> { static constexpr bool v = true; };
template <> struct q8_b32<Q8W_Q5_1> { static constexpr bool v = true; };
template <> struct q8_b32<Q8W_Q8_0> { static constexpr bool v = true; };
template <> struct q8_b32<Q8W_MXFP4> { static constexpr bool v = true; };

/* the 16-byte words of a partial last chunk (nbl bytes of GGUF blocks) that hold data in the
 * interleaved layout: its blocks' bytes, or for q4r the d's word and a word a block. The kernel
 * reads only these; the rest of the slot is zero and, lanes being laid out lane-index-major, whole
 * spans of it are never fetched (air's routed down reads 800 of 864 bytes a row). */
template <class T> struct q8_partw {
    static constexpr bool v = q8_b32<T>::v;
    __device__ static int words(int nbl) { return (nbl + 15) >> 4; }
};
template <> struct q8_partw<Q8W_Q4R> {
    static constexpr bool v = true;
    __device__ static int words(int nbl) { return 1 + nbl / 18; }
};

/* slot sl's matrices from its expert id on affine tables (p.astride > 0); an id < 0 is a skipped slot */
template <int NMAT>
__device__ __forceinline__ void q8_aff_slot(const q8_params &p, const uint8_t *(*wp)[Q8_MAXK], int sl, int id) {
    wp[0][sl] = id < 0 ? nullptr : p.ab0 + id * p.astride;
    if (NMAT == 2) wp[NMAT - 1][sl] = id < 0 ? nullptr : p.ab1 + id * p.astride;
}

/* The matrix of each slot this block reads (flat: every slot; else slot e) into wp: through the
 * tables by ids (an id < 0 is a skipped slot: NULL, its outputs left as they are), or p.w; AFF
 * (HOTMOE_AFFINE's own instances, p.astride > 0): computed from the ids, the tables not read. */
template <int NMAT, bool AFF = false>
__device__ __forceinline__ void q8_slot_tables(const q8_params &p, int e, int nslot, const uint8_t *(*wp)[Q8_MAXK],
                                               const int *ids = nullptr) {
    if (!ids) ids = p.ids;
    if constexpr (AFF) {
        for (int sl = threadIdx.x; sl < nslot; sl += Q8_THREADS) q8_aff_slot<NMAT>(p, wp, sl, ids[p.flat ? sl : e]);
    } else if (p.tab0) {
        for (int sl = threadIdx.x; sl < nslot; sl += Q8_THREADS) {
            const int id = ids[p.flat ? sl : e];
            wp[0][sl] = id < 0 ? nullptr : (const uint8_t *)p.tab0[id];
            if (NMAT == 2) wp[NMAT - 1][sl] = id < 0 ? nullptr : (const uint8_t *)p.tab1[id];
        }
    } else if (threadIdx.x == 0) {
        wp[0][0] = p.w;
    }
}

/* The matrices this block reads into wp (q8_slot_tables); ROUTE (the routed experts' launch, p.rlog;
 * NMAT 2, NB 1): the router's top-k chooses them first, the table loads are issued before block
 * (0, 0) stores the ids and makes the weights (p.rids, p.rw). */
template <int NMAT, bool ROUTE, bool AFF = false>
__device__ __forceinline__ void q8_tables(const q8_params &p, int e, int nslot, const uint8_t *(*wp)[Q8_MAXK]) {
    if constexpr (ROUTE) {
        const int *isel;
        const float *wsel;
        router_select<Q8_ROUTE_MAX>(p.rlog, p.rbias, p.rn, p.k, p.rfn, 1, 1, &isel, &wsel, true);   /* the bias with the logits (HOTMOE_XEARLY's former bit 4) */
        q8_slot_tables<NMAT, AFF>(p, e, nslot, wp, isel);
        if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) router_weights(isel, wsel, p.k, p.rfn, p.rnorm, p.rscale, p.rids, p.rw);
    } else {
        q8_slot_tables<NMAT, AFF>(p, e, nslot, wp);
    }
}

/* where slot e's outputs start (flat: every slot's, at slot * y_stride beyond) */
__device__ __forceinline__ float *q8_ybase(const q8_params &p, int e) {
    return p.y + (p.flat ? 0 : p.yg > 1 ? (e / p.yg) * p.ygs + (e % p.yg) * p.y_stride : e * p.y_stride);
}

/* NMAT = 1: y = W x; NMAT = 2: y = silu(gate x) * (up x), the gate and the up row of an output
 * taken by two neighbouring groups of a warp (L <= 16) and joined by a shuffle. A: the load
 * alignment of whole chunks (T::A, or 1 when the row stride is not a multiple of it or the rows
 * end in a partial chunk). */
/* The body takes its block's index along x and the grid's width (bx, gdx): gemv_q8_kernel passes
 * blockIdx.x and gridDim.x, gemv_q8_pair_kernel each matrix's share of its grid. */
template <class T, int NMAT, int A, int NB, bool ROUTE, bool AFF, bool EPI, bool NOPF, bool PAIR, bool TK = false>
__device__ __forceinline__ void gemv_q8_body(const q8_params &p, const unsigned bx, const unsigned gdx) {
    /* the block's index along x and the grid's width (PAIR: its matrix's share of the pair's grid) */
#define Q8_BX (PAIR ? bx : blockIdx.x)
#define Q8_GDX (PAIR ? gdx : gridDim.x)
    extern __shared__ __align__(16) uint8_t xs[]; /* ceil(ncols / 256) * Q8_REC per vector */
    __shared__ const uint8_t *wp[NMAT][Q8_MAXK];  /* matrix of each slot (flat) or of this slot */
    constexpr bool PART = q8_b32<T>::v && A == 1; /* rows ending in a partial chunk come here */
    /* A == 0: the matrices are interleaved per warp (gpu_q8_inter_pack): chunks padded to CBP bytes,
     * the word j of the chunk a lane takes at step t at (t * RW * L * CBP) + j * RW * L * 16 +
     * 16 * (li * RW + row % RW) from the start of its rows' group of RW; every load of a warp reads
     * whole lines, and the lanes with the same li (the same chunk of their rows) are side by side */
    constexpr bool INTER = A == 0;
    constexpr int CBP = (T::CB + 15) & ~15;
    constexpr int NW = INTER ? q8_nw(CBP, 16) : q8_nw(T::CB, A);
    /* interleaved: a slot's bytes; TAIL: the chunk's last word is a 2-byte tail of its own (Q6_K) */
    constexpr int SB = HM_Q8_SLOT_BYTES(T::CB), WF = T::CB / 16;
    constexpr bool TAIL = SB % 16 != 0;
    const int e = blockIdx.y, nslot = p.flat ? p.k : 1;
    const int L = 1 << p.lshift, gpw = 32 >> p.lshift;          /* lanes per group, groups per warp */
    /* a lane's group gi (item base + gi: row gi / NMAT of matrix gi % NMAT) and its place li in the
     * group (chunks li, li + L, ...). Interleaved: lanes [H m, H m + H) take matrix m (H = 32 / NMAT),
     * lane H m + q the q-th 16 bytes of each of that matrix's word spans, i.e. li = q / RW and row
     * q % RW of the warp's RW rows of a matrix (the layout puts the rows of one li side by side), so
     * each quarter warp's 128-bit loads are one line of one matrix. GGUF rows: lane gi L + li.
     * lstep: the lanes from one li of a group to the next (the reduction's shuffles); gstep: from a
     * gate group to its up group */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int hsh = NMAT == 2 ? 4 : 5, rsh = hsh - p.lshift, lq = lane & ((1 << hsh) - 1);   /* log2 H, log2 RW, q */
    const int li = INTER ? lq >> rsh : lane & (L - 1);
    const int RW = INTER ? 1 << rsh : 1;   /* interleaved: a matrix's rows a warp takes in a round */
    const int gi = INTER ? (lq & (RW - 1)) * NMAT + (lane >> hsh) : lane >> p.lshift;
    const int lstep = RW, gstep = INTER ? 1 << hsh : L;
    const int tg = Q8_GDX * (Q8_THREADS >> p.lshift);         /* groups in this slot's grid */
    const int nchunks = p.nch + (p.nbl > 0);
    /* interleaved: a row's chunk slots, whole steps of L (lanes past the row's chunks leave theirs empty) */
    const size_t rs = INTER ? (size_t)(((nchunks + L - 1) >> p.lshift) << p.lshift) * SB : (size_t)p.nch * T::CB + p.nbl;
    const int base0 = (Q8_BX * (Q8_THREADS / 32) + warp) * gpw;
    /* item it: output row it / NMAT of slot (flat) it / NMAT / nrows, matrix it % NMAT. A group's
     * items are base0 + gi + s * tg: its matrix m is fixed (tg and base0 are multiples of NMAT) and
     * its (slot, row) advance by tg / NMAT rows a step, tracked without dividing. */
    const int m = gi & (NMAT - 1), dr = tg / NMAT, nrw = p.nrows;
    auto advance = [&](int *slot, int *row) {
        *row += dr;
        if (p.flat)
            while (*row >= nrw) { *row -= nrw; (*slot)++; }
    };
    int slot = 0, row = (base0 + gi) / NMAT;      /* this group's item */
    int wslot = 0, wrow = base0 / NMAT;           /* the warp's first item */
    if (p.flat) {
        slot = row / nrw; row -= slot * nrw;
        wslot = wrow / nrw; wrow -= wslot * nrw;
    }
    /* Asks L2 for the rows the warp takes at item base (its first item at (sl, r) of each matrix):
     * one bulk prefetch per matrix and slot its rows fall in, issued by lane 0 only. */
    auto prefetch_warp = [&](int base, int sl, int r) {
        if ((threadIdx.x & 31) || base >= p.nitems) return;
        const int nit = min(gpw, p.nitems - base), cnt = (nit + NMAT - 1) / NMAT;   /* rows per matrix */
        for (int mm = 0; mm < NMAT; mm++) {
            int s = sl, r0 = r, left = cnt;
            while (left > 0 && s < nslot) {
                const int n = min(left, nrw - r0);
                if (wp[mm][s]) q8_prefetch_l2(wp[mm][s] + (size_t)r0 * rs, (size_t)n * rs);
                left -= n; r0 = 0; s++;
            }
        }
    };
    if (!p.tab0 && !NOPF) { /* one matrix: its first rows are known before x (or the previous kernel) is ready */
        if (NMAT == 1 && (threadIdx.x & 31) == 0 && base0 < p.nitems)
            q8_prefetch_l2(p.w + (size_t)base0 * rs, (size_t)min(gpw, p.nitems - base0) * rs);
    }
    /* EPI: this thread's row of the block (Q8_THREADS >> lshift rows, one round), its bias and
     * rotation (weights and the position, copied in before the step: read before the wait) */
    constexpr int EM = EPI ? Q8_THREADS : 1;   /* a block's rows: Q8_THREADS >> lshift (one round) */
    __shared__ float esy[EM], esx[EM];
    float eb = 0.f, ec = 1.f, esn = 0.f;
    int erow = 0, ei = 0;   /* the row, its dim in its head */
    bool ehb = false;   /* the row has a bias (none: nothing added, as k_qkv_post; x + 0 would turn -0 into +0) */
    const int ER = Q8_THREADS >> p.lshift;
    if constexpr (EPI) {
        erow = Q8_BX * ER + threadIdx.x;
        if (threadIdx.x < ER && erow < p.nrows) {
            const bool q = erow < p.erows0;
            const int r = q ? erow : erow - p.erows0;   /* its row in q, or in the cache row */
            const float *b = q ? p.eb0 : p.eb1;
            if (b) { eb = b[r]; ehb = true; }
            ei = r % p.ehd;
            if (ei < p.erot) {
                const int half = p.erot / 2, j = ei < half ? ei : ei - half;
                const float inv = 1.0f / powf(p.etheta, (float)(2 * j) / (float)p.erot);
                const float ang = (float)*p.epos * inv;
                ec = cosf(ang); esn = sinf(ang);
            }
        }
    }
    /* p.xpre (routed): x's records were written before the router GEMV ran, whose blocks passed
     * their wait before they let this launch start, so they are complete here already */
    const bool xpre = ROUTE && p.xpre == 1 && p.xq;
    if (xpre) q8_stage_x(p, e, nchunks, xs);
    hm_pdl_wait(); /* ids, tables and x may come from the previous kernel */
    /* p.xpre 2 (routed, HOTMOE_XEARLY): x's records are loaded into registers here, before the
     * top-k, and stored after it, so that their round trip overlaps the top-k's instead of
     * following it (flat routed launches share one x; up to Q8_XR uint4 a thread) */
    constexpr int XR = ROUTE ? Q8_XR : 1;
    const int nx16 = nchunks * Q8_REC / 16;
    const bool xreg = ROUTE && NB == 1 && p.xpre == 2 && p.xq && nx16 <= XR * Q8_THREADS;
    uint4 xr[XR];
    /* p.idpre (not routed, affine tables, one vector): the threads of the slots load their ids here
     * and make their matrices after x is staged, so that warp 0's two round trips (the id, then x)
     * overlap instead of following each other */
    const bool idp = !ROUTE && AFF && NB == 1 && p.idpre;
    int sid = -1;
    if (idp && threadIdx.x < nslot) sid = p.ids[p.flat ? threadIdx.x : e];
    if (xreg) q8_rec_load(p, threadIdx.x, Q8_THREADS, nx16, xr);
    if (!idp) q8_tables<NMAT, ROUTE, AFF>(p, e, nslot, wp);
    /* NB > 1 (one slot, p.nb vectors): vector b's records at xs + b * xrec; the sums of each
     * vector are the NB == 1 kernel's, in its order, so the results are bitwise the same */
    const int xrec = nchunks * Q8_REC;
    /* NB > 1: blockIdx.y picks the group of p.nb vectors (from vector vb on) this block takes */
    const int64_t vb = NB > 1 ? (int64_t)blockIdx.y * p.nb : 0;
    if (NB == 1) {
        if (xreg) q8_rec_store(xs, threadIdx.x, Q8_THREADS, nx16, xr);
        else if (!xpre) q8_stage_x(p, e, nchunks, xs);
        if (idp && threadIdx.x < nslot) q8_aff_slot<NMAT>(p, wp, threadIdx.x, sid);   /* on the id loaded above */
    } else if (p.xq) {   /* each vector's records made beforehand: copied, eight words a thread in flight */
        const int n16 = xrec / 16, tot = p.nb * n16;
        for (int j0 = threadIdx.x; j0 < tot; j0 += 8 * Q8_THREADS) {
            uint4 v[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int j = j0 + u * Q8_THREADS;
                if (j < tot) v[u] = __ldg((const uint4 *)(p.xq + (vb + j / n16) * p.xqb_stride) + j % n16);
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int j = j0 + u * Q8_THREADS;
                if (j < tot) ((uint4 *)xs)[j] = v[u];
            }
        }
    } else
        for (int b = 0; b < p.nb; b++) q8_quantize_x(p.x + (vb + b) * p.xb_stride, p.ncols, xs + b * xrec);
    __syncthreads();
    if (!p.flat && !wp[0][0]) return;   /* this block's slot is skipped (uniform over the block) */

    float *ybase = q8_ybase(p, e);
    /* TK (one plain matrix, NMAT 1, NB 1): units of p.tk_steps of a warp's steps (gpw items each,
     * contiguous). Warp w takes unit w first, then unit W + t for each ticket t it draws from
     * p.tk[0] (W: the grid's warps), each drawn a unit ahead (lane 0), so that its round trip hides
     * behind the unit's loads. A row's sums are the indexed kernel's: the same lanes, the same
     * order. An active warp draws once more than its tickets, so a launch draws exactly its units. */
    int tks = 0, tkt = 0;
    const int tkw = Q8_GDX * (Q8_THREADS / 32), tkg = base0 / gpw, tku = TK ? p.tk_steps * gpw : 1;
    const int tkn = TK ? (p.nitems + tku - 1) / tku : 0;
    int base = base0;
    if constexpr (TK) {
        base = tkg < tkn ? tkg * tku : INT_MAX;
        if (lane == 0 && tkg < tkn) tkt = (int)atomicAdd(p.tk, 1u);
    }
    /* the warp's step after the one at b (TK): within its unit, or the next unit's first (adv:
     * take it and draw the one after) */
    auto tk_after = [&](int b, bool adv) {
        if (tks + 1 < p.tk_steps) {
            if (adv) tks++;
            return b + gpw;
        }
        const int u = tkw + __shfl_sync(0xFFFFFFFFu, tkt, 0);
        if (adv) {
            tks = 0;
            if (u < tkn && lane == 0) tkt = (int)atomicAdd(p.tk, 1u);
        }
        return u < tkn ? u * tku : INT_MAX;
    };
    /* warp-uniform steps (the shuffles need every lane) */
    for (; base < p.nitems; base = TK ? tk_after(base, true) : base + tg) {
        if constexpr (TK) row = base + gi;
        /* warp 0 has the block's most rounds: its last one starts the block's last */
        if (p.trig && threadIdx.x == 0 && base + tg >= p.nitems && (p.trig != 2 || base > base0)) hm_pdl_trigger();
        const int it = base + gi;
        const bool ok = it < p.nitems && slot < nslot && wp[0][slot];   /* not a skipped slot */
        /* this lane's chunks: rp + c CB (GGUF rows), or interleaved at rp + (c / L) RW L CBP, word j
         * of each RW L 16 bytes further */
        const uint8_t *rp = nullptr;
        if (ok) {
            if constexpr (INTER) {
                /* the lane's place in a step's word, li RW + row % RW, is lq (row % RW stays q % RW: rows advance by multiples of RW) */
                rp = wp[m][slot] + (size_t)(row & ~(RW - 1)) * rs + (size_t)lq * 16;
            } else {
                rp = wp[m][slot] + (size_t)row * rs;
            }
        }
        const size_t tstep = (size_t)RW * L * SB, jstep = (size_t)RW * L * 16;
        auto load = [&](int c, uint32_t *w) {
            if constexpr (INTER) {
                const uint8_t *b = rp + (size_t)(c >> p.lshift) * tstep;
                /* a partial last chunk: only its words with data (the rest zero, as in memory) */
                const int nw = q8_partw<T>::v && c == p.nch ? q8_partw<T>::words(p.nbl) : CBP / 16;
#pragma unroll
                for (int j = 0; j < CBP / 16; j++) {
                    if (TAIL && j == WF) {   /* the tail: 2 bytes a lane after the step's words */
                        w[4 * j] = q8_ldt(b + j * jstep - 14 * lq);
                        w[4 * j + 1] = w[4 * j + 2] = w[4 * j + 3] = 0;
                        continue;
                    }
                    const uint4 u = j < nw ? q8_ldw(b + j * jstep) : make_uint4(0u, 0u, 0u, 0u);
                    w[4 * j] = u.x; w[4 * j + 1] = u.y; w[4 * j + 2] = u.z; w[4 * j + 3] = u.w;
                }
#pragma unroll
                for (int k = CBP / 4; k < NW; k++) w[k] = 0;
            } else {
                if (c < p.nch) q8_load_chunk<T::CB, A>(rp + (size_t)c * T::CB, w);
                else if constexpr (PART) q8_load_part<T::CB>(rp + (size_t)c * T::CB, w, p.nbl);
            }
        };
        if constexpr (TK) {
            const int nb = tk_after(base, false);
            prefetch_warp(nb, 0, nb);
        } else {
            advance(&wslot, &wrow);
            prefetch_warp(base + tg, wslot, wrow);
        }
        if constexpr (NB > 1) {   /* one slot (NMAT 2: SwiGLU over gate and up): nb sums per row */
            float acc[NB];
#pragma unroll
            for (int b = 0; b < NB; b++) acc[b] = 0.f;
            if (ok)
                for (int c = li; c < nchunks; c += L) {
                    uint32_t w[NW];
                    load(c, w);
                    if constexpr (q8_dot_nb<T>::v) {   /* the chunk decoded once; each vector's sum dot's */
                        float r[NB];
                        T::template dot_nb<NB>(w, xs + c * Q8_REC, xrec, p.nb, r);
#pragma unroll
                        for (int b = 0; b < NB; b++)
                            if (b < p.nb) acc[b] += r[b];
                    } else {
#pragma unroll
                        for (int b = 0; b < NB; b++)
                            if (b < p.nb) acc[b] += T::dot(w, xs + b * xrec + c * Q8_REC);
                    }
                }
#pragma unroll
            for (int b = 0; b < NB; b++) {
                for (int o = L >> 1; o > 0; o >>= 1) acc[b] += __shfl_xor_sync(0xFFFFFFFFu, acc[b], o * lstep);
                if (NMAT == 2) {   /* as the one-vector kernel's: the odd group's sum is up */
                    const float up = __shfl_down_sync(0xFFFFFFFFu, acc[b], gstep);
                    if (li == 0 && ok && !(gi & 1) && b < p.nb) p.y[(vb + b) * p.yb_stride + row] = acc[b] / (1.f + expf(-acc[b])) * up;
                } else if (li == 0 && ok && b < p.nb) p.y[(vb + b) * p.yb_stride + row] = acc[b];
            }
            advance(&slot, &row);
            continue;
        }
        float acc = 0.f;
        if (ok)
            for (int c = li; c < nchunks; c += L) {
                uint32_t w[NW];
                load(c, w);
                acc += T::dot(w, xs + c * Q8_REC);
            }
        for (int o = L >> 1; o > 0; o >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o * lstep);
        if (NMAT == 2) {
            const float up = __shfl_down_sync(0xFFFFFFFFu, acc, gstep); /* the odd group's sum */
            if (li == 0 && ok && !(gi & 1)) ybase[slot * p.y_stride + row] = acc / (1.f + expf(-acc)) * up;
        } else if (EPI) {
            if (li == 0 && ok) esy[row - Q8_BX * ER] = acc;
        } else if (li == 0 && ok) {
            ybase[slot * p.y_stride + row] = acc;
        }
        advance(&slot, &row);
    }
    if constexpr (TK) {   /* the last active warp to finish zeroes the counters for the next launch */
        if (lane == 0 && tkg < tkn) {
            __threadfence();
            if (atomicAdd(p.tk + 1, 1u) == (unsigned)min(tkw, tkn) - 1) { atomicExch(p.tk, 0u); atomicExch(p.tk + 1, 0u); }
        }
    }
    if constexpr (EPI) {   /* k_qkv_post's bias and rotation (qkv_post_head), then the row to q or the cache */
        __syncthreads();
        const int t = threadIdx.x, on = t < ER && erow < p.nrows;
        float x = 0.f;
        if (on) { x = esy[t]; if (ehb) x += eb; esx[t] = x; }
        __syncthreads();
        if (!on) return;
        const int half = p.erot / 2;
        if (ei < p.erot) {
            const int j = ei < half ? ei : ei - half, h0 = t - ei;   /* the head's dim 0 in this block */
            const float a = esx[h0 + j], bb = esx[h0 + j + half];
            x = ei < half ? a * ec - bb * esn : bb * ec + a * esn;
        }
        if (erow < p.erows0) p.ed0[erow] = x;
        else p.ed1[(size_t)*p.epos * p.ekvd + erow - p.erows0] = x;
    }
    HM_KT_END();   /* EPI: the threads past the block's rows returned above; thread 0 has a row */
#undef Q8_BX
#undef Q8_GDX
}

template <class T, int NMAT, int A, int NB, bool ROUTE = false, int BPS = 2, bool AFF = false, bool EPI = false,
          bool NOPF = false>   /* BPS: blocks a SM (launch bounds); AFF: q8_slot_tables; EPI: q8_params' ed1; NOPF: no L2 request of the first rows (q8_nopf) */
__global__ void __launch_bounds__(Q8_THREADS, BPS) gemv_q8_kernel(const q8_params p) {
    gemv_q8_body<T, NMAT, A, NB, ROUTE, AFF, EPI, NOPF, false>(p, 0, 0);
}

/* One plain interleaved matrix, its units by ticket (q8_params' tk; HOTMOE_HEAD_TK) */
template <class T>
__global__ void __launch_bounds__(Q8_THREADS, 2) gemv_q8_tk_kernel(const q8_params p) {
    gemv_q8_body<T, 1, 0, 1, false, false, false, true, false, true>(p, 0, 0);
}

/* Two plain interleaved matrices of one x with the post epilogue (q8_params' ed1) in one launch:
 * blocks [0, nb1) take p1 (T1, NOPF1), the rest p2 (T2), each block its matrix's kernel as a
 * launch of its own would run it (the same lanes, rows and sums). For q|k and v (gpu_q8_pair_begin,
 * HOTMOE_QKV_PAIR): one PDL chain q|k|v -> attention instead of v beside q|k on the second stream. */
template <class T1, bool NOPF1, class T2>
__global__ void __launch_bounds__(Q8_THREADS, 2) gemv_q8_pair_kernel(const q8_params p1, const q8_params p2, const int nb1) {
    if ((int)blockIdx.x < nb1) gemv_q8_body<T1, 1, 0, 1, false, false, true, NOPF1, true>(p1, blockIdx.x, nb1);
    else gemv_q8_body<T2, 1, 0, 1, false, false, true, false, true>(p2, blockIdx.x - nb1, gridDim.x - nb1);
}

static int q8_sm_count(void) {   /* the current device's SMs, cached per device */
    static std::atomic<int> cache[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) dev = 0;
    const int slot = dev < 64 ? dev : 63;
    int n = cache[slot].load(std::memory_order_relaxed);
    if (n <= 0) {
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
        cache[slot].store(n, std::memory_order_relaxed);
    }
    return n;
}
extern "C" int gpu_sm_count(void) { return q8_sm_count(); }

/* One-launch settings of the recording thread (thread_local, as the graphs are captured on the thread
 * that records the step), spent by its next single-vector launch whether it takes them or not:
 * cap (gpu_q8_grid_cap, HOTMOE_SHDOWN_GRID): at most that many blocks, more rounds each; tk
 * (gpu_q8_head_tk, the output head): with HOTMOE_HEAD_TK=S (1..64; 0, the default: off) the launch
 * runs gemv_q8_tk_kernel, its warps' units of S steps by ticket from these counters (q8_params'
 * tk), so that the SMs that read faster take more of it. */
struct q8_next_launch { int cap; unsigned *tk; };
static thread_local q8_next_launch g_next;
extern "C" void gpu_q8_grid_cap(int n) { g_next.cap = n > 0 ? n : 0; }
extern "C" void gpu_q8_head_tk(unsigned *counters) { g_next.tk = counters; }
static std::atomic<long> g_tk_launches;   /* launches of gemv_q8_tk_kernel (gpu_q8_tk_launches, for the tests) */
extern "C" long gpu_q8_tk_launches(void) { return g_tk_launches.load(); }

static std::atomic<int> g_head_tk(-1);
static int q8_head_tk(void) { return hm_env_int("HOTMOE_HEAD_TK", 0, 64, 0, g_head_tk); }
/* sets HOTMOE_HEAD_TK's value (0..64; -1: the environment's again), for the tests */
extern "C" void gpu_q8_set_head_tk(int steps) { g_head_tk.store(steps < -1 ? -1 : steps > 64 ? 64 : steps); }

/* HOTMOE_NOPF: which plain interleaved matrices' launches do NOT ask L2 for their first rows before
 * their PDL wait (gemv_q8_kernel's NOPF instances). 3 (the default): those of at least 16 MB (air's
 * q|k, o-projection and head; none of a3b's that take this kernel); 1: the wide ones (ncols >= 8192:
 * air's o-projection); 2: every plain matrix (q|k, v, the o-projection, the head); 0: none (every
 * plain matrix asks, as before session 31).
 * Why: the o-projection's 28 MB of requests go out while the merge before it runs and delay the
 * merge's own loads (KTRACE, air at position ~428: the merge 7.99 us from its wait to the
 * o-projection's with them, 5.30 without), while the o-projection itself gains nothing from them
 * (11.95 us against 12.08); q|k's do the same to the residual norm before it. nvidia-h200, air
 * resident tok/s: session 31, 1 292.1, 293.4, 293.5 against 286.5-287.8 for 0 in the same calls;
 * 2 299.9, 299.1, 300.2 but a3b 500.9 against 509.7. Session 32 (one call): 3 298.6, 298.8 against
 * 294.6, 292.9 for 1 and 299.3 for 2; a3b 511.2 against 509.6 for 1.
 * The same sums: the tokens are unchanged. */
template <class T>
static bool q8_nopf(const q8_params &p) {
    static std::atomic<int> c(-1);
    const int m = hm_env_digit("HOTMOE_NOPF", 0, 3, 3, c);
    if (p.tab0 || m == 0) return false;
    if (m == 3) return (size_t)p.nrows * ((size_t)p.nch * T::CB + p.nbl) >= ((size_t)16 << 20);
    return m == 2 || p.ncols >= 8192;
}

/* gpu_q8_pair_begin .. gpu_q8_pair_end: the first post launch of a pairable type (q|k, T1 below)
 * is parked here instead of launched; the next post launch (v, Q6_K) then launches both as one
 * gemv_q8_pair_kernel; what is still parked at the end is launched alone. thread_local: two
 * executors' graphs may be captured at once. */
struct q8_pair_state { int collect, pending, tag, nopf, gx, paired; size_t smem; q8_params p; };
static thread_local q8_pair_state g_pair;
template <class T> struct q8_pair_tag { static constexpr int v = 0; };   /* the first matrix's types */
template <> struct q8_pair_tag<Q8W_Q4_K> { static constexpr int v = 1; };
template <> struct q8_pair_tag<Q8W_Q5_K> { static constexpr int v = 2; };

/* f(T1, NOPF1) for the parked launch's instance (q8_tt<T1>, a bool constant): one choice of the
 * type and NOPF for the pair and for the parked launch alone */
template <class T> struct q8_tt { using type = T; };
template <class F>
static void q8_parked(const q8_pair_state &q, F f) {
    auto n = [&](auto t1) {
        if (q.nopf) f(t1, std::true_type());
        else f(t1, std::false_type());
    };
    if (q.tag == 1) n(q8_tt<Q8W_Q4_K>());
    else n(q8_tt<Q8W_Q5_K>());
}

/* the parked launch with p2 (T2) as one launch: p1's blocks first (the long ones: the short
 * second matrix's blocks then fill the slots they leave) */
template <class T2>
static void q8_pair_go(const q8_params &p2, unsigned gx2, cudaStream_t s) {
    const q8_pair_state &q = g_pair;
    const dim3 grid((unsigned)q.gx + gx2);
    q8_parked(q, [&](auto t1, auto n1) {
        hm_launch(gemv_q8_pair_kernel<typename decltype(t1)::type, decltype(n1)::value, T2>, grid, Q8_THREADS, q.smem, s, q.p, p2, q.gx);
    });
}

/* whether a post launch of type t1 then one of t2 would go out as one (q8_pair_tag's types at two
 * blocks a SM, then Q6_K) */
static int q8_inter_bps(int type);
extern "C" int gpu_q8_pair_ok(int t1, int t2) {
    return (t1 == HM_TYPE_Q4_K || t1 == HM_TYPE_Q5_K) && t2 == HM_TYPE_Q6_K && q8_inter_bps(t1) == 2 && q8_inter_bps(t2) == 2;
}

extern "C" void gpu_q8_pair_begin(void) { g_pair.collect = 1; g_pair.pending = 0; g_pair.paired = 0; }

/* 1 when the two launches went out as one, 0 when what was parked went alone (or nothing was), -1
 * when that launch failed */
extern "C" int gpu_q8_pair_end(void *stream) {
    q8_pair_state &q = g_pair;
    q.collect = 0;
    if (q.pending) {
        q.pending = 0;
        q8_parked(q, [&](auto t1, auto n1) {
            hm_launch(gemv_q8_kernel<typename decltype(t1)::type, 1, 0, 1, false, 2, false, true, decltype(n1)::value>, dim3((unsigned)q.gx),
                      Q8_THREADS, q.smem, (cudaStream_t)stream, q.p);
        });
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return gemv_fail("gemv_q8: the parked launch of %d blocks failed: %s", q.gx, cudaGetErrorString(err));
        return 0;
    }
    return q.paired;
}

template <class T, int NMAT, int A, int BPS = 2>
static void q8_go(const q8_params &p, dim3 grid, size_t smem, cudaStream_t s) {
    /* p.rlog: the routed gate/up's own top-k; AFF: HOTMOE_AFFINE's instances (interleaved only,
     * p.astride > 0) */
    auto go = [&](auto aff) {
        constexpr bool AFF = decltype(aff)::value;
        if constexpr (NMAT == 2)
            if (p.rlog) { hm_launch(gemv_q8_kernel<T, NMAT, A, 1, true, BPS, AFF>, grid, Q8_THREADS, smem, s, p); return; }
        if constexpr (NMAT == 1 && A == 0 && BPS == 2 && !AFF) {
            const bool nopf = q8_nopf<T>(p);
            auto one = [&](auto epi) {   /* the plain matrix's instance: EPI (q8_params' ed1) x NOPF */
                constexpr bool E = decltype(epi)::value;
                if constexpr (E) {   /* gpu_q8_pair_begin: park the first, launch both with the second */
                    q8_pair_state &q = g_pair;
                    if (q.collect && q8_pair_tag<T>::v && !q.pending) {
                        q.collect = 0; q.pending = 1; q.tag = q8_pair_tag<T>::v; q.nopf = nopf; q.gx = (int)grid.x; q.smem = smem; q.p = p;
                        return;
                    }
                    if constexpr (std::is_same<T, Q8W_Q6_K>::value)
                        if (q.pending && !nopf && smem == q.smem) { q8_pair_go<T>(p, grid.x, s); q.pending = 0; q.paired = 1; return; }
                }
                if constexpr (!E)
                    if (p.tk) {
                        hm_launch(gemv_q8_tk_kernel<T>, grid, Q8_THREADS, smem, s, p);
                        g_tk_launches++;
                        return;
                    }
                if (nopf) hm_launch(gemv_q8_kernel<T, 1, 0, 1, false, 2, false, E, true>, grid, Q8_THREADS, smem, s, p);
                else hm_launch(gemv_q8_kernel<T, 1, 0, 1, false, 2, false, E>, grid, Q8_THREADS, smem, s, p);
            };
            if (p.ed1) one(std::true_type());
            else one(std::false_type());
            return;
        }
        hm_launch(gemv_q8_kernel<T, NMAT, A, 1, false, BPS, AFF>, grid, Q8_THREADS, smem, s, p);
    };
    if constexpr (A == 0)
        if (p.astride) { go(std::true_type()); return; }
    go(std::false_type());
}

/* the interleaved kernel for nmat matrices at bps (2, or B3 when that is 3) blocks a SM */
template <class T, int B3>
static void q8_go_inter(const q8_params &p, int nmat, int bps, dim3 grid, size_t smem, cudaStream_t s) {
    if (bps == 3) {
        if (nmat == 2) q8_go<T, 2, 0, B3>(p, grid, smem, s);
        else q8_go<T, 1, 0, B3>(p, grid, smem, s);
    } else if (nmat == 2) q8_go<T, 2, 0>(p, grid, smem, s);
    else q8_go<T, 1, 0>(p, grid, smem, s);
}

/* Blocks along x for nitems items (1 << lshift lanes each) in each of nslices slices, at most
 * per_sm blocks per SM, the rounds balanced. */
static int q8_grid_x(int nitems, int lshift, int nslices, int per_sm) {
    const int per_block = Q8_THREADS >> lshift;   /* items one block takes per round */
    const long need = (long)nslices * ((nitems + per_block - 1) / per_block), cap = (long)per_sm * q8_sm_count();
    const long rounds = (need + cap - 1) / cap;
    const int gx = (int)((nitems + per_block * rounds - 1) / (per_block * rounds));
    return gx < 1 ? 1 : gx;
}

/* the batched kernel (p.nb vectors); 1 when its records do not fit shared memory (the caller then
 * runs the vectors one by one) */
template <class T, int A, int NMAT = 1>
static int q8b_go(const q8_params &p, dim3 grid, size_t smem, cudaStream_t s) {
    static std::atomic<unsigned long long> raised(0);
    if (hm_allow_smem(gemv_q8_kernel<T, NMAT, A, Q8_NB>, smem, sizeof(void *) * NMAT * Q8_MAXK, raised)) return 1;
    hm_launch(gemv_q8_kernel<T, NMAT, A, Q8_NB>, grid, Q8_THREADS, smem, s, p);
    return 0;
}

/* Lanes in one round of the register kernel's grid (q8_lanes_shift_for): two blocks of Q8_THREADS
 * per SM; HOTMOE_Q8_LANES=N sets it (0: q8_lanes_shift's choice everywhere) */
static long q8_lane_cap(void) {
    static std::atomic<long> v(-1);
    long r = v.load(std::memory_order_relaxed);
    if (r < 0) {
        const char *env = getenv("HOTMOE_Q8_LANES");
        r = env && env[0] ? atol(env) : 2L * q8_sm_count() * Q8_THREADS;
        if (r < 0) r = 0;
        v.store(r, std::memory_order_relaxed);
    }
    return r;
}

/* ---- interleaved expert matrices (gpu_q8_inter_pack): the tables whose matrices are, and the
 * lane shift they were laid out for (a launch must use the same) ---- */
#define Q8_INTER_MAX 4096
struct q8_inter_ent { const void *tab; int ls; const uint8_t *base; int64_t stride; };   /* stride > 0: affine (gpu_q8_inter_affine) */
static q8_inter_ent g_inter[Q8_INTER_MAX];
static std::atomic<int> g_inter_n(0);
static int q8_inter_find(const void *tab) {   /* the entry's index, or -1 */
    const int n = g_inter_n.load(std::memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (g_inter[i].tab == tab) return i;
    return -1;
}
static int q8_inter_lshift(const void *tab) {
    const int i = q8_inter_find(tab);
    return i < 0 ? -1 : g_inter[i].ls;
}
extern "C" int gpu_q8_inter_lshift(const void *tab) { return tab ? q8_inter_lshift(tab) : -1; }
/* HOTMOE_AFFINE: 1 (the default; 0 turns it off): the resident experts of a layer in one
 * allocation at a fixed stride (gpu_exec's upload_experts) are read affine: the routed launches
 * compute an expert's matrices from its id instead of loading them from the table, one dependent
 * global load fewer between the top-k (or the ids) and the first weight loads of every block.
 * The interleaved kernel's instances of their own (AFF). Session 26, nvidia-h200, one call, 2 runs
 * each: air 283.3 vs 280.4 tok/s, a3b 517.6 vs 512.4, the same tokens. */
static std::atomic<int> q8_affine_v(-1);
extern "C" int gpu_q8_affine(void) { return hm_env_digit("HOTMOE_AFFINE", 0, 1, 1, q8_affine_v); }
extern "C" void gpu_q8_affine_set(int on) { q8_affine_v.store(on ? 1 : 0); }
/* HOTMOE_Q8_BPS3: 1 (the default; 0 turns it off), Q3_K's interleaved register kernel at three
 * blocks a SM (launch bounds for 3: 76-80 registers, no spills, against 106 at 2),
 * its grid and its lanes a row chosen for three blocks a SM (air's routed gate/up: 4 lanes, 352
 * blocks, ~21 warps a SM against 2 lanes, 176 blocks, ~11); 2, Q4_K and Q5_K too (a3b's routed
 * gate/up: 8 lanes, 384 blocks against 4, 192; air's attention and shared expert keep theirs).
 * The layout is uploaded for those lanes, and every launch of the type takes them (GGUF rows,
 * batched), so the layouts stay bitwise alike. Measured (session 20, air resident):
 * 268.5, 267.2 and 268.3 tok/s against 264.5, 263.3 and 264.8 at two (three calls); =2 loses on
 * a3b (466.8 against 479.6). */
static int q8_bps3_mode(void) {
    static std::atomic<int> c(-1);
    return hm_env_digit("HOTMOE_Q8_BPS3", 0, 2, 1, c);
}
/* Rearranged chunks in interleaved matrices, by default (each switch read once, so that the
 * upload and the launches agree; the same integers, so bitwise the GGUF chunks' results): Q3_K's
 * q3r chunks (gemv_q8.cuh: q3r_pack_chunk, read by Q8W_Q3_KR; air 273.7 tok/s against 270.7 with
 * HOTMOE_Q3R=0, session 21) and Q4_0's q4r chunks (q4r_pack_chunk, Q8W_Q4R; air 274.6 against
 * 273.7 with HOTMOE_Q4R=0). The prefill's dequantizer reads them with TQ3R and TQ4R. */
static int q8_rearr_on(int type) {
    static std::atomic<int> c3(-1), c4(-1);
    if (type == HM_TYPE_Q3_K) return hm_env_digit("HOTMOE_Q3R", 0, 1, 1, c3);
    if (type == HM_TYPE_Q4_0) return hm_env_digit("HOTMOE_Q4R", 0, 1, 1, c4);
    return 0;
}
extern "C" int gpu_q8_rearranged(int type) { return q8_rearr_on(type); }
/* the decoder of a type's rearranged chunks (T itself for the others) */
template <class T> struct q8_rearr { using type = T; static constexpr int ggml = -1; };
template <> struct q8_rearr<Q8W_Q3_K> { using type = Q8W_Q3_KR; static constexpr int ggml = HM_TYPE_Q3_K; };
template <> struct q8_rearr<Q8W_Q4_0> { using type = Q8W_Q4R; static constexpr int ggml = HM_TYPE_Q4_0; };

/* blocks a SM of the interleaved register kernel for a type (and the lanes of its launches) */
static int q8_inter_bps(int type) {
    const int m = q8_bps3_mode();
    return (m >= 1 && type == HM_TYPE_Q3_K) || (m == 2 && (type == HM_TYPE_Q4_K || type == HM_TYPE_Q5_K)) ? 3 : 2;
}
/* the ggml type of a decoder HOTMOE_Q8_BPS3 may take (-1: none); those are built for three too */
template <class T> struct q8_bps3_type { static constexpr int v = -1; };
template <bool P> struct q8_bps3_type<Q8W_Q3_KT<P>> { static constexpr int v = HM_TYPE_Q3_K; };
template <> struct q8_bps3_type<Q8W_Q4_K> { static constexpr int v = HM_TYPE_Q4_K; };
template <> struct q8_bps3_type<Q8W_Q5_K> { static constexpr int v = HM_TYPE_Q5_K; };

/* the register kernel's lane shift for a launch of this shape (q8_launch's choice) on a grid of
 * bps blocks a SM */
static int q8_lshift_of(int nchunks, int nrows, int nmat, int tok, int bps = 2) {
    const long cap = q8_lane_cap();
    int ls = q8_lanes_shift_for(nchunks, (long)nrows * nmat * tok, bps == 2 ? cap : cap / 2 * bps);
    if (nmat == 2 && ls > 4) ls = 4;
    return ls;
}
/* types the interleaved kernel is built for */
template <class T> struct q8_inter_ok {
    static constexpr bool v = std::is_same<T, Q8W_Q3_K>::value || std::is_same<T, Q8W_Q4_0>::value ||
                              std::is_same<T, Q8W_Q4_K>::value || std::is_same<T, Q8W_Q6_K>::value ||
                              std::is_same<T, Q8W_Q5_K>::value || std::is_same<T, Q8W_Q8_0>::value;
};

/* HOTMOE_XEARLY, bits (3 by default: 1 and 2; 0 none): 1, the routed launch, where x's records are
 * not complete before its wait (q8_params' xpre: under HOTMOE_ROUTER_NORM), loads them into
 * registers before its top-k, so that their round trip overlaps the top-k's instead of following
 * it; 2, the other expert launches on affine tables load their slots' ids before they stage x
 * (q8_params' idpre). nvidia-h200, bench/README.md: 3 against 0 (thirty-eighth pass) air 330.2,
 * 329.8 tok/s against 325.9, 326.2, a3b 531.3 against 528.7.
 * Bits 4, 8, 16 and 32 are no longer switches: their paths are the code (forty-second pass). They
 * were: 4, the routed launch's top-k loads the router's bias with the logits (router_select's
 * bias_early; the SASS had the bias's load after the scores' stores, a second round trip); 8, the
 * q8 GEMVs copy x's records Q8_XC words a thread at a time, all loaded before any is stored
 * (q8_stage_x); 16, k_router_norm loads its rows of x and the o-projection's output before it sums
 * any (ops.cu); 32, the decode attention loads q and the step's own K/V row before it stores
 * either (ops.cu's attn_stage_q_row). All six against 3 (forty-first pass, one call, alternated):
 * air 336.2, 335.9, 336.5 against 329.2, 329.3, 329.2 (+2.1%), a3b 530.4, 530.0 against 523.7,
 * 523.7, the same hashes; but the run-time tests of the four had cost main's path ~2% (a3b against
 * 4284ca2's binary in one call), and fixed paths leave the kernels without the other branch. */
static int q8_xearly(void) {
    static std::atomic<int> c(-1);
    return hm_env_int("HOTMOE_XEARLY", 0, 3, 3, c);
}

template <class T>
static int q8_launch(q8_params p, int k, int nmat, cudaStream_t s) {
    const int nchunks = p.nch + (p.nbl > 0);
    /* interleaved matrices (gpu_q8_inter_pack): the register kernel on their layout (A = 0) */
    const int i0 = q8_inter_find(p.tab0 ? (const void *)p.tab0 : (const void *)p.w), ils = i0 < 0 ? -1 : g_inter[i0].ls;
    /* HOTMOE_Q8_BPS3's types: lanes for three blocks a SM in every layout (the sums depend on the
     * lanes only, so GGUF rows, interleaved and batched stay bitwise alike); the grid and launch
     * bounds for three only in the interleaved kernel */
    const int bps = q8_bps3_type<T>::v >= 0 ? q8_inter_bps(q8_bps3_type<T>::v) : 2;
    p.lshift = q8_lshift_of(nchunks, p.nrows, nmat, p.tok, bps);   /* the interleaved layout's lanes come from here too */
    p.trig = hm_pdl_trigger_mode();
    p.idpre = (q8_xearly() & 2) != 0;
    if (ils >= 0) {
        const int i1 = nmat == 2 ? q8_inter_find(p.tab1) : i0, ls1 = i1 < 0 ? -1 : g_inter[i1].ls;
        if (ls1 != ils) return gemv_fail("gemv_q8: gate table interleaved for %d lanes, up table for %d", 1 << ils, 1 << ls1);
        if (ils != p.lshift)
            return gemv_fail("gemv_q8: matrices interleaved for %d lanes a row, the launch takes %d", 1 << ils, 1 << p.lshift);
        if (!q8_inter_ok<T>::v) return gemv_fail("gemv_q8: interleaved matrices of a type without the interleaved kernel");
        /* HOTMOE_AFFINE: both tables affine at one stride, or neither read that way */
        if (p.tab0 && gpu_q8_affine() && g_inter[i0].stride > 0 && g_inter[i1].stride == g_inter[i0].stride) {
            p.ab0 = g_inter[i0].base; p.ab1 = g_inter[i1].base; p.astride = g_inter[i0].stride;
        }
    }
    p.flat = p.x_stride == 0 && k <= Q8_MAXK;
    p.k = k;
    const int nslices = p.flat ? 1 : k;
    p.nitems = (p.flat ? k * p.nrows : p.nrows) * nmat;
    if (p.ed1 || p.edry) {   /* the post epilogue: an interleaved matrix, one round of R-row blocks, rotation pairs inside blocks */
        const int hd = p.ehd, rot = p.erot, R = Q8_THREADS >> p.lshift;
        const bool pairs = hd > 0 && rot >= 0 && rot % 2 == 0 && rot <= hd && (rot == 0 || R % hd == 0 || (hd % R == 0 && rot <= R));
        if (ils < 0 || nmat != 1 || p.nb != 1 || p.tab0 || bps != 2 || p.erows0 % R || p.erows0 % hd || !pairs ||
            (long)q8_grid_x(p.nitems, p.lshift, nslices, 2) * R < p.nitems || !q8_inter_ok<T>::v)
            return 1;
        if (p.edry) return 0;
    }
    const size_t rs = (size_t)p.nch * T::CB + p.nbl;
    /* else the unaligned loader (A = 1), which only b32 types need; it also takes partial chunks */
    const bool aligned = rs % T::A == 0 && p.nbl == 0;
    if (ils < 0 && !aligned && !q8_b32<T>::v) return 1;
    if (p.nb > 1) {   /* one slot (a matrix, or SwiGLU's gate and up), nb vectors per weight read: the register kernel */
        if (!p.flat || k != 1 || (nmat != 1 && nmat != 2)) return 1;
        const int gx = q8_grid_x(p.nitems, p.lshift, 1, 2);
        /* the vectors in groups of V, a group's blocks along y (each reads the rows; the other groups'
         * reads of them mostly hit L2): the fewest vectors a block that still fit the grid in one
         * round of two blocks a SM, so that a small matrix's launch spreads its sums over the SMs.
         * H100, test_gpu_gemv --bench-nb, 4 vectors, us (V = 4 / 2 / 1): air's v (64 blocks a group)
         * 11.6 / 8.8 / 8.2, its shared down (128) 9.7 / 8.0 / 10.3, q|k (208) 25.2 / 30.5 / 43.5. */
        const int nbt = p.nb;
        for (int v = 1; v < nbt; v++)
            if (nbt % v == 0 && (long)gx * (nbt / v) <= 2L * q8_sm_count()) { p.nb = v; break; }
        const size_t smem = (size_t)p.nb * nchunks * Q8_REC;
        const dim3 grid((unsigned)gx, (unsigned)(nbt / p.nb));
        int rc = 1;
        auto go = [&](auto nm) {
            constexpr int NM = decltype(nm)::value;
            if (ils >= 0) {
                if constexpr (q8_inter_ok<T>::v)
                    rc = q8_rearr_on(q8_rearr<T>::ggml) ? q8b_go<typename q8_rearr<T>::type, 0, NM>(p, grid, smem, s)
                                                        : q8b_go<T, 0, NM>(p, grid, smem, s);
            } else if (aligned) rc = q8b_go<T, T::A, NM>(p, grid, smem, s);
            else if constexpr (q8_b32<T>::v) rc = q8b_go<T, 1, NM>(p, grid, smem, s);
        };
        if (nmat == 2) go(std::integral_constant<int, 2>());
        else go(std::integral_constant<int, 1>());
        if (rc) return rc;
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return gemv_fail("gemv_q8: launch of %d batched blocks failed: %s", gx, cudaGetErrorString(err));
        return 0;
    }
    const q8_next_launch nx = g_next;   /* spent here; a post launch (one round) takes neither */
    g_next = q8_next_launch{};
    if (nx.tk && ils >= 0 && nmat == 1 && nslices == 1 && !p.tab0 && !p.ed1 && bps == 2 && q8_head_tk() > 0) {
        p.tk = nx.tk;   /* a plain interleaved matrix, one vector */
        p.tk_steps = q8_head_tk();
    }
    int gx = q8_grid_x(p.nitems, p.lshift, nslices, ils >= 0 ? bps : 2);
    if (nx.cap > 0 && !p.ed1 && gx > nx.cap) gx = nx.cap;   /* the rounds grow, the lanes and sums stay */
    const dim3 grid((unsigned)gx, (unsigned)nslices);
    const size_t smem = (size_t)((p.ncols + Q8_CHUNK - 1) / Q8_CHUNK) * Q8_REC;
    if (ils >= 0) {
        if constexpr (q8_inter_ok<T>::v) {
            constexpr int B3 = q8_bps3_type<T>::v >= 0 ? 3 : 2;   /* bps is 3 only for those types */
            if (q8_rearr_on(q8_rearr<T>::ggml)) q8_go_inter<typename q8_rearr<T>::type, B3>(p, nmat, bps, grid, smem, s);
            else q8_go_inter<T, B3>(p, nmat, bps, grid, smem, s);
        }
    } else if (nmat == 2) {
        if (aligned) q8_go<T, 2, T::A>(p, grid, smem, s);
        else if constexpr (q8_b32<T>::v) q8_go<T, 2, 1>(p, grid, smem, s);
    } else {
        if (aligned) q8_go<T, 1, T::A>(p, grid, smem, s);
        else if constexpr (q8_b32<T>::v) q8_go<T, 1, 1>(p, grid, smem, s);
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return gemv_fail("gemv_q8: launch of %dx%d blocks failed: %s", gx, nslices, cudaGetErrorString(err));
    return 0;
}

/* Q3_K: the packed scales (default) or one at a time (HOTMOE_Q3K_SCALES=0), for comparison */
static int q8_launch_q3k(q8_params p, int k, int nmat, cudaStream_t s) {
    static std::atomic<int> c(-1);
    return hm_env_digit("HOTMOE_Q3K_SCALES", 0, 1, 1, c) ? q8_launch<Q8W_Q3_K>(p, k, nmat, s) : q8_launch<Q8W_Q3_KT<false>>(p, k, nmat, s);
}

typedef int (*q8_fn)(q8_params, int k, int nmat, cudaStream_t);
struct q8_type {
    int type;
    q8_fn run;
    int b32, bs32; /* a 32-element-block type (rows of any multiple of 32), and its block bytes */
};

static const q8_type k_q8_types[] = {
    { HM_TYPE_Q4_0, q8_launch<Q8W_Q4_0>, 1, Q8W_Q4_0::CB / 8 },   { HM_TYPE_Q4_1, q8_launch<Q8W_Q4_1>, 1, Q8W_Q4_1::CB / 8 },
    { HM_TYPE_Q5_0, q8_launch<Q8W_Q5_0>, 1, Q8W_Q5_0::CB / 8 },   { HM_TYPE_Q5_1, q8_launch<Q8W_Q5_1>, 1, Q8W_Q5_1::CB / 8 },
    { HM_TYPE_Q8_0, q8_launch<Q8W_Q8_0>, 1, Q8W_Q8_0::CB / 8 },   { HM_TYPE_MXFP4, q8_launch<Q8W_MXFP4>, 1, Q8W_MXFP4::CB / 8 },
    { HM_TYPE_Q2_K, q8_launch<Q8W_Q2_K>, 0, 0 },   { HM_TYPE_Q3_K, q8_launch_q3k, 0, 0 },
    { HM_TYPE_Q4_K, q8_launch<Q8W_Q4_K>, 0, 0 },   { HM_TYPE_Q5_K, q8_launch<Q8W_Q5_K>, 0, 0 },
    { HM_TYPE_Q6_K, q8_launch<Q8W_Q6_K>, 0, 0 },   { HM_TYPE_IQ4_XS, q8_launch<Q8W_IQ4_XS>, 0, 0 },
};

static const q8_type *q8_find(int type) {
    for (size_t i = 0; i < sizeof k_q8_types / sizeof k_q8_types[0]; i++)
        if (k_q8_types[i].type == type) return &k_q8_types[i];
    return NULL;
}

int gemv_q8_try(int type, const void *w, const void *const *tab0, const void *const *tab1, const int *ids, int k,
                const float *x, int64_t x_stride, float *y, int64_t y_stride, int ncols, int nrows, int nmat, void *stream, int xg,
                int yg, int64_t ygs, int tok, const void *xq) {
    const q8_type *t = q8_find(type);
    if (!t || ncols <= 0 || ncols > Q8_MAX_NCOLS) return 1;
    if (ncols % (t->b32 ? 32 : Q8_CHUNK)) return 1;
    /* x rows must stay 16-byte aligned for the float4 loads: x is, and x_stride is 0 or ncols */
    if (x_stride % 4) return 1;
    if (x_stride) xq = NULL;   /* records are of one x shared by every slot */
    const int nch = ncols / Q8_CHUNK, nbl = ncols % Q8_CHUNK / 32 * t->bs32;
    /* a row not a multiple of 16 bytes needs the unaligned loader: the 32-element types have it */
    q8_params p = { (const uint8_t *)w, tab0, tab1, ids, x, x_stride, y, y_stride, ncols, nrows, k, 0, 0, 0, nch, nbl, 1, 0, 0, xg, yg, ygs,
                    tok < 1 ? 1 : tok, (const uint8_t *)xq, 0, 0, NULL, NULL, 0, 0, 0, 0.f, NULL, NULL, NULL, NULL, 0,
                    NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0.f, 0, 0, 0, NULL, 0 };
    return t->run(p, k, nmat, (cudaStream_t)stream);
}

/* gemv_q8_try for one interleaved matrix with the q/k/v post in its epilogue (q8_params' ed1):
 * 0, -1 with the reason recorded, 1 when the launch does not take this shape (the caller then runs
 * the GEMV and the post) */
int gemv_q8_try_post(int type, const void *w, const float *x, const void *xq, int ncols, int nrows, const float *b0, const float *b1,
                     float *d0, float *d1, int rows0, int hd, int n_rot, float theta, int kvd, const int *pos, void *stream, int dry) {
    const q8_type *t = q8_find(type);
    if (!t || ncols <= 0 || ncols > Q8_MAX_NCOLS || ncols % (t->b32 ? 32 : Q8_CHUNK)) return 1;
    if (!dry && (!d1 || !pos || (rows0 > 0 && !d0))) return 1;
    const int nch = ncols / Q8_CHUNK, nbl = ncols % Q8_CHUNK / 32 * t->bs32;
    q8_params p = { (const uint8_t *)w, NULL, NULL, NULL, x, 0, d0, 0, ncols, nrows, 1, 0, 0, 0, nch, nbl, 1, 0, 0, 1, 1, 0, 1,
                    (const uint8_t *)xq, 0, 0, NULL, NULL, 0, 0, 0, 0.f, NULL, NULL, NULL, NULL, 0,
                    b0, b1, d0, d1, pos, rows0, hd, n_rot, kvd, theta, dry, 0, 0, NULL, 0 };
    return t->run(p, 1, 1, (cudaStream_t)stream);
}

/* whether gemv_q8_try_routed takes (type, ncols, rn experts, k chosen) */
int gemv_q8_routed_ok(int type, int ncols, int rn, int k) {
    const q8_type *t = q8_find(type);
    return t && ncols > 0 && ncols <= Q8_MAX_NCOLS && ncols % (t->b32 ? 32 : Q8_CHUNK) == 0 && rn >= 1 && rn <= Q8_ROUTE_MAX &&
           k >= 1 && k <= Q8_MAXK && k <= rn;
}

/* the routed experts' SwiGLU launch choosing its k experts from the router's logits (q8_params'
 * rlog): 0, -1 with the reason recorded, 1 when gemv_q8_routed_ok does not take the shape */
int gemv_q8_try_routed(int type, const void *const *tab0, const void *const *tab1, const float *rlog, const float *rbias, int rn,
                       int rfn, int rnorm, float rscale, int *rids, float *rw, int k, const float *x, const void *xq, float *act,
                       int ncols, int nrows, int xq_ready, void *stream) {
    if (!gemv_q8_routed_ok(type, ncols, rn, k)) return 1;
    const q8_type *t = q8_find(type);
    const int nch = ncols / Q8_CHUNK, nbl = ncols % Q8_CHUNK / 32 * t->bs32;
    q8_params p = { NULL, tab0, tab1, rids, x, 0, act, nrows, ncols, nrows, k, 0, 0, 0, nch, nbl, 1, 0, 0, 1, 1, 0, k,
                    (const uint8_t *)xq, 0, xq_ready ? 1 : (q8_xearly() & 1) ? 2 : 0, rlog, rbias, rn, rfn, rnorm, rscale, rids, rw, NULL, NULL, 0,
                    NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0.f, 0, 0, 0, NULL, 0 };
    return t->run(p, k, 2, (cudaStream_t)stream);
}

/* nb (2..Q8_NB) vectors times one matrix in one launch, each weight row read once; 1 when the
 * q8 path does not take (type, ncols) or the records do not fit shared memory. */
int gemv_q8_try_batch(int type, const void *w, const float *x, int64_t xb_stride, float *y, int64_t yb_stride, int nb,
                      int ncols, int nrows, void *stream, const void *const *tab0, const void *const *tab1, const int *ids, int nmat,
                      const void *xq, int64_t xq_stride) {
    const q8_type *t = q8_find(type);
    if (!t || nb < 2 || nb > Q8_NB || ncols <= 0 || ncols > Q8_MAX_NCOLS || (nmat != 1 && nmat != 2)) return 1;
    if (ncols % (t->b32 ? 32 : Q8_CHUNK) || xb_stride % 4 || (nmat == 2 && (!tab0 || !tab1)) || (tab0 && !ids)) return 1;
    if (((uintptr_t)xq | (uintptr_t)(xq ? xq_stride : 0)) % 16) return 1;
    const int nch = ncols / Q8_CHUNK, nbl = ncols % Q8_CHUNK / 32 * t->bs32;
    q8_params p = { (const uint8_t *)w, tab0, tab1, ids, x, 0, y, 0, ncols, nrows, 1, 0, 0, 0, nch, nbl, nb, xb_stride, yb_stride, 1, 1, 0, 1,
                    (const uint8_t *)xq, 0, 0, NULL, NULL, 0, 0, 0, 0.f, NULL, NULL, NULL, NULL, 0,
                    NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0.f, 0, 0, xq ? xq_stride : 0, NULL, 0 };
    return t->run(p, 1, nmat, (cudaStream_t)stream);
}

/* ---- the interleaved layout (resident expert matrices by default; HOTMOE_INTER=0: GGUF rows) ----
 * A matrix of nrows x ncols of a q8-path type whose launches take 1 << ls lanes a row (tok expert
 * slots a token, nmat 2 for gate|up): rows in groups of RW = (32 >> ls) / nmat (a warp's rows of
 * it in one round), each row's chunks in slots of SB = HM_Q8_SLOT_BYTES(CB) (CB padded to 16 bytes,
 * a partial last chunk zero-filled; Q6_K's 210 unpadded), chunk c = li + t L of row r at group +
 * t RW L SB + j RW L 16 + 16 (li RW + r % RW) for its word j, and (Q6_K) its 2-byte tail at group +
 * t RW L SB + 13 RW L 16 + 2 (li RW + r % RW): lane-index-major, so that the words a warp never
 * reads (the last step's empty slots, a partial chunk's zero tail: q8_partw) lie in whole spans of
 * RW 16 bytes that no load touches. Bytes: gpu_q8_inter_bytes (0: not possible for this shape and
 * type). */
static int q8_inter_geom(int type, int ncols, int nrows, int nmat, int tok, int *cb, int *cbp, int *nch, int *ls, int *rw) {
    const q8_type *t = q8_find(type);
    if (!t || ncols <= 0 || ncols > Q8_MAX_NCOLS || ncols % (t->b32 ? 32 : Q8_CHUNK)) return -1;
    switch (type) {
    case HM_TYPE_Q3_K: *cb = Q8W_Q3_K::CB; break;
    case HM_TYPE_Q4_0: *cb = Q8W_Q4_0::CB; break;
    case HM_TYPE_Q4_K: *cb = Q8W_Q4_K::CB; break;
    case HM_TYPE_Q5_K: *cb = Q8W_Q5_K::CB; break;
    case HM_TYPE_Q6_K: *cb = Q8W_Q6_K::CB; break;
    case HM_TYPE_Q8_0: *cb = Q8W_Q8_0::CB; break;
    default: return -1;
    }
    *cbp = HM_Q8_SLOT_BYTES(*cb);
    *nch = (ncols + Q8_CHUNK - 1) / Q8_CHUNK;
    *ls = q8_lshift_of(*nch, nrows, nmat, tok < 1 ? 1 : tok, q8_inter_bps(type));
    *rw = (32 >> *ls) / nmat;
    if (*rw < 1 || nrows % *rw) return -1;
    *nch = (*nch + (1 << *ls) - 1) >> *ls << *ls;   /* chunk slots a row: whole steps of L */
    return 0;
}

extern "C" size_t gpu_q8_inter_bytes(int type, int ncols, int nrows, int nmat, int tok) {
    int cb, cbp, nch, ls, rw;
    if (q8_inter_geom(type, ncols, nrows, nmat, tok, &cb, &cbp, &nch, &ls, &rw)) return 0;
    return (size_t)nrows * nch * cbp;
}

/* an interleaved matrix's row groups (RW rows, one warp's in a round): their count, bytes a step
 * of one (RW L CBP) and the bytes from one group to the next; 0, or -1 when not interleaved */
extern "C" int gpu_q8_inter_groups(int type, int ncols, int nrows, int nmat, int tok, int *ngroups, size_t *step_bytes, size_t *group_bytes) {
    int cb, cbp, nch, ls, rw;
    if (q8_inter_geom(type, ncols, nrows, nmat, tok, &cb, &cbp, &nch, &ls, &rw)) return -1;
    *ngroups = nrows / rw;
    *step_bytes = (size_t)rw * (1 << ls) * cbp;
    *group_bytes = (size_t)rw * nch * cbp;
    return 0;
}

extern "C" int gpu_q8_inter_lanes(int type, int ncols, int nrows, int nmat, int tok) {
    int cb, cbp, nch, ls, rw;
    return q8_inter_geom(type, ncols, nrows, nmat, tok, &cb, &cbp, &nch, &ls, &rw) ? -1 : ls;
}

/* gpu_gemv.h's gpu_q8_inter_pack_src: row groups [g0, g1) (g1 < 0: to the last) of the interleaved
 * layout into dst from its start; the GGUF rows are src[0]'s rows[0], then src[1]'s rows[1], ... */
extern "C" int gpu_q8_inter_pack_src(int type, const void *const *src, const int *rows, int nsrc, int ncols, int nmat, int tok,
                                     void *dst, int g0, int g1, int threads) {
    int64_t sum = 0;
    for (int i = 0; i < nsrc; i++) {
        if (rows[i] < 0 || (rows[i] && !src[i])) return -1;
        sum += rows[i];
    }
    if (nsrc < 1 || sum > INT_MAX) return -1;
    const int nrows = (int)sum;
    int cb, cbp, nch, ls, rw;
    if (q8_inter_geom(type, ncols, nrows, nmat, tok, &cb, &cbp, &nch, &ls, &rw)) return -1;
    const int ng = nrows / rw;
    if (g1 < 0) g1 = ng;
    if (g0 < 0 || g0 > g1 || g1 > ng) return -1;
    const int gb = g0;   /* dst's first group */
    const int L = 1 << ls;
    const bool b32 = type == HM_TYPE_Q4_0 || type == HM_TYPE_Q8_0;   /* 8 blocks a chunk, rows of any multiple of 32 */
    const size_t row_src = b32 ? (size_t)(ncols / 32) * (cb / 8) : (size_t)(ncols / Q8_CHUNK) * cb;   /* GGUF row bytes */
    /* row r's GGUF bytes */
    auto row_at = [&](int r) {
        int i = 0;
        while (r >= rows[i]) r -= rows[i++];
        return (const uint8_t *)src[i] + (size_t)r * row_src;
    };
    uint8_t *d = (uint8_t *)dst;
    const bool rearr = q8_rearr_on(type);   /* q3r (whole chunks: Q3_K rows are multiples of 256) or q4r */
    /* whole groups of rw rows (each a contiguous span of the output) a thread; threads for big
     * matrices (the q3r rearrangement costs ~0.1 us a chunk: ~30 s of air's load in one thread) */
    auto pack = [&](int g0, int g1) {
        uint8_t tmp[160];
        memset(d + (size_t)(g0 - gb) * rw * nch * cbp, 0, (size_t)(g1 - g0) * rw * nch * cbp);
        for (int r = g0 * rw; r < g1 * rw; r++) {
            const uint8_t *sr = row_at(r);
            for (int c = 0; c < nch; c++) {
                const size_t off = (size_t)c * cb;
                if (off >= row_src) break;   /* the empty slots of the last step */
                int nb = (int)(off + cb <= row_src ? cb : row_src - off);   /* a partial last chunk */
                const uint8_t *from = sr + off;
                if (rearr) {   /* a q4r chunk fills its slot (a partial one: its blocks, the rest zero) */
                    if (type == HM_TYPE_Q3_K) q3r_pack_chunk(from, tmp);
                    else { q4r_pack_chunk(from, nb, tmp); nb = cb; }
                    from = tmp;
                }
                const int li = c % L, t = c / L, lo = li * rw + r % rw;
                uint8_t *g = d + (size_t)(r / rw - gb) * rw * nch * cbp + (size_t)t * rw * L * cbp;   /* the step */
                for (int j = 0; j * 16 < nb; j++) {
                    const int n = nb - 16 * j < 16 ? nb - 16 * j : 16;
                    const bool tail = cbp % 16 && j == cb / 16;   /* HM_Q8_SLOT_BYTES: 2 bytes a lane */
                    memcpy(g + (size_t)j * rw * L * 16 + (size_t)lo * (tail ? 2 : 16), from + 16 * j, n);
                }
            }
        }
    };
    const unsigned nt = threads > 0 ? (unsigned)threads : hm_host_threads();
    hm_host_parallel(g1 - g0, threads == 0 && ((size_t)nrows * nch < 16384 || (unsigned)ng < nt) ? 1 : nt,
                     [&](int a, int b) { pack(g0 + a, g0 + b); });
    return 0;
}

extern "C" int gpu_q8_inter_pack_nt(int type, const void *src, int ncols, int nrows, int nmat, int tok, void *dst, int threads) {
    return gpu_q8_inter_pack_src(type, &src, &nrows, 1, ncols, nmat, tok, dst, 0, -1, threads);
}

extern "C" int gpu_q8_inter_pack(int type, const void *src, int ncols, int nrows, int nmat, int tok, void *dst) {
    return gpu_q8_inter_pack_nt(type, src, ncols, nrows, nmat, tok, dst, 0);
}

/* registration happens where tables are made and freed (upload, gpu_exec_free): one thread */
extern "C" int gpu_q8_inter_register(const void *const *tab, int type, int ncols, int nrows, int nmat, int tok) {
    int cb, cbp, nch, ls, rw;
    if (q8_inter_geom(type, ncols, nrows, nmat, tok, &cb, &cbp, &nch, &ls, &rw)) return -1;
    const q8_inter_ent ent = { (const void *)tab, ls, nullptr, 0 };
    const int i = q8_inter_find(tab), n = g_inter_n.load(std::memory_order_relaxed);
    if (i >= 0) { g_inter[i] = ent; return 0; }
    if (n >= Q8_INTER_MAX) return -1;
    g_inter[n] = ent;
    g_inter_n.store(n + 1, std::memory_order_release);
    return 0;
}

/* a registered table whose expert id's matrix is at base + id * stride (every entry: the caller
 * made it so); reads it that way under HOTMOE_AFFINE */
extern "C" int gpu_q8_inter_affine(const void *const *tab, const void *base, int64_t stride) {
    const int i = q8_inter_find(tab);
    if (i < 0 || stride <= 0) return -1;
    g_inter[i].base = (const uint8_t *)base;
    g_inter[i].stride = stride;
    return 0;
}

extern "C" void gpu_q8_inter_unregister(const void *const *tab) {
    const int i = q8_inter_find(tab), n = g_inter_n.load(std::memory_order_relaxed);
    if (i < 0) return;
    g_inter[i] = g_inter[n - 1];   /* the last entry takes its place */
    g_inter_n.store(n - 1, std::memory_order_release);
}

/* x's chunk records in global memory, for the GEMVs that take them (gpu_gemv_q8x): one block */
__global__ void k_q8_records(const float *x, int ncols, uint8_t *xq) {
    hm_pdl_wait();
    q8_quantize_x(x, ncols, xq);
}

extern "C" size_t gpu_q8_records_bytes(int ncols) {
    return ncols > 0 && ncols % 32 == 0 && ncols <= Q8_MAX_NCOLS ? (size_t)(ncols + Q8_CHUNK - 1) / Q8_CHUNK * Q8_REC : 0;
}

extern "C" int gpu_q8_records(const float *x, int ncols, void *xq, void *stream) {
    if (!gpu_q8_records_bytes(ncols)) return gemv_fail("gpu_q8_records: ncols %d: expected a positive multiple of 32 up to %d", ncols, Q8_MAX_NCOLS);
    if (((uintptr_t)x | (uintptr_t)xq) % 16) return gemv_fail("gpu_q8_records: x %p, records %p: expected 16-byte alignment", (const void *)x, xq);
    hm_launch(k_q8_records, 1, Q8_THREADS, 0, (cudaStream_t)stream, x, ncols, (uint8_t *)xq);
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? 0 : gemv_fail("gpu_q8_records: launch failed: %s", cudaGetErrorString(err));
}

static std::atomic<int> g_mode(-1);

int gemv_q8_mode(void) {
    int m = g_mode.load(std::memory_order_relaxed);
    if (m < 0) {
        const char *env = getenv("HOTMOE_GEMV_MODE");
        m = env && env[0] && atoi(env) == 0 ? 0 : 1;
        g_mode.store(m, std::memory_order_relaxed);
    }
    return m;
}

extern "C" int gpu_gemv_set_mode(int mode) {
    if (mode != 0 && mode != 1) return gemv_fail("gpu_gemv_set_mode: mode %d: expected 0 (F32 activations) or 1 (q8 + dp4a)", mode);
    g_mode.store(mode, std::memory_order_relaxed);
    return 0;
}
