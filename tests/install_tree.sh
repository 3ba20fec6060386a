#!/bin/sh
# The install tree: cmake --install into a temporary prefix, the files that
# README "Install" promises, and two programs built against that tree with
# pkg-config (shared and --static) and with find_package(Stitch), each run:
# tests/install/consumer.c uses libstitch alone, and nothing of libuv may be
# on its link line or among the libraries it loads; consumer_net.c uses
# libstitch-net, the libuv driver (stitch/net.h).
# usage: install_tree.sh BUILD_DIR SOURCE_DIR. Skips (77) without pkg-config.
set -eu
build=$1 src=$2
command -v pkg-config >/dev/null || { echo "install_tree: no pkg-config, skipped"; exit 77; }
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
p=$tmp/prefix
fail() { echo "install_tree: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$p" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }

for f in bin/stitch bin/stitchd lib/libstitch.a lib/libstitch.so \
         lib/libstitch-net.a lib/libstitch-net.so include/stitch/net.h \
         include/stitch.h include/stitch/export.h lib/pkgconfig/stitch.pc \
         lib/pkgconfig/stitch-net.pc \
         lib/cmake/Stitch/StitchConfig.cmake \
         lib/systemd/system/stitchd-node.service \
         share/doc/stitch/node.conf.example; do
  [ -e "$p/$f" ] || fail "missing $f"
done
for h in "$src"/src/include/stitch/*.h; do
  [ -e "$p/include/stitch/${h##*/}" ] || fail "missing include/stitch/${h##*/}"
done
[ -x "$build/bin/stitch-sim" ] && { [ -x "$p/bin/stitch-sim" ] || fail "missing bin/stitch-sim"; }
for m in "$build"/packaging/man/*.1.gz; do  # made where help2man is installed
  [ -e "$m" ] || continue
  [ -e "$p/share/man/man1/${m##*/}" ] || fail "missing share/man/man1/${m##*/}"
done
for l in libstitch libstitch-net; do
  soname=$(objdump -p "$p/lib/$l.so" | awk '$1 == "SONAME" { print $2 }')
  [ "$soname" = $l.so.0 ] || fail "SONAME is '$soname', not $l.so.0"
  [ -e "$p/lib/$soname" ] || fail "missing lib/$soname"
done
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
needed "$p/lib/libstitch.so" | grep -q '^libuv' && fail "libstitch.so needs libuv"
needed "$p/lib/libstitch-net.so" | grep -qx libstitch.so.0 || fail "libstitch-net.so does not need libstitch.so.0"
needed "$p/lib/libstitch-net.so" | grep -q '^libuv\.so' || fail "libstitch-net.so does not need libuv"
grep -q "ExecStart=$p/bin/stitchd node --config /etc/stitch/node.conf" \
  "$p/lib/systemd/system/stitchd-node.service" || fail "the unit's ExecStart is not $p/bin/stitchd"

run() { # NAME PROGRAM: runs consumer.c, which must print the version
  mkdir "$tmp/run_$1"
  out=$("$2" "$tmp/run_$1") || fail "$1: the consumer failed: $out"
  echo "$1: $out" | head -n 1
  case $out in "stitch $ver"*"key round trip ok"*) ;; *) fail "$1: unexpected output: $out" ;; esac
}
run_net() { # NAME PROGRAM: runs consumer_net.c
  out=$("$2") || fail "$1: consumer_net failed: $out"
  echo "$1: $(printf '%s\n' "$out" | tail -n 1)"
  case $out in "stitch $ver"*"net listened on port"*) ;; *) fail "$1: unexpected output: $out" ;; esac
}
no_uv() { # NAME PROGRAM: neither it nor what it loads needs libuv
  needed "$2" | grep -q '^libuv' && fail "$1 needs libuv"
  if command -v ldd >/dev/null; then
    ldd "$2" | grep -q 'libuv\.so' && fail "$1 loads libuv: $(ldd "$2" | grep libuv)"
  fi
  return 0
}
ver=$(PKG_CONFIG_PATH=$p/lib/pkgconfig pkg-config --modversion stitch)

# pkg-config, shared: the run finds libstitch.so.0 through the rpath alone.
export PKG_CONFIG_PATH="$p/lib/pkgconfig"
for how in "" --static; do
  # shellcheck disable=SC2086
  pkg-config $how --libs stitch | grep -q -- '-luv\b' &&
    fail "pkg-config $how --libs stitch names libuv: $(pkg-config $how --libs stitch)"
done
# shellcheck disable=SC2046
$cc -o "$tmp/pc_shared" "$src/tests/install/consumer.c" $(pkg-config --cflags --libs stitch) \
  -Wl,-rpath,"$p/lib" || fail "pkg-config build (shared) failed"
readelf -d "$tmp/pc_shared" | grep -q 'NEEDED.*libstitch.so.0' || fail "pc_shared does not need libstitch.so.0"
no_uv pc_shared "$tmp/pc_shared"
run pc_shared "$tmp/pc_shared"
# pkg-config --static: libstitch.a (named, as both libraries lie in lib/)
# and every dependency's flags.
# shellcheck disable=SC2046
$cc -o "$tmp/pc_static" "$src/tests/install/consumer.c" $(pkg-config --cflags stitch) \
  $(pkg-config --static --libs stitch | sed "s#\(^\| \)-lstitch\( \|\$\)#\1$p/lib/libstitch.a\2#") ||
  fail "pkg-config build (--static) failed"
readelf -d "$tmp/pc_static" | grep -q 'libstitch' && fail "pc_static needs a shared libstitch"
no_uv pc_static "$tmp/pc_static"
run pc_static "$tmp/pc_static"

# libstitch-net through stitch-net.pc (Requires: stitch, libuv), shared and
# --static (both archives named).
pkg-config --libs stitch-net | grep -q -- '-luv\b' || fail "pkg-config --libs stitch-net lacks -luv"
# shellcheck disable=SC2046
$cc -o "$tmp/pc_net_shared" "$src/tests/install/consumer_net.c" $(pkg-config --cflags --libs stitch-net) \
  -Wl,-rpath,"$p/lib" || fail "pkg-config build of consumer_net (shared) failed"
readelf -d "$tmp/pc_net_shared" | grep -q 'NEEDED.*libstitch-net.so.0' ||
  fail "pc_net_shared does not need libstitch-net.so.0"
run_net pc_net_shared "$tmp/pc_net_shared"
# shellcheck disable=SC2046
$cc -o "$tmp/pc_net_static" "$src/tests/install/consumer_net.c" $(pkg-config --cflags stitch-net) \
  $(pkg-config --static --libs stitch-net |
    sed -e "s#\(^\| \)-lstitch-net\( \|\$\)#\1$p/lib/libstitch-net.a\2#" \
        -e "s#\(^\| \)-lstitch\( \|\$\)#\1$p/lib/libstitch.a\2#") ||
  fail "pkg-config build of consumer_net (--static) failed"
readelf -d "$tmp/pc_net_static" | grep -q 'libstitch' && fail "pc_net_static needs a shared libstitch"
run_net pc_net_static "$tmp/pc_net_static"
unset PKG_CONFIG_PATH

# find_package(Stitch) from a downstream CMake project.
cmake -S "$src/tests/install" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$p" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/cm.log" 2>&1 &&
  cmake --build "$tmp/cm" >>"$tmp/cm.log" 2>&1 ||
  { cat "$tmp/cm.log" >&2; fail "find_package(Stitch) project failed"; }
readelf -d "$tmp/cm/consumer_shared" | grep -q 'NEEDED.*libstitch.so.0' ||
  fail "consumer_shared does not need libstitch.so.0"
no_uv cmake_shared "$tmp/cm/consumer_shared"
run cmake_shared "$tmp/cm/consumer_shared"
no_uv cmake_static "$tmp/cm/consumer_static"
run cmake_static "$tmp/cm/consumer_static"
readelf -d "$tmp/cm/consumer_net_shared" | grep -q 'NEEDED.*libstitch-net.so.0' ||
  fail "consumer_net_shared does not need libstitch-net.so.0"
run_net cmake_net_shared "$tmp/cm/consumer_net_shared"
run_net cmake_net_static "$tmp/cm/consumer_net_static"
echo "install_tree: ok"
