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

"""Link capacity and MTU: from the port's ``rate`` file, the netdev, or config.

The market needs the link's *data* capacity in bytes per second and its
MTU (paper Section VI-B2: "The physical capacity of our IB Link is 8Gbps
(due to the 8b/10b IB encoding) i.e. 1 Gigabyte per second ... LinkBW /
MTUSize ... MTUs in one second").

``/sys/class/infiniband/<dev>/ports/<n>/rate`` prints
``"<rate> Gb/sec (<width>X <speed>)"`` (kernel ``rate_show`` in
``drivers/infiniband/core/sysfs.c``), where ``<rate>`` is a per-lane number
times the lane count: 2.5 SDR, 5 DDR, 10 QDR, 10 FDR10, 14 FDR, 25 EDR,
50 HDR, 100 NDR, 200 XDR (kernels before 5.x print no name for SDR:
``"10 Gb/sec (4X)"``). That number is not uniformly a signalling rate, so a
single "x 64/66 from FDR on" rule would be wrong by 3% for EDR and later.
We convert per generation, from the IBTA lane rates:

======  ======================  ==========  ===================
speed   lane signalling         encoding    lane data (Gb/s)
======  ======================  ==========  ===================
SDR     2.5 GBd                 8b/10b      2.0
DDR     5 GBd                   8b/10b      4.0
QDR     10 GBd                  8b/10b      8.0
FDR10   10.3125 GBd             64b/66b     10.0
FDR     14.0625 GBd             64b/66b     13.64 (14.0625*64/66)
EDR     25.78125 GBd            64b/66b     25.0
HDR     53.125 GBd PAM4         64b/66b     50.0
NDR     106.25 GBd PAM4         64b/66b     100.0
XDR     212.5 GBd PAM4          64b/66b     200.0
======  ======================  ==========  ===================

So ``40 Gb/sec (4X QDR)`` is 32 Gb/s of data (the paper's 8b/10b rule),
``56 Gb/sec (4X FDR)`` 54.5 Gb/s and ``100 Gb/sec (4X EDR)`` 100 Gb/s. An
unknown speed name falls back to 8b/10b at <= 10 Gb/s per lane and 64b/66b
above (the conservative reading). Capacities are decimal (1 Gb/s = 1e9
bit/s); the paper rounded 8 Gb/s to 2^30 bytes/s.

The active MTU is not in the IB core's sysfs (``ibv_query_port`` reports it
to verbs users only). We take it from configuration, else from an IPoIB
netdev in datagram mode, whose MTU is the IB MTU minus the 4-byte IPoIB
header (2044 for 2048, 4092 for 4096), else the paper's default of 1024
bytes (Section VI-B2).

Discovery of an Ethernet/RoCE uplink (:func:`discover_uplink`): when no
interface is named, the link is the interface of the default route
(``/proc/net/route``, then ``/proc/net/ipv6_route``), the path the VMs'
traffic leaves the host by. Its capacity (:func:`netdev_capacity`) is, in
order: the HCA port's ``rate`` file for an IPoIB netdev (``type`` 32,
``device/infiniband/<dev>/ports/<dev_port + 1>/rate``); the netdev's own
``speed`` (Mb/s of data, as ethtool prints it; a bond reports the sum of
its active members); else the speed of the one device under it: a VLAN's
or macvlan's ``lower_*`` link, or a bridge's only physical port (a port
with a ``device`` link and no ``tun_flags``: taps are the VMs' own). A
virtio or veth NIC reports ``-1`` (unknown) and a bridge with two uplinks
is ambiguous: both give ``None`` with the reason, and nothing is guessed.
"""

import dataclasses
import logging
import os
import re

from resex_libvirt import exceptions
from resex_libvirt.fabric import base

LOG = logging.getLogger(__name__)

#: The paper's MTU (Section VI-B2) when nothing better is known.
DEFAULT_MTU = 1024

#: IB MTU enumeration (IBA 14.2.5.6 NeighborMTU): 256 .. 4096 bytes.
IB_MTUS = (256, 512, 1024, 2048, 4096)

#: IPoIB encapsulation header (RFC 4391): netdev MTU = IB MTU - 4 in datagram mode.
IPOIB_HEADER = 4

#: speed name -> (per-lane number the kernel prints, per-lane data Gb/s).
LANE_RATES = {
    "SDR": (2.5, 2.0),
    "DDR": (5.0, 4.0),
    "QDR": (10.0, 8.0),
    "FDR10": (10.0, 10.0),
    "FDR": (14.0, 14.0625 * 64 / 66),
    "EDR": (25.0, 25.0),
    "HDR": (50.0, 50.0),
    "NDR": (100.0, 100.0),
    "XDR": (200.0, 200.0),
}

_RATE_RE = re.compile(
    r"^\s*(?P<rate>\d+(?:\.\d+)?)\s*Gb/sec\s*\((?P<width>\d+)X\s*(?P<speed>[A-Z0-9]*)\)\s*$")


@dataclasses.dataclass(frozen=True)
class PortRate:
    """A parsed ``rate`` file: what the kernel printed and the data rate it means."""

    signalling_gbps: float
    width: int
    speed: str
    data_gbps: float

    @property
    def data_bytes_per_s(self):
        return self.data_gbps * 1e9 / 8


@dataclasses.dataclass(frozen=True)
class LinkOverrides:
    """Operator overrides (``[fabric] link_capacity_gbps`` and ``link_mtu``)."""

    capacity_gbps: float | None = None
    mtu: int | None = None


def parse_rate(text):
    """:class:`PortRate` of a ``rate`` file's text; ``FabricError`` if unparsable."""
    match = _RATE_RE.match(text or "")
    if not match:
        raise exceptions.FabricError("unrecognised IB rate %r" % (text,))
    rate = float(match.group("rate"))
    width = int(match.group("width"))
    speed = match.group("speed") or "SDR"  # kernels before 5.x print no name for SDR
    if width <= 0:
        raise exceptions.FabricError("IB rate %r has no lanes" % (text,))
    lane = LANE_RATES.get(speed)
    if lane is not None:
        data = lane[1] * width
    else:
        per_lane = rate / width
        data = rate * (8 / 10 if per_lane <= 10 else 64 / 66)
    return PortRate(signalling_gbps=rate, width=width, speed=speed, data_gbps=data)


def ib_mtu_from_ipoib(netdev_mtu):
    """The IB MTU behind an IPoIB datagram-mode netdev MTU, or ``None``.

    Connected mode (netdev MTU up to 65520) says nothing about the IB MTU.
    """
    try:
        candidate = int(netdev_mtu) + IPOIB_HEADER
    except (TypeError, ValueError):
        return None
    return candidate if candidate in IB_MTUS else None


def read_text(path):
    """A sysfs attribute's text, stripped; ``None`` if it does not exist or cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def netdev_mtu(sysfs_root, netdev):
    text = read_text(os.path.join(sysfs_root, "class", "net", netdev, "mtu"))
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def netdev_speed_bytes_per_s(sysfs_root, netdev):
    """``/sys/class/net/<dev>/speed`` (Mb/s, an Ethernet data rate) in bytes/s, or ``None``."""
    text = read_text(os.path.join(sysfs_root, "class", "net", netdev, "speed"))
    try:
        mbps = int(text)
    except (TypeError, ValueError):
        return None
    return mbps * 1e6 / 8 if mbps > 0 else None


#: ``/sys/class/net/<dev>/type`` of an IPoIB netdev (ARPHRD_INFINIBAND).
ARPHRD_INFINIBAND = 32

#: How deep :func:`netdev_capacity` follows lower devices (VLAN on bond on NIC).
_MAX_DEPTH = 4


@dataclasses.dataclass(frozen=True)
class Capacity:
    """A netdev's discovered capacity: bytes/s of data, or ``None`` and why."""

    netdev: str
    bytes_per_s: float | None
    how: str


def default_route_netdevs(proc_root="/proc"):
    """Interfaces of the default routes, IPv4 first, in the kernel's order; ``[]`` if none."""
    found = []
    text = read_text(os.path.join(proc_root, "net", "route")) or ""
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            up = int(fields[3], 16) & 0x1
        except ValueError:
            continue
        if up and fields[1] == "00000000" and fields[7] == "00000000":
            found.append(fields[0])
    text = read_text(os.path.join(proc_root, "net", "ipv6_route")) or ""
    for line in text.splitlines():
        fields = line.split()
        if (len(fields) >= 10 and fields[0] == "0" * 32 and fields[1] == "00"
                and fields[9] != "lo"):
            found.append(fields[9])
    out = []
    for name in found:
        if name not in out:
            out.append(name)
    return out


def discover_uplink(proc_root="/proc"):
    """The interface of the (first) default route, or ``None``."""
    names = default_route_netdevs(proc_root)
    return names[0] if names else None


def _net_dir(sysfs_root, netdev):
    return os.path.join(sysfs_root, "class", "net", netdev)


def _ipoib_rate(sysfs_root, netdev):
    """The :class:`PortRate` of the HCA port behind an IPoIB netdev, or ``None``."""
    ndir = _net_dir(sysfs_root, netdev)
    if read_text(os.path.join(ndir, "type")) != str(ARPHRD_INFINIBAND):
        return None
    ib_dir = os.path.join(ndir, "device", "infiniband")
    try:
        devs = sorted(os.listdir(ib_dir))
    except OSError:
        return None
    if not devs:
        return None
    dev_port = read_text(os.path.join(ndir, "dev_port"))
    port = int(dev_port) + 1 if dev_port and dev_port.isdigit() else 1
    text = read_text(os.path.join(ib_dir, devs[0], "ports", str(port), "rate"))
    if text is None:
        return None
    try:
        return parse_rate(text)
    except exceptions.FabricError:
        return None


def _lower_devices(sysfs_root, netdev):
    """``(kind, [names])``: a VLAN's/bond's ``lower_*`` links, else a bridge's ports."""
    ndir = _net_dir(sysfs_root, netdev)
    try:
        entries = os.listdir(ndir)
    except OSError:
        return None, []
    lower = sorted(e[len("lower_"):] for e in entries if e.startswith("lower_"))
    if lower:
        return "lower", lower
    try:
        ports = sorted(os.listdir(os.path.join(ndir, "brif")))
    except OSError:
        return None, []
    physical = [p for p in ports
                if os.path.exists(os.path.join(_net_dir(sysfs_root, p), "device"))
                and not os.path.exists(os.path.join(_net_dir(sysfs_root, p), "tun_flags"))]
    return "bridge", physical


def netdev_capacity(sysfs_root, netdev, _depth=0):
    """The :class:`Capacity` of ``netdev`` (see the module's discovery notes)."""
    if not os.path.exists(_net_dir(sysfs_root, netdev)):
        return Capacity(netdev, None, "no interface %s" % netdev)
    rate = _ipoib_rate(sysfs_root, netdev)
    if rate is not None:
        return Capacity(netdev, rate.data_bytes_per_s,
                        "IB port rate %g Gb/sec (%dX %s)"
                        % (rate.signalling_gbps, rate.width, rate.speed))
    speed = netdev_speed_bytes_per_s(sysfs_root, netdev)
    if speed is not None:
        return Capacity(netdev, speed, "%s speed %d Mb/s" % (netdev, round(speed * 8 / 1e6)))
    own = read_text(os.path.join(_net_dir(sysfs_root, netdev), "speed"))
    why = "%s reports no speed (%s)" % (netdev, own if own is not None else "unreadable")
    if _depth >= _MAX_DEPTH:
        return Capacity(netdev, None, why)
    kind, lower = _lower_devices(sysfs_root, netdev)
    if kind == "bridge" and len(lower) > 1:
        return Capacity(netdev, None, "%s; bridge %s has %d physical ports (%s): ambiguous"
                        % (why, netdev, len(lower), ", ".join(lower)))
    if len(lower) == 1:
        below = netdev_capacity(sysfs_root, lower[0], _depth + 1)
        if below.bytes_per_s is not None:
            return Capacity(netdev, below.bytes_per_s, "%s under %s" % (below.how, netdev))
        return Capacity(netdev, None, "%s; %s" % (why, below.how))
    if kind == "bridge":
        return Capacity(netdev, None, "%s; bridge %s has no physical port" % (why, netdev))
    return Capacity(netdev, None, why)


def build_link(name, overrides, rate=None, mtu=None, fallback_bytes_per_s=None,
               unknown_reason=None):
    """A :class:`LinkInfo`: overrides first, then the measured facts.

    ``rate`` is a :class:`PortRate` (or ``None``), ``mtu`` the detected MTU
    (or ``None``: the paper's default), ``fallback_bytes_per_s`` a capacity
    from another source (a netdev's speed). Without any capacity the
    operator must configure one: ``FabricError``, saying why
    (``unknown_reason``) when the caller knows.
    """
    overrides = overrides or LinkOverrides()
    if overrides.capacity_gbps is not None:
        capacity = overrides.capacity_gbps * 1e9 / 8
    elif rate is not None:
        capacity = rate.data_bytes_per_s
    elif fallback_bytes_per_s is not None:
        capacity = fallback_bytes_per_s
    else:
        raise exceptions.FabricError(
            "capacity of link %s unknown%s: set [fabric] link_capacity_gbps"
            % (name, " (%s)" % unknown_reason if unknown_reason else ""))
    if overrides.mtu is not None:
        link_mtu = overrides.mtu
    elif mtu is not None:
        link_mtu = mtu
    else:
        link_mtu = DEFAULT_MTU
    return base.LinkInfo(name=name, capacity_bytes_per_s=float(capacity), mtu=int(link_mtu))
