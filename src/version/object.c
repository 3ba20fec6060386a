/* object.c: small helpers shared by manifests, chunks and the store. */
#include "stitch/version.h"

#include "codec/delta_internal.h"

#include <sodium.h>

const char *stitch_obj_kind_name(int kind) {
  switch (kind) {
  case STITCH_OBJ_DELTA:
    return "delta";
  case STITCH_OBJ_ANCHOR:
    return "anchor";
  case STITCH_OBJ_CUMULATIVE:
    return "cumulative";
  default:
    return "?";
  }
}

void stitch_hash(const uint8_t *buf, size_t len, stitch_digest *out) {
  crypto_generichash(out->b, sizeof(out->b), buf, len, NULL, 0);
}

/* Symbols of tensor t under flags: elements, or two per byte with NIBBLE. */
static uint64_t tensor_symbols(const stitch_mtensor *t, uint8_t flags) {
  return (flags & DELTA_TF_NIBBLE) ? 2 * t->nbytes
                                   : t->nbytes / stitch_dtype_size(t->dtype);
}

uint64_t stitch_object_blocks(const stitch_manifest *m,
                              const stitch_object *o) {
  uint64_t total = 0, B = 1ull << o->block_log2;
  for (uint64_t i = 0; i < m->n_tensors; i++) {
    uint64_t s = tensor_symbols(&m->tensors[i], o->tflags[i]);
    total += s / B + (s % B != 0);
  }
  return total;
}
