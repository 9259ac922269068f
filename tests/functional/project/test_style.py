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

"""The project's own rules, checked on every test run (what ``tox -e pep8`` runs).

hacking 8.1 with H905 on: no eventlet anywhere (native threads only), lazy
log arguments (H904), and the OpenStack style rules.
"""

import ast
import os
import pathlib
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

#: The longest a function of the library may be (lines, docstring included).
MAX_FUNCTION_LINES = 80


def long_functions(package, limit=MAX_FUNCTION_LINES):
    """``[(lines, "path:line name")]`` of the functions under ``package`` over ``limit``."""
    out = []
    for path in sorted(pathlib.Path(ROOT, package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out.append((lines, "%s:%d %s" % (path.relative_to(ROOT), node.lineno,
                                                     node.name)))
    return out


class StyleTest(unittest.TestCase):

    def test_flake8_with_hacking_is_clean(self):
        proc = subprocess.run(
            [sys.executable, "-m", "flake8", "resex_libvirt", "agent", "nova_filter", "compat",
             "benchex",
             "tests", "bench", "tools"],
            cwd=ROOT, capture_output=True, text=True, timeout=600)
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)

    def test_the_scheduler_side_never_imports_libvirt_or_the_agent(self):
        proc = subprocess.run(
            [sys.executable, "-c",
             "import sys, resex_nova.filter, resex_nova.weigher, resex_nova.extra_specs;"
             "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
             "('libvirt', 'resex_agent'));"
             "print(bad); sys.exit(1 if bad else 0)"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
            env=dict(os.environ, OS_NOVA_DISABLE_EVENTLET_PATCHING="1"))
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)

    def test_no_function_of_the_library_is_over_80_lines(self):
        self.assertEqual([], long_functions("resex_libvirt"))

    def test_the_function_length_check_sees_a_long_function(self):
        # The walk itself: a long function in this very file is found.
        found = long_functions("tests/functional/project", limit=5)
        self.assertIn("long_functions", " ".join(name for _, name in found))
