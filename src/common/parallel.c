/* parallel.c: see parallel.h. */
#define _GNU_SOURCE
#include "common/parallel.h"

#include "common/diag.h"
#include "stitch/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define PAR_MAX_THREADS 64

typedef struct par_job {
  par_fn fn;
  void *ctx;
  size_t n;
  atomic_size_t next;
  atomic_int stop;
  pthread_mutex_t mu;
  int rc;
  size_t rc_item;
} par_job;

typedef struct par_worker {
  par_job *job;
  unsigned id;
} par_worker;

static void record(par_job *j, size_t item, int rc) {
  pthread_mutex_lock(&j->mu);
  if (j->rc == 0 || item < j->rc_item) {
    j->rc = rc;
    j->rc_item = item;
  }
  pthread_mutex_unlock(&j->mu);
  atomic_store(&j->stop, 1);
}

static void *run(void *arg) {
  par_worker *w = arg;
  par_job *j = w->job;
  for (;;) {
    if (atomic_load(&j->stop))
      break;
    size_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->n)
      break;
    int rc = j->fn(j->ctx, i, w->id);
    if (rc != 0)
      record(j, i, rc);
  }
  return NULL;
}

unsigned stitch_parallel_threads(unsigned threads, size_t n) {
  if (threads == 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    threads = c > 0 ? (unsigned)c : 1;
  }
  if (threads > PAR_MAX_THREADS)
    threads = PAR_MAX_THREADS;
  if (threads > n)
    threads = n > 0 ? (unsigned)n : 1;
  return threads;
}

int stitch_parallel_for(size_t n, unsigned threads, par_fn fn, void *ctx,
                        size_t *failed_item) {
  threads = stitch_parallel_threads(threads, n);
  par_job j = {.fn = fn, .ctx = ctx, .n = n};
  atomic_init(&j.next, 0);
  atomic_init(&j.stop, 0);
  pthread_mutex_init(&j.mu, NULL);
  pthread_t tid[PAR_MAX_THREADS];
  par_worker w[PAR_MAX_THREADS];
  unsigned started = 0;
  for (unsigned t = 1; t < threads; t++) {
    w[t] = (par_worker){&j, t};
    if (pthread_create(&tid[t], NULL, run, &w[t]) != 0)
      break; /* fewer threads: the work still gets done */
    started = t;
  }
  w[0] = (par_worker){&j, 0};
  run(&w[0]);
  for (unsigned t = 1; t <= started; t++)
    pthread_join(tid[t], NULL);
  pthread_mutex_destroy(&j.mu);
  if (failed_item != NULL)
    *failed_item = j.rc_item;
  return j.rc;
}

typedef struct diag_job {
  par_diag_fn fn;
  void *ctx;
  size_t scratch_len;
  uint8_t **scratch; /* one per worker, allocated on first use */
  stitch_diag *diag; /* one per worker */
  size_t *failed;    /* the item each worker's diag is about */
} diag_job;

static int diag_item(void *ctx, size_t item, unsigned worker) {
  diag_job *j = ctx;
  int rc;
  if (j->scratch[worker] == NULL &&
      (j->scratch[worker] = malloc(j->scratch_len ? j->scratch_len : 1)) ==
          NULL)
    rc = stitch_diag_set(&j->diag[worker], STITCH_ENOMEM, "out of memory");
  else
    rc = j->fn(j->ctx, item, j->scratch[worker], &j->diag[worker]);
  if (rc != 0)
    j->failed[worker] = item;
  return rc;
}

int stitch_parallel_diag(size_t n, unsigned threads, size_t scratch_len,
                         par_diag_fn fn, void *ctx, stitch_diag *d) {
  if (n == 0)
    return 0;
  threads = stitch_parallel_threads(threads, n);
  diag_job j = {fn,
                ctx,
                scratch_len,
                calloc(threads, sizeof(uint8_t *)),
                calloc(threads, sizeof(stitch_diag)),
                calloc(threads, sizeof(size_t))};
  int rc = STITCH_ENOMEM;
  if (j.scratch != NULL && j.diag != NULL && j.failed != NULL) {
    size_t bad = 0;
    rc = stitch_parallel_for(n, threads, diag_item, &j, &bad);
    /* The message of the lowest failing item, whichever worker ran it. */
    for (unsigned w = 0; rc != 0 && d != NULL && w < threads; w++)
      if (j.diag[w].msg[0] != 0 && j.failed[w] == bad)
        *d = j.diag[w];
  } else {
    stitch_diag_set(d, rc, "out of memory");
  }
  for (unsigned w = 0; j.scratch != NULL && w < threads; w++)
    free(j.scratch[w]);
  free(j.scratch);
  free(j.diag);
  free(j.failed);
  return rc;
}
