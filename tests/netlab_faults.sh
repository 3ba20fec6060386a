#!/usr/bin/env bash
# tools/netlab's faults (docs/netlab.md "Faults") on real stitchd processes
# in network namespaces:
#   netlab_partition.json    eu cut from both other regions for 10 s while
#                            version 3 goes out; every node holds it after
#                            the heal;
#   netlab_kill.json         kill -9 of 3 of 10 nodes during the anchor,
#                            back 5 s later on their own data, then of 3
#                            during a delta: they recover their weights
#                            and catch up, and the 7 others converge
#                            meanwhile;
#   netlab_seed_restart.json kill -9 of the seed, a version published
#                            while it is down, the seed back on its store.
# Each must end complete (every fault followed by every live node holding
# the latest version) and every node bit-exact, and leave no namespace.
# Then a fault netlab does not know is refused in one line (exit 2).
#
# Skips (77) when namespaces cannot be made, as tests/netlab.sh. About
# 60 s; each scenario's time_limit_s (60 s) bounds its run.
# Usage: netlab_faults.sh BIN_DIR
set -uo pipefail
me=netlab_faults.sh
tag=ftest
source "$(dirname "$0")/netlab_lib.sh" "$@"

run() { # SCENARIO: runs it, checks the common ground, leaves the JSON in $out
  netlab_run "$root/simulations/scenarios/$1.json"
  printf '%s\n' "$out" | python3 -c '
import json, sys
name = sys.argv[1]
r = json.load(sys.stdin)
if r["completed"] is not True or r["all_bit_exact"] is not True or \
        r["bit_exact_nodes"] != r["nodes"]:
    sys.exit("%s: not complete and bit-exact" % name)
if not r["faults"]:
    sys.exit("%s: no faults reported" % name)
for f in r["faults"]:
    if f["began_s"] is None or f["ended_s"] is None or f["converged_s"] is None:
        sys.exit("%s: fault %s did not run or converge" % (name, f))
' "$1" || exit 1
}

check() { # NAME PYTHON: a check on the JSON in $out (as r)
  printf '%s\n' "$out" | python3 -c "
import json, sys
r = json.load(sys.stdin)
$2
" || fail "$1"
}

run netlab_partition
# The cut must have bitten: eu's 3 nodes lacked version 3 at the heal.
check "partition: eu was not behind at the heal" '
f = r["faults"][0]
if f["behind_at_end"] != 3 or f["converged_version"] != 3:
    sys.exit("netlab_faults.sh: partition: %s" % f)'

run netlab_kill
# Both kills took 3 nodes, the first during the anchor; the others
# converged meanwhile; a node came back holding at least what it held when
# killed (its weights file recovered, nothing lost).
check "kill: not as planned" '
fs = r["faults"]
if len(fs) != 2 or fs[0]["behind_at_kill"] != 3:
    sys.exit("netlab_faults.sh: kill: %s" % fs)
for f in fs:
    if len(f["nodes"]) != 3 or f["rest_converged_s"] is None or \
            any(b < a for a, b in zip(f["held_at_kill"], f["recovered"])):
        sys.exit("netlab_faults.sh: kill: %s" % f)'

run netlab_seed_restart
# Version 3 went into the store while the seed was down: every node
# holds it (completed says so) and the last one.
check "seed restart: not as planned" '
f = r["faults"][0]
if f["converged_version"] != 4 or r["versions"][2]["held"] != r["nodes"]:
    sys.exit("netlab_faults.sh: seed restart: %s" % f)'

# A fault netlab does not know: one line, exit 2, nothing made.
bad="$(mktemp)"
trap 'rm -f "$bad"' EXIT
python3 - "$root/simulations/scenarios/netlab_kill.json" "$bad" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["faults"] = [{"at_s": 1, "kind": "flood"}]
json.dump(s, open(sys.argv[2], "w"))
PY
err="$(python3 "$root/tools/netlab" "$bad" --bin "$bin" --prefix "$prefix" 2>&1 >/dev/null)"
rc=$?
[ $rc -eq 2 ] || fail "an unknown fault: exit $rc, expected 2"
case "$err" in *"faults[0].kind"*) ;; *) fail "an unknown fault: '$err'" ;; esac
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "an unknown fault: more than one line: $err"
[ "$(left)" -eq 0 ] || fail "namespaces remain after a refusal"
echo "netlab_faults.sh: ok"
