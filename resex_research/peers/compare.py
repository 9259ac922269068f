# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""``resex-sim compare --peers``: the project's policies side by side with the peers'.

Every scenario (the paper's and those beyond it) runs uncontrolled
(``none``), at its static-cap frontier, under each peer (:mod:`.`) and
under each of the project's policies; one table gives, per scenario and
policy:

* **SLA**: the worst sensitive VM's mean latency over its
  ``latency_sla_us`` (MISS: the statistic its SLA is on, the mean unless
  ``resex:latency_statistic`` says p99, over its bound, ``1 + threshold``),
  and its p99 over the same ``latency_sla_us``;
* **BE MB/s**: what the VMs without a latency SLA sent, and that as a
  percentage of the uncontrolled run's and of the frontier's;
* **protect ms**: the time to protect (:mod:`resex_research.protect`);
* **swing %**: the interferers' cap swing.

**The static-cap frontier** generalises the paper's (:mod:`..paper`): every
VM without a latency SLA is held at the same fixed cap, swept from 5% to
100% and refined by two bisections at the SLA's edge; the frontier is the
most throughput of theirs at which every sensitive VM still meets its SLA.
One cap for all is a simplification where there are several interferers
(an oracle could cap each differently); a scenario without one has no
frontier.

Then, per scenario, the project's best policy (the most best-effort
throughput among those meeting every SLA, else the closest to it) against
each peer, and the issue's goals, printed, never asserted.
"""

import concurrent.futures
import multiprocessing

from resex_libvirt import exceptions
from resex_libvirt.sim import run_output
from resex_libvirt.sim import scenario as scenario_mod
from resex_research import frontier as frontier_mod
from resex_research import peers
from resex_research import plots
from resex_research import policy_catalog
from resex_research import protect

#: The project's policies the peers are measured against, by default.
PROJECT = ("free_market", "io_shares", "latency_target")
#: The SLA statistics compared by default: the mean (every policy) and the p99
#: (the project's policies against the p99 frontier).
STATISTICS = ("mean", "p99")
FRONTIER = "frontier"
#: Within this much, two throughputs (or two latency ratios) are a tie.
TIE = 0.02


def family(name):
    """``paper`` for the paper's scenarios, ``beyond`` for the others."""
    return "paper" if name.startswith("paper_") else "beyond"


def best_effort(sc):
    return [vm for vm in sc.vms if not vm.sla.sensitive]


def summarize(sc, res):
    """The figures of one run the table reads (small: they cross processes)."""
    sla_vms, be = {}, 0.0
    for vm in sc.vms:
        r = res.vm(vm.name)
        if vm.sla.sensitive:
            sla_us, bound = vm.sla.latency_sla_us, protect.bound_us(vm.sla)
            mean, p99 = r.latency_mean_us, r.latency_p99_us
            # The statistic the SLA is on (resex:latency_statistic): the mean by default.
            on = p99 if vm.sla.latency_statistic == "p99" else mean
            sla_vms[vm.name] = {
                "mean_us": mean, "p99_us": p99, "sla_us": sla_us, "bound_us": bound,
                "vs_sla": None if mean is None else mean / sla_us,
                "p99_vs_sla": None if p99 is None else p99 / sla_us,
                "vs_bound": None if on is None else on / bound,
                "meets": on is not None and on <= bound}
        else:
            be += r.throughput_mb_s
    return {"sla_vms": sla_vms, "be_mb_s": be,
            "capped_mb_s": frontier_mod.judged(sc, res)["capped_mb_s"],
            "meets": all(v["meets"] for v in sla_vms.values()),
            "protect_s": protect.time_to_protect(sc, res),
            "swing_pct": protect.cap_swing(sc, res), "wall_s": res.wall_s}


_P99_SCENARIOS = {}


def _scenario(name, duration_s, statistic="mean"):
    sc = scenario_mod.load(name)
    sc = sc if duration_s is None else sc.with_duration(duration_s)
    if statistic == "mean":
        return sc
    # The p99 SLAs take a run of each sensitive VM alone: made once per process.
    key = (name, duration_s, statistic)
    if key not in _P99_SCENARIOS:
        _P99_SCENARIOS[key] = frontier_mod.with_statistic(sc, statistic)
    return _P99_SCENARIOS[key]


def run_one(duration_s, name, statistic, policy, cap_pct=None):
    """One run's summary: ``policy`` (``none``: uncontrolled), or the capped VMs at ``cap_pct``."""
    sc = _scenario(name, duration_s, statistic)
    if cap_pct is not None:
        return summarize(sc, frontier_mod.static(frontier_mod.with_caps(sc, cap_pct)))
    if policy == "none":
        return summarize(sc, frontier_mod.static(sc))
    return summarize(sc, policy_catalog.run(sc, policy))


class Comparison:
    """Runs (in ``jobs`` processes) and tabulates the comparison of ``names``.

    Every run is deterministic (same scenario, same seed): the tables are
    the same whatever the number of workers. The static-cap frontier is
    :mod:`resex_research.frontier`'s, its points run here in parallel.
    """

    def __init__(self, names, project=PROJECT, duration_s=None, jobs=1, progress=None,
                 statistics=STATISTICS):
        self.names = list(names)
        self.project = [p for p in project if p not in peers.NAMES and p != "none"]
        self.policies = ["none"] + list(peers.NAMES) + self.project
        self.duration_s = duration_s
        self.jobs = max(1, int(jobs))
        self.progress = progress
        self.statistics = list(statistics)
        self.runs = {}

    def _map(self, keys):
        """Make the runs of ``keys`` (``(name, statistic, policy, cap)``) not made yet."""
        todo = [k for k in dict.fromkeys(keys) if k not in self.runs]
        if self.jobs == 1 or len(todo) < 2:
            for k in todo:
                self._done(k, run_one(self.duration_s, *k))
            return
        context = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(self.jobs, mp_context=context) as pool:
            futures = {pool.submit(run_one, self.duration_s, *k): k for k in todo}
            for future in concurrent.futures.as_completed(futures):
                self._done(futures[future], future.result())

    def _done(self, key, summary):
        self.runs[key] = summary
        if self.progress is not None:
            name, statistic, policy, cap = key
            what = policy if cap is None else "cap %g%%" % cap
            self.progress("%s (%s SLA) %s: %.1f s" % (name, statistic, what, summary["wall_s"]))

    def _policies(self, statistic):
        """Every policy on the mean SLA; on a tail SLA the project's (the peers read no p99)."""
        return self.policies if statistic == "mean" else ["none"] + self.project

    def _grid(self, name):
        return frontier_mod.grid(_scenario(name, self.duration_s))

    def _points(self, name, statistic):
        """The frontier's points run so far, the uncontrolled run as the full size's."""
        caps = sorted(c for (n, st, p, c) in self.runs
                      if n == name and st == statistic and c is not None)
        points = [dict(self.runs[(name, statistic, "none", c)], cap_pct=c) for c in caps]
        none = self.runs[(name, statistic, "none", None)]
        full = frontier_mod.full_pct(_scenario(name, self.duration_s))
        points.append(dict(none, cap_pct=full))
        return points

    def evaluate(self):
        """Every run, and the table's data as plain dicts."""
        pairs = [(n, st) for st in self.statistics for n in self.names]
        keys = [(n, st, p, None) for n, st in pairs for p in self._policies(st)]
        keys += [(n, st, "none", c) for n, st in pairs for c in self._grid(n)]
        self._map(keys)
        # The bisections at the SLA's edge, every scenario's step at once.
        edges = {}
        for n, st in pairs:
            if self._grid(n):
                span = frontier_mod.edge(self._points(n, st))
                if span is not None:
                    edges[(n, st)] = span
        for _ in range(frontier_mod.BISECT):
            mids = {k: frontier_mod.middle(span) for k, span in edges.items()}
            self._map([(n, st, "none", mid) for (n, st), mid in mids.items()])
            for (n, st), mid in mids.items():
                edges[(n, st)] = frontier_mod.narrowed(
                    edges[(n, st)], mid, self.runs[(n, st, "none", mid)]["meets"])
        data = {"scenarios": [self._scenario_data(n) for n in self.names],
                "project": list(self.project), "peers": list(peers.NAMES),
                "duration_s": self.duration_s}
        if "p99" in self.statistics:
            data["tail"] = [self._tail_data(n) for n in self.names]
        return data

    def _frontier(self, name, statistic="mean"):
        if not self._grid(name):
            return None
        points = self._points(name, statistic)
        top = frontier_mod.best(points)
        sweep = [{"cap_pct": p["cap_pct"], "meets": p["meets"], "be_mb_s": p["be_mb_s"],
                  "capped_mb_s": p["capped_mb_s"],
                  "vs_bound": max((v["vs_bound"] for v in p["sla_vms"].values()
                                   if v["vs_bound"] is not None), default=None)}
                 for p in points]
        if top is None:
            return {"cap_pct": None, "be_mb_s": None, "capped_mb_s": None, "run": None,
                    "sweep": sweep}
        return {"cap_pct": top["cap_pct"], "be_mb_s": top["be_mb_s"],
                "capped_mb_s": top["capped_mb_s"], "run": top, "sweep": sweep}

    def _scenario_data(self, name):
        sc = _scenario(name, self.duration_s)
        none = self.runs[(name, "mean", "none", None)]
        frontier = self._frontier(name)
        rows = []

        def row(policy, s, cap=None):
            r = dict(s, policy=policy, cap_pct=cap)
            r["pct_uncontrolled"] = (100.0 * s["be_mb_s"] / none["be_mb_s"]
                                     if none["be_mb_s"] else None)
            top = frontier["capped_mb_s"] if frontier else None
            r["pct_frontier"] = 100.0 * s["capped_mb_s"] / top if top else None
            return r
        rows.append(row("none", none))
        if frontier is not None and frontier["run"] is not None:
            rows.append(row(FRONTIER, frontier["run"], frontier["cap_pct"]))
        elif frontier is not None:
            # No static cap meets every SLA: a row that says so, with nothing to compare.
            rows.append({"policy": FRONTIER, "cap_pct": None, "unreachable": True,
                         "sla_vms": {}, "meets": False, "be_mb_s": None,
                         "pct_uncontrolled": None, "pct_frontier": None, "protect_s": None,
                         "swing_pct": None})
        for p in self.policies[1:]:
            rows.append(row(p, self.runs[(name, "mean", p, None)]))
        return {"scenario": name, "family": family(name), "description": sc.description,
                "best_effort": [vm.name for vm in best_effort(sc)],
                "capped": frontier_mod.capped_vms(sc),
                "frontier": None if frontier is None else {
                    "cap_pct": frontier["cap_pct"], "be_mb_s": frontier["be_mb_s"],
                    "capped_mb_s": frontier["capped_mb_s"], "sweep": frontier["sweep"]},
                "rows": rows}

    def _tail_data(self, name):
        """The p99 SLA: its frontier, and each project policy against it."""
        sc = _scenario(name, self.duration_s, "p99")
        none = self.runs[(name, "p99", "none", None)]
        front = self._frontier(name, "p99")
        lowest = None
        if front is not None:
            lowest = min(front["sweep"], key=lambda p: p["cap_pct"])
        top = front["capped_mb_s"] if front else None
        policies = {}
        for p in self.project:
            s = self.runs[(name, "p99", p, None)]
            policies[p] = {"meets": s["meets"], "worst": worst(s),
                           "capped_mb_s": s["capped_mb_s"],
                           "pct_frontier": 100.0 * s["capped_mb_s"] / top if top else None}
        return {"scenario": name, "capped": frontier_mod.capped_vms(sc),
                "slas_us": {vm.name: vm.sla.latency_sla_us for vm in sc.vms
                            if vm.sla.sensitive},
                "uncontrolled": {"worst": worst(none), "meets": none["meets"],
                                 "capped_mb_s": none["capped_mb_s"]},
                "lowest_cap": None if lowest is None else {
                    "cap_pct": lowest["cap_pct"], "worst": lowest["vs_bound"]},
                "frontier": None if front is None else {
                    "cap_pct": front["cap_pct"], "capped_mb_s": front["capped_mb_s"]},
                "policies": policies}


# -- verdicts --------------------------------------------------------------------------
def worst(row):
    """The worst sensitive VM's mean over its bound (None: no latency)."""
    return max((v["vs_bound"] for v in row["sla_vms"].values() if v["vs_bound"] is not None),
               default=None)


def rank(row):
    """Sort key of "better": meeting every SLA, then more BE throughput, else closer to it."""
    w = worst(row)
    if row["meets"]:
        return (1, row["be_mb_s"])
    return (0, -(w if w is not None else float("inf")))


def best_of(rows, policies):
    cands = [r for r in rows if r["policy"] in policies and not r.get("unreachable")]
    return max(cands, key=rank) if cands else None


def versus(mine, peer):
    """``project``, ``peer`` or ``tie``: who did better on this scenario, and why."""
    if mine["meets"] != peer["meets"]:
        return ("project", "SLA") if mine["meets"] else ("peer", "SLA")
    if mine["meets"]:
        a, b = mine["be_mb_s"], peer["be_mb_s"]
        if abs(a - b) <= TIE * max(a, b, 1e-9):
            return "tie", "throughput"
        return ("project" if a > b else "peer"), "throughput"
    a, b = worst(mine), worst(peer)
    if a is None or b is None or abs(a - b) <= TIE * max(a, b):
        return "tie", "latency"
    return ("project" if a < b else "peer"), "latency"


def verdicts(data):
    """Per scenario and peer: the project's best policy against the peer."""
    out = []
    for s in data["scenarios"]:
        if not any(r["sla_vms"] for r in s["rows"]):
            continue
        mine = best_of(s["rows"], data["project"])
        for name in data["peers"]:
            peer = best_of(s["rows"], (name,))
            if mine is None or peer is None:
                continue
            who, why = versus(mine, peer)
            faster = None
            if mine["protect_s"] is not None or peer["protect_s"] is not None:
                a = mine["protect_s"] if mine["protect_s"] is not None else float("inf")
                b = peer["protect_s"] if peer["protect_s"] is not None else float("inf")
                faster = "tie" if a == b else ("project" if a < b else "peer")
            out.append({"scenario": s["scenario"], "peer": name, "project": mine["policy"],
                        "winner": who, "on": why, "faster": faster})
    return out


# -- tables ----------------------------------------------------------------------------
def _ms(seconds):
    return "never" if seconds is None else "%.0f" % (1000.0 * seconds)


def _sla_cell(row):
    cells = [v for v in row["sla_vms"].values() if v["vs_sla"] is not None]
    if not cells:
        return "-"
    w = max(cells, key=lambda v: v["vs_bound"])
    return "%.3fx%s" % (w["vs_sla"], "" if row["meets"] else " MISS")


def _p99_cell(row):
    cells = [v["p99_vs_sla"] for v in row["sla_vms"].values() if v["p99_vs_sla"] is not None]
    return "%.2fx" % max(cells) if cells else "-"


def format_table(data):
    body = []
    for s in data["scenarios"]:
        for r in s["rows"]:
            if r.get("unreachable"):
                body.append([s["scenario"], "frontier (no cap meets)"] + ["-"] * 7)
                continue
            label = r["policy"] if r["cap_pct"] is None else "frontier (cap %g%%)" % r["cap_pct"]
            body.append([s["scenario"], label, _sla_cell(r), _p99_cell(r),
                         "%.0f" % r["be_mb_s"], run_output.fmt(r["pct_uncontrolled"], "%.0f"),
                         run_output.fmt(r["pct_frontier"], "%.0f"),
                         _ms(r["protect_s"]) if r["sla_vms"] and s["best_effort"] else "-",
                         run_output.fmt(r["swing_pct"], "%.0f")])
    return run_output.table(
        "Peers side by side%s: the worst SLA VM's mean (and p99) / its latency_sla_us "
        "(MISS: over its bound);\nbest-effort MB/s, as %% of uncontrolled and of the static-cap "
        "frontier; time to protect (ms); interferers' cap swing (%%)"
        % ("" if data["duration_s"] is None else " (%g s runs)" % data["duration_s"]),
        ["scenario", "policy", "mean/SLA", "p99/SLA", "BE MB/s", "% unctl", "% front",
         "protect ms", "swing %"], body)


def _ratio(value):
    return "-" if value is None else "%.3fx" % value


def format_tail(data):
    """The p99 SLA: each scenario's p99 frontier and the project's policies against it."""
    body = []
    for t in data.get("tail", ()):
        front, low = t["frontier"], t["lowest_cap"]
        cells = [t["scenario"], " ".join("%.0f" % v for v in t["slas_us"].values()) or "-",
                 "%s%s" % (_ratio(t["uncontrolled"]["worst"]),
                           "" if t["uncontrolled"]["meets"] else " MISS"),
                 "-" if low is None else "%s @%g%%" % (_ratio(low["worst"]), low["cap_pct"])]
        if front is None:
            cells += ["-", "-"]
        elif front["cap_pct"] is None:
            cells += ["unreachable", "-"]
        else:
            cells += ["%g%%" % front["cap_pct"], "%.0f" % front["capped_mb_s"]]
        for p in data["project"]:
            r = t["policies"][p]
            cells.append("%s%s %.0f%s" % (
                _ratio(r["worst"]), "" if r["meets"] else " MISS", r["capped_mb_s"],
                "" if r["pct_frontier"] is None else " %.0f%%" % r["pct_frontier"]))
        body.append(cells)
    return run_output.table(
        "Tail SLA (resex:latency_statistic=p99; each SLA VM's SLA: its p99 alone): the worst "
        "SLA VM's p99 / its bound (uncontrolled; at the lowest cap),\nthe p99 static-cap "
        "frontier (the largest cap meeting every p99 SLA; unreachable: none does) and the capped "
        "VMs' MB/s there; each policy: p99 / bound, capped VMs' MB/s, % of the p99 frontier",
        ["scenario", "p99 SLA us", "uncontrolled", "lowest cap", "p99 frontier",
         "frontier MB/s"] + list(data["project"]), body)


def format_verdicts(data):
    rows = [[v["scenario"], v["peer"], v["project"], v["winner"], v["on"], v["faster"] or "-"]
            for v in verdicts(data)]
    return run_output.table(
        "The project's best policy against each peer (tie: within %d%%)" % round(100 * TIE),
        ["scenario", "peer", "project's best", "better", "on", "protects first"], rows)


def goals(data):
    """The issue's goals, measured: each as ``(goal, held, exceptions)``."""
    vs = verdicts(data)
    sla = [v for v in vs if v["winner"] == "peer" and v["on"] in ("SLA", "latency")]
    tput = [v for v in vs if v["winner"] == "peer" and v["on"] == "throughput"]
    slow = [v for v in vs if v["faster"] == "peer"]

    def names(items):
        return ["%s vs %s" % (v["scenario"], v["peer"]) for v in items]
    return [("SLA attainment never worse than a peer's", not sla, names(sla)),
            ("best-effort throughput at equal SLA attainment >= every peer's", not tput,
             names(tput)),
            ("time to protect <= every peer's", not slow, names(slow))]


def format_goals(data):
    lines = ["Goals (printed, not asserted):"]
    for goal, held, cases in goals(data):
        lines.append("  %-66s %s" % (goal, "held" if held else
                                     "NOT held: " + "; ".join(cases)))
    return "\n".join(lines)


def format_all(data):
    parts = [format_table(data)]
    if data.get("tail"):
        parts.append(format_tail(data))
    return "\n\n".join(parts + [format_verdicts(data), format_goals(data)])


# -- plots -----------------------------------------------------------------------------
def write_plots(data, out_dir):
    """``peers-<family>.png``: per scenario, each policy's latency against its throughput."""
    import os
    plt = plots.pyplot()
    written = []
    for fam in ("paper", "beyond"):
        scs = [s for s in data["scenarios"] if s["family"] == fam and s["best_effort"]
               and any(r["sla_vms"] for r in s["rows"])]
        if not scs:
            continue
        cols = min(4, len(scs))
        nrows = -(-len(scs) // cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3.6 * nrows), squeeze=False)
        markers = "osD^v<>*Xph"
        for ax, s in zip(axes.flat, scs):
            if s["frontier"]:
                sweep = sorted(s["frontier"]["sweep"], key=lambda p: p["cap_pct"])
                ax.plot([p["be_mb_s"] for p in sweep], [p["vs_bound"] for p in sweep],
                        marker=".", color="grey", label="static caps")
            ax.axhline(1.0, color="red", linestyle="--", label="SLA")
            for k, r in enumerate(x for x in s["rows"] if x["policy"] != FRONTIER):
                ax.plot([r["be_mb_s"]], [worst(r)], marker=markers[k % len(markers)],
                        linestyle="none", label=r["policy"])
            ax.ticklabel_format(axis="both", useOffset=False)
            ax.set_title(s["scenario"], fontsize="small")
            ax.set_xlabel("best-effort MB/s")
            ax.set_ylabel("worst SLA VM mean / bound")
        for ax in list(axes.flat)[len(scs):]:
            ax.axis("off")
        axes.flat[0].legend(loc="best", fontsize="x-small")
        path = os.path.join(out_dir, "peers-%s.png" % fam)
        plots.save_figure(fig, path)
        written.append(path)
    return written


# -- the command -----------------------------------------------------------------------
def cmd(args, project, progress=None):
    """``resex-sim compare --peers``: print the tables (or JSON); write plots with ``--out``."""
    import json
    import os
    names = args.scenario or scenario_mod.names()
    statistics = [st for st in getattr(args, "statistic", "mean,p99").split(",") if st]
    unknown = [st for st in statistics if st not in STATISTICS]
    if unknown or "mean" not in statistics:
        raise exceptions.ConfigError("--statistic: %s (the mean, and optionally p99)"
                                     % ", ".join(unknown or statistics))
    comparison = Comparison(names, project=project, duration_s=args.duration, jobs=args.jobs,
                            progress=progress, statistics=statistics)
    data = comparison.evaluate()
    data["verdicts"] = verdicts(data)
    data["goals"] = [{"goal": g, "held": h, "exceptions": e} for g, h, e in goals(data)]
    if args.json:
        print(json.dumps(data, indent=1, sort_keys=True))
    else:
        print(format_all(data))
    if args.out:
        run_output.write_json(os.path.join(args.out, "peers.json"), data)
        written = write_plots(data, args.out)
        if not args.json:
            print("\nwrote peers.json and %s to %s"
                  % (", ".join(os.path.basename(p) for p in written), args.out))
    return 0
