#!/usr/bin/env python3
"""sim_vs_loopback.py: stitch-sim's network model against the real libuv
swarm on loopback, with the same node count, regions and chunk counts
(issue 5; docs/sim-vs-loopback.md).

  tools/bench/sim_vs_loopback.py [--nodes 8] [--versions 4] [--interval 3]
      [--params 2M] [--bin build-sim/bin] [--keep DIR] [--json]
      [--link-mbps M] [--latency-ms L] [--tc PATH]

1. tools/swarm-demo runs a seed and N stitchd nodes over TCP on
   127.0.0.1 (regions "us" and "eu" alternate) while this script samples
   their status files. Per version: the object's bytes (F) and chunks
   (`stitch log`), the seed's egress and the nodes' received bytes
   (status files, between one version's announce and the next's), and
   per node the time from the seed's announce to "all chunks fetched"
   (the apply's start: its log line gives when it ended and how long it
   took) and to "applied".
2. A stitch-sim scenario with the same nodes and region split, a
   synthetic trajectory tuned (versions.bytes, .change, .chunk_bytes) to
   the demo's anchor and delta sizes and chunk counts, and loopback-like
   links (the loopback round trip and one TCP stream's rate, measured
   here, unless --link-mbps / --latency-ms say), run on both networks.
3. One table: per version, demo vs sim-flows vs sim-queues.

If `tc qdisc add dev lo root netem delay 5ms rate 1gbit` works, the demo
and the sim also run shaped that way (the qdisc is removed in a finally,
SIGTERM included, and a watchdog removes it --timeout + 600 s later should
this script be killed outright).

stitchd and stitch-sim must hold the same core: the script refuses to run
when libstitch.a is newer than either. Exit 1 with one line on stderr when
a run fails. Timings on a shared machine move between runs. Standard
library only.
"""
import argparse
import datetime
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CHUNK_DEFAULT = 512 << 10  # the library's chunk size
NETEM = ["netem", "delay", "5ms", "rate", "1gbit"]


class Fail(Exception):
    pass


def run(cmd, timeout=600, env=None):
    """Runs CMD; its stdout, or Fail with its last stderr line."""
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise Fail("%s timed out after %d s" % (os.path.basename(cmd[0]),
                                                timeout))
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or
                ["exit status %d" % r.returncode])[-1]
        raise Fail("%s failed: %s" % (" ".join(os.path.basename(c) if i == 0
                                               else c for i, c in
                                               enumerate(cmd[:2])), tail))
    return r.stdout


def quantile(xs, q):
    """stitch-sim's definition (report.c): the ceil(q n)-th smallest."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = max(1, math.ceil(q * len(xs)))
    return xs[min(k, len(xs)) - 1]


# ---- Loopback as it is here ---------------------------------------------


def loopback_rtt_ms(rounds=300):
    """Median round trip of one byte over TCP on 127.0.0.1."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def echo():
        c, _ = srv.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            b = c.recv(1)
            if not b:
                break
            c.sendall(b)
        c.close()

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    s = socket.create_connection(srv.getsockname())
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        s.sendall(b"x")
        s.recv(1)
        rtts.append((time.perf_counter() - t0) * 1e3)
    s.close()
    t.join(5)
    srv.close()
    rtts.sort()
    return rtts[len(rtts) // 2]


def loopback_mbps(total=256 << 20):
    """One TCP stream's rate on 127.0.0.1, receiver in a child process so
    that the two ends do not share one interpreter."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    code = ("import socket,sys\n"
            "s=socket.create_connection(('127.0.0.1',%d))\n"
            "n=0\n"
            "while True:\n"
            "  b=s.recv(1<<20)\n"
            "  if not b: break\n"
            "  n+=len(b)\n"
            "print(n)\n" % srv.getsockname()[1])
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         text=True)
    c, _ = srv.accept()
    buf = b"\0" * (1 << 20)
    t0 = time.perf_counter()
    for _ in range(total // len(buf)):
        c.sendall(buf)
    c.shutdown(socket.SHUT_WR)
    out, _ = p.communicate(timeout=120)
    dt = time.perf_counter() - t0
    c.close()
    srv.close()
    if int(out.strip() or 0) != total:
        raise Fail("loopback rate probe: the receiver got %s bytes" % out)
    return total * 8 / dt / 1e6


# ---- netem on lo -----------------------------------------------------------


class Netem:
    """`tc qdisc add dev lo root netem ...`, removed by remove() (call it in
    a finally) or, should this process die first, by a watchdog."""

    def __init__(self, tc, watchdog_s):
        self.tc = tc
        self.watchdog_s = watchdog_s
        self.on = False
        self.dog = None

    def add(self):
        r = subprocess.run([self.tc, "qdisc", "add", "dev", "lo", "root"] +
                           NETEM, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            return (r.stdout.strip().splitlines() or
                    ["exit status %d" % r.returncode])[0]
        self.on = True
        # Our own process group, so that killing this script's group does
        # not kill the one thing that would clean up after it.
        self.dog = subprocess.Popen(
            ["sh", "-c", "sleep %d; %s qdisc del dev lo root" %
             (int(self.watchdog_s), self.tc)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        return None

    def remove(self):
        if self.on:
            r = subprocess.run([self.tc, "qdisc", "del", "dev", "lo", "root"],
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            self.on = r.returncode != 0
        if self.dog is not None and not self.on:
            os.killpg(self.dog.pid, signal.SIGKILL)  # sh and its sleep
            self.dog.wait()
            self.dog = None
        if self.on:
            raise Fail("could not remove the netem qdisc on lo: run "
                       "`tc qdisc del dev lo root` (a watchdog will in %d s)"
                       % self.watchdog_s)


# ---- The real swarm --------------------------------------------------------


class Sampler(threading.Thread):
    """Reads every status file under WORK each 50 ms and keeps each new
    version of it, stamped with the file's mtime (stitchd renames a whole
    file into place, every 250 ms and after each apply), and the daemons'
    CPU time from /proc."""

    def __init__(self, work, nodes):
        super().__init__(daemon=True)
        self.paths = [os.path.join(work, "seed.status.json")] + [
            os.path.join(work, "node-%d" % i, "status.json")
            for i in range(nodes)]
        self.snaps = [[] for _ in self.paths]  # (mtime s, status)
        self.cpu = []  # (time s, CPU s of every daemon seen)
        self.pids = {}
        self.halt = threading.Event()
        self.tick = os.sysconf("SC_CLK_TCK")

    def run(self):
        while not self.halt.is_set():
            self.sample()
            self.halt.wait(0.05)
        self.sample()

    def sample(self):
        for i, p in enumerate(self.paths):
            try:
                mt = os.stat(p).st_mtime_ns / 1e9
                if self.snaps[i] and self.snaps[i][-1][0] == mt:
                    continue
                with open(p) as f:
                    st = json.load(f)
            except (OSError, ValueError):
                continue
            self.snaps[i].append((mt, st))
            self.pids.setdefault(st.get("pid"), 0.0)
        for pid in list(self.pids):
            try:
                with open("/proc/%d/stat" % pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                self.pids[pid] = (int(fields[11]) + int(fields[12])) / self.tick
            except (OSError, IndexError, ValueError, TypeError):
                pass  # gone: keep its last reading
        self.cpu.append((time.time(), sum(self.pids.values())))


def at(snaps, t, key):
    """KEY of the newest status written at or before T (0 before any)."""
    v = 0
    for mt, st in snaps:
        if mt > t:
            break
        v = st.get(key, 0)
    return v


LOG_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z stitchd\[")
ANNOUNCED = re.compile(r"announced version (\d+)$")
VERIFIED = re.compile(r"^version (\d+): manifest verified")
APPLIED = re.compile(r"applied version (\d+) \(object (\d+)\) in (\d+) ms$")


def log_lines(path):
    """(unix s, text) for every line of a stitchd log."""
    out = []
    with open(path) as f:
        for line in f:
            m = LOG_TS.match(line)
            if not m:
                continue
            ts = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
            ts = ts.replace(tzinfo=datetime.timezone.utc).timestamp()
            out.append((ts, line.rstrip("\n").split("]: ", 1)[1]))
    return out


def demo_run(a, work, label):
    """Runs tools/swarm-demo into WORK; returns its figures."""
    cmd = [sys.executable, os.path.join(ROOT, "tools", "swarm-demo"),
           "--nodes", str(a.nodes), "--versions", str(a.versions),
           "--interval", str(a.interval), "--params", a.params, "--bin", a.bin,
           "--out", work, "--json", "--quiet", "--timeout", str(a.timeout)]
    samp = Sampler(work, a.nodes)
    load = os.getloadavg()[0]
    samp.start()
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        out, err = p.communicate(timeout=a.timeout + 120)
    except BaseException as e:
        # SIGINT, not SIGKILL: swarm-demo then stops its daemons.
        p.send_signal(signal.SIGINT)
        try:
            p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if isinstance(e, subprocess.TimeoutExpired):
            raise Fail("swarm-demo (%s) timed out" % label)
        raise
    finally:
        samp.halt.set()
        samp.join()
    wall = time.time() - t0
    if p.returncode != 0:
        tail = (err.strip().splitlines() or ["exit %d" % p.returncode])
        raise Fail("swarm-demo (%s): %s" % (
            label, tail[-1].replace("swarm-demo: ", "", 1)))
    summary = json.loads(out)

    stitch = os.path.join(a.bin, "stitch")
    pub = os.path.join(work, "trainer.pub")
    log = json.loads(run([stitch, "log", "--store", os.path.join(work, "store"),
                          "--pub", pub, "--json"]))
    objs = {x["version"]: x["objects"] for x in log["versions"]}
    served = sum(t["bytes"] for t in json.loads(run(
        [stitch, "inspect", os.path.join(work, "trainer.safetensors"),
         "--json"]))["tensors"])

    announced = {}
    for ts, text in log_lines(os.path.join(work, "seed.log")):
        m = ANNOUNCED.search(text)
        if m:
            announced.setdefault(int(m.group(1)), ts)
    vs = list(range(1, a.versions + 1))
    if sorted(announced) != vs:
        raise Fail("swarm-demo (%s): the seed announced versions %s" %
                   (label, sorted(announced)))
    ends = {v: announced.get(v + 1, math.inf) for v in vs}

    # Per node: its applies, and the chunks it stored against those the
    # objects it applied have (stitch-sim's chunks_stored / _needed).
    fetched = {v: [] for v in vs}
    applied = {v: [] for v in vs}
    heard = []  # announce to the node's verifying the manifest, s
    queued = 0
    stored = needed = 0
    for i in range(a.nodes):
        nd = os.path.join(work, "node-%d" % i)
        aps = []
        for ts, text in log_lines(os.path.join(nd, "stitchd.log")):
            m = VERIFIED.search(text)
            if m and int(m.group(1)) in announced:
                heard.append(ts - announced[int(m.group(1))])
            m = APPLIED.search(text)
            if m:
                aps.append((ts, int(m.group(1)), int(m.group(2)),
                            int(m.group(3)) / 1e3))
        prev_end = -math.inf
        for k, (end, ver, obj, took) in enumerate(aps):
            start = end - took
            # An apply that began as the one before ended was queued: the
            # fetch may have finished earlier than it started.
            if start - prev_end < 0.005:
                queued += 1
            prev_end = end
            needed += objs[ver][obj]["chunks"]
        for v in vs:
            ap = next((x for x in aps if x[1] >= v), None)
            if ap is None:
                raise Fail("swarm-demo (%s): node %d never applied version "
                           "%d" % (label, i, v))
            applied[v].append(ap[0] - announced[v])
            fetched[v].append(ap[0] - ap[3] - announced[v])
        chunks_dir = os.path.join(nd, "data", "chunks")
        stored += sum(len(fs) for _, _, fs in os.walk(chunks_dir))

    seed, nodes = samp.snaps[0], samp.snaps[1:]
    rows = []
    for v in vs:
        t0v, t1v = announced[v], ends[v]
        F = objs[v][0]["bytes"]
        down = sum(at(s, t1v, "bytes_down") - at(s, t0v, "bytes_down")
                   for s in nodes)
        cross = sum(at(s, t1v, "bytes_other_region") -
                    at(s, t0v, "bytes_other_region") for s in nodes)
        rows.append({
            "version": v, "kind": objs[v][0]["kind"], "bytes": F,
            "chunks": objs[v][0]["chunks"],
            "seed_bytes": at(seed, t1v, "bytes_up") - at(seed, t0v, "bytes_up"),
            "node_bytes": down, "cross_region_bytes": cross,
            "fetched_s": fetched[v], "applied_s": applied[v],
        })
    # The daemons' CPU over the anchor's window (announce to last applied).
    w0 = announced[1]
    w1 = w0 + max(applied[1])

    def cpu_at(t):
        c = 0.0
        for ts, v in samp.cpu:
            if ts > t:
                break
            c = v
        return c

    return {
        "label": label, "summary": summary, "versions": rows,
        "served_bytes": served, "wall_s": wall, "loadavg_1m": load,
        "queued_applies": queued, "manifest_s": heard, "chunks_stored": stored,
        "chunks_needed": needed,
        "anchor_window_s": w1 - w0, "anchor_window_cpu_s": cpu_at(w1) -
        cpu_at(w0), "daemon_cpu_s": samp.cpu[-1][1] if samp.cpu else 0.0,
    }


# ---- The simulator -----------------------------------------------------


def scenario(a, nodes, bytes_, change, chunk_bytes, count, mbps, lat_ms,
             network, comment):
    us, eu = (nodes + 1) // 2, nodes // 2  # swarm-demo: node i is us if even
    return {
        "comment": comment,
        "seed": {"region": "us", "up_mbps": mbps, "down_mbps": mbps},
        "regions": [
            {"name": "us", "nodes": us, "up_mbps": mbps, "down_mbps": mbps,
             "latency_ms": lat_ms},
            {"name": "eu", "nodes": eu, "up_mbps": mbps, "down_mbps": mbps,
             "latency_ms": lat_ms}],
        # loopback has no backbone: a region link that never limits
        "inter_region": {"mbps": mbps * max(nodes, 1) * 4, "latency_ms": 0},
        "versions": {"count": count, "bytes": int(bytes_), "interval_s":
                     a.interval, "change": change, "chunk_bytes":
                     int(chunk_bytes)},
        "churn": {"leave_per_min": 0, "join_per_min": 0},
        "mode": "p2p",
        "time_limit_s": 2 + a.interval * count + 120,
        "rng_seed": 1,
        "network": network,
    }


def sim_run(a, sc, path, label):
    with open(path, "w") as f:
        json.dump(sc, f, indent=1)
    plot = path[:-5] + ".out"
    t0 = time.time()
    env = dict(os.environ, MPLBACKEND="Agg")
    run([os.path.join(a.bin, "stitch-sim"), path, "--json", "--plot", plot],
        timeout=900, env=env)
    with open(os.path.join(plot, "sim.json")) as f:
        o = json.load(f)
    if not o.get("completed"):
        raise Fail("stitch-sim (%s): the run did not complete" % label)
    o["wall_s_here"] = time.time() - t0
    return o


def calibrate(a, demo, work):
    """versions.bytes, .change and .chunk_bytes for which the synthetic
    trajectory's anchor and deltas have the demo's chunk counts and about
    its bytes (1-node runs: only the trajectory matters)."""
    rows = demo["versions"]
    fa, ca = rows[0]["bytes"], rows[0]["chunks"]
    ds = rows[1:]
    fd = sum(r["bytes"] for r in ds) / len(ds) if ds else None
    cd = max(r["chunks"] for r in ds) if ds else None
    b, c, k = demo["served_bytes"] * 0.93, 0.02, CHUNK_DEFAULT
    tries = []
    for it in range(10):
        sc = scenario(a, 1, b, c, k, 2 if ds else 1, 10000, 0.02, "queues",
                      "calibration")
        o = sim_run(a, sc, os.path.join(work, "calibrate-%d.json" % it),
                    "calibration")
        v = o["versions"]
        sa, sca = v[0]["bytes"], v[0]["chunks"]
        sd, scd = (v[1]["bytes"], v[1]["chunks"]) if ds else (None, None)
        tries.append((b, c, k, sa, sca, sd, scd))
        ok_b = abs(sa / fa - 1) < 0.02 and (not ds or abs(sd / fd - 1) < 0.05)
        ok_c = sca == ca and (not ds or scd == cd)
        if ok_b and ok_c:
            break
        b *= fa / sa
        if ds:
            c = min(1.0, c * fd / sd)
        if sca != ca:  # same bytes, another cut: move the chunk size
            k = int(k * (sca / ca if sca > ca else (sca - 0.5) / ca))
            k = max(4096, min(32 << 20, k))
    return {"bytes": int(b), "change": c, "chunk_bytes": k, "tries": tries,
            "matched": ok_b and ok_c}


# ---- The table -------------------------------------------------------------


def fmt_ms(x):
    return "-" if x is None else "%.1f" % (x * 1e3)


def fmt_f(x, F):
    return "-" if x is None else "%.2f" % (x / F)


ROW = "%-3s %-6s %-13s %9s %6s %6s %7s %7s %8s %8s %8s %8s"


def row(v, kind, src, F, chunks, seed, nodes, cross, t, regions):
    """One line; T: per node seconds; REGIONS: each node's region."""
    by = {g: [x for x, r in zip(t, regions) if r == g] for g in ("us", "eu")}
    return ROW % (v, kind, src, F, chunks, fmt_f(seed, F),
                  "n/a" if nodes is None else fmt_f(nodes, F),
                  fmt_f(cross, F), fmt_ms(quantile(t, .5)),
                  fmt_ms(quantile(t, 1.0)), fmt_ms(quantile(by["us"], 1.0)),
                  fmt_ms(quantile(by["eu"], 1.0)))


def table(title, demo, sims, nodes):
    lines = [title, ROW % ("v", "kind", "source", "F bytes", "chunks",
                           "seed F", "nodes F", "cross F", "p50 ms",
                           "max ms", "max us", "max eu")]
    # swarm-demo: node i is in "us" when i is even; stitch-sim: nodes
    # 1..ceil(N/2) are in "us" (regions in the scenario's order).
    dreg = ["us" if i % 2 == 0 else "eu" for i in range(nodes)]
    sreg = ["us" if i < (nodes + 1) // 2 else "eu" for i in range(nodes)]
    for k, d in enumerate(demo["versions"]):
        F = d["bytes"]
        for src, t in (("demo fetched", d["fetched_s"]),
                       ("demo applied", d["applied_s"])):
            lines.append(row(d["version"], d["kind"], src, F, d["chunks"],
                             d["seed_bytes"], d["node_bytes"],
                             d["cross_region_bytes"], t, dreg))
        for name, o in sims:
            v = o["versions"][k]
            lines.append(row(d["version"], d["kind"], name, v["bytes"],
                             v["chunks"], v["seed_bytes"], None,
                             v["cross_region_bytes"],
                             [r[k] for r in o["node_done_s"][1:]], sreg))
    # Duplicates: the demo's are exact (payload); stitch-sim reports no
    # per-version received bytes, only each host's wire bytes (frames
    # and control messages included): an upper bound.
    need = nodes * sum(d["bytes"] for d in demo["versions"])
    got = sum(d["node_bytes"] for d in demo["versions"])
    lines.append("demo: nodes received %d payload bytes = %.4f x N x sum F; "
                 "chunks stored %d, needed %d; %d of %d applies queued" %
                 (got, got / need, demo["chunks_stored"],
                  demo["chunks_needed"], demo["queued_applies"],
                  nodes * len(demo["versions"])))
    for name, o in sims:
        sneed = nodes * sum(v["bytes"] for v in o["versions"])
        wire = sum(o["node_egress_bytes"])
        lines.append("%s: all hosts sent %d wire bytes = %.4f x N x sum F "
                     "(upper bound on duplicates); chunks stored %d, needed "
                     "%d; %.1f s wall" % (name, wire, wire / sneed,
                                          o["chunks_stored"],
                                          o["chunks_needed"], o["wall_s_here"]))
    return lines


def compare(a, work, label, mbps, lat_ms, cal=None):
    """One demo run and the two sim runs like it; the table's lines."""
    demo = demo_run(a, os.path.join(work, "demo-" + label), label)
    if cal is None:
        cal = calibrate(a, demo, work)
    sims = []
    for net in ("flows", "queues"):
        sc = scenario(a, a.nodes, cal["bytes"], cal["change"],
                      cal["chunk_bytes"], a.versions, mbps, lat_ms, net,
                      "sim_vs_loopback (%s): like the swarm-demo run" % label)
        sims.append(("sim " + net, sim_run(
            a, sc, os.path.join(work, "sim-%s-%s.json" % (label, net)),
            "%s, %s" % (label, net))))
    d0 = demo["versions"][0]
    s0 = sims[0][1]["versions"][0]
    lines = table(
        "%s: %d nodes (us %d, eu %d), %d versions %g s apart; sim links %g "
        "Mbit/s, %g ms one way" % (label, a.nodes, (a.nodes + 1) // 2,
                                   a.nodes // 2, a.versions, a.interval, mbps,
                                   lat_ms), demo, sims, a.nodes)
    lines.append(
        "sim trajectory: versions.bytes %d, change %.4f, chunk_bytes %d "
        "(demo: %d served bytes, chunk_bytes %d); anchor %d B / %d chunks "
        "(demo %d B / %d)%s" % (
            cal["bytes"], cal["change"], cal["chunk_bytes"],
            demo["served_bytes"], CHUNK_DEFAULT, s0["bytes"], s0["chunks"],
            d0["bytes"], d0["chunks"],
            "" if cal["matched"] else "; CHUNK COUNTS NOT MATCHED"))
    lines.append(
        "demo: %.1f s wall, load average %.1f before it; the %d daemons used "
        "%.2f CPU s in the anchor's %.2f s (announce to last applied) on %d "
        "cores; swarm-demo's own p50/max (publish to applied, incl. the "
        "seed's 200 ms store scan): %.3f / %.3f s" % (
            demo["wall_s"], demo["loadavg_1m"], a.nodes + 1,
            demo["anchor_window_cpu_s"], demo["anchor_window_s"],
            os.cpu_count(), demo["summary"]["p50_s"],
            demo["summary"]["max_s"]))
    lines.append(
        "demo: a new manifest reached the nodes p50 %s ms, max %s ms after "
        "the seed announced it (sim: %g ms a hop)" % (
            fmt_ms(quantile(demo["manifest_s"], .5)),
            fmt_ms(quantile(demo["manifest_s"], 1.0)), lat_ms))
    return lines, {"demo": demo, "sims": dict(sims), "calibration": cal,
                   "link_mbps": mbps, "latency_ms": lat_ms}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--versions", type=int, default=4)
    ap.add_argument("--interval", type=float, default=3.0,
                    help="seconds between versions (default 3: each version "
                    "is done before the next, so bytes split cleanly)")
    ap.add_argument("--params", default="2M", help="swarm-demo's model size")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build-sim", "bin"))
    ap.add_argument("--keep", help="keep the work here (default: a temp "
                    "directory, removed unless a run fails)")
    ap.add_argument("--json", action="store_true",
                    help="print every figure as JSON after the table")
    ap.add_argument("--link-mbps", type=float,
                    help="sim links (default: one TCP stream on lo, measured)")
    ap.add_argument("--latency-ms", type=float,
                    help="sim one-way latency (default: half the lo RTT)")
    ap.add_argument("--tc", default=shutil.which("tc") or "/usr/sbin/tc")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="swarm-demo's wait for the last version")
    a = ap.parse_args()
    if a.nodes < 1 or a.versions < 1:
        ap.error("--nodes and --versions must be at least 1")
    a.bin = os.path.abspath(a.bin)
    for prog, target in (("stitch", "stitch-cli"), ("stitchd", "stitchd"),
                         ("stitch-synth", "stitch-synth"),
                         ("stitch-sim", "stitch-sim")):
        if not os.access(os.path.join(a.bin, prog), os.X_OK):
            raise Fail("%s is missing: cmake --build build-sim -j2 --target "
                       "%s" % (os.path.join(a.bin, prog), target))
    # The comparison needs one core in both: a library rebuilt after one
    # of the programs (another engineer's build) would compare two.
    lib = os.path.join(os.path.dirname(a.bin), "lib", "libstitch.a")
    if os.path.exists(lib):
        for prog in ("stitchd", "stitch-sim"):
            if os.path.getmtime(os.path.join(a.bin, prog)) < \
                    os.path.getmtime(lib):
                raise Fail("%s is older than %s: cmake --build %s -j2 "
                           "--target stitchd stitch-cli stitch-sim" %
                           (prog, lib, os.path.dirname(a.bin)))
    work = os.path.abspath(a.keep) if a.keep else tempfile.mkdtemp(
        prefix="sim-vs-loopback.")
    if a.keep and os.path.exists(work) and os.listdir(work):
        raise Fail("%s is not empty" % work)
    os.makedirs(work, exist_ok=True)
    ok = False
    try:
        rtt = loopback_rtt_ms()
        rate = loopback_mbps()
        mbps = a.link_mbps or float(int(rate / 1000) * 1000 or rate)
        lat = a.latency_ms if a.latency_ms is not None else round(rtt / 2, 4)
        out = ["loopback here: RTT %.3f ms (median of 300), one TCP stream "
               "%.0f Mbit/s" % (rtt, rate)]
        lines, res = compare(a, work, "loopback", mbps, lat)
        out += [""] + lines
        result = {"loopback_rtt_ms": rtt, "loopback_mbps": rate,
                  "loopback": res}
        # The shaped comparison, where the kernel has netem.
        ne = Netem(a.tc, a.timeout + 600)
        why = None
        try:
            why = ne.add()
            if why is None:
                # netem on lo: every packet waits 5 ms, one direction, and
                # all loopback traffic shares one 1 Gbit/s queue; the sim
                # gives each host 1 Gbit/s links (the closest it has).
                lines, res = compare(a, work, "netem", 1000.0, 5.0,
                                     res["calibration"])
                out += [""] + lines
                result["netem"] = res
        finally:
            ne.remove()
        if why is not None:
            out += ["", "netem: `tc qdisc add dev lo root %s` failed (%s): no "
                    "shaped run" % (" ".join(NETEM), why)]
            result["netem_unavailable"] = why
        print("\n".join(out))
        if a.json:
            print(json.dumps(result))
        ok = True
    except Fail as e:
        raise Fail("%s (work kept in %s)" % (e, work))
    finally:
        if not a.keep and ok:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    # SIGTERM unwinds like an exception, so that the finally that removes
    # the netem qdisc runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        sys.exit(main())
    except Fail as e:
        print("sim_vs_loopback: %s" % e, file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
