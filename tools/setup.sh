#!/usr/bin/env bash
# Installs what Stitch needs to build and test on Debian 12, then configures
# and builds into build/ (or $STITCH_BUILD_DIR). Idempotent: packages already
# present are not reinstalled, and an existing build is only brought up to
# date. Extra CMake arguments may follow, e.g. tools/setup.sh -DSTITCH_SANITIZE=ON
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config git zstd python3
          libuv1-dev libsodium-dev libzstd-dev libmsgpack-dev libjansson-dev
          libxxhash-dev libsimgrid-dev libhttp-parser-dev curl tcpdump
          nftables help2man)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

build="${STITCH_BUILD_DIR:-build}"
# Warnings are errors in every build, the demo's too, so that the demo and
# the tests share one configuration and build/ is built once.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTITCH_WERROR=ON \
  "$@" >/dev/null
# A line per tenth of the build, so a first build (minutes) shows progress;
# the whole output is in $build/build.log, and its tail on a failure.
echo "setup: building $build (log: $build/build.log)" >&2
if ! cmake --build "$build" -j"$(nproc)" 2>&1 | tee "$build/build.log" |
  awk '/^\[ *[0-9]+%\]/ { p = substr($0, 2, 3) + 0;
                          if (p >= next_p) { printf "setup: %d%%\n", p > "/dev/stderr";
                                             next_p = p - p % 10 + 10 } }'; then
  tail -n 30 "$build/build.log" >&2
  echo "setup: the build failed (all of it: $build/build.log)" >&2
  exit 1
fi
echo "setup: built $build/bin/stitch" >&2
