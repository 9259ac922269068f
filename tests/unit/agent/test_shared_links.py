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

"""Shared links in the agent: a victim across the rack's uplink limits this host's sender.

The simulated host (paper_64k_vs_2m: the 2 MB VM is the heavy sender, the
64 KB VM has an SLA of its own) is behind ``rack1-up`` with ``node2``; a
victim on ``node9``, outside the rack, measures a server on ``node2``: its
requests cross the uplink, which this host and node2 load. Neither host's
own port is the victim's: only the shared-link rule can help. The board is
a snapshot the test writes (test_remote's way).
"""

import logging
import unittest

from resex_agent import remote as remote_agent
from resex_libvirt.board import link_share
from resex_libvirt.board import links
from tests.unit.agent import test_loop
from tests.unit.agent import test_remote
from tests.unit.board import reports

TS = test_remote.TS
GBPS = 1e9 / 8.0


class Board(test_remote.Snapshot):
    """This host, node2 (the server's host, in the rack) and node9 (the victim's, outside)."""

    def __init__(self, host, claims, mine_gbps=6.0, node2_gbps=3.0, ts=TS):
        self.host, self.mine_gbps, self.node2_gbps = host, mine_gbps, node2_gbps
        self.publish(ts, claims)

    def publish(self, ts, claims):
        """Every host publishes again at ``ts``, node9 with ``claims``."""
        self.reports = {
            self.host: reports.make(self.host, ts=ts, link_capacity_bytes_per_s=10 * GBPS,
                                    link_utilisation=self.mine_gbps / 10, heavy_io_vms=1),
            "node2": reports.make("node2", ts=ts, link_capacity_bytes_per_s=10 * GBPS,
                                  link_utilisation=self.node2_gbps / 10, heavy_io_vms=1,
                                  addresses={"server-2": [test_remote.PEER]}),
            "node9": reports.make("node9", ts=ts, sensitive_vms=len(claims),
                                  remote_claims=claims)}


def run(claims, consent=test_loop.PAPER_MARKET, duration=3.0, peer_rates=None, **board):
    """``(agent, sim, source)`` after a run with node9's ``claims`` on the board."""
    conf, parts, sim, _vm64k = test_remote.sim_parts(test_remote.server_scenario(duration))
    conf.set_override("cap_consent", consent, group="agent")
    host = conf.agent.host
    topo = links.parse({"links": [{"name": "rack1-up", "capacity_gbps": 10,
                                   "hosts": [host, "node2"]}]})
    source = remote_agent.RemoteVictims(host, Board(host, claims, **board), 10.0,
                                        clock=lambda: TS + 1.0, topology=topo)
    source.peer_rates = peer_rates
    source.recompute()
    parts.remote = source
    return test_remote.run_agent(conf, parts), sim, source


class SharedLinkAgentTest(unittest.TestCase):

    def test_a_victim_across_the_uplink_limits_this_hosts_heavy_sender_to_its_part(self):
        with self.assertLogs("resex_agent.remote", level=logging.INFO) as logs:
            agent, sim, source = run([test_remote.a_claim(mean_us=400.0)])
        # 9 of 10 Gb/s; the victim at 400 us for a 218 us target: the link's
        # target is 9 x 218/400 Gb/s, half each; this host sends 6.
        factor = 9 * (200.0 * 1.09 / 400.0) / 2 / 6
        self.assertAlmostEqual(factor, source.link_factors()["rack1-up"], places=3)
        self.assertEqual({"rack1-up": source.link_factors()["rack1-up"]},
                         agent.health().link_factors)
        # Only the heavy sender; every cap written on it within its scaled limit.
        self.assertEqual({"vm2m"}, test_remote.capped(sim))
        caps = [cap for name, cap, _w in sim.writes if name == "vm2m" and cap is not None]
        self.assertTrue(caps and all(cap <= 100.0 * factor + 0.01 for cap in caps), caps)
        said = [m for m in logs.output if "shared link rack1-up" in m]
        self.assertTrue(said and "(cut: victim %s on node9 +100%%" % test_remote.VICTIM
                        in said[0], logs.output)

    def test_no_claim_across_the_uplink_limits_nothing(self):
        agent, sim, source = run([])
        self.assertEqual({}, source.link_factors())
        self.assertEqual(set(), test_remote.capped(sim))
        self.assertEqual({}, agent.health().link_factors)

    def test_a_claim_the_uplinks_load_does_not_support_limits_nothing(self):
        # 0.2 Gb/s over a 10 Gb/s uplink: a 2 % slowdown, not the victim's 100 %.
        agent, sim, source = run([test_remote.a_claim(mean_us=400.0)], mine_gbps=0.1,
                                 node2_gbps=0.1)
        self.assertEqual({}, source.link_factors())
        self.assertEqual(1, source.ignored["link_contradicted"])
        self.assertEqual(set(), test_remote.capped(sim))

    def test_a_sender_whose_tenant_did_not_consent_keeps_its_limit(self):
        agent, sim, source = run([test_remote.a_claim(mean_us=400.0)], consent="opted_in")
        self.assertIn("rack1-up", source.link_factors())
        self.assertEqual(set(), test_remote.capped(sim))

    def test_what_this_host_sends_beyond_the_uplink_is_counted_and_published(self):
        # To the server on node2 (inside the rack): stays; to an unknown address: leaves.
        rates = {"vm-x": {test_remote.PEER: 1000.0, "10.9.9.9": 50.0, "other": 5.0}}
        agent, _sim, source = run([], peer_rates=lambda: rates)
        self.assertEqual({"rack1-up": 55.0}, source.link_tx())
        self.assertEqual((("rack1-up", 55.0),), agent.last_report.link_tx)

    def test_the_limit_is_held_while_the_claim_is_quiet_and_released_when_it_expires(self):
        _agent, _sim, source = run([test_remote.a_claim(mean_us=400.0)])
        factor = source.link_factors()["rack1-up"]
        now = [TS + 1.0]
        source._clock = lambda: now[0]
        held, released = [], []
        while source.link_factors() and len(held) + len(released) < 20:
            now[0] += link_share.DELAY_S
            # The victim's host publishes again, without the claim (its
            # victim quiet since, or gone).
            source.reader.publish(now[0] - 1.0, [])
            source.recompute()
            (held if now[0] - TS <= source.max_age_s else released).append(
                source.link_factors().get("rack1-up", 1.0))
        # Until the claim expires (max_age after its report) the limit holds.
        self.assertEqual([factor] * 3, held)
        self.assertEqual(1.0, released[-1])
        self.assertLessEqual(len(released), 8)
        self.assertNotIn("limit_scale", str(source.slas()))


if __name__ == "__main__":
    unittest.main()
