/* test_inter_layout.cu - the interleaved expert layout (HOTMOE_INTER, gpu_q8_inter_pack) on the host:
 * every byte of every chunk of the GGUF rows lands where the q8 register kernel's interleaved load
 * (gemv_q8.cu, A = 0) reads it, every other byte of the layout is zero, its size is what
 * gpu_q8_inter_bytes says, and the shapes and types it cannot take are refused. Needs no GPU (the
 * lane choice falls back to 132 SMs without one), so CI runs it in the CUDA build. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "gpu_gemv.h"
#include "gemv_q8.cuh"   /* q3r_pack_chunk, q4r_pack_chunk */
extern "C" {
#include "exec.h"
#include "quant.h"
}

static int n_pass, n_fail;
static uint64_t rs_ = 0x243F6A8885A308D3ull;
static uint8_t rnd8(void) { rs_ ^= rs_ << 13; rs_ ^= rs_ >> 7; rs_ ^= rs_ << 17; return (uint8_t)(rs_ >> 24); }

/* the kernel's address of byte b of chunk c of row r (gemv_q8_kernel, INTER) */
static size_t kernel_addr(int r, int c, int b, int ls, int nmat, int nch, int cbp) {
    const int L = 1 << ls, RW = (32 >> ls) / nmat, slots = ((nch + L - 1) >> ls) << ls;
    const size_t rs = (size_t)slots * cbp;
    const int li = c & (L - 1), t = c >> ls, j = b / 16, k = b % 16, lo = li * RW + (r & (RW - 1));
    const bool tail = cbp % 16 && j == cbp / 16;   /* Q6_K's 2-byte tail: 2 bytes a lane after the words */
    return (size_t)(r & ~(RW - 1)) * rs + (size_t)lo * (tail ? 2 : 16) + (size_t)t * RW * L * cbp + (size_t)j * RW * L * 16 + k;
}

static void check(int type, int ncols, int nrows, int nmat, int tok, int cb) {
    char what[128];
    snprintf(what, sizeof what, "%s %d x %d, %s, %d slots a token", hm_type_get(type)->name, nrows, ncols, nmat == 2 ? "gate|up" : "down", tok);
    const int ls = gpu_q8_inter_lanes(type, ncols, nrows, nmat, tok);
    const size_t nb = gpu_q8_inter_bytes(type, ncols, nrows, nmat, tok);
    const size_t row = hm_row_size(type, ncols);
    const int nch = (ncols + 255) / 256, cbp = HM_Q8_SLOT_BYTES(cb);
    std::vector<uint8_t> src(row * nrows), dst(nb ? nb : 1, 0xEE), seen(nb ? nb : 1, 0);
    for (auto &v : src) v = rnd8() | 1;   /* never zero: a zero in the layout is padding */
    const int L = ls >= 0 ? 1 << ls : 0, slots = ls >= 0 ? ((nch + L - 1) >> ls) << ls : 0;
    if (ls < 0 || nb != (size_t)nrows * slots * cbp || gpu_q8_inter_pack(type, src.data(), ncols, nrows, nmat, tok, dst.data())) {
        printf("FAIL %s: lanes %d, %zu bytes (expected %zu), or the pack refused\n", what, ls, nb, (size_t)nrows * slots * cbp);
        n_fail++;
        return;
    }
    size_t bad = 0;
    const bool rearr = gpu_q8_rearranged(type);   /* q3r/q4r by default; HOTMOE_Q3R=0, HOTMOE_Q4R=0: GGUF chunks */
    const bool q3r = rearr && type == HM_TYPE_Q3_K, q4r = rearr && type == HM_TYPE_Q4_0;   /* a q4r chunk fills its slot */
    uint8_t qc[144];
    for (int r = 0; r < nrows; r++)
        for (int c = 0; c < nch; c++) {
            const size_t off = (size_t)c * cb;
            int n = (int)(off + cb <= row ? cb : row - off);   /* a partial last chunk */
            const uint8_t *want = src.data() + (size_t)r * row + off;
            if (q3r) { q3r_pack_chunk(want, qc); want = qc; }
            if (q4r) { q4r_pack_chunk(want, n, qc); want = qc; n = cb; }
            for (int b = 0; b < n; b++) {
                const size_t a = kernel_addr(r, c, b, ls, nmat, nch, cbp);
                if (a >= nb || dst[a] != want[b] || seen[a]) bad++;
                else seen[a] = 1;
            }
        }
    for (size_t i = 0; i < nb; i++)
        if (!seen[i] && dst[i]) bad++;
    /* the bytes the kernel's loads ask for: each chunk's 16-byte words (and Q6_K's 2-byte tail), a
     * partial last chunk's only those with data (gemv_q8.cu's q8_partw). Memory is read in 32-byte
     * sectors: the bytes of the sectors it touches that no lane asks for must stay under 1% of
     * those asked for (the lane-minor layout before it read 9-42% more on air's and a3b's downs) */
    std::vector<uint8_t> rd(nb, 0);
    const int part = (int)(row % cb);   /* a partial last chunk's GGUF bytes */
    for (int r = 0; r < nrows; r++)
        for (int c = 0; c < nch; c++) {
            const int nw = c == nch - 1 && part ? (q4r ? 1 + part / 18 : (part + 15) / 16) : (cb + 15) / 16;
            for (int j = 0; j < nw; j++) {
                const int n = cbp % 16 && j == cbp / 16 ? 2 : 16;
                memset(rd.data() + kernel_addr(r, c, 16 * j, ls, nmat, nch, cbp), 1, n);
            }
        }
    size_t asked = 0, fetched = 0;
    for (size_t i = 0; i < nb; i += 32) {
        size_t a = 0;
        for (size_t b = i; b < i + 32 && b < nb; b++) a += rd[b];
        asked += a;
        fetched += a ? 32 : 0;
    }
    const bool waste = fetched - asked > asked / 100;
    printf("%s %s%s: %d lanes a row, %zu bytes (GGUF %zu), %zu asked for, %zu fetched%s\n", bad || waste ? "FAIL" : "PASS", what,
           q3r ? " (q3r chunks)" : q4r ? " (q4r chunks)" : "", L, nb, row * nrows, asked, fetched,
           bad ? ": bytes misplaced or padding not zero" : waste ? ": sectors fetched for bytes no lane asks for" : ": every byte where the kernel reads it, padding zero, sectors fetched for what lanes ask");
    bad || waste ? n_fail++ : n_pass++;
}

/* gpu_q8_inter_pack_nt (the staged upload packs each expert's matrices on one thread,
 * HOTMOE_UPLOAD_THREADS) and gpu_q8_inter_pack_src by row groups (its chunks of the other matrices),
 * from one array and from the rows cut into three arrays at other rows (q|k|v from its three
 * matrices): the same bytes as gpu_q8_inter_pack's own choice, into buffers of other bytes (every
 * byte written) */
static void threads_same(int type, int ncols, int nrows, int nmat, int tok) {
    const size_t nb = gpu_q8_inter_bytes(type, ncols, nrows, nmat, tok);
    std::vector<uint8_t> src(hm_row_size(type, ncols) * nrows), want(nb), got(nb);
    for (auto &v : src) v = rnd8();
    int bad = nb == 0 || gpu_q8_inter_pack(type, src.data(), ncols, nrows, nmat, tok, want.data());
    const int nts[3] = { 1, 3, 16 };
    for (int i = 0; i < 3 && !bad; i++) {
        memset(got.data(), 0xA5, nb);
        bad = gpu_q8_inter_pack_nt(type, src.data(), ncols, nrows, nmat, tok, got.data(), nts[i]) || memcmp(got.data(), want.data(), nb);
    }
    /* and by row groups, gpc at a time, each chunk packed into a buffer of its own (the staged upload's chunks) */
    int ng = 0;
    size_t sb = 0, gsz = 0;
    bad = bad || gpu_q8_inter_groups(type, ncols, nrows, nmat, tok, &ng, &sb, &gsz) || (size_t)ng * gsz != nb;
    /* the rows in separate copies: one array; q|k|v-like (the last 2 x 1/8 of the rows); cut at rows 1 and 6 */
    const size_t rb = hm_row_size(type, ncols);
    const int cuts[3][3] = { { nrows, 0, 0 }, { nrows - nrows / 4, nrows / 8, nrows / 8 }, { 1, 5, nrows - 6 } };
    const int gpcs[3] = { 1, 3, 7 };
    for (int i = 0; i < 3 && !bad; i++) {
        std::vector<uint8_t> part[3];
        const void *ps[3];
        for (int j = 0, r0 = 0; j < 3; r0 += cuts[i][j++]) {
            part[j].assign(src.begin() + (size_t)r0 * rb, src.begin() + (size_t)(r0 + cuts[i][j]) * rb);
            ps[j] = part[j].empty() ? NULL : part[j].data();
        }
        const int nsrc = cuts[i][1] ? 3 : 1;
        memset(got.data(), 0xA5, nb);
        for (int g0 = 0; g0 < ng && !bad; g0 += gpcs[i]) {
            const int g1 = g0 + gpcs[i] < ng ? g0 + gpcs[i] : ng;
            std::vector<uint8_t> chunk((size_t)(g1 - g0) * gsz, 0x5A);
            bad = gpu_q8_inter_pack_src(type, ps, cuts[i], nsrc, ncols, nmat, tok, chunk.data(), g0, g1, 1);
            memcpy(got.data() + (size_t)g0 * gsz, chunk.data(), chunk.size());
        }
        bad = bad || memcmp(got.data(), want.data(), nb);
        memset(got.data(), 0xA5, nb);   /* whole, on the pack's own threads */
        bad = bad || gpu_q8_inter_pack_src(type, ps, cuts[i], nsrc, ncols, nmat, tok, got.data(), 0, -1, 0) ||
              memcmp(got.data(), want.data(), nb);
    }
    const void *p1 = src.data();
    const int short_rows[2] = { nrows - 1, 0 };
    bad = bad || !gpu_q8_inter_pack_src(type, &p1, &nrows, 1, ncols, nmat, tok, got.data(), 0, ng + 1, 1) ||   /* past the end */
          !gpu_q8_inter_pack_src(type, &p1, &nrows, 1, ncols, nmat, tok, got.data(), -1, 1, 1) ||           /* before the start */
          !gpu_q8_inter_pack_src(type, &p1, short_rows, 1, ncols, nmat, tok, got.data(), 0, -1, 1);         /* rows not whole groups */
    printf("%s %s %d x %d packed on 1, 3 and 16 threads, by 1, 3 and 7 row groups a chunk from rows in 1 or 3 arrays: %s\n",
           bad ? "FAIL" : "PASS", hm_type_get(type)->name, nrows, ncols, bad ? "bytes differ from the pack's own choice" : "the same bytes");
    bad ? n_fail++ : n_pass++;
}

/* gpu_exec_expert_image (the image HOTMOE_UPLOAD_THREADS stages for an expert): gate at 0, up at
 * al256(gate's bytes), down after up's al256, each packed as gpu_q8_inter_pack makes it (GEMV mode 1
 * and types it takes) or copied (mode 0, or a type without the layout), the gaps zero, in the stride
 * the upload gives the expert; written over other bytes */
static void expert_image(int tgu, int tdn, int H, int I, int tok, int mode) {
    char what[160];
    snprintf(what, sizeof what, "expert image %s/%s, %d x %d, %d slots a token, GEMV mode %d", hm_type_get(tgu)->name,
             hm_type_get(tdn)->name, I, H, tok, mode);
    gpu_gemv_set_mode(mode);
    const size_t rg = hm_row_size(tgu, H) * I, rd = hm_row_size(tdn, I) * H;
    std::vector<uint8_t> g(rg), u(rg), d(rd);
    for (auto *v : { &g, &u, &d })
        for (auto &b : *v) b = rnd8();
    hm_ffn_w f;
    memset(&f, 0, sizeof f);
    f.gate = { tgu, 2, { H, I, 1, 1 }, g.data(), rg };
    f.up = { tgu, 2, { H, I, 1, 1 }, u.data(), rg };
    f.down = { tdn, 2, { I, H, 1, 1 }, d.data(), rd };
    const char *ie = getenv("HOTMOE_INTER");   /* 0: GGUF rows everywhere (exec.cu's inter_on) */
    const bool inter = mode == 1 && !(ie && ie[0] == '0') && gpu_q8_inter_bytes(tgu, H, I, 2, tok) && gpu_q8_inter_bytes(tdn, I, H, 1, tok);
    const size_t gb = inter ? gpu_q8_inter_bytes(tgu, H, I, 2, tok) : rg, db = inter ? gpu_q8_inter_bytes(tdn, I, H, 1, tok) : rd;
    auto al = [](size_t n) { return (n + 255) & ~(size_t)255; };
    const size_t ou = al(gb), od = ou + al(gb), st = od + al(db);
    std::vector<uint8_t> want(st, 0), got(st, 0xA5);
    int bad = 0;
    if (inter)
        bad = gpu_q8_inter_pack(tgu, g.data(), H, I, 2, tok, want.data()) || gpu_q8_inter_pack(tgu, u.data(), H, I, 2, tok, want.data() + ou) ||
              gpu_q8_inter_pack(tdn, d.data(), I, H, 1, tok, want.data() + od);
    else {
        memcpy(want.data(), g.data(), rg); memcpy(want.data() + ou, u.data(), rg); memcpy(want.data() + od, d.data(), rd);
    }
    const size_t n = gpu_exec_expert_image(&f, tok, nullptr), m = bad ? 0 : gpu_exec_expert_image(&f, tok, got.data());
    bad = bad || n != st || m != st || memcmp(got.data(), want.data(), st);
    printf("%s %s (%s): %s\n", bad ? "FAIL" : "PASS", what, inter ? "interleaved" : "copied",
           bad ? "size or bytes differ from the matrices packed one by one" : "the matrices packed one by one, gaps zero");
    bad ? n_fail++ : n_pass++;
    gpu_gemv_set_mode(1);
}

static void refused(int type, int ncols, int nrows, int nmat, int tok, const char *why) {
    std::vector<uint8_t> src(1 << 20, 1), dst(1 << 22);
    const bool ok = gpu_q8_inter_bytes(type, ncols, nrows, nmat, tok) == 0 && gpu_q8_inter_lanes(type, ncols, nrows, nmat, tok) < 0 &&
                    gpu_q8_inter_pack(type, src.data(), ncols, nrows, nmat, tok, dst.data()) != 0;
    printf("%s %s %d x %d refused (%s)\n", ok ? "PASS" : "FAIL", hm_type_get(type)->name, nrows, ncols, why);
    ok ? n_pass++ : n_fail++;
}

int main(void) {
    check(HM_TYPE_Q3_K, 4096, 1408, 2, 8, 110);   /* air's routed gate|up */
    check(HM_TYPE_Q4_0, 1408, 4096, 1, 8, 144);   /* air's routed down: a partial last chunk */
    check(HM_TYPE_Q4_0, 1408, 4096, 1, 1, 144);   /* its shared expert's down: empty chunk slots */
    check(HM_TYPE_Q4_K, 4096, 1408, 2, 1, 144);   /* its shared expert's gate|up */
    check(HM_TYPE_Q4_K, 2048, 768, 2, 8, 144);    /* a3b's gate|up */
    check(HM_TYPE_Q6_K, 768, 2048, 1, 8, 210);    /* a3b's down: 3 chunks, 4 lanes */
    check(HM_TYPE_Q6_K, 4096, 1024, 1, 1, 210);   /* air's attn_v (and output): 16 lanes, the tails apart */
    check(HM_TYPE_Q6_K, 512, 96, 2, 2, 210);      /* a Q6_K gate|up: the tails of 16 slots a step */
    check(HM_TYPE_Q5_K, 512, 96, 2, 2, 176);
    check(HM_TYPE_Q8_0, 96, 64, 1, 1, 272);       /* one partial chunk a row */
    expert_image(HM_TYPE_Q3_K, HM_TYPE_Q4_0, 4096, 1408, 8, 1);   /* air's routed experts */
    expert_image(HM_TYPE_Q4_K, HM_TYPE_Q4_0, 4096, 1408, 1, 1);   /* its shared expert */
    expert_image(HM_TYPE_Q4_K, HM_TYPE_Q6_K, 2048, 768, 8, 1);    /* a3b's */
    expert_image(HM_TYPE_Q4_K, HM_TYPE_Q6_K, 2048, 768, 8, 0);    /* GEMV mode 0: copied */
    expert_image(HM_TYPE_IQ4_XS, HM_TYPE_IQ4_XS, 2048, 768, 8, 1);   /* no interleaved kernel for the type: copied */
    threads_same(HM_TYPE_Q3_K, 4096, 1408, 2, 8);
    threads_same(HM_TYPE_Q4_0, 1408, 4096, 1, 8);
    threads_same(HM_TYPE_Q6_K, 768, 64, 1, 8);     /* fewer row groups than 16 threads */
    refused(HM_TYPE_Q4_K, 1000, 64, 1, 1, "a K-quant row not a multiple of 256");
    refused(HM_TYPE_IQ4_XS, 4096, 64, 1, 1, "a type without the interleaved kernel");
    refused(HM_TYPE_Q4_K, 4096, 1401, 2, 8, "rows not a multiple of a warp's rows");
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
