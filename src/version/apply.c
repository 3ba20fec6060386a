/* apply.c: applying a version to a weights file as one transaction, and
 * recovering from a crash in the middle of one (proto/store.md).
 *
 * In place (a delta onto a file whose layout already matches):
 *   1. decode every changed block into a buffer and journal its old and new
 *      bytes; commit the journal (fsync, rename);
 *   2. write the new bytes into the mapped file; msync;
 *   3. check every tensor digest against the manifest; on a mismatch, write
 *      the old bytes back and fail;
 *   4. record the new version in the state file; remove the journal.
 * Rewrite (an anchor, or a layout change): build the new file beside the old
 * one, journal the intent, rename it over, record the state, remove the
 * journal. A crash anywhere leaves either no journal (nothing changed, or
 * everything did and the state says so) or a complete one that
 * stitch_weights_recover uses to settle on exactly one version. */
#define _GNU_SOURCE
#include "stitch/store.h"

#include "common/diag.h"
#include "codec/st_internal.h"
#include "common/fileio.h"
#include "common/parallel.h"
#include "version/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void report(const stitch_apply_opts *o, const char *what, uint64_t done,
                   uint64_t total) {
  if (o != NULL && o->progress != NULL)
    o->progress(o->progress_arg, what, done, total);
}

/* A weights file mapped read-write. */
typedef struct wfile {
  int fd;
  uint8_t *map;
  size_t len;
  stitch_st *st;
} wfile;

static int wfile_open(const char *path, wfile *f, stitch_diag *d) {
  memset(f, 0, sizeof(*f));
  f->fd = open(path, O_RDWR | O_CLOEXEC);
  RETURN_IF(f->fd < 0, d, errno == ENOENT ? STITCH_ENOTFOUND : STITCH_EIO,
            "%s: %s", path, strerror(errno));
  struct stat sb;
  int rc = 0;
  if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 8)
    rc = stitch_diag_set(d, STITCH_EFORMAT, "%s: not a weights file", path);
  if (rc == 0) {
    f->len = (size_t)sb.st_size;
    f->map = mmap(NULL, f->len, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
    if (f->map == MAP_FAILED) {
      f->map = NULL;
      rc = stitch_diag_set(d, STITCH_EIO, "%s: mmap: %s", path,
                           strerror(errno));
    }
  }
  if (rc == 0 && (rc = stitch_st_parse(f->map, f->len, &f->st, d)) != 0)
    stitch_diag_prefix(d, rc, path);
  if (rc != 0) {
    if (f->map != NULL)
      munmap(f->map, f->len);
    close(f->fd);
    f->fd = -1;
    f->map = NULL;
  }
  return rc;
}

static int wfile_sync(wfile *f, const char *path, stitch_diag *d) {
  RETURN_IF(msync(f->map, f->len, MS_SYNC) != 0, d, STITCH_EIO,
            "%s: msync: %s", path, strerror(errno));
  return 0;
}

static void wfile_close(wfile *f) {
  stitch_st_free(f->st);
  if (f->map != NULL)
    munmap(f->map, f->len);
  if (f->fd >= 0)
    close(f->fd);
  memset(f, 0, sizeof(*f));
  f->fd = -1;
}

/* Same tensors, in the same order and layout. */
static int layout_matches(const stitch_st *st, const stitch_manifest *m) {
  if (stitch_st_count(st) != m->n_tensors)
    return 0;
  for (uint64_t i = 0; i < m->n_tensors; i++) {
    const stitch_tensor *t = stitch_st_tensor(st, i);
    const stitch_mtensor *mt = &m->tensors[i];
    if (strcmp(t->name, mt->name) != 0 || t->dtype != mt->dtype ||
        t->ndim != mt->ndim || t->nbytes != mt->nbytes)
      return 0;
    for (int k = 0; k < t->ndim; k++)
      if (t->shape[k] != mt->shape[k])
        return 0;
  }
  return 1;
}

/* Checks every tensor's bytes (data[i], in manifest order) against the
 * manifest's digests, and the view digest they make. */
/* The header bytes (between the length and the data) that version M needs
 * in the file F, padded with spaces to the length F has: *out is malloc'd,
 * or NULL when F's header already is that. Fails with STITCH_ELIMIT when
 * the new header does not fit (then the file is rewritten). */
static int new_header(const wfile *f, const stitch_manifest *m, uint8_t **out,
                      size_t *len, stitch_diag *d) {
  *out = NULL;
  size_t n = (size_t)m->n_tensors;
  size_t hlen = (size_t)le64(f->map);
  stitch_tensor *t = calloc(n ? n : 1, sizeof(*t));
  RETURN_IF(t == NULL, d, STITCH_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    t[i] = *stitch_st_tensor(f->st, i);
    t[i].name = m->tensors[i].name;
  }
  char *json = st_header_json(m->meta, n, t);
  free(t);
  RETURN_IF(json == NULL, d, STITCH_ENOMEM, "cannot build the header");
  size_t jl = strlen(json);
  int rc = 0;
  if (jl > hlen) {
    rc = STITCH_ELIMIT; /* no message: the caller rewrites the file */
  } else {
    uint8_t *h = malloc(hlen ? hlen : 1);
    if (h == NULL) {
      rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
    } else {
      memcpy(h, json, jl);
      memset(h + jl, ' ', hlen - jl);
      if (memcmp(h, f->map + 8, hlen) == 0)
        free(h);
      else
        *out = h;
      *len = hlen;
    }
  }
  free(json);
  return rc;
}

static int verify_tensors(const stitch_manifest *m, uint8_t *const *data,
                          unsigned threads, stitch_diag *d) {
  size_t n = (size_t)m->n_tensors;
  stitch_tensor *t = calloc(n ? n : 1, sizeof(*t));
  const stitch_tensor **tp = calloc(n ? n : 1, sizeof(*tp));
  const char **names = calloc(n ? n : 1, sizeof(*names));
  stitch_digest *dg = calloc(n ? n : 1, sizeof(*dg));
  int rc = t && tp && names && dg ? 0 : STITCH_ENOMEM;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    const stitch_mtensor *mt = &m->tensors[i];
    t[i].name = names[i] = mt->name;
    t[i].dtype = mt->dtype;
    t[i].ndim = mt->ndim;
    memcpy(t[i].shape, mt->shape, sizeof(t[i].shape));
    t[i].nbytes = mt->nbytes;
    t[i].data = data[i];
    tp[i] = &t[i];
  }
  if (rc == 0)
    rc = stitch_tensor_digests(n, tp, threads, dg);
  for (size_t i = 0; rc == 0 && i < n; i++)
    if (memcmp(dg[i].b, m->tensors[i].digest.b, 32) != 0)
      rc = stitch_diag_set(d, STITCH_EDIGEST,
                           "tensor '%s' does not match version %" PRIu64
                           " after apply",
                           m->tensors[i].name, m->version);
  stitch_digest view;
  if (rc == 0 && (rc = stitch_view_digest_from(n, names, dg, &view)) == 0 &&
      memcmp(view.b, m->view.b, 32) != 0)
    rc = stitch_diag_set(d, STITCH_EDIGEST,
                         "the view digest does not match version %" PRIu64,
                         m->version);
  if (rc == STITCH_ENOMEM)
    stitch_diag_set(d, rc, "out of memory");
  free(t);
  free(tp);
  free(names);
  free(dg);
  return rc;
}

static void head_for(journal_head *h, int kind, const stitch_wstate *from,
                     const stitch_vref *vr, uint64_t file_size) {
  memset(h, 0, sizeof(*h));
  h->kind = kind;
  h->swarm = vr->m->swarm;
  if (from != NULL) {
    h->from_version = from->version;
    h->from_id = from->id;
    h->from_view = from->view;
  }
  h->to_version = vr->m->version;
  h->to_id = vr->id;
  h->to_view = vr->m->view;
  h->file_size = file_size;
}

static int record_state(const char *path, const stitch_vref *vr,
                        stitch_diag *d) {
  stitch_wstate st = {vr->m->swarm, vr->m->version, vr->id, vr->m->view, 0};
  return wstate_write(path, &st, d);
}

static size_t elem_width(stitch_dtype dt) {
  size_t w = stitch_dtype_size(dt);
  return w ? w : 1;
}

/* A batch of blocks decoded in parallel into copies, journaled in order. */
typedef struct decode_batch {
  const stitch_patch *p;
  const wfile *f;
  uint64_t first;   /* the batch's first block */
  uint8_t **buf;    /* one copy per block of the batch */
} decode_batch;

static int decode_one(void *ctx, size_t item, uint8_t *scratch,
                      stitch_diag *d) {
  decode_batch *bt = ctx;
  stitch_patch_block b;
  stitch_patch_block_at(bt->p, bt->first + item, &b);
  const stitch_tensor *t = stitch_st_tensor(bt->f->st, (size_t)b.tensor);
  memcpy(bt->buf[item], t->data + b.byte_off, (size_t)b.byte_len);
  return stitch_patch_decode_block(bt->p, bt->first + item, bt->buf[item],
                                   scratch, d);
}

/* Pass 1 of an in-place apply: the journal of every changed block. Blocks
 * decode on all threads, a batch at a time (memory: two blocks per
 * thread); the journal is written in block order. */
static int write_journal(const char *jpath, wfile *f, const stitch_vref *vr,
                         const stitch_patch *p, const journal_head *h,
                         const uint8_t *hdr, size_t hdr_len,
                         const stitch_apply_opts *o, stitch_diag *d) {
  uint64_t nb = stitch_patch_block_count(p);
  size_t buf_len = 1;
  for (uint64_t k = 0; k < nb; k++) {
    stitch_patch_block b;
    stitch_patch_block_at(p, k, &b);
    buf_len = b.byte_len > buf_len ? (size_t)b.byte_len : buf_len;
  }
  unsigned threads = stitch_parallel_threads(o ? o->threads : 0, (size_t)nb);
  size_t batch = 2 * (size_t)threads;
  uint8_t **bufs = calloc(batch, sizeof(*bufs));
  int rc = bufs ? 0 : STITCH_ENOMEM;
  for (size_t i = 0; rc == 0 && i < batch; i++)
    if ((bufs[i] = malloc(buf_len)) == NULL)
      rc = STITCH_ENOMEM;
  journal_writer w;
  rc = rc == 0 ? journal_begin(&w, jpath, h, d)
               : stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  int begun = rc == 0;
  if (rc == 0 && hdr != NULL)
    rc = journal_add(&w, 8, f->map + 8, hdr, hdr_len, 1, d);
  for (uint64_t k = 0; rc == 0 && k < nb; k += batch) {
    size_t n = nb - k < batch ? (size_t)(nb - k) : batch;
    decode_batch bt = {p, f, k, bufs};
    rc = stitch_parallel_diag(n, threads, stitch_patch_scratch_bytes(p),
                              decode_one, &bt, d);
    for (size_t i = 0; rc == 0 && i < n; i++) {
      stitch_patch_block b;
      stitch_patch_block_at(p, k + i, &b);
      const uint8_t *old =
          stitch_st_tensor(f->st, (size_t)b.tensor)->data + b.byte_off;
      rc = journal_add(&w, (uint64_t)(old - f->map), old, bufs[i],
                       (size_t)b.byte_len,
                       (unsigned)elem_width(vr->m->tensors[b.tensor].dtype),
                       d);
    }
    report(o, "decode", k + n, nb);
  }
  if (rc == 0)
    rc = journal_commit(&w, d);
  else if (begun)
    journal_abort(&w);
  for (size_t i = 0; bufs != NULL && i < batch; i++)
    free(bufs[i]);
  free(bufs);
  return rc;
}

static int apply_inplace(const char *path, wfile *f, const stitch_wstate *from,
                         const stitch_vref *vr, const stitch_patch *p,
                         const uint8_t *hdr, size_t hdr_len,
                         const stitch_apply_opts *o, stitch_diag *d) {
  char *jpath = weights_side_path(path, ".stitch-journal");
  RETURN_IF(jpath == NULL, d, STITCH_ENOMEM, "out of memory");
  journal_head h;
  head_for(&h, JOURNAL_INPLACE, from, vr, f->len);
  int rc = write_journal(jpath, f, vr, p, &h, hdr, hdr_len, o, d);
  journal j;
  int opened = rc == 0 && (rc = journal_open(jpath, &j, d)) == 0;
  if (rc == 0) {
    rc = journal_replay(&j, f->map, f->len, 1, o ? o->fail_after : 0, d);
    if (rc != 0 && o != NULL && o->fail_after != 0) {
      /* The test hook plays a crash: leave everything as it is. */
      journal_close(&j);
      free(jpath);
      return rc;
    }
  }
  if (rc == 0)
    rc = wfile_sync(f, path, d);
  if (rc == 0) {
    report(o, "verify", 0, 1);
    size_t n = (size_t)vr->m->n_tensors;
    uint8_t **data = calloc(n ? n : 1, sizeof(*data));
    rc = data ? 0 : stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++)
      data[i] = (uint8_t *)stitch_st_tensor(f->st, i)->data;
    if (rc == 0)
      rc = verify_tensors(vr->m, data, o ? o->threads : 0, d);
    free(data);
    if (rc != 0) {
      /* Put the old bytes back; the state never moved. */
      stitch_diag ignore;
      journal_replay(&j, f->map, f->len, 0, 0, &ignore);
      wfile_sync(f, path, &ignore);
      wstate_write(path, from, &ignore); /* the file's new stamp */
      stitch_unlink_durable(jpath, &ignore);
    }
  }
  if (opened)
    journal_close(&j);
  if (rc == 0)
    rc = record_state(path, vr, d);
  if (rc == 0)
    rc = stitch_unlink_durable(jpath, d);
  free(jpath);
  return rc;
}

/* Builds the new file from the base's unchanged tensors and the patch, then
 * renames it over PATH. BASE may be NULL (an anchor onto nothing). */
static int apply_rewrite(const char *path, const stitch_st *base,
                         const stitch_wstate *from, const stitch_vref *vr,
                         size_t obj, const stitch_patch *p,
                         const stitch_apply_opts *o, stitch_diag *d) {
  const stitch_manifest *m = vr->m;
  const stitch_object *ob = &m->objects[obj];
  stitch_st_writer *w;
  CHECK_RC(stitch_st_writer_new(path, &w, d));
  int rc = stitch_st_writer_set_metadata(w, m->meta, d);
  for (uint64_t i = 0; rc == 0 && i < m->n_tensors; i++)
    rc = stitch_st_writer_add(w, m->tensors[i].name, m->tensors[i].dtype,
                              m->tensors[i].ndim, m->tensors[i].shape, d);
  if (rc == 0)
    rc = stitch_st_writer_map(w, d);
  size_t n = (size_t)m->n_tensors;
  uint8_t **data = calloc(n ? n : 1, sizeof(*data));
  uint64_t *sizes = calloc(n ? n : 1, sizeof(*sizes));
  if (rc == 0 && (data == NULL || sizes == NULL))
    rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  for (size_t i = 0; rc == 0 && i < n; i++) {
    const stitch_mtensor *mt = &m->tensors[i];
    data[i] = stitch_st_writer_data(w, i);
    sizes[i] = mt->nbytes;
    if (ob->tflags[i] & 2u) /* NEW: every block is in the patch */
      continue;
    const stitch_tensor *bt = base ? stitch_st_find(base, mt->name) : NULL;
    if (bt == NULL || bt->dtype != mt->dtype || bt->nbytes != mt->nbytes)
      rc = stitch_diag_set(d, STITCH_EBASE,
                           "tensor '%s' is not in the weights with the "
                           "layout version %" PRIu64 " builds on",
                           mt->name, m->version);
    else if (mt->nbytes > 0)
      memcpy(data[i], bt->data, (size_t)mt->nbytes);
  }
  report(o, "decode", 0, 1);
  if (rc == 0)
    rc = stitch_patch_apply(p, data, sizes, o ? o->threads : 0, d);
  report(o, "verify", 0, 1);
  if (rc == 0)
    rc = verify_tensors(m, data, o ? o->threads : 0, d);
  free(data);
  free(sizes);
  char *jpath = weights_side_path(path, ".stitch-journal");
  if (rc == 0 && jpath == NULL)
    rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  if (rc == 0) {
    journal_writer jw;
    journal_head h;
    head_for(&h, JOURNAL_REWRITE, from, vr, 0);
    rc = journal_begin(&jw, jpath, &h, d);
    if (rc == 0)
      rc = journal_commit(&jw, d);
  }
  if (rc == 0)
    rc = stitch_st_writer_commit(w, d);
  stitch_st_writer_free(w);
  if (rc == 0)
    rc = record_state(path, vr, d);
  if (rc == 0)
    rc = stitch_unlink_durable(jpath, d);
  free(jpath);
  return rc;
}

int stitch_weights_apply(const char *path, const stitch_vref *vr, size_t obj,
                         const stitch_patch *p, const stitch_apply_opts *o,
                         stitch_diag *d) {
  const stitch_manifest *m = vr->m;
  RETURN_IF(obj >= m->n_objects, d, STITCH_EINVAL, "no object %zu", obj);
  RETURN_IF(stitch_patch_missing(p) != 0, d, STITCH_EINVAL,
            "version %" PRIu64 ": %" PRIu64 " chunks are missing", m->version,
            stitch_patch_missing(p));
  const stitch_object *ob = &m->objects[obj];
  CHECK_RC(stitch_weights_recover(path, NULL, d));
  stitch_wstate st;
  stitch_diag sub;
  int rc = stitch_weights_state(path, &st, &sub);
  int have = rc == 0;
  if (rc != 0 && rc != STITCH_ENOTFOUND) {
    if (d != NULL)
      *d = sub;
    return rc;
  }
  if (have && st.stale) {
    /* Changed behind our back: trust the bytes only if they still are the
     * version the state names. */
    stitch_st *cur;
    stitch_digest view;
    CHECK_RC(stitch_st_open(path, &cur, d));
    rc = stitch_view_digest(cur, &view, NULL);
    stitch_st_free(cur);
    CHECK_RC(rc);
    RETURN_IF(memcmp(view.b, st.view.b, 32) != 0, d, STITCH_EBASE,
              "%s was changed outside stitch: it no longer holds version "
              "%" PRIu64 " (a pull identifies it again)",
              path, st.version);
  }
  if (have) {
    RETURN_IF(memcmp(st.swarm.b, m->swarm.b, 32) != 0, d, STITCH_ESWARM,
              "%s holds weights of another swarm", path);
    RETURN_IF(m->version <= st.version, d, STITCH_EROLLBACK,
              "%s already holds version %" PRIu64 "; refusing version %" PRIu64,
              path, st.version, m->version);
  }
  if (ob->kind != STITCH_OBJ_ANCHOR) {
    RETURN_IF(!have, d, STITCH_EBASE,
              "%s holds no version; version %" PRIu64 "'s %s needs %" PRIu64,
              path, m->version, stitch_obj_kind_name(ob->kind),
              ob->base_version);
    RETURN_IF(st.version != ob->base_version ||
                  memcmp(st.id.b, ob->base_id.b, 32) != 0 ||
                  memcmp(st.view.b, ob->base_view.b, 32) != 0,
              d, STITCH_EBASE,
              "%s holds version %" PRIu64 ", but this %s of version %" PRIu64
              " applies to version %" PRIu64,
              path, st.version, stitch_obj_kind_name(ob->kind), m->version,
              ob->base_version);
  }
  wfile f;
  rc = wfile_open(path, &f, &sub);
  if (rc == STITCH_ENOTFOUND && !have)
    return apply_rewrite(path, NULL, NULL, vr, obj, p, o, d);
  if (rc != 0) {
    if (d != NULL)
      *d = sub;
    return rc;
  }
  uint8_t *hdr = NULL;
  size_t hdr_len = 0;
  int inplace = ob->kind != STITCH_OBJ_ANCHOR && layout_matches(f.st, m);
  if (inplace && (rc = new_header(&f, m, &hdr, &hdr_len, d)) != 0) {
    if (rc != STITCH_ELIMIT) {
      wfile_close(&f);
      return rc;
    }
    inplace = 0;
  }
  if (inplace)
    rc = apply_inplace(path, &f, &st, vr, p, hdr, hdr_len, o, d);
  else
    rc = apply_rewrite(path, f.st, have ? &st : NULL, vr, obj, p, o, d);
  free(hdr);
  wfile_close(&f);
  return rc;
}

/* ---- Recovery --------------------------------------------------------- */

static int recover_rewrite(const char *path, const journal *j,
                           const stitch_wstate *st, int have,
                           stitch_diag *d) {
  stitch_st *cur = NULL;
  stitch_digest view;
  int rc = stitch_st_open(path, &cur, d);
  if (rc == 0)
    rc = stitch_view_digest(cur, &view, NULL);
  stitch_st_free(cur);
  if (rc != 0 && j->h.from_version == 0 && access(path, F_OK) != 0)
    return 0; /* the anchor never landed: nothing there, as before */
  CHECK_RC(rc);
  if (memcmp(view.b, j->h.to_view.b, 32) == 0) {
    stitch_wstate ns = {j->h.swarm, j->h.to_version, j->h.to_id, j->h.to_view,
                        0};
    return wstate_write(path, &ns, d);
  }
  RETURN_IF(memcmp(view.b, j->h.from_view.b, 32) != 0 &&
                !(have && memcmp(view.b, st->view.b, 32) == 0),
            d, STITCH_EDIGEST,
            "%s matches neither version %" PRIu64 " nor %" PRIu64
            " of its journal",
            path, j->h.from_version, j->h.to_version);
  return 0;
}

int stitch_weights_sweep(const char *path, unsigned *removed,
                         stitch_diag *d) {
  /* The weights' own temporaries (a rewrite's new file) and those of its
   * state and journal. */
  static const char *const side[] = {"", ".stitch-state", ".stitch-journal"};
  unsigned total = 0;
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < sizeof(side) / sizeof(side[0]); i++) {
    char *p = weights_side_path(path, side[i]);
    unsigned n = 0;
    rc = p != NULL ? stitch_tmp_sweep(p, &n, d)
                   : stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
    free(p);
    total += n;
  }
  if (removed != NULL)
    *removed = total;
  return rc;
}

int stitch_weights_recover(const char *path, int *recovered,
                           stitch_diag *d) {
  if (recovered != NULL)
    *recovered = 0;
  CHECK_RC(stitch_weights_sweep(path, NULL, d));
  char *jpath = weights_side_path(path, ".stitch-journal");
  RETURN_IF(jpath == NULL, d, STITCH_ENOMEM, "out of memory");
  if (access(jpath, F_OK) != 0) {
    free(jpath);
    return 0;
  }
  journal j;
  int rc = journal_open(jpath, &j, d);
  if (rc != 0) {
    free(jpath);
    return rc;
  }
  stitch_wstate st;
  stitch_diag sub;
  int have = stitch_weights_state(path, &st, &sub) == 0;
  int done = have && st.version == j.h.to_version &&
             memcmp(st.id.b, j.h.to_id.b, 32) == 0;
  if (!done && j.h.kind == JOURNAL_INPLACE) {
    wfile f = {.fd = -1};
    if (!have || st.version != j.h.from_version)
      rc = stitch_diag_set(d, STITCH_EFORMAT,
                           "%s: its journal undoes version %" PRIu64
                           " but the state says otherwise",
                           path, j.h.from_version);
    else
      rc = wfile_open(path, &f, d);
    if (rc == 0 && f.len != j.h.file_size)
      rc = stitch_diag_set(d, STITCH_EFORMAT,
                           "%s: size changed since the journal was written",
                           path);
    if (rc == 0)
      rc = journal_replay(&j, f.map, f.len, 0, 0, d);
    if (rc == 0)
      rc = wfile_sync(&f, path, d);
    if (rc == 0)
      rc = wstate_write(path, &st, d); /* the same version, a new stamp */
    if (f.fd >= 0 || f.map != NULL)
      wfile_close(&f);
  } else if (!done) {
    rc = recover_rewrite(path, &j, &st, have, d);
  }
  journal_close(&j);
  if (rc == 0)
    rc = stitch_unlink_durable(jpath, d);
  free(jpath);
  if (rc == 0 && recovered != NULL)
    *recovered = 1;
  return rc;
}
