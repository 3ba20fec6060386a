"""What every ctest run of stitch-sim checks in its --json report
(simulations/test_sim.sh): nothing failed to verify or apply, and no
version beat its bound or had the seed send less than its bytes, and
at each publish the median node had links to its own region (a joiner
may have none yet)."""
import json
import sys


def load(path, test, network):
    """The report at PATH, and a fail(why) that exits naming the test."""
    def fail(why):
        sys.exit("%s (%s): %s" % (test, network, why))
    with open(path) as f:
        return json.load(f), fail


def check_common(r, fail, seed_spans=True, own_links=True):
    """SEED_SPANS False: a version's seed_bytes span (its publish to the
    next) may hold less than its bytes, as when the seed was down at its
    publish (a seed restart) and sent it during the next one's. OWN_LINKS
    False: nodes alone in their region (no links to it to count)."""
    if r["verify_failures"] != 0 or r["bad_writes"] != 0 or r["apply_errors"] != 0:
        fail("verify_failures %d, bad_writes %d, apply_errors %d"
             % (r["verify_failures"], r["bad_writes"], r["apply_errors"]))
    for v in r["versions"]:
        if v["max_s"] < v["bound_s"]:
            fail("version %d: max %.6f s beats the bound %.6f s"
                 % (v["version"], v["max_s"], v["bound_s"]))
        if v["min_s"] < v["node_bound_s"]:
            fail("version %d: a node finished in %.6f s, under %.6f s"
                 % (v["version"], v["min_s"], v["node_bound_s"]))
        if seed_spans and v["seed_bytes"] < v["bytes"]:
            fail("version %d: the seed sent %d B of %d"
                 % (v["version"], v["seed_bytes"], v["bytes"]))
        lo, mid = v["own_region_links_min"], v["own_region_links_p50"]
        if r["mode"] == "p2p" and (lo > mid or (mid == 0 and own_links)):
            fail("version %d: links to their own region at publish, min %d "
                 "and median %d" % (v["version"], lo, mid))


def load_complete(path, test, network):
    """load, and the run completed with check_common's checks."""
    r, fail = load(path, test, network)
    if r["completed"] is not True:
        fail("not complete")
    check_common(r, fail)
    return r, fail


def load_one_version(path, test):
    """A queues-network report of one version that every node must hold:
    the report, that version's entry and fail, the common checks done."""
    r, fail = load(path, test, "queues")
    v = r["versions"][0]
    if r["completed"] is not True or v["max_s"] is None:
        fail("not every node held the version")
    check_common(r, fail)
    return r, v, fail


def same_run(path_a, path_b):
    """Whether two runs' reports are the same but for the keys of wall
    time and memory."""
    a, b = (json.load(open(p)) for p in (path_a, path_b))
    for r in (a, b):
        for k in ("wall_s", "rss_peak_mib", "mem_per_node_kib"):
            r.pop(k)
    return a == b
