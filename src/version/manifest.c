/* manifest.c: the rules a manifest must satisfy, signing, and freeing a
 * parsed one (proto/manifest.md). Reading is in manifest_parse.c.
 *
 * One function, manifest_validate, holds every rule on the fields, and
 * both the signer and the reader run it, so the publisher cannot sign a
 * manifest that a node would refuse. */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "version/manifest_internal.h"

#include "codec/delta_internal.h"
#include "common/diag.h"

#include <msgpack.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

const char *const manifest_keys[MANIFEST_N_KEYS] = {
    "swarm", "version", "parent",  "parent_id", "time",
    "view",  "meta",    "tensors", "objects"};

int manifest_nbytes(stitch_dtype dtype, int ndim, const uint64_t *shape,
                    uint64_t *nbytes) {
  if (dtype <= STITCH_DT_INVALID || dtype >= STITCH_DT_COUNT_ || ndim < 0 ||
      ndim > STITCH_MAX_DIMS)
    return -1;
  uint64_t n = stitch_dtype_size(dtype);
  for (int k = 0; k < ndim; k++) {
    if (shape[k] != 0 && n > UINT64_MAX / shape[k])
      return -1;
    n *= shape[k];
  }
  *nbytes = n;
  return 0;
}

static int is_zero(const stitch_digest *g) {
  uint8_t acc = 0;
  for (size_t i = 0; i < sizeof(g->b); i++)
    acc |= g->b[i];
  return acc == 0;
}

static int same(const stitch_digest *a, const stitch_digest *b) {
  return memcmp(a->b, b->b, sizeof(a->b)) == 0;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- the rules ---------------------------------------------------------- */

static int check_tensors(const stitch_manifest *m, int bad, stitch_diag *d) {
  RETURN_IF(m->n_tensors > STITCH_ST_MAX_TENSORS, d, STITCH_ELIMIT,
            "manifest: %llu tensors, more than %u",
            (unsigned long long)m->n_tensors, STITCH_ST_MAX_TENSORS);
  RETURN_IF(m->n_tensors > 0 && m->tensors == NULL, d, bad,
            "manifest: tensors is NULL");
  for (uint64_t i = 0; i < m->n_tensors; i++) {
    const stitch_mtensor *t = &m->tensors[i];
    RETURN_IF(t->name == NULL, d, bad, "manifest: tensor %llu: no name",
              (unsigned long long)i);
    size_t nl = strnlen(t->name, STITCH_ST_MAX_NAME + 1);
    RETURN_IF(nl == 0 || nl > STITCH_ST_MAX_NAME, d, bad,
              "manifest: tensor %llu: name of %s bytes (1..%u)",
              (unsigned long long)i, nl == 0 ? "0" : "over 4096",
              STITCH_ST_MAX_NAME);
    RETURN_IF(t->dtype <= STITCH_DT_INVALID || t->dtype >= STITCH_DT_COUNT_, d,
              bad, "manifest: tensor %llu: unknown dtype %d",
              (unsigned long long)i, (int)t->dtype);
    RETURN_IF(t->ndim < 0 || t->ndim > STITCH_MAX_DIMS, d, bad,
              "manifest: tensor %llu: %d dimensions (0..%d)",
              (unsigned long long)i, t->ndim, STITCH_MAX_DIMS);
    uint64_t nb;
    RETURN_IF(manifest_nbytes(t->dtype, t->ndim, t->shape, &nb) != 0, d, bad,
              "manifest: tensor %llu: shape x dtype size passes 2^64",
              (unsigned long long)i);
    RETURN_IF(nb != t->nbytes, d, bad,
              "manifest: tensor %llu: nbytes %llu, but shape x dtype size "
              "is %llu",
              (unsigned long long)i, (unsigned long long)t->nbytes,
              (unsigned long long)nb);
  }
  if (m->n_tensors < 2)
    return 0;
  /* Unique names: sort pointers and compare neighbours, O(n log n). */
  const char **v = malloc((size_t)m->n_tensors * sizeof(*v));
  RETURN_IF(v == NULL, d, STITCH_ENOMEM, "out of memory");
  for (uint64_t i = 0; i < m->n_tensors; i++)
    v[i] = m->tensors[i].name;
  qsort(v, (size_t)m->n_tensors, sizeof(*v), cmp_name);
  int rc = 0;
  for (uint64_t i = 1; i < m->n_tensors && rc == 0; i++)
    if (strcmp(v[i - 1], v[i]) == 0)
      rc = stitch_diag_set(
          d, bad, "manifest: tensor name \"%.64s\" appears twice", v[i]);
  free(v);
  return rc;
}

/* Checks each tensor's flags in object o and sets *blocks to the object's
 * block count, computed as stitch_object_blocks does but with overflow
 * checks, so that stitch_object_blocks is safe on any manifest that
 * passed. */
static int check_tflags(const stitch_manifest *m, size_t oi, int bad,
                        uint64_t *blocks, stitch_diag *d) {
  const stitch_object *o = &m->objects[oi];
  RETURN_IF(m->n_tensors > 0 && o->tflags == NULL, d, bad,
            "manifest: object %zu: tflags is NULL", oi);
  uint64_t total = 0, B = 1ull << o->block_log2;
  for (uint64_t i = 0; i < m->n_tensors; i++) {
    const stitch_mtensor *t = &m->tensors[i];
    uint8_t f = o->tflags[i];
    RETURN_IF(f & ~(DELTA_TF_NIBBLE | DELTA_TF_NEW), d, bad,
              "manifest: object %zu: tensor %llu: unknown flags 0x%02x", oi,
              (unsigned long long)i, f);
    RETURN_IF((f & DELTA_TF_NIBBLE) && stitch_dtype_size(t->dtype) != 1, d, bad,
              "manifest: object %zu: tensor %llu: NIBBLE on a %s tensor "
              "(1-byte dtypes only)",
              oi, (unsigned long long)i, stitch_dtype_name(t->dtype));
    RETURN_IF(o->kind == STITCH_OBJ_ANCHOR && !(f & DELTA_TF_NEW), d, bad,
              "manifest: object %zu: anchor, but tensor %llu is not NEW", oi,
              (unsigned long long)i);
    uint64_t s;
    if (f & DELTA_TF_NIBBLE) {
      RETURN_IF(t->nbytes > UINT64_MAX / 2, d, bad,
                "manifest: object %zu: tensor %llu: too many symbols", oi,
                (unsigned long long)i);
      s = 2 * t->nbytes;
    } else {
      s = t->nbytes / stitch_dtype_size(t->dtype);
    }
    uint64_t nb = s / B + (s % B != 0);
    RETURN_IF(total > UINT64_MAX - nb, d, bad,
              "manifest: object %zu: block count passes 2^64", oi);
    total += nb;
  }
  *blocks = total;
  return 0;
}

static int check_base(const stitch_manifest *m, size_t oi, int bad,
                      const stitch_digest *empty_view, stitch_diag *d) {
  const stitch_object *o = &m->objects[oi];
  unsigned long long bv = (unsigned long long)o->base_version;
  unsigned long long pv = (unsigned long long)m->parent_version;
  switch (o->kind) {
  case STITCH_OBJ_ANCHOR:
    RETURN_IF(bv != 0 || !is_zero(&o->base_id), d, bad,
              "manifest: object %zu: an anchor with base version %llu or a "
              "base id (it has no base)",
              oi, bv);
    RETURN_IF(!same(&o->base_view, empty_view), d, bad,
              "manifest: object %zu: an anchor's base view must be the "
              "empty view's digest",
              oi);
    return 0;
  case STITCH_OBJ_DELTA:
    RETURN_IF(pv == 0, d, bad,
              "manifest: object %zu: a delta, but the version has no parent",
              oi);
    RETURN_IF(bv != pv, d, bad,
              "manifest: object %zu: delta from version %llu, but the parent "
              "is %llu",
              oi, bv, pv);
    RETURN_IF(!same(&o->base_id, &m->parent_id), d, bad,
              "manifest: object %zu: a delta whose base id is not the "
              "parent_id",
              oi);
    return 0;
  case STITCH_OBJ_CUMULATIVE:
    RETURN_IF(bv < 1 || bv >= pv, d, bad,
              "manifest: object %zu: cumulative from version %llu; it needs "
              "1 <= base < parent (%llu)",
              oi, bv, pv);
    RETURN_IF(is_zero(&o->base_id), d, bad,
              "manifest: object %zu: cumulative with a zero base id", oi);
    return 0;
  default:
    return stitch_diag_set(d, bad, "manifest: object %zu: unknown kind %d", oi,
                           (int)o->kind);
  }
}

static int check_object(const stitch_manifest *m, size_t oi, int bad,
                        const stitch_digest *empty_view, uint64_t *bytes,
                        stitch_diag *d) {
  const stitch_object *o = &m->objects[oi];
  CHECK_RC(check_base(m, oi, bad, empty_view, d));
  RETURN_IF(o->block_log2 < DELTA_MIN_BLOCK_LOG2 ||
                o->block_log2 > DELTA_MAX_BLOCK_LOG2,
            d, bad, "manifest: object %zu: block_log2 %u (%d..%d)", oi,
            o->block_log2, DELTA_MIN_BLOCK_LOG2, DELTA_MAX_BLOCK_LOG2);
  uint64_t blocks = 0;
  CHECK_RC(check_tflags(m, oi, bad, &blocks, d));
  RETURN_IF(o->n_chunks > STITCH_MAX_CHUNKS, d, STITCH_ELIMIT,
            "manifest: object %zu: %llu chunks, more than %u", oi,
            (unsigned long long)o->n_chunks, STITCH_MAX_CHUNKS);
  RETURN_IF(o->n_chunks > 0 && o->chunks == NULL, d, bad,
            "manifest: object %zu: chunks is NULL", oi);
  uint64_t sum = 0, end = 0; /* end: first block after the last chunk */
  for (uint64_t c = 0; c < o->n_chunks; c++) {
    const stitch_chunk_ref *k = &o->chunks[c];
    unsigned long long cc = (unsigned long long)c;
    RETURN_IF(k->size < 1 || k->size > STITCH_CHUNK_MAX, d, bad,
              "manifest: object %zu chunk %llu: size %llu (1..%u)", oi, cc,
              (unsigned long long)k->size, STITCH_CHUNK_MAX);
    RETURN_IF(k->n_blocks < 1, d, bad,
              "manifest: object %zu chunk %llu: covers no blocks", oi, cc);
    RETURN_IF(c > 0 && k->first_block < end, d, bad,
              "manifest: object %zu chunk %llu: range overlaps or precedes "
              "chunk %llu",
              oi, cc, cc - 1);
    RETURN_IF(k->first_block > blocks || k->n_blocks > blocks - k->first_block,
              d, bad,
              "manifest: object %zu chunk %llu: blocks %llu+%llu beyond the "
              "object's %llu",
              oi, cc, (unsigned long long)k->first_block,
              (unsigned long long)k->n_blocks, (unsigned long long)blocks);
    end = k->first_block + k->n_blocks;
    sum += k->size; /* at most 2^24 x 2^25: no overflow */
  }
  *bytes = sum;
  return 0;
}

int manifest_validate(const stitch_manifest *m, int bad, uint64_t *obj_bytes,
                      stitch_diag *d) {
  unsigned long long v = (unsigned long long)m->version;
  unsigned long long pv = (unsigned long long)m->parent_version;
  RETURN_IF(v < 1, d, bad, "manifest: version 0 (versions start at 1)");
  RETURN_IF(pv >= v, d, bad, "manifest: parent %llu is not below version %llu",
            pv, v);
  RETURN_IF(pv == 0 && !is_zero(&m->parent_id), d, bad,
            "manifest: no parent, but a nonzero parent_id");
  RETURN_IF(pv != 0 && is_zero(&m->parent_id), d, bad,
            "manifest: parent %llu with a zero parent_id", pv);
  CHECK_RC(check_tensors(m, bad, d));
  RETURN_IF(m->n_objects < 1, d, bad, "manifest: no objects");
  RETURN_IF(m->n_objects > STITCH_MAX_OBJECTS, d, STITCH_ELIMIT,
            "manifest: %llu objects, more than %d",
            (unsigned long long)m->n_objects, STITCH_MAX_OBJECTS);
  RETURN_IF(m->objects == NULL, d, bad, "manifest: objects is NULL");
  /* What an anchor applies to: the digest of a view of no tensors. */
  stitch_digest empty;
  RETURN_IF(stitch_view_digest_from(0, NULL, NULL, &empty) != 0, d,
            STITCH_ENOMEM, "out of memory");
  for (size_t oi = 0; oi < m->n_objects; oi++) {
    uint64_t bytes = 0;
    CHECK_RC(check_object(m, oi, bad, &empty, &bytes, d));
    if (obj_bytes != NULL)
      obj_bytes[oi] = bytes;
  }
  return 0;
}

/* ---- signing ------------------------------------------------------------ */

static int pack_bin(msgpack_packer *pk, const void *p, size_t n) {
  return msgpack_pack_bin_with_body(pk, p, n);
}

static int pack_str(msgpack_packer *pk, const char *s) {
  return msgpack_pack_str_with_body(pk, s, strlen(s));
}

/* The body map, keys in manifest_keys order. msgpack-c's packer returns
 * -1 only when its buffer cannot grow; P() or's the results together, one
 * statement per call so that the calls run in order. */
#define P(call) e |= (call)
static int pack_body(const stitch_manifest *m, msgpack_packer *pk) {
  int e = 0;
  P(msgpack_pack_map(pk, MANIFEST_N_KEYS));
  P(pack_str(pk, manifest_keys[0]));
  P(pack_bin(pk, m->swarm.b, sizeof(m->swarm.b)));
  P(pack_str(pk, manifest_keys[1]));
  P(msgpack_pack_uint64(pk, m->version));
  P(pack_str(pk, manifest_keys[2]));
  P(msgpack_pack_uint64(pk, m->parent_version));
  P(pack_str(pk, manifest_keys[3]));
  P(pack_bin(pk, m->parent_id.b, STITCH_DIGEST_BYTES));
  P(pack_str(pk, manifest_keys[4]));
  P(msgpack_pack_uint64(pk, m->time_unix));
  P(pack_str(pk, manifest_keys[5]));
  P(pack_bin(pk, m->view.b, STITCH_DIGEST_BYTES));
  P(pack_str(pk, manifest_keys[6]));
  P(m->meta != NULL ? pack_str(pk, m->meta) : msgpack_pack_nil(pk));
  P(pack_str(pk, manifest_keys[7]));
  P(msgpack_pack_array(pk, (size_t)m->n_tensors));
  for (uint64_t i = 0; i < m->n_tensors && e == 0; i++) {
    const stitch_mtensor *t = &m->tensors[i];
    P(msgpack_pack_array(pk, 4));
    P(pack_str(pk, t->name));
    P(msgpack_pack_uint64(pk, (uint64_t)t->dtype));
    P(msgpack_pack_array(pk, (size_t)t->ndim));
    for (int k = 0; k < t->ndim; k++)
      P(msgpack_pack_uint64(pk, t->shape[k]));
    P(pack_bin(pk, t->digest.b, STITCH_DIGEST_BYTES));
  }
  P(pack_str(pk, manifest_keys[8]));
  P(msgpack_pack_array(pk, (size_t)m->n_objects));
  for (uint64_t oi = 0; oi < m->n_objects && e == 0; oi++) {
    const stitch_object *o = &m->objects[oi];
    P(msgpack_pack_array(pk, 7));
    P(msgpack_pack_uint64(pk, (uint64_t)o->kind));
    P(msgpack_pack_uint64(pk, o->base_version));
    P(pack_bin(pk, o->base_id.b, STITCH_DIGEST_BYTES));
    P(pack_bin(pk, o->base_view.b, STITCH_DIGEST_BYTES));
    P(msgpack_pack_uint64(pk, o->block_log2));
    P(pack_bin(pk, o->tflags, (size_t)m->n_tensors));
    P(msgpack_pack_array(pk, (size_t)o->n_chunks));
    for (uint64_t c = 0; c < o->n_chunks && e == 0; c++) {
      const stitch_chunk_ref *k = &o->chunks[c];
      P(msgpack_pack_array(pk, 4));
      P(pack_bin(pk, k->hash.b, STITCH_DIGEST_BYTES));
      P(msgpack_pack_uint64(pk, k->size));
      P(msgpack_pack_uint64(pk, k->first_block));
      P(msgpack_pack_uint64(pk, k->n_blocks));
    }
  }
  return e == 0 ? 0 : STITCH_ENOMEM;
}

/* The signed manifest: [format, body, signature]. */
static int pack_outer(msgpack_packer *pk, const uint8_t *body, size_t len,
                      const uint8_t sig[STITCH_SIG_BYTES]) {
  int e = 0;
  P(msgpack_pack_array(pk, 3));
  P(msgpack_pack_uint64(pk, STITCH_MANIFEST_FORMAT));
  P(pack_bin(pk, body, len));
  P(pack_bin(pk, sig, STITCH_SIG_BYTES));
  return e == 0 ? 0 : STITCH_ENOMEM;
}
#undef P

/* Checks that sk's seed gives the public key m->swarm (and the public half
 * stored in sk, which Ed25519 signing hashes). */
static int check_signer(const stitch_manifest *m, const stitch_seckey *sk,
                        stitch_diag *d) {
  uint8_t seed[crypto_sign_SEEDBYTES], sk2[crypto_sign_SECRETKEYBYTES];
  stitch_pubkey pk;
  crypto_sign_ed25519_sk_to_seed(seed, sk->b);
  crypto_sign_seed_keypair(pk.b, sk2, seed);
  int ok = memcmp(sk2, sk->b, sizeof(sk2)) == 0;
  sodium_memzero(seed, sizeof(seed));
  sodium_memzero(sk2, sizeof(sk2));
  RETURN_IF(!ok, d, STITCH_EINVAL,
            "manifest: the secret key's public half does not match its "
            "seed");
  if (memcmp(pk.b, m->swarm.b, sizeof(pk.b)) != 0) {
    char a[65], b[65];
    stitch_pubkey_hex(&pk, a);
    stitch_pubkey_hex(&m->swarm, b);
    return stitch_diag_set(d, STITCH_EINVAL,
                           "manifest: the secret key is swarm %.16s..., but "
                           "the manifest names swarm %.16s...",
                           a, b);
  }
  return 0;
}

int stitch_manifest_sign(const stitch_manifest *m, const stitch_seckey *sk,
                         uint8_t **out, size_t *out_len, stitch_digest *id,
                         stitch_diag *d) {
  RETURN_IF(m == NULL || sk == NULL || out == NULL || out_len == NULL, d,
            STITCH_EINVAL, "manifest: NULL argument");
  *out = NULL;
  *out_len = 0;
  RETURN_IF(sodium_init() < 0, d, STITCH_EIO, "libsodium failed to start");
  CHECK_RC(check_signer(m, sk, d));
  CHECK_RC(manifest_validate(m, STITCH_EINVAL, NULL, d));
  RETURN_IF(m->meta != NULL && strlen(m->meta) > STITCH_MANIFEST_MAX, d,
            STITCH_ELIMIT, "manifest: metadata larger than a manifest may be");

  /* The signing input is the domain string, its 0 byte, and the body:
   * packing the body right after the domain makes it contiguous. */
  msgpack_sbuffer msg, outer;
  msgpack_sbuffer_init(&msg);
  msgpack_sbuffer_init(&outer);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &msg, msgpack_sbuffer_write);
  int rc = msgpack_sbuffer_write(&msg, MANIFEST_SIGN_DOMAIN,
                                 MANIFEST_SIGN_DOMAIN_LEN) == 0
               ? pack_body(m, &pk)
               : STITCH_ENOMEM;
  size_t body_len = rc == 0 ? msg.size - MANIFEST_SIGN_DOMAIN_LEN : 0;
  if (rc == STITCH_ENOMEM)
    rc = stitch_diag_set(d, rc, "out of memory");
  if (rc == 0 && body_len > STITCH_MANIFEST_MAX)
    rc = stitch_diag_set(d, STITCH_ELIMIT,
                         "manifest: body of %zu bytes, more than %u", body_len,
                         STITCH_MANIFEST_MAX);
  if (rc == 0) {
    uint8_t sig[STITCH_SIG_BYTES];
    crypto_sign_detached(sig, NULL, (const uint8_t *)msg.data, msg.size, sk->b);
    msgpack_packer_init(&pk, &outer, msgpack_sbuffer_write);
    if (pack_outer(&pk, (const uint8_t *)msg.data + MANIFEST_SIGN_DOMAIN_LEN,
                   body_len, sig) != 0)
      rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  }
  if (rc == 0 && outer.size > STITCH_MANIFEST_MAX)
    rc = stitch_diag_set(d, STITCH_ELIMIT,
                         "manifest: %zu signed bytes, more than %u", outer.size,
                         STITCH_MANIFEST_MAX);
  msgpack_sbuffer_destroy(&msg);
  if (rc != 0) {
    msgpack_sbuffer_destroy(&outer);
    return rc;
  }
  *out_len = outer.size;
  *out = (uint8_t *)msgpack_sbuffer_release(&outer); /* malloc'd */
  if (id != NULL)
    stitch_hash(*out, *out_len, id);
  return 0;
}

/* ---- freeing ------------------------------------------------------------ */

/* Only for manifests from stitch_manifest_open, which allocates every
 * pointer separately with malloc. The publisher builds its manifests with
 * its own allocations and frees them itself; it never calls this. */
void stitch_manifest_free(stitch_manifest *m) {
  if (m == NULL)
    return;
  if (m->tensors != NULL)
    for (uint64_t i = 0; i < m->n_tensors; i++)
      free(m->tensors[i].name);
  free(m->tensors);
  if (m->objects != NULL)
    for (uint64_t i = 0; i < m->n_objects; i++) {
      free(m->objects[i].tflags);
      free(m->objects[i].chunks);
    }
  free(m->objects);
  free(m->meta);
  free(m);
}
