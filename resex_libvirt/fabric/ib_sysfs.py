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

"""Per-port InfiniBand/RoCE counters from sysfs, for hosts where a VM owns a port.

The kernel's IB core publishes each port's Performance Management Agent
counters under ``/sys/class/infiniband/<dev>/ports/<n>/counters/``
(``drivers/infiniband/core/sysfs.c``, ``show_pma_counter``):

* ``port_xmit_data`` / ``port_rcv_data`` count **4-octet words**
  (IBA 16.1.3.5, and ``perfquery(8)``: "octets divided by 4"), whatever
  the link width: bytes = words x 4, never x the lane count.
* ``port_xmit_packets`` / ``port_rcv_packets`` count packets.
* With a PMA that only has ``PortCounters`` these are 32-bit and
  *saturate* at 0xFFFFFFFF. When the PMA advertises extended width the
  kernel shows the 64-bit ``PortCountersExtended`` under the same names
  (plus ``unicast_xmit_packets`` & co. in the IETF variant, whose presence
  tells us the width). Mellanox's mlx4 OFED driver also exposes
  ``counters_ext/port_xmit_data_64`` and friends: preferred when present.
* A port whose device has no PMA reads ``N/A (no PMA)``: unreadable, said
  once in the log, never counted as zero traffic.

Saturation is handled by :class:`~resex_libvirt.fabric.cumulative.CumulativeCounter`:
traffic up to the stuck value is counted, nothing after it, and the
endpoint is flagged ``saturated`` (the usage is a lower bound; the remedy
is a PMA with extended counters or ``perfquery -R``).

Ports map to VMs by configuration (``{"mlx5_0:1": vm uuid or name}``, or a
whole device ``{"mlx5_1": ...}``) and, failing that, by PCI address: when
the device's ``device`` link resolves to a PCI function listed in the VM's
``hostdevs``. Note that a function bound to ``vfio-pci`` for passthrough
has no host IB device at all, so for SR-IOV clouds use
:mod:`~resex_libvirt.fabric.vf_netlink`; this monitor serves hosts where
each VM owns a device or port the host still drives.

The sysfs root is a parameter so tests run against temporary trees laid
out exactly like the kernel's: there is no HCA on the build machines.
"""

import logging
import os

from resex_libvirt import exceptions
from resex_libvirt.fabric import base
from resex_libvirt.fabric import cumulative
from resex_libvirt.fabric import domain_xml
from resex_libvirt.fabric import endpoint
from resex_libvirt.fabric import link_facts

LOG = logging.getLogger(__name__)

#: IB data counters count 4-octet words (IBA 16.1.3.5).
DATA_WORD_BYTES = 4

NO_PMA = "N/A (no PMA)"

#: IOCounters field -> (legacy name in counters/, mlx4 name in counters_ext/, unit bytes)
_FIELDS = {
    "tx_bytes": ("port_xmit_data", "port_xmit_data_64", DATA_WORD_BYTES),
    "rx_bytes": ("port_rcv_data", "port_rcv_data_64", DATA_WORD_BYTES),
    "tx_packets": ("port_xmit_packets", "port_xmit_packets_64", 1),
    "rx_packets": ("port_rcv_packets", "port_rcv_packets_64", 1),
}

#: Only the IETF extended counter group has these names (kernel ``pma_attrs_ext``).
_EXTENDED_MARKER = "unicast_xmit_packets"

#: RoCE headers the kernel's ``iboe_get_mtu`` subtracts from the netdev MTU.
_ROCE_OVERHEAD = 40 + 8 + 12 + 4 + 28 + 4


def parse_port_key(key):
    """``"mlx5_0:1"`` -> ``("mlx5_0", 1)``; ``"mlx5_0"`` -> ``("mlx5_0", None)``."""
    dev, sep, port = str(key).strip().partition(":")
    if not dev:
        raise exceptions.ConfigError("bad IB port %r: expected device[:port]" % (key,))
    if not sep:
        return dev, None
    try:
        number = int(port)
    except ValueError as exc:
        raise exceptions.ConfigError("bad IB port %r: port is not a number" % (key,)) from exc
    if number < 1:
        raise exceptions.ConfigError("bad IB port %r: ports count from 1" % (key,))
    return dev, number


def roce_mtu(netdev_mtu):
    """Largest IB MTU that fits a RoCE netdev MTU after RoCE headers, or ``None``."""
    if netdev_mtu is None:
        return None
    room = netdev_mtu - _ROCE_OVERHEAD
    fitting = [m for m in link_facts.IB_MTUS if m <= room]
    return fitting[-1] if fitting else None


class IBPortCounters(base.FabricMonitor):
    """Cumulative bytes/packets per VM from the IB ports it owns."""

    def __init__(self, sysfs_root="/sys", port_map=None, link_port=None, overrides=None):
        self.sysfs_root = sysfs_root
        self.ib_root = os.path.join(sysfs_root, "class", "infiniband")
        self.port_map = {}
        for key, owner in (port_map or {}).items():
            self.port_map[parse_port_key(key)] = str(owner)
        self.link_port = parse_port_key(link_port) if link_port else None
        if self.link_port is not None and self.link_port[1] is None:
            self.link_port = (self.link_port[0], 1)
        self.overrides = overrides or link_facts.LinkOverrides()
        self._counters = {}
        self._warned = set()
        # The counter files and PCI link of a port do not change while its
        # driver is bound; both caches are dropped when the port set changes
        # or a read fails (device re-plugged, driver reloaded).
        self._source_cache = {}
        self._pci_cache = {}
        self._known_ports = None

    # -- discovery -------------------------------------------------------

    def devices(self):
        """Names of the RDMA devices under ``class/infiniband`` (empty: no HCA)."""
        try:
            return sorted(os.listdir(self.ib_root))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise exceptions.FabricError("cannot list %s: %s" % (self.ib_root, exc)) from exc

    def ports(self):
        """``[(device, port)]`` of every port, sorted."""
        found = []
        for dev in self.devices():
            try:
                names = os.listdir(os.path.join(self.ib_root, dev, "ports"))
            except OSError:
                continue
            found.extend((dev, int(n)) for n in names if n.isdigit())
        return sorted(found)

    def device_pci(self, dev):
        """The PCI address behind ``dev`` (its ``device`` link), or ``None``."""
        if dev in self._pci_cache:
            return self._pci_cache[dev]
        target = os.path.realpath(os.path.join(self.ib_root, dev, "device"))
        try:
            address = domain_xml.normalize_pci_address(os.path.basename(target))
        except exceptions.ConfigError:
            address = None
        self._pci_cache[dev] = address
        return address

    def _forget_layout(self):
        self._source_cache.clear()
        self._pci_cache.clear()

    def _port_dir(self, dev, port):
        return os.path.join(self.ib_root, dev, "ports", str(port))

    def port_attr(self, dev, port, name):
        """A port attribute's text (``rate``, ``state``, ``link_layer``), or ``None``."""
        return link_facts.read_text(os.path.join(self._port_dir(dev, port), name))

    # -- counters --------------------------------------------------------

    def _sources(self, dev, port):
        """``{field: (path, kind, unit)}``: the best counter file for each field."""
        cached = self._source_cache.get((dev, port))
        if cached is not None:
            return cached
        pdir = self._port_dir(dev, port)
        ext_dir = os.path.join(pdir, "counters_ext")
        legacy_dir = os.path.join(pdir, "counters")
        extended = os.path.exists(os.path.join(legacy_dir, _EXTENDED_MARKER))
        sources = {}
        for field, (legacy, ext, unit) in _FIELDS.items():
            ext_path = os.path.join(ext_dir, ext)
            if os.path.exists(ext_path):
                sources[field] = (ext_path, "plain", unit)
            else:
                sources[field] = (os.path.join(legacy_dir, legacy),
                                  "plain" if extended else "saturating", unit)
        self._source_cache[(dev, port)] = sources
        return sources

    def _warn_once(self, key, msg, *args):
        if key not in self._warned:
            self._warned.add(key)
            LOG.warning(msg, *args)

    def read_port(self, dev, port):
        """``(IOCounters or None, state)`` of one port, totals kept monotonic."""
        values = {}
        state = endpoint.OK
        for field, (path, kind, unit) in self._sources(dev, port).items():
            text = link_facts.read_text(path)
            if text is None:
                self._forget_layout()
                if field.endswith("_bytes"):
                    self._warn_once((dev, port, "missing"),
                                    "IB port %s:%s has no %s: not counted", dev, port, path)
                    return None, endpoint.UNREADABLE
                values[field] = 0
                continue
            if text.startswith("N/A"):
                self._warn_once((dev, port, "nopma"),
                                "IB port %s:%s counters read %r: no PMA, port not counted",
                                dev, port, text)
                return None, endpoint.UNREADABLE
            try:
                raw = int(text)
            except ValueError:
                self._warn_once((dev, port, "garbled"),
                                "IB port %s:%s counter %s reads %r: not counted",
                                dev, port, path, text)
                return None, endpoint.UNREADABLE
            key = (dev, port, field, path)
            counter = self._counters.get(key)
            if counter is None:
                counter = self._counters[key] = cumulative.CumulativeCounter(kind=kind, bits=32)
            counter.update(raw)
            if counter.saturated:
                state = endpoint.SATURATED
                self._warn_once((dev, port, field, "sat"),
                                "IB port %s:%s %s is a saturated 32-bit counter: usage from "
                                "now on is a lower bound until it is reset (perfquery -R)",
                                dev, port, os.path.basename(path))
            else:
                self._warned.discard((dev, port, field, "sat"))
            values[field] = counter.total * unit
        return base.IOCounters(**values), state

    # -- ownership -------------------------------------------------------

    def _owner(self, dev, port, lookup, pci_owner):
        configured = self.port_map.get((dev, port)) or self.port_map.get((dev, None))
        if configured is not None:
            return lookup.get(configured), configured
        pci = self.device_pci(dev)
        if pci is not None and pci in pci_owner:
            return pci_owner[pci], None
        return None, None

    def endpoints(self, vms, detail=True):
        """Every port as an :class:`Endpoint`, owned by a VM of ``vms`` or not.

        ``detail`` adds each port's ``rate`` text (for ``resex-fabric show``).
        """
        lookup = endpoint.vm_lookup(vms)
        pci_owner = {}
        for uuid, info in vms.items():
            for address in info.hostdevs:
                try:
                    pci_owner[domain_xml.normalize_pci_address(address)] = uuid
                except exceptions.ConfigError:
                    continue
        ports = self.ports()
        if ports != self._known_ports:
            self._forget_layout()
            self._known_ports = ports
        eps = []
        for dev, port in ports:
            owner, configured = self._owner(dev, port, lookup, pci_owner)
            io, state = self.read_port(dev, port)
            text = (self.port_attr(dev, port, "rate") or "") if detail else ""
            if configured is not None and owner is None:
                text = ("%s; mapped to %s (not running)" % (text, configured)).lstrip("; ")
            eps.append(endpoint.Endpoint(name="%s:%d" % (dev, port), vm=owner,
                                         counters=io, state=state, detail=text))
        return eps

    def counters(self, vms):
        return endpoint.sum_by_vm(self.endpoints(vms, detail=False))

    # -- link ------------------------------------------------------------

    def _link_port(self):
        if self.link_port is not None:
            return self.link_port
        ports = self.ports()
        if not ports:
            return None
        mapped = [p for p in ports
                  if p in self.port_map or (p[0], None) in self.port_map]
        for candidates in (mapped, ports):
            for dev, port in candidates:
                if (self.port_attr(dev, port, "state") or "").endswith("ACTIVE"):
                    return dev, port
        return ports[0]

    def _port_mtu(self, dev, port):
        netdir = os.path.join(self.ib_root, dev, "device", "net")
        try:
            netdevs = sorted(os.listdir(netdir))
        except OSError:
            return None
        ethernet = (self.port_attr(dev, port, "link_layer") or "") == "Ethernet"
        for netdev in netdevs:
            ndir = os.path.join(netdir, netdev)
            dev_port = link_facts.read_text(os.path.join(ndir, "dev_port"))
            if dev_port not in (None, str(port - 1)):
                continue
            mtu = link_facts.read_text(os.path.join(ndir, "mtu"))
            try:
                mtu = int(mtu)
            except (TypeError, ValueError):
                continue
            return roce_mtu(mtu) if ethernet else link_facts.ib_mtu_from_ipoib(mtu)
        return None

    def link(self):
        chosen = self._link_port()
        if chosen is None:
            if self.overrides.capacity_gbps is not None:
                return link_facts.build_link("configured", self.overrides)
            raise exceptions.FabricError("no InfiniBand port under %s" % self.ib_root)
        dev, port = chosen
        rate_text = self.port_attr(dev, port, "rate")
        rate = None
        if rate_text is not None:
            try:
                rate = link_facts.parse_rate(rate_text)
            except exceptions.FabricError:
                self._warn_once((dev, port, "rate"), "IB port %s:%s rate %r not understood",
                                dev, port, rate_text)
        return link_facts.build_link("%s:%d" % (dev, port), self.overrides, rate=rate,
                                     mtu=self._port_mtu(dev, port))
