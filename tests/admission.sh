#!/usr/bin/env bash
# A closed swarm with real stitchd processes on loopback (docs/security.md):
# a seed and two nodes with tickets converge on two versions; a node
# started without a ticket is refused by every member and holds nothing;
# stitchd refuses at start a ticket of another swarm, one for another key,
# an expired one and a damaged one, each with one line. Then `stitch
# revoke` shuts one ticketed node out: its links drop and the next version
# does not reach it.
# Usage: admission.sh BIN_DIR
set -euo pipefail
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
NAME=admission LOGS="seed.log n1.log n2.log bad.log"
. "$here/agent_lib.sh"

seed_up 2

# start NAME [stitchd node flags...]: a node peering with the seed.
start() {
  local n="$1"
  shift
  "$bin/stitchd" node --swarm "$work/k.pub" --listen 127.0.0.1:0 \
    --peers "$seed" --weights "$work/$n.st" --data "$work/$n" \
    --status "$work/$n.json" --threads 1 "$@" \
    >"$work/$n.out" 2>"$work/$n.log" &
  pids+=($!)
  wait_line "$work/$n.out" '^stitchd: listening on ' >/dev/null
}
field() { json "$2" <"$work/$1.json"; }
wait_at() { # wait_at NODE VERSION
  for _ in $(seq 600); do
    [ -s "$work/$1.json" ] && [ "$(field "$1" held_version)" -ge "$2" ] &&
      return 0
    sleep 0.1
  done
  fail "$1 does not hold version $2 in 60 s"
}

start n1 --ticket "$(admit "$work/n1")"
start n2 --ticket "$(admit "$work/n2")"
mkdir -p "$work/bad"
start bad # no ticket: it starts, and every member refuses it
grep -q "no --ticket" "$work/bad.log" || fail "no warning without --ticket"
wait_at n1 1
wait_at n2 1
"$bin/stitch" publish --key "$work/k.key" --store "$work/store" \
  "$work/traj/step_0001.safetensors" >/dev/null
wait_at n1 2
wait_at n2 2
sleep 1 # a status beat (500 ms) past the others' convergence
[ "$(field bad held_version)" = 0 ] || fail "the node without a ticket holds a version"
[ "$(field bad latest_version)" = 0 ] || fail "the node without a ticket heard of a version"
[ "$(field bad bytes_down)" = 0 ] || fail "the node without a ticket got chunk bytes"
refused=$(( $(field n1 refused) + $(field n2 refused) ))
grep -q "refused at the handshake: no ticket" "$work/seed.log" ||
  fail "the seed did not log the refusal"

# stitchd refuses bad tickets at start, with one line and exit 1.
"$bin/stitch" keygen --out "$work/k2" >/dev/null
mkdir -p "$work/x1" "$work/x2" "$work/x3" "$work/x4"
"$bin/stitch" keygen --out "$work/x1/node" >/dev/null
"$bin/stitch" admit --key "$work/k2.key" --node "$work/x1/node.pub" \
  --out "$work/x1/ticket" >/dev/null # another swarm's trainer
"$bin/stitch" keygen --out "$work/x2/node" >/dev/null
cp "$work/n1/ticket" "$work/x2/ticket" # another node's ticket
"$bin/stitch" keygen --out "$work/x3/node" >/dev/null
"$bin/stitch" admit --key "$work/k.key" --node "$work/x3/node.pub" \
  --out "$work/x3/ticket" --expires 1s >/dev/null
"$bin/stitch" keygen --out "$work/x4/node" >/dev/null
"$bin/stitch" admit --key "$work/k.key" --node "$work/x4/node.pub" \
  --out "$work/x4/ticket" >/dev/null
python3 - "$work/x4/ticket" <<'PY' # one hex digit of the signature changed
import sys
p = sys.argv[1]
s = open(p).read()
i = len("stitch-ticket ") + 2 * 100
open(p, "w").write(s[:i] + ("1" if s[i] == "0" else "0") + s[i + 1:])
PY
sleep 2 # x3's ticket has expired
for x in x1:"another swarm" x2:"names another node key" x3:"expired" \
         x4:"does not verify"; do
  d="${x%%:*}" want="${x#*:}"
  rc=0
  timeout 30 "$bin/stitchd" node --swarm "$work/k.pub" \
    --listen 127.0.0.1:0 --weights "$work/$d.st" --data "$work/$d" \
    --ticket "$work/$d/ticket" >"$work/$d.out" 2>"$work/$d.err" || rc=$?
  [ "$rc" = 1 ] || fail "stitchd with ticket $d: exit $rc, want 1"
  [ "$(wc -l <"$work/$d.err")" = 1 ] || fail "stitchd with ticket $d: $(cat "$work/$d.err")"
  grep -q "^stitchd: error: --ticket .*$want" "$work/$d.err" ||
    fail "stitchd with ticket $d: $(cat "$work/$d.err")"
done

# Revoked: n2's links drop, and version 3 reaches n1 but not n2.
"$bin/stitch" revoke --key "$work/k.key" --store "$work/store" \
  --node "$work/n2/node.pub" >/dev/null
for _ in $(seq 100); do
  [ "$(field n2 peers)" = 0 ] && [ "$(field n1 policy_serial)" -ge 1 ] && break
  sleep 0.1
done
[ "$(field n2 peers)" = 0 ] || fail "the revoked node still has $(field n2 peers) links"
"$bin/stitch" publish --key "$work/k.key" --store "$work/store" \
  "$work/traj/step_0002.safetensors" >/dev/null
wait_at n1 3
sleep 1
[ "$(field n2 held_version)" = 2 ] || fail "the revoked node holds version $(field n2 held_version)"
echo "admission: ok: n1 and n2 at v2, the node without a ticket at nothing" \
     "($refused refusals counted by the nodes), four bad tickets refused at" \
     "start, the revoked node kept at v2 while n1 reached v3"
