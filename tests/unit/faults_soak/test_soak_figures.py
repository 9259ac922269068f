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

"""The soak's figures: slopes, the table, what samples are read from (no lab)."""

import unittest

from hypothesis import given
from hypothesis import strategies as st

from tests.faults import soak_figures as figures

STATUS = """Name:\tresex-agent
State:\tS (sleeping)
VmPeak:\t  412004 kB
VmRSS:\t   61236 kB
RssAnon:\t   40000 kB
Threads:\t14
"""

METRICS = """# HELP resex_intake_rejected_total Reports rejected
# TYPE resex_intake_rejected_total counter
resex_intake_rejected_total{reason="malformed"} 120.0
resex_intake_rejected_total{reason="rate_limited"} 3000.0
resex_intake_rejected_created{reason="malformed"} 1.7e+09
resex_epochs_total 42.0
"""


def samples(values, step=5.0, key="rss_kib"):
    return [{"t": step * i, key: v} for i, v in enumerate(values)]


class FitTest(unittest.TestCase):

    def test_a_straight_line_is_fitted_exactly_with_no_error(self):
        slope, error = figures.fit([(t, 3.0 + 0.5 * t) for t in range(10)])
        self.assertAlmostEqual(0.5, slope)
        self.assertAlmostEqual(0.0, error)

    def test_too_few_points_give_no_slope_and_two_no_error(self):
        self.assertIsNone(figures.fit([]))
        self.assertIsNone(figures.fit([(1.0, 2.0)]))
        self.assertIsNone(figures.fit([(1.0, 2.0), (1.0, 3.0)]))
        self.assertEqual((1.0, None), figures.fit([(0.0, 2.0), (1.0, 3.0)]))

    @given(st.lists(st.integers(0, 100000), min_size=3, max_size=50, unique=True),
           st.floats(-1e3, 1e3), st.floats(-1e3, 1e3))
    def test_the_slope_of_a_line_is_its_slope_whatever_the_sampling(self, ts, a, b):
        points = [(float(t), a + b * t) for t in sorted(ts)]
        slope, _error = figures.fit(points)
        self.assertAlmostEqual(b, slope, delta=1e-6 * (1.0 + abs(b)))

    def test_the_second_half_starts_at_the_middle_of_the_time_span(self):
        points = [(t, 0.0) for t in (0.0, 10.0, 40.0, 50.0, 100.0)]
        self.assertEqual([(50.0, 0.0), (100.0, 0.0)], figures.second_half(points))
        self.assertEqual([], figures.second_half([]))


class SummaryTest(unittest.TestCase):

    def test_a_constant_series_is_flat(self):
        got = figures.summarize(samples([24] * 20, key="fds"), "fds")
        self.assertEqual((24, 24, 24, 24), (got.first, got.last, got.low, got.high))
        self.assertEqual(0.0, got.slope_h)
        self.assertEqual("flat", got.late_verdict)

    def test_noise_around_a_level_is_flat_and_a_leak_rises(self):
        noise = [60000 + (97 * i % 13) - 6 for i in range(200)]
        self.assertEqual("flat", figures.summarize(samples(noise), "rss_kib").late_verdict)
        leak = [v + 2 * i for i, v in enumerate(noise)]
        got = figures.summarize(samples(leak), "rss_kib")
        self.assertEqual("rises", got.late_verdict)
        # 2 KiB a 5 s sample: 1440 KiB an hour.
        self.assertAlmostEqual(1440.0, got.slope_h, delta=30.0)

    def test_a_warm_up_is_left_out_of_the_second_half(self):
        warm = [50000 + 1000 * i for i in range(10)] + [60000] * 30
        got = figures.summarize(samples(warm), "rss_kib")
        self.assertEqual("rises", figures.verdict(got.slope_h, got.error_h))
        self.assertEqual("flat", got.late_verdict)

    def test_unread_values_are_left_out_and_a_series_never_read_says_so(self):
        got = figures.summarize(samples([10, None, 12, None, 14]), "rss_kib")
        self.assertEqual(3, got.points)
        self.assertEqual((10, 14), (got.first, got.last))
        empty = figures.summarize(samples([None, None]), "rss_kib")
        self.assertEqual((0, "-"), (empty.points, empty.late_verdict))

    def test_the_table_has_a_line_a_series_and_dashes_for_what_is_unknown(self):
        rows = [figures.summarize(samples([1, 2, 3]), "rss_kib"),
                figures.summarize(samples([None]), "fds")]
        text = figures.format_table(rows).splitlines()
        self.assertEqual(4, len(text))
        self.assertTrue(text[0].startswith("series"))
        self.assertIn("+720 +- 0", text[2])
        cells = [cell.strip() for cell in text[3].split(" | ")]
        self.assertEqual(["fds"] + ["-"] * 7, cells)


class ReadingTest(unittest.TestCase):

    def test_rss_and_threads_are_read_from_proc_status(self):
        self.assertEqual({"rss_kib": 61236, "threads": 14}, figures.parse_proc_status(STATUS))
        self.assertEqual({}, figures.parse_proc_status("Name:\tzombie\n"))

    def test_a_metric_is_summed_over_its_labels_and_absent_is_none(self):
        self.assertEqual(3120.0, figures.prom_sum(METRICS, "resex_intake_rejected_total"))
        self.assertEqual(42.0, figures.prom_sum(METRICS, "resex_epochs_total"))
        self.assertIsNone(figures.prom_sum(METRICS, "resex_epochs"))

    def test_a_log_line_cut_between_two_reads_is_counted_once(self):
        counter = figures.LogCounter({"lost": r"skipping (\d+) interval",
                                      "reloads": r"configuration reloaded"})
        counter.feed("x control loop late by 3.0 ms; skipping 2 interval(s)\nconfigu")
        self.assertEqual({"lost": 2, "reloads": 0}, counter.counts)
        counter.feed("ration reloaded\nskipping 5 interval")
        self.assertEqual({"lost": 2, "reloads": 1}, counter.counts)
        self.assertEqual({"lost": 7, "reloads": 1}, counter.feed("(s)\n"))

    @given(st.lists(st.sampled_from(["skipping 1 interval\n", "skipping 12 interval\n",
                                     "reloaded\n", "noise\n"]), max_size=30),
           st.lists(st.integers(0, 400), max_size=5))
    def test_the_counts_do_not_depend_on_where_the_reads_cut_the_log(self, lines, cuts):
        text = "".join(lines)
        patterns = {"lost": r"skipping (\d+) interval", "reloads": "reloaded"}
        whole = figures.LogCounter(patterns).feed(text)
        pieces = figures.LogCounter(patterns)
        last = 0
        for cut in sorted(min(c, len(text)) for c in cuts) + [len(text)]:
            pieces.feed(text[last:cut])
            last = cut
        self.assertEqual(whole, pieces.counts)


class LostAroundTest(unittest.TestCase):

    def test_intervals_lost_near_a_fault_are_the_faults_and_the_rest_beyond(self):
        run = [{"t": 5.0, "lost_intervals": 0}, {"t": 10.0, "lost_intervals": 1},
               {"t": 15.0, "lost_intervals": 1}, {"t": 20.0, "lost_intervals": None},
               {"t": 25.0, "lost_intervals": 9}, {"t": 30.0, "lost_intervals": 9},
               {"t": 35.0, "lost_intervals": 10}]
        # A fault from 21 to 22 s; its grace ends at 24 s.
        self.assertEqual((8, 2), figures.lost_around(run, [(21.0, 22.0)], 2.0))
        self.assertEqual((0, 10), figures.lost_around(run, [], 2.0))
        self.assertEqual((10, 0), figures.lost_around(run, [(0.0, 40.0)], 0.0))

    @given(st.lists(st.integers(0, 5), max_size=40),
           st.lists(st.tuples(st.floats(0, 200), st.floats(0, 30)), max_size=4),
           st.floats(0, 20))
    def test_during_and_beyond_add_up_to_the_total(self, gains, faults, grace):
        total, run = 0, []
        for i, gain in enumerate(gains):
            total += gain
            run.append({"t": 5.0 * (i + 1), "lost_intervals": total})
        windows = [(begin, begin + length) for begin, length in faults]
        during, beyond = figures.lost_around(run, windows, grace)
        self.assertEqual(total, during + beyond)
        self.assertGreaterEqual(min(during, beyond), 0)
