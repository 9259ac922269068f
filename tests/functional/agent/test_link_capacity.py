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

"""An agent whose link capacity is unknown starts without the fabric term.

libvirt's ``test:///`` driver (with ``etc/resex/node-test.xml``'s tap
interfaces) and ``[fabric] source = libvirt_iface``; the uplink lives in a
temporary sysfs tree laid out like the kernel's, so the result does not
depend on this machine's NIC. A virtio NIC reports speed ``-1``.
"""

import io
import logging
import os
import shutil
import tempfile
import unittest

from oslo_config import cfg

from resex_agent import builder
from resex_agent import check
from resex_agent import conf as agent_conf
from resex_libvirt import board as board_mod
from tests.unit.fabric import sysfs_tree

NODE_XML = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                        "etc", "resex", "node-test.xml"))


class LinkCapacityTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="resex-link-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.sysfs = sysfs_tree.SysfsTree()
        self.addCleanup(self.sysfs.cleanup)
        self.sysfs.add_netdev("virtio0", "0000:00:03.0", mtu=1500, speed=-1)
        self.sysfs.add_netdev("eth0", "0000:81:00.0", mtu=9000, speed=25000)
        self.board_url = "sqlite://%s/board.sqlite" % self.tmp

    def make_conf(self, uplink):
        conf = cfg.ConfigOpts()
        agent_conf.register_opts(conf)
        path = os.path.join(self.tmp, "resex-agent.conf")
        with open(path, "w") as f:
            f.write("[agent]\nhost = cmp1\nhost_driver = libvirt\nstate_dir = %s\n"
                    "max_epochs = 1\n"
                    "[libvirt]\nconnection_uri = test://%s\nevents = false\n"
                    "[latency]\nprobe_socket_path =\n"
                    "[fabric]\nsource = libvirt_iface\nsysfs_root = %s\nuplink_netdev = %s\n"
                    "[board]\nurl = %s\n"
                    % (os.path.join(self.tmp, "state"), NODE_XML, self.sysfs.root, uplink,
                       self.board_url))
        conf(["--config-file", path], project="resex")
        return conf

    def test_an_unknown_capacity_turns_the_fabric_term_off_with_one_warning(self):
        conf = self.make_conf("virtio0")
        with self.assertLogs("resex_agent.fabric", logging.WARNING) as logs:
            agent = builder.build_agent(conf)
        self.addCleanup(agent.shutdown)
        self.assertEqual(1, len(logs.records), logs.output)
        self.assertIn("fabric term off: capacity of link virtio0 unknown "
                      "(virtio0 reports no speed (-1))", logs.output[0])
        self.assertIn("link_capacity_gbps", logs.output[0])
        self.assertIsNone(agent.fabric)
        # CPU only: no I/O supply in the allowance, so the CPU alone can run it out.
        self.assertEqual(0.0, agent.market.params.io_supply)
        with self.assertNoLogs("resex_agent.fabric", logging.WARNING):
            agent.run()
        agent.shutdown()  # sends the pending report
        board = board_mod.open_board(self.board_url)
        self.addCleanup(board.close)
        report = board.snapshot()["cmp1"]
        self.assertEqual(0.0, report.link_utilisation)
        for vm in agent.summaries[-1].vms:
            self.assertEqual(0, vm.spent_io)

    def test_a_known_capacity_keeps_the_fabric_term(self):
        agent = builder.build_agent(self.make_conf("eth0"))
        self.addCleanup(agent.shutdown)
        self.assertIsNotNone(agent.fabric)
        self.assertEqual(25e9 / 8, agent.market.params.link_bytes_per_s)
        self.assertEqual(9000, agent.market.params.mtu)

    def test_check_says_the_fabric_is_off_and_why_and_passes(self):
        out = io.StringIO()
        code = check.run_check(self.make_conf("virtio0"), out=out)
        text = out.getvalue()
        self.assertEqual(0, code, text)
        self.assertIn("fabric: off (capacity of link virtio0 unknown (virtio0 reports no "
                      "speed (-1))", text)

    def test_check_shows_a_discovered_link(self):
        out = io.StringIO()
        self.assertEqual(0, check.run_check(self.make_conf("eth0"), out=out), out.getvalue())
        self.assertIn("fabric: ok (link eth0, 25 Gb/s, MTU 9000)", out.getvalue())
