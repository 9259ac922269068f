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

"""The market: charging, clamping to mClock controls, epochs, membership."""

import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt.market import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.market import records
from resex_libvirt import sla
from tests.unit.market import reference


def sla_strategy():
    @st.composite
    def build(draw):
        vcpus = draw(st.integers(1, 4))
        reservation = draw(st.floats(0, 100.0 * vcpus))
        limit = draw(st.one_of(st.none(), st.floats(max(1.0, reservation), 100.0 * vcpus)))
        sensitive = draw(st.booleans())
        return vcpus, sla.SLA(
            latency_sla_us=draw(st.floats(1, 1e4)) if sensitive else None,
            interference_threshold_pct=draw(st.floats(0.1, 100)),
            reservation_pct=reservation, limit_pct=limit, shares=draw(st.integers(1, 1000)))
    return build()


interval_inputs = st.lists(
    st.tuples(st.floats(0, 400, allow_nan=False), st.integers(0, 10_000_000),
              st.one_of(st.none(), st.floats(0, 1e7, allow_nan=False)),
              st.floats(0, 1e6, allow_nan=False)),
    min_size=3, max_size=3)


class MarketPropertiesTest(unittest.TestCase):

    @settings(max_examples=150, deadline=None)
    @given(policy=st.sampled_from(["none", "free_market", "io_shares"]),
           vms=st.lists(sla_strategy(), min_size=3, max_size=3),
           intervals=st.lists(interval_inputs, min_size=1, max_size=40),
           ipe=st.integers(1, 20))
    def test_caps_always_within_reservation_and_limit(self, policy, vms, intervals, ipe):
        params = market_mod.MarketParams(intervals_per_epoch=ipe, pcpus=3)
        m = market_mod.Market(params, policy_mod.load(policy))
        names = ["a", "b", "c"]
        for name, (vcpus, vm_sla) in zip(names, vms):
            m.add(records.VMSpec(name, vcpus=vcpus, sla=vm_sla))
        for step in intervals:
            samples, windows = {}, {}
            for name, (cpu, mtus, lat, std) in zip(names, step):
                samples[name] = records.Sample(name, 0.0, cpu, tx_mtus=mtus)
                if lat is not None:
                    windows[name] = records.LatencyWindow(10, lat, std, lat)
            decisions = m.step(samples, windows)
            for name, (vcpus, vm_sla) in zip(names, vms):
                cap = decisions[name].cap_pct
                self.assertGreaterEqual(cap, vm_sla.effective_reservation(vcpus) - 1e-9)
                self.assertLessEqual(cap, vm_sla.effective_limit(vcpus) + 1e-9)
                self.assertGreaterEqual(decisions[name].rate, 0.0)
            if m.tick == ipe:
                m.end_epoch()
                for name in names:
                    self.assertEqual(m.ledger.allocation(name), m.ledger.balance(name))


class MarketTest(unittest.TestCase):

    def setUp(self):
        self.m = market_mod.Market(market_mod.MarketParams(intervals_per_epoch=10),
                                   policy_mod.NoControl())

    def test_charge_is_cpu_percent_plus_mtus_at_the_base_price(self):
        self.m.add(records.VMSpec("a"))
        before = self.m.ledger.balance("a")
        self.m.step({"a": records.Sample("a", 0.0, 42.0, tx_mtus=1000)})
        self.assertAlmostEqual(before - 1042.0, self.m.ledger.balance("a"))

    def test_a_sample_below_zero_counts_as_zero(self):
        self.m.add(records.VMSpec("a"))
        before = self.m.ledger.balance("a")
        self.m.step({"a": records.Sample("a", 0.0, -42.0, tx_bytes=-4096, tx_mtus=-4)})
        self.assertEqual(before, self.m.ledger.balance("a"))
        vm = self.m.end_epoch().vms[0]
        self.assertEqual(("a", 0.0, 0, 0), (vm.vm, vm.cpu_pct_mean, vm.tx_mtus, vm.tx_bytes))

    def test_weight_follows_shares_on_xens_scale(self):
        self.m.add(records.VMSpec("a", sla=sla.SLA(shares=200)))
        d = self.m.step({})
        self.assertEqual(512, d["a"].weight)
        self.assertEqual(256, market_mod.weight_of(100))

    def test_epoch_summary_reports_prices_and_utilisation(self):
        self.m.add(records.VMSpec("a", sla=sla.SLA(latency_sla_us=100.0)))
        mtus_per_interval = self.m.params.link_mtus_per_interval
        for _ in range(10):
            self.m.step({"a": records.Sample("a", 0.0, 10.0, tx_mtus=int(mtus_per_interval / 2))},
                        {"a": records.LatencyWindow(5, 150.0, 1.0, 150.0)})
        summary = self.m.end_epoch()
        self.assertAlmostEqual(0.5, summary.link_utilisation, places=3)
        self.assertEqual(1.0, summary.cpu_price)
        self.assertEqual(1.0, summary.io_price)
        self.assertAlmostEqual(50.0, summary.latency_inflation_pct)
        self.assertEqual(0, self.m.tick)
        self.assertEqual(1, self.m.epoch)

    def test_a_removed_vm_is_forgotten_everywhere(self):
        self.m.add(records.VMSpec("a"))
        self.m.remove("a")
        self.assertNotIn("a", self.m.ledger)
        self.assertEqual({}, self.m.step({"a": records.Sample("a", 0.0, 50.0)}))

    def test_samples_of_unknown_vms_are_ignored(self):
        self.m.add(records.VMSpec("a"))
        d = self.m.step({"ghost": records.Sample("ghost", 0.0, 50.0)})
        self.assertEqual(["a"], list(d))

    def test_updating_a_vms_sla_reclamps_its_cap(self):
        self.m.add(records.VMSpec("a"))
        self.m.add(records.VMSpec("a", sla=sla.SLA(limit_pct=30.0)))
        self.assertEqual(30.0, self.m.step({})["a"].cap_pct)

    def test_a_vm_at_its_limit_follows_the_limit_back_up(self):
        # A shared link's scale on a bulk VM's limit: cut, cut, then released
        # (the cap stayed at the lowest limit before).
        for limit in (40.7, 1.0, 50.5, 100.0):
            self.m.add(records.VMSpec("a", sla=sla.SLA(limit_pct=limit)))
            self.assertEqual(limit, self.m.decision("a").cap_pct)

    def test_a_cap_set_below_the_limit_stays_when_the_limit_rises(self):
        self.m.add(records.VMSpec("a", sla=sla.SLA(limit_pct=50.0)))
        self.m.table.cap[self.m.table.slots["a"]] = 20.0      # as a policy leaves it
        self.m.add(records.VMSpec("a", sla=sla.SLA(limit_pct=100.0)))
        self.assertEqual(20.0, self.m.decision("a").cap_pct)

    def test_unknown_policy_names_the_known_ones(self):
        with self.assertRaisesRegex(ValueError, "free_market"):
            policy_mod.load("nope")


class ReloadTest(unittest.TestCase):

    def test_new_params_reclamp_caps_and_resupply_the_ledger(self):
        m = market_mod.Market(market_mod.MarketParams(intervals_per_epoch=10, pcpus=1),
                              policy_mod.NoControl())
        m.add(records.VMSpec("a"))
        before = m.ledger.allocation("a")
        m.set_params(market_mod.MarketParams(intervals_per_epoch=10, pcpus=2,
                                             min_cap_pct=150.0))
        self.assertGreater(m.ledger.allocation("a"), before)

    def test_the_interval_cannot_change_in_a_running_market(self):
        m = market_mod.Market(market_mod.MarketParams(intervals_per_epoch=10),
                              policy_mod.NoControl())
        with self.assertRaises(ValueError):
            m.set_params(market_mod.MarketParams(intervals_per_epoch=20))


class NoLinkTest(unittest.TestCase):
    """A link of capacity 0 is no known link (the agent's fabric term off)."""

    def test_without_a_link_the_allowance_is_cpu_only_and_utilisation_zero(self):
        params = market_mod.MarketParams(intervals_per_epoch=10, pcpus=1, link_bytes_per_s=0.0)
        self.assertEqual(0.0, params.io_supply)
        m = market_mod.Market(params, policy_mod.load("free_market"))
        m.add(records.VMSpec("a", vcpus=1, sla=sla.SLA()))
        self.assertEqual(params.cpu_supply, m.ledger.allocation("a"))
        for _ in range(10):
            m.step({"a": records.Sample("a", 0.0, 50.0)})
        self.assertEqual(0.0, m.end_epoch().link_utilisation)

    def test_a_negative_or_nan_link_is_refused(self):
        for bad in (-1.0, float("nan")):
            with self.assertRaises(ValueError):
                market_mod.MarketParams(link_bytes_per_s=bad)


reports = st.lists(st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.tuples(st.integers(0, 40), st.floats(1.0, 2000.0), st.floats(0.0, 500.0)),
    max_size=4), min_size=1, max_size=40)


class TailSLATest(unittest.TestCase):
    """``resex:latency_statistic=p99``: the interference is the windows' p99 over the SLA."""

    def test_a_tail_sla_counts_the_p99_and_a_mean_sla_the_mean(self):
        m = market_mod.Market(market_mod.MarketParams(pcpus=4), policy_mod.load("none"))
        m.add(records.VMSpec("tail", sla=sla.SLA(latency_sla_us=250.0,
                                                 latency_statistic="p99")))
        m.add(records.VMSpec("mean", sla=sla.SLA(latency_sla_us=200.0)))
        # At its mean SLA, 20 % over the tail SLA: only the tail VM complains.
        window = records.LatencyWindow(64, 200.0, 1.0, 300.0)
        m.step({}, {"tail": window, "mean": window})
        self.assertEqual({"tail": 20.0, "mean": 0.0}, m.last_interference)

    def test_the_deviation_rule_is_the_means_only(self):
        m = market_mod.Market(market_mod.MarketParams(pcpus=4), policy_mod.load("none"))
        m.add(records.VMSpec("tail", sla=sla.SLA(latency_sla_us=250.0,
                                                 latency_statistic="p99")))
        m.step({}, {"tail": records.LatencyWindow(64, 100.0, 1.0, 240.0)})
        # A wide spread with its p99 within the SLA is no interference.
        m.step({}, {"tail": records.LatencyWindow(64, 100.0, 90.0, 240.0)})
        self.assertEqual({"tail": 0.0}, m.last_interference)


class NewEvidenceTest(unittest.TestCase):
    """A window says how many of its requests are new: one handed again is no new evidence."""

    def setUp(self):
        self.seen = []
        test = self

        class Reader(policy_mod.Policy):
            name = "reader"

            def decide(self, step):
                vms = step.vms
                test.seen.append((int(vms.window_new[0]), float(vms.window_std_us[0])))
        self.m = market_mod.Market(market_mod.MarketParams(pcpus=4), Reader())
        self.m.add(records.VMSpec("vm", sla=sla.SLA(latency_sla_us=200.0)))

    def test_a_window_handed_again_has_no_new_requests(self):
        for window in (records.LatencyWindow(20, 250.0, 3.0, 260.0),
                       records.LatencyWindow(20, 250.0, 3.0, 260.0),   # equal: handed again
                       records.LatencyWindow(20, 251.0, 3.0, 260.0),
                       records.LatencyWindow(20, 251.0, 3.0, 260.0, new=4)):   # it says
            self.m.step({}, {"vm": window})
        self.assertEqual([(20, 3.0), (0, 3.0), (20, 3.0), (4, 3.0)], self.seen)

    def test_a_vm_that_reports_again_after_a_gap_has_new_requests(self):
        window = records.LatencyWindow(20, 250.0, 3.0, 260.0)
        for windows in ({"vm": window}, {}, {"vm": window}):
            self.m.step({}, windows)
        self.assertEqual([20, 0, 20], [new for new, _std in self.seen])

    def test_a_window_cannot_have_more_new_requests_than_requests(self):
        with self.assertRaises(ValueError):
            records.LatencyWindow(5, 100.0, 1.0, 100.0, new=6)
        with self.assertRaises(ValueError):
            records.LatencyWindow(5, 100.0, 1.0, 100.0, new=-1)


class InterferenceReferenceTest(unittest.TestCase):
    """Every reporting VM's interference at once, as the reference rule gives it.

    The reference is paper Alg. 2 line 6 applied one VM at a time.
    """

    @settings(max_examples=150, deadline=None)
    @given(slas=st.lists(st.tuples(st.floats(50.0, 500.0), st.floats(0.1, 50.0)),
                         min_size=3, max_size=3),
           steps=reports)
    def test_every_step_matches_observe_then_interference_pct(self, slas, steps):
        m = market_mod.Market(market_mod.MarketParams(pcpus=4), policy_mod.load("none"))
        trackers = {}
        for name, (base, threshold) in zip("abc", slas):
            m.add(records.VMSpec(name, sla=sla.SLA(latency_sla_us=base,
                                                   interference_threshold_pct=threshold)))
            trackers[name] = (reference.BaselineTracker(), base, threshold)
        m.add(records.VMSpec("d"))                 # no SLA: its reports do not count
        for step in steps:
            windows = {vm: records.LatencyWindow(n, mean, std, mean)
                       for vm, (n, mean, std) in step.items()}
            m.step({}, windows)
            want = {}
            for vm, w in windows.items():
                if vm in trackers:
                    tracker, base, threshold = trackers[vm]
                    learned = tracker.observe(w, base, threshold)
                    want[vm] = reference.interference_pct(w, base, learned)
            self.assertEqual(want, m.last_interference)
