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

"""The base of every test class on the real libvirtd: one lab a class, torn down by PID.

A test class says what it runs on its lab (:meth:`LabTestCase.set_up_lab`),
not how to boot one; what it opens it takes through the base's helpers (or
``addClassCleanup``), so that it is closed, the lab torn down and its
working directory removed after the class, also when set-up fails half-way.
"""

import contextlib
import os
import shutil
import tempfile
import unittest

import libvirt

from resex_libvirt.hypervisor import libvirt_host
from tests.lab import experiment
from tests.lab import harness
from tests import machine


def _missing():
    if not harness.is_root():
        return "the lab needs root (libvirtd, cgroups, bridges, tc); this runner is not"
    if not os.path.exists("/usr/bin/apt-get"):
        return "the lab installs its QEMU and libvirt from Debian packages (no apt-get)"
    return None


@unittest.skipIf(_missing(), _missing())
class LabTestCase(unittest.TestCase):
    """A class of tests on one lab (:class:`tests.lab.harness.Lab` or a larger part).

    ``cls.lab`` is set up once, holding the machine-wide lab lock, and
    ``cls.workdir`` is its working directory; then :meth:`set_up_lab` runs.
    """

    #: Seconds to wait for another lab's libvirtd to go (the harness never shares one).
    LIBVIRTD_WAIT_S = 600.0

    @classmethod
    def make_lab(cls, workdir):
        """The lab part (``setup(wait_s=)``, ``teardown()``); a subclass may build a larger one."""
        return harness.Lab(workdir=workdir)

    @classmethod
    def set_up_lab(cls):
        """What the class does on its lab once, before its tests (guests, an agent, a run)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.workdir = tempfile.mkdtemp(prefix="resex-lab-%s-" % cls.__name__)
            cls.addClassCleanup(shutil.rmtree, cls.workdir, ignore_errors=True)
            cls.lab = cls.make_lab(cls.workdir)
            cls.addClassCleanup(cls.lab.teardown)
            cls.lab.setup(wait_s=cls.LIBVIRTD_WAIT_S)
            cls.set_up_lab()
        except BaseException:
            # unittest runs the class cleanups after an Exception only: a ^C
            # must not leave a libvirtd and guests behind either.
            cls.doClassCleanups()
            raise

    @classmethod
    def capped_burner(cls, name, limit_pct, initrd):
        """A CPU-burning guest whose SLA (``resex:cpu_limit_pct``) has the agent cap it."""
        return cls.lab.guest(name, initrd, role="burn", sla={"resex:cpu_limit_pct": limit_pct})

    @classmethod
    def connect(cls):
        """A connection to the lab's libvirtd, closed after the class."""
        conn = libvirt.open(harness.URI)
        cls.addClassCleanup(_close, conn)
        return conn

    @classmethod
    def hypervisor(cls, **kwargs):
        """The agent's :class:`LibvirtHypervisor` on the lab, closed after the class."""
        hyp = libvirt_host.LibvirtHypervisor(harness.URI, **kwargs)
        cls.addClassCleanup(hyp.close)
        return hyp

    @classmethod
    def agent_process(cls, name, policy="io_shares", link_gbps=1.0):
        """The real ``resex-agent`` (not started), stopped by PID after the class."""
        agent = experiment.AgentProcess(cls.workdir, name, policy, link_gbps)
        cls.addClassCleanup(lambda: agent.proc is not None and machine.stop_pid(agent.proc.pid))
        return agent


def _close(conn):
    with contextlib.suppress(libvirt.libvirtError):
        conn.close()
