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

"""The host report: what congestion costs on one host, once per epoch.

Each agent publishes one :class:`HostReport` per epoch to the price board;
the Nova filter and weigher read them (:doc:`/board`, :doc:`/scheduler`).
The record is plain JSON with a ``major.minor`` version so that an agent and
a scheduler of different releases can share a board (a rolling upgrade):

* a reader accepts every minor version of its major: it ignores fields it
  does not know (a newer agent's) and gives the fields an older agent did not
  write their documented default (:data:`DEFAULTS`);
* a reader rejects another major (:class:`InvalidReport`) and the board drops
  the record: a major changes only when a field changes meaning.

Fields (version 1.7)
--------------------
``version``
    ``"major.minor"`` (:data:`VERSION`); version 1.0 wrote the integer ``1``.
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
``untaxable_utilisation`` (1.1; default: ``link_utilisation``)
    The part of ``link_utilisation`` the host's market cannot take away by
    taxing (:func:`untaxable_fractions`): traffic of VMs whose CPU use is
    within their mClock reservation, and all traffic when the host's policy
    taxes no interferer. In [0, ``link_utilisation``].
``cpu_price``
    Resos the market actually charged per CPU percent, averaged over the
    epoch, rate multipliers included (paper VI-A, "charging rate").
``io_price``
    Resos actually charged per MTU sent, averaged the same way. Above the
    base price means IOShares (Algorithm 2) is taxing an interferer.
``latency_inflation_pct``
    The latency inflation the host's latency-sensitive VMs observe, weighed
    by evidence: the larger of the tenants' consensus
    (:func:`robust_inflation_pct`: the lower median of the VMs' epoch
    interference percentages, paper Algorithm 2 line 6, with the queueing
    model of the untaxable load as one more voter) and each VM's claim up to
    what the host observes for it (:func:`claim_evidence_pct`,
    :mod:`~resex_libvirt.board.evidence`); 0 when no sensitive VM reported.
    Version 1.0 agents published the largest VM's value.
``inflation_reporters`` (1.1; default 0)
    How many sensitive VMs' reports went into ``latency_inflation_pct``.
``vms``
    Number of VMs the market holds.
``sensitive_vms``
    VMs with ``resex:latency_sla_us`` (``io_class`` ``sensitive``).
``heavy_io_vms``
    Heavy I/O VMs (see :func:`heavy_io`).
``sensitive_io_share`` / ``heavy_io_share``
    Fraction of the host's MTUs of the epoch sent by the sensitive / heavy
    I/O VMs, in [0, 1] (0 when nothing was sent). The paper's ``IOShare``
    (Algorithm 2) summed over each group.
``agent_version``
    The publishing agent's version string.
``state`` (1.2; default ``"controlling"``)
    ``"controlling"``: the agent saw the hypervisor for the epoch, and the
    figures above are what it measured. ``"blind"``: it could not (libvirt
    unavailable for at least half of the epoch's intervals, or at its end):
    the utilisation, prices and inflation then say nothing about the host,
    so a reader treats the host as if it had no report (the scheduler's
    ``unknown_host_policy``), never as clean. A reader treats any value it
    does not know as ``"blind"``.
``projects`` (1.3; default ``[]``)
    The VMs counted above, broken down by the Keystone project that owns them
    (Nova's ``<nova:owner>``, :attr:`~resex_libvirt.hypervisor.base.VMInfo.project`):
    a list of ``{"project": ID, "vms": n, "sensitive_vms": n,
    "heavy_io_vms": n}``, most VMs first, at most :data:`MAX_PROJECTS`
    entries. VMs without a known project, and those of projects past the
    bound, are in no entry (``vms`` minus the entries' sum). The board is the
    operators' and the scheduler's, never a tenant's: no tenant reads another
    tenant's project from it. The bound keeps the record under
    :data:`MAX_RECORD_BYTES`, the size every reader since 1.0 accepts, so a
    scheduler of an older release still reads a 1.3 record (and ignores the
    field).
``addresses`` (1.4; default ``{}``)
    The VMs' addresses, ``{vm: [address, ...]}`` (the VM as the market names
    it, its UUID on a libvirt host): Nova's fixed IPs and the interfaces'
    MACs (:func:`~resex_libvirt.fabric.domain_xml.vm_addresses`), so that a
    latency report naming its peer on another host can be traced there
    (:func:`~resex_libvirt.board.addresses.resolve`). Latency-sensitive VMs
    first, then the others, as many as keep the record under
    :data:`MAX_RECORD_BYTES` (:func:`~resex_libvirt.board.addresses.fit`);
    at most 8 addresses a VM. A reader leaves out addresses of a kind it
    does not know; a wrong shape rejects the record
    (:func:`~resex_libvirt.board.addresses.normalize`).
``remote_claims`` (1.5; default ``[]``)
    The host's latency-sensitive VMs whose windows name a peer that is none
    of the host's own VMs (:mod:`~resex_libvirt.board.remote_claims`): a list of
    ``{"vm", "peer", "sla_us", "threshold_pct", "statistic", "count",
    "mean_us", "std_us", "p99_us"}`` and optionally ``"new"`` (its requests
    new since the previous report), the victim's SLA and latest window,
    so that the peer's host can find the victims of its port
    (:func:`~resex_libvirt.board.remote_claims.on_host`). At most
    :data:`~resex_libvirt.board.remote_claims.MAX_CLAIMS`, the worst first, written
    before the addresses and within :data:`MAX_RECORD_BYTES`; a wrong shape
    rejects the record.
``ensembles`` (1.6; default ``[]``)
    The host's latency-sensitive VMs that belong to an ensemble
    (:mod:`~resex_libvirt.board.ensembles`) and have a window: a list of
    ``{"ensemble", "vm", "sla_us", "threshold_pct", "statistic", "count",
    "mean_us", "std_us", "p99_us"}``, each member's own SLA and latest
    window under its group's identifier, so that every host with a member
    of the group can judge it (:func:`~resex_libvirt.board.ensembles.judge`).
    At most :data:`~resex_libvirt.board.ensembles.MAX_MEMBERS`, the worst
    first, written after the remote claims and before the addresses, within
    :data:`MAX_RECORD_BYTES`; a wrong shape rejects the record.
``link_tx`` (1.7; default ``{}``)
    ``{link name: bytes a second}``: what the host's VMs sent over the last
    sampling period (5 s) to destinations beyond each declared shared link it sends into
    (a destination on another host behind the same link stays inside it;
    one on no known host, or counted as ``other``, is taken as beyond),
    counted per destination by the kernel (``[fabric] count_peers``, with
    ``[remote_claims] topology_file``). A link's readers take it instead of
    the host's port load times the link's ``share``
    (:func:`~resex_libvirt.board.links.load`). At most
    :data:`MAX_LINK_TX` links, names of 1 to 255 characters, rates finite
    and at most :data:`MAX_BYTES_PER_S`; written before the remote claims,
    within :data:`MAX_RECORD_BYTES`; a wrong shape rejects the record.

The congestion index
--------------------
:func:`congestion_index` is the latency inflation, in percent of its base
latency, that a *new* latency-sensitive VM should expect on the host *after
the host's market has acted*::

    CI = max(latency_inflation_pct, 100 * rho / (1 - rho))
    rho = min(untaxable + TAXABLE_LOAD_WEIGHT * (link_utilisation - untaxable), 0.99)

The second term is the mean slowdown of the M/G/1 processor-sharing queue:
a request of size x on a link shared with background utilisation ``rho``
takes ``x / (1 - rho)`` on average, *whatever the distribution of the other
tenants' message sizes* (PS mean response time is insensitive to the
service distribution, Kleinrock 1976, Vol. II 4.4; M/M/1 FIFO gives the same
mean). An InfiniBand link arbitrates between queue pairs round-robin, which
is what PS idealises. It is conservative: it assumes the request's whole
latency is link time, while part of it is compute (ResEx paper, Ranadive et
al. 2011, Fig. 2, CTime).

Taxable load counts for :data:`TAXABLE_LOAD_WEIGHT` of itself: when a
newcomer's interference passes its threshold, IOShares raises the
interferer's price and cuts its CPU cap (paper Algorithm 2), and with it its
VMM-bypass traffic, until the newcomer is back under its threshold; what the
newcomer still suffers from that load is the transient before the tax takes
hold and the cap's imprecision. Load the market cannot cut (reserved CPU, a
policy that taxes no one) counts in full.

The first term is the evidence: what the sensitive VMs already on the host
measure, after control. It catches interference the utilisation does not
show (many small messages, contention in the HCA rather than on the wire:
paper Section III, WTime and PTime grow "due to the interfering load at the
device level"). ``rho`` is clamped at 0.99 (CI at most 9900 %).

The prices are reported but deliberately left out of the index: they measure
how hard the market is *working* (a raised ``io_price`` means an interferer
is capped), while the index must predict the *outcome* a newcomer sees.
"""

import dataclasses
import json
import math
import typing

import numpy as np

from resex_libvirt.board import addresses as addresses_mod
from resex_libvirt.board import ensembles as ensembles_mod
from resex_libvirt.board import evidence as evidence_mod
from resex_libvirt.board import remote_claims as remote_mod
from resex_libvirt import exceptions

#: The schema version this module writes: ``"major.minor"``.
VERSION = "1.7"

#: The major version this module reads (any minor of it).
MAJOR = 1

#: Fields added after 1.0, and the value a reader gives them when an older
#: agent's record lacks them (``None``: derived, see :meth:`HostReport.__post_init__`).
DEFAULTS = {"untaxable_utilisation": None, "inflation_reporters": 0, "state": "controlling",
            "projects": (), "addresses": (), "remote_claims": (),
            "ensembles": (), "link_tx": ()}

#: Most shared links a report's ``link_tx`` names, and the largest rate (bytes/s).
MAX_LINK_TX = 8
MAX_BYTES_PER_S = 1e13

#: ``state``: the agent saw the hypervisor for the epoch / it could not.
CONTROLLING, BLIND = "controlling", "blind"

#: The fraction of taxable load (traffic the host's market can tax away) a
#: newcomer still suffers once the market has acted: see the module
#: docstring. With the default congestion threshold of 10 % a host whose
#: load is all taxable starts refusing latency-sensitive VMs at 60.6 % link
#: utilisation, one whose load is all untaxable at 9.1 %.
TAXABLE_LOAD_WEIGHT = 0.15

#: A VM's reported interference percentage is clamped to this (the index's
#: own ceiling) before it votes in :func:`robust_inflation_pct`.
MAX_VM_INFLATION_PCT = 9900.0

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

#: Longest accepted record (bytes of JSON): a report is about 600 bytes without
#: projects, and under 5000 with :data:`MAX_PROJECTS` of the longest IDs.
MAX_RECORD_BYTES = 8192

#: Most projects a report lists (``projects``), and the longest project ID.
MAX_PROJECTS = 32
MAX_PROJECT_CHARS = 64

#: Largest count a record may carry (``vms``, ``epoch``...): exact in a double,
#: so every reader can do arithmetic with it (a JSON integer has no bound).
MAX_COUNT = 2 ** 53 - 1

#: Largest ``latency_inflation_pct`` a reader accepts: ten million times the
#: base latency is no measurement (agents since 1.1 publish at most
#: :data:`MAX_VM_INFLATION_PCT`), and the scheduler's arithmetic on the index
#: stays far from overflow.
MAX_INFLATION_PCT = 1e9


class ProjectCount(typing.NamedTuple):
    """One entry of a report's ``projects``: a project's VMs on the host."""

    project: str
    vms: int
    sensitive_vms: int = 0
    heavy_io_vms: int = 0

    def to_dict(self):
        return self._asdict()


class InvalidReport(exceptions.ResexError, ValueError):
    """A host report failed validation (unknown version, bad type, non-finite)."""


#: Integer fields, and float fields with their bounds (validated in this order).
_COUNTS = ("epoch", "vms", "sensitive_vms", "heavy_io_vms", "inflation_reporters")
_FLOATS = (
    ("ts", 0.0, math.inf),
    ("link_capacity_bytes_per_s", 1e-9, math.inf),
    ("link_utilisation", 0.0, 1.0),
    ("untaxable_utilisation", 0.0, 1.0),
    ("cpu_price", 0.0, math.inf),
    ("io_price", 0.0, math.inf),
    ("latency_inflation_pct", 0.0, MAX_INFLATION_PCT),
    ("sensitive_io_share", 0.0, 1.0),
    ("heavy_io_share", 0.0, 1.0),
)


def _shown(value):
    """``value`` for an error message: short, and never the repr of a nested value.

    A record's values are untrusted: the repr of an array nested 900 deep
    (which JSON parses) passes the recursion limit, and one of 8 KB floods
    the log.
    """
    if isinstance(value, (list, tuple, dict)):
        return "a JSON %s of %d" % ("object" if isinstance(value, dict) else "array", len(value))
    if type(value) is int and value.bit_length() > 64:
        return "an integer of %d bits" % value.bit_length()
    text = repr(value)
    return text if len(text) <= 64 else text[:60] + "..."


def _finite(name, value, lo=None, hi=None):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidReport("%s must be a number, got %s" % (name, _shown(value)))
    try:
        value = float(value)
    except OverflowError as exc:
        # An integer of hundreds of digits: JSON numbers have no bound.
        raise InvalidReport("%s must be finite, got an integer of %d bits"
                            % (name, value.bit_length())) from exc
    if not math.isfinite(value):
        raise InvalidReport("%s must be finite, got %r" % (name, value))
    if lo is not None and value < lo:
        raise InvalidReport("%s must be >= %g, got %r" % (name, lo, value))
    if hi is not None and hi != math.inf and value > hi:
        raise InvalidReport("%s must be <= %g, got %r" % (name, hi, value))
    return value


def _count(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidReport("%s must be a non-negative integer, got %s" % (name, _shown(value)))
    if value > MAX_COUNT:
        raise InvalidReport("%s must be <= %d, got an integer of %d bits"
                            % (name, MAX_COUNT, value.bit_length()))
    return value


def _unicode(name, value):
    """``value``, unless it holds a lone surrogate (JSON's ``\\ud800``): no UTF-8 encodes it."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidReport("%s is not valid Unicode" % name) from exc
    return value


def _text(name, value, allow_empty=False):
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise InvalidReport("%s must be a non-empty string, got %s" % (name, _shown(value)))
    if len(value) > 255:
        raise InvalidReport("%s is longer than 255 characters" % name)
    return _unicode(name, value)


def _project_count(entry):
    if isinstance(entry, ProjectCount):
        return entry
    if not isinstance(entry, dict):
        raise InvalidReport("a projects entry must be an object, got %s" % _shown(entry))
    project = entry.get("project")
    if not isinstance(project, str) or not project or len(project) > MAX_PROJECT_CHARS:
        raise InvalidReport("a projects entry needs a project ID of 1 to %d characters"
                            % MAX_PROJECT_CHARS)
    _unicode("a project ID", project)
    # Keys a newer minor version adds to an entry are ignored, as a record's are.
    counts = [_count(name, entry.get(name, 0)) for name in ProjectCount._fields[1:]]
    return ProjectCount(project, *counts)


def _projects(value, vms):
    """A report's ``projects`` as a tuple of :class:`ProjectCount`, validated."""
    if not isinstance(value, (list, tuple)):
        raise InvalidReport("projects must be a list, got %s" % _shown(value))
    if len(value) > MAX_PROJECTS:
        raise InvalidReport("projects lists more than %d projects" % MAX_PROJECTS)
    out = tuple(_project_count(entry) for entry in value)
    if len({p.project for p in out}) != len(out):
        raise InvalidReport("projects names a project twice")
    if any(p.sensitive_vms > p.vms or p.heavy_io_vms > p.vms for p in out):
        raise InvalidReport("a project's sensitive_vms and heavy_io_vms must be <= its vms")
    if sum(p.vms for p in out) > vms:
        raise InvalidReport("projects count more VMs than the report's vms")
    return out


def _per_vm(normalize, value, name, bound, counted):
    """``normalize(value)`` (a per-VM field), at most ``bound`` entries, or InvalidReport."""
    try:
        out = normalize(value)
    except ValueError as exc:
        raise InvalidReport(str(exc)) from exc
    if len(out) > bound:
        raise InvalidReport("%s lists more VMs than the report's %s" % (name, counted))
    return out


def _addresses(value, vms):
    """A report's ``addresses``, validated (:func:`~resex_libvirt.board.addresses.normalize`)."""
    return _per_vm(addresses_mod.normalize, value, "addresses", vms, "vms")


def _remote_claims(value, sensitive_vms):
    """A report's ``remote_claims``, validated (:func:`~.remote_claims.normalize`)."""
    return _per_vm(remote_mod.normalize, value, "remote_claims", sensitive_vms, "sensitive_vms")


def _link_tx(value):
    """A report's ``link_tx`` as sorted ``(link, bytes/s)`` pairs, or InvalidReport."""
    items = value.items() if isinstance(value, dict) else value
    if not isinstance(value, (dict, tuple, list)):
        raise InvalidReport("link_tx must be an object, got %s" % _shown(value))
    out = {}
    for pair in items:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise InvalidReport("link_tx must map link names to rates")
        name, rate = pair
        _text("a link_tx link", name)
        if name in out:
            raise InvalidReport("link_tx names link %s twice" % _shown(name))
        out[name] = _finite("link_tx of %s" % name, rate, 0.0, MAX_BYTES_PER_S)
    if len(out) > MAX_LINK_TX:
        raise InvalidReport("link_tx names more than %d links" % MAX_LINK_TX)
    return tuple(sorted(out.items()))


def _with_link_tx_and_claims(report, link_tx, remote_claims):
    """``report`` with the ``link_tx`` and then the remote claims that fit the record's bound."""
    if link_tx:
        report = dataclasses.replace(report, link_tx=_fit_link_tx(
            link_tx, MAX_RECORD_BYTES - len(report.to_json())))
    if remote_claims:
        budget = MAX_RECORD_BYTES - len(report.to_json())
        report = dataclasses.replace(
            report, remote_claims=remote_mod.fit(remote_claims, budget))
    return report


def _fit_link_tx(link_tx, budget):
    """The busiest :data:`MAX_LINK_TX` links of ``link_tx`` whose JSON fits in ``budget`` bytes."""
    chosen, used = {}, 2
    for name, rate in sorted(link_tx.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(chosen) == MAX_LINK_TX:
            break
        cost = len(json.dumps({name: float(rate)}, separators=(",", ":"))) - 1
        if used + cost <= budget:
            used += cost
            chosen[name] = float(rate)
    return chosen


def _ensembles(value, sensitive_vms):
    """A report's ``ensembles``, validated (:func:`~.ensembles.normalize`)."""
    return _per_vm(ensembles_mod.normalize, value, "ensembles", sensitive_vms, "sensitive_vms")


def project_counts(names, projects, sensitive, heavy):
    """The ``projects`` of an epoch: rows ``names``, ``projects`` ``{vm: project ID}``.

    ``sensitive`` and ``heavy`` are the rows' flags. VMs without a project
    are left out; the :data:`MAX_PROJECTS` projects with the most VMs are
    kept (ties by ID), most first.
    """
    counts = {}
    for k, vm in enumerate(names):
        project = projects.get(vm)
        if not project:
            continue
        c = counts.setdefault(project, [0, 0, 0])
        c[0] += 1
        c[1] += bool(sensitive[k])
        c[2] += bool(heavy[k])
    ranked = sorted(counts.items(), key=lambda item: (-item[1][0], item[0]))
    return tuple(ProjectCount(p, *c) for p, c in ranked[:MAX_PROJECTS]
                 if len(p) <= MAX_PROJECT_CHARS)


def heavy_io(columns, host_mtus, link_utilisation):
    """Per VM of an epoch summary's ``columns``: is it a heavy I/O tenant this epoch?

    ``io_class`` ``bulk`` (declared), or at least :data:`HEAVY_IO_HOST_SHARE`
    of the host's ``host_mtus`` while that share of the link is at least
    :data:`HEAVY_IO_MIN_LINK_FRACTION` of its capacity (observed).
    """
    heavy = np.array([io_class == "bulk" for io_class in columns["io_class"]], dtype=bool)
    if host_mtus > 0:
        share = columns["tx_mtus"] / host_mtus
        heavy |= (share >= HEAVY_IO_HOST_SHARE) & (share * link_utilisation
                                                   >= HEAVY_IO_MIN_LINK_FRACTION)
    return heavy


def queueing_inflation_pct(link_utilisation):
    """Mean slowdown of an M/G/1-PS link at ``link_utilisation``, in percent."""
    rho = min(max(0.0, float(link_utilisation)), RHO_MAX)
    return 100.0 * rho / (1.0 - rho)


def effective_utilisation(link_utilisation, untaxable_utilisation):
    """The utilisation a newcomer meets after the market acted (module docstring)."""
    taxable = max(0.0, link_utilisation - untaxable_utilisation)
    return untaxable_utilisation + TAXABLE_LOAD_WEIGHT * taxable


def untaxable_fractions(columns, taxes_interferers=True):
    """Per VM of an epoch summary's ``columns``: the untaxable fraction of its traffic.

    The market's only lever on a VMM-bypass VM's I/O is its CPU cap (ResEx
    paper, Section IV), which it never lowers below the VM's floor
    (``cap_floor``: the mClock reservation, or the market's minimum cap). A
    VM using ``cpu`` percent can therefore be cut to ``floor / cpu`` of its
    traffic at most: that fraction is untaxable, the rest taxable. With a
    policy that taxes no interferer (``taxes_interferers`` False) all of it
    is untaxable.
    """
    floor = np.nan_to_num(columns["cap_floor"], nan=0.0)
    if not taxes_interferers:
        return np.ones(len(floor))
    cpu = columns["cpu_pct_mean"]
    fraction = np.divide(floor, cpu, out=np.ones(len(floor)), where=cpu > floor)
    fraction[floor <= 0.0] = 0.0
    return fraction


def robust_inflation_pct(values, model_pct):
    """The host's observed inflation from its sensitive VMs' ``values``, tenant-bounded.

    Each VM's value is clamped to [0, :data:`MAX_VM_INFLATION_PCT`]; the
    result is the **lower median** of those values together with one more
    voter, ``model_pct`` (the queueing model's prediction for the load the
    market cannot tax). So a VM moves the result only as far as the honest
    voters around it: a lone VM, however absurd its reports, can pull the
    result down to its own value but never above the model's, and VMs
    reporting absurd latencies change nothing while they are fewer than the
    other voters. 0 when ``values`` is empty.
    """
    votes = [min(max(0.0, float(v)), MAX_VM_INFLATION_PCT) for v in values]
    if not votes:
        return 0.0
    votes.append(min(max(0.0, float(model_pct)), MAX_VM_INFLATION_PCT))
    votes.sort()
    return votes[(len(votes) - 1) // 2]


def claim_evidence_pct(columns, claiming, link_utilisation, fractions, run_delays):
    """What the host's evidence supports for each claiming VM (rows ``claiming``), in percent.

    The larger of two observations no tenant can forge: the queueing model
    of the *other* VMs' untaxable load on the link (``fractions``:
    :func:`untaxable_fractions`; the sender mix: a VM's own traffic never
    counts for it) and its vCPUs' run-queue delay (``run_delays``,
    :func:`~resex_libvirt.board.evidence.cpu_evidence_pct`), counted only
    while the VM's cap stayed at its full size (a cap's throttling is run
    delay too).
    """
    mtus = np.maximum(columns["tx_mtus"], 0)
    host_mtus = float(mtus.sum())
    untaxed = mtus * fractions
    total = float(untaxed.sum())
    names, cap_min = columns["vm"], columns["cap_min"]
    out = []
    for k in np.flatnonzero(claiming).tolist():
        others = (link_utilisation * min(1.0, max(0.0, total - untaxed[k]) / host_mtus)
                  if host_mtus else 0.0)
        delay = run_delays.get(names[k])
        capped = delay is not None and cap_min[k] < 100.0 * delay.vcpus - 1e-6
        out.append(max(queueing_inflation_pct(others),
                       evidence_mod.cpu_evidence_pct(delay, capped)))
    return out


def congestion_index(report):
    """Expected latency inflation (percent) of a new sensitive VM on the host.

    Computed once per record (:attr:`HostReport.congestion_index` caches it).
    """
    return report.congestion_index


def parse_version(version):
    """``(major, minor)`` of a record's ``version`` (``"1.1"``, or 1.0's integer ``1``)."""
    if type(version) is int:
        return version, 0
    if isinstance(version, str) and len(version) <= 16 and version.isascii():
        # ASCII first: str.isdigit() is true for "\u00b2", which int() refuses.
        major, sep, minor = version.partition(".")
        if sep and major.isdigit() and minor.isdigit():
            return int(major), int(minor)
    raise InvalidReport("malformed report version %s" % _shown(version))


@dataclasses.dataclass(frozen=True, slots=True)
class HostReport:
    """One host's epoch, as published on the board (fields: module docstring).

    ``congestion_index`` is derived (not a constructor argument, not on the
    wire), computed once when the record is built.
    """

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
    version: str = VERSION
    untaxable_utilisation: float | None = None
    inflation_reporters: int = 0
    state: str = CONTROLLING
    projects: tuple = ()
    addresses: tuple = ()
    remote_claims: tuple = ()
    ensembles: tuple = ()
    link_tx: tuple = ()
    congestion_index: float = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        major, _minor = parse_version(self.version)
        if major != MAJOR:
            raise InvalidReport("unknown report version %s (this reader knows %d.x)"
                                % (_shown(self.version), MAJOR))
        _text("host", self.host)
        _text("agent_version", self.agent_version, allow_empty=True)
        _text("state", self.state)
        if self.untaxable_utilisation is None:
            # An older agent: all of its load counts as untaxable (the safe side).
            object.__setattr__(self, "untaxable_utilisation", self.link_utilisation)
        for name in _COUNTS:
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value <= MAX_COUNT:
                _count(name, value)
        if self.sensitive_vms > self.vms or self.heavy_io_vms > self.vms:
            raise InvalidReport("sensitive_vms and heavy_io_vms must be <= vms")
        if type(self.projects) is not tuple or self.projects:
            object.__setattr__(self, "projects", _projects(self.projects, self.vms))
        if type(self.addresses) is not tuple or self.addresses:
            object.__setattr__(self, "addresses", _addresses(self.addresses, self.vms))
        if type(self.remote_claims) is not tuple or self.remote_claims:
            object.__setattr__(self, "remote_claims",
                               _remote_claims(self.remote_claims, self.sensitive_vms))
        if type(self.ensembles) is not tuple or self.ensembles:
            object.__setattr__(self, "ensembles", _ensembles(self.ensembles, self.sensitive_vms))
        if type(self.link_tx) is not tuple or self.link_tx:
            object.__setattr__(self, "link_tx", _link_tx(self.link_tx))
        for name, lo, hi in _FLOATS:
            value = getattr(self, name)
            # Fast path (a snapshot validates every host's record): a float in
            # range; NaN fails the comparison, infinity the explicit test.
            if type(value) is float and lo <= value <= hi and value != math.inf:
                continue
            object.__setattr__(self, name, _finite(name, value, lo, hi))
        if self.untaxable_utilisation > self.link_utilisation:
            object.__setattr__(self, "untaxable_utilisation", self.link_utilisation)
        rho = effective_utilisation(self.link_utilisation, self.untaxable_utilisation)
        object.__setattr__(self, "congestion_index", max(
            self.latency_inflation_pct, queueing_inflation_pct(rho)))

    # -- building ---------------------------------------------------------------
    @classmethod
    def from_summary(cls, host, ts, summary, link_capacity_bytes_per_s, agent_version,
                     taxes_interferers=True, run_delays=None, state=CONTROLLING,
                     projects=None, addresses=None, remote_claims=None, ensembles=None,
                     link_tx=None):
        """Build the report of ``summary`` (a market ``EpochSummary``) closed at ``ts``.

        ``taxes_interferers`` says whether the host's policy taxes
        interferers (IOShares does; FreeMarket and no control do not): when
        it does not, all load is untaxable. ``run_delays`` (``{vm:
        RunDelay}`` of the epoch, :class:`~resex_libvirt.board.evidence.RunDelayMeter`)
        is the host's evidence of CPU contention (:func:`claim_evidence_pct`).
        ``state``: :data:`BLIND` when the agent could not see the hypervisor
        for the epoch. ``projects`` (``{vm: project ID}``) gives the report's
        ``projects`` (:func:`project_counts`), ``addresses`` (``{vm:
        [address, ...]}``) its ``addresses``, as many as fit, after
        ``remote_claims`` (:class:`~resex_libvirt.board.remote_claims.Claim`,
        from :func:`~resex_libvirt.board.remote_claims.of_windows`), the worst
        that fit, and after ``ensembles`` (:class:`~resex_libvirt.board.ensembles.Member`,
        from :func:`~resex_libvirt.board.ensembles.of_windows`), the worst that fit.
        ``link_tx`` (``{link: bytes/s}``) its ``link_tx``, the busiest
        :data:`MAX_LINK_TX` links that fit, before the claims.
        """
        columns = summary.columns
        mtus = np.maximum(columns["tx_mtus"], 0)
        host_mtus = int(mtus.sum())
        util = min(1.0, max(0.0, float(summary.link_utilisation)))
        sensitive = np.asarray(columns["sensitive"], dtype=bool)
        heavy = heavy_io(columns, host_mtus, util)

        def share(group):
            return (int(mtus[group].sum()) / host_mtus) if host_mtus else 0.0

        fractions = untaxable_fractions(columns, taxes_interferers)
        if host_mtus:
            # Added in row order, as a sum over the VMs.
            untaxed = float(np.add.accumulate(mtus * fractions)[-1])
            untaxable = util * min(1.0, untaxed / host_mtus)
        else:
            untaxable = util if not taxes_interferers else 0.0
        inflation = columns["interference_pct"]
        claiming = sensitive & np.isfinite(inflation)
        claims = inflation[claiming].tolist()
        model = queueing_inflation_pct(untaxable)
        published = robust_inflation_pct(claims, model)
        if claims:
            published = evidence_mod.heard_inflation_pct(
                claims, claim_evidence_pct(columns, claiming, util, fractions,
                                           run_delays or {}), published)
        report = cls(
            host=host,
            ts=float(ts),
            epoch=int(summary.epoch),
            link_capacity_bytes_per_s=float(link_capacity_bytes_per_s),
            link_utilisation=util,
            untaxable_utilisation=min(util, untaxable),
            cpu_price=float(summary.cpu_price),
            io_price=float(summary.io_price),
            latency_inflation_pct=published,
            inflation_reporters=len(claims),
            vms=len(mtus),
            sensitive_vms=int(np.count_nonzero(sensitive)),
            heavy_io_vms=int(np.count_nonzero(heavy)),
            sensitive_io_share=min(1.0, share(sensitive)),
            heavy_io_share=min(1.0, share(heavy)),
            agent_version=str(agent_version),
            state=state,
            projects=project_counts(columns["vm"], projects or {}, sensitive, heavy),
        )
        report = _with_link_tx_and_claims(report, link_tx, remote_claims)
        if ensembles:
            budget = MAX_RECORD_BYTES - len(report.to_json())
            report = dataclasses.replace(report, ensembles=ensembles_mod.fit(ensembles, budget))
        if not addresses:
            return report
        # What the record without them leaves of the bound every reader accepts.
        budget = MAX_RECORD_BYTES - len(report.to_json())
        first = [vm for vm, flag in zip(columns["vm"], sensitive.tolist()) if flag]
        return dataclasses.replace(report, addresses=addresses_mod.fit(addresses, budget, first))

    # -- derived ------------------------------------------------------------------
    @property
    def blind(self):
        """True unless the agent saw the hypervisor for the epoch (any unknown state too)."""
        return self.state != CONTROLLING

    def age(self, now):
        """Seconds since the report's epoch closed (negative if from the future)."""
        return now - self.ts

    # -- wire format ----------------------------------------------------------------
    def to_dict(self):
        out = {name: getattr(self, name) for name in _FIELD_ORDER}
        out["projects"] = [p.to_dict() for p in self.projects]
        out["addresses"] = {vm: list(addrs) for vm, addrs in self.addresses}
        out["remote_claims"] = [c.to_dict() for c in self.remote_claims]
        out["ensembles"] = [m.to_dict() for m in self.ensembles]
        out["link_tx"] = dict(self.link_tx)
        return out

    def link_tx_of(self, link):
        """The bytes a second the host said it sent beyond shared link ``link``, or None."""
        for name, rate in self.link_tx:
            if name == link:
                return rate
        return None

    def to_json(self):
        """Compact JSON text, keys sorted (the board stores this)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"),
                          allow_nan=False)

    @classmethod
    def from_dict(cls, data):
        """Validate ``data`` (a decoded record) into a report or raise InvalidReport.

        Fields this reader does not know are ignored (a newer minor version);
        fields added after 1.0 that are missing take :data:`DEFAULTS`.
        """
        if not isinstance(data, dict):
            raise InvalidReport("a report must be a JSON object, got %s" % type(data).__name__)
        major, _minor = parse_version(data.get("version"))
        if major != MAJOR:
            raise InvalidReport("unknown report version %s (this reader knows %d.x)"
                                % (_shown(data.get("version")), MAJOR))
        keys = data.keys()
        if keys != _FIELD_NAMES:
            missing = _REQUIRED - keys
            if missing:
                raise InvalidReport("missing fields: %s" % ", ".join(sorted(missing)))
            data = {k: v for k, v in data.items() if k in _FIELD_NAMES}
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
        try:
            data = _DECODER.decode(text)
        except InvalidReport:
            raise
        except ValueError as exc:
            # Also an integer of more than 4300 digits (int's conversion limit).
            raise InvalidReport("not JSON: %s" % exc) from exc
        except RecursionError as exc:
            # "[[[[..." within the size bound nests past the interpreter's limit.
            raise InvalidReport("not JSON: nested too deeply") from exc
        return cls.from_dict(data)


def _no_constants(name):
    raise InvalidReport("non-finite number %s" % name)


def _unique_keys(pairs):
    """A JSON object as a dict; a key given twice is ambiguous (readers differ on which wins)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise InvalidReport("a key is given twice in one object")
    return out


_DECODER = json.JSONDecoder(parse_constant=_no_constants, object_pairs_hook=_unique_keys)


#: The wire fields, in declaration order (``congestion_index`` is derived).
_FIELD_ORDER = tuple(f.name for f in dataclasses.fields(HostReport) if f.init)
_FIELD_NAMES = frozenset(_FIELD_ORDER)
_REQUIRED = _FIELD_NAMES - DEFAULTS.keys()
