/* chan_bench.c: stitch-bench-chan, the CPU cost of a link's record layer
 * (src/swarm/channel.c; docs/benchmarks.md "Link encryption"). A
 * benchmark, not a test: it prints figures, and fails only when a record
 * does not open to the bytes that were sealed.
 *
 *   stitch-bench-chan [--mib N] [--record BYTES] [--reps R]
 *
 * Two ends of one link (keys from crypto_kx, as a handshake makes them):
 * one seals N MiB (default 1024) of pseudo-random bytes in records of
 * BYTES plaintext (default 16384, CHAN_REC_MAX), the other opens every
 * record in 64 KiB reads, as they would come off the socket. The stream
 * goes in batches of 4 MiB (sealed, then opened while still in cache, as
 * a socket's buffers would be). Seal and open are timed apart, one
 * thread, best of R (default 3) passes; the figures are CPU seconds
 * (CLOCK_PROCESS_CPUTIME_ID) and GB/s (1e9 bytes) of plaintext.
 *
 * For callgrind, bench_seal_once and bench_open_once do only the measured
 * work: valgrind --tool=callgrind --toggle-collect='bench_*_once' ...
 *
 * Reaches into src/swarm/channel.h the way tests do: the record layer has
 * no public API. */
#define _POSIX_C_SOURCE 200809L
#include "swarm/channel.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROG "stitch-bench-chan"
#define MAX_MIB (64 * 1024)

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define BATCH ((size_t)4 << 20)

/* Seals TOTAL bytes of SRC in records of REC bytes into WIRE (emptied
 * first), which has room for them all. */
__attribute__((noinline)) static int
bench_seal_once(chan *tx, const uint8_t *src, size_t total, size_t rec,
                dbuf *wire) {
  wire->len = 0;
  for (size_t done = 0; done < total; done += rec) {
    size_t n = total - done < rec ? total - done : rec;
    int rc = chan_seal(tx, src + done, n, wire);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* Opens every record of WIRE in socket-sized reads (64 KiB) and adds the
 * plaintext bytes to *GOT; CHECK: compare them with SRC. */
__attribute__((noinline)) static int
bench_open_once(chan *rx, const dbuf *wire, const uint8_t *src, int check,
                size_t *got) {
  stitch_diag d = {0};
  size_t off = 0, pos = 0;
  while (pos < wire->len) {
    size_t len = wire->len - pos < 65536 ? wire->len - pos : 65536;
    size_t used;
    const uint8_t *plain;
    size_t plain_len;
    int rc = chan_open(rx, wire->p + pos, len, &used, &plain, &plain_len, &d);
    if (rc != 0) {
      fprintf(stderr, PROG ": %s\n", d.msg);
      return rc;
    }
    pos += used;
    if (plain_len == 0)
      continue;
    if (check && memcmp(plain, src + off, plain_len) != 0)
      return STITCH_ECHECKSUM;
    off += plain_len;
    *got += plain_len;
  }
  return 0;
}

static int usage(void) {
  fprintf(stderr, "usage: " PROG " [--mib N] [--record BYTES] [--reps R]\n");
  return 2;
}

int main(int argc, char **argv) {
  long mib = 1024, rec = CHAN_REC_MAX, reps = 3;
  for (int i = 1; i < argc; i++) {
    long *dst = !strcmp(argv[i], "--mib")      ? &mib
                : !strcmp(argv[i], "--record") ? &rec
                : !strcmp(argv[i], "--reps")   ? &reps
                                               : NULL;
    if (dst == NULL || i + 1 >= argc)
      return usage();
    char *end;
    *dst = strtol(argv[++i], &end, 10);
    if (*end != '\0')
      return usage();
  }
  if (mib < 1 || mib > MAX_MIB || rec < 1 || rec > CHAN_REC_MAX || reps < 1 ||
      reps > 100)
    return usage();
  if (sodium_init() < 0) {
    fprintf(stderr, PROG ": libsodium failed to start\n");
    return 1;
  }
  size_t total = (size_t)mib << 20;
  /* One batch of source bytes, sealed again and again: the cipher does
   * not care what it encrypts. */
  uint8_t *src = malloc(BATCH);
  dbuf wire = {.max = BATCH + (BATCH / (size_t)rec + 1) * CHAN_OVERHEAD};
  if (src == NULL || dbuf_reserve(&wire, wire.max) != 0) {
    fprintf(stderr, PROG ": out of memory\n");
    return 1;
  }
  randombytes_buf(src, BATCH);
  memset(wire.p, 0, wire.cap); /* fault the pages in before timing */

  double best_seal = 1e30, best_open = 1e30;
  for (long r = 0; r < reps; r++) {
    chan tx = {0}, rx = {0};
    uint8_t s1[32], s2[32];
    stitch_diag d = {0};
    randombytes_buf(s1, sizeof(s1));
    randombytes_buf(s2, sizeof(s2));
    chan_keypair(&tx, s1);
    chan_keypair(&rx, s2);
    if (chan_start(&tx, 1, rx.pk, &d) != 0 || chan_start(&rx, 0, tx.pk, &d)) {
      fprintf(stderr, PROG ": %s\n", d.msg);
      return 1;
    }
    double seal = 0, open = 0;
    size_t got = 0;
    int rc = 0;
    for (size_t done = 0; rc == 0 && done < total; done += BATCH) {
      size_t n = total - done < BATCH ? total - done : BATCH;
      double t0 = cpu_now();
      rc = bench_seal_once(&tx, src, n, (size_t)rec, &wire);
      double t1 = cpu_now();
      /* Checked on the first batch only: memcmp is not the record layer. */
      if (rc == 0)
        rc = bench_open_once(&rx, &wire, src, done == 0, &got);
      double t2 = cpu_now();
      seal += t1 - t0;
      open += t2 - t1;
    }
    chan_free(&tx);
    chan_free(&rx);
    if (rc != 0 || got != total) {
      fprintf(stderr, PROG ": records did not open to the sealed bytes\n");
      return 1;
    }
    best_seal = seal < best_seal ? seal : best_seal;
    best_open = open < best_open ? open : best_open;
  }
  double gb = (double)total / 1e9;
  printf("%ld MiB in %ld-byte records, best of %ld, one thread\n", mib, rec,
         reps);
  printf("seal  %.3f s  %.2f GB/s\n", best_seal, gb / best_seal);
  printf("open  %.3f s  %.2f GB/s\n", best_open, gb / best_open);
  printf("both  %.3f s  %.2f s per GB\n", best_seal + best_open,
         (best_seal + best_open) / gb);
  free(src);
  dbuf_free(&wire);
  return 0;
}
