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
are made once.
"""

from resex_libvirt.sim import report
from resex_libvirt.sim import runner
from resex_libvirt.sim import scenario as scenario_mod

REPORTING = "vm64k"
BASE = "paper_64k_alone"
INTERFERED = "paper_64k_vs_2m"
POLICIES = ("none", "free_market", "io_shares")
LABELS = {"none": "interfered", "free_market": "FreeMarket", "io_shares": "IOShares"}
NO_INTERFERENCE = (("64KB-64KB", "paper_64k_vs_64k"),
                   ("64KB-2MB-nointf", "paper_64k_vs_2m_10rpe"))
SWEEP = (("128KB", "paper_64k_vs_128k"), ("256KB", "paper_64k_vs_256k"),
         ("512KB", "paper_64k_vs_512k"), ("1MB", "paper_64k_vs_1m"), ("2MB", INTERFERED))
#: Which epoch Fig. 6 shows (0-based): the second, past the start-up.
FIG6_EPOCH = 1


class Evaluation:
    """Runs (and caches) what the figures need."""

    def __init__(self, duration_s=None, progress=None):
        self.duration_s = duration_s
        self.progress = progress
        self._runs = {}

    def result(self, scenario_name, policy):
        key = (scenario_name, policy)
        if key not in self._runs:
            sc = scenario_mod.load(scenario_name)
            if self.duration_s is not None:
                sc = sc.with_duration(self.duration_s)
            res = runner.run(sc, policy)
            if self.progress is not None:
                self.progress("%s under %s: %.1f s" % (scenario_name, policy, res.wall_s))
            self._runs[key] = res
        return self._runs[key]

    def _reporting(self, scenario_name, policy):
        return self.result(scenario_name, policy).vm(REPORTING)

    def evaluate(self):
        """Every figure's data, and the runs behind them, as plain dicts."""
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
                run = self.result(name, policy)
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
        data["runs"] = [{"scenario": s, "policy": p,
                         "vms": {n: v.to_dict() for n, v in r.vms.items()},
                         "wall_s": r.wall_s}
                        for (s, p), r in sorted(self._runs.items())]
        return data

    def _fig6(self):
        run = self.result(INTERFERED, "free_market")
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
    out = [report.table(
        "Figs. 5 and 7: latency of the 64 KB VM against a 2 MB interferer",
        ["case", "mean us", "vs base", "p50 us", "p99 us", "std us"],
        [[r["case"], report.fmt(r["mean_us"]), _pct(r["mean_us"], base),
          report.fmt(r["p50_us"]), report.fmt(r["p99_us"]), report.fmt(r["std_us"])]
         for r in data["fig5_7"]])]
    fig6 = data["fig6"]
    names = sorted({k[:-len("_left_pct")] for r in fig6["rows"] for k in r
                    if k.endswith("_left_pct")})
    headers = ["epoch %"] + ["%s Resos left %%" % n for n in names] + \
        ["%s cap %%" % n for n in names]
    rows = [[str(r["epoch_pct"])] + [report.fmt(r[n + "_left_pct"]) for n in names] +
            [report.fmt(r[n + "_cap_pct"]) for n in names] for r in fig6["rows"]]
    out += ["", report.table(
        "Fig. 6: Reso balances during FreeMarket (%s, epoch %d)"
        % (fig6["scenario"], fig6["epoch"] + 1), headers, rows)]
    rows = [[r["case"], report.fmt(r["base_mean_us"]), report.fmt(r["none_mean_us"]),
             report.fmt(r["free_market_mean_us"]), report.fmt(r["io_shares_mean_us"]),
             report.fmt(r["free_market_late_cap_min"], "%.0f"),
             report.fmt(r["io_shares_late_cap_min"], "%.0f")] for r in data["fig8"]]
    out += ["", report.table(
        "Fig. 8: no-interference cases (64 KB VM mean latency, us; lowest cap after epoch 1)",
        ["case", "base", "uncontrolled", "FM", "IOS", "FM min cap %", "IOS min cap %"], rows)]
    rows = [[r["interferer"], report.fmt(r["base_mean_us"]),
             "%s (%s)" % (report.fmt(r["none_mean_us"]), _pct(r["none_mean_us"], base)),
             "%s (%s)" % (report.fmt(r["free_market_mean_us"]),
                          _pct(r["free_market_mean_us"], base)),
             "%s (%s)" % (report.fmt(r["io_shares_mean_us"]),
                          _pct(r["io_shares_mean_us"], base))] for r in data["fig9"]]
    out += ["", report.table(
        "Fig. 9: interferer buffer sweep (64 KB VM mean latency, us)",
        ["interferer", "base", "uncontrolled", "FreeMarket", "IOShares"], rows)]
    return "\n".join(out)


def write_plots(data, evaluation, out_dir):
    """fig5_7.png, fig6.png, fig8.png, fig9.png in ``out_dir``."""
    import os
    plt = report.pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    cases = [r["case"] for r in data["fig5_7"]]
    means = [r["mean_us"] for r in data["fig5_7"]]
    lo = [r["mean_us"] - r["p50_us"] if r["p50_us"] <= r["mean_us"] else 0
          for r in data["fig5_7"]]
    hi = [r["p99_us"] - r["mean_us"] for r in data["fig5_7"]]
    ax.bar(cases, means, yerr=[lo, hi], capsize=4)
    ax.set_ylabel("64 KB VM latency (us): mean, p50..p99")
    ax.set_title("Figs. 5 and 7")
    report.save_figure(fig, os.path.join(out_dir, "fig5_7.png"))

    run = evaluation.result(INTERFERED, "free_market")
    fig, ax = plt.subplots(figsize=(7, 4))
    t = run.series["t_s"]
    for name, bal in run.series["balance"].items():
        ax.plot(t, bal, label=name)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("Resos left")
    ax.set_title("Fig. 6: Reso balances during FreeMarket")
    ax.legend(loc="best")
    report.save_figure(fig, os.path.join(out_dir, "fig6.png"))

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
    report.save_figure(fig, os.path.join(out_dir, "fig8.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r["interferer"] for r in data["fig9"]]
    for key, name in (("base_mean_us", "base"), ("none_mean_us", "uncontrolled"),
                      ("free_market_mean_us", "FreeMarket"), ("io_shares_mean_us", "IOShares")):
        ax.plot(xs, [r[key] for r in data["fig9"]], marker="o", label=name)
    ax.set_xlabel("interfering VM's buffer")
    ax.set_ylabel("64 KB VM mean latency (us)")
    ax.set_title("Fig. 9: interferer buffer sweep")
    ax.legend(loc="best")
    report.save_figure(fig, os.path.join(out_dir, "fig9.png"))
