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

"""Counters that wrap, saturate or reset never yield negative or invented usage."""

import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt import counters as counters_mod
from resex_libvirt.fabric import cumulative

BITS = st.sampled_from([8, 16, 32])


def steps(max_traffic):
    """A list of (reset?, traffic) steps: traffic is what was sent in the interval."""
    return st.lists(st.tuples(st.booleans(), st.integers(0, max_traffic)),
                    min_size=1, max_size=40)


class TestDeltaTrackerProperties(unittest.TestCase):

    @settings(max_examples=200, deadline=None)
    @given(bits=BITS, start=st.integers(0, 2**32), data=st.data())
    def test_wrapping_counter_usage_sums_to_true_traffic_when_no_wrap_is_missed(
            self, bits, start, data):
        modulus = 1 << bits
        traffic = data.draw(st.lists(st.integers(0, modulus - 1), min_size=1, max_size=40))
        tracker = counters_mod.DeltaTracker(bits=bits, max_delta=modulus - 1)
        value = start % modulus
        tracker.update("k", value)
        total = 0
        for sent in traffic:
            value = (value + sent) % modulus
            delta = tracker.update("k", value)
            self.assertGreaterEqual(delta, 0)
            total += delta
        self.assertEqual(sum(traffic), total)

    @settings(max_examples=200, deadline=None)
    @given(bits=BITS, data=st.data())
    def test_wrapping_counter_with_resets_is_never_negative_nor_above_max_delta(
            self, bits, data):
        modulus = 1 << bits
        max_delta = modulus // 2
        tracker = counters_mod.DeltaTracker(bits=bits, max_delta=max_delta)
        value = 0
        tracker.update("k", value)
        for reset, sent in data.draw(steps(modulus - 1)):
            value = (0 if reset else value) + sent
            value %= modulus
            delta = tracker.update("k", value)
            self.assertTrue(0 <= delta <= max_delta, delta)

    @settings(max_examples=200, deadline=None)
    @given(start=st.integers(0, 2**64), plan=steps(2**40))
    def test_64bit_counter_with_resets_loses_only_undetectable_resets(self, start, plan):
        tracker = counters_mod.DeltaTracker()
        value = start
        tracker.update("k", value)
        true_total = counted = lost = 0
        for reset, sent in plan:
            before = value
            value = (0 if reset else value) + sent
            true_total += sent
            if reset and value >= before:
                lost += before  # the counter looks like it only grew: indistinguishable
            delta = tracker.update("k", value)
            self.assertGreaterEqual(delta, 0)
            counted += delta
        self.assertLessEqual(counted, true_total)
        self.assertEqual(true_total - lost, counted)


class TestCumulativeCounterProperties(unittest.TestCase):

    @settings(max_examples=300, deadline=None)
    @given(plan=steps(30_000))
    def test_saturating_counter_total_never_decreases_nor_exceeds_true_traffic(self, plan):
        bits = 16
        limit = (1 << bits) - 1
        counter = cumulative.CumulativeCounter("saturating", bits=bits)
        true_since_reset = 0
        counter.update(0)
        true_total = 0
        last_total = 0
        ever_saturated = False
        for reset, sent in plan:
            if reset:
                true_since_reset = 0
            true_since_reset += sent
            true_total += sent
            raw = min(true_since_reset, limit)
            total = counter.update(raw)
            self.assertGreaterEqual(total, last_total)
            self.assertLessEqual(total, true_total)
            self.assertEqual(raw == limit, counter.saturated)
            ever_saturated = ever_saturated or raw == limit
            last_total = total
        if not ever_saturated and not any(r for r, _ in plan):
            self.assertEqual(true_total, counter.total)

    @settings(max_examples=200, deadline=None)
    @given(bits=BITS, data=st.data())
    def test_wrapping_counter_total_equals_true_traffic(self, bits, data):
        modulus = 1 << bits
        traffic = data.draw(st.lists(st.integers(0, modulus - 1), max_size=40))
        counter = cumulative.CumulativeCounter("wrapping", bits=bits, max_delta=modulus - 1)
        value = data.draw(st.integers(0, modulus - 1))
        counter.update(value)
        for sent in traffic:
            value = (value + sent) % modulus
            counter.update(value)
        self.assertEqual(sum(traffic), counter.total)


class TestCumulativeCounter(unittest.TestCase):

    def test_first_reading_is_the_baseline(self):
        counter = cumulative.CumulativeCounter()
        self.assertEqual(0, counter.update(10**15))
        self.assertEqual(5, counter.update(10**15 + 5))

    def test_stuck_counter_adds_nothing_and_stays_flagged(self):
        counter = cumulative.CumulativeCounter("saturating", bits=32)
        counter.update(2**32 - 3)
        self.assertEqual(2, counter.update(2**32 - 1))
        self.assertTrue(counter.saturated)
        self.assertEqual(2, counter.update(2**32 - 1))
        self.assertTrue(counter.saturated)

    def test_unknown_kind_and_negative_readings_are_refused(self):
        self.assertRaises(ValueError, cumulative.CumulativeCounter, "odd")
        self.assertRaises(ValueError, cumulative.CumulativeCounter().update, -1)
