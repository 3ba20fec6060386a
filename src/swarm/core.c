/* core.c: the swarm core: peers, the handshake, messages, gossip and
 * serving (docs/swarm.md). What to fetch and what to serve is in fetch.c,
 * crossing regions in cross.c, what the seed offers in seed.c, which
 * neighbours to keep in mesh.c. No I/O: bytes, time and randomness come in through the API
 * and stitch_swarm_io. */
#include "swarm/core_internal.h"

#include "common/diag.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Small helpers ---------------------------------------------------- */

void core_log(stitch_swarm *s, const char *fmt, ...) {
  if (s->io.log == NULL)
    return;
  char line[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  s->io.log(s->io.user, line);
}

const char *core_peer_name(const peer *p) {
  return p->listen[0] ? p->listen : p->addr;
}

uint64_t core_random(stitch_swarm *s) { return s->io.random(s->io.user); }

void core_push_action(stitch_swarm *s, const stitch_swarm_action *a) {
  if (s->act_len == CORE_MAX_ACTIONS) {
    core_log(s, "action queue full: dropping an action");
    return;
  }
  s->actions[(s->act_head + s->act_len++) % CORE_MAX_ACTIONS] = *a;
}

void stitch_swarm_next_action(stitch_swarm *s, stitch_swarm_action *a) {
  memset(a, 0, sizeof(*a));
  if (s->act_len == 0)
    return;
  *a = s->actions[s->act_head];
  s->act_head = (s->act_head + 1) % CORE_MAX_ACTIONS;
  s->act_len--;
}

void bits_set(bits *b, uint64_t i) {
  if (i < b->n && !bits_get(b, i)) {
    b->b[i / 8] |= (uint8_t)(1u << (i % 8));
    b->count++;
  }
}

static int bits_init(bits *b, uint64_t version, uint32_t object, uint64_t n) {
  b->version = version;
  b->object = object;
  b->n = n;
  b->count = 0;
  b->timed = 0;
  b->since_ms = 0;
  b->b = calloc(n / 8 + 1, 1);
  return b->b ? 0 : STITCH_ENOMEM;
}

/* The entry for (version, object) in a peer's list, made when CREATE. */
static bits *list_bits(bits **arr, size_t *n, uint64_t version,
                       uint32_t object, int create, uint64_t nbits) {
  bits *b = bits_find(*arr, *n, version, object);
  if (b != NULL || !create)
    return b;
  bits *na = realloc(*arr, (*n + 1) * sizeof(**arr));
  if (na == NULL)
    return NULL;
  *arr = na;
  if (bits_init(&na[*n], version, object, nbits) != 0)
    return NULL;
  return &na[(*n)++];
}

bits *peer_bits_add(peer *p, uint64_t version, uint32_t object, uint64_t n) {
  return list_bits(&p->have, &p->n_have, version, object, 1, n);
}

bits *peer_offered(peer *p, uint64_t version, uint32_t object, uint64_t n) {
  return list_bits(&p->offered, &p->n_offered, version, object, 1, n);
}

static void free_list(bits **arr, size_t *n) {
  for (size_t i = 0; i < *n; i++)
    free((*arr)[i].b);
  free(*arr);
  *arr = NULL;
  *n = 0;
}

vstate *core_find_version(stitch_swarm *s, uint64_t v) {
  for (size_t i = s->n_v; i-- > 0;) /* the newest first: most are of it */
    if (s->v[i].version == v)
      return &s->v[i];
  return NULL;
}

/* Does a node that has said nothing yet want object O of V? Of the
 * newest version, every node wants the only object, and every node up to
 * date the delta from the parent; an anchor beside a delta, a delta from
 * an older version, or an older version's objects only nodes catching up
 * do. */
int core_wanted_by_all(const stitch_swarm *s, const vstate *v, uint32_t o) {
  const stitch_manifest *m = v->ref.m;
  if (v != &s->v[s->n_v - 1])
    return 0;
  return m->n_objects == 1 ||
         (m->parent_version != 0 &&
          m->objects[o].base_version == m->parent_version);
}

peer *core_peer(stitch_swarm *s, uint32_t id) {
  size_t k = s->id_slot[id % CORE_ID_SLOTS];
  if (k < s->n_peers && s->peers[k].state != PEER_FREE && s->peers[k].id == id)
    return &s->peers[k];
  for (size_t i = 0; i < s->n_peers; i++)
    if (s->peers[i].state != PEER_FREE && s->peers[i].id == id)
      return &s->peers[i];
  return NULL;
}

peer *core_ready_key(stitch_swarm *s, const stitch_pubkey *k) {
  for (size_t i = 0; i < s->n_peers; i++)
    if (s->peers[i].state == PEER_READY &&
        memcmp(s->peers[i].node.b, k->b, sizeof(k->b)) == 0)
      return &s->peers[i];
  return NULL;
}

size_t core_count_peers(const stitch_swarm *s, int ready_only) {
  size_t n = 0;
  for (size_t i = 0; i < s->n_peers; i++)
    n += ready_only ? s->peers[i].state == PEER_READY
                    : s->peers[i].state != PEER_FREE &&
                          s->peers[i].state != PEER_CLOSING;
  return n;
}

/* Ready links: *SAME to our region, *FAR to others. */
void core_count_ready(const stitch_swarm *s, size_t *same, size_t *far) {
  *same = *far = 0;
  for (size_t i = 0; i < s->n_peers; i++) {
    const peer *q = &s->peers[i];
    if (q->state != PEER_READY)
      continue;
    if (q->same_region)
      (*same)++;
    else
      (*far)++;
  }
}

/* Ready links that count toward the limits: those of our region, and up
 * to cfg.cross_region of those to other regions (mesh.c core_maintain says why). */
static size_t links_that_count(const stitch_swarm *s) {
  size_t same, far;
  core_count_ready(s, &same, &far);
  return same + (far < s->cfg.cross_region ? far : s->cfg.cross_region);
}

/* Links we are pointing elsewhere (PEER_FULL, or on the way to it). */
static size_t count_full(const stitch_swarm *s) {
  size_t n = 0;
  for (size_t i = 0; i < s->n_peers; i++)
    n += s->peers[i].full && s->peers[i].state != PEER_FREE &&
         s->peers[i].state != PEER_CLOSING;
  return n;
}

int core_banned_key(const stitch_swarm *s, const stitch_pubkey *k) {
  for (size_t i = 0; i < s->n_bans; i++)
    if (memcmp(s->bans[i].b, k->b, 32) == 0)
      return 1;
  return 0;
}

int core_banned_addr(const stitch_swarm *s, const char *a) {
  for (size_t i = 0; i < s->n_ban_addrs; i++)
    if (strcmp(s->ban_addrs[i], a) == 0)
      return 1;
  return 0;
}

/* ---- Creating and freeing --------------------------------------------- */

int stitch_swarm_new(const stitch_swarm_config *cfg,
                     const stitch_swarm_io *io, stitch_swarm **out,
                     stitch_diag *d) {
  *out = NULL;
  RETURN_IF(io->random == NULL || io->chunk_has == NULL ||
                io->chunk_read == NULL || io->chunk_write == NULL ||
                io->manifest_write == NULL || io->unix_time == NULL,
            d, STITCH_EINVAL, "swarm: an io callback is missing");
  RETURN_IF(cfg->ticket_len != 0 && cfg->ticket_len != STITCH_TICKET_BYTES,
            d, STITCH_EINVAL, "swarm: a ticket is %d bytes",
            STITCH_TICKET_BYTES);
  RETURN_IF(memchr(cfg->listen, 0, sizeof(cfg->listen)) == NULL ||
                memchr(cfg->region, 0, sizeof(cfg->region)) == NULL,
            d, STITCH_EINVAL, "swarm: listen or region is not terminated");
  RETURN_IF(wire_control_byte(cfg->listen, strlen(cfg->listen)) != NULL ||
                wire_control_byte(cfg->region, strlen(cfg->region)) != NULL,
            d, STITCH_EINVAL, "swarm: listen or region holds a control byte");
  stitch_swarm *s = calloc(1, sizeof(*s));
  RETURN_IF(s == NULL, d, STITCH_ENOMEM, "out of memory");
  s->cfg = *cfg;
  s->io = *io;
  if (s->cfg.max_peers == 0)
    s->cfg.max_peers = 8;
  if (s->cfg.cross_region == 0)
    s->cfg.cross_region = 2;
  if (s->cfg.pipeline == 0)
    s->cfg.pipeline = 4;
  if (s->cfg.pipeline > CORE_MAX_PIPELINE)
    s->cfg.pipeline = CORE_MAX_PIPELINE;
  s->held_version = cfg->held_version;
  s->held_id = cfg->held_id;
  s->st.held_version = cfg->held_version;
  s->next_peer_id = 1;
  s->pick_gen = 1; /* a new peer's dry_gen, 0, is never it */
  s->up.slots = CORE_SERVE_SLOTS;
  *out = s;
  return 0;
}

/* The payload being sent to P is done with (sent, or P is gone). */
static void pay_release(stitch_swarm *s, peer *p) {
  if (p->pay != NULL && s->io.chunk_release != NULL)
    s->io.chunk_release(s->io.user, p->pay, p->pay_len);
  p->pay = NULL;
  p->pay_len = p->pay_off = p->pay_at = 0;
}

static void unlist(stitch_swarm *s, peer *p);

static void peer_reset(stitch_swarm *s, peer *p) {
  if (p->listed)
    unlist(s, p);
  pay_release(s, p);
  wire_reader_free(&p->rd);
  s->unasked -= p->frame_claim;
  chan_free(&p->ch);
  dbuf_free(&p->ct);
  dbuf_free(&p->out);
  gossip_peer_gone(s, p);
  free_list(&p->have, &p->n_have);
  free_list(&p->offered, &p->n_offered);
  free(p->told);
  memset(p, 0, sizeof(*p));
}

static void version_free(vstate *v) {
  for (int o = 0; o < STITCH_MAX_OBJECTS; o++) {
    free(v->held[o].b);
    free(v->avail[o]);
    free(v->inflight[o]);
    seed_obj_free(&v->seed[o]);
    cross_obj_free(&v->cross[o]);
    free(v->asked_at[o]);
  }
  free(v->raw);
  stitch_manifest_free((stitch_manifest *)v->ref.m);
}

/* The planner takes the versions as one array of refs. */
static int sync_refs(stitch_swarm *s) {
  stitch_vref *r = realloc(s->refs, (s->n_v ? s->n_v : 1) * sizeof(*r));
  if (r == NULL)
    return STITCH_ENOMEM;
  s->refs = r;
  for (size_t i = 0; i < s->n_v; i++)
    r[i] = s->v[i].ref;
  return 0;
}

void stitch_swarm_free(stitch_swarm *s) {
  if (s == NULL)
    return;
  for (size_t i = 0; i < s->n_peers; i++)
    peer_reset(s, &s->peers[i]);
  free(s->peers);
  free(s->sched);
  free(s->sendable);
  free(s->sendable_ids);
  free(s->rx);
  for (size_t i = 0; i < s->n_v; i++)
    version_free(&s->v[i]);
  free(s->v);
  free(s->refs);
  free(s->addrs);
  stitch_policy_free(s->policy);
  free(s->policy_raw);
  free(s);
}

/* ---- Sending ---------------------------------------------------------- */

/* Empties out, all of it sent. A buffer a manifest grew is given back:
 * a node holds one per link, and most frames are a few bytes. */
static void out_reset(peer *p) {
  dbuf_empty(&p->out, CORE_OUT_KEEP);
  p->out_off = 0;
}

/* Forgets what the driver already sent of out, once all of it is (the
 * payload's place moves with it). */
static void out_compact(peer *p) {
  if (p->out_off > 0 && p->out_off == p->out.len) {
    out_reset(p);
    p->pay_at = 0;
  }
}

int core_send(stitch_swarm *s, peer *p, const wire_msg *m) {
  if (p->state == PEER_CLOSING || p->state == PEER_FREE)
    return 0;
  gossip_ensure(s, p, m);
  out_compact(p);
  int rc = wire_encode(&p->out, m);
  if (rc != 0) {
    core_drop(s, p, 0, "send buffer full");
    return rc;
  }
  p->last_send_ms = s->now_ms;
  core_sendable(s, p);
  return 0;
}

int core_send_chunk(stitch_swarm *s, peer *p, const wire_msg *m) {
  if (p->state == PEER_CLOSING || p->state == PEER_FREE || p->pay != NULL)
    return STITCH_EINVAL;
  gossip_ensure(s, p, m);
  out_compact(p);
  int rc = wire_encode_head(&p->out, m);
  if (rc != 0) {
    core_drop(s, p, 0, "send buffer full");
    return rc;
  }
  p->pay = m->data;
  p->pay_len = m->data_len;
  p->pay_off = 0;
  p->pay_at = p->out.len;
  p->last_send_ms = s->now_ms;
  core_sendable(s, p);
  return 0;
}

void core_sendable(stitch_swarm *s, peer *p) {
  if (p->listed)
    return;
  s->sendable_ids[s->n_sendable] = p->id; /* room: a place for each peer */
  s->sendable[s->n_sendable] = (uint32_t)(p - s->peers);
  p->listed = ++s->n_sendable;
  s->sendable_gen++;
}

static void unlist(stitch_swarm *s, peer *p) {
  size_t i = p->listed - 1, last = --s->n_sendable;
  s->sendable_ids[i] = s->sendable_ids[last];
  s->sendable[i] = s->sendable[last];
  s->peers[s->sendable[i]].listed = i + 1;
  p->listed = 0;
}

void core_serve_add(stitch_swarm *s, peer *p, const chunk_id *c) {
  if (p->n_serve == 0)
    p->serve_wait_ms = s->now_ms;
  p->serve[p->n_serve++] = *c;
  core_sendable(s, p);
}

void core_drop(stitch_swarm *s, peer *p, int ban, const char *why) {
  if (p->state == PEER_CLOSING || p->state == PEER_FREE)
    return;
  core_log(s, "peer %u (%s): dropped: %s%s", p->id,
           core_peer_name(p), why, ban ? "; banned" : "");
  /* Only what is known to be the peer's: its key once its AUTH verified,
   * and the address we dialed. Not the listen address it claims, which
   * may be another node's (the seed's), nor anything before its AUTH: a
   * stranger claiming the seed's key must not get the seed banned. */
  if (ban && p->state != PEER_READY && p->state != PEER_FULL)
    ban = 0;
  if (ban) {
    s->st.bans++;
    if (s->n_bans < CORE_MAX_BANS && !core_banned_key(s, &p->node))
      s->bans[s->n_bans++] = p->node;
    if (p->outbound && p->addr[0] && s->n_ban_addrs < CORE_MAX_BANS &&
        !core_banned_addr(s, p->addr))
      snprintf(s->ban_addrs[s->n_ban_addrs++], STITCH_SWARM_ADDR_MAX, "%s",
               p->addr);
  }
  fetch_peer_gone(s, p);
  punch_peer_gone(s, p);
  gossip_peer_gone(s, p);
  p->state = PEER_CLOSING;
  stitch_swarm_action a = {.kind = STITCH_SWARM_CLOSE, .peer = p->id};
  core_push_action(s, &a);
}

int core_score(stitch_swarm *s, peer *p, score_ev ev) {
  if (p->state != PEER_READY || !score_add(&p->sc, ev, s->now_ms) ||
      p->is_seed)
    return 0;
  char what[160];
  score_describe(&p->sc, what, sizeof(what));
  core_log(s, "peer %u (%s): score %.1f (%s)", p->id,
           core_peer_name(p),
           score_value(&p->sc, s->now_ms), what);
  /* Its key, and the address we dialed: as for a ban (core_drop), never
   * the listen address it claims. */
  grey_add(&s->grey, &p->node, p->outbound ? p->addr : NULL, s->now_ms);
  s->st.greylisted++;
  core_drop(s, p, 0, "score below the threshold: greylisted");
  return 1;
}

/* ---- Peers: the driver's side ----------------------------------------- */

/* Peer slots a node ever holds: the links the limits allow (inbound up to
 * max_peers + CORE_INBOUND_SLACK, the seed's max_peers more, CORE_FULL_MAX
 * being pointed elsewhere, those we dial: max_peers + CORE_SAME_EXTRA +
 * cross_region) and CORE_CLOSING_MAX the driver has yet to close. Every
 * slot's memory is bounded (docs/security.md "Memory"), so this bounds a
 * node's whatever number connect: 1,000 hostile links at once get the
 * same slots as 20 (tests/test_hostile.c thousand). */
static size_t slots_max(const stitch_swarm *s) {
  return 2 * (size_t)s->cfg.max_peers + CORE_INBOUND_SLACK + CORE_FULL_MAX +
         CORE_SAME_EXTRA + CORE_DIALOUT_ROOM + s->cfg.cross_region +
         CORE_OUTBOUND_MIN +
         CORE_CLOSING_MAX + (s->cfg.seed ? s->cfg.max_peers : 0);
}

int stitch_swarm_peer_open(stitch_swarm *s, uint64_t now_ms, int outbound,
                           const char *addr, uint32_t *id) {
  s->now_ms = now_ms;
  *id = 0;
  peer *p = NULL;
  for (size_t i = 0; i < s->n_peers && p == NULL; i++)
    if (s->peers[i].state == PEER_FREE)
      p = &s->peers[i];
  if (p == NULL && s->n_peers >= slots_max(s))
    return STITCH_ELIMIT; /* the driver closes it: we hold no more */
  if (p == NULL) {
    struct sched_slot *ns = realloc(s->sched, (s->n_peers + 1) * sizeof(*ns));
    if (ns == NULL)
      return STITCH_ENOMEM;
    s->sched = ns;
    uint32_t *nl = realloc(s->sendable, (s->n_peers + 1) * sizeof(*nl));
    if (nl == NULL)
      return STITCH_ENOMEM;
    s->sendable = nl;
    nl = realloc(s->sendable_ids, (s->n_peers + 1) * sizeof(*nl));
    if (nl == NULL)
      return STITCH_ENOMEM;
    s->sendable_ids = nl;
    /* On the struct's 64-byte alignment, which realloc does not give. */
    peer *np = aligned_alloc(_Alignof(peer), (s->n_peers + 1) * sizeof(*np));
    if (np == NULL)
      return STITCH_ENOMEM;
    if (s->n_peers > 0)
      memcpy(np, s->peers, s->n_peers * sizeof(*np));
    free(s->peers);
    s->peers = np;
    p = &s->peers[s->n_peers++];
  }
  memset(p, 0, sizeof(*p));
  p->state = PEER_HELLO;
  p->id = s->next_peer_id++;
  s->id_slot[p->id % CORE_ID_SLOTS] = (uint32_t)(p - s->peers);
  p->outbound = outbound;
  snprintf(p->addr, sizeof(p->addr), "%s", addr ? addr : "");
  p->same_region = s->cfg.region[0] == '\0'; /* "" until its HELLO */
  wire_reader_init(&p->rd);
  p->rd.split = 1; /* on_frame takes a chunk's bytes apart from its head */
  p->out.max = (size_t)STITCH_CHUNK_MAX + (STITCH_MANIFEST_MAX + (4u << 20)) *
                                              (size_t)2;
  p->opened_ms = p->last_recv_ms = p->tokens_ms = now_ms;
  p->tokens = CORE_RATE_BURST;
  *id = p->id;
  if (outbound) {
    addr_entry *e = core_find_addr(s, p->addr);
    if (e != NULL)
      e->connecting = 0;
  }
  /* A punched connection (punch.c): both ends dialed, one is the
   * handshake's acceptor. */
  int acceptor = 0;
  if (outbound && punch_opened(s, p->addr, p->id, &acceptor)) {
    p->punched = 1;
    p->outbound = !acceptor;
  }
  int too_many = !outbound && core_count_peers(s, 0) >
                                  s->cfg.max_peers + CORE_INBOUND_SLACK +
                                      (s->cfg.seed ? s->cfg.max_peers : 0);
  hs_open(s, p);
  if (too_many && count_full(s) >= CORE_FULL_MAX) {
    /* Already pointing enough dialers elsewhere: when every node dials
     * the seed at once (10,000 at a simulation's start), handshakes with
     * all of them would cost more than the links. It backs off and comes
     * back. */
    core_drop(s, p, 0, "full");
  } else if (too_many) {
    /* Full: finish the handshake, tell it where else to go (on_auth),
     * close once that is sent (stitch_swarm_peer_sent). A PEERS before
     * the handshake would be out of order, and one queued before a CLOSE
     * action would not reach it: a driver closes at once. */
    p->full = 1;
  }
  return 0;
}

/* The plaintext's next bytes: out up to the payload, the payload, then
 * what was queued after it. With REFILL, a link that has taken all of it
 * gets its next chunk chosen now (the driver asked: it wants more). */
static void plain_pending(stitch_swarm *s, peer *p, int refill,
                          const uint8_t **buf, size_t *len) {
  if (p->pay != NULL && p->out_off == p->pay_at) { /* the payload's turn */
    *buf = p->pay + p->pay_off;
    *len = p->pay_len - p->pay_off;
    return;
  }
  if (refill && p->out_off == p->out.len && p->pay == NULL &&
      p->state == PEER_READY) {
    out_reset(p);
    p->sending = 0; /* the link wants more: the driver took it all */
    fetch_serve_next(s, p);
  }
  size_t end = p->pay != NULL ? p->pay_at : p->out.len;
  *len = end - p->out_off;
  /* out.p is NULL until the first frame: NULL + 0 is undefined in C. */
  *buf = *len > 0 ? p->out.p + p->out_off : NULL;
}

/* N bytes of the plaintext are on their way (sent, or sealed). */
static void plain_sent(stitch_swarm *s, peer *p, size_t n) {
  p->taken += n;
  if (p->pay != NULL && p->out_off == p->pay_at) {
    p->pay_off += n <= p->pay_len - p->pay_off ? n : p->pay_len - p->pay_off;
    if (p->pay_off == p->pay_len)
      pay_release(s, p);
    else
      return;
  } else {
    size_t end = p->pay != NULL ? p->pay_at : p->out.len;
    p->out_off += n <= end - p->out_off ? n : end - p->out_off;
  }
  if (p->pay == NULL && p->out_off == p->out.len)
    out_reset(p);
}

static int drained(const peer *p) {
  return p->ct_off == p->ct.len && p->pay == NULL && p->out_off == p->out.len;
}

/* Would stitch_swarm_peer_pending give P's link nothing and change
 * nothing? No bytes wait, and there is no chunk to choose for it (the
 * refill) nor one on its way out to call sent. */
static int idle(const peer *p) {
  return drained(p) && !p->mf_on &&
         !(p->state == PEER_READY && (p->sending || p->n_serve > 0));
}

const uint32_t *stitch_swarm_sendable(stitch_swarm *s, size_t *n) {
  *n = s->n_sendable;
  return s->sendable_ids;
}

uint64_t stitch_swarm_sendable_gen(const stitch_swarm *s) {
  return s->sendable_gen;
}

static void pending(stitch_swarm *s, peer *p, const uint8_t **buf,
                    size_t *len);

void stitch_swarm_peer_pending(stitch_swarm *s, uint32_t id,
                               const uint8_t **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  peer *p = core_peer(s, id);
  if (p == NULL)
    return;
  gossip_on_asked(s, p);
  pending(s, p, buf, len);
  if (*len == 0 && p->listed && idle(p))
    unlist(s, p); /* until something is queued for it again */
}

static void pending(stitch_swarm *s, peer *p, const uint8_t **buf,
                    size_t *len) {
  if (p->ct_off < p->ct.len) { /* sealed, or the HELLO */
    *buf = p->ct.p + p->ct_off;
    *len = p->ct.len - p->ct_off;
    return;
  }
  p->ct.len = p->ct_off = 0;
  if (!p->ch.on) { /* before the keys, or a simulator's link */
    plain_pending(s, p, 1, buf, len);
    return;
  }
  /* Seal up to a batch; the next chunk is chosen only when the link has
   * taken everything (the first pass), as without records. */
  for (int first = 1; p->ct.len < CORE_SEAL_BATCH; first = 0) {
    const uint8_t *pb;
    size_t pl;
    plain_pending(s, p, first, &pb, &pl);
    if (pl == 0)
      break;
    size_t take = pl < CHAN_REC_MAX ? pl : CHAN_REC_MAX;
    if (chan_seal(&p->ch, pb, take, &p->ct) != 0) {
      core_drop(s, p, 0, "out of memory");
      return;
    }
    plain_sent(s, p, take);
  }
  *buf = p->ct.p;
  *len = p->ct.len;
}

size_t stitch_swarm_lowat(size_t len) {
  return len / 8 > STITCH_SWARM_LOWAT_MIN ? len / 8 : STITCH_SWARM_LOWAT_MIN;
}

void stitch_swarm_peer_sent(stitch_swarm *s, uint32_t id, size_t n) {
  peer *p = core_peer(s, id);
  if (p == NULL)
    return;
  if (p->ct_off < p->ct.len) {
    p->ct_off += n <= p->ct.len - p->ct_off ? n : p->ct.len - p->ct_off;
    if (p->ct_off == p->ct.len) {
      /* Idle links keep little. */
      dbuf_empty(&p->ct, CHAN_REC_MAX + CHAN_OVERHEAD);
      p->ct_off = 0;
      p->wired = p->taken; /* what was sealed is sent */
    }
  } else {
    plain_sent(s, p, n);
    p->wired = p->taken;
  }
  if (p->state == PEER_FULL && drained(p)) /* our PEERS is out */
    core_drop(s, p, 0, "full");
}

void stitch_swarm_peer_close(stitch_swarm *s, uint32_t id, uint64_t now_ms) {
  s->now_ms = now_ms;
  peer *p = core_peer(s, id);
  if (p == NULL)
    return;
  if (p->state != PEER_CLOSING) {
    core_log(s, "peer %u (%s): closed", p->id,
             core_peer_name(p));
    fetch_peer_gone(s, p);
  }
  punch_peer_gone(s, p);
  /* A dial that never got through, or a link the other side closed soon
   * after (it was full, say): try that address again later and later. A
   * link that lasted clears the count. */
  addr_entry *e = p->outbound ? core_find_addr(s, p->addr) : NULL;
  if (e != NULL && (p->state == PEER_HELLO ||
                    now_ms - p->opened_ms < CORE_SHORT_LINK_MS)) {
    core_addr_failed(s, e, now_ms);
  } else if (e != NULL) {
    e->failures = 0;
  }
  peer_reset(s, p);
  fetch_schedule(s);
}

void stitch_swarm_dial_failed(stitch_swarm *s, const char *addr,
                              uint64_t now_ms) {
  s->now_ms = now_ms;
  if (addr != NULL)
    punch_dial_failed(s, addr);
  addr_entry *e = addr != NULL ? core_find_addr(s, addr) : NULL;
  if (e == NULL || !e->connecting)
    return;
  e->connecting = 0;
  core_addr_failed(s, e, now_ms);
}

/* ---- Manifests -------------------------------------------------------- */

/* Verifies and adds a manifest; FROM is the peer it came from (NULL: the
 * agent). Returns 1 when new, 0 when known or too old, negative when
 * invalid. */
static int add_manifest(stitch_swarm *s, const uint8_t *buf, size_t len,
                        peer *from, stitch_diag *d) {
  stitch_manifest *m;
  stitch_digest id;
  /* The same bytes as a manifest held: known, without verifying its
   * signature again (a peer resending one must not cost us a verify). */
  for (size_t i = 0; i < s->n_v; i++)
    if (s->v[i].raw_len == len && memcmp(s->v[i].raw, buf, len) == 0) {
      if (from != NULL)
        gossip_known(from, s->v[i].version);
      return 0;
    }
  int rc = stitch_manifest_open(buf, len, &s->cfg.swarm, &m, &id, d);
  if (rc != 0) {
    s->st.verify_failures += rc != STITCH_ENOMEM;
    return rc;
  }
  vstate *have = core_find_version(s, m->version);
  if (have != NULL) {
    int same = memcmp(have->ref.id.b, id.b, 32) == 0;
    stitch_manifest_free(m);
    return same ? 0
                : stitch_diag_set(d, STITCH_EROLLBACK,
                                  "version %" PRIu64 " under another id: a "
                                  "fork",
                                  have->ref.m->version);
  }
  uint64_t oldest = s->n_v ? s->v[0].ref.m->version : 0;
  if (m->version < s->held_version ||
      (s->n_v == CORE_MAX_VERSIONS && m->version < oldest)) {
    stitch_manifest_free(m);
    return 0; /* too old to matter */
  }
  if ((rc = s->io.manifest_write(s->io.user, buf, len)) != 0) {
    stitch_manifest_free(m);
    return stitch_diag_set(d, rc, "could not store version %" PRIu64,
                           m->version);
  }
  if (s->n_v == CORE_MAX_VERSIONS) {
    /* Forget the oldest: peers' bits about it go with it. */
    for (size_t k = 0; k < s->n_peers; k++) {
      peer *q = &s->peers[k];
      for (unsigned r = 0; r < q->n_req;)
        if (q->req[r].c.version == s->v[0].ref.m->version)
          q->req[r] = q->req[--q->n_req];
        else
          r++;
    }
    s->n_lazy -= s->v[0].lazy;
    version_free(&s->v[0]);
    memmove(s->v, s->v + 1, (s->n_v - 1) * sizeof(*s->v));
    s->n_v--;
  }
  if (s->n_v % 8 == 0) {
    vstate *nv = realloc(s->v, (s->n_v + 8) * sizeof(*nv));
    if (nv == NULL) {
      stitch_manifest_free(m);
      return stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
    }
    s->v = nv;
  }
  size_t i = s->n_v;
  while (i > 0 && s->v[i - 1].ref.m->version > m->version)
    i--;
  memmove(&s->v[i + 1], &s->v[i], (s->n_v - i) * sizeof(*s->v));
  vstate *v = &s->v[i];
  memset(v, 0, sizeof(*v));
  v->version = m->version;
  v->ref.m = m;
  v->ref.id = id;
  v->added_ms = s->now_ms;
  s->n_v++;
  int bad = (v->raw = malloc(len)) == NULL || sync_refs(s) != 0;
  if (!bad) {
    memcpy(v->raw, buf, len);
    v->raw_len = len;
  }
  for (uint32_t o = 0; o < m->n_objects && !bad; o++) {
    uint64_t n = m->objects[o].n_chunks;
    bad = bits_init(&v->held[o], m->version, o, n) != 0 ||
          (v->avail[o] = calloc(n + 1, 2)) == NULL ||
          (v->inflight[o] = calloc(n + 1, 1)) == NULL ||
          seed_obj_init(&v->seed[o], n) != 0 ||
          cross_obj_init(&v->cross[o], n) != 0 ||
          (v->asked_at[o] = calloc(n + 1, 4)) == NULL;
    for (uint64_t c = 0; c < n && !bad; c++) {
      if (s->io.chunk_has(s->io.user, &m->objects[o].chunks[c].hash))
        bits_set(&v->held[o], c);
      if (m->objects[o].chunks[c].size > s->chunk_max)
        s->chunk_max = m->objects[o].chunks[c].size;
    }
  }
  if (bad) {
    /* Take the half-built version out again, so that the next copy of
     * this manifest is added whole rather than found "held". */
    version_free(v);
    memmove(v, v + 1, (s->n_v - i - 1) * sizeof(*s->v));
    s->n_v--;
    for (size_t k = 0; s->refs != NULL && k < s->n_v; k++)
      s->refs[k] = s->v[k].ref; /* it holds at least n_v */
    return stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  }
  if (m->version > s->st.latest_version)
    s->st.latest_version = m->version;
  core_log(s, "version %" PRIu64 ": manifest verified (%s%s)", m->version,
           from ? "from peer " : "local", from ? from->listen : "");
  gossip_adopt(s, v);
  gossip_new(s, v, from);
  return 1;
}

int stitch_swarm_add_manifest(stitch_swarm *s, const uint8_t *buf, size_t len,
                              uint64_t now_ms, stitch_diag *d) {
  s->now_ms = now_ms;
  int rc = add_manifest(s, buf, len, NULL, d);
  if (rc < 0)
    return rc;
  if (rc == 1) {
    fetch_replan(s);
    for (size_t k = 0; k < s->n_peers; k++)
      if (s->peers[k].state == PEER_READY)
        fetch_announce_interest(s, &s->peers[k]);
    seed_on_manifest(s);
    fetch_schedule(s);
  }
  return 0;
}

int stitch_swarm_set_policy(stitch_swarm *s, const uint8_t *buf, size_t len,
                            uint64_t now_ms, stitch_diag *d) {
  s->now_ms = now_ms;
  int rc = hs_policy(s, buf, len, NULL, d);
  return rc < 0 ? rc : 0;
}

size_t stitch_swarm_versions(const stitch_swarm *s, const stitch_vref **v) {
  *v = s->refs;
  return s->n_v;
}

int stitch_swarm_applied(stitch_swarm *s, uint64_t version,
                         const stitch_digest *id, uint64_t now_ms) {
  s->now_ms = now_ms;
  s->applying = 0;
  if (version > s->held_version) {
    s->held_version = version;
    s->held_id = *id;
    s->st.held_version = version;
    core_log(s, "version %" PRIu64 ": applied", version);
  }
  fetch_replan(s);
  for (size_t k = 0; k < s->n_peers; k++)
    if (s->peers[k].state == PEER_READY)
      fetch_announce_interest(s, &s->peers[k]);
  fetch_schedule(s);
  return 0;
}

int stitch_swarm_apply_failed(stitch_swarm *s, uint64_t version,
                              uint32_t object, uint64_t now_ms) {
  s->now_ms = now_ms;
  s->applying = 0;
  vstate *v = core_find_version(s, version);
  if (v != NULL && object < v->ref.m->n_objects) {
    memset(v->held[object].b, 0, v->held[object].n / 8 + 1);
    v->held[object].count = 0;
  }
  core_log(s, "version %" PRIu64 ": apply failed; fetching it again", version);
  fetch_replan(s);
  fetch_schedule(s);
  return 0;
}

/* ---- Receiving -------------------------------------------------------- */

/* P's AUTH verified and the swarm admits it (handshake.c): the link is
 * up, unless it is a second one to the same node or we are full. */
/* Of two links between the same two nodes, both keep the one the node
 * with the lower key dialed: when each dials the other at once, keeping
 * "the older" at each end dropped both, since the acceptor of each link
 * is ready half a round trip before its dialer. */
static int kept_link(const stitch_swarm *s, const peer *p) {
  return p->outbound == (memcmp(s->cfg.node_pk.b, p->node.b, 32) < 0);
}

void core_ready(stitch_swarm *s, peer *p) {
  if (punch_ready(s, p)) {
    core_drop(s, p, 0, "punched, but not the node the relay named");
    return;
  }
  /* One link per node: the one kept_link says, else the older. */
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q != p && q->state == PEER_READY &&
        memcmp(q->node.b, p->node.b, 32) == 0) {
      if (kept_link(s, p) && !kept_link(s, q)) {
        core_drop(s, q, 0, "linked twice: keeping the other link");
        break;
      }
      core_drop(s, p, 0, "already linked");
      return;
    }
  }
  core_learn_addr(s, p->listen, p->region);
  /* Full, but only with links from other regions beyond cross_region: a
   * dialer of our region is taken anyway. Far regions' nodes dial into
   * the region that has the chunks first, so its nodes filled up with
   * them, and the last of its own to dial (at a fleet's start) found
   * their region full: a node left with two neighbours of its region
   * and five from afar held 50 chunks at 550 ms where the median node did
   * at 289 ms, and finished last (docs/history/simulator.md, "Full of far
   * links"). Since each node dials CORE_SAME_EXTRA of its region beyond
   * max_peers (core_maintain), there is as much more room for them: else a
   * region's nodes were full before the last of them had dialed, and one
   * of 120 kept 2 links of its region (docs/history/simulator.md "Ten of
   * its own region"). */
  if (p->full && !s->cfg.seed && p->same_region &&
      links_that_count(s) <
          s->cfg.max_peers + CORE_INBOUND_SLACK + CORE_SAME_EXTRA)
    p->full = 0;
  /* And a dialer that cannot be dialed, up to CORE_DIALOUT_ROOM links
   * beyond that: it has no other way to link. */
  if (p->full && !s->cfg.seed && !p->listen[0] &&
      core_count_peers(s, 1) < s->cfg.max_peers + CORE_INBOUND_SLACK +
                              s->cfg.cross_region + CORE_DIALOUT_ROOM)
    p->full = 0;
  /* Still full: the newest link from a node that can be dialed makes
   * room, once per CORE_EVICT_MS. That node has inbound links, and will
   * have more; this one has only its own dials. With half of
   * upload1000.json behind NAT, a NATed node held 6.6-6.9 links and
   * carried 32 % of the upload; with this (and the dial backoff) 13.3-13.5
   * and 36 %, and three NATed nodes no longer held 1.4 s per delta on two
   * links (docs/netlab.md "The redialing"). Never a link we dialed
   * (CORE_OUTBOUND_MIN: our own choices stay). */
  if (p->full && !s->cfg.seed && !p->listen[0] &&
      s->now_ms >= s->evict_next_ms) {
    peer *q = NULL;
    for (size_t i = 0; i < s->n_peers; i++) {
      peer *c = &s->peers[i];
      if (c != p && c->state == PEER_READY && !c->outbound && c->listen[0] &&
          !c->is_seed && (q == NULL || c->ready_ms > q->ready_ms))
        q = c;
    }
    if (q != NULL) {
      core_drop(s, q, 0, "making room for a node that cannot be dialed");
      s->evict_next_ms = s->now_ms + CORE_EVICT_MS;
      p->full = 0;
    }
  }
  if (p->full) {
    p->state = PEER_FULL;
    core_send_peers(s, p);
    if (drained(p))
      core_drop(s, p, 0, "full");
    return;
  }
  p->state = PEER_READY;
  core_sendable(s, p); /* whatever it asks of us from now on is served */
  p->progress_ms = s->now_ms;
  score_init(&p->sc, s->now_ms);
  p->answered_ms = p->ready_ms = s->now_ms;
  p->owes = s->n_v > 0;
  core_log(s, "peer %u (%s, %s%s): ready", p->id, p->listen,
           p->region[0] ? p->region : "no region", p->is_seed ? ", seed" : "");
  /* Everything it should know: the policy, the manifests from the newest
   * anchor on (enough to plan from anything), what we hold, whom we
   * know. */
  hs_send_policy(s, p);
  size_t from = 0;
  for (size_t i = 0; i < s->n_v; i++)
    for (uint64_t o = 0; o < s->v[i].ref.m->n_objects; o++)
      if (s->v[i].ref.m->objects[o].kind == STITCH_OBJ_ANCHOR)
        from = i;
  for (size_t i = from; i < s->n_v; i++)
    gossip_send(s, p, &s->v[i]);
  fetch_announce_interest(s, p);
  core_send_peers(s, p);
  if (p->is_seed)
    reach_tell(s, p);
  if (s->cfg.seed)
    seed_offer(s, p);
  fetch_schedule(s);
}

static void on_request(stitch_swarm *s, peer *p, const wire_msg *m) {
  vstate *v = core_find_version(s, m->version);
  chunk_id c = {m->version, m->object, m->chunk};
  wire_msg r;
  memset(&r, 0, sizeof(r));
  r.type = WIRE_REJECT;
  r.version = m->version;
  r.object = m->object;
  r.chunk = m->chunk;
  if (v == NULL || m->object >= v->ref.m->n_objects ||
      !bits_get(&v->held[m->object], m->chunk)) {
    if (!fetch_hold(s, p, &c))
      core_send(s, p, &r);
    return;
  }
  if (fetch_queued(p, &c) >= 0)
    return; /* asked twice, or asked for what we pass it anyway */
  if (p->n_serve == CORE_MAX_SERVE) {
    core_drop(s, p, 0, "too many requests queued");
    return;
  }
  core_serve_add(s, p, &c);
}

static void on_cancel(stitch_swarm *s, peer *p, const wire_msg *m) {
  (void)s;
  chunk_id c = {m->version, m->object, m->chunk};
  int i = fetch_queued(p, &c);
  if (i < 0)
    return;
  memmove(&p->serve[i], &p->serve[i + 1],
          (p->n_serve - (unsigned)i - 1) * sizeof(p->serve[0]));
  p->n_serve--;
}

static void on_have(stitch_swarm *s, peer *p, const wire_msg *m, int field) {
  vstate *v = core_find_version(s, m->version);
  if (v == NULL) {
    if (gossip_pend(s, p, m, field))
      return; /* an announcement: its manifest is on its way */
    /* Past what gossip_pend keeps (a few BITFIELDs, and the HAVEs
     * after them) a version newer than all we know does not exist: its
     * manifest comes first on the link otherwise. An older one we do
     * not keep is stale. */
    uint64_t latest = s->n_v ? s->v[s->n_v - 1].ref.m->version : 0;
    core_score(s, p, m->version > latest ? SCORE_NO_VERSION : SCORE_STALE);
    return;
  }
  if (m->object >= v->ref.m->n_objects) {
    core_score(s, p, SCORE_NO_VERSION);
    return;
  }
  uint64_t n = v->ref.m->objects[m->object].n_chunks;
  if (field ? m->nbits != n : m->chunk >= n) {
    core_drop(s, p, 1, "HAVE or BITFIELD does not fit the manifest");
    return;
  }
  int again = peer_bits(p, m->version, m->object, 0, n) != NULL;
  bits *b = peer_bits(p, m->version, m->object, 1, n);
  if (b == NULL)
    return;
  if (field) {
    uint64_t before = b->count;
    for (uint64_t i = 0; i < n; i++)
      if ((m->data[i / 8] >> (i % 8)) & 1 && !bits_get(b, i)) {
        bits_set(b, i);
        fetch_on_have_bit(s, p, m->version, m->object, i);
      }
    /* A peer sends one BITFIELD per object; another that adds nothing
     * carries nothing. */
    if (again && b->count == before && core_score(s, p, SCORE_EMPTY))
      return;
    cross_on_interest(s, p, m->version, m->object);
  } else if (!bits_get(b, m->chunk)) {
    bits_set(b, m->chunk);
    fetch_on_have_bit(s, p, m->version, m->object, m->chunk);
    p->progress_ms = s->now_ms;
  }
  if (s->cfg.seed)
    seed_offer(s, p);
}

/* One whole frame from a peer. */
static void on_frame(stitch_swarm *s, peer *p, int type, const uint8_t *body,
                     size_t len) {
  if (s->rx == NULL && (s->rx = malloc(sizeof(*s->rx))) == NULL) {
    core_drop(s, p, 0, "out of memory");
    return;
  }
  wire_msg *m = s->rx;
  stitch_diag d; /* a line only on failure: not 320 bytes cleared a frame */
  d.msg[0] = 0;
  if (wire_decode_tail(type, body, len, p->rd.tail, p->rd.tail_len, m, &d) !=
      0) {
    core_drop(s, p, 1, d.msg);
    return;
  }
  /* HELLO, then AUTH, then anything else (feed_frames refused any other
   * header in the handshake; this is for HELLO or AUTH later on). */
  if ((p->state == PEER_HELLO) != (type == WIRE_HELLO) ||
      (p->state == PEER_AUTH) != (type == WIRE_AUTH)) {
    core_drop(s, p, 1, "message out of order in the handshake");
    return;
  }
  if (p->state == PEER_FULL) /* on its way out: nothing it says matters */
    return;
  if (p->state == PEER_READY)
    p->frames++;
  if (type != WIRE_HAVE && type != WIRE_PING) /* a HAVE: fetch_on_have_bit */
    s->sched_due = 1;
  if (s->n_lazy > 0 && ((type >= WIRE_BITFIELD && type <= WIRE_REJECT) ||
                         type == WIRE_CROSSING || type == WIRE_BID)) {
    const vstate *v = core_find_version(s, m->version);
    if (v != NULL && v->lazy) /* it holds the version's manifest */
      gossip_known(p, m->version);
  }
  switch (type) {
  case WIRE_HELLO:
    hs_on_hello(s, p, m);
    break;
  case WIRE_AUTH:
    hs_on_auth(s, p, m);
    break;
  case WIRE_POLICY:
    if (hs_policy(s, m->data, m->data_len, p, &d) < 0)
      core_drop(s, p, 1, d.msg);
    break;
  case WIRE_MANIFEST: {
    int rc = add_manifest(s, m->data, m->data_len, p, &d);
    if (rc < 0) { /* banned, unless we ran out of memory: it sends again */
      core_drop(s, p, rc != STITCH_ENOMEM, d.msg);
    } else if (rc == 0) {
      core_score(s, p, SCORE_DUP_MANIFEST);
    } else if (rc == 1) {
      fetch_replan(s);
      for (size_t k = 0; k < s->n_peers; k++)
        if (s->peers[k].state == PEER_READY)
          fetch_announce_interest(s, &s->peers[k]);
    }
    break;
  }
  case WIRE_BITFIELD:
    on_have(s, p, m, 1);
    break;
  case WIRE_HAVE:
    on_have(s, p, m, 0);
    break;
  case WIRE_REQUEST:
    on_request(s, p, m);
    break;
  case WIRE_CANCEL:
    on_cancel(s, p, m);
    break;
  case WIRE_CHUNK:
    if (fetch_on_chunk(s, p, m) != 0)
      core_drop(s, p, 1, "sent a chunk that does not verify");
    break;
  case WIRE_REJECT: {
    chunk_id c = {m->version, m->object, m->chunk};
    const bits *b = peer_bits(p, c.version, c.object, 0, 0);
    int advertised = b != NULL && bits_get(b, c.chunk);
    p->answered_ms = s->now_ms;
    fetch_on_reject(s, p, &c);
    if (advertised) /* it said it held that chunk */
      core_score(s, p, SCORE_REJECT);
    break;
  }
  case WIRE_CROSSING:
    cross_on_crossing(s, p, m);
    break;
  case WIRE_BID:
    cross_on_bid(s, p, m);
    break;
  case WIRE_PEERS:
    core_on_peers(s, m);
    break;
  case WIRE_REACH:
    reach_on_msg(s, p, m);
    break;
  case WIRE_PUNCH:
    punch_on_msg(s, p, m);
    break;
  default: /* PING: an honest peer sends one after CORE_PING_MS of quiet */
    if (p->ping_ms != 0 && s->now_ms - p->ping_ms < CORE_PING_MS / 2)
      core_score(s, p, SCORE_EMPTY);
    p->ping_ms = s->now_ms;
    break;
  }
}

/* A frame's header is in and its body is to come: the limits that depend
 * on the link's state and on what was asked of the peer, before a byte of
 * the body is buffered. 0, or the peer was dropped. */
static int frame_begins(stitch_swarm *s, peer *p) {
  uint64_t n = (uint64_t)p->rd.need + p->rd.buf.len;
  int type = p->rd.type;
  if (p->state == PEER_HELLO || p->state == PEER_AUTH) {
    int want = p->state == PEER_HELLO ? WIRE_HELLO : WIRE_AUTH;
    if (type != want || n > CORE_HANDSHAKE_FRAME_MAX) {
      core_drop(s, p, 0, "a frame that is not its handshake's");
      return -1;
    }
  } else if (p->state == PEER_FULL && n > WIRE_SMALL_MAX) {
    core_drop(s, p, 0, "full");
    return -1;
  }
  if (type == WIRE_CHUNK && n > fetch_chunk_allow(s, p)) {
    core_drop(s, p, 1, "a CHUNK frame larger than any chunk asked of it");
    return -1;
  }
  if (type != WIRE_CHUNK && n > WIRE_SMALL_MAX) {
    if (s->unasked + n > CORE_UNASKED_MAX) {
      core_drop(s, p, 0, "large frames from every peer fill the budget");
      return -1;
    }
    p->frame_claim = (size_t)n;
    s->unasked += p->frame_claim;
  }
  p->frame_on = 1;
  p->frame_ms = s->now_ms;
  return 0;
}

/* Frames from BUF (plaintext). Returns the bytes used: all of them, but
 * when the peer is dropped or its HELLO turned the link to records (the
 * rest is sealed). */
static size_t feed_frames(stitch_swarm *s, peer *p, const uint8_t *buf,
                          size_t len) {
  size_t total = 0;
  int sealed = p->ch.on;
  while (len > 0 && p->state != PEER_CLOSING && p->ch.on == sealed) {
    size_t used = 0, take = len;
    int type = 0;
    const uint8_t *body;
    size_t blen;
    stitch_diag d; /* as in on_frame */
    d.msg[0] = 0;
    /* Feed a header on its own, so that frame_begins judges a frame
     * before any of its body is buffered. */
    size_t head = p->rd.ready ? 0 : p->rd.head_len;
    if ((p->rd.ready || p->rd.type == 0) && take > 5 - head)
      take = 5 - head;
    int frc =
        wire_reader_feed(&p->rd, buf, take, &used, &type, &body, &blen, &d);
    if (frc != 0) { /* our want of memory is no fault of the peer's */
      core_drop(s, p, p->state == PEER_READY && frc != STITCH_ENOMEM, d.msg);
      break;
    }
    buf += used;
    len -= used;
    total += used;
    if (p->rd.type != 0 && !p->rd.ready && !p->frame_on &&
        frame_begins(s, p) != 0)
      break;
    if (type <= 0) {
      if (used == 0)
        break;
      continue;
    }
    p->frame_on = 0;
    s->unasked -= p->frame_claim;
    p->frame_claim = 0;
    /* A token bucket on messages keeps a flood from costing us more than
     * a peer is worth. */
    p->tokens +=
        (double)(s->now_ms - p->tokens_ms) * CORE_RATE_PER_S / 1000.0;
    p->tokens_ms = s->now_ms;
    if (p->tokens > CORE_RATE_BURST)
      p->tokens = CORE_RATE_BURST;
    if ((p->tokens -= 1) < 0) {
      core_drop(s, p, 1, "too many messages");
      break;
    }
    on_frame(s, p, type, body, blen);
  }
  return total;
}

int stitch_swarm_peer_recv(stitch_swarm *s, uint32_t id, const uint8_t *buf,
                           size_t len, uint64_t now_ms) {
  s->now_ms = now_ms;
  peer *p = core_peer(s, id);
  if (p == NULL || p->state == PEER_CLOSING)
    return STITCH_EINVAL;
  p->last_recv_ms = now_ms;
  while (len > 0 && p->state != PEER_CLOSING) {
    if (!p->ch.on) {
      size_t used = feed_frames(s, p, buf, len);
      buf += used;
      len -= used;
      continue;
    }
    size_t used;
    const uint8_t *plain;
    size_t plen;
    stitch_diag d = {{0}};
    /* Not banned: a record that does not open may be an attacker's on
     * the path, not the peer's. */
    if (chan_open(&p->ch, buf, len, &used, &plain, &plen, &d) != 0) {
      core_drop(s, p, 0, d.msg);
      break;
    }
    buf += used;
    len -= used;
    if (plen > 0)
      feed_frames(s, p, plain, plen);
  }
  if (p->state == PEER_CLOSING)
    return STITCH_ELIMIT;
  wire_reader_trim(&p->rd);
  if (s->sched_due)
    fetch_schedule_due(s);
  return 0;
}

/* ---- Timers ----------------------------------------------------------- */

int stitch_swarm_tick(stitch_swarm *s, uint64_t now_ms) {
  s->now_ms = now_ms;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *p = &s->peers[i];
    if (p->state == PEER_FREE || p->state == PEER_CLOSING)
      continue;
    if (p->state != PEER_READY && now_ms - p->opened_ms > CORE_HANDSHAKE_MS) {
      core_drop(s, p, 0, "no handshake");
      continue;
    }
    if (now_ms - p->last_recv_ms > CORE_DEAD_MS) {
      if (!core_score(s, p, SCORE_SILENT)) /* holding a slot: greylisted */
        core_drop(s, p, 0, "silent");
      continue;
    }
    if (p->state == PEER_READY && p->owes && p->frames == 0 &&
        now_ms - p->ready_ms > CORE_QUIET_MS &&
        core_score(s, p, SCORE_SILENT))
      continue;
    /* A frame that crawls pins its buffer: it must come at
     * CORE_FRAME_MIN_RATE once CORE_FRAME_GRACE_MS have passed. */
    if (p->frame_on && now_ms - p->frame_ms > CORE_FRAME_GRACE_MS &&
        (double)p->rd.buf.len <
            (double)(now_ms - p->frame_ms - CORE_FRAME_GRACE_MS) *
                CORE_FRAME_MIN_RATE / 1000.0) {
      /* Not banned: it may be a slow link, not a lie. */
      core_drop(s, p, 0, "a frame that comes too slowly");
      continue;
    }
    if (p->state == PEER_READY && now_ms - p->last_send_ms > CORE_PING_MS) {
      wire_msg m;
      wire_msg_clear(&m);
      m.type = WIRE_PING;
      core_send(s, p, &m);
    }
    if (p->state == PEER_READY && now_ms - p->last_pex_ms > CORE_PEX_MS)
      core_send_peers(s, p);
    if (p->state == PEER_READY)
      gossip_tick(s, p);
  }
  if (now_ms >= s->next_maintain_ms) {
    hs_check_links(s);
    core_maintain(s);
    s->next_maintain_ms = now_ms + CORE_MAINTAIN_MS;
    /* Each node on a beat of its own (a phase from its key, taken once):
     * nodes started together otherwise dialed each other at the same
     * moment, each link twice; the handshake learns a dialer's address
     * only from its AUTH, too late to hold back the second dial (ctest
     * sim_regions: 0.07 of an anchor crossed back into the seed's region
     * through the links that came of it). */
    if (!s->phased) {
      s->phased = 1;
      s->next_maintain_ms +=
          ((uint64_t)s->cfg.node_pk.b[0] << 8 | s->cfg.node_pk.b[1]) %
          CORE_MAINTAIN_MS;
    }
  }
  gossip_pump(s); /* after a link that had a copy on its way closed */
  fetch_tick(s);
  fetch_schedule(s);
  return 0;
}

uint64_t stitch_swarm_wake(const stitch_swarm *s) {
  uint64_t w = s->next_maintain_ms;
  if (s->fetch_wake_ms > s->now_ms && s->fetch_wake_ms < w)
    w = s->fetch_wake_ms;
  /* The fetcher's timeouts and the seed's re-offers are checked on the
   * same beat. */
  uint64_t beat = s->now_ms + CORE_MAINTAIN_MS / 2;
  return w < beat ? w : beat;
}

void stitch_swarm_get_stats(const stitch_swarm *s, stitch_swarm_stats *st) {
  size_t same, far;
  core_count_ready(s, &same, &far);
  *st = s->st;
  st->peers = (uint32_t)(same + far);
  st->peers_same_region = (uint32_t)same;
  st->serve_slots = s->up.slots;
  st->up_bytes_per_s = (uint64_t)fetch_up_rate(s);
}
