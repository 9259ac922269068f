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

"""The pricing-policy interface (paper Section V-D) and the null policy.

A policy is told what happened in the interval just charged (a
:class:`MarketView`) and answers, for every VM, the CPU cap and the
charging-rate multiplier for the next interval. It keeps whatever state it
needs between calls, but it does no I/O and reads no clock: everything it
knows comes through the view. The market clamps its answers to each VM's
mClock [reservation, limit], so no policy can break those controls.

Policies are plugins: :func:`load` finds them by name in the
``resex.policies`` entry point group with stevedore, so a policy from another
distribution is selected exactly as a built-in one (``none``,
``free_market``, ``io_shares``, ...). A policy module imports this one, never
the reverse.
"""

import dataclasses
import types
import typing

import numpy as np
from stevedore import driver
from stevedore import exception as stevedore_exc
from stevedore import extension

#: The entry point group of the pricing policies.
NAMESPACE = "resex.policies"


#: Why a VM has the cap it has (:meth:`Policy.reasons`): at its limit, no control.
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
#: Every reason a policy may give, in order of display.
REASONS = (UNCAPPED, CREDIT, TAX, DECAY, PROTECTED, TARGET, NO_RESPONSE, CONTENTION)

#: The fields of one taxation record: ``taxes()`` gives tuples in this order.
TAX_FIELDS = ("victim", "interferer", "interference_pct", "io_share", "rate_increase", "rate")


@typing.runtime_checkable
class TaxBatch(typing.Protocol):
    """An interval's taxes (:meth:`Policy.taxes`) that make tuples of their last ones only."""

    def __len__(self):
        """How many taxes."""

    def tail(self, k):
        """The last ``k`` taxes, as tuples of :data:`TAX_FIELDS`."""


@dataclasses.dataclass(frozen=True)
class MarketView:
    """Read-only state of the market after the current interval was charged.

    What a policy with :meth:`Policy.decide` reads (one made per interval,
    with plain mappings: the interface of third-party policies). The
    built-in policies read the market's columns instead (:class:`SlotView`).

    ``tick`` is the index of that interval within the epoch (0-based).
    ``mtu_rate`` is each VM's recent MTUs per interval (an exponentially
    weighted mean), the usage that IOShares compares. ``interference`` is
    each latency-sensitive VM's interference percentage, from
    the market's interference rule (``doc/source/market.rst``). ``bounds`` is each
    VM's ``(floor, limit)``: the cap range the market will enforce.
    """

    tick: int
    intervals_per_epoch: int
    specs: types.MappingProxyType
    samples: types.MappingProxyType
    windows: types.MappingProxyType
    interference: types.MappingProxyType
    mtu_rate: types.MappingProxyType
    caps: types.MappingProxyType
    rates: types.MappingProxyType
    ledger: object
    bounds: types.MappingProxyType
    min_cap_pct: float = 1.0

    @property
    def epoch_fraction_left(self):
        """Fraction of the epoch still to run after this interval."""
        return (self.intervals_per_epoch - self.tick - 1) / self.intervals_per_epoch

    def clamp(self, vm, cap):
        """``cap`` bounded by the VM's reservation, limit and the minimum cap."""
        floor, limit = self.bounds[vm]
        return limit if cap >= limit else (floor if cap <= floor else cap)

    def limit(self, vm):
        return self.bounds[vm][1]


#: The market's columns a policy reads (:class:`SlotView`); it writes only its own
#: (:attr:`Policy.columns`).
READABLE = frozenset((
    "floor", "limit", "cap", "rate", "mtu_rate", "shares", "sensitive", "sla_us", "threshold",
    "balance", "allocation", "seen", "cpu_pct", "tx_mtus", "delay_pct", "win", "win_mean",
    "win_count", "intf"))


class ReadOnlyColumns:
    """The market's table as a policy may touch it: :data:`READABLE` read only, its own written.

    What a market built with ``guard=True`` hands its policy (the tests
    do, to hold every policy to its declaration); otherwise the policy
    gets the table itself, the same columns without the checks.
    """

    __slots__ = ("_t", "_own")

    def __init__(self, table, own):
        object.__setattr__(self, "_t", table)
        object.__setattr__(self, "_own", frozenset(own))

    def __len__(self):
        return len(self._t)

    @property
    def names(self):
        return tuple(self._t.names)

    @property
    def slots(self):
        return types.MappingProxyType(self._t.slots)

    @property
    def version(self):
        return self._t.version

    def name_rank(self):
        rank = self._t.name_rank().view()
        rank.flags.writeable = False
        return rank

    def __getattr__(self, name):
        if name in self._own:
            return getattr(self._t, name)
        if name not in READABLE:
            raise AttributeError("a policy reads only the market's declared columns, "
                                 "not %r" % name)
        col = getattr(self._t, name).view()
        col.flags.writeable = False
        return col

    def __setattr__(self, name, value):
        if name not in self._own:
            raise AttributeError("a policy writes only the columns it declares, not %r" % name)
        setattr(self._t, name, value)


class SlotView:
    """The market's columns, as the built-in policies read them (one per market).

    ``t`` is the market's :class:`~resex_libvirt.market.table.Table`: row
    ``i`` of every column is the VM ``t.names[i]``. The columns a policy
    reads: ``floor`` and ``limit`` (the cap range the market enforces),
    ``cap`` and ``rate`` (in force), ``mtu_rate`` (recent MTUs per
    interval), ``shares``, ``sensitive``, ``sla_us`` and ``threshold`` (the
    latency SLA, NaN without one), ``balance`` and ``allocation`` (the
    ledger), this interval's ``seen``, ``cpu_pct``, ``delay_pct`` (the
    vCPUs' run delay) and ``tx_mtus`` (the samples), ``win`` (a latency
    window arrived), ``win_mean`` and ``win_count``, and ``intf``: the
    interference percentage of each sensitive VM that reported (NaN for the others).

    A policy answers with :meth:`answer` (a VM not answered keeps its cap
    and rate); ``specs`` and ``reasons`` stay keyed by VM name, and are
    touched only for the VMs concerned.
    """

    def __init__(self, table, specs, intervals_per_epoch, min_cap_pct, ledger=None, pcpus=1):
        self.t = table
        self.specs = specs
        self.ledger = ledger
        #: The pCPUs the VMs share (the market's ``pcpus``).
        self.pcpus = pcpus
        #: This interval's samples and latency windows, as the market was given
        #: them (for :class:`MappingPolicy`; the columns hold the same).
        self.samples = self.windows = types.MappingProxyType({})
        self.intervals_per_epoch = intervals_per_epoch
        self.min_cap_pct = min_cap_pct
        self.tick = 0
        #: The rows of the sensitive VMs that reported a latency window this interval.
        self.win_rows = np.zeros(0, dtype=np.intp)
        #: Aligned with ``win_rows``: each one's interference percentage (``intf``)
        #: and its mean's increase over its SLA alone, in percent of the SLA.
        self.win_intf = self.win_mean_pct = np.zeros(0)
        #: This interval's answers: ``[(rows, caps, rates), ...]``.
        self.answers = []

    @property
    def epoch_fraction_left(self):
        """Fraction of the epoch still to run after this interval."""
        return (self.intervals_per_epoch - self.tick - 1) / self.intervals_per_epoch

    def clamp(self, caps, rows=None):
        """``caps`` bounded by each VM's floor and limit (of ``rows``, or of every VM)."""
        t = self.t
        floor, limit = (t.floor, t.limit) if rows is None else (t.floor[rows], t.limit[rows])
        # min then max: "limit if cap >= limit else floor if cap <= floor" (floor <= limit).
        return np.maximum(np.minimum(caps, limit), floor)

    def answer(self, rows, caps, rates):
        """Answer ``(cap, rate)`` for the VMs of ``rows``.

        ``rows`` are indices; ``caps`` and ``rates`` arrays or scalars. A
        later answer for a VM replaces an earlier one.
        """
        if len(rows):
            self.answers.append((rows, caps, rates))

    def answered(self):
        """Mask of the VMs answered so far this interval."""
        mask = np.zeros(len(self.t), dtype=bool)
        for rows, _caps, _rates in self.answers:
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
    """Base class: subclasses implement :meth:`decide_slots` (or :meth:`decide`).

    A policy declares what it touches: :attr:`columns` (its per-VM state,
    the only columns it writes) and :attr:`options` (its tunables).
    """

    name = None
    #: Its tunables (:class:`Option`): the keyword arguments its constructor
    #: takes, and the agent's ``[market_<name>]`` option group.
    options = ()
    #: Whether the policy caps the VMs that interfere with a latency-sensitive
    #: one. The host report counts the load of a host whose policy does not as
    #: load its market cannot tame (doc/source/scheduler.rst).
    taxes_interferers = False
    #: Per-VM state kept as columns of the market's table:
    #: ``{column: (fill, dtype)}``; the market declares them when the policy
    #: is installed and drops them when it is replaced.
    columns = {}

    def decide(self, view):
        """Return ``{vm: (cap_pct, rate)}`` for the VMs whose cap or rate changes.

        ``view`` is a :class:`MarketView`. A VM left out keeps the cap and
        rate it has (the control loop runs every millisecond in the paper's
        setting, so answers are sparse). A policy that implements
        :meth:`decide_slots` instead is never called here.
        """
        raise NotImplementedError

    #: ``decide_slots(view)``: the column interface, ``view`` a :class:`SlotView`;
    #: answers are given with :meth:`SlotView.answer`. ``None``
    #: for a policy that implements :meth:`decide`.
    decide_slots = None

    def start_epoch(self, view):
        """Called after the ledger was replenished.

        ``view`` is a :class:`SlotView` for a policy with :meth:`decide_slots`,
        a :class:`MarketView` otherwise.
        """

    def forget(self, vm):
        """Drop any state about ``vm`` (it left the host); its columns go with it."""

    def explain(self):
        """This interval's taxation decisions as plain dicts, for logs and reports."""
        return [dict(zip(TAX_FIELDS, tax)) for tax in self.taxes()]

    def taxes(self):
        """This interval's taxation decisions as tuples (cheap; see :meth:`explain`)."""
        return ()

    def weights(self):
        """``{vm: factor}``: scheduler-weight boosts on top of each VM's shares.

        Empty by default; the market multiplies the weight of a VM named here
        by its factor and restores it when the VM is no longer named.
        """
        return {}

    def reasons(self):
        """``{vm: reason}``: why each VM has the cap in force (one of :data:`REASONS`).

        A VM left out is at its limit (:data:`UNCAPPED`). The mapping is the
        policy's own, updated in place by :meth:`decide`: read it, do not keep it.
        """
        return {}


class MappingPolicy(Policy):
    """A policy with the mapping interface (:meth:`Policy.decide`), answering by columns.

    The market asks every policy through :meth:`Policy.decide_slots`; this
    adapter makes the :class:`MarketView` of plain mappings a third-party
    :meth:`~Policy.decide` reads, once per interval, and turns its answers
    into rows. Everything else is the wrapped policy's.
    """

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.taxes_interferers = inner.taxes_interferers
        self.columns = inner.columns

    def _view(self, view, tick, samples, windows, interference):
        t = view.t
        bounds = dict(zip(t.names, zip(t.floor.tolist(), t.limit.tolist())))
        return MarketView(
            tick=tick, intervals_per_epoch=view.intervals_per_epoch, specs=view.specs,
            samples=types.MappingProxyType(samples), windows=types.MappingProxyType(windows),
            interference=types.MappingProxyType(interference),
            mtu_rate=types.MappingProxyType(_mapping(t, t.mtu_rate)),
            caps=types.MappingProxyType(_mapping(t, t.cap)),
            rates=types.MappingProxyType(_mapping(t, t.rate)),
            ledger=view.ledger, bounds=types.MappingProxyType(bounds),
            min_cap_pct=view.min_cap_pct)

    def decide_slots(self, view):
        t = view.t
        interference = _mapping(t, t.intf, t.win) if len(t.win) == len(t) else {}
        answers = self.inner.decide(self._view(view, view.tick, view.samples, view.windows,
                                               interference))
        rows, caps, rates = [], [], []
        slots = t.slots
        for vm, (cap, rate) in answers.items():
            k = slots.get(vm)
            if k is not None:
                rows.append(k)
                caps.append(cap)
                rates.append(rate)
        if rows:
            view.answer(np.array(rows, dtype=np.intp), np.array(caps, dtype=np.float64),
                        np.array(rates, dtype=np.float64))

    def start_epoch(self, view):
        self.inner.start_epoch(self._view(view, 0, {}, {}, {}))

    def forget(self, vm):
        self.inner.forget(vm)

    def explain(self):
        return self.inner.explain()

    def taxes(self):
        return self.inner.taxes()

    def weights(self):
        return self.inner.weights()

    def reasons(self):
        return self.inner.reasons()


def _mapping(t, column, mask=None):
    """``{vm: value}`` of ``column`` (rows where ``mask`` is true), as Python values."""
    values = column.tolist()
    if mask is None:
        return dict(zip(t.names, values))
    return {t.names[i]: values[i] for i in np.flatnonzero(mask).tolist()}


def adapted(policy):
    """``policy`` as the market asks it: by columns (a :class:`MappingPolicy` if need be)."""
    return policy if policy.decide_slots is not None else MappingPolicy(policy)


class NoControl(Policy):
    """No control: every VM runs at its limit and pays the base price.

    The paper's "interfered" case, and what a host without resex does.
    """

    name = "none"

    def decide_slots(self, view):
        t = view.t
        off = (t.cap != t.limit).nonzero()[0]
        view.answer(off, t.limit[off], 1.0)


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
