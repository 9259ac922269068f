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

from resex_libvirt.fabric import base
from resex_libvirt import sampling


class SamplerTest(unittest.TestCase):

    def test_cpu_percent_and_mtus_from_two_sweeps(self):
        s = sampling.Sampler()
        self.assertEqual({}, s.sample(1.0, {"a": 0}, {"a": base.IOCounters(0)}, 1024))
        out = s.sample(1.1, {"a": 50_000_000}, {"a": base.IOCounters(4097, rx_bytes=10)}, 1024)
        self.assertAlmostEqual(50.0, out["a"].cpu_pct)
        self.assertEqual(4097, out["a"].tx_bytes)
        self.assertEqual(5, out["a"].tx_mtus)
        self.assertEqual(1, out["a"].rx_mtus)

    def test_a_counter_reset_never_gives_negative_usage(self):
        s = sampling.Sampler()
        s.sample(0.0, {"a": 10**12}, {"a": base.IOCounters(10**9)}, 1024)
        out = s.sample(0.1, {"a": 1000}, {"a": base.IOCounters(0)}, 1024)
        self.assertGreaterEqual(out["a"].cpu_pct, 0.0)
        self.assertEqual(0, out["a"].tx_bytes)

    def test_a_vm_without_io_counters_sent_nothing_visible(self):
        s = sampling.Sampler()
        s.sample(0.0, {"a": 0}, {}, 1024)
        out = s.sample(1.0, {"a": 10**9}, {}, 1024)
        self.assertEqual(0, out["a"].tx_mtus)
        self.assertAlmostEqual(100.0, out["a"].cpu_pct)

    def test_a_vanished_vm_starts_afresh_when_it_returns(self):
        s = sampling.Sampler()
        s.sample(0.0, {"a": 0}, {}, 1024)
        s.sample(1.0, {}, {}, 1024)
        self.assertEqual({}, s.sample(2.0, {"a": 5 * 10**9}, {}, 1024))
