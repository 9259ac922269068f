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

"""CI smoke test of the whole ResEx loop on real VMs: one short IOShares run.

Everything is real and set up by :class:`tests.lab.experiment.Experiment`:
Debian's libvirtd and QEMU, two TCG guests on a bridge whose transmit paths
share one ifb/tbf bottleneck, the BenchEx server in the sensitive guest, a
bulk TCP sender in the other, BenchEx clients on the host reporting to the
real ``resex-agent`` (libvirt actuator on ``qemu:///system``, libvirt
interface monitor, ``[market] policy = io_shares``), stopped with SIGTERM.

IOShares is made certain to act: the sensitive guest declares its measured
base mean as ``resex:latency_sla_us`` with a 5 % threshold, and the bulk
sender alone fills the bottleneck's 200 ms queue, so its latency rises by
an order of magnitude. The assertions are facts that do not depend on timing
noise: reports reached the agent, the interferer's cap went down in libvirt
and in the domain's cgroup at the same time, the sensitive guest was never
capped, every knob was back to its original value once the agent exited on
SIGTERM. The latency and throughput figures are printed by ``make lab``
(:mod:`tests.lab.experiment`), not asserted.

Then one peer on the same guests, ``ewma_step`` (a Caelus-style detector,
:doc:`peers`), installed for this agent only as the lab installs its
research policies: the agent loaded it, it stepped the interferer's cap down
(its reason ``peer`` in the agent's epoch lines) and never the sensitive
guest's, and SIGTERM restored every knob.
"""

import unittest

from tests.lab import base
from tests.lab import experiment
from tests.lab import harness

BASE_S = 8.0
RUN_S = 15.0
PEER_S = 10.0


class IOSharesOnRealGuestsSmokeTest(base.LabTestCase):

    @classmethod
    def make_lab(cls, workdir):
        return experiment.Experiment(workdir=workdir, interval_s=0.2)

    @classmethod
    def set_up_lab(cls):
        alone = cls.lab.run("base", "none", BASE_S, interfere=False, warmup_s=2.0)
        cls.sla_us = alone["latency"]["mean_us"]
        cls.lab.set_sla(cls.sla_us, 5.0)
        cls.result = cls.lab.run("io_shares", "io_shares", RUN_S, interfere=True, warmup_s=3.0)
        cls.cgroup_after = {g.name: harness.cgroup_cpu_quota(g)
                            for g in (cls.lab.sensitive, cls.lab.interferer)}
        cls.peer = cls.lab.run("ewma_step", "ewma_step", PEER_S, interfere=True, warmup_s=3.0)

    def polls(self, name):
        return [p[name] for p in self.result["polls"] if name in p]

    def test_latency_reports_from_the_host_probe_reached_the_agent(self):
        self.assertGreater(self.result["reports_sent"], 0)
        # The intake logs each VM's claims (agent/intake/store.py) only for accepted reports.
        self.assertGreater(self.result["claims_logged"], 0, self.result["agent_log"])

    def test_the_agent_lowered_the_interferers_cap_in_libvirt_and_in_the_cgroup(self):
        capped = [p for p in self.polls(experiment.INTERFERER)
                  if p["cap_pct"] is not None and p["cap_pct"] < 100.0]
        self.assertTrue(capped, "the interferer was never capped; see %s"
                        % self.result["agent_log"])
        # libvirt's read-back and the kernel's cgroup agree on at least one capped poll
        # (a poll reads both within a few ms; a new cap could land in between).
        agreeing = [p for p in capped
                    if p["cgroup"] == [p["global_period"], p["global_quota"]]]
        self.assertTrue(agreeing, capped)
        epochs = experiment.epoch_caps(open(self.result["agent_log"]).read())
        self.assertTrue(any(vms.get(experiment.INTERFERER, (100, 100, 1))[1] < 100
                            for _e, vms in epochs))

    def test_the_sensitive_guest_was_never_capped(self):
        polls = self.polls(experiment.SENSITIVE)
        self.assertTrue(polls)
        for p in polls:
            self.assertIsNone(p["cap_pct"], p)
            self.assertEqual(-1, p["cgroup"][1], p)
        epochs = experiment.epoch_caps(open(self.result["agent_log"]).read())
        seen = [vms[experiment.SENSITIVE] for _e, vms in epochs if experiment.SENSITIVE in vms]
        self.assertTrue(seen)
        self.assertEqual({100.0}, {cap_min for _mean, cap_min, _rate in seen})

    def test_sigterm_restored_every_knob_of_both_guests(self):
        # What the agent said last, to tell a failed restore from a late write.
        said = "journal left %s; the agent's log ends:\n%s" % (
            self.result["journal_left"],
            "".join(open(self.result["agent_log"]).readlines()[-15:]))
        self.assertEqual(0, self.result["agent_exit"], said)
        self.assertEqual(self.lab.originals, self.result["knobs_before"])
        self.assertEqual(self.lab.originals, self.result["knobs_after"], said)
        self.assertEqual({}, self.result["journal_left"], said)
        for name, cgroup in self.cgroup_after.items():
            self.assertIsNotNone(cgroup, name)
            self.assertEqual(-1, cgroup[1], name)

    def test_a_peer_from_the_research_install_stepped_the_interferer_down(self):
        log = open(self.peer["agent_log"]).read()
        self.assertIn("policy ewma_step", log)
        capped = [p[experiment.INTERFERER] for p in self.peer["polls"]
                  if experiment.INTERFERER in p]
        self.assertTrue([p for p in capped if p["cap_pct"] is not None and p["cap_pct"] < 100],
                        "the peer never capped the interferer; see %s" % self.peer["agent_log"])
        self.assertRegex(log, r"%s cap \d+/\d+%% rate [0-9.]+ \(peer\)" % experiment.INTERFERER)
        for p in self.peer["polls"]:
            if experiment.SENSITIVE in p:
                self.assertIsNone(p[experiment.SENSITIVE]["cap_pct"], p)
        self.assertEqual(0, self.peer["agent_exit"])
        self.assertEqual(self.lab.originals, self.peer["knobs_after"])
        self.assertEqual({}, self.peer["journal_left"])


if __name__ == "__main__":
    unittest.main()
