#!/usr/bin/env bash
# Crash safety: `stitch pull` is killed with SIGKILL at random moments, many
# times over. After each kill, `stitch recover` must leave the weights equal
# to exactly one version (the one their state names, byte for byte), and a
# second pull must finish the job. Covers the in-place path (deltas onto a
# file) and the rewrite path (an anchor onto nothing).
# Usage: crash.sh BIN_DIR [TRIALS]
set -euo pipefail
bin="$1"
trials="${2:-40}"
st="$bin/stitch"
work="$(mktemp -d "${TMPDIR:-/tmp}/stitch-crash.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bin/stitch-synth" --out "$work/traj" --steps 4 --params 3e6 --lr 3e-6 --quiet
step() { printf '%s/traj/step_%04d.safetensors' "$work" "$1"; }
"$st" keygen --out "$work/k" >/dev/null
for s in 0 1 2 3 4; do
  "$st" publish --key "$work/k.key" --store "$work/store" "$(step $s)" \
    --chunk-kib 64 --cumulative-every 0 >/dev/null # a chain of 4 applies
done
"$st" log --store "$work/store" --pub "$work/k.pub" --json >"$work/log.json"
python3 -c 'import json,sys
for v in json.load(open(sys.argv[1]))["versions"]: print(v["version"], v["view"])' \
  "$work/log.json" >"$work/views"

# How long a whole pull from version 1 takes, to spread the kills over it.
cp "$(step 0)" "$work/w1.st"
"$st" pull --store "$work/store" --pub "$work/k.pub" --weights "$work/w1.st" \
  >/dev/null # adopts version 1 and pulls to 5
cp "$(step 0)" "$work/base.st"
rm -f "$work/base.st.stitch-state"
"$st" recover --weights "$work/w1.st" >/dev/null
start=$(date +%s%N)
cp "$work/base.st" "$work/t.st"
"$st" pull --store "$work/store" --pub "$work/k.pub" --weights "$work/t.st" >/dev/null
span_us=$((($(date +%s%N) - start) / 1000))
rm -f "$work"/t.st*

check() { # the weights are exactly the version their state names
  local out v view
  out="$("$st" recover --weights "$1" 2>&1)" || fail "trial $2: recover failed: $out"
  case "$out" in *recovered*) recovered=$((recovered + 1)) ;; esac
  case "$out" in *"no weights yet"*)
    [ ! -e "$1" ] || fail "trial $2: recover says no weights, but $1 exists"
    versions="$versions 0"
    return ;;
  esac
  v="$(echo "$out" | sed -n 's/.*: version \([0-9]*\) .*/\1/p')"
  view="$(awk -v v="$v" '$1 == v { print $2 }' "$work/views")"
  [ -n "$view" ] || fail "trial $2: state names unknown version '$v'"
  [ "$("$st" digest "$1")" = "$view" ] ||
    fail "trial $2: weights differ from version $v that the state names"
  versions="$versions $v"
}

recovered=0
journals=0
versions=""
for i in $(seq 1 "$trials"); do
  rm -f "$work"/t.st*
  if [ $((i % 4)) = 0 ]; then
    : # from nothing: the anchor is written as a new file (rewrite path)
  else
    cp "$work/base.st" "$work/t.st" # version 1, adopted by its digest
  fi
  "$st" pull --store "$work/store" --pub "$work/k.pub" --weights "$work/t.st" \
    >/dev/null 2>&1 &
  pid=$!
  delay=$((RANDOM * RANDOM % (span_us + 1)))
  sleep "$(printf '0.%06d' "$delay")"
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  [ -e "$work/t.st.stitch-journal" ] && journals=$((journals + 1))
  if [ -e "$work/t.st.stitch-state" ] || [ -e "$work/t.st.stitch-journal" ]; then
    check "$work/t.st" "$i"
  fi
  # Whatever happened, a pull finishes the job.
  "$st" pull --store "$work/store" --pub "$work/k.pub" --weights "$work/t.st" \
    >/dev/null || fail "trial $i: pull after the kill failed"
  [ "$("$st" digest "$work/t.st")" = "$(awk '$1 == 5 { print $2 }' "$work/views")" ] ||
    fail "trial $i: not at version 5 after the second pull"
done
echo "ok: $trials kills over ${span_us} us pulls; $journals left a journal," \
  "$recovered recovered; versions after the kill:$(echo "$versions" |
  tr ' ' '\n' | grep . | sort -n | uniq -c | awk '{printf " v%s x%s", $2, $1}')"

# Temporaries: a pull killed while it writes the new file (an anchor onto
# nothing is a rewrite: t.st.tmp.<pid>.XXXXXX) leaves it behind; the next
# recover or pull removes it, as the writer is gone. Each cycle waits until
# the temporary exists, then kills.
tmps() { compgen -G "$work/t.st*.tmp.*" || true; }
kill_mid_write() { # 0 when a pull was killed with its temporary on disk
  rm -f "$work"/t.st*
  "$st" pull --store "$work/store" --pub "$work/k.pub" --weights "$work/t.st" \
    >/dev/null 2>&1 &
  local pid=$! n=0
  while [ -z "$(tmps)" ] && kill -0 "$pid" 2>/dev/null && [ $n -lt 20000 ]; do
    n=$((n + 1))
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  [ -n "$(tmps)" ]
}
killed=0
for i in $(seq 1 20); do
  kill_mid_write || continue
  killed=$((killed + 1))
  left="$(tmps)"
  if [ $((killed % 2)) = 1 ]; then
    out="$("$st" recover --weights "$work/t.st")" ||
      fail "recover after a kill mid-write failed: $out"
    case "$out" in *"removed "*" stale temporar"*) ;;
      *) fail "recover did not say it removed the temporaries: $out" ;; esac
  else
    "$st" pull --store "$work/store" --pub "$work/k.pub" \
      --weights "$work/t.st" >/dev/null || fail "pull after a kill mid-write failed"
  fi
  [ -z "$(tmps)" ] || fail "temporaries left after a kill and a recover or pull:" \
    "$(tmps | tr '\n' ' ') (before: $(echo "$left" | tr '\n' ' '))"
  [ $killed -ge 4 ] && break
done
[ $killed -ge 2 ] || fail "no pull could be killed while writing (killed $killed)"
echo "ok: $killed pulls killed mid-write; the next recover or pull left no temporaries"
