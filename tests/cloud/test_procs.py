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


"""The process table: what the cloud starts it stops by PID, and nothing else."""

import os
import shutil
import signal
import subprocess
import tempfile
import unittest

from tests.cloud import procs
from tests import machine


class ProcessTableTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="resex-procs-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.table = procs.ProcessTable(os.path.join(self.dir, "procs.json"))

    def test_stop_takes_the_whole_process_group_down(self):
        # A start script whose real work is a child (RabbitMQ's beam, gunicorn's workers).
        proc = self.table.start("svc", ["sh", "-c", "sleep 300 & sleep 300 & wait"],
                                os.path.join(self.dir, "svc.log"))
        self.addCleanup(lambda: [os.kill(p, signal.SIGKILL)
                                 for p in machine.group_members(proc.pid)])
        machine.wait_for(lambda: len(machine.group_members(proc.pid)) == 3, 10)
        self.assertEqual(3, len(machine.group_members(proc.pid)))
        self.assertTrue(self.table.stop("svc", timeout=5))
        self.assertEqual([], machine.group_members(proc.pid))
        self.assertIsNone(self.table.get("svc"))

    def test_a_reused_pid_is_never_signalled(self):
        other = subprocess.Popen(["sleep", "300"])
        self.addCleanup(other.wait)
        self.addCleanup(other.kill)
        # The table says "svc" had this PID, but a process started at another time.
        self.table.add("svc", other.pid, ["sleep"], os.path.join(self.dir, "svc.log"))
        entries = self.table.load()
        entries[0]["started"] -= 1
        self.table._save(entries)
        self.assertFalse(self.table.stop("svc", timeout=1))
        self.assertIsNone(other.poll())

    def test_the_table_outlives_the_process_that_wrote_it(self):
        proc = self.table.start("svc", ["sleep", "300"], os.path.join(self.dir, "svc.log"))
        self.addCleanup(proc.wait)
        again = procs.ProcessTable(self.table.path)
        entry = again.get("svc")
        self.assertEqual(proc.pid, entry["pid"])
        self.assertTrue(machine.alive(entry["pid"], entry["started"]))
        again.stop_all()
        self.assertEqual([], again.load())
        self.assertIsNotNone(proc.poll())
