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

"""The verbs lab's readers, module resolution and figures, without services.

The console lines are verbatim output of the lab's guests (the verbs
BenchEx's ``--print-samples``, the image's perftest adapters); the
modules are temporary files carrying ``.modinfo``-style strings.
"""

import os
import shutil
import subprocess
import tempfile
import unittest

from benchex import wire
from tests.lab import rdma
from tests.lab import verbs
from tests.lab import verbs_experiment

BENCHEX_LINE = ("resex-lat tool=benchex verb=send bytes=65536 n=5 "
                "samples=16308,24310,28312,20312,20314")
PERFTEST_LINE = ("resex-lat tool=perftest bytes=4096 n=100 min=2058.69 max=27995.98 "
                 "typical=12296.00 mean=12631.97 std=4754.30 p99=27995.98 p999=27995.98")
PERFTEST_UNCALIBRATED = ("resex-lat tool=perftest bytes=65536 n=200 min=inf max=inf "
                         "typical=inf mean=inf std=-nan p99=inf p999=inf")
BW_LINE = "resex-bw bytes=65536 iters=1203 peak=0.00 avg_MBps=2.76 mpps=0.000044"


#: ib_send_lat's result row, as the adapter reads it.
PERFTEST_ROW = (" 2       1000          5.10           20.00        6.00             6.50"
                "        1.20            9.00       15.00\n")


@unittest.skipUnless(shutil.which("busybox"), "busybox runs the guests' adapter")
class PerftestAdapterTest(unittest.TestCase):
    """The image's ``resex-perftest-report`` under busybox; the intake's parser reads it."""

    def report(self, *args):
        with tempfile.TemporaryDirectory() as tmp:
            script, chan = os.path.join(tmp, "adapter"), os.path.join(tmp, "chan")
            with open(script, "wb") as f:
                f.write(rdma.PERFTEST_REPORT)
            console = subprocess.run(["busybox", "sh", script, chan] + list(args),
                                     input=PERFTEST_ROW, capture_output=True, text=True,
                                     check=True, timeout=30).stdout
            with open(chan, "rb") as f:
                line = f.read()
        self.assertTrue(console.startswith("resex-lat tool=perftest bytes=2 n=1000"), console)
        return wire.parse(line, wire.SOURCE_CHANNEL)

    def test_a_run_is_one_report_naming_the_peer_it_measured(self):
        got = self.report("10.229.0.250")
        self.assertEqual((1000, 6.5, 1.2, 9.0), (got.n, got.mean_us, got.std_us, got.p99_us))
        self.assertEqual("10.229.0.250", str(got.peer))

    def test_without_a_peer_the_report_is_version_one(self):
        got = self.report("")
        self.assertIsNone(got.peer)
        self.assertEqual(1000, got.n)


class ConsoleLinesTest(unittest.TestCase):

    def test_a_benchex_line_gives_every_latency(self):
        rec = verbs.parse_lat(BENCHEX_LINE)
        self.assertEqual("benchex", rec["tool"])
        self.assertEqual([16308.0, 24310.0, 28312.0, 20312.0, 20314.0], rec["samples"])

    def test_a_perftest_line_gives_its_runs_summary(self):
        rec = verbs.parse_lat(PERFTEST_LINE)
        self.assertEqual((100.0, 12631.97, 27995.98), (rec["n"], rec["mean"], rec["p99"]))

    def test_a_perftest_run_of_an_uncalibrated_guest_is_dropped(self):
        self.assertIsNone(verbs.parse_lat(PERFTEST_UNCALIBRATED))

    def test_other_console_lines_are_not_latencies(self):
        for line in ("resex: rxe0 up", "resex-lat tool=benchex samples=a,b", BW_LINE, ""):
            self.assertIsNone(verbs.parse_lat(line), line)

    def test_a_bursts_goodput_is_its_completed_writes_over_its_duration(self):
        rec = verbs.parse_bw(BW_LINE, 5.0)
        self.assertEqual((65536, 1203), (rec["bytes"], rec["iters"]))
        self.assertAlmostEqual(8.0 * 65536 * 1203 / 5.0 / 1e6, rec["mbit_s"])
        # perftest's own figure, kept beside it (its MB is 2^20 bytes)
        self.assertAlmostEqual(2.76 * 8 * 1.048576, rec["perftest_mbit_s"])
        self.assertIsNone(verbs.parse_bw(BENCHEX_LINE, 5.0))

    def test_a_console_tail_keeps_only_complete_lines(self):
        with tempfile.NamedTemporaryFile("wb", delete=False) as f:
            f.write(b"resex: a\nresex-lat tool=benchex n=1 samples=5")
        self.addCleanup(os.unlink, f.name)
        tail = verbs.ConsoleTail(f.name)
        tail.poll()
        self.assertEqual(["resex: a"], [line for _t, line in tail.lines])
        with open(f.name, "ab") as f2:
            f2.write(b"00\n")
        tail.poll()
        self.assertEqual(500.0, verbs.parse_lat(tail.lines[-1][1])["samples"][0])


class SlaRestoredTest(unittest.TestCase):

    def test_three_windows_in_a_row_within_the_threshold(self):
        series = [(0.5, 10, 900.0, 0), (1.5, 10, 5000.0, 0), (2.5, 10, 1050.0, 0),
                  (3.5, 10, 4000.0, 0), (4.5, 10, 1000.0, 0), (5.5, 10, 1090.0, 0),
                  (6.5, 10, 1100.0, 0)]
        self.assertEqual(4.5, verbs.sla_restored(series, 1000.0, 10.0))

    def test_never_restored_is_none(self):
        self.assertIsNone(verbs.sla_restored([(0, 1, 5000.0, 0)] * 5, 1000.0, 10.0))


class ModuleClosureTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp()
        self.addCleanup(__import__("shutil").rmtree, self.dir)
        for name, deps in (("rdma_rxe", "ib_core,ip6_udp_tunnel,udp_tunnel,ib_uverbs"),
                           ("ib_uverbs", "ib_core"), ("ib_core", ""),
                           ("udp_tunnel", ""), ("ip6_udp_tunnel", "")):
            sub = os.path.join(self.dir, "kernel", "drivers", name)
            os.makedirs(sub)
            with open(os.path.join(sub, name.replace("_", "-") + ".ko"), "wb") as f:
                f.write(b"\x7fELF\0junk\0license=GPL\0depends=%s\0name=%s\0"
                        % (deps.encode(), name.encode()))

    def test_dependencies_come_first_each_once(self):
        order = [os.path.basename(p)[:-3].replace("-", "_")
                 for p in rdma.module_closure(self.dir, ("rdma_rxe", "ib_core"))]
        self.assertEqual(5, len(order))
        self.assertEqual("rdma_rxe", order[-1])
        self.assertLess(order.index("ib_core"), order.index("ib_uverbs"))

    def test_a_wanted_module_not_found_is_taken_as_built_in(self):
        self.assertEqual(1, len(rdma.module_closure(self.dir, ("configfs", "ib_core"))))

    def test_a_missing_dependency_is_an_error(self):
        with open(os.path.join(self.dir, "kernel", "x.ko"), "wb") as f:
            f.write(b"\0depends=nowhere\0")
        with self.assertRaises(FileNotFoundError):
            rdma.module_closure(self.dir, ("x",))


class PlanTest(unittest.TestCase):

    def test_each_round_runs_base_interfered_policies_and_each_static_cap_per_period(self):
        plan = verbs_experiment.configs(["io_shares", "latency_target"], [20.0, 5.0],
                                        [10000, 100000])
        self.assertEqual(["base", "interfered", "io_shares", "latency_target"],
                         [name for name, _k, _a in plan[:4]])
        self.assertEqual([(20.0, 10000), (5.0, 10000), (20.0, 100000), (5.0, 100000)],
                         [a for _n, kind, a in plan if kind == "static"])

    def test_the_request_rate_offers_the_asked_share_of_the_bottleneck(self):
        self.assertEqual(19.07, verbs_experiment.request_rate(65536, 40.0, 0.25))
        self.assertEqual(0.6, verbs_experiment.request_rate(2097152, 40.0, 0.25))
        self.assertEqual(0.5, verbs_experiment.request_rate(2097152, 10.0, 0.25))


if __name__ == "__main__":
    unittest.main()
