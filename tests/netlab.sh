#!/usr/bin/env bash
# tools/netlab on simulations/scenarios/netlab_ci.json: 8 real stitchd
# nodes and a seed in network namespaces, 2 regions on shaped links, one
# node behind a NAT (nftables masquerade, nothing let in), 1 % loss and
# jitter on the backbone through stitch-linkemu, 3 versions. Every node,
# the NATed one too, must hold every version, bit-exact; the NATed node
# must have dialed out through its NAT, and a dial into it must go
# unanswered; every node must have been ready (its chunks in) no later
# than its apply ended; the emulator must have lost packets; and
# afterwards no namespace with the run's prefix may remain (nor a daemon
# in one). With stitch-sim built, the run also carries stitch-sim's
# reference keys (bound_s, ratio, lb_s, lb_ratio, latency_s, and the
# budget_ ones beside them), consistent with its times; without, they are left out and bounds_note says why. A
# run must refuse a scenario it cannot host (one line, exit 2) and leave
# nothing; a last one, stopped by SIGINT mid-run, must leave nothing
# either: no namespace, no process.
#
# Skips (77) with one line when namespaces cannot be made (not root, or
# `ip netns add` fails: a container without CAP_SYS_ADMIN) or nft is
# missing (tests/netlab_lib.sh). About 12 s; netlab's own time limit (the
# scenario's 60 s) bounds it.
# Usage: netlab.sh BIN_DIR
set -uo pipefail
me=netlab.sh
tag=test
need_nft=1
source "$(dirname "$0")/netlab_lib.sh" "$@"

kept="$(mktemp -d)"
trap 'rm -rf "$kept"' EXIT
netlab_run "$root/simulations/scenarios/netlab_ci.json" "$bin" \
  --out "$kept/run" --log-chunks
printf '%s\n' "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
def no(why):
    sys.exit("netlab.sh: %s" % why)
if r["completed"] is not True:
    no("not completed")
if r.get("queue") != "fair":  # the default: a class per peer (docs/netlab.md)
    no("queue %s, not fair" % r.get("queue"))
if r["all_bit_exact"] is not True or r["bit_exact_nodes"] != 8:
    no("not every node is bit-exact")
if [v["version"] for v in r["versions"]] != [1, 2, 3]:
    no("versions %s" % [v["version"] for v in r["versions"]])
for v in r["versions"]:
    if v["held"] != 8 or v["max_s"] is None or v["seed_bytes"] <= 0:
        no("version %d: %s" % (v["version"], v))
    # Each node is ready (every chunk in) before its apply ends.
    if v["ready_max_s"] is None or not v["ready_p50_s"] <= v["p50_s"] or \
            not v["ready_max_s"] <= v["max_s"]:
        no("version %d: ready times: %s" % (v["version"], v))
    # The host CPU over it, a share (None only for a span under 0.2 s).
    b = v["host_busy"]
    if b is not None and not 0 <= b <= 1 or b is None and v["max_s"] > 0.3:
        no("version %d: host_busy %s" % (v["version"], b))
if r["versions"][0]["cross_region_bytes"] <= 0:
    no("nothing crossed into the second region")
x = r["nat"]
if x is None or len(x["nodes"]) != 1 or x["bit_exact"] != 1:
    no("not 1 NATed node, bit-exact: %s" % x)
if x["connections_out"] < 1 or x["inbound_probe"] != "dropped" or \
        x["inbound_dropped"] < 1:
    no("the NAT did not masquerade, or let a dial in: %s" % x)
# Every member interface carried its chunks and more: headers,
# acknowledgements, control frames (docs/simulator.md "What the links
# carry").
lb, cb = r.get("node_link_bytes"), r.get("node_chunk_bytes")
if not lb or not cb or len(lb) != 9 or len(cb) != 9 or \
        any(not isinstance(x, int) or x <= c for x, c in zip(lb, cb)) or cb[0] <= 0:
    no("link bytes %s against chunk bytes %s" % (lb, cb))
if not r["link_packets"] or r["link_packets"]["lost"] <= 0:
    no("the emulator lost nothing: %s" % r["link_packets"])
if "late_p99_us" not in r["link_packets"]:
    no("the emulator said nothing of its lateness: %s" % r["link_packets"])
if sys.argv[1] == "yes":  # stitch-sim built: its keys, consistent (never a timing)
    if "bounds_note" in r or not r.get("latency_s", 0) > 0:
        no("no latency_s: %s" % r.get("bounds_note"))
    for v in r["versions"]:
        if not v["bound_s"] > 0 or abs(v["lb_s"] - v["bound_s"] - r["latency_s"]) > 1e-9 or \
                abs(v["ratio"] - v["max_s"] / v["bound_s"]) > 1e-3 or \
                abs(v["lb_ratio"] - v["max_s"] / v["lb_s"]) > 1e-3 or \
                not 0 < v["node_bound_s"] <= v["bound_s"]:
            no("version %d: bounds %s" % (v["version"], v))
        if abs(v["budget_lb_s"] - v["budget_bound_s"] - r["budget_latency_s"]) > 1e-9 or \
                not v["budget_bound_s"] >= v["bound_s"] or \
                not r["budget_latency_s"] >= r["latency_s"] or \
                abs(v["budget_lb_ratio"] - v["max_s"] / v["budget_lb_s"]) > 1e-3:
            no("version %d: budget reference %s" % (v["version"], v))
elif "stitch-sim" not in r.get("bounds_note", "") or "latency_s" in r or \
        any("bound_s" in v for v in r["versions"]):
    no("without stitch-sim: %s" % r.get("bounds_note"))
' "$([ -x "$bin/stitch-sim" ] && echo yes || echo no)" || exit 1

# stitchd --log-chunks: tools/hops pairs the chunks each node took with
# their senders' lines (those of the NATed node, which has no address to
# be named by, stay unmatched).
python3 "$root/tools/hops" 2 "$kept/run" > "$kept/hops.txt" ||
  fail "tools/hops failed: $(head -c 300 "$kept/hops.txt")"
python3 - "$kept/hops.txt" <<'PY' || exit 1
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"version 2: (\d+) chunks taken, (\d+) unmatched", t)
hops = sum(int(x) for x in re.findall(r"(\d+) hops", t))
if not m or int(m.group(1)) == 0 or hops == 0 or \
        hops + int(m.group(2)) != int(m.group(1)) or int(m.group(2)) * 2 > int(m.group(1)):
    sys.exit("netlab.sh: tools/hops: %s" % t[:300])
PY

# A scenario it cannot host: refused in one line before anything is made.
big="$(mktemp)"
trap 'rm -rf "$big" "$kept"' EXIT
python3 - "$root/simulations/scenarios/netlab_ci.json" "$big" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["regions"][0]["nodes"] = 41
json.dump(s, open(sys.argv[2], "w"))
PY
err="$(python3 "$root/tools/netlab" "$big" --bin "$bin" --prefix "$prefix" 2>&1 >/dev/null)"
rc=$?
[ $rc -eq 2 ] || fail "44 nodes: exit $rc, expected 2"
case "$err" in *"cannot host"*"nodes"*) ;; *) fail "44 nodes: '$err'" ;; esac
[ "$(printf '%s\n' "$err" | grep -vc warning)" -eq 1 ] || fail "44 nodes: more than one line: $err"
[ "$(left)" -eq 0 ] || fail "namespaces remain after a refusal"
# A key stitch-sim honours and netlab cannot: refused by name.
python3 - "$root/simulations/scenarios/netlab_ci.json" "$big" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["versions"]["tensors"] = 40
json.dump(s, open(sys.argv[2], "w"))
PY
err="$(python3 "$root/tools/netlab" "$big" --bin "$bin" --prefix "$prefix" 2>&1 >/dev/null)"
rc=$?
[ $rc -eq 2 ] || fail "versions.tensors: exit $rc, expected 2"
case "$err" in *"versions.tensors"*"not supported"*) ;; *) fail "versions.tensors: '$err'" ;; esac
# A queue discipline it does not know: a usage error, nothing made.
err="$(python3 "$root/tools/netlab" "$root/simulations/scenarios/netlab_ci.json" \
  --bin "$bin" --prefix "$prefix" --queue sfq 2>&1 >/dev/null)"
rc=$?
[ $rc -eq 2 ] || fail "--queue sfq: exit $rc, expected 2"
case "$err" in *"--queue"*"invalid choice"*) ;; *) fail "--queue sfq: '$err'" ;; esac
[ "$(left)" -eq 0 ] || fail "namespaces remain after --queue sfq"

# Ctrl-C in the middle of a run: netlab tears everything down (its
# daemons, the emulator, every namespace), says why in one line and exits
# 130. The signal goes once the first node has written its status, so the
# daemons are up; both waits are bounded.
python3 "$root/tools/netlab" "$root/simulations/scenarios/netlab_ci.json" \
  --bin "$bin" --prefix "$prefix" --out "$kept/int" --quiet \
  > /dev/null 2> "$kept/int.err" &
pid=$!
for _ in $(seq 240); do
  [ -s "$kept/int/node-0/status.json" ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.25
done
[ -s "$kept/int/node-0/status.json" ] || fail "Ctrl-C: no node started within 60 s"
[ "$(left)" -gt 0 ] || fail "Ctrl-C: no namespaces while running"
kill -INT $pid
for _ in $(seq 120); do kill -0 $pid 2>/dev/null || break; sleep 0.25; done
kill -0 $pid 2>/dev/null && { kill -9 $pid; fail "Ctrl-C: still running 30 s later"; }
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "Ctrl-C: exit $rc, expected 130: $(cat "$kept/int.err")"
grep -q "interrupted by signal 2" "$kept/int.err" ||
  fail "Ctrl-C: not said: $(cat "$kept/int.err")"
[ "$(left)" -eq 0 ] || fail "Ctrl-C: namespaces named $prefix-* remain"
! pgrep -f "$kept/int" > /dev/null ||
  fail "Ctrl-C: processes of the run remain: $(pgrep -af "$kept/int")"
echo "netlab.sh: ok"
