"""The host report: what congestion costs on one host, once per epoch.

Each agent publishes one :class:`HostReport` per epoch to the price board
(DESIGN.md, "The interfaces that hold it together"); the Nova filter and
weigher read them. The record is plain, versioned JSON so that an agent and
a scheduler of different releases can share a board: a reader that meets a
version it does not know rejects the record (:class:`InvalidReport`) and the
board drops it, it never guesses.

Fields (version 1)
------------------
``version``
    Schema version, the integer :data:`VERSION`.
``host``
    The compute host's name, as Nova knows it (``CONF.host`` of the
    nova-compute service on that node; ``HostState.host`` in the scheduler).
``ts``
    Wall-clock time the epoch closed, seconds since the Unix epoch. Readers
    judge freshness by it and by nothing else (a key may outlive its agent:
    etcd leases survive an etcd restart).
``epoch``
    The market's epoch counter (``EpochSummary.epoch``); restarts at 0 when
    the agent restarts.
``link_capacity_bytes_per_s``
    Nominal capacity of the host's RDMA/IB link (the market's I/O supply,
    paper Section VI-A), bytes per second, > 0.
``link_utilisation``
    Fraction of that capacity the VMs sent during the epoch, in [0, 1]
    (MTUs sent over the link's MTUs per epoch).
``cpu_price``
    Resos the market actually charged per CPU percent, averaged over the
    epoch, rate multipliers included (paper VI-A, "charging rate").
``io_price``
    Resos actually charged per MTU sent, averaged the same way. Above the
    base price means IOShares (Algorithm 2) is taxing an interferer.
``latency_inflation_pct``
    The worst latency inflation observed by the host's latency-sensitive
    VMs: the largest per-VM mean interference percentage of the epoch (paper
    Algorithm 2 line 6: increase of the latency mean or deviation over the
    VM's base), >= 0; 0 when no sensitive VM reported.
``vms``
    Number of VMs the market holds.
``sensitive_vms``
    VMs with ``resex:latency_sla_us`` (``io_class`` ``sensitive``).
``heavy_io_vms``
    Heavy I/O VMs (see :func:`is_heavy_io`).
``sensitive_io_share`` / ``heavy_io_share``
    Fraction of the host's MTUs of the epoch sent by the sensitive / heavy
    I/O VMs, in [0, 1] (0 when nothing was sent). The paper's ``IOShare``
    (Algorithm 2) summed over each group.
``agent_version``
    The publishing agent's version string.

The congestion index
--------------------
:func:`congestion_index` is the latency inflation, in percent of its base
latency, that a *new* latency-sensitive VM should expect on the host::

    CI = max(latency_inflation_pct, 100 * rho / (1 - rho)),  rho = min(u, 0.99)

The second term is the mean slowdown of the M/G/1 processor-sharing queue:
a request of size x on a link shared with background utilisation ``rho``
takes ``x / (1 - rho)`` on average, *whatever the distribution of the other
tenants' message sizes* (PS mean response time is insensitive to the
service distribution, Kleinrock 1976, Vol. II 4.4; M/M/1 FIFO gives the same
mean). An InfiniBand link arbitrates between queue pairs round-robin, which
is what PS idealises. It is conservative: it assumes the request's whole
latency is link time, while part of it is compute (paper Fig. 2, CTime), so
it over-predicts for compute-heavy requests and is exact for pure RDMA
transfers. The first term is the evidence: what the sensitive VMs already on
the host measure. It is a floor, because a measurement beats a model, and
it catches interference the utilisation does not show (many small
messages, contention in the HCA rather than on the wire: paper Section III,
WTime and PTime grow "due to the interfering load at the device level").
``rho`` is clamped at 0.99 (CI at most 9900 %) to keep the index finite.

The prices are reported but deliberately left out of the index: they measure
how hard the market is *working* (a raised ``io_price`` means an interferer
is capped), while the index must predict the *outcome* a newcomer sees,
which is already in the observed inflation after control.
"""

import dataclasses
import json
import math

from resex_libvirt import exceptions

#: The schema version this module writes and reads.
VERSION = 1

#: A VM sending at least this fraction of the host's MTUs in an epoch is heavy
#: I/O (with :data:`HEAVY_IO_MIN_LINK_FRACTION`): a majority sender is always
#: the largest sender, the VM IOShares names as the interferer (Algorithm 2)
#: whenever a sensitive neighbour complains, whatever the others do.
HEAVY_IO_HOST_SHARE = 0.5

#: ... and at least this fraction of the link's capacity: below 5 % the PS
#: model predicts under 5.3 % inflation, under the default SLA threshold of
#: 10 % (``resex:interference_threshold_pct``), so a chatty VM on an idle
#: host is not flagged.
HEAVY_IO_MIN_LINK_FRACTION = 0.05

#: Utilisation at which the queueing term saturates (keeps the index finite).
RHO_MAX = 0.99

#: Longest accepted record (bytes of JSON): a report is about 400 bytes.
MAX_RECORD_BYTES = 8192


class InvalidReport(exceptions.ResexError, ValueError):
    """A host report failed validation (unknown version, bad type, non-finite)."""


#: Integer fields, and float fields with their bounds (validated in this order).
_COUNTS = ("epoch", "vms", "sensitive_vms", "heavy_io_vms")
_FLOATS = (
    ("ts", 0.0, math.inf),
    ("link_capacity_bytes_per_s", 1e-9, math.inf),
    ("link_utilisation", 0.0, 1.0),
    ("cpu_price", 0.0, math.inf),
    ("io_price", 0.0, math.inf),
    ("latency_inflation_pct", 0.0, math.inf),
    ("sensitive_io_share", 0.0, 1.0),
    ("heavy_io_share", 0.0, 1.0),
)


def _finite(name, value, lo=None, hi=None):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidReport("%s must be a number, got %r" % (name, value))
    value = float(value)
    if not math.isfinite(value):
        raise InvalidReport("%s must be finite, got %r" % (name, value))
    if lo is not None and value < lo:
        raise InvalidReport("%s must be >= %g, got %r" % (name, lo, value))
    if hi is not None and hi != math.inf and value > hi:
        raise InvalidReport("%s must be <= %g, got %r" % (name, hi, value))
    return value


def _count(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidReport("%s must be a non-negative integer, got %r" % (name, value))
    return value


def _text(name, value, allow_empty=False):
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise InvalidReport("%s must be a non-empty string, got %r" % (name, value))
    if len(value) > 255:
        raise InvalidReport("%s is longer than 255 characters" % name)
    return value


def is_heavy_io(vm_epoch, host_mtus, link_utilisation):
    """True when the VM is a heavy I/O tenant this epoch.

    ``io_class`` ``bulk`` (declared), or at least :data:`HEAVY_IO_HOST_SHARE`
    of the host's ``host_mtus`` while that share of the link is at least
    :data:`HEAVY_IO_MIN_LINK_FRACTION` of its capacity (observed).
    """
    if vm_epoch.io_class == "bulk":
        return True
    if host_mtus <= 0:
        return False
    share = vm_epoch.tx_mtus / host_mtus
    return share >= HEAVY_IO_HOST_SHARE and share * link_utilisation >= HEAVY_IO_MIN_LINK_FRACTION


def queueing_inflation_pct(link_utilisation):
    """Mean slowdown of an M/G/1-PS link at ``link_utilisation``, in percent."""
    rho = min(max(0.0, float(link_utilisation)), RHO_MAX)
    return 100.0 * rho / (1.0 - rho)


def congestion_index(report):
    """Expected latency inflation (percent) of a new sensitive VM on the host."""
    return max(report.latency_inflation_pct, queueing_inflation_pct(report.link_utilisation))


@dataclasses.dataclass(frozen=True, slots=True)
class HostReport:
    """One host's epoch, as published on the board (fields: module docstring)."""

    host: str
    ts: float
    epoch: int
    link_capacity_bytes_per_s: float
    link_utilisation: float
    cpu_price: float
    io_price: float
    latency_inflation_pct: float
    vms: int
    sensitive_vms: int
    heavy_io_vms: int
    sensitive_io_share: float
    heavy_io_share: float
    agent_version: str
    version: int = VERSION

    def __post_init__(self):
        if self.version != VERSION or type(self.version) is not int:
            raise InvalidReport("unknown report version %r (this reader knows %d)"
                                % (self.version, VERSION))
        _text("host", self.host)
        _text("agent_version", self.agent_version, allow_empty=True)
        for name in _COUNTS:
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                _count(name, value)
        if self.sensitive_vms > self.vms or self.heavy_io_vms > self.vms:
            raise InvalidReport("sensitive_vms and heavy_io_vms must be <= vms")
        for name, lo, hi in _FLOATS:
            value = getattr(self, name)
            # Fast path (a snapshot validates every host's record): a float in
            # range; NaN fails the comparison, infinity the explicit test.
            if type(value) is float and lo <= value <= hi and value != math.inf:
                continue
            object.__setattr__(self, name, _finite(name, value, lo, hi))

    # -- building ---------------------------------------------------------------
    @classmethod
    def from_summary(cls, host, ts, summary, link_capacity_bytes_per_s, agent_version):
        """Build the report of ``summary`` (a market ``EpochSummary``) closed at ``ts``."""
        vms = summary.vms
        host_mtus = sum(max(0, v.tx_mtus) for v in vms)
        util = min(1.0, max(0.0, float(summary.link_utilisation)))
        sensitive = [v for v in vms if v.sensitive]
        heavy = [v for v in vms if is_heavy_io(v, host_mtus, util)]

        def share(group):
            return (sum(max(0, v.tx_mtus) for v in group) / host_mtus) if host_mtus else 0.0

        return cls(
            host=host,
            ts=float(ts),
            epoch=int(summary.epoch),
            link_capacity_bytes_per_s=float(link_capacity_bytes_per_s),
            link_utilisation=util,
            cpu_price=float(summary.cpu_price),
            io_price=float(summary.io_price),
            latency_inflation_pct=max(0.0, float(summary.latency_inflation_pct)),
            vms=len(vms),
            sensitive_vms=len(sensitive),
            heavy_io_vms=len(heavy),
            sensitive_io_share=min(1.0, share(sensitive)),
            heavy_io_share=min(1.0, share(heavy)),
            agent_version=str(agent_version),
        )

    # -- derived ------------------------------------------------------------------
    @property
    def congestion_index(self):
        """See :func:`congestion_index`."""
        return congestion_index(self)

    def age(self, now):
        """Seconds since the report's epoch closed (negative if from the future)."""
        return now - self.ts

    # -- wire format ----------------------------------------------------------------
    def to_dict(self):
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_json(self):
        """Compact JSON text, keys sorted (the board stores this)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"),
                          allow_nan=False)

    @classmethod
    def from_dict(cls, data):
        """Validate ``data`` (a decoded record) into a report or raise InvalidReport."""
        if not isinstance(data, dict):
            raise InvalidReport("a report must be a JSON object, got %s" % type(data).__name__)
        version = data.get("version")
        if version != VERSION or isinstance(version, bool):
            raise InvalidReport("unknown report version %r (this reader knows %d)"
                                % (version, VERSION))
        if data.keys() != _FIELD_NAMES:
            missing = _FIELD_NAMES - data.keys()
            if missing:
                raise InvalidReport("missing fields: %s" % ", ".join(sorted(missing)))
            unknown = data.keys() - _FIELD_NAMES
            raise InvalidReport("unknown fields: %s" % ", ".join(sorted(unknown)))
        try:
            return cls(**data)
        except TypeError as exc:
            raise InvalidReport(str(exc)) from exc

    @classmethod
    def from_json(cls, text):
        """Parse and validate one record (str or bytes) or raise InvalidReport."""
        if isinstance(text, (bytes, bytearray)):
            if len(text) > MAX_RECORD_BYTES:
                raise InvalidReport("record longer than %d bytes" % MAX_RECORD_BYTES)
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidReport("record is not UTF-8") from exc
        if not isinstance(text, str):
            raise InvalidReport("a record must be text, got %s" % type(text).__name__)
        if len(text) > MAX_RECORD_BYTES:
            raise InvalidReport("record longer than %d bytes" % MAX_RECORD_BYTES)

        def no_constants(name):
            raise InvalidReport("non-finite number %s" % name)

        try:
            data = json.loads(text, parse_constant=no_constants)
        except ValueError as exc:
            if isinstance(exc, InvalidReport):
                raise
            raise InvalidReport("not JSON: %s" % exc) from exc
        return cls.from_dict(data)


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(HostReport))
