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

"""The soak's parts that need no lab: the agent's configuration, the sampler's reads,
the event runner and the report."""

import json
import os
import shutil
import tempfile
import time
import types
import unittest

from tests.faults import soak
from tests.faults import soak_figures as figures
from tests.faults import soak_schedule as schedule
from tests.lab import experiment


class _Proc:
    """What the runner asks of the agent's process."""

    def __init__(self, returncode=None):
        self.returncode = returncode
        self.pid = os.getpid()

    def poll(self):
        return self.returncode


def _lab(returncode=None):
    return types.SimpleNamespace(agent=types.SimpleNamespace(proc=_Proc(returncode),
                                                             log_path="agent.log"))


class SoakPartsTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="resex-soak-unit-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_the_lab_agent_publishes_to_the_cluster_and_serves_its_metrics(self):
        agent = experiment.AgentProcess(self.dir, "soak", "io_shares", 1.0)
        url = "etcd3+http://127.0.0.1:2379,127.0.0.1:2479,127.0.0.1:2579"
        soak.configure_agent(agent.conf_path, url, 9999)
        with open(agent.conf_path) as f:
            text = f.read()
        self.assertIn("[board]\nurl = %s\n" % url, text)
        self.assertNotIn("sqlite", text)
        self.assertIn("[metrics]\nenabled = true\nbind_address = 127.0.0.1\nport = 9999\n",
                      text)

    def test_a_process_is_read_from_proc_and_a_gone_one_is_all_unknown(self):
        got = soak.agent_process(os.getpid())
        self.assertGreater(got["rss_kib"], 0)
        self.assertGreaterEqual(got["threads"], 1)
        self.assertGreater(got["fds"], 0)
        self.assertEqual({"rss_kib": None, "threads": None, "fds": None},
                         soak.agent_process(None))

    def test_the_state_directory_is_summed_and_its_journal_measured(self):
        os.makedirs(os.path.join(self.dir, "sub"))
        for name, size in (("journal.json", 300), ("lock", 0), ("sub/x", 700)):
            with open(os.path.join(self.dir, name), "wb") as f:
                f.write(b"j" * size)
        self.assertEqual({"journal_bytes": 300, "state_dir_bytes": 1000},
                         soak.state_sizes(self.dir))
        os.unlink(os.path.join(self.dir, "journal.json"))
        self.assertIsNone(soak.state_sizes(self.dir)["journal_bytes"])

    def test_a_dead_metrics_endpoint_gives_unknown_values(self):
        from tests.functional.board import etcd_server
        got = soak.agent_metrics(etcd_server.free_port())
        self.assertEqual(set(soak.METRICS), set(got))
        self.assertTrue(all(v is None for v in got.values()))


class LogPatternsTest(unittest.TestCase):

    def test_the_agents_lines_are_counted(self):
        log = "\n".join([
            "... WARNING resex_agent.loop [-] control loop late by 312.0 ms; "
            "skipping 3 interval(s)",
            "... INFO resex_agent.builder [-] configuration reloaded",
            "... WARNING resex_agent.loop [-] epoch 7: BLIND, the hypervisor was unavailable",
            "... WARNING resex_agent.publisher [-] price board unavailable, controlling locally",
            "... INFO resex_agent.intake.server [-] latency channel of VM 5e1f connected "
            "(/x.sock)",
            "... INFO resex_agent.intake.server [-] latency channel of VM 5e1f closed: eof",
            "... INFO resex_agent.loop [-] epoch 8: 3 VMs, link 0%, prices cpu 1.00 io 1.00, "
            "inflation 0.0%, congestion 0.0% | resex-soak-bulk cap 20/20% rate 1.00 (limit); "
            "resex-soak-sensitive cap 100/100% rate 1.00 lat 2180us (uncapped)", ""])
        self.assertEqual({"lost_intervals": 3, "reloads": 1, "blind_epochs": 1,
                          "board_unavailable": 1, "channels_connected": 1,
                          "channels_closed": 1, "sensitive_heard": 1},
                         figures.LogCounter(soak.LOG_PATTERNS).feed(log))


class RunEventsTest(unittest.TestCase):

    def test_events_run_in_order_a_failure_is_recorded_and_the_run_goes_on(self):
        def boom(lab, event):
            raise RuntimeError("libvirtd said no")
        actions = {schedule.CHURN: lambda lab, e: "guest %d" % e.index,
                   schedule.SIGHUP: lambda lab, e: "sent", schedule.LIBVIRTD_RESTART: boom}
        events = [schedule.Event(0.0, schedule.CHURN, 0),
                  schedule.Event(0.0, schedule.LIBVIRTD_RESTART, 0),
                  schedule.Event(0.001, schedule.SIGHUP, 0)]
        done = []
        soak.run_events(_lab(), events, time.monotonic(), schedule.Plan(), done, actions)
        self.assertEqual([("churn", "done", "guest 0"),
                          ("libvirtd restart", "failed", "RuntimeError('libvirtd said no')"),
                          ("sighup", "done", "sent")],
                         [(r["kind"], r["result"], r["note"]) for r in done])
        self.assertTrue(all(r["ended"] >= r["began"] for r in done))

    def test_a_churn_more_than_a_period_late_is_skipped_and_a_restart_never(self):
        actions = {kind: lambda lab, e: "ok" for kind in soak.ACTIONS}
        events = [schedule.Event(0.0, schedule.CHURN, 0),
                  schedule.Event(0.0, schedule.ETCD_RESTART, 0)]
        done = []
        # The run started 100 s ago: both events are late.
        soak.run_events(_lab(), events, time.monotonic() - 100.0,
                        schedule.Plan(churn_every_s=5.0), done, actions)
        self.assertEqual(["skipped", "done"], [r["result"] for r in done])

    def test_the_agent_found_exited_ends_the_run(self):
        actions = {kind: lambda lab, e: "ok" for kind in soak.ACTIONS}
        done = []
        with self.assertRaisesRegex(soak.AgentDied, "exited"):
            soak.run_events(_lab(returncode=1), [schedule.Event(0.0, schedule.SIGHUP, 0)],
                            time.monotonic(), schedule.Plan(), done, actions)
        self.assertEqual([], done)


class ReportTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.samples = [{"t": 5.0 * i, "rss_kib": 60000 + (i % 3), "fds": 30, "threads": 12,
                         "lost_intervals": 0 if i < 10 else 4, "reloads": i // 6,
                         "blind_epochs": 0, "board_unavailable": 1} for i in range(40)]
        self.planned = schedule.build(200.0, schedule.Plan(sighup_every_s=30.0))
        self.done = [{"at": 66.667, "kind": schedule.LIBVIRTD_RESTART, "index": 0,
                      "began": 48.0, "ended": 52.0, "result": "done", "note": "down 2.0 s"},
                     {"at": 5.0, "kind": schedule.CHURN, "index": 0, "began": 5.0,
                      "ended": 6.5, "result": "done", "note": "resex-soak-churn-0"},
                     {"at": 10.0, "kind": schedule.CHURN, "index": 1, "began": 30.0,
                      "ended": 30.0, "result": "skipped", "note": "late"}]

    def test_the_report_counts_events_and_puts_the_lost_intervals_on_the_faults(self):
        found = soak.figures_of(self.samples, self.done)
        self.assertEqual((4, 0), (found["lost_during_faults"], found["lost_beyond_faults"]))
        text = soak.format_report(200.0, self.samples, self.planned, self.done, found)
        self.assertIn("libvirtd restart", text)
        self.assertIn("  churn                  39: 1, 0, 1", text)
        self.assertIn("4 near the faults", text)
        self.assertIn("0 beyond them", text)
        self.assertIn("SIGHUPs heard (configuration reloaded): 6", text)
        self.assertNotIn("EARLY", text)
        self.assertIn("THE RUN ENDED EARLY: it died",
                      soak.format_report(200.0, self.samples, self.planned, self.done, found,
                                         "it died"))

    def test_the_channels_connected_before_the_run_are_reported_apart(self):
        class Agent:
            def log(self):
                return ("... latency channel of VM 5e1f connected (/a.sock)\n"
                        "... latency channel of VM 6a2b connected (/b.sock)\n")

        class Lab:
            agent = Agent()

            def mark(self):
                return len(self.agent.log())
        sampler = soak.Sampler(Lab(), 0.0)
        self.assertEqual(2, sampler.at_setup["channels_connected"])
        found = soak.figures_of(self.samples, self.done, sampler.at_setup)
        text = soak.format_report(200.0, self.samples, self.planned, self.done, found)
        self.assertIn("Latency channels connected 2 at set-up", text)

    def test_every_sample_and_event_is_in_the_json(self):
        found = soak.figures_of(self.samples, self.done)
        out = tempfile.mkdtemp(prefix="resex-soak-json-")
        self.addCleanup(shutil.rmtree, out, True)
        path = os.path.join(out, "deeper", "soak.json")
        soak.write_json(path, 200.0, schedule.Plan(), self.samples, self.planned, self.done,
                        found, None)
        with open(path) as f:
            data = json.load(f)
        self.assertEqual(self.samples, data["samples"])
        self.assertEqual(self.done, data["done"])
        self.assertEqual(39, data["events"]["churn"]["planned"])
        self.assertEqual(list(soak.SERIES),
                         [s["name"] for s in data["figures"]["summaries"]])
