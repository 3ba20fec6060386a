#!/usr/bin/env bash
# tools/netlab on simulations/scenarios/netlab_nat.json: 10 real stitchd
# nodes in two regions, half of each behind a NAT of its own (nftables
# masquerade in a router namespace, nothing let in), 1 % loss on the
# backbone. Every node, the NATed ones too, must hold every version
# bit-exact; the NATed nodes must have dialed out through their NATs and
# uploaded over those links; a dial into a NAT must go unanswered; and no
# namespace of the run may remain.
#
# Skips (77) when namespaces cannot be made or nft is missing
# (tests/netlab_lib.sh; tools/setup.sh installs nftables). About 15 s; the
# scenario's time_limit_s (60 s) bounds it.
# Usage: netlab_nat.sh BIN_DIR
set -uo pipefail
me=netlab_nat.sh
tag=ntest
need_nft=1
source "$(dirname "$0")/netlab_lib.sh" "$@"

netlab_run "$root/simulations/scenarios/netlab_nat.json"
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
