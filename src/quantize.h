/* quantize.h - llama.cpp-like quantization mixes (Q4_K_M, Q3_K_M, Q2_K, Q8_0, ...) as a
 * convert policy: which type each tensor gets. */
#ifndef HM_QUANTIZE_H
#define HM_QUANTIZE_H
#include "convert.h"

typedef struct {
    const char *name;   /* "Q4_K_M" */
    int base;           /* hm_type of most matrices */
    int ftype;          /* llama_ftype recorded as general.file_type */
} quant_mix;

/* The mix called name (case-insensitive), or NULL. */
const quant_mix *quant_mix_find(const char *name);
/* Comma-separated list of the mix names, for messages. */
const char *quant_mix_names(void);
/* convert_type_fn for a mix (ud: const quant_mix *). */
int quant_mix_choose(void *ud, const hm_config *c, const convert_tensor *t);

#endif
