/* fuzz_delta.c: stitch_delta_parse_ex, stitch_delta_apply_tensor,
 * stitch_delta_apply_all and stitch_delta_apply_file on arbitrary bytes.
 *
 * Three passes per input:
 *  1. the bytes as given: parse, and if they parse, apply every tensor to a
 *     zero-filled base of the listed size (block checksums as stored), one
 *     by one with stitch_delta_apply_tensor and all at once, on 1 to 4
 *     threads, with stitch_delta_apply_all: the two must agree;
 *  2. when the bytes start with the delta magic, a copy whose header and
 *     index checksums are recomputed (fuzz_common.h), parsed, its block
 *     checksums (and sparse change counts) forged in the handle, and applied
 *     as in pass 1 to a zero base and to a patterned one. This is how
 *     mutations get past XXH3 and into the index parser and the sparse and
 *     dense decoders;
 *  3. when pass 2 applied every tensor of a small delta with a raw index:
 *     the delta made fully consistent, as an attacker can (checksums are
 *     not MACs): a base checkpoint is built from its listed tensors (zero
 *     bytes), the base and result view digests are written into the index,
 *     and stitch_delta_apply_file runs for real. If it succeeds, its output
 *     must read back with stitch_st_open and hold exactly the tensors
 *     applied in memory; if it fails, the output must not exist.
 * Applying must return 0 or a STITCH_E* code; it must never crash, read
 * past the delta or write past the tensor. Bases are built only when the
 * listed tensors add up to at most FZ_MAX_BASE bytes. */
#define _DEFAULT_SOURCE
#include "fuzz/fuzz_common.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FZ_MAX_BASE (1u << 20)
#define FZ_MAX_FILE (64u << 10) /* pass 3 */

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "fuzz_delta: check failed: %s (line %d)\n", #c,          \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static void check_err(int rc, const stitch_diag *d) {
  CHECK(rc < 0 && strcmp(stitch_errname(rc), "EUNKNOWN") != 0);
  CHECK(memchr(d->msg, 0, sizeof(d->msg)) != NULL);
}

/* Walks the public view of a parsed delta. Returns the bytes a base needs. */
static uint64_t walk(const stitch_delta *dl) {
  size_t n = stitch_delta_count(dl);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(dl, i);
    CHECK(t != NULL && t->name != NULL && t->name[0] != 0);
    CHECK(stitch_dtype_size(t->dtype) > 0);
    CHECK(t->ndim >= 0 && t->ndim <= STITCH_MAX_DIMS);
    CHECK(t->sym_bits == 4 || t->sym_bits == 8 || t->sym_bits == 16 ||
          t->sym_bits == 32 || t->sym_bits == 64);
    CHECK(t->changed <= t->symbols);
    uint32_t sum = 0;
    for (int c = 0; c < STITCH_CODING_COUNT_; c++)
      sum += t->blocks_by_coding[c];
    CHECK(sum == t->blocks);
    total = total + t->nbytes < total ? UINT64_MAX : total + t->nbytes;
  }
  CHECK(stitch_delta_tensor_at(dl, n) == NULL);
  const char *m = stitch_delta_metadata(dl);
  if (m != NULL)
    CHECK(strlen(m) > 0);
  (void)stitch_delta_base_digest(dl);
  (void)stitch_delta_result_digest(dl);
  return total;
}

/* Applies every tensor one by one (stitch_delta_apply_tensor) and all at
 * once on THREADS threads (stitch_delta_apply_all), onto the same bases:
 * both must succeed or both fail, and agree on every byte when they
 * succeed. FORGE: forge each sparse block's change count first (pass 2). */
static void apply_both(stitch_delta *dl, int pattern, int forge,
                       unsigned threads) {
  size_t n = stitch_delta_count(dl);
  fz_rng r = {0x5eed};
  uint8_t **one = calloc(n ? n : 1, sizeof(*one));
  uint8_t **all = calloc(n ? n : 1, sizeof(*all));
  uint64_t *sizes = calloc(n ? n : 1, sizeof(*sizes));
  CHECK(one != NULL && all != NULL && sizes != NULL);
  int ok_one = 1;
  for (size_t i = 0; i < n; i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(dl, i);
    size_t nb = (size_t)t->nbytes;
    sizes[i] = t->nbytes;
    /* Exactly nbytes, so ASan catches a write one past the tensor. */
    one[i] = malloc(nb ? nb : 1);
    all[i] = malloc(nb ? nb : 1);
    CHECK(one[i] != NULL && all[i] != NULL);
    if (pattern)
      fz_fill(&r, one[i], nb);
    else
      memset(one[i], 0, nb);
    if (nb)
      memcpy(all[i], one[i], nb);
    if (forge)
      fz_delta_fix_changes(dl, i, one[i]);
    stitch_diag d = {{0}};
    int rc = stitch_delta_apply_tensor(dl, i, one[i], t->nbytes, &d);
    if (rc != 0) {
      check_err(rc, &d);
      ok_one = 0;
    }
    CHECK(stitch_delta_apply_tensor(dl, i, one[i], t->nbytes + 1, &d) ==
          STITCH_EMISMATCH);
  }
  stitch_diag d = {{0}};
  CHECK(stitch_delta_apply_tensor(dl, n, NULL, 0, &d) == STITCH_EINVAL);
  int rc = stitch_delta_apply_all(dl, all, sizes, threads, &d);
  if (rc != 0)
    check_err(rc, &d);
  if ((rc == 0) != ok_one)
    fprintf(stderr, "fuzz_delta: apply_all on %u threads: %s; one by one: %s\n",
            threads, rc ? d.msg : "ok", ok_one ? "ok" : "failed");
  CHECK((rc == 0) == ok_one);
  for (size_t i = 0; i < n && rc == 0; i++)
    CHECK(sizes[i] == 0 || memcmp(one[i], all[i], (size_t)sizes[i]) == 0);
  if (n > 0) { /* a wrong size is refused before anything is touched */
    sizes[n - 1]++;
    CHECK(stitch_delta_apply_all(dl, all, sizes, threads, &d) ==
          STITCH_EMISMATCH);
  }
  for (size_t i = 0; i < n; i++) {
    free(one[i]);
    free(all[i]);
  }
  free(one);
  free(all);
  free(sizes);
}

/* Where pass 3 writes: a directory made once per process (in /dev/shm
 * when there is one, so the fsyncs cost nothing). */
static char out_dir[256], out_file[300];

static void out_cleanup(void) {
  unlink(out_file);
  rmdir(out_dir);
}

static const char *out_path(void) {
  if (out_file[0] == 0) {
    struct stat st;
    const char *t = getenv("TMPDIR");
    snprintf(out_dir, sizeof(out_dir), "%s/stitch-fuzz-XXXXXX",
             stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm"
             : t && *t                                         ? t
                                                               : "/tmp");
    CHECK(mkdtemp(out_dir) != NULL);
    snprintf(out_file, sizeof(out_file), "%s/out.safetensors", out_dir);
    atexit(out_cleanup);
  }
  return out_file;
}

/* Pass 3 (see the top): BUF is the checksum-fixed copy, DL parsed from it
 * with its block sums forged. */
static void consistent_apply(uint8_t *buf, size_t len, stitch_delta *dl) {
  size_t n = stitch_delta_count(dl);
  uint64_t total = 0;
  size_t ix_at, dgl;
  int raw;
  if (!fz_delta_index_at(buf, len, &ix_at, &raw, &dgl) || !raw || n > 64)
    return;
  for (size_t i = 0; i < n && total <= FZ_MAX_FILE; i++)
    total += stitch_delta_tensor_at(dl, i)->nbytes; /* each < 2^60 */
  if (total > FZ_MAX_FILE)
    return;
  uint8_t *zeros = calloc(total ? (size_t)total : 1, 1);
  uint8_t *res = calloc(total ? (size_t)total : 1, 1);
  fz_tensor *bt = calloc(n ? n : 1, sizeof(*bt));
  stitch_digest *tdg = calloc(n ? n : 1, sizeof(*tdg));
  const char **names = calloc(n ? n : 1, sizeof(*names));
  CHECK(zeros && res && bt && tdg && names);
  size_t nb = 0, off = 0;
  int ok = 1;
  stitch_diag d = {{0}};
  for (size_t i = 0; i < n && ok; i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(dl, i);
    if (!t->is_new) {
      fz_tensor *b = &bt[nb++];
      b->name = t->name;
      b->dtype = t->dtype;
      b->ndim = t->ndim;
      memcpy(b->shape, t->shape, sizeof(b->shape));
      b->data = zeros + off;
    }
    ok = stitch_delta_apply_tensor(dl, i, res + off, t->nbytes, &d) == 0 &&
         stitch_tensor_digest(t->dtype, t->ndim, t->shape, res + off, t->nbytes,
                              &tdg[i]) == 0;
    names[i] = t->name;
    off += (size_t)t->nbytes;
  }
  size_t blen = 0;
  uint8_t *bbuf = ok ? fz_st_build(bt, nb, NULL, &blen) : NULL;
  stitch_st *base = NULL;
  stitch_digest bdg, rdg;
  stitch_delta *dl3 = NULL;
  if (bbuf != NULL && stitch_st_parse(bbuf, blen, &base, &d) == 0 &&
      stitch_view_digest(base, &bdg, NULL) == 0 &&
      stitch_view_digest_from(n, names, tdg, &rdg) == 0) {
    /* A raw index starts with the base and the result view digests (the
     * base's: a prefix in format 4, with the base's tensors). */
    memcpy(buf + ix_at, bdg.b, dgl);
    memcpy(buf + ix_at + dgl, rdg.b, 32);
    fz_delta_fix_sums(buf, len);
    /* A delta naming its base's tensors names this base's: the same. */
    CHECK(stitch_delta_parse_ex(buf, len, base, &dl3, &d) == 0);
    fz_delta_fix_blocks(dl3);
    for (size_t i = 0; i < n; i++)
      fz_delta_fix_changes(dl3, i, zeros);
    const char *path = out_path();
    int rc = stitch_delta_apply_file(base, dl3, path, &d);
    struct stat st;
    if (rc != 0) {
      check_err(rc, &d);
      CHECK(stat(path, &st) != 0); /* nothing left behind */
    } else {
      stitch_st *back = NULL;
      rc = stitch_st_open(path, &back, &d);
      if (rc != 0)
        fprintf(stderr, "fuzz_delta: apply_file output unreadable: %s\n",
                d.msg);
      CHECK(rc == 0);
      CHECK(stitch_st_count(back) == n);
      off = 0;
      for (size_t i = 0; i < n; i++) {
        const stitch_delta_tensor *t = stitch_delta_tensor_at(dl3, i);
        const stitch_tensor *g = stitch_st_find(back, t->name);
        CHECK(g != NULL && g->dtype == t->dtype && g->nbytes == t->nbytes);
        CHECK(t->nbytes == 0 ||
              memcmp(g->data, res + off, (size_t)t->nbytes) == 0);
        off += (size_t)t->nbytes;
      }
      stitch_st_free(back);
      CHECK(unlink(path) == 0);
      if (getenv("FUZZ_DELTA_VERBOSE"))
        fprintf(stderr, "    pass 3: apply_file wrote %zu tensors\n", n);
    }
    stitch_delta_free(dl3);
  }
  stitch_st_free(base);
  free(bbuf);
  free(names);
  free(tdg);
  free(bt);
  free(res);
  free(zeros);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* Pass 1: as given. A private copy, exactly sized, so reads past the
   * end are caught even when the caller's buffer is larger. */
  uint8_t *copy = malloc(size ? size : 1);
  CHECK(copy != NULL);
  if (size)
    memcpy(copy, data, size);
  stitch_delta *dl = NULL;
  stitch_diag d = {{0}};
  /* A format-3 delta may name its base's tensors: those parse against
   * the base the seeds were coded from (fuzz_common.h). */
  const stitch_st *tb = fz_table_base();
  CHECK(tb != NULL);
  int rc = stitch_delta_parse_ex(copy, size, tb, &dl, &d);
  if (rc != 0) {
    CHECK(dl == NULL);
    check_err(rc, &d);
  } else {
    if (walk(dl) <= FZ_MAX_BASE)
      apply_both(dl, 0, 0, 1 + (unsigned)(size % 4));
    stitch_delta_free(dl);
  }

  /* Pass 2: checksums recomputed, so mutations reach the parser proper. */
  if (fz_delta_fix_sums(copy, size)) {
    rc = stitch_delta_parse_ex(copy, size, tb, &dl, &d);
    if (rc != 0) {
      CHECK(dl == NULL);
      check_err(rc, &d);
    } else {
      uint64_t need = walk(dl);
      fz_delta_fix_blocks(dl);
      if (need <= FZ_MAX_BASE / 16)
        apply_both(dl, 1, 1, 2);
      if (need <= FZ_MAX_BASE) /* last: pass 3 needs the zero-base counts */
        apply_both(dl, 0, 1, 1 + (unsigned)(size % 4));
      consistent_apply(copy, size, dl);
      stitch_delta_free(dl);
    }
  }
  free(copy);
  return 0;
}
