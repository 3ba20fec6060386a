/* fileio.h: read-only mappings and crash-safe file creation.
 *
 * A new file is written to a temporary name in its final directory, fsynced,
 * renamed over the final name and the directory fsynced, so a reader sees
 * either nothing or the whole file, never a prefix, even after a power
 * loss. The unsynced variants skip the fsyncs for files whose bytes their
 * readers check, made durable together by one stitch_syncfs. */
#ifndef STITCH_COMMON_FILEIO_H
#define STITCH_COMMON_FILEIO_H

#include "stitch/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct stitch_map {
  uint8_t *data; /* NULL for an empty file */
  size_t len;
} stitch_map;

int stitch_map_open(const char *path, stitch_map *m, stitch_diag *d);
void stitch_map_close(stitch_map *m);

typedef struct stitch_tmpfile {
  int fd;          /* -1 when closed */
  char *path;      /* final path, owned */
  char *tmp_path;  /* temporary path, owned */
} stitch_tmpfile;

int stitch_tmpfile_open(stitch_tmpfile *t, const char *path, stitch_diag *d);
/* Writes all of buf, retrying short writes. */
int stitch_tmpfile_write(stitch_tmpfile *t, const void *buf, size_t len,
                         stitch_diag *d);
/* fsync, close, rename, fsync the directory. Frees t's strings. */
int stitch_tmpfile_commit(stitch_tmpfile *t, stitch_diag *d);
/* Close and rename, without either fsync: while the system runs a reader
 * sees nothing or the whole file, but after a power loss the file may be
 * empty or short. For files whose readers check their bytes (a chunk is
 * named by its hash), made durable together later (stitch_syncfs). */
int stitch_tmpfile_commit_unsynced(stitch_tmpfile *t, stitch_diag *d);
/* Closes and unlinks the temporary; safe to call twice. */
void stitch_tmpfile_abort(stitch_tmpfile *t);

/* The whole file at once: temporary, fsync, rename, fsync of the directory. */
int stitch_write_file(const char *path, const void *buf, size_t len,
                      stitch_diag *d);
/* The same, committed with stitch_tmpfile_commit_unsynced. */
int stitch_write_file_unsynced(const char *path, const void *buf, size_t len,
                               stitch_diag *d);
/* syncfs(2) of the filesystem holding DIR: every file written there so far
 * (the unsynced ones above included) and their renames made durable at
 * once, one journal commit where an fsync a file costs one each. */
int stitch_syncfs(const char *dir, stitch_diag *d);
/* mkdir that accepts an existing directory. */
int stitch_mkdir(const char *path, stitch_diag *d);
/* unlink (a missing file is fine), then fsync the directory. */
int stitch_unlink_durable(const char *path, stitch_diag *d);
int stitch_fsync_dir_of(const char *path);

/* Temporaries are named PATH.tmp.<pid>.XXXXXX (stitch_tmpfile_open). This
 * removes the ones of PATH whose writing process is gone: what a kill -9
 * left. A temporary of a live process (this one included) stays; so does
 * one without a pid in its name (older releases), which cannot be told
 * apart from a live one. *removed (may be NULL) counts the files removed. */
int stitch_tmp_sweep(const char *path, unsigned *removed, stitch_diag *d);

#endif
