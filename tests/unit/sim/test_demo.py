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

"""The closing report of an agent run and the demo's uncontrolled contrast."""

import unittest

from resex_libvirt.sim import demo
from resex_libvirt.sim import host as host_mod
from resex_libvirt.sim import scenario as scenario_mod

ROW = {"vm": "vm64k", "sensitive": True, "cap_mean_pct": 87.5, "cap_min_pct": None,
       "cpu_mean_pct": 50.0, "tx_mb_per_s": 1.5, "latency_mean_us": 212.4,
       "interference_mean_pct": None}


def uncontrolled_host(duration_s):
    """The paper's testbed run for ``duration_s`` with nobody touching a knob."""
    scenario = scenario_mod.load("paper_64k_vs_2m").with_duration(duration_s)
    sim = host_mod.SimHost(scenario.with_realtime(0.0))
    sim.clock().sleep_until(duration_s)
    return sim


class ContrastTest(unittest.TestCase):

    def test_the_contrast_replays_the_same_scenario_for_the_same_time(self):
        # A run nobody controlled is its own uncontrolled contrast, to the digit.
        text = demo.compare_uncontrolled(uncontrolled_host(1.0))
        lines = text.splitlines()
        self.assertEqual("Latency-sensitive VMs, with the agent vs the same run uncontrolled:",
                         lines[0])
        self.assertEqual(1, len(lines) - 1, text)   # only vm64k has a latency SLA
        line = lines[1]
        self.assertTrue(line.startswith("  vm64k: mean "), line)
        mean, mean_base = line.split("mean ")[1].split(" us (uncontrolled ")[:2]
        self.assertEqual(mean, mean_base.split(" us)")[0])
        self.assertIn("SLA base 209 us", line)


class ClosingReportTest(unittest.TestCase):

    def test_the_agent_table_alone_when_no_simulated_host(self):
        text = demo.closing_report([ROW], 3, "io_shares")
        lines = text.splitlines()
        self.assertEqual("What the agent saw and did (3 epochs, policy io_shares):", lines[0])
        self.assertEqual(["vm64k", "yes", "87.5", "-", "50.0", "1.5", "212", "-"],
                         lines[2].split())
        self.assertNotIn("uncontrolled", text)

    def test_on_the_simulated_host_it_ends_with_the_contrast(self):
        text = demo.closing_report([ROW], 1, "none", sim=uncontrolled_host(1.0))
        self.assertIn("Simulated run of paper_64k_vs_2m", text)
        self.assertTrue(text.splitlines()[-1].startswith("  vm64k: mean "), text)
