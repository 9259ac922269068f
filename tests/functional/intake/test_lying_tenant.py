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

"""A tenant that lies about its latency, end to end: real channel, real intake, real market.

The liar's reports go through a Unix socket (a test plays QEMU) into
:class:`LatencyIntake`; its windows feed :class:`resex_libvirt.market.Market`
with the ``io_shares`` policy (paper Algorithm 2) while a heavy sender
shares the host. The claim is at most "tax others down to their
reservations, never below", and the log shows who claimed what.
"""

import os
import shutil
import tempfile
import unittest

from benchex import wire
from resex_agent.intake import IntakeParams
from resex_agent.intake import LatencyIntake
from resex_libvirt.hypervisor import base
from resex_libvirt import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt import sla as sla_mod
from tests.functional.intake.fake_qemu import FakeQemuChannel
from tests.functional.intake.fake_qemu import wait_for

LIAR = "11111111-0000-4000-8000-000000000001"
HEAVY = "22222222-0000-4000-8000-000000000002"
RESERVATION = 30.0


class TestLyingTenant(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="resex-liar-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.qemu = FakeQemuChannel(os.path.join(self.dir, "liar.sock"))
        self.addCleanup(self.qemu.close)
        self.intake = LatencyIntake(IntakeParams(probe_socket_path=None, freshness_s=600.0,
                                                 channel_retry_s=0.05))
        self.intake.start()
        self.addCleanup(self.intake.close)

    def run_market(self, liar_sla):
        liar = base.VMInfo(uuid=LIAR, name="liar", sla=liar_sla,
                           latency_channel=self.qemu.path)
        heavy_sla = sla_mod.SLA(reservation_pct=RESERVATION)
        heavy = base.VMInfo(uuid=HEAVY, name="heavy", sla=heavy_sla)
        self.intake.sync({LIAR: liar, HEAVY: heavy})
        self.qemu.accept()
        with self.assertLogs("resex_agent.intake.store", level="INFO") as logs:
            self.qemu.guest_write(wire.encode(500, 9_000_000.0, 1.0, 9_500_000.0))
            self.assertTrue(wait_for(lambda: sum(
                c["accepted"] + sum(c["rejected"].values())
                for c in self.intake.stats().values()) == 1))
        params = market_mod.MarketParams(interval_s=0.1, intervals_per_epoch=10, pcpus=2)
        market = market_mod.Market(params, policy_mod.load("io_shares"))
        market.add(market_mod.VMSpec(vm=LIAR, sla=liar_sla))
        market.add(market_mod.VMSpec(vm=HEAVY, sla=heavy_sla))
        caps = []
        for tick in range(100):
            samples = {
                LIAR: market_mod.Sample(vm=LIAR, ts=tick * 0.1, cpu_pct=10.0, tx_mtus=0),
                HEAVY: market_mod.Sample(vm=HEAVY, ts=tick * 0.1, cpu_pct=50.0, tx_mtus=2000),
            }
            decisions = market.step(samples, self.intake.windows())
            caps.append(decisions[HEAVY].cap_pct)
            if market.tick == params.intervals_per_epoch:
                market.end_epoch()
        return caps, logs.output

    def test_a_lying_sensitive_vm_taxes_the_heavy_sender_to_its_reservation_and_no_longer(self):
        caps, log = self.run_market(sla_mod.SLA(latency_sla_us=100.0))
        # The lie can push the heavy sender to its reservation, never below...
        self.assertEqual(RESERVATION, min(caps))
        # ... and only while it keeps reporting: one report is one window, and
        # a victim with no new window is idle, its interferer released (before
        # its second window, after idle_delays delays of at least 4 s: 6 s).
        self.assertEqual(100.0, caps[-1])
        self.assertEqual(1, len(log))
        self.assertIn("WARNING", log[0])
        self.assertIn("VM %s claims latency mean 9000000.0 us" % LIAR, log[0])

    def test_a_lying_vm_without_a_latency_sla_taxes_no_one(self):
        caps, log = self.run_market(sla_mod.SLA())
        self.assertEqual({100.0}, set(caps))
        self.assertEqual({}, self.intake.windows())
        self.assertIn("rejected: no_latency_sla", log[0])
        self.assertIn(LIAR, log[0])
