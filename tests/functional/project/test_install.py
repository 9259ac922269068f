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

"""The wheels install and work outside the checkout, as an operator installs them.

The wheels of the three distributions are built, installed with their
dependencies (upper-constraints.txt, resex-benchex from the built wheel: it is
on no index) into a new virtual environment in a temporary directory, and
then run from there with no access to the checkout: no PYTHONPATH, another
working directory. A file missing from a wheel, an entry point that names a
moved module, or a requirement no index has fails here, where the tests that
import from the checkout cannot see it. One to two minutes with pip's cache warm
(the first run downloads nova's dependencies).
"""

import configparser
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
#: The directories of the distributions (resex-libvirt, resex-benchex, resex-research).
DISTRIBUTIONS = (ROOT, os.path.join(ROOT, "benchex"), os.path.join(ROOT, "resex_research"))

#: Run by the installed Python: loads the ResEx parts the way nova-scheduler
#: and nova-api do, and says where every module came from.
NOVA_PROBE = textwrap.dedent("""
    import json
    import os
    import sys

    from nova.api.validation.extra_specs import validators
    from nova.scheduler import filters
    from nova.scheduler import weights

    available = filters.HostFilterHandler().get_matching_classes(
        ["nova.scheduler.filters.all_filters", "resex_nova.filter.ResExCongestionFilter"])
    weighers = weights.HostWeightHandler().get_matching_classes(
        ["resex_nova.weigher.ResExCongestionWeigher"])
    validators.load_validators()
    libvirt_loaded = "libvirt" in sys.modules
    import importlib.util
    import benchex, resex_agent, resex_nova, resex_libvirt, resex_research
    json.dump({
        "filters": [c.__module__ + "." + c.__name__ for c in available],
        "weighers": [c.__module__ + "." + c.__name__ for c in weighers],
        "validators": sorted(k for k in validators.VALIDATORS if k.startswith("resex:")),
        "libvirt_loaded": libvirt_loaded,
        "files": [m.__file__ for m in (resex_agent, benchex, resex_nova, resex_libvirt,
                                       resex_research)],
        "agent_found": importlib.util.find_spec("agent") is not None,
        "prefix": sys.prefix,
        "path": [os.path.abspath(p) for p in sys.path],
    }, sys.stdout)
""")

#: Run by the installed Python: loads the scheduler's classes by the paths
#: nova.conf files of the last release name (the deprecated package).
OLD_PATH_PROBE = textwrap.dedent("""
    import json
    import sys

    from nova.scheduler import filters
    from nova.scheduler import weights

    import resex_nova.filter
    import resex_nova.weigher

    available = filters.HostFilterHandler().get_matching_classes(
        ["nova_filter.filter.ResExCongestionFilter"])
    weighers = weights.HostWeightHandler().get_matching_classes(
        ["nova_filter.weigher.ResExCongestionWeigher"])
    json.dump({
        "same_classes": (available == [resex_nova.filter.ResExCongestionFilter]
                         and weighers == [resex_nova.weigher.ResExCongestionWeigher]),
        "shim": sys.modules["nova_filter"].__file__,
        "prefix": sys.prefix,
    }, sys.stdout)
""")

#: The demo's agent (etc/resex/resex-agent-demo.conf): the simulated testbed.
SIMULATED_CONF = """
[agent]
host_driver = simulated
host = sim-install
state_dir = {state}
[sim]
scenario = paper_64k_vs_2m
[market]
policy = io_shares
[board]
url = sqlite:///{state}/board.sqlite
"""

#: The libvirt driver on libvirt's own test driver: the [libvirt] extra at work.
LIBVIRT_CONF = """
[agent]
host_driver = libvirt
host = install-check
state_dir = {state}
[libvirt]
connection_uri = test:///default
[fabric]
source = none
[latency]
probe_socket_path = {state}/latency.sock
[board]
url = sqlite:///{state}/board.sqlite
"""


def _run(argv, **kwargs):
    """Run argv; on failure the assertion shows what it printed, not just its status."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)
    if proc.returncode:
        raise AssertionError("%s exited %d:\n%s\n%s" % (
            " ".join(argv), proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))
    return proc


def listed_packages():
    """``{package: directory}`` as setup.cfg's ``[options]`` installs them."""
    setup = configparser.ConfigParser()
    setup.read(os.path.join(ROOT, "setup.cfg"))
    mapped = dict(line.split(" = ") for line in setup["options"]["package_dir"].split("\n")
                  if line.strip())
    out = {}
    for package in setup["options"]["packages"].split():
        top, _, rest = package.partition(".")
        out[package] = os.path.join(mapped.get(top, top), *rest.split(".") if rest else ())
    return out


class PackageListTest(unittest.TestCase):
    """setup.cfg lists every package: ``find:`` does not see the mapped names."""

    def test_every_package_directory_is_listed_under_its_installed_name(self):
        listed = listed_packages()
        self.assertEqual("agent", listed["resex_agent"])
        self.assertEqual("nova_filter", listed["resex_nova"])
        self.assertEqual(os.path.join("compat", "nova_filter"), listed["nova_filter"])
        self.assertNotIn("agent", listed)
        tops = {d.split(os.sep)[0] for d in listed.values()} | {"compat"}
        found = sorted(os.path.relpath(dirpath, ROOT)
                       for top in tops
                       for dirpath, _, files in os.walk(os.path.join(ROOT, top))
                       if "__init__.py" in files)
        self.assertEqual(found, sorted(listed.values()))


class InstalledFromWheelsTest(unittest.TestCase):
    """An operator's install from the built wheels, away from the checkout."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="resex-install-")
        if os.path.commonpath([cls.tmp, ROOT]) == ROOT:
            shutil.rmtree(cls.tmp)
            raise AssertionError("the temporary directory %s is inside the checkout" % cls.tmp)
        try:
            cls._install()
        except BaseException:
            shutil.rmtree(cls.tmp)
            raise

    @classmethod
    def _install(cls):
        wheels = os.path.join(cls.tmp, "wheels")
        venv = os.path.join(cls.tmp, "venv")
        cls.bin = os.path.join(venv, "bin")
        # pip's own environment, less anything that points back at the checkout.
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        # Without isolation: the backends are the venv's pinned pbr and setuptools.
        _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
              "--no-build-isolation", "-w", wheels] + list(DISTRIBUTIONS), cwd=cls.tmp, env=env)
        _run([sys.executable, "-m", "venv", venv], cwd=cls.tmp, env=env)
        # The compute node's install, resex-research and nova (for nova's loaders).
        _run([os.path.join(cls.bin, "pip"), "install", "-q",
              "-c", os.path.join(ROOT, "upper-constraints.txt"), "--find-links", wheels,
              "resex-libvirt[libvirt]", "resex-benchex", "resex-research", "nova"],
             cwd=cls.tmp, env=env)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def installed(self, argv):
        """Run an installed command from a directory of its own, with a bare environment."""
        cwd = tempfile.mkdtemp(dir=self.tmp)
        env = {"PATH": self.bin + os.pathsep + "/usr/bin:/bin",
               "HOME": cwd, "LANG": "C.UTF-8",
               "OS_NOVA_DISABLE_EVENTLET_PATCHING": "1"}
        return _run(argv, cwd=cwd, env=env)

    def check_agent(self, conf_template):
        state = tempfile.mkdtemp(dir=self.tmp)
        conf = os.path.join(state, "resex-agent.conf")
        with open(conf, "w") as f:
            f.write(conf_template.format(state=state))
        out = self.installed([os.path.join(self.bin, "resex-agent"),
                              "--config-file", conf, "--check"]).stdout
        self.assertEqual("check passed", out.strip().splitlines()[-1], out)
        return out

    def test_the_agent_check_passes_on_the_simulated_host(self):
        out = self.check_agent(SIMULATED_CONF)
        # The scenario is package data of the wheel, not a file of the checkout.
        self.assertIn("hypervisor: ok (simulated paper_64k_vs_2m", out)

    def test_the_agent_check_passes_on_libvirt_from_the_extra(self):
        out = self.check_agent(LIBVIRT_CONF)
        self.assertIn("hypervisor: ok (test:///default", out)

    def test_nova_loads_the_filter_weigher_and_validators_from_the_wheel(self):
        probe = json.loads(self.installed(
            [os.path.join(self.bin, "python"), "-c", NOVA_PROBE]).stdout)
        self.assertIn("resex_nova.filter.ResExCongestionFilter", probe["filters"])
        self.assertEqual(["resex_nova.weigher.ResExCongestionWeigher"], probe["weighers"])
        self.assertIn("resex:latency_sla_us", probe["validators"])
        self.assertIn("resex:io_class", probe["validators"])
        # The scheduler's side never needs libvirt-python (installed here for the agent).
        self.assertFalse(probe["libvirt_loaded"])
        for path in probe["files"]:
            self.assertEqual(probe["prefix"], os.path.commonpath([path, probe["prefix"]]), path)
        for entry in probe["path"]:
            self.assertNotEqual(ROOT, os.path.commonpath([entry, ROOT]))
        # The packages install under their namespaced names only: no top-level ``agent``.
        self.assertFalse(probe["agent_found"])

    def test_nova_conf_naming_the_old_module_path_still_loads_the_classes(self):
        proc = self.installed([os.path.join(self.bin, "python"), "-c", OLD_PATH_PROBE])
        probe = json.loads(proc.stdout)
        self.assertTrue(probe["same_classes"])
        self.assertEqual(probe["prefix"], os.path.commonpath([probe["shim"], probe["prefix"]]))
        self.assertEqual(1, proc.stderr.count("nova_filter is deprecated"), proc.stderr)
        usage = self.installed([os.path.join(self.bin, "python"), "-m", "nova_filter.check",
                                "--help"])
        self.assertIn("--config-file", usage.stdout)

    def test_every_requirement_of_the_installed_distributions_is_met(self):
        # resex-benchex, on no index, came from the built wheel.
        self.installed([os.path.join(self.bin, "pip"), "check"])

    def test_libvirt_python_is_required_only_by_the_libvirt_extra(self):
        """A scheduler node installs resex-libvirt without the extra: no libvirt there."""
        requires = json.loads(self.installed([
            os.path.join(self.bin, "python"), "-c",
            "import json, importlib.metadata as m; "
            "print(json.dumps(m.requires('resex-libvirt')))"]).stdout)
        libvirt = [r for r in requires if r.startswith("libvirt-python")]
        self.assertIn('extra == "libvirt"', " ".join(libvirt))
        # pbr also lists test-requirements.txt as the extra "test".
        for requirement in libvirt:
            self.assertIn("extra ==", requirement)
        self.assertTrue(any(r.startswith("resex-benchex") for r in requires), requires)

    def test_the_research_command_runs(self):
        out = self.installed([os.path.join(self.bin, "resex-sim"), "--help"]).stdout
        self.assertIn("usage", out)
