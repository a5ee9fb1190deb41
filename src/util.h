/* util.h - small shared helpers: error reporting, checked allocation, whole-file reads. */
#ifndef HM_UTIL_H
#define HM_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>

/* Library code reports failure through one of these; only main() prints and exits.
 * Messages name the file, the field, what was expected and what was found. */
typedef struct { char msg[1024]; } hm_error;

#if defined(__GNUC__)
#define HM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define HM_PRINTF(a, b)
#endif

/* Sets e->msg (when e is not NULL) and returns -1, so `return hm_fail(e, ...)` reads well. */
int hm_fail(hm_error *e, const char *fmt, ...) HM_PRINTF(2, 3);

/* malloc/calloc that abort with a message on exhaustion (an invariant, not input). */
void *hm_malloc(size_t n);
void *hm_calloc(size_t n, size_t sz);
char *hm_strdup(const char *s);
char *hm_strndup(const char *s, size_t n);

/* JSON text from a client or a model, checked before cJSON parses it: HM_JSON_OK, or why it may not
 * be parsed, with *at (when not NULL) the byte where:
 * - HM_JSON_DEEP: it nests arrays and objects more than max deep (at: the byte that goes one
 *   deeper). Brackets inside strings do not count (a backslash escapes the next byte, as cJSON reads
 *   them), so cJSON never recurses deeper than this says. cJSON recurses at every level (to its own
 *   limit of 1000, ~190 KB of stack) and the HTTP server's threads are civetweb's, with stacks of
 *   ~100 KB (a body of 100,000 '[' overflowed one at ~410 levels).
 * - HM_JSON_NUL: it holds a NUL byte, or a string holds the escape \u0000 (at: the NUL or the
 *   backslash). cJSON's strings are C strings, so it would cut that string there and the rest of it
 *   would be lost without a word ("a\u0000bc" read as "a"). */
#define HM_JSON_MAX_DEPTH 64
enum { HM_JSON_OK = 0, HM_JSON_DEEP, HM_JSON_NUL };
int hm_json_scan(const char *s, size_t n, int max, size_t *at);

/* Reads a whole file into a NUL-terminated buffer; *len gets the size without the NUL. */
char *hm_read_file(const char *path, size_t *len, hm_error *e);

/* A read-only mapping of a whole file. */
typedef struct { const uint8_t *data; size_t size; int fd; } hm_map;
int hm_map_open(hm_map *m, const char *path, hm_error *e);
void hm_map_close(hm_map *m);

/* Monotonic seconds. */
double hm_now(void);
/* Median of v[0..n) (n >= 1); sorts v in place. */
double hm_median(double *v, int n);

#endif
