/* convert.c - canonical model -> GGUF, with llama.cpp's metadata keys and tensor names;
 * routed experts are written stacked ([n_embd, n_ff, n_expert]) as llama.cpp expects. */
#include "convert.h"
#include "gguf.h"
#include "names.h"
#include "quant.h"
#include "tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const hm_tensor **parts; int n; char name[256]; int type; int n_dims; int64_t ne[4]; } out_tensor;

typedef struct { out_tensor *t; int n, cap; } out_list;

static out_tensor *add(out_list *l, const char *name, int type, int n_parts) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        out_tensor *nt = realloc(l->t, (size_t)l->cap * sizeof *nt);
        if (!nt) abort();
        l->t = nt;
    }
    out_tensor *o = &l->t[l->n++];
    o->n = 0; o->type = type;
    o->parts = hm_calloc((size_t)n_parts, sizeof *o->parts);
    snprintf(o->name, sizeof o->name, "%s", name);
    return o;
}

static int out_type_of(const hm_tensor *t, int want) {
    if (t->ne[1] == 1 && t->ne[2] == 1) return 0; /* 1-D: F32 */
    return want < 0 ? t->type : want;
}

static void add_one(out_list *l, const hm_model *m, const hm_tensor *t, int slot, int layer, int want) {
    if (!t->data) return;
    char name[256];
    names_get(name, sizeof name, slot, 1, m->cfg.arch, layer, 0);
    out_tensor *o = add(l, name, out_type_of(t, want), 1);
    o->parts[o->n++] = t;
    o->n_dims = t->ne[1] == 1 ? 1 : 2;
    memcpy(o->ne, t->ne, sizeof o->ne);
}

static void add_ffn(out_list *l, const hm_model *m, const hm_ffn_w *f, int slot0, int layer, int want) {
    add_one(l, m, &f->gate, slot0, layer, want);
    add_one(l, m, &f->up, slot0 + 1, layer, want);
    add_one(l, m, &f->down, slot0 + 2, layer, want);
}

/* Writes tensor parts converted to type `type`, row by row. */
static int write_parts(gguf_writer *w, FILE *f, const out_tensor *o, hm_error *e) {
    size_t total = 0;
    for (int i = 0; i < o->n; i++) total += hm_row_size(o->type, o->parts[i]->ne[0]) * (size_t)o->parts[i]->ne[1];
    uint8_t *buf = hm_malloc(total), *p = buf;
    for (int i = 0; i < o->n; i++) {
        const hm_tensor *t = o->parts[i];
        size_t rs_in = hm_row_size(t->type, t->ne[0]), rs_out = hm_row_size(o->type, t->ne[0]);
        if (t->type == o->type) { memcpy(p, t->data, rs_in * (size_t)t->ne[1]); p += rs_in * (size_t)t->ne[1]; continue; }
        const hm_type_traits *to = hm_type_get(o->type), *from = hm_type_get(t->type);
        if (!to || !to->from_float) { free(buf); return hm_fail(e, "convert: output type %s cannot be written", hm_type_name(o->type)); }
        float *row = hm_malloc(sizeof(float) * (size_t)t->ne[0]);
        for (int64_t r = 0; r < t->ne[1]; r++) {
            from->to_float((const uint8_t *)t->data + (size_t)r * rs_in, row, t->ne[0]);
            to->from_float(row, p, t->ne[0]);
            p += rs_out;
        }
        free(row);
    }
    int rc = gguf_writer_data(w, f, buf, total, e);
    free(buf);
    return rc;
}

static void write_meta(gguf_writer *w, const hm_model *m) {
    const hm_config *c = &m->cfg;
    const char *a = hm_arch_name(c->arch);
    char k[256];
#define KU(key, v) (snprintf(k, sizeof k, "%s." key, a), gguf_w_u32(w, k, (uint32_t)(v)))
#define KF(key, v) (snprintf(k, sizeof k, "%s." key, a), gguf_w_f32(w, k, (float)(v)))
#define KB(key, v) (snprintf(k, sizeof k, "%s." key, a), gguf_w_bool(w, k, (v) != 0))
    gguf_w_str(w, "general.architecture", a);
    gguf_w_str(w, "general.name", "hotmoe-converted");
    gguf_w_u32(w, "general.alignment", 32);
    KU("block_count", c->n_layer + c->n_nextn);
    KU("context_length", c->n_ctx_train);
    KU("embedding_length", c->n_embd);
    KU("feed_forward_length", c->n_ff);
    KU("attention.head_count", c->n_head);
    KU("attention.head_count_kv", c->n_head_kv);
    KU("attention.key_length", c->head_dim);
    KU("attention.value_length", c->head_dim);
    KF("attention.layer_norm_rms_epsilon", c->rms_eps);
    KF("rope.freq_base", c->rope_theta);
    KU("rope.dimension_count", c->n_rot);
    KU("vocab_size", c->n_vocab);
    KU("expert_count", c->n_expert);
    KU("expert_used_count", c->n_expert_used);
    KU("expert_feed_forward_length", c->n_ff_exp);
    KU("expert_gating_func", c->router_fn);
    KB("expert_weights_norm", c->norm_topk);
    KF("expert_weights_scale", c->routed_scale);
    if (c->n_shared_exp) { KU("expert_shared_count", c->n_shared_exp); KU("expert_shared_feed_forward_length", c->n_ff_shexp); }
    if (c->n_dense_lead) KU("leading_dense_block_count", c->n_dense_lead);
    if (c->n_group > 1) { KU("expert_group_count", c->n_group); KU("expert_group_used_count", c->topk_group); }
    if (c->n_nextn) KU("nextn_predict_layers", c->n_nextn);
#undef KU
#undef KF
#undef KB
    if (m->chat_template) gguf_w_str(w, "tokenizer.chat_template", m->chat_template);
}

int convert_write_gguf(const hm_model *m, const char *out_path, int out_type, hm_error *e) {
    const hm_config *c = &m->cfg;
    out_list l = { 0 };
    add_one(&l, m, &m->tok_embd, SLOT_TOK_EMBD, 0, out_type);
    add_one(&l, m, &m->output_norm, SLOT_OUTPUT_NORM, 0, out_type);
    if (!c->tied_output) add_one(&l, m, &m->output, SLOT_OUTPUT, 0, out_type);
    for (int il = 0; il < c->n_layer + c->n_nextn; il++) {
        const hm_layer *ly = &m->layers[il];
        add_one(&l, m, &ly->attn_norm, SLOT_ATTN_NORM, il, out_type);
        add_one(&l, m, &ly->wq, SLOT_WQ, il, out_type); add_one(&l, m, &ly->wk, SLOT_WK, il, out_type);
        add_one(&l, m, &ly->wv, SLOT_WV, il, out_type); add_one(&l, m, &ly->wo, SLOT_WO, il, out_type);
        add_one(&l, m, &ly->bq, SLOT_BQ, il, out_type); add_one(&l, m, &ly->bk, SLOT_BK, il, out_type);
        add_one(&l, m, &ly->bv, SLOT_BV, il, out_type);
        add_one(&l, m, &ly->q_norm, SLOT_Q_NORM, il, out_type); add_one(&l, m, &ly->k_norm, SLOT_K_NORM, il, out_type);
        add_one(&l, m, &ly->ffn_norm, SLOT_FFN_NORM, il, out_type);
        if (!ly->is_moe) { add_ffn(&l, m, &ly->dense, SLOT_FFN_GATE, il, out_type); continue; }
        add_one(&l, m, &ly->router, SLOT_ROUTER, il, 0); /* the router stays F32, as llama.cpp keeps it */
        add_one(&l, m, &ly->router_bias, SLOT_ROUTER_BIAS, il, out_type);
        add_ffn(&l, m, &ly->shexp, SLOT_SHEXP_GATE, il, out_type);
        static const int stacked[3] = { SLOT_EXPS_GATE, SLOT_EXPS_UP, SLOT_EXPS_DOWN };
        for (int k = 0; k < 3; k++) {
            char name[256];
            names_get(name, sizeof name, stacked[k], 1, c->arch, il, 0);
            const hm_tensor *first = k == 0 ? &ly->experts[0].host.gate : k == 1 ? &ly->experts[0].host.up : &ly->experts[0].host.down;
            out_tensor *o = add(&l, name, out_type < 0 ? first->type : out_type, c->n_expert);
            for (int x = 0; x < c->n_expert; x++)
                o->parts[o->n++] = k == 0 ? &ly->experts[x].host.gate : k == 1 ? &ly->experts[x].host.up : &ly->experts[x].host.down;
            o->n_dims = 3; o->ne[0] = first->ne[0]; o->ne[1] = first->ne[1]; o->ne[2] = c->n_expert; o->ne[3] = 1;
            for (int x = 1; x < c->n_expert; x++)
                if (o->parts[x]->type != first->type && out_type < 0) o->type = 0; /* mixed: widen to F32 */
        }
        const hm_nextn_w *n = &ly->nextn;
        add_one(&l, m, &n->eh_proj, SLOT_NEXTN_EH_PROJ, il, out_type);
        add_one(&l, m, &n->embed_tokens, SLOT_NEXTN_EMBED, il, out_type);
        add_one(&l, m, &n->enorm, SLOT_NEXTN_ENORM, il, out_type);
        add_one(&l, m, &n->hnorm, SLOT_NEXTN_HNORM, il, out_type);
        add_one(&l, m, &n->shared_head_norm, SLOT_NEXTN_HEAD_NORM, il, out_type);
        add_one(&l, m, &n->shared_head_head, SLOT_NEXTN_HEAD, il, out_type);
    }
    gguf_writer *w = gguf_writer_new();
    write_meta(w, m);
    int rc = -1;
    if (m->tok && tokenizer_export_gguf(m->tok, w, e)) goto out;
    for (int i = 0; i < l.n; i++) gguf_w_tensor(w, l.t[i].name, l.t[i].type, l.t[i].n_dims, l.t[i].ne);
    FILE *f = fopen(out_path, "wb");
    if (!f) { hm_fail(e, "%s: cannot create the output file", out_path); goto out; }
    rc = gguf_writer_begin(w, f, e);
    for (int i = 0; i < l.n && !rc; i++) rc = write_parts(w, f, &l.t[i], e);
    if (fclose(f) && !rc) rc = hm_fail(e, "%s: write failed", out_path);
    if (rc) remove(out_path);
out:
    gguf_writer_free(w);
    for (int i = 0; i < l.n; i++) free(l.t[i].parts);
    free(l.t);
    return rc;
}
