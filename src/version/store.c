/* store.c: the content-addressed version store (proto/store.md).
 *
 *   DIR/swarm.pub                      the swarm's public key
 *   DIR/manifests/<v:020>-<id hex>     signed manifest bytes
 *   DIR/chunks/<hh>/<hash hex>         chunk bytes, hh = first two hex digits
 *   DIR/latest                         "<v> <id hex>\n"
 *
 * Every file appears whole (temporary, rename). Manifests and `latest` are
 * fsynced one by one (and their directory); chunks are not: a chunk is
 * named by its hash, so the publisher makes a version's chunks durable
 * together (stitch_store_sync) before it writes the manifest, and a node
 * writes them as they arrive and never trusts one after a crash without
 * hashing it (stitch_store_get_chunk_checked, the apply's own check). A
 * manifest is verified when it is added and again whenever the store is
 * opened; a chunk is hash-checked when it is added and by every reader that
 * decodes it. */
#define _GNU_SOURCE
#include "stitch/store.h"

#include "common/diag.h"
#include "common/fileio.h"
#include "version/proofs.h"
#include "version/store_patch.h"

#include <dirent.h>
#include <sodium.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define STORE_MAX_VERSIONS 4096

struct stitch_store {
  char *dir;
  stitch_pubkey swarm;
  stitch_vref *v; /* ascending by version; owns each m */
  size_t n, cap;
  uint64_t latest; /* what DIR/latest names (0: no such file) */
  chunk_proofs *proofs; /* the chunks checked since open (proofs.h) */
  uint8_t dirs[32];     /* chunks/<hh> known to exist, a bit each */
};

static char *path_join(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *p = malloc(la + lb + 2);
  if (p != NULL) {
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
  }
  return p;
}

static void hex_of(const stitch_digest *dg, char out[65]) {
  stitch_digest_hex(dg, out);
}

static int manifest_path(const stitch_store *s, uint64_t version,
                         const stitch_digest *id, char *out, size_t cap) {
  char hex[65];
  hex_of(id, hex);
  int n = snprintf(out, cap, "%s/manifests/%020" PRIu64 "-%s", s->dir,
                   version, hex);
  return n > 0 && (size_t)n < cap ? 0 : STITCH_ELIMIT;
}

static int chunk_path(const stitch_store *s, const stitch_digest *h,
                      char *out, size_t cap, int dir_only) {
  char hex[65];
  hex_of(h, hex);
  int n = dir_only ? snprintf(out, cap, "%s/chunks/%.2s", s->dir, hex)
                   : snprintf(out, cap, "%s/chunks/%.2s/%s", s->dir, hex, hex);
  return n > 0 && (size_t)n < cap ? 0 : STITCH_ELIMIT;
}

/* Inserts a verified manifest (taking ownership of m) in version order. */
static int hold(stitch_store *s, stitch_manifest *m, const stitch_digest *id,
                stitch_diag *d) {
  size_t i = s->n;
  while (i > 0 && s->v[i - 1].m->version > m->version)
    i--;
  if (i > 0 && s->v[i - 1].m->version == m->version) {
    int same = memcmp(s->v[i - 1].id.b, id->b, 32) == 0;
    stitch_manifest_free(m);
    RETURN_IF(!same, d, STITCH_EROLLBACK,
              "store holds version %" PRIu64 " under another id: a fork",
              s->v[i - 1].m->version);
    return 0;
  }
  RETURN_IF(s->n >= STORE_MAX_VERSIONS, d, STITCH_ELIMIT,
            "store holds more than %d versions", STORE_MAX_VERSIONS);
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    stitch_vref *nv = realloc(s->v, cap * sizeof(*nv));
    if (nv == NULL) {
      stitch_manifest_free(m);
      return stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
    }
    s->v = nv;
    s->cap = cap;
  }
  memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof(*s->v));
  s->v[i].m = m;
  s->v[i].id = *id;
  s->n++;
  return 0;
}

/* A manifest file's name: version and id, or 0 when it is not one. */
static int parse_manifest_name(const char *name, uint64_t *version,
                               stitch_digest *id) {
  char hex[65];
  int end = 0;
  if (sscanf(name, "%20" SCNu64 "-%64[0-9a-f]%n", version, hex, &end) != 2 ||
      name[end] != 0 || strlen(hex) != 64)
    return 0;
  for (int i = 0; i < 32; i++) {
    unsigned b;
    if (sscanf(hex + 2 * i, "%2x", &b) != 1)
      return 0;
    id->b[i] = (uint8_t)b;
  }
  return 1;
}

static int load_manifest(stitch_store *s, const char *name, stitch_diag *d) {
  uint64_t version;
  stitch_digest named;
  if (!parse_manifest_name(name, &version, &named))
    return 0; /* not ours: temporaries, editor files */
  char path[4096];
  snprintf(path, sizeof(path), "%s/manifests/%s", s->dir, name);
  stitch_map mp;
  CHECK_RC(stitch_map_open(path, &mp, d));
  stitch_manifest *m = NULL;
  stitch_digest id;
  int rc = stitch_manifest_open(mp.data, mp.len, &s->swarm, &m, &id, d);
  stitch_map_close(&mp);
  if (rc != 0)
    return stitch_diag_prefix(d, rc, path);
  char idhex[65];
  hex_of(&id, idhex);
  if (m->version != version || memcmp(id.b, named.b, 32) != 0) {
    stitch_manifest_free(m);
    return stitch_diag_set(d, STITCH_ECHECKSUM,
                           "%s: the name does not match the contents "
                           "(version %" PRIu64 ", id %.16s...)",
                           path, m->version, idhex);
  }
  return hold(s, m, &id, d);
}

static int read_latest(stitch_store *s, stitch_diag *d) {
  char *p = path_join(s->dir, "latest");
  RETURN_IF(p == NULL, d, STITCH_ENOMEM, "out of memory");
  FILE *f = fopen(p, "r");
  free(p);
  if (f == NULL)
    return errno == ENOENT ? 0
                           : stitch_diag_set(d, STITCH_EIO, "%s/latest: %s",
                                             s->dir, strerror(errno));
  uint64_t v = 0;
  char hex[65];
  int ok = fscanf(f, "%20" SCNu64 " %64[0-9a-f]", &v, hex) == 2;
  fclose(f);
  RETURN_IF(!ok, d, STITCH_EFORMAT, "%s/latest: malformed", s->dir);
  const stitch_vref *r = stitch_store_find(s, v);
  char idhex[65];
  if (r != NULL)
    hex_of(&r->id, idhex);
  RETURN_IF(r == NULL || strcmp(idhex, hex) != 0, d, STITCH_EFORMAT,
            "%s/latest names version %" PRIu64 ", which the store does "
            "not hold under that id",
            s->dir, v);
  s->latest = v;
  return 0;
}

static int check_swarm_file(stitch_store *s, int create, stitch_diag *d) {
  char *p = path_join(s->dir, "swarm.pub");
  RETURN_IF(p == NULL, d, STITCH_ENOMEM, "out of memory");
  stitch_pubkey pk;
  stitch_diag sub;
  int rc = stitch_pubkey_read(p, &pk, &sub);
  if (rc == STITCH_ENOTFOUND && create) {
    char hex[65], line[128];
    stitch_pubkey_hex(&s->swarm, hex);
    int n = snprintf(line, sizeof(line), "stitch-ed25519-public %s\n", hex);
    rc = stitch_write_file(p, line, (size_t)n, d);
  } else if (rc != 0) {
    if (d != NULL)
      *d = sub;
  } else if (memcmp(pk.b, s->swarm.b, sizeof(pk.b)) != 0) {
    char a[65], b[65];
    stitch_pubkey_hex(&pk, a);
    stitch_pubkey_hex(&s->swarm, b);
    rc = stitch_diag_set(d, STITCH_ESWARM,
                         "%s belongs to swarm %.16s..., not %.16s...",
                         s->dir, a, b);
  }
  free(p);
  return rc;
}

int stitch_store_open(const char *dir, const stitch_pubkey *swarm, int create,
                      stitch_store **out, stitch_diag *d) {
  *out = NULL;
  struct stat st;
  if (stat(dir, &st) != 0) {
    RETURN_IF(!create, d, STITCH_ENOTFOUND, "%s: no such store", dir);
    CHECK_RC(stitch_mkdir(dir, d));
  }
  stitch_store *s = calloc(1, sizeof(*s));
  RETURN_IF(s == NULL, d, STITCH_ENOMEM, "out of memory");
  s->swarm = *swarm;
  s->dir = strdup(dir);
  s->proofs = proofs_new(); /* NULL: every apply hashes, as before */
  char *mdir = path_join(dir, "manifests"), *cdir = path_join(dir, "chunks");
  int rc = s->dir && mdir && cdir ? 0 : STITCH_ENOMEM;
  if (rc == 0)
    rc = check_swarm_file(s, create, d);
  if (rc == 0 && create)
    rc = stitch_mkdir(mdir, d);
  if (rc == 0 && create)
    rc = stitch_mkdir(cdir, d);
  DIR *dh = rc == 0 ? opendir(mdir) : NULL;
  if (rc == 0 && dh == NULL)
    rc = stitch_diag_set(d, STITCH_EIO, "%s: %s", mdir, strerror(errno));
  for (struct dirent *e; rc == 0 && (e = readdir(dh)) != NULL;)
    if (e->d_name[0] != '.')
      rc = load_manifest(s, e->d_name, d);
  if (dh != NULL)
    closedir(dh);
  if (rc == 0)
    rc = read_latest(s, d);
  free(mdir);
  free(cdir);
  if (rc == STITCH_ENOMEM)
    stitch_diag_set(d, rc, "out of memory");
  if (rc != 0) {
    stitch_store_close(s);
    return rc;
  }
  *out = s;
  return 0;
}

void stitch_store_close(stitch_store *s) {
  if (s == NULL)
    return;
  for (size_t i = 0; i < s->n; i++)
    stitch_manifest_free((stitch_manifest *)s->v[i].m);
  free(s->v);
  free(s->dir);
  proofs_free(s->proofs);
  free(s);
}

/* A reader's target is the newest version whose signed manifest it
 * verified, not what `latest` names: `latest` is an unsigned file, and
 * moving it back by hand must not hold readers at an old version. Every
 * manifest is verified on open, and `latest` must name one of them, so
 * this is never below the pointer. */
uint64_t stitch_store_latest(const stitch_store *s) {
  return s->n > 0 ? s->v[s->n - 1].m->version : 0;
}
uint64_t stitch_store_latest_named(const stitch_store *s) { return s->latest; }
size_t stitch_store_count(const stitch_store *s) { return s->n; }
const stitch_vref *stitch_store_at(const stitch_store *s, size_t i) {
  return i < s->n ? &s->v[i] : NULL;
}

const stitch_vref *stitch_store_find(const stitch_store *s, uint64_t version) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->v[mid].m->version < version)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < s->n && s->v[lo].m->version == version ? &s->v[lo] : NULL;
}

int stitch_store_has_chunk(const stitch_store *s, const stitch_digest *hash) {
  char path[4096];
  struct stat st;
  return chunk_path(s, hash, path, sizeof(path), 0) == 0 &&
         stat(path, &st) == 0;
}

int stitch_store_put_chunk(stitch_store *s, const stitch_digest *hash,
                           const uint8_t *buf, size_t len, stitch_diag *d) {
  stitch_digest h;
  stitch_hash(buf, len, &h);
  RETURN_IF(memcmp(h.b, hash->b, 32) != 0, d, STITCH_ECHECKSUM,
            "chunk does not hash to its name");
  return store_put_named_chunk(s, hash, buf, len, d);
}

int store_put_named_chunk(stitch_store *s, const stitch_digest *hash,
                          const uint8_t *buf, size_t len, stitch_diag *d) {
  stitch_digest h;
  char path[4096];
  if (stitch_store_has_chunk(s, hash)) {
    /* Keep a good copy; replace one whose bytes went bad on disk. A
     * reader never removes a chunk (pull.c), so this put is how the
     * store's owner repairs it. Hashing here costs only on a repeated
     * put, which is rare. */
    const uint8_t *old;
    size_t old_len;
    int good = 0;
    if (stitch_store_get_chunk(s, hash, &old, &old_len, NULL) == 0) {
      stitch_hash(old, old_len, &h);
      good = memcmp(h.b, hash->b, 32) == 0;
      stitch_store_release(old, old_len);
    }
    if (good) {
      proofs_add(s->proofs, hash);
      return 0;
    }
  }
  RETURN_IF(chunk_path(s, hash, path, sizeof(path), 1) != 0, d, STITCH_ELIMIT,
            "store path too long");
  /* One mkdir per fan-out directory per handle, not one a chunk. */
  unsigned hh = hash->b[0];
  if (!(s->dirs[hh / 8] & (1u << (hh % 8)))) {
    CHECK_RC(stitch_mkdir(path, d));
    s->dirs[hh / 8] |= (uint8_t)(1u << (hh % 8));
  }
  chunk_path(s, hash, path, sizeof(path), 0);
  CHECK_RC(stitch_write_file_unsynced(path, buf, len, d));
  proofs_add(s->proofs, hash);
  return 0;
}

int stitch_store_sync(stitch_store *s, stitch_diag *d) {
  return stitch_syncfs(s->dir, d);
}

int stitch_store_get_chunk_checked(const stitch_store *s,
                                   const stitch_digest *hash,
                                   const uint8_t **buf, size_t *len,
                                   stitch_diag *d) {
  CHECK_RC(stitch_store_get_chunk(s, hash, buf, len, d));
  if (proofs_has(s->proofs, hash))
    return 0;
  stitch_digest h;
  stitch_hash(*buf, *len, &h);
  if (memcmp(h.b, hash->b, 32) != 0) {
    char hex[65];
    hex_of(hash, hex);
    stitch_store_release(*buf, *len);
    *buf = NULL;
    *len = 0;
    return stitch_diag_set(d, STITCH_ECHECKSUM,
                           "chunk %.16s... does not hash to its name", hex);
  }
  proofs_add(s->proofs, hash);
  return 0;
}

int store_chunk_proven(const stitch_store *s, const stitch_digest *hash) {
  return proofs_has(s->proofs, hash);
}

int stitch_store_get_chunk(const stitch_store *s, const stitch_digest *hash,
                           const uint8_t **buf, size_t *len, stitch_diag *d) {
  char path[4096], hex[65];
  RETURN_IF(chunk_path(s, hash, path, sizeof(path), 0) != 0, d, STITCH_ELIMIT,
            "store path too long");
  if (access(path, F_OK) != 0) {
    hex_of(hash, hex);
    return stitch_diag_set(d, STITCH_ENOTFOUND, "chunk %.16s... is missing",
                           hex);
  }
  stitch_map mp;
  CHECK_RC(stitch_map_open(path, &mp, d));
  *buf = mp.data;
  *len = mp.len;
  return 0;
}

void stitch_store_drop_chunk(const stitch_store *s, const stitch_digest *hash) {
  char path[4096];
  proofs_remove(s->proofs, hash);
  if (chunk_path(s, hash, path, sizeof(path), 0) == 0)
    unlink(path);
}

void stitch_store_release(const uint8_t *buf, size_t len) {
  stitch_map mp = {(uint8_t *)buf, len};
  stitch_map_close(&mp);
}

int stitch_store_put_manifest(stitch_store *s, const uint8_t *buf, size_t len,
                              stitch_diag *d) {
  stitch_manifest *m;
  stitch_digest id;
  CHECK_RC(stitch_manifest_open(buf, len, &s->swarm, &m, &id, d));
  const stitch_vref *had = stitch_store_find(s, m->version);
  if (had != NULL && memcmp(had->id.b, id.b, 32) == 0) {
    stitch_manifest_free(m);
    return 0;
  }
  if (had != NULL || m->version <= s->latest) {
    uint64_t v = m->version;
    stitch_manifest_free(m);
    return stitch_diag_set(d, STITCH_EROLLBACK,
                           "version %" PRIu64 " is at or below the latest "
                           "(%" PRIu64 ") under another id: rollback or fork",
                           v, s->latest);
  }
  char path[4096];
  int rc = manifest_path(s, m->version, &id, path, sizeof(path));
  if (rc == 0)
    rc = stitch_write_file(path, buf, len, d);
  if (rc != 0) {
    stitch_manifest_free(m);
    return rc;
  }
  return hold(s, m, &id, d);
}

int stitch_store_set_latest(stitch_store *s, uint64_t version,
                            stitch_diag *d) {
  const stitch_vref *r = stitch_store_find(s, version);
  RETURN_IF(r == NULL, d, STITCH_ENOTFOUND,
            "no version %" PRIu64 " in the store", version);
  RETURN_IF(version < s->latest, d, STITCH_EROLLBACK,
            "latest is %" PRIu64 "; it never moves back to %" PRIu64,
            s->latest, version);
  for (uint64_t o = 0; o < r->m->n_objects; o++)
    for (uint64_t c = 0; c < r->m->objects[o].n_chunks; c++)
      RETURN_IF(!stitch_store_has_chunk(s, &r->m->objects[o].chunks[c].hash),
                d, STITCH_ENOTFOUND,
                "version %" PRIu64 ": object %" PRIu64 " chunk %" PRIu64
                " is missing",
                version, o, c);
  char hex[65], line[128];
  hex_of(&r->id, hex);
  int n = snprintf(line, sizeof(line), "%" PRIu64 " %s\n", version, hex);
  char *p = path_join(s->dir, "latest");
  RETURN_IF(p == NULL, d, STITCH_ENOMEM, "out of memory");
  int rc = stitch_write_file(p, line, (size_t)n, d);
  free(p);
  if (rc == 0)
    s->latest = version;
  return rc;
}

/* ---- Retention -------------------------------------------------------- */

static int has_anchor(const stitch_manifest *m) {
  for (uint64_t o = 0; o < m->n_objects; o++)
    if (m->objects[o].kind == STITCH_OBJ_ANCHOR)
      return 1;
  return 0;
}

static int digest_from_hex(const char *hex, stitch_digest *out) {
  size_t n = 0;
  return sodium_hex2bin(out->b, sizeof(out->b), hex, 64, NULL, &n, NULL) ==
                 0 &&
                 n == sizeof(out->b)
             ? 0
             : -1;
}

static int cmp_digest(const void *a, const void *b) {
  return memcmp(a, b, sizeof(stitch_digest));
}

/* Removes chunk files under DIR/chunks that KEEP[0..nkeep) (sorted) does not
 * hold. */
static int sweep_chunks(stitch_store *s, const stitch_digest *keep,
                        size_t nkeep, stitch_diag *d) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/chunks", s->dir);
  DIR *top = opendir(path);
  RETURN_IF(top == NULL, d, STITCH_EIO, "%s: %s", path, strerror(errno));
  int rc = 0;
  for (struct dirent *e; rc == 0 && (e = readdir(top)) != NULL;) {
    if (e->d_name[0] == '.' || strlen(e->d_name) != 2)
      continue;
    char sub[4200];
    if (snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name) >=
        (int)sizeof(sub))
      continue;
    DIR *dh = opendir(sub);
    if (dh == NULL)
      continue;
    for (struct dirent *f; rc == 0 && (f = readdir(dh)) != NULL;) {
      stitch_digest h;
      int ok = strlen(f->d_name) == 64 && digest_from_hex(f->d_name, &h) == 0;
      if (!ok || bsearch(&h, keep, nkeep, sizeof(h), cmp_digest) != NULL)
        continue;
      char file[4400];
      if (snprintf(file, sizeof(file), "%s/%s", sub, f->d_name) >=
          (int)sizeof(file))
        continue;
      if (unlink(file) != 0 && errno != ENOENT)
        rc = stitch_diag_set(d, STITCH_EIO, "unlink %s: %s", file,
                             strerror(errno));
    }
    closedir(dh);
  }
  closedir(top);
  return rc;
}

int stitch_store_gc(stitch_store *s, unsigned keep, stitch_diag *d) {
  return stitch_store_retain(s, s->latest, keep, d);
}

int stitch_store_retain(stitch_store *s, uint64_t newest, unsigned keep,
                        stitch_diag *d) {
  if (s->n == 0 || newest == 0)
    return 0;
  keep = keep ? keep : 16;
  uint64_t start = newest > keep ? newest - keep + 1 : 1;
  /* Back to the newest anchor at or before the window's start. */
  size_t first = 0;
  for (size_t i = 0; i < s->n; i++)
    if (s->v[i].m->version <= start && has_anchor(s->v[i].m))
      first = i;
  /* Every chunk a kept version names stays, and so do newer versions. */
  size_t nkeep = 0, cap = 0;
  for (size_t i = first; i < s->n; i++)
    for (uint64_t o = 0; o < s->v[i].m->n_objects; o++)
      cap += s->v[i].m->objects[o].n_chunks;
  stitch_digest *kept = malloc((cap ? cap : 1) * sizeof(*kept));
  RETURN_IF(kept == NULL, d, STITCH_ENOMEM, "out of memory");
  for (size_t i = first; i < s->n; i++)
    for (uint64_t o = 0; o < s->v[i].m->n_objects; o++)
      for (uint64_t c = 0; c < s->v[i].m->objects[o].n_chunks; c++)
        kept[nkeep++] = s->v[i].m->objects[o].chunks[c].hash;
  qsort(kept, nkeep, sizeof(*kept), cmp_digest);
  int rc = 0;
  /* Manifests go first, so a crash never leaves a manifest without its
   * chunks. */
  for (size_t i = 0; i < first && rc == 0; i++) {
    char path[4096];
    manifest_path(s, s->v[i].m->version, &s->v[i].id, path, sizeof(path));
    rc = stitch_unlink_durable(path, d);
  }
  if (rc == 0) {
    for (size_t i = 0; i < first; i++)
      stitch_manifest_free((stitch_manifest *)s->v[i].m);
    memmove(s->v, s->v + first, (s->n - first) * sizeof(*s->v));
    s->n -= first;
    rc = sweep_chunks(s, kept, nkeep, d);
  }
  free(kept);
  return rc;
}

/* ---- Reading a store another process writes --------------------------- */

int stitch_store_read_manifest(const char *dir, uint64_t version,
                               const stitch_digest *id, uint8_t **out,
                               size_t *len, stitch_diag *d) {
  *out = NULL;
  *len = 0;
  char path[4096], hex[65];
  hex_of(id, hex);
  int n = snprintf(path, sizeof(path), "%s/manifests/%020" PRIu64 "-%s", dir,
                   version, hex);
  RETURN_IF(n < 0 || (size_t)n >= sizeof(path), d, STITCH_ELIMIT,
            "%.200s: store path too long", dir);
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return stitch_diag_set(d, errno == ENOENT ? STITCH_ENOTFOUND : STITCH_EIO,
                           "%.200s: %s", path, strerror(errno));
  struct stat st;
  int ok = fstat(fileno(f), &st) == 0 && st.st_size > 0 &&
           (uint64_t)st.st_size <= STITCH_MANIFEST_MAX;
  uint8_t *buf = ok ? malloc((size_t)st.st_size) : NULL;
  ok = buf != NULL &&
       fread(buf, 1, (size_t)st.st_size, f) == (size_t)st.st_size;
  fclose(f);
  if (!ok) {
    free(buf);
    return stitch_diag_set(d, STITCH_EIO, "%.200s: unreadable, empty or over "
                           "%u bytes", path, (unsigned)STITCH_MANIFEST_MAX);
  }
  *out = buf;
  *len = (size_t)st.st_size;
  return 0;
}

static int cmp_entry(const void *x, const void *y) {
  const stitch_store_entry *p = x, *q = y;
  return p->version < q->version ? -1 : p->version > q->version;
}

int stitch_store_scan(const char *dir, uint64_t after,
                      stitch_store_entry **out, size_t *n, uint64_t *latest,
                      stitch_diag *d) {
  *out = NULL;
  *n = 0;
  *latest = 0;
  char path[4096];
  snprintf(path, sizeof(path), "%s/latest", dir);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return errno == ENOENT ? 0
                           : stitch_diag_set(d, STITCH_EIO, "%.200s: %s", path,
                                             strerror(errno));
  uint64_t v = 0;
  int ok = fscanf(f, "%20" SCNu64, &v) == 1;
  fclose(f);
  RETURN_IF(!ok, d, STITCH_EFORMAT, "%.200s: malformed", path);
  *latest = v;
  if (v <= after)
    return 0;
  snprintf(path, sizeof(path), "%s/manifests", dir);
  DIR *dh = opendir(path);
  RETURN_IF(dh == NULL, d, STITCH_EIO, "%.200s: %s", path, strerror(errno));
  stitch_store_entry *e = NULL;
  size_t cnt = 0, cap = 0;
  int rc = 0;
  for (struct dirent *de; rc == 0 && (de = readdir(dh)) != NULL;) {
    stitch_store_entry x;
    if (!parse_manifest_name(de->d_name, &x.version, &x.id) ||
        x.version <= after || x.version > v)
      continue;
    if (cnt == cap) {
      size_t nc = cap ? 2 * cap : 16;
      stitch_store_entry *ne = realloc(e, nc * sizeof(*ne));
      if (ne == NULL) {
        rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
        break;
      }
      e = ne;
      cap = nc;
    }
    e[cnt++] = x;
  }
  closedir(dh);
  if (rc != 0) {
    free(e);
    return rc;
  }
  if (cnt > 0)
    qsort(e, cnt, sizeof(*e), cmp_entry);
  *out = e;
  *n = cnt;
  return 0;
}
