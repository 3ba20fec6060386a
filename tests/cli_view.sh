#!/bin/sh
# cli_view.sh: `stitch view` exit statuses, messages and outputs.
# Usage: cli_view.sh PATH/TO/stitch
# Writes a tiny safetensors checkpoint with printf, so it needs nothing but
# a POSIX shell and coreutils.
set -u
STITCH=${1:?usage: cli_view.sh PATH/TO/stitch}
DIR=$(mktemp -d /tmp/stitch-cli-view-XXXXXX) || exit 1
trap 'rm -rf "$DIR"' EXIT
fails=0

fail() {
  echo "cli_view: FAIL: $*" >&2
  fails=$((fails + 1))
}

# expect STATUS CMD...: runs CMD, checks its exit status; output in
# $DIR/out and $DIR/err.
expect() {
  want=$1
  shift
  "$@" >"$DIR/out" 2>"$DIR/err"
  got=$?
  [ "$got" -eq "$want" ] ||
    fail "'$*' exited $got, expected $want: $(cat "$DIR/err")"
}

# The only files in $DIR must be the named ones (no partial outputs or
# leftover temporaries).
only_files() {
  extra=$(ls -A "$DIR" | grep -v -x -e out -e err $(for f; do printf ' -e %s' "$f"; done))
  [ -z "$extra" ] || fail "unexpected files: $extra"
}

# u64 little-endian as printf octal escapes.
le64() {
  n=$1 s=
  for _ in 1 2 3 4 5 6 7 8; do
    s="$s\\$(printf '%03o' $((n % 256)))"
    n=$((n / 256))
  done
  printf '%s' "$s"
}

# w: F32 [2, 16] (quantized by every kind), b: F32 [2] (always BF16).
hdr='{"__metadata__":{"step":"3"},"w":{"dtype":"F32","shape":[2,16],"data_offsets":[0,128]},"b":{"dtype":"F32","shape":[2],"data_offsets":[128,136]}}'
{
  printf "$(le64 ${#hdr})"
  printf '%s' "$hdr"
  i=0
  while [ $i -lt 8 ]; do # 1.0, -0.5, 0.25, 3.0 repeated
    printf '\000\000\200\077\000\000\000\277\000\000\200\076\000\000\100\100'
    i=$((i + 1))
  done
  printf '\000\000\200\077\000\000\000\100' # b: 1.0, 2.0
} >"$DIR/in.st"

# Usage errors exit 2 and write nothing.
expect 2 "$STITCH" view
expect 2 "$STITCH" view "$DIR/in.st" "$DIR/v"
expect 2 "$STITCH" view --to int4 "$DIR/in.st" "$DIR/v"
expect 2 "$STITCH" view --to bf16 --fp8-block 64 "$DIR/in.st" "$DIR/v"
expect 2 "$STITCH" view --to fp8 --fp8-block 12x "$DIR/in.st" "$DIR/v"
expect 2 "$STITCH" view --to fp8 --fp8-block -1 "$DIR/in.st" "$DIR/v"
expect 2 "$STITCH" view --to fp8 "$DIR/in.st"
expect 2 "$STITCH" view --to fp8 "$DIR/in.st" "$DIR/v" extra
expect 2 "$STITCH" view --to fp8 --bogus "$DIR/in.st" "$DIR/v"
expect 2 "$STITCH" view --to
grep -q '^stitch: usage: ' "$DIR/err" || fail "usage line: $(cat "$DIR/err")"
expect 0 "$STITCH" view --help
grep -q 'fp8-block' "$DIR/out" || fail "help text: $(cat "$DIR/out")"
only_files in.st

# Each kind builds; the summary names it.
for k in bf16 fp8 nvfp4; do
  expect 0 "$STITCH" view --to $k "$DIR/in.st" "$DIR/v_$k"
  grep -q "^view $k: " "$DIR/out" || fail "summary: $(cat "$DIR/out")"
  grep -q '"stitch.view":"'$k'"' "$DIR/v_$k" || fail "$k: no metadata key"
done
expect 0 "$STITCH" view --to=fp8 --fp8-block=8 "$DIR/in.st" "$DIR/v_fp8b"
grep -q "4 scale blocks" "$DIR/out" || fail "fp8 blocks: $(cat "$DIR/out")"

# Same masters, --prev: no scale changes and the same bytes.
expect 0 "$STITCH" view --to nvfp4 --prev "$DIR/v_nvfp4" "$DIR/in.st" "$DIR/v2"
grep -q ' 0 scales changed' "$DIR/out" || fail "prev summary: $(cat "$DIR/out")"
cmp -s "$DIR/v_nvfp4" "$DIR/v2" || fail "rebuild with --prev differs"

# Failures exit 1 with one "stitch: error:" line and leave no output.
expect 1 "$STITCH" view --to nvfp4 --prev "$DIR/v_fp8" "$DIR/in.st" "$DIR/bad"
grep -q '^stitch: error: previous view is fp8, not nvfp4$' "$DIR/err" ||
  fail "mismatch message: $(cat "$DIR/err")"
[ "$(wc -l <"$DIR/err")" -eq 1 ] || fail "more than one error line"
expect 1 "$STITCH" view --to fp8 --fp8-block 16 --prev "$DIR/v_fp8b" \
  "$DIR/in.st" "$DIR/bad"
expect 1 "$STITCH" view --to fp8 "$DIR/missing.st" "$DIR/bad"
grep -q '^stitch: error: ' "$DIR/err" || fail "missing input: $(cat "$DIR/err")"
expect 1 "$STITCH" view --to fp8 "$DIR/in.st" "$DIR/nodir/bad"
head -c 100 "$DIR/in.st" >"$DIR/trunc.st"
expect 1 "$STITCH" view --to bf16 "$DIR/trunc.st" "$DIR/bad"
rm -f "$DIR/trunc.st"
only_files in.st v_bf16 v_fp8 v_nvfp4 v_fp8b v2

if [ $fails -ne 0 ]; then
  echo "cli_view: $fails failure(s)" >&2
  exit 1
fi
echo "cli_view: ok"
