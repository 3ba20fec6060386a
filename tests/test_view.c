/* test_view.c: stitch_view_build (src/codec/view*.c).
 *
 * A small random F32 checkpoint is written with the public writer in a
 * mkdtemp directory, viewed in every kind, and the output is reopened with
 * stitch_st_open and checked: layout, metadata, exact bytes of fresh scales
 * and values, and dequantization error within the format's half step.
 * Delta stability: an Adam-like step of the masters rebuilt with --prev
 * keeps every scale and changes few bytes; a block whose amax outgrows its
 * scale (or shrinks far below it) gets a new scale while every other block
 * keeps its scale and bytes; an NVFP4 tensor-scale change moves by a power
 * of two so the other blocks keep their packed bytes. Bad previous views
 * fail with STITCH_EMISMATCH and leave no output. The last test prints the
 * policy trade-off table quoted in docs/views.md. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include "stitch.h"
#include "test.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <unistd.h>

/* ---- files ------------------------------------------------------------ */

static char g_dir[64];

static const char *tpath(const char *name) {
  static char slots[8][128];
  static int next;
  char *p = slots[next++ & 7];
  if (snprintf(p, 128, "%s/%s", g_dir, name) >= 128)
    FAIL_("test path too long: %s", name);
  return p;
}

static int dir_entries(void) {
  DIR *dp = opendir(g_dir);
  ASSERT(dp != NULL);
  int n = 0;
  for (struct dirent *e; (e = readdir(dp)) != NULL;)
    n += e->d_name[0] != '.';
  closedir(dp);
  return n;
}

typedef struct tdesc {
  const char *name;
  stitch_dtype dt;
  int ndim;
  uint64_t shape[4];
  const void *data;
} tdesc;

static void write_ckpt(const char *path, const char *meta, const tdesc *ts,
                       size_t n) {
  stitch_diag d = {{0}};
  stitch_st_writer *w;
  ASSERT_OK(stitch_st_writer_new(path, &w, &d), d);
  ASSERT_OK(stitch_st_writer_set_metadata(w, meta, &d), d);
  for (size_t i = 0; i < n; i++)
    ASSERT_OK(stitch_st_writer_add(w, ts[i].name, ts[i].dt, ts[i].ndim,
                                   ts[i].shape, &d),
              d);
  ASSERT_OK(stitch_st_writer_map(w, &d), d);
  for (size_t i = 0; i < n; i++) {
    uint64_t nb = stitch_dtype_size(ts[i].dt);
    for (int k = 0; k < ts[i].ndim; k++)
      nb *= ts[i].shape[k];
    if (nb)
      memcpy(stitch_st_writer_data(w, i), ts[i].data, nb);
  }
  ASSERT_OK(stitch_st_writer_commit(w, &d), d);
  stitch_st_writer_free(w);
}

static stitch_st *open_st(const char *path) {
  stitch_diag d = {{0}};
  stitch_st *st;
  ASSERT_OK(stitch_st_open(path, &st, &d), d);
  return st;
}

static const stitch_tensor *get(const stitch_st *st, const char *name) {
  const stitch_tensor *t = stitch_st_find(st, name);
  if (t == NULL)
    FAIL_("tensor '%s' missing", name);
  return t;
}

static const stitch_tensor *get2(const stitch_st *st, const char *name,
                                 const char *suffix) {
  char full[128];
  snprintf(full, sizeof(full), "%s%s", name, suffix);
  return get(st, full);
}

static float ldf(const stitch_tensor *t, uint64_t i) {
  float f;
  memcpy(&f, t->data + 4 * i, 4);
  return f;
}

/* ---- the model -------------------------------------------------------- */

enum { WR = 64, WC = 96, OR = 32, OC = 64 };

typedef struct model {
  float w[WR * WC];   /* rows scaled by 2^-2..2^2: blocks of many scales */
  float wo[OR * OC];  /* one outlier */
  float norm[96];     /* 1-D: served as BF16 */
  float odd[10 * 20]; /* last dim 20: BF16 in nvfp4, FP8 in fp8 */
  float zero[4 * 32]; /* all zero */
  int64_t pos[3];     /* copied */
  uint16_t emb[4 * 16];
} model;

static double gauss(test_rng *r) {
  double u = test_rng_unit(r) + 1e-300, v = test_rng_unit(r);
  return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static void model_init(model *m, test_rng *r) {
  for (int i = 0; i < WR * WC; i++)
    m->w[i] = (float)(0.02 * gauss(r) * ldexp(1, (i / WC) % 5 - 2));
  for (int i = 0; i < OR * OC; i++)
    m->wo[i] = (float)(0.02 * gauss(r));
  m->wo[3 * OC + 17] = 0.5f;
  for (int i = 0; i < 96; i++)
    m->norm[i] = (float)(1 + 0.1 * gauss(r));
  for (int i = 0; i < 200; i++)
    m->odd[i] = (float)(0.05 * gauss(r));
  memset(m->zero, 0, sizeof(m->zero));
  m->pos[0] = 1, m->pos[1] = -2, m->pos[2] = 1ll << 40;
  for (int i = 0; i < 64; i++)
    m->emb[i] = (uint16_t)(0x3C00 + i);
}

static const char *k_meta = "{\"step\":\"7\",\"stitch.fp8_block\":\"9\"}";

static void model_write(const char *path, const model *m) {
  const tdesc ts[] = {
      {"layers.0.w", STITCH_DT_F32, 2, {WR, WC}, m->w},
      {"layers.0.wo", STITCH_DT_F32, 2, {OR, OC}, m->wo},
      {"norm", STITCH_DT_F32, 1, {96}, m->norm},
      {"odd", STITCH_DT_F32, 2, {10, 20}, m->odd},
      {"zero", STITCH_DT_F32, 3, {2, 2, 32}, m->zero},
      {"pos", STITCH_DT_I64, 1, {3}, m->pos},
      {"emb", STITCH_DT_BF16, 2, {4, 16}, m->emb},
  };
  write_ckpt(path, k_meta, ts, sizeof(ts) / sizeof(ts[0]));
}

/* An Adam-like step: every weight moves by lr, in a random direction, or
 * with DRIFT in a direction fixed per element (a steady gradient, which
 * moves block maxima steadily and so exercises the scale policy). */
static void adam_step(float *x, size_t n, double lr, int drift, test_rng *r) {
  for (size_t i = 0; i < n; i++) {
    test_rng fixed = {i * 7919 + n};
    uint64_t z = drift ? test_rng_next(&fixed) : test_rng_next(r);
    x[i] += (float)((z & 1) ? lr : -lr);
  }
}

static void model_step_d(model *m, double lr, int drift, test_rng *r) {
  adam_step(m->w, WR * WC, lr, drift, r);
  adam_step(m->wo, OR * OC, lr, drift, r);
  adam_step(m->norm, 96, lr, drift, r);
  adam_step(m->odd, 200, lr, drift, r);
}

static void model_step(model *m, double lr, test_rng *r) {
  model_step_d(m, lr, 0, r);
}

/* ---- building --------------------------------------------------------- */

static int build(const char *mpath, const char *prev_path, stitch_view_kind k,
                 uint32_t block, const char *out, stitch_view_stats *st,
                 stitch_diag *d) {
  stitch_st *m = open_st(mpath);
  stitch_st *p = prev_path != NULL ? open_st(prev_path) : NULL;
  stitch_view_opts o = {k, block};
  int rc = stitch_view_build(m, p, &o, out, st, d);
  stitch_st_free(m);
  stitch_st_free(p);
  return rc;
}

static void build_ok(const char *mpath, const char *prev_path,
                     stitch_view_kind k, uint32_t block, const char *out,
                     stitch_view_stats *st) {
  stitch_diag d = {{0}};
  ASSERT_OK(build(mpath, prev_path, k, block, out, st, &d), d);
}

/* ---- checking a view against its masters ------------------------------ */

static const stitch_view_kind kinds[] = {STITCH_VIEW_BF16, STITCH_VIEW_FP8,
                                         STITCH_VIEW_NVFP4};

/* The output form of a master tensor: 0 copy, 1 bf16, 2 quantized. */
static int form_of(const stitch_tensor *t, stitch_view_kind k) {
  if (t->dtype != STITCH_DT_F32)
    return 0;
  if (k == STITCH_VIEW_BF16 || t->ndim < 2)
    return 1;
  if (k == STITCH_VIEW_NVFP4 && t->shape[t->ndim - 1] % 16)
    return 1;
  return 2;
}

/* Smallest E4M3 value >= v, by search over the codes. */
static uint8_t e4m3_ceil_ref(double v) {
  for (int c = 0; c < 0x7E; c++)
    if (stitch_e4m3_to_f32((uint8_t)c) >= v)
      return (uint8_t)c;
  return 0x7E;
}

static void check_fp8(const stitch_tensor *x, const stitch_tensor *q,
                      const stitch_tensor *s, uint32_t block, int fresh) {
  ASSERT_EQ(q->dtype, STITCH_DT_F8_E4M3);
  ASSERT_EQ(q->ndim, x->ndim);
  ASSERT_MEM_EQ(q->shape, x->shape, sizeof(uint64_t) * (size_t)x->ndim);
  uint64_t bs = block ? block : x->numel;
  ASSERT_EQ(s->dtype, STITCH_DT_F32);
  ASSERT_EQ(s->ndim, 1);
  ASSERT_UEQ(s->shape[0], (x->numel + bs - 1) / bs);
  for (uint64_t b = 0; b < s->shape[0]; b++) {
    uint64_t lo = b * bs, hi = lo + bs < x->numel ? lo + bs : x->numel;
    double amax = 0;
    for (uint64_t i = lo; i < hi; i++)
      amax = fmax(amax, fabs(ldf(x, i)));
    float sc = ldf(s, b);
    if (fresh)
      ASSERT_EQ(sc, (float)amax / 448.0f);
    ASSERT(amax <= 464.0 * sc); /* kept scales may saturate a little */
    for (uint64_t i = lo; i < hi; i++) {
      float xi = ldf(x, i);
      if (fresh)
        ASSERT_EQ(q->data[i], sc > 0 ? stitch_f32_to_e4m3(xi / sc)
                                     : stitch_f32_to_e4m3(xi));
      double y = (double)stitch_e4m3_to_f32(q->data[i]) * sc;
      double tol = fmax(fabs(xi) * 0x1p-4, sc * 0x1p-10) * (1 + 0x1p-18);
      if (fabs(y - xi) > tol)
        FAIL_("fp8 element %llu: %g dequantizes to %g (scale %g)",
              (unsigned long long)i, xi, y, sc);
    }
  }
}

static void check_nvfp4(const stitch_tensor *x, const stitch_tensor *q,
                        const stitch_tensor *sb, const stitch_tensor *s2,
                        int fresh) {
  int nd = x->ndim;
  uint64_t k = x->shape[nd - 1];
  ASSERT_EQ(q->dtype, STITCH_DT_U8);
  ASSERT_EQ(sb->dtype, STITCH_DT_F8_E4M3);
  ASSERT_EQ(s2->dtype, STITCH_DT_F32);
  ASSERT(q->ndim == nd && sb->ndim == nd && s2->ndim == 1);
  ASSERT_UEQ(s2->shape[0], 1);
  for (int i = 0; i < nd - 1; i++)
    ASSERT(q->shape[i] == x->shape[i] && sb->shape[i] == x->shape[i]);
  ASSERT_UEQ(q->shape[nd - 1], k / 2);
  ASSERT_UEQ(sb->shape[nd - 1], k / 16);
  float S = ldf(s2, 0);
  double amax_t = 0;
  for (uint64_t i = 0; i < x->numel; i++)
    amax_t = fmax(amax_t, fabs(ldf(x, i)));
  if (fresh)
    ASSERT_EQ(S, (float)amax_t / 2688.0f);
  for (uint64_t b = 0; b < x->numel / 16; b++) {
    double amax = 0;
    for (int j = 0; j < 16; j++)
      amax = fmax(amax, fabs(ldf(x, b * 16 + j)));
    float sbv = stitch_e4m3_to_f32(sb->data[b]);
    if (fresh && amax > 0)
      ASSERT_EQ(sb->data[b], e4m3_ceil_ref((float)amax / (S * 6.0f)));
    double u = (double)sbv * S;
    ASSERT(amax <= 7 * u);
    for (int j = 0; j < 16; j++) {
      uint64_t i = b * 16 + j;
      float xi = ldf(x, i);
      uint8_t code = (q->data[i / 2] >> (4 * (i & 1))) & 15;
      if (fresh && u > 0)
        ASSERT_EQ(code, stitch_f32_to_e2m1(xi / (float)u));
      double y = (double)stitch_e2m1_to_f32(code) * u;
      double tol = fmax(0.25 * u, fabs(xi) / 4) * (1 + 0x1p-18);
      if (fabs(y - xi) > tol)
        FAIL_("nvfp4 element %llu: %g dequantizes to %g (unit %g)",
              (unsigned long long)i, xi, y, u);
    }
  }
}

/* Checks every tensor of view VPATH against masters MPATH. */
static void check_view(const char *mpath, const char *vpath, stitch_view_kind k,
                       uint32_t block, int fresh) {
  stitch_st *m = open_st(mpath), *v = open_st(vpath);
  json_t *meta = json_loads(stitch_st_metadata(v), 0, NULL);
  ASSERT(meta != NULL);
  ASSERT_STR_EQ(json_string_value(json_object_get(meta, "stitch.view")),
                stitch_view_kind_name(k));
  ASSERT_STR_EQ(json_string_value(json_object_get(meta, "step")), "7");
  const char *blk =
      json_string_value(json_object_get(meta, "stitch.fp8_block"));
  if (k == STITCH_VIEW_FP8) {
    char want[16];
    snprintf(want, sizeof(want), "%u", block);
    ASSERT(blk != NULL && strcmp(blk, want) == 0);
  } else {
    ASSERT(blk == NULL);
  }
  json_decref(meta);
  size_t nout = 0;
  for (size_t i = 0; i < stitch_st_count(m); i++) {
    const stitch_tensor *x = stitch_st_tensor(m, i), *y = get(v, x->name);
    int f = form_of(x, k);
    nout += f == 2 ? (k == STITCH_VIEW_FP8 ? 2 : 3) : 1;
    if (f == 0) {
      ASSERT_EQ(y->dtype, x->dtype);
      ASSERT_UEQ(y->nbytes, x->nbytes);
      ASSERT_MEM_EQ(y->data, x->data, x->nbytes);
    } else if (f == 1) {
      ASSERT_EQ(y->dtype, STITCH_DT_BF16);
      ASSERT_UEQ(y->numel, x->numel);
      for (uint64_t j = 0; j < x->numel; j++) {
        uint16_t h;
        memcpy(&h, y->data + 2 * j, 2);
        ASSERT_EQ(h, stitch_f32_to_bf16(ldf(x, j)));
        ASSERT(fabs(stitch_bf16_to_f32(h) - ldf(x, j)) <=
               fabs(ldf(x, j)) * 0x1p-8);
      }
    } else if (k == STITCH_VIEW_FP8) {
      check_fp8(x, y, get2(v, x->name, "_scale"), block, fresh);
    } else {
      check_nvfp4(x, y, get2(v, x->name, "_scale"),
                  get2(v, x->name, "_scale_2"), fresh);
    }
  }
  ASSERT_UEQ(stitch_st_count(v), nout);
  stitch_st_free(m);
  stitch_st_free(v);
}

/* ---- comparing two views ---------------------------------------------- */

typedef struct vdiff {
  uint64_t payload, payload_changed, scale, scale_changed;
} vdiff;

static int is_scale(const char *name) {
  size_t n = strlen(name);
  return (n > 6 && strcmp(name + n - 6, "_scale") == 0) ||
         (n > 8 && strcmp(name + n - 8, "_scale_2") == 0);
}

static vdiff diff_views(const char *a_path, const char *b_path) {
  stitch_st *a = open_st(a_path), *b = open_st(b_path);
  vdiff r = {0, 0, 0, 0};
  ASSERT_UEQ(stitch_st_count(a), stitch_st_count(b));
  for (size_t i = 0; i < stitch_st_count(a); i++) {
    const stitch_tensor *x = stitch_st_tensor(a, i), *y = get(b, x->name);
    ASSERT_UEQ(x->nbytes, y->nbytes);
    uint64_t ch = 0;
    for (uint64_t j = 0; j < x->nbytes; j++)
      ch += x->data[j] != y->data[j];
    if (is_scale(x->name)) {
      r.scale += x->nbytes, r.scale_changed += ch;
    } else {
      r.payload += x->nbytes, r.payload_changed += ch;
    }
  }
  stitch_st_free(a);
  stitch_st_free(b);
  return r;
}

static void files_equal(const char *a, const char *b) {
  stitch_st *x = open_st(a), *y = open_st(b);
  uint64_t n = stitch_st_file_size(x);
  ASSERT_UEQ(n, stitch_st_file_size(y));
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  ASSERT(fa != NULL && fb != NULL);
  for (int ca, cb; (ca = fgetc(fa)) != EOF;) {
    cb = fgetc(fb);
    ASSERT_EQ(ca, cb);
  }
  fclose(fa);
  fclose(fb);
  stitch_st_free(x);
  stitch_st_free(y);
}

/* ---- tests ------------------------------------------------------------ */

/* Fresh views of every kind: layout, bytes and error; stats; determinism. */
static void test_fresh(test_rng *r) {
  model *m = malloc(sizeof(*m));
  model_init(m, r);
  model_write(tpath("m1"), m);
  struct {
    stitch_view_kind k;
    uint32_t block;
    uint64_t tensors, blocks;
  } cases[] = {
      {STITCH_VIEW_BF16, 0, 7, 0},
      {STITCH_VIEW_FP8, 0, 11, 4},
      {STITCH_VIEW_FP8, 64, 11, 96 + 32 + 4 + 2},
      {STITCH_VIEW_FP8, 1000, 11, 7 + 3 + 1 + 1},
      {STITCH_VIEW_NVFP4, 0, 13, 384 + 128 + 8},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    stitch_view_stats st;
    build_ok(tpath("m1"), NULL, cases[i].k, cases[i].block, tpath("v1"), &st);
    ASSERT_UEQ(st.tensors, cases[i].tensors);
    ASSERT_UEQ(st.scale_blocks, cases[i].blocks);
    ASSERT_UEQ(st.scales_changed, cases[i].blocks); /* all new */
    check_view(tpath("m1"), tpath("v1"), cases[i].k, cases[i].block, 1);
    build_ok(tpath("m1"), NULL, cases[i].k, cases[i].block, tpath("v1b"), NULL);
    files_equal(tpath("v1"), tpath("v1b"));
  }
  /* NaN survives a BF16 view, but no scale can be chosen for it. */
  m->w[5] = NAN;
  m->odd[3] = INFINITY;
  model_write(tpath("mnan"), m);
  build_ok(tpath("mnan"), NULL, STITCH_VIEW_BF16, 0, tpath("vnan"), NULL);
  stitch_st *v = open_st(tpath("vnan"));
  uint16_t h;
  memcpy(&h, get(v, "layers.0.w")->data + 10, 2);
  ASSERT(isnan(stitch_bf16_to_f32(h)));
  stitch_st_free(v);
  int before = dir_entries();
  for (int k = 1; k <= 2; k++) {
    stitch_diag d = {{0}};
    ASSERT_EQ(build(tpath("mnan"), NULL, kinds[k], 0, tpath("vbad"), NULL, &d),
              STITCH_EINVAL);
    ASSERT(strstr(d.msg, "layers.0.w") != NULL);
    ASSERT(access(tpath("vbad"), F_OK) != 0);
    ASSERT_EQ(dir_entries(), before);
  }
  free(m);
}

/* Rebuilds after an Adam step keep every scale and change few bytes. */
static void test_stable(test_rng *r, stitch_view_kind k, uint32_t block,
                        double max_frac) {
  model *m = malloc(sizeof(*m));
  model_init(m, r);
  model_write(tpath("s1"), m);
  build_ok(tpath("s1"), NULL, k, block, tpath("sv1"), NULL);
  model_step(m, 1e-6, r);
  model_write(tpath("s2"), m);
  stitch_view_stats st;
  build_ok(tpath("s2"), tpath("sv1"), k, block, tpath("sv2"), &st);
  ASSERT_UEQ(st.scales_changed, 0);
  check_view(tpath("s2"), tpath("sv2"), k, block, 0);
  vdiff dv = diff_views(tpath("sv1"), tpath("sv2"));
  ASSERT_UEQ(dv.scale_changed, 0);
  double frac = (double)dv.payload_changed / (double)dv.payload;
  fprintf(stderr, "  %-5s block %4u: %.4f of payload bytes changed\n",
          stitch_view_kind_name(k), block, frac);
  ASSERT_DBL_LE(frac, max_frac);
  /* Determinism with a previous view too. */
  build_ok(tpath("s2"), tpath("sv1"), k, block, tpath("sv2b"), NULL);
  files_equal(tpath("sv2"), tpath("sv2b"));
  free(m);
}

/* Reads scale (fp8: F32; nvfp4: decoded E4M3) b of NAME in view PATH. */
static double scale_at(const char *path, const char *name, uint64_t b,
                       stitch_view_kind k) {
  stitch_st *v = open_st(path);
  const stitch_tensor *s = get2(v, name, "_scale");
  double r = k == STITCH_VIEW_FP8 ? ldf(s, b) : stitch_e4m3_to_f32(s->data[b]);
  stitch_st_free(v);
  return r;
}

/* Asserts that views A and B differ only inside element range [lo, hi) of
 * tensor NAME (payload) and scale block SB (or nowhere with SB = -1). */
static void only_block_differs(const char *a_path, const char *b_path,
                               const char *name, uint64_t lo, uint64_t hi,
                               int64_t sb, stitch_view_kind k) {
  stitch_st *a = open_st(a_path), *b = open_st(b_path);
  char sname[128];
  snprintf(sname, sizeof(sname), "%s_scale", name);
  size_t esz = k == STITCH_VIEW_FP8 ? 4 : 1;
  for (size_t i = 0; i < stitch_st_count(a); i++) {
    const stitch_tensor *x = stitch_st_tensor(a, i), *y = get(b, x->name);
    for (uint64_t j = 0; j < x->nbytes; j++) {
      if (x->data[j] == y->data[j])
        continue;
      uint64_t e = k == STITCH_VIEW_NVFP4 ? 2 * j : j; /* payload element */
      if (strcmp(x->name, name) == 0 && e >= lo && e < hi)
        continue;
      if (strcmp(x->name, sname) == 0 && (int64_t)(j / esz) == sb)
        continue;
      FAIL_("byte %llu of '%s' changed outside the block",
            (unsigned long long)j, x->name);
    }
  }
  stitch_st_free(a);
  stitch_st_free(b);
}

/* One block outgrows its scale, another shrinks far below it: exactly that
 * block gets a new scale (with headroom); all others keep scale and bytes. */
static void test_block_changes(test_rng *r, stitch_view_kind k,
                               uint32_t block) {
  model *m = malloc(sizeof(*m));
  model_init(m, r);
  model_write(tpath("g1"), m);
  build_ok(tpath("g1"), NULL, k, block, tpath("gv1"), NULL);
  uint64_t bs = k == STITCH_VIEW_FP8 ? block : 16;
  const char *w = "layers.0.w";

  /* Growth in block 6. */
  uint64_t b = 6, lo = b * bs;
  double s_old = scale_at(tpath("gv1"), w, b, k);
  double unit_old = s_old;
  stitch_st *v1 = open_st(tpath("gv1"));
  if (k == STITCH_VIEW_NVFP4)
    unit_old *= ldf(get2(v1, w, "_scale_2"), 0);
  stitch_st_free(v1);
  double fit = k == STITCH_VIEW_FP8 ? 464.0 : 7.0;
  m->w[lo + 3] = (float)(1.3 * fit * unit_old);
  model_write(tpath("g2"), m);
  stitch_view_stats st;
  build_ok(tpath("g2"), tpath("gv1"), k, block, tpath("gv2"), &st);
  ASSERT_UEQ(st.scales_changed, 1);
  check_view(tpath("g2"), tpath("gv2"), k, block, 0);
  only_block_differs(tpath("gv1"), tpath("gv2"), w, lo, lo + bs, (int64_t)b, k);
  double s_new = scale_at(tpath("gv2"), w, b, k);
  double amax = m->w[lo + 3];
  if (k == STITCH_VIEW_FP8) { /* fits without saturating, with headroom */
    ASSERT(amax <= 448 * s_new && amax >= 448 * s_new / 2.5);
  } else { /* fresh rule under the unchanged S */
    ASSERT(amax <= 6 * s_new * unit_old / s_old);
    ASSERT(amax >= 5 * s_new * unit_old / s_old);
  }

  /* A block shrunk 5x gets a smaller scale; nothing else changes. */
  uint64_t c = 13, clo = c * bs;
  for (uint64_t i = clo; i < clo + bs; i++)
    m->w[i] *= 0.2f;
  model_write(tpath("g3"), m);
  build_ok(tpath("g3"), tpath("gv2"), k, block, tpath("gv3"), &st);
  ASSERT_UEQ(st.scales_changed, 1);
  ASSERT(scale_at(tpath("gv3"), w, c, k) < scale_at(tpath("gv2"), w, c, k));
  only_block_differs(tpath("gv2"), tpath("gv3"), w, clo, clo + bs, (int64_t)c,
                     k);
  check_view(tpath("g3"), tpath("gv3"), k, block, 0);
  free(m);
}

/* NVFP4: the tensor amax triples, so S must change; it moves by a power
 * of two and every other block keeps its effective scale and bytes. */
static void test_nvfp4_tensor_scale(test_rng *r) {
  model *m = malloc(sizeof(*m));
  model_init(m, r);
  model_write(tpath("t1"), m);
  build_ok(tpath("t1"), NULL, STITCH_VIEW_NVFP4, 0, tpath("tv1"), NULL);
  uint64_t at = 3 * OC + 17; /* the outlier, in block 13 */
  m->wo[at] *= 3;
  model_write(tpath("t2"), m);
  stitch_view_stats st;
  build_ok(tpath("t2"), tpath("tv1"), STITCH_VIEW_NVFP4, 0, tpath("tv2"), &st);
  ASSERT_UEQ(st.scales_changed, 1);
  check_view(tpath("t2"), tpath("tv2"), STITCH_VIEW_NVFP4, 0, 0);
  stitch_st *a = open_st(tpath("tv1")), *b = open_st(tpath("tv2"));
  float s1 = ldf(get(a, "layers.0.wo_scale_2"), 0);
  float s2 = ldf(get(b, "layers.0.wo_scale_2"), 0);
  int e1, e2;
  ASSERT(s2 > s1 && frexpf(s1, &e1) == frexpf(s2, &e2));
  const stitch_tensor *qa = get(a, "layers.0.wo"), *qb = get(b, "layers.0.wo");
  for (uint64_t j = 0; j < qa->nbytes; j++)
    if (j / 8 != at / 16)
      ASSERT_EQ(qa->data[j], qb->data[j]);
  /* Only wo's scale bytes and its bumped block changed. */
  for (size_t i = 0; i < stitch_st_count(a); i++) {
    const stitch_tensor *x = stitch_st_tensor(a, i), *y = get(b, x->name);
    if (strncmp(x->name, "layers.0.wo", 11) != 0)
      ASSERT_MEM_EQ(x->data, y->data, x->nbytes);
  }
  stitch_st_free(a);
  stitch_st_free(b);
  free(m);
}

/* A previous view that cannot be used fails cleanly, leaving no output. */
static void test_bad_prev(test_rng *r) {
  model *m = malloc(sizeof(*m));
  model_init(m, r);
  model_write(tpath("b1"), m);
  build_ok(tpath("b1"), NULL, STITCH_VIEW_BF16, 0, tpath("bv_bf16"), NULL);
  build_ok(tpath("b1"), NULL, STITCH_VIEW_FP8, 64, tpath("bv_fp8"), NULL);
  build_ok(tpath("b1"), NULL, STITCH_VIEW_NVFP4, 0, tpath("bv_fp4"), NULL);

  /* Copies of the nvfp4 view with one tensor dropped or altered. */
  stitch_st *v = open_st(tpath("bv_fp4"));
  size_t n = stitch_st_count(v);
  tdesc *ts = calloc(n, sizeof(*ts));
  const char *variants[] = {"drop", "dtype", "shape", NULL};
  for (int vi = 0; variants[vi]; vi++) {
    size_t nt = 0;
    for (size_t i = 0; i < n; i++) {
      const stitch_tensor *t = stitch_st_tensor(v, i);
      tdesc x = {t->name, t->dtype, t->ndim, {0}, t->data};
      memcpy(x.shape, t->shape, sizeof(x.shape));
      if (strcmp(t->name, "layers.0.w_scale") == 0) {
        if (vi == 0)
          continue;
        if (vi == 1)
          x.dt = STITCH_DT_U8;
        if (vi == 2)
          x.ndim = 1, x.shape[0] = t->numel;
      }
      ts[nt++] = x;
    }
    char name[32];
    snprintf(name, sizeof(name), "bv_%s", variants[vi]);
    write_ckpt(tpath(name), stitch_st_metadata(v), ts, nt);
  }
  free(ts);
  stitch_st_free(v);

  struct {
    stitch_view_kind k;
    uint32_t block;
    const char *prev, *why;
  } cases[] = {
      {STITCH_VIEW_FP8, 64, "bv_bf16", "is bf16"},
      {STITCH_VIEW_FP8, 0, "bv_fp8", "block 64"},
      {STITCH_VIEW_NVFP4, 0, "bv_fp8", "is fp8"},
      {STITCH_VIEW_NVFP4, 0, "b1", "no \"stitch.view\""},
      {STITCH_VIEW_NVFP4, 0, "bv_drop", "lacks tensor 'layers.0.w_scale'"},
      {STITCH_VIEW_NVFP4, 0, "bv_dtype", "'layers.0.w_scale' is U8"},
      {STITCH_VIEW_NVFP4, 0, "bv_shape", "with 1 dims"},
  };
  int before = dir_entries();
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    stitch_diag d = {{0}};
    int rc = build(tpath("b1"), tpath(cases[i].prev), cases[i].k,
                   cases[i].block, tpath("bout"), NULL, &d);
    if (rc != STITCH_EMISMATCH || strstr(d.msg, cases[i].why) == NULL)
      FAIL_("prev %s: rc %d (%s), expected EMISMATCH with \"%s\"",
            cases[i].prev, rc, d.msg, cases[i].why);
    ASSERT_EQ(dir_entries(), before);
  }
  /* Bad options. */
  stitch_diag d = {{0}};
  ASSERT_EQ(
      build(tpath("b1"), NULL, STITCH_VIEW_BF16, 64, tpath("bout"), NULL, &d),
      STITCH_EINVAL);
  ASSERT_EQ(
      build(tpath("b1"), NULL, (stitch_view_kind)7, 0, tpath("bout"), NULL, &d),
      STITCH_EINVAL);
  /* A master named like a scale tensor collides with it. */
  float a[32] = {1}, as[2] = {2};
  const tdesc col[] = {{"a", STITCH_DT_F32, 2, {2, 16}, a},
                       {"a_scale", STITCH_DT_F32, 1, {2}, as}};
  write_ckpt(tpath("bcol"), NULL, col, 2);
  before = dir_entries();
  ASSERT_EQ(
      build(tpath("bcol"), NULL, STITCH_VIEW_FP8, 0, tpath("bout"), NULL, &d),
      STITCH_EEXISTS);
  ASSERT(strstr(d.msg, "a_scale") != NULL);
  ASSERT_EQ(dir_entries(), before);
  build_ok(tpath("bcol"), NULL, STITCH_VIEW_BF16, 0, tpath("bout"), NULL);
  /* Kind names. */
  stitch_view_kind k;
  ASSERT_EQ(stitch_view_kind_parse("nvfp4", &k), 0);
  ASSERT_EQ(k, STITCH_VIEW_NVFP4);
  ASSERT_EQ(stitch_view_kind_parse("FP8", &k), STITCH_EINVAL);
  ASSERT_STR_EQ(stitch_view_kind_name(STITCH_VIEW_FP8), "fp8");
  free(m);
}

/* ---- the policy trade-off (docs/views.md) ------------------------------ */

/* Relative RMS error of the quantized tensors of view VPATH. */
static double view_rel_rmse(const char *mpath, const char *vpath,
                            stitch_view_kind k, uint32_t block) {
  stitch_st *m = open_st(mpath), *v = open_st(vpath);
  double se = 0, ss = 0;
  for (size_t i = 0; i < stitch_st_count(m); i++) {
    const stitch_tensor *x = stitch_st_tensor(m, i);
    if (form_of(x, k) != 2)
      continue;
    const stitch_tensor *q = get(v, x->name), *s = get2(v, x->name, "_scale");
    uint64_t bs = block ? block : x->numel;
    float S =
        k == STITCH_VIEW_NVFP4 ? ldf(get2(v, x->name, "_scale_2"), 0) : 1.0f;
    for (uint64_t j = 0; j < x->numel; j++) {
      double y;
      if (k == STITCH_VIEW_FP8)
        y = (double)stitch_e4m3_to_f32(q->data[j]) * ldf(s, j / bs);
      else
        y = (double)stitch_e2m1_to_f32((q->data[j / 2] >> (4 * (j & 1))) & 15) *
            stitch_e4m3_to_f32(s->data[j / 16]) * S;
      se += (y - ldf(x, j)) * (y - ldf(x, j));
      ss += (double)ldf(x, j) * ldf(x, j);
    }
  }
  stitch_st_free(m);
  stitch_st_free(v);
  return ss > 0 ? sqrt(se / ss) : 0;
}

/* Scale blocks whose effective scale differs between views A and B (FP8:
 * the F32 scale; NVFP4: sb * S), counted independently of the library. */
static uint64_t scale_changes(const char *a_path, const char *b_path,
                              stitch_view_kind k) {
  stitch_st *a = open_st(a_path), *b = open_st(b_path);
  uint64_t n = 0;
  for (size_t i = 0; i < stitch_st_count(a); i++) {
    const stitch_tensor *x = stitch_st_tensor(a, i);
    size_t l = strlen(x->name);
    if (l < 6 || strcmp(x->name + l - 6, "_scale") != 0)
      continue;
    const stitch_tensor *y = get(b, x->name);
    if (k == STITCH_VIEW_FP8) {
      for (uint64_t j = 0; j < x->numel; j++)
        n += memcmp(x->data + 4 * j, y->data + 4 * j, 4) != 0;
      continue;
    }
    char s2[128];
    snprintf(s2, sizeof(s2), "%s_2", x->name);
    double sa = ldf(get(a, s2), 0), sb = ldf(get(b, s2), 0);
    for (uint64_t j = 0; j < x->numel; j++)
      n += stitch_e4m3_to_f32(x->data[j]) * sa !=
           stitch_e4m3_to_f32(y->data[j]) * sb;
  }
  stitch_st_free(a);
  stitch_st_free(b);
  return n;
}

/* Runs STEPS optimizer steps and builds each step's view twice: with the
 * policy (--prev) and with fresh scales. Prints bytes changed per step and
 * scales changed per step for both, and the final relative RMS error. */
static void policy_row(test_rng *r, stitch_view_kind k, uint32_t block,
                       double lr, int drift, int steps) {
  model *m = malloc(sizeof(*m));
  model_init(m, r);
  model_write(tpath("p_m"), m);
  build_ok(tpath("p_m"), NULL, k, block, tpath("p_pol0"), NULL);
  build_ok(tpath("p_m"), NULL, k, block, tpath("p_fr0"), NULL);
  double bytes[2] = {0, 0}, scales[2] = {0, 0}, total = 0, nblk = 0;
  for (int t = 1; t <= steps; t++) {
    char pp[16], pn[16], fp[16], fn[16];
    snprintf(pp, sizeof(pp), "p_pol%d", (t - 1) & 1);
    snprintf(pn, sizeof(pn), "p_pol%d", t & 1);
    snprintf(fp, sizeof(fp), "p_fr%d", (t - 1) & 1);
    snprintf(fn, sizeof(fn), "p_fr%d", t & 1);
    model_step_d(m, lr, drift, r);
    model_write(tpath("p_m"), m);
    stitch_view_stats sp, sf;
    build_ok(tpath("p_m"), tpath(pp), k, block, tpath(pn), &sp);
    build_ok(tpath("p_m"), NULL, k, block, tpath(fn), &sf);
    vdiff dp = diff_views(tpath(pp), tpath(pn));
    vdiff df = diff_views(tpath(fp), tpath(fn));
    bytes[0] += (double)(dp.payload_changed + dp.scale_changed);
    bytes[1] += (double)(df.payload_changed + df.scale_changed);
    total = (double)(dp.payload + dp.scale);
    if (k != STITCH_VIEW_BF16) {
      ASSERT_UEQ(sp.scales_changed, scale_changes(tpath(pp), tpath(pn), k));
      scales[0] += (double)sp.scales_changed;
      scales[1] += (double)scale_changes(tpath(fp), tpath(fn), k);
    }
    nblk = (double)sp.scale_blocks;
  }
  int last = steps & 1;
  char pl[16], fl[16];
  snprintf(pl, sizeof(pl), "p_pol%d", last);
  snprintf(fl, sizeof(fl), "p_fr%d", last);
  double e_pol = k == STITCH_VIEW_BF16
                     ? 0
                     : view_rel_rmse(tpath("p_m"), tpath(pl), k, block);
  double e_fr = k == STITCH_VIEW_BF16
                    ? 0
                    : view_rel_rmse(tpath("p_m"), tpath(fl), k, block);
  fprintf(stderr,
          "  %-5s %4u %s %.0e | %8.5f %8.5f | %8.5f %8.5f | %.4f %.4f\n",
          stitch_view_kind_name(k), block, drift ? "drift" : "noise", lr,
          bytes[0] / steps / total, bytes[1] / steps / total,
          nblk > 0 ? scales[0] / steps / nblk : 0,
          nblk > 0 ? scales[1] / steps / nblk : 0, e_pol, e_fr);
  ASSERT(bytes[0] <= bytes[1]);
  ASSERT_DBL_LE(e_pol, e_fr * 1.15 + 1e-12);
  free(m);
}

/* What an oversized scale costs, on Gaussian blocks: FP8 with the scale k
 * times the fresh one, and E2M1 blocks whose largest value lands at r (the
 * fresh rule lands it in (5.33, 6]; the keep band is [4, 7]). */
static void test_oversize_cost(test_rng *r) {
  enum { N = 1 << 16 };
  float *x = malloc(N * sizeof(*x));
  double amax = 0;
  for (int i = 0; i < N; i++) {
    x[i] = (float)gauss(r);
    amax = fmax(amax, fabs(x[i]));
  }
  fprintf(stderr, "fp8 per-tensor, scale k x fresh: relative RMS error\n");
  double e1 = 0;
  for (int k = 1; k <= 16; k *= 2) {
    float s = (float)(amax * k / 448);
    double se = 0, ss = 0;
    for (int i = 0; i < N; i++) {
      double y = (double)stitch_e4m3_to_f32(stitch_f32_to_e4m3(x[i] / s)) * s;
      se += (y - x[i]) * (y - x[i]);
      ss += (double)x[i] * x[i];
    }
    double e = sqrt(se / ss);
    e1 = k == 1 ? e : e1;
    fprintf(stderr, "  k=%-2d %.5f\n", k, e);
    if (k <= 4)
      ASSERT_DBL_LE(e, e1 * 1.01);
  }
  fprintf(stderr, "nvfp4 blocks of 16, largest value at r: relative RMS "
                  "error\n ");
  double e6 = 0, worst = 0;
  for (int rr = 8; rr <= 14; rr++) { /* r = rr / 2 */
    double se = 0, ss = 0;
    for (int b = 0; b < N / 16; b++) {
      double am = 0;
      for (int j = 0; j < 16; j++)
        am = fmax(am, fabs(x[b * 16 + j]));
      float u = (float)(am / (rr / 2.0));
      for (int j = 0; j < 16; j++) {
        float xi = x[b * 16 + j];
        double y = (double)stitch_e2m1_to_f32(stitch_f32_to_e2m1(xi / u)) * u;
        se += (y - xi) * (y - xi);
        ss += (double)xi * xi;
      }
    }
    double e = sqrt(se / ss);
    e6 = rr == 12 ? e : e6;
    worst = fmax(worst, e);
    fprintf(stderr, " r=%.1f %.4f", rr / 2.0, e);
  }
  fputc('\n', stderr);
  ASSERT_DBL_LE(worst, e6 * 1.6);
  free(x);
}

static void test_policy_table(test_rng *r) {
  fprintf(stderr,
          "policy vs fresh scales, %d steps (bytes changed per step / view "
          "bytes; scale blocks changed per step / blocks; relative RMS "
          "error at the end):\n"
          "  kind block mode lr   | bytes pol  fresh   | scales pol fresh   "
          "| rmse pol fresh\n",
          20);
  const struct {
    double lr;
    int drift;
  } modes[] = {{1e-6, 0}, {1e-5, 0}, {1e-4, 1}};
  for (int i = 0; i < 3; i++) {
    policy_row(r, STITCH_VIEW_BF16, 0, modes[i].lr, modes[i].drift, 20);
    policy_row(r, STITCH_VIEW_FP8, 0, modes[i].lr, modes[i].drift, 20);
    policy_row(r, STITCH_VIEW_FP8, 128, modes[i].lr, modes[i].drift, 20);
    policy_row(r, STITCH_VIEW_NVFP4, 0, modes[i].lr, modes[i].drift, 20);
  }
}

int main(void) {
  test_rng r = test_rng_seeded("test_view", 0x5eed0002);
  snprintf(g_dir, sizeof(g_dir), "/tmp/stitch-view-XXXXXX");
  ASSERT(mkdtemp(g_dir) != NULL);
  test_fresh(&r);
  fprintf(stderr, "stability after one Adam step (lr 1e-6):\n");
  test_stable(&r, STITCH_VIEW_BF16, 0, 0.05);
  test_stable(&r, STITCH_VIEW_FP8, 0, 0.02);
  test_stable(&r, STITCH_VIEW_FP8, 128, 0.02);
  test_stable(&r, STITCH_VIEW_NVFP4, 0, 0.02);
  test_block_changes(&r, STITCH_VIEW_FP8, 64);
  test_block_changes(&r, STITCH_VIEW_NVFP4, 0);
  test_nvfp4_tensor_scale(&r);
  test_bad_prev(&r);
  test_oversize_cost(&r);
  test_policy_table(&r);
  /* Leave nothing behind. */
  DIR *dp = opendir(g_dir);
  for (struct dirent *e; (e = readdir(dp)) != NULL;)
    if (e->d_name[0] != '.')
      unlink(tpath(e->d_name));
  closedir(dp);
  rmdir(g_dir);
  fprintf(stderr, "test_view: ok\n");
  return 0;
}
