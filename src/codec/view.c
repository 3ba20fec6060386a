/* view.c: builds a served view (BF16, FP8, NVFP4) of a master checkpoint.
 *
 * The build is planned completely before the output is created: every
 * tensor's output form, every output name, and the previous view's matching
 * tensors are decided and checked first, so a bad input or a previous view
 * of the wrong shape fails before any byte is written. Only non-finite
 * master values are found while filling; the writer is then freed, which
 * removes its temporary file, so a failed build never leaves output. */
#include "codec/view_impl.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const kind_names[] = {"bf16", "fp8", "nvfp4"};

int stitch_view_kind_parse(const char *s, stitch_view_kind *out) {
  for (int k = 0; k < 3; k++)
    if (s != NULL && strcmp(s, kind_names[k]) == 0) {
      *out = (stitch_view_kind)k;
      return 0;
    }
  return STITCH_EINVAL;
}

const char *stitch_view_kind_name(stitch_view_kind k) {
  return (unsigned)k < 3 ? kind_names[k] : "?";
}

typedef enum out_form { OUT_COPY, OUT_BF16, OUT_FP8, OUT_NVFP4 } out_form;

/* One master tensor's plan. Output tensors are declared in plan order: the
 * tensor itself, then NAME_scale, then NAME_scale_2. */
typedef struct plan {
  const stitch_tensor *src;
  out_form form;
  uint64_t nblocks;                  /* scale blocks (fp8 / nvfp4) */
  size_t first_out;                  /* writer index of the tensor */
  const stitch_tensor *prev_scale;   /* NAME_scale in prev, or NULL */
  const stitch_tensor *prev_scale_2; /* NAME_scale_2 in prev, or NULL */
} plan;

static out_form choose_form(const stitch_tensor *t, stitch_view_kind kind) {
  if (t->dtype != STITCH_DT_F32)
    return OUT_COPY;
  /* Quantizing needs a matrix-like tensor; vectors (norms, biases) are
   * small and precision-sensitive, so they are served in BF16. */
  if (kind == STITCH_VIEW_BF16 || t->ndim < 2 || t->numel == 0)
    return OUT_BF16;
  if (kind == STITCH_VIEW_FP8)
    return OUT_FP8;
  return t->shape[t->ndim - 1] % 16 == 0 ? OUT_NVFP4 : OUT_BF16;
}

static int same_shape(const stitch_tensor *t, int ndim, const uint64_t *shape) {
  if (t->ndim != ndim)
    return 0;
  for (int i = 0; i < ndim; i++)
    if (t->shape[i] != shape[i])
      return 0;
  return 1;
}

/* Finds NAME + SUFFIX in PREV with the given dtype and shape. */
static int prev_tensor(const stitch_st *prev, const char *name,
                       const char *suffix, stitch_dtype dt, int ndim,
                       const uint64_t *shape, const stitch_tensor **out,
                       stitch_diag *d) {
  char full[STITCH_ST_MAX_NAME + 16];
  snprintf(full, sizeof(full), "%s%s", name, suffix);
  const stitch_tensor *t = stitch_st_find(prev, full);
  RETURN_IF(t == NULL, d, STITCH_EMISMATCH,
            "previous view lacks tensor '%.200s'", full);
  RETURN_IF(t->dtype != dt || !same_shape(t, ndim, shape), d, STITCH_EMISMATCH,
            "previous view's '%.200s' is %s with %d dims, expected %s of the "
            "layout for the current master",
            full, stitch_dtype_name(t->dtype), t->ndim, stitch_dtype_name(dt));
  *out = t;
  return 0;
}

/* Checks and links the previous view's tensors for one quantized tensor. */
static int plan_prev(const stitch_st *prev, plan *p, stitch_diag *d) {
  const stitch_tensor *t = p->src, *q;
  uint64_t shape[STITCH_MAX_DIMS];
  memcpy(shape, t->shape, sizeof(shape));
  if (p->form == OUT_FP8) {
    CHECK_RC(prev_tensor(prev, t->name, "", STITCH_DT_F8_E4M3, t->ndim, shape,
                         &q, d));
    CHECK_RC(prev_tensor(prev, t->name, "_scale", STITCH_DT_F32, 1, &p->nblocks,
                         &p->prev_scale, d));
    return 0;
  }
  shape[t->ndim - 1] /= 2;
  CHECK_RC(prev_tensor(prev, t->name, "", STITCH_DT_U8, t->ndim, shape, &q, d));
  shape[t->ndim - 1] = t->shape[t->ndim - 1] / 16;
  CHECK_RC(prev_tensor(prev, t->name, "_scale", STITCH_DT_F8_E4M3, t->ndim,
                       shape, &p->prev_scale, d));
  const uint64_t one = 1;
  return prev_tensor(prev, t->name, "_scale_2", STITCH_DT_F32, 1, &one,
                     &p->prev_scale_2, d);
}

/* The previous view must be of the same kind (and FP8 block size): its
 * scales mean nothing otherwise. */
static int check_prev_meta(const stitch_st *prev, const stitch_view_opts *o,
                           stitch_diag *d) {
  const char *m = stitch_st_metadata(prev);
  json_t *root = m != NULL ? json_loads(m, 0, NULL) : NULL;
  const char *kind = json_string_value(json_object_get(root, "stitch.view"));
  const char *blk =
      json_string_value(json_object_get(root, "stitch.fp8_block"));
  char want[16];
  snprintf(want, sizeof(want), "%" PRIu32, o->fp8_block);
  int rc = 0;
  if (kind == NULL)
    rc = stitch_diag_set(d, STITCH_EMISMATCH,
                         "previous view has no \"stitch.view\" metadata; is "
                         "it a view built by stitch?");
  else if (strcmp(kind, stitch_view_kind_name(o->kind)) != 0)
    rc = stitch_diag_set(d, STITCH_EMISMATCH, "previous view is %.16s, not %s",
                         kind, stitch_view_kind_name(o->kind));
  else if (o->kind == STITCH_VIEW_FP8 && (blk == NULL || strcmp(blk, want)))
    rc = stitch_diag_set(d, STITCH_EMISMATCH,
                         "previous view has fp8 block %.16s, not %s",
                         blk != NULL ? blk : "(none)", want);
  json_decref(root);
  return rc;
}

/* The master's metadata plus our keys, as JSON text (caller frees). */
static int build_metadata(const stitch_st *masters, const stitch_view_opts *o,
                          char **out, stitch_diag *d) {
  const char *m = stitch_st_metadata(masters);
  json_t *root = m != NULL ? json_loads(m, 0, NULL) : json_object();
  RETURN_IF(root == NULL, d, STITCH_ENOMEM, "out of memory");
  char blk[16];
  snprintf(blk, sizeof(blk), "%" PRIu32, o->fp8_block);
  int bad = json_object_set_new(root, "stitch.view",
                                json_string(stitch_view_kind_name(o->kind)));
  if (o->kind == STITCH_VIEW_FP8)
    bad |= json_object_set_new(root, "stitch.fp8_block", json_string(blk));
  else
    json_object_del(root, "stitch.fp8_block"); /* a stale key would lie */
  *out = bad ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  RETURN_IF(*out == NULL, d, STITCH_ENOMEM, "out of memory");
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Output names must be unique: a master holding both "w" and "w_scale"
 * would otherwise produce two tensors named "w_scale". NAMES holds N
 * pointers; they are sorted in place. */
static int check_unique(char **names, size_t n, stitch_diag *d) {
  qsort(names, n, sizeof(*names), cmp_str);
  for (size_t i = 1; i < n; i++)
    RETURN_IF(strcmp(names[i - 1], names[i]) == 0, d, STITCH_EEXISTS,
              "output tensor name '%.200s' would occur twice (a master "
              "tensor collides with a scale tensor's name)",
              names[i]);
  return 0;
}

static int declare(stitch_st_writer *w, const char *name, const char *suffix,
                   stitch_dtype dt, int ndim, const uint64_t *shape,
                   char **names, size_t *nn, stitch_diag *d) {
  size_t nl = strlen(name), sl = strlen(suffix);
  RETURN_IF(nl + sl > STITCH_ST_MAX_NAME, d, STITCH_ELIMIT,
            "tensor name '%.200s%s' is too long", name, suffix);
  char *full = malloc(nl + sl + 1);
  RETURN_IF(full == NULL, d, STITCH_ENOMEM, "out of memory");
  memcpy(full, name, nl);
  memcpy(full + nl, suffix, sl + 1);
  names[(*nn)++] = full;
  return stitch_st_writer_add(w, full, dt, ndim, shape, d);
}

/* Declares every output tensor of P in the writer. */
static int declare_plan(stitch_st_writer *w, plan *p, char **names, size_t *nn,
                        stitch_diag *d) {
  const stitch_tensor *t = p->src;
  uint64_t shape[STITCH_MAX_DIMS];
  memcpy(shape, t->shape, sizeof(shape));
  p->first_out = stitch_st_writer_count(w);
  switch (p->form) {
  case OUT_COPY:
    return declare(w, t->name, "", t->dtype, t->ndim, shape, names, nn, d);
  case OUT_BF16:
    return declare(w, t->name, "", STITCH_DT_BF16, t->ndim, shape, names, nn,
                   d);
  case OUT_FP8:
    CHECK_RC(declare(w, t->name, "", STITCH_DT_F8_E4M3, t->ndim, shape, names,
                     nn, d));
    return declare(w, t->name, "_scale", STITCH_DT_F32, 1, &p->nblocks, names,
                   nn, d);
  case OUT_NVFP4: {
    const uint64_t one = 1;
    shape[t->ndim - 1] /= 2;
    CHECK_RC(
        declare(w, t->name, "", STITCH_DT_U8, t->ndim, shape, names, nn, d));
    shape[t->ndim - 1] = t->shape[t->ndim - 1] / 16;
    CHECK_RC(declare(w, t->name, "_scale", STITCH_DT_F8_E4M3, t->ndim, shape,
                     names, nn, d));
    return declare(w, t->name, "_scale_2", STITCH_DT_F32, 1, &one, names, nn,
                   d);
  }
  }
  return STITCH_EINVAL;
}

static int fill_plan(stitch_st_writer *w, const plan *p, uint32_t fp8_block,
                     view_counts *c, stitch_diag *d) {
  const stitch_tensor *t = p->src;
  uint8_t *out = stitch_st_writer_data(w, p->first_out);
  switch (p->form) {
  case OUT_COPY:
    if (t->nbytes != 0)
      memcpy(out, t->data, t->nbytes);
    return 0;
  case OUT_BF16:
    for (uint64_t i = 0; i < t->numel; i++) {
      uint16_t h = stitch_f32_to_bf16(view_ld_f32(t->data, i));
      memcpy(out + 2 * i, &h, 2);
    }
    return 0;
  case OUT_FP8:
    return stitch_view_fp8_tensor(
        t, fp8_block, p->prev_scale != NULL ? p->prev_scale->data : NULL, out,
        stitch_st_writer_data(w, p->first_out + 1), c, d);
  case OUT_NVFP4:
    return stitch_view_nvfp4_tensor(
        t, p->prev_scale != NULL ? p->prev_scale->data : NULL,
        p->prev_scale_2 != NULL ? p->prev_scale_2->data : NULL, out,
        stitch_st_writer_data(w, p->first_out + 1),
        stitch_st_writer_data(w, p->first_out + 2), c, d);
  }
  return STITCH_EINVAL;
}

int stitch_view_build(const stitch_st *masters, const stitch_st *prev,
                      const stitch_view_opts *opts, const char *out_path,
                      stitch_view_stats *stats, stitch_diag *d) {
  RETURN_IF(masters == NULL || opts == NULL || out_path == NULL, d,
            STITCH_EINVAL, "view: missing argument");
  RETURN_IF((unsigned)opts->kind > STITCH_VIEW_NVFP4, d, STITCH_EINVAL,
            "view: unknown kind %d", (int)opts->kind);
  RETURN_IF(opts->kind != STITCH_VIEW_FP8 && opts->fp8_block != 0, d,
            STITCH_EINVAL, "view: an fp8 block size is only for fp8 views");
  if (prev != NULL)
    CHECK_RC(check_prev_meta(prev, opts, d));

  size_t n = stitch_st_count(masters);
  plan *plans = calloc(n ? n : 1, sizeof(*plans));
  char **names = calloc(3 * n + 1, sizeof(*names));
  char *meta = NULL;
  stitch_st_writer *w = NULL;
  size_t nn = 0;
  view_counts c = {0, 0};
  int rc = 0;
  if (plans == NULL || names == NULL) {
    rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    plan *p = &plans[i];
    p->src = stitch_st_tensor(masters, i);
    p->form = choose_form(p->src, opts->kind);
    if (p->form == OUT_FP8)
      p->nblocks = stitch_view_fp8_nblocks(p->src->numel, opts->fp8_block);
    else if (p->form == OUT_NVFP4)
      p->nblocks = p->src->numel / 16;
    if (prev != NULL && (p->form == OUT_FP8 || p->form == OUT_NVFP4))
      rc = plan_prev(prev, p, d);
  }
  if (rc == 0)
    rc = build_metadata(masters, opts, &meta, d);
  if (rc == 0)
    rc = stitch_st_writer_new(out_path, &w, d);
  if (rc == 0)
    rc = stitch_st_writer_set_metadata(w, meta, d);
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = declare_plan(w, &plans[i], names, &nn, d);
  if (rc == 0)
    rc = check_unique(names, nn, d);
  if (rc == 0)
    rc = stitch_st_writer_map(w, d);
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = fill_plan(w, &plans[i], opts->fp8_block, &c, d);
  if (rc == 0)
    rc = stitch_st_writer_commit(w, d);
  if (rc == 0 && stats != NULL) {
    stats->tensors = nn;
    stats->scale_blocks = c.blocks;
    stats->scales_changed = c.changed;
  }
out:
  stitch_st_writer_free(w); /* after commit: frees; before: removes temp */
  for (size_t i = 0; i < nn; i++)
    free(names[i]);
  free(names);
  free(meta);
  free(plans);
  return rc;
}
