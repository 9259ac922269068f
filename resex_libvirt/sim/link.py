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

"""The shared link: processor sharing among the transfers in flight.

Paper Section VI-A: the testbed's InfiniBand link carries 8 Gbit/s of data
(10 Gbit/s signalling, 8b/10b), "i.e. 1 Gigabyte per second", in MTUs of
1 KiB. An HCA arbitrates among its queue pairs packet by packet; at the
scale of a request (tens of microseconds and up) that is well approximated
by *processor sharing*: while ``n`` transfers are in flight each progresses
at ``capacity / n``. This is what makes a large-buffer VM slow a small one
down (Fig. 2: the I/O wait grows with interfering load) and why the slow-down
is at most ``n``-fold for the bytes on the wire.

Deviation: no per-packet overheads, no switch buffering, no credit-based
flow control between the two hosts; the paper's two VMs share one link in
one direction, which is what this models.

Time is in integer nanoseconds (the engine's unit); bytes are floats so that
a transfer can be split exactly among concurrent ones.

With many transfers in flight (``VECTOR_FROM`` or more) the link keeps their
remaining bytes and their owners' byte counters in arrays, and one step is a
few array operations instead of a loop: the same IEEE arithmetic on each
transfer, so a run gives the same bytes to the last bit either way. The
owners' ``tx_bytes`` are then written back when a transfer completes or is
dropped and on :meth:`Link.flush` (the testbed calls it before anyone reads
the counters).
"""

import math

import numpy as np

#: Bytes below which a transfer counts as complete (float rounding).
EPSILON_BYTES = 1e-6
#: Transfers in flight from which a step runs on arrays (below, a plain loop
#: beats numpy's fixed cost per operation); back to the loop below half of it.
VECTOR_FROM = 64


class Transfer:
    """One RDMA transfer of ``size`` bytes posted by ``owner`` at ``posted_ns``."""

    __slots__ = ("owner", "size", "remaining", "posted_ns", "request")

    def __init__(self, owner, size, posted_ns, request=None):
        self.owner = owner
        self.size = float(size)
        self.remaining = float(size)
        self.posted_ns = posted_ns
        self.request = request


class Link:
    """A link of ``bytes_per_s`` shared by processor sharing.

    ``owner`` objects of transfers must have a ``tx_bytes`` float attribute;
    the link adds the bytes it carries for them as they progress, so byte
    counters are exact at any instant, mid-transfer included.
    """

    def __init__(self, bytes_per_s):
        if not bytes_per_s > 0:
            raise ValueError("bytes_per_s must be > 0")
        self.bytes_per_s = float(bytes_per_s)
        self.bytes_per_ns = self.bytes_per_s / 1e9
        self.active = []
        self.busy_ns = 0
        self._rem = None     # arrays aligned with ``active`` (array mode only)
        self._tx = None

    def post(self, transfer):
        self.active.append(transfer)
        if self._rem is not None:
            self._rem = np.append(self._rem, transfer.remaining)
            self._tx = np.append(self._tx, transfer.owner.tx_bytes)

    def drop_owner(self, owner):
        """Abort every transfer of ``owner`` (its VM stopped)."""
        if self._rem is not None:
            keep = np.fromiter((t.owner is not owner for t in self.active), bool,
                               len(self.active))
            for i in np.flatnonzero(~keep).tolist():
                self.active[i].remaining = self._rem[i].item()
                owner.tx_bytes = self._tx[i].item()
            self._rem, self._tx = self._rem[keep], self._tx[keep]
        self.active = [t for t in self.active if t.owner is not owner]

    def flush(self):
        """Write the arrays back to the transfers and their owners (array mode)."""
        if self._rem is None:
            return
        for t, rem, tx in zip(self.active, self._rem.tolist(), self._tx.tolist()):
            t.remaining = rem
            t.owner.tx_bytes = tx

    def next_completion_ns(self):
        """Nanoseconds until the first transfer in flight completes, or ``None``."""
        if not self.active:
            return None
        return self._first_completion_ns()

    def _first_completion_ns(self):
        """Nanoseconds until the first of the (non-empty) transfers in flight completes."""
        active = self.active
        if self._rem is not None:
            rem = self._rem.min().item()
        else:
            rem = active[0].remaining
            for t in active:
                if t.remaining < rem:
                    rem = t.remaining
        nxt = math.ceil(rem * len(active) / self.bytes_per_ns)
        return nxt if nxt > 1 else 1

    def step(self, now_ns, until_ns):
        """Carry traffic from ``now_ns`` to ``until_ns`` or the first completion before it.

        Returns ``(t, done)``: the time reached and the transfers completed
        there: the steps of :meth:`next_completion_ns` then :meth:`advance`
        in one call (the engine's hot loop makes one per event).
        """
        active = self.active
        n = len(active)
        if not n:
            return until_ns, ()
        if self._rem is not None or n >= VECTOR_FROM:
            done = now_ns + self._first_completion_ns()
            if done < until_ns:
                until_ns = done
            return until_ns, self._carry(until_ns - now_ns)
        # A few transfers (the common case): _first_completion_ns and _carry
        # in one pass of plain floats, the same arithmetic in the same order.
        rem = active[0].remaining
        for t in active:
            if t.remaining < rem:
                rem = t.remaining
        bytes_per_ns = self.bytes_per_ns
        done = now_ns + max(1, math.ceil(rem * n / bytes_per_ns))
        if done < until_ns:
            until_ns = done
        dt_ns = until_ns - now_ns
        self.busy_ns += dt_ns
        finished = self._share(active, bytes_per_ns * dt_ns / n)
        return until_ns, (finished or ())

    def advance(self, dt_ns):
        """Carry ``dt_ns`` of traffic; return the transfers that completed."""
        if dt_ns <= 0 or not self.active:
            return []
        return self._carry(dt_ns)

    def _carry(self, dt_ns):
        """:meth:`advance` by ``dt_ns`` > 0 with transfers in flight."""
        self.busy_ns += dt_ns
        active = self.active
        each = self.bytes_per_ns * dt_ns / len(active)
        if self._rem is None and len(active) >= VECTOR_FROM:
            self._rem = np.array([t.remaining for t in active])
            self._tx = np.array([t.owner.tx_bytes for t in active])
        elif self._rem is not None and len(active) < VECTOR_FROM // 2:
            self.flush()
            self._rem = self._tx = None
        if self._rem is not None:
            return self._advance_arrays(each)
        return self._share(active, each)

    def _share(self, active, each):
        """Carry ``each`` bytes of every transfer in ``active``; those that completed."""
        done = []
        for t in active:
            rem = t.remaining
            if each < rem:
                rem -= each
                owner = t.owner
                owner.tx_bytes += each
                if rem > EPSILON_BYTES:
                    t.remaining = rem
                    continue
                owner.tx_bytes += rem          # the float rounding's last bytes
            else:
                t.owner.tx_bytes += rem        # rem - rem would leave 0.0: nothing to add
            t.remaining = 0.0
            done.append(t)
        if done:
            self.active = [t for t in active if t.remaining > 0.0]
        return done

    def _advance_arrays(self, each):
        """The loop of :meth:`advance` as array operations, per transfer the same arithmetic."""
        rem, tx = self._rem, self._tx
        sent = np.minimum(rem, each)
        rem -= sent
        tx += sent
        finished = rem <= EPSILON_BYTES
        if not finished.any():
            return []
        tx[finished] += rem[finished]
        rem[finished] = 0.0
        active = self.active
        done = []
        for i in np.flatnonzero(finished).tolist():
            t = active[i]
            t.remaining = 0.0
            t.owner.tx_bytes = tx[i].item()
            done.append(t)
        keep = ~finished
        self.active = [active[i] for i in np.flatnonzero(keep).tolist()]
        self._rem, self._tx = rem[keep], tx[keep]
        return done
