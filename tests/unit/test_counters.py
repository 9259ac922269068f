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

"""Cumulative counters to per-interval usage: never negative."""

import unittest

from hypothesis import given
from hypothesis import strategies as st

from resex_libvirt import counters


class DeltaTest(unittest.TestCase):

    def test_first_reading_has_no_delta(self):
        self.assertIsNone(counters.DeltaTracker().update("a", 5))

    def test_wrap_of_a_32_bit_counter(self):
        t = counters.DeltaTracker(bits=32)
        t.update("a", 2**32 - 10)
        self.assertEqual(15, t.update("a", 5))

    def test_reset_counts_from_zero(self):
        t = counters.DeltaTracker()
        t.update("a", 1000)
        self.assertEqual(7, t.update("a", 7))

    def test_implausible_wrap_is_a_reset(self):
        t = counters.DeltaTracker(bits=32, max_delta=100)
        t.update("a", 50)
        self.assertEqual(10, t.update("a", 10))

    @given(st.lists(st.tuples(st.integers(0, 2**40), st.booleans()), max_size=50))
    def test_usage_is_never_negative_and_sums_to_the_traffic(self, steps):
        # 64-bit counters: a reset is visible as a reading below the last one.
        t = counters.DeltaTracker()
        value, total, seen = 0, 0, 0
        t.update("a", value)
        for inc, reset in steps:
            if reset and inc < value:
                value = inc
            else:
                value += inc
            total += inc
            delta = t.update("a", value)
            self.assertGreaterEqual(delta, 0)
            seen += delta
        self.assertEqual(total, seen)

    @given(st.lists(st.integers(0, 2**31 - 1), max_size=50))
    def test_32_bit_wraps_are_followed_when_intervals_are_short(self, increments):
        t = counters.DeltaTracker(bits=32, max_delta=2**31)
        value = 0
        t.update("a", value)
        for inc in increments:
            value = (value + inc) % 2**32
            self.assertEqual(inc, t.update("a", value))
