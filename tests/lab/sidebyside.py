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

"""The lab's peers table: ``resex-sim compare --peers``' columns on real guests.

Both lab experiments (TCP, :mod:`tests.lab.experiment`; verbs,
:mod:`tests.lab.verbs_experiment`) print it after their own tables, and
``python -m tests.lab.sidebyside DIR/results.json`` prints it again from a
finished run. Per configuration:

* ``mean/SLA``: the sensitive guest's mean latency over its SLA (the base
  run's mean; ``MISS``: over ``1 + threshold``), ``p99/SLA`` its p99 over
  the same SLA, printed only;
* ``intf Mbit/s``: the interferer's throughput (TCP: what the host's sink
  received; verbs: ``ib_write_bw``'s goodput), as % of the uncontrolled
  run's (``% unctl``) and of the static-cap frontier's (``% front``);
* **the frontier**: of the static caps the experiment held on the
  interferer (no agent), the most interferer throughput at which the mean
  met the SLA; ``no cap meets`` when none did;
* ``protect s``: from the first latency the agent could see (TCP: the
  probe's start, after the warm-up in which the interferer already sent;
  verbs: the gate's opening) to the first of three one-second windows in a
  row whose mean met the SLA; ``never``;
* ``swing %``: the interferer's cap, max - min over the run's second half.

Then the project's best policy (of :data:`PROJECT`: the most interferer
throughput among those meeting the SLA, else the closest to it) against
each peer, with the simulator's rules (:mod:`resex_research.peers.compare`:
a tie within 2 %), and every case where a peer matched or beat it.
"""

import argparse
import json
import sys

#: The project's policies; the peers; the paper's variants (shown, in neither group).
PROJECT = ("free_market", "io_shares", "latency_target")
PEERS = ("koordinator_suppress", "crane_throttle", "ewma_step")
#: Within this much, two throughputs (or two latency ratios) are a tie.
TIE = 0.02


def sla_restored(series, sla_us, threshold_pct, consecutive=3):
    """Seconds from the start of ``series`` until ``consecutive`` windows in a row meet the SLA.

    ``series`` is ``[(second, n, mean_us, p99_us)]``; a window meets the SLA
    when its mean is within ``threshold_pct`` of ``sla_us``; the time is the
    first of those windows'. None if never.
    """
    limit = sla_us * (1.0 + threshold_pct / 100.0)
    run = 0
    for i, (t, _n, mean_us, _p99) in enumerate(series):
        run = run + 1 if mean_us <= limit else 0
        if run >= consecutive:
            return series[i - consecutive + 1][0]
    return None


def swing(caps, settle_fraction=0.5):
    """Max minus min of polled caps (None: uncapped, 100) after ``settle_fraction`` of them."""
    late = [100.0 if c is None else c for c in caps[int(len(caps) * settle_fraction):]]
    return (max(late) - min(late)) if late else None


def tcp_rows(summary):
    """The table's inputs from the TCP experiment's ``results.json`` (a dict)."""
    thr = summary["settings"]["threshold"]
    rows = []
    for r in summary["runs"]:
        if r["name"] == "base":
            continue
        rows.append({"name": "none" if r["name"] == "interfered" else r["name"],
                     "kind": "uncontrolled" if r["name"] == "interfered" else "policy",
                     "mean_us": r["latency"]["mean_us"], "p99_us": r["latency"]["p99_us"],
                     "mbit_s": r["interferer_mbit_s"],
                     "protect_s": sla_restored(r["latency_series"], summary["sla_us"], thr),
                     "swing_pct": r.get("cap_swing_pct")})
    for s in summary["sweep"]:
        rows.append({"name": "static", "kind": "static",
                     "cap_pct": 100.0 if s["cap_pct"] is None else s["cap_pct"],
                     "mean_us": s["latency"]["mean_us"], "p99_us": s["latency"]["p99_us"],
                     "mbit_s": s["interferer_mbit_s"]})
    return rows


def verbs_rows(size_report):
    """The table's inputs from one size of the verbs experiment's ``results.json``."""
    rows = []
    for r in size_report["rows"]:
        if r["kind"] == "base" or r["mean_us"] is None:
            continue
        row = {"name": "none" if r["kind"] == "interfered" else r["name"],
               "kind": "uncontrolled" if r["kind"] == "interfered" else r["kind"],
               "mean_us": r["mean_us"], "p99_us": r["p99_us"],
               "mbit_s": r["goodput_mbit_s"] or 0.0,
               "protect_s": r["sla_restored_s"], "never": r["sla_never_restored"],
               "rounds": r["rounds"], "swing_pct": r["swing_pct"]}
        if r["kind"] == "static":
            row["cap_pct"] = r["cap_mean_pct"]
            row["name"] = r["name"]
        rows.append(row)
    return rows


def table(rows, sla_us, threshold_pct):
    """The measured rows against the SLA, the uncontrolled run and the frontier."""
    bound = sla_us * (1.0 + threshold_pct / 100.0)
    none = next((r for r in rows if r["kind"] == "uncontrolled"), None)
    meeting = [r for r in rows if r["kind"] == "static" and r["mean_us"] <= bound]
    front = max(meeting, key=lambda r: r["mbit_s"]) if meeting else None
    out = []
    for r in rows:
        if r["kind"] == "static":
            continue
        rec = dict(r)
        rec["meets"] = r["mean_us"] <= bound
        rec["mean_vs_sla"] = r["mean_us"] / sla_us
        rec["p99_vs_sla"] = r["p99_us"] / sla_us
        rec["pct_uncontrolled"] = (100.0 * r["mbit_s"] / none["mbit_s"]
                                   if none and none["mbit_s"] > 0 else None)
        rec["pct_frontier"] = (100.0 * r["mbit_s"] / front["mbit_s"]
                               if front and front["mbit_s"] > 0 else None)
        out.append(rec)
    return {"sla_us": sla_us, "threshold_pct": threshold_pct, "bound_us": bound,
            "frontier": None if front is None else {
                "cap_pct": front["cap_pct"], "name": front["name"], "mbit_s": front["mbit_s"],
                "mean_vs_sla": front["mean_us"] / sla_us, "p99_vs_sla": front["p99_us"] / sla_us,
                "pct_uncontrolled": (100.0 * front["mbit_s"] / none["mbit_s"]
                                     if none and none["mbit_s"] > 0 else None)},
            "statics": len([r for r in rows if r["kind"] == "static"]),
            "rows": out}


def rank(row):
    """Sort key of "better": meeting the SLA, then more throughput, else closer to it."""
    return (1, row["mbit_s"]) if row["meets"] else (0, -row["mean_vs_sla"])


def versus(mine, peer):
    """``(who, on)``: ``project``, ``peer`` or ``tie`` on SLA, throughput or latency."""
    if mine["meets"] != peer["meets"]:
        return ("project" if mine["meets"] else "peer"), "SLA"
    if mine["meets"]:
        a, b = mine["mbit_s"], peer["mbit_s"]
        if abs(a - b) <= TIE * max(a, b, 1e-9):
            return "tie", "throughput"
        return ("project" if a > b else "peer"), "throughput"
    a, b = mine["mean_vs_sla"], peer["mean_vs_sla"]
    if abs(a - b) <= TIE * max(a, b):
        return "tie", "latency"
    return ("project" if a < b else "peer"), "latency"


def faster(mine, peer):
    """``project``, ``peer`` or ``tie``: who protected first (never is last); None: neither."""
    a, b = mine.get("protect_s"), peer.get("protect_s")
    if a is None and b is None:
        return None
    a = float("inf") if a is None else a
    b = float("inf") if b is None else b
    return "tie" if a == b else ("project" if a < b else "peer")


def verdicts(data):
    """The project's best policy against each peer that ran."""
    by = {r["name"]: r for r in data["rows"]}
    mine = [by[n] for n in PROJECT if n in by]
    if not mine:
        return []
    best = max(mine, key=rank)
    out = []
    for name in PEERS:
        if name in by:
            who, on = versus(best, by[name])
            out.append({"peer": name, "project": best["name"], "winner": who, "on": on,
                        "faster": faster(best, by[name])})
    return out


def _f(value, fmt):
    return "-" if value is None else fmt % value


def _protect(r):
    if r.get("rounds", 1) > 1 and r.get("never"):
        return "%s(%d never)" % (_f(r["protect_s"], "%.1f"), r["never"])
    return "never" if r.get("protect_s") is None else "%.1f" % r["protect_s"]


def format_table(data):
    """The rows, the frontier's among them, as ``resex-sim compare --peers`` prints them."""
    fmt = "%-23s %13s %8s %11s %7s %7s %9s %7s"
    lines = [fmt % ("policy", "mean/SLA", "p99/SLA", "intf Mbit/s", "% unctl", "% front",
                    "protect s", "swing %")]
    rows = list(data["rows"])
    front = data["frontier"]
    for r in rows:
        lines.append(fmt % (
            r["name"], "%.3fx%s" % (r["mean_vs_sla"], "" if r["meets"] else " MISS"),
            "%.2fx" % r["p99_vs_sla"], "%.2f" % r["mbit_s"], _f(r["pct_uncontrolled"], "%.0f"),
            _f(r["pct_frontier"], "%.0f"), _protect(r), _f(r.get("swing_pct"), "%.0f")))
        if r["kind"] == "uncontrolled":
            if front is None:
                lines.append(fmt % (("frontier (no cap meets)",) + ("-",) * 7))
            else:
                lines.append(fmt % (
                    "frontier (cap %g%%)" % front["cap_pct"], "%.3fx" % front["mean_vs_sla"],
                    "%.2fx" % front["p99_vs_sla"], "%.2f" % front["mbit_s"],
                    _f(front["pct_uncontrolled"], "%.0f"), "100", "-", "0"))
    lines.append("SLA: mean <= %.0f us (%.0f us + %g%%); frontier over %d static caps"
                 % (data["bound_us"], data["sla_us"], data["threshold_pct"], data["statics"]))
    return "\n".join(lines)


def format_verdicts(data):
    """The project's best against each peer, and each case a peer matched or beat it."""
    vs = verdicts(data)
    if not vs:
        return "no policy of the project and no peer in this run: no verdict"
    lines = ["The project's best policy against each peer (tie: within %d%%):"
             % round(100 * TIE)]
    for v in vs:
        lines.append("  %-20s vs %-15s better: %-7s on %-10s protects first: %s" % (
            v["peer"], v["project"], v["winner"], v["on"], v["faster"] or "neither"))
    matched = [v for v in vs if v["winner"] in ("peer", "tie")]
    quicker = [v for v in vs if v["faster"] in ("peer", "tie")]
    lines.append("  a peer matched or beat the project: %s" % (
        "; ".join("%s (%s on %s)" % (v["peer"], "beat" if v["winner"] == "peer" else "tie",
                                     v["on"]) for v in matched) or "none"))
    lines.append("  a peer protected as fast or faster: %s" % (
        "; ".join("%s (%s)" % (v["peer"], v["faster"]) for v in quicker) or "none"))
    return "\n".join(lines)


def format_all(data, title):
    return "\n".join([title, format_table(data), format_verdicts(data)])


def from_results(summary):
    """``[(title, data)]`` of a ``results.json``: one for TCP, one per size for verbs."""
    if "sizes" in summary:
        out = []
        for size, rep in sorted(summary["sizes"].items(), key=lambda kv: int(kv[0])):
            if rep.get("sla") is None:
                continue
            sla_us, thr = rep["sla"]
            out.append(("Peers side by side, RDMA verbs, %s-byte requests (medians of %d "
                        "rounds of %g s):" % (size, summary["settings"]["rounds"],
                                              summary["settings"]["seconds"]),
                        table(verbs_rows(rep), sla_us, thr)))
        return out
    return [("Peers side by side, TCP (%g s runs, static caps %g s each):" % (
        summary["settings"]["seconds"], summary["settings"]["sweep_seconds"]),
        table(tcp_rows(summary), summary["sla_us"], summary["settings"]["threshold"]))]


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tests.lab.sidebyside",
        description="the peers table of a finished lab experiment (TCP or verbs)")
    parser.add_argument("results", help="the experiment's results.json")
    args = parser.parse_args(argv)
    with open(args.results) as f:
        summary = json.load(f)
    for title, data in from_results(summary):
        print(format_all(data, title))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
