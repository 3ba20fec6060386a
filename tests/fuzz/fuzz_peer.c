/* fuzz_peer.c: one swarm core (the victim) against a dialer the input
 * scripts, through stitch_swarm_peer_recv and the record layer
 * (src/swarm/core.c, handshake.c, channel.c, fetch.c; proto/wire.md).
 *
 * The victim is a real stitch_swarm with an in-memory host: deterministic
 * random numbers, a virtual clock, a chunk table holding the chunks of two
 * real versions (an anchor and a delta on it, signed with a fixed swarm
 * key), manifests accepted. The harness opens one inbound peer and plays
 * the dialer properly: it reads the victim's HELLO, sends its own, derives
 * the keys with channel.h, and sends an AUTH signed over both HELLO keys
 * with a ticket the swarm key signed (or, as the input's header says, none,
 * a bad one, a bad AUTH, or raw bytes before or after the HELLO). Then the
 * input's program (fuzz_peer.h) queues frames (raw ones, and real
 * manifests, bitfields, chunks, policies with their signatures intact, so
 * mutations reach the fetcher and the server), seals them into records of
 * sizes the input picks, feeds them in pieces it picks, and moves time.
 *
 * After every call into the core the harness drains what the victim
 * sends. Checks (any violation abort()s):
 *  - no crash, no leak (ASan/LeakSanitizer), every chunk the core read
 *    from its host released once it is freed;
 *  - peer_recv and tick return 0 or a known negative STITCH_E* code;
 *  - every byte the victim sends after its HELLO is a record that opens
 *    under our receiving key (or a clear frame under cipher_none), and
 *    every frame in them decodes; its first frame is its HELLO, its next
 *    its AUTH, which verifies over both HELLO keys and comes only after
 *    our AUTH;
 *  - a peer the core dropped (a nonzero return) is asked to be closed
 *    (a CLOSE action), keeps refusing bytes, and sends nothing new; once
 *    closed its id is unknown;
 *  - a chunk the core writes is one of the table's, byte for byte. */
#include "fuzz/fuzz_common.h"
#include "fuzz/fuzz_peer.h"

#include "swarm/channel.h"
#include "swarm/wire.h"

#include <sodium.h>

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "fuzz_peer: check failed: %s (line %d)\n", #c,           \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#define FP_UNIX0 1700000000ull /* the virtual clock's Unix time at 0 ms */
#define FP_MAX_CHUNKS 64
#define FP_NV 2
#define FP_TICKETS 6
#define FP_POLICIES 4
#define FP_CHUNK_TARGET 400

/* ---- The fixture: keys, tickets, policies, two versions (built once) --- */

typedef struct fp_version {
  uint8_t *man;
  size_t man_len;
  stitch_digest id;
  stitch_object obj;
  uint8_t **bufs;
} fp_version;

typedef struct fp_chunk {
  stitch_digest h;
  const uint8_t *p;
  size_t len;
  uint64_t version;
  uint64_t idx;
} fp_chunk;

static struct {
  int ready;
  stitch_pubkey swarm_pk, victim_pk, dialer_pk, other_pk;
  stitch_seckey swarm_sk, victim_sk, dialer_sk, other_sk;
  uint8_t dialer_kx_seed[32];
  uint8_t victim_ticket[STITCH_TICKET_BYTES];
  uint8_t ticket[FP_TICKETS][STITCH_TICKET_BYTES];
  uint8_t *policy[FP_POLICIES];
  size_t policy_len[FP_POLICIES];
  fp_version v[FP_NV];
  fp_chunk chunk[FP_MAX_CHUNKS];
  size_t n_chunks;
} fx;

static void seed_key(const char *label, stitch_pubkey *pk, stitch_seckey *sk) {
  uint8_t seed[32];
  crypto_generichash(seed, 32, (const uint8_t *)label, strlen(label), NULL, 0);
  CHECK(crypto_sign_seed_keypair(pk->b, sk->b, seed) == 0);
}

static void sign_ticket(uint8_t out[STITCH_TICKET_BYTES],
                        const stitch_pubkey *node, stitch_role role,
                        uint64_t expires, int other_key) {
  stitch_diag d = {{0}};
  stitch_ticket t = {other_key ? fx.other_pk : fx.swarm_pk, *node, role,
                     FP_UNIX0 - 100, expires};
  CHECK(stitch_ticket_sign(&t, other_key ? &fx.other_sk : &fx.swarm_sk, out,
                           &d) == 0);
}

static void sign_policy(int i, uint64_t serial, int open, int revoke_us,
                        int other_key) {
  stitch_policy p = {other_key ? fx.other_pk : fx.swarm_pk, serial, open,
                     revoke_us ? 1 : 0, revoke_us ? &fx.dialer_pk : NULL};
  stitch_diag d = {{0}};
  CHECK(stitch_policy_sign(&p, other_key ? &fx.other_sk : &fx.swarm_sk,
                           &fx.policy[i], &fx.policy_len[i], &d) == 0);
}

/* Version V: BASE -> RES coded with 2^8-symbol blocks in chunks of about
 * FP_CHUNK_TARGET bytes; an anchor when PARENT is NULL. RES_T gives the
 * tensors' bytes for their digests. */
static void build_version(uint64_t v, const stitch_st *base,
                          const stitch_st *res, const fz_tensor *res_t,
                          size_t nt, const fp_version *parent,
                          fp_version *out) {
  stitch_diag d = {{0}};
  stitch_digest base_view, view;
  CHECK(stitch_view_digest(base, &base_view, NULL) == 0);
  CHECK(stitch_view_digest(res, &view, NULL) == 0);
  stitch_delta_opts o = {.block_log2 = 8, .threads = 1};
  o.base_digest = &base_view;
  o.result_digest = &view;
  uint8_t *buf;
  size_t len;
  CHECK(stitch_delta_encode(base, res, &o, &buf, &len, NULL, &d) == 0);
  stitch_delta *dl;
  CHECK(stitch_delta_parse(buf, len, &dl, &d) == 0);
  CHECK(stitch_chunks_from_delta(dl, FP_CHUNK_TARGET, &out->obj, &out->bufs,
                                 &d) == 0);
  CHECK(stitch_delta_count(dl) == nt);
  stitch_mtensor mt[4];
  CHECK(nt <= 4);
  for (size_t i = 0; i < nt; i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(dl, i);
    CHECK(strcmp(t->name, res_t[i].name) == 0);
    mt[i] = (stitch_mtensor){.name = (char *)t->name,
                             .dtype = t->dtype,
                             .ndim = t->ndim,
                             .nbytes = t->nbytes};
    memcpy(mt[i].shape, t->shape, sizeof(t->shape));
    CHECK(stitch_tensor_digest(t->dtype, t->ndim, t->shape, res_t[i].data,
                               t->nbytes, &mt[i].digest) == 0);
  }
  out->obj.kind = parent ? STITCH_OBJ_DELTA : STITCH_OBJ_ANCHOR;
  out->obj.base_view = base_view;
  if (parent != NULL) {
    out->obj.base_version = v - 1;
    out->obj.base_id = parent->id;
  }
  stitch_manifest m = {.swarm = fx.swarm_pk,
                       .version = v,
                       .parent_version = parent ? v - 1 : 0,
                       .time_unix = FP_UNIX0 + v,
                       .view = view,
                       .n_tensors = nt,
                       .tensors = mt,
                       .n_objects = 1,
                       .objects = &out->obj};
  if (parent != NULL)
    m.parent_id = parent->id;
  CHECK(stitch_manifest_sign(&m, &fx.swarm_sk, &out->man, &out->man_len,
                             &out->id, &d) == 0);
  for (uint64_t c = 0; c < out->obj.n_chunks; c++) {
    CHECK(fx.n_chunks < FP_MAX_CHUNKS);
    fp_chunk *k = &fx.chunk[fx.n_chunks++];
    k->h = out->obj.chunks[c].hash;
    k->p = out->bufs[c];
    k->len = (size_t)out->obj.chunks[c].size;
    k->version = v;
    k->idx = c;
  }
  stitch_delta_free(dl);
  free(buf);
}

static void fixture(void) {
  if (fx.ready)
    return;
  CHECK(sodium_init() >= 0);
  seed_key("fuzz_peer swarm", &fx.swarm_pk, &fx.swarm_sk);
  seed_key("fuzz_peer victim", &fx.victim_pk, &fx.victim_sk);
  seed_key("fuzz_peer dialer", &fx.dialer_pk, &fx.dialer_sk);
  seed_key("fuzz_peer other", &fx.other_pk, &fx.other_sk);
  crypto_generichash(fx.dialer_kx_seed, 32, (const uint8_t *)"kx", 2, NULL, 0);
  sign_ticket(fx.victim_ticket, &fx.victim_pk, STITCH_ROLE_NODE, 0, 0);
  sign_ticket(fx.ticket[0], &fx.dialer_pk, STITCH_ROLE_NODE,
              FP_UNIX0 + 3600, 0);
  sign_ticket(fx.ticket[1], &fx.dialer_pk, STITCH_ROLE_NODE, FP_UNIX0 - 1, 0);
  sign_ticket(fx.ticket[2], &fx.other_pk, STITCH_ROLE_NODE, 0, 0);
  sign_ticket(fx.ticket[3], &fx.dialer_pk, STITCH_ROLE_NODE, 0, 1);
  sign_ticket(fx.ticket[4], &fx.dialer_pk, STITCH_ROLE_SEED, 0, 0);
  memcpy(fx.ticket[5], fx.ticket[0], STITCH_TICKET_BYTES);
  fx.ticket[5][40] ^= 4;
  sign_policy(0, 1, 1, 0, 0);
  sign_policy(1, 2, 0, 0, 0);
  sign_policy(2, 3, 0, 1, 0);
  sign_policy(3, 4, 1, 0, 1);

  /* Version 1: a BF16 and an F32 tensor; version 2 steps some of both. */
  static uint8_t w1[2560], b1[256], w2[2560], b2[256];
  fz_rng r = {20261203};
  fz_fill(&r, w1, sizeof(w1));
  fz_fill(&r, b1, sizeof(b1));
  for (size_t i = 1; i < sizeof(w1); i += 2)
    w1[i] &= 0x3f;
  memcpy(w2, w1, sizeof(w1));
  memcpy(b2, b1, sizeof(b1));
  for (size_t i = 0; i < sizeof(w2); i += 2)
    if (fz_next(&r) % 16 == 0)
      w2[i] ^= 1;
  for (size_t i = 0; i < sizeof(b2); i += 4)
    if (fz_next(&r) % 4 == 0)
      b2[i] ^= 3;
  fz_tensor t1[2] = {{"b", STITCH_DT_F32, 1, {64}, b1},
                     {"w", STITCH_DT_BF16, 2, {32, 40}, w1}};
  fz_tensor t2[2] = {{"b", STITCH_DT_F32, 1, {64}, b2},
                     {"w", STITCH_DT_BF16, 2, {32, 40}, w2}};
  static const uint8_t empty_buf[10] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  size_t l1 = 0, l2 = 0; /* set by fz_st_build; gcc -O2 cannot tell */
  uint8_t *s1 = fz_st_build(t1, 2, NULL, &l1), *s2 = fz_st_build(t2, 2, NULL,
                                                                 &l2);
  CHECK(s1 != NULL && s2 != NULL);
  stitch_st *e, *st1, *st2;
  stitch_diag d = {{0}};
  CHECK(stitch_st_parse(empty_buf, sizeof(empty_buf), &e, &d) == 0);
  CHECK(stitch_st_parse(s1, l1, &st1, &d) == 0);
  CHECK(stitch_st_parse(s2, l2, &st2, &d) == 0);
  build_version(1, e, st1, t1, 2, NULL, &fx.v[0]);
  build_version(2, st1, st2, t2, 2, &fx.v[0], &fx.v[1]);
  CHECK(fx.v[0].obj.n_chunks >= 2 && fx.v[1].obj.n_chunks >= 1);
  if (getenv("STITCH_FUZZ_PEER_LOG") != NULL)
    fprintf(stderr, "fuzz_peer: version 1 in %llu chunks, 2 in %llu\n",
            (unsigned long long)fx.v[0].obj.n_chunks,
            (unsigned long long)fx.v[1].obj.n_chunks);
  stitch_st_free(e);
  stitch_st_free(st1);
  stitch_st_free(st2);
  free(s1);
  free(s2);
  fx.ready = 1;
}

static const fp_chunk *find_chunk(const stitch_digest *h) {
  for (size_t i = 0; i < fx.n_chunks; i++)
    if (memcmp(fx.chunk[i].h.b, h->b, 32) == 0)
      return &fx.chunk[i];
  return NULL;
}

static const fp_chunk *chunk_at(uint64_t version, uint64_t idx) {
  for (size_t i = 0; i < fx.n_chunks; i++)
    if (fx.chunk[i].version == version && fx.chunk[i].idx == idx)
      return &fx.chunk[i];
  return NULL;
}

static uint64_t pick_version(uint8_t sel) {
  return sel % 4 < 3 ? (uint64_t)sel % 4 + 1 : (uint64_t)sel / 4;
}

static uint64_t n_chunks_of(uint64_t version) {
  return version >= 1 && version <= FP_NV ? fx.v[version - 1].obj.n_chunks
                                          : 4;
}

/* ---- The victim's host ------------------------------------------------ */

typedef struct fp_host {
  uint64_t rng;
  uint64_t now_ms;
  uint8_t held[FP_MAX_CHUNKS];
  int reads; /* chunk_read buffers not yet released */
  int log;
} fp_host;

static uint64_t h_random(void *u) {
  fz_rng r = {((fp_host *)u)->rng++};
  return fz_next(&r);
}

static int h_has(void *u, const stitch_digest *h) {
  const fp_chunk *c = find_chunk(h);
  return c != NULL && ((fp_host *)u)->held[c - fx.chunk];
}

static int h_read(void *u, const stitch_digest *h, const uint8_t **buf,
                  size_t *len) {
  fp_host *o = u;
  const fp_chunk *c = find_chunk(h);
  if (c == NULL || !o->held[c - fx.chunk])
    return STITCH_ENOTFOUND;
  *buf = c->p;
  *len = c->len;
  o->reads++;
  return 0;
}

static void h_release(void *u, const uint8_t *buf, size_t len) {
  fp_host *o = u;
  const fp_chunk *c = NULL;
  for (size_t i = 0; i < fx.n_chunks && c == NULL; i++)
    if (fx.chunk[i].p == buf)
      c = &fx.chunk[i];
  CHECK(c != NULL && c->len == len && o->reads > 0);
  o->reads--;
}

static int h_write(void *u, const stitch_digest *h, const uint8_t *buf,
                   size_t len) {
  const fp_chunk *c = find_chunk(h);
  /* The core hashed it: only the table's chunks can get here. */
  CHECK(c != NULL && c->len == len && memcmp(c->p, buf, len) == 0);
  ((fp_host *)u)->held[c - fx.chunk] = 1;
  return 0;
}

static int h_manifest(void *u, const uint8_t *buf, size_t len) {
  (void)u;
  (void)buf;
  (void)len;
  return 0;
}

static void h_log(void *u, const char *line) {
  if (((fp_host *)u)->log)
    fprintf(stderr, "victim: %s\n", line);
}

static uint64_t h_unix(void *u) {
  return FP_UNIX0 + ((fp_host *)u)->now_ms / 1000;
}

static int h_policy(void *u, const uint8_t *buf, size_t len) {
  (void)u;
  (void)buf;
  (void)len;
  return 0;
}

/* ---- The dialer ------------------------------------------------------- */

#define FP_MAX_REQ 64

typedef struct fp {
  stitch_swarm *s;
  fp_host host;
  uint32_t id;
  int seed_victim, cipher_none;
  int nated; /* the victim and we advertise no address (FP_HS_GOOD2) */
  int refuse_expected; /* our AUTH must not be admitted */
  chan ch;           /* our keys; records both ways */
  dbuf plain;        /* our frames, not yet sealed */
  dbuf out;          /* bytes for peer_recv */
  wire_reader rd;    /* the victim's frames */
  wire_msg *m;
  int got_hello, got_auth, sent_auth;
  uint8_t victim_kx[WIRE_KX_BYTES];
  int dropped, drained_after_drop, close_seen, closed;
  /* The victim's REQUESTs, oldest first. */
  uint64_t req_v[FP_MAX_REQ], req_c[FP_MAX_REQ];
  uint32_t req_o[FP_MAX_REQ];
  size_t n_req;
} fp;

static void check_rc(int rc) {
  CHECK(rc <= 0);
  if (rc < 0)
    CHECK(strcmp(stitch_errname(rc), "EUNKNOWN") != 0);
}

static void victim_frame(fp *f, int type, const uint8_t *body, size_t len) {
  stitch_diag d = {{0}};
  wire_msg *m = f->m;
  if (wire_decode(type, body, len, m, &d) != 0) {
    fprintf(stderr, "fuzz_peer: the victim sent a frame (type %d) that does "
                    "not decode: %s\n", type, d.msg);
    CHECK(0);
  }
  CHECK(f->got_hello == (type != WIRE_HELLO));
  if (type == WIRE_HELLO) {
    CHECK(m->proto == WIRE_PROTO);
    memcpy(f->victim_kx, m->kx, WIRE_KX_BYTES);
    f->got_hello = 1;
    CHECK(chan_start(&f->ch, 1, m->kx, &d) == 0);
    if (f->cipher_none)
      f->ch.on = 0;
    return;
  }
  CHECK(f->got_auth == (type != WIRE_AUTH));
  if (type == WIRE_AUTH) {
    /* A stranger learns nothing: its AUTH only answers ours. */
    CHECK(f->sent_auth && !f->refuse_expected);
    CHECK(memcmp(m->swarm.b, fx.swarm_pk.b, 32) == 0);
    CHECK(memcmp(m->node.b,
                 f->seed_victim ? fx.swarm_pk.b : fx.victim_pk.b, 32) == 0);
    uint8_t in[WIRE_AUTH_INPUT];
    wire_auth_input(1, f->ch.pk, f->victim_kx, in);
    CHECK(crypto_sign_verify_detached(m->sig, in, sizeof(in), m->node.b) ==
          0);
    f->got_auth = 1;
    return;
  }
  if (type == WIRE_REQUEST && f->n_req < FP_MAX_REQ) {
    f->req_v[f->n_req] = m->version;
    f->req_o[f->n_req] = m->object;
    f->req_c[f->n_req++] = m->chunk;
  }
}

/* Takes the victim's bytes at *BUF toward its next frame, and checks that
 * frame when it is whole. The reader takes at most a frame's bytes. */
static void victim_feed(fp *f, const uint8_t **buf, size_t *len) {
  size_t used;
  int type;
  const uint8_t *body;
  size_t blen;
  stitch_diag d = {{0}};
  CHECK(wire_reader_feed(&f->rd, *buf, *len, &used, &type, &body, &blen,
                         &d) == 0);
  *buf += used;
  *len -= used;
  if (type > 0)
    victim_frame(f, type, body, blen);
  else
    CHECK(*len == 0);
}

static void victim_frames(fp *f, const uint8_t *buf, size_t len) {
  while (len > 0)
    victim_feed(f, &buf, &len);
}

/* Bytes the victim sent. */
static void victim_bytes(fp *f, const uint8_t *buf, size_t len) {
  while (len > 0) {
    if (!f->ch.on) {
      /* In clear: its HELLO (and the frames after under cipher_none);
       * once HELLO is in, the rest goes to the records. */
      victim_feed(f, &buf, &len);
      continue;
    }
    size_t used;
    const uint8_t *plain;
    size_t plen;
    stitch_diag d = {{0}};
    int rc = chan_open(&f->ch, buf, len, &used, &plain, &plen, &d);
    if (rc != 0)
      fprintf(stderr, "fuzz_peer: the victim's record: %s\n", d.msg);
    CHECK(rc == 0);
    buf += used;
    len -= used;
    if (plen > 0)
      victim_frames(f, plain, plen);
  }
}

static void on_apply(fp *f, const stitch_swarm_action *a) {
  CHECK(a->version >= 1 && a->version <= FP_NV && a->object == 0);
  const fp_version *v = &fx.v[a->version - 1];
  for (uint64_t c = 0; c < v->obj.n_chunks; c++)
    CHECK(f->host.held[chunk_at(a->version, c) - fx.chunk]);
  check_rc(stitch_swarm_applied(f->s, a->version, &v->id, f->host.now_ms));
}

/* Everything the victim wants to send, and its actions. */
static void drain(fp *f) {
  for (int again = 1; again;) {
    again = 0;
    for (int guard = 0;; guard++) {
      CHECK(guard < 100000);
      const uint8_t *b;
      size_t n, k;
      const uint32_t *ids = stitch_swarm_sendable(f->s, &k);
      int listed = 0;
      for (size_t i = 0; i < k; i++)
        listed |= ids[i] == f->id;
      stitch_swarm_peer_pending(f->s, f->id, &b, &n);
      CHECK(listed || n == 0); /* what is not listed has nothing */
      if (n == 0)
        break;
      CHECK(!f->closed);
      CHECK(!f->drained_after_drop); /* dropped: nothing new */
      victim_bytes(f, b, n);
      stitch_swarm_peer_sent(f->s, f->id, n);
    }
    stitch_swarm_action a;
    for (stitch_swarm_next_action(f->s, &a); a.kind != STITCH_SWARM_NONE;
         stitch_swarm_next_action(f->s, &a)) {
      if (a.kind == STITCH_SWARM_CLOSE) {
        CHECK(a.peer == f->id && !f->closed);
        f->close_seen = 1;
        f->dropped = 1;
      } else if (a.kind == STITCH_SWARM_APPLY) {
        on_apply(f, &a);
        again = 1;
      }
    }
  }
  if (f->dropped)
    f->drained_after_drop = 1;
}

/* Feeds LEN bytes to peer_recv in pieces of PIECE (0: all at once). */
static void feed(fp *f, const uint8_t *buf, size_t len, size_t piece) {
  if (f->closed || len == 0)
    return;
  if (piece == 0 || f->dropped)
    piece = len;
  for (size_t off = 0; off < len; off += piece) {
    size_t n = len - off < piece ? len - off : piece;
    int was = f->dropped;
    int rc = stitch_swarm_peer_recv(f->s, f->id, buf + off, n,
                                    f->host.now_ms);
    check_rc(rc);
    CHECK(!was || rc != 0); /* a dropped peer stays dropped */
    if (rc != 0)
      f->dropped = 1;
    drain(f);
    if (rc != 0)
      CHECK(f->close_seen);
    if (f->dropped)
      piece = len;
  }
}

/* Seals what is queued into records of REC bytes (in clear under
 * cipher_none or before the keys) and feeds it in pieces of PIECE. */
static void flush(fp *f, size_t rec, size_t piece) {
  for (size_t off = 0; off < f->plain.len;) {
    size_t n = f->plain.len - off < rec ? f->plain.len - off : rec;
    if (f->ch.on)
      CHECK(chan_seal(&f->ch, f->plain.p + off, n, &f->out) == 0);
    else
      CHECK(dbuf_put(&f->out, f->plain.p + off, n) == 0);
    off += n;
  }
  f->plain.len = 0;
  feed(f, f->out.p, f->out.len, piece);
  f->out.len = 0;
}

static void queue(fp *f, const wire_msg *m) {
  CHECK(wire_encode(&f->plain, m) == 0);
}

static void tick(fp *f, uint64_t dt) {
  f->host.now_ms += dt;
  check_rc(stitch_swarm_tick(f->s, f->host.now_ms));
  drain(f);
}

/* ---- The input --------------------------------------------------------- */

typedef struct in {
  const uint8_t *p;
  size_t n, pos;
} in;

static int get(in *x, uint8_t *b) {
  if (x->pos >= x->n)
    return 0;
  *b = x->p[x->pos++];
  return 1;
}

static void msg_reset(wire_msg *m, wire_type t) {
  memset(m, 0, sizeof(*m));
  m->type = t;
}

static void op_chunk(fp *f, wire_msg *m, uint8_t sel, uint8_t ci,
                     uint8_t how) {
  uint64_t v = pick_version(sel & 0x7f), c = ci;
  uint32_t o = 0;
  if ((sel & 0x80) && f->n_req > 0) {
    v = f->req_v[0];
    o = f->req_o[0];
    c = f->req_c[0];
    memmove(f->req_v, f->req_v + 1, --f->n_req * sizeof(f->req_v[0]));
    memmove(f->req_o, f->req_o + 1, f->n_req * sizeof(f->req_o[0]));
    memmove(f->req_c, f->req_c + 1, f->n_req * sizeof(f->req_c[0]));
  } else if (v >= 1 && v <= FP_NV) {
    c %= n_chunks_of(v);
  }
  const fp_chunk *k = chunk_at(v, c);
  if (how % 4 == 2)
    k = chunk_at(v, c + 1);
  if (k == NULL)
    k = &fx.chunk[ci % fx.n_chunks];
  uint8_t copy[4096];
  size_t len = k->len;
  CHECK(len <= sizeof(copy));
  memcpy(copy, k->p, len);
  if (how % 4 == 1)
    copy[(size_t)how * 7 % len] ^= (uint8_t)(how | 1);
  if (how % 4 == 3)
    len--;
  msg_reset(m, WIRE_CHUNK);
  m->version = v;
  m->object = o;
  m->chunk = c;
  m->data = copy;
  m->data_len = len;
  if (len > 0)
    queue(f, m);
}

static void run_op(fp *f, in *x, uint8_t op) {
  wire_msg *m = f->m;
  uint8_t a = 0, b = 0, c = 0;
  switch (op % FP_OP_COUNT) {
  case FP_OP_FRAME: {
    if (!get(x, &a) || !get(x, &b) || !get(x, &c))
      return;
    size_t len = (size_t)b | (size_t)c << 8;
    if (len > x->n - x->pos)
      len = x->n - x->pos;
    uint8_t head[5] = {(uint8_t)(len + 1), (uint8_t)((len + 1) >> 8),
                       (uint8_t)((len + 1) >> 16), 0, a};
    CHECK(dbuf_put(&f->plain, head, 5) == 0);
    CHECK(dbuf_put(&f->plain, x->p + x->pos, len) == 0);
    x->pos += len;
    break;
  }
  case FP_OP_RAW: {
    if (!get(x, &a))
      return;
    size_t len = a;
    if (len > x->n - x->pos)
      len = x->n - x->pos;
    flush(f, CHAN_REC_MAX, 0);
    feed(f, x->p + x->pos, len, 0);
    x->pos += len;
    break;
  }
  case FP_OP_FLUSH:
    if (!get(x, &a) || !get(x, &b))
      return;
    flush(f, a == 255 ? CHAN_REC_MAX : (size_t)a * 64 + 1,
          (size_t)b * b + 1);
    break;
  case FP_OP_TICK:
    if (!get(x, &a))
      return;
    tick(f, ((uint64_t)a + 1) * (a + 1) * 4);
    break;
  case FP_OP_MANIFEST: {
    if (!get(x, &a))
      return;
    const fp_version *v = &fx.v[a % 2];
    uint8_t *copy = malloc(v->man_len);
    CHECK(copy != NULL);
    memcpy(copy, v->man, v->man_len);
    if (a & 2)
      copy[(size_t)(a / 4) * 3 % v->man_len] ^= 0x10;
    msg_reset(m, WIRE_MANIFEST);
    m->data = copy;
    m->data_len = v->man_len;
    queue(f, m);
    free(copy);
    break;
  }
  case FP_OP_BITFIELD: {
    if (!get(x, &a) || !get(x, &b))
      return;
    uint8_t bits[64];
    uint64_t v = pick_version(a);
    uint64_t n = n_chunks_of(v) + (b != 0xff && (b & 0x80));
    CHECK(n <= 8 * sizeof(bits));
    memset(bits, b == 0xff ? 0xff : (b & 0x7f), sizeof(bits));
    if (n % 8) /* the encoder sends no bit past nbits */
      bits[n / 8] &= (uint8_t)((1u << (n % 8)) - 1);
    msg_reset(m, WIRE_BITFIELD);
    m->version = v;
    m->object = a / 16 % 2;
    m->nbits = n;
    m->data = bits;
    m->data_len = (size_t)(n + 7) / 8;
    queue(f, m);
    break;
  }
  case FP_OP_HAVE:
  case FP_OP_REQUEST:
    if (!get(x, &a) || !get(x, &b))
      return;
    msg_reset(m, op % FP_OP_COUNT == FP_OP_HAVE ? WIRE_HAVE : WIRE_REQUEST);
    m->version = pick_version(a);
    m->object = a / 64;
    m->chunk = b;
    queue(f, m);
    break;
  case FP_OP_CHUNK:
    if (!get(x, &a) || !get(x, &b) || !get(x, &c))
      return;
    op_chunk(f, m, a, b, c);
    break;
  case FP_OP_SMALL: {
    static const wire_type kinds[6] = {WIRE_CANCEL,   WIRE_REJECT,
                                       WIRE_CROSSING, WIRE_BID,
                                       WIRE_PING,     WIRE_REACH};
    if (!get(x, &a) || !get(x, &b) || !get(x, &c))
      return;
    msg_reset(m, kinds[a % 6]);
    m->version = pick_version(b);
    m->object = b / 64;
    m->chunk = c;
    m->node = (a / 6) % 2 ? fx.other_pk : fx.dialer_pk;
    if (m->type == WIRE_REACH) {
      m->n_reach = b % (WIRE_MAX_REACH + 1);
      for (size_t i = 0; i < m->n_reach; i++)
        snprintf(m->reach[i], sizeof(m->reach[i]), "r%u",
                 (unsigned)((c + i) % 40));
    }
    queue(f, m);
    break;
  }
  case FP_OP_POLICY: {
    if (!get(x, &a))
      return;
    msg_reset(m, WIRE_POLICY);
    m->data = fx.policy[a % FP_POLICIES];
    m->data_len = fx.policy_len[a % FP_POLICIES];
    queue(f, m);
    break;
  }
  case FP_OP_PUNCH: {
    if (!get(x, &a) || !get(x, &b))
      return;
    msg_reset(m, WIRE_PUNCH);
    m->punch = a % WIRE_PUNCH_KINDS;
    const stitch_pubkey *who[3] = {&fx.dialer_pk, &fx.other_pk,
                                   &fx.victim_pk};
    if (b % 4 > 0)
      m->node = *who[b % 4 - 1];
    static const char *const at[3] = {"", "10.0.0.9:7", "10.9.8.7:50000"};
    snprintf(m->addr, sizeof(m->addr), "%s", at[b / 4 % 3]);
    queue(f, m);
    break;
  }
  default: { /* FP_OP_PEERS */
    if (!get(x, &a))
      return;
    msg_reset(m, WIRE_PEERS);
    m->n_peers = a % (WIRE_MAX_PEERS_MSG + 1);
    for (size_t i = 0; i < m->n_peers; i++) {
      uint8_t y = 0;
      get(x, &y);
      snprintf(m->peer_addr[i], sizeof(m->peer_addr[i]), "10.0.%u.%u:7000",
               (unsigned)(y >> 4), (unsigned)(y & 15));
      snprintf(m->peer_region[i], sizeof(m->peer_region[i]), "%s",
               y & 1 ? "eu" : "us");
    }
    queue(f, m);
    break;
  }
  }
}

/* Our AUTH (the dialer's) as the header asks. */
static void queue_auth(fp *f, int hs, uint8_t variant, int far) {
  wire_msg *m = f->m;
  msg_reset(m, WIRE_AUTH);
  m->swarm = fx.swarm_pk;
  m->node = fx.dialer_pk;
  const stitch_seckey *sk = &fx.dialer_sk;
  const uint8_t *ticket = fx.ticket[0];
  size_t ticket_len = STITCH_TICKET_BYTES;
  int bad_sig = 0;
  if (hs == FP_HS_NO_TICKET) {
    ticket = NULL;
    ticket_len = 0;
  } else if (hs == FP_HS_BAD_TICKET) {
    static const int pick[6] = {1, 2, 3, 4, 0, 5};
    ticket = fx.ticket[pick[variant % 6]];
    if (variant % 6 == 4)
      ticket_len = 100;
  } else if (hs == FP_HS_BAD_AUTH) {
    switch (variant % 6) {
    case 0:
      m->swarm = fx.other_pk;
      break;
    case 1:
      bad_sig = 1;
      break;
    case 2:
      m->node = fx.victim_pk;
      sk = &fx.victim_sk;
      break;
    case 3: /* the trainer itself: no ticket */
      m->node = fx.swarm_pk;
      sk = &fx.swarm_sk;
      ticket = NULL;
      ticket_len = 0;
      break;
    default:
      break;
    }
  }
  uint8_t inp[WIRE_AUTH_INPUT];
  wire_auth_input(0, f->ch.pk, f->victim_kx, inp);
  crypto_sign_detached(m->sig, NULL, inp, sizeof(inp), sk->b);
  if (bad_sig)
    m->sig[5] ^= 1;
  m->data = ticket;
  m->data_len = ticket_len == 100 ? STITCH_TICKET_BYTES : ticket_len;
  snprintf(m->listen, sizeof(m->listen), "%s",
           f->nated ? "" : "10.9.8.7:7000");
  snprintf(m->region, sizeof(m->region), "%s", far ? "us" : "eu");
  size_t at = f->plain.len;
  queue(f, m);
  if (ticket_len == 100) {
    /* The encoder refuses such a ticket: cut it in the frame, whose bin8
     * header follows the signature's. */
    uint8_t *fr = f->plain.p + at;
    size_t t = 5 + 1 + 3 * 2 + 2 * STITCH_PUBKEY_BYTES + STITCH_SIG_BYTES;
    CHECK(fr[t] == 0xc4 && fr[t + 1] == STITCH_TICKET_BYTES);
    fr[t + 1] = 100;
    memmove(fr + t + 2 + 100, fr + t + 2 + STITCH_TICKET_BYTES,
            f->plain.len - at - (t + 2 + STITCH_TICKET_BYTES));
    f->plain.len -= STITCH_TICKET_BYTES - 100;
    uint32_t fl = (uint32_t)(f->plain.len - at - 4);
    for (int i = 0; i < 4; i++)
      fr[i] = (uint8_t)(fl >> (8 * i));
  }
  f->sent_auth = 1;
  if (hs == FP_HS_BAD_AUTH && variant % 6 == 4)
    queue(f, m); /* twice */
  if (hs == FP_HS_BAD_AUTH && variant % 6 == 5) {
    msg_reset(m, WIRE_HELLO);
    m->proto = WIRE_PROTO;
    memcpy(m->kx, f->ch.pk, WIRE_KX_BYTES);
    queue(f, m);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4)
    return 0;
  fixture();
  in x = {data, size, 4};
  uint8_t mode = data[0], held = data[1], sizes = data[2], variant = data[3];
  int hs = mode & 7;
  fp f;
  memset(&f, 0, sizeof(f));
  f.m = malloc(sizeof(*f.m));
  CHECK(f.m != NULL);
  f.plain.max = f.out.max = 64u << 20;
  wire_reader_init(&f.rd);
  f.host.rng = 1;
  f.host.now_ms = 1000;
  f.host.log = getenv("STITCH_FUZZ_PEER_LOG") != NULL;
  f.seed_victim = (mode & FP_F_SEED) != 0;

  stitch_swarm_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.swarm = fx.swarm_pk;
  f.nated = hs == FP_HS_GOOD2 && (variant & 0x80);
  snprintf(cfg.listen, sizeof(cfg.listen), "%s",
           f.nated ? "" : "10.1.1.1:7000");
  snprintf(cfg.region, sizeof(cfg.region), "eu");
  cfg.cipher_none = (mode & FP_F_CIPHER_NONE) != 0;
  if (f.seed_victim) {
    cfg.seed = 1;
    cfg.node_pk = fx.swarm_pk;
    cfg.node_sk = fx.swarm_sk;
    memset(f.host.held, 1, sizeof(f.host.held));
  } else {
    cfg.node_pk = fx.victim_pk;
    cfg.node_sk = fx.victim_sk;
    memcpy(cfg.ticket, fx.victim_ticket, STITCH_TICKET_BYTES);
    cfg.ticket_len = STITCH_TICKET_BYTES;
    for (size_t i = 0; i < fx.n_chunks; i++)
      f.host.held[i] = (held >> (i % 8)) & 1;
  }
  stitch_swarm_io io = {.user = &f.host,
                        .random = h_random,
                        .chunk_has = h_has,
                        .chunk_read = h_read,
                        .chunk_release = h_release,
                        .chunk_write = h_write,
                        .manifest_write = h_manifest,
                        .log = h_log,
                        .unix_time = h_unix,
                        .policy_write = h_policy};
  stitch_diag d = {{0}};
  CHECK(stitch_swarm_new(&cfg, &io, &f.s, &d) == 0);
  if (mode & FP_F_OPEN)
    CHECK(stitch_swarm_set_policy(f.s, fx.policy[0], fx.policy_len[0],
                                  f.host.now_ms, &d) == 0);
  for (int v = 0; v < FP_NV; v++)
    if (f.seed_victim || (v == 0 && (mode & FP_F_HAS_V1)))
      CHECK(stitch_swarm_add_manifest(f.s, fx.v[v].man, fx.v[v].man_len,
                                      f.host.now_ms, &d) == 0);

  chan_keypair(&f.ch, fx.dialer_kx_seed);
  f.cipher_none = cfg.cipher_none;
  CHECK(stitch_swarm_peer_open(f.s, f.host.now_ms, 0, "10.9.8.7:50000",
                               &f.id) == 0);
  drain(&f);
  CHECK(f.got_hello); /* the victim speaks first */

  size_t rec = (size_t)(sizes % 64) * 4 + 1;
  size_t piece = sizes / 64 == 3 ? 0 : (size_t)(sizes / 64) * 7 + 1;
  if (hs == FP_HS_RAW) {
    feed(&f, data + 4, size - 4, piece);
  } else {
    wire_msg *m = f.m;
    msg_reset(m, WIRE_HELLO);
    m->proto = WIRE_PROTO;
    if (hs != FP_HS_ZERO_KX)
      memcpy(m->kx, f.ch.pk, WIRE_KX_BYTES);
    dbuf hello = {NULL, 0, 0, 1024};
    CHECK(wire_encode(&hello, m) == 0);
    feed(&f, hello.p, hello.len, piece);
    dbuf_free(&hello);
    if (hs == FP_HS_RAW_HELLO) {
      feed(&f, data + 4, size - 4, piece);
    } else {
      int v6 = variant % 6;
      f.refuse_expected =
          hs == FP_HS_ZERO_KX ||
          (hs == FP_HS_NO_TICKET && !(mode & FP_F_OPEN)) ||
          (hs == FP_HS_BAD_TICKET && v6 != 3) ||
          (hs == FP_HS_BAD_AUTH && v6 <= 2);
      queue_auth(&f, hs, variant, (mode & FP_F_FAR) != 0);
      flush(&f, rec, piece);
      uint8_t op;
      while (get(&x, &op))
        run_op(&f, &x, op);
      flush(&f, CHAN_REC_MAX, 0);
    }
  }
  tick(&f, 100);
  if (f.dropped) {
    CHECK(f.close_seen);
    uint8_t z = 0;
    CHECK(stitch_swarm_peer_recv(f.s, f.id, &z, 1, f.host.now_ms) != 0);
  }
  stitch_swarm_peer_close(f.s, f.id, f.host.now_ms);
  f.closed = 1;
  uint8_t z = 0;
  CHECK(stitch_swarm_peer_recv(f.s, f.id, &z, 1, f.host.now_ms) ==
        STITCH_EINVAL);
  tick(&f, 1000);
  stitch_swarm_free(f.s);
  CHECK(f.host.reads == 0);
  chan_free(&f.ch);
  wire_reader_free(&f.rd);
  dbuf_free(&f.plain);
  dbuf_free(&f.out);
  free(f.m);
  return 0;
}
