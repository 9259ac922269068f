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

"""The market: ledger + policy, advanced one interval at a time.

Pure: it does no I/O and reads no clock. The caller (the agent loop, the
simulator) passes each interval's samples and latency windows to
:meth:`Market.step`, applies the returned decisions, and calls
:meth:`Market.end_epoch` every ``intervals_per_epoch`` steps.

Per interval (paper Algorithms 1 and 2): charge every sampled VM at its
current rate (CPU percent x CPU price + MTUs x I/O price, times the VM's
rate multiplier), then ask the policy for caps and rates, then clamp every
cap to the VM's mClock [reservation, limit] (mClock, Gulati et al. 2010).

Decisions are sparse: :meth:`Market.step` returns the same dict of the
decisions in force for as long as none changes (no copy per interval), and
:attr:`Market.changed` names the VMs whose decision changed, so that the
caller writes only those knobs.
"""

import collections
import dataclasses
import types
import typing

from resex_libvirt.market import latency
from resex_libvirt.market import ledger as ledger_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.market import records

#: Xen's default credit-scheduler weight; the weight of a VM with default shares.
BASE_WEIGHT = 256


@dataclasses.dataclass(frozen=True)
class MarketParams:
    """Supply and prices (paper Section VI-A).

    ``pcpus`` is the number of physical CPUs whose time the VMs share (the
    paper gives each VM its own pCPU). ``link_bytes_per_s`` and ``mtu`` give
    the link's MTUs per epoch; ``link_bytes_per_s = 0`` means no known link:
    no I/O supply (the allowance is CPU only) and no link utilisation.
    """

    interval_s: float = 0.001
    intervals_per_epoch: int = 1000
    pcpus: int = 1
    link_bytes_per_s: float = float(1 << 30)
    mtu: int = 1024
    cpu_price: float = 1.0
    io_price: float = 1.0
    min_cap_pct: float = 1.0

    def __post_init__(self):
        if not self.interval_s > 0:
            raise ValueError("interval_s must be > 0")
        if self.intervals_per_epoch < 1:
            raise ValueError("intervals_per_epoch must be >= 1")
        if self.pcpus < 1:
            raise ValueError("pcpus must be >= 1")
        if not self.link_bytes_per_s >= 0 or self.mtu < 1:
            raise ValueError("link_bytes_per_s must be >= 0 and mtu positive")
        if self.cpu_price < 0 or self.io_price < 0:
            raise ValueError("prices must be >= 0")

    @property
    def cpu_supply(self):
        """Resos of CPU per epoch: 100 per pCPU per interval."""
        return 100.0 * self.intervals_per_epoch * self.pcpus

    @property
    def io_supply(self):
        """Resos of I/O per epoch: the link's bytes per epoch over the MTU."""
        return self.link_bytes_per_s * self.interval_s * self.intervals_per_epoch / self.mtu

    @property
    def link_mtus_per_interval(self):
        return self.link_bytes_per_s * self.interval_s / self.mtu


def weight_of(shares):
    """Credit-scheduler weight for mClock ``shares`` (100 shares -> 256)."""
    return max(1, min(65535, int(round(BASE_WEIGHT * shares / 100.0))))


@dataclasses.dataclass(slots=True)
class _Tally:
    """Per-VM epoch statistics; the cap is integrated over ticks on change."""

    since: int = 0
    since_start: int = 0
    cap_area: float = 0.0
    cap_min: float = float("inf")
    cpu_sum: float = 0.0
    tx_mtus: int = 0
    tx_bytes: int = 0
    intf_sum: float = 0.0
    intf_n: int = 0


class VMEpoch(typing.NamedTuple):
    """One VM's epoch, as reported (a named tuple: one is made per VM per epoch)."""

    vm: str
    allocation: float
    spent_cpu: float
    spent_io: float
    balance: float
    rate: float
    cap_mean: float
    cap_min: float
    cpu_pct_mean: float
    tx_mtus: int
    tx_bytes: int
    interference_pct: float | None
    sensitive: bool
    io_class: str
    #: The lowest cap the market may give the VM (its mClock reservation, or
    #: the minimum cap): what the host report counts as untaxable.
    cap_floor: float = 0.0


@dataclasses.dataclass(frozen=True)
class EpochSummary:
    """What the market did during one epoch: the input of the host report.

    ``cpu_price`` and ``io_price`` are what the market actually charged on
    average (Resos per CPU percent, Resos per MTU), the rate multipliers
    included, so they rise above the base prices when IOShares taxes.
    """

    epoch: int
    intervals: int
    vms: tuple
    link_bytes_per_epoch: float
    link_utilisation: float
    cpu_price: float
    io_price: float
    latency_inflation_pct: float
    taxes: tuple = ()

    def vm(self, name):
        for rec in self.vms:
            if rec.vm == name:
                return rec
        raise KeyError(name)


class Market:
    """The Reso market of one host."""

    def __init__(self, params, policy, mtu_ewma_intervals=None):
        self.params = params
        self.policy = policy if policy is not None else policy_mod.NoControl()
        self.ledger = ledger_mod.Ledger(params.cpu_supply, params.io_supply)
        self.specs = {}
        self._bounds = {}
        self._weights = {}
        self._decisions = {}
        self._snapshot = None
        self._moved = {}
        #: The VMs whose decision changed in (or before) the last :meth:`step`.
        self.changed = ()
        self.tick = 0
        self.epoch = 0
        self._caps = {}
        self._rates = {}
        self._mtu_rate = {}
        self._baselines = {}
        self._tally = {}
        self._charged_cpu = 0.0
        self._charged_io = 0.0
        self._cpu_units = 0.0
        self._mtu_units = 0
        self._taxes = collections.deque(maxlen=50)
        n = mtu_ewma_intervals or max(1.0, params.intervals_per_epoch / 20.0)
        self._alpha = 1.0 / n
        self.last_interference = {}
        self._specs_ro = types.MappingProxyType(self.specs)
        self._mtu_rate_ro = types.MappingProxyType(self._mtu_rate)
        self._caps_ro = types.MappingProxyType(self._caps)
        self._rates_ro = types.MappingProxyType(self._rates)
        self._bounds_ro = types.MappingProxyType(self._bounds)
        self._accounts = {}
        self._boosted = set()

    # -- membership -----------------------------------------------------------
    def _bounds_of(self, spec):
        limit = spec.limit_pct
        floor = max(spec.reservation_pct, min(self.params.min_cap_pct, limit))
        return (floor, limit)

    def add(self, spec):
        """Adopt a VM (or update its SLA); new VMs get the rest of this epoch's Resos."""
        vm = spec.vm
        self.specs[vm] = spec
        self._bounds[vm] = floor, limit = self._bounds_of(spec)
        self._weights[vm] = weight_of(spec.sla.shares)
        if vm in self.ledger:
            self.ledger.set_shares(vm, spec.sla.shares)
            self._caps[vm] = min(limit, max(floor, self._caps[vm]))
        else:
            left = (self.params.intervals_per_epoch - self.tick) / self.params.intervals_per_epoch
            self._accounts[vm] = self.ledger.open_account(vm, spec.sla.shares,
                                                          fraction_left=left)
            self._caps[vm] = limit
            self._rates[vm] = 1.0
            self._mtu_rate[vm] = 0.0
            self._tally[vm] = _Tally(since=self.tick, since_start=self.tick, cap_min=limit)
        if spec.sla.sensitive:
            tracker = self._baselines.setdefault(vm, latency.BaselineTracker())
            tracker.base_mean_us = spec.sla.latency_sla_us
            tracker.threshold_pct = spec.sla.interference_threshold_pct
        else:
            self._baselines.pop(vm, None)
        self._decide(vm, self._caps[vm], self._rates[vm])

    def set_params(self, params):
        """Apply new prices, minimum cap or supply (a reload) from the next interval.

        The interval and the epoch length cannot change in a running market.
        """
        if (params.interval_s, params.intervals_per_epoch) != (
                self.params.interval_s, self.params.intervals_per_epoch):
            raise ValueError("the interval and the epoch cannot change in a running market")
        self.params = params
        self.ledger.set_supply(params.cpu_supply, params.io_supply)
        for vm, spec in self.specs.items():
            self._bounds[vm] = floor, limit = self._bounds_of(spec)
            cap = min(limit, max(floor, self._caps[vm]))
            if cap != self._caps[vm]:
                self._caps[vm] = cap
                self._decide(vm, cap, self._rates[vm])

    def set_policy(self, policy):
        """Replace the policy; it starts from scratch: every VM at its limit, base rate."""
        self.policy = policy
        for vm in self.specs:
            limit = self._bounds[vm][1]
            if self._caps[vm] != limit or self._rates[vm] != 1.0:
                self._caps[vm] = limit
                self._rates[vm] = 1.0
                self._decide(vm, limit, 1.0)

    def remove(self, vm):
        """Forget a VM that left the host."""
        if vm not in self.specs:
            return
        del self.specs[vm]
        self.ledger.close_account(vm)
        for table in (self._caps, self._rates, self._mtu_rate, self._baselines, self._tally,
                      self._bounds, self._weights, self._decisions, self.last_interference,
                      self._accounts, self._moved):
            table.pop(vm, None)
        self._snapshot = None
        self.policy.forget(vm)

    def _decide(self, vm, cap, rate):
        self._decisions[vm] = records.Decision(cap, self._weights[vm], rate)
        self._moved[vm] = True
        self._snapshot = None

    def decision(self, vm):
        """The decision in force for ``vm``."""
        return self._decisions[vm]

    def _view(self, tick, samples, windows, interference):
        return policy_mod.MarketView(
            tick=tick, intervals_per_epoch=self.params.intervals_per_epoch,
            specs=self._specs_ro, samples=types.MappingProxyType(samples),
            windows=types.MappingProxyType(windows),
            interference=types.MappingProxyType(interference),
            mtu_rate=self._mtu_rate_ro, caps=self._caps_ro, rates=self._rates_ro,
            ledger=self.ledger, bounds=self._bounds_ro, min_cap_pct=self.params.min_cap_pct)

    # -- one interval -----------------------------------------------------------
    def step(self, samples, windows=None):
        """Charge one interval's ``samples`` and decide the next interval's caps.

        ``samples`` maps VM -> :class:`Sample` (VMs without a sample are not
        charged); ``windows`` maps VM -> :class:`LatencyWindow` for VMs that
        reported latency. Returns ``{vm: Decision}`` for every adopted VM:
        the same dict object for as long as no decision changes (read it, do
        not modify it); :attr:`changed` names the VMs whose decision changed
        since the previous step (adoptions and reloads included).
        """
        windows = windows or {}
        p = self.params
        cpu_price, io_price = p.cpu_price, p.io_price
        rates, tally, accounts = self._rates, self._tally, self._accounts
        alpha, mtu_rate = self._alpha, self._mtu_rate
        charged_cpu = charged_io = cpu_units = 0.0
        mtu_units = seen = 0
        for vm, s in samples.items():
            t = tally.get(vm)
            if t is None:
                continue
            seen += 1
            cpu = s.cpu_pct if s.cpu_pct > 0.0 else 0.0
            mtus = s.tx_mtus if s.tx_mtus > 0 else 0
            rate = rates[vm]
            cpu_resos = cpu * cpu_price * rate
            io_resos = mtus * io_price * rate
            # Ledger.charge, inlined on the hot path (same arithmetic).
            acct = accounts[vm]
            acct.spent_cpu += cpu_resos
            acct.spent_io += io_resos
            left = acct.balance - cpu_resos - io_resos
            acct.balance = left if left > 0.0 else 0.0
            charged_cpu += cpu_resos
            charged_io += io_resos
            cpu_units += cpu
            mtu_units += mtus
            t.cpu_sum += cpu
            t.tx_mtus += mtus
            t.tx_bytes += s.tx_bytes if s.tx_bytes > 0 else 0
            r = mtu_rate[vm]
            mtu_rate[vm] = r + alpha * (mtus - r)
        if seen != len(mtu_rate):
            # VMs without a sample this interval sent nothing we saw.
            for vm, r in mtu_rate.items():
                if vm not in samples:
                    mtu_rate[vm] = r - alpha * r
        self._charged_cpu += charged_cpu
        self._charged_io += charged_io
        self._cpu_units += cpu_units
        self._mtu_units += mtu_units

        interference = {}
        baselines = self._baselines
        for vm, win in windows.items():
            tracker = baselines.get(vm)
            if tracker is None:
                continue
            interference[vm] = value = tracker.interference(win)
            t = tally[vm]
            t.intf_sum += value
            t.intf_n += 1
        self.last_interference = interference

        view = self._view(self.tick, samples, windows, interference)
        answers = self.policy.decide(view)
        taxes = self.policy.taxes()
        if taxes:
            self._taxes.extend(taxes)
        caps, bounds, decisions, tick = self._caps, self._bounds, self._decisions, self.tick + 1
        moved = self._moved
        for vm, (cap, rate) in answers.items():
            t = tally.get(vm)
            if t is None:
                continue
            floor, limit = bounds[vm]
            cap = limit if cap >= limit else (floor if cap <= floor else float(cap))
            rate = float(rate) if rate > 0.0 else 0.0
            old = caps[vm]
            if cap != old or rate != rates[vm]:
                # The old cap was in force up to the interval just charged.
                t.cap_area += old * (tick - t.since)
                t.since = tick
                if cap < t.cap_min:
                    t.cap_min = cap
                caps[vm] = cap
                rates[vm] = rate
                decisions[vm] = records.Decision(cap, self._weights[vm], rate)
                moved[vm] = True
                self._snapshot = None
        boosts = self.policy.weights()
        if boosts or self._boosted:
            self._apply_boosts(boosts)
        self.tick += 1
        self.changed = tuple(moved)
        moved.clear()
        if self._snapshot is None:
            self._snapshot = dict(decisions)
        return self._snapshot

    def _apply_boosts(self, boosts):
        """A policy's weight factors (:meth:`Policy.weights`) on top of the shares' weight."""
        decisions = self._decisions
        for vm in self._boosted | set(boosts):
            d = decisions.get(vm)
            if d is None:
                continue
            weight = max(1, min(65535, int(round(self._weights[vm] * boosts.get(vm, 1.0)))))
            if d.weight != weight:
                decisions[vm] = records.Decision(d.cap_pct, weight, d.rate)
                self._moved[vm] = True
                self._snapshot = None
        self._boosted = {vm for vm in boosts if vm in decisions}

    # -- the epoch ----------------------------------------------------------------
    def end_epoch(self):
        """Close the epoch: summarise it, replenish every balance, reset policy caps."""
        p = self.params
        vms = []
        tick, tally, caps, rates, bounds = self.tick, self._tally, self._caps, self._rates, \
            self._bounds
        accounts = dict(self.ledger.accounts())    # allocations up to date
        for vm, spec in self.specs.items():
            acct = accounts[vm]
            t = tally[vm]
            cap = caps[vm]
            span = tick - t.since_start
            area = t.cap_area + cap * (tick - t.since)
            sla = spec.sla
            vms.append(VMEpoch(
                vm, acct.allocation, acct.spent_cpu, acct.spent_io, acct.balance, rates[vm],
                (area / span) if span > 0 else cap, min(t.cap_min, cap),
                (t.cpu_sum / span) if span > 0 else 0.0, t.tx_mtus, t.tx_bytes,
                (t.intf_sum / t.intf_n) if t.intf_n else None,
                sla.latency_sla_us is not None, sla.io_class, bounds[vm][0]))
        intervals = max(1, self.tick)
        link_mtus = p.link_mtus_per_interval * intervals
        inflations = [v.interference_pct for v in vms if v.interference_pct is not None]
        summary = EpochSummary(
            epoch=self.epoch,
            intervals=self.tick,
            vms=tuple(vms),
            link_bytes_per_epoch=p.link_bytes_per_s * p.interval_s * p.intervals_per_epoch,
            link_utilisation=min(1.0, self._mtu_units / link_mtus) if link_mtus else 0.0,
            cpu_price=(self._charged_cpu / self._cpu_units) if self._cpu_units else p.cpu_price,
            io_price=(self._charged_io / self._mtu_units) if self._mtu_units else p.io_price,
            latency_inflation_pct=max(inflations) if inflations else 0.0,
            taxes=tuple(dict(zip(policy_mod.TAX_FIELDS, t)) for t in self._taxes),
        )
        self.ledger.replenish()
        self.epoch += 1
        self.tick = 0
        self._charged_cpu = self._charged_io = self._cpu_units = 0.0
        self._mtu_units = 0
        self._taxes.clear()
        for vm, t in tally.items():
            t.since = t.since_start = t.tx_mtus = t.tx_bytes = t.intf_n = 0
            t.cap_area = t.cpu_sum = t.intf_sum = 0.0
            t.cap_min = caps[vm]
        view = self._view(0, {}, {}, {})
        self.policy.start_epoch(view)
        return summary

    def balances(self):
        return {vm: self.ledger.balance(vm) for vm in self.specs}
