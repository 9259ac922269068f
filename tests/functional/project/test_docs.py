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
