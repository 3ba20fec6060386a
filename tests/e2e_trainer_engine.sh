#!/usr/bin/env bash
# Issue 6 end to end: a training loop publishes, stitchd spreads, an engine
# patches its torch tensors in place, the sidecar stamps the versions. The
# sidecar applies in two phases (issue 38): the engine's /prepare hook
# (EngineAdapter.prepare) while it serves, its /commit (commit()) in the
# pause.
#
#   trainer (tests/e2e_trainer.py: MLP + Adam + Publisher.hook, BF16 view)
#     -> store S <- stitchd seed -> stitchd node (--data D --weights W)
#     -> --http sidecar -> --engine tests/e2e_engine.py (EngineAdapter on D)
#
# The trainer publishes version 1 and pauses; the node must hold it, then
# POST /v1/apply makes the engine patch to it (from nothing, an anchor).
# The trainer goes on to version 3; the node must hold 3, and a second
# /v1/apply patches the engine's tensors in place over version 1. After each
# apply, completions through the sidecar (curl) must carry X-Stitch-Version
# equal to the version the engine reports in its body, and the engine's
# tensor digests must equal the trainer's served view of that version
# (bit-exact); the node's weights file W must digest (`stitch digest`) as
# the trainer's view; X-Stitch-Min-Version above the applied version with a
# short X-Stitch-Wait-Ms must get 409. Prints one summary line.
#
# Usage: e2e_trainer_engine.sh BIN_DIR [LIB]   (LIB: libstitch.so; default
# BIN_DIR/../lib/libstitch.so). Skips (77) without curl, torch or
# safetensors. PYTHON picks the interpreter.
set -euo pipefail
bin="$(cd "$1" && pwd)"
lib="${2:-$bin/../lib/libstitch.so}"
here="$(cd "$(dirname "$0")" && pwd)"
py="${PYTHON:-python3}"
command -v curl >/dev/null ||
  { echo "SKIP: e2e_trainer_engine.sh needs curl"; exit 77; }
"$py" -c 'import torch, safetensors' 2>/dev/null ||
  { echo "SKIP: e2e_trainer_engine.sh needs torch and safetensors" \
         "(tools/setup-python.sh)"; exit 77; }
[ -f "$lib" ] || { echo "FAIL: no $lib (build stitch_shared)" >&2; exit 1; }
export STITCH_LIB="$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")"
export PYTHONPATH="$(cd "$here/../python" && pwd)${PYTHONPATH:+:$PYTHONPATH}"

NAME=e2e LOGS="trainer.log node.log seed.log engine.log"
. "$here/agent_lib.sh"

"$bin/stitch" keygen --out "$work/k" >/dev/null

"$bin/stitchd" seed --key "$work/k.key" --listen 127.0.0.1:0 \
  --store "$work/store" >"$work/seed.out" 2>"$work/seed.log" &
pids+=($!)
seed="$(wait_line "$work/seed.out" '^stitchd: listening on ')"
mkdir -p "$work/data"
"$py" "$here/e2e_engine.py" --port-file "$work/engine.port" \
  --store "$work/data" --swarm "$work/k.pub" 2>"$work/engine.log" &
pids+=($!)
eport="$(wait_line "$work/engine.port" '^')"
ticket="$(admit "$work/data")"
"$bin/stitchd" node --swarm "$work/k.pub" --listen 127.0.0.1:0 \
  --peers "$seed" --weights "$work/w.st" --data "$work/data" \
  --ticket "$ticket" \
  --status "$work/node.json" --threads 1 \
  --http 127.0.0.1:0 --engine "http://127.0.0.1:$eport" \
  --engine-prepare /prepare --engine-reload /commit \
  >"$work/node.out" 2>"$work/node.log" &
node=$!
pids+=($node)
port="$(wait_line "$work/node.out" '^stitchd: http on port ')"
url="http://127.0.0.1:$port"

# The trainer: 3 steps, pausing after version 1 until told to go on.
"$py" "$here/e2e_trainer.py" --store "$work/store" --key "$work/k.key" \
  --steps 3 --out "$work/trainer.json" --views "$work/views" \
  --pause-after 1 --go "$work/go" >"$work/trainer.log" 2>&1 &
trainer=$!
pids+=($trainer)

# Applies the newest held version (which must be $1) and checks the engine
# serves exactly the trainer's view of it. Keeps the /v1/apply answer in
# $work/apply$1.json.
apply_and_check() {
  local v="$1"
  curl -sf -o "$work/apply$v.json" -X POST "$url/v1/apply" ||
    fail "POST /v1/apply: $(status)"
  [ "$(json applied_version <"$work/apply$v.json")" = "$v" ] ||
    fail "apply $v: $(cat "$work/apply$v.json")"
  curl -sf -D "$work/h$v" -o "$work/c$v.json" -X POST "$url/v1/completions" \
    -H 'Content-Type: application/json' \
    -H "X-Stitch-Min-Version: $v" -H 'X-Stitch-Wait-Ms: 5000' \
    -d '{"model": "e2e", "prompt": "hi", "max_tokens": 1}' ||
    fail "completion at version $v"
  local stamp
  stamp="$(sed -n 's/^[Xx]-[Ss]titch-[Vv]ersion: *\([0-9]*\).*/\1/p' "$work/h$v")"
  [ -n "$stamp" ] || fail "no X-Stitch-Version: $(cat "$work/h$v")"
  "$py" - "$work/c$v.json" "$work/trainer.json" "$stamp" "$v" <<'EOF' ||
import json, sys
body = json.load(open(sys.argv[1]))
trainer = json.load(open(sys.argv[2]))["versions"][sys.argv[4]]
stamp, want = int(sys.argv[3]), int(sys.argv[4])
assert stamp == body["version"] == want, \
    "stamp %d, engine body %d, applied %d" % (stamp, body["version"], want)
assert body["in_place"] is True, "the engine's tensors moved"
got, exp = body["tensor_digests"], trainer["tensor_digests"]
assert sorted(got) == sorted(exp), (sorted(got), sorted(exp))
bad = [n for n in exp if got[n] != exp[n]]
assert not bad, "version %d: engine tensors differ from the trainer's: %s" \
    % (want, bad)
EOF
    fail "engine at version $v: $(head -c 400 "$work/c$v.json")"
  # The node's weights file is the trainer's view of v, bit-exact.
  local wd td
  wd="$("$bin/stitch" digest "$work/w.st")" || fail "stitch digest w.st"
  td="$("$bin/stitch" digest "$work/views/view-$v.safetensors")" ||
    fail "stitch digest view-$v"
  [ "$wd" = "$td" ] || fail "weights file at $v: $wd, trainer's view: $td"
  # Above the applied version, a short wait: 409 naming the applied one.
  local code
  code="$(curl -s -o "$work/409.json" -w '%{http_code}' -X POST \
    "$url/v1/completions" -H "X-Stitch-Min-Version: $((v + 1))" \
    -H 'X-Stitch-Wait-Ms: 200' -d '{"prompt": "too new"}')"
  [ "$code" = 409 ] || fail "Min-Version $((v + 1)): $code $(cat "$work/409.json")"
  [ "$(json applied_version <"$work/409.json")" = "$v" ] ||
    fail "409 body: $(cat "$work/409.json")"
}

# Version 1 (an anchor) while the trainer waits.
wait_line "$work/trainer.log" '^published 1$' 120 >/dev/null
wait_held 1
[ "$(status | json applied_version)" = 0 ] || fail "applied before /v1/apply"
apply_and_check 1

# Versions 2 and 3, then an in-place patch from 1 to 3.
touch "$work/go"
wait "$trainer" || fail "the trainer exited $?"
wait_held 3
apply_and_check 3

# The trainer's own record: every view is torch's BF16 cast of the masters
# and changed; the engine reloaded twice, to 1 then 3. The summary line.
"$py" - "$work/trainer.json" "$work/apply1.json" "$work/apply3.json" \
  "$work/node.json" \
  "$(curl -sf "http://127.0.0.1:$eport/state")" <<'EOF' || fail "summary"
import json, sys
tr = json.load(open(sys.argv[1]))
a1, a3, node, eng = (json.load(open(sys.argv[2])), json.load(open(sys.argv[3])),
                     json.load(open(sys.argv[4])), json.loads(sys.argv[5]))
vs = tr["versions"]
assert sorted(vs, key=int) == ["1", "2", "3"], sorted(vs)
for v, r in vs.items():
    assert r["bf16_cast_exact"], "version %s is not torch's BF16 cast" % v
for v in ("2", "3"):
    assert vs[v]["changed_fraction"] > 0, "version %s changed nothing" % v
r1, r3 = eng["reloads"]
assert [r1["version"], r3["version"]] == [1, 3], eng["reloads"]
assert [p["version"] for p in eng["prepares"]] == [1, 3], eng["prepares"]
print("e2e_trainer_engine: ok: params %d, versions 1..3 (%s), view %d B, "
      "published %s B, changed %s; node held 3, bytes_down %d "
      "(from seed %d); engine applies 0->1 prepare %d ms, pause %d ms "
      "(%d B, sidecar prepare_ms %d, pause_ms %d), 1->3 prepare %d ms, "
      "pause %d ms (%d steps, %d B, undo %d B, sidecar prepare_ms %d, "
      "pause_ms %d); stamps = engine versions = 1, 3; engine tensors and "
      "weights file bit-exact with the trainer's views; 409 above applied"
      % (tr["params"], "+".join("/".join(vs[v]["objects"]) for v in "123"),
         vs["3"]["view_bytes"],
         "/".join(str(vs[v]["object_bytes"]) for v in "123"),
         "/".join("%.3f" % vs[v]["changed_fraction"] for v in "23"),
         node["bytes_down"], node["bytes_from_seed"],
         r1["stats"]["prepare_s"] * 1e3, r1["pause_s"] * 1e3,
         r1["stats"]["bytes"], a1["prepare_ms"], a1["pause_ms"],
         r3["stats"]["prepare_s"] * 1e3, r3["pause_s"] * 1e3,
         r3["stats"]["steps"], r3["stats"]["bytes"],
         r3["stats"]["undo_bytes"], a3["prepare_ms"], a3["pause_ms"]))
EOF
kill -TERM "$node"
rc=0
wait "$node" || rc=$?
[ "$rc" = 0 ] || fail "stitchd exited $rc on SIGTERM"
