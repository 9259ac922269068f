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

"""Links shared by several hosts (a rack's uplink, a spine), as the operator declares them.

A host's report says how loaded its own port is; the links beyond it (the
top-of-rack switch's uplink, which every host of the rack sends into) are
shared, and no host sees them. The operator declares them in a topology
file (doc/source/scheduler.rst, "Shared links")::

    links:
      - name: rack7-uplink
        capacity_gbps: 100
        hosts: [compute-0701, compute-0702, compute-0703]

and the board's readers estimate each link's load from its hosts' reports:
the sum of their ports' bytes per second (``link_utilisation`` x
``link_capacity_bytes_per_s``) times the link's ``share`` (1 by default)
over the link's capacity, or, from a host that counts its bytes by
destination (report 1.7 ``link_tx``), what it said it sent beyond the link
(:func:`sent_into`). At a share of 1 that is an upper bound on what
crosses the uplink (a host's traffic to its rack neighbours never leaves
the rack): an operator who knows that most traffic stays in the rack
declares less. Only the hosts with a fresh report count (a lower bound
when some have none: their count is kept). The link's congestion is the
slowdown an M/G/1-PS link at that load gives a newcomer's request, the
host report's own model (:func:`~resex_libvirt.board.report.queueing_inflation_pct`).

Pure functions and immutable values: no clock, no I/O.
"""

import math
import typing

from resex_libvirt.board import report as report_mod

#: Most links a topology declares, and hosts one link names.
MAX_LINKS = 10000
MAX_HOSTS_PER_LINK = 100000
#: Largest capacity (Gb/s) a link may declare: 100 Tb/s.
MAX_CAPACITY_GBPS = 100000.0
_LINK_KEYS = frozenset(("name", "capacity_gbps", "hosts"))
_OPTIONAL_KEYS = frozenset(("share",))


class Link(typing.NamedTuple):
    """One shared link: its name, its capacity (bytes of data a second) and its hosts.

    ``share``: the part of its hosts' port traffic that crosses it (1: all
    of it, the upper bound; a rack whose traffic mostly stays in the rack
    declares less).
    """

    name: str
    capacity_bytes_per_s: float
    hosts: frozenset
    share: float = 1.0


class Topology(typing.NamedTuple):
    """The shared links, and for each host the links it sends into (by name order)."""

    links: tuple
    of_host: dict

    def links_of(self, host):
        return self.of_host.get(host, ())


class Load(typing.NamedTuple):
    """A link's estimated load: ``utilisation`` (0-1), its congestion and whom it counted.

    ``heard``: its hosts with a fresh report; ``hosts``: all of them.
    """

    link: Link
    utilisation: float
    congestion_pct: float
    heard: int
    hosts: int


def parse(data):
    """A :class:`Topology` from a decoded topology file; ``ValueError`` naming the fault.

    ``data``: a mapping with ``links``, a list of ``{name, capacity_gbps,
    hosts}`` and optionally ``share`` (no other key); names unique, 1 to 255
    characters; capacities finite and above 0; each link's hosts a non-empty
    list of host names (as the board and Nova's compute services name
    them), none twice; ``share`` in (0, 1], 1 by default.
    """
    if not isinstance(data, dict) or set(data) - {"links"}:
        raise ValueError("a topology is a mapping with one key, links")
    raw = data.get("links")
    raw = [] if raw is None else raw
    if not isinstance(raw, list) or len(raw) > MAX_LINKS:
        raise ValueError("links must be a list of at most %d links" % MAX_LINKS)
    links, names, of_host = [], set(), {}
    for i, entry in enumerate(raw):
        link = _link(i, entry)
        if link.name in names:
            raise ValueError("links[%d]: %s is declared twice" % (i, link.name))
        names.add(link.name)
        links.append(link)
        for host in link.hosts:
            of_host.setdefault(host, []).append(link)
    return Topology(tuple(links), {h: tuple(sorted(ls, key=lambda k: k.name))
                                   for h, ls in of_host.items()})


def _link(i, entry):
    where = "links[%d]" % i
    if not isinstance(entry, dict):
        raise ValueError("%s must be a mapping" % where)
    unknown = set(entry) - _LINK_KEYS - _OPTIONAL_KEYS
    missing = _LINK_KEYS - set(entry)
    if unknown or missing:
        raise ValueError("%s: %s" % (where, "; ".join(
            ["unknown key %s" % k for k in sorted(map(str, unknown))]
            + ["missing %s" % k for k in sorted(missing)])))
    name = entry["name"]
    if not isinstance(name, str) or not 0 < len(name) <= 255:
        raise ValueError("%s: name must be 1 to 255 characters" % where)
    where = "link %s" % name
    gbps = entry["capacity_gbps"]
    if isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or not (
            math.isfinite(gbps) and 0 < gbps <= MAX_CAPACITY_GBPS):
        raise ValueError("%s: capacity_gbps must be a number in (0, %g]"
                         % (where, MAX_CAPACITY_GBPS))
    hosts = entry["hosts"]
    if (not isinstance(hosts, list) or not 0 < len(hosts) <= MAX_HOSTS_PER_LINK
            or not all(isinstance(h, str) and 0 < len(h) <= 255 for h in hosts)):
        raise ValueError("%s: hosts must be a non-empty list of host names" % where)
    if len(set(hosts)) != len(hosts):
        raise ValueError("%s: a host is named twice" % where)
    share = entry.get("share", 1.0)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not (
            0.0 < share <= 1.0):
        raise ValueError("%s: share must be a number in (0, 1]" % where)
    return Link(name, float(gbps) * 1e9 / 8.0, frozenset(hosts), float(share))


def load(link, reports):
    """The :class:`Load` of ``link`` from ``reports`` (``{host: HostReport}``, the fresh ones).

    A blind report says nothing of its port: it is not heard.
    """
    sent, heard = 0.0, 0
    for host in link.hosts:
        rep = reports.get(host)
        if rep is None or rep.blind:
            continue
        heard += 1
        sent += sent_into(link, rep)
    utilisation = min(1.0, sent / link.capacity_bytes_per_s)
    return Load(link, utilisation, report_mod.queueing_inflation_pct(utilisation), heard,
                len(link.hosts))


def sent_into(link, rep):
    """Bytes a second host report ``rep`` sends into ``link``.

    What the host counted beyond the link (its ``link_tx``, report 1.7),
    else its port's load times the link's ``share`` (an upper bound at a
    share of 1: traffic that stays in the rack counts too).
    """
    counted = rep.link_tx_of(link.name)
    if counted is not None:
        return counted
    return link.share * rep.link_utilisation * rep.link_capacity_bytes_per_s


def beyond(topology, host, peer_rates, where):
    """``{link: bytes/s}``: what ``host``'s VMs send beyond each link it sends into.

    ``peer_rates``: ``{vm: {peer address: bytes/s}}`` (``"other"``: the rest);
    ``where(peer)``: the host a peer address is on, or None (unknown, an
    address outside the cloud). A destination on ``host`` itself leaves no
    link; one on a host behind the same link stays inside it; an unknown
    one (or ``other``) is taken as beyond (the cautious side).
    """
    mine = topology.links_of(host)
    if not mine:
        return {}
    out = {link.name: 0.0 for link in mine}
    for peers in peer_rates.values():
        for peer, rate in peers.items():
            dest = where(peer)
            if dest == host:
                continue
            for link in mine:
                if dest is None or dest not in link.hosts:
                    out[link.name] += rate
    return out


def loads(topology, reports):
    """``{link name: Load}`` of every link of ``topology``."""
    return {link.name: load(link, reports) for link in topology.links}


def toward(topology, link_loads, peers):
    """``f(host)``: the most congested shared link between ``host`` and the hosts ``peers``.

    A request between a host and a peer crosses the links the peer sends
    into that the host does not (a link both are behind, a rack's uplink
    for two hosts of the rack, is not between them; the host's own links
    are its own judgement, :func:`worst_by_host`); a peer on the host
    itself crosses none. ``f`` answers a :class:`Load`, or None when no
    declared link is between them: one pass over the peers' links, then a
    few set lookups per host (the scheduler's request path).
    """
    ranked = sorted({link for peer in peers for link in topology.links_of(peer)},
                    key=lambda k: (-link_loads[k.name].congestion_pct, k.name))

    def worst(host):
        mine = topology.links_of(host)
        return next((link_loads[k.name] for k in ranked if k not in mine), None)
    return worst


def worst_by_host(topology, link_loads):
    """``{host: Load}``: the most congested link each host sends into."""
    out = {}
    for host, links in topology.of_host.items():
        out[host] = max((link_loads[k.name] for k in links),
                        key=lambda ld: (ld.congestion_pct, ld.link.name))
    return out
