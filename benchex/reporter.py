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

The channel is also where the agent writes the VM's status back
(:mod:`benchex.status`). A virtio port opens once (a second open is
refused), so the reporter, which holds it, is its reader: after each report
it reads what arrived, non-blocking and bounded (:data:`STATUS_READS` reads
of :data:`STATUS_READ_BYTES`), keeps the latest valid status
(:attr:`LatencyReporter.status`) and, with ``status_file``, writes it there
for ``benchex status --file`` to print.

A report may name its peer (:mod:`benchex.wire`, version 2): the reporter
writes the one it was given, or, given :data:`AUTO`, the address the client
connected to (:meth:`LatencyReporter.connected`).
"""

import errno
import json
import logging
import os
import select
import socket
import stat
import threading
import time

from benchex import stats
from benchex import status as status_mod
from benchex import wire

LOG = logging.getLogger(__name__)

#: Flush a window early at this many samples (keeps ``n`` far below the intake's bound).
MAX_SAMPLES = 100_000

#: What one look at the status costs at most: this many non-blocking reads of this many bytes.
STATUS_READS = 8
STATUS_READ_BYTES = 4096

#: ``peer``: name the address the client connects to (the server's).
AUTO = "auto"


def sockaddr_peer(sockaddr):
    """The peer text of a ``getpeername()`` result (``ADDR:PORT``, ``[ADDR]:PORT``), or None.

    An IPv6 zone (``%eth0``) is left out: it means nothing off this guest.
    """
    if not isinstance(sockaddr, tuple) or len(sockaddr) < 2:
        return None
    host, port = str(sockaddr[0]).partition("%")[0], sockaddr[1]
    return wire.canonical_peer(("[%s]:%s" if ":" in host else "%s:%s") % (host, port))


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

    def recv(self):
        """What the other end wrote, without waiting: bytes, ``b""`` if none, ``None`` at EOF."""
        if self._sock is None or not select.select([self._sock], [], [], 0)[0]:
            return b""
        try:
            return self._sock.recv(STATUS_READ_BYTES) or None
        except (BlockingIOError, InterruptedError, TimeoutError):
            return b""
        except OSError:
            return None

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
    """The guest's virtio-serial port (or a Unix socket standing in for it).

    The port is opened for reading too, so the agent's status lines can be
    read from it (:meth:`read_status`); where only writing is allowed, it is
    opened write-only and no status is read.
    """

    vm = None

    def __init__(self, path=wire.GUEST_DEVICE):
        self.path = path
        self._fd = None
        self._socket = None
        self._readable = False
        self.status = status_mod.StatusReader()

    def _open(self, is_device):
        # A virtio port is a character device, and reads what the host
        # writes; anything else (a FIFO standing in for it) is only written:
        # read-write, a FIFO would give back our own reports.
        flags = os.O_NONBLOCK | os.O_CLOEXEC
        self._readable = False
        if is_device:
            try:
                self._fd = os.open(self.path, os.O_RDWR | flags)
                self._readable = True
            except PermissionError:
                pass
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | flags)
        self.status.restart()

    def send(self, line):
        if self._socket is None and self._fd is None:
            try:
                mode = os.stat(self.path).st_mode
            except OSError:
                mode = 0
            if stat.S_ISSOCK(mode):
                self._socket = _SocketSink(self.path)
                self.status.restart()
            else:
                self._open(stat.S_ISCHR(mode))
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

    def read_status(self):
        """Read the status lines that arrived, without waiting; the latest valid one or None.

        At most :data:`STATUS_READS` reads: a host end that writes without
        pause costs the benchmark a bounded time per report.
        """
        for _ in range(STATUS_READS):
            if self._socket is not None:
                data = self._socket.recv()
            elif self._fd is not None and self._readable:
                try:
                    data = os.read(self._fd, STATUS_READ_BYTES) or None
                except (BlockingIOError, InterruptedError):
                    data = b""
                except OSError:
                    data = None
            else:
                break
            if data is None:        # the other end closed: reopen at the next report
                self.close()
                break
            if not data:
                break
            self.status.feed(data)
        return self.status.latest

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def write_status_file(path, status):
    """Write ``status`` (a dict) to ``path`` as JSON, atomically (a reader never sees half)."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(status, out, sort_keys=True)
        out.write("\n")
    os.replace(tmp, path)


class LatencyReporter:
    """Collect latencies and send one summary every ``interval_s`` (thread-safe).

    With a sink that reads the agent's status (:class:`ChannelSink`), each
    flush also reads it: :attr:`status` is the latest, and ``status_file``
    (optional) gets each new one. ``peer``: the peer the reports name (an
    address or GID, :func:`benchex.wire.canonical_peer`), :data:`AUTO` for
    the address the client connects to, or None (version 1 reports).
    """

    def __init__(self, sink, interval_s=0.1, clock=time.monotonic, status_file=None,
                 peer=None):
        if not interval_s > 0:
            raise ValueError("interval_s must be > 0")
        self.auto_peer = peer == AUTO
        #: The peer the reports name (canonical text), or None.
        self.peer = None
        if peer is not None and not self.auto_peer:
            self.peer = wire.canonical_peer(peer)
            if self.peer is None:
                raise ValueError("not a peer address or GID: %r" % (peer,))
        self.sink = sink
        self.status_file = status_file
        #: The latest status the agent sent (:func:`benchex.status.parse`), or None.
        self.status = None
        self._status_file_failed = False
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._values = []
        self._started = clock()
        self.sent = 0
        self.dropped = 0

    def connected(self, sockaddr):
        """The client is connected to ``sockaddr`` (``getpeername()``).

        With ``peer=AUTO`` the first address that is one becomes the peer.
        """
        if self.auto_peer and self.peer is None:
            self.peer = sockaddr_peer(sockaddr)

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
                               vm=self.sink.vm, peer=self.peer)
            try:
                self.sink.send(line)
                self.sent += 1
            except OSError as exc:
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 100 == 0:
                    LOG.warning("latency report to %s dropped (%d so far): %s",
                                self.sink.path, self.dropped, exc)
            self._read_status()

    def _read_status(self):
        read = getattr(self.sink, "read_status", None)
        if read is None:
            return
        status = read()
        if status is None or status == self.status:
            return
        self.status = status
        if self.status_file:
            try:
                write_status_file(self.status_file, status)
            except OSError as exc:
                if not self._status_file_failed:
                    LOG.warning("cannot write the status to %s: %s (said once)",
                                self.status_file, exc)
                self._status_file_failed = True

    def close(self):
        self.flush()
        self.sink.close()
