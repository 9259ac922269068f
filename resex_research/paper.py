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

"""The paper's evaluation (Section VII) as a set of simulated runs.

* Figs. 5 and 7: latency of the 64 KB reporting VM alone (base), with the
  2 MB interferer uncontrolled (interfered), under FreeMarket and under
  IOShares;
* Fig. 6: the Reso balances during FreeMarket (one epoch, every 10%);
* Fig. 8: the no-interference cases, 64KB-64KB and 64KB-2MB at 10
  requests per epoch, under FreeMarket and IOShares against the base;
* Fig. 9: the interferer's buffer swept from 128 KB to 2 MB.

Every run uses the packaged scenarios unchanged (same calibrated model,
same seed) and differs only in the policy; runs shared by several figures
are made once. The figures run the paper's own algorithms, the ``paper``
variants of the policies (``free_market_paper``, ``io_shares_paper``).

Then the yardstick beyond the paper, the **static-cap frontier**: for each
scenario of the buffer sweep, the interferer runs uncontrolled under a fixed
CPU limit (its ``[vms.sla] cpu_limit_pct``) swept from 5% to 100% and
refined by bisection at the SLA's edge; the frontier is the most interferer
throughput whose 64 KB VM still meets its SLA (mean latency within its
``interference_threshold_pct`` of ``latency_sla_us``). An oracle that knew
the workload would set that cap; each policy's run is then placed against
it (its interferer throughput as a percentage of the frontier, and whether
it met the SLA).
"""

import collections
import dataclasses

from resex_libvirt.sim import run_output
from resex_libvirt.sim import runner
from resex_libvirt.sim import scenario as scenario_mod
from resex_research import plots
from resex_research import policy_catalog

REPORTING = "vm64k"
BASE = "paper_64k_alone"
INTERFERED = "paper_64k_vs_2m"
POLICIES = ("none", "free_market", "io_shares")
LABELS = {"none": "interfered", "free_market": "FreeMarket", "io_shares": "IOShares"}
#: The policy each figure's column runs: the paper's algorithms exactly.
PAPER_VARIANT = {"none": "none", "free_market": "free_market_paper",
                 "io_shares": "io_shares_paper"}
#: The policies placed against the static-cap frontier, and their column labels.
FRONTIER_POLICIES = (("free_market_paper", "FM paper"), ("io_shares_paper", "IOS paper"),
                     ("free_market", "FreeMarket"), ("io_shares", "IOShares"),
                     ("latency_target", "LatencyTarget"))
#: The coarse cap grid of the frontier sweep (percent of one pCPU), then
#: ``FRONTIER_BISECT`` bisections between the last cap meeting the SLA and the next.
FRONTIER_CAPS = (5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0)
FRONTIER_BISECT = 2
NO_INTERFERENCE = (("64KB-64KB", "paper_64k_vs_64k"),
                   ("64KB-2MB-nointf", "paper_64k_vs_2m_10rpe"))
SWEEP = (("128KB", "paper_64k_vs_128k"), ("256KB", "paper_64k_vs_256k"),
         ("512KB", "paper_64k_vs_512k"), ("1MB", "paper_64k_vs_1m"), ("2MB", INTERFERED))
#: Which epoch Fig. 6 shows (0-based): the second, past the start-up.
FIG6_EPOCH = 1


def _run(duration_s, scenario_name, policy, limited=None):
    """One run (in a worker process): ``limited`` is ``(vm_name, cap_pct)`` or None."""
    sc = scenario_mod.load(scenario_name)
    if duration_s is not None:
        sc = sc.with_duration(duration_s)
    if limited is not None:
        return _static(with_limit(sc, *limited))
    return _policy_run(sc, policy)


def _static(sc):
    """An uncontrolled run: ``sc``'s VMs at their limits (a static-cap run).

    Without the market when :func:`runner.run_static` applies (the same VM
    results and ``cap_pct`` series as under the ``none`` policy, to the last
    bit, at a third of the cost): the figures read nothing else of an
    uncontrolled run.
    """
    if runner.static_applies(sc):
        return runner.run_static(sc)
    return runner.run(sc, "none")


def _policy_run(sc, policy):
    return _static(sc) if policy == "none" else policy_catalog.run(sc, policy)


#: Rough cost of a run under each policy, to hand the longest runs to the pool first.
_COST = {"none": 0, "free_market_paper": 1, "free_market": 1, "latency_target": 1,
         "io_shares_paper": 2, "io_shares": 2}


class Evaluation:
    """Runs (and caches) what the figures need.

    With ``jobs`` > 1 the runs are made in that many worker processes: the
    runs every figure needs first, then the frontier sweeps' runs, one
    bisection step of every scenario at a time. Every run is deterministic
    (same scenario, same seed), so the figures are the same whatever the
    number of workers; only the order of the progress lines changes.
    """

    def __init__(self, duration_s=None, progress=None, frontier=True, jobs=1):
        self.duration_s = duration_s
        self.progress = progress
        self.frontier = frontier
        self.jobs = max(1, int(jobs))
        self._runs = {}
        self._capped = {}

    def _scenario(self, scenario_name):
        sc = scenario_mod.load(scenario_name)
        if self.duration_s is not None:
            sc = sc.with_duration(self.duration_s)
        return sc

    def result(self, scenario_name, policy):
        key = (scenario_name, policy)
        if key not in self._runs:
            res = _policy_run(self._scenario(scenario_name), policy)
            if self.progress is not None:
                self.progress("%s under %s: %.1f s" % (scenario_name, policy, res.wall_s))
            self._runs[key] = res
        return self._runs[key]

    def capped_result(self, scenario_name, vm_name, cap_pct):
        """``scenario_name`` uncontrolled, with ``vm_name`` limited to ``cap_pct``."""
        key = (scenario_name, vm_name, cap_pct)
        if key not in self._capped:
            sc = self._scenario(scenario_name)
            if cap_pct >= 100.0 * sc.vm(vm_name).vcpus:
                res = self.result(scenario_name, "none")
            else:
                res = _static(with_limit(sc, vm_name, cap_pct))
                if self.progress is not None:
                    self.progress("%s with %s limited to %g%%: %.1f s"
                                  % (scenario_name, vm_name, cap_pct, res.wall_s))
            self._capped[key] = res
        return self._capped[key]

    def _reporting(self, scenario_name, policy):
        return self.result(scenario_name, PAPER_VARIANT[policy]).vm(REPORTING)

    def evaluate(self):
        """Every figure's data, and the runs behind them, as plain dicts."""
        if self.jobs > 1:
            self._prefetch()
        base = self._reporting(BASE, "none")
        data = {"base": _lat(base)}
        data["fig5_7"] = [dict(case="base", **_lat(base))]
        for policy in POLICIES:
            data["fig5_7"].append(dict(case=LABELS[policy],
                                       **_lat(self._reporting(INTERFERED, policy))))
        data["fig6"] = self._fig6()
        data["fig8"] = []
        for label, name in NO_INTERFERENCE:
            row = {"case": label, "base_mean_us": base.latency_mean_us}
            for policy in POLICIES:
                run = self.result(name, PAPER_VARIANT[policy])
                row[policy + "_mean_us"] = run.vm(REPORTING).latency_mean_us
                row[policy + "_caps"] = {n: [v.cap_mean_pct, v.cap_min_pct]
                                         for n, v in run.vms.items()}
                row[policy + "_late_cap_min"] = _late_cap_min(run)
            data["fig8"].append(row)
        data["fig9"] = []
        for label, name in SWEEP:
            row = {"interferer": label, "base_mean_us": base.latency_mean_us}
            for policy in POLICIES:
                row[policy + "_mean_us"] = self._reporting(name, policy).latency_mean_us
            data["fig9"].append(row)
        if self.frontier:
            data["frontier"] = [self._frontier(label, name) for label, name in SWEEP]
        data["runs"] = [{"scenario": s, "policy": p,
                         "vms": {n: v.to_dict() for n, v in r.vms.items()},
                         "wall_s": r.wall_s}
                        for (s, p), r in sorted(self._runs.items())]
        return data

    # -- runs in worker processes ---------------------------------------------------
    def _needed(self):
        """The ``(scenario, policy)`` runs :meth:`evaluate` asks for before any sweep."""
        names = [INTERFERED] + [n for _l, n in NO_INTERFERENCE] + [n for _l, n in SWEEP]
        keys = [(BASE, "none"), (INTERFERED, "free_market_paper")]
        keys += [(name, PAPER_VARIANT[p]) for name in names for p in POLICIES]
        if self.frontier:
            keys += [(name, p) for _l, name in SWEEP for p, _label in FRONTIER_POLICIES]
        return list(dict.fromkeys(keys))

    def _prefetch(self):
        """Make the runs :meth:`evaluate` will ask for in ``jobs`` processes, then cache them.

        A worker is never left waiting while a run can be made: no more runs
        are handed to the pool than it has workers, and each freed worker
        takes the most urgent run ready, first the bisection steps (each
        scenario's sweep moves on as soon as the runs of its last step are
        in), then the sweeps' cap grids, then the policies' runs (which no
        other run waits for), the longest first.
        """
        import concurrent.futures
        import multiprocessing
        context = multiprocessing.get_context("fork")
        queues = (collections.deque(), collections.deque(), collections.deque())
        queued = set()

        def want(urgency, cache, key, args):
            if key in cache or (id(cache), key) in queued:
                return
            queued.add((id(cache), key))
            queues[urgency].append((cache, key, args))

        waiting = {}        # sweep -> the (cache, key) its next step reads

        def step(sweep, urgency):
            try:
                name, vm, caps = next(sweep)
            except StopIteration:
                return
            reads = []
            for cap in caps:
                if self._full(name, vm, cap):
                    key = (name, "none")
                    want(urgency, self._runs, key, (self.duration_s,) + key)
                    reads.append((self._runs, key))
                else:
                    key = (name, vm, cap)
                    want(urgency, self._capped, key, (self.duration_s, name, "none", (vm, cap)))
                    reads.append((self._capped, key))
            waiting[sweep] = reads

        if self.frontier:
            for _label, name in SWEEP:
                step(self._sweep(name), 1)
        for key in sorted(self._needed(), key=lambda k: -_COST.get(k[1], 1)):
            want(2, self._runs, key, (self.duration_s,) + key)
        running = {}
        with concurrent.futures.ProcessPoolExecutor(self.jobs, mp_context=context) as pool:
            while True:
                while len(running) < self.jobs and any(queues):
                    cache, key, args = next(q for q in queues if q).popleft()
                    running[pool.submit(_run, *args)] = (cache, key)
                if not running:
                    break
                done, _pending = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    cache, key = running.pop(future)
                    res = cache[key] = future.result()
                    if self.progress is not None:
                        self.progress("%s: %.1f s" % (" ".join(str(k) for k in key), res.wall_s))
                for sweep, reads in list(waiting.items()):
                    if all(key in cache for cache, key in reads):
                        del waiting[sweep]
                        step(sweep, 0)

    def _full(self, scenario_name, vm_name, cap_pct):
        return cap_pct >= 100.0 * self._scenario(scenario_name).vm(vm_name).vcpus

    # -- the frontier ------------------------------------------------------------------
    def _sweep(self, scenario_name):
        """The static-cap sweep of one scenario, as a generator.

        It yields ``(scenario, vm, caps)``: the capped runs its next step
        needs (the first step, the sweep's caps; then one bisection point a
        step), and returns the sweep's points. :meth:`_frontier` drives it
        one step at a time; :meth:`_prefetch` drives every scenario's at once.
        """
        sc = self._scenario(scenario_name)
        sla = sc.vm(REPORTING).sla
        bound = sla.latency_sla_us * (1.0 + sla.interference_threshold_pct / 100.0)
        interferer = next(v.name for v in sc.vms if v.name != REPORTING)

        def point(cap):
            res = self.capped_result(scenario_name, interferer, cap)
            mean = res.vm(REPORTING).latency_mean_us
            return {"cap_pct": cap, "mean_us": mean,
                    "meets": mean is not None and mean <= bound,
                    "interferer_mb_s": res.vm(interferer).throughput_mb_s}

        yield scenario_name, interferer, FRONTIER_CAPS
        sweep = [point(cap) for cap in FRONTIER_CAPS]
        meeting = [p for p in sweep if p["meets"]]
        if meeting and not sweep[-1]["meets"]:
            lo = max(p["cap_pct"] for p in meeting)
            hi = min(p["cap_pct"] for p in sweep if not p["meets"] and p["cap_pct"] > lo)
            for _ in range(FRONTIER_BISECT):
                mid = round((lo + hi) / 2.0, 2)
                yield scenario_name, interferer, (mid,)
                p = point(mid)
                sweep.append(p)
                lo, hi = (mid, hi) if p["meets"] else (lo, mid)
        return sweep

    def _frontier(self, label, scenario_name):
        """The static-cap sweep of one scenario and each policy's point against it."""
        sc = self._scenario(scenario_name)
        sla = sc.vm(REPORTING).sla
        bound = sla.latency_sla_us * (1.0 + sla.interference_threshold_pct / 100.0)
        interferer = next(v.name for v in sc.vms if v.name != REPORTING)
        steps = self._sweep(scenario_name)
        try:
            while True:
                next(steps)             # the runs are made as the sweep reads them
        except StopIteration as done:
            sweep = done.value
        sweep.sort(key=lambda p: p["cap_pct"])
        best = max((p for p in sweep if p["meets"]), key=lambda p: p["interferer_mb_s"],
                   default=None)
        frontier = best["interferer_mb_s"] if best else None
        policies = {}
        for policy, _label in FRONTIER_POLICIES:
            res = self.result(scenario_name, policy)
            mean = res.vm(REPORTING).latency_mean_us
            mb_s = res.vm(interferer).throughput_mb_s
            policies[policy] = {
                "mean_us": mean, "vs_sla_base": mean / sla.latency_sla_us if mean else None,
                "meets": mean is not None and mean <= bound, "interferer_mb_s": mb_s,
                "pct_of_frontier": (100.0 * mb_s / frontier) if frontier else None,
                "interferer_cap_mean_pct": res.vm(interferer).cap_mean_pct}
        return {"interferer": label, "scenario": scenario_name, "vm": interferer,
                "sla_us": sla.latency_sla_us, "threshold_pct": sla.interference_threshold_pct,
                "sla_bound_us": bound, "sweep": sweep,
                "frontier_cap_pct": best["cap_pct"] if best else None,
                "frontier_mb_s": frontier, "policies": policies}

    def _fig6(self):
        run = self.result(INTERFERED, "free_market_paper")
        t = run.series["t_s"]
        epoch_s = run.interval_s * run.intervals_per_epoch
        epoch = max(0, min(FIG6_EPOCH, len(run.epochs) - 1))
        start = epoch * epoch_s
        rows = []
        for k in range(1, 11):
            at = start + k * epoch_s / 10.0
            if not t or at > t[-1] + run.interval_s * run.series_every / 2.0:
                break
            i = min(range(len(t)), key=lambda j: abs(t[j] - at))
            row = {"epoch_pct": 10 * k, "t_s": t[i]}
            for name in run.series["balance"]:
                bal = run.series["balance"][name][i]
                alloc = run.series["allocation"][name][i]
                row[name + "_left_pct"] = (100.0 * bal / alloc) if alloc else None
                row[name + "_cap_pct"] = run.series["cap_pct"][name][i]
            rows.append(row)
        return {"scenario": INTERFERED, "epoch": epoch, "rows": rows}

    @property
    def runs(self):
        return dict(self._runs)

    def distinct_runs(self):
        """Every distinct run made so far: the policies' and the frontier sweep's."""
        seen = {id(r): r for r in self._runs.values()}
        seen.update((id(r), r) for r in self._capped.values())
        return list(seen.values())


def format_run_count(evaluation, wall_s):
    """The closing line: every distinct run made, those under a policy and those capped."""
    made = len(evaluation.distinct_runs())
    policy_runs = len(evaluation.runs)
    if made == policy_runs:
        return "%d runs in %.1f s" % (made, wall_s)
    return ("%d runs in %.1f s (%d under a policy, %d at a static cap)"
            % (made, wall_s, policy_runs, made - policy_runs))


def with_limit(sc, vm_name, cap_pct):
    """``sc`` with ``vm_name``'s ``cpu_limit_pct`` set to ``cap_pct`` (a fixed cap)."""
    vms = tuple(dataclasses.replace(v, sla=dataclasses.replace(v.sla, limit_pct=float(cap_pct)))
                if v.name == vm_name else v for v in sc.vms)
    return dataclasses.replace(sc, vms=vms)


def _lat(vm):
    return {"mean_us": vm.latency_mean_us, "p50_us": vm.latency_p50_us,
            "p99_us": vm.latency_p99_us, "std_us": vm.latency_std_us}


def _late_cap_min(run):
    """The lowest cap of any VM after the first epoch (None when the run is shorter)."""
    first = run.intervals_per_epoch // run.series_every
    lows = [min(c for c in caps[first:] if c is not None)
            for caps in run.series["cap_pct"].values() if len(caps) > first]
    return min(lows) if lows else None


def _pct(value, base):
    if value is None or not base:
        return "-"
    return "%+.1f%%" % (100.0 * (value / base - 1.0))


def format_tables(data):
    """The figures as text tables."""
    base = data["base"]["mean_us"]
    out = [run_output.table(
        "Figs. 5 and 7: latency of the 64 KB VM against a 2 MB interferer",
        ["case", "mean us", "vs base", "p50 us", "p99 us", "std us"],
        [[r["case"], run_output.fmt(r["mean_us"]), _pct(r["mean_us"], base),
          run_output.fmt(r["p50_us"]), run_output.fmt(r["p99_us"]), run_output.fmt(r["std_us"])]
         for r in data["fig5_7"]])]
    fig6 = data["fig6"]
    names = sorted({k[:-len("_left_pct")] for r in fig6["rows"] for k in r
                    if k.endswith("_left_pct")})
    headers = ["epoch %"] + ["%s Resos left %%" % n for n in names] + \
        ["%s cap %%" % n for n in names]
    rows = [[str(r["epoch_pct"])] + [run_output.fmt(r[n + "_left_pct"]) for n in names] +
            [run_output.fmt(r[n + "_cap_pct"]) for n in names] for r in fig6["rows"]]
    out += ["", run_output.table(
        "Fig. 6: Reso balances during FreeMarket (%s, epoch %d)"
        % (fig6["scenario"], fig6["epoch"] + 1), headers, rows)]
    rows = [[r["case"], run_output.fmt(r["base_mean_us"]), run_output.fmt(r["none_mean_us"]),
             run_output.fmt(r["free_market_mean_us"]), run_output.fmt(r["io_shares_mean_us"]),
             run_output.fmt(r["free_market_late_cap_min"], "%.0f"),
             run_output.fmt(r["io_shares_late_cap_min"], "%.0f")] for r in data["fig8"]]
    out += ["", run_output.table(
        "Fig. 8: no-interference cases (64 KB VM mean latency, us; lowest cap after epoch 1)",
        ["case", "base", "uncontrolled", "FM", "IOS", "FM min cap %", "IOS min cap %"], rows)]
    rows = [[r["interferer"], run_output.fmt(r["base_mean_us"]),
             "%s (%s)" % (run_output.fmt(r["none_mean_us"]), _pct(r["none_mean_us"], base)),
             "%s (%s)" % (run_output.fmt(r["free_market_mean_us"]),
                          _pct(r["free_market_mean_us"], base)),
             "%s (%s)" % (run_output.fmt(r["io_shares_mean_us"]),
                          _pct(r["io_shares_mean_us"], base))] for r in data["fig9"]]
    out += ["", run_output.table(
        "Fig. 9: interferer buffer sweep (64 KB VM mean latency, us)",
        ["interferer", "base", "uncontrolled", "FreeMarket", "IOShares"], rows)]
    if data.get("frontier"):
        out += ["", format_frontier(data["frontier"])]
    return "\n".join(out)


def _policy_cell(p):
    if p["mean_us"] is None:
        return "-"
    if not p["meets"]:
        return "%.0f MISS %.3fx" % (p["interferer_mb_s"], p["vs_sla_base"])
    pct = "-" if p["pct_of_frontier"] is None else "%.0f%%" % p["pct_of_frontier"]
    return "%.0f %s" % (p["interferer_mb_s"], pct)


def format_frontier(rows):
    """The frontier table: sweep result, then each policy's MB/s and % of the frontier."""
    body = []
    for r in rows:
        best = max(((p["pct_of_frontier"], label) for name, label in FRONTIER_POLICIES
                    for p in [r["policies"][name]]
                    if p["meets"] and p["pct_of_frontier"] is not None), default=None)
        body.append([r["interferer"], run_output.fmt(r["frontier_cap_pct"], "%.1f"),
                     run_output.fmt(r["frontier_mb_s"], "%.0f")] +
                    [_policy_cell(r["policies"][p]) for p, _label in FRONTIER_POLICIES] +
                    ["-" if best is None else "%.0f%% %s" % best])
    return run_output.table(
        "Static-cap frontier: interferer MB/s at the 64 KB VM's SLA (mean within %g%% of %g us)"
        ";\neach policy: interferer MB/s and %% of the frontier, or MISS: SLA missed "
        "(mean / latency_sla_us)"
        % (rows[0]["threshold_pct"], rows[0]["sla_us"]),
        ["interferer", "cap %", "frontier MB/s"] + [label for _p, label in FRONTIER_POLICIES] +
        ["best meeting the SLA"], body)


def write_plots(data, evaluation, out_dir):
    """fig5_7.png, fig6.png, fig8.png, fig9.png in ``out_dir``."""
    import os
    plt = plots.pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    cases = [r["case"] for r in data["fig5_7"]]
    means = [r["mean_us"] for r in data["fig5_7"]]
    lo = [r["mean_us"] - r["p50_us"] if r["p50_us"] <= r["mean_us"] else 0
          for r in data["fig5_7"]]
    hi = [r["p99_us"] - r["mean_us"] for r in data["fig5_7"]]
    ax.bar(cases, means, yerr=[lo, hi], capsize=4)
    ax.set_ylabel("64 KB VM latency (us): mean, p50..p99")
    ax.set_title("Figs. 5 and 7")
    plots.save_figure(fig, os.path.join(out_dir, "fig5_7.png"))

    run = evaluation.result(INTERFERED, "free_market_paper")
    fig, ax = plt.subplots(figsize=(7, 4))
    t = run.series["t_s"]
    for name, bal in run.series["balance"].items():
        ax.plot(t, bal, label=name)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("Resos left")
    ax.set_title("Fig. 6: Reso balances during FreeMarket")
    ax.legend(loc="best")
    plots.save_figure(fig, os.path.join(out_dir, "fig6.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [r["case"] for r in data["fig8"]]
    width = 0.2
    for k, (key, name) in enumerate((("base_mean_us", "base"), ("none_mean_us", "uncontrolled"),
                                     ("free_market_mean_us", "FM"),
                                     ("io_shares_mean_us", "IOS"))):
        ax.bar([i + (k - 1.5) * width for i in range(len(labels))],
               [r[key] for r in data["fig8"]], width, label=name)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels)
    ax.set_ylabel("64 KB VM mean latency (us)")
    ax.set_title("Fig. 8: no-interference cases")
    ax.legend(loc="best")
    plots.save_figure(fig, os.path.join(out_dir, "fig8.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r["interferer"] for r in data["fig9"]]
    for key, name in (("base_mean_us", "base"), ("none_mean_us", "uncontrolled"),
                      ("free_market_mean_us", "FreeMarket"), ("io_shares_mean_us", "IOShares")):
        ax.plot(xs, [r[key] for r in data["fig9"]], marker="o", label=name)
    ax.set_xlabel("interfering VM's buffer")
    ax.set_ylabel("64 KB VM mean latency (us)")
    ax.set_title("Fig. 9: interferer buffer sweep")
    ax.legend(loc="best")
    plots.save_figure(fig, os.path.join(out_dir, "fig9.png"))
    if data.get("frontier"):
        plot_frontier(data["frontier"], os.path.join(out_dir, "frontier.png"))


def plot_frontier(rows, path):
    """One panel per scenario: the static-cap sweep, the SLA, and each policy's point."""
    plt = plots.pyplot()
    fig, axes = plt.subplots(1, len(rows), figsize=(4 * len(rows), 4), squeeze=False)
    markers = "osD^v*"
    for ax, r in zip(axes[0], rows):
        ax.plot([p["interferer_mb_s"] for p in r["sweep"]], [p["mean_us"] for p in r["sweep"]],
                marker=".", color="grey", label="static cap sweep")
        ax.axhline(r["sla_bound_us"], color="red", linestyle="--", label="SLA")
        for k, (policy, label) in enumerate(FRONTIER_POLICIES):
            p = r["policies"][policy]
            ax.plot([p["interferer_mb_s"]], [p["mean_us"]], marker=markers[k % len(markers)],
                    linestyle="none", label=label)
        ax.set_title("64 KB vs %s" % r["interferer"])
        ax.set_xlabel("interferer MB/s")
    axes[0][0].set_ylabel("64 KB VM mean latency (us)")
    axes[0][-1].legend(loc="best", fontsize="small")
    plots.save_figure(fig, path)
