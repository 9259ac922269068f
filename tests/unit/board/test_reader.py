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

"""The scheduler-side reader: one shared snapshot, fresh by ts, kept through outages."""

import logging
import os
import threading
import time
import unittest

from resex_libvirt import board as board_mod
from resex_libvirt.board import reader as reader_mod
from tests.unit.board import reports

NOW = 1_800_000_000.0


class ReaderTest(unittest.TestCase):

    def setUp(self):
        self.path, self.url, self.board = reports.sqlite_board(self)
        self.now = NOW
        self.reader = reader_mod.BoardReader(self.url, max_age=30, refresh_interval=3600,
                                             load_timeout=10, clock=lambda: self.now)
        self.addCleanup(self.reader.stop)

    def test_start_returns_after_the_first_load(self):
        self.board.publish(reports.make("c1", ts=NOW))
        self.reader.start()
        self.assertTrue(self.reader.running)
        self.assertEqual("c1", self.reader.get("c1").host)
        self.assertEqual(NOW, self.reader.loaded_at)

    def test_the_thread_refreshes_the_snapshot_by_itself(self):
        reader = reader_mod.BoardReader(self.url, max_age=30, refresh_interval=0.05,
                                        load_timeout=10, clock=lambda: self.now)
        self.addCleanup(reader.stop)
        reader.start()
        self.assertIsNone(reader.get("late"))
        self.board.publish(reports.make("late", ts=NOW))
        deadline = time.monotonic() + 30
        while reader.get("late") is None and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual("late", reader.get("late").host)

    def test_records_older_than_max_age_are_dropped_at_read_time(self):
        self.board.publish(reports.make("old", ts=NOW - 31))
        self.board.publish(reports.make("new", ts=NOW - 29))
        self.reader.refresh()
        self.assertIsNone(self.reader.get("old"))
        self.assertIsNotNone(self.reader.get("new"))
        self.assertEqual({"new"}, set(self.reader.snapshot()))
        # The same snapshot, read later: "new" has aged out too, no refresh needed.
        self.now += 2
        self.assertIsNone(self.reader.get("new"))
        self.assertEqual({}, self.reader.snapshot())

    def test_an_unknown_host_is_none(self):
        self.reader.refresh()
        self.assertIsNone(self.reader.get("nowhere"))

    def test_the_last_good_snapshot_is_served_through_an_outage_and_logged_once(self):
        self.board.publish(reports.make("c1", ts=NOW))
        self.assertTrue(self.reader.refresh())
        # The outage: the file is replaced by garbage (a real SQLite error).
        self.board.close()
        self.reader._board.close()
        self.reader._board = None
        os.replace(self.path, self.path + ".bak")
        for suffix in ("-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                os.unlink(self.path + suffix)
        with open(self.path, "wb") as f:
            f.write(b"garbage" * 1000)
        with self.assertLogs(reader_mod.LOG, logging.WARNING) as logs:
            self.assertFalse(self.reader.refresh())
            self.assertFalse(self.reader.refresh())
            reader_mod.LOG.warning("marker")
        self.assertEqual(2, len(logs.records))  # one outage line + the marker
        self.assertTrue(self.reader.failing)
        self.assertEqual("c1", self.reader.get("c1").host)
        # Recovery.
        os.replace(self.path + ".bak", self.path)
        with self.assertLogs(reader_mod.LOG, logging.INFO) as logs:
            self.assertTrue(self.reader.refresh())
        self.assertIn("is back", logs.output[0])
        self.assertFalse(self.reader.failing)

    def test_a_board_that_cannot_open_leaves_the_reader_empty_not_raising(self):
        reader = reader_mod.BoardReader("redis://nowhere", load_timeout=5)
        self.addCleanup(reader.stop)
        with self.assertLogs(reader_mod.LOG, logging.WARNING):
            reader.start()
        self.assertIsNone(reader.get("c1"))
        self.assertEqual({}, reader.snapshot())

    def test_stop_ends_the_thread(self):
        self.reader.start()
        thread = self.reader._thread
        self.reader.stop()
        self.assertFalse(thread.is_alive())
        self.assertFalse(self.reader.running)

    def test_one_shared_reader_per_url(self):
        self.addCleanup(reader_mod.stop_all)
        a = reader_mod.shared(self.url, max_age=30, refresh_interval=3600)
        b = reader_mod.shared(self.url, max_age=45)
        self.assertIs(a, b)
        self.assertEqual(45.0, a.max_age)
        self.assertTrue(a.running)
        reader_mod.stop_all()
        self.assertFalse(a.running)
        self.assertIsNot(a, reader_mod.shared(self.url))

    def test_a_board_that_does_not_exist_yet_is_picked_up_when_it_appears(self):
        url = "sqlite://" + self.path + ".later"
        reader = reader_mod.BoardReader(url, max_age=30, refresh_interval=3600,
                                        board_opts={"create": False}, clock=lambda: self.now)
        self.addCleanup(reader.stop)
        with self.assertLogs(reader_mod.LOG, logging.WARNING):
            self.assertFalse(reader.refresh())
        self.assertFalse(os.path.exists(self.path + ".later"))
        with board_mod.open_board(url) as board:
            board.publish(reports.make("c1", ts=NOW))
        self.assertTrue(reader.refresh())
        self.assertEqual("c1", reader.get("c1").host)


class FollowingReaderTest(unittest.TestCase):
    """The cache kept by following: admission state per host, safe under concurrent reads."""

    def setUp(self):
        _path, self.url, self.board = reports.sqlite_board(self)

    def test_one_noisy_epoch_does_not_close_a_quiet_host(self):
        reader = reader_mod.BoardReader(self.url, max_age=600, tau=20.0, hysteresis=0.3,
                                        clock=lambda: NOW + 100)
        self.addCleanup(reader.stop)
        for ts, util in ((NOW, 0.02), (NOW + 1, 0.5), (NOW + 2, 0.02)):
            self.board.publish(reports.make("c1", ts=ts, link_utilisation=util))
            reader.refresh()
        entry = reader.entry("c1")
        # The raw index of the second epoch was 100 %; smoothed over 20 s it stayed under 10.
        self.assertLess(entry.latched, 10.0)
        self.assertFalse(entry.admission.refuses(10.0))

    def test_the_follower_applies_changes_without_refresh_calls(self):
        reader = reader_mod.BoardReader(self.url, max_age=600, refresh_interval=0.05,
                                        load_timeout=10)
        self.addCleanup(reader.stop)
        reader.start()
        self.board.publish(reports.make("c1", link_utilisation=0.3))
        deadline = time.monotonic() + 30
        while reader.get("c1") is None and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(0.3, reader.get("c1").link_utilisation)

    def test_requests_read_while_the_follower_writes(self):
        """Requests call get/snapshot/fresh while batches are applied: no error, no mix-up."""
        reader = reader_mod.BoardReader(self.url, max_age=1e9)
        hosts = ["h%03d" % i for i in range(300)]
        errors = []
        stop = threading.Event()

        def request_thread():
            try:
                while not stop.is_set():
                    for h in hosts[::7]:
                        rec = reader.get(h)
                        if rec is not None and rec.host != h:
                            errors.append((h, rec.host))
                    entries, _ = reader.fresh()
                    for h in hosts[::5]:
                        e = entries.get(h)
                        if e is not None and e.report.host != h:
                            errors.append((h, e.report.host))
                    reader.snapshot()
            except Exception as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)

        threads = [threading.Thread(target=request_thread) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            for round_ in range(60):
                batch = {h: reports.make(h, ts=NOW + round_) for h in hosts[round_ % 3::3]}
                if round_ % 10 == 0:
                    reader._apply(True, {h: reports.make(h, ts=NOW + round_) for h in hosts})
                else:
                    batch[hosts[round_]] = None
                    reader._apply(False, batch)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        self.assertEqual([], errors)
