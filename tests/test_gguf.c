/* test_gguf.c - GGUF reader on hand-built images (v2 and v3, every metadata value type, arrays,
 * general.alignment, the tensor table) and a writer -> reader round trip. */
#include "gguf.h"
#include "quant.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;
#define CHECK(cond, ...) do { int ok_ = (cond); printf("%s ", ok_ ? "PASS" : "FAIL"); printf(__VA_ARGS__); printf("\n"); ok_ ? n_pass++ : n_fail++; } while (0)

typedef struct { uint8_t *p; size_t n, cap; } buf;
static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) { b->cap = (b->n + n) * 2; b->p = realloc(b->p, b->cap); }
    memcpy(b->p + b->n, d, n); b->n += n;
}
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void key(buf *b, const char *k, uint32_t t) { str(b, k); u32(b, t); }

/* An image with one key of every scalar type, arrays of several, alignment 64, two tensors. */
static buf build(uint32_t version) {
    buf b = { 0 };
    u32(&b, 0x46554747u); u32(&b, version); u64(&b, 2); u64(&b, 17);
    uint8_t u8v = 200; int8_t i8v = -100; uint16_t u16v = 60000; int16_t i16v = -30000; int32_t i32v = -2000000000;
    float f32v = 1.5f; uint8_t bv = 1; int64_t i64v = -5000000000LL; double f64v = 3.141592653589793;
    key(&b, "t.u8", GGUF_U8); put(&b, &u8v, 1);
    key(&b, "t.i8", GGUF_I8); put(&b, &i8v, 1);
    key(&b, "t.u16", GGUF_U16); put(&b, &u16v, 2);
    key(&b, "t.i16", GGUF_I16); put(&b, &i16v, 2);
    key(&b, "t.u32", GGUF_U32); u32(&b, 4000000000u);
    key(&b, "t.i32", GGUF_I32); put(&b, &i32v, 4);
    key(&b, "t.f32", GGUF_F32); put(&b, &f32v, 4);
    key(&b, "t.bool", GGUF_BOOL); put(&b, &bv, 1);
    key(&b, "t.str", GGUF_STR); str(&b, "héllo");
    key(&b, "t.u64", GGUF_U64); u64(&b, 10000000000ULL);
    key(&b, "t.i64", GGUF_I64); put(&b, &i64v, 8);
    key(&b, "t.f64", GGUF_F64); put(&b, &f64v, 8);
    key(&b, "t.arr_str", GGUF_ARR); u32(&b, GGUF_STR); u64(&b, 3); str(&b, "a"); str(&b, ""); str(&b, "ccc");
    key(&b, "t.arr_i16", GGUF_ARR); u32(&b, GGUF_I16); u64(&b, 2); int16_t a16[2] = { -1, 7 }; put(&b, a16, 4);
    key(&b, "t.arr_f64", GGUF_ARR); u32(&b, GGUF_F64); u64(&b, 2); double a64[2] = { 0.25, -8 }; put(&b, a64, 16);
    key(&b, "t.arr_empty", GGUF_ARR); u32(&b, GGUF_U8); u64(&b, 0);
    key(&b, "general.alignment", GGUF_U32); u32(&b, 64);
    /* tensors: a 2-D F32 [3, 2] at 0 and a 1-D F16 [5] at 64 */
    str(&b, "w"); u32(&b, 2); u64(&b, 3); u64(&b, 2); u32(&b, HM_TYPE_F32); u64(&b, 0);
    str(&b, "h"); u32(&b, 1); u64(&b, 5); u32(&b, HM_TYPE_F16); u64(&b, 64);
    while (b.n % 64) { uint8_t z = 0; put(&b, &z, 1); }
    float w[6] = { 1, 2, 3, 4, 5, 6 }; put(&b, w, sizeof w);
    for (int i = 0; i < 64 - 24; i++) { uint8_t z = 0; put(&b, &z, 1); }
    uint16_t h[5]; for (int i = 0; i < 5; i++) h[i] = hm_f32_to_fp16((float)i - 2.0f);
    put(&b, h, sizeof h);
    return b;
}

static void check_image(uint32_t version) {
    buf b = build(version);
    gguf_file g; hm_error e;
    int rc = gguf_parse(&g, b.p, b.n, "mem.gguf", &e);
    CHECK(rc == 0, "v%u: parses (%s)", version, rc ? e.msg : "ok");
    if (rc) { free(b.p); return; }
    uint64_t u; double f; bool bo;
    CHECK(g.version == version && g.n_kv == 17 && g.n_tensors == 2, "v%u: header counts", version);
    CHECK(!gguf_get_u64(&g, "t.u8", &u, &e) && u == 200, "u8");
    CHECK(gguf_find_kv(&g, "t.i8")->v.i == -100, "i8");
    CHECK(!gguf_get_u64(&g, "t.u16", &u, &e) && u == 60000, "u16");
    CHECK(gguf_find_kv(&g, "t.i16")->v.i == -30000, "i16");
    CHECK(!gguf_get_u64(&g, "t.u32", &u, &e) && u == 4000000000u, "u32");
    CHECK(gguf_find_kv(&g, "t.i32")->v.i == -2000000000, "i32");
    CHECK(gguf_get_u64(&g, "t.i32", &u, &e) == -1, "negative i32 refused as unsigned: %s", e.msg);
    CHECK(!gguf_get_f64(&g, "t.f32", &f, &e) && f == 1.5, "f32");
    CHECK(!gguf_get_bool(&g, "t.bool", &bo, &e) && bo, "bool");
    char *s = gguf_get_str(&g, "t.str");
    CHECK(s && !strcmp(s, "héllo"), "string");
    free(s);
    CHECK(!gguf_get_u64(&g, "t.u64", &u, &e) && u == 10000000000ULL, "u64");
    CHECK(gguf_find_kv(&g, "t.i64")->v.i == -5000000000LL, "i64");
    CHECK(!gguf_get_f64(&g, "t.f64", &f, &e) && f == 3.141592653589793, "f64");
    const gguf_kv *as = gguf_find_kv(&g, "t.arr_str");
    CHECK(as && as->arr_type == GGUF_STR && as->arr_n == 3 && as->arr_str[2].len == 3 && !memcmp(as->arr_str[2].s, "ccc", 3) &&
          as->arr_str[1].len == 0, "string array");
    const gguf_kv *a16 = gguf_find_kv(&g, "t.arr_i16"), *a64 = gguf_find_kv(&g, "t.arr_f64"), *ae = gguf_find_kv(&g, "t.arr_empty");
    CHECK(a16 && gguf_arr_i64(a16, 0) == -1 && gguf_arr_i64(a16, 1) == 7, "i16 array");
    CHECK(a64 && gguf_arr_f64(a64, 0) == 0.25 && gguf_arr_f64(a64, 1) == -8, "f64 array");
    CHECK(ae && ae->arr_n == 0, "empty array");
    CHECK(g.alignment == 64 && g.data_offset % 64 == 0, "general.alignment 64 honoured (data at %zu)", g.data_offset);
    const gguf_tensor *w = gguf_find_tensor(&g, "w"), *h = gguf_find_tensor(&g, "h");
    CHECK(w && w->ne[0] == 3 && w->ne[1] == 2 && w->nbytes == 24 && ((const float *)w->data)[5] == 6.0f, "F32 tensor");
    CHECK(h && h->ne[0] == 5 && h->nbytes == 10 && hm_fp16_to_f32(((const uint16_t *)h->data)[4]) == 2.0f, "F16 tensor at offset 64");
    gguf_close(&g);
    /* every truncation of the image must fail cleanly */
    int clean = 1;
    for (size_t n = 0; n < b.n; n++) {
        gguf_file t;
        if (gguf_parse(&t, b.p, n, "trunc.gguf", &e) == 0) { clean = 0; gguf_close(&t); printf("  prefix %zu parsed\n", n); break; }
        if (!strstr(e.msg, "trunc.gguf")) { clean = 0; printf("  prefix %zu: message without the file name: %s\n", n, e.msg); break; }
    }
    CHECK(clean, "v%u: every one of %zu truncations refused with a message naming the file", version, b.n);
    free(b.p);
}

static void round_trip(void) {
    char path[4096]; snprintf(path, sizeof path, "%s/test_gguf_rt.gguf", HM_BUILD_DIR);
    gguf_writer *w = gguf_writer_new();
    const char *toks[3] = { "x", "yy", "<|z|>" };
    int32_t ti[3] = { 1, 1, 3 }; float fa[2] = { 0.5f, -1 };
    gguf_w_str(w, "general.architecture", "qwen3moe");
    gguf_w_u32(w, "a.u32", 7); gguf_w_i32(w, "a.i32", -7); gguf_w_f32(w, "a.f32", 0.125f); gguf_w_bool(w, "a.b", false);
    gguf_w_arr_str(w, "a.toks", toks, 3); gguf_w_arr_i32(w, "a.ti", ti, 3); gguf_w_arr_f32(w, "a.fa", fa, 2);
    int64_t ne1[2] = { 7, 3 }, ne2[3] = { 4, 2, 5 };
    gguf_w_tensor(w, "t1", HM_TYPE_F32, 2, ne1);
    gguf_w_tensor(w, "t2", HM_TYPE_BF16, 3, ne2);
    float d1[21]; uint16_t d2[40];
    for (int i = 0; i < 21; i++) d1[i] = (float)i * 0.5f;
    for (int i = 0; i < 40; i++) d2[i] = hm_f32_to_bf16((float)i);
    FILE *f = fopen(path, "wb"); hm_error e;
    int rc = gguf_writer_begin(w, f, &e) || gguf_writer_data(w, f, d1, sizeof d1, &e) || gguf_writer_data(w, f, d2, sizeof d2, &e);
    int extra = gguf_writer_data(w, f, d2, sizeof d2, &e);
    fclose(f); gguf_writer_free(w);
    CHECK(rc == 0 && extra == -1, "writer: declared tensors written, an undeclared one refused");
    gguf_file g;
    rc = gguf_open(&g, path, &e);
    CHECK(rc == 0, "round trip opens (%s)", rc ? e.msg : "ok");
    if (rc) return;
    uint64_t u; double fv; bool b;
    const gguf_kv *kt = gguf_find_kv(&g, "a.toks"), *ki = gguf_find_kv(&g, "a.ti");
    CHECK(!gguf_get_u64(&g, "a.u32", &u, &e) && u == 7 && gguf_find_kv(&g, "a.i32")->v.i == -7 &&
          !gguf_get_f64(&g, "a.f32", &fv, &e) && fv == 0.125 && !gguf_get_bool(&g, "a.b", &b, &e) && !b, "round trip scalars");
    CHECK(kt && kt->arr_n == 3 && kt->arr_str[2].len == 5 && !memcmp(kt->arr_str[2].s, "<|z|>", 5) && ki && gguf_arr_i64(ki, 2) == 3,
          "round trip arrays");
    const gguf_tensor *t1 = gguf_find_tensor(&g, "t1"), *t2 = gguf_find_tensor(&g, "t2");
    CHECK(t1 && t2 && t2->n_dims == 3 && t2->ne[2] == 5 && !memcmp(t1->data, d1, sizeof d1) && !memcmp(t2->data, d2, sizeof d2) &&
          t2->offset % 32 == 0, "round trip tensors (offset %llu)", t2 ? (unsigned long long)t2->offset : 0ULL);
    gguf_close(&g);
    remove(path);
}

int main(void) {
    check_image(3);
    check_image(2);
    round_trip();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
