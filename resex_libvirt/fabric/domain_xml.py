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

"""What a libvirt domain XML says about a VM's network devices.

The fabric monitors attribute traffic to VMs through two facts of the
domain XML (libvirt's "Domain XML format", devices section):

* the host PCI address of every device passed through to the guest. Nova
  writes SR-IOV ports either as ``<hostdev mode='subsystem' type='pci'>``
  (``vnic_type=direct-physical`` and flavor PCI aliases) or as
  ``<interface type='hostdev'>`` (``vnic_type=direct``); both carry the
  host address in ``<source><address domain= bus= slot= function=/>``.
  The ``<address>`` that is a direct child of the device is the guest-side
  address and is ignored.
* the host-side name of every tap device (``<interface>`` with
  ``<target dev=.../>``), which libvirt's interface statistics are keyed by.

And one fact for the other hosts: the VM's addresses (:func:`vm_addresses`),
which the agent publishes on the board so that a latency report naming its
peer can be traced to the peer's host and VM (doc/source/board.rst). Nova 34
writes each port's IPs into its own metadata (``<nova:instance>`` holds
``<nova:ports><nova:port uuid=...><nova:ip type='fixed' address=...
ipVersion=.../>``, ``LibvirtConfigGuestMetaNovaPorts`` in
``nova/virt/libvirt/config.py``); every interface, a VF passed through as
``<interface type='hostdev'>`` included, has its ``<mac address=...>``.

Addresses come back in the kernel's sysfs spelling ``dddd:bb:ss.f``
(lower-case hex), the basename of ``/sys/bus/pci/devices/*`` and of the
``virtfnN`` links, so they compare equal to what the monitors read there.
"""

import ipaddress
import re
import xml.etree.ElementTree as ElementTree

from resex_libvirt import exceptions
from resex_libvirt.hypervisor import nova_metadata

_MAC = re.compile(r"\A[0-9a-f]{2}(:[0-9a-f]{2}){5}\Z")
_NOVA_IPS = "metadata/{%(ns)s}instance/{%(ns)s}ports/{%(ns)s}port/{%(ns)s}ip" % {
    "ns": nova_metadata.NAMESPACE}


def pci_address(domain, bus, slot, function):
    """``dddd:bb:ss.f`` from the four attributes (ints or ``0x``-prefixed strings)."""
    try:
        parts = [int(v, 0) if isinstance(v, str) else int(v)
                 for v in (domain, bus, slot, function)]
    except (TypeError, ValueError) as exc:
        raise exceptions.ConfigError(
            "bad PCI address %r" % ((domain, bus, slot, function),)) from exc
    dom, bus_n, slot_n, func = parts
    if not (0 <= dom <= 0xFFFF and 0 <= bus_n <= 0xFF and 0 <= slot_n <= 0x1F
            and 0 <= func <= 0x7):
        raise exceptions.ConfigError("PCI address out of range: %r" % (parts,))
    return "%04x:%02x:%02x.%x" % (dom, bus_n, slot_n, func)


def normalize_pci_address(text):
    """Canonical ``dddd:bb:ss.f`` of ``text`` (``81:00.2`` gets domain 0000)."""
    try:
        text = text.strip().lower()
        if text.count(":") == 1:
            text = "0000:" + text
        dom, bus, rest = text.split(":")
        slot, func = rest.split(".")
        return pci_address(int(dom, 16), int(bus, 16), int(slot, 16), int(func, 16))
    except (AttributeError, ValueError) as exc:
        raise exceptions.ConfigError("bad PCI address %r" % (text,)) from exc


def _parse(xml):
    try:
        return ElementTree.fromstring(xml)
    except ElementTree.ParseError as exc:
        raise exceptions.ConfigError("unparsable domain XML: %s" % exc) from exc


def _source_pci(device):
    address = device.find("source/address")
    if address is None or address.get("type", "pci") != "pci":
        return None
    try:
        return pci_address(address.get("domain", "0"), address.get("bus"),
                           address.get("slot"), address.get("function"))
    except exceptions.ConfigError:
        return None


def hostdev_addresses(xml):
    """Host PCI addresses of the devices passed through to the domain, in XML order.

    Covers ``<hostdev mode='subsystem' type='pci'>`` and
    ``<interface type='hostdev'>``; a source without a PCI address (USB,
    SCSI, mediated devices) is skipped.
    """
    root = _parse(xml)
    found = []
    for device in root.iterfind("devices/*"):
        if device.tag == "hostdev":
            if device.get("type", "pci") != "pci":
                continue
        elif device.tag == "interface":
            if device.get("type") != "hostdev":
                continue
        else:
            continue
        address = _source_pci(device)
        if address is not None and address not in found:
            found.append(address)
    return tuple(found)


def interface_targets(xml):
    """Host-side tap names (``<target dev>``) of the domain's interfaces, in XML order.

    ``<interface type='hostdev'>`` has no tap and is skipped; an interface
    without a target (an inactive domain) is skipped too.
    """
    root = _parse(xml)
    found = []
    for iface in root.iterfind("devices/interface"):
        if iface.get("type") == "hostdev":
            continue
        target = iface.find("target")
        if target is None or not target.get("dev"):
            continue
        found.append(target.get("dev"))
    return tuple(found)


def _ip(text):
    """``text`` as :mod:`ipaddress` writes the address, or None (no zone, no prefix)."""
    if not isinstance(text, str) or "%" in text or "/" in text:
        return None
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        return None


def _mac(text):
    if not isinstance(text, str):
        return None
    text = text.strip().lower()
    return text if _MAC.match(text) else None


def vm_addresses(xml):
    """The VM's addresses from its domain XML (text, or the parsed root element).

    Nova's fixed IPs of each port (``<nova:ports>``; floating IPs are not
    there: they are translated before they reach the VM), then each
    interface's MAC, in XML order, each once: IPs as :mod:`ipaddress` writes
    them, MACs in lower case. A malformed one is skipped.
    """
    root = xml if isinstance(xml, ElementTree.Element) else _parse(xml)
    found = []
    for ip in root.iterfind(_NOVA_IPS):
        if ip.get("type", "fixed") != "fixed":
            continue
        text = _ip(ip.get("address"))
        if text is not None and text not in found:
            found.append(text)
    for mac in root.iterfind("devices/interface/mac"):
        text = _mac(mac.get("address"))
        if text is not None and text not in found:
            found.append(text)
    return tuple(found)
