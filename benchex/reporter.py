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

"""BenchEx's reporter: latencies to the agent's intake, one v1 summary per window.

Paper Section IV: "BenchEx also provides an online monitoring interface to
an external agent ... through which it can continuously report the observed
server-side latencies." Two sinks, one per intake (``doc/source/latency.rst``):

* :class:`ChannelSink`: inside a guest, the virtio-serial port
  ``/dev/virtio-ports/org.resex.latency.0`` (opened non-blocking: when the
  host side is not connected a report is dropped, never waited for). A path
  that is a Unix socket is connected to instead, so the same code can feed a
  socket in tests.
* :class:`ProbeSocketSink`: on the host, the agent's root-only probe socket;
  each report names the measured VM.

A sink that fails drops the report, counts it, and tries again at the next
window: the benchmark never stalls on its reporting.
"""

import errno
import logging
import os
import socket
import stat
import threading
import time

from benchex import stats
from benchex import wire

LOG = logging.getLogger(__name__)

#: Flush a window early at this many samples (keeps ``n`` far below the intake's bound).
MAX_SAMPLES = 100_000


class _SocketSink:
    def __init__(self, path):
        self.path = path
        self._sock = None

    def _connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(1.0)
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        return sock

    def send(self, line):
        if self._sock is None:
            self._sock = self._connect()
        try:
            self._sock.sendall(line)
        except OSError:
            self.close()
            raise

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class ProbeSocketSink(_SocketSink):
    """The host probe socket (``[latency] probe_socket_path``); reports carry ``vm``."""

    def __init__(self, path, vm):
        super().__init__(path)
        self.vm = wire.canonical_uuid(vm)
        if self.vm is None:
            raise ValueError("--vm must be a UUID, got %r" % (vm,))


class ChannelSink:
    """The guest's virtio-serial port (or a Unix socket standing in for it)."""

    vm = None

    def __init__(self, path=wire.GUEST_DEVICE):
        self.path = path
        self._fd = None
        self._socket = None

    def send(self, line):
        if self._socket is None and self._fd is None:
            try:
                is_socket = stat.S_ISSOCK(os.stat(self.path).st_mode)
            except OSError:
                is_socket = False
            if is_socket:
                self._socket = _SocketSink(self.path)
            else:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        if self._socket is not None:
            self._socket.send(line)
            return
        try:
            written = os.write(self._fd, line)
        except OSError:
            self.close()
            raise
        if written != len(line):
            # A torn line would be rejected as malformed by the intake anyway;
            # close so the next report starts on a fresh line.
            self.close()
            raise OSError(errno.EAGAIN, "short write to %s" % self.path)

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None


class LatencyReporter:
    """Collect latencies and send one summary every ``interval_s`` (thread-safe)."""

    def __init__(self, sink, interval_s=0.1, clock=time.monotonic):
        if not interval_s > 0:
            raise ValueError("interval_s must be > 0")
        self.sink = sink
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._values = []
        self._started = clock()
        self.sent = 0
        self.dropped = 0

    def add(self, latency_us):
        """Record one latency; send the window if it is due."""
        with self._lock:
            self._values.append(float(latency_us))
            due = (len(self._values) >= MAX_SAMPLES
                   or self._clock() - self._started >= self.interval_s)
        if due:
            self.flush()

    def flush(self):
        """Send what was collected (nothing if empty)."""
        with self._lock:
            values, self._values = self._values, []
            self._started = self._clock()
            if not values:
                return
            n, mean_us, std_us, p99_us = stats.window(values)
            # The intake requires latencies > 0; a sub-microsecond mean rounds up.
            line = wire.encode(n, max(mean_us, 0.001), std_us, max(p99_us, 0.001),
                               vm=self.sink.vm)
            try:
                self.sink.send(line)
                self.sent += 1
            except OSError as exc:
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 100 == 0:
                    LOG.warning("latency report to %s dropped (%d so far): %s",
                                self.sink.path, self.dropped, exc)

    def close(self):
        self.flush()
        self.sink.close()
