/* The host's ledger of the shared memory that slot rings take (transports/shm):
 * one budget for every communicator and process of a user on the host. */
#ifndef COLL_SHM_LEDGER_H
#define COLL_SHM_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

/* Locks the ledger and returns the bytes that the live processes hold (those
 * of processes gone are cleared first when `want` more would pass `budget`);
 * *ok_p false when there is no ledger (it could not be opened: the caller goes
 * by its communicator's share alone, and nothing is locked). */
uint64_t coll_shm_ledger_begin(uint64_t budget, uint64_t want, bool *ok_p);

/* Adds `bytes` to this process's entry and unlocks (after a begin that was ok). */
void coll_shm_ledger_end(uint64_t bytes);

/* Gives back bytes this process added (a segment unmapped by its sender). */
void coll_shm_ledger_release(uint64_t bytes);

/* This process's bytes in the ledger (tests). */
uint64_t coll_shm_ledger_mine(void);

#endif
