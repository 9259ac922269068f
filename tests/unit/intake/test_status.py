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

"""Status back to the guest: what a VM is told, what it is never told, and how it is written.

The content and the privacy of a status (:mod:`resex_agent.status`), the loop's
rate limit, and the intake's writer: never blocking, dropping and counting a
line the channel cannot take.
"""

import dataclasses
import errno
import json
import socket
import unittest
from unittest import mock

from benchex import framing
from benchex import status as wire
from resex_agent import builder
from resex_agent.intake import params as params_mod
from resex_agent.intake import server as server_mod
from resex_agent import status as status_mod
from resex_libvirt.hypervisor import base
from resex_libvirt.market import policy
from resex_libvirt.market import records
from resex_libvirt.sim import scenario as scenario_mod
from resex_libvirt import sla as sla_mod
from tests.unit.agent import test_loop

A = "aaaaaaaa-0000-4000-8000-000000000001"


def vm(sla_us=None, vcpus=2, **kw):
    sla = sla_mod.SLA(latency_sla_us=sla_us) if sla_us else sla_mod.SLA()
    return base.VMInfo(uuid=A, name="instance-0000000a", vcpus=vcpus, sla=sla,
                       nova_name="web-1", project="8d6f2c0b", project_name="web-team", **kw)


def window(mean_us=231.0, p99_us=410.0, count=2400):
    return records.LatencyWindow(count=count, mean_us=mean_us, std_us=5.0, p99_us=p99_us)


class StatusContentTest(unittest.TestCase):

    def test_a_sensitive_vm_over_its_threshold_missed_its_sla(self):
        got = status_mod.vm_status(vm(200.0), window(), 15.5, cap_pct=200.0,
                                   reason=policy.PROTECTED)
        self.assertEqual({
            "state": "missed",
            "sla": {"latency_us": 200.0, "threshold_pct": 10.0, "statistic": "mean"},
            "window": {"requests": 2400, "mean_us": 231.0, "p99_us": 410.0,
                       "interference_pct": 15.5},
            "cap": None}, got)
        self.assertEqual(got, {k: v for k, v in wire.parse(status_mod.encode(got)).items()
                               if k != "v"})

    def test_within_its_threshold_it_met_it_and_without_a_window_it_is_said(self):
        self.assertEqual("met", status_mod.vm_status(vm(200.0), window(205.0), 2.5)["state"])
        none = status_mod.vm_status(vm(200.0))
        self.assertEqual(("no_window", None), (none["state"], none["window"]))
        self.assertEqual("no_window", status_mod.vm_status(vm(200.0), window(count=0),
                                                           0.0)["state"])

    def test_a_vm_without_a_latency_sla_has_none_and_an_unknown_p99_is_null(self):
        got = status_mod.vm_status(vm(), window(p99_us=0.0), None)
        self.assertEqual(("no_sla", None), (got["state"], got["sla"]))
        self.assertIsNone(got["window"]["p99_us"])

    def test_a_capped_interferer_is_told_its_cap_limit_and_a_category(self):
        got = status_mod.vm_status(vm(), cap_pct=35.0, reason=policy.TAX)
        self.assertEqual({"pct": 35.0, "limit_pct": 200.0, "reason": "congestion",
                          "enforced": True}, got["cap"])

    def test_the_peer_the_vms_own_reports_named_is_told_back_with_the_window(self):
        win = records.LatencyWindow(count=2400, mean_us=231.0, std_us=5.0, p99_us=410.0,
                                    peer="10.0.0.7:7788")
        got = status_mod.vm_status(vm(200.0), win, 15.5)
        self.assertEqual("10.0.0.7:7788", got["window"]["peer"])
        told = wire.parse(status_mod.encode(got))
        self.assertEqual("10.0.0.7:7788", told["window"]["peer"])
        self.assertIn("peer 10.0.0.7:7788", wire.render(told))
        self.assertNotIn("peer", status_mod.vm_status(vm(200.0), window(), 15.5)["window"])

    def test_a_cap_at_the_limit_is_no_cap(self):
        self.assertIsNone(status_mod.vm_status(vm(), cap_pct=199.8, reason=policy.TAX)["cap"])
        self.assertIsNone(status_mod.vm_status(vm(), cap_pct=None)["cap"])

    def test_observe_only_says_the_cap_is_not_in_force(self):
        got = status_mod.vm_status(vm(), cap_pct=35.0, reason=policy.TAX, observe_only=True)
        self.assertEqual(("observe_only", False), (got["cap"]["reason"], got["cap"]["enforced"]))

    def test_every_policy_reason_maps_to_a_category_and_a_plugins_to_policy(self):
        for reason in policy.REASONS:
            self.assertIn(status_mod.category(reason), wire.REASONS, reason)
        self.assertEqual("cpu_price", status_mod.category(policy.CREDIT))
        self.assertEqual("cpu_contention", status_mod.category(policy.CONTENTION))
        self.assertEqual("congestion_easing", status_mod.category(policy.DECAY))
        self.assertEqual("policy", status_mod.category("victim-aaaaaaaa"))

    def test_the_line_names_no_vm_no_host_and_no_project_not_even_its_own(self):
        info = vm(200.0)
        line = status_mod.encode(status_mod.vm_status(info, window(), 15.5, 35.0, policy.TAX))
        for secret in (A, info.name, info.nova_name, info.project, info.project_name):
            self.assertNotIn(secret.encode(), line)
        self.assertEqual({"v", "state", "sla", "window", "cap"}, set(json.loads(line)))


class StatusThrottleTest(unittest.TestCase):

    def test_at_most_one_round_per_interval(self):
        throttle = status_mod.Throttle(1.0)
        due = [t for t in (0.0, 0.1, 0.5, 0.99, 1.0, 1.5, 2.2, 2.3) if throttle.due(t)]
        self.assertEqual([0.0, 1.0, 2.2], due)
        self.assertRaises(ValueError, status_mod.Throttle, 0)


class FakeIntake:
    """The intake as the loop sees it: channels connected, statuses posted."""

    def __init__(self, status_interval_s=1.0):
        self.params = params_mod.IntakeParams(status_interval_s=status_interval_s)
        self.connected = set()
        self.posted = []

    def start(self):
        pass

    def close(self):
        pass

    def channels(self):
        return set(self.connected)

    def post_status(self, lines):
        self.posted.append(dict(lines))

    def stats(self):
        return {}

    def status_counts(self):
        return sum(len(p) for p in self.posted), 0


class OwnedHost(test_loop.CountingHost):
    """The simulated paper host, its VMs named and owned as Nova's would be."""

    def vms(self):
        return {uuid: dataclasses.replace(info, nova_name="nova-" + info.name,
                                          project="proj-" + info.name,
                                          project_name="team-" + info.name)
                for uuid, info in super().vms().items()}


def build(intake, duration=3.0):
    """The simulated paper testbed's agent (as ``test_loop.build``) with ``intake``."""
    scenario = scenario_mod.load("paper_64k_vs_2m").with_duration(duration)
    conf = test_loop.make_conf(market={"policy": "io_shares"},
                               agent={"cap_consent": test_loop.PAPER_MARKET},
                               latency={"status_interval_s": intake.params.status_interval_s})
    parts = builder.Parts()
    sim = OwnedHost(scenario)
    parts.hypervisor = parts.fabric = sim
    parts.latency_sources = [sim]
    parts.intake = intake
    parts.clock = sim.clock()
    parts.interval_s, parts.epoch_s = scenario.interval_s, scenario.epoch_s
    return builder.build_agent(conf, parts), sim


def run_with_intake(intake, duration=3.0, connected=True):
    agent, sim = build(intake, duration)
    if connected:
        intake.connected = set(sim.vms())
    agent.run()
    return agent, sim


class LoopStatusTest(unittest.TestCase):
    """The paper's testbed under IOShares: vm2m is taxed for vm64k's latency."""

    def test_a_capped_interferer_is_told_congestion_and_learns_no_one_elses_identity(self):
        intake = FakeIntake()
        agent, sim = run_with_intake(intake)
        infos = sim.vms()
        bulk = next(u for u, i in infos.items() if i.name == "vm2m")
        told = [wire.parse(p[bulk]) for p in intake.posted]
        capped = [s for s in told if s["cap"] is not None]
        self.assertTrue(capped, told)
        reasons = {s["cap"]["reason"] for s in capped}
        self.assertIn("congestion", reasons)
        self.assertLessEqual(reasons, {"congestion", "congestion_easing"})
        self.assertTrue(all(s["cap"]["pct"] < s["cap"]["limit_pct"] for s in capped))
        secrets = {agent.settings.host}
        for info in infos.values():
            secrets |= {info.uuid, info.name, info.nova_name, info.project, info.project_name}
        for posted in intake.posted:
            for line in posted.values():
                for secret in secrets:
                    self.assertNotIn(secret.encode(), line)

    def test_the_sensitive_vm_is_told_its_sla_and_window(self):
        intake = FakeIntake()
        _agent, sim = run_with_intake(intake)
        victim = next(u for u, i in sim.vms().items() if i.name == "vm64k")
        told = [wire.parse(p[victim]) for p in intake.posted]
        self.assertTrue(all(s["sla"] is not None for s in told))
        self.assertIn(told[-1]["state"], ("met", "missed"))
        self.assertGreater(told[-1]["window"]["requests"], 0)

    def test_statuses_are_posted_at_most_once_per_interval_and_only_for_channels(self):
        intake = FakeIntake(status_interval_s=1.0)
        agent, sim = run_with_intake(intake, duration=3.0)
        # Three simulated seconds: rounds at 0, 1 and 2 s (and perhaps at 3).
        self.assertIn(len(intake.posted), (3, 4))
        self.assertEqual(set(sim.vms()), set(intake.posted[0]))
        self.assertEqual(sum(len(p) for p in intake.posted), agent.health().status_sent)
        intake = FakeIntake()
        run_with_intake(intake, duration=1.0, connected=False)
        self.assertEqual([], intake.posted)     # no channel connected: no one to tell

    def test_zero_turns_the_status_off(self):
        intake = FakeIntake(status_interval_s=0.0)
        run_with_intake(intake, duration=2.0)
        self.assertEqual([], intake.posted)

    def test_sighup_applies_the_status_interval(self):
        intake = FakeIntake(status_interval_s=0.0)
        agent, sim = build(intake, duration=2.0)
        intake.connected = set(sim.vms())
        # Off at start; turned on by a reload: rounds at 0 and 1 s of the 2 s run.
        builder.reload_market(test_loop.make_conf(market={"policy": "io_shares"},
                                                  latency={"status_interval_s": 1.0}), agent)
        agent.run()
        self.assertIn(len(intake.posted), (2, 3))
        # Slower, then off again.
        agent.set_status_interval(60.0)
        self.assertEqual(60.0, agent._status.interval_s)
        builder.reload_market(test_loop.make_conf(market={"policy": "io_shares"},
                                                  latency={"status_interval_s": 0.0}), agent)
        self.assertIsNone(agent._status)


def channel(intake, params):
    """A connected channel of VM A inside ``intake``, and the guest's end of it."""
    host, guest = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    host.setblocking(False)
    host.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, server_mod.STATUS_SNDBUF)
    conn = server_mod._ChannelConn(host, A, "/x", framing.LineFramer(params.max_message_bytes))
    intake._channels[A] = conn
    return conn, guest


class IntakeWriterTest(unittest.TestCase):
    """The writer, on the intake's thread (driven here by hand): never blocks, never queues."""

    def setUp(self):
        super().setUp()
        self.params = params_mod.IntakeParams()
        self.intake = server_mod.LatencyIntake(self.params)
        self.conn, self.guest = channel(self.intake, self.params)
        self.addCleanup(self.conn.sock.close)
        self.addCleanup(self.guest.close)

    def line(self, k):
        return status_mod.encode(status_mod.vm_status(vm(200.0), window(200.0 + k), 0.0))

    def test_a_line_is_written_and_an_unchanged_one_only_after_the_refresh(self):
        self.intake.post_status({A: self.line(1)})
        self.intake._write_statuses(100.0)
        self.intake.post_status({A: self.line(1)})
        self.intake._write_statuses(101.0)
        self.intake.post_status({A: self.line(1)})
        self.intake._write_statuses(100.0 + server_mod.STATUS_REFRESH_S)
        self.assertEqual((2, 0), self.intake.status_counts())
        self.assertEqual(self.line(1) * 2, self.guest.recv(4096))

    def test_when_the_guest_does_not_read_lines_are_dropped_and_counted_never_queued(self):
        for k in range(2000):
            self.intake.post_status({A: self.line(k)})
            self.intake._write_statuses(float(k))
        sent, dropped = self.intake.status_counts()
        self.assertEqual(2000, sent + dropped)
        self.assertGreater(dropped, 1000)
        self.assertLess(len(self.conn.tail), wire.MAX_BYTES)
        # What the guest finds is whole lines, however the socket cut them.
        self.guest.setblocking(False)
        data = b""
        try:
            while True:
                data += self.guest.recv(65536)
        except BlockingIOError:
            pass
        self.intake._write_statuses(3000.0)      # finishes a line half written
        try:
            data += self.guest.recv(65536)
        except BlockingIOError:
            pass
        lines = data.split(b"\n")
        self.assertEqual(b"", lines[-1])
        self.assertTrue(all(wire.parse(line) is not None for line in lines[:-1]))
        self.assertEqual(sent, len(lines) - 1)

    def test_only_the_latest_line_of_a_vm_waits(self):
        for k in range(50):
            self.intake.post_status({A: self.line(k)})
        self.intake._write_statuses(1.0)
        self.assertEqual(self.line(49), self.guest.recv(4096))
        self.assertEqual((1, 0), self.intake.status_counts())

    def test_a_vm_whose_channel_is_not_connected_is_told_nothing(self):
        self.intake.post_status({"bbbbbbbb-0000-4000-8000-000000000002": self.line(1)})
        self.intake._write_statuses(1.0)
        self.assertEqual((0, 0), self.intake.status_counts())
        self.assertEqual({}, self.intake._outbox)

    def test_a_closed_guest_end_drops_the_line(self):
        self.guest.close()
        self.intake.post_status({A: self.line(1)})
        self.intake._write_statuses(1.0)
        self.assertEqual((0, 1), self.intake.status_counts())


class DeniedChannelTest(unittest.TestCase):
    """A channel refused for want of permission is said once as a warning, then retried."""

    def test_a_permission_refusal_warns_once_per_vm_and_path(self):
        intake = server_mod.LatencyIntake(params_mod.IntakeParams())
        denied = OSError(errno.EACCES, "Permission denied")
        with mock.patch("socket.socket.connect", side_effect=denied), \
                self.assertLogs(server_mod.LOG, level="DEBUG") as logs:
            for now in (0.0, 10.0, 20.0):
                intake._connect_channel(A, "/run/x/org.resex.latency.0", now)
            intake._connect_channel(A, "/run/y/org.resex.latency.0", 30.0)
        warnings = [r for r in logs.records if r.levelname == "WARNING"]
        self.assertEqual(2, len(warnings))      # the first refusal, and the new path's
        self.assertIn("CAP_DAC_OVERRIDE", warnings[0].getMessage())
        self.assertEqual(30.0 + intake.params.channel_retry_s, intake._retry_at[A])

    def test_a_socket_not_there_yet_stays_at_debug(self):
        intake = server_mod.LatencyIntake(params_mod.IntakeParams())
        with mock.patch("socket.socket.connect",
                        side_effect=OSError(errno.ENOENT, "No such file")), \
                self.assertLogs(server_mod.LOG, level="DEBUG") as logs:
            intake._connect_channel(A, "/run/x/org.resex.latency.0", 0.0)
        self.assertEqual(["DEBUG"], [r.levelname for r in logs.records])
