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

"""``run_check`` against libvirt's built-in test driver.

A good configuration is a node XML for the ``test:///`` driver with domains
carrying the project's SLA metadata (``etc/resex/node-test.xml``); the
broken ones name a node file that does not exist (libvirt cannot open the
connection) and an etcd board on a closed loopback port. The board of the
good case is a SQLite file in a temporary directory.
"""

import io
import os
import shutil
import socket
import tempfile
import unittest

from oslo_config import cfg

from resex_agent import check
from resex_agent import conf as agent_conf
from resex_agent.conf import board as board_conf
from resex_agent.conf import fabric as fabric_conf
from resex_agent.conf import hypervisor as hypervisor_conf
from resex_agent.conf import latency as latency_conf
from resex_agent.conf import metrics as metrics_conf
from resex_agent import lock as lock_mod

NODE_XML = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                        "etc", "resex", "node-test.xml"))

#: A Nova guest with a latency SLA in its flavor, booted without hw_qemu_guest_agent.
NOVA_GUEST_WITHOUT_CONTROLLER = """
  <domain type="test">
    <name>web-1</name>
    <uuid>6a1e4b8c-0000-4000-8000-0000000000d1</uuid>
    <metadata>
      <nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">
        <nova:flavor name="m1.latency" id="7">
          <nova:extraSpecs>
            <nova:extraSpec name="resex:latency_sla_us">250</nova:extraSpec>
          </nova:extraSpecs>
        </nova:flavor>
      </nova:instance>
    </metadata>
    <memory>65536</memory>
    <vcpu>1</vcpu>
    <os><type arch="i686">hvm</type></os>
  </domain>
"""


class LibvirtCheckTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="resex-check-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def make_conf(self, uri, extra=None, probe_socket="", state_dir=None):
        conf = cfg.ConfigOpts()
        agent_conf.register_opts(conf)
        for module in (board_conf, hypervisor_conf, fabric_conf, latency_conf, metrics_conf):
            module.register_opts(conf)
        path = os.path.join(self.tmp, "resex-agent.conf")
        with open(path, "w") as f:
            f.write("[agent]\nhost = cmp1\nhost_driver = libvirt\nstate_dir = %s\n"
                    "host_lock_path = %s\n"
                    "[libvirt]\nconnection_uri = %s\nevents = false\n"
                    "[latency]\nprobe_socket_path = %s\n%s"
                    % (state_dir or os.path.join(self.tmp, "state"),
                       os.path.join(self.tmp, "host.lock"), uri, probe_socket,
                       extra or "[board]\nurl = sqlite://%s/board.sqlite\n" % self.tmp))
        conf(["--config-file", path], project="resex")
        return conf

    def run_check(self, conf):
        out = io.StringIO()
        code = check.run_check(conf, out=out)
        return code, out.getvalue()

    def test_good_node_lists_every_domain_with_its_sla_source_and_knobs(self):
        uri = "test://" + NODE_XML
        code, text = self.run_check(self.make_conf(uri))
        self.assertEqual(0, code, text)
        self.assertIn("hypervisor: ok (%s, 4 running VM(s), 4 pCPU)" % uri, text)
        rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
        self.assertEqual({"sensitive-1", "bulk-1", "broken-1", "plain-1"}, set(rows))
        self.assertIn("latency_sla_us=180", rows["sensitive-1"])
        self.assertIn("cpu_reservation_pct=40", rows["sensitive-1"])
        self.assertIn("from metadata", rows["sensitive-1"])
        # Under the default consent rule only the bulk VMs may go below their limit.
        self.assertIn("consent: opted_in (io_class=bulk)", text)
        self.assertIn("cap 200..200% (did not opt in)", rows["sensitive-1"])
        self.assertIn("cap 100..100% (did not opt in)", rows["plain-1"])
        self.assertIn(", ensemble trading-web", rows["sensitive-1"])
        self.assertNotIn("ensemble", rows["plain-1"])
        self.assertIn("io_class=bulk", rows["bulk-1"])
        self.assertIn("cap 0..150%, SLA", rows["bulk-1"])
        self.assertIn("SLA defaults from default", rows["plain-1"])
        for row in rows.values():
            # The test driver's 'fair' scheduler has no cap: monitor-only.
            self.assertIn("(monitor-only)", row)
        # --check creates nothing: neither the board nor the state directory.
        self.assertIn("board: ok (%s/board.sqlite does not exist yet: the agent creates it "
                      "at start)" % self.tmp, text)
        self.assertIn("state: ok (%s/state does not exist yet" % self.tmp, text)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "board.sqlite")))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "state")))
        self.assertTrue(text.endswith("check passed\n"))

    def test_under_all_every_domain_may_go_down_to_its_reservation(self):
        uri = "test://" + NODE_XML
        code, text = self.run_check(self.make_conf(
            uri, extra="[agent]\ncap_consent = all\n[board]\nurl =\n"))
        self.assertEqual(0, code, text)
        self.assertIn("consent: all (every VM may be capped down to its reservation)", text)
        rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
        self.assertIn("cap 40..200%, SLA", rows["sensitive-1"])
        self.assertIn("cap 0..100%, SLA", rows["plain-1"])
        self.assertNotIn("did not opt in", text)

    def test_an_existing_board_is_read(self):
        from resex_libvirt.board import sqlite as sqlite_board
        sqlite_board.SQLiteBoard("sqlite://%s/board.sqlite" % self.tmp).close()
        code, text = self.run_check(self.make_conf("test://" + NODE_XML))
        self.assertEqual(0, code, text)
        self.assertIn("board: ok (sqlite://%s/board.sqlite, 0 host(s); this host: no report yet)"
                      % self.tmp, text)

    def test_a_sensitive_vm_without_a_virtio_serial_controller_is_listed_as_unable_to_report(self):
        with open(NODE_XML) as f:
            node = f.read()
        node = node.replace("</node>", NOVA_GUEST_WITHOUT_CONTROLLER + "</node>")
        path = os.path.join(self.tmp, "node.xml")
        with open(path, "w") as f:
            f.write(node)
        code, text = self.run_check(self.make_conf("test://" + path))
        self.assertEqual(0, code, text)
        self.assertIn("latency channels: 1 VM(s) cannot report latency", text)
        self.assertIn("  web-1 (6a1e4b8c-0000-4000-8000-0000000000d1): no virtio-serial "
                      "controller", text)
        self.assertIn("hw_qemu_guest_agent=yes", text)

    def test_every_vm_that_should_report_can_says_so(self):
        code, text = self.run_check(self.make_conf("test://" + NODE_XML))
        self.assertIn("latency channels: ok", text)

    def test_unreachable_libvirt_fails_naming_the_uri(self):
        uri = "test:///nonexistent/path.xml"
        code, text = self.run_check(self.make_conf(uri))
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: hypervisor:", text)
        self.assertIn(uri, text)
        self.assertNotIn("check passed", text)

    def test_board_on_a_closed_port_fails_naming_the_board(self):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        conf = self.make_conf("test://" + NODE_XML,
                              "[board]\nurl = etcd3+http://127.0.0.1:%d\ntimeout = 1\n" % port)
        code, text = self.run_check(conf)
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: board:", text)
        self.assertIn("127.0.0.1:%d" % port, text)

    def test_check_leaves_the_running_agents_probe_socket_alone(self):
        path = os.path.join(self.tmp, "latency.sock")
        running = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(running.close)
        running.bind(path)
        running.listen(1)
        inode = os.stat(path).st_ino
        code, text = self.run_check(self.make_conf("test://" + NODE_XML, probe_socket=path))
        self.assertEqual(0, code, text)
        self.assertEqual(inode, os.stat(path).st_ino)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(client.close)
        client.connect(path)

    # What the agent would refuse at start fails --check with one line.

    def test_a_probe_socket_directory_others_can_write_fails(self):
        run = os.path.join(self.tmp, "run")
        os.makedirs(run)
        os.chmod(run, 0o777)
        code, text = self.run_check(self.make_conf(
            "test://" + NODE_XML, probe_socket=os.path.join(run, "latency.sock")))
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: probe socket: [latency] probe_socket_path: refusing the probe "
                      "socket directory %s: writable by its group and others (mode 0777)" % run,
                      text)
        self.assertEqual(1, text.count("ERROR"))

    def test_a_state_dir_under_proc_fails(self):
        code, text = self.run_check(self.make_conf("test://" + NODE_XML,
                                                   state_dir="/proc/resex"))
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: state: [agent] state_dir /proc/resex cannot hold the journal and "
                      "the lock: /proc is on proc, a kernel filesystem", text)

    def test_another_agent_holding_the_host_lock_fails(self):
        other = lock_mod.HostLock("test:///other", os.path.join(self.tmp, "host.lock"))
        other.acquire()
        self.addCleanup(other.release)
        code, text = self.run_check(self.make_conf("test://" + NODE_XML))
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: lock: another resex-agent (pid %d) holds the host lock %s/host.lock "
                      "with another state directory" % (os.getpid(), self.tmp), text)

    def test_beside_the_running_agent_its_own_port_and_locks_pass(self):
        state = lock_mod.StateDirLock(os.path.join(self.tmp, "state")).acquire()
        self.addCleanup(state.release)
        host = lock_mod.HostLock("x", os.path.join(self.tmp, "host.lock")).acquire()
        self.addCleanup(host.release)
        serving = socket.socket()
        self.addCleanup(serving.close)
        serving.bind(("127.0.0.1", 0))
        serving.listen()
        port = serving.getsockname()[1]
        code, text = self.run_check(self.make_conf(
            "test://" + NODE_XML, "[metrics]\nenabled = true\nport = %d\n" % port))
        self.assertEqual(0, code, text)
        self.assertIn("lock: ok (the agent runs, pid %d" % os.getpid(), text)
        self.assertIn("metrics: ok (127.0.0.1 port %d, served by the running agent)" % port, text)
        state.release()
        host.release()
        code, text = self.run_check(self.make_conf(
            "test://" + NODE_XML, "[metrics]\nenabled = true\nport = %d\n" % port))
        self.assertEqual(1, code, text)
        self.assertIn("ERROR: metrics:", text)
