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

"""BenchEx is its own distribution: standard library only, installable in a bare Python.

It runs inside tenant guests, where neither resex-libvirt nor its
dependencies are installed. The wheel is built once from ``benchex/`` with
this environment's setuptools (offline), then installed with pip into a
fresh ``python -m venv`` (no system site packages, no index, no
dependencies), and run from there. The venv is made ``--without-pip`` and
this environment's pip installs into it (``pip --python``): the same
install, without the seconds ``ensurepip`` costs.
"""

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DIST = os.path.join(ROOT, "benchex")
PACKAGE = DIST


def _modules():
    return sorted(name[:-3] for name in os.listdir(PACKAGE) if name.endswith(".py"))


class TestStandardLibraryOnly(unittest.TestCase):

    def test_every_benchex_import_is_the_standard_library_or_benchex(self):
        outside = []
        for module in _modules():
            path = os.path.join(PACKAGE, module + ".py")
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top != "benchex" and top not in sys.stdlib_module_names:
                        outside.append("%s imports %s" % (module, name))
        self.assertEqual([], outside)


def _can_build_wheels():
    """setuptools builds wheels with the ``wheel`` package, or by itself from 70.1 on."""
    return any(importlib.util.find_spec(m) is not None
               for m in ("wheel", "setuptools.command.bdist_wheel"))


@unittest.skipUnless(_can_build_wheels(), "neither the wheel package nor setuptools >= 70.1 "
                     "in this venv (make bootstrap installs wheel)")
class TestBareVenvInstall(unittest.TestCase):

    def run_ok(self, *argv, **kwargs):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)
        self.assertEqual(0, proc.returncode, "%s\n%s\n%s" % (argv, proc.stdout, proc.stderr))
        return proc.stdout

    def test_benchex_installs_and_runs_in_a_bare_venv_with_no_other_package(self):
        with tempfile.TemporaryDirectory(prefix="benchex-venv-") as tmp:
            # Built from a copy: the build leaves nothing in the repository.
            source = shutil.copytree(DIST, os.path.join(tmp, "benchex"),
                                     ignore=shutil.ignore_patterns(
                                         "build", "*.egg-info", "__pycache__"))
            wheels = os.path.join(tmp, "wheels")
            self.run_ok(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "--no-build-isolation", "--no-index", "-w", wheels, source)
            (wheel,) = os.listdir(wheels)
            venv = os.path.join(tmp, "venv")
            self.run_ok(sys.executable, "-m", "venv", "--without-pip", venv)
            python = os.path.join(venv, "bin", "python")
            # A clean environment and a directory outside the repository, so
            # nothing but the bare venv can supply a module.
            env = {"PATH": os.path.join(venv, "bin") + ":/usr/bin:/bin",
                   "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
            pip = (sys.executable, "-m", "pip", "--python", python)
            self.run_ok(*pip, "install", "-q", "--no-deps", "--no-index",
                        os.path.join(wheels, wheel), env=env, cwd=tmp)
            installed = self.run_ok(*pip, "list", "--format=freeze", env=env, cwd=tmp)
            self.assertEqual(["resex-benchex"],
                             [line.split("==")[0] for line in installed.split()])
            usage = self.run_ok(os.path.join(venv, "bin", "benchex"), "--help",
                                env=env, cwd=tmp)
            self.assertIn("{server,client,status}", usage)
            probe = ("import importlib, sys\n"
                     "for m in sys.argv[1:]:\n"
                     "    importlib.import_module('benchex.' + m)\n"
                     "for m in ('resex_libvirt', 'resex_agent', 'oslo_config'):\n"
                     "    try:\n"
                     "        importlib.import_module(m)\n"
                     "    except ImportError:\n"
                     "        continue\n"
                     "    sys.exit(m + ' is importable in the bare venv')\n"
                     "import benchex.wire as w\n"
                     "print(w.parse(w.encode(3, 200.0, 5.0, 230.0), w.SOURCE_CHANNEL).n)\n")
            self.assertEqual("3\n", self.run_ok(python, "-c", probe, *_modules(),
                                                env=env, cwd=tmp))
