/* punch.c: hole punching through a common neighbour (punch.h; docs/swarm.md
 * "Hole punching"; proto/wire.md "PUNCH"). Three roles: the asker (A,
 * behind a NAT, wants links to others behind one), the relay (R, linked to
 * both) and the one asked (B). The relay passes on only what two of its
 * own ready neighbours say, with the address each one's link to it comes
 * from: whatever a member claims, an honest node dials only where the
 * relay saw an authenticated member. */
#include "swarm/core_internal.h"
#include "swarm/scope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int zero_key(const stitch_pubkey *k) {
  static const stitch_pubkey zero;
  return memcmp(k->b, zero.b, sizeof(zero.b)) == 0;
}

static int same_key(const stitch_pubkey *a, const stitch_pubkey *b) {
  return memcmp(a->b, b->b, sizeof(a->b)) == 0;
}

/* A ready neighbour that advertises no address (behind a NAT), not the
 * seed: one a punch can be for. */
static int nated(const peer *p) {
  return p->state == PEER_READY && !p->listen[0] && !p->is_seed;
}

static size_t nated_links(const stitch_swarm *s) {
  size_t n = 0;
  for (size_t i = 0; i < s->n_peers; i++)
    n += nated(&s->peers[i]);
  return n;
}

static size_t ready_links(const stitch_swarm *s) {
  size_t n = 0;
  for (size_t i = 0; i < s->n_peers; i++)
    n += s->peers[i].state == PEER_READY;
  return n;
}

/* ---- Backoff, per node key (a target, or a relay) --------------------- */

static punch_key *back_find(stitch_swarm *s, const stitch_pubkey *k) {
  for (size_t i = 0; i < PUNCH_KEYS; i++)
    if (s->pu.back[i].next_ms != 0 && same_key(&s->pu.back[i].k, k))
      return &s->pu.back[i];
  return NULL;
}

static int backed_off(stitch_swarm *s, const stitch_pubkey *k) {
  const punch_key *e = back_find(s, k);
  return e != NULL && s->now_ms < e->next_ms;
}

static void back_fail(stitch_swarm *s, const stitch_pubkey *k) {
  punch_key *e = back_find(s, k);
  if (e == NULL) {
    e = &s->pu.back[s->pu.back_next];
    s->pu.back_next = (s->pu.back_next + 1) % PUNCH_KEYS;
    memset(e, 0, sizeof(*e));
    e->k = *k;
  }
  unsigned f = e->fails < 6 ? e->fails : 6;
  uint64_t wait = (uint64_t)PUNCH_BACKOFF_MS << f;
  e->fails++;
  e->next_ms = s->now_ms +
               (wait < PUNCH_BACKOFF_MAX_MS ? wait : PUNCH_BACKOFF_MAX_MS);
}

static void back_clear(stitch_swarm *s, const stitch_pubkey *k) {
  punch_key *e = back_find(s, k);
  if (e != NULL)
    memset(e, 0, sizeof(*e));
}

/* ---- Our punches ------------------------------------------------------ */

static void send_punch(stitch_swarm *s, peer *p, uint32_t kind,
                       const stitch_pubkey *k, const char *addr) {
  wire_msg *m = calloc(1, sizeof(*m)); /* 20 KiB: not on the stack */
  if (m == NULL)
    return;
  m->type = WIRE_PUNCH;
  m->punch = kind;
  if (k != NULL)
    m->node = *k;
  snprintf(m->addr, sizeof(m->addr), "%s", addr ? addr : "");
  core_send(s, p, m);
  free(m);
}

/* Whether we may start something with P (ASK or ASKED): fewer than
 * PUNCH_SEND_PER_S in the last 1000 ms (punch.h). Answers are not
 * counted: each answers one of P's, which P counts. */
static int ask_room(const stitch_swarm *s, const peer *p) {
  for (size_t i = 0; i < PUNCH_SEND_PER_S; i++)
    if (p->punch_sent_ms[i] == 0 || s->now_ms - p->punch_sent_ms[i] >= 1000)
      return 1;
  return 0;
}

static void send_ask(stitch_swarm *s, peer *p, uint32_t kind,
                     const stitch_pubkey *k, const char *addr) {
  size_t old = 0; /* the oldest, or one never used */
  for (size_t i = 1; i < PUNCH_SEND_PER_S; i++)
    if (p->punch_sent_ms[i] < p->punch_sent_ms[old])
      old = i;
  p->punch_sent_ms[old] = s->now_ms ? s->now_ms : 1;
  send_punch(s, p, kind, k, addr);
}

static punch_try *free_try(stitch_swarm *s) {
  for (size_t i = 0; i < PUNCH_INFLIGHT; i++)
    if (!s->pu.t[i].on)
      return &s->pu.t[i];
  return NULL;
}

/* Ends T; a failure backs off the node it was with, or the relay that
 * never named one, and counts when T had dialed. */
static void try_end(stitch_swarm *s, punch_try *t, int failed) {
  if (failed)
    back_fail(s, zero_key(&t->target) ? &t->relay_key : &t->target);
  if (failed && t->addr[0])
    s->st.punch_failed++;
  memset(t, 0, sizeof(*t));
}

static void dial(stitch_swarm *s, punch_try *t) {
  stitch_swarm_action a = {
      .kind = STITCH_SWARM_CONNECT,
      .flags = STITCH_SWARM_DIAL_FIXED | STITCH_SWARM_DIAL_PUNCH};
  snprintf(a.addr, sizeof(a.addr), "%s", t->addr);
  core_push_action(s, &a);
  s->st.punch_dialed++;
  core_log(s, "punch: dialing %s (%s, through peer %u)", t->addr,
           t->asker ? "asked" : "taken", t->relay);
}

/* Room for links to nodes behind a NAT: what a dialer with no address
 * may hold at a full node (core.c core_ready), less a punch's. */
static int room(const stitch_swarm *s, size_t want) {
  return !s->cfg.seed && !s->cfg.listen[0] && nated_links(s) < want &&
         ready_links(s) < s->cfg.max_peers + CORE_INBOUND_SLACK +
                              s->cfg.cross_region + CORE_DIALOUT_ROOM;
}

void punch_maintain(stitch_swarm *s) {
  for (size_t i = 0; i < PUNCH_INFLIGHT; i++) {
    punch_try *t = &s->pu.t[i];
    if (t->on && s->now_ms - t->since_ms >= PUNCH_WAIT_MS) {
      core_log(s, "punch: %s came to nothing in %d ms",
               t->addr[0] ? t->addr : "an ask", PUNCH_WAIT_MS);
      try_end(s, t, 1);
    }
  }
  if (!room(s, PUNCH_WANT) || s->now_ms < s->pu.ask_ms)
    return;
  punch_try *t = free_try(s);
  if (t == NULL || s->n_peers == 0)
    return;
  /* A relay: any neighbour but the seed (whose uplink is the swarm's),
   * not backed off, not asked already, not sent PUNCH_SEND_PER_S asks
   * (ours, or the ones it passes) in the last second. */
  size_t start = (size_t)(core_random(s) % s->n_peers);
  for (size_t k = 0; k < s->n_peers; k++) {
    peer *r = &s->peers[(start + k) % s->n_peers];
    if (r->state != PEER_READY || r->is_seed || backed_off(s, &r->node) ||
        !ask_room(s, r))
      continue;
    int busy = 0;
    for (size_t i = 0; i < PUNCH_INFLIGHT; i++)
      busy |= s->pu.t[i].on && s->pu.t[i].relay == r->id;
    if (busy)
      continue;
    memset(t, 0, sizeof(*t));
    t->on = 1;
    t->asker = 1;
    t->relay = r->id;
    t->relay_key = r->node;
    t->since_ms = s->now_ms;
    s->pu.ask_ms = s->now_ms + PUNCH_ASK_MS;
    s->st.punch_asked++;
    send_ask(s, r, WIRE_PUNCH_ASK, NULL, "");
    return;
  }
}

/* ---- Relaying --------------------------------------------------------- */

/* The ask of ASKER we passed to TARGET: within PUNCH_WAIT_MS and not
 * answered (OPEN), or within PUNCH_PAIR_MS at all. */
static punch_pair *pair_find(stitch_swarm *s, const stitch_pubkey *asker,
                             const stitch_pubkey *target, int open) {
  for (size_t i = 0; i < PUNCH_PAIRS; i++) {
    punch_pair *e = &s->pu.pairs[i];
    if (e->ms != 0 &&
        s->now_ms - e->ms < (open ? PUNCH_WAIT_MS : PUNCH_PAIR_MS) &&
        (!open || !e->answered) && same_key(&e->asker, asker) &&
        same_key(&e->target, target))
      return e;
  }
  return NULL;
}

/* A, behind a NAT, asks to be linked with K (zero: one we choose). One
 * we sent PUNCH_SEND_PER_S asks in the last second is not offered: with
 * many askers at once, chance would otherwise send one node an ASKED for
 * each of several in the same second (issue 35). */
static void relay_ask(stitch_swarm *s, peer *a, const stitch_pubkey *k) {
  peer *b = NULL;
  if (!zero_key(k)) {
    b = core_ready_key(s, k);
    if (b != NULL && (!nated(b) || b == a || !ask_room(s, b)))
      b = NULL;
  } else if (s->n_peers > 0) {
    size_t start = (size_t)(core_random(s) % s->n_peers);
    for (size_t i = 0; i < s->n_peers && b == NULL; i++) {
      peer *c = &s->peers[(start + i) % s->n_peers];
      if (c != a && nated(c) && ask_room(s, c) &&
          pair_find(s, &a->node, &c->node, 0) == NULL &&
          pair_find(s, &c->node, &a->node, 0) == NULL)
        b = c;
    }
  }
  if (b == NULL) { /* nobody we could pass it to */
    send_punch(s, a, WIRE_PUNCH_DECLINED, k, "");
    return;
  }
  punch_pair *e = &s->pu.pairs[s->pu.pair_next];
  s->pu.pair_next = (s->pu.pair_next + 1) % PUNCH_PAIRS;
  e->asker = a->node;
  e->target = b->node;
  e->ms = s->now_ms ? s->now_ms : 1;
  e->answered = 0;
  s->st.punch_relayed++;
  send_ask(s, b, WIRE_PUNCH_ASKED, &a->node, a->addr);
}

/* B answers the ask of K that we passed it. */
static void relay_answer(stitch_swarm *s, peer *b, const wire_msg *m) {
  punch_pair *e = pair_find(s, &m->node, &b->node, 1);
  if (e != NULL)
    e->answered = 1; /* one answer per ask, passed on or not */
  peer *a = e != NULL ? core_ready_key(s, &m->node) : NULL;
  if (a == NULL) { /* not asked of it, or the asker is gone */
    s->st.punch_ignored++;
    return;
  }
  s->st.punch_relayed++;
  if (m->punch == WIRE_PUNCH_ACCEPT)
    send_punch(s, a, WIRE_PUNCH_ACCEPTED, &b->node, b->addr);
  else
    send_punch(s, a, WIRE_PUNCH_DECLINED, &b->node, "");
}

/* ---- The one asked, and the asker ------------------------------------- */

/* Whether ADDR, which relay R passed on, may be dialed (scope.h
 * scope_punch_ok, judged against the address our link to R runs to):
 * what a hostile relay names is no further from us than R is. */
static int in_scope(stitch_swarm *s, const peer *r, const char *addr) {
  if (scope_punch_ok(addr, r->addr))
    return 1;
  s->st.punch_refused++;
  core_log(s, "punch: refused %s (%s) from peer %u at %s (%s)", addr,
           scope_name(scope_of(addr)), r->id, r->addr,
           scope_name(scope_of(r->addr)));
  return 0;
}

/* Relay R says K, seen at ADDR, asks to link with us. */
static void on_asked(stitch_swarm *s, peer *r, const wire_msg *m) {
  const stitch_pubkey *k = &m->node;
  int ok = in_scope(s, r, m->addr) && room(s, PUNCH_WANT + PUNCH_TAKE_EXTRA) &&
           core_ready_key(s, k) == NULL && !backed_off(s, k) &&
           (r->punch_took_ms == 0 ||
            s->now_ms - r->punch_took_ms >= PUNCH_TAKE_MS);
  for (size_t i = 0; i < PUNCH_INFLIGHT && ok; i++)
    ok = !(s->pu.t[i].on && same_key(&s->pu.t[i].target, k));
  punch_try *t = ok ? free_try(s) : NULL;
  if (t == NULL) {
    send_punch(s, r, WIRE_PUNCH_DECLINE, k, "");
    return;
  }
  r->punch_took_ms = s->now_ms;
  memset(t, 0, sizeof(*t));
  t->on = 1;
  t->relay = r->id;
  t->relay_key = r->node;
  t->target = *k;
  snprintf(t->addr, sizeof(t->addr), "%s", m->addr);
  t->since_ms = s->now_ms;
  send_punch(s, r, WIRE_PUNCH_ACCEPT, k, "");
  /* At once: the asker dials when our answer reaches it, a relay's two
   * one-way times later. Our SYN, the first, is dropped at its NAT (which
   * holds no mapping toward us yet), silently; its SYN then passes ours,
   * whose mapping it matches, and makes the connection (docs/swarm.md
   * "Hole punching"). */
  dial(s, t);
}

/* Our ask through R that waits for its answer, or NULL. */
static punch_try *asked_of(stitch_swarm *s, const peer *r) {
  for (size_t i = 0; i < PUNCH_INFLIGHT; i++) {
    punch_try *c = &s->pu.t[i];
    if (c->on && c->asker && c->relay == r->id && !c->addr[0])
      return c;
  }
  return NULL;
}

/* Our ask through R: K, seen at ADDR, took it (ACCEPTED), or not. Every
 * way out ends T or names its address, so it is answered once. */
static void on_answer(stitch_swarm *s, peer *r, const wire_msg *m) {
  punch_try *t = asked_of(s, r);
  if (t == NULL) { /* nothing asked of it */
    s->st.punch_ignored++;
    return;
  }
  if (m->punch == WIRE_PUNCH_DECLINED) {
    /* Nobody to offer (zero): that relay waits, longer each time, so a
     * node that holds every punch its relays can offer stops asking. The
     * one offered declined (its key: full, busy, or linked to us
     * already): that node is backed off, not the relay, which offers us
     * another next time (each at most once a minute) and says nobody
     * once it has offered them all. Backing off the relay for the one
     * offered's answer left a node behind one relay without the links
     * it wants for minutes when chance offered it full nodes three or
     * four times running (test_swarm punch_fanin). */
    t->target = m->node;
    try_end(s, t, 1);
    return;
  }
  if (zero_key(&m->node) || core_ready_key(s, &m->node) != NULL ||
      same_key(&m->node, &s->cfg.node_pk)) {
    s->st.punch_ignored++;
    try_end(s, t, 0);
    return;
  }
  if (!in_scope(s, r, m->addr)) {
    try_end(s, t, 1); /* backs off that relay */
    return;
  }
  t->target = m->node;
  snprintf(t->addr, sizeof(t->addr), "%s", m->addr);
  dial(s, t);
}

/* M answers something of ours that waits for it: an ASKED we sent P
 * (ACCEPT, DECLINE) or our ask through P (ACCEPTED, DECLINED). There are
 * as many as we started, and the handlers end what each answers, so
 * these are not counted against P. */
static int answers_ours(stitch_swarm *s, const peer *p, const wire_msg *m) {
  switch (m->punch) {
  case WIRE_PUNCH_ACCEPT:
  case WIRE_PUNCH_DECLINE:
    return pair_find(s, &m->node, &p->node, 1) != NULL;
  case WIRE_PUNCH_ACCEPTED:
  case WIRE_PUNCH_DECLINED:
    return asked_of(s, p) != NULL;
  default:
    return 0;
  }
}

void punch_on_msg(stitch_swarm *s, peer *p, const wire_msg *m) {
  int to_relay = m->punch <= WIRE_PUNCH_DECLINE;
  /* A relay's messages name a node and, for an ask or an acceptance, its
   * address; never us, never the seed (which can be dialed). Ours to a
   * relay come only from a node behind a NAT. */
  int bad;
  if (to_relay)
    bad = p->listen[0] || p->is_seed;
  else
    bad = (zero_key(&m->node) && m->punch != WIRE_PUNCH_DECLINED) ||
          same_key(&m->node, &s->cfg.node_pk) ||
          same_key(&m->node, &s->cfg.swarm) ||
          (m->punch != WIRE_PUNCH_DECLINED && !m->addr[0]) ||
          s->cfg.listen[0] || s->cfg.seed;
  int answer = !bad && answers_ours(s, p, m);
  /* The rest (asks, and what answers nothing): PUNCH_RELAY_PER_S a
   * second. An honest peer starts at most PUNCH_SEND_PER_S (punch.h):
   * each past the count is charged, so a flooder is dropped and
   * greylisted after some fifty. */
  if (!answer) {
    if (p->punch_win_ms == 0 || s->now_ms - p->punch_win_ms >= 1000) {
      p->punch_win_ms = s->now_ms;
      p->punch_n = 0;
    }
    if (++p->punch_n > PUNCH_RELAY_PER_S) {
      s->st.punch_dropped++;
      core_score(s, p, SCORE_PUNCH_FLOOD);
      return;
    }
  }
  if (bad) {
    s->st.punch_ignored++;
    return;
  }
  switch (m->punch) {
  case WIRE_PUNCH_ASK:
    relay_ask(s, p, &m->node);
    break;
  case WIRE_PUNCH_ACCEPT:
  case WIRE_PUNCH_DECLINE:
    relay_answer(s, p, m);
    break;
  case WIRE_PUNCH_ASKED:
    on_asked(s, p, m);
    break;
  default: /* ACCEPTED, DECLINED */
    on_answer(s, p, m);
    break;
  }
}

/* ---- The punched link ------------------------------------------------- */

int punch_opened(stitch_swarm *s, const char *addr, uint32_t id,
                 int *acceptor) {
  for (size_t i = 0; i < PUNCH_INFLIGHT; i++) {
    punch_try *t = &s->pu.t[i];
    if (t->on && !t->opened && t->addr[0] && strcmp(t->addr, addr) == 0) {
      t->opened = 1;
      t->peer = id;
      *acceptor = !t->asker;
      return 1;
    }
  }
  return 0;
}

int punch_ready(stitch_swarm *s, peer *p) {
  for (size_t i = 0; i < PUNCH_INFLIGHT; i++) {
    punch_try *t = &s->pu.t[i];
    if (!t->on || !t->opened || t->peer != p->id)
      continue;
    if (!same_key(&t->target, &p->node)) {
      try_end(s, t, 1);
      return 1;
    }
    s->st.punch_linked++;
    core_log(s, "punch: linked to %s", t->addr);
    back_clear(s, &t->target);
    back_clear(s, &t->relay_key);
    try_end(s, t, 0);
    return 0;
  }
  /* Not a punch of ours, or one whose try ran out meanwhile: a member
   * the handshake proved, kept as any link. */
  return 0;
}

void punch_dial_failed(stitch_swarm *s, const char *addr) {
  for (size_t i = 0; i < PUNCH_INFLIGHT; i++) {
    punch_try *t = &s->pu.t[i];
    if (t->on && !t->opened && t->addr[0] && strcmp(t->addr, addr) == 0)
      try_end(s, t, 1);
  }
}

void punch_peer_gone(stitch_swarm *s, const peer *p) {
  for (size_t i = 0; i < PUNCH_INFLIGHT; i++) {
    punch_try *t = &s->pu.t[i];
    if (t->on && t->opened && t->peer == p->id)
      try_end(s, t, 1); /* closed before its handshake was done */
    else if (t->on && !t->addr[0] && t->relay == p->id)
      try_end(s, t, 0); /* the relay left before naming anyone */
  }
}
