/* gguf_write.c - a streaming GGUF v3 writer: metadata and tensor infos are buffered, tensor data
 * is written in declaration order, so multi-GB files never need to be held in memory. */
#include "gguf.h"
#include "quant.h"
#include <stdlib.h>
#include <string.h>

#define ALIGN 32

typedef struct { char *name; int type, n_dims; int64_t ne[4]; uint64_t nbytes, offset; } wtensor;

struct gguf_writer {
    uint8_t *kv; size_t kv_len, kv_cap; uint64_t n_kv;
    wtensor *t; uint64_t n_t, t_cap, next;
    uint64_t pos; /* bytes written so far into the data section */
};

static void put(gguf_writer *w, const void *p, size_t n) {
    if (w->kv_len + n > w->kv_cap) {
        w->kv_cap = (w->kv_len + n) * 2 + 256;
        uint8_t *nb = realloc(w->kv, w->kv_cap);
        if (!nb) abort();
        w->kv = nb;
    }
    memcpy(w->kv + w->kv_len, p, n); w->kv_len += n;
}
static void put_u32(gguf_writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(gguf_writer *w, uint64_t v) { put(w, &v, 8); }
static void put_str(gguf_writer *w, const char *s) { uint64_t n = strlen(s); put_u64(w, n); put(w, s, n); }
static void key(gguf_writer *w, const char *k, uint32_t type) { put_str(w, k); put_u32(w, type); w->n_kv++; }

gguf_writer *gguf_writer_new(void) { return hm_calloc(1, sizeof(gguf_writer)); }
void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t); free(w->kv); free(w);
}
void gguf_w_str(gguf_writer *w, const char *k, const char *v) { key(w, k, GGUF_STR); put_str(w, v); }
void gguf_w_u32(gguf_writer *w, const char *k, uint32_t v) { key(w, k, GGUF_U32); put_u32(w, v); }
void gguf_w_i32(gguf_writer *w, const char *k, int32_t v) { key(w, k, GGUF_I32); put(w, &v, 4); }
void gguf_w_f32(gguf_writer *w, const char *k, float v) { key(w, k, GGUF_F32); put(w, &v, 4); }
void gguf_w_bool(gguf_writer *w, const char *k, bool v) { uint8_t b = v; key(w, k, GGUF_BOOL); put(w, &b, 1); }
void gguf_w_arr_str(gguf_writer *w, const char *k, const char *const *v, uint64_t n) {
    key(w, k, GGUF_ARR); put_u32(w, GGUF_STR); put_u64(w, n);
    for (uint64_t i = 0; i < n; i++) put_str(w, v[i]);
}
void gguf_w_arr_i32(gguf_writer *w, const char *k, const int32_t *v, uint64_t n) {
    key(w, k, GGUF_ARR); put_u32(w, GGUF_I32); put_u64(w, n); put(w, v, n * 4);
}
void gguf_w_arr_f32(gguf_writer *w, const char *k, const float *v, uint64_t n) {
    key(w, k, GGUF_ARR); put_u32(w, GGUF_F32); put_u64(w, n); put(w, v, n * 4);
}

void gguf_w_tensor(gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne) {
    if (w->n_t == w->t_cap) {
        w->t_cap = w->t_cap ? w->t_cap * 2 : 64;
        wtensor *nt = realloc(w->t, w->t_cap * sizeof *nt);
        if (!nt) abort();
        w->t = nt;
    }
    wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = hm_strdup(name); t->type = type; t->n_dims = n_dims;
    uint64_t rows = 1;
    for (int i = 0; i < 4; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
    for (int i = 1; i < 4; i++) rows *= (uint64_t)t->ne[i];
    t->nbytes = hm_row_size(type, t->ne[0]) * rows;
    t->offset = w->n_t > 1 ? (w->t[w->n_t - 2].offset + w->t[w->n_t - 2].nbytes + ALIGN - 1) / ALIGN * ALIGN : 0;
}

static int wr(FILE *f, const void *p, size_t n, hm_error *e) {
    if (n && fwrite(p, 1, n, f) != n) return hm_fail(e, "gguf writer: write failed (disk full?)");
    return 0;
}
static int pad(FILE *f, uint64_t pos, hm_error *e) {
    static const uint8_t zeros[ALIGN];
    uint64_t n = (ALIGN - pos % ALIGN) % ALIGN;
    return wr(f, zeros, (size_t)n, e);
}

int gguf_writer_begin(gguf_writer *w, FILE *f, hm_error *e) {
    uint32_t hdr[2] = { 0x46554747u, 3 };
    uint64_t counts[2] = { w->n_t, w->n_kv };
    if (wr(f, hdr, 8, e) || wr(f, counts, 16, e) || wr(f, w->kv, w->kv_len, e)) return -1;
    uint64_t pos = 24 + w->kv_len;
    for (uint64_t i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        uint64_t n = strlen(t->name); uint32_t nd = (uint32_t)t->n_dims, ty = (uint32_t)t->type;
        if (wr(f, &n, 8, e) || wr(f, t->name, n, e) || wr(f, &nd, 4, e)) return -1;
        for (int d = 0; d < t->n_dims; d++) { uint64_t v = (uint64_t)t->ne[d]; if (wr(f, &v, 8, e)) return -1; }
        if (wr(f, &ty, 4, e) || wr(f, &t->offset, 8, e)) return -1;
        pos += 8 + n + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
    }
    w->next = 0; w->pos = 0;
    return pad(f, pos, e);
}

int gguf_writer_data(gguf_writer *w, FILE *f, const void *data, size_t nbytes, hm_error *e) {
    if (w->next >= w->n_t) return hm_fail(e, "gguf writer: more tensor data than declared tensors");
    wtensor *t = &w->t[w->next];
    if (nbytes != t->nbytes)
        return hm_fail(e, "gguf writer: tensor '%s': expected %llu bytes, got %zu", t->name,
                       (unsigned long long)t->nbytes, nbytes);
    if (wr(f, data, nbytes, e)) return -1;
    w->pos += nbytes; w->next++;
    if (w->next < w->n_t) { if (pad(f, w->pos, e)) return -1; w->pos = (w->pos + ALIGN - 1) / ALIGN * ALIGN; }
    return 0;
}
