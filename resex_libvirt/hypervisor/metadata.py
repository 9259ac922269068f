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

"""What the agent reads from a libvirt domain's XML.

SLA metadata
    The project's own element inside the domain's ``<metadata>`` (libvirt
    "formatdomain: General metadata": applications put their own XML there,
    one element per namespace). Namespace :data:`NAMESPACE`, element ``sla``,
    one child per ``resex:`` key named after the key without its prefix::

        <metadata>
          <resex:sla xmlns:resex="http://resex-libvirt.org/xmlns/sla/1.0">
            <resex:latency_sla_us>200</resex:latency_sla_us>
            <resex:io_class>bulk</resex:io_class>
          </resex:sla>
        </metadata>

    Plain libvirt users set it with::

        virsh metadata DOMAIN --uri http://resex-libvirt.org/xmlns/sla/1.0 \\
            --key resex --set '<sla><latency_sla_us>200</latency_sla_us></sla>'

    The values are parsed by the one shared schema, :func:`resex_libvirt.sla.parse`.

Latency channel
    A ``<channel type='unix'>`` whose ``<target type='virtio'
    name='org.resex.latency.0'/>`` carries the VM's latency reports; its
    ``<source mode='bind' path='...'/>`` is the host socket.

Nova's flavor and owner
    ``<nova:instance>/<nova:flavor>`` (:mod:`~resex_libvirt.hypervisor.nova_metadata`):
    the flavor's extra specs, read from the same XML; ``<nova:owner>/<nova:project>``:
    the project that owns the instance.

Persistent scheduler settings
    ``<cputune>`` of the *inactive* definition (``XMLDesc(VIR_DOMAIN_XML_INACTIVE)``),
    which the agent never writes (it changes knobs live only):
    :func:`parse_cputune`.

Interfaces and host devices
    ``<interface>``'s ``<target dev='...'/>`` (tap names) and ``<hostdev
    type='pci'>``'s ``<source><address domain= bus= slot= function=/>``
    (PCI addresses ``dddd:bb:ss.f``), for the fabric monitors.
"""

import dataclasses
import xml.etree.ElementTree as ET

from resex_libvirt.fabric import domain_xml
from resex_libvirt.hypervisor import nova_metadata
from resex_libvirt import sla as sla_mod

#: The XML namespace of the project's domain metadata (fixed; not configurable).
NAMESPACE = "http://resex-libvirt.org/xmlns/sla/1.0"
#: The prefix ``virsh metadata --key`` and :func:`sla_xml` use.
PREFIX = "resex"
#: The root element's local name.
ELEMENT = "sla"
#: The virtio-serial port name of the latency channel.
LATENCY_CHANNEL_NAME = "org.resex.latency.0"


@dataclasses.dataclass(frozen=True)
class DomainFacts:
    """The parts of a domain's XML the agent uses.

    ``nova`` is the :class:`~resex_libvirt.hypervisor.nova_metadata.NovaFlavor`
    of a Nova guest (``None`` otherwise); ``virtio_serial`` says whether the
    domain has a virtio-serial controller, without which no channel can be
    hot-plugged. ``project`` is the
    :class:`~resex_libvirt.hypervisor.nova_metadata.NovaProject` that owns a
    Nova guest (``None`` otherwise or when Nova wrote none). ``addresses``
    are the VM's IPs and MACs (:func:`~resex_libvirt.fabric.domain_xml.vm_addresses`).
    """

    uuid: str
    name: str
    vcpus: int
    sla_specs: dict
    latency_channel: str | None
    interfaces: tuple
    hostdevs: tuple
    nova: nova_metadata.NovaFlavor | None = None
    virtio_serial: bool = False
    nova_name: str | None = None
    project: nova_metadata.NovaProject | None = None
    addresses: tuple = ()


def _local(tag):
    return tag.rsplit("}", 1)[-1]


def sla_specs(element):
    """``{resex:key: raw text}`` from a parsed ``sla`` element in :data:`NAMESPACE`.

    Children in another namespace are ignored; unknown local names are kept
    (as ``resex:<name>``) so that :func:`resex_libvirt.sla.parse` reports them.
    """
    specs = {}
    if element is None:
        return specs
    for child in element:
        if not isinstance(child.tag, str):
            continue
        if child.tag.startswith("{") and not child.tag.startswith("{%s}" % NAMESPACE):
            continue
        specs[sla_mod.PREFIX + _local(child.tag)] = (child.text or "").strip()
    return specs


def parse_sla_xml(text):
    """``{resex:key: raw}`` from the XML that ``virDomain.metadata()`` returns."""
    if not text:
        return {}
    root = ET.fromstring(text)
    if _local(root.tag) != ELEMENT:
        return {}
    return sla_specs(root)


def sla_xml(specs):
    """The ``<sla>`` XML for ``virDomain.setMetadata(..., key=PREFIX, uri=NAMESPACE)``.

    ``specs`` maps ``resex:`` keys (or bare names) to values.
    """
    root = ET.Element(ELEMENT)
    for key, value in specs.items():
        name = key[len(sla_mod.PREFIX):] if key.startswith(sla_mod.PREFIX) else key
        ET.SubElement(root, name).text = str(value)
    return ET.tostring(root, encoding="unicode")


def _pci_address(addr):
    try:
        dom = int(addr.get("domain", "0"), 0)
        bus = int(addr.get("bus"), 0)
        slot = int(addr.get("slot"), 0)
        func = int(addr.get("function"), 0)
    except (TypeError, ValueError):
        return None
    return "%04x:%02x:%02x.%x" % (dom, bus, slot, func)


def parse_domain_xml(text):
    """:class:`DomainFacts` of a domain XML (``virDomain.XMLDesc(0)``).

    Raises ``xml.etree.ElementTree.ParseError`` on malformed XML.
    """
    root = ET.fromstring(text)
    vcpu = root.find("vcpu")
    vcpus = 1
    if vcpu is not None:
        try:
            vcpus = int(vcpu.get("current") or (vcpu.text or "1").strip())
        except ValueError:
            vcpus = 1
    sla_el = root.find("metadata/{%s}%s" % (NAMESPACE, ELEMENT))
    channel = None
    interfaces = []
    hostdevs = []
    devices = root.find("devices")
    if devices is not None:
        for chan in devices.findall("channel"):
            target = chan.find("target")
            source = chan.find("source")
            if (chan.get("type") == "unix" and target is not None
                    and target.get("type") == "virtio"
                    and target.get("name") == LATENCY_CHANNEL_NAME
                    and source is not None and source.get("path")):
                channel = source.get("path")
                break
        for iface in devices.findall("interface"):
            target = iface.find("target")
            if target is not None and target.get("dev"):
                interfaces.append(target.get("dev"))
        for hostdev in devices.findall("hostdev"):
            if hostdev.get("type") != "pci":
                continue
            addr = hostdev.find("source/address")
            pci = _pci_address(addr) if addr is not None else None
            if pci:
                hostdevs.append(pci)
    return DomainFacts(
        nova=nova_metadata.flavor_of(root), nova_name=nova_metadata.instance_name(root),
        project=nova_metadata.owner_project(root),
        virtio_serial=devices is not None and any(
            c.get("type") == "virtio-serial" for c in devices.findall("controller")),
        uuid=(root.findtext("uuid") or "").strip(),
        name=(root.findtext("name") or "").strip(),
        vcpus=max(1, vcpus),
        sla_specs=sla_specs(sla_el),
        latency_channel=channel,
        interfaces=tuple(interfaces),
        hostdevs=tuple(hostdevs),
        addresses=domain_xml.vm_addresses(root),
    )


#: ``<cputune>`` element -> libvirt scheduler parameter name.
CPUTUNE_PARAMS = {
    "shares": "cpu_shares",
    "period": "vcpu_period",
    "quota": "vcpu_quota",
    "global_period": "global_period",
    "global_quota": "global_quota",
}


def parse_cputune(text):
    """``{scheduler parameter: int}`` of a domain XML's ``<cputune>`` (persistent settings).

    Only the elements present are returned; a value that is not an integer
    is skipped. Raises ``xml.etree.ElementTree.ParseError`` on malformed XML.
    """
    root = ET.fromstring(text)
    tune = root.find("cputune")
    out = {}
    if tune is None:
        return out
    for element, param in CPUTUNE_PARAMS.items():
        value = tune.findtext(element)
        if value is None:
            continue
        try:
            out[param] = int(value.strip())
        except ValueError:
            continue
    return out


def channel_xml():
    """The ``<channel>`` the agent hot-plugs: libvirt chooses the socket path.

    With no ``path`` in ``<source mode='bind'/>`` libvirt's QEMU driver puts
    the socket in the domain's channel directory
    (``/var/lib/libvirt/qemu/channel/target/domain-ID-NAME/org.resex.latency.0``),
    which the live XML then names.
    """
    return ("<channel type='unix'><source mode='bind'/>"
            "<target type='virtio' name='%s'/></channel>" % LATENCY_CHANNEL_NAME)
