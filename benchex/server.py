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

"""The BenchEx server: requests queued first-come-first-served, priced, answered.

Paper Section IV: clients post transactions; "the server maintains these
requests in a queue and processes them in a first come first serve basis"
and prices options (Black-Scholes) for each. Here one reader thread per
connection frames requests and appends them, under one lock, to one FIFO
with a server-wide arrival index; one worker thread pops the FIFO, prices
for ``compute_us`` and answers with ``reply_bytes`` bytes. One worker is what
makes the order FCFS across connections (each reply carries its arrival and
processing indices so clients can check). Native threads only.
"""

import collections
import logging
import socket
import threading
import time

from benchex import pricing
from benchex import protocol

LOG = logging.getLogger(__name__)


class BenchexServer:
    """``BenchexServer(host, port, compute_us, reply_bytes, reporter=None)``; port 0 = any."""

    def __init__(self, host="127.0.0.1", port=0, compute_us=10.0, reply_bytes=64,
                 reporter=None):
        if compute_us < 0 or not 0 <= reply_bytes <= protocol.MAX_BYTES:
            raise ValueError("compute_us must be >= 0 and reply_bytes within 0..%d"
                             % protocol.MAX_BYTES)
        self.compute_us = compute_us
        self.reply_bytes = reply_bytes
        self.reporter = reporter
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, port))
        self._listener.listen(128)
        self._listener.settimeout(0.2)
        self.address = self._listener.getsockname()[:2]
        self._queue = collections.deque()
        self._cond = threading.Condition()
        self._arrivals = 0
        self._processed = 0
        self._stop = threading.Event()
        self._conns = set()
        self._readers = []
        self._threads = []
        self._payload = bytes(reply_bytes)
        self._closed = False

    @property
    def processed(self):
        return self._processed

    def start(self):
        for target, name in ((self._accept_loop, "benchex-accept"),
                             (self._work_loop, "benchex-worker")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def serve_forever(self):
        self.start()
        try:
            while not self._stop.wait(1.0):
                pass
        finally:
            self.close()

    def close(self):
        """Stop every thread, close every connection, flush the reporter (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        self._listener.close()
        for conn in list(self._conns):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._readers:
            t.join()
        for conn in list(self._conns):
            conn.close()
        self._conns.clear()
        if self.reporter is not None:
            self.reporter.close()

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                conn, _addr = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                raise
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conns.add(conn)
            t = threading.Thread(target=self._read_loop, args=(conn,), name="benchex-reader",
                                 daemon=True)
            self._readers = [r for r in self._readers if r.is_alive()]
            self._readers.append(t)
            t.start()

    def _read_loop(self, conn):
        lock = threading.Lock()
        try:
            while not self._stop.is_set():
                seq, payload = protocol.parse_request(
                    protocol.recv_exact(conn, protocol.REQUEST.size))
                protocol.discard(conn, payload)
                with self._cond:
                    arrival = self._arrivals
                    self._arrivals += 1
                    self._queue.append((conn, lock, seq, arrival, time.perf_counter_ns()))
                    self._cond.notify()
        except (protocol.ProtocolError, OSError) as exc:
            LOG.debug("benchex connection ends: %s", exc)
        finally:
            if self._stop.is_set():
                return
            self._conns.discard(conn)
            try:
                conn.close()
            except OSError:
                pass

    def _work_loop(self):
        seed = 0
        while True:
            with self._cond:
                while not self._queue and not self._stop.is_set():
                    self._cond.wait(0.5)
                if self._stop.is_set():
                    return
                conn, lock, seq, arrival, t_arrival = self._queue.popleft()
            count, _checksum = pricing.work(self.compute_us, seed)
            seed += count
            order = self._processed
            self._processed += 1
            server_ns = time.perf_counter_ns() - t_arrival
            try:
                with lock:
                    conn.sendall(protocol.reply_header(seq, arrival, order, server_ns,
                                                       self.reply_bytes) + self._payload)
            except OSError as exc:
                LOG.debug("benchex reply to a closed connection: %s", exc)
            if self.reporter is not None:
                self.reporter.add(server_ns / 1000.0)
