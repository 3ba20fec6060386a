#!/usr/bin/env bash
# tools/netlab on simulations/scenarios/netlab_nat.json: 10 real stitchd
# nodes in two regions, half of each behind a NAT of its own (nftables
# masquerade in a router namespace, nothing let in), 1 % loss on the
# backbone. Every node, the NATed ones too, must hold every version
# bit-exact; the NATed nodes must have dialed out through their NATs and
# uploaded over those links; a dial into a NAT must go unanswered; and no
# namespace of the run may remain.
#
# Skips (77) when namespaces cannot be made (as tests/netlab.sh) or nft is
# missing (tools/setup.sh installs nftables). About 15 s; the scenario's
# time_limit_s (60 s) bounds it.
# Usage: netlab_nat.sh BIN_DIR
set -uo pipefail
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
command -v python3 >/dev/null || { echo "SKIP: netlab_nat.sh needs python3"; exit 77; }
command -v ip >/dev/null && command -v tc >/dev/null ||
  { echo "SKIP: netlab_nat.sh needs ip and tc (iproute2)"; exit 77; }
command -v nft >/dev/null ||
  { echo "SKIP: netlab_nat.sh needs nft (apt-get install nftables; tools/setup.sh does)"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: netlab_nat.sh needs root for ip netns"; exit 77; }
prefix="netlab-ntest-$$"
ip netns add "$prefix-probe" 2>/dev/null ||
  { echo "SKIP: netlab_nat.sh: ip netns add fails here"; exit 77; }
ip netns del "$prefix-probe"

fail() { echo "netlab_nat.sh: $*" >&2; exit 1; }

out="$(python3 "$root/tools/netlab" "$root/simulations/scenarios/netlab_nat.json" \
         --bin "$bin" --json --quiet --prefix "$prefix")"
rc=$?
printf '%s\n' "$out"
n="$(ip netns list | awk '{print $1}' | grep -c "^$prefix-")"
[ "$n" -eq 0 ] || fail "$n namespace(s) named $prefix-* remain"
[ $rc -eq 0 ] || fail "netlab exited $rc"
printf '%s\n' "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
x = r["nat"]
def no(why):
    sys.exit("netlab_nat.sh: %s: %s" % (why, x))
if r["completed"] is not True or r["all_bit_exact"] is not True or \
        r["bit_exact_nodes"] != 10:
    no("not complete and bit-exact")
if x is None or len(x["nodes"]) != 5 or x["bit_exact"] != 5:
    no("not 5 NATed nodes, all bit-exact")
if x["connections_out"] < 5 or x["inbound_probe"] != "dropped" or \
        x["inbound_dropped"] < 1:
    no("the NATs did not masquerade, or let a dial in")
if not x["bytes_up"] > 0:
    no("the NATed nodes uploaded nothing")
' || exit 1
echo "netlab_nat.sh: ok"
