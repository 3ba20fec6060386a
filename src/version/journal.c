/* journal.c: the weights file's state record and apply journal. */
#define _GNU_SOURCE
#include "version/journal.h"

#include "common/diag.h"
#include "common/fileio.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JOURNAL_FLUSH (4u << 20)
#define JOURNAL_MAX_BLOCK (1ull << 32)

char *weights_side_path(const char *path, const char *suffix) {
  size_t a = strlen(path), b = strlen(suffix);
  char *p = malloc(a + b + 1);
  if (p != NULL) {
    memcpy(p, path, a);
    memcpy(p + a, suffix, b + 1);
  }
  return p;
}

/* ---- State ------------------------------------------------------------ */

static void hex32(const uint8_t *b, char out[65]) {
  sodium_bin2hex(out, 65, b, 32);
}

static int unhex32(const char *s, uint8_t *out) {
  size_t n = 0;
  return s != NULL && strlen(s) == 64 &&
                 sodium_hex2bin(out, 32, s, 64, NULL, &n, NULL) == 0 &&
                 n == 32
             ? 0
             : -1;
}

/* What identifies the file's bytes cheaply: a change to any of these means
 * someone other than Stitch wrote the weights (as git's index does). */
typedef struct fstamp {
  uint64_t size, ino;
  int64_t mtime_ns;
} fstamp;

static int stamp_of(const char *path, fstamp *s) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return -1;
  s->size = (uint64_t)sb.st_size;
  s->ino = (uint64_t)sb.st_ino;
  s->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
  return 0;
}

int wstate_write(const char *path, const stitch_wstate *st, stitch_diag *d) {
  fstamp fs;
  RETURN_IF(stamp_of(path, &fs) != 0, d, STITCH_EIO, "%s: %s", path,
            strerror(errno));
  char sw[65], id[65], view[65];
  hex32(st->swarm.b, sw);
  hex32(st->id.b, id);
  hex32(st->view.b, view);
  char text[640];
  int n = snprintf(text, sizeof(text),
                   "{\"format\": 1, \"swarm\": \"%s\", \"version\": %" PRIu64
                   ", \"id\": \"%s\", \"view\": \"%s\", \"size\": %" PRIu64
                   ", \"ino\": %" PRIu64 ", \"mtime_ns\": %" PRId64 "}\n",
                   sw, st->version, id, view, fs.size, fs.ino, fs.mtime_ns);
  char *sp = weights_side_path(path, ".stitch-state");
  RETURN_IF(sp == NULL, d, STITCH_ENOMEM, "out of memory");
  int rc = stitch_write_file(sp, text, (size_t)n, d);
  free(sp);
  return rc;
}

int stitch_weights_state(const char *path, stitch_wstate *st, stitch_diag *d) {
  memset(st, 0, sizeof(*st));
  char *sp = weights_side_path(path, ".stitch-state");
  RETURN_IF(sp == NULL, d, STITCH_ENOMEM, "out of memory");
  json_error_t err;
  json_t *j = json_load_file(sp, JSON_REJECT_DUPLICATES, &err);
  if (j == NULL) {
    int missing = access(sp, F_OK) != 0 && errno == ENOENT;
    int rc = stitch_diag_set(d, missing ? STITCH_ENOTFOUND : STITCH_EFORMAT,
                             "%s: %s", sp, missing ? "no state" : err.text);
    free(sp);
    return rc;
  }
  json_t *ver = json_object_get(j, "version");
  int ok = json_is_object(j) && json_is_integer(ver) &&
           json_integer_value(ver) >= 0 &&
           json_integer_value(json_object_get(j, "format")) == 1 &&
           unhex32(json_string_value(json_object_get(j, "swarm")),
                   st->swarm.b) == 0 &&
           unhex32(json_string_value(json_object_get(j, "id")), st->id.b) ==
               0 &&
           unhex32(json_string_value(json_object_get(j, "view")),
                   st->view.b) == 0;
  if (ok) {
    st->version = (uint64_t)json_integer_value(ver);
    fstamp now;
    st->stale =
        stamp_of(path, &now) != 0 ||
        (uint64_t)json_integer_value(json_object_get(j, "size")) != now.size ||
        (uint64_t)json_integer_value(json_object_get(j, "ino")) != now.ino ||
        json_integer_value(json_object_get(j, "mtime_ns")) != now.mtime_ns;
  }
  json_decref(j);
  int rc = ok ? 0 : stitch_diag_set(d, STITCH_EFORMAT, "%s: malformed", sp);
  free(sp);
  return rc;
}

/* ---- Writing a journal ------------------------------------------------ */

static void put_head(uint8_t *p, const journal_head *h) {
  memcpy(p, JOURNAL_MAGIC, 8);
  put_le64(p + 8, JOURNAL_FORMAT);
  put_le64(p + 16, (uint64_t)h->kind);
  memcpy(p + 24, h->swarm.b, 32);
  put_le64(p + 56, h->from_version);
  memcpy(p + 64, h->from_id.b, 32);
  memcpy(p + 96, h->from_view.b, 32);
  put_le64(p + 128, h->to_version);
  memcpy(p + 136, h->to_id.b, 32);
  memcpy(p + 168, h->to_view.b, 32);
  put_le64(p + 200, h->file_size);
  memset(p + 208, 0, 16);
}

static void get_head(const uint8_t *p, journal_head *h) {
  h->kind = (int)le64(p + 16);
  memcpy(h->swarm.b, p + 24, 32);
  h->from_version = le64(p + 56);
  memcpy(h->from_id.b, p + 64, 32);
  memcpy(h->from_view.b, p + 96, 32);
  h->to_version = le64(p + 128);
  memcpy(h->to_id.b, p + 136, 32);
  memcpy(h->to_view.b, p + 168, 32);
  h->file_size = le64(p + 200);
}

static int flush(journal_writer *w, stitch_diag *d) {
  if (w->buf.len == 0)
    return 0;
  XXH3_64bits_update(w->xx, w->buf.p, w->buf.len);
  CHECK_RC(stitch_tmpfile_write(&w->tf, w->buf.p, w->buf.len, d));
  w->bytes += w->buf.len;
  w->buf.len = 0;
  return 0;
}

int journal_begin(journal_writer *w, const char *path, const journal_head *h,
                  stitch_diag *d) {
  memset(w, 0, sizeof(*w));
  w->tf.fd = -1;
  w->buf.max = 2 * JOURNAL_FLUSH + (2ull << 30);
  w->xx = XXH3_createState();
  RETURN_IF(w->xx == NULL, d, STITCH_ENOMEM, "out of memory");
  XXH3_64bits_reset(w->xx);
  int rc = stitch_tmpfile_open(&w->tf, path, d);
  if (rc != 0) {
    XXH3_freeState(w->xx);
    w->xx = NULL;
    return rc;
  }
  uint8_t head[JOURNAL_HEADER_BYTES];
  put_head(head, h);
  if ((rc = dbuf_put(&w->buf, head, sizeof(head))) != 0) {
    journal_abort(w); /* callers abort only a journal that began */
    rc = stitch_diag_set(d, rc, "journal: out of memory");
  }
  return rc;
}

/* Indices of the W-byte elements that differ, into IX (capacity LEN / W).
 * Compares eight bytes at a time and looks inside only the words that
 * differ: at RL densities nearly all of them are equal. */
static size_t diff_elems(const uint8_t *old, const uint8_t *new_, size_t len,
                         unsigned w, uint32_t *ix) {
  size_t n = 0, i = 0;
  if (8 % w == 0)
    for (; i + 8 <= len; i += 8) {
      uint64_t a, b;
      memcpy(&a, old + i, 8);
      memcpy(&b, new_ + i, 8);
      if (a == b)
        continue;
      for (size_t k = i; k < i + 8; k += w)
        if (memcmp(old + k, new_ + k, w) != 0)
          ix[n++] = (uint32_t)(k / w);
    }
  for (; i < len; i += w)
    if (memcmp(old + i, new_ + i, w) != 0)
      ix[n++] = (uint32_t)(i / w);
  return n;
}

int journal_add(journal_writer *w, uint64_t file_off, const uint8_t *old,
                const uint8_t *new_, size_t len, unsigned width,
                stitch_diag *d) {
  RETURN_IF(len >= JOURNAL_MAX_BLOCK || width == 0 || len % width != 0, d,
            STITCH_EINVAL, "journal: bad run of %zu bytes", len);
  size_t syms = len / width;
  if (syms > w->ix_cap) {
    uint32_t *nx = realloc(w->ix, syms * sizeof(*nx));
    RETURN_IF(nx == NULL, d, STITCH_ENOMEM, "journal: out of memory");
    w->ix = nx;
    w->ix_cap = syms;
  }
  size_t n = diff_elems(old, new_, len, width, w->ix);
  if (n == 0)
    return 0;
  int sparse = n * (4 + 2 * (size_t)width) < 2 * len;
  uint8_t rec[21];
  put_le64(rec, file_off);
  put_le64(rec + 8, len);
  rec[16] = sparse ? JOURNAL_SPARSE : JOURNAL_FULL;
  rec[17] = (uint8_t)width;
  rec[18] = rec[19] = rec[20] = 0;
  size_t need = sizeof(rec) + 8 + (sparse ? n * (4 + 2 * (size_t)width)
                                          : 2 * len);
  int rc = dbuf_reserve(&w->buf, need);
  RETURN_IF(rc != 0, d, rc, "journal: out of memory");
  dbuf_put(&w->buf, rec, sizeof(rec));
  dbuf_u64(&w->buf, sparse ? n : 0);
  if (!sparse) {
    dbuf_put(&w->buf, old, len);
    dbuf_put(&w->buf, new_, len);
  } else {
    /* Reserved above: write straight into the buffer. */
    uint8_t *p = w->buf.p + w->buf.len;
    for (size_t k = 0; k < n; k++, p += 4)
      for (int b = 0; b < 4; b++)
        p[b] = (uint8_t)(w->ix[k] >> (8 * b));
    for (size_t k = 0; k < n; k++, p += width)
      memcpy(p, old + (size_t)w->ix[k] * width, width);
    for (size_t k = 0; k < n; k++, p += width)
      memcpy(p, new_ + (size_t)w->ix[k] * width, width);
    w->buf.len = (size_t)(p - w->buf.p);
  }
  w->records++;
  return w->buf.len >= JOURNAL_FLUSH ? flush(w, d) : 0;
}

int journal_commit(journal_writer *w, stitch_diag *d) {
  int rc = flush(w, d);
  if (rc == 0) {
    uint8_t tr[JOURNAL_TRAILER_BYTES];
    put_le64(tr, w->records);
    XXH3_64bits_update(w->xx, tr, 8);
    put_le64(tr + 8, XXH3_64bits_digest(w->xx));
    memcpy(tr + 16, JOURNAL_END, 8);
    rc = stitch_tmpfile_write(&w->tf, tr, sizeof(tr), d);
  }
  if (rc == 0)
    rc = stitch_tmpfile_commit(&w->tf, d);
  journal_abort(w);
  return rc;
}

void journal_abort(journal_writer *w) {
  stitch_tmpfile_abort(&w->tf);
  free(w->ix);
  w->ix = NULL;
  w->ix_cap = 0;
  if (w->xx != NULL)
    XXH3_freeState(w->xx);
  w->xx = NULL;
  dbuf_free(&w->buf);
}

/* ---- Reading and replaying -------------------------------------------- */

int journal_open(const char *path, journal *j, stitch_diag *d) {
  memset(j, 0, sizeof(*j));
  CHECK_RC(stitch_map_open(path, &j->map, d));
  const uint8_t *p = j->map.data;
  size_t n = j->map.len;
  int rc = 0;
  if (n < JOURNAL_HEADER_BYTES + JOURNAL_TRAILER_BYTES ||
      memcmp(p, JOURNAL_MAGIC, 8) != 0 ||
      memcmp(p + n - 8, JOURNAL_END, 8) != 0)
    rc = stitch_diag_set(d, STITCH_EFORMAT, "%s: not a complete journal",
                         path);
  else if (XXH3_64bits(p, n - 16) != le64(p + n - 16))
    rc = stitch_diag_set(d, STITCH_ECHECKSUM, "%s: checksum mismatch", path);
  else if (le64(p + 8) != JOURNAL_FORMAT)
    rc = stitch_diag_set(d, STITCH_EVERSION, "%s: journal format %" PRIu64,
                         path, le64(p + 8));
  if (rc != 0) {
    stitch_map_close(&j->map);
    return rc;
  }
  get_head(p, &j->h);
  j->records = le64(p + n - JOURNAL_TRAILER_BYTES);
  return 0;
}

void journal_close(journal *j) { stitch_map_close(&j->map); }

int journal_replay(const journal *j, uint8_t *base, uint64_t size, int redo,
                   uint64_t limit, stitch_diag *d) {
  rd r = {j->map.data + JOURNAL_HEADER_BYTES, 0, 0};
  r.len = j->map.len - JOURNAL_HEADER_BYTES - JOURNAL_TRAILER_BYTES;
  for (uint64_t k = 0; k < j->records; k++) {
    const uint8_t *rec, *nb;
    uint64_t n;
    RETURN_IF(limit != 0 && k == limit, d, STITCH_EIO,
              "journal: stopped after %" PRIu64 " records (test hook)", k);
    RETURN_IF(rd_bytes(&r, 21, &rec) != 0 || rd_u64(&r, &n) != 0, d,
              STITCH_EFORMAT, "journal: record %" PRIu64 " truncated", k);
    uint64_t off = le64(rec), len = le64(rec + 8);
    unsigned w = rec[17];
    RETURN_IF(off > size || len > size - off || w == 0 || len % w != 0 ||
                  (rec[16] == JOURNAL_SPARSE && n > len / w),
              d, STITCH_EFORMAT,
              "journal: record %" PRIu64 " is outside the file", k);
    if (rec[16] == JOURNAL_FULL) {
      const uint8_t *ob;
      RETURN_IF(rd_bytes(&r, len, &ob) != 0 || rd_bytes(&r, len, &nb) != 0, d,
                STITCH_EFORMAT, "journal: record %" PRIu64 " truncated", k);
      memcpy(base + off, redo ? nb : ob, len);
      continue;
    }
    const uint8_t *ix, *ob;
    RETURN_IF(rd_bytes(&r, 4 * n, &ix) != 0 || rd_bytes(&r, n * w, &ob) != 0 ||
                  rd_bytes(&r, n * w, &nb) != 0,
              d, STITCH_EFORMAT, "journal: record %" PRIu64 " truncated", k);
    const uint8_t *src = redo ? nb : ob;
    for (uint64_t i = 0; i < n; i++) {
      uint64_t at = (uint64_t)ix[4 * i] | (uint64_t)ix[4 * i + 1] << 8 |
                    (uint64_t)ix[4 * i + 2] << 16 |
                    (uint64_t)ix[4 * i + 3] << 24;
      RETURN_IF(at >= len / w, d, STITCH_EFORMAT,
                "journal: record %" PRIu64 " position out of range", k);
      memcpy(base + off + at * w, src + i * w, w);
    }
  }
  return 0;
}
