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

"""Per-VM traffic from libvirt's interface statistics: tap/virtio tenants.

For VMs on tap devices (the lab's bridge network, Ethernet/RoCE tenants
without SR-IOV) libvirt already counts each interface. One bulk call,
``virConnectGetAllDomainStats(VIR_DOMAIN_STATS_INTERFACE)``, returns
``net.count`` and per interface ``net.<i>.name``, ``net.<i>.tx.bytes``,
``net.<i>.tx.pkts``, ``net.<i>.rx.bytes``, ``net.<i>.rx.pkts``. Drivers
without it (libxl, or a record without ``net.count`` as libvirt's test
driver returns) fall back to ``virDomainInterfaceStats(target)`` per tap.

Direction: seen from the host, a tap's RX is what the guest transmitted.
libvirt already swaps the two for tap-backed interfaces
(``virNetDevTapInterfaceStats(..., swapped = !virDomainNetTypeSharesHostView)``
in the qemu and lxc drivers and in the bulk stats), so libvirt's ``tx``
is the guest's transmit, which is what ResEx charges (paper Section V-A,
"MTUs sent"). We report libvirt's numbers unchanged.
"""

import logging

from resex_libvirt import exceptions
from resex_libvirt.fabric import base
from resex_libvirt.fabric import cumulative
from resex_libvirt.fabric import domain_xml
from resex_libvirt.fabric import endpoint
from resex_libvirt.fabric import link_facts

LOG = logging.getLogger(__name__)

try:  # libvirt-python is an extra: the scheduler host has none.
    import libvirt
except ImportError:  # pragma: no cover - exercised only without the extra
    libvirt = None

#: libvirt-python constant VIR_DOMAIN_STATS_INTERFACE (include/libvirt/libvirt-domain.h).
STATS_INTERFACE = 16

#: Ethernet's default MTU (IEEE 802.3) when no uplink netdev is configured.
ETHERNET_MTU = 1500

#: ``virDomainInterfaceStats`` tuple order: rx_bytes, rx_packets, rx_errs,
#: rx_drop, tx_bytes, tx_packets, tx_errs, tx_drop.
_TUPLE = {"rx_bytes": 0, "rx_packets": 1, "tx_bytes": 4, "tx_packets": 5}
_BULK = {"rx_bytes": "rx.bytes", "rx_packets": "rx.pkts",
         "tx_bytes": "tx.bytes", "tx_packets": "tx.pkts"}


def _libvirt_error():
    return libvirt.libvirtError if libvirt is not None else OSError


class LibvirtInterfaceStats(base.FabricMonitor):
    """Cumulative bytes/packets per VM from its tap interfaces.

    ``connection`` is a ``virConnect`` or a callable returning one (the
    agent passes its reconnecting getter, so a libvirtd restart is handled
    where connections are managed). ``netdev`` names the uplink whose
    capacity and ``mtu`` describe the shared link when no override is set;
    unset, it is the interface of the default route found under
    ``proc_root`` (:func:`~resex_libvirt.fabric.link_facts.discover_uplink`).
    ``bulk_stats``, if given, returns ``{uuid: bulk stats record}`` of the
    hypervisor's own ``getAllDomainStats`` sweep of this interval (which asks
    for the interface group too): then no call of its own is made.
    """

    def __init__(self, connection, netdev=None, sysfs_root="/sys", overrides=None,
                 bulk_stats=None, proc_root="/proc"):
        self._connection = connection
        self._bulk_stats = bulk_stats
        self.netdev = netdev
        self.sysfs_root = sysfs_root
        self.proc_root = proc_root
        self.overrides = overrides or link_facts.LinkOverrides()
        self._counters = {}
        self.bulk_supported = None

    def _conn(self):
        conn = self._connection
        return conn() if callable(conn) else conn

    def _open(self):
        try:
            return self._conn()
        except _libvirt_error() as exc:
            raise exceptions.FabricError("libvirt connection failed: %s" % exc) from exc

    def _bulk(self, conn, shared):
        """``{uuid: {tap: {field: value}}}`` from one bulk call, or ``None`` if unsupported."""
        if self.bulk_supported is False:
            return None
        if shared:
            records = list(shared.items())
        else:
            try:
                records = [(dom.UUIDString(), stats)
                           for dom, stats in conn.getAllDomainStats(STATS_INTERFACE)]
            except _libvirt_error() as exc:
                LOG.debug("bulk interface stats unavailable: %s", exc)
                self.bulk_supported = False
                return None
        out = {}
        for uuid, stats in records:
            if "net.count" not in stats:
                continue
            taps = {}
            for i in range(int(stats["net.count"])):
                name = stats.get("net.%d.name" % i)
                if not name:
                    continue
                taps[name] = {f: int(stats.get("net.%d.%s" % (i, k), 0))
                              for f, k in _BULK.items()}
            out[uuid] = taps
        self.bulk_supported = bool(out) or not records
        return out if out else None

    def _per_domain(self, conn, uuid, targets):
        try:
            dom = conn.lookupByUUIDString(uuid)
        except _libvirt_error() as exc:
            LOG.debug("VM %s gone before its interface stats: %s", uuid, exc)
            return {}
        if not targets:
            try:
                targets = domain_xml.interface_targets(dom.XMLDesc(0))
            except (_libvirt_error(), exceptions.ConfigError) as exc:
                LOG.debug("no interfaces for VM %s: %s", uuid, exc)
                return {}
        taps = {}
        for tap in targets:
            try:
                values = dom.interfaceStats(tap)
            except _libvirt_error() as exc:
                LOG.debug("interface %s of VM %s unreadable: %s", tap, uuid, exc)
                continue
            taps[tap] = {f: int(values[i]) for f, i in _TUPLE.items()}
        return taps

    def endpoints(self, vms):
        """Every tap of every VM in ``vms`` as an :class:`Endpoint`."""
        shared = self._bulk_stats() if self._bulk_stats is not None else None
        conn = None
        if not shared or any(uuid not in shared for uuid in vms):
            conn = self._open()
        bulk = self._bulk(conn, shared) or {}
        eps = []
        seen = set()
        for uuid in sorted(vms):
            taps = bulk.get(uuid)
            if taps is None:
                conn = conn or self._open()
                taps = self._per_domain(conn, uuid, tuple(vms[uuid].interfaces))
            for tap in sorted(taps):
                totals = {}
                for field, value in taps[tap].items():
                    key = (uuid, tap, field)
                    seen.add(key)
                    counter = self._counters.get(key)
                    if counter is None:
                        counter = self._counters[key] = cumulative.CumulativeCounter("plain")
                    totals[field] = counter.update(value)
                eps.append(endpoint.Endpoint(name=tap, vm=uuid,
                                             counters=base.IOCounters(**totals)))
        for key in set(self._counters) - seen:
            del self._counters[key]
        return eps

    def counters(self, vms):
        return endpoint.sum_by_vm(self.endpoints(vms))

    def uplink(self):
        """The configured uplink, else the default route's interface, else ``None``."""
        return self.netdev or link_facts.discover_uplink(self.proc_root)

    def link(self):
        netdev = self.uplink()
        mtu = capacity = None
        reason = "no uplink configured and no default route to find it by"
        if netdev:
            mtu = link_facts.netdev_mtu(self.sysfs_root, netdev)
            found = link_facts.netdev_capacity(self.sysfs_root, netdev)
            capacity, reason = found.bytes_per_s, found.how
        return link_facts.build_link(netdev or "libvirt-interfaces", self.overrides,
                                     mtu=mtu or ETHERNET_MTU, fallback_bytes_per_s=capacity,
                                     unknown_reason=reason)
