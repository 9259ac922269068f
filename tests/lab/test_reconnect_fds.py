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

"""Lab test: a libvirtd restart costs the agent's connection no file descriptor.

The hour-long soak (``make soak``) found the agent one descriptor up after
each libvirtd restart: a connection closed with its domain events still
registered is never freed by libvirt, and its socket stays open. Here the
project's :class:`~resex_libvirt.hypervisor.connection.Connection`, with a
lifecycle callback as the agent registers one, follows the lab's real
libvirtd through three SIGKILL restarts; the process's open descriptors are
counted before and after.
"""

import os
import time

import libvirt

from resex_libvirt.hypervisor import connection
from tests.lab import base
from tests.lab import harness
from tests import machine

RESTARTS = 3


def open_fds():
    return len(os.listdir("/proc/self/fd"))


class ReconnectLeaksNothingTest(base.LabTestCase):

    @classmethod
    def set_up_lab(cls):
        cls.conn = connection.Connection(harness.URI, backoff_min=0.1, backoff_max=0.5)
        cls.addClassCleanup(cls.conn.close)
        cls.conn.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, lambda *a: None)
        cls.conn.get().getVersion()
        time.sleep(0.5)
        cls.before = open_fds()
        cls.after = []
        for _ in range(RESTARTS):
            cls.lab.libvirtd.kill()
            cls.lab.libvirtd.start()
            machine.wait_for(cls._answers, 30.0, step=0.1)
            time.sleep(0.5)
            cls.after.append(open_fds())

    @classmethod
    def _answers(cls):
        try:
            cls.conn.get().getVersion()
            return cls.conn.opens > len(cls.after) + 1
        except Exception:
            return False

    def test_each_restart_reopens_the_connection(self):
        self.assertEqual(RESTARTS + 1, self.conn.opens)

    def test_the_open_descriptors_stay_as_they_were(self):
        print("\nopen descriptors: %d before, %s after each of %d libvirtd restarts"
              % (self.before, self.after, RESTARTS))
        self.assertEqual([self.before] * RESTARTS, self.after)
