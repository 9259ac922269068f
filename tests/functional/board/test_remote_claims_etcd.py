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
import time
import unittest

import testtools

from resex_agent.conf import board as board_conf
from resex_agent import remote as remote_agent
from resex_libvirt import board as board_mod
from resex_libvirt.board import links
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
class OnEtcd(testtools.TestCase):
    """A real etcd, the agent's configuration of it, and a board of the test's own."""

    def setUp(self):
        super().setUp()
        self.etcd = self.useFixture(etcd_server.EtcdServer())
        self.conf = test_loop.make_conf(board={"url": self.etcd.url},
                                        remote_claims={"enabled": True, "max_age": 3.0})
        self.board = board_mod.open_board(self.etcd.url,
                                          **board_conf.board_options(self.conf))
        self.addCleanup(self.board.close)


class RemoteClaimsOnEtcdTest(OnEtcd):

    def setUp(self):
        super().setUp()
        conf = self.conf
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


@unittest.skipUnless(etcd_server.EtcdServer.available(),
                     "needs /usr/bin/etcd (Debian package etcd-server)")
class SharedLinkOnEtcdTest(OnEtcd):
    """Two agents behind one uplink settle a victim across it, each by its own reading.

    node2 and node3 share ``rack-up`` (10 Gb/s); the victim on node1,
    outside the rack, measures a server on node2. Each host's source is the
    agent's (:func:`resex_agent.remote.build` with the topology, its own
    reader and thread on the real etcd); the test plays the fabric: every
    0.25 s each host publishes what it sends (what it would send times its
    own limit factor) and the victim's host publishes a window from the
    uplink's load (an M/G/1-PS slowdown).
    """

    SLA_US = 500.0
    WANT_GBPS = {"node2": 6.0, "node3": 4.0}

    def setUp(self):
        super().setUp()
        conf = self.conf
        topo = links.parse({"links": [{"name": "rack-up", "capacity_gbps": 10,
                                       "hosts": ["node2", "node3"]}]})
        self.sources = {}
        for host in self.WANT_GBPS:
            source = remote_agent.build(host, conf.board.url, board_conf.board_options(conf),
                                        conf.remote_claims.max_age, recompute_s=0.1,
                                        topology=topo, link_delay_s=0.5)
            self.addCleanup(source.close)
            self.sources[host] = source

    def publish_round(self, claiming=True):
        """One round of reports; the victim's mean (us) at the uplink's load now."""
        sent = {h: g * self.sources[h].links.factor() for h, g in self.WANT_GBPS.items()}
        rho = min(0.99, sum(sent.values()) / 10.0)
        mean = self.SLA_US * (1.0 + 0.1 * rho / (1.0 - rho) / 1.5)   # 10 % over at 60 %
        for host, gbps in sent.items():
            self.board.publish(reports.make(
                host, link_capacity_bytes_per_s=10e9 / 8, link_utilisation=gbps / 10.0,
                heavy_io_vms=1, addresses={SERVER: ["10.229.0.250"]} if host == "node2"
                else {}))
        claims = [claim(mean)._replace(sla_us=self.SLA_US)._asdict()] if claiming else []
        self.board.publish(reports.make("node1", sensitive_vms=1, remote_claims=claims))
        return mean

    def test_both_hosts_limit_their_senders_until_the_victim_is_under_its_bound(self):
        for source in self.sources.values():
            source.start()
        means = []

        def settled():
            means.append(self.publish_round())
            time.sleep(0.25)
            tail = means[-8:]
            return len(tail) == 8 and all(m <= self.SLA_US * 1.1 for m in tail)
        machine.wait_for(settled, 30.0, step=0.0, what="the victim under its bound")
        self.assertGreater(means[0], self.SLA_US * 1.1)
        factors = {h: s.links.factor() for h, s in self.sources.items()}
        self.assertTrue(all(f < 1.0 for f in factors.values()), factors)
        # The victim's host stops claiming: both limits are released.
        machine.wait_for(lambda: (self.publish_round(claiming=False), time.sleep(0.25),
                                  not any(s.link_factors() for s in self.sources.values()))[-1],
                         30.0, step=0.0, what="the limits released")
