/* fuzz_manifest.c: stitch_manifest_open on arbitrary bytes.
 *
 * Byte 0 of the input picks a mode; the rest is the payload:
 *  - even: the payload is a signed manifest, opened as given with the swarm
 *    key below. Mutations stop at the signature, so this mode exercises the
 *    framing, msgpack_check and the checks made before the signature;
 *  - odd: the payload is a manifest body. The harness signs it with the
 *    fixed secret key and wraps it as [1, body, signature], the way any
 *    holder of the swarm key could, so that mutations reach the body's
 *    unpacking and every rule. Nothing in the library is relaxed: the
 *    signature is real.
 *
 * The key is derived from a fixed seed, so the committed seeds
 * (gen_corpus.c, gen_manifest, which uses the same seed) verify.
 *
 * Checks: a refusal returns a known STITCH_E* code with a message and no
 * manifest. A manifest that opens must have the id stitch_hash gives, keep
 * its chunk ranges inside stitch_object_blocks and add up its bytes; it
 * must sign again (the signer runs the reader's rules), the result must
 * open, and signing that must give the same bytes (the encoding is a fixed
 * point). Any violation abort()s. */
#include "fuzz/fuzz_common.h"

#include <sodium.h>

/* The 32-byte seed of the fuzzing key; gen_corpus.c has the same. */
#define FZ_MANIFEST_SEED "stitch fuzz_manifest fixed seed!"

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "fuzz_manifest: check failed: %s (line %d)\n", #c,       \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static stitch_pubkey pk;
static stitch_seckey sk;

static void init_key(void) {
  static int done;
  if (done)
    return;
  CHECK(sodium_init() >= 0);
  CHECK(sizeof(FZ_MANIFEST_SEED) - 1 == crypto_sign_SEEDBYTES);
  crypto_sign_seed_keypair(pk.b, sk.b, (const uint8_t *)FZ_MANIFEST_SEED);
  done = 1;
}

static void check_err(int rc, const stitch_diag *d, stitch_manifest *m) {
  CHECK(rc < 0 && strcmp(stitch_errname(rc), "EUNKNOWN") != 0);
  CHECK(memchr(d->msg, 0, sizeof(d->msg)) != NULL && d->msg[0] != 0);
  CHECK(m == NULL);
}

/* [1, bin32 body, bin8 signature over "stitch-manifest-v1" 0x00 body]. */
static uint8_t *wrap(const uint8_t *body, size_t len, size_t *out_len) {
  static const char dom[] = "stitch-manifest-v1";
  uint8_t *msg = malloc(sizeof(dom) + len);
  uint8_t *out = malloc(len + 8 + 2 + 64);
  CHECK(msg != NULL && out != NULL);
  memcpy(msg, dom, sizeof(dom)); /* with its 0 byte */
  if (len > 0)
    memcpy(msg + sizeof(dom), body, len);
  size_t p = 0;
  out[p++] = 0x93;
  out[p++] = 0x01;
  out[p++] = 0xc6;
  for (int i = 3; i >= 0; i--)
    out[p++] = (uint8_t)(len >> (8 * i));
  if (len > 0)
    memcpy(out + p, body, len);
  p += len;
  out[p++] = 0xc4;
  out[p++] = 64;
  crypto_sign_detached(out + p, NULL, msg, sizeof(dom) + len, sk.b);
  free(msg);
  *out_len = p + 64;
  return out;
}

static void check_opened(const uint8_t *buf, size_t len,
                         const stitch_manifest *m, const stitch_digest *id) {
  stitch_digest h;
  stitch_hash(buf, len, &h);
  CHECK(memcmp(h.b, id->b, 32) == 0);
  CHECK(m->version >= 1 && m->parent_version < m->version);
  CHECK(m->n_objects >= 1 && m->n_objects <= STITCH_MAX_OBJECTS);
  for (uint64_t i = 0; i < m->n_tensors; i++)
    CHECK(m->tensors[i].name != NULL && m->tensors[i].name[0] != 0);
  for (uint64_t oi = 0; oi < m->n_objects; oi++) {
    const stitch_object *o = &m->objects[oi];
    uint64_t blocks = stitch_object_blocks(m, o), sum = 0, end = 0;
    for (uint64_t c = 0; c < o->n_chunks; c++) {
      const stitch_chunk_ref *k = &o->chunks[c];
      CHECK(k->first_block >= end && k->n_blocks >= 1);
      CHECK(k->first_block + k->n_blocks <= blocks);
      end = k->first_block + k->n_blocks;
      sum += k->size;
    }
    CHECK(sum == o->bytes);
  }

  /* Signs again, opens that, signs that: the same bytes. */
  stitch_diag d = {{0}};
  uint8_t *s1, *s2;
  size_t l1, l2;
  int rc = stitch_manifest_sign(m, &sk, &s1, &l1, NULL, &d);
  if (rc == STITCH_ENOMEM) /* under the fuzzer's memory limit */
    return;
  CHECK(rc == 0);
  stitch_manifest *m2 = NULL;
  CHECK(stitch_manifest_open(s1, l1, &pk, &m2, NULL, &d) == 0);
  CHECK(stitch_manifest_sign(m2, &sk, &s2, &l2, NULL, &d) == 0);
  CHECK(l1 == l2 && memcmp(s1, s2, l1) == 0);
  stitch_manifest_free(m2);
  free(s1);
  free(s2);
}

static void run(const uint8_t *buf, size_t len) {
  /* An exact-size copy, so that ASan sees a read past the end. */
  uint8_t *copy = malloc(len ? len : 1);
  CHECK(copy != NULL);
  if (len > 0)
    memcpy(copy, buf, len);
  stitch_manifest *m = NULL;
  stitch_digest id;
  stitch_diag d = {{0}};
  int rc = stitch_manifest_open(copy, len, &pk, &m, &id, &d);
  if (rc != 0) {
    check_err(rc, &d, m);
  } else {
    check_opened(copy, len, m, &id);
    stitch_manifest_free(m);
  }
  free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  init_key();
  if (size == 0)
    return 0;
  if ((data[0] & 1) == 0) {
    run(data + 1, size - 1);
  } else {
    size_t len;
    uint8_t *signed_ = wrap(data + 1, size - 1, &len);
    run(signed_, len);
    free(signed_);
  }
  return 0;
}
