/* names.h - the one table from file tensor names (GGUF, HF) to canonical weight slots. */
#ifndef HM_NAMES_H
#define HM_NAMES_H

enum hm_slot {
    SLOT_TOK_EMBD, SLOT_OUTPUT_NORM, SLOT_OUTPUT,
    /* per layer */
    SLOT_ATTN_NORM, SLOT_WQ, SLOT_WK, SLOT_WV, SLOT_WO, SLOT_BQ, SLOT_BK, SLOT_BV,
    SLOT_Q_NORM, SLOT_K_NORM, SLOT_FFN_NORM,
    SLOT_FFN_GATE, SLOT_FFN_UP, SLOT_FFN_DOWN,
    SLOT_ROUTER, SLOT_ROUTER_BIAS,
    SLOT_SHEXP_GATE, SLOT_SHEXP_UP, SLOT_SHEXP_DOWN,
    SLOT_EXPS_GATE, SLOT_EXPS_UP, SLOT_EXPS_DOWN,        /* stacked: GGUF 3-D tensors */
    SLOT_EXP_GATE, SLOT_EXP_UP, SLOT_EXP_DOWN,           /* one expert: HF per-expert tensors */
    SLOT_EXPS_GATE_UP, SLOT_EXPS_DOWN_FUSED,             /* HF fused: [E, 2*ff, embd], [E, embd, ff] */
    SLOT_NEXTN_EH_PROJ, SLOT_NEXTN_EMBED, SLOT_NEXTN_ENORM, SLOT_NEXTN_HNORM,
    SLOT_NEXTN_HEAD_NORM, SLOT_NEXTN_HEAD,
    SLOT_COUNT
};

/* Writes the file name of slot for layer (and expert, for per-expert slots) into buf.
 * gguf != 0: GGUF names; otherwise HF names. glm selects GLM-specific spellings.
 * Returns 0, or -1 when the slot has no name in that format. */
int names_get(char *buf, int cap, int slot, int gguf, int arch, int layer, int expert);

#endif
