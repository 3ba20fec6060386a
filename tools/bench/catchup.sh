#!/usr/bin/env bash
# Catch-up bytes for joiners at different lags (docs/versions.md).
#
# Publishes every step of a trajectory into a fresh store with the default
# policy (or the publish options given after --), then, for a node that
# holds nothing and for nodes LAG versions behind the latest, pulls to the
# latest and prints what the cheapest plan cost: bytes, steps, and the
# ratio to the newest anchor and to the raw view. Every pull is checked bit
# for bit against the trainer's last step.
#
# Usage: tools/bench/catchup.sh BIN_DIR TRAJ_DIR [-- PUBLISH_OPTIONS...]
#   TRAJ_DIR holds step_NNNN.safetensors (tools/trajectory.py, stitch-synth).
set -euo pipefail
bin="$1" traj="$2"
shift 2
[ "${1:-}" = "--" ] && shift
st="$bin/stitch"
work="$(mktemp -d "${TMPDIR:-/tmp}/stitch-catchup.XXXXXX")"
trap 'rm -rf "$work"' EXIT

steps=()
while IFS= read -r f; do steps+=("$f"); done \
  < <(find "$traj" -maxdepth 1 -name 'step_*.safetensors' | sort)
n=${#steps[@]}
[ "$n" -ge 2 ] || { echo "catchup: need at least 2 steps in $traj" >&2; exit 1; }

"$st" keygen --out "$work/k" >/dev/null
for f in "${steps[@]}"; do
  "$st" publish --key "$work/k.key" --store "$work/s" "$f" "$@" >/dev/null
done
"$st" log --store "$work/s" --pub "$work/k.pub" >"$work/log"
"$st" log --store "$work/s" --pub "$work/k.pub" --json >"$work/log.json"
view_bytes=$(stat -c %s "${steps[n - 1]}")
anchor=$(python3 -c 'import json,sys
vs = json.load(open(sys.argv[1]))["versions"]
print([o["bytes"] for v in vs for o in v["objects"] if o["kind"] == "anchor"][-1])' \
  "$work/log.json")
want="$("$st" digest "${steps[n - 1]}")"

echo "store: $n versions; view file $view_bytes B; newest anchor $anchor B"
sed 's/^/  /' "$work/log"
printf '%-8s %12s %6s %10s %10s  %s\n' lag bytes steps "/anchor" "/view" plan
row() { # row LAG WEIGHTS_FILE
  local out bytes plan
  out="$("$st" pull --store "$work/s" --pub "$work/k.pub" --weights "$2")"
  [ "$("$st" digest "$2")" = "$want" ] || { echo "catchup: $1: not bit-exact" >&2; exit 1; }
  bytes="$(echo "$out" | sed -n 's/.*(\([0-9]*\) B).*/\1/p')"
  plan="$(echo "$out" | sed -n 's/.*B)://p')"
  awk -v l="$1" -v b="$bytes" -v s="$(echo "$plan" | wc -w)" -v a="$anchor" \
    -v f="$view_bytes" -v p="$plan" \
    'BEGIN { printf "%-8s %12d %6d %10.3f %10.4f %s\n", l, b, s, b / a, b / f, p }'

}
row joiner "$work/new.st"
for lag in 1 2 4 8 16 32 64; do
  [ "$lag" -lt "$n" ] || break
  cp "${steps[n - 1 - lag]}" "$work/lag.st"
  rm -f "$work/lag.st.stitch-state"
  row "$lag" "$work/lag.st"
done
