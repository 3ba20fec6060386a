/* delta_internal.h: shared between the delta encoder, applier and parser. */
#ifndef STITCH_CODEC_DELTA_INTERNAL_H
#define STITCH_CODEC_DELTA_INTERNAL_H

#include "stitch/delta.h"

#include "common/bytes.h"

#include <stddef.h>
#include <stdint.h>

#define DELTA_MAGIC "STITCHDL"
#define DELTA_HEADER_BYTES 48 /* 40 bytes of fields + XXH3-64 of them */
/* Format 4's compact header (proto/delta.md "File layout, format 4"):
 * magic, format, flags, the index's stored length as a varint, then one
 * XXH3-64 of the whole file without those 8 bytes: 15 to 24 bytes. */
#define DELTA4_MAGIC "STDL"
#define DELTA4_MAGIC_BYTES 4
#define DELTA4_HEADER_MIN 15 /* a 1-byte varint */
#define DELTA4_HEADER_MAX 24 /* a 10-byte varint */
#define DELTA4_F_ZSTD 1u     /* flags: the index is one zstd frame, its
                              * 4-byte magic left out (DELTA4_ZSTD_MAGIC) */
#define DELTA4_ZSTD_MAGIC "\x28\xb5\x2f\xfd" /* RFC 8878's, little-endian */
#define DELTA4_F_TABLE 2u    /* flags: the tensors are the base's */
/* With the base's tensors, format 4 names the base by a prefix of its
 * view digest: the result's full digest is checked before anything is
 * written, so the prefix only has to pick the base (proto/delta.md). */
#define DELTA4_BASE_PREFIX 8
/* Format 4's one checksum: XXH3-64 of the LEN bytes of BUF but the 8 at
 * SUM_AT, where it is stored. 0, or STITCH_ENOMEM. */
int delta4_file_sum(const uint8_t *buf, size_t len, size_t sum_at,
                    uint64_t *sum);
/* Blocks of 2^21 symbols: GAPS's 29 parameter bytes are sent per block,
 * and at 2^20 they were 0.8% of an FP8 delta at 0.3% density (0.1-0.9%
 * smaller deltas at 2^21, docs/history/benchmarks.md "Blocks of 2^21
 * symbols").
 * Parallel apply still has thousands of blocks for a 7B model. Anchors
 * use smaller ones (publish.c): dense blocks bound the chunk size. */
#define DELTA_DEFAULT_BLOCK_LOG2 21
#define DELTA_MIN_BLOCK_LOG2 8
#define DELTA_MAX_BLOCK_LOG2 24
#define DELTA_MAX_INDEX (256u << 20)
/* Format 2 front-codes names, so they can outgrow the index: this caps
 * their bytes, NULs included (a safetensors header holds them all). */
#define DELTA_MAX_NAMES (64u << 20)
#define DELTA_INDEX_RAW 0
#define DELTA_INDEX_ZSTD 1
#define DELTA_INDEX_LEVEL 5 /* zstd level of the index */
#define DELTA_INDEX_SMALL (64u << 10) /* an index up to this many bytes */
#define DELTA_INDEX_LEVEL_SMALL 19    /* gets this level */
#define DELTA_TF_NIBBLE 1u /* symbols are 4-bit halves of each byte */
#define DELTA_TF_NEW 2u    /* tensor absent from the base */
/* Format 3's table byte: the tensors are listed, or are the base's. */
#define DELTA_TABLE_LISTED 0
#define DELTA_TABLE_BASE 1

/* How a symbol's bits are read: sign-magnitude floats get order-preserving
 * keys so that one step of the bit pattern is a difference of +-1; integers
 * are differenced in two's complement. */
typedef struct sym_fmt {
  unsigned bits;      /* 4, 8, 16, 32 or 64 */
  int is_float;
  int is_signed;      /* integers only */
  unsigned mant_bits; /* floats: the exponent starts above these */
  unsigned exp_bits;
} sym_fmt;

int sym_fmt_for(stitch_dtype dt, int nibble, sym_fmt *f);

/* How a coding runs, beyond what it codes: the switches the tests use to
 * hold the vector loops to the scalar reference, one call at a time
 * (SPARSEK, GAPS, RANSC: the *_run entry points). The plain entry points
 * run as a zeroed codec_run says. */
typedef struct codec_run {
  int scalar;    /* the scalar loops even where the AVX2 ones would run */
  int count_all; /* GAPS: the encoder's first pass counts the whole block,
                  * not a sample of it (gaps.c count_changes) */
} codec_run;

/* One block: symbols [start, start + n) of a tensor. */
typedef struct block_span {
  uint64_t start;
  uint64_t n;
} block_span;

/* Sparse coding. Returns 0, or STITCH_ELIMIT when the output would pass
 * cap (the caller then codes the block densely). *changed gets the number
 * of differing symbols. */
int sparse_encode(const sym_fmt *f, const uint8_t *old, const uint8_t *new_,
                  block_span sp, uint8_t *out, size_t cap, size_t *out_len,
                  uint64_t *changed);
/* sparse_encode that also measures a prefix of the block: probe->len gets
 * the length that sparse_encode of the block's first probe->at symbols
 * with a cap of probe->cap would give (0 when it would fail), without
 * coding them apart. That is only right when the prefix has the block's
 * class reference (sparse_same_ref): the caller checks. probe->at must be
 * a multiple of SPARSE_PROBE_STEP below sp.n. */
#define SPARSE_PROBE_STEP 1024 /* symbols: the coder's chunk */
typedef struct sparse_probe {
  uint64_t at;
  size_t cap;
  size_t len; /* out */
} sparse_probe;
int sparse_encode_probe(const sym_fmt *f, const uint8_t *old,
                        const uint8_t *new_, block_span sp, uint8_t *out,
                        size_t cap, size_t *out_len, uint64_t *changed,
                        sparse_probe *probe);
/* Whether symbols PREFIX and SP of DATA have the same class reference
 * (proto/delta.md "ref"); PREFIX is a part of SP. */
int sparse_same_ref(const sym_fmt *f, const uint8_t *data, block_span prefix,
                    block_span sp);
/* Sets *exceeds to whether sparse_encode with CAP would fail or code more
 * than LIMIT bytes; cheaper than coding when it would (it stops once the
 * output has passed LIMIT). OUT holds CAP bytes of scratch. */
int sparse_encode_exceeds(const sym_fmt *f, const uint8_t *old,
                          const uint8_t *new_, block_span sp, uint8_t *out,
                          size_t cap, size_t limit, int *exceeds);
/* Number of symbols that differ. */
uint64_t sparse_count(const sym_fmt *f, const uint8_t *old,
                      const uint8_t *new_, block_span sp);
/* Histogram of the signed steps (in key space) of a block's changes, for
 * the memoryless bound. Symbols of up to 16 bits count into h16 (index
 * step + 32768); wider ones are appended to big (grown, capped). */
typedef struct step_hist {
  uint64_t *h16; /* 65537 counters */
  int64_t *big;
  size_t nbig, capbig;
  uint64_t total;
} step_hist;
int sparse_steps(const sym_fmt *f, const uint8_t *old, const uint8_t *new_,
                 block_span sp, step_hist *h);
/* Entropy in bits of all the steps counted; resets the histogram. */
double step_hist_take_bits(step_hist *h);
/* Patches DATA (holding the base) in place. *changed gets the number of
 * symbols changed; the caller compares it with the index. */
int sparse_decode(const sym_fmt *f, uint8_t *data, block_span sp,
                  const uint8_t *in, size_t len, uint64_t *changed,
                  stitch_diag *d);

/* The SPARSEK and SPARSET codings (sparse.c, proto/delta.md "SPARSEK"):
 * SPARSE with the block's change count K, from the index, known to both
 * sides: no ref, nothing after the K-th change, and for SPARSEK contexts
 * that start from K. sparsek_encode codes SPARSEK; it needs K = the
 * block's count (STITCH_EINVAL otherwise). sparse_encode_trunc is
 * sparse_encode that also gives the block's SPARSET coding, in one pass:
 * its bytes are SPARSE's without the ref, finished after the last change,
 * so never longer; tr->ok is 0 when it did not fit tr->cap (or the block
 * has no change). The decoder
 * (WARM: 1 SPARSEK, 0 SPARSET) patches exactly CHANGED changes or fails. */
/* The default mode codes SPARSEK (a second pass) only for smaller blocks. */
#define SPARSEK_MAX_SYMBOLS (1u << 18)
typedef struct sparse_trunc {
  uint8_t *out;
  size_t cap;
  size_t len; /* out: may be 0 (the decoder reads zeros past the end) */
  int ok;     /* out */
} sparse_trunc;
int sparsek_encode(const sym_fmt *f, const uint8_t *old, const uint8_t *new_,
                   block_span sp, uint64_t k, uint8_t *out, size_t cap,
                   size_t *out_len);
int sparse_encode_trunc(const sym_fmt *f, const uint8_t *old,
                        const uint8_t *new_, block_span sp, uint8_t *out,
                        size_t cap, size_t *out_len, uint64_t *changed,
                        sparse_trunc *tr);
int sparsek_decode(const sym_fmt *f, uint8_t *data, block_span sp,
                   const uint8_t *in, size_t len, uint64_t changed, int warm,
                   stitch_diag *d);
int sparsek_encode_run(const codec_run *run, const sym_fmt *f,
                       const uint8_t *old, const uint8_t *new_, block_span sp,
                       uint64_t k, uint8_t *out, size_t cap, size_t *out_len);
int sparsek_decode_run(const codec_run *run, const sym_fmt *f, uint8_t *data,
                       block_span sp, const uint8_t *in, size_t len,
                       uint64_t changed, int warm, stitch_diag *d);

/* The GAPS coding (gaps.c): same contract as sparse_encode, except that
 * it returns GAPS_DECLINED, coding nothing, for a block with fewer than
 * GAPS_MIN_CHANGES changes, where its 29 bytes of parameters cost more
 * than its speed is worth (SPARSE codes those). The decoder patches
 * exactly CHANGED changes, the index's count. */
#define GAPS_DECLINED 1
#define GAPS_MIN_CHANGES 256
int gaps_encode(const sym_fmt *f, const uint8_t *old, const uint8_t *new_,
                block_span sp, uint8_t *out, size_t cap, size_t *out_len,
                uint64_t *changed);
int gaps_decode(const sym_fmt *f, uint8_t *data, block_span sp,
                const uint8_t *in, size_t len, uint64_t changed,
                stitch_diag *d);
int gaps_encode_run(const codec_run *run, const sym_fmt *f,
                    const uint8_t *old, const uint8_t *new_, block_span sp,
                    uint8_t *out, size_t cap, size_t *out_len,
                    uint64_t *changed);
int gaps_decode_run(const codec_run *run, const sym_fmt *f, uint8_t *data,
                    block_span sp, const uint8_t *in, size_t len,
                    uint64_t changed, stitch_diag *d);
/* Blocks of fewer symbols are coded SPARSE even in the fast mode. */
#define GAPS_MIN_SYMBOLS (1u << 16)
/* The parameter bytes after a GAPS block's ref: 16 weight codes, then 13
 * probability codes (proto/delta.md, "GAPS"). */
#define GAPS_PARAM_BYTES 29
/* The weight a code names (codes 0 to 0xbf), and the code the encoder
 * sends for a weight W (1 to 3968): exact below 32, else within 1/32. */
unsigned gaps_weight_of_code(unsigned b);
uint8_t gaps_code_of_weight(double w);

/* The RANS and RANSC codings (rans.c): the contract of sparse_encode,
 * with SCRATCH of 8 bytes a symbol. CLASSES 0 codes RANS (the fastest
 * mode); 1 codes RANSC, or declines a block that is not a float format,
 * not dense enough (RANSC_MIN_PER_MILLE, sampled) or whose classes do not
 * pay (the default mode then codes GAPS). *CODING says which. It returns
 * RANS_DECLINED, coding nothing, also when the scratch runs out (wide
 * steps at a high density), and the caller codes SPARSE instead. The
 * decoder patches exactly CHANGED changes, the index's count. */
#define RANS_MIN_SYMBOLS (1u << 12) /* smaller blocks: SPARSE */
#define RANS_DECLINED GAPS_DECLINED /* the same: code_block takes both */
#define RANSC_MIN_PER_MILLE 25     /* sparser blocks: GAPS (docs/codec.md) */
int rans_encode(const sym_fmt *f, const uint8_t *old, const uint8_t *new_,
                block_span sp, uint8_t *out, size_t cap, size_t *out_len,
                uint64_t *changed, int *coding, int classes, uint8_t *scratch,
                size_t scratch_cap);
int rans_decode(const sym_fmt *f, int coding, uint8_t *data, block_span sp,
                const uint8_t *in, size_t len, uint64_t changed,
                stitch_diag *d);
int rans_encode_run(const codec_run *run, const sym_fmt *f,
                    const uint8_t *old, const uint8_t *new_, block_span sp,
                    uint8_t *out, size_t cap, size_t *out_len,
                    uint64_t *changed, int *coding, int classes,
                    uint8_t *scratch, size_t scratch_cap);
int rans_decode_run(const codec_run *run, const sym_fmt *f, int coding,
                    uint8_t *data, block_span sp, const uint8_t *in,
                    size_t len, uint64_t changed, stitch_diag *d);

/* Dense codings over the byte range of a block. */
size_t dense_bound(size_t nbytes);
int dense_encode(int coding, unsigned sym_bytes, const uint8_t *old,
                 const uint8_t *new_, size_t nbytes, int level, uint8_t *out,
                 size_t cap, size_t *out_len, uint8_t *scratch);
int dense_decode(int coding, unsigned sym_bytes, uint8_t *data, size_t nbytes,
                 const uint8_t *in, size_t len, uint8_t *scratch,
                 stitch_diag *d);

/* Parsed tensor entry of a delta (extends the public view). */
typedef struct delta_entry {
  stitch_delta_tensor pub;
  uint8_t flags;
  uint8_t *coding;        /* [blocks] */
  uint64_t *payload_off;  /* [blocks], from the start of the file */
  uint64_t *payload_len;  /* [blocks] */
  uint64_t *blk_changed;  /* [blocks] */
  uint64_t *checksum;     /* [blocks] */
  uint64_t table_bytes;   /* its index entry up to the blocks (raw index) */
  uint64_t block_bytes;   /* its block entries, checksums excluded */
} delta_entry;

struct stitch_delta {
  unsigned format; /* 1 to 4 (proto/delta.md) */
  int table_as_base; /* format 3 and 4: the tensors are the base's */
  size_t header_len; /* the file header's bytes (48, or 15-24: format 4) */
  size_t base_len;   /* bytes of base_digest the file holds: 32, or
                        DELTA4_BASE_PREFIX (format 4, the base's tensors) */
  const uint8_t *buf;
  size_t len;
  void *map; /* owned mapping when opened from a file */
  size_t map_len;
  stitch_digest base, result;
  unsigned block_log2;
  char *meta;
  size_t count;
  delta_entry *t;
  uint8_t *index_owned; /* decompressed index, if it was compressed */
  uint64_t index_stored, index_raw, index_head; /* index bytes: as stored,
                                      raw, and raw before the tensors */
  char *names;
};

/* Decodes one block, symbols SP of a tensor with symbol format F, in place
 * into TENSOR_DATA (the whole tensor: the block's range holds the base's
 * bytes, or anything for PLANES and RAW, and receives the result's). IN and
 * LEN are the payload; its XXH3-64 must equal CHECKSUM, and a SPARSE block
 * must decode exactly CHANGED changes. SCRATCH holds the block's bytes
 * (dense codings). NAME and B only name the block in messages. SAME does
 * nothing. The caller has checked that SP lies inside the tensor. A block
 * decodes the same at any offset (sparse groups count from its start, and
 * blocks of nibbles start on a byte), so TENSOR_DATA may instead be a copy
 * of the block alone with SP.start = 0, as chunked patches do
 * (src/version/chunk.c). */
int delta_block_decode(const sym_fmt *f, block_span sp, int coding,
                       const uint8_t *in, size_t len, uint64_t changed,
                       uint64_t checksum, uint8_t *tensor_data,
                       uint8_t *scratch, const char *name, uint64_t b,
                       stitch_diag *d);

/* Applies block b of tensor e to DATA in place (checksum verified first). */
int delta_apply_block(const stitch_delta *dl, const delta_entry *e, uint32_t b,
                      uint8_t *data, uint8_t *scratch, stitch_diag *d);

#endif
