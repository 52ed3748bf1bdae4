/* Fuzz target: what a rank reads from the root (coll_wire_boot_reply, then
 * coll_wire_rank_table for the number of ranks the first input byte picks). */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int nranks = data[0] % 8 + 1;
    data++;
    size--;
    struct coll_boot_reply rep;
    const char *why = NULL;
    size_t rn = size < sizeof(rep) ? size : sizeof(rep);
    if (coll_wire_boot_reply(data, rn, &rep, &why) == COLL_WIRE_OK) {
        FUZZ_ASSERT(rn == sizeof(rep));
        FUZZ_ASSERT(rep.magic == COLL_BOOT_MAGIC);
        FUZZ_ASSERT(rep.status >= collSuccess && rep.status < collNumResults &&
                    rep.status != collInProgress);
        FUZZ_ASSERT(strlen(rep.msg) < sizeof(rep.msg));
    } else {
        FUZZ_ASSERT(why != NULL);
    }
    /* The rest is the table; the rank sizes what it reads by its own nranks, so
     * a table of another length must be refused, never read past. */
    struct coll_rank_info *table = calloc((size_t)nranks, sizeof(*table));
    if (table == NULL)
        return 0;
    why = NULL;
    if (coll_wire_rank_table(data + rn, size - rn, nranks, table, &why) == COLL_WIRE_OK) {
        FUZZ_ASSERT(size - rn == (size_t)nranks * sizeof(*table));
        for (int k = 0; k < nranks; k++)
            fuzz_check_info(&table[k], k);
    } else {
        FUZZ_ASSERT(why != NULL);
    }
    free(table);
    return 0;
}
