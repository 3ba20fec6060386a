/* list.c: decoded sparse deltas (positions with old and new values), and
 * the C reference of the apply kernel (kernels/apply.cu).
 *
 * A decoded list is what a node hands the GPU after the chunks are
 * verified: the codec's context-coded blocks are sequential per block, so
 * the host decodes them, and the device only scatters. Apply checks every
 * entry before it writes any, so a list for another base leaves the
 * weights untouched, as the kernel's two passes do. */
#include "gpu/gpu_internal.h"

#include "common/diag.h"

#include <stdio.h>
#include <stdlib.h>

size_t stitch_gpu_value_bytes(stitch_gpu_width w) {
  switch (w) {
  case STITCH_GPU_W4:
  case STITCH_GPU_W8: return 1;
  case STITCH_GPU_W16: return 2;
  case STITCH_GPU_W32: return 4;
  }
  return 0;
}

int gpu_elements(stitch_gpu_width w, uint64_t nbytes, uint64_t *n,
                 stitch_diag *d) {
  RETURN_IF(stitch_gpu_value_bytes(w) == 0, d, STITCH_EINVAL,
            "gpu: element width %d is not 4, 8, 16 or 32", (int)w);
  RETURN_IF(nbytes > (UINT64_MAX >> 4), d, STITCH_ELIMIT,
            "gpu: tensor of %llu bytes is too large",
            (unsigned long long)nbytes);
  RETURN_IF(w > 8 && nbytes % (w / 8) != 0, d, STITCH_EINVAL,
            "gpu: %llu bytes are not a whole number of %d-bit elements",
            (unsigned long long)nbytes, (int)w);
  *n = nbytes * 8 / (unsigned)w;
  return 0;
}

void stitch_gpu_list_free(stitch_gpu_list *l) {
  if (l == NULL)
    return;
  free(l->pos);
  free(l->old_v);
  free(l->new_v);
  l->pos = NULL;
  l->old_v = l->new_v = NULL;
  l->n = 0;
}

/* Grows L (host) to hold N entries in all. N never exceeds the tensor's
 * elements, which the callers check, so this is the list's cap. */
static int list_reserve(stitch_gpu_list *l, uint64_t n, stitch_diag *d) {
  size_t vb = stitch_gpu_value_bytes(l->width);
  RETURN_IF(n > SIZE_MAX / 8, d, STITCH_ENOMEM, "out of memory");
  size_t m = n ? (size_t)n : 1;
  uint64_t *pos = realloc(l->pos, m * 8);
  if (pos != NULL)
    l->pos = pos;
  uint8_t *ov = realloc(l->old_v, m * vb);
  if (ov != NULL)
    l->old_v = ov;
  uint8_t *nv = realloc(l->new_v, m * vb);
  if (nv != NULL)
    l->new_v = nv;
  RETURN_IF(pos == NULL || ov == NULL || nv == NULL, d, STITCH_ENOMEM,
            "out of memory");
  return 0;
}

static uint64_t count_diff(unsigned w, const uint8_t *a, const uint8_t *b,
                           uint64_t n) {
  uint64_t c = 0;
  if (w != 4) {
    size_t eb = w / 8;
    for (uint64_t i = 0; i < n; i++)
      c += memcmp(a + i * eb, b + i * eb, eb) != 0;
    return c;
  }
  for (uint64_t i = 0; i < n / 2; i++) {
    unsigned x = a[i] ^ b[i];
    c += (x & 15u) != 0;
    c += (x >> 4) != 0;
  }
  return c;
}

/* Appends the differences of elements [0, n) of A -> B, at offset BASE. */
static void append_diff(stitch_gpu_list *l, const uint8_t *a,
                        const uint8_t *b, uint64_t n, uint64_t base) {
  unsigned w = (unsigned)l->width;
  uint64_t k = l->n;
  for (uint64_t i = 0; i < n; i++) {
    uint32_t x = gm_ld(a, i, w), y = gm_ld(b, i, w);
    if (x == y)
      continue;
    l->pos[k] = base + i;
    gm_stv(l->old_v, k, w, x);
    gm_stv(l->new_v, k, w, y);
    k++;
  }
  l->n = k;
}

int stitch_gpu_list_diff(stitch_gpu_width w, const uint8_t *old,
                         const uint8_t *new_, uint64_t nbytes,
                         stitch_gpu_list *out, stitch_diag *d) {
  uint64_t n = 0;
  memset(out, 0, sizeof(*out));
  out->width = w;
  CHECK_RC(gpu_elements(w, nbytes, &n, d));
  int rc = list_reserve(out, count_diff((unsigned)w, old, new_, n), d);
  if (rc != 0) {
    stitch_gpu_list_free(out);
    return rc;
  }
  append_diff(out, old, new_, n, 0);
  return 0;
}

int stitch_gpu_list_from_patch(const stitch_patch *p, uint64_t tensor,
                               stitch_gpu_width w, const uint8_t *base,
                               uint64_t nbytes, stitch_gpu_list *out,
                               stitch_diag *d) {
  uint64_t ne = 0;
  memset(out, 0, sizeof(*out));
  out->width = w;
  CHECK_RC(gpu_elements(w, nbytes, &ne, d));
  uint8_t *scratch = malloc(stitch_patch_scratch_bytes(p) + 1);
  RETURN_IF(scratch == NULL, d, STITCH_ENOMEM, "out of memory");
  uint8_t *blk = NULL;
  int rc = 0;
  uint64_t nblocks = stitch_patch_block_count(p);
  for (uint64_t k = 0; k < nblocks && rc == 0; k++) {
    stitch_patch_block b;
    stitch_patch_block_at(p, k, &b);
    if (b.tensor != tensor)
      continue;
    if (b.byte_off > nbytes || b.byte_len > nbytes - b.byte_off ||
        (b.byte_off * 8) % (unsigned)w != 0 ||
        (b.byte_len * 8) % (unsigned)w != 0) {
      rc = stitch_diag_set(d, STITCH_EMISMATCH,
                           "gpu: block %llu (bytes %llu+%llu) does not fit a "
                           "tensor of %llu bytes at width %d",
                           (unsigned long long)k,
                           (unsigned long long)b.byte_off,
                           (unsigned long long)b.byte_len,
                           (unsigned long long)nbytes, (int)w);
      break;
    }
    uint8_t *nb = realloc(blk, b.byte_len ? (size_t)b.byte_len : 1);
    if (nb == NULL) {
      rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
      break;
    }
    blk = nb;
    memcpy(blk, base + b.byte_off, (size_t)b.byte_len);
    rc = stitch_patch_decode_block(p, k, blk, scratch, d);
    if (rc != 0)
      break;
    uint64_t n = b.byte_len * 8 / (unsigned)w;
    const uint8_t *was = base + b.byte_off;
    uint64_t c = count_diff((unsigned)w, was, blk, n);
    /* Blocks are disjoint and in tensor order, so out->n + c <= ne. */
    if (c != 0 && (rc = list_reserve(out, out->n + c, d)) == 0)
      append_diff(out, was, blk, n, b.byte_off * 8 / (unsigned)w);
  }
  free(blk);
  free(scratch);
  for (uint64_t i = 1; rc == 0 && i < out->n; i++)
    if (out->pos[i] <= out->pos[i - 1])
      rc = stitch_diag_set(d, STITCH_EMISMATCH,
                           "gpu: the patch's blocks overlap or are out of "
                           "order at element %llu",
                           (unsigned long long)out->pos[i]);
  if (rc != 0)
    stitch_gpu_list_free(out);
  return rc;
}

int gpu_apply_error(const stitch_gpu_list *l, uint64_t bad_pos,
                    uint64_t bad_base, stitch_diag *d) {
  if (bad_pos != UINT64_MAX)
    return stitch_diag_set(
        d, STITCH_EINVAL,
        "apply: entry %llu of %llu has a position outside the tensor or not "
        "after the one before it; nothing was written",
        (unsigned long long)bad_pos, (unsigned long long)l->n);
  if (bad_base != UINT64_MAX)
    return stitch_diag_set(
        d, STITCH_EBASE,
        "apply: entry %llu of %llu expects another old value at its "
        "position: the tensor is not the delta's base; nothing was written",
        (unsigned long long)bad_base, (unsigned long long)l->n);
  return 0;
}

/* The first bad position and first base mismatch of L against DATA (NE
 * elements), each UINT64_MAX when there is none. Writes nothing. */
static void ref_check(const stitch_gpu_list *l, const uint8_t *data,
                      uint64_t ne, uint64_t *bad_pos, uint64_t *bad_base) {
  unsigned w = (unsigned)l->width;
  *bad_pos = *bad_base = UINT64_MAX;
  for (uint64_t i = 0; i < l->n; i++) {
    uint64_t p = l->pos[i];
    if (p >= ne || (i > 0 && l->pos[i - 1] >= p)) {
      if (*bad_pos == UINT64_MAX)
        *bad_pos = i;
    } else if (l->old_v != NULL && *bad_base == UINT64_MAX &&
               gm_ld(data, p, w) != gm_ldv(l->old_v, i, w)) {
      *bad_base = i;
    }
  }
}

/* Writes L's new values into DATA, once ref_check found nothing. */
static void ref_write(const stitch_gpu_list *l, uint8_t *data) {
  unsigned w = (unsigned)l->width;
  for (uint64_t i = 0; i < l->n; i++) {
    uint64_t p = l->pos[i];
    uint32_t v = gm_ldv(l->new_v, i, w);
    if (w == 4) {
      unsigned sh = (unsigned)(p & 1) * 4;
      data[p >> 1] = (uint8_t)((data[p >> 1] & ~(15u << sh)) | v << sh);
    } else {
      gm_st(data, p, w, v);
    }
  }
}

static int list_args(const stitch_gpu_list *l, uint64_t nbytes, uint64_t *ne,
                     stitch_diag *d) {
  RETURN_IF(l == NULL || (l->n != 0 && (l->pos == NULL || l->new_v == NULL)),
            d, STITCH_EINVAL, "apply: missing list");
  return gpu_elements(l->width, nbytes, ne, d);
}

int stitch_gpu_ref_apply(const stitch_gpu_list *l, uint8_t *data,
                         uint64_t nbytes, stitch_diag *d) {
  uint64_t ne = 0, bad_pos, bad_base;
  CHECK_RC(list_args(l, nbytes, &ne, d));
  ref_check(l, data, ne, &bad_pos, &bad_base);
  CHECK_RC(gpu_apply_error(l, bad_pos, bad_base, d));
  ref_write(l, data);
  return 0;
}

/* ---- Batches ------------------------------------------------------------ */

typedef struct {
  uintptr_t lo, hi; /* [lo, hi) */
  size_t k;
} span;

static int span_cmp(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int gpu_batch_args(const stitch_gpu_list *lists, uint8_t *const *data,
                   const uint64_t *nbytes, size_t n, stitch_diag *d) {
  RETURN_IF(n != 0 && (lists == NULL || data == NULL || nbytes == NULL), d,
            STITCH_EINVAL, "apply: missing lists, tensors or sizes");
  RETURN_IF(n > UINT32_MAX, d, STITCH_ELIMIT,
            "apply: %zu lists in one batch (at most %u)", n, UINT32_MAX);
  size_t m = 0;
  span *sp = malloc((n ? n : 1) * sizeof(*sp));
  RETURN_IF(sp == NULL, d, STITCH_ENOMEM, "out of memory");
  int rc = 0;
  for (size_t k = 0; k < n && rc == 0; k++) {
    uint64_t ne;
    char what[32];
    if ((rc = list_args(&lists[k], nbytes[k], &ne, d)) != 0) {
      snprintf(what, sizeof(what), "list %zu", k);
      rc = stitch_diag_prefix(d, rc, what);
    } else if (lists[k].n != 0 && nbytes[k] != 0) {
      if (data[k] == NULL) {
        rc = stitch_diag_set(d, STITCH_EINVAL, "apply: list %zu: no tensor",
                             k);
      } else {
        sp[m].lo = (uintptr_t)data[k];
        sp[m].hi = sp[m].lo + (uintptr_t)nbytes[k];
        sp[m++].k = k;
      }
    }
  }
  if (rc == 0 && m > 1) {
    qsort(sp, m, sizeof(*sp), span_cmp);
    for (size_t i = 1; i < m && rc == 0; i++)
      if (sp[i].lo < sp[i - 1].hi)
        rc = stitch_diag_set(d, STITCH_EINVAL,
                             "apply: the tensors of lists %zu and %zu overlap;"
                             " nothing was written",
                             sp[i - 1].k, sp[i].k);
  }
  free(sp);
  return rc;
}

int gpu_batch_error(const stitch_gpu_list *lists, size_t k, uint64_t bad_pos,
                    uint64_t bad_base, stitch_diag *d) {
  char what[32];
  int rc = gpu_apply_error(&lists[k], bad_pos, bad_base, d);
  if (rc == 0)
    return 0;
  snprintf(what, sizeof(what), "list %zu", k);
  return stitch_diag_prefix(d, rc, what);
}

int gpu_batch_segs(const stitch_gpu_list *lists, uint8_t *const *data,
                   const uint64_t *nbytes, size_t n, gm_seg *segs,
                   size_t *idx, uint32_t *ns, uint64_t *total,
                   uint64_t *words, uint32_t *any_checked,
                   uint32_t *any_plain, stitch_diag *d) {
  uint64_t next = 0;
  *ns = *any_checked = *any_plain = 0;
  *total = *words = 0;
  for (size_t k = 0; k < n; k++) {
    const stitch_gpu_list *l = &lists[k];
    gm_seg *q = &segs[*ns];
    if (l->n == 0)
      continue;
    CHECK_RC(gpu_elements(l->width, nbytes[k], &q->ne, d));
    q->pos = l->pos;
    q->oldv = l->old_v;
    q->newv = l->new_v;
    q->data = data[k];
    q->n = l->n;
    q->w = (uint32_t)l->width;
    q->checked = l->old_v != NULL && q->w != 4;
    q->start = next;
    q->mask = *words;
    *total = q->start + q->n;
    next = (*total + 31) / 32 * 32;
    if (q->checked)
      *words += (q->n + 31) / 32;
    *any_checked |= q->checked;
    *any_plain |= !q->checked;
    idx[(*ns)++] = k;
  }
  return 0;
}

int stitch_gpu_ref_apply_batch(const stitch_gpu_list *lists,
                               uint8_t *const *data, const uint64_t *nbytes,
                               size_t n, stitch_diag *d) {
  CHECK_RC(gpu_batch_args(lists, data, nbytes, n, d));
  for (size_t k = 0; k < n; k++) { /* every list checked, then written */
    uint64_t ne = 0, bad_pos, bad_base;
    (void)gpu_elements(lists[k].width, nbytes[k], &ne, NULL);
    ref_check(&lists[k], data[k], ne, &bad_pos, &bad_base);
    CHECK_RC(gpu_batch_error(lists, k, bad_pos, bad_base, d));
  }
  for (size_t k = 0; k < n; k++)
    ref_write(&lists[k], data[k]);
  return 0;
}
