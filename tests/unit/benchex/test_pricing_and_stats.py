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

"""BenchEx's per-request work (Black-Scholes) and its latency summary."""

import math
import unittest

from hypothesis import given
from hypothesis import strategies as st

from benchex import pricing
from benchex import stats


class TestBlackScholes(unittest.TestCase):

    def test_the_textbook_at_the_money_option(self):
        # S=K=100, r=5%, sigma=20%, T=1y: call 10.4506, put 5.5735 (Hull, 10th ed., ch. 15).
        call, put = pricing.black_scholes(100.0, 100.0, 0.05, 0.2, 1.0)
        self.assertAlmostEqual(10.4506, call, places=4)
        self.assertAlmostEqual(5.5735, put, places=4)

    @given(st.floats(1, 1000), st.floats(1, 1000), st.floats(0, 0.2), st.floats(0.01, 2),
           st.floats(0.01, 5))
    def test_put_call_parity_holds(self, spot, strike, rate, vol, years):
        call, put = pricing.black_scholes(spot, strike, rate, vol, years)
        self.assertAlmostEqual(spot - strike * math.exp(-rate * years), call - put,
                               delta=1e-9 * max(spot, strike))
        self.assertGreaterEqual(call, -1e-9)
        self.assertGreaterEqual(put, -1e-9)

    def test_zero_compute_time_prices_exactly_one_option(self):
        self.assertEqual(1, pricing.work(0.0)[0])

    def test_invalid_inputs_are_refused(self):
        self.assertRaises(ValueError, pricing.black_scholes, 100.0, 100.0, 0.05, 0.0, 1.0)


class TestSummary(unittest.TestCase):

    def test_nearest_rank_percentiles(self):
        values = list(range(1, 1001))
        self.assertEqual(500, stats.percentile(values, 50))
        self.assertEqual(990, stats.percentile(values, 99))
        self.assertEqual(999, stats.percentile(values, 99.9))
        self.assertEqual(1, stats.percentile([1], 99.9))

    @given(st.lists(st.floats(0.1, 1e6), min_size=1, max_size=300), st.floats(0.001, 100))
    def test_the_summary_is_ordered_and_complete(self, latencies, elapsed):
        s = stats.summarize(latencies, elapsed)
        self.assertEqual(list(stats.KEYS), list(s))
        self.assertLessEqual(s["min_us"], s["p50_us"])
        self.assertLessEqual(s["p50_us"], s["p99_us"])
        self.assertLessEqual(s["p99_us"], s["p999_us"])
        self.assertLessEqual(s["p999_us"], s["max_us"])
        self.assertEqual(len(latencies), s["requests"])

    def test_no_latencies_give_zeros_not_errors(self):
        s = stats.summarize([], 1.0, errors=3)
        self.assertEqual((0, 3, 0.0), (s["requests"], s["errors"], s["p99_us"]))
        self.assertIn("errors 3", stats.render(s))

    @given(st.lists(st.floats(0.001, 1e7), min_size=1, max_size=400))
    def test_a_report_window_is_the_window_the_agent_computes(self, latencies):
        # BenchEx summarises with the standard library only; its report must
        # carry the same count, mean, std and p99 the agent's market computes.
        from resex_libvirt.market import latency
        n, mean_us, std_us, p99_us = stats.window(latencies)
        agent = latency.summarize(latencies)
        self.assertEqual((agent.count, agent.mean_us, agent.std_us, agent.p99_us),
                         (n, mean_us, std_us, p99_us))
