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

"""CPU pressure (PSI) of a VM's cgroup: real file layouts in a temporary tree, and this host."""

import os
import tempfile
import unittest

from resex_libvirt.hypervisor import psi

PRESSURE = ("some avg10=12.50 avg60=3.00 avg300=0.75 total=2500000\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
GROUP = "/machine.slice/machine-qemu\\x2d1\\x2dvm1.scope/libvirt/emulator"


class ParseTest(unittest.TestCase):

    def test_some_and_full(self):
        p = psi.parse(PRESSURE)
        self.assertEqual((12.5, 3.0, 0.75, 2500000), p[:4])
        self.assertEqual(0, p.full_total_us)

    def test_some_only(self):
        self.assertEqual(7, psi.parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n")
                         .some_total_us)

    def test_malformed_text_is_an_error(self):
        for text in ("", "full avg10=0 total=1", "some avg10=x avg60=0 avg300=0 total=1",
                     "some avg10"):
            with self.assertRaises(ValueError):
                psi.parse(text)

    def test_stall_share_from_two_totals(self):
        a = psi.parse(PRESSURE)
        b = a._replace(some_total_us=a.some_total_us + 250000)
        self.assertAlmostEqual(25.0, psi.stall_pct(a, b, 1.0))
        self.assertEqual(0.0, psi.stall_pct(b, a, 1.0))     # counter went back
        self.assertEqual(0.0, psi.stall_pct(a, b, 0.0))


class Tree:
    """A /proc and a cgroup v2 mount laid out as on a libvirt host, in a temporary directory."""

    def __init__(self, tmp, hybrid=False, group=GROUP, controllers="cpuset cpu io memory pids",
                 pressure=PRESSURE):
        self.proc = os.path.join(tmp, "proc")
        self.mount = os.path.join(tmp, "sys/fs/cgroup" + ("/unified" if hybrid else ""))
        os.makedirs(os.path.join(self.proc, "self"))
        os.makedirs(os.path.join(self.proc, "4242"))
        os.makedirs(self.mount, exist_ok=True)
        mounts = ["proc /proc proc rw 0 0"]
        if hybrid:
            mounts.append("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0")
        mounts.append("cgroup2 %s cgroup2 rw 0 0" % self.mount)
        self.write(os.path.join(self.proc, "self/mounts"), "\n".join(mounts) + "\n")
        self.write(os.path.join(self.mount, "cgroup.controllers"), controllers + "\n")
        lines = ["1:cpu:/machine/qemu-1-vm1.libvirt-qemu"] if hybrid else []
        lines.append("0::%s" % group)
        self.write(os.path.join(self.proc, "4242/cgroup"), "\n".join(lines) + "\n")
        if pressure is not None and group != "/":
            path = os.path.join(self.mount, group.lstrip("/"))
            os.makedirs(path)
            self.write(os.path.join(path, "cpu.pressure"), pressure)

    @staticmethod
    def write(path, text):
        with open(path, "w") as f:
            f.write(text)

    def reader(self):
        return psi.PressureReader(proc=self.proc)


class PressureReaderTest(unittest.TestCase):

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)

    def test_a_vm_in_its_own_group_on_a_cgroup_v2_host(self):
        tree = Tree(self._tmp.name)
        p = tree.reader().read(4242)
        self.assertEqual(2500000, p.some_total_us)
        self.assertEqual(tree.mount, tree.reader().mount())

    def test_a_hybrid_host_with_the_vm_in_the_v2_root_says_so(self):
        tree = Tree(self._tmp.name, hybrid=True, group="/", controllers="")
        with self.assertRaises(psi.PressureUnavailable) as ctx:
            tree.reader().read(4242)
        self.assertIn("root of the cgroup v2 hierarchy", str(ctx.exception))
        self.assertIn("cpu controller is on cgroup v1", str(ctx.exception))

    def test_a_hybrid_host_with_a_v2_group_of_its_own_is_read(self):
        tree = Tree(self._tmp.name, hybrid=True, controllers="")
        self.assertEqual(12.5, tree.reader().read(4242).some_avg10)

    def test_a_kernel_without_psi_says_so(self):
        tree = Tree(self._tmp.name, pressure=None)
        os.makedirs(os.path.join(tree.mount, GROUP.lstrip("/")))
        with self.assertRaises(psi.PressureUnavailable) as ctx:
            tree.reader().read(4242)
        self.assertIn("without PSI", str(ctx.exception))

    def test_no_cgroup_v2_mount_says_so(self):
        tree = Tree(self._tmp.name)
        tree.write(os.path.join(tree.proc, "self/mounts"),
                   "cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n")
        with self.assertRaises(psi.PressureUnavailable) as ctx:
            tree.reader().read(4242)
        self.assertIn("cgroup v1 only", str(ctx.exception))

    def test_a_vanished_process_says_so(self):
        tree = Tree(self._tmp.name)
        with self.assertRaises(psi.PressureUnavailable):
            tree.reader().read(999999)

    def test_a_corrupt_file_says_so(self):
        tree = Tree(self._tmp.name, pressure="some nonsense\n")
        with self.assertRaises(psi.PressureUnavailable):
            tree.reader().read(4242)


class ThisHostTest(unittest.TestCase):
    """The real files of the machine the tests run on: read, or a plain reason why not."""

    def test_this_process_pressure_or_a_reason(self):
        reader = psi.PressureReader()
        try:
            p = reader.read(os.getpid())
        except psi.PressureUnavailable as exc:
            self.assertTrue(str(exc))
        else:
            self.assertGreaterEqual(p.some_total_us, 0)

    def test_the_host_wide_file_parses_where_the_kernel_has_psi(self):
        if not os.path.exists("/proc/pressure/cpu"):
            self.skipTest("this kernel has no PSI")
        with open("/proc/pressure/cpu") as f:
            p = psi.parse(f.read())
        self.assertGreaterEqual(p.some_total_us, 0)
