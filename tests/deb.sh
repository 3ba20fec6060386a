#!/bin/sh
# The Debian package (packaging/CMakeLists.txt): cpack -G DEB into a scratch
# folder; its name, control fields (Depends from dpkg-shlibdeps: the Debian
# runtime libraries, nothing from /usr/local) and file list; then dpkg -x
# into a scratch root, where the programs run (--version), carry no RPATH,
# a program builds against the packaged libstitch through its stitch.pc and
# runs, another against libstitch-net through stitch-net.pc, and
# systemd-analyze verify accepts the unit.
# usage: deb.sh BUILD_DIR SOURCE_DIR MULTIARCH HAVE_CUDA
# Skips (77) without cpack, dpkg-deb or dpkg, and in a CUDA build (the
# package is made without CUDA: tools/package.sh).
set -eu
build=$1 src=$2 multiarch=$3 cuda=$4
for t in cpack dpkg-deb dpkg readelf; do
  command -v $t >/dev/null || { echo "deb: no $t, skipped"; exit 77; }
done
case $cuda in ON | TRUE | 1)
  echo "deb: this build has CUDA; the .deb is made from a build without it" \
       "(tools/package.sh --check runs this test there), skipped"
  exit 77 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "deb: $*" >&2; exit 1; }

cpack -G DEB -B "$tmp/out" --config "$build/CPackConfig.cmake" >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log" >&2; fail "cpack -G DEB failed"; }
ver=$(sed -n 's/^#define STITCH_VERSION_STRING "\(.*\)"/\1/p' "$src/src/include/stitch/version_info.h")
arch=$(dpkg --print-architecture)
deb=$tmp/out/stitch_${ver}_$arch.deb
[ -f "$deb" ] || { ls "$tmp/out" >&2; fail "no stitch_${ver}_$arch.deb"; }

# The control fields.
dpkg-deb -I "$deb" >"$tmp/info" || fail "dpkg-deb -I failed"
[ "$(dpkg-deb -f "$deb" Package)" = stitch ] || fail "Package is not stitch"
[ "$(dpkg-deb -f "$deb" Version)" = "$ver" ] || fail "Version is not $ver"
[ "$(dpkg-deb -f "$deb" Architecture)" = "$arch" ] || fail "Architecture is not $arch"
dep=$(dpkg-deb -f "$deb" Depends)
echo "deb: Depends: $dep"
for p in libc6 libsodium23 libzstd1 libjansson4 libxxhash0 libmsgpackc2 libuv1 \
         libhttp-parser2.9; do
  printf '%s\n' "$dep" | grep -Eq "(^|, )$p( |,|$)" || fail "Depends lacks $p"
done
printf '%s\n' "$dep" | grep -Eiq 'cuda|asan|ubsan|simgrid' && fail "Depends names a library a plain Debian node lacks"
# The shlibs lines of libstitch.so.0 and libstitch-net.so.0, for packages
# that link them.
dpkg-deb -I "$deb" shlibs | grep -q "^libstitch 0 stitch" || fail "no shlibs entry for libstitch 0"
dpkg-deb -I "$deb" shlibs | grep -q "^libstitch-net 0 stitch" || fail "no shlibs entry for libstitch-net 0"

# The file list.
dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's#^\./#/#' >"$tmp/files"
lib=/usr/lib/$multiarch
for f in /usr/bin/stitch /usr/bin/stitchd "$lib/libstitch.so.0" "$lib/libstitch.so" \
         "$lib/libstitch.a" "$lib/pkgconfig/stitch.pc" "$lib/libstitch-net.so.0" \
         "$lib/libstitch-net.so" "$lib/libstitch-net.a" "$lib/pkgconfig/stitch-net.pc" \
         "$lib/cmake/Stitch/StitchConfig.cmake" \
         "$lib/cmake/Stitch/StitchTargets.cmake" /usr/include/stitch.h \
         /lib/systemd/system/stitchd-node.service /usr/share/doc/stitch/node.conf.example; do
  grep -qx "$f" "$tmp/files" || fail "the package lacks $f"
done
for h in "$src"/src/include/stitch/*.h; do
  grep -qx "/usr/include/stitch/${h##*/}" "$tmp/files" || fail "the package lacks /usr/include/stitch/${h##*/}"
done
for m in "$build"/packaging/man/*.1.gz; do
  [ -e "$m" ] || continue
  grep -qx "/usr/share/man/man1/${m##*/}" "$tmp/files" || fail "the package lacks the man page ${m##*/}"
done
grep -E '^/usr/local|^/etc|stitch-sim|^/usr/lib/(libstitch|pkgconfig|cmake)' "$tmp/files" &&
  fail "the package holds the files above, outside its layout"

# Unpacked into a scratch root: the programs run, against the packaged
# libstitch where they use it, and nothing points back into the build.
root=$tmp/root
dpkg -x "$deb" "$root" || fail "dpkg -x failed"
export LD_LIBRARY_PATH="$root$lib"
for p in stitch stitchd; do
  out=$("$root/usr/bin/$p" --version) || fail "$p --version failed"
  case $out in "$p $ver"*) echo "deb: $out" ;; *) fail "$p --version says '$out'" ;; esac
done
for f in "$root/usr/bin/stitch" "$root/usr/bin/stitchd" "$root$lib/libstitch.so.0" \
         "$root$lib/libstitch-net.so.0"; do
  readelf -d "$f" | grep -Eq 'R(UN)?PATH' && { readelf -d "$f" | grep PATH >&2; fail "${f#"$root"} has an RPATH"; }
  grep -q "$build" "$f" && fail "${f#"$root"} names the build folder $build"
done
for l in libstitch libstitch-net; do
  soname=$(readelf -d "$root$lib/$l.so.0" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [ "$soname" = $l.so.0 ] || fail "$l: SONAME is '$soname'"
done
# libuv1 is in Depends for stitchd and libstitch-net, not for libstitch.
readelf -d "$root$lib/libstitch.so.0" | grep -q 'NEEDED.*libuv' && fail "libstitch.so.0 needs libuv"
readelf -d "$root/usr/bin/stitchd" | grep -q 'NEEDED.*libuv\.so' || fail "stitchd does not need libuv"
if command -v pkg-config >/dev/null; then
  pc=$root$lib/pkgconfig
  # shellcheck disable=SC2046
  ${CC:-cc} -o "$tmp/consumer" "$src/tests/install/consumer.c" \
    $(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs stitch) || fail "a build against the package's stitch.pc failed"
  mkdir "$tmp/run"
  out=$("$tmp/consumer" "$tmp/run") || fail "the consumer failed: $out"
  case $out in "stitch $ver"*"key round trip ok"*) echo "deb: consumer against $lib/libstitch.so.0: ok" ;;
               *) fail "the consumer says: $out" ;; esac
  # shellcheck disable=SC2046
  ${CC:-cc} -o "$tmp/consumer_net" "$src/tests/install/consumer_net.c" \
    $(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs stitch-net) ||
    fail "a build against the package's stitch-net.pc failed"
  readelf -d "$tmp/consumer_net" | grep -q 'NEEDED.*libstitch-net.so.0' ||
    fail "consumer_net does not need libstitch-net.so.0"
  out=$("$tmp/consumer_net") || fail "consumer_net failed: $out"
  case $out in "stitch $ver"*"net listened on port"*) echo "deb: consumer_net against $lib/libstitch-net.so.0: ok" ;;
               *) fail "consumer_net says: $out" ;; esac
fi

# The unit names /usr/bin/stitchd; systemd-analyze verify checks that the
# command exists, so it judges a copy naming the unpacked one.
unit=$root/lib/systemd/system/stitchd-node.service
grep -qx 'ExecStart=/usr/bin/stitchd node --config /etc/stitch/node.conf' "$unit" ||
  fail "the unit's ExecStart is not /usr/bin/stitchd"
if command -v systemd-analyze >/dev/null; then
  mkdir "$tmp/unit"
  sed "s#^ExecStart=/usr/bin/stitchd#ExecStart=$root/usr/bin/stitchd#" "$unit" >"$tmp/unit/stitchd-node.service"
  out=$(systemd-analyze verify "$tmp/unit/stitchd-node.service" 2>&1) && rc=0 || rc=$?
  if [ "$rc" -ne 0 ] || printf '%s\n' "$out" | grep -q stitchd-node; then
    printf '%s\n' "$out" >&2
    fail "systemd-analyze verify refused the unit (rc $rc)"
  fi
  echo "deb: systemd-analyze verify: ok"
else
  echo "deb: no systemd-analyze, the unit not verified"
fi
echo "deb: ok ($(du -k "$deb" | cut -f1) KiB, $(grep -vc '/$' "$tmp/files") files)"
