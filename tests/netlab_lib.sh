# netlab_lib.sh: what tests/netlab*.sh share, sourced after they set
# `me` (the script's name, for messages) and `tag` (a word for the
# namespace prefix). Sets bin, root, prefix; skips (exit 77, one line)
# when namespaces cannot be made here: no python3, no iproute2, not root,
# no /dev/net/tun (the link emulator's TAP devices), or `ip netns add`
# fails (a container without CAP_SYS_ADMIN); with
# `need_nft=1`, also without nft. Defines fail, left (the namespaces of
# the run that remain) and netlab_run (runs tools/netlab on a scenario,
# leaves its JSON in $out, fails unless it exited 0 and left nothing).
# Usage in a test: me=netlab_x.sh; tag=x; source netlab_lib.sh "$@"
bin="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
skip() { echo "SKIP: $me: $*"; exit 77; }
command -v python3 >/dev/null || skip "needs python3"
command -v ip >/dev/null && command -v tc >/dev/null || skip "needs ip and tc (iproute2)"
[ "${need_nft:-0}" -eq 0 ] || command -v nft >/dev/null ||
  skip "needs nft (apt-get install nftables; tools/setup.sh does)"
[ "$(id -u)" -eq 0 ] || skip "needs root for ip netns"
[ -c /dev/net/tun ] || skip "needs /dev/net/tun (stitch-linkemu's TAP devices)"
prefix="netlab-$tag-$$"
ip netns add "$prefix-probe" 2>/dev/null || skip "ip netns add fails here"
ip netns del "$prefix-probe"

fail() { echo "$me: $*" >&2; exit 1; }
left() { ip netns list | awk '{print $1}' | grep -c "^$prefix-"; }

netlab_run() { # SCENARIO.json [BIN [NETLAB-ARG...]]
  local rc sc="$1" b="${2:-$bin}"
  shift $(($# < 2 ? $# : 2))
  out="$(python3 "$root/tools/netlab" "$sc" --bin "$b" --json --quiet \
           --prefix "$prefix" "$@")"
  rc=$?
  printf '%s\n' "$out"
  [ "$(left)" -eq 0 ] || fail "$(basename "$sc"): namespaces named $prefix-* remain"
  [ $rc -eq 0 ] || fail "$(basename "$sc"): netlab exited $rc"
}
