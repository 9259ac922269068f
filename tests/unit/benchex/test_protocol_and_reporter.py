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

"""BenchEx's TCP framing, its reporter's v1 lines, and the CLI's argument rules."""

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
from benchex import framing
from benchex import protocol
from benchex import reporter as reporter_mod
from benchex import wire

VM = "6f2b8a3e-1c4d-4e5f-9a0b-1c2d3e4f5a6b"


class TestProtocol(unittest.TestCase):

    @given(st.integers(0, 2 ** 32 - 1), st.integers(0, 4096))
    def test_a_request_round_trips(self, seq, payload):
        msg = protocol.request(seq, payload)
        self.assertEqual(protocol.REQUEST.size + payload, len(msg))
        self.assertEqual((seq, payload), protocol.parse_request(msg[:protocol.REQUEST.size]))

    @given(st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 32 - 1),
           st.integers(0, 2 ** 64 - 1), st.integers(0, protocol.MAX_BYTES))
    def test_a_reply_header_round_trips(self, seq, arrival, order, ns, size):
        hdr = protocol.reply_header(seq, arrival, order, ns, size)
        self.assertEqual((seq, arrival, order, ns, size), protocol.parse_reply(hdr))

    def test_bad_magic_and_oversized_messages_are_protocol_errors(self):
        bad = protocol.REQUEST.pack(0xDEADBEEF, 1, 0, 0)
        self.assertRaises(protocol.ProtocolError, protocol.parse_request, bad)
        huge = protocol.REQUEST.pack(protocol.REQUEST_MAGIC, 1, protocol.MAX_BYTES + 1, 0)
        self.assertRaises(protocol.ProtocolError, protocol.parse_request, huge)
        reply = protocol.REPLY.pack(protocol.REPLY_MAGIC, 1, 0, 0, 0, protocol.MAX_BYTES + 1, 0)
        self.assertRaises(protocol.ProtocolError, protocol.parse_reply, reply)

    def test_a_short_read_is_a_protocol_error(self):
        a, b = socket.socketpair()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        a.sendall(b"abc")
        a.shutdown(socket.SHUT_WR)
        self.assertRaises(protocol.ProtocolError, protocol.recv_exact, b, 4)


class ManualClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class TestReporter(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="benchex-rep-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def listen(self):
        path = os.path.join(self.dir, "probe.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(1)
        srv.settimeout(10)
        self.addCleanup(srv.close)
        return path, srv

    def test_one_valid_probe_report_per_window_with_the_vm(self):
        path, srv = self.listen()
        clock = ManualClock()
        rep = reporter_mod.LatencyReporter(reporter_mod.ProbeSocketSink(path, VM.upper()),
                                           interval_s=1.0, clock=clock)
        for v in (100.0, 200.0, 300.0):
            rep.add(v)
        clock.t = 1.0
        rep.add(400.0)
        rep.add(500.0)
        rep.close()
        conn, _ = srv.accept()
        self.addCleanup(conn.close)
        conn.settimeout(10)
        data = b""
        while data.count(b"\n") < 2:
            data += conn.recv(4096)
        lines = framing.LineFramer(512).feed(data)
        first, second = (wire.parse(x, wire.SOURCE_PROBE) for x in lines)
        self.assertEqual((4, 250.0, VM), (first.n, first.mean_us, first.vm))
        self.assertEqual((1, 500.0), (second.n, second.mean_us))
        self.assertEqual((2, 0), (rep.sent, rep.dropped))

    def test_a_channel_report_carries_no_vm_and_goes_through_a_fifo(self):
        fifo = os.path.join(self.dir, "port")
        os.mkfifo(fifo)
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.addCleanup(os.close, fd)
        rep = reporter_mod.LatencyReporter(reporter_mod.ChannelSink(fifo), interval_s=60)
        rep.add(42.0)
        rep.close()
        r = wire.parse(os.read(fd, 4096).rstrip(b"\n"), wire.SOURCE_CHANNEL)
        self.assertEqual((1, 42.0, None), (r.n, r.mean_us, r.vm))

    def test_an_unconnected_port_drops_reports_instead_of_blocking(self):
        fifo = os.path.join(self.dir, "port")
        os.mkfifo(fifo)  # no reader: the host side is not connected
        rep = reporter_mod.LatencyReporter(reporter_mod.ChannelSink(fifo), interval_s=60)
        rep.add(42.0)
        rep.flush()
        rep.add(43.0)
        rep.close()
        self.assertEqual((0, 2), (rep.sent, rep.dropped))

    def test_a_probe_sink_needs_a_uuid(self):
        self.assertRaises(ValueError, reporter_mod.ProbeSocketSink, "/x", "instance-1")


class TestReporterPeer(unittest.TestCase):
    """The peer a report names: given, the server as connected, or none (version 1)."""

    def reports(self, peer, connected=None):
        dir_ = tempfile.mkdtemp(prefix="benchex-peer-")
        self.addCleanup(shutil.rmtree, dir_, True)
        fifo = os.path.join(dir_, "port")
        os.mkfifo(fifo)
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.addCleanup(os.close, fd)
        rep = reporter_mod.LatencyReporter(reporter_mod.ChannelSink(fifo), interval_s=60,
                                           peer=peer)
        if connected is not None:
            rep.connected(connected)
        rep.add(42.0)
        rep.close()
        line = os.read(fd, 4096).rstrip(b"\n")
        return json.loads(line), wire.parse(line, wire.SOURCE_CHANNEL)

    def test_without_a_peer_the_report_is_version_1(self):
        raw, r = self.reports(None, ("10.0.0.7", 7788))
        self.assertEqual((1, None), (raw["v"], r.peer))
        self.assertNotIn("peer", raw)

    def test_auto_names_the_address_the_client_connected_to(self):
        raw, r = self.reports(reporter_mod.AUTO, ("10.0.0.7", 7788))
        self.assertEqual((2, "10.0.0.7:7788"), (raw["v"], r.peer))
        _raw, r = self.reports(reporter_mod.AUTO, ("FE80::1%eth0", 7788, 0, 2))
        self.assertEqual("[fe80::1]:7788", r.peer)   # no zone: it means nothing off the guest

    def test_auto_keeps_the_first_connection_and_names_nothing_before_one(self):
        rep = reporter_mod.LatencyReporter(reporter_mod.ChannelSink("/nonexistent"),
                                           peer=reporter_mod.AUTO)
        self.assertIsNone(rep.peer)
        rep.connected(("10.0.0.7", 1))
        rep.connected(("10.0.0.8", 2))
        self.assertEqual("10.0.0.7:1", rep.peer)

    def test_a_given_peer_is_written_in_its_canonical_form(self):
        raw, r = self.reports("FE80:0000:0000:0000:0002:C903:0003:1234", ("10.0.0.7", 1))
        self.assertEqual("fe80:0000:0000:0000:0002:c903:0003:1234", raw["peer"])
        self.assertEqual(raw["peer"], r.peer)

    def test_a_peer_that_is_none_is_refused_at_once(self):
        self.assertRaises(ValueError, reporter_mod.LatencyReporter,
                          reporter_mod.ChannelSink("/x"), peer="server.example")

    def test_the_command_line_checks_the_peer(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            with self.assertRaises(SystemExit):
                cli.main(["client", "--report-channel", "/x", "--report-peer", "host:1"])
        self.assertIn("--report-peer", err.getvalue())
        with contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(SystemExit):
                cli.main(["client", "--report-peer", "10.0.0.7"])    # nothing to report to

    def test_no_peer_is_named_by_default_and_auto_names_the_server(self):
        parser = cli.build_parser()
        for argv, peer, auto in (
                (["client", "--report-channel", "/x"], None, False),
                (["client", "--report-channel", "/x", "--report-peer", "auto"], None, True),
                (["server", "--report-channel", "/x"], None, False),
                (["client", "--report-channel", "/x", "--report-peer", "none"], None, False),
                (["server", "--report-channel", "/x", "--report-peer", "10.0.0.7:80"],
                 "10.0.0.7:80", False)):
            rep = cli._reporter(parser.parse_args(argv), parser)
            self.assertEqual((peer, auto), (rep.peer, rep.auto_peer), argv)


class TestCommandLine(unittest.TestCase):

    def assertUsageError(self, argv):
        with contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(SystemExit) as ctx:
                cli.main(argv)
        self.assertEqual(2, ctx.exception.code)

    def test_report_arguments_follow_the_intakes_trust_rules(self):
        self.assertUsageError(["client", "--report-socket", "/run/x.sock"])
        self.assertUsageError(["client", "--report-channel", "/dev/x", "--vm", VM])
        self.assertUsageError(["client", "--report-socket", "/x", "--report-channel", "/y"])
        self.assertUsageError(["client", "--report-socket", "/x", "--vm", "not-a-uuid"])

    def test_open_and_closed_loop_exclude_each_other(self):
        self.assertUsageError(["client", "--rate", "10", "--concurrency", "2"])
        self.assertUsageError(["client", "--rate", "0"])
