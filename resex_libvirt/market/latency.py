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

"""Latency windows and the interference percentage (paper Alg. 2, line 6).

"It looks at the latencies reported by the VM and computes the average and
standard deviation of the values. The percentage increase in either of these
is then returned" (Section VI-C).

Deviations, and why:

* The base mean is the VM's declared ``resex:latency_sla_us`` (what it sees
  alone); the paper measured it in a base run, which a cloud cannot do.
* The base standard deviation is learned (:class:`BaselineTracker`): it
  follows calm windows down quickly and up slowly, so it settles near the
  VM's own jitter without interference.
* The increase of the standard deviation is expressed relative to the base
  *mean*, not to the base standard deviation: a stable server (Fig. 1:
  "highly stable at around 209 us") has a near-zero deviation, and a
  relative increase of a near-zero number turns any jitter into thousands of
  percent. Relative to the mean, both terms are in the same unit: percent
  of the base latency.
"""

import collections
import itertools
import math

from resex_libvirt.market import records


def interference_pct(window, base_mean_us, base_std_us=None):
    """Interference percentage of ``window`` over the base; never negative."""
    if window is None or window.count == 0 or base_mean_us <= 0:
        return 0.0
    mean_inc = 100.0 * (window.mean_us - base_mean_us) / base_mean_us
    std_inc = 0.0
    if base_std_us is not None:
        std_inc = 100.0 * (window.std_us - base_std_us) / base_mean_us
    return max(0.0, mean_inc, std_inc)


#: How far a calm window's deviation pulls the learned one up (a fraction of the gap).
DEFAULT_RISE = 0.02


class BaselineTracker:
    """A VM's base latency standard deviation, learned from calm windows.

    A window is calm when its mean is within the VM's threshold of the base
    mean. The estimate drops at once to a lower calm value and rises by
    ``rise`` of the gap otherwise, so a burst of noise moves it little.

    This is the rule's reference, one VM at a time; the market applies it to
    every reporting VM at once (``Market._take_windows``), and a property
    test holds the two to the same answers.
    """

    def __init__(self, rise=DEFAULT_RISE):
        self.rise = rise
        self.std_us = None

    def observe(self, window, base_mean_us, threshold_pct):
        if window is None or window.count < 2:
            return self.std_us
        if 100.0 * (window.mean_us - base_mean_us) / base_mean_us > threshold_pct:
            return self.std_us
        if self.std_us is None or window.std_us < self.std_us:
            self.std_us = window.std_us
        else:
            self.std_us += self.rise * (window.std_us - self.std_us)
        return self.std_us


class LatencyBuffer:
    """The last ``size`` latencies of one VM, each stamped with the market tick.

    Pure: ``tick`` is the market's interval counter, not a clock. Values older
    than ``max_age`` ticks are left out of the window so a VM that stops
    reporting stops counting.

    The values are also kept on their own, and while they arrive in tick
    order (as a reporter sends them) the fresh ones are a run at the end of
    the buffer: a window finds where it starts from the oldest end (usually
    at once) and copies the values in one go instead of filtering pairs.
    """

    def __init__(self, size=64, max_age=None):
        if size < 1:
            raise ValueError("size must be >= 1")
        self.max_age = max_age
        self._items = collections.deque(maxlen=size)
        self._values = collections.deque(maxlen=size)
        self._last_tick = None
        #: True while every tick added was at or after the previous one.
        self._in_order = True
        #: How many values were ever added (a window is stale when this moves).
        self.added = 0

    def add(self, value_us, tick):
        value = float(value_us)
        self._items.append((tick, value))
        self._values.append(value)
        if self._in_order and self._last_tick is not None and tick < self._last_tick:
            self._in_order = False
        self._last_tick = tick
        self.added += 1

    def extend(self, values_us, ticks):
        """:meth:`add` each of ``values_us`` with the tick of the same rank in ``ticks``."""
        items, values = self._items, self._values
        last = self._last_tick
        in_order = self._in_order
        n = 0
        for value, tick in zip(values_us, ticks):
            value = float(value)
            items.append((tick, value))
            values.append(value)
            if in_order and last is not None and tick < last:
                in_order = False
            last = tick
            n += 1
        self._last_tick = last
        self._in_order = in_order
        self.added += n

    def __len__(self):
        return len(self._items)

    def window(self, tick):
        """A :class:`LatencyWindow` of the fresh values, or ``None``."""
        if self.max_age is not None:
            values = [v for t, v in self._items if tick - t <= self.max_age]
        else:
            values = list(self._values)
        return summarize(values)

    def window_since(self, tick):
        """:meth:`window` at ``tick``, and the tick of its oldest value (or ``None``).

        Without new values, the window stays the same until
        :meth:`aged` says that oldest value left it.
        """
        max_age = self.max_age
        if max_age is None:
            return summarize(list(self._values)), None
        items = self._items
        if not self._in_order:
            fresh = [(t, v) for t, v in items if tick - t <= max_age]
            if not fresh:
                return None, None
            return summarize([v for _t, v in fresh]), min(t for t, _v in fresh)
        # Ticks in order: ``tick - t`` never grows along the buffer, so the
        # fresh values are the ones from the first fresh one to the end.
        for start, (t, _v) in enumerate(items):
            if tick - t <= max_age:
                break
        else:
            return None, None
        if start == 0:
            values = list(self._values)
        else:
            values = list(itertools.islice(self._values, start, None))
        return summarize(values), t

    def aged(self, tick, oldest):
        """True once the value stamped ``oldest`` is too old for a window at ``tick``."""
        return oldest is not None and self.max_age is not None and tick - oldest > self.max_age


def summarize(values):
    """count, mean, population standard deviation and p99 of ``values``."""
    n = len(values)
    if n == 0:
        return None
    mean = math.fsum(values) / n
    var = math.fsum([(v - mean) ** 2 for v in values]) / n
    rank = min(n - 1, max(0, math.ceil(0.99 * n) - 1))
    if rank == n - 1:
        # Below 100 values the p99 is the largest: the last of the largest
        # in the order given, as a stable sort would place it.
        p99 = max(reversed(values))
    else:
        p99 = sorted(values)[rank]
    return records.LatencyWindow(count=n, mean_us=mean, std_us=math.sqrt(var), p99_us=p99)
