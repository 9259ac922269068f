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

"""SIGHUP makes a running ``resex-agent`` re-read its mutable options.

A real ``resex-agent`` process runs the simulated paper testbed paced at
wall-clock speed (a copy of ``paper_64k_vs_2m`` lengthened to ten minutes,
so the run cannot end by itself during the test); the test rewrites
``[market] policy`` in its configuration file, sends SIGHUP, reads the
log line "policy changed from io_shares to free_market", then stops the
agent with SIGTERM and sees it exit cleanly.
"""

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

from resex_libvirt.sim import scenario as scenario_mod

#: Guard against a hung agent, not a timing assertion.
WAIT_S = 120

CONF = """[DEFAULT]
debug = false

[agent]
host_driver = simulated
max_epochs = 0

[board]
url =

[sim]
scenario = %(scenario)s
realtime = 1.0

[market]
policy = %(policy)s
"""


class SighupReloadTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="resex-reload-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        packaged = os.path.join(os.path.dirname(scenario_mod.__file__), "scenarios",
                                "paper_64k_vs_2m.toml")
        with open(packaged) as f:
            text = f.read()
        text, n = re.subn(r"(?m)^duration_s\s*=.*$", "duration_s = 600.0", text)
        self.assertEqual(1, n)
        self.scenario = os.path.join(self.tmp, "long.toml")
        with open(self.scenario, "w") as f:
            f.write(text)
        self.conf = os.path.join(self.tmp, "resex-agent.conf")
        self.write_conf("io_shares")

    def write_conf(self, policy):
        with open(self.conf, "w") as f:
            f.write(CONF % {"scenario": self.scenario, "policy": policy})

    def start_agent(self):
        proc = subprocess.Popen(
            [sys.executable, "-m", "resex_agent.resex_agent", "--config-file", self.conf],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = queue.Queue()

        def pump():
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()

        def stop():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
            reader.join(timeout=WAIT_S)

        self.addCleanup(stop)
        return proc, lines

    def wait_for(self, lines, needle, seen):
        while True:
            try:
                line = lines.get(timeout=WAIT_S)
            except queue.Empty:
                self.fail("no %r within %d s; output:\n%s" % (needle, WAIT_S, "".join(seen)))
            if line is None:
                self.fail("agent exited before %r; output:\n%s" % (needle, "".join(seen)))
            seen.append(line)
            if needle in line:
                return line

    def test_sighup_swaps_the_policy_named_in_the_rewritten_file(self):
        proc, lines = self.start_agent()
        seen = []
        self.wait_for(lines, "policy io_shares", seen)
        self.wait_for(lines, "epoch 0:", seen)
        self.write_conf("free_market")
        proc.send_signal(signal.SIGHUP)
        self.wait_for(lines, "policy changed from io_shares to free_market", seen)
        self.wait_for(lines, "configuration reloaded", seen)
        self.assertIsNone(proc.poll(), "the agent must keep running after SIGHUP")
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(0, proc.wait(timeout=WAIT_S), "".join(seen))
