#!/usr/bin/env python3
"""Plots of a stitch-sim run (docs/simulator.md): the completion CDF per
version, egress per node, and each version's ratio to the bound.

Usage: plot.py SIM.json DIR   (stitch-sim --plot DIR runs it)
Its one line (what it wrote, or that matplotlib is missing) goes to
stderr, so that it never lands inside stitch-sim's --json report."""
import json
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py SIM.json DIR")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: matplotlib is not installed; no plots written",
              file=sys.stderr)
        return
    r = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    vs = r["versions"]

    fig, ax = plt.subplots(figsize=(7, 4))
    for k, v in enumerate(vs):
        t = sorted(row[k] for row in r["node_done_s"][1:] if row[k] is not None)
        if not t:
            continue
        n = v.get("counted", r["nodes"])  # with churn: alive at publish and end
        ax.step(t, [(i + 1) / n for i in range(len(t))], where="post",
                label="v%d (%.1f MB)" % (v["version"], v["bytes"] / 1e6))
        ax.axvline(v["bound_s"], linestyle=":", color=ax.lines[-1].get_color())
    ax.set_xlabel("seconds from publish (dotted: bound)")
    ax.set_ylabel("fraction of nodes holding it")
    ax.set_title("%s, %d nodes: completion" % (r["mode"], r["nodes"]))
    ax.legend()
    fig.tight_layout()
    fig.savefig(out + "/completion_cdf.png", dpi=120)

    fig, ax = plt.subplots(figsize=(7, 4))
    eg = r["node_egress_bytes"]
    ax.bar(range(len(eg)), [b / 1e6 for b in eg], width=1.0)
    ax.set_xlabel("node (0: the seed)")
    ax.set_ylabel("MB sent")
    ax.set_title("egress per node")
    fig.tight_layout()
    fig.savefig(out + "/egress.png", dpi=120)

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar([str(v["version"]) for v in vs],
           [v["ratio"] if v["ratio"] is not None else 0 for v in vs])
    ax.axhline(1.2, linestyle="--", color="red", label="goal: 1.2x")
    ax.set_xlabel("version")
    ax.set_ylabel("max completion / bound")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out + "/ratio.png", dpi=120)
    print("plot: wrote completion_cdf.png, egress.png, ratio.png in " + out,
          file=sys.stderr)


if __name__ == "__main__":
    main()
