/* channel.h: a link's encryption after the handshake (proto/wire.md
 * "Encrypted records").
 *
 * Each side sends an ephemeral X25519 key in its HELLO, the only frame in
 * clear. libsodium's crypto_kx turns the two into one key per direction
 * (the dialer is kx's client), so a recorded connection stays secret when
 * a long-term key leaks later. Every byte after a side's HELLO is a
 * sequence of records: a u16 little-endian length, then that many bytes
 * of ChaCha20-Poly1305 (IETF) ciphertext and tag, sealed with the length
 * bytes as associated data and the record's number (0, 1, ...) as nonce.
 * A modified, replayed, reordered or truncated record does not open. The
 * frames of proto/wire.md run inside, split across records anyhow. */
#ifndef STITCH_SWARM_CHANNEL_H
#define STITCH_SWARM_CHANNEL_H

#include "stitch/error.h"

#include "common/bytes.h"

#include <stddef.h>
#include <stdint.h>

#define CHAN_KX_BYTES 32
#define CHAN_REC_MAX 16384 /* plaintext bytes in one record */
#define CHAN_TAG 16
#define CHAN_HEAD 2
#define CHAN_OVERHEAD (CHAN_HEAD + CHAN_TAG)

typedef struct chan {
  int on;                     /* keys set: records from now on */
  uint8_t pk[CHAN_KX_BYTES];  /* our ephemeral key, sent in HELLO */
  uint8_t sk[CHAN_KX_BYTES];  /* wiped once the keys are derived */
  uint8_t rx[32], tx[32];
  uint64_t rx_n, tx_n;        /* the next record's number, each way */
  uint8_t *rec;               /* the record coming in (head included) */
  size_t rec_len;
} chan;

/* Our ephemeral pair from SEED (32 bytes the caller draws). */
void chan_keypair(chan *c, const uint8_t seed[32]);
/* Derives the two keys from the peer's HELLO key; DIALED: we are kx's
 * client. Fails (STITCH_EFORMAT) on a key that gives no secret. */
int chan_start(chan *c, int dialed, const uint8_t peer_pk[CHAN_KX_BYTES],
               stitch_diag *d);
/* Seals LEN (1..CHAN_REC_MAX) bytes of PLAIN as one record onto OUT. */
int chan_seal(chan *c, const uint8_t *plain, size_t len, dbuf *out);
/* Takes bytes of BUF (LEN) toward the record coming in and sets *USED.
 * When a record is whole and opens, *PLAIN / *PLAIN_LEN are its bytes,
 * valid until the next call; else *PLAIN_LEN is 0. A record that does not
 * open, or whose length is out of range, fails (the link is done). At
 * most one record is buffered: CHAN_HEAD + CHAN_REC_MAX + CHAN_TAG. */
int chan_open(chan *c, const uint8_t *buf, size_t len, size_t *used,
              const uint8_t **plain, size_t *plain_len, stitch_diag *d);
void chan_free(chan *c);

#endif
