/* score.c: peer scores and the greylist (score.h says why). */
#include "swarm/score.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const double weight[SCORE_N_] = {
    [SCORE_USEFUL] = 1.0,        [SCORE_REJECT] = -4.0,
    [SCORE_TIMEOUT] = -10.0,     [SCORE_LATE] = -2.0,
    [SCORE_STALL] = -10.0,       [SCORE_UNASKED] = -1.0,
    [SCORE_NO_VERSION] = -1.0,   [SCORE_STALE] = -0.05,
    [SCORE_DUP_MANIFEST] = -0.2, [SCORE_EMPTY] = -0.05,
    [SCORE_SILENT] = -100.0,     [SCORE_OUTRUN] = -4.0,
    [SCORE_PUNCH_FLOOD] = -1.0,
};

static const char *const ev_name[SCORE_N_] = {
    "useful", "reject",   "timeout", "late",  "stall",  "unasked",
    "no-version", "stale", "dup-manifest", "empty", "silent", "outrun",
    "punch-flood",
};

void score_init(score *sc, uint64_t now_ms) {
  memset(sc, 0, sizeof(*sc));
  sc->at_ms = now_ms;
}

double score_value(const score *sc, uint64_t now_ms) {
  if (now_ms <= sc->at_ms || sc->v == 0)
    return sc->v;
  return sc->v * exp2(-(double)(now_ms - sc->at_ms) / SCORE_HALF_LIFE_MS);
}

int score_add(score *sc, score_ev ev, uint64_t now_ms) {
  sc->v = score_value(sc, now_ms) + weight[ev];
  if (now_ms > sc->at_ms)
    sc->at_ms = now_ms;
  if (sc->v > SCORE_MAX)
    sc->v = SCORE_MAX;
  sc->n[ev]++;
  return sc->v < SCORE_DROP;
}

void score_describe(const score *sc, char *buf, size_t len) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < SCORE_N_ && k < len; i++)
    if (sc->n[i] != 0) {
      int w = snprintf(buf + k, len - k, "%s%s %u", k ? ", " : "",
                       ev_name[i], sc->n[i]);
      k += w > 0 ? (size_t)w : 0;
    }
}

/* ---- The greylist ----------------------------------------------------- */

void grey_add(greylist *g, const stitch_pubkey *key, const char *addr,
              uint64_t now_ms) {
  grey_entry *e = NULL;
  for (size_t i = 0; i < g->n && e == NULL; i++)
    if (memcmp(g->e[i].key.b, key->b, 32) == 0 || g->e[i].until_ms <= now_ms)
      e = &g->e[i]; /* its own entry again, or one expired */
  if (e == NULL && g->n < SCORE_GREY_MAX)
    e = &g->e[g->n++];
  if (e == NULL) { /* full: the entry that expires soonest makes room */
    e = &g->e[0];
    for (size_t i = 1; i < g->n; i++)
      if (g->e[i].until_ms < e->until_ms)
        e = &g->e[i];
  }
  e->key = *key;
  snprintf(e->addr, sizeof(e->addr), "%s", addr ? addr : "");
  e->until_ms = now_ms + SCORE_GREY_MS;
}

int grey_key(const greylist *g, const stitch_pubkey *key, uint64_t now_ms) {
  for (size_t i = 0; i < g->n; i++)
    if (g->e[i].until_ms > now_ms && memcmp(g->e[i].key.b, key->b, 32) == 0)
      return 1;
  return 0;
}

int grey_addr(const greylist *g, const char *addr, uint64_t now_ms) {
  if (addr == NULL || addr[0] == 0)
    return 0;
  for (size_t i = 0; i < g->n; i++)
    if (g->e[i].until_ms > now_ms && strcmp(g->e[i].addr, addr) == 0)
      return 1;
  return 0;
}
