/* arena.c - the pinned, NUMA-local host arena for cold experts (arena.h): one mapping, placed
 * with libnuma, page-locked with mlock, every failure of either turned into a note, not an error. */
#define _GNU_SOURCE
#include "arena.h"
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#ifdef HM_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif

/* The mapping is aligned to this so that transparent huge pages can back all of it: a decode step
 * streams gigabytes through the arena, and 4 KiB pages would cost a TLB miss every 4 KiB. */
#define HUGE_ALIGN ((size_t)2 << 20)

/* err = the formatted message, when err is given */
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* appends one sentence to a->note */
static void note(hm_arena *a, const char *fmt, ...) {
    size_t len = strlen(a->note);
    if (len + 2 >= sizeof a->note) return;
    if (len) { a->note[len++] = ' '; a->note[len] = 0; }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->note + len, sizeof a->note - len, fmt, ap);
    va_end(ap);
}

/* Binds [a->base, +size) to a->node before the pages are touched. MPOL_PREFERRED rather than
 * MPOL_BIND: when the node runs out, BIND gets the process OOM-killed at fault time, PREFERRED
 * spills to another node, which check_placement then reports. Returns 0, or -1 when `node` is
 * not a node of this machine (err filled). */
static int place(hm_arena *a, int node, char *err, size_t errlen) {
#ifdef HM_HAVE_NUMA
    if (numa_available() < 0) {
        if (node > 0) {
            set_err(err, errlen, "arena: NUMA node %d requested, but this kernel or container "
                    "reports no NUMA support (only node 0 exists)", node);
            return -1;
        }
        note(a, "NUMA placement off: the kernel or container reports no NUMA support; pages "
             "land where they are first touched.");
        return 0;
    }
    if (node < 0) {
        const int cpu = sched_getcpu();
        node = cpu >= 0 ? numa_node_of_cpu(cpu) : 0;
        if (node < 0) node = 0;
    }
    if (node > numa_max_node() || numa_node_size64(node, NULL) <= 0) {
        set_err(err, errlen, "arena: NUMA node %d does not exist (nodes 0..%d)", node, numa_max_node());
        return -1;
    }
    struct bitmask *bm = numa_allocate_nodemask();
    numa_bitmask_setbit(bm, (unsigned)node);
    const long rc = mbind(a->base, a->size, MPOL_PREFERRED, bm->maskp, bm->size + 1, 0);
    numa_free_nodemask(bm);
    if (rc != 0) {
        note(a, "NUMA placement on node %d failed (mbind: %s); pages land where first touched.",
             node, strerror(errno));
        return 0;
    }
    a->node = node;
    return 0;
#else
    if (node > 0) {
        set_err(err, errlen, "arena: NUMA node %d requested, but hotmoe was built without libnuma "
                "(install libnuma-dev and rebuild)", node);
        return -1;
    }
    note(a, "NUMA placement off: built without libnuma (install libnuma-dev and rebuild).");
    return 0;
#endif
}

/* After the pages exist: samples up to 256 of them and notes how many are not on a->node. */
static void check_placement(hm_arena *a) {
#ifdef HM_HAVE_NUMA
    if (a->node < 0) return;
    enum { N = 256 };
    void *pages[N];
    int status[N];
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), npages = a->size / pg;
    const int n = npages < N ? (int)npages : N;
    for (int i = 0; i < n; i++) pages[i] = a->base + (size_t)i * (npages / (size_t)n) * pg;
    if (move_pages(0, (unsigned long)n, pages, NULL, status, 0) != 0) return;
    int off = 0, known = 0; /* a negative status is an error code for that page, not a node */
    for (int i = 0; i < n; i++)
        if (status[i] >= 0) { known++; off += status[i] != a->node; }
    if (off)
        note(a, "%d of %d sampled pages are not on node %d (the node is short of free memory).",
             off, known, a->node);
#else
    (void)a;
#endif
}

/* Faults the pages in and locks them; when locking is refused, faults them in by touching
 * them (so placement happens now, not during the first decode step) and notes why. */
static void lock_pages(hm_arena *a) {
    if (mlock(a->base, a->size) == 0) {
        a->locked = 1;
        return;
    }
    const int e = errno;
    struct rlimit rl;
    char lim[64] = "unknown";
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY) snprintf(lim, sizeof lim, "unlimited");
        else snprintf(lim, sizeof lim, "%llu KiB", (unsigned long long)(rl.rlim_cur >> 10));
    }
    note(a, "Not page-locked: mlock of %.1f MiB failed (%s; RLIMIT_MEMLOCK %s). Raise it "
         "(`ulimit -l unlimited`, limits.conf memlock, or CAP_IPC_LOCK); a later cudaHostRegister "
         "pins the pages itself.", (double)a->size / 1048576.0, strerror(e), lim);
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
#ifdef MADV_POPULATE_WRITE
    if (madvise(a->base, a->size, MADV_POPULATE_WRITE) == 0) return;
#endif
    for (size_t o = 0; o < a->size; o += pg) ((volatile uint8_t *)a->base)[o] = 0;
}

/* ---- the public functions: contracts in arena.h ---- */

int arena_init(hm_arena *a, size_t size, int node, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    a->node = -1;
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    if (size == 0) {
        set_err(err, errlen, "arena: size 0 requested");
        return -1;
    }
    size = (size + pg - 1) / pg * pg;
    const size_t map_size = size + HUGE_ALIGN;
    void *map = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        set_err(err, errlen, "arena: cannot map %zu MiB (%s)", size >> 20, strerror(errno));
        return -1;
    }
    a->map = map;
    a->map_size = map_size;
    a->base = (uint8_t *)(((uintptr_t)map + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
    a->size = size;
#ifdef MADV_HUGEPAGE
    a->huge = madvise(a->base, a->size, MADV_HUGEPAGE) == 0;
#endif
    if (place(a, node, err, errlen) != 0) {
        munmap(map, map_size);
        memset(a, 0, sizeof *a);
        a->node = -1;
        return -1;
    }
    lock_pages(a);
    check_placement(a);
    return 0;
}

void arena_free(hm_arena *a) {
    if (a->map) {
        if (a->locked) munlock(a->base, a->size);
        munmap(a->map, a->map_size);
    }
    memset(a, 0, sizeof *a);
    a->node = -1;
}

/* n rounded up to HM_ARENA_ALIGN */
static size_t align_up(size_t n) { return (n + HM_ARENA_ALIGN - 1) / HM_ARENA_ALIGN * HM_ARENA_ALIGN; }

void *arena_alloc(hm_arena *a, size_t bytes) {
    const size_t off = align_up(a->used);
    if (off > a->size || bytes > a->size - off) return NULL;
    a->used = off + bytes;
    return a->base + off;
}

size_t arena_ffn_bytes(const hm_ffn_w *f) {
    const hm_tensor *t[3] = { &f->gate, &f->up, &f->down };
    size_t n = 0;
    for (int i = 0; i < 3; i++)
        if (t[i]->data) n += align_up(t[i]->nbytes);
    return n;
}

int arena_copy_ffn(hm_arena *a, const hm_ffn_w *src, hm_ffn_w *dst, char *err, size_t errlen) {
    const size_t need = arena_ffn_bytes(src), off = align_up(a->used);
    if (off > a->size || need > a->size - off) {
        set_err(err, errlen, "arena: full: an expert needs %zu bytes, %zu of %zu are free",
                need, off > a->size ? 0 : a->size - off, a->size);
        return -1;
    }
    hm_ffn_w out = *src;
    hm_tensor *o[3] = { &out.gate, &out.up, &out.down };
    for (int i = 0; i < 3; i++) {
        if (!o[i]->data) continue;
        void *p = arena_alloc(a, o[i]->nbytes);
        memcpy(p, o[i]->data, o[i]->nbytes);
        o[i]->data = p;
    }
    *dst = out;
    return 0;
}

int arena_copy_experts(hm_arena *a, const hm_model *m, int layer, const uint8_t *pick,
                       hm_ffn_w *views, char *err, size_t errlen) {
    const hm_config *c = &m->cfg;
    if (layer < 0 || layer >= c->n_layer + c->n_nextn) {
        set_err(err, errlen, "arena: layer %d out of range (0..%d)", layer, c->n_layer + c->n_nextn - 1);
        return -1;
    }
    const hm_layer *ly = &m->layers[layer];
    if (!ly->is_moe || !ly->experts) {
        set_err(err, errlen, "arena: layer %d has no routed experts", layer);
        return -1;
    }
    int n = 0;
    for (int e = 0; e < c->n_expert; e++) {
        if (pick && !pick[e]) continue;
        char why[192];
        if (arena_copy_ffn(a, &ly->experts[e].host, &views[e], why, sizeof why) != 0) {
            set_err(err, errlen, "layer %d expert %d: %s", layer, e, why);
            return -1;
        }
        n++;
    }
    return n;
}
