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

"""Who interferes, and how a tax decays: functions over the market's columns.

Shared by the policies that tax or control interferers (paper Algorithm 2,
line 7: "the largest MTU sender other than itself"); see
``doc/source/market.rst`` for why demand, not the raw MTU rate, is compared.
"""

import math

import numpy as np

from resex_libvirt.market import table as table_mod

NONE = (0.0, None)


def demands(vms):
    """Each VM's I/O demand: its recent MTU rate scaled up by how far its cap holds it down."""
    rate, cap, limit = vms.mtu_rate, vms.cap_pct, vms.limit_pct
    held = cap < limit
    held &= cap > table_mod.ZERO
    # A rate of zero stays zero either way.
    return np.divide(rate * limit, cap, out=rate.copy(), where=held)


def top_two(demand):
    """The two largest positive demands as ``[(demand, row), ...]`` (``(0.0, None)`` if fewer).

    Ties go to the lower row, as a scan in row order keeping strict maxima would.
    """
    out = []
    if len(demand):
        first = int(np.argmax(demand))
        if demand[first] > 0.0:
            out.append((float(demand[first]), first))
            if len(demand) > 1:
                rest = demand.copy()
                rest[first] = -np.inf
                second = int(np.argmax(rest))
                if rest[second] > 0.0:
                    out.append((float(rest[second]), second))
    while len(out) < 2:
        out.append(NONE)
    return out


def largest_other(victim, demand, top, heavier):
    """Alg. 2 line 7: the row of the largest demand other than ``victim``'s, or None.

    ``top`` is :func:`top_two` of ``demand``; the interferer must demand at
    least ``heavier`` times the victim's own.
    """
    best_demand, best = next(((d, k) for d, k in top if k != victim), NONE)
    if best is None or best_demand <= 0.0 or best_demand < heavier * demand[victim]:
        return None
    return best


def ranked(rows, demand, intf, vms):
    """``rows`` ordered by (demand, interference, name), as a sort of those tuples."""
    return rows[np.lexsort((vms.name_rank()[rows], intf[rows], demand[rows]))]


def decay_factor(half_life, intervals_per_epoch):
    """Per-interval factor of ``rate - 1`` for a half-life of ``half_life`` epochs."""
    intervals = max(1e-9, half_life * intervals_per_epoch)
    return math.pow(0.5, 1.0 / intervals)
