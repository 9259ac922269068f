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

"""IOShares as published (the io_shares_paper variant): paper Section VI-C, Algorithm 2."""

import unittest

from resex_libvirt.market import market as market_mod
from resex_libvirt.market import records
from resex_libvirt import sla
from resex_research import paper_policies


def make_market(policy=None, ipe=1000, interferer_sla=None):
    params = market_mod.MarketParams(interval_s=0.001, intervals_per_epoch=ipe, pcpus=2)
    m = market_mod.Market(params, policy or paper_policies.IOSharesPaper(use_balance=False),
                          mtu_ewma_intervals=1)
    m.add(records.VMSpec("victim", sla=sla.SLA(latency_sla_us=200.0,
                                               interference_threshold_pct=10.0)))
    m.add(records.VMSpec("bulk", sla=interferer_sla or sla.SLA()))
    return m


def window(mean, std=1.0):
    return records.LatencyWindow(count=20, mean_us=mean, std_us=std, p99_us=mean + 3 * std)


def samples(victim_mtus=64, bulk_mtus=2048):
    return {"victim": records.Sample("victim", 0, 30.0, tx_mtus=victim_mtus),
            "bulk": records.Sample("bulk", 0, 100.0, tx_mtus=bulk_mtus)}


class IOSharesFormulaTest(unittest.TestCase):

    def test_first_step_cap_is_the_papers_formula(self):
        # IntfPct = (300 - 200) / 200 = 50%; IOShare = 2048 / (2048 + 64);
        # r' = IOShare x 0.5; New CPU Cap = 100 x 1 / (1 + r').
        m = make_market()
        d = m.step(samples(), {"victim": window(300.0)})
        ioshare = 2048 / (2048 + 64)
        r = ioshare * 0.5
        self.assertAlmostEqual(100.0 * 1.0 / (1.0 + r), d["bulk"].cap_pct, places=6)
        self.assertAlmostEqual(1.0 + r, d["bulk"].rate, places=6)
        self.assertEqual(100.0, d["victim"].cap_pct)

    def test_the_raised_rate_is_what_the_interferer_is_charged_next(self):
        m = make_market()
        m.step(samples(), {"victim": window(300.0)})
        rate = m.decision("bulk").rate
        before = m.ledger.balance("bulk")
        m.step(samples(), {})
        spent = before - m.ledger.balance("bulk")
        self.assertAlmostEqual((100.0 + 2048) * rate, spent, places=3)

    def test_no_interference_no_throttling(self):
        m = make_market()
        for _ in range(50):
            d = m.step(samples(), {"victim": window(205.0)})
        self.assertEqual(100.0, d["bulk"].cap_pct)
        self.assertEqual(1.0, d["bulk"].rate)

    def test_rates_decay_back_when_interference_ends(self):
        m = make_market()
        for _ in range(20):
            m.step(samples(), {"victim": window(400.0)})
        taxed = m.decision("bulk").cap_pct
        self.assertLess(taxed, 50.0)
        for _ in range(2000):
            d = m.step(samples(), {"victim": window(200.0)})
        self.assertGreater(d["bulk"].cap_pct, 99.0)

    def test_a_vm_without_an_sla_cannot_trigger_taxation(self):
        m = make_market()
        m.add(records.VMSpec("liar"))  # no latency SLA
        for _ in range(10):
            d = m.step(samples(), {"liar": window(1e6)})
        self.assertEqual(100.0, d["bulk"].cap_pct)

    def test_a_lying_tenant_pushes_others_to_their_reservation_never_below(self):
        m = make_market(interferer_sla=sla.SLA(reservation_pct=30.0))
        for _ in range(500):
            d = m.step(samples(), {"victim": window(1e7, std=1e6)})
        self.assertEqual(30.0, d["bulk"].cap_pct)

    def test_equal_senders_are_not_taxed(self):
        m = make_market()
        for _ in range(20):
            d = m.step(samples(victim_mtus=64, bulk_mtus=64), {"victim": window(400.0)})
        self.assertEqual(100.0, d["bulk"].cap_pct)

    def test_the_std_criterion_fires_on_jitter_with_a_calm_mean(self):
        m = make_market()
        for _ in range(5):
            m.step(samples(), {"victim": window(200.0, std=2.0)})
        d = m.step(samples(), {"victim": window(200.0, std=60.0)})
        self.assertLess(d["bulk"].cap_pct, 100.0)


class IOSharesWithBalanceTest(unittest.TestCase):

    def test_cap_is_the_smaller_of_tax_and_freemarket_caps(self):
        m = make_market(policy=paper_policies.IOSharesPaper(use_balance=True), ipe=100)
        for _ in range(60):
            d = m.step(samples(bulk_mtus=60000), {"victim": window(200.0)})
        # No interference: rate 1, but the bulk VM spent its Resos early, so
        # FreeMarket's gradual decrease applies.
        self.assertEqual(1.0, d["bulk"].rate)
        self.assertLess(d["bulk"].cap_pct, 100.0)


class DemandTest(unittest.TestCase):

    def test_a_capped_interferer_stays_the_culprit_while_interference_lasts(self):
        # Once capped, the bulk VM sends about what the victim sends; its
        # demand (rate x limit / cap) is what names it.
        m = make_market()
        for _ in range(30):
            m.step(samples(), {"victim": window(400.0)})
        cap = m.decision("bulk").cap_pct
        self.assertLess(cap, 50.0)
        d = m.step(samples(victim_mtus=64, bulk_mtus=64), {"victim": window(400.0)})
        self.assertLess(d["bulk"].cap_pct, cap)
