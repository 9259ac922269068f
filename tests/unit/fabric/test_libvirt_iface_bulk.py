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

"""The bulk ``net.*`` path of the libvirt interface monitor.

libvirt's ``test:///`` driver returns no ``net.*`` bulk stats (only the
QEMU driver does, and there is no libvirtd with guests in unit tests), so
this one path is fed by a stand-in connection whose records have exactly
the keys ``virConnectGetAllDomainStats(VIR_DOMAIN_STATS_INTERFACE)``
returns for a QEMU guest (``net.count``, ``net.<i>.name``,
``net.<i>.{rx,tx}.{bytes,pkts}``). The per-domain fallback is tested
against the real test driver in ``tests/functional/fabric``.
"""

import unittest

from resex_libvirt.fabric import libvirt_iface
from resex_libvirt.hypervisor import base as hv_base

UUID = "11111111-1111-1111-1111-111111111111"


class QemuDomain:
    def UUIDString(self):
        return UUID


class QemuBulkConnection:
    """Answers getAllDomainStats like libvirt's QEMU driver for one guest."""

    def __init__(self):
        self.tx = [1000, 50]
        self.calls = 0

    def getAllDomainStats(self, flags):
        self.calls += 1
        return [(QemuDomain(), {
            "net.count": 2,
            "net.0.name": "tap-vm1", "net.0.rx.bytes": 7, "net.0.rx.pkts": 1,
            "net.0.rx.errs": 0, "net.0.rx.drop": 0,
            "net.0.tx.bytes": self.tx[0], "net.0.tx.pkts": 10,
            "net.0.tx.errs": 0, "net.0.tx.drop": 0,
            "net.1.name": "tap-vm1b", "net.1.rx.bytes": 0, "net.1.rx.pkts": 0,
            "net.1.tx.bytes": self.tx[1], "net.1.tx.pkts": 1,
        })]

    def lookupByUUIDString(self, uuid):  # pragma: no cover - must not be needed
        raise AssertionError("bulk stats were enough")


class TestBulkStats(unittest.TestCase):

    def test_bulk_stats_are_summed_over_the_vms_taps_with_one_call(self):
        conn = QemuBulkConnection()
        monitor = libvirt_iface.LibvirtInterfaceStats(conn)
        vms = {UUID: hv_base.VMInfo(uuid=UUID, name="vm1")}
        monitor.counters(vms)
        conn.tx = [1000 + 3000, 50 + 20]
        got = monitor.counters(vms)[UUID]
        self.assertEqual(3020, got.tx_bytes)
        self.assertEqual(2, conn.calls)
        self.assertTrue(monitor.bulk_supported)

    def test_a_tap_recreated_with_a_reset_counter_never_goes_backwards(self):
        conn = QemuBulkConnection()
        monitor = libvirt_iface.LibvirtInterfaceStats(conn)
        vms = {UUID: hv_base.VMInfo(uuid=UUID, name="vm1")}
        monitor.counters(vms)
        conn.tx = [1500, 50]
        first = monitor.counters(vms)[UUID].tx_bytes
        conn.tx = [200, 50]  # guest rebooted: tap re-created, counter restarted
        second = monitor.counters(vms)[UUID].tx_bytes
        self.assertEqual(500, first)
        self.assertEqual(700, second)
