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

"""QEMU's side of a virtio-serial ``<channel type='unix'>``, played with real sockets.

QEMU binds and listens on the host path (``<source mode='bind'>``); the
agent connects; bytes the guest writes into its port come out of that
connection. :class:`FakeQemuChannel` binds the path, accepts the agent and
forwards what the "guest" writes, either directly (:meth:`guest_write`) or
from a FIFO standing in for ``/dev/virtio-ports/org.resex.latency.0``
(:meth:`forward_from_fifo`), which is how a guest program's writes look.
The channel carries the agent's status the other way: :meth:`guest_read`
reads it as the guest would, and :meth:`relay_to_guest` gives the guest a
Unix socket standing in for its port, both ways (BenchEx's ``ChannelSink``
connects to a socket path as it opens a port).
"""

import functools
import os
import selectors
import socket
import threading

from tests import machine


#: Poll a predicate until true; its last value (the caller asserts on it).
wait_for = functools.partial(machine.wait_for, timeout=20.0, step=0.01)


class FakeQemuChannel:

    def __init__(self, path):
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(1)
        self.listener.settimeout(20.0)
        self.conn = None
        self._fifo_thread = None
        self._stop = threading.Event()

    def accept(self):
        """Wait for the agent to connect (QEMU's chardev serves one client)."""
        self.conn, _ = self.listener.accept()
        return self.conn

    def guest_write(self, data):
        self.conn.sendall(data)

    def guest_read(self, timeout=0.2):
        """What the agent wrote that the guest reads now (waits ``timeout`` for the first)."""
        self.conn.settimeout(timeout)
        chunks = []
        try:
            while True:
                data = self.conn.recv(65536)
                if not data:
                    break
                chunks.append(data)
                self.conn.settimeout(0.05)
        except (TimeoutError, BlockingIOError):
            pass
        finally:
            self.conn.settimeout(None)
        return b"".join(chunks)

    def relay_to_guest(self, guest_path):
        """Make the Unix socket ``guest_path`` the guest's port, both ways (after :meth:`accept`).

        Like QEMU, a guest that does not read leaves the agent's bytes in
        the agent's socket: the relay only reads them once the guest is there.
        """
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(guest_path)
        listener.listen(1)
        listener.settimeout(20.0)

        def pump():
            try:
                guest, _ = listener.accept()
            except OSError:
                return
            finally:
                listener.close()
            sel = selectors.DefaultSelector()
            sel.register(guest, selectors.EVENT_READ, self.conn)
            sel.register(self.conn, selectors.EVENT_READ, guest)
            try:
                while not self._stop.is_set():
                    for key, _ in sel.select(0.05):
                        data = key.fileobj.recv(65536)
                        if not data:
                            return
                        key.data.sendall(data)
            except OSError:
                pass
            finally:
                sel.close()
                guest.close()

        self._fifo_thread = threading.Thread(target=pump, name="fake-qemu-relay")
        self._fifo_thread.start()

    def forward_from_fifo(self, fifo_path):
        """Make ``fifo_path`` the guest's port: bytes written into it reach the agent."""
        os.mkfifo(fifo_path)
        fd = os.open(fifo_path, os.O_RDONLY | os.O_NONBLOCK)

        def pump():
            try:
                while not self._stop.is_set():
                    try:
                        data = os.read(fd, 65536)
                    except BlockingIOError:
                        data = None
                    if data:
                        self.conn.sendall(data)
                    else:
                        self._stop.wait(0.005)
            finally:
                os.close(fd)

        self._fifo_thread = threading.Thread(target=pump, name="fake-qemu-fifo")
        self._fifo_thread.start()

    def hang_up(self):
        """The VM stopped: QEMU closes the connection and the socket."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def close(self):
        self._stop.set()
        if self._fifo_thread is not None:
            self._fifo_thread.join()
        self.hang_up()
        self.listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
