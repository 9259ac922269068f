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

"""Safe defaults: the real host by default, and no simulated report under a real name."""

import contextlib
import io
import os
import socket
import tempfile
import unittest

from hypothesis import given
from hypothesis import strategies as st
from oslo_config import cfg

from resex_agent import check
from resex_agent import conf as agent_conf
from resex_agent import host_identity
from resex_agent import resex_agent
from resex_libvirt import board as board_mod
from resex_libvirt import exceptions
from tests.unit.agent import conf_helpers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DEMO_CONF = os.path.join(ROOT, "etc", "resex", "resex-agent-demo.conf")
BOARD = "sqlite:///tmp/board.sqlite"
OWN = {"compute-1", "compute-1.example.org"}


class PublishRuleTest(unittest.TestCase):

    def test_a_simulated_host_publishes_only_under_a_sim_name(self):
        self.assertIsNone(host_identity.publish_problem("simulated", "sim-demo", BOARD, OWN))
        self.assertIsNone(host_identity.publish_problem("simulated", "SIM-Lab-3", BOARD, OWN))
        problem = host_identity.publish_problem("simulated", "compute-7", BOARD, OWN)
        self.assertIn("[agent] host 'compute-7'", problem)
        self.assertIn("sim-compute-7", problem)

    def test_a_simulated_host_never_publishes_under_this_machines_names(self):
        own = {"sim-box", "sim-box.example.org"}
        for host in ("sim-box", "SIM-BOX", "sim-box.example.org"):
            problem = host_identity.publish_problem("simulated", host, BOARD, own)
            self.assertIn("this machine's name", problem)

    def test_the_machines_names_include_the_host_name_and_its_short_form(self):
        names = host_identity.machine_names()
        self.assertIn(socket.gethostname().lower(), names)
        self.assertIn(socket.gethostname().lower().split(".")[0], names)

    def test_without_a_board_a_simulated_host_may_use_any_name(self):
        for url in ("", None):
            self.assertIsNone(host_identity.publish_problem("simulated", "compute-1", url, OWN))

    def test_the_libvirt_host_publishes_under_any_name(self):
        self.assertIsNone(host_identity.publish_problem("libvirt", "compute-1", BOARD, OWN))

    @given(st.text(min_size=1, max_size=30).filter(lambda s: not s.lower().startswith("sim-")))
    def test_every_unmarked_name_is_refused_for_a_simulated_host_with_a_board(self, host):
        with self.assertRaises(exceptions.ConfigError):
            host_identity.refuse_unmarked_simulation("simulated", host, BOARD, OWN)


class DefaultsTest(unittest.TestCase):

    def test_host_driver_defaults_to_libvirt(self):
        conf = cfg.ConfigOpts()
        agent_conf.register_opts(conf)
        conf([], project="resex", default_config_files=[], default_config_dirs=[])
        self.assertEqual("libvirt", conf.agent.host_driver)

    def test_the_demo_config_names_the_simulated_host_and_a_marked_name(self):
        conf = cfg.ConfigOpts()
        agent_conf.register_opts(conf)
        conf(["--config-file", DEMO_CONF], project="resex")
        self.assertEqual("simulated", conf.agent.host_driver)
        self.assertTrue(host_identity.is_marked_simulated(conf.agent.host))
        self.assertIsNone(host_identity.publish_problem(
            conf.agent.host_driver, conf.agent.host, conf.board.url))


class StartTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name
        self.board_path = os.path.join(self.tmp, "board.sqlite")

    def write(self, text):
        path = os.path.join(self.tmp, "agent.conf")
        with open(path, "w") as f:
            f.write("[agent]\nstate_dir = %s\nmax_epochs = 1\n"
                    "[sim]\nscenario = paper_64k_vs_2m\nrealtime = 0\n"
                    "[board]\nurl = sqlite:///%s\n%s" % (self.tmp, self.board_path, text))
        return path

    def test_a_simulated_host_under_this_machines_name_is_refused_at_start(self):
        # [agent] host unset: its default is this machine's host name.
        path = self.write("[agent]\nhost_driver = simulated\n")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(1, resex_agent.main(["--config-file", path]))
        self.assertIn("cannot start: [agent] host %r is this machine's name"
                      % socket.gethostname(), err.getvalue())
        self.assertFalse(os.path.exists(self.board_path), "nothing may reach the board")

    def test_a_marked_simulated_host_starts_and_publishes_under_its_name(self):
        path = self.write("[agent]\nhost_driver = simulated\nhost = sim-start\n")
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(0, resex_agent.main(["--config-file", path]))
        board = board_mod.open_board("sqlite:///" + self.board_path)
        self.addCleanup(board.close)
        self.assertEqual({"sim-start"}, set(board.snapshot()))

    def test_the_demo_config_runs_with_its_own_board(self):
        override = os.path.join(self.tmp, "override.conf")
        with open(override, "w") as f:
            f.write("[agent]\nstate_dir = %s\nmax_epochs = 1\nprint_table = false\n"
                    "[sim]\nrealtime = 0\n[board]\nurl = sqlite:///%s\n"
                    % (self.tmp, self.board_path))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(0, resex_agent.main(["--config-file", DEMO_CONF,
                                                  "--config-file", override, "--check"]))
            self.assertEqual(0, resex_agent.main(["--config-file", DEMO_CONF,
                                                  "--config-file", override]))
        self.assertIn("host: sim-demo (driver simulated, marked 'sim-'", out.getvalue())


class CheckReportsTheHostTest(unittest.TestCase):

    def run_check(self, text):
        out = io.StringIO()
        code = check.run_check(conf_helpers.conf_from_text(text), out=out)
        return code, out.getvalue()

    def test_check_fails_naming_the_host_for_an_unmarked_simulated_host_with_a_board(self):
        code, text = self.run_check("[agent]\nhost = compute-7\n[board]\nurl = %s\n" % BOARD)
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: host: [agent] host 'compute-7' does not start with 'sim-'", text)

    def test_check_says_a_simulated_host_without_a_board_publishes_nothing(self):
        code, text = self.run_check("[agent]\nhost = compute-7\n")
        self.assertEqual(0, code, text)
        self.assertIn("host: compute-7 (driver simulated, no board: nothing is published)", text)

    def test_check_says_the_libvirt_host_reports_real_vms(self):
        text = io.StringIO()
        conf = conf_helpers.conf_from_text("[agent]\nhost = cmp1\nhost_driver = libvirt\n"
                                           "[libvirt]\nconnection_uri = test:///default\n"
                                           "events = false\n[latency]\nprobe_socket_path =\n"
                                           "[agent]\nstate_dir = %s\n" % tempfile.gettempdir())
        check.run_check(conf, out=text)
        self.assertIn("host: cmp1 (driver libvirt: reports this node's real VMs)",
                      text.getvalue())
