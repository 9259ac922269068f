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

"""The sample configuration files in etc/ are what oslo-config-generator makes now."""

import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


class SampleConfigTest(unittest.TestCase):

    def check(self, generator, sample):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "sample.conf")
            subprocess.run(
                [sys.executable, "-m", "oslo_config.generator", "--config-file",
                 os.path.join(ROOT, "etc", "resex", generator), "--output-file", out],
                cwd=ROOT, check=True, capture_output=True, timeout=300)
            with open(out) as f:
                fresh = f.read()
        with open(os.path.join(ROOT, "etc", "resex", sample)) as f:
            committed = f.read()
        self.assertEqual(fresh, committed, "etc/resex/%s is stale: run `make genconfig`" % sample)

    def test_the_agent_sample_is_current(self):
        self.check("resex-agent-config-generator.conf", "resex-agent.conf.sample")

    def test_the_nova_sample_is_current(self):
        self.check("resex-nova-config-generator.conf", "resex-nova.conf.sample")

    def test_the_placement_sync_sample_is_current(self):
        self.check("resex-placement-sync-config-generator.conf",
                   "resex-placement-sync.conf.sample")
