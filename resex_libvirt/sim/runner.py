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

"""The fast runner: a scenario under one policy, market in the loop, no agent.

Per control interval (paper Alg. 1 and 2): advance the testbed by one
interval, sample each VM's CPU and I/O with the same
:class:`~resex_libvirt.sampling.Sampler` the agent uses, take the latency
windows, ``market.step(samples, windows)``, and apply each decision's cap
to the model (``None`` when the cap is the VM's full size); every
``intervals_per_epoch`` intervals, ``market.end_epoch()``. No wall clock is
involved: a run is as fast as the model, and deterministic for the
scenario's seed.

The market's parameters are the paper's (Section VI-A): the scenario's
interval and epoch, one pCPU per VM, and the link's capacity and MTU.
"""

import dataclasses
import time

from resex_libvirt import control
from resex_libvirt import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.market import records
from resex_libvirt.sim import host as host_mod
from resex_libvirt.sim import run_output


@dataclasses.dataclass
class VMResult:
    """One VM's outcome: latency (us) after the warm-up, throughput, caps."""

    name: str
    uuid: str
    sensitive: bool
    count: int
    latency_mean_us: float | None
    latency_p50_us: float | None
    latency_p99_us: float | None
    latency_std_us: float | None
    throughput_mb_s: float
    cpu_pct: float
    cap_mean_pct: float | None
    cap_min_pct: float | None
    dropped: int = 0

    def to_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass
class RunResult:
    """What :func:`run` measured.

    ``series`` holds time series sampled every ``series_every`` intervals:
    ``t_s``, and per VM name ``balance`` (Resos left), ``allocation`` (per
    epoch), ``cap_pct`` and ``rate``. ``epochs`` has one compact dict per
    epoch and VM: the cap in force at the end of the epoch, its mean and
    minimum, the charging rate, the interference percentage (sensitive VMs),
    the Resos left, and ``reason``, the reason (:data:`policy.REASONS`) that
    held the cap for most of the epoch (``reasons``: intervals per reason).
    ``latencies_us`` keeps every VM's latency samples; ``latency_log``, each
    latency-sensitive VM's requests from the start, warm-up included, as
    ``(completion time s, latency us)`` (what :mod:`.protect` reads).
    """

    scenario: str
    policy: str
    policy_kwargs: dict
    vms: dict
    series: dict
    epochs: list
    latencies_us: dict
    interval_s: float
    intervals_per_epoch: int
    series_every: int
    wall_s: float
    latency_log: dict = dataclasses.field(default_factory=dict)

    def vm(self, name):
        return self.vms[name]

    def to_dict(self, latencies=False):
        out = {
            "scenario": self.scenario, "policy": self.policy,
            "policy_kwargs": dict(self.policy_kwargs),
            "vms": {name: r.to_dict() for name, r in self.vms.items()},
            "series": self.series, "epochs": self.epochs,
            "interval_s": self.interval_s, "intervals_per_epoch": self.intervals_per_epoch,
            "series_every": self.series_every, "wall_s": self.wall_s,
        }
        if latencies:
            out["latencies_us"] = self.latencies_us
        return out


def _main_reason(counts):
    """The reason that held the cap longest in an epoch (ties: the stronger control)."""
    if not counts:
        return policy_mod.UNCAPPED
    order = policy_mod.REASONS
    return max(counts, key=lambda r: (counts[r], order.index(r) if r in order else -1))


def run(scenario, policy, model=None, series_every=None, **policy_kwargs):
    """Run ``scenario`` under ``policy``: a policy's name, or a policy already made.

    A name is loaded through the plugin loader (:func:`policy.load
    <resex_libvirt.market.policy.load>`, the ``resex.policies`` entry points)
    with ``policy_kwargs``; a policy object (one the caller made, a research
    policy for instance) runs as it is, and ``policy_kwargs`` are then only
    what the result records it was made with.
    """
    started = time.monotonic()
    if isinstance(policy, str):
        policy = policy_mod.load(policy, **policy_kwargs)
    host = host_mod.SimHost(scenario, model=model)
    link = host.link()
    ipe = scenario.intervals_per_epoch
    params = market_mod.MarketParams(
        interval_s=scenario.interval_s, intervals_per_epoch=ipe, pcpus=host.pcpus(),
        link_bytes_per_s=link.capacity_bytes_per_s, mtu=link.mtu)
    market = market_mod.Market(params, policy)
    controller = control.Controller(market, host, host, [host])
    every = series_every or max(1, ipe // 100)
    names = {vm.uuid: vm.name for vm in scenario.vms}
    series = {"t_s": [], "balance": {n: [] for n in names.values()},
              "allocation": {n: [] for n in names.values()},
              "cap_pct": {n: [] for n in names.values()},
              "rate": {n: [] for n in names.values()}}
    tally = {uuid: [0, 0.0, float("inf")] for uuid in names}   # intervals, cap sum, cap min
    epochs = []
    # Per VM: how many intervals of this epoch each reason held the cap.
    reason_counts = {uuid: {} for uuid in names}

    controller.prime(host.now())
    for i in range(1, scenario.intervals + 1):
        t = i * scenario.interval_s
        host.advance_to(t)
        done = controller.step(host.now())
        decisions = done.decisions if done is not None else {}
        # The market's Decisions: its names in the order of its caps column.
        for uuid, cap in zip(decisions, decisions.caps.tolist() if decisions else ()):
            rec = tally[uuid]
            rec[0] += 1
            rec[1] += cap
            if cap < rec[2]:
                rec[2] = cap
            why = market.reason(uuid)
            counts = reason_counts[uuid]
            counts[why] = counts.get(why, 0) + 1
        if i % every == 0:
            series["t_s"].append(round(t, 9))
            for uuid, name in names.items():
                on = uuid in market.specs
                series["balance"][name].append(market.ledger.balance(uuid) if on else None)
                series["allocation"][name].append(
                    market.ledger.allocation(uuid) if on else None)
                d = decisions.get(uuid)
                series["cap_pct"][name].append(d.cap_pct if d else None)
                series["rate"][name].append(d.rate if d else None)
        if i % ipe == 0:
            summary = market.end_epoch()
            epochs.append({
                "epoch": summary.epoch, "link_utilisation": summary.link_utilisation,
                "latency_inflation_pct": summary.latency_inflation_pct,
                "vms": {names[v.vm]: {"cap_mean_pct": v.cap_mean, "cap_min_pct": v.cap_min,
                                      "cap_pct": market.decision(v.vm).cap_pct,
                                      "rate": v.rate, "cpu_pct_mean": v.cpu_pct_mean,
                                      "spent_cpu": v.spent_cpu, "spent_io": v.spent_io,
                                      "allocation": v.allocation, "balance": v.balance,
                                      "interference_pct": v.interference_pct,
                                      "tx_mb": v.tx_bytes / 1e6,
                                      "reason": _main_reason(reason_counts[v.vm]),
                                      "reasons": dict(sorted(reason_counts[v.vm].items()))}
                        for v in summary.vms}})
            reason_counts = {uuid: {} for uuid in names}

    vm_results, latencies, log = _vm_results(scenario, host, tally)
    return RunResult(scenario=scenario.name, policy=policy.name, policy_kwargs=policy_kwargs,
                     vms=vm_results, series=series, epochs=epochs, latencies_us=latencies,
                     latency_log=log,
                     interval_s=scenario.interval_s, intervals_per_epoch=ipe,
                     series_every=every, wall_s=time.monotonic() - started)


def static_applies(scenario):
    """True when :func:`run_static` can stand in for ``run(scenario, "none")``.

    Every VM runs from the start to the end (the controller adopts them all
    at its first look, at time 0).
    """
    return all(vm.start_s == 0 and vm.stop_s is None for vm in scenario.vms)


def run_static(scenario, model=None, series_every=None):
    """``run(scenario, "none")`` without the market: every VM held at its limit.

    Under the ``none`` policy the market decides each VM's limit (its
    ``cpu_limit_pct``, or its full size) from the moment it is adopted and
    never moves it, so the controller writes every VM's knobs once, at its
    first step (the end of the first interval, in the scenario's order), and
    never again; the model runs on by itself. A static-cap sweep needs
    nothing else. This makes the same run without the market and the
    controller: the model stopping at the end of every interval as
    :func:`run` stops it (the link's steps depend on it; after the first
    interval, in one pass of the engine, ``SimHost.advance_through``) and
    the same knobs written at the same instant, so the VM results and
    latencies are those of :func:`run` to the last bit
    (``tests/unit/sim/test_runner.py`` compares them). ``series`` has only
    ``t_s`` and ``cap_pct``, and there are no ``epochs`` (no market, no
    ledger). Only for scenarios where
    :func:`static_applies` (``ValueError`` otherwise).
    """
    if not static_applies(scenario):
        raise ValueError("scenario %s has VMs starting or stopping mid-run" % scenario.name)
    started = time.monotonic()
    host = host_mod.SimHost(scenario, model=model, reports=False)   # no market reads them
    ipe = scenario.intervals_per_epoch
    every = series_every or max(1, ipe // 100)
    # What the market decides under ``none`` and what the controller writes of it.
    limits = {vm.uuid: records.VMSpec(vm=vm.uuid, vcpus=vm.vcpus, sla=vm.sla).limit_pct
              for vm in scenario.vms}
    knobs = [(vm.uuid, None if limits[vm.uuid] >= 100.0 * max(1, vm.vcpus) - 1e-9
              else round(limits[vm.uuid], 2)) for vm in scenario.vms]
    intervals, interval_s = scenario.intervals, scenario.interval_s
    if intervals >= 1:
        host.advance_to(interval_s)
        for uuid, cap in knobs:
            host.set_knobs(uuid, cap, market_mod.market.BASE_WEIGHT)
        # Nobody reads the model until the end: the other intervals in one
        # pass of the engine, each interval's end still one of its events.
        host.advance_through(i * interval_s for i in range(2, intervals + 1))
    tally = {}
    for uuid, cap in limits.items():
        cap_sum = 0.0
        for _i in range(intervals):
            cap_sum += cap         # added interval by interval, as run() adds it
        tally[uuid] = [intervals, cap_sum, cap if intervals else float("inf")]
    ticks = range(every, intervals + 1, every)
    series = {"t_s": [round(i * interval_s, 9) for i in ticks],
              "cap_pct": {vm.name: [limits[vm.uuid]] * len(ticks) for vm in scenario.vms}}
    vm_results, latencies, log = _vm_results(scenario, host, tally)
    return RunResult(scenario=scenario.name, policy="none", policy_kwargs={},
                     vms=vm_results, series=series, epochs=[], latencies_us=latencies,
                     latency_log=log,
                     interval_s=scenario.interval_s, intervals_per_epoch=ipe,
                     series_every=every, wall_s=time.monotonic() - started)


def _vm_results(scenario, host, tally):
    """Each VM's :class:`VMResult`, latency samples and (sensitive VMs) latency log."""
    results = host.results()
    vm_results = {}
    latencies = {}
    log = {}
    for vm in scenario.vms:
        r = results[vm.name]
        stats = run_output.latency_stats(r["latencies_us"])
        n, cap_sum, cap_min = tally[vm.uuid]
        vm_results[vm.name] = VMResult(
            name=vm.name, uuid=vm.uuid, sensitive=vm.sla.sensitive, count=stats["count"],
            latency_mean_us=stats["mean_us"], latency_p50_us=stats["p50_us"],
            latency_p99_us=stats["p99_us"], latency_std_us=stats["std_us"],
            throughput_mb_s=r["throughput_mb_s"], cpu_pct=r["cpu_pct"],
            cap_mean_pct=(cap_sum / n) if n else None, cap_min_pct=cap_min if n else None,
            dropped=r["dropped"])
        latencies[vm.name] = r["latencies_us"]
        if vm.sla.sensitive:
            log[vm.name] = r["latency_log"]
    return vm_results, latencies, log
