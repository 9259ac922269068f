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

"""A VM's recent reports, pooled into the market's latency window.

Each report summarises ``n`` latencies (mean, standard deviation, p99). The
fresh reports of a VM are pooled exactly for count, mean and population
variance (sum of ``n x (std^2 + mean^2)`` over the total, minus the pooled
mean squared), which is what IOShares uses (paper Section VI-C: "the average
and standard deviation of the values"). The pooled p99 is the largest
reported p99: an exact p99 cannot be rebuilt from summaries, and the largest
one is an upper bound that the market does not act on (it only reads the
mean and the standard deviation).

Each report keeps the sequence number the store gave it on arrival, so the
store can say how many of a window's requests are new since the window it
handed before (``LatencyWindow.new``): the ``n`` of the pooled reports that
arrived after that hand-over.

A report may name its peer (version 2 of the wire format); the window names
the peer of the newest fresh report that names one (:meth:`ReportWindow.latest_peer`),
so a VM whose application moves to another server is traced to the new one
as soon as it reports, and one that stops naming a peer keeps the last one
named until that report ages out.
"""

import collections
import math

from resex_libvirt.market import records


class ReportWindow:
    """The last ``size`` reports of one VM through one source, with arrival times.

    Each report is kept with its arrival time and its arrival number
    (``seq``, increasing across all of the store's windows).
    """

    __slots__ = ("_items",)

    def __init__(self, size):
        if size < 1:
            raise ValueError("size must be >= 1")
        self._items = collections.deque(maxlen=size)

    def __len__(self):
        return len(self._items)

    def add(self, ts, report, seq=0):
        self._items.append((ts, seq, report))

    def expire(self, now, horizon):
        """Drop reports older than ``horizon`` seconds; return how many remain."""
        items = self._items
        while items and now - items[0][0] > horizon:
            items.popleft()
        return len(items)

    def reports(self):
        return [r for _ts, _seq, r in self._items]

    def latest_peer(self):
        """``(seq, peer)`` of the newest kept report that names a peer, or ``(0, None)``."""
        for _ts, seq, r in reversed(self._items):
            if r.peer is not None:
                return seq, r.peer
        return 0, None

    def requests_after(self, seq):
        """The requests (sum of ``n``) of the kept reports that arrived after number ``seq``."""
        return sum(r.n for _ts, s, r in self._items if s > seq)


def pool(reports, new=None, peer=None):
    """One :class:`~resex_libvirt.market.records.LatencyWindow` of ``reports``, or ``None``.

    ``new``: how many of the pooled requests are new since the last window
    handed (``None``: not known); ``peer``: the peer the window names.
    """
    total = 0
    s1 = 0.0
    s2 = 0.0
    p99 = 0.0
    for r in reports:
        total += r.n
        s1 += r.n * r.mean_us
        s2 += r.n * (r.std_us * r.std_us + r.mean_us * r.mean_us)
        p99 = max(p99, r.p99_us)
    if total == 0:
        return None
    mean = s1 / total
    var = max(0.0, s2 / total - mean * mean)
    return records.LatencyWindow(count=total, mean_us=mean, std_us=math.sqrt(var), p99_us=p99,
                                 new=new, peer=peer)
