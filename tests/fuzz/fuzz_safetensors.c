/* fuzz_safetensors.c - libFuzzer target for the safetensors reader: parse arbitrary bytes as
 * one file, then read the first and last byte of every tensor view it returned. */
#include "safetensors.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_set s;
    hm_error e;
    memset(&s, 0, sizeof s);
    e.msg[0] = 0;
    if (st_parse(&s, data, size, "fuzz.safetensors", 0, &e)) {
        if (!e.msg[0] || s.n) __builtin_trap(); /* a refusal says why and leaves nothing behind */
    }
    for (size_t i = 0; i < s.n; i++) {
        const st_tensor *t = &s.t[i];
        sink += strlen(t->name) + strlen(t->dtype) + (uint64_t)t->n_dims;
        if (t->n_dims < 1 || t->n_dims > 4) __builtin_trap();
        if (t->nbytes) sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
        sink += st_find(&s, t->name) != NULL;
    }
    /* s has no files: st_close frees only the names and the table */
    st_close(&s);
    return 0;
}
