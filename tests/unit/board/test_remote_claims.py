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

"""Report 1.5: a victim's window claimed on the board for the host of its peer."""

import json
import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt.board import addresses
from resex_libvirt.board import remote_claims as remote
from resex_libvirt.board import report as report_mod
from resex_libvirt.market import records
from resex_libvirt import sla as sla_mod
from tests.unit.board import reports
from tests.unit.board.test_report import summary
from tests.unit.board.test_report import vm_epoch

VICTIM = "aaaaaaaa-0000-4000-8000-000000000001"
SERVER = "bbbbbbbb-0000-4000-8000-000000000002"
BULK = "cccccccc-0000-4000-8000-000000000003"
SLA = sla_mod.SLA(latency_sla_us=200.0, interference_threshold_pct=10.0)


def window(mean, peer="10.0.2.7:7788", count=40):
    return records.LatencyWindow(count=count, mean_us=mean, std_us=9.0, p99_us=mean * 1.5,
                                 peer=peer)


def a_claim(vm=VICTIM, peer="10.0.2.7:7788", mean=260.0):
    return remote.of_windows({vm: SLA}, {vm: window(mean, peer)}, {})[0]


class OfWindowsTest(unittest.TestCase):

    def test_a_victim_whose_peer_is_elsewhere_claims_its_sla_and_window(self):
        c = a_claim()
        self.assertEqual((VICTIM, "10.0.2.7:7788", 200.0, 10.0, "mean", 40, 260.0, 9.0, 390.0,
                          None), tuple(c))
        self.assertNotIn("new", c.to_dict())      # not said: not written

    def test_a_claim_says_the_requests_new_since_the_last_report_at_most_its_count(self):
        new = {VICTIM: 12}
        c = remote.of_windows({VICTIM: SLA}, {VICTIM: window(260.0)}, {}, new)[0]
        self.assertEqual(12, c.new)
        self.assertEqual(c, remote.claim(json.loads(json.dumps(c.to_dict()))))
        c = remote.of_windows({VICTIM: SLA}, {VICTIM: window(260.0)}, {}, {VICTIM: 99})[0]
        self.assertEqual(40, c.new)

    def test_no_peer_no_request_or_a_peer_on_this_host_claims_nothing(self):
        own = {SERVER: ["10.0.1.5", "fa:16:3e:00:00:05"]}
        for win in (window(260.0, peer=None), window(260.0, count=0),
                    window(260.0, peer="10.0.1.5:7788"),
                    # RoCE v2 over IPv4: the GID maps the local server's address.
                    window(260.0, peer="0000:0000:0000:0000:0000:ffff:0a00:0105")):
            self.assertEqual((), remote.of_windows({VICTIM: SLA}, {VICTIM: win}, own), win)

    def test_a_vm_without_an_sla_in_specs_claims_nothing(self):
        self.assertEqual((), remote.of_windows({}, {VICTIM: window(260.0)}, {}))

    def test_at_most_max_claims_the_worst_windows_first(self):
        n = remote.MAX_CLAIMS + 4
        vms = ["vm-%02d" % k for k in range(n)]
        got = remote.of_windows({vm: SLA for vm in vms},
                                {vm: window(200.0 + k) for k, vm in enumerate(vms)}, {})
        self.assertEqual(sorted(vms[-remote.MAX_CLAIMS:]), [c.vm for c in got])

    def test_fit_keeps_at_most_max_claims_the_worst_first_whatever_the_budget(self):
        # A reader refuses a longer list: the whole report would be lost.
        many = [a_claim(vm="vm-%02d" % k, mean=200.0 + k)
                for k in range(remote.MAX_CLAIMS + 3)]
        got = remote.fit(many, report_mod.MAX_RECORD_BYTES * 10)
        self.assertEqual(remote.MAX_CLAIMS, len(got))
        self.assertEqual(sorted(c.vm for c in many[3:]), [c.vm for c in got])
        self.assertEqual(got, remote.normalize([c.to_dict() for c in got]))


class TheFieldTest(unittest.TestCase):

    def published(self, claims, **fields):
        return reports.make("c1", ts=100.0, sensitive_vms=4, remote_claims=claims, **fields)

    def test_the_field_round_trips_and_an_older_record_has_none(self):
        rec = self.published([a_claim()._asdict()])
        data = json.loads(rec.to_json())
        self.assertEqual(report_mod.VERSION, data["version"])
        self.assertEqual([a_claim().to_dict()], data["remote_claims"])
        self.assertEqual(rec, report_mod.HostReport.from_json(rec.to_json()))
        del data["remote_claims"]
        data["version"] = "1.4"
        self.assertEqual((), report_mod.HostReport.from_dict(data).remote_claims)

    def test_a_wrong_shape_rejects_the_record(self):
        good = a_claim()._asdict()
        bad_claims = [{"vm": VICTIM}, "x", [good, good],
                      [dict(good, peer="host.example")], [dict(good, statistic="p50")],
                      [dict(good, sla_us=0.0)], [dict(good, mean_us=-1.0)],
                      [dict(good, count=1.5)], [dict(good, count=True)],
                      [dict(good, new=41)], [dict(good, new=-1)], [dict(good, new=2.0)],
                      [dict(good, p99_us=float("inf"))], [dict(good, vm="")],
                      [dict(good, vm="v%d" % k) for k in range(5)]]
        for bad in bad_claims:
            with self.assertRaises(report_mod.InvalidReport, msg=repr(bad)[:80]):
                self.published(bad if isinstance(bad, list) else [bad])

    def test_a_reader_ignores_keys_a_newer_minor_version_adds_to_a_claim(self):
        got = remote.claim(dict(a_claim()._asdict(), tomorrow=1))
        self.assertEqual(a_claim(), got)

    def test_claims_come_before_the_addresses_and_the_record_stays_in_bound(self):
        vms = [vm_epoch("v%03d" % k, 10, sensitive=k < 4) for k in range(200)]
        claims = [a_claim(vm="v%03d" % k) for k in range(4)]
        addresses = {"v%03d" % k: ["10.1.%d.%d" % (k // 250, k % 250), "fa:16:3e:00:%02x:%02x"
                                   % (k // 256, k % 256)] for k in range(200)}
        rec = report_mod.HostReport.from_summary("c1", 1.0, summary(vms, 0.1), 1e9, "x",
                                                 addresses=addresses, remote_claims=claims)
        self.assertEqual(tuple(sorted(claims)), rec.remote_claims)
        self.assertLessEqual(len(rec.to_json()), report_mod.MAX_RECORD_BYTES)
        self.assertLess(len(rec.addresses), 200)
        self.assertEqual(rec, report_mod.HostReport.from_json(rec.to_json()))

    @settings(max_examples=200, deadline=None)
    @given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                        lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.sampled_from(sorted(remote._KEYS) + ["x"]),
                                          inner, max_size=10), max_leaves=30))
    def test_anything_decoded_is_a_claim_list_or_a_value_error(self, value):
        try:
            out = remote.normalize(value)
        except ValueError:
            return
        self.assertTrue(all(isinstance(c, remote.Claim) for c in out))


class OnHostTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        # c1 runs the victim; its peer, the server, runs on c2 (10.0.2.7).
        self.c1 = reports.make("c1", ts=100.0, vms=2, sensitive_vms=1,
                               addresses={VICTIM: ["10.0.1.4"]},
                               remote_claims=[a_claim()._asdict()])
        self.c2 = reports.make("c2", ts=100.5, vms=2, addresses={SERVER: ["10.0.2.7"],
                                                                 BULK: ["10.0.2.8"]})

    def test_the_peers_host_finds_the_claim_on_its_vm(self):
        got = remote.on_host("c2", {"c1": self.c1, "c2": self.c2})
        self.assertEqual([remote.Target("c1", 100.0, a_claim(), SERVER)], got)
        self.assertEqual([], remote.on_host("c1", [self.c1, self.c2]))
        self.assertEqual([], remote.on_host("c3", [self.c1, self.c2]))

    def test_a_blind_or_stale_claimant_and_a_shared_address_lead_nowhere(self):
        blind = reports.make("c1", ts=100.0, vms=2, sensitive_vms=1, state="blind",
                             remote_claims=[a_claim()._asdict()])
        self.assertEqual([], remote.on_host("c2", [blind, self.c2]))
        self.assertEqual([], remote.on_host("c2", [self.c1, self.c2], now=200.0, max_age_s=30.0))
        self.assertEqual(1, len(remote.on_host("c2", [self.c1, self.c2], now=110.0,
                                               max_age_s=30.0)))
        # Another host's VM with the same (private) address: no answer, no claim.
        c3 = reports.make("c3", ts=100.0, vms=1, addresses={"other": ["10.0.2.7"]})
        self.assertEqual([], remote.on_host("c2", [self.c1, self.c2, c3]))


ADDRESSES = ["10.0.0.%d" % k for k in range(1, 5)]


@st.composite
def boards(draw):
    """A few hosts with VMs at a few (shared, reused) addresses, some claiming peers."""
    out = []
    for h in range(draw(st.integers(1, 4))):
        vms = draw(st.lists(st.sampled_from(["vm-a", "vm-b", "vm-c", "vm-%d" % h]),
                            max_size=3, unique=True))
        addresses = {vm: draw(st.lists(st.sampled_from(ADDRESSES), min_size=1, max_size=2))
                     for vm in vms}
        peers = draw(st.lists(st.sampled_from(ADDRESSES), max_size=2))
        claims = [a_claim(vm="victim-%d-%d" % (h, k), peer=p)._asdict()
                  for k, p in enumerate(peers)]
        out.append(reports.make("c%d" % h, ts=100.0 + draw(st.integers(0, 3)),
                                vms=max(3, len(vms)), sensitive_vms=len(claims),
                                addresses=addresses, remote_claims=claims))
    return out


class TargetsAgreeWithResolveTest(unittest.TestCase):

    @settings(max_examples=200, deadline=None)
    @given(boards())
    def test_every_claim_is_where_resolve_says_its_peer_is(self, board):
        # The one-pass index against the reference rule, claim by claim.
        got = remote.targets(board)
        want = {}
        for rep in board:
            for c in rep.remote_claims:
                where = addresses.resolve(c.peer, board)
                if where is not None and where.host != rep.host:
                    want.setdefault(where.host, []).append(
                        remote.Target(rep.host, rep.ts, c, where.vm))
        for found in want.values():
            found.sort(key=lambda t: (t.host, t.claim.vm))
        self.assertEqual(want, got)


class VictimsTest(unittest.TestCase):
    """Which claim judges a local VM (:func:`remote.victims`) and when the port contradicts it."""

    @settings(max_examples=200, deadline=None)
    @given(board=boards(), now=st.floats(100.0, 120.0), max_age=st.floats(1.0, 15.0),
           own=st.sets(st.sampled_from(["vm-a", "vm-b", "vm-c"])))
    def test_never_an_expired_claim_nor_a_vm_with_its_own_sla_and_always_the_worst(
            self, board, now, max_age, own):
        for host, found in remote.targets(board).items():
            local = {t.vm for t in found}
            got = remote.victims(found, local, own, now, max_age)
            for vm, victim in got.items():
                self.assertNotIn(vm, own)
                self.assertLessEqual(now - victim.target.ts, max_age)
                rivals = [t for t in found if t.vm == vm and now - t.ts <= max_age]
                self.assertEqual(max(remote.claimed_pct(t.claim) for t in rivals),
                                 remote.claimed_pct(victim.claim))
            # Every VM with a live claim and no SLA of its own is judged by one.
            live = {t.vm for t in found if now - t.ts <= max_age and t.vm not in own}
            self.assertEqual(live, set(got))

    @settings(max_examples=300, deadline=None)
    @given(mean=st.floats(1.0, 1e6), threshold=st.floats(0.0, 1000.0),
           port=st.floats(0.0, 0.99))
    def test_the_port_supports_a_claim_over_its_threshold_only_when_it_could_cause_it(
            self, mean, threshold, port):
        c = a_claim(mean=mean)._replace(threshold_pct=threshold)
        inflation = report_mod.queueing_inflation_pct(port)
        supported = remote.port_supports(c, inflation)
        if remote.claimed_pct(c) > threshold:
            self.assertEqual(inflation >= threshold, supported)
        else:
            self.assertTrue(supported)     # asks for nothing: no contradiction
        # A sender already held: the port's load is the cap's doing.
        self.assertTrue(remote.port_supports(c, inflation, holding=True))
