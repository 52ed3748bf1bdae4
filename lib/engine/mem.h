/* collMemAlloc memory: the registry of this process's regions, which the direct
 * allreduce (algorithms/direct.c) looks buffers up in. */
#ifndef COLL_MEM_H
#define COLL_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The memfd name of every region, followed by its id. */
#define COLL_MEM_NAME "libcollective-mem-"

/* Where [p, p+len) lies in a collMemAlloc region: its fd, id and offset; false
 * when it does not lie inside one region. */
bool coll_mem_lookup(const void *p, size_t len, int *fd_p, uint64_t *id_p, size_t *off_p);
/* The collMemAlloc region holding [p, p+len): its base, size and id (unique in
 * the process, never reused: memory freed and allocated again at the same address
 * is another id).  False when [p, p+len) is not inside one region. */
bool coll_mem_region(const void *p, size_t len, char **base_p, size_t *size_p, uint64_t *id_p);
/* Whether the region with this id is still allocated. */
bool coll_mem_live(uint64_t id);
/* How many regions collMemFree has freed so far (any thread). */
uint64_t coll_mem_frees(void);

/* Another process's memfd on this host (its pid and descriptor), mapped here
 * read-only and whole, with its size in *size_p, when its name starts with
 * `name` (the /proc link reads "/memfd:NAME...") and it holds at least `need`
 * bytes; NULL (said at INFO, naming what) when not: another pid namespace, no
 * permission, or the descriptor is no longer that memfd. */
char *coll_mem_map_peer(int32_t pid, int32_t fd, const char *name, size_t need,
                        size_t *size_p);

#endif
