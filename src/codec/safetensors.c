/* safetensors.c: a validating reader and a crash-safe writer.
 *
 * The reader never trusts a length it has not checked against the bytes it
 * holds: the header length against the file size, each tensor's byte count
 * against dtype x shape (with overflow checks), and the set of offsets
 * against the data region, which must be covered exactly once, as the
 * reference implementation requires. jansson parses the header; its integers
 * are 64-bit, so offsets past 2^31 are exact. */
#define _GNU_SOURCE
#include "stitch/safetensors.h"

#include "common/diag.h"
#include "common/fileio.h"
#include "codec/st_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const struct {
  const char *name;
  size_t size;
} dtype_table[STITCH_DT_COUNT_] = {
    [STITCH_DT_INVALID] = {"?", 0},      [STITCH_DT_BOOL] = {"BOOL", 1},
    [STITCH_DT_U8] = {"U8", 1},          [STITCH_DT_I8] = {"I8", 1},
    [STITCH_DT_F8_E4M3] = {"F8_E4M3", 1}, [STITCH_DT_F8_E5M2] = {"F8_E5M2", 1},
    [STITCH_DT_U16] = {"U16", 2},        [STITCH_DT_I16] = {"I16", 2},
    [STITCH_DT_F16] = {"F16", 2},        [STITCH_DT_BF16] = {"BF16", 2},
    [STITCH_DT_U32] = {"U32", 4},        [STITCH_DT_I32] = {"I32", 4},
    [STITCH_DT_F32] = {"F32", 4},        [STITCH_DT_U64] = {"U64", 8},
    [STITCH_DT_I64] = {"I64", 8},        [STITCH_DT_F64] = {"F64", 8},
};

size_t stitch_dtype_size(stitch_dtype dt) {
  return (unsigned)dt < STITCH_DT_COUNT_ ? dtype_table[dt].size : 0;
}

const char *stitch_dtype_name(stitch_dtype dt) {
  return (unsigned)dt < STITCH_DT_COUNT_ ? dtype_table[dt].name : "?";
}

stitch_dtype stitch_dtype_from_name(const char *name) {
  for (int i = 1; i < STITCH_DT_COUNT_; i++)
    if (strcmp(dtype_table[i].name, name) == 0)
      return (stitch_dtype)i;
  return STITCH_DT_INVALID;
}

struct stitch_st {
  stitch_map map; /* empty when parsed from a caller's buffer */
  const uint8_t *buf;
  size_t len;
  size_t count;
  stitch_tensor *tensors; /* sorted by offset */
  char *names;            /* all names, NUL-separated */
  char *metadata;         /* compact JSON or NULL */
};

static int cmp_offset(const void *a, const void *b) {
  const stitch_tensor *x = a, *y = b;
  if (x->offset != y->offset)
    return x->offset < y->offset ? -1 : 1;
  return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int read_u64(json_t *v, uint64_t *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return -1;
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

static int parse_entry(const char *name, json_t *v, uint64_t data_len,
                       stitch_tensor *t, stitch_diag *d) {
  RETURN_IF(!json_is_object(v), d, STITCH_EFORMAT,
            "safetensors: tensor '%s' is not an object", name);
  json_t *jd = json_object_get(v, "dtype");
  json_t *js = json_object_get(v, "shape");
  json_t *jo = json_object_get(v, "data_offsets");
  RETURN_IF(!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo), d,
            STITCH_EFORMAT,
            "safetensors: tensor '%s' lacks dtype, shape or data_offsets",
            name);
  t->dtype = stitch_dtype_from_name(json_string_value(jd));
  RETURN_IF(t->dtype == STITCH_DT_INVALID, d, STITCH_EDTYPE,
            "safetensors: tensor '%s' has unknown dtype '%.32s'", name,
            json_string_value(jd));
  size_t nd = json_array_size(js);
  RETURN_IF(nd > STITCH_MAX_DIMS, d, STITCH_ELIMIT,
            "safetensors: tensor '%s' has %zu dims (max %d)", name, nd,
            STITCH_MAX_DIMS);
  t->ndim = (int)nd;
  uint64_t numel = 1;
  for (size_t i = 0; i < nd; i++) {
    RETURN_IF(read_u64(json_array_get(js, i), &t->shape[i]) != 0, d,
              STITCH_EFORMAT, "safetensors: tensor '%s' has a bad shape",
              name);
    RETURN_IF(t->shape[i] != 0 && numel > UINT64_MAX / t->shape[i], d,
              STITCH_ELIMIT, "safetensors: tensor '%s' shape overflows", name);
    numel *= t->shape[i];
  }
  size_t es = stitch_dtype_size(t->dtype);
  RETURN_IF(numel > UINT64_MAX / es, d, STITCH_ELIMIT,
            "safetensors: tensor '%s' size overflows", name);
  t->numel = numel;
  t->nbytes = numel * es;
  uint64_t b, e;
  RETURN_IF(json_array_size(jo) != 2 ||
                read_u64(json_array_get(jo, 0), &b) != 0 ||
                read_u64(json_array_get(jo, 1), &e) != 0,
            d, STITCH_EFORMAT, "safetensors: tensor '%s' has bad data_offsets",
            name);
  RETURN_IF(b > e, d, STITCH_EFORMAT,
            "safetensors: tensor '%s' data_offsets [%llu, %llu] are reversed",
            name, (unsigned long long)b, (unsigned long long)e);
  RETURN_IF(e > data_len, d, STITCH_ETRUNCATED,
            "safetensors: tensor '%s' ends at %llu, past the data (%llu bytes)",
            name, (unsigned long long)e, (unsigned long long)data_len);
  RETURN_IF(e - b != t->nbytes, d, STITCH_EFORMAT,
            "safetensors: tensor '%s' holds %llu bytes but %s x shape needs "
            "%llu",
            name, (unsigned long long)(e - b), stitch_dtype_name(t->dtype),
            (unsigned long long)t->nbytes);
  t->offset = b;
  return 0;
}

static int metadata_valid(json_t *m) {
  const char *k;
  json_t *v;
  if (!json_is_object(m))
    return 0;
  json_object_foreach(m, k, v) if (!json_is_string(v)) return 0;
  return 1;
}

static int parse_header(stitch_st *st, stitch_diag *d) {
  RETURN_IF(st->len < 8, d, STITCH_ETRUNCATED,
            "safetensors: file is %zu bytes, shorter than its 8-byte length "
            "prefix",
            st->len);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = hlen << 8 | st->buf[i];
  RETURN_IF(hlen > STITCH_ST_MAX_HEADER, d, STITCH_ELIMIT,
            "safetensors: header length %llu exceeds the %u-byte limit",
            (unsigned long long)hlen, STITCH_ST_MAX_HEADER);
  RETURN_IF(hlen > st->len - 8, d, STITCH_ETRUNCATED,
            "safetensors: header length %llu runs past the file (%zu bytes)",
            (unsigned long long)hlen, st->len);
  RETURN_IF(hlen < 2, d, STITCH_EFORMAT, "safetensors: header is empty");
  const uint8_t *data = st->buf + 8 + hlen;
  uint64_t data_len = st->len - 8 - hlen;

  json_error_t je;
  json_t *root = json_loadb((const char *)st->buf + 8, (size_t)hlen,
                            JSON_REJECT_DUPLICATES, &je);
  RETURN_IF(root == NULL, d, STITCH_EFORMAT,
            "safetensors: header JSON: %s (at byte %d)", je.text, je.position);
  int rc = 0;
  if (!json_is_object(root)) {
    rc = stitch_diag_set(d, STITCH_EFORMAT,
                         "safetensors: header is not a JSON object");
    goto out;
  }
  size_t n = json_object_size(root);
  json_t *meta = json_object_get(root, "__metadata__");
  if (meta != NULL) {
    if (!metadata_valid(meta)) {
      rc = stitch_diag_set(d, STITCH_EFORMAT,
                           "safetensors: __metadata__ must map strings to "
                           "strings");
      goto out;
    }
    st->metadata = json_dumps(meta, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (st->metadata == NULL) {
      rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
      goto out;
    }
    n--;
  }
  if (n > STITCH_ST_MAX_TENSORS) {
    rc = stitch_diag_set(d, STITCH_ELIMIT, "safetensors: %zu tensors (max %u)",
                         n, STITCH_ST_MAX_TENSORS);
    goto out;
  }
  size_t names_len = 0;
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    if (strcmp(key, "__metadata__") == 0)
      continue;
    size_t kl = strlen(key);
    if (kl == 0 || kl > STITCH_ST_MAX_NAME) {
      rc = stitch_diag_set(d, STITCH_EFORMAT,
                           "safetensors: a tensor name is empty or longer than "
                           "%d bytes",
                           STITCH_ST_MAX_NAME);
      goto out;
    }
    names_len += kl + 1;
  }
  st->tensors = calloc(n ? n : 1, sizeof(*st->tensors));
  st->names = malloc(names_len ? names_len : 1);
  if (st->tensors == NULL || st->names == NULL) {
    rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
    goto out;
  }
  char *np = st->names;
  size_t i = 0;
  json_object_foreach(root, key, val) {
    if (strcmp(key, "__metadata__") == 0)
      continue;
    stitch_tensor *t = &st->tensors[i++];
    size_t kl = strlen(key);
    memcpy(np, key, kl + 1);
    t->name = np;
    np += kl + 1;
    rc = parse_entry(key, val, data_len, t, d);
    if (rc != 0)
      goto out;
  }
  st->count = n;
  qsort(st->tensors, n, sizeof(*st->tensors), cmp_offset);
  uint64_t pos = 0;
  for (i = 0; i < n; i++) {
    stitch_tensor *t = &st->tensors[i];
    if (t->offset != pos) {
      rc = stitch_diag_set(
          d, STITCH_EFORMAT,
          t->offset < pos
              ? "safetensors: tensor '%s' at offset %llu overlaps the previous "
                "tensor"
              : "safetensors: hole in the data before tensor '%s' at offset "
                "%llu",
          t->name, (unsigned long long)t->offset);
      goto out;
    }
    pos += t->nbytes;
    t->data = data + t->offset;
  }
  if (pos != data_len)
    rc = stitch_diag_set(d, STITCH_EFORMAT,
                         "safetensors: %llu trailing bytes after the last "
                         "tensor",
                         (unsigned long long)(data_len - pos));
out:
  json_decref(root);
  return rc;
}

int stitch_st_parse(const uint8_t *buf, size_t len, stitch_st **out,
                    stitch_diag *d) {
  *out = NULL;
  stitch_st *st = calloc(1, sizeof(*st));
  RETURN_IF(st == NULL, d, STITCH_ENOMEM, "out of memory");
  st->buf = buf;
  st->len = len;
  int rc = parse_header(st, d);
  if (rc != 0) {
    stitch_st_free(st);
    return rc;
  }
  *out = st;
  return 0;
}

int stitch_st_open(const char *path, stitch_st **out, stitch_diag *d) {
  *out = NULL;
  stitch_map m;
  CHECK_RC(stitch_map_open(path, &m, d));
  int rc = stitch_st_parse(m.data, m.len, out, d);
  if (rc != 0) {
    stitch_map_close(&m);
    return stitch_diag_prefix(d, rc, path); /* the error names the file */
  }
  (*out)->map = m;
  madvise(m.data, m.len, MADV_SEQUENTIAL);
  return 0;
}

void stitch_st_free(stitch_st *st) {
  if (st == NULL)
    return;
  stitch_map_close(&st->map);
  free(st->tensors);
  free(st->names);
  free(st->metadata);
  free(st);
}

size_t stitch_st_count(const stitch_st *st) { return st->count; }

const stitch_tensor *stitch_st_tensor(const stitch_st *st, size_t i) {
  return i < st->count ? &st->tensors[i] : NULL;
}

const stitch_tensor *stitch_st_find(const stitch_st *st, const char *name) {
  for (size_t i = 0; i < st->count; i++)
    if (strcmp(st->tensors[i].name, name) == 0)
      return &st->tensors[i];
  return NULL;
}

const char *stitch_st_metadata(const stitch_st *st) { return st->metadata; }

uint64_t stitch_st_file_size(const stitch_st *st) { return st->len; }

/* ---- writer ---------------------------------------------------------- */

typedef struct wtensor {
  char *name;
  stitch_dtype dtype;
  int ndim;
  uint64_t shape[STITCH_MAX_DIMS];
  uint64_t nbytes;
  uint64_t offset;
} wtensor;

struct stitch_st_writer {
  stitch_tmpfile tf;
  json_t *metadata;
  wtensor *t;
  size_t count, cap;
  uint64_t data_len;
  uint8_t *map;
  size_t map_len;
  size_t data_start;
};

int stitch_st_writer_new(const char *path, stitch_st_writer **out,
                         stitch_diag *d) {
  *out = NULL;
  stitch_st_writer *w = calloc(1, sizeof(*w));
  RETURN_IF(w == NULL, d, STITCH_ENOMEM, "out of memory");
  int rc = stitch_tmpfile_open(&w->tf, path, d);
  if (rc != 0) {
    free(w);
    return rc;
  }
  *out = w;
  return 0;
}

int stitch_st_writer_set_metadata(stitch_st_writer *w, const char *json,
                                  stitch_diag *d) {
  json_decref(w->metadata);
  w->metadata = NULL;
  if (json == NULL)
    return 0;
  json_error_t je;
  json_t *m = json_loads(json, JSON_REJECT_DUPLICATES, &je);
  if (m == NULL || !metadata_valid(m)) {
    json_decref(m);
    return stitch_diag_set(d, STITCH_EINVAL,
                           "metadata must be a JSON object of strings");
  }
  w->metadata = m;
  return 0;
}

int stitch_st_writer_add(stitch_st_writer *w, const char *name,
                         stitch_dtype dtype, int ndim, const uint64_t *shape,
                         stitch_diag *d) {
  RETURN_IF(w->map != NULL, d, STITCH_EINVAL, "writer is already mapped");
  RETURN_IF(stitch_dtype_size(dtype) == 0, d, STITCH_EDTYPE, "bad dtype");
  RETURN_IF(ndim < 0 || ndim > STITCH_MAX_DIMS, d, STITCH_ELIMIT,
            "tensor '%s': %d dims", name, ndim);
  size_t nl = strlen(name);
  RETURN_IF(nl == 0 || nl > STITCH_ST_MAX_NAME ||
                strcmp(name, "__metadata__") == 0,
            d, STITCH_EINVAL, "bad tensor name");
  json_t *valid = json_stringn(name, nl); /* NULL unless UTF-8 */
  RETURN_IF(valid == NULL, d, STITCH_EINVAL,
            "tensor name is not valid UTF-8");
  json_decref(valid);
  if (w->count == w->cap) {
    size_t nc = w->cap ? w->cap * 2 : 16;
    wtensor *nt = realloc(w->t, nc * sizeof(*nt));
    RETURN_IF(nt == NULL, d, STITCH_ENOMEM, "out of memory");
    w->t = nt;
    w->cap = nc;
  }
  wtensor *t = &w->t[w->count];
  uint64_t n = stitch_dtype_size(dtype);
  for (int i = 0; i < ndim; i++) {
    RETURN_IF(shape[i] != 0 && n > UINT64_MAX / shape[i], d, STITCH_ELIMIT,
              "tensor '%s' is too large", name);
    n *= shape[i];
    t->shape[i] = shape[i];
  }
  RETURN_IF(w->data_len > UINT64_MAX - n, d, STITCH_ELIMIT,
            "checkpoint is too large");
  t->name = strdup(name);
  RETURN_IF(t->name == NULL, d, STITCH_ENOMEM, "out of memory");
  t->dtype = dtype;
  t->ndim = ndim;
  t->nbytes = n;
  t->offset = w->data_len;
  w->data_len += n;
  w->count++;
  return 0;
}

/* NULL on failure (out of memory, or a duplicate name): every tensor
 * must be in the header, or the file would not describe its data. */
static char *header_json(json_t *meta, size_t n, const stitch_tensor *t) {
  json_t *root = json_object();
  int bad = root == NULL;
  if (!bad && meta != NULL)
    bad = json_object_set(root, "__metadata__", meta) != 0;
  for (size_t i = 0; i < n && !bad; i++) {
    json_t *e = json_object(), *sh = json_array(), *off = json_array();
    bad = e == NULL || sh == NULL || off == NULL ||
          json_object_set_new(e, "dtype",
                              json_string(stitch_dtype_name(t[i].dtype))) != 0;
    for (int k = 0; k < t[i].ndim && !bad; k++)
      bad = json_array_append_new(sh, json_integer((json_int_t)t[i].shape[k]));
    bad = bad ||
          json_array_append_new(off, json_integer((json_int_t)t[i].offset)) ||
          json_array_append_new(
              off, json_integer((json_int_t)(t[i].offset + t[i].nbytes)));
    if (!bad) {
      json_object_set_new(e, "shape", sh);
      json_object_set_new(e, "data_offsets", off);
      sh = off = NULL;
      bad = json_object_get(root, t[i].name) != NULL ||
            json_object_set_new(root, t[i].name, e) != 0;
      e = NULL;
    }
    json_decref(e);
    json_decref(sh);
    json_decref(off);
  }
  char *s = bad ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  return s;
}

char *st_header_json(const char *meta, size_t n, const stitch_tensor *t) {
  json_t *mj = NULL;
  if (meta != NULL && (mj = json_loads(meta, 0, NULL)) == NULL)
    return NULL;
  char *s = header_json(mj, n, t);
  json_decref(mj);
  return s;
}

static char *build_header(stitch_st_writer *w) {
  stitch_tensor *t = calloc(w->count ? w->count : 1, sizeof(*t));
  if (t == NULL)
    return NULL;
  for (size_t i = 0; i < w->count; i++) {
    t[i].name = w->t[i].name;
    t[i].dtype = w->t[i].dtype;
    t[i].ndim = w->t[i].ndim;
    memcpy(t[i].shape, w->t[i].shape, sizeof(t[i].shape));
    t[i].nbytes = w->t[i].nbytes;
    t[i].offset = w->t[i].offset;
  }
  char *s = header_json(w->metadata, w->count, t);
  free(t);
  return s;
}

int stitch_st_writer_map(stitch_st_writer *w, stitch_diag *d) {
  RETURN_IF(w->map != NULL, d, STITCH_EINVAL, "writer is already mapped");
  char *hdr = build_header(w);
  RETURN_IF(hdr == NULL, d, STITCH_EINVAL,
            "cannot build the header (duplicate tensor names, or out of "
            "memory)");
  size_t hl = strlen(hdr);
  size_t padded = (8 + hl + 7) / 8 * 8 - 8; /* data starts 8-aligned */
  w->data_start = 8 + padded;
  RETURN_IF(w->data_len > SIZE_MAX - w->data_start, d, STITCH_ELIMIT,
            "checkpoint is too large");
  w->map_len = w->data_start + w->data_len;
  int rc = 0;
  if (ftruncate(w->tf.fd, (off_t)w->map_len) != 0) {
    rc = stitch_diag_set(d, STITCH_EIO, "%s: cannot size file: %m", w->tf.path);
    goto out;
  }
  w->map = mmap(NULL, w->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, w->tf.fd,
                0);
  if (w->map == MAP_FAILED) {
    w->map = NULL;
    rc = stitch_diag_set(d, STITCH_EIO, "%s: mmap: %m", w->tf.path);
    goto out;
  }
  for (int i = 0; i < 8; i++)
    w->map[i] = (uint8_t)((uint64_t)padded >> (8 * i));
  memcpy(w->map + 8, hdr, hl);
  memset(w->map + 8 + hl, ' ', padded - hl);
out:
  free(hdr);
  return rc;
}

size_t stitch_st_writer_count(const stitch_st_writer *w) { return w->count; }

uint8_t *stitch_st_writer_data(stitch_st_writer *w, size_t i) {
  if (w->map == NULL || i >= w->count)
    return NULL;
  return w->map + w->data_start + w->t[i].offset;
}

int stitch_st_writer_commit(stitch_st_writer *w, stitch_diag *d) {
  if (w->map == NULL)
    CHECK_RC(stitch_st_writer_map(w, d));
  int rc = 0;
  if (msync(w->map, w->map_len, MS_SYNC) != 0)
    rc = stitch_diag_set(d, STITCH_EIO, "%s: msync: %m", w->tf.path);
  munmap(w->map, w->map_len);
  w->map = NULL;
  if (rc != 0)
    return rc;
  return stitch_tmpfile_commit(&w->tf, d);
}

void stitch_st_writer_free(stitch_st_writer *w) {
  if (w == NULL)
    return;
  if (w->map != NULL)
    munmap(w->map, w->map_len);
  stitch_tmpfile_abort(&w->tf);
  for (size_t i = 0; i < w->count; i++)
    free(w->t[i].name);
  free(w->t);
  json_decref(w->metadata);
  free(w);
}
