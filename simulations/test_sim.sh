#!/bin/sh
# The simulator under ctest (docs/simulator.md): the small scenario
# completes, every chunk is verified and stored once, no completion beats
# the bound; broken scenario files fail with one line and a nonzero exit.
# Usage: test_sim.sh STITCH-SIM SIMULATIONS-DIR
set -eu
sim="$1"
dir="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

check() { # OUT.JSON NETWORK
python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def fail(why):
    sys.exit("sim_small (%s): %s" % (sys.argv[2], why))
if r["completed"] is not True:
    fail("not every node held every version")
if r["verify_failures"] != 0 or r["bad_writes"] != 0 or r["apply_errors"] != 0:
    fail("verify_failures %d, bad_writes %d, apply_errors %d"
         % (r["verify_failures"], r["bad_writes"], r["apply_errors"]))
if r["chunks_stored"] != r["chunks_needed"] or r["chunks_needed"] == 0:
    fail("chunks stored %d != needed %d" % (r["chunks_stored"], r["chunks_needed"]))
if r["nodes"] != 20 or len(r["versions"]) != 3:
    fail("expected 20 nodes and 3 versions")
for v in r["versions"]:
    if v["max_s"] < v["bound_s"] or v["ratio"] < 1:
        fail("version %d: max %.6f s beats the bound %.6f s"
             % (v["version"], v["max_s"], v["bound_s"]))
    if v["min_s"] < v["node_bound_s"]:
        fail("version %d: a node finished in %.6f s, under %.6f s"
             % (v["version"], v["min_s"], v["node_bound_s"]))
    if v["seed_bytes"] < v["bytes"]:
        fail("version %d: the seed sent %d B of %d" % (v["version"], v["seed_bytes"], v["bytes"]))
print("sim_small (%s): ok, ratios %s" % (sys.argv[2], ", ".join("%.2f" % v["ratio"] for v in r["versions"])))
PY
}

# The same swarm on both networks (driver.h): SimGrid's flows and the
# link queues that large scenarios use.
"$sim" "$dir/scenarios/small.json" --json > "$tmp/out.json"
check "$tmp/out.json" flows
sed 's/"mode": "p2p"/"network": "queues", "mode": "p2p"/' "$dir/scenarios/small.json" > "$tmp/queues.json"
"$sim" "$tmp/queues.json" --json > "$tmp/queues.out"
check "$tmp/queues.out" queues

# Central mode on the same platform completes too, on both networks.
sed 's/"mode": "p2p"/"mode": "central"/' "$dir/scenarios/small.json" > "$tmp/central.json"
"$sim" "$tmp/central.json" --json > "$tmp/central.out"
grep -q '"completed": true' "$tmp/central.out" || { echo "sim_small: central mode did not complete"; exit 1; }
sed 's/"mode": "p2p"/"network": "queues", "mode": "central"/' "$dir/scenarios/small.json" > "$tmp/centralq.json"
"$sim" "$tmp/centralq.json" --json > "$tmp/centralq.out"
grep -q '"completed": true' "$tmp/centralq.out" || { echo "sim_small: central mode (queues) did not complete"; exit 1; }

# Bad files: one line on stderr naming the key, exit 1.
bad() { # NAME JSON EXPECTED-SUBSTRING
  printf '%s\n' "$2" > "$tmp/$1.json"
  if "$sim" "$tmp/$1.json" > /dev/null 2> "$tmp/$1.err"; then
    echo "sim_small: $1: accepted"; exit 1
  fi
  [ "$(wc -l < "$tmp/$1.err")" -eq 1 ] || { echo "sim_small: $1: not one line:"; cat "$tmp/$1.err"; exit 1; }
  grep -q "$3" "$tmp/$1.err" || { echo "sim_small: $1: no '$3' in:"; cat "$tmp/$1.err"; exit 1; }
}
good='"regions": [{"name": "us", "nodes": 2, "up_mbps": 100, "down_mbps": 100, "latency_ms": 1}], "inter_region": {"mbps": 100, "latency_ms": 1}, "versions": {"count": 1, "bytes": 100000, "interval_s": 1}, "churn": {"leave_per_min": 0, "join_per_min": 0}, "mode": "p2p", "time_limit_s": 10'
bad missing "{\"seed\": {\"region\": \"us\"}, $good}" "seed.up_mbps: missing"
bad type "{\"seed\": {\"region\": \"us\", \"up_mbps\": \"fast\"}, $good}" "seed.up_mbps: expected a number"
bad region "{\"seed\": {\"region\": \"eu\", \"up_mbps\": 100}, $good}" "seed.region"
bad syntax "{\"seed\": " "bad.json\|syntax\|end of file"
bad network "{\"seed\": {\"region\": \"us\", \"up_mbps\": 100}, \"network\": \"fast\", $good}" "network"
printf '%s\n' "{\"seed\": {\"region\": \"us\", \"up_mbps\": 100}, \"extra\": 1, $good}" > "$tmp/ok.json"
"$sim" "$tmp/ok.json" > /dev/null || { echo "sim_small: an unknown key was refused"; exit 1; }
echo "sim_small: bad scenario files refused"
