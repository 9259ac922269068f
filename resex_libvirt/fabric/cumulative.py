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

"""A monotonic total from the raw readings of one hardware counter.

Hardware counters come in three behaviours, and a monitor must hand the
agent cumulative values that only go up (the agent's
:class:`~resex_libvirt.counters.DeltaTracker` then takes deltas):

``plain``
    64-bit counters (IB ``PortCountersExtended``, ``IFLA_VF_STATS``,
    libvirt's interface stats): they never wrap in practice; a reading below
    the last one is a reset (driver reload, device re-plugged, VF
    re-created) and the new interval counts from zero.
``saturating``
    32-bit IB ``PortCounters`` (IBA 16.1.3.5): they stop at all ones
    (0xFFFFFFFF) and stay there until someone resets them (``perfquery -R``).
    At 4X EDR ``port_xmit_data`` (4-octet words) saturates after 16 GiB,
    about 1.4 s of full-rate traffic. Once stuck, the traffic is unknowable:
    we count what we saw up to the saturation value, then nothing, and flag
    the counter :attr:`saturated` so the monitor can say so (never invented
    traffic, never a negative delta). The reported usage is then a lower
    bound. A reading that later drops below the stuck value is a reset:
    counting resumes from zero and the flag clears. A reading above
    0xFFFFFFFF proves the counter is really 64 bits wide (the kernel shows
    extended counters under the legacy names when the PMA advertises
    them): it is promoted to ``plain``.
``wrapping``
    counters of a known width that roll over (some software devices): a
    reading below the last one is a wrap when the wrapped delta is at most
    ``max_delta`` (what the link can carry in one interval), else a reset.
"""

from resex_libvirt import counters as counters_mod

KINDS = ("plain", "saturating", "wrapping")


class CumulativeCounter:
    """One counter's readings turned into a total that never decreases."""

    def __init__(self, kind="plain", bits=32, max_delta=None):
        if kind not in KINDS:
            raise ValueError("kind must be one of %s, got %r" % (KINDS, kind))
        self.kind = kind
        self.bits = bits
        self.total = 0
        self.saturated = False
        self.readings = 0
        self._tracker = counters_mod.DeltaTracker(
            bits=bits if kind == "wrapping" else None, max_delta=max_delta)

    @property
    def limit(self):
        return (1 << self.bits) - 1

    def update(self, raw):
        """Record a raw reading; return the total so far (0 after the first reading)."""
        raw = int(raw)
        if raw < 0:
            raise ValueError("counter reading must be >= 0, got %d" % raw)
        self.readings += 1
        if self.kind == "saturating" and raw > self.limit:
            self.kind = "plain"
            self.saturated = False
        delta = self._tracker.update("c", raw)
        if delta:
            self.total += delta
        if self.kind == "saturating":
            self.saturated = raw == self.limit
        return self.total
