/* qlink.h: one link of the "queues" network (queue.c), as a calendar of
 * the times it is booked (docs/simulator.md, "Two networks").
 *
 * A message takes the first free stretch of the link long enough for it
 * from the moment it can start there. A message booked far ahead (its
 * sender's uplink has a backlog) therefore leaves the time before it to
 * others, as on a real link, where bytes occupy a receiver's downlink
 * only once they have left the sender. Booking only after the last
 * message booked would leave the receiver's downlink idle until then:
 * with every node serving a few requesters at once, that cost a node
 * about a tenth of its downlink. */
#ifndef STITCH_SIM_QLINK_H
#define STITCH_SIM_QLINK_H

#include <stddef.h>

typedef struct qlink_span {
  double from, to; /* seconds */
} qlink_span;

typedef struct qlink {
  qlink_span *b; /* booked, ascending and disjoint; touching spans join */
  size_t n, cap;
  double bps; /* bytes per second */
  double debt; /* bytes charged while it was busy (qlink_charge), which
                  its next booking carries */
  double carried; /* every byte booked or charged on it */
} qlink;

/* Books BYTES on L in its first free stretch from *START (when the
 * previous link of the route started passing them on), and sets *START
 * to when they start on L; *END becomes the later of itself and when they
 * leave L. Bookings that ended by NOW are forgotten. Returns 0, or -1 out
 * of memory (L unchanged but for the forgetting). */
int qlink_book(qlink *l, double now, double bytes, double *start,
               double *end);

/* When a message that leaves L over [START, END) (as qlink_book booked
 * it, in one stretch) has only BYTES of it left to leave: their time at
 * L's rate before END, or START if the message is no larger. */
double qlink_left(const qlink *l, double start, double end, double bytes);

/* BYTES that pass beside the queues at T (a control frame, an
 * acknowledgement) take their share of L: nothing if L is idle then (they
 * go at once), else they are added to L's next booking, so that the bulk
 * after them finds less room. Never a span of their own: specks of a few
 * bytes between bookings left gaps that no piece fit. */
void qlink_charge(qlink *l, double t, double bytes);

void qlink_free(qlink *l);

#endif
