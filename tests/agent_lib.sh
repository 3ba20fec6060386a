# agent_lib.sh: what the shell tests that run stitchd with its sidecar
# share (tests/sidecar.sh, tests/e2e_trainer_engine.sh). Source it after
# `set -euo pipefail` with NAME set (the test's name, for the temporary
# folder) and LOGS (the files under $work whose tails a failure shows).
# It makes $work, removed on exit with every process in pids killed.

work="$(mktemp -d "${TMPDIR:-/tmp}/stitch-$NAME.XXXXXX")"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE

fail() {
  echo "FAIL: $*" >&2
  for f in $LOGS; do
    [ -f "$work/$f" ] && { echo "--- $f" >&2; tail -n 15 "$work/$f" >&2; }
  done
  exit 1
}

# Waits (up to $3 s, default 60) for a line matching $2 in file $1 and
# prints what follows the match.
wait_line() {
  local n=$(( ${3:-60} * 10 ))
  for _ in $(seq "$n"); do
    if [ -s "$1" ] && grep -q "$2" "$1"; then
      sed -n "s/$2//p" "$1" | head -n 1
      return 0
    fi
    sleep 0.1
  done
  fail "no '$2' in $1"
}

json() { # json FIELD < JSON: prints the field
  "${PYTHON:-python3}" -c \
    'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

# The sidecar at $url: its status, and waiting (60 s) until it holds $1.
status() { curl -sf "$url/v1/status" || fail "GET /v1/status failed"; }
wait_held() {
  for _ in $(seq 600); do
    [ "$(status | json held_version)" -ge "$1" ] && return 0
    sleep 0.1
  done
  fail "the node does not hold version $1 in 60 s: $(status)"
}

# admit DIR: makes the node identity DIR/node.{key,pub} (as stitchd would
# on its first start) and the trainer's ticket for it, $work/k.key signing,
# and prints the ticket's path: a node's --ticket in a closed swarm.
admit() {
  mkdir -p "$1"
  "$bin/stitch" keygen --out "$1/node" >/dev/null
  "$bin/stitch" admit --key "$work/k.key" --node "$1/node.pub" \
    --out "$1/ticket" >/dev/null
  printf '%s\n' "$1/ticket"
}

# seed_up STEPS: a trajectory of STEPS steps in $work/traj, the trainer's
# key $work/k, its store $work/store with step 0 published, and a seed
# serving it; sets $seed (host:port).
seed_up() {
  "$bin/stitch-synth" --out "$work/traj" --steps "$1" --params 2e5 --quiet
  "$bin/stitch" keygen --out "$work/k" >/dev/null
  "$bin/stitch" publish --key "$work/k.key" --store "$work/store" \
    "$work/traj/step_0000.safetensors" >/dev/null
  "$bin/stitchd" seed --key "$work/k.key" --listen 127.0.0.1:0 \
    --store "$work/store" >"$work/seed.out" 2>"$work/seed.log" &
  pids+=($!)
  seed="$(wait_line "$work/seed.out" '^stitchd: listening on ')"
}
