/* fileio.c: see fileio.h. POSIX only. */
#define _GNU_SOURCE
#include "common/fileio.h"

#include "common/diag.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int stitch_map_open(const char *path, stitch_map *m, stitch_diag *d) {
  m->data = NULL;
  m->len = 0;
  /* O_NONBLOCK: opening a FIFO must not wait for a writer; anything but a
   * regular file is refused right after. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  RETURN_IF(fd < 0, d, errno == ENOENT ? STITCH_ENOTFOUND : STITCH_EIO,
            "%s: %s", path, strerror(errno));
  struct stat st;
  int e = fstat(fd, &st) != 0 ? errno : 0;
  if (e != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return stitch_diag_set(d, STITCH_EIO, "%s: %s", path,
                           e ? strerror(e)
                           : S_ISDIR(st.st_mode) ? "is a directory"
                                                 : "not a regular file");
  }
  if (st.st_size > 0) {
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      e = errno;
      close(fd);
      return stitch_diag_set(d, STITCH_EIO, "%s: mmap: %s", path, strerror(e));
    }
    m->data = p;
    m->len = (size_t)st.st_size;
  }
  close(fd);
  return 0;
}

void stitch_map_close(stitch_map *m) {
  if (m->data != NULL)
    munmap(m->data, m->len);
  m->data = NULL;
  m->len = 0;
}

int stitch_tmpfile_open(stitch_tmpfile *t, const char *path, stitch_diag *d) {
  t->fd = -1;
  t->path = strdup(path);
  t->tmp_path = NULL;
  if (t->path == NULL)
    return stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  size_t n = strlen(path) + 48;
  t->tmp_path = malloc(n);
  if (t->tmp_path == NULL) {
    stitch_tmpfile_abort(t);
    return stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  }
  /* Same directory as the target, so rename() is atomic. The pid in the
   * name lets stitch_tmp_sweep tell a temporary whose writer was killed
   * from one still being written. */
  snprintf(t->tmp_path, n, "%s.tmp.%ld.XXXXXX", path, (long)getpid());
  t->fd = mkostemp(t->tmp_path, O_CLOEXEC);
  if (t->fd < 0) {
    int e = errno;
    free(t->tmp_path);
    t->tmp_path = NULL;
    stitch_tmpfile_abort(t);
    return stitch_diag_set(d, STITCH_EIO, "%s: cannot create: %s", path,
                           strerror(e));
  }
  fchmod(t->fd, 0644);
  return 0;
}

int stitch_tmpfile_write(stitch_tmpfile *t, const void *buf, size_t len,
                         stitch_diag *d) {
  const uint8_t *p = buf;
  while (len > 0) {
    ssize_t w = write(t->fd, p, len);
    if (w < 0 && errno == EINTR)
      continue;
    RETURN_IF(w <= 0, d, STITCH_EIO, "%s: write: %s", t->path,
              w < 0 ? strerror(errno) : "no progress");
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

int stitch_fsync_dir_of(const char *path) {
  /* On the stack: a commit calls this after its rename, where running out
   * of memory would report a failure for a file already in place. */
  char copy[PATH_MAX];
  size_t n = strlen(path);
  if (n >= sizeof(copy)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(copy, path, n + 1);
  int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

int stitch_tmpfile_commit(stitch_tmpfile *t, stitch_diag *d) {
  if (fsync(t->fd) != 0) {
    int e = errno;
    stitch_tmpfile_abort(t);
    return stitch_diag_set(d, STITCH_EIO, "fsync: %s", strerror(e));
  }
  close(t->fd);
  t->fd = -1;
  if (rename(t->tmp_path, t->path) != 0) {
    int e = errno;
    stitch_tmpfile_abort(t);
    return stitch_diag_set(d, STITCH_EIO, "rename: %s", strerror(e));
  }
  int rc = stitch_fsync_dir_of(t->path);
  free(t->tmp_path);
  free(t->path);
  t->tmp_path = t->path = NULL;
  RETURN_IF(rc != 0, d, STITCH_EIO, "fsync of directory: %s", strerror(errno));
  return 0;
}

int stitch_tmpfile_commit_unsynced(stitch_tmpfile *t, stitch_diag *d) {
  int rc = close(t->fd);
  t->fd = -1;
  if (rc != 0 || rename(t->tmp_path, t->path) != 0) {
    int e = errno;
    stitch_tmpfile_abort(t);
    return stitch_diag_set(d, STITCH_EIO, "%s: %s", rc ? "close" : "rename",
                           strerror(e));
  }
  free(t->tmp_path);
  free(t->path);
  t->tmp_path = t->path = NULL;
  return 0;
}

void stitch_tmpfile_abort(stitch_tmpfile *t) {
  if (t->fd >= 0)
    close(t->fd);
  t->fd = -1;
  if (t->tmp_path != NULL)
    unlink(t->tmp_path);
  free(t->tmp_path);
  free(t->path);
  t->tmp_path = t->path = NULL;
}

/* The whole file at once, committed one way or the other. */
static int write_whole(const char *path, const void *buf, size_t len,
                       int synced, stitch_diag *d) {
  stitch_tmpfile t;
  CHECK_RC(stitch_tmpfile_open(&t, path, d));
  int rc = stitch_tmpfile_write(&t, buf, len, d);
  if (rc != 0) {
    stitch_tmpfile_abort(&t);
    return rc;
  }
  return synced ? stitch_tmpfile_commit(&t, d)
                : stitch_tmpfile_commit_unsynced(&t, d);
}

int stitch_write_file(const char *path, const void *buf, size_t len,
                      stitch_diag *d) {
  return write_whole(path, buf, len, 1, d);
}

int stitch_write_file_unsynced(const char *path, const void *buf, size_t len,
                               stitch_diag *d) {
  return write_whole(path, buf, len, 0, d);
}

int stitch_syncfs(const char *dir, stitch_diag *d) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  RETURN_IF(fd < 0, d, STITCH_EIO, "%s: %s", dir, strerror(errno));
  int rc = syncfs(fd);
  int e = errno;
  close(fd);
  RETURN_IF(rc != 0, d, STITCH_EIO, "%s: syncfs: %s", dir, strerror(e));
  return 0;
}

int stitch_mkdir(const char *path, stitch_diag *d) {
  if (mkdir(path, 0755) == 0 || errno == EEXIST) {
    struct stat st;
    RETURN_IF(stat(path, &st) != 0 || !S_ISDIR(st.st_mode), d, STITCH_EIO,
              "%s: not a directory", path);
    return 0;
  }
  return stitch_diag_set(d, STITCH_EIO, "mkdir %s: %s", path, strerror(errno));
}

int stitch_unlink_durable(const char *path, stitch_diag *d) {
  if (unlink(path) != 0 && errno != ENOENT)
    return stitch_diag_set(d, STITCH_EIO, "unlink %s: %s", path,
                           strerror(errno));
  RETURN_IF(stitch_fsync_dir_of(path) != 0, d, STITCH_EIO,
            "fsync of the directory of %s: %s", path, strerror(errno));
  return 0;
}

/* NAME is BASE".tmp.<pid>.XXXXXX"; *pid gets the pid. */
static int tmp_name_pid(const char *name, const char *base, size_t blen,
                        long *pid) {
  if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".tmp.", 5) != 0)
    return 0;
  const char *p = name + blen + 5;
  char *end;
  errno = 0;
  long v = strtol(p, &end, 10);
  if (end == p || *p == '-' || *p == '+' || errno != 0 || v <= 0 ||
      *end != '.' || strlen(end + 1) != 6)
    return 0;
  for (const char *c = end + 1; *c; c++)
    if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
          (*c >= 'A' && *c <= 'Z')))
      return 0;
  *pid = v;
  return 1;
}

int stitch_tmp_sweep(const char *path, unsigned *removed, stitch_diag *d) {
  char *dcopy = strdup(path), *bcopy = strdup(path);
  int rc = dcopy && bcopy ? 0 : stitch_diag_set(d, STITCH_ENOMEM,
                                                "out of memory");
  const char *dir = rc == 0 ? dirname(dcopy) : NULL;
  const char *base = rc == 0 ? basename(bcopy) : NULL;
  size_t blen = base ? strlen(base) : 0;
  DIR *dh = rc == 0 ? opendir(dir) : NULL;
  /* No directory: no temporaries either (the caller reports the path). */
  unsigned n = 0;
  for (struct dirent *e; dh != NULL && rc == 0 && (e = readdir(dh)) != NULL;) {
    long pid;
    if (!tmp_name_pid(e->d_name, base, blen, &pid))
      continue;
    /* Only a writer that is gone: kill(pid, 0) fails with ESRCH. EPERM is
     * a live process of another user; our own pid may be writing it now.
     * A reused pid keeps a stale file until that process ends too. */
    if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
      continue;
    char full[4096];
    if (snprintf(full, sizeof(full), "%s/%s", dir, e->d_name) >=
        (int)sizeof(full))
      continue;
    if (unlink(full) == 0)
      n++;
    else if (errno != ENOENT) /* another sweeper took it first: fine */
      rc = stitch_diag_set(d, STITCH_EIO, "unlink %s: %s", full,
                           strerror(errno));
  }
  if (dh != NULL)
    closedir(dh);
  free(dcopy);
  free(bcopy);
  if (removed != NULL)
    *removed = n;
  return rc;
}
