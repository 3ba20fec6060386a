#!/bin/sh
# The install tree: cmake --install into a temporary prefix, the files that
# README "Install" promises, and a program (tests/install/consumer.c) built
# against that tree with pkg-config (shared and --static) and with
# find_package(Stitch), each run.
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
         include/stitch.h include/stitch/export.h lib/pkgconfig/stitch.pc \
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
soname=$(objdump -p "$p/lib/libstitch.so" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = libstitch.so.0 ] || fail "SONAME is '$soname', not libstitch.so.0"
[ -e "$p/lib/$soname" ] || fail "missing lib/$soname"
grep -q "ExecStart=$p/bin/stitchd node --config /etc/stitch/node.conf" \
  "$p/lib/systemd/system/stitchd-node.service" || fail "the unit's ExecStart is not $p/bin/stitchd"

run() { # NAME PROGRAM: runs the consumer, which must print the version
  mkdir "$tmp/run_$1"
  out=$("$2" "$tmp/run_$1") || fail "$1: the consumer failed: $out"
  echo "$1: $out" | head -n 1
  case $out in "stitch $ver"*"key round trip ok"*) ;; *) fail "$1: unexpected output: $out" ;; esac
}
ver=$(PKG_CONFIG_PATH=$p/lib/pkgconfig pkg-config --modversion stitch)

# pkg-config, shared: the run finds libstitch.so.0 through the rpath alone.
export PKG_CONFIG_PATH="$p/lib/pkgconfig"
# shellcheck disable=SC2046
$cc -o "$tmp/pc_shared" "$src/tests/install/consumer.c" $(pkg-config --cflags --libs stitch) \
  -Wl,-rpath,"$p/lib" || fail "pkg-config build (shared) failed"
readelf -d "$tmp/pc_shared" | grep -q 'NEEDED.*libstitch.so.0' || fail "pc_shared does not need libstitch.so.0"
run pc_shared "$tmp/pc_shared"
# pkg-config --static: libstitch.a (named, as both libraries lie in lib/)
# and every dependency's flags.
# shellcheck disable=SC2046
$cc -o "$tmp/pc_static" "$src/tests/install/consumer.c" $(pkg-config --cflags stitch) \
  $(pkg-config --static --libs stitch | sed "s#\(^\| \)-lstitch\( \|\$\)#\1$p/lib/libstitch.a\2#") ||
  fail "pkg-config build (--static) failed"
readelf -d "$tmp/pc_static" | grep -q 'libstitch' && fail "pc_static needs a shared libstitch"
run pc_static "$tmp/pc_static"
unset PKG_CONFIG_PATH

# find_package(Stitch) from a downstream CMake project.
cmake -S "$src/tests/install" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$p" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/cm.log" 2>&1 &&
  cmake --build "$tmp/cm" >>"$tmp/cm.log" 2>&1 ||
  { cat "$tmp/cm.log" >&2; fail "find_package(Stitch) project failed"; }
readelf -d "$tmp/cm/consumer_shared" | grep -q 'NEEDED.*libstitch.so.0' ||
  fail "consumer_shared does not need libstitch.so.0"
run cmake_shared "$tmp/cm/consumer_shared"
run cmake_static "$tmp/cm/consumer_static"
echo "install_tree: ok"
