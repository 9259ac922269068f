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

"""resex-agent's command line: --check, the metrics endpoint, the demo's tables."""

import contextlib
import io
import os
import socket
import tempfile
import unittest

from resex_agent import resex_agent


def write_conf(tmp, extra=""):
    path = os.path.join(tmp, "agent.conf")
    with open(path, "w") as f:
        f.write("[agent]\nhost = sim-cli\nhost_driver = simulated\nstate_dir = %s\n"
                "[sim]\nscenario = paper_64k_vs_2m\nrealtime = 0\n"
                "[board]\nurl = sqlite:///%s/board.sqlite\n%s" % (tmp, tmp, extra))
    return path


class CliTest(unittest.TestCase):

    def test_check_passes_on_the_simulated_host(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = resex_agent.main(["--config-file", write_conf(tmp), "--check"])
            self.assertEqual(0, rc, out.getvalue())
            self.assertIn("vm64k", out.getvalue())

    def test_check_fails_on_a_bad_scenario(self):
        with tempfile.TemporaryDirectory() as tmp:
            conf = write_conf(tmp)
            with open(conf) as f:
                text = f.read().replace("paper_64k_vs_2m", "no_such_scenario")
            with open(conf, "w") as f:
                f.write(text)
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(1, resex_agent.main(["--config-file", conf, "--check"]))

    def test_a_busy_metrics_port_is_a_clear_start_failure(self):
        with tempfile.TemporaryDirectory() as tmp, socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            conf = write_conf(tmp, "[metrics]\nenabled = true\nport = %d\n" % port)
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.assertEqual(1, resex_agent.main(["--config-file", conf]))
            self.assertIn("cannot start", err.getvalue())

    def test_the_demo_run_ends_with_the_tables_and_the_uncontrolled_contrast(self):
        with tempfile.TemporaryDirectory() as tmp:
            conf = write_conf(tmp, "[agent]\nprint_table = true\nmax_epochs = 2\n")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(0, resex_agent.main(["--config-file", conf]))
            text = out.getvalue()
            self.assertIn("What the agent saw and did (2 epochs, policy io_shares)", text)
            self.assertIn("uncontrolled", text)
