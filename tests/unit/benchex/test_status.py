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

"""The guest's side of the status: the parser and the reader take untrusted bytes."""

import contextlib
import io
import json
import os
import shutil
import socket
import tempfile
import unittest

from hypothesis import given
from hypothesis import strategies as st

from benchex import cli
from benchex import reporter as reporter_mod
from benchex import status

GOOD = {"state": "missed",
        "sla": {"latency_us": 200.0, "threshold_pct": 10.0, "statistic": "mean"},
        "window": {"requests": 2400, "mean_us": 231.0, "p99_us": 410.0,
                   "interference_pct": 15.5},
        "cap": {"pct": 35.0, "limit_pct": 200.0, "reason": "congestion", "enforced": True}}


def parsed(obj):
    return dict(obj, v=1)


class ParseTest(unittest.TestCase):

    def test_a_status_round_trips(self):
        line = status.encode(GOOD)
        self.assertTrue(line.endswith(b"\n"))
        self.assertEqual(parsed(GOOD), status.parse(line))
        self.assertEqual(parsed(GOOD), status.parse(line.rstrip(b"\n").decode()))

    def test_nulls_are_allowed_where_documented(self):
        bare = {"state": "no_sla", "sla": None, "window": None, "cap": None}
        self.assertEqual(parsed(bare), status.parse(status.encode(bare)))

    def test_unknown_keys_are_ignored_and_another_version_is_skipped(self):
        data = dict(GOOD, v=1, colour="red")
        self.assertEqual(parsed(GOOD), status.parse(json.dumps(data)))
        self.assertIsNone(status.parse(json.dumps(dict(GOOD, v=2))))
        self.assertIsNone(status.parse(json.dumps(dict(GOOD, v="1"))))
        self.assertIsNone(status.parse(json.dumps(GOOD)))     # no version

    def test_a_window_keeps_a_peer_that_names_one_and_refuses_the_line_otherwise(self):
        for peer in ("10.0.0.7:7788", "[2001:db8::1]:80",
                     "fe80:0000:0000:0000:0002:c903:0003:1234"):
            line = json.dumps(dict(GOOD, v=1, window=dict(GOOD["window"], peer=peer)))
            self.assertEqual(peer, status.parse(line)["window"]["peer"])
        line = json.dumps(dict(GOOD, v=1, window=dict(GOOD["window"], peer=None)))
        self.assertNotIn("peer", status.parse(line)["window"])
        for bad in ("host.example", 7, "10.0.0.7:0", ["10.0.0.7"], ""):
            line = json.dumps(dict(GOOD, v=1, window=dict(GOOD["window"], peer=bad)))
            self.assertIsNone(status.parse(line), bad)

    def test_bad_lines_give_none(self):
        for bad in (b"", b"\xff", b"[]", b"null", b"{", b'{"v":1}',
                    b'{"v":1,"state":"met","sla":{"latency_us":NaN,"threshold_pct":1}}',
                    json.dumps(dict(GOOD, v=1, cap=dict(GOOD["cap"], reason="Bad Reason"))),
                    json.dumps(dict(GOOD, v=1, cap=dict(GOOD["cap"], enforced="yes"))),
                    json.dumps(dict(GOOD, v=1, window=dict(GOOD["window"], requests=-1))),
                    json.dumps(dict(GOOD, v=1, sla=dict(GOOD["sla"], latency_us=0))),
                    json.dumps(dict(GOOD, v=1, sla="fast")),
                    json.dumps(dict(GOOD, v=1, window=dict(GOOD["window"], mean_us=10 ** 400))),
                    json.dumps(dict(GOOD, v=1, cap=dict(GOOD["cap"], pct=-10 ** 400))),
                    b'{"v":1,"state":"met","x":"' + b"a" * status.MAX_BYTES + b'"}'):
            self.assertIsNone(status.parse(bad), bad)

    def test_the_agent_never_writes_what_a_reader_would_skip(self):
        self.assertRaises(ValueError, status.encode, dict(GOOD, state="x" * status.MAX_BYTES))
        self.assertRaises(ValueError, status.encode, dict(GOOD, window={"mean_us": math_nan()}))

    @given(st.binary(max_size=2 * status.MAX_BYTES))
    def test_any_bytes_parse_to_none_or_a_status_never_raise(self, data):
        got = status.parse(data)
        if got is not None:
            self.assertEqual({"v", "state", "sla", "window", "cap"}, set(got))

    @given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() |
                        st.text(max_size=20),
                        lambda inner: st.lists(inner, max_size=4) |
                        st.dictionaries(st.sampled_from(["v", "state", "sla", "window", "cap",
                                                         "pct", "limit_pct", "reason",
                                                         "enforced", "requests", "mean_us",
                                                         "latency_us", "threshold_pct",
                                                         "statistic", "p99_us"]),
                                        inner, max_size=6),
                        max_leaves=20))
    def test_any_json_parses_to_none_or_a_well_typed_status(self, obj):
        try:
            line = json.dumps(obj)
        except ValueError:
            return
        got = status.parse(line)
        if got is None:
            return
        self.assertEqual(1, got["v"])
        self.assertIsInstance(got["state"], str)
        if got["cap"] is not None:
            self.assertIsInstance(got["cap"]["enforced"], bool)
            self.assertGreater(got["cap"]["limit_pct"], 0)
        if got["window"] is not None:
            self.assertIsInstance(got["window"]["requests"], int)
        status.render(got)      # whatever parses can be shown


def math_nan():
    return float("nan")


class ReaderTest(unittest.TestCase):

    def test_the_latest_valid_line_is_kept_across_pieces(self):
        reader = status.StatusReader()
        one, two = status.encode(dict(GOOD, state="met")), status.encode(GOOD)
        data = one + b"garbage\n" + two
        for k in range(0, len(data), 7):
            reader.feed(data[k:k + 7])
        self.assertEqual(parsed(GOOD), reader.latest)
        self.assertEqual((2, 1), (reader.received, reader.skipped))

    def test_an_endless_line_is_skipped_unbuffered(self):
        reader = status.StatusReader()
        reader.feed(status.encode(GOOD))
        for _ in range(1000):
            reader.feed(b"x" * 4096)
            self.assertLess(reader.pending, status.MAX_BYTES)
        reader.feed(b"tail\n" + status.encode(dict(GOOD, state="met")))
        self.assertEqual("met", reader.latest["state"])
        self.assertEqual(1, reader.skipped)

    @given(st.lists(st.binary(max_size=600), max_size=20))
    def test_any_stream_keeps_memory_bounded_and_never_raises(self, chunks):
        reader = status.StatusReader()
        good = status.encode(GOOD)
        for chunk in chunks:
            reader.feed(chunk)
            self.assertLess(reader.pending, status.MAX_BYTES)
        # A fresh line after a newline is always read.
        reader.feed(b"\n" + good)
        self.assertEqual(parsed(GOOD), reader.latest)

    def test_render_says_what_a_person_wants_to_know(self):
        text = status.render(parsed(GOOD))
        self.assertIn("SLA missed", text)
        self.assertIn("cap: 35% of one CPU (limit 200%), reason congestion", text)
        text = status.render(parsed(dict(GOOD, cap=dict(GOOD["cap"], reason="observe_only",
                                                        enforced=False))))
        self.assertIn("not enforced", text)


class GuestSideTest(unittest.TestCase):
    """The reporter reads the status from its port; ``benchex status`` prints it."""

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="benchex-status-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        # A Unix socket stands in for the port (ChannelSink connects to one).
        self.port = os.path.join(self.dir, "port")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.port)
        self.listener.listen(1)
        self.addCleanup(self.listener.close)

    def cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["status"] + list(argv))
        return code, out.getvalue(), err.getvalue()

    def test_the_reporter_keeps_the_latest_status_and_writes_the_status_file(self):
        path = os.path.join(self.dir, "status.json")
        rep = reporter_mod.LatencyReporter(reporter_mod.ChannelSink(self.port), interval_s=60,
                                           status_file=path)
        rep.add(100.0)
        rep.flush()
        host, _ = self.listener.accept()
        self.addCleanup(host.close)
        host.sendall(b"junk\n" + status.encode(dict(GOOD, state="met")) + status.encode(GOOD))
        host.recv(4096)
        rep.add(100.0)
        rep.flush()
        rep.close()
        self.assertEqual(parsed(GOOD), rep.status)
        with open(path) as f:
            self.assertEqual(parsed(GOOD), json.load(f))
        code, out, _ = self.cli("--file", path)
        self.assertEqual(0, code)
        self.assertIn("SLA missed", out)
        code, out, _ = self.cli("--file", path, "--json")
        self.assertEqual(parsed(GOOD), json.loads(out))

    def test_status_reads_the_port_directly_and_says_when_nothing_came(self):
        import threading

        def host():
            conn, _ = self.listener.accept()
            with conn:
                conn.sendall(status.encode(GOOD))
                conn.recv(1)        # until the reader closes

        t = threading.Thread(target=host)
        t.start()
        code, out, _ = self.cli("--port", self.port, "--wait", "5")
        t.join()
        self.assertEqual(0, code)
        self.assertIn("reason congestion", out)
        t = threading.Thread(target=lambda: self.listener.accept()[0].recv(1))
        t.start()
        code, out, err = self.cli("--port", self.port, "--wait", "0.2")
        t.join()
        self.assertEqual((3, ""), (code, out))
        self.assertIn("no status", err)

    def test_a_missing_port_or_file_is_an_error(self):
        self.assertEqual(2, self.cli("--port", os.path.join(self.dir, "none"))[0])
        self.assertEqual(2, self.cli("--file", os.path.join(self.dir, "none"))[0])
