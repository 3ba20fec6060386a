/* fuzz_wire.c: the swarm's frame reader and message codec on arbitrary
 * bytes (src/swarm/wire.c, proto/wire.md).
 *
 * Input: byte 0's low 4 bits give K, the number of split bytes that
 * follow; the rest is a byte stream as a peer would send it. The stream is
 * fed to one wire_reader in pieces of split[i % K] + 1 bytes (all at once
 * when K is 0), so mutations move the piece boundaries through headers
 * and bodies as well as the bytes themselves. Bit 4 sets the reader's
 * split (a CHUNK's bytes handed out apart from its head).
 *
 * Checks (any violation abort()s):
 *  - the reader takes every byte it is given, one frame at a time, and
 *    hands out only bodies within the type's limit; after a refusal
 *    (a known code with a message) it has taken no body byte of that
 *    frame, and it refuses again when fed more;
 *  - its buffer never grows past what was received (256 bytes, or twice
 *    the bytes fed): a claimed length allocates nothing;
 *  - every frame decodes or is refused with a known code and a message;
 *    a decoded message's data points inside the body; it encodes (the
 *    encoder accepts whatever the decoder does) to a frame no longer than
 *    the one read (every header in its shortest form), which decodes
 *    field for field to the same message and encodes again to the same
 *    bytes. (Same length does not mean same bytes: an int16 and a uint16
 *    holding the same value are both 3 bytes; see min-int16-as-uint.)
 *  - a CHUNK handed out apart decodes (wire_decode_tail) to what its
 *    head and bytes decode to together, or is refused alike. */
#include "stitch.h"

#include "swarm/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "fuzz_wire: check failed: %s (line %d)\n", #c,           \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static void check_err(int rc, const stitch_diag *d) {
  CHECK(rc < 0 && strcmp(stitch_errname(rc), "EUNKNOWN") != 0);
  CHECK(memchr(d->msg, 0, sizeof(d->msg)) != NULL && d->msg[0] != 0);
  CHECK(strchr(d->msg, '\n') == NULL);
}

static int has_data(wire_type t) {
  return t == WIRE_MANIFEST || t == WIRE_BITFIELD || t == WIRE_CHUNK ||
         t == WIRE_POLICY || t == WIRE_AUTH;
}

/* Field for field, as wire.h lays out each type. */
static int msg_eq(const wire_msg *a, const wire_msg *b) {
  if (a->type != b->type)
    return 0;
  switch (a->type) {
  case WIRE_HELLO:
    return a->proto == b->proto && memcmp(a->kx, b->kx, sizeof(a->kx)) == 0;
  case WIRE_AUTH:
    if (memcmp(a->swarm.b, b->swarm.b, sizeof(a->swarm.b)) != 0 ||
        memcmp(a->node.b, b->node.b, sizeof(a->node.b)) != 0 ||
        memcmp(a->sig, b->sig, sizeof(a->sig)) != 0 ||
        strcmp(a->listen, b->listen) != 0 || strcmp(a->region, b->region) != 0)
      return 0;
    break;
  case WIRE_PEERS:
    if (a->n_peers != b->n_peers)
      return 0;
    for (size_t i = 0; i < a->n_peers; i++)
      if (strcmp(a->peer_addr[i], b->peer_addr[i]) != 0 ||
          strcmp(a->peer_region[i], b->peer_region[i]) != 0)
        return 0;
    return 1;
  case WIRE_REACH:
    if (a->n_reach != b->n_reach)
      return 0;
    for (size_t i = 0; i < a->n_reach; i++)
      if (strcmp(a->reach[i], b->reach[i]) != 0)
        return 0;
    return 1;
  case WIRE_PING:
    return 1;
  case WIRE_PUNCH:
    return a->punch == b->punch &&
           memcmp(a->node.b, b->node.b, sizeof(a->node.b)) == 0 &&
           strcmp(a->addr, b->addr) == 0;
  case WIRE_MANIFEST:
  case WIRE_POLICY:
    break;
  default:
    if (a->version != b->version || a->object != b->object ||
        a->chunk != b->chunk || a->nbits != b->nbits)
      return 0;
    if ((a->type == WIRE_CROSSING || a->type == WIRE_BID) &&
        memcmp(a->node.b, b->node.b, sizeof(a->node.b)) != 0)
      return 0;
  }
  return !has_data(a->type) ||
         (a->data_len == b->data_len &&
          (a->data_len == 0 || memcmp(a->data, b->data, a->data_len) == 0));
}

static void one_frame(int type, const uint8_t *body, size_t len, wire_msg *m,
                      wire_msg *back) {
  stitch_diag d = {{0}};
  int rc = wire_decode(type, body, len, m, &d);
  if (rc != 0) {
    check_err(rc, &d);
    return;
  }
  CHECK((int)m->type == type);
  /* Every payload lies in the body, and is not empty, but for AUTH's
   * ticket (the seed's and an open swarm's are). */
  if (has_data(m->type))
    CHECK((m->data_len > 0 || m->type == WIRE_AUTH) &&
          (m->data_len == 0 || (m->data >= body &&
                                m->data_len <= len - (size_t)(m->data - body))));
  dbuf e = {NULL, 0, 0, (size_t)256 << 20}, e2 = {NULL, 0, 0, 256 << 20};
  CHECK(wire_encode(&e, m) == 0);
  CHECK(e.len >= 5 && e.len - 5 <= len);
  CHECK(((uint32_t)e.p[0] | (uint32_t)e.p[1] << 8 | (uint32_t)e.p[2] << 16 |
         (uint32_t)e.p[3] << 24) == e.len - 4);
  CHECK(e.p[4] == type);
  rc = wire_decode(type, e.p + 5, e.len - 5, back, &d);
  if (rc != 0)
    fprintf(stderr, "fuzz_wire: re-encoded frame refused: %s\n", d.msg);
  CHECK(rc == 0);
  CHECK(msg_eq(m, back));
  CHECK(wire_encode(&e2, back) == 0);
  CHECK(e2.len == e.len && memcmp(e2.p, e.p, e.len) == 0);
  dbuf_free(&e);
  dbuf_free(&e2);
}

/* A CHUNK the reader handed out as its head and its bytes apart
 * (r.split): decoded so, it is what the same body decodes to whole, its
 * bytes where they lay. */
static void one_tail(int type, const uint8_t *body, size_t len,
                     const uint8_t *tail, size_t tail_len, wire_msg *m,
                     wire_msg *back) {
  CHECK(type == WIRE_CHUNK && tail_len > 0);
  uint8_t *whole = malloc(len + tail_len);
  CHECK(whole != NULL);
  memcpy(whole, body, len);
  memcpy(whole + len, tail, tail_len);
  stitch_diag d = {{0}};
  int rc = wire_decode(type, whole, len + tail_len, m, &d);
  CHECK(wire_decode_tail(type, body, len, tail, tail_len, back, &d) == rc);
  if (rc == 0) {
    CHECK(back->data == tail && msg_eq(m, back));
    one_frame(type, whole, len + tail_len, m, back);
  }
  free(whole);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  size_t k = data[0] & 15;
  if (1 + k > size)
    return 0;
  const uint8_t *split = data + 1, *s = data + 1 + k;
  size_t n = size - 1 - k;
  wire_msg *m = malloc(sizeof(*m)), *back = malloc(sizeof(*back));
  CHECK(m != NULL && back != NULL);
  wire_reader r;
  wire_reader_init(&r);
  r.split = data[0] >> 4 & 1; /* a CHUNK's bytes may come apart (r.tail) */
  stitch_diag d = {{0}};
  size_t pos = 0, pieces = 0;
  int broken = 0;
  while (pos < n && !broken) {
    size_t piece = k > 0 ? (size_t)split[pieces++ % k] + 1 : n - pos;
    if (piece > n - pos)
      piece = n - pos;
    size_t off = 0;
    do {
      size_t used;
      int type;
      const uint8_t *body;
      size_t blen;
      int rc = wire_reader_feed(&r, s + pos + off, piece - off, &used, &type,
                                &body, &blen, &d);
      if (rc != 0) {
        check_err(rc, &d);
        /* Refused on its header: no byte of that frame's body taken. */
        CHECK(type == 0 && used <= 5 && r.type == 0 && r.buf.len == 0);
        size_t again;
        CHECK(wire_reader_feed(&r, s + pos, n - pos, &again, &type, &body,
                               &blen, &d) == rc);
        CHECK(again == 0 && type == 0);
        broken = 1;
        break;
      }
      off += used;
      CHECK(r.buf.cap <= 256 || r.buf.cap <= 2 * (pos + off));
      CHECK(r.buf.cap <= r.buf.max || r.buf.cap == 0);
      if (type > 0) {
        CHECK(blen + r.tail_len + 1 <= wire_type_limit(type));
        if (r.tail != NULL)
          one_tail(type, body, blen, r.tail, r.tail_len, m, back);
        else
          one_frame(type, body, blen, m, back);
      } else {
        CHECK(off == piece); /* no frame yet: everything was taken */
      }
    } while (off < piece);
    pos += piece;
  }
  wire_reader_free(&r);
  free(m);
  free(back);
  return 0;
}
