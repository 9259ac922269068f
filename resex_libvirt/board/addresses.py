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

"""The VMs' addresses a host report publishes, and where a peer address leads.

A latency report may name its peer (``benchex.wire``, version 2): the other
end of the requests it measures, perhaps on another host. Each host report
(1.4) carries ``addresses``, ``{vm: [address, ...]}`` of the host's VMs
(doc/source/board.rst), so :func:`resolve` can tell from a board snapshot
which host and VM a peer is. Addresses are written in one form each:

* IPv4 and IPv6 as :mod:`ipaddress` writes them (IPv6 compressed, no zone);
* MACs as six lower-case hex pairs (``fa:16:3e:11:22:33``);
* InfiniBand port GUIDs as four groups of four lower-case hex digits
  (``0002:c903:0003:1234``, as sysfs writes ``node_guid``).

Pure functions: no clock, no I/O.
"""

import ipaddress
import json
import re
import typing

from benchex import wire

#: Most VMs a report lists, addresses per VM, and characters per VM name.
MAX_VMS = 512
MAX_PER_VM = 8
MAX_VM_CHARS = 64

_MAC = re.compile(r"\A[0-9a-f]{2}(:[0-9a-f]{2}){5}\Z")
_GUID = re.compile(r"\A[0-9a-f]{4}(:[0-9a-f]{4}){3}\Z")
_IP = re.compile(r"\A[0-9a-f:.]{2,45}\Z")


class Location(typing.NamedTuple):
    """Where a peer is: the host (its report's ``host``) and the VM (as that report names it)."""

    host: str
    vm: str


def canonical(text):
    """``text`` as an address in its one written form (module docstring), or ``None``."""
    if not isinstance(text, str) or len(text) > 45:
        return None
    text = text.strip().lower()
    if _MAC.match(text) or _GUID.match(text):
        return text
    if not _IP.match(text):
        return None
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def normalize(value):
    """A report's ``addresses`` as a sorted tuple of ``(vm, (address, ...))``.

    ``value`` is a mapping ``{vm: [address, ...]}`` (a decoded record) or
    such pairs. Raises ``ValueError`` when its shape is wrong: not a
    mapping, more than :data:`MAX_VMS` VMs, a VM name that is not a string
    of 1 to :data:`MAX_VM_CHARS` characters, a value that is not a list of
    at most :data:`MAX_PER_VM` strings. An address this reader does not
    know (a newer agent may publish kinds it cannot read) is left out, each
    address is kept once, and a VM left with none is left out.
    """
    items = value.items() if isinstance(value, dict) else value
    if not isinstance(items, (tuple, list, type({}.items()))):
        raise ValueError("addresses must be an object, got %r" % (type(value).__name__,))
    if len(items) > MAX_VMS:
        raise ValueError("addresses lists more than %d VMs" % MAX_VMS)
    out = {}
    for entry in items:
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise ValueError("an addresses entry must be a VM and its addresses")
        vm, addrs = entry
        if not isinstance(vm, str) or not 0 < len(vm) <= MAX_VM_CHARS:
            raise ValueError("a VM in addresses must be 1 to %d characters" % MAX_VM_CHARS)
        if not isinstance(addrs, (list, tuple)) or len(addrs) > MAX_PER_VM:
            raise ValueError("VM %s: addresses must be a list of at most %d" % (vm, MAX_PER_VM))
        if any(not isinstance(a, str) for a in addrs):
            raise ValueError("VM %s: an address must be a string" % vm)
        kept = []
        for a in addrs:
            text = canonical(a)
            if text is not None and text not in kept:
                kept.append(text)
        if vm in out:
            raise ValueError("addresses names VM %s twice" % vm)
        if kept:
            out[vm] = tuple(kept)
    return tuple(sorted(out.items()))


def fit(vm_addresses, budget, first=()):
    """The ``(vm, addresses)`` pairs of ``vm_addresses`` whose JSON fits in ``budget`` bytes.

    ``vm_addresses``: ``{vm: [address, ...]}``; each VM's addresses are
    made canonical (unknown ones left out), at most :data:`MAX_PER_VM`
    kept. The VMs in ``first`` (the latency-sensitive ones) are taken
    first, then the others, each group in name order, while the object
    ``{vm: [...], ...}`` stays within ``budget`` bytes; a VM that does not
    fit is left out whole. Returns the pairs, sorted.
    """
    first = set(first)
    chosen = []
    used = 2    # the braces
    for vm in sorted(vm_addresses, key=lambda name: (name not in first, name)):
        if not isinstance(vm, str) or not 0 < len(vm) <= MAX_VM_CHARS:
            continue
        kept = []
        for a in vm_addresses[vm] or ():
            text = canonical(a)
            if text is not None and text not in kept:
                kept.append(text)
        kept = kept[:MAX_PER_VM]
        if not kept:
            continue
        cost = len(json.dumps({vm: kept}, separators=(",", ":"))) - 2 + (1 if chosen else 0)
        if used + cost > budget or len(chosen) >= MAX_VMS:
            continue
        used += cost
        chosen.append((vm, tuple(kept)))
    return tuple(sorted(chosen))


def _interface_mac(address):
    """The MAC an EUI-64 interface identifier (``xx:xx:xx:ff:fe:xx:xx:xx``) was made from."""
    iid = address.packed[8:]
    if iid[3:5] != b"\xff\xfe":
        return None
    raw = bytes([iid[0] ^ 0x02]) + iid[1:3] + iid[5:]
    return ":".join("%02x" % b for b in raw)


def keys_of(peer):
    """The published addresses that would be ``peer`` (a :class:`benchex.wire.Peer`).

    An IPv4 address is itself. An IPv6 address or a GID is the IPv6 address
    of its 128 bits (RoCE v2 GIDs are the port's IP address), the IPv4
    address it maps (``::ffff:a.b.c.d``, RoCE v2 over IPv4), and the MAC of
    an EUI-64 interface identifier (RoCE v1 and SLAAC link-local). A GID is
    also its low 64 bits as a port GUID (an InfiniBand GID is the subnet
    prefix and the port GUID). The port is never part of it.
    """
    address = peer.address
    keys = {str(address)}
    if peer.kind == wire.PEER_IPV4:
        return keys
    if address.ipv4_mapped is not None:
        keys.add(str(address.ipv4_mapped))
    mac = _interface_mac(address)
    if mac is not None:
        keys.add(mac)
    if peer.kind == wire.PEER_GID:
        iid = address.packed[8:]
        keys.add(":".join("%02x%02x" % (iid[i], iid[i + 1]) for i in range(0, 8, 2)))
    return keys


def index(reports):
    """``{address: {vm: (ts, host)}}`` of the addresses ``reports`` publish.

    A VM published by two hosts (a migration, before the old host's report
    expires) is where the newer report (``ts``) says. One pass; build it once
    to :func:`locate` many peers on one board.
    """
    out = {}
    for report in (reports.values() if isinstance(reports, dict) else reports):
        for vm, addrs in report.addresses:
            for a in addrs:
                seen = out.setdefault(a, {})
                old = seen.get(vm)
                if old is None or report.ts > old[0]:
                    seen[vm] = (report.ts, report.host)
    return out


def locate(peer, addresses):
    """The :class:`Location` of ``peer`` in an :func:`index`, or ``None`` (see :func:`resolve`)."""
    if not isinstance(peer, wire.Peer):
        peer = wire.parse_peer(peer)
        if peer is None:
            return None
    found = {}
    for key in keys_of(peer):
        for vm, (ts, host) in addresses.get(key, {}).items():
            if vm not in found or ts > found[vm][0]:
                found[vm] = (ts, host)
    if len(found) != 1:
        return None
    (vm, (_ts, host)), = found.items()
    return Location(host, vm)


def resolve(peer, reports):
    """The :class:`Location` of ``peer`` on the board, or ``None``.

    ``peer``: a peer's text (as a latency report names it) or a
    :class:`benchex.wire.Peer`; ``reports``: host reports (an iterable, or a
    snapshot ``{host: report}``). The VM whose published addresses include
    one of :func:`keys_of` the peer's is the answer; the same VM published
    by two hosts (a migration, before the old host's report expires) is
    where the newer report (``ts``) says. ``None`` when no VM, or more than
    one VM, has the address: tenant networks may reuse private addresses,
    and a guess would tax the wrong host.
    """
    return locate(peer, index(reports))
