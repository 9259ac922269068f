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

"""Latency windows and the interference percentage (Alg. 2 line 6)."""

import math
import unittest

from hypothesis import given
from hypothesis import strategies as st

from resex_libvirt.market import latency
from resex_libvirt.market import records
from resex_libvirt.sim import latency_buffer
from tests.unit.market import reference


class InterferenceTest(unittest.TestCase):

    def test_mean_increase_in_percent_of_the_base(self):
        w = records.LatencyWindow(10, 250.0, 0.0, 250.0)
        self.assertAlmostEqual(25.0, reference.interference_pct(w, 200.0))

    def test_std_increase_is_relative_to_the_base_mean(self):
        w = records.LatencyWindow(10, 200.0, 50.0, 300.0)
        self.assertAlmostEqual(20.0, reference.interference_pct(w, 200.0, base_std_us=10.0))

    def test_faster_than_base_is_no_interference(self):
        w = records.LatencyWindow(10, 150.0, 0.0, 150.0)
        self.assertEqual(0.0, reference.interference_pct(w, 200.0))

    def test_no_window_no_interference(self):
        self.assertEqual(0.0, reference.interference_pct(None, 200.0))

    def test_baseline_std_follows_calm_windows_down_at_once(self):
        t = reference.BaselineTracker()
        t.observe(records.LatencyWindow(10, 200.0, 8.0, 220.0), 200.0, 10.0)
        t.observe(records.LatencyWindow(10, 201.0, 3.0, 210.0), 200.0, 10.0)
        self.assertEqual(3.0, t.std_us)

    def test_baseline_ignores_interfered_windows(self):
        t = reference.BaselineTracker()
        t.observe(records.LatencyWindow(10, 200.0, 3.0, 210.0), 200.0, 10.0)
        t.observe(records.LatencyWindow(10, 400.0, 90.0, 600.0), 200.0, 10.0)
        self.assertEqual(3.0, t.std_us)


class BufferTest(unittest.TestCase):

    def test_summary_of_known_values(self):
        w = latency.summarize([100.0, 200.0, 300.0, 400.0])
        self.assertEqual(4, w.count)
        self.assertEqual(250.0, w.mean_us)
        self.assertAlmostEqual(math.sqrt(12500.0), w.std_us)
        self.assertEqual(400.0, w.p99_us)

    def test_old_values_leave_the_window(self):
        buf = latency_buffer.LatencyBuffer(size=10, max_age=5)
        buf.add(1000.0, tick=0)
        buf.add(100.0, tick=8)
        self.assertEqual(100.0, buf.window(tick=10).mean_us)
        self.assertIsNone(buf.window(tick=100))

    def test_window_is_bounded(self):
        buf = latency_buffer.LatencyBuffer(size=3)
        for i in range(100):
            buf.add(float(i), tick=i)
        self.assertEqual(3, len(buf))

    @given(st.lists(st.floats(0, 1e7, allow_nan=False), min_size=1, max_size=200))
    def test_summary_is_ordered(self, values):
        w = latency.summarize(values)
        self.assertLessEqual(min(values), w.mean_us * (1 + 1e-9) + 1e-9)
        self.assertLessEqual(w.p99_us, max(values))
        self.assertGreaterEqual(w.std_us, 0.0)

    def test_non_finite_windows_are_refused(self):
        with self.assertRaises(ValueError):
            records.LatencyWindow(1, float("nan"), 0.0, 0.0)


def _reference_window(items, tick, max_age):
    """The window as a plain filter of (tick, value) pairs computes it."""
    fresh = [(t, v) for t, v in items if tick - t <= max_age]
    if not fresh:
        return None, None
    values = [v for _t, v in fresh]
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / n
    p99 = sorted(values)[min(n - 1, max(0, math.ceil(0.99 * n) - 1))]
    return (n, mean, math.sqrt(var), p99), min(t for t, _v in fresh)


_pairs = st.lists(st.tuples(st.integers(0, 200), st.floats(0, 1e6, allow_nan=False)),
                  min_size=0, max_size=150)


class WindowSinceTest(unittest.TestCase):

    def _check(self, pairs, size, tick, max_age):
        buf = latency_buffer.LatencyBuffer(size=size, max_age=max_age)
        for t, v in pairs:
            buf.add(v, t)
        win, oldest = buf.window_since(tick)
        ref, ref_oldest = _reference_window(pairs[-size:] if pairs else [], tick, max_age)
        if ref is None:
            self.assertIsNone(win)
            self.assertIsNone(oldest)
            return
        self.assertEqual(ref, (win.count, win.mean_us, win.std_us, win.p99_us))
        self.assertEqual(ref_oldest, oldest)

    @given(_pairs, st.integers(1, 128), st.integers(0, 300), st.integers(0, 100))
    def test_ticks_in_order_give_the_filtered_window(self, pairs, size, tick, max_age):
        pairs = sorted(pairs, key=lambda p: p[0])
        self._check(pairs, size, tick, max_age)

    @given(_pairs, st.integers(1, 128), st.integers(0, 300), st.integers(0, 100))
    def test_ticks_out_of_order_give_the_filtered_window(self, pairs, size, tick, max_age):
        self._check(pairs, size, tick, max_age)

    @given(_pairs, st.integers(1, 128), st.integers(0, 300), st.integers(0, 100))
    def test_extend_is_add_one_by_one(self, pairs, size, tick, max_age):
        one = latency_buffer.LatencyBuffer(size=size, max_age=max_age)
        for t, v in pairs:
            one.add(v, t)
        many = latency_buffer.LatencyBuffer(size=size, max_age=max_age)
        half = len(pairs) // 2
        for part in (pairs[:half], pairs[half:]):
            many.extend([v for _t, v in part], [t for t, _v in part])
        self.assertEqual(one.added, many.added)
        self.assertEqual(one.window_since(tick), many.window_since(tick))
        self.assertEqual(one.window(tick), many.window(tick))

    def test_an_older_tick_after_a_newer_one_is_still_left_out(self):
        buf = latency_buffer.LatencyBuffer(size=8, max_age=5)
        buf.add(100.0, tick=10)
        buf.add(900.0, tick=1)      # out of order, and too old at tick 10
        buf.add(300.0, tick=10)
        win, oldest = buf.window_since(10)
        self.assertEqual((2, 200.0), (win.count, win.mean_us))
        self.assertEqual(10, oldest)

    def test_p99_of_ties_is_the_one_a_stable_sort_puts_last(self):
        w = latency.summarize([0.0, -0.0])
        self.assertEqual(-1.0, math.copysign(1.0, w.p99_us))

    @given(st.lists(st.floats(0, 1e7, allow_nan=False), min_size=1, max_size=250))
    def test_p99_is_the_sorted_rank(self, values):
        n = len(values)
        rank = min(n - 1, max(0, math.ceil(0.99 * n) - 1))
        self.assertEqual(sorted(values)[rank], latency.summarize(values).p99_us)
