"""The market: ledger + policy, advanced one interval at a time.

Pure: it does no I/O and reads no clock. The caller (the agent loop, the
simulator) passes each interval's samples and latency windows to
:meth:`Market.step`, applies the returned decisions, and calls
:meth:`Market.end_epoch` every ``intervals_per_epoch`` steps.

Per interval (paper Algorithms 1 and 2): charge every sampled VM at its
current rate (CPU percent x CPU price + MTUs x I/O price, times the VM's
rate multiplier), then ask the policy for caps and rates, then clamp every
cap to the VM's mClock [reservation, limit] (seed 001).
"""

import dataclasses
import types

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
    the link's MTUs per epoch.
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
        if not self.link_bytes_per_s > 0 or self.mtu < 1:
            raise ValueError("link_bytes_per_s and mtu must be positive")
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


@dataclasses.dataclass
class _Tally:
    intervals: int = 0
    cap_sum: float = 0.0
    cap_min: float = float("inf")
    cpu_sum: float = 0.0
    tx_mtus: int = 0
    tx_bytes: int = 0
    intf_sum: float = 0.0
    intf_n: int = 0


@dataclasses.dataclass(frozen=True)
class VMEpoch:
    """One VM's epoch, as reported."""

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
        self._taxes = []
        n = mtu_ewma_intervals or max(1.0, params.intervals_per_epoch / 20.0)
        self._alpha = 1.0 / n
        self.last_interference = {}

    # -- membership -----------------------------------------------------------
    def add(self, spec):
        """Adopt a VM (or update its SLA); new VMs get the rest of this epoch's Resos."""
        if spec.vm in self.specs:
            self.specs[spec.vm] = spec
            self.ledger.set_shares(spec.vm, spec.sla.shares)
            self._caps[spec.vm] = min(spec.limit_pct, max(spec.reservation_pct,
                                                          self._caps[spec.vm]))
            return
        self.specs[spec.vm] = spec
        left = (self.params.intervals_per_epoch - self.tick) / self.params.intervals_per_epoch
        self.ledger.open(spec.vm, spec.sla.shares, fraction_left=left)
        self._caps[spec.vm] = spec.limit_pct
        self._rates[spec.vm] = 1.0
        self._mtu_rate[spec.vm] = 0.0
        self._tally[spec.vm] = _Tally()
        if spec.sla.sensitive:
            self._baselines[spec.vm] = latency.BaselineTracker()

    def remove(self, vm):
        """Forget a VM that left the host."""
        if vm not in self.specs:
            return
        del self.specs[vm]
        self.ledger.close(vm)
        for table in (self._caps, self._rates, self._mtu_rate, self._baselines, self._tally,
                      self.last_interference):
            table.pop(vm, None)
        self.policy.forget(vm)

    def decision(self, vm):
        """The decision in force for ``vm``."""
        return records.Decision(cap_pct=self._caps[vm], weight=weight_of(self.specs[vm].sla.shares),
                                rate=self._rates[vm])

    # -- one interval -----------------------------------------------------------
    def step(self, samples, windows=None):
        """Charge one interval's ``samples`` and decide the next interval's caps.

        ``samples`` maps VM -> :class:`Sample` (VMs without a sample are not
        charged); ``windows`` maps VM -> :class:`LatencyWindow` for VMs that
        reported latency. Returns ``{vm: Decision}`` for every adopted VM.
        """
        windows = windows or {}
        p = self.params
        for vm, s in samples.items():
            if vm not in self.specs:
                continue
            cpu = max(0.0, float(s.cpu_pct))
            mtus = max(0, int(s.tx_mtus))
            rate = self._rates[vm]
            cpu_resos = cpu * p.cpu_price * rate
            io_resos = mtus * p.io_price * rate
            self.ledger.charge(vm, cpu_resos, io_resos)
            self._charged_cpu += cpu_resos
            self._charged_io += io_resos
            self._cpu_units += cpu
            self._mtu_units += mtus
            t = self._tally[vm]
            t.cpu_sum += cpu
            t.tx_mtus += mtus
            t.tx_bytes += max(0, int(s.tx_bytes))
        for vm in self.specs:
            mtus = samples[vm].tx_mtus if vm in samples else 0
            self._mtu_rate[vm] += self._alpha * (max(0, mtus) - self._mtu_rate[vm])

        interference = {}
        for vm, tracker in self._baselines.items():
            spec = self.specs[vm]
            win = windows.get(vm)
            if win is None:
                continue
            base_std = tracker.observe(win, spec.sla.latency_sla_us,
                                       spec.sla.interference_threshold_pct)
            interference[vm] = latency.interference_pct(win, spec.sla.latency_sla_us, base_std)
            t = self._tally[vm]
            t.intf_sum += interference[vm]
            t.intf_n += 1
        self.last_interference = interference

        view = policy_mod.MarketView(
            tick=self.tick,
            intervals_per_epoch=p.intervals_per_epoch,
            specs=types.MappingProxyType(self.specs),
            samples=types.MappingProxyType(dict(samples)),
            windows=types.MappingProxyType(dict(windows)),
            interference=types.MappingProxyType(interference),
            mtu_rate=types.MappingProxyType(self._mtu_rate),
            caps=types.MappingProxyType(self._caps),
            rates=types.MappingProxyType(self._rates),
            ledger=self.ledger,
            min_cap_pct=p.min_cap_pct,
        )
        answers = self.policy.decide(view)
        self._taxes.extend(self.policy.explain())
        out = {}
        for vm in self.specs:
            cap, rate = answers.get(vm, (self._caps[vm], self._rates[vm]))
            cap = view.clamp(vm, float(cap))
            rate = max(0.0, float(rate))
            self._caps[vm] = cap
            self._rates[vm] = rate
            t = self._tally[vm]
            t.intervals += 1
            t.cap_sum += cap
            t.cap_min = min(t.cap_min, cap)
            out[vm] = records.Decision(cap_pct=cap, weight=weight_of(self.specs[vm].sla.shares),
                                       rate=rate)
        self.tick += 1
        return out

    # -- the epoch ----------------------------------------------------------------
    def end_epoch(self):
        """Close the epoch: summarise it, replenish every balance, reset policy caps."""
        p = self.params
        vms = []
        for vm, spec in self.specs.items():
            acct = self.ledger.account(vm)
            t = self._tally[vm]
            vms.append(VMEpoch(
                vm=vm, allocation=acct.allocation, spent_cpu=acct.spent_cpu,
                spent_io=acct.spent_io, balance=acct.balance, rate=self._rates[vm],
                cap_mean=(t.cap_sum / t.intervals) if t.intervals else self._caps[vm],
                cap_min=t.cap_min if t.intervals else self._caps[vm],
                cpu_pct_mean=(t.cpu_sum / t.intervals) if t.intervals else 0.0,
                tx_mtus=t.tx_mtus, tx_bytes=t.tx_bytes,
                interference_pct=(t.intf_sum / t.intf_n) if t.intf_n else None,
                sensitive=spec.sla.sensitive, io_class=spec.sla.io_class))
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
            taxes=tuple(self._taxes[-50:]),
        )
        self.ledger.replenish()
        self.epoch += 1
        self.tick = 0
        self._charged_cpu = self._charged_io = self._cpu_units = 0.0
        self._mtu_units = 0
        self._taxes = []
        for vm in self.specs:
            self._tally[vm] = _Tally()
        view = policy_mod.MarketView(
            tick=0, intervals_per_epoch=p.intervals_per_epoch,
            specs=types.MappingProxyType(self.specs), samples=types.MappingProxyType({}),
            windows=types.MappingProxyType({}), interference=types.MappingProxyType({}),
            mtu_rate=types.MappingProxyType(self._mtu_rate),
            caps=types.MappingProxyType(self._caps), rates=types.MappingProxyType(self._rates),
            ledger=self.ledger, min_cap_pct=p.min_cap_pct)
        self.policy.start_epoch(view)
        return summary

    def balances(self):
        return {vm: self.ledger.balance(vm) for vm in self.specs}
