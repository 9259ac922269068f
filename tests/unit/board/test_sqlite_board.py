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

"""The SQLite board, on a temporary file."""

import os
import sqlite3
import tempfile
import threading
import unittest

from resex_libvirt import board as board_mod
from resex_libvirt.board import sqlite as sqlite_board
from resex_libvirt import exceptions
from tests.unit.board import reports


class SQLiteBoardTest(unittest.TestCase):

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="resex-board-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.path = os.path.join(self.dir, "sub", "board.sqlite")
        self.url = "sqlite://" + self.path
        self.board = board_mod.open_board(self.url, ttl=3600)
        self.addCleanup(self.board.close)

    def test_open_board_picks_sqlite_by_scheme_and_creates_the_directory(self):
        self.assertIsInstance(self.board, sqlite_board.SQLiteBoard)
        self.assertTrue(os.path.exists(self.path))

    def test_the_url_path_is_the_absolute_file_path(self):
        self.assertEqual("/var/lib/resex/b.sqlite",
                         sqlite_board.path_of("sqlite:///var/lib/resex/b.sqlite"))
        self.assertEqual("/var/lib/resex/b.sqlite",
                         sqlite_board.path_of("sqlite:////var/lib/resex/b.sqlite"))
        for bad in ("sqlite://host/x", "sqlite:///", "file:///x"):
            self.assertRaises(exceptions.ConfigError, sqlite_board.path_of, bad)

    def test_wal_normal_sync_and_a_journal_size_limit_are_set(self):
        conn = self.board._conn
        self.assertEqual("wal", conn.execute("PRAGMA journal_mode").fetchone()[0])
        self.assertEqual(1, conn.execute("PRAGMA synchronous").fetchone()[0])  # NORMAL
        self.assertEqual(sqlite_board.JOURNAL_SIZE_LIMIT,
                         conn.execute("PRAGMA journal_size_limit").fetchone()[0])

    def test_a_publish_replaces_the_hosts_row(self):
        self.board.publish(reports.make("c1", link_utilisation=0.1))
        self.board.publish(reports.make("c2"))
        self.board.publish(reports.make("c1", link_utilisation=0.7))
        snap = self.board.snapshot()
        self.assertEqual({"c1", "c2"}, set(snap))
        self.assertEqual(0.7, snap["c1"].link_utilisation)
        self.assertEqual(2, self.board.count())

    def test_another_process_sees_the_published_report(self):
        self.board.publish(reports.make("c1", sensitive_vms=2))
        with board_mod.open_board(self.url) as reader:
            self.assertEqual(2, reader.snapshot()["c1"].sensitive_vms)

    def test_corrupt_and_misfiled_rows_are_dropped_not_raised(self):
        self.board.publish(reports.make("good"))
        with sqlite3.connect(self.path) as conn:
            conn.execute("INSERT INTO host_report (host, ts, record) "
                         "VALUES ('bad', 1, '{\"version\": 99}')")
            conn.execute("INSERT INTO host_report (host, ts, record) "
                         "VALUES ('nan', 1, '{\"ts\": NaN}')")
            conn.execute("INSERT INTO host_report (host, ts, record) "
                         "VALUES ('other', 1, ?)",
                         (reports.make("good").to_json(),))
        self.assertEqual({"good"}, set(self.board.snapshot()))
        self.assertEqual(4, self.board.count())

    def test_rows_older_than_the_ttl_are_collected_at_publish(self):
        now = 1_000_000.0
        board = sqlite_board.SQLiteBoard(self.url, ttl=60, clock=lambda: now)
        self.addCleanup(board.close)
        board.publish(reports.make("gone", ts=now - 61))
        board.publish(reports.make("kept", ts=now - 59))
        board.publish(reports.make("new", ts=now))
        self.assertEqual({"kept", "new"}, set(board.snapshot()))

    def test_threads_may_share_one_board(self):
        errors = []

        def publish(i):
            try:
                for n in range(20):
                    self.board.publish(reports.make("c%d" % i, epoch=n))
                    self.board.snapshot()
            except Exception as exc:  # noqa: B902 - collected for the assertion
                errors.append(exc)

        threads = [threading.Thread(target=publish, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual([], errors)
        snap = self.board.snapshot()
        self.assertEqual(8, len(snap))
        self.assertEqual({19}, {r.epoch for r in snap.values()})

    def test_a_closed_board_raises_board_unavailable(self):
        self.board.close()
        self.assertRaises(exceptions.BoardUnavailable, self.board.snapshot)
        self.assertRaises(exceptions.BoardUnavailable, self.board.publish, reports.make())

    def test_a_file_that_is_not_a_database_becomes_board_unavailable(self):
        path = os.path.join(self.dir, "garbage.sqlite")
        with open(path, "wb") as f:
            f.write(b"this is not a database" * 100)
        with self.assertRaises(exceptions.BoardUnavailable) as ctx:
            board_mod.open_board("sqlite://" + path).snapshot()
        self.assertIsInstance(ctx.exception.__cause__, sqlite3.Error)

    def test_an_unknown_scheme_is_a_config_error(self):
        self.assertRaises(exceptions.ConfigError, board_mod.open_board, "redis://x")
        self.assertRaises(exceptions.ConfigError, board_mod.open_board, "")

    def test_credentials_never_reach_logs(self):
        self.assertEqual("etcd3+https://etcd.example:2379/x",
                         board_mod.redact("etcd3+https://user:secret@etcd.example:2379/x"))

    def test_an_unchanged_record_is_not_parsed_again(self):
        self.board.publish(reports.make("c1"))
        self.board.publish(reports.make("c2"))
        first = self.board.snapshot()
        self.board.publish(reports.make("c2", link_utilisation=0.4))
        second = self.board.snapshot()
        self.assertIs(first["c1"], second["c1"])
        self.assertEqual(0.4, second["c2"].link_utilisation)

    def test_a_corrupt_record_replaced_by_a_valid_one_is_picked_up(self):
        with sqlite3.connect(self.path) as conn:
            conn.execute("INSERT INTO host_report (host, ts, record) "
                         "VALUES ('c1', 1, '{}')")
        self.assertEqual({}, self.board.snapshot())
        self.assertEqual({}, self.board.snapshot())
        self.board.publish(reports.make("c1"))
        self.assertEqual({"c1"}, set(self.board.snapshot()))


class IncrementalReadTest(unittest.TestCase):
    """A follower reads everything once, then only the rows changed since."""

    def setUp(self):
        self.path, _url, self.board = reports.sqlite_board(self)

    def test_only_rows_changed_since_the_last_read_are_read_again(self):
        for host in ("a", "b", "c"):
            self.board.publish(reports.make(host))
        rows, last = self.board.changes(-1)
        self.assertEqual(["a", "b", "c"], [h for h, _ in rows])
        self.assertEqual(([], last), self.board.changes(last))
        self.board.publish(reports.make("b", link_utilisation=0.3))
        rows, newer = self.board.changes(last)
        self.assertEqual(["b"], [h for h, _ in rows])
        self.assertGreater(newer, last)

    def test_follow_yields_a_full_batch_then_changes(self):
        self.board.publish(reports.make("a"))
        stop = threading.Event()
        batches = self.board.follow(stop, 0.0)
        full, recs = next(batches)
        self.assertEqual((True, ["a"]), (full, sorted(recs)))
        self.board.publish(reports.make("b"))
        full, recs = next(batches)
        self.assertEqual((False, ["b"]), (full, sorted(recs)))

    def test_a_board_of_an_older_release_gets_the_counter_and_old_writers_move_it(self):
        path = self.path + ".old"
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE host_report (host TEXT PRIMARY KEY, ts REAL NOT NULL, "
                         "record TEXT NOT NULL)")
            conn.execute("INSERT INTO host_report VALUES ('old', 1, ?)",
                         (reports.make("old").to_json(),))
        board = board_mod.open_board("sqlite://" + path, create=False)
        self.addCleanup(board.close)
        rows, last = board.changes(-1)
        self.assertEqual(["old"], [h for h, _ in rows])
        # An agent of the older release upserts without knowing the column.
        with sqlite3.connect(path) as conn:
            conn.execute("INSERT INTO host_report (host, ts, record) "
                         "VALUES ('old', 2, ?) "
                         "ON CONFLICT (host) DO UPDATE SET ts = excluded.ts, "
                         "record = excluded.record", (reports.make("old", ts=2).to_json(),))
        rows, _ = board.changes(last)
        self.assertEqual(["old"], [h for h, _ in rows])
