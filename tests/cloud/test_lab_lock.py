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


"""The cloud's lab-lock holder: a test's cloud does not lock the lab for ever.

A test runner killed during the cloud smoke (a timeout, a ^C) once left the
``sleep`` that holds ``/tmp/resex-lab.lock`` behind, and every later lab run
on the machine waited on it. These tests use a lock file of their own.
"""

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests import machine

# Takes the lock as the cloud does in a child process, prints the holder's
# PID, then dies without any clean-up (as a killed runner does).
CHILD = """
import json, os, sys
from tests.cloud import cloud, procs
table = procs.ProcessTable(sys.argv[2])
cloud.hold_lab_lock(table, sys.argv[3], with_caller=sys.argv[4] == "1", path=sys.argv[1])
print(json.dumps(table.get(cloud.LAB_LOCK_HOLDER)["pid"]), flush=True)
os._exit(0)
"""


def _free(path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


class LabLockHolderTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="resex-lablock-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.lock = os.path.join(self.dir, "lab.lock")

    def _take_and_die(self, with_caller):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        out = subprocess.run(
            [sys.executable, "-c", CHILD, self.lock, os.path.join(self.dir, "procs.json"),
             os.path.join(self.dir, "lab-lock.log"), "1" if with_caller else "0"],
            cwd=root, capture_output=True, text=True, timeout=60, check=True)
        holder = json.loads(out.stdout)
        self.addCleanup(lambda: machine.alive(holder) and os.kill(holder, 9))
        return holder

    def _released_within(self, seconds):
        return machine.wait_for(lambda: _free(self.lock), seconds, step=0.05)

    def test_a_tests_cloud_releases_the_lock_when_its_runner_dies(self):
        holder = self._take_and_die(with_caller=True)
        self.assertTrue(self._released_within(10), "holder %d still has the lock" % holder)

    def test_make_clouds_lock_outlives_the_command_until_cloud_down(self):
        holder = self._take_and_die(with_caller=False)
        self.assertTrue(machine.alive(holder))
        self.assertFalse(_free(self.lock))
