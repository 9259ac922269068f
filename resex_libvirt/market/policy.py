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

"""The pricing-policy contract (paper Section V-D), the null policy and the plugin loader.

A policy is :meth:`Policy.decide`: it reads one interval's :class:`Step`
(read-only: the market's columns by their full names, this interval's
latency reports, its own per-VM state) and returns an :class:`Answer`
(caps and rates for some rows, why, the interval's taxes, weight boosts).
:meth:`Policy.start_epoch` is its epoch hook; :attr:`Policy.columns` its
per-VM state, :attr:`Policy.options` its tunables. It does no I/O and reads
no clock. The market clamps every cap to the VM's mClock [reservation,
limit], so no policy can break those controls. :class:`PerVM` adapts a
policy that decides each VM alone. ``doc/source/market.rst`` has the
contract and a complete third-party policy.

Policies are plugins: :func:`load` finds them by name in the
``resex.policies`` entry point group with stevedore, so a policy from another
distribution is selected exactly as a built-in one (``none``,
``free_market``, ``io_shares``, ...). A policy module imports this one, never
the reverse.
"""

import collections.abc
import dataclasses
import types
import typing

import numpy as np
from stevedore import driver
from stevedore import exception as stevedore_exc
from stevedore import extension

#: The entry point group of the pricing policies.
NAMESPACE = "resex.policies"


#: Why a VM has the cap it has (the market's ``reason`` column): at its limit, no control.
UNCAPPED = "uncapped"
#: Cut by the FreeMarket credit rule: its Resos ran low (paper Algorithm 1).
CREDIT = "credit"
#: Taxed as an interferer: its rate was raised (paper Algorithm 2).
TAX = "tax"
#: A tax being released: no victim named it this interval, its rate decays.
DECAY = "decay"
#: Spared: it has a latency SLA and its own latency is over it.
PROTECTED = "protected"
#: Capped by the latency-target controller.
TARGET = "target"
#: Released: its victim's latency did not respond to its cap (:mod:`.response`).
NO_RESPONSE = "no_response"
#: Capped to the room a sensitive VM waiting for a pCPU leaves (:mod:`.cpu_contention`).
CONTENTION = "contention"
#: Every reason a built-in policy gives, in order of display (a plugin may give others).
REASONS = (UNCAPPED, CREDIT, TAX, DECAY, PROTECTED, TARGET, NO_RESPONSE, CONTENTION)

#: The fields of one taxation record: an answer's taxes are tuples in this order.
TAX_FIELDS = ("victim", "interferer", "interference_pct", "io_share", "rate_increase", "rate")


class Taxes(collections.abc.Sequence):
    """An interval's taxes that make the tuples of their last ones only (:meth:`tail`).

    A plain sequence of tuples of :data:`TAX_FIELDS` is an answer's taxes
    too; a policy that taxes hundreds of VMs an interval subclasses this,
    since the market keeps only an epoch's last ones.
    """

    def tail(self, k):
        """The last ``k`` taxes, as tuples of :data:`TAX_FIELDS`."""
        return [self[i] for i in range(len(self) - k, len(self))]


#: The market's columns a policy reads, by their full names: ``{name: market column}``.
#: ``floor_pct`` and ``limit_pct`` are the cap range the market enforces;
#: ``cap_pct`` and ``rate`` what is in force; ``mtu_rate`` the recent MTUs per
#: interval (an exponentially weighted mean); ``shares``, ``sensitive``,
#: ``latency_sla_us`` and ``threshold_pct`` the SLA (its interference threshold;
#: NaN without a latency SLA); ``balance`` and ``allocation`` the ledger; the
#: latency windows of this interval: ``reported`` (a window arrived),
#: ``window_count`` (its requests), ``window_new`` (those new since the last
#: window: 0 for a window handed again), ``window_mean_us``,
#: ``window_std_us`` and ``interference_pct`` (NaN for a VM that did not
#: report); ``reason``: why each cap is what it is.
MARKET_COLUMNS = types.MappingProxyType({
    "floor_pct": "floor", "limit_pct": "limit", "cap_pct": "cap", "rate": "rate",
    "mtu_rate": "mtu_rate", "shares": "shares", "sensitive": "sensitive",
    "latency_sla_us": "sla_us", "threshold_pct": "threshold", "balance": "balance",
    "allocation": "allocation", "reported": "win", "window_count": "win_count",
    "window_new": "win_new", "window_mean_us": "win_mean", "window_std_us": "win_std",
    "interference_pct": "intf", "reason": "reason"})
#: This interval's samples, by their full names: ``sampled`` (a sample arrived),
#: ``cpu_pct``, ``tx_mtus`` and ``run_delay_pct`` (the vCPUs' wait for a pCPU).
SAMPLE_COLUMNS = types.MappingProxyType({
    "sampled": "seen", "cpu_pct": "cpu_pct", "tx_mtus": "tx_mtus",
    "run_delay_pct": "delay_pct"})


def read_only(array):
    """A view of ``array`` that cannot be written."""
    view = array.view()
    view.setflags(write=False)
    return view


class VM(typing.NamedTuple):
    """One VM's row of :class:`VMColumns` (what a :class:`PerVM` policy decides on)."""

    name: str
    floor_pct: float
    limit_pct: float
    cap_pct: float
    rate: float
    mtu_rate: float
    shares: int
    sensitive: bool
    latency_sla_us: float
    threshold_pct: float
    balance: float
    allocation: float
    reported: bool
    window_count: int
    window_new: int
    window_mean_us: float
    window_std_us: float
    interference_pct: float
    reason: str
    sampled: bool
    cpu_pct: float
    tx_mtus: int
    run_delay_pct: float


class VMColumns:
    """The market's columns as a policy reads them: read-only, by their full names.

    Row ``k`` of every column is the VM ``names[k]`` (``row_of[vm]`` is its
    row); the columns are :data:`MARKET_COLUMNS` and :data:`SAMPLE_COLUMNS`,
    numpy arrays that cannot be written. They are live: a policy that keeps
    one past its step copies it. Made by the market, once per change of the
    VMs or of the policy.
    """

    def __init__(self, table):
        d = self.__dict__
        d["_table"] = table
        d["_sources"] = {}
        d["names"] = tuple(table.names)
        d["row_of"] = types.MappingProxyType(dict(table.slots))
        #: Moves whenever a VM joins or leaves (the rows change).
        d["version"] = table.version
        for name, column in MARKET_COLUMNS.items():
            source = d["_sources"][name] = getattr(table, column)
            d[name] = read_only(source)

    def __len__(self):
        return len(self.names)

    def __getattr__(self, name):
        # The samples are new arrays every interval: made read-only when first read.
        column = SAMPLE_COLUMNS.get(name)
        if column is None:
            raise AttributeError("a policy reads the market's columns %s, not %r"
                                 % (", ".join(sorted({**MARKET_COLUMNS, **SAMPLE_COLUMNS})),
                                    name))
        view = self.__dict__[name] = read_only(getattr(self._table, column))
        return view

    def __setattr__(self, name, value):
        raise AttributeError("the step is read-only: a policy answers, it does not write %r"
                             % name)

    def __delattr__(self, name):
        raise AttributeError("the step is read-only")

    def next_interval(self):
        """The market's: this interval's samples replace the last one's."""
        d = self.__dict__
        for name in SAMPLE_COLUMNS:
            d.pop(name, None)

    def stale(self):
        """The market's columns no longer behind their views (a market bug): their names."""
        table, sources = self._table, self._sources
        return [name for name, column in MARKET_COLUMNS.items()
                if getattr(table, column) is not sources[name]]

    def name_rank(self):
        """Each row's position in the VMs' names sorted."""
        d = self.__dict__
        if "_rank" not in d:
            d["_rank"] = read_only(self._table.name_rank())
        return d["_rank"]

    def clamp(self, caps, rows=None):
        """``caps`` bounded by each VM's floor and limit (of ``rows``, or of every VM)."""
        floor, limit = ((self.floor_pct, self.limit_pct) if rows is None else
                        (self.floor_pct[rows], self.limit_pct[rows]))
        # min then max: "limit if cap >= limit else floor if cap <= floor" (floor <= limit).
        return np.maximum(np.minimum(caps, limit), floor)

    def records(self):
        """Every VM's row as a :class:`VM`, in row order."""
        columns = [getattr(self, name).tolist() for name in VM._fields[1:]]
        return list(map(VM._make, zip(self.names, *columns)))


class Reports(typing.NamedTuple):
    """This interval's latency reports of the VMs with a latency SLA (read-only arrays).

    ``rows`` are the rows that reported; aligned with them, each one's
    ``interference_pct`` (the market's interference rule,
    ``doc/source/market.rst``) and ``mean_increase_pct``: its window's mean
    over its SLA, in percent of the SLA.
    """

    rows: np.ndarray
    interference_pct: np.ndarray
    mean_increase_pct: np.ndarray


class Step(typing.NamedTuple):
    """What a policy reads in one interval, after the market charged it: read-only.

    ``interval`` is the index of the interval within the epoch (0-based),
    ``epoch`` the epoch's, ``interval_s`` the length of one; ``pcpus`` the
    physical CPUs the VMs share; ``vms`` the market's columns
    (:class:`VMColumns`), ``reports`` this interval's latency reports
    (:class:`Reports`), ``specs`` each VM's :class:`~.records.VMSpec` by
    name. ``state`` is the policy's own per-VM state: the columns it
    declares (:attr:`Policy.columns`), aligned with the rows of ``vms``, the
    one thing it writes.
    """

    interval: int
    intervals_per_epoch: int
    interval_s: float
    epoch: int
    pcpus: int
    min_cap_pct: float
    vms: VMColumns
    reports: Reports
    state: object
    specs: types.MappingProxyType

    @property
    def epoch_fraction_left(self):
        """Fraction of the epoch still to run after this interval."""
        return (self.intervals_per_epoch - self.interval - 1) / self.intervals_per_epoch


class Answer:
    """What a policy decided in one interval: returned by :meth:`Policy.decide`.

    ``caps``: ``[(rows, caps, rates), ...]``, made with :meth:`cap` (a VM not
    answered keeps its cap and rate; a later answer for a row replaces an
    earlier one); ``reasons``: ``{row: reason}`` of the rows whose reason
    changes (:meth:`why`); ``taxes``: the interval's taxes (tuples of
    :data:`TAX_FIELDS`, or :class:`Taxes`); ``weights``: ``{row: factor}``,
    the scheduler-weight boosts in force on top of each VM's shares (a VM
    not named has its shares' weight).
    """

    __slots__ = ("caps", "reasons", "taxes", "weights")

    def __init__(self):
        self.caps = []
        self.reasons = {}
        self.taxes = ()
        self.weights = None

    def cap(self, rows, caps, rates=1.0):
        """Answer ``(cap, rate)`` for the VMs of ``rows`` (indices; arrays or scalars)."""
        if len(rows):
            self.caps.append((rows, caps, rates))
        return self

    def why(self, rows, reason):
        """``reason`` for each of ``rows`` (one reason, or one per row)."""
        rows = rows.tolist() if isinstance(rows, np.ndarray) else rows
        if isinstance(reason, str):
            self.reasons.update(dict.fromkeys(rows, reason))
        else:
            self.reasons.update(zip(rows, reason))
        return self

    def reason_of(self, row, vms):
        """The reason of ``row`` after this answer (``vms``: the step's columns)."""
        why = self.reasons.get(row)
        return vms.reason[row] if why is None else why

    def answered(self, n):
        """Mask of the ``n`` rows answered so far."""
        mask = np.zeros(n, dtype=bool)
        for rows, _caps, _rates in self.caps:
            mask[rows] = True
        return mask


@dataclasses.dataclass(frozen=True)
class Option:
    """One tunable of a policy, declared by the policy (no configuration read here).

    The agent offers each as ``[market_<policy>] <name>`` (its type is the
    default's: float, int or bool); the policy's constructor takes it as a
    keyword argument, checked by :func:`configure`. ``min`` and ``max`` are
    inclusive unless ``open_min`` / ``open_max``.
    """

    name: str
    default: object
    help: str
    min: float | None = None
    max: float | None = None
    open_min: bool = False
    open_max: bool = False

    def check(self, value):
        """``value`` if it is in range, else ValueError naming the option."""
        if isinstance(self.default, bool):
            if not isinstance(value, bool):
                raise ValueError("%s must be true or false, got %r" % (self.name, value))
            return value
        lo, hi = self.min, self.max
        bad = ((lo is not None and (value < lo or (self.open_min and value == lo))) or
               (hi is not None and (value > hi or (self.open_max and value == hi))) or
               value != value)
        if bad:
            raise ValueError("%s must be in %s%s, %s%s, got %r" % (
                self.name, "(" if self.open_min else "[", "-inf" if lo is None else "%g" % lo,
                "inf" if hi is None else "%g" % hi, ")" if self.open_max else "]", value))
        return value


def configure(options, given):
    """The values of ``options`` (a policy's :attr:`Policy.options`): ``given``, else defaults.

    A name not declared is a TypeError (as an unknown keyword argument is);
    a value out of range a ValueError.
    """
    known = {o.name: o for o in options}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError("unknown policy option(s): %s" % ", ".join(unknown))
    return types.SimpleNamespace(**{name: o.check(given.get(name, o.default))
                                    for name, o in known.items()})


def options_of(factory):
    """The options a policy class declares (none for a factory that is not a :class:`Policy`)."""
    if isinstance(factory, type) and issubclass(factory, Policy):
        return tuple(factory.options)
    return ()


class Policy:
    """A pricing policy: :meth:`decide` every interval, :meth:`start_epoch` every epoch.

    It declares what it touches: :attr:`columns` (its per-VM state, the
    step's ``state``: the only thing it writes) and :attr:`options` (its
    tunables).
    """

    name = None
    #: Its tunables (:class:`Option`): the keyword arguments its constructor
    #: takes, and the agent's ``[market_<name>]`` option group.
    options = ()
    #: Whether the policy caps the VMs that interfere with a latency-sensitive
    #: one. The host report counts the load of a host whose policy does not as
    #: load its market cannot tame (doc/source/scheduler.rst).
    taxes_interferers = False
    #: Per-VM state kept as columns of the step's ``state``:
    #: ``{column: (fill, dtype)}``; the market makes them when the policy is
    #: installed, adds and drops their rows with the VMs, and drops them when
    #: the policy is replaced.
    columns = {}

    def decide(self, step):
        """The :class:`Answer` to one interval's :class:`Step` (None: nothing changes)."""
        raise NotImplementedError

    def start_epoch(self, step):
        """Called after the ledger was replenished; may return an :class:`Answer` of reasons.

        The step's interval is 0 and it has no reports. Caps, taxes and
        weights are answered by :meth:`decide`, not here.
        """


class PerVM(Policy):
    """The adapter of a policy that decides each VM alone: implement :meth:`decide_vm`.

    Simpler than columns, and slower (one call per VM per interval): for a
    policy whose rule needs no other VM's state.
    """

    def decide(self, step):
        answer = Answer()
        rows, caps, rates = [], [], []
        for k, vm in enumerate(step.vms.records()):
            got = self.decide_vm(vm, step)
            if got is not None:
                cap, rate, reason = got
                rows.append(k)
                caps.append(cap)
                rates.append(rate)
                if reason is not None:
                    answer.reasons[k] = reason
        if rows:
            answer.cap(np.array(rows, dtype=np.intp), np.array(caps, dtype=np.float64),
                       np.array(rates, dtype=np.float64))
        return answer

    def decide_vm(self, vm, step):
        """``(cap_pct, rate, reason)`` of the :class:`VM` ``vm`` (reason None: unchanged).

        None: the VM keeps its cap, rate and reason.
        """
        raise NotImplementedError


class NoControl(Policy):
    """No control: every VM runs at its limit and pays the base price.

    The paper's "interfered" case, and what a host without resex does.
    """

    name = "none"

    def decide(self, step):
        vms = step.vms
        off = (vms.cap_pct != vms.limit_pct).nonzero()[0]
        return Answer().cap(off, vms.limit_pct[off], 1.0)


class UnknownPolicy(ValueError):
    """No policy of that name is installed (``names`` lists those that are)."""

    def __init__(self, name, installed):
        self.name = name
        self.installed = tuple(installed)
        super().__init__("unknown policy %r; installed policies (entry point group %s): %s"
                         % (name, NAMESPACE, ", ".join(self.installed) or "none"))


class PolicyLoadError(ValueError):
    """A policy is registered but its entry point cannot be imported."""


def names():
    """The names of the installed policies, sorted.

    Entry points are read once per process (stevedore caches them): a policy
    installed while an agent runs is seen at its next start.
    """
    manager = extension.ExtensionManager(namespace=NAMESPACE, invoke_on_load=False,
                                         on_load_failure_callback=_ignore)
    return sorted(set(manager.entry_points_names()))


def _ignore(_manager, _entry_point, _exc):
    pass


def _raise(_manager, entry_point, exc):
    raise PolicyLoadError("policy %r (%s) cannot be loaded: %s"
                          % (entry_point.name, entry_point.value, exc)) from exc


def factory(name):
    """The class (or factory) registered as ``name`` in :data:`NAMESPACE`.

    Raises :class:`UnknownPolicy` listing the installed names, or
    :class:`PolicyLoadError` if the plugin's module does not import.
    """
    try:
        manager = driver.DriverManager(namespace=NAMESPACE, name=name, invoke_on_load=False,
                                       on_load_failure_callback=_raise)
    except stevedore_exc.NoMatches:
        raise UnknownPolicy(name, names()) from None
    return manager.driver


def load(name, **kwargs):
    """Instantiate the policy registered as ``name`` with ``kwargs``."""
    return factory(name)(**kwargs)
