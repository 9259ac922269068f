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

"""BenchEx on loopback: Python and C servers and clients against each other, FCFS,
and reports arriving in the agent's latency windows through both intakes."""

import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

from benchex import client as client_mod
from benchex import protocol
from benchex import reporter as reporter_mod
from benchex import server as server_mod
from benchex import stats
from benchex import status as wire_status
from benchex import wire
from resex_agent.intake import IntakeParams
from resex_agent.intake import LatencyIntake
from resex_agent import status as status_mod
from resex_libvirt.hypervisor import base
from resex_libvirt import sla as sla_mod
from tests.functional.intake.fake_qemu import FakeQemuChannel
from tests.functional.intake.fake_qemu import wait_for

VM = "3c9d6a52-0000-4000-8000-0000000000be"

#: Status lines a reader skips (each checked against :func:`benchex.status.parse` too).
MALFORMED_STATUS = [
    b"not json\n",
    b"\n",
    b"[1, 2, 3]\n",
    b'{"v":2,"state":"met"}\n',
    b'{"v":1.0,"state":"met"}\n',
    b'{"v":1,"state":"Met!"}\n',
    b'{"v":1,"state":"m\xffet"}\n',
    b'{"v":1,"state":"met"} trailing\n',
    b'{"v":1,"state":"met","sla":{"latency_us":-5,"threshold_pct":10}}\n',
    b'{"v":1,"state":"met","sla":{"latency_us":NaN,"threshold_pct":1}}\n',
    b'{"v":1,"state":"met","sla":{"latency_us":1,"threshold_pct":1,"statistic":"p50"}}\n',
    b'{"v":1,"state":"met","window":{"requests":1.5,"mean_us":1}}\n',
    b'{"v":1,"state":"met","window":{"requests":-1,"mean_us":1}}\n',
    b'{"v":1,"state":"met","cap":{"pct":5,"limit_pct":0,"reason":"policy"}}\n',
    b'{"v":1,"state":"met","cap":{"pct":5,"limit_pct":100,"reason":"policy","enforced":1}}\n',
    b'{"v":1,"state":"met","cap":"congestion"}\n',
    b'{"v":1,"state":"met","window":{"requests":1,"mean_us":1' + b"0" * 400 + b'}}\n',
]
BUILD = os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchex", "build.sh")
COMPUTE_US = 200.0


def assertSane(case, summary, requests, floor_us):
    """All answered, in FCFS order, and each latency at least the server's compute time."""
    case.assertEqual(requests, summary["requests"], summary)
    case.assertEqual(0, summary["errors"], summary)
    case.assertEqual(0, summary["fcfs_violations"], summary)
    case.assertGreaterEqual(summary["min_us"], floor_us, summary)
    order = [summary[k] for k in ("min_us", "p50_us", "p99_us", "p999_us", "max_us")]
    case.assertEqual(sorted(order), order, summary)
    case.assertGreaterEqual(summary["mean_us"], floor_us, summary)
    case.assertGreater(summary["throughput_rps"], 0.0)


class LoopbackTestCase(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="benchex-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def python_server(self, reporter=None, reply_bytes=256):
        self.server = server_mod.BenchexServer("127.0.0.1", 0, COMPUTE_US, reply_bytes,
                                               reporter=reporter).start()
        self.addCleanup(self.server.close)
        return self.server.address[1]

    def intake(self, **kw):
        kw.setdefault("probe_socket_path", os.path.join(self.dir, "probe.sock"))
        kw.update(rate_limit_per_s=10000.0, rate_burst=10000, window_reports=4096,
                  freshness_s=600.0, channel_retry_s=0.05)
        intake = LatencyIntake(IntakeParams(**kw))
        intake.start()
        self.addCleanup(intake.close)
        return intake

    def guest_channel(self):
        """An intake on a guest channel, and the FIFO playing the guest's port.

        QEMU is played by the test. Returns ``(intake, port_path)``.
        """
        qemu = FakeQemuChannel(os.path.join(self.dir, "vm.chan"))
        self.addCleanup(qemu.close)
        intake = self.intake(probe_socket_path=None)
        intake.sync({VM: base.VMInfo(uuid=VM, name="vm", sla=sla_mod.SLA(latency_sla_us=300),
                                     latency_channel=qemu.path)})
        qemu.accept()
        port_path = os.path.join(self.dir, "org.resex.latency.0")
        qemu.forward_from_fifo(port_path)
        return intake, port_path


class TestPythonBenchex(LoopbackTestCase):

    def test_closed_loop_latencies_are_sane_and_fcfs(self):
        port = self.python_server()
        summary = client_mod.closed_loop("127.0.0.1", port, 600, concurrency=3,
                                         request_bytes=1024)
        assertSane(self, summary, 600, COMPUTE_US)

    def test_open_loop_latencies_are_sane_and_fcfs(self):
        port = self.python_server()
        summary = client_mod.open_loop("127.0.0.1", port, 300, rate=1000.0)
        assertSane(self, summary, 300, COMPUTE_US)

    def test_the_server_answers_in_arrival_order_across_connections(self):
        port = self.python_server(reply_bytes=0)
        socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(3)]
        for s in socks:
            self.addCleanup(s.close)
        for seq in range(40):  # pipelined: 120 requests queued without waiting
            for s in socks:
                s.sendall(protocol.request(seq, 16))
        orders = []
        for s in socks:
            last = -1
            for seq in range(40):
                rseq, arrival, order, server_ns, size = protocol.parse_reply(
                    protocol.recv_exact(s, protocol.REPLY.size))
                self.assertEqual((seq, 0), (rseq, size))
                self.assertEqual(arrival, order)  # first come, first served
                self.assertGreater(order, last)
                self.assertGreaterEqual(server_ns, COMPUTE_US * 1000)
                last = order
                orders.append(order)
        self.assertEqual(list(range(120)), sorted(orders))

    def test_client_reports_reach_the_agents_window_through_the_probe_socket(self):
        intake = self.intake()
        intake.sync({VM: base.VMInfo(uuid=VM, name="vm", sla=sla_mod.SLA(latency_sla_us=300))})
        port = self.python_server()
        rep = reporter_mod.LatencyReporter(
            reporter_mod.ProbeSocketSink(intake.params.probe_socket_path, VM), interval_s=0.02)
        summary = client_mod.closed_loop("127.0.0.1", port, 400, concurrency=2, reporter=rep)
        rep.close()
        win = wait_for(lambda: intake.windows().get(VM) if intake.windows().get(VM) and
                       intake.windows()[VM].count == 400 else None)
        self.assertIsNotNone(win, intake.stats())
        self.assertAlmostEqual(summary["mean_us"], win.mean_us, delta=0.01)
        self.assertEqual(0, rep.dropped)

    def test_the_clients_reports_name_the_server_in_the_agents_window(self):
        intake = self.intake()
        intake.sync({VM: base.VMInfo(uuid=VM, name="vm", sla=sla_mod.SLA(latency_sla_us=300))})
        port = self.python_server()
        rep = reporter_mod.LatencyReporter(
            reporter_mod.ProbeSocketSink(intake.params.probe_socket_path, VM), interval_s=0.02,
            peer=reporter_mod.AUTO)
        client_mod.open_loop("127.0.0.1", port, 100, rate=2000.0, reporter=rep)
        rep.close()
        win = wait_for(lambda: intake.windows().get(VM) if intake.windows().get(VM) and
                       intake.windows()[VM].count == 100 else None)
        self.assertIsNotNone(win, intake.stats())
        self.assertEqual("127.0.0.1:%d" % port, win.peer)

    def test_server_side_reports_reach_the_window_through_the_guest_channel(self):
        intake, port_path = self.guest_channel()
        rep = reporter_mod.LatencyReporter(reporter_mod.ChannelSink(port_path), interval_s=0.02)
        port = self.python_server(reporter=rep)
        client_mod.closed_loop("127.0.0.1", port, 300, concurrency=2)
        self.server.close()  # flushes the last window
        win = wait_for(lambda: intake.windows().get(VM) if intake.windows().get(VM) and
                       intake.windows()[VM].count == 300 else None)
        self.assertIsNotNone(win, intake.stats())
        self.assertGreaterEqual(win.mean_us, COMPUTE_US)


class TestStatusLoopback(LoopbackTestCase):
    """The status the agent writes reaches a BenchEx server reporting on the guest's port."""

    def test_the_server_reads_its_status_and_benchex_status_prints_it(self):
        qemu = FakeQemuChannel(os.path.join(self.dir, "vm.chan"))
        self.addCleanup(qemu.close)
        intake = self.intake(probe_socket_path=None)
        info = base.VMInfo(uuid=VM, name="vm", sla=sla_mod.SLA(latency_sla_us=300),
                           latency_channel=qemu.path)
        intake.sync({VM: info})
        qemu.accept()
        port_path = os.path.join(self.dir, "org.resex.latency.0")
        qemu.relay_to_guest(port_path)
        status_file = os.path.join(self.dir, "status.json")
        rep = reporter_mod.LatencyReporter(reporter_mod.ChannelSink(port_path),
                                           interval_s=0.02, status_file=status_file)
        port = self.python_server(reporter=rep)
        client_mod.closed_loop("127.0.0.1", port, 100, concurrency=1)
        win = wait_for(lambda: intake.windows().get(VM))
        self.assertIsNotNone(win, intake.stats())
        intf = 100.0 * (win.mean_us - 300.0) / 300.0
        intake.post_status({VM: status_mod.encode(status_mod.vm_status(info, win, intf))})

        def told():
            client_mod.closed_loop("127.0.0.1", port, 20, concurrency=1)
            return rep.status
        status = wait_for(told)
        self.assertEqual(300.0, status["sla"]["latency_us"])
        self.assertEqual(round(win.mean_us, 3), status["window"]["mean_us"])
        res = subprocess.run([sys.executable, "-m", "benchex.cli", "status", "--file",
                              status_file, "--json"], capture_output=True, text=True,
                             timeout=60, check=False)
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertEqual(status, json.loads(res.stdout))


def _status_line(status, size=None):
    """``status`` as a channel line (newline included), padded by an unknown key to ``size``."""
    line = wire_status.encode(status)
    if size is not None:
        pad = size - len(line) - len(',"pad":""')
        line = line[:-2] + (',"pad":"%s"}\n' % ("x" * pad)).encode()
        assert len(line) == size, len(line)
    return line


class ChannelStandIn:
    """The guest's port as a Unix socket the test owns: it reads reports and writes status.

    :attr:`reports` are the report lines (dicts) read so far, by a thread.
    """

    def __init__(self, path):
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(1)
        self.listener.settimeout(30)
        self.conn = None
        self.reports = []
        self._thread = None

    def accept(self):
        self.conn, _ = self.listener.accept()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        buf = b""
        while True:
            try:
                data = self.conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            self.reports.extend(json.loads(line) for line in lines)

    def send(self, data, pieces=1):
        """Write ``data`` in ``pieces`` writes (a line may arrive in parts)."""
        step = -(-len(data) // pieces)
        for i in range(0, len(data), step):
            self.conn.sendall(data[i:i + step])

    def wait_closed(self):
        """Wait for the other end to close (the reports it sent are all read then)."""
        self._thread.join(30)
        return not self._thread.is_alive()

    def close(self):
        if self.conn is not None:
            self.conn.shutdown(socket.SHUT_RDWR)
            self.conn.close()
        self.listener.close()
        if self._thread is not None:
            self._thread.join(30)


def _is_static(path):
    """True when the ELF file has no PT_INTERP program header (no dynamic loader)."""
    with open(path, "rb") as f:
        ident = f.read(64)
        if ident[:4] != b"\x7fELF" or ident[4] != 2:
            return False
        phoff, = struct.unpack_from("<Q", ident, 32)
        phentsize, phnum = struct.unpack_from("<HH", ident, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    types = [struct.unpack_from("<I", table, i * phentsize)[0] for i in range(phnum)]
    return 3 not in types


@unittest.skipUnless(shutil.which(os.environ.get("CC", "gcc")),
                     "no C compiler: the static BenchEx cannot be built here")
class TestCBenchex(LoopbackTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.build_dir = tempfile.mkdtemp(prefix="benchex-build-")
        subprocess.run(["sh", BUILD, cls.build_dir], check=True, capture_output=True,
                       timeout=300)
        cls.binary = os.path.join(cls.build_dir, "benchex")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.build_dir, True)
        super().tearDownClass()

    def c_server(self, *extra):
        proc = subprocess.Popen([self.binary, "server", "--port", "0", "--compute-us",
                                 str(COMPUTE_US), "--reply-bytes", "256", *extra],
                                stdout=subprocess.PIPE, text=True)

        def stop():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            proc.stdout.close()
        self.stop_c_server = stop
        self.addCleanup(stop)
        line = proc.stdout.readline()
        self.assertIn("benchex server listening on 127.0.0.1:", line)
        return int(line.rsplit(":", 1)[1])

    def c_client(self, port, *extra):
        out = subprocess.run([self.binary, "client", "--port", str(port), "--json", *extra],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(0, out.returncode, out.stderr + out.stdout)
        return json.loads(out.stdout)

    def test_the_build_is_a_static_executable(self):
        self.assertTrue(os.access(self.binary, os.X_OK))
        self.assertTrue(_is_static(self.binary))

    def test_c_client_against_python_server(self):
        port = self.python_server()
        summary = self.c_client(port, "--requests", "600", "--concurrency", "3",
                                "--request-bytes", "1024")
        assertSane(self, summary, 600, COMPUTE_US)

    def test_python_client_against_c_server(self):
        port = self.c_server()
        summary = client_mod.closed_loop("127.0.0.1", port, 600, concurrency=3,
                                         request_bytes=1024)
        assertSane(self, summary, 600, COMPUTE_US)
        summary = client_mod.open_loop("127.0.0.1", port, 300, rate=1000.0)
        assertSane(self, summary, 300, COMPUTE_US)

    def test_c_client_against_c_server_in_open_loop(self):
        port = self.c_server()
        summary = self.c_client(port, "--requests", "500", "--rate", "2000")
        assertSane(self, summary, 500, COMPUTE_US)
        self.assertEqual(list(stats.KEYS), list(summary))  # the same report as Python's

    def test_c_client_reports_through_the_probe_socket(self):
        intake = self.intake()
        intake.sync({VM: base.VMInfo(uuid=VM, name="vm", sla=sla_mod.SLA(latency_sla_us=300))})
        port = self.python_server()
        summary = self.c_client(port, "--requests", "400", "--concurrency", "2",
                                "--report-socket", intake.params.probe_socket_path,
                                "--vm", VM, "--report-interval", "0.02")
        win = wait_for(lambda: intake.windows().get(VM) if intake.windows().get(VM) and
                       intake.windows()[VM].count == 400 else None)
        self.assertIsNotNone(win, intake.stats())
        self.assertAlmostEqual(summary["mean_us"], win.mean_us, delta=0.01)

    def test_c_server_reports_through_the_guest_channel(self):
        intake, port_path = self.guest_channel()
        port = self.c_server("--report-channel", port_path, "--report-interval", "0.02")
        client_mod.closed_loop("127.0.0.1", port, 300, concurrency=2)
        self.stop_c_server()  # SIGTERM: the server flushes its last window and exits
        win = wait_for(lambda: intake.windows().get(VM) if intake.windows().get(VM) and
                       intake.windows()[VM].count == 300 else None)
        self.assertIsNotNone(win, intake.stats())
        self.assertGreaterEqual(win.mean_us, COMPUTE_US)
        self.assertEqual({}, intake.stats()[VM]["rejected"])

    def test_c_client_reads_its_status_from_the_channel_and_skips_garbage(self):
        port = self.python_server()
        chan = ChannelStandIn(os.path.join(self.dir, "org.resex.latency.0"))
        self.addCleanup(chan.close)
        status_file = os.path.join(self.dir, "status.json")
        proc = subprocess.Popen([self.binary, "client", "--port", str(port), "--json",
                                 "--rate", "1000", "--requests", "8000", "--report-interval",
                                 "0.02", "--report-channel", chan.path, "--status-file",
                                 status_file], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        chan.accept()

        def status_in_file():
            with contextlib.suppress(FileNotFoundError):
                with open(status_file, "rb") as f:
                    return wire_status.parse(f.read().rstrip(b"\n"))
        first = _status_line({"state": wire_status.MISSED, "cap": {
            "pct": 35.0, "limit_pct": 200.0, "reason": wire_status.CONGESTION, "enforced": True},
            "sla": {"latency_us": 200.0, "threshold_pct": 10.0, "statistic": "mean"},
            "window": {"requests": 2400, "mean_us": 231.0, "p99_us": 410.0,
                       "interference_pct": 15.5}})
        chan.send(first, pieces=3)
        wait_for(lambda: status_in_file() == wire_status.parse(first))
        self.assertEqual(wire_status.parse(first), status_in_file())

        # Garbage: malformed lines, a line one byte over the bound and one with
        # no end in sight, both arriving in pieces, then a flood of junk lines.
        for line in MALFORMED_STATUS:
            self.assertIsNone(wire_status.parse(line), line)
        over = _status_line({"state": wire_status.MET}, size=wire_status.MAX_BYTES + 1)
        self.assertIsNotNone(wire_status.parse(over[:-1].replace(b"x" * 2, b"", 1)))
        chan.send(b"".join(MALFORMED_STATUS))
        chan.send(over, pieces=7)
        chan.send(b"y" * 20000 + b"\n", pieces=20)
        chan.send(b"garbage\n" * 20000, pieces=40)
        reports = len(chan.reports)
        self.assertTrue(wait_for(lambda: len(chan.reports) >= reports + 10),
                        "the reports stopped while the status was garbage")
        self.assertEqual(wire_status.parse(first), status_in_file())

        # The longest line accepted: 1024 bytes with its newline.
        last = _status_line({"state": wire_status.NO_SLA, "sla": None, "window": None,
                             "cap": None}, size=wire_status.MAX_BYTES)
        chan.send(last, pieces=2)
        wait_for(lambda: status_in_file() == wire_status.parse(last))
        self.assertEqual(wire_status.parse(last), status_in_file())

        out, err = proc.communicate(timeout=120)
        self.assertEqual(0, proc.returncode, err)
        self.assertEqual(8000, json.loads(out)["requests"])
        self.assertIn("benchex: status lines: 2 read, %d skipped"
                      % (len(MALFORMED_STATUS) + 2 + 20000), err)
        self.assertTrue(chan.wait_closed())
        self.assertEqual(8000, sum(report["n"] for report in chan.reports))  # none dropped
        # The file is what the Python client writes, and benchex status prints it.
        python_file = os.path.join(self.dir, "python-status.json")
        reporter_mod.write_status_file(python_file, wire_status.parse(last))
        with open(status_file, "rb") as c_out, open(python_file, "rb") as py_out:
            self.assertEqual(py_out.read(), c_out.read())
        self.assertEqual([], [name for name in os.listdir(self.dir) if name.endswith(".tmp")])
        res = subprocess.run([sys.executable, "-m", "benchex.cli", "status", "--file",
                              status_file, "--json"], capture_output=True, text=True,
                             timeout=60, check=False)
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertEqual(wire_status.parse(last), json.loads(res.stdout))

    def channel_reports(self, name, run):
        """The reports a client run (``run(channel_path)``) wrote to a channel, parsed."""
        chan = ChannelStandIn(os.path.join(self.dir, name + ".sock"))
        self.addCleanup(chan.close)
        client = threading.Thread(target=run, args=(chan.path,), daemon=True)
        client.start()
        chan.accept()
        client.join(120)
        self.assertFalse(client.is_alive())
        self.assertTrue(chan.wait_closed())
        return [wire.parse(json.dumps(r).encode(), wire.SOURCE_CHANNEL) for r in chan.reports]

    def test_the_c_and_python_clients_name_the_same_peer(self):
        port = self.python_server()

        def python_client(path, peer=reporter_mod.AUTO):
            rep = reporter_mod.LatencyReporter(reporter_mod.ChannelSink(path),
                                               interval_s=0.02, peer=peer)
            client_mod.closed_loop("127.0.0.1", port, 200, concurrency=2, reporter=rep)
            rep.close()

        def c_client(*extra):
            def run(path):
                self.c_client(port, "--requests", "200", "--concurrency", "2",
                              "--report-interval", "0.02", "--report-channel", path, *extra)
            return run

        gid = "FE80:0000:0000:0000:0002:C903:0003:1234"
        runs = {"python": python_client, "c": c_client("--report-peer", "auto"),
                "c-default": c_client(),
                "python-gid": lambda path: python_client(path, gid),
                "c-gid": c_client("--report-peer", gid),
                "python-none": lambda path: python_client(path, None),
                "c-none": c_client("--report-peer", "none")}
        peers = {}
        for name, run in runs.items():
            reports = self.channel_reports(name, run)
            self.assertEqual(200, sum(r.n for r in reports), name)
            peers[name] = {r.peer for r in reports}
        self.assertEqual({"127.0.0.1:%d" % port}, peers["python"])
        self.assertEqual(peers["python"], peers["c"])
        self.assertEqual({wire.canonical_peer(gid)}, peers["python-gid"])
        self.assertEqual(peers["python-gid"], peers["c-gid"])
        self.assertEqual({None}, peers["python-none"])
        self.assertEqual({None}, peers["c-none"])
        self.assertEqual({None}, peers["c-default"])     # version 1: every agent reads it

    def test_the_c_server_names_the_peer_it_is_told_to(self):
        intake, port_path = self.guest_channel()
        port = self.c_server("--report-channel", port_path, "--report-interval", "0.02",
                             "--report-peer", "10.0.0.7:7788")
        client_mod.closed_loop("127.0.0.1", port, 100, concurrency=1)
        self.stop_c_server()
        win = wait_for(lambda: intake.windows().get(VM) if intake.windows().get(VM) and
                       intake.windows()[VM].count == 100 else None)
        self.assertIsNotNone(win, intake.stats())
        self.assertEqual("10.0.0.7:7788", win.peer)

    def test_the_c_program_checks_the_peer(self):
        out = subprocess.run([self.binary, "client", "--report-channel", "/dev/null",
                              "--report-peer", "server.example"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(2, out.returncode)
        self.assertIn("--report-peer", out.stderr)
        out = subprocess.run([self.binary, "client", "--report-peer", "10.0.0.7"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(2, out.returncode)
        self.assertIn("--report-peer needs", out.stderr)

    def test_the_c_status_file_needs_the_channel(self):
        out = subprocess.run([self.binary, "client", "--report-socket", "/x", "--vm", VM,
                              "--status-file", os.path.join(self.dir, "s.json")],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(2, out.returncode)
        self.assertIn("--status-file needs --report-channel", out.stderr)

    def test_the_c_program_rejects_spoofing_arguments(self):
        out = subprocess.run([self.binary, "client", "--report-channel", "/dev/null", "--vm",
                              VM], capture_output=True, text=True, timeout=60)
        self.assertEqual(2, out.returncode)
        out = subprocess.run([self.binary, "client", "--report-socket", "/x"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(2, out.returncode)


class TestCommand(LoopbackTestCase):

    def test_the_benchex_command_runs_server_and_client(self):
        proc = subprocess.Popen([sys.executable, "-m", "benchex.cli", "server", "--port",
                                 "0", "--compute-us", "50"], stdout=subprocess.PIPE, text=True)

        def stop():
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            proc.stdout.close()
        self.addCleanup(stop)
        port = int(proc.stdout.readline().rsplit(":", 1)[1])
        out = subprocess.run([sys.executable, "-m", "benchex.cli", "client", "--port",
                              str(port), "--requests", "200", "--concurrency", "2", "--json"],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(0, out.returncode, out.stderr)
        assertSane(self, json.loads(out.stdout), 200, 50.0)
