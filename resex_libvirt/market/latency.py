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

"""Latency windows (paper Alg. 2, line 6): what a VM's reports are summarised to.

The interference percentage, and the base deviation learned from calm
windows, are worked out on columns by the market (``Market._take_windows``;
the rules, and why they differ from the paper's, in
``doc/source/market.rst``).
"""

import itertools
import math
import operator

from resex_libvirt.market import records

#: How fast a VM's learned base latency deviation rises (a fraction of the gap).
DEFAULT_RISE = 0.02


def summarize(values, new=None):
    """count, mean, population standard deviation and p99 of ``values``.

    ``new``: how many of them are new since the last window handed (at
    most their count is kept), or ``None`` (not known).
    """
    n = len(values)
    if n == 0:
        return None
    mean = math.fsum(values) / n
    # fsum of each (v - mean) ** 2, the same float operations made in C, not a Python loop.
    var = math.fsum(map(pow, map(operator.sub, values, itertools.repeat(mean)),
                        itertools.repeat(2))) / n
    rank = min(n - 1, max(0, math.ceil(0.99 * n) - 1))
    if rank == n - 1:
        # Below 100 values the p99 is the largest: the last of the largest
        # in the order given, as a stable sort would place it.
        p99 = max(reversed(values))
    else:
        p99 = sorted(values)[rank]
    return records.LatencyWindow(count=n, mean_us=mean, std_us=math.sqrt(var), p99_us=p99,
                                 new=None if new is None else min(new, n))
