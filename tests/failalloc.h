/* failalloc.h: fail the Nth allocation libstitch makes, for
 * tests/test_failalloc.c (after nghttp2's tests/failmalloc_test.c and
 * curl's torture mode).
 *
 * How the hook reaches the library, and why that way: tests/CMakeLists.txt
 * makes libstitch_failalloc.a, a copy of libstitch.a whose undefined
 * references to malloc, calloc, realloc and strdup objcopy renames to
 * fa_malloc, fa_calloc, fa_realloc and fa_strdup (failalloc.c). Only that
 * copy, linked into this one test, knows the hook:
 *   - the shipped library is not rebuilt, changed or given a hook;
 *   - only libstitch's own allocations are counted (and msgpack-c's inline
 *     buffer functions compiled into it), never the test's, libc's or the
 *     shared libraries' (libsodium, zstd, jansson), so the test's
 *     harness and the swarm's in-memory network keep working while the
 *     library fails;
 *   - it needs no source changes and no feature-macro games, which a
 *     forced include of "#define malloc ..." would (it must come before
 *     <stdlib.h> but may not set the feature macros each source sets);
 *   - it works the same on an ASan build: fa_* call the real malloc, which
 *     there is ASan's, so LeakSanitizer sees every block.
 * (ld's --wrap=malloc would reach the test's own calls as well.)
 *
 * Counting happens only while armed, so a test counts just the operation
 * under test. Failing is single-shot by default, as in curl: allocation
 * number N returns NULL and the ones after succeed, so retry paths run for
 * real. Sticky, as in nghttp2's failmalloc, every allocation from N on
 * fails, so the cleanup after a failure must not need memory either. */
#ifndef STITCH_TESTS_FAILALLOC_H
#define STITCH_TESTS_FAILALLOC_H

#include <stddef.h>
#include <stdint.h>

#define FA_MAX_SITES 1024

/* Counts allocations from now on and fails number FAIL_AT (1-based; 0:
 * none). Clears the site table's "seen in this run" marks. */
void fa_arm(uint64_t fail_at);
/* From the next fa_arm on: fail every allocation from N on (1), or only
 * N (0, the default). */
void fa_set_sticky(int on);
/* Stops counting; allocations succeed again. */
void fa_disarm(void);
/* Pauses and resumes counting without resetting it (nests). */
void fa_pause(void);
void fa_resume(void);
/* Allocations counted since fa_arm, and whether number FAIL_AT failed. */
uint64_t fa_count(void);
int fa_failed(void);

/* Distinct call sites seen while armed (the return address of each
 * allocation), and the ordinal at which each was first met in the last
 * run: a failure at that ordinal fails that site. Cleared by fa_sites_reset.
 */
void fa_sites_reset(void);
size_t fa_sites(void);
/* Of the sites seen in the last armed run, writes the first-met ordinal of
 * each into OUT (up to CAP); returns how many. */
size_t fa_site_firsts(uint64_t *out, size_t cap);

#endif
