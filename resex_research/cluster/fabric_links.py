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

"""A leaf-spine fabric's links, the bulk senders' rates over them, and the market's cuts.

The leaf-spine fleet study (:mod:`~resex_research.cluster.leaf_spine`) needs
what the single-host surrogate cannot give: congestion on links that other
hosts' senders share. This module is that fabric, as a fluid model:

* **Links.** Each host's **port** (the transmit side of its HCA: what its
  VMs send, what ResEx charges, paper Section V-A) of capacity ``C``, and
  each rack's **uplink** (leaf to spines) of capacity ``hosts_per_rack * C /
  oversubscription``. The spines are non-blocking; traffic into a rack
  (the spine-to-leaf downlinks, a host's receive side) is not modelled: a
  bulk sender's remote ends are spread over the fleet.
* **Senders.** A bulk VM offers ``demand`` bytes/s, of which the share
  ``leave`` leaves its rack: the whole of it crosses its host's port, the
  share ``leave`` its rack's uplink as well. Rates are max-min fair over
  the links (:func:`allocate`, progressive filling): what credit-based flow
  control (InfiniBand) or PFC with DCQCN (RoCE) converges to, roughly. A
  market's cap (ResEx caps a VM's CPU, so it cuts all of its traffic, in the
  rack and out of it) bounds a sender's rate.
* **Latency.** A link loaded above ``knee`` of its capacity queues a
  latency-sensitive request; the share of seconds whose mean latency breaks
  the SLA rises linearly to 1 at saturation (:func:`violation_share`). A
  path violates when any of its links does, its links independent
  (:func:`path_violation_share`).

**The market's cut** (:func:`cut_link`) is Algorithm 2 of the ResEx paper
(IOShares) applied to one link: the senders into a link that carries a
victim are taxed, each by its share of the link's MTUs, until the link's
load is down to ``target`` of its capacity. On a link several hosts share
(an uplink) every host cuts its own senders only, each host with a weight
(the sum of its senders' shares): PARDA's fixed point, where hosts running
one control law with their weights converge to loads proportional to the
weights with no central scheduler (:func:`host_allowances`: a host that
offers less than its part keeps what it offers, the rest is shared by
weight). The cut is a steady state: the model does not follow the tax's
epoch-by-epoch swing, only its delay to start (the study's).

**The evidence rule**: a link is cut only when the load its senders offer
untaxed (:func:`allocate` without caps: what the counters show before the
tax) is at least ``evidence`` of its capacity; a claim alone never cuts.

Pure functions over plain data: no clock, no randomness.
"""

import collections
import dataclasses
import math

PORT, UPLINK = "port", "uplink"

_EPS = 1e-9


@dataclasses.dataclass(frozen=True)
class Topology:
    """Racks of hosts, their ports and each rack's oversubscribed uplink."""

    racks: int
    hosts_per_rack: int
    port_bytes_per_s: float
    oversubscription: float

    @property
    def hosts(self):
        return self.racks * self.hosts_per_rack

    @property
    def uplink_bytes_per_s(self):
        return self.hosts_per_rack * self.port_bytes_per_s / self.oversubscription

    def rack_of(self, host):
        return host // self.hosts_per_rack

    def hosts_of(self, rack):
        return range(rack * self.hosts_per_rack, (rack + 1) * self.hosts_per_rack)

    def capacity(self, link):
        return self.port_bytes_per_s if link[0] == PORT else self.uplink_bytes_per_s

    def rack_of_link(self, link):
        return self.rack_of(link[1]) if link[0] == PORT else link[1]

    def links_of_rack(self, rack):
        return [(PORT, h) for h in self.hosts_of(rack)] + [(UPLINK, rack)]

    def path(self, host_a, host_b):
        """The links a request between ``host_a`` and ``host_b`` crosses, both ways."""
        links = [(PORT, host_a)]
        if host_b != host_a:
            links.append((PORT, host_b))
        ra, rb = self.rack_of(host_a), self.rack_of(host_b)
        if ra != rb:
            links += [(UPLINK, ra), (UPLINK, rb)]
        return links

    @staticmethod
    def link_name(link):
        return ("compute-%05d port" % link[1]) if link[0] == PORT \
            else ("rack-%02d uplink" % link[1])


@dataclasses.dataclass(frozen=True)
class Sender:
    """A bulk VM: its key, host, offered bytes/s, share leaving its rack, market share."""

    vm: int
    host: int
    demand: float
    leave: float
    share: float


def links_of(topo, sender):
    """``[(link, coefficient)]``: the share of the sender's rate each of its links carries."""
    out = [((PORT, sender.host), 1.0)]
    if sender.leave > 0.0:
        out.append(((UPLINK, topo.rack_of(sender.host)), sender.leave))
    return out


def allocate(topo, senders, caps=None):
    """Max-min fair rates of ``senders`` (progressive filling), each under its cap.

    ``caps``: ``{vm: bytes/s}``. Returns ``{vm: bytes/s}``.
    """
    caps = caps or {}
    rate, limit = {}, {}
    members = collections.defaultdict(list)
    for s in senders:
        rate[s.vm] = 0.0
        limit[s.vm] = max(0.0, min(s.demand, caps.get(s.vm, math.inf)))
        for link, coef in links_of(topo, s):
            members[link].append((s.vm, coef))
    free = {link: topo.capacity(link) for link in members}
    weight = {link: sum(c for _, c in ms) for link, ms in members.items()}
    active = {v for v in rate if limit[v] > _EPS}
    for link, ms in members.items():
        weight[link] = sum(c for v, c in ms if v in active)
    while active:
        step = min(limit[v] - rate[v] for v in active)
        for link, w in weight.items():
            if w > _EPS:
                step = min(step, free[link] / w)
        step = max(step, 0.0)
        for v in active:
            rate[v] += step
        full = []
        for link, w in weight.items():
            if w > _EPS:
                free[link] -= step * w
                if free[link] <= _EPS * topo.capacity(link):
                    full.append(link)
        done = {v for v in active if rate[v] >= limit[v] - _EPS * max(1.0, limit[v])}
        for link in full:
            done.update(v for v, _ in members[link] if v in active)
        for v in done:
            active.discard(v)
        for link, ms in members.items():
            weight[link] = sum(c for v, c in ms if v in active)
    return rate


def loads(topo, senders, rate):
    """``{link: bytes/s}`` carried by ``senders`` at ``rate``."""
    out = collections.defaultdict(float)
    for s in senders:
        for link, coef in links_of(topo, s):
            out[link] += coef * rate.get(s.vm, 0.0)
    return dict(out)


def violation_share(load_fraction, knee):
    """Share of seconds a latency-sensitive request on a link so loaded breaks its SLA."""
    if load_fraction <= knee:
        return 0.0
    return min(1.0, (load_fraction - knee) / max(_EPS, 1.0 - knee))


def path_violation_share(load_fractions, knee):
    """A path's share of violated seconds: any of its links violating, independently."""
    ok = 1.0
    for f in load_fractions:
        ok *= 1.0 - violation_share(f, knee)
    return 1.0 - ok


def host_allowances(total, offered, weight):
    """PARDA's fixed point: ``total`` shared by the hosts in proportion to ``weight``.

    ``offered`` and ``weight``: ``{host: value}``. A host offering less than
    its proportional part keeps what it offers, and the rest is shared among
    the others by weight again (weighted max-min). Returns ``{host: allowance}``.
    """
    out = {}
    left = dict(offered)
    budget = total
    while left:
        w = sum(max(_EPS, weight.get(h, 0.0)) for h in left)
        under = {h: v for h, v in left.items()
                 if v <= budget * max(_EPS, weight.get(h, 0.0)) / w}
        if not under:
            for h in left:
                out[h] = budget * max(_EPS, weight.get(h, 0.0)) / w
            break
        for h, v in under.items():
            out[h] = v
            budget -= v
            del left[h]
    return out


def cut_link(topo, link, senders, rate, target):
    """The caps that bring ``link`` to ``target`` of its capacity: ``{vm: bytes/s}``.

    Each host's allowance into the link is :func:`host_allowances` of the
    link's target load, weighted by the shares of the host's senders on the
    link; a host over its allowance cuts each of its senders by the same
    factor (IOShare: each is taxed by its share of the host's MTUs into the
    link, so the shares stay). Senders of a host within its allowance, and
    senders not on the link, get no cap.
    """
    on = [(s, c) for s in senders for lk, c in links_of(topo, s) if lk == link and c > 0]
    offered = collections.defaultdict(float)
    weight = collections.defaultdict(float)
    for s, c in on:
        offered[s.host] += c * rate.get(s.vm, 0.0)
        weight[s.host] += s.share
    total = target * topo.capacity(link)
    if sum(offered.values()) <= total * (1.0 + 1e-6):
        return {}
    allowed = host_allowances(total, dict(offered), dict(weight))
    caps = {}
    for s, _ in on:
        have = offered[s.host]
        if have > allowed[s.host] * (1.0 + 1e-9) and have > 0:
            caps[s.vm] = rate.get(s.vm, 0.0) * allowed[s.host] / have
    return caps


def evidence_links(topo, offered, victims, evidence):
    """The links a market may cut: each carries a victim and enough load untaxed.

    ``offered``: ``{link: bytes/s}`` untaxed (:func:`loads` of :func:`allocate`
    without caps); ``victims``: the links the market acts for (a victim's own
    port, a claim's port, a declared shared link on a victim's path).
    """
    return {link for link in victims
            if offered.get(link, 0.0) >= evidence * topo.capacity(link) * (1.0 - 1e-9)}


def market(topo, senders, taxed, target, rounds=30):
    """The rates once every link of ``taxed`` is cut to ``target`` (fixed point).

    Returns ``(rate, caps)``. A cut frees capacity elsewhere and the other
    senders take it, which may load a taxed link again: the cuts repeat until
    no taxed link is above its target, caps only ever tightening. Senders on
    no link of ``taxed`` are never capped.
    """
    caps = {}
    rate = allocate(topo, senders, caps)
    for _ in range(rounds):
        now = loads(topo, senders, rate)
        more = {}
        for link in sorted(taxed):
            if now.get(link, 0.0) > target * topo.capacity(link) * (1.0 + 1e-6):
                for vm, cap in cut_link(topo, link, senders, rate, target).items():
                    more[vm] = min(cap, more.get(vm, math.inf))
        if not more:
            break
        for vm, cap in more.items():
            caps[vm] = min(cap, caps.get(vm, math.inf))
        rate = allocate(topo, senders, caps)
    return rate, caps
