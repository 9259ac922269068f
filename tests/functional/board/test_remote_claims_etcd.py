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

"""The agent's remote claims, built from its configuration, following a real etcd board.

node1 publishes a victim's claim naming a peer; node2 publishes the peer's
address. node2's source (:func:`resex_agent.remote.build`, the options the
agent reads from ``[board]``) finds the claim through the reader's watch,
hands the window once per report, and expires it when node1 stops.
"""

import collections
import unittest

import testtools

from resex_agent.conf import board as board_conf
from resex_agent import remote as remote_agent
from resex_libvirt import board as board_mod
from resex_libvirt.board import remote_claims
from resex_libvirt import sla as sla_mod
from tests.functional.board import etcd_server
from tests import machine
from tests.unit.agent import test_loop
from tests.unit.board import reports

SERVER = "bbbbbbbb-0000-4000-8000-000000000002"
VICTIM = "aaaaaaaa-0000-4000-8000-000000000001"
Info = collections.namedtuple("Info", "sla ensemble", defaults=(None,))


def claim(mean_us):
    return remote_claims.Claim(vm=VICTIM, peer="10.229.0.250", sla_us=500.0,
                               threshold_pct=10.0, statistic="mean", count=12,
                               mean_us=mean_us, std_us=20.0, p99_us=mean_us * 1.2)


@unittest.skipUnless(etcd_server.EtcdServer.available(),
                     "needs /usr/bin/etcd (Debian package etcd-server)")
class RemoteClaimsOnEtcdTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.etcd = self.useFixture(etcd_server.EtcdServer())
        conf = test_loop.make_conf(board={"url": self.etcd.url},
                                   remote_claims={"enabled": True, "max_age": 3.0})
        self.board = board_mod.open_board(self.etcd.url, **board_conf.board_options(conf))
        self.addCleanup(self.board.close)
        self.source = remote_agent.build("node2", conf.board.url,
                                         board_conf.board_options(conf),
                                         conf.remote_claims.max_age, recompute_s=0.1)
        self.addCleanup(self.source.close)
        self.source.sync({SERVER: Info(sla_mod.SLA())})
        self.source.set_port_load(0.9)

    def publish(self, host, **fields):
        self.board.publish(reports.make(host, **fields))

    def test_a_claim_is_found_through_the_watch_handed_once_and_expires(self):
        self.publish("node2", addresses={SERVER: ["10.229.0.250"]})
        self.source.start()
        self.publish("node1", sensitive_vms=1, remote_claims=[claim(900.0)._asdict()])
        machine.wait_for(lambda: self.source.slas(), 10.0, what="the claim found")
        self.assertEqual(500.0, self.source.slas()[SERVER]["latency_sla_us"])
        first = self.source.windows()[SERVER]
        self.assertEqual((12, 900.0, 12), (first.count, first.mean_us, first.new))
        self.source.slas()
        self.assertEqual(0, self.source.windows()[SERVER].new)
        self.publish("node1", sensitive_vms=1, remote_claims=[claim(950.0)._asdict()])
        machine.wait_for(lambda: self.source.slas() and self.source.windows()[SERVER].new,
                         10.0, what="the next report's window")
        # node1 stops publishing: its claim expires within max_age.
        machine.wait_for(lambda: not self.source.slas(), 10.0, what="the claim expired")
        self.assertEqual({}, self.source.windows())
        self.assertGreaterEqual(self.source.ignored["expired"], 1)
