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

"""Ensembles on a real etcd board: two agents' sources, one member each.

node1 and node2 each run a member of one ensemble and follow the board with
the source the agent builds from its configuration
(:func:`resex_agent.remote.build`). node1's member goes over its bound: node2
judges its own member by it, node1 does not count its own twice; node1's
member recovers and node2 lets go.
"""

import collections
import unittest

import testtools

from resex_agent.conf import board as board_conf
from resex_agent import remote as remote_agent
from resex_libvirt import board as board_mod
from resex_libvirt.board import ensembles
from resex_libvirt import sla as sla_mod
from tests.functional.board import etcd_server
from tests import machine
from tests.unit.agent import test_loop
from tests.unit.board import reports

GROUP = "3f1c2b9e-5d7a-4c11-9b0e-8a2f6c4d1e77"
MEMBERS = {"node1": "aaaaaaaa-0000-4000-8000-0000000000e1",
           "node2": "aaaaaaaa-0000-4000-8000-0000000000e2"}
Info = collections.namedtuple("Info", "sla ensemble")


def member(host, mean_us):
    return ensembles.Member(ensemble=GROUP, vm=MEMBERS[host], sla_us=500.0,
                            threshold_pct=10.0, statistic="mean", count=12,
                            mean_us=mean_us, std_us=20.0, p99_us=mean_us * 1.2)


@unittest.skipUnless(etcd_server.EtcdServer.available(),
                     "needs /usr/bin/etcd (Debian package etcd-server)")
class EnsemblesOnEtcdTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.etcd = self.useFixture(etcd_server.EtcdServer())
        conf = test_loop.make_conf(board={"url": self.etcd.url},
                                   remote_claims={"enabled": True, "max_age": 30.0})
        self.board = board_mod.open_board(self.etcd.url, **board_conf.board_options(conf))
        self.addCleanup(self.board.close)
        self.sources = {}
        for host, vm in MEMBERS.items():
            source = remote_agent.build(host, conf.board.url, board_conf.board_options(conf),
                                        conf.remote_claims.max_age, recompute_s=0.1)
            self.addCleanup(source.close)
            source.sync({vm: Info(sla_mod.SLA(latency_sla_us=500.0), GROUP)})
            source.set_port_load(0.9)
            self.sources[host] = source.start()

    def publish(self, host, mean_us, epoch):
        self.board.publish(reports.make(host, epoch=epoch, sensitive_vms=1,
                                        ensembles=[member(host, mean_us)._asdict()]))

    def test_a_member_over_its_bound_judges_the_other_hosts_member_until_it_recovers(self):
        node1, node2 = self.sources["node1"], self.sources["node2"]
        self.publish("node2", 480.0, 1)
        self.publish("node1", 900.0, 1)
        machine.wait_for(lambda: node2.slas(), 10.0, what="node2 judging its member")
        fields = node2.slas()[MEMBERS["node2"]]
        self.assertEqual((GROUP, 500.0), (fields["ensemble"], fields["latency_sla_us"]))
        self.assertEqual(900.0, node2.windows()[MEMBERS["node2"]].mean_us)
        self.assertIn("member %s on node1" % MEMBERS["node1"], node2.describe(MEMBERS["node2"]))
        # node1's own member is the worst: its market judges it already.
        self.assertEqual({}, node1.slas())
        # node1's member recovers: the group is within its bound, node2 lets go.
        self.publish("node1", 505.0, 2)
        machine.wait_for(lambda: not node2.slas(), 10.0, what="node2 letting go")
        self.assertEqual({}, node2.windows())
        self.assertEqual({}, node1.slas())
