"""netlab's faults: a scenario's timed partitions, kills and seed restarts.

A scenario's optional "faults" array (docs/netlab.md "Faults"):

  {"at_s": T, "kind": "partition", "a": "us", "b": "eu", "for_s": D}
  {"at_s": T, "kind": "kill", "nodes": [0, 4], "restart_at_s": T2}
  {"at_s": T, "kind": "kill", "fraction": 0.3, "restart_at_s": T2}
  {"at_s": T, "kind": "seed_restart"[, "restart_at_s": T2]}

Times are seconds after the first publish. This module knows when each
event is due and what to measure around it, and nothing of namespaces or
processes: netlab hands it an object that carries the events out (cut,
heal, kill_nodes, start_nodes, kill_seed, start_seed), and tells it after
each poll which version every live node holds. So the plan is data, and
the measuring is the same whatever carries a fault out.

What is measured, per fault (every time in seconds):
  - when it began and ended (healed, restarted), after the first publish;
  - behind_at_end: live nodes without the latest published version when
    it ended (0 means the fault cost nothing to see);
  - converged_s: from its end until every live node held the latest
    version published at that moment (null if that never happened before
    the run ended);
  - a kill also: held_at_kill (the version each node held when killed, as
    its last status said), behind_at_kill (how many of them lacked the
    latest published version: killed during a version), rest_converged_s
    (from the kill until every node it spared held the latest version),
    recovered (the version each held on coming back: what its weights file
    recovered to).
"""
import random

KINDS = ("partition", "kill", "seed_restart")
MAX_FAULTS = 16


def parse(raw, sc, fail, refused):
    """The scenario's "faults" as a list of plans, ordered as in the file.
    SC must hold regions, nodes, rng_seed and time_limit_s. FAIL(key, why)
    and REFUSED(key, why) raise (a bad file; one netlab cannot host)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        fail("faults", "expected an array")
    if len(raw) > MAX_FAULTS:
        refused("faults", "%d faults; netlab runs at most %d" %
                (len(raw), MAX_FAULTS))
    names = [r["name"] for r in sc["regions"]]
    limit = sc["time_limit_s"]
    plans = []

    def num(o, key, p, lo, hi, default=None):
        v = o.get(key)
        if v is None:
            if default is None:
                fail(p + key, "missing")
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            fail(p + key, "expected a number")
        if not lo <= v <= hi:
            fail(p + key, "%g is outside [%g, %g]" % (v, lo, hi))
        return float(v)

    def region(o, key, p):
        v = o.get(key)
        if v not in names:
            fail(p + key, "expected the name of a region (%s)" %
                 ", ".join(names))
        return v

    for i, f in enumerate(raw):
        p = "faults[%d]." % i
        if not isinstance(f, dict):
            fail(p[:-1], "expected an object")
        kind = f.get("kind")
        if kind not in KINDS:
            refused(p + "kind", "%s is not a fault netlab knows (%s)" %
                    (repr(kind), ", ".join(KINDS)))
        at = num(f, "at_s", p, 0, limit)
        plan = {"kind": kind, "at_s": at}
        if kind == "partition":
            plan["a"], plan["b"] = region(f, "a", p), region(f, "b", p)
            if plan["a"] == plan["b"]:
                fail(p + "b", "the same region as a")
            plan["end_s"] = at + num(f, "for_s", p, 0.001, limit)
        elif kind == "kill":
            if ("nodes" in f) == ("fraction" in f):
                fail(p[:-1], "give nodes or fraction, one of them")
            if "nodes" in f:
                ks = f["nodes"]
                if not isinstance(ks, list) or not ks or not all(
                        isinstance(k, int) and not isinstance(k, bool) and
                        0 <= k < sc["nodes"] for k in ks) or \
                        len(set(ks)) != len(ks):
                    fail(p + "nodes", "expected distinct node numbers "
                         "from 0 to %d" % (sc["nodes"] - 1))
                plan["nodes"] = sorted(ks)
            else:
                frac = num(f, "fraction", p, 0.001, 1)
                n = max(1, int(round(frac * sc["nodes"])))
                # Which nodes follows rng_seed and the fault's place in the
                # file, so a run can be repeated.
                rng = random.Random("%d-%d" % (sc["rng_seed"], i))
                plan["nodes"] = sorted(rng.sample(range(sc["nodes"]), n))
            plan["end_s"] = num(f, "restart_at_s", p, at, limit)
        else:
            plan["end_s"] = num(f, "restart_at_s", p, at, limit, at)
        if plan["end_s"] > limit:
            fail(p[:-1], "ends at %g s, after time_limit_s" % plan["end_s"])
        plans.append(plan)
    # One process cannot be killed twice over: kills of a node, and seed
    # restarts, must not overlap in time.
    for i, x in enumerate(plans):
        for j in range(i):
            y = plans[j]
            if x["kind"] != y["kind"] or x["kind"] == "partition":
                continue
            if x["at_s"] <= y["end_s"] and y["at_s"] <= x["end_s"] and (
                    x["kind"] == "seed_restart" or
                    set(x["nodes"]) & set(y["nodes"])):
                fail("faults[%d]" % i, "overlaps faults[%d] on the same "
                     "process" % j)
    return plans


class Schedule:
    """Carries out PLANS through ACTIONS at their times and measures them.

    ACTIONS: cut(a, b) and heal(a, b) (region names); kill_nodes(ks)
    returns the version each held; start_nodes(ks) returns the version
    each holds on coming back; kill_seed(); start_seed()."""

    def __init__(self, plans, actions):
        self.actions = actions
        self.faults = []
        self.events = []  # (time, order, fault index, "begin" or "end")
        for i, p in enumerate(plans):
            r = dict(p)
            r.update({"began_s": None, "ended_s": None, "behind_at_end": None,
                      "converged_s": None, "converged_version": None})
            if p["kind"] == "kill":
                r.update({"held_at_kill": None, "behind_at_kill": None,
                          "rest_converged_s": None, "recovered": None})
            self.faults.append(r)
            self.events.append((p["at_s"], 2 * i, i, "begin"))
            self.events.append((p["end_s"], 2 * i + 1, i, "end"))
        self.events.sort()
        self.next = 0
        self.down = set()  # nodes killed and not yet back

    def due(self, t, latest):
        """Carries out every event due by T (seconds after the first
        publish); LATEST is the last version published. Returns a line for
        each, for the progress output."""
        said = []
        while self.next < len(self.events) and self.events[self.next][0] <= t:
            _, _, i, what = self.events[self.next]
            self.next += 1
            f = self.faults[i]
            if what == "begin":
                said.append(self._begin(f, latest))
                f["began_s"] = round(t, 3)
            else:
                said.append(self._end(f))
                f["ended_s"] = round(t, 3)
                f["_pending"] = True
        return said

    def _begin(self, f, latest):
        """Starts fault F: cut, kill or seed kill. Returns what it did."""
        a = self.actions
        if f["kind"] == "partition":
            a.cut(f["a"], f["b"])
            return "cut %s from %s" % (f["a"], f["b"])
        if f["kind"] == "kill":
            f["held_at_kill"] = a.kill_nodes(f["nodes"])
            f["behind_at_kill"] = sum(1 for h in f["held_at_kill"]
                                      if h < latest)
            self.down.update(f["nodes"])
            return "killed nodes %s (-9), holding %s" % (f["nodes"],
                                                         f["held_at_kill"])
        a.kill_seed()
        return "killed the seed (-9)"

    def _end(self, f):
        """Ends fault F: heal, restart the nodes or the seed."""
        a = self.actions
        if f["kind"] == "partition":
            a.heal(f["a"], f["b"])
            return "healed %s - %s" % (f["a"], f["b"])
        if f["kind"] == "kill":
            f["recovered"] = a.start_nodes(f["nodes"])
            self.down.difference_update(f["nodes"])
            return "restarted nodes %s, holding %s" % (f["nodes"],
                                                       f["recovered"])
        a.start_seed()
        return "restarted the seed"

    def observe(self, t, held, latest):
        """After a poll at T: HELD[k] is the version node k holds (None for
        a node that is down), LATEST the last version published."""
        live = [k for k in range(len(held)) if k not in self.down]
        behind = sum(1 for k in live if (held[k] or 0) < latest)
        for f in self.faults:
            if f.get("_pending"):
                f["behind_at_end"] = behind
                f["_pending"] = False
                f["_open"] = True
            if f.get("_open") and behind == 0:
                f["converged_s"] = round(t - f["ended_s"], 3)
                f["converged_version"] = latest
                f["_open"] = False
            if f["kind"] == "kill" and f["began_s"] is not None and \
                    f["rest_converged_s"] is None:
                rest = [k for k in live if k not in f["nodes"]]
                if all((held[k] or 0) >= latest for k in rest):
                    f["rest_converged_s"] = round(t - f["began_s"], 3)

    def done(self):
        """Every event carried out, and every fault's convergence seen."""
        return self.next == len(self.events) and not any(
            f.get("_pending") or f.get("_open") for f in self.faults)

    def report(self):
        return [{k: v for k, v in f.items() if not k.startswith("_")}
                for f in self.faults]
