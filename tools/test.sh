#!/usr/bin/env bash
# The README's test command: set up a fresh Debian 12 machine if needed,
# build with warnings as errors, and run the whole suite under ctest.
#   tools/test.sh             # the normal build, in build/
#   tools/test.sh --sanitize  # ASan + UBSan, in build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
"" | --sanitize) [ $# -le 1 ] || { echo "test.sh: one argument at most (see --help)" >&2; exit 2; } ;;
-h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
*) echo "test.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac
args=(-DSTITCH_WERROR=ON)
export STITCH_BUILD_DIR="${STITCH_BUILD_DIR:-build}"
if [ "${1:-}" = "--sanitize" ]; then
  # The CUDA runtime and ASan do not share an address space well (and
  # LeakSanitizer reports cudart's own allocations): the sanitized build
  # tests the C references alone.
  args+=(-DSTITCH_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DSTITCH_CUDA=OFF)
  STITCH_BUILD_DIR=build-asan
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi
tools/setup.sh "${args[@]}"
tools/setup-python.sh # torch + safetensors for the real-trajectory test
ctest --test-dir "$STITCH_BUILD_DIR" --output-on-failure -j"$(nproc)"
