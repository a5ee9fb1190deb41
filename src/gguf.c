/* gguf.c - GGUF v2/v3 reader. Every count, length, shape and offset read from the file is
 * checked against the bytes that are actually there before it is used. */
#include "gguf.h"
#include "quant.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct { const uint8_t *p; size_t size, pos; const char *name; hm_error *e; } reader;

static const size_t vtype_size[GGUF_VTYPE_COUNT] = {
    [GGUF_U8] = 1, [GGUF_I8] = 1, [GGUF_U16] = 2, [GGUF_I16] = 2, [GGUF_U32] = 4, [GGUF_I32] = 4,
    [GGUF_F32] = 4, [GGUF_BOOL] = 1, [GGUF_U64] = 8, [GGUF_I64] = 8, [GGUF_F64] = 8,
};
static const char *vtype_names[GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};
const char *gguf_vtype_name(int t) { return t >= 0 && t < GGUF_VTYPE_COUNT ? vtype_names[t] : "?"; }

static int need(reader *r, uint64_t n, const char *what) {
    if (n > r->size - r->pos)
        return hm_fail(r->e, "%s: truncated at byte %zu reading %s: expected %" PRIu64 " more bytes, found %zu",
                       r->name, r->pos, what, n, r->size - r->pos);
    return 0;
}
static int rd(reader *r, void *dst, size_t n, const char *what) {
    if (need(r, n, what)) return -1;
    memcpy(dst, r->p + r->pos, n); r->pos += n;
    return 0;
}
static int rd_u32(reader *r, uint32_t *v, const char *w) { return rd(r, v, 4, w); }
static int rd_u64(reader *r, uint64_t *v, const char *w) { return rd(r, v, 8, w); }
static int rd_str(reader *r, gguf_str *s, const char *what) {
    uint64_t n;
    if (rd_u64(r, &n, what) || need(r, n, what)) return -1;
    s->s = (const char *)r->p + r->pos; s->len = n; r->pos += n;
    return 0;
}

/* Reads one value of type t (not an array) into kv's scalar slots. */
static int rd_scalar(reader *r, int t, gguf_kv *kv, const char *key) {
    uint8_t b[8] = {0};
    if (t == GGUF_STR) return rd_str(r, &kv->str, key);
    if (rd(r, b, vtype_size[t], key)) return -1;
    switch (t) {
    case GGUF_U8: kv->v.u = b[0]; break;
    case GGUF_I8: kv->v.i = (int8_t)b[0]; break;
    case GGUF_U16: { uint16_t x; memcpy(&x, b, 2); kv->v.u = x; } break;
    case GGUF_I16: { int16_t x; memcpy(&x, b, 2); kv->v.i = x; } break;
    case GGUF_U32: { uint32_t x; memcpy(&x, b, 4); kv->v.u = x; } break;
    case GGUF_I32: { int32_t x; memcpy(&x, b, 4); kv->v.i = x; } break;
    case GGUF_F32: { float x; memcpy(&x, b, 4); kv->v.f = x; } break;
    case GGUF_BOOL:
        if (b[0] > 1) return hm_fail(r->e, "%s: key '%s': expected bool 0 or 1, found %u", r->name, key, b[0]);
        kv->v.b = b[0]; break;
    case GGUF_U64: memcpy(&kv->v.u, b, 8); break;
    case GGUF_I64: memcpy(&kv->v.i, b, 8); break;
    case GGUF_F64: memcpy(&kv->v.f, b, 8); break;
    }
    return 0;
}

static int rd_kv(reader *r, gguf_kv *kv, uint64_t idx) {
    gguf_str k; uint32_t t;
    if (rd_str(r, &k, "metadata key")) return -1;
    kv->key = hm_strndup(k.s, k.len);
    if (rd_u32(r, &t, kv->key)) return -1;
    if (t >= GGUF_VTYPE_COUNT)
        return hm_fail(r->e, "%s: metadata key '%s': expected a value type 0..12, found %u", r->name, kv->key, t);
    kv->type = (int)t;
    if (t != GGUF_ARR) return rd_scalar(r, (int)t, kv, kv->key);
    uint32_t at; uint64_t n;
    if (rd_u32(r, &at, kv->key) || rd_u64(r, &n, kv->key)) return -1;
    if (at >= GGUF_VTYPE_COUNT || at == GGUF_ARR)
        return hm_fail(r->e, "%s: metadata key '%s': expected an array element type 0..12 but not array, found %u",
                       r->name, kv->key, at);
    kv->arr_type = (int)at; kv->arr_n = n;
    if (at == GGUF_STR) {
        /* each string needs at least its 8-byte length: bound n before allocating */
        if (n > (r->size - r->pos) / 8)
            return hm_fail(r->e, "%s: metadata key '%s': array of %" PRIu64 " strings does not fit in the %zu bytes left",
                           r->name, kv->key, n, r->size - r->pos);
        kv->arr_str = hm_calloc(n ? n : 1, sizeof(gguf_str));
        for (uint64_t i = 0; i < n; i++)
            if (rd_str(r, &kv->arr_str[i], kv->key)) return -1;
        return 0;
    }
    size_t es = vtype_size[at];
    if (n > (r->size - r->pos) / es)
        return hm_fail(r->e, "%s: metadata key '%s': array of %" PRIu64 " x %zu bytes does not fit in the %zu bytes left",
                       r->name, kv->key, n, es, r->size - r->pos);
    kv->arr_data = r->p + r->pos; r->pos += n * es;
    (void)idx;
    return 0;
}

static int rd_tensor_info(reader *r, gguf_tensor *t) {
    gguf_str nm; uint32_t nd, ty;
    if (rd_str(r, &nm, "tensor name")) return -1;
    t->name = hm_strndup(nm.s, nm.len);
    if (rd_u32(r, &nd, t->name)) return -1;
    if (nd < 1 || nd > 4)
        return hm_fail(r->e, "%s: tensor '%s': n_dims expected 1..4, found %u", r->name, t->name, nd);
    t->n_dims = (int)nd;
    for (int i = 0; i < 4; i++) t->ne[i] = 1;
    for (uint32_t i = 0; i < nd; i++) {
        uint64_t v;
        if (rd_u64(r, &v, t->name)) return -1;
        if (v == 0 || v > ((uint64_t)1 << 40))
            return hm_fail(r->e, "%s: tensor '%s': dimension %u expected 1..2^40, found %" PRIu64, r->name, t->name, i, v);
        t->ne[i] = (int64_t)v;
    }
    if (rd_u32(r, &ty, t->name) || rd_u64(r, &t->offset, t->name)) return -1;
    t->type = (int)ty;
    const hm_type_traits *tr = hm_type_get((int)ty);
    if (!tr)
        return hm_fail(r->e, "%s: tensor '%s': type expected a known ggml type id, found %u (unknown or unsupported)",
                       r->name, t->name, ty);
    if (t->ne[0] % tr->blck)
        return hm_fail(r->e, "%s: tensor '%s': row length expected a multiple of %s's block size %d, found %" PRId64,
                       r->name, t->name, tr->name, tr->blck, t->ne[0]);
    /* element count must not overflow: each dim <= 2^40 and the product <= 2^50 */
    uint64_t rows = 1;
    for (int i = 1; i < 4; i++) {
        if ((uint64_t)t->ne[i] > ((uint64_t)1 << 50) / rows)
            return hm_fail(r->e, "%s: tensor '%s': shape product expected <= 2^50 elements, found larger", r->name, t->name);
        rows *= (uint64_t)t->ne[i];
    }
    uint64_t rs = hm_row_size((int)ty, t->ne[0]);
    if (rows > ((uint64_t)1 << 50) / (rs ? rs : 1))
        return hm_fail(r->e, "%s: tensor '%s': size expected <= 2^50 bytes, found larger", r->name, t->name);
    t->nbytes = (size_t)(rs * rows);
    return 0;
}

int gguf_parse(gguf_file *g, const uint8_t *buf, size_t size, const char *name, hm_error *e) {
    memset(g, 0, sizeof *g); g->map.fd = -1;
    snprintf(g->path, sizeof g->path, "%s", name);
    reader r = { buf, size, 0, g->path, e };
    uint32_t magic;
    if (rd_u32(&r, &magic, "magic")) return -1;
    if (magic != GGUF_MAGIC) {
        if (magic == 0x47475546u) return hm_fail(e, "%s: magic: big-endian GGUF is not supported", g->path);
        return hm_fail(e, "%s: magic: expected \"GGUF\" (0x46554747), found 0x%08x", g->path, magic);
    }
    if (rd_u32(&r, &g->version, "version")) return -1;
    if (g->version != 2 && g->version != 3)
        return hm_fail(e, "%s: version: expected 2 or 3, found %u", g->path, g->version);
    if (rd_u64(&r, &g->n_tensors, "tensor count") || rd_u64(&r, &g->n_kv, "metadata count")) return -1;
    /* each kv needs >= 12 bytes, each tensor info >= 24: bound counts by the file before allocating */
    if (g->n_kv > size / 12)
        return hm_fail(e, "%s: metadata count: expected at most %zu for a file of %zu bytes, found %" PRIu64,
                       g->path, size / 12, size, g->n_kv);
    if (g->n_tensors > size / 24)
        return hm_fail(e, "%s: tensor count: expected at most %zu for a file of %zu bytes, found %" PRIu64,
                       g->path, size / 24, size, g->n_tensors);
    g->kv = hm_calloc(g->n_kv ? g->n_kv : 1, sizeof(gguf_kv));
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (rd_kv(&r, &g->kv[i], i)) goto fail;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find_kv(g, "general.alignment");
    if (al) {
        if (al->type != GGUF_U32 || al->v.u == 0 || (al->v.u & (al->v.u - 1)) || al->v.u > (1u << 20)) {
            hm_fail(e, "%s: general.alignment: expected a u32 power of two <= 2^20, found %s %" PRIu64,
                    g->path, gguf_vtype_name(al->type), al->v.u);
            goto fail;
        }
        g->alignment = (uint32_t)al->v.u;
    }
    g->tensors = hm_calloc(g->n_tensors ? g->n_tensors : 1, sizeof(gguf_tensor));
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (rd_tensor_info(&r, &g->tensors[i])) goto fail;
    size_t data = (r.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors && data > size) {
        hm_fail(e, "%s: data section: expected to start at byte %zu, but the file has %zu bytes", g->path, data, size);
        goto fail;
    }
    g->data_offset = data;
    size_t avail = data <= size ? size - data : 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment) {
            hm_fail(e, "%s: tensor '%s': offset expected a multiple of alignment %u, found %" PRIu64,
                    g->path, t->name, g->alignment, t->offset);
            goto fail;
        }
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            hm_fail(e, "%s: tensor '%s': data [%" PRIu64 ", +%zu) expected within the %zu-byte data section (file truncated?)",
                    g->path, t->name, t->offset, t->nbytes, avail);
            goto fail;
        }
        t->data = buf + data + t->offset;
        for (uint64_t j = 0; j < i; j++)
            if (!strcmp(g->tensors[j].name, t->name)) {
                hm_fail(e, "%s: tensor '%s': expected unique tensor names, found a duplicate", g->path, t->name);
                goto fail;
            }
    }
    return 0;
fail:
    gguf_close(g);
    return -1;
}

int gguf_open(gguf_file *g, const char *path, hm_error *e) {
    hm_map m;
    if (hm_map_open(&m, path, e)) return -1;
    if (gguf_parse(g, m.data, m.size, path, e)) { hm_map_close(&m); return -1; }
    g->map = m;
    return 0;
}

void gguf_close(gguf_file *g) {
    for (uint64_t i = 0; g->kv && i < g->n_kv; i++) { free(g->kv[i].key); free(g->kv[i].arr_str); }
    for (uint64_t i = 0; g->tensors && i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv); free(g->tensors);
    if (g->map.fd >= 0 && g->map.data) hm_map_close(&g->map);
    memset(g, 0, sizeof *g); g->map.fd = -1;
}

const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key && !strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].name && !strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

static int is_int(int t) { return t <= GGUF_I32 || t == GGUF_U64 || t == GGUF_I64; }
static int is_signed(int t) { return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64; }

int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, hm_error *e) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv) return hm_fail(e, "%s: metadata key '%s': expected an integer, found nothing", g->path, key);
    if (!is_int(kv->type) || (is_signed(kv->type) && kv->v.i < 0))
        return hm_fail(e, "%s: metadata key '%s': expected a non-negative integer, found %s", g->path, key,
                       gguf_vtype_name(kv->type));
    *out = kv->v.u;
    return 0;
}

int gguf_get_f64(const gguf_file *g, const char *key, double *out, hm_error *e) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv) return hm_fail(e, "%s: metadata key '%s': expected a number, found nothing", g->path, key);
    if (kv->type == GGUF_F32 || kv->type == GGUF_F64) *out = kv->v.f;
    else if (is_int(kv->type)) *out = is_signed(kv->type) ? (double)kv->v.i : (double)kv->v.u;
    else return hm_fail(e, "%s: metadata key '%s': expected a number, found %s", g->path, key, gguf_vtype_name(kv->type));
    return 0;
}

int gguf_get_bool(const gguf_file *g, const char *key, bool *out, hm_error *e) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->type != GGUF_BOOL)
        return hm_fail(e, "%s: metadata key '%s': expected a bool, found %s", g->path, key,
                       kv ? gguf_vtype_name(kv->type) : "nothing");
    *out = kv->v.b;
    return 0;
}

char *gguf_get_str(const gguf_file *g, const char *key) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->type != GGUF_STR) return NULL;
    return hm_strndup(kv->str.s, kv->str.len);
}

/* float -> int64 for values from a file: NaN gives 0, out-of-range values saturate (a plain cast is UB) */
static int64_t f64_to_i64(double x) {
    if (x != x) return 0;
    if (x >= 9223372036854775807.0) return INT64_MAX;
    if (x <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)x;
}

double gguf_arr_f64(const gguf_kv *kv, uint64_t i) {
    const uint8_t *p = kv->arr_data + i * vtype_size[kv->arr_type];
    switch (kv->arr_type) {
    case GGUF_F32: { float x; memcpy(&x, p, 4); return x; }
    case GGUF_F64: { double x; memcpy(&x, p, 8); return x; }
    case GGUF_U64: { uint64_t x; memcpy(&x, p, 8); return (double)x; }
    default: return (double)gguf_arr_i64(kv, i);
    }
}

int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i) {
    const uint8_t *p = kv->arr_data + i * vtype_size[kv->arr_type];
    switch (kv->arr_type) {
    case GGUF_U8: case GGUF_BOOL: return p[0];
    case GGUF_I8: return (int8_t)p[0];
    case GGUF_U16: { uint16_t x; memcpy(&x, p, 2); return x; }
    case GGUF_I16: { int16_t x; memcpy(&x, p, 2); return x; }
    case GGUF_U32: { uint32_t x; memcpy(&x, p, 4); return x; }
    case GGUF_I32: { int32_t x; memcpy(&x, p, 4); return x; }
    case GGUF_U64: case GGUF_I64: { int64_t x; memcpy(&x, p, 8); return x; }
    case GGUF_F32: { float x; memcpy(&x, p, 4); return f64_to_i64(x); }
    case GGUF_F64: { double x; memcpy(&x, p, 8); return f64_to_i64(x); }
    }
    return 0;
}
