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

"""The deprecated ``nova_filter`` paths load the classes of :mod:`resex_nova`.

Each probe runs in a Python of its own, isolated (``-I``: neither the
checkout's directory nor PYTHONPATH on its path) and away from the checkout,
so ``nova_filter`` is the installed shim (the editable install maps it to
compat/nova_filter), not the checkout's directory of the same name.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

PROBE = """
import json
import sys

import nova_filter.extra_specs
import nova_filter.filter
import nova_filter.weigher
import resex_nova.extra_specs
import resex_nova.filter
import resex_nova.weigher

json.dump({
    "filter": nova_filter.filter.ResExCongestionFilter is
    resex_nova.filter.ResExCongestionFilter,
    "weigher": nova_filter.weigher.ResExCongestionWeigher is
    resex_nova.weigher.ResExCongestionWeigher,
    "extra_specs": nova_filter.extra_specs is resex_nova.extra_specs,
}, sys.stdout)
"""


class OldPathTest(unittest.TestCase):

    def run_isolated(self, *args):
        with tempfile.TemporaryDirectory() as cwd:
            proc = subprocess.run(
                [sys.executable, "-I"] + list(args), cwd=cwd, capture_output=True, text=True,
                timeout=120, env=dict(os.environ, OS_NOVA_DISABLE_EVENTLET_PATCHING="1"))
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        return proc

    def test_the_old_paths_name_the_same_classes_and_warn_once(self):
        proc = self.run_isolated("-c", PROBE)
        probe = json.loads(proc.stdout)
        # The checkout's nova_filter/ (resex_nova's own directory) imported
        # under its old name would be a second copy: other classes, no warning.
        self.assertEqual({"filter": True, "weigher": True, "extra_specs": True}, probe)
        self.assertEqual(1, proc.stderr.count("nova_filter is deprecated"), proc.stderr)

    def test_the_old_check_command_runs_the_check(self):
        proc = self.run_isolated("-m", "nova_filter.check", "--help")
        self.assertIn("--config-file", proc.stdout)
        self.assertIn("python -m resex_nova.check", proc.stdout)
