/* st_internal.h: safetensors helpers shared inside libstitch. */
#ifndef STITCH_CODEC_ST_INTERNAL_H
#define STITCH_CODEC_ST_INTERNAL_H

#include "stitch/safetensors.h"

/* The compact JSON header the writer would write for tensors T[0..n) (their
 * name, dtype, shape, offset and nbytes) and META (JSON text of an object
 * of strings, or NULL): malloc'd, or NULL when out of memory, META is not
 * JSON, or two names repeat. */
char *st_header_json(const char *meta, size_t n, const stitch_tensor *t);

#endif
