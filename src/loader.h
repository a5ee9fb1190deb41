/* loader.h - opens a GGUF file or an HF directory and builds the canonical hm_model. */
#ifndef HM_LOADER_H
#define HM_LOADER_H
#include "gguf.h"
#include "model.h"
#include "util.h"

/* Loads path (a .gguf file or an HF directory with config.json + *.safetensors).
 * Checks every tensor the architecture needs: present, right shape, a known type.
 * The tokenizer is loaded from the GGUF metadata or the directory's tokenizer.json when present.
 * Returns 0, or -1 with e naming the file, the field, what was expected and what was found. */
int model_load(hm_model *m, const char *path, hm_error *e);
void model_free(hm_model *m);

/* The GGUF file behind m (its metadata and tensor table), or NULL when m came from an HF directory. */
const gguf_file *model_gguf(const hm_model *m);

/* The bundled demo model: $HOTMOE_DEMO_MODEL when set, else the GGUF the build converted
 * (HOTMOE_DEMO_MODEL at compile time) when it exists, else demo/demo.gguf beside the executable. */
const char *model_demo_path(void);

/* Total bytes of all weights (experts included). */
size_t model_weight_bytes(const hm_model *m);

/* Weight bytes one decode token reads: everything but the token embeddings and the experts a
 * token does not choose (k experts per MoE layer). */
double model_decode_bytes(const hm_model *m);

#endif
