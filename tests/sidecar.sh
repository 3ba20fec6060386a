#!/usr/bin/env bash
# stitchd's HTTP sidecar (issue 6) with real clients, curl and Python's
# http.client: a seed, one node with --http in front of a stand-in engine
# (tests/sidecar_engine.py, with a reload hook), two published versions.
# Checks /v1/status, /metrics as Prometheus text, the X-Stitch-Version
# stamp, a 409 after X-Stitch-Wait-Ms, a waiting request released by
# POST /v1/apply (and a request at the engine finishing under the old
# version first; with one hook, no --engine-prepare, its reload is all in
# the pause and prepare_ms is 0), and that malformed requests get a 4xx and the sidecar
# keeps serving; streamed responses (server-sent events, chunked, until
# close, and a large body to a slow reader). Skips (77) without curl or
# python3.
# Usage: sidecar.sh BIN_DIR
set -euo pipefail
command -v curl >/dev/null && command -v python3 >/dev/null ||
  { echo "SKIP: sidecar.sh needs curl and python3"; exit 77; }
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
NAME=sidecar LOGS="node.log seed.log engine.log"
. "$here/agent_lib.sh"

"$bin/stitch-synth" --out "$work/traj" --steps 1 --params 2e5 --quiet
"$bin/stitch" keygen --out "$work/k" >/dev/null

python3 "$here/sidecar_engine.py" --port-file "$work/engine.port" \
  --reload-delay-ms 100 2>"$work/engine.log" &
pids+=($!)
"$bin/stitchd" seed --key "$work/k.key" --listen 127.0.0.1:0 \
  --store "$work/store" >"$work/seed.out" 2>"$work/seed.log" &
pids+=($!)
seed="$(wait_line "$work/seed.out" '^stitchd: listening on ')"
eport="$(wait_line "$work/engine.port" '^')"
ticket="$(admit "$work/data")"
"$bin/stitchd" node --swarm "$work/k.pub" --listen 127.0.0.1:0 \
  --peers "$seed" --weights "$work/w.st" --data "$work/data" \
  --ticket "$ticket" --up-mbit 100 \
  --http 127.0.0.1:0 --engine "http://127.0.0.1:$eport" \
  --engine-reload /reload >"$work/node.out" 2>"$work/node.log" &
node=$!
pids+=($node)
port="$(wait_line "$work/node.out" '^stitchd: http on port ')"
url="http://127.0.0.1:$port"

[ "$(status | json held_version)" = 0 ] || fail "held before publish: $(status)"
publish() {
  "$bin/stitch" publish --key "$work/k.key" --store "$work/store" \
    "$work/traj/step_000$1.safetensors" >/dev/null
}
publish 0
wait_held 1
publish 1
wait_held 2
st="$(status)"
for f in held_version applied_version fetching_version fetch_done \
         fetch_total peers; do
  v="$(json "$f" <<<"$st")" || fail "/v1/status has no $f: $st"
  [[ "$v" =~ ^[0-9]+$ ]] || fail "/v1/status $f is '$v'"
done
[ "$(json applied_version <<<"$st")" = 0 ] ||
  fail "--apply manual applied before /v1/apply: $st"
[ "$(json peers <<<"$st")" -ge 1 ] || fail "no peers: $st"

# /metrics, through http.client: Prometheus text, and the numbers.
python3 - "$port" <<'EOF' || fail "/metrics"
import http.client, re, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
c.request("GET", "/metrics")
r = c.getresponse()
text = r.read().decode()
assert r.status == 200, r.status
assert r.getheader("Content-Type").startswith("text/plain"), r.getheaders()
label = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{%s(?:,%s)*\})? '
                    r'([-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|NaN|Inf))$'
                    % (label, label))
values = {}
for line in text.splitlines():
    if line.startswith("# HELP ") or line.startswith("# TYPE "):
        continue
    m = sample.match(line)
    assert m, "not Prometheus text: %r" % line
    values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
# Told its uplink (--up-mbit 100), a node that no one has asked has 4
# slots, and reports the rate it was told in bytes per second.
want = {"stitch_held_version": 2, "stitch_applied_version": 0,
        "stitch_latest_version": 2, "stitch_serve_slots": 4,
        "stitch_uplink_bytes_per_second": 12500000}
for k, v in want.items():
    assert values.get(k) == v, (k, values.get(k))
for k in ("stitch_bytes_up_total", "stitch_verify_failures_total",
          "stitch_chunks_twice_total",
          "stitch_bans_total", "stitch_peers", "stitch_apply_pause_seconds",
          "stitch_apply_prepare_seconds",
          'stitch_bytes_down_total{source="same_region"}',
          'stitch_bytes_down_total{source="other_region"}',
          'stitch_punch_messages_total{what="asked"}',
          'stitch_punch_messages_total{what="relayed"}',
          'stitch_punch_messages_total{what="ignored"}',
          'stitch_punch_messages_total{what="dropped"}',
          'stitch_punches_total{result="dialed"}',
          'stitch_punches_total{result="linked"}',
          'stitch_punches_total{result="failed"}',
          'stitch_punches_total{result="refused"}'):
    assert k in values, "no " + k
assert values['stitch_bytes_down_total{source="seed"}'] > 0
EOF

# A completion carries the applied version (0: the engine was not told).
curl -sf -D "$work/h1" -o "$work/b1" -X POST "$url/v1/completions" \
  -H 'Content-Type: application/json' -d '{"prompt": "hi"}' ||
  fail "completion through the proxy"
grep -qi '^X-Stitch-Version: 0' "$work/h1" || fail "stamp: $(cat "$work/h1")"
grep -qi '^X-Engine: stand-in' "$work/h1" || fail "engine headers lost"
[ "$(json prompt <"$work/b1")" = hi ] || fail "body: $(cat "$work/b1")"

# What the engine must never see: any X-Stitch-* header (any case), the
# headers a Connection header names, and the standard hop-by-hop ones; and
# what the client must never see of the engine's. GET and a POST body.
python3 - "$port" <<'EOF' || fail "headers relayed that must not be"
import json, socket, sys
port = int(sys.argv[1])

def exchange(req):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(req)
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    s.close()
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0].startswith("HTTP/1.1 200 "), out[:300]
    hdrs = [tuple(x.strip() for x in l.split(":", 1)) for l in lines[1:]]
    return hdrs, json.loads(body)

stitch = [("X-Stitch-Min-Version", "0"), ("x-stitch-wait-ms", "5"),
          ("X-STITCH-TRACE", "abc"), ("X-Stitch-Version", "99"),
          ("x-Stitch-", "empty suffix")]
named = [("Connection", "close, X-Hop-A"), ("Connection", " x-hop-b ,,"),
         ("X-Hop-A", "1"), ("X-HOP-B", "2")]
standard = [("Keep-Alive", "timeout=5"), ("Proxy-Connection", "keep-alive"),
            ("TE", "trailers"), ("Trailer", "X-T"), ("Upgrade", "h2c")]
for method, body in (("GET", b""), ("POST", b'{"x": 1}')):
    req = "%s /echo HTTP/1.1\r\nHost: h\r\nX-Keep: yes\r\n" % method
    for k, v in stitch + named + standard:
        req += "%s: %s\r\n" % (k, v)
    if body:
        req += "Content-Length: %d\r\n" % len(body)
    hdrs, seen = exchange(req.encode() + b"\r\n" + body)
    names = [k.lower() for k, _ in seen["headers"]]
    assert "x-keep" in names and "host" in names, seen
    assert not [n for n in names if n.startswith("x-stitch-")], \
        "X-Stitch-* reached the engine: %s" % seen
    assert "x-hop-a" not in names and "x-hop-b" not in names, \
        "headers named in Connection reached the engine: %s" % seen
    for k, _ in standard:
        assert k.lower() not in names, "%s reached the engine: %s" % (k, seen)
    assert names.count("connection") == 1, seen  # ours: close
    names = [k.lower() for k, _ in hdrs]
    assert "x-engine-keep" in names, hdrs
    assert [v for k, v in hdrs if k.lower().startswith("x-stitch-")] == ["0"], \
        "the engine's X-Stitch-* reached the client: %s" % hdrs
    assert "x-engine-hop" not in names and "x-engine-hop2" not in names, \
        "headers the engine named in Connection reached the client: %s" % hdrs
    for k in ("keep-alive", "proxy-connection", "upgrade", "trailer"):
        assert k not in names, "the engine's %s reached the client: %s" % (k, hdrs)

# A chunked body's trailer fields are dropped, not taken for headers: here
# one would hold the request for a version never applied.
hdrs, seen = exchange(
    b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
    b"X-Stitch-Wait-Ms: 0\r\nConnection: close\r\n\r\n"
    b"2\r\n{}\r\n0\r\nX-Stitch-Min-Version: 99\r\nX-Trailer: 1\r\n\r\n")
names = [k.lower() for k, _ in seen["headers"]]
assert "x-trailer" not in names, "a trailer field reached the engine: %s" % seen
EOF

# Min-Version above applied: 409 after the wait, naming the applied version.
code="$(curl -s -o "$work/b2" -w '%{http_code} %{time_total}' -X POST \
  "$url/v1/completions" -H 'X-Stitch-Min-Version: 1' \
  -H 'X-Stitch-Wait-Ms: 400' -d '{}')"
[ "${code% *}" = 409 ] || fail "Min-Version 1: $code $(cat "$work/b2")"
python3 -c 'import sys; assert float(sys.argv[1]) >= 0.4' "${code#* }" ||
  fail "409 came before X-Stitch-Wait-Ms: ${code#* } s"
[ "$(json applied_version <"$work/b2")" = 0 ] || fail "409 body: $(cat "$work/b2")"
[ "$(wc -l <"$work/b2")" = 1 ] || fail "409 body is not one line"

# A request waiting for version 2, and one at the engine (1.5 s) when the
# apply starts: the slow one finishes under version 0, then the engine
# reloads, then the waiting one goes, stamped 2.
python3 - "$port" >"$work/waiting.json" <<'EOF' &
import http.client, json, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
c.request("POST", "/v1/completions", body=json.dumps({"prompt": "w"}),
          headers={"X-Stitch-Min-Version": "2", "X-Stitch-Wait-Ms": "30000",
                   "Content-Type": "application/json"})
r = c.getresponse()
print(json.dumps({"status": r.status, "stamp": r.getheader("X-Stitch-Version"),
                  "body": json.loads(r.read())}))
EOF
waiter=$!
for _ in $(seq 100); do
  [ "$(status | json waiting)" = 1 ] && break
  sleep 0.1
done
[ "$(status | json waiting)" = 1 ] || fail "the request is not waiting: $(status)"
curl -s -D "$work/h3" -o "$work/b3" -X POST "$url/v1/completions" \
  -d '{"sleep_ms": 1500}' &
slow=$!
sleep 0.3
curl -sf -o "$work/apply.json" -X POST "$url/v1/apply" || fail "POST /v1/apply"
[ "$(json applied_version <"$work/apply.json")" = 2 ] ||
  fail "apply: $(cat "$work/apply.json")"
# The weights were applied on a pool thread at nice 10 (stitchd.c
# APPLY_NICE), which it keeps; the event loop's thread, the process's
# own, stays at 0, so serving chunks goes first on busy CPUs.
python3 - "$node" <<'PY' || fail "the apply's thread priority"
import os, sys
pid = int(sys.argv[1])
nice = {}
for t in os.listdir("/proc/%d/task" % pid):
    with open("/proc/%d/task/%s/stat" % (pid, t)) as f:
        nice[int(t)] = int(f.read().rsplit(")", 1)[1].split()[16])  # field 19
if nice.get(pid) != 0 or 10 not in nice.values():
    sys.exit("sidecar.sh: threads' nice values %s: want the loop's (%d) 0, "
             "an apply's 10" % (nice, pid))
PY
python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))
assert j["pause_ms"] >= 100 and j["prepare_ms"] == 0' \
  "$work/apply.json" ||
  fail "pause_ms below the engine's reload, or a prepare_ms with one hook: $(cat "$work/apply.json")"
wait "$waiter" || fail "the waiting request"
wait "$slow" || fail "the slow request"
python3 - "$work/waiting.json" "$work/b3" "$work/h3" "$work/w.st" <<'EOF' ||
import hashlib, json, sys
w = json.load(open(sys.argv[1]))
assert w["status"] == 200 and w["stamp"] == "2", w
assert w["body"]["version"] == 2, w
sha = hashlib.sha256(open(sys.argv[4], "rb").read()).hexdigest()
assert w["body"]["weights_sha256"] == sha, "the engine loaded other bytes"
slow = json.load(open(sys.argv[2]))
assert slow["version"] == 0, slow  # -1: a reload ran under it
assert "x-stitch-version: 0" in open(sys.argv[3]).read().lower()
EOF
  fail "release by /v1/apply: $(cat "$work/waiting.json") $(cat "$work/b3")"
curl -sf -D "$work/h4" -o /dev/null -X POST "$url/v1/completions" \
  -H 'X-Stitch-Min-Version: 2' -d '{}' || fail "Min-Version 2 after apply"
grep -qi '^X-Stitch-Version: 2' "$work/h4" || fail "stamp after apply"
again="$(curl -sf -X POST "$url/v1/apply")" || fail "second /v1/apply"
[ "$(json pause_ms <<<"$again")" = 0 ] || fail "nothing new, yet: $again"
[ "$(status | json phase)" = idle ] || fail "phase after the applies: $(status)"
[ "$(curl -sf "http://127.0.0.1:$eport/state" | json reloads)" = "[2]" ] ||
  fail "engine reloads: $(curl -s "http://127.0.0.1:$eport/state")"

# Streaming: a streamed completion's first event reaches the client while
# the engine still holds the rest back (a buffering proxy would hang here
# until the socket timeout), chunked and stamped; an HTTP/1.0 client gets
# it until close; and 24 MiB to a client that does not read for a while
# comes whole (the engine is paused and resumed on the way).
python3 - "$port" "$work/hold" <<'EOF' || fail "streamed responses"
import http.client, json, os, socket, sys, time
port, hold = int(sys.argv[1]), sys.argv[2]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
c.request("POST", "/v1/completions",
          body=json.dumps({"prompt": "s", "stream": True, "hold": hold,
                           "tokens": 5}),
          headers={"Content-Type": "application/json",
                   "X-Stitch-Min-Version": "2"})
r = c.getresponse()
assert r.status == 200, r.status
assert r.getheader("X-Stitch-Version") == "2", r.getheaders()
assert r.getheader("Transfer-Encoding") == "chunked", r.getheaders()
assert r.getheader("Content-Type") == "text/event-stream", r.getheaders()
got = b""
while b"\n\n" not in got:
    piece = r.read1(65536)  # socket.timeout if the proxy buffers
    assert piece, "the stream ended before its first event"
    got += piece
first = json.loads(got.split(b"\n\n")[0][len(b"data: "):])
assert first["text"] == "first" and first["version"] == 2, first
assert not os.path.exists(hold)
open(hold, "w").close()
got += r.read()
events = [e for e in got.decode().split("\n\n") if e]
assert len(events) == 7 and events[-1] == "data: [DONE]", events
# Keep-alive holds across a streamed response.
c.request("GET", "/v1/status")
assert json.loads(c.getresponse().read())["applied_version"] == 2
c.close()

s = socket.create_connection(("127.0.0.1", port), timeout=10)
body = json.dumps({"stream": True, "tokens": 2}).encode()
s.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s"
          % (len(body), body))
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
head, _, rest = out.partition(b"\r\n\r\n")
assert b"transfer-encoding" not in head.lower(), head
assert b"connection: close" in head.lower(), head
assert rest.count(b"data: ") == 4 and rest.endswith(b"data: [DONE]\n\n"), rest

c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
c.request("GET", "/blob?mb=24")
r = c.getresponse()
assert r.getheader("Content-Length") == str(24 << 20), r.getheaders()
time.sleep(1)  # let the queues fill: the sidecar must pause the engine
data = r.read()
want = (bytes(range(256)) * 256) * (24 << 4)
assert len(data) == len(want) and data == want, len(data)
EOF

# Malformed and hostile requests: a 4xx with one JSON line, never a crash.
python3 - "$port" <<'EOF' || fail "malformed requests"
import http.client, json, socket, sys
port = int(sys.argv[1])

def raw(data, close=True):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(data)
    out = b""
    while True:
        try:
            b = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not b:
            break
        out += b
        if not close and out.count(b"HTTP/1.1 ") >= 2 and out.endswith(b"}\n"):
            break
    s.close()
    return out

def check(data, code):
    out = raw(data)
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % code), (data[:60], out[:200])
    assert body.endswith(b"\n") and body.count(b"\n") == 1, body
    assert "error" in json.loads(body), body

check(b"GARBAGE\r\n\r\n", 400)
check(b"\x00\x01\x02\xff\xfe\r\n\r\n", 400)
check(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400)
check(b"GET /v1/status HTTP/9.9.9\r\n\r\n", 400)
check(b"GET / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", 431)
check(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n", 413)
check(b"POST /v1/completions HTTP/1.1\r\nX-Stitch-Min-Version: x\r\n"
      b"Connection: close\r\n\r\n", 400)
check(b"GET /v1/apply HTTP/1.1\r\nConnection: close\r\n\r\n", 405)
check(b"POST /echo HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n"
      b"3\r\nabc\r\n0\r\n\r\n", 400)
check(b"GET /echo HTTP/1.1\r\nX-A: \x00Host\r\nevil: x\r\n\r\n", 400)
check(b"GET /echo HTTP/1.1\r\nConnection: close, "
      + b", ".join(b"x-%d" % i for i in range(40)) + b"\r\n\r\n", 400)
# A client that leaves half-way through its headers.
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Half")
s.close()
# Two requests in one write: two answers, in order.
out = raw(b"GET /v1/status HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n"
          b"Connection: close\r\n\r\n")
assert out.count(b"HTTP/1.1 200 OK") == 2, out[:300]
# Keep-alive with http.client, and a chunked body to the proxy.
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
for _ in range(3):
    c.request("GET", "/v1/status")
    r = c.getresponse()
    assert r.status == 200 and json.loads(r.read())["held_version"] == 2
c.request("POST", "/v1/completions", body=iter([b'{"prompt":', b' "chunked"}']),
          headers={"Transfer-Encoding": "chunked"}, encode_chunked=True)
r = c.getresponse()
assert r.status == 200, r.status
assert json.loads(r.read())["prompt"] == "chunked"
c.close()
EOF
kill -0 "$node" 2>/dev/null || fail "stitchd died"
[ "$(status | json applied_version)" = 2 ] || fail "status after the abuse"

# Slowloris: 256 connections (the cap) each dribbling a head must not lock
# anyone out. A new client evicts the one waiting longest for its request
# (the first, opened and seen by the sidecar before the others), and is
# served. The head deadline here is the default 20 s, far from reached.
python3 - "$port" "$url" <<'EOF' || fail "slowloris: the cap's connections lock clients out"
import http.client, json, re, socket, subprocess, sys, time
port, url = int(sys.argv[1]), sys.argv[2]

def dribbler():
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /v1/status HTTP/1.1\r\nX-Slow: ")
    return s

first = dribbler()
for _ in range(100):  # the sidecar holds it (2: it and this request)
    m = subprocess.check_output(["curl", "-sf", url + "/metrics"]).decode()
    if re.search(r"^stitch_http_connections [2-9]", m, re.M):
        break
    time.sleep(0.1)
rest = [dribbler() for _ in range(255)]
for _ in range(3):  # a header byte from each, now and then
    for s in [first] + rest:
        s.sendall(b"a")
    time.sleep(0.2)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
c.request("GET", "/v1/status")
r = c.getresponse()
assert r.status == 200, "a client at the cap got %d" % r.status
assert json.loads(r.read())["held_version"] == 2
c.close()
first.settimeout(20)
out = b""
while True:  # the evicted one: a 408, or at least its end
    try:
        b = first.recv(65536)
    except ConnectionResetError:
        break
    if not b:
        break
    out += b
assert out == b"" or out.startswith(b"HTTP/1.1 408 "), out[:200]
rest[-1].setblocking(False)
try:  # the newest is still held (no answer, no end)
    assert rest[-1].recv(1) == b"x", "the newest dribbler was closed"
except BlockingIOError:
    pass
for s in [first] + rest:
    s.close()
EOF
metrics="$(curl -sf "$url/metrics")"
grep -q '^stitch_http_evicted_total [1-9]' <<<"$metrics" ||
  fail "no eviction counted: $(grep evicted <<<"$metrics")"

kill -TERM "$node"
rc=0
wait "$node" || rc=$?
[ "$rc" = 0 ] || fail "stitchd exited $rc on SIGTERM"

# The head deadline, made short (--http-head-ms 1000) on the same node
# restarted without an engine: a head or a body dribbled a byte at a time
# gets a 408 and the connection's end; a request sent whole is served, and
# a kept-alive connection idle past the deadline still is.
"$bin/stitchd" node --swarm "$work/k.pub" --listen 127.0.0.1:0 \
  --peers "$seed" --weights "$work/w.st" --data "$work/data" \
  --http 127.0.0.1:0 --http-head-ms 1000 >"$work/node2.out" \
  2>"$work/node.log" &
node=$!
pids+=($node)
port="$(wait_line "$work/node2.out" '^stitchd: http on port ')"
python3 - "$port" <<'EOF' || fail "head deadline"
import http.client, socket, sys, time
port = int(sys.argv[1])

def dribble(start, byte):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(start)
    s.settimeout(0.2)
    out = b""
    for _ in range(150):  # 30 s at most; the deadline is 1 s
        try:
            s.sendall(byte)
        except (BrokenPipeError, ConnectionResetError):
            break
        try:
            b = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            break
        if not b:
            break
        out += b
    s.close()
    assert out.startswith(b"HTTP/1.1 408 "), (start, out[:200])
    assert b"connection: close" in out.lower(), out[:300]

dribble(b"GET /v1/status HTTP/1.1\r\n", b"X")
dribble(b"POST /v1/apply HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", b"x")
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
for _ in range(2):
    c.request("GET", "/v1/status")
    r = c.getresponse()
    assert r.status == 200, r.status
    r.read()
    time.sleep(1.5)  # idle past the head deadline: only SC_IDLE_MS counts
c.close()
EOF
kill -TERM "$node"
rc=0
wait "$node" || rc=$?
[ "$rc" = 0 ] || fail "stitchd exited $rc on SIGTERM (restarted)"
echo "sidecar: ok"
