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

"""Smoke test of ResEx on real RDMA verbs: Soft-RoCE guests, perftest, the real agent.

Set up by :class:`tests.lab.verbs.VerbsLab` (the RDMA image built from
Debian's packages, Debian's libvirtd and QEMU): three TCG guests with
``rxe0``; the sensitive one runs the verbs BenchEx client (RC, rdma_cm,
4 KiB SENDs at 20 requests/s) against the server and reports its latency
summaries through its ``org.resex.latency.0`` channel; the interferer's
perftest ``ib_write_bw`` bursts to the same server run only while the
host's gate is open; every tap goes through one tbf. A base
run (gate closed, ``[market] policy = none``) gives the sensitive guest's
mean, declared as its ``resex:latency_sla_us`` with a 5 % threshold; then
an ``io_shares`` run with the interferer.

Asserted are facts, not figures: BenchEx over verbs measured alone and
beside the interferer; the interferer's tap carried its RoCE traffic only while
its gate was open (how many ``ib_write_bw`` bursts complete within the run
depends on its cap: a perftest process starting at a few percent of a CPU
takes seconds); the channel's
reports reached the agent; the agent capped the interferer in libvirt and
in its cgroup, never the others; SIGTERM put every knob back. The latency
figures are printed by ``python -m tests.lab.experiment --transport rdma``.
"""

import unittest

from tests.lab import base
from tests.lab import experiment
from tests.lab import harness
from tests.lab import rdma
from tests.lab import verbs

BASE_S = 8.0
RUN_S = 20.0


class ResExOnSoftRoCEGuestsSmokeTest(base.LabTestCase):

    @classmethod
    def make_lab(cls, workdir):
        return verbs.VerbsLab(workdir=workdir, tool="benchex", size=4096, rate=20.0,
                              rate_mbit=40.0, queue_ms=100.0, bulk_size=65536, burst_s=4)

    @classmethod
    def set_up_lab(cls):
        cls.base = cls.lab.run("base", "none", BASE_S, interfere=False, warmup_s=1.0)
        cls.sla = (cls.base["latency"]["mean_us"], 5.0)
        cls.lab.set_sla(*cls.sla)
        cls.result = cls.lab.run("io_shares", "io_shares", RUN_S, interfere=True,
                                 warmup_s=2.0, sla=cls.sla)
        cls.cgroup_after = {g.name: harness.cgroup_cpu_quota(g) for g in cls.lab.guests()}

    def polls(self, name):
        return [p[name] for p in self.result["polls"] if name in p]

    def test_the_image_has_soft_roce_and_perftest(self):
        info = self.lab.image
        for module in ("rdma_rxe", "ib_uverbs", "rdma_ucm", "crc32_generic"):
            self.assertIn(module, info["modules"])
        for program in rdma.PROGRAMS:
            self.assertIn(program, info["files"])
        self.assertIn(rdma.PROVIDER_DRIVER, info["files"])

    def test_benchex_over_verbs_measured_alone_and_beside_the_interferer(self):
        self.assertGreater(self.base["latency"]["n"], 0, self.lab.sensitive.console)
        self.assertGreater(self.result["latency"]["n"], 0, self.lab.sensitive.console)

    def test_the_interferer_sent_rdma_writes_only_while_its_gate_was_open(self):
        self.assertEqual(0, self.base["interferer_bursts"])
        self.assertLess(self.base["tap_mbit_s"][verbs.INTERFERER], 0.5, self.base)
        # Open, it sent: more than the closed gate's bound and twice the base's
        # traffic (the agent caps it to a few % of a CPU: 0.9-2 Mbit/s).
        sent = self.result["tap_mbit_s"][verbs.INTERFERER]
        self.assertGreater(sent, 0.5, self.result)
        self.assertGreater(sent, 2.0 * self.base["tap_mbit_s"][verbs.INTERFERER], self.result)

    def test_the_channels_reports_reached_the_agent(self):
        self.assertGreater(self.base["claims_logged"], 0, self.base["agent_log"])
        self.assertGreater(self.result["claims_logged"], 0, self.result["agent_log"])

    def test_the_agent_capped_the_interferer_in_libvirt_and_in_its_cgroup(self):
        capped = [p for p in self.polls(verbs.INTERFERER)
                  if p["cap_pct"] is not None and p["cap_pct"] < 100.0]
        self.assertTrue(capped, "the interferer was never capped; see %s"
                        % self.result["agent_log"])
        self.assertTrue([p for p in capped
                         if p["cgroup"] == [p["global_period"], p["global_quota"]]], capped)
        epochs = experiment.epoch_caps(open(self.result["agent_log"]).read())
        self.assertTrue(any(vms.get(verbs.INTERFERER, (100, 100, 1))[1] < 100
                            for _e, vms in epochs))

    def test_neither_the_sensitive_guest_nor_the_server_was_capped(self):
        for name in (verbs.SENSITIVE, verbs.SERVER):
            polls = self.polls(name)
            self.assertTrue(polls, name)
            for p in polls:
                self.assertIsNone(p["cap_pct"], (name, p))

    def test_sigterm_restored_every_knob(self):
        for run in (self.base, self.result):
            self.assertEqual(0, run["agent_exit"])
            self.assertEqual(self.lab.originals, run["knobs_after"])
            self.assertEqual({}, run["journal_left"])
        for name, cgroup in self.cgroup_after.items():
            self.assertIsNotNone(cgroup, name)
            self.assertEqual(-1, cgroup[1], name)


if __name__ == "__main__":
    unittest.main()
