#!/usr/bin/env bash
# The version layer end to end through the CLI: keygen, publish a synthetic
# trajectory (anchors, deltas, cumulative deltas), pull from nothing and from
# every lag, verify; then every bad input of issue 3 is refused with one
# clear line, a nonzero exit, and weights left unchanged.
# Usage: versions.sh BIN_DIR
set -euo pipefail
bin="$1"
st="$bin/stitch"
work="$(mktemp -d "${TMPDIR:-/tmp}/stitch-ver.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bin/stitch-synth" --out "$work/traj" --steps 9 --params 2e5 --lr 2e-6 --quiet
step() { printf '%s/traj/step_%04d.safetensors' "$work" "$1"; }

"$st" keygen --out "$work/k" >/dev/null
[ "$(stat -c %a "$work/k.key")" = 600 ] || fail "secret key is not mode 0600"
"$st" keygen --out "$work/k" 2>/dev/null && fail "keygen overwrote a key"
"$st" keygen --out "$work/other" >/dev/null

store="$work/store"
# A short chain so that anchors and cumulative deltas both appear.
for s in 0 1 2 3 4 5 6 7 8 9; do
  "$st" publish --key "$work/k.key" --store "$store" "$(step $s)" \
    --max-chain 4 --cumulative-every 2 --chunk-kib 16 --json \
    >"$work/pub$s.json"
done
grep -q '"kind": "anchor"' "$work/pub0.json" || fail "version 1 is not an anchor"
grep -q '"kind": "delta"' "$work/pub1.json" || fail "version 2 is not a delta"
# (grep reads the files itself: `cat | grep -q` under pipefail fails when
# grep stops early and cat gets SIGPIPE.)
grep -q '"kind": "cumulative"' "$work"/pub*.json ||
  fail "no cumulative delta was kept: $(cat "$work"/pub*.json | tr '\n' ' ')"
"$st" verify --store "$store" --pub "$work/k.pub" >/dev/null
"$st" log --store "$store" --pub "$work/k.pub" --json >"$work/log.json"

view_of() { # the view digest of version $1, from the log
  python3 -c 'import json,sys
log = json.load(open(sys.argv[1]))
print([v["view"] for v in log["versions"] if v["version"] == int(sys.argv[2])][0])' \
    "$work/log.json" "$1"
}
check_at() { # weights file $1 holds version $2, bit for bit
  [ "$("$st" digest "$1")" = "$(view_of "$2")" ] ||
    fail "$1 does not hold version $2"
  [ "$("$st" digest "$(step $(($2 - 1)))")" = "$(view_of "$2")" ] ||
    fail "version $2 is not the trainer's step $(($2 - 1))"
}

# From nothing: the newest anchor, then the cheapest path.
"$st" pull --store "$store" --pub "$work/k.pub" --weights "$work/w.st" >/dev/null
check_at "$work/w.st" 10
out="$("$st" pull --store "$store" --pub "$work/k.pub" --weights "$work/w.st")"
grep -q "already at version 10" <<<"$out" || fail "second pull did something: $out"

# From every lag: a node holding version v (adopted by its digest) catches up.
for v in 1 2 3 5 7 9; do
  cp "$(step $((v - 1)))" "$work/lag.st"
  rm -f "$work/lag.st.stitch-state"
  "$st" pull --store "$store" --pub "$work/k.pub" --weights "$work/lag.st" \
    >"$work/lag.out"
  check_at "$work/lag.st" 10
done
echo "ok: publish, verify, pull from nothing and from every lag"

# ---- Bad input: refused, one line, nonzero, weights unchanged ----------
expect_fail() { # expect_fail WHAT PATTERN CMD...
  local what="$1" pat="$2"; shift 2
  local err
  if err="$("$@" 2>&1 >/dev/null)"; then fail "$what: accepted"; fi
  [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] || fail "$what: not one line: $err"
  grep -qi -- "$pat" <<<"$err" || fail "$what: message '$err'"
  echo "  $what: $err"
}
fresh() { # a store copy and weights at version 4
  rm -rf "$work/s2" "$work/w2.st"*
  cp -r "$store" "$work/s2"
  cp "$(step 3)" "$work/w2.st" # adopted by its digest as version 4
  before="$("$st" digest "$work/w2.st")"
}
unchanged() {
  [ "$("$st" digest "$work/w2.st")" = "$before" ] || fail "$1: weights changed"
}
pull2() { "$st" pull --store "$work/s2" --pub "$1" --weights "$work/w2.st"; }

fresh
expect_fail "wrong key" "swarm" pull2 "$work/other.pub"
unchanged "wrong key"

fresh # a forged signature: flip one byte of the newest manifest's signature
m="$(ls "$work/s2/manifests" | sort | tail -1)"
python3 - "$work/s2/manifests/$m" <<'EOF'
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-5] ^= 1
open(p, 'wb').write(b)
EOF
expect_fail "forged signature" "signature" pull2 "$work/k.pub"
unchanged "forged signature"

fresh # a chunk whose bytes changed
c="$(find "$work/s2/chunks" -type f | sort | tail -1)"
printf '\x01' | dd of="$c" bs=1 seek=20 conv=notrunc 2>/dev/null
expect_fail "hash mismatch" "hash\|checksum" "$st" verify --store "$work/s2" --pub "$work/k.pub"

fresh # truncated chunks: whichever path the plan takes, it meets one
find "$work/s2/chunks" -type f -exec truncate -s 10 {} +
chunks_before="$(cd "$work/s2" && find chunks -type f | sort | xargs md5sum)"
expect_fail "truncated chunk" "size.*the store is left as it is" pull2 "$work/k.pub"
unchanged "truncated chunk"
# The store a pull reads is not the pull's: the bad chunks are all there.
[ "$(cd "$work/s2" && find chunks -type f | sort | xargs md5sum)" = "$chunks_before" ] ||
  fail "truncated chunk: the pull changed the store it read"
find "$work/s2/chunks" -type f -delete
expect_fail "missing chunk" "missing" pull2 "$work/k.pub"
unchanged "missing chunk"

fresh # a manifest of another swarm dropped into the store
"$st" publish --key "$work/other.key" --store "$work/s3" "$(step 0)" >/dev/null
cp "$work/s3/manifests/"* "$work/s2/manifests/"
expect_fail "other swarm" "swarm" pull2 "$work/k.pub"
unchanged "other swarm"

# A gap: a store with one anchor (version 1) and deltas after it loses
# version 4; a node at version 2 has no way to 6.
rm -rf "$work/s6" "$work/w6.st"*
for v in 0 1 2 3 4 5; do
  "$st" publish --key "$work/k.key" --store "$work/s6" "$(step $v)" \
    --max-chain 100 --cumulative-every 0 >/dev/null
done
cp "$(step 1)" "$work/w6.st"
rm -f "$work/s6/manifests/$(printf '%020d' 4)-"*
b6="$("$st" digest "$work/w6.st")"
expect_fail "gap" "version 4" "$st" pull --store "$work/s6" --pub "$work/k.pub" \
  --weights "$work/w6.st"
[ "$("$st" digest "$work/w6.st")" = "$b6" ] || fail "gap: weights changed"

# Rollback: weights ahead of the store.
rm -rf "$work/s4" "$work/w4.st"*
"$st" publish --key "$work/k.key" --store "$work/s4" "$(step 0)" >/dev/null
"$st" publish --key "$work/k.key" --store "$work/s4" "$(step 1)" >/dev/null
"$st" pull --store "$store" --pub "$work/k.pub" --weights "$work/w4.st" >/dev/null
b4="$("$st" digest "$work/w4.st")"
expect_fail "rollback" "roll" "$st" pull --store "$work/s4" \
  --pub "$work/k.pub" --weights "$work/w4.st"
[ "$("$st" digest "$work/w4.st")" = "$b4" ] || fail "rollback: weights changed"

# Fork: a node at the main store's version 2 meets a store that holds a
# version 2 under another id (manifests carry their time, so even the same
# weights published again make another version).
rm -rf "$work/s5" "$work/w5.st"*
"$st" publish --key "$work/k.key" --store "$work/s5" "$(step 0)" >/dev/null
"$st" publish --key "$work/k.key" --store "$work/s5" "$(step 2)" >/dev/null
cp "$(step 1)" "$work/w5.st"
"$st" pull --store "$work/s6" --pub "$work/k.pub" --weights "$work/w5.st" \
  >/dev/null 2>&1 || true # adopts version 2 of s6 (then fails on its gap)
grep -q "version 2 " <<<"$("$st" recover --weights "$work/w5.st")" ||
  fail "fork: setup did not adopt version 2"
b5="$("$st" digest "$work/w5.st")"
expect_fail "fork" "fork" "$st" pull --store "$work/s5" \
  --pub "$work/k.pub" --weights "$work/w5.st"
[ "$("$st" digest "$work/w5.st")" = "$b5" ] || fail "fork: weights changed"

# `latest` moved back by hand to version 1: verify says so; a pull still
# takes the newest signed version.
fresh
printf '1 %s\n' "$(python3 -c 'import json,sys
print([v["id"] for v in json.load(open(sys.argv[1]))["versions"] if v["version"] == 1][0])' \
  "$work/log.json")" >"$work/s2/latest"
expect_fail "latest moved back" "latest names version 1, but the store holds signed versions up to 10" \
  "$st" verify --store "$work/s2" --pub "$work/k.pub"
rm -f "$work/w2.st"*
"$st" pull --store "$work/s2" --pub "$work/k.pub" --weights "$work/w2.st" >/dev/null
check_at "$work/w2.st" 10

# A version the trainer signed whose delta names another base view: verify
# checks the chain, not only the signatures (built through the C API in
# tests/test_store.c, test_chain).

# recover on weights no pull has touched: nothing to do is not an error.
cp "$(step 0)" "$work/plain.st"
out="$("$st" recover --weights "$work/plain.st")" || fail "recover on a plain file: exit $?"
grep -q "nothing to recover" <<<"$out" || fail "recover on a plain file said: $out"
[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "recover on a plain file: not one line"

echo "ok: wrong key, forged signature, hash mismatch, truncated and missing" \
  "chunks (store left alone), another swarm, gap, rollback, fork: refused," \
  "weights unchanged; latest moved back: verify fails, pull takes the newest;" \
  "recover on a plain file: nothing to recover"
