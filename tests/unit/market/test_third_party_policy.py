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

"""The third-party policy of doc/source/market.rst, installed as a plugin, runs a market.

The example's file is installed as a throwaway distribution (its module and
a ``*.dist-info`` naming it in the ``resex.policies`` group) and loaded by
name through the plugin loader, as the agent loads any policy.
"""

import pathlib
import unittest

from resex_libvirt.market import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.market import records
from resex_libvirt import sla
from tests.unit.agent import test_policy_plugins

EXAMPLE = (pathlib.Path(__file__).parents[3] / "doc" / "source" / "examples" /
           "quiet_neighbours.py")

SENSITIVE = sla.SLA(latency_sla_us=200.0, interference_threshold_pct=10.0)


def window(mean_us):
    return records.LatencyWindow(16, mean_us, 1.0, mean_us)


class DocumentedPolicyTest(unittest.TestCase):

    def setUp(self):
        self.source = EXAMPLE.read_text()

    def test_the_example_is_shorter_than_forty_lines(self):
        self.assertLess(len(self.source.splitlines()), 40)

    def test_the_documented_policy_installs_and_runs_in_a_market(self):
        target = test_policy_plugins.MODULE + ":QuietNeighbours"
        with test_policy_plugins.ThirdPartyPolicy("quiet_neighbours", source=self.source,
                                                  target=target):
            self.assertIn("quiet_neighbours", policy_mod.names())
            policy = policy_mod.load("quiet_neighbours", share=0.25, hold_s=0.01)
            params = market_mod.MarketParams(interval_s=0.001, intervals_per_epoch=1000)
            m = market_mod.Market(params, policy, guard=True)
            m.add(records.VMSpec("victim", sla=SENSITIVE))
            m.add(records.VMSpec("bulk"))
            samples = {vm: records.Sample(vm, 0.0, 50.0, tx_mtus=100) for vm in m.specs}
            m.step(samples, {"victim": window(205.0)})          # within its threshold
            self.assertEqual((100.0, policy_mod.UNCAPPED),
                             (m.decision("bulk").cap_pct, m.reason("bulk")))
            m.step(samples, {"victim": window(300.0)})          # 50% over: the bulk is held
            self.assertEqual((25.0, "quiet"), (m.decision("bulk").cap_pct, m.reason("bulk")))
            self.assertEqual((100.0, policy_mod.UNCAPPED),
                             (m.decision("victim").cap_pct, m.reason("victim")))
            for _ in range(9):                                   # held for 10 ms: 10 intervals
                m.step(samples, {})
            self.assertEqual(25.0, m.decision("bulk").cap_pct)
            m.step(samples, {})
            self.assertEqual((100.0, policy_mod.UNCAPPED),
                             (m.decision("bulk").cap_pct, m.reason("bulk")))
        self.assertNotIn("quiet_neighbours", policy_mod.names())
