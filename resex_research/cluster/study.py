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

"""The fleet study: every configuration of a scenario on the same demand, one table.

:func:`run` calibrates (or loads) the host surrogate, generates the day's
requests once, and runs each configuration on them
(:func:`resex_research.cluster.fleet.run`), each with its own board.
:func:`format_table` prints one row per configuration; :func:`goals`
compares the configuration named ``e`` (placement and market) with ``a``
(nova's defaults), ``b`` (nova's IoOps pair) and ``f`` (cortex-like CPU
weighers, :mod:`.cortex`) against the study's goals,
which are printed, never asserted. When a configuration runs
``resex-placement-sync`` (:mod:`.trait_sync`), :func:`trait_rows` adds the
comparison of Placement's candidate limit: refusals, violations and what
the service cost.
"""

import os
import tempfile
import time
import urllib.parse

from resex_libvirt import exceptions
from resex_libvirt.sim import run_output
from resex_research.cluster import demand
from resex_research.cluster import fleet
from resex_research.cluster import surrogate as surrogate_mod
from resex_research import plots

COLUMNS = ["config", "host policy", "viol-s total", "viol-s/VM p50", "p99",
           "inflation % p50", "p99", "NoValidHost", "failed evac", "hosts in use",
           "bulk TB", "wall s"]

TRAIT_COLUMNS = ["config", "traits", "NoValidHost", "sensitive", "sensitive placed",
                 "viol-s total", "viol-s/VM p99", "closed peak", "trait sets", "clears",
                 "Placement calls", "calls/min", "peak/min", "trait lag s p50", "p99", "max"]


def board_url_for(base, scenario, config, tmpdir):
    """The board of one configuration's run: its own SQLite file or etcd prefix."""
    if base is None or base == "sqlite":
        return "sqlite://" + os.path.join(tmpdir, "board-%s.sqlite" % config)
    parts = urllib.parse.urlsplit(base)
    if parts.scheme.startswith("etcd3"):
        query = dict(urllib.parse.parse_qsl(parts.query))
        prefix = query.get("prefix", "/resex-fleet/")
        query["prefix"] = "%s%s-%d-%d/%s/" % (prefix, scenario.name, os.getpid(),
                                              int(time.time()), config)
        return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
    if parts.scheme == "sqlite":
        path = parts.path.rstrip("/")
        return "sqlite://%s-%s.sqlite" % (path[:-7] if path.endswith(".sqlite") else path,
                                          config)
    raise exceptions.ConfigError("--board must be sqlite, sqlite:///path or an etcd3+http URL, "
                                 "got %r" % base)


def run(scenario, configurations=None, board=None, cache_dir=None, progress=None,
        refresh_calibration=False):
    """Run the study; a dict with the calibration, the requests and every result."""
    from resex_libvirt.board import reader as reader_mod
    started = time.monotonic()
    configs = [scenario.configuration(n) for n in configurations] if configurations \
        else list(scenario.configurations)
    policies = sorted({c.host_policy for c in configs})
    sur = surrogate_mod.load_or_calibrate(scenario.model, policies, cache_dir=cache_dir,
                                          progress=progress, refresh=refresh_calibration)
    requests = demand.generate(scenario)
    results = []
    with tempfile.TemporaryDirectory(prefix="resex-fleet-") as tmp:
        try:
            for c in configs:
                url = board_url_for(board, scenario, c.name, tmp)
                r = fleet.run(scenario, c, requests, sur, url,
                              board_opts={"ttl": 0} if url.startswith("sqlite") else None,
                              progress=progress)
                results.append(r)
                if progress is not None:
                    progress("configuration %s done in %.1f s" % (c.name, r.wall_s))
        finally:
            reader_mod.stop_all()
    return {"scenario": scenario.name, "seed": scenario.seed, "hosts": scenario.hosts,
            "duration_s": scenario.duration_s, "requests": len(requests),
            "calibration": {"path": sur.path, "wall_s": sur.data.get("wall_s")},
            "board": board or "sqlite",
            "results": results, "wall_s": time.monotonic() - started}


def rows(results):
    out = []
    for r in results:
        out.append([r.configuration, r.host_policy, "%.0f" % r.violation_s_total,
                    "%.0f" % r.violation_s_p50, "%.0f" % r.violation_s_p99,
                    "%.1f" % r.inflation_p50, "%.1f" % r.inflation_p99,
                    "%d" % r.no_valid_host, "%d/%d" % (r.failed_evacuations, r.evacuations),
                    "%.1f" % r.hosts_in_use_mean, "%.2f" % r.bulk_tb, "%.0f" % r.wall_s])
    return out


def trait_rows(results):
    """One row per configuration: refusals, violations and the service's calls and lags."""
    out = []
    for r in results:
        row = [r.configuration, "yes" if r.placement_sync else "no", "%d" % r.no_valid_host,
               "%d" % r.no_valid_host_sensitive, "%d" % r.sensitive_placed,
               "%.0f" % r.violation_s_total, "%.0f" % r.violation_s_p99]
        s = r.sync
        if s is None:
            row += ["-"] * (len(TRAIT_COLUMNS) - len(row))
        else:
            row += ["%d" % s["closed_peak"], "%d" % s["set"], "%d" % s["cleared"],
                    "%d" % s["calls"], "%.1f" % s["calls_per_min_mean"],
                    "%d" % s["calls_per_min_peak"], "%.1f" % s["lag_s_p50"],
                    "%.1f" % s["lag_s_p99"], "%.1f" % s["lag_s_max"]]
        out.append(row)
    return out


def trait_table(results):
    """The candidate-limit comparison, when a configuration keeps the traits; else []."""
    if not any(r.placement_sync for r in results):
        return []
    limit = max(r.candidate_limit for r in results)
    lines = ["", run_output.table(
        "Placement traits under max_placement_results = %d (NoValidHost: all, then "
        "latency-sensitive; calls: resex-placement-sync's)" % limit,
        TRAIT_COLUMNS, trait_rows(results))]
    pinned = max(r.pinned_vms for r in results)
    if pinned:
        lines.append("%d VMs pinned in the congested region (not requests)" % pinned)
    return lines


def goals(results):
    """The study's goals, ``[(goal, measured, met)]``; empty without configurations a and e."""
    by = {r.configuration: r for r in results}
    a, b, e = by.get("a"), by.get("b"), by.get("e")
    if a is None or e is None:
        return []

    def ratio(x, y):
        return (x / y) if y else (1.0 if x == 0 else float("inf"))

    out = []
    cut = 1.0 - ratio(e.violation_s_total, a.violation_s_total)
    out.append(("(e) vs (a): violation-seconds down >= 90%",
                "%.1f%% down" % (100.0 * cut), cut >= 0.90))
    out.append(("(e) vs (a): NoValidHost no higher",
                "%d vs %d" % (e.no_valid_host, a.no_valid_host),
                e.no_valid_host <= a.no_valid_host))
    out.append(("(e): failed evacuations zero",
                "%d of %d" % (e.failed_evacuations, e.evacuations),
                e.failed_evacuations == 0))
    grow = ratio(e.hosts_in_use_mean, a.hosts_in_use_mean) - 1.0
    out.append(("(e) vs (a): hosts in use within +5%", "%+.1f%%" % (100.0 * grow),
                grow <= 0.05))
    keep = ratio(e.bulk_tb, a.bulk_tb)
    out.append(("(e) vs (a): bulk throughput >= 90%", "%.1f%%" % (100.0 * keep), keep >= 0.90))
    if b is not None:
        out.append(("(e) beats (b) on violation-seconds",
                    "%.0f vs %.0f" % (e.violation_s_total, b.violation_s_total),
                    e.violation_s_total < b.violation_s_total))
    f = by.get("f")
    if f is not None:
        out.append(("(e) beats (f), the cortex-like weighers, on violation-seconds",
                    "%.0f vs %.0f" % (e.violation_s_total, f.violation_s_total),
                    e.violation_s_total < f.violation_s_total))
    return out


def format_table(data):
    results = data["results"]
    lines = [run_output.table(
        "Fleet study %s: %d hosts, %.1f h simulated, %d requests, seed %d (%.0f s)" % (
            data["scenario"], data["hosts"], data["duration_s"] / 3600.0, data["requests"],
            data["seed"], data["wall_s"]), COLUMNS, rows(results))]
    lines.append("")
    for r in results:
        lines.append("%s: %s; filters %s; weighers %s%s" % (
            r.configuration, r.description, ", ".join(r.filters), ", ".join(r.weighers),
            "; reads the board (%d reports published)" % r.publishes if r.reads_board else ""))
    lines += trait_table(results)
    g = goals(results)
    if g:
        lines += ["", "Goals (printed, not asserted):"]
        for goal, measured, met in g:
            lines.append("  [%s] %s: %s" % ("met" if met else "MISSED", goal, measured))
    clamped = [r for r in results if r.clamped_s > 0]
    if clamped:
        lines += ["", "Host mixes beyond the calibrated grid (clamped to its edge): " + ", ".join(
            "%s %.0f host-s" % (r.configuration, r.clamped_s) for r in clamped)]
    return "\n".join(lines)


def to_dict(data, detail=True):
    out = {k: v for k, v in data.items() if k != "results"}
    out["results"] = [r.to_dict(detail=detail) for r in data["results"]]
    out["goals"] = [{"goal": g, "measured": m, "met": met} for g, m, met in
                    goals(data["results"])]
    return out


def write_plots(data, out_dir):
    """violations.png (timeline per configuration) and inflation_cdf.png."""
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r in data["results"]:
        hours = [(i + 0.5) * fleet.TIMELINE_BIN_S / 3600.0 for i in range(len(r.timeline))]
        ax.plot(hours, r.timeline, label="(%s) %s" % (r.configuration, r.description))
    ax.set_xlabel("hour of the simulated day")
    ax.set_ylabel("SLA violation-seconds per %d min" % (fleet.TIMELINE_BIN_S / 60))
    ax.set_title("%s: sensitive-VM SLA violations" % data["scenario"])
    ax.legend(loc="best", fontsize="small")
    plots.save_figure(fig, os.path.join(out_dir, "violations.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in data["results"]:
        xs = r.inflations
        if xs:
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step(xs, ys, where="post", label="(%s) %s" % (r.configuration, r.description))
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("per-VM mean latency inflation (%)")
    ax.set_ylabel("fraction of sensitive VMs")
    ax.set_title("%s: CDF of sensitive-VM inflation" % data["scenario"])
    ax.legend(loc="best", fontsize="small")
    plots.save_figure(fig, os.path.join(out_dir, "inflation_cdf.png"))
