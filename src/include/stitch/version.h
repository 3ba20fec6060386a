/* stitch/version.h: keys, signed manifests, chunks and patches
 * (proto/manifest.md, proto/chunk.md, docs/versions.md).
 *
 * A version is an immutable statement of what the served weights are after
 * one optimizer step. Its manifest lists every tensor with its digest and one
 * or more objects that produce it: a delta from the parent, an anchor (a full
 * snapshot) or a cumulative delta from an older version. Each object is a
 * delta (proto/delta.md) cut into chunks that decode independently; a chunk
 * is named by its BLAKE2b-256 hash. The trainer's Ed25519 key signs the
 * manifest and names the swarm; the hash of the signed bytes names the
 * version. */
#ifndef STITCH_VERSION_H
#define STITCH_VERSION_H

#include "stitch/delta.h"
#include "stitch/digest.h"
#include "stitch/safetensors.h"

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

/* ---- Keys ------------------------------------------------------------- */

#define STITCH_PUBKEY_BYTES 32
#define STITCH_SECKEY_BYTES 64 /* libsodium's form: seed then public key */
#define STITCH_SIG_BYTES 64

typedef struct stitch_pubkey {
  uint8_t b[STITCH_PUBKEY_BYTES];
} stitch_pubkey;

typedef struct stitch_seckey {
  uint8_t b[STITCH_SECKEY_BYTES];
} stitch_seckey;

/* A fresh Ed25519 pair from the OS's randomness. */
int stitch_keygen(stitch_pubkey *pk, stitch_seckey *sk);
/* Writes PREFIX.key (mode 0600) and PREFIX.pub as one line of text each;
 * refuses to overwrite either (STITCH_EEXISTS). */
int stitch_key_write(const char *prefix, const stitch_pubkey *pk,
                     const stitch_seckey *sk, stitch_diag *d);
/* pk may be NULL. Checks that the stored public half matches the seed. */
int stitch_seckey_read(const char *path, stitch_seckey *sk, stitch_pubkey *pk,
                       stitch_diag *d);
int stitch_pubkey_read(const char *path, stitch_pubkey *pk, stitch_diag *d);
/* 64 hex digits and a NUL. */
void stitch_pubkey_hex(const stitch_pubkey *pk, char out[65]);

/* ---- Manifests -------------------------------------------------------- */

#define STITCH_MANIFEST_FORMAT 1
#define STITCH_MANIFEST_MAX (64u << 20)  /* signed bytes */
#define STITCH_CHUNK_MAX (32u << 20)     /* bytes in one chunk */
#define STITCH_CHUNK_DEFAULT (512u << 10) /* proto/chunk.md says why */
#define STITCH_MAX_OBJECTS 8
#define STITCH_MAX_CHUNKS (1u << 24)

typedef enum stitch_obj_kind {
  STITCH_OBJ_DELTA = 1,      /* from the parent version */
  STITCH_OBJ_ANCHOR = 2,     /* from nothing: a full snapshot */
  STITCH_OBJ_CUMULATIVE = 3  /* from an older version than the parent */
} stitch_obj_kind;

const char *stitch_obj_kind_name(int kind);

/* What one chunk is and covers: blocks [first_block, first_block +
 * n_blocks) of its object, counting every block of every tensor in manifest
 * order (a tensor of S symbols has ceil(S / 2^block_log2) blocks). Blocks
 * of the range that the chunk does not list are unchanged (SAME). */
typedef struct stitch_chunk_ref {
  stitch_digest hash; /* BLAKE2b-256 of the chunk's bytes */
  uint64_t size;
  uint64_t first_block;
  uint64_t n_blocks;
} stitch_chunk_ref;

typedef struct stitch_object {
  stitch_obj_kind kind;
  uint64_t base_version;   /* 0 for an anchor */
  stitch_digest base_id;   /* manifest hash of the base version; zero for
                              an anchor, never for the others */
  stitch_digest base_view; /* view digest it applies to (an anchor: the
                              empty view's, which the reader checks) */
  uint32_t block_log2;
  uint8_t *tflags;         /* [n_tensors]: delta tensor flags (NIBBLE 1,
                              NEW 2; proto/delta.md) */
  uint64_t n_chunks;
  stitch_chunk_ref *chunks;
  uint64_t bytes;          /* sum of chunk sizes */
} stitch_object;

typedef struct stitch_mtensor {
  char *name;
  stitch_dtype dtype;
  int ndim;
  uint64_t shape[STITCH_MAX_DIMS];
  uint64_t nbytes;         /* derived: dtype size x numel */
  stitch_digest digest;    /* tensor digest after this version */
} stitch_mtensor;

/* Everything in a manifest. A parsed manifest owns every pointer in it;
 * the publisher builds one with its own allocations and only reads it. */
typedef struct stitch_manifest {
  stitch_pubkey swarm;
  uint64_t version;        /* >= 1 */
  uint64_t parent_version; /* 0: none */
  stitch_digest parent_id; /* zero when none */
  uint64_t time_unix;      /* when it was published (informational) */
  stitch_digest view;      /* view digest after this version */
  char *meta;              /* the view's __metadata__ JSON, or NULL */
  uint64_t n_tensors;
  stitch_mtensor *tensors;
  uint64_t n_objects;      /* 1..STITCH_MAX_OBJECTS; objects[0] is primary */
  stitch_object *objects;
} stitch_manifest;

/* Encodes M as msgpack, signs it with SK (whose public half must equal
 * m->swarm) and returns the signed bytes (*out malloc'd, caller frees)
 * and their hash, the version's id (id may be NULL). Each tensor's nbytes
 * must equal its dtype size times its element count; objects' bytes are
 * recomputed from their chunks, not read. */
int stitch_manifest_sign(const stitch_manifest *m, const stitch_seckey *sk,
                         uint8_t **out, size_t *out_len, stitch_digest *id,
                         stitch_diag *d);
/* Checks the format (STITCH_EVERSION), the swarm key (STITCH_ESWARM), the
 * signature (STITCH_ESIGNATURE) and every field, in that order, then
 * parses. Nothing is allocated from a count before
 * the bytes it claims are seen to exist. *out owns its strings and arrays
 * and does not point into BUF. id may be NULL. */
int stitch_manifest_open(const uint8_t *buf, size_t len,
                         const stitch_pubkey *swarm, stitch_manifest **out,
                         stitch_digest *id, stitch_diag *d);
/* Only for manifests from stitch_manifest_open; NULL is fine. */
void stitch_manifest_free(stitch_manifest *m);
/* BLAKE2b-256 of BUF (a manifest's id, a chunk's name). */
void stitch_hash(const uint8_t *buf, size_t len, stitch_digest *out);
/* Total blocks of object o, counting as stitch_chunk_ref describes. */
uint64_t stitch_object_blocks(const stitch_manifest *m, const stitch_object *o);

/* ---- Patches: one object's chunks, verified and applied --------------- */

typedef struct stitch_patch stitch_patch;

/* Starts assembling object OBJ of M, which must outlive the patch. */
int stitch_patch_new(const stitch_manifest *m, size_t obj, stitch_patch **out,
                     stitch_diag *d);
void stitch_patch_free(stitch_patch *p);
/* Checks BUF against chunk INDEX's size and hash (STITCH_ECHECKSUM) and
 * parses it; the patch keeps pointers into BUF, which must outlive it.
 * Adding a chunk twice is an error. */
int stitch_patch_add(stitch_patch *p, size_t index, const uint8_t *buf,
                     size_t len, stitch_diag *d);
/* Chunks not added yet. */
uint64_t stitch_patch_missing(const stitch_patch *p);

/* The changed blocks of a complete patch, in manifest order: none while
 * chunks are missing; block_at zeroes *out for a K out of range. */
typedef struct stitch_patch_block {
  uint64_t tensor;   /* index into the manifest's tensors */
  uint64_t byte_off; /* within the tensor */
  uint64_t byte_len;
} stitch_patch_block;

uint64_t stitch_patch_block_count(const stitch_patch *p);
void stitch_patch_block_at(const stitch_patch *p, uint64_t k,
                           stitch_patch_block *out);
/* Bytes of scratch that stitch_patch_decode_block needs. */
size_t stitch_patch_scratch_bytes(const stitch_patch *p);
/* Decodes changed block K in place. BLOCK holds the block's byte_len
 * bytes of the base (anything, for a NEW tensor) and receives the result's;
 * it may be a copy anywhere (blocks decode independently), which is how an
 * applier journals a block before touching the weights. On error BLOCK may
 * be partly written. */
int stitch_patch_decode_block(const stitch_patch *p, uint64_t k,
                              uint8_t *block, uint8_t *scratch,
                              stitch_diag *d);
/* Every changed block on up to THREADS threads (0: all CPUs). data[i]
 * and nbytes[i] are tensor i of the manifest. Digests are the caller's. */
int stitch_patch_apply(const stitch_patch *p, uint8_t *const *data,
                       const uint64_t *nbytes, unsigned threads,
                       stitch_diag *d);

/* Cuts a parsed delta into chunks of about TARGET bytes (whole blocks; a
 * block larger than TARGET gets a chunk of its own) and fills *obj's
 * block_log2, tflags, n_chunks, chunks and bytes (kind and base fields are
 * the caller's). *bufs receives n_chunks malloc'd chunk buffers, whose
 * sizes are obj->chunks[i].size. Free with stitch_object_clear and
 * stitch_chunks_free. A TARGET above STITCH_CHUNK_MAX is STITCH_EINVAL, a
 * single block above it STITCH_ELIMIT; on error *bufs is NULL and obj is
 * cleared. */
int stitch_chunks_from_delta(const stitch_delta *dl, size_t target,
                             stitch_object *obj, uint8_t ***bufs,
                             stitch_diag *d);
void stitch_chunks_free(uint8_t **bufs, uint64_t n);
/* Frees what stitch_chunks_from_delta put in obj. */
void stitch_object_clear(stitch_object *obj);

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
