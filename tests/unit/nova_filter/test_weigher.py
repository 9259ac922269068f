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

"""ResExCongestionWeigher through nova's own HostWeightHandler, on real nova objects."""

import fixtures
from nova import objects
from nova.scheduler import weights

from resex_nova import rules
from resex_nova import weigher as resex_weigher
from tests.unit.nova_filter import base


class CongestionWeigherTest(base.PluginTestCase):

    def setUp(self):
        super().setUp()
        self.handler = weights.HostWeightHandler()
        # Congestion index: h1 100 % (rho .5), h2 0, h3 300 % (rho .75), q 5 % (rho 1/21).
        self.publish(h1=dict(link_utilisation=0.5, sensitive_vms=1),
                     h2=dict(link_utilisation=0.0, sensitive_vms=3),
                     h3=dict(link_utilisation=0.75, sensitive_vms=0),
                     q=dict(link_utilisation=1 / 21, sensitive_vms=0))

    def weighed(self, spec, hosts=("h1", "h2", "h3"), **aggregates):
        states = [base.host(h, **aggregates.get(h, {})) for h in hosts]
        out = self.handler.get_weighed_objects(
            [resex_weigher.ResExCongestionWeigher()], states, spec)
        return [(w.obj.host, round(w.weight, 6)) for w in out]

    def test_a_sensitive_request_ranks_good_hosts_by_headroom_and_bad_ones_last(self):
        # Threshold 10: h2 good (1 - 0.4 x 0/10), q good (1 - 0.4 x 5/10),
        # h1 bad (0.4 x 10/100), h3 bad (0.4 x 10/300).
        self.assertEqual([("h2", 1.0), ("q", 0.8), ("h1", 0.04), ("h3", 0.013333)],
                         self.weighed(base.request(**base.SENSITIVE),
                                      hosts=("h1", "h2", "h3", "q")))

    def test_weights_are_not_stretched_over_the_candidates(self):
        # Two quiet hosts 0.4 points apart: nova's min-max would make it 0 vs 1.
        self.publish(a=dict(link_utilisation=0.010), b=dict(link_utilisation=0.014))
        self.conf.config(weight_noise_floor=0.0, group="resex")
        (_, wa), (_, wb) = sorted(self.weighed(base.request(**base.SENSITIVE), hosts=("a", "b")))
        self.assertLess(abs(wa - wb), 0.02)

    def test_differences_below_the_noise_floor_weigh_the_same(self):
        self.publish(a=dict(link_utilisation=0.010), b=dict(link_utilisation=0.014))
        self.conf.config(weight_noise_floor=1.0, group="resex")
        weights_ = {w for _, w in self.weighed(base.request(**base.SENSITIVE), hosts=("a", "b"))}
        self.assertEqual(1, len(weights_))

    def test_a_bulk_request_prefers_hosts_without_sensitive_tenants(self):
        # 0.6 + 0.4 / (1 + n): h3 1.0, h1 0.8, h2 0.7.
        self.assertEqual([("h3", 1.0), ("h1", 0.8), ("h2", 0.7)],
                         self.weighed(base.request(**base.BULK)))

    def test_a_bulk_request_spreads_over_hosts_that_already_carry_bulk_tenants(self):
        # 0.6 + 0.4 / ((1 + n)(1 + 0.5 h / (1 + h))): empty 1.0, one bulk tenant 0.92,
        # two 0.9, one sensitive tenant 0.8: sensitive tenants are avoided first.
        self.publish(empty=dict(link_utilisation=0.0),
                     one=dict(link_utilisation=0.05, heavy_io_vms=1),
                     two=dict(link_utilisation=0.05, heavy_io_vms=2))
        self.assertEqual([("empty", 1.0), ("one", 0.92), ("two", 0.9), ("h1", 0.8)],
                         self.weighed(base.request(**base.BULK),
                                      hosts=("h1", "two", "one", "empty")))

    def test_other_requests_weigh_the_same_everywhere(self):
        self.assertEqual({0.0}, {w for _, w in self.weighed(base.request())})

    def test_unknown_hosts_rank_below_known_good_and_above_known_bad_by_default(self):
        self.assertEqual([("h2", 1.0), ("unknown", 0.5), ("h3", 0.013333)],
                         self.weighed(base.request(**base.SENSITIVE),
                                      hosts=("h3", "unknown", "h2")))
        self.assertEqual([("h3", 1.0), ("unknown", 0.5)],
                         self.weighed(base.request(**base.BULK), hosts=("unknown", "h3")))

    def test_an_unknown_host_gets_the_mean_weight_under_pass(self):
        self.conf.config(unknown_host_policy="pass", group="resex")
        self.assertEqual([("h2", 1.0), ("unknown", 0.506667), ("h3", 0.013333)],
                         self.weighed(base.request(**base.SENSITIVE),
                                      hosts=("h2", "unknown", "h3")))

    def test_an_unknown_host_gets_the_lowest_weight_under_fail(self):
        self.conf.config(unknown_host_policy="fail", group="resex")
        self.assertEqual([("h2", 1.0), ("h3", 0.013333), ("unknown", 0.0)],
                         self.weighed(base.request(**base.SENSITIVE),
                                      hosts=("h2", "unknown", "h3")))

    def test_the_multiplier_comes_from_conf_and_aggregates(self):
        self.conf.config(weight_multiplier=3.0, group="resex")
        self.assertEqual([("h2", 3.0), ("h1", 0.12), ("h3", 0.04)],
                         self.weighed(base.request(**base.SENSITIVE)))
        self.assertEqual([("h1", 0.12), ("h3", 0.04), ("h2", -2.0)],
                         self.weighed(base.request(**base.SENSITIVE),
                                      h2={"resex_weight_multiplier": "-2"}))

    def test_the_multiplier_is_read_once_per_request(self):
        w = resex_weigher.ResExCongestionWeigher()
        self.conf.config(weight_multiplier=2.0, group="resex")
        w.weigh_objects([], base.request(**base.SENSITIVE))
        self.conf.config(weight_multiplier=5.0, group="resex")
        # Same request: the value read when it started; an aggregate still overrides.
        self.assertEqual(2.0, w.weight_multiplier(base.host("h1")))
        self.assertEqual(7.0, w.weight_multiplier(
            base.host("h1", resex_weight_multiplier="7")))
        w.weigh_objects([], base.request(**base.SENSITIVE))
        self.assertEqual(5.0, w.weight_multiplier(base.host("h1")))

    def test_weigh_object_alone_matches_the_raw_weights(self):
        w = resex_weigher.ResExCongestionWeigher()
        spec = base.request(**base.SENSITIVE)
        self.assertEqual(1.0, w._weigh_object(base.host("h2"), spec))
        self.assertEqual(resex_weigher.UNKNOWN, w._weigh_object(base.host("nope"), spec))
        self.assertEqual(0.0, w._weigh_object(base.host("h1"), base.request()))


class SharedLinksWeigherTest(base.PluginTestCase):

    def test_a_host_behind_a_congested_uplink_weighs_as_that_link(self):
        topology = self.useFixture(fixtures.TempDir()).join("topology.yaml")
        with open(topology, "w") as f:
            f.write("links:\n  - {name: rack1-uplink, capacity_gbps: 1, hosts: [r1a, r1b]}\n")
        gbit = 1e9 / 8.0
        # Each port alone 5 % busy; rack 1's uplink carries 0.5 of its 1 Gb/s (100 %).
        self.publish(**{h: dict(link_utilisation=0.05, link_capacity_bytes_per_s=5 * gbit)
                        for h in ("r1a", "r1b", "alone")})
        rules.LINKS.__init__()
        handler = weights.HostWeightHandler()
        states = [base.host(h) for h in ("r1a", "alone")]

        def weighed():
            return [(w.obj.host, round(w.weight, 6)) for w in handler.get_weighed_objects(
                [resex_weigher.ResExCongestionWeigher()], states,
                base.request(**base.SENSITIVE))]
        # Alone, both ports weigh the same (1 - 0.4 x 5/10).
        self.assertEqual([("r1a", 0.8), ("alone", 0.8)], weighed())
        self.conf.config(topology_file=topology, group="resex")
        # Behind the link r1a is bad (0.4 x 10/100); alone keeps its 0.8.
        self.assertEqual([("alone", 0.8), ("r1a", 0.04)], weighed())

    def test_a_bulk_request_weighs_a_host_by_its_most_loaded_uplink_too(self):
        topology = self.useFixture(fixtures.TempDir()).join("topology.yaml")
        with open(topology, "w") as f:
            f.write("links:\n  - {name: rack1-uplink, capacity_gbps: 4, hosts: [r1a, r1b]}\n")
        gbit = 1e9 / 8.0
        # Rack 1's uplink carries 2 of its 4 Gb/s (50 %); each port 20 % busy.
        self.publish(**{h: dict(link_utilisation=0.2, link_capacity_bytes_per_s=5 * gbit)
                        for h in ("r1a", "r1b", "alone")})
        rules.LINKS.__init__()
        states = [base.host(h) for h in ("r1a", "alone")]

        def weighed():
            return {w.obj.host: round(w.weight, 6)
                    for w in weights.HostWeightHandler().get_weighed_objects(
                        [resex_weigher.ResExCongestionWeigher()], states,
                        base.request(**base.BULK))}
        self.assertEqual({"r1a": 1.0, "alone": 1.0}, weighed())
        self.conf.config(topology_file=topology, group="resex")
        # r1a: 0.6 + 0.4 / 1.5; alone, behind no link, keeps 1.0.
        self.assertEqual({"r1a": 0.866667, "alone": 1.0}, weighed())


class EnsembleWeigherTest(base.PluginTestCase):
    """A member of a server group: a host whose path to the group crosses a congested link."""

    def setUp(self):
        super().setUp()
        topology = self.useFixture(fixtures.TempDir()).join("topology.yaml")
        with open(topology, "w") as f:
            f.write("links:\n"
                    "  - {name: rack1-uplink, capacity_gbps: 1, hosts: [r1a, r1b]}\n"
                    "  - {name: rack2-uplink, capacity_gbps: 1, hosts: [r2a, r2b]}\n")
        gbit = 1e9 / 8.0
        # Every 1 Gb/s port 1-3 % busy (good alone). Rack 1's uplink carries
        # 0.02 Gb/s (2 %: +2 %), rack 2's 0.06 (6 %: +6.4 %), both under 10 %.
        self.publish(**{h: dict(link_utilisation=0.01, link_capacity_bytes_per_s=gbit)
                        for h in ("r1a", "r1b", "alone")},
                     **{h: dict(link_utilisation=0.03, link_capacity_bytes_per_s=gbit)
                        for h in ("r2a", "r2b")})
        self.conf.config(topology_file=topology, group="resex")
        rules.LINKS.__init__()

    def weighed(self, group_hosts=None):
        spec = base.request(**base.SENSITIVE)
        if group_hosts is not None:
            spec.instance_group = objects.InstanceGroup(
                uuid="3f1c2b9e-5d7a-4c11-9b0e-8a2f6c4d1e77", hosts=list(group_hosts))
        states = [base.host(h) for h in ("r1a", "r1b", "r2a", "alone")]
        out = weights.HostWeightHandler().get_weighed_objects(
            [resex_weigher.ResExCongestionWeigher()], states, spec)
        return {w.obj.host: round(w.weight, 6) for w in out}

    def test_a_host_whose_path_to_the_group_crosses_a_congested_link_weighs_as_that_link(self):
        alone = self.weighed()
        # Rack 2's host weighs as its uplink (1 - 0.4 x 6/10), rack 1's as theirs (2 %).
        self.assertEqual({"r1a": 0.92, "r1b": 0.92, "r2a": 0.76, "alone": 0.96}, alone)
        # The group runs on r2b: every path to it from outside rack 2 crosses rack 2's
        # uplink; r2a, in the group's rack, crosses none but its own (as before).
        self.assertEqual({"r1a": 0.76, "r1b": 0.76, "r2a": 0.76, "alone": 0.76},
                         self.weighed(["r2b"]))
        # The group runs in rack 1 (its uplink +2 %): a path from outside costs that much;
        # r2a's own uplink costs it more already.
        self.assertEqual(dict(alone, alone=0.92), self.weighed(["r1a", "r1b"]))
        # A group on the same host as the candidate crosses nothing.
        self.assertEqual(alone, self.weighed(["alone"]))

    def test_without_a_group_or_a_topology_nothing_changes(self):
        before = self.weighed()
        self.assertEqual(before, self.weighed([]))
        self.conf.config(topology_file=None, group="resex")
        self.assertEqual(self.weighed(), self.weighed(["r2b"]))

    def test_the_group_hosts_of_a_request(self):
        spec = base.request(**base.SENSITIVE)
        self.assertEqual((), rules.group_hosts(spec))
        spec.instance_group = objects.InstanceGroup(hosts=["b", "a", "a", ""])
        self.assertEqual(("a", "b"), rules.group_hosts(spec))
        self.assertEqual(("a", "b"), rules.classify(spec).group_hosts)
        spec.instance_group = None
        self.assertEqual((), rules.group_hosts(spec))
