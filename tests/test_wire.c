/* test_wire.c: frames and messages of the swarm protocol (proto/wire.md,
 * src/swarm/wire.c): round trips of every type at typical and edge values,
 * the frame reader under every split of a stream, and every refusal.
 *
 * Reference bodies, valid and malformed, are built here with msgpack-c's
 * packer, field by field from the message, apart from the codec's own
 * emit (which packs with msgpack-c too): that the codec writes exactly
 * these bytes for every valid message is checked on each round trip, so
 * a field out of order, missing or packed in another form shows. */
#include "test.h"

#include "stitch.h"

#include "swarm/channel.h"
#include "swarm/wire.h"

#include <msgpack.h>
#include <sodium.h>

static test_rng rng;

#define MIB (1u << 20)

/* ---- helpers ------------------------------------------------------------ */

static void fill(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)test_rng_next(&rng);
}

static void assert_msg_eq(const wire_msg *a, const wire_msg *b) {
  ASSERT_EQ(a->type, b->type);
  switch (a->type) {
  case WIRE_HELLO:
    ASSERT_UEQ(a->proto, b->proto);
    ASSERT_MEM_EQ(a->kx, b->kx, WIRE_KX_BYTES);
    break;
  case WIRE_AUTH:
    ASSERT_MEM_EQ(a->swarm.b, b->swarm.b, STITCH_PUBKEY_BYTES);
    ASSERT_MEM_EQ(a->node.b, b->node.b, STITCH_PUBKEY_BYTES);
    ASSERT_MEM_EQ(a->sig, b->sig, STITCH_SIG_BYTES);
    ASSERT_UEQ(a->data_len, b->data_len);
    if (a->data_len)
      ASSERT_MEM_EQ(a->data, b->data, a->data_len);
    ASSERT_STR_EQ(a->listen, b->listen);
    ASSERT_STR_EQ(a->region, b->region);
    break;
  case WIRE_PEERS:
    ASSERT_UEQ(a->n_peers, b->n_peers);
    for (size_t i = 0; i < a->n_peers; i++) {
      ASSERT_STR_EQ(a->peer_addr[i], b->peer_addr[i]);
      ASSERT_STR_EQ(a->peer_region[i], b->peer_region[i]);
    }
    break;
  case WIRE_REACH:
    ASSERT_UEQ(a->n_reach, b->n_reach);
    for (size_t i = 0; i < a->n_reach; i++)
      ASSERT_STR_EQ(a->reach[i], b->reach[i]);
    break;
  case WIRE_PING:
    break;
  case WIRE_PUNCH:
    ASSERT_UEQ(a->punch, b->punch);
    ASSERT_MEM_EQ(a->node.b, b->node.b, STITCH_PUBKEY_BYTES);
    ASSERT_STR_EQ(a->addr, b->addr);
    break;
  case WIRE_MANIFEST:
  case WIRE_POLICY:
    ASSERT_UEQ(a->data_len, b->data_len);
    ASSERT_MEM_EQ(a->data, b->data, a->data_len);
    break;
  default:
    ASSERT_UEQ(a->version, b->version);
    ASSERT_UEQ(a->object, b->object);
    if (a->type != WIRE_BITFIELD)
      ASSERT_UEQ(a->chunk, b->chunk);
    if (a->type == WIRE_BITFIELD)
      ASSERT_UEQ(a->nbits, b->nbits);
    if (a->type == WIRE_CROSSING || a->type == WIRE_BID)
      ASSERT_MEM_EQ(a->node.b, b->node.b, STITCH_PUBKEY_BYTES);
    if (a->type == WIRE_BITFIELD || a->type == WIRE_CHUNK) {
      ASSERT_UEQ(a->data_len, b->data_len);
      ASSERT_MEM_EQ(a->data, b->data, a->data_len);
    }
  }
}

/* The body msgpack-c's packer writes for M. */
static void ref_body(const wire_msg *m, msgpack_sbuffer *sb) {
  msgpack_packer pk;
  msgpack_sbuffer_init(sb);
  msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
  switch (m->type) {
  case WIRE_HELLO:
    msgpack_pack_array(&pk, 2);
    msgpack_pack_uint32(&pk, m->proto);
    msgpack_pack_bin_with_body(&pk, m->kx, 32);
    break;
  case WIRE_AUTH:
    msgpack_pack_array(&pk, 6);
    msgpack_pack_bin_with_body(&pk, m->swarm.b, 32);
    msgpack_pack_bin_with_body(&pk, m->node.b, 32);
    msgpack_pack_bin_with_body(&pk, m->sig, 64);
    msgpack_pack_bin_with_body(&pk, m->data, m->data_len);
    msgpack_pack_str_with_body(&pk, m->listen, strlen(m->listen));
    msgpack_pack_str_with_body(&pk, m->region, strlen(m->region));
    break;
  case WIRE_MANIFEST:
  case WIRE_POLICY:
    msgpack_pack_array(&pk, 1);
    msgpack_pack_bin_with_body(&pk, m->data, m->data_len);
    break;
  case WIRE_BITFIELD:
    msgpack_pack_array(&pk, 4);
    msgpack_pack_uint64(&pk, m->version);
    msgpack_pack_uint32(&pk, m->object);
    msgpack_pack_uint64(&pk, m->nbits);
    msgpack_pack_bin_with_body(&pk, m->data, m->data_len);
    break;
  case WIRE_PEERS:
    msgpack_pack_array(&pk, 1);
    msgpack_pack_array(&pk, m->n_peers);
    for (size_t i = 0; i < m->n_peers; i++) {
      msgpack_pack_array(&pk, 2);
      msgpack_pack_str_with_body(&pk, m->peer_addr[i], strlen(m->peer_addr[i]));
      msgpack_pack_str_with_body(&pk, m->peer_region[i],
                                 strlen(m->peer_region[i]));
    }
    break;
  case WIRE_REACH:
    msgpack_pack_array(&pk, 1);
    msgpack_pack_array(&pk, m->n_reach);
    for (size_t i = 0; i < m->n_reach; i++)
      msgpack_pack_str_with_body(&pk, m->reach[i], strlen(m->reach[i]));
    break;
  case WIRE_PING:
    msgpack_pack_array(&pk, 0);
    break;
  case WIRE_PUNCH:
    msgpack_pack_array(&pk, 3);
    msgpack_pack_uint32(&pk, m->punch);
    msgpack_pack_bin_with_body(&pk, m->node.b, 32);
    msgpack_pack_str_with_body(&pk, m->addr, strlen(m->addr));
    break;
  default:
    msgpack_pack_array(&pk, m->type == WIRE_CHUNK ||
                                    m->type == WIRE_CROSSING ||
                                    m->type == WIRE_BID ? 4 : 3);
    msgpack_pack_uint64(&pk, m->version);
    msgpack_pack_uint32(&pk, m->object);
    msgpack_pack_uint64(&pk, m->chunk);
    if (m->type == WIRE_CHUNK)
      msgpack_pack_bin_with_body(&pk, m->data, m->data_len);
    if (m->type == WIRE_CROSSING || m->type == WIRE_BID)
      msgpack_pack_bin_with_body(&pk, m->node.b, 32);
  }
}

static uint32_t rd_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

/* Encodes M (checking the frame against msgpack-c's bytes and that a
 * second encoding is identical), reads it back through a reader in one
 * piece, decodes it and compares. */
static void roundtrip(const wire_msg *m) {
  dbuf out = {NULL, 0, 0, (size_t)256 * MIB}; /* two copies fit */
  stitch_diag d = {{0}};
  ASSERT_OK(wire_encode(&out, m), d);
  ASSERT_GE(out.len, 6);
  ASSERT_UEQ(rd_le32(out.p), out.len - 4);
  ASSERT_EQ(out.p[4], m->type);
  ASSERT(out.len - 4 <= wire_type_limit(m->type));
  msgpack_sbuffer sb;
  ref_body(m, &sb);
  ASSERT_UEQ(sb.size, out.len - 5);
  ASSERT_MEM_EQ(sb.data, out.p + 5, sb.size);
  msgpack_sbuffer_destroy(&sb);
  size_t first = out.len;
  ASSERT_OK(wire_encode(&out, m), d);
  ASSERT_UEQ(out.len, 2 * first);
  ASSERT_MEM_EQ(out.p, out.p + first, first);

  wire_reader r;
  wire_reader_init(&r);
  size_t used;
  int type;
  const uint8_t *body;
  size_t blen;
  ASSERT_OK(
      wire_reader_feed(&r, out.p, out.len, &used, &type, &body, &blen, &d), d);
  ASSERT_UEQ(used, first);
  ASSERT_EQ(type, m->type);
  ASSERT_UEQ(blen, first - 5);
  /* A body that came whole is handed out where it lies, uncopied. */
  ASSERT(body == out.p + 5);
  ASSERT_UEQ(r.buf.len, 0);
  wire_msg *back = malloc(sizeof(*back));
  ASSERT(back != NULL);
  ASSERT_OK(wire_decode(type, body, blen, back, &d), d);
  assert_msg_eq(m, back);
  /* The second copy, after the first was handed out. */
  ASSERT_OK(wire_reader_feed(&r, out.p + used, out.len - used, &used, &type,
                             &body, &blen, &d),
            d);
  ASSERT_UEQ(used, first);
  ASSERT_OK(wire_decode(type, body, blen, back, &d), d);
  assert_msg_eq(m, back);
  free(back);
  wire_reader_free(&r);
  dbuf_free(&out);
}

static wire_msg *new_msg(wire_type t) {
  wire_msg *m = calloc(1, sizeof(*m));
  ASSERT(m != NULL);
  m->type = t;
  return m;
}

/* A CHUNK whose head (wire_encode_head) comes in one call and whose bytes
 * come whole in the next, as the simulator's links deliver it: with
 * r.split the bytes are handed out where they lie (r.tail), not copied;
 * without it, or when the head does not end where the bytes begin, they
 * are buffered as before. */
static void test_reader_tail(void) {
  static uint8_t bytes[3000];
  fill(bytes, sizeof(bytes));
  wire_msg *m = new_msg(WIRE_CHUNK), *back = new_msg(WIRE_CHUNK);
  m->version = 7, m->object = 2, m->chunk = 300;
  m->data = bytes, m->data_len = sizeof(bytes);
  dbuf head = {NULL, 0, 0, 1 << 20};
  stitch_diag d = {{0}};
  ASSERT_OK(wire_encode_head(&head, m), d);
  for (int split = 0; split < 2; split++) {
    wire_reader r;
    wire_reader_init(&r);
    r.split = split;
    size_t used;
    int type;
    const uint8_t *body;
    size_t blen;
    ASSERT_OK(wire_reader_feed(&r, head.p, 5, &used, &type, &body, &blen, &d),
              d);
    ASSERT_OK(wire_reader_feed(&r, head.p + 5, head.len - 5, &used, &type,
                               &body, &blen, &d),
              d);
    ASSERT_EQ(type, 0);
    ASSERT_OK(wire_reader_feed(&r, bytes, sizeof(bytes), &used, &type, &body,
                               &blen, &d),
              d);
    ASSERT_UEQ(used, sizeof(bytes));
    ASSERT_EQ(type, WIRE_CHUNK);
    if (split) {
      ASSERT(r.tail == bytes);
      ASSERT_UEQ(r.tail_len, sizeof(bytes));
      ASSERT_UEQ(blen, head.len - 5);
    } else {
      ASSERT(r.tail == NULL);
      ASSERT_UEQ(blen, head.len - 5 + sizeof(bytes));
    }
    ASSERT_OK(wire_decode_tail(type, body, blen, r.tail, r.tail_len, back, &d),
              d);
    assert_msg_eq(m, back);
    ASSERT(back->data == (split ? bytes : body + head.len - 5));
    wire_reader_free(&r);
  }
  /* Bytes apart from a head that does not end at them: refused. */
  ASSERT_ERR(wire_decode_tail(WIRE_CHUNK, head.p + 5, head.len - 5, bytes,
                              sizeof(bytes) - 1, back, &d),
             STITCH_EFORMAT, d, "does not end where its bytes begin");
  ASSERT_ERR(wire_decode_tail(WIRE_CHUNK, head.p + 5, head.len - 6, bytes,
                              sizeof(bytes), back, &d),
             STITCH_EFORMAT, d, "does not end where its bytes begin");
  ASSERT_ERR(wire_decode_tail(WIRE_HAVE, head.p + 5, head.len - 5, bytes,
                              sizeof(bytes), back, &d),
             STITCH_EFORMAT, d, "does not end where its bytes begin");
  /* A head whose bin is shorter than what follows it (a byte after the
   * array) is not split: buffered whole, and refused as before. */
  wire_reader r;
  wire_reader_init(&r);
  r.split = 1;
  uint8_t forged[64];
  ASSERT(head.len <= sizeof(forged));
  memcpy(forged, head.p, head.len);
  uint32_t flen = (uint32_t)(head.len - 4 + sizeof(bytes));
  for (int i = 0; i < 4; i++)
    forged[i] = (uint8_t)(flen >> (8 * i));
  forged[head.len - 1]--; /* the bin's length, low byte: one short */
  size_t used;
  int type;
  const uint8_t *body;
  size_t blen;
  ASSERT_OK(wire_reader_feed(&r, forged, 5, &used, &type, &body, &blen, &d),
            d);
  ASSERT_OK(wire_reader_feed(&r, forged + 5, head.len - 5, &used, &type, &body,
                             &blen, &d),
            d);
  ASSERT_OK(wire_reader_feed(&r, bytes, sizeof(bytes), &used, &type, &body,
                             &blen, &d),
            d);
  ASSERT_EQ(type, WIRE_CHUNK);
  ASSERT(r.tail == NULL);
  ASSERT_ERR(wire_decode_tail(type, body, blen, r.tail, r.tail_len, back, &d),
             STITCH_EFORMAT, d, "bytes after the message's array");
  wire_reader_free(&r);
  dbuf_free(&head);
  free(m);
  free(back);
}

/* ---- round trips -------------------------------------------------------- */

static void test_roundtrip_small(void) {
  wire_msg *m = new_msg(WIRE_HELLO);
  m->proto = WIRE_PROTO;
  fill(m->kx, 32);
  roundtrip(m);
  m->type = WIRE_AUTH;
  fill(m->swarm.b, 32), fill(m->node.b, 32), fill(m->sig, 64);
  roundtrip(m); /* no ticket, empty listen and region */
  uint8_t ticket[STITCH_TICKET_BYTES];
  fill(ticket, sizeof(ticket));
  m->data = ticket, m->data_len = sizeof(ticket);
  roundtrip(m);
  strcpy(m->listen, "10.0.0.7:7070");
  strcpy(m->region, "eu-west");
  roundtrip(m);
  memset(m->listen, 'a', STITCH_SWARM_ADDR_MAX - 1);   /* str8 */
  memset(m->region, 'r', STITCH_SWARM_REGION_MAX - 1); /* fixstr, 31 */
  roundtrip(m);
  m->listen[31] = 0; /* str8 boundary: 31 is fixstr, 32 str8 */
  roundtrip(m);
  m->listen[31] = 'b', m->listen[32] = 0;
  roundtrip(m);

  m->data = NULL, m->data_len = 0;
  m->type = WIRE_PING;
  roundtrip(m);

  /* Each side of every integer form's boundary. */
  uint64_t ints[12] = {0, 1, 127, 128, 255, 256, 65535, 65536};
  ints[8] = UINT32_MAX, ints[9] = (uint64_t)UINT32_MAX + 1;
  ints[10] = UINT64_MAX - 1, ints[11] = UINT64_MAX;
  static const wire_type refs[] = {WIRE_HAVE, WIRE_REQUEST, WIRE_CANCEL,
                                   WIRE_REJECT, WIRE_CROSSING, WIRE_BID};
  fill(m->node.b, 32);
  for (size_t t = 0; t < sizeof(refs) / sizeof(refs[0]); t++)
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
      m->type = refs[t];
      m->version = ints[i];
      m->object = (uint32_t)(i % STITCH_MAX_OBJECTS);
      m->chunk = ints[i] % STITCH_MAX_CHUNKS;
      roundtrip(m);
      m->chunk = STITCH_MAX_CHUNKS - 1;
      m->object = STITCH_MAX_OBJECTS - 1;
      roundtrip(m);
    }

  m->type = WIRE_PEERS;
  m->n_peers = 0;
  roundtrip(m);
  m->n_peers = 1;
  strcpy(m->peer_addr[0], "h:1");
  roundtrip(m); /* empty region */
  m->n_peers = WIRE_MAX_PEERS_MSG;
  for (size_t i = 0; i < WIRE_MAX_PEERS_MSG; i++) {
    memset(m->peer_addr[i], 'a' + (int)(i % 26), STITCH_SWARM_ADDR_MAX - 1);
    m->peer_addr[i][STITCH_SWARM_ADDR_MAX - 1] = 0;
    memset(m->peer_region[i], 'z', STITCH_SWARM_REGION_MAX - 1);
    m->peer_region[i][STITCH_SWARM_REGION_MAX - 1] = 0;
  }
  roundtrip(m); /* the largest PEERS there is */

  m->type = WIRE_REACH;
  m->n_reach = 0;
  roundtrip(m);
  m->n_reach = 1;
  strcpy(m->reach[0], "eu");
  roundtrip(m);
  m->n_reach = WIRE_MAX_REACH;
  for (size_t i = 0; i < WIRE_MAX_REACH; i++) {
    memset(m->reach[i], 'a' + (int)i, STITCH_SWARM_REGION_MAX - 1);
    m->reach[i][STITCH_SWARM_REGION_MAX - 1] = 0;
  }
  roundtrip(m); /* the largest REACH */

  m->type = WIRE_PUNCH;
  for (uint32_t k = 0; k < WIRE_PUNCH_KINDS; k++) {
    m->punch = k;
    m->addr[0] = 0;
    roundtrip(m); /* an ask or an answer to a relay: no address */
    strcpy(m->addr, "198.51.100.7:40123");
    roundtrip(m);
  }
  memset(m->addr, 'a', STITCH_SWARM_ADDR_MAX - 1);
  m->addr[STITCH_SWARM_ADDR_MAX - 1] = 0;
  roundtrip(m); /* the longest address */
  free(m);
}

static void test_roundtrip_data(void) {
  wire_msg *m = new_msg(WIRE_MANIFEST);
  uint8_t *big = malloc(STITCH_MANIFEST_MAX);
  ASSERT(big != NULL);
  fill(big, STITCH_MANIFEST_MAX);
  m->data = big;
  /* Around each bin header size, and the largest allowed. */
  static const size_t lens[] = {1, 255, 256, 65535, 65536, 1000000};
  for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
    m->data_len = lens[i];
    m->type = WIRE_MANIFEST;
    roundtrip(m);
    m->type = WIRE_CHUNK;
    m->version = 1u << 20, m->object = 3, m->chunk = i;
    roundtrip(m);
  }
  m->type = WIRE_CHUNK;
  m->data_len = STITCH_CHUNK_MAX;
  roundtrip(m);
  m->type = WIRE_MANIFEST;
  m->data_len = STITCH_MANIFEST_MAX;
  roundtrip(m);

  /* BITFIELD: spare bits clear, up to the largest object. */
  static const uint64_t nbits[] = {
      1, 7, 8, 9, 13, 2040, 2048, 524289, STITCH_MAX_CHUNKS};
  m->type = WIRE_BITFIELD;
  for (size_t i = 0; i < sizeof(nbits) / sizeof(nbits[0]); i++) {
    m->nbits = nbits[i];
    m->data_len = (size_t)(nbits[i] + 7) / 8;
    fill(big, m->data_len);
    if (nbits[i] % 8)
      big[m->data_len - 1] &= (uint8_t)((1u << (nbits[i] % 8)) - 1);
    m->version = nbits[i] * 977, m->object = (uint32_t)(i % 8);
    roundtrip(m);
  }
  free(big);
  free(m);
}

/* ---- encoder refusals --------------------------------------------------- */

static void enc_fails(const wire_msg *m, int code) {
  dbuf out = {NULL, 0, 0, (size_t)128 * MIB};
  ASSERT_OK(dbuf_put(&out, "xyz", 3), (stitch_diag){{0}});
  ASSERT_EQ(wire_encode(&out, m), code);
  ASSERT_UEQ(out.len, 3); /* nothing appended */
  dbuf_free(&out);
}

static void test_encode_refusals(void) {
  uint8_t bits[4] = {0xff, 0xff, 0x01, 0};
  wire_msg *m = new_msg(WIRE_HELLO);
  enc_fails(m, STITCH_EINVAL); /* proto 0 */
  m->proto = WIRE_PROTO + 1;
  enc_fails(m, STITCH_EINVAL);
  m->proto = WIRE_PROTO;
  m->type = WIRE_AUTH;
  uint8_t ticket[STITCH_TICKET_BYTES] = {0};
  m->data = ticket, m->data_len = sizeof(ticket) - 1; /* 0 or 160 */
  enc_fails(m, STITCH_EINVAL);
  m->data_len = 0;
  memset(m->region, 'r', sizeof(m->region)); /* no NUL */
  enc_fails(m, STITCH_EINVAL);
  m->region[0] = 0;
  memset(m->listen, 'l', sizeof(m->listen));
  enc_fails(m, STITCH_EINVAL);
  m->listen[0] = 0;
  m->type = WIRE_HELLO;
  dbuf small = {NULL, 0, 0, 40}; /* HELLO needs 41 */
  ASSERT_EQ(wire_encode(&small, m), STITCH_ELIMIT);
  ASSERT_UEQ(small.len, 0);
  dbuf_free(&small);
  ASSERT_EQ(wire_encode(NULL, m), STITCH_EINVAL);

  m->type = (wire_type)0;
  enc_fails(m, STITCH_EINVAL);
  m->type = WIRE_TYPE_COUNT_;
  enc_fails(m, STITCH_EINVAL);
  m->type = WIRE_REQUEST;
  m->object = STITCH_MAX_OBJECTS;
  enc_fails(m, STITCH_EINVAL);
  m->object = 0;
  m->chunk = STITCH_MAX_CHUNKS;
  enc_fails(m, STITCH_EINVAL);
  m->chunk = 0;
  m->type = WIRE_CHUNK;
  enc_fails(m, STITCH_EINVAL); /* no bytes */
  m->data = bits, m->data_len = 0;
  enc_fails(m, STITCH_EINVAL);
  m->data_len = (size_t)STITCH_CHUNK_MAX + 1;
  enc_fails(m, STITCH_EINVAL);
  m->type = WIRE_MANIFEST;
  m->data_len = 0;
  enc_fails(m, STITCH_EINVAL);

  m->type = WIRE_BITFIELD;
  m->nbits = 0, m->data_len = 0;
  enc_fails(m, STITCH_EINVAL);
  m->nbits = 17, m->data_len = 3;
  bits[2] = 0x03; /* bit 17 is past nbits */
  enc_fails(m, STITCH_EINVAL);
  bits[2] = 0x01;
  m->data_len = 4;
  enc_fails(m, STITCH_EINVAL);
  m->data_len = 3;
  roundtrip(m);
  m->nbits = (uint64_t)STITCH_MAX_CHUNKS + 1;
  enc_fails(m, STITCH_EINVAL);

  m->type = WIRE_PEERS;
  m->n_peers = WIRE_MAX_PEERS_MSG + 1;
  for (size_t i = 0; i < m->n_peers && i < WIRE_MAX_PEERS_MSG; i++)
    strcpy(m->peer_addr[i], "a:1");
  enc_fails(m, STITCH_EINVAL);
  m->n_peers = 2;
  m->peer_addr[1][0] = 0; /* empty address */
  enc_fails(m, STITCH_EINVAL);

  m->type = WIRE_REACH;
  m->n_reach = WIRE_MAX_REACH + 1;
  for (size_t i = 0; i < WIRE_MAX_REACH; i++)
    strcpy(m->reach[i], "eu");
  enc_fails(m, STITCH_EINVAL);
  m->n_reach = 2;
  m->reach[1][0] = 0; /* empty region */
  enc_fails(m, STITCH_EINVAL);
  memset(m, 0, sizeof(*m));
  m->type = WIRE_PUNCH;
  m->punch = WIRE_PUNCH_KINDS; /* no such kind */
  enc_fails(m, STITCH_EINVAL);
  m->punch = WIRE_PUNCH_ASK;
  memset(m->addr, 'a', sizeof(m->addr)); /* no NUL inside */
  enc_fails(m, STITCH_EINVAL);
  free(m);
}

/* ---- the reader --------------------------------------------------------- */

#define N_STREAM 300

/* A random message of a random type, small, its data in STORE (600). */
static void rand_msg(wire_msg *m, uint8_t *store) {
  memset(m, 0, sizeof(*m));
  m->type = (wire_type)(1 + test_rng_next(&rng) % (WIRE_TYPE_COUNT_ - 1));
  uint64_t big = test_rng_next(&rng) >> (test_rng_next(&rng) % 64);
  m->version = big;
  m->object = (uint32_t)(test_rng_next(&rng) % STITCH_MAX_OBJECTS);
  m->chunk = big % STITCH_MAX_CHUNKS;
  m->proto = WIRE_PROTO;
  fill(m->swarm.b, 32), fill(m->node.b, 32), fill(m->kx, 32);
  fill(m->sig, 64);
  snprintf(m->listen, sizeof(m->listen), "node%llu:%u",
           (unsigned long long)(big % 1000), (unsigned)(big % 65536));
  snprintf(m->region, sizeof(m->region), "r%u", (unsigned)(big % 7));
  m->data = store;
  m->data_len = 1 + test_rng_next(&rng) % 600;
  if (m->type == WIRE_AUTH)
    m->data_len = test_rng_next(&rng) % 2 ? STITCH_TICKET_BYTES : 0;
  fill(store, m->data_len);
  if (m->type == WIRE_BITFIELD) {
    m->nbits = 1 + test_rng_next(&rng) % 4800;
    m->data_len = (size_t)(m->nbits + 7) / 8;
    if (m->nbits % 8)
      store[m->data_len - 1] &= (uint8_t)((1u << (m->nbits % 8)) - 1);
  }
  m->n_peers = test_rng_next(&rng) % 5;
  for (size_t i = 0; i < m->n_peers; i++) {
    snprintf(m->peer_addr[i], STITCH_SWARM_ADDR_MAX, "10.0.%zu.%u:7000", i,
             (unsigned)(big % 256));
    snprintf(m->peer_region[i], STITCH_SWARM_REGION_MAX, "%s",
             i % 2 ? "us" : "");
  }
  m->n_reach = test_rng_next(&rng) % 4;
  for (size_t i = 0; i < m->n_reach; i++)
    snprintf(m->reach[i], STITCH_SWARM_REGION_MAX, "r%zu", i);
  m->punch = (uint32_t)(big % WIRE_PUNCH_KINDS);
  if (big % 2)
    snprintf(m->addr, sizeof(m->addr), "%s", m->listen);
}

/* Feeds STREAM in pieces whose lengths NEXT_LEN picks, decoding every
 * frame and comparing it with MSGS in order. */
static void read_stream(const uint8_t *stream, size_t len, wire_msg *msgs,
                        size_t n, size_t (*next_len)(void)) {
  wire_reader r;
  stitch_diag d = {{0}};
  wire_msg *back = malloc(sizeof(*back));
  ASSERT(back != NULL);
  wire_reader_init(&r);
  size_t pos = 0, got = 0;
  while (pos < len) {
    size_t piece = next_len();
    if (piece > len - pos)
      piece = len - pos;
    size_t off = 0;
    /* A piece may hold several frames, or none: feed until it is used. */
    do {
      size_t used;
      int type;
      const uint8_t *body;
      size_t blen;
      ASSERT_OK(wire_reader_feed(&r, stream + pos + off, piece - off, &used,
                                 &type, &body, &blen, &d),
                d);
      off += used;
      if (type > 0) {
        ASSERT_LT(got, n);
        ASSERT_OK(wire_decode(type, body, blen, back, &d), d);
        assert_msg_eq(&msgs[got], back);
        got++;
      } else {
        ASSERT_UEQ(off, piece); /* no frame: everything was taken */
      }
    } while (off < piece);
    pos += piece;
  }
  ASSERT_UEQ(got, n);
  ASSERT(r.buf.cap <= 4096); /* the frames were small */
  wire_reader_free(&r);
  free(back);
}

static size_t one(void) { return 1; }
static size_t random_len(void) {
  uint64_t k = test_rng_next(&rng);
  switch (k % 4) {
  case 0:
    return 1 + (k >> 8) % 6; /* splits inside headers */
  case 1:
    return 1 + (k >> 8) % 64;
  case 2:
    return 1 + (k >> 8) % 2048;
  default:
    return 1 + (k >> 8) % 100000; /* several frames at once */
  }
}

static void test_reader_splits(void) {
  wire_msg *msgs = calloc(N_STREAM, sizeof(*msgs));
  uint8_t *store = malloc((size_t)N_STREAM * 600);
  ASSERT(msgs != NULL && store != NULL);
  dbuf s = {NULL, 0, 0, 64 * MIB};
  for (size_t i = 0; i < N_STREAM; i++) {
    rand_msg(&msgs[i], store + i * 600);
    ASSERT_EQ(wire_encode(&s, &msgs[i]), 0);
  }
  read_stream(s.p, s.len, msgs, N_STREAM, one);
  for (int round = 0; round < 20; round++)
    read_stream(s.p, s.len, msgs, N_STREAM, random_len);
  dbuf_free(&s);
  free(store);
  free(msgs);
}

/* Feeds a 5-byte header (LEN, TYPE) and BODY bytes after it; the reader
 * must refuse it with CODE having taken no more than the header. */
static void header_fails(uint32_t len, int type, int code, const char *why) {
  uint8_t b[64] = {(uint8_t)len,
                   (uint8_t)(len >> 8),
                   (uint8_t)(len >> 16),
                   (uint8_t)(len >> 24),
                   (uint8_t)type,
                   0x93,
                   1,
                   2,
                   3};
  wire_reader r;
  wire_reader_init(&r);
  stitch_diag d = {{0}};
  size_t used;
  int t;
  const uint8_t *body;
  size_t blen;
  ASSERT_ERR(wire_reader_feed(&r, b, sizeof(b), &used, &t, &body, &blen, &d),
             code, d, why);
  ASSERT_LE(used, 5);
  ASSERT_EQ(t, 0);
  ASSERT_UEQ(r.buf.cap, 0);
  /* And again: a broken stream stays broken. */
  d.msg[0] = 0;
  ASSERT_ERR(wire_reader_feed(&r, b + used, sizeof(b) - used, &used, &t, &body,
                              &blen, &d),
             code, d, why);
  ASSERT_UEQ(used, 0);
  wire_reader_free(&r);
  /* Byte by byte: refused the moment the header is complete. */
  wire_reader_init(&r);
  size_t taken = 0;
  int rc = 0;
  while (rc == 0 && taken < sizeof(b)) {
    rc = wire_reader_feed(&r, b + taken, 1, &used, &t, &body, &blen, &d);
    taken += used;
  }
  ASSERT_EQ(rc, code);
  ASSERT_LE(taken, 5);
  wire_reader_free(&r);
}

static void test_reader_refusals(void) {
  header_fails(10, 0, STITCH_EFORMAT, "unknown type 0");
  header_fails(10, WIRE_TYPE_COUNT_, STITCH_EFORMAT, "unknown type 17");
  header_fails(10, 255, STITCH_EFORMAT, "unknown type 255");
  header_fails(0, WIRE_PING, STITCH_EFORMAT, "length 0");
  header_fails(0xffffffffu, WIRE_CHUNK, STITCH_ELIMIT, "CHUNK frame of");
  for (int t = 1; t < WIRE_TYPE_COUNT_; t++) {
    size_t lim = wire_type_limit(t);
    header_fails((uint32_t)lim + 1, t, STITCH_ELIMIT, "at most");
  }
  ASSERT_UEQ(wire_type_limit(0), 0);
  ASSERT_UEQ(wire_type_limit(WIRE_TYPE_COUNT_), 0);
  ASSERT_UEQ(wire_type_limit(-1), 0);
  ASSERT_UEQ(wire_type_limit(WIRE_CHUNK), (size_t)STITCH_CHUNK_MAX + 64);
  ASSERT_UEQ(wire_type_limit(WIRE_MANIFEST), (size_t)STITCH_MANIFEST_MAX + 64);
  ASSERT_UEQ(wire_type_limit(WIRE_BITFIELD), STITCH_MAX_CHUNKS / 8 + 64);
  ASSERT_UEQ(wire_type_limit(WIRE_PEERS), 64 * (128 + 32 + 8) + 64);
  ASSERT_UEQ(wire_type_limit(WIRE_HAVE), WIRE_SMALL_MAX);

  /* A header claiming a 30 MiB CHUNK, then 100 bytes: the buffer holds
   * what came, not what was claimed. Then the rest arrives. */
  wire_msg *m = new_msg(WIRE_CHUNK);
  size_t n = 30 * MIB;
  uint8_t *data = malloc(n);
  ASSERT(data != NULL);
  fill(data, n);
  m->data = data, m->data_len = n, m->version = 9, m->chunk = 4;
  dbuf f = {NULL, 0, 0, 64 * MIB};
  ASSERT_EQ(wire_encode(&f, m), 0);
  wire_reader r;
  wire_reader_init(&r);
  stitch_diag d = {{0}};
  size_t used;
  int t;
  const uint8_t *body;
  size_t blen;
  ASSERT_OK(wire_reader_feed(&r, f.p, 105, &used, &t, &body, &blen, &d), d);
  ASSERT_UEQ(used, 105);
  ASSERT_EQ(t, 0);
  ASSERT_LT(r.buf.cap, 64 << 10);
  ASSERT_UEQ(r.buf.max, wire_type_limit(WIRE_CHUNK));
  size_t pos = 105;
  while (pos < f.len) {
    size_t piece = f.len - pos < MIB ? f.len - pos : MIB;
    ASSERT_OK(
        wire_reader_feed(&r, f.p + pos, piece, &used, &t, &body, &blen, &d), d);
    ASSERT_UEQ(used, piece);
    ASSERT(r.buf.cap <= r.buf.max);
    pos += piece;
  }
  ASSERT_EQ(t, WIRE_CHUNK);
  wire_msg *back = malloc(sizeof(*back));
  ASSERT(back != NULL);
  ASSERT_OK(wire_decode(t, body, blen, back, &d), d);
  assert_msg_eq(m, back);
  /* The next frame starts afresh and lets the big buffer go. */
  m->type = WIRE_PING;
  f.len = 0;
  ASSERT_EQ(wire_encode(&f, m), 0);
  ASSERT_OK(wire_reader_feed(&r, f.p, f.len, &used, &t, &body, &blen, &d), d);
  ASSERT_EQ(t, WIRE_PING);
  ASSERT_LE(r.buf.cap, MIB);
  ASSERT_OK(wire_decode(t, body, blen, back, &d), d);
  /* A frame whose body is empty is handed out; decoding refuses it. */
  static const uint8_t empty[5] = {1, 0, 0, 0, WIRE_PING};
  ASSERT_OK(wire_reader_feed(&r, empty, 5, &used, &t, &body, &blen, &d), d);
  ASSERT_EQ(t, WIRE_PING);
  ASSERT_UEQ(blen, 0);
  ASSERT_ERR(wire_decode(t, body, blen, back, &d), STITCH_ETRUNCATED, d,
             "wire: PING: msgpack");
  ASSERT_EQ(wire_reader_feed(NULL, empty, 5, &used, &t, &body, &blen, &d),
            STITCH_EINVAL);
  wire_reader_free(&r);
  wire_reader_free(NULL);
  dbuf_free(&f);
  free(back);
  free(data);
  free(m);
}

/* ---- decoder refusals --------------------------------------------------- */

typedef struct body {
  msgpack_sbuffer sb;
  msgpack_packer pk;
} body;

static msgpack_packer *start(body *b) {
  msgpack_sbuffer_init(&b->sb);
  msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
  return &b->pk;
}

/* Decoding B's bytes as TYPE fails with CODE and a message holding WHY;
 * frees B. */
static void dec_fails(body *b, int type, int code, const char *why) {
  stitch_diag d = {{0}};
  wire_msg *m = malloc(sizeof(*m));
  ASSERT(m != NULL);
  ASSERT_ERR(wire_decode(type, (const uint8_t *)b->sb.data, b->sb.size, m, &d),
             code, d, why);
  ASSERT(strchr(d.msg, '\n') == NULL);
  free(m);
  msgpack_sbuffer_destroy(&b->sb);
}

static void dec_ok(body *b, int type, wire_msg *m) {
  stitch_diag d = {{0}};
  ASSERT_OK(wire_decode(type, (const uint8_t *)b->sb.data, b->sb.size, m, &d),
            d);
  msgpack_sbuffer_destroy(&b->sb);
}

static void raw_fails(int type, const uint8_t *p, size_t n, int code,
                      const char *why) {
  body b;
  start(&b);
  msgpack_sbuffer_write(&b.sb, (const char *)p, n);
  dec_fails(&b, type, code, why);
}

/* An array of N uints (A, B, C, then 0) decoded as TYPE fails with WHY. */
static void uints_fail(int type, size_t n, uint64_t a, uint64_t b, uint64_t c,
                       const char *why) {
  body bd;
  msgpack_packer *pk = start(&bd);
  const uint64_t v[4] = {a, b, c, 0};
  msgpack_pack_array(pk, n);
  for (size_t i = 0; i < n; i++)
    msgpack_pack_uint64(pk, v[i]);
  dec_fails(&bd, type, STITCH_EFORMAT, why);
}

static const uint8_t key[64];

/* AUTH with one field spoilt: the field's index, or -1 for none. */
enum { H_OK = -1 };
static msgpack_packer *auth(body *b, int bad, const char *listen,
                            size_t listen_len) {
  msgpack_packer *pk = start(b);
  msgpack_pack_array(pk, 6);
  msgpack_pack_bin_with_body(pk, key, bad == 0 ? 31 : 32);
  if (bad == 1)
    msgpack_pack_str_with_body(pk, key, 32);
  else
    msgpack_pack_bin_with_body(pk, key, 32);
  msgpack_pack_bin_with_body(pk, key, bad == 2 ? 63 : 64);
  msgpack_pack_bin_with_body(pk, key, bad == 3 ? 32 : 0);
  msgpack_pack_str_with_body(pk, listen, listen_len);
  if (bad == 5)
    msgpack_pack_nil(pk);
  else
    msgpack_pack_str_with_body(pk, "eu", 2);
  return pk;
}

static void test_decode_refusals(void) {
  body b;
  msgpack_packer *pk;
  wire_msg *m = malloc(sizeof(*m));
  ASSERT(m != NULL);
  char s[200];
  memset(s, 'x', sizeof(s));

  auth(&b, H_OK, "h:1", 3);
  dec_ok(&b, WIRE_AUTH, m);
  ASSERT_STR_EQ(m->listen, "h:1");
  ASSERT_UEQ(m->data_len, 0);
  auth(&b, H_OK, s, 127);
  dec_ok(&b, WIRE_AUTH, m);
  auth(&b, 0, "", 0);
  dec_fails(&b, WIRE_AUTH, STITCH_EFORMAT,
            "wire: AUTH: field 0 (swarm) is a bin of 31 bytes, not 32");
  auth(&b, 1, "", 0);
  dec_fails(&b, WIRE_AUTH, STITCH_EFORMAT, "field 1 (node) is not a bin");
  auth(&b, 2, "", 0);
  dec_fails(&b, WIRE_AUTH, STITCH_EFORMAT, "field 2 (sig) is a bin of 63");
  auth(&b, 3, "", 0);
  dec_fails(&b, WIRE_AUTH, STITCH_EFORMAT,
            "field 3 (ticket) is a bin of 32 bytes, not 0 or 160");
  auth(&b, 5, "", 0);
  dec_fails(&b, WIRE_AUTH, STITCH_EFORMAT, "field 5 (region) is not a str");
  auth(&b, H_OK, s, 128);
  dec_fails(&b, WIRE_AUTH, STITCH_EFORMAT,
            "field 4 (listen) is a str of 128 bytes, not 0..127");
  auth(&b, H_OK, "h\0:1", 4);
  dec_fails(&b, WIRE_AUTH, STITCH_EFORMAT,
            "field 4 (listen) holds the control byte 0x00");
  /* A newline would let a peer forge a line of every log that names it. */
  auth(&b, H_OK, "h:1\nstitchd[node]: ready", 24);
  dec_fails(&b, WIRE_AUTH, STITCH_EFORMAT,
            "field 4 (listen) holds the control byte 0x0a");
  auth(&b, H_OK, "h:1\x7f", 4);
  dec_fails(&b, WIRE_AUTH, STITCH_EFORMAT, "holds the control byte 0x7f");
  auth(&b, H_OK, "h\xc3\xa9:1", 5); /* UTF-8 passes */
  dec_ok(&b, WIRE_AUTH, m);
  auth(&b, H_OK, "", 0);
  msgpack_pack_nil(&b.pk); /* after the array */
  dec_fails(&b, WIRE_AUTH, STITCH_EFORMAT, "1 bytes after");

  /* HELLO */
  pk = start(&b);
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint8(pk, WIRE_PROTO);
  msgpack_pack_bin_with_body(pk, key, 31);
  dec_fails(&b, WIRE_HELLO, STITCH_EFORMAT, "field 1 (kx) is a bin of 31");
  /* The protocol before this one (a node not yet upgraded). */
  const uint8_t proto_old[] = {0x92, WIRE_PROTO - 1, 0xc0};
  char old_msg[64];
  snprintf(old_msg, sizeof(old_msg), "protocol %d; this build speaks %d",
           WIRE_PROTO - 1, WIRE_PROTO);
  raw_fails(WIRE_HELLO, proto_old, sizeof(proto_old), STITCH_EVERSION,
            old_msg);
  /* A later protocol may have more fields: still "upgrade". */
  static const uint8_t proto_big[] = {
      0x97, 0xcf, 0, 0, 1, 0, 0, 0, 0, 0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0};
  raw_fails(WIRE_HELLO, proto_big, sizeof(proto_big), STITCH_EVERSION,
            "protocol 1099511627776");
  static const uint8_t proto_str[] = {0x91, 0xa1, '1'};
  raw_fails(WIRE_HELLO, proto_str, sizeof(proto_str), STITCH_EFORMAT,
            "field 0 (proto) is not an unsigned integer");
  static const uint8_t hello3[] = {0x93, WIRE_PROTO, 0xc0, 0xc0};
  raw_fails(WIRE_HELLO, hello3, sizeof(hello3), STITCH_EFORMAT,
            "an array of 3 fields, expected 2");

  /* Every prefix of an AUTH body is refused (truncated), never read past. */
  auth(&b, H_OK, "host.example:7070", 17);
  for (size_t n = 0; n < b.sb.size; n++) {
    uint8_t *cut = malloc(n ? n : 1); /* exact size: ASan sees overreads */
    ASSERT(cut != NULL);
    memcpy(cut, b.sb.data, n);
    stitch_diag d = {{0}};
    int rc = wire_decode(WIRE_AUTH, cut, n, m, &d);
    ASSERT(rc < 0 && d.msg[0] != 0);
    free(cut);
  }
  msgpack_sbuffer_destroy(&b.sb);

  /* REQUEST and friends */
  static const uint8_t str_chunk[] = {0x93, 1, 0, 0xa1, '7'};
  raw_fails(WIRE_REQUEST, str_chunk, sizeof(str_chunk), STITCH_EFORMAT,
            "wire: REQUEST: field 2 (chunk) is not an unsigned integer");
  static const uint8_t neg_version[] = {0x93, 0xff, 0, 0}; /* -1 */
  raw_fails(WIRE_HAVE, neg_version, sizeof(neg_version), STITCH_EFORMAT,
            "wire: HAVE: field 0 (version) is not an unsigned integer");
  uints_fail(WIRE_CANCEL, 3, 0, STITCH_MAX_OBJECTS, 0,
             "field 1 (object) is 8, at most 7");
  uints_fail(WIRE_CANCEL, 3, 0, 1ull << 32, 0, /* past uint32_t too */
             "field 1 (object) is 4294967296");
  uints_fail(WIRE_REJECT, 3, 0, 0, STITCH_MAX_CHUNKS,
             "field 2 (chunk) is 16777216, at most 16777215");
  uints_fail(WIRE_REQUEST, 2, 0, 0, 0, "an array of 2 fields, expected 3");
  uints_fail(WIRE_REQUEST, 4, 0, 0, 0, "an array of 4 fields, expected 3");
  static const uint8_t map[] = {0x80};
  raw_fails(WIRE_REQUEST, map, 1, STITCH_EFORMAT,
            "the body is a map, not an array");
  /* Non-shortest forms are read (a writer uses the shortest): a uint64
   * holding 5, an int8 holding 3, a uint16 holding 0. */
  static const uint8_t loose[] = {0x93, 0xcf, 0,    0, 0,    0, 0, 0,
                                  0,    5,    0xd0, 3, 0xcd, 0, 0};
  stitch_diag ld = {{0}};
  ASSERT_OK(wire_decode(WIRE_REQUEST, loose, sizeof(loose), m, &ld), ld);
  ASSERT_UEQ(m->version, 5);
  ASSERT_UEQ(m->object, 3);
  ASSERT_UEQ(m->chunk, 0);

  /* MANIFEST, CHUNK: no empty payloads */
  static const uint8_t bin0[] = {0x91, 0xc4, 0};
  raw_fails(WIRE_MANIFEST, bin0, sizeof(bin0), STITCH_EFORMAT,
            "field 0 (manifest) is a bin of 0 bytes, not 1..");
  static const uint8_t str_bytes[] = {0x94, 0, 0, 0, 0xa3, 'a', 'b', 'c'};
  raw_fails(WIRE_CHUNK, str_bytes, sizeof(str_bytes), STITCH_EFORMAT,
            "field 3 (bytes) is not a bin");

  /* BITFIELD */
  static const uint8_t bits[3] = {0xff, 0xff, 0x03};
  struct {
    uint64_t nbits;
    size_t len;
    int code;
    const char *why;
  } bf[] = {
      {18, 3, 0, NULL},
      {17, 3, STITCH_EFORMAT, "sets bits past nbits (17)"},
      {18, 2, STITCH_EFORMAT, "field 3 (bits) is a bin of 2 bytes, not 3"},
      {16, 3, STITCH_EFORMAT, "is a bin of 3 bytes, not 2"},
      {0, 0, STITCH_EFORMAT, "field 2 (nbits) is 0"},
      {(uint64_t)STITCH_MAX_CHUNKS + 1, 3, STITCH_EFORMAT,
       "field 2 (nbits) is 16777217, at most 16777216"}};
  for (size_t i = 0; i < sizeof(bf) / sizeof(bf[0]); i++) {
    pk = start(&b);
    msgpack_pack_array(pk, 4);
    msgpack_pack_uint8(pk, 1);
    msgpack_pack_uint8(pk, 2);
    msgpack_pack_uint64(pk, bf[i].nbits);
    msgpack_pack_bin_with_body(pk, bits, bf[i].len);
    if (bf[i].code == 0) {
      dec_ok(&b, WIRE_BITFIELD, m);
      ASSERT_UEQ(m->nbits, 18);
      ASSERT_UEQ(m->data_len, 3);
    } else {
      dec_fails(&b, WIRE_BITFIELD, bf[i].code, bf[i].why);
    }
  }

  /* PEERS */
  for (size_t n = 64; n <= 65; n++) {
    pk = start(&b);
    msgpack_pack_array(pk, 1);
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++) {
      msgpack_pack_array(pk, 2);
      msgpack_pack_str_with_body(pk, "a:1", 3);
      msgpack_pack_str_with_body(pk, "", 0);
    }
    if (n == 64) {
      dec_ok(&b, WIRE_PEERS, m);
      ASSERT_UEQ(m->n_peers, 64);
      ASSERT_STR_EQ(m->peer_addr[63], "a:1");
    } else {
      dec_fails(&b, WIRE_PEERS, STITCH_ELIMIT,
                "field 0 (peers) has 65 entries, at most 64");
    }
  }
  struct {
    const char *addr;
    size_t alen;
    const char *region;
    size_t rlen;
    const char *why;
  } pe[] = {{"", 0, "", 0, "peer 1 addr is a str of 0 bytes, not 1..127"},
            {s, 128, "", 0, "peer 1 addr is a str of 128 bytes"},
            {"a:1", 3, s, 32, "peer 1 region is a str of 32 bytes, not 0..31"},
            {"a:1", 3, "e\0u", 3, "peer 1 region holds the control byte 0x00"},
            {"a\r:1", 4, "", 0, "peer 1 addr holds the control byte 0x0d"}};
  for (size_t i = 0; i < sizeof(pe) / sizeof(pe[0]); i++) {
    pk = start(&b);
    msgpack_pack_array(pk, 1);
    msgpack_pack_array(pk, 2);
    msgpack_pack_array(pk, 2);
    msgpack_pack_str_with_body(pk, "ok:1", 4);
    msgpack_pack_str_with_body(pk, "", 0);
    msgpack_pack_array(pk, 2);
    msgpack_pack_str_with_body(pk, pe[i].addr, pe[i].alen);
    msgpack_pack_str_with_body(pk, pe[i].region, pe[i].rlen);
    dec_fails(&b, WIRE_PEERS, STITCH_EFORMAT, pe[i].why);
  }
  static const uint8_t three[] = {0x91, 0x91, 0x93, 0xa1, 'a', 0xa0, 0xc0};
  raw_fails(WIRE_PEERS, three, sizeof(three), STITCH_EFORMAT,
            "peer 0 is an array of 3, not 2 (addr, region)");
  static const uint8_t deep[] = {0x91, 0x91, 0x92, 0x90, 0xa0}; /* 4 levels */
  raw_fails(WIRE_PEERS, deep, sizeof(deep), STITCH_ELIMIT,
            "nested deeper than 3");

  /* REACH */
  for (size_t n = 16; n <= 17; n++) {
    pk = start(&b);
    msgpack_pack_array(pk, 1);
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
      msgpack_pack_str_with_body(pk, "eu", 2);
    if (n == 16) {
      dec_ok(&b, WIRE_REACH, m);
      ASSERT_UEQ(m->n_reach, 16);
      ASSERT_STR_EQ(m->reach[15], "eu");
    } else {
      dec_fails(&b, WIRE_REACH, STITCH_ELIMIT,
                "field 0 (regions) has 17 entries, at most 16");
    }
  }
  struct {
    const char *region;
    size_t len;
    const char *why;
  } re[] = {{"", 0, "region 1 is a str of 0 bytes, not 1..31"},
            {s, 32, "region 1 is a str of 32 bytes, not 1..31"},
            {"e\0u", 3, "region 1 holds the control byte 0x00"},
            {"e\tu", 3, "region 1 holds the control byte 0x09"}};
  for (size_t i = 0; i < sizeof(re) / sizeof(re[0]); i++) {
    pk = start(&b);
    msgpack_pack_array(pk, 1);
    msgpack_pack_array(pk, 2);
    msgpack_pack_str_with_body(pk, "us", 2);
    msgpack_pack_str_with_body(pk, re[i].region, re[i].len);
    dec_fails(&b, WIRE_REACH, STITCH_EFORMAT, re[i].why);
  }
  static const uint8_t nil_list[] = {0x91, 0xc0};
  raw_fails(WIRE_REACH, nil_list, sizeof(nil_list), STITCH_EFORMAT,
            "field 0 (regions)");

  /* PUNCH */
  static const uint8_t punch_kind3[] = {0x93, 0x06, 0xc4, 0x20};
  uint8_t pb[4 + 32 + 1];
  memcpy(pb, punch_kind3, 4);
  memset(pb + 4, 7, 32);
  pb[36] = 0xa0; /* "" */
  raw_fails(WIRE_PUNCH, pb, sizeof(pb), STITCH_EFORMAT,
            "field 0 (kind) is 6, at most 5");
  pb[1] = 0x01;
  start(&b);
  msgpack_sbuffer_write(&b.sb, (const char *)pb, sizeof(pb));
  dec_ok(&b, WIRE_PUNCH, m);
  ASSERT_UEQ(m->punch, WIRE_PUNCH_ACCEPT);
  ASSERT_STR_EQ(m->addr, "");
  pb[3] = 0x1f; /* a key of 31 bytes */
  raw_fails(WIRE_PUNCH, pb, sizeof(pb) - 1, STITCH_EFORMAT,
            "field 1 (node) is a bin of 31 bytes, not 32");
  pk = start(&b);
  msgpack_pack_array(pk, 3);
  msgpack_pack_uint32(pk, 0);
  msgpack_pack_bin_with_body(pk, s, 32);
  msgpack_pack_str_with_body(pk, s, 128); /* one byte too long */
  dec_fails(&b, WIRE_PUNCH, STITCH_EFORMAT,
            "field 2 (addr) is a str of 128 bytes, not 0..127");
  pk = start(&b);
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint32(pk, 0);
  msgpack_pack_bin_with_body(pk, s, 32);
  dec_fails(&b, WIRE_PUNCH, STITCH_EFORMAT, "an array of 2 fields, expected 3");

  /* PING takes nothing */
  static const uint8_t ping1[] = {0x91, 0xc0};
  raw_fails(WIRE_PING, ping1, 2, STITCH_EFORMAT,
            "an array of 1 fields, expected 0");

  /* Claims the bytes cannot hold: 2^32 - 1 elements in a 10-byte body. */
  static const uint8_t huge[10] = {0xdd, 0xff, 0xff, 0xff, 0xff};
  stitch_diag d = {{0}};
  ASSERT_ERR(wire_decode(WIRE_PEERS, huge, sizeof(huge), m, &d),
             STITCH_ETRUNCATED, d, "wire: PEERS: msgpack: offset 0: array of");
  static const uint8_t huge_bin[10] = {0x91, 0xc6, 0xff, 0xff, 0xff, 0xff};
  ASSERT_ERR(wire_decode(WIRE_MANIFEST, huge_bin, sizeof(huge_bin), m, &d),
             STITCH_ETRUNCATED, d, "bin of 4294967295 bytes");
  ASSERT_ERR(wire_decode(0, huge, sizeof(huge), m, &d), STITCH_EFORMAT, d,
             "unknown message type 0");
  ASSERT_ERR(wire_decode(WIRE_TYPE_COUNT_, huge, sizeof(huge), m, &d),
             STITCH_EFORMAT, d, "unknown message type 17");
  ASSERT_ERR(wire_decode(WIRE_PING, NULL, 0, m, &d), STITCH_ETRUNCATED, d,
             "PING");
  ASSERT_ERR(wire_decode(WIRE_PING, huge, WIRE_SMALL_MAX, m, &d), STITCH_ELIMIT,
             d, "wire: PING: body of 65536 bytes, at most 65535");
  static const uint8_t c1[2] = {0x91, 0xc1};
  ASSERT_ERR(wire_decode(WIRE_HELLO, c1, 2, m, &d), STITCH_EFORMAT, d,
             "reserved byte 0xc1");
  free(m);
}

/* Random damage to valid frames: every outcome is a clean refusal or a
 * message that encodes back to a frame that decodes to itself. */
static void test_damage(void) {
  wire_msg *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
  uint8_t *store = malloc(600);
  ASSERT(a != NULL && b != NULL && store != NULL);
  dbuf f = {NULL, 0, 0, MIB}, g = {NULL, 0, 0, MIB};
  long ok = 0, refused = 0;
  for (int it = 0; it < 20000; it++) {
    rand_msg(a, store);
    f.len = 0;
    ASSERT_EQ(wire_encode(&f, a), 0);
    size_t flips = 1 + test_rng_next(&rng) % 3;
    for (size_t k = 0; k < flips; k++)
      f.p[5 + test_rng_next(&rng) % (f.len - 5)] ^=
          (uint8_t)(1u << (test_rng_next(&rng) % 8));
    size_t cut = test_rng_next(&rng) % 4 == 0
                     ? 5 + test_rng_next(&rng) % (f.len - 5)
                     : f.len;
    stitch_diag d = {{0}};
    int rc = wire_decode(a->type, f.p + 5, cut - 5, b, &d);
    if (rc != 0) {
      ASSERT(rc < 0 && d.msg[0] != 0);
      ASSERT(strcmp(stitch_errname(rc), "EUNKNOWN") != 0);
      refused++;
      continue;
    }
    ok++;
    g.len = 0;
    ASSERT_EQ(wire_encode(&g, b), 0);
    ASSERT_OK(wire_decode(g.p[4], g.p + 5, g.len - 5, a, &d), d);
    assert_msg_eq(b, a);
  }
  ASSERT_GT(ok, 0);
  ASSERT_GT(refused, 0);
  dbuf_free(&f);
  dbuf_free(&g);
  free(store);
  free(a);
  free(b);
}

/* The examples of proto/wire.md, byte for byte. */
static void test_vectors(void) {
  static const uint8_t request[] = {7, 0, 0, 0, 6, 0x93, 0xcd, 1, 0x2c, 1, 2};
  static const uint8_t ping[] = {2, 0, 0, 0, 11, 0x90};
  static const uint8_t bitfield[] = {9, 0,    0,    0, 4,    0x94, 7,
                                     0, 0x0a, 0xc4, 2, 0x09, 0x02};
  static const uint8_t bits[2] = {0x09, 0x02}; /* chunks 0, 3 and 9 */
  wire_msg *m = new_msg(WIRE_REQUEST);
  dbuf out = {NULL, 0, 0, 4096};
  m->version = 300, m->object = 1, m->chunk = 2;
  ASSERT_EQ(wire_encode(&out, m), 0);
  ASSERT_UEQ(out.len, sizeof(request));
  ASSERT_MEM_EQ(out.p, request, sizeof(request));
  out.len = 0;
  m->type = WIRE_PING;
  ASSERT_EQ(wire_encode(&out, m), 0);
  ASSERT_UEQ(out.len, sizeof(ping));
  ASSERT_MEM_EQ(out.p, ping, sizeof(ping));
  out.len = 0;
  m->type = WIRE_BITFIELD;
  m->version = 7, m->object = 0, m->nbits = 10, m->data = bits;
  m->data_len = 2;
  ASSERT_EQ(wire_encode(&out, m), 0);
  ASSERT_UEQ(out.len, sizeof(bitfield));
  ASSERT_MEM_EQ(out.p, bitfield, sizeof(bitfield));
  dbuf_free(&out);
  free(m);
}

static void test_auth_input(void) {
  uint8_t dk[WIRE_KX_BYTES], ak[WIRE_KX_BYTES], both[64], h[32];
  uint8_t out[WIRE_AUTH_INPUT], other[WIRE_AUTH_INPUT];
  fill(dk, sizeof(dk));
  fill(ak, sizeof(ak));
  wire_auth_input(0, dk, ak, out);
  ASSERT_MEM_EQ(out, "stitch-auth-v2\0\0", 16);
  ASSERT_EQ(out[16], 0);
  memcpy(both, dk, 32);
  memcpy(both + 32, ak, 32);
  crypto_generichash(h, 32, both, 64, NULL, 0);
  ASSERT_MEM_EQ(out + 17, h, 32);
  /* The acceptor's input differs in its side byte alone. */
  wire_auth_input(1, dk, ak, other);
  ASSERT_EQ(other[16], 1);
  ASSERT_MEM_EQ(other + 17, h, 32);
}

static void from_hex(const char *h, uint8_t *out, size_t n) {
  size_t got = 0;
  ASSERT_EQ(sodium_hex2bin(out, n, h, strlen(h), NULL, &got, NULL), 0);
  ASSERT_UEQ(got, n);
}

/* The record layer's example of proto/wire.md ("Encrypted records"),
 * byte for byte: ephemeral keys from seeds 00..1f and 80..9f, kx, two
 * records of a PING frame from the dialer, each opened by the acceptor;
 * the second fails under the first's number (a replay). */
static void test_record_vector(void) {
  chan a, b;
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  uint8_t sa[32], sb[32], want[48], k32[32];
  for (int i = 0; i < 32; i++)
    sa[i] = (uint8_t)i, sb[i] = (uint8_t)(0x80 + i);
  chan_keypair(&a, sa);
  chan_keypair(&b, sb);
  from_hex("0e0216223f147143d32615a91189c288c1728cba3cc5f9f621b1026e03d83129",
           k32, 32);
  ASSERT_MEM_EQ(a.pk, k32, 32);
  from_hex("7dde4ebc7e6bb3293a4643423b22ca4df3542b90c1779230bd777a9ee6d3d92f",
           k32, 32);
  ASSERT_MEM_EQ(b.pk, k32, 32);
  uint8_t apk[32], bpk[32];
  memcpy(apk, a.pk, 32);
  memcpy(bpk, b.pk, 32);
  stitch_diag d = {{0}};
  ASSERT_OK(chan_start(&a, 1, bpk, &d), d);
  ASSERT_OK(chan_start(&b, 0, apk, &d), d);
  from_hex("f0fe8c592392aa7a68cadc6cdb14e5fe50a970fc2f564e23c3d023441c688768",
           k32, 32);
  ASSERT_MEM_EQ(a.tx, k32, 32);
  ASSERT_MEM_EQ(b.rx, k32, 32);
  uint8_t in[WIRE_AUTH_INPUT], want_in[WIRE_AUTH_INPUT];
  wire_auth_input(0, apk, bpk, in);
  from_hex("7374697463682d617574682d7632000000b31933d32c79e63a26fa0387e310c4"
           "8ba4857fd460816a61e7e757e1c6b61832",
           want_in, sizeof(want_in));
  ASSERT_MEM_EQ(in, want_in, sizeof(in));
  static const uint8_t ping[] = {2, 0, 0, 0, 11, 0x90};
  dbuf out = {NULL, 0, 0, 4096};
  ASSERT_EQ(chan_seal(&a, ping, sizeof(ping), &out), 0);
  ASSERT_EQ(chan_seal(&a, ping, sizeof(ping), &out), 0);
  from_hex("16004466688786fa751e60c8521026a042267ffb62de19ef1600633a5480c2ef"
           "c862b8a09772c6e9475d67b578367af8",
           want, sizeof(want));
  ASSERT_UEQ(out.len, sizeof(want));
  ASSERT_MEM_EQ(out.p, want, sizeof(want));
  /* Opened in one piece and in single bytes. */
  size_t used;
  const uint8_t *pl;
  size_t pn;
  ASSERT_OK(chan_open(&b, out.p, 24, &used, &pl, &pn, &d), d);
  ASSERT_UEQ(used, 24);
  ASSERT_UEQ(pn, sizeof(ping));
  ASSERT_MEM_EQ(pl, ping, sizeof(ping));
  for (size_t i = 24; i < 48; i++) {
    ASSERT_OK(chan_open(&b, out.p + i, 1, &used, &pl, &pn, &d), d);
    ASSERT_UEQ(pn, i == 47 ? sizeof(ping) : 0);
  }
  /* The first record again (a replay), a flipped byte, a bad length. */
  ASSERT_ERR(chan_open(&b, out.p, 24, &used, &pl, &pn, &d), STITCH_ECHECKSUM,
             d, "does not open");
  chan c = b;
  c.rec = NULL; /* b's buffer stays b's */
  c.rx_n = 2;
  ASSERT_EQ(chan_seal(&a, ping, sizeof(ping), &out), 0);
  out.p[48 + 5] ^= 1;
  ASSERT_ERR(chan_open(&c, out.p + 48, 24, &used, &pl, &pn, &d),
             STITCH_ECHECKSUM, d, "record 2 does not open");
  chan_free(&c);
  static const uint8_t tiny[2] = {16, 0}; /* a tag and no byte */
  chan e = b;
  e.rec = NULL;
  ASSERT_ERR(chan_open(&e, tiny, 2, &used, &pl, &pn, &d), STITCH_EFORMAT, d,
             "record of 16 bytes");
  chan_free(&e);
  chan_free(&a);
  chan_free(&b);
  dbuf_free(&out);
}

int main(void) {
  rng = test_rng_seeded("test_wire", 20260301);
  test_roundtrip_small();
  test_roundtrip_data();
  test_encode_refusals();
  test_reader_splits();
  test_reader_tail();
  test_reader_refusals();
  test_decode_refusals();
  test_damage();
  test_vectors();
  test_auth_input();
  test_record_vector();
  puts("test_wire: ok");
  return 0;
}
