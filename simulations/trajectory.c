/* trajectory.c: the versions a simulation publishes, chunked for real.
 *
 * A synthetic checkpoint of the scenario's size (BF16 tensors of at most
 * 16 MiB, or as many as versions.tensors says) moves like Adam at RL
 * learning rates: each step, a fraction `change` of the weights moves one
 * BF16 step up or down. Each step is published with stitch_publish, so
 * objects, chunk counts and sizes are what the trainer would ship.
 * Manifests and chunks are then held in memory once; simulated nodes
 * refer to chunks by index.
 *
 * Given a directory of steps instead (stitch-sim --steps DIR: stitch-synth's
 * step_0000.safetensors ..., which tools/netlab publishes for the same
 * file), version v publishes step v - 1 from there, so both drivers move
 * the same bytes. */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp */
#include "sim.h"

#include "stitch/safetensors.h"
#include "stitch/store.h"

#include <dirent.h>
#include <ftw.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TENSOR_MAX_BYTES (16u << 20)
#define ROW 1024 /* elements per row */

uint64_t sim_xorshift(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545f4914f6cdd1dull;
}

/* ---- The chunk table -------------------------------------------------- */

static size_t slot_of(const sim_chunks *t, const uint8_t h[32]) {
  uint64_t k;
  memcpy(&k, h, 8);
  size_t i = (size_t)k & (t->slot_cap - 1);
  while (t->slot[i] != 0 && memcmp(t->hash[t->slot[i] - 1], h, 32) != 0)
    i = (i + 1) & (t->slot_cap - 1);
  return i;
}

long sim_chunks_find(const sim_chunks *t, const uint8_t hash[32]) {
  if (t->slot_cap == 0)
    return -1;
  uint32_t s = t->slot[slot_of(t, hash)];
  return s == 0 ? -1 : (long)s - 1;
}

/* Adds a copy of BUF under HASH (a chunk already there is left alone). */
static int chunks_add(sim_chunks *t, const uint8_t hash[32],
                      const uint8_t *buf, size_t len) {
  if (sim_chunks_find(t, hash) >= 0)
    return 0;
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    void *h = realloc(t->hash, cap * sizeof(*t->hash));
    if (h != NULL)
      t->hash = h;
    void *b = realloc(t->buf, cap * sizeof(*t->buf));
    if (b != NULL)
      t->buf = b;
    void *l = realloc(t->len, cap * sizeof(*t->len));
    if (l != NULL)
      t->len = l;
    if (h == NULL || b == NULL || l == NULL)
      return -1;
    t->cap = cap;
  }
  if (2 * (t->n + 1) >= t->slot_cap) {
    free(t->slot);
    t->slot_cap = t->slot_cap ? t->slot_cap * 2 : 4096;
    t->slot = calloc(t->slot_cap, sizeof(*t->slot));
    if (t->slot == NULL)
      return -1;
    for (size_t i = 0; i < t->n; i++)
      t->slot[slot_of(t, t->hash[i])] = (uint32_t)(i + 1);
  }
  uint8_t *copy = malloc(len ? len : 1);
  if (copy == NULL)
    return -1;
  memcpy(copy, buf, len);
  memcpy(t->hash[t->n], hash, 32);
  t->buf[t->n] = copy;
  t->len[t->n] = len;
  t->slot[slot_of(t, hash)] = (uint32_t)(t->n + 1);
  t->n++;
  return 0;
}

/* ---- Publishing ------------------------------------------------------- */

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return NULL;
  uint8_t *b = NULL;
  long n;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0) {
    rewind(f);
    b = malloc((size_t)n + 1);
    if (b != NULL && fread(b, 1, (size_t)n, f) != (size_t)n) {
      free(b);
      b = NULL;
    }
    *len = (size_t)n;
  }
  fclose(f);
  return b;
}

static uint8_t *read_manifest(const char *dir, uint64_t v, size_t *len) {
  char mdir[600], prefix[32], path[900] = "";
  snprintf(mdir, sizeof(mdir), "%s/manifests", dir);
  snprintf(prefix, sizeof(prefix), "%020" PRIu64 "-", v);
  DIR *dp = opendir(mdir);
  if (dp == NULL)
    return NULL;
  struct dirent *de;
  while ((de = readdir(dp)) != NULL)
    if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
      snprintf(path, sizeof(path), "%s/%s", mdir, de->d_name);
  closedir(dp);
  return path[0] ? slurp(path, len) : NULL;
}

typedef struct weights {
  size_t n;         /* tensors */
  uint64_t elems;   /* per tensor */
  uint16_t **w;
  char (*name)[48]; /* "layers.%04zu.weight": room for any size_t */
} weights;

static int write_step(const weights *ws, const char *path, stitch_diag *d) {
  stitch_st_writer *w;
  int rc = stitch_st_writer_new(path, &w, d);
  if (rc != 0)
    return rc;
  uint64_t shape[2] = {ws->elems / ROW, ROW};
  for (size_t i = 0; rc == 0 && i < ws->n; i++)
    rc = stitch_st_writer_add(w, ws->name[i], STITCH_DT_BF16, 2, shape, d);
  if (rc == 0)
    rc = stitch_st_writer_map(w, d);
  for (size_t i = 0; rc == 0 && i < ws->n; i++)
    memcpy(stitch_st_writer_data(w, i), ws->w[i], ws->elems * 2);
  if (rc == 0)
    rc = stitch_st_writer_commit(w, d);
  stitch_st_writer_free(w);
  return rc;
}

static void weights_step(weights *ws, double change, uint64_t *rng) {
  uint64_t total = ws->n * ws->elems;
  uint64_t k = (uint64_t)(change * (double)total);
  for (uint64_t i = 0; i < k; i++) {
    uint64_t x = sim_xorshift(rng) % total;
    uint16_t *p = &ws->w[x / ws->elems][x % ws->elems];
    *p = (uint16_t)(*p + ((sim_xorshift(rng) & 1) ? 1 : -1));
  }
}

static int fail(stitch_diag *d, int rc, const char *what) {
  snprintf(d->msg, sizeof(d->msg), "%s", what);
  return rc;
}

static int load(const sim_scenario *sc, const char *dir, sim_trajectory *tr,
                stitch_diag *d) {
  stitch_pubkey pk;
  memcpy(pk.b, tr->swarm_pk, 32);
  stitch_store *st;
  int rc = stitch_store_open(dir, &pk, 0, &st, d);
  if (rc != 0)
    return rc;
  const stitch_vref *refs = stitch_store_at(st, 0);
  size_t n = stitch_store_count(st);
  for (unsigned v = 1; rc == 0 && v <= sc->versions; v++) {
    sim_version *sv = &tr->v[v];
    sv->version = v;
    sv->manifest = read_manifest(dir, v, &sv->manifest_len);
    if (sv->manifest == NULL)
      rc = fail(d, STITCH_ENOTFOUND, "a manifest is missing");
    stitch_plan plan;
    const stitch_vref *prev = v > 1 ? stitch_store_find(st, v - 1) : NULL;
    if (rc == 0)
      rc = stitch_plan_path(refs, n, v - 1, prev ? &prev->id : NULL, v, &plan,
                            d);
    if (rc != 0)
      break;
    sv->bytes = plan.bytes;
    for (size_t s = 0; s < plan.n; s++) {
      const stitch_vref *vr = stitch_store_find(st, plan.step[s].version);
      sv->chunks += vr->m->objects[plan.step[s].object].n_chunks;
    }
    const stitch_manifest *m = stitch_store_find(st, v)->m;
    size_t total = 0;
    for (uint64_t o = 0; o < m->n_objects; o++)
      total += m->objects[o].n_chunks;
    sv->all = malloc((total ? total : 1) * sizeof(*sv->all));
    if (sv->all == NULL)
      rc = fail(d, STITCH_ENOMEM, "chunk list: out of memory");
    for (uint64_t o = 0; rc == 0 && o < m->n_objects; o++)
      for (uint64_t c = 0; rc == 0 && c < m->objects[o].n_chunks; c++) {
        const stitch_digest *h = &m->objects[o].chunks[c].hash;
        const uint8_t *buf;
        size_t len;
        rc = stitch_store_get_chunk(st, h, &buf, &len, d);
        if (rc == 0) {
          if (chunks_add(&tr->chunks, h->b, buf, len) != 0)
            rc = fail(d, STITCH_ENOMEM, "chunk table: out of memory");
          else
            sv->all[sv->n_all++] = (uint32_t)sim_chunks_find(&tr->chunks,
                                                             h->b);
          stitch_store_release(buf, len);
        }
      }
  }
  stitch_store_close(st);
  return rc;
}

int sim_trajectory_make(const sim_scenario *sc, const char *steps_dir,
                        sim_trajectory *tr, char *err, size_t errlen) {
  memset(tr, 0, sizeof(*tr));
  tr->count = sc->versions;
  tr->v = calloc(sc->versions + 1, sizeof(*tr->v));
  uint64_t rng = sc->rng_seed * 0x9e3779b97f4a7c15ull + 7;
  uint8_t kseed[crypto_sign_SEEDBYTES];
  for (size_t i = 0; i < sizeof(kseed); i += 8) {
    uint64_t x = sim_xorshift(&rng);
    memcpy(kseed + i, &x, 8);
  }
  crypto_sign_seed_keypair(tr->swarm_pk, tr->swarm_sk, kseed);
  weights ws = {0};
  uint64_t elems_all = sc->version_bytes / 2;
  ws.n = steps_dir != NULL ? 0 /* no synthetic weights */
         : sc->tensors      ? sc->tensors
                            : (size_t)((sc->version_bytes + TENSOR_MAX_BYTES -
                                        1) / TENSOR_MAX_BYTES);
  ws.elems = ws.n ? elems_all / ws.n / ROW * ROW : 0;
  if (ws.elems == 0)
    ws.elems = ROW;
  ws.w = calloc(ws.n + 1, sizeof(*ws.w));
  ws.name = calloc(ws.n + 1, sizeof(*ws.name));
  char dir[] = "/tmp/stitch-sim-XXXXXX";
  int rc = tr->v == NULL || ws.w == NULL || ws.name == NULL ? -1 : 0;
  if (rc == 0 && mkdtemp(dir) == NULL)
    rc = -1;
  for (size_t i = 0; rc == 0 && i < ws.n; i++) {
    snprintf(ws.name[i], sizeof(ws.name[i]), "layers.%04zu.weight", i);
    ws.w[i] = malloc(ws.elems * 2);
    if (ws.w[i] == NULL) {
      rc = -1;
      break;
    }
    for (uint64_t e = 0; e < ws.elems; e++) /* |w| in [2^-7, 2^-1) */
      ws.w[i][e] = (uint16_t)((0x3c00 + sim_xorshift(&rng) % 0xc00) ^
                              ((sim_xorshift(&rng) & 1) << 15));
  }
  if (rc != 0)
    snprintf(err, errlen, "trajectory: out of memory or no temporary dir");
  tr->view_bytes = ws.n * ws.elems * 2;
  stitch_diag d = {{0}};
  char store[64], ckpt[4096];
  snprintf(store, sizeof(store), "%s/store", dir);
  snprintf(ckpt, sizeof(ckpt), "%s/step.safetensors", dir);
  stitch_seckey sk;
  memcpy(sk.b, tr->swarm_sk, 64);
  for (unsigned v = 1; rc == 0 && v <= sc->versions; v++) {
    if (steps_dir != NULL) {
      if (snprintf(ckpt, sizeof(ckpt), "%s/step_%04u.safetensors", steps_dir,
                   v - 1) >= (int)sizeof(ckpt)) {
        snprintf(err, errlen, "trajectory: --steps: path too long");
        rc = -1;
        break;
      }
    } else {
      if (v > 1)
        weights_step(&ws, sc->change, &rng);
      rc = write_step(&ws, ckpt, &d);
    }
    stitch_st *st = NULL;
    if (rc == 0)
      rc = stitch_st_open(ckpt, &st, &d);
    stitch_publish_opts o = {0};
    o.chunk_bytes = sc->chunk_bytes;
    o.threads = 2;
    o.keep = sc->versions + 1;
    o.time_unix = 1700000000 + v;
    stitch_publish_result res;
    if (rc == 0)
      rc = stitch_publish(store, &sk, st, &o, &res, &d);
    stitch_st_free(st);
    if (steps_dir == NULL)
      remove(ckpt);
    if (rc != 0)
      snprintf(err, errlen, "trajectory: version %u: %s%s%s", v,
               steps_dir != NULL ? ckpt : "", steps_dir != NULL ? ": " : "",
               d.msg);
  }
  if (rc == 0 && (rc = load(sc, store, tr, &d)) != 0)
    snprintf(err, errlen, "trajectory: %s", d.msg);
  for (size_t i = 0; ws.w != NULL && i < ws.n; i++)
    free(ws.w[i]);
  free(ws.w);
  free(ws.name);
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  return rc == 0 ? 0 : -1;
}

void sim_trajectory_free(sim_trajectory *tr) {
  for (unsigned v = 1; tr->v != NULL && v <= tr->count; v++)
    free(tr->v[v].manifest), free(tr->v[v].all);
  free(tr->v);
  for (size_t i = 0; i < tr->chunks.n; i++)
    free(tr->chunks.buf[i]);
  free(tr->chunks.hash);
  free(tr->chunks.buf);
  free(tr->chunks.len);
  free(tr->chunks.slot);
  memset(tr, 0, sizeof(*tr));
}
