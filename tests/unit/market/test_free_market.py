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

"""FreeMarket: paper Section VI-B, Algorithm 1."""

import unittest

from resex_libvirt.market import free_market
from resex_libvirt.market import market as market_mod
from resex_libvirt.market import records
from resex_libvirt import sla


def make_market(ipe=100, reservation=0.0, limit=None):
    # One pCPU and a link of 100 MTUs per interval: the supply is
    # 100 x 100 CPU Resos + 100 x 100 I/O Resos = 20,000 per epoch.
    params = market_mod.MarketParams(interval_s=0.001, intervals_per_epoch=ipe, pcpus=1,
                                     link_bytes_per_s=100 * 1024 / 0.001, mtu=1024)
    m = market_mod.Market(params, free_market.FreeMarket())
    m.add(records.VMSpec("vm", sla=sla.SLA(reservation_pct=reservation, limit_pct=limit)))
    return m


def busy(cpu=100.0, mtus=100):
    return {"vm": records.Sample("vm", 0.0, cpu, tx_mtus=mtus)}


class FreeMarketTest(unittest.TestCase):

    def test_a_vm_with_resos_left_keeps_its_full_cap(self):
        m = make_market()
        d = m.step(busy(cpu=10, mtus=10))
        self.assertEqual(100.0, d["vm"].cap_pct)

    def test_cap_drops_by_ten_percent_once_below_ten_percent_of_resos(self):
        m = make_market()
        # 400 Resos per interval out of 20,000: after interval index 45 the
        # balance (1,600) is below 10%, with 54% of the epoch to go.
        caps = [m.step(busy(cpu=100, mtus=300))["vm"].cap_pct for _ in range(47)]
        self.assertEqual(100.0, caps[44])
        self.assertAlmostEqual(90.0, caps[45])
        self.assertAlmostEqual(81.0, caps[46])

    def test_no_decrease_in_the_last_tenth_of_the_epoch(self):
        m = make_market()
        # 200 Resos per interval: the balance falls below 10% only at index
        # 90, when 9% of the epoch is left: the cap holds.
        caps = [m.step(busy())["vm"].cap_pct for _ in range(99)]
        self.assertEqual([100.0] * 99, caps)

    def test_the_decrease_compounds_while_the_epoch_is_young(self):
        m = make_market(ipe=1000)
        # Supply 200,000; spending 400 per interval exhausts 90% at index 449.
        caps = [m.step(busy(cpu=100, mtus=300))["vm"].cap_pct for _ in range(460)]
        first_cut = next(i for i, c in enumerate(caps) if c < 100.0)
        self.assertAlmostEqual(90.0, caps[first_cut])
        self.assertAlmostEqual(81.0, caps[first_cut + 1])
        self.assertAlmostEqual(72.9, caps[first_cut + 2])

    def test_caps_reset_when_the_epoch_replenishes(self):
        m = make_market()
        for _ in range(92):
            m.step(busy())
        m.end_epoch()
        self.assertEqual(100.0, m.step(busy(cpu=0, mtus=0))["vm"].cap_pct)

    def test_cap_never_goes_below_the_reservation(self):
        m = make_market(ipe=1000, reservation=40.0)
        caps = [m.step(busy(cpu=100, mtus=300))["vm"].cap_pct for _ in range(900)]
        self.assertEqual(40.0, min(caps))

    def test_cap_never_exceeds_the_limit(self):
        m = make_market(limit=60.0)
        self.assertEqual(60.0, m.step(busy(cpu=1, mtus=0))["vm"].cap_pct)

    def test_parameters_outside_zero_one_are_refused(self):
        with self.assertRaises(ValueError):
            free_market.FreeMarket(step=1.5)
