/* names.c - GGUF and HF tensor names of every canonical slot (one row per slot). */
#include "names.h"
#include "model.h"
#include <stdio.h>

/* %1$d is the layer, %2$d the expert. NULL: not present in that format. */
static const struct { const char *gguf, *hf; } rows[SLOT_COUNT] = {
    [SLOT_TOK_EMBD]       = { "token_embd.weight", "model.embed_tokens.weight" },
    [SLOT_OUTPUT_NORM]    = { "output_norm.weight", "model.norm.weight" },
    [SLOT_OUTPUT]         = { "output.weight", "lm_head.weight" },
    [SLOT_ATTN_NORM]      = { "blk.%d.attn_norm.weight", "model.layers.%d.input_layernorm.weight" },
    [SLOT_WQ]             = { "blk.%d.attn_q.weight", "model.layers.%d.self_attn.q_proj.weight" },
    [SLOT_WK]             = { "blk.%d.attn_k.weight", "model.layers.%d.self_attn.k_proj.weight" },
    [SLOT_WV]             = { "blk.%d.attn_v.weight", "model.layers.%d.self_attn.v_proj.weight" },
    [SLOT_WO]             = { "blk.%d.attn_output.weight", "model.layers.%d.self_attn.o_proj.weight" },
    [SLOT_BQ]             = { "blk.%d.attn_q.bias", "model.layers.%d.self_attn.q_proj.bias" },
    [SLOT_BK]             = { "blk.%d.attn_k.bias", "model.layers.%d.self_attn.k_proj.bias" },
    [SLOT_BV]             = { "blk.%d.attn_v.bias", "model.layers.%d.self_attn.v_proj.bias" },
    [SLOT_Q_NORM]         = { "blk.%d.attn_q_norm.weight", "model.layers.%d.self_attn.q_norm.weight" },
    [SLOT_K_NORM]         = { "blk.%d.attn_k_norm.weight", "model.layers.%d.self_attn.k_norm.weight" },
    [SLOT_FFN_NORM]       = { "blk.%d.ffn_norm.weight", "model.layers.%d.post_attention_layernorm.weight" },
    [SLOT_FFN_GATE]       = { "blk.%d.ffn_gate.weight", "model.layers.%d.mlp.gate_proj.weight" },
    [SLOT_FFN_UP]         = { "blk.%d.ffn_up.weight", "model.layers.%d.mlp.up_proj.weight" },
    [SLOT_FFN_DOWN]       = { "blk.%d.ffn_down.weight", "model.layers.%d.mlp.down_proj.weight" },
    [SLOT_ROUTER]         = { "blk.%d.ffn_gate_inp.weight", "model.layers.%d.mlp.gate.weight" },
    [SLOT_ROUTER_BIAS]    = { "blk.%d.exp_probs_b.bias", "model.layers.%d.mlp.gate.e_score_correction_bias" },
    [SLOT_SHEXP_GATE]     = { "blk.%d.ffn_gate_shexp.weight", "model.layers.%d.mlp.shared_experts.gate_proj.weight" },
    [SLOT_SHEXP_UP]       = { "blk.%d.ffn_up_shexp.weight", "model.layers.%d.mlp.shared_experts.up_proj.weight" },
    [SLOT_SHEXP_DOWN]     = { "blk.%d.ffn_down_shexp.weight", "model.layers.%d.mlp.shared_experts.down_proj.weight" },
    [SLOT_EXPS_GATE]      = { "blk.%d.ffn_gate_exps.weight", NULL },
    [SLOT_EXPS_UP]        = { "blk.%d.ffn_up_exps.weight", NULL },
    [SLOT_EXPS_DOWN]      = { "blk.%d.ffn_down_exps.weight", NULL },
    [SLOT_EXP_GATE]       = { NULL, "model.layers.%d.mlp.experts.%d.gate_proj.weight" },
    [SLOT_EXP_UP]         = { NULL, "model.layers.%d.mlp.experts.%d.up_proj.weight" },
    [SLOT_EXP_DOWN]       = { NULL, "model.layers.%d.mlp.experts.%d.down_proj.weight" },
    [SLOT_EXPS_GATE_UP]   = { NULL, "model.layers.%d.mlp.experts.gate_up_proj" },
    [SLOT_EXPS_DOWN_FUSED]= { NULL, "model.layers.%d.mlp.experts.down_proj" },
    [SLOT_NEXTN_EH_PROJ]  = { "blk.%d.nextn.eh_proj.weight", "model.layers.%d.eh_proj.weight" },
    [SLOT_NEXTN_EMBED]    = { "blk.%d.nextn.embed_tokens.weight", "model.layers.%d.embed_tokens.weight" },
    [SLOT_NEXTN_ENORM]    = { "blk.%d.nextn.enorm.weight", "model.layers.%d.enorm.weight" },
    [SLOT_NEXTN_HNORM]    = { "blk.%d.nextn.hnorm.weight", "model.layers.%d.hnorm.weight" },
    [SLOT_NEXTN_HEAD_NORM]= { "blk.%d.nextn.shared_head_norm.weight", "model.layers.%d.shared_head.norm.weight" },
    [SLOT_NEXTN_HEAD]     = { "blk.%d.nextn.shared_head_head.weight", "model.layers.%d.shared_head.head.weight" },
};

int names_get(char *buf, int cap, int slot, int gguf, int arch, int layer, int expert) {
    if (slot < 0 || slot >= SLOT_COUNT) return -1;
    const char *fmt = gguf ? rows[slot].gguf : rows[slot].hf;
    /* llama.cpp's glm4moe writes the post-attention norm under its own name */
    if (gguf && arch == HM_ARCH_GLM4MOE && slot == SLOT_FFN_NORM) fmt = "blk.%d.post_attention_norm.weight";
    if (!fmt) return -1;
    snprintf(buf, (size_t)cap, fmt, layer, expert);
    return 0;
}
