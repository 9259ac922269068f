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

"""The static-cap frontier for the mean and the p99 SLA."""

import contextlib
import io
import unittest

from resex_libvirt.sim import scenario as scenario_mod
from resex_research import frontier
from resex_research import resex_sim

PAPER = "paper_64k_vs_2m"


def paper(duration=1.0):
    return scenario_mod.load(PAPER).with_duration(duration)


class FrontierTest(unittest.TestCase):

    def test_a_p99_sla_is_the_vms_base_p99_alone_with_its_threshold(self):
        sc = frontier.with_statistic(paper(), "p99")
        sla = sc.vm("vm64k").sla
        self.assertEqual("p99", sla.latency_statistic)
        # Above the mean base (209 us): compute times vary from request to request.
        self.assertGreater(sla.latency_sla_us, 209.0)
        self.assertEqual(10.0, sla.interference_threshold_pct)
        self.assertEqual(paper().vm("vm64k").sla,
                         frontier.with_statistic(paper(), "mean").vm("vm64k").sla)

    def test_the_cpu_lever_reaches_the_mean_sla_but_not_the_p99(self):
        caps = (5.0, 20.0, 100.0)
        mean = frontier.sweep(paper(), "mean", caps=caps, bisect=0)
        self.assertEqual([True, True, False], [p["meets"] for p in mean])
        # A 2 MB transfer already on the wire delays the 64 KB server's
        # requests that meet it whatever the cap: its tail never comes back.
        tail = frontier.sweep(frontier.with_statistic(paper(), "p99"), "p99", caps=caps,
                              bisect=0)
        self.assertEqual([False, False, False], [p["meets"] for p in tail])
        self.assertGreater(tail[0]["vs_sla"]["vm64k"], 1.2)
        # The capped VM's throughput grows with its cap (below 20 %: one 2 MB
        # transfer per 10 ms scheduling period, whatever the cap).
        self.assertLessEqual(mean[0]["capped_mb_s"], mean[1]["capped_mb_s"])
        self.assertLess(mean[1]["capped_mb_s"], mean[2]["capped_mb_s"])

    def test_without_interferers_the_larger_sensitive_vms_are_swept(self):
        sc = scenario_mod.load("mix_two_sensitive_sizes")
        self.assertEqual(["vm1m_sla"], frontier.capped_vms(sc))
        self.assertEqual(["vm2m"], frontier.capped_vms(paper()))

    def test_the_command_says_where_the_sla_is_unreachable(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = resex_sim.main(["frontier", PAPER, "--statistic", "mean,p99", "--duration", "0.5",
                                 "--policies", "latency_target"])
        self.assertEqual(0, rc)
        lines = [line for line in out.getvalue().splitlines() if line.startswith(PAPER)]
        self.assertEqual(2, len(lines))
        self.assertNotIn("unreachable", lines[0])
        self.assertIn("unreachable", lines[1])

    def test_an_unknown_statistic_is_refused(self):
        with self.assertRaises(SystemExit):
            resex_sim.main(["frontier", PAPER, "--statistic", "p95"])
