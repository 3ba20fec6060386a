/* parallel.h: run independent items on a few threads.
 *
 * Items are handed out in order from an atomic counter, so a slow item does
 * not hold up the rest. Once an item fails, no new items start; the error
 * of the lowest failing item is returned, so results do not depend on
 * timing. */
#ifndef STITCH_COMMON_PARALLEL_H
#define STITCH_COMMON_PARALLEL_H

#include "stitch/error.h"

#include <stddef.h>
#include <stdint.h>

/* Returns 0 or a negative STITCH_E* code. worker < threads. */
typedef int (*par_fn)(void *ctx, size_t item, unsigned worker);

/* threads = 0: one per online CPU. Runs on the calling thread alone when
 * that is 1 or n is small. *failed_item (if not NULL) gets the item whose
 * error is returned. */
int stitch_parallel_for(size_t n, unsigned threads, par_fn fn, void *ctx,
                        size_t *failed_item);
unsigned stitch_parallel_threads(unsigned threads, size_t n);

/* For items that each need a scratch buffer and report failures with a
 * message: fn gets the item, its worker's SCRATCH_LEN bytes of scratch
 * (allocated on first use) and its worker's diag. On failure *d (if not
 * NULL) gets the message of the lowest failing item. */
typedef int (*par_diag_fn)(void *ctx, size_t item, uint8_t *scratch,
                           stitch_diag *d);
int stitch_parallel_diag(size_t n, unsigned threads, size_t scratch_len,
                         par_diag_fn fn, void *ctx, stitch_diag *d);

#endif
