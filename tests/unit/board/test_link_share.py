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

"""Shared links in the market: PARDA's rule over every host behind a congested link."""

import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt.board import link_share
from resex_libvirt.board import links
from resex_libvirt.board import remote_claims as remote
from tests.unit.board import reports
from tests.unit.board.test_remote_claims import a_claim

GBPS = 1e9 / 8.0
CAP = 10 * GBPS           # each host's port
UPLINK = 10               # Gb/s: the rack's uplink, shared by a and b
TOPO = links.parse({"links": [{"name": "rack1-up", "capacity_gbps": UPLINK,
                               "hosts": ["a", "b"]}]})


def host(name, gbps, heavy=1, ts=100.0, **fields):
    return reports.make(name, ts=ts, link_capacity_bytes_per_s=CAP,
                        link_utilisation=gbps * GBPS / CAP, heavy_io_vms=heavy, **fields)


def claim_on(peer_host, victim_host="v", mean=260.0, ts=100.0, vm="victim"):
    """``{peer_host: [Target]}``: a victim on ``victim_host`` (SLA 200 us, 10 %) at ``mean``."""
    c = a_claim(vm=vm, mean=mean)
    return {peer_host: [remote.Target(victim_host, ts, c, "server")]}


class CrossingTest(unittest.TestCase):

    def test_a_request_crosses_a_link_when_one_end_only_is_behind_it(self):
        link = TOPO.links[0]
        self.assertEqual(1, len(link_share.crossing(link, claim_on("a", victim_host="v"))))
        self.assertEqual(1, len(link_share.crossing(link, claim_on("z", victim_host="a"))))
        # Both ends in the rack: the request never leaves it.
        self.assertEqual([], link_share.crossing(link, claim_on("a", victim_host="b")))
        self.assertEqual([], link_share.crossing(link, claim_on("y", victim_host="z")))


class PartsTest(unittest.TestCase):

    def test_a_host_under_its_share_keeps_its_demand_and_the_rest_is_shared_by_weight(self):
        got = link_share.parts(9.0, {"a": 1.0, "b": 10.0, "c": 10.0}, {"b": 1.0, "c": 3.0})
        self.assertEqual(1.0, got["a"])
        self.assertAlmostEqual(2.0, got["b"])
        self.assertAlmostEqual(6.0, got["c"])

    def test_enough_for_everyone_gives_each_its_demand(self):
        self.assertEqual({"a": 3.0, "b": 0.0}, link_share.parts(10.0, {"a": 3.0, "b": 0.0}, {}))

    @settings(max_examples=300, deadline=None)
    @given(st.floats(0, 100), st.dictionaries(st.sampled_from("abcdef"), st.floats(0, 50)),
           st.dictionaries(st.sampled_from("abcdef"), st.floats(1, 8)))
    def test_parts_never_exceed_a_demand_and_sum_to_what_can_be_given(self, cap, demand, w):
        got = link_share.parts(cap, demand, w)
        for h, d in demand.items():
            self.assertLessEqual(got[h], d + 1e-9)
            self.assertGreaterEqual(got[h], 0.0)
        self.assertAlmostEqual(min(cap, sum(demand.values())), sum(got.values()), places=6)


class StepTest(unittest.TestCase):

    def judge(self, mean, a_gbps=6.0, b_gbps=3.0, ts=100.0, claims=None):
        snap = {"a": host("a", a_gbps), "b": host("b", b_gbps)}
        claims = claim_on("z", victim_host="a", mean=mean, ts=ts) if claims is None else claims
        return link_share.judge(TOPO, "a", snap, claims)

    def test_a_victim_over_its_bound_on_a_congested_link_cuts_the_host_over_its_part(self):
        shared = link_share.SharedLinks()
        # 9 of 10 Gb/s: the link supports a 900 % slowdown; the victim is 50 % over.
        steps = shared.step(self.judge(300.0), now=100.0)
        self.assertEqual(["cut"], [s.why for s in steps])
        j = steps[0].judgement
        ratio = 200.0 * (1 + 0.09) / 300.0
        self.assertAlmostEqual(ratio, j.ratio)
        # a's part of 9 x ratio Gb/s, by max-min with equal weights.
        self.assertAlmostEqual(9 * ratio * GBPS - 3 * GBPS, j.part)
        self.assertAlmostEqual(j.part / j.offered, shared.factor())
        self.assertEqual({"rack1-up": shared.factor()}, shared.factors())

    def test_a_host_within_its_part_is_not_cut_the_one_over_it_is(self):
        # b sends 1 Gb/s, well under its half: only a's part shrinks.
        snap = {"a": host("a", 8.0), "b": host("b", 1.0)}
        claims = claim_on("z", victim_host="a", mean=300.0)
        on_b = link_share.SharedLinks()
        self.assertEqual([], on_b.step(link_share.judge(TOPO, "b", snap, claims), 100.0))
        on_a = link_share.SharedLinks()
        self.assertEqual(["cut"], [s.why for s in on_a.step(
            link_share.judge(TOPO, "a", snap, claims), 100.0)])

    def test_a_window_is_used_once_and_one_change_per_delay(self):
        shared = link_share.SharedLinks(link_share.LinkLimits(delay_s=3.0))
        shared.step(self.judge(300.0), now=100.0)
        first = shared.factor()
        self.assertEqual([], shared.step(self.judge(300.0, ts=101.0), now=101.0))   # in the delay
        self.assertEqual([], shared.step(self.judge(300.0), now=104.0))     # the same window
        steps = shared.step(self.judge(300.0, ts=104.0), now=104.0)
        self.assertEqual(["cut"], [s.why for s in steps])
        self.assertLess(shared.factor(), first)

    def test_the_limit_holds_between_the_target_and_the_threshold(self):
        shared = link_share.SharedLinks()
        shared.step(self.judge(300.0), now=100.0)
        held = shared.factor()
        # 9.5 % over: past the 9 % target, within the 10 % threshold.
        self.assertEqual([], shared.step(self.judge(200.0 * 1.095, ts=104.0), now=104.0))
        self.assertEqual(held, shared.factor())

    def test_a_victim_under_its_target_releases_at_half_the_ratio(self):
        shared = link_share.SharedLinks()
        shared.step(self.judge(300.0), now=100.0)
        held = shared.factor()
        steps = shared.step(self.judge(200.0, ts=104.0), now=104.0)
        self.assertEqual(["release"], [s.why for s in steps])
        self.assertAlmostEqual(min(1.0, held * (1 + (1.09 - 1) / 2)), shared.factor())

    def test_no_claim_releases_half_way_each_delay_and_drops_the_limit(self):
        shared = link_share.SharedLinks(link_share.LinkLimits(floor=0.01))
        shared.step(self.judge(100000.0), now=100.0)
        self.assertEqual(0.01, shared.factor())
        now, seen = 100.0, []
        while shared.factors():
            now += 3.0
            shared.step(self.judge(0, claims={}), now=now)
            seen.append(shared.factor())
        self.assertAlmostEqual(0.505, seen[0])
        self.assertEqual(1.0, seen[-1])
        self.assertLessEqual(len(seen), 8)

    def test_a_claim_the_links_load_does_not_support_cuts_nothing(self):
        shared = link_share.SharedLinks()
        # 0.3 of 10 Gb/s: the link slows a request by 3 %, the victim claims 50 %.
        self.assertEqual([], shared.step(self.judge(300.0, a_gbps=0.2, b_gbps=0.1), now=100.0))
        self.assertEqual(1.0, shared.factor())
        self.assertEqual(1, shared.contradicted)

    def test_a_host_already_holding_its_senders_is_not_contradicted_by_the_low_load(self):
        shared = link_share.SharedLinks()
        shared.step(self.judge(300.0), now=100.0)
        steps = shared.step(self.judge(300.0, a_gbps=0.4, b_gbps=0.1, ts=104.0), now=104.0)
        self.assertEqual(0, shared.contradicted)
        self.assertEqual(["cut"], [s.why for s in steps])

    def test_a_blind_host_is_not_counted(self):
        snap = {"a": host("a", 6.0), "b": host("b", 3.0, state="blind")}
        j = link_share.judge(TOPO, "a", snap, claim_on("z", victim_host="a", mean=300.0))[0]
        self.assertEqual(1, j.load.heard)


@st.composite
def histories(draw):
    """A run of board states seen every 1-4 s: loads, and a claim or none."""
    out, now = [], 100.0
    for _ in range(draw(st.integers(1, 25))):
        now += draw(st.sampled_from([1.0, 2.0, 3.0, 4.0]))
        mean = draw(st.one_of(st.none(), st.floats(150.0, 5000.0)))
        out.append((now, draw(st.floats(0.0, 10.0)), draw(st.floats(0.0, 10.0)), mean,
                    draw(st.booleans())))
    return out


class InvariantsTest(unittest.TestCase):

    @settings(max_examples=300, deadline=None)
    @given(histories())
    def test_the_factor_stays_in_bounds_and_moves_only_as_the_rule_allows(self, history):
        limits = link_share.LinkLimits(delay_s=3.0, floor=0.01)
        shared = link_share.SharedLinks(limits)
        last_change = None
        for now, a_gbps, b_gbps, mean, fresh in history:
            snap = {"a": host("a", a_gbps, ts=now), "b": host("b", b_gbps, ts=now)}
            claims = {} if mean is None else claim_on("z", victim_host="a", mean=mean,
                                                      ts=now if fresh else 100.0)
            judgements = link_share.judge(TOPO, "a", snap, claims)
            before = shared.factor()
            steps = shared.step(judgements, now)
            after = shared.factor()
            self.assertTrue(limits.floor <= after <= 1.0, after)
            if not steps:
                self.assertEqual(before, after)
                continue
            # At most one change per delay.
            self.assertTrue(last_change is None or now - last_change >= limits.delay_s)
            last_change = now
            step = steps[0]
            c = step.judgement.worst.claim if step.judgement.worst is not None else None
            if step.why == "cut":
                # Only a claim over its threshold cuts, on a link that supports it
                # or while this host already limits its senders.
                self.assertLess(after, before)
                self.assertGreater(remote.claimed_pct(c), c.threshold_pct)
                self.assertTrue(before < 1.0 or step.judgement.load.congestion_pct
                                >= c.threshold_pct)
            else:
                # A release: never while the victim is past its target.
                self.assertEqual("release", step.why)
                self.assertGreater(after, before)
                self.assertTrue(c is None or remote.claimed_pct(c)
                                < link_share.AIM * c.threshold_pct)


class FleetTest(unittest.TestCase):
    """Three hosts behind one uplink, each running the rule on the same board."""

    def test_three_hosts_settle_the_victim_under_its_bound_sharing_by_weight(self):
        topo = links.parse({"links": [{"name": "up", "capacity_gbps": 10,
                                       "hosts": ["a", "b", "c"]}]})
        want = {"a": 6.0, "b": 6.0, "c": 1.0}       # Gb/s each would send unlimited
        heavy = {"a": 1, "b": 3, "c": 1}
        agents = {h: link_share.SharedLinks() for h in want}
        sla = 200.0
        now, means = 100.0, []
        for _ in range(40):
            sent = {h: want[h] * agents[h].factor() for h in want}
            rho = min(0.99, sum(sent.values()) / 10.0)
            mean = sla * (1.0 + 0.1 * rho / (1 - rho) / 1.5)    # 10 % over at rho 0.6
            means.append(mean)
            snap = {h: host(h, sent[h], heavy=heavy[h], ts=now) for h in want}
            claims = claim_on("z", victim_host="a", mean=mean, ts=now)
            for h, agent in agents.items():
                agent.step(link_share.judge(topo, h, snap, claims), now)
            now += 3.0
        tail = means[-10:]
        self.assertTrue(all(m <= sla * 1.10 for m in tail), tail)
        # c stays under its part; b (weight 3) keeps more than a (weight 1).
        self.assertEqual(1.0, agents["c"].factor())
        self.assertGreater(want["b"] * agents["b"].factor(), want["a"] * agents["a"].factor())
        self.assertLess(max(tail) - min(tail), 0.05 * sla)


if __name__ == "__main__":
    unittest.main()
