/* wire.c: frames and messages of the swarm protocol (proto/wire.md).
 *
 * What a peer can make us do here is bounded before it happens:
 *  - the reader checks a frame's length against its type's limit when the
 *    5-byte header is complete, before a byte of the body is buffered, and
 *    grows its buffer only as body bytes arrive (a header claiming 32 MiB
 *    followed by silence costs 256 bytes);
 *  - decoding runs msgpack_check over the body first, then reads each
 *    header in place with msgpack_check_head. Nothing is unpacked or
 *    allocated: every count and length was checked against the bytes that
 *    are there, and the fields are few and fixed.
 *
 * The writer is msgpack-c's packer, as the manifest's is (manifest.c),
 * over a sink that copies at most a given number of bytes: it runs twice
 * over a message, once to measure and once to write, so the size it
 * reserves is the size it writes. It refuses any message that the
 * decoder would refuse: encode(m) always decodes back to m. */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "swarm/wire.h"

#include "common/diag.h"
#include "common/msgpack_check.h"

#include <msgpack.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

/* body > PEERS' list > one entry: the deepest any message nests. */
#define WIRE_DEPTH 3
/* A reader keeps a buffer this large between frames; a larger one (after a
 * chunk or a manifest) is freed, so one big frame does not pin memory for
 * the life of a connection. */
#define WIRE_KEEP_MAX (1u << 20)
/* What an idle reader keeps (wire_reader_trim): a node has tens of peers,
 * and a chunk-sized buffer each would be most of its memory. */
#define WIRE_KEEP_IDLE (64u << 10)

static const char *const type_names[WIRE_TYPE_COUNT_] = {
    "type 0",  "HELLO",  "AUTH",  "MANIFEST", "BITFIELD", "HAVE",
    "REQUEST", "CANCEL", "CHUNK", "REJECT",   "PEERS",    "PING",
    "CROSSING", "REACH", "BID", "POLICY", "PUNCH"};

/* Fields of each message's array. */
static const unsigned n_fields[WIRE_TYPE_COUNT_] = {
    0, 2, 6, 1, 4, 3, 3, 3, 4, 3, 1, 0, 4, 1, 4, 1, 3};

static int known(int type) { return type > 0 && type < WIRE_TYPE_COUNT_; }

size_t wire_type_limit(int type) {
  switch (type) {
  case WIRE_MANIFEST:
    return (size_t)STITCH_MANIFEST_MAX + 64;
  case WIRE_CHUNK:
    return (size_t)STITCH_CHUNK_MAX + 64;
  case WIRE_BITFIELD:
    return STITCH_MAX_CHUNKS / 8 + 64;
  case WIRE_POLICY:
    return (size_t)STITCH_POLICY_MAX + 64;
  case WIRE_PEERS:
    return WIRE_MAX_PEERS_MSG *
               (STITCH_SWARM_ADDR_MAX + STITCH_SWARM_REGION_MAX + 8) +
           64;
  default:
    return known(type) ? WIRE_SMALL_MAX : 0;
  }
}

void wire_auth_input(int acceptor, const uint8_t dialer_kx[WIRE_KX_BYTES],
                     const uint8_t acceptor_kx[WIRE_KX_BYTES],
                     uint8_t out[WIRE_AUTH_INPUT]) {
  /* 14 characters and two zero bytes: the domain is 16 bytes. */
  static const char domain[16] = "stitch-auth-v2";
  uint8_t both[2 * WIRE_KX_BYTES];
  memcpy(out, domain, 16);
  out[16] = acceptor ? 1 : 0;
  memcpy(both, dialer_kx, WIRE_KX_BYTES);
  memcpy(both + WIRE_KX_BYTES, acceptor_kx, WIRE_KX_BYTES);
  crypto_generichash(out + 17, 32, both, sizeof(both), NULL, 0);
}

/* ---- decoding ----------------------------------------------------------- */

/* A position inside a body that passed msgpack_check: every header read
 * at an element the enclosing arrays declare lies inside the body. */
typedef struct cur {
  const uint8_t *p;
  size_t len, pos;
  const char *msg; /* "REQUEST", for diags */
  stitch_diag *d;
  const uint8_t *tail; /* the bytes of a bin whose header ends p */
} cur;

static const char *kind_name(msgpack_check_kind k) {
  static const char *const names[] = {"nil",
                                      "a boolean",
                                      "an unsigned integer",
                                      "a negative integer",
                                      "a float",
                                      "a str",
                                      "a bin",
                                      "an ext",
                                      "an array",
                                      "a map"};
  return names[k];
}

/* Reads the next header, which must be of kind K. WHAT names the field
 * ("field 2 (chunk)"). */
static int next(cur *c, msgpack_check_kind k, const char *what,
                msgpack_check_hdr *h) {
  /* Cannot fail after msgpack_check; checked so that a slip here is a
   * refusal, not a read of an unset header. */
  CHECK_RC(msgpack_check_head(c->p, c->len, c->pos, h, c->d));
  RETURN_IF(h->kind != k, c->d, STITCH_EFORMAT, "wire: %s: %s is not %s",
            c->msg, what, kind_name(k));
  c->pos += h->size;
  return 0;
}

static int get_uint(cur *c, const char *what, uint64_t max, uint64_t *v) {
  msgpack_check_hdr h;
  CHECK_RC(next(c, MSGPACK_CHECK_UINT, what, &h));
  RETURN_IF(h.n > max, c->d, STITCH_EFORMAT,
            "wire: %s: %s is %llu, at most %llu", c->msg, what,
            (unsigned long long)h.n, (unsigned long long)max);
  *v = h.n;
  return 0;
}

/* A bin of MIN..MAX bytes; *p points into the body. A bin longer than
 * MAX is over a limit (ELIMIT); shorter, or not the exact size a key or
 * a signature has, malformed (EFORMAT). */
static int get_bin(cur *c, const char *what, size_t min, size_t max,
                   const uint8_t **p, size_t *n) {
  msgpack_check_hdr h;
  CHECK_RC(next(c, MSGPACK_CHECK_BIN, what, &h));
  if (h.n < min || h.n > max) {
    int err = min != max && h.n > max ? STITCH_ELIMIT : STITCH_EFORMAT;
    if (min == max)
      return stitch_diag_set(c->d, err,
                             "wire: %s: %s is a bin of %llu bytes, not %zu",
                             c->msg, what, (unsigned long long)h.n, min);
    return stitch_diag_set(c->d, err,
                           "wire: %s: %s is a bin of %llu bytes, not %zu..%zu",
                           c->msg, what, (unsigned long long)h.n, min, max);
  }
  *n = (size_t)h.n;
  if (c->tail != NULL && c->pos == c->len) { /* its bytes are apart */
    *p = c->tail;
    return 0;
  }
  *p = c->p + c->pos;
  c->pos += (size_t)h.n;
  return 0;
}

static int get_fixed(cur *c, const char *what, size_t n, uint8_t *out) {
  const uint8_t *p = NULL;
  size_t got = 0;
  CHECK_RC(get_bin(c, what, n, n, &p, &got));
  memcpy(out, p, n);
  return 0;
}

const uint8_t *wire_control_byte(const void *s, size_t n) {
  const uint8_t *b = s;
  for (size_t i = 0; i < n; i++)
    if (b[i] < 0x20 || b[i] == 0x7f)
      return b + i;
  return NULL;
}

/* A str of MIN..CAP-1 bytes without a control byte (NUL among them),
 * copied with a NUL into OUT (CAP bytes). */
static int get_str(cur *c, const char *what, size_t min, size_t cap,
                   char *out) {
  msgpack_check_hdr h;
  CHECK_RC(next(c, MSGPACK_CHECK_STR, what, &h));
  RETURN_IF(h.n < min || h.n >= cap, c->d, STITCH_EFORMAT,
            "wire: %s: %s is a str of %llu bytes, not %zu..%zu", c->msg, what,
            (unsigned long long)h.n, min, cap - 1);
  const uint8_t *s = c->p + c->pos;
  const uint8_t *bad = wire_control_byte(s, (size_t)h.n);
  RETURN_IF(bad != NULL, c->d, STITCH_EFORMAT,
            "wire: %s: %s holds the control byte 0x%02x", c->msg, what,
            (unsigned)*bad);
  if (h.n > 0)
    memcpy(out, s, (size_t)h.n);
  out[h.n] = 0;
  c->pos += (size_t)h.n;
  return 0;
}

static int get_array(cur *c, const char *what, uint64_t *n) {
  msgpack_check_hdr h;
  CHECK_RC(next(c, MSGPACK_CHECK_ARRAY, what, &h));
  *n = h.n;
  return 0;
}

/* The (version, object) pair that BITFIELD, HAVE, REQUEST, CANCEL, CHUNK
 * and REJECT start with, and the chunk index that all but BITFIELD have. */
static int get_ref(cur *c, wire_msg *m, int with_chunk) {
  uint64_t v;
  CHECK_RC(get_uint(c, "field 0 (version)", UINT64_MAX, &m->version));
  CHECK_RC(get_uint(c, "field 1 (object)", STITCH_MAX_OBJECTS - 1, &v));
  m->object = (uint32_t)v;
  if (with_chunk)
    CHECK_RC(get_uint(c, "field 2 (chunk)", STITCH_MAX_CHUNKS - 1, &m->chunk));
  return 0;
}

static int get_bits(cur *c, wire_msg *m) {
  CHECK_RC(get_uint(c, "field 2 (nbits)", STITCH_MAX_CHUNKS, &m->nbits));
  RETURN_IF(m->nbits == 0, c->d, STITCH_EFORMAT,
            "wire: %s: field 2 (nbits) is 0", c->msg);
  size_t want = (size_t)(m->nbits + 7) / 8;
  CHECK_RC(get_bin(c, "field 3 (bits)", want, want, &m->data, &m->data_len));
  unsigned spare = (unsigned)(m->nbits % 8);
  RETURN_IF(spare != 0 && (m->data[want - 1] >> spare) != 0, c->d,
            STITCH_EFORMAT,
            "wire: %s: field 3 (bits) sets bits past nbits (%llu)", c->msg,
            (unsigned long long)m->nbits);
  return 0;
}

static int get_peers(cur *c, wire_msg *m) {
  uint64_t n, k;
  CHECK_RC(get_array(c, "field 0 (peers)", &n));
  RETURN_IF(n > WIRE_MAX_PEERS_MSG, c->d, STITCH_ELIMIT,
            "wire: %s: field 0 (peers) has %llu entries, at most %d", c->msg,
            (unsigned long long)n, WIRE_MAX_PEERS_MSG);
  for (size_t i = 0; i < n; i++) {
    char what[64];
    snprintf(what, sizeof(what), "peer %zu", i);
    CHECK_RC(get_array(c, what, &k));
    RETURN_IF(k != 2, c->d, STITCH_EFORMAT,
              "wire: %s: peer %zu is an array of %llu, not 2 (addr, region)",
              c->msg, i, (unsigned long long)k);
    snprintf(what, sizeof(what), "peer %zu addr", i);
    CHECK_RC(get_str(c, what, 1, STITCH_SWARM_ADDR_MAX, m->peer_addr[i]));
    snprintf(what, sizeof(what), "peer %zu region", i);
    CHECK_RC(get_str(c, what, 0, STITCH_SWARM_REGION_MAX, m->peer_region[i]));
    m->n_peers = i + 1;
  }
  return 0;
}

static int get_reach(cur *c, wire_msg *m) {
  uint64_t n;
  CHECK_RC(get_array(c, "field 0 (regions)", &n));
  RETURN_IF(n > WIRE_MAX_REACH, c->d, STITCH_ELIMIT,
            "wire: %s: field 0 (regions) has %llu entries, at most %d",
            c->msg, (unsigned long long)n, WIRE_MAX_REACH);
  for (size_t i = 0; i < n; i++) {
    char what[32];
    snprintf(what, sizeof(what), "region %zu", i);
    CHECK_RC(get_str(c, what, 1, STITCH_SWARM_REGION_MAX, m->reach[i]));
    m->n_reach = i + 1;
  }
  return 0;
}

static int get_fields(cur *c, wire_msg *m) {
  switch (m->type) {
  case WIRE_HELLO: /* field 0, proto, was read by the caller */
    return get_fixed(c, "field 1 (kx)", WIRE_KX_BYTES, m->kx);
  case WIRE_AUTH:
    CHECK_RC(get_fixed(c, "field 0 (swarm)", STITCH_PUBKEY_BYTES, m->swarm.b));
    CHECK_RC(get_fixed(c, "field 1 (node)", STITCH_PUBKEY_BYTES, m->node.b));
    CHECK_RC(get_fixed(c, "field 2 (sig)", STITCH_SIG_BYTES, m->sig));
    CHECK_RC(get_bin(c, "field 3 (ticket)", 0, STITCH_TICKET_BYTES, &m->data,
                     &m->data_len));
    RETURN_IF(m->data_len != 0 && m->data_len != STITCH_TICKET_BYTES, c->d,
              STITCH_EFORMAT,
              "wire: AUTH: field 3 (ticket) is a bin of %zu bytes, not 0 or "
              "%d",
              m->data_len, STITCH_TICKET_BYTES);
    CHECK_RC(
        get_str(c, "field 4 (listen)", 0, STITCH_SWARM_ADDR_MAX, m->listen));
    return get_str(c, "field 5 (region)", 0, STITCH_SWARM_REGION_MAX,
                   m->region);
  case WIRE_POLICY:
    return get_bin(c, "field 0 (policy)", 1, STITCH_POLICY_MAX, &m->data,
                   &m->data_len);
  case WIRE_MANIFEST:
    return get_bin(c, "field 0 (manifest)", 1, STITCH_MANIFEST_MAX, &m->data,
                   &m->data_len);
  case WIRE_BITFIELD:
    CHECK_RC(get_ref(c, m, 0));
    return get_bits(c, m);
  case WIRE_CHUNK:
    CHECK_RC(get_ref(c, m, 1));
    return get_bin(c, "field 3 (bytes)", 1, STITCH_CHUNK_MAX, &m->data,
                   &m->data_len);
  case WIRE_HAVE:
  case WIRE_REQUEST:
  case WIRE_CANCEL:
  case WIRE_REJECT:
    return get_ref(c, m, 1);
  case WIRE_CROSSING:
  case WIRE_BID:
    CHECK_RC(get_ref(c, m, 1));
    return get_fixed(c, "field 3 (node)", STITCH_PUBKEY_BYTES, m->node.b);
  case WIRE_PEERS:
    return get_peers(c, m);
  case WIRE_REACH:
    return get_reach(c, m);
  case WIRE_PUNCH: {
    uint64_t k;
    CHECK_RC(get_uint(c, "field 0 (kind)", WIRE_PUNCH_KINDS - 1, &k));
    m->punch = (uint32_t)k;
    CHECK_RC(get_fixed(c, "field 1 (node)", STITCH_PUBKEY_BYTES, m->node.b));
    return get_str(c, "field 2 (addr)", 0, STITCH_SWARM_ADDR_MAX, m->addr);
  }
  default: /* PING */
    return 0;
  }
}

/* Is HEAD a CHUNK's body up to its bytes: the array header, the three
 * uints, and the header of a bin of exactly TAIL_LEN bytes, ending HEAD?
 * Reads headers only, none past HEAD. */
static int chunk_head_ends(const uint8_t *head, size_t len, size_t tail_len) {
  msgpack_check_hdr h;
  size_t pos = 0;
  for (unsigned i = 0; i < 5; i++) {
    msgpack_check_kind want = i == 0   ? MSGPACK_CHECK_ARRAY
                              : i == 4 ? MSGPACK_CHECK_BIN
                                       : MSGPACK_CHECK_UINT;
    if (msgpack_check_head(head, len, pos, &h, NULL) != 0 || h.kind != want ||
        (i == 0 && h.n != n_fields[WIRE_CHUNK]))
      return 0;
    pos += h.size;
  }
  return h.n == tail_len && pos == len;
}

int wire_decode(int type, const uint8_t *body, size_t len, wire_msg *m,
                stitch_diag *d) {
  return wire_decode_tail(type, body, len, NULL, 0, m, d);
}

int wire_decode_tail(int type, const uint8_t *body, size_t len,
                     const uint8_t *tail, size_t tail_len, wire_msg *m,
                     stitch_diag *d) {
  RETURN_IF(m == NULL || (body == NULL && len > 0), d, STITCH_EINVAL,
            "wire: NULL argument");
  wire_msg_clear(m);
  size_t limit = wire_type_limit(type);
  RETURN_IF(limit == 0, d, STITCH_EFORMAT, "wire: unknown message type %d",
            type);
  const char *tn = type_names[type];
  m->type = (wire_type)type;
  /* The reader never hands out more; another caller might. */
  RETURN_IF(len > limit - 1 || tail_len > limit - 1 - len, d, STITCH_ELIMIT,
            "wire: %s: body of %zu bytes, at most %zu", tn, len + tail_len,
            limit - 1);
  if (tail != NULL) { /* what msgpack_check would see of body and tail */
    RETURN_IF(type != WIRE_CHUNK || !chunk_head_ends(body, len, tail_len), d,
              STITCH_EFORMAT,
              "wire: %s: the body's head does not end where its bytes "
              "begin",
              tn);
  } else {
    size_t used;
    int rc = msgpack_check(body, len, WIRE_DEPTH, &used, d);
    if (rc != 0) {
      char where[32];
      snprintf(where, sizeof(where), "wire: %s", tn);
      return stitch_diag_prefix(d, rc, where);
    }
    RETURN_IF(used != len, d, STITCH_EFORMAT,
              "wire: %s: %zu bytes after the message's array", tn, len - used);
  }
  cur c = {body, len, 0, tn, d, tail};
  uint64_t n;
  msgpack_check_hdr h;
  msgpack_check_head(body, len, 0, &h, NULL);
  RETURN_IF(h.kind != MSGPACK_CHECK_ARRAY, d, STITCH_EFORMAT,
            "wire: %s: the body is %s, not an array", tn, kind_name(h.kind));
  n = h.n;
  c.pos = h.size;
  if (type == WIRE_HELLO && n >= 1) {
    /* The protocol before the rest: a later one may lay HELLO out
     * differently, and the useful answer is "upgrade". */
    uint64_t proto;
    CHECK_RC(get_uint(&c, "field 0 (proto)", UINT64_MAX, &proto));
    m->proto = proto > UINT32_MAX ? UINT32_MAX : (uint32_t)proto;
    RETURN_IF(proto != WIRE_PROTO, d, STITCH_EVERSION,
              "wire: HELLO: protocol %llu; this build speaks %d",
              (unsigned long long)proto, WIRE_PROTO);
  }
  RETURN_IF(n != n_fields[type], d, STITCH_EFORMAT,
            "wire: %s: an array of %llu fields, expected %u", tn,
            (unsigned long long)n, n_fields[type]);
  return get_fields(&c, m);
}

/* ---- encoding ----------------------------------------------------------- */

/* msgpack-c's packer writes into this sink, which only counts when p is
 * NULL (the measuring pass), and copies only its first `cap` bytes
 * (wire_encode_head leaves a CHUNK's payload, the body's last bytes, to
 * the caller). */
typedef struct wr {
  uint8_t *p;
  size_t n;
  size_t cap;
} wr;

static int w_sink(void *data, const char *src, size_t k) {
  wr *w = data;
  if (w->p != NULL && k > 0 && w->n < w->cap)
    memcpy(w->p + w->n, src, k < w->cap - w->n ? k : w->cap - w->n);
  w->n += k;
  return 0;
}

/* The sink never fails, so neither do these. */
static void w_uint(msgpack_packer *pk, uint64_t v) {
  msgpack_pack_uint64(pk, v);
}

static void w_array(msgpack_packer *pk, size_t n) {
  msgpack_pack_array(pk, n);
}

static void w_str(msgpack_packer *pk, const char *s) {
  msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void w_bin(msgpack_packer *pk, const void *p, size_t n) {
  msgpack_pack_bin_with_body(pk, p, n);
}

static void emit(wr *sink, const wire_msg *m) {
  msgpack_packer pk, *w = &pk;
  msgpack_packer_init(&pk, sink, w_sink);
  w_array(w, n_fields[m->type]);
  switch (m->type) {
  case WIRE_HELLO:
    w_uint(w, m->proto);
    w_bin(w, m->kx, WIRE_KX_BYTES);
    break;
  case WIRE_AUTH:
    w_bin(w, m->swarm.b, STITCH_PUBKEY_BYTES);
    w_bin(w, m->node.b, STITCH_PUBKEY_BYTES);
    w_bin(w, m->sig, STITCH_SIG_BYTES);
    w_bin(w, m->data, m->data_len);
    w_str(w, m->listen);
    w_str(w, m->region);
    break;
  case WIRE_MANIFEST:
  case WIRE_POLICY:
    w_bin(w, m->data, m->data_len);
    break;
  case WIRE_BITFIELD:
    w_uint(w, m->version);
    w_uint(w, m->object);
    w_uint(w, m->nbits);
    w_bin(w, m->data, m->data_len);
    break;
  case WIRE_CHUNK:
  case WIRE_HAVE:
  case WIRE_REQUEST:
  case WIRE_CANCEL:
  case WIRE_REJECT:
  case WIRE_CROSSING:
  case WIRE_BID:
    w_uint(w, m->version);
    w_uint(w, m->object);
    w_uint(w, m->chunk);
    if (m->type == WIRE_CHUNK)
      w_bin(w, m->data, m->data_len);
    if (m->type == WIRE_CROSSING || m->type == WIRE_BID)
      w_bin(w, m->node.b, STITCH_PUBKEY_BYTES);
    break;
  case WIRE_PEERS:
    w_array(w, m->n_peers);
    for (size_t i = 0; i < m->n_peers; i++) {
      w_array(w, 2);
      w_str(w, m->peer_addr[i]);
      w_str(w, m->peer_region[i]);
    }
    break;
  case WIRE_REACH:
    w_array(w, m->n_reach);
    for (size_t i = 0; i < m->n_reach; i++)
      w_str(w, m->reach[i]);
    break;
  case WIRE_PUNCH:
    w_uint(w, m->punch);
    w_bin(w, m->node.b, STITCH_PUBKEY_BYTES);
    w_str(w, m->addr);
    break;
  default: /* PING */
    break;
  }
}

/* A NUL inside the array's CAP bytes, after at least MIN others. */
static int cstr_ok(const char *s, size_t min, size_t cap) {
  size_t n = strnlen(s, cap);
  return n >= min && n < cap;
}

static int data_ok(const wire_msg *m, size_t min, size_t max) {
  return m->data_len >= min && m->data_len <= max && m->data != NULL;
}

/* The decoder's rules, so that whatever is encoded decodes to itself. */
static int msg_ok(const wire_msg *m) {
  int ref = m->object < STITCH_MAX_OBJECTS && m->chunk < STITCH_MAX_CHUNKS;
  switch (m->type) {
  case WIRE_HELLO:
    return m->proto == WIRE_PROTO;
  case WIRE_AUTH:
    return (m->data_len == 0 ||
            (m->data_len == STITCH_TICKET_BYTES && m->data != NULL)) &&
           cstr_ok(m->listen, 0, STITCH_SWARM_ADDR_MAX) &&
           cstr_ok(m->region, 0, STITCH_SWARM_REGION_MAX);
  case WIRE_PING:
    return 1;
  case WIRE_POLICY:
    return data_ok(m, 1, STITCH_POLICY_MAX);
  case WIRE_MANIFEST:
    return data_ok(m, 1, STITCH_MANIFEST_MAX);
  case WIRE_BITFIELD: {
    if (m->object >= STITCH_MAX_OBJECTS || m->nbits == 0 ||
        m->nbits > STITCH_MAX_CHUNKS)
      return 0;
    size_t n = (size_t)(m->nbits + 7) / 8;
    unsigned spare = (unsigned)(m->nbits % 8);
    return data_ok(m, n, n) && (spare == 0 || (m->data[n - 1] >> spare) == 0);
  }
  case WIRE_CHUNK:
    return ref && data_ok(m, 1, STITCH_CHUNK_MAX);
  case WIRE_HAVE:
  case WIRE_REQUEST:
  case WIRE_CANCEL:
  case WIRE_REJECT:
  case WIRE_CROSSING:
  case WIRE_BID:
    return ref;
  case WIRE_PEERS:
    if (m->n_peers > WIRE_MAX_PEERS_MSG)
      return 0;
    for (size_t i = 0; i < m->n_peers; i++)
      if (!cstr_ok(m->peer_addr[i], 1, STITCH_SWARM_ADDR_MAX) ||
          !cstr_ok(m->peer_region[i], 0, STITCH_SWARM_REGION_MAX))
        return 0;
    return 1;
  case WIRE_REACH:
    if (m->n_reach > WIRE_MAX_REACH)
      return 0;
    for (size_t i = 0; i < m->n_reach; i++)
      if (!cstr_ok(m->reach[i], 1, STITCH_SWARM_REGION_MAX))
        return 0;
    return 1;
  case WIRE_PUNCH:
    return m->punch < WIRE_PUNCH_KINDS &&
           cstr_ok(m->addr, 0, STITCH_SWARM_ADDR_MAX);
  default:
    return 0;
  }
}

/* Appends M's frame to OUT, all but its last LEAVE bytes. */
static int encode(dbuf *out, const wire_msg *m, size_t leave) {
  if (out == NULL || m == NULL || !known((int)m->type) || !msg_ok(m))
    return STITCH_EINVAL;
  wr w = {NULL, 0, 0};
  emit(&w, m);
  size_t body = w.n;
  /* Fields within their rules always fit; this keeps the promise that no
   * frame we send is one a peer must refuse. */
  if (body + 1 > wire_type_limit((int)m->type) || leave > body)
    return STITCH_EINVAL;
  CHECK_RC(dbuf_reserve(out, 5 + body - leave));
  uint8_t *p = out->p + out->len;
  uint32_t len = (uint32_t)(body + 1);
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(len >> (8 * i));
  p[4] = (uint8_t)m->type;
  wr body_w = {p + 5, 0, body - leave};
  emit(&body_w, m);
  out->len += 5 + body - leave;
  return 0;
}

int wire_encode(dbuf *out, const wire_msg *m) { return encode(out, m, 0); }

int wire_encode_head(dbuf *out, const wire_msg *m) {
  if (m == NULL || m->type != WIRE_CHUNK)
    return STITCH_EINVAL;
  return encode(out, m, m->data_len);
}

/* ---- the frame reader --------------------------------------------------- */

void wire_reader_init(wire_reader *r) { memset(r, 0, sizeof(*r)); }

void wire_reader_free(wire_reader *r) {
  if (r == NULL)
    return;
  dbuf_free(&r->buf);
  memset(r, 0, sizeof(*r));
}

static uint32_t head_len(const wire_reader *r) {
  return (uint32_t)r->head[0] | (uint32_t)r->head[1] << 8 |
         (uint32_t)r->head[2] << 16 | (uint32_t)r->head[3] << 24;
}

/* Takes header bytes from BUF until the header is whole and accepted
 * (r->type set) or BUF is used up. A refused header stays in r, so every
 * later call fails the same way: the stream cannot be resynchronized. */
static int read_head(wire_reader *r, const uint8_t *buf, size_t len,
                     size_t *pos, stitch_diag *d) {
  while (r->type == 0) {
    if (r->head_len >= 4)
      RETURN_IF(head_len(r) == 0, d, STITCH_EFORMAT,
                "wire: frame of length 0 (no type byte)");
    if (r->head_len == 5) {
      int t = r->head[4];
      uint32_t n = head_len(r);
      size_t limit = wire_type_limit(t);
      RETURN_IF(limit == 0, d, STITCH_EFORMAT,
                "wire: frame of unknown type %d (%u bytes)", t, n);
      RETURN_IF(n > limit, d, STITCH_ELIMIT,
                "wire: %s frame of %u bytes, at most %zu", type_names[t], n,
                limit);
      r->type = t;
      r->need = n - 1;
      r->buf.len = 0;
      r->buf.max = limit;
      return 0;
    }
    if (*pos == len)
      return 0;
    r->head[r->head_len++] = buf[(*pos)++];
  }
  return 0;
}

void wire_reader_trim(wire_reader *r) {
  if (r != NULL && r->ready && r->buf.cap > WIRE_KEEP_IDLE)
    dbuf_free(&r->buf);
}

/* The body of a frame that has none: not NULL, so callers need not care. */
static const uint8_t no_body[1];

int wire_reader_feed(wire_reader *r, const uint8_t *buf, size_t len,
                     size_t *used, int *type, const uint8_t **body,
                     size_t *body_len, stitch_diag *d) {
  RETURN_IF(r == NULL || used == NULL || type == NULL || body == NULL ||
                body_len == NULL || (buf == NULL && len > 0),
            d, STITCH_EINVAL, "wire: NULL argument");
  *used = 0;
  *type = 0;
  *body = NULL;
  *body_len = 0;
  if (r->ready) { /* the last frame was handed out: start the next */
    r->ready = 0;
    r->tail = NULL;
    r->tail_len = 0;
    r->head_len = 0;
    r->type = 0;
    r->need = 0;
    dbuf_empty(&r->buf, WIRE_KEEP_MAX);
  }
  size_t pos = 0;
  int rc = read_head(r, buf, len, &pos, d);
  *used = pos;
  if (rc != 0 || r->type == 0)
    return rc;
  /* A body that came whole in BUF is handed out where it lies, uncopied
   * (a chunk's bytes were copied once more for every frame). Otherwise
   * only what arrived is buffered: the buffer grows (doubling, up to the
   * type's limit) with the bytes, never with the header's claim. */
  size_t n = len - pos < r->need ? len - pos : r->need;
  const uint8_t *whole = NULL;
  if (r->buf.len == 0 && n == r->need) {
    whole = n > 0 ? buf + pos : no_body;
  } else if (r->split && n > 0 && n == r->need && r->type == WIRE_CHUNK &&
             chunk_head_ends(r->buf.p, r->buf.len, n)) {
    r->tail = buf + pos; /* a chunk's bytes, after its head: uncopied */
    r->tail_len = n;
  } else if (n > 0) {
    rc = dbuf_put(&r->buf, buf + pos, n);
    RETURN_IF(rc != 0, d, rc, "wire: %s frame: cannot buffer %zu bytes",
              type_names[r->type], n);
  }
  r->need -= (uint32_t)n;
  *used = pos + n;
  if (r->need == 0) {
    r->ready = 1;
    *type = r->type;
    *body = whole != NULL ? whole : r->buf.p != NULL ? r->buf.p : no_body;
    *body_len = whole != NULL ? n : r->buf.len;
  }
  return 0;
}
