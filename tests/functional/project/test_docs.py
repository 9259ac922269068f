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

import importlib.util
import os
import re
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

    def test_every_page_is_listed_once_in_the_index(self):
        source = os.path.join(ROOT, "doc", "source")
        spec = importlib.util.spec_from_file_location("doc_conf", os.path.join(source, "conf.py"))
        conf = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(conf)
        with open(os.path.join(source, "index.rst")) as f:
            own = re.findall(r"(?m)^   (\w[\w-]*)$", f.read())
        listed = own + conf.area_pages(source)
        pages = sorted(f[:-4] for f in os.listdir(source) if f.endswith(".rst"))
        self.assertEqual(sorted(set(listed)), sorted(listed), "a page listed twice")
        self.assertEqual(sorted(set(pages) - {"index"}), sorted(listed))
