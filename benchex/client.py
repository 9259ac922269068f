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

"""The BenchEx client: timestamped requests, closed-loop or open-loop.

Paper Section IV: "our clients send multiple transaction requests to the
server ..., each of which is time stamped by the client ... The clients wait
for the server results, timestamp the reply, and calculate the latency of
the request by taking a difference between the two timestamps."

* Closed loop (``concurrency`` connections, one request outstanding on
  each): measures the service the server can give.
* Open loop (``rate`` requests per second on one pipelined connection,
  sent on schedule whether or not replies came back): measures latency
  under a given load. A request's latency runs from its *scheduled* send
  time, so a stalled sender does not hide queueing (coordinated omission).

With a reporter, the reports name the server as their peer
(``peer="auto"``, :class:`benchex.reporter.LatencyReporter`): its address
and port as connected.

Both check FCFS from the replies: ``order`` must equal ``arrival`` (see
:mod:`benchex.protocol`), and on one connection orders must increase.
"""

import socket
import threading
import time

from benchex import protocol
from benchex import stats


class _Tally:
    def __init__(self, reporter):
        self.lock = threading.Lock()
        self.latencies = []
        self.fcfs_violations = 0
        self.reporter = reporter

    def record(self, latency_us, arrival, order, last_order):
        with self.lock:
            self.latencies.append(latency_us)
            if order != arrival or (last_order is not None and order <= last_order):
                self.fcfs_violations += 1
        if self.reporter is not None:
            self.reporter.add(latency_us)


def _connect(host, port, timeout):
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _name_peer(reporter, sock):
    """Tell the reporter where the requests go: the server, as connected (its reports' peer)."""
    if reporter is None:
        return
    try:
        reporter.connected(sock.getpeername())
    except OSError:     # already reset: the requests will say so
        pass


def _read_reply(sock):
    seq, arrival, order, _server_ns, reply_bytes = protocol.parse_reply(
        protocol.recv_exact(sock, protocol.REPLY.size))
    protocol.discard(sock, reply_bytes)
    return seq, arrival, order


def closed_loop(host, port, requests, concurrency=1, request_bytes=64, reporter=None,
                timeout=30.0):
    """Run ``requests`` requests over ``concurrency`` connections; return the summary dict."""
    if requests < 1 or concurrency < 1:
        raise ValueError("requests and concurrency must be >= 1")
    tally = _Tally(reporter)
    remaining = [requests]
    take_lock = threading.Lock()
    socks = [_connect(host, port, timeout) for _ in range(concurrency)]
    _name_peer(reporter, socks[0])

    def run(sock):
        last_order = None
        seq = 0
        try:
            while True:
                with take_lock:
                    if remaining[0] <= 0:
                        return
                    remaining[0] -= 1
                msg = protocol.request(seq, request_bytes)
                t0 = time.perf_counter_ns()
                sock.sendall(msg)
                rseq, arrival, order = _read_reply(sock)
                t1 = time.perf_counter_ns()
                if rseq != seq:
                    raise protocol.ProtocolError("reply %d for request %d" % (rseq, seq))
                tally.record((t1 - t0) / 1000.0, arrival, order, last_order)
                last_order = order
                seq += 1
        except (OSError, protocol.ProtocolError):
            return

    threads = [threading.Thread(target=run, args=(s,), name="benchex-client") for s in socks]
    start = time.perf_counter()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in socks:
            s.close()
    elapsed = time.perf_counter() - start
    errors = requests - len(tally.latencies)
    return stats.summarize(tally.latencies, elapsed, errors, tally.fcfs_violations)


def open_loop(host, port, requests, rate, request_bytes=64, reporter=None, timeout=30.0):
    """Send ``requests`` requests at ``rate`` per second on one connection; return the summary."""
    if requests < 1 or not rate > 0:
        raise ValueError("requests must be >= 1 and rate > 0")
    tally = _Tally(reporter)
    sock = _connect(host, port, timeout)
    _name_peer(reporter, sock)
    scheduled = [0] * requests
    interval_ns = int(1e9 / rate)
    start_ns = time.perf_counter_ns()
    send_error = []

    def send():
        try:
            for seq in range(requests):
                due = start_ns + seq * interval_ns
                delay = due - time.perf_counter_ns()
                if delay > 0:
                    time.sleep(delay / 1e9)
                scheduled[seq] = due
                sock.sendall(protocol.request(seq, request_bytes))
        except OSError as exc:
            send_error.append(exc)

    sender = threading.Thread(target=send, name="benchex-sender")
    sender.start()
    last_order = None
    received = 0
    try:
        while received < requests and not send_error:
            seq, arrival, order = _read_reply(sock)
            now = time.perf_counter_ns()
            if seq >= requests:
                raise protocol.ProtocolError("reply for unknown request %d" % seq)
            tally.record((now - scheduled[seq]) / 1000.0, arrival, order, last_order)
            last_order = order
            received += 1
    except (OSError, protocol.ProtocolError):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    finally:
        sender.join()
        sock.close()
    elapsed = (time.perf_counter_ns() - start_ns) / 1e9
    return stats.summarize(tally.latencies, elapsed, requests - received, tally.fcfs_violations)
