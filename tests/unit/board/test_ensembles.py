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

"""Ensembles on the board: the field, its bounds, and the group's judgement."""

import json
import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt.board import ensembles
from resex_libvirt.board import remote_claims as remote
from resex_libvirt.board import report as report_mod
from resex_libvirt.market import records
from resex_libvirt import sla as sla_mod
from tests.unit.board import reports
from tests.unit.board.test_report import summary
from tests.unit.board.test_report import vm_epoch

GROUP = "3f1c2b9e-5d7a-4c11-9b0e-8a2f6c4d1e77"


def a_member(vm="m1", mean_us=400.0, sla_us=200.0, threshold_pct=10.0, group=GROUP,
             statistic="mean", count=40):
    return ensembles.Member(ensemble=group, vm=vm, sla_us=sla_us, threshold_pct=threshold_pct,
                            statistic=statistic, count=count, mean_us=mean_us, std_us=9.0,
                            p99_us=mean_us * 1.5)


def published(host, members, ts=100.0, **fields):
    return reports.make(host, ts=ts, sensitive_vms=max(4, len(members)),
                        vms=max(4, len(members)),
                        ensembles=[m._asdict() for m in members], **fields)


class TheFieldTest(unittest.TestCase):

    def test_the_field_round_trips_and_an_older_record_has_none(self):
        rec = published("c1", [a_member()])
        data = json.loads(rec.to_json())
        self.assertEqual(report_mod.VERSION, data["version"])
        self.assertEqual([a_member().to_dict()], data["ensembles"])
        self.assertEqual(rec, report_mod.HostReport.from_json(rec.to_json()))
        del data["ensembles"]
        data["version"] = "1.5"
        self.assertEqual((), report_mod.HostReport.from_dict(data).ensembles)

    def test_a_wrong_shape_rejects_the_record(self):
        good = a_member()._asdict()
        bad_members = [{"vm": "m1"}, "x", [good, good],
                       [dict(good, ensemble="")], [dict(good, ensemble="a b")],
                       [dict(good, ensemble="x" * 65)], [dict(good, ensemble=7)],
                       [dict(good, ensemble="gr\u00fcppe")],
                       [dict(good, statistic="p50")], [dict(good, sla_us=0.0)],
                       [dict(good, mean_us=-1.0)], [dict(good, count=1.5)],
                       [dict(good, count=True)], [dict(good, p99_us=float("inf"))],
                       [dict(good, vm="")], [dict(good, vm="v%d" % k) for k in range(5)]]
        for bad in bad_members:
            with self.assertRaises(report_mod.InvalidReport, msg=repr(bad)[:80]):
                reports.make("c1", ts=100.0, sensitive_vms=4,
                             ensembles=bad if isinstance(bad, list) else [bad])
        too_many = [a_member(vm="v%d" % k)._asdict() for k in range(ensembles.MAX_MEMBERS + 1)]
        with self.assertRaises(report_mod.InvalidReport):
            reports.make("c1", ts=100.0, vms=40, sensitive_vms=40, ensembles=too_many)

    def test_a_reader_ignores_keys_a_newer_minor_version_adds_to_a_member(self):
        self.assertEqual(a_member(), ensembles.member(dict(a_member()._asdict(), tomorrow=1)))

    def test_members_come_after_the_claims_before_the_addresses_and_stay_in_bound(self):
        vms = [vm_epoch("v%03d" % k, 10, sensitive=k < 20) for k in range(200)]
        members = [a_member(vm="v%03d" % k, mean_us=200.0 + k) for k in range(20)]
        addresses = {"v%03d" % k: ["10.1.%d.%d" % (k // 250, k % 250)] for k in range(200)}
        rec = report_mod.HostReport.from_summary("c1", 1.0, summary(vms, 0.1), 1e9, "x",
                                                 addresses=addresses, ensembles=members)
        # At most MAX_MEMBERS: the worst (furthest over their bounds) are kept.
        self.assertEqual(ensembles.MAX_MEMBERS, len(rec.ensembles))
        self.assertEqual({"v%03d" % k for k in range(4, 20)}, {m.vm for m in rec.ensembles})
        self.assertLessEqual(len(rec.to_json()), report_mod.MAX_RECORD_BYTES)
        self.assertEqual(rec, report_mod.HostReport.from_json(rec.to_json()))

    @settings(max_examples=200, deadline=None)
    @given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                        lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.sampled_from(sorted(ensembles._KEYS) + ["x"]),
                                          inner, max_size=11), max_leaves=30))
    def test_anything_decoded_is_a_member_list_or_a_value_error(self, value):
        try:
            out = ensembles.normalize(value)
        except ValueError:
            return
        self.assertTrue(all(isinstance(m, ensembles.Member) for m in out))

    @settings(max_examples=200, deadline=None)
    @given(field=st.sampled_from(sorted(ensembles._KEYS)),
           value=st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=80)
           | st.lists(st.integers(), max_size=2))
    def test_a_malformed_field_is_rejected_at_the_boundary_and_never_raises_past_it(
            self, field, value):
        data = published("c1", [a_member()]).to_dict()
        data["ensembles"][0][field] = value
        try:
            rec = report_mod.HostReport.from_json(json.dumps(data))
        except report_mod.InvalidReport:
            return
        # Accepted: it is a valid member still, and the record round trips.
        self.assertEqual(rec, report_mod.HostReport.from_json(rec.to_json()))


class OfWindowsTest(unittest.TestCase):

    def test_a_member_publishes_its_own_window_and_sla_and_others_nothing(self):
        sla = sla_mod.SLA(latency_sla_us=200.0, latency_statistic="p99")
        win = records.LatencyWindow(count=40, mean_us=300.0, std_us=9.0, p99_us=450.0)
        empty = records.LatencyWindow(count=0, mean_us=0.0, std_us=0.0, p99_us=0.0)
        got = ensembles.of_windows(
            {"m1": sla, "m2": sla, "m3": sla}, {"m1": win, "m2": empty, "x": win},
            {"m1": GROUP, "m2": GROUP, "x": GROUP, "m3": "bad id"})
        self.assertEqual((ensembles.Member(GROUP, "m1", 200.0, 10.0, "p99", 40, 300.0, 9.0,
                                           450.0),), got)


@st.composite
def boards(draw):
    """A few hosts, each with members of two ensembles, some blind, at various times."""
    out = []
    for h in range(draw(st.integers(1, 4))):
        members = [a_member(vm="m-%d-%d" % (h, k), group=draw(st.sampled_from(["e1", "e2"])),
                            mean_us=draw(st.floats(10.0, 1000.0)),
                            sla_us=draw(st.sampled_from([100.0, 200.0, 400.0])))
                   for k in range(draw(st.integers(0, 3)))]
        out.append(published("c%d" % h, members, ts=100.0 + draw(st.integers(0, 10)),
                             state=draw(st.sampled_from(["controlling", "controlling",
                                                         "blind"]))))
    return out


class JudgeTest(unittest.TestCase):

    @settings(max_examples=300, deadline=None)
    @given(board=boards(), now=st.floats(100.0, 125.0), max_age=st.floats(1.0, 15.0))
    def test_the_groups_judgement_is_its_worst_fresh_member_never_an_expired_one(
            self, board, now, max_age):
        got = ensembles.judge(board, now, max_age)
        fresh = [(r, m) for r in board if not r.blind and now - r.ts <= max_age
                 for m in r.ensembles]
        self.assertEqual({m.ensemble for _r, m in fresh}, set(got))
        for group, judged in got.items():
            self.assertLessEqual(now - judged.ts, max_age)
            self.assertEqual(max(remote.claimed_pct(m) for _r, m in fresh
                                 if m.ensemble == group),
                             remote.claimed_pct(judged.member))
            self.assertEqual(judged.over,
                             remote.claimed_pct(judged.member) > judged.member.threshold_pct)

    @settings(max_examples=200, deadline=None)
    @given(board=boards(), now=st.floats(100.0, 125.0), max_age=st.floats(1.0, 15.0),
           host=st.sampled_from(["c0", "c1", "c9"]),
           members=st.dictionaries(st.sampled_from(["a", "b", "c"]),
                                   st.sampled_from(["e1", "e2", "e3"])))
    def test_a_host_judges_its_members_only_when_the_group_is_over_elsewhere(
            self, board, now, max_age, host, members):
        judged = ensembles.judge(board, now, max_age)
        got = ensembles.victims(host, judged, members, now, max_age)
        for vm, group in members.items():
            j = judged.get(group)
            acts = j is not None and j.over and j.host != host and now - j.ts <= max_age
            self.assertEqual(acts, vm in got)
            if acts:
                self.assertEqual(j.member, got[vm].claim)
                self.assertEqual(group, got[vm].sla_fields()["ensemble"])

    def test_within_its_bound_the_group_judges_no_one(self):
        board = [published("c1", [a_member(mean_us=210.0)])]
        judged = ensembles.judge(board, 100.0, 10.0)
        self.assertFalse(judged[GROUP].over)
        self.assertEqual({}, ensembles.victims("c2", judged, {"s1": GROUP}, 100.0, 10.0))

    def test_the_host_of_the_worst_member_does_not_count_it_twice(self):
        board = [published("c1", [a_member(mean_us=500.0)]),
                 published("c2", [a_member(vm="m2", mean_us=300.0)])]
        judged = ensembles.judge(board, 100.0, 10.0)
        self.assertEqual("c1", judged[GROUP].host)
        self.assertEqual({}, ensembles.victims("c1", judged, {"m1": GROUP, "x": GROUP},
                                               100.0, 10.0))
        got = ensembles.victims("c2", judged, {"m2": GROUP, "s2": GROUP, "y": "other"},
                                100.0, 10.0)
        self.assertEqual({"m2", "s2"}, set(got))
        self.assertEqual({"latency_sla_us": 200.0, "interference_threshold_pct": 10.0,
                          "latency_statistic": "mean", "ensemble": GROUP},
                         got["m2"].sla_fields())
