"""Where a node's downlink waits while version 1 spreads: reads the lines
STITCH_SIM_RAMP=1 makes stitch-sim print on stderr ("ramp NODE REGION
PERCENT SECONDS LINKS") and, per region, gives the median node's time to
its first chunk of version 1 and to 10 ... 100 % of them, each beside its
lag: the time minus that share of BOUND_S (the version's bound_s in the
JSON, F over the downlink when that sets it), the time a node whose
downlink never waited would take. Then, by the links a node held to its
own region when it reached 50 %, how many nodes and their median and
last lag at 100 %. Exits nonzero when a node's times go down or a node
that reported never reached 100 %.

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
    links = {}  # node -> its links to its region at 50 %
    for line in open(sys.argv[1]):
        f = line.split()
        if len(f) not in (5, 6) or f[0] != "ramp":
            continue
        node, region, pct, t = int(f[1]), f[2], int(f[3]), float(f[4])
        if pct == 50 and len(f) == 6:
            links[node] = int(f[5])
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
    by = collections.defaultdict(list)  # links at 50 % -> [lag at 100 %]
    for node, n in links.items():
        by[n].append(last[node][1] - bound)
    for n in sorted(by):
        lags = sorted(by[n])
        print("%d links of its region at 50 %%: %d nodes, lag at 100 %% "
              "median %+.3f, last %+.3f"
              % (n, len(lags), lags[len(lags) // 2], lags[-1]))


if __name__ == "__main__":
    main()
