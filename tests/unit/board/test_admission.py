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

"""The admission signal: smoothed with a time constant, latched with hysteresis."""

import random
import unittest

from hypothesis import given
from hypothesis import strategies as st

from resex_libvirt.board import admission
from tests.unit.board import reports

TAU = 20.0
H = 0.3
T = 10.0


def at(ts, index):
    """A report of congestion index ``index`` (all load untaxable) at ``ts``."""
    rho = index / (100.0 + index)
    return reports.make(ts=1000.0 + ts, link_utilisation=rho)


def run(indices, dt=1.0, tau=TAU, h=H):
    state, out = None, []
    for i, index in enumerate(indices):
        state = admission.advance(state, at(i * dt, index), tau, h)
        out.append(state)
    return out


def flips(states, threshold=T):
    refusing = [s.refuses(threshold) for s in states]
    return [i for i in range(1, len(refusing)) if refusing[i] != refusing[i - 1]]


class AdmissionTest(unittest.TestCase):

    def test_a_steady_host_whose_index_crosses_the_threshold_every_epoch_never_flips(self):
        # One report a second, the index jumping between 6 and 14 around T = 10.
        rng = random.Random(7)
        states = run([rng.uniform(6.0, 14.0) for _ in range(3600)])
        self.assertLessEqual(len(flips(states)), 1)

    def test_a_noisy_steady_host_flips_at_most_once_per_time_constant(self):
        rng = random.Random(11)
        for mean in (7.0, 8.5, 10.0, 11.5):
            states = run([max(0.0, rng.gauss(mean, 3.0)) for _ in range(3600)])
            self.assertLessEqual(len(flips(states)), 3600 / TAU, mean)
            self.assertLessEqual(len(flips(states)), 2, mean)

    def test_it_enters_above_the_threshold_and_leaves_below_the_leave_threshold(self):
        states = run([20.0] * 200 + [8.0] * 200 + [6.5] * 200, tau=0.0)
        refusing = [s.refuses(T) for s in states]
        self.assertTrue(all(refusing[:400]))      # 8 > (1 - 0.3) x 10 = 7: still refusing
        self.assertFalse(any(refusing[400:]))     # 6.5 < 7: admits

    def test_a_host_that_turns_hot_is_refused_within_a_time_constant(self):
        states = run([0.0] * 100 + [40.0] * 100)
        first = next(i for i, s in enumerate(states) if s.refuses(T)) - 100
        # The EWMA passes 10 of a step to 40 after tau x ln(4/3), about 6 s.
        self.assertLessEqual(first, TAU)
        self.assertGreaterEqual(first, 1)

    def test_the_smoothing_follows_the_reports_timestamps_not_their_number(self):
        every_second = run([0.0] + [30.0] * 20, dt=1.0)[-1]
        every_ten = run([0.0] + [30.0] * 2, dt=10.0)[-1]
        self.assertAlmostEqual(every_second.smoothed, every_ten.smoothed)

    def test_older_and_repeated_reports_change_nothing(self):
        state = admission.advance(None, at(10, 5.0), TAU, H)
        self.assertIs(state, admission.advance(state, at(10, 50.0), TAU, H))
        self.assertIs(state, admission.advance(state, at(3, 50.0), TAU, H))

    @given(st.lists(st.floats(0.0, 500.0), min_size=1, max_size=200),
           st.floats(0.0, 0.9))
    def test_the_latched_value_is_never_below_the_smoothed_one(self, indices, h):
        for s in run(indices, h=h):
            self.assertGreaterEqual(s.latched + 1e-9, s.smoothed)
            self.assertLessEqual(s.latched * (1.0 - h), s.smoothed + 1e-6)

    @given(st.floats(0.1, 1000.0), st.floats(0.0, H - 0.01),
           st.lists(st.floats(0.0, 1.0), min_size=2, max_size=300),
           st.floats(0.0, 1e4))
    def test_an_index_wandering_less_than_the_hysteresis_flips_at_most_once(
            self, top, width, noise, threshold):
        """Every index in [(1 - w) top, top] with w < h: for any threshold, one flip at most."""
        states = run([top * (1.0 - width * x) for x in noise], h=H)
        self.assertLessEqual(len(flips(states, threshold)), 1)
