#!/usr/bin/env bash
# Makes the Debian package: configures build-deb/ (or $STITCH_DEB_BUILD_DIR)
# without CUDA (with it, libstitch.so would need libcudart.so.13, which no
# Debian package provides; docs/operations.md), builds it and runs
# cpack -G DEB there, which writes build-deb/stitch_<version>_<arch>.deb.
#   tools/package.sh          # the package
#   tools/package.sh --check  # and the shipping tests in that build:
#                             # deb, install_tree, symbols, systemd_unit
#                             # (not pip_install: the wheel builds its own
#                             # libstitch without CUDA in any build, and
#                             # tools/test.sh runs it)
# Needs what tools/setup.sh installs; help2man, where installed, adds man pages.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
case "${1:-}" in
"") ;;
--check) check=1 ;;
-h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
*) echo "package.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "package.sh: one argument at most (see --help)" >&2; exit 2; }
build="${STITCH_DEB_BUILD_DIR:-build-deb}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTITCH_CUDA=OFF \
  -DSTITCH_WERROR=ON >/dev/null
echo "package.sh: building $build (log: $build/build.log)" >&2
if ! cmake --build "$build" -j"$(nproc)" >"$build/build.log" 2>&1; then
  tail -n 30 "$build/build.log" >&2
  echo "package.sh: the build failed (all of it: $build/build.log)" >&2
  exit 1
fi
(cd "$build" && cpack -G DEB) >"$build/cpack.log" 2>&1 ||
  { cat "$build/cpack.log" >&2; echo "package.sh: cpack failed" >&2; exit 1; }
ls "$build"/stitch_*.deb
if [ $check = 1 ]; then
  ctest --test-dir "$build" --output-on-failure \
    -R '^(deb|install_tree|symbols|systemd_unit)$'
fi
