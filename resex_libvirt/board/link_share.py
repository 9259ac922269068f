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

"""Shared links in the market: every host behind a congested link limits its own senders.

A rack's uplink is congested by the senders of every host behind it, and
no one host's market sees it: each host's port may be lightly loaded while
the uplink they share is full. A victim whose requests cross the link
publishes a remote claim (:mod:`~resex_libvirt.board.remote_claims`); each
host behind the link reads the same board, estimates the link's load from
its hosts' reports (:mod:`~resex_libvirt.board.links`), and limits its own
heavy senders to its part of what the link can carry while the victim
meets its SLA (doc/source/fabric.rst, "Shared links in the market").

The rule is PARDA's ("PARDA: Proportional Allocation of Resources for
Distributed Storage Access", Gulati, Ahmad and Waldspurger, FAST 2009,
sections 3.1-3.2): hosts that share an array each adjust their own window
from the latency they all observe, ``w(t+1) = (1 - g) w(t) + g (L / l(t))
w(t)``, with no central scheduler, and fairness comes from each host
weighting its window by its VMs' shares (section 4). Here the latency
``l(t)`` is the worst crossing victim's window (its SLA's statistic), the
target ``L`` is the victim's bound just under its threshold
(:func:`target_ratio`, at :data:`AIM` of the threshold), the window is the
bytes a second the link carries, and each host's part of it is the weighted
max-min share of the link's target (:func:`parts`), weighted by its heavy
I/O VMs (:func:`weights`: at least 1 per host).

Deviations from PARDA, and why:

* the lever is the senders' CPU limit (the paper's own, ResEx section 3:
  RDMA bypasses the hypervisor), scaled by a factor in ``[floor, 1]``: a
  host cuts to its part at full gain (``g = 1``), and releases at half gain
  (the ResEx settling law's rule, doc/source/market.rst), one change per
  loop delay (``delay_s``), on a window it has not used before;
* nothing is cut on a claim the link's load does not support (the evidence
  rule of remote claims: a link whose estimated load could not slow a
  request by the victim's threshold is not the cause), unless this host
  holds its senders already (the low load is then the limit's doing);
* a victim under its target releases the limit by half the ratio's
  excess (``f (1 + (L / l - 1) / 2)``); between the target and the
  threshold the limit holds (a band, not a relay);
* a link no claim crosses is released half way to 1 each delay (the
  victim gone, or quiet past its claim's expiry: the agent keeps a claim a
  newer report leaves out until then; PARDA's window grows back the same
  way).

Pure functions and immutable values: no clock (``now`` is an argument), no I/O.
"""

import typing

from resex_libvirt.board import links as links_mod
from resex_libvirt.board import remote_claims as remote_mod

#: The target as a fraction of the victim's threshold: aim just under the
#: bound, so that a settled limit does not sit on it.
AIM = 0.9
#: A factor at or above this after a release is dropped (back to 1: unlimited).
RELEASED = 0.99
#: The loop's delay by default (s): a claimant's report period and a window
#: of requests on real guests (doc/source/market.rst, the settling law).
DELAY_S = 3.0


class LinkLimits(typing.NamedTuple):
    """The rule's parameters.

    ``delay_s``: the loop's delay (a claimant's report period and a window,
    seconds); ``floor``: the smallest factor.
    """

    delay_s: float = DELAY_S
    floor: float = 0.01


class Judgement(typing.NamedTuple):
    """One shared link, as this host judges it now.

    ``worst``: the crossing claim furthest over its SLA (a
    :class:`~resex_libvirt.board.remote_claims.Target`, its ``vm`` the peer's
    host here) or None; ``load``: the link's
    :class:`~resex_libvirt.board.links.Load`; ``offered``: this host's bytes
    a second into it; ``part``: its part of the target (bytes a second);
    ``ratio``: the target over the worst window (1 without a claim).
    """

    link: links_mod.Link
    worst: typing.Any
    load: links_mod.Load
    offered: float
    part: float
    ratio: float


class Step(typing.NamedTuple):
    """A change of one link's factor: ``old`` to ``new``, and why (``cut``, ``release``)."""

    link: str
    old: float
    new: float
    why: str
    judgement: Judgement


def crossing(link, claims):
    """The claims of ``claims`` whose requests cross ``link``.

    ``claims``: ``{peer's host: [Target]}`` (:func:`~.remote_claims.targets`).
    A request crosses a rack's uplink when exactly one of its two ends (the
    victim's host, the peer's) is behind it: two hosts of the same rack talk
    inside it.
    """
    out = []
    for peer_host, found in sorted(claims.items()):
        for t in found:
            if (t.host in link.hosts) != (peer_host in link.hosts):
                out.append(t._replace(vm=peer_host))
    return out


def offered(link, reports):
    """``{host: bytes a second}`` each of the link's hosts with a fresh report sends into it.

    What a host counted beyond the link (``link_tx``), else its port's load
    times the link's ``share`` (:func:`~resex_libvirt.board.links.sent_into`).
    """
    out = {}
    for host in sorted(link.hosts):
        rep = reports.get(host)
        if rep is None or rep.blind:
            continue
        out[host] = links_mod.sent_into(link, rep)
    return out


def weights(link, reports):
    """``{host: weight}``: a host's heavy I/O VMs, at least 1 (PARDA's shares, section 4)."""
    out = {}
    for host in sorted(link.hosts):
        rep = reports.get(host)
        if rep is not None and not rep.blind:
            out[host] = float(max(1, rep.heavy_io_vms))
    return out


def parts(capacity, demands, weight):
    """Weighted max-min shares of ``capacity`` among ``demands`` (``{host: demand}``).

    Each host gets at most its demand; what a host does not use is shared
    among the others by ``weight`` (water filling). Hosts without a
    demand get 0. The parts sum to ``min(capacity, sum of demands)``.
    """
    out = {h: 0.0 for h in demands}
    left = {h: d for h, d in demands.items() if d > 0}
    room = max(0.0, float(capacity))
    while left and room > 1e-12:
        total = sum(weight.get(h, 1.0) for h in left)
        fill = {h: room * weight.get(h, 1.0) / total for h in left}
        done = [h for h in left if left[h] - out[h] <= fill[h]]
        if not done:
            for h in left:
                out[h] += fill[h]
            return out
        for h in done:
            room -= left[h] - out[h]
            out[h] = left[h]
            del left[h]
    return out


def target_ratio(c, aim=AIM):
    """The target over the claim's window (its SLA's statistic): below 1 when over the target.

    The target is the SLA plus ``aim`` of the threshold. A window of 0
    (nothing measured) answers 1.
    """
    value = remote_mod.judged_us(c)
    if not value > 0:
        return 1.0
    return c.sla_us * (1.0 + aim * c.threshold_pct / 100.0) / value


def judge(topology, host, reports, claims, aim=AIM):
    """``[Judgement]``: each link ``host`` sends into, by name.

    ``reports``: ``{host: HostReport}``, the fresh ones; ``claims``:
    ``{peer's host: [Target]}``, the fresh ones (:func:`~.remote_claims.targets`).
    """
    out = []
    for link in topology.links_of(host):
        found = crossing(link, claims)
        worst = None
        for t in found:
            if worst is None or remote_mod.worse(t, worst):
                worst = t
        demand = offered(link, reports)
        ratio = 1.0 if worst is None else target_ratio(worst.claim, aim)
        part = parts(sum(demand.values()) * ratio, demand, weights(link, reports))
        out.append(Judgement(link, worst, links_mod.load(link, reports),
                             demand.get(host, 0.0), part.get(host, 0.0), ratio))
    return out


class LinkState(typing.NamedTuple):
    """One link's factor, when it last changed and the last window it used."""

    factor: float = 1.0
    changed: float = float("-inf")
    used: tuple = ()


class SharedLinks:
    """This host's limit factors on its shared links, stepped by :meth:`step`.

    The state is replaced whole on each step (readers on other threads
    see one step's state or the next, never a mix).
    """

    def __init__(self, limits=LinkLimits(), aim=AIM):
        self.limits = limits
        self.aim = aim
        self._state = {}
        #: Claims over their threshold that the link's load did not support.
        self.contradicted = 0

    def factors(self):
        """``{link name: factor}`` of the links this host limits its senders on now (< 1)."""
        return {name: s.factor for name, s in self._state.items() if s.factor < 1.0}

    def factor(self):
        """The smallest factor over this host's links (1: no limit)."""
        return min([s.factor for s in self._state.values()] + [1.0])

    def step(self, judgements, now):
        """Move each link's factor by its :class:`Judgement`; the :class:`Step` list of changes."""
        state, steps = {}, []
        for j in judgements:
            old = self._state.get(j.link.name, LinkState())
            new, why, used = self._next(j, old, now)
            if why is None:
                state[j.link.name] = old._replace(used=used)
                continue
            state[j.link.name] = LinkState(new, now, used)
            steps.append(Step(j.link.name, old.factor, new, why, j))
        self._state = {name: s for name, s in state.items() if s.factor < 1.0 or s.used}
        return steps

    def _next(self, j, old, now):
        """(new factor, why or None, used) for one link."""
        lim = self.limits
        if now - old.changed < lim.delay_s:
            return old.factor, None, old.used
        if j.worst is None:
            if old.factor >= 1.0:
                return 1.0, None, ()
            new = old.factor + (1.0 - old.factor) / 2.0
            return (1.0 if new >= RELEASED else new), "release", ()
        key = (j.worst.host, j.worst.claim.vm, j.worst.ts)
        if key == old.used:
            return old.factor, None, old.used         # this window was used already
        c = j.worst.claim
        over = remote_mod.claimed_pct(c)
        if over > c.threshold_pct:
            holding = old.factor < 1.0
            if not holding and j.load.congestion_pct < c.threshold_pct:
                self.contradicted += 1
                return old.factor, None, key
            if j.offered <= 0 or j.part >= j.offered:
                return old.factor, None, key
            new = max(lim.floor, old.factor * j.part / j.offered)
            return new, ("cut" if new < old.factor else None), key
        if over < self.aim * c.threshold_pct and old.factor < 1.0:
            new = min(1.0, old.factor * (1.0 + (j.ratio - 1.0) / 2.0))
            return (1.0 if new >= RELEASED else new), "release", key
        return old.factor, None, key
