#!/usr/bin/env python3
"""link_transfer.py: one anchor from a seed to one node on loopback, timed,
for two builds in alternation (docs/benchmarks.md "Link encryption").

  tools/bench/link_transfer.py --ckpt FILE --work DIR
      --bin NAME=DIR[:ticket] [--bin NAME=DIR[:ticket] ...] [--runs N]

Each --bin is a build's bin directory; ':ticket' marks a build whose nodes
need a trainer-signed ticket (protocol 2), which it makes with `stitch
keygen` and `stitch admit`; without it the node runs without --ticket (the
protocol 1 builds). Each build publishes FILE into its own store with its
own `stitch publish`. Then, for each of N rounds (default 5), after one
warm-up round that is not counted, every build in turn: `stitchd seed` on
that store, then a fresh `stitchd node` (new data directory and weights
file), timed from the node's start until its status file (--status,
polled every 10 ms; stitchd writes it when an apply ends) shows
held_version 1, and the node's CPU time (user + system, from
/proc/PID/stat) at that moment. The node and seed are stopped and the
node's files removed before the next run. Prints every run, then per build
the medians and the range, and the ratios of the medians (first build over
second).
Only the standard library is used.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time


def run(cmd):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True).stdout


def start(cmd, log):
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=f, text=True)
    line = p.stdout.readline()
    prefix = "stitchd: listening on "
    if not line.startswith(prefix):
        p.kill()
        sys.exit("link_transfer: %s did not start (see %s)" % (cmd[1], log))
    return p, line[len(prefix):].strip()


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def cpu_seconds(pid):
    """User + system CPU time of process PID so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def held(path):
    try:
        with open(path) as f:
            return json.load(f).get("held_version", 0)
    except (OSError, ValueError):
        return 0


class Build:
    def __init__(self, spec, work, ckpt):
        name, _, rest = spec.partition("=")
        bin_, _, flag = rest.partition(":")
        self.name, self.bin, self.ticket = name, bin_, flag == "ticket"
        self.dir = os.path.join(work, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.key = os.path.join(self.dir, "trainer")
        self.store = os.path.join(self.dir, "store")
        stitch = os.path.join(bin_, "stitch")
        run([stitch, "keygen", "--out", self.key])
        run([stitch, "publish", "--key", self.key + ".key", "--store",
             self.store, ckpt])

    def once(self, timeout=300.0):
        """Seconds from the node's start until it holds version 1, and the
        node's CPU seconds by then."""
        stitchd = os.path.join(self.bin, "stitchd")
        seed, addr = start([stitchd, "seed", "--key", self.key + ".key",
                            "--listen", "127.0.0.1:0", "--store", self.store],
                           os.path.join(self.dir, "seed.log"))
        nd = os.path.join(self.dir, "node")
        shutil.rmtree(nd, ignore_errors=True)
        data = os.path.join(nd, "data")
        os.makedirs(data)
        status = os.path.join(nd, "status.json")
        cmd = [stitchd, "node", "--swarm", self.key + ".pub", "--listen",
               "127.0.0.1:0", "--peers", addr, "--weights",
               os.path.join(nd, "weights.safetensors"), "--data", data,
               "--status", status]
        if self.ticket:
            stitch = os.path.join(self.bin, "stitch")
            run([stitch, "keygen", "--out", os.path.join(data, "node")])
            run([stitch, "admit", "--key", self.key + ".key", "--node",
                 os.path.join(data, "node.pub"), "--out",
                 os.path.join(nd, "ticket")])
            cmd += ["--ticket", os.path.join(nd, "ticket")]
        log = open(os.path.join(self.dir, "node.log"), "w")
        t0 = time.monotonic()
        node = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        log.close()
        try:
            while held(status) < 1:
                if node.poll() is not None or seed.poll() is not None:
                    sys.exit("link_transfer: %s: a daemon exited (logs in %s)"
                             % (self.name, self.dir))
                if time.monotonic() - t0 > timeout:
                    sys.exit("link_transfer: %s: no version 1 in %.0f s"
                             % (self.name, timeout))
                time.sleep(0.01)
            return time.monotonic() - t0, cpu_seconds(node.pid)
        finally:
            stop(node)
            stop(seed)
            shutil.rmtree(nd, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--bin", action="append", required=True,
                    help="NAME=DIR or NAME=DIR:ticket")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    builds = [Build(s, a.work, a.ckpt) for s in a.bin]
    times = {b.name: [] for b in builds}
    cpus = {b.name: [] for b in builds}
    for r in range(a.runs + 1):
        for b in builds:
            t, c = b.once()
            print("round %d %-10s %.3f s, node CPU %.2f s%s"
                  % (r, b.name, t, c, "  (warm-up)" if r == 0 else ""),
                  flush=True)
            if r > 0:
                times[b.name].append(t)
                cpus[b.name].append(c)
    mb = os.path.getsize(a.ckpt) / 1e6
    for b in builds:
        xs = times[b.name]
        med = statistics.median(xs)
        cs = cpus[b.name]
        print("%-10s median %.3f s (%.0f MB/s of checkpoint), range "
              "%.3f..%.3f s, %d runs; node CPU median %.2f s, range "
              "%.2f..%.2f s" % (b.name, med, mb / med, min(xs), max(xs),
                                len(xs), statistics.median(cs), min(cs),
                                max(cs)))
    if len(builds) >= 2:
        m0 = statistics.median(times[builds[0].name])
        m1 = statistics.median(times[builds[1].name])
        c0 = statistics.median(cpus[builds[0].name])
        c1 = statistics.median(cpus[builds[1].name])
        print("ratio %s / %s: %.3f (time), %.3f (node CPU)"
              % (builds[0].name, builds[1].name, m0 / m1, c0 / c1))


if __name__ == "__main__":
    main()
