/* channel.c: the record layer of proto/wire.md ("Encrypted records"), on
 * libsodium's crypto_kx and ChaCha20-Poly1305 (IETF). No primitive is
 * ours: this file only numbers records and frames them. */
#include "swarm/channel.h"

#include "common/diag.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define REC_FULL (CHAN_HEAD + CHAN_REC_MAX + CHAN_TAG)

_Static_assert(crypto_kx_SESSIONKEYBYTES == 32, "kx gives 32-byte keys");
_Static_assert(crypto_aead_chacha20poly1305_ietf_KEYBYTES == 32,
               "the AEAD takes a 32-byte key");
_Static_assert(crypto_aead_chacha20poly1305_ietf_ABYTES == CHAN_TAG,
               "the AEAD's tag");

/* The record's number, little-endian, after four zero bytes. */
static void nonce_of(uint64_t n, uint8_t out[12]) {
  memset(out, 0, 12);
  for (int i = 0; i < 8; i++)
    out[4 + i] = (uint8_t)(n >> (8 * i));
}

void chan_keypair(chan *c, const uint8_t seed[32]) {
  crypto_kx_seed_keypair(c->pk, c->sk, seed);
}

int chan_start(chan *c, int dialed, const uint8_t peer_pk[CHAN_KX_BYTES],
               stitch_diag *d) {
  int rc = dialed ? crypto_kx_client_session_keys(c->rx, c->tx, c->pk, c->sk,
                                                  peer_pk)
                  : crypto_kx_server_session_keys(c->rx, c->tx, c->pk, c->sk,
                                                  peer_pk);
  sodium_memzero(c->sk, sizeof(c->sk));
  RETURN_IF(rc != 0, d, STITCH_EFORMAT,
            "handshake: the peer's key exchange key is not usable");
  c->on = 1;
  c->rx_n = c->tx_n = 0;
  return 0;
}

int chan_seal(chan *c, const uint8_t *plain, size_t len, dbuf *out) {
  if (!c->on || len == 0 || len > CHAN_REC_MAX)
    return STITCH_EINVAL;
  CHECK_RC(dbuf_reserve(out, CHAN_OVERHEAD + len));
  uint8_t *p = out->p + out->len;
  size_t n = len + CHAN_TAG;
  p[0] = (uint8_t)n;
  p[1] = (uint8_t)(n >> 8);
  uint8_t nonce[12];
  nonce_of(c->tx_n++, nonce);
  crypto_aead_chacha20poly1305_ietf_encrypt_detached(
      p + CHAN_HEAD, p + CHAN_HEAD + len, NULL, plain, len, p, CHAN_HEAD, NULL,
      nonce, c->tx);
  out->len += CHAN_OVERHEAD + len;
  return 0;
}

int chan_open(chan *c, const uint8_t *buf, size_t len, size_t *used,
              const uint8_t **plain, size_t *plain_len, stitch_diag *d) {
  *used = 0;
  *plain = NULL;
  *plain_len = 0;
  if (c->rec == NULL) {
    c->rec = malloc(REC_FULL);
    RETURN_IF(c->rec == NULL, d, STITCH_ENOMEM, "out of memory");
    c->rec_len = 0;
  }
  uint8_t nonce[12];
  if (c->rec_len == 0 && len >= CHAN_HEAD) {
    /* A whole record in BUF (the usual case): opened from there into our
     * buffer, without copying it in first. */
    size_t n = (size_t)buf[0] | (size_t)buf[1] << 8;
    if (n > CHAN_TAG && n <= CHAN_REC_MAX + CHAN_TAG &&
        len >= CHAN_HEAD + n) {
      size_t m = n - CHAN_TAG;
      nonce_of(c->rx_n, nonce);
      RETURN_IF(crypto_aead_chacha20poly1305_ietf_decrypt_detached(
                    c->rec + CHAN_HEAD, NULL, buf + CHAN_HEAD, m,
                    buf + CHAN_HEAD + m, buf, CHAN_HEAD, nonce, c->rx) != 0,
                d, STITCH_ECHECKSUM,
                "record %llu does not open (altered, replayed or "
                "reordered)",
                (unsigned long long)c->rx_n);
      c->rx_n++;
      *used = CHAN_HEAD + n;
      *plain = c->rec + CHAN_HEAD;
      *plain_len = m;
      return 0;
    }
  }
  size_t pos = 0;
  while (c->rec_len < CHAN_HEAD && pos < len)
    c->rec[c->rec_len++] = buf[pos++];
  *used = pos;
  if (c->rec_len < CHAN_HEAD)
    return 0;
  size_t n = (size_t)c->rec[0] | (size_t)c->rec[1] << 8;
  RETURN_IF(n <= CHAN_TAG || n > CHAN_REC_MAX + CHAN_TAG, d, STITCH_EFORMAT,
            "record of %zu bytes, not %d..%d", n, CHAN_TAG + 1,
            CHAN_REC_MAX + CHAN_TAG);
  size_t want = CHAN_HEAD + n - c->rec_len;
  size_t take = len - pos < want ? len - pos : want;
  memcpy(c->rec + c->rec_len, buf + pos, take);
  c->rec_len += take;
  *used = pos + take;
  if (c->rec_len < CHAN_HEAD + n)
    return 0;
  nonce_of(c->rx_n, nonce);
  size_t m = n - CHAN_TAG;
  /* In place: libsodium's decrypt takes the same buffer for both. */
  RETURN_IF(crypto_aead_chacha20poly1305_ietf_decrypt_detached(
                c->rec + CHAN_HEAD, NULL, c->rec + CHAN_HEAD, m,
                c->rec + CHAN_HEAD + m, c->rec, CHAN_HEAD, nonce, c->rx) != 0,
            d, STITCH_ECHECKSUM,
            "record %llu does not open (altered, replayed or reordered)",
            (unsigned long long)c->rx_n);
  c->rx_n++;
  c->rec_len = 0;
  *plain = c->rec + CHAN_HEAD;
  *plain_len = m;
  return 0;
}

void chan_free(chan *c) {
  free(c->rec);
  sodium_memzero(c, sizeof(*c));
}
