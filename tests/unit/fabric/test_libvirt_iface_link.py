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

"""The link of tap/virtio tenants: the configured uplink, else the default route's."""

import unittest

from resex_libvirt import exceptions
from resex_libvirt.fabric import libvirt_iface
from resex_libvirt.fabric import link_facts
from tests.unit.fabric import sysfs_tree


class UplinkTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.sysfs = sysfs_tree.SysfsTree()
        self.addCleanup(self.sysfs.cleanup)
        self.proc = sysfs_tree.ProcTree()
        self.addCleanup(self.proc.cleanup)
        self.sysfs.add_netdev("eth0", "0000:81:00.0", mtu=9000, speed=25000)
        self.sysfs.add_netdev("eth1", "0000:00:03.0", mtu=1500, speed=-1)
        self.proc.set_routes([("eth0", "00000000", "0003", "00000000")], [])

    def monitor(self, netdev=None, overrides=None):
        return libvirt_iface.LibvirtInterfaceStats(
            connection=None, netdev=netdev, sysfs_root=self.sysfs.root,
            overrides=overrides, proc_root=self.proc.root)

    def test_without_a_configured_uplink_the_default_routes_interface_is_the_link(self):
        link = self.monitor().link()
        self.assertEqual(("eth0", 25e9 / 8, 9000),
                         (link.name, link.capacity_bytes_per_s, link.mtu))

    def test_a_configured_uplink_wins_over_the_default_route(self):
        monitor = self.monitor(netdev="eth1",
                               overrides=link_facts.LinkOverrides(capacity_gbps=10.0))
        link = monitor.link()
        self.assertEqual(("eth1", 10e9 / 8, 1500),
                         (link.name, link.capacity_bytes_per_s, link.mtu))

    def test_an_uplink_without_a_speed_is_a_fabric_error_saying_why(self):
        with self.assertRaisesRegex(exceptions.FabricError, r"eth1 reports no speed \(-1\)"):
            self.monitor(netdev="eth1").link()

    def test_no_default_route_and_no_uplink_is_a_fabric_error_saying_why(self):
        self.proc.set_routes([], [])
        with self.assertRaisesRegex(exceptions.FabricError, "no default route"):
            self.monitor().link()
