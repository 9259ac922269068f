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

"""``resex-sim``: run scenarios on the simulated testbed and reproduce the paper.

Commands::

    resex-sim list
    resex-sim run SCENARIO --policy POLICY [--json] [-v] [--out DIR]
    resex-sim paper [--json] [--out DIR] [--duration S] [--no-frontier] [--jobs N]
    resex-sim compare [SCENARIO ...] [--policies P1,P2] [--json] [--duration S]
    resex-sim compare --peers [SCENARIO ...] [--jobs N] [--out DIR]   (against the peers)
    resex-sim calibrate [--json] [--duration S]
    resex-sim frontier [SCENARIO ...] [--statistic mean,p99] [--policies P1,P2] [--json]
    resex-sim cluster SCENARIO [--json] [--out DIR]   (the fleet study)

``SCENARIO`` is a packaged scenario's name (``resex-sim list``) or a TOML
file. ``--json`` prints, per VM (and policy): latency mean, p50, p99 and
standard deviation (us), throughput (MB/s, 10^6 bytes), mean and minimum
CPU cap, and a ``timeline``: per epoch and VM, the cap, the tax rate, the
interference percentage, the Reso balance and the reason for the cap.
``-v`` prints that timeline as a compact table. Scenario warnings (a run
that makes sense but probably not the one meant) go to stderr. ``--out
DIR`` writes the same data as JSON, with the time series, plus PNG plots
(matplotlib).
"""

import argparse
import json
import os
import sys
import time

from resex_libvirt import exceptions
from resex_libvirt.sim import run_output
from resex_research import peers
from resex_research import plots
from resex_research import policy_catalog


def _vm_rows(result):
    rows = []
    for name, v in result.vms.items():
        rows.append([name, run_output.fmt(v.latency_mean_us), run_output.fmt(v.latency_p50_us),
                     run_output.fmt(v.latency_p99_us), run_output.fmt(v.latency_std_us),
                     "%.1f" % v.throughput_mb_s, "%.1f" % v.cpu_pct,
                     run_output.fmt(v.cap_mean_pct), run_output.fmt(v.cap_min_pct)])
    return rows


def format_run(result):
    lines = [run_output.table(
        "%s under %s (%.1f s simulated in %.1f s)" % (
            result.scenario, result.policy,
            len(result.series["t_s"]) * result.series_every * result.interval_s,
            result.wall_s),
        ["VM", "mean us", "p50 us", "p99 us", "std us", "MB/s", "CPU %", "cap mean %",
         "cap min %"], _vm_rows(result))]
    if result.epochs:
        names = list(result.vms)
        rows = []
        for e in result.epochs:
            row = ["%d" % (e["epoch"] + 1), "%.0f" % (100.0 * e["link_utilisation"]),
                   "%.1f" % e["latency_inflation_pct"]]
            for n in names:
                v = e["vms"].get(n)
                row.append("-" if v is None else "%.0f/%.0f" % (v["cap_mean_pct"],
                                                                v["cap_min_pct"]))
            rows.append(row)
        lines += ["", run_output.table("Per epoch", ["epoch", "link %", "inflation %"] +
                                       ["%s cap mean/min" % n for n in names], rows)]
    return "\n".join(lines)


_TIMELINE_KEYS = ("cap_pct", "cap_mean_pct", "cap_min_pct", "rate", "interference_pct",
                  "balance", "allocation", "reason", "reasons")


def timeline(result):
    """Per epoch and VM: cap, tax rate, interference %, Reso balance, reason."""
    return [{"epoch": e["epoch"] + 1, "link_utilisation": e["link_utilisation"],
             "vms": {n: {k: v.get(k) for k in _TIMELINE_KEYS} for n, v in e["vms"].items()}}
            for e in result.epochs]


def format_timeline(result):
    """The timeline as one compact row per epoch: ``cap% xrate intf% bal% reason`` per VM."""
    names = list(result.vms)
    rows = []
    for e in timeline(result):
        row = ["%d" % e["epoch"], "%.0f" % (100.0 * e["link_utilisation"])]
        for n in names:
            v = e["vms"].get(n)
            if v is None:
                row.append("-")
                continue
            bal = (100.0 * v["balance"] / v["allocation"]) if v["allocation"] else 0.0
            intf = v["interference_pct"]
            row.append("%.0f%% x%.2f%s bal %.0f%% %s" % (
                v["cap_pct"], v["rate"], "" if intf is None else " intf %.1f%%" % intf,
                bal, v["reason"]))
        rows.append(row)
    return run_output.table(
        "Timeline (cap at epoch end, tax rate, interference, Resos left, reason)",
        ["epoch", "link %"] + names, rows)


def _summary(result):
    return {"scenario": result.scenario, "policy": result.policy,
            "policy_kwargs": result.policy_kwargs,
            "vms": {n: v.to_dict() for n, v in result.vms.items()},
            "timeline": timeline(result)}


def _policy_arg(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError("expected KEY=VALUE, got %r" % text)
    for convert in (int, float):
        try:
            return key, convert(value)
        except ValueError:
            pass
    if value.lower() in ("true", "false"):
        return key, value.lower() == "true"
    raise argparse.ArgumentTypeError("%s: value must be a number or true/false" % key)


def _prepare_out(path):
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise exceptions.ConfigError("cannot create --out %s: %s" % (path, exc)) from exc


def cmd_list(args):
    from resex_libvirt.sim import scenario as scenario_mod
    for name in scenario_mod.names():
        sc = scenario_mod.load(name)
        print("%-24s %s" % (name, sc.description))
    return 0


def cmd_run(args):
    from resex_libvirt.sim import scenario as scenario_mod
    sc = scenario_mod.load(args.scenario)
    for warning in sc.warnings:
        print("resex-sim: warning: %s" % warning, file=sys.stderr)
    if args.duration is not None:
        sc = sc.with_duration(args.duration)
    if args.seed is not None:
        sc = sc.with_seed(args.seed)
    try:
        result = policy_catalog.run(sc, args.policy, **dict(args.policy_arg or ()))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, exceptions.ResexError):
            raise
        raise exceptions.ConfigError("policy %s: %s" % (args.policy, exc)) from exc
    if args.json:
        print(json.dumps(_summary(result), indent=1, sort_keys=True))
    else:
        print(format_run(result))
        if args.verbose:
            print("\n" + format_timeline(result))
    if args.out:
        _prepare_out(args.out)
        base = os.path.join(args.out, "%s-%s" % (sc.name, result.policy))
        run_output.write_json(base + ".json", result.to_dict())
        plots.plot_run(result, base + ".png")
        if not args.json:
            print("\nwrote %s.json and %s.png" % (base, base))
    return 0


def compare_rows(names, policies, duration=None, progress=None, policy_kwargs=None):
    """Per scenario and policy: each SLA VM's mean over its SLA, the others' MB/s, protection.

    ``policy_kwargs`` go to every policy but ``none``.
    """
    from resex_libvirt.sim import scenario as scenario_mod
    from resex_research import protect
    rows = []
    for name in names:
        sc = scenario_mod.load(name)
        if duration is not None:
            sc = sc.with_duration(duration)
        for policy in policies:
            kwargs = policy_kwargs if policy_kwargs and policy != "none" else {}
            try:
                res = policy_catalog.run(sc, policy, **kwargs)
            except (TypeError, ValueError) as exc:
                if isinstance(exc, exceptions.ResexError):
                    raise
                raise exceptions.ConfigError("policy %s: %s" % (policy, exc)) from exc
            if progress is not None:
                progress("%s under %s: %.1f s" % (sc.name, policy, res.wall_s))
            sla_vms, others = {}, 0.0
            for vm in sc.vms:
                r = res.vm(vm.name)
                if vm.sla.sensitive:
                    bound = 1.0 + vm.sla.interference_threshold_pct / 100.0
                    ratio = (r.latency_mean_us / vm.sla.latency_sla_us
                             if r.latency_mean_us is not None else None)
                    sla_vms[vm.name] = {"mean_us": r.latency_mean_us, "vs_sla": ratio,
                                        "bound": bound,
                                        "meets": ratio is not None and ratio <= bound}
                else:
                    others += r.throughput_mb_s
            rows.append({"scenario": sc.name, "policy": policy, "sla_vms": sla_vms,
                         "others_mb_s": others,
                         "protect_s": protect.time_to_protect(sc, res),
                         "swing_pct": protect.cap_swing(sc, res)})
    return rows


def format_compare(rows):
    body = []
    for r in rows:
        cells = ["%s %.3fx%s" % (n, v["vs_sla"], "" if v["meets"] else " MISS")
                 for n, v in r["sla_vms"].items() if v["vs_sla"] is not None]
        protects = r["sla_vms"] and r["others_mb_s"]
        body.append([r["scenario"], r["policy"], "; ".join(cells) or "-",
                     "%.0f" % r["others_mb_s"],
                     ("never" if r["protect_s"] is None else "%.0f" % (1000.0 * r["protect_s"]))
                     if protects else "-",
                     run_output.fmt(r["swing_pct"], "%.0f")])
    return run_output.table(
        "Each SLA VM's mean latency / its latency_sla_us (MISS: over its threshold), "
        "the other VMs' MB/s, the time to protect (ms) and the interferers' cap swing (%)",
        ["scenario", "policy", "SLA VMs", "others MB/s", "protect ms", "swing %"], body)


#: ``compare``'s policies, and those ``compare --peers`` sets against the peers.
COMPARE_POLICIES = "none,io_shares_paper,free_market,io_shares,latency_target"
PEERS_AGAINST = "free_market,io_shares,latency_target"


def cmd_compare(args):
    from resex_libvirt.sim import scenario as scenario_mod
    names = args.scenario or [n for n in scenario_mod.names() if not n.startswith("paper_")]
    policies = (args.policies or (PEERS_AGAINST if args.peers else COMPARE_POLICIES)).split(",")
    known = policy_catalog.names()
    for policy in policies:
        if policy not in known:
            raise exceptions.ConfigError("unknown policy %r; known: %s"
                                         % (policy, ", ".join(known)))

    def progress(msg):
        print("  ran " + msg, file=sys.stderr, flush=True)
    if args.peers:
        if args.policy_arg:
            raise exceptions.ConfigError("--policy-arg is not for --peers: the peers and the "
                                         "project's policies run with their defaults")
        from resex_research.peers import compare
        if args.out:
            _prepare_out(args.out)
        return compare.cmd(args, [p for p in policies if p != "none"],
                           None if args.json else progress)
    rows = compare_rows(names, policies, args.duration, None if args.json else progress,
                        dict(args.policy_arg or ()))
    if args.json:
        print(json.dumps(rows, indent=1, sort_keys=True))
    else:
        print(format_compare(rows))
    return 0


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a whole number: %r" % (text,)) from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1, got %d" % value)
    return value


def cmd_paper(args):
    from resex_research import paper

    def progress(msg):
        print("  ran " + msg, file=sys.stderr, flush=True)
    started = time.monotonic()
    ev = paper.Evaluation(duration_s=args.duration, frontier=not args.no_frontier,
                          progress=None if args.json else progress, jobs=args.jobs)
    data = ev.evaluate()
    data["wall_s"] = time.monotonic() - started
    if args.json:
        print(json.dumps({"runs": data["runs"]}, indent=1, sort_keys=True))
    else:
        print(paper.format_tables(data))
        print("\n" + paper.format_run_count(ev, data["wall_s"]))
    if args.out:
        _prepare_out(args.out)
        run_output.write_json(os.path.join(args.out, "paper.json"), data)
        paper.write_plots(data, ev, args.out)
        if not args.json:
            print("wrote paper.json and fig5_7.png, fig6.png, fig8.png, fig9.png%s to %s"
                  % ("" if args.no_frontier else ", frontier.png", args.out))
    return 0


def cmd_calibrate(args):
    from resex_research import calibration
    data = calibration.measure(duration_s=args.duration)
    if args.json:
        print(json.dumps(data, indent=1, sort_keys=True))
    else:
        print(calibration.format_table(data))
    return 0


def build_parser():
    parser = argparse.ArgumentParser(
        prog="resex-sim", description="Run the ResEx market on the simulated testbed.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the packaged scenarios")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="run one scenario under one policy")
    p.add_argument("scenario", help="packaged scenario name or TOML file")
    p.add_argument("--policy", required=True, choices=policy_catalog.names(),
                   help="an installed policy, or a peer (%s)" % ", ".join(peers.NAMES))
    p.add_argument("--policy-arg", action="append", type=_policy_arg, metavar="KEY=VALUE",
                   help="a policy parameter, e.g. decay_half_life=0.2 (repeatable)")
    p.add_argument("--duration", type=float, help="override the run length (s)")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--json", action="store_true",
                   help="print JSON instead of tables (with the per-epoch timeline)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also print the per-epoch timeline: cap, rate, interference, "
                        "balance and reason per VM")
    p.add_argument("--out", metavar="DIR", help="write JSON (with time series) and a plot")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("paper", help="reproduce the paper's evaluation (Figs. 5-9)")
    p.add_argument("--duration", type=float,
                   help="override every run's length (s); default: the scenarios' own")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--out", metavar="DIR", help="write paper.json and the figures as PNG")
    p.add_argument("--no-frontier", action="store_true",
                   help="skip the static-cap frontier sweep (the paper's figures only)")
    p.add_argument("--jobs", type=_positive_int, default=os.cpu_count() or 1,
                   help="runs made at once, in worker processes (default: one per CPU); "
                        "the tables are the same whatever the number")
    p.set_defaults(func=cmd_paper)

    p = sub.add_parser("compare", help="several scenarios under several policies: "
                                       "each SLA VM against its SLA")
    p.add_argument("scenario", nargs="*",
                   help="scenario names or files (default: every packaged scenario "
                        "beyond the paper's; with --peers, every packaged scenario)")
    p.add_argument("--policies",
                   help="comma-separated policy names (default: %s; with --peers, the "
                        "project's policies set against the peers: %s)"
                        % (COMPARE_POLICIES, PEERS_AGAINST))
    p.add_argument("--peers", action="store_true",
                   help="also run uncontrolled, at the static-cap frontier and under the "
                        "peers (%s): one table with the time to protect and the cap swing"
                        % ", ".join(peers.NAMES))
    p.add_argument("--jobs", type=_positive_int, default=os.cpu_count() or 1,
                   help="with --peers: runs made at once, in worker processes (default: "
                        "one per CPU); the tables are the same whatever the number")
    p.add_argument("--policy-arg", action="append", type=_policy_arg, metavar="KEY=VALUE",
                   help="without --peers: a parameter of every policy but none, e.g. "
                        "target=0.8 (repeatable)")
    p.add_argument("--statistic", default="mean,p99",
                   help="with --peers: the SLA statistics compared, comma-separated: the mean "
                        "(every policy), and p99 (the p99 static-cap frontier and the "
                        "project's policies on a p99 SLA) (default: %(default)s)")
    p.add_argument("--out", metavar="DIR",
                   help="with --peers: write peers.json and a plot per scenario family")
    p.add_argument("--duration", type=float, help="override every run's length (s)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("calibrate", help="print the model's calibration figures")
    p.add_argument("--duration", type=float, default=5.0, help="length of each run (s)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=cmd_calibrate)

    from resex_research.cluster import cluster_command
    cluster_command.add_parser(sub)
    from resex_research import frontier
    frontier.add_parser(sub)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except exceptions.ResexError as exc:
        print("resex-sim: error: %s" % exc, file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
