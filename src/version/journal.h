/* journal.h: the weights file's state record and its apply journal
 * (proto/store.md, "Weights files").
 *
 * PATH.stitch-state names the version the weights hold. PATH.stitch-journal
 * exists only while an apply is in flight; it is written whole (temporary,
 * fsync, rename) before the first byte of the weights changes, so after a
 * crash it is either absent or complete. An in-place journal holds, for
 * every changed run of bytes, the old and the new bytes: recovery writes the
 * old ones back (undo) unless the state already names the new version. A
 * rewrite journal holds no records: the new file replaced the old one by
 * rename, and recovery tells which one is there by its view digest. */
#ifndef STITCH_VERSION_JOURNAL_H
#define STITCH_VERSION_JOURNAL_H

#include "stitch/store.h"

#include "common/bytes.h"
#include "common/fileio.h"

#include <xxhash.h>

#define JOURNAL_MAGIC "STITCHJL"
#define JOURNAL_END "STITCHJE"
#define JOURNAL_FORMAT 1
#define JOURNAL_INPLACE 1
#define JOURNAL_REWRITE 2
#define JOURNAL_HEADER_BYTES 224
#define JOURNAL_TRAILER_BYTES 24
#define JOURNAL_FULL 0   /* len old bytes, then len new bytes */
#define JOURNAL_SPARSE 1 /* n positions, n old symbols, n new symbols */

typedef struct journal_head {
  int kind;
  stitch_pubkey swarm;
  uint64_t from_version, to_version;
  stitch_digest from_id, to_id, from_view, to_view;
  uint64_t file_size;
} journal_head;

/* Paths derived from the weights path; caller frees. */
char *weights_side_path(const char *path, const char *suffix);

int wstate_write(const char *path, const stitch_wstate *st, stitch_diag *d);

/* Streaming journal writer: header, records, trailer, commit. */
typedef struct journal_writer {
  stitch_tmpfile tf;
  XXH3_state_t *xx;
  dbuf buf; /* batched writes */
  uint64_t records;
  uint64_t bytes;
  uint32_t *ix; /* changed element indices of the current run */
  size_t ix_cap;
} journal_writer;

int journal_begin(journal_writer *w, const char *path, const journal_head *h,
                  stitch_diag *d);
/* One record for the run at FILE_OFF: the old and new bytes of a block
 * whose elements are W bytes wide. Only the elements that differ are kept
 * when that is smaller. */
int journal_add(journal_writer *w, uint64_t file_off, const uint8_t *old,
                const uint8_t *new_, size_t len, unsigned width,
                stitch_diag *d);
int journal_commit(journal_writer *w, stitch_diag *d);
void journal_abort(journal_writer *w);

/* A committed journal, mapped and checked. */
typedef struct journal {
  stitch_map map;
  journal_head h;
  uint64_t records;
} journal;

int journal_open(const char *path, journal *j, stitch_diag *d);
void journal_close(journal *j);
/* Writes every record's new (redo) or old (undo) bytes into the file
 * mapping BASE of SIZE bytes. With LIMIT > 0, stops with STITCH_EIO after
 * LIMIT records (the crash-test hook). */
int journal_replay(const journal *j, uint8_t *base, uint64_t size, int redo,
                   uint64_t limit, stitch_diag *d);

#endif
