#!/bin/sh
# libstitch.so exports its public API and nothing else (stitch/export.h):
# every defined dynamic symbol must be stitch_*. In a sanitizer build the
# instrumentation's own (__asan_*, __odr_asan_gen_*, __ubsan_*) are allowed.
# usage: symbols.sh LIBSTITCH_SO [sanitize]
set -eu
lib=$1
command -v nm >/dev/null || { echo "symbols: no nm, skipped"; exit 77; }
all=$(nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }')
n=$(printf '%s\n' "$all" | grep -c '^stitch_' || true)
[ "$n" -gt 0 ] || { echo "symbols: $lib exports no stitch_* symbol" >&2; exit 1; }
allow='^stitch_'
[ "${2:-}" = sanitize ] && allow='^(stitch_|__asan_|__odr_asan_gen_|__ubsan_|__sancov_)'
bad=$(printf '%s\n' "$all" | grep -Ev "$allow" || true)
if [ -n "$bad" ]; then
  echo "symbols: $lib exports symbols outside the public API:" >&2
  printf '%s\n' "$bad" | head -n 40 >&2
  exit 1
fi
echo "symbols: $n exported, all stitch_*"
