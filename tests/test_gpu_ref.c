/* test_gpu_ref.c: the GPU kernels' C references (src/gpu) against each
 * other and against the codec, on every machine; and, where a CUDA device
 * is present, every kernel against its reference on fresh random inputs of
 * many sizes with poisoned outputs (docs/kernels.md).
 *
 *  - apply: a decoded list from a real patch (delta -> chunks -> signed
 *    manifest layout -> stitch_patch), applied with the reference, gives the
 *    codec's result for BF16, FP8, packed NVFP4 and F32 scale tensors; a
 *    wrong base or a bad list is refused and leaves the tensor unchanged.
 *  - quantize: the references are the view builder's bytes; the kernels'
 *    own arithmetic (gpu_math.h, run here by gpu_emul_quant_*) equals them,
 *    scale policy included, and the changed positions of a step are the
 *    ones the codec's delta changes.
 *  - checksum: matches proto/gpu-digest.md computed with libxxhash by hand,
 *    is deterministic, depends on every byte, handles empty and odd sizes. */
#include "ckpt_util.h"

#include "gpu/gpu_internal.h"
#include "stitch/gpu.h"

#include <math.h>
#include <xxhash.h>

static test_rng rng;

static uint8_t *rnd_bytes(size_t n) { return test_rnd_bytes(&rng, n); }
#define dup_bytes test_dup_bytes

/* ---- A real delta, delivered as a patch ------------------------------- */

typedef struct patched {
  stitch_st *base, *result;
  uint8_t *dbuf;
  size_t dlen;
  stitch_delta *dl;
  stitch_object obj;
  uint8_t **bufs;
  stitch_mtensor *mt;
  stitch_manifest m;
  stitch_patch *p;
} patched;

/* Encodes A -> B (N tensors each) with small blocks, cuts it into small
 * chunks, and assembles the patch from every chunk, as a node does. */
static void patched_make(patched *f, const tspec *a, const tspec *b, size_t n,
                         unsigned block_log2) {
  static int serial;
  stitch_diag d = {{0}};
  memset(f, 0, sizeof(*f));
  const char *pa = test_path("base%d.safetensors", serial);
  write_ckpt(pa, a, n, NULL);
  f->base = open_ckpt(pa);
  const char *pb = test_path("result%d.safetensors", serial++);
  write_ckpt(pb, b, n, NULL);
  f->result = open_ckpt(pb);
  stitch_delta_opts o = {.block_log2 = block_log2};
  ASSERT_OK(stitch_delta_encode(f->base, f->result, &o, &f->dbuf, &f->dlen,
                                NULL, &d),
            d);
  ASSERT_OK(stitch_delta_parse(f->dbuf, f->dlen, &f->dl, &d), d);
  ASSERT_OK(stitch_chunks_from_delta(f->dl, 4096, &f->obj, &f->bufs, &d), d);
  size_t nt = stitch_delta_count(f->dl);
  f->mt = test_manifest_tensors(f->dl, f->result);
  f->obj.kind = STITCH_OBJ_DELTA;
  f->obj.base_view = *stitch_delta_base_digest(f->dl);
  f->m = (stitch_manifest){.version = 1,
                           .view = *stitch_delta_result_digest(f->dl),
                           .n_tensors = nt,
                           .tensors = f->mt,
                           .n_objects = 1,
                           .objects = &f->obj};
  ASSERT_OK(stitch_patch_new(&f->m, 0, &f->p, &d), d);
  for (uint64_t c = 0; c < f->obj.n_chunks; c++)
    ASSERT_OK(stitch_patch_add(f->p, (size_t)c, f->bufs[c],
                               (size_t)f->obj.chunks[c].size, &d),
              d);
  ASSERT_UEQ(stitch_patch_missing(f->p), 0);
}

static void patched_free(patched *f) {
  stitch_patch_free(f->p);
  stitch_chunks_free(f->bufs, f->obj.n_chunks);
  stitch_object_clear(&f->obj);
  stitch_delta_free(f->dl);
  free(f->dbuf);
  free(f->mt);
  stitch_st_free(f->base);
  stitch_st_free(f->result);
}

/* Index of tensor NAME in the patch's manifest. */
static uint64_t mt_index(const patched *f, const char *name) {
  for (uint64_t i = 0; i < f->m.n_tensors; i++)
    if (strcmp(f->mt[i].name, name) == 0)
      return i;
  FAIL_("tensor '%s' is not in the manifest", name);
}

static void list_eq(const stitch_gpu_list *a, const stitch_gpu_list *b) {
  ASSERT_EQ(a->width, b->width);
  ASSERT_UEQ(a->n, b->n);
  size_t vb = stitch_gpu_value_bytes(a->width);
  ASSERT_MEM_EQ(a->pos, b->pos, a->n * 8);
  ASSERT_MEM_EQ(a->old_v, b->old_v, a->n * vb);
  ASSERT_MEM_EQ(a->new_v, b->new_v, a->n * vb);
}

/* ---- 1a: apply ---------------------------------------------------------- */

/* The apply kernel's per-entry code (gpu_math.h) run on the CPU with the
 * entries in a random order, as threads may run, pass by pass as
 * kernels/apply.cu launches them; returns what the kernel wrapper would. */
static int kernel_apply_on_cpu(const stitch_gpu_list *l, uint8_t *data,
                               uint64_t nbytes) {
  unsigned w = (unsigned)l->width;
  uint64_t ne = nbytes * 8 / w, bad[2] = {UINT64_MAX, UINT64_MAX};
  uint64_t *order = malloc((l->n ? l->n : 1) * 8);
  for (uint64_t i = 0; i < l->n; i++)
    order[i] = i;
  for (uint64_t i = l->n; i > 1; i--) {
    uint64_t j = test_rng_next(&rng) % i, t = order[i - 1];
    order[i - 1] = order[j];
    order[j] = t;
  }
  /* W4: a check pass (positions and old values), then the write pass.
   * Wider: the position pass, then the fused pass, undone on failure. */
  const uint8_t *check_old = w == 4 ? l->old_v : NULL;
  for (uint64_t k = 0; k < l->n; k++) {
    uint64_t i = order[k];
    int r = gm_apply_check(l->pos, check_old, i, data, ne, w);
    if (r != 0 && i < bad[r - 1])
      bad[r - 1] = i;
  }
  stitch_diag d = {{0}};
  int rc = gpu_apply_error(l, bad[0], bad[1], &d);
  if (w == 4) {
    for (uint64_t k = 0; rc == 0 && k < l->n; k++)
      gm_apply_write(l->pos, l->new_v, l->n, order[k], data, w);
  } else if (rc == 0) {
    uint32_t *wrote = calloc((l->n + 31) / 32 + 1, 4);
    for (uint64_t k = 0; k < l->n; k++) {
      uint64_t i = order[k];
      if (gm_apply_fused(l->pos, l->old_v, l->new_v, i, data, w))
        wrote[i >> 5] |= 1u << (i & 31);
      else if (i < bad[1])
        bad[1] = i;
    }
    if (bad[1] != UINT64_MAX) {
      for (uint64_t k = 0; k < l->n; k++)
        gm_apply_undo(l->pos, l->old_v, wrote, order[k], data, w);
      rc = gpu_apply_error(l, UINT64_MAX, bad[1], &d);
    }
    free(wrote);
  }
  free(order);
  return rc;
}

/* A step with one run of 300 elements rewritten at random (a dense
 * block) somewhere. */
static void step_pair(stitch_dtype dt, int nibble, size_t n, double p,
                      uint8_t **a, uint8_t **b) {
  test_step_pair(&rng, dt, nibble, n, p, TEST_DENSE_ANYWHERE, 300, a, b);
}

enum { A_BF16, A_FP8, A_NIB, A_F32, A_COUNT };

static void test_apply_vs_codec(void) {
  static const struct {
    const char *name;
    stitch_dtype dt;
    int nibble;
    size_t n;
    stitch_gpu_width w;
  } spec[A_COUNT] = {
      {"w.bf16", STITCH_DT_BF16, 0, 60000, STITCH_GPU_W16},
      {"w.fp8", STITCH_DT_F8_E4M3, 0, 20001, STITCH_GPU_W8},
      {"w.nvfp4", STITCH_DT_U8, 1, 16384, STITCH_GPU_W4},
      {"w.scale", STITCH_DT_F32, 0, 3001, STITCH_GPU_W32},
  };
  tspec a[A_COUNT], b[A_COUNT];
  for (int i = 0; i < A_COUNT; i++) {
    uint8_t *x, *y;
    step_pair(spec[i].dt, spec[i].nibble, spec[i].n, 0.02, &x, &y);
    a[i] = (tspec){spec[i].name, spec[i].dt, 1, {spec[i].n}, x};
    b[i] = (tspec){spec[i].name, spec[i].dt, 1, {spec[i].n}, y};
  }
  patched f;
  patched_make(&f, a, b, A_COUNT, 10);
  stitch_diag d = {{0}};
  for (int i = 0; i < A_COUNT; i++) {
    uint64_t nbytes = tspec_bytes(&a[i]), ti = mt_index(&f, spec[i].name);
    stitch_gpu_list l, ld;
    ASSERT_OK(stitch_gpu_list_from_patch(f.p, ti, spec[i].w, a[i].data,
                                         nbytes, &l, &d),
              d);
    ASSERT_GT(l.n, 300);
    /* The decoded list is exactly the difference of the two tensors. */
    ASSERT_OK(stitch_gpu_list_diff(spec[i].w, a[i].data, b[i].data, nbytes,
                                   &ld, &d),
              d);
    list_eq(&l, &ld);
    uint8_t *t = dup_bytes(a[i].data, nbytes);
    ASSERT_OK(stitch_gpu_ref_apply(&l, t, nbytes, &d), d);
    ASSERT_MEM_EQ(t, b[i].data, nbytes);
    uint8_t *k1 = dup_bytes(a[i].data, nbytes);
    ASSERT_EQ(kernel_apply_on_cpu(&l, k1, nbytes), 0);
    ASSERT_MEM_EQ(k1, b[i].data, nbytes);
    free(k1);
    /* Replaying it is refused: the tensor is no longer the base. */
    ASSERT_ERR(stitch_gpu_ref_apply(&l, t, nbytes, &d), STITCH_EBASE, d,
               "entry 0 ");
    ASSERT_MEM_EQ(t, b[i].data, nbytes);
    if (!stitch_gpu_available()) { /* the dispatcher takes host pointers */
      memcpy(t, a[i].data, nbytes);
      ASSERT_OK(stitch_gpu_apply(&l, t, nbytes, &d), d);
      ASSERT_MEM_EQ(t, b[i].data, nbytes);
    }
    free(t);
    stitch_gpu_list_free(&l);
    stitch_gpu_list_free(&ld);
  }
  /* The whole patch, the codec's way, agrees. */
  uint8_t *data[A_COUNT];
  uint64_t sizes[A_COUNT];
  for (uint64_t i = 0; i < f.m.n_tensors; i++) {
    const tspec *s = NULL;
    for (int k = 0; k < A_COUNT; k++)
      if (strcmp(a[k].name, f.mt[i].name) == 0)
        s = &a[k];
    ASSERT(s != NULL);
    sizes[i] = tspec_bytes(s);
    data[i] = dup_bytes(s->data, sizes[i]);
  }
  ASSERT_OK(stitch_patch_apply(f.p, data, sizes, 1, &d), d);
  for (uint64_t i = 0; i < f.m.n_tensors; i++) {
    for (int k = 0; k < A_COUNT; k++)
      if (strcmp(b[k].name, f.mt[i].name) == 0)
        ASSERT_MEM_EQ(data[i], b[k].data, sizes[i]);
    free(data[i]);
  }
  patched_free(&f);
  for (int i = 0; i < A_COUNT; i++) {
    free(a[i].data);
    free(b[i].data);
  }
}

static void expect_refused(const stitch_gpu_list *l, const uint8_t *base,
                           uint64_t nbytes, int code, const char *what) {
  stitch_diag d = {{0}};
  uint8_t *t = dup_bytes(base, nbytes);
  ASSERT_ERR(stitch_gpu_ref_apply(l, t, nbytes, &d), code, d, what);
  ASSERT_MEM_EQ(t, base, nbytes);
  ASSERT_EQ(kernel_apply_on_cpu(l, t, nbytes), code);
  ASSERT_MEM_EQ(t, base, nbytes);
  free(t);
}

static void test_apply_refuses(void) {
  stitch_diag d = {{0}};
  const uint64_t nbytes = 4000;
  static const stitch_gpu_width ws[] = {STITCH_GPU_W4, STITCH_GPU_W8,
                                        STITCH_GPU_W16, STITCH_GPU_W32};
  for (size_t wi = 0; wi < 4; wi++) {
    uint8_t *a = rnd_bytes(nbytes), *b = dup_bytes(a, nbytes);
    for (int k = 0; k < 200; k++)
      b[test_rng_next(&rng) % nbytes] ^= (uint8_t)(1u << (k % 8));
    b[0] ^= 0xFF; /* both nibbles of a byte, for W4 */
    stitch_gpu_list l;
    ASSERT_OK(stitch_gpu_list_diff(ws[wi], a, b, nbytes, &l, &d), d);
    ASSERT_GT(l.n, 100);
    uint8_t *k1 = dup_bytes(a, nbytes);
    ASSERT_EQ(kernel_apply_on_cpu(&l, k1, nbytes), 0);
    ASSERT_MEM_EQ(k1, b, nbytes);
    free(k1);
    uint64_t k = test_rng_next(&rng) % l.n;
    /* A base that differs at one listed element. */
    uint8_t *wrong = dup_bytes(a, nbytes);
    uint64_t p = l.pos[k];
    if (ws[wi] == STITCH_GPU_W4)
      wrong[p >> 1] ^= (uint8_t)(1u << ((p & 1) * 4));
    else
      wrong[p * (unsigned)ws[wi] / 8] ^= 1;
    char want[32];
    snprintf(want, sizeof(want), "entry %llu ", (unsigned long long)k);
    expect_refused(&l, wrong, nbytes, STITCH_EBASE, want);
    /* Without old values the same list applies to it anyway. */
    uint8_t *ov = l.old_v;
    l.old_v = NULL;
    uint8_t *t = dup_bytes(wrong, nbytes);
    ASSERT_OK(stitch_gpu_ref_apply(&l, t, nbytes, &d), d);
    ASSERT_MEM_EQ(t, b, nbytes);
    free(t);
    l.old_v = ov;
    /* Positions outside, repeated, or out of order. */
    uint64_t keep = l.pos[k], ne = nbytes * 8 / (unsigned)ws[wi];
    l.pos[k] = ne;
    expect_refused(&l, a, nbytes, STITCH_EINVAL, "outside");
    l.pos[k] = k > 0 ? l.pos[k - 1] : keep;
    if (k > 0)
      expect_refused(&l, a, nbytes, STITCH_EINVAL, "not after");
    l.pos[k] = keep;
    if (k + 1 < l.n) {
      uint64_t x = l.pos[k];
      l.pos[k] = l.pos[k + 1];
      l.pos[k + 1] = x;
      expect_refused(&l, a, nbytes, STITCH_EINVAL, "not after");
      l.pos[k + 1] = l.pos[k];
      l.pos[k] = x;
    }
    /* A bad position wins over a wrong base, as on the GPU. */
    l.pos[l.n - 1] = ne + 5;
    expect_refused(&l, wrong, nbytes, STITCH_EINVAL, "outside");
    free(wrong);
    stitch_gpu_list_free(&l);
    free(a);
    free(b);
  }
  /* An empty list, an empty tensor, a bad width, a ragged tensor. */
  stitch_gpu_list e = {.width = STITCH_GPU_W16};
  uint8_t x[3] = {1, 2, 3};
  ASSERT_OK(stitch_gpu_ref_apply(&e, x, 0, &d), d);
  ASSERT_OK(stitch_gpu_ref_apply(&e, x, 2, &d), d);
  ASSERT_ERR(stitch_gpu_ref_apply(&e, x, 3, &d), STITCH_EINVAL, d, "whole");
  e.width = (stitch_gpu_width)12;
  ASSERT_ERR(stitch_gpu_ref_apply(&e, x, 2, &d), STITCH_EINVAL, d, "width");
  stitch_gpu_list_free(&e);
  stitch_gpu_list_free(NULL);
}

/* ---- 1b: quantize and find the changes ---------------------------------- */

/* Masters of R rows of K (K % 16 == 0): rows of different magnitudes, an
 * all-zero row, one outlier, exact zeros and a few subnormals. */
static float *masters(size_t r, size_t k) {
  float *x = malloc(r * k * sizeof(float));
  for (size_t i = 0; i < r; i++) {
    double mag = ldexp(1.0, (int)(test_rng_next(&rng) % 24) - 16);
    for (size_t j = 0; j < k; j++) {
      double u = test_rng_unit(&rng) * 2 - 1;
      x[i * k + j] = i == 1 ? 0.0f : (float)(u * u * u * mag);
    }
  }
  x[5 * k + 7] = 300.0f;
  x[2 * k + 3] = 0x1p-140f;
  x[2 * k + 4] = -0.0f;
  return x;
}

/* An Adam-like step: every weight moves by about LR relative, in a random
 * direction, then the whole tensor is scaled by SCALE. */
static void adam_step(float *x, size_t n, double lr, float scale) {
  for (size_t i = 0; i < n; i++) {
    double s = test_rng_next(&rng) & 1 ? 1 : -1;
    x[i] = (float)(x[i] * (1 + s * lr)) * scale;
  }
}

typedef struct view_bufs {
  uint8_t *q, *sc, *s2;
  size_t qn, scn;
} view_bufs;

/* One view of X (N masters) of KIND, by the reference (EMUL 0) or by the
 * kernels' arithmetic on the CPU (EMUL 1); PREV may be NULL. */
static view_bufs view_of(stitch_view_kind kind, uint32_t blk, const float *x,
                         uint64_t n, const view_bufs *prev, int emul) {
  stitch_diag d = {{0}};
  view_bufs v = {0};
  const uint8_t *m = (const uint8_t *)x;
  if (kind == STITCH_VIEW_BF16) {
    v.qn = 2 * n;
    v.q = malloc(v.qn + 1);
    if (emul)
      for (uint64_t i = 0; i < n; i++) {
        uint16_t h = mf_f32_to_bf16(x[i]);
        memcpy(v.q + 2 * i, &h, 2);
      }
    else
      ASSERT_OK(stitch_gpu_ref_quant_bf16(m, n, v.q, &d), d);
  } else if (kind == STITCH_VIEW_FP8) {
    v.qn = n;
    v.scn = 4 * stitch_view_fp8_nblocks(n, blk);
    v.q = malloc(v.qn + 1);
    v.sc = malloc(v.scn);
    const uint8_t *ps = prev != NULL ? prev->sc : NULL;
    ASSERT_OK(emul ? gpu_emul_quant_fp8(m, n, blk, ps, v.q, v.sc, &d)
                   : stitch_gpu_ref_quant_fp8(m, n, blk, ps, v.q, v.sc, &d),
              d);
  } else {
    v.qn = n / 2;
    v.scn = n / 16;
    v.q = malloc(v.qn + 1);
    v.sc = malloc(v.scn + 1);
    v.s2 = malloc(4);
    const uint8_t *pb = prev != NULL ? prev->sc : NULL;
    const uint8_t *p2 = prev != NULL ? prev->s2 : NULL;
    ASSERT_OK(
        emul ? gpu_emul_quant_nvfp4(m, n, pb, p2, v.q, v.sc, v.s2, &d)
             : stitch_gpu_ref_quant_nvfp4(m, n, pb, p2, v.q, v.sc, v.s2, &d),
        d);
  }
  return v;
}

static void view_free(view_bufs *v) {
  free(v->q);
  free(v->sc);
  free(v->s2);
}

static void view_eq(const view_bufs *a, const view_bufs *b, const char *what) {
  if (memcmp(a->q, b->q, a->qn) != 0)
    FAIL_("%s: the kernels' values differ from the view builder's", what);
  if (a->sc != NULL && memcmp(a->sc, b->sc, a->scn) != 0)
    FAIL_("%s: the kernels' scales differ from the view builder's", what);
  if (a->s2 != NULL && memcmp(a->s2, b->s2, 4) != 0)
    FAIL_("%s: the kernels' tensor scale differs from the view builder's",
          what);
}

/* The converters of gpu_math.h are minifloat.c's, on edge values and on
 * random bit patterns. */
static void test_converters(void) {
  for (int c = 0; c < 256; c++) {
    float a = mf_e4m3_to_f32((uint8_t)c), b = stitch_e4m3_to_f32((uint8_t)c);
    ASSERT_MEM_EQ(&a, &b, 4);
  }
  static const uint32_t edge[] = {0, 0x80000000u, 1, 0x7F800000u, 0xFF800000u,
                                  0x7FC00000u, 0xFFFFFFFFu, 0x7F7FFFFFu,
                                  0x43E00000u, 0x43E80000u, 0x40C00000u,
                                  0x3A800000u, 0x3B000000u, 0x00800000u};
  for (size_t i = 0; i < 4000000; i++) {
    uint32_t u = i < sizeof(edge) / 4 ? edge[i] : (uint32_t)test_rng_next(&rng);
    float f;
    memcpy(&f, &u, 4);
    ASSERT_EQ(mf_f32_to_bf16(f), stitch_f32_to_bf16(f));
    ASSERT_EQ(mf_f32_to_e4m3(f), stitch_f32_to_e4m3(f));
    ASSERT_EQ(mf_f32_to_e2m1(f), stitch_f32_to_e2m1(f));
  }
}

/* The changed positions of one step of a view tensor, three ways: the
 * reference diff, the list decoded from the codec's patch, and the delta's
 * own count of changed symbols. */
static void positions_vs_codec(stitch_dtype dt, stitch_gpu_width w,
                               const uint8_t *v0, const uint8_t *v1,
                               uint64_t nbytes) {
  stitch_diag d = {{0}};
  uint64_t ne = nbytes * 8 / (unsigned)w, count;
  uint64_t *pos = malloc((ne ? ne : 1) * 8);
  ASSERT_OK(stitch_gpu_ref_diff(w, v0, v1, nbytes, pos, &count, &d), d);
  ASSERT_GT(count, 0);
  uint64_t es = stitch_dtype_size(dt);
  tspec a = {"view", dt, 1, {nbytes / es}, (uint8_t *)v0};
  tspec b = {"view", dt, 1, {nbytes / es}, (uint8_t *)v1};
  patched f;
  patched_make(&f, &a, &b, 1, 9);
  stitch_gpu_list l;
  ASSERT_OK(stitch_gpu_list_from_patch(f.p, 0, w, v0, nbytes, &l, &d), d);
  ASSERT_UEQ(l.n, count);
  ASSERT_MEM_EQ(l.pos, pos, count * 8);
  const stitch_delta_tensor *t = stitch_delta_tensor_at(f.dl, 0);
  if (t->sym_bits == (unsigned)w)
    ASSERT_UEQ(t->changed, count);
  stitch_gpu_list_free(&l);
  patched_free(&f);
  free(pos);
}

static void test_quant(void) {
  stitch_diag d = {{0}};
  const size_t r = 64, k = 48, n = r * k;
  static const struct {
    stitch_view_kind kind;
    uint32_t blk;
  } cases[] = {{STITCH_VIEW_BF16, 0}, {STITCH_VIEW_FP8, 0},
               {STITCH_VIEW_FP8, 16}, {STITCH_VIEW_FP8, 100},
               {STITCH_VIEW_NVFP4, 0}};
  int s2_moves = 0, s2_shifts = 0;
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    stitch_view_kind kind = cases[c].kind;
    float *x = masters(r, k);
    view_bufs prev = view_of(kind, cases[c].blk, x, n, NULL, 0);
    view_bufs pe = view_of(kind, cases[c].blk, x, n, NULL, 1);
    view_eq(&prev, &pe, "fresh view");
    view_free(&pe);
    /* Small steps, then the tensor grows and shrinks by powers of two and
     * by odd factors, which moves NVFP4's tensor scale. */
    static const float scale[] = {1, 1, 1, 40, 1, 0.011f, 1, 64, 1, 1};
    for (size_t s = 0; s < sizeof(scale) / sizeof(scale[0]); s++) {
      adam_step(x, n, 3e-3, scale[s]);
      view_bufs cur = view_of(kind, cases[c].blk, x, n, &prev, 0);
      view_bufs ce = view_of(kind, cases[c].blk, x, n, &prev, 1);
      view_eq(&cur, &ce, stitch_view_kind_name(kind));
      if (kind == STITCH_VIEW_NVFP4) {
        float sp, sn;
        int ep, en;
        memcpy(&sp, prev.s2, 4);
        memcpy(&sn, cur.s2, 4);
        s2_moves += sp != sn;
        s2_shifts += sp != sn && frexpf(sp, &ep) == frexpf(sn, &en);
      }
      if (s == 1) {
        stitch_dtype dt = kind == STITCH_VIEW_BF16  ? STITCH_DT_BF16
                          : kind == STITCH_VIEW_FP8 ? STITCH_DT_F8_E4M3
                                                    : STITCH_DT_U8;
        stitch_gpu_width w = kind == STITCH_VIEW_BF16  ? STITCH_GPU_W16
                             : kind == STITCH_VIEW_FP8 ? STITCH_GPU_W8
                                                       : STITCH_GPU_W4;
        positions_vs_codec(dt, w, prev.q, cur.q, cur.qn);
      }
      view_free(&ce);
      view_free(&prev);
      prev = cur;
    }
    view_free(&prev);
    /* A non-finite master fails both, naming the first such element. */
    x[777] = NAN;
    x[900] = INFINITY;
    view_bufs v = {0};
    v.q = malloc(2 * n);
    v.sc = malloc(4 * n);
    v.s2 = malloc(4);
    const uint8_t *m = (const uint8_t *)x;
    if (kind == STITCH_VIEW_FP8) {
      ASSERT_ERR(stitch_gpu_ref_quant_fp8(m, n, cases[c].blk, NULL, v.q, v.sc,
                                          &d),
                 STITCH_EINVAL, d, "777");
      ASSERT_ERR(gpu_emul_quant_fp8(m, n, cases[c].blk, NULL, v.q, v.sc, &d),
                 STITCH_EINVAL, d, "777");
    } else if (kind == STITCH_VIEW_NVFP4) {
      ASSERT_ERR(stitch_gpu_ref_quant_nvfp4(m, n, NULL, NULL, v.q, v.sc, v.s2,
                                            &d),
                 STITCH_EINVAL, d, "777");
      ASSERT_ERR(gpu_emul_quant_nvfp4(m, n, NULL, NULL, v.q, v.sc, v.s2, &d),
                 STITCH_EINVAL, d, "777");
      ASSERT_ERR(stitch_gpu_ref_quant_nvfp4(m, 24, NULL, NULL, v.q, v.sc,
                                            v.s2, &d),
                 STITCH_EINVAL, d, "multiple of 16");
    } else {
      ASSERT_OK(stitch_gpu_ref_quant_bf16(m, n, v.q, &d), d); /* kept */
    }
    view_free(&v);
    free(x);
  }
  fprintf(stderr, "quant: nvfp4 tensor scale moved %d times, %d by a power "
                  "of two\n", s2_moves, s2_shifts);
  ASSERT_GT(s2_moves, 1);
  ASSERT_GT(s2_shifts, 0);
}

/* ---- 1c: checksum ------------------------------------------------------- */

static uint64_t checksum_by_hand(const uint8_t *p, uint64_t n) {
  uint64_t leaves = (n + STITCH_GPU_LEAF - 1) / STITCH_GPU_LEAF;
  uint8_t *buf = malloc((leaves + 1) * 8);
  for (uint64_t i = 0; i <= leaves; i++) {
    uint64_t off = i * STITCH_GPU_LEAF;
    uint64_t h = i < leaves ? XXH64(p + off,
                                    n - off < STITCH_GPU_LEAF ? n - off
                                                              : STITCH_GPU_LEAF,
                                    0)
                            : n;
    for (int b = 0; b < 8; b++)
      buf[8 * i + b] = (uint8_t)(h >> (8 * b));
  }
  uint64_t r = XXH64(buf, (leaves + 1) * 8, 0);
  free(buf);
  return r;
}

/* The checksum kernel's XXH64 (gpu_math.h), lanes run one after the
 * other as the kernel's four threads run side by side. */
static uint64_t kernel_xxh64_on_cpu(const uint8_t *p, uint64_t len) {
  uint64_t acc[4], body = len & ~(uint64_t)31;
  for (unsigned t = 0; t < 4; t++) {
    acc[t] = gm_xxh64_init(t);
    for (uint64_t s = 0; s < body; s += 32)
      acc[t] = gm_xxh64_round(acc[t], gm_ld64(p + s + 8 * t));
  }
  return gm_xxh64_finish(acc, p + body, len);
}

static void test_checksum(void) {
  stitch_diag d = {{0}};
  uint8_t *r = rnd_bytes(70000);
  for (uint64_t n = 0; n < 70000; n += n < 300 ? 1 : 4093)
    for (int o = 0; o < 3; o++)
      if (kernel_xxh64_on_cpu(r + o, n) != XXH64(r + o, n, 0))
        FAIL_("the kernel's XXH64 differs from libxxhash at %llu bytes",
              (unsigned long long)n);
  free(r);
  /* proto/gpu-digest.md's vectors: D[i] = i mod 251. */
  static const struct {
    uint64_t n, h;
  } vec[] = {{0, 0x34c96acdcadb1bbbull},      {1, 0x19a7767f68d29295ull},
             {100, 0x24efb2e50d1e0330ull},    {65536, 0x3d6804bc4d7d26c4ull},
             {65537, 0x3eba628cf13f78f8ull},  {200000, 0xa0cbb2f67ed2f61full}};
  uint8_t *v = malloc(200000);
  for (int i = 0; i < 200000; i++)
    v[i] = (uint8_t)(i % 251);
  for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
    uint64_t h;
    ASSERT_OK(stitch_gpu_ref_checksum(v, vec[i].n, &h, &d), d);
    ASSERT_UEQ(h, vec[i].h);
  }
  free(v);
  static const uint64_t sizes[] = {0,     1,     7,      31,     32,
                                   33,    100,   65535,  65536,  65537,
                                   131072, 3 * 65536 + 77};
  uint64_t seen[sizeof(sizes) / 8];
  for (size_t s = 0; s < sizeof(sizes) / 8; s++) {
    uint64_t n = sizes[s], h, h2;
    uint8_t *p = rnd_bytes(n);
    ASSERT_OK(stitch_gpu_ref_checksum(p, n, &h, &d), d);
    ASSERT_OK(stitch_gpu_ref_checksum(p, n, &h2, &d), d);
    ASSERT_UEQ(h, h2);
    ASSERT_UEQ(h, checksum_by_hand(p, n));
    seen[s] = h;
    for (size_t t = 0; t < s; t++)
      ASSERT(seen[t] != h); /* the length is in the root */
    /* Every byte counts: each one of a small tensor, and at random, at
     * leaf edges and at both ends of a large one. */
    for (uint64_t t = 0; t < n && t < 300 + n / 4096; t++) {
      uint64_t i = n <= 300 ? t
                   : t < 8  ? (uint64_t[]){0, n - 1, 65535, 65536, 65537,
                                          n - 32, n - 31, n / 2}[t] % n
                            : test_rng_next(&rng) % n;
      p[i] ^= (uint8_t)(1u << (t % 8));
      ASSERT_OK(stitch_gpu_ref_checksum(p, n, &h2, &d), d);
      ASSERT(h2 != h);
      p[i] ^= (uint8_t)(1u << (t % 8));
    }
    if (!stitch_gpu_available()) {
      ASSERT_OK(stitch_gpu_checksum(p, n, &h2, &d), d);
      ASSERT_UEQ(h2, h);
    }
    free(p);
  }
}

/* ---- 1b: apply, a batch of lists ---------------------------------------- */

enum { P_CHECK, P_FUSED, P_UNDO, P_WRITE };

/* One pass of the batch kernels (kernels/apply.cu) on the CPU over the
 * indices in ORDER: each index's list by gm_seg_find from the warp's
 * first index, as a warp finds it. */
static void batch_pass_on_cpu(int pass, const gm_seg *s, uint32_t ns,
                              const uint64_t *order, uint64_t total,
                              uint32_t *wrote, uint64_t *bad) {
  for (uint64_t o = 0; o < total; o++) {
    uint64_t g = order[o];
    uint32_t j = gm_seg_find(s, ns, g & ~31ull);
    const gm_seg *q = &s[j];
    uint64_t i = g - q->start;
    if (i >= q->n)
      continue; /* the padding before the next list */
    switch (pass) {
    case P_CHECK: {
      int r = gm_apply_check(q->pos, q->w == 4 ? q->oldv : NULL, i, q->data,
                             q->ne, q->w);
      if (r != 0 && i < bad[2 * j + r - 1])
        bad[2 * j + r - 1] = i;
      break;
    }
    case P_FUSED:
      if (!q->checked)
        break;
      if (gm_apply_fused(q->pos, q->oldv, q->newv, i, q->data, q->w))
        wrote[q->mask + (i >> 5)] |= 1u << (i & 31);
      else if (i < bad[2 * j + 1])
        bad[2 * j + 1] = i;
      break;
    case P_UNDO:
      if (q->checked)
        gm_apply_undo(q->pos, q->oldv, wrote + q->mask, i, q->data, q->w);
      break;
    default:
      if (!q->checked)
        gm_apply_write(q->pos, q->newv, q->n, i, q->data, q->w);
    }
  }
}

static int batch_error_on_cpu(const stitch_gpu_list *lists, const size_t *idx,
                              uint32_t ns, const uint64_t *bad) {
  stitch_diag d = {{0}};
  for (uint32_t j = 0; j < ns; j++)
    if (bad[2 * j] != UINT64_MAX || bad[2 * j + 1] != UINT64_MAX)
      return gpu_batch_error(lists, idx[j], bad[2 * j], bad[2 * j + 1], &d);
  return 0;
}

/* The batch kernels' passes on the CPU, the indices in a random order,
 * from the table gpu_batch_segs makes; returns what gpu_cu_apply_batch
 * would. */
static int kernel_batch_on_cpu(const stitch_gpu_list *lists,
                               uint8_t *const *data, const uint64_t *nbytes,
                               size_t n) {
  stitch_diag d = {{0}};
  int rc = gpu_batch_args(lists, data, nbytes, n, &d);
  if (rc != 0)
    return rc;
  gm_seg *s = malloc((n + 1) * sizeof(*s));
  size_t *idx = malloc((n + 1) * sizeof(*idx));
  uint32_t ns, any_c, any_p;
  uint64_t total, words;
  ASSERT_OK(gpu_batch_segs(lists, data, nbytes, n, s, idx, &ns, &total,
                           &words, &any_c, &any_p, &d),
            d);
  uint64_t *bad = malloc((2 * ns + 1) * 8), *order = malloc((total + 1) * 8);
  uint32_t *wrote = calloc(words + 1, 4);
  for (uint32_t j = 0; j < 2 * ns; j++)
    bad[j] = UINT64_MAX;
  for (uint64_t g = 0; g < total; g++) {
    order[g] = g; /* and no warp spans two lists: */
    ASSERT_EQ(gm_seg_find(s, ns, g), gm_seg_find(s, ns, g & ~31ull));
  }
  for (uint64_t i = total; i > 1; i--) {
    uint64_t j = test_rng_next(&rng) % i, t = order[i - 1];
    order[i - 1] = order[j];
    order[j] = t;
  }
  batch_pass_on_cpu(P_CHECK, s, ns, order, total, wrote, bad);
  rc = batch_error_on_cpu(lists, idx, ns, bad);
  if (rc == 0 && any_c) {
    batch_pass_on_cpu(P_FUSED, s, ns, order, total, wrote, bad);
    if ((rc = batch_error_on_cpu(lists, idx, ns, bad)) != 0)
      batch_pass_on_cpu(P_UNDO, s, ns, order, total, wrote, bad);
  }
  if (rc == 0 && any_p)
    batch_pass_on_cpu(P_WRITE, s, ns, order, total, wrote, bad);
  free(wrote);
  free(order);
  free(bad);
  free(idx);
  free(s);
  return rc;
}

enum { NB = 7 };

/* A batch of NB lists over fresh tensors: mixed widths, one list empty,
 * two without old values. A[k] is the base, B[k] the result. */
typedef struct {
  stitch_gpu_list l[NB];
  uint8_t *a[NB], *b[NB], *ov[NB];
  uint64_t nb[NB];
} batch;

static const stitch_gpu_width batch_w[NB] = {
    STITCH_GPU_W16, STITCH_GPU_W4, STITCH_GPU_W8, STITCH_GPU_W32,
    STITCH_GPU_W16, STITCH_GPU_W4, STITCH_GPU_W16};

static void batch_make(batch *bt) {
  stitch_diag d = {{0}};
  for (int k = 0; k < NB; k++) {
    uint64_t eb = batch_w[k] > 8 ? (unsigned)batch_w[k] / 8 : 1;
    bt->nb[k] = (1 + test_rng_next(&rng) % 6000) / eb * eb;
    bt->a[k] = rnd_bytes(bt->nb[k]);
    bt->b[k] = dup_bytes(bt->a[k], bt->nb[k]);
    for (uint64_t i = 0; k != 3 && i < bt->nb[k]; i++)
      if (test_rng_unit(&rng) < 0.03)
        bt->b[k][i] ^= (uint8_t)(test_rng_next(&rng) | 1);
    ASSERT_OK(stitch_gpu_list_diff(batch_w[k], bt->a[k], bt->b[k], bt->nb[k],
                                   &bt->l[k], &d),
              d);
    bt->ov[k] = bt->l[k].old_v;
    if (k == 4 || k == 5)
      bt->l[k].old_v = NULL;
  }
}

static void batch_free(batch *bt) {
  for (int k = 0; k < NB; k++) {
    bt->l[k].old_v = bt->ov[k];
    stitch_gpu_list_free(&bt->l[k]);
    free(bt->a[k]);
    free(bt->b[k]);
  }
}

/* Both the reference and the kernels' passes on copies of each base:
 * CODE, with WHAT in the message, and every tensor WANT (A or B). */
static void batch_expect(const batch *bt, uint8_t *const *base, int code,
                         const char *what, uint8_t *const *want) {
  stitch_diag d = {{0}};
  uint8_t *t[NB];
  for (int pass = 0; pass < 2; pass++) {
    for (int k = 0; k < NB; k++)
      t[k] = dup_bytes(base[k], bt->nb[k]);
    if (pass == 0 && code == 0)
      ASSERT_OK(stitch_gpu_ref_apply_batch(bt->l, t, bt->nb, NB, &d), d);
    else if (pass == 0)
      ASSERT_ERR(stitch_gpu_ref_apply_batch(bt->l, t, bt->nb, NB, &d), code,
                 d, what);
    else
      ASSERT_EQ(kernel_batch_on_cpu(bt->l, t, bt->nb, NB), code);
    for (int k = 0; k < NB; k++) {
      ASSERT_MEM_EQ(t[k], want[k], bt->nb[k]);
      free(t[k]);
    }
  }
}

static void test_apply_batch(void) {
  stitch_diag d = {{0}};
  for (int round = 0; round < 40; round++) {
    batch bt;
    batch_make(&bt);
    batch_expect(&bt, bt.a, 0, NULL, bt.b);
    /* A base that differs at one listed element of a list with old values
     * (W4: the check pass; wider: the fused pass, then the undo). */
    int k;
    do
      k = (int)(test_rng_next(&rng) % NB);
    while (bt.l[k].n == 0 || bt.l[k].old_v == NULL);
    uint64_t e = test_rng_next(&rng) % bt.l[k].n, p = bt.l[k].pos[e];
    uint8_t *wrong[NB];
    for (int j = 0; j < NB; j++)
      wrong[j] = dup_bytes(bt.a[j], bt.nb[j]);
    if (batch_w[k] == STITCH_GPU_W4)
      wrong[k][p >> 1] ^= (uint8_t)(1u << ((p & 1) * 4));
    else
      wrong[k][p * (unsigned)batch_w[k] / 8] ^= 1;
    char want[48];
    snprintf(want, sizeof(want), "list %d: apply: entry %llu ", k,
             (unsigned long long)e);
    batch_expect(&bt, wrong, STITCH_EBASE, want, wrong);
    /* A position out of order in any list refuses the whole batch. */
    do
      k = (int)(test_rng_next(&rng) % NB);
    while (bt.l[k].n < 2);
    uint64_t *pp = bt.l[k].pos, keep = pp[bt.l[k].n - 1];
    pp[bt.l[k].n - 1] = pp[0];
    snprintf(want, sizeof(want), "list %d: apply: entry %llu ", k,
             (unsigned long long)(bt.l[k].n - 1));
    batch_expect(&bt, bt.a, STITCH_EINVAL, want, bt.a);
    pp[bt.l[k].n - 1] = keep;
    for (int j = 0; j < NB; j++)
      free(wrong[j]);
    batch_free(&bt);
  }
  /* Overlapping tensors, a bad list, and an empty batch. */
  uint8_t x[64] = {0}, *xs[2] = {x, x + 30};
  uint64_t pos[2] = {1, 2}, nbs[2] = {32, 32};
  uint8_t nv[4] = {1, 2, 3, 4};
  stitch_gpu_list two[2] = {{STITCH_GPU_W16, 2, pos, NULL, nv},
                            {STITCH_GPU_W16, 2, pos, NULL, nv}};
  ASSERT_ERR(stitch_gpu_ref_apply_batch(two, xs, nbs, 2, &d), STITCH_EINVAL,
             d, "lists 0 and 1 overlap");
  ASSERT_EQ(kernel_batch_on_cpu(two, xs, nbs, 2), STITCH_EINVAL);
  xs[1] = x + 32;
  ASSERT_OK(stitch_gpu_ref_apply_batch(two, xs, nbs, 2, &d), d);
  ASSERT_EQ(x[2] | x[3] << 8 | x[34] << 16 | x[35] << 24, 0x02010201);
  two[1].width = (stitch_gpu_width)12;
  ASSERT_ERR(stitch_gpu_ref_apply_batch(two, xs, nbs, 2, &d), STITCH_EINVAL,
             d, "list 1: gpu: element width 12");
  ASSERT_OK(stitch_gpu_ref_apply_batch(NULL, NULL, NULL, 0, &d), d);
  ASSERT_ERR(stitch_gpu_ref_apply_batch(NULL, xs, nbs, 1, &d), STITCH_EINVAL,
             d, "missing");
}

/* ---- Kernels against references, where a GPU is present ---------------- */

static stitch_diag gd;

static void *dev_from(const void *host, uint64_t n) {
  void *p;
  ASSERT_OK(stitch_gpu_malloc(&p, n, &gd), gd);
  ASSERT_OK(stitch_gpu_upload(p, host, n, &gd), gd);
  return p;
}

/* Outputs start as 0xA5 everywhere, so a byte the kernel forgets shows. */
static void *dev_poisoned(uint64_t n) {
  void *p;
  ASSERT_OK(stitch_gpu_malloc(&p, n, &gd), gd);
  ASSERT_OK(stitch_gpu_memset(p, 0xA5, n, &gd), gd);
  return p;
}

static uint8_t *host_of(const void *dev, uint64_t n) {
  uint8_t *h = malloc(n ? n : 1);
  ASSERT_OK(stitch_gpu_download(h, dev, n, &gd), gd);
  return h;
}

static void kernel_apply(uint64_t nbytes, stitch_gpu_width w, double rate) {
  uint8_t *a = rnd_bytes(nbytes), *b = dup_bytes(a, nbytes);
  for (uint64_t i = 0; i < nbytes; i++)
    if (test_rng_unit(&rng) < rate)
      b[i] ^= (uint8_t)(test_rng_next(&rng) | 1);
  stitch_gpu_list l;
  ASSERT_OK(stitch_gpu_list_diff(w, a, b, nbytes, &l, &gd), gd);
  size_t vb = stitch_gpu_value_bytes(w);
  stitch_gpu_list dl = {w, l.n, dev_from(l.pos, l.n * 8),
                        dev_from(l.old_v, l.n * vb),
                        dev_from(l.new_v, l.n * vb)};
  uint8_t *data = dev_from(a, nbytes);
  ASSERT_OK(stitch_gpu_apply(&dl, data, nbytes, &gd), gd);
  uint8_t *got = host_of(data, nbytes);
  if (memcmp(got, b, nbytes) != 0)
    FAIL_("apply kernel, %llu bytes at width %d: differs from the reference",
          (unsigned long long)nbytes, (int)w);
  free(got);
  if (l.n > 0) { /* a wrong base is refused and nothing is written */
    uint64_t k = test_rng_next(&rng) % l.n, p = l.pos[k];
    if (w == STITCH_GPU_W4)
      a[p >> 1] ^= (uint8_t)(1u << ((p & 1) * 4));
    else
      a[p * (unsigned)w / 8] ^= 1;
    ASSERT_OK(stitch_gpu_upload(data, a, nbytes, &gd), gd);
    ASSERT_EQ(stitch_gpu_apply(&dl, data, nbytes, &gd), STITCH_EBASE);
    got = host_of(data, nbytes);
    ASSERT_MEM_EQ(got, a, nbytes);
    free(got);
  }
  stitch_gpu_free(data);
  stitch_gpu_free(dl.pos);
  stitch_gpu_free(dl.old_v);
  stitch_gpu_free(dl.new_v);
  stitch_gpu_list_free(&l);
  free(a);
  free(b);
}

/* The batch kernel on N host lists L over bases A (results B): matches,
 * and a wrong base at one entry of list K (which has old values) refuses
 * the batch with every tensor unchanged. */
static void kernel_batch(const stitch_gpu_list *l, uint8_t *const *a,
                         uint8_t *const *b, const uint64_t *nb, size_t n,
                         size_t k) {
  stitch_gpu_list *dl = calloc(n, sizeof(*dl));
  uint8_t **dd = calloc(n, sizeof(*dd));
  for (size_t j = 0; j < n; j++) {
    size_t vb = stitch_gpu_value_bytes(l[j].width);
    dl[j] = (stitch_gpu_list){l[j].width, l[j].n, dev_from(l[j].pos, l[j].n * 8),
                              l[j].old_v ? dev_from(l[j].old_v, l[j].n * vb)
                                         : NULL,
                              dev_from(l[j].new_v, l[j].n * vb)};
    dd[j] = dev_from(a[j], nb[j]);
  }
  ASSERT_OK(stitch_gpu_apply_batch(dl, dd, nb, n, &gd), gd);
  for (size_t j = 0; j < n; j++) {
    uint8_t *got = host_of(dd[j], nb[j]);
    if (memcmp(got, b[j], nb[j]) != 0)
      FAIL_("batch kernel, list %zu of %zu (width %d): differs from the "
            "reference", j, n, (int)l[j].width);
    free(got);
    ASSERT_OK(stitch_gpu_upload(dd[j], a[j], nb[j], &gd), gd);
  }
  uint64_t e = l[k].n / 2, p = l[k].pos[e];
  uint8_t *wrong = dup_bytes(a[k], nb[k]);
  if (l[k].width == STITCH_GPU_W4)
    wrong[p >> 1] ^= (uint8_t)(1u << ((p & 1) * 4));
  else
    wrong[p * (unsigned)l[k].width / 8] ^= 1;
  ASSERT_OK(stitch_gpu_upload(dd[k], wrong, nb[k], &gd), gd);
  char want[48];
  snprintf(want, sizeof(want), "list %zu: apply: entry %llu ", k,
           (unsigned long long)e);
  ASSERT_ERR(stitch_gpu_apply_batch(dl, dd, nb, n, &gd), STITCH_EBASE, gd,
             want);
  for (size_t j = 0; j < n; j++) {
    uint8_t *got = host_of(dd[j], nb[j]);
    ASSERT_MEM_EQ(got, j == k ? wrong : a[j], nb[j]);
    free(got);
    stitch_gpu_free(dd[j]);
    stitch_gpu_free(dl[j].pos);
    stitch_gpu_free(dl[j].old_v);
    stitch_gpu_free(dl[j].new_v);
  }
  free(wrong);
  free(dd);
  free(dl);
}

static void kernel_batches(void) {
  for (int round = 0; round < 10; round++) { /* mixed widths, some unchecked */
    batch bt;
    batch_make(&bt);
    size_t k = 0;
    while (bt.l[k].n == 0 || bt.l[k].old_v == NULL)
      k++;
    kernel_batch(bt.l, bt.a, bt.b, bt.nb, NB, round % 2 ? NB - 1 : k);
    batch_free(&bt);
  }
  enum { MANY = 900 }; /* an engine's commit: BF16 tensors, about 1 % */
  static stitch_gpu_list l[MANY];
  static uint8_t *a[MANY], *b[MANY];
  static uint64_t nb[MANY];
  for (size_t j = 0; j < MANY; j++) {
    nb[j] = 2 * (1 + test_rng_next(&rng) % 40000);
    a[j] = rnd_bytes(nb[j]);
    b[j] = dup_bytes(a[j], nb[j]);
    for (uint64_t i = 0; i < nb[j]; i++)
      if (test_rng_unit(&rng) < 0.01)
        b[j][i] ^= (uint8_t)(test_rng_next(&rng) | 1);
    b[j][nb[j] / 2] ^= 1;
    ASSERT_OK(stitch_gpu_list_diff(STITCH_GPU_W16, a[j], b[j], nb[j], &l[j],
                                   &gd),
              gd);
  }
  kernel_batch(l, a, b, nb, MANY, MANY - 1);
  for (size_t j = 0; j < MANY; j++) {
    stitch_gpu_list_free(&l[j]);
    free(a[j]);
    free(b[j]);
  }
}

static void kernel_diff(uint64_t nbytes, stitch_gpu_width w, double rate) {
  uint8_t *a = rnd_bytes(nbytes), *b = dup_bytes(a, nbytes);
  for (uint64_t i = 0; i < nbytes; i++)
    if (test_rng_unit(&rng) < rate)
      b[i] ^= (uint8_t)(test_rng_next(&rng) | 1);
  uint64_t ne = nbytes * 8 / (unsigned)w, want, got_n = 12345;
  uint64_t *pos = malloc((ne + 1) * 8);
  ASSERT_OK(stitch_gpu_ref_diff(w, a, b, nbytes, pos, &want, &gd), gd);
  uint8_t *da = dev_from(a, nbytes), *db = dev_from(b, nbytes);
  uint64_t *dp = dev_poisoned(ne * 8);
  ASSERT_OK(stitch_gpu_diff(w, da, db, nbytes, dp, &got_n, &gd), gd);
  ASSERT_UEQ(got_n, want);
  uint8_t *got = host_of(dp, want * 8);
  ASSERT_MEM_EQ(got, pos, want * 8);
  free(got);
  stitch_gpu_free(da);
  stitch_gpu_free(db);
  stitch_gpu_free(dp);
  free(pos);
  free(a);
  free(b);
}

/* The device's view of X (N masters) with outputs poisoned; PREV (host)
 * is uploaded first when not NULL. Returns the downloaded view. */
static view_bufs kernel_view(stitch_view_kind kind, uint32_t blk,
                             const float *x, uint64_t n,
                             const view_bufs *prev, const view_bufs *shape) {
  view_bufs v = *shape;
  uint8_t *m = dev_from(x, 4 * n), *q = dev_poisoned(v.qn);
  uint8_t *sc = dev_poisoned(v.scn), *s2 = dev_poisoned(4);
  uint8_t *pq = prev ? dev_from(prev->sc, v.scn) : NULL;
  uint8_t *p2 = prev && prev->s2 ? dev_from(prev->s2, 4) : NULL;
  if (kind == STITCH_VIEW_BF16)
    ASSERT_OK(stitch_gpu_quant_bf16(m, n, q, &gd), gd);
  else if (kind == STITCH_VIEW_FP8)
    ASSERT_OK(stitch_gpu_quant_fp8(m, n, blk, pq, q, sc, &gd), gd);
  else
    ASSERT_OK(stitch_gpu_quant_nvfp4(m, n, pq, p2, q, sc, s2, &gd), gd);
  v.q = host_of(q, v.qn);
  v.sc = shape->sc ? host_of(sc, v.scn) : NULL;
  v.s2 = shape->s2 ? host_of(s2, 4) : NULL;
  stitch_gpu_free(m);
  stitch_gpu_free(q);
  stitch_gpu_free(sc);
  stitch_gpu_free(s2);
  stitch_gpu_free(pq);
  stitch_gpu_free(p2);
  return v;
}

static void kernel_quant(stitch_view_kind kind, uint32_t blk, uint64_t rows) {
  const uint64_t k = 64, n = rows * k;
  float *x = masters(rows > 8 ? rows : 8, k); /* masters() writes row 5 */
  view_bufs prev = view_of(kind, blk, x, n, NULL, 0);
  view_bufs g = kernel_view(kind, blk, x, n, NULL, &prev);
  view_eq(&g, &prev, "kernel, fresh");
  view_free(&g);
  adam_step(x, n, 3e-3, 40.0f);
  view_bufs cur = view_of(kind, blk, x, n, &prev, 0);
  g = kernel_view(kind, blk, x, n, &prev, &cur);
  view_eq(&g, &cur, "kernel, with a previous view");
  view_free(&g);
  view_free(&cur);
  view_free(&prev);
  free(x);
}

static void test_kernels(void) {
  char name[128];
  ASSERT_OK(stitch_gpu_device_name(name, sizeof(name), &gd), gd);
  printf("test_gpu_ref: running the kernels on %s\n", name);
  static const uint64_t sizes[] = {0,     1,      2,      3,      4,
                                   17,    64,     1000,   4097,   65535,
                                   65536, 65537,  1 << 20, (3 << 20) + 5,
                                   (9 << 20) + 12};
  static const stitch_gpu_width ws[] = {STITCH_GPU_W4, STITCH_GPU_W8,
                                        STITCH_GPU_W16, STITCH_GPU_W32};
  for (size_t s = 0; s < sizeof(sizes) / 8; s++) {
    for (size_t w = 0; w < 4; w++) {
      uint64_t eb = ws[w] > 8 ? (unsigned)ws[w] / 8 : 1;
      uint64_t nb = sizes[s] / eb * eb;
      kernel_apply(nb, ws[w], 0.01);
      kernel_apply(nb, ws[w], 0.6);
      kernel_diff(nb, ws[w], 0.01);
      kernel_diff(nb, ws[w], 0.9);
    }
    uint64_t h, g;
    uint8_t *p = rnd_bytes(sizes[s]);
    uint8_t *dp = dev_from(p, sizes[s]);
    ASSERT_OK(stitch_gpu_ref_checksum(p, sizes[s], &h, &gd), gd);
    ASSERT_OK(stitch_gpu_checksum(dp, sizes[s], &g, &gd), gd);
    ASSERT_UEQ(g, h);
    uint64_t o = sizes[s] > 0; /* unaligned, one byte shorter */
    ASSERT_OK(stitch_gpu_checksum(dp + o, sizes[s] - o, &g, &gd), gd);
    ASSERT_OK(stitch_gpu_ref_checksum(p + o, sizes[s] - o, &h, &gd), gd);
    ASSERT_UEQ(g, h);
    stitch_gpu_free(dp);
    free(p);
  }
  kernel_batches();
  static const uint64_t rows[] = {1, 2, 7, 64, 1000, 20001};
  for (size_t r = 0; r < sizeof(rows) / 8; r++) {
    kernel_quant(STITCH_VIEW_BF16, 0, rows[r]);
    kernel_quant(STITCH_VIEW_FP8, 0, rows[r]);
    kernel_quant(STITCH_VIEW_FP8, 32, rows[r]);
    kernel_quant(STITCH_VIEW_FP8, 100, rows[r]);
    kernel_quant(STITCH_VIEW_FP8, 5000, rows[r]);
    kernel_quant(STITCH_VIEW_NVFP4, 0, rows[r]);
  }
  printf("test_gpu_ref: every kernel matched its reference\n");
}

int main(void) {
  rng = test_rng_seeded("test_gpu_ref", 0x9e3779b97f4a7c15ull);
  test_converters();
  test_apply_vs_codec();
  test_apply_refuses();
  test_apply_batch();
  test_quant();
  test_checksum();
  if (stitch_gpu_available()) {
    test_kernels();
  } else {
    stitch_diag d = {{0}};
    void *p;
    ASSERT_EQ(stitch_gpu_malloc(&p, 16, &d), STITCH_ENOTFOUND);
    ASSERT(p == NULL);
    printf("test_gpu_ref: no CUDA device (or built without CUDA): the GPU "
           "kernels were not run, only the C references\n");
  }
  printf("test_gpu_ref: ok\n");
  return 0;
}
