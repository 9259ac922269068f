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

"""bench_sim prints the paper's rate, simulated seconds per wall second, beside its goal.

Only the arithmetic and the line are checked: no test times anything.
"""

import contextlib
import io
import unittest
from unittest import mock

from bench import bench_sim
from resex_libvirt.sim import runner
from resex_libvirt.sim import scenario


class BenchSimTest(unittest.TestCase):

    def test_simulated_seconds_are_the_runs_durations(self):
        runs = [runner.run_static(scenario.load("paper_64k_vs_2m").with_duration(d))
                for d in (0.02, 0.05)]
        self.assertAlmostEqual(0.07, bench_sim.simulated_s(runs), places=9)

    def test_the_paper_rate_is_its_runs_simulated_seconds_over_the_wall_time(self):
        rate, runs, wall = bench_sim.paper_rate(1, duration_s=0.01)
        self.assertEqual(97, runs)
        self.assertAlmostEqual(97 * 0.01, rate * wall, places=6)

    def test_the_paper_line_prints_the_rate_beside_the_goal(self):
        out = io.StringIO()
        with mock.patch.object(bench_sim, "paper_rate", return_value=(31.25, 97, 15.5)), \
                mock.patch.object(bench_sim, "bench_model", return_value=1.0), \
                mock.patch.object(bench_sim, "bench_static", return_value=1.0), \
                mock.patch.object(bench_sim, "bench_runner", return_value=(1.0, 1.0)), \
                contextlib.redirect_stdout(out):
            self.assertEqual(0, bench_sim.main(["--jobs", "2"]))
        last = out.getvalue().splitlines()[-1]
        self.assertIn("97 runs in 15.5 s, 2 jobs: 31.2 simulated s per wall s", last)
        self.assertIn("goal >= 30", last)
