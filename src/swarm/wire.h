/* wire.h: frames and messages of the swarm protocol (proto/wire.md).
 *
 * A frame is a u32 little-endian length L, a u8 message type, and L - 1
 * bytes of body: one msgpack array holding the message's fields. The
 * length and the type are checked against the type's limit before a byte
 * of the body is buffered, and the buffer grows only as bytes arrive. */
#ifndef STITCH_SWARM_WIRE_H
#define STITCH_SWARM_WIRE_H

#include "stitch/swarm.h"
#include "stitch/version_info.h"

#include "common/bytes.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define WIRE_PROTO STITCH_WIRE_PROTOCOL
#define WIRE_KX_BYTES 32       /* an ephemeral X25519 public key */
#define WIRE_AUTH_INPUT 49     /* the bytes AUTH's signature covers */
#define WIRE_MAX_PEERS_MSG 64 /* addresses in one PEERS message */
#define WIRE_MAX_REACH 16     /* regions in one REACH message */
#define WIRE_SMALL_MAX (64u << 10) /* every message without a payload */

typedef enum wire_type {
  WIRE_HELLO = 1,    /* proto, ephemeral key: the only frame in clear */
  WIRE_AUTH = 2,     /* swarm, node key, signature of the handshake,
                        ticket, listen, region */
  WIRE_MANIFEST = 3, /* a signed manifest */
  WIRE_BITFIELD = 4, /* chunks held of (version, object), one bit each */
  WIRE_HAVE = 5,     /* one more chunk held */
  WIRE_REQUEST = 6,  /* please send (version, object, chunk) */
  WIRE_CANCEL = 7,   /* no longer needed */
  WIRE_CHUNK = 8,    /* (version, object, chunk) and its bytes */
  WIRE_REJECT = 9,   /* will not send (version, object, chunk) now */
  WIRE_PEERS = 10,   /* addresses of other nodes (peer exchange) */
  WIRE_PING = 11,    /* keepalive */
  WIRE_CROSSING = 12, /* (version, object, chunk) is being fetched from
                         another region by node key */
  WIRE_REACH = 13,   /* the other regions the sender's links reach */
  WIRE_BID = 14,     /* node key would fetch (version, object, chunk) from
                        another region by its turn */
  WIRE_POLICY = 15,  /* the swarm's signed policy (stitch/admit.h) */
  WIRE_PUNCH = 16,   /* hole punching through a common neighbour: kind,
                        node key, address (punch.h) */
  WIRE_TYPE_COUNT_
} wire_type;

typedef struct wire_addr {
  const char *addr;   /* NUL-terminated copies in the message's storage */
  const char *region;
} wire_addr;

/* A decoded message. Pointers (keys, names, bits, data) point into the
 * frame it was decoded from, or into the caller's memory when encoding. */
typedef struct wire_msg {
  wire_type type;
  /* HELLO */
  uint32_t proto;
  uint8_t kx[WIRE_KX_BYTES];
  /* AUTH; node is also CROSSING's and BID's. AUTH's ticket is data
   * (0 or STITCH_TICKET_BYTES bytes). */
  stitch_pubkey swarm, node;
  uint8_t sig[STITCH_SIG_BYTES];
  char listen[STITCH_SWARM_ADDR_MAX];
  char region[STITCH_SWARM_REGION_MAX];
  /* BITFIELD, HAVE, REQUEST, CANCEL, CHUNK, REJECT */
  uint64_t version;
  uint32_t object;
  uint64_t chunk;   /* HAVE, REQUEST, CANCEL, CHUNK, REJECT */
  uint64_t nbits;   /* BITFIELD: bits that follow (the object's chunks) */
  /* MANIFEST, POLICY: the signed bytes; BITFIELD: ceil(nbits / 8) bytes, bit i of
   * the field is bit (i % 8) of byte i / 8; CHUNK: the chunk's bytes. */
  const uint8_t *data;
  size_t data_len;
  /* PUNCH: its kind (WIRE_PUNCH_ASK..), node (above) and address */
  uint32_t punch;
  char addr[STITCH_SWARM_ADDR_MAX];
  size_t n_peers; /* PEERS: the first n_peers of peer_addr, peer_region */
  size_t n_reach; /* REACH: the first n_reach of reach */
  /* The lists, last: wire_msg_clear leaves them alone (11 KB, most of the
   * struct, cleared for every HAVE sent and every frame read), and only
   * their first n_peers / n_reach entries are read. */
  char peer_addr[WIRE_MAX_PEERS_MSG][STITCH_SWARM_ADDR_MAX];
  char peer_region[WIRE_MAX_PEERS_MSG][STITCH_SWARM_REGION_MAX];
  char reach[WIRE_MAX_REACH][STITCH_SWARM_REGION_MAX];
} wire_msg;

/* Zeroes every field of M up to its lists, whose counts it zeroes: what
 * memset would, for a twentieth of the bytes. */
static inline void wire_msg_clear(wire_msg *m) {
  memset(m, 0, offsetof(wire_msg, peer_addr));
}

/* PUNCH's kinds (proto/wire.md "PUNCH"): three a member sends a relay,
 * three a relay sends a member. */
#define WIRE_PUNCH_ASK 0      /* link me with node (zero: whom you choose) */
#define WIRE_PUNCH_ACCEPT 1   /* I take node's ask, and dial it now */
#define WIRE_PUNCH_DECLINE 2  /* I do not take node's ask */
#define WIRE_PUNCH_ASKED 3    /* node, seen at addr, asks to link with you */
#define WIRE_PUNCH_ACCEPTED 4 /* node, seen at addr, took your ask: dial */
#define WIRE_PUNCH_DECLINED 5 /* node declined (zero: nobody to offer) */
#define WIRE_PUNCH_KINDS 6

/* The first control byte (below 0x20, or 0x7f) in S[0..N), or NULL. A
 * str on the wire holds none (proto/wire.md): an address or region a peer
 * sends ends up in log lines, where a newline would forge one. */
const uint8_t *wire_control_byte(const void *s, size_t n);

/* The largest frame (type byte and body) a type may have. */
size_t wire_type_limit(int type);

/* Appends M as one frame to OUT. */
int wire_encode(dbuf *out, const wire_msg *m);

/* Appends M, a CHUNK, as one frame without its payload: the frame claims
 * m->data_len payload bytes, which the caller sends right after what was
 * appended (the core serves chunks straight from storage, uncopied). */
int wire_encode_head(dbuf *out, const wire_msg *m);

/* Decodes one frame's type and body (as wire_reader hands them out).
 * Strings are copied into M's arrays; data points into BODY. Rejects
 * anything that is not exactly the type's fields with the right types and
 * sizes, and trailing bytes. */
int wire_decode(int type, const uint8_t *body, size_t len, wire_msg *m,
                stitch_diag *d);
/* As wire_decode, for a body in two parts: BODY, then TAIL (TAIL_LEN
 * bytes, NULL for none), which must be exactly the bytes of a CHUNK's
 * last field, a bin whose header ends BODY (the reader's tail); data
 * points into TAIL. */
int wire_decode_tail(int type, const uint8_t *body, size_t len,
                     const uint8_t *tail, size_t tail_len, wire_msg *m,
                     stitch_diag *d);

/* Incremental frame reader: feed bytes as they arrive, take whole frames.
 * The buffer holds at most one frame, never more than its type's limit,
 * and grows only as its bytes come in. */
typedef struct wire_reader {
  dbuf buf;       /* the frame being assembled */
  uint8_t head[5];
  size_t head_len;
  uint32_t need;  /* body bytes still to come */
  int type;
  int ready;      /* a whole frame is in buf */
  /* Opt in (the core does): a CHUNK whose head came before its bytes,
   * and whose bytes then came whole in one call, is handed out as its
   * head (*body) and those bytes where they lie (tail), uncopied: for
   * wire_decode_tail. A driver that writes a chunk's frame head and its
   * payload apart (the simulator) has every chunk read so. */
  int split;
  const uint8_t *tail;
  size_t tail_len;
} wire_reader;

void wire_reader_init(wire_reader *r);
void wire_reader_free(wire_reader *r);
/* Consumes up to LEN bytes of BUF into the frame being assembled and sets
 * *used. When *type is set (> 0), a whole frame is ready: its body is
 * *body / *body_len, valid until the next call and, when the body came
 * whole in this call, pointing into BUF (uncopied) as long as BUF lives
 * (and with r->split, a CHUNK's bytes may be in r->tail). Fails (STITCH_ELIMIT,
 * STITCH_EFORMAT) on an unknown type or a length past the type's limit,
 * before buffering anything of that frame. */
int wire_reader_feed(wire_reader *r, const uint8_t *buf, size_t len,
                     size_t *used, int *type, const uint8_t **body,
                     size_t *body_len, stitch_diag *d);

/* Frees a large frame buffer once its frame was handed out and used, so an
 * idle peer costs little memory. */
void wire_reader_trim(wire_reader *r);

/* The bytes an AUTH signs (proto/wire.md "AUTH"): "stitch-auth-v2" and
 * two zero bytes, the signer's side (0: it dialed, 1: it accepted), then
 * the BLAKE2b-256 hash of the dialer's and the acceptor's HELLO keys. */
void wire_auth_input(int acceptor, const uint8_t dialer_kx[WIRE_KX_BYTES],
                     const uint8_t acceptor_kx[WIRE_KX_BYTES],
                     uint8_t out[WIRE_AUTH_INPUT]);

#endif
