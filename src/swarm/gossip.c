/* gossip.c: how a manifest spreads (docs/swarm.md "Gossip").
 *
 * A small manifest goes to every neighbour at once, as it always did. A
 * large one (a model of many tensors against a small delta) is announced,
 * not flooded: the node sends its BITFIELD of the version to every
 * neighbour (fetch.c fetch_announce_interest), a few bytes that also say
 * "I hold this version", and the manifest itself to CORE_MANIFEST_COPIES
 * neighbours at a time, the next one only when a link that had a copy
 * asks for more bytes (the copy is on the wire), and only to a neighbour
 * that has not shown it holds the version meanwhile (its MANIFEST, or
 * any frame of the version). On a fast uplink the copies go out back to
 * back, as a flood would; on a slow one the neighbours' announcements
 * come in while the first copies leave, and the rest are skipped.
 *
 * So a BITFIELD or HAVE may come before its manifest (protocol 3,
 * proto/wire.md "Intended use of each message"). The receiver keeps
 * what it names, at most CORE_PENDING_MAX of them a peer, and counts it
 * once the manifest comes (gossip_adopt); one still unmatched after
 * CORE_PENDING_MS is charged as a version that does not exist. Every
 * other frame about a version (a CHUNK, a CROSSING) goes after its
 * manifest on the same link (gossip_ensure). */
#include "swarm/core_internal.h"

#include <stdlib.h>
#include <string.h>

/* Is V's manifest sent in turn? Not by the seed, whose neighbours all
 * lack it; not when it is small; not when a copy to every neighbour
 * costs the uplink little against what the version moves (the least of
 * its objects: what a node up to date fetches). */
static int lazy_manifest(const stitch_swarm *s, const vstate *v) {
  if (s->cfg.seed || v->raw_len <= CORE_MANIFEST_EAGER_MAX)
    return 0;
  const stitch_manifest *m = v->ref.m;
  uint64_t least = UINT64_MAX;
  for (uint32_t o = 0; o < m->n_objects; o++)
    if (m->objects[o].bytes < least)
      least = m->objects[o].bytes;
  return (uint64_t)v->raw_len * core_count_peers(s, 1) >
         least / CORE_MANIFEST_SHARE;
}

void gossip_known(peer *p, uint64_t version) {
  for (unsigned i = 0; i < CORE_KNOWN_KEPT; i++)
    if (p->known[i] == version + 1)
      return;
  p->known[p->known_next++ % CORE_KNOWN_KEPT] = version + 1;
}

int gossip_knows(peer *p, const vstate *v) {
  if (!v->lazy)
    return 1; /* it went to every neighbour, or at the link's start */
  for (unsigned i = 0; i < CORE_KNOWN_KEPT; i++)
    if (p->known[i] == v->version + 1)
      return 1;
  for (size_t i = 0; i < p->n_have; i++)
    if (p->have[i].version == v->version)
      return 1;
  return 0; /* what it announced before we knew V was adopted */
}

void gossip_send(stitch_swarm *s, peer *p, const vstate *v) {
  wire_msg g;
  wire_msg_clear(&g);
  g.type = WIRE_MANIFEST;
  g.data = v->raw;
  g.data_len = v->raw_len;
  core_send(s, p, &g);
  gossip_known(p, v->version);
}

/* A copy passed on by gossip (the stats count those alone). */
static void send_manifest(stitch_swarm *s, peer *p, const vstate *v) {
  gossip_send(s, p, v);
  s->st.manifests_forwarded++;
}

/* Bytes of P's stream queued and not yet taken by the link. */
static uint64_t queued(const peer *p) {
  return (p->out.len - p->out_off) + (p->pay ? p->pay_len - p->pay_off : 0);
}

void gossip_pump(stitch_swarm *s) {
  if (s->n_lazy == 0)
    return;
  for (size_t i = s->n_v; i-- > 0 && s->mf_out < CORE_MANIFEST_COPIES;) {
    vstate *v = &s->v[i];
    if (!v->lazy || v->lazy_done)
      continue;
    size_t n = s->n_peers, lacking = 0;
    for (size_t j = 0; j < n; j++) {
      peer *q = &s->peers[(s->mf_rr + j) % n];
      if (q->state != PEER_READY || gossip_knows(q, v))
        continue;
      lacking++;
      if (q->mf_on || s->mf_out == CORE_MANIFEST_COPIES)
        continue;
      send_manifest(s, q, v);
      q->mf_on = 1;
      q->mf_mark = q->taken + queued(q);
      s->mf_out++;
      lacking--;
    }
    s->mf_rr++;
    if (lacking == 0)
      v->lazy_done = 1;
  }
}

void gossip_new(stitch_swarm *s, vstate *v, peer *from) {
  if (from != NULL)
    gossip_known(from, v->version);
  if (!lazy_manifest(s, v)) {
    for (size_t k = 0; k < s->n_peers; k++)
      if (s->peers[k].state == PEER_READY && &s->peers[k] != from)
        send_manifest(s, &s->peers[k], v);
    return;
  }
  v->lazy = 1;
  s->n_lazy++;
  gossip_pump(s);
}

void gossip_on_asked(stitch_swarm *s, peer *p) {
  if (p->mf_on && p->wired >= p->mf_mark) {
    p->mf_on = 0;
    s->mf_out--;
    gossip_pump(s);
  }
}

void gossip_peer_gone(stitch_swarm *s, peer *p) {
  if (p->mf_on) {
    p->mf_on = 0;
    s->mf_out--;
  }
}

void gossip_ensure(stitch_swarm *s, peer *p, const wire_msg *m) {
  if (s->n_lazy == 0)
    return; /* every manifest held went to every neighbour */
  switch (m->type) {
  case WIRE_HAVE:
    if (peer_told(p, m->version, m->object) != NULL)
      return; /* it follows our BITFIELD, which P keeps (gossip_pend) */
    break;
  case WIRE_REQUEST:
  case WIRE_CANCEL:
  case WIRE_CHUNK:
  case WIRE_REJECT:
  case WIRE_CROSSING:
  case WIRE_BID:
    break;
  default: /* a BITFIELD, a MANIFEST, or nothing of a version */
    return;
  }
  vstate *v = core_find_version(s, m->version);
  if (v != NULL && p->state == PEER_READY && !gossip_knows(p, v))
    send_manifest(s, p, v);
}

static pend_entry *pend_find(peer *p, uint64_t version, uint32_t object) {
  for (unsigned i = 0; i < p->n_pend; i++)
    if (p->pend[i].version == version && p->pend[i].object == object)
      return &p->pend[i];
  return NULL;
}

static void pend_add(pend_entry *e, uint64_t chunk) {
  if (e->n_idx < CORE_PENDING_BITS) /* the rest come with its next HAVEs */
    e->idx[e->n_idx++] = (uint32_t)chunk;
}

int gossip_pend(stitch_swarm *s, peer *p, const wire_msg *m, int field) {
  uint64_t latest = s->n_v ? s->v[s->n_v - 1].version : 0;
  if (m->version <= latest)
    return 0; /* an old version we do not keep: stale, not announced */
  pend_entry *e = pend_find(p, m->version, m->object);
  if (!field) {
    if (e == NULL || m->chunk >= e->nbits)
      return 0; /* a HAVE comes after its BITFIELD */
    pend_add(e, m->chunk);
    return 1;
  }
  if (e != NULL || p->n_pend == CORE_PENDING_MAX)
    return 0; /* one BITFIELD a version's object, a few versions ahead */
  e = &p->pend[p->n_pend++];
  e->version = m->version;
  e->object = m->object;
  e->nbits = m->nbits;
  e->n_idx = 0;
  for (uint64_t i = 0; i < m->nbits; i++)
    if ((m->data[i / 8] >> (i % 8)) & 1)
      pend_add(e, i);
  if (p->pending_ms == 0)
    p->pending_ms = s->now_ms;
  return 1;
}

void gossip_adopt(stitch_swarm *s, vstate *v) {
  const stitch_manifest *m = v->ref.m;
  for (size_t k = 0; k < s->n_peers; k++) {
    peer *q = &s->peers[k];
    if (q->state != PEER_READY || q->n_pend == 0)
      continue;
    int bad = 0;
    for (unsigned i = 0; i < q->n_pend && !bad;) {
      pend_entry e = q->pend[i];
      if (e.version != v->version) {
        i++;
        continue;
      }
      q->pend[i] = q->pend[--q->n_pend];
      if (e.object >= m->n_objects || e.nbits != m->objects[e.object].n_chunks) {
        bad = 1;
        break;
      }
      bits *b = peer_bits(q, v->version, e.object, 1, e.nbits);
      if (b == NULL)
        continue; /* out of memory: as if not heard */
      gossip_known(q, v->version);
      for (uint32_t j = 0; j < e.n_idx; j++)
        if (!bits_get(b, e.idx[j])) {
          bits_set(b, e.idx[j]);
          fetch_on_have_bit(s, q, v->version, e.object, e.idx[j]);
        }
      cross_on_interest(s, q, v->version, e.object);
    }
    if (q->n_pend == 0)
      q->pending_ms = 0;
    if (bad)
      core_drop(s, q, 1, "HAVE or BITFIELD does not fit the manifest");
  }
}

void gossip_tick(stitch_swarm *s, peer *p) {
  if (p->pending_ms == 0 || s->now_ms - p->pending_ms < CORE_PENDING_MS)
    return;
  p->n_pend = 0;
  p->pending_ms = 0;
  core_score(s, p, SCORE_NO_VERSION);
}
