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

"""Closed loop: the market controlling the simulated testbed (paper Section VII).

Each test runs the packaged scenarios unchanged -- the calibrated, frozen
model, the paper's interval and epoch -- under the policies' default
parameters.
"""

import unittest

from resex_libvirt.sim import runner
from resex_libvirt.sim import scenario

DURATION_S = 5.0


def run(name, policy):
    return runner.run(scenario.load(name).with_duration(DURATION_S), policy)


class InterferenceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.base = run("paper_64k_alone", "none").vm("vm64k").latency_mean_us
        cls.interfered = run("paper_64k_vs_2m", "none")
        cls.free_market = run("paper_64k_vs_2m", "free_market")
        cls.io_shares = run("paper_64k_vs_2m", "io_shares")

    def test_the_2m_interferer_hurts_the_64k_vm_without_control(self):
        self.assertGreater(self.interfered.vm("vm64k").latency_mean_us, 1.2 * self.base)

    def test_io_shares_brings_the_64k_vm_within_10_percent_of_its_base(self):
        """Fig. 7: "near base case latencies"."""
        self.assertLessEqual(self.io_shares.vm("vm64k").latency_mean_us, 1.10 * self.base)

    def test_io_shares_does_it_by_capping_the_interferer(self):
        intf = self.io_shares.vm("vm2m")
        self.assertLess(intf.cap_mean_pct, 50.0)
        self.assertEqual(100.0, self.io_shares.vm("vm64k").cap_min_pct)
        self.assertTrue(any(e["vms"]["vm2m"]["rate"] > 1.0 or
                            e["vms"]["vm2m"]["cap_min_pct"] < 100.0
                            for e in self.io_shares.epochs))

    def test_free_market_beats_the_uncontrolled_case(self):
        """Fig. 5: lower latency than interfered, by throttling the 2 MB VM late in each epoch."""
        fm = self.free_market.vm("vm64k").latency_mean_us
        self.assertLess(fm, 0.95 * self.interfered.vm("vm64k").latency_mean_us)
        self.assertLess(self.free_market.vm("vm2m").cap_min_pct, 10.0)

    def test_io_shares_beats_free_market(self):
        """Fig. 9: IOShares keeps the latency closer to the base than FreeMarket."""
        self.assertLess(self.io_shares.vm("vm64k").latency_mean_us,
                        self.free_market.vm("vm64k").latency_mean_us)

    def test_free_market_replenishes_every_epoch(self):
        """Fig. 6: the interferer's Resos run low within an epoch, and come back."""
        bal = self.free_market.series["balance"]["vm2m"]
        per_epoch = self.free_market.intervals_per_epoch // self.free_market.series_every
        self.assertLess(min(bal[per_epoch:2 * per_epoch]), 0.10 * max(bal[per_epoch:]))
        self.assertGreater(bal[per_epoch], 0.8 * max(bal[per_epoch:]))


class NoInterferenceTest(unittest.TestCase):
    """Fig. 8: ResEx backs off when there is nothing to tax."""

    def assertNeverCappedAfterFirstEpoch(self, res):
        for epoch in res.epochs[1:]:
            for name, rec in epoch["vms"].items():
                with self.subTest(policy=res.policy, epoch=epoch["epoch"], vm=name):
                    self.assertGreaterEqual(rec["cap_min_pct"], 100.0 - 1e-9)

    def test_64k_against_64k_is_never_taxed(self):
        for policy in ("free_market", "io_shares"):
            self.assertNeverCappedAfterFirstEpoch(run("paper_64k_vs_64k", policy))

    def test_2m_at_10_requests_per_epoch_is_never_taxed(self):
        for policy in ("free_market", "io_shares"):
            res = run("paper_64k_vs_2m_10rpe", policy)
            self.assertNeverCappedAfterFirstEpoch(res)
            self.assertLess(res.vm("vm64k").latency_mean_us, 1.05 * 209.0)
