"""Where a node's downlink waits while version 1 spreads: reads the lines
STITCH_SIM_RAMP=1 makes stitch-sim print on stderr ("ramp NODE REGION
PERCENT SECONDS") and, per region, gives the median node's time to its
first chunk of version 1 and to 10 ... 100 % of them, each beside its lag:
the time minus that share of BOUND_S (the version's bound_s in the JSON,
F over the downlink when that sets it), the time a node whose downlink
never waited would take. Exits nonzero when a node's times go down or
a node that reported never reached 100 %.

Usage: STITCH_SIM_RAMP=1 stitch-sim SCENARIO --json > out.json 2> ramp.txt
       python3 simulations/ramp.py ramp.txt BOUND_S"""
import collections
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    bound = float(sys.argv[2])
    at = collections.defaultdict(dict)  # region -> pct -> [seconds]
    last = {}  # node -> (pct, seconds) of its last line
    for line in open(sys.argv[1]):
        f = line.split()
        if len(f) != 5 or f[0] != "ramp":
            continue
        node, region, pct, t = int(f[1]), f[2], int(f[3]), float(f[4])
        if node in last and (pct <= last[node][0] or t < last[node][1]):
            sys.exit("ramp.py: node %d: %d %% at %.5f s after %d %% at %.5f s"
                     % (node, pct, t, last[node][0], last[node][1]))
        last[node] = (pct, t)
        at[region].setdefault(0 if pct < 10 else pct, []).append(t)
    short = [n for n, (pct, _) in last.items() if pct != 100]
    if not last or short:
        sys.exit("ramp.py: %d nodes reported, %d never reached 100 %%"
                 % (len(last), len(short)))
    for region in sorted(at):
        cells = []
        for pct in sorted(at[region]):
            ts = sorted(at[region][pct])
            mid = ts[len(ts) // 2]
            cells.append("%s %.3f (lag %+.3f)"
                         % ("first" if pct == 0 else "%d%%" % pct, mid,
                            mid - pct / 100.0 * bound))
        print("%s, %d nodes: %s" % (region, len(at[region][100]),
                                    "; ".join(cells)))


if __name__ == "__main__":
    main()
