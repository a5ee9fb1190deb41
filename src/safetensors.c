/* safetensors.c - bounds-checked safetensors parsing: 8-byte header length, JSON header,
 * data offsets checked against the file and against shape x dtype size. */
#include "safetensors.h"
#include "quant.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct { const char *name; int type; int size; } dtypes[] = {
    { "F32", 0 /*HM_TYPE_F32*/, 4 }, { "F16", 1 /*HM_TYPE_F16*/, 2 }, { "BF16", 30 /*HM_TYPE_BF16*/, 2 },
    { "F64", -1, 8 }, { "I64", -1, 8 }, { "I32", -1, 4 }, { "I16", -1, 2 }, { "I8", -1, 1 },
    { "U8", -1, 1 }, { "U16", -1, 2 }, { "U32", -1, 4 }, { "U64", -1, 8 }, { "BOOL", -1, 1 },
    { "F8_E4M3", -1, 1 }, { "F8_E5M2", -1, 1 },
};

static void push(st_set *s, st_tensor *t) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        st_tensor *nt = realloc(s->t, s->cap * sizeof *nt);
        if (!nt) abort();
        s->t = nt;
    }
    s->t[s->n++] = *t;
}

int st_parse(st_set *s, const uint8_t *buf, size_t size, const char *name, int file, hm_error *e) {
    uint64_t hlen;
    if (size < 8) return hm_fail(e, "%s: header length: expected 8 bytes, found a %zu-byte file", name, size);
    memcpy(&hlen, buf, 8);
    if (hlen < 2 || hlen > size - 8 || hlen > (100u << 20))
        return hm_fail(e, "%s: header length: expected 2..%zu (and <= 100 MiB), found %" PRIu64, name,
                       size - 8, hlen);
    cJSON *root = cJSON_ParseWithLength((const char *)buf + 8, (size_t)hlen);
    if (!root || !cJSON_IsObject(root)) {
        const char *found = root ? "another JSON value" : "malformed JSON";
        cJSON_Delete(root);
        return hm_fail(e, "%s: header: expected a JSON object, found %s", name, found);
    }
    size_t data_size = size - 8 - (size_t)hlen;
    const uint8_t *data = buf + 8 + hlen;
    size_t first = s->n;
    cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (!strcmp(it->string, "__metadata__")) continue;
        st_tensor t; memset(&t, 0, sizeof t);
        t.file = file;
        const char *tn = it->string;
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
        cJSON *off = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        if (!cJSON_IsObject(it) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) ||
            cJSON_GetArraySize(off) != 2) {
            hm_fail(e, "%s: tensor '%s': expected {dtype: string, shape: [..], data_offsets: [begin, end]}", name, tn);
            goto fail;
        }
        int esize = 0; t.type = -1;
        for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
            if (!strcmp(dt->valuestring, dtypes[i].name)) { esize = dtypes[i].size; t.type = dtypes[i].type; }
        if (!esize) { hm_fail(e, "%s: tensor '%s': dtype expected one of F32/F16/BF16/..., found '%.20s'", name, tn, dt->valuestring); goto fail; }
        snprintf(t.dtype, sizeof t.dtype, "%s", dt->valuestring);
        int nd = cJSON_GetArraySize(sh);
        if (nd > 4) { hm_fail(e, "%s: tensor '%s': shape expected at most 4 dimensions, found %d", name, tn, nd); goto fail; }
        t.n_dims = nd ? nd : 1;
        for (int i = 0; i < 4; i++) t.ne[i] = 1;
        uint64_t count = 1;
        for (int i = 0; i < nd; i++) {
            cJSON *d = cJSON_GetArrayItem(sh, i);
            double v = cJSON_IsNumber(d) ? d->valuedouble : -1;
            if (v < 0 || v > 1e12 || v != floor(v)) {
                hm_fail(e, "%s: tensor '%s': shape[%d] expected a non-negative integer, found %s", name, tn, i,
                        cJSON_IsNumber(d) ? "an out-of-range number" : "a non-number");
                goto fail;
            }
            t.ne[nd - 1 - i] = (int64_t)v;
            if (v && count > (UINT64_MAX / 16) / (uint64_t)v) { hm_fail(e, "%s: tensor '%s': shape product overflows", name, tn); goto fail; }
            count *= (uint64_t)v;
        }
        double b = cJSON_IsNumber(cJSON_GetArrayItem(off, 0)) ? cJSON_GetArrayItem(off, 0)->valuedouble : -1;
        double en = cJSON_IsNumber(cJSON_GetArrayItem(off, 1)) ? cJSON_GetArrayItem(off, 1)->valuedouble : -1;
        if (b < 0 || en < b || en > (double)data_size || b != floor(b) || en != floor(en)) {
            hm_fail(e, "%s: tensor '%s': data_offsets expected 0 <= begin <= end <= %zu, found [%.0f, %.0f]", name, tn,
                    data_size, b, en);
            goto fail;
        }
        uint64_t want = count * (uint64_t)esize;
        if ((uint64_t)(en - b) != want) {
            hm_fail(e, "%s: tensor '%s': data size expected %" PRIu64 " bytes (shape x %s), found %.0f", name, tn,
                    want, t.dtype, en - b);
            goto fail;
        }
        t.name = hm_strdup(tn);
        t.data = data + (size_t)b; t.nbytes = (size_t)want;
        push(s, &t);
    }
    cJSON_Delete(root);
    return 0;
fail:
    for (size_t i = first; i < s->n; i++) free(s->t[i].name);
    s->n = first;
    cJSON_Delete(root);
    return -1;
}

static int add_file(st_set *s, const char *dir, const char *fname, hm_error *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, fname);
    for (int i = 0; i < s->n_files; i++) if (!strcmp(s->paths[i], path)) return 0;
    s->maps = realloc(s->maps, (size_t)(s->n_files + 1) * sizeof *s->maps);
    s->paths = realloc(s->paths, (size_t)(s->n_files + 1) * sizeof *s->paths);
    if (!s->maps || !s->paths) abort();
    if (hm_map_open(&s->maps[s->n_files], path, e)) return -1;
    s->paths[s->n_files] = hm_strdup(path);
    int f = s->n_files++;
    return st_parse(s, s->maps[f].data, s->maps[f].size, path, f, e);
}

static int st_index(st_set *s, const char *dir, hm_error *e);
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int st_open_dir(st_set *s, const char *dir, hm_error *e) {
    memset(s, 0, sizeof *s);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        char *txt = hm_read_file(path, NULL, e);
        if (!txt) return -1;
        cJSON *root = cJSON_Parse(txt); free(txt);
        cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
        if (!cJSON_IsObject(wm)) {
            cJSON_Delete(root);
            return hm_fail(e, "%s: weight_map: expected a JSON object mapping tensor names to files, found %s", path,
                           root ? "none" : "malformed JSON");
        }
        cJSON *it; int rc = 0;
        cJSON_ArrayForEach(it, wm) {
            if (!cJSON_IsString(it) || strchr(it->valuestring, '/') || !strcmp(it->valuestring, "..")) {
                rc = hm_fail(e, "%s: weight_map['%s']: expected a file name in the same directory", path, it->string);
                break;
            }
            if ((rc = add_file(s, dir, it->valuestring, e))) break;
        }
        if (!rc) rc = st_index(s, dir, e);
        if (!rc) /* every tensor named by the index must be found in its shard */
            cJSON_ArrayForEach(it, wm) if (!st_find(s, it->string)) {
                rc = hm_fail(e, "%s: weight_map['%s']: expected the tensor in %s, found nothing", path, it->string, it->valuestring);
                break;
            }
        cJSON_Delete(root);
        if (rc) st_close(s);
        return rc;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if ((f = fopen(path, "rb"))) {
        fclose(f);
        int rc = add_file(s, dir, "model.safetensors", e);
        if (!rc) rc = st_index(s, dir, e);
        if (rc) st_close(s);
        return rc;
    }
    DIR *d = opendir(dir);
    if (!d) return hm_fail(e, "%s: expected a directory with *.safetensors files, cannot open it", dir);
    char **names = NULL; int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) {
            names = realloc(names, (size_t)(n + 1) * sizeof *names);
            names[n++] = hm_strdup(de->d_name);
        }
    }
    closedir(d);
    int rc = 0;
    if (!n) rc = hm_fail(e, "%s: expected model.safetensors or *.safetensors files, found none", dir);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n && !rc; i++) rc = add_file(s, dir, names[i], e);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (!rc) rc = st_index(s, dir, e);
    if (rc) st_close(s);
    return rc;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

const st_tensor *st_find(const st_set *s, const char *name) {
    if (s->sorted) {
        st_tensor key; key.name = (char *)name;
        return bsearch(&key, s->t, s->n, sizeof *s->t, cmp_tensor);
    }
    for (size_t i = 0; i < s->n; i++) if (!strcmp(s->t[i].name, name)) return &s->t[i];
    return NULL;
}

/* Sorts the table for O(log n) lookups and refuses a name given twice. */
static int st_index(st_set *s, const char *dir, hm_error *e) {
    qsort(s->t, s->n, sizeof *s->t, cmp_tensor);
    for (size_t i = 1; i < s->n; i++)
        if (!strcmp(s->t[i].name, s->t[i - 1].name))
            return hm_fail(e, "%s: tensor '%s': expected once, found in %s and %s", dir, s->t[i].name,
                           s->paths[s->t[i - 1].file], s->paths[s->t[i].file]);
    s->sorted = 1;
    return 0;
}

void st_close(st_set *s) {
    for (size_t i = 0; i < s->n; i++) free(s->t[i].name);
    for (int i = 0; i < s->n_files; i++) { hm_map_close(&s->maps[i]); free(s->paths[i]); }
    free(s->t); free(s->maps); free(s->paths);
    memset(s, 0, sizeof *s);
}
