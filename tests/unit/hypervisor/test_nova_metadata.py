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

"""Nova's flavor in the domain XML, built by Nova 34's own config classes."""

import unittest
import xml.etree.ElementTree as ET

from hypothesis import given
from hypothesis import strategies as st
from nova.virt.libvirt import config as vconfig

from resex_libvirt.hypervisor import metadata
from resex_libvirt.hypervisor import nova_metadata

UUID = "0b8f7a3c-1111-4222-8333-444455556666"


def nova_domain(extra_specs, qga=True, vcpus=2):
    """Domain XML as Nova's LibvirtDriver assembles it (metadata, cputune, qga channel)."""
    guest = vconfig.LibvirtConfigGuest()
    guest.virt_type = "kvm"
    guest.name = "instance-00000001"
    guest.uuid = UUID
    guest.vcpus = vcpus
    guest.os_type = "hvm"
    meta = vconfig.LibvirtConfigGuestMetaNovaInstance()
    meta.package = "34.0.0"
    meta.name = "web-1"
    flavor = vconfig.LibvirtConfigGuestMetaNovaFlavor()
    flavor.name = "m1.latency"
    flavor.id = "42"
    flavor.vcpus = vcpus
    flavor.extra_specs = dict(extra_specs)
    meta.flavor = flavor
    guest.metadata.append(meta)
    if qga:
        channel = vconfig.LibvirtConfigGuestChannel()
        channel.type = "unix"
        channel.target_name = "org.qemu.guest_agent.0"
        channel.source_path = "/var/lib/libvirt/qemu/org.qemu.guest_agent.0.instance-00000001.sock"
        guest.add_device(channel)
        controller = vconfig.LibvirtConfigGuestController()
        controller.type = "virtio-serial"
        controller.index = 0
        guest.add_device(controller)
    return guest.to_xml()


class NovaFlavorTest(unittest.TestCase):

    def test_extra_specs_are_read_from_novas_own_xml(self):
        facts = metadata.parse_domain_xml(nova_domain(
            {"resex:latency_sla_us": "200", "quota:cpu_shares": "2048", "hw:cpu_policy": "x"}))
        self.assertEqual("m1.latency", facts.nova.name)
        self.assertEqual(2, facts.nova.vcpus)
        self.assertEqual({"resex:latency_sla_us": "200", "quota:cpu_shares": "2048",
                          "hw:cpu_policy": "x"}, facts.nova.extra_specs)

    def test_a_plain_libvirt_domain_has_no_nova_flavor(self):
        self.assertIsNone(nova_metadata.flavor_of(ET.fromstring(
            "<domain><name>x</name><metadata/></domain>")))

    def test_quota_extra_specs_name_the_libvirt_parameters_nova_wrote(self):
        self.assertEqual({"cpu_shares": 2048, "vcpu_period": 20000, "vcpu_quota": 10000},
                         nova_metadata.flavor_knobs({"quota:cpu_shares": "2048",
                                                     "quota:cpu_period": "20000",
                                                     "quota:cpu_quota": "10000",
                                                     "quota:disk_read_bytes_sec": "1"}))

    def test_a_quota_that_is_not_an_integer_is_skipped_with_a_warning(self):
        with self.assertLogs(nova_metadata.LOG, "WARNING"):
            self.assertEqual({}, nova_metadata.flavor_knobs({"quota:cpu_shares": "lots"}))

    def test_the_virtio_serial_controller_is_seen(self):
        self.assertTrue(metadata.parse_domain_xml(nova_domain({})).virtio_serial)
        self.assertFalse(metadata.parse_domain_xml(nova_domain({}, qga=False)).virtio_serial)

    @given(st.dictionaries(st.text(min_size=1).filter(lambda s: s.isprintable()),
                           st.text().filter(lambda s: s.isprintable() and s == s.strip()),
                           max_size=8))
    def test_any_extra_specs_nova_writes_come_back_unchanged(self, specs):
        facts = metadata.parse_domain_xml(nova_domain(specs))
        self.assertEqual(specs, facts.nova.extra_specs)


class CputuneTest(unittest.TestCase):

    def test_persistent_cputune_maps_to_scheduler_parameters(self):
        self.assertEqual(
            {"cpu_shares": 2048, "vcpu_period": 20000, "vcpu_quota": 5000,
             "global_period": 100000, "global_quota": 30000},
            metadata.parse_cputune(
                "<domain><cputune><shares>2048</shares><period>20000</period>"
                "<quota>5000</quota><global_period>100000</global_period>"
                "<global_quota>30000</global_quota></cputune></domain>"))

    def test_no_cputune_is_no_settings(self):
        self.assertEqual({}, metadata.parse_cputune("<domain/>"))
