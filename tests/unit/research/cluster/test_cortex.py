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

"""The cortex-like weigher's features and activations (resex_research.cluster.cortex)."""

import unittest

from resex_research.cluster import cortex
from resex_research.cluster import spec


class CortexFeaturesTest(unittest.TestCase):

    def store(self):
        return cortex.FeatureStore({spec.SENSITIVE: 0.1, spec.BULK: 0.9, spec.NEUTRAL: 0.0},
                                   host_vcpus=16)

    def test_min_max_scale_maps_and_clamps_as_cortex_does(self):
        self.assertEqual(-0.5, cortex.min_max_scale(50.0, 0.0, 100.0, 0.0, -1.0))
        self.assertEqual(-1.0, cortex.min_max_scale(150.0, 0.0, 100.0, 0.0, -1.0))
        self.assertEqual(0.0, cortex.min_max_scale(-5.0, 0.0, 100.0, 0.0, -1.0))

    def test_a_busy_host_ranks_below_an_idle_one(self):
        s = self.store()
        s.update("busy", [(spec.BULK, 4, "p1"), (spec.BULK, 4, "p2")])
        s.update("idle", [(spec.NEUTRAL, 2, "p3")])
        self.assertAlmostEqual(100.0 * 7.2 / 16, s.hosts["busy"]["cpu_pct"])
        self.assertLess(s.activation("busy", "p9"), s.activation("idle", "p9"))
        self.assertEqual(0.0, s.activation("idle", "p9"))

    def test_a_project_with_noisy_vms_on_a_host_is_pushed_away_from_it(self):
        s = self.store()
        s.update("h", [(spec.BULK, 4, "noisy"), (spec.SENSITIVE, 2, "quiet")])
        self.assertEqual({"noisy"}, s.hosts["h"]["noisy"])
        self.assertAlmostEqual(s.activation("h", "other") - 1.0, s.activation("h", "noisy"))
        self.assertEqual(s.activation("h", "other"), s.activation("h", "quiet"))

    def test_without_overcommit_there_is_no_contention(self):
        s = self.store()
        s.update("full", [(spec.BULK, 4, "p")] * 4)
        self.assertEqual(0.0, s.hosts["full"]["contention_pct"])
        s = cortex.FeatureStore({spec.BULK: 1.0}, host_vcpus=8)
        s.update("over", [(spec.BULK, 4, "p")] * 3)
        self.assertAlmostEqual(50.0, s.hosts["over"]["contention_pct"])

    def test_an_unknown_host_gets_no_activation(self):
        self.assertEqual(0.0, self.store().activation("nowhere", "p"))
