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

"""The model's calibration against the paper (done once; the model is then frozen).

The figures these tests check are printed by ``resex-sim calibrate``.
"""

import unittest

from resex_libvirt.sim import model as model_mod
from resex_research import calibration

PAPER_BASE_US = 209.0


class CalibrationTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.data = calibration.measure(duration_s=3.0)
        cls.base = cls.data["base"]["mean_us"]

    def test_the_model_is_the_frozen_calibrated_one(self):
        self.assertEqual(model_mod.ModelParams(sched_period_ns=10_000_000, compute_cv=0.02,
                                               max_queue=4096), model_mod.CALIBRATED)

    def test_fig1_the_64k_server_alone_is_stable_near_209_us(self):
        base = self.data["base"]
        self.assertAlmostEqual(PAPER_BASE_US, base["mean_us"], delta=3.0)
        self.assertLess(base["std_us"], 5.0)
        self.assertLess(base["p99_us"] - base["p50_us"], 10.0)

    def test_figs3_4_capping_the_interferer_at_100_over_buffer_ratio_restores_the_base(self):
        self.assertEqual([2, 4, 8, 16, 32], [r["ratio"] for r in self.data["ratios"]])
        for r in self.data["ratios"]:
            with self.subTest(ratio=r["ratio"]):
                self.assertLessEqual(r["capped"]["mean_us"], 1.10 * self.base)

    def test_figs1_5_7_an_uncapped_2m_interferer_inflates_the_latency(self):
        two_mb = self.data["ratios"][-1]
        self.assertEqual(32, two_mb["ratio"])
        self.assertGreaterEqual(two_mb["uncapped"]["mean_us"], 1.20 * self.base)

    def test_fig4_the_cap_is_what_restores_it(self):
        for r in self.data["ratios"]:
            with self.subTest(ratio=r["ratio"]):
                self.assertLess(r["capped"]["mean_us"], r["uncapped"]["mean_us"])
                self.assertLess(r["interferer_capped_mb_s"], r["interferer_uncapped_mb_s"])

    def test_the_interference_grows_with_the_interferers_buffer(self):
        uncapped = [r["uncapped"]["mean_us"] for r in self.data["ratios"]]
        self.assertEqual(sorted(uncapped), uncapped)

    def test_the_table_prints_every_ratio(self):
        text = calibration.format_table(self.data)
        for label in ("2 (128K)", "32 (2M)", "alone"):
            self.assertIn(label, text)
