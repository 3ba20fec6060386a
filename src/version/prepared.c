/* prepared.c: an engine's next version, prepared beside its tensors while
 * it serves, then committed in its pause (stitch/engine.h).
 *
 * Each tensor of the target manifest is in one of three states:
 *  - untouched: no step changes it;
 *  - listed: ascending element positions, new values and the old values
 *    they replace (8 + 2w bytes per change, w the element width);
 *  - whole: a private copy of its new bytes (and of its old ones, unless
 *    the tensors held nothing).
 * A step decodes each changed block into a worker's buffer that holds the
 * block's base: the engine's bytes with the tensor's list so far laid over
 * them (or, for a whole tensor, in place in its copy). The block's result is
 * compared with the engine's bytes, and the differing elements replace the
 * list's entries in the block's range: later steps override earlier ones,
 * and an element a later step puts back drops out of the list. So a plan of
 * several steps composes into one list, and its size is the number of
 * elements that differ between what the engine holds and the target.
 *
 * Memory is bounded by what changes: a block's list is at most its element
 * count, and a tensor whose list would outgrow its copy is made whole.
 * Anchors and tensors over version 0 are whole from the start (every byte
 * is new). Nothing here writes into the engine's memory before the commit.
 */
#define _GNU_SOURCE
#include "stitch/engine.h"

#include "common/bytes.h"
#include "common/diag.h"
#include "common/parallel.h"
#include "version/store_patch.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long ull;

typedef struct ptensor {
  const stitch_mtensor *mt; /* TO's manifest entry (only during prepare) */
  const uint8_t *live;      /* the engine's bytes */
  uint64_t nbytes;
  uint32_t w;
  uint64_t n; /* listed changes */
  uint64_t *pos;
  uint8_t *val, *old;
  uint8_t *whole, *whole_old;
} ptensor;

struct stitch_prepared {
  stitch_prepared_info info;
  ptensor *t;
  uint8_t **data; /* the addresses prepared against, checked at commit */
  int held_nothing;
};

/* One changed block's result: the elements in [e0, e1) that differ from the
 * engine's, or nothing for a whole tensor (decoded in place). */
typedef struct block_out {
  size_t ti;
  int failed; /* its decode failed */
  uint64_t e0, e1, n;
  uint64_t *pos;
  uint8_t *val, *old;
} block_out;

typedef struct step_job {
  stitch_prepared *p;
  const stitch_patch *patch;
  const size_t *map; /* step tensor -> TO tensor */
  block_out *out;
  size_t scratch; /* the patch's decode scratch, then the block buffer */
} step_job;

/* Elements of width W in [0, NE) where A and B differ: counted, or with
 * POS non-NULL also listed (positions from E0, A's values into VAL, B's
 * into OLD). Typed loops, so the count vectorizes. */
#define DIFF_LOOP(T)                                                          \
  do {                                                                        \
    for (uint64_t e = 0; e < ne; e++) {                                       \
      T x, y;                                                                 \
      memcpy(&x, a + e * sizeof(T), sizeof(T));                               \
      memcpy(&y, b + e * sizeof(T), sizeof(T));                               \
      if (pos == NULL) {                                                      \
        n += x != y;                                                          \
      } else if (x != y) {                                                    \
        pos[n] = e0 + e;                                                      \
        memcpy(val + n * sizeof(T), &x, sizeof(T));                           \
        memcpy(old + n * sizeof(T), &y, sizeof(T));                           \
        n++;                                                                  \
      }                                                                       \
    }                                                                         \
  } while (0)

static uint64_t diff(const uint8_t *a, const uint8_t *b, uint64_t ne,
                     uint32_t w, uint64_t e0, uint64_t *pos, uint8_t *val,
                     uint8_t *old) {
  uint64_t n = 0;
  switch (w) {
  case 1: DIFF_LOOP(uint8_t); break;
  case 2: DIFF_LOOP(uint16_t); break;
  case 4: DIFF_LOOP(uint32_t); break;
  default: DIFF_LOOP(uint64_t); break;
  }
  return n;
}

static void free_list(ptensor *t) {
  free(t->pos);
  free(t->val);
  free(t->old);
  t->pos = NULL;
  t->val = t->old = NULL;
  t->n = 0;
}

/* Makes tensor T whole: its bytes with its list laid over them, and a copy
 * of the old bytes unless the tensors held nothing. */
static int make_whole(ptensor *t, int keep_old, stitch_diag *d) {
  if (t->whole != NULL)
    return 0;
  size_t nb = (size_t)t->nbytes;
  t->whole = malloc(nb ? nb : 1);
  if (keep_old)
    t->whole_old = malloc(nb ? nb : 1);
  if (t->whole == NULL || (keep_old && t->whole_old == NULL)) {
    free(t->whole);
    free(t->whole_old);
    t->whole = t->whole_old = NULL;
    return stitch_diag_set(d, STITCH_ENOMEM,
                           "tensor '%s': out of memory for a %llu-byte copy",
                           t->mt->name, (ull)t->nbytes);
  }
  memcpy(t->whole, t->live, nb);
  if (keep_old)
    memcpy(t->whole_old, t->live, nb);
  for (uint64_t k = 0; k < t->n; k++)
    memcpy(t->whole + t->pos[k] * t->w, t->val + k * t->w, t->w);
  free_list(t);
  return 0;
}

static int decode_block(void *ctx, size_t k, uint8_t *scratch,
                        stitch_diag *d) {
  step_job *j = ctx;
  stitch_patch_block b;
  stitch_patch_block_at(j->patch, k, &b);
  size_t ti = j->map[b.tensor];
  ptensor *t = &j->p->t[ti];
  block_out *o = &j->out[k];
  o->ti = ti;
  o->failed = 1; /* until it decodes */
  if (t->whole != NULL) { /* blocks are disjoint: in place */
    CHECK_RC(stitch_patch_decode_block(j->patch, k, t->whole + b.byte_off,
                                       scratch, d));
    o->failed = 0;
    return 0;
  }
  uint32_t w = t->w; /* the block is aligned to it (checked) */
  uint64_t e0 = b.byte_off / w, e1 = (b.byte_off + b.byte_len) / w;
  uint8_t *buf = scratch + j->scratch;
  const uint8_t *live = t->live + b.byte_off;
  memcpy(buf, live, (size_t)b.byte_len);
  uint64_t lo = lower_bound_u64(t->pos, t->n, e0);
  for (uint64_t i = lo; i < t->n && t->pos[i] < e1; i++)
    memcpy(buf + (t->pos[i] - e0) * w, t->val + i * w, w);
  CHECK_RC(stitch_patch_decode_block(j->patch, k, buf, scratch, d));
  o->failed = 0;
  uint64_t ne = e1 - e0, n = diff(buf, live, ne, w, e0, NULL, NULL, NULL);
  o->e0 = e0;
  o->e1 = e1;
  o->n = n;
  if (n == 0)
    return 0;
  o->pos = malloc(n * sizeof(*o->pos));
  o->val = malloc(n * w);
  o->old = malloc(n * w);
  RETURN_IF(o->pos == NULL || o->val == NULL || o->old == NULL, d,
            STITCH_ENOMEM, "tensor '%s': out of memory for %llu changes",
            t->mt->name, (ull)n);
  diff(buf, live, ne, w, e0, o->pos, o->val, o->old);
  return 0;
}

static int cmp_out(const void *a, const void *b) {
  const block_out *x = a, *y = b;
  if (x->ti != y->ti)
    return x->ti < y->ti ? -1 : 1;
  return x->e0 < y->e0 ? -1 : x->e0 > y->e0;
}

/* Tensor T's list with the ranges of its blocks O[0..nb) replaced by
 * their results (sorted, disjoint). */
static int merge(ptensor *t, const block_out *o, size_t nb, stitch_diag *d) {
  uint64_t n = t->n, w = t->w;
  for (size_t b = 0; b < nb; b++) /* entries in the blocks' ranges go */
    n += o[b].n - (lower_bound_u64(t->pos, t->n, o[b].e1) -
                   lower_bound_u64(t->pos, t->n, o[b].e0));
  uint64_t *pos = malloc((n ? n : 1) * sizeof(*pos));
  uint8_t *val = malloc(n ? n * w : 1), *old = malloc(n ? n * w : 1);
  if (pos == NULL || val == NULL || old == NULL) {
    free(pos);
    free(val);
    free(old);
    return stitch_diag_set(d, STITCH_ENOMEM,
                           "tensor '%s': out of memory for %llu changes",
                           t->mt->name, (ull)n);
  }
  uint64_t m = 0, i = 0;
#define TAKE(P, V, O, K)                                                      \
  do {                                                                        \
    pos[m] = (P)[K];                                                          \
    memcpy(val + m * w, (V) + (K) * w, w);                                    \
    memcpy(old + m * w, (O) + (K) * w, w);                                    \
    m++;                                                                      \
  } while (0)
  for (size_t b = 0; b < nb; b++) {
    for (; i < t->n && t->pos[i] < o[b].e0; i++)
      TAKE(t->pos, t->val, t->old, i);
    for (; i < t->n && t->pos[i] < o[b].e1; i++)
      ; /* decoded again from them: the block's result holds them */
    for (uint64_t k = 0; k < o[b].n; k++)
      TAKE(o[b].pos, o[b].val, o[b].old, k);
  }
  for (; i < t->n; i++)
    TAKE(t->pos, t->val, t->old, i);
#undef TAKE
  free_list(t);
  t->pos = pos;
  t->val = val;
  t->old = old;
  t->n = m;
  return 0;
}

/* TO's tensor index of each of STEP's tensors, by name, with the same
 * dtype and shape. */
static int map_tensors(const stitch_manifest *to, const stitch_manifest *m,
                       size_t *map, stitch_diag *d) {
  for (uint64_t j = 0; j < m->n_tensors; j++) {
    const stitch_mtensor *a = &m->tensors[j];
    uint64_t i = j < to->n_tensors && strcmp(to->tensors[j].name, a->name) == 0
                     ? j
                     : to->n_tensors;
    for (uint64_t k = 0; i == to->n_tensors && k < to->n_tensors; k++)
      if (strcmp(to->tensors[k].name, a->name) == 0)
        i = k;
    RETURN_IF(i == to->n_tensors, d, STITCH_EMISMATCH,
              "version %llu has tensor '%s', which version %llu (and the "
              "engine) does not",
              (ull)m->version, a->name, (ull)to->version);
    const stitch_mtensor *b = &to->tensors[i];
    RETURN_IF(a->dtype != b->dtype || a->ndim != b->ndim ||
                  a->nbytes != b->nbytes ||
                  memcmp(a->shape, b->shape, sizeof(a->shape[0]) * a->ndim),
              d, STITCH_EMISMATCH,
              "tensor '%s': version %llu has another dtype or shape than "
              "version %llu",
              a->name, (ull)m->version, (ull)to->version);
    map[j] = (size_t)i;
  }
  return 0;
}

/* A block that does not decode, its chunks verified: the bytes it was
 * decoded against are not the delta's base (or the delta is damaged).
 * Reported as the digests would report it (STITCH_EDIGEST, BAD marking
 * the tensors), with the decoder's reason. */
static int undecodable(const stitch_prepared *p, const block_out *out,
                       uint64_t nb, uint64_t version, uint8_t *bad,
                       stitch_diag *d) {
  char why[STITCH_DIAG_MAX];
  snprintf(why, sizeof(why), "%s", d->msg);
  size_t first = SIZE_MAX;
  for (uint64_t k = 0; k < nb; k++) {
    if (!out[k].failed)
      continue;
    if (first == SIZE_MAX)
      first = out[k].ti;
    if (bad != NULL)
      bad[out[k].ti] = 1;
  }
  return stitch_diag_set(
      d, STITCH_EDIGEST,
      "version %llu: tensor '%s' does not decode against the engine's bytes "
      "(%.120s): the tensors do not hold version %llu as claimed, or the "
      "delta is damaged. Nothing was written",
      (ull)version, first != SIZE_MAX ? p->t[first].mt->name : "?", why,
      (ull)p->info.from);
}

static int prepare_step(stitch_prepared *p, const stitch_store *s,
                        const stitch_manifest *to, const stitch_plan_step *st,
                        unsigned threads, uint8_t *bad, stitch_diag *d) {
  const stitch_vref *vr = stitch_store_find(s, st->version);
  RETURN_IF(vr == NULL, d, STITCH_ENOTFOUND, "the store holds no version %llu",
            (ull)st->version);
  size_t *map = malloc((vr->m->n_tensors ? vr->m->n_tensors : 1) *
                       sizeof(*map));
  RETURN_IF(map == NULL, d, STITCH_ENOMEM, "out of memory");
  int rc = map_tensors(to, vr->m, map, d);
  store_patch sp = {0};
  if (rc == 0)
    rc = store_patch_open(s, vr, st->object, NULL, NULL, &sp, d);
  uint64_t nb = rc == 0 ? stitch_patch_block_count(sp.p) : 0;
  block_out *out = calloc(nb ? nb : 1, sizeof(*out));
  if (rc == 0 && out == NULL)
    rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  /* An anchor rewrites its tensors, and a block that splits an element
   * cannot be listed by element: those tensors are made whole. */
  int anchor = vr->m->objects[st->object].kind == STITCH_OBJ_ANCHOR;
  uint64_t big = 0;
  for (uint64_t k = 0; rc == 0 && k < nb; k++) {
    stitch_patch_block b;
    stitch_patch_block_at(sp.p, k, &b);
    ptensor *t = &p->t[map[b.tensor]];
    if (anchor || b.byte_off % t->w || b.byte_len % t->w)
      rc = make_whole(t, !p->held_nothing, d);
    big = b.byte_len > big ? b.byte_len : big;
  }
  if (rc == 0) {
    step_job j = {p, sp.p, map, out, stitch_patch_scratch_bytes(sp.p)};
    rc = stitch_parallel_diag((size_t)nb, threads, j.scratch + (size_t)big,
                              decode_block, &j, d);
    if (rc != 0 && rc != STITCH_ENOMEM)
      rc = undecodable(p, out, nb, st->version, bad, d);
  }
  if (rc == 0)
    qsort(out, (size_t)nb, sizeof(*out), cmp_out);
  for (uint64_t k = 0; rc == 0 && k < nb;) {
    uint64_t e = k;
    while (e < nb && out[e].ti == out[k].ti)
      e++;
    ptensor *t = &p->t[out[k].ti];
    if (t->whole == NULL) {
      rc = merge(t, out + k, (size_t)(e - k), d);
      /* A list past the size of the copies it stands for: make it whole. */
      uint64_t copies = t->nbytes * (p->held_nothing ? 1 : 2);
      if (rc == 0 && t->n * (8 + 2 * (uint64_t)t->w) > copies)
        rc = make_whole(t, !p->held_nothing, d);
    }
    k = e;
  }
  for (uint64_t k = 0; out != NULL && k < nb; k++) {
    free(out[k].pos);
    free(out[k].val);
    free(out[k].old);
  }
  free(out);
  free(map);
  store_patch_close(&sp);
  if (rc == 0) {
    p->info.blocks += nb;
    p->info.steps++;
  }
  return rc;
}

/* Every result's digest, streamed over the engine's bytes with the lists
 * laid over them, against TO's manifest. */
static int check_digests(stitch_prepared *p, const stitch_manifest *to,
                         unsigned threads, uint8_t *bad, stitch_diag *d) {
  size_t n = (size_t)to->n_tensors;
  stitch_tensor *ts = calloc(n ? n : 1, sizeof(*ts));
  const stitch_tensor **tp = calloc(n ? n : 1, sizeof(*tp));
  stitch_sparse *sp = calloc(n ? n : 1, sizeof(*sp));
  stitch_digest *got = calloc(n ? n : 1, sizeof(*got));
  int rc = ts && tp && sp && got ? 0
                                 : stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  for (size_t i = 0; rc == 0 && i < n; i++) {
    const ptensor *t = &p->t[i];
    ts[i] = (stitch_tensor){t->mt->name, t->mt->dtype, t->mt->ndim, {0}, 0,
                            t->nbytes, 0, t->whole ? t->whole : t->live};
    memcpy(ts[i].shape, t->mt->shape, sizeof(ts[i].shape));
    tp[i] = &ts[i];
    sp[i] = (stitch_sparse){t->n, t->w, t->pos, t->val};
  }
  if (rc == 0)
    rc = stitch_tensor_digests_patched(n, tp, sp, threads, got, d);
  size_t nbad = 0, first = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    int b = memcmp(got[i].b, to->tensors[i].digest.b, STITCH_DIGEST_BYTES) != 0;
    if (b && nbad++ == 0)
      first = i;
    if (bad != NULL)
      bad[i] = (uint8_t)b;
  }
  if (rc == 0 && nbad > 0)
    rc = stitch_diag_set(d, STITCH_EDIGEST,
                         "version %llu: %zu tensor(s) would not match the "
                         "manifest's digest (first: '%s'); the engine's "
                         "tensors do not hold version %llu as claimed. "
                         "Nothing was written",
                         (ull)to->version, nbad, to->tensors[first].name,
                         (ull)p->info.from);
  free(ts);
  free(tp);
  free(sp);
  free(got);
  return rc;
}

static int prepare(stitch_prepared *p, const stitch_store *s, uint64_t held,
                   const stitch_digest *held_id, uint64_t to,
                   const uint8_t *const *data, const uint64_t *nbytes,
                   unsigned threads, uint8_t *bad, stitch_diag *d) {
  RETURN_IF(held > 0 && held_id == NULL, d, STITCH_EINVAL,
            "the tensors hold version %llu, but no id was given", (ull)held);
  const stitch_vref *tv = stitch_store_find(s, to);
  RETURN_IF(tv == NULL, d, STITCH_ENOTFOUND, "the store holds no version %llu",
            (ull)to);
  const stitch_manifest *m = tv->m;
  size_t n = (size_t)m->n_tensors;
  if (bad != NULL)
    memset(bad, 0, n);
  p->info.from = held;
  p->info.to = to;
  p->info.to_id = tv->id;
  p->info.n_tensors = n;
  p->held_nothing = held == 0;
  p->t = calloc(n ? n : 1, sizeof(*p->t));
  p->data = calloc(n ? n : 1, sizeof(*p->data));
  RETURN_IF(p->t == NULL || p->data == NULL, d, STITCH_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    const stitch_mtensor *mt = &m->tensors[i];
    RETURN_IF(nbytes[i] != mt->nbytes, d, STITCH_EMISMATCH,
              "tensor '%s': the engine's is %llu bytes, version %llu's %llu",
              mt->name, (ull)nbytes[i], (ull)to, (ull)mt->nbytes);
    RETURN_IF(data[i] == NULL && mt->nbytes > 0, d, STITCH_EINVAL,
              "tensor '%s': no memory given", mt->name);
    size_t w = stitch_dtype_size(mt->dtype);
    p->t[i] = (ptensor){.mt = mt, .live = data[i], .nbytes = mt->nbytes,
                        .w = (w == 1 || w == 2 || w == 4 || w == 8) &&
                                     mt->nbytes % w == 0
                                 ? (uint32_t)w
                                 : 1};
    p->data[i] = (uint8_t *)data[i];
  }
  stitch_digest none = {{0}};
  stitch_plan plan;
  CHECK_RC(stitch_plan_path(stitch_store_at(s, 0), stitch_store_count(s), held,
                            held_id ? held_id : &none, to, &plan, d));
  p->info.fetched = plan.bytes;
  /* Over nothing, every tensor is new: whole from the start, decoded in
   * place, with nothing to revert to. */
  for (size_t i = 0; p->held_nothing && i < n; i++)
    CHECK_RC(make_whole(&p->t[i], 0, d));
  for (size_t k = 0; k < plan.n; k++)
    CHECK_RC(prepare_step(p, s, m, &plan.step[k], threads, bad, d));
  CHECK_RC(check_digests(p, m, threads, bad, d));
  for (size_t i = 0; i < n; i++) {
    const ptensor *t = &p->t[i];
    p->info.changes += t->n;
    p->info.whole += t->whole != NULL;
    p->info.old_bytes += t->n * t->w + (t->whole_old ? t->nbytes : 0);
    p->info.held_bytes += t->n * (8 + 2 * (uint64_t)t->w) +
                          (t->whole ? t->nbytes : 0) +
                          (t->whole_old ? t->nbytes : 0);
  }
  return 0;
}

void stitch_prepared_free(stitch_prepared *p) {
  if (p == NULL)
    return;
  for (size_t i = 0; p->t != NULL && i < p->info.n_tensors; i++) {
    free_list(&p->t[i]);
    free(p->t[i].whole);
    free(p->t[i].whole_old);
  }
  free(p->t);
  free(p->data);
  free(p);
}

int stitch_prepared_new(const stitch_store *s, uint64_t held,
                        const stitch_digest *held_id, uint64_t to,
                        const uint8_t *const *data, const uint64_t *nbytes,
                        unsigned threads, uint8_t *bad, stitch_prepared **out,
                        stitch_diag *d) {
  *out = NULL;
  stitch_prepared *p = calloc(1, sizeof(*p));
  RETURN_IF(p == NULL, d, STITCH_ENOMEM, "out of memory");
  int rc = prepare(p, s, held, held_id, to, data, nbytes, threads, bad, d);
  if (rc != 0) {
    stitch_prepared_free(p);
    return rc;
  }
  for (size_t i = 0; i < p->info.n_tensors; i++)
    p->t[i].mt = NULL; /* the store may close now */
  *out = p;
  return 0;
}

void stitch_prepared_summary(const stitch_prepared *p,
                             stitch_prepared_info *out) {
  *out = p->info;
}

void stitch_prepared_tensor_at(const stitch_prepared *p, size_t i,
                               stitch_prepared_tensor *out) {
  memset(out, 0, sizeof(*out));
  if (i >= p->info.n_tensors)
    return;
  const ptensor *t = &p->t[i];
  out->sp = (stitch_sparse){t->n, t->w, t->pos, t->val};
  out->old = t->old;
  out->whole = t->whole;
  out->whole_old = t->whole_old;
}

typedef struct write_job {
  const stitch_prepared *p;
  uint8_t *const *data;
  int revert;
} write_job;

#define SCATTER(T)                                                            \
  do {                                                                        \
    T *dst = (T *)(void *)data;                                               \
    const T *v = (const T *)(const void *)src;                                \
    for (uint64_t k = 0; k < t->n; k++)                                       \
      memcpy(&dst[t->pos[k]], &v[k], sizeof(T));                              \
  } while (0)

static int write_item(void *ctx, size_t i, unsigned worker) {
  write_job *j = ctx;
  (void)worker;
  const ptensor *t = &j->p->t[i];
  uint8_t *data = j->data[i];
  if (t->whole != NULL) {
    memcpy(data, j->revert ? t->whole_old : t->whole, (size_t)t->nbytes);
    return 0;
  }
  const uint8_t *src = j->revert ? t->old : t->val;
  switch (t->w) { /* typed, so the compiler moves words, not bytes */
  case 1: SCATTER(uint8_t); break;
  case 2: SCATTER(uint16_t); break;
  case 4: SCATTER(uint32_t); break;
  default: SCATTER(uint64_t); break;
  }
  return 0;
}

static int write_all(stitch_prepared *p, uint8_t *const *data,
                     unsigned threads, int revert, stitch_diag *d) {
  const char *what = revert ? "revert" : "commit";
  RETURN_IF(!revert && p->info.committed, d, STITCH_EINVAL,
            "version %llu: already committed", (ull)p->info.to);
  RETURN_IF(revert && !p->info.committed, d, STITCH_EINVAL,
            "version %llu: nothing to revert before a commit",
            (ull)p->info.to);
  RETURN_IF(revert && p->held_nothing && p->info.whole > 0, d, STITCH_EINVAL,
            "version %llu: the tensors held no version before the commit; "
            "there is nothing to revert to",
            (ull)p->info.to);
  for (size_t i = 0; i < p->info.n_tensors; i++)
    RETURN_IF(data[i] != p->data[i], d, STITCH_EMISMATCH,
              "%s of version %llu: tensor %zu is not at the address it was "
              "prepared at; prepare again",
              what, (ull)p->info.to, i);
  write_job j = {p, data, revert};
  /* No item fails: a commit that starts writing finishes. */
  (void)stitch_parallel_for(p->info.n_tensors, threads, write_item, &j, NULL);
  p->info.committed = !revert;
  return 0;
}

int stitch_prepared_commit(stitch_prepared *p, uint8_t *const *data,
                           unsigned threads, stitch_diag *d) {
  return write_all(p, data, threads, 0, d);
}

int stitch_prepared_revert(stitch_prepared *p, uint8_t *const *data,
                           unsigned threads, stitch_diag *d) {
  return write_all(p, data, threads, 1, d);
}
