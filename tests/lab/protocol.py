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

"""The lab's judging protocol: ``python -m tests.lab.protocol --transport tcp|rdma``.

One command per transport that runs the lab so that its table can judge a
policy against the simplest alternative, a static cap set by hand
(``doc/source/lab.rst``, "The judging protocol"):

* it refuses to start when the host's 1-minute load is above ``--max-load``
  (``--force`` runs anyway and marks every round loud) and records the load
  at the start of each round;
* the guests' vCPUs and emulator threads are pinned (libvirt ``pinVcpu`` and
  ``pinEmulator`` on the lab's domains): the sensitive tenant and its server
  on the first host CPU, the interferer on the second, so that the
  interfered run's excess over the base is the link's and not the CPU's;
* each round runs the base (the interferer silent), the static sweep
  (``--sweep``), the uncontrolled interferer, the policies and the peers,
  interleaved, ``--seconds`` each with the interferer continuous;
* rounds whose base mean drifts from the first round's by more than a third
  of ``--threshold`` are dropped and counted;
* the SLA is the tightest threshold some static cap meets in every kept
  round with ``--margin`` points to spare (:func:`choose_sla`); none within
  ``--threshold``, or an interferer that does not break it: "infeasible",
  nothing judged, and what would make it feasible;
* per configuration, the median over the kept rounds and its spread
  (min-max) of: the mean and p99 against the SLA, the interferer's
  throughput as a share of the best static cap that meets the SLA, the cap
  swing in the second half of the run and the time to protect (on the
  shortest window in which the base and the best static cap meet the SLA
  throughout, :func:`protect_window`).

Everything from the runs' records on (dropping, choosing, judging,
formatting) is pure functions on plain dicts, tested on synthetic records in
``tests/unit/lab_protocol``. A record of one run::

    {"name", "kind": "base" | "static" | "interfered" | "policy" | "peer",
     "cap_pct" (static), "mean_us", "p99_us", "mbit_s",
     "series": [(second, n, mean_us, p99_us)] (1 s windows) or None,
     "offset_s": seconds the interferer had been sending at the series' 0,
     "caps": [the interferer's polled cap, % (None: uncapped)]}

and of one round: ``{"round", "load", "loud", "runs": {name: record}}``.
"""

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time

from tests.lab import sidebyside

LOG = logging.getLogger(__name__)

#: The static caps of the sweep by default, % of a pCPU.
SWEEP = (20, 10, 7, 5, 4, 3, 2, 1)
POLICIES = ("io_shares", "latency_target")
PEERS = ("koordinator_suppress", "crane_throttle", "ewma_step")


# -- the machine ---------------------------------------------------------------------

def load_bound(cores, per_core=0.5):
    """The highest 1-minute load at which the host counts as quiet (1.0 on 2 cores)."""
    return per_core * max(1, cores)


def is_quiet(load, bound):
    return load <= bound


def read_load():
    """The host's 1-minute load average."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# -- rounds --------------------------------------------------------------------------

def drift_filter(rounds, threshold_pct):
    """``(kept, dropped)``: rounds whose base mean is within a third of the threshold.

    The reference is the first round's base; a round is dropped when its base
    mean differs from it by more than ``threshold_pct / 3`` percent of it (a
    base that moves that much moves the SLA by a third of its room). The
    first round is always kept.
    """
    if not rounds:
        return [], []
    ref = rounds[0]["runs"]["base"]["mean_us"]
    bound = ref * threshold_pct / 300.0
    kept, dropped = [rounds[0]], []
    for rnd in rounds[1:]:
        if abs(rnd["runs"]["base"]["mean_us"] - ref) > bound:
            dropped.append(rnd)
        else:
            kept.append(rnd)
    return kept, dropped


def excess_pct(rec, base):
    """The run's mean above its round's base mean, % of that base."""
    return 100.0 * (rec["mean_us"] / base["mean_us"] - 1.0)


def static_names(rounds):
    """The static configurations' names present in every round, in sweep order."""
    if not rounds:
        return []
    names = [n for n, r in rounds[0]["runs"].items() if r["kind"] == "static"]
    return [n for n in names if all(n in rnd["runs"] for rnd in rounds)]


def choose_sla(rounds, margin_pct, max_threshold_pct, need_interference=True):
    """The SLA threshold the sweep can meet, or why not: a dict.

    Per static cap, its need is the largest excess of its mean over the
    round's base among ``rounds`` (so it met every round at that
    threshold). The threshold is the smallest need plus ``margin_pct``
    points. Feasible when that is at most ``max_threshold_pct`` and the
    uncontrolled interferer's median excess is above it (else there is
    nothing to protect; not asked when ``need_interference`` is false, as
    before the interfered run of the first round). ``{"feasible",
    "threshold_pct", "needs": {name:
    need}, "interfered_excess_pct", "reason"}``.
    """
    needs = {}
    for name in static_names(rounds):
        needs[name] = max(max(0.0, excess_pct(rnd["runs"][name], rnd["runs"]["base"]))
                          for rnd in rounds)
    intf = [excess_pct(rnd["runs"]["interfered"], rnd["runs"]["base"])
            for rnd in rounds if "interfered" in rnd["runs"]]
    out = {"needs": needs, "feasible": False, "threshold_pct": None,
           "interfered_excess_pct": statistics.median(intf) if intf else None,
           "reason": None}
    if not needs:
        out["reason"] = "no static cap was run"
        return out
    threshold = min(needs.values()) + margin_pct
    if threshold > max_threshold_pct:
        out["reason"] = ("no static cap keeps the mean within %g%% of the base (%g%% less "
                         "%g points of margin) in every round (best: %.1f%%)"
                         % (max_threshold_pct - margin_pct, max_threshold_pct, margin_pct,
                            min(needs.values())))
        return out
    if need_interference and (out["interfered_excess_pct"] is None
                              or out["interfered_excess_pct"] <= threshold):
        out["reason"] = ("the uncontrolled interferer does not break a %.1f%% threshold: "
                         "nothing to protect" % threshold)
        return out
    out.update(feasible=True, threshold_pct=threshold)
    return out


def meets(rec, base, threshold_pct):
    """The run's mean within ``threshold_pct`` of its round's base."""
    return excess_pct(rec, base) <= threshold_pct


def best_static(rounds, threshold_pct):
    """The static cap with the highest median throughput that meets the SLA in every round.

    ``(name, median Mbit/s)``, or ``(None, None)`` when none meets it.
    """
    best = (None, None)
    for name in static_names(rounds):
        if not all(meets(rnd["runs"][name], rnd["runs"]["base"], threshold_pct)
                   for rnd in rounds):
            continue
        mbit = statistics.median(rnd["runs"][name]["mbit_s"] for rnd in rounds)
        if best[1] is None or mbit > best[1]:
            best = (name, mbit)
    return best


# -- per-run measures ----------------------------------------------------------------

def time_to_protect(series, limit_us, offset_s=0.0, window_s=1):
    """Seconds from the interferer's start after which every ``window_s`` window meets the limit.

    ``series`` is ``[(second, n, mean_us, p99_us)]`` from the series' start,
    ``offset_s`` seconds after the interferer's; windows without requests
    are skipped; a window of ``window_s`` seconds is the request-weighted
    mean of that many consecutive 1 s windows (the first ones: as many as
    there are). None when the last window misses the limit (never
    protected) or there is no window.
    """
    windows = [w for w in series or () if w[1]]
    first = None
    for i, w in enumerate(windows):
        if trailing_mean(windows, i, window_s) > limit_us:
            first = None
        elif first is None:
            first = w[0]
    return None if first is None else first + offset_s


def trailing_mean(windows, i, window_s):
    """The request-weighted mean of ``windows[i]`` and up to ``window_s - 1`` before it."""
    seg = windows[max(0, i - window_s + 1):i + 1]
    return sum(x[1] * x[2] for x in seg) / sum(x[1] for x in seg)


#: The windows (s) the time to protect may be judged on, shortest first.
PROTECT_WINDOWS = (1, 2, 3, 5, 10, 20, 30)


def protect_window(rounds, threshold_pct, best):
    """The shortest of :data:`PROTECT_WINDOWS` on which the SLA can be judged second by second.

    A victim with few requests a second has 1 s windows noisier than the
    SLA's margin: even the base run misses it now and then, and "every
    window meets the SLA from then on" would never hold. The window is the
    shortest on which the base and the best static cap (``best``: it meets
    the SLA on the run's mean) meet it in every window of every round, from
    the first. ``(seconds, True)``, or ``(longest, False)`` when none does.
    """
    factor = 1.0 + threshold_pct / 100.0
    names = ["base"] + ([best] if best else [])
    for w in PROTECT_WINDOWS:
        ok = True
        for rnd in rounds:
            limit = rnd["runs"]["base"]["mean_us"] * factor
            for name in names:
                series = [x for x in rnd["runs"][name].get("series") or () if x[1]]
                if series and time_to_protect(series, limit, 0.0, w) != series[0][0]:
                    ok = False
        if ok:
            return w, True
    return PROTECT_WINDOWS[-1], False


def spread(values):
    """``(median, min, max, missing)`` of the values that are not None."""
    vals = [v for v in values if v is not None]
    missing = len(values) - len(vals)
    if not vals:
        return None, None, None, missing
    return statistics.median(vals), min(vals), max(vals), missing


def judge(rounds, threshold_pct):
    """Per configuration, the medians and spreads over ``rounds`` (feasible SLA only).

    The SLA of each round is its own base mean times ``1 + threshold_pct``
    (the p99 limit: its base p99 times the same); the throughput share is
    the run's Mbit/s over the best static cap's (:func:`best_static`) in the
    same round. ``{"best_static", "best_static_mbit_s", "rows": [...]}``.
    """
    best, best_mbit = best_static(rounds, threshold_pct)
    window, settles = protect_window(rounds, threshold_pct, best)
    factor = 1.0 + threshold_pct / 100.0
    names = [n for n, r in rounds[0]["runs"].items() if r["kind"] != "onoff"
             and all(n in rnd["runs"] for rnd in rounds)]
    rows = []
    for name in names:
        mean_x, p99_x, share, swings, protect = [], [], [], [], []
        for rnd in rounds:
            rec, base = rnd["runs"][name], rnd["runs"]["base"]
            mean_x.append(rec["mean_us"] / (base["mean_us"] * factor))
            p99_x.append(rec["p99_us"] / (base["p99_us"] * factor))
            ref = rnd["runs"][best]["mbit_s"] if best else None
            share.append(100.0 * rec["mbit_s"] / ref if ref else None)
            swings.append(sidebyside.swing(rec["caps"]) if rec.get("caps") else None)
            protect.append(time_to_protect(rec.get("series"), base["mean_us"] * factor,
                                           rec.get("offset_s", 0.0), window)
                           if rec["kind"] in ("interfered", "policy", "peer") else None)
        kind = rounds[0]["runs"][name]["kind"]
        rows.append({
            "name": name, "kind": kind,
            "meets_all": all(m <= 1.0 for m in mean_x),
            "mean_x": spread(mean_x), "p99_x": spread(p99_x),
            "share_pct": spread(share) if kind != "base" else spread([None] * len(rounds)),
            "swing": spread(swings),
            "protect_s": spread(protect),
            "protect_never": (sum(1 for p in protect if p is None)
                              if kind in ("interfered", "policy", "peer") else 0),
        })
    return {"best_static": best, "best_static_mbit_s": best_mbit, "rows": rows,
            "protect_window_s": window, "protect_window_settles": settles}


# -- on/off phases ---------------------------------------------------------------------

def on_phase_within(series, phases, limit_us, grace_s, window_s=1):
    """% of the on-phases' seconds within ``limit_us``, ``grace_s`` after each start.

    ``phases`` is ``[(on_start, off_start)]`` in the series' seconds; a 1 s
    window counts for the phase it starts in, from ``on_start + grace_s``
    on; windows without requests are skipped. Each second is judged on the
    request-weighted mean of the last ``window_s`` such windows of its phase
    (as many as there are: :func:`protect_window`'s window, on which the
    base meets the SLA throughout). None when no window counts.
    """
    judged = []
    for on, off in phases:
        inside = [w for w in series or () if w[1] and on + grace_s <= w[0] < off]
        judged += [trailing_mean(inside, i, window_s) <= limit_us for i in range(len(inside))]
    if not judged:
        return None
    return 100.0 * sum(judged) / len(judged)


def release_times(cap_times, caps, phases, release_pct):
    """Per off-phase, seconds from the victim going idle to the interferer's cap released.

    Released: uncapped (None) or at ``release_pct`` or more, at a poll in the
    off-phase (before the next on-phase). None for a phase in which it never
    was; off-phases that start after the last poll are left out.
    """
    out = []
    polls = list(zip(cap_times, caps))
    if not polls:
        return out
    for i, (_on, off) in enumerate(phases):
        if off > polls[-1][0]:
            continue
        end = phases[i + 1][0] if i + 1 < len(phases) else float("inf")
        hit = next((t for t, c in polls if off <= t < end
                    and (c is None or c >= release_pct)), None)
        out.append(None if hit is None else hit - off)
    return out


def judge_onoff(rounds, threshold_pct, grace_s, release_pct, window_s=1):
    """The on/off runs against the best static cap: one row per on/off configuration.

    Per round: the interferer's throughput over the best static cap's, the
    % of on-phase seconds within the SLA after ``grace_s`` into each on-phase
    (:func:`on_phase_within`, on ``window_s`` windows), the same for the best
    static cap's run over the same seconds (its victim runs throughout) and
    the median release time of its off-phases (:func:`release_times`); then
    medians and spreads over the rounds.
    """
    best, _mbit = best_static(rounds, threshold_pct)
    factor = 1.0 + threshold_pct / 100.0
    rows = []
    names = [n for n, r in rounds[0]["runs"].items() if r["kind"] == "onoff"
             and all(n in rnd["runs"] for rnd in rounds)]
    for name in names:
        ratio, within, static_within, release, never = [], [], [], [], 0
        for rnd in rounds:
            rec, base = rnd["runs"][name], rnd["runs"]["base"]
            ref = rnd["runs"][best]["mbit_s"] if best else None
            ratio.append(rec["mbit_s"] / ref if ref else None)
            phases = rec.get("phases") or []
            limit = base["mean_us"] * factor
            within.append(on_phase_within(rec.get("series"), phases, limit, grace_s, window_s))
            static_within.append(on_phase_within(rnd["runs"][best].get("series"), phases,
                                                 limit, grace_s, window_s) if best else None)
            rel = release_times(rec.get("cap_times") or [], rec.get("caps") or [], phases,
                                release_pct)
            never += sum(1 for r in rel if r is None)
            release.append(spread(rel)[0])
        rows.append({"name": name, "bulk_x": spread(ratio), "within_pct": spread(within),
                     "static_within_pct": spread(static_within),
                     "release_s": spread(release), "release_never": never})
    return rows


def format_onoff(rows, best, grace_s, release_pct, window_s=1):
    lines = ["On/off phases (the victim alternates, the interferer sends throughout) "
             "against the best static cap (%s): bulk throughput as a multiple of it, %% of "
             "on-phase seconds within the SLA from %.1f s into each on-phase (on %d s "
             "windows; the static cap's run over the same seconds beside it), seconds from "
             "the victim going idle to the cap released (>= %g%%):"
             % (best, grace_s, window_s, release_pct),
             "%-22s %20s %22s %22s %22s" % ("configuration", "bulk x best static",
                                            "on-phase s within %", "static within %",
                                            "release s")]
    for r in rows:
        rel = _sp(r["release_s"], "%.1f")
        if r["release_never"]:
            rel += " %d never" % r["release_never"]
        lines.append("%-22s %20s %22s %22s %22s" % (
            r["name"], _sp(r["bulk_x"]), _sp(r["within_pct"], "%.0f"),
            _sp(r.get("static_within_pct", (None, None, None, 0)), "%.0f"), rel))
    return "\n".join(lines)


# -- the report ----------------------------------------------------------------------

def _sp(s, fmt="%.2f"):
    med, lo, hi, _missing = s
    if med is None:
        return "-"
    if lo == hi:
        return fmt % med
    return (fmt + " (" + fmt + "-" + fmt + ")") % (med, lo, hi)


def advice(choice, transport):
    """What would make an infeasible SLA feasible, from the lab's figures."""
    tips = ["a shorter bottleneck queue (--queue-ms): a burst the tbf admits waits behind "
            "the whole queue, whatever the cap",
            "a shorter CFS period at low caps (--cap-period-us): a capped guest sends its "
            "period's quota as one burst",
            "a smaller sender burst (the interferer's message or socket buffer size)"]
    if transport == "rdma":
        tips[2] = "a smaller sender burst (--bulk-size: ib_write_bw's message)"
    return tips


def format_report(rounds, kept, dropped, choice, judged, transport, threshold_pct,
                  margin_pct, pinned):
    """The protocol's printout: rounds and load, feasibility, the table."""
    lines = ["rounds: %d run, %d kept, %d dropped for base drift (> %.1f%% of the first "
             "round's base)" % (len(rounds), len(kept), len(dropped), threshold_pct / 3.0)]
    for rnd in rounds:
        lines.append("  round %d: load %.2f%s, base mean %.0f us%s" % (
            rnd["round"], rnd["load"], " LOUD" if rnd.get("loud") else "",
            rnd["runs"]["base"]["mean_us"], " (dropped: drift)" if rnd in dropped else ""))
    lines.append("CPU: %s" % (
        "sensitive tenant and its server pinned to one host CPU, the interferer to the "
        "other: the interfered run's excess over base is the link's" if pinned else
        "not pinned: the interfered run's excess over base mixes CPU and link"))
    needs = choice["needs"]
    lines.append("static caps' need (largest mean excess over base in the kept rounds): "
                 + ", ".join("%s %.1f%%" % (n, v) for n, v in needs.items()))
    if choice["interfered_excess_pct"] is not None:
        lines.append("uncontrolled interferer: mean excess %.1f%% (median)"
                     % choice["interfered_excess_pct"])
    if not choice["feasible"]:
        lines.append("SLA: infeasible: %s; nothing judged. What would make it feasible:"
                     % choice["reason"])
        lines.extend("  - " + t for t in advice(choice, transport))
        return "\n".join(lines)
    lines.append("SLA: mean within %.1f%% of base (the best static cap's need plus %g points "
                 "of margin); best static cap meeting it in every round: %s, %.2f Mbit/s" % (
                     choice["threshold_pct"], margin_pct, judged["best_static"],
                     judged["best_static_mbit_s"]))
    head = ("configuration", "meets", "mean/SLA", "p99/SLA", "% of best static",
            "swing (2nd half)", "protect s")
    lines.append("%-22s %5s %20s %20s %22s %20s %16s" % head)
    for r in judged["rows"]:
        protect = _sp(r["protect_s"], "%.1f")
        if r["protect_never"]:
            protect += " %d never" % r["protect_never"]
        lines.append("%-22s %5s %20s %20s %22s %20s %16s" % (
            r["name"], "yes" if r["meets_all"] else "NO", _sp(r["mean_x"]), _sp(r["p99_x"]),
            _sp(r["share_pct"], "%.0f"), _sp(r["swing"], "%.1f"), protect))
    lines.append("medians over %d kept rounds, (min-max) when they differ" % len(kept))
    if judged.get("protect_window_s"):
        lines.append(
            "protect: seconds until every %d s window meets the SLA; %s" % (
                judged["protect_window_s"],
                "the shortest window in which the base and the best static cap meet it "
                "throughout" if judged.get("protect_window_settles") else
                "even the base or the best static cap misses it in some window this long"))
    if judged.get("onoff"):
        lines.append(format_onoff(judged["onoff"], judged["best_static"], judged["grace_s"],
                                  judged["release_pct"], judged.get("protect_window_s", 1)))
    return "\n".join(lines)


def evaluate(rounds, threshold_pct, margin_pct, grace_s=6.0, release_pct=50.0):
    """Drop, choose and judge: ``(kept, dropped, choice, judged or None)``."""
    kept, dropped = drift_filter(rounds, threshold_pct)
    choice = choose_sla(kept, margin_pct, threshold_pct)
    judged = None
    if choice["feasible"]:
        judged = judge(kept, choice["threshold_pct"])
        judged.update(onoff=judge_onoff(kept, choice["threshold_pct"], grace_s, release_pct,
                                        judged["protect_window_s"]),
                      grace_s=grace_s, release_pct=release_pct)
    return kept, dropped, choice, judged


# -- records from the lab's results ----------------------------------------------------

def record(name, kind, result, interferer, cap_pct=None, offset_s=0.0):
    """The protocol's record of one lab result (TCP or verbs)."""
    lat = result["latency"]
    polls = [(p["t"], p[interferer]["cap_pct"]) for p in result.get("polls", [])
             if interferer in p]
    return {"name": name, "kind": kind, "cap_pct": cap_pct, "mean_us": lat["mean_us"],
            "p99_us": lat["p99_us"], "n": lat["n"], "mbit_s": result["interferer_mbit_s"],
            "series": [list(w) for w in result.get("latency_series") or []] or None,
            "offset_s": offset_s, "caps": [c for _t, c in polls],
            "cap_times": [t for t, _c in polls], "phases": result.get("phases"),
            "quiesce_s": result.get("quiesce_s"), "drained": result.get("drained", True)}


def pin(names_by_cpu):
    """Pin each domain's vCPUs and emulator to its host CPU: ``{cpu: [domain names]}``."""
    import libvirt
    from tests.lab import harness
    ncpu = os.cpu_count() or 1
    conn = libvirt.open(harness.URI)
    try:
        for cpu, names in names_by_cpu.items():
            cpumap = tuple(i == cpu for i in range(ncpu))
            for name in names:
                dom = conn.lookupByName(name)
                for vcpu in range(dom.maxVcpus()):
                    dom.pinVcpu(vcpu, cpumap)
                dom.pinEmulator(cpumap, libvirt.VIR_DOMAIN_AFFECT_LIVE)
    finally:
        conn.close()


def phased_experiment(**kwargs):
    """A TCP :class:`~tests.lab.experiment.Experiment` whose victim can alternate.

    While its ``on_off`` is ``(on_s, off_s)`` its probe runs ``on_s``
    seconds, then none for ``off_s``, until the run's seconds are over; the
    samples keep the run's clock and ``phases`` (``[(on_start,
    off_start)]``) is added to the probe's output. Else the probe is the
    experiment's own.
    """
    from tests.lab import experiment

    class Phased(experiment.Experiment):
        on_off = None

        def probe(self, seconds, out, report_socket=None):
            if self.on_off is None:
                return super().probe(seconds, out, report_socket)
            on_s, off_s = self.on_off
            t0 = time.monotonic()
            merged = {"samples": [], "phases": [], "reports_sent": 0, "reports_dropped": 0}
            rc, k = 0, 0
            while time.monotonic() - t0 < seconds:
                start = time.monotonic() - t0
                part = "%s.on%d" % (out, k)
                rc = super().probe(min(on_s, seconds - start), part, report_socket) or rc
                with open(part) as f:
                    res = json.load(f)
                merged["samples"] += [(round(t + start, 4), lat) for t, lat in res["samples"]]
                merged["summary"] = res["summary"]
                merged["reports_sent"] += res["reports_sent"]
                merged["reports_dropped"] += res["reports_dropped"]
                stop = time.monotonic() - t0
                merged["phases"].append((round(start, 3), round(stop, 3)))
                time.sleep(max(0.0, min(off_s, seconds - stop)))
                k += 1
            with open(out, "w") as f:
                json.dump(merged, f)
            return rc

    return Phased(**kwargs)


class TcpLab:
    """The TCP experiment (:class:`tests.lab.experiment.Experiment`) as the protocol runs it."""

    transport = "tcp"

    def __init__(self, args):
        from tests.lab import experiment
        self.x = experiment
        self.args = args
        self.lab = phased_experiment(install=not args.no_install,
                                     period_us=args.cap_period_us, queue_ms=args.queue_ms)

    def setup(self):
        self.lab.setup(threshold_pct=self.args.threshold, wait_s=self.args.wait)
        return {0: [self.x.SENSITIVE], 1: [self.x.INTERFERER]}

    def set_sla(self, sla_us, threshold_pct):
        self.lab.set_sla(sla_us, threshold_pct)

    def base(self):
        r = self.lab.run("base", "none", self.args.seconds, interfere=False,
                         warmup_s=self.args.warmup)
        return record("base", "base", r, self.x.INTERFERER)

    def static(self, cap):
        row = self.lab.sweep([cap], self.args.seconds, warmup_s=self.args.warmup)[0]
        return record("static %g%%" % cap, "static", row, self.x.INTERFERER, cap_pct=cap)

    def policy(self, name, kind, policy):
        if kind == "onoff":
            self.lab.on_off = onoff_of(self.args)
        try:
            r = self.lab.run(name, policy, self.args.seconds, interfere=True,
                             warmup_s=self.args.warmup)
        finally:
            self.lab.on_off = None
        if kind == "onoff":
            with open(os.path.join(os.path.dirname(r["agent_log"]), "probe.json")) as f:
                r["phases"] = json.load(f)["phases"]
        # The sink opens before the agent starts: the interferer sends during the warmup.
        return record(name, kind, r, self.x.INTERFERER, offset_s=self.args.warmup)

    def teardown(self):
        self.lab.teardown()


class VerbsLab:
    """The verbs experiment (:class:`tests.lab.verbs.VerbsLab`) as the protocol runs it."""

    transport = "rdma"

    def __init__(self, args):
        from tests.lab import verbs
        from tests.lab import verbs_experiment
        self.v = verbs
        self.args = args
        rate = verbs_experiment.request_rate(args.size, args.rate_mbit, args.load)
        self.lab = verbs.VerbsLab(rate_mbit=args.rate_mbit, queue_ms=args.queue_ms,
                                  tool="benchex", size=args.size, rate=rate,
                                  bulk_size=args.bulk_size, burst_s=args.burst_s,
                                  install=not args.no_install, period_us=args.cap_period_us)
        self.sla = None

    def setup(self):
        self.lab.setup(threshold_pct=self.args.threshold, wait_s=self.args.wait)
        return {0: [self.v.SERVER, self.v.SENSITIVE], 1: [self.v.INTERFERER]}

    def set_sla(self, sla_us, threshold_pct):
        self.sla = (sla_us, threshold_pct)
        self.lab.set_sla(sla_us, threshold_pct)

    def base(self):
        r = self.lab.run("base", "none", self.args.seconds, interfere=False,
                         warmup_s=self.args.warmup, window_reports=4)
        return record("base", "base", r, self.v.INTERFERER)

    def static(self, cap):
        r = self.lab.static(cap, self.args.seconds, warmup_s=self.args.warmup)
        return record("static %g%%" % cap, "static", r, self.v.INTERFERER, cap_pct=cap)

    def policy(self, name, kind, policy):
        # The gate opens at the series' 0 (measure's t0).
        r = self.lab.run(name, policy, self.args.seconds, interfere=True,
                         warmup_s=self.args.warmup, sla=self.sla, window_reports=4,
                         on_off=onoff_of(self.args) if kind == "onoff" else None)
        return record(name, kind, r, self.v.INTERFERER)

    def teardown(self):
        self.lab.teardown()


def plan(args):
    """One round's configurations after the base: ``[(name, kind, arg)]``, interleaved."""
    caps = [float(c) for c in args.sweep.split(",") if c.strip()]
    out = [("static %g%%" % c, "static", c) for c in caps]
    out.append(("interfered", "interfered", "none"))
    out += [(p, "policy", p) for p in args.policies.split(",") if p]
    out += [(p, "peer", p) for p in args.peers.split(",") if p]
    if onoff_of(args):
        out += [("%s on/off" % p, "onoff", p) for p in args.policies.split(",") if p]
    return out


def onoff_of(args):
    """``(on_s, off_s)`` of ``--onoff``, or None."""
    parts = [float(x) for x in args.onoff.split(",") if x.strip()]
    return tuple(parts) if len(parts) == 2 else None


def run_rounds(lab, args, loud, bound=None):
    """Every round on a lab that is up; the threshold declared after round 1's sweep.

    The agent's SLA is each round's own base mean times ``1 + threshold``, as
    the judge reads it (:func:`judge`): the threshold is chosen once, from
    round 1's sweep, and declared again on every later round's base (a base
    that drifts down by 3 % under a 3 % threshold would otherwise leave the
    agent holding a bound the judge calls a miss). A round is loud when the
    whole run is (``loud``: started with ``--force``) or its own starting
    load is above ``bound``.
    """
    rounds = []
    thr = None
    for i in range(args.rounds):
        load = read_load()
        rnd = {"round": i + 1, "load": load, "runs": {},
               "loud": loud or (bound is not None and not is_quiet(load, bound))}
        rnd["runs"]["base"] = lab.base()
        base_us = rnd["runs"]["base"]["mean_us"]
        print("round %d: load %.2f, base mean %.0f us p99 %.0f us" % (
            i + 1, rnd["load"], base_us, rnd["runs"]["base"]["p99_us"]), flush=True)
        if thr is not None:
            _declare(lab, rnd, base_us, thr, "")
        for name, kind, arg in plan(args):
            if kind != "static" and thr is None:
                # The tightest threshold round 1's sweep meets, with the margin.
                first = choose_sla([rnd], args.margin, args.threshold,
                                   need_interference=False)
                thr = first["threshold_pct"] or args.threshold
                _declare(lab, rnd, base_us, thr, "" if first["feasible"]
                         else " (round 1: %s)" % first["reason"])
            if kind == "static":
                rec = lab.static(arg)
            else:
                rec = lab.policy(name, kind, arg)
            rnd["runs"][name] = rec
            drain = ("" if rec.get("quiesce_s") is None else ", after %.0f s to drain%s" % (
                rec["quiesce_s"], "" if rec["drained"] else " (NOT drained)"))
            print("round %d %s: mean %.0f us p99 %.0f us, interferer %.2f Mbit/s%s" % (
                i + 1, name, rec["mean_us"], rec["p99_us"], rec["mbit_s"], drain), flush=True)
        rounds.append(rnd)
    return rounds


def _declare(lab, rnd, base_us, thr, why):
    """Give the agents the SLA ``base_us x (1 + thr)``; the round records it."""
    lab.set_sla(base_us, thr)
    rnd["declared"] = thr
    rnd["declared_us"] = base_us
    print("declared SLA: base mean %.0f us, threshold %.1f%%%s" % (base_us, thr, why),
          flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m tests.lab.protocol",
                                description="resex-libvirt lab: the judging protocol")
    p.add_argument("--transport", choices=("tcp", "rdma"), default="tcp")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=120.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--sweep", default=",".join("%g" % c for c in SWEEP),
                   help="static caps on the interferer, %% of a pCPU")
    p.add_argument("--policies", default=",".join(POLICIES),
                   help="comma-separated; a policy may carry options: "
                        "io_shares@ceiling_delays=60 (the table names it so)")
    p.add_argument("--peers", default=",".join(PEERS))
    p.add_argument("--threshold", type=float, default=10.0,
                   help="the largest SLA threshold (%%) the protocol may choose; the base "
                        "drift bound is a third of it")
    p.add_argument("--margin", type=float, default=3.0,
                   help="points between the best static cap's need and the chosen threshold")
    p.add_argument("--max-load", type=float, default=None,
                   help="1-minute load above which the host is not quiet (0.5 per core)")
    p.add_argument("--force", action="store_true",
                   help="run on a loud host, every round marked loud")
    p.add_argument("--no-pin", action="store_true", help="leave the vCPUs unpinned")
    p.add_argument("--onoff", default="20,20",
                   help="on,off seconds of the victim in the on/off runs of each policy "
                        "('' = none)")
    p.add_argument("--grace", type=float, default=6.0,
                   help="on/off: seconds into each on-phase before the SLA is judged")
    p.add_argument("--release-pct", type=float, default=50.0,
                   help="on/off: the interferer's cap counts as released at this %% or more")
    p.add_argument("--out", default=None)
    p.add_argument("--wait", type=float, default=900.0)
    p.add_argument("--no-install", action="store_true")
    p.add_argument("--cap-period-us", type=int, default=10000)
    p.add_argument("--queue-ms", type=float, default=None,
                   help="the bottleneck's tbf queue (200 on TCP, 100 on verbs)")
    p.add_argument("--rate-mbit", type=float, default=40.0, help="verbs: bottleneck rate")
    p.add_argument("--size", type=int, default=65536, help="verbs: BenchEx request size")
    p.add_argument("--load", type=float, default=0.25, help="verbs: share the victim offers")
    p.add_argument("--bulk-size", type=int, default=65536, help="verbs: ib_write_bw message")
    p.add_argument("--burst-s", type=int, default=30,
                   help="verbs: seconds per ib_write_bw run (restarts leave gaps)")
    args = p.parse_args(argv)
    if args.queue_ms is None:
        args.queue_ms = 200.0 if args.transport == "tcp" else 100.0
    return args


def main(argv=None):
    args = parse_args(argv)
    from tests.lab import experiment
    from tests.lab import harness
    try:
        for spec in args.policies.split(","):
            if spec:
                experiment.policy_spec(spec)
    except ValueError as exc:
        print("--policies: %s" % exc, file=sys.stderr)
        return 2
    if not harness.is_root():
        print("the lab needs root (libvirtd, cgroups, bridges)", file=sys.stderr)
        return 2
    bound = args.max_load if args.max_load is not None else load_bound(os.cpu_count() or 1)
    load = read_load()
    loud = not is_quiet(load, bound)
    if loud and not args.force:
        print("not quiet: 1-minute load %.2f above %.2f; wait, or --force (rounds marked "
              "loud)" % (load, bound), file=sys.stderr)
        return 3
    experiment.start_process()
    args.out = args.out or tempfile.mkdtemp(prefix="resex-protocol-")
    os.makedirs(args.out, exist_ok=True)
    lab = (TcpLab if args.transport == "tcp" else VerbsLab)(args)
    pinned = False
    try:
        cpus = lab.setup()
        if not args.no_pin and (os.cpu_count() or 1) >= 2:
            pin(cpus)
            pinned = True
        rounds = run_rounds(lab, args, loud, bound)
    finally:
        lab.teardown()
    kept, dropped, choice, judged = evaluate(rounds, args.threshold, args.margin,
                                             args.grace, args.release_pct)
    with open(os.path.join(args.out, "protocol.json"), "w") as f:
        json.dump({"settings": vars(args), "pinned": pinned, "rounds": rounds,
                   "dropped": [r["round"] for r in dropped], "choice": choice,
                   "judged": judged}, f, indent=1, default=str)
    print()
    print("The judging protocol on %s (%d rounds of %g s):" % (
        args.transport, args.rounds, args.seconds))
    print(format_report(rounds, kept, dropped, choice, judged, args.transport,
                        args.threshold, args.margin, pinned))
    print("records: %s" % os.path.join(args.out, "protocol.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
