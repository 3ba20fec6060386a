/* qlink.c: a link of the queues network as a calendar (qlink.h). */
#include "qlink.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void forget(qlink *l, double now) {
  size_t gone = 0;
  while (gone < l->n && l->b[gone].to <= now)
    gone++;
  if (gone == 0)
    return;
  memmove(l->b, l->b + gone, (l->n - gone) * sizeof(l->b[0]));
  l->n -= gone;
}

int qlink_book(qlink *l, double now, double bytes, double *start,
               double *end) {
  forget(l, now);
  double st = *start, took = (bytes + l->debt) / l->bps;
  size_t i = 0;
  for (; i < l->n; i++) { /* the first gap at or after st that fits */
    if (st + took <= l->b[i].from)
      break;
    if (l->b[i].to > st)
      st = l->b[i].to;
  }
  double to = st + took;
  /* [st, to) goes before b[i]: it may touch b[i - 1] and b[i], never
   * overlap them. */
  int left = i > 0 && l->b[i - 1].to >= st;
  int right = i < l->n && l->b[i].from <= to;
  if (left && right) {
    l->b[i - 1].to = l->b[i].to;
    memmove(l->b + i, l->b + i + 1, (l->n - i - 1) * sizeof(l->b[0]));
    l->n--;
  } else if (left) {
    l->b[i - 1].to = to;
  } else if (right) {
    l->b[i].from = st;
  } else {
    if (l->n == l->cap) {
      size_t cap = l->cap ? 2 * l->cap : 8;
      qlink_span *nb = realloc(l->b, cap * sizeof(*nb));
      if (nb == NULL)
        return -1;
      l->b = nb;
      l->cap = cap;
    }
    memmove(l->b + i + 1, l->b + i, (l->n - i) * sizeof(l->b[0]));
    l->b[i] = (qlink_span){st, to};
    l->n++;
  }
  *start = st;
  *end = fmax(*end, to);
  l->debt = 0;
  l->carried += bytes;
  return 0;
}

void qlink_charge(qlink *l, double t, double bytes) {
  l->carried += bytes;
  if (l->n > 0 && l->b[l->n - 1].to > t)
    l->debt += bytes;
}

double qlink_left(const qlink *l, double start, double end, double bytes) {
  double t = end - bytes / l->bps;
  return t > start ? t : start;
}

void qlink_free(qlink *l) {
  free(l->b);
  l->b = NULL;
  l->n = l->cap = 0;
}
