/* admit.c: tickets and the swarm's policy (proto/admit.md).
 *
 * Both are fixed binary layouts signed with Ed25519 by the swarm key, each
 * opening with an 8-byte magic that also separates their signatures from
 * manifests' and AUTHs'. Nothing here reads a clock: expiry is checked
 * against the time the caller gives. */
#define _POSIX_C_SOURCE 200809L
#include "stitch/admit.h"

#include "common/diag.h"
#include "common/fileio.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TICKET_MAGIC "stitchT1"
#define POLICY_MAGIC "stitchP1"
#define POLICY_HEAD 56 /* magic, serial, flags, count, swarm key */
#define TICKET_WORD "stitch-ticket"
#define TICKET_LINE (sizeof(TICKET_WORD) + 2 * STITCH_TICKET_BYTES + 1)

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n; i-- > 0;)
    v = v << 8 | p[i];
  return v;
}

static int zero(const uint8_t *p, size_t n) {
  uint8_t acc = 0;
  for (size_t i = 0; i < n; i++)
    acc |= p[i];
  return acc == 0;
}

/* SK's public half is PK. */
static int key_pair(const stitch_seckey *sk, const stitch_pubkey *pk) {
  return memcmp(sk->b + crypto_sign_SEEDBYTES, pk->b, STITCH_PUBKEY_BYTES) ==
         0;
}

/* ---- Tickets ---------------------------------------------------------- */

int stitch_ticket_sign(const stitch_ticket *t, const stitch_seckey *sk,
                       uint8_t out[STITCH_TICKET_BYTES], stitch_diag *d) {
  RETURN_IF(t == NULL || sk == NULL || out == NULL, d, STITCH_EINVAL,
            "ticket: NULL argument");
  RETURN_IF(t->role != STITCH_ROLE_NODE && t->role != STITCH_ROLE_SEED, d,
            STITCH_EINVAL, "ticket: unknown role %d", (int)t->role);
  RETURN_IF(!key_pair(sk, &t->swarm), d, STITCH_EINVAL,
            "ticket: the key does not sign for this swarm");
  RETURN_IF(sodium_init() < 0, d, STITCH_EIO, "libsodium failed to start");
  memset(out, 0, STITCH_TICKET_BYTES);
  memcpy(out, TICKET_MAGIC, 8);
  out[8] = (uint8_t)t->role;
  memcpy(out + 16, t->swarm.b, 32);
  memcpy(out + 48, t->node.b, 32);
  put_le(out + 80, t->issued_s, 8);
  put_le(out + 88, t->expires_s, 8);
  crypto_sign_detached(out + 96, NULL, out, 96, sk->b);
  return 0;
}

int stitch_ticket_open(const uint8_t *buf, size_t len,
                       const stitch_pubkey *swarm, stitch_ticket *t,
                       stitch_diag *d) {
  RETURN_IF(buf == NULL || swarm == NULL || t == NULL, d, STITCH_EINVAL,
            "ticket: NULL argument");
  RETURN_IF(len != STITCH_TICKET_BYTES, d, STITCH_EFORMAT,
            "ticket: %zu bytes, not %d", len, STITCH_TICKET_BYTES);
  RETURN_IF(memcmp(buf, TICKET_MAGIC, 8) != 0, d, STITCH_EFORMAT,
            "ticket: not a stitch ticket");
  RETURN_IF(!zero(buf + 9, 7), d, STITCH_EFORMAT,
            "ticket: reserved bytes are not zero");
  RETURN_IF(buf[8] != STITCH_ROLE_NODE && buf[8] != STITCH_ROLE_SEED, d,
            STITCH_EFORMAT, "ticket: unknown role %u", buf[8]);
  RETURN_IF(memcmp(buf + 16, swarm->b, 32) != 0, d, STITCH_ESWARM,
            "ticket: issued for another swarm");
  RETURN_IF(crypto_sign_verify_detached(buf + 96, buf, 96, swarm->b) != 0, d,
            STITCH_ESIGNATURE, "ticket: the swarm key's signature does not "
                               "verify (forged or altered)");
  memcpy(t->swarm.b, buf + 16, 32);
  memcpy(t->node.b, buf + 48, 32);
  t->role = (stitch_role)buf[8];
  t->issued_s = get_le(buf + 80, 8);
  t->expires_s = get_le(buf + 88, 8);
  return 0;
}

int stitch_ticket_valid(const stitch_ticket *t, const stitch_pubkey *node,
                        uint64_t now_s, stitch_diag *d) {
  RETURN_IF(memcmp(t->node.b, node->b, 32) != 0, d, STITCH_EADMIT,
            "ticket: names another node key");
  RETURN_IF(t->expires_s != 0 && now_s >= t->expires_s, d, STITCH_EADMIT,
            "ticket: expired %" PRIu64 " s ago", now_s - t->expires_s);
  return 0;
}

int stitch_ticket_write(const char *path, const uint8_t t[STITCH_TICKET_BYTES],
                        stitch_diag *d) {
  RETURN_IF(path == NULL || t == NULL, d, STITCH_EINVAL,
            "ticket: NULL argument");
  struct stat st;
  RETURN_IF(lstat(path, &st) == 0, d, STITCH_EEXISTS,
            "%s: already exists; not overwriting it", path);
  char line[TICKET_LINE];
  memcpy(line, TICKET_WORD " ", sizeof(TICKET_WORD));
  sodium_bin2hex(line + sizeof(TICKET_WORD), 2 * STITCH_TICKET_BYTES + 1, t,
                 STITCH_TICKET_BYTES);
  line[TICKET_LINE - 1] = '\n';
  return stitch_write_file(path, line, sizeof(line), d);
}

int stitch_ticket_read(const char *path, uint8_t t[STITCH_TICKET_BYTES],
                       stitch_diag *d) {
  RETURN_IF(path == NULL || t == NULL, d, STITCH_EINVAL,
            "ticket: NULL argument");
  FILE *f = fopen(path, "rb");
  RETURN_IF(f == NULL, d, errno == ENOENT ? STITCH_ENOTFOUND : STITCH_EIO,
            "%s: %s", path, strerror(errno));
  char buf[TICKET_LINE + 1];
  size_t len = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  size_t wl = strlen(TICKET_WORD);
  RETURN_IF(len <= wl || memcmp(buf, TICKET_WORD " ", wl + 1) != 0, d,
            STITCH_EFORMAT,
            "%s: not a stitch ticket file (expected \"" TICKET_WORD " ...\")",
            path);
  size_t hex = len - wl - 1 - (buf[len - 1] == '\n');
  RETURN_IF(hex != 2 * STITCH_TICKET_BYTES, d, STITCH_EFORMAT,
            "%s: expected %d hex digits, found %zu", path,
            2 * STITCH_TICKET_BYTES, hex);
  size_t bin_len = 0;
  const char *end = NULL;
  int rc = sodium_hex2bin(t, STITCH_TICKET_BYTES, buf + wl + 1, hex, NULL,
                          &bin_len, &end);
  RETURN_IF(rc != 0 || bin_len != STITCH_TICKET_BYTES, d, STITCH_EFORMAT,
            "%s: bad hex digit in the ticket", path);
  return 0;
}

/* ---- The policy ------------------------------------------------------- */

static int cmp_key(const void *a, const void *b) {
  return memcmp(a, b, STITCH_PUBKEY_BYTES);
}

int stitch_policy_sign(const stitch_policy *p, const stitch_seckey *sk,
                       uint8_t **out, size_t *len, stitch_diag *d) {
  RETURN_IF(p == NULL || sk == NULL || out == NULL || len == NULL, d,
            STITCH_EINVAL, "policy: NULL argument");
  *out = NULL;
  *len = 0;
  RETURN_IF(p->n_revoked > STITCH_POLICY_MAX_REVOKED, d, STITCH_ELIMIT,
            "policy: %zu keys revoked, at most %d", p->n_revoked,
            STITCH_POLICY_MAX_REVOKED);
  RETURN_IF(!key_pair(sk, &p->swarm), d, STITCH_EINVAL,
            "policy: the key does not sign for this swarm");
  RETURN_IF(sodium_init() < 0, d, STITCH_EIO, "libsodium failed to start");
  size_t cap = POLICY_HEAD + 32 * p->n_revoked + 64;
  uint8_t *b = calloc(1, cap);
  RETURN_IF(b == NULL, d, STITCH_ENOMEM, "out of memory");
  if (p->n_revoked > 0)
    memcpy(b + POLICY_HEAD, p->revoked, 32 * p->n_revoked);
  qsort(b + POLICY_HEAD, p->n_revoked, 32, cmp_key);
  size_t n = 0; /* distinct keys, in place */
  for (size_t i = 0; i < p->n_revoked; i++)
    if (n == 0 || memcmp(b + POLICY_HEAD + 32 * (n - 1),
                         b + POLICY_HEAD + 32 * i, 32) != 0)
      memmove(b + POLICY_HEAD + 32 * n++, b + POLICY_HEAD + 32 * i, 32);
  memcpy(b, POLICY_MAGIC, 8);
  put_le(b + 8, p->serial, 8);
  b[16] = p->open ? 1 : 0;
  put_le(b + 20, n, 4);
  memcpy(b + 24, p->swarm.b, 32);
  size_t body = POLICY_HEAD + 32 * n;
  crypto_sign_detached(b + body, NULL, b, body, sk->b);
  *out = b;
  *len = body + 64;
  return 0;
}

int stitch_policy_open(const uint8_t *buf, size_t len,
                       const stitch_pubkey *swarm, stitch_policy **out,
                       stitch_diag *d) {
  RETURN_IF(buf == NULL || swarm == NULL || out == NULL, d, STITCH_EINVAL,
            "policy: NULL argument");
  *out = NULL;
  RETURN_IF(len < POLICY_HEAD + 64, d, STITCH_ETRUNCATED,
            "policy: %zu bytes, at least %d", len, POLICY_HEAD + 64);
  RETURN_IF(memcmp(buf, POLICY_MAGIC, 8) != 0, d, STITCH_EFORMAT,
            "policy: not a stitch policy");
  RETURN_IF(buf[16] > 1 || !zero(buf + 17, 3), d, STITCH_EFORMAT,
            "policy: unknown flags");
  uint64_t n = get_le(buf + 20, 4);
  RETURN_IF(n > STITCH_POLICY_MAX_REVOKED, d, STITCH_ELIMIT,
            "policy: %" PRIu64 " keys revoked, at most %d", n,
            STITCH_POLICY_MAX_REVOKED);
  RETURN_IF(len != POLICY_HEAD + 32 * n + 64, d, STITCH_EFORMAT,
            "policy: %zu bytes for %" PRIu64 " revoked keys, expected %" PRIu64,
            len, n, POLICY_HEAD + 32 * n + 64);
  RETURN_IF(memcmp(buf + 24, swarm->b, 32) != 0, d, STITCH_ESWARM,
            "policy: signed for another swarm");
  RETURN_IF(crypto_sign_verify_detached(buf + len - 64, buf, len - 64,
                                        swarm->b) != 0,
            d, STITCH_ESIGNATURE, "policy: the signature does not verify");
  for (uint64_t i = 1; i < n; i++)
    RETURN_IF(memcmp(buf + POLICY_HEAD + 32 * (i - 1),
                     buf + POLICY_HEAD + 32 * i, 32) >= 0,
              d, STITCH_EFORMAT, "policy: revoked keys are not ascending");
  stitch_policy *p = calloc(1, sizeof(*p));
  RETURN_IF(p == NULL, d, STITCH_ENOMEM, "out of memory");
  if (n > 0 && (p->revoked = malloc(32 * n)) == NULL) {
    free(p);
    return stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  }
  if (n > 0)
    memcpy(p->revoked, buf + POLICY_HEAD, 32 * n);
  p->n_revoked = n;
  p->serial = get_le(buf + 8, 8);
  p->open = buf[16];
  p->swarm = *swarm;
  *out = p;
  return 0;
}

void stitch_policy_free(stitch_policy *p) {
  if (p == NULL)
    return;
  free(p->revoked);
  free(p);
}

int stitch_policy_revokes(const stitch_policy *p, const stitch_pubkey *k) {
  return p != NULL && p->n_revoked > 0 &&
         bsearch(k->b, p->revoked, p->n_revoked, 32, cmp_key) != NULL;
}

static char *policy_path(const char *dir) {
  size_t n = strlen(dir) + sizeof("/policy");
  char *path = malloc(n);
  if (path != NULL)
    snprintf(path, n, "%s/policy", dir);
  return path;
}

int stitch_policy_load(const char *dir, uint8_t **out, size_t *len,
                       stitch_diag *d) {
  RETURN_IF(dir == NULL || out == NULL || len == NULL, d, STITCH_EINVAL,
            "policy: NULL argument");
  *out = NULL;
  *len = 0;
  char *path = policy_path(dir);
  RETURN_IF(path == NULL, d, STITCH_ENOMEM, "out of memory");
  struct stat st;
  if (stat(path, &st) != 0) {
    int rc = errno == ENOENT
                 ? stitch_diag_set(d, STITCH_ENOTFOUND, "%s: none", path)
                 : stitch_diag_set(d, STITCH_EIO, "%s: %s", path,
                                   strerror(errno));
    free(path);
    return rc;
  }
  stitch_map m;
  int rc = 0;
  if (st.st_size > (off_t)STITCH_POLICY_MAX)
    rc = stitch_diag_set(d, STITCH_ELIMIT, "%s: larger than any policy",
                         path);
  if (rc == 0)
    rc = stitch_map_open(path, &m, d);
  free(path);
  CHECK_RC(rc);
  uint8_t *b = malloc(m.len ? m.len : 1);
  if (b == NULL) {
    stitch_map_close(&m);
    return stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  }
  if (m.len)
    memcpy(b, m.data, m.len);
  *out = b;
  *len = m.len;
  stitch_map_close(&m);
  return 0;
}

int stitch_policy_save(const char *dir, const stitch_pubkey *swarm,
                       const uint8_t *buf, size_t len, stitch_diag *d) {
  RETURN_IF(dir == NULL || swarm == NULL || buf == NULL, d, STITCH_EINVAL,
            "policy: NULL argument");
  stitch_policy *p = NULL, *old = NULL;
  CHECK_RC(stitch_policy_open(buf, len, swarm, &p, d));
  uint8_t *ob = NULL;
  size_t ol = 0;
  stitch_diag dd;
  int rc = 0;
  if (stitch_policy_load(dir, &ob, &ol, &dd) == 0 &&
      stitch_policy_open(ob, ol, swarm, &old, &dd) == 0 &&
      old->serial >= p->serial)
    rc = stitch_diag_set(d, STITCH_EROLLBACK,
                         "policy: serial %" PRIu64 " is not above the "
                         "store's %" PRIu64,
                         p->serial, old->serial);
  free(ob);
  stitch_policy_free(old);
  stitch_policy_free(p);
  char *path = rc == 0 ? policy_path(dir) : NULL;
  if (rc == 0 && path == NULL)
    rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  if (rc == 0)
    rc = stitch_write_file(path, buf, len, d);
  free(path);
  return rc;
}

int stitch_policy_update(const char *dir, const stitch_seckey *sk,
                         const stitch_pubkey *node, int open, int *changed,
                         stitch_diag *d) {
  RETURN_IF(dir == NULL || sk == NULL || changed == NULL, d, STITCH_EINVAL,
            "policy: NULL argument");
  *changed = 0;
  stitch_pubkey swarm;
  memcpy(swarm.b, sk->b + crypto_sign_SEEDBYTES, 32);
  uint8_t *ob = NULL;
  size_t ol = 0;
  stitch_policy *old = NULL;
  int rc = stitch_policy_load(dir, &ob, &ol, d);
  if (rc == 0)
    rc = stitch_policy_open(ob, ol, &swarm, &old, d);
  free(ob);
  if (rc == STITCH_ENOTFOUND) {
    rc = 0;
    old = calloc(1, sizeof(*old));
    if (old == NULL)
      rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
    else
      old->swarm = swarm;
  }
  CHECK_RC(rc);
  int want_open = open < 0 ? old->open : open != 0;
  int add = node != NULL && !stitch_policy_revokes(old, node);
  if (want_open == old->open && !add) {
    stitch_policy_free(old);
    return 0;
  }
  stitch_policy np = *old;
  np.serial = old->serial + 1;
  np.open = want_open;
  np.revoked = malloc(32 * (old->n_revoked + 1));
  if (np.revoked == NULL) {
    stitch_policy_free(old);
    return stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  }
  if (old->n_revoked > 0)
    memcpy(np.revoked, old->revoked, 32 * old->n_revoked);
  if (add)
    np.revoked[np.n_revoked++] = *node;
  uint8_t *nb = NULL;
  size_t nl = 0;
  rc = stitch_policy_sign(&np, sk, &nb, &nl, d);
  free(np.revoked);
  stitch_policy_free(old);
  if (rc == 0)
    rc = stitch_policy_save(dir, &swarm, nb, nl, d);
  free(nb);
  if (rc == 0)
    *changed = 1;
  return rc;
}
