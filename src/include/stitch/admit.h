/* stitch/admit.h: who may join a swarm (proto/admit.md, docs/security.md).
 *
 * A swarm is closed by default. The trainer's key (the swarm key) signs
 * a ticket for each member: it names the member's node key, its role and
 * when it expires. A node presents its ticket in the handshake (AUTH,
 * proto/wire.md) and every member refuses a peer without a valid one.
 *
 * The swarm's policy is one more signed statement, with a serial number
 * that only grows: whether the swarm is open (members need no ticket) and
 * which node keys are revoked. It spreads like a manifest (POLICY frames)
 * and the newest serial wins. */
#ifndef STITCH_ADMIT_H
#define STITCH_ADMIT_H

#include "stitch/version.h"

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

/* ---- Tickets ---------------------------------------------------------- */

#define STITCH_TICKET_BYTES 160

typedef enum stitch_role {
  STITCH_ROLE_NODE = 1, /* fetches and serves */
  STITCH_ROLE_SEED = 2  /* a mirror of the trainer's seed: its peers treat
                           it as a seed */
} stitch_role;

typedef struct stitch_ticket {
  stitch_pubkey swarm; /* the key that signed it */
  stitch_pubkey node;  /* the member it admits */
  stitch_role role;
  uint64_t issued_s;  /* Unix time, seconds */
  uint64_t expires_s; /* Unix time, seconds; 0: never */
} stitch_ticket;

/* Signs T with SK (the swarm key; t->swarm must be its public half) into
 * OUT. */
int stitch_ticket_sign(const stitch_ticket *t, const stitch_seckey *sk,
                       uint8_t out[STITCH_TICKET_BYTES], stitch_diag *d);
/* Checks BUF (LEN bytes) is a ticket that SWARM signed and fills *T.
 * Expiry is the caller's to check against its clock (stitch_ticket_valid). */
int stitch_ticket_open(const uint8_t *buf, size_t len,
                       const stitch_pubkey *swarm, stitch_ticket *t,
                       stitch_diag *d);
/* 0 when T admits NODE at NOW_S (Unix seconds): it names NODE and has not
 * expired. STITCH_EADMIT with a reason in D otherwise. */
int stitch_ticket_valid(const stitch_ticket *t, const stitch_pubkey *node,
                        uint64_t now_s, stitch_diag *d);
/* Ticket files: one line, "stitch-ticket <320 hex digits>\n". write
 * refuses to overwrite (STITCH_EEXISTS). */
int stitch_ticket_write(const char *path, const uint8_t t[STITCH_TICKET_BYTES],
                        stitch_diag *d);
int stitch_ticket_read(const char *path, uint8_t t[STITCH_TICKET_BYTES],
                       stitch_diag *d);

/* ---- The swarm's policy ----------------------------------------------- */

#define STITCH_POLICY_MAX_REVOKED 65536
#define STITCH_POLICY_MAX (56 + 32 * STITCH_POLICY_MAX_REVOKED + 64)

typedef struct stitch_policy {
  stitch_pubkey swarm;
  uint64_t serial; /* only grows; the newest wins */
  int open;        /* members need no ticket */
  size_t n_revoked;
  stitch_pubkey *revoked; /* ascending, no repeats */
} stitch_policy;

/* Signs P with SK into *OUT (malloc'd, *LEN bytes; the caller frees).
 * The revoked keys are sorted and repeats dropped in the signed bytes. */
int stitch_policy_sign(const stitch_policy *p, const stitch_seckey *sk,
                       uint8_t **out, size_t *len, stitch_diag *d);
/* Verifies BUF against SWARM and parses it into *OUT (the caller frees it
 * with stitch_policy_free). Never allocates more than BUF's size says. */
int stitch_policy_open(const uint8_t *buf, size_t len,
                       const stitch_pubkey *swarm, stitch_policy **out,
                       stitch_diag *d);
void stitch_policy_free(stitch_policy *p);
/* 1 when P revokes K (P may be NULL: nothing is revoked). */
int stitch_policy_revokes(const stitch_policy *p, const stitch_pubkey *k);

/* A store's policy: DIR/policy, the signed bytes. load gives
 * STITCH_ENOTFOUND when there is none; *OUT is malloc'd. save verifies
 * BUF against SWARM and refuses one whose serial is not above the stored
 * one's (STITCH_EROLLBACK). */
int stitch_policy_load(const char *dir, uint8_t **out, size_t *len,
                       stitch_diag *d);
int stitch_policy_save(const char *dir, const stitch_pubkey *swarm,
                       const uint8_t *buf, size_t len, stitch_diag *d);
/* For `stitch revoke` and `stitchd seed --open`: the store's policy (an
 * empty closed one of serial 0 when there is none) with NODE revoked
 * (NODE NULL: none) and OPEN set (-1: as it was), signed with the next
 * serial and saved. *CHANGED is 0 when nothing needed saying. */
int stitch_policy_update(const char *dir, const stitch_seckey *sk,
                         const stitch_pubkey *node, int open, int *changed,
                         stitch_diag *d);

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
