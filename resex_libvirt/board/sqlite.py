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

"""The SQLite price board: one file, one row per host (the all-in-one default).

``sqlite:///var/lib/resex/board.sqlite``: the URL's path is the file's
absolute path, as in ``file://`` URLs (``sqlite:////abs`` is accepted too).

Settings, and why (https://www.sqlite.org/pragma.html, https://www.sqlite.org/wal.html):

* ``journal_mode=WAL``: the scheduler reads while the agent writes, without
  blocking each other (readers see the last committed snapshot).
* ``synchronous=NORMAL``: in WAL mode a commit is durable at the next
  checkpoint, never corrupt; losing the last second's report on power loss
  is harmless (the next epoch rewrites it), and it saves an fsync a write.
* ``journal_size_limit``: without it the WAL file keeps its high-water size;
  We measured 347 MB under load. Truncated to this after checkpoints.
* ``busy_timeout`` (the ``timeout`` option): how long a call waits for
  another process's write lock before failing with ``BoardUnavailable``.

``create=False`` (readers: the scheduler, ``resex-board``) never creates
the file: a missing board is ``BoardUnavailable``, not an empty one.

One connection per board object, used under a lock (``check_same_thread``
off), so a board is safe to share between native threads. Rows older than
``ttl`` seconds (by their ``ts``) are deleted at publish time: the garbage
collection etcd does with leases.

**Incremental reads.** Every row carries ``seq``, a board-wide counter that
triggers raise on every insert and every update of a record (so an agent of
an older release, which does not know the column, still moves it), kept in
the one-row table ``board_seq``. A scheduler reads everything once, then
only ``WHERE seq > last`` every interval, at most every 0.5 s
(:meth:`SQLiteBoard.follow`): one indexed range scan of the rows changed
since, whatever the fleet's size.
Commits are serialised by SQLite's write lock, so ``seq`` order is commit
order and no change is skipped. Rows deleted by the ``ttl`` collection are
not reported; they are older than any scheduler's ``max_age`` anyway and
age out of its cache. A board file of an older release is given the column
and triggers when opened.
"""

import logging
import os
import sqlite3
import threading
import time
import urllib.parse

from resex_libvirt.board import backend
from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)

#: Longest wait between two reads of the changed rows by a follower, seconds.
MAX_POLL_INTERVAL = 0.5

#: WAL size kept after a checkpoint, bytes.
JOURNAL_SIZE_LIMIT = 4 * 1024 * 1024

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS host_report ("
    " host TEXT PRIMARY KEY, ts REAL NOT NULL, record TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS host_report_ts ON host_report (ts)",
)

_BUMP = ("BEGIN UPDATE board_seq SET seq = seq + 1 WHERE id = 0; "
         "UPDATE host_report SET seq = (SELECT seq FROM board_seq WHERE id = 0) "
         "WHERE host = NEW.host; END")

#: The change counter (added to boards of older releases when opened).
_SEQ_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS board_seq ("
    " id INTEGER PRIMARY KEY CHECK (id = 0), seq INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO board_seq (id, seq) VALUES (0, 0)",
    "CREATE INDEX IF NOT EXISTS host_report_seq ON host_report (seq)",
    "CREATE TRIGGER IF NOT EXISTS host_report_seq_insert AFTER INSERT ON host_report "
    + _BUMP,
    "CREATE TRIGGER IF NOT EXISTS host_report_seq_update "
    "AFTER UPDATE OF ts, record ON host_report " + _BUMP,
)


#: A row as stored bytes: a TEXT value that is not UTF-8 (a writer other than
#: :meth:`SQLiteBoard.publish`) makes sqlite3 raise on the whole query, which
#: would blind the reader to every host; as bytes, only that row is dropped.
_ROW = "CAST(host AS BLOB), CAST(record AS BLOB)"


def _rows(rows):
    """``(host, record)`` of :data:`_ROW` rows; a host that is not UTF-8 reads with U+FFFD."""
    return [(host.decode("utf-8", "replace") if type(host) is bytes else host, record)
            for host, record, *_ in rows]


def _ensure_seq(conn):
    """Add the change counter to the board if it lacks it (idempotent)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(host_report)")}
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        if "seq" not in columns:
            conn.execute("ALTER TABLE host_report ADD COLUMN seq INTEGER NOT NULL DEFAULT 0")
        for stmt in _SEQ_SCHEMA:
            conn.execute(stmt)


def path_of(url):
    """The file path of a ``sqlite:///path`` URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc or not parts.path or parts.path == "/":
        raise exceptions.ConfigError(
            "a SQLite board URL is sqlite:///absolute/path, got %r" % url)
    return "/" + parts.path.lstrip("/")


class SQLiteBoard(backend.Board):
    """A board in one SQLite file (see the module docstring)."""

    def __init__(self, url, timeout=2.0, ttl=3600.0, create=True, clock=time.time,
                 **_ignored):
        self.url = url
        self.path = path_of(url)
        self.timeout = float(timeout)
        self.ttl = float(ttl) if ttl else None
        self._clock = clock
        self._lock = threading.Lock()
        self._decoder = backend.RecordDecoder(self.path)
        self._conn = None
        try:
            if create:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                target, uri = self.path, False
            else:
                # A reader (scheduler, CLI) must not create an empty board.
                target = "file:%s?mode=rw" % urllib.parse.quote(self.path)
                uri = True
            conn = sqlite3.connect(target, timeout=self.timeout, isolation_level=None,
                                   check_same_thread=False, uri=uri)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA journal_size_limit=%d" % JOURNAL_SIZE_LIMIT)
            for stmt in _SCHEMA:
                conn.execute(stmt)
            _ensure_seq(conn)
        except (sqlite3.Error, OSError) as exc:
            raise exceptions.BoardUnavailable(
                "cannot open the SQLite board %s: %s" % (self.path, exc)) from exc
        self._conn = conn

    def _run(self, what, fn):
        with self._lock:
            if self._conn is None:
                raise exceptions.BoardUnavailable("the SQLite board %s is closed" % self.path)
            try:
                return fn(self._conn)
            except sqlite3.Error as exc:
                raise exceptions.BoardUnavailable(
                    "SQLite board %s: %s failed: %s" % (self.path, what, exc)) from exc

    def publish(self, report):
        record = report.to_json()

        def write(conn):
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    "INSERT INTO host_report (host, ts, record) VALUES (?, ?, ?) "
                    "ON CONFLICT (host) DO UPDATE SET ts = excluded.ts, record = excluded.record",
                    (report.host, report.ts, record))
                if self.ttl:
                    conn.execute("DELETE FROM host_report WHERE ts < ?",
                                 (self._clock() - self.ttl,))

        self._run("publish", write)

    def snapshot(self):
        rows = self._run("snapshot", lambda conn: conn.execute(
            "SELECT " + _ROW + " FROM host_report").fetchall())
        return self._decoder.decode(_rows(rows))

    def changes(self, since):
        """``(rows, last)``: the ``(host, record)`` rows changed after ``seq`` ``since``.

        ``record`` is the stored bytes (the decoder checks they are UTF-8).
        """
        rows = self._run("changes", lambda conn: conn.execute(
            "SELECT " + _ROW + ", seq FROM host_report WHERE seq > ? ORDER BY seq",
            (since,)).fetchall())
        last = rows[-1][2] if rows else since
        return _rows(rows), last

    def follow(self, stop, interval):
        """Everything once, then the rows changed since the last read.

        Polled every ``interval`` seconds, at most :data:`MAX_POLL_INTERVAL`
        apart: a poll that finds nothing is one indexed lookup.
        """
        rows, last = self.changes(-1)
        yield True, self._decoder.decode(rows)
        while not stop.wait(min(interval, MAX_POLL_INTERVAL)):
            rows, last = self.changes(last)
            if rows:
                yield False, self._decoder.decode_changes(rows)

    def count(self):
        return self._run("count", lambda conn: conn.execute(
            "SELECT COUNT(*) FROM host_report").fetchone()[0])

    def close(self):
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                except sqlite3.Error:
                    LOG.debug("closing the SQLite board %s failed", self.path, exc_info=True)
                self._conn = None
