#!/usr/bin/env bash
# tools/netlab on simulations/scenarios/netlab_small.json: 8 real stitchd
# nodes and a seed in network namespaces, 2 regions on shaped links, 3
# versions. Every node must hold every version, bit-exact, and afterwards
# no namespace with the run's prefix may remain (nor a daemon in one).
# With stitch-sim built, the first run also carries stitch-sim's reference
# keys (bound_s, ratio, lb_s, lb_ratio, latency_s), consistent with its
# times. Then netlab_lossy.json (latency, jitter, 1 % backbone loss through
# stitch-linkemu) must end the same way, run without stitch-sim in its
# --bin: the keys are left out and bounds_note says why. A last run must refuse a scenario it cannot host (one line, exit 2)
# and leave nothing behind.
#
# Skips (77) when namespaces cannot be made: not root, or `ip netns add`
# fails (a container without CAP_SYS_ADMIN). About 20 s; netlab's own
# time limit (the scenario's 60 s) bounds it.
# Usage: netlab.sh BIN_DIR
set -uo pipefail
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
command -v python3 >/dev/null || { echo "SKIP: netlab.sh needs python3"; exit 77; }
command -v ip >/dev/null && command -v tc >/dev/null ||
  { echo "SKIP: netlab.sh needs ip and tc (iproute2)"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: netlab.sh needs root for ip netns"; exit 77; }
prefix="netlab-test-$$"
probe="$prefix-probe"
ip netns add "$probe" 2>/dev/null ||
  { echo "SKIP: netlab.sh: ip netns add fails here"; exit 77; }
ip netns del "$probe"

fail() { echo "netlab.sh: $*" >&2; exit 1; }
left() { ip netns list | awk '{print $1}' | grep -c "^$prefix-"; }

out="$(python3 "$root/tools/netlab" "$root/simulations/scenarios/netlab_small.json" \
         --bin "$bin" --json --quiet --prefix "$prefix")"
rc=$?
printf '%s\n' "$out"
n="$(left)"
[ "$n" -eq 0 ] || fail "$n namespace(s) named $prefix-* remain"
[ $rc -eq 0 ] || fail "netlab exited $rc"
printf '%s\n' "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
if r["completed"] is not True:
    sys.exit("netlab.sh: not completed")
if r["all_bit_exact"] is not True or r["bit_exact_nodes"] != 8:
    sys.exit("netlab.sh: not every node is bit-exact")
if [v["version"] for v in r["versions"]] != [1, 2, 3]:
    sys.exit("netlab.sh: versions %s" % [v["version"] for v in r["versions"]])
for v in r["versions"]:
    if v["held"] != 8 or v["max_s"] is None or v["seed_bytes"] <= 0:
        sys.exit("netlab.sh: version %d: %s" % (v["version"], v))
if r["versions"][0]["cross_region_bytes"] <= 0:
    sys.exit("netlab.sh: nothing crossed into the second region")
' || exit 1
# stitch-sim's reference keys, from `stitch-sim --bounds` for the real
# versions' bytes, when stitch-sim was built (it needs SimGrid). Their
# consistency only: a timing never decides here.
if [ -x "$bin/stitch-sim" ]; then
  printf '%s\n' "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
if "bounds_note" in r or not r.get("latency_s", 0) > 0:
    sys.exit("netlab.sh: no latency_s: %s" % r.get("bounds_note"))
for v in r["versions"]:
    if not v["bound_s"] > 0 or abs(v["lb_s"] - v["bound_s"] - r["latency_s"]) > 1e-9 or \
            abs(v["ratio"] - v["max_s"] / v["bound_s"]) > 1e-3 or \
            abs(v["lb_ratio"] - v["max_s"] / v["lb_s"]) > 1e-3 or \
            not 0 < v["node_bound_s"] <= v["bound_s"]:
        sys.exit("netlab.sh: version %d: bounds %s" % (v["version"], v))
' || exit 1
  # Without stitch-sim beside the others the keys are left out, and a
  # note says why (the lossy run below goes so).
  nosim="$(mktemp -d)"
  trap 'rm -rf "$nosim"' EXIT
  for p in stitch stitchd stitch-synth stitch-linkemu; do ln -s "$bin/$p" "$nosim/$p"; done
  lossy_bin="$nosim"
else
  lossy_bin="$bin"
fi

# Latency, jitter and loss through stitch-linkemu: 1 % loss and 40 +- 10 ms
# on the backbone, 0.5 % in one region. Still complete and bit-exact, and
# the emulator did lose packets.
out="$(python3 "$root/tools/netlab" "$root/simulations/scenarios/netlab_lossy.json" \
         --bin "$lossy_bin" --json --quiet --prefix "$prefix")"
rc=$?
printf '%s\n' "$out"
[ "$(left)" -eq 0 ] || fail "namespaces named $prefix-* remain after the lossy run"
[ $rc -eq 0 ] || fail "netlab (lossy) exited $rc"
printf '%s\n' "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
if r["completed"] is not True or r["all_bit_exact"] is not True or \
        r["bit_exact_nodes"] != 6:
    sys.exit("netlab.sh: lossy: not complete and bit-exact")
if not r["link_packets"] or r["link_packets"]["lost"] <= 0:
    sys.exit("netlab.sh: lossy: the emulator lost nothing: %s" % r["link_packets"])
if sys.argv[1] != sys.argv[2] and ("stitch-sim" not in r.get("bounds_note", "") or
        "latency_s" in r or any("bound_s" in v for v in r["versions"])):
    sys.exit("netlab.sh: lossy, without stitch-sim: %s" % r.get("bounds_note"))
' "$bin" "$lossy_bin" || exit 1

# A scenario it cannot host: refused in one line before anything is made.
big="$(mktemp)"
trap 'rm -f "$big"; rm -rf "${nosim:-}"' EXIT
python3 - "$root/simulations/scenarios/netlab_small.json" "$big" <<'PY'
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
echo "netlab.sh: ok"
