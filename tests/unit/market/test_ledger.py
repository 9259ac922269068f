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

"""The Reso ledger: paper Section VI-A supply, allocation and replenishment."""

import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt.market import ledger as ledger_mod
from resex_libvirt.market import market as market_mod


class PaperSupplyTest(unittest.TestCase):

    def test_cpu_supply_is_100_percent_times_intervals_per_pcpu(self):
        # VI-A.1: "PercentPerInterval * NumberOfIntervals = 100 * 1000 = 100,000"
        params = market_mod.MarketParams(interval_s=0.001, intervals_per_epoch=1000, pcpus=1)
        self.assertEqual(100_000, params.cpu_supply)

    def test_io_supply_is_link_bytes_per_epoch_over_mtu(self):
        # VI-A.2: "1 * 1024 * 1024 * 1024 / 1024 = 1048576 MTUs in one second"
        params = market_mod.MarketParams(link_bytes_per_s=float(1 << 30), mtu=1024)
        self.assertEqual(1_048_576, params.io_supply)

    def test_equal_shares_split_the_supply_equally(self):
        ledger = ledger_mod.Ledger(cpu_supply=200_000, io_supply=1_048_576)
        ledger.open_account("a", 100)
        ledger.open_account("b", 100)
        self.assertEqual(ledger.allocation("a"), ledger.allocation("b"))
        self.assertEqual(624_288, ledger.allocation("a"))

    def test_shares_split_the_supply_in_proportion(self):
        ledger = ledger_mod.Ledger(cpu_supply=300, io_supply=0)
        ledger.open_account("a", 200)
        ledger.open_account("b", 100)
        self.assertEqual(200, ledger.allocation("a"))
        self.assertEqual(100, ledger.allocation("b"))


class EpochTest(unittest.TestCase):

    def test_leftovers_are_discarded_at_replenish(self):
        ledger = ledger_mod.Ledger(cpu_supply=1000, io_supply=0)
        ledger.open_account("a", 1)
        ledger.charge("a", 10, 0)
        ledger.replenish()
        self.assertEqual(1000, ledger.balance("a"))

    def test_balance_never_goes_below_zero_but_spend_is_recorded(self):
        ledger = ledger_mod.Ledger(cpu_supply=100, io_supply=0)
        ledger.open_account("a", 1)
        ledger.charge("a", 70, 80)
        self.assertEqual(0, ledger.balance("a"))
        self.assertEqual(70, ledger.account("a").spent_cpu)
        self.assertEqual(80, ledger.account("a").spent_io)

    def test_a_vm_joining_mid_epoch_gets_a_prorated_balance(self):
        ledger = ledger_mod.Ledger(cpu_supply=1000, io_supply=0)
        ledger.open_account("a", 1, fraction_left=0.25)
        self.assertEqual(1000, ledger.allocation("a"))
        self.assertEqual(250, ledger.balance("a"))

    def test_negative_charges_are_refused(self):
        ledger = ledger_mod.Ledger(cpu_supply=1000, io_supply=0)
        ledger.open_account("a", 1)
        with self.assertRaises(ValueError):
            ledger.charge("a", -1, 0)


charges = st.lists(st.tuples(st.sampled_from("abc"),
                             st.floats(0, 1e6, allow_nan=False),
                             st.floats(0, 1e6, allow_nan=False)), max_size=60)


class LedgerPropertiesTest(unittest.TestCase):

    @settings(max_examples=200, deadline=None)
    @given(shares=st.lists(st.integers(1, 65535), min_size=1, max_size=3),
           cpu=st.floats(0, 1e9, allow_nan=False), io=st.floats(0, 1e9, allow_nan=False),
           epochs=st.lists(charges, min_size=1, max_size=4))
    def test_balances_replenish_exactly_and_nothing_carries_over(self, shares, cpu, io, epochs):
        ledger = ledger_mod.Ledger(cpu, io)
        names = "abc"[:len(shares)]
        for name, s in zip(names, shares):
            ledger.open_account(name, s)
        total = sum(ledger.allocation(n) for n in names)
        self.assertAlmostEqual(cpu + io, total, delta=1e-6 * max(1.0, cpu + io))
        for epoch in epochs:
            for name, c, i in epoch:
                if name in ledger:
                    before = ledger.balance(name)
                    after = ledger.charge(name, c, i)
                    self.assertGreaterEqual(after, 0.0)
                    self.assertLessEqual(after, before)
            ledger.replenish()
            for name in names:
                self.assertEqual(ledger.allocation(name), ledger.balance(name))
                self.assertEqual(0.0, ledger.account(name).spent_cpu)
                self.assertEqual(0.0, ledger.account(name).spent_io)
