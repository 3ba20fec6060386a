/* stitch/delta.h: the delta codec (proto/delta.md, docs/codec.md).
 *
 * A delta turns one checkpoint (the base) into another (the result), bit for
 * bit. Each tensor is cut into blocks of 2^block_log2 symbols that decode
 * independently. A block is unchanged, sparse (change mask and value steps,
 * arithmetic-coded with contexts drawn from the base's own values), or dense
 * (XOR with the base or the new bytes alone, split into byte planes, zstd),
 * whichever is smallest. Every block and the index carry an XXH3-64 checksum;
 * the delta names the view digests of its base and of its result, and apply
 * refuses any other base and verifies the result. */
#ifndef STITCH_DELTA_H
#define STITCH_DELTA_H

#include "stitch/digest.h"
#include "stitch/safetensors.h"

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

/* The format written by default; readers read every format up to it. */
#define STITCH_DELTA_FORMAT 4

/* Block codings. */
typedef enum stitch_coding {
  STITCH_CODING_SAME = 0,   /* no change: no payload */
  STITCH_CODING_SPARSE = 1, /* context-coded mask and steps */
  STITCH_CODING_XOR = 2,    /* zstd(byte planes of new ^ base) */
  STITCH_CODING_PLANES = 3, /* zstd(byte planes of new) */
  STITCH_CODING_RAW = 4,    /* new bytes as they are */
  STITCH_CODING_GAPS = 5,   /* weighted gaps between changes, fixed model */
  STITCH_CODING_RANS = 6,   /* gaps and steps from static tables, rANS */
  STITCH_CODING_RANSC = 7,  /* RANS within classes of the base's magnitudes */
  STITCH_CODING_SPARSEK = 8, /* SPARSE knowing the block's change count */
  STITCH_CODING_SPARSET = 9, /* SPARSE without ref, ending at the count */
  STITCH_CODING_COUNT_
} stitch_coding;

const char *stitch_coding_name(int coding);

typedef struct stitch_delta_opts {
  uint32_t block_log2; /* symbols per block = 2^block_log2; 0: default (20) */
  int zstd_level;      /* for dense blocks; 0: default (3); zstd's range,
                          its negative (fast) levels included */
  /* View digests the caller already holds (a publisher knows its previous
   * version's); NULL: computed here. They are trusted as given. */
  const stitch_digest *base_digest;
  const stitch_digest *result_digest;
  /* Called after each tensor with the result bytes coded so far and in
   * all; NULL: none. */
  void (*progress)(void *arg, uint64_t done, uint64_t total);
  void *progress_arg;
  /* How changes are coded: STITCH_SPARSE_FAST (the default) codes blocks
   * of 2^16 symbols or more as RANSC where 2.5 % or more of a float
   * block changed, else as GAPS, and smaller ones as SPARSE;
   * STITCH_SPARSE_SMALL codes every sparse block as SPARSE (docs/codec.md,
   * "Two sparse codings"); STITCH_SPARSE_FASTEST codes them as RANS, at
   * about the memoryless bound, for speed (docs/codec.md, "The fastest
   * mode"). */
  int sparse_mode;
  /* Threads coding tensors at once; 0: one per online CPU. The delta's
   * bytes are the same on any number (each tensor is coded by one
   * thread, and the tensors are joined in order). */
  unsigned threads;
  /* File format: 0 writes STITCH_DELTA_FORMAT (4: a compact header,
   * one checksum); 3, 2 or 1 for readers that predate it (formats 1 to 3
   * have a 48-byte header and larger indexes: proto/delta.md). */
  unsigned format;
  /* Formats 3 and 4: when the result lists the base's tensors (names,
   * dtypes, shapes, in the base's order), leave them out of the index and
   * code the metadata as an edit of the base's (proto/delta.md "Index,
   * format 3"); format 4 then names the base by the first 8 bytes of its
   * view digest (stitch_delta_base_digest_len). Such a delta parses only
   * with its base at hand (stitch_delta_parse_ex). 0: always list them,
   * as format 2 does. */
  int table_as_base;
} stitch_delta_opts;

enum { STITCH_SPARSE_FAST = 0, STITCH_SPARSE_SMALL = 1, STITCH_SPARSE_FASTEST = 2 };

/* What one tensor of a delta holds; filled by the encoder and by
 * stitch_delta_tensor_info. Strings point into the owner. */
typedef struct stitch_delta_tensor {
  const char *name;
  stitch_dtype dtype;
  int ndim;
  uint64_t shape[STITCH_MAX_DIMS];
  uint64_t nbytes;
  int is_new;          /* absent from the base: coded without it */
  unsigned sym_bits;   /* 4 (packed nibbles), 8, 16, 32 or 64 */
  uint64_t symbols;    /* numel, or 2 x bytes in nibble mode */
  uint64_t changed;    /* symbols that differ from the base */
  uint64_t encoded;    /* payload bytes */
  uint32_t blocks;
  uint32_t blocks_by_coding[STITCH_CODING_COUNT_];
  /* Encoder only (0 when read from a file): the memoryless bound in bits,
   * symbols*h(p) + changed*H(step), and the bytes of the int32-index plus
   * raw-value layout trainers ship today. */
  double bound_bits;
  uint64_t idxval_bytes;
} stitch_delta_tensor;

typedef struct stitch_delta_stats {
  uint64_t tensors;
  uint64_t symbols;
  uint64_t changed;
  uint64_t delta_bytes;  /* whole file */
  uint64_t result_bytes; /* the result checkpoint's file size */
  double bound_bits;     /* sum of per-tensor memoryless bounds */
  uint64_t idxval_bytes;
  /* Per-tensor detail, owned by the stats; free with stitch_delta_stats_free.
   * Names point into the result checkpoint, which must outlive them. */
  stitch_delta_tensor *t;
} stitch_delta_stats;

void stitch_delta_stats_free(stitch_delta_stats *s);

/* Encodes BASE -> RESULT into a malloc'd buffer (*out, *out_len, caller
 * frees). stats may be NULL. */
int stitch_delta_encode(const stitch_st *base, const stitch_st *result,
                        const stitch_delta_opts *opts, uint8_t **out,
                        size_t *out_len, stitch_delta_stats *stats,
                        stitch_diag *d);
/* Same, written atomically to PATH. */
int stitch_delta_encode_file(const stitch_st *base, const stitch_st *result,
                             const stitch_delta_opts *opts, const char *path,
                             stitch_delta_stats *stats, stitch_diag *d);

/* A parsed, checksum-verified delta index. Does not copy BUF: it must
 * outlive the handle. Block payloads are checked when decoded. */
typedef struct stitch_delta stitch_delta;

int stitch_delta_parse(const uint8_t *buf, size_t len, stitch_delta **out,
                       stitch_diag *d);
/* Maps PATH; the handle owns the mapping. */
int stitch_delta_open(const char *path, stitch_delta **out, stitch_diag *d);
/* The same, with the base checkpoint the delta applies to, which a
 * format-3 delta that names its tensors by the base's needs (its index
 * holds no names, types or shapes: stitch_delta_opts.table_as_base); the
 * parse copies what it takes, so BASE need not outlive the handle. BASE
 * may be NULL; then such a delta is refused with STITCH_EINVAL. A wrong
 * base gives a wrong tensor table or a parse error; apply then refuses
 * it by its view digest, before writing anything. */
int stitch_delta_parse_ex(const uint8_t *buf, size_t len, const stitch_st *base,
                          stitch_delta **out, stitch_diag *d);
int stitch_delta_open_ex(const char *path, const stitch_st *base,
                         stitch_delta **out, stitch_diag *d);
void stitch_delta_free(stitch_delta *dl);

size_t stitch_delta_count(const stitch_delta *dl);
const stitch_delta_tensor *stitch_delta_tensor_at(const stitch_delta *dl,
                                                  size_t i);
/* The base's view digest as the delta names it: its first
 * stitch_delta_base_digest_len bytes, 32 or, for a format-4 delta of the
 * base's tensors, 8 (the rest zero). Apply compares those bytes with the
 * base's digest, and the result's full digest before it writes. */
const stitch_digest *stitch_delta_base_digest(const stitch_delta *dl);
size_t stitch_delta_base_digest_len(const stitch_delta *dl);
const stitch_digest *stitch_delta_result_digest(const stitch_delta *dl);
/* The result's __metadata__ as JSON text, or NULL. */
const char *stitch_delta_metadata(const stitch_delta *dl);

/* Where a delta's bytes go (`stitch inspect`, docs/codec.md "Fixed
 * bytes"): what does not grow with the number of changes, and the rest.
 * Index bytes are counted as they are before the index is compressed;
 * what zstd saves on the whole index is `index_packing` (<= 0 when it
 * helps), so header + index_head + index_packing + the tensors' table,
 * blocks, checksums, params and payload add up to `file`. */
typedef struct stitch_delta_tensor_bytes {
  uint64_t table;     /* index: name, dtype, shape and flags */
  uint64_t blocks;    /* index: each block's coding, length, change count */
  uint64_t checksums; /* index: an XXH3-64 per coded block (format 1;
                         format 2 has one for all, in index_head) */
  uint64_t params;    /* payload heads: a block's ref, GAPS's weights and
                         probabilities, rANS tables, stream lengths, RANSC
                         class limits and counts */
  uint64_t payload;   /* the rest of the payloads: the coded changes (all
                         of a dense block) */
} stitch_delta_tensor_bytes;

typedef struct stitch_delta_bytes {
  unsigned format; /* the file's format */
  uint64_t file;
  uint64_t header;       /* the file header (48 bytes; format 4: 15-24,
                            its one checksum included) */
  uint64_t index_head;   /* index: digests (format 4: the base's may be
                            an 8-byte prefix), the payloads' checksum
                            (formats 2 and 3), block size, metadata, count */
  int64_t index_packing; /* index bytes stored minus raw */
  stitch_delta_tensor_bytes tensors; /* summed over the tensors */
} stitch_delta_bytes;

/* Fills *ALL and, unless NULL, PER[i] for each tensor i (count entries).
 * Reads the head of every coded block's payload (not its checksum): a
 * head that does not parse counts as payload. */
void stitch_delta_bytes_of(const stitch_delta *dl, stitch_delta_bytes *all,
                           stitch_delta_tensor_bytes *per);

/* Checks BASE's view digest against the delta, writes the result to PATH
 * (temporary file, fsync, rename) and verifies the result's digest before
 * the rename. On any error PATH is left untouched. */
int stitch_delta_apply_file(const stitch_st *base, const stitch_delta *dl,
                            const char *path, stitch_diag *d);

/* The same with options: THREADS for the blocks and digests (0: one per
 * online CPU), and PROGRESS, if set, called on the caller's thread as each
 * stage moves, with bytes done out of total: "copying the base", then
 * "applying", "checking digests" and "writing", each from 0 to its total
 * (the last three in one step each: they run on many threads). */
typedef struct stitch_delta_apply_opts {
  unsigned threads;
  void (*progress)(void *arg, const char *what, uint64_t done, uint64_t total);
  void *progress_arg;
} stitch_delta_apply_opts;
int stitch_delta_apply_file_ex(const stitch_st *base, const stitch_delta *dl,
                               const char *path,
                               const stitch_delta_apply_opts *o,
                               stitch_diag *d);

/* Patches every tensor in place: data[i] holds the base bytes of tensor i
 * (as listed by stitch_delta_tensor_at; NEW tensors' contents do not
 * matter) and nbytes[i] their size. Blocks are independent, so they run on
 * up to `threads` threads (0: one per online CPU). Same contract on error
 * as stitch_delta_apply_tensor. */
int stitch_delta_apply_all(const stitch_delta *dl, uint8_t *const *data,
                           const uint64_t *nbytes, unsigned threads,
                           stitch_diag *d);

/* Patches one tensor in place: DATA holds the base tensor's bytes (as listed
 * by stitch_delta_tensor_at(dl, i)) and becomes the result's. For in-place
 * appliers (mmap, engine adapters) that check digests themselves. On error
 * DATA may be partly patched: callers journal or keep a copy. */
int stitch_delta_apply_tensor(const stitch_delta *dl, size_t i, uint8_t *data,
                              uint64_t nbytes, stitch_diag *d);

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
