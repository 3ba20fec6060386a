#!/bin/sh
# synth.sh BUILD_DIR|BIN_DIR: checks stitch-synth (docs/synth.md).
#   - a tiny trajectory writes step_0000..step_N
#   - the same seed gives the same bytes (also with another thread count),
#     another seed different bytes
#   - consecutive steps differ, in a small fraction of bytes only
#   - --masters and --view f32 write F32 files
#   - bad flags exit 2 with one line; an unwritable --out exits 1 with one
#     line and leaves nothing behind
set -u

bin=
for c in "${1:-build}/bin/stitch-synth" "${1:-build}/stitch-synth"; do
  [ -x "$c" ] && bin=$c && break
done
[ -n "$bin" ] || { echo "synth.sh: no stitch-synth under ${1:-build}" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/stitch-synth-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

STEPS=4
run() { # DIR ARGS...: a tiny bf16 trajectory
  d=$1; shift
  "$bin" --out "$d" --steps $STEPS --params 1e5 --seed 7 --quiet "$@"
}

# 1. files exist, and nothing else (no temporaries)
if run "$tmp/a" 2>"$tmp/err"; then
  n=$(find "$tmp/a" -type f | wc -l)
  [ "$n" -eq $((STEPS + 1)) ] || fail "expected $((STEPS + 1)) files, got $n"
  for i in 0 1 2 3 4; do
    [ -s "$tmp/a/step_000$i.safetensors" ] || fail "missing step_000$i"
  done
  [ -s "$tmp/err" ] && fail "--quiet run printed: $(head -1 "$tmp/err")"
  ok "tiny trajectory"
else
  fail "tiny trajectory failed: $(cat "$tmp/err")"
fi

# 2. determinism: same seed (and another thread count) -> same bytes
run "$tmp/b" --threads 3 2>/dev/null || fail "second run failed"
same=1
for i in 0 1 2 3 4; do
  f=step_000$i.safetensors
  cmp -s "$tmp/a/$f" "$tmp/b/$f" || { fail "$f differs between runs"; same=0; }
done
[ $same -eq 1 ] && ok "deterministic"
"$bin" --out "$tmp/c" --steps 0 --params 1e5 --seed 8 --quiet ||
  fail "seed 8 run failed"
if cmp -s "$tmp/a/step_0000.safetensors" "$tmp/c/step_0000.safetensors"; then
  fail "seeds 7 and 8 give the same weights"
else
  ok "seed matters"
fi

# 3. steps differ, sparsely
size=$(wc -c <"$tmp/a/step_0001.safetensors")
for i in 1 2 3 4; do
  p=$tmp/a/step_000$((i - 1)).safetensors
  q=$tmp/a/step_000$i.safetensors
  n=$(cmp -l "$p" "$q" 2>/dev/null | wc -l)
  # lr 1e-6 changes ~2-4% of BF16 values, ~1-2% of bytes; allow 0 < n < 10%
  if [ "$n" -eq 0 ] || [ $((n * 10)) -ge "$size" ]; then
    fail "step $i: $n of $size bytes changed"
  else
    ok "step $i: $n of $size bytes changed"
  fi
done

# 4. --masters and --view f32 write F32: twice the BF16 bytes, near enough
before=$fails
"$bin" --out "$tmp/m" --steps 1 --params 1e5 --seed 7 --quiet --masters ||
  fail "--masters run failed"
cmp -s "$tmp/a/step_0001.safetensors" "$tmp/m/step_0001.safetensors" ||
  fail "--masters changed the view"
ms=$(wc -c <"$tmp/m/masters_0001.safetensors" 2>/dev/null || echo 0)
[ "$ms" -gt $((size * 19 / 10)) ] || fail "masters file is $ms bytes"
"$bin" --out "$tmp/f" --steps 1 --params 1e5 --seed 7 --quiet --view f32 ||
  fail "--view f32 failed"
cmp -s "$tmp/f/step_0001.safetensors" "$tmp/m/masters_0001.safetensors" ||
  fail "--view f32 differs from --masters"
[ $fails -eq "$before" ] && ok "masters and f32 view"

# 5. bad flags: exit 2, one line
before=$fails
for args in "--steps 2" "--out $tmp/x" "--out $tmp/x --steps abc" \
    "--out $tmp/x --steps 2 --view int3" "--out $tmp/x --steps 2 --bogus" \
    "--out $tmp/x --steps 2 --lr -1" "--out $tmp/x --steps 2 --params 10" \
    "--out $tmp/x --steps 2 --model huge" "--out $tmp/x --steps"; do
  # shellcheck disable=SC2086
  "$bin" $args 2>"$tmp/err" >/dev/null
  rc=$?
  lines=$(wc -l <"$tmp/err")
  if [ $rc -ne 2 ] || [ "$lines" -ne 1 ]; then
    fail "'$args': exit $rc with $lines lines"
  fi
done
[ -e "$tmp/x" ] && fail "a usage error created --out"
[ $fails -eq "$before" ] && ok "bad flags exit 2"

# 6. unwritable --out: exit 1, one line
before=$fails
for out in /dev/null/sub "$tmp/a/step_0000.safetensors/sub"; do
  "$bin" --out "$out" --steps 1 --params 1e5 2>"$tmp/err" >/dev/null
  rc=$?
  lines=$(wc -l <"$tmp/err")
  if [ $rc -ne 1 ] || [ "$lines" -ne 1 ] ||
      ! grep -q '^stitch-synth: error: ' "$tmp/err"; then
    fail "--out $out: exit $rc, stderr: $(cat "$tmp/err")"
  fi
done
[ $fails -eq "$before" ] && ok "unwritable --out exits 1"

if [ $fails -ne 0 ]; then
  echo "synth.sh: $fails failure(s)" >&2
  exit 1
fi
echo "synth.sh: all passed"
