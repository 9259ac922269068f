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

"""Evidence before trust: a claim is heard as far as the host's own evidence supports it."""

import unittest

from hypothesis import given
from hypothesis import strategies as st

from resex_libvirt.board import evidence
from resex_libvirt.board import report as report_mod
from resex_libvirt.hypervisor import base as hyp_base
from tests.unit.board import test_report

S = 1_000_000_000
MAX = evidence.MAX_EVIDENCE_PCT


def delay(delay_s, run_s, vcpus=1, span_s=1.0):
    return evidence.RunDelay(round(delay_s * S), round(run_s * S), vcpus, round(span_s * S))


class RunDelayMeterTest(unittest.TestCase):

    def test_an_epoch_gives_the_growth_of_each_vms_counters(self):
        meter = evidence.RunDelayMeter()
        self.assertEqual({}, meter.epoch(10.0, {"a": hyp_base.VcpuTimes(5, 100, 2)}))
        got = meter.epoch(11.0, {"a": hyp_base.VcpuTimes(705, 400, 2)})
        self.assertEqual({"a": evidence.RunDelay(700, 300, 2, S)}, got)

    def test_a_vm_seen_first_or_restarted_has_no_delta_yet(self):
        meter = evidence.RunDelayMeter()
        meter.epoch(0.0, {"a": hyp_base.VcpuTimes(900, 900)})
        got = meter.epoch(1.0, {"a": hyp_base.VcpuTimes(10, 10), "b": hyp_base.VcpuTimes(1, 1)})
        self.assertEqual({}, got)
        got = meter.epoch(2.0, {"a": hyp_base.VcpuTimes(20, 30), "b": hyp_base.VcpuTimes(1, 2)})
        self.assertEqual({"a": evidence.RunDelay(10, 20, 1, S),
                          "b": evidence.RunDelay(0, 1, 1, S)}, got)


class CpuEvidenceTest(unittest.TestCase):

    def test_run_delay_stretches_the_work_it_delays(self):
        # Ran 0.3 s, waited 0.7 s runnable: the work took 1.0 s instead of 0.3 s.
        self.assertAlmostEqual(233.33, evidence.cpu_evidence_pct(delay(0.7, 0.3)), places=2)

    def test_a_starved_vcpu_is_evidence_at_the_ceiling(self):
        self.assertEqual(MAX, evidence.cpu_evidence_pct(delay(0.9, 0.0)))

    def test_noise_is_not_evidence(self):
        # 0.5 ms of delay in a second on each of 2 vCPUs: under 1 ms per vCPU.
        self.assertEqual(0.0, evidence.cpu_evidence_pct(delay(0.001, 0.01, vcpus=2)))

    def test_a_capped_vms_delay_is_not_evidence(self):
        self.assertEqual(0.0, evidence.cpu_evidence_pct(delay(0.7, 0.3), capped=True))
        self.assertEqual(0.0, evidence.cpu_evidence_pct(None))


class HeardInflationPropertyTest(unittest.TestCase):
    """The bounds of :func:`evidence.heard_inflation_pct`."""

    claims = st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e5)), max_size=8)

    @given(claims, st.floats(0, 100))
    def test_every_claim_is_heard_up_to_its_evidence(self, vms, consensus):
        heard = evidence.heard_inflation_pct([c for c, _ in vms], [e for _, e in vms],
                                             consensus)
        for claim, support in vms:
            self.assertGreaterEqual(heard, min(claim, support, MAX))
        self.assertGreaterEqual(heard, min(consensus, MAX))

    @given(claims, st.floats(0, 100))
    def test_no_claim_is_heard_beyond_the_consensus_or_its_evidence(self, vms, consensus):
        heard = evidence.heard_inflation_pct([c for c, _ in vms], [e for _, e in vms],
                                             consensus)
        bound = max([min(consensus, MAX)] + [min(c, e, MAX) for c, e in vms])
        self.assertEqual(bound, heard)
        self.assertLessEqual(heard, max([consensus] + [e for _, e in vms]))

    @given(st.lists(st.floats(0, 1e4), max_size=8), st.floats(0, 1e6), st.floats(0, 100),
           st.floats(0, 1))
    def test_a_liar_without_evidence_moves_nothing_past_the_honest_and_the_model(
            self, honest, lie, model, support_fraction):
        # The honest VMs' evidence supports their claims; the liar's supports
        # at most what the model already predicts for everyone.
        def publish(claims, support):
            return evidence.heard_inflation_pct(
                claims, support, report_mod.robust_inflation_pct(claims, model))

        without = publish(honest, honest)
        with_liar = publish(honest + [lie], honest + [model * support_fraction])
        self.assertLessEqual(with_liar, max([without, model] + honest))
        if not honest:
            self.assertLessEqual(with_liar, model)


class PublishedInflationTest(unittest.TestCase):
    """Through :meth:`HostReport.from_summary`: the lone honest victim and the lone liar."""

    def host(self, claim, run_delays, cap_min=100.0, utilisation=0.05, liar_sends=0):
        victim = test_report.vm_epoch("victim", liar_sends, sensitive=True, interference=claim)
        victim = victim._replace(cap_min=cap_min)
        vms = [victim, test_report.vm_epoch("hog", 100, io_class="bulk", cpu=100.0)]
        return report_mod.HostReport.from_summary(
            "c1", 1.0, test_report.summary(vms, utilisation=utilisation), 1e9, "x",
            run_delays=run_delays)

    def test_one_honest_victim_the_host_sees_waiting_is_heard(self):
        # The Nova node: +7333 % reported while CPU-burning neighbours ran;
        # its vCPU waited 0.7 s runnable for 0.3 s run in the epoch.
        support = evidence.cpu_evidence_pct(delay(0.7, 0.3))
        rec = self.host(7333.0, {"victim": delay(0.7, 0.3)})
        self.assertLessEqual(abs(rec.latency_inflation_pct - support), 10.0)
        self.assertGreater(rec.congestion_index, 200.0)
        print("\nlone honest victim: claims 7333 %%, evidence supports %.1f %%, "
              "the board publishes %.1f %%" % (support, rec.latency_inflation_pct))

    def test_a_victim_claiming_less_than_its_evidence_is_published_as_it_claims(self):
        rec = self.host(40.0, {"victim": delay(0.7, 0.3)})
        self.assertAlmostEqual(40.0, rec.latency_inflation_pct)

    def test_a_9000_us_liar_without_evidence_stays_bounded(self):
        rec = self.host(9000.0 / 50 * 100, {"victim": delay(0.0001, 0.3)})
        self.assertEqual(0.0, rec.latency_inflation_pct)
        rec = self.host(9000.0 / 50 * 100, {})
        self.assertEqual(0.0, rec.latency_inflation_pct)

    def test_run_delay_under_the_vms_own_cap_is_not_evidence(self):
        rec = self.host(9000.0 / 50 * 100, {"victim": delay(0.7, 0.3)}, cap_min=30.0)
        self.assertEqual(0.0, rec.latency_inflation_pct)

    def test_a_vms_own_traffic_is_no_evidence_for_it(self):
        # Load the market cannot tax (no interferer policy): 0.5 of the link.
        # Two quiet sensitive neighbours claim nothing, so the consensus is 0.
        def publish(claimant_sends, other_sends):
            vms = [test_report.vm_epoch("claimant", claimant_sends, sensitive=True,
                                        interference=500.0),
                   test_report.vm_epoch("q1", 50, sensitive=True, interference=0.0),
                   test_report.vm_epoch("q2", 50, sensitive=True, interference=0.0),
                   test_report.vm_epoch("other", other_sends)]
            s = test_report.summary(vms, utilisation=0.5)
            return report_mod.HostReport.from_summary(
                "c1", 1.0, s, 1e9, "x", taxes_interferers=False).latency_inflation_pct

        # The claimant is its own load: the others' 0.05 of the link supports 5.3 %.
        self.assertAlmostEqual(report_mod.queueing_inflation_pct(0.05), publish(900, 0))
        # Others send it all: 0.5 of the link supports 100 %, heard.
        self.assertAlmostEqual(report_mod.queueing_inflation_pct(0.5), publish(0, 900))


class PressureTest(unittest.TestCase):
    """PSI's stall share as a floor of the vCPUs' run delay."""

    def test_a_stall_share_raises_the_run_delay(self):
        d = evidence.RunDelay(delay_ns=10**8, run_ns=10**9, vcpus=1, span_ns=10**9)
        out = evidence.with_pressure({"a": d, "b": d}, {"a": 30.0, "c": 90.0})
        self.assertEqual(3 * 10**8, out["a"].delay_ns)
        self.assertEqual(d, out["b"])
        self.assertNotIn("c", out)       # no run time to weigh it against
        self.assertAlmostEqual(30.0, evidence.cpu_evidence_pct(out["a"]))

    def test_a_lower_stall_share_changes_nothing(self):
        d = evidence.RunDelay(delay_ns=5 * 10**8, run_ns=10**9, vcpus=1, span_ns=10**9)
        self.assertEqual({"a": d}, evidence.with_pressure({"a": d}, {"a": 10.0}))

    def test_the_meter_turns_totals_into_shares_of_the_epoch(self):
        m = evidence.PressureMeter()
        self.assertEqual({}, m.epoch(10.0, {"a": 0, "b": 5 * 10**6}))
        self.assertEqual({"a": 25.0}, m.epoch(12.0, {"a": 5 * 10**5, "b": 10**6}))
