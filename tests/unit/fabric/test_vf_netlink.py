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

"""Per-VF statistics: pyroute2-encoded PF replies, virtfn links, Nova SR-IOV XML.

No SR-IOV HCA here: the netlink replies are encoded with pyroute2's own
``ifinfmsg`` (see :mod:`tests.unit.fabric.netlink_replies`), the sysfs
tree is temporary and kernel-shaped, and the VF-to-VM mapping comes from
the domain XML Nova writes for SR-IOV ports.
"""

import unittest

from resex_libvirt import exceptions
from resex_libvirt.fabric import domain_xml
from resex_libvirt.fabric import link_facts
from resex_libvirt.fabric import vf_netlink
from resex_libvirt.hypervisor import base as hv_base
from tests.unit.fabric import netlink_replies as replies
from tests.unit.fabric import sysfs_tree
from tests.unit.fabric import test_domain_xml

PF_PCI = "0000:81:00.0"
VF_PCIS = ["0000:81:00.1", "0000:81:00.2", "0000:81:00.3"]
VM_X = "5c4a3a3e-0d2f-4d5c-9b8c-1f2e3d4c5b6a"
VM_Y = "6d5b4b4f-1e30-4e6d-8c9d-2a3f4e5d6c7b"

Y_XML = """
<domain type='kvm'>
  <name>instance-0000002b</name>
  <uuid>6d5b4b4f-1e30-4e6d-8c9d-2a3f4e5d6c7b</uuid>
  <devices>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source>
        <address domain='0x0000' bus='0x81' slot='0x00' function='0x1'/>
      </source>
    </hostdev>
  </devices>
</domain>
"""


def vm_from_xml(uuid, name, xml):
    return hv_base.VMInfo(uuid=uuid, name=name, hostdevs=domain_xml.hostdev_addresses(xml),
                          interfaces=domain_xml.interface_targets(xml))


class VFTestCase(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.tree = sysfs_tree.SysfsTree()
        self.addCleanup(self.tree.cleanup)
        self.tree.add_ib_device("mlx5_0", PF_PCI, rate="200 Gb/sec (4X HDR)")
        self.tree.add_netdev("ib0", PF_PCI, mtu=4092, dev_port=0)
        self.tree.add_vfs(PF_PCI, VF_PCIS)
        self.vms = {
            VM_X: vm_from_xml(VM_X, "rdma-x", test_domain_xml.NOVA_SRIOV_XML),
            VM_Y: vm_from_xml(VM_Y, "rdma-y", Y_XML),
        }

    def monitor(self, *reply_bytes, **kwargs):
        self.source = replies.ScriptedSource(*reply_bytes)
        return vf_netlink.VFNetlinkMonitor("ib0", sysfs_root=self.tree.root,
                                           source=self.source, **kwargs)


class TestDecode(unittest.TestCase):

    def test_vf_stats_are_decoded_per_vf_index(self):
        data = replies.newlink("ib0", [replies.vf_info(0, 10, 1, 20, 2),
                                       replies.vf_info(2, 2**40, 7, 5, 1)])
        stats = vf_netlink.parse_vf_stats(data)
        self.assertEqual({0, 2}, set(stats))
        self.assertEqual((2**40, 7, 5, 1), (stats[2].tx_bytes, stats[2].tx_packets,
                                            stats[2].rx_bytes, stats[2].rx_packets))

    def test_vf_without_stats_attribute_is_left_out(self):
        data = replies.newlink("ib0", [replies.vf_info(0, 10), replies.vf_info(1, stats=False)])
        self.assertEqual({0}, set(vf_netlink.parse_vf_stats(data)))

    def test_link_without_vf_list_has_no_vfs(self):
        self.assertEqual({}, vf_netlink.parse_vf_stats(replies.newlink("ib0", None)))

    def test_netlink_error_is_a_fabric_error(self):
        self.assertRaises(exceptions.FabricError, vf_netlink.parse_vf_stats,
                          replies.no_such_device())

    def test_request_asks_for_vf_info_by_name(self):
        from pyroute2.netlink.rtnl import marshal

        msg = next(marshal.MarshalRtnl().parse(vf_netlink.encode_getlink_request("ib0", 9)))
        self.assertEqual("ib0", msg.get_attr("IFLA_IFNAME"))
        self.assertEqual(vf_netlink.RTEXT_FILTER_VF, msg.get_attr("IFLA_EXT_MASK"))
        self.assertEqual(9, msg["header"]["sequence_number"])


class TestMonitor(VFTestCase):

    def test_virtfn_links_give_each_vf_its_pci_address(self):
        self.assertEqual(dict(enumerate(VF_PCIS)),
                         vf_netlink.vf_pci_addresses(self.tree.root, "ib0"))

    def test_vf_traffic_is_charged_to_the_vm_whose_hostdev_it_is(self):
        monitor = self.monitor(
            replies.newlink("ib0", [replies.vf_info(i, 1000 * i, i, 10, 1) for i in range(3)]),
            replies.newlink("ib0", [replies.vf_info(0, 5000, 9, 10, 1),
                                    replies.vf_info(1, 1000 + 4096, 5, 10, 1),
                                    replies.vf_info(2, 2000 + 8192, 6, 30, 3)]))
        self.assertEqual({VM_X: 0, VM_Y: 0},
                         {k: v.tx_bytes for k, v in monitor.counters(self.vms).items()})
        got = monitor.counters(self.vms)
        # VF 1 (81:00.2) and VF 2 (81:00.3) are VM X's (<hostdev> and
        # <interface type='hostdev'>); VF 0 (81:00.1) is VM Y's.
        self.assertEqual(4096 + 8192, got[VM_X].tx_bytes)
        self.assertEqual(20, got[VM_X].rx_bytes)
        self.assertEqual(5000, got[VM_Y].tx_bytes)
        self.assertEqual(["ib0", "ib0"], self.source.asked)

    def test_vf_owned_by_no_vm_is_shown_unowned(self):
        monitor = self.monitor(replies.newlink("ib0", [replies.vf_info(0, 1)]))
        eps = monitor.endpoints({})
        self.assertEqual(["ib0/vf0"], [e.name for e in eps])
        self.assertIsNone(eps[0].vm)
        self.assertEqual(VF_PCIS[0], eps[0].detail)

    def test_vf_counter_reset_never_gives_negative_usage(self):
        monitor = self.monitor(
            replies.newlink("ib0", [replies.vf_info(0, 10**9)]),
            replies.newlink("ib0", [replies.vf_info(0, 10**9 + 100)]),
            replies.newlink("ib0", [replies.vf_info(0, 50)]))  # VF re-created
        totals = [monitor.counters(self.vms)[VM_Y].tx_bytes for _ in range(3)]
        self.assertEqual([0, 100, 150], totals)

    def test_link_is_the_pf_port_rate_and_the_ipoib_mtu(self):
        link = self.monitor(replies.newlink("ib0", [])).link()
        self.assertEqual(("ib0", 200e9 / 8, 4096),
                         (link.name, link.capacity_bytes_per_s, link.mtu))

    def test_link_overrides_apply(self):
        link = self.monitor(replies.newlink("ib0", []), overrides=link_facts.LinkOverrides(
            capacity_gbps=8, mtu=1024)).link()
        self.assertEqual((1e9, 1024), (link.capacity_bytes_per_s, link.mtu))

    def test_close_closes_the_source(self):
        monitor = self.monitor(replies.newlink("ib0", []))
        monitor.close()
        self.assertTrue(self.source.closed)

    def test_missing_pf_name_is_a_config_error(self):
        self.assertRaises(exceptions.ConfigError, vf_netlink.VFNetlinkMonitor, "",
                          source=replies.ScriptedSource(b""))
