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

"""The devstack plugin starts the real agent, or stops the stack saying why.

devstack itself cannot run here (see ``tests/unit/devstack``); its shim
runs the plugin's phases, and with ``RESEX_TEST_RUN_DIR`` set its
``run_process`` really starts the command (own session, log and PID in that
directory) and ``systemctl is-active`` asks whether that process lives. The
agent is this tree's ``resex-agent``, the board a real etcd on loopback
standing for the controller's (``SERVICE_HOST`` 127.0.0.1), and the
hypervisor libvirt's ``test:///`` driver with ``etc/resex/node-test.xml``
standing for ``qemu:///system`` (there is no libvirtd outside the lab).
Everything else is the plugin's defaults: ``[fabric] source =
libvirt_iface`` with the link discovered from this machine's default route
(its virtio NIC reports no speed, so the agent runs without the fabric
term).
"""

import os
import signal
import socket
import sys
import time
import unittest

import testtools

from resex_agent import lock as lock_mod
from resex_libvirt import board as board_mod
from tests.functional.board import etcd_server
from tests.unit.devstack import test_plugin

ROOT = test_plugin.ROOT
NODE_XML = os.path.join(ROOT, "etc", "resex", "node-test.xml")
BIN = os.path.dirname(os.path.abspath(sys.executable))
AIO = "n-api,n-sch,n-cond,n-cpu,placement-api,etcd3,resex-agent"
COMPUTE = "n-cpu,placement-client,resex-agent"
REPORT_WAIT_S = 120


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


@unittest.skipUnless(etcd_server.EtcdServer.available(), "etcd-server is not installed")
class AgentStartTest(testtools.TestCase):

    def node(self, services, etcd_port, **env):
        node = test_plugin.DevstackRun(
            self, services, SERVICE_HOST="127.0.0.1", RESEX_ETCD_PORT=str(etcd_port),
            RESEX_LIBVIRT_URI="test://" + NODE_XML, RESEX_TEST_BIN=BIN,
            RESEX_AGENT_START_WAIT="120", **env)
        node.env["RESEX_TEST_RUN_DIR"] = node.tmp
        self.addCleanup(self.stop, node)
        return node

    def pid(self, node):
        path = os.path.join(node.tmp, "resex-agent.pid")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return int(f.read())

    def log(self, node):
        path = os.path.join(node.tmp, "resex-agent.log")
        if not os.path.exists(path):
            return ""
        with open(path) as f:
            return f.read()

    def stop(self, node):
        pid = self.pid(node)
        if pid is None or not _alive(pid):
            return
        os.kill(pid, signal.SIGTERM)
        for _ in range(300):
            if not _alive(pid):
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)

    def test_with_the_plugins_defaults_the_agent_starts_and_publishes(self):
        etcd = self.useFixture(etcd_server.EtcdServer())
        node = self.node(AIO, etcd.client_port)
        result = node.stack()
        self.assertIn("run_process resex-agent|%s/resex-agent --config-file %s"
                      % (BIN, node.agent_conf), node.recorded())
        pid = self.pid(node)
        self.assertTrue(_alive(pid), self.log(node) + result.stderr[-2000:])
        # stack.sh went on once the agent said its loop runs, not on a timeout.
        self.assertIn("agent on ", self.log(node))
        self.assertNotIn("has not started its loop", result.stderr)
        host = node.agent().agent.host
        board = board_mod.open_board(etcd.url, timeout=5)
        self.addCleanup(board.close)
        deadline = time.monotonic() + REPORT_WAIT_S
        while host not in board.snapshot() and time.monotonic() < deadline:
            self.assertTrue(_alive(pid), self.log(node))
            time.sleep(0.5)
        self.assertIn(host, board.snapshot(), self.log(node))
        result = node.phases("unstack")
        self.assertEqual(0, result.returncode, result.stderr)
        for _ in range(300):
            if not _alive(pid):
                break
            time.sleep(0.1)
        self.assertFalse(_alive(pid), "unstack left the agent running")

    def test_a_compute_node_whose_controller_etcd_is_unreachable_stops_the_stack(self):
        closed = etcd_server.free_port()
        node = self.node(COMPUTE, closed)
        result = node.phases("stack install", "stack post-config", "stack extra")
        self.assertNotEqual(0, result.returncode)
        self.assertIn("resex-agent --check failed, not starting the agent", result.stderr)
        self.assertIn("ERROR: board: etcd3+http://127.0.0.1:%d" % closed, result.stderr)
        self.assertIsNone(self.pid(node))

    def test_a_busy_metrics_port_fails_the_check_and_starts_nothing(self):
        etcd = self.useFixture(etcd_server.EtcdServer())
        busy = socket.socket()
        self.addCleanup(busy.close)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        node = self.node(AIO, etcd.client_port, RESEX_METRICS_ENABLED="True",
                         RESEX_METRICS_PORT=str(port))
        result = node.phases("stack install", "stack post-config", "stack extra")
        self.assertNotEqual(0, result.returncode, self.log(node))
        self.assertIn("resex-agent --check failed, not starting the agent", result.stderr)
        self.assertIn("ERROR: metrics: [metrics] cannot listen on 127.0.0.1 port %d" % port,
                      result.stderr)
        self.assertIsNone(self.pid(node))

    def test_an_agent_that_exits_at_start_stops_the_stack_with_its_last_lines(self):
        """The check passes beside a running agent; the start then refuses a second one."""
        etcd = self.useFixture(etcd_server.EtcdServer())
        node = self.node(AIO, etcd.client_port)
        running = [lock_mod.StateDirLock(node.state_dir).acquire(),
                   lock_mod.HostLock("test://" + NODE_XML).acquire()]
        for lock in running:
            self.addCleanup(lock.release)
        result = node.phases("stack install", "stack post-config", "stack extra")
        self.assertNotEqual(0, result.returncode, self.log(node))
        self.assertIn("resex-agent exited at start; its last lines:", result.stderr)
        self.assertIn("cannot start: another resex-agent (pid %d)" % os.getpid(),
                      result.stderr)
