/* digest.c: the leaf-tree tensor digest and the view digest.
 * Domain bytes keep leaves, tensor roots and views from ever colliding. */
#include "stitch/digest.h"

#include "common/bytes.h"
#include "common/diag.h"
#include "common/parallel.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* Bytes of leaf I of a tensor of NBYTES. */
static uint64_t leaf_len(uint64_t nbytes, uint64_t i) {
  uint64_t off = i * STITCH_DIGEST_LEAF;
  return nbytes - off < STITCH_DIGEST_LEAF ? nbytes - off : STITCH_DIGEST_LEAF;
}

/* Leaf I, whose N bytes are at BYTES (in the tensor, or a patched copy). */
static void leaf_hash_bytes(const uint8_t *bytes, uint64_t n, uint64_t i,
                            uint8_t out[STITCH_DIGEST_BYTES]) {
  uint8_t hdr[9] = {0x00};
  put_u64(hdr + 1, i);
  crypto_generichash_state leaf;
  crypto_generichash_init(&leaf, NULL, 0, STITCH_DIGEST_BYTES);
  crypto_generichash_update(&leaf, hdr, sizeof(hdr));
  crypto_generichash_update(&leaf, bytes, (unsigned long long)n);
  crypto_generichash_final(&leaf, out, STITCH_DIGEST_BYTES);
}

static void leaf_hash(const uint8_t *data, uint64_t nbytes, uint64_t i,
                      uint8_t out[STITCH_DIGEST_BYTES]) {
  leaf_hash_bytes(data + i * STITCH_DIGEST_LEAF, leaf_len(nbytes, i), i, out);
}

static uint64_t leaf_count(uint64_t nbytes) {
  return (nbytes + STITCH_DIGEST_LEAF - 1) / STITCH_DIGEST_LEAF;
}

/* The root over precomputed leaf hashes (or computed here when leaves is
 * NULL). */
static int tensor_root(stitch_dtype dtype, int ndim, const uint64_t *shape,
                       const uint8_t *data, uint64_t nbytes,
                       const uint8_t *leaves, stitch_digest *out) {
  if (ndim < 0 || ndim > STITCH_MAX_DIMS || stitch_dtype_size(dtype) == 0)
    return STITCH_EINVAL;
  crypto_generichash_state root;
  crypto_generichash_init(&root, NULL, 0, STITCH_DIGEST_BYTES);
  static const uint8_t tag[] = "\x01stitch-tensor-v1";
  crypto_generichash_update(&root, tag, sizeof(tag) - 1);
  const char *dn = stitch_dtype_name(dtype);
  crypto_generichash_update(&root, (const uint8_t *)dn, strlen(dn) + 1);
  uint8_t b8[8];
  uint8_t nd = (uint8_t)ndim;
  crypto_generichash_update(&root, &nd, 1);
  for (int i = 0; i < ndim; i++) {
    put_u64(b8, shape[i]);
    crypto_generichash_update(&root, b8, 8);
  }
  put_u64(b8, nbytes);
  crypto_generichash_update(&root, b8, 8);
  uint64_t nl = leaf_count(nbytes);
  for (uint64_t i = 0; i < nl; i++) {
    uint8_t lh[STITCH_DIGEST_BYTES];
    if (leaves != NULL)
      memcpy(lh, leaves + i * STITCH_DIGEST_BYTES, sizeof(lh));
    else
      leaf_hash(data, nbytes, i, lh);
    crypto_generichash_update(&root, lh, sizeof(lh));
  }
  crypto_generichash_final(&root, out->b, STITCH_DIGEST_BYTES);
  return 0;
}

int stitch_tensor_digest(stitch_dtype dtype, int ndim, const uint64_t *shape,
                         const uint8_t *data, uint64_t nbytes,
                         stitch_digest *out) {
  return tensor_root(dtype, ndim, shape, data, nbytes, NULL, out);
}

/* Leaves of all tensors, hashed on all CPUs; with SP, leaves that a change
 * falls in are hashed from a patched copy in the worker's scratch. */
typedef struct leaves_job {
  const stitch_tensor *const *t;
  const stitch_sparse *sp; /* NULL: nothing laid over */
  const uint64_t *first;   /* first leaf of each tensor; [n] = total */
  size_t n;
  uint8_t *out;
} leaves_job;

/* SCRATCH: STITCH_DIGEST_LEAF bytes, or NULL when there is no SP. */
static int hash_leaf(leaves_job *j, size_t item, uint8_t *scratch) {
  size_t lo = 0, hi = j->n; /* tensor holding leaf `item` */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (j->first[mid] <= item)
      lo = mid;
    else
      hi = mid;
  }
  const stitch_tensor *t = j->t[lo];
  uint64_t i = item - j->first[lo], len = leaf_len(t->nbytes, i);
  const uint8_t *src = t->data + i * STITCH_DIGEST_LEAF;
  const stitch_sparse *sp = j->sp != NULL ? &j->sp[lo] : NULL;
  if (sp != NULL && sp->n > 0) {
    /* A leaf is a whole number of elements: 2^20 is a multiple of every
     * width, and the width divides nbytes (checked). */
    uint64_t w = sp->width, e0 = i * (STITCH_DIGEST_LEAF / w), e1 = e0 + len / w;
    uint64_t k = lower_bound_u64(sp->pos, sp->n, e0);
    if (k < sp->n && sp->pos[k] < e1) {
      memcpy(scratch, src, len);
      for (; k < sp->n && sp->pos[k] < e1; k++)
        memcpy(scratch + (sp->pos[k] - e0) * w, sp->val + k * w, w);
      src = scratch;
    }
  }
  leaf_hash_bytes(src, len, i, j->out + item * STITCH_DIGEST_BYTES);
  return 0;
}

static int hash_leaf_item(void *ctx, size_t item, unsigned worker) {
  (void)worker;
  return hash_leaf(ctx, item, NULL);
}

static int hash_patched_item(void *ctx, size_t item, uint8_t *scratch,
                             stitch_diag *d) {
  (void)d;
  return hash_leaf(ctx, item, scratch);
}

/* Every list ascends strictly, stays within its tensor and has a width
 * that divides it, so hash_leaf may binary-search and write unchecked. */
static int check_sparse(size_t n, const stitch_tensor *const *t,
                        const stitch_sparse *sp, stitch_diag *d) {
  for (size_t i = 0; i < n; i++) {
    const stitch_sparse *s = &sp[i];
    if (s->n == 0)
      continue;
    char what[80];
    if (t[i]->name != NULL)
      snprintf(what, sizeof(what), "tensor '%.60s'", t[i]->name);
    else
      snprintf(what, sizeof(what), "tensor %zu", i);
    uint64_t w = s->width;
    RETURN_IF(w != 1 && w != 2 && w != 4 && w != 8, d, STITCH_EINVAL,
              "%s: element width %u is not 1, 2, 4 or 8", what, s->width);
    RETURN_IF(t[i]->nbytes % w != 0, d, STITCH_EINVAL,
              "%s: %llu bytes are not a whole number of %u-byte elements",
              what, (unsigned long long)t[i]->nbytes, s->width);
    RETURN_IF(s->pos == NULL || s->val == NULL, d, STITCH_EINVAL,
              "%s: %llu changes but no positions or values", what,
              (unsigned long long)s->n);
    uint64_t numel = t[i]->nbytes / w;
    for (uint64_t k = 0; k < s->n; k++) {
      RETURN_IF(k > 0 && s->pos[k] <= s->pos[k - 1], d, STITCH_EINVAL,
                "%s: change %llu is at element %llu, not after change %llu "
                "(element %llu): positions must ascend strictly",
                what, (unsigned long long)k, (unsigned long long)s->pos[k],
                (unsigned long long)k - 1, (unsigned long long)s->pos[k - 1]);
      RETURN_IF(s->pos[k] >= numel, d, STITCH_EINVAL,
                "%s: change %llu is at element %llu, past its %llu elements",
                what, (unsigned long long)k, (unsigned long long)s->pos[k],
                (unsigned long long)numel);
    }
  }
  return 0;
}

static int digests(size_t n, const stitch_tensor *const *t,
                   const stitch_sparse *sp, unsigned threads,
                   stitch_digest *out, stitch_diag *d) {
  if (sp != NULL)
    CHECK_RC(check_sparse(n, t, sp, d));
  uint64_t *first = malloc((n + 1) * sizeof(*first));
  if (first == NULL)
    return stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  first[0] = 0;
  for (size_t i = 0; i < n; i++)
    first[i + 1] = first[i] + leaf_count(t[i]->nbytes);
  uint8_t *leaves = malloc(first[n] ? first[n] * STITCH_DIGEST_BYTES : 1);
  int rc = leaves == NULL ? stitch_diag_set(d, STITCH_ENOMEM, "out of memory")
                          : 0;
  if (rc == 0) {
    leaves_job j = {t, sp, first, n, leaves};
    if (sp == NULL)
      rc = stitch_parallel_for((size_t)first[n], threads, hash_leaf_item, &j,
                               NULL);
    else /* a leaf-sized buffer per worker: the only copy made */
      rc = stitch_parallel_diag((size_t)first[n], threads, STITCH_DIGEST_LEAF,
                                hash_patched_item, &j, d);
  }
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = tensor_root(t[i]->dtype, t[i]->ndim, t[i]->shape, t[i]->data,
                     t[i]->nbytes, leaves + first[i] * STITCH_DIGEST_BYTES,
                     &out[i]);
  free(leaves);
  free(first);
  return rc;
}

int stitch_tensor_digests(size_t n, const stitch_tensor *const *t,
                          unsigned threads, stitch_digest *out) {
  return digests(n, t, NULL, threads, out, NULL);
}

int stitch_tensor_digests_patched(size_t n, const stitch_tensor *const *t,
                                  const stitch_sparse *sp, unsigned threads,
                                  stitch_digest *out, stitch_diag *d) {
  return digests(n, t, sp, threads, out, d);
}

int stitch_tensor_digest_patched(const stitch_tensor *t,
                                 const stitch_sparse *sp, stitch_digest *out,
                                 stitch_diag *d) {
  return digests(1, &t, sp, 1, out, d);
}

typedef struct named {
  const char *name;
  const stitch_digest *dg;
} named;

static int cmp_named(const void *a, const void *b) {
  return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

int stitch_view_digest_from(size_t n, const char *const *names,
                            const stitch_digest *tensor_digests,
                            stitch_digest *out) {
  named *v = malloc((n ? n : 1) * sizeof(*v));
  if (v == NULL)
    return STITCH_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    v[i].name = names[i];
    v[i].dg = &tensor_digests[i];
  }
  qsort(v, n, sizeof(*v), cmp_named);
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, STITCH_DIGEST_BYTES);
  static const uint8_t tag[] = "\x02stitch-view-v1";
  crypto_generichash_update(&h, tag, sizeof(tag) - 1);
  uint8_t b8[8];
  put_u64(b8, n);
  crypto_generichash_update(&h, b8, 8);
  for (size_t i = 0; i < n; i++) {
    size_t nl = strlen(v[i].name);
    uint8_t b4[4] = {(uint8_t)nl, (uint8_t)(nl >> 8), (uint8_t)(nl >> 16),
                     (uint8_t)(nl >> 24)};
    crypto_generichash_update(&h, b4, 4);
    crypto_generichash_update(&h, (const uint8_t *)v[i].name, nl);
    crypto_generichash_update(&h, v[i].dg->b, STITCH_DIGEST_BYTES);
  }
  crypto_generichash_final(&h, out->b, STITCH_DIGEST_BYTES);
  free(v);
  return 0;
}

int stitch_view_digest(const stitch_st *st, stitch_digest *out,
                       stitch_digest *per_tensor) {
  size_t n = stitch_st_count(st);
  stitch_digest *dg = per_tensor;
  const char **names = malloc((n ? n : 1) * sizeof(*names));
  const stitch_tensor **ts = malloc((n ? n : 1) * sizeof(*ts));
  if (dg == NULL)
    dg = malloc((n ? n : 1) * sizeof(*dg));
  int rc = names == NULL || ts == NULL || dg == NULL ? STITCH_ENOMEM : 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    ts[i] = stitch_st_tensor(st, i);
    names[i] = ts[i]->name;
  }
  if (rc == 0)
    rc = stitch_tensor_digests(n, ts, 0, dg);
  if (rc == 0)
    rc = stitch_view_digest_from(n, names, dg, out);
  free(names);
  free(ts);
  if (dg != per_tensor)
    free(dg);
  return rc;
}

void stitch_digest_hex(const stitch_digest *dg, char out[65]) {
  static const char hx[] = "0123456789abcdef";
  for (int i = 0; i < STITCH_DIGEST_BYTES; i++) {
    out[2 * i] = hx[dg->b[i] >> 4];
    out[2 * i + 1] = hx[dg->b[i] & 15];
  }
  out[64] = 0;
}
