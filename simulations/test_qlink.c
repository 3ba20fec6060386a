/* test_qlink.c: the queues network's link calendar (qlink.h). */
#include "qlink.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int failures;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond);      \
      failures++;                                                     \
    }                                                                 \
  } while (0)

#define NEAR(a, b) CHECK(fabs((a) - (b)) < 1e-9)

/* Books BYTES from FROM on L, with NOW = 0; returns the start. */
static double book(qlink *l, double from, double bytes, double *end) {
  double st = from;
  *end = 0;
  CHECK(qlink_book(l, 0, bytes, &st, end) == 0);
  return st;
}

/* A message booked ahead leaves the time before it to a later one that
 * fits; one that does not fit goes after. */
static void gaps(void) {
  qlink l = {.bps = 1000}; /* 1000 bytes a second */
  double end;
  NEAR(book(&l, 5, 1000, &end), 5); /* [5, 6) */
  NEAR(end, 6);
  NEAR(book(&l, 0, 2000, &end), 0); /* [0, 2): before it */
  NEAR(book(&l, 1, 3500, &end), 6); /* 3.5 s from 2 do not fit by 5 */
  NEAR(end, 9.5);
  NEAR(book(&l, 1, 1000, &end), 2); /* [2, 3) fits */
  NEAR(book(&l, 0, 2000, &end), 3); /* [3, 5) exactly fills the gap */
  CHECK(l.n == 1);                  /* all touching: one span */
  NEAR(l.b[0].from, 0);
  NEAR(l.b[0].to, 9.5);
  /* The end given in is kept when later: the route's other links. */
  double st = 0;
  end = 20;
  CHECK(qlink_book(&l, 0, 1000, &st, &end) == 0);
  NEAR(st, 9.5);
  NEAR(end, 20);
  /* Spans over by NOW are forgotten. */
  st = 30;
  end = 0;
  CHECK(qlink_book(&l, 25, 1000, &st, &end) == 0);
  CHECK(l.n == 1);
  NEAR(l.b[0].from, 30);
  qlink_free(&l);
}

/* Random bookings never overlap, each starts at the first moment it fits,
 * and the link never carries more than its rate. */
static void random_bookings(void) {
  qlink l = {.bps = 1e6};
  uint64_t x = 88172645463325252ull;
  double total = 0, last_end = 0;
  struct { double from, to; } got[2000];
  for (int k = 0; k < 2000; k++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    double from = (double)(x % 100000) / 1e3; /* 0 to 100 s */
    double bytes = 1 + (double)((x >> 20) % 200000);
    double end = 0, st = from;
    CHECK(qlink_book(&l, 0, bytes, &st, &end) == 0);
    CHECK(st >= from);
    NEAR(end, st + bytes / 1e6);
    /* First fit: st is from or the end of an earlier booking, and no
     * earlier start (from, or an earlier booking's end, in [from, st))
     * had room for the message. */
    double took = bytes / 1e6;
    int at_end = st == from;
    for (int j = 0; j < k && !at_end; j++)
      at_end = fabs(got[j].to - st) < 1e-9;
    CHECK(at_end);
    for (int j = -1; j < k; j++) {
      double t = j < 0 ? from : got[j].to;
      if (t < from || t >= st - 1e-9)
        continue;
      int clash = 0; /* [t, t + took) overlaps a booking */
      for (int i = 0; i < k && !clash; i++)
        clash = t + took > got[i].from + 1e-9 && t < got[i].to - 1e-9;
      CHECK(clash);
    }
    for (int j = 0; j < k; j++)
      CHECK(end <= got[j].from + 1e-9 || st >= got[j].to - 1e-9);
    got[k].from = st;
    got[k].to = end;
    total += bytes / 1e6;
    last_end = fmax(last_end, end);
  }
  double booked = 0;
  for (size_t i = 0; i < l.n; i++) {
    CHECK(l.b[i].from < l.b[i].to);
    CHECK(i == 0 || l.b[i - 1].to < l.b[i].from);
    booked += l.b[i].to - l.b[i].from;
  }
  CHECK(fabs(booked - total) < 1e-6 * total);
  CHECK(last_end >= total); /* never faster than the link */
  qlink_free(&l);
}

/* When only a low-water mark is left of a message on its sender's
 * uplink (queue.c's EV_SENT): its last bytes leave at the link's rate,
 * and a mark as large as the message is the message's start. */
static void marks(void) {
  qlink l = {.bps = 1000};
  double end, st = book(&l, 0, 800, &end); /* [0, 0.8) */
  NEAR(qlink_left(&l, st, end, 200), 0.6);
  NEAR(qlink_left(&l, st, end, 800), 0);
  NEAR(qlink_left(&l, st, end, 5000), 0);
  st = book(&l, 0, 400, &end); /* behind it: [0.8, 1.2) */
  NEAR(st, 0.8);
  NEAR(qlink_left(&l, st, end, 100), 1.1);
  NEAR(qlink_left(&l, st, end, 1000), 0.8);
  qlink_free(&l);
}

/* Bytes charged beside the queues (qlink_charge): nothing on an idle
 * link; on a busy one, carried by the next booking, once. */
static void charges(void) {
  qlink l = {.bps = 1000};
  double end;
  qlink_charge(&l, 0, 500); /* idle: they go at once */
  NEAR(book(&l, 0, 1000, &end), 0);
  NEAR(end, 1); /* [0, 1) */
  qlink_charge(&l, 0.5, 200); /* while [0, 1) is out */
  qlink_charge(&l, 0.9, 100);
  NEAR(book(&l, 0, 1000, &end), 1);
  NEAR(end, 2.3); /* 1000 bytes and the 300 charged */
  NEAR(book(&l, 0, 100, &end), 2.3);
  NEAR(end, 2.4); /* paid once */
  qlink_charge(&l, 2.4, 700); /* at the end of the last booking: idle */
  NEAR(book(&l, 0, 100, &end), 2.4);
  NEAR(end, 2.5);
  CHECK(l.n == 1);
  NEAR(l.carried, 3700); /* all of it, booked or charged, idle or not */
  qlink_free(&l);
}

int main(void) {
  gaps();
  charges();
  marks();
  random_bookings();
  if (failures)
    fprintf(stderr, "test_qlink: %d failures\n", failures);
  return failures != 0;
}
