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


def vm_epoch(vm, tx_mtus=0, sensitive=False, io_class="normal", interference=None):
    return market_mod.VMEpoch(
        vm=vm, allocation=100.0, spent_cpu=0.0, spent_io=0.0, balance=100.0, rate=1.0,
        cap_mean=100.0, cap_min=100.0, cpu_pct_mean=50.0, tx_mtus=tx_mtus,
        tx_bytes=tx_mtus * 1024, interference_pct=interference, sensitive=sensitive,
        io_class="sensitive" if sensitive else io_class)


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
        self.assertEqual((0.4, 2.5, 1.0, 12.0), (rec.link_utilisation, rec.io_price,
                                                 rec.cpu_price, rec.latency_inflation_pct))
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

    def test_an_unknown_version_is_rejected(self):
        self.assertRejected(self._with(version=2), "unknown report version 2")
        self.assertRejected(self._with(version=True), "unknown report version")

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

    def test_missing_and_unknown_fields_are_rejected(self):
        data = reports.make().to_dict()
        del data["io_price"]
        self.assertRejected(json.dumps(data), "missing fields: io_price")
        self.assertRejected(self._with(colour="red"), "unknown fields: colour")

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
