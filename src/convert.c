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

typedef struct {
    convert_tensor info;
    char name[256];
    const hm_tensor **parts; int n;   /* stacked experts: n parts, else 1 */
    int type;                         /* chosen output type */
} out_tensor;

typedef struct { out_tensor *t; int n, cap; } out_list;

static out_tensor *add(out_list *l, const char *name, int slot, int layer, const hm_tensor *first, int n_parts) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        out_tensor *nt = realloc(l->t, (size_t)l->cap * sizeof *nt);
        if (!nt) abort();
        l->t = nt;
    }
    out_tensor *o = &l->t[l->n++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->parts = hm_calloc((size_t)n_parts, sizeof *o->parts);
    o->info.name = o->name; o->info.slot = slot; o->info.layer = layer; o->info.src_type = first->type;
    memcpy(o->info.ne, first->ne, sizeof o->info.ne);
    o->info.n_dims = first->ne[1] == 1 ? 1 : 2;
    if (n_parts > 1) { o->info.n_dims = 3; o->info.ne[2] = n_parts; }
    return o;
}

static void add_one(out_list *l, const hm_model *m, const hm_tensor *t, int slot, int layer) {
    if (!t->data) return;
    char name[256];
    names_get(name, sizeof name, slot, 1, m->cfg.arch, layer, 0);
    out_tensor *o = add(l, name, slot, layer, t, 1);
    o->parts[o->n++] = t;
}

static void add_ffn(out_list *l, const hm_model *m, const hm_ffn_w *f, int slot0, int layer) {
    add_one(l, m, &f->gate, slot0, layer);
    add_one(l, m, &f->up, slot0 + 1, layer);
    add_one(l, m, &f->down, slot0 + 2, layer);
}

static void add_experts(out_list *l, const hm_model *m, const hm_layer *ly, int il) {
    static const int stacked[3] = { SLOT_EXPS_GATE, SLOT_EXPS_UP, SLOT_EXPS_DOWN };
    for (int k = 0; k < 3; k++) {
        char name[256];
        names_get(name, sizeof name, stacked[k], 1, m->cfg.arch, il, 0);
#define PART(x) (k == 0 ? &ly->experts[x].host.gate : k == 1 ? &ly->experts[x].host.up : &ly->experts[x].host.down)
        out_tensor *o = add(l, name, stacked[k], il, PART(0), m->cfg.n_expert);
        for (int x = 0; x < m->cfg.n_expert; x++) {
            o->parts[o->n++] = PART(x);
            if (PART(x)->type != o->info.src_type) o->info.src_type = 0; /* mixed sources: read as F32 */
        }
#undef PART
    }
}

int convert_policy_outtype(void *type_ptr, const hm_config *c, const convert_tensor *t) {
    (void)c;
    if (t->n_dims == 1 || t->slot == SLOT_ROUTER) return 0;
    return *(const int *)type_ptr;
}

/* Writes tensor parts converted to type o->type; rows in parallel. */
static int write_parts(gguf_writer *w, FILE *f, const out_tensor *o, hm_error *e) {
    size_t total = 0;
    for (int i = 0; i < o->n; i++) total += hm_row_size(o->type, o->parts[i]->ne[0]) * (size_t)o->parts[i]->ne[1];
    uint8_t *buf = hm_malloc(total), *p = buf;
    const hm_type_traits *to = hm_type_get(o->type);
    for (int i = 0; i < o->n; i++) {
        const hm_tensor *t = o->parts[i];
        int64_t n = t->ne[0], rows = t->ne[1];
        size_t rs_in = hm_row_size(t->type, n), rs_out = hm_row_size(o->type, n);
        if (t->type == o->type) { memcpy(p, t->data, rs_in * (size_t)rows); p += rs_in * (size_t)rows; continue; }
        const hm_type_traits *from = hm_type_get(t->type);
#pragma omp parallel if (rows * n >= 65536)
        {
            float *row = hm_malloc(sizeof(float) * (size_t)n);
#pragma omp for schedule(dynamic, 16)
            for (int64_t r = 0; r < rows; r++) {
                from->to_float((const uint8_t *)t->data + (size_t)r * rs_in, row, n);
                to->from_float(row, p + (size_t)r * rs_out, n);
            }
            free(row);
        }
        p += rs_out * (size_t)rows;
    }
    int rc = gguf_writer_data(w, f, buf, total, e);
    free(buf);
    return rc;
}

void convert_write_hparams(gguf_writer *w, const hm_config *c, const char *name, int file_type) {
    const char *a = hm_arch_name(c->arch);
    char k[256];
#define KU(key, v) (snprintf(k, sizeof k, "%s." key, a), gguf_w_u32(w, k, (uint32_t)(v)))
#define KF(key, v) (snprintf(k, sizeof k, "%s." key, a), gguf_w_f32(w, k, (float)(v)))
#define KB(key, v) (snprintf(k, sizeof k, "%s." key, a), gguf_w_bool(w, k, (v) != 0))
    gguf_w_str(w, "general.architecture", a);
    gguf_w_str(w, "general.name", name);
    gguf_w_u32(w, "general.alignment", 32);
    if (file_type >= 0) gguf_w_u32(w, "general.file_type", (uint32_t)file_type);
    gguf_w_u32(w, "general.quantization_version", 2);
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
}

static void write_meta(gguf_writer *w, const hm_model *m, int file_type) {
    convert_write_hparams(w, &m->cfg, "hotmoe-converted", file_type);
    if (m->chat_template) gguf_w_str(w, "tokenizer.chat_template", m->chat_template);
}

static int choose_types(out_list *l, const hm_model *m, const convert_opts *o, hm_error *e) {
    for (int i = 0; i < l->n; i++) {
        out_tensor *t = &l->t[i];
        int ty = t->info.n_dims == 1 ? 0 : t->info.src_type;
        if (o && o->choose) ty = o->choose(o->ud, &m->cfg, &t->info);
        const hm_type_traits *tr = hm_type_get(ty);
        if (!tr || !tr->from_float)
            return hm_fail(e, "convert: tensor '%s': type %s cannot be written", t->name, hm_type_name(ty));
        if (t->info.ne[0] % tr->blck)
            return hm_fail(e, "convert: tensor '%s': row length %lld is not a multiple of %s's block size %d", t->name,
                           (long long)t->info.ne[0], tr->name, tr->blck);
        t->type = ty;
    }
    return 0;
}

int convert_write_gguf(const hm_model *m, const char *out_path, const convert_opts *o, hm_error *e) {
    const hm_config *c = &m->cfg;
    out_list l = { 0 };
    add_one(&l, m, &m->tok_embd, SLOT_TOK_EMBD, 0);
    add_one(&l, m, &m->output_norm, SLOT_OUTPUT_NORM, 0);
    if (!c->tied_output) add_one(&l, m, &m->output, SLOT_OUTPUT, 0);
    for (int il = 0; il < c->n_layer + c->n_nextn; il++) {
        const hm_layer *ly = &m->layers[il];
        add_one(&l, m, &ly->attn_norm, SLOT_ATTN_NORM, il);
        add_one(&l, m, &ly->wq, SLOT_WQ, il); add_one(&l, m, &ly->wk, SLOT_WK, il);
        add_one(&l, m, &ly->wv, SLOT_WV, il); add_one(&l, m, &ly->wo, SLOT_WO, il);
        add_one(&l, m, &ly->bq, SLOT_BQ, il); add_one(&l, m, &ly->bk, SLOT_BK, il); add_one(&l, m, &ly->bv, SLOT_BV, il);
        add_one(&l, m, &ly->q_norm, SLOT_Q_NORM, il); add_one(&l, m, &ly->k_norm, SLOT_K_NORM, il);
        add_one(&l, m, &ly->ffn_norm, SLOT_FFN_NORM, il);
        if (!ly->is_moe) { add_ffn(&l, m, &ly->dense, SLOT_FFN_GATE, il); continue; }
        add_one(&l, m, &ly->router, SLOT_ROUTER, il);
        add_one(&l, m, &ly->router_bias, SLOT_ROUTER_BIAS, il);
        add_ffn(&l, m, &ly->shexp, SLOT_SHEXP_GATE, il);
        add_experts(&l, m, ly, il);
        const hm_nextn_w *n = &ly->nextn;
        add_one(&l, m, &n->eh_proj, SLOT_NEXTN_EH_PROJ, il);
        add_one(&l, m, &n->embed_tokens, SLOT_NEXTN_EMBED, il);
        add_one(&l, m, &n->enorm, SLOT_NEXTN_ENORM, il);
        add_one(&l, m, &n->hnorm, SLOT_NEXTN_HNORM, il);
        add_one(&l, m, &n->shared_head_norm, SLOT_NEXTN_HEAD_NORM, il);
        add_one(&l, m, &n->shared_head_head, SLOT_NEXTN_HEAD, il);
    }
    gguf_writer *w = gguf_writer_new();
    int rc = choose_types(&l, m, o, e);
    if (rc) goto out;
    write_meta(w, m, o ? o->file_type : -1);
    rc = -1;
    if (m->tok && tokenizer_export_gguf(m->tok, w, e)) goto out;
    for (int i = 0; i < l.n; i++) {
        int64_t ne[4]; memcpy(ne, l.t[i].info.ne, sizeof ne);
        gguf_w_tensor(w, l.t[i].name, l.t[i].type, l.t[i].info.n_dims, ne);
    }
    FILE *f = fopen(out_path, "wb");
    if (!f) { hm_fail(e, "%s: cannot create the output file", out_path); goto out; }
    rc = gguf_writer_begin(w, f, e);
    for (int i = 0; i < l.n && !rc; i++) {
        if (o && o->verbose)
            fprintf(stderr, "[%4d/%4d] %-40s %-5s -> %s\n", i + 1, l.n, l.t[i].name, hm_type_name(l.t[i].info.src_type),
                    hm_type_name(l.t[i].type));
        rc = write_parts(w, f, &l.t[i], e);
    }
    if (fclose(f) && !rc) rc = hm_fail(e, "%s: write failed", out_path);
    if (rc) remove(out_path);
out:
    gguf_writer_free(w);
    for (int i = 0; i < l.n; i++) free(l.t[i].parts);
    free(l.t);
    return rc;
}
