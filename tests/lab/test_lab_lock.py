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

"""The machine-wide lab lock: one lab (libvirtd, guests, a cloud) at a time."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests.lab import harness
from tests import machine

PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(3)
sys.exit(0)
"""

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(300)
"""


class LabLockTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        fd, self.path = tempfile.mkstemp(prefix="resex-lab-lock-")
        os.close(fd)
        self.addCleanup(os.unlink, self.path)

    def other_process_can_lock(self):
        return subprocess.run([sys.executable, "-c", PROBE, self.path]).returncode == 0

    def test_a_held_lock_keeps_another_process_out_until_released(self):
        lock = machine.LabLock(self.path)
        with lock:
            self.assertTrue(lock.held)
            self.assertFalse(self.other_process_can_lock())
        self.assertFalse(lock.held)
        self.assertTrue(self.other_process_can_lock())

    def test_nested_acquires_release_only_at_the_outermost(self):
        lock = machine.LabLock(self.path)
        lock.acquire()
        lock.acquire()
        lock.release()
        self.assertFalse(self.other_process_can_lock())
        lock.release()
        self.assertTrue(self.other_process_can_lock())

    def test_a_wait_with_a_timeout_gives_up_while_another_lab_holds_the_lock(self):
        holder = subprocess.Popen([sys.executable, "-c", HOLD, self.path],
                                  stdout=subprocess.PIPE, text=True)
        self.addCleanup(holder.wait)
        self.addCleanup(holder.kill)
        self.assertEqual("held", holder.stdout.readline().strip())
        lock = machine.LabLock(self.path)
        self.assertRaises(machine.LockTimeout, lock.acquire, 1)
        self.assertFalse(lock.held)

    def test_a_lock_handed_over_is_held_by_the_child_until_it_dies(self):
        lock = machine.LabLock(self.path)
        lock.acquire()
        child, argv = lock.hand_over(os.devnull)
        self.addCleanup(child.wait)
        self.assertEqual(["sleep", "infinity"], argv)
        self.assertFalse(lock.held)
        self.assertFalse(self.other_process_can_lock())
        child.kill()
        child.wait()
        self.assertTrue(self.other_process_can_lock())

    def test_the_lab_holds_the_lock_through_teardown_and_then_lets_go(self):
        workdir = tempfile.mkdtemp(prefix="resex-lab-lock-")
        self.addCleanup(shutil.rmtree, workdir, True)
        lab = harness.Lab(workdir=workdir, install=False)
        lab.lock = machine.LabLock(self.path)
        lab.libvirtd.proc = object()   # teardown must not start a libvirtd here
        lab.libvirtd.stop = lambda: None
        lab.lock.acquire()          # as setup() does
        lab._holding = True
        self.assertFalse(self.other_process_can_lock())
        lab.teardown()
        self.assertTrue(self.other_process_can_lock())


if __name__ == "__main__":
    unittest.main()
