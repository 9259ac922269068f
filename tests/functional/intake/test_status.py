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

"""Status back to the guest over real Unix sockets (a test plays QEMU and the guest).

The agent's status reaches the guest down the same channel its reports come
up, BenchEx's reporter reads it, and a guest that never reads loses status
lines (dropped and counted), never its reports.
"""

import os
import time

from benchex import reporter as reporter_mod
from benchex import status as status_wire
from benchex import wire
from resex_agent import status as status_mod
from resex_libvirt.hypervisor import base
from resex_libvirt.market import policy
from resex_libvirt.market import records
from resex_libvirt import sla as sla_mod
from tests.functional.intake.fake_qemu import wait_for
from tests.functional.intake import test_channels

A = test_channels.A
B = test_channels.B


def status_line(info, mean_us=150.0, cap_pct=None, reason=policy.UNCAPPED):
    win = records.LatencyWindow(count=10, mean_us=mean_us, std_us=1.0, p99_us=mean_us + 10)
    sla = info.sla
    intf = (100.0 * (mean_us - sla.latency_sla_us) / sla.latency_sla_us
            if sla.sensitive else None)
    return status_mod.encode(status_mod.vm_status(info, win if sla.sensitive else None, intf,
                                                  cap_pct, reason))


class StatusOverChannelsTest(test_channels.IntakeTestCase):

    def test_each_vm_reads_its_own_status_on_its_own_channel(self):
        qa, qb = self.qemu("a"), self.qemu("b")
        intake = self.start_intake()
        victim = self.vm(A, qa, sla_us=100.0)
        bulk = base.VMInfo(uuid=B, name="instance-0000000b", vcpus=2, sla=sla_mod.SLA(),
                           latency_channel=qb.path, project="proj-b")
        intake.sync({A: victim, B: bulk})
        qa.accept()
        qb.accept()
        wait_for(lambda: intake.channels() == {A, B})
        intake.post_status({A: status_line(victim, 150.0),
                            B: status_line(bulk, cap_pct=35.0, reason=policy.TAX)})
        got_a = status_wire.parse(wait_for(lambda: qa.guest_read()).rstrip(b"\n"))
        got_b = status_wire.parse(wait_for(lambda: qb.guest_read()).rstrip(b"\n"))
        self.assertEqual(("missed", None), (got_a["state"], got_a["cap"]))
        self.assertEqual(100.0, got_a["sla"]["latency_us"])
        self.assertEqual(("no_sla", "congestion", 35.0),
                         (got_b["state"], got_b["cap"]["reason"], got_b["cap"]["pct"]))
        self.assertEqual((2, 0), intake.status_counts())

    def test_benchex_reports_up_and_reads_its_status_down_the_same_port(self):
        qa = self.qemu("a")
        intake = self.start_intake()
        info = self.vm(A, qa, sla_us=100.0)
        intake.sync({A: info})
        qa.accept()
        port = os.path.join(self.dir, "guest-port")
        qa.relay_to_guest(port)
        path = os.path.join(self.dir, "status.json")
        rep = reporter_mod.LatencyReporter(reporter_mod.ChannelSink(port), interval_s=60,
                                           status_file=path)
        self.addCleanup(rep.close)
        rep.add(104.0)
        rep.flush()
        self.assertEqual(104.0, wait_for(lambda: intake.windows().get(A)).mean_us)
        intake.post_status({A: status_line(info, 104.0)})

        def told():
            rep.add(104.0)
            rep.flush()
            return rep.status
        self.assertEqual("met", wait_for(told)["state"])
        self.assertTrue(os.path.exists(path))

    def test_a_guest_that_never_reads_loses_statuses_not_reports(self):
        qa = self.qemu("a")
        intake = self.start_intake()
        info = self.vm(A, qa, sla_us=100.0)
        intake.sync({A: info})
        qa.accept()
        wait_for(lambda: A in intake.channels())
        # QEMU passes nothing on while the guest has not opened its port:
        # the agent's socket fills, and every further line is dropped.
        k = 0
        deadline = time.monotonic() + 20.0
        while intake.status_counts()[1] < 10 and time.monotonic() < deadline:
            k += 1
            intake.post_status({A: status_line(info, 100.0 + k)})
            time.sleep(0.001)
        sent, dropped = intake.status_counts()
        self.assertGreaterEqual(dropped, 10)
        # The reports still come in, and the intake thread is not stalled.
        qa.guest_write(wire.encode(25, 180.0, 4.0, 199.0))
        self.assertEqual(180.0, wait_for(lambda: intake.windows().get(A)).mean_us)
        # The guest starts reading: whole lines, a bounded backlog, then news.
        backlog = qa.guest_read()
        wait_for(lambda: not intake._tails)
        backlog += qa.guest_read(timeout=0.05)
        lines = backlog.split(b"\n")
        self.assertEqual(b"", lines[-1])
        self.assertTrue(all(status_wire.parse(line) for line in lines[:-1]))
        self.assertLess(len(backlog), 64 * 1024)
        intake.post_status({A: status_line(info, 99.0)})
        fresh = status_wire.parse(wait_for(lambda: qa.guest_read()).rstrip(b"\n"))
        self.assertEqual(99.0, fresh["window"]["mean_us"])
        self.assertEqual(sent + 1, intake.status_counts()[0])
