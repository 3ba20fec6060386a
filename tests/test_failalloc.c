/* test_failalloc.c: allocation-failure torture (nghttp2's failmalloc test,
 * curl's torture mode). Each operation below runs once to count the
 * allocations libstitch makes in it, then again failing allocation N, for
 * N from 1 until a run completes without meeting its failure (failalloc.h
 * says how the hook reaches the library, and only the library):
 *
 *   publish      stitch_publish of an anchor into an empty store, and of a
 *                third version (a delta and a cumulative delta) on top of
 *                two;
 *   apply        stitch_delta_parse + stitch_delta_apply_file of a delta
 *                over an existing output file;
 *   pull         stitch_pull of a weights file from nothing, and from the
 *                first version in place (adopt, journal, apply);
 *   prepared     stitch_prepared_new of an engine's memory from nothing,
 *                and from the first version (then a commit);
 *   swarm        a seed and a node, two stitch_swarm cores in memory
 *                (swarm_net.h), exchanging three versions; only allocations
 *                made inside calls into the cores are counted.
 *
 * Each N runs single-shot (only allocation N fails) and, but for the
 * swarm, sticky (every allocation from N on fails).
 *
 * Every failing run must end in a negative STITCH_E* code (the swarm: a
 * dropped peer or a failed tick, after which it still converges), leave no
 * corrupt state (the store opens and verifies; the output or weights file
 * is the old version or the new, bit for bit, and names the version it
 * holds; no temporary or journal file is left), and leak nothing: the ASan
 * build runs LeakSanitizer after every run and names the N. A retry
 * without failures must then succeed and give the right bytes.
 *
 * Runtime: an operation whose clean run makes at most FA_EVERY allocations
 * fails each of them in turn. Above that (the swarm), N steps: every N up
 * to FA_EVERY / 4, then every stride-th, plus the first allocation made
 * from each call site (the hook records return addresses), so every site
 * fails at least once. STITCH_FAILALLOC_ALL=1 fails every N regardless;
 * STITCH_FAILALLOC_ONLY=name runs one operation, STITCH_FAILALLOC_N=k one
 * N of it, STITCH_FAILALLOC_STICKY=0 or 1 one kind. Today every operation
 * makes a few hundred allocations at most, so each fails them all: about
 * 10 s in all (fsyncs go to /dev/shm), 90 s under ASan. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "ckpt_util.h"
#include "failalloc.h"
#include "stitch/store.h"
#include "stitch/swarm.h"

#include <ftw.h>
#include <sys/stat.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define FA_LEAK_CHECK() __lsan_do_recoverable_leak_check()
#else
#define FA_LEAK_CHECK() 0
#endif

/* The swarm harness calls into the cores in many places; counting only
 * inside those calls keeps the harness's own use of library code (its
 * pipes are dbufs, its monitor a wire_reader) out of the torture. */
static int fa_out_(int rc) {
  fa_pause();
  return rc;
}
#define FA_IN_(call) (fa_resume(), fa_out_(call))
#define FA_IN_VOID_(call) (fa_resume(), (call), fa_pause())
#define stitch_swarm_peer_open(...) FA_IN_(stitch_swarm_peer_open(__VA_ARGS__))
#define stitch_swarm_peer_recv(...) FA_IN_(stitch_swarm_peer_recv(__VA_ARGS__))
#define stitch_swarm_peer_pending(...)                                        \
  FA_IN_VOID_(stitch_swarm_peer_pending(__VA_ARGS__))
#define stitch_swarm_peer_sent(...)                                           \
  FA_IN_VOID_(stitch_swarm_peer_sent(__VA_ARGS__))
#define stitch_swarm_peer_close(...)                                          \
  FA_IN_VOID_(stitch_swarm_peer_close(__VA_ARGS__))
#define stitch_swarm_tick(...) FA_IN_(stitch_swarm_tick(__VA_ARGS__))
/* Not stitch_swarm_drain: it runs the harness's operations (an apply
 * decodes with library code), and the calls they make into the core are
 * counted by the lines here; taking an action allocates nothing. */
#define stitch_swarm_add_peer_addr(...)                                       \
  FA_IN_(stitch_swarm_add_peer_addr(__VA_ARGS__))
#define stitch_swarm_add_manifest(...)                                        \
  FA_IN_(stitch_swarm_add_manifest(__VA_ARGS__))
#define stitch_swarm_applied(...) FA_IN_(stitch_swarm_applied(__VA_ARGS__))
#define stitch_swarm_apply_failed(...)                                        \
  FA_IN_(stitch_swarm_apply_failed(__VA_ARGS__))

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "swarm_net.h"
#pragma GCC diagnostic pop

#define FA_EVERY 1500
#define STEPS 3          /* trainer steps, versions 1..3 */
#define N_T 3            /* BF16 tensors of 32 x 256 */
#define T_ELEMS (32 * 256)
#define N_B 512          /* F32 elements of the last tensor */
#define CHUNK 8192

static char root[64];
static stitch_pubkey pk;
static stitch_seckey sk;
static uint8_t *step_data[STEPS][N_T + 1]; /* the trainer's bytes */
static char tname[N_T + 1][16];

static uint64_t t_bytes(int k) { return k < N_T ? T_ELEMS * 2 : N_B * 4; }

static const char *at(const char *fmt, ...) {
  static char slots[8][256];
  static int next;
  char *p = slots[next++ & 7];
  int n = snprintf(p, 256, "%s/", root);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p + n, (size_t)(256 - n), fmt, ap);
  va_end(ap);
  return p;
}

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}
static void rm_tree(const char *p) {
  nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void rm_root(void) { rm_tree(root); }

static void sh(const char *fmt, ...) {
  char cmd[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  ASSERT_EQ(system(cmd), 0);
}

/* A leftover temporary or journal file anywhere under DIR. */
static char leftover[512];
static int leftover_(const char *p, const struct stat *sb, int flag,
                     struct FTW *ftw) {
  (void)sb, (void)flag;
  const char *b = p + ftw->base;
  if (strstr(b, ".tmp.") == NULL && strstr(b, ".stitch-journal") == NULL)
    return 0;
  snprintf(leftover, sizeof(leftover), "%s", p);
  return 1;
}
static void assert_no_leftovers(const char *dir, uint64_t n) {
  if (nftw(dir, leftover_, 16, FTW_PHYS) != 0)
    FAIL_("N=%" PRIu64 ": %s is left behind", n, leftover);
}

static uint64_t fa_republished; /* publishes settled by their retry */
static uint64_t fa_recovered;   /* pulls that left a journal to recover */

static const char *ckpt_file(int s) { return at("step%d.safetensors", s); }

/* An Adam-like trajectory: each step moves ~1% of the BF16 weights by one
 * ulp and a few F32 values. */
static void make_steps(test_rng *r) {
  for (int k = 0; k <= N_T; k++) {
    snprintf(tname[k], sizeof(tname[k]), k < N_T ? "w%d" : "norm", k);
    step_data[0][k] = malloc(t_bytes(k));
    ASSERT(step_data[0][k] != NULL);
  }
  for (int k = 0; k < N_T; k++) {
    uint16_t *w = (uint16_t *)step_data[0][k];
    for (size_t i = 0; i < T_ELEMS; i++)
      w[i] = (uint16_t)((0x3c00 + test_rng_next(r) % 0x400) ^
                        ((test_rng_next(r) & 1) << 15));
  }
  float *b = (float *)step_data[0][N_T];
  for (size_t i = 0; i < N_B; i++)
    b[i] = (float)test_rng_unit(r) - 0.5f;
  for (int s = 0; s < STEPS; s++) {
    if (s > 0) {
      for (int k = 0; k <= N_T; k++)
        step_data[s][k] = test_dup_bytes(step_data[s - 1][k], t_bytes(k));
      for (size_t k = 0; k < N_T * T_ELEMS / 100; k++) {
        uint64_t x = test_rng_next(r) % (N_T * T_ELEMS);
        uint16_t *w = (uint16_t *)step_data[s][x / T_ELEMS] + x % T_ELEMS;
        *w = (uint16_t)(*w + ((test_rng_next(r) & 1) ? 1 : -1));
      }
      for (size_t k = 0; k < 8; k++)
        ((float *)step_data[s][N_T])[test_rng_next(r) % N_B] += 1e-3f;
    }
    tspec ts[N_T + 1];
    for (int k = 0; k <= N_T; k++)
      ts[k] = (tspec){tname[k], k < N_T ? STITCH_DT_BF16 : STITCH_DT_F32,
                      k < N_T ? 2 : 1, {k < N_T ? 32 : N_B, 256},
                      step_data[s][k]};
    char meta[64];
    snprintf(meta, sizeof(meta), "{\"step\":\"%d\"}", s);
    write_ckpt(ckpt_file(s), ts, N_T + 1, meta);
  }
}

/* Whether the weights file at PATH holds trainer step S, bit for bit. */
static int holds_step(const char *path, int s) {
  stitch_st *st;
  stitch_diag d = {{0}};
  if (stitch_st_open(path, &st, &d) != 0)
    return 0;
  int ok = stitch_st_count(st) == N_T + 1;
  for (int k = 0; ok && k <= N_T; k++) {
    const stitch_tensor *t = stitch_st_find(st, tname[k]);
    ok = t != NULL && t->nbytes == t_bytes(k) &&
         memcmp(t->data, step_data[s][k], t_bytes(k)) == 0;
  }
  stitch_st_free(st);
  return ok;
}

static void assert_error(int rc, const stitch_diag *d, uint64_t n,
                         const char *what) {
  if (rc >= 0 || rc <= STITCH_E_FIRST_ || rc >= STITCH_E_LAST_)
    FAIL_("N=%" PRIu64 ": %s returned %d, not a STITCH_E* code", n, what, rc);
  (void)d;
}

/* The store at DIR opens, verifies and has LATEST in [lo, hi]. */
static uint64_t check_store(const char *dir, uint64_t lo, uint64_t hi,
                            uint64_t n) {
  stitch_store *s;
  stitch_diag d = {{0}};
  int rc = stitch_store_open(dir, &pk, 0, &s, &d);
  if (rc != 0)
    FAIL_("N=%" PRIu64 ": the store does not open: %s", n, d.msg);
  uint64_t chunks;
  rc = stitch_store_verify(s, &chunks, &d);
  uint64_t latest = stitch_store_latest(s);
  stitch_store_close(s);
  /* A publish that failed after its manifest was saved leaves `latest`
   * behind it, which verify reports until the next publish finishes that
   * version (publish.c); anything else is damage. */
  if (rc != 0 && strstr(d.msg, "a publish did not finish") == NULL)
    FAIL_("N=%" PRIu64 ": the store does not verify: %s", n, d.msg);
  if (latest < lo || latest > hi)
    FAIL_("N=%" PRIu64 ": the store's latest is %" PRIu64
          ", not %" PRIu64 "..%" PRIu64, n, latest, lo, hi);
  return latest;
}

/* ---- Publish ---------------------------------------------------------- */

static stitch_publish_opts pub_opts(void) {
  stitch_publish_opts o = {0};
  o.chunk_bytes = CHUNK;
  o.threads = 1;
  o.cumulative_every = 2; /* version 3 gets a cumulative delta too */
  o.keep = 2;
  o.time_unix = 1700000000;
  return o;
}

static void publish_step(const char *dir, int s) {
  stitch_st *st = open_ckpt(ckpt_file(s));
  stitch_publish_opts o = pub_opts();
  stitch_publish_result res;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_publish(dir, &sk, st, &o, &res, &d), d);
  ASSERT_UEQ(res.version, (uint64_t)s + 1);
  stitch_st_free(st);
}

/* Publishes step S into a copy of the store "pub-base-S" (steps 0..S-1),
 * failing allocation N; then checks the store, finishes the publish if it
 * did not land, and pulls the result from nothing. */
static int publish_run(int s, uint64_t n) {
  const char *dir = at("pub");
  rm_tree(dir);
  if (s > 0)
    sh("cp -a '%s' '%s'", at("pub-base-%d", s), dir);
  stitch_st *st = open_ckpt(ckpt_file(s));
  stitch_publish_opts o = pub_opts();
  stitch_publish_result res;
  stitch_diag d = {{0}};
  fa_arm(n);
  int rc = stitch_publish(dir, &sk, st, &o, &res, &d);
  fa_disarm();
  int hit = fa_failed();
  if (FA_LEAK_CHECK())
    FAIL_("publish of step %d leaks with allocation N=%" PRIu64 " failing",
          s, n);
  if (!hit && rc != 0)
    FAIL_("publish failed without an allocation failure: %s", d.msg);
  uint64_t v = (uint64_t)s + 1;
  if (rc != 0) {
    assert_error(rc, &d, n, "stitch_publish");
    /* The store stays as it was, or holds the new version whole (only
     * the tidying after `latest` moved failed). A first publish may fail
     * while it creates the store (its key file written, its folders not
     * yet): the retry finishes that. */
    if ((s > 0 || access(at("pub/chunks"), F_OK) == 0) &&
        check_store(dir, s, v, n) == v)
      rc = 0;
    if (rc != 0) {
      /* A failure after the manifest was written leaves it above
       * `latest`, like a crash there: the retry settles it (publish.c),
       * then publishes the checkpoint again as the version after. */
      ASSERT_OK(stitch_publish(dir, &sk, st, &o, &res, &d), d);
      if (res.version != v && res.version != v + 1)
        FAIL_("N=%" PRIu64 ": the publish after a failed one made version %"
              PRIu64 ", not %" PRIu64, n, res.version, v);
      v = res.version;
    }
  } else {
    ASSERT_UEQ(res.version, v);
  }
  stitch_st_free(st);
  check_store(dir, v, v, n);
  assert_no_leftovers(dir, n);
  /* The version is the trainer's bytes. */
  const char *w = at("pub-w.st");
  remove(w);
  remove(at("pub-w.st.stitch-state"));
  stitch_apply_opts ao = {0};
  ao.threads = 1;
  ASSERT_OK(stitch_pull(dir, &pk, w, &ao, NULL, &d), d);
  if (!holds_step(w, s))
    FAIL_("N=%" PRIu64 ": version %" PRIu64 " is not step %d's bytes", n, v,
          s);
  if (v > (uint64_t)s + 1)
    fa_republished++;
  return hit;
}

static int publish_anchor(uint64_t n) { return publish_run(0, n); }
static int publish_third(uint64_t n) { return publish_run(2, n); }

/* ---- Apply a delta ---------------------------------------------------- */

static uint8_t *delta_buf; /* step 1 -> step 2 */
static size_t delta_len;

static int apply_run(uint64_t n) {
  const char *out = at("apply-out.st");
  sh("cp '%s' '%s'", ckpt_file(0), out); /* what it replaces */
  stitch_st *base = open_ckpt(ckpt_file(1));
  stitch_diag d = {{0}};
  stitch_delta_apply_opts o = {0};
  o.threads = 1;
  fa_arm(n);
  stitch_delta *dl = NULL;
  int rc = stitch_delta_parse(delta_buf, delta_len, &dl, &d);
  if (rc == 0)
    rc = stitch_delta_apply_file_ex(base, dl, out, &o, &d);
  stitch_delta_free(dl);
  fa_disarm();
  int hit = fa_failed();
  stitch_st_free(base);
  if (FA_LEAK_CHECK())
    FAIL_("apply leaks with allocation N=%" PRIu64 " failing", n);
  if (!hit && rc != 0)
    FAIL_("apply failed without an allocation failure: %s", d.msg);
  if (rc != 0) {
    assert_error(rc, &d, n, "stitch_delta_apply_file");
    if (!holds_step(out, 0))
      FAIL_("N=%" PRIu64 ": a failed apply (%s) changed its output file", n,
            d.msg);
  } else if (!holds_step(out, 2)) {
    FAIL_("N=%" PRIu64 ": the applied file is not step 2's bytes", n);
  }
  assert_no_leftovers(root, n);
  return hit;
}

/* ---- Pull ------------------------------------------------------------- */

/* The weights at W are exactly the version their state names, or (with
 * no state) trainer step FROM_STEP's bytes or nothing at all. */
static uint64_t check_weights(const char *w, int from_step, uint64_t n) {
  stitch_wstate ws;
  stitch_diag d = {{0}};
  int rc = stitch_weights_state(w, &ws, &d);
  if (rc == STITCH_ENOTFOUND) {
    if (from_step < 0 ? access(w, F_OK) == 0 : !holds_step(w, from_step))
      FAIL_("N=%" PRIu64 ": weights without a state are not what they "
            "were", n);
    return 0;
  }
  if (rc != 0)
    FAIL_("N=%" PRIu64 ": the weights' state does not read: %s", n, d.msg);
  if (ws.version < 1 || ws.version > STEPS || ws.stale ||
      !holds_step(w, (int)ws.version - 1))
    FAIL_("N=%" PRIu64 ": the weights are not the version %" PRIu64
          " their state names%s", n, ws.version, ws.stale ? " (stale)" : "");
  return ws.version;
}

static int pull_run(int from_step, uint64_t n) {
  const char *store = at("store"), *w = at("pull-w.st");
  remove(w);
  remove(at("pull-w.st.stitch-state"));
  if (from_step >= 0)
    sh("cp '%s' '%s'", ckpt_file(from_step), w);
  stitch_apply_opts o = {0};
  o.threads = 1;
  stitch_pull_result res;
  stitch_diag d = {{0}};
  fa_arm(n);
  int rc = stitch_pull(store, &pk, w, &o, &res, &d);
  fa_disarm();
  int hit = fa_failed();
  if (FA_LEAK_CHECK())
    FAIL_("pull leaks with allocation N=%" PRIu64 " failing", n);
  if (!hit && rc != 0)
    FAIL_("pull failed without an allocation failure: %s", d.msg);
  if (rc != 0)
    assert_error(rc, &d, n, "stitch_pull");
  /* Right after the failure the bytes are one whole version (or nothing,
   * as before). A failure past the apply's commit point (the state file
   * not written) leaves the journal, as a crash there would: recovery,
   * which every pull runs first, must settle it. */
  int whole = from_step < 0 && access(w, F_OK) != 0;
  for (int s = from_step < 0 ? 0 : from_step; !whole && s < STEPS; s++)
    whole = holds_step(w, s);
  if (!whole)
    FAIL_("N=%" PRIu64 ": the weights are no whole version", n);
  if (access(at("pull-w.st.stitch-journal"), F_OK) == 0) {
    int recovered = 0;
    ASSERT_OK(stitch_weights_recover(w, &recovered, &d), d);
    ASSERT_EQ(recovered, 1);
    fa_recovered++;
  }
  check_weights(w, from_step, n);
  check_store(store, STEPS, STEPS, n);
  assert_no_leftovers(root, n);
  if (rc != 0)
    ASSERT_OK(stitch_pull(store, &pk, w, &o, &res, &d), d);
  ASSERT_UEQ(check_weights(w, from_step, n), STEPS);
  return hit;
}

static int pull_fresh(uint64_t n) { return pull_run(-1, n); }
static int pull_inplace(uint64_t n) { return pull_run(0, n); }

/* ---- Prepare and commit an engine's memory ---------------------------- */

/* stitch_prepared_new from trainer step FROM_STEP's bytes (-1: zeros, as
 * an engine holding nothing) to the latest version: a failure leaves no
 * object and the memory untouched; a success commits to the latest's
 * bytes. */
static int prepared_run(int from_step, uint64_t n) {
  stitch_store *s;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_store_open(at("store"), &pk, 0, &s, &d), d);
  const stitch_manifest *m = stitch_store_find(s, STEPS)->m;
  ASSERT_UEQ(m->n_tensors, (uint64_t)N_T + 1);
  uint8_t *data[N_T + 1];
  uint64_t nb[N_T + 1];
  int order[N_T + 1];
  for (int i = 0; i <= N_T; i++) {
    int k = 0;
    while (strcmp(tname[k], m->tensors[i].name) != 0)
      k++;
    order[i] = k;
    nb[i] = t_bytes(k);
    data[i] = calloc(1, nb[i]);
    ASSERT(data[i] != NULL);
    if (from_step >= 0)
      memcpy(data[i], step_data[from_step][k], nb[i]);
  }
  uint64_t held = from_step < 0 ? 0 : (uint64_t)from_step + 1;
  const stitch_vref *hv = held ? stitch_store_find(s, held) : NULL;
  stitch_prepared *p = NULL;
  fa_arm(n);
  int rc = stitch_prepared_new(s, held, hv ? &hv->id : NULL, STEPS,
                               (const uint8_t *const *)data, nb, 1, NULL, &p,
                               &d);
  fa_disarm();
  int hit = fa_failed();
  if (!hit && rc != 0)
    FAIL_("prepare failed without an allocation failure: %s", d.msg);
  if (rc != 0) {
    assert_error(rc, &d, n, "stitch_prepared_new");
    if (p != NULL)
      FAIL_("N=%" PRIu64 ": a failed prepare returned an object", n);
  } else {
    ASSERT_OK(stitch_prepared_commit(p, data, 1, &d), d);
    stitch_prepared_free(p);
  }
  int want = rc != 0 ? from_step : STEPS - 1;
  for (int i = 0; i <= N_T; i++) {
    int ok = 1;
    for (uint64_t b = 0; want < 0 && b < nb[i]; b++)
      ok &= data[i][b] == 0;
    if (want >= 0)
      ok = memcmp(data[i], step_data[want][order[i]], nb[i]) == 0;
    if (!ok)
      FAIL_("N=%" PRIu64 ": tensor '%s' is not step %d's bytes after a "
            "%s prepare", n, tname[order[i]], want, rc ? "failed" : "clean");
    free(data[i]);
  }
  stitch_store_close(s);
  if (FA_LEAK_CHECK())
    FAIL_("prepare leaks with allocation N=%" PRIu64 " failing", n);
  return hit;
}

static int prepared_fresh(uint64_t n) { return prepared_run(-1, n); }
static int prepared_inplace(uint64_t n) { return prepared_run(0, n); }

/* ---- Swarm ------------------------------------------------------------ */

typedef struct fa_version {
  uint8_t *man;
  size_t len;
} fa_version;

static fa_version sw_ver[STEPS + 1];
static sn_store sw_chunks; /* every chunk of every version */

static void load_swarm_versions(void) {
  stitch_store *s;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_store_open(at("store"), &pk, 0, &s, &d), d);
  for (uint64_t v = 1; v <= STEPS; v++) {
    const stitch_vref *vr = stitch_store_find(s, v);
    ASSERT(vr != NULL);
    /* proto/store.md: manifests/<version, 20 digits>-<id> */
    char mdir[300], prefix[32], path[600] = "";
    snprintf(mdir, sizeof(mdir), "%s/manifests", at("store"));
    snprintf(prefix, sizeof(prefix), "%020" PRIu64 "-", v);
    DIR *dp = opendir(mdir);
    ASSERT(dp != NULL);
    for (struct dirent *de; (de = readdir(dp)) != NULL;)
      if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
        snprintf(path, sizeof(path), "%s/%s", mdir, de->d_name);
    closedir(dp);
    FILE *f = fopen(path, "rb");
    ASSERT(f != NULL);
    ASSERT_EQ(fseek(f, 0, SEEK_END), 0);
    sw_ver[v].len = (size_t)ftell(f);
    rewind(f);
    sw_ver[v].man = malloc(sw_ver[v].len);
    ASSERT(sw_ver[v].man != NULL);
    ASSERT_EQ(fread(sw_ver[v].man, 1, sw_ver[v].len, f), sw_ver[v].len);
    fclose(f);
    for (uint64_t o = 0; o < vr->m->n_objects; o++) {
      const stitch_object *ob = &vr->m->objects[o];
      for (uint64_t c = 0; c < ob->n_chunks; c++) {
        const uint8_t *b;
        size_t len;
        ASSERT_OK(stitch_store_get_chunk(s, &ob->chunks[c].hash, &b, &len, &d),
                  d);
        sn_store_put(&sw_chunks, &ob->chunks[c].hash, b, len);
        stitch_store_release(b, len);
      }
    }
  }
  stitch_store_close(s);
}

/* sn_start, but a driver's: a core that cannot be made, or refuses an
 * address, is tried again (the failure is single-shot). */
static void fa_start(sn_net *net, sn_node *n, int peer) {
  stitch_swarm_io io = sn_io(n);
  stitch_diag d = {{0}};
  /* Sealed, as stitchd's: the record layer's allocations fail too. */
  n->cfg.cipher_none = 0;
  fa_resume();
  int rc = stitch_swarm_new(&n->cfg, &io, &n->sw, &d);
  fa_pause();
  if (rc != 0) {
    ASSERT(rc < 0 && n->sw == NULL);
    ASSERT_OK(stitch_swarm_new(&n->cfg, &io, &n->sw, &d), d);
  }
  n->started = n->alive = 1;
  if (peer >= 0) {
    const sn_node *o = &net->node[peer];
    if (stitch_swarm_add_peer_addr(n->sw, o->name, o->region) != 0)
      ASSERT_OK(stitch_swarm_add_peer_addr(n->sw, o->name, o->region), d);
  }
  sn_actions(net, n);
}

static void sw_publish(sn_net *net, sn_node *seed, uint64_t v) {
  for (size_t i = 0; i < sw_chunks.cap; i++)
    if (sw_chunks.slot[i].p != NULL)
      sn_store_put(&seed->store, &sw_chunks.slot[i].h, sw_chunks.slot[i].p,
                   sw_chunks.slot[i].len);
  stitch_diag d = {{0}};
  if (stitch_swarm_add_manifest(seed->sw, sw_ver[v].man, sw_ver[v].len,
                                net->now, &d) != 0)
    ASSERT_OK(stitch_swarm_add_manifest(seed->sw, sw_ver[v].man, sw_ver[v].len,
                                        net->now, &d),
              d);
  sn_actions(net, seed);
}

static int node_at_latest(sn_net *net, void *arg) {
  (void)arg;
  return net->node[1].w_version == STEPS;
}

#define SW_DEADLINE_MS 60000 /* virtual; a clean run needs well under 1 s */

static uint64_t sw_drops; /* peers dropped by a core over all runs */

static int swarm_run(uint64_t n) {
  sn_params p = {.seed = 7,
                 .up_bw = 2000,
                 .bw_local = 2000,
                 .bw_remote = 800,
                 .lat_local = 5,
                 .lat_remote = 40};
  sn_net net;
  sn_init(&net, &p, &pk, &sk);
  sn_node *seed = sn_add(&net, "eu", 1, 1);
  seed->cfg.node_pk = pk;
  seed->cfg.node_sk = sk;
  sn_node *node = sn_add(&net, "eu", 0, 1);
  fa_arm(n);
  fa_pause(); /* counted only inside calls into the cores */
  fa_start(&net, seed, -1);
  fa_start(&net, node, 0);
  sn_run(&net, 50, NULL, NULL);
  for (uint64_t v = 1; v <= STEPS; v++) {
    sw_publish(&net, seed, v);
    sn_run(&net, net.now + 200, NULL, NULL);
  }
  int ok = sn_run(&net, SW_DEADLINE_MS, node_at_latest, NULL);
  fa_resume();
  fa_disarm();
  int hit = fa_failed();
  if (!ok) {
    sn_dump_all(&net);
    FAIL_("swarm: with allocation N=%" PRIu64 " failing the node did not "
          "reach v%d", n, STEPS);
  }
  if (node->apply_errors != 0 || node->bad_writes != 0)
    FAIL_("swarm N=%" PRIu64 ": %u apply errors, %" PRIu64 " bad writes", n,
          node->apply_errors, node->bad_writes);
  for (size_t i = 0; i < node->w_n; i++) {
    int k = 0;
    const stitch_vref *vr = stitch_swarm_find_version(node->sw, STEPS);
    while (k <= N_T && strcmp(tname[k], vr->m->tensors[i].name) != 0)
      k++;
    if (k > N_T || node->w_nbytes[i] != t_bytes(k) ||
        memcmp(node->w_data[i], step_data[STEPS - 1][k], t_bytes(k)) != 0)
      FAIL_("swarm N=%" PRIu64 ": tensor %zu is not the trainer's", n, i);
  }
  for (size_t k = 0; k < net.n_conn; k++)
    sw_drops += net.conn[k].close_rc != 0;
  sn_free(&net);
  if (FA_LEAK_CHECK())
    FAIL_("swarm leaks with allocation N=%" PRIu64 " failing", n);
  return hit;
}

/* ---- The loop over N -------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void torture_pass(const char *name, int (*run)(uint64_t), int sticky) {
  fa_set_sticky(sticky);
  const char *one = getenv("STITCH_FAILALLOC_N");
  if (one != NULL) {
    uint64_t n = strtoull(one, NULL, 0);
    printf("%s: N=%" PRIu64 " %s\n", name, n,
           run(n) ? "failed cleanly" : "was not reached");
    return;
  }
  double t0 = now_s();
  fa_sites_reset();
  ASSERT(!run(0));
  uint64_t total = fa_count();
  size_t n_sites = fa_sites();
  const char *all = getenv("STITCH_FAILALLOC_ALL");
  int every = total <= FA_EVERY || (all != NULL && *all == '1');
  /* The Ns to fail: all of them, or a head, a stride and each site's
   * first allocation. */
  size_t cap = every ? (size_t)total : FA_EVERY / 4 + FA_EVERY + FA_MAX_SITES;
  uint64_t *ns = malloc((cap ? cap : 1) * sizeof(*ns));
  ASSERT(ns != NULL);
  size_t k = 0;
  if (every) {
    for (uint64_t i = 1; i <= total; i++)
      ns[k++] = i;
  } else {
    uint64_t stride = total / FA_EVERY + 1;
    for (uint64_t i = 1; i <= FA_EVERY / 4; i++)
      ns[k++] = i;
    for (uint64_t i = FA_EVERY / 4 + stride; i <= total; i += stride)
      ns[k++] = i;
    k += fa_site_firsts(ns + k, cap - k);
    qsort(ns, k, sizeof(*ns), cmp_u64);
  }
  size_t runs = 0;
  for (size_t i = 0; i < k; i++) {
    if (i > 0 && ns[i] == ns[i - 1])
      continue;
    if (!run(ns[i]))
      FAIL_("%s: allocation N=%" PRIu64 " of %" PRIu64 " was not reached "
            "(the operation is not deterministic?)", name, ns[i], total);
    runs++;
  }
  free(ns);
  /* One past the last: the operation completes without a failure. */
  ASSERT(!run(total + 1));
  printf("%s%s: %" PRIu64 " allocations from %zu sites; %zu failing runs%s, "
         "%.1f s\n", name, sticky ? " (sticky)" : "", total, n_sites, runs,
         every ? " (every N)" : " (stepped, every site)", now_s() - t0);
  fflush(stdout);
  fa_set_sticky(0);
}

/* Single-shot failures; then, for STICKY_TOO, every allocation from N on
 * failing (a swarm core that never gets memory back cannot converge, so
 * the swarm runs single-shot only). STITCH_FAILALLOC_STICKY=0 or 1 runs
 * one kind. */
static void torture(const char *name, int (*run)(uint64_t), int sticky_too) {
  const char *only = getenv("STITCH_FAILALLOC_ONLY");
  if (only != NULL && strcmp(only, name) != 0)
    return;
  const char *k = getenv("STITCH_FAILALLOC_STICKY");
  if (k == NULL || *k == '0')
    torture_pass(name, run, 0);
  if (sticky_too && (k == NULL || *k == '1'))
    torture_pass(name, run, 1);
}

int main(void) {
  test_rng r = test_rng_seeded("test_failalloc", 0xfa11a10c);
  /* Every store write is fsync'd: on tmpfs that costs nothing. */
  snprintf(root, sizeof(root), "/dev/shm/stitch-failalloc-XXXXXX");
  if (access("/dev/shm", W_OK) != 0 || mkdtemp(root) == NULL)
    snprintf(root, sizeof(root), "%s", test_tmpdir());
  atexit(rm_root); /* a failing check exits */
  uint64_t ks = r.s | 1;
  sn_keypair(&ks, &pk, &sk);
  make_steps(&r);
  /* The stores the runs start from: steps 0..1 for the third publish,
   * 0..2 for pull and the swarm. */
  for (int s = 0; s < STEPS; s++) {
    publish_step(at("store"), s);
    if (s == 1)
      sh("cp -a '%s' '%s'", at("store"), at("pub-base-2"));
  }
  {
    stitch_st *a = open_ckpt(ckpt_file(1)), *b = open_ckpt(ckpt_file(2));
    stitch_diag d = {{0}};
    stitch_delta_opts o = {0};
    o.threads = 1;
    ASSERT_OK(stitch_delta_encode(a, b, &o, &delta_buf, &delta_len, NULL, &d),
              d);
    stitch_st_free(a);
    stitch_st_free(b);
  }
  load_swarm_versions();
  double t0 = now_s();
  torture("publish-anchor", publish_anchor, 1);
  torture("publish-third", publish_third, 1);
  torture("apply", apply_run, 1);
  torture("pull-fresh", pull_fresh, 1);
  torture("pull-inplace", pull_inplace, 1);
  torture("prepared-fresh", prepared_fresh, 1);
  torture("prepared-inplace", prepared_inplace, 1);
  torture("swarm", swarm_run, 0);
  printf("all: %.1f s; %" PRIu64 " failed publishes were settled by their "
         "retry, %" PRIu64 " failed pulls left a journal that recovery "
         "settled; the swarm's cores dropped %" PRIu64 " peers\n",
         now_s() - t0, fa_republished, fa_recovered, sw_drops);
  free(delta_buf);
  for (uint64_t v = 1; v <= STEPS; v++)
    free(sw_ver[v].man);
  sn_store_free(&sw_chunks);
  for (int s = 0; s < STEPS; s++)
    for (int k = 0; k <= N_T; k++)
      free(step_data[s][k]);
  return 0;
}
