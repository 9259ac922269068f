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

from resex_libvirt.sim import cli
from resex_libvirt.sim import paper


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
                cli.main(["paper", "--jobs", bad])
