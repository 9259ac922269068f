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

"""Per-VM state in slot-indexed columns; epoch summaries as columns."""

import unittest
import warnings

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np

from resex_libvirt.market import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.market import records
from resex_libvirt.market import table
from resex_libvirt import sla


class TableTest(unittest.TestCase):

    def test_rows_follow_joins_and_leaves_in_order(self):
        t = table.Table()
        t.column("x", 7.0)
        for vm in "abcd":
            t.add(vm)
        t.x[:] = [1.0, 2.0, 3.0, 4.0]
        version = t.version
        t.remove("b")
        self.assertEqual(["a", "c", "d"], t.names)
        self.assertEqual({"a": 0, "c": 1, "d": 2}, t.slots)
        self.assertEqual([1.0, 3.0, 4.0], t.x.tolist())
        self.assertGreater(t.version, version)
        self.assertEqual(3, t.add("e"))
        self.assertEqual(7.0, t.x[3])          # a new row starts at the column's fill

    def test_adding_a_known_vm_keeps_its_row(self):
        t = table.Table()
        t.column("x")
        t.add("a")
        t.x[0] = 5.0
        version = t.version
        self.assertEqual(0, t.add("a"))
        self.assertEqual((5.0, version), (t.x[0], t.version))
        self.assertIsNone(t.remove("nope"))

    def test_a_column_declared_late_covers_every_row_and_can_be_dropped(self):
        t = table.Table()
        t.add("a")
        t.add("b")
        col = t.column("flag", False, bool)
        self.assertEqual([False, False], col.tolist())
        self.assertIs(col, t.column("flag", True, bool))      # declared once
        t.drop("flag")
        self.assertFalse(hasattr(t, "flag"))
        t.add("c")                                           # a dropped column is not grown

    def test_mapping_reads_a_column_by_vm(self):
        t = table.Table()
        t.column("x")
        for vm in "ab":
            t.add(vm)
        t.x[:] = [1.5, 2.5]
        self.assertEqual({"a": 1.5, "b": 2.5}, t.mapping("x"))
        self.assertEqual({"b": 2.5}, t.mapping("x", np.array([False, True])))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.floats(-1e12, 1e12, allow_nan=False), max_size=300))
    def test_seqsum_adds_left_to_right_as_python_does(self, values):
        self.assertEqual(sum(values), table.seqsum(np.array(values, dtype=np.float64)))

    def test_pick_is_numpy_where(self):
        cond = np.array([True, False, True])
        yes, no = np.array([1.0, 2.0, 3.0]), np.array([9.0, 8.0, 7.0])
        self.assertEqual(np.where(cond, yes, no).tolist(), table.pick(cond, yes, no).tolist())
        self.assertEqual([9.0, 8.0, 7.0], no.tolist())        # not modified


def _market(policy="io_shares", ipe=100):
    params = market_mod.MarketParams(intervals_per_epoch=ipe, pcpus=3)
    m = market_mod.Market(params, policy_mod.load(policy))
    m.add(records.VMSpec("quiet"))
    m.add(records.VMSpec("victim", sla=sla.SLA(latency_sla_us=200.0)))
    m.add(records.VMSpec("bulk"))
    return m


def _interfered(m, intervals, latency_us=300.0):
    for _ in range(intervals):
        samples = {"victim": records.Sample("victim", 0.0, 20.0, tx_mtus=10),
                   "bulk": records.Sample("bulk", 0.0, 90.0, tx_mtus=5000),
                   "quiet": records.Sample("quiet", 0.0, 5.0, tx_mtus=1)}
        samples = {vm: s for vm, s in samples.items() if vm in m.specs}
        m.step(samples, {"victim": records.LatencyWindow(16, latency_us, 5.0, latency_us)})


class MarketRowsTest(unittest.TestCase):

    def test_a_vm_leaving_takes_its_policy_state_with_it(self):
        m = _market()
        _interfered(m, 30)
        self.assertGreater(m.decision("bulk").rate, 1.0)
        m.remove("bulk")
        self.assertEqual(["quiet", "victim"], m.table.names)
        self.assertEqual(["quiet", "victim"], m.state.names)
        self.assertEqual(2, len(m.state.tax_rate))
        m.add(records.VMSpec("bulk"))       # back: from scratch, untaxed
        self.assertEqual((100.0, 1.0), (m.decision("bulk").cap_pct, m.decision("bulk").rate))
        self.assertTrue(np.isnan(m.state.tax_rate[m.state.slots["bulk"]]))
        self.assertEqual(policy_mod.UNCAPPED, m.reason("bulk"))

    def test_the_taxes_of_an_epoch_name_their_vms_after_others_left(self):
        m = _market()
        _interfered(m, 30)
        m.remove("quiet")              # the rows move up before the epoch's taxes are read
        taxes = m.end_epoch().taxes
        self.assertTrue(taxes)
        self.assertEqual({("victim", "bulk")}, {(t["victim"], t["interferer"]) for t in taxes})

    def test_a_latency_sla_of_zero_never_counts_as_interference(self):
        m = market_mod.Market(market_mod.MarketParams(pcpus=2), policy_mod.load("latency_target"))
        m.add(records.VMSpec("zero", sla=sla.SLA(latency_sla_us=0.0)))
        m.add(records.VMSpec("bulk"))
        with warnings.catch_warnings():
            warnings.simplefilter("error")          # no division by zero either
            for _ in range(30):
                m.step({"bulk": records.Sample("bulk", 0.0, 90.0, tx_mtus=5000)},
                       {"zero": records.LatencyWindow(16, 500.0, 50.0, 600.0)})
        self.assertEqual({"zero": 0.0}, m.last_interference)
        self.assertEqual(100.0, m.decision("bulk").cap_pct)

    def test_a_balance_reader_keeps_its_steps_rows(self):
        m = _market()
        _interfered(m, 5)
        read = m.balance_reader()
        want = m.ledger.balance("bulk")
        m.remove("quiet")                  # the rows move up; the reader's do not
        self.assertEqual(want, read("bulk"))
        with self.assertRaises(KeyError):
            read("nobody")
        with self.assertRaises(KeyError):
            m.balance_reader()("quiet")
        self.assertEqual(want, m.balance_reader()("bulk"))

    def test_a_new_policy_starts_with_fresh_columns(self):
        m = _market()
        _interfered(m, 30)
        self.assertEqual(policy_mod.TAX, m.reason("bulk"))
        m.set_policy(policy_mod.load("free_market"))
        self.assertFalse(hasattr(m.state, "tax_rate"))
        self.assertTrue(np.isnan(m.state.credit_cap).all())
        self.assertEqual(1.0, m.decision("bulk").rate)
        self.assertEqual(policy_mod.UNCAPPED, m.reason("bulk"))
        m.set_policy(policy_mod.load("io_shares"))
        self.assertTrue(np.isnan(m.state.tax_rate).all())

    def test_the_epoch_summary_columns_and_records_agree(self):
        m = _market()
        _interfered(m, 30)
        summary = m.end_epoch()
        self.assertEqual(3, len(summary))
        rows = [summary.row(k) for k in range(3)]
        self.assertEqual(list(summary.vms), rows)
        self.assertIsNone(summary.vm("quiet").interference_pct)
        self.assertIsInstance(summary.vm("victim").interference_pct, float)
        again = market_mod.EpochSummary(epoch=0, intervals=30, vms=summary.vms)
        for field in market_mod.EPOCH_COLUMNS:
            want, got = summary.columns[field], again.columns[field]
            if isinstance(want, list):
                self.assertEqual(want, got)
            else:
                np.testing.assert_array_equal(want, got)
        with self.assertRaises(ValueError):
            market_mod.EpochSummary(epoch=0, intervals=1)


class NumberTest(unittest.TestCase):

    def test_a_rule_constant_gives_the_bits_of_the_number_and_cannot_change(self):
        rows = np.array([0.1, 2.5, np.nan, -0.0])
        self.assertEqual((rows * 100.0).tobytes(), (rows * table.HUNDRED).tobytes())
        with self.assertRaises(ValueError):
            table.HUNDRED[()] = 1.0
        with self.assertRaises(ValueError):
            table.ONE += 1.0


class NanToNumTest(unittest.TestCase):
    """table.nan_to_num: numpy's nan_to_num of a float64 column, to the last bit."""

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=40),
           st.sampled_from([0.0, -np.inf, np.inf, -1.5, 7.0]))
    def test_every_value_is_numpys(self, values, nan):
        rows = np.array(values, dtype=np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = table.nan_to_num(rows, nan=nan)
        self.assertEqual(np.nan_to_num(rows, nan=nan).tobytes(), got.tobytes())
        self.assertIsNot(rows, got)

    def test_signed_zeros_and_the_infinities(self):
        rows = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, -np.nan])
        for nan in (0.0, -np.inf):
            self.assertEqual(np.nan_to_num(rows, nan=nan).tobytes(),
                             table.nan_to_num(rows, nan=nan).tobytes())

    def test_the_column_is_not_changed(self):
        rows = np.array([np.nan, np.inf, 1.0])
        table.nan_to_num(rows)
        self.assertEqual(np.array([np.nan, np.inf, 1.0]).tobytes(), rows.tobytes())


class NameRankTest(unittest.TestCase):

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.text(min_size=1, max_size=4), unique=True, max_size=30),
           st.data())
    def test_rank_orders_rows_as_their_names_sort(self, names, data):
        t = table.Table()
        for vm in names:
            t.add(vm)
        for vm in data.draw(st.lists(st.sampled_from(names), unique=True)) if names else ():
            t.remove(vm)
        ranked = sorted(t.names, key=lambda vm: t.name_rank()[t.slots[vm]])
        self.assertEqual(sorted(t.names), ranked)
