/* publish.c: make a checkpoint the next version of a store
 * (docs/versions.md, "Publishing").
 *
 * The publisher keeps, under DIR/publisher, the view of the latest version
 * (view-<v>.safetensors, the base of the next delta) and the view of the
 * last anchor (anchor-<a>.safetensors, the base of cumulative deltas).
 * Order of writes, so that a crash at any point is harmless:
 *   1. the new view's copy (an orphan copy is overwritten next time);
 *   2. every chunk;
 *   3. the signed manifest (a manifest above `latest` with its view copy
 *      present is finished on the next run: its files are all durable);
 *   4. `latest`;
 *   5. the old view copy goes, and retention runs. */
#define _GNU_SOURCE
#include "stitch/store.h"

#include "common/diag.h"
#include "common/fileio.h"
#include "version/store_patch.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct built {
  stitch_object obj;
  uint8_t **bufs;
} built;

typedef struct pub {
  const char *dir;
  stitch_store *s;
  const stitch_publish_opts *o;
  const stitch_st *ckpt;
  stitch_digest view;
  built b[STITCH_MAX_OBJECTS];
  size_t nb;
} pub;

static void progress(const pub *p, const char *what, uint64_t done,
                     uint64_t total) {
  if (p->o->progress != NULL)
    p->o->progress(p->o->progress_arg, what, done, total);
}

static void side(char *out, size_t cap, const char *dir, const char *kind,
                 uint64_t v) {
  snprintf(out, cap, "%s/publisher/%s-%020" PRIu64 ".safetensors", dir, kind,
           v);
}

static int has_anchor(const stitch_manifest *m, uint64_t *bytes) {
  for (uint64_t o = 0; o < m->n_objects; o++)
    if (m->objects[o].kind == STITCH_OBJ_ANCHOR) {
      *bytes = m->objects[o].bytes;
      return 1;
    }
  return 0;
}

typedef struct enc_progress {
  const pub *p;
  const char *what;
} enc_progress;

static void on_encode(void *arg, uint64_t done, uint64_t total) {
  enc_progress *e = arg;
  progress(e->p, e->what, done, total);
}

/* Anchor blocks are dense, and a chunk holds whole blocks: blocks of the
 * chunk size in BF16 (2^18 symbols at the default 512 KiB) keep anchor
 * chunks near it, so a joiner can fetch one from many peers at once, and a
 * smaller chunk size makes smaller anchor chunks too. block_log2 is 8 to
 * 24 (proto/delta.md). */
static uint32_t anchor_block_log2(size_t chunk_bytes) {
  size_t target = chunk_bytes ? chunk_bytes : STITCH_CHUNK_DEFAULT;
  uint32_t b = 8;
  while (b < 24 && ((size_t)2 << (b + 1)) <= target)
    b++;
  return b;
}

/* With no chunk size given, the publisher picks one from the object's
 * size (docs/swarm.md "Chunk size from the version's size"): under
 * CHUNK_AUTO_BELOW bytes, the largest power of two from CHUNK_AUTO_MIN up
 * to STITCH_CHUNK_DEFAULT that still cuts BYTES into CHUNK_AUTO_AIM
 * chunks or more. A small version in one chunk spreads a whole chunk's
 * time per hop, down one path; in many, its chunks go down different
 * paths at once, each hop a small chunk's time (docs/simulator.md, issue
 * 36). On a link paced at a share of its uplink a hop is long: 8 KiB
 * chunks took 8 to 13 % off a 115 KB delta's last node against 16 KiB
 * on home links (docs/simulator.md "Small chunks for small versions").
 * From CHUNK_AUTO_BELOW up, STITCH_CHUNK_DEFAULT: a 120 MB anchor in
 * 256 KiB chunks sent 0.07 F back into the seed's region in ctest
 * sim_regions (at most 0.05). */
#define CHUNK_AUTO_MIN (8u << 10)
#define CHUNK_AUTO_AIM 256u
#define CHUNK_AUTO_BELOW (64ull << 20)
static size_t auto_chunk(uint64_t bytes) {
  size_t t = STITCH_CHUNK_DEFAULT;
  while (bytes < CHUNK_AUTO_BELOW && t / 2 >= CHUNK_AUTO_MIN &&
         bytes / t < CHUNK_AUTO_AIM)
    t /= 2;
  return t;
}

/* A delta's blocks are whole in a chunk: a small checkpoint's delta gets
 * blocks small enough to cut it into chunks of auto_chunk's size (at least
 * 256 blocks in the checkpoint, blocks of 2^12 symbols at the least), a
 * large one the encoder's default (2^21). */
static uint32_t delta_block_log2(uint64_t ckpt_bytes) {
  uint64_t symbols = ckpt_bytes / 2;
  uint32_t b = 21;
  while (b > 12 && (symbols >> b) < 256)
    b--;
  return b;
}

/* Encodes BASE -> the checkpoint as one object and cuts it into chunks. */
static int build(pub *p, const stitch_st *base, const stitch_digest *base_view,
                 stitch_obj_kind kind, const stitch_vref *from,
                 stitch_diag *d) {
  enc_progress ep = {p, stitch_obj_kind_name(kind)};
  stitch_delta_opts dopts = {0};
  /* Sparse delta blocks are small at any size and code better long: the
   * encoder's default. */
  size_t chunk = p->o->chunk_bytes;
  uint64_t ck_bytes = stitch_st_file_size(p->ckpt);
  int autosz = chunk == 0;
  if (autosz && kind == STITCH_OBJ_ANCHOR)
    chunk = auto_chunk(ck_bytes);
  dopts.block_log2 = kind == STITCH_OBJ_ANCHOR ? anchor_block_log2(chunk)
                     : autosz                  ? delta_block_log2(ck_bytes)
                                               : 0;
  dopts.base_digest = base_view;
  dopts.result_digest = &p->view;
  dopts.sparse_mode = p->o->sparse_mode;
  dopts.threads = p->o->threads;
  dopts.progress = on_encode;
  dopts.progress_arg = &ep;
  uint8_t *buf;
  size_t len;
  CHECK_RC(stitch_delta_encode(base, p->ckpt, &dopts, &buf, &len, NULL, d));
  stitch_delta *dl;
  int rc = stitch_delta_parse(buf, len, &dl, d);
  built *b = &p->b[p->nb];
  memset(b, 0, sizeof(*b));
  if (rc == 0) {
    if (autosz && kind != STITCH_OBJ_ANCHOR)
      chunk = auto_chunk(len);
    rc = stitch_chunks_from_delta(dl, chunk, &b->obj, &b->bufs, d);
    stitch_delta_free(dl);
  }
  free(buf);
  CHECK_RC(rc);
  b->obj.kind = kind;
  b->obj.base_view = *base_view;
  if (from != NULL) {
    b->obj.base_version = from->m->version;
    b->obj.base_id = from->id;
  }
  p->nb++;
  return 0;
}

static void drop(pub *p, size_t i) {
  stitch_chunks_free(p->b[i].bufs, p->b[i].obj.n_chunks);
  stitch_object_clear(&p->b[i].obj);
  memmove(&p->b[i], &p->b[i + 1], (p->nb - i - 1) * sizeof(p->b[0]));
  p->nb--;
}

/* A version stranded above `latest` by a crash after its manifest was
 * written: everything it needs is durable, so finish it. */
static int settle(pub *p, stitch_diag *d) {
  for (size_t i = stitch_store_count(p->s); i-- > 0;) {
    const stitch_vref *r = stitch_store_at(p->s, i);
    if (r->m->version <= stitch_store_latest_named(p->s))
      break;
    char view[4096];
    side(view, sizeof(view), p->dir, "view", r->m->version);
    RETURN_IF(access(view, F_OK) != 0, d, STITCH_EFORMAT,
              "%s: version %" PRIu64 " is above latest and has no view "
              "copy; the store was changed by hand",
              p->dir, r->m->version);
    return stitch_store_set_latest(p->s, r->m->version, d);
  }
  return 0;
}

/* Writes a copy of the checkpoint's tensors to PATH (atomically). */
static int copy_view(const stitch_st *st, const char *path, stitch_diag *d) {
  stitch_st_writer *w;
  CHECK_RC(stitch_st_writer_new(path, &w, d));
  int rc = stitch_st_writer_set_metadata(w, stitch_st_metadata(st), d);
  size_t n = stitch_st_count(st);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    const stitch_tensor *t = stitch_st_tensor(st, i);
    rc = stitch_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, d);
  }
  if (rc == 0)
    rc = stitch_st_writer_map(w, d);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    const stitch_tensor *t = stitch_st_tensor(st, i);
    if (t->nbytes > 0)
      memcpy(stitch_st_writer_data(w, i), t->data, (size_t)t->nbytes);
  }
  if (rc == 0)
    rc = stitch_st_writer_commit(w, d);
  stitch_st_writer_free(w);
  return rc;
}

/* Chooses and builds the objects of the next version (docs/versions.md). */
static int choose(pub *p, const stitch_vref *prev, stitch_diag *d) {
  static const uint8_t empty_buf[10] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  stitch_st *empty;
  CHECK_RC(stitch_st_parse(empty_buf, sizeof(empty_buf), &empty, d));
  stitch_digest empty_view;
  int rc = stitch_view_digest(empty, &empty_view, NULL);
  const stitch_publish_opts *o = p->o;
  unsigned max_chain = o->max_chain ? o->max_chain : 32;
  double ratio = o->anchor_ratio > 0 ? o->anchor_ratio : 0.5;
  unsigned every = o->cumulative_every ? o->cumulative_every : 4;
  int anchor = prev == NULL;
  uint64_t v = prev ? prev->m->version + 1 : 1;
  if (rc == 0 && prev != NULL) {
    /* The last anchor, and what the chain since it costs. */
    const stitch_vref *a = NULL;
    uint64_t abytes = 0;
    for (size_t i = stitch_store_count(p->s); i-- > 0 && a == NULL;) {
      const stitch_vref *r = stitch_store_at(p->s, i);
      if (r->m->version <= prev->m->version && has_anchor(r->m, &abytes))
        a = r;
    }
    char path[4096];
    side(path, sizeof(path), p->dir, "view", prev->m->version);
    stitch_st *head = NULL;
    rc = stitch_st_open(path, &head, d);
    if (rc == 0)
      rc = build(p, head, &prev->m->view, STITCH_OBJ_DELTA, prev, d);
    stitch_st_free(head);
    uint64_t dbytes = rc == 0 ? p->b[0].obj.bytes : 0;
    if (a == NULL || v - a->m->version >= max_chain ||
        (double)dbytes >= ratio * (double)abytes)
      anchor = 1;
    if (rc == 0 && anchor && a != NULL && dbytes >= abytes)
      drop(p, 0); /* the anchor alone is cheaper for everyone */
    if (rc == 0 && a != NULL && every != UINT32_MAX &&
        v - a->m->version >= 2 && (v - a->m->version) % every == 0) {
      stitch_plan chain;
      side(path, sizeof(path), p->dir, "anchor", a->m->version);
      stitch_st *abase = NULL;
      rc = stitch_plan_path(stitch_store_at(p->s, 0),
                            stitch_store_count(p->s), a->m->version, &a->id,
                            prev->m->version, &chain, d);
      if (rc == 0 && (rc = stitch_st_open(path, &abase, d)) == 0)
        rc = build(p, abase, &a->m->view, STITCH_OBJ_CUMULATIVE, a, d);
      stitch_st_free(abase);
      /* Worth keeping only if it saves catch-up bytes from the anchor. */
      if (rc == 0 &&
          (double)p->b[p->nb - 1].obj.bytes >= 0.8 * (chain.bytes + dbytes))
        drop(p, p->nb - 1);
    }
  }
  if (rc == 0 && anchor)
    rc = build(p, empty, &empty_view, STITCH_OBJ_ANCHOR, NULL, d);
  stitch_st_free(empty);
  return rc;
}

static int write_version(pub *p, const stitch_seckey *sk,
                         const stitch_vref *prev, stitch_publish_result *res,
                         stitch_diag *d) {
  const stitch_st *ck = p->ckpt;
  size_t n = stitch_st_count(ck);
  stitch_manifest m;
  memset(&m, 0, sizeof(m));
  crypto_sign_ed25519_sk_to_pk(m.swarm.b, sk->b);
  m.version = prev ? prev->m->version + 1 : 1;
  m.parent_version = prev ? prev->m->version : 0;
  if (prev != NULL)
    m.parent_id = prev->id;
  m.time_unix = p->o->time_unix ? p->o->time_unix : (uint64_t)time(NULL);
  m.view = p->view;
  m.meta = (char *)stitch_st_metadata(ck);
  m.n_tensors = n;
  m.tensors = calloc(n ? n : 1, sizeof(*m.tensors));
  stitch_digest *dg = calloc(n ? n : 1, sizeof(*dg));
  stitch_object objs[STITCH_MAX_OBJECTS];
  int rc = m.tensors && dg ? stitch_view_digest(ck, &p->view, dg)
                           : stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  for (size_t i = 0; rc == 0 && i < n; i++) {
    const stitch_tensor *t = stitch_st_tensor(ck, i);
    stitch_mtensor *mt = &m.tensors[i];
    mt->name = (char *)t->name;
    mt->dtype = t->dtype;
    mt->ndim = t->ndim;
    memcpy(mt->shape, t->shape, sizeof(mt->shape));
    mt->nbytes = t->nbytes;
    mt->digest = dg[i];
  }
  m.view = p->view;
  if (rc == 0)
    rc = choose(p, prev, d);
  for (size_t i = 0; rc == 0 && i < p->nb; i++)
    objs[i] = p->b[i].obj;
  m.n_objects = p->nb;
  m.objects = objs;
  char path[4096];
  side(path, sizeof(path), p->dir, "view", m.version);
  if (rc == 0) {
    progress(p, "copy view", 0, 1);
    rc = copy_view(ck, path, d);
  }
  uint64_t total = 0, done = 0;
  for (size_t i = 0; i < p->nb; i++)
    total += p->b[i].obj.n_chunks;
  for (size_t i = 0; rc == 0 && i < p->nb; i++)
    for (uint64_t c = 0; rc == 0 && c < p->b[i].obj.n_chunks; c++) {
      /* chunk.c named each chunk by hashing these bytes: no second hash */
      rc = store_put_named_chunk(p->s, &p->b[i].obj.chunks[c].hash,
                                 p->b[i].bufs[c],
                                 (size_t)p->b[i].obj.chunks[c].size, d);
      progress(p, "write chunks", ++done, total);
    }
  /* The chunks, written unsynced, durable together before the manifest
   * that names them (proto/store.md "Writes of one publish"). */
  if (rc == 0)
    rc = stitch_store_sync(p->s, d);
  uint8_t *signed_buf = NULL;
  size_t signed_len = 0;
  if (rc == 0)
    rc = stitch_manifest_sign(&m, sk, &signed_buf, &signed_len, &res->id, d);
  if (rc == 0)
    rc = stitch_store_put_manifest(p->s, signed_buf, signed_len, d);
  if (rc == 0)
    rc = stitch_store_set_latest(p->s, m.version, d);
  free(signed_buf);
  if (rc == 0) {
    res->version = m.version;
    res->n_objects = p->nb;
    for (size_t i = 0; i < n; i++)
      res->view_bytes += m.tensors[i].nbytes;
    for (size_t i = 0; i < p->nb; i++) {
      res->kind[i] = p->b[i].obj.kind;
      res->base[i] = p->b[i].obj.base_version;
      res->bytes[i] = p->b[i].obj.bytes;
      res->chunks[i] = p->b[i].obj.n_chunks;
    }
  }
  free(m.tensors);
  free(dg);
  return rc;
}

/* After `latest` moved: the new view replaces the old, a new anchor's view
 * replaces the old anchor's, and retention runs. */
static int tidy(pub *p, const stitch_publish_result *res, stitch_diag *d) {
  char path[4096], link_to[4096];
  int anchored = 0;
  for (size_t i = 0; i < res->n_objects; i++)
    anchored |= res->kind[i] == STITCH_OBJ_ANCHOR;
  side(path, sizeof(path), p->dir, "view", res->version);
  if (anchored) {
    side(link_to, sizeof(link_to), p->dir, "anchor", res->version);
    RETURN_IF(link(path, link_to) != 0 && access(link_to, F_OK) != 0, d,
              STITCH_EIO, "%s: cannot link the anchor's view", link_to);
  }
  /* Everything older than this version's files goes. */
  for (uint64_t v = res->version; v-- > 1;) {
    side(path, sizeof(path), p->dir, "view", v);
    unlink(path);
    if (anchored) {
      side(path, sizeof(path), p->dir, "anchor", v);
      unlink(path);
    }
    if (res->version - v > 4 * STITCH_PLAN_MAX)
      break;
  }
  return stitch_store_gc(p->s, p->o->keep, d);
}

int stitch_publish(const char *dir, const stitch_seckey *sk,
                   const stitch_st *ckpt, const stitch_publish_opts *opts,
                   stitch_publish_result *res, stitch_diag *d) {
  stitch_publish_opts defaults = {0};
  stitch_publish_result tmp;
  res = res ? res : &tmp;
  memset(res, 0, sizeof(*res));
  pub p = {.dir = dir, .o = opts ? opts : &defaults, .ckpt = ckpt};
  stitch_pubkey pk;
  crypto_sign_ed25519_sk_to_pk(pk.b, sk->b);
  CHECK_RC(stitch_store_open(dir, &pk, 1, &p.s, d));
  char pdir[4096];
  snprintf(pdir, sizeof(pdir), "%s/publisher", dir);
  int rc = stitch_mkdir(pdir, d);
  if (rc == 0)
    rc = settle(&p, d);
  const stitch_vref *prev = NULL;
  if (rc == 0 && stitch_store_latest(p.s) > 0)
    prev = stitch_store_find(p.s, stitch_store_latest(p.s));
  if (rc == 0)
    rc = write_version(&p, sk, prev, res, d);
  if (rc == 0)
    rc = tidy(&p, res, d);
  while (p.nb > 0)
    drop(&p, p.nb - 1);
  stitch_store_close(p.s);
  return rc;
}
