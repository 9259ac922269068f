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

"""Bytes per peer: what each VM's tap carries, by destination address, counted by the kernel.

A tap's counters say how much a VM sends, not to whom; a victim's
interference across hosts depends on where the bytes go (its peer's port,
a rack's uplink). Where the host sees the VM's packets (a tap: Ethernet,
and RoCEv2 over it) the kernel can count them by destination: one
nftables table, ``netdev resex_peers``, with an ingress chain over the
VMs' taps (a packet the guest sends enters the host on its tap) and two
dynamic sets keyed by ``tap . destination`` (IPv4, IPv6) whose elements
carry a counter (doc/source/fabric.rst, "Bytes per peer")::

    table netdev resex_peers {
      set tx4 { type ifname . ipv4_addr; flags dynamic,timeout; timeout 10m; counter; size 65535; }
      chain ingress {
        type filter hook ingress devices = { "tap1", "tap2" } priority 0; policy accept;
        meta protocol ip update @tx4 { iifname . ip daddr }
      }
    }

The counts are IP bytes (headers included, without the Ethernet header).
An element unused for ``timeout`` leaves the set (its counter with it: a
reader sees a peer's total drop to nothing, a reset); the set holds at
most ``size`` elements (further destinations are not counted until some
expire). A VM on an InfiniBand VF, or on a vhost-user or SR-IOV port, has
no tap the host sees: nothing is counted for it.

:func:`script` and :func:`parse` are pure; :class:`PeerCounter` runs
``nft`` (a thin adapter: the caller chooses when).
"""

import json
import logging
import re
import subprocess

LOG = logging.getLogger(__name__)

TABLE = "resex_peers"
SETS = (("tx4", "ipv4_addr", "ip"), ("tx6", "ipv6_addr", "ip6"))
#: Most elements a set holds, and how long an unused one stays (seconds).
SIZE = 65535
TIMEOUT_S = 600
#: Interface names nftables accepts here (Linux: at most 15 bytes, no quote).
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
#: Largest ``nft -j`` answer read (bytes): two full sets are about 20 MB.
MAX_ANSWER_BYTES = 64 << 20


def valid_tap(name):
    """True when ``name`` is a network interface name the script may carry."""
    return isinstance(name, str) and bool(_IFNAME.match(name))


def script(taps, create=True, table=TABLE, timeout_s=TIMEOUT_S, size=SIZE):
    """The ``nft -f`` text counting ``taps`` (names; invalid ones refused with ValueError).

    ``create``: the table and its sets are created first (idempotent:
    ``add`` keeps existing sets and their counters); the chain is always
    deleted and added again, in the same transaction, with the new device
    list. No taps: the chain is deleted and not added (nothing is counted).
    """
    bad = [t for t in taps if not valid_tap(t)]
    if bad:
        raise ValueError("not an interface name: %r" % (bad[0],))
    taps = sorted(set(taps))
    lines = ["add table netdev %s" % table]
    if create:
        for name, kind, _proto in SETS:
            lines.append("add set netdev %s %s { type ifname . %s; flags dynamic,timeout; "
                         "timeout %ds; counter; size %d; }" % (table, name, kind, timeout_s,
                                                               size))
    lines.append("add chain netdev %s ingress" % table)
    lines.append("delete chain netdev %s ingress" % table)
    if taps:
        lines.append("add chain netdev %s ingress { type filter hook ingress devices = { %s } "
                     "priority 0; policy accept; }"
                     % (table, ", ".join('"%s"' % t for t in taps)))
        for name, _kind, proto in SETS:
            daddr = "ip daddr" if proto == "ip" else "ip6 daddr"
            lines.append("add rule netdev %s ingress meta protocol %s update @%s { iifname . "
                         "%s }" % (table, proto, name, daddr))
    return "\n".join(lines) + "\n"


def parse(text):
    """``{tap: {peer address: bytes}}`` from ``nft -j list set`` answers (one or several).

    ``text``: the JSON text of one answer; a malformed one raises
    ValueError. Elements of other shapes (no counter, not a pair) are
    skipped; an element twice (never in a set) is summed.
    """
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ValueError("not an nft JSON answer: %s" % exc) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("nftables"), list):
        raise ValueError("not an nft JSON answer: no nftables list")
    out = {}
    for obj in doc["nftables"]:
        found = obj.get("set") if isinstance(obj, dict) else None
        if not isinstance(found, dict):
            continue
        for item in found.get("elem") or ():
            pair = _element(item)
            if pair is not None:
                (tap, peer), nbytes = pair
                peers = out.setdefault(tap, {})
                peers[peer] = peers.get(peer, 0) + nbytes
    return out


def _element(item):
    """``((tap, peer), bytes)`` of one set element, or None when it has another shape."""
    elem = item.get("elem") if isinstance(item, dict) else None
    if not isinstance(elem, dict):
        return None
    val, counter = elem.get("val"), elem.get("counter")
    concat = val.get("concat") if isinstance(val, dict) else None
    if (not isinstance(concat, list) or len(concat) != 2
            or not all(isinstance(v, str) for v in concat) or not isinstance(counter, dict)):
        return None
    nbytes = counter.get("bytes")
    if type(nbytes) is not int or nbytes < 0:
        return None
    return (concat[0], concat[1]), nbytes


def _run(args, stdin=None, timeout=5.0):
    """``nft ARGS``: its standard output; RuntimeError with its message when it fails."""
    try:
        done = subprocess.run(["nft"] + list(args), input=stdin, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError("nft %s: %s" % (" ".join(args), exc)) from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[:500]
        raise RuntimeError("nft %s: %s" % (" ".join(args), said))
    if len(done.stdout) > MAX_ANSWER_BYTES:
        raise RuntimeError("nft %s: answer over %d bytes" % (" ".join(args), MAX_ANSWER_BYTES))
    return done.stdout


class PeerCounter:
    """The host's ``netdev resex_peers`` table: :meth:`sync` the taps, read :meth:`totals`.

    ``run(args, stdin=None)`` runs ``nft`` (default: the binary, 5 s
    bound). Not thread-safe: one caller (the agent's peers thread).
    """

    def __init__(self, run=_run, table=TABLE):
        self._run = run
        self.table = table
        self._taps = None           # the device list last written, None before the first

    @property
    def taps(self):
        """The taps counted now (a frozenset; empty before the first :meth:`sync`)."""
        return self._taps or frozenset()

    def sync(self, taps):
        """Count ``taps`` from now on (invalid names skipped); True when the chain changed.

        A tap that vanished between the caller's listing and the write
        makes ``nft`` refuse the device list: the error is raised
        (RuntimeError) and the next call writes it again.
        """
        want = frozenset(t for t in taps if valid_tap(t))
        if want == self._taps:
            return False
        self._run(["-f", "-"], stdin=script(want, create=self._taps is None, table=self.table))
        self._taps = want
        return True

    def totals(self):
        """``{tap: {peer: bytes}}`` counted since each element entered its set."""
        out = {}
        for name, _kind, _proto in SETS:
            got = parse(self._run(["-j", "list", "set", "netdev", self.table, name]))
            for tap, peers in got.items():
                out.setdefault(tap, {}).update(peers)
        return out

    def close(self):
        """Delete the table (and every counter); nothing raised if it is gone."""
        try:
            self._run(["delete", "table", "netdev", self.table])
        except RuntimeError as exc:
            LOG.debug("peer counters' table not deleted: %s", exc)
        self._taps = None
