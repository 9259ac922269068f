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

    REPORT: --report-channel PATH                  (in a guest: the virtio-serial port)
          | --report-socket PATH --vm UUID         (on the host: the agent's probe socket)
            [--report-interval S]

The server prints ``benchex server listening on HOST:PORT`` once it
accepts connections and runs until SIGINT/SIGTERM. The client prints its
latency summary (text, or one JSON object with ``--json``). The static C
program ``benchex.c`` takes the same arguments and speaks the same protocol.
RDMA verbs (the paper's transport) are the C program's alone
(``benchex-verbs ... --transport verbs``); this one speaks TCP.
"""

import argparse
import signal
import sys
import threading

from benchex import client as client_mod
from benchex import reporter as reporter_mod
from benchex import server as server_mod
from benchex import stats
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
    return parser


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
        return None
    return reporter_mod.LatencyReporter(sink, interval_s=args.report_interval)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
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
