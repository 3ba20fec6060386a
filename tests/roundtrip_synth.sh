#!/usr/bin/env bash
# Every step of a synthetic Adam trajectory, for the BF16, FP8 (per-tensor
# and per-block scales) and NVFP4 views, goes through `stitch delta` and
# `stitch apply` and comes back bit for bit: the applied file's view digest
# equals the original's, and its tensors' bytes are identical (cmp of the
# data regions via `stitch digest --tensors`).
# Usage: roundtrip_synth.sh BIN_DIR
set -euo pipefail
bin="$1"
work="$(mktemp -d "${TMPDIR:-/tmp}/stitch-rt.XXXXXX")"
trap 'rm -rf "$work"' EXIT

check_traj() {
  local name="$1" max_pct="$2"; shift 2
  local dir="$work/$name"
  "$bin/stitch-synth" --out "$dir" --steps 4 --params 3e5 --quiet "$@"
  local s
  for s in 1 2 3 4; do
    local a b
    a="$dir/$(printf 'step_%04d.safetensors' $((s - 1)))"
    b="$dir/$(printf 'step_%04d.safetensors' "$s")"
    "$bin/stitch" delta "$a" "$b" -o "$work/d" --json >"$work/stats.json"
    "$bin/stitch" apply "$a" "$work/d" -o "$work/out.safetensors"
    if [ "$("$bin/stitch" digest --tensors "$work/out.safetensors")" != \
         "$("$bin/stitch" digest --tensors "$b")" ]; then
      echo "FAIL: $name step $s: applied view differs from the trainer's" >&2
      exit 1
    fi
    # The delta must be far smaller than the checkpoint it reproduces (the
    # F32 masters change nearly everywhere each step: a dense case).
    local dsz full
    dsz=$(stat -c %s "$work/d")
    full=$(stat -c %s "$b")
    if [ $((dsz * 100)) -gt $((full * max_pct)) ]; then
      echo "FAIL: $name step $s: delta $dsz B is over $max_pct% of $full B" >&2
      exit 1
    fi
  done
  echo "ok: $name, 4 steps bit-exact"
}

# Large tensors code their blocks by default as RANSC where changes are
# dense (2.5 % or more) and as GAPS elsewhere, as SPARSE with --small and
# as RANS with --fastest (docs/codec.md, "Two sparse codings", "The
# fastest mode", "RANSC"): all come back bit for bit. $3 is the coding
# the default must use.
check_modes() {
  local dir="$work/modes" mode
  "$bin/stitch-synth" --out "$dir" --steps 1 --params 3e6 --quiet --view "$1" --lr "$2"
  for mode in fast small fastest; do
    local extra=()
    [ "$mode" != fast ] && extra=(--"$mode")
    "$bin/stitch" delta "$dir/step_0000.safetensors" "$dir/step_0001.safetensors" \
      -o "$work/$mode.delta" --json "${extra[@]}" >"$work/$mode.json"
    "$bin/stitch" apply "$dir/step_0000.safetensors" "$work/$mode.delta" -o "$work/out.safetensors"
    if [ "$("$bin/stitch" digest --tensors "$work/out.safetensors")" != \
         "$("$bin/stitch" digest --tensors "$dir/step_0001.safetensors")" ]; then
      echo "FAIL: $1 --$mode: applied view differs from the trainer's" >&2
      exit 1
    fi
  done
  grep -q "\"$3\"" "$work/fast.json" || { echo "FAIL: $1 $2: no ${3^^} block by default" >&2; exit 1; }
  if grep -qE '"(gaps|ransc)"' "$work/small.json"; then
    echo "FAIL: $1: --small coded a GAPS or RANSC block" >&2; exit 1
  fi
  grep -q '"rans"' "$work/fastest.json" || { echo "FAIL: $1: no RANS block with --fastest" >&2; exit 1; }
  if grep -qE '"(gaps|ransc)"' "$work/fastest.json"; then
    echo "FAIL: $1: --fastest coded a GAPS or RANSC block" >&2; exit 1
  fi
  echo "ok: $1 $2, ${3^^} by default, SPARSE with --small, RANS with --fastest, all bit-exact"
}

check_modes bf16 3e-6 ransc
check_modes bf16 1e-7 gaps
check_modes nvfp4 1e-5 gaps
check_traj bf16 10 --view bf16 --lr 1e-6
check_traj bf16-3e-6 10 --view bf16 --lr 3e-6 --seed 7
check_traj fp8 10 --view fp8 --lr 1e-6
check_traj fp8-block 10 --view fp8 --fp8-block 128 --lr 1e-6
check_traj nvfp4 10 --view nvfp4 --lr 1e-6
check_traj f32 100 --view f32 --lr 1e-6
echo "roundtrip_synth: 6 trajectories and 3 coding modes ok"
