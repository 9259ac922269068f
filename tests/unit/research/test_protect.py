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

"""Time to protect and cap swing (resex_research.protect)."""

import unittest

from resex_libvirt.sim import runner
from resex_libvirt.sim import scenario as scenario_mod
from resex_research import protect


def log(spans):
    """A request every millisecond: ``[(until_s, latency_us), ...]`` in order."""
    out, t, k = [], 0.0, 0
    for until, lat in spans:
        while t < until - 1e-12:
            k += 1
            t = k * 0.001
            out.append((t, lat))
    return out


class TimeToProtectTest(unittest.TestCase):

    def test_it_is_the_time_until_the_window_is_back_within_the_bound_for_good(self):
        # Interfered (300 us) for 0.5 s, then 200 us: the 100 ms window is
        # back under 220 us a fifth of the way into the quiet requests.
        t = protect.vm_time_to_protect(log([(0.5, 300.0), (2.0, 200.0)]), 220.0, 0.0, 2.0)
        self.assertGreater(t, 0.5)
        self.assertLess(t, 0.6)

    def test_a_vm_never_interfered_with_is_protected_at_once(self):
        t = protect.vm_time_to_protect(log([(1.0, 200.0)]), 220.0, 0.0, 1.0)
        self.assertLessEqual(t, 0.001)

    def test_never_when_the_sla_is_not_held_until_the_end(self):
        self.assertIsNone(protect.vm_time_to_protect(
            log([(0.5, 200.0), (1.0, 300.0)]), 220.0, 0.0, 1.0))

    def test_a_dip_under_the_bound_that_does_not_hold_does_not_count(self):
        spans = [(0.3, 300.0), (0.5, 150.0), (1.0, 300.0), (2.0, 200.0)]
        t = protect.vm_time_to_protect(log(spans), 220.0, 0.0, 2.0)
        self.assertGreater(t, 1.0)

    def test_a_short_lucky_tail_at_the_end_does_not_count(self):
        self.assertIsNone(protect.vm_time_to_protect(
            log([(1.8, 300.0), (2.0, 200.0)]), 220.0, 0.0, 2.0))

    def test_the_clock_starts_with_the_interferer(self):
        t = protect.vm_time_to_protect(log([(1.0, 200.0), (1.5, 300.0), (3.0, 200.0)]),
                                       220.0, 1.0, 3.0)
        self.assertGreater(t, 0.5)
        self.assertLess(t, 0.6)


class RunMeasuresTest(unittest.TestCase):

    def test_uncontrolled_a_2mb_interferer_is_never_protected_from(self):
        sc = scenario_mod.load("paper_64k_vs_2m").with_duration(0.5)
        res = runner.run(sc, "none")
        self.assertIsNone(protect.time_to_protect(sc, res))
        self.assertEqual(0.0, protect.cap_swing(sc, res))

    def test_io_shares_protects_within_the_run_and_moves_the_cap(self):
        sc = scenario_mod.load("paper_64k_vs_2m").with_duration(1.0)
        res = runner.run(sc, "io_shares")
        t = protect.time_to_protect(sc, res)
        self.assertIsNotNone(t)
        self.assertLess(t, 1.0)
        self.assertGreater(protect.cap_swing(sc, res), 0.0)

    def test_no_interferer_no_time_to_protect(self):
        sc = scenario_mod.load("paper_64k_alone").with_duration(0.2)
        self.assertIsNone(protect.time_to_protect(sc, runner.run(sc, "none")))
        self.assertIsNone(protect.interference_span(sc))
