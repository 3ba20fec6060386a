/* test_prepared.c: the two-phase apply to an engine's memory (stitch/engine.h)
 * through the C API: prepare writes nothing; commit brings the memory to
 * the version bit-exactly, from nothing, one step and many steps; a plan of
 * many steps composes into one list of exactly the elements that differ;
 * revert puts the old version back; a wrong base is refused with the bad
 * tensors named and nothing written; wrong addresses and sizes, a second
 * commit and a revert before a commit are refused. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "ckpt_util.h"

#include <ftw.h>
#include <sys/stat.h>

#define STEPS 6
#define NT 4

static char root[64];

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}
static void rm_root(void) { nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static const char *names[NT] = {"model.w", "model.dense", "model.s",
                                "model.q"};
static const stitch_dtype dts[NT] = {STITCH_DT_BF16, STITCH_DT_BF16,
                                     STITCH_DT_F32, STITCH_DT_U8};
static const uint64_t shapes[NT][2] = {{64, 2048}, {3, 1000}, {500, 1},
                                       {16, 256}};
static uint64_t nbytes_of(int k) {
  return shapes[k][0] * shapes[k][1] * stitch_dtype_size(dts[k]);
}

/* step[s][k]: tensor k's bytes at step s (version s + 1). */
static uint8_t *step[STEPS][NT];

static void make_steps(test_rng *r) {
  for (int k = 0; k < NT; k++) {
    step[0][k] = malloc(nbytes_of(k));
    ASSERT(step[0][k] != NULL);
    for (uint64_t i = 0; i < nbytes_of(k); i++)
      step[0][k][i] = (uint8_t)test_rng_next(r);
  }
  for (int s = 1; s < STEPS; s++) {
    for (int k = 0; k < NT; k++) {
      step[s][k] = malloc(nbytes_of(k));
      ASSERT(step[s][k] != NULL);
      memcpy(step[s][k], step[s - 1][k], nbytes_of(k));
    }
    uint16_t *w = (uint16_t *)(void *)step[s][0];
    for (uint64_t k = 0; k < nbytes_of(0) / 2 / 100; k++) /* ~1% by 1 ulp */
      w[test_rng_next(r) % (nbytes_of(0) / 2)] += 1;
    if (s == 3) /* rewritten: its list would outgrow a copy */
      for (uint64_t i = 0; i < nbytes_of(1); i++)
        step[s][1][i] = (uint8_t)test_rng_next(r);
    float *f = (float *)(void *)step[s][2];
    for (int k = 0; k < 7; k++)
      f[test_rng_next(r) % 500] += 1.0f;
    step[s][3][test_rng_next(r) % nbytes_of(3)] ^= 0x11;
    if (s == 4) /* an element changed in 4 and put back in 5 */
      w[0] ^= 0x8000;
    if (s == 5)
      w[0] ^= 0x8000;
  }
}

static stitch_pubkey pk;
static stitch_seckey sk;
static char store_dir[128];

static void publish_all(void) {
  for (int s = 0; s < STEPS; s++) {
    tspec ts[NT];
    for (int k = 0; k < NT; k++)
      ts[k] = (tspec){names[k], dts[k], 2, {shapes[k][0], shapes[k][1]},
                      step[s][k]};
    char p[256];
    snprintf(p, sizeof(p), "%s/step%d.safetensors", root, s);
    write_ckpt(p, ts, NT, "{}");
    stitch_st *st = open_ckpt(p);
    stitch_diag d = {{0}};
    stitch_publish_result res;
    stitch_publish_opts o = {0};
    ASSERT_OK(stitch_publish(store_dir, &sk, st, &o, &res, &d), d);
    ASSERT_UEQ(res.version, (uint64_t)s + 1);
    stitch_st_free(st);
  }
}

/* An engine: one buffer per tensor, in TO's manifest order. */
typedef struct engine {
  uint8_t *data[NT];
  uint64_t nbytes[NT];
  int order[NT]; /* manifest index -> names[] index */
} engine;

static void engine_load(engine *e, const stitch_store *s, int from_step) {
  const stitch_manifest *m = stitch_store_find(s, STEPS)->m;
  ASSERT_UEQ(m->n_tensors, (uint64_t)NT);
  for (int i = 0; i < NT; i++) {
    int k = 0;
    while (strcmp(names[k], m->tensors[i].name) != 0)
      k++;
    e->order[i] = k;
    e->nbytes[i] = nbytes_of(k);
    if (e->data[i] == NULL)
      e->data[i] = malloc(e->nbytes[i]);
    ASSERT(e->data[i] != NULL);
    if (from_step < 0)
      memset(e->data[i], 0, e->nbytes[i]);
    else
      memcpy(e->data[i], step[from_step][k], e->nbytes[i]);
  }
}

static int engine_is(const engine *e, int s) {
  for (int i = 0; i < NT; i++)
    if (memcmp(e->data[i], step[s][e->order[i]], e->nbytes[i]) != 0)
      return 0;
  return 1;
}

static void engine_copy(const engine *e, engine *c) {
  for (int i = 0; i < NT; i++) {
    c->data[i] = malloc(e->nbytes[i]);
    ASSERT(c->data[i] != NULL);
    memcpy(c->data[i], e->data[i], e->nbytes[i]);
    c->nbytes[i] = e->nbytes[i];
    c->order[i] = e->order[i];
  }
}

static int engine_same(const engine *a, const engine *b) {
  for (int i = 0; i < NT; i++)
    if (memcmp(a->data[i], b->data[i], a->nbytes[i]) != 0)
      return 0;
  return 1;
}

static void engine_free(engine *e) {
  for (int i = 0; i < NT; i++)
    free(e->data[i]);
}

static stitch_prepared *prepare(const stitch_store *s, engine *e,
                                uint64_t held, uint64_t to) {
  stitch_diag d = {{0}};
  const stitch_vref *hv = held ? stitch_store_find(s, held) : NULL;
  stitch_prepared *p;
  ASSERT_OK(stitch_prepared_new(s, held, hv ? &hv->id : NULL, to,
                                (const uint8_t *const *)e->data, e->nbytes, 0,
                                NULL, &p, &d),
            d);
  return p;
}

/* Element-width differences between steps A and B of tensor K. */
static uint64_t differing(int a, int b, int k) {
  size_t w = stitch_dtype_size(dts[k]);
  uint64_t n = 0;
  for (uint64_t e = 0; e < nbytes_of(k) / w; e++)
    n += memcmp(step[a][k] + e * w, step[b][k] + e * w, w) != 0;
  return n;
}

/* Every list ascends, its old values are the engine's and its new ones
 * the target's. */
static void check_lists(const stitch_prepared *p, const engine *e, int to) {
  for (int i = 0; i < NT; i++) {
    stitch_prepared_tensor t;
    stitch_prepared_tensor_at(p, (size_t)i, &t);
    if (t.whole != NULL) {
      ASSERT_MEM_EQ(t.whole, step[to][e->order[i]], e->nbytes[i]);
      continue;
    }
    uint32_t w = t.sp.width;
    ASSERT_EQ(w, stitch_dtype_size(dts[e->order[i]]));
    for (uint64_t k = 0; k < t.sp.n; k++) {
      if (k > 0)
        ASSERT(t.sp.pos[k] > t.sp.pos[k - 1]);
      ASSERT_MEM_EQ(t.old + k * w, e->data[i] + t.sp.pos[k] * w, w);
      ASSERT_MEM_EQ(t.sp.val + k * w, step[to][e->order[i]] + t.sp.pos[k] * w,
                    w);
    }
  }
}

/* From nothing: every tensor whole, nothing to revert to. */
static void test_from_nothing(const stitch_store *s) {
  engine e, before;
  memset(&e, 0, sizeof(e));
  engine_load(&e, s, -1);
  engine_copy(&e, &before);
  stitch_prepared *p = prepare(s, &e, 0, STEPS);
  ASSERT(engine_same(&e, &before)); /* prepare wrote nothing */
  stitch_prepared_info in;
  stitch_prepared_summary(p, &in);
  ASSERT_UEQ(in.whole, (uint64_t)NT);
  ASSERT_UEQ(in.from, 0);
  ASSERT_UEQ(in.to, (uint64_t)STEPS);
  ASSERT_MEM_EQ(in.to_id.b, stitch_store_find(s, STEPS)->id.b, 32);
  check_lists(p, &e, STEPS - 1);
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_prepared_commit(p, e.data, 0, &d), d);
  ASSERT(engine_is(&e, STEPS - 1));
  ASSERT_ERR(stitch_prepared_revert(p, e.data, 0, &d), STITCH_EINVAL, d,
             "nothing to revert to");
  stitch_prepared_free(p);
  engine_free(&e);
  engine_free(&before);
}

/* One step, then revert, then commit again. */
static void test_one_step(const stitch_store *s) {
  engine e, before;
  memset(&e, 0, sizeof(e));
  engine_load(&e, s, 1); /* version 2 */
  engine_copy(&e, &before);
  stitch_diag d = {{0}};
  stitch_prepared *p = prepare(s, &e, 2, 3);
  ASSERT(engine_same(&e, &before));
  stitch_prepared_info in;
  stitch_prepared_summary(p, &in);
  ASSERT_UEQ(in.steps, 1);
  ASSERT_UEQ(in.whole, 0);
  uint64_t want = 0;
  for (int k = 0; k < NT; k++)
    want += differing(1, 2, k);
  ASSERT_UEQ(in.changes, want);
  check_lists(p, &e, 2);
  ASSERT_ERR(stitch_prepared_revert(p, e.data, 0, &d), STITCH_EINVAL, d,
             "before a commit");
  ASSERT_OK(stitch_prepared_commit(p, e.data, 1, &d), d);
  ASSERT(engine_is(&e, 2));
  ASSERT_ERR(stitch_prepared_commit(p, e.data, 0, &d), STITCH_EINVAL, d,
             "already committed");
  ASSERT_OK(stitch_prepared_revert(p, e.data, 0, &d), d);
  ASSERT(engine_same(&e, &before));
  ASSERT_OK(stitch_prepared_commit(p, e.data, 0, &d), d);
  ASSERT(engine_is(&e, 2));
  stitch_prepared_free(p);
  engine_free(&e);
  engine_free(&before);
}

/* Several steps compose into one list of the elements that differ between
 * the two versions (an element changed and put back is not in it); the
 * rewritten tensor is whole. */
static void test_many_steps(const stitch_store *s) {
  engine e, before;
  memset(&e, 0, sizeof(e));
  engine_load(&e, s, 0); /* version 1 */
  engine_copy(&e, &before);
  stitch_prepared *p = prepare(s, &e, 1, STEPS);
  ASSERT(engine_same(&e, &before));
  stitch_prepared_info in;
  stitch_prepared_summary(p, &in);
  ASSERT_GE(in.steps, 2); /* composed, not one cumulative object */
  ASSERT_UEQ(in.whole, 1); /* model.dense */
  uint64_t want = 0;
  for (int k = 0; k < NT; k++)
    if (k != 1)
      want += differing(0, STEPS - 1, k);
  ASSERT_UEQ(in.changes, want);
  check_lists(p, &e, STEPS - 1);
  uint64_t old = 0;
  for (int i = 0; i < NT; i++) {
    stitch_prepared_tensor t;
    stitch_prepared_tensor_at(p, (size_t)i, &t);
    old += t.sp.n * t.sp.width + (t.whole_old != NULL ? e.nbytes[i] : 0);
  }
  ASSERT_UEQ(in.old_bytes, old);
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_prepared_commit(p, e.data, 0, &d), d);
  ASSERT(engine_is(&e, STEPS - 1));
  ASSERT_OK(stitch_prepared_revert(p, e.data, 0, &d), d);
  ASSERT(engine_same(&e, &before));
  stitch_prepared_free(p);
  /* Nothing to do: no steps, nothing listed, the digests still checked. */
  engine_load(&e, s, STEPS - 1);
  p = prepare(s, &e, STEPS, STEPS);
  stitch_prepared_summary(p, &in);
  ASSERT_UEQ(in.steps, 0);
  ASSERT_UEQ(in.changes, 0);
  ASSERT_OK(stitch_prepared_commit(p, e.data, 0, &d), d);
  ASSERT(engine_is(&e, STEPS - 1));
  stitch_prepared_free(p);
  engine_free(&e);
  engine_free(&before);
}

static void test_refused(const stitch_store *s) {
  engine e, before;
  memset(&e, 0, sizeof(e));
  engine_load(&e, s, 1); /* version 2, but one scale is not */
  int si = 0;
  while (e.order[si] != 2)
    si++;
  e.data[si][5] ^= 0x01;
  engine_copy(&e, &before);
  const stitch_vref *v2 = stitch_store_find(s, 2);
  stitch_prepared *p = (stitch_prepared *)&e; /* must become NULL */
  uint8_t bad[NT];
  memset(bad, 7, sizeof(bad));
  stitch_diag d = {{0}};
  ASSERT_ERR(stitch_prepared_new(s, 2, &v2->id, STEPS,
                                 (const uint8_t *const *)e.data, e.nbytes, 0,
                                 bad, &p, &d),
             STITCH_EDIGEST, d, "1 tensor(s) would not match");
  ASSERT(strstr(d.msg, "'model.s'") != NULL);
  ASSERT(p == NULL);
  for (int i = 0; i < NT; i++)
    ASSERT_EQ(bad[i], i == si);
  ASSERT(engine_same(&e, &before));
  e.data[si][5] ^= 0x01;

  /* Sizes that are not the manifest's; a held version without its id. */
  e.nbytes[0]--;
  ASSERT_ERR(stitch_prepared_new(s, 2, &v2->id, STEPS,
                                 (const uint8_t *const *)e.data, e.nbytes, 0,
                                 NULL, &p, &d),
             STITCH_EMISMATCH, d, "bytes, version 6's");
  e.nbytes[0]++;
  ASSERT_ERR(stitch_prepared_new(s, 2, NULL, STEPS,
                                 (const uint8_t *const *)e.data, e.nbytes, 0,
                                 NULL, &p, &d),
             STITCH_EINVAL, d, "no id was given");
  ASSERT_ERR(stitch_prepared_new(s, 2, &v2->id, 1,
                                 (const uint8_t *const *)e.data, e.nbytes, 0,
                                 NULL, &p, &d),
             STITCH_EROLLBACK, d, "");

  /* Committed to another address: refused, nothing written anywhere. */
  p = prepare(s, &e, 2, STEPS);
  engine other;
  engine_copy(&e, &other);
  engine mixed = e;
  mixed.data[NT - 1] = other.data[NT - 1];
  ASSERT_ERR(stitch_prepared_commit(p, mixed.data, 0, &d), STITCH_EMISMATCH, d,
             "not at the address it was prepared at");
  ASSERT(engine_is(&e, 1));
  ASSERT(engine_is(&other, 1));
  stitch_prepared_free(p);
  stitch_prepared_free(NULL);
  engine_free(&other);
  engine_free(&e);
  engine_free(&before);
}

int main(void) {
  test_rng r = test_rng_seeded("test_prepared", 0x38);
  snprintf(root, sizeof(root), "/tmp/stitch-prepared-XXXXXX");
  ASSERT(mkdtemp(root) != NULL);
  atexit(rm_root);
  snprintf(store_dir, sizeof(store_dir), "%s/store", root);
  ASSERT_EQ(stitch_keygen(&pk, &sk), 0);
  make_steps(&r);
  publish_all();
  stitch_store *s;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_store_open(store_dir, &pk, 0, &s, &d), d);
  test_from_nothing(s);
  test_one_step(s);
  test_many_steps(s);
  test_refused(s);
  stitch_store_close(s);
  for (int i = 0; i < STEPS; i++)
    for (int k = 0; k < NT; k++)
      free(step[i][k]);
  printf("test_prepared: OK\n");
  return 0;
}
