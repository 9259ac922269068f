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

"""``benchex``: the trading-exchange latency benchmark (paper Section IV), over TCP.

::

    benchex server [--bind ADDR] [--port N] [--compute-us US] [--reply-bytes N] [REPORT]
    benchex client [--host H] [--port N] (--rate R | --concurrency C) [--requests N]
                   [--request-bytes N] [--json] [REPORT]
    benchex status [--file PATH | --port PATH] [--wait S] [--json]

    REPORT: --report-channel PATH [--status-file PATH]  (in a guest: the virtio-serial port)
          | --report-socket PATH --vm UUID              (on the host: the agent's probe socket)
            [--report-interval S] [--report-peer ADDR|auto|none]

The server prints ``benchex server listening on HOST:PORT`` once it
accepts connections and runs until SIGINT/SIGTERM. The client prints its
latency summary (text, or one JSON object with ``--json``). The static C
program ``benchex.c`` takes the same arguments and speaks the same protocol.
RDMA verbs (the paper's transport) are the C program's alone
(``benchex-verbs ... --transport verbs``); this one speaks TCP.

``benchex status`` prints the status the agent sends back down the latency
channel (:mod:`benchex.status`): whether the VM's SLA is met, its window,
and its CPU cap and why. A virtio port opens once, so while a server or
client reports on the channel it is their reporter that reads the status:
give them ``--status-file PATH`` and read it with ``benchex status --file
PATH``. Otherwise ``benchex status`` opens the port itself and waits up to
``--wait`` seconds for a line. Exit status: 0, or 3 when no status came.

``--report-peer`` names the other end of the measured requests in each
report (:mod:`benchex.wire`, version 2): an address (``A.B.C.D[:PORT]``,
an IPv6 address or ``[IPV6]:PORT``) or a GID; ``auto`` the server as the
client connected to it; ``none`` (the default) no peer, which writes
version 1 reports: an agent older than version 2 rejects every version 2
report, and a tenant's guest may get a new BenchEx before its host gets a
new agent.
"""

import argparse
import functools
import json
import os
import select
import signal
import socket
import stat
import sys
import threading
import time

from benchex import client as client_mod
from benchex import reporter as reporter_mod
from benchex import server as server_mod
from benchex import stats
from benchex import status as status_mod
from benchex import wire

DEFAULT_PORT = 7788


def _positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _non_negative_int(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def _add_report_args(parser):
    group = parser.add_argument_group("reporting to the resex agent")
    where = group.add_mutually_exclusive_group()
    where.add_argument("--report-channel", metavar="PATH",
                       help="the guest's latency port (%s)" % wire.GUEST_DEVICE)
    where.add_argument("--report-socket", metavar="PATH",
                       help="the agent's host probe socket ([latency] probe_socket_path)")
    group.add_argument("--vm", metavar="UUID",
                       help="the measured VM (with --report-socket)")
    group.add_argument("--report-interval", type=_positive_float, default=0.1, metavar="S",
                       help="seconds per reported window (default 0.1)")
    group.add_argument("--report-peer", metavar="ADDR|auto|none",
                       help="the peer the reports name: an address (A.B.C.D[:PORT], IPV6 or "
                            "[IPV6]:PORT) or a GID; auto: the server as the client "
                            "connected to it; none (the default): no peer, version 1 "
                            "reports, which every agent reads")
    group.add_argument("--status-file", metavar="PATH",
                       help="with --report-channel: write each status the agent sends back "
                            "to PATH (JSON), for benchex status --file")


def build_parser():
    parser = argparse.ArgumentParser(prog="benchex", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    srv = sub.add_parser("server", help="queue, price (Black-Scholes) and answer requests")
    srv.add_argument("--bind", default="127.0.0.1")
    srv.add_argument("--port", type=_non_negative_int, default=DEFAULT_PORT)
    srv.add_argument("--compute-us", type=float, default=10.0,
                     help="Black-Scholes pricing time per request, us (default 10)")
    srv.add_argument("--reply-bytes", type=_non_negative_int, default=64,
                     help="reply buffer size in bytes (default 64)")
    _add_report_args(srv)
    cli = sub.add_parser("client", help="send timestamped requests and summarise latencies")
    cli.add_argument("--host", default="127.0.0.1")
    cli.add_argument("--port", type=_non_negative_int, default=DEFAULT_PORT)
    mode = cli.add_mutually_exclusive_group()
    mode.add_argument("--rate", type=_positive_float,
                      help="open loop: requests per second on one pipelined connection")
    mode.add_argument("--concurrency", type=_positive_int, default=1,
                      help="closed loop: connections with one request outstanding (default 1)")
    cli.add_argument("--requests", type=_positive_int, default=10000)
    cli.add_argument("--request-bytes", type=_non_negative_int, default=64)
    cli.add_argument("--json", action="store_true", help="print one JSON object")
    _add_report_args(cli)
    sts = sub.add_parser("status", help="print the VM's status the agent sends on the channel")
    where = sts.add_mutually_exclusive_group()
    where.add_argument("--file", metavar="PATH",
                       help="the --status-file of a running benchex server or client")
    where.add_argument("--port", metavar="PATH", default=wire.GUEST_DEVICE,
                       help="the latency port, read directly (default %(default)s)")
    sts.add_argument("--wait", type=_positive_float, default=6.0, metavar="S",
                     help="seconds to wait for a status on the port (default 6: the agent "
                          "repeats an unchanged status every 5 s)")
    sts.add_argument("--json", action="store_true", help="print the status as JSON")
    return parser


def _open_port(path):
    """``(fd, close)`` of the port (or a Unix socket standing in for it), non-blocking."""
    if stat.S_ISSOCK(os.stat(path).st_mode):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        return sock.fileno(), sock.close
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    return fd, functools.partial(os.close, fd)


def read_port(path, wait_s, clock=time.monotonic):
    """The latest valid status read from the port within ``wait_s`` seconds, or None.

    Returns as soon as a status came and nothing more is waiting.
    """
    reader = status_mod.StatusReader()
    fd, close = _open_port(path)
    deadline = clock() + wait_s
    try:
        while True:
            left = deadline - clock()
            if left <= 0:
                return reader.latest
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if not ready:
                if reader.latest is not None:
                    return reader.latest
                continue
            try:
                data = os.read(fd, status_mod.MAX_BYTES * 4)
            except (BlockingIOError, InterruptedError):
                continue
            if not data:
                return reader.latest
            reader.feed(data)
    finally:
        close()


def status_main(args):
    try:
        if args.file:
            with open(args.file, "rb") as f:
                found = status_mod.parse(f.read(status_mod.MAX_BYTES + 1).rstrip(b"\n"))
        else:
            found = read_port(args.port, args.wait)
    except OSError as exc:
        print("benchex status: %s" % exc, file=sys.stderr)
        return 2
    if found is None:
        print("benchex status: no status %s" % (
            "in %s" % args.file if args.file else
            "from %s within %g s (is the agent's status on? [latency] status_interval_s)"
            % (args.port, args.wait)), file=sys.stderr)
        return 3
    print(json.dumps(found, sort_keys=True) if args.json else status_mod.render(found),
          flush=True)
    return 0


def _reporter(args, parser):
    if args.report_socket:
        if not args.vm:
            parser.error("--report-socket needs --vm UUID")
        try:
            sink = reporter_mod.ProbeSocketSink(args.report_socket, args.vm)
        except ValueError as exc:
            parser.error(str(exc))
    elif args.report_channel:
        if args.vm:
            parser.error("--vm is not allowed with --report-channel: the channel is the identity")
        sink = reporter_mod.ChannelSink(args.report_channel)
    else:
        if args.status_file:
            parser.error("--status-file needs --report-channel")
        if args.report_peer:
            parser.error("--report-peer needs --report-channel or --report-socket")
        return None
    if args.status_file and not args.report_channel:
        parser.error("--status-file needs --report-channel: the status comes down the channel")
    peer = args.report_peer or "none"
    if peer == "none":
        peer = None
    elif peer != reporter_mod.AUTO and wire.canonical_peer(peer) is None:
        parser.error("--report-peer: not an address, GID, auto or none: %s" % peer)
    return reporter_mod.LatencyReporter(sink, interval_s=args.report_interval,
                                        status_file=args.status_file, peer=peer)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "status":
        return status_main(args)
    reporter = _reporter(args, parser)
    if args.command == "server":
        if args.compute_us < 0:
            parser.error("--compute-us must be >= 0")
        server = server_mod.BenchexServer(args.bind, args.port, args.compute_us,
                                          args.reply_bytes, reporter=reporter)
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_a: stop.set())
        server.start()
        print("benchex server listening on %s:%d" % server.address, flush=True)
        try:
            while not stop.wait(0.5):
                pass
        finally:
            server.close()
        return 0
    try:
        if args.rate:
            summary = client_mod.open_loop(args.host, args.port, args.requests, args.rate,
                                           args.request_bytes, reporter=reporter)
        else:
            summary = client_mod.closed_loop(args.host, args.port, args.requests,
                                             args.concurrency, args.request_bytes,
                                             reporter=reporter)
    except OSError as exc:
        print("benchex client: %s" % exc, file=sys.stderr)
        return 2
    finally:
        if reporter is not None:
            reporter.close()
    print(stats.render(summary, as_json=args.json), flush=True)
    return 0 if summary["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
