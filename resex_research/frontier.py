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

"""The static-cap frontier of a scenario, for the mean or the p99 SLA: one computation.

The interferers (the VMs without a latency SLA; without any, the sensitive
VMs but the one with the lowest base latency) are held at one fixed cap,
swept over :data:`CAPS` below their full size (the full size is the
uncontrolled run) and bisected :data:`BISECT` times at the edge; a point
*meets* when every sensitive VM's statistic (the one its SLA is on) is
within its bound (a capped sensitive VM's too: its own cap slows it). The
frontier is the capped VMs' largest throughput among the points that meet:
what the CPU lever can buy at that SLA. For the ``p99`` statistic each
sensitive VM's SLA becomes its base 99th percentile (its p99 alone on the
host) with its own threshold (``resex:latency_statistic=p99``).

``resex-sim frontier`` runs it point by point (:func:`sweep`);
``resex-sim compare --peers`` runs the same points in worker processes
(:func:`grid`, :func:`edge`, :func:`best`), so both print one frontier.
"""

import dataclasses

from resex_libvirt.sim import run_output
from resex_libvirt.sim import runner
from resex_libvirt.sim import scenario as scenario_mod
from resex_libvirt import sla as sla_mod
from resex_research import policy_catalog
from resex_research import protect

#: The static caps of the sweep (percent of one pCPU); those at or over the
#: capped VMs' full size are the uncontrolled run.
CAPS = (5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0)
#: Bisection steps between the last cap that meets and the first that does not.
BISECT = 2
#: The scenarios the command reads by default: the paper's case and the mixes.
DEFAULT_SCENARIOS = ("paper_64k_vs_2m", "two_interferers", "sensitive_big_buffers",
                     "two_sensitive", "mix_two_interferers_sizes", "mix_large_buffer_sensitive",
                     "mix_two_sensitive_one_bulk", "mix_two_sensitive_sizes")
DEFAULT_POLICIES = ("io_shares", "latency_target")


def statistic_us(result, statistic):
    """A :class:`~resex_libvirt.sim.runner.VMResult`'s latency statistic (us)."""
    return result.latency_p99_us if statistic == "p99" else result.latency_mean_us


bound_us = protect.bound_us


def capped_vms(sc):
    """The VMs the sweep caps: the interferers (see the module docstring)."""
    others = [vm.name for vm in sc.vms if not vm.sla.sensitive]
    if others:
        return others
    sensitive = sorted((vm for vm in sc.vms if vm.sla.sensitive),
                       key=lambda vm: scenario_mod.base_latency_us(vm.workload,
                                                                   sc.link_bytes_per_s))
    return [vm.name for vm in sensitive[1:]]


def full_pct(sc):
    """The capped VMs' full size (percent): a cap at or over it is no cap."""
    sizes = [100.0 * max(1, sc.vm(name).vcpus) for name in capped_vms(sc)]
    return min(sizes) if sizes else None


def grid(sc, caps=CAPS):
    """The caps of the coarse sweep below the capped VMs' full size (none without any)."""
    full = full_pct(sc)
    return () if full is None else tuple(c for c in caps if c < full)


def _with(sc, changes):
    """``sc`` with each named VM's SLA replaced by ``changes[name](sla)``."""
    vms = tuple(dataclasses.replace(vm, sla=changes[vm.name](vm.sla)) if vm.name in changes
                else vm for vm in sc.vms)
    return dataclasses.replace(sc, vms=vms)


def with_caps(sc, cap_pct):
    """``sc`` with every capped VM (:func:`capped_vms`) limited to ``cap_pct``."""
    return _with(sc, {name: (lambda s: dataclasses.replace(s, limit_pct=float(cap_pct)))
                      for name in capped_vms(sc)})


def static(sc):
    """``sc`` run with every VM at its limit (the ``none`` policy)."""
    return runner.run_static(sc) if runner.static_applies(sc) else runner.run(sc, "none")


def with_statistic(sc, statistic):
    """``sc`` with every sensitive VM's SLA on ``statistic`` (p99: its base p99, alone)."""
    if statistic == "mean":
        return sc
    changes = {}
    for vm in sc.vms:
        if not vm.sla.sensitive:
            continue
        base = static(dataclasses.replace(sc, vms=(vm,))).vm(vm.name).latency_p99_us
        changes[vm.name] = (lambda s, base=base: dataclasses.replace(
            s, latency_sla_us=round(base, 1), latency_statistic=statistic))
    return _with(sc, changes)


def judged(sc, res):
    """Each sensitive VM's statistic over its SLA base, whether all meet, the capped MB/s.

    Each VM is judged on the statistic its SLA is on
    (``resex:latency_statistic``: the mean unless it says p99).
    """
    vs, meets = {}, True
    for vm in sc.vms:
        if not vm.sla.sensitive:
            continue
        value = statistic_us(res.vm(vm.name), vm.sla.latency_statistic)
        vs[vm.name] = None if value is None else value / vm.sla.latency_sla_us
        meets = meets and value is not None and value <= bound_us(vm.sla)
    return {"vs_sla": vs, "meets": meets,
            "capped_mb_s": sum(res.vm(n).throughput_mb_s for n in capped_vms(sc))}


def edge(points):
    """``(lo, hi)``: the caps to bisect between, or None (nothing to refine).

    ``points`` are ``{"cap_pct", "meets"}`` of the coarse sweep and the
    uncontrolled run; there is an edge when some cap meets and no cap does
    not hold it (the uncontrolled run misses).
    """
    points = sorted(points, key=lambda p: p["cap_pct"])
    meeting = [p["cap_pct"] for p in points if p["meets"]]
    if not meeting or points[-1]["meets"]:
        return None
    lo = max(meeting)
    return lo, min(p["cap_pct"] for p in points if not p["meets"] and p["cap_pct"] > lo)


def middle(lo_hi):
    """The cap a bisection of ``(lo, hi)`` tries next."""
    lo, hi = lo_hi
    return round((lo + hi) / 2.0, 2)


def narrowed(lo_hi, mid, meets):
    """``(lo, hi)`` once the cap ``mid`` met its SLA (``meets``) or did not."""
    return (mid, lo_hi[1]) if meets else (lo_hi[0], mid)


def best(points):
    """The point of most capped throughput that meets (among equals, the highest cap), or None."""
    return max((p for p in points if p["meets"]), key=lambda p: (p["capped_mb_s"], p["cap_pct"]),
               default=None)


def sweep(sc, statistic=None, caps=CAPS, bisect=BISECT):
    """The static-cap points of ``sc`` (already :func:`with_statistic`), in cap order.

    ``statistic`` is kept for the callers' sake: each VM is judged on its
    own SLA's statistic.
    """
    full = full_pct(sc)
    if full is None:
        return []

    def point(cap):
        limited = with_caps(sc, cap) if cap < full else sc
        return dict(judged(sc, static(limited)), cap_pct=cap)

    points = [point(cap) for cap in grid(sc, caps)] + [point(full)]
    span = edge(points)
    for _ in range(bisect if span else 0):
        mid = middle(span)
        p = point(mid)
        points.append(p)
        span = narrowed(span, mid, p["meets"])
    return sorted(points, key=lambda p: p["cap_pct"])


def evaluate(name, statistic, policies=DEFAULT_POLICIES, duration=None):
    """One scenario's frontier for ``statistic`` and each policy's point against it."""
    sc = scenario_mod.load(name)
    if duration is not None:
        sc = sc.with_duration(duration)
    sc = with_statistic(sc, statistic)
    capped = capped_vms(sc)
    points = sweep(sc, statistic) or [dict(judged(sc, static(sc)), cap_pct=100.0)]
    top = best(points) if capped else None
    frontier = top["capped_mb_s"] if top else None
    runs = {}
    for policy in policies:
        res = policy_catalog.run(sc, policy)
        j = judged(sc, res)
        mb_s = j["capped_mb_s"]
        runs[policy] = {"vs_sla": j["vs_sla"], "meets": j["meets"], "capped_mb_s": mb_s,
                        "pct_of_frontier": (100.0 * mb_s / frontier) if frontier else None}
    return {"scenario": sc.name, "statistic": statistic, "capped": capped,
            "slas": {vm.name: {"latency_sla_us": vm.sla.latency_sla_us,
                               "bound_us": bound_us(vm.sla)}
                     for vm in sc.vms if vm.sla.sensitive},
            "sweep": points, "uncontrolled": points[-1], "lowest_cap": points[0],
            "frontier_cap_pct": top["cap_pct"] if top else None,
            "frontier_mb_s": frontier, "policies": runs}


def _vs(vs):
    return " ".join("%.3fx" % v if v is not None else "-" for v in vs.values()) or "-"


def format_rows(rows):
    """One line per scenario: the SLA, the sweep's ends, the frontier, each policy's point."""
    policies = list(rows[0]["policies"]) if rows else []
    body = []
    for r in rows:
        slas = " ".join("%.0f" % s["latency_sla_us"] for s in r["slas"].values())
        cells = [r["scenario"], r["statistic"], slas,
                 _vs(r["uncontrolled"]["vs_sla"]),
                 "%s @%g%%" % (_vs(r["lowest_cap"]["vs_sla"]), r["lowest_cap"]["cap_pct"]),
                 ("%g" % r["frontier_cap_pct"]) if r["frontier_cap_pct"] is not None
                 else "unreachable",
                 run_output.fmt(r["frontier_mb_s"], "%.0f")]
        for policy in policies:
            p = r["policies"][policy]
            cells.append("%s%s %.0f%s" % (
                _vs(p["vs_sla"]), "" if p["meets"] else " MISS", p["capped_mb_s"],
                "" if p["pct_of_frontier"] is None else " %.0f%%" % p["pct_of_frontier"]))
        body.append(cells)
    return run_output.table(
        "Static-cap frontier per SLA statistic: each SLA VM's statistic / its SLA base "
        "(uncontrolled; at the lowest cap), the largest cap meeting every SLA and the capped "
        "VMs' MB/s there; each policy: statistic / SLA base, capped VMs' MB/s, % of frontier",
        ["scenario", "stat", "SLA us", "uncontrolled", "lowest cap", "frontier cap",
         "frontier MB/s"] + list(policies), body)


def cmd_frontier(args):
    import json
    names = args.scenario or list(DEFAULT_SCENARIOS)
    policies = [p for p in args.policies.split(",") if p]
    rows = []
    for statistic in args.statistic.split(","):
        if statistic not in sla_mod.STATISTICS:
            raise SystemExit("resex-sim frontier: unknown statistic %r (one of %s)"
                             % (statistic, ", ".join(sla_mod.STATISTICS)))
        for name in names:
            rows.append(evaluate(name, statistic, policies, args.duration))
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        print(format_rows(rows))
    return 0


def add_parser(sub):
    p = sub.add_parser("frontier", help="the static-cap frontier for the mean or the p99 SLA, "
                                        "and each policy against it")
    p.add_argument("scenario", nargs="*",
                   help="scenario names or files (default: the paper's case and the mixes)")
    p.add_argument("--statistic", default="mean,p99",
                   help="comma-separated SLA statistics, of %s (default: %%(default)s)"
                        % ", ".join(sla_mod.STATISTICS))
    p.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                   help="comma-separated policy names (default: %(default)s)")
    p.add_argument("--duration", type=float, help="override every run's length (s)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_frontier)
