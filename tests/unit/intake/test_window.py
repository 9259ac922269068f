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

"""Pooling reports gives the window of all their samples; the bucket limits the rate."""

import unittest

from hypothesis import given
from hypothesis import strategies as st

from benchex import wire
from resex_agent.intake import ratelimit
from resex_agent.intake import window
from resex_libvirt.market import latency

samples_st = st.lists(st.lists(st.floats(1.0, 1e6), min_size=1, max_size=40),
                      min_size=1, max_size=8)


def report_of(values):
    w = latency.summarize(values)
    return wire.Report(n=w.count, mean_us=w.mean_us, std_us=w.std_us, p99_us=w.p99_us)


class TestPool(unittest.TestCase):

    @given(samples_st)
    def test_pooled_count_mean_and_std_equal_those_of_all_samples(self, groups):
        pooled = window.pool([report_of(g) for g in groups])
        everything = latency.summarize([v for g in groups for v in g])
        self.assertEqual(everything.count, pooled.count)
        self.assertAlmostEqual(everything.mean_us, pooled.mean_us,
                               delta=1e-9 * everything.mean_us + 1e-9)
        self.assertAlmostEqual(everything.std_us, pooled.std_us,
                               delta=1e-4 * everything.mean_us + 1e-6)
        self.assertGreaterEqual(pooled.p99_us, everything.p99_us)

    def test_no_reports_no_window(self):
        self.assertIsNone(window.pool([]))

    def test_old_reports_expire_and_the_window_keeps_only_the_last_ones(self):
        w = window.ReportWindow(size=3)
        for t in range(5):
            w.add(float(t), report_of([100.0 + t]))
        self.assertEqual([102.0, 103.0, 104.0], [r.mean_us for r in w.reports()])
        self.assertEqual(2, w.expire(now=5.0, horizon=2.0))
        self.assertEqual(0, w.expire(now=100.0, horizon=2.0))


class TestTokenBucket(unittest.TestCase):

    def test_a_burst_passes_then_the_rate_holds(self):
        b = ratelimit.TokenBucket(rate=10.0, burst=5, now=0.0)
        self.assertEqual([True] * 5 + [False], [b.take(0.0) for _ in range(6)])
        self.assertTrue(b.take(0.1))
        self.assertFalse(b.take(0.1))
        granted = sum(b.take(0.1 + i * 0.01) for i in range(1, 1001))
        self.assertAlmostEqual(100, granted, delta=1)  # 10 s at 10/s, up to rounding

    def test_a_long_silence_refills_no_more_than_the_burst(self):
        b = ratelimit.TokenBucket(rate=1000.0, burst=3, now=0.0)
        self.assertEqual(3, sum(b.take(1e6) for _ in range(10)))
