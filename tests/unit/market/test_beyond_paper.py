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

"""The policies beyond the paper's two VMs: paper variants, io_shares rules, latency_target."""

import math
import unittest

from resex_libvirt.market import free_market
from resex_libvirt.market import io_shares
from resex_libvirt.market import latency_target
from resex_libvirt.market import market as market_mod
from resex_libvirt.market import policy
from resex_libvirt.market import records
from resex_libvirt import sla
from resex_research import paper_policies
from resex_research import policy_catalog

SENSITIVE = sla.SLA(latency_sla_us=200.0, interference_threshold_pct=10.0)


def make_market(policy_obj, vms, ipe=1000):
    params = market_mod.MarketParams(interval_s=0.001, intervals_per_epoch=ipe, pcpus=4)
    m = market_mod.Market(params, policy_obj, mtu_ewma_intervals=1)
    for name, vm_sla in vms:
        m.add(records.VMSpec(name, sla=vm_sla))
    return m


def window(mean, std=1.0):
    return records.LatencyWindow(count=20, mean_us=mean, std_us=std, p99_us=mean + 3 * std)


def sample(name, mtus, cpu=50.0):
    return records.Sample(name, 0, cpu, tx_mtus=mtus)


class PaperVariantsTest(unittest.TestCase):

    def test_the_paper_variants_are_registered_under_their_own_names(self):
        # The paper's variants are the simulator's, not the agent's plugins.
        self.assertIsInstance(policy_catalog.load("free_market_paper"),
                              paper_policies.FreeMarketPaper)
        self.assertIsInstance(policy_catalog.load("io_shares_paper"), paper_policies.IOSharesPaper)
        self.assertNotIn("free_market_paper", policy.names())
        self.assertNotIn("io_shares_paper", policy.names())
        self.assertIsInstance(policy.load("latency_target"), latency_target.LatencyTarget)

    def test_the_paper_io_shares_taxes_only_the_largest_sender(self):
        m = make_market(paper_policies.IOSharesPaper(use_balance=False),
                        [("victim", SENSITIVE), ("big", sla.SLA()), ("mid", sla.SLA())])
        d = m.step({"victim": sample("victim", 64), "big": sample("big", 2048),
                    "mid": sample("mid", 1024)}, {"victim": window(300.0)})
        self.assertLess(d["big"].cap_pct, 100.0)
        self.assertEqual(100.0, d["mid"].cap_pct)


class IOSharesRulesTest(unittest.TestCase):

    def test_every_interferer_pays_by_its_own_ioshare(self):
        m = make_market(io_shares.IOShares(use_balance=False),
                        [("victim", SENSITIVE), ("big", sla.SLA()), ("mid", sla.SLA())])
        d = m.step({"victim": sample("victim", 64), "big": sample("big", 2048),
                    "mid": sample("mid", 1024)}, {"victim": window(300.0)})
        # Both are taxed, from the CPU they use (50%), the larger sender the more:
        # its log-cap step is twice the other's (twice the IOShare).
        steps = {vm: math.log(d[vm].cap_pct / 50.0) for vm in ("big", "mid")}
        self.assertLess(steps["big"], steps["mid"])
        self.assertLess(steps["mid"], 0.0)
        self.assertAlmostEqual(2.0, steps["big"] / steps["mid"], places=6)
        for vm in ("big", "mid"):
            self.assertAlmostEqual(100.0 / d[vm].cap_pct, d[vm].rate, places=6)
            self.assertEqual(policy.TAX, m.reason(vm))
        # The traffic left is the model's: 9% of inflation aimed at, 50% seen.
        left = 2048 * d["big"].cap_pct / 50.0 + 1024 * d["mid"].cap_pct / 50.0
        self.assertAlmostEqual((2048 + 1024) * 9.0 / 50.0, left, delta=1e-6 * left)
        taxes = {t["interferer"]: t for t in m.end_epoch().taxes}
        self.assertEqual({"big", "mid"}, set(taxes))
        self.assertEqual("victim", taxes["mid"]["victim"])
        self.assertAlmostEqual(1024 / (64 + 2048 + 1024), taxes["mid"]["io_share"], places=6)

    def test_an_sla_vm_over_its_own_sla_is_never_taxed(self):
        m = make_market(io_shares.IOShares(use_balance=False),
                        [("victim", SENSITIVE), ("big_sla", SENSITIVE)])
        for i in range(50):
            d = m.step({"victim": sample("victim", 64), "big_sla": sample("big_sla", 2048)},
                       {"victim": window(300.0 + i), "big_sla": window(260.0 + i)})
        self.assertEqual(100.0, d["big_sla"].cap_pct)
        self.assertEqual(1.0, d["big_sla"].rate)

    def test_an_sla_vm_within_its_sla_is_taxed_like_any_interferer(self):
        m = make_market(io_shares.IOShares(use_balance=False),
                        [("victim", SENSITIVE), ("big_sla", SENSITIVE)])
        d = m.step({"victim": sample("victim", 64), "big_sla": sample("big_sla", 2048)},
                   {"victim": window(300.0), "big_sla": window(210.0)})
        self.assertLess(d["big_sla"].cap_pct, 50.0)
        self.assertEqual(policy.TAX, m.reason("big_sla"))

    def test_below_the_threshold_on_average_no_tax(self):
        # One window over the threshold among calm ones: the evidence stays
        # below it, so the interferer is not taxed.
        m = make_market(io_shares.IOShares(use_balance=False),
                        [("victim", SENSITIVE), ("bulk", sla.SLA())])
        for i in range(200):
            mean = 240.0 if i == 100 else 204.0 + (i % 2)
            d = m.step({"victim": sample("victim", 64), "bulk": sample("bulk", 2048)},
                       {"victim": window(mean)})
            self.assertEqual(100.0, d["bulk"].cap_pct)
        # The paper's rule taxes it for that one window.
        m = make_market(paper_policies.IOSharesPaper(use_balance=False),
                        [("victim", SENSITIVE), ("bulk", sla.SLA())])
        m.step({"victim": sample("victim", 64), "bulk": sample("bulk", 2048)},
               {"victim": window(240.0)})
        self.assertLess(m.decision("bulk").cap_pct, 100.0)

    def test_bad_parameters_are_refused(self):
        for kwargs in ({"heavier": 0.9}, {"protect": 0.0}, {"max_rate": 0.5},
                       {"gain": 0.0}, {"hold_below": 1.5}):
            with self.assertRaises(ValueError, msg=kwargs):
                io_shares.IOShares(**kwargs)

    def test_the_credit_floor_never_stacks_on_a_tax(self):
        # The interferer runs out of Resos while taxed: its cap is the tax cap alone.
        # (The victim's latency here ignores the cap: no check that the tax helps.)
        ipe = 100
        m = make_market(io_shares.IOShares(use_balance=True, check_response=False),
                        [("victim", SENSITIVE), ("bulk", sla.SLA())],
                        ipe=ipe)
        alloc = m.ledger.allocation("bulk")
        per = int(alloc / ipe * 4)     # spends its epoch's Resos in a quarter of it
        for i in range(ipe // 2):
            d = m.step({"victim": sample("victim", 64, cpu=10.0),
                        "bulk": sample("bulk", per, cpu=100.0)},
                       {"victim": window(260.0 + i % 2)})
        self.assertEqual(0.0, m.ledger.balance("bulk"))
        rate = d["bulk"].rate
        self.assertGreater(rate, 1.0)
        self.assertAlmostEqual(100.0 / rate, d["bulk"].cap_pct, places=6)
        self.assertEqual(policy.TAX, m.reason("bulk"))
        # Under the paper's rules the same VM ends at the credit floor.
        m = make_market(paper_policies.IOSharesPaper(),
                        [("victim", SENSITIVE), ("bulk", sla.SLA())], ipe=ipe)
        for _ in range(ipe // 2):
            d = m.step({"victim": sample("victim", 64, cpu=10.0),
                        "bulk": sample("bulk", per, cpu=0.0)},
                       {"victim": window(260.0)})
        self.assertLess(d["bulk"].cap_pct, 100.0 / d["bulk"].rate - 1.0)


class FreeMarketProtectsTest(unittest.TestCase):

    def test_the_credit_rule_never_cuts_an_sla_vm_over_its_sla(self):
        ipe = 100
        for cls, protected in ((free_market.FreeMarket, True),
                               (paper_policies.FreeMarketPaper, False)):
            m = make_market(cls(), [("heavy_sla", SENSITIVE)], ipe=ipe)
            per = int(m.ledger.allocation("heavy_sla") / ipe * 4)
            for _ in range(ipe // 2):
                d = m.step({"heavy_sla": sample("heavy_sla", per, cpu=0.0)},
                           {"heavy_sla": window(300.0)})
            self.assertEqual(protected, d["heavy_sla"].cap_pct == 100.0, cls.name)


class LatencyTargetTest(unittest.TestCase):
    """The law's behaviour on the agent's plant is in test_settle.py; these are the rules."""

    def test_no_victim_over_its_target_no_cap(self):
        pol = latency_target.LatencyTarget()
        m = make_market(pol, [("victim", SENSITIVE), ("bulk", sla.SLA())])
        for i in range(500):     # (500 MTUs per interval: its Resos last the epoch)
            d = m.step({"victim": sample("victim", 64), "bulk": sample("bulk", 500)},
                       {"victim": window(205.0 + i % 2)})
        self.assertEqual(100.0, d["bulk"].cap_pct)
        self.assertEqual(policy.UNCAPPED, m.reason("bulk"))

    def test_an_sla_vm_over_its_target_is_never_lowered(self):
        pol = latency_target.LatencyTarget()
        m = make_market(pol, [("victim", SENSITIVE), ("big_sla", SENSITIVE)])
        for i in range(500):
            d = m.step({"victim": sample("victim", 64), "big_sla": sample("big_sla", 2048)},
                       {"victim": window(300.0 + i % 2), "big_sla": window(260.0 + i % 2)})
        self.assertEqual(100.0, d["big_sla"].cap_pct)

    def test_the_weight_boost_goes_to_communicating_sensitive_vms_only(self):
        pol = latency_target.LatencyTarget(boost=2.0)
        m = make_market(pol, [("victim", SENSITIVE), ("bulk", sla.SLA()),
                              ("quiet", SENSITIVE)])
        m.step({"victim": sample("victim", 64), "bulk": sample("bulk", 2048),
                "quiet": sample("quiet", 0)}, {})
        # The market applies it to the scheduler weight, and restores it.
        self.assertEqual({"victim": 512, "bulk": 256, "quiet": 256},
                         {vm: m.decision(vm).weight for vm in m.specs})
        m.step({"victim": sample("victim", 0), "bulk": sample("bulk", 2048)}, {})
        self.assertEqual(256, m.decision("victim").weight)

    def run_deaf(self, intervals=6000, **kwargs):
        """A victim at 2x its SLA whatever the interferer's cap (its base is over its SLA)."""
        pol = latency_target.LatencyTarget(**kwargs)
        m = make_market(pol, [("victim", SENSITIVE), ("bulk", sla.SLA())])
        caps, reasons = [], []
        for i in range(intervals):
            m.step({"victim": sample("victim", 64), "bulk": sample("bulk", 2048)},
                   {"victim": window(400.0 + i % 2)})
            caps.append(m.decision("bulk").cap_pct)
            reasons.append(m.reason("bulk"))
        return caps, reasons

    def test_a_cap_the_victim_does_not_respond_to_is_released_and_says_so(self):
        caps, reasons = self.run_deaf()
        self.assertIn(policy.NO_RESPONSE, set(reasons))
        first = reasons.index(policy.NO_RESPONSE)
        self.assertLess(min(caps[:first]), 50.0)        # it was cut deep first ...
        self.assertEqual(100.0, caps[first])            # ... then released
        # Most of the time it is left alone: tries get rarer (backoff doubles).
        self.assertGreater(sum(c == 100.0 for c in caps) / len(caps), 0.6)

    def test_without_the_check_a_deaf_victim_holds_its_neighbour_at_the_floor(self):
        caps, reasons = self.run_deaf(check_response=False)
        self.assertNotIn(policy.NO_RESPONSE, set(reasons))
        self.assertLess(max(caps[-300:]), 5.0)

    def test_bad_parameters_are_refused(self):
        for kwargs in ({"gain": 0.0}, {"target": 1.5}, {"deepest_cut": 0.0}, {"boost": 0.5},
                       {"release_gain": 0.0}):
            with self.assertRaises(ValueError):
                latency_target.LatencyTarget(**kwargs)


if __name__ == "__main__":
    unittest.main()
