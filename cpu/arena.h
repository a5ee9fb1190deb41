/* arena.h - the pinned, NUMA-local host arena that holds cold experts' weights.
 * One large allocation, its pages bound to one NUMA node (libnuma) and page-locked (mlock) where
 * the limits allow, so that CPU workers on that node read it at local DRAM speed and the GPU can
 * later register it once (cudaHostRegister on base/size) and copy experts out of it by DMA.
 * Experts copied in stay for the life of the arena: evicting one from the GPU costs nothing. */
#ifndef HM_ARENA_H
#define HM_ARENA_H
#include <stddef.h>
#include <stdint.h>
#include "model.h"

/* Alignment of every tensor copied into the arena (bytes): a cache line for the CPU kernels and
 * a comfortable boundary for DMA. */
#define HM_ARENA_ALIGN 256

typedef struct {
    uint8_t *base;       /* (size) the one allocation: what cudaHostRegister is given */
    size_t size;         /* bytes reserved, a multiple of the page size */
    size_t used;         /* bytes handed out so far */
    void *map;           /* the mapping behind base (base is 2 MiB-aligned inside it) */
    size_t map_size;
    int node;            /* NUMA node the pages are bound to; -1 when not placed */
    int locked;          /* 1 when the whole arena is page-locked (mlock) */
    int huge;            /* 1 when transparent huge pages were requested (madvise) */
    char note[384];      /* what fell back and why; "" when placement and locking both worked */
} hm_arena;

/* Reserves `size` bytes (rounded up to pages), binds them to NUMA node `node` (-1: the node of
 * the calling thread's CPU), faults them in and page-locks them.
 * Returns 0 on success, also when placement or locking could not be done (no libnuma, a single
 * node, RLIMIT_MEMLOCK too small): the arena then works as plain memory and a->note says what
 * is missing and how to get it. Returns -1 (err filled, *a zeroed) only when the memory itself
 * cannot be had or `node` does not exist. */
int arena_init(hm_arena *a, size_t size, int node, char *err, size_t errlen);

/* Releases the memory (unlocking it); a is zeroed. Safe on a zeroed arena. The caller must have
 * unregistered it from CUDA first. */
void arena_free(hm_arena *a);

/* `bytes` of the arena aligned to HM_ARENA_ALIGN, or NULL when it is full (nothing changes). */
void *arena_alloc(hm_arena *a, size_t bytes);

/* Bytes that arena_copy_ffn needs for f (its three tensors, each aligned). Absent tensors
 * (data == NULL) count 0. */
size_t arena_ffn_bytes(const hm_ffn_w *f);

/* Copies the weights of src into the arena; *dst becomes the same views over the arena copy.
 * Returns 0, or -1 when the arena is too small (err says how much more is needed; nothing is
 * taken from the arena). */
int arena_copy_ffn(hm_arena *a, const hm_ffn_w *src, hm_ffn_w *dst, char *err, size_t errlen);

/* Copies the host weights of the experts of layer `layer` whose entry in `pick` is nonzero
 * (pick NULL: every expert) into the arena, writing their views to views[e] (n_expert entries;
 * entries not picked are left as they are). The model is not changed: the caller points
 * experts[e].host at views[e] when it switches to the arena copy.
 * Returns the number of experts copied, or -1 (err filled) on a layer without experts or an
 * arena too small; experts copied before the failure keep their views. */
int arena_copy_experts(hm_arena *a, const hm_model *m, int layer, const uint8_t *pick,
                       hm_ffn_w *views, char *err, size_t errlen);

#endif
