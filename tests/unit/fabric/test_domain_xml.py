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

"""Host PCI addresses, tap names and the VM's addresses from domain XML of the kind Nova writes."""

import unittest
import xml.etree.ElementTree as ElementTree

from resex_libvirt import exceptions
from resex_libvirt.fabric import domain_xml
from resex_libvirt.hypervisor import metadata

# Shaped like nova.virt.libvirt.config output for an instance with one
# direct-physical port (<hostdev>), one direct port (<interface type=hostdev>)
# and one ordinary OVS/bridge port (a tap).
NOVA_SRIOV_XML = """
<domain type='kvm' id='3'>
  <name>instance-0000002a</name>
  <uuid>5c4a3a3e-0d2f-4d5c-9b8c-1f2e3d4c5b6a</uuid>
  <metadata>
    <nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">
      <nova:name>rdma-vm</nova:name>
    </nova:instance>
  </metadata>
  <devices>
    <interface type='bridge'>
      <mac address='fa:16:3e:11:22:33'/>
      <source bridge='br-int'/>
      <target dev='tap5c4a3a3e-0d'/>
      <model type='virtio'/>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x03' function='0x0'/>
    </interface>
    <interface type='hostdev' managed='yes'>
      <mac address='fa:16:3e:44:55:66'/>
      <driver name='vfio'/>
      <source>
        <address type='pci' domain='0x0000' bus='0x81' slot='0x00' function='0x3'/>
      </source>
      <vlan><tag id='100'/></vlan>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/>
    </interface>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <driver name='vfio'/>
      <source>
        <address domain='0x0000' bus='0x81' slot='0x00' function='0x2'/>
      </source>
      <alias name='hostdev0'/>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x04' function='0x0'/>
    </hostdev>
    <hostdev mode='subsystem' type='usb' managed='yes'>
      <source><vendor id='0x1234'/><product id='0xbeef'/></source>
    </hostdev>
  </devices>
</domain>
"""


class TestDomainXML(unittest.TestCase):

    def test_hostdev_and_interface_hostdev_source_addresses_are_found(self):
        self.assertEqual(("0000:81:00.3", "0000:81:00.2"),
                         domain_xml.hostdev_addresses(NOVA_SRIOV_XML))

    def test_guest_side_addresses_and_usb_hostdevs_are_ignored(self):
        found = domain_xml.hostdev_addresses(NOVA_SRIOV_XML)
        self.assertNotIn("0000:00:04.0", found)
        self.assertNotIn("0000:00:05.0", found)
        self.assertEqual(2, len(found))

    def test_only_tap_interfaces_have_targets(self):
        self.assertEqual(("tap5c4a3a3e-0d",), domain_xml.interface_targets(NOVA_SRIOV_XML))

    def test_domain_without_devices_has_neither(self):
        xml = "<domain type='test'><name>x</name></domain>"
        self.assertEqual((), domain_xml.hostdev_addresses(xml))
        self.assertEqual((), domain_xml.interface_targets(xml))

    def test_unparsable_xml_is_a_config_error(self):
        self.assertRaises(exceptions.ConfigError, domain_xml.hostdev_addresses, "<domain")

    def test_addresses_are_spelled_like_sysfs(self):
        self.assertEqual("0000:81:00.2", domain_xml.normalize_pci_address("81:00.2"))
        self.assertEqual("0001:0a:1f.7", domain_xml.normalize_pci_address("0001:0A:1F.7"))
        self.assertEqual("0000:81:00.2", domain_xml.pci_address("0x0", "0x81", "0x00", "0x2"))

    def test_out_of_range_addresses_are_rejected(self):
        self.assertRaises(exceptions.ConfigError, domain_xml.pci_address, 0, 0x100, 0, 0)
        self.assertRaises(exceptions.ConfigError, domain_xml.pci_address, 0, 0, 0x20, 0)
        self.assertRaises(exceptions.ConfigError, domain_xml.normalize_pci_address, "pci")


# What Nova 34 writes for an instance with two ports (nova/virt/libvirt/driver.py,
# _get_guest_config_meta: one <nova:port> per VIF, one <nova:ip> per fixed IP).
NOVA_PORTS_XML = """
<domain type='kvm'>
  <name>instance-0000002b</name>
  <uuid>7d1e2f3a-0d2f-4d5c-9b8c-1f2e3d4c5b6a</uuid>
  <metadata>
    <nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">
      <nova:name>rdma-server</nova:name>
      <nova:ports>
        <nova:port uuid="5c4a3a3e-0d2f-4d5c-9b8c-1f2e3d4c5b6a">
          <nova:ip type="fixed" address="10.0.0.7" ipVersion="4"/>
          <nova:ip type="fixed" address="2001:DB8:0:0::7" ipVersion="6"/>
        </nova:port>
        <nova:port uuid="9e8d7c6b-0d2f-4d5c-9b8c-1f2e3d4c5b6a">
          <nova:ip type="fixed" address="192.168.100.7" ipVersion="4"/>
          <nova:ip type="floating" address="203.0.113.7" ipVersion="4"/>
          <nova:ip type="fixed" address="not-an-ip" ipVersion="4"/>
          <nova:ip type="fixed" address="10.0.0.7" ipVersion="4"/>
        </nova:port>
      </nova:ports>
    </nova:instance>
  </metadata>
  <devices>
    <interface type='ethernet'>
      <mac address='FA:16:3E:11:22:33'/>
      <target dev='tap5c4a3a3e-0d'/>
    </interface>
    <interface type='hostdev' managed='yes'>
      <mac address='fa:16:3e:44:55:66'/>
      <source><address type='pci' domain='0x0000' bus='0x81' slot='0x00' function='0x3'/></source>
    </interface>
    <interface type='network'><mac address='bogus'/></interface>
  </devices>
</domain>
"""


class TestVMAddresses(unittest.TestCase):

    def test_novas_fixed_ips_then_every_interfaces_mac_each_once(self):
        self.assertEqual(("10.0.0.7", "2001:db8::7", "192.168.100.7", "fa:16:3e:11:22:33",
                          "fa:16:3e:44:55:66"), domain_xml.vm_addresses(NOVA_PORTS_XML))

    def test_a_domain_nova_did_not_define_has_its_macs_only(self):
        self.assertEqual(("fa:16:3e:11:22:33", "fa:16:3e:44:55:66"),
                         domain_xml.vm_addresses(NOVA_SRIOV_XML))
        self.assertEqual((), domain_xml.vm_addresses("<domain><name>x</name></domain>"))

    def test_the_parsed_root_is_read_as_the_text_is(self):
        root = ElementTree.fromstring(NOVA_PORTS_XML)
        self.assertEqual(domain_xml.vm_addresses(NOVA_PORTS_XML), domain_xml.vm_addresses(root))

    def test_the_agent_reads_them_with_the_rest_of_the_domain(self):
        facts = metadata.parse_domain_xml(NOVA_PORTS_XML)
        self.assertEqual(domain_xml.vm_addresses(NOVA_PORTS_XML), facts.addresses)
