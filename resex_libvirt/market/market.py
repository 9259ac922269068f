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

Decisions are sparse: :meth:`Market.step` returns the same mapping of the
decisions in force for as long as none changes (:class:`Decisions`, a
snapshot of the columns, no copy per interval), and :attr:`Market.changed`
names the VMs whose decision changed, so that the caller writes only those
knobs.

Every VM's state is a row of numpy columns (:mod:`.table`), so that an
interval is a few operations on whole columns whatever the number of VMs;
each rule is written once, on columns, in the same order of floating-point
operations as the per-VM rule it states (doc/source/performance.rst).
"""

import collections
import collections.abc
import dataclasses
import math
import operator
import types
import typing

import numpy as np

from resex_libvirt.market import latency
from resex_libvirt.market import ledger as ledger_mod
from resex_libvirt.market import memo
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.market import records
from resex_libvirt.market import table as table_mod

#: Xen's default credit-scheduler weight; the weight of a VM with default shares.
BASE_WEIGHT = 256
#: How fast a VM's learned base latency deviation rises (a fraction of the gap).
STD_RISE = latency.DEFAULT_RISE
_STD_RISE = table_mod.number(STD_RISE)
_TWO = table_mod.number(2, np.int64)
#: How many of an epoch's taxes its summary keeps (the last ones).
TAXES_KEPT = 50

_COUNT = operator.attrgetter("count")
_MEAN = operator.attrgetter("mean_us")
_STD = operator.attrgetter("std_us")
_P99 = operator.attrgetter("p99_us")


#: Up to this many reporting rows, their interference is worked out in Python
#: floats (:func:`interference_rows`): numpy's cost per call is then most of it.
SMALL_ROWS = 8


def interference_rows(count, mean, std, base, threshold, base_std, rows):
    """``Market``'s interference rule on a few rows, in Python floats.

    The same IEEE operations in the same order as the rule on the columns
    (``Market._intf_columns``, no tail SLA, every base above zero), and
    numpy's ``fmin``, ``fmax`` and ``maximum`` with NaN: the same bits.
    Which of two zeros of opposite signs numpy's ``fmin`` keeps depends on
    the length of the rows; a window's deviation is never ``-0.0`` (a square
    root of a sum of squares), but if one is, None (the columns decide).
    ``base_std`` (the column of learned deviations) moves with the calm
    windows; returns the arrays ``(interference, mean's increase)`` in percent.
    """
    stds = std.tolist()
    for s in stds:
        if s == 0.0 and math.copysign(1.0, s) < 0.0:
            return None
    learned = base_std[rows].tolist()
    calm_any = False
    mean_inc, value = [], []
    rise = STD_RISE
    for i, (c, m, s, b, th) in enumerate(zip(count.tolist(), mean.tolist(), stds,
                                             base.tolist(), threshold.tolist())):
        inc = (m - b) * 100.0 / b
        mean_inc.append(inc)
        if c >= 2 and inc <= th:
            old = learned[i]
            up = (s - old) * rise + old
            learned[i] = up if (up <= s or s != s) else s          # np.fmin
            calm_any = True
        std_inc = (s - learned[i]) * 100.0 / b
        v = inc if (inc >= std_inc or std_inc != std_inc) else std_inc    # np.fmax
        v = v if (v > 0.0 or v != v) else 0.0                      # np.maximum
        value.append(v if c else 0.0)
    if calm_any:
        base_std[rows] = learned
    return np.array(value), np.array(mean_inc)


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


def _names_of(names, rows):
    """The names of ``rows`` (distinct rows, in their order), as a tuple."""
    if len(rows) == 1:
        return (names[int(rows[0])],)
    return operator.itemgetter(*rows.tolist())(names)


def _full(values, n):
    """``values`` (an array, or one number for all) as an array of ``n`` floats."""
    if isinstance(values, np.ndarray):
        return values
    return table_mod.filled(n, float(values))


class VMEpoch(typing.NamedTuple):
    """One VM's epoch, as reported (a named tuple, made only when a consumer asks)."""

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


#: The columns of :attr:`EpochSummary.columns`, in :class:`VMEpoch` order.
EPOCH_COLUMNS = VMEpoch._fields


class EpochSummary:
    """What the market did during one epoch: the input of the host report.

    ``cpu_price`` and ``io_price`` are what the market actually charged on
    average (Resos per CPU percent, Resos per MTU), the rate multipliers
    included, so they rise above the base prices when IOShares taxes.

    Per VM, :attr:`columns` holds one sequence per field of :class:`VMEpoch`
    (numpy arrays for the numbers, ``interference_pct`` NaN for a VM without
    one; lists for ``vm`` and ``io_class``), in the market's row order;
    :attr:`vms` makes the :class:`VMEpoch` records from them on first use.
    Either may be given: a summary built from records (tests, tools) has
    its columns made on demand too.
    """

    def __init__(self, epoch, intervals, vms=None, link_bytes_per_epoch=0.0,
                 link_utilisation=0.0, cpu_price=1.0, io_price=1.0, latency_inflation_pct=0.0,
                 taxes=(), columns=None):
        if vms is None and columns is None:
            raise ValueError("an epoch summary needs its VMs (records or columns)")
        self.epoch = epoch
        self.intervals = intervals
        self.link_bytes_per_epoch = link_bytes_per_epoch
        self.link_utilisation = link_utilisation
        self.cpu_price = cpu_price
        self.io_price = io_price
        self.latency_inflation_pct = latency_inflation_pct
        self.taxes = taxes
        self._vms = None if vms is None else tuple(vms)
        self._columns = columns

    @property
    def columns(self):
        if self._columns is None:
            rows = self._vms
            cols = {}
            for k, field in enumerate(EPOCH_COLUMNS):
                values = [r[k] for r in rows]
                if field in ("vm", "io_class"):
                    cols[field] = values
                elif field == "interference_pct":
                    cols[field] = np.array([np.nan if v is None else v for v in values],
                                           dtype=np.float64)
                elif field == "sensitive":
                    cols[field] = np.array(values, dtype=bool)
                elif field in ("tx_mtus", "tx_bytes"):
                    cols[field] = np.array(values, dtype=np.int64)
                else:
                    cols[field] = np.array(values, dtype=np.float64)
            self._columns = cols
        return self._columns

    @property
    def vms(self):
        if self._vms is None:
            cols = self._columns
            lists = []
            for field in EPOCH_COLUMNS:
                col = cols[field]
                values = col if isinstance(col, list) else col.tolist()
                if field == "interference_pct":
                    values = [None if v != v else v for v in values]
                lists.append(values)
            self._vms = tuple(map(VMEpoch._make, zip(*lists)))
        return self._vms

    def row(self, k):
        """The :class:`VMEpoch` of the VM in row ``k`` (made from the columns)."""
        if self._vms is not None:
            return self._vms[k]
        values = []
        for field in EPOCH_COLUMNS:
            value = self._columns[field][k]
            value = value.item() if isinstance(value, np.generic) else value
            if field == "interference_pct" and value != value:
                value = None
            values.append(value)
        return VMEpoch._make(values)

    def vm(self, name):
        for rec in self.vms:
            if rec.vm == name:
                return rec
        raise KeyError(name)

    def __len__(self):
        return len(self._vms) if self._vms is not None else len(self._columns["vm"])


class WindowsSeen(typing.NamedTuple):
    """The latency windows a step took, for the caller's tallies (read, never written).

    ``rows`` are the rows (of :attr:`Market.layout`) of the VMs with a
    latency SLA that reported; ``count``, ``mean_us`` and ``intf`` (their
    interference percentage) are aligned with them. ``others`` is
    ``[(row, LatencyWindow)]`` of the VMs without an SLA that reported:
    the market has no use for them, a caller may.
    """

    rows: np.ndarray
    count: np.ndarray
    mean_us: np.ndarray
    intf: np.ndarray
    others: list


_NO_WINDOWS = WindowsSeen(np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.int64),
                          np.zeros(0), np.zeros(0), [])
_NO_REPORTS = policy_mod.Reports(policy_mod.read_only(np.zeros(0, dtype=np.intp)),
                                 policy_mod.read_only(np.zeros(0)),
                                 policy_mod.read_only(np.zeros(0)))


class _WindowLayout(typing.NamedTuple):
    """Which rows the latency windows of a step are (the same VMs report step after step)."""

    rows: np.ndarray
    select: list
    others: list
    sla_us: np.ndarray
    threshold: np.ndarray
    tail: np.ndarray


class Decisions(collections.abc.Mapping):
    """VM -> :class:`Decision` in force after a step.

    A snapshot of the market's columns taken when a decision changed; each
    :class:`Decision` is made when it is read (a step may change hundreds
    of caps that nobody reads one by one).
    """

    __slots__ = ("_names", "_slots", "_cap", "_weight", "_rate")

    def __init__(self, names, slots, cap, weight, rate):
        self._names, self._slots = names, slots
        self._cap, self._weight, self._rate = cap, weight, rate

    @property
    def caps(self):
        """Every VM's cap in force, aligned with the rows of the step's layout (read only)."""
        return self._cap

    def __getitem__(self, vm):
        k = self._slots[vm]
        return tuple.__new__(records.Decision, (float(self._cap[k]), int(self._weight[k]),
                                                float(self._rate[k])))

    def get(self, vm, default=None):
        if vm not in self._slots:
            return default
        return self[vm]

    def __contains__(self, vm):
        return vm in self._slots

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)


#: Columns of the market's table: ``{name: (fill, dtype)}``.
_COLUMNS = {
    # The VM's SLA, as the market uses it.
    "floor": (0.0, np.float64), "limit": (0.0, np.float64), "weight": (BASE_WEIGHT, np.int64),
    # The weight decided: the shares' weight, times a policy's boost (Policy.weights).
    "dweight": (BASE_WEIGHT, np.int64),
    "sensitive": (False, bool), "sla_us": (np.nan, np.float64),
    "threshold": (np.nan, np.float64), "io_class": ("", object),
    # The SLA is on the windows' p99 (``resex:latency_statistic``), not their mean.
    "tail": (False, bool),
    # What is in force, and the recent I/O rate.
    "cap": (0.0, np.float64), "rate": (1.0, np.float64), "mtu_rate": (0.0, np.float64),
    # The learned base latency deviation (NaN: none yet).
    "base_std": (np.nan, np.float64),
    # This interval's inputs.
    "seen": (False, bool), "cpu_pct": (0.0, np.float64), "tx_mtus": (0, np.int64),
    "delay_pct": (0.0, np.float64),
    "tx_bytes": (0, np.int64), "win": (False, bool), "win_count": (0, np.int64),
    "win_mean": (np.nan, np.float64), "intf": (np.nan, np.float64),
    # The window's standard deviation, and its requests new since the last window.
    "win_std": (np.nan, np.float64), "win_new": (0, np.int64),
    # The epoch's tallies; the cap is integrated over ticks on change.
    "t_since": (0, np.int64), "t_start": (0, np.int64), "t_cap_area": (0.0, np.float64),
    "t_cap_min": (np.inf, np.float64), "t_cpu": (0.0, np.float64), "t_mtus": (0, np.int64),
    "t_bytes": (0, np.int64), "t_intf_sum": (0.0, np.float64), "t_intf_n": (0, np.int64),
    # Why each VM has its cap (the policies' answers, policy.REASONS).
    "reason": (policy_mod.UNCAPPED, object),
}


class Market:
    """The Reso market of one host.

    Every VM's state is a row of :attr:`table` (:mod:`.table`); one interval
    is a few operations on whole columns, whatever the number of VMs.
    """

    def __init__(self, params, policy, mtu_ewma_intervals=None, guard=False):
        self.params = params
        # Check every step that the policy reads the market's columns as they are.
        self._guard = guard
        self.table = t = table_mod.Table()
        for name, (fill, dtype) in _COLUMNS.items():
            t.column(name, fill, dtype)
        self.ledger = ledger_mod.Ledger(params.cpu_supply, params.io_supply, table=t)
        self.specs = {}
        self._specs_ro = types.MappingProxyType(self.specs)
        # The policy's view of the columns (made again when a VM joins or leaves).
        self._vms = memo.Memo(lambda _version: policy_mod.VMColumns(self.table))
        self._reports = _NO_REPORTS
        self._state = None
        self._snapshot = None
        # The rows' names and slots, copied once per change of the rows: for
        # the decisions' snapshot and the balance reader.
        self._layout = memo.Memo(lambda _version: (list(t.names), dict(t.slots)))
        self._moved = {}
        # The rows the last answers moved (named in the step's end, at once).
        self._moved_rows = None
        #: The VMs whose decision changed in (or before) the last :meth:`step`.
        self.changed = ()
        self.tick = 0
        self.epoch = 0
        # Epoch totals of the VMs that left during the epoch (the others' are
        # their rows): charged CPU and I/O Resos, CPU percent, MTUs.
        self._gone = [0.0, 0.0, 0.0, 0]
        # Each interval's taxes (a policy's sequence, made into tuples only
        # if it is among the last TAXES_KEPT of the epoch).
        self._taxes = collections.deque(maxlen=TAXES_KEPT)
        n = mtu_ewma_intervals or max(1.0, params.intervals_per_epoch / 20.0)
        self._alpha = table_mod.number(1.0 / n)
        self._cpu_price = table_mod.number(params.cpu_price)
        self._io_price = table_mod.number(params.io_price)
        self._interference = None
        self._win_layout = memo.Memo(self._window_layout)
        self._odd_base = False
        self._boosted = set()
        #: The latency windows the last step took (:class:`WindowsSeen`).
        self.windows_seen = _NO_WINDOWS
        self.policy = None
        self._install(policy if policy is not None else policy_mod.NoControl())

    @property
    def layout(self):
        """The market's rows (:class:`~.table.Layout`): what samples are aligned with."""
        return self.table.layout()

    @property
    def state(self):
        """The policy's own per-VM state: the columns it declares, a row per VM."""
        return self._state

    def _install(self, policy):
        """Make ``policy`` the market's: its state fresh, every VM's reason ``uncapped``."""
        state = table_mod.Table()
        for name, (fill, dtype) in policy.columns.items():
            state.column(name, fill, dtype)
        for vm in self.table.names:
            state.add(vm)
        self._state = state
        self.policy = policy
        self.table.reason.fill(policy_mod.UNCAPPED)

    # -- membership -----------------------------------------------------------
    def _bounds_of(self, spec):
        limit = spec.limit_pct
        floor = max(spec.reservation_pct, min(self.params.min_cap_pct, limit))
        return (floor, limit)

    def add(self, spec):
        """Adopt a VM (or update its SLA); new VMs get the rest of this epoch's Resos."""
        vm = spec.vm
        t = self.table
        self.specs[vm] = spec
        floor, limit = self._bounds_of(spec)
        sla = spec.sla
        slot = t.slots.get(vm)
        if slot is None:
            slot = t.add(vm)
            self._state.add(vm)
            left = (self.params.intervals_per_epoch - self.tick) / self.params.intervals_per_epoch
            self.ledger.open_account(vm, sla.shares, fraction_left=left)
            t.cap[slot] = limit
            t.t_since[slot] = t.t_start[slot] = self.tick
            t.t_cap_min[slot] = limit
        else:
            self.ledger.set_shares(vm, sla.shares)
            cap = float(t.cap[slot])
            # At its limit a VM is uncapped, and stays so when the limit
            # moves up (a shared link's scale released, a larger flavor):
            # only a cap the market set below the limit is kept.
            if cap >= float(t.limit[slot]):
                cap = limit
            t.cap[slot] = min(limit, max(floor, cap))
        t.floor[slot] = floor
        t.limit[slot] = limit
        t.weight[slot] = weight_of(sla.shares)
        t.io_class[slot] = sla.io_class
        t.sensitive[slot] = sla.sensitive
        self._win_layout.clear()         # which reports count may have changed
        if sla.sensitive:
            # An SLA read from a flavor is at least 1 us; one made in code may not
            # be: its reports then never count as interference (NaN, no division).
            odd = not sla.latency_sla_us > 0
            self._odd_base = self._odd_base or odd
            t.sla_us[slot] = np.nan if odd else sla.latency_sla_us
            t.threshold[slot] = sla.interference_threshold_pct
            t.tail[slot] = sla.latency_statistic == "p99"
        else:
            t.sla_us[slot] = t.threshold[slot] = t.base_std[slot] = np.nan
            t.tail[slot] = False
        self._decide(slot)

    def set_params(self, params):
        """Apply new prices, minimum cap or supply (a reload) from the next interval.

        The interval and the epoch length cannot change in a running market.
        """
        if (params.interval_s, params.intervals_per_epoch) != (
                self.params.interval_s, self.params.intervals_per_epoch):
            raise ValueError("the interval and the epoch cannot change in a running market")
        self.params = params
        self._cpu_price = table_mod.number(params.cpu_price)
        self._io_price = table_mod.number(params.io_price)
        self.ledger.set_supply(params.cpu_supply, params.io_supply)
        t = self.table
        for vm, spec in self.specs.items():
            slot = t.slots[vm]
            floor, limit = self._bounds_of(spec)
            t.floor[slot], t.limit[slot] = floor, limit
            old = float(t.cap[slot])
            cap = min(limit, max(floor, old))
            if cap != old:
                t.cap[slot] = cap
                self._decide(slot)

    def set_policy(self, policy):
        """Replace the policy; it starts from scratch: every VM at its limit, base rate."""
        self._install(policy)
        t = self.table
        for slot in np.flatnonzero((t.cap != t.limit) | (t.rate != 1.0)).tolist():
            t.cap[slot] = t.limit[slot]
            t.rate[slot] = 1.0
            self._decide(slot)

    def remove(self, vm):
        """Forget a VM that left the host."""
        if vm not in self.specs:
            return
        t = self.table
        slot = t.slots[vm]
        gone = self._gone
        gone[0] += float(t.spent_cpu[slot])
        gone[1] += float(t.spent_io[slot])
        gone[2] += float(t.t_cpu[slot])
        gone[3] += int(t.t_mtus[slot])
        del self.specs[vm]
        self.ledger.close_account(vm)
        t.remove(vm)
        self._state.remove(vm)
        self._moved.pop(vm, None)
        self._boosted.discard(vm)
        self._interference = None
        self._snapshot = None

    def _decide(self, slot):
        t = self.table
        t.dweight[slot] = t.weight[slot]
        self._moved[t.names[slot]] = True
        self._snapshot = None

    def decision(self, vm):
        """The decision in force for ``vm``."""
        t = self.table
        k = t.slots[vm]
        return records.Decision(float(t.cap[k]), int(t.dweight[k]), float(t.rate[k]))

    def reason(self, vm):
        """Why ``vm`` has the cap it has (:data:`policy.REASONS`; ``uncapped`` if not here)."""
        k = self.table.slots.get(vm)
        return policy_mod.UNCAPPED if k is None else self.table.reason[k]

    def reasons(self):
        """``{vm: reason}`` of every VM (:meth:`reason`)."""
        return dict(zip(self.table.names, self.table.reason.tolist()))

    # -- one interval -----------------------------------------------------------
    def step(self, samples, windows=None):
        """Charge one interval's ``samples`` and decide the next interval's caps.

        ``samples`` maps VM -> :class:`Sample` (VMs without a sample are not
        charged): a :class:`~.records.SampleBatch` (the sampler's)
        whose columns are aligned with the market's rows, which is read
        without a per-VM loop. ``windows`` maps VM -> :class:`LatencyWindow`
        for VMs that reported latency. Returns the :class:`Decisions` in force
        for every adopted VM (a read-only mapping VM -> :class:`Decision`):
        the same object for as long as no decision changes; :attr:`changed`
        names the VMs whose decision changed since the previous step
        (adoptions and reloads included).
        """
        samples = self._take_samples(samples)
        self._charge()
        self._take_windows(windows)
        self._interference = None
        self.ledger.refresh()

        answer = self.policy.decide(self._step(self.tick, self._reports))
        boosts = None
        if answer is not None:
            if answer.taxes:
                self._taxes.append(answer.taxes)
            self._apply(answer.caps)
            if answer.reasons:
                self._note(answer.reasons)
            boosts = answer.weights
        if boosts or self._boosted:
            self._apply_boosts(boosts or {})
        self.tick += 1
        moved = self._moved
        if self._moved_rows is not None and not moved:
            # Only this step's answers moved (the common case): their names in one call.
            rows = self._moved_rows
            self.changed = _names_of(self.table.names, rows)
        else:
            if self._moved_rows is not None:
                moved.update(dict.fromkeys(_names_of(self.table.names, self._moved_rows)))
            self.changed = tuple(moved)
            moved.clear()
        self._moved_rows = None
        if self._snapshot is None:
            t = self.table
            names, slots = self._layout(t.version)
            self._snapshot = Decisions(names, slots, t.cap.copy(), t.dweight.copy(),
                                       t.rate.copy())
        return self._snapshot

    def _take_samples(self, samples):
        """This interval's usage into the ``seen``, ``cpu_pct``, ``tx_mtus``, ``tx_bytes`` rows.

        A :class:`~.records.SampleBatch` aligned with the market's rows is
        read as it is; any other mapping of samples is aligned first, once
        (:meth:`~.records.SampleBatch.of`). Returns the batch.
        """
        t = self.table
        got = samples.columns_for(t.version) if isinstance(samples, records.SampleBatch) else None
        if got is None:
            samples = records.SampleBatch.of(samples, t.layout())
            got = samples.columns_for(t.version)
        t.seen, t.cpu_pct, t.tx_mtus, t.tx_bytes = got
        t.delay_pct = samples.delay_pct
        return samples

    def _charge(self):
        """Charge every sampled VM at its rate (paper Alg. 1 lines 4-7), update the tallies.

        A VM's charge is ``(CPU% x cpu_price + MTUs x io_price) x rate``; its
        balance never goes below zero (:mod:`.ledger`). A VM without a sample
        is charged nothing (its row of the interval's usage is zero) and its
        recent MTU rate decays.
        """
        t = self.table
        cpu, mtus = t.cpu_pct, t.tx_mtus      # never below zero (_take_samples)
        rate = t.rate
        cpu_resos = cpu * self._cpu_price
        cpu_resos *= rate
        io_resos = mtus * self._io_price
        io_resos *= rate
        t.spent_cpu += cpu_resos
        t.spent_io += io_resos
        left = t.balance - cpu_resos
        left -= io_resos
        # In place, as every column a policy reads (its view is of these arrays).
        np.maximum(left, table_mod.ZERO, out=t.balance)
        t.t_cpu += cpu
        t.t_mtus += mtus
        t.t_bytes += t.tx_bytes
        r = t.mtu_rate
        # r + alpha x (0 - r) is exactly r - alpha x r: one rule for every row.
        gain = mtus - r
        gain *= self._alpha
        r += gain

    def _take_windows(self, windows):
        """Latency windows of the sensitive VMs, and their interference (Alg. 2 line 6).

        :func:`interference_pct` after :meth:`BaselineTracker.observe` (their
        one-VM reference, ``tests/unit/market/reference.py``), for every reporting VM at
        once: the larger of the mean's and the learned deviation's increase
        over the SLA, in percent of the SLA's mean; the deviation is learned
        from calm windows only.
        """
        t = self.table
        keys = tuple(windows) if windows else ()
        # A new layout clears the window columns; else the same VMs reported as
        # in the last step: the same rows, and the rows of the others are clear.
        rows, select, others, base, threshold, tail = self._win_layout((t.version, keys))
        wins = list(windows.values()) if windows else []
        other = [(k, wins[i]) for i, k in others] if others else []
        if select is not None:
            wins = [wins[i] for i in select]
        n = len(rows)
        if not n:
            self._reports = _NO_REPORTS
            self.windows_seen = _NO_WINDOWS._replace(others=other) if other else _NO_WINDOWS
            return
        count = np.fromiter(map(_COUNT, wins), np.int64, n)
        mean = np.fromiter(map(_MEAN, wins), np.float64, n)
        std = np.fromiter(map(_STD, wins), np.float64, n)
        if tail is not None:
            # A tail SLA: the windows' p99 is the statistic, and the deviation
            # rule (a mean's) does not apply to it.
            mean = np.where(tail, np.fromiter(map(_P99, wins), np.float64, n), mean)
        fresh = self._new_requests(rows, wins, count, mean, std)
        t.win_std[rows] = std
        got = None
        if tail is None and not self._odd_base and n <= SMALL_ROWS:
            got = interference_rows(count, mean, std, base, threshold, t.base_std, rows)
        if got is None:
            got = self._intf_columns(rows, count, mean, std, base, threshold, tail)
        value, mean_inc = got
        t.win_count[rows] = count
        t.win_mean[rows] = mean
        t.win_new[rows] = fresh
        t.intf[rows] = value
        value.setflags(write=False)
        mean_inc.setflags(write=False)
        self._reports = policy_mod.Reports(rows, value, mean_inc)
        self.windows_seen = WindowsSeen(rows, count, mean, value, other)
        t.t_intf_sum[rows] += value
        t.t_intf_n += t.win           # the rows of this layout (as ``rows``)

    def _intf_columns(self, rows, count, mean, std, base, threshold, tail):
        """``(interference, mean's increase)`` of the windows (%), on the columns.

        The deviation learned (``base_std``) moves with the calm windows.
        """
        t = self.table
        n = len(rows)
        if tail is not None:
            std = np.where(tail, np.nan, std)
        mean_inc = mean - base
        mean_inc *= table_mod.HUNDRED
        mean_inc /= base
        learned = t.base_std[rows]
        calm = count >= _TWO
        calm &= mean_inc <= threshold
        if np.count_nonzero(calm):
            # Up by STD_RISE of the way to a higher deviation, down to a lower
            # one at once: the smaller of the two (STD_RISE < 1), and this
            # one where none is learned yet (fmin ignores the NaN).
            rise = std - learned
            rise *= _STD_RISE
            rise += learned
            np.fmin(rise, std, out=rise)
            np.copyto(learned, rise, where=calm)
            t.base_std[rows] = learned
        std_inc = std - learned
        std_inc *= table_mod.HUNDRED
        std_inc /= base
        # The larger increase (fmax ignores the NaN of a deviation not learned yet).
        value = np.fmax(mean_inc, std_inc)
        np.maximum(value, table_mod.ZERO, out=value)
        if self._odd_base or np.count_nonzero(count) != n:
            void = count == 0
            if self._odd_base:
                void |= ~(base > 0.0)
            np.copyto(value, 0.0, where=void)
        return value, mean_inc

    def _new_requests(self, rows, wins, count, mean, std):
        """Per window, its requests new since the last window of its VM.

        What the window says (``LatencyWindow.new``); where it does not say,
        none if it equals the last one taken (the same window handed again),
        else all of its requests.
        """
        told = [w.new for w in wins]
        if None not in told:
            # Every window says (the simulator's, the agent's): nothing to compare.
            return np.array(told, dtype=count.dtype)
        t = self.table
        same = count == t.win_count[rows]
        same &= mean == t.win_mean[rows]
        same &= std == t.win_std[rows]
        fresh = np.where(same, 0, count)
        told = [(i, w.new) for i, w in enumerate(wins) if w.new is not None]
        for i, got in told:
            fresh[i] = got
        return fresh

    def _window_layout(self, key):
        """The :class:`_WindowLayout` of the windows of ``key`` (version, names): a new one.

        The window columns are cleared and the reporting rows marked (``win``).
        """
        t = self.table
        t.win.fill(False)
        t.win_count.fill(0)
        t.win_mean.fill(np.nan)
        t.win_std.fill(np.nan)
        t.win_new.fill(0)
        t.intf.fill(np.nan)
        rows, select, others = self._window_rows(key[1])
        rows.setflags(write=False)
        # Their SLAs, read once: a changed SLA (``add``) drops the layout.
        tail = t.tail[rows]
        t.win[rows] = True
        return _WindowLayout(rows, select, others, t.sla_us[rows], t.threshold[rows],
                             tail if tail.any() else None)

    def _step(self, interval, reports):
        """The policy's :class:`~.policy.Step` of this interval."""
        vms = self._vms(self.table.version)
        vms.next_interval()
        if self._guard:
            stale = vms.stale()
            if stale:
                raise RuntimeError("the market replaced its columns %s without a new view"
                                   % ", ".join(stale))
        p = self.params
        return tuple.__new__(policy_mod.Step, (
            interval, p.intervals_per_epoch, p.interval_s, self.epoch, p.pcpus, p.min_cap_pct,
            vms, reports, self._state, self._specs_ro))

    def _note(self, reasons):
        """The reasons of an answer (``{row: reason}``) into the ``reason`` column."""
        column = self.table.reason
        for k, why in reasons.items():
            column[k] = why

    def _window_rows(self, windows):
        """``(rows, select, others)`` of the windows, in their order.

        ``rows``: the rows of the VMs with a latency SLA that reported;
        ``select``: the positions of their windows among ``windows`` (None:
        all of them); ``others``: ``(position, row)`` of the windows of the
        market's VMs without an SLA.
        """
        if not windows:
            return np.zeros(0, dtype=np.intp), None, []
        slots, sensitive = self.table.slots, self.table.sensitive
        found = list(map(slots.get, windows))
        if None not in found:
            rows = np.array(found, dtype=np.intp)
            if np.count_nonzero(sensitive[rows]) == len(rows):
                return rows, None, []
        select, others = [], []
        for i, k in enumerate(found):
            if k is not None:
                if sensitive[k]:
                    select.append(i)
                else:
                    others.append((i, k))
        return np.array([found[i] for i in select], dtype=np.intp), select, others

    @property
    def last_interference(self):
        """``{vm: interference %}`` of the sensitive VMs that reported in the last step."""
        if self._interference is None:
            t = self.table
            self._interference = t.mapping("intf", t.win) if len(t.win) == len(t) else {}
        return self._interference

    def _apply(self, answers):
        """Clamp the policy's answers to each VM's [floor, limit]; record those that change.

        ``answers`` is a list of ``(rows, caps, rates)``; a later answer for
        a row replaces an earlier one.
        """
        if not answers:
            return
        t = self.table
        if len(answers) == 1:
            rows, caps, rates = answers[0]
            caps, rates = _full(caps, len(rows)), _full(rates, len(rows))
        else:
            rows = np.concatenate([a[0] for a in answers])
            caps = np.concatenate([_full(a[1], len(a[0])) for a in answers])
            rates = np.concatenate([_full(a[2], len(a[0])) for a in answers])
            # The last answer for a row wins.
            rows, last = np.unique(rows[::-1], return_index=True)
            caps, rates = caps[::-1][last], rates[::-1][last]
        if not len(rows):
            return
        # min then max is "limit if cap >= limit else floor if cap <= floor",
        # since floor <= limit.
        caps = np.maximum(np.minimum(caps, t.limit[rows]), t.floor[rows])
        rates = np.maximum(rates, table_mod.ZERO)
        old = t.cap[rows]
        moved = caps != old
        moved |= rates != t.rate[rows]
        changed = np.count_nonzero(moved)
        if not changed:
            return
        if changed != len(rows):
            rows, caps, rates, old = rows[moved], caps[moved], rates[moved], old[moved]
        # The old cap was in force up to the interval just charged.
        tick = self.tick + 1
        t.t_cap_area[rows] += old * (tick - t.t_since[rows])
        t.t_since[rows] = tick
        t.t_cap_min[rows] = np.minimum(t.t_cap_min[rows], caps)
        t.cap[rows] = caps
        t.rate[rows] = rates
        t.dweight[rows] = t.weight[rows]
        self._moved_rows = rows
        self._snapshot = None

    def _apply_boosts(self, boosts):
        """An answer's weight factors (``{row: factor}``) on top of the shares' weight."""
        t = self.table
        slots, weights, decided = t.slots, t.weight, t.dweight
        names = t.names
        boosts = {names[k]: factor for k, factor in boosts.items()}
        for vm in self._boosted | set(boosts):
            k = slots.get(vm)
            if k is None:
                continue
            weight = max(1, min(65535, int(round(int(weights[k]) * boosts.get(vm, 1.0)))))
            if decided[k] != weight:
                decided[k] = weight
                if self._moved_rows is not None:
                    # The answers' VMs first, as they moved first.
                    self._moved.update(dict.fromkeys(_names_of(t.names, self._moved_rows)))
                    self._moved_rows = None
                self._moved[vm] = True
                self._snapshot = None
        self._boosted = {vm for vm in boosts if vm in slots}

    # -- the epoch ----------------------------------------------------------------
    def end_epoch(self):
        """Close the epoch: summarise it, replenish every balance, reset policy caps."""
        p, t, tick = self.params, self.table, self.tick
        self.ledger.refresh()             # allocations up to date
        cap = t.cap
        span = tick - t.t_start
        some = span > 0
        per = np.where(some, span, 1)
        area = t.t_cap_area + cap * (tick - t.t_since)
        reported = t.t_intf_n > 0
        interference = np.where(reported, t.t_intf_sum / np.where(reported, t.t_intf_n, 1),
                                np.nan)
        columns = {
            "vm": list(t.names), "allocation": t.allocation.copy(),
            "spent_cpu": t.spent_cpu.copy(), "spent_io": t.spent_io.copy(),
            "balance": t.balance.copy(), "rate": t.rate.copy(),
            "cap_mean": np.where(some, area / per, cap), "cap_min": np.minimum(t.t_cap_min, cap),
            "cpu_pct_mean": np.where(some, t.t_cpu / per, 0.0), "tx_mtus": t.t_mtus.copy(),
            "tx_bytes": t.t_bytes.copy(), "interference_pct": interference,
            "sensitive": t.sensitive.copy(), "io_class": t.io_class.tolist(),
            "cap_floor": t.floor.copy(),
        }
        intervals = max(1, tick)
        link_mtus = p.link_mtus_per_interval * intervals
        gone = self._gone
        charged_cpu = table_mod.seqsum(t.spent_cpu) + gone[0]
        charged_io = table_mod.seqsum(t.spent_io) + gone[1]
        cpu_units = table_mod.seqsum(t.t_cpu) + gone[2]
        mtu_units = int(t.t_mtus.sum()) + gone[3]
        inflations = interference[reported]
        summary = EpochSummary(
            epoch=self.epoch,
            intervals=tick,
            columns=columns,
            link_bytes_per_epoch=p.link_bytes_per_s * p.interval_s * p.intervals_per_epoch,
            link_utilisation=min(1.0, mtu_units / link_mtus) if link_mtus else 0.0,
            cpu_price=(charged_cpu / cpu_units) if cpu_units else p.cpu_price,
            io_price=(charged_io / mtu_units) if mtu_units else p.io_price,
            latency_inflation_pct=float(inflations.max()) if len(inflations) else 0.0,
            taxes=self._last_taxes(),
        )
        self.ledger.replenish()
        self.epoch += 1
        self.tick = 0
        self._gone = [0.0, 0.0, 0.0, 0]
        self._taxes.clear()
        for name in ("t_since", "t_start", "t_mtus", "t_bytes", "t_intf_n"):
            getattr(t, name)[:] = 0
        for name in ("t_cap_area", "t_cpu", "t_intf_sum"):
            getattr(t, name)[:] = 0.0
        t.t_cap_min[:] = cap
        answer = self.policy.start_epoch(self._step(0, _NO_REPORTS))
        if answer is not None:
            if answer.caps or answer.taxes or answer.weights:
                raise ValueError("policy %s answered caps, taxes or weights at the epoch: "
                                 "only reasons are answered there" % self.policy.name)
            self._note(answer.reasons)
        return summary

    def _last_taxes(self):
        """The epoch's last :data:`TAXES_KEPT` taxes, as dicts of :data:`policy.TAX_FIELDS`.

        Newest interval first, only as many as are kept: a batch of hundreds
        of taxes makes tuples of its last ones only (``tail``).
        """
        parts, need = [], TAXES_KEPT
        for batch in reversed(self._taxes):
            take = min(need, len(batch))
            parts.append(batch.tail(take) if isinstance(batch, policy_mod.Taxes)
                         else list(batch)[len(batch) - take:])
            need -= take
            if not need:
                break
        return tuple(dict(zip(policy_mod.TAX_FIELDS, x))
                     for part in reversed(parts) for x in part)

    def balance_reader(self):
        """A function ``vm -> Resos left`` frozen at this step, safe to call from another thread.

        It reads this step's balances with this step's rows (KeyError for a
        VM not in the market then), so a VM joining or leaving meanwhile
        never makes it read another VM's row. For the metrics endpoint,
        which reads when it is scraped.
        """
        t = self.table
        # A copy: the market charges its balances in place.
        slots, balance = self._layout(t.version)[1], t.balance.copy()

        def read(vm):
            return float(balance[slots[vm]])
        return read

    def balances(self):
        return dict(zip(self.table.names, self.table.balance.tolist()))
