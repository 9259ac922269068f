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


def build_link(name, overrides, rate=None, mtu=None, fallback_bytes_per_s=None):
    """A :class:`LinkInfo`: overrides first, then the measured facts.

    ``rate`` is a :class:`PortRate` (or ``None``), ``mtu`` the detected MTU
    (or ``None``: the paper's default), ``fallback_bytes_per_s`` a capacity
    from another source (a netdev's speed). Without any capacity the
    operator must configure one: ``FabricError``.
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
            "capacity of link %s unknown: set [fabric] link_capacity_gbps" % name)
    if overrides.mtu is not None:
        link_mtu = overrides.mtu
    elif mtu is not None:
        link_mtu = mtu
    else:
        link_mtu = DEFAULT_MTU
    return base.LinkInfo(name=name, capacity_bytes_per_s=float(capacity), mtu=int(link_mtu))
