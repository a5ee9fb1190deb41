/* convert.h - writes a loaded model as a GGUF file that hotmoe and llama.cpp read. */
#ifndef HM_CONVERT_H
#define HM_CONVERT_H
#include "model.h"
#include "util.h"

/* Writes m to out_path. out_type: an hm_type for every matrix (F32, F16, BF16, ...), or -1 to
 * keep each tensor's type. 1-D tensors (norms, biases) are always written as F32. */
int convert_write_gguf(const hm_model *m, const char *out_path, int out_type, hm_error *e);

#endif
