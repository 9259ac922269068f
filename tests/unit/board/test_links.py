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

"""Shared links declared by the operator, and their loads from the hosts' reports."""

import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt.board import links
from resex_libvirt.board import report as report_mod
from tests.unit.board import reports

GBPS = 1e9 / 8.0


def uplink(name="rack7-uplink", gbps=10, hosts=("a", "b", "c")):
    return {"name": name, "capacity_gbps": gbps, "hosts": list(hosts)}


class ParseTest(unittest.TestCase):

    def test_each_host_knows_the_links_it_sends_into(self):
        topo = links.parse({"links": [uplink(), uplink("spine", 40, ("a", "z"))]})
        self.assertEqual(["rack7-uplink", "spine"], [k.name for k in topo.links])
        self.assertEqual(["rack7-uplink", "spine"], [k.name for k in topo.links_of("a")])
        self.assertEqual(["spine"], [k.name for k in topo.links_of("z")])
        self.assertEqual((), topo.links_of("elsewhere"))
        self.assertEqual(10 * GBPS, topo.links[0].capacity_bytes_per_s)

    def test_an_empty_file_declares_no_link(self):
        self.assertEqual((), links.parse({}).links)
        self.assertEqual((), links.parse({"links": []}).links)

    def test_every_mistake_is_refused_naming_the_link(self):
        for bad, says in (
                ([], "a mapping with one key"),
                ({"links": [], "racks": []}, "a mapping with one key"),
                ({"links": {}}, "must be a list"),
                ({"links": [7]}, "links[0] must be a mapping"),
                ({"links": [dict(uplink(), speed=1)]}, "unknown key speed"),
                ({"links": [{"name": "x", "hosts": ["a"]}]}, "missing capacity_gbps"),
                ({"links": [uplink(name="")]}, "name must be"),
                ({"links": [uplink(gbps=0)]}, "link rack7-uplink: capacity_gbps"),
                ({"links": [uplink(gbps=float("nan"))]}, "capacity_gbps"),
                ({"links": [uplink(gbps=True)]}, "capacity_gbps"),
                ({"links": [uplink(hosts=())]}, "non-empty list"),
                ({"links": [uplink(hosts=("a", 3))]}, "non-empty list"),
                ({"links": [uplink(hosts=("a", "a"))]}, "named twice"),
                ({"links": [uplink(), uplink()]}, "links[1]: rack7-uplink is declared twice"),
                ({"links": [dict(uplink(), share=0)]}, "share must be"),
                ({"links": [dict(uplink(), share=1.5)]}, "share must be")):
            with self.assertRaises(ValueError, msg=repr(bad)) as ctx:
                links.parse(bad)
            self.assertIn(says, str(ctx.exception))


class LoadTest(unittest.TestCase):

    def test_a_links_load_is_its_hosts_ports_over_its_capacity(self):
        topo = links.parse({"links": [uplink(gbps=10)]})
        got = links.load(topo.links[0], {
            "a": reports.make("a", link_utilisation=0.5, link_capacity_bytes_per_s=10 * GBPS),
            "b": reports.make("b", link_utilisation=0.25, link_capacity_bytes_per_s=4 * GBPS),
            "elsewhere": reports.make("elsewhere", link_utilisation=1.0)})
        self.assertAlmostEqual(0.6, got.utilisation)
        self.assertAlmostEqual(150.0, got.congestion_pct)
        self.assertEqual((2, 3), (got.heard, got.hosts))

    def test_a_declared_share_of_the_hosts_traffic_crosses_the_link(self):
        topo = links.parse({"links": [dict(uplink(gbps=10), share=0.25)]})
        got = links.load(topo.links[0], {
            "a": reports.make("a", link_utilisation=0.8, link_capacity_bytes_per_s=10 * GBPS),
            "b": reports.make("b", link_utilisation=0.8, link_capacity_bytes_per_s=10 * GBPS)})
        self.assertAlmostEqual(0.4, got.utilisation)

    def test_a_blind_host_is_not_heard_and_a_full_link_is_capped_at_one(self):
        topo = links.parse({"links": [uplink(gbps=1)]})
        got = links.load(topo.links[0], {
            "a": reports.make("a", link_utilisation=0.9, link_capacity_bytes_per_s=10 * GBPS),
            "b": reports.make("b", link_utilisation=0.9, state="blind")})
        self.assertEqual((1.0, 1), (got.utilisation, got.heard))
        self.assertEqual(report_mod.queueing_inflation_pct(1.0), got.congestion_pct)

    @settings(max_examples=200, deadline=None)
    @given(utils=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6),
           gbps=st.floats(0.1, 400.0))
    def test_the_worst_link_of_a_host_is_its_most_congested(self, utils, gbps):
        hosts = ["h%d" % i for i in range(len(utils))]
        topo = links.parse({"links": [uplink("all", gbps, hosts),
                                      uplink("first", gbps * 2, hosts[:1])]})
        rep = {h: reports.make(h, link_utilisation=u, link_capacity_bytes_per_s=GBPS)
               for h, u in zip(hosts, utils)}
        loads = links.loads(topo, rep)
        worst = links.worst_by_host(topo, loads)
        self.assertEqual(set(hosts), set(worst))
        for h in hosts:
            mine = [loads[k.name] for k in topo.links_of(h)]
            self.assertEqual(max(ld.congestion_pct for ld in mine), worst[h].congestion_pct)
        # More load on a host never makes its link less congested.
        more = dict(rep, h0=reports.make("h0", link_utilisation=1.0,
                                         link_capacity_bytes_per_s=GBPS))
        self.assertGreaterEqual(links.loads(topo, more)["all"].utilisation,
                                loads["all"].utilisation)


class TowardTest(unittest.TestCase):
    """The most congested link between a host and a group's hosts (the weigher's ensembles)."""

    @settings(max_examples=200, deadline=None)
    @given(racks=st.lists(st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1,
                                   max_size=3, unique=True), min_size=1, max_size=4),
           utils=st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]),
                                 st.floats(0.0, 1.0)),
           peers=st.lists(st.sampled_from(["a", "b", "c", "d", "e", "z"]), max_size=3))
    def test_it_is_the_worst_link_a_peer_sends_into_and_the_host_does_not(
            self, racks, utils, peers):
        topo = links.parse({"links": [uplink("l%d" % i, 1 + i, hosts)
                                      for i, hosts in enumerate(racks)]})
        rep = {h: reports.make(h, link_utilisation=u, link_capacity_bytes_per_s=GBPS)
               for h, u in utils.items()}
        loads = links.loads(topo, rep)
        toward = links.toward(topo, loads, peers)
        for host in ("a", "b", "c", "d", "e", "z"):
            between = [loads[k.name] for p in peers for k in topo.links_of(p)
                       if k not in topo.links_of(host)]
            got = toward(host)
            if not between:
                self.assertIsNone(got)
            else:
                self.assertEqual(max(ld.congestion_pct for ld in between), got.congestion_pct)
            if host in peers and len(set(peers)) == 1:
                self.assertIsNone(got)      # the group on the host itself: no link between


class CountedTest(unittest.TestCase):
    """A host that counts its bytes by destination says what it sends beyond each link."""

    TOPO = {"links": [{"name": "rack1-up", "capacity_gbps": 1, "hosts": ["a", "b"]}]}

    def test_a_counted_rate_replaces_the_port_estimate(self):
        topo = links.parse(self.TOPO)
        gbit = 1e9 / 8.0
        port = dict(link_utilisation=0.5, link_capacity_bytes_per_s=gbit)
        est = links.load(topo.links[0], {"a": reports.make("a", **port),
                                         "b": reports.make("b", **port)})
        self.assertEqual(1.0, est.utilisation)          # 2 x 0.5 Gb/s over 1 Gb/s
        counted = links.load(topo.links[0], {
            "a": reports.make("a", link_tx={"rack1-up": 0.1 * gbit}, **port),
            "b": reports.make("b", **port)})
        self.assertAlmostEqual(0.6, counted.utilisation)

    def test_beyond_sums_what_leaves_the_link_by_each_destinations_host(self):
        topo = links.parse(self.TOPO)
        where = {"10.0.0.1": "a", "10.0.0.2": "b", "10.0.0.9": "z"}.get
        rates = {"vm1": {"10.0.0.1": 100.0, "10.0.0.2": 20.0, "10.0.0.9": 3.0,
                         "8.8.8.8": 0.5, "other": 0.25}}
        # Local (a) and same-rack (b) traffic stays; z, unknown and other leave.
        self.assertEqual({"rack1-up": 3.75}, links.beyond(topo, "a", rates, where))
        self.assertEqual({}, links.beyond(topo, "z", rates, where))
