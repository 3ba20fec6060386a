/* fuzz_peer.h: the input format of fuzz_peer (fuzz_peer.c), shared with
 * the seed generator (gen_corpus.c, gen_peer).
 *
 * An input is a 4-byte header and then a program of operations.
 *
 * Header:
 *   byte 0, low 3 bits, the handshake (FP_HS_*); then flags:
 *     FP_F_CIPHER_NONE  the victim's config has cipher_none: frames in
 *                       clear after the HELLOs
 *     FP_F_OPEN         the victim starts with the open policy (no ticket
 *                       needed)
 *     FP_F_SEED         the victim is the trainer's seed (its node key is
 *                       the swarm key), holding versions 1 and 2 whole
 *     FP_F_HAS_V1       a node victim starts knowing version 1's manifest
 *     FP_F_FAR          our AUTH names another region than the victim's
 *   byte 1: the chunks a node victim holds at start (bit i: every chunk
 *           whose index in the fixture's table is i mod 8)
 *   byte 2: sizes for the handshake: records of (b % 64) * 4 + 1 bytes,
 *           fed in pieces of (b / 64) * 7 + 1 bytes (all at once when
 *           b / 64 is 3)
 *   byte 3: the variant of FP_HS_BAD_TICKET / FP_HS_BAD_AUTH; with
 *           FP_HS_GOOD2, bit 7: the victim and we advertise no address
 *           (both behind NATs: PUNCH reaches the punching paths)
 *
 * Program: each operation is a byte (its code is the byte % FP_OP_COUNT)
 * and its arguments; an input that ends inside an operation ends there.
 * Frames are queued in clear and sealed into records by FP_OP_FLUSH (and
 * once more at the end), so the record boundaries fall anywhere in them.
 * "sel" bytes pick a version: sel % 4 is version 1, 2, 3 (unknown) or
 * sel / 4 (anything small). */
#ifndef STITCH_TESTS_FUZZ_PEER_H
#define STITCH_TESTS_FUZZ_PEER_H

enum {
  FP_HS_GOOD = 0,      /* HELLO, AUTH with a valid ticket */
  FP_HS_GOOD2 = 1,     /* the same (so that most inputs get through) */
  FP_HS_NO_TICKET = 2, /* AUTH without a ticket */
  FP_HS_BAD_TICKET = 3,/* byte 3 % 6: expired, another node's, signed by
                          another key, a seed's (valid), 100 bytes, one
                          bit flipped */
  FP_HS_RAW = 4,       /* no HELLO: the program's bytes go straight into
                          peer_recv, in pieces of byte 2 */
  FP_HS_RAW_HELLO = 5, /* our HELLO, then the program's bytes raw */
  FP_HS_ZERO_KX = 6,   /* a HELLO whose key gives no secret, then as GOOD */
  FP_HS_BAD_AUTH = 7   /* byte 3 % 6: another swarm, a bad signature, the
                          victim's own key, the swarm key (signed: the
                          trainer), our AUTH twice, a HELLO again */
};

#define FP_F_CIPHER_NONE 0x08
#define FP_F_OPEN 0x10
#define FP_F_SEED 0x20
#define FP_F_HAS_V1 0x40
#define FP_F_FAR 0x80

enum {
  FP_OP_FRAME = 0,    /* type, len lo, len hi, body: any frame, raw body */
  FP_OP_RAW = 1,      /* n, n bytes: flushed, then delivered unsealed */
  FP_OP_FLUSH = 2,    /* rec, piece: seal what is queued in records of
                         rec * 64 + 1 bytes (16384 when rec is 255), feed
                         it in pieces of piece * piece + 1 bytes */
  FP_OP_TICK = 3,     /* t: time moves (t + 1)^2 * 4 ms, then a tick */
  FP_OP_MANIFEST = 4, /* i: the signed manifest of version i % 2 + 1; bit
                         1: one byte (i / 4) of it flipped */
  FP_OP_BITFIELD = 5, /* sel, fill: bits of (version, object sel / 16 % 2)
                         for its real chunk count (+1 when fill bit 7,
                         but for 0xff: all bits set) */
  FP_OP_HAVE = 6,     /* sel, chunk */
  FP_OP_REQUEST = 7,  /* sel, chunk */
  FP_OP_CHUNK = 8,    /* sel, chunk, how: the real bytes of a chunk; sel
                         bit 7: of the victim's oldest open REQUEST
                         instead; how % 4: as is, one byte flipped, the
                         next chunk's bytes, one byte short */
  FP_OP_SMALL = 9,    /* kind, sel, chunk: CANCEL, REJECT, CROSSING, BID,
                         PING, REACH (sel regions) by kind % 6 */
  FP_OP_POLICY = 10,  /* i: policy i % 4: open (serial 1), closed (2),
                         closed revoking us (3), signed by another key */
  FP_OP_PEERS = 11,   /* n, then n bytes: n % 65 addresses 10.0.x.y */
  FP_OP_PUNCH = 12,   /* kind, who: PUNCH of kind % 6 naming nobody, us,
                         another key or the victim (who % 4), at no
                         address, 10.0.0.9:7 or our own (who / 4 % 3) */
  FP_OP_COUNT = 13
};

#endif
