/* test_manifest.c: signed manifests (proto/manifest.md): round trips,
 * every refusal, random manifests. Keys are in test_keys.c and the
 * msgpack pre-scan in test_msgpack_check.c.
 *
 * The manifests a reader must refuse cannot come from stitch_manifest_sign,
 * which runs the same rules, so this file carries its own small encoder of
 * the body, written from the spec and not from msgpack-c (enc_body), and
 * signs its output by hand (wrap). That it produces the library's bytes
 * for valid manifests is itself checked: two implementations of the spec
 * agree. */
#define _GNU_SOURCE /* memmem */
#include "test.h"

#include "stitch.h"

#include "codec/delta_internal.h"
#include "common/msgpack_check.h"

#include <sodium.h>

static test_rng rng;
static stitch_pubkey pk_a, pk_b;
static stitch_seckey sk_a, sk_b;

/* ---- an independent writer of the wire format --------------------------- */

typedef struct wbuf {
  uint8_t *p;
  size_t len, cap;
} wbuf;

static void w_put(wbuf *w, const void *src, size_t n) {
  if (w->len + n > w->cap) {
    w->cap = (w->len + n) * 2 + 64;
    w->p = realloc(w->p, w->cap);
    ASSERT(w->p != NULL);
  }
  if (n > 0)
    memcpy(w->p + w->len, src, n);
  w->len += n;
}

static void w_byte(wbuf *w, uint8_t b) { w_put(w, &b, 1); }

static void w_be(wbuf *w, uint64_t v, unsigned n) {
  for (unsigned i = n; i-- > 0;)
    w_byte(w, (uint8_t)(v >> (8 * i)));
}

/* The shortest header: a fix form up to FIXMAX (FIX 0: none), then the 8-,
 * 16- and 32-bit forms (B8 0: none). */
static void w_head(wbuf *w, uint8_t fix, uint64_t fixmax, uint8_t b8,
                   uint8_t b16, uint8_t b32, uint64_t n) {
  if (fix != 0 && n <= fixmax)
    w_byte(w, (uint8_t)(fix | n));
  else if (b8 != 0 && n < 256)
    w_byte(w, b8), w_be(w, n, 1);
  else if (n < 65536)
    w_byte(w, b16), w_be(w, n, 2);
  else
    w_byte(w, b32), w_be(w, n, 4);
}

static void w_uint(wbuf *w, uint64_t v) {
  if (v < 128)
    w_byte(w, (uint8_t)v);
  else if (v < 256)
    w_byte(w, 0xcc), w_be(w, v, 1);
  else if (v < 65536)
    w_byte(w, 0xcd), w_be(w, v, 2);
  else if (v < (1ull << 32))
    w_byte(w, 0xce), w_be(w, v, 4);
  else
    w_byte(w, 0xcf), w_be(w, v, 8);
}

static void w_array(wbuf *w, uint64_t n) {
  w_head(w, 0x90, 15, 0, 0xdc, 0xdd, n);
}
static void w_map(wbuf *w, uint64_t n) {
  w_head(w, 0x80, 15, 0, 0xde, 0xdf, n);
}
static void w_str(wbuf *w, const char *s) {
  w_head(w, 0xa0, 31, 0xd9, 0xda, 0xdb, strlen(s));
  w_put(w, s, strlen(s));
}
static void w_bin(wbuf *w, const void *p, size_t n) {
  w_head(w, 0, 0, 0xc4, 0xc5, 0xc6, n);
  w_put(w, p, n);
}

/* Ways to spoil a body's keys (enc_body). */
enum { V_OK, V_UNKNOWN_KEY, V_MISSING_KEY, V_DUP_KEY, V_FLOAT_TIME, V_INT_KEY };

static void enc_body(const stitch_manifest *m, int variant, wbuf *w) {
  w_map(w, variant == V_UNKNOWN_KEY || variant == V_DUP_KEY ? 10
           : variant == V_MISSING_KEY                       ? 8
                                                            : 9);
  w_str(w, "swarm");
  w_bin(w, m->swarm.b, 32);
  w_str(w, "version");
  w_uint(w, m->version);
  if (variant == V_DUP_KEY) {
    w_str(w, "version");
    w_uint(w, m->version);
  }
  w_str(w, "parent");
  w_uint(w, m->parent_version);
  w_str(w, "parent_id");
  w_bin(w, m->parent_id.b, 32);
  if (variant != V_MISSING_KEY) {
    if (variant == V_INT_KEY)
      w_uint(w, 4);
    else
      w_str(w, "time");
    if (variant == V_FLOAT_TIME) {
      w_byte(w, 0xcb);
      w_be(w, 0x4000000000000000ull, 8);
    } else {
      w_uint(w, m->time_unix);
    }
  }
  w_str(w, "view");
  w_bin(w, m->view.b, 32);
  w_str(w, "meta");
  if (m->meta != NULL)
    w_str(w, m->meta);
  else
    w_byte(w, 0xc0);
  w_str(w, "tensors");
  w_array(w, m->n_tensors);
  for (uint64_t i = 0; i < m->n_tensors; i++) {
    const stitch_mtensor *t = &m->tensors[i];
    w_array(w, 4);
    w_str(w, t->name);
    w_uint(w, (uint64_t)t->dtype);
    w_array(w, (uint64_t)t->ndim);
    for (int k = 0; k < t->ndim; k++) /* ndim may be too large, on purpose */
      w_uint(w, k < STITCH_MAX_DIMS ? t->shape[k] : 1);
    w_bin(w, t->digest.b, 32);
  }
  w_str(w, "objects");
  w_array(w, m->n_objects);
  for (uint64_t oi = 0; oi < m->n_objects; oi++) {
    const stitch_object *o = &m->objects[oi];
    w_array(w, 7);
    w_uint(w, (uint64_t)o->kind);
    w_uint(w, o->base_version);
    w_bin(w, o->base_id.b, 32);
    w_bin(w, o->base_view.b, 32);
    w_uint(w, o->block_log2);
    w_bin(w, o->tflags, (size_t)m->n_tensors);
    w_array(w, o->n_chunks);
    for (uint64_t c = 0; c < o->n_chunks; c++) {
      w_array(w, 4);
      w_bin(w, o->chunks[c].hash.b, 32);
      w_uint(w, o->chunks[c].size);
      w_uint(w, o->chunks[c].first_block);
      w_uint(w, o->chunks[c].n_blocks);
    }
  }
  if (variant == V_UNKNOWN_KEY) {
    w_str(w, "extra");
    w_byte(w, 0xc0);
  }
}

/* [format, body, Ed25519(sk, "stitch-manifest-v1" 0x00 body)]. */
static wbuf wrap(const uint8_t *body, size_t len, const stitch_seckey *sk,
                 uint64_t format) {
  static const char dom[] = "stitch-manifest-v1";
  uint8_t *msg = malloc(sizeof(dom) + len), sig[64];
  ASSERT(msg != NULL);
  memcpy(msg, dom, sizeof(dom)); /* with its 0 byte */
  if (len > 0)
    memcpy(msg + sizeof(dom), body, len);
  crypto_sign_detached(sig, NULL, msg, sizeof(dom) + len, sk->b);
  free(msg);
  wbuf w = {0};
  w_array(&w, 3);
  w_uint(&w, format);
  w_bin(&w, body, len);
  w_bin(&w, sig, 64);
  return w;
}

static wbuf enc_signed(const stitch_manifest *m, int variant,
                       const stitch_seckey *sk) {
  wbuf body = {0};
  enc_body(m, variant, &body);
  wbuf w = wrap(body.p, body.len, sk, 1);
  free(body.p);
  return w;
}

/* The body inside a signed manifest (format, body, signature). */
static void split(const uint8_t *buf, size_t len, const uint8_t **body,
                  size_t *body_len) {
  msgpack_check_hdr h;
  size_t pos = 0;
  ASSERT_OK(msgpack_check_head(buf, len, pos, &h, NULL), (stitch_diag){{0}});
  pos += h.size;
  ASSERT_OK(msgpack_check_head(buf, len, pos, &h, NULL), (stitch_diag){{0}});
  pos += h.size;
  ASSERT_OK(msgpack_check_head(buf, len, pos, &h, NULL), (stitch_diag){{0}});
  ASSERT_EQ(h.kind, MSGPACK_CHECK_BIN);
  *body = buf + pos + h.size;
  *body_len = (size_t)h.n;
}

/* ---- a fixed manifest ---------------------------------------------------- */

/* Version 7 of swarm A: a delta from 6, an anchor, a cumulative from 3,
 * over four tensors. Built with the test's own storage, as the publisher
 * builds its manifests; never passed to stitch_manifest_free. */
typedef struct fixture {
  stitch_manifest m;
  stitch_mtensor t[4];
  char names[4][16];
  stitch_object o[3];
  uint8_t tflags[3][4];
  stitch_chunk_ref ch[3][3];
  char meta[32];
} fixture;

static void fill(uint8_t *p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)(seed * 31 + i * 7 + 1);
}

static void fx_init(fixture *f) {
  memset(f, 0, sizeof(*f));
  stitch_manifest *m = &f->m;
  m->swarm = pk_a;
  m->version = 7;
  m->parent_version = 6;
  fill(m->parent_id.b, 32, 1);
  m->time_unix = 1767225600;
  fill(m->view.b, 32, 2);
  strcpy(f->meta, "{\"step\":\"7\"}");
  m->meta = f->meta;
  /* Blocks of 2^8 symbols: 8 + 1 + 3 (U8 as nibbles) + 1 = 13 in all. */
  static const struct {
    const char *name;
    stitch_dtype dt;
    int ndim;
    uint64_t shape[2];
  } spec[4] = {{"layer.0.weight", STITCH_DT_BF16, 2, {64, 32}},
               {"layer.0.bias", STITCH_DT_F32, 1, {100}},
               {"packed.q", STITCH_DT_U8, 1, {300}},
               {"step", STITCH_DT_I64, 0, {0}}};
  for (int i = 0; i < 4; i++) {
    stitch_mtensor *t = &f->t[i];
    strcpy(f->names[i], spec[i].name);
    t->name = f->names[i];
    t->dtype = spec[i].dt;
    t->ndim = spec[i].ndim;
    uint64_t n = stitch_dtype_size(t->dtype);
    for (int k = 0; k < t->ndim; k++)
      n *= (t->shape[k] = spec[i].shape[k]);
    t->nbytes = n;
    fill(t->digest.b, 32, (uint8_t)(10 + i));
  }
  m->n_tensors = 4;
  m->tensors = f->t;

  stitch_digest empty;
  ASSERT_OK(stitch_view_digest_from(0, NULL, NULL, &empty), (stitch_diag){{0}});
  static const struct {
    stitch_obj_kind kind;
    uint64_t base;
    int n;
    uint64_t ranges[3][3]; /* first, n_blocks, size */
  } obj[3] = {{STITCH_OBJ_DELTA, 6, 3, {{0, 3, 700}, {5, 2, 90}, {10, 3, 5}}},
              {STITCH_OBJ_ANCHOR, 0, 2, {{0, 7, 9000}, {7, 6, 1200}}},
              {STITCH_OBJ_CUMULATIVE, 3, 1, {{2, 1, 333}}}};
  for (int oi = 0; oi < 3; oi++) {
    stitch_object *o = &f->o[oi];
    o->kind = obj[oi].kind;
    o->base_version = obj[oi].base;
    if (o->kind == STITCH_OBJ_DELTA)
      o->base_id = m->parent_id;
    else if (o->kind == STITCH_OBJ_CUMULATIVE)
      fill(o->base_id.b, 32, 3);
    if (o->kind == STITCH_OBJ_ANCHOR)
      o->base_view = empty;
    else
      fill(o->base_view.b, 32, (uint8_t)(4 + oi));
    o->block_log2 = 8;
    for (int i = 0; i < 4; i++)
      f->tflags[oi][i] = o->kind == STITCH_OBJ_ANCHOR ? DELTA_TF_NEW : 0;
    f->tflags[oi][2] |= DELTA_TF_NIBBLE;
    o->tflags = f->tflags[oi];
    o->n_chunks = (uint64_t)obj[oi].n;
    o->chunks = f->ch[oi];
    for (int c = 0; c < obj[oi].n; c++) {
      f->ch[oi][c].first_block = obj[oi].ranges[c][0];
      f->ch[oi][c].n_blocks = obj[oi].ranges[c][1];
      f->ch[oi][c].size = obj[oi].ranges[c][2];
      fill(f->ch[oi][c].hash.b, 32, (uint8_t)(20 + 3 * oi + c));
    }
    o->bytes = 999999; /* not on the wire; the reader recomputes it */
  }
  m->n_objects = 3;
  m->objects = f->o;
}

/* Field for field; b is a parsed manifest, so its derived fields (nbytes,
 * bytes) are recomputed rather than copied. */
static void assert_same(const stitch_manifest *a, const stitch_manifest *b) {
  ASSERT_MEM_EQ(a->swarm.b, b->swarm.b, 32);
  ASSERT_UEQ(a->version, b->version);
  ASSERT_UEQ(a->parent_version, b->parent_version);
  ASSERT_MEM_EQ(a->parent_id.b, b->parent_id.b, 32);
  ASSERT_UEQ(a->time_unix, b->time_unix);
  ASSERT_MEM_EQ(a->view.b, b->view.b, 32);
  ASSERT_EQ(a->meta == NULL, b->meta == NULL);
  if (a->meta != NULL)
    ASSERT_STR_EQ(a->meta, b->meta);
  ASSERT_UEQ(a->n_tensors, b->n_tensors);
  for (uint64_t i = 0; i < a->n_tensors; i++) {
    const stitch_mtensor *x = &a->tensors[i], *y = &b->tensors[i];
    ASSERT_STR_EQ(x->name, y->name);
    ASSERT(x->name != y->name);
    ASSERT_EQ(x->dtype, y->dtype);
    ASSERT_EQ(x->ndim, y->ndim);
    for (int k = 0; k < x->ndim; k++)
      ASSERT_UEQ(x->shape[k], y->shape[k]);
    ASSERT_UEQ(x->nbytes, y->nbytes);
    ASSERT_MEM_EQ(x->digest.b, y->digest.b, 32);
  }
  ASSERT_UEQ(a->n_objects, b->n_objects);
  for (uint64_t oi = 0; oi < a->n_objects; oi++) {
    const stitch_object *x = &a->objects[oi], *y = &b->objects[oi];
    ASSERT_EQ(x->kind, y->kind);
    ASSERT_UEQ(x->base_version, y->base_version);
    ASSERT_MEM_EQ(x->base_id.b, y->base_id.b, 32);
    ASSERT_MEM_EQ(x->base_view.b, y->base_view.b, 32);
    ASSERT_UEQ(x->block_log2, y->block_log2);
    if (a->n_tensors > 0)
      ASSERT_MEM_EQ(x->tflags, y->tflags, a->n_tensors);
    ASSERT_UEQ(x->n_chunks, y->n_chunks);
    uint64_t sum = 0;
    for (uint64_t c = 0; c < x->n_chunks; c++) {
      ASSERT_MEM_EQ(x->chunks[c].hash.b, y->chunks[c].hash.b, 32);
      ASSERT_UEQ(x->chunks[c].size, y->chunks[c].size);
      ASSERT_UEQ(x->chunks[c].first_block, y->chunks[c].first_block);
      ASSERT_UEQ(x->chunks[c].n_blocks, y->chunks[c].n_blocks);
      sum += x->chunks[c].size;
    }
    ASSERT_UEQ(y->bytes, sum);
  }
}

/* Opens len bytes from an exact-size copy, so that ASan sees any read
 * past the end. */
static int open_copy(const uint8_t *buf, size_t len, const stitch_pubkey *pk,
                     stitch_manifest **m, stitch_diag *d) {
  uint8_t *copy = malloc(len ? len : 1);
  ASSERT(copy != NULL);
  if (len > 0)
    memcpy(copy, buf, len);
  stitch_digest id;
  int rc = stitch_manifest_open(copy, len, pk, m, &id, d);
  free(copy);
  if (rc != 0)
    ASSERT(*m == NULL);
  return rc;
}

/* Signs with sk_a and expects open to refuse the struct with the same
 * message that the hand-made manifest gets. */
static void expect_refused(const stitch_manifest *m, int variant, int code,
                           const char *substr) {
  stitch_diag d = {{0}};
  uint8_t *buf = NULL;
  size_t len = 0;
  if (variant == V_OK) {
    ASSERT_ERR(stitch_manifest_sign(m, &sk_a, &buf, &len, NULL, &d),
               code == STITCH_ELIMIT ? code : STITCH_EINVAL, d, substr);
    ASSERT(buf == NULL);
  }
  wbuf w = enc_signed(m, variant, &sk_a);
  stitch_manifest *out = NULL;
  memset(&d, 0, sizeof(d));
  ASSERT_ERR(open_copy(w.p, w.len, &pk_a, &out, &d), code, d, substr);
  free(w.p);
}

/* ---- tests --------------------------------------------------------------- */

static void test_roundtrip(void) {
  fixture f;
  fx_init(&f);
  stitch_diag d = {{0}};
  uint8_t *buf, *buf2;
  size_t len, len2;
  stitch_digest id, id2, h;
  ASSERT_OK(stitch_manifest_sign(&f.m, &sk_a, &buf, &len, &id, &d), d);
  stitch_hash(buf, len, &h);
  ASSERT_MEM_EQ(id.b, h.b, 32);

  /* Deterministic, and the same bytes as the spec-derived encoder. */
  ASSERT_OK(stitch_manifest_sign(&f.m, &sk_a, &buf2, &len2, &id2, &d), d);
  ASSERT_UEQ(len, len2);
  ASSERT_MEM_EQ(buf, buf2, len);
  free(buf2);
  wbuf w = enc_signed(&f.m, V_OK, &sk_a);
  ASSERT_UEQ(w.len, len);
  ASSERT_MEM_EQ(w.p, buf, len);
  free(w.p);

  stitch_manifest *m = NULL;
  ASSERT_OK(stitch_manifest_open(buf, len, &pk_a, &m, &id2, &d), d);
  ASSERT_MEM_EQ(id2.b, id.b, 32);
  assert_same(&f.m, m);
  ASSERT_UEQ(stitch_object_blocks(m, &m->objects[0]), 13);
  ASSERT_UEQ(m->objects[0].bytes, 795);
  ASSERT(m->meta != f.m.meta);

  /* A parsed manifest signs back to the same bytes. */
  ASSERT_OK(stitch_manifest_sign(m, &sk_a, &buf2, &len2, NULL, &d), d);
  ASSERT_UEQ(len2, len);
  ASSERT_MEM_EQ(buf2, buf, len);
  free(buf2);
  stitch_manifest_free(m);
  stitch_manifest_free(NULL);
  free(buf);

  /* No parent, anchor only, no meta, no tensors and no chunks. */
  fx_init(&f);
  f.m.version = 1;
  f.m.parent_version = 0;
  memset(f.m.parent_id.b, 0, 32);
  f.m.meta = NULL;
  f.m.n_tensors = 0;
  f.m.objects = &f.o[1];
  f.m.n_objects = 1;
  f.o[1].n_chunks = 0;
  ASSERT_OK(stitch_manifest_sign(&f.m, &sk_a, &buf, &len, NULL, &d), d);
  ASSERT_OK(stitch_manifest_open(buf, len, &pk_a, &m, NULL, &d), d);
  assert_same(&f.m, m);
  ASSERT(m->tensors == NULL && m->meta == NULL);
  stitch_manifest_free(m);
  free(buf);
}

static void test_keys_and_signature(void) {
  fixture f;
  fx_init(&f);
  stitch_diag d = {{0}};
  uint8_t *buf;
  size_t len;
  ASSERT_OK(stitch_manifest_sign(&f.m, &sk_a, &buf, &len, NULL, &d), d);
  stitch_manifest *m = NULL;

  /* Another swarm: named as such, with both keys' first 16 hex digits. */
  char ha[65], hb[65];
  stitch_pubkey_hex(&pk_a, ha);
  stitch_pubkey_hex(&pk_b, hb);
  ha[16] = hb[16] = 0;
  ASSERT_ERR(open_copy(buf, len, &pk_b, &m, &d), STITCH_ESWARM, d, ha);
  ASSERT(strstr(d.msg, hb) != NULL);

  /* A flipped byte of the view digest, of the signature; every single-bit
   * flip anywhere. */
  const uint8_t *body;
  size_t body_len;
  split(buf, len, &body, &body_len);
  uint8_t *copy = malloc(len);
  memcpy(copy, buf, len);
  uint8_t *view = memmem(copy, len, f.m.view.b, 32);
  ASSERT(view != NULL);
  view[5] ^= 0x40;
  ASSERT_ERR(open_copy(copy, len, &pk_a, &m, &d), STITCH_ESIGNATURE, d,
             "signature");
  view[5] ^= 0x40;
  copy[len - 1] ^= 1;
  ASSERT_ERR(open_copy(copy, len, &pk_a, &m, &d), STITCH_ESIGNATURE, d,
             "signature");
  copy[len - 1] ^= 1;
  for (size_t i = 0; i < len; i++)
    for (int b = 0; b < 8; b++) {
      copy[i] ^= (uint8_t)(1 << b);
      ASSERT_NE(open_copy(copy, len, &pk_a, &m, &d), 0);
      copy[i] ^= (uint8_t)(1 << b);
    }
  free(copy);

  /* The right body, signed by another key. */
  wbuf w = wrap(body, body_len, &sk_b, 1);
  ASSERT_ERR(open_copy(w.p, w.len, &pk_a, &m, &d), STITCH_ESIGNATURE, d,
             "signature");
  free(w.p);
  /* Another format: "upgrade", whoever signed it. */
  w = wrap(body, body_len, &sk_a, 2);
  ASSERT_ERR(open_copy(w.p, w.len, &pk_a, &m, &d), STITCH_EVERSION, d,
             "format 2");
  free(w.p);

  /* The signer must hold the swarm's key. */
  uint8_t *out = NULL;
  ASSERT_ERR(stitch_manifest_sign(&f.m, &sk_b, &out, &len, NULL, &d),
             STITCH_EINVAL, d, "names swarm");
  ASSERT(out == NULL);
  stitch_seckey bad = sk_a;
  bad.b[40] ^= 1; /* public half no longer the seed's */
  ASSERT_ERR(stitch_manifest_sign(&f.m, &bad, &out, &len, NULL, &d),
             STITCH_EINVAL, d, "does not match");
  free(buf);
}

static void test_truncation_and_framing(void) {
  fixture f;
  fx_init(&f);
  stitch_diag d = {{0}};
  uint8_t *buf;
  size_t len;
  ASSERT_OK(stitch_manifest_sign(&f.m, &sk_a, &buf, &len, NULL, &d), d);
  stitch_manifest *m = NULL;
  for (size_t n = 0; n < len; n++) {
    int rc = open_copy(buf, n, &pk_a, &m, &d);
    ASSERT_NE(rc, 0);
    ASSERT(d.msg[0] != 0);
  }
  uint8_t *longer = malloc(len + 1);
  memcpy(longer, buf, len);
  longer[len] = 0xc0;
  ASSERT_ERR(open_copy(longer, len + 1, &pk_a, &m, &d), STITCH_EFORMAT, d,
             "1 bytes after");
  free(longer);
  free(buf);

  /* A body with a byte after its map. */
  wbuf body = {0};
  enc_body(&f.m, V_OK, &body);
  w_byte(&body, 0xc0);
  wbuf w = wrap(body.p, body.len, &sk_a, 1);
  ASSERT_ERR(open_copy(w.p, w.len, &pk_a, &m, &d), STITCH_EFORMAT, d,
             "after its first object");
  free(w.p);
  free(body.p);

  /* Claims of 2^32 - 1 elements in 10 bytes: refused by the pre-scan, as
   * the outer array and as a body, before anything is allocated. */
  static const uint8_t big[10] = {0xdd, 0xff, 0xff, 0xff, 0xff};
  ASSERT_ERR(open_copy(big, sizeof(big), &pk_a, &m, &d), STITCH_ETRUNCATED, d,
             "4294967295 elements");
  static const uint8_t bigmap[10] = {0xdf, 0xff, 0xff, 0xff, 0xff};
  w = wrap(bigmap, sizeof(bigmap), &sk_a, 1);
  ASSERT_ERR(open_copy(w.p, w.len, &pk_a, &m, &d), STITCH_ETRUNCATED, d,
             "4294967295 pairs");
  free(w.p);
  static const uint8_t bigbin[10] = {0x93, 0x01, 0xc6, 0xff, 0xff, 0xff, 0xf0};
  ASSERT_ERR(open_copy(bigbin, sizeof(bigbin), &pk_a, &m, &d),
             STITCH_ETRUNCATED, d, "bin of 4294967280 bytes");

  /* Deep nesting, as a body and as the signed manifest. */
  uint8_t deep[200];
  memset(deep, 0x91, sizeof(deep));
  deep[sizeof(deep) - 1] = 0x90;
  w = wrap(deep, sizeof(deep), &sk_a, 1);
  ASSERT_ERR(open_copy(w.p, w.len, &pk_a, &m, &d), STITCH_ELIMIT, d,
             "nested deeper than 5");
  free(w.p);
  ASSERT_ERR(open_copy(deep, sizeof(deep), &pk_a, &m, &d), STITCH_ELIMIT, d,
             "nested deeper than 1");
  /* Not an array of three; a short signature. */
  static const uint8_t two[] = {0x92, 0x01, 0xc4, 0x00};
  ASSERT_ERR(open_copy(two, sizeof(two), &pk_a, &m, &d), STITCH_EFORMAT, d,
             "array of 3");
  static const uint8_t shortsig[] = {0x93, 0x01, 0xc4, 0x00, 0xc4, 0x00};
  ASSERT_ERR(open_copy(shortsig, sizeof(shortsig), &pk_a, &m, &d),
             STITCH_EFORMAT, d, "64 bytes");
  static const uint8_t nobody[] = {0x93, 0x01, 0xa0, 0xc4, 0x00};
  ASSERT_ERR(open_copy(nobody, sizeof(nobody), &pk_a, &m, &d), STITCH_EFORMAT,
             d, "body is not a bin");
}

static void test_keys_in_body(void) {
  fixture f;
  fx_init(&f);
  expect_refused(&f.m, V_UNKNOWN_KEY, STITCH_EFORMAT, "unknown key \"extra\"");
  expect_refused(&f.m, V_MISSING_KEY, STITCH_EFORMAT, "\"time\" is missing");
  expect_refused(&f.m, V_DUP_KEY, STITCH_EFORMAT, "\"version\" appears twice");
  expect_refused(&f.m, V_FLOAT_TIME, STITCH_EFORMAT,
                 "time: expected an unsigned integer, found a float");
  expect_refused(&f.m, V_INT_KEY, STITCH_EFORMAT, "key: expected a str");
  /* The pre-scan refuses a body without a swarm before the signature. */
  wbuf body = {0};
  w_map(&body, 1);
  w_str(&body, "version");
  w_uint(&body, 1);
  wbuf w = wrap(body.p, body.len, &sk_b, 1);
  stitch_manifest *m = NULL;
  stitch_diag d = {{0}};
  ASSERT_ERR(open_copy(w.p, w.len, &pk_a, &m, &d), STITCH_EFORMAT, d,
             "\"swarm\" is missing");
  free(w.p);
  free(body.p);
}

static void test_rules(void) {
  fixture f;
  /* Each broken rule, refused by sign (EINVAL) and open (EFORMAT). */
  fx_init(&f);
  strcpy(f.names[3], f.names[0]);
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "appears twice");
  fx_init(&f);
  f.o[0].base_version = 5;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT,
                 "object 0: delta from version 5, but the parent is 6");
  fx_init(&f);
  f.o[0].base_id.b[0] ^= 1;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "base id is not the parent_id");
  fx_init(&f);
  f.ch[0][1].first_block = 2; /* [0,3) then [2,4) */
  expect_refused(&f.m, V_OK, STITCH_EFORMAT,
                 "object 0 chunk 1: range overlaps or precedes chunk 0");
  fx_init(&f);
  f.ch[0][2].n_blocks = 4; /* [10,14) of 13 */
  expect_refused(&f.m, V_OK, STITCH_EFORMAT,
                 "object 0 chunk 2: blocks 10+4 beyond the object's 13");
  fx_init(&f);
  f.tflags[1][0] = 0;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT,
                 "object 1: anchor, but tensor 0 is not NEW");
  fx_init(&f);
  f.tflags[0][0] = DELTA_TF_NIBBLE;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "NIBBLE on a BF16 tensor");
  fx_init(&f);
  f.tflags[0][1] = 4;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "unknown flags 0x04");
  fx_init(&f);
  f.o[1].base_version = 1;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "an anchor with base version 1");
  fx_init(&f);
  f.o[1].base_view.b[0] ^= 1;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "empty view");
  fx_init(&f);
  f.o[2].base_version = 6;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "cumulative from version 6");
  fx_init(&f);
  f.o[2].kind = 4;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "unknown kind 4");
  fx_init(&f);
  f.o[2].block_log2 = 25;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "block_log2 25");
  fx_init(&f);
  f.ch[2][0].size = 0;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "size 0");
  fx_init(&f);
  f.ch[2][0].size = STITCH_CHUNK_MAX + 1ull;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "size 33554433");
  fx_init(&f);
  f.ch[2][0].n_blocks = 0;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "covers no blocks");
  fx_init(&f);
  f.m.parent_version = 7;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "parent 7 is not below");
  fx_init(&f);
  f.m.version = 0;
  f.m.parent_version = 0;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "version 0");
  fx_init(&f);
  memset(f.m.parent_id.b, 0, 32);
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "zero parent_id");
  fx_init(&f);
  f.m.n_objects = 0;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "no objects");
  fx_init(&f);
  f.t[2].dtype = 16;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "dtype");
  fx_init(&f);
  f.t[0].shape[0] = 1ull << 62; /* x 32 x 2 bytes */
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "passes 2^64");
  fx_init(&f);
  f.names[1][0] = 0;
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "bytes (1..4096)");
  /* A delta needs a parent: version 1 with a delta object. */
  fx_init(&f);
  f.m.version = 1;
  f.m.parent_version = 0;
  memset(f.m.parent_id.b, 0, 32);
  f.m.n_objects = 1;
  f.o[0].base_version = 0;
  memset(f.o[0].base_id.b, 0, 32);
  expect_refused(&f.m, V_OK, STITCH_EFORMAT, "has no parent");

  /* nbytes is derived on the wire but the signer's struct must agree. */
  fx_init(&f);
  f.t[1].nbytes++;
  stitch_diag d = {{0}};
  uint8_t *out;
  size_t len;
  ASSERT_ERR(stitch_manifest_sign(&f.m, &sk_a, &out, &len, NULL, &d),
             STITCH_EINVAL, d, "nbytes 401");
  /* More than 8 objects, more than 8 dims: limits. */
  fx_init(&f);
  stitch_object many[9];
  for (int i = 0; i < 9; i++)
    many[i] = f.o[1];
  f.m.objects = many;
  f.m.n_objects = 9;
  ASSERT_ERR(stitch_manifest_sign(&f.m, &sk_a, &out, &len, NULL, &d),
             STITCH_ELIMIT, d, "9 objects");
  wbuf w = enc_signed(&f.m, V_OK, &sk_a);
  stitch_manifest *m = NULL;
  ASSERT_ERR(open_copy(w.p, w.len, &pk_a, &m, &d), STITCH_ELIMIT, d,
             "objects: 9 elements, at most 8");
  free(w.p);
  fx_init(&f);
  f.t[3].ndim = 9;
  w = enc_signed(&f.m, V_OK, &sk_a);
  ASSERT_ERR(open_copy(w.p, w.len, &pk_a, &m, &d), STITCH_ELIMIT, d,
             "tensor 3 shape: 9 elements");
  free(w.p);
  /* A name with a NUL inside (the signer cannot even express it). */
  fx_init(&f);
  wbuf body = {0};
  enc_body(&f.m, V_OK, &body);
  uint8_t *nm = memmem(body.p, body.len, "packed.q", 8);
  nm[3] = 0;
  w = wrap(body.p, body.len, &sk_a, 1);
  ASSERT_ERR(open_copy(w.p, w.len, &pk_a, &m, &d), STITCH_EFORMAT, d,
             "tensor 2 name: holds a NUL");
  free(w.p);
  free(body.p);
}

/* ---- random manifests ---------------------------------------------------- */

static uint64_t rnd(uint64_t n) { return test_rng_next(&rng) % n; }

static stitch_manifest *random_manifest(void) {
  stitch_manifest *m = calloc(1, sizeof(*m));
  m->swarm = pk_a;
  m->version = 1 + rnd(1000);
  m->parent_version = rnd(m->version);
  if (m->parent_version > 0)
    fill(m->parent_id.b, 32, (uint8_t)rnd(256));
  m->time_unix = test_rng_next(&rng) >> rnd(64);
  fill(m->view.b, 32, (uint8_t)rnd(256));
  if (rnd(2)) {
    size_t n = rnd(300);
    m->meta = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
      m->meta[i] = (char)(1 + rnd(255));
    m->meta[n] = 0;
  }
  m->n_tensors = rnd(20);
  m->tensors = calloc(m->n_tensors + 1, sizeof(*m->tensors));
  for (uint64_t i = 0; i < m->n_tensors; i++) {
    stitch_mtensor *t = &m->tensors[i];
    size_t nl = 1 + rnd(rnd(8) == 0 ? 300 : 12);
    t->name = malloc(nl + 12);
    /* "i." then random bytes: unique, and anything but NUL. */
    size_t pl =
        (size_t)snprintf(t->name, nl + 12, "%llu.", (unsigned long long)i);
    size_t end = nl > pl ? nl : pl;
    for (size_t k = pl; k < end; k++)
      t->name[k] = (char)(1 + rnd(255));
    t->name[end] = 0;
    t->dtype = (stitch_dtype)(1 + rnd(15));
    t->ndim = (int)rnd(rnd(4) == 0 ? 9 : 3);
    uint64_t n = stitch_dtype_size(t->dtype);
    for (int k = 0; k < t->ndim; k++)
      n *= (t->shape[k] = rnd(k < 2 ? 60 : 3));
    t->nbytes = n;
    fill(t->digest.b, 32, (uint8_t)rnd(256));
  }
  m->n_objects = 1 + rnd(STITCH_MAX_OBJECTS);
  m->objects = calloc(m->n_objects, sizeof(*m->objects));
  stitch_digest empty;
  stitch_view_digest_from(0, NULL, NULL, &empty);
  for (uint64_t oi = 0; oi < m->n_objects; oi++) {
    stitch_object *o = &m->objects[oi];
    uint64_t pv = m->parent_version;
    o->kind = pv == 0   ? STITCH_OBJ_ANCHOR
              : pv == 1 ? (stitch_obj_kind)(1 + rnd(2))
                        : (stitch_obj_kind)(1 + rnd(3));
    if (o->kind == STITCH_OBJ_DELTA) {
      o->base_version = pv;
      o->base_id = m->parent_id;
    } else if (o->kind == STITCH_OBJ_CUMULATIVE) {
      o->base_version = 1 + rnd(pv - 1);
      fill(o->base_id.b, 32, (uint8_t)(1 + rnd(255)));
    }
    if (o->kind == STITCH_OBJ_ANCHOR)
      o->base_view = empty;
    else
      fill(o->base_view.b, 32, (uint8_t)rnd(256));
    o->block_log2 = 8 + (uint32_t)rnd(rnd(4) == 0 ? 17 : 3);
    o->tflags = malloc(m->n_tensors + 1);
    for (uint64_t i = 0; i < m->n_tensors; i++) {
      uint8_t fl = o->kind == STITCH_OBJ_ANCHOR || rnd(4) == 0 ? 2 : 0;
      if (stitch_dtype_size(m->tensors[i].dtype) == 1 && rnd(2))
        fl |= DELTA_TF_NIBBLE;
      o->tflags[i] = fl;
    }
    uint64_t blocks = stitch_object_blocks(m, o), pos = 0;
    o->chunks = calloc(blocks + 1, sizeof(*o->chunks));
    while (pos < blocks) {
      pos += rnd(3);
      if (pos >= blocks)
        break;
      stitch_chunk_ref *k = &o->chunks[o->n_chunks++];
      k->first_block = pos;
      k->n_blocks = 1 + rnd(blocks - pos);
      k->size = 1 + (rnd(8) == 0 ? rnd(STITCH_CHUNK_MAX) : rnd(70000));
      fill(k->hash.b, 32, (uint8_t)rnd(256));
      pos += k->n_blocks;
    }
  }
  return m;
}

static void random_free(stitch_manifest *m) {
  for (uint64_t i = 0; i < m->n_tensors; i++)
    free(m->tensors[i].name);
  for (uint64_t i = 0; i < m->n_objects; i++) {
    free(m->objects[i].tflags);
    free(m->objects[i].chunks);
  }
  free(m->tensors);
  free(m->objects);
  free(m->meta);
  free(m);
}

static void test_random(void) {
  for (int it = 0; it < 300; it++) {
    stitch_manifest *m = random_manifest();
    stitch_diag d = {{0}};
    uint8_t *buf;
    size_t len;
    ASSERT_OK(stitch_manifest_sign(m, &sk_a, &buf, &len, NULL, &d), d);
    wbuf w = enc_signed(m, V_OK, &sk_a);
    ASSERT_UEQ(w.len, len);
    ASSERT_MEM_EQ(w.p, buf, len);
    free(w.p);
    stitch_manifest *p = NULL;
    ASSERT_OK(open_copy(buf, len, &pk_a, &p, &d), d);
    assert_same(m, p);
    stitch_manifest_free(p);
    /* A few random truncations and overwrites: an error, never a crash. */
    for (int k = 0; k < 20; k++) {
      size_t n = (size_t)rnd(len);
      ASSERT_NE(open_copy(buf, n, &pk_a, &p, &d), 0);
      size_t at = (size_t)rnd(len);
      uint8_t old = buf[at], nv = (uint8_t)(old ^ (1 + rnd(255)));
      buf[at] = nv;
      ASSERT_NE(open_copy(buf, len, &pk_a, &p, &d), 0);
      buf[at] = old;
    }
    free(buf);
    random_free(m);
  }
}

int main(void) {
  rng = test_rng_seeded("test_manifest", 20260107);
  ASSERT(sodium_init() >= 0);
  ASSERT_EQ(stitch_keygen(&pk_a, &sk_a), 0);
  ASSERT_EQ(stitch_keygen(&pk_b, &sk_b), 0);
  test_roundtrip();
  test_keys_and_signature();
  test_truncation_and_framing();
  test_keys_in_body();
  test_rules();
  test_random();
  puts("test_manifest: ok");
  return 0;
}
