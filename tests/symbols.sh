#!/bin/sh
# The two shared libraries export their public API and nothing else
# (stitch/export.h): every defined dynamic symbol of libstitch.so must be
# stitch_* and none of them stitch_net_*; every one of libstitch-net.so
# (stitch/net.h) must be stitch_net_*. In a sanitizer build the
# instrumentation's own (__asan_*, __odr_asan_gen_*, __ubsan_*) are allowed.
# And libstitch.so must not need libuv (only libstitch-net.so does), so the
# Python binding and the simulator do not pull it in.
# usage: symbols.sh LIBSTITCH_SO LIBSTITCH_NET_SO [sanitize]
set -eu
lib=$1 net=$2 mode=${3:-}
for t in nm readelf; do
  command -v $t >/dev/null || { echo "symbols: no $t, skipped"; exit 77; }
done
fail() { echo "symbols: $*" >&2; exit 1; }

# check LIB PREFIX: LIB exports at least one PREFIX* symbol and nothing else.
check() {
  all=$(nm -D --defined-only "$1" | awk 'NF >= 3 { print $3 }')
  n=$(printf '%s\n' "$all" | grep -c "^$2" || true)
  [ "$n" -gt 0 ] || fail "$1 exports no $2* symbol"
  allow="^$2"
  [ "$mode" = sanitize ] && allow="^($2|__asan_|__odr_asan_gen_|__ubsan_|__sancov_)"
  bad=$(printf '%s\n' "$all" | grep -Ev "$allow" || true)
  if [ -n "$bad" ]; then
    echo "symbols: $1 exports symbols outside its public API:" >&2
    printf '%s\n' "$bad" | head -n 40 >&2
    exit 1
  fi
  echo "symbols: ${1##*/}: $n exported, all $2*"
}
check "$lib" stitch_
check "$net" stitch_net_
nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | grep '^stitch_net_' &&
  fail "$lib exports the driver's symbols above (they belong to libstitch-net)"

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
needed "$lib" | grep '^libuv' && fail "${lib##*/} needs libuv (above)"
needed "$net" | grep -qx libstitch.so.0 || fail "${net##*/} does not need libstitch.so.0"
needed "$net" | grep -q '^libuv\.so' || fail "${net##*/} does not need libuv"
echo "symbols: ${lib##*/} needs $(needed "$lib" | tr '\n' ' ')"
echo "symbols: ${net##*/} needs $(needed "$net" | tr '\n' ' ')"
