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

"""Temporary sysfs trees laid out like the kernel's, for hosts without an HCA.

The layout follows a real mlx5 host: the PCI function lives under
``devices/pci0000:80/<addr>/``; ``class/infiniband/<dev>`` and
``class/net/<netdev>`` are symlinks into it; ``<ibdev>/device`` and
``<netdev>/device`` link back to the PCI function; the PF's ``virtfnN``
links point at sibling VF functions. Port attributes are files with the
kernel's exact text (``rate``: ``"100 Gb/sec (4X EDR)"``, ``state``:
``"4: ACTIVE"``, counters: decimal or ``"N/A (no PMA)"``).
"""

import os
import shutil
import tempfile


class SysfsTree:
    """A throw-away sysfs root; call :meth:`cleanup` (tests use ``addCleanup``)."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="resex-sysfs-")
        os.makedirs(os.path.join(self.root, "class", "infiniband"))
        os.makedirs(os.path.join(self.root, "class", "net"))

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def _write(self, path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write("%s\n" % text)

    def pci_dir(self, pci):
        return os.path.join(self.root, "devices", "pci0000:%s" % pci[5:7], pci)

    def add_pci(self, pci):
        path = self.pci_dir(pci)
        os.makedirs(path, exist_ok=True)
        return path

    def add_ib_device(self, dev, pci, ports=(1,), rate="100 Gb/sec (4X EDR)",
                      state="4: ACTIVE", link_layer="InfiniBand"):
        pci_dir = self.add_pci(pci)
        dev_dir = os.path.join(pci_dir, "infiniband", dev)
        os.makedirs(dev_dir)
        os.symlink(os.path.relpath(pci_dir, dev_dir), os.path.join(dev_dir, "device"))
        link = os.path.join(self.root, "class", "infiniband", dev)
        os.symlink(os.path.relpath(dev_dir, os.path.dirname(link)), link)
        for port in ports:
            pdir = os.path.join(dev_dir, "ports", str(port))
            self._write(os.path.join(pdir, "rate"), rate)
            self._write(os.path.join(pdir, "state"), state)
            self._write(os.path.join(pdir, "phys_state"), "5: LinkUp")
            self._write(os.path.join(pdir, "link_layer"), link_layer)
            self.set_counters(dev, port, xmit_data=0, rcv_data=0, xmit_packets=0,
                              rcv_packets=0)
        return dev_dir

    def port_dir(self, dev, port):
        return os.path.join(self.root, "class", "infiniband", dev, "ports", str(port))

    def set_counters(self, dev, port, ext=False, **values):
        """Write ``port_<name>`` counters (``xmit_data=`` ...); ``ext`` -> mlx4 counters_ext."""
        for name, value in values.items():
            if ext:
                path = os.path.join(self.port_dir(dev, port), "counters_ext",
                                    "port_%s_64" % name)
            else:
                path = os.path.join(self.port_dir(dev, port), "counters", "port_%s" % name)
            self._write(path, value)

    def mark_extended(self, dev, port):
        """Add the IETF extended group's extra counters (64-bit under legacy names)."""
        for name in ("unicast_xmit_packets", "unicast_rcv_packets",
                     "multicast_xmit_packets", "multicast_rcv_packets"):
            self._write(os.path.join(self.port_dir(dev, port), "counters", name), 0)

    def add_netdev(self, name, pci, mtu=2044, dev_port=0, speed=None):
        pci_dir = self.add_pci(pci)
        ndir = os.path.join(pci_dir, "net", name)
        os.makedirs(ndir)
        self._write(os.path.join(ndir, "mtu"), mtu)
        self._write(os.path.join(ndir, "dev_port"), dev_port)
        if speed is not None:
            self._write(os.path.join(ndir, "speed"), speed)
        os.symlink(os.path.relpath(pci_dir, ndir), os.path.join(ndir, "device"))
        link = os.path.join(self.root, "class", "net", name)
        os.symlink(os.path.relpath(ndir, os.path.dirname(link)), link)
        return ndir

    def add_vfs(self, pf_pci, vf_pcis):
        pf_dir = self.add_pci(pf_pci)
        for index, vf in enumerate(vf_pcis):
            vf_dir = self.add_pci(vf)
            os.symlink(os.path.relpath(vf_dir, pf_dir),
                       os.path.join(pf_dir, "virtfn%d" % index))
            os.symlink(os.path.relpath(pf_dir, vf_dir), os.path.join(vf_dir, "physfn"))

    def add_virtual_netdev(self, name, mtu=1500, speed=None, tap=False):
        """A netdev with no ``device`` link (bridge, VLAN, tap, veth).

        Laid out as under ``devices/virtual/net``; ``tap`` adds ``tun_flags``
        as a tun/tap device has.
        """
        ndir = os.path.join(self.root, "devices", "virtual", "net", name)
        os.makedirs(ndir)
        self._write(os.path.join(ndir, "mtu"), mtu)
        self._write(os.path.join(ndir, "type"), 1)
        if speed is not None:
            self._write(os.path.join(ndir, "speed"), speed)
        if tap:
            self._write(os.path.join(ndir, "tun_flags"), "0x1002")
        link = os.path.join(self.root, "class", "net", name)
        os.symlink(os.path.relpath(ndir, os.path.dirname(link)), link)
        return ndir

    def net_dir(self, name):
        return os.path.realpath(os.path.join(self.root, "class", "net", name))

    def add_bridge_port(self, bridge, port):
        """``class/net/<bridge>/brif/<port>`` as the bridge driver links it."""
        brif = os.path.join(self.net_dir(bridge), "brif")
        os.makedirs(brif, exist_ok=True)
        os.symlink(os.path.relpath(os.path.join(self.net_dir(port), "brport"), brif),
                   os.path.join(brif, port))

    def add_lower(self, upper, lower):
        """``class/net/<upper>/lower_<lower>`` as a VLAN or bond links its device."""
        os.symlink(os.path.relpath(self.net_dir(lower), self.net_dir(upper)),
                   os.path.join(self.net_dir(upper), "lower_%s" % lower))


class ProcTree:
    """A throw-away ``/proc`` with the routing tables the link discovery reads."""

    ROUTE_HEADER = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask"
                    "\t\tMTU\tWindow\tIRTT")

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="resex-proc-")
        os.makedirs(os.path.join(self.root, "net"))
        self.set_routes([], [])

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def set_routes(self, ipv4, ipv6):
        """Write ``net/route`` and ``net/ipv6_route`` as the kernel prints them.

        ``ipv4``: ``(iface, destination hex, flags hex, mask hex)``; ``ipv6``:
        ``(destination hex, prefix length hex, iface)``.
        """
        with open(os.path.join(self.root, "net", "route"), "w") as f:
            f.write(self.ROUTE_HEADER + "\n")
            for iface, dest, flags, mask in ipv4:
                f.write("%s\t%s\t010200C0\t%s\t0\t0\t0\t%s\t0\t0\t0\n"
                        % (iface, dest, flags, mask))
        with open(os.path.join(self.root, "net", "ipv6_route"), "w") as f:
            for dest, plen, iface in ipv6:
                f.write("%s %s %s 00 %s 00000400 00000002 00000000 00000003 %8s\n"
                        % (dest, plen, "0" * 32, "fd" + "0" * 29 + "1", iface))
