/* gen_tokenizer.c - a small valid byte-level BPE vocabulary for synthetic models, so that
 * `hotmoe generate` (and llama.cpp) can tokenize prompts and print what a synthetic model says. */
#include "gen_model.h"
#include <stdlib.h>
#include <string.h>

static const char consonants[] = "bcdfghjklmnprstvwxyz", vowels[] = "aeiou";
#define N_SYL 100 /* 20 consonants x 5 vowels */

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to 256, 257, ... */
static int byte_cp(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
    return 256 + n;
}
static int put_cp(char *s, int cp) {
    if (cp < 0x80) { s[0] = (char)cp; return 1; }
    s[0] = (char)(0xC0 | (cp >> 6)); s[1] = (char)(0x80 | (cp & 0x3F)); return 2;
}
static void syl(char *s, int i) { s[0] = consonants[i / 5]; s[1] = vowels[i % 5]; s[2] = 0; }

int gen_tokenizer_write(gguf_writer *w, int n_vocab, const char *pre, hm_error *e) {
    static const char *const specials[3] = { "<|endoftext|>", "<|im_start|>", "<|im_end|>" };
    if (n_vocab < 256 + 3 + 1) return hm_fail(e, "gen: vocab: expected >= 260 ids for the byte tokens, found %d", n_vocab);
    char **tok = hm_calloc((size_t)n_vocab, sizeof *tok), **mer = hm_calloc((size_t)n_vocab, sizeof *mer);
    int32_t *type = hm_malloc(sizeof(int32_t) * (size_t)n_vocab);
    int n = 0, nm = 0, words = n_vocab - 3;
    char sp[3]; sp[put_cp(sp, byte_cp(' '))] = 0; /* "Ġ" */
    for (int b = 0; b < 256; b++) { char s[3]; s[put_cp(s, byte_cp(b))] = 0; tok[n++] = hm_strdup(s); }
    /* syllables "cv" (merge "c v"), then words "Ġ" + 1, 2, 3 syllables, each one merge away from
     * tokens already in the vocab, in merge-priority order */
    for (int i = 0; i < N_SYL && n < words; i++) {
        char s[3], m[8]; syl(s, i);
        snprintf(m, sizeof m, "%c %c", s[0], s[1]);
        tok[n++] = hm_strdup(s); mer[nm++] = hm_strdup(m);
    }
    for (int len = 1; len <= 3 && n < words; len++) {
        long count = len == 1 ? N_SYL : len == 2 ? N_SYL * N_SYL : N_SYL * N_SYL * N_SYL;
        for (long j = 0; j < count && n < words; j++) {
            char head[16] = "", last[3], full[24], m[32];
            strcpy(head, sp);
            long q = j;
            int idx[3];
            for (int k = len - 1; k >= 0; k--) { idx[k] = (int)(q % N_SYL); q /= N_SYL; }
            for (int k = 0; k < len - 1; k++) { char s[3]; syl(s, idx[k]); strcat(head, s); }
            syl(last, idx[len - 1]);
            snprintf(full, sizeof full, "%s%s", head, last);
            snprintf(m, sizeof m, "%s %s", head, last);
            tok[n++] = hm_strdup(full); mer[nm++] = hm_strdup(m);
        }
    }
    for (int i = 0; n < words; i++) { /* only for vocabularies beyond ~1M: plain filler */
        char s[32]; snprintf(s, sizeof s, "%sfiller%d", sp, i); tok[n++] = hm_strdup(s);
    }
    for (int i = 0; i < n_vocab; i++) type[i] = 1; /* normal */
    for (int i = 0; i < 3; i++) { type[n] = 3; tok[n++] = hm_strdup(specials[i]); } /* control */
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_w_str(w, "tokenizer.ggml.pre", pre);
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)n_vocab);
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", type, (uint64_t)n_vocab);
    gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)mer, (uint64_t)nm);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(n_vocab - 3));
    gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)(n_vocab - 3));
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", false);
    for (int i = 0; i < n_vocab; i++) free(tok[i]);
    for (int i = 0; i < nm; i++) free(mer[i]);
    free(tok); free(mer); free(type);
    return 0;
}
