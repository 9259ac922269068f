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
"""

import math

#: Bytes below which a transfer counts as complete (float rounding).
EPSILON_BYTES = 1e-6


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

    def post(self, transfer):
        self.active.append(transfer)

    def drop_owner(self, owner):
        """Abort every transfer of ``owner`` (its VM stopped)."""
        self.active = [t for t in self.active if t.owner is not owner]

    def next_completion_ns(self):
        """Nanoseconds until the first transfer in flight completes, or ``None``."""
        if not self.active:
            return None
        rem = min(t.remaining for t in self.active)
        return max(1, math.ceil(rem * len(self.active) / self.bytes_per_ns))

    def advance(self, dt_ns):
        """Carry ``dt_ns`` of traffic; return the transfers that completed."""
        if dt_ns <= 0 or not self.active:
            return []
        self.busy_ns += dt_ns
        each = self.bytes_per_ns * dt_ns / len(self.active)
        done = []
        for t in self.active:
            sent = each if each < t.remaining else t.remaining
            t.remaining -= sent
            t.owner.tx_bytes += sent
            if t.remaining <= EPSILON_BYTES:
                t.owner.tx_bytes += t.remaining
                t.remaining = 0.0
                done.append(t)
        if done:
            self.active = [t for t in self.active if t.remaining > 0.0]
        return done
