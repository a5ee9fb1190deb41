/* safetensors.h - reader for HF safetensors files (one or several, with the index json).
 * Shapes are returned in ggml order (ne[0] = last, contiguous dimension). */
#ifndef HM_SAFETENSORS_H
#define HM_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "util.h"

typedef struct {
    char *name;
    int type;              /* enum hm_type (F32/F16/BF16), -1 for dtypes we do not compute with */
    char dtype[16];        /* as written in the file, for messages */
    int n_dims;
    int64_t ne[4];         /* reversed HF shape; unused dims are 1 */
    const void *data;
    size_t nbytes;
    int file;              /* index into the set's files */
} st_tensor;

typedef struct {
    hm_map *maps; char **paths; int n_files;
    st_tensor *t; size_t n, cap;
    int sorted;            /* set by st_open_dir: t sorted by name */
} st_set;

/* Parses one safetensors image buf[0..size) and appends its tensors to s (views into buf).
 * name is used in messages. Returns 0, or -1 with e naming the file and field. */
int st_parse(st_set *s, const uint8_t *buf, size_t size, const char *name, int file, hm_error *e);
/* Opens an HF directory: model.safetensors.index.json when present (every shard it names),
 * otherwise model.safetensors, otherwise every *.safetensors file in the directory. */
int st_open_dir(st_set *s, const char *dir, hm_error *e);
const st_tensor *st_find(const st_set *s, const char *name);
void st_close(st_set *s);

#endif
