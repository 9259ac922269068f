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

"""A host's latency and throughput for a mix of tenants, calibrated on the host simulator.

Simulating every host of a fleet for a day with the discrete-event testbed
(:mod:`resex_libvirt.sim.testbed`, 1 ms control intervals) is out of reach
on a laptop, but what the fleet study needs of a host depends only on its
**mix**: how many latency-sensitive and how many bulk I/O tenants share its
link (tenants without fabric I/O do not touch the link), and which market
policy the host runs. So the surrogate is a **table measured by running the
real simulator** on every mix of a grid (:func:`calibrate`), one short run
per mix and policy, with the market in the loop exactly as ``resex-sim run``
drives it (the same :class:`~resex_libvirt.control.Controller`, market and
policy). Per mix it keeps:

``inflation_pct``
    mean over the sensitive VMs of their mean latency's increase over their
    SLA base (``resex:latency_sla_us``), percent, >= 0;
``violation_fraction``
    fraction of (VM, one-second window) pairs whose window mean latency
    exceeds the SLA base by more than the VM's
    ``resex:interference_threshold_pct``: the SLA is violated for that second;
``bulk_mb_s``
    mean throughput of one bulk VM, MB/s (10^6 bytes);
``report``
    the host report the agent would publish for that mix
    (:meth:`~resex_libvirt.board.report.HostReport.from_summary` of one of
    the run's epoch summaries: the epoch whose congestion index is the
    median of the run's epochs after the warm-up).

Between grid points in the number of sensitive VMs the figures are
interpolated linearly (the report is the nearest point's; never from the
point without sensitive VMs, which has no inflation to speak of); beyond the grid
they are clamped to its edge and :meth:`Surrogate.lookup` says so. The
surrogate's error against fresh simulator runs (other seeds, off-grid mixes)
is measured by :func:`validate` and tested (``tests/unit/research/cluster``).

The table is cached as JSON under a key that hashes the calibration's
inputs *and the source of the simulator and market*, so a change to either
recalibrates instead of serving stale numbers.
"""

import dataclasses
import hashlib
import importlib.resources
import json
import math
import os
import statistics
import time

from resex_libvirt.board import report as report_mod
from resex_libvirt import control
from resex_libvirt import exceptions
from resex_libvirt import market as market_mod
from resex_libvirt.sim import host as host_mod
from resex_libvirt.sim import scenario as scenario_mod
from resex_research import policy_catalog

#: Cache format; bump when the table's layout changes.
FORMAT = 1

_NS = 1_000_000_000


@dataclasses.dataclass(frozen=True)
class HostModel:
    """What one simulated host runs: its link, the two I/O workloads, the grid."""

    link_bytes_per_s: float
    mtu: int
    sensitive_workload: dict
    bulk_workload: dict
    sla: dict
    sensitive_points: tuple
    max_bulk: int
    run_s: float = 3.0
    warmup_s: float = 1.0
    seed: int = 1

    def to_dict(self):
        d = dataclasses.asdict(self)
        d["sensitive_points"] = list(self.sensitive_points)
        return d

    @property
    def threshold_pct(self):
        return float(self.sla.get("interference_threshold_pct", 10.0))

    @property
    def base_us(self):
        return float(self.sla["latency_sla_us"])


def mix_scenario(model, n_sensitive, n_bulk, seed=None, duration_s=None):
    """The host scenario of a mix: ``n_sensitive`` + ``n_bulk`` VMs on one link."""
    vms = []
    for i in range(n_sensitive):
        vms.append(dict(model.sensitive_workload, name="sensitive%d" % i, sla=dict(model.sla)))
    for i in range(n_bulk):
        vms.append(dict(model.bulk_workload, name="bulk%d" % i))
    duration = duration_s or model.run_s
    return scenario_mod.parse(
        {"name": "mix-%d-%d" % (n_sensitive, n_bulk), "duration_s": duration,
         "warmup_s": min(model.warmup_s, duration / 2.0),
         "seed": model.seed if seed is None else seed,
         "link": {"bytes_per_s": model.link_bytes_per_s, "mtu": model.mtu}, "vms": vms},
        source="mix %d sensitive + %d bulk" % (n_sensitive, n_bulk))


def measure(model, n_sensitive, n_bulk, policy_name, seed=None, duration_s=None):
    """Run one mix on the host simulator under ``policy_name``; the table's row."""
    if n_sensitive + n_bulk == 0:
        return {"inflation_pct": 0.0, "violation_fraction": 0.0, "bulk_mb_s": 0.0,
                "link_utilisation": 0.0, "report": None}
    sc = mix_scenario(model, n_sensitive, n_bulk, seed=seed, duration_s=duration_s)
    host = host_mod.SimHost(sc)
    link = host.link()
    ipe = sc.intervals_per_epoch
    params = market_mod.MarketParams(
        interval_s=sc.interval_s, intervals_per_epoch=ipe, pcpus=host.pcpus(),
        link_bytes_per_s=link.capacity_bytes_per_s, mtu=link.mtu)
    policy = policy_catalog.load(policy_name)
    market = market_mod.Market(params, policy)
    controller = control.Controller(market, host, host, [host])
    controller.prime(host.now())
    reports = []
    for i in range(1, sc.intervals + 1):
        t = i * sc.interval_s
        host.advance_to(t)
        controller.step(host.now())
        if i % ipe == 0:
            summary = market.end_epoch()
            if t > sc.warmup_s + 1e-9:
                reports.append(_report(summary, t, link.capacity_bytes_per_s, policy))
    warm_ns = round(sc.warmup_s * _NS)
    end_ns = host.testbed.now_ns
    limit = model.base_us * (1.0 + model.threshold_pct / 100.0)
    inflations, windows, violated, bulk = [], 0, 0, []
    for vm in sc.vms:
        tvm = host.testbed.vms[vm.uuid]
        if vm.sla.sensitive:
            lat = [(done, ns / 1000.0) for done, ns in tvm.server.latencies if done >= warm_ns]
            if lat:
                mean = math.fsum(v for _, v in lat) / len(lat)
                inflations.append(max(0.0, 100.0 * (mean / model.base_us - 1.0)))
            n_win = max(1, round((end_ns - warm_ns) / _NS))
            sums = [[0.0, 0] for _ in range(n_win)]
            for done, v in lat:
                k = min(n_win - 1, (done - warm_ns) // _NS)
                sums[k][0] += v
                sums[k][1] += 1
            for total, count in sums:
                windows += 1
                # A window without a completed request is violated too.
                if count == 0 or total / count > limit:
                    violated += 1
        else:
            bulk.append(tvm.tx_bytes / ((end_ns - max(tvm.start_ns, 0)) / _NS) / 1e6)
    chosen = None
    if reports:
        ordered = sorted(reports, key=lambda r: (r.congestion_index, r.epoch))
        chosen = ordered[(len(ordered) - 1) // 2]
    util = statistics.fmean(r.link_utilisation for r in reports) if reports else 0.0
    return {
        "inflation_pct": statistics.fmean(inflations) if inflations else 0.0,
        "violation_fraction": (violated / windows) if windows else 0.0,
        "bulk_mb_s": statistics.fmean(bulk) if bulk else 0.0,
        "link_utilisation": util,
        "report": None if chosen is None else chosen.to_dict(),
    }


def _report(summary, t, capacity, policy):
    """The agent's report of ``summary``, built as the agent loop builds it."""
    return report_mod.HostReport.from_summary("calibration", t, summary, capacity, "resex-sim",
                                              taxes_interferers=policy.taxes_interferers)


def source_hash():
    """A digest of the simulator's, market's and policies' source (the table depends on them)."""
    h = hashlib.sha256()
    root = importlib.resources.files("resex_libvirt")
    research = importlib.resources.files("resex_research")
    for directory in (root / "sim", root / "market", root / "board", research):
        for entry in sorted(directory.iterdir(), key=lambda p: p.name):
            if entry.name.endswith(".py"):
                h.update(entry.name.encode())
                h.update(entry.read_bytes())
    h.update(root.joinpath("control.py").read_bytes())
    h.update(research.joinpath("cluster", "surrogate.py").read_bytes())
    return h.hexdigest()


def cache_key(model, policy):
    text = json.dumps({"format": FORMAT, "model": model.to_dict(), "policy": policy,
                       "source": source_hash()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "resex-sim")


def calibrate(model, policy, progress=None):
    """Measure every mix of the grid under ``policy``: one policy's table."""
    started = time.monotonic()
    rows = {}
    for n_s in model.sensitive_points:
        for n_b in range(model.max_bulk + 1):
            rows["%d,%d" % (n_s, n_b)] = measure(model, n_s, n_b, policy)
            if progress is not None:
                progress("calibrating %s: %d sensitive + %d bulk" % (policy, n_s, n_b))
    return {"format": FORMAT, "model": model.to_dict(), "policy": policy, "rows": rows,
            "wall_s": time.monotonic() - started}


def _load_or_calibrate_one(model, policy, cache_dir, progress, refresh):
    path = os.path.join(cache_dir, "cluster-surrogate-%s-%s.json"
                        % (policy, cache_key(model, policy)))
    if not refresh and os.path.exists(path):
        try:
            with open(path) as f:
                data = json.load(f)
            if data.get("format") == FORMAT and data.get("policy") == policy:
                return data, path
        except (OSError, ValueError) as exc:
            if progress is not None:
                progress("ignoring the unreadable calibration %s: %s" % (path, exc))
    data = calibrate(model, policy, progress=progress)
    try:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        raise exceptions.ConfigError("cannot write the calibration cache %s: %s"
                                     % (path, exc)) from exc
    return data, path


def load_or_calibrate(model, policies, cache_dir=None, progress=None, refresh=False):
    """The surrogate for ``model`` under ``policies``: cached tables, calibrated if missing."""
    cache_dir = cache_dir or default_cache_dir()
    table, paths, wall = {}, [], 0.0
    for policy in sorted(set(policies)):
        data, path = _load_or_calibrate_one(model, policy, cache_dir, progress, refresh)
        table[policy] = data["rows"]
        paths.append(path)
        wall += data.get("wall_s", 0.0)
    return Surrogate({"format": FORMAT, "model": model.to_dict(), "table": table,
                      "wall_s": wall}, path=paths)


@dataclasses.dataclass(frozen=True)
class HostOutcome:
    """A host's state for a mix, as the fleet study uses it."""

    inflation_pct: float
    violation_fraction: float
    bulk_mb_s: float
    report: dict | None
    clamped: bool


IDLE = HostOutcome(0.0, 0.0, 0.0, None, False)


class Surrogate:
    """Lookups in a calibrated table (see the module docstring)."""

    def __init__(self, data, path=None):
        if data.get("format") != FORMAT:
            raise KeyError("calibration format %r" % data.get("format"))
        self.data = data
        self.path = path
        self.points = tuple(data["model"]["sensitive_points"])
        self.max_bulk = int(data["model"]["max_bulk"])
        self._table = data["table"]
        self._cache = {}
        for policy, rows in self._table.items():
            for row in rows.values():
                if row["report"] is not None:
                    report_mod.HostReport.from_dict(dict(row["report"]))  # validates

    @property
    def policies(self):
        return tuple(sorted(self._table))

    def lookup(self, policy, n_sensitive, n_bulk):
        """The :class:`HostOutcome` of ``n_sensitive`` + ``n_bulk`` tenants under ``policy``."""
        key = (policy, n_sensitive, n_bulk)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        out = self._lookup(policy, n_sensitive, n_bulk)
        self._cache[key] = out
        return out

    def _lookup(self, policy, n_s, n_b):
        if n_s == 0 and n_b == 0:
            return IDLE
        rows = self._table[policy]
        clamped = n_b > self.max_bulk or n_s > self.points[-1]
        n_b = min(n_b, self.max_bulk)
        n_s = min(n_s, self.points[-1])
        hi = next(p for p in self.points if p >= n_s)
        lo = max(p for p in self.points if p <= n_s)
        if lo == 0 and n_s > 0:
            lo = hi        # a host without sensitive VMs has no inflation to interpolate
        a, b = rows["%d,%d" % (lo, n_b)], rows["%d,%d" % (hi, n_b)]
        w = 0.0 if hi == lo else (n_s - lo) / (hi - lo)

        def mix(name):
            return (1.0 - w) * a[name] + w * b[name]

        nearest = a if w < 0.5 else b
        report = nearest["report"] or (b if nearest is a else a)["report"]
        return HostOutcome(mix("inflation_pct"), mix("violation_fraction"), mix("bulk_mb_s"),
                           report, clamped)


def validate(surrogate, model, policy, mixes, seed):
    """Surrogate against fresh simulator runs (seed ``seed``) on ``mixes``: per mix the errors."""
    out = []
    for n_s, n_b in mixes:
        real = measure(model, n_s, n_b, policy, seed=seed)
        sur = surrogate.lookup(policy, n_s, n_b)
        out.append({"mix": (n_s, n_b), "policy": policy,
                    "inflation_pct": (sur.inflation_pct, real["inflation_pct"]),
                    "violation_fraction": (sur.violation_fraction, real["violation_fraction"]),
                    "bulk_mb_s": (sur.bulk_mb_s, real["bulk_mb_s"])})
    return out
