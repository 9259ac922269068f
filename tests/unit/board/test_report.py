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

"""The host report: its fields from a market epoch, its wire format, the congestion index."""

import json
import math
import unittest

from hypothesis import given
from hypothesis import strategies as st

from resex_libvirt.board import report as report_mod
from resex_libvirt.market import market as market_mod
from resex_libvirt.market import records
from resex_libvirt import sla as sla_mod
from tests.unit.board import reports


def vm_epoch(vm, tx_mtus=0, sensitive=False, io_class="normal", interference=None,
             cpu=50.0, floor=0.0):
    return market_mod.VMEpoch(
        vm=vm, allocation=100.0, spent_cpu=0.0, spent_io=0.0, balance=100.0, rate=1.0,
        cap_mean=100.0, cap_min=100.0, cpu_pct_mean=cpu, tx_mtus=tx_mtus,
        tx_bytes=tx_mtus * 1024, interference_pct=interference, sensitive=sensitive,
        io_class="sensitive" if sensitive else io_class, cap_floor=floor)


def summary(vms, utilisation, inflation=0.0, cpu_price=1.0, io_price=1.0):
    return market_mod.EpochSummary(
        epoch=3, intervals=1000, vms=tuple(vms), link_bytes_per_epoch=float(1 << 30),
        link_utilisation=utilisation, cpu_price=cpu_price, io_price=io_price,
        latency_inflation_pct=inflation)


class CongestionIndexTest(unittest.TestCase):
    """CI = max(observed inflation, 100 rho / (1 - rho)), rho clamped at 0.99."""

    def test_queueing_term_is_the_processor_sharing_slowdown(self):
        # rho 0.5: a request takes twice as long -> +100 %.
        self.assertAlmostEqual(100.0, report_mod.queueing_inflation_pct(0.5))
        # rho 0.2: 1 / 0.8 = 1.25 -> +25 %.
        self.assertAlmostEqual(25.0, report_mod.queueing_inflation_pct(0.2))
        # rho 1/11: 1 / (10/11) = 1.1 -> +10 %, the default SLA threshold.
        self.assertAlmostEqual(10.0, report_mod.queueing_inflation_pct(1.0 / 11.0))
        self.assertEqual(0.0, report_mod.queueing_inflation_pct(0.0))

    def test_saturated_link_gives_a_finite_index(self):
        self.assertAlmostEqual(9900.0, report_mod.queueing_inflation_pct(1.0))

    def test_observed_inflation_is_a_floor_of_the_index(self):
        # rho 0.2 predicts 25 %, but sensitive tenants measure 40 %: 40 wins.
        rec = reports.make(link_utilisation=0.2, latency_inflation_pct=40.0)
        self.assertAlmostEqual(40.0, rec.congestion_index)
        # ... and a quiet measurement does not hide a busy link.
        rec = reports.make(link_utilisation=0.5, latency_inflation_pct=3.0)
        self.assertAlmostEqual(100.0, rec.congestion_index)

    @given(st.floats(0.0, 1.0), st.floats(0.0, 1e6))
    def test_index_grows_with_utilisation_and_never_below_observation(self, rho, seen):
        rec = reports.make(link_utilisation=rho, latency_inflation_pct=seen)
        self.assertGreaterEqual(rec.congestion_index, seen)
        busier = reports.make(link_utilisation=min(1.0, rho + 0.01), latency_inflation_pct=seen)
        self.assertGreaterEqual(busier.congestion_index, rec.congestion_index)


class FromSummaryTest(unittest.TestCase):

    def test_counts_and_io_shares_come_from_the_epoch(self):
        # 1000 MTUs: the sensitive VM sent 100, the bulk VM 700, two others 100 each.
        s = summary([vm_epoch("lat", 100, sensitive=True, interference=12.0),
                     vm_epoch("big", 700, io_class="bulk"),
                     vm_epoch("a", 100), vm_epoch("b", 100)],
                    utilisation=0.4, inflation=12.0, io_price=2.5)
        rec = report_mod.HostReport.from_summary("c1", 1700000000.0, s, 1e9, "1.2.3")
        self.assertEqual(("c1", 1700000000.0, 3), (rec.host, rec.ts, rec.epoch))
        self.assertEqual((4, 1, 1), (rec.vms, rec.sensitive_vms, rec.heavy_io_vms))
        self.assertAlmostEqual(0.1, rec.sensitive_io_share)
        self.assertAlmostEqual(0.7, rec.heavy_io_share)
        # A lone reporter cannot raise the observed inflation above the model
        # of the untaxable load (none here: every VM can be capped).
        self.assertEqual((0.4, 2.5, 1.0, 0.0, 1), (rec.link_utilisation, rec.io_price,
                                                   rec.cpu_price, rec.latency_inflation_pct,
                                                   rec.inflation_reporters))
        self.assertEqual((1e9, "1.2.3"), (rec.link_capacity_bytes_per_s, rec.agent_version))

    def test_a_declared_bulk_vm_is_heavy_even_when_idle(self):
        s = summary([vm_epoch("big", 0, io_class="bulk"), vm_epoch("a", 0)], utilisation=0.0)
        rec = report_mod.HostReport.from_summary("c1", 1.0, s, 1e9, "x")
        self.assertEqual(1, rec.heavy_io_vms)
        self.assertEqual(0.0, rec.heavy_io_share)

    def test_a_majority_sender_on_a_busy_link_is_heavy(self):
        # 60 % of the MTUs on a link at 50 %: 30 % of the link, above 5 %.
        s = summary([vm_epoch("x", 600), vm_epoch("y", 400)], utilisation=0.5)
        rec = report_mod.HostReport.from_summary("c1", 1.0, s, 1e9, "x")
        self.assertEqual(1, rec.heavy_io_vms)
        self.assertAlmostEqual(0.6, rec.heavy_io_share)

    def test_the_only_sender_on_an_idle_link_is_not_heavy(self):
        # 100 % of the MTUs, but the link is at 1 %: the PS model predicts ~1 %.
        s = summary([vm_epoch("x", 10), vm_epoch("y", 0)], utilisation=0.01)
        rec = report_mod.HostReport.from_summary("c1", 1.0, s, 1e9, "x")
        self.assertEqual(0, rec.heavy_io_vms)

    def test_a_minority_sender_is_not_heavy(self):
        s = summary([vm_epoch("x", 400), vm_epoch("y", 300), vm_epoch("z", 300)],
                    utilisation=0.9)
        rec = report_mod.HostReport.from_summary("c1", 1.0, s, 1e9, "x")
        self.assertEqual(0, rec.heavy_io_vms)

    def test_a_real_market_epoch_makes_a_valid_report(self):
        params = market_mod.MarketParams(interval_s=0.01, intervals_per_epoch=10,
                                         link_bytes_per_s=1024 * 1000.0, mtu=1024)
        market = market_mod.Market(params, None)
        market.add(records.VMSpec("lat", sla=sla_mod.SLA(latency_sla_us=50.0)))
        market.add(records.VMSpec("bulk", sla=sla_mod.SLA(io_class="bulk")))
        for tick in range(10):
            market.step({"lat": records.Sample("lat", tick, 10.0, 1024, 1),
                         "bulk": records.Sample("bulk", tick, 90.0, 5 * 1024, 5)})
        rec = report_mod.HostReport.from_summary("c1", 5.0, market.end_epoch(), 1024e3, "x")
        # The link carries 10 MTUs per interval; the VMs sent 6: 60 %.
        self.assertAlmostEqual(0.6, rec.link_utilisation)
        self.assertEqual((2, 1, 1), (rec.vms, rec.sensitive_vms, rec.heavy_io_vms))
        self.assertAlmostEqual(1 / 6, rec.sensitive_io_share)
        self.assertEqual(rec, report_mod.HostReport.from_json(rec.to_json()))


class WireFormatTest(unittest.TestCase):

    def assertRejected(self, raw, fragment):
        with self.assertRaises(report_mod.InvalidReport) as ctx:
            report_mod.HostReport.from_json(raw)
        self.assertIn(fragment, str(ctx.exception))

    def _with(self, **changes):
        data = reports.make().to_dict()
        data.update(changes)
        return json.dumps(data, separators=(",", ":"))

    def test_a_record_survives_the_round_trip(self):
        rec = reports.make(link_utilisation=0.25, sensitive_vms=2, vms=3)
        self.assertEqual(rec, report_mod.HostReport.from_json(rec.to_json()))
        self.assertEqual(rec, report_mod.HostReport.from_json(rec.to_json().encode()))

    def test_another_major_version_is_rejected(self):
        self.assertRejected(self._with(version="2.0"), "unknown report version '2.0'")
        self.assertRejected(self._with(version=2), "unknown report version 2")
        self.assertRejected(self._with(version=True), "malformed report version")
        self.assertRejected(self._with(version="1.x"), "malformed report version")

    def test_wrong_types_are_rejected(self):
        self.assertRejected(self._with(ts="yesterday"), "ts must be a number")
        self.assertRejected(self._with(vms=True), "vms must be a non-negative integer")
        self.assertRejected(self._with(vms=2.0), "vms must be a non-negative integer")
        self.assertRejected(self._with(host=5), "host must be a non-empty string")
        self.assertRejected("[1, 2]", "must be a JSON object")

    def test_non_finite_numbers_are_rejected(self):
        self.assertRejected(self._with().replace('"io_price":1.0', '"io_price":NaN'),
                            "non-finite")
        self.assertRejected(self._with().replace('"io_price":1.0', '"io_price":1e999'),
                            "io_price must be finite")
        self.assertRaises(report_mod.InvalidReport, reports.make, cpu_price=math.inf)

    def test_out_of_range_values_are_rejected(self):
        self.assertRejected(self._with(link_utilisation=1.5), "link_utilisation must be <= 1")
        self.assertRejected(self._with(io_price=-1), "io_price must be >= 0")
        self.assertRejected(self._with(sensitive_vms=9, vms=2), "must be <= vms")

    def test_missing_fields_of_1_0_are_rejected(self):
        data = reports.make().to_dict()
        del data["io_price"]
        self.assertRejected(json.dumps(data), "missing fields: io_price")

    def test_garbage_is_rejected(self):
        self.assertRejected("{not json", "not JSON")
        self.assertRejected(b"\xff\xfe", "not UTF-8")
        self.assertRejected("x" * (report_mod.MAX_RECORD_BYTES + 1), "longer than")
        self.assertRejected(None, "must be text")

    @given(st.floats(0, 1), st.floats(0, 1e9), st.floats(0, 1e6), st.integers(0, 1000),
           st.text(min_size=1, max_size=50).filter(str.strip))
    def test_every_valid_report_round_trips(self, util, price, infl, vms, host):
        rec = reports.make(host, link_utilisation=util, io_price=price,
                           latency_inflation_pct=infl, vms=vms, sensitive_vms=vms // 2)
        self.assertEqual(rec, report_mod.HostReport.from_json(rec.to_json()))


class RollingUpgradeTest(unittest.TestCase):
    """Readers accept any minor version of their major, in both directions."""

    def test_the_report_carries_a_major_minor_version(self):
        self.assertEqual("1.7", json.loads(reports.make().to_json())["version"])

    def test_a_reader_ignores_the_fields_of_a_newer_minor_version(self):
        # A 1.7 agent adds fields this reader has never heard of.
        data = reports.make("c1", link_utilisation=0.2).to_dict()
        data.update(version="1.7", colour="red", hca_queue_pairs=12)
        rec = report_mod.HostReport.from_json(json.dumps(data))
        self.assertEqual(("c1", 0.2, "1.7"), (rec.host, rec.link_utilisation, rec.version))
        self.assertNotIn("colour", rec.to_dict())

    def test_a_reader_fills_the_fields_an_older_agent_did_not_write(self):
        # A 1.0 agent: integer version, no untaxable_utilisation, no inflation_reporters.
        data = reports.make("c1", link_utilisation=0.3, latency_inflation_pct=5.0).to_dict()
        for name in report_mod.DEFAULTS:
            del data[name]
        data["version"] = 1
        rec = report_mod.HostReport.from_json(json.dumps(data))
        # All of an old agent's load counts as untaxable: the old index, to the digit.
        self.assertEqual(0.3, rec.untaxable_utilisation)
        self.assertEqual(0, rec.inflation_reporters)
        self.assertAlmostEqual(100 * 0.3 / 0.7, rec.congestion_index)

    def test_a_report_older_than_1_2_was_made_by_an_agent_that_saw_its_host(self):
        data = reports.make("c1").to_dict()
        del data["state"]
        data["version"] = "1.1"
        self.assertFalse(report_mod.HostReport.from_dict(data).blind)

    def test_a_blind_report_round_trips_and_an_unknown_state_reads_as_blind(self):
        rec = report_mod.HostReport.from_json(reports.make("c1", state="blind").to_json())
        self.assertEqual(("blind", True), (rec.state, rec.blind))
        data = reports.make("c1").to_dict()
        data.update(version="1.9", state="partially-sighted")
        self.assertTrue(report_mod.HostReport.from_dict(data).blind)
        data["state"] = ""
        self.assertRaises(report_mod.InvalidReport, report_mod.HostReport.from_dict, data)

    def test_an_older_reader_reads_a_newer_report(self):
        """The reverse pairing: this release's record through a reader that knows only 1.0.

        The 1.0 reader is this module with the 1.1 fields taken out of its
        field set, which is what a 1.x reader that predates them sees.
        """
        new = reports.make("c1", link_utilisation=0.4, untaxable_utilisation=0.1,
                           inflation_reporters=2).to_json()
        known = report_mod._FIELD_NAMES - set(report_mod.DEFAULTS)
        data = {k: v for k, v in json.loads(new).items() if k in known}
        old_view = report_mod.HostReport.from_dict(data)
        self.assertEqual(("c1", 0.4), (old_view.host, old_view.link_utilisation))
        # ... and it errs on the safe side: all load untaxable.
        self.assertEqual(0.4, old_view.untaxable_utilisation)


class ProjectsTest(unittest.TestCase):
    """Report 1.3: the VMs counted by the project that owns them."""

    def test_an_epochs_vms_are_counted_by_project_most_first(self):
        vms = [vm_epoch("a", sensitive=True), vm_epoch("b"), vm_epoch("c", io_class="bulk"),
               vm_epoch("d"), vm_epoch("e")]
        rec = report_mod.HostReport.from_summary(
            "c1", 1.0, summary(vms, 0.1), 1e9, "test",
            projects={"a": "p-web", "b": "p-web", "c": "p-batch", "e": ""})
        self.assertEqual((report_mod.ProjectCount("p-web", 2, 1, 0),
                          report_mod.ProjectCount("p-batch", 1, 0, 1)), rec.projects)
        self.assertEqual([{"project": "p-web", "vms": 2, "sensitive_vms": 1, "heavy_io_vms": 0},
                          {"project": "p-batch", "vms": 1, "sensitive_vms": 0,
                           "heavy_io_vms": 1}], json.loads(rec.to_json())["projects"])
        self.assertEqual(rec, report_mod.HostReport.from_json(rec.to_json()))

    def test_without_projects_the_list_is_empty(self):
        rec = report_mod.HostReport.from_summary("c1", 1.0, summary([vm_epoch("a")], 0.0),
                                                 1e9, "test")
        self.assertEqual((), rec.projects)
        self.assertEqual([], rec.to_dict()["projects"])

    def test_the_longest_report_stays_within_what_every_reader_accepts(self):
        # Readers since 1.0 refuse records over MAX_RECORD_BYTES: 1.3's worst
        # case (a project per VM, the longest IDs, every count large) fits.
        n = 5000
        vms = [vm_epoch("vm-%05d" % k, sensitive=k % 2 == 0, io_class="bulk")
               for k in range(n)]
        projects = {"vm-%05d" % k: ("%05d" % k).rjust(report_mod.MAX_PROJECT_CHARS, "f")
                    for k in range(n)}
        rec = report_mod.HostReport.from_summary(
            "h" * 255, 1.7e9, summary(vms, 0.123456789, 12.3456789), 1.23456789e10,
            "x" * 255, projects=projects)
        self.assertEqual(report_mod.MAX_PROJECTS, len(rec.projects))
        self.assertLess(len(rec.to_json().encode()), report_mod.MAX_RECORD_BYTES)
        # The same, with every project owning as many VMs as the others.
        many = {vm: "p%02d" % (k % 40) for k, vm in enumerate(sorted(projects))}
        rec = report_mod.HostReport.from_summary("c1", 1.0, summary(vms, 0.1), 1e9, "t",
                                                 projects=many)
        self.assertEqual(["p%02d" % k for k in range(32)], [p.project for p in rec.projects])
        self.assertEqual(125, rec.projects[0].vms)

    def test_bad_projects_are_rejected(self):
        good = {"project": "p1", "vms": 1, "sensitive_vms": 0, "heavy_io_vms": 0}
        for bad in (None, "p1", [good, good], [dict(good, vms=5)], [dict(good, project="")],
                    [dict(good, sensitive_vms=2)], [dict(good, vms=-1)], ["p1"],
                    [dict(good, project="p%d" % k) for k in range(33)],
                    [dict(good, project="x" * 65)]):
            data = reports.make("c1", vms=4).to_dict()
            data["projects"] = bad
            self.assertRaises(report_mod.InvalidReport, report_mod.HostReport.from_dict, data)

    def test_an_older_report_has_no_projects_and_a_newer_entrys_fields_are_ignored(self):
        data = reports.make("c1").to_dict()
        del data["projects"]
        data["version"] = "1.2"
        self.assertEqual((), report_mod.HostReport.from_dict(data).projects)
        data.update(version="1.9", projects=[{"project": "p1", "vms": 2, "sensitive_vms": 1,
                                              "heavy_io_vms": 0, "colour": "red"}])
        self.assertEqual((report_mod.ProjectCount("p1", 2, 1, 0),),
                         report_mod.HostReport.from_dict(data).projects)


class AdmissionRuleTest(unittest.TestCase):
    """Taxable load counts for TAXABLE_LOAD_WEIGHT of itself; untaxable load in full."""

    @staticmethod
    def refusal_utilisation(untaxable_share, threshold=10.0):
        """The link utilisation at which the index first exceeds ``threshold``."""
        lo, hi = 0.0, 1.0
        for _ in range(60):
            u = (lo + hi) / 2
            rec = reports.make(link_utilisation=u, untaxable_utilisation=u * untaxable_share)
            lo, hi = (u, hi) if rec.congestion_index <= threshold else (lo, u)
        return lo

    def test_a_default_host_whose_load_is_all_taxable_admits_up_to_half_its_link(self):
        u = self.refusal_utilisation(0.0)
        print("\nadmission: a host at the default threshold (10 %%) starts refusing at "
              "%.1f %% link utilisation when all its load is taxable, %.1f %% when none is"
              % (100 * u, 100 * self.refusal_utilisation(1.0)))
        self.assertGreaterEqual(u, 0.5)
        self.assertAlmostEqual(u, (10 / 110) / report_mod.TAXABLE_LOAD_WEIGHT, places=6)

    def test_a_real_market_makes_an_unreserved_interferer_taxable(self):
        # The market's own floor (min cap 1 %) on a VM using 100 % CPU: 1 % untaxable.
        params = market_mod.MarketParams(interval_s=0.01, intervals_per_epoch=10,
                                         link_bytes_per_s=1024 * 1000.0, mtu=1024)
        market = market_mod.Market(params, None)
        market.add(records.VMSpec("bulk", sla=sla_mod.SLA(io_class="bulk")))
        market.add(records.VMSpec("held", sla=sla_mod.SLA(reservation_pct=100.0)))
        for tick in range(10):
            market.step({"bulk": records.Sample("bulk", tick, 100.0, 5 * 1024, 5),
                         "held": records.Sample("held", tick, 100.0, 0, 0)})
        rec = report_mod.HostReport.from_summary("c1", 5.0, market.end_epoch(), 1024e3, "x")
        self.assertAlmostEqual(0.5, rec.link_utilisation)
        self.assertAlmostEqual(0.005, rec.untaxable_utilisation)
        u = self.refusal_utilisation(0.01)
        print("\nadmission: with the market's 1 %% minimum cap on a VM at 100 %% CPU: "
              "refuses at %.1f %%" % (100 * u))
        self.assertGreaterEqual(u, 0.5)

    def test_reserved_traffic_is_untaxable(self):
        s = summary([vm_epoch("res", 500, cpu=40.0, floor=40.0),
                     vm_epoch("half", 200, cpu=50.0, floor=25.0),
                     vm_epoch("free", 300, cpu=80.0, floor=0.0)], utilisation=0.5)
        rec = report_mod.HostReport.from_summary("c1", 1.0, s, 1e9, "x")
        # 500 MTUs all untaxable, 100 of the 200 half-reserved ones: 60 % of 0.5.
        self.assertAlmostEqual(0.3, rec.untaxable_utilisation)

    def test_without_a_taxing_policy_all_load_is_untaxable(self):
        s = summary([vm_epoch("free", 300)], utilisation=0.5)
        rec = report_mod.HostReport.from_summary("c1", 1.0, s, 1e9, "x",
                                                 taxes_interferers=False)
        self.assertEqual(0.5, rec.untaxable_utilisation)
        self.assertAlmostEqual(100.0, rec.congestion_index)

    @given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
    def test_untaxable_load_never_counts_less_than_taxable(self, u, a, b):
        lo, hi = sorted((a, b))
        less = reports.make(link_utilisation=u, untaxable_utilisation=u * lo)
        more = reports.make(link_utilisation=u, untaxable_utilisation=u * hi)
        self.assertLessEqual(less.congestion_index, more.congestion_index + 1e-9)


class TenantBoundTest(unittest.TestCase):
    """No VM decides the host's published inflation alone."""

    def liar_host(self, honest):
        vms = [vm_epoch("liar", 10, sensitive=True, interference=9000.0 / 50 * 100)]
        vms += [vm_epoch("honest%d" % i, 10, sensitive=True, interference=v)
                for i, v in enumerate(honest)]
        vms.append(vm_epoch("bulk", 100, io_class="bulk"))
        return report_mod.HostReport.from_summary(
            "c1", 1.0, summary(vms, utilisation=0.05), 1e9, "x")

    def test_a_9000_us_liar_alone_leaves_the_index_to_the_model(self):
        # 9000 us against a 50 us base: 17900 % claimed interference.
        rec = self.liar_host([])
        self.assertEqual(0.0, rec.latency_inflation_pct)
        plain = reports.make(link_utilisation=0.05, untaxable_utilisation=0.0)
        self.assertAlmostEqual(plain.congestion_index, rec.congestion_index)
        self.assertLess(rec.congestion_index, 10.0)

    def test_a_liar_among_honest_tenants_moves_nothing_past_them(self):
        rec = self.liar_host([2.0, 4.0, 3.0])
        self.assertLessEqual(rec.latency_inflation_pct, 4.0)
        self.assertEqual(4, rec.inflation_reporters)

    def test_honest_tenants_that_agree_are_heard(self):
        rec = self.liar_host([30.0, 35.0])
        self.assertEqual(30.0, rec.latency_inflation_pct)

    @given(st.lists(st.floats(0, 1e4), max_size=8), st.floats(0, 1e6), st.floats(0, 100))
    def test_one_vm_moves_the_statistic_at_most_to_a_neighbouring_vote(self, honest, lie, model):
        without = report_mod.robust_inflation_pct(honest, model)
        with_liar = report_mod.robust_inflation_pct(honest + [lie], model)
        votes = sorted([min(v, report_mod.MAX_VM_INFLATION_PCT) for v in honest] + [model])
        self.assertLessEqual(with_liar, max(votes))
        if honest:
            self.assertGreaterEqual(with_liar, min(without, min(votes)))


class LiarThroughTheMarketTest(unittest.TestCase):
    """A guest reporting 9000 us against its 50 us SLA, through a real market epoch."""

    def epoch(self, liar, honest_us):
        params = market_mod.MarketParams(interval_s=0.01, intervals_per_epoch=10,
                                         link_bytes_per_s=1024 * 1000.0, mtu=1024)
        market = market_mod.Market(params, None)
        market.add(records.VMSpec("liar", sla=sla_mod.SLA(latency_sla_us=50.0)))
        market.add(records.VMSpec("web", sla=sla_mod.SLA()))
        names = ["honest%d" % i for i in range(len(honest_us))]
        for name in names:
            market.add(records.VMSpec(name, sla=sla_mod.SLA(latency_sla_us=50.0)))
        for tick in range(10):
            samples = {"web": records.Sample("web", tick, 50.0, 1024, 1)}
            windows = {"liar": records.LatencyWindow(5, liar, 10.0, liar)}
            for name, us in zip(names, honest_us):
                windows[name] = records.LatencyWindow(5, us, 1.0, us)
            market.step(samples, windows)
        summary = market.end_epoch()
        return summary, report_mod.HostReport.from_summary("c1", 5.0, summary, 1024e3, "x")

    def test_the_published_index_does_not_follow_a_liar(self):
        summary, rec = self.epoch(9000.0, [])
        # The market itself saw 17900 % (the figure a max would publish) ...
        self.assertAlmostEqual(17900.0, summary.latency_inflation_pct)
        # ... the board gets the model of the untaxable load (web's 1 % minimum cap).
        self.assertAlmostEqual(report_mod.queueing_inflation_pct(rec.untaxable_utilisation),
                               rec.latency_inflation_pct)
        self.assertLess(rec.latency_inflation_pct, 1.0)
        self.assertLess(rec.congestion_index, 10.0)
        print("\nliar: the market measured %.0f %%, the board publishes %.1f %% (index %.1f %%)"
              % (summary.latency_inflation_pct, rec.latency_inflation_pct,
                 rec.congestion_index))

    def test_with_honest_neighbours_the_liar_moves_the_index_no_further_than_them(self):
        _, rec = self.epoch(9000.0, [51.0, 52.0])
        self.assertLessEqual(rec.latency_inflation_pct, 4.0)
        self.assertEqual(3, rec.inflation_reporters)


class LinkTxTest(unittest.TestCase):
    """Report 1.7: what a host counted it sent beyond each of its shared links."""

    def test_the_field_round_trips_and_an_older_record_has_none(self):
        rec = reports.make("c1", link_tx={"rack1-up": 2.5e8, "spine": 1e6})
        data = json.loads(rec.to_json())
        self.assertEqual({"rack1-up": 2.5e8, "spine": 1e6}, data["link_tx"])
        self.assertEqual(rec, report_mod.HostReport.from_json(rec.to_json()))
        self.assertEqual(2.5e8, rec.link_tx_of("rack1-up"))
        self.assertIsNone(rec.link_tx_of("elsewhere"))
        del data["link_tx"]
        data["version"] = "1.6"
        old = report_mod.HostReport.from_dict(data)
        self.assertEqual((), old.link_tx)
        self.assertIsNone(old.link_tx_of("rack1-up"))

    def test_a_wrong_shape_rejects_the_record(self):
        for bad in ([1, 2], "x", {"": 1.0}, {"a" * 256: 1.0}, {"up": -1.0},
                    {"up": float("nan")}, {"up": True}, {"up": 1e14},
                    {"l%d" % k: 1.0 for k in range(report_mod.MAX_LINK_TX + 1)},
                    [("up", 1.0), ("up", 2.0)]):
            with self.assertRaises(report_mod.InvalidReport, msg=repr(bad)):
                reports.make("c1", link_tx=bad)

    def test_the_busiest_links_are_written_within_the_bound(self):
        rates = {"link-%02d" % k: float(k) for k in range(report_mod.MAX_LINK_TX + 3)}
        rec = report_mod.HostReport.from_summary(
            "c1", 100.0, summary([vm_epoch("a", tx_mtus=10)], 0.2), float(1 << 30), "t",
            link_tx=rates)
        self.assertEqual(report_mod.MAX_LINK_TX, len(rec.link_tx))
        self.assertEqual(sorted(rates)[3:], [name for name, _rate in rec.link_tx])
