/* trace.c - routing trace files: the binary format (reader with full validation, streaming
 * writer) and the Mixtral JSON-lines format (token order rebuilt from row order). */
#define _GNU_SOURCE
#include "trace.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ binary layout */

static int id_bytes(int n_expert) { return n_expert <= 255 ? 1 : 2; }
static uint32_t rd32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i); }
static void wr64(uint8_t *p, uint64_t v) { wr32(p, (uint32_t)v); wr32(p + 4, (uint32_t)(v >> 32)); }

static void header_fill(uint8_t *h, int n_layer, int n_expert, int k, uint64_t n_tokens) {
    memset(h, 0, TRACE_HEADER_BYTES);
    memcpy(h, TRACE_MAGIC, 4);
    wr32(h + 4, TRACE_VERSION); wr32(h + 8, TRACE_HEADER_BYTES);
    wr32(h + 12, (uint32_t)n_layer); wr32(h + 16, (uint32_t)n_expert); wr32(h + 20, (uint32_t)k);
    wr64(h + 24, n_tokens);
}

/* Checks one row of k ids (NONE = not recorded); names token/layer on failure. */
static int row_check(const char *path, const uint16_t *row, int k, int n_expert, int64_t t, int l, hm_error *e) {
    int none = row[0] == ROUTING_NONE;
    for (int i = 0; i < k; i++) {
        if ((row[i] == ROUTING_NONE) != none)
            return hm_fail(e, "%s: token %lld layer %d: ids: expected all %d recorded or all unrecorded, found a mix",
                           path, (long long)t, l, k);
        if (!none && row[i] >= n_expert)
            return hm_fail(e, "%s: token %lld layer %d: id %d: expected < n_expert %d, found %u",
                           path, (long long)t, l, i, n_expert, row[i]);
        for (int j = 0; j < i && !none; j++)
            if (row[j] == row[i])
                return hm_fail(e, "%s: token %lld layer %d: ids: expected %d distinct experts, found %u twice",
                               path, (long long)t, l, k, row[i]);
    }
    return 0;
}

static int load_binary(const char *path, const uint8_t *d, size_t size, routing *r, trace_info *info, hm_error *e) {
    if (size < TRACE_HEADER_BYTES)
        return hm_fail(e, "%s: header: expected %u bytes, found a %zu-byte file", path, TRACE_HEADER_BYTES, size);
    uint32_t version = rd32(d + 4), hdr = rd32(d + 8), n_layer = rd32(d + 12), n_expert = rd32(d + 16), k = rd32(d + 20);
    uint64_t n_tokens = rd64(d + 24);
    if (version != TRACE_VERSION)
        return hm_fail(e, "%s: version: expected %u, found %u", path, TRACE_VERSION, version);
    if (hdr != TRACE_HEADER_BYTES)
        return hm_fail(e, "%s: header_bytes: expected %u, found %u", path, TRACE_HEADER_BYTES, hdr);
    if (n_layer < 1 || n_layer > 65535)
        return hm_fail(e, "%s: n_layer: expected 1..65535, found %u", path, n_layer);
    if (n_expert < 1 || n_expert > ROUTING_MAX_EXPERT)
        return hm_fail(e, "%s: n_expert: expected 1..%d, found %u", path, ROUTING_MAX_EXPERT, n_expert);
    if (k < 1 || k > n_expert)
        return hm_fail(e, "%s: k: expected 1..n_expert (%u), found %u", path, n_expert, k);
    int w = id_bytes((int)n_expert);
    uint64_t token_bytes = (uint64_t)n_layer * k * (uint64_t)w, body = size - TRACE_HEADER_BYTES;
    int unclosed = n_tokens == TRACE_TOKENS_OPEN;
    if (unclosed) {
        if (body % token_bytes)
            return hm_fail(e, "%s: records: the writer was not closed and the file ends inside a token "
                           "(%llu bytes of records, not a multiple of %llu bytes per token)",
                           path, (unsigned long long)body, (unsigned long long)token_bytes);
        n_tokens = body / token_bytes;
    } else if (n_tokens > body / token_bytes || n_tokens * token_bytes != body) {
        return hm_fail(e, "%s: size: expected %u header bytes + n_tokens %llu x %llu bytes per token, found %zu bytes "
                       "(room for %llu tokens%s)", path, TRACE_HEADER_BYTES, (unsigned long long)n_tokens,
                       (unsigned long long)token_bytes, size, (unsigned long long)(body / token_bytes),
                       body % token_bytes ? " and a partial one" : "");
    }
    if (n_tokens > (uint64_t)INT64_MAX / token_bytes || routing_init(r, (int)n_layer, (int)n_expert, (int)k, (int64_t)n_tokens))
        return hm_fail(e, "%s: n_tokens %llu: too large to hold", path, (unsigned long long)n_tokens);
    const uint8_t *p = d + TRACE_HEADER_BYTES;
    size_t n = (size_t)n_tokens * n_layer * k;
    for (size_t i = 0; i < n; i++) {
        unsigned v = w == 1 ? p[i] : (unsigned)(p[2 * i] | p[2 * i + 1] << 8);
        r->ids[i] = (w == 1 && v == 0xFF) ? ROUTING_NONE : (uint16_t)v;
    }
    int64_t rows = 0;
    for (int64_t t = 0; t < r->n_tokens; t++)
        for (int l = 0; l < r->n_layer; l++) {
            const uint16_t *row = r->ids + ((size_t)t * r->n_layer + l) * r->k;
            if (row_check(path, row, r->k, r->n_expert, t, l, e)) { routing_free(r); return -1; }
            rows += row[0] != ROUTING_NONE;
        }
    if (info) {
        info->format = TRACE_BINARY; info->unclosed = unclosed;
        info->rows = rows; info->missing_rows = r->n_tokens * r->n_layer - rows;
    }
    return 0;
}

/* ------------------------------------------------------------------ JSON lines */

typedef struct {
    int line, layer;
    int64_t pos;       /* token_pos / token_idx, -1 when absent */
    int64_t token;     /* rebuilt */
    char seg[96];      /* dataset + problem_id: a new sequence */
} jrow;

static int json_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out, int required,
                    const char *path, int line, hm_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        if (required) return hm_fail(e, "%s:%d: %s: expected an integer, found no such field", path, line, key);
        *out = -1; return 0;
    }
    double x = cJSON_IsNumber(v) ? v->valuedouble : -1e300;
    if (!cJSON_IsNumber(v) || x != (double)(int64_t)x || x < (double)lo || x > (double)hi)
        return hm_fail(e, "%s:%d: %s: expected an integer in [%lld, %lld], found %s", path, line, key,
                       (long long)lo, (long long)hi, cJSON_IsNumber(v) ? "a fraction or an out-of-range number" : "another type");
    *out = (int64_t)x;
    return 0;
}

static void *grow(void *p, size_t n) {
    void *q = realloc(p, n);
    if (!q) { fprintf(stderr, "hotmoe: out of memory allocating %zu bytes\n", n); abort(); }
    return q;
}

/* Parses every line into rows[] and ids[] (k per row). */
static int jsonl_parse(const char *path, char *text, size_t len, jrow **rows_out, uint16_t **ids_out,
                       int *n_out, int *k_out, hm_error *e) {
    int cap = 1024, n = 0, k = 0, line = 0;
    jrow *rows = hm_malloc((size_t)cap * sizeof *rows);
    uint16_t *ids = NULL;
    char *p = text, *end = text + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        line++;
        char *q = p; while (q < le && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
        char *next = nl ? nl + 1 : end;
        if (q == le) { p = next; continue; }
        cJSON *o = cJSON_ParseWithLength(p, (size_t)(le - p));
        if (!o || !cJSON_IsObject(o)) {
            cJSON_Delete(o);
            hm_fail(e, "%s:%d: expected a JSON object per line, found malformed JSON", path, line);
            goto fail;
        }
        if (n == cap) {
            cap *= 2;
            rows = grow(rows, (size_t)cap * sizeof *rows);
            if (ids) ids = grow(ids, (size_t)cap * k * sizeof *ids);
        }
        jrow *jr = &rows[n]; memset(jr, 0, sizeof *jr); jr->line = line;
        int64_t layer, pos, pos2;
        if (json_int(o, "layer", 0, 65534, &layer, 1, path, line, e) ||
            json_int(o, "token_pos", 0, INT32_MAX, &pos, 0, path, line, e) ||
            json_int(o, "token_idx", 0, INT32_MAX, &pos2, 0, path, line, e)) { cJSON_Delete(o); goto fail; }
        jr->layer = (int)layer; jr->pos = pos >= 0 ? pos : pos2;
        const cJSON *ds = cJSON_GetObjectItemCaseSensitive(o, "dataset");
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(o, "problem_id");
        snprintf(jr->seg, sizeof jr->seg, "%.60s/%.0f", cJSON_IsString(ds) ? ds->valuestring : "",
                 cJSON_IsNumber(pid) ? pid->valuedouble : -1.0);
        const cJSON *ex = cJSON_GetObjectItemCaseSensitive(o, "experts");
        int m = cJSON_IsArray(ex) ? cJSON_GetArraySize(ex) : -1;
        if (m < 1) { cJSON_Delete(o); hm_fail(e, "%s:%d: experts: expected a non-empty array of expert ids, found %s", path, line, m < 0 ? "no array" : "[]"); goto fail; }
        if (!k) { k = m; ids = hm_malloc((size_t)cap * k * sizeof *ids); }
        if (m != k) { cJSON_Delete(o); hm_fail(e, "%s:%d: experts: expected %d ids (as on the first row), found %d", path, line, k, m); goto fail; }
        for (int i = 0; i < k; i++) {
            const cJSON *v = cJSON_GetArrayItem(ex, i);
            double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
            if (!cJSON_IsNumber(v) || x != (double)(int)x || x < 0 || x >= ROUTING_MAX_EXPERT) {
                cJSON_Delete(o);
                hm_fail(e, "%s:%d: experts[%d]: expected an expert id in [0, %d), found %s", path, line, i, ROUTING_MAX_EXPERT,
                        cJSON_IsNumber(v) ? "a fraction or an out-of-range number" : "another type");
                goto fail;
            }
            ids[(size_t)n * k + i] = (uint16_t)x;
            for (int j = 0; j < i; j++)
                if (ids[(size_t)n * k + j] == (uint16_t)x) {
                    cJSON_Delete(o);
                    hm_fail(e, "%s:%d: experts: expected %d distinct ids, found %d twice", path, line, k, (int)x);
                    goto fail;
                }
        }
        cJSON_Delete(o);
        n++;
        p = next;
    }
    if (!n) { hm_fail(e, "%s: expected routing rows, found none", path); goto fail; }
    *rows_out = rows; *ids_out = ids; *n_out = n; *k_out = k;
    return 0;
fail:
    free(rows); free(ids);
    return -1;
}

/* Token of each row. Per sequence (dataset, problem_id): rows that come in runs of one layer
 * (prompt processing, layer-major) take their token from token_pos/token_idx; rows that come one
 * per layer (decode, token-major) start a new token whenever the layer does not increase or
 * the recorded position changes, after the last layer-major token of the sequence. */
static int jsonl_tokens(const char *path, jrow *rows, int n, hm_error *e) {
    int64_t base = 0;
    for (int s = 0; s < n;) {
        int s_end = s;
        while (s_end < n && !strcmp(rows[s_end].seg, rows[s].seg)) s_end++;
        int64_t top = base - 1, cur = -1;
        int prev = -1;
        for (int i = s; i < s_end; i++) {
            int run = (i > s && rows[i - 1].layer == rows[i].layer) || (i + 1 < s_end && rows[i + 1].layer == rows[i].layer);
            if (run) {
                if (rows[i].pos < 0)
                    return hm_fail(e, "%s:%d: token_pos: expected a position (rows come in runs of layer %d), found none",
                                   path, rows[i].line, rows[i].layer);
                rows[i].token = base + rows[i].pos;
            } else {
                int fresh = prev < 0 || rows[i].layer <= rows[prev].layer ||
                            (rows[i].pos >= 0 && rows[prev].pos >= 0 && rows[i].pos != rows[prev].pos);
                if (fresh) cur = (cur > top ? cur : top) + 1;
                rows[i].token = cur;
                prev = i;
            }
            if (rows[i].token > top) top = rows[i].token;
        }
        base = top + 1;
        s = s_end;
    }
    return 0;
}

static int load_jsonl(const char *path, char *text, size_t len, routing *r, trace_info *info, hm_error *e) {
    jrow *rows; uint16_t *ids; int n, k;
    if (jsonl_parse(path, text, len, &rows, &ids, &n, &k, e)) return -1;
    int rc = -1;
    if (jsonl_tokens(path, rows, n, e)) goto done;
    int n_layer = 0, n_expert = 0; int64_t n_tokens = 0;
    for (int i = 0; i < n; i++) {
        if (rows[i].layer + 1 > n_layer) n_layer = rows[i].layer + 1;
        if (rows[i].token + 1 > n_tokens) n_tokens = rows[i].token + 1;
        for (int j = 0; j < k; j++) if (ids[(size_t)i * k + j] + 1 > n_expert) n_expert = ids[(size_t)i * k + j] + 1;
    }
    if (k > n_expert) n_expert = k;
    if (routing_init(r, n_layer, n_expert, k, n_tokens)) { hm_fail(e, "%s: %lld tokens: too large to hold", path, (long long)n_tokens); goto done; }
    for (int i = 0; i < n; i++) {
        uint16_t *dst = r->ids + ((size_t)rows[i].token * n_layer + rows[i].layer) * k;
        if (dst[0] != ROUTING_NONE) {
            int other = 0;
            for (int j = 0; j < i; j++) if (rows[j].token == rows[i].token && rows[j].layer == rows[i].layer) other = rows[j].line;
            hm_fail(e, "%s:%d: layer %d of token %lld: expected one row, found a second (first on line %d)",
                    path, rows[i].line, rows[i].layer, (long long)rows[i].token, other);
            routing_free(r); goto done;
        }
        memcpy(dst, ids + (size_t)i * k, (size_t)k * sizeof *dst);
    }
    if (info) {
        info->format = TRACE_JSONL; info->unclosed = 0;
        info->rows = n; info->missing_rows = n_tokens * n_layer - n;
    }
    rc = 0;
done:
    free(rows); free(ids);
    return rc;
}

int trace_load(const char *path, routing *r, trace_info *info, hm_error *e) {
    memset(r, 0, sizeof *r);
    if (info) memset(info, 0, sizeof *info);
    size_t len;
    char *text = hm_read_file(path, &len, e);
    if (!text) return -1;
    const char *q = text; while (q < text + len && (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t')) q++;
    int rc;
    if (len >= 4 && !memcmp(text, TRACE_MAGIC, 4)) rc = load_binary(path, (const uint8_t *)text, len, r, info, e);
    else if (q < text + len && *q == '{') rc = load_jsonl(path, text, len, r, info, e);
    else rc = hm_fail(e, "%s: format: expected a hotmoe trace (magic \"%s\") or JSON lines ('{'), found %s",
                      path, TRACE_MAGIC, len ? "neither" : "an empty file");
    free(text);
    return rc;
}

int trace_conform(const char *path, routing *r, const trace_info *info, int n_layer, int n_expert, int k, hm_error *e) {
    if (r->n_layer != n_layer)
        return hm_fail(e, "%s: n_layer: expected %d (the model's MoE layers), found %d", path, n_layer, r->n_layer);
    if (r->k != k)
        return hm_fail(e, "%s: k: expected %d (the model's experts per token), found %d", path, k, r->k);
    int inferred = info && info->format == TRACE_JSONL;
    if (r->n_expert != n_expert && !(inferred && r->n_expert < n_expert))
        return hm_fail(e, "%s: n_expert: expected %d (the model's experts per layer), found %s%d", path, n_expert,
                       inferred ? "ids up to " : "", inferred ? r->n_expert - 1 : r->n_expert);
    r->n_expert = n_expert;
    return 0;
}

/* ------------------------------------------------------------------ writing */

struct trace_writer {
    FILE *f;
    char *path;
    int n_layer, n_expert, k;
    uint64_t n_tokens;
    uint8_t *buf;   /* one token's records */
    uint16_t *row;  /* (k) one row, for the checks */
};

trace_writer *trace_writer_open(const char *path, int n_layer, int n_expert, int k, hm_error *e) {
    if (n_layer < 1 || n_layer > 65535 || n_expert < 1 || n_expert > ROUTING_MAX_EXPERT || k < 1 || k > n_expert) {
        hm_fail(e, "%s: trace shape: expected 1..65535 layers, 1..%d experts, 1..n_expert per token, found %d, %d, %d",
                path, ROUTING_MAX_EXPERT, n_layer, n_expert, k);
        return NULL;
    }
    FILE *f = fopen(path, "wb");
    if (!f) { hm_fail(e, "%s: cannot create: %s", path, strerror(errno)); return NULL; }
    uint8_t h[TRACE_HEADER_BYTES];
    header_fill(h, n_layer, n_expert, k, TRACE_TOKENS_OPEN);
    if (fwrite(h, 1, sizeof h, f) != sizeof h) { fclose(f); hm_fail(e, "%s: write error", path); return NULL; }
    trace_writer *w = hm_calloc(1, sizeof *w);
    w->f = f; w->path = hm_strdup(path); w->n_layer = n_layer; w->n_expert = n_expert; w->k = k;
    w->buf = hm_malloc((size_t)n_layer * k * 2);
    w->row = hm_malloc((size_t)k * sizeof *w->row);
    return w;
}

int trace_writer_token(trace_writer *w, const int *ids, hm_error *e) {
    int wb = id_bytes(w->n_expert), k = w->k;
    uint16_t *row = w->row;
    for (int l = 0; l < w->n_layer; l++) {
        const int *x = ids + (size_t)l * k;
        for (int i = 0; i < k; i++) {
            if (x[i] >= w->n_expert)
                return hm_fail(e, "%s: token %llu layer %d: id %d: expected < n_expert %d, found %d",
                               w->path, (unsigned long long)w->n_tokens, l, i, w->n_expert, x[i]);
            uint16_t v = x[i] < 0 ? ROUTING_NONE : (uint16_t)x[i];
            row[i] = v;
            uint8_t *d = w->buf + ((size_t)l * k + i) * wb;
            if (wb == 1) d[0] = v == ROUTING_NONE ? 0xFF : (uint8_t)v;
            else { d[0] = (uint8_t)v; d[1] = (uint8_t)(v >> 8); }
        }
        if (row_check(w->path, row, k, w->n_expert, (int64_t)w->n_tokens, l, e)) return -1;
    }
    size_t n = (size_t)w->n_layer * k * wb;
    if (fwrite(w->buf, 1, n, w->f) != n) return hm_fail(e, "%s: write error: %s", w->path, strerror(errno));
    w->n_tokens++;
    return 0;
}

int trace_writer_close(trace_writer *w, hm_error *e) {
    if (!w) return 0;
    uint8_t cnt[8]; wr64(cnt, w->n_tokens);
    int rc = 0;
    if (fflush(w->f) || fseek(w->f, 24, SEEK_SET) || fwrite(cnt, 1, 8, w->f) != 8)
        rc = hm_fail(e, "%s: cannot patch n_tokens: %s", w->path, strerror(errno));
    if (fclose(w->f) && !rc) rc = hm_fail(e, "%s: close failed: %s", w->path, strerror(errno));
    free(w->buf); free(w->row); free(w->path); free(w);
    return rc;
}

int trace_save(const char *path, const routing *r, hm_error *e) {
    trace_writer *w = trace_writer_open(path, r->n_layer, r->n_expert, r->k, e);
    if (!w) return -1;
    int *ids = hm_malloc((size_t)r->n_layer * r->k * sizeof *ids);
    for (int64_t t = 0; t < r->n_tokens; t++) {
        for (size_t i = 0; i < (size_t)r->n_layer * r->k; i++) {
            uint16_t v = r->ids[(size_t)t * r->n_layer * r->k + i];
            ids[i] = v == ROUTING_NONE ? -1 : v;
        }
        if (trace_writer_token(w, ids, e)) { free(ids); trace_writer_close(w, NULL); return -1; }
    }
    free(ids);
    return trace_writer_close(w, e);
}
