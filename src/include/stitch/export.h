/* stitch/export.h: which symbols libstitch.so exports.
 *
 * The shared library is built with -fvisibility=hidden, so only what the
 * public headers declare between STITCH_API_BEGIN and STITCH_API_END is
 * exported: every public header wraps its declarations in that pair, and
 * nothing else needs marking. Internal functions (headers in src/<module>/) stay
 * hidden however they are named, and the static library is not affected.
 * The pair rather than a mark on each prototype: one line per header cannot
 * be forgotten on a new function, and tests/symbols.sh fails if an export
 * is not stitch_*.
 */
#ifndef STITCH_EXPORT_H
#define STITCH_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define STITCH_API_BEGIN _Pragma("GCC visibility push(default)")
#define STITCH_API_END _Pragma("GCC visibility pop")
#else
#define STITCH_API_BEGIN
#define STITCH_API_END
#endif

#endif
