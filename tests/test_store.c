/* test_store.c: publish, store, pull and the apply transaction through the
 * C API: bit-exact catch-up, every crash point of an in-place apply
 * recovered to exactly one version, replayed and wrong-base applies
 * refused, retention; `latest` moved back, chains with a wrong base, bad
 * chunks a pull must leave alone, stale temporaries. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "ckpt_util.h"
#include "stitch/store.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define STEPS 7
#define N_W (96 * 1024) /* BF16 weights */
#define N_B 3000        /* F32 biases */

static char root[64];

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}
static void rm_root(void) { nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* A path under the test's directory. Paths are interned: the same name
 * always gives the same pointer, which stays valid to the end. */
static const char *at(const char *name) {
  static char slots[32][256];
  static int used;
  char p[256];
  snprintf(p, sizeof(p), "%s/%s", root, name);
  for (int i = 0; i < used; i++)
    if (strcmp(slots[i], p) == 0)
      return slots[i];
  ASSERT(used < 32);
  memcpy(slots[used], p, sizeof(p));
  return slots[used++];
}

static void ckpt_path(int s, char *out) {
  snprintf(out, 256, "%s/step%d.safetensors", root, s);
}

/* An Adam-like trajectory: each step moves ~1% of the BF16 weights by one
 * ulp, and some biases. */
static void make_steps(test_rng *r) {
  static const char *names[4] = {"model.w0", "model.w1", "model.w2",
                                 "model.w3"};
  uint16_t *w = malloc(N_W * 2);
  float *b = malloc(N_B * 4);
  ASSERT(w && b);
  for (size_t i = 0; i < N_W; i++)
    w[i] = (uint16_t)(0x3c00 + (test_rng_next(r) % 0x0400)) ^
           (uint16_t)((test_rng_next(r) & 1) << 15);
  for (size_t i = 0; i < N_B; i++)
    b[i] = (float)test_rng_unit(r) - 0.5f;
  for (int s = 0; s < STEPS; s++) {
    if (s > 0) {
      for (size_t k = 0; k < N_W / 100; k++) {
        size_t i = test_rng_next(r) % N_W;
        w[i] = (uint16_t)(w[i] + ((test_rng_next(r) & 1) ? 1 : -1));
      }
      for (size_t k = 0; k < 20; k++)
        b[test_rng_next(r) % N_B] += 1e-3f;
    }
    /* Four weight tensors and the biases: five blocks, so an in-place
     * apply has five journal records to cut between. */
    tspec ts[5];
    for (int k = 0; k < 4; k++)
      ts[k] = (tspec){names[k], STITCH_DT_BF16, 2, {96, 256},
                      (uint8_t *)(w + k * (N_W / 4))};
    ts[4] = (tspec){"model.b", STITCH_DT_F32, 1, {N_B}, (uint8_t *)b};
    char p[256], meta[64];
    ckpt_path(s, p);
    snprintf(meta, sizeof(meta), "{\"step\":\"%04d\"}", s);
    write_ckpt(p, ts, 5, meta);
  }
  free(w);
  free(b);
}

static void view_of_file(const char *path, stitch_digest *out) {
  stitch_st *st = open_ckpt(path);
  ASSERT_EQ(stitch_view_digest(st, out, NULL), 0);
  stitch_st_free(st);
}

static void copy_file(const char *from, const char *to) {
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && rm -f '%s.stitch-state'", from,
           to, to);
  ASSERT_EQ(system(cmd), 0);
}

static stitch_pubkey pk;
static stitch_seckey sk;

/* Publishes steps FROM to TO; returns the bytes of their delta objects. */
static uint64_t publish_all(const char *dir, int from, int to,
                            const stitch_publish_opts *o) {
  uint64_t delta_bytes = 0;
  for (int s = from; s <= to; s++) {
    char p[256];
    ckpt_path(s, p);
    stitch_st *st = open_ckpt(p);
    stitch_diag d = {{0}};
    stitch_publish_result res;
    ASSERT_OK(stitch_publish(dir, &sk, st, o, &res, &d), d);
    ASSERT_UEQ(res.version, (uint64_t)s + 1);
    if (s == 0)
      ASSERT_EQ(res.kind[0], STITCH_OBJ_ANCHOR);
    else
      ASSERT(res.n_objects >= 1);
    for (size_t k = 0; k < res.n_objects; k++)
      if (res.kind[k] == STITCH_OBJ_DELTA)
        delta_bytes += res.bytes[k];
    stitch_st_free(st);
  }
  return delta_bytes;
}

/* The weights at PATH are exactly the version their state names. */
static uint64_t check_one_version(const char *path) {
  stitch_diag d = {{0}};
  stitch_wstate ws;
  ASSERT_OK(stitch_weights_state(path, &ws, &d), d);
  stitch_digest v, want;
  view_of_file(path, &v);
  char p[256];
  ckpt_path((int)ws.version - 1, p);
  view_of_file(p, &want);
  ASSERT_MEM_EQ(v.b, ws.view.b, 32);
  ASSERT_MEM_EQ(v.b, want.b, 32);
  return ws.version;
}

/* Publishes every step into STORE and pulls from every version; returns
 * the bytes of the delta objects. */
static uint64_t test_publish_pull(const char *name,
                                  const stitch_publish_opts *o) {
  const char *store = at(name);
  uint64_t delta_bytes = publish_all(store, 0, STEPS - 1, o);
  stitch_diag d = {{0}};
  stitch_store *s;
  ASSERT_OK(stitch_store_open(store, &pk, 0, &s, &d), d);
  ASSERT_UEQ(stitch_store_latest(s), STEPS);
  uint64_t chunks = 0;
  ASSERT_OK(stitch_store_verify(s, &chunks, &d), d);
  ASSERT(chunks > 0);
  int kinds = 0;
  for (size_t i = 0; i < stitch_store_count(s); i++) {
    const stitch_manifest *m = stitch_store_at(s, i)->m;
    for (uint64_t k = 0; k < m->n_objects; k++) {
      const stitch_object *ob = &m->objects[k];
      kinds |= 1 << ob->kind;
      if (ob->kind != STITCH_OBJ_ANCHOR || o->chunk_bytes == 0)
        continue; /* 0: test_auto_chunk checks */
      /* Anchor blocks follow the chunk size: 2^11 BF16 symbols fill 4 KiB
       * (with 2^18, each weight tensor was one chunk of some 48 KiB). A
       * chunk over the size holds one block: an F32 block is 8 KiB. */
      ASSERT_UEQ(2ull << ob->block_log2, o->chunk_bytes);
      for (uint64_t c = 0; c < ob->n_chunks; c++)
        ASSERT(ob->chunks[c].size <= o->chunk_bytes ||
               ob->chunks[c].n_blocks == 1);
      ASSERT(ob->n_chunks >= ob->bytes / o->chunk_bytes);
    }
  }
  ASSERT_EQ(kinds, (1 << STITCH_OBJ_DELTA) | (1 << STITCH_OBJ_ANCHOR) |
                       (1 << STITCH_OBJ_CUMULATIVE));
  stitch_store_close(s);
  /* From nothing, and from every version. */
  for (int from = -1; from < STEPS; from++) {
    const char *w = at("w.st");
    remove(w);
    remove(at("w.st.stitch-state"));
    if (from >= 0) {
      char p[256];
      ckpt_path(from, p);
      copy_file(p, w);
    }
    stitch_pull_result r;
    ASSERT_OK(stitch_pull(store, &pk, w, NULL, &r, &d), d);
    ASSERT_UEQ(r.from, (uint64_t)(from + 1));
    ASSERT_UEQ(check_one_version(w), STEPS);
  }
  return delta_bytes;
}

/* Stops the in-place apply after every possible number of journal records,
 * as a crash would, and recovers. */
static void test_crash_points(void) {
  const char *store = at("store"), *w = at("c.st");
  char p[256];
  stitch_diag d = {{0}};
  int crashed = 0;
  for (uint64_t f = 1;; f++) {
    ckpt_path(STEPS - 2, p); /* one delta behind */
    copy_file(p, w);
    stitch_apply_opts o = {0};
    o.fail_after = f;
    int rc = stitch_pull(store, &pk, w, &o, NULL, &d);
    if (rc == 0) {
      ASSERT_UEQ(check_one_version(w), STEPS);
      break;
    }
    ASSERT_EQ(rc, STITCH_EIO);
    crashed++;
    int recovered = 0;
    ASSERT_OK(stitch_weights_recover(w, &recovered, &d), d);
    ASSERT_EQ(recovered, 1);
    ASSERT_UEQ(check_one_version(w), STEPS - 1);
    ASSERT_OK(stitch_weights_recover(w, &recovered, &d), d);
    ASSERT_EQ(recovered, 0);
    ASSERT_OK(stitch_pull(store, &pk, w, NULL, NULL, &d), d);
    ASSERT_UEQ(check_one_version(w), STEPS);
  }
  ASSERT(crashed >= 4);
  printf("  crash points: %d in-place cuts recovered\n", crashed);
}

/* Puts the weights of trainer step S at W with a state naming its version:
 * pull adopts the file by its digest, and the test hook stops the apply
 * that follows at once (recovery undoes it). */
static void adopt_at(int s, const char *w) {
  char p[256];
  ckpt_path(s, p);
  copy_file(p, w);
  stitch_diag d = {{0}};
  stitch_apply_opts o = {0};
  o.fail_after = 1;
  ASSERT_EQ(stitch_pull(at("store"), &pk, w, &o, NULL, &d), STITCH_EIO);
  ASSERT_OK(stitch_weights_recover(w, NULL, &d), d);
  ASSERT_UEQ(check_one_version(w), (uint64_t)s + 1);
}

/* A patch applied twice, or to the wrong base, or to tampered weights. */
static void test_refusals(void) {
  const char *store = at("store"), *w = at("r.st");
  stitch_diag d = {{0}};
  stitch_store *s;
  ASSERT_OK(stitch_store_open(store, &pk, 0, &s, &d), d);
  const stitch_vref *vr = stitch_store_find(s, STEPS);
  ASSERT(vr != NULL);
  size_t obj = 0;
  while (vr->m->objects[obj].kind != STITCH_OBJ_DELTA)
    obj++;
  const stitch_object *ob = &vr->m->objects[obj];
  stitch_patch *pt;
  ASSERT_OK(stitch_patch_new(vr->m, obj, &pt, &d), d);
  const uint8_t *bufs[64];
  size_t lens[64];
  ASSERT(ob->n_chunks <= 64);
  for (uint64_t c = 0; c < ob->n_chunks; c++) {
    ASSERT_OK(stitch_store_get_chunk(s, &ob->chunks[c].hash, &bufs[c],
                                     &lens[c], &d),
              d);
    ASSERT_OK(stitch_patch_add(pt, (size_t)c, bufs[c], lens[c], &d), d);
  }
  /* Twice: the second is refused; the weights stay at the new version. */
  adopt_at(STEPS - 2, w);
  ASSERT_OK(stitch_weights_apply(w, vr, obj, pt, NULL, &d), d);
  ASSERT_UEQ(check_one_version(w), STEPS);
  ASSERT_EQ(stitch_weights_apply(w, vr, obj, pt, NULL, &d), STITCH_EROLLBACK);
  ASSERT_UEQ(check_one_version(w), STEPS);
  /* The wrong base: weights two versions older than the delta's base. */
  adopt_at(STEPS - 4, w);
  ASSERT_EQ(stitch_weights_apply(w, vr, obj, pt, NULL, &d), STITCH_EBASE);
  ASSERT_UEQ(check_one_version(w), STEPS - 3);
  /* Tampered weights whose state names the right base. Seen by the file's
   * changed mtime: refused before anything is written. */
  adopt_at(STEPS - 2, w);
  struct stat before;
  ASSERT_EQ(stat(w, &before), 0);
  FILE *f = fopen(w, "r+b");
  ASSERT(f != NULL);
  fseek(f, -7, SEEK_END); /* inside model.b, the last tensor */
  int c = fgetc(f);
  fseek(f, -7, SEEK_END);
  fputc(c ^ 0x40, f);
  fclose(f);
  stitch_digest tampered, after;
  view_of_file(w, &tampered);
  ASSERT_EQ(stitch_weights_apply(w, vr, obj, pt, NULL, &d), STITCH_EBASE);
  ASSERT(strstr(d.msg, "changed outside") != NULL);
  /* Hidden from the stamp (mtime put back): the digest check after the
   * apply fails, and every byte goes back. */
  struct timespec ts[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, w, ts, 0), 0);
  ASSERT_EQ(stitch_weights_apply(w, vr, obj, pt, NULL, &d), STITCH_EDIGEST);
  view_of_file(w, &after);
  ASSERT_MEM_EQ(tampered.b, after.b, 32);
  stitch_wstate ws;
  ASSERT_OK(stitch_weights_state(w, &ws, &d), d);
  ASSERT_UEQ(ws.version, STEPS - 1);
  stitch_patch_free(pt);
  for (uint64_t k = 0; k < ob->n_chunks; k++)
    stitch_store_release(bufs[k], lens[k]);
  stitch_store_close(s);
}

static void test_retention(void) {
  const char *store = at("ret");
  stitch_publish_opts o = {0};
  o.keep = 2;
  o.max_chain = 3;
  o.chunk_bytes = 4096;
  publish_all(store, 0, STEPS - 1, &o);
  stitch_diag d = {{0}};
  stitch_store *s;
  ASSERT_OK(stitch_store_open(store, &pk, 0, &s, &d), d);
  /* Latest 7, window 6..7, extended back to the anchor at or before 6. */
  const stitch_vref *first = stitch_store_at(s, 0);
  ASSERT(first->m->version <= 6);
  ASSERT(first->m->version >= 4);
  uint64_t chunks = 0;
  ASSERT_OK(stitch_store_verify(s, &chunks, &d), d);
  stitch_store_close(s);
  const char *w = at("ret.st");
  ASSERT_OK(stitch_pull(store, &pk, w, NULL, NULL, &d), d);
  ASSERT_UEQ(check_one_version(w), STEPS);
}


/* ---- The store as its readers see it ---------------------------------- */

static void copy_store(const char *from, const char *to) {
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
  ASSERT_EQ(system(cmd), 0);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ASSERT(f != NULL);
  ASSERT_EQ(fputs(text, f) >= 0, 1);
  ASSERT_EQ(fclose(f), 0);
}

static void manifest_file(const char *dir, const stitch_vref *r, char *out) {
  char hex[65];
  stitch_digest_hex(&r->id, hex);
  snprintf(out, 256, "%s/manifests/%020" PRIu64 "-%s", dir, r->m->version,
           hex);
}

/* `latest` never moves back through the API, and a `latest` moved back by
 * hand holds no reader back: they take the newest signed version, and
 * verify reports the pointer. */
static void test_latest(void) {
  const char *dir = at("s-latest"), *w = at("l.st");
  copy_store(at("store"), dir);
  stitch_diag d = {{0}};
  stitch_store *s;
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  ASSERT_UEQ(stitch_store_latest_named(s), STEPS);
  ASSERT_ERR(stitch_store_set_latest(s, 1, &d), STITCH_EROLLBACK, d,
             "never moves back");
  ASSERT_ERR(stitch_store_set_latest(s, STEPS - 1, &d), STITCH_EROLLBACK, d,
             "never moves back");
  ASSERT_OK(stitch_store_set_latest(s, STEPS, &d), d); /* the same: fine */
  char hex[65], line[128];
  stitch_digest_hex(&stitch_store_find(s, 1)->id, hex);
  stitch_store_close(s);
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  ASSERT_UEQ(stitch_store_latest_named(s), STEPS); /* the file too */
  stitch_store_close(s);

  /* By hand: `latest` names version 1 (a valid version, under its id). */
  snprintf(line, sizeof(line), "1 %s\n", hex);
  char lp[256];
  snprintf(lp, sizeof(lp), "%s/latest", dir);
  write_text(lp, line);
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  ASSERT_UEQ(stitch_store_latest_named(s), 1);
  ASSERT_UEQ(stitch_store_latest(s), STEPS);
  uint64_t chunks = 0;
  ASSERT_ERR(stitch_store_verify(s, &chunks, &d), STITCH_EROLLBACK, d,
             "latest names version 1, but the store holds signed versions "
             "up to 7");
  stitch_store_close(s);
  remove(w);
  stitch_pull_result r;
  ASSERT_OK(stitch_pull(dir, &pk, w, NULL, &r, &d), d);
  ASSERT_UEQ(r.to, STEPS);
  ASSERT_UEQ(check_one_version(w), STEPS);
  /* With no `latest` at all (a node's store), verify passes. */
  ASSERT_EQ(remove(lp), 0);
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  ASSERT_UEQ(stitch_store_latest(s), STEPS);
  ASSERT_OK(stitch_store_verify(s, &chunks, &d), d);
  stitch_store_close(s);
}

static void flip_base_view(stitch_manifest *m, int kind) {
  for (uint64_t o = 0; o < m->n_objects; o++)
    if ((int)m->objects[o].kind == kind) {
      m->objects[o].base_view.b[0] ^= 1;
      return;
    }
  FAIL_("version %" PRIu64 " has no object of kind %d", m->version, kind);
}

static void flip_base_id(stitch_manifest *m, int kind) {
  for (uint64_t o = 0; o < m->n_objects; o++)
    if ((int)m->objects[o].kind == kind) {
      m->objects[o].base_id.b[0] ^= 1;
      return;
    }
  FAIL_("version %" PRIu64 " has no object of kind %d", m->version, kind);
}

/* A copy of the store whose newest version is the highest that has an
 * object of KIND, changed by MUT and signed again with the trainer's key:
 * every signature verifies, only the chain is wrong. */
static const char *resigned(const char *name, int kind,
                            void (*mut)(stitch_manifest *, int)) {
  const char *dir = at(name);
  copy_store(at("store"), dir);
  stitch_diag d = {{0}};
  stitch_store *s;
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  size_t top = stitch_store_count(s);
  for (int found = 0; !found;) {
    ASSERT(top > 0);
    const stitch_manifest *m = stitch_store_at(s, --top)->m;
    for (uint64_t o = 0; o < m->n_objects; o++)
      found |= (int)m->objects[o].kind == kind;
  }
  char p[256];
  for (size_t i = top + 1; i < stitch_store_count(s); i++) {
    manifest_file(dir, stitch_store_at(s, i), p);
    ASSERT_EQ(remove(p), 0);
  }
  manifest_file(dir, stitch_store_at(s, top), p);
  stitch_store_close(s);
  FILE *f = fopen(p, "rb");
  ASSERT(f != NULL);
  static uint8_t buf[1 << 20];
  size_t len = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  stitch_manifest *m;
  ASSERT_OK(stitch_manifest_open(buf, len, &pk, &m, NULL, &d), d);
  mut(m, kind);
  uint8_t *signed_buf;
  size_t signed_len;
  ASSERT_OK(stitch_manifest_sign(m, &sk, &signed_buf, &signed_len, NULL, &d),
            d);
  uint64_t v = m->version;
  stitch_manifest_free(m);
  ASSERT_EQ(remove(p), 0);
  char lp[256];
  snprintf(lp, sizeof(lp), "%s/latest", dir);
  ASSERT_EQ(remove(lp), 0);
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  ASSERT_OK(stitch_store_put_manifest(s, signed_buf, signed_len, &d), d);
  ASSERT_OK(stitch_store_set_latest(s, v, &d), d);
  stitch_store_close(s);
  free(signed_buf);
  return dir;
}

static void expect_chain_refused(const char *dir, const char *why) {
  stitch_diag d = {{0}};
  stitch_store *s;
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  uint64_t chunks = 0;
  ASSERT_ERR(stitch_store_verify(s, &chunks, &d), STITCH_EBASE, d, why);
  printf("  %s\n", d.msg);
  stitch_store_close(s);
}

/* Versions signed by the trainer's key whose objects name the wrong base:
 * verify checks the chain, not only the signatures. */
static void test_chain(void) {
  expect_chain_refused(
      resigned("s-view", STITCH_OBJ_DELTA, flip_base_view),
      "base view digest is not version");
  expect_chain_refused(
      resigned("s-cumid", STITCH_OBJ_CUMULATIVE, flip_base_id),
      "under another id than the store's version");
  expect_chain_refused(
      resigned("s-cumview", STITCH_OBJ_CUMULATIVE, flip_base_view),
      "base view digest is not version");
}

/* A pull that meets a bad chunk fails naming it and leaves the store as it
 * is; only the store's owner replaces it (put_chunk of the good bytes). */
static void test_bad_chunk(void) {
  const char *dir = at("s-bad"), *w = at("b.st");
  copy_store(at("store"), dir);
  stitch_diag d = {{0}};
  stitch_store *s;
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  /* The first chunk of the newest version's delta: the only way from the
   * version before. */
  const stitch_manifest *m = stitch_store_find(s, STEPS)->m;
  size_t obj = 0;
  while (m->objects[obj].kind != STITCH_OBJ_DELTA)
    obj++;
  stitch_digest h = m->objects[obj].chunks[0].hash;
  const uint8_t *good_map;
  size_t len;
  ASSERT_OK(stitch_store_get_chunk(s, &h, &good_map, &len, &d), d);
  uint8_t *good = malloc(len);
  ASSERT(good != NULL);
  memcpy(good, good_map, len);
  stitch_store_release(good_map, len);
  char hex[65], p[256];
  stitch_digest_hex(&h, hex);
  snprintf(p, sizeof(p), "%s/chunks/%.2s/%s", dir, hex, hex);
  FILE *f = fopen(p, "r+b");
  ASSERT(f != NULL);
  fseek(f, (long)len / 2, SEEK_SET);
  int c = fgetc(f);
  fseek(f, (long)len / 2, SEEK_SET);
  fputc(c ^ 0x10, f);
  fclose(f);
  stitch_store_close(s);

  char from[256];
  ckpt_path(STEPS - 2, from); /* version STEPS - 1 */
  for (int k = 0; k < 2; k++) { /* twice: the second meets the same chunk */
    copy_file(from, w);
    ASSERT_ERR(stitch_pull(dir, &pk, w, NULL, NULL, &d), STITCH_ECHECKSUM, d,
               "(the store is left as it is)");
    ASSERT(strstr(d.msg, "hash mismatch") != NULL);
    struct stat sb;
    ASSERT_EQ(stat(p, &sb), 0);
    ASSERT_UEQ((uint64_t)sb.st_size, len);
  }
  /* Its owner puts the good bytes: the bad copy is replaced. */
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  ASSERT_OK(stitch_store_put_chunk(s, &h, good, len, &d), d);
  uint64_t chunks = 0;
  ASSERT_OK(stitch_store_verify(s, &chunks, &d), d);
  stitch_store_close(s);
  copy_file(from, w);
  ASSERT_OK(stitch_pull(dir, &pk, w, NULL, NULL, &d), d);
  ASSERT_UEQ(check_one_version(w), STEPS);
  free(good);
}

/* A chunk is hashed once on a node's path (version/proofs.h): a put hashes
 * it, and an apply through the same store handle trusts that put. Bytes
 * that went bad on disk after the put are still caught, by the delta's
 * block checks or the tensor digests, with the weights left at their
 * version; a fresh handle hashes again and names the chunk. */
static void test_proven_chunk(void) {
  const char *dir = at("s-proof"), *w = at("p.st");
  copy_store(at("store"), dir);
  stitch_diag d = {{0}};
  stitch_store *s;
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  const stitch_vref *vr = stitch_store_find(s, STEPS);
  uint32_t obj = 0;
  while (vr->m->objects[obj].kind != STITCH_OBJ_DELTA)
    obj++;
  const stitch_object *ob = &vr->m->objects[obj];
  /* Every chunk put through this handle: proven. Then one goes bad. */
  uint8_t *good[64];
  size_t len[64];
  ASSERT(ob->n_chunks <= 64);
  for (uint64_t c = 0; c < ob->n_chunks; c++) {
    const uint8_t *map;
    ASSERT_OK(stitch_store_get_chunk(s, &ob->chunks[c].hash, &map, &len[c],
                                     &d), d);
    good[c] = malloc(len[c]);
    ASSERT(good[c] != NULL);
    memcpy(good[c], map, len[c]);
    stitch_store_release(map, len[c]);
    ASSERT_OK(stitch_store_put_chunk(s, &ob->chunks[c].hash, good[c], len[c],
                                     &d), d);
  }
  adopt_at(STEPS - 2, w); /* version STEPS - 1, the delta's base */
  ASSERT_OK(stitch_store_apply(s, w, vr, obj, NULL, &d), d);
  ASSERT_UEQ(check_one_version(w), STEPS);
  char hex[65], p[256];
  stitch_digest_hex(&ob->chunks[0].hash, hex);
  snprintf(p, sizeof(p), "%s/chunks/%.2s/%s", dir, hex, hex);
  FILE *f = fopen(p, "r+b");
  ASSERT(f != NULL);
  fseek(f, (long)len[0] - 1, SEEK_SET); /* the last byte of a value */
  int c = fgetc(f);
  fseek(f, (long)len[0] - 1, SEEK_SET);
  fputc(c ^ 0x01, f);
  fclose(f);
  adopt_at(STEPS - 2, w);
  int rc = stitch_store_apply(s, w, vr, obj, NULL, &d);
  if (!(rc == STITCH_EDIGEST || rc == STITCH_ECHECKSUM ||
        rc == STITCH_EFORMAT || rc == STITCH_ETRUNCATED))
    FAIL_("a bad proven chunk applied: rc %d (%s)", rc, d.msg);
  ASSERT_UEQ(check_one_version(w), STEPS - 1);
  /* A fresh handle has no proof: it hashes, and names the chunk. */
  stitch_store *fresh;
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &fresh, &d), d);
  ASSERT_ERR(stitch_store_apply(fresh, w, vr, obj, NULL, &d),
             STITCH_ECHECKSUM, d, "hash mismatch");
  stitch_store_close(fresh);
  /* Dropped, the proof goes with the file; the owner's put repairs. */
  stitch_store_drop_chunk(s, &ob->chunks[0].hash);
  ASSERT(stitch_store_get_chunk(s, &ob->chunks[0].hash, (const uint8_t **)&f,
                                &len[63], NULL) != 0);
  ASSERT_OK(stitch_store_put_chunk(s, &ob->chunks[0].hash, good[0], len[0],
                                   &d), d);
  adopt_at(STEPS - 2, w);
  ASSERT_OK(stitch_store_apply(s, w, vr, obj, NULL, &d), d);
  ASSERT_UEQ(check_one_version(w), STEPS);
  for (uint64_t k = 0; k < ob->n_chunks; k++)
    free(good[k]);
  stitch_store_close(s);
}

/* Chunks are written unsynced (proto/store.md): after a power loss one may
 * be short or empty. A handle sends on only what it wrote or hashed since
 * it opened (stitch_store_get_chunk_checked); stitch_store_sync makes what
 * was written durable. */
static void test_unsynced_chunk(void) {
  const char *dir = at("s-short");
  copy_store(at("store"), dir);
  stitch_diag d = {{0}};
  stitch_store *s;
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  /* Copied out: the manifests go with the handle. */
  const stitch_object *ob = &stitch_store_find(s, STEPS)->m->objects[0];
  const stitch_object *ob1 = &stitch_store_at(s, 0)->m->objects[0];
  ASSERT(memcmp(ob1->chunks[0].hash.b, ob->chunks[0].hash.b, 32) != 0);
  stitch_digest h = ob->chunks[0].hash, other = ob1->chunks[0].hash;
  size_t size = (size_t)ob->chunks[0].size;
  const uint8_t *map;
  size_t len;
  ASSERT_OK(stitch_store_get_chunk_checked(s, &h, &map, &len, &d), d);
  uint8_t *good = malloc(len);
  ASSERT(good != NULL);
  memcpy(good, map, len);
  stitch_store_release(map, len);
  stitch_store_close(s);
  char hex[65], p[256];
  stitch_digest_hex(&h, hex);
  snprintf(p, sizeof(p), "%s/chunks/%.2s/%s", dir, hex, hex);
  for (int k = 0; k < 2; k++) { /* short, then empty */
    ASSERT_EQ(truncate(p, k == 0 ? (off_t)len / 2 : 0), 0);
    ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
    ASSERT(stitch_store_has_chunk(s, &h)); /* still named: a stat */
    ASSERT_OK(stitch_store_get_chunk(s, &h, &map, &len, &d), d); /* raw */
    stitch_store_release(map, len);
    map = good;
    ASSERT_ERR(stitch_store_get_chunk_checked(s, &h, &map, &len, &d),
               STITCH_ECHECKSUM, d, "does not hash to its name");
    ASSERT(map == NULL);
    ASSERT_OK(stitch_store_get_chunk_checked(s, &other, &map, &len, &d), d);
    stitch_store_release(map, len);
    /* The owner's put replaces it whole; this handle then trusts it. */
    ASSERT_OK(stitch_store_put_chunk(s, &h, good, size, &d), d);
    ASSERT_OK(stitch_store_sync(s, &d), d);
    ASSERT_OK(stitch_store_get_chunk_checked(s, &h, &map, &len, &d), d);
    ASSERT_UEQ((uint64_t)len, (uint64_t)size);
    ASSERT(memcmp(map, good, len) == 0);
    stitch_store_release(map, len);
    stitch_store_close(s);
  }
  uint64_t chunks = 0;
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  ASSERT_OK(stitch_store_verify(s, &chunks, &d), d);
  stitch_store_close(s);
  free(good);
}

/* Temporaries of the weights whose writer is gone are removed by the next
 * pull or recover; a live writer's stay. */
static void test_sweep(void) {
  const char *w = at("t.st");
  char p[256];
  ckpt_path(0, p);
  copy_file(p, w);
  pid_t dead = fork();
  ASSERT(dead >= 0);
  if (dead == 0)
    _exit(0);
  ASSERT_EQ(waitpid(dead, NULL, 0), dead);
  const char *suffix[3] = {"", ".stitch-state", ".stitch-journal"};
  char stale[3][300], live[300], other[300];
  for (int i = 0; i < 3; i++) {
    snprintf(stale[i], sizeof(stale[i]), "%s%s.tmp.%ld.a1B2c3", w, suffix[i],
             (long)dead);
    write_text(stale[i], "partial");
  }
  snprintf(live, sizeof(live), "%s.tmp.%ld.zzzzzz", w, (long)getppid());
  write_text(live, "being written");
  snprintf(other, sizeof(other), "%s/other.st.tmp.%ld.a1B2c3", root,
           (long)dead); /* another file's: not ours to touch */
  write_text(other, "partial");
  stitch_diag d = {{0}};
  unsigned removed = 0;
  ASSERT_OK(stitch_weights_sweep(w, &removed, &d), d);
  ASSERT_EQ(removed, 3);
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(access(stale[i], F_OK), -1);
  ASSERT_EQ(access(live, F_OK), 0);
  ASSERT_EQ(access(other, F_OK), 0);
  /* And through recover, which pull and apply run first. */
  write_text(stale[0], "partial");
  int recovered = 1;
  ASSERT_OK(stitch_weights_recover(w, &recovered, &d), d);
  ASSERT_EQ(recovered, 0);
  ASSERT_EQ(access(stale[0], F_OK), -1);
  remove(live);
  remove(other);
}

/* Reading a store another process writes (what stitchd's seed watches):
 * stitch_store_scan lists the manifests above a version up to `latest`,
 * ascending, and stitch_store_read_manifest gives their signed bytes. */
static void test_scan(void) {
  const char *dir = at("s-scan");
  copy_store(at("store"), dir);
  stitch_diag d = {{0}};
  stitch_store *s;
  ASSERT_OK(stitch_store_open(dir, &pk, 0, &s, &d), d);
  stitch_store_entry *e;
  size_t n;
  uint64_t latest;
  ASSERT_OK(stitch_store_scan(dir, 2, &e, &n, &latest, &d), d);
  ASSERT_UEQ(latest, STEPS);
  ASSERT_UEQ(n, STEPS - 2);
  for (size_t i = 0; i < n; i++) {
    const stitch_vref *r = stitch_store_find(s, 3 + i);
    ASSERT(r != NULL);
    ASSERT_UEQ(e[i].version, 3 + i);
    ASSERT_MEM_EQ(e[i].id.b, r->id.b, 32);
    uint8_t *buf;
    size_t len;
    ASSERT_OK(stitch_store_read_manifest(dir, e[i].version, &e[i].id, &buf,
                                         &len, &d), d);
    stitch_manifest *m;
    stitch_digest id;
    ASSERT_OK(stitch_manifest_open(buf, len, &pk, &m, &id, &d), d);
    ASSERT_MEM_EQ(id.b, r->id.b, 32);
    stitch_manifest_free(m);
    free(buf);
  }
  free(e);
  stitch_digest other = stitch_store_find(s, 1)->id;
  stitch_store_close(s);
  /* Up to date, and a version not held under that id. */
  ASSERT_OK(stitch_store_scan(dir, STEPS, &e, &n, &latest, &d), d);
  ASSERT(n == 0 && e == NULL && latest == STEPS);
  uint8_t *buf;
  size_t len;
  ASSERT_ERR(stitch_store_read_manifest(dir, 2, &other, &buf, &len, &d),
             STITCH_ENOTFOUND, d, "manifests/");
  ASSERT(buf == NULL);
  /* `latest` names the limit: a version written but not yet named there
   * (a publisher between the two) is not listed. */
  char lp[256];
  snprintf(lp, sizeof(lp), "%s/latest", dir);
  write_text(lp, "4 0\n");
  ASSERT_OK(stitch_store_scan(dir, 0, &e, &n, &latest, &d), d);
  ASSERT(latest == 4 && n == 4 && e[0].version == 1 && e[3].version == 4);
  free(e);
  write_text(lp, "junk\n");
  ASSERT_ERR(stitch_store_scan(dir, 0, &e, &n, &latest, &d), STITCH_EFORMAT,
             d, "latest: malformed");
  ASSERT_EQ(remove(lp), 0); /* none yet: nothing, and no error */
  ASSERT_OK(stitch_store_scan(dir, 0, &e, &n, &latest, &d), d);
  ASSERT(n == 0 && latest == 0);
}

/* With no chunk size given, the publisher cuts a small version into many
 * chunks (publish.c auto_chunk: 256 or more, 8 KiB at the least), and a
 * small checkpoint's delta into blocks that allow it: before, each of
 * these objects was one chunk of up to 512 KiB. */
static void test_auto_chunk(void) {
  stitch_publish_opts o = {0};
  test_publish_pull("store-auto", &o);
  stitch_diag d = {{0}};
  stitch_store *s;
  ASSERT_OK(stitch_store_open(at("store-auto"), &pk, 0, &s, &d), d);
  unsigned objects = 0;
  for (size_t i = 0; i < stitch_store_count(s); i++) {
    const stitch_manifest *m = stitch_store_at(s, i)->m;
    for (uint64_t k = 0; k < m->n_objects; k++) {
      const stitch_object *ob = &m->objects[k];
      if (ob->kind != STITCH_OBJ_ANCHOR)
        ASSERT(ob->block_log2 < 21); /* the encoder's default */
      for (uint64_t c = 0; c < ob->n_chunks; c++)
        ASSERT(ob->chunks[c].size <= (8u << 10) ||
               ob->chunks[c].n_blocks == 1);
      if (ob->bytes > (32u << 10)) {
        ASSERT(ob->n_chunks >= 2);
        objects++;
      }
    }
  }
  ASSERT(objects > 0);
  stitch_store_close(s);
}

int main(void) {
  snprintf(root, sizeof(root), "/tmp/stitch-store-XXXXXX");
  ASSERT(mkdtemp(root) != NULL);
  atexit(rm_root);
  test_rng r = test_rng_seeded("test_store", 42);
  ASSERT_EQ(stitch_keygen(&pk, &sk), 0);
  make_steps(&r);
  stitch_publish_opts o = {0};
  o.chunk_bytes = 4096;
  o.max_chain = 4;
  o.cumulative_every = 2;
  uint64_t small = test_publish_pull("store", &o);
  /* The fastest mode reaches the encoder: its deltas are RANS, at the
   * memoryless bound, larger than the default's (SPARSE here). */
  o.sparse_mode = STITCH_SPARSE_FASTEST;
  uint64_t fast = test_publish_pull("store-fastest", &o);
  printf("test_store: delta objects %" PRIu64 " B, %" PRIu64
         " B in the fastest mode\n", small, fast);
  ASSERT(fast > small);
  o.sparse_mode = 7; /* not a mode: refused */
  stitch_st *st = open_ckpt(at("w.st"));
  stitch_diag d = {{0}};
  stitch_publish_result res;
  ASSERT_ERR(stitch_publish(at("store-bad"), &sk, st, &o, &res, &d),
             STITCH_EINVAL, d, "unknown sparse mode 7");
  stitch_st_free(st);
  o.sparse_mode = 0;
  test_crash_points();
  test_refusals();
  test_retention();
  test_latest();
  test_scan();
  test_chain();
  test_bad_chunk();
  test_proven_chunk();
  test_unsynced_chunk();
  test_auto_chunk();
  test_sweep();
  printf("test_store: ok\n");
  return 0;
}
