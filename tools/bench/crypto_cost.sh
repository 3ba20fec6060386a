#!/usr/bin/env bash
# crypto_cost.sh: the figures of docs/benchmarks.md "Link encryption".
#   1. stitch-bench-chan: CPU time of chan_seal + chan_open over 1 GiB in
#      16 KiB records, best of 3;
#   2. callgrind instructions per byte of each, over 64 MiB;
#   3. link_transfer.py: a ~300 MB BF16 anchor (stitch-synth, 150M params)
#      from a seed to one node on loopback, this build (encrypted, with a
#      ticket) against the plaintext protocol (commit 761c65e, built in a
#      scratch worktree that is removed at the end), alternating, RUNS each.
# Usage: tools/bench/crypto_cost.sh [RUNS] (default 5), from a configured
# build/ (it builds stitch-bench-chan, stitch, stitchd, stitch-synth).
# PLAIN_BIN=DIR uses a plaintext build already made instead of building
# one (its bin directory, with stitch and stitchd).
# The work files (~1.5 GB) go to $WORK (default /dev/shm/stitch-linkbench:
# tmpfs, so fsync is free and the disk's noise stays out of the timing).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
runs="${1:-5}"
work="${WORK:-/dev/shm/stitch-linkbench}"
plain_rev=761c65e
bin="$root/build/bin"
plain="$work/plain"

cleanup() {
  [ -n "${PLAIN_BIN:-}" ] ||
    git -C "$root" worktree remove --force "$plain" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

cmake --build "$root/build" -j"$(nproc)" --target stitch-bench-chan \
  stitch-cli stitchd stitch-synth >/dev/null
mkdir -p "$work"

echo "## record layer: $bin/stitch-bench-chan --mib 1024 --reps 3"
"$bin/stitch-bench-chan" --mib 1024 --reps 3

if command -v valgrind >/dev/null; then
  echo "## callgrind, 64 MiB"
  for f in bench_seal_once bench_open_once; do
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.$f" \
      --toggle-collect="$f" "$bin/stitch-bench-chan" --mib 64 --reps 1 \
      >/dev/null 2>"$work/cg.log"
    ir="$(sed -n 's/^summary: //p' "$work/cg.$f")"
    echo "$f: $ir instructions, $(python3 -c \
      "print('%.2f' % ($ir / (64 << 20)))") per byte"
  done
fi

plain_bin="${PLAIN_BIN:-$plain/build/bin}"
if [ -z "${PLAIN_BIN:-}" ]; then
  echo "## building $plain_rev (plaintext) in $plain"
  git -C "$root" worktree add --detach "$plain" "$plain_rev" >/dev/null 2>&1
  cmake -S "$plain" -B "$plain/build" -DSTITCH_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$plain/build" -j"$(nproc)" --target stitch-cli stitchd \
    >/dev/null
fi
echo "## transfer: this build (encrypted) against $plain_bin (plaintext)"
"$bin/stitch-synth" --out "$work/traj" --steps 0 --params 150M --view bf16 \
  --quiet
python3 "$root/tools/bench/link_transfer.py" \
  --ckpt "$work/traj/step_0000.safetensors" --work "$work/runs" \
  --runs "$runs" --bin "encrypted=$bin:ticket" \
  --bin "plaintext=$plain_bin"
