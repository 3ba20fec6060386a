#!/usr/bin/env bash
# No chunk crosses the wire in clear (proto/wire.md "Encrypted records"):
# tcpdump records loopback on the swarm's ports while a seed and 2 nodes
# move 2 versions, then every chunk file of the seed's store is searched
# for in the raw capture, by several 32-byte windows from its
# high-entropy parts. None may be found.
#
# The search is shown able to find clear text: one chunk file is sent
# over plain TCP under a second capture, and the same search must find
# most of its windows there. The main capture must hold at least as many
# bytes as the chunks (the nodes fetched them through it).
#
# Skips (77) without tcpdump or python3, or where capture on lo is not
# permitted. Bounded: each capture stops after 60 s or 200,000 packets.
# Usage: capture.sh BIN_DIR
set -euo pipefail
command -v tcpdump >/dev/null && command -v python3 >/dev/null ||
  { echo "SKIP: capture.sh needs tcpdump and python3"; exit 77; }
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
NAME=capture LOGS="seed.log node-0.log node-1.log tcpdump.log canary.log"
. "$here/agent_lib.sh"

# As root, tcpdump drops to its own user before it opens the file, which
# cannot write into our private $work; stay root there.
zflag=()
[ "$(id -u)" -ne 0 ] || zflag=(-Z root)

# capture FILE LOG PORT...: starts tcpdump on lo for those TCP ports, in
# the background (its pid in $cap_pid and in pids, so the exit trap
# kills it), and returns once it is listening. Exits 77 when capture is
# not permitted.
capture() {
  local file="$1" log="$2" filter="" p
  shift 2
  for p in "$@"; do filter="${filter:+$filter or }port $p"; done
  timeout 60 tcpdump -i lo -U -n -s 0 -c 200000 "${zflag[@]}" \
    -w "$file" "tcp and ($filter)" 2>"$log" &
  cap_pid=$!
  pids+=($cap_pid)
  for _ in $(seq 100); do
    grep -q 'listening on lo' "$log" 2>/dev/null && return 0
    if ! kill -0 "$cap_pid" 2>/dev/null; then
      echo "SKIP: tcpdump cannot capture on lo: $(tail -n 1 "$log")"
      exit 77
    fi
    sleep 0.1
  done
  fail "tcpdump did not start"
}
# stop_capture: SIGTERM (timeout passes it on), and tcpdump writes what it
# holds and exits. Not SIGINT: a background job of a script ignores it.
stop_capture() {
  kill -TERM "$cap_pid" 2>/dev/null || true
  wait "$cap_pid" 2>/dev/null || true
}

# Three free ports, known before anything listens so the capture's filter
# can name them (a port taken in between fails the start, not the check).
read -r p_seed p_n0 p_n1 < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')

"$bin/stitch-synth" --out "$work/traj" --steps 1 --params 1e6 --quiet
"$bin/stitch" keygen --out "$work/k" >/dev/null
capture "$work/swarm.pcap" "$work/tcpdump.log" "$p_seed" "$p_n0" "$p_n1"

"$bin/stitchd" seed --key "$work/k.key" --listen "127.0.0.1:$p_seed" \
  --store "$work/store" >"$work/seed.out" 2>"$work/seed.log" &
pids+=($!)
wait_line "$work/seed.out" '^stitchd: listening on ' 10 >/dev/null
peers="127.0.0.1:$p_seed"
for i in 0 1; do
  port="p_n$i"
  ticket="$(admit "$work/data-$i")"
  "$bin/stitchd" node --swarm "$work/k.pub" --listen "127.0.0.1:${!port}" \
    --peers "$peers" --weights "$work/w$i.st" --data "$work/data-$i" \
    --ticket "$ticket" --status "$work/status-$i.json" --threads 1 \
    >"$work/node-$i.out" 2>"$work/node-$i.log" &
  pids+=($!)
  wait_line "$work/node-$i.out" '^stitchd: listening on ' 10 >/dev/null
  peers="$peers,127.0.0.1:${!port}"
done

held() { # held I: node I's held version (0 before its first status)
  [ -s "$work/status-$1.json" ] || { echo 0; return; }
  json held_version <"$work/status-$1.json" 2>/dev/null || echo 0
}
wait_both() {
  for _ in $(seq 300); do
    [ "$(held 0)" -ge "$1" ] && [ "$(held 1)" -ge "$1" ] && return 0
    sleep 0.1
  done
  fail "the nodes do not hold version $1 in 30 s: $(held 0), $(held 1)"
}
for v in 1 2; do
  "$bin/stitch" publish --key "$work/k.key" --store "$work/store" \
    --chunk-kib 512 "$work/traj/step_000$((v - 1)).safetensors" >/dev/null
  wait_both "$v"
done
stop_capture

# The control: one chunk file (the largest) over plain TCP, captured the
# same way. Its windows must be found in that capture.
canary="$(find "$work/store/chunks" -type f -printf '%s %p\n' |
  sort -n | tail -n 1 | cut -d' ' -f2)"
[ -n "$canary" ] || fail "the seed's store holds no chunk"
p_c="$(python3 -c '
import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')"
capture "$work/canary.pcap" "$work/tcpdump-canary.log" "$p_c"
python3 - "$p_c" "$canary" 2>"$work/canary.log" <<'EOF' || fail "canary send"
import socket, sys, threading
port, data = int(sys.argv[1]), open(sys.argv[2], "rb").read()
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(1)
got = []
def take():
    c, _ = srv.accept()
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        got.append(b)
    c.close()
t = threading.Thread(target=take)
t.start()
s = socket.create_connection(("127.0.0.1", port))
s.sendall(data)
s.close()
t.join(10)
assert b"".join(got) == data
EOF
sleep 0.3 # the last segments reach the capture before it stops
stop_capture

python3 - "$work/store/chunks" "$work/swarm.pcap" "$work/canary.pcap" \
  "$canary" <<'EOF' || fail "chunk bytes in clear on the wire"
import os, random, sys

chunks_dir, swarm_pcap, canary_pcap, canary = sys.argv[1:]
W = 32           # window bytes
PER_CHUNK = 8    # windows sought per chunk
MIN_DISTINCT = 24  # distinct byte values in a window: high entropy

def windows(data, n, seed):
    """Up to N windows of W bytes with at least MIN_DISTINCT distinct
    values, from evenly spaced starting points (a delta chunk's runs of
    zeros or repeats could appear in any stream by chance)."""
    out = []
    if len(data) < W:
        return out
    rng = random.Random(seed)
    starts = sorted(rng.sample(range(len(data) - W + 1),
                               min(len(data) - W + 1, 64 * n)))
    step = max(1, len(starts) // (4 * n))
    for i in range(0, len(starts), step):
        w = data[starts[i]:starts[i] + W]
        if len(set(w)) >= MIN_DISTINCT and w not in out:
            out.append(w)
        if len(out) == n:
            break
    return out

def hits(blob, ws):
    return sum(1 for w in ws if blob.find(w) >= 0)

paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(chunks_dir)
               for f in fs)
chunk_bytes = sum(os.path.getsize(p) for p in paths)
cap = open(swarm_pcap, "rb").read()
print("capture: %d chunks, %d chunk bytes; capture of %d bytes"
      % (len(paths), chunk_bytes, len(cap)))
# Bytes moved: each node fetched every chunk through the capture.
assert len(cap) >= chunk_bytes, "capture smaller than the chunks"

# The search finds clear text: windows of the capture itself, and of
# the canary chunk in its plain-TCP capture.
mid = len(cap) // 2
assert hits(cap, [cap[mid:mid + W], cap[-W:]]) == 2, "self-search"
canary_data = open(canary, "rb").read()
cw = windows(canary_data, PER_CHUNK, canary)
assert len(cw) == PER_CHUNK, "the canary chunk has no high-entropy windows"
assert hits(canary_data, cw) == len(cw)
found = hits(open(canary_pcap, "rb").read(), cw)
print("canary: %d of %d windows found in the plain-TCP capture"
      % (found, len(cw)))
assert found * 2 >= len(cw), "the search misses clear text"

sought, leaked = 0, []
for p in paths:
    ws = windows(open(p, "rb").read(), PER_CHUNK, os.path.basename(p))
    sought += len(ws)
    n = hits(cap, ws)
    if n:
        leaked.append("%s (%d of %d windows)" % (os.path.basename(p), n,
                                                 len(ws)))
print("capture: %d windows sought, %d chunks found in clear"
      % (sought, len(leaked)))
assert sought >= PER_CHUNK * len(paths) // 2, "too few windows to tell"
assert not leaked, "chunks in clear: " + ", ".join(leaked)
EOF
echo "capture: ok"
