/* swarm_fixture.h: what the swarm scenario tests share (test_swarm.c,
 * test_swarm_regions.c): a trainer's trajectory published to a store,
 * its chunks and bytes, helpers that build and run a swarm in memory
 * (swarm_net.h) and check every node's weights bit for bit, and a runner
 * that forks each scenario. Each test includes it once; what a test does
 * not use is not warned about. */
#ifndef STITCH_TESTS_SWARM_FIXTURE_H
#define STITCH_TESTS_SWARM_FIXTURE_H

#define _XOPEN_SOURCE 700 /* nftw */
#include "ckpt_util.h"
#include "stitch/store.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

#include "swarm_net.h"

#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define NV 6                  /* versions published to the store */
#define NT 64                 /* BF16 tensors of 32 x 256 */
#define T_ELEMS (32 * 256)
#define N_B 4096              /* F32 elements of the last tensor */
#define CHUNK_BYTES 4096
#define DEADLINE_MS 120000    /* virtual; far beyond what any run needs */

/* ---- The trainer: a trajectory, its store, its bytes ------------------ */

static char root[64];
static stitch_pubkey swarm_pk;
static stitch_seckey swarm_sk;

typedef struct version_bytes {
  uint8_t *man; /* signed manifest */
  size_t man_len;
  stitch_manifest *m;
  uint8_t *tensors[NT + 1]; /* the trainer's served bytes */
} version_bytes;

static version_bytes ver[NV + 1];
static sn_store trainer_chunks;
static char tname[NT + 1][32];

static uint64_t tensor_bytes(int k) {
  return k < NT ? T_ELEMS * 2 : N_B * 4;
}

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}
static void rm_root(void) { nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ASSERT(f != NULL);
  ASSERT_EQ(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  ASSERT(n >= 0);
  rewind(f);
  uint8_t *b = malloc((size_t)n + 1);
  ASSERT(b != NULL);
  ASSERT_EQ(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* Reads version V's manifest and chunks back from the store directory. */
static void load_version(const char *dir, uint64_t v) {
  char mdir[128], prefix[32];
  snprintf(mdir, sizeof(mdir), "%s/manifests", dir);
  snprintf(prefix, sizeof(prefix), "%020" PRIu64 "-", v);
  DIR *dp = opendir(mdir);
  ASSERT(dp != NULL);
  struct dirent *de;
  char path[512] = "";
  while ((de = readdir(dp)) != NULL)
    if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
      snprintf(path, sizeof(path), "%s/%s", mdir, de->d_name);
  closedir(dp);
  ASSERT(path[0] != 0);
  version_bytes *vb = &ver[v];
  vb->man = slurp(path, &vb->man_len);
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_manifest_open(vb->man, vb->man_len, &swarm_pk, &vb->m,
                                 NULL, &d),
            d);
  for (uint64_t o = 0; o < vb->m->n_objects; o++) {
    const stitch_object *ob = &vb->m->objects[o];
    for (uint64_t c = 0; c < ob->n_chunks; c++) {
      char hex[65];
      stitch_digest_hex(&ob->chunks[c].hash, hex);
      snprintf(path, sizeof(path), "%s/chunks/%.2s/%s", dir, hex, hex);
      size_t len;
      uint8_t *b = slurp(path, &len);
      sn_store_put(&trainer_chunks, &ob->chunks[c].hash, b, len);
      free(b);
    }
  }
}

/* An Adam-like trajectory: every step moves ~1% of the BF16 weights by
 * one ulp and a few F32 values; each step is published as a version. */
static void make_versions(test_rng *r) {
  uint64_t ks = r->s | 1;
  sn_keypair(&ks, &swarm_pk, &swarm_sk);
  const char *dir = test_path("store");
  uint8_t *cur[NT + 1];
  for (int k = 0; k <= NT; k++) {
    snprintf(tname[k], sizeof(tname[k]), k < NT ? "layers.%02d.w" : "norm",
             k);
    cur[k] = malloc(tensor_bytes(k));
    ASSERT(cur[k] != NULL);
  }
  for (int k = 0; k < NT; k++) {
    uint16_t *w = (uint16_t *)cur[k];
    for (size_t i = 0; i < T_ELEMS; i++)
      w[i] = (uint16_t)((0x3c00 + test_rng_next(r) % 0x400) ^
                        ((test_rng_next(r) & 1) << 15));
  }
  float *b = (float *)cur[NT];
  for (size_t i = 0; i < N_B; i++)
    b[i] = (float)test_rng_unit(r) - 0.5f;
  for (uint64_t v = 1; v <= NV; v++) {
    if (v > 1) {
      for (size_t k = 0; k < NT * T_ELEMS / 100; k++) {
        uint64_t x = test_rng_next(r) % (NT * T_ELEMS);
        uint16_t *w = (uint16_t *)cur[x / T_ELEMS] + x % T_ELEMS;
        *w = (uint16_t)(*w + ((test_rng_next(r) & 1) ? 1 : -1));
      }
      for (size_t k = 0; k < 40; k++)
        b[test_rng_next(r) % N_B] += 1e-3f;
    }
    tspec ts[NT + 1];
    for (int k = 0; k <= NT; k++)
      ts[k] = (tspec){tname[k], k < NT ? STITCH_DT_BF16 : STITCH_DT_F32,
                      k < NT ? 2 : 1, {k < NT ? 32 : N_B, 256}, cur[k]};
    const char *ck = test_path("step%" PRIu64 ".safetensors", v);
    write_ckpt(ck, ts, NT + 1, "{\"trainer\":\"test_swarm\"}");
    stitch_st *st = open_ckpt(ck);
    stitch_publish_opts o = {0};
    o.chunk_bytes = CHUNK_BYTES;
    o.threads = 2;
    o.time_unix = 1700000000 + v;
    stitch_publish_result res;
    stitch_diag d = {{0}};
    ASSERT_OK(stitch_publish(dir, &swarm_sk, st, &o, &res, &d), d);
    ASSERT_UEQ(res.version, v);
    stitch_st_free(st);
    remove(ck);
    for (int k = 0; k <= NT; k++) {
      ver[v].tensors[k] = malloc(tensor_bytes(k));
      ASSERT(ver[v].tensors[k] != NULL);
      memcpy(ver[v].tensors[k], cur[k], tensor_bytes(k));
    }
    load_version(dir, v);
  }
  for (int k = 0; k <= NT; k++)
    free(cur[k]);
}

/* ---- Scenario helpers ------------------------------------------------- */

#define CHECK_NET(net, cond)                                                  \
  do {                                                                        \
    if (!(cond)) {                                                            \
      sn_dump_all(net);                                                       \
      FAIL_("check failed at t=%" PRIu64 " ms: %s", (net)->now, #cond);       \
    }                                                                         \
  } while (0)

static const sn_params default_params = {
    .seed = 1,
    .up_bw = 2000,     /* 2 MB/s per node */
    .bw_local = 2000,
    .bw_remote = 800,
    .lat_local = 5,
    .lat_remote = 40,
};

/* The seed (n0, region "eu", the trainer's key) and N nodes alternating
 * "eu" and "us". Each node is told of the seed and of the node before it;
 * peer exchange must find the rest. Nothing is started. */
static uint64_t test_seed;

static sn_node *build(sn_net *net, const sn_params *p, int n) {
  sn_params q = *p;
  q.seed = test_seed;
  sn_init(net, &q, &swarm_pk, &swarm_sk);
  sn_node *seed = sn_add(net, "eu", 1, 1);
  seed->cfg.node_pk = swarm_pk;
  seed->cfg.node_sk = swarm_sk;
  for (int i = 1; i <= n; i++)
    sn_add(net, i % 2 ? "eu" : "us", 0, 1);
  return seed;
}

static void start_node(sn_net *net, sn_node *n) {
  int peers[2] = {0, n->idx - 1};
  sn_start(net, n, peers, n->idx > 1 ? 2 : 1);
}

/* The seed gets version V's chunks, then its manifest, as stitchd seed
 * does when the trainer publishes. */
static uint64_t publish_ms[NV + 1];

/* Puts every chunk of version V into N's store. */
static void store_version(sn_node *n, uint64_t v) {
  for (uint64_t o = 0; o < ver[v].m->n_objects; o++) {
    const stitch_object *ob = &ver[v].m->objects[o];
    for (uint64_t c = 0; c < ob->n_chunks; c++) {
      const sn_chunk *ch = sn_store_get(&trainer_chunks, &ob->chunks[c].hash);
      ASSERT(ch != NULL);
      sn_store_put(&n->store, &ch->h, ch->p, ch->len);
    }
  }
}

static void publish(sn_net *net, sn_node *seed, uint64_t v) {
  store_version(seed, v);
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_swarm_add_manifest(seed->sw, ver[v].man, ver[v].man_len,
                                      net->now, &d),
            d);
  publish_ms[v] = net->now;
  sn_actions(net, seed);
}

static int honest_node(const sn_node *n) {
  return n->alive && !n->cfg.seed && n->evil == SN_HONEST;
}

/* Every live honest node holds version *arg. */
static int all_at(sn_net *net, void *arg) {
  uint64_t v = *(const uint64_t *)arg;
  for (int i = 0; i < net->n_nodes; i++)
    if (honest_node(&net->node[i]) && net->node[i].w_version != v)
      return 0;
  return 1;
}

static void run_until_all_at(sn_net *net, uint64_t v) {
  int ok = sn_run(net, net->now + DEADLINE_MS, all_at, &v);
  CHECK_NET(net, ok);
}

/* Node N's weights are the trainer's version V, byte for byte, and
 * nothing it stored or applied was wrong. */
static void check_exact(sn_net *net, const sn_node *n, uint64_t v) {
  CHECK_NET(net, n->w_version == v);
  CHECK_NET(net, n->apply_errors == 0);
  CHECK_NET(net, n->bad_writes == 0);
  CHECK_NET(net, n->tick_errors == 0);
  const stitch_vref *vr = stitch_swarm_find_version(n->sw, v);
  CHECK_NET(net, vr != NULL && vr->m->n_tensors == NT + 1);
  CHECK_NET(net, n->w_n == NT + 1);
  for (size_t i = 0; i < n->w_n; i++) {
    int k = 0;
    while (k <= NT && strcmp(tname[k], vr->m->tensors[i].name) != 0)
      k++;
    CHECK_NET(net, k <= NT && n->w_nbytes[i] == tensor_bytes(k));
    CHECK_NET(net, memcmp(n->w_data[i], ver[v].tensors[k], tensor_bytes(k)) ==
                       0);
  }
}

static void check_all_exact(sn_net *net, uint64_t v) {
  for (int i = 0; i < net->n_nodes; i++)
    if (honest_node(&net->node[i]))
      check_exact(net, &net->node[i], v);
}

/* Bytes of the distinct objects some node applied: what the swarm needed
 * from the seed at least once. */
static uint64_t needed_bytes(sn_net *net, uint64_t upto) {
  uint64_t sum = 0;
  for (uint64_t v = 1; v <= upto; v++)
    for (uint64_t o = 0; o < ver[v].m->n_objects; o++) {
      const stitch_object *ob = &ver[v].m->objects[o];
      int used = 0;
      for (int i = 0; i < net->n_nodes && !used; i++) {
        const sn_node *n = &net->node[i];
        for (uint64_t c = 0; c < ob->n_chunks && !used; c++)
          used = !n->cfg.seed && sn_store_get(&n->store, &ob->chunks[c].hash);
      }
      sum += used ? ob->bytes : 0;
    }
  return sum;
}

static uint64_t last_apply_ms(const sn_net *net, uint64_t v) {
  uint64_t t = 0;
  for (int i = 0; i < net->n_nodes; i++)
    if (honest_node(&net->node[i]) && net->node[i].applied_at[v] > t)
      t = net->node[i].applied_at[v];
  return t;
}

/* A fingerprint of everything a run produced, for the determinism check. */
static void fingerprint(const sn_net *net, stitch_digest *out) {
  uint64_t f[SN_MAX_NODES * 24 + 2];
  size_t k = 0;
  f[k++] = net->now;
  f[k++] = net->n_conn;
  for (int i = 0; i < net->n_nodes; i++) {
    stitch_swarm_stats st;
    sn_stats(&net->node[i], &st);
    uint64_t row[] = {st.held_version,   st.latest_version,
                      st.fetch_done,     st.fetch_total,
                      st.peers,          st.bytes_up,
                      st.bytes_down,     st.bytes_from_seed,
                      st.bytes_same_region, st.bytes_other_region,
                      st.verify_failures, st.bans,
                      st.manifests_forwarded, net->node[i].w_version,
                      net->node[i].applies, net->node[i].applied_at[1],
                      net->node[i].applied_at[2], net->node[i].applied_at[3],
                      net->node[i].rx_frames[WIRE_CHUNK],
                      net->node[i].rx_frames[WIRE_REQUEST]};
    memcpy(f + k, row, sizeof(row));
    k += sizeof(row) / sizeof(row[0]);
  }
  stitch_hash((const uint8_t *)f, k * sizeof(f[0]), out);
}


/* ---- Running scenarios ------------------------------------------------ */

typedef struct sw_scenario {
  const char *name;
  void (*fn)(void);
} sw_scenario;

static int scenario(const char *name, void (*fn)(void)) {
  const char *e = getenv("STITCH_SWARM_ONLY");
  if ((e != NULL && strcmp(e, name) != 0) ||
      (e == NULL && (strcmp(name, "sweep") == 0 ||
                     strncmp(name, "todo_", 5) == 0)))
    return 0; /* the sweep, and scenarios not yet passing, only when asked */
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    fn();
    fflush(stdout);
    _exit(0);
  }
  int st;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
    return 0;
  printf("%s: FAILED (STITCH_SWARM_ONLY=%s STITCH_TEST_SEED=%" PRIu64
         " to replay)\n",
         name, name, test_seed);
  return 1;
}

/* Publishes the trajectory, then runs each of the N scenarios of TAB in
 * a process of its own; STITCH_SWARM_ONLY=NAME runs one. TEST names the
 * test for its random seed (STITCH_TEST_SEED). Returns main's status. */
static int sw_main(const char *test, const sw_scenario *tab, size_t n) {
  test_rng r = test_rng_seeded(test, 0x5717c4);
  test_seed = r.s;
  snprintf(root, sizeof(root), "%s", test_tmpdir());
  make_versions(&r);
  rm_root(); /* the versions are in memory now */
  printf("versions: %d of %d tensors; objects (kind bytes chunks):", NV,
         NT + 1);
  for (uint64_t v = 1; v <= NV; v++)
    for (uint64_t o = 0; o < ver[v].m->n_objects; o++)
      printf(" v%" PRIu64 ":%s/%" PRIu64 "/%" PRIu64, v,
             stitch_obj_kind_name(ver[v].m->objects[o].kind),
             ver[v].m->objects[o].bytes, ver[v].m->objects[o].n_chunks);
  printf("\n");
  int failed = 0;
  for (size_t i = 0; i < n; i++)
    failed += scenario(tab[i].name, tab[i].fn);
  for (uint64_t v = 1; v <= NV; v++) {
    stitch_manifest_free(ver[v].m);
    free(ver[v].man);
    for (int k = 0; k <= NT; k++)
      free(ver[v].tensors[k]);
  }
  sn_store_free(&trainer_chunks);
  if (failed)
    printf("%d scenario(s) failed\n", failed);
  return failed ? 1 : 0;
}

#pragma GCC diagnostic pop

#endif
