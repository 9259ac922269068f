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

"""The paper's evaluation: the same figures whatever the number of worker processes."""

import unittest
from unittest import mock

from resex_research import paper
from resex_research import resex_sim


def _without_wall_times(data):
    for run in data["runs"]:
        run.pop("wall_s")
    return data


class WorkersTest(unittest.TestCase):

    def test_two_workers_give_the_figures_of_one(self):
        alone = paper.Evaluation(duration_s=0.15)
        pooled = paper.Evaluation(duration_s=0.15, jobs=2)
        want = _without_wall_times(alone.evaluate())
        got = _without_wall_times(pooled.evaluate())
        self.assertEqual(want, got)
        # The same runs, no more: the prefetch asks for nothing the figures do not use.
        self.assertEqual(sorted(alone.runs), sorted(pooled.runs))
        self.assertEqual(len(alone.distinct_runs()), len(pooled.distinct_runs()))

    def test_the_number_of_jobs_must_be_positive(self):
        for bad in ("0", "-1", "two"):
            with self.assertRaises(SystemExit):
                resex_sim.main(["paper", "--jobs", bad])


class _FakeVM:

    def __init__(self, mean, mb_s):
        self.latency_mean_us = mean
        self.throughput_mb_s = mb_s


class _FakeRun:
    """A run's result as the sweep reads it: the SLA holds up to a 50% cap."""

    wall_s = 0.0

    def __init__(self, cap):
        self.cap = cap

    def vm(self, name):
        if name == paper.REPORTING:
            return _FakeVM(100.0 if self.cap <= 50.0 else 1e6, 1.0)
        return _FakeVM(1.0, self.cap)


def _fake_run(duration_s, scenario_name, policy, limited=None):
    return _FakeRun(100.0 if limited is None else limited[1])


class SchedulingTest(unittest.TestCase):

    def test_a_sweep_bisects_as_soon_as_its_grid_is_in(self):
        made = []
        ev = paper.Evaluation(duration_s=0.1, jobs=2, progress=made.append)
        with mock.patch.object(paper, "_run", _fake_run):
            ev._prefetch()
        self.assertTrue(ev._capped)
        bisections = [i for i, line in enumerate(made) if line.endswith(" 55.0: 0.0 s")]
        policies = [i for i, line in enumerate(made) if " io_shares: " in line]
        self.assertEqual(len(paper.SWEEP), len(bisections))
        # Without waiting for the runs of the policies, which nothing waits for.
        self.assertLess(min(bisections), max(policies))


class StaticCapSweepTest(unittest.TestCase):

    def test_the_sweep_runs_without_the_market_and_gets_the_none_policy_run(self):
        from resex_libvirt.sim import runner
        from resex_libvirt.sim import scenario
        sc = paper.with_limit(scenario.load("paper_64k_vs_2m").with_duration(0.1), "vm2m", 30.0)
        want = runner.run(sc, "none")
        ev = paper.Evaluation(duration_s=0.1)
        in_process = ev.capped_result("paper_64k_vs_2m", "vm2m", 30.0)
        in_worker = paper._run(0.1, "paper_64k_vs_2m", "none", ("vm2m", 30.0))
        for res in (in_process, in_worker):
            self.assertEqual([], res.epochs)       # no market
            self.assertEqual(want.vms, res.vms)

    def test_the_uncontrolled_runs_of_the_figures_run_without_the_market_too(self):
        from resex_libvirt.sim import runner
        from resex_libvirt.sim import scenario
        want = runner.run(scenario.load("paper_64k_vs_64k").with_duration(0.1), "none")
        got = paper.Evaluation(duration_s=0.1).result("paper_64k_vs_64k", "none")
        self.assertEqual([], got.epochs)
        self.assertEqual(want.vms, got.vms)
        self.assertEqual(want.series["cap_pct"], got.series["cap_pct"])
        # Fig. 8 reads the caps of the uncontrolled run from that series.
        self.assertEqual(paper._late_cap_min(want), paper._late_cap_min(got))
