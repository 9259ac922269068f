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

"""Every reference in the tree points to something a reader can open.

A paper is cited by its title or authors and section; the project's design
lives in pages under ``doc/source/``. A reference to a file that is not in
the repository (the founders' private brief), or to a tracker number that
means nothing to a reader of the code, fails here, and so does a path to a
doc page or a module that does not exist.
"""

import os
import re
import subprocess
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

#: Names of documents outside the repository, and tracker numbers.
DANGLING = re.compile(
    r"DESIGN\.md|STYLE\.md|FIELD[- ]NOTES|\bseed 00\d\b|\bissues? #?\d+\b", re.IGNORECASE)
#: A path into the tree that a docstring or a page tells the reader to open.
PATH = re.compile(r"(?<![\w/.-])((?:doc/source|resex_libvirt|resex_research|agent|nova_filter|"
                  r"benchex|bench|devstack|etc|tests|tools)/[\w./-]*\w)")
THIS = os.path.relpath(os.path.abspath(__file__), ROOT)


def tracked():
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        out = ""
    files = out.split()
    if not files:  # an exported tree without git: walk it
        for dirpath, dirnames, filenames in os.walk(ROOT):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in (
                "build", "__pycache__") and not d.endswith(".egg-info")]
            files += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in filenames]
    return [f for f in files
            if f.endswith((".py", ".rst", ".md", ".toml", ".sh", ".conf", ".cfg", ".ini",
                           ".yaml", ".c", ".txt", "Makefile"))
            and not f.startswith(".ci/") and f != THIS]


def read(rel):
    try:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return ""


class ReferencesTest(unittest.TestCase):

    def test_no_reference_to_documents_outside_the_repository(self):
        found = []
        for rel in tracked():
            for n, line in enumerate(read(rel).splitlines(), 1):
                if DANGLING.search(line):
                    found.append("%s:%d: %s" % (rel, n, line.strip()))
        self.assertEqual([], found, "cite the paper by title and section, or a doc page")

    def test_every_path_named_in_code_and_docs_exists(self):
        missing = []
        for rel in tracked():
            if rel.startswith(("releasenotes/", "upper-constraints")):
                continue
            for n, line in enumerate(read(rel).splitlines(), 1):
                for path in PATH.findall(line):
                    path = path.rstrip(".")
                    if any(c in path for c in "*{}<>$") or path.endswith(("_", "/")):
                        continue
                    if not os.path.exists(os.path.join(ROOT, path)):
                        missing.append("%s:%d: %s" % (rel, n, path))
        self.assertEqual([], missing)

    def test_the_rules_catch_what_they_are_for(self):
        self.assertTrue(DANGLING.search("see DESIGN.md"))
        self.assertTrue(DANGLING.search("(issue 8)"))
        self.assertTrue(DANGLING.search("FIELD-NOTES: 1.4 ms"))
        self.assertFalse(DANGLING.search("random.Random(seed)"))
        self.assertEqual(["doc/source/lab.rst"], PATH.findall("see doc/source/lab.rst."))
        self.assertEqual(["resex_research/paper.py"],
                         PATH.findall("(``resex_research/paper.py``)"))
