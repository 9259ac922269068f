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

"""``resex-fabric show``: the no-HCA message, and rates from a temporary sysfs tree."""

import contextlib
import io
import json
import os
import shutil
import tempfile
import unittest

from resex_libvirt.fabric import ib_sysfs
from resex_libvirt.fabric import resex_fabric
from tests.unit.fabric import sysfs_tree


def run_main(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = resex_fabric.main(argv)
    return code, out.getvalue(), err.getvalue()


class TestNoHCA(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.empty = tempfile.mkdtemp(prefix="resex-nohca-")
        self.addCleanup(shutil.rmtree, self.empty, True)

    def test_host_without_infiniband_says_so_and_exits_0(self):
        code, out, _ = run_main(["show", "--sysfs-root", self.empty, "--seconds", "0"])
        self.assertEqual(0, code)
        self.assertIn("no InfiniBand/RDMA device on this host", out)

    def test_empty_infiniband_class_is_no_hca_too_in_json(self):
        os.makedirs(os.path.join(self.empty, "class", "infiniband"))
        code, out, _ = run_main(["show", "--sysfs-root", self.empty, "--json"])
        self.assertEqual(0, code)
        doc = json.loads(out)
        self.assertFalse(doc["hca"])
        self.assertEqual([], doc["endpoints"])

    def test_vf_source_without_pf_netdev_or_hca_says_no_hca(self):
        code, out, _ = run_main(["show", "--source", "vf_netlink", "--pf", "ib0",
                                 "--sysfs-root", self.empty, "--seconds", "0"])
        self.assertEqual(0, code)
        self.assertIn("no netdev ib0", out)

    def test_vf_source_needs_a_pf(self):
        code, _, err = run_main(["show", "--source", "vf_netlink", "--sysfs-root", self.empty])
        self.assertEqual(2, code)
        self.assertIn("--pf", err)

    def test_negative_window_is_refused(self):
        with contextlib.redirect_stderr(io.StringIO()):
            self.assertRaises(SystemExit, resex_fabric.main, ["show", "--seconds", "-1"])


class TestShowIBSysfs(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.tree = sysfs_tree.SysfsTree()
        self.addCleanup(self.tree.cleanup)
        self.tree.add_ib_device("mlx5_0", "0000:81:00.0", ports=(1, 2),
                                rate="40 Gb/sec (4X QDR)")
        self.tree.add_ib_device("mlx5_1", "0000:82:00.0")
        for name in ("xmit_data", "rcv_data", "xmit_packets", "rcv_packets"):
            self.tree.set_counters("mlx5_1", 1, **{name: ib_sysfs.NO_PMA})
        self.tree.set_counters("mlx5_0", 2, xmit_data=0xFFFFFFFF - 256)

    def traffic(self, seconds):
        self.assertEqual(2.0, seconds)
        self.tree.set_counters("mlx5_0", 1, xmit_data=512_000, rcv_data=1024,
                               xmit_packets=500)
        self.tree.set_counters("mlx5_0", 2, xmit_data=0xFFFFFFFF)

    def show(self, *extra):
        args = resex_fabric._parser().parse_args(
            ["show", "--sysfs-root", self.tree.root, "--seconds", "2",
             "--owner", "mlx5_0:1=vm-a", "--owner", "mlx5_0:2=vm-b", "--mtu", "2048"]
            + list(extra))
        times = iter([100.0, 102.0])
        out, err = io.StringIO(), io.StringIO()
        code = resex_fabric.show(args, out=out, err=err, sleep=self.traffic,
                                 clock=lambda: next(times))
        return code, out.getvalue()

    def test_json_gives_per_port_rates_in_bytes_and_mtus(self):
        code, out = self.show("--json")
        self.assertEqual(0, code)
        doc = json.loads(out)
        self.assertEqual({"name": "mlx5_0:1", "capacity_bytes_per_s": 4e9, "mtu": 2048},
                         doc["link"])
        rows = {r["endpoint"]: r for r in doc["endpoints"]}
        self.assertEqual({"mlx5_0:1", "mlx5_0:2", "mlx5_1:1"}, set(rows))
        port = rows["mlx5_0:1"]
        self.assertEqual("vm-a", port["vm_name"])
        self.assertEqual(512_000 * 4 / 2, port["tx_bytes_per_s"])
        self.assertEqual(1024 * 4 / 2, port["rx_bytes_per_s"])
        self.assertEqual(250, port["tx_packets_per_s"])
        self.assertEqual(1_024_000 // 2048, port["tx_mtus_per_s"])

    def test_saturated_and_unreadable_ports_are_flagged_not_invented(self):
        _, out = self.show("--json")
        rows = {r["endpoint"]: r for r in json.loads(out)["endpoints"]}
        self.assertEqual("saturated", rows["mlx5_0:2"]["state"])
        self.assertEqual(256 * 4 / 2, rows["mlx5_0:2"]["tx_bytes_per_s"])
        self.assertEqual("unreadable", rows["mlx5_1:1"]["state"])
        self.assertIsNone(rows["mlx5_1:1"]["tx_bytes_per_s"])
        self.assertIsNone(rows["mlx5_1:1"]["tx_mtus_per_s"])

    def test_text_output_names_link_vms_and_explains_saturation(self):
        code, out = self.show()
        self.assertEqual(0, code)
        self.assertIn("link mlx5_0:1: 32.00 Gb/s data, MTU 2048 bytes", out)
        self.assertIn("vm-a", out)
        self.assertIn("1.02 MB/s", out)
        self.assertIn("lower bound", out)
