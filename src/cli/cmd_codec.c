/* cmd_codec.c: stitch delta | apply | inspect | digest. */
#define _POSIX_C_SOURCE 200809L
#include "cli/cli.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static void print_stats_line(const stitch_delta_stats *s) {
  double bound = s->bound_bits / 8.0;
  double dens = s->symbols ? 100.0 * (double)s->changed / (double)s->symbols : 0;
  printf("density %.4f%%  delta %llu B  bound %.0f B (x%.3f)  "
         "int32+value %llu B (%.1fx smaller)  full %llu B (%.1fx smaller)\n",
         dens, (unsigned long long)s->delta_bytes, bound,
         bound > 0 ? (double)s->delta_bytes / bound : 0.0,
         (unsigned long long)s->idxval_bytes,
         s->delta_bytes ? (double)s->idxval_bytes / (double)s->delta_bytes : 0,
         (unsigned long long)s->result_bytes,
         s->delta_bytes ? (double)s->result_bytes / (double)s->delta_bytes : 0);
}

static json_t *tensor_json(const stitch_delta_tensor *t, int with_bound) {
  json_t *o = json_object(), *sh = json_array(), *bc = json_object();
  json_object_set_new(o, "name", json_string(t->name));
  json_object_set_new(o, "dtype", json_string(stitch_dtype_name(t->dtype)));
  for (int k = 0; k < t->ndim; k++)
    json_array_append_new(sh, json_integer((json_int_t)t->shape[k]));
  json_object_set_new(o, "shape", sh);
  json_object_set_new(o, "new", json_boolean(t->is_new));
  json_object_set_new(o, "symbol_bits", json_integer(t->sym_bits));
  json_object_set_new(o, "symbols", json_integer((json_int_t)t->symbols));
  json_object_set_new(o, "changed", json_integer((json_int_t)t->changed));
  json_object_set_new(o, "density",
                      json_real(t->symbols ? (double)t->changed /
                                                 (double)t->symbols
                                           : 0.0));
  json_object_set_new(o, "encoded_bytes",
                      json_integer((json_int_t)t->encoded));
  for (int c = 0; c < STITCH_CODING_COUNT_; c++)
    if (t->blocks_by_coding[c])
      json_object_set_new(bc, stitch_coding_name(c),
                          json_integer(t->blocks_by_coding[c]));
  json_object_set_new(o, "blocks", bc);
  if (with_bound) {
    json_object_set_new(o, "bound_bytes", json_real(t->bound_bits / 8.0));
    json_object_set_new(o, "int32_value_bytes",
                        json_integer((json_int_t)t->idxval_bytes));
  }
  return o;
}

/* The coding a person would call it: the one coding used, or "mixed". */
static const char *coding_summary(const stitch_delta_tensor *t) {
  int used = -1;
  for (int c = 0; c < STITCH_CODING_COUNT_; c++)
    if (t->blocks_by_coding[c] && c != STITCH_CODING_SAME) {
      if (used >= 0)
        return "mixed";
      used = c;
    }
  return used < 0 ? "same" : stitch_coding_name(used);
}

/* A progress line on a terminal, redrawn at most every percent. */
static void show_progress(void *arg, uint64_t done, uint64_t total) {
  int *last = arg;
  int pct = total ? (int)(100 * done / total) : 100;
  if (pct == *last)
    return;
  *last = pct;
  fprintf(stderr, "\rstitch: delta: %3d%% of %.1f MB", pct, (double)total / 1e6);
  if (done == total)
    fputs("\r\033[K", stderr);
}

int cmd_delta(int argc, char **argv) {
  const char *pos[2];
  flag fl[] = {{"-o", 1, NULL},     {"--stats", 0, NULL}, {"--json", 0, NULL},
               {"--block-log2", 1, NULL}, {"--level", 1, NULL},
               {"--small", 0, NULL}, {"--fastest", 0, NULL},
               {"--threads", 1, NULL}, {"--format", 1, NULL},
               {"--listed", 0, NULL}};
  int n = cli_parse_args(argc, argv, pos, 2, fl, 10);
  if (n < 0)
    return 2;
  if (n != 2 || fl[0].value == NULL)
    return cli_usage_error("stitch delta OLD NEW -o OUT [--stats] [--json] "
                           "[--block-log2 N] [--level L] [--small | --fastest] "
                           "[--threads N] [--format 1|2|3|4] [--listed]");
  if (fl[5].value && fl[6].value)
    return cli_usage_error("stitch delta: --small and --fastest do not go "
                           "together");
  stitch_delta_opts o = {0};
  /* The node that applies a delta holds its base: name its tensors by
   * the base's (formats 3 and 4; format 4 names the base itself by a
   * prefix of its digest), unless --listed asks for a delta that parses
   * on its own (proto/delta.md "Index, format 3", "Index, format 4"). */
  o.table_as_base = fl[9].value == NULL;
  uint64_t v;
  if (fl[3].value) {
    if (cli_parse_u64(fl[3].value, "--block-log2", 255, &v))
      return 2;
    o.block_log2 = (uint32_t)v; /* the encoder names the range */
  }
  if (fl[7].value) { /* 0 or absent: every CPU */
    if (cli_parse_u64(fl[7].value, "--threads", 1024, &v))
      return 2;
    o.threads = (unsigned)v;
  }
  if (fl[8].value) { /* 1 to 3: for readers that predate format 4 */
    if (cli_parse_u64(fl[8].value, "--format", 255, &v))
      return 2;
    o.format = (unsigned)v; /* the encoder names the range */
  }
  if (fl[4].value) { /* negative levels are zstd's fast ones */
    char *end;
    long lv = strtol(fl[4].value, &end, 10);
    if (fl[4].value[0] == 0 || *end != 0 || lv < INT_MIN || lv > INT_MAX)
      return cli_usage_error("--level: '%s' is not a number", fl[4].value);
    o.zstd_level = (int)lv; /* the encoder names the range */
  }
  if (fl[5].value) /* SPARSE everywhere: a few % smaller, slower */
    o.sparse_mode = STITCH_SPARSE_SMALL;
  if (fl[6].value) /* RANS: at about the memoryless bound, fastest */
    o.sparse_mode = STITCH_SPARSE_FASTEST;
  int last_pct = -1;
  if (isatty(2)) {
    o.progress = show_progress;
    o.progress_arg = &last_pct;
  }
  stitch_diag d = {{0}};
  stitch_st *a = NULL, *b = NULL;
  int rc = stitch_st_open(pos[0], &a, &d);
  if (rc == 0)
    rc = stitch_st_open(pos[1], &b, &d);
  stitch_delta_stats s = {0};
  int want = fl[1].value || fl[2].value;
  if (rc == 0)
    rc = stitch_delta_encode_file(a, b, &o, fl[0].value, want ? &s : NULL, &d);
  if (rc == 0 && fl[2].value) {
    json_t *root = json_object(), *ts = json_array();
    json_object_set_new(root, "symbols", json_integer((json_int_t)s.symbols));
    json_object_set_new(root, "changed", json_integer((json_int_t)s.changed));
    json_object_set_new(root, "delta_bytes",
                        json_integer((json_int_t)s.delta_bytes));
    json_object_set_new(root, "bound_bytes", json_real(s.bound_bits / 8.0));
    json_object_set_new(root, "int32_value_bytes",
                        json_integer((json_int_t)s.idxval_bytes));
    json_object_set_new(root, "full_bytes",
                        json_integer((json_int_t)s.result_bytes));
    for (size_t i = 0; i < s.tensors; i++)
      json_array_append_new(ts, tensor_json(&s.t[i], 1));
    json_object_set_new(root, "tensors", ts);
    json_dumpf(root, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    putchar('\n');
    json_decref(root);
  } else if (rc == 0 && fl[1].value) {
    print_stats_line(&s);
  }
  stitch_delta_stats_free(&s);
  stitch_st_free(a);
  stitch_st_free(b);
  return rc == 0 ? 0 : cli_fail(rc, &d);
}

int cmd_apply(int argc, char **argv) {
  const char *pos[2];
  flag fl[] = {{"-o", 1, NULL}};
  int n = cli_parse_args(argc, argv, pos, 2, fl, 1);
  if (n < 0)
    return 2;
  if (n != 2 || fl[0].value == NULL)
    return cli_usage_error("stitch apply OLD DELTA -o OUT");
  stitch_diag d = {{0}};
  stitch_st *a = NULL;
  stitch_delta *dl = NULL;
  int last = -1;
  stitch_delta_apply_opts o = {0};
  if (isatty(2)) {
    o.progress = cli_progress;
    o.progress_arg = &last;
  }
  int rc = stitch_st_open(pos[0], &a, &d);
  if (rc == 0)
    rc = stitch_delta_open_ex(pos[1], a, &dl, &d);
  if (rc == 0)
    rc = stitch_delta_apply_file_ex(a, dl, fl[0].value, &o, &d);
  stitch_delta_free(dl);
  stitch_st_free(a);
  return rc == 0 ? 0 : cli_fail(rc, &d);
}

/* Peeks at the magic without blocking on a FIFO; anything that is not a
 * readable regular file is left to the checkpoint reader to report. A
 * delta starts "STITCHDL" (formats 1 to 3) or "STDL" (format 4 and
 * later: proto/delta.md). */
static int is_delta_file(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  char m[8] = {0};
  ssize_t got = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)
                    ? read(fd, m, 8)
                    : -1;
  int yes = (got == 8 && memcmp(m, "STITCHDL", 8) == 0) ||
            (got >= 4 && memcmp(m, "STDL", 4) == 0);
  if (fd >= 0)
    close(fd);
  return yes;
}

static uint64_t fixed_of(const stitch_delta_tensor_bytes *b) {
  return b->table + b->blocks + b->checksums + b->params;
}

static json_t *bytes_json(const stitch_delta_tensor_bytes *b) {
  json_t *o = json_object();
  json_object_set_new(o, "table", json_integer((json_int_t)b->table));
  json_object_set_new(o, "blocks", json_integer((json_int_t)b->blocks));
  json_object_set_new(o, "checksums", json_integer((json_int_t)b->checksums));
  json_object_set_new(o, "params", json_integer((json_int_t)b->params));
  json_object_set_new(o, "fixed", json_integer((json_int_t)fixed_of(b)));
  json_object_set_new(o, "payload", json_integer((json_int_t)b->payload));
  return o;
}

/* Where the file's bytes go (stitch_delta_bytes_of): the header, the
 * index as stored (its raw parts, less what zstd saves), and the payloads
 * (block parameters, and the rest coding the changes); they add up to
 * the file. Fixed: all but the coded changes. */
static void print_bytes(const stitch_delta_bytes *a, size_t n) {
  const stitch_delta_tensor_bytes *t = &a->tensors;
  uint64_t raw = a->index_head + t->table + t->blocks + t->checksums;
  long long stored = (long long)raw + a->index_packing;
  printf("bytes  file %llu = header %llu + index %lld + payloads %llu\n"
         "       index %lld = %llu raw (head %llu; %zu tensors: table %llu, "
         "block entries %llu, checksums %llu) %+lld by zstd\n"
         "       payloads %llu = block parameters %llu + coded changes %llu\n",
         (unsigned long long)a->file, (unsigned long long)a->header, stored,
         (unsigned long long)(t->params + t->payload), stored,
         (unsigned long long)raw, (unsigned long long)a->index_head, n,
         (unsigned long long)t->table, (unsigned long long)t->blocks,
         (unsigned long long)t->checksums, (long long)a->index_packing,
         (unsigned long long)(t->params + t->payload),
         (unsigned long long)t->params, (unsigned long long)t->payload);
  long long fixed = (long long)a->header + stored + (long long)t->params;
  printf("fixed  %lld B (%.1f%% of the file), coded changes %llu B\n", fixed,
         a->file ? 100.0 * (double)fixed / (double)a->file : 0.0,
         (unsigned long long)t->payload);
}

/* BASE_PATH, if not NULL: the base, which a delta that names its tensors
 * by the base's needs. */
static int inspect_delta(const char *path, const char *base_path,
                         int as_json) {
  stitch_diag d = {{0}};
  stitch_delta *dl = NULL;
  stitch_st *base = NULL;
  int rc = base_path ? stitch_st_open(base_path, &base, &d) : 0;
  if (rc == 0)
    rc = stitch_delta_open_ex(path, base, &dl, &d);
  stitch_st_free(base); /* the parse copied what it took */
  if (rc == STITCH_EINVAL && base_path == NULL) { /* say how, on one line */
    char why[sizeof(d.msg)];
    snprintf(why, sizeof(why), "%s", d.msg);
    snprintf(d.msg, sizeof(d.msg), "%.200s (stitch inspect FILE --base BASE)",
             why);
  }
  if (rc != 0)
    return cli_fail(rc, &d);
  char bh[65], rh[65];
  stitch_digest_hex(stitch_delta_base_digest(dl), bh);
  /* Format 4 may name its base by a prefix of its digest: print that. */
  size_t blen = stitch_delta_base_digest_len(dl);
  bh[2 * blen] = 0;
  stitch_digest_hex(stitch_delta_result_digest(dl), rh);
  size_t n = stitch_delta_count(dl);
  stitch_delta_bytes all;
  stitch_delta_tensor_bytes *per = calloc(n ? n : 1, sizeof(*per));
  if (per == NULL) {
    stitch_delta_free(dl);
    return cli_fail(STITCH_ENOMEM, NULL);
  }
  stitch_delta_bytes_of(dl, &all, per);
  if (as_json) {
    json_t *root = json_object(), *ts = json_array(), *by = json_object();
    json_object_set_new(root, "kind", json_string("delta"));
    json_object_set_new(root, "base_digest", json_string(bh));
    json_object_set_new(root, "base_digest_bytes", json_integer((json_int_t)blen));
    json_object_set_new(root, "result_digest", json_string(rh));
    json_object_set_new(root, "format", json_integer(all.format));
    json_object_set_new(by, "file", json_integer((json_int_t)all.file));
    json_object_set_new(by, "header", json_integer((json_int_t)all.header));
    json_object_set_new(by, "index_head",
                        json_integer((json_int_t)all.index_head));
    json_object_set_new(by, "index_packing",
                        json_integer((json_int_t)all.index_packing));
    json_object_set_new(by, "tensors", bytes_json(&all.tensors));
    json_object_set_new(root, "bytes", by);
    for (size_t i = 0; i < n; i++) {
      json_t *o = tensor_json(stitch_delta_tensor_at(dl, i), 0);
      json_object_set_new(o, "bytes", bytes_json(&per[i]));
      json_array_append_new(ts, o);
    }
    json_object_set_new(root, "tensors", ts);
    json_dumpf(root, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    putchar('\n');
    json_decref(root);
  } else {
    printf("delta  format %u\n       base %s%s\n       result %s\n",
           all.format, bh, blen < 32 ? " (prefix)" : "", rh);
    printf("%-48s %-8s %12s %10s %9s %12s %8s %10s  %s\n", "tensor", "dtype",
           "symbols", "changed", "density", "encoded", "fixed", "payload",
           "coding");
    uint64_t sy = 0, ch = 0, en = 0;
    for (size_t i = 0; i < n; i++) {
      const stitch_delta_tensor *t = stitch_delta_tensor_at(dl, i);
      printf("%-48s %-8s %12llu %10llu %8.4f%% %12llu %8llu %10llu  %s%s\n",
             t->name, stitch_dtype_name(t->dtype),
             (unsigned long long)t->symbols, (unsigned long long)t->changed,
             t->symbols ? 100.0 * (double)t->changed / (double)t->symbols : 0,
             (unsigned long long)t->encoded,
             (unsigned long long)fixed_of(&per[i]),
             (unsigned long long)per[i].payload, coding_summary(t),
             t->sym_bits == 4 ? " (nibbles)" : "");
      sy += t->symbols;
      ch += t->changed;
      en += t->encoded;
    }
    printf("%-48s %-8s %12llu %10llu %8.4f%% %12llu %8llu %10llu\n", "total",
           "", (unsigned long long)sy, (unsigned long long)ch,
           sy ? 100.0 * (double)ch / (double)sy : 0, (unsigned long long)en,
           (unsigned long long)fixed_of(&all.tensors),
           (unsigned long long)all.tensors.payload);
    print_bytes(&all, n);
  }
  free(per);
  stitch_delta_free(dl);
  return 0;
}

static int inspect_checkpoint(const char *path, int as_json) {
  stitch_diag d = {{0}};
  stitch_st *st;
  int rc = stitch_st_open(path, &st, &d);
  if (rc != 0)
    return cli_fail(rc, &d);
  size_t n = stitch_st_count(st);
  if (as_json) {
    json_t *root = json_object(), *ts = json_array();
    json_object_set_new(root, "kind", json_string("checkpoint"));
    const char *m = stitch_st_metadata(st);
    if (m != NULL)
      json_object_set_new(root, "metadata", json_loads(m, 0, NULL));
    for (size_t i = 0; i < n; i++) {
      const stitch_tensor *t = stitch_st_tensor(st, i);
      json_t *o = json_object(), *sh = json_array();
      json_object_set_new(o, "name", json_string(t->name));
      json_object_set_new(o, "dtype", json_string(stitch_dtype_name(t->dtype)));
      for (int k = 0; k < t->ndim; k++)
        json_array_append_new(sh, json_integer((json_int_t)t->shape[k]));
      json_object_set_new(o, "shape", sh);
      json_object_set_new(o, "bytes", json_integer((json_int_t)t->nbytes));
      json_array_append_new(ts, o);
    }
    json_object_set_new(root, "tensors", ts);
    json_dumpf(root, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    putchar('\n');
    json_decref(root);
  } else {
    uint64_t total = 0;
    printf("%-48s %-8s %14s  %s\n", "tensor", "dtype", "bytes", "shape");
    for (size_t i = 0; i < n; i++) {
      const stitch_tensor *t = stitch_st_tensor(st, i);
      printf("%-48s %-8s %14llu  [", t->name, stitch_dtype_name(t->dtype),
             (unsigned long long)t->nbytes);
      for (int k = 0; k < t->ndim; k++)
        printf("%s%llu", k ? ", " : "", (unsigned long long)t->shape[k]);
      printf("]\n");
      total += t->nbytes;
    }
    printf("%zu tensors, %llu bytes of data\n", n, (unsigned long long)total);
  }
  stitch_st_free(st);
  return 0;
}

int cmd_inspect(int argc, char **argv) {
  const char *pos[1];
  flag fl[] = {{"--json", 0, NULL}, {"--store", 1, NULL}, {"--pub", 1, NULL},
               {"--base", 1, NULL}};
  int n = cli_parse_args(argc, argv, pos, 1, fl, 4);
  if (n < 0)
    return 2;
  if (n != 1 || (fl[1].value == NULL) != (fl[2].value == NULL))
    return cli_usage_error("stitch inspect FILE [--base BASE] [--json] | "
                           "stitch inspect --store DIR --pub PREFIX.pub "
                           "VERSION [--json]");
  int js = fl[0].value != NULL;
  if (fl[1].value != NULL)
    return cli_inspect_version(fl[1].value, fl[2].value, pos[0], js);
  return is_delta_file(pos[0]) ? inspect_delta(pos[0], fl[3].value, js)
                               : inspect_checkpoint(pos[0], js);
}

int cmd_digest(int argc, char **argv) {
  const char *pos[1];
  flag fl[] = {{"--tensors", 0, NULL}};
  int n = cli_parse_args(argc, argv, pos, 1, fl, 1);
  if (n < 0)
    return 2;
  if (n != 1)
    return cli_usage_error("stitch digest FILE [--tensors]");
  stitch_diag d = {{0}};
  stitch_st *st;
  int rc = stitch_st_open(pos[0], &st, &d);
  if (rc != 0)
    return cli_fail(rc, &d);
  size_t cnt = stitch_st_count(st);
  stitch_digest all, *per = calloc(cnt ? cnt : 1, sizeof(*per));
  rc = per ? stitch_view_digest(st, &all, per) : STITCH_ENOMEM;
  if (rc == 0) {
    char hx[65];
    stitch_digest_hex(&all, hx);
    printf("%s\n", hx);
    for (size_t i = 0; fl[0].value && i < cnt; i++) {
      stitch_digest_hex(&per[i], hx);
      printf("%s  %s\n", hx, stitch_st_tensor(st, i)->name);
    }
  }
  free(per);
  stitch_st_free(st);
  return rc == 0 ? 0 : cli_fail(rc, &d);
}
