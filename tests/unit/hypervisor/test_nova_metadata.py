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


PROJECT = "8d6f2c0b9e1a4f3d8c7b6a5e4d3c2b1a"


def nova_domain(extra_specs, qga=True, vcpus=2, project=(PROJECT, "web-team")):
    """Domain XML as Nova's LibvirtDriver assembles it (metadata, owner, cputune, qga channel)."""
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
    if project is not None:
        owner = vconfig.LibvirtConfigGuestMetaNovaOwner()
        owner.userid, owner.username = "5a4b3c2d1e0f", "alice"
        owner.projectid, owner.projectname = project
        meta.owner = owner
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


class OwnerProjectTest(unittest.TestCase):

    def test_the_owning_project_is_read_from_novas_own_xml(self):
        facts = metadata.parse_domain_xml(nova_domain({}))
        self.assertEqual(nova_metadata.NovaProject(PROJECT, "web-team"), facts.project)

    def test_no_owner_or_a_plain_domain_has_no_project(self):
        self.assertIsNone(metadata.parse_domain_xml(nova_domain({}, project=None)).project)
        plain = "<domain><name>x</name><uuid>u</uuid></domain>"
        self.assertIsNone(metadata.parse_domain_xml(plain).project)

    def test_a_project_id_unfit_for_a_label_is_refused_and_a_long_name_left_out(self):
        for bad in ("", "a b", 'x"y', "p" * 65, "proj\nect"):
            xml = nova_domain({}, project=(bad, "team"))
            self.assertIsNone(metadata.parse_domain_xml(xml).project, bad)
        xml = nova_domain({}, project=(PROJECT, "n" * 65))
        self.assertEqual(nova_metadata.NovaProject(PROJECT, None),
                         metadata.parse_domain_xml(xml).project)

    @given(st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=80))
    def test_any_project_id_either_comes_back_unchanged_or_not_at_all(self, project):
        root = ET.fromstring(nova_domain({}, qga=False, project=(project, "team")))
        got = nova_metadata.owner_project(root)
        if got is not None:
            self.assertEqual(project.strip(), got.uuid)
            self.assertRegex(got.uuid, r"^[A-Za-z0-9_-]{1,64}$")


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
