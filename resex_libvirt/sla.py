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

"""The ``resex:`` SLA keys: names, types, ranges and defaults, in one place.

Every part of the product reads a VM's latency SLA and mClock controls
through this module: the agent (from libvirt metadata, Nova flavor extra
specs or configured defaults), the simulator's scenario files, and the Nova
extra-spec validators, so that a value accepted by one part is accepted by
all of them.

CPU percentages are *percent of one physical CPU for the whole VM*, Xen's
credit-scheduler convention (``cap``): a 2-vCPU VM may use up to 200.

Keys
----
``resex:latency_sla_us``
    The VM's base request latency in microseconds (what it sees alone on
    the host). Its presence marks the VM *latency-sensitive*: only such a
    VM's latency reports can make the market tax another VM (IOShares,
    paper Section VI-C).
``resex:interference_threshold_pct``
    The interference percentage (increase of mean latency or of its
    standard deviation over the base, paper Algorithm 2 line 6) above
    which the VM's interferer is taxed. Default 10.
``resex:cpu_reservation_pct``
    mClock reservation (Gulati et al., OSDI 2010): the policy never caps the VM below it.
``resex:cpu_limit_pct``
    mClock limit: the policy never lets the VM above it.
``resex:shares``
    mClock shares: the VM's part of the host's Reso supply (paper VI-A,
    "distributed unequally, e.g. based on priority").
``resex:io_class``
    ``normal``, ``bulk`` (a heavy I/O tenant the scheduler keeps away from
    latency-sensitive ones) or ``sensitive`` (implied by
    ``resex:latency_sla_us``).
``resex:ensemble``
    Not an SLA field: the group of VMs, on any hosts, whose members' latency
    windows are judged together (:data:`ENSEMBLE`, :func:`parse_ensemble`;
    doc/source/fabric.rst, "Ensembles"). Read from the domain's own
    metadata only (or Nova's server group): a flavor is shared by many
    groups, so it is no flavor extra spec (not in :data:`KEYS`).
``resex:latency_statistic``
    Which statistic of the VM's latency windows the SLA is on: ``mean`` (the
    paper's, default) or ``p99`` (the tail). With ``p99``,
    ``resex:latency_sla_us`` is the VM's base 99th percentile and the
    interference percentage is the increase of the windows' p99 over it.
"""

import dataclasses
import math
import re

from resex_libvirt import exceptions

PREFIX = "resex:"

IO_CLASSES = ("normal", "bulk", "sensitive")

#: The latency statistics an SLA may be on: those every latency window carries.
STATISTICS = ("mean", "p99")

#: The largest CPU percentage accepted anywhere: 256 vCPUs of one pCPU each.
MAX_CPU_PCT = 25600.0


@dataclasses.dataclass(frozen=True)
class Key:
    """One ``resex:`` key: its type, bounds and default."""

    name: str
    type: type
    description: str
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None
    default: object = None

    def parse(self, raw):
        """Return the typed value of ``raw`` or raise :class:`SLAError`."""
        if isinstance(raw, bool):
            raise exceptions.SLAError(self.name, raw, "must be a %s" % self.type.__name__)
        if self.type is str:
            value = str(raw).strip().lower()
            if self.choices and value not in self.choices:
                raise exceptions.SLAError(
                    self.name, raw, "must be one of %s" % ", ".join(self.choices))
            return value
        try:
            if self.type is int:
                if isinstance(raw, float) and not raw.is_integer():
                    raise ValueError(raw)
                value = int(raw if isinstance(raw, (int, float)) else str(raw).strip())
            else:
                value = float(raw if isinstance(raw, (int, float)) else str(raw).strip())
        except (TypeError, ValueError, OverflowError) as exc:
            raise exceptions.SLAError(
                self.name, raw, "must be a%s %s" % (
                    "n" if self.type is int else "", "integer" if self.type is int else "number"),
            ) from exc
        if isinstance(value, float) and not math.isfinite(value):
            raise exceptions.SLAError(self.name, raw, "must be finite")
        if self.min is not None and value < self.min:
            raise exceptions.SLAError(self.name, raw, "must be >= %s" % _num(self.min))
        if self.max is not None and value > self.max:
            raise exceptions.SLAError(self.name, raw, "must be <= %s" % _num(self.max))
        return value


def _num(x):
    return ("%d" % x) if float(x).is_integer() else ("%g" % x)


LATENCY_SLA_US = Key(
    "resex:latency_sla_us", float,
    "Base request latency of the VM in microseconds; marks it latency-sensitive.",
    min=1.0, max=10_000_000.0)
INTERFERENCE_THRESHOLD_PCT = Key(
    "resex:interference_threshold_pct", float,
    "Interference percentage (increase of mean or standard deviation of the "
    "latency over its base) above which the interfering VM is taxed.",
    min=0.1, max=1000.0, default=10.0)
CPU_RESERVATION_PCT = Key(
    "resex:cpu_reservation_pct", float,
    "CPU the VM is always left, percent of one pCPU (mClock reservation).",
    min=0.0, max=MAX_CPU_PCT, default=0.0)
CPU_LIMIT_PCT = Key(
    "resex:cpu_limit_pct", float,
    "CPU the VM never exceeds, percent of one pCPU (mClock limit); default: 100 x vCPUs.",
    min=1.0, max=MAX_CPU_PCT)
SHARES = Key(
    "resex:shares", int,
    "The VM's relative part of the host's Reso supply (mClock shares).",
    min=1, max=65535, default=100)
IO_CLASS = Key(
    "resex:io_class", str,
    "normal, bulk (heavy I/O tenant) or sensitive (implied by resex:latency_sla_us).",
    choices=IO_CLASSES, default="normal")

LATENCY_STATISTIC = Key(
    "resex:latency_statistic", str,
    "Statistic of the latency the SLA is on: mean (default) or p99 (the tail; "
    "resex:latency_sla_us is then the base 99th percentile).",
    choices=STATISTICS, default="mean")

KEYS = {k.name: k for k in (LATENCY_SLA_US, INTERFERENCE_THRESHOLD_PCT, CPU_RESERVATION_PCT,
                            CPU_LIMIT_PCT, SHARES, IO_CLASS, LATENCY_STATISTIC)}


#: The ensemble key: a VM's group (a separate attribute of the VM, not of its SLA).
ENSEMBLE = "resex:ensemble"
#: Longest ensemble identifier (a Nova server group's UUID is 36).
MAX_ENSEMBLE_CHARS = 64
_ENSEMBLE_ID = re.compile(r"[A-Za-z0-9._-]{1,%d}" % MAX_ENSEMBLE_CHARS)


def parse_ensemble(raw):
    """The ensemble identifier ``raw`` (surrounding blanks stripped), or :class:`SLAError`.

    1 to :data:`MAX_ENSEMBLE_CHARS` characters of ``[A-Za-z0-9._-]``; case
    is kept (an identifier, not a choice).
    """
    if not isinstance(raw, str):
        raise exceptions.SLAError(ENSEMBLE, raw, "must be a text identifier")
    value = raw.strip()
    if not _ENSEMBLE_ID.fullmatch(value):
        raise exceptions.SLAError(
            ENSEMBLE, raw, "must be 1 to %d characters of A-Z a-z 0-9 . _ -"
            % MAX_ENSEMBLE_CHARS)
    return value


def is_ensemble(value):
    """True when ``value`` is a valid ensemble identifier as it stands (no blanks)."""
    return isinstance(value, str) and _ENSEMBLE_ID.fullmatch(value) is not None


@dataclasses.dataclass(frozen=True)
class SLA:
    """A VM's latency SLA and mClock controls, validated.

    ``limit_pct`` of ``None`` means "no limit beyond the VM's vCPUs"; use
    :meth:`effective_limit` to resolve it for a VM size.
    """

    latency_sla_us: float | None = None
    interference_threshold_pct: float = INTERFERENCE_THRESHOLD_PCT.default
    reservation_pct: float = CPU_RESERVATION_PCT.default
    limit_pct: float | None = None
    shares: int = SHARES.default
    io_class: str = IO_CLASS.default
    latency_statistic: str = LATENCY_STATISTIC.default

    def __post_init__(self):
        if self.latency_sla_us is not None and self.io_class != "sensitive":
            object.__setattr__(self, "io_class", "sensitive")
        if self.limit_pct is not None and self.limit_pct < self.reservation_pct:
            raise exceptions.SLAConflict(
                CPU_LIMIT_PCT.name, self.limit_pct,
                "must be >= resex:cpu_reservation_pct (%s)" % _num(self.reservation_pct))

    @property
    def sensitive(self):
        """True when the VM declared a latency SLA."""
        return self.latency_sla_us is not None

    def effective_limit(self, vcpus):
        """The cap ceiling for a VM with ``vcpus`` vCPUs (percent of one pCPU)."""
        full = 100.0 * max(1, int(vcpus))
        return full if self.limit_pct is None else min(self.limit_pct, full)

    def effective_reservation(self, vcpus):
        """The cap floor, never above the effective limit."""
        return min(self.reservation_pct, self.effective_limit(vcpus))


_FIELD_OF_KEY = {
    LATENCY_SLA_US.name: "latency_sla_us",
    INTERFERENCE_THRESHOLD_PCT.name: "interference_threshold_pct",
    CPU_RESERVATION_PCT.name: "reservation_pct",
    CPU_LIMIT_PCT.name: "limit_pct",
    SHARES.name: "shares",
    IO_CLASS.name: "io_class",
    LATENCY_STATISTIC.name: "latency_statistic",
}


def parse(specs, base=None, on_error=None):
    """Build an :class:`SLA` from a mapping of ``resex:`` keys to raw values.

    Keys outside the ``resex:`` namespace are ignored; unknown ``resex:``
    keys and invalid values raise :class:`~resex_libvirt.exceptions.SLAError`
    unless ``on_error(error)`` is given, in which case it is called and the
    value from ``base`` (or the default) applies. ``base`` is an :class:`SLA`
    whose values fill what ``specs`` does not say (configured defaults).
    """
    values = dataclasses.asdict(base) if base is not None else {}
    for key, raw in (specs or {}).items():
        if not isinstance(key, str) or not key.startswith(PREFIX):
            continue
        try:
            spec = KEYS.get(key)
            if spec is None:
                raise exceptions.SLAError(key, raw, "unknown key; known: %s" % ", ".join(KEYS))
            values[_FIELD_OF_KEY[key]] = spec.parse(raw)
        except exceptions.SLAError as exc:
            if on_error is None:
                raise
            on_error(exc)
    try:
        return SLA(**values)
    except exceptions.SLAError as exc:
        if on_error is None:
            raise
        on_error(exc)
        values.pop("limit_pct", None)
        return SLA(**values)


#: The operator's rules for who may be capped below the limit (``[agent] cap_consent``):
#: every VM (the paper's market), or only the VMs that opted in.
CONSENT_ALL = "all"
CONSENT_OPTED_IN = "opted_in"
CONSENTS = (CONSENT_ALL, CONSENT_OPTED_IN)


def opted_in(sla):
    """True when the VM agreed to be capped below its limit: ``resex:io_class=bulk``."""
    return sla.io_class == "bulk"


def under_consent(sla, rule, project=None, flavor=None, projects=(), flavors=()):
    """``sla`` as the market must apply it under the operator's consent ``rule``.

    ``all``: unchanged, the VM may be capped down to its reservation.
    ``opted_in``: a VM that did not opt in is never capped below its
    limit: its reservation is raised to the limit, so the market measures
    it, charges it and publishes it, and its cap stays its limit. A VM opts
    in by its own SLA (:func:`opted_in`) or by the operator's rule: its
    ``project`` (Keystone project ID) is one of ``projects`` or its
    ``flavor`` (Nova flavor name) one of ``flavors``; a latency-sensitive
    VM (``resex:latency_sla_us``, or ``resex:io_class=sensitive``) never
    opts in by the operator's rule. The VM's own SLA (what the tenant
    asked) is not changed: this is the copy the market is given.
    """
    return Consent(rule, projects, flavors)(sla, project=project, flavor=flavor)


@dataclasses.dataclass(frozen=True)
class Consent:
    """The operator's consent rule, as plain values (``[agent] cap_consent``, ...).

    ``rule`` is one of :data:`CONSENTS`; ``projects`` the Keystone project
    IDs and ``flavors`` the Nova flavor names whose VMs count as opted in
    under ``opted_in`` (:func:`under_consent`). Called with a VM's SLA
    (and its project and flavor, when known), it returns the SLA the
    market applies.
    """

    rule: str = CONSENT_OPTED_IN
    projects: frozenset = frozenset()
    flavors: frozenset = frozenset()

    def __post_init__(self):
        if self.rule not in CONSENTS:
            raise ValueError("unknown consent rule %r; known: %s"
                             % (self.rule, ", ".join(CONSENTS)))
        object.__setattr__(self, "projects", frozenset(
            _project_id(p) for p in self.projects if p))
        object.__setattr__(self, "flavors", frozenset(f for f in self.flavors if f))

    def consents(self, sla, project=None, flavor=None):
        """True when the VM may be capped below its limit under this rule."""
        if self.rule == CONSENT_ALL or opted_in(sla):
            return True
        if sla.sensitive or sla.io_class == "sensitive":
            return False
        return ((project is not None and _project_id(project) in self.projects) or
                flavor in self.flavors)

    def __call__(self, sla, project=None, flavor=None):
        if self.consents(sla, project, flavor):
            return sla
        return dataclasses.replace(
            sla, reservation_pct=MAX_CPU_PCT if sla.limit_pct is None else sla.limit_pct)

    def describe(self):
        """One line for operators: ``opted_in (io_class=bulk; projects: 2; flavors: m1.bulk)``."""
        if self.rule == CONSENT_ALL:
            return "all (every VM may be capped down to its reservation)"
        parts = ["io_class=bulk"]
        if self.projects:
            parts.append("projects: %d" % len(self.projects))
        if self.flavors:
            parts.append("flavors: %s" % ", ".join(sorted(self.flavors)))
        return "%s (%s)" % (self.rule, "; ".join(parts))


def _project_id(project):
    """A Keystone project ID as compared: lower case, without dashes (``uuid4().hex``)."""
    return project.strip().lower().replace("-", "")


def to_specs(sla):
    """The ``resex:`` mapping of an :class:`SLA` (defaults omitted)."""
    out = {}
    default = SLA()
    for key, field in _FIELD_OF_KEY.items():
        value = getattr(sla, field)
        if value is None or value == getattr(default, field):
            continue
        if key == IO_CLASS.name and sla.sensitive:
            continue
        out[key] = value
    return out
