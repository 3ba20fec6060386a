/* stitch_synth.c: stitch-synth, a synthetic RL training trajectory.
 *
 *   stitch-synth --out DIR --steps N [--params P] [--view bf16|fp8|nvfp4|f32]
 *                [--lr LR] [--seed S] [--model small|qwen] [--masters] ...
 *
 * Writes DIR/step_0000.safetensors (initial weights) .. step_N (one per
 * optimizer step) as the served view, and with --masters the FP32 masters as
 * DIR/masters_NNNN.safetensors. See docs/synth.md for the model.
 *
 * The masters live in one buffer laid out as a safetensors file (header, then
 * the FP32 data), so stitch_st_parse hands them to stitch_view_build without
 * a copy; Adam's m and v sit beside them: 12 bytes per parameter in all.
 * Uses only the public libstitch API. */
#define _POSIX_C_SOURCE 200809L
#include "stitch.h"
#include "synth.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROG "stitch-synth"
#define MIN_PARAMS 65536ULL
#define MAX_PARAMS 100000000000ULL /* 1.2 TB of optimizer state */
#define MAX_STEPS 1000000ULL
#define MAX_THREADS 256u

#define USAGE                                                                 \
  "usage: " PROG " --out DIR --steps N [--params P] "                         \
  "[--view bf16|fp8|nvfp4|f32] [--lr LR] [--seed S] [--model small|qwen] "    \
  "[--masters] [--wd WD] [--signal A] [--fp8-block N] [--threads N] [--quiet]"

#define HELP                                                                  \
  USAGE "\n\n"                                                                \
  "Writes a synthetic RL trajectory: DIR/step_0000.safetensors (initial\n"    \
  "weights) .. step_N (one per AdamW step) as the served view.\n\n"          \
  "  --out DIR        output directory (created)\n"                          \
  "  --steps N        optimizer steps (0..1000000)\n"                        \
  "  --params P       model size, e.g. 1e5, 100M, 7B (default 1M)\n"         \
  "  --view V         bf16 | fp8 | nvfp4 | f32 (default bf16)\n"             \
  "  --lr LR          learning rate (default 1e-6)\n"                        \
  "  --seed S         seed (default 1)\n"                                    \
  "  --model M        small (Llama-like) | qwen (GQA, qkv biases)\n"         \
  "  --masters        also write the FP32 masters, masters_NNNN\n"           \
  "  --wd WD          AdamW weight decay (default 0)\n"                      \
  "  --signal A       persistent share of the gradient (default 0.5)\n"      \
  "  --fp8-block N    fp8 scale block, elements (default 0: per tensor)\n"   \
  "  --threads N      threads for the Adam step (default 1; same bytes)\n"   \
  "  --quiet          no progress lines\n"                                 \
  "  --plan           print the model's shape and exit (no --out, --steps)\n"

typedef struct opts {
  const char *out;
  uint64_t steps;
  int have_steps;
  uint64_t params;
  const char *view;
  double lr, wd, signal;
  uint64_t seed;
  const char *model;
  int masters, quiet, plan;
  uint32_t fp8_block;
  unsigned threads;
} opts;

static int usage_error(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, PROG ": usage: %s (see " PROG " --help)\n", msg);
  return 2;
}

static int fail(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  for (char *p = msg; *p; p++) /* one line, whatever the library said */
    if (*p == '\n')
      *p = ' ';
  fprintf(stderr, PROG ": error: %s\n", msg);
  return 1;
}

/* ---- flags --------------------------------------------------------------- */

static int parse_u64(const char *s, uint64_t max, uint64_t *out) {
  if (s == NULL || *s == '\0' || *s == '-')
    return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno != 0 || *end != '\0' || v > max)
    return -1;
  *out = v;
  return 0;
}

/* "100000", "1e5", "100k", "1.5M", "7B" / "7G". */
static int parse_count(const char *s, uint64_t *out) {
  if (s == NULL || *s == '\0')
    return -1;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s)
    return -1;
  switch (*end) {
  case 'k': case 'K': v *= 1e3; end++; break;
  case 'm': case 'M': v *= 1e6; end++; break;
  case 'g': case 'G': case 'b': case 'B': v *= 1e9; end++; break;
  default: break;
  }
  if (*end != '\0' || !(v >= 0) || v > 1e15)
    return -1;
  *out = (uint64_t)(v + 0.5);
  return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
  if (s == NULL || *s == '\0')
    return -1;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || *end != '\0' || !(v >= lo && v <= hi))
    return -1;
  *out = v;
  return 0;
}

static int parse_args(int argc, char **argv, opts *o, int *help) {
  *o = (opts){.params = 1000000, .view = "bf16", .lr = 1e-6, .signal = 0.5,
              .seed = 1, .model = "small", .threads = 1};
  *help = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = NULL;
    char flag[32];
    if (strncmp(a, "--", 2) != 0)
      return usage_error("unexpected argument '%s'", a);
    const char *eq = strchr(a, '=');
    size_t fl = eq ? (size_t)(eq - a) : strlen(a);
    if (fl >= sizeof(flag))
      return usage_error("unknown flag '%.40s'", a);
    memcpy(flag, a, fl);
    flag[fl] = '\0';
    int boolean = !strcmp(flag, "--masters") || !strcmp(flag, "--quiet") ||
                  !strcmp(flag, "--help") || !strcmp(flag, "--plan");
    if (boolean) {
      if (eq)
        return usage_error("%s takes no value", flag);
    } else if (eq) {
      val = eq + 1;
    } else if (i + 1 < argc) {
      val = argv[++i];
    } else {
      return usage_error("%s needs a value", flag);
    }

    uint64_t u;
    if (!strcmp(flag, "--help")) {
      *help = 1;
    } else if (!strcmp(flag, "--masters")) {
      o->masters = 1;
    } else if (!strcmp(flag, "--quiet")) {
      o->quiet = 1;
    } else if (!strcmp(flag, "--plan")) {
      o->plan = 1;
    } else if (!strcmp(flag, "--out")) {
      if (*val == '\0')
        return usage_error("--out is empty");
      o->out = val;
    } else if (!strcmp(flag, "--steps")) {
      if (parse_u64(val, MAX_STEPS, &o->steps) != 0)
        return usage_error("--steps wants an integer in [0, %llu], not '%s'",
                           (unsigned long long)MAX_STEPS, val);
      o->have_steps = 1;
    } else if (!strcmp(flag, "--params")) {
      if (parse_count(val, &o->params) != 0 || o->params < MIN_PARAMS ||
          o->params > MAX_PARAMS)
        return usage_error("--params wants a count in [%llu, 1e11] such as "
                           "1e5 or 100M, not '%s'",
                           (unsigned long long)MIN_PARAMS, val);
    } else if (!strcmp(flag, "--view")) {
      stitch_view_kind k;
      if (strcmp(val, "f32") && stitch_view_kind_parse(val, &k) != 0)
        return usage_error("--view wants bf16, fp8, nvfp4 or f32, not '%s'",
                           val);
      o->view = val;
    } else if (!strcmp(flag, "--lr")) {
      if (parse_double(val, 1e-12, 1, &o->lr) != 0)
        return usage_error("--lr wants a number in (0, 1], not '%s'", val);
    } else if (!strcmp(flag, "--wd")) {
      if (parse_double(val, 0, 10, &o->wd) != 0)
        return usage_error("--wd wants a number in [0, 10], not '%s'", val);
    } else if (!strcmp(flag, "--signal")) {
      if (parse_double(val, 0, 100, &o->signal) != 0)
        return usage_error("--signal wants a number in [0, 100], not '%s'",
                           val);
    } else if (!strcmp(flag, "--seed")) {
      if (parse_u64(val, UINT64_MAX, &o->seed) != 0)
        return usage_error("--seed wants an unsigned integer, not '%s'", val);
    } else if (!strcmp(flag, "--model")) {
      if (strcmp(val, "small") && strcmp(val, "qwen"))
        return usage_error("--model wants small or qwen, not '%s'", val);
      o->model = val;
    } else if (!strcmp(flag, "--fp8-block")) {
      if (parse_u64(val, UINT32_MAX, &u) != 0)
        return usage_error("--fp8-block wants an integer, not '%s'", val);
      o->fp8_block = (uint32_t)u;
    } else if (!strcmp(flag, "--threads")) {
      if (parse_u64(val, MAX_THREADS, &u) != 0 || u == 0)
        return usage_error("--threads wants an integer in [1, %u], not '%s'",
                           MAX_THREADS, val);
      o->threads = (unsigned)u;
    } else {
      return usage_error("unknown flag '%s'", flag);
    }
  }
  if (*help || o->plan)
    return 0;
  if (o->out == NULL)
    return usage_error("--out is required");
  if (!o->have_steps)
    return usage_error("--steps is required");
  return 0;
}

/* ---- files ----------------------------------------------------------------- */

/* mkdir -p; 0 or an errno. */
static int make_dirs(const char *path) {
  char *p = strdup(path);
  if (p == NULL)
    return ENOMEM;
  int err = 0;
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s != '\0')
      continue;
    char c = *s;
    *s = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      err = errno;
      break;
    }
    *s = c;
    if (c == '\0')
      break;
  }
  struct stat sb;
  if (err == 0 && stat(path, &sb) != 0)
    err = errno;
  else if (err == 0 && !S_ISDIR(sb.st_mode))
    err = ENOTDIR;
  free(p);
  return err;
}

static char *step_path(const char *dir, const char *prefix, uint64_t step) {
  size_t n = strlen(dir) + strlen(prefix) + 40;
  char *s = malloc(n);
  if (s != NULL)
    snprintf(s, n, "%s/%s_%04" PRIu64 ".safetensors", dir, prefix, step);
  return s;
}

/* ---- the masters buffer ---------------------------------------------------- */

typedef struct masters {
  uint8_t *buf;
  size_t len;
  size_t data_start;
  size_t step_at; /* offset of the 8 step digits in the header */
  char *meta;     /* the __metadata__ object, for the writer */
  size_t meta_step_at;
  float *w;
} masters;

typedef struct sbuf {
  char *s;
  size_t len, cap;
  int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->len : NULL,
                      b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = 1;
      return;
    }
    if (b->s != NULL && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t nc = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
    char *ns = realloc(b->s, nc);
    if (ns == NULL) {
      b->oom = 1;
      return;
    }
    b->s = ns;
    b->cap = nc;
  }
}

static int masters_new(masters *ms, const synth_model *m, const opts *o) {
  memset(ms, 0, sizeof(*ms));
  sbuf meta = {0};
  sb_printf(&meta,
            "{\"generator\":\"stitch-synth\",\"model\":\"%s\","
            "\"params\":\"%" PRIu64 "\",\"seed\":\"%" PRIu64 "\","
            "\"lr\":\"%g\",\"wd\":\"%g\",\"signal\":\"%g\",\"step\":\"",
            m->preset, m->numel, o->seed, o->lr, o->wd, o->signal);
  ms->meta_step_at = meta.len;
  sb_printf(&meta, "00000000\"}");
  if (meta.oom) {
    free(meta.s);
    return -1;
  }
  ms->meta = meta.s;

  sbuf h = {0};
  sb_printf(&h, "{\"__metadata__\":");
  ms->step_at = 8 + h.len + ms->meta_step_at;
  sb_printf(&h, "%s", ms->meta);
  for (size_t i = 0; i < m->count; i++) {
    const synth_tensor *t = &m->t[i];
    uint64_t b = 4 * t->offset, e = b + 4 * t->numel;
    if (t->ndim == 1)
      sb_printf(&h, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%" PRIu64 "],"
                    "\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                t->name, t->shape[0], b, e);
    else
      sb_printf(&h, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%" PRIu64
                    ",%" PRIu64 "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                t->name, t->shape[0], t->shape[1], b, e);
  }
  sb_printf(&h, "}");
  while (!h.oom && h.len % 8 != 0) /* data 8-aligned, as the writer does */
    sb_printf(&h, " ");
  if (h.oom) {
    free(h.s);
    return -1;
  }
  ms->data_start = 8 + h.len;
  ms->len = ms->data_start + 4 * m->numel;
  void *p = NULL;
  if (posix_memalign(&p, 4096, ms->len) != 0) {
    free(h.s);
    return -1;
  }
  ms->buf = p;
  for (int i = 0; i < 8; i++)
    ms->buf[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
  memcpy(ms->buf + 8, h.s, h.len);
  free(h.s);
  ms->w = (float *)(ms->buf + ms->data_start);
  return 0;
}

static void masters_set_step(masters *ms, uint64_t step) {
  char digits[16];
  snprintf(digits, sizeof(digits), "%08" PRIu64, step % 100000000);
  memcpy(ms->buf + ms->step_at, digits, 8);
  memcpy(ms->meta + ms->meta_step_at, digits, 8);
}

static void masters_free(masters *ms) {
  free(ms->buf);
  free(ms->meta);
}

/* Writes the masters through the library's crash-safe writer. */
static int write_f32(const masters *ms, const stitch_st *st, const char *path,
                     stitch_diag *d) {
  stitch_st_writer *w = NULL;
  int rc = stitch_st_writer_new(path, &w, d);
  if (rc == 0)
    rc = stitch_st_writer_set_metadata(w, ms->meta, d);
  for (size_t i = 0; rc == 0 && i < stitch_st_count(st); i++) {
    const stitch_tensor *t = stitch_st_tensor(st, i);
    rc = stitch_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, d);
  }
  if (rc == 0)
    rc = stitch_st_writer_map(w, d);
  for (size_t i = 0; rc == 0 && i < stitch_st_count(st); i++) {
    const stitch_tensor *t = stitch_st_tensor(st, i);
    memcpy(stitch_st_writer_data(w, i), t->data, t->nbytes);
  }
  if (rc == 0)
    rc = stitch_st_writer_commit(w, d);
  stitch_st_writer_free(w);
  return rc;
}

/* ---- change counting ------------------------------------------------------- */

typedef struct change {
  uint64_t values, values_changed, bytes, bytes_changed;
} change;

static uint64_t load64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* Values are elements of the tensor's dtype; a U8 tensor is packed nvfp4 in
 * a view, so each nibble counts as a value. */
static void count_tensor(const stitch_tensor *a, const stitch_tensor *b,
                         change *c) {
  size_t es = stitch_dtype_size(b->dtype);
  int nib = b->dtype == STITCH_DT_U8;
  uint64_t n = b->nbytes;
  c->bytes += n;
  c->values += nib ? 2 * n : n / es;
  if (a == NULL || a->nbytes != n || a->dtype != b->dtype) {
    c->bytes_changed += n;
    c->values_changed += nib ? 2 * n : n / es;
    return;
  }
  const uint8_t *x = a->data, *y = b->data;
  uint64_t i = 0;
  for (;;) {
    while (i + 8 <= n && load64(x + i) == load64(y + i)) /* fast skip */
      i += 8;
    if (i >= n)
      break;
    uint64_t end = i + 8 < n ? i + 8 : n; /* at most 8 differing bytes */
    for (; i < end; i += es) {
      int diff = 0;
      for (size_t k = 0; k < es; k++) {
        uint8_t bx = x[i + k], by = y[i + k];
        c->bytes_changed += bx != by;
        diff |= bx != by;
        if (nib)
          c->values_changed +=
              (((bx ^ by) & 0x0f) != 0) + (((bx ^ by) & 0xf0) != 0);
      }
      if (!nib)
        c->values_changed += diff;
    }
  }
}

static void count_changes(const stitch_st *prev, const stitch_st *cur,
                          change *c) {
  memset(c, 0, sizeof(*c));
  for (size_t i = 0; i < stitch_st_count(cur); i++) {
    const stitch_tensor *b = stitch_st_tensor(cur, i);
    const stitch_tensor *a = stitch_st_tensor(prev, i);
    if (a == NULL || strcmp(a->name, b->name) != 0)
      a = stitch_st_find(prev, b->name);
    count_tensor(a, b, c);
  }
}

/* ---- the run --------------------------------------------------------------- */

typedef struct job {
  synth_adam *adam;
  const synth_model *model;
  float *w;
  uint64_t t;
  unsigned part, nparts;
  synth_step_stats st;
} job;

static void *run_job(void *arg) {
  job *j = arg;
  synth_adam_step(j->adam, j->model, j->w, j->t, j->part, j->nparts, &j->st);
  return NULL;
}

/* Threads split each tensor's rows; the result is the same for any count. */
static void adam_step(synth_adam *a, const synth_model *m, float *w,
                      uint64_t t, unsigned threads, synth_step_stats *st) {
  job jobs[MAX_THREADS];
  pthread_t tid[MAX_THREADS];
  int started[MAX_THREADS] = {0};
  for (unsigned k = 0; k < threads; k++)
    jobs[k] = (job){a, m, w, t, k, threads, {0, 0}};
  for (unsigned k = 1; k < threads; k++)
    started[k] = pthread_create(&tid[k], NULL, run_job, &jobs[k]) == 0;
  run_job(&jobs[0]);
  for (unsigned k = 1; k < threads; k++)
    if (started[k])
      pthread_join(tid[k], NULL);
    else
      run_job(&jobs[k]); /* could not start a thread: do its part here */
  memset(st, 0, sizeof(*st));
  for (unsigned k = 0; k < threads; k++) {
    st->bf16_changed += jobs[k].st.bf16_changed;
    st->abs_update += jobs[k].st.abs_update;
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double pct(uint64_t a, uint64_t b) {
  return b ? 100.0 * (double)a / (double)b : 0;
}

typedef struct run {
  opts o;
  synth_model model;
  synth_adam adam;
  masters ms;
  stitch_st *mst;  /* parse of ms.buf */
  stitch_st *prev; /* the previous step's view */
  int is_f32;
  stitch_view_opts vopts;
  /* Sums over steps 2..N (step 1 is Adam's sign step, an outlier). */
  double view_changed, view_bytes_changed, bf16_changed;
  uint64_t later_steps;
} run;

/* Writes step STEP's view (and masters); leaves it open in r->prev. */
static int write_step(run *r, uint64_t step, const synth_step_stats *ss,
                      double t0, double t_adam) {
  stitch_diag d = {{0}};
  masters_set_step(&r->ms, step);
  stitch_st_free(r->mst);
  r->mst = NULL;
  int rc = stitch_st_parse(r->ms.buf, r->ms.len, &r->mst, &d);
  if (rc != 0)
    return fail("masters: %s", d.msg);
  if (r->o.masters) {
    char *mp = step_path(r->o.out, "masters", step);
    rc = mp ? write_f32(&r->ms, r->mst, mp, &d) : STITCH_ENOMEM;
    free(mp);
    if (rc != 0)
      return fail("%s", d.msg[0] ? d.msg : stitch_strerror(rc));
  }
  char *vp = step_path(r->o.out, "step", step);
  if (vp == NULL)
    return fail("out of memory");
  stitch_view_stats vs = {0};
  if (r->is_f32)
    rc = write_f32(&r->ms, r->mst, vp, &d);
  else
    rc = stitch_view_build(r->mst, r->prev, &r->vopts, vp, &vs, &d);
  if (rc != 0) {
    free(vp);
    return fail("step %" PRIu64 ": %s", step,
                d.msg[0] ? d.msg : stitch_strerror(rc));
  }
  stitch_st *cur = NULL;
  rc = stitch_st_open(vp, &cur, &d);
  free(vp);
  if (rc != 0)
    return fail("%s", d.msg);
  change c = {0};
  if (r->prev != NULL)
    count_changes(r->prev, cur, &c);
  stitch_st_free(r->prev);
  r->prev = cur;
  if (step >= 2) {
    r->view_changed += pct(c.values_changed, c.values);
    r->view_bytes_changed += pct(c.bytes_changed, c.bytes);
    r->bf16_changed += pct(ss->bf16_changed, r->model.numel);
    r->later_steps++;
  }

  if (!r->o.quiet) {
    double dt = now_s() - t0;
    if (step == 0) {
      fprintf(stderr, PROG ": step 0/%" PRIu64 " %.2fs: initial weights\n",
              r->o.steps, dt);
    } else {
      fprintf(stderr,
              PROG ": step %" PRIu64 "/%" PRIu64 " %.2fs (adam %.2fs): "
              "%.3f%% of values changed (%.3f%% of bytes); "
              "masters->bf16 %.3f%%; mean |dw| %.2e",
              step, r->o.steps, dt, t_adam, pct(c.values_changed, c.values),
              pct(c.bytes_changed, c.bytes),
              pct(ss->bf16_changed, r->model.numel),
              ss->abs_update / (double)r->model.numel);
      if (vs.scale_blocks)
        fprintf(stderr, "; scales changed %" PRIu64 "/%" PRIu64,
                vs.scales_changed, vs.scale_blocks);
      fputc('\n', stderr);
    }
  }
  return 0;
}

static void print_model(FILE *f, const synth_model *m, const opts *o) {
  fprintf(f,
          PROG ": model %s: %" PRIu64 " params, hidden %" PRIu64
          ", layers %" PRIu64 ", ffn %" PRIu64 ", vocab %" PRIu64
          ", heads %" PRIu64 "/%" PRIu64 ", %zu tensors; view %s, lr %g, "
          "seed %" PRIu64 "\n",
          m->preset, m->numel, m->hidden, m->layers, m->ffn, m->vocab,
          m->heads, m->kv_heads, m->count, o->view, o->lr, o->seed);
}

static int run_all(run *r) {
  const opts *o = &r->o;
  char err[256];
  if (synth_model_plan(&r->model, o->model, o->params, o->seed, err,
                       sizeof(err)) != 0)
    return fail("%s", err);
  const synth_model *m = &r->model;
  if (o->plan) {
    print_model(stdout, m, o);
    return 0;
  }

  double gib = 12.0 * (double)m->numel / (1u << 30);
  { /* calloc succeeds lazily under overcommit; fail now, not at step 3 */
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    double have = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
    if (have > 0 && 12.0 * (double)m->numel > have)
      return fail("%" PRIu64 " params need %.1f GiB of optimizer state; this "
                  "machine has %.1f GiB",
                  m->numel, gib, have / (1u << 30));
  }

  int e = make_dirs(o->out);
  if (e != 0)
    return fail("cannot create %s: %s", o->out, strerror(e));
  { /* fail on an unwritable DIR before allocating gigabytes */
    stitch_diag d = {{0}};
    stitch_st_writer *w = NULL;
    char *p = step_path(o->out, "step", 0);
    int rc = p ? stitch_st_writer_new(p, &w, &d) : STITCH_ENOMEM;
    stitch_st_writer_free(w);
    free(p);
    if (rc != 0)
      return fail("%s", d.msg[0] ? d.msg : stitch_strerror(rc));
  }

  r->is_f32 = strcmp(o->view, "f32") == 0;
  if (!r->is_f32) {
    stitch_view_kind_parse(o->view, &r->vopts.kind); /* checked by parse_args */
    r->vopts.fp8_block = o->fp8_block;
  }

  if (masters_new(&r->ms, m, o) != 0 || synth_model_grad_init(&r->model,
                                                              o->seed) != 0)
    return fail("out of memory (%" PRIu64 " params need %.1f GiB)", m->numel,
                gib);
  r->adam = (synth_adam){.lr = (float)o->lr, .beta1 = 0.9f, .beta2 = 0.999f,
                         .eps = 1e-8f, .wd = (float)o->wd,
                         .signal = (float)o->signal, .seed = o->seed};
  r->adam.m = calloc(m->numel, sizeof(float));
  r->adam.v = calloc(m->numel, sizeof(float));
  if (r->adam.m == NULL || r->adam.v == NULL)
    return fail("out of memory (%" PRIu64 " params need %.1f GiB)", m->numel,
                gib);
  synth_qtable_normal(&r->adam.normal);
  synth_qtable_heavy(&r->adam.heavy);

  if (!o->quiet)
    print_model(stderr, m, o);

  double t0 = now_s();
  synth_model_init_weights(m, o->seed, r->ms.w);
  synth_step_stats ss = {0, 0};
  int rc = write_step(r, 0, &ss, t0, 0);
  for (uint64_t t = 1; rc == 0 && t <= o->steps; t++) {
    t0 = now_s();
    adam_step(&r->adam, m, r->ms.w, t, o->threads, &ss);
    double t_adam = now_s() - t0;
    rc = write_step(r, t, &ss, t0, t_adam);
  }
  if (rc == 0 && !o->quiet && r->later_steps > 0) {
    double n = (double)r->later_steps;
    fprintf(stderr,
            PROG ": done: mean over steps 2..%" PRIu64 ": %s view %.3f%% of "
            "values changed (%.3f%% of bytes); masters->bf16 %.3f%%\n",
            o->steps, o->view, r->view_changed / n, r->view_bytes_changed / n,
            r->bf16_changed / n);
  }
  return rc;
}

int main(int argc, char **argv) {
  run r;
  memset(&r, 0, sizeof(r));
  int help;
  int rc = parse_args(argc, argv, &r.o, &help);
  if (rc != 0)
    return rc;
  if (help) {
    fputs(HELP, stdout);
    return 0;
  }
  rc = run_all(&r);
  stitch_st_free(r.prev);
  stitch_st_free(r.mst);
  masters_free(&r.ms);
  free(r.adam.m);
  free(r.adam.v);
  synth_model_free(&r.model);
  return rc;
}
