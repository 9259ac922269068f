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

"""Ensembles: VMs on several hosts judged as one SLA unit.

An ensemble is a group of VMs (``resex:ensemble`` in a domain's metadata,
or the Nova server group it is in:
:meth:`~resex_libvirt.hypervisor.sla_layers.SLAResolver.ensemble`) whose
requests cross each other's hosts: its end-to-end latency is as bad as its
worst member's ("Distributed resource exchange", Ranadive,
Gavrilovska and Schwan, IEEE CLUSTER 2013: ensembles of VMs over several
hosts with a group-level latency SLA). Each host report (1.6) carries
``ensembles``: per latency-sensitive member with a window, its ensemble, its
window and its SLA (:class:`Member`).

The group's judgement (:func:`judge`): the ensemble's end-to-end latency is
its **worst fresh member**, each member's window judged against that
member's own bound (:func:`~resex_libvirt.board.remote_claims.claimed_pct`:
its statistic over its SLA, in percent); the group is **over** when that
member is over its own threshold. A member on a blind host, or whose report
is older than the expiry, is no part of it.

What a host does (:func:`victims`): when the ensemble is over and its worst
member runs on another host, each local member of the ensemble is a victim
of this host's port, judged by the worst member's SLA and window (as a
remote claim is: the market names and taxes the senders on this port,
Algorithm 2). A host whose own member is the worst does nothing more: its
market already judges that member by its own window (no double count). The
evidence rule, the expiry and worst-wins are the remote claims' (the agent
applies them alike, :mod:`resex_agent.remote`); a member's own SLA is
overridden only by a group judgement that is worse than its own (its own
published window, when fresh: the worst member is then elsewhere).

Pure functions: no clock, no I/O. No tenant or project is named: a member
is its host's market's name for it, an ensemble an identifier.
"""

import json
import typing

from resex_libvirt.board import addresses as addresses_mod
from resex_libvirt.board import remote_claims as remote_mod
from resex_libvirt import sla as sla_mod

#: Most ensemble members a report carries (the worst first).
MAX_MEMBERS = 16

_KEYS = frozenset(("ensemble", "vm", "statistic", "count")
                  + tuple(n for n, _ in remote_mod.WINDOW_FLOATS))


class Member(typing.NamedTuple):
    """One member's window and SLA under its ensemble (a host report's ``ensembles`` entry).

    ``ensemble``: the group's identifier; ``vm``: the member as its host's
    market names it; ``sla_us``, ``threshold_pct``, ``statistic``: its own
    SLA; ``count``, ``mean_us``, ``std_us``, ``p99_us``: its latest window.
    ``new`` is always None (the reader takes a report's window as new once),
    so that a member reads as a :class:`~resex_libvirt.board.remote_claims.Claim`.
    """

    ensemble: str
    vm: str
    sla_us: float
    threshold_pct: float
    statistic: str
    count: int
    mean_us: float
    std_us: float
    p99_us: float

    @property
    def new(self):
        return None

    def to_dict(self):
        return self._asdict()


class Judgement(typing.NamedTuple):
    """An ensemble's worst fresh member: where it runs, when it was said, and what it says."""

    host: str
    ts: float
    member: Member

    @property
    def over(self):
        """True when the worst member is over its own threshold: the group is over its SLA."""
        return remote_mod.claimed_pct(self.member) > self.member.threshold_pct


def member(value):
    """One decoded member (a mapping) as a :class:`Member`; ``ValueError`` when malformed.

    Every key of :class:`Member` is required, no other is read (a newer
    minor version may add some); the ensemble a valid identifier
    (:func:`resex_libvirt.sla.is_ensemble`), the numbers as a remote claim's
    (:func:`~resex_libvirt.board.remote_claims.window_fields`).
    """
    vm, statistic, count, numbers = remote_mod.window_fields(value, _KEYS, "member")
    if not sla_mod.is_ensemble(value["ensemble"]):
        raise ValueError("VM %s: its ensemble must be 1 to %d characters of A-Z a-z 0-9 . _ -"
                         % (vm, sla_mod.MAX_ENSEMBLE_CHARS))
    return Member(ensemble=value["ensemble"], vm=vm, statistic=statistic,
                  count=count, **numbers)


def normalize(value):
    """A report's ``ensembles`` (a decoded list) as a tuple of :class:`Member`, by VM.

    ``ValueError`` when it is not a list, holds more than
    :data:`MAX_MEMBERS`, names a VM twice, or a member is malformed
    (:func:`member`).
    """
    return remote_mod.entries(value, "ensembles", MAX_MEMBERS, member, Member)


def _worst_first(m):
    """Sort key: the member furthest over its own bound first, then by VM."""
    return (-remote_mod.claimed_pct(m), m.vm)


def of_windows(specs, windows, ensembles):
    """The :class:`Member` entries of a host's report.

    ``specs``: ``{vm: SLA}`` of the host's latency-sensitive VMs (their own
    SLAs); ``windows``: ``{vm: LatencyWindow}`` (their own windows, never
    one a remote judgement handed the market); ``ensembles``: ``{vm:
    ensemble}`` of the host's members. A member without a window that
    counts a request says nothing. At most :data:`MAX_MEMBERS`, the worst
    first.
    """
    out = []
    for vm, group in ensembles.items():
        sla, win = specs.get(vm), windows.get(vm)
        if (sla is None or win is None or not win.count or not sla_mod.is_ensemble(group)
                or not sla.latency_sla_us or not sla.latency_sla_us > 0
                or not isinstance(vm, str) or not 0 < len(vm) <= addresses_mod.MAX_VM_CHARS):
            continue
        out.append(Member(ensemble=group, vm=vm, sla_us=float(sla.latency_sla_us),
                          threshold_pct=float(sla.interference_threshold_pct),
                          statistic=sla.latency_statistic, count=int(win.count),
                          mean_us=float(win.mean_us), std_us=float(win.std_us),
                          p99_us=float(win.p99_us)))
    out.sort(key=_worst_first)
    return tuple(sorted(out[:MAX_MEMBERS], key=lambda m: m.vm))


def fit(members, budget):
    """The members of ``members`` (worst first) whose JSON list fits in ``budget`` bytes.

    At most :data:`MAX_MEMBERS`.
    """
    chosen, used = [], 2
    for m in sorted(members, key=_worst_first):
        if len(chosen) == MAX_MEMBERS:
            break
        cost = len(json.dumps(m.to_dict(), separators=(",", ":"))) + (1 if chosen else 0)
        if used + cost > budget:
            continue
        used += cost
        chosen.append(m)
    return tuple(sorted(chosen, key=lambda m: m.vm))


def _worse(a, b):
    """True when judgement ``a``'s member is further over its bound than ``b``'s; ties by name."""
    pa, pb = remote_mod.claimed_pct(a.member), remote_mod.claimed_pct(b.member)
    if pa != pb:
        return pa > pb
    return (a.host, a.member.vm) < (b.host, b.member.vm)


def judge(reports, now=None, max_age_s=None):
    """``{ensemble: Judgement}``: each ensemble's worst fresh member on the board.

    ``reports``: host reports (an iterable, or a snapshot ``{host:
    report}``). A blind report's members, and with ``now`` and
    ``max_age_s`` those of a report older than ``max_age_s`` seconds, are
    left out. Ties: by host, then member.
    """
    reports = reports.values() if isinstance(reports, dict) else reports
    out = {}
    for report in reports:
        if (not report.ensembles or report.blind
                or (now is not None and max_age_s is not None
                    and report.age(now) > max_age_s)):
            continue
        for m in report.ensembles:
            found = Judgement(report.host, report.ts, m)
            best = out.get(m.ensemble)
            if best is None or _worse(found, best):
                out[m.ensemble] = found
    return out


def victims(host, judgements, members, now, max_age_s):
    """``{local vm: Victim}``: the local members judged by their ensemble's worst member.

    ``host``: this host's name; ``judgements``: :func:`judge`'s;
    ``members``: ``{local vm: ensemble}`` of the VMs on the host now;
    ``now`` and ``max_age_s``: a judgement whose report is older is
    expired. An ensemble within its bound, or whose worst member is on
    this host, judges no one here.
    """
    out = {}
    for vm, group in members.items():
        found = judgements.get(group)
        if (found is None or found.host == host or now - found.ts > max_age_s
                or not found.over):
            continue
        out[vm] = remote_mod.Victim(vm, remote_mod.Target(found.host, found.ts, found.member, vm))
    return out
