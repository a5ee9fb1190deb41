/* gguf.h - GGUF v2/v3 reader over a read-only mapping, and a streaming writer.
 * Every offset, count and shape from the file is checked before use. */
#ifndef HM_GGUF_H
#define HM_GGUF_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "util.h"

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9, GGUF_U64 = 10, GGUF_I64 = 11,
    GGUF_F64 = 12, GGUF_VTYPE_COUNT
};

typedef struct { const char *s; uint64_t len; } gguf_str; /* not NUL-terminated: points into the file */

typedef struct {
    char *key;               /* NUL-terminated copy */
    int type;                /* enum gguf_vtype */
    /* scalars: */
    union { uint64_t u; int64_t i; double f; bool b; } v;
    gguf_str str;            /* GGUF_STR */
    int arr_type;            /* GGUF_ARR: element type (never ARR: nested arrays are refused) */
    uint64_t arr_n;          /* GGUF_ARR: element count */
    const uint8_t *arr_data; /* GGUF_ARR of scalars: raw little-endian elements */
    gguf_str *arr_str;       /* GGUF_ARR of strings: arr_n entries */
} gguf_kv;

typedef struct {
    char *name;
    int type;                /* enum hm_type */
    int n_dims;
    int64_t ne[4];           /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint64_t offset;         /* relative to the data section */
    size_t nbytes;
    const uint8_t *data;     /* into the mapping */
} gguf_tensor;

typedef struct {
    char path[512];          /* for messages */
    hm_map map;              /* owned when opened from a file */
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    size_t data_offset;      /* start of the tensor data section */
} gguf_file;

/* Parses a GGUF image held in buf[0..size) (not copied; must outlive g). name is used in messages. */
int gguf_parse(gguf_file *g, const uint8_t *buf, size_t size, const char *name, hm_error *e);
/* mmaps path and parses it. */
int gguf_open(gguf_file *g, const char *path, hm_error *e);
void gguf_close(gguf_file *g);

const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);
/* Typed getters: return 0 and set *out when key exists and converts losslessly; -1 otherwise (e set). */
int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, hm_error *e);
int gguf_get_f64(const gguf_file *g, const char *key, double *out, hm_error *e);
int gguf_get_bool(const gguf_file *g, const char *key, bool *out, hm_error *e);
/* NUL-terminated copy of a string value (caller frees), NULL if absent or not a string. */
char *gguf_get_str(const gguf_file *g, const char *key);
const char *gguf_vtype_name(int t);
/* Element i of a scalar array as double/integer; the caller checks bounds and type class. */
double gguf_arr_f64(const gguf_kv *kv, uint64_t i);
int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i);

/* ---- writer: metadata first, then tensor infos, then data, streamed to a FILE ---- */
typedef struct gguf_writer gguf_writer;
gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
void gguf_w_str(gguf_writer *w, const char *key, const char *val);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t val);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t val);
void gguf_w_f32(gguf_writer *w, const char *key, float val);
void gguf_w_bool(gguf_writer *w, const char *key, bool val);
void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *vals, uint64_t n);
void gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *vals, uint64_t n);
void gguf_w_arr_f32(gguf_writer *w, const char *key, const float *vals, uint64_t n);
/* Declares a tensor; data is supplied later, in the same order, by gguf_writer_write_data. */
void gguf_w_tensor(gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne);
/* Writes header + infos. Then call gguf_writer_data once per declared tensor, in order. */
int gguf_writer_begin(gguf_writer *w, FILE *f, hm_error *e);
int gguf_writer_data(gguf_writer *w, FILE *f, const void *data, size_t nbytes, hm_error *e);

#endif
