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

"""The research is its own distribution, and the one that installs ``resex-sim``.

Read from ``resex_research/pyproject.toml`` and ``setup.cfg`` as written, so
a subpackage or a scenario added to the research and left out of its
distribution fails here, not on a machine that installed it.
"""

import configparser
import fnmatch
import importlib
import os
import tomllib
import unittest

import resex_research

HERE = os.path.dirname(os.path.abspath(resex_research.__file__))
ROOT = os.path.dirname(HERE)


def pyproject():
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def packages_on_disk():
    """Every package of the research: a directory of it with an ``__init__.py``.

    Not its ``build/`` (setuptools' copy, left by a wheel built in place).
    """
    found = []
    for dirpath, dirnames, filenames in os.walk(HERE):
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.endswith(".egg-info")
                       and not (dirpath == HERE and d == "build")]
        if "__init__.py" in filenames:
            rel = os.path.relpath(dirpath, HERE)
            found.append("resex_research" + ("" if rel == "." else "." + rel.replace(os.sep, ".")))
    return sorted(found)


class DistributionTest(unittest.TestCase):

    def test_it_is_resex_research_and_depends_on_the_product(self):
        project = pyproject()["project"]
        self.assertEqual("resex-research", project["name"])
        self.assertIn("resex-libvirt", project["dependencies"])
        # The fleet study places with nova's scheduler code: an extra, not a must.
        self.assertEqual(["nova"], project["optional-dependencies"]["fleet"])

    def test_every_package_of_the_research_is_in_the_distribution(self):
        self.assertEqual(packages_on_disk(), sorted(pyproject()["tool"]["setuptools"]["packages"]))

    def test_every_scenario_of_the_fleet_study_ships(self):
        patterns = pyproject()["tool"]["setuptools"]["package-data"]["resex_research.cluster"]
        scenarios = os.path.join(HERE, "cluster", "scenarios")
        names = ["scenarios/" + n for n in os.listdir(scenarios) if n.endswith(".toml")]
        self.assertTrue(names)
        self.assertEqual([], [n for n in names
                              if not any(fnmatch.fnmatch(n, p) for p in patterns)])

    def test_resex_sim_is_the_researchs_command_and_not_the_products(self):
        target = pyproject()["project"]["scripts"]["resex-sim"]
        module, _, function = target.partition(":")
        self.assertEqual("resex_research.resex_sim", module)
        self.assertTrue(callable(getattr(importlib.import_module(module), function)))
        setup = configparser.ConfigParser()
        setup.read(os.path.join(ROOT, "setup.cfg"))
        scripts = setup["entry_points"]["console_scripts"]
        self.assertNotIn("resex-sim", scripts)
        self.assertNotIn("resex_research", setup["options"]["packages"].split())
