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

"""Link capacity from the kernel's ``rate`` text, MTUs, overrides."""

import os
import unittest

from resex_libvirt import exceptions
from resex_libvirt.fabric import link_facts
from tests.unit.fabric import sysfs_tree


class TestParseRate(unittest.TestCase):

    def data_gbps(self, text):
        return link_facts.parse_rate(text).data_gbps

    def test_8b10b_generations_lose_a_fifth(self):
        self.assertAlmostEqual(2.0, self.data_gbps("2.5 Gb/sec (1X SDR)"))
        self.assertAlmostEqual(16.0, self.data_gbps("20 Gb/sec (4X DDR)"))
        self.assertAlmostEqual(32.0, self.data_gbps("40 Gb/sec (4X QDR)"))

    def test_paper_link_is_8_gbps_of_data_i_e_1_gigabyte_per_second(self):
        # Section VI-B2: "8Gbps (due to the 8b/10b IB encoding) i.e. 1 Gigabyte per second".
        rate = link_facts.parse_rate("10 Gb/sec (4X SDR)")
        self.assertAlmostEqual(8.0, rate.data_gbps)
        self.assertAlmostEqual(1e9, rate.data_bytes_per_s)

    def test_old_kernels_print_sdr_without_a_name(self):
        rate = link_facts.parse_rate("10 Gb/sec (4X)")
        self.assertEqual("SDR", rate.speed)
        self.assertAlmostEqual(8.0, rate.data_gbps)

    def test_64b66b_generations_use_their_lane_data_rates(self):
        self.assertAlmostEqual(40.0, self.data_gbps("40 Gb/sec (4X FDR10)"))
        self.assertAlmostEqual(54.545, self.data_gbps("56 Gb/sec (4X FDR)"), places=2)
        self.assertAlmostEqual(100.0, self.data_gbps("100 Gb/sec (4X EDR)"))
        self.assertAlmostEqual(25.0, self.data_gbps("25 Gb/sec (1X EDR)"))
        self.assertAlmostEqual(200.0, self.data_gbps("200 Gb/sec (4X HDR)"))
        self.assertAlmostEqual(400.0, self.data_gbps("400 Gb/sec (4X NDR)"))
        self.assertAlmostEqual(2400.0, self.data_gbps("2400 Gb/sec (12X XDR)"))

    def test_unknown_speed_names_fall_back_on_the_lane_rate(self):
        self.assertAlmostEqual(8.0, self.data_gbps("10 Gb/sec (4X ZZZ)"))
        self.assertAlmostEqual(800 * 64 / 66, self.data_gbps("800 Gb/sec (4X GDR)"))

    def test_text_that_is_not_a_rate_is_a_fabric_error(self):
        for text in ("", "fast", "100 Gb/sec", "100 Gb/sec (0X EDR)", None):
            self.assertRaises(exceptions.FabricError, link_facts.parse_rate, text)


class TestMTU(unittest.TestCase):

    def test_ipoib_datagram_mtu_is_the_ib_mtu_minus_4(self):
        self.assertEqual(2048, link_facts.ib_mtu_from_ipoib(2044))
        self.assertEqual(4096, link_facts.ib_mtu_from_ipoib(4092))

    def test_ipoib_connected_mode_says_nothing_about_the_ib_mtu(self):
        self.assertIsNone(link_facts.ib_mtu_from_ipoib(65520))
        self.assertIsNone(link_facts.ib_mtu_from_ipoib(None))


class TestBuildLink(unittest.TestCase):

    def test_overrides_win_then_rate_then_fallback(self):
        rate = link_facts.parse_rate("40 Gb/sec (4X QDR)")
        over = link_facts.LinkOverrides(capacity_gbps=8.0, mtu=2048)
        self.assertEqual((1e9, 2048), self._facts(link_facts.build_link("l", over, rate=rate)))
        self.assertEqual((4e9, 1024), self._facts(link_facts.build_link("l", None, rate=rate)))
        self.assertEqual((5.0, 1500), self._facts(link_facts.build_link(
            "l", None, mtu=1500, fallback_bytes_per_s=5.0)))

    def test_unknown_capacity_asks_the_operator(self):
        self.assertRaises(exceptions.FabricError, link_facts.build_link, "l", None)

    def test_bytes_become_mtus_rounding_partial_packets_up(self):
        link = link_facts.build_link("l", link_facts.LinkOverrides(8.0, 1024))
        self.assertEqual(1048576, link.mtus(2**30))
        self.assertEqual(2, link.mtus(1025))

    @staticmethod
    def _facts(link):
        return link.capacity_bytes_per_s, link.mtu


class TestDiscovery(unittest.TestCase):
    """Uplink and capacity discovery on temporary /proc and sysfs trees.

    The trees are laid out like the kernel's (this machine's own NIC is a
    virtio one without a speed).
    """

    def setUp(self):
        super().setUp()
        self.sysfs = sysfs_tree.SysfsTree()
        self.addCleanup(self.sysfs.cleanup)
        self.proc = sysfs_tree.ProcTree()
        self.addCleanup(self.proc.cleanup)

    def capacity(self, netdev):
        return link_facts.netdev_capacity(self.sysfs.root, netdev)

    def test_the_uplink_is_the_default_routes_interface(self):
        self.proc.set_routes([("eth1", "000200C0", "0001", "00FFFFFF"),
                              ("eth0", "00000000", "0003", "00000000")], [])
        self.assertEqual("eth0", link_facts.discover_uplink(self.proc.root))

    def test_a_down_default_route_is_not_the_uplink(self):
        self.proc.set_routes([("eth0", "00000000", "0002", "00000000")], [])
        self.assertIsNone(link_facts.discover_uplink(self.proc.root))

    def test_an_ipv6_only_host_finds_its_uplink_and_ignores_unreachable_routes(self):
        self.proc.set_routes([], [("0" * 32, "00", "lo"), ("fd" + "0" * 30, "40", "eth2"),
                                  ("0" * 32, "00", "eth3")])
        self.assertEqual(["eth3"], link_facts.default_route_netdevs(self.proc.root))

    def test_no_routing_table_no_uplink(self):
        self.assertIsNone(link_facts.discover_uplink("/nonexistent"))

    def test_a_nic_reports_its_speed_as_data_capacity(self):
        self.sysfs.add_netdev("eth0", "0000:81:00.0", mtu=9000, speed=25000)
        found = self.capacity("eth0")
        self.assertEqual(25e9 / 8, found.bytes_per_s)
        self.assertIn("25000 Mb/s", found.how)

    def test_a_virtio_nic_without_a_speed_is_unknown_and_says_so(self):
        self.sysfs.add_netdev("eth0", "0000:00:03.0", mtu=1500, speed=-1)
        found = self.capacity("eth0")
        self.assertIsNone(found.bytes_per_s)
        self.assertEqual("eth0 reports no speed (-1)", found.how)

    def test_a_vlan_takes_the_speed_of_its_nic(self):
        self.sysfs.add_netdev("eth0", "0000:81:00.0", speed=10000)
        self.sysfs.add_virtual_netdev("eth0.100")
        self.sysfs.add_lower("eth0.100", "eth0")
        self.assertEqual(10e9 / 8, self.capacity("eth0.100").bytes_per_s)

    def test_a_bridge_takes_the_speed_of_its_only_physical_port_not_of_the_taps(self):
        self.sysfs.add_netdev("eth0", "0000:81:00.0", speed=40000)
        self.sysfs.add_virtual_netdev("br0")
        self.sysfs.add_virtual_netdev("tap-vm1", speed=10, tap=True)
        for port in ("eth0", "tap-vm1"):
            self.sysfs.add_bridge_port("br0", port)
        found = self.capacity("br0")
        self.assertEqual(40e9 / 8, found.bytes_per_s)
        self.assertIn("under br0", found.how)

    def test_a_bridge_with_two_uplinks_is_ambiguous_not_guessed(self):
        self.sysfs.add_netdev("eth0", "0000:81:00.0", speed=10000)
        self.sysfs.add_netdev("eth1", "0000:81:00.1", speed=25000)
        self.sysfs.add_virtual_netdev("br0")
        for port in ("eth0", "eth1"):
            self.sysfs.add_bridge_port("br0", port)
        found = self.capacity("br0")
        self.assertIsNone(found.bytes_per_s)
        self.assertIn("2 physical ports (eth0, eth1): ambiguous", found.how)

    def test_an_ipoib_netdev_takes_its_hca_ports_data_rate(self):
        self.sysfs.add_ib_device("mlx5_0", "0000:82:00.0", ports=(1, 2),
                                 rate="100 Gb/sec (4X EDR)")
        ndir = self.sysfs.add_netdev("ib0", "0000:82:00.0", mtu=2044, dev_port=0, speed=100000)
        with open(os.path.join(ndir, "type"), "w") as f:
            f.write("32\n")
        found = self.capacity("ib0")
        self.assertEqual(100e9 / 8, found.bytes_per_s)
        self.assertIn("IB port rate 100 Gb/sec (4X EDR)", found.how)

    def test_a_missing_interface_is_unknown(self):
        self.assertEqual("no interface eth9", self.capacity("eth9").how)

    def test_unknown_capacity_names_the_reason_and_the_option(self):
        with self.assertRaisesRegex(exceptions.FabricError,
                                    r"link eth0 unknown \(eth0 reports no speed \(-1\)\): "
                                    r"set \[fabric\] link_capacity_gbps"):
            link_facts.build_link("eth0", None, unknown_reason="eth0 reports no speed (-1)")
