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

"""One statistics sweep of :class:`~resex_libvirt.hypervisor.stats.DomainStats`.

The connection is a stand-in answering as libvirt 9's QEMU driver does: its
bulk ``CPU_TOTAL`` and ``VCPU`` groups ask QEMU's monitor, so a sweep that
asks for them waits on the slowest guest (a guest capped hard answers in
60-180 ms, measured). The stand-in fails the test if they are asked for. The
sweep against a real libvirtd with a capped guest is
``tests/lab/test_smoke.py``; against the test driver,
``tests/functional/hypervisor/test_libvirt_host.py``.
"""

import contextlib
import unittest

import libvirt

from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import connection as connection_mod
from resex_libvirt.hypervisor import stats

A = "aaaaaaaa-0000-4000-8000-000000000001"
B = "bbbbbbbb-0000-4000-8000-000000000002"
STRANGER = "cccccccc-0000-4000-8000-000000000003"


def libvirt_error(code):
    exc = libvirt.libvirtError("boom")
    exc.err = (code, libvirt.VIR_FROM_QEMU, "boom", libvirt.VIR_ERR_ERROR,
               None, None, None, 0, 0)
    return exc


class Domain:
    def __init__(self, uuid, cpu_ns, active=True, cpu_stats=True):
        self.uuid, self.cpu_ns, self.active, self.cpu_stats = uuid, cpu_ns, active, cpu_stats
        self.reads = 0

    def UUIDString(self):
        return self.uuid

    def name(self):
        return "instance-" + self.uuid[:4]

    def isActive(self):
        return self.active

    def getCPUStats(self, total):
        self.reads += 1
        if not self.cpu_stats:
            raise libvirt_error(libvirt.VIR_ERR_NO_SUPPORT)
        if not self.active:
            raise libvirt_error(libvirt.VIR_ERR_OPERATION_INVALID)
        return [{"cpu_time": self.cpu_ns, "user_time": 1, "system_time": 1}]

    def info(self):
        return [1, 1024, 1024, 1, self.cpu_ns + 1]


class QemuConnection:
    """A ``virConnect`` whose monitor-backed bulk groups must never be asked."""

    MONITOR_GROUPS = libvirt.VIR_DOMAIN_STATS_CPU_TOTAL | libvirt.VIR_DOMAIN_STATS_VCPU

    def __init__(self, *domains, bulk=True):
        self.domains = {d.uuid: d for d in domains}
        self.bulk = bulk
        self.flags = []

    def getAllDomainStats(self, stats, flags=0):
        if not self.bulk:
            raise libvirt_error(libvirt.VIR_ERR_NO_SUPPORT)
        if stats & self.MONITOR_GROUPS:
            raise AssertionError("asked for a group libvirt collects through QEMU's monitor")
        self.flags.append((stats, flags))
        return [(d, {"net.count": 0}) for d in self.domains.values()]

    def lookupByUUIDString(self, uuid):
        if uuid not in self.domains:
            raise libvirt_error(libvirt.VIR_ERR_NO_DOMAIN)
        return self.domains[uuid]


class Connection:
    """The part of :class:`~resex_libvirt.hypervisor.connection.Connection` a sweep uses."""

    uri = "qemu:///system"

    def __init__(self, conn):
        self.conn = conn

    def call(self, what, fn):
        with self.translated(what):
            return fn(self.conn)

    @contextlib.contextmanager
    def translated(self, what):
        try:
            yield
        except libvirt.libvirtError as exc:
            raise connection_mod.translate(exc, what) from exc


class Threads:
    def __init__(self):
        self.asked = []

    def read(self, names):
        self.asked.append(dict(names))
        return ({uuid: base.VcpuTimes(7, 70) for uuid in names if uuid != B},
                {B: "no QEMU pid for domain %s" % names[B]} if B in names else {})


class DomainStatsTest(unittest.TestCase):

    def sweep(self, conn, adopted=(A, B)):
        self.threads = Threads()
        return stats.DomainStats(Connection(conn), lambda: list(adopted), self.threads)

    def test_a_sweep_asks_libvirt_for_the_interface_group_only(self):
        conn = QemuConnection(Domain(A, 100), Domain(B, 200))
        reader = self.sweep(conn)
        self.assertEqual({A: 100, B: 200}, reader.cpu_times())
        self.assertEqual([(libvirt.VIR_DOMAIN_STATS_INTERFACE,
                           libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE)], conn.flags)
        self.assertEqual({A: {"net.count": 0}, B: {"net.count": 0}}, reader.sweep())

    def test_only_the_adopted_domains_are_read(self):
        stranger = Domain(STRANGER, 5)
        reader = self.sweep(QemuConnection(Domain(A, 100), stranger), adopted=(A,))
        self.assertEqual({A: 100}, reader.cpu_times())
        self.assertEqual(0, stranger.reads)
        self.assertEqual([{A: "instance-aaaa"}], self.threads.asked)

    def test_the_run_delays_are_the_sweeps_and_a_missing_one_is_said_once(self):
        reader = self.sweep(QemuConnection(Domain(A, 100), Domain(B, 200)))
        with self.assertLogs(stats.LOG, "INFO") as logs:
            reader.cpu_times()
            reader.cpu_times()
        self.assertEqual({A: base.VcpuTimes(7, 70)}, reader.vcpu_times())
        said = [line for line in logs.output if "no vCPU run delay" in line]
        self.assertEqual(1, len(said), logs.output)
        self.assertIn(B, said[0])

    def test_a_domain_stopped_during_the_sweep_is_left_out_and_the_others_read_as_before(self):
        stopped = Domain(B, 200, active=False)
        reader = self.sweep(QemuConnection(Domain(A, 100), stopped))
        self.assertEqual({A: 100}, reader.cpu_times())
        stopped.active = True
        self.assertEqual({A: 100, B: 200}, reader.cpu_times())
        self.assertEqual(2, stopped.reads)      # still per-domain CPU stats, not info()

    def test_a_driver_without_cpu_stats_gives_the_domain_info_cpu_time(self):
        reader = self.sweep(QemuConnection(Domain(A, 100, cpu_stats=False)), adopted=(A,))
        self.assertEqual({A: 101}, reader.cpu_times())

    def test_a_driver_without_bulk_stats_is_read_domain_by_domain(self):
        reader = self.sweep(QemuConnection(Domain(A, 100), Domain(B, 200), bulk=False),
                            adopted=(A, B, STRANGER))
        with self.assertLogs(stats.LOG, "INFO"):
            self.assertEqual({A: 100, B: 200}, reader.cpu_times())
        self.assertEqual({}, reader.sweep())
        self.assertEqual({}, reader.vcpu_times())
