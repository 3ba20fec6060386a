/* gpu-bench.c: checks and times every CUDA kernel of libstitch at tensor
 * sizes from 10 MB to 10 GB, against the device's own copy bandwidth
 * measured in the same run (docs/kernels.md). Built and run by
 * tools/gpu-bench; not part of CI. Uses only the public API.
 *
 * Sizes are bytes of a BF16 view (n = size / 2 elements, 2n bytes of FP32
 * masters behind it). Each kernel runs once to warm up, then REPS times;
 * the best time is reported. Every result is checked against the C
 * reference: byte for byte up to 1 GB, above that by comparing the GPU
 * checksum of the device's output with the CPU checksum of the reference's
 * (the checksum kernel is itself checked first at every size).
 *
 * GB/s is tensor bytes per second (10^9): the view's bytes for diff, apply
 * and checksum, the masters' for the quantizers, and the bytes copied for
 * cudaMemcpy (which reads and writes them, as a diff reads two views).
 * Usage: gpu-bench [MAX_MB [TARGET_MB]] (default 10000 and 14000; a
 * TARGET_MB of 0 skips the apply target).
 * Exit status: 0 all checked, 1 a check failed, 2 no GPU. */
#define _POSIX_C_SOURCE 200809L
#include "stitch.h"
#include "stitch/gpu.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 3
#define FULL_CHECK_MAX (1ull << 30)

static stitch_diag d;
static int failed;

#define OK(expr)                                                              \
  do {                                                                        \
    int rc_ = (expr);                                                         \
    if (rc_ != 0) {                                                           \
      fprintf(stderr, "gpu-bench: %s: %s (%s)\n", #expr,                      \
              stitch_errname(rc_), d.msg);                                    \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *xmalloc(uint64_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "gpu-bench: out of host memory (%" PRIu64 " bytes)\n", n);
    exit(1);
  }
  return p;
}

static void *dmalloc(uint64_t n) {
  void *p;
  OK(stitch_gpu_malloc(&p, n, &d));
  return p;
}

static void *dev_from(const void *h, uint64_t n) {
  void *p = dmalloc(n);
  OK(stitch_gpu_upload(p, h, n, &d));
  return p;
}

static uint64_t rng_s = 0x5eed5eed5eed5eedull;
static uint64_t rnd(void) {
  uint64_t z = (rng_s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Device output DEV (N bytes) against the reference's host bytes REF. */
static void check(const char *what, uint64_t size, const void *dev,
                  const void *ref, uint64_t n) {
  int bad;
  if (size <= FULL_CHECK_MAX) {
    uint8_t *h = xmalloc(n);
    OK(stitch_gpu_download(h, dev, n, &d));
    bad = memcmp(h, ref, n) != 0;
    free(h);
  } else {
    uint64_t a, b;
    OK(stitch_gpu_checksum(dev, n, &a, &d));
    OK(stitch_gpu_ref_checksum(ref, n, &b, &d));
    bad = a != b;
  }
  if (bad) {
    fprintf(stderr, "gpu-bench: CHECK FAILED: %s at %" PRIu64 " bytes\n",
            what, size);
    failed = 1;
  }
}

static double copy_gbs;

static void row(const char *kernel, uint64_t size, double sec,
                uint64_t bytes) {
  double gbs = (double)bytes / sec / 1e9;
  printf("%-22s %9.1f MB %10.3f ms %9.1f GB/s %6.2f x copy\n", kernel,
         size / 1e6, sec * 1e3, gbs, gbs / copy_gbs);
  fflush(stdout);
}

/* Times CALL (a statement); leaves the best of REPS in `best`. */
#define TIME(call)                                                            \
  do {                                                                        \
    call;                                                                     \
    best = 1e30;                                                              \
    for (int r_ = 0; r_ < REPS; r_++) {                                       \
      double t0_ = now();                                                     \
      call;                                                                   \
      double t_ = now() - t0_;                                                \
      best = t_ < best ? t_ : best;                                           \
    }                                                                         \
  } while (0)

static void bench_size(uint64_t size) {
  uint64_t n = size / 2 / 16 * 16, vb = 2 * n;
  double best;
  /* Masters and one Adam-like step (about 1% of BF16 values change). */
  float *x0 = xmalloc(4 * n), *x1 = xmalloc(4 * n);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t r = rnd();
    double u = (double)(r >> 11) * 0x1p-53 * 2 - 1;
    x0[i] = (float)(u * 0.02);
    x1[i] = x0[i] * (float)(1 + ((r & 1) ? 4e-5 : -4e-5));
  }

  /* Copy bandwidth first: every ratio refers to it. */
  uint8_t *ca = dmalloc(vb), *cb = dmalloc(vb);
  OK(stitch_gpu_memset(ca, 1, vb, &d));
  TIME(OK(stitch_gpu_copy(cb, ca, vb, &d)));
  copy_gbs = (double)vb / best / 1e9;
  printf("%-22s %9.1f MB %10.3f ms %9.1f GB/s   1.00 x copy\n",
         "cudaMemcpy D2D", size / 1e6, best * 1e3, copy_gbs);
  stitch_gpu_free(cb);

  /* Checksum (checked first: the large-size checks rely on it). */
  uint64_t hg, hr;
  uint8_t *src = xmalloc(vb);
  for (uint64_t i = 0; i < vb; i += 8) {
    uint64_t r = rnd();
    memcpy(src + i, &r, vb - i < 8 ? vb - i : 8);
  }
  OK(stitch_gpu_upload(ca, src, vb, &d));
  TIME(OK(stitch_gpu_checksum(ca, vb, &hg, &d)));
  OK(stitch_gpu_ref_checksum(src, vb, &hr, &d));
  if (hg != hr) {
    fprintf(stderr, "gpu-bench: CHECK FAILED: checksum at %" PRIu64 "\n", size);
    failed = 1;
  }
  row("checksum", size, best, vb);
  free(src);
  stitch_gpu_free(ca);

  /* Quantize: BF16, FP8 (blocks of 128), NVFP4; step 0 gives the
   * previous view, step 1 is timed. */
  uint8_t *r0 = xmalloc(vb), *r1 = xmalloc(vb);
  uint64_t fsn = (n + 127) / 128 * 4;
  uint8_t *f0 = xmalloc(n), *f0s = xmalloc(fsn), *f1 = xmalloc(n),
          *f1s = xmalloc(fsn);
  uint8_t *n0 = xmalloc(n / 2), *n0s = xmalloc(n / 16 + 1), n02[4],
          *n1 = xmalloc(n / 2), *n1s = xmalloc(n / 16 + 1), n12[4];
  OK(stitch_gpu_ref_quant_bf16((uint8_t *)x0, n, r0, &d));
  OK(stitch_gpu_ref_quant_bf16((uint8_t *)x1, n, r1, &d));
  OK(stitch_gpu_ref_quant_fp8((uint8_t *)x0, n, 128, NULL, f0, f0s, &d));
  OK(stitch_gpu_ref_quant_fp8((uint8_t *)x1, n, 128, f0s, f1, f1s, &d));
  OK(stitch_gpu_ref_quant_nvfp4((uint8_t *)x0, n, NULL, NULL, n0, n0s, n02,
                                &d));
  OK(stitch_gpu_ref_quant_nvfp4((uint8_t *)x1, n, n0s, n02, n1, n1s, n12,
                                &d));
  free(x0);
  uint8_t *dx = dev_from(x1, 4 * n);
  free(x1);
  uint8_t *dv = dmalloc(vb);
  TIME(OK(stitch_gpu_quant_bf16(dx, n, dv, &d)));
  check("quant bf16", size, dv, r1, vb);
  row("quantize bf16", size, best, 4 * n);
  uint8_t *dps = dev_from(f0s, fsn), *dq = dmalloc(n), *dqs = dmalloc(fsn);
  TIME(OK(stitch_gpu_quant_fp8(dx, n, 128, dps, dq, dqs, &d)));
  check("quant fp8", size, dq, f1, n);
  check("quant fp8 scales", size, dqs, f1s, fsn);
  row("quantize fp8 /128", size, best, 4 * n);
  stitch_gpu_free(dps);
  stitch_gpu_free(dqs);
  uint8_t *dpb = dev_from(n0s, n / 16), *dp2 = dev_from(n02, 4),
          *dsb = dmalloc(n / 16), *ds2 = dmalloc(4);
  TIME(OK(stitch_gpu_quant_nvfp4(dx, n, dpb, dp2, dq, dsb, ds2, &d)));
  check("quant nvfp4", size, dq, n1, n / 2);
  check("quant nvfp4 scales", size, dsb, n1s, n / 16);
  row("quantize nvfp4", size, best, 4 * n);
  stitch_gpu_free(dpb);
  stitch_gpu_free(dp2);
  stitch_gpu_free(dsb);
  stitch_gpu_free(ds2);
  stitch_gpu_free(dq);
  stitch_gpu_free(dx);
  free(f0), free(f0s), free(f1), free(f1s);
  free(n0), free(n0s), free(n1), free(n1s);

  /* Diff + compaction of the two BF16 views. */
  uint8_t *dv0 = dev_from(r0, vb);
  uint64_t *dpos = dmalloc(8 * n), count = 0, want = 0;
  TIME(OK(stitch_gpu_diff(STITCH_GPU_W16, dv0, dv, vb, dpos, &count, &d)));
  uint64_t *pos = xmalloc(8 * n);
  OK(stitch_gpu_ref_diff(STITCH_GPU_W16, r0, r1, vb, pos, &want, &d));
  if (count != want) {
    fprintf(stderr, "gpu-bench: CHECK FAILED: diff finds %" PRIu64
            " changes, the reference %" PRIu64 "\n", count, want);
    failed = 1;
  } else {
    check("diff positions", size, dpos, pos, 8 * want);
  }
  row("diff+compact bf16", size, best, vb);
  printf("%-22s %9.1f MB   %.2f%% of elements changed\n", "", size / 1e6,
         100.0 * (double)want / (double)n);
  free(pos);
  stitch_gpu_free(dpos);

  /* Apply the decoded step to a copy of the old view. */
  stitch_gpu_list l;
  OK(stitch_gpu_list_diff(STITCH_GPU_W16, r0, r1, vb, &l, &d));
  stitch_gpu_list dl = {STITCH_GPU_W16, l.n, dev_from(l.pos, 8 * l.n),
                        dev_from(l.old_v, 2 * l.n), dev_from(l.new_v, 2 * l.n)};
  stitch_gpu_list back = {STITCH_GPU_W16, l.n, dl.pos, dl.new_v, dl.old_v};
  OK(stitch_gpu_apply(&dl, dv0, vb, &d)); /* warm-up */
  best = 1e30;
  for (int r = 0; r < REPS; r++) {
    OK(stitch_gpu_apply(&back, dv0, vb, &d));
    double t0 = now();
    OK(stitch_gpu_apply(&dl, dv0, vb, &d));
    double t = now() - t0;
    best = t < best ? t : best;
  }
  check("apply", size, dv0, r1, vb);
  row("apply (list)", size, best, vb);
  stitch_gpu_list_free(&l);
  stitch_gpu_free(dl.pos);
  stitch_gpu_free(dl.old_v);
  stitch_gpu_free(dl.new_v);
  stitch_gpu_free(dv0);
  stitch_gpu_free(dv);
  free(r0);
  free(r1);
}

/* The same delta as an engine's commit writes it: the model as tensors of
 * 16 MiB (as tools/bench/pause_bench.py makes them), one list each, all in
 * one stitch_gpu_apply_batch. POS (host, M ascending elements of the
 * whole model), OV and NV (device) are bench_apply_target's; H0 the
 * model's checksum before. */
static void bench_apply_batch(uint8_t *t, uint64_t size, const uint64_t *pos,
                              uint64_t m, uint8_t *ov, uint8_t *nv,
                              uint64_t h0) {
  const uint64_t tb = 16ull << 20, te = tb / 2;
  size_t nt = (size_t)((size + tb - 1) / tb);
  uint64_t *rel = xmalloc(8 * m), *nb = xmalloc(8 * nt), h1;
  stitch_gpu_list *fwd = xmalloc(nt * sizeof(*fwd)),
                  *back = xmalloc(nt * sizeof(*back));
  uint8_t **data = xmalloc(nt * sizeof(*data));
  for (uint64_t i = 0; i < m; i++)
    rel[i] = pos[i] % te;
  uint64_t *drel = dev_from(rel, 8 * m), i = 0;
  for (size_t j = 0; j < nt; j++) {
    uint64_t first = i;
    while (i < m && pos[i] / te == j)
      i++;
    nb[j] = j + 1 < nt ? tb : size - j * tb;
    data[j] = t + j * tb;
    fwd[j] = (stitch_gpu_list){STITCH_GPU_W16, i - first, drel + first,
                               ov + 2 * first, nv + 2 * first};
    back[j] = fwd[j];
    back[j].old_v = fwd[j].new_v;
    back[j].new_v = fwd[j].old_v;
  }
  for (int checked = 1; checked >= 0; checked--) {
    double best = 1e30;
    for (int r = 0; r <= REPS; r++) {
      for (size_t j = 0; j < nt; j++)
        fwd[j].old_v = checked ? ov + 2 * (fwd[j].pos - drel) : NULL;
      double t0 = now();
      OK(stitch_gpu_apply_batch(fwd, data, nb, nt, &d));
      double dt = now() - t0;
      if (r > 0)
        best = dt < best ? dt : best;
      OK(stitch_gpu_apply_batch(back, data, nb, nt, &d));
    }
    OK(stitch_gpu_checksum(t, size, &h1, &d));
    if (h0 != h1) {
      fprintf(stderr, "gpu-bench: CHECK FAILED: batch apply round trip\n");
      failed = 1;
    }
    printf("apply 1%% of %.1f GB BF16 as %zu tensors, one batch, %s: %.3f ms "
           "(target < 5 ms: %s)\n",
           size / 1e9, nt, checked ? "base checked" : "no base check",
           best * 1e3, best < 5e-3 ? "met" : "NOT met");
    fflush(stdout);
  }
  stitch_gpu_free(drel);
  free(data);
  free(back);
  free(fwd);
  free(nb);
  free(rel);
}

/* The target: a 1%-dense delta to a 14 GB BF16 model in < 5 ms. */
static void bench_apply_target(uint64_t size) {
  uint64_t n = size / 2, m = n / 100;
  uint8_t *t = dmalloc(size);
  OK(stitch_gpu_memset(t, 0, size, &d));
  uint64_t h0, h1;
  OK(stitch_gpu_checksum(t, size, &h0, &d));
  uint64_t *pos = xmalloc(8 * m);
  uint16_t *ov = xmalloc(2 * m), *nv = xmalloc(2 * m);
  for (uint64_t i = 0; i < m; i++) {
    pos[i] = 100 * i + rnd() % 100; /* one change in every 100 elements */
    ov[i] = 0;
    nv[i] = (uint16_t)(1 + rnd() % 0xFFFF);
  }
  stitch_gpu_list l = {STITCH_GPU_W16, m, dev_from(pos, 8 * m),
                       dev_from(ov, 2 * m), dev_from(nv, 2 * m)};
  stitch_gpu_list back = {STITCH_GPU_W16, m, l.pos, l.new_v, l.old_v};
  /* With the base check (old values), then without (a caller that knows
   * the base by other means, as a commit of a prepared patch does). */
  for (int checked = 1; checked >= 0; checked--) {
    stitch_gpu_list fwd = l;
    if (!checked)
      fwd.old_v = NULL;
    double best = 1e30;
    for (int r = 0; r <= REPS; r++) {
      double t0 = now();
      OK(stitch_gpu_apply(&fwd, t, size, &d));
      double dt = now() - t0;
      if (r > 0)
        best = dt < best ? dt : best;
      /* Undoing it checks every written element (the base check of the
       * reverse list) and the checksum that nothing else moved. */
      OK(stitch_gpu_apply(&back, t, size, &d));
    }
    OK(stitch_gpu_checksum(t, size, &h1, &d));
    if (h0 != h1) {
      fprintf(stderr, "gpu-bench: CHECK FAILED: apply target round trip\n");
      failed = 1;
    }
    printf("apply 1%% of %.1f GB BF16, %s: %.3f ms (target < 5 ms: %s)\n",
           size / 1e9, checked ? "base checked" : "no base check", best * 1e3,
           best < 5e-3 ? "met" : "NOT met");
    fflush(stdout);
  }
  bench_apply_batch(t, size, pos, m, l.old_v, l.new_v, h0);
  stitch_gpu_free(l.pos);
  stitch_gpu_free(l.old_v);
  stitch_gpu_free(l.new_v);
  stitch_gpu_free(t);
  free(pos);
  free(ov);
  free(nv);
}

int main(int argc, char **argv) {
  int probe = argc > 1 && strcmp(argv[1], "--probe") == 0;
  uint64_t max_mb = argc > 1 && !probe ? strtoull(argv[1], NULL, 10) : 10000;
  uint64_t target_mb = argc > 2 ? strtoull(argv[2], NULL, 10) : 14000;
  if (!stitch_gpu_available()) {
    fprintf(stderr, "gpu-bench: no CUDA device is available (or libstitch "
                    "was built without CUDA); nothing was measured\n");
    return 2;
  }
  char name[128];
  OK(stitch_gpu_device_name(name, sizeof(name), &d));
  if (probe) {
    printf("gpu-bench: CUDA device: %s\n", name);
    return 0;
  }
  printf("gpu-bench on %s; sizes up to %" PRIu64 " MB; best of %d\n", name,
         max_mb, REPS);
  printf("%-22s %12s %13s %14s %12s\n", "kernel", "size", "time", "rate",
         "vs copy");
  /* The headline first, so that a run cut short still reports it. */
  if (target_mb > 0)
    bench_apply_target(target_mb * 1000000ull);
  static const uint64_t mb[] = {10, 100, 1000, 10000};
  for (size_t i = 0; i < sizeof(mb) / sizeof(mb[0]) && mb[i] <= max_mb; i++) {
    bench_size(mb[i] * 1000000ull);
    fflush(stdout);
  }
  printf("%s\n", failed ? "gpu-bench: SOME CHECKS FAILED" : "gpu-bench: all "
                                                            "checks passed");
  return failed;
}
