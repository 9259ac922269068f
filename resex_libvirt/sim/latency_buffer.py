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

"""The last latencies of each simulated VM, stamped with the market's tick: its windows."""

import collections
import itertools
import operator

from resex_libvirt.market import latency


class LatencyBuffer:
    """The last ``size`` latencies of one VM, each stamped with the market tick.

    Pure: ``tick`` is the market's interval counter, not a clock. Values older
    than ``max_age`` ticks are left out of the window so a VM that stops
    reporting stops counting.

    The ticks and the values are kept side by side, and while the values
    arrive in tick order (as a reporter sends them) the fresh ones are a run
    at the end of the buffer: a window finds where it starts from the oldest
    end (usually at once) and copies the values in one go instead of
    filtering pairs.
    """

    def __init__(self, size=64, max_age=None):
        if size < 1:
            raise ValueError("size must be >= 1")
        self.max_age = max_age
        self._ticks = collections.deque(maxlen=size)
        self._values = collections.deque(maxlen=size)
        self._last_tick = None
        #: True while every tick added was at or after the previous one.
        self._in_order = True
        #: How many values were ever added (a window is stale when this moves).
        self.added = 0

    def add(self, value_us, tick):
        self.extend((value_us,), (tick,))

    def extend(self, values_us, ticks):
        """:meth:`add` each of ``values_us`` with the tick of the same rank in ``ticks``."""
        values = list(map(float, values_us))
        ticks = list(ticks)
        if len(values) != len(ticks):
            raise ValueError("one tick per value")
        if not ticks:
            return
        last = self._last_tick
        if self._in_order and ((last is not None and ticks[0] < last) or
                               any(map(operator.gt, ticks, itertools.islice(ticks, 1, None)))):
            self._in_order = False
        self._ticks.extend(ticks)
        self._values.extend(values)
        self._last_tick = ticks[-1]
        self.added += len(values)

    def __len__(self):
        return len(self._values)

    def _fresh(self, tick):
        """``(tick, value)`` of the values at most ``max_age`` old at ``tick``."""
        max_age = self.max_age
        return [(t, v) for t, v in zip(self._ticks, self._values) if tick - t <= max_age]

    def window(self, tick):
        """A :class:`LatencyWindow` of the fresh values, or ``None``."""
        if self.max_age is not None:
            values = [v for _t, v in self._fresh(tick)]
        else:
            values = list(self._values)
        return latency.summarize(values)

    def window_since(self, tick, new=None):
        """:meth:`window` at ``tick``, and the tick of its oldest value (or ``None``).

        Without new values, the window stays the same until
        :meth:`aged` says that oldest value left it. ``new``: how many of
        the values were added since the last window handed (the window's
        ``new``, at most its count), or ``None``.
        """
        max_age = self.max_age
        if max_age is None:
            return latency.summarize(list(self._values), new), None
        if not self._in_order:
            fresh = self._fresh(tick)
            if not fresh:
                return None, None
            return latency.summarize([v for _t, v in fresh], new), min(t for t, _v in fresh)
        # Ticks in order: ``tick - t`` never grows along the buffer, so the
        # fresh values are the ones from the first fresh one to the end.
        for start, t in enumerate(self._ticks):
            if tick - t <= max_age:
                break
        else:
            return None, None
        if start == 0:
            values = list(self._values)
        else:
            values = list(itertools.islice(self._values, start, None))
        return latency.summarize(values, new), t

    def aged(self, tick, oldest):
        """True once the value stamped ``oldest`` is too old for a window at ``tick``."""
        return oldest is not None and self.max_age is not None and tick - oldest > self.max_age
