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

"""The release notes lint clean and build without a warning (``tox -e releasenotes``)."""

import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
RENO = os.path.join(os.path.dirname(sys.executable), "reno")


@unittest.skipUnless(os.path.exists(os.path.join(ROOT, ".git")),
                     "reno reads the notes from git history: not a git checkout")
@unittest.skipUnless(os.path.exists(RENO),
                     "reno is not installed in this venv (make bootstrap installs it)")
class ReleaseNotesTest(unittest.TestCase):

    def run_ok(self, *argv):
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        return proc.stdout

    def test_every_note_passes_reno_lint(self):
        self.run_ok(RENO, "lint")

    def test_the_notes_build_with_warnings_as_errors_and_open_with_the_first_release(self):
        with tempfile.TemporaryDirectory() as out:
            self.run_ok(sys.executable, "-m", "sphinx", "-q", "-W", "-b", "html",
                        os.path.join(ROOT, "releasenotes", "source"), out)
            with open(os.path.join(out, "unreleased.html"), encoding="utf-8") as f:
                html = f.read()
        self.assertIn("First release of resex-libvirt", html)
        self.assertIn("resex.policies", html)
