/* dense.c: the dense block codings (proto/delta.md sections XOR, PLANES,
 * RAW). Splitting symbols into byte planes puts the slowly varying bytes
 * (BF16 sign and exponent, or the all-zero high bytes of an XOR) together,
 * where zstd finds them; the noisy mantissa bytes stay apart. */
#include "codec/delta_internal.h"
#include "common/diag.h"

#include <string.h>
#include <zstd.h>

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
  size_t n = ZSTD_compress(out, cap, scratch, nbytes, level);
  if (ZSTD_isError(n))
    return STITCH_ELIMIT;
  *out_len = n;
  return 0;
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
