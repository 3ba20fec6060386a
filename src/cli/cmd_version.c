/* cmd_version.c: stitch keygen | publish | pull | verify | log. */
#define _POSIX_C_SOURCE 200809L
#include "cli/cli.h"

#include "stitch/store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cmd_keygen(int argc, char **argv) {
  flag fl[] = {{"--out", 1, NULL}};
  const char *pos[1];
  int n = cli_parse_args(argc, argv, pos, 0, fl, 1);
  if (n != 0 || fl[0].value == NULL)
    return n < 0 ? 2 : cli_usage_error("stitch keygen --out PREFIX");
  stitch_pubkey pk;
  stitch_seckey sk;
  stitch_diag d = {{0}};
  int rc = stitch_keygen(&pk, &sk);
  if (rc == 0)
    rc = stitch_key_write(fl[0].value, &pk, &sk, &d);
  memset(&sk, 0, sizeof(sk));
  if (rc != 0)
    return cli_fail(rc, &d);
  char hex[65];
  stitch_pubkey_hex(&pk, hex);
  printf("%s.key (secret), %s.pub: swarm %s\n", fl[0].value, fl[0].value, hex);
  return 0;
}

static const char *kind_list(const stitch_manifest *m, char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = 0;
  for (uint64_t o = 0; o < m->n_objects && at < cap; o++) {
    const stitch_object *ob = &m->objects[o];
    int k = ob->kind == STITCH_OBJ_ANCHOR
                ? snprintf(buf + at, cap - at, "%sanchor", o ? "+" : "")
                : snprintf(buf + at, cap - at, "%s%s<-%" PRIu64, o ? "+" : "",
                           stitch_obj_kind_name(ob->kind), ob->base_version);
    at += k > 0 ? (size_t)k : 0;
  }
  return buf;
}

int cmd_publish(int argc, char **argv) {
  flag fl[] = {{"--key", 1, NULL},          {"--store", 1, NULL},
               {"--json", 0, NULL},         {"--chunk-kib", 1, NULL},
               {"--max-chain", 1, NULL},    {"--anchor-ratio", 1, NULL},
               {"--cumulative-every", 1, NULL}, {"--keep", 1, NULL},
               {"--fastest", 0, NULL}};
  const char *pos[1];
  int n = cli_parse_args(argc, argv, pos, 1, fl, 9);
  if (n != 1 || !fl[0].value || !fl[1].value)
    return n < 0 ? 2
                 : cli_usage_error(
                       "stitch publish --key PREFIX.key --store DIR CHECKPOINT "
                       "[--json] [--chunk-kib N] [--max-chain N] "
                       "[--anchor-ratio R] [--cumulative-every N] [--keep N] "
                       "[--fastest]");
  stitch_publish_opts o = {0};
  uint64_t v = 0;
  if (fl[3].value) {
    if (cli_parse_u64(fl[3].value, "--chunk-kib", STITCH_CHUNK_MAX >> 10, &v))
      return 2;
    if (v < 4)
      return cli_usage_error("--chunk-kib: at least 4");
    o.chunk_bytes = (size_t)v << 10;
  }
  if (fl[4].value) {
    if (cli_parse_u64(fl[4].value, "--max-chain", 1u << 20, &v) || v == 0)
      return cli_usage_error("--max-chain: at least 1");
    o.max_chain = (unsigned)v;
  }
  if (fl[5].value) {
    char *end;
    o.anchor_ratio = strtod(fl[5].value, &end);
    if (*end != 0 || !(o.anchor_ratio > 0 && o.anchor_ratio <= 100))
      return cli_usage_error("--anchor-ratio: a number above 0");
  }
  if (fl[6].value) {
    if (cli_parse_u64(fl[6].value, "--cumulative-every", 1u << 20, &v))
      return 2;
    o.cumulative_every = v == 0 ? UINT32_MAX : (unsigned)v;
  }
  if (fl[7].value) {
    if (cli_parse_u64(fl[7].value, "--keep", 1u << 20, &v) || v == 0)
      return cli_usage_error("--keep: at least 1");
    o.keep = (unsigned)v;
  }
  if (fl[8].value) /* deltas as RANS: docs/codec.md "The fastest mode" */
    o.sparse_mode = STITCH_SPARSE_FASTEST;
  int last = -1;
  if (isatty(2)) {
    o.progress = cli_progress;
    o.progress_arg = &last;
  }
  stitch_diag d = {{0}};
  stitch_seckey sk;
  stitch_st *ck = NULL;
  stitch_publish_result r;
  int rc = stitch_seckey_read(fl[0].value, &sk, NULL, &d);
  if (rc == 0)
    rc = stitch_st_open(pos[0], &ck, &d);
  if (rc == 0)
    rc = stitch_publish(fl[1].value, &sk, ck, &o, &r, &d);
  memset(&sk, 0, sizeof(sk));
  stitch_st_free(ck);
  if (rc != 0)
    return cli_fail(rc, &d);
  char id[65];
  stitch_digest_hex(&r.id, id);
  if (fl[2].value) {
    printf("{\"version\": %" PRIu64 ", \"id\": \"%s\", \"view_bytes\": %" PRIu64
           ", \"objects\": [",
           r.version, id, r.view_bytes);
    for (size_t i = 0; i < r.n_objects; i++)
      printf("%s{\"kind\": \"%s\", \"base\": %" PRIu64 ", \"bytes\": %" PRIu64
             ", \"chunks\": %" PRIu64 "}",
             i ? ", " : "", stitch_obj_kind_name(r.kind[i]), r.base[i],
             r.bytes[i], r.chunks[i]);
    printf("]}\n");
    return 0;
  }
  printf("version %" PRIu64 " (%.16s), view %.1f MB:", r.version, id,
         (double)r.view_bytes / 1e6);
  for (size_t i = 0; i < r.n_objects; i++) {
    if (r.kind[i] == STITCH_OBJ_ANCHOR)
      printf("%s anchor", i ? ";" : "");
    else
      printf("%s %s from %" PRIu64, i ? ";" : "",
             stitch_obj_kind_name(r.kind[i]), r.base[i]);
    printf(" %" PRIu64 " B in %" PRIu64 " chunk%s", r.bytes[i], r.chunks[i],
           r.chunks[i] == 1 ? "" : "s");
  }
  printf("\n");
  return 0;
}

int cmd_pull(int argc, char **argv) {
  flag fl[] = {{"--store", 1, NULL},
               {"--pub", 1, NULL},
               {"--weights", 1, NULL},
               {"--threads", 1, NULL}};
  const char *pos[1];
  int n = cli_parse_args(argc, argv, pos, 0, fl, 4);
  if (n != 0 || !fl[0].value || !fl[1].value || !fl[2].value)
    return n < 0 ? 2
                 : cli_usage_error("stitch pull --store DIR --pub PREFIX.pub "
                                   "--weights FILE [--threads N]");
  stitch_apply_opts o = {0};
  uint64_t v = 0;
  if (fl[3].value) {
    if (cli_parse_u64(fl[3].value, "--threads", 1024, &v))
      return 2;
    o.threads = (unsigned)v;
  }
  int last = -1;
  if (isatty(2)) {
    o.progress = cli_progress;
    o.progress_arg = &last;
  }
  stitch_diag d = {{0}};
  stitch_pubkey pk;
  stitch_pull_result r;
  int rc = stitch_pubkey_read(fl[1].value, &pk, &d);
  if (rc == 0)
    rc = stitch_pull(fl[0].value, &pk, fl[2].value, &o, &r, &d);
  if (rc != 0)
    return cli_fail(rc, &d);
  if (r.recovered)
    printf("%s: recovered an interrupted apply\n", fl[2].value);
  if (r.plan.n == 0) {
    printf("%s: already at version %" PRIu64 "\n", fl[2].value, r.to);
    return 0;
  }
  printf("%s: version %" PRIu64 " -> %" PRIu64 " (%" PRIu64 " B):",
         fl[2].value, r.from, r.to, r.plan.bytes);
  for (size_t i = 0; i < r.plan.n; i++)
    printf(" %" PRIu64 "/%u", r.plan.step[i].version, r.plan.step[i].object);
  printf("\n");
  return 0;
}

static int open_store(const char *dir, const char *pub, stitch_store **s,
                      stitch_diag *d) {
  stitch_pubkey pk;
  int rc = stitch_pubkey_read(pub, &pk, d);
  return rc != 0 ? rc : stitch_store_open(dir, &pk, 0, s, d);
}

int cmd_log(int argc, char **argv) {
  flag fl[] = {{"--store", 1, NULL}, {"--pub", 1, NULL}, {"--json", 0, NULL}};
  const char *pos[1];
  int n = cli_parse_args(argc, argv, pos, 0, fl, 3);
  if (n != 0 || !fl[0].value || !fl[1].value)
    return n < 0 ? 2
                 : cli_usage_error(
                       "stitch log --store DIR --pub PREFIX.pub [--json]");
  stitch_diag d = {{0}};
  stitch_store *s;
  int rc = open_store(fl[0].value, fl[1].value, &s, &d);
  if (rc != 0)
    return cli_fail(rc, &d);
  if (fl[2].value)
    printf("{\"latest\": %" PRIu64 ", \"versions\": [",
           stitch_store_latest(s));
  for (size_t i = 0; i < stitch_store_count(s); i++) {
    const stitch_vref *r = stitch_store_at(s, i);
    char id[65], kinds[256];
    stitch_digest_hex(&r->id, id);
    kind_list(r->m, kinds, sizeof(kinds));
    uint64_t bytes = 0;
    if (fl[2].value) {
      char view[65];
      stitch_digest_hex(&r->m->view, view);
      printf("%s{\"version\": %" PRIu64 ", \"id\": \"%s\", \"view\": \"%s\", "
             "\"time\": %" PRIu64 ", \"objects\": [",
             i ? ", " : "", r->m->version, id, view, r->m->time_unix);
      for (uint64_t o = 0; o < r->m->n_objects; o++)
        printf("%s{\"kind\": \"%s\", \"base\": %" PRIu64
               ", \"bytes\": %" PRIu64 ", \"chunks\": %" PRIu64 "}",
               o ? ", " : "", stitch_obj_kind_name(r->m->objects[o].kind),
               r->m->objects[o].base_version, r->m->objects[o].bytes,
               r->m->objects[o].n_chunks);
      printf("]}");
      continue;
    }
    for (uint64_t o = 0; o < r->m->n_objects; o++)
      bytes += r->m->objects[o].bytes;
    printf("%8" PRIu64 "  %.16s  %-28s %12" PRIu64 " B%s\n", r->m->version,
           id, kinds, bytes,
           r->m->version == stitch_store_latest(s) ? "  (latest)" : "");
  }
  if (fl[2].value)
    printf("]}\n");
  stitch_store_close(s);
  return 0;
}

int cmd_verify(int argc, char **argv) {
  flag fl[] = {{"--store", 1, NULL}, {"--pub", 1, NULL}};
  const char *pos[1];
  int n = cli_parse_args(argc, argv, pos, 0, fl, 2);
  if (n != 0 || !fl[0].value || !fl[1].value)
    return n < 0 ? 2
                 : cli_usage_error("stitch verify --store DIR --pub PREFIX.pub");
  stitch_diag d = {{0}};
  stitch_store *s;
  int rc = open_store(fl[0].value, fl[1].value, &s, &d);
  if (rc != 0)
    return cli_fail(rc, &d);
  uint64_t chunks = 0;
  rc = stitch_store_verify(s, &chunks, &d);
  size_t count = stitch_store_count(s);
  uint64_t latest = stitch_store_latest(s);
  stitch_store_close(s);
  if (rc != 0)
    return cli_fail(rc, &d);
  printf("%s: %zu versions, %" PRIu64 " chunks verified; latest %" PRIu64 "\n",
         fl[0].value, count, chunks, latest);
  return 0;
}

int cmd_recover(int argc, char **argv) {
  flag fl[] = {{"--weights", 1, NULL}};
  const char *pos[1];
  int n = cli_parse_args(argc, argv, pos, 0, fl, 1);
  if (n != 0 || !fl[0].value)
    return n < 0 ? 2 : cli_usage_error("stitch recover --weights FILE");
  const char *w = fl[0].value;
  stitch_diag d = {{0}};
  int recovered = 0;
  unsigned swept = 0;
  stitch_wstate st;
  /* Swept first (recover sweeps too, then finds none) to count them. */
  int rc = stitch_weights_sweep(w, &swept, &d);
  if (rc == 0)
    rc = stitch_weights_recover(w, &recovered, &d);
  if (rc == 0)
    rc = stitch_weights_state(w, &st, &d);
  char also[96] = "";
  int k = recovered ? snprintf(also, sizeof(also),
                               " (recovered an interrupted apply)")
                    : 0;
  if (swept > 0)
    snprintf(also + k, sizeof(also) - (size_t)k,
             " (removed %u stale temporar%s)", swept, swept == 1 ? "y" : "ies");
  struct stat sb;
  int exists = stat(w, &sb) == 0;
  if (rc == STITCH_ENOTFOUND && exists && !S_ISREG(sb.st_mode)) {
    rc = STITCH_EINVAL;
    snprintf(d.msg, sizeof(d.msg), "%.200s: not a weights file", w);
  }
  if (rc == STITCH_ENOTFOUND && !exists) {
    /* An anchor that never landed: nothing there, as before. */
    printf("%s: no weights yet%s\n", w, also);
    return 0;
  }
  if (rc == STITCH_ENOTFOUND) {
    /* A file no pull has touched: no journal and no state is not an
     * error, there is just nothing to settle. */
    printf("%s: nothing to recover (no stitch state)%s\n", w, also);
    return 0;
  }
  if (rc != 0)
    return cli_fail(rc, &d);
  char view[65];
  stitch_digest_hex(&st.view, view);
  printf("%s: version %" PRIu64 " view %s%s\n", w, st.version, view, also);
  return 0;
}

/* The head of a chunk (proto/chunk.md): its header and block entries,
 * everything before the payloads. 0 when BUF does not parse as one (the
 * caller then counts the chunk as payload and says so). */
static uint64_t chunk_head(const uint8_t *b, size_t len) {
  size_t at = 16;
  uint64_t n = 0, v;
  if (len < 17 || memcmp(b, "STITCHCK", 8) != 0)
    return 0;
  /* varint n_entries, then per entry: gap varint, coding u8, payload_len
   * varint, changed varint, checksum u64 */
  for (int k = -1; k < 0 || (uint64_t)k < n; k++) {
    int fields = k < 0 ? 1 : 4;
    for (int f = 0; f < fields; f++) {
      if (k >= 0 && f == 1) { /* coding */
        if (at >= len)
          return 0;
        at++;
        continue;
      }
      v = 0;
      for (int s = 0;; s += 7) {
        if (at >= len || s > 63)
          return 0;
        uint8_t c = b[at++];
        v |= (uint64_t)(c & 127) << s;
        if (c < 128)
          break;
      }
      if (k < 0)
        n = v;
    }
    if (k >= 0) {
      if (len - at < 8)
        return 0;
      at += 8;
    }
    if (k < 0 && n > len / 12)
      return 0;
  }
  return at;
}

/* `stitch inspect --store DIR --pub P VERSION`: where a version's bytes
 * go. Its manifest is all fixed (the signature, every tensor's name,
 * shape and 32-byte digest, one flag byte a tensor an object, an entry a
 * chunk); each chunk's header and block entries are fixed, the rest its
 * payloads (block parameters included: `stitch inspect` on a delta file
 * splits those out). */
int cli_inspect_version(const char *dir, const char *pub, const char *ver,
                        int as_json) {
  uint64_t v;
  if (cli_parse_u64(ver, "VERSION", UINT64_MAX, &v))
    return 2;
  stitch_diag d = {{0}};
  stitch_store *s;
  int rc = open_store(dir, pub, &s, &d);
  if (rc != 0)
    return cli_fail(rc, &d);
  const stitch_vref *r = stitch_store_find(s, v);
  uint8_t *mb = NULL;
  size_t ml = 0;
  if (r == NULL) {
    rc = STITCH_ENOTFOUND;
    snprintf(d.msg, sizeof(d.msg), "%.200s holds no version %" PRIu64, dir, v);
  } else {
    rc = stitch_store_read_manifest(dir, v, &r->id, &mb, &ml, &d);
  }
  free(mb);
  if (rc != 0) {
    stitch_store_close(s);
    return cli_fail(rc, &d);
  }
  const stitch_manifest *m = r->m;
  uint64_t total = ml, fixed = ml;
  if (as_json)
    printf("{\"kind\": \"version\", \"version\": %" PRIu64
           ", \"manifest_bytes\": %zu, \"tensors\": %" PRIu64
           ", \"objects\": [",
           v, ml, m->n_tensors);
  else
    printf("version %" PRIu64 ": manifest %zu B (%" PRIu64 " tensors)\n", v,
           ml, m->n_tensors);
  for (uint64_t o = 0; o < m->n_objects && rc == 0; o++) {
    const stitch_object *ob = &m->objects[o];
    uint64_t head = 0, bytes = 0, odd = 0;
    for (uint64_t c = 0; c < ob->n_chunks && rc == 0; c++) {
      const uint8_t *cb;
      size_t cl;
      rc = stitch_store_get_chunk(s, &ob->chunks[c].hash, &cb, &cl, &d);
      if (rc != 0)
        break;
      uint64_t h = chunk_head(cb, cl);
      odd += h == 0;
      head += h;
      bytes += cl;
      stitch_store_release(cb, cl);
    }
    if (rc != 0)
      break;
    total += bytes;
    fixed += head;
    char kind[48];
    if (ob->kind == STITCH_OBJ_ANCHOR)
      snprintf(kind, sizeof(kind), "anchor");
    else
      snprintf(kind, sizeof(kind), "%s from %" PRIu64,
               stitch_obj_kind_name(ob->kind), ob->base_version);
    if (as_json)
      printf("%s{\"kind\": \"%s\", \"base\": %" PRIu64 ", \"chunks\": %" PRIu64
             ", \"bytes\": %" PRIu64 ", \"chunk_heads\": %" PRIu64
             ", \"payloads\": %" PRIu64 "}",
             o ? ", " : "", stitch_obj_kind_name(ob->kind), ob->base_version,
             ob->n_chunks, bytes, head, bytes - head);
    else
      printf("object %" PRIu64 " (%s): %" PRIu64 " B in %" PRIu64
             " chunks = chunk headers and block entries %" PRIu64
             " + payloads %" PRIu64 "%s\n",
             o, kind, bytes, ob->n_chunks, head, bytes - head,
             odd ? " (some chunks did not parse: counted as payload)" : "");
  }
  stitch_store_close(s);
  if (rc != 0) {
    if (as_json)
      printf("]}\n");
    return cli_fail(rc, &d);
  }
  if (as_json)
    printf("], \"bytes\": %" PRIu64 ", \"fixed\": %" PRIu64 "}\n", total,
           fixed);
  else
    printf("fixed  %" PRIu64 " B of %" PRIu64 " (%.1f%%): the manifest, and "
           "every chunk's header and block entries\n",
           fixed, total, total ? 100.0 * (double)fixed / (double)total : 0.0);
  return 0;
}
