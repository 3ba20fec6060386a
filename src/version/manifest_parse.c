/* manifest_parse.c: stitch_manifest_open (proto/manifest.md, "Reading").
 *
 * The order matters for what an attacker can make us do. Before the
 * signature is checked, nothing is allocated from the input except the
 * copy the signature needs: msgpack_check walks the bytes without
 * allocating, the outer array and the body's "swarm" are read in place.
 * Only a body signed by the swarm key reaches msgpack-c's unpacker, which
 * then costs memory in proportion to the bytes (msgpack_check.h). Every
 * string and array is copied out of the unpacker's zone, so the result
 * owns its memory and does not point into the caller's buffer. */
#include "version/manifest_internal.h"

#include "common/diag.h"
#include "common/msgpack_check.h"

#include <msgpack.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

/* ---- before the signature: in place, no allocation --------------------- */

/* The pieces of a signed manifest, pointing into the caller's buffer. */
typedef struct outer {
  uint64_t format;
  const uint8_t *body;
  size_t body_len;
  const uint8_t *sig;
} outer;

static int read_outer(const uint8_t *buf, size_t len, outer *o,
                      stitch_diag *d) {
  size_t used;
  int rc = msgpack_check(buf, len, 1, &used, d);
  if (rc != 0)
    return stitch_diag_prefix(d, rc, "manifest");
  RETURN_IF(used != len, d, STITCH_EFORMAT,
            "manifest: %zu bytes after the signed array", len - used);
  /* msgpack_check saw every header and payload inside buf. */
  msgpack_check_hdr h;
  msgpack_check_head(buf, len, 0, &h, NULL);
  RETURN_IF(h.kind != MSGPACK_CHECK_ARRAY || h.n != 3, d, STITCH_EFORMAT,
            "manifest: not an array of 3 (format, body, signature)");
  size_t pos = h.size;
  msgpack_check_head(buf, len, pos, &h, NULL);
  RETURN_IF(h.kind != MSGPACK_CHECK_UINT, d, STITCH_EFORMAT,
            "manifest: format is not an unsigned integer");
  o->format = h.n;
  pos += h.size;
  msgpack_check_head(buf, len, pos, &h, NULL);
  RETURN_IF(h.kind != MSGPACK_CHECK_BIN, d, STITCH_EFORMAT,
            "manifest: body is not a bin");
  o->body = buf + pos + h.size;
  o->body_len = (size_t)h.n;
  pos += h.size + (size_t)h.n;
  msgpack_check_head(buf, len, pos, &h, NULL);
  RETURN_IF(h.kind != MSGPACK_CHECK_BIN || h.n != STITCH_SIG_BYTES, d,
            STITCH_EFORMAT, "manifest: signature is not a bin of %d bytes",
            STITCH_SIG_BYTES);
  o->sig = buf + pos + h.size;
  return 0;
}

/* Finds the body's "swarm" value without unpacking the body, which has
 * passed msgpack_check (so every header read here is inside it). */
static int find_swarm(const uint8_t *body, size_t len, const uint8_t **swarm,
                      stitch_diag *d) {
  msgpack_check_hdr h;
  msgpack_check_head(body, len, 0, &h, NULL);
  RETURN_IF(h.kind != MSGPACK_CHECK_MAP, d, STITCH_EFORMAT,
            "manifest: body is not a map");
  size_t pos = h.size, used;
  for (uint64_t i = 0; i < h.n; i++) {
    msgpack_check_hdr k, v;
    msgpack_check_head(body, len, pos, &k, NULL);
    int is_swarm = k.kind == MSGPACK_CHECK_STR && k.n == 5 &&
                   memcmp(body + pos + k.size, "swarm", 5) == 0;
    msgpack_check(body + pos, len - pos, MANIFEST_BODY_DEPTH, &used, NULL);
    pos += used;
    if (is_swarm) {
      msgpack_check_head(body, len, pos, &v, NULL);
      RETURN_IF(v.kind != MSGPACK_CHECK_BIN || v.n != STITCH_PUBKEY_BYTES, d,
                STITCH_EFORMAT, "manifest: \"swarm\" is not a bin of %d bytes",
                STITCH_PUBKEY_BYTES);
      *swarm = body + pos + v.size;
      return 0;
    }
    msgpack_check(body + pos, len - pos, MANIFEST_BODY_DEPTH, &used, NULL);
    pos += used;
  }
  return stitch_diag_set(d, STITCH_EFORMAT,
                         "manifest: key \"swarm\" is missing");
}

static int verify(const outer *o, const stitch_pubkey *swarm, stitch_diag *d) {
  /* The signed message is the domain and the body, contiguous. */
  size_t n = MANIFEST_SIGN_DOMAIN_LEN + o->body_len;
  uint8_t *msg = malloc(n);
  RETURN_IF(msg == NULL, d, STITCH_ENOMEM, "out of memory");
  memcpy(msg, MANIFEST_SIGN_DOMAIN, MANIFEST_SIGN_DOMAIN_LEN);
  if (o->body_len > 0)
    memcpy(msg + MANIFEST_SIGN_DOMAIN_LEN, o->body, o->body_len);
  int bad = crypto_sign_verify_detached(o->sig, msg, n, swarm->b) != 0;
  free(msg);
  RETURN_IF(bad, d, STITCH_ESIGNATURE,
            "manifest: the signature does not verify with the swarm key");
  return 0;
}

/* ---- after the signature: msgpack-c objects to the struct -------------- */

static const char *type_name(msgpack_object_type t) {
  switch (t) {
  case MSGPACK_OBJECT_NIL:
    return "nil";
  case MSGPACK_OBJECT_BOOLEAN:
    return "a boolean";
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
    return "an unsigned integer";
  case MSGPACK_OBJECT_NEGATIVE_INTEGER:
    return "a negative integer";
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64:
    return "a float";
  case MSGPACK_OBJECT_STR:
    return "a str";
  case MSGPACK_OBJECT_ARRAY:
    return "an array";
  case MSGPACK_OBJECT_MAP:
    return "a map";
  case MSGPACK_OBJECT_BIN:
    return "a bin";
  default:
    return "an ext";
  }
}

/* WHAT names the field in messages ("tensor 3 shape"). */
static int want(const msgpack_object *o, msgpack_object_type t,
                const char *what, stitch_diag *d) {
  RETURN_IF(o->type != t, d, STITCH_EFORMAT,
            "manifest: %s: expected %s, found %s", what, type_name(t),
            type_name(o->type));
  return 0;
}

static int get_uint(const msgpack_object *o, const char *what, uint64_t *v,
                    stitch_diag *d) {
  CHECK_RC(want(o, MSGPACK_OBJECT_POSITIVE_INTEGER, what, d));
  *v = o->via.u64;
  return 0;
}

/* A uint of at most MAX (for fields that go into narrower types; the
 * rules proper are manifest_validate's). */
static int get_small(const msgpack_object *o, const char *what, uint64_t max,
                     uint64_t *v, stitch_diag *d) {
  CHECK_RC(get_uint(o, what, v, d));
  RETURN_IF(*v > max, d, STITCH_EFORMAT, "manifest: %s: %llu is out of range",
            what, (unsigned long long)*v);
  return 0;
}

static int get_bin32(const msgpack_object *o, const char *what, uint8_t *out,
                     stitch_diag *d) {
  CHECK_RC(want(o, MSGPACK_OBJECT_BIN, what, d));
  RETURN_IF(o->via.bin.size != 32, d, STITCH_EFORMAT,
            "manifest: %s: a bin of %u bytes, expected 32", what,
            (unsigned)o->via.bin.size);
  memcpy(out, o->via.bin.ptr, 32);
  return 0;
}

/* An array of at most MAX elements (the count goes into an allocation,
 * so a count above a limit is STITCH_ELIMIT). */
static int get_array(const msgpack_object *o, const char *what, uint64_t max,
                     const msgpack_object_array **a, stitch_diag *d) {
  CHECK_RC(want(o, MSGPACK_OBJECT_ARRAY, what, d));
  RETURN_IF(o->via.array.size > max, d, STITCH_ELIMIT,
            "manifest: %s: %u elements, at most %llu", what,
            (unsigned)o->via.array.size, (unsigned long long)max);
  *a = &o->via.array;
  return 0;
}

/* An array of exactly N elements. */
static int get_tuple(const msgpack_object *o, const char *what, uint32_t n,
                     const msgpack_object_array **a, stitch_diag *d) {
  CHECK_RC(want(o, MSGPACK_OBJECT_ARRAY, what, d));
  RETURN_IF(o->via.array.size != n, d, STITCH_EFORMAT,
            "manifest: %s: an array of %u elements, expected %u", what,
            (unsigned)o->via.array.size, (unsigned)n);
  *a = &o->via.array;
  return 0;
}

/* A NUL-terminated copy of a str with no NUL inside. */
static int get_cstr(const msgpack_object *o, const char *what, char **out,
                    stitch_diag *d) {
  CHECK_RC(want(o, MSGPACK_OBJECT_STR, what, d));
  size_t n = o->via.str.size;
  RETURN_IF(n > 0 && memchr(o->via.str.ptr, 0, n) != NULL, d, STITCH_EFORMAT,
            "manifest: %s: holds a NUL byte", what);
  *out = malloc(n + 1);
  RETURN_IF(*out == NULL, d, STITCH_ENOMEM, "out of memory");
  if (n > 0)
    memcpy(*out, o->via.str.ptr, n);
  (*out)[n] = 0;
  return 0;
}

static int parse_tensor(const msgpack_object *o, uint64_t i, stitch_mtensor *t,
                        stitch_diag *d) {
  char what[64];
  const msgpack_object_array *a = NULL, *shape = NULL;
  snprintf(what, sizeof(what), "tensor %llu", (unsigned long long)i);
  CHECK_RC(get_tuple(o, what, 4, &a, d));
  snprintf(what, sizeof(what), "tensor %llu name", (unsigned long long)i);
  RETURN_IF(a->ptr[0].type == MSGPACK_OBJECT_STR &&
                (a->ptr[0].via.str.size < 1 ||
                 a->ptr[0].via.str.size > STITCH_ST_MAX_NAME),
            d, STITCH_EFORMAT, "manifest: %s: %u bytes (1..%u)", what,
            (unsigned)a->ptr[0].via.str.size, STITCH_ST_MAX_NAME);
  CHECK_RC(get_cstr(&a->ptr[0], what, &t->name, d));
  uint64_t v;
  snprintf(what, sizeof(what), "tensor %llu dtype", (unsigned long long)i);
  CHECK_RC(get_small(&a->ptr[1], what, STITCH_DT_COUNT_ - 1, &v, d));
  RETURN_IF(v == STITCH_DT_INVALID, d, STITCH_EFORMAT,
            "manifest: %s: 0 is not a dtype", what);
  t->dtype = (stitch_dtype)v;
  snprintf(what, sizeof(what), "tensor %llu shape", (unsigned long long)i);
  CHECK_RC(get_array(&a->ptr[2], what, STITCH_MAX_DIMS, &shape, d));
  t->ndim = (int)shape->size;
  for (int k = 0; k < t->ndim; k++)
    CHECK_RC(get_uint(&shape->ptr[k], what, &t->shape[k], d));
  RETURN_IF(manifest_nbytes(t->dtype, t->ndim, t->shape, &t->nbytes) != 0, d,
            STITCH_EFORMAT,
            "manifest: tensor %llu: shape x dtype size passes 2^64",
            (unsigned long long)i);
  snprintf(what, sizeof(what), "tensor %llu digest", (unsigned long long)i);
  return get_bin32(&a->ptr[3], what, t->digest.b, d);
}

static int parse_chunk(const msgpack_object *o, size_t oi, uint64_t c,
                       stitch_chunk_ref *k, stitch_diag *d) {
  char what[64];
  const msgpack_object_array *a = NULL;
  snprintf(what, sizeof(what), "object %zu chunk %llu", oi,
           (unsigned long long)c);
  CHECK_RC(get_tuple(o, what, 4, &a, d));
  CHECK_RC(get_bin32(&a->ptr[0], what, k->hash.b, d));
  CHECK_RC(get_uint(&a->ptr[1], what, &k->size, d));
  CHECK_RC(get_uint(&a->ptr[2], what, &k->first_block, d));
  return get_uint(&a->ptr[3], what, &k->n_blocks, d);
}

static int parse_object(const msgpack_object *o, size_t oi, uint64_t n_tensors,
                        stitch_object *ob, stitch_diag *d) {
  char what[64];
  const msgpack_object_array *a = NULL, *chunks = NULL;
  uint64_t v;
  snprintf(what, sizeof(what), "object %zu", oi);
  CHECK_RC(get_tuple(o, what, 7, &a, d));
  snprintf(what, sizeof(what), "object %zu kind", oi);
  CHECK_RC(get_small(&a->ptr[0], what, 255, &v, d));
  ob->kind = (stitch_obj_kind)v;
  snprintf(what, sizeof(what), "object %zu base", oi);
  CHECK_RC(get_uint(&a->ptr[1], what, &ob->base_version, d));
  CHECK_RC(get_bin32(&a->ptr[2], what, ob->base_id.b, d));
  CHECK_RC(get_bin32(&a->ptr[3], what, ob->base_view.b, d));
  snprintf(what, sizeof(what), "object %zu block_log2", oi);
  CHECK_RC(get_small(&a->ptr[4], what, 255, &v, d));
  ob->block_log2 = (uint32_t)v;
  snprintf(what, sizeof(what), "object %zu tflags", oi);
  CHECK_RC(want(&a->ptr[5], MSGPACK_OBJECT_BIN, what, d));
  RETURN_IF(a->ptr[5].via.bin.size != n_tensors, d, STITCH_EFORMAT,
            "manifest: %s: %u bytes for %llu tensors", what,
            (unsigned)a->ptr[5].via.bin.size, (unsigned long long)n_tensors);
  ob->tflags = malloc(n_tensors ? (size_t)n_tensors : 1);
  RETURN_IF(ob->tflags == NULL, d, STITCH_ENOMEM, "out of memory");
  if (n_tensors > 0)
    memcpy(ob->tflags, a->ptr[5].via.bin.ptr, (size_t)n_tensors);
  snprintf(what, sizeof(what), "object %zu chunks", oi);
  CHECK_RC(get_array(&a->ptr[6], what, STITCH_MAX_CHUNKS, &chunks, d));
  if (chunks->size > 0) {
    ob->chunks = calloc(chunks->size, sizeof(*ob->chunks));
    RETURN_IF(ob->chunks == NULL, d, STITCH_ENOMEM, "out of memory");
  }
  ob->n_chunks = chunks->size;
  for (uint64_t c = 0; c < ob->n_chunks; c++)
    CHECK_RC(parse_chunk(&chunks->ptr[c], oi, c, &ob->chunks[c], d));
  return 0;
}

/* Sorts the body's values into vals[] by key (manifest_keys order):
 * exactly those keys, each once, all of them str. */
static int collect_keys(const msgpack_object *body,
                        const msgpack_object *vals[MANIFEST_N_KEYS],
                        stitch_diag *d) {
  CHECK_RC(want(body, MSGPACK_OBJECT_MAP, "body", d));
  for (uint32_t i = 0; i < body->via.map.size; i++) {
    const msgpack_object_kv *kv = &body->via.map.ptr[i];
    CHECK_RC(want(&kv->key, MSGPACK_OBJECT_STR, "key", d));
    const char *k = kv->key.via.str.ptr;
    uint32_t kl = kv->key.via.str.size;
    int found = -1;
    for (int j = 0; j < MANIFEST_N_KEYS && found < 0; j++)
      if (strlen(manifest_keys[j]) == kl &&
          memcmp(manifest_keys[j], k, kl) == 0)
        found = j;
    RETURN_IF(found < 0, d, STITCH_EFORMAT, "manifest: unknown key \"%.*s\"",
              (int)(kl < 32 ? kl : 32), k);
    RETURN_IF(vals[found] != NULL, d, STITCH_EFORMAT,
              "manifest: key \"%s\" appears twice", manifest_keys[found]);
    vals[found] = &kv->val;
  }
  for (int j = 0; j < MANIFEST_N_KEYS; j++)
    RETURN_IF(vals[j] == NULL, d, STITCH_EFORMAT,
              "manifest: key \"%s\" is missing", manifest_keys[j]);
  return 0;
}

static int parse_body(const msgpack_object *body, stitch_manifest *m,
                      stitch_diag *d) {
  const msgpack_object *v[MANIFEST_N_KEYS] = {0};
  CHECK_RC(collect_keys(body, v, d));
  CHECK_RC(get_bin32(v[0], "swarm", m->swarm.b, d));
  CHECK_RC(get_uint(v[1], "version", &m->version, d));
  CHECK_RC(get_uint(v[2], "parent", &m->parent_version, d));
  CHECK_RC(get_bin32(v[3], "parent_id", m->parent_id.b, d));
  CHECK_RC(get_uint(v[4], "time", &m->time_unix, d));
  CHECK_RC(get_bin32(v[5], "view", m->view.b, d));
  if (v[6]->type != MSGPACK_OBJECT_NIL)
    CHECK_RC(get_cstr(v[6], "meta", &m->meta, d));

  const msgpack_object_array *a = NULL;
  CHECK_RC(get_array(v[7], "tensors", STITCH_ST_MAX_TENSORS, &a, d));
  if (a->size > 0) {
    m->tensors = calloc(a->size, sizeof(*m->tensors));
    RETURN_IF(m->tensors == NULL, d, STITCH_ENOMEM, "out of memory");
  }
  m->n_tensors = a->size; /* set now, so that a failure frees the names */
  for (uint64_t i = 0; i < m->n_tensors; i++)
    CHECK_RC(parse_tensor(&a->ptr[i], i, &m->tensors[i], d));

  CHECK_RC(get_array(v[8], "objects", STITCH_MAX_OBJECTS, &a, d));
  if (a->size > 0) {
    m->objects = calloc(a->size, sizeof(*m->objects));
    RETURN_IF(m->objects == NULL, d, STITCH_ENOMEM, "out of memory");
  }
  m->n_objects = a->size;
  for (size_t oi = 0; oi < m->n_objects; oi++)
    CHECK_RC(parse_object(&a->ptr[oi], oi, m->n_tensors, &m->objects[oi], d));
  return 0;
}

/* Unpacks the signed body (which passed msgpack_check) into *out. */
static int parse(const outer *o, stitch_manifest **out, stitch_diag *d) {
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  msgpack_unpack_return ur =
      msgpack_unpack_next(&u, (const char *)o->body, o->body_len, &off);
  if (ur != MSGPACK_UNPACK_SUCCESS) {
    msgpack_unpacked_destroy(&u);
    return ur == MSGPACK_UNPACK_NOMEM_ERROR
               ? stitch_diag_set(d, STITCH_ENOMEM, "out of memory")
               : stitch_diag_set(d, STITCH_EFORMAT,
                                 "manifest: body: msgpack-c cannot read it");
  }
  stitch_manifest *m = calloc(1, sizeof(*m));
  uint64_t bytes[STITCH_MAX_OBJECTS];
  int rc = m == NULL ? stitch_diag_set(d, STITCH_ENOMEM, "out of memory")
                     : parse_body(&u.data, m, d);
  msgpack_unpacked_destroy(&u);
  if (rc == 0)
    rc = manifest_validate(m, STITCH_EFORMAT, bytes, d);
  if (rc != 0) {
    stitch_manifest_free(m);
    return rc;
  }
  for (size_t i = 0; i < m->n_objects; i++)
    m->objects[i].bytes = bytes[i];
  *out = m;
  return 0;
}

int stitch_manifest_open(const uint8_t *buf, size_t len,
                         const stitch_pubkey *swarm, stitch_manifest **out,
                         stitch_digest *id, stitch_diag *d) {
  RETURN_IF(out == NULL || swarm == NULL || (buf == NULL && len > 0), d,
            STITCH_EINVAL, "manifest: NULL argument");
  *out = NULL;
  RETURN_IF(len > STITCH_MANIFEST_MAX, d, STITCH_ELIMIT,
            "manifest: %zu bytes, more than %u", len, STITCH_MANIFEST_MAX);
  RETURN_IF(sodium_init() < 0, d, STITCH_EIO, "libsodium failed to start");
  outer o = {0};
  CHECK_RC(read_outer(buf, len, &o, d));
  /* Before the swarm and the signature: another format may lay out its
   * body and sign it differently, and the honest answer is "upgrade". */
  RETURN_IF(o.format != STITCH_MANIFEST_FORMAT, d, STITCH_EVERSION,
            "manifest: format %llu; this build reads format %d",
            (unsigned long long)o.format, STITCH_MANIFEST_FORMAT);
  size_t used;
  int rc = msgpack_check(o.body, o.body_len, MANIFEST_BODY_DEPTH, &used, d);
  if (rc != 0)
    return stitch_diag_prefix(d, rc, "manifest: body");
  RETURN_IF(used != o.body_len, d, STITCH_EFORMAT,
            "manifest: body: %zu bytes after its first object",
            o.body_len - used);

  /* The swarm first, so that a manifest of another swarm is named as
   * such rather than as a bad signature. */
  const uint8_t *named = NULL;
  CHECK_RC(find_swarm(o.body, o.body_len, &named, d));
  if (memcmp(named, swarm->b, STITCH_PUBKEY_BYTES) != 0) {
    char a[65], b[65];
    stitch_pubkey p;
    memcpy(p.b, named, sizeof(p.b));
    stitch_pubkey_hex(&p, a);
    stitch_pubkey_hex(swarm, b);
    return stitch_diag_set(d, STITCH_ESWARM,
                           "manifest: belongs to swarm %.16s..., expected "
                           "swarm %.16s...",
                           a, b);
  }
  CHECK_RC(verify(&o, swarm, d));
  CHECK_RC(parse(&o, out, d));
  if (id != NULL)
    stitch_hash(buf, len, id);
  return 0;
}
