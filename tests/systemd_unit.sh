#!/bin/sh
# stitchd-node.service as installed: systemd-analyze verify must accept it
# without a word about it (it exits 0 on unknown keys and bad values, which
# it only prints), and its exposure (systemd-analyze security) stay at 2.0
# or below, i.e. hardened. Skips (77) without systemd-analyze.
# usage: systemd_unit.sh BUILD_DIR
set -eu
build=$1
command -v systemd-analyze >/dev/null ||
  { echo "systemd_unit: no systemd-analyze (Debian package systemd), skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/p" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; echo "systemd_unit: cmake --install failed" >&2; exit 1; }
unit=$tmp/p/lib/systemd/system/stitchd-node.service
out=$(systemd-analyze verify "$unit" 2>&1) && rc=0 || rc=$?
said=$(printf '%s\n' "$out" | grep 'stitchd-node' || true)
if [ "$rc" -ne 0 ] || [ -n "$said" ]; then
  printf '%s\n' "$out" >&2
  echo "systemd_unit: systemd-analyze verify refused the unit (rc $rc)" >&2
  exit 1
fi
# --offline needs systemd 250 or later; an older one cannot judge, so only
# verify counts there.
if systemd-analyze --help 2>/dev/null | grep -q -- --offline; then
  sec=$(systemd-analyze security --offline=yes --threshold=20 "$unit" 2>&1) || {
    printf '%s\n' "$sec" | tail -n 25 >&2
    echo "systemd_unit: exposure above 2.0" >&2
    exit 1
  }
  printf '%s\n' "$sec" | tail -n 1
fi
echo "systemd_unit: ok"
