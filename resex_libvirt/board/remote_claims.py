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

"""Remote claims: a victim's latency window, published for the host of its peer.

A latency-sensitive VM's requests may cross another host's port: its peer
(the server it measures, named by its latency reports, ``benchex.wire``
version 2) runs elsewhere, and senders there congest that port. Only that
host's agent can cap them. So each host report (1.5) carries ``remote_claims``:
for every sensitive VM whose latency window names a peer that is none of
the host's own VMs, the window and the SLA it is judged by. The peer's host
finds the claims on its VMs in a board snapshot (:func:`on_host`, by the
addresses every host publishes, :func:`~resex_libvirt.board.addresses.resolve`)
and can treat each as a victim of its own port (doc/source/board.rst,
"Remote claims"; "Distributed resource exchange", Ranadive, Gavrilovska and
Schwan, IEEE CLUSTER 2013, whose ensembles span hosts).

A claim holds what the victim's host measured, never a price or a cap: the
serving host decides with its own market, its own counters and its own
evidence rule. The victim is named as its host's market names it (its UUID
on a libvirt host, already on the board with its addresses): no tenant,
no project.

Pure functions: no clock, no I/O.
"""

import json
import math
import typing

from benchex import wire

from resex_libvirt.board import addresses as addresses_mod

#: Most claims a report carries (the sensitive VMs whose peers are elsewhere).
MAX_CLAIMS = 16
#: Largest SLA (us) and threshold (%) a claim may state: a flavor's own bounds.
MAX_SLA_US = 1e9
MAX_THRESHOLD_PCT = 1000.0
#: Largest latency (us) a claim's window may state (an hour: anything above is a broken clock).
MAX_LATENCY_US = 3.6e9
#: Most requests a window may count.
MAX_REQUESTS = 10 ** 9
STATISTICS = ("mean", "p99")

#: The numbers an entry stating a window and its SLA carries, with their upper bounds.
WINDOW_FLOATS = (("sla_us", MAX_SLA_US), ("threshold_pct", MAX_THRESHOLD_PCT),
                 ("mean_us", MAX_LATENCY_US), ("std_us", MAX_LATENCY_US),
                 ("p99_us", MAX_LATENCY_US))
_KEYS = frozenset(("vm", "peer", "statistic", "count") + tuple(n for n, _ in WINDOW_FLOATS))


class Claim(typing.NamedTuple):
    """One victim's window and SLA, for the host of its ``peer``.

    ``vm``: the victim as its host's market names it; ``peer``: the other
    end of its requests (``benchex.wire.canonical_peer``'s text);
    ``sla_us``, ``threshold_pct`` and ``statistic`` (``"mean"`` or
    ``"p99"``): its SLA (``resex:latency_sla_us`` and friends); ``count``,
    ``mean_us``, ``std_us`` and ``p99_us``: its latest window; ``new``
    (optional, in ``[0, count]``): how many of its requests are new since the
    host's previous report (None: not said; a reader then takes them all as
    new), so that the peer's market measures the remote loop's delay as it
    measures a local one.
    """

    vm: str
    peer: str
    sla_us: float
    threshold_pct: float
    statistic: str
    count: int
    mean_us: float
    std_us: float
    p99_us: float
    new: int | None = None

    def to_dict(self):
        out = self._asdict()
        if out["new"] is None:
            del out["new"]
        return out


class Target(typing.NamedTuple):
    """A claim on one of a host's VMs: where it came from, and which local VM is the peer."""

    host: str
    ts: float
    claim: Claim
    vm: str


def claim(value):
    """One decoded claim (a mapping) as a :class:`Claim`; ``ValueError`` when its shape is wrong.

    Every key of :class:`Claim` but ``new`` is required, no other is read (a
    newer minor version may add some); the peer must be one ``benchex.wire``
    reads, the numbers finite, non-negative and within their bounds, the
    SLA above 0 (``p99_us`` need not be over ``mean_us``: a window pools
    reports whose p99s need not order that way).
    """
    vm, statistic, count, numbers = window_fields(value, _KEYS, "claim")
    peer = wire.canonical_peer(value["peer"])
    if peer is None:
        raise ValueError("VM %s: its claim's peer is no address or GID" % vm)
    new = value.get("new")
    if new is not None and (type(new) is not int or not 0 <= new <= count):
        raise ValueError("VM %s: a claim's new must be an integer in [0, count]" % vm)
    return Claim(vm=vm, peer=peer, statistic=statistic, count=count, new=new, **numbers)


def window_fields(value, keys, what):
    """``(vm, statistic, count, numbers)`` of a decoded entry that states a window and its SLA.

    The shape a remote claim and an ensemble member share (``what`` names
    it in the errors): an object with every key of ``keys``, a VM name, a
    statistic, a request count and the floats of :data:`WINDOW_FLOATS` within
    their bounds, the SLA above 0; ``ValueError`` otherwise.
    """
    if not isinstance(value, dict):
        raise ValueError("a %s must be an object, got %s" % (what, type(value).__name__))
    missing = keys - value.keys()
    if missing:
        raise ValueError("a %s lacks %s" % (what, ", ".join(sorted(missing))))
    vm = value["vm"]
    if not isinstance(vm, str) or not 0 < len(vm) <= addresses_mod.MAX_VM_CHARS:
        raise ValueError("a %s's vm must be 1 to %d characters"
                         % (what, addresses_mod.MAX_VM_CHARS))
    statistic = value["statistic"]
    if statistic not in STATISTICS:
        raise ValueError("VM %s: a %s's statistic is mean or p99" % (vm, what))
    count = value["count"]
    if type(count) is not int or not 0 <= count <= MAX_REQUESTS:
        raise ValueError("VM %s: a %s's count must be an integer in [0, %d]"
                         % (vm, what, MAX_REQUESTS))
    numbers = {}
    for name, hi in WINDOW_FLOATS:
        number = value[name]
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ValueError("VM %s: a %s's %s must be a number" % (vm, what, name))
        number = float(number)
        if not (math.isfinite(number) and 0.0 <= number <= hi):
            raise ValueError("VM %s: a %s's %s must be in [0, %g]" % (vm, what, name, hi))
        numbers[name] = number
    if not numbers["sla_us"] > 0.0:
        raise ValueError("VM %s: a %s's sla_us must be above 0" % (vm, what))
    return vm, statistic, count, numbers


def entries(value, field, most, parse, kind):
    """A report's list ``field`` (decoded) as a tuple of ``kind``, sorted by VM.

    ``ValueError`` when it is not a list, holds more than ``most``, names a
    VM twice, or an entry is malformed (``parse``, for the entries that are
    not already ``kind``).
    """
    if not isinstance(value, (list, tuple)):
        raise ValueError("%s must be a list, got %s" % (field, type(value).__name__))
    if len(value) > most:
        raise ValueError("%s lists more than %d" % (field, most))
    out = [entry if isinstance(entry, kind) else parse(entry) for entry in value]
    if len({e.vm for e in out}) != len(out):
        raise ValueError("%s names a VM twice" % field)
    return tuple(sorted(out, key=lambda e: e.vm))


def normalize(value):
    """A report's ``remote_claims`` (a decoded list) as a tuple of :class:`Claim`, by VM.

    ``ValueError`` when it is not a list, holds more than
    :data:`MAX_CLAIMS`, names a VM twice, or a claim is malformed
    (:func:`claim`).
    """
    return entries(value, "remote_claims", MAX_CLAIMS, claim, Claim)


def _worst_first(c):
    """Sort key: the claim whose window is furthest over its SLA first, then by VM."""
    return (-c.mean_us / c.sla_us, c.vm)


def of_windows(specs, windows, own_addresses, new=None):
    """The claims of a host's victims whose peers are not its own VMs.

    ``specs``: ``{vm: SLA}`` of the host's latency-sensitive VMs (an
    ``SLA`` with ``latency_sla_us``, ``interference_threshold_pct`` and
    ``latency_statistic``); ``windows``: ``{vm: LatencyWindow}`` (the
    market's, with ``peer``); ``own_addresses``: ``{vm: [address, ...]}``
    of the host's VMs; ``new`` (optional): ``{vm: requests new since the
    last report}``, a claim's ``new`` (at most its count). A window that
    names no peer, counts no request, or names a peer that is one of the
    host's own VMs makes no claim: the host's own market already judges
    that port. At most :data:`MAX_CLAIMS`, the worst windows first (mean
    over SLA).
    """
    local = set()
    for addrs in own_addresses.values():
        local.update(a for a in (addresses_mod.canonical(x) for x in addrs or ()) if a)
    out = []
    for vm, sla in specs.items():
        win = windows.get(vm)
        if win is None or not win.peer or not win.count:
            continue
        peer = wire.parse_peer(win.peer)
        if peer is None or not addresses_mod.keys_of(peer).isdisjoint(local):
            continue
        if not (sla.latency_sla_us > 0 and isinstance(vm, str)
                and 0 < len(vm) <= addresses_mod.MAX_VM_CHARS):
            continue
        out.append(Claim(vm=vm, peer=str(peer), sla_us=float(sla.latency_sla_us),
                         threshold_pct=float(sla.interference_threshold_pct),
                         statistic=sla.latency_statistic, count=int(win.count),
                         mean_us=float(win.mean_us), std_us=float(win.std_us),
                         p99_us=float(win.p99_us),
                         new=None if new is None or vm not in new
                         else min(int(win.count), max(0, int(new[vm])))))
    out.sort(key=_worst_first)
    return tuple(sorted(out[:MAX_CLAIMS], key=lambda c: c.vm))


def fit(claims, budget):
    """The claims of ``claims`` (worst first) whose JSON list fits in ``budget`` bytes.

    At most :data:`MAX_CLAIMS` (a reader refuses a longer list).
    """
    chosen, used = [], 2
    for c in sorted(claims, key=_worst_first):
        if len(chosen) == MAX_CLAIMS:
            break
        cost = len(json.dumps(c.to_dict(), separators=(",", ":"))) + (1 if chosen else 0)
        if used + cost > budget:
            continue
        used += cost
        chosen.append(c)
    return tuple(sorted(chosen, key=lambda c: c.vm))


def targets(reports, now=None, max_age_s=None):
    """``{host: [Target, ...]}``: every claim on the board, at the host of its peer.

    ``reports``: host reports (an iterable, or a snapshot ``{host:
    report}``). A claim is on a host when its peer resolves there (the
    rule of :func:`~resex_libvirt.board.addresses.resolve`: one VM, by the
    published addresses, where its newest report says; an address two VMs
    share leads nowhere). A claim on the claimant's own host, a blind
    report's, and, with ``now`` and ``max_age_s``, one older than
    ``max_age_s`` seconds are left out. Each host's list is sorted by the
    claiming host, then the victim. One pass over the addresses, one
    lookup per claim: a whole board's at once.
    """
    reports = list(reports.values() if isinstance(reports, dict) else reports)
    claimants = [r for r in reports if r.remote_claims and not r.blind
                 and (now is None or max_age_s is None or r.age(now) <= max_age_s)]
    if not claimants:
        return {}
    index = addresses_mod.index(reports)
    out = {}
    for report in claimants:
        for c in report.remote_claims:
            where = addresses_mod.locate(c.peer, index)
            if where is not None and where.host != report.host:
                out.setdefault(where.host, []).append(Target(report.host, report.ts, c, where.vm))
    for found in out.values():
        found.sort(key=lambda target: (target.host, target.claim.vm))
    return out


def on_host(host, reports, now=None, max_age_s=None):
    """The :class:`Target` claims other hosts' reports make on ``host``'s VMs (:func:`targets`)."""
    return targets(reports, now, max_age_s).get(host, [])


class Victim(typing.NamedTuple):
    """A local VM's remote victim, as its host's market takes it.

    ``vm``: the local VM (the victim's peer); ``target``: the claim chosen
    for it (:func:`victims`): where it came from and what it says.
    """

    vm: str
    target: Target

    @property
    def claim(self):
        return self.target.claim

    def sla_fields(self):
        """The fields of the local VM's SLA the claim sets: its victim's SLA.

        With ``"ensemble"`` (the group's identifier) when the victim is an
        ensemble's worst member rather than a remote claim.
        """
        c = self.target.claim
        out = {"latency_sla_us": c.sla_us, "interference_threshold_pct": c.threshold_pct,
               "latency_statistic": c.statistic}
        group = getattr(c, "ensemble", None)
        if group is not None:
            # An ensemble member's judgement (:mod:`~resex_libvirt.board.ensembles`):
            # it may stand over the local VM's own SLA (the controller reads the mark).
            out["ensemble"] = group
        return out


def claimed_pct(c):
    """A claim's interference: its window's statistic over its SLA, in percent of the SLA."""
    return 100.0 * (judged_us(c) - c.sla_us) / c.sla_us


def judged_us(c):
    """The value of a claim's window its SLA judges (its ``statistic``: mean or p99)."""
    return c.p99_us if c.statistic == "p99" else c.mean_us


def port_supports(c, port_inflation_pct, holding=False):
    """True unless the serving host's own counters contradict claim ``c``.

    ``port_inflation_pct``: the slowdown the host's port can cause at the
    load its counters measured (:func:`~resex_libvirt.board.report.queueing_inflation_pct`
    of its link utilisation: an M/G/1-PS port). A claim over its threshold
    on a port whose load could not slow a request by that threshold is
    contradicted: the congestion is elsewhere (the victim's own host, a
    switch's link), and capping this host's senders would not help. A
    claim under its threshold asks for nothing, and is no contradiction.
    ``holding``: the host's market holds a sender under its limit: the
    port's low load is then the cap's doing, not evidence against the
    claim (the policy's own rules release a cap that does not help).
    """
    return (holding or claimed_pct(c) <= c.threshold_pct
            or port_inflation_pct >= c.threshold_pct)


def victims(found, local_vms, own_sla, now, max_age_s):
    """``{local vm: Victim}``: the claim each local VM is judged by.

    ``found``: :class:`Target` claims on this host (:func:`on_host`);
    ``local_vms``: the VMs on the host now; ``own_sla``: the local VMs with
    a latency SLA of their own (never judged by a remote claim: the
    tenant's own SLA stands); ``now`` (wall clock) and ``max_age_s``: a
    claim whose report is older is expired, judged at read time (a board
    that stopped changing expires its claims all the same). Several claims
    on one VM (several remote clients of one server): the one furthest
    over its SLA (:func:`claimed_pct`), then by host and victim.
    """
    out = {}
    for target in found:
        vm = target.vm
        if vm not in local_vms or vm in own_sla or now - target.ts > max_age_s:
            continue
        best = out.get(vm)
        if best is None or _judged_first(target, best.target):
            out[vm] = Victim(vm, target)
    return out


def worse(a, b):
    """True when target ``a`` is worse than ``b`` (:func:`victims`' rule: worst wins)."""
    return _judged_first(a, b)


def _judged_first(a, b):
    """True when target ``a`` is worse (furthest over its SLA) than ``b``; ties by name."""
    pa, pb = claimed_pct(a.claim), claimed_pct(b.claim)
    if pa != pb:
        return pa > pb
    return (a.host, a.claim.vm) < (b.host, b.claim.vm)
