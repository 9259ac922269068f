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

"""vCPU run delay read from the kernel's ``schedstat`` of QEMU's vCPU threads.

A proc tree laid out in a temporary directory as Linux lays it out for a
QEMU process: ``<pid>/task/<tid>/comm`` and ``<pid>/task/<tid>/schedstat``.
Checked against a real guest (libvirt 9.0, QEMU 7.2): ``vcpu.<n>.delay`` of
libvirt's bulk stats equals the second ``schedstat`` field of thread
``CPU <n>/TCG``.
"""

import os
import tempfile
import unittest

from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import vcpu_stats

#: The threads of a 2-vCPU QEMU 7.2 TCG guest: (tid, comm, schedstat).
THREADS = (
    (2693, "qemu-system-x86", "106307785 21766616 1116"),
    (2697, "qemu-system-x86", "2932390 146598 25"),
    (2698, "IO mon_iothread", "269235617 12523714 766"),
    (2699, "CPU 0/TCG", "3000949548 6142187 97"),
    (2700, "CPU 1/TCG", "5734191 8781897 19"),
)


class ProcTree:
    def __init__(self, root):
        self.proc = os.path.join(root, "proc")
        self.run = os.path.join(root, "run")
        os.makedirs(self.run)

    def qemu(self, name, pid, threads=THREADS):
        with open(os.path.join(self.run, "%s.pid" % name), "w") as f:
            f.write("%d\n" % pid)
        for tid, comm, schedstat in threads:
            task = os.path.join(self.proc, str(pid), "task", str(tid))
            os.makedirs(task)
            with open(os.path.join(task, "comm"), "w") as f:
                f.write(comm + "\n")
            with open(os.path.join(task, "schedstat"), "w") as f:
                f.write(schedstat + "\n")


class VcpuThreadsTest(unittest.TestCase):

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tree = ProcTree(tmp.name)
        self.threads = vcpu_stats.VcpuThreads(run_dir=self.tree.run, proc=self.tree.proc)

    def test_only_the_vcpu_threads_are_summed(self):
        self.tree.qemu("instance-1", 2693)
        self.assertEqual(base.VcpuTimes(6142187 + 8781897, 3000949548 + 5734191, 2),
                         self.threads.read_one("instance-1"))

    def test_kvm_threads_count_too(self):
        self.tree.qemu("kvm", 10, ((10, "qemu-system-x86", "1 1 1"), (11, "CPU 0/KVM", "50 7 3")))
        self.assertEqual(base.VcpuTimes(7, 50, 1), self.threads.read_one("kvm"))

    def test_each_domain_says_why_it_has_no_delay(self):
        self.tree.qemu("a", 2693)
        self.tree.qemu("unnamed", 20, ((20, "qemu-system-x86", "1 1 1"),))
        got, why = self.threads.read({"u-a": "a", "u-none": "never-started",
                                      "u-unnamed": "unnamed"})
        self.assertEqual(["u-a"], list(got))
        self.assertIn("no QEMU pid for domain never-started", why["u-none"])
        self.assertIn("no thread named", why["u-unnamed"])

    def test_a_stale_pid_file_is_no_evidence(self):
        with open(os.path.join(self.tree.run, "gone.pid"), "w") as f:
            f.write("999999\n")
        got, why = self.threads.read({"u": "gone"})
        self.assertEqual({}, got)
        self.assertIn("999999", why["u"])

    def test_a_thread_that_ends_meanwhile_is_skipped(self):
        self.tree.qemu("a", 2693)
        os.remove(os.path.join(self.tree.proc, "2693", "task", "2700", "schedstat"))
        self.assertEqual(base.VcpuTimes(6142187, 3000949548, 1), self.threads.read_one("a"))

    def test_a_malformed_schedstat_is_refused(self):
        for text in ("", "12", "a b c", "-1 5 2"):
            with self.assertRaises(ValueError):
                vcpu_stats.parse_schedstat(text)
        self.assertEqual((5, 6), vcpu_stats.parse_schedstat("5 6 7\n"))

    def test_a_hypervisor_without_the_stats_gives_none(self):
        class Bare(base.Hypervisor):
            vms = cpu_times = set_knobs = get_knobs = restore_knobs = None
        self.assertEqual({}, Bare().vcpu_times())
