#!/usr/bin/env bash
# real_trajectory.sh BIN_DIR: a real PyTorch training trajectory through the codec.
#
# tools/trajectory.py trains a tiny GPT at lr 1e-6 and writes each step's served view (bf16, and fp8 and nvfp4
# when `stitch view` works). For every consecutive pair OLD -> NEW it runs `stitch delta OLD NEW -o D` and
# `stitch apply OLD D -o OUT`, and checks that OUT is NEW: same view digest (`stitch digest`) and, read back
# with safetensors in Python, the same tensor names, dtypes, shapes and bytes. (The JSON header text of OUT may
# differ from the torch-written NEW, so the files are not compared with cmp.) Also checks that a second run
# with the same seed gives the same weights, that libstitch's bf16 view equals torch's, and that the per-step
# change fraction looks like Adam absorption.
#
# Needs python3 with torch, safetensors and numpy (tools/setup-python.sh installs them); without them it
# prints SKIP and exits 77 (ctest SKIP_RETURN_CODE). PYTHON overrides the interpreter.
set -u
BIN=${1:?usage: real_trajectory.sh BIN_DIR}
STITCH=$BIN/stitch
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
TRAJ=$ROOT/tools/trajectory.py
STEPS=5

if ! "$PY" -c 'import torch, safetensors.torch, numpy' >/dev/null 2>&1; then
  echo "real_trajectory: SKIP: $PY cannot import torch, safetensors and numpy (run tools/setup-python.sh)"
  exit 77
fi
[ -x "$STITCH" ] || { echo "real_trajectory: FAIL: no stitch CLI at $STITCH" >&2; exit 1; }

DIR=$(mktemp -d /tmp/stitch-real-traj-XXXXXX) || exit 1
trap 'rm -rf "$DIR"' EXIT
fails=0 checks=0
fail() {
  echo "real_trajectory: FAIL: $*" >&2
  fails=$((fails + 1))
}
ok() { checks=$((checks + 1)); }

views="bf16"
if "$STITCH" view --help >/dev/null 2>&1; then
  views="bf16 fp8 nvfp4"
else
  echo "real_trajectory: note: '$STITCH view' not available, testing bf16 only"
fi

traj() { # traj VIEW OUTDIR STEPS
  "$PY" "$TRAJ" --out "$2" --view "$1" --steps "$3" --size tiny --pretrain-steps 20 --lr 1e-6 --seed 7 \
    --stitch "$STITCH" --summary "$2.json" 2>"$2.log"
}

: >"$DIR/pairs"
for v in $views; do
  if ! traj "$v" "$DIR/$v" "$STEPS"; then
    fail "trajectory.py --view $v failed: $(tail -3 "$DIR/$v.log")"
    continue
  fi
  sed 's/^/  /' "$DIR/$v.log"
  for i in $(seq 1 "$STEPS"); do
    old=$DIR/$v/step_$(printf %04d $((i - 1))).safetensors
    new=$DIR/$v/step_$(printf %04d "$i").safetensors
    d=$DIR/$v/delta_$i out=$DIR/$v/apply_$i.safetensors
    if ! "$STITCH" delta "$old" "$new" -o "$d" >"$DIR/err" 2>&1; then
      fail "$v step $i: stitch delta: $(cat "$DIR/err")"
      continue
    fi
    if ! "$STITCH" apply "$old" "$d" -o "$out" >"$DIR/err" 2>&1; then
      fail "$v step $i: stitch apply: $(cat "$DIR/err")"
      continue
    fi
    a=$("$STITCH" digest "$out" 2>&1) b=$("$STITCH" digest "$new" 2>&1)
    if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else fail "$v step $i: digest of apply output '$a' != '$b'"; fi
    dsz=$(wc -c <"$d") nsz=$(wc -c <"$new")
    if [ "$dsz" -lt "$nsz" ]; then ok; else fail "$v step $i: delta $dsz B is not smaller than the view $nsz B"; fi
    echo "$v $i $out $new $dsz $nsz" >>"$DIR/pairs"
  done
done

# A second run with the same seed, writing the F32 masters: torch's bf16 cast of them must give the first
# run's bytes (checked in Python below), and so must libstitch's own bf16 view (`stitch view --to bf16`).
if traj f32 "$DIR/again" 2; then
  for i in 0 1 2; do
    f=step_000$i.safetensors
    if ! "$STITCH" view --to bf16 "$DIR/again/$f" "$DIR/again/c_bf16_$f" >"$DIR/err" 2>&1; then
      echo "real_trajectory: note: stitch view --to bf16 unavailable ($(head -1 "$DIR/err")), skipping that check"
      break
    fi
    a=$("$STITCH" digest "$DIR/again/c_bf16_$f" 2>&1) b=$("$STITCH" digest "$DIR/bf16/$f" 2>&1)
    if [ "$a" = "$b" ]; then ok; else fail "stitch view --to bf16 of the masters of $f differs from torch's bf16 view"; fi
  done
else
  fail "f32 run failed: $(tail -3 "$DIR/again.log")"
fi

# Tensor-by-tensor byte comparison with safetensors, and the change fractions.
"$PY" - "$DIR" <<'PYEOF'
import json, sys, torch
from safetensors.torch import load_file
d = sys.argv[1]
bad = 0
def fail(msg):
    global bad
    bad += 1
    print("real_trajectory: FAIL: " + msg, file=sys.stderr)
def raw(t):
    return t.contiguous().reshape(-1).view(torch.uint8)
for line in open(d + "/pairs"):
    view, step, out, new, dsz, nsz = line.split()
    a, b = load_file(out), load_file(new)
    if sorted(a) != sorted(b):
        fail("%s step %s: tensor names differ: %s" % (view, step, sorted(set(a) ^ set(b))))
        continue
    for name in b:
        x, y = a[name], b[name]
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(raw(x), raw(y)):
            fail("%s step %s: tensor %s differs (%s%s vs %s%s)" %
                 (view, step, name, x.dtype, list(x.shape), y.dtype, list(y.shape)))
for i in range(3):  # determinism: the f32 run's masters, cast by torch, are the bf16 run's view
    f = "step_%04d.safetensors" % i
    try:
        m, v = load_file("%s/again/%s" % (d, f)), load_file("%s/bf16/%s" % (d, f))
    except FileNotFoundError:
        break
    if sorted(m) != sorted(v) or not all(torch.equal(raw(m[k].to(torch.bfloat16)), raw(v[k])) for k in v):
        fail("%s: a second run with the same seed gave different weights" % f)
for view in ("bf16", "fp8", "nvfp4"):
    try:
        s = json.load(open("%s/%s.json" % (d, view)))
    except FileNotFoundError:
        continue
    fr = [r["fraction"] for r in s["steps"][1:]]
    print("  %s: %d parameters, change fraction per step %s" %
          (view, s["parameters"], " ".join("%.5f" % f for f in fr)))
    # Adam absorption: at lr 1e-6 most of the view stays bit-identical, yet the weights do move.
    if not all(f < 0.5 for f in fr):
        fail("%s: more than half of the view changed in a step at lr 1e-6: %s" % (view, fr))
    if view == "bf16" and not any(f > 0 for f in fr):
        fail("bf16: no element changed in %d steps" % len(fr))
sys.exit(1 if bad else 0)
PYEOF
rc=$?
[ "$rc" -eq 0 ] || fails=$((fails + 1))
pairs=$(wc -l <"$DIR/pairs")
if [ "$fails" -eq 0 ]; then
  echo "real_trajectory: OK: $pairs deltas over views '$views' applied bit-exactly ($checks shell checks)"
  exit 0
fi
echo "real_trajectory: $fails failure(s)" >&2
exit 1
