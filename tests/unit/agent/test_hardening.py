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

"""The agent's defences, part by part: lock, watchdog, publisher, journal, epoch record.

The faults themselves, end to end, are in tests/functional/faults.
"""

import functools
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import unittest
from unittest import mock

import prometheus_client

from resex_agent import config_file
from resex_agent import journal as journal_mod
from resex_agent import lock as lock_mod
from resex_agent import loop
from resex_agent import metrics as metrics_mod
from resex_agent import publisher as publisher_mod
from resex_agent import resex_agent
from resex_agent import watchdog as watchdog_mod
from resex_libvirt.board import report as report_mod
from resex_libvirt import exceptions
from resex_libvirt.fabric import base as fabric_base
from resex_libvirt.hypervisor import base as hyp_base
from resex_libvirt.market import market as market_mod
from tests import machine
from tests.unit.agent import test_loop


class TmpDirCase(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="resex-hardening-")
        self.addCleanup(shutil.rmtree, self.dir, True)


class LockTest(TmpDirCase):

    def test_a_second_holder_is_refused_naming_the_first_pid(self):
        first = lock_mod.StateDirLock(self.dir).acquire()
        self.addCleanup(first.release)
        with self.assertRaises(lock_mod.AlreadyRunning) as cm:
            lock_mod.StateDirLock(self.dir).acquire()
        self.assertEqual(os.getpid(), cm.exception.pid)
        self.assertIn("(pid %d)" % os.getpid(), str(cm.exception))

    def test_the_lock_is_free_again_once_released(self):
        lock_mod.StateDirLock(self.dir).acquire().release()
        lock_mod.StateDirLock(self.dir).acquire().release()

    def test_the_holder_is_read_from_the_kernels_table_without_taking_the_lock(self):
        path = os.path.join(self.dir, lock_mod.LOCK_NAME)
        self.assertIsNone(lock_mod.holder(path))            # no file
        first = lock_mod.StateDirLock(self.dir).acquire()
        self.assertEqual(os.getpid(), lock_mod.holder(path))
        first.release()
        self.assertIsNone(lock_mod.holder(path))            # the file stays, free
        # Asking took nothing: the lock is free for an agent starting meanwhile.
        lock_mod.StateDirLock(self.dir).acquire().release()


class HostLockTest(TmpDirCase):

    def test_a_system_uri_locks_beside_libvirtds_runtime_files(self):
        for uri in ("qemu:///system", "xen:///system", "qemu:///system/"):
            self.assertEqual("/run/libvirt/resex-agent.lock", lock_mod.host_lock_path(uri))

    def test_other_uris_lock_a_file_of_their_own(self):
        test_lock = lock_mod.host_lock_path("test:///default")
        self.assertNotEqual(test_lock, lock_mod.host_lock_path("test:///other"))
        for uri in ("qemu+tcp://node2/system", "qemu+unix:///system?socket=/tmp/x/sock"):
            self.assertNotEqual("/run/libvirt/resex-agent.lock", lock_mod.host_lock_path(uri))

    def test_a_second_agent_of_the_host_is_refused_whatever_its_state_directory(self):
        path = os.path.join(self.dir, "host.lock")
        first = lock_mod.HostLock("qemu:///system", path).acquire()
        self.addCleanup(first.release)
        other_state = lock_mod.StateDirLock(os.path.join(self.dir, "other")).acquire()
        self.addCleanup(other_state.release)
        with self.assertRaises(lock_mod.AlreadyRunning) as cm:
            lock_mod.HostLock("qemu:///system", path).acquire()
        self.assertIn("(pid %d)" % os.getpid(), str(cm.exception))
        self.assertIn("the host's", str(cm.exception))


class WatchdogTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.dog = watchdog_mod.Watchdog(0.2, name="test")
        self.addCleanup(self.dog.close)

    def test_a_call_in_time_returns_its_value_or_raises_its_error(self):
        self.assertEqual(3, self.dog.call("add", lambda a, b: a + b, 1, 2))
        with self.assertRaises(exceptions.VMGone):
            self.dog.call("gone", mock.Mock(side_effect=exceptions.VMGone("x")))

    def test_a_hung_call_marks_unavailable_fails_fast_and_recovers_when_it_returns(self):
        release = threading.Event()
        with self.assertRaises(exceptions.HypervisorUnavailable):
            self.dog.call("vms", release.wait)
        self.assertFalse(self.dog.available)
        never_run = mock.Mock()
        with self.assertRaises(exceptions.HypervisorUnavailable) as cm:
            self.dog.call("cpu_times", never_run)
        self.assertIn("vms has not returned", str(cm.exception))
        never_run.assert_not_called()
        release.set()
        wait_until(lambda: self.dog.available)
        self.assertEqual("ok", self.dog.call("again", lambda: "ok"))
        self.assertEqual(1, self.dog.timeouts)

    def test_a_slow_sweep_is_late_not_down_and_its_result_is_taken_when_back(self):
        dog = watchdog_mod.Watchdog(5.0, name="test", sweep_wait_s=0.05)
        self.addCleanup(dog.close)
        release = threading.Event()
        with self.assertRaises(exceptions.SampleLate):
            dog.sweep("vms", lambda: release.wait() and {"a": 1})
        self.assertTrue(dog.available)
        with self.assertRaises(exceptions.SampleLate):
            dog.sweep("vms", mock.Mock())        # still running: no second call
        release.set()
        wait_until(lambda: dog._late.done.is_set())
        self.assertEqual({"a": 1}, dog.sweep("vms", mock.Mock(side_effect=AssertionError)))
        self.assertEqual("fresh", dog.sweep("vms", lambda: "fresh"))
        self.assertEqual(0, dog.timeouts)
        self.assertEqual(1, dog.late_sweeps)

    def test_a_sweep_late_beyond_the_call_timeout_marks_the_hypervisor_unavailable(self):
        dog = watchdog_mod.Watchdog(0.2, name="test", sweep_wait_s=0.05)
        self.addCleanup(dog.close)
        release = threading.Event()
        self.addCleanup(release.set)
        with self.assertRaises(exceptions.SampleLate):
            dog.sweep("cpu_times", release.wait)
        time.sleep(0.25)
        with self.assertRaises(exceptions.HypervisorUnavailable):
            dog.sweep("cpu_times", mock.Mock())
        self.assertFalse(dog.available)

    def test_another_call_goes_aside_while_a_sweep_is_late(self):
        dog = watchdog_mod.Watchdog(5.0, name="test", sweep_wait_s=0.05)
        self.addCleanup(dog.close)
        release = threading.Event()
        self.addCleanup(release.set)
        with self.assertRaises(exceptions.SampleLate):
            dog.sweep("vms", release.wait)
        self.assertEqual("restored", dog.call("restore_knobs", lambda: "restored"))
        self.assertFalse(release.is_set())
        self.assertTrue(dog.available)

    def test_a_call_aside_that_overruns_holds_every_call_until_it_returns(self):
        # Its write may land at any time: a restore must not go first.
        dog = watchdog_mod.Watchdog(0.1, name="test", sweep_wait_s=0.02)
        self.addCleanup(dog.close)
        sweep_done, write_done = threading.Event(), threading.Event()
        self.addCleanup(sweep_done.set)
        self.addCleanup(write_done.set)
        with self.assertRaises(exceptions.SampleLate):
            dog.sweep("vms", sweep_done.wait)
        with self.assertRaises(exceptions.HypervisorUnavailable):
            dog.call("set_knobs", write_done.wait)
        self.assertFalse(dog.available)
        sweep_done.set()
        with self.assertRaises(exceptions.HypervisorUnavailable):
            dog.call("restore_knobs", lambda: "restored")
        write_done.set()
        wait_until(lambda: dog.available)
        self.assertEqual("restored", dog.call("restore_knobs", lambda: "restored"))

    def test_guarded_forwards_the_declared_capabilities_and_guards_methods(self):
        caps = frozenset({hyp_base.Capability.RUN_DELAY, hyp_base.Capability.GENERATION})
        inner = mock.Mock(capabilities=caps, generation=7, url="x")
        inner.vms.return_value = {}
        guarded = watchdog_mod.Guarded(inner, self.dog)
        self.assertEqual(caps, guarded.capabilities)
        self.assertEqual(7, guarded.generation)
        self.assertEqual({}, guarded.vms())
        self.assertEqual(1, inner.vms.call_count)

    def test_guarded_refuses_a_name_it_was_not_given(self):
        # The inner adapter has it; the proxy forwards its interfaces only.
        inner = mock.Mock(capabilities=frozenset(), url="x")
        guarded = watchdog_mod.Guarded(inner, self.dog)
        for name in ("url", "latency_problems", "connection", "attach_channels"):
            with self.assertRaises(AttributeError):
                getattr(guarded, name)
        inner.latency_problems.assert_not_called()

    def test_guarded_forwards_no_name_by_getattr(self):
        # Forwarding any name made every capability probe true through it.
        self.assertNotIn("__getattr__", vars(watchdog_mod.Guarded))
        self.assertNotIn("__getattribute__", vars(watchdog_mod.Guarded))

    def test_guarded_has_every_method_of_the_interfaces(self):
        names = {name for cls in (hyp_base.Hypervisor, fabric_base.FabricMonitor)
                 for name, value in vars(cls).items()
                 if callable(value) and not name.startswith("_")}
        names |= {"cpu_times_rows", "delay_times_rows", "original_updates", "counters_rows"}
        self.assertEqual(set(), {name for name in names
                                 if not callable(vars(watchdog_mod.Guarded).get(name))})


#: Poll a predicate until true; AssertionError if not within 10 s.
wait_until = functools.partial(machine.wait_for, timeout=10.0, step=0.01,
                               what="condition not met")


class _BlockingBoard:
    def __init__(self):
        self.gate = threading.Event()
        self.sent = []

    def publish(self, report):
        self.gate.wait(10)
        self.sent.append(report)

    def count(self):
        return 1

    def close(self):
        pass


class PublisherTest(unittest.TestCase):

    def test_a_slow_board_gets_the_latest_report_never_a_queue(self):
        board = _BlockingBoard()
        pub = publisher_mod.Publisher(board, background=True)
        pub.offer("r1")
        wait_until(lambda: pub._busy)
        for r in ("r2", "r3", "r4"):
            pub.offer(r)          # returns at once although the board is blocked
        board.gate.set()
        self.assertTrue(pub.flush(10))
        pub.close()
        self.assertEqual(["r1", "r4"], board.sent)
        self.assertEqual(2, pub.skipped)

    def test_a_board_that_fails_is_counted_and_logged_once(self):
        board = mock.Mock()
        board.publish.side_effect = exceptions.BoardUnavailable("down")
        pub = publisher_mod.Publisher(board, background=False)
        report = mock.Mock(epoch=1)
        with self.assertLogs("resex_agent.publisher", logging.WARNING) as logs:
            for _ in range(3):
                pub.offer(report)
        self.assertEqual(1, len(logs.output))
        self.assertEqual(3, pub.failures)

    def test_a_board_that_cannot_open_at_start_opens_later(self):
        attempts = []

        def opener():
            attempts.append(1)
            if len(attempts) < 3:
                raise exceptions.BoardUnavailable("etcd down")
            return mock.Mock()
        now = [0.0]
        board = publisher_mod.DeferredBoard(opener, retry_s=5.0, clock=lambda: now[0])
        for _ in range(2):
            with self.assertRaises(exceptions.BoardUnavailable):
                board.publish("r")
        self.assertEqual(1, len(attempts), "retried before retry_s")
        now[0] = 5.0
        with self.assertRaises(exceptions.BoardUnavailable):
            board.publish("r")
        now[0] = 10.0
        board.publish("r")
        self.assertTrue(board.is_open)

    def test_a_corrupt_store_at_open_is_board_unavailable_not_a_crash(self):
        board = publisher_mod.DeferredBoard(mock.Mock(side_effect=OSError("garbage")))
        with self.assertRaises(exceptions.BoardUnavailable):
            board.count()

    def test_a_url_that_can_never_work_is_still_a_config_error(self):
        board = publisher_mod.DeferredBoard(
            mock.Mock(side_effect=exceptions.ConfigError("unknown scheme")))
        with self.assertRaises(exceptions.ConfigError):
            board.open()


class JournalWriteFailureTest(TmpDirCase):

    def broken_journal(self):
        state = os.path.join(self.dir, "state")
        journal = journal_mod.Journal(os.path.join(state, "journal.json"))
        with open(state, "w"):
            pass                  # the state directory is now a file: every write fails
        return journal, state

    def test_originals_are_held_in_memory_counted_and_logged_once(self):
        journal, _state = self.broken_journal()
        with self.assertLogs("resex_agent.journal", logging.ERROR) as logs:
            self.assertTrue(journal.remember("a", {"cap": 0, "weight": 256}))
            self.assertTrue(journal.remember("b", {"cap": 0, "weight": 256}))
        self.assertEqual(1, len(logs.output), "throttled to one line")
        self.assertIn("held in memory", logs.output[0])
        self.assertEqual(2, journal.write_errors)
        self.assertEqual({"a", "b"}, journal.unsaved)
        self.assertIn("a", journal)

    def test_a_clean_stop_restores_from_memory_and_a_flush_saves_once_fixed(self):
        journal, state = self.broken_journal()
        journal.remember("a", {"cap": 0, "weight": 256})
        os.unlink(state)
        self.assertTrue(journal.flush())
        with open(journal.path) as f:
            self.assertIn("a", json.load(f)["originals"])
        self.assertEqual(set(), journal.unsaved)
        hyp = mock.Mock()
        self.assertEqual({}, journal.restore_all(hyp))
        hyp.restore_knobs.assert_called_once_with("a", {"cap": 0, "weight": 256})

    def test_an_unreadable_journal_says_how_to_recover_from_the_persistent_definitions(self):
        path = os.path.join(self.dir, "journal.json")
        for content in ("", "{not json", "[]"):
            with open(path, "w") as f:
                f.write(content)
            with self.assertRaises(journal_mod.JournalCorrupt) as cm:
                journal_mod.Journal(path)
            self.assertIn("schedinfo --config", str(cm.exception))
            self.assertNotIn("move it away", str(cm.exception))


class EpochTest(unittest.TestCase):

    def test_the_host_report_is_built_once_per_epoch_and_handed_to_metrics(self):
        records = []
        agent, _sim = test_loop.build(
            duration=3.0, metrics=mock.Mock(
                spec=["observe_interval", "observe_epoch", "start", "close"],
                observe_epoch=records.append))
        real = report_mod.HostReport.from_summary
        with mock.patch.object(report_mod.HostReport, "from_summary",
                               side_effect=real) as built:
            agent.run()
        self.assertEqual(agent.epochs, built.call_count)
        self.assertEqual(agent.epochs, len(records))
        self.assertIs(agent.last_report, records[-1].report)
        self.assertAlmostEqual(report_mod.congestion_index(records[-1].report),
                               records[-1].congestion_index_pct)

    def test_the_epoch_line_names_the_top_vms_and_counts_the_rest(self):
        agent, _sim = test_loop.build(duration=1.0)
        with mock.patch.object(loop, "SUMMARY_TOP", 1), \
                self.assertLogs("resex_agent.loop", logging.INFO) as logs:
            agent.run()
        line = [m for m in logs.output if "resex_agent.loop:epoch " in m][0]
        self.assertIn("vm2m cap", line)        # the interferer, the most throttled
        self.assertNotIn("vm64k cap", line)
        self.assertIn("(+1 more)", line)

    def test_health_counters_reach_the_endpoint(self):
        sink = metrics_mod.PrometheusMetrics("127.0.0.1", 0)
        summary = market_mod.EpochSummary(epoch=1, intervals=10, vms=(), link_utilisation=0.1,
                                          cpu_price=1.0, io_price=1.0,
                                          latency_inflation_pct=0.0)
        health = loop.Health(publish_failures=3, journal_write_errors=2, journal_unsaved=1,
                             hypervisor_available=False, held_intervals=7,
                             intake_rejected={"evicted": 4}, remote_victims=2,
                             remote_claims_ignored={"contradicted": 5, "expired": 1},
                             link_factors={"rack7-up": 0.25})
        sink.observe_epoch(loop.EpochRecord(1, 0.0, summary, None, 12.5, 10, health))
        text = prometheus_client.generate_latest(sink.registry).decode()
        for line in ('resex_board_publish_failures_total 3.0',
                     'resex_journal_write_errors_total 2.0', 'resex_journal_unsaved_vms 1.0',
                     'resex_hypervisor_available 0.0', 'resex_loop_held_intervals_total 7.0',
                     'resex_intake_rejected_total{reason="evicted"} 4.0',
                     'resex_congestion_index_ratio 0.125', 'resex_remote_victims 2.0',
                     'resex_remote_claims_ignored_total{reason="contradicted"} 5.0',
                     'resex_remote_claims_ignored_total{reason="expired"} 1.0',
                     'resex_shared_link_limit_factor{link="rack7-up"} 0.25'):
            self.assertIn(line, text)


class CliTest(TmpDirCase):

    def test_unknown_options_and_sections_are_named_with_the_nearest_known_name(self):
        path = os.path.join(self.dir, "agent.conf")
        with open(path, "w") as f:
            f.write("[agent]\ndeadband = 3\ndeadband_pct = 2\n[market]\npolicy = io_shares\n"
                    "[libvrit]\nconnection_uri = x\n[DEFAULT]\ndebug = true\n")
        conf = resex_agent.make_conf(["--config-file", path])
        found = config_file.unknown(conf)
        self.assertEqual([(path, "agent", "deadband", "deadband_pct"),
                          (path, "libvrit", None, "libvirt")],
                         [(u.path, u.group, u.option, u.nearest) for u in found])
        self.assertEqual("unknown section [libvrit] in agent.conf (did you mean libvirt?)",
                         str(found[1]))

    def test_a_config_path_that_is_a_directory_is_a_usage_error_without_traceback(self):
        with mock.patch("sys.stderr") as err:
            self.assertEqual(resex_agent.EXIT_USAGE, resex_agent.main(["--config-file", self.dir]))
        written = "".join(c.args[0] for c in err.write.call_args_list)
        self.assertIn("Is a directory", written)
        self.assertNotIn("Traceback", written)
