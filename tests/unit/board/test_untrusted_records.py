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

"""Untrusted board records: readers drop what they cannot use, count it, and never raise.

Any compute node can write the board. ``ParserFuzzTest`` feeds
:meth:`HostReport.from_json` 40 x 250 hostile records
(:mod:`tests.unit.board.hostile`: truncated, NaN, huge numbers, deep nesting,
duplicate keys, non-UTF-8, oversized, wrong types...), 300 arbitrary byte
strings and 400 arbitrary JSON values in a record's fields;
``RegressionTest`` holds one test per crash the fuzzing found;
``DecoderTest`` the drop / count / log contract of the records' decoder;
``SQLiteRowsTest`` rows of every SQLite storage class; ``FollowerTest`` the
scheduler's follower with a record under another host's key. The etcd
backend's decoding is ``test_etcd_decoding.py``. Each bulk example expands a
hypothesis-drawn seed with :class:`random.Random`: a failure is a
reproducible seed.
"""

import json
import logging
import random
import sqlite3
import threading
import time
import unittest
from unittest import mock

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt.board import backend
from resex_libvirt.board import reader as reader_mod
from resex_libvirt.board import report as report_mod
from tests import machine
from tests.unit.board import fuzz_records
from tests.unit.board import hostile
from tests.unit.board import reports

from_json = report_mod.HostReport.from_json
InvalidReport = report_mod.InvalidReport

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats()
    | st.text(max_size=8) | st.sampled_from(["\ud800", "a\udfff", "1.\u00b2", "1.3", " "]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8)
ENTRY_KEYS = st.sampled_from(["project", "vms", "sensitive_vms", "heavy_io_vms", "x"])


def encoded(data):
    """``data`` as a board value: JSON (NaN and lone surrogates escaped as JSON allows)."""
    return json.dumps(data, allow_nan=True).encode("ascii")


class ParserFuzzTest(unittest.TestCase):
    """``from_json`` returns a record every reader can use, or raises InvalidReport."""

    def parse(self, raw, expected=None):
        try:
            rec = from_json(raw)
        except InvalidReport:
            self.assertNotIn(expected, (hostile.VALID, hostile.MISPLACED), raw[:300])
            return None
        self.assertNotEqual(hostile.INVALID, expected, raw[:300])
        fuzz_records.check_report(rec)
        return rec

    @settings(max_examples=40, deadline=None, database=None)
    @given(st.integers(0, 2 ** 64))
    def test_hostile_records_are_rejected_and_valid_ones_accepted(self, seed):
        rng = random.Random(seed)
        for _ in range(250):
            self.parse(*hostile.record(rng, "compute1"))

    @settings(max_examples=300, deadline=None, database=None)
    @given(st.binary(max_size=600))
    def test_any_bytes_give_a_usable_record_or_invalid_report(self, data):
        fuzz_records.one_input(data)

    @settings(max_examples=250, deadline=None, database=None)
    @given(st.sampled_from(hostile.FIELDS + ["zz_newer"]), JSON_VALUES)
    def test_any_json_value_in_any_field(self, field, value):
        data = reports.make().to_dict()
        data[field] = value
        self.parse(encoded(data))

    @settings(max_examples=150, deadline=None, database=None)
    @given(st.lists(st.dictionaries(ENTRY_KEYS, JSON_VALUES, max_size=5) | JSON_VALUES,
                    max_size=4))
    def test_any_projects_entries(self, entries):
        data = reports.make(vms=3).to_dict()
        data["projects"] = entries
        self.parse(encoded(data))


class RegressionTest(unittest.TestCase):
    """One test per defect found: a raise past the board, or a record a reader fails on."""

    def assertRejected(self, raw, fragment):
        with self.assertRaises(InvalidReport) as ctx:
            from_json(raw)
        self.assertIn(fragment, str(ctx.exception))

    def _with(self, field, token):
        data = reports.make().to_dict()
        data[field] = hostile.PLACEHOLDER
        return json.dumps(data).replace(json.dumps(hostile.PLACEHOLDER), token, 1)

    def test_deep_nesting_is_invalid_not_a_recursion_error(self):
        # RecursionError is no ValueError: it went through the decoder, ended
        # the follower, and the next full read met the record again.
        self.assertRejected("[" * 4000 + "]" * 4000, "nested too deeply")
        self.assertRejected(self._with("zz_newer", "[" * 3000 + "]" * 3000),
                            "nested too deeply")
        # Nesting a newer minor version could use is still read.
        self.assertEqual("compute1", from_json(self._with("zz_newer", "[[[{}]]]")).host)

    def test_an_integer_too_large_for_a_float_is_invalid_not_an_overflow_error(self):
        self.assertRejected(self._with("ts", "9" * 400), "ts must be finite")
        self.assertRejected(self._with("cpu_price", "-" + "9" * 400), "cpu_price must be finite")
        self.assertRejected(self._with("ts", "1" + "0" * 4400), "not JSON")

    def test_a_version_in_unicode_digits_is_malformed_not_a_value_error(self):
        # "\u00b2".isdigit() is true and int("\u00b2") raises ValueError.
        self.assertRejected(self._with("version", '"1.\\u00b2"'), "malformed report version")
        self.assertRejected(self._with("version", '"\\u00b9.3"'), "malformed report version")
        self.assertRejected(self._with("version", '"\\u0661.\\u0663"'),
                            "malformed report version")

    def test_counts_past_two_to_the_53_are_invalid(self):
        # The weigher computes 0.5 * heavy_io_vms: a 400-digit count raised
        # OverflowError in nova-scheduler's weighing of every request.
        self.assertRejected(self._with("heavy_io_vms", "9" * 400), "heavy_io_vms must be <=")
        self.assertRejected(self._with("vms", str(2 ** 53)), "vms must be <=")
        self.assertEqual(2 ** 53 - 1, from_json(self._with("epoch", str(2 ** 53 - 1))).epoch)
        self.assertRejected(self._with("projects", '[{"project": "p", "vms": %d}]' % 2 ** 60),
                            "vms must be <=")

    def test_latency_inflation_past_a_billion_percent_is_invalid(self):
        # The weigher rounds latched / noise_floor: 1e308 / 0.5 is infinite and
        # round() raised OverflowError.
        self.assertRejected(self._with("latency_inflation_pct", "1e300"),
                            "latency_inflation_pct must be <=")
        rec = from_json(self._with("latency_inflation_pct", "1e9"))
        self.assertEqual(1e9, rec.congestion_index)

    def test_a_lone_surrogate_in_any_text_is_invalid(self):
        # Accepted before, it made every writer of the text fail: the CLI's
        # print, a log file's UTF-8 encoder, SQLite.
        for field in ("host", "agent_version", "state"):
            self.assertRejected(self._with(field, '"a\\ud800"'), "%s is not valid Unicode" % field)
        self.assertRejected(self._with("projects", '[{"project": "\\udc80", "vms": 1}]'),
                            "project ID is not valid Unicode")
        self.assertEqual("h\u00e9", from_json(self._with("host", '"h\\u00e9"')).host)

    def test_an_error_message_never_shows_a_nested_value(self):
        # "got %r" of an array nested past the recursion limit raised
        # RecursionError from the validation itself.
        nested = []
        for _ in range(5000):
            nested = [nested]
        for field in ("host", "ts", "vms", "projects", "version"):
            data = reports.make().to_dict()
            data[field] = nested
            with self.assertRaises(InvalidReport) as ctx:
                report_mod.HostReport.from_dict(data)
            self.assertIn("a JSON array of 1", str(ctx.exception))
        self.assertRejected(self._with("host", json.dumps("x" * 300)), "longer than 255")
        self.assertRejected(self._with("ts", json.dumps("y" * 5000)), "yyy...")

    def test_a_key_given_twice_is_invalid(self):
        # json.loads keeps the last value, other readers the first: a record
        # must mean one thing to every reader.
        text = reports.make("c1").to_json()
        self.assertRejected(text[:-1] + ',"host":"c2"}', "given twice")
        self.assertRejected(self._with("projects", '[{"project": "p", "vms": 1, "vms": 0}]'),
                            "given twice")

    def test_every_reader_since_1_0_still_reads_a_record_this_one_writes(self):
        rec = reports.make("c1", projects=[{"project": "p", "vms": 1}])
        self.assertEqual(rec, from_json(rec.to_json()))
        self.assertEqual(rec, from_json(rec.to_json().encode()))


class DecoderTest(unittest.TestCase):
    """The contract: a bad row is dropped, counted once, logged; never raised."""

    def setUp(self):
        self.decoder = backend.RecordDecoder("test")

    def test_a_record_naming_another_host_is_dropped_counted_and_logged(self):
        genuine = reports.make("c1", sensitive_vms=0).to_json()
        forged = reports.make("c1", sensitive_vms=4).to_json()
        with self.assertLogs(backend.LOG, logging.WARNING) as logs:
            out = self.decoder.decode([("c1", genuine), ("c2", forged)])
        self.assertEqual({"c1"}, set(out))
        self.assertEqual(0, out["c1"].sensitive_vms)
        self.assertEqual((0, 1), (self.decoder.rejected["invalid"],
                                  self.decoder.rejected["misplaced"]))
        self.assertIn("under 'c2'", logs.output[0])
        self.assertIn("names host 'c1'", logs.output[0])

    def test_a_forged_change_reads_as_the_key_having_no_record_and_shadows_nothing(self):
        self.decoder.decode([("c1", reports.make("c1").to_json()),
                             ("c2", reports.make("c2").to_json())])
        forged = reports.make("c1", sensitive_vms=4).to_json()
        with self.assertLogs(backend.LOG, logging.WARNING):
            self.assertEqual({"c2": None}, self.decoder.decode_changes([("c2", forged)]))

    def test_a_bad_record_is_warned_when_it_turns_bad_then_debug_while_it_stays_bad(self):
        good = reports.make("c1").to_json()
        with self.assertLogs(backend.LOG, logging.DEBUG) as logs:
            self.decoder.decode_changes([("c1", "{}")])
            self.decoder.decode_changes([("c1", "[]")])
            self.decoder.decode_changes([("c1", good)])
            self.decoder.decode_changes([("c1", "{")])
        self.assertEqual(["WARNING", "DEBUG", "WARNING"], [r.levelname for r in logs.records])
        self.assertEqual(3, self.decoder.rejected["invalid"])

    def test_an_unchanged_bad_value_is_counted_once(self):
        rows = [("c1", b"\xff"), ("c2", reports.make("c2").to_json())]
        for _ in range(3):
            self.assertEqual({"c2"}, set(self.decoder.decode(rows)))
        self.assertEqual(1, self.decoder.rejected["invalid"])

    def test_a_key_that_names_no_host_is_misplaced(self):
        rows = [(None, reports.make("c1").to_json()), (b"c1", reports.make("c1").to_json()),
                ("c\ufffd", reports.make("c\ufffd").to_json()), (7, reports.make("7").to_json())]
        self.assertEqual({}, self.decoder.decode(rows))
        self.assertEqual(4, self.decoder.rejected["misplaced"])

    def test_an_unexpected_parser_error_drops_the_record_and_logs_it(self):
        with mock.patch.object(report_mod.HostReport, "from_json", side_effect=RuntimeError("x")):
            with self.assertLogs(backend.LOG, logging.WARNING) as logs:
                out = self.decoder.decode_changes([("c1", reports.make("c1").to_json())])
        self.assertEqual({"c1": None}, out)
        self.assertEqual(1, self.decoder.rejected["invalid"])
        self.assertEqual("ERROR", logs.records[0].levelname)

    @settings(max_examples=40, deadline=None, database=None)
    @given(st.integers(0, 2 ** 64))
    def test_hostile_rows_give_valid_records_under_their_own_keys_only(self, seed):
        rng = random.Random(seed)
        decoder = backend.RecordDecoder("fuzz")
        cache, dropped = {}, 0  # the raw value each key last had, the drops to count
        for _ in range(20):
            full = rng.random() < 0.3
            rows, expect = [], {}
            for host in rng.sample(["c0", "c1", "c2", "c3"], rng.randrange(1, 5)):
                raw, expect[host] = hostile.record(rng, host)
                if not full and rng.random() < 0.1:
                    raw = None  # the key was deleted
                rows.append((host, raw))
            out = (decoder.decode if full else decoder.decode_changes)(rows)
            if full:
                cache = {h: cache[h] for h, _ in rows if h in cache}
            for host, raw in rows:
                rec = out.get(host)
                if raw is None:
                    cache.pop(host, None)
                    continue
                if rec is not None:
                    fuzz_records.check_report(rec, host)
                if expect[host] is not None:
                    self.assertEqual(expect[host] == hostile.VALID, rec is not None, raw[:300])
                dropped += rec is None and cache.get(host) != raw
                cache[host] = raw
        self.assertEqual(dropped, sum(decoder.rejected.values()))


class SQLiteRowsTest(unittest.TestCase):
    """Rows written by something other than an agent: any SQLite storage class, any bytes."""

    def setUp(self):
        self.path, _url, self.board = reports.sqlite_board(self)
        self.board.publish(reports.make("good"))

    def insert(self, host_sql, record_sql, *args):
        with sqlite3.connect(self.path) as conn:
            conn.execute("INSERT OR REPLACE INTO host_report (host, ts, record) VALUES (%s, 1, %s)"
                         % (host_sql, record_sql), args)

    def test_a_row_that_is_not_utf_8_drops_only_that_row(self):
        # sqlite3 raised OperationalError ("Could not decode to UTF-8") for the
        # whole query: BoardUnavailable on every read, a scheduler blind to all.
        self.insert("'bad'", "CAST(x'7bff7d' AS TEXT)")
        self.insert("CAST(x'ff63' AS TEXT)", "?", reports.make("\ufffdc").to_json())
        self.assertEqual({"good"}, set(self.board.snapshot()))
        rows, _ = self.board.changes(-1)
        self.assertEqual({"good", "bad", "\ufffdc"}, {h for h, _ in rows})
        full, recs = next(self.board.follow(threading.Event(), 0.0))
        self.assertEqual((True, {"good"}), (full, set(recs)))
        self.assertEqual({"invalid": 1, "misplaced": 1}, self.board.rejected)

    def test_rows_of_every_storage_class_are_dropped_not_raised(self):
        self.insert("NULL", "?", reports.make("c1").to_json())
        self.insert("'int'", "42")
        self.insert("'real'", "1.5")
        self.insert("'blob'", "x'00ff'")
        self.insert("'empty'", "''")
        self.insert("x'6332'", "?", reports.make("nobody").to_json())
        self.insert("'as_blob'", "CAST(? AS BLOB)", reports.make("as_blob").to_json())
        snap = self.board.snapshot()
        # A blob holding a valid record is the record (bytes, as etcd stores them).
        self.assertEqual({"good", "as_blob"}, set(snap))
        self.assertEqual({"invalid": 4, "misplaced": 2}, self.board.rejected)

    @settings(max_examples=20, deadline=None, database=None)
    @given(st.integers(0, 2 ** 64))
    def test_hostile_rows_never_stop_a_read(self, seed):
        rng = random.Random(seed)
        expect = {"good": hostile.VALID}
        with sqlite3.connect(self.path) as conn:
            conn.execute("DELETE FROM host_report WHERE host != 'good'")
            for i in range(20):
                host = "h%d" % i
                raw, expect[host] = hostile.record(rng, host)
                form = rng.choice(["?", "CAST(? AS BLOB)", "CAST(CAST(? AS BLOB) AS TEXT)"])
                conn.execute("INSERT INTO host_report (host, ts, record) VALUES (?, 1, %s)"
                             % form, (host, raw))
        for snap in (self.board.snapshot(), next(self.board.follow(threading.Event(), 0.0))[1]):
            for host, rec in snap.items():
                fuzz_records.check_report(rec, host)
            for host, expected in expect.items():
                if expected == hostile.VALID:
                    self.assertIn(host, snap)
                elif expected is not None:
                    self.assertNotIn(host, snap)


class FollowerTest(unittest.TestCase):
    """The scheduler's follower: a forged or broken record never reaches a request."""

    def setUp(self):
        self.path, self.url, self.board = reports.sqlite_board(self)
        self.reader = reader_mod.BoardReader(self.url, refresh_interval=3600, load_timeout=30)
        self.addCleanup(self.reader.stop)

    def forge(self, key, rec):
        with sqlite3.connect(self.path) as conn:
            conn.execute("UPDATE host_report SET ts = ?, record = ? WHERE host = ?",
                         (rec.ts, rec.to_json(), key))

    def test_a_record_under_another_hosts_key_is_ignored_counted_and_logged(self):
        self.board.publish(reports.make("c1", sensitive_vms=0))
        self.board.publish(reports.make("c2"))
        self.reader.start()
        self.assertEqual({"c1", "c2"}, set(self.reader.snapshot()))
        with self.assertLogs(backend.LOG, logging.WARNING) as logs:
            self.forge("c2", reports.make("c1", sensitive_vms=4))
            machine.wait_for(lambda: self.reader.rejected["misplaced"], 30,
                             what="the follower reading the forged row")
        self.assertEqual(0, self.reader.get("c1").sensitive_vms)
        self.assertIsNone(self.reader.get("c2"))
        self.assertEqual({"invalid": 0, "misplaced": 1}, self.reader.rejected)
        self.assertIn("names host 'c1'", logs.output[0])
        # The host's agent publishes again: its own record is back.
        self.board.publish(reports.make("c2"))
        machine.wait_for(lambda: self.reader.get("c2"), 30, what="c2 published again")

    def test_hostile_rows_never_stop_the_follower(self):
        self.board.publish(reports.make("c1"))
        self.reader.start()
        rng = random.Random(5)
        with sqlite3.connect(self.path) as conn:
            for i in range(200):
                raw, _ = hostile.record(rng, "h%d" % i)
                # A current ts: the next publish collects rows older than the ttl.
                conn.execute("INSERT INTO host_report (host, ts, record) VALUES (?, ?, ?)",
                             ("h%d" % i, time.time(), raw))
        self.board.publish(reports.make("late"))
        machine.wait_for(lambda: self.reader.get("late"), 30, what="the follower reading on")
        self.assertTrue(self.reader.running)
        self.assertFalse(self.reader.failing)
        self.assertGreater(sum(self.reader.rejected.values()), 50)
        for host, rec in self.reader.snapshot().items():
            fuzz_records.check_report(rec, host)
