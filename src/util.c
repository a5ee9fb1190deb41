/* util.c - error reporting, checked allocation, file mapping. */
#define _GNU_SOURCE
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int hm_fail(hm_error *e, const char *fmt, ...) {
    if (e) {
        va_list ap; va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        /* messages quote names taken from files: keep them one printable line */
        for (char *p = e->msg; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    }
    return -1;
}

static void oom(size_t n) { fprintf(stderr, "hotmoe: out of memory allocating %zu bytes\n", n); abort(); }
void *hm_malloc(size_t n) { void *p = malloc(n ? n : 1); if (!p) oom(n); return p; }
void *hm_calloc(size_t n, size_t sz) { void *p = calloc(n ? n : 1, sz ? sz : 1); if (!p) oom(n * sz); return p; }
char *hm_strdup(const char *s) { return hm_strndup(s, strlen(s)); }
char *hm_strndup(const char *s, size_t n) { char *p = hm_malloc(n + 1); memcpy(p, s, n); p[n] = 0; return p; }

int hm_json_scan(const char *s, size_t n, int max, size_t *at) {
    const char *z = memchr(s, 0, n);
    if (z) { if (at) *at = (size_t)(z - s); return HM_JSON_NUL; }
    int d = 0, str = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (str) {
            if (c == '\\') {
                if (n - i > 5 && !memcmp(s + i + 1, "u0000", 5)) { if (at) *at = i; return HM_JSON_NUL; }
                i++;
            } else if (c == '"') {
                str = 0;
            }
        } else if (c == '"') {
            str = 1;
        } else if (c == '[' || c == '{') {
            if (++d > max) { if (at) *at = i; return HM_JSON_DEEP; }
        } else if ((c == ']' || c == '}') && d > 0) {
            d--;
        }
    }
    return HM_JSON_OK;
}

char *hm_read_file(const char *path, size_t *len, hm_error *e) {
    FILE *f = fopen(path, "rb");
    if (!f) { hm_fail(e, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, n = 0; char *buf = hm_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) { cap *= 2; char *nb = realloc(buf, cap); if (!nb) oom(cap); buf = nb; }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f); fclose(f);
    if (bad) { free(buf); hm_fail(e, "%s: read error", path); return NULL; }
    buf[n] = 0; if (len) *len = n;
    return buf;
}

int hm_map_open(hm_map *m, const char *path, hm_error *e) {
    memset(m, 0, sizeof *m); m->fd = -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return hm_fail(e, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return hm_fail(e, "%s: not a regular file", path); }
    m->size = (size_t)st.st_size; m->fd = fd;
    if (m->size == 0) { m->data = (const uint8_t *)""; return 0; }
    void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) { close(fd); m->fd = -1; return hm_fail(e, "%s: mmap failed: %s", path, strerror(errno)); }
    m->data = p;
    return 0;
}

void hm_map_close(hm_map *m) {
    if (m->fd >= 0) { if (m->size) munmap((void *)m->data, m->size); close(m->fd); }
    memset(m, 0, sizeof *m); m->fd = -1;
}

double hm_now(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double hm_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
