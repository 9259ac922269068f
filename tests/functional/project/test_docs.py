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

"""The documentation builds without a single warning (what ``tox -e docs`` runs)."""

import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


class DocsTest(unittest.TestCase):

    def test_sphinx_builds_the_docs_with_warnings_as_errors(self):
        with tempfile.TemporaryDirectory() as out:
            proc = subprocess.run(
                [sys.executable, "-m", "sphinx", "-q", "-W", "-b", "html",
                 os.path.join(ROOT, "doc", "source"), out],
                capture_output=True, text=True, timeout=600)
            self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
            self.assertTrue(os.path.exists(os.path.join(out, "index.html")))
