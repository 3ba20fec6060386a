/* stitch/safetensors.h: dtypes, and reading and writing safetensors files.
 *
 * Format: u64 little-endian header length N, N bytes of JSON, then the data
 * region. The JSON maps tensor names to {"dtype","shape","data_offsets"} and
 * may hold "__metadata__" (an object of strings), which is kept verbatim.
 *
 * The reader validates everything before handing out a pointer: header size
 * and file length, known dtypes, byte counts equal to dtype x shape, offsets
 * in range, no overlaps and no holes, unique names.
 */
#ifndef STITCH_SAFETENSORS_H
#define STITCH_SAFETENSORS_H

#include "stitch/error.h"

#include <stddef.h>
#include <stdint.h>

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

typedef enum stitch_dtype {
  STITCH_DT_INVALID = 0,
  STITCH_DT_BOOL,
  STITCH_DT_U8,
  STITCH_DT_I8,
  STITCH_DT_F8_E4M3,
  STITCH_DT_F8_E5M2,
  STITCH_DT_U16,
  STITCH_DT_I16,
  STITCH_DT_F16,
  STITCH_DT_BF16,
  STITCH_DT_U32,
  STITCH_DT_I32,
  STITCH_DT_F32,
  STITCH_DT_U64,
  STITCH_DT_I64,
  STITCH_DT_F64,
  STITCH_DT_COUNT_
} stitch_dtype;

/* Bytes per element, or 0 for STITCH_DT_INVALID. */
size_t stitch_dtype_size(stitch_dtype dt);
/* The safetensors name ("BF16", "F8_E4M3", ...), or "?" when invalid. */
const char *stitch_dtype_name(stitch_dtype dt);
/* STITCH_DT_INVALID when the name is unknown. */
stitch_dtype stitch_dtype_from_name(const char *name);

#define STITCH_MAX_DIMS 8
/* Limits checked before anything is allocated. */
#define STITCH_ST_MAX_HEADER (100u << 20) /* same cap as the reference impl */
#define STITCH_ST_MAX_TENSORS (1u << 20)
#define STITCH_ST_MAX_NAME 4096

typedef struct stitch_tensor {
  const char *name;  /* owned by the stitch_st */
  stitch_dtype dtype;
  int ndim;
  uint64_t shape[STITCH_MAX_DIMS];
  uint64_t numel;
  uint64_t nbytes;
  uint64_t offset;   /* within the data region */
  const uint8_t *data; /* into the mapping or caller buffer */
} stitch_tensor;

typedef struct stitch_st stitch_st;

/* Maps PATH read-only and parses it. On success *out owns the mapping. */
int stitch_st_open(const char *path, stitch_st **out, stitch_diag *d);
/* Parses BUF without copying it: BUF must outlive *out. */
int stitch_st_parse(const uint8_t *buf, size_t len, stitch_st **out,
                    stitch_diag *d);
void stitch_st_free(stitch_st *st);

/* Tensors in file (offset) order. */
size_t stitch_st_count(const stitch_st *st);
const stitch_tensor *stitch_st_tensor(const stitch_st *st, size_t i);
/* NULL when absent. */
const stitch_tensor *stitch_st_find(const stitch_st *st, const char *name);
/* The "__metadata__" object as compact JSON text, or NULL if absent. */
const char *stitch_st_metadata(const stitch_st *st);
/* Size of the whole file (or buffer). */
uint64_t stitch_st_file_size(const stitch_st *st);

/* Writer: declare tensors, map, fill, commit. The file appears at PATH only
 * on commit (temporary file in the same directory, fsync, rename, fsync of
 * the directory); freeing an uncommitted writer removes the temporary. */
typedef struct stitch_st_writer stitch_st_writer;

int stitch_st_writer_new(const char *path, stitch_st_writer **out,
                         stitch_diag *d);
/* JSON text of an object of strings, copied. NULL clears. */
int stitch_st_writer_set_metadata(stitch_st_writer *w, const char *json,
                                  stitch_diag *d);
/* Declares the next tensor; data follow in declaration order. */
int stitch_st_writer_add(stitch_st_writer *w, const char *name,
                         stitch_dtype dtype, int ndim, const uint64_t *shape,
                         stitch_diag *d);
/* Writes the header, sizes the file and maps it read-write. After this,
 * stitch_st_writer_data() gives each tensor's bytes to fill in. */
int stitch_st_writer_map(stitch_st_writer *w, stitch_diag *d);
uint8_t *stitch_st_writer_data(stitch_st_writer *w, size_t i);
size_t stitch_st_writer_count(const stitch_st_writer *w);
int stitch_st_writer_commit(stitch_st_writer *w, stitch_diag *d);
void stitch_st_writer_free(stitch_st_writer *w);

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
