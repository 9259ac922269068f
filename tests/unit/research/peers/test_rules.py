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

"""The peers' rules, cadences and floors, on a market stepped by hand."""

import unittest

from resex_libvirt.market import market as market_mod
from resex_libvirt.market import records
from resex_libvirt import sla
from resex_research import peers
from resex_research.peers import crane
from resex_research.peers import ewma_step
from resex_research.peers import koordinator

SENSITIVE = sla.SLA(latency_sla_us=200.0, interference_threshold_pct=10.0)
#: Intervals per epoch of these markets: the peers' periods are in epochs.
IPE = 10


def make_market(policy_obj, vms):
    params = market_mod.MarketParams(interval_s=0.1, intervals_per_epoch=IPE, pcpus=len(vms))
    m = market_mod.Market(params, policy_obj)
    for name, vm_sla in vms:
        m.add(records.VMSpec(name, sla=vm_sla))
    return m


def window(mean):
    return records.LatencyWindow(count=20, mean_us=mean, std_us=1.0, p99_us=mean + 3.0)


def run(m, cpu, intervals, windows=None):
    """Step ``m`` ``intervals`` times with each VM at ``cpu[vm]`` percent; the last decisions."""
    d = None
    for _ in range(intervals):
        d = m.step({vm: records.Sample(vm, 0, pct, tx_mtus=10) for vm, pct in cpu.items()},
                   windows)
    return d


class PeerRegistryTest(unittest.TestCase):

    def test_the_peers_are_loaded_by_name_but_are_not_production_policies(self):
        from resex_libvirt.market import policy
        for name in peers.NAMES:
            self.assertEqual(name, peers.load(name).name)
            self.assertNotIn(name, policy.names())
            self.assertIn(name, peers.names())

    def test_an_installed_policy_is_loaded_through_the_same_door(self):
        self.assertEqual("io_shares", peers.load("io_shares").name)


class KoordinatorSuppressTest(unittest.TestCase):

    def market(self, **kwargs):
        return make_market(koordinator.KoordinatorSuppress(**kwargs),
                           [("ls", SENSITIVE), ("be", sla.SLA())])

    def test_be_gets_capacity_times_threshold_minus_the_ls_usage(self):
        # 2 VMs of one vCPU: capacity 200%; 65% of it is 130, the LS VM uses 100.
        d = run(self.market(), {"ls": 100.0, "be": 100.0}, IPE)
        self.assertAlmostEqual(30.0, d["be"].cap_pct)
        self.assertEqual(100.0, d["ls"].cap_pct)

    def test_it_acts_once_a_second_and_not_before(self):
        m = self.market()
        d = run(m, {"ls": 100.0, "be": 100.0}, IPE - 1)
        self.assertEqual(100.0, d["be"].cap_pct)
        d = run(m, {"ls": 100.0, "be": 100.0}, 1)
        self.assertAlmostEqual(30.0, d["be"].cap_pct)

    def test_the_quota_never_goes_below_two_percent_of_a_cpu(self):
        d = run(self.market(threshold_pct=40.0), {"ls": 100.0, "be": 100.0}, IPE)
        self.assertAlmostEqual(koordinator.BE_MIN_QUOTA_PCT, d["be"].cap_pct)

    def test_the_min_percent_holds_when_set(self):
        d = run(self.market(threshold_pct=40.0, min_pct=10.0), {"ls": 100.0, "be": 100.0}, IPE)
        self.assertAlmostEqual(20.0, d["be"].cap_pct)

    def test_it_scales_up_by_at_most_ten_percent_of_the_capacity_a_run(self):
        m = self.market()
        run(m, {"ls": 100.0, "be": 100.0}, IPE)
        d = run(m, {"ls": 0.0, "be": 30.0}, IPE)
        self.assertAlmostEqual(50.0, d["be"].cap_pct)

    def test_a_change_under_one_percent_of_the_capacity_is_skipped(self):
        m = self.market()
        run(m, {"ls": 100.0, "be": 100.0}, IPE)
        d = run(m, {"ls": 99.0, "be": 30.0}, IPE)
        self.assertAlmostEqual(30.0, d["be"].cap_pct)

    def test_latency_is_never_read(self):
        m = self.market()
        d = run(m, {"ls": 10.0, "be": 100.0}, 3 * IPE, {"ls": window(2000.0)})
        self.assertEqual(100.0, d["be"].cap_pct)

    def test_the_quota_is_split_equally_among_the_best_effort_vms(self):
        m = make_market(koordinator.KoordinatorSuppress(),
                        [("ls", SENSITIVE), ("a", sla.SLA()), ("b", sla.SLA())])
        # capacity 300: 195 - 100 = 95 for the two.
        d = run(m, {"ls": 100.0, "a": 100.0, "b": 100.0}, IPE)
        self.assertAlmostEqual(47.5, d["a"].cap_pct)
        self.assertAlmostEqual(47.5, d["b"].cap_pct)


class CraneThrottleTest(unittest.TestCase):

    def market(self, vms=None, **kwargs):
        return make_market(crane.CraneThrottle(**kwargs),
                           vms or [("ls", SENSITIVE), ("be", sla.SLA())])

    def test_two_collections_of_ten_seconds_over_the_watermark_trigger_it(self):
        m = self.market()
        busy = {"ls": 100.0, "be": 100.0}          # 100% of the node: over 65%
        d = run(m, busy, 20 * IPE - 1)
        self.assertEqual(100.0, d["be"].cap_pct)
        d = run(m, busy, 1)
        self.assertAlmostEqual(90.0, d["be"].cap_pct)

    def test_each_trigger_steps_the_quota_down_by_ten_percent(self):
        m = self.market(period=1.0)
        d = run(m, {"ls": 100.0, "be": 100.0}, 2 * IPE)
        self.assertAlmostEqual(90.0, d["be"].cap_pct)
        d = run(m, {"ls": 100.0, "be": 90.0}, IPE)
        self.assertAlmostEqual(81.0, d["be"].cap_pct)

    def test_the_quota_never_goes_below_min_ratio_of_the_limit(self):
        m = self.market(period=1.0)
        d = run(m, {"ls": 100.0, "be": 100.0}, 60 * IPE)
        self.assertAlmostEqual(10.0, d["be"].cap_pct)

    def test_under_the_watermark_it_steps_back_up_after_the_cool_down(self):
        m = self.market(period=1.0, cool_down=5.0)
        run(m, {"ls": 100.0, "be": 100.0}, 2 * IPE)          # triggered at epoch 2
        quiet = {"ls": 10.0, "be": 10.0}
        d = run(m, quiet, 4 * IPE)                            # restored, cooling down
        self.assertAlmostEqual(90.0, d["be"].cap_pct)
        d = run(m, quiet, IPE)                                # epoch 7: 5 since the trigger
        self.assertAlmostEqual(99.0, d["be"].cap_pct)
        d = run(m, quiet, IPE)
        self.assertEqual(100.0, d["be"].cap_pct)

    def test_it_throttles_the_biggest_user_first_and_stops_when_the_gap_is_covered(self):
        m = self.market([("ls", SENSITIVE), ("big", sla.SLA()), ("small", sla.SLA())],
                        period=1.0, watermark_pct=60.0)
        # 180 + ... of 300: the gap to 60% (180) is 10; the big one releases 10.
        d = run(m, {"ls": 40.0, "big": 100.0, "small": 50.0}, 2 * IPE)
        self.assertAlmostEqual(90.0, d["big"].cap_pct)
        self.assertEqual(100.0, d["small"].cap_pct)

    def test_latency_sensitive_vms_are_never_throttled(self):
        m = self.market(period=1.0)
        d = run(m, {"ls": 100.0, "be": 100.0}, 10 * IPE)
        self.assertEqual(100.0, d["ls"].cap_pct)


class EWMAStepTest(unittest.TestCase):

    def market(self, **kwargs):
        return make_market(ewma_step.EWMAStep(**kwargs), [("ls", SENSITIVE), ("be", sla.SLA())])

    def test_the_average_weighs_a_reading_by_two_over_age_plus_one(self):
        p = ewma_step.EWMAStep(age=10.0)
        p.observe({"ls": 100.0})
        self.assertEqual(100.0, p.ewma["ls"])
        p.observe({"ls": 210.0})
        self.assertAlmostEqual(100.0 + 2.0 / 11.0 * 110.0, p.ewma["ls"])

    def test_over_the_sla_it_steps_the_others_down_once_a_period(self):
        m = self.market()
        over = {"ls": window(300.0)}                      # bound: 220 us
        d = run(m, {"ls": 50.0, "be": 100.0}, IPE - 1, over)
        self.assertEqual(100.0, d["be"].cap_pct)
        d = run(m, {"ls": 50.0, "be": 100.0}, 1, over)
        self.assertAlmostEqual(90.0, d["be"].cap_pct)
        d = run(m, {"ls": 50.0, "be": 90.0}, IPE, over)
        self.assertAlmostEqual(81.0, d["be"].cap_pct)

    def test_the_cap_never_goes_below_min_ratio_of_the_limit(self):
        d = run(self.market(), {"ls": 50.0, "be": 100.0}, 40 * IPE, {"ls": window(300.0)})
        self.assertAlmostEqual(10.0, d["be"].cap_pct)

    def test_under_the_sla_it_steps_back_up_to_the_limit(self):
        m = self.market(age=1.0)                          # the EWMA is the last reading
        run(m, {"ls": 50.0, "be": 100.0}, 2 * IPE, {"ls": window(300.0)})
        d = run(m, {"ls": 50.0, "be": 81.0}, IPE, {"ls": window(150.0)})
        self.assertAlmostEqual(89.1, d["be"].cap_pct)
        d = run(m, {"ls": 50.0, "be": 89.0}, 2 * IPE, {"ls": window(150.0)})
        self.assertEqual(100.0, d["be"].cap_pct)

    def test_the_sensitive_vm_is_never_stepped(self):
        d = run(self.market(), {"ls": 50.0, "be": 100.0}, 5 * IPE, {"ls": window(300.0)})
        self.assertEqual(100.0, d["ls"].cap_pct)
