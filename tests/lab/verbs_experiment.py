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

"""The ResEx experiment on RDMA verbs: ``python -m tests.lab.experiment --transport rdma``.

Paper Sections IV and VII with real verbs (:mod:`tests.lab.verbs`): the
sensitive tenant's verbs BenchEx (RC, ``--verb send`` or ``write``, one
request of each buffer size in ``--sizes`` in flight, paced so that it
offers ``--load`` of the bottleneck) against a server guest; the
interferer's ``ib_write_bw`` bursts to the same server; one tbf for all.
For each buffer size a fresh lab, then ``--rounds`` interleaved rounds of
every configuration:

* ``base`` (gate closed) and ``interfered`` (``[market] policy = none``);
* each policy of ``--runs``, with the real ``resex-agent``, the SLA being
  the first base run's mean and ``--threshold``: the agent's plugins, and
  the paper's ``io_shares_paper`` and the peers (``koordinator_suppress``,
  ``crane_throttle``, ``ewma_step``), research policies the lab installs
  for its agent (:func:`tests.lab.experiment.research_install`);
* the static-cap sweep: ``--sweep`` caps held on the interferer by the
  actuator (no agent), for each CFS period of ``--sweep-periods`` (a capped
  guest runs, and sends, in bursts of one period's quota).

Per configuration the medians over the rounds of: sensitive p50/p99/mean;
the interferer's goodput (perftest's own figure, mean of its bursts) and
rate at its tap (offered bytes, retransmits included); its cap mean/min and
swing (max - min over the run's second half); the seconds from the
interferer's start until the sensitive guest's windows met the SLA three
in a row; and the load average at the end of each round's run. Then the
goals (the issue's table), the peers table (:mod:`tests.lab.sidebyside`),
``results.json`` and ``verbs_frontier.png``.
"""

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile

from tests.lab import experiment
from tests.lab import harness
from tests.lab import sidebyside
from tests.lab import verbs

LOG = logging.getLogger(__name__)

#: ``--runs`` by default: the project's policies, the paper's IOShares, the peers.
POLICIES = ("io_shares", "latency_target", "io_shares_paper", "koordinator_suppress",
            "crane_throttle", "ewma_step")


def installed_policies():
    """The policies the agent can load (entry points ``resex.policies``)."""
    from importlib import metadata
    return {ep.name for ep in metadata.entry_points(group="resex.policies")}


def request_rate(size, rate_mbit, load):
    """Requests/s so that ``size``-byte requests offer ``load`` of the bottleneck (>= 0.5)."""
    return max(0.5, round(load * rate_mbit * 1e6 / (8.0 * size), 2))


def configs(runs, caps, periods):
    """``[(name, kind, arg)]`` of one round: base, interfered, policies, static caps."""
    out = [("base", "base", None), ("interfered", "interfered", None)]
    out += [(p, "policy", p) for p in runs if p not in ("base", "interfered")]
    for period in periods:
        for cap in caps:
            out.append(("static %g%% /%gms" % (cap, period / 1000.0), "static", (cap, period)))
    return out


def run_one(lab, kind, arg, args, sla):
    if kind == "base":
        return lab.run("base", "none", args.seconds, interfere=False, warmup_s=args.warmup,
                       window_reports=args.window_reports)
    if kind == "interfered":
        return lab.run("interfered", "none", args.seconds, interfere=True, sla=sla,
                       warmup_s=args.warmup, window_reports=args.window_reports)
    if kind == "policy":
        return lab.run(arg, arg, args.seconds, interfere=True, sla=sla, warmup_s=args.warmup,
                       window_reports=args.window_reports)
    cap, period = arg
    return lab.static(cap, args.seconds, period_us=period, warmup_s=args.warmup)


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(name, kind, results):
    """The medians of one configuration's rounds."""
    lat = [r["latency"] for r in results]
    return {
        "name": name, "kind": kind, "rounds": len(results),
        "n": sum(x["n"] for x in lat),
        "p50_us": _median([x["p50_us"] for x in lat if x["n"]]),
        "p99_us": _median([x["p99_us"] for x in lat if x["n"]]),
        "mean_us": _median([x["mean_us"] for x in lat if x["n"]]),
        "goodput_mbit_s": _median([r["interferer_goodput_mbit_s"] for r in results]),
        "tap_mbit_s": _median([r["interferer_mbit_s"] for r in results]),
        "cap_mean_pct": _median([r.get("interferer_cap_mean_pct", r.get("cap_pct"))
                                 for r in results]),
        "cap_min_pct": _median([r.get("interferer_cap_min_pct", r.get("cap_pct"))
                                for r in results]),
        "swing_pct": _median([r.get("cap_swing_pct") for r in results]),
        "sla_restored_s": _median([r.get("sla_restored_s") for r in results]),
        "sla_never_restored": sum(1 for r in results
                                  if "sla_restored_s" in r and r["sla_restored_s"] is None),
        "load_avg": [r["load_avg"] for r in results],
    }


def _f(v, fmt="%.0f"):
    return "-" if v is None else fmt % v


def format_table(rows):
    head = ("configuration", "p50 us", "p99 us", "mean us", "goodput", "tap Mb/s",
            "cap mean/min", "swing", "SLA back s", "load avg")
    lines = ["%-18s %8s %9s %8s %8s %8s %12s %6s %10s  %s" % head]
    for r in rows:
        sla = _f(r["sla_restored_s"], "%.1f")
        if r["sla_never_restored"]:
            sla += "(%d never)" % r["sla_never_restored"]
        lines.append("%-18s %8s %9s %8s %8s %8s %12s %6s %10s  %s" % (
            r["name"], _f(r["p50_us"]), _f(r["p99_us"]), _f(r["mean_us"]),
            _f(r["goodput_mbit_s"], "%.2f"), _f(r["tap_mbit_s"], "%.2f"),
            "-" if r["cap_mean_pct"] is None else "%.1f/%.1f" % (
                r["cap_mean_pct"], r["cap_min_pct"]),
            _f(r["swing_pct"], "%.1f"), sla,
            ",".join("%.1f" % v for v in r["load_avg"])))
    return "\n".join(lines)


def goals(rows, threshold_pct, epoch_s=1.0):
    """The issue's goals, measured: a dict and printable lines."""
    by = {r["name"]: r for r in rows}
    base, none = by.get("base"), by.get("interfered")
    if not base or not none or base["mean_us"] is None or none["p99_us"] is None:
        return {}, ["goals: base or interfered run missing"]
    sla_limit = base["mean_us"] * (1.0 + threshold_pct / 100.0)
    static = [r for r in rows if r["kind"] == "static" and r["mean_us"] is not None]
    frontier_at_sla = max((r["goodput_mbit_s"] or 0.0 for r in static
                           if r["mean_us"] <= sla_limit), default=None)
    out, lines = {}, []
    for r in rows:
        if r["kind"] != "policy" or r["mean_us"] is None:
            continue
        intf_none = none["p99_us"] - base["p99_us"]
        cut = (100.0 * (1.0 - (r["p99_us"] - base["p99_us"]) / intf_none)
               if intf_none > 0 else None)
        at_sla = r["mean_us"] <= sla_limit
        kept = (100.0 * (r["goodput_mbit_s"] or 0.0) / frontier_at_sla
                if at_sla and frontier_at_sla else None)
        out[r["name"]] = {"at_sla": at_sla, "p99_cut_pct": cut,
                          "goodput_vs_frontier_pct": kept,
                          "sla_restored_s": r["sla_restored_s"], "swing_pct": r["swing_pct"]}
        lines.append(
            "%s: at SLA %s (mean %.0f us, limit %.0f); p99 cut %s (goal >= 70%%); goodput %s "
            "of the best static cap at the SLA (goal >= 95%%); SLA back after %s s (goal <= "
            "%g); swing %s points (goal <= 5)" % (
                r["name"], "yes" if at_sla else "NO", r["mean_us"], sla_limit,
                _f(cut, "%.0f%%"), _f(kept, "%.0f%%"), _f(r["sla_restored_s"], "%.1f"),
                2 * epoch_s, _f(r["swing_pct"], "%.1f")))
    if frontier_at_sla is None:
        lines.append("no static cap met the SLA (mean within %g%% of base)" % threshold_pct)
    return out, lines


def plot(per_size, outdir):
    """``verbs_frontier.png``: p99 against interferer goodput, one panel per buffer size."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(per_size), figsize=(6.5 * len(per_size), 4.5),
                             squeeze=False)
    for ax, (size, rows) in zip(axes[0], sorted(per_size.items())):
        for period in sorted({r["name"].split("/")[-1] for r in rows if r["kind"] == "static"}):
            pts = sorted((r["goodput_mbit_s"] or 0.0, r["p99_us"] / 1000.0, r["name"])
                         for r in rows if r["kind"] == "static" and r["name"].endswith(period)
                         and r["p99_us"])
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    label="static caps, period %s" % period)
            for x, y, name in pts:
                ax.annotate(name.split()[1], (x, y), fontsize=7)
        for r in rows:
            if r["kind"] in ("base", "interfered", "policy") and r["p99_us"]:
                ax.plot([r["goodput_mbit_s"] or 0.0], [r["p99_us"] / 1000.0], marker="D",
                        linestyle="none", label=r["name"])
        ax.set_yscale("log")
        ax.set_title("verbs BenchEx, %d-byte requests" % size)
        ax.set_xlabel("interferer goodput (Mbit/s, ib_write_bw)")
        ax.set_ylabel("sensitive p99 (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(outdir, "verbs_frontier.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m tests.lab.experiment --transport rdma",
        description="resex-libvirt lab: the ResEx experiment on RDMA verbs (Soft-RoCE guests)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--sizes", default="65536,2097152",
                        help="BenchEx request sizes in bytes (the paper's 64 KB and 2 MB)")
    parser.add_argument("--verb", choices=("send", "write"), default="send")
    parser.add_argument("--load", type=float, default=0.25,
                        help="share of the bottleneck the sensitive tenant offers")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=4.0,
                        help="seconds after the interferer's start not in the statistics")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate-mbit", type=float, default=40.0)
    parser.add_argument("--queue-ms", type=float, default=100.0)
    parser.add_argument("--threshold", type=float, default=10.0)
    parser.add_argument("--window-reports", type=int, default=4)
    parser.add_argument("--bulk-size", type=int, default=65536)
    parser.add_argument("--runs", default=",".join(POLICIES),
                        help="policies: any installed one, the paper's variants and the "
                             "peers (installed for the lab's agent)")
    parser.add_argument("--sweep", default="20,5", help="static caps, %% of a pCPU")
    parser.add_argument("--sweep-periods", default="10000,100000",
                        help="CFS periods (us) of the static caps")
    parser.add_argument("--cap-period-us", type=int, default=10000,
                        help="CFS period of the agent's caps")
    parser.add_argument("--no-install", action="store_true")
    return parser.parse_args(argv)


def plan_of(args):
    """One round's configurations; a policy the agent cannot load is said and left out."""
    caps = [float(c) for c in args.sweep.split(",") if c.strip()]
    periods = [int(p) for p in args.sweep_periods.split(",") if p.strip()]
    loadable = installed_policies() | set(experiment.research_policies())
    wanted = [r for r in args.runs.split(",") if r]
    for name in wanted:
        if name not in loadable and name not in ("base", "interfered"):
            print("policy %s is neither installed for the agent (resex.policies) nor one "
                  "of the lab's research policies: not run" % name, flush=True)
    return configs([r for r in wanted if r in loadable], caps, periods)


def run_size(size, plan, args):
    """A fresh lab for ``size``-byte requests, every round of ``plan``: its report entry."""
    rate = request_rate(size, args.rate_mbit, args.load)
    lab = verbs.VerbsLab(rate_mbit=args.rate_mbit, queue_ms=args.queue_ms,
                         tool="benchex", size=size, rate=rate, verb=args.verb,
                         bulk_size=args.bulk_size, install=not args.no_install,
                         period_us=args.cap_period_us)
    results = {name: [] for name, _k, _a in plan}
    sla = None
    try:
        lab.setup(threshold_pct=args.threshold)
        print("size %d: lab up in %s, BenchEx %g req/s, bottleneck %g Mbit/s"
              % (size, lab.workdir, rate, args.rate_mbit), flush=True)
        for rnd in range(args.rounds):
            for name, kind, arg in plan:
                r = run_one(lab, kind, arg, args, sla)
                results[name].append(r)
                if sla is None and kind == "base":
                    sla = (r["latency"]["mean_us"], args.threshold)
                    lab.set_sla(*sla)
                print("size %d round %d %s: p99 %.0f us mean %.0f us goodput %.2f "
                      "Mbit/s tap %.2f Mbit/s load %.1f" % (
                          size, rnd + 1, name, r["latency"]["p99_us"],
                          r["latency"]["mean_us"], r["interferer_goodput_mbit_s"],
                          r["interferer_mbit_s"], r["load_avg"]), flush=True)
    finally:
        lab.teardown()
    rows = [summarize(name, kind, results[name]) for name, kind, _a in plan]
    return lab.image, {"rate_req_s": rate, "sla": sla, "rows": rows,
                       "goals": goals(rows, args.threshold)[0],
                       "runs": {k: [{kk: vv for kk, vv in r.items() if kk != "polls"}
                                    for r in v] for k, v in results.items()}}


def print_report(summary, path):
    args = summary["settings"]
    for size, rep in sorted(summary["sizes"].items()):
        print("ResEx on RDMA verbs (Soft-RoCE, QEMU/TCG): BenchEx --verb %s, %d-byte requests "
              "at %g req/s; ib_write_bw interferer; %g Mbit/s tbf; medians of %d rounds of "
              "%g s:" % (args["verb"], size, rep["rate_req_s"], args["rate_mbit"],
                         args["rounds"], args["seconds"]))
        print(format_table(rep["rows"]))
        for line in goals(rep["rows"], args["threshold"])[1]:
            print("  " + line)
        print()
    for title, data in sidebyside.from_results(summary):
        print(sidebyside.format_all(data, title))
        print()
    image = summary["image"]
    if image:
        print("guest image: %s, %.1f MB gzipped (%.1f MB unpacked), %d modules" % (
            image["initrd"], image["initrd_bytes"] / 1e6, image["unpacked_bytes"] / 1e6,
            len(image["modules"])))
    print("results: %s; plot: %s" % (os.path.join(args["out"], "results.json"), path))


def main(argv=None):
    args = parse_args(argv)
    if not harness.is_root():
        print("the lab needs root (libvirtd, cgroups, bridges)", file=sys.stderr)
        return 2
    experiment.start_process()
    args.out = args.out or tempfile.mkdtemp(prefix="resex-verbs-out-")
    os.makedirs(args.out, exist_ok=True)
    plan = plan_of(args)
    report, image = {}, None
    for size in [int(s) for s in args.sizes.split(",")]:
        image, report[size] = run_size(size, plan, args)
    summary = {"settings": vars(args), "image": image, "sizes": report}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    path = plot({size: rep["rows"] for size, rep in report.items()}, args.out)
    print()
    print_report(summary, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
