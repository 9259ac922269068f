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

"""The intake over real Unix sockets: per-VM channels (a test plays QEMU) and the probe socket."""

import os
import random
import shutil
import socket
import stat
import tempfile
import threading
import unittest

from benchex import wire
from resex_agent.intake import IntakeParams
from resex_agent.intake import LatencyIntake
from resex_agent.intake import store as store_mod
from resex_agent.intake import window
from resex_libvirt import exceptions
from resex_libvirt.hypervisor import base
from resex_libvirt import sla as sla_mod
from tests.functional.intake.fake_qemu import FakeQemuChannel
from tests.functional.intake.fake_qemu import wait_for
from tests.unit.intake.test_fuzz import hostile_line

A = "aaaaaaaa-0000-4000-8000-000000000001"
B = "bbbbbbbb-0000-4000-8000-000000000002"


class IntakeTestCase(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="resex-intake-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.probe_path = os.path.join(self.dir, "run", "latency.sock")

    def start_intake(self, **kw):
        kw.setdefault("probe_socket_path", self.probe_path)
        kw.setdefault("channel_retry_s", 0.05)
        kw.setdefault("rate_limit_per_s", 1000.0)
        kw.setdefault("rate_burst", 1000)
        kw.setdefault("freshness_s", 600.0)
        intake = LatencyIntake(IntakeParams(**kw))
        intake.start()
        self.addCleanup(intake.close)
        return intake

    def qemu(self, name):
        fake = FakeQemuChannel(os.path.join(self.dir, name + ".sock"))
        self.addCleanup(fake.close)
        return fake

    def vm(self, uuid, channel=None, sla_us=100.0):
        sla = sla_mod.SLA(latency_sla_us=sla_us) if sla_us else sla_mod.SLA()
        return base.VMInfo(uuid=uuid, name=uuid[:8], sla=sla,
                           latency_channel=channel.path if channel else None)

    def probe(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self.probe_path)
        self.addCleanup(sock.close)
        return sock


class TestChannels(IntakeTestCase):

    def test_a_channel_report_reaches_its_vms_window(self):
        qa = self.qemu("a")
        intake = self.start_intake()
        intake.sync({A: self.vm(A, qa)})
        qa.accept()
        qa.guest_write(wire.encode(25, 180.0, 4.0, 199.0))
        wins = wait_for(lambda: intake.windows())
        self.assertEqual({A}, set(wins))
        self.assertEqual((25, 180.0, 4.0, 199.0),
                         (wins[A].count, wins[A].mean_us, wins[A].std_us, wins[A].p99_us))

    def test_a_vm_cannot_report_for_another_through_its_channel(self):
        qa, qb = self.qemu("a"), self.qemu("b")
        intake = self.start_intake()
        intake.sync({A: self.vm(A, qa), B: self.vm(B, qb)})
        qa.accept()
        qb.accept()
        spoof = wire.encode(100, 9_000_000.0, 1.0, 9_000_000.0, vm=B)
        qa.guest_write(spoof + wire.encode(10, 110.0, 2.0, 120.0))
        stats = wait_for(lambda: intake.stats().get(A, {}).get("accepted") == 1
                         and intake.stats())
        self.assertEqual({wire.VM_FIELD_IN_CHANNEL: 1}, stats[A]["rejected"])
        self.assertNotIn(B, stats)
        wins = intake.windows()
        self.assertEqual({A}, set(wins))
        self.assertEqual(110.0, wins[A].mean_us)

    def test_a_channel_reconnects_after_qemu_restarts(self):
        qa = self.qemu("a")
        intake = self.start_intake()
        intake.sync({A: self.vm(A, qa)})
        qa.accept()
        self.assertTrue(wait_for(lambda: A in intake.channels()))
        qa.close()
        self.assertTrue(wait_for(lambda: A not in intake.channels()))
        again = FakeQemuChannel(qa.path)
        self.addCleanup(again.close)
        again.accept()
        again.guest_write(wire.encode(5, 150.0, 1.0, 151.0))
        self.assertEqual(150.0, wait_for(lambda: intake.windows().get(A)).mean_us)

    def test_a_restarted_vms_new_channel_path_is_connected_without_the_retry_wait(self):
        # A hard reboot gives the hot-plugged channel a new path (a new domain
        # ID): it is tried at once, not after channel_retry_s.
        qa = self.qemu("a")
        intake = self.start_intake(channel_retry_s=3600.0)
        intake.sync({A: self.vm(A, qa)})
        qa.accept()
        self.assertTrue(wait_for(lambda: A in intake.channels()))
        qa.close()
        self.assertTrue(wait_for(lambda: A not in intake.channels()))
        rebooted = self.qemu("a-domain-2")
        intake.sync({A: self.vm(A, rebooted)})
        rebooted.accept()
        rebooted.guest_write(wire.encode(5, 150.0, 1.0, 151.0))
        self.assertEqual(150.0, wait_for(lambda: intake.windows().get(A)).mean_us)

    def test_channels_of_vms_that_leave_are_closed(self):
        qa = self.qemu("a")
        intake = self.start_intake()
        intake.sync({A: self.vm(A, qa)})
        conn = qa.accept()
        intake.sync({})
        conn.settimeout(20.0)
        self.assertEqual(b"", conn.recv(1))
        self.assertEqual(set(), intake.channels())

    def test_a_vm_without_a_latency_sla_is_heard_but_never_in_a_window(self):
        qa = self.qemu("a")
        intake = self.start_intake()
        intake.sync({A: self.vm(A, qa, sla_us=None)})
        qa.accept()
        qa.guest_write(wire.encode(10, 9_000_000.0, 1.0, 9_000_000.0))
        stats = wait_for(lambda: intake.stats().get(A))
        self.assertEqual({wire.NO_LATENCY_SLA: 1}, stats["rejected"])
        self.assertEqual({}, intake.windows())

    def test_hostile_streams_through_sockets_leave_honest_vms_unharmed(self):
        """~3,000 hostile lines and a 1 MiB line on A's channel and the probe socket."""
        qa, qb = self.qemu("a"), self.qemu("b")
        intake = self.start_intake(max_message_bytes=512, window_reports=8)
        intake.sync({A: self.vm(A, qa), B: self.vm(B, qb, sla_us=200.0)})
        qa.accept()
        qb.accept()
        probe = self.probe()
        rng = random.Random(5)
        hostile = b"".join(hostile_line(rng) + b"\n" for _ in range(2000))
        probe_junk = b"".join(hostile_line(rng, vm=A) + b"\n" for _ in range(1000))

        def attack():
            for i in range(0, len(hostile), 3001):
                qa.guest_write(hostile[i:i + 3001])
            qa.guest_write(b"{" + b"7" * (1 << 20))
            qa.guest_write(b"\n")
            probe.sendall(probe_junk)

        attacker = threading.Thread(target=attack)
        attacker.start()
        honest = []
        for i in range(20):
            r = wire.Report(n=10 + i, mean_us=200.0 + i, std_us=3.0, p99_us=220.0 + i)
            honest.append(r)
            qb.guest_write(wire.encode(r.n, r.mean_us, r.std_us, r.p99_us))
        attacker.join()
        qa.guest_write(wire.encode(7, 101.0, 1.0, 102.0))
        self.assertTrue(wait_for(lambda: intake.stats().get(B, {}).get("accepted") == 20))
        st = wait_for(lambda: intake.stats()[A]["rejected"].get(wire.TOO_LONG, 0) >= 1
                      and intake.stats())
        self.assertTrue(st, intake.stats())
        self.assertEqual({}, st[B]["rejected"])
        self.assertGreater(sum(st[A]["rejected"].values()), 1000)
        self.assertGreater(sum(st[store_mod.UNATTRIBUTED]["rejected"].values()), 100)
        kept = honest[-8:]       # B's first window handed: all of its requests are new
        self.assertEqual(window.pool(kept, new=sum(r.n for r in kept)), intake.windows()[B])
        fp = intake.store.footprint()
        self.assertLessEqual(fp["reports"], 8 * 2 * 2)
        # The intake is still serving: A's last honest line came through.
        self.assertTrue(wait_for(lambda: any(
            r.mean_us == 101.0 for r in intake.store._windows[(A, wire.SOURCE_CHANNEL)]
            .reports())))


class TestProbeSocket(IntakeTestCase):

    def test_the_probe_socket_is_mode_0600_and_reports_name_their_vm(self):
        intake = self.start_intake()
        self.assertEqual(0o600, stat.S_IMODE(os.stat(self.probe_path).st_mode))
        intake.sync({A: self.vm(A), B: self.vm(B)})
        self.probe().sendall(wire.encode(40, 333.0, 2.0, 340.0, vm=B))
        wins = wait_for(lambda: intake.windows())
        self.assertEqual({B}, set(wins))
        self.assertEqual(333.0, wins[B].mean_us)

    def test_reports_for_vms_not_on_this_host_are_rejected(self):
        intake = self.start_intake()
        intake.sync({A: self.vm(A)})
        self.probe().sendall(wire.encode(1, 1.0, 0.0, 1.0, vm=B))
        stats = wait_for(lambda: intake.stats().get(store_mod.UNATTRIBUTED))
        self.assertEqual({wire.UNKNOWN_VM: 1}, stats["rejected"])
        self.assertEqual({}, intake.windows())

    @staticmethod
    def report_as_nobody(path, line):
        """Fork a child that drops to uid/gid 65534 and sends ``line``; its exit status."""
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setgid(65534)
                os.setuid(65534)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(path)
                except PermissionError:
                    code = 13
                else:
                    code = 0
                    try:  # the agent may hang up first: that is the point
                        s.sendall(line)
                        s.recv(1)
                    except OSError:
                        pass
            finally:
                os._exit(code)
        _pid, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run a probe as another uid")
    def test_other_uids_cannot_report_even_through_a_loosened_socket(self):
        intake = self.start_intake()
        intake.sync({A: self.vm(A)})
        line = wire.encode(3, 5000.0, 1.0, 5000.0, vm=A)
        os.chmod(self.dir, 0o755)
        os.chmod(os.path.dirname(self.probe_path), 0o755)
        # The 0600 mode is the trust boundary...
        self.assertEqual(13, self.report_as_nobody(self.probe_path, line))
        # ...and after an operator's mistake, SO_PEERCRED still holds.
        os.chmod(self.probe_path, 0o666)
        self.assertEqual(0, self.report_as_nobody(self.probe_path, line))
        stats = wait_for(lambda: intake.stats().get(store_mod.UNATTRIBUTED))
        self.assertEqual({wire.PEER_NOT_ALLOWED: 1}, stats["rejected"])
        self.assertEqual({}, intake.windows())

    def test_close_stops_the_thread_and_removes_the_socket(self):
        intake = LatencyIntake(IntakeParams(probe_socket_path=self.probe_path))
        intake.start()
        intake.close()
        self.assertFalse(os.path.exists(self.probe_path))
        self.assertFalse([t for t in threading.enumerate() if t.name == "latency-intake"])

    def test_a_regular_file_in_the_probe_sockets_place_is_not_removed(self):
        os.makedirs(os.path.dirname(self.probe_path))
        with open(self.probe_path, "w") as f:
            f.write("precious")
        intake = LatencyIntake(IntakeParams(probe_socket_path=self.probe_path))
        self.assertRaises(exceptions.ConfigError, intake.start)
        intake.close()
        with open(self.probe_path) as f:
            self.assertEqual("precious", f.read())

    def test_the_intake_reads_its_settings_from_the_latency_group(self):
        from oslo_config import cfg

        from resex_agent.conf import latency as latency_conf
        conf = cfg.ConfigOpts()
        latency_conf.register_opts(conf)
        conf([], project="resex-test", default_config_files=[])
        conf.set_override("probe_socket_path", self.probe_path, group="latency")
        conf.set_override("rate_burst", 7, group="latency")
        intake = LatencyIntake(conf)
        self.assertEqual(7, intake.params.rate_burst)
        self.assertEqual(self.probe_path, intake.params.probe_socket_path)
        self.assertEqual([("latency", latency_conf.OPTS)], latency_conf.list_opts())
