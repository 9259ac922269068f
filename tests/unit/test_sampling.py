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

"""Samples from cumulative CPU time and I/O counters."""

import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt.fabric import base
from resex_libvirt.market import table
from resex_libvirt import sampling


class SweepSampler:
    """Samples of the VMs of each sweep: the sampler on rows that follow the sweep's VMs.

    What a caller without a market does with :meth:`Sampler.sample_rows`
    (the sampler's one interface): its own table of the VMs read.
    """

    def __init__(self):
        self.sampler = sampling.Sampler()
        self.rows = table.Table()

    def sample(self, ts, cpu_times, io_counters, mtu):
        for vm in [vm for vm in self.rows.names if vm not in cpu_times]:
            self.rows.remove(vm)
        for vm in cpu_times:
            self.rows.add(vm)
        return dict(self.sampler.sample_rows(ts, cpu_times, io_counters, mtu, self.rows))


class SamplerTest(unittest.TestCase):

    def test_cpu_percent_and_mtus_from_two_sweeps(self):
        s = SweepSampler()
        self.assertEqual({}, s.sample(1.0, {"a": 0}, {"a": base.IOCounters(0)}, 1024))
        out = s.sample(1.1, {"a": 50_000_000}, {"a": base.IOCounters(4097, rx_bytes=10)}, 1024)
        self.assertAlmostEqual(50.0, out["a"].cpu_pct)
        self.assertEqual(4097, out["a"].tx_bytes)
        self.assertEqual(5, out["a"].tx_mtus)
        self.assertEqual(1, out["a"].rx_mtus)

    def test_a_counter_reset_never_gives_negative_usage(self):
        s = SweepSampler()
        s.sample(0.0, {"a": 10**12}, {"a": base.IOCounters(10**9)}, 1024)
        out = s.sample(0.1, {"a": 1000}, {"a": base.IOCounters(0)}, 1024)
        self.assertGreaterEqual(out["a"].cpu_pct, 0.0)
        self.assertEqual(0, out["a"].tx_bytes)

    def test_a_vm_without_io_counters_sent_nothing_visible(self):
        s = SweepSampler()
        s.sample(0.0, {"a": 0}, {}, 1024)
        out = s.sample(1.0, {"a": 10**9}, {}, 1024)
        self.assertEqual(0, out["a"].tx_mtus)
        self.assertAlmostEqual(100.0, out["a"].cpu_pct)

    def test_a_vanished_vm_starts_afresh_when_it_returns(self):
        s = SweepSampler()
        s.sample(0.0, {"a": 0}, {}, 1024)
        s.sample(1.0, {}, {}, 1024)
        self.assertEqual({}, s.sample(2.0, {"a": 5 * 10**9}, {}, 1024))


class SampleRowsTest(unittest.TestCase):
    """Samples as columns aligned with the market's rows."""

    def _table(self, *names):
        t = table.Table()
        for name in names:
            t.add(name)
        return t

    def test_columns_follow_the_table_rows_not_the_sweep_order(self):
        t = self._table("b", "a")
        s = sampling.Sampler()
        s.sample_rows(0.0, {"a": 0, "b": 0}, {}, 1024, t)
        batch = s.sample_rows(1.0, {"a": 10**9, "b": 5 * 10**8}, {"b": base.IOCounters(2048)},
                              1024, t)
        self.assertEqual([50.0, 100.0], batch.cpu_pct.tolist())
        self.assertEqual([2, 0], batch.tx_mtus.tolist())
        self.assertEqual((batch.seen, batch.cpu_pct, batch.tx_mtus, batch.tx_bytes),
                         batch.columns_for(t.version))
        self.assertIsNone(batch.columns_for(t.version + 1))

    def test_a_vm_joining_keeps_the_others_readings(self):
        t = self._table("a")
        s = sampling.Sampler()
        s.sample_rows(0.0, {"a": 0, "b": 0}, {}, 1024, t)
        t.add("b")
        batch = s.sample_rows(1.0, {"a": 10**9, "b": 10**9}, {}, 1024, t)
        self.assertEqual({"a"}, set(batch))      # b has no earlier reading yet
        self.assertAlmostEqual(100.0, batch["a"].cpu_pct)
        batch = s.sample_rows(2.0, {"a": 2 * 10**9, "b": 15 * 10**8}, {}, 1024, t)
        self.assertEqual({"a": 100.0, "b": 50.0},
                         {vm: smp.cpu_pct for vm, smp in batch.items()})

    def test_a_vm_leaving_realigns_the_rest(self):
        t = self._table("a", "b", "c")
        s = sampling.Sampler()
        s.sample_rows(0.0, {"a": 0, "b": 0, "c": 0}, {}, 1024, t)
        t.remove("a")
        batch = s.sample_rows(1.0, {"b": 10**9, "c": 2 * 10**8}, {}, 1024, t)
        self.assertEqual([100.0, 20.0], batch.cpu_pct.tolist())

    def test_run_delay_is_a_percentage_of_one_pcpu(self):
        t = self._table("a", "b")
        s = sampling.Sampler()
        s.sample_rows(0.0, {"a": 0, "b": 0}, {}, 1024, t, {"a": 0, "b": 10**9})
        batch = s.sample_rows(1.0, {"a": 10**9, "b": 10**9}, {}, 1024, t,
                              {"a": 25 * 10**7, "b": 10**9})
        self.assertEqual([25.0, 0.0], batch.delay_pct.tolist())
        self.assertEqual(25.0, batch["a"].delay_pct)

    def test_run_delay_follows_a_vm_leaving_and_a_missing_reading(self):
        t = self._table("a", "b", "c")
        s = sampling.Sampler()
        s.sample_rows(0.0, {"a": 0, "b": 0, "c": 0}, {}, 1024, t, {"a": 0, "b": 0, "c": 0})
        t.remove("a")
        batch = s.sample_rows(1.0, {"b": 10**9, "c": 10**9}, {}, 1024, t,
                              {"b": 5 * 10**8})
        self.assertEqual([50.0, 0.0], batch.delay_pct.tolist())

    def test_no_run_delay_given_is_zero(self):
        t = self._table("a")
        s = sampling.Sampler()
        s.sample_rows(0.0, {"a": 0}, {}, 1024, t)
        batch = s.sample_rows(1.0, {"a": 10**9}, {}, 1024, t)
        self.assertEqual([0.0], batch.delay_pct.tolist())

    def test_a_vm_missing_from_a_sweep_has_no_sample_and_zero_usage(self):
        t = self._table("a", "b")
        s = sampling.Sampler()
        s.sample_rows(0.0, {"a": 0, "b": 0}, {"b": base.IOCounters(0)}, 1024, t)
        batch = s.sample_rows(1.0, {"a": 10**9}, {"b": base.IOCounters(10**6)}, 1024, t)
        self.assertNotIn("b", batch)
        self.assertEqual([True, False], batch.seen.tolist())
        self.assertEqual([0, 0], batch.tx_bytes.tolist())
        with self.assertRaises(KeyError):
            batch["b"]

    def test_received_bytes_are_worked_out_when_asked(self):
        t = self._table("a")
        s = sampling.Sampler()
        s.sample_rows(0.0, {"a": 0}, {"a": base.IOCounters(0, rx_bytes=100)}, 1024, t)
        batch = s.sample_rows(1.0, {"a": 0}, {"a": base.IOCounters(0, rx_bytes=3000)}, 1024, t)
        self.assertEqual(2900, batch["a"].rx_bytes)
        self.assertEqual(3, batch["a"].rx_mtus)

    def test_received_bytes_follow_a_vm_joining(self):
        t = self._table("a")
        s = sampling.Sampler()
        s.sample_rows(0.0, {"a": 0}, {"a": base.IOCounters(0, rx_bytes=1000)}, 1024, t)
        t.add("b")
        io = {"a": base.IOCounters(0, rx_bytes=5000), "b": base.IOCounters(0, rx_bytes=7)}
        batch = s.sample_rows(1.0, {"a": 0, "b": 0}, io, 1024, t)
        self.assertEqual({"a": 4000}, {vm: smp.rx_bytes for vm, smp in batch.items()})
        io = {"b": base.IOCounters(0, rx_bytes=2055), "a": base.IOCounters(0, rx_bytes=5000)}
        batch = s.sample_rows(2.0, {"a": 0, "b": 0}, io, 1024, t)
        self.assertEqual({"a": 0, "b": 2048}, {vm: smp.rx_bytes for vm, smp in batch.items()})
        self.assertEqual([0, 2], batch.rx_mtus.tolist())

    def test_two_tables_at_the_same_version_are_not_confused(self):
        one, two = self._table("a", "b"), self._table("b", "a")
        self.assertEqual(one.version, two.version)
        s = sampling.Sampler()
        s.sample_rows(0.0, {"a": 0, "b": 0}, {}, 1024, one)
        batch = s.sample_rows(1.0, {"a": 10**9, "b": 0}, {}, 1024, two)
        self.assertEqual({"a": 100.0, "b": 0.0},
                         {vm: smp.cpu_pct for vm, smp in batch.items()})


sweeps = st.lists(st.dictionaries(st.sampled_from("abcde"),
                                  st.tuples(st.integers(0, 10**13), st.integers(0, 10**12)),
                                  max_size=5), min_size=2, max_size=12)


class SamplerPropertiesTest(unittest.TestCase):

    @settings(max_examples=200, deadline=None)
    @given(sweeps=sweeps, mtu=st.sampled_from([1024, 2048, 4096]))
    def test_each_sample_is_the_difference_of_two_consecutive_readings(self, sweeps, mtu):
        s = SweepSampler()
        last = {}
        for i, sweep in enumerate(sweeps):
            cpu = {vm: ns for vm, (ns, _tx) in sweep.items()}
            io = {vm: base.IOCounters(tx) for vm, (_ns, tx) in sweep.items()}
            out = s.sample(float(i), cpu, io, mtu)
            self.assertEqual({vm for vm in sweep if vm in last}, set(out))
            for vm, smp in out.items():
                ns, tx = sweep[vm]
                l_ns, l_tx = last[vm]
                d_ns = ns - l_ns if ns >= l_ns else ns
                d_tx = tx - l_tx if tx >= l_tx else tx
                self.assertEqual(d_ns * (100.0 / 1e9), smp.cpu_pct)   # one sweep a second
                self.assertEqual(d_tx, smp.tx_bytes)
                self.assertEqual(-(-d_tx // mtu), smp.tx_mtus)
            last = dict(sweep)


by_rows = st.lists(
    st.tuples(st.sets(st.sampled_from("abcdef"), max_size=6),          # the table's VMs
              st.sampled_from([0.0, 0.001, 0.1, 1.0]),                  # time since the last
              st.lists(st.tuples(st.integers(-1, 10**13), st.integers(0, 10**12),
                                 st.integers(-1, 10**12)), min_size=6, max_size=6),
              st.booleans()),                                           # run delays given
    min_size=1, max_size=10)


class SmallRowsTest(unittest.TestCase):
    """A few rows read by rows are worked out in Python: the columns of the arrays' path."""

    @staticmethod
    def _batches(sweeps, mtu, small_rows):
        from unittest import mock

        import numpy as np
        s = sampling.Sampler()
        t = table.Table()
        ts = 0.0
        out = []
        with mock.patch.object(sampling, "SMALL_ROWS", small_rows):
            for vms, dt, readings, with_delays in sweeps:
                for vm in [vm for vm in t.names if vm not in vms]:
                    t.remove(vm)
                for vm in sorted(vms):
                    t.add(vm)
                ts += dt
                n = len(t.names)
                cpu = np.array([c for c, _tx, _d in readings[:n]], dtype=np.int64)
                tx = np.array([x if c >= 0 else 0 for c, x, _d in readings[:n]], dtype=np.int64)
                delays = (np.array([d for _c, _x, d in readings[:n]], dtype=np.int64)
                          if with_delays else None)
                b = s.sample_rows(ts, cpu, (tx, np.zeros(n, dtype=np.int64)), mtu, t, delays)
                out.append([(a.dtype.str, a.tolist()) if a is not None else None
                            for a in (b.seen, b.cpu_pct, b.tx_bytes, b.tx_mtus, b.delay_pct,
                                      b.rx_bytes, b.rx_mtus)] + [list(b.names), b.ts])
        return out

    @settings(max_examples=300, deadline=None)
    @given(sweeps=by_rows, mtu=st.sampled_from([1, 1024, 4096]))
    def test_the_python_rows_give_the_arrays_columns_to_the_last_bit(self, sweeps, mtu):
        self.assertEqual(self._batches(sweeps, mtu, 0), self._batches(sweeps, mtu, 8))
