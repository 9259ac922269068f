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

"""BenchEx's TCP protocol, shared by the Python and the C (``benchex.c``) programs.

All integers are big-endian (network order).

Request, client to server: a 16-byte header then ``payload_bytes`` bytes::

    u32 magic = 0x42585131 ("BXQ1")   u32 seq   u32 payload_bytes   u32 reserved = 0

Reply, server to client: a 32-byte header then ``reply_bytes`` bytes::

    u32 magic = 0x42585231 ("BXR1")   u32 seq   u32 arrival   u32 order
    u64 server_ns   u32 reply_bytes   u32 reserved = 0

``arrival`` is the server-wide index of the request in the order its last
byte arrived, ``order`` the index in which the server processed it: the
server is first-come-first-served (paper Section IV: "The server maintains
these requests in a queue and processes them in a first come first serve
basis") exactly when the two are equal. ``server_ns`` is the time from
arrival to the end of processing (the server-side latency the paper's
BenchEx reports to its agent). A peer that sends a bad magic or a size over
:data:`MAX_BYTES` is disconnected.
"""

import struct

REQUEST = struct.Struct("!IIII")
REPLY = struct.Struct("!IIIIQII")
REQUEST_MAGIC = 0x42585131
REPLY_MAGIC = 0x42585231
#: Largest request payload or reply buffer (64 MiB).
MAX_BYTES = 64 << 20


class ProtocolError(ValueError):
    """The peer broke the protocol or closed the connection mid-message."""


def recv_exact(sock, n):
    """Read exactly ``n`` bytes; raise :class:`ProtocolError` on a short read (EOF)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ProtocolError("connection closed after %d of %d bytes" % (got, n))
        got += k
    return bytes(buf)


def discard(sock, n):
    """Read and drop ``n`` bytes."""
    chunk = bytearray(min(n, 65536) or 1)
    view = memoryview(chunk)
    while n > 0:
        k = sock.recv_into(view, min(n, len(chunk)))
        if k == 0:
            raise ProtocolError("connection closed with %d bytes to go" % n)
        n -= k


def request(seq, payload_bytes):
    return REQUEST.pack(REQUEST_MAGIC, seq & 0xFFFFFFFF, payload_bytes, 0) + bytes(payload_bytes)


def parse_request(header):
    magic, seq, payload, _reserved = REQUEST.unpack(header)
    if magic != REQUEST_MAGIC:
        raise ProtocolError("bad request magic 0x%08x" % magic)
    if payload > MAX_BYTES:
        raise ProtocolError("request payload %d over %d" % (payload, MAX_BYTES))
    return seq, payload


def reply_header(seq, arrival, order, server_ns, reply_bytes):
    return REPLY.pack(REPLY_MAGIC, seq, arrival & 0xFFFFFFFF, order & 0xFFFFFFFF,
                      max(0, server_ns), reply_bytes, 0)


def parse_reply(header):
    """``(seq, arrival, order, server_ns, reply_bytes)`` of a reply header."""
    magic, seq, arrival, order, server_ns, reply_bytes, _reserved = REPLY.unpack(header)
    if magic != REPLY_MAGIC:
        raise ProtocolError("bad reply magic 0x%08x" % magic)
    if reply_bytes > MAX_BYTES:
        raise ProtocolError("reply of %d bytes over %d" % (reply_bytes, MAX_BYTES))
    return seq, arrival, order, server_ns, reply_bytes
