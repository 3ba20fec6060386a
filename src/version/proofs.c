/* proofs.c: an open-addressed set of chunk names (proofs.h). The names
 * are BLAKE2b digests, uniform already, so their first 8 bytes are the
 * slot; linear probing, and deletion by shifting the run back (no
 * tombstones). */
#include "version/proofs.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct chunk_proofs {
  pthread_mutex_t mu;
  stitch_digest *slot; /* all-zero: empty (no chunk hashes to zero) */
  size_t n, cap;       /* cap: a power of two, or 0 */
};

static const stitch_digest empty;

static size_t home(const stitch_digest *h, size_t cap) {
  uint64_t v;
  memcpy(&v, h->b, sizeof(v));
  return (size_t)v & (cap - 1);
}

static int is_empty(const stitch_digest *h) {
  return memcmp(h->b, empty.b, sizeof(h->b)) == 0;
}

/* The slot holding H, or the empty one where it would go. */
static size_t find(const chunk_proofs *ps, const stitch_digest *h) {
  size_t i = home(h, ps->cap);
  while (!is_empty(&ps->slot[i]) &&
         memcmp(ps->slot[i].b, h->b, sizeof(h->b)) != 0)
    i = (i + 1) & (ps->cap - 1);
  return i;
}

static int grow(chunk_proofs *ps) {
  size_t cap = ps->cap ? ps->cap * 2 : 1024;
  stitch_digest *old = ps->slot;
  size_t old_cap = ps->cap;
  ps->slot = calloc(cap, sizeof(*ps->slot));
  if (ps->slot == NULL) {
    ps->slot = old;
    return -1;
  }
  ps->cap = cap;
  for (size_t i = 0; i < old_cap; i++)
    if (!is_empty(&old[i]))
      ps->slot[find(ps, &old[i])] = old[i];
  free(old);
  return 0;
}

chunk_proofs *proofs_new(void) {
  chunk_proofs *ps = calloc(1, sizeof(*ps));
  if (ps != NULL && pthread_mutex_init(&ps->mu, NULL) != 0) {
    free(ps);
    ps = NULL;
  }
  return ps;
}

void proofs_free(chunk_proofs *ps) {
  if (ps == NULL)
    return;
  pthread_mutex_destroy(&ps->mu);
  free(ps->slot);
  free(ps);
}

void proofs_add(chunk_proofs *ps, const stitch_digest *h) {
  if (ps == NULL || is_empty(h))
    return;
  pthread_mutex_lock(&ps->mu);
  /* At most half full, so every probe ends at an empty slot. */
  if (ps->n < PROOFS_MAX && (2 * (ps->n + 1) <= ps->cap || grow(ps) == 0)) {
    size_t i = find(ps, h);
    if (is_empty(&ps->slot[i])) {
      ps->slot[i] = *h;
      ps->n++;
    }
  }
  pthread_mutex_unlock(&ps->mu);
}

void proofs_remove(chunk_proofs *ps, const stitch_digest *h) {
  if (ps == NULL)
    return;
  pthread_mutex_lock(&ps->mu);
  if (ps->cap > 0) {
    size_t i = find(ps, h);
    if (!is_empty(&ps->slot[i])) {
      /* Shift back every later entry of the run that may sit at or before
       * the hole, so that no probe stops short of it. */
      size_t mask = ps->cap - 1;
      for (size_t j = (i + 1) & mask; !is_empty(&ps->slot[j]);
           j = (j + 1) & mask) {
        size_t k = home(&ps->slot[j], ps->cap);
        if (((j - k) & mask) >= ((j - i) & mask)) {
          ps->slot[i] = ps->slot[j];
          i = j;
        }
      }
      ps->slot[i] = empty;
      ps->n--;
    }
  }
  pthread_mutex_unlock(&ps->mu);
}

int proofs_has(chunk_proofs *ps, const stitch_digest *h) {
  if (ps == NULL)
    return 0;
  pthread_mutex_lock(&ps->mu);
  int has = ps->cap > 0 && !is_empty(&ps->slot[find(ps, h)]);
  pthread_mutex_unlock(&ps->mu);
  return has;
}
