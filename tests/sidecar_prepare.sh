#!/usr/bin/env bash
# stitchd's sidecar in two phases (issue 38): --engine-prepare PATH is
# called while the engine serves, then the gate closes for the commit
# (--engine-reload PATH). A seed, a node in front of tests/sidecar_engine.py
# (its /prepare and /commit hooks, steered through its /control).
#
# Checks, with the manual node:
#  - a request through the sidecar is served while the prepare runs (the
#    stand-in's prepare waits for a file the test makes only after the
#    request was answered, so no clock decides it), and the reported
#    pause_ms is below prepare_ms, which is at least the prepare's sleep;
#    /v1/status and /metrics report the same two numbers;
#  - a failing prepare closes no gate (requests flow meanwhile, the commit
#    hook is never called), is a 502 to /v1/apply, shows in the status and
#    the log, and the next /v1/apply succeeds;
#  - a commit answered 409 (stale) makes the sidecar prepare again, and a
#    commit stale every time fails the round after 1 + 3 prepares;
# with an auto node (restarted on the same data): a prepare failing twice is
# retried after 1 s then 2 s and the version applied; a new version is
# then applied in the two phases with no /v1/apply. The single-hook
# configuration (no --engine-prepare) is tests/sidecar.sh's.
# Skips (77) without curl or python3.
# Usage: sidecar_prepare.sh BIN_DIR
set -euo pipefail
command -v curl >/dev/null && command -v python3 >/dev/null ||
  { echo "SKIP: sidecar_prepare.sh needs curl and python3"; exit 77; }
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
NAME=sidecar-prepare LOGS="node.log seed.log engine.log"
. "$here/agent_lib.sh"

seed_up 6 # version 1 published
python3 "$here/sidecar_engine.py" --port-file "$work/engine.port" \
  2>"$work/engine.log" &
pids+=($!)
eport="$(wait_line "$work/engine.port" '^')"
engine="http://127.0.0.1:$eport"
ticket="$(admit "$work/data")"

publish() { # publish N: step N, which becomes version N + 1
  "$bin/stitch" publish --key "$work/k.key" --store "$work/store" \
    "$work/traj/step_000$1.safetensors" >/dev/null
}
control() {
  curl -sf -X POST "$engine/control" -d "$1" >/dev/null ||
    fail "engine /control $1"
}
estate() { curl -sf "$engine/state" || fail "engine /state"; }
node_up() { # node_up OUT ARGS...: starts a node; sets $node and $url
  local out="$1"
  shift
  "$bin/stitchd" node --swarm "$work/k.pub" --listen 127.0.0.1:0 \
    --peers "$seed" --weights "$work/w.st" --data "$work/data" \
    --ticket "$ticket" --http 127.0.0.1:0 --engine "$engine" \
    --engine-reload /commit --engine-prepare /prepare "$@" \
    >"$work/$out" 2>>"$work/node.log" &
  node=$!
  pids+=($node)
  url="http://127.0.0.1:$(wait_line "$work/$out" '^stitchd: http on port ')"
}
node_down() {
  kill -TERM "$node"
  local rc=0
  wait "$node" || rc=$?
  [ "$rc" = 0 ] || fail "stitchd exited $rc on SIGTERM"
}
wait_phase() { # wait_phase P: until the sidecar's round is in phase P
  for _ in $(seq 300); do
    [ "$(status | json phase)" = "$1" ] && return 0
    sleep 0.1
  done
  fail "no phase $1 in 30 s: $(status)"
}
metric() { # metric NAME: its value
  curl -sf "$url/metrics" | sed -n "s/^$1 //p"
}
# check 'PYTHON EXPR' WHAT JSON...: EXPR over j[0], j[1], ... (the JSON
# arguments parsed) must be true.
check() {
  local expr="$1" what="$2"
  shift 2
  python3 - "$expr" "$@" <<'EOF' || fail "$what: $*"
import json, sys
j = [json.loads(a) for a in sys.argv[2:]]
sys.exit(0 if eval("(" + sys.argv[1] + ")") else 1)
EOF
}

# Flags: a prepare hook needs the commit hook, and a path.
rc=0
"$bin/stitchd" node --swarm "$work/k.pub" --listen 127.0.0.1:0 \
  --weights "$work/w.st" --data "$work/data" --http 127.0.0.1:0 \
  --engine "$engine" --engine-prepare /prepare 2>"$work/flag.err" || rc=$?
[ "$rc" = 2 ] && grep -q 'needs --engine-reload' "$work/flag.err" ||
  fail "--engine-prepare without --engine-reload: rc $rc $(cat "$work/flag.err")"

node_up node.out
wait_held 1
check 'j[0]["applied_version"] == 0 and j[0]["phase"] == "idle" and
       j[0]["applying"] is False and j[0]["last_apply_error"] is None' \
  "status before the first apply" "$(status)"

# 1. Requests flow during the prepare; the pause is the commit's alone.
control "{\"prepare_delay_ms\": 1000, \"prepare_hold\": \"$work/hold1\"}"
curl -sf -o "$work/apply1.json" -X POST "$url/v1/apply" &
apply=$!
wait_phase prepare
check 'j[0]["applying"] is True and j[0]["waiting"] == 0' \
  "status while preparing" "$(status)"
curl -sf -m 30 -D "$work/h1" -o "$work/c1.json" -X POST "$url/v1/completions" \
  -d '{"prompt": "during prepare"}' || fail "a completion during the prepare"
grep -qi '^X-Stitch-Version: 0' "$work/h1" || fail "stamp: $(cat "$work/h1")"
check 'j[0]["version"] == 0 and j[0]["preparing"] == 1' \
  "the completion was not served during the prepare" "$(cat "$work/c1.json")"
[ "$(status | json phase)" = prepare ] || fail "the prepare ended early"
touch "$work/hold1"
wait "$apply" || fail "POST /v1/apply"
a1="$(cat "$work/apply1.json")"
check 'j[0]["applied_version"] == 1 and j[0]["prepare_ms"] >= 1000 and
       j[0]["pause_ms"] < j[0]["prepare_ms"]' \
  "pause_ms must exclude the prepare (prepare_ms >= the 1 s sleep)" "$a1"
st="$(status)"
check 'j[1]["last_apply_pause_ms"] == j[0]["pause_ms"] and
       j[1]["last_apply_prepare_ms"] == j[0]["prepare_ms"] and
       j[1]["phase"] == "idle" and j[1]["applying"] is False and
       j[1]["applied_version"] == 1' "status after the apply" "$a1" "$st"
pause_s="$(metric stitch_apply_pause_seconds)"
prep_s="$(metric stitch_apply_prepare_seconds)"
check 'j[1] >= 1.0 and j[0] < j[1] and j[1] == j[2]["prepare_ms"] / 1000' \
  "metrics: pause, prepare" "$pause_s" "$prep_s" "$a1"
check 'j[0]["prepares"] == [[1, 200]] and j[0]["commits"] == [[1, 200]]
       and j[0]["version"] == 1 and j[0]["reloads"] == []' \
  "the engine's hooks" "$(estate)"
curl -sf -D "$work/h1b" -o /dev/null -X POST "$url/v1/completions" -d '{}' ||
  fail "a completion after the apply"
grep -qi '^X-Stitch-Version: 1' "$work/h1b" || fail "stamp after the apply"

# 2. A failing prepare: no gate, a 502, reported; the next apply works.
publish 1
wait_held 2
control "{\"prepare_delay_ms\": 0, \"prepare_hold\": \"$work/hold2\", \"fail_prepares\": 1}"
curl -s -o "$work/apply2.json" -w '%{http_code}' -X POST "$url/v1/apply" \
  >"$work/apply2.code" &
apply=$!
wait_phase prepare
curl -sf -m 30 -D "$work/h2" -o "$work/c2.json" -X POST "$url/v1/completions" \
  -d '{"prompt": "during a failing prepare"}' ||
  fail "a completion during the failing prepare"
grep -qi '^X-Stitch-Version: 1' "$work/h2" || fail "stamp: $(cat "$work/h2")"
touch "$work/hold2"
wait "$apply" || true
[ "$(cat "$work/apply2.code")" = 502 ] ||
  fail "apply with a failing prepare: $(cat "$work/apply2.code") $(cat "$work/apply2.json")"
check '"prepare hook answered 500" in j[0]["error"] and
       j[0]["applied_version"] == 1' "502 body" "$(cat "$work/apply2.json")"
check 'j[0]["applied_version"] == 1 and j[0]["phase"] == "idle" and
       j[0]["apply_failures"] == 1 and j[0]["waiting"] == 0 and
       "prepare hook answered 500" in j[0]["last_apply_error"]' \
  "status after a failed prepare" "$(status)"
check 'j[0]["commits"] == [[1, 200]] and j[0]["prepares"][-1] == [2, 500]' \
  "the commit hook was called after a failed prepare (a gate closed)" \
  "$(estate)"
[ "$(metric stitch_engine_prepare_failures_total)" = 1 ] ||
  fail "stitch_engine_prepare_failures_total: $(metric stitch_engine_prepare_failures_total)"
grep -q 'apply of version 2 failed: the engine.s prepare hook answered 500' \
  "$work/node.log" || fail "no log line for the failed prepare"
curl -sf -o "$work/apply2b.json" -X POST "$url/v1/apply" ||
  fail "/v1/apply after a failed prepare"
check 'j[0]["applied_version"] == 2' "apply after a failed prepare" \
  "$(cat "$work/apply2b.json")"
check 'j[0]["apply_failures"] == 0 and j[0]["last_apply_error"] is None' \
  "status after a success" "$(status)"

# 3. A stale commit (409) makes the sidecar prepare again ...
publish 2
wait_held 3
control '{"prepare_hold": null, "stale_commits": 1}'
curl -sf -o "$work/apply3.json" -X POST "$url/v1/apply" ||
  fail "/v1/apply with one stale commit"
check 'j[0]["applied_version"] == 3' "apply after a stale commit" \
  "$(cat "$work/apply3.json")"
check '[p for p in j[0]["prepares"] if p[0] == 3] == [[3, 200], [3, 200]] and
       [c for c in j[0]["commits"] if c[0] == 3] == [[3, 409], [3, 200]]' \
  "a stale commit must be followed by a new prepare" "$(estate)"
[ "$(metric stitch_engine_commits_stale_total)" = 1 ] ||
  fail "stitch_engine_commits_stale_total: $(metric stitch_engine_commits_stale_total)"
grep -q 'stale (409); preparing again (1 of 3)' "$work/node.log" ||
  fail "no log line for the stale commit"
# ... a bounded number of times.
publish 3
wait_held 4
control '{"stale_commits": 100}'
code="$(curl -s -o "$work/apply4.json" -w '%{http_code}' -X POST "$url/v1/apply")"
[ "$code" = 502 ] || fail "always stale: $code $(cat "$work/apply4.json")"
check '"409 (stale) 4 times" in j[0]["error"] and j[0]["applied_version"] == 3' \
  "always stale: 502 body" "$(cat "$work/apply4.json")"
check '[p[1] for p in j[0]["prepares"] if p[0] == 4] == [200] * 4 and
       [c[1] for c in j[0]["commits"] if c[0] == 4] == [409] * 4' \
  "always stale: 4 prepares, 4 commits" "$(estate)"
control '{"stale_commits": 0}'
node_down

# 4. --apply auto: a prepare that fails twice is retried with backoff.
control '{"fail_prepares": 2}'
n0="$(estate | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["prepares"]))')"
node_up node2.out --apply auto
for _ in $(seq 600); do
  [ "$(status | json applied_version)" = 4 ] && break
  sleep 0.1
done
check 'j[0]["applied_version"] == 4 and j[0]["apply_failures"] == 0' \
  "auto: version 4 after two failed prepares" "$(status)"
check 'j[0]["prepares"][j[1]:] == [[4, 500], [4, 500], [4, 200]] and
       j[0]["commits"][-1] == [4, 200]' \
  "auto: the prepares after the restart" "$(estate)" "$n0"
grep -q 'retry in 1000 ms' "$work/node.log" &&
  grep -q 'retry in 2000 ms' "$work/node.log" ||
  fail "auto: no backoff in the log: $(grep 'failed' "$work/node.log")"
# A new version goes live in the two phases, unasked.
control '{"prepare_delay_ms": 500}'
publish 4
for _ in $(seq 600); do
  [ "$(status | json applied_version)" = 5 ] && break
  sleep 0.1
done
check 'j[0]["applied_version"] == 5 and j[0]["last_apply_prepare_ms"] >= 500
       and j[0]["last_apply_pause_ms"] < j[0]["last_apply_prepare_ms"]' \
  "auto: version 5 in two phases" "$(status)"
check 'j[0]["prepares"][-1] == [5, 200] and j[0]["commits"][-1] == [5, 200]' \
  "auto: the engine's hooks for version 5" "$(estate)"
node_down
echo "sidecar_prepare: ok"
