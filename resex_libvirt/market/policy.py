"""The pricing-policy interface (paper Section V-D) and the null policy.

A policy is told what happened in the interval just charged (a
:class:`MarketView`) and answers, for every VM, the CPU cap and the
charging-rate multiplier for the next interval. It keeps whatever state it
needs between calls, but it does no I/O and reads no clock: everything it
knows comes through the view. The market clamps its answers to each VM's
mClock [reservation, limit], so no policy can break those controls.

Policies are looked up by name through the ``resex.policies`` entry points
(``none``, ``free_market``, ``io_shares``).
"""

import dataclasses
import importlib.metadata
import types


#: The fields of one taxation record: ``taxes()`` gives tuples in this order.
TAX_FIELDS = ("victim", "interferer", "interference_pct", "io_share", "rate_increase", "rate")


@dataclasses.dataclass(frozen=True)
class MarketView:
    """Read-only state of the market after the current interval was charged.

    ``tick`` is the index of that interval within the epoch (0-based).
    ``mtu_rate`` is each VM's recent MTUs per interval (an exponentially
    weighted mean), the usage that IOShares compares. ``interference`` is
    each latency-sensitive VM's interference percentage, from
    :func:`resex_libvirt.market.latency.interference_pct`. ``bounds`` is each
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


class Policy:
    """Base class: subclasses implement :meth:`decide`."""

    name = None

    def decide(self, view):
        """Return ``{vm: (cap_pct, rate)}`` for the VMs whose cap or rate changes.

        A VM left out keeps the cap and rate it has (the control loop runs
        every millisecond in the paper's setting, so answers are sparse).
        """
        raise NotImplementedError

    def start_epoch(self, view):
        """Called after the ledger was replenished."""

    def forget(self, vm):
        """Drop any state about ``vm`` (it left the host)."""

    def explain(self):
        """This interval's taxation decisions as plain dicts, for logs and reports."""
        return [dict(zip(TAX_FIELDS, tax)) for tax in self.taxes()]

    def taxes(self):
        """This interval's taxation decisions as tuples (cheap; see :meth:`explain`)."""
        return ()


class NoControl(Policy):
    """No control: every VM runs at its limit and pays the base price.

    The paper's "interfered" case, and what a host without resex does.
    """

    name = "none"

    def decide(self, view):
        caps = view.caps
        return {vm: (limit, 1.0) for vm, (_floor, limit) in view.bounds.items()
                if caps[vm] != limit}


def _builtin():
    from resex_libvirt.market import free_market
    from resex_libvirt.market import io_shares
    return {"none": NoControl, "free_market": free_market.FreeMarket,
            "io_shares": io_shares.IOShares}


def names():
    """The registered policy names (entry points, and the built-in ones)."""
    found = {ep.name for ep in importlib.metadata.entry_points(group="resex.policies")}
    return sorted(found | set(_builtin()))


def load(name, **kwargs):
    """Instantiate the policy registered under ``name`` in ``resex.policies``."""
    for ep in importlib.metadata.entry_points(group="resex.policies"):
        if ep.name == name:
            return ep.load()(**kwargs)
    builtin = _builtin()
    if name in builtin:
        return builtin[name](**kwargs)
    raise ValueError("unknown policy %r; known: %s" % (name, ", ".join(names())))
