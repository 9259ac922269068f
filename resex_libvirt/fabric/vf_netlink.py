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

"""Per-VF traffic from the PF's netlink statistics: IBMon's replacement for SR-IOV.

The paper read each VM's MTUs with IBMon, by mapping the guest's queue
pairs into dom0 (Section IV); no modern kernel allows that. On an SR-IOV
HCA each VM gets a virtual function, and the physical function's driver
reports every VF's counters through rtnetlink: an ``RTM_GETLINK`` request
for the PF netdev (``ib0``, or the Ethernet PF for RoCE) carrying
``IFLA_EXT_MASK`` = ``RTEXT_FILTER_VF`` is answered with
``IFLA_VFINFO_LIST`` -> ``IFLA_VF_INFO`` per VF, each holding
``IFLA_VF_MAC`` (whose ``vf`` field is the VF index) and ``IFLA_VF_STATS``
with 64-bit ``IFLA_VF_STATS_{TX,RX}_{BYTES,PACKETS}`` (``ip -s link show
ib0`` prints the same). The counters are the VF's own: ``TX`` is what the
VF, i.e. the guest, sent.

The VF index becomes a PCI address through the PF's
``/sys/class/net/<pf>/device/virtfn<N>`` links, and the PCI address becomes
a VM through ``VMInfo.hostdevs`` (the ``<hostdev>`` source addresses of its
domain XML, see :mod:`~resex_libvirt.fabric.domain_xml`).

Messages are built and decoded with pyroute2's own ``ifinfmsg`` and its
rtnetlink marshal; the transport is one plain ``AF_NETLINK`` socket
(:class:`RtnetlinkSource`). The source is injectable: tests hand the
monitor reply bytes encoded by pyroute2's ``ifinfmsg`` with the nested VF
attributes, and the monitor decodes them exactly as it decodes the
kernel's. There is no SR-IOV HCA on the build machines; the encoder is the
same code that parses real kernel replies (and the request/response path
itself is exercised against this machine's kernel on ``lo``), so this is
the closest stand-in for the hardware.
"""

import itertools
import logging
import os
import socket
import struct
import threading
import typing

from pyroute2 import netlink
from pyroute2.netlink import rtnl
from pyroute2.netlink.rtnl import ifinfmsg as ifinfmsg_mod
from pyroute2.netlink.rtnl import marshal as rtnl_marshal

from resex_libvirt import exceptions
from resex_libvirt.fabric import base
from resex_libvirt.fabric import cumulative
from resex_libvirt.fabric import domain_xml
from resex_libvirt.fabric import endpoint
from resex_libvirt.fabric import link_facts

LOG = logging.getLogger(__name__)

#: include/uapi/linux/rtnetlink.h: RTEXT_FILTER_VF = 1 << 0.
RTEXT_FILTER_VF = 1

_STATS = (
    ("tx_bytes", "IFLA_VF_STATS_TX_BYTES"),
    ("tx_packets", "IFLA_VF_STATS_TX_PACKETS"),
    ("rx_bytes", "IFLA_VF_STATS_RX_BYTES"),
    ("rx_packets", "IFLA_VF_STATS_RX_PACKETS"),
)


def encode_getlink_request(ifname, seq=1):
    """The bytes of ``RTM_GETLINK`` for ``ifname`` asking for VF info."""
    msg = ifinfmsg_mod.ifinfmsg()
    msg["family"] = socket.AF_UNSPEC
    msg["header"]["type"] = rtnl.RTM_GETLINK
    msg["header"]["flags"] = netlink.NLM_F_REQUEST
    msg["header"]["sequence_number"] = seq
    msg["attrs"] = [("IFLA_IFNAME", ifname), ("IFLA_EXT_MASK", RTEXT_FILTER_VF)]
    msg.encode()
    return bytes(msg.data)


class VFStatsSource(typing.Protocol):
    """Where the monitor reads a PF's ``RTM_GETLINK`` reply (with its VFs) from."""

    def __call__(self, ifname) -> bytes:
        """The raw netlink reply for ``ifname``; raises ``FabricError``."""

    def close(self):
        """Release what the source holds (a socket); it may be called again after."""


class RtnetlinkSource:
    """Sends ``RTM_GETLINK`` with ``RTEXT_FILTER_VF`` and returns the raw reply.

    Callable as ``source(ifname) -> bytes``. One socket, reused, guarded by
    a lock (the agent loop and the CLI are the only callers).
    """

    def __init__(self, timeout=2.0):
        self.timeout = timeout
        self._sock = None
        self._seq = itertools.count(1)
        self._lock = threading.Lock()

    def _socket(self):
        if self._sock is None:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            sock.settimeout(self.timeout)
            sock.bind((0, 0))
            self._sock = sock
        return self._sock

    def __call__(self, ifname):
        with self._lock:
            seq = next(self._seq) & 0xFFFFFFFF
            try:
                sock = self._socket()
                sock.send(encode_getlink_request(ifname, seq))
                while True:
                    # Peek with MSG_TRUNC for the full length: a PF with many
                    # VFs answers with more than a default-sized buffer.
                    head = bytearray(16)
                    size = sock.recv_into(head, 16, socket.MSG_PEEK | socket.MSG_TRUNC)
                    data = sock.recv(max(size, 16))
                    if _sequence(data) == seq:
                        return data
            except OSError as exc:
                self.close()
                raise exceptions.FabricError(
                    "RTM_GETLINK %s failed: %s" % (ifname, exc)) from exc

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _sequence(data):
    if len(data) < 16:
        return None
    return int.from_bytes(data[8:12], "little")


def parse_vf_stats(data):
    """``{vf index: IOCounters}`` from the raw bytes of an ``RTM_NEWLINK`` reply.

    A netlink error (no such device) raises ``FabricError``; a link without
    ``IFLA_VFINFO_LIST`` (no SR-IOV, or VFs disabled) gives ``{}``; a VF
    without ``IFLA_VF_STATS`` (a driver without ``ndo_get_vf_stats``) is
    left out.
    """
    try:
        messages = list(rtnl_marshal.MarshalRtnl().parse(bytes(data)))
    except (struct.error, ValueError, IndexError, KeyError, TypeError) as exc:
        raise exceptions.FabricError("undecodable netlink reply: %s" % exc) from exc
    stats = {}
    for msg in messages:
        error = msg["header"].get("error")
        if error is not None:
            raise exceptions.FabricError("netlink error: %s" % (error,))
        if msg["header"]["type"] != rtnl.RTM_NEWLINK:
            continue
        vflist = msg.get_attr("IFLA_VFINFO_LIST")
        if vflist is None:
            continue
        for position, info in enumerate(vflist.get_attrs("IFLA_VF_INFO")):
            mac = info.get_attr("IFLA_VF_MAC")
            index = mac["vf"] if mac is not None else position
            vf_stats = info.get_attr("IFLA_VF_STATS")
            if vf_stats is None:
                continue
            values = {field: int(vf_stats.get_attr(nla) or 0) for field, nla in _STATS}
            stats[int(index)] = base.IOCounters(**values)
    return stats


def vf_pci_addresses(sysfs_root, pf):
    """``{vf index: PCI address}`` from ``/sys/class/net/<pf>/device/virtfn<N>``."""
    device = os.path.join(sysfs_root, "class", "net", pf, "device")
    try:
        names = os.listdir(device)
    except OSError:
        return {}
    found = {}
    for name in names:
        if not name.startswith("virtfn") or not name[6:].isdigit():
            continue
        target = os.path.basename(os.path.realpath(os.path.join(device, name)))
        try:
            found[int(name[6:])] = domain_xml.normalize_pci_address(target)
        except exceptions.ConfigError:
            continue
    return found


class VFNetlinkMonitor(base.FabricMonitor):
    """Cumulative bytes/packets per VM from the VFs passed through to it."""

    def __init__(self, pf, sysfs_root="/sys", source=None, overrides=None):
        """``source``: a :class:`VFStatsSource` (:class:`RtnetlinkSource` by default)."""
        if not pf:
            raise exceptions.ConfigError("vf_netlink needs the PF netdev ([fabric] pf_netdev)")
        self.pf = pf
        self.sysfs_root = sysfs_root
        self.source = source if source is not None else RtnetlinkSource()
        self.overrides = overrides or link_facts.LinkOverrides()
        self._counters = {}

    def pf_exists(self):
        return os.path.exists(os.path.join(self.sysfs_root, "class", "net", self.pf))

    def read_vfs(self):
        """``{vf index: IOCounters}`` as the PF reports them now (raw, not monotonic)."""
        return parse_vf_stats(self.source(self.pf))

    def endpoints(self, vms):
        """Every VF the PF reports, with its PCI address and owning VM."""
        raw = self.read_vfs()
        addresses = vf_pci_addresses(self.sysfs_root, self.pf)
        owner_of = {}
        for uuid, info in vms.items():
            for address in info.hostdevs:
                try:
                    owner_of[domain_xml.normalize_pci_address(address)] = uuid
                except exceptions.ConfigError:
                    continue
        eps = []
        for index in sorted(raw):
            address = addresses.get(index)
            totals = {}
            for field, value in vars(raw[index]).items():
                key = (index, field)
                counter = self._counters.get(key)
                if counter is None:
                    counter = self._counters[key] = cumulative.CumulativeCounter("plain")
                totals[field] = counter.update(value)
            eps.append(endpoint.Endpoint(
                name="%s/vf%d" % (self.pf, index), vm=owner_of.get(address),
                counters=base.IOCounters(**totals), detail=address or "no virtfn link"))
        for key in set(self._counters) - {(i, f) for i in raw for f, _ in _STATS}:
            del self._counters[key]
        return eps

    def counters(self, vms):
        return endpoint.sum_by_vm(self.endpoints(vms))

    def _pf_port(self):
        """``(ib device dir, port)`` behind the PF netdev, or ``None``."""
        ib_dir = os.path.join(self.sysfs_root, "class", "net", self.pf, "device", "infiniband")
        try:
            devs = sorted(os.listdir(ib_dir))
        except OSError:
            return None
        if not devs:
            return None
        dev_port = link_facts.read_text(
            os.path.join(self.sysfs_root, "class", "net", self.pf, "dev_port"))
        port = int(dev_port) + 1 if dev_port and dev_port.isdigit() else 1
        return os.path.join(ib_dir, devs[0]), port

    def link(self):
        rate = None
        mtu = link_facts.ib_mtu_from_ipoib(link_facts.netdev_mtu(self.sysfs_root, self.pf))
        found = self._pf_port()
        if found is not None:
            dev_dir, port = found
            text = link_facts.read_text(os.path.join(dev_dir, "ports", str(port), "rate"))
            if text is not None:
                rate = link_facts.parse_rate(text)
        return link_facts.build_link(
            self.pf, self.overrides, rate=rate, mtu=mtu,
            fallback_bytes_per_s=link_facts.netdev_speed_bytes_per_s(self.sysfs_root, self.pf))

    def close(self):
        self.source.close()
