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

"""The leaf-spine fabric's links, the max-min rates over them and the market's cuts."""

import math

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from resex_research.cluster import fabric_links as fl

GIB = float(1 << 30)
TOPO = fl.Topology(racks=2, hosts_per_rack=4, port_bytes_per_s=GIB, oversubscription=4.0)


def _sender(vm, host, leave=0.5, share=4.0, demand=GIB):
    return fl.Sender(vm, host, demand, leave, share)


def test_topology_racks_ports_and_oversubscribed_uplinks():
    assert TOPO.hosts == 8
    assert TOPO.uplink_bytes_per_s == GIB          # 4 ports' worth over 4
    assert [TOPO.rack_of(h) for h in (0, 3, 4, 7)] == [0, 0, 1, 1]
    assert list(TOPO.hosts_of(1)) == [4, 5, 6, 7]
    assert TOPO.capacity((fl.PORT, 5)) == GIB and TOPO.capacity((fl.UPLINK, 1)) == GIB
    assert TOPO.links_of_rack(0) == [(fl.PORT, 0), (fl.PORT, 1), (fl.PORT, 2), (fl.PORT, 3),
                                     (fl.UPLINK, 0)]
    assert TOPO.rack_of_link((fl.PORT, 6)) == 1 and TOPO.rack_of_link((fl.UPLINK, 0)) == 0


def test_a_path_crosses_the_uplinks_only_between_racks():
    assert TOPO.path(1, 1) == [(fl.PORT, 1)]
    assert TOPO.path(1, 2) == [(fl.PORT, 1), (fl.PORT, 2)]
    assert TOPO.path(1, 6) == [(fl.PORT, 1), (fl.PORT, 6), (fl.UPLINK, 0), (fl.UPLINK, 1)]


def test_a_lone_bulk_sender_fills_its_port():
    rate = fl.allocate(TOPO, [_sender(1, 0)])
    assert rate[1] == pytest.approx(GIB)


def test_senders_on_one_port_share_it_and_caps_hold():
    senders = [_sender(1, 0, leave=0.0), _sender(2, 0, leave=0.0)]
    assert fl.allocate(TOPO, senders) == {1: pytest.approx(GIB / 2), 2: pytest.approx(GIB / 2)}
    capped = fl.allocate(TOPO, senders, caps={1: GIB / 10})
    assert capped[1] == pytest.approx(GIB / 10) and capped[2] == pytest.approx(0.9 * GIB)


def test_an_oversubscribed_uplink_binds_before_the_ports():
    # Four hosts each sending everything out of the rack: the uplink is one port's worth.
    senders = [_sender(i, i, leave=1.0) for i in range(4)]
    rate = fl.allocate(TOPO, senders)
    assert all(r == pytest.approx(GIB / 4) for r in rate.values())
    load = fl.loads(TOPO, senders, rate)
    assert load[(fl.UPLINK, 0)] == pytest.approx(GIB)
    assert load[(fl.PORT, 0)] == pytest.approx(GIB / 4)


def test_violation_share_rises_from_the_knee_to_saturation():
    assert fl.violation_share(0.5, 0.8) == 0.0
    assert fl.violation_share(0.8, 0.8) == 0.0
    assert fl.violation_share(0.9, 0.8) == pytest.approx(0.5)
    assert fl.violation_share(1.0, 0.8) == 1.0
    assert fl.path_violation_share([0.9, 0.9], 0.8) == pytest.approx(0.75)
    assert fl.path_violation_share([], 0.8) == 0.0


def test_host_allowances_share_by_weight_and_leave_the_small_ones_alone():
    out = fl.host_allowances(0.7, {"a": 1.0, "b": 1.0}, {"a": 4.0, "b": 12.0})
    assert out == {"a": pytest.approx(0.175), "b": pytest.approx(0.525)}
    out = fl.host_allowances(0.7, {"a": 0.1, "b": 1.0}, {"a": 4.0, "b": 12.0})
    assert out == {"a": pytest.approx(0.1), "b": pytest.approx(0.6)}


def test_a_shared_uplinks_cut_is_shared_by_the_hosts_weights():
    # Two hosts behind one uplink (2 x port / 2 = one port's worth), all traffic
    # leaving the rack: the uplink binds, and a cut to 70 % of it leaves the hosts
    # loads in proportion to their senders' shares (1 : 3), PARDA's fixed point.
    topo = fl.Topology(racks=1, hosts_per_rack=2, port_bytes_per_s=GIB, oversubscription=2.0)
    senders = [_sender(1, 0, leave=1.0, share=4.0), _sender(2, 1, leave=1.0, share=6.0),
               _sender(3, 1, leave=1.0, share=6.0)]
    rate, caps = fl.market(topo, senders, {(fl.UPLINK, 0)}, 0.7)
    host0, host1 = rate[1], rate[2] + rate[3]
    assert host0 + host1 == pytest.approx(0.7 * GIB, rel=1e-6)
    assert host1 / host0 == pytest.approx(3.0, rel=1e-6)
    assert rate[2] == pytest.approx(rate[3])       # IOShare within the host keeps the shares
    assert set(caps) == {1, 2, 3}


def test_a_port_cut_caps_only_that_ports_senders():
    senders = [_sender(1, 0), _sender(2, 1)]
    rate, caps = fl.market(TOPO, senders, {(fl.PORT, 0)}, 0.7)
    assert set(caps) == {1}
    assert rate[1] == pytest.approx(0.7 * GIB) and rate[2] == pytest.approx(GIB)


@st.composite
def _fabrics(draw):
    racks = draw(st.integers(1, 3))
    per = draw(st.integers(1, 4))
    topo = fl.Topology(racks, per, GIB, draw(st.sampled_from([1.0, 2.0, 4.0])))
    senders = [fl.Sender(i, draw(st.integers(0, topo.hosts - 1)),
                         GIB * draw(st.floats(0.05, 1.0)), draw(st.floats(0.0, 1.0)),
                         float(draw(st.integers(1, 8))))
               for i in range(draw(st.integers(0, 10)))]
    links = [link for r in range(racks) for link in topo.links_of_rack(r)]
    victims = draw(st.lists(st.sampled_from(links), unique=True))
    evidence = draw(st.floats(0.3, 1.0))
    target = draw(st.floats(0.1, 1.0)) * evidence
    return topo, senders, victims, evidence, target


@settings(max_examples=150, deadline=None)
@given(_fabrics())
def test_the_rule_never_caps_a_sender_without_evidence_on_its_links(fabric):
    topo, senders, victims, evidence, target = fabric
    untaxed = fl.allocate(topo, senders)
    offered = fl.loads(topo, senders, untaxed)
    cut = fl.evidence_links(topo, offered, victims, evidence)
    assert cut <= set(victims)
    for link in cut:
        assert offered[link] >= evidence * topo.capacity(link) * (1 - 1e-6)
    rate, caps = fl.market(topo, senders, cut, target)
    for s in senders:
        mine = [link for link, c in fl.links_of(topo, s) if c > 0]
        if not any(link in cut for link in mine):
            assert s.vm not in caps
        assert rate[s.vm] <= min(s.demand, caps.get(s.vm, math.inf)) * (1 + 1e-6)
    final = fl.loads(topo, senders, rate)
    for link, load in final.items():
        assert load <= topo.capacity(link) * (1 + 1e-6)
    for link in cut:
        assert final.get(link, 0.0) <= target * topo.capacity(link) * (1 + 1e-3)


@settings(max_examples=150, deadline=None)
@given(_fabrics())
def test_max_min_rates_leave_every_sender_at_its_limit_or_on_a_full_link(fabric):
    topo, senders, _, _, _ = fabric
    rate = fl.allocate(topo, senders)
    load = fl.loads(topo, senders, rate)
    for s in senders:
        at_limit = rate[s.vm] >= s.demand * (1 - 1e-6)
        full = any(load[link] >= topo.capacity(link) * (1 - 1e-6)
                   for link, c in fl.links_of(topo, s) if c > 0)
        assert at_limit or full
