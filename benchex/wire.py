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

"""The latency report wire format, versions 1 and 2 (``doc/source/latency.rst``).

One report is one line of JSON (UTF-8, ended by ``\\n``) summarising the
latencies an application saw over a short window, in microseconds::

    {"v":1,"n":250,"mean_us":212.5,"std_us":9.8,"p99_us":240.0}

On the host probe socket the report also names the VM it measured::

    {"v":1,"vm":"6f2b...-...","n":250,"mean_us":212.5,"std_us":9.8,"p99_us":240.0}

Version 2 adds one optional key, ``peer``: the other end of the requests
the report measures (an IPv4 or IPv6 address, with a port or not, or an
InfiniBand/RoCE GID in its usual textual form), so that interference met on
another host's port can be traced there (Distributed ResEx, Ranadive et al.,
IEEE CLUSTER 2013)::

    {"v":2,"peer":"10.0.0.7:7788","n":250,"mean_us":212.5,"std_us":9.8,"p99_us":240.0}

A version 1 report stays valid; :func:`encode` writes version 1 when it
names no peer, so a producer without one still reaches an older agent.

Why summaries and not raw samples: IOShares only needs a window's mean and
standard deviation (paper Section VI-C, Algorithm 2 line 6: "computes the
average and standard deviation of the values"), a summary costs the agent
one small parse per window whatever the request rate (BenchEx can run
hundreds of thousands of requests per second), a fixed-size record is easy
to bound and to produce from a static C program in a busybox guest, and a
count lets windows from several reports be pooled exactly.

Validation is strict, because reports are untrusted tenant input that
decides how other tenants are throttled: exactly these keys, ``v`` equal to
1, ``n`` an integer in [1, max_n], the three latencies JSON numbers that are
finite, ``mean_us`` and ``p99_us`` > 0, ``std_us`` >= 0, all of them at most
the plausibility bound (default 10 s). No NaN/Infinity literals, no
duplicate keys. A ``peer`` (version 2 only) that is not one of the forms
:func:`canonical_peer` accepts rejects the whole report (``bad_peer``), as
any other bad field does: a report whose peer is wrong would be traced to
the wrong place. A ``vm`` key on a per-VM channel is **rejected**
(``vm_field_in_channel``): a VM's identity is the channel it writes to, and a
message that tries to name another VM is an attempt worth counting.
"""

import dataclasses
import ipaddress
import json
import math
import re

#: The version :func:`encode` writes with a peer; without one it writes 1.
VERSION = 2
#: The versions :func:`parse` accepts.
VERSIONS = (1, 2)

#: Longest ``peer`` accepted, in characters (the longest valid one, an IPv6
#: address in full with a port, has 47).
MAX_PEER_CHARS = 64

#: What a ``peer`` names (:class:`Peer`'s ``kind``).
PEER_IPV4, PEER_IPV6, PEER_GID = "ipv4", "ipv6", "gid"

#: The virtio-serial port name (``<target type='virtio' name=...>``).
CHANNEL_NAME = "org.resex.latency.0"
#: Where the guest sees that port.
GUEST_DEVICE = "/dev/virtio-ports/" + CHANNEL_NAME

#: The two ways a report arrives.
SOURCE_CHANNEL = "channel"
SOURCE_PROBE = "probe"
SOURCES = (SOURCE_CHANNEL, SOURCE_PROBE)

# Rejection reasons: a closed set, so counters and log throttles stay bounded.
TOO_LONG = "too_long"
NOT_UTF8 = "not_utf8"
NOT_JSON = "not_json"
NOT_OBJECT = "not_object"
VERSION_UNSUPPORTED = "version"
SCHEMA = "schema"
NOT_FINITE = "not_finite"
OUT_OF_RANGE = "out_of_range"
VM_FIELD_IN_CHANNEL = "vm_field_in_channel"
UNKNOWN_VM = "unknown_vm"
NO_LATENCY_SLA = "no_latency_sla"
RATE_LIMITED = "rate_limited"
PEER_NOT_ALLOWED = "peer_not_allowed"
TOO_MANY_CLIENTS = "too_many_clients"
BAD_PEER = "bad_peer"
REASONS = (TOO_LONG, NOT_UTF8, NOT_JSON, NOT_OBJECT, VERSION_UNSUPPORTED, SCHEMA, NOT_FINITE,
           OUT_OF_RANGE, VM_FIELD_IN_CHANNEL, UNKNOWN_VM, NO_LATENCY_SLA, RATE_LIMITED,
           PEER_NOT_ALLOWED, TOO_MANY_CLIENTS, BAD_PEER)

_LATENCY_KEYS = ("mean_us", "std_us", "p99_us")
_CHANNEL_KEYS = frozenset(("v", "n") + _LATENCY_KEYS)
_PROBE_KEYS = _CHANNEL_KEYS | {"vm"}
_UUID = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
# A GID as ibv_devinfo, show_gids and sysfs (ports/N/gids/K) print it: eight
# groups of four hex digits. Any other IPv6 spelling is an IPv6 address.
_GID = re.compile(r"\A[0-9a-f]{4}(:[0-9a-f]{4}){7}\Z")
_PORT = re.compile(r"\A[1-9][0-9]{0,4}\Z")
_IPV4 = re.compile(r"\A[0-9.]{7,15}\Z")
_IPV6 = re.compile(r"\A[0-9a-f:.]{2,45}\Z")


class Rejected(ValueError):
    """A report failed validation; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason, detail=""):
        self.reason = reason
        self.detail = detail
        super().__init__("%s%s" % (reason, (": " + detail) if detail else ""))


@dataclasses.dataclass(frozen=True)
class Limits:
    """The bounds every report is checked against (``[latency]`` options)."""

    max_bytes: int = 512
    plausible_max_us: float = 10_000_000.0
    max_n: int = 1_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    """A validated report. ``vm`` is set only for probe-socket reports."""

    n: int
    mean_us: float
    std_us: float
    p99_us: float
    vm: str | None = None
    peer: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Peer:
    """A parsed ``peer``: what it names, the address and the port.

    ``kind`` is :data:`PEER_IPV4`, :data:`PEER_IPV6` or :data:`PEER_GID`;
    ``address`` an :mod:`ipaddress` object (a GID as the
    :class:`ipaddress.IPv6Address` of its 128 bits); ``port`` an int or None.
    """

    kind: str
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int | None = None

    def __str__(self):
        if self.kind == PEER_GID:
            return ":".join("%04x" % int.from_bytes(self.address.packed[i:i + 2], "big")
                            for i in range(0, 16, 2))
        text = str(self.address)
        if self.port is None:
            return text
        return ("[%s]:%d" if self.kind == PEER_IPV6 else "%s:%d") % (text, self.port)


def _port(text):
    if not _PORT.match(text):
        return None
    port = int(text)
    return port if port <= 65535 else None


def parse_peer(value):
    """The :class:`Peer` in ``value`` (a string), or ``None`` if it names none.

    Accepted: ``A.B.C.D``, ``A.B.C.D:PORT``, an IPv6 address (any spelling
    :mod:`ipaddress` reads, no zone), ``[IPV6]:PORT``, and a GID as eight
    groups of four hex digits. Upper-case hex is read as lower-case. At most
    :data:`MAX_PEER_CHARS` characters; a port is 1 to 65535.
    """
    if not isinstance(value, str) or not 0 < len(value) <= MAX_PEER_CHARS:
        return None
    text = value.lower()
    port = None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]:")
        port = _port(rest) if sep else None
        if port is None or not _IPV6.match(host):
            return None
        kind = PEER_IPV6
    elif _GID.match(text):
        host, kind = text, PEER_GID
    elif text.count(":") == 1:
        host, _sep, rest = text.partition(":")
        port = _port(rest)
        if port is None or not _IPV4.match(host):
            return None
        kind = PEER_IPV4
    elif ":" in text:
        if not _IPV6.match(text):
            return None
        host, kind = text, PEER_IPV6
    else:
        if not _IPV4.match(text):
            return None
        host, kind = text, PEER_IPV4
    try:
        address = (ipaddress.IPv4Address(host) if kind == PEER_IPV4
                   else ipaddress.IPv6Address(host))
    except ValueError:
        return None
    return Peer(kind, address, port)


def canonical_peer(value):
    """``value`` as the agent keeps it (:class:`Peer`'s text), or ``None`` if it is no peer.

    IPv6 addresses come out compressed (RFC 5952, as :mod:`ipaddress` writes
    them), GIDs in full, hex in lower case.
    """
    peer = parse_peer(value)
    return None if peer is None else str(peer)


def _reject_constant(name):
    raise Rejected(NOT_FINITE, name)


def _unique_object(pairs):
    out = dict(pairs)
    if len(out) != len(pairs):
        raise Rejected(SCHEMA, "duplicate key")
    return out


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, object_pairs_hook=_unique_object)


def canonical_uuid(value):
    """``value`` as a lower-case canonical UUID string, or ``None`` if it is not one."""
    if not isinstance(value, str) or len(value) != 36:
        return None
    value = value.lower()
    return value if _UUID.match(value) else None


def parse(line, source, limits=Limits()):
    """Validate one report line (bytes, without or with its newline).

    Returns a :class:`Report`; raises :class:`Rejected` with the reason.
    ``source`` is :data:`SOURCE_CHANNEL` (a ``vm`` key is rejected) or
    :data:`SOURCE_PROBE` (a ``vm`` key is required). A version 2 report
    may name its ``peer`` (:func:`canonical_peer`; :data:`BAD_PEER` if it
    names none).
    """
    if len(line) > limits.max_bytes:
        raise Rejected(TOO_LONG)
    try:
        text = bytes(line).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejected(NOT_UTF8) from exc
    try:
        obj = _DECODER.decode(text)
    except Rejected:
        raise
    except (ValueError, RecursionError) as exc:
        raise Rejected(NOT_JSON) from exc
    if not isinstance(obj, dict):
        raise Rejected(NOT_OBJECT)
    version = obj.get("v")
    if type(version) is not int or version not in VERSIONS:
        raise Rejected(VERSION_UNSUPPORTED, repr(version)[:20])
    keys = obj.keys()
    if version >= 2 and "peer" in keys:
        keys = keys - {"peer"}
    vm = None
    if source == SOURCE_CHANNEL:
        if "vm" in keys:
            raise Rejected(VM_FIELD_IN_CHANNEL)
        if keys != _CHANNEL_KEYS:
            raise Rejected(SCHEMA, "keys")
    else:
        if keys != _PROBE_KEYS:
            raise Rejected(SCHEMA, "keys")
        vm = canonical_uuid(obj["vm"])
        if vm is None:
            raise Rejected(SCHEMA, "vm is not a UUID")
    n = obj["n"]
    if type(n) is not int:
        raise Rejected(SCHEMA, "n is not an integer")
    if not 1 <= n <= limits.max_n:
        raise Rejected(OUT_OF_RANGE, "n")
    values = []
    for key in _LATENCY_KEYS:
        raw = obj[key]
        if type(raw) not in (int, float):
            raise Rejected(SCHEMA, "%s is not a number" % key)
        try:
            value = float(raw)
        except OverflowError as exc:
            raise Rejected(OUT_OF_RANGE, key) from exc
        if not math.isfinite(value):
            raise Rejected(NOT_FINITE, key)
        if value < 0 or value > limits.plausible_max_us:
            raise Rejected(OUT_OF_RANGE, key)
        values.append(value)
    mean_us, std_us, p99_us = values
    if mean_us <= 0 or p99_us <= 0:
        raise Rejected(OUT_OF_RANGE, "latency must be > 0")
    peer = None
    if "peer" in obj and version >= 2:
        peer = canonical_peer(obj["peer"])
        if peer is None:
            raise Rejected(BAD_PEER, repr(obj["peer"])[:80])
    return Report(n=n, mean_us=mean_us, std_us=std_us, p99_us=p99_us, vm=vm, peer=peer)


def encode(n, mean_us, std_us, p99_us, vm=None, peer=None):
    """One report line (bytes, newline-terminated): version 2 with ``peer``, else 1.

    ``peer`` is written in its canonical form (:func:`canonical_peer`);
    raises ``ValueError`` if it names no peer: a producer never writes what
    the parser rejects.
    """
    obj = {"v": 1}
    if peer is not None:
        text = canonical_peer(peer)
        if text is None:
            raise ValueError("not a peer address or GID: %r" % (peer,))
        obj = {"v": 2, "peer": text}
    if vm is not None:
        obj["vm"] = vm
    obj.update(n=int(n), mean_us=round(float(mean_us), 3), std_us=round(float(std_us), 3),
               p99_us=round(float(p99_us), 3))
    return (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode("ascii")
