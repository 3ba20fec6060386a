/* failalloc.c: see failalloc.h. The library's calls to malloc, calloc,
 * realloc and strdup land here (objcopy renamed them in the test's copy of
 * libstitch.a). The tests drive the library on one thread (threads = 1);
 * the counters are atomics all the same, so a stray worker thread cannot
 * tear them. */
#define _POSIX_C_SOURCE 200809L
#include "failalloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

void *fa_malloc(size_t n);
void *fa_calloc(size_t n, size_t size);
void *fa_realloc(void *p, size_t n);
char *fa_strdup(const char *s);

static atomic_int armed, paused, failed, sticky;
static atomic_uint_fast64_t count, fail_at;

typedef struct fa_site {
  const void *ra;
  uint64_t first; /* ordinal first met in this run; 0: not met */
} fa_site;

static fa_site sites[FA_MAX_SITES];
static size_t n_sites;

static void note_site(const void *ra, uint64_t k) {
  for (size_t i = 0; i < n_sites; i++)
    if (sites[i].ra == ra) {
      if (sites[i].first == 0)
        sites[i].first = k;
      return;
    }
  if (n_sites < FA_MAX_SITES)
    sites[n_sites++] = (fa_site){ra, k};
}

/* Whether this allocation (made from RA) is the one to fail. */
static int should_fail(const void *ra) {
  if (!atomic_load(&armed) || atomic_load(&paused) > 0)
    return 0;
  uint64_t k = atomic_fetch_add(&count, 1) + 1;
  note_site(ra, k);
  uint64_t at = atomic_load(&fail_at);
  if (at == 0 || k < at || (k > at && !atomic_load(&sticky)))
    return 0;
  atomic_store(&failed, 1);
  return 1;
}

void *fa_malloc(size_t n) {
  return should_fail(__builtin_return_address(0)) ? NULL : malloc(n);
}

void *fa_calloc(size_t n, size_t size) {
  return should_fail(__builtin_return_address(0)) ? NULL : calloc(n, size);
}

void *fa_realloc(void *p, size_t n) {
  return should_fail(__builtin_return_address(0)) ? NULL : realloc(p, n);
}

char *fa_strdup(const char *s) {
  return should_fail(__builtin_return_address(0)) ? NULL : strdup(s);
}

void fa_arm(uint64_t at) {
  atomic_store(&count, 0);
  atomic_store(&fail_at, at);
  atomic_store(&failed, 0);
  atomic_store(&paused, 0);
  for (size_t i = 0; i < n_sites; i++)
    sites[i].first = 0;
  atomic_store(&armed, 1);
}

void fa_set_sticky(int on) { atomic_store(&sticky, on); }
void fa_disarm(void) { atomic_store(&armed, 0); }
void fa_pause(void) { atomic_fetch_add(&paused, 1); }
void fa_resume(void) { atomic_fetch_sub(&paused, 1); }
uint64_t fa_count(void) { return atomic_load(&count); }
int fa_failed(void) { return atomic_load(&failed); }

void fa_sites_reset(void) { n_sites = 0; }
size_t fa_sites(void) { return n_sites; }

size_t fa_site_firsts(uint64_t *out, size_t cap) {
  size_t k = 0;
  for (size_t i = 0; i < n_sites && k < cap; i++)
    if (sites[i].first != 0)
      out[k++] = sites[i].first;
  return k;
}
