/* codec_bench.c: stitch-bench-codec, figures for the delta codec
 * (docs/benchmarks.md). A benchmark, not a test: it prints figures; the only
 * thing that fails it is a patched copy that is not bit-exact.
 *
 *   stitch-bench-codec TRAJ_DIR [--reps N] [--json] [--json-out FILE]
 *                      [--step K]
 *                      [--only load|encode|zstd|apply]
 *
 * For each consecutive pair step_{k-1} -> step_k of TRAJ_DIR: delta size
 * against the memoryless bound, the int32-index + value layout and the full
 * checkpoint; encode throughput against libzstd level 1 on the same bytes;
 * decode + patch in place against memcpy of the same size; the view digest.
 * Each time is the best of --reps runs, one thread; encode and zstd runs
 * alternate so a neighbour's load hits both alike. With --threads, apply
 * and its memcpy reference both run on that many threads.
 *
 * --only runs one operation once for step K, untimed, so callgrind can count
 * it: valgrind --tool=callgrind --toggle-collect='bench_encode_once*' ...
 * Only the bench_*_once functions do the measured work.
 *
 * Uses only the public libstitch API (stitch.h), plus libzstd. */
#define _POSIX_C_SOURCE 200809L
#include "stitch.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#define PROG "stitch-bench-codec"
#define MAX_REPS 1000
#define MAX_STEPS 100000
#define ZSTD_BENCH_LEVEL 1
/* Memory bandwidth gets at least this many tries: one memcpy is short and
 * its best is the figure we compare against. */
#define MIN_MEMCPY_REPS 5

#define USAGE                                                                 \
  "usage: " PROG " TRAJ_DIR [--reps N] [--json] [--json-out FILE] "         \
  "[--step K] [--threads N] [--fastest] "                                    \
  "[--only load|encode|zstd|apply]"

#define HELP                                                                  \
  USAGE "\n\n"                                                                \
  "Benchmarks the delta codec on a trajectory DIR/step_0000.safetensors ..\n" \
  "(see stitch-synth). One row per step k (step_{k-1} -> step_k).\n\n"       \
  "  --reps N     timed repetitions, best kept (default 3)\n"                \
  "  --json       machine-readable output (instead of the table)\n"        \
  "  --json-out F also write it to file F (the table still prints)\n"      \
  "  --step K     only the pair ending at step K\n"                          \
  "  --threads N  apply, and the memcpy it is compared with, on N threads\n" \
  "               (default 1; 0: every CPU)\n"                             \
  "  --fastest    code changes as RANS (stitch delta --fastest)\n"         \
  "  --only OP    run OP once for one pair (--step, default 1), untimed,\n"  \
  "               for callgrind: load (baseline), encode, zstd, apply\n"     \
  "\nExit status: 0, 1 if an applied copy is not bit-exact or on error,\n"   \
  "2 on usage errors.\n"

typedef enum only_op { ONLY_NONE, ONLY_LOAD, ONLY_ENCODE, ONLY_ZSTD, ONLY_APPLY } only_op;

typedef struct opts {
  const char *dir;
  unsigned reps;
  int json;
  const char *json_out;
  unsigned step; /* 0: all */
  only_op only;
  unsigned threads; /* apply threads: 1 (default), or 0 for every CPU */
  int sparse_mode;  /* STITCH_SPARSE_FAST, or _FASTEST with --fastest */
} opts;

/* One pair's figures. Times are the best of the reps, in seconds. */
typedef struct row {
  unsigned step;
  uint64_t symbols, changed;
  uint64_t delta_bytes, full_bytes, idxval_bytes, zstd_bytes;
  double bound_bits;
  double t_enc, t_zstd, t_apply, t_memcpy, t_digest; /* wall */
  double c_enc, c_zstd, c_apply, c_memcpy, c_digest; /* thread CPU */
  int exact;
} row;

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": error: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": usage: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (see " PROG " --help)\n");
  va_end(ap);
  return 2;
}

static double now(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A wall and a CPU clock read together. */
typedef struct stamp {
  double wall, cpu;
} stamp;

static stamp stamp_now(void) {
  return (stamp){now(CLOCK_MONOTONIC), now(CLOCK_THREAD_CPUTIME_ID)};
}

static void keep_best(double *best, double t) {
  if (*best <= 0 || t < *best)
    *best = t;
}

static int parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
    return -1;
  *out = (unsigned)v;
  return 0;
}

static int parse_args(int argc, char **argv, opts *o) {
  *o = (opts){.reps = 3, .threads = 1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(HELP, stdout);
      exit(0);
    } else if (!strcmp(a, "--json")) {
      o->json = 1;
    } else if (!strcmp(a, "--fastest")) {
      o->sparse_mode = STITCH_SPARSE_FASTEST;
    } else if (!strcmp(a, "--reps") || !strcmp(a, "--step") ||
               !strcmp(a, "--only") || !strcmp(a, "--json-out") ||
               !strcmp(a, "--threads")) {
      if (i + 1 >= argc)
        return usage_error("%s wants a value", a);
      const char *v = argv[++i];
      if (!strcmp(a, "--json-out")) {
        o->json_out = v;
      } else if (!strcmp(a, "--threads")) {
        if (parse_uint(v, 0, 64, &o->threads))
          return usage_error("--threads wants an integer in [0, 64], not '%s'",
                             v);
      } else if (!strcmp(a, "--reps")) {
        if (parse_uint(v, 1, MAX_REPS, &o->reps))
          return usage_error("--reps wants an integer in [1, %d], not '%s'",
                             MAX_REPS, v);
      } else if (!strcmp(a, "--step")) {
        if (parse_uint(v, 1, MAX_STEPS, &o->step))
          return usage_error("--step wants an integer in [1, %d], not '%s'",
                             MAX_STEPS, v);
      } else {
        static const char *names[] = {"", "load", "encode", "zstd", "apply"};
        o->only = ONLY_NONE;
        for (int k = 1; k < 5; k++)
          if (!strcmp(v, names[k]))
            o->only = (only_op)k;
        if (o->only == ONLY_NONE)
          return usage_error("--only wants load, encode, zstd or apply, not "
                             "'%s'", v);
      }
    } else if (a[0] == '-') {
      return usage_error("unknown option '%s'", a);
    } else if (o->dir == NULL) {
      o->dir = a;
    } else {
      return usage_error("one TRAJ_DIR, not also '%s'", a);
    }
  }
  if (o->dir == NULL)
    return usage_error("TRAJ_DIR is missing");
  if (o->only != ONLY_NONE && o->step == 0)
    o->step = 1;
  return 0;
}

static void step_path(char *buf, size_t cap, const char *dir, unsigned k) {
  snprintf(buf, cap, "%s/step_%04u.safetensors", dir, k);
}

/* The whole file, as zstd on the command line would read it. */
static int read_file(const char *path, uint8_t **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return fail("%s: %s", path, strerror(errno));
  int rc = 1;
  uint8_t *buf = NULL;
  if (fseeko(f, 0, SEEK_END) == 0) {
    off_t n = ftello(f);
    if (n >= 0 && fseeko(f, 0, SEEK_SET) == 0 &&
        (buf = malloc(n ? (size_t)n : 1)) != NULL &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
      *out = buf;
      *len = (size_t)n;
      buf = NULL;
      rc = 0;
    }
  }
  if (rc != 0)
    fail("%s: cannot read", path);
  free(buf);
  fclose(f);
  return rc;
}

/* The private copy an in-place applier patches: the base's tensors, laid out
 * as in the base's data region. */
typedef struct copy {
  uint8_t *buf;
  uint64_t len;
} copy;

static uint64_t data_len(const stitch_st *st) {
  uint64_t n = 0;
  for (size_t i = 0; i < stitch_st_count(st); i++)
    n += stitch_st_tensor(st, i)->nbytes;
  return n;
}

static void copy_fill(copy *c, const stitch_st *base) {
  for (size_t i = 0; i < stitch_st_count(base); i++) {
    const stitch_tensor *t = stitch_st_tensor(base, i);
    if (t->nbytes)
      memcpy(c->buf + t->offset, t->data, t->nbytes);
  }
}

/* The measured operations. noinline so callgrind can toggle on them. */

__attribute__((noinline)) static int
bench_encode_once(const stitch_st *base, const stitch_st *res,
                  const stitch_delta_opts *o, uint8_t **out, size_t *len,
                  stitch_delta_stats *stats, stitch_diag *d) {
  return stitch_delta_encode(base, res, o, out, len, stats, d);
}

__attribute__((noinline)) static size_t bench_zstd_once(ZSTD_CCtx *cc,
                                                        uint8_t *dst,
                                                        size_t cap,
                                                        const uint8_t *src,
                                                        size_t n) {
  return ZSTD_compressCCtx(cc, dst, cap, src, n, ZSTD_BENCH_LEVEL);
}

/* Parse the delta, then decode and patch every tensor in place, on one
 * thread (stitch_delta_apply_tensor) or several (stitch_delta_apply_all). */
__attribute__((noinline)) static int
bench_apply_once(const uint8_t *delta, size_t len, const stitch_st *base,
                 copy *c, unsigned threads, stitch_diag *d) {
  stitch_delta *dl;
  int rc = stitch_delta_parse_ex(delta, len, base, &dl, d);
  if (rc != 0)
    return rc;
  size_t n = stitch_delta_count(dl);
  uint8_t **ptr = calloc(n ? n : 1, sizeof(*ptr));
  uint64_t *sz = calloc(n ? n : 1, sizeof(*sz));
  if (ptr == NULL || sz == NULL)
    rc = STITCH_ENOMEM;
  for (size_t i = 0; i < n && rc == 0; i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(dl, i);
    const stitch_tensor *bt = stitch_st_find(base, t->name);
    if (t->is_new || bt == NULL || bt->nbytes != t->nbytes) {
      snprintf(d->msg, sizeof(d->msg),
               "tensor '%s' is new or resized: the bench patches in place only",
               t->name);
      rc = STITCH_EMISMATCH;
      break;
    }
    ptr[i] = c->buf + bt->offset;
    sz[i] = t->nbytes;
    if (threads == 1)
      rc = stitch_delta_apply_tensor(dl, i, ptr[i], sz[i], d);
  }
  if (rc == 0 && threads != 1)
    rc = stitch_delta_apply_all(dl, ptr, sz, threads, d);
  free(ptr);
  free(sz);
  stitch_delta_free(dl);
  return rc;
}

/* The threads apply runs on: --threads, with 0 for every CPU. */
static unsigned apply_threads(const opts *o) {
  long n = o->threads ? (long)o->threads : sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (unsigned)n;
}

typedef struct copy_part {
  uint8_t *dst;
  const uint8_t *src;
  size_t n;
} copy_part;

static void *copy_part_run(void *arg) {
  copy_part *c = arg;
  memcpy(c->dst, c->src, c->n);
  return NULL;
}

/* memcpy of N bytes, cut into THREADS contiguous parts copied at once (the
 * calling thread takes the first): the bandwidth that THREADS apply threads
 * could reach. */
#define MAX_COPY_THREADS 64
__attribute__((noinline)) static void bench_memcpy_once(uint8_t *dst,
                                                        const uint8_t *src,
                                                        size_t n,
                                                        unsigned threads) {
  copy_part part[MAX_COPY_THREADS];
  pthread_t tid[MAX_COPY_THREADS];
  unsigned started = 1;
  if (threads < 1)
    threads = 1;
  size_t per = (n / threads + 63) & ~(size_t)63;
  for (unsigned i = 0; i < threads; i++) {
    size_t off = per * i < n ? per * i : n;
    part[i] = (copy_part){dst + off, src + off, n - off < per ? n - off : per};
  }
  for (; started < threads; started++)
    if (pthread_create(&tid[started], NULL, copy_part_run, &part[started]) != 0)
      break;
  for (unsigned i = started; i < threads; i++) /* no thread: copy here */
    copy_part_run(&part[i]);
  copy_part_run(&part[0]);
  for (unsigned i = 1; i < started; i++)
    pthread_join(tid[i], NULL);
}

/* 1 when the patched copy equals RES tensor for tensor. */
static int copy_matches(const copy *c, const stitch_st *base,
                        const stitch_st *res) {
  if (stitch_st_count(base) != stitch_st_count(res))
    return 0;
  for (size_t i = 0; i < stitch_st_count(res); i++) {
    const stitch_tensor *t = stitch_st_tensor(res, i);
    const stitch_tensor *bt = stitch_st_find(base, t->name);
    if (bt == NULL || bt->nbytes != t->nbytes ||
        memcmp(c->buf + bt->offset, t->data, t->nbytes) != 0)
      return 0;
  }
  return 1;
}

/* Everything one pair needs, opened and allocated once. */
typedef struct pair {
  stitch_st *base, *res;
  uint8_t *file;   /* the result file's bytes, for zstd */
  size_t file_len;
  uint8_t *zdst;
  size_t zcap;
  copy c;
} pair;

static void pair_free(pair *p) {
  stitch_st_free(p->base);
  stitch_st_free(p->res);
  free(p->file);
  free(p->zdst);
  free(p->c.buf);
  memset(p, 0, sizeof(*p));
}

static int pair_open(pair *p, const char *dir, unsigned k) {
  memset(p, 0, sizeof(*p));
  char pb[4096], pr[4096];
  step_path(pb, sizeof(pb), dir, k - 1);
  step_path(pr, sizeof(pr), dir, k);
  stitch_diag d = {{0}};
  int rc;
  if ((rc = stitch_st_open(pb, &p->base, &d)) != 0 ||
      (rc = stitch_st_open(pr, &p->res, &d)) != 0) {
    fail("%s", d.msg[0] ? d.msg : stitch_strerror(rc));
    pair_free(p);
    return 1;
  }
  if (read_file(pr, &p->file, &p->file_len) != 0) {
    pair_free(p);
    return 1;
  }
  p->zcap = ZSTD_compressBound(p->file_len);
  p->zdst = malloc(p->zcap);
  uint64_t dl = data_len(p->base);
  p->c.len = dl;
  p->c.buf = malloc(dl ? dl : 1);
  if (p->zdst == NULL || p->c.buf == NULL) {
    pair_free(p);
    return fail("out of memory");
  }
  /* Touch every page once, so no rep pays first-touch faults. */
  memset(p->zdst, 0, p->zcap);
  copy_fill(&p->c, p->base);
  return 0;
}

static int run_only(const opts *o) {
  pair p;
  if (pair_open(&p, o->dir, o->step) != 0)
    return 1;
  /* Digests are trusted as given: zeros keep the digest out of the count. */
  stitch_digest zero = {{0}};
  stitch_delta_opts eo = {.base_digest = &zero, .result_digest = &zero,
                         .sparse_mode = o->sparse_mode, .threads = 1,
                         .table_as_base = 1};
  stitch_diag d = {{0}};
  int rc = 0;
  uint8_t *delta = NULL;
  size_t dlen = 0;
  switch (o->only) {
  case ONLY_LOAD:
    break;
  case ONLY_ENCODE:
  case ONLY_APPLY:
    rc = bench_encode_once(p.base, p.res, &eo, &delta, &dlen, NULL, &d);
    if (rc == 0 && o->only == ONLY_APPLY) {
      rc = bench_apply_once(delta, dlen, p.base, &p.c, o->threads, &d);
      if (rc == 0 && !copy_matches(&p.c, p.base, p.res)) {
        fprintf(stderr, PROG ": step %u: applied copy is NOT bit-exact\n",
                o->step);
        rc = 1;
      }
    }
    break;
  case ONLY_ZSTD: {
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    size_t z = cc ? bench_zstd_once(cc, p.zdst, p.zcap, p.file, p.file_len)
                  : 0;
    if (cc == NULL || ZSTD_isError(z))
      rc = fail("zstd failed");
    else
      dlen = z;
    ZSTD_freeCCtx(cc);
    break;
  }
  case ONLY_NONE:
    break;
  }
  if (rc < 0)
    rc = fail("step %u: %s", o->step, d.msg[0] ? d.msg : stitch_strerror(rc));
  else if (rc == 0)
    fprintf(stderr, PROG ": step %u: %s: %zu bytes in, %zu bytes out\n",
            o->step,
            (const char *[]){"", "load", "encode", "zstd", "apply"}[o->only],
            p.file_len, dlen);
  free(delta);
  pair_free(&p);
  return rc ? 1 : 0;
}

/* Measures one pair into *r. BASE_DG is the base's view digest; the result's
 * is left in *RES_DG for the next pair. */
static int bench_pair(const opts *o, unsigned k, ZSTD_CCtx *cc,
                      const stitch_digest *base_dg, stitch_digest *res_dg,
                      row *r) {
  pair p;
  if (pair_open(&p, o->dir, k) != 0)
    return 1;
  memset(r, 0, sizeof(*r));
  r->step = k;
  r->full_bytes = stitch_st_file_size(p.res);
  stitch_diag d = {{0}};
  int rc = 0;

  /* The digest, for reference; its value feeds the encoder. */
  for (unsigned i = 0; i < o->reps && rc == 0; i++) {
    stamp t0 = stamp_now();
    rc = stitch_view_digest(p.res, res_dg, NULL);
    stamp t1 = stamp_now();
    keep_best(&r->t_digest, t1.wall - t0.wall);
    keep_best(&r->c_digest, t1.cpu - t0.cpu);
  }
  if (rc != 0) {
    pair_free(&p);
    return fail("step %u: digest: %s", k, stitch_strerror(rc));
  }

  /* Encode (codec alone: digests given; one thread, as zstd -1) and
   * zstd -1, alternating. */
  /* What `stitch delta` writes: format 4, the table named by the base's
   * (and the base by a digest prefix). */
  stitch_delta_opts eo = {.base_digest = base_dg, .result_digest = res_dg,
                         .sparse_mode = o->sparse_mode, .threads = 1,
                         .table_as_base = 1};
  uint8_t *delta = NULL;
  size_t dlen = 0;
  for (unsigned i = 0; i < o->reps; i++) {
    free(delta);
    delta = NULL;
    stamp t0 = stamp_now();
    rc = bench_encode_once(p.base, p.res, &eo, &delta, &dlen, NULL, &d);
    stamp t1 = stamp_now();
    if (rc != 0)
      break;
    keep_best(&r->t_enc, t1.wall - t0.wall);
    keep_best(&r->c_enc, t1.cpu - t0.cpu);
    t0 = stamp_now();
    size_t z = bench_zstd_once(cc, p.zdst, p.zcap, p.file, p.file_len);
    t1 = stamp_now();
    if (ZSTD_isError(z)) {
      free(delta);
      pair_free(&p);
      return fail("step %u: zstd: %s", k, ZSTD_getErrorName(z));
    }
    r->zstd_bytes = z;
    keep_best(&r->t_zstd, t1.wall - t0.wall);
    keep_best(&r->c_zstd, t1.cpu - t0.cpu);
  }
  if (rc != 0) {
    free(delta);
    pair_free(&p);
    return fail("step %u: encode: %s", k, d.msg[0] ? d.msg : stitch_strerror(rc));
  }

  /* Stats take an extra pass (step histograms): untimed, and the bytes
   * must come out the same. */
  stitch_delta_stats st = {0};
  uint8_t *delta2 = NULL;
  size_t dlen2 = 0;
  rc = stitch_delta_encode(p.base, p.res, &eo, &delta2, &dlen2, &st, &d);
  if (rc != 0 || dlen2 != dlen || memcmp(delta, delta2, dlen) != 0) {
    free(delta);
    free(delta2);
    stitch_delta_stats_free(&st);
    pair_free(&p);
    return fail("step %u: %s", k,
                rc ? stitch_strerror(rc)
                   : "encoding with stats gave different bytes");
  }
  free(delta2);
  r->symbols = st.symbols;
  r->changed = st.changed;
  r->delta_bytes = dlen;
  r->bound_bits = st.bound_bits;
  r->idxval_bytes = st.idxval_bytes;
  stitch_delta_stats_free(&st);

  /* Apply in place into the private copy; refill it untimed before each
   * rep. memcpy of the same size, in between, is the bandwidth reference. */
  r->exact = 1;
  unsigned mreps = o->reps > MIN_MEMCPY_REPS ? o->reps : MIN_MEMCPY_REPS;
  for (unsigned i = 0; i < o->reps && rc == 0; i++) {
    copy_fill(&p.c, p.base);
    stamp t0 = stamp_now();
    rc = bench_apply_once(delta, dlen, p.base, &p.c, o->threads, &d);
    stamp t1 = stamp_now();
    keep_best(&r->t_apply, t1.wall - t0.wall);
    keep_best(&r->c_apply, t1.cpu - t0.cpu);
    if (rc == 0 && !copy_matches(&p.c, p.base, p.res))
      r->exact = 0;
  }
  if (rc != 0) {
    free(delta);
    pair_free(&p);
    return fail("step %u: apply: %s", k, d.msg[0] ? d.msg : stitch_strerror(rc));
  }
  /* Source: the result file's bytes; destination: the copy (both touched). */
  size_t mn = p.c.len < p.file_len ? (size_t)p.c.len : p.file_len;
  double scale = (double)r->full_bytes / (double)(mn ? mn : 1);
  unsigned cthreads = apply_threads(o);
  if (cthreads > MAX_COPY_THREADS)
    cthreads = MAX_COPY_THREADS;
  for (unsigned i = 0; i < mreps; i++) {
    stamp t0 = stamp_now();
    bench_memcpy_once(p.c.buf, p.file, mn, cthreads);
    stamp t1 = stamp_now();
    keep_best(&r->t_memcpy, (t1.wall - t0.wall) * scale);
    keep_best(&r->c_memcpy, (t1.cpu - t0.cpu) * scale);
  }
  free(delta);
  pair_free(&p);
  return 0;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

static double rate(uint64_t bytes, double s) { return s > 0 ? bytes / s : 0; }
static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

static void print_header(const opts *o) {
  char th[48] = "one thread";
  if (o->threads != 1)
    snprintf(th, sizeof(th), "apply and memcpy on %u threads",
             apply_threads(o));
  printf("# %s, best of %u, %s (the rest on one); rates in MB/s of checkpoint "
         "bytes\n",
         o->dir, o->reps, th);
  printf("%4s %8s %11s %11s %6s %12s %6s %12s %7s %7s %7s %5s %5s %7s %7s "
         "%5s %7s %5s\n",
         "step", "density", "delta_B", "bound_B", "d/bnd", "i32val_B",
         "iv/d", "full_B", "full/d", "enc", "zstd1", "e/z", "e/z_c", "apply",
         "memcpy", "frac", "digest", "exact");
}

static void print_row(const char *label, const row *r) {
  uint64_t b = r->full_bytes;
  double bound = r->bound_bits / 8;
  printf("%4s %7.3f%% %11" PRIu64 " %11.0f %6.3f %12" PRIu64 " %6.1f %12" PRIu64
         " %7.1f %7.1f %7.1f %5.2f %5.2f %7.1f %7.1f %5.3f %7.1f %5s\n",
         label, 100 * ratio((double)r->changed, (double)r->symbols),
         r->delta_bytes, bound, ratio((double)r->delta_bytes, bound),
         r->idxval_bytes, ratio((double)r->idxval_bytes, (double)r->delta_bytes),
         b, ratio((double)b, (double)r->delta_bytes), rate(b, r->t_enc) / 1e6,
         rate(b, r->t_zstd) / 1e6, ratio(r->t_zstd, r->t_enc),
         ratio(r->c_zstd, r->c_enc), rate(b, r->t_apply) / 1e6, rate(b, r->t_memcpy) / 1e6,
         ratio(r->t_memcpy, r->t_apply), rate(b, r->t_digest) / 1e6,
         r->exact ? "yes" : "NO");
}

static void json_row(FILE *f, const row *r, int comma) {
  uint64_t b = r->full_bytes;
  double bound = r->bound_bits / 8;
  fprintf(f, "    {\"step\": %u, \"symbols\": %" PRIu64 ", \"changed\": %" PRIu64
         ", \"density\": %.6g, \"delta_bytes\": %" PRIu64
         ", \"bound_bytes\": %.1f, \"delta_over_bound\": %.6g"
         ", \"idxval_bytes\": %" PRIu64 ", \"idxval_over_delta\": %.6g"
         ", \"full_bytes\": %" PRIu64 ", \"full_over_delta\": %.6g"
         ", \"zstd1_bytes\": %" PRIu64
         ", \"encode_s\": %.6g, \"zstd1_s\": %.6g, \"encode_cpu_s\": %.6g"
         ", \"zstd1_cpu_s\": %.6g, \"encode_Bps\": %.6g, \"zstd1_Bps\": %.6g"
         ", \"encode_speedup_vs_zstd1\": %.6g"
         ", \"encode_speedup_vs_zstd1_cpu\": %.6g"
         ", \"apply_s\": %.6g, \"memcpy_s\": %.6g, \"apply_cpu_s\": %.6g"
         ", \"memcpy_cpu_s\": %.6g, \"apply_Bps\": %.6g"
         ", \"memcpy_Bps\": %.6g, \"apply_fraction_of_memcpy\": %.6g"
         ", \"apply_fraction_of_memcpy_cpu\": %.6g"
         ", \"digest_s\": %.6g, \"digest_cpu_s\": %.6g, \"digest_Bps\": %.6g"
         ", \"bit_exact\": %s}%s\n",
         r->step, r->symbols, r->changed,
         ratio((double)r->changed, (double)r->symbols), r->delta_bytes, bound,
         ratio((double)r->delta_bytes, bound), r->idxval_bytes,
         ratio((double)r->idxval_bytes, (double)r->delta_bytes), b,
         ratio((double)b, (double)r->delta_bytes), r->zstd_bytes, r->t_enc,
         r->t_zstd, r->c_enc, r->c_zstd, rate(b, r->t_enc), rate(b, r->t_zstd),
         ratio(r->t_zstd, r->t_enc), ratio(r->c_zstd, r->c_enc), r->t_apply,
         r->t_memcpy, r->c_apply, r->c_memcpy, rate(b, r->t_apply),
         rate(b, r->t_memcpy), ratio(r->t_memcpy, r->t_apply),
         ratio(r->c_memcpy, r->c_apply), r->t_digest, r->c_digest,
         rate(b, r->t_digest),
         r->exact ? "true" : "false", comma ? "," : "");
}

static void json_doc(FILE *f, const opts *o, const row *rows, unsigned first,
                     unsigned last, const row *tot) {
  fprintf(f, "{\n  \"traj\": ");
  json_str(f, o->dir);
  fprintf(f, ", \"reps\": %u, \"zstd_level\": %d,\n  \"pairs\": [\n",
          o->reps, ZSTD_BENCH_LEVEL);
  for (unsigned k = first; k <= last; k++)
    json_row(f, &rows[k - first], k < last);
  fprintf(f, "  ],\n  \"totals\":\n");
  json_row(f, tot, 0);
  fprintf(f, "}\n");
}

static void add_row(row *tot, const row *r) {
  tot->symbols += r->symbols;
  tot->changed += r->changed;
  tot->delta_bytes += r->delta_bytes;
  tot->full_bytes += r->full_bytes;
  tot->idxval_bytes += r->idxval_bytes;
  tot->zstd_bytes += r->zstd_bytes;
  tot->bound_bits += r->bound_bits;
  tot->t_enc += r->t_enc;
  tot->t_zstd += r->t_zstd;
  tot->c_enc += r->c_enc;
  tot->c_zstd += r->c_zstd;
  tot->t_apply += r->t_apply;
  tot->t_memcpy += r->t_memcpy;
  tot->t_digest += r->t_digest;
  tot->c_apply += r->c_apply;
  tot->c_memcpy += r->c_memcpy;
  tot->c_digest += r->c_digest;
  tot->exact = tot->exact && r->exact;
}

int main(int argc, char **argv) {
  opts o;
  int urc = parse_args(argc, argv, &o);
  if (urc != 0)
    return urc;
  if (o.only != ONLY_NONE)
    return run_only(&o);

  char path[4096];
  unsigned last = 0;
  for (;;) {
    step_path(path, sizeof(path), o.dir, last + 1);
    if (last + 1 > MAX_STEPS || access(path, R_OK) != 0)
      break;
    last++;
  }
  step_path(path, sizeof(path), o.dir, 0);
  if (access(path, R_OK) != 0 || last == 0)
    return fail("%s: needs step_0000.safetensors and step_0001.safetensors",
                o.dir);
  if (o.step > last)
    return fail("%s: no step %u (last is %u)", o.dir, o.step, last);
  unsigned first = o.step ? o.step : 1;
  if (o.step)
    last = o.step;

  ZSTD_CCtx *cc = ZSTD_createCCtx();
  row *rows = calloc(last - first + 1, sizeof(*rows));
  if (cc == NULL || rows == NULL)
    return fail("out of memory");

  /* The first base's digest is computed once, untimed; each result's
   * digest then serves as the next pair's base. */
  stitch_digest base_dg, res_dg;
  {
    stitch_st *st;
    stitch_diag d = {{0}};
    int rc = stitch_st_open((step_path(path, sizeof(path), o.dir, first - 1),
                             path),
                            &st, &d);
    if (rc == 0) {
      rc = stitch_view_digest(st, &base_dg, NULL);
      stitch_st_free(st);
    }
    if (rc != 0)
      return fail("%s: %s", path, d.msg[0] ? d.msg : stitch_strerror(rc));
  }
  if (!o.json)
    print_header(&o);
  row tot = {.exact = 1};
  int rc = 0;
  for (unsigned k = first; k <= last; k++) {
    row *r = &rows[k - first];
    if ((rc = bench_pair(&o, k, cc, &base_dg, &res_dg, r)) != 0)
      break;
    base_dg = res_dg;
    add_row(&tot, r);
    if (!o.json) {
      char lab[16];
      snprintf(lab, sizeof(lab), "%u", k);
      print_row(lab, r);
      fflush(stdout);
    }
  }
  if (rc == 0) {
    if (!o.json)
      print_row("all", &tot);
    if (o.json)
      json_doc(stdout, &o, rows, first, last, &tot);
    if (o.json_out != NULL) {
      FILE *jf = fopen(o.json_out, "w");
      if (jf != NULL)
        json_doc(jf, &o, rows, first, last, &tot);
      if (jf == NULL || fclose(jf) != 0)
        rc = fail("%s: cannot write", o.json_out);
    }
    if (!tot.exact) {
      fprintf(stderr, PROG ": an applied copy is NOT bit-exact\n");
      rc = 1;
    }
  }
  ZSTD_freeCCtx(cc);
  free(rows);
  return rc;
}
