/* dense.c: the dense block codings (proto/delta.md sections XOR, PLANES,
 * RAW). Splitting symbols into byte planes puts the slowly varying bytes
 * (BF16 sign and exponent, or the all-zero high bytes of an XOR) together,
 * where zstd finds them; the noisy mantissa bytes stay apart. */
#include "codec/delta_internal.h"
#include "common/diag.h"

#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

size_t dense_bound(size_t nbytes) { return ZSTD_compressBound(nbytes); }

static void split(uint8_t *dst, const uint8_t *a, const uint8_t *x,
                  size_t nbytes, unsigned sb) {
  size_t n = nbytes / sb;
  for (unsigned k = 0; k < sb; k++) {
    uint8_t *pl = dst + k * n;
    if (x != NULL)
      for (size_t i = 0; i < n; i++)
        pl[i] = a[i * sb + k] ^ x[i * sb + k];
    else
      for (size_t i = 0; i < n; i++)
        pl[i] = a[i * sb + k];
  }
}

static void unsplit(uint8_t *data, const uint8_t *src, size_t nbytes,
                    unsigned sb, int do_xor) {
  size_t n = nbytes / sb;
  for (unsigned k = 0; k < sb; k++) {
    const uint8_t *pl = src + k * n;
    if (do_xor)
      for (size_t i = 0; i < n; i++)
        data[i * sb + k] ^= pl[i];
    else
      for (size_t i = 0; i < n; i++)
        data[i * sb + k] = pl[i];
  }
}

/* The planes at SRC (NBYTES in SB planes) as one zstd frame, each plane
 * ending a zstd block (a flush): a block's literals share one Huffman
 * table, and a block holding the end of the noisy mantissa plane and the
 * start of the sign and exponent plane coded both badly. A plane of 64
 * KiB (blocks of 2^16 BF16 symbols, an anchor cut to 128 KiB chunks)
 * fits in one zstd block of 128 KiB with its neighbour, and coded 7%
 * larger that way (docs/codec.md "Blocks"). Any zstd decoder reads the
 * frame as before. Returns 0, STITCH_ELIMIT when CAP is too small,
 * STITCH_ENOMEM, or STITCH_EINVAL for any other zstd error. */
static int planes_frame(const uint8_t *src, size_t nbytes, unsigned sb,
                        int level, uint8_t *out, size_t cap, size_t *out_len) {
  ZSTD_CCtx *cc = ZSTD_createCCtx();
  if (cc == NULL)
    return STITCH_ENOMEM;
  int rc = 0;
  if (ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel,
                                          level)) ||
      ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(cc, nbytes)))
    rc = STITCH_EINVAL;
  ZSTD_outBuffer ob = {out, cap, 0};
  size_t n = nbytes / sb;
  for (unsigned k = 0; rc == 0 && k < sb; k++) {
    ZSTD_inBuffer ib = {src + k * n, n, 0};
    ZSTD_EndDirective end = k + 1 == sb ? ZSTD_e_end : ZSTD_e_flush;
    for (;;) {
      size_t left = ZSTD_compressStream2(cc, &ob, &ib, end);
      if (ZSTD_isError(left)) {
        ZSTD_ErrorCode e = ZSTD_getErrorCode(left);
        rc = e == ZSTD_error_memory_allocation ? STITCH_ENOMEM
             : e == ZSTD_error_dstSize_tooSmall ? STITCH_ELIMIT
                                                 : STITCH_EINVAL;
        break;
      }
      if (left == 0 && ib.pos == ib.size)
        break;
      if (ob.pos == ob.size) { /* more to write and no room */
        rc = STITCH_ELIMIT;
        break;
      }
    }
  }
  ZSTD_freeCCtx(cc);
  if (rc == 0)
    *out_len = ob.pos;
  return rc;
}

int dense_encode(int coding, unsigned sym_bytes, const uint8_t *old,
                 const uint8_t *new_, size_t nbytes, int level, uint8_t *out,
                 size_t cap, size_t *out_len, uint8_t *scratch) {
  if (sym_bytes == 0 || nbytes % sym_bytes != 0)
    return STITCH_EINVAL;
  if (coding == STITCH_CODING_RAW) {
    if (nbytes > cap)
      return STITCH_ELIMIT;
    memcpy(out, new_, nbytes);
    *out_len = nbytes;
    return 0;
  }
  split(scratch, new_, coding == STITCH_CODING_XOR ? old : NULL, nbytes,
        sym_bytes);
  return planes_frame(scratch, nbytes, sym_bytes, level, out, cap, out_len);
}

int dense_decode(int coding, unsigned sym_bytes, uint8_t *data, size_t nbytes,
                 const uint8_t *in, size_t len, uint8_t *scratch,
                 stitch_diag *d) {
  if (coding == STITCH_CODING_RAW) {
    RETURN_IF(len != nbytes, d, STITCH_EFORMAT,
              "raw block holds %zu bytes, expected %zu", len, nbytes);
    memcpy(data, in, nbytes);
    return 0;
  }
  unsigned long long fcs = ZSTD_getFrameContentSize(in, len);
  RETURN_IF(fcs != nbytes, d, STITCH_EFORMAT,
            "dense block: zstd frame does not declare the block's %zu bytes",
            nbytes);
  size_t n = ZSTD_decompress(scratch, nbytes, in, len);
  RETURN_IF(ZSTD_isError(n) || n != nbytes, d, STITCH_EFORMAT,
            "dense block: zstd: %s",
            ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short output");
  unsplit(data, scratch, nbytes, sym_bytes, coding == STITCH_CODING_XOR);
  return 0;
}
