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

"""The one wait and the one stop by PID that the lab, the cloud and the faults share."""

import os
import subprocess
import sys
import unittest

from tests import machine

# Ignores SIGTERM: only SIGKILL stops it.
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
           "print('ready', flush=True); time.sleep(300)"


class WaitForTest(unittest.TestCase):

    def test_the_first_true_value_is_returned(self):
        values = iter([0, None, "third", "fourth"])
        self.assertEqual("third", machine.wait_for(lambda: next(values), 5.0, step=0.0))

    def test_without_what_a_timeout_returns_the_last_value(self):
        self.assertEqual([], machine.wait_for(lambda: [], 0.05))

    def test_with_what_a_timeout_says_what_did_not_happen(self):
        with self.assertRaisesRegex(AssertionError, "the guest up: not within 0 s"):
            machine.wait_for(lambda: False, 0.05, what="the guest up")

    def test_seconds_until_is_infinite_on_a_timeout(self):
        self.assertEqual(float("inf"), machine.seconds_until(lambda: False, 0.05))
        self.assertLess(machine.seconds_until(lambda: True, 5.0), 1.0)


class StopPidTest(unittest.TestCase):

    def start(self, code, **kwargs):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                text=True, **kwargs)
        self.addCleanup(proc.stdout.close)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        self.assertEqual("ready", proc.stdout.readline().strip())
        return proc

    def test_a_process_deaf_to_sigterm_is_killed_and_reaped(self):
        proc = self.start(STUBBORN)
        self.assertTrue(machine.stop_pid(proc.pid, timeout=0.2))
        self.assertFalse(machine.alive(proc.pid))
        # Reaped: no zombie left, and no status left for anybody to wait for.
        self.assertRaises(ChildProcessError, os.waitpid, proc.pid, os.WNOHANG)

    def test_a_pid_started_at_another_time_is_not_signalled(self):
        proc = self.start(STUBBORN)
        self.assertFalse(machine.stop_pid(proc.pid, machine.start_time(proc.pid) - 1))
        self.assertIsNone(proc.poll())

    def test_a_group_leaders_children_go_with_it(self):
        proc = self.start("import subprocess, time; subprocess.Popen(['sleep', '300']); "
                          "print('ready', flush=True); time.sleep(300)",
                          start_new_session=True)
        self.assertEqual(2, len(machine.group_members(proc.pid)))
        self.assertTrue(machine.stop_pid(proc.pid, timeout=5.0))
        self.assertEqual([], machine.group_members(proc.pid))

    def test_nothing_to_stop(self):
        self.assertFalse(machine.stop_pid(None))
