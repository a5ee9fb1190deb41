/* convert.h - writes a loaded model as a GGUF file that hotmoe and llama.cpp read, keeping,
 * converting or quantizing each tensor's type as a policy decides. */
#ifndef HM_CONVERT_H
#define HM_CONVERT_H
#include "model.h"
#include "util.h"

/* What a type policy sees of each output tensor. */
typedef struct {
    const char *name;      /* GGUF name */
    int slot, layer;       /* enum hm_slot (names.h); layer or 0 */
    int n_dims;
    int64_t ne[4];         /* ne[2] = n_expert for stacked experts */
    int src_type;          /* the type it has in the input */
} convert_tensor;

/* Returns the hm_type to write t as. */
typedef int (*convert_type_fn)(void *ud, const hm_config *c, const convert_tensor *t);

typedef struct {
    convert_type_fn choose; /* NULL: keep every type (1-D tensors become F32) */
    void *ud;
    int file_type;          /* general.file_type (llama_ftype) to record, -1: none */
    int verbose;            /* print one line per tensor */
} convert_opts;

/* Writes m to out_path. A tensor whose row length does not fit the chosen block type gets an error
 * naming the tensor unless the policy already picked a fitting type. Rows are converted in parallel. */
int convert_write_gguf(const hm_model *m, const char *out_path, const convert_opts *o, hm_error *e);

/* Writes general.* and the architecture's hyperparameter keys (llama.cpp's names) for c. */
struct gguf_writer;
void convert_write_hparams(struct gguf_writer *w, const hm_config *c, const char *name, int file_type);

/* The policy behind --outtype: every matrix as `type` (F32/F16/BF16/...), routers stay F32. */
int convert_policy_outtype(void *type_ptr, const hm_config *c, const convert_tensor *t);

#endif
