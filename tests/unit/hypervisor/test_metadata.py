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

"""What the agent reads from a domain's XML (metadata SLA, channel, taps, hostdevs)."""

import unittest
import xml.etree.ElementTree as ET

from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import metadata
from resex_libvirt import sla

DOMAIN = """
<domain type='kvm'>
  <name>vm-a</name>
  <uuid>11111111-2222-3333-4444-555555555555</uuid>
  <metadata>
    <nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">
      <nova:name>ignored</nova:name>
    </nova:instance>
    <resex:sla xmlns:resex="http://resex-libvirt.org/xmlns/sla/1.0">
      <resex:latency_sla_us> 250 </resex:latency_sla_us>
      <resex:shares>7</resex:shares>
      <other:shares xmlns:other="urn:other">99</other:shares>
    </resex:sla>
  </metadata>
  <vcpu placement='static' current='2'>4</vcpu>
  <devices>
    <interface type='bridge'><target dev='tap-a0'/></interface>
    <interface type='bridge'><target dev='tap-a1'/></interface>
    <interface type='network'/>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0x0000' bus='0x81' slot='0x00' function='0x3'/></source>
    </hostdev>
    <hostdev mode='subsystem' type='usb'>
      <source><vendor id='0x1'/></source>
    </hostdev>
    <channel type='unix'>
      <source mode='bind' path='/run/other.sock'/>
      <target type='virtio' name='org.qemu.guest_agent.0'/>
    </channel>
    <channel type='unix'>
      <source mode='bind' path='/var/lib/resex/vm-a.sock'/>
      <target type='virtio' name='org.resex.latency.0'/>
    </channel>
  </devices>
</domain>
"""


class DomainXmlTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.facts = metadata.parse_domain_xml(DOMAIN)

    def test_identity_and_current_vcpus(self):
        self.assertEqual("11111111-2222-3333-4444-555555555555", self.facts.uuid)
        self.assertEqual("vm-a", self.facts.name)
        self.assertEqual(2, self.facts.vcpus)

    def test_sla_keys_come_only_from_the_project_namespace(self):
        self.assertEqual({"resex:latency_sla_us": "250", "resex:shares": "7"},
                         self.facts.sla_specs)
        parsed = sla.parse(self.facts.sla_specs)
        self.assertEqual(250.0, parsed.latency_sla_us)
        self.assertEqual(7, parsed.shares)

    def test_latency_channel_is_the_org_resex_latency_port_only(self):
        self.assertEqual("/var/lib/resex/vm-a.sock", self.facts.latency_channel)

    def test_taps_and_pci_hostdevs(self):
        self.assertEqual(("tap-a0", "tap-a1"), self.facts.interfaces)
        self.assertEqual(("0000:81:00.3",), self.facts.hostdevs)

    def test_domain_without_metadata_or_devices(self):
        facts = metadata.parse_domain_xml("<domain><name>x</name><uuid>u</uuid></domain>")
        self.assertEqual(({}, None, (), (), 1),
                         (facts.sla_specs, facts.latency_channel, facts.interfaces,
                          facts.hostdevs, facts.vcpus))

    def test_malformed_xml_raises_parse_error(self):
        with self.assertRaises(ET.ParseError):
            metadata.parse_domain_xml("<domain>")


class SlaXmlTest(unittest.TestCase):

    def test_sla_xml_round_trips_through_the_metadata_parser(self):
        specs = {"resex:latency_sla_us": 120, "resex:io_class": "bulk"}
        text = metadata.sla_xml(specs)
        self.assertEqual({"resex:latency_sla_us": "120", "resex:io_class": "bulk"},
                         metadata.parse_sla_xml(text))

    def test_what_libvirt_returns_from_metadata_call_parses(self):
        # virDomainGetMetadata returns the element with the namespace declared on it.
        text = ('<sla xmlns="http://resex-libvirt.org/xmlns/sla/1.0">'
                '<shares>5</shares></sla>')
        self.assertEqual({"resex:shares": "5"}, metadata.parse_sla_xml(text))

    def test_unknown_names_are_kept_so_the_schema_reports_them(self):
        self.assertEqual({"resex:bogus": "1"},
                         metadata.parse_sla_xml("<sla><bogus>1</bogus></sla>"))

    def test_empty_or_foreign_root_gives_nothing(self):
        self.assertEqual({}, metadata.parse_sla_xml(""))
        self.assertEqual({}, metadata.parse_sla_xml("<other><shares>1</shares></other>"))


class NovaInstanceNameTest(unittest.TestCase):

    def test_the_nova_instance_name_is_read_from_nova_metadata(self):
        self.assertEqual("ignored", metadata.parse_domain_xml(DOMAIN).nova_name)

    def test_a_domain_nova_did_not_define_has_no_nova_name(self):
        facts = metadata.parse_domain_xml("<domain><name>x</name><uuid>u</uuid></domain>")
        self.assertIsNone(facts.nova_name)
        blank = DOMAIN.replace("<nova:name>ignored</nova:name>", "<nova:name> </nova:name>")
        self.assertIsNone(metadata.parse_domain_xml(blank).nova_name)

    def test_logs_name_a_nova_guest_by_nova_name_uuid_and_domain(self):
        nova = base.VMInfo(uuid="0b8f-1", name="instance-0000000a", nova_name="web-1")
        self.assertEqual("web-1 (0b8f-1, instance-0000000a)", nova.label)
        self.assertEqual("vm-a", base.VMInfo(uuid="u", name="vm-a").label)
