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

#endif
