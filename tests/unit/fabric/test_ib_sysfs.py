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

"""IB port counters from sysfs, on temporary trees shaped like the kernel's.

There is no HCA on the build machines; the kernel's sysfs is plain text
files and symlinks, so a temporary tree with the same names and the same
text (``drivers/infiniband/core/sysfs.c``) is read by exactly the code that
reads the real one.
"""

import unittest

from resex_libvirt import exceptions
from resex_libvirt.fabric import endpoint
from resex_libvirt.fabric import ib_sysfs
from resex_libvirt.fabric import link_facts
from resex_libvirt.hypervisor import base as hv_base
from tests.unit.fabric import sysfs_tree

SAT32 = 0xFFFFFFFF
VM_A = "aaaaaaaa-0000-0000-0000-000000000001"
VM_B = "bbbbbbbb-0000-0000-0000-000000000002"


def vms(*infos):
    return {i.uuid: i for i in infos}


class IBSysfsTestCase(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.tree = sysfs_tree.SysfsTree()
        self.addCleanup(self.tree.cleanup)

    def monitor(self, **kwargs):
        return ib_sysfs.IBPortCounters(sysfs_root=self.tree.root, **kwargs)


class TestDiscovery(IBSysfsTestCase):

    def test_host_without_infiniband_class_has_no_devices(self):
        monitor = ib_sysfs.IBPortCounters(sysfs_root=self.tree.root + "/nonexistent")
        self.assertEqual([], monitor.devices())
        self.assertEqual({}, monitor.counters({}))
        self.assertRaises(exceptions.FabricError, monitor.link)

    def test_every_port_of_every_device_is_listed(self):
        self.tree.add_ib_device("mlx5_0", "0000:81:00.0", ports=(1, 2))
        self.tree.add_ib_device("mlx4_0", "0000:03:00.0", ports=(1,))
        self.assertEqual([("mlx4_0", 1), ("mlx5_0", 1), ("mlx5_0", 2)],
                         self.monitor().ports())

    def test_device_pci_address_comes_from_the_device_link(self):
        self.tree.add_ib_device("mlx5_0", "0000:81:00.0")
        self.assertEqual("0000:81:00.0", self.monitor().device_pci("mlx5_0"))

    def test_bad_port_keys_are_config_errors(self):
        for key in ("", ":1", "mlx5_0:x", "mlx5_0:0"):
            self.assertRaises(exceptions.ConfigError, ib_sysfs.parse_port_key, key)


class TestCounters(IBSysfsTestCase):

    def setUp(self):
        super().setUp()
        self.tree.add_ib_device("mlx5_0", "0000:81:00.0", ports=(1, 2))

    def test_data_counters_are_four_octet_words_whatever_the_width(self):
        # 4X link: bytes are words x 4, never x 4 lanes x 4.
        monitor = self.monitor(port_map={"mlx5_0:1": VM_A})
        vm = vms(hv_base.VMInfo(uuid=VM_A, name="a"))
        monitor.counters(vm)
        self.tree.set_counters("mlx5_0", 1, xmit_data=1000, rcv_data=250,
                               xmit_packets=10, rcv_packets=3)
        got = monitor.counters(vm)[VM_A]
        self.assertEqual((4000, 10, 1000, 3),
                         (got.tx_bytes, got.tx_packets, got.rx_bytes, got.rx_packets))

    def test_totals_start_at_zero_and_count_only_traffic_seen_since(self):
        self.tree.set_counters("mlx5_0", 1, xmit_data=5_000_000)
        monitor = self.monitor(port_map={"mlx5_0:1": VM_A})
        vm = vms(hv_base.VMInfo(uuid=VM_A, name="a"))
        self.assertEqual(0, monitor.counters(vm)[VM_A].tx_bytes)
        self.tree.set_counters("mlx5_0", 1, xmit_data=5_000_100)
        self.assertEqual(400, monitor.counters(vm)[VM_A].tx_bytes)

    def test_saturated_32bit_counter_counts_up_to_saturation_then_nothing(self):
        monitor = self.monitor(port_map={"mlx5_0:1": VM_A})
        vm = vms(hv_base.VMInfo(uuid=VM_A, name="a"))
        self.tree.set_counters("mlx5_0", 1, xmit_data=SAT32 - 100)
        monitor.counters(vm)
        self.tree.set_counters("mlx5_0", 1, xmit_data=SAT32)
        with self.assertLogs("resex_libvirt.fabric.ib_sysfs", "WARNING") as logs:
            eps = monitor.endpoints(vm)
            monitor.endpoints(vm)  # still stuck: no second warning
        port1 = [e for e in eps if e.name == "mlx5_0:1"][0]
        self.assertEqual(endpoint.SATURATED, port1.state)
        self.assertEqual(400, port1.counters.tx_bytes)
        self.assertEqual(1, sum("saturated" in line for line in logs.output))
        self.assertEqual(400, monitor.counters(vm)[VM_A].tx_bytes)

    def test_reset_after_saturation_resumes_counting_from_zero(self):
        monitor = self.monitor(port_map={"mlx5_0:1": VM_A})
        vm = vms(hv_base.VMInfo(uuid=VM_A, name="a"))
        self.tree.set_counters("mlx5_0", 1, xmit_data=SAT32 - 10)
        monitor.counters(vm)
        self.tree.set_counters("mlx5_0", 1, xmit_data=SAT32)
        with self.assertLogs("resex_libvirt.fabric.ib_sysfs", "WARNING"):
            monitor.counters(vm)
        self.tree.set_counters("mlx5_0", 1, xmit_data=25)  # perfquery -R, then 25 words
        eps = {e.name: e for e in monitor.endpoints(vm)}
        self.assertEqual(endpoint.OK, eps["mlx5_0:1"].state)
        self.assertEqual((10 + 25) * 4, eps["mlx5_0:1"].counters.tx_bytes)

    def test_value_above_32_bits_proves_a_64bit_counter(self):
        monitor = self.monitor(port_map={"mlx5_0:1": VM_A})
        vm = vms(hv_base.VMInfo(uuid=VM_A, name="a"))
        self.tree.set_counters("mlx5_0", 1, xmit_data=SAT32)
        self.tree.set_counters("mlx5_0", 1, xmit_data=SAT32 + 1000)
        monitor.counters(vm)
        self.tree.set_counters("mlx5_0", 1, xmit_data=SAT32 + 1000)
        self.tree.set_counters("mlx5_0", 1, xmit_data=SAT32 + 2000)
        eps = {e.name: e for e in monitor.endpoints(vm)}
        self.assertEqual(endpoint.OK, eps["mlx5_0:1"].state)
        self.assertEqual(4000, eps["mlx5_0:1"].counters.tx_bytes)

    def test_ietf_extended_group_is_read_as_64bit_even_at_all_ones(self):
        self.tree.mark_extended("mlx5_0", 1)
        monitor = self.monitor(port_map={"mlx5_0:1": VM_A})
        vm = vms(hv_base.VMInfo(uuid=VM_A, name="a"))
        self.tree.set_counters("mlx5_0", 1, xmit_data=SAT32 - 1)
        monitor.counters(vm)
        self.tree.set_counters("mlx5_0", 1, xmit_data=SAT32)
        eps = {e.name: e for e in monitor.endpoints(vm)}
        self.assertEqual(endpoint.OK, eps["mlx5_0:1"].state)
        self.assertEqual(4, eps["mlx5_0:1"].counters.tx_bytes)

    def test_mlx4_counters_ext_is_preferred_over_legacy_counters(self):
        self.tree.set_counters("mlx5_0", 1, xmit_data=SAT32)  # legacy stuck
        self.tree.set_counters("mlx5_0", 1, ext=True, xmit_data=10**12, rcv_data=10**11,
                               xmit_packets=10**9, rcv_packets=10**8)
        monitor = self.monitor(port_map={"mlx5_0:1": VM_A})
        vm = vms(hv_base.VMInfo(uuid=VM_A, name="a"))
        monitor.counters(vm)
        self.tree.set_counters("mlx5_0", 1, ext=True, xmit_data=10**12 + 2**33)
        eps = {e.name: e for e in monitor.endpoints(vm)}
        self.assertEqual(endpoint.OK, eps["mlx5_0:1"].state)
        self.assertEqual(2**33 * 4, eps["mlx5_0:1"].counters.tx_bytes)

    def test_port_without_pma_is_unreadable_and_said_once(self):
        for name in ("xmit_data", "rcv_data", "xmit_packets", "rcv_packets"):
            self.tree.set_counters("mlx5_0", 2, **{name: ib_sysfs.NO_PMA})
        monitor = self.monitor(port_map={"mlx5_0:2": VM_B})
        vm = vms(hv_base.VMInfo(uuid=VM_B, name="b"))
        with self.assertLogs("resex_libvirt.fabric.ib_sysfs", "WARNING") as logs:
            first = {e.name: e for e in monitor.endpoints(vm)}
            monitor.endpoints(vm)
        self.assertEqual(endpoint.UNREADABLE, first["mlx5_0:2"].state)
        self.assertIsNone(first["mlx5_0:2"].counters)
        self.assertEqual(1, len(logs.output))
        self.assertNotIn(VM_B, monitor.counters(vm))  # unknown, not zero


class TestOwnership(IBSysfsTestCase):

    def setUp(self):
        super().setUp()
        self.tree.add_ib_device("mlx5_0", "0000:81:00.0", ports=(1, 2))
        self.tree.add_ib_device("mlx5_1", "0000:82:00.0", ports=(1,))

    def _traffic(self, monitor, vm):
        monitor.counters(vm)
        self.tree.set_counters("mlx5_0", 1, xmit_data=1)
        self.tree.set_counters("mlx5_0", 2, xmit_data=10)
        self.tree.set_counters("mlx5_1", 1, xmit_data=100)
        return monitor.counters(vm)

    def test_configured_ports_map_by_uuid_or_name(self):
        monitor = self.monitor(port_map={"mlx5_0:1": VM_A, "mlx5_0:2": "vm-b"})
        got = self._traffic(monitor, vms(hv_base.VMInfo(uuid=VM_A, name="vm-a"),
                                         hv_base.VMInfo(uuid=VM_B, name="vm-b")))
        self.assertEqual({VM_A: 4, VM_B: 40}, {k: v.tx_bytes for k, v in got.items()})

    def test_a_whole_device_can_be_configured_and_sums_its_ports(self):
        monitor = self.monitor(port_map={"mlx5_0": VM_A})
        got = self._traffic(monitor, vms(hv_base.VMInfo(uuid=VM_A, name="vm-a")))
        self.assertEqual({VM_A: 44}, {k: v.tx_bytes for k, v in got.items()})

    def test_device_matching_a_vm_hostdev_pci_address_belongs_to_it(self):
        monitor = self.monitor()
        got = self._traffic(monitor, vms(
            hv_base.VMInfo(uuid=VM_A, name="vm-a", hostdevs=("0000:82:00.0",))))
        self.assertEqual({VM_A: 400}, {k: v.tx_bytes for k, v in got.items()})

    def test_unowned_ports_are_shown_but_charged_to_nobody(self):
        monitor = self.monitor(port_map={"mlx5_0:1": "not-running"})
        eps = monitor.endpoints({})
        self.assertEqual([None, None, None], [e.vm for e in eps])
        self.assertIn("not-running", eps[0].detail)
        self.assertEqual({}, monitor.counters({}))


class TestLink(IBSysfsTestCase):

    def test_link_capacity_is_the_data_rate_of_the_port_rate(self):
        self.tree.add_ib_device("mlx4_0", "0000:03:00.0", rate="40 Gb/sec (4X QDR)")
        link = self.monitor().link()
        self.assertEqual("mlx4_0:1", link.name)
        self.assertEqual(32e9 / 8, link.capacity_bytes_per_s)
        self.assertEqual(link_facts.DEFAULT_MTU, link.mtu)

    def test_link_mtu_comes_from_the_ipoib_netdev_of_the_port(self):
        self.tree.add_ib_device("mlx5_0", "0000:81:00.0", ports=(1, 2))
        self.tree.add_netdev("ib0", "0000:81:00.0", mtu=4092, dev_port=0)
        self.tree.add_netdev("ib1", "0000:81:00.0", mtu=2044, dev_port=1)
        self.assertEqual(4096, self.monitor(link_port="mlx5_0:1").link().mtu)
        self.assertEqual(2048, self.monitor(link_port="mlx5_0:2").link().mtu)

    def test_roce_port_mtu_is_the_largest_ib_mtu_that_fits_the_netdev(self):
        self.tree.add_ib_device("mlx5_0", "0000:81:00.0", rate="25 Gb/sec (1X EDR)",
                                link_layer="Ethernet")
        self.tree.add_netdev("enp129s0f0", "0000:81:00.0", mtu=1500, dev_port=0)
        link = self.monitor().link()
        self.assertEqual(1024, link.mtu)
        self.assertEqual(25e9 / 8, link.capacity_bytes_per_s)

    def test_first_active_mapped_port_is_the_shared_link(self):
        self.tree.add_ib_device("mlx5_0", "0000:81:00.0", state="1: DOWN")
        self.tree.add_ib_device("mlx5_1", "0000:82:00.0", rate="200 Gb/sec (4X HDR)")
        self.tree.add_ib_device("mlx5_2", "0000:83:00.0", rate="56 Gb/sec (4X FDR)")
        link = self.monitor(port_map={"mlx5_0:1": "a", "mlx5_2:1": "b"}).link()
        self.assertEqual("mlx5_2:1", link.name)

    def test_overrides_beat_what_sysfs_says(self):
        self.tree.add_ib_device("mlx5_0", "0000:81:00.0")
        link = self.monitor(overrides=link_facts.LinkOverrides(
            capacity_gbps=8, mtu=1024)).link()
        self.assertEqual((1e9, 1024), (link.capacity_bytes_per_s, link.mtu))
