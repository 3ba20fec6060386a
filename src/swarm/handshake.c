/* handshake.c: a link's handshake and admission, and the swarm's policy
 * (proto/wire.md "The handshake", docs/security.md).
 *
 * Both sides send HELLO, in clear: the protocol and an ephemeral X25519
 * key. From the two keys each side derives one key per direction
 * (channel.h) and everything after is sealed. The dialer then sends its
 * AUTH: the swarm key, its node key, its signature over both HELLO keys,
 * its ticket, where it listens and its region. The acceptor checks it
 * before it says anything of its own, so a stranger who dials a node
 * learns nothing but that it speaks this protocol; then it answers with
 * its AUTH, which the dialer checks the same way.
 *
 * A refused handshake bans nothing: what a peer claims before its
 * signature verifies is not known to be its own (another node's key, the
 * seed's address). */
#include "swarm/core_internal.h"

#include "common/diag.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hs_open(stitch_swarm *s, peer *p) {
  uint8_t seed[32];
  for (int i = 0; i < 32; i += 8) {
    uint64_t r = core_random(s);
    memcpy(seed + i, &r, 8);
  }
  chan_keypair(&p->ch, seed);
  sodium_memzero(seed, sizeof(seed));
  wire_msg m;
  wire_msg_clear(&m);
  m.type = WIRE_HELLO;
  m.proto = WIRE_PROTO;
  memcpy(m.kx, p->ch.pk, WIRE_KX_BYTES);
  p->ct.max = CORE_SEAL_BATCH + 64 * CHAN_OVERHEAD + CHAN_REC_MAX;
  if (wire_encode(&p->ct, &m) != 0)
    core_drop(s, p, 0, "out of memory");
  else
    core_sendable(s, p);
}

/* The peer's address without its port: what a refusal is logged under. */
static void host_of(const char *addr, char *out, size_t cap) {
  snprintf(out, cap, "%s", addr);
  char *colon = strrchr(out, ':');
  if (colon != NULL && colon != out)
    *colon = 0;
}

/* Refuses P at the handshake: counted, logged once per address, closed.
 * It has been sent nothing but our HELLO (and, when we dialed, our AUTH). */
static void refuse(stitch_swarm *s, peer *p, const char *why) {
  char host[STITCH_SWARM_ADDR_MAX];
  host_of(p->addr, host, sizeof(host));
  int logged = 0;
  for (size_t i = 0; i < CORE_REFUSED_LOG && !logged; i++)
    logged = strcmp(s->refused_log[i], host) == 0;
  s->st.refused++;
  if (!logged) {
    snprintf(s->refused_log[s->refused_next], STITCH_SWARM_ADDR_MAX, "%s",
             host);
    s->refused_next = (s->refused_next + 1) % CORE_REFUSED_LOG;
    core_log(s, "peer %u (%s): refused at the handshake: %s", p->id, p->addr,
             why);
  }
  p->state = PEER_CLOSING;
  fetch_peer_gone(s, p);
  stitch_swarm_action a = {.kind = STITCH_SWARM_CLOSE, .peer = p->id};
  core_push_action(s, &a);
}

static void send_auth(stitch_swarm *s, peer *p) {
  wire_msg a;
  memset(&a, 0, sizeof(a));
  a.type = WIRE_AUTH;
  a.swarm = s->cfg.swarm;
  a.node = s->cfg.node_pk;
  uint8_t in[WIRE_AUTH_INPUT];
  const uint8_t *ours = p->ch.pk, *theirs = p->peer_kx;
  if (p->outbound)
    wire_auth_input(0, ours, theirs, in);
  else
    wire_auth_input(1, theirs, ours, in);
  crypto_sign_detached(a.sig, NULL, in, sizeof(in), s->cfg.node_sk.b);
  a.data = s->cfg.ticket_len ? s->cfg.ticket : NULL;
  a.data_len = s->cfg.ticket_len;
  snprintf(a.listen, sizeof(a.listen), "%s", s->cfg.listen);
  snprintf(a.region, sizeof(a.region), "%s", s->cfg.region);
  core_send(s, p, &a);
}

void hs_on_hello(stitch_swarm *s, peer *p, const wire_msg *m) {
  stitch_diag d = {{0}};
  memcpy(p->peer_kx, m->kx, WIRE_KX_BYTES);
  if (chan_start(&p->ch, p->outbound, m->kx, &d) != 0) {
    refuse(s, p, d.msg);
    return;
  }
  if (s->cfg.cipher_none)
    p->ch.on = 0; /* the simulator's links: frames pass unsealed */
  p->state = PEER_AUTH;
  if (p->outbound)
    send_auth(s, p);
}

/* Whether the swarm admits node key K, whose AUTH verified and which
 * showed TICKET (LEN 0: none). Sets P's role and expiry. 0, or a reason. */
static const char *admits(stitch_swarm *s, peer *p, const stitch_pubkey *k,
                          const uint8_t *ticket, size_t len,
                          stitch_diag *d) {
  if (stitch_policy_revokes(s->policy, k))
    return "its key is revoked";
  if (core_banned_key(s, k))
    return "banned";
  if (grey_key(&s->grey, k, s->now_ms)) {
    s->st.grey_refused++;
    return "greylisted"; /* its score fell too low lately (score.h) */
  }
  if (memcmp(k->b, s->cfg.swarm.b, 32) == 0) {
    p->is_seed = 1; /* the trainer's own key: no ticket needed */
    return NULL;
  }
  if (len == 0) {
    if (s->policy != NULL && s->policy->open)
      return NULL;
    return "no ticket, and the swarm is closed";
  }
  stitch_ticket t;
  if (stitch_ticket_open(ticket, len, &s->cfg.swarm, &t, d) != 0 ||
      stitch_ticket_valid(&t, k, s->io.unix_time(s->io.user), d) != 0)
    return d->msg;
  p->is_seed = t.role == STITCH_ROLE_SEED;
  p->expires_s = t.expires_s;
  return NULL;
}

void hs_on_auth(stitch_swarm *s, peer *p, const wire_msg *m) {
  if (memcmp(m->swarm.b, s->cfg.swarm.b, 32) != 0) {
    refuse(s, p, "another swarm");
    return;
  }
  if (memcmp(m->node.b, s->cfg.node_pk.b, 32) == 0) {
    refuse(s, p, "that is us");
    return;
  }
  uint8_t in[WIRE_AUTH_INPUT];
  if (p->outbound)
    wire_auth_input(1, p->ch.pk, p->peer_kx, in);
  else
    wire_auth_input(0, p->peer_kx, p->ch.pk, in);
  if (crypto_sign_verify_detached(m->sig, in, sizeof(in), m->node.b) != 0) {
    refuse(s, p, "its AUTH does not verify");
    return;
  }
  stitch_diag d = {{0}};
  const char *why = admits(s, p, &m->node, m->data, m->data_len, &d);
  if (why != NULL) {
    refuse(s, p, why);
    return;
  }
  p->node = m->node;
  snprintf(p->listen, sizeof(p->listen), "%s", m->listen);
  snprintf(p->region, sizeof(p->region), "%s", m->region);
  p->same_region = strcmp(p->region, s->cfg.region) == 0;
  if (!p->outbound)
    send_auth(s, p); /* it proved itself: now it may know us */
  core_ready(s, p);
}

/* ---- The policy ------------------------------------------------------- */

void hs_send_policy(stitch_swarm *s, peer *p) {
  if (s->policy_raw == NULL)
    return;
  wire_msg g;
  memset(&g, 0, sizeof(g));
  g.type = WIRE_POLICY;
  g.data = s->policy_raw;
  g.data_len = s->policy_len;
  core_send(s, p, &g);
}

int hs_policy(stitch_swarm *s, const uint8_t *buf, size_t len, peer *from,
              stitch_diag *d) {
  stitch_policy *np;
  int rc = stitch_policy_open(buf, len, &s->cfg.swarm, &np, d);
  if (rc != 0)
    return rc;
  if (s->policy != NULL && np->serial <= s->policy->serial) {
    stitch_policy_free(np);
    return 0;
  }
  uint8_t *raw = malloc(len);
  if (raw == NULL) {
    stitch_policy_free(np);
    return stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  }
  memcpy(raw, buf, len);
  if (s->io.policy_write != NULL &&
      (rc = s->io.policy_write(s->io.user, buf, len)) != 0) {
    free(raw);
    stitch_policy_free(np);
    return stitch_diag_set(d, rc, "could not keep policy %" PRIu64,
                           np->serial);
  }
  stitch_policy_free(s->policy);
  free(s->policy_raw);
  s->policy = np;
  s->policy_raw = raw;
  s->policy_len = len;
  s->st.policy_serial = np->serial;
  core_log(s, "policy %" PRIu64 ": %s, %zu keys revoked", np->serial,
           np->open ? "open" : "closed", np->n_revoked);
  for (size_t k = 0; k < s->n_peers; k++)
    if (s->peers[k].state == PEER_READY && &s->peers[k] != from)
      hs_send_policy(s, &s->peers[k]);
  hs_check_links(s);
  return 1;
}

void hs_check_links(stitch_swarm *s) {
  uint64_t now_s = 0;
  int timed = 0;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *p = &s->peers[i];
    if (p->state != PEER_READY)
      continue;
    if (stitch_policy_revokes(s->policy, &p->node)) {
      core_drop(s, p, 0, "its key is revoked");
      continue;
    }
    if (p->expires_s != 0) {
      if (!timed) {
        now_s = s->io.unix_time(s->io.user);
        timed = 1;
      }
      if (now_s >= p->expires_s)
        core_drop(s, p, 0, "its ticket expired");
    }
  }
}
