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

"""Deltas of cumulative counters that never go negative.

CPU time from libvirt, byte counters from sysfs, netlink or libvirt's
interface stats are cumulative. A counter can wrap (32-bit legacy IB
counters), saturate (IB PMA counters stick at their maximum), or reset (VM
rebooted, device re-plugged, driver reloaded). :class:`DeltaTracker` turns
readings into per-interval usage that is never negative: a reading below the
last one is a wrap when the counter's width is known and the wrapped delta is
plausible, otherwise a reset whose first interval counts from zero.
"""


class DeltaTracker:
    """Per-key deltas of cumulative counters.

    ``bits`` is the counter width when it wraps (``None`` for 64-bit or
    unknown). ``max_delta`` bounds what one interval can plausibly add; a
    wrapped delta above it is treated as a reset instead.
    """

    def __init__(self, bits=None, max_delta=None):
        self.bits = bits
        self.max_delta = max_delta
        self._last = {}

    def update(self, key, value):
        """Record ``value`` for ``key``; return the delta since the last reading.

        The first reading of a key returns ``None`` (no interval yet).
        """
        value = int(value)
        last = self._last.get(key)
        self._last[key] = value
        if last is None:
            return None
        if value >= last:
            delta = value - last
            if self.max_delta is not None and delta > self.max_delta:
                return 0
            return delta
        if self.bits is not None:
            wrapped = (1 << self.bits) - last + value
            if self.max_delta is None or wrapped <= self.max_delta:
                return wrapped
        # A reset: the counter restarted from zero during the interval.
        if self.max_delta is not None and value > self.max_delta:
            return 0
        return value

    def forget(self, key):
        self._last.pop(key, None)

    def keys(self):
        return set(self._last)

    def retain(self, keys):
        """Forget every key not in ``keys``."""
        for key in set(self._last) - set(keys):
            del self._last[key]
