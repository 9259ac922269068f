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

"""Newline framing with a hard bound on buffered bytes.

A stream socket delivers reports in arbitrary pieces. :class:`LineFramer`
reassembles lines but never holds more than ``max_bytes - 1`` pending bytes:
a line that would exceed ``max_bytes`` (newline included) is reported once as
too long at the moment it crosses the bound, and the rest of it is skipped,
unbuffered, up to the next newline. So a tenant writing an endless line costs
the agent a bounded amount of memory and one counted rejection, and a host
end writing an endless status line costs the guest as little
(:class:`benchex.status.StatusReader`). Standard library only, like the rest
of BenchEx: the agent's intake and the guest's status reader share it.
"""

#: Marker yielded in place of a line that was too long.
TOO_LONG = None


class LineFramer:
    """Split a byte stream into lines of at most ``max_bytes`` (with newline)."""

    __slots__ = ("max_bytes", "_buf", "_discarding")

    def __init__(self, max_bytes):
        if max_bytes < 2:
            raise ValueError("max_bytes must be >= 2")
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._discarding = False

    @property
    def pending(self):
        """Bytes held while waiting for the end of a line (always < ``max_bytes``)."""
        return len(self._buf)

    @property
    def mid_line(self):
        """True while part of a line has arrived and not its end (skipped bytes included)."""
        return bool(self._buf) or self._discarding

    def feed(self, data):
        """Return the lines completed by ``data`` (bytes, without newline).

        A too-long line appears once as :data:`TOO_LONG`.
        """
        out = []
        start = 0
        limit = self.max_bytes
        buf = self._buf
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if self._discarding:
                self._discarding = False
            elif len(buf) + (end - start) + 1 > limit:
                out.append(TOO_LONG)
            elif buf:
                buf += data[start:end]
                out.append(bytes(buf))
            else:
                out.append(bytes(data[start:end]))
            buf.clear()
            start = end + 1
        rest = len(data) - start
        if rest and not self._discarding:
            if len(buf) + rest + 1 > limit:
                out.append(TOO_LONG)
                self._discarding = True
                buf.clear()
            else:
                buf += data[start:]
        return out
