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

"""libvirt interface statistics against libvirt's own ``test:///`` driver.

The test driver's interface counters are fake (derived from the clock) and
its bulk stats carry no ``net.*``, but every call is the real libvirt API:
the monitor's fallback from ``getAllDomainStats`` to ``interfaceStats``,
its VM lookup and its handling of vanished domains run for real.
"""

import io
import json
import os
import shutil
import tempfile
import unittest

import libvirt

from resex_libvirt import exceptions
from resex_libvirt.fabric import libvirt_iface
from resex_libvirt.fabric import link_facts
from resex_libvirt.fabric import resex_fabric
from resex_libvirt.hypervisor import base as hv_base

UUID1 = "11111111-1111-1111-1111-111111111111"
UUID2 = "22222222-2222-2222-2222-222222222222"
UUID3 = "33333333-3333-3333-3333-333333333333"

NODE_XML = """
<node>
  <domain type='test'>
    <name>vm1</name><uuid>%s</uuid>
    <memory>65536</memory><vcpu>1</vcpu><os><type>hvm</type></os>
    <devices>
      <interface type='ethernet'><target dev='tap-vm1'/></interface>
      <interface type='ethernet'><target dev='tap-vm1b'/></interface>
    </devices>
  </domain>
  <domain type='test'>
    <name>vm2</name><uuid>%s</uuid>
    <memory>65536</memory><vcpu>1</vcpu><os><type>hvm</type></os>
    <devices>
      <interface type='ethernet'><target dev='tap-vm2'/></interface>
    </devices>
  </domain>
  <domain type='test'>
    <name>quiet</name><uuid>%s</uuid>
    <memory>65536</memory><vcpu>1</vcpu><os><type>hvm</type></os>
  </domain>
</node>
""" % (UUID1, UUID2, UUID3)


class LibvirtTestDriverCase(unittest.TestCase):

    def setUp(self):
        super().setUp()
        tmp = tempfile.mkdtemp(prefix="resex-fabric-")
        self.addCleanup(shutil.rmtree, tmp, True)
        self.node = os.path.join(tmp, "node.xml")
        with open(self.node, "w") as handle:
            handle.write(NODE_XML)
        self.uri = "test://" + self.node
        self.conn = libvirt.open(self.uri)
        self.addCleanup(self.conn.close)
        self.vms = {
            UUID1: hv_base.VMInfo(uuid=UUID1, name="vm1", interfaces=("tap-vm1", "tap-vm1b")),
            UUID2: hv_base.VMInfo(uuid=UUID2, name="vm2"),  # taps found from its XML
            UUID3: hv_base.VMInfo(uuid=UUID3, name="quiet"),
        }


class TestLibvirtInterfaceStats(LibvirtTestDriverCase):

    def test_each_vm_is_counted_over_its_taps(self):
        monitor = libvirt_iface.LibvirtInterfaceStats(self.conn)
        eps = monitor.endpoints(self.vms)
        self.assertEqual({("tap-vm1", UUID1), ("tap-vm1b", UUID1), ("tap-vm2", UUID2)},
                         {(e.name, e.vm) for e in eps})
        self.assertEqual({UUID1, UUID2}, set(monitor.counters(self.vms)))

    def test_test_driver_falls_back_to_per_domain_interface_stats(self):
        monitor = libvirt_iface.LibvirtInterfaceStats(self.conn)
        monitor.counters(self.vms)
        self.assertFalse(monitor.bulk_supported)

    def test_tx_is_libvirts_tx_and_totals_never_decrease(self):
        monitor = libvirt_iface.LibvirtInterfaceStats(lambda: self.conn)
        dom = self.conn.lookupByUUIDString(UUID2)
        before = dom.interfaceStats("tap-vm2")[4]
        first = monitor.counters(self.vms)[UUID2]
        second = monitor.counters(self.vms)[UUID2]
        after = dom.interfaceStats("tap-vm2")[4]
        self.assertEqual(0, first.tx_bytes)
        self.assertGreaterEqual(second.tx_bytes, 0)
        self.assertLessEqual(second.tx_bytes, after - before)

    def test_the_hypervisors_bulk_sweep_is_used_without_a_call_of_its_own(self):
        # One getAllDomainStats(INTERFACE) per interval: the record
        # below is what QEMU's sweep carries (the test driver's has no net.*).
        sweep = {UUID1: {"net.count": 1, "net.0.name": "tap-vm1",
                         "net.0.tx.bytes": 3000, "net.0.tx.pkts": 2,
                         "net.0.rx.bytes": 100, "net.0.rx.pkts": 1}}

        def no_connection():
            raise AssertionError("the interface monitor called libvirt itself")

        monitor = libvirt_iface.LibvirtInterfaceStats(no_connection, bulk_stats=lambda: sweep)
        monitor.counters({UUID1: self.vms[UUID1]})
        sweep[UUID1]["net.0.tx.bytes"] = 4500
        self.assertEqual(1500, monitor.counters({UUID1: self.vms[UUID1]})[UUID1].tx_bytes)

    def test_vanished_vm_is_skipped(self):
        monitor = libvirt_iface.LibvirtInterfaceStats(self.conn)
        self.conn.lookupByUUIDString(UUID2).destroy()
        self.assertEqual({UUID1}, set(monitor.counters(self.vms)))

    def test_unreachable_libvirt_is_a_fabric_error(self):
        def broken():
            raise libvirt.libvirtError("connection refused")

        monitor = libvirt_iface.LibvirtInterfaceStats(broken)
        self.assertRaises(exceptions.FabricError, monitor.counters, self.vms)

    def test_link_needs_a_capacity_from_config_or_uplink(self):
        # Empty sysfs and /proc: no uplink to discover, whatever this machine has.
        empty = tempfile.mkdtemp(prefix="resex-empty-")
        self.addCleanup(shutil.rmtree, empty, True)
        monitor = libvirt_iface.LibvirtInterfaceStats(self.conn, sysfs_root=empty,
                                                      proc_root=empty)
        self.assertRaises(exceptions.FabricError, monitor.link)
        monitor = libvirt_iface.LibvirtInterfaceStats(
            self.conn, overrides=link_facts.LinkOverrides(capacity_gbps=10),
            sysfs_root=empty, proc_root=empty)
        link = monitor.link()
        self.assertEqual((10e9 / 8, libvirt_iface.ETHERNET_MTU),
                         (link.capacity_bytes_per_s, link.mtu))


class TestShowLibvirtIface(LibvirtTestDriverCase):

    def test_show_lists_each_tap_with_its_vm_name(self):
        out, err = io.StringIO(), io.StringIO()
        # An empty sysfs: the discovered uplink has no MTU file, so Ethernet's applies.
        empty = tempfile.mkdtemp(prefix="resex-empty-")
        self.addCleanup(shutil.rmtree, empty, True)
        args = resex_fabric._parser().parse_args([
            "show", "--source", "libvirt_iface", "--uri", self.uri, "--seconds", "0",
            "--json", "--capacity-gbps", "10", "--sysfs-root", empty])
        self.assertEqual(0, resex_fabric.show(args, out=out, err=err, sleep=lambda s: None))
        doc = json.loads(out.getvalue())
        self.assertEqual({("tap-vm1", "vm1"), ("tap-vm1b", "vm1"), ("tap-vm2", "vm2")},
                         {(r["endpoint"], r["vm_name"]) for r in doc["endpoints"]})
        self.assertEqual(1500, doc["link"]["mtu"])
        for row in doc["endpoints"]:
            self.assertGreaterEqual(row["tx_bytes_per_s"], 0)
