/* fuzz_gguf.c - libFuzzer target for the GGUF reader: parse arbitrary bytes, then read every
 * field the parser handed back, so that ASan sees any pointer it let escape the input. */
#include "gguf.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink;

static void touch_str(gguf_str s) {
    if (s.len) sink += (uint8_t)s.s[0] + (uint8_t)s.s[s.len - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file g;
    hm_error e;
    e.msg[0] = 0;
    if (gguf_parse(&g, data, size, "fuzz.gguf", &e)) {
        /* a refusal must say why */
        if (!e.msg[0]) __builtin_trap();
        return 0;
    }
    for (uint64_t i = 0; i < g.n_kv; i++) {
        const gguf_kv *kv = &g.kv[i];
        sink += strlen(kv->key);
        if (kv->type == GGUF_STR) touch_str(kv->str);
        if (kv->type != GGUF_ARR) { sink += kv->v.u; continue; }
        if (kv->arr_type == GGUF_STR) {
            for (uint64_t j = 0; j < kv->arr_n; j++) touch_str(kv->arr_str[j]);
        } else {
            /* gguf_arr_i64 on a float array converts out-of-range values (UB): the header
             * leaves the type class to the caller, so only integer arrays go through it
             * (drop this guard once gguf_arr_i64 saturates: see regress/gguf/) */
            int is_float = kv->arr_type == GGUF_F32 || kv->arr_type == GGUF_F64;
            for (uint64_t j = 0; j < kv->arr_n; j++) {
                double d = gguf_arr_f64(kv, j);
                sink += (d == d) + (is_float ? 0 : (uint64_t)gguf_arr_i64(kv, j));
            }
        }
    }
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const gguf_tensor *t = &g.tensors[i];
        sink += strlen(t->name) + (uint64_t)t->ne[0] + (uint64_t)t->n_dims;
        if (t->nbytes) sink += t->data[0] + t->data[t->nbytes - 1];
        if (gguf_find_tensor(&g, t->name) != &g.tensors[i]) __builtin_trap(); /* duplicates refused */
    }
    /* the getters must cope with any value type */
    uint64_t u; double f; bool b;
    gguf_get_u64(&g, "general.alignment", &u, &e);
    gguf_get_f64(&g, "general.alignment", &f, &e);
    gguf_get_bool(&g, "general.alignment", &b, &e);
    for (uint64_t i = 0; i < g.n_kv && i < 4; i++) {
        char *s = gguf_get_str(&g, g.kv[i].key);
        if (s) { sink += strlen(s); free(s); }
        gguf_get_u64(&g, g.kv[i].key, &u, &e);
        gguf_get_f64(&g, g.kv[i].key, &f, &e);
        gguf_get_bool(&g, g.kv[i].key, &b, &e);
    }
    gguf_close(&g);
    return 0;
}
