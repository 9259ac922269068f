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

"""Shared maths of the peer policies: their cadence and their period means.

The peers act every ``period`` epochs (1 s in every packaged scenario and in
the agent's default), on what they measured since they last acted; the
market calls a policy every interval, so each peer counts intervals
(:class:`Cadence`) and sums its readings over the period
(:class:`PeriodMean`). Pure: no clock, no I/O.
"""

import numpy as np

from resex_libvirt.market import policy

#: Why a VM has the cap it has, under a peer (the market's ``reason`` column).
PEER = "peer"


class Cadence:
    """Fires once every ``period`` epochs of ``intervals_per_epoch`` intervals."""

    def __init__(self, period):
        if not period > 0:
            raise ValueError("period must be > 0 (epochs), got %r" % (period,))
        self.period = float(period)
        self._since = 0

    def tick(self, intervals_per_epoch):
        """Count one interval; True on the last interval of each period."""
        every = max(1, round(self.period * intervals_per_epoch))
        self._since += 1
        if self._since >= every:
            self._since = 0
            return True
        return False


class PeriodMean:
    """Per-row means of a column over the intervals of one period.

    ``add(names, values, mask)`` adds this interval's values of the rows in
    ``mask``; ``take()`` returns ``{name: mean}`` of the period and starts
    the next one. Keyed by VM name, so that a VM joining or leaving the
    table mid-period shifts no one's sums.
    """

    def __init__(self):
        self._sum = {}
        self._n = {}

    def add(self, names, values, mask):
        for k in np.flatnonzero(mask).tolist():
            vm = names[k]
            self._sum[vm] = self._sum.get(vm, 0.0) + float(values[k])
            self._n[vm] = self._n.get(vm, 0) + 1

    def take(self):
        out = {vm: s / self._n[vm] for vm, s in self._sum.items()}
        self._sum, self._n = {}, {}
        return out

    def forget(self, vm):
        self._sum.pop(vm, None)
        self._n.pop(vm, None)

    def names(self):
        """The VMs it holds readings of."""
        return list(self._sum)


def best_effort_rows(vms):
    """Rows of the VMs without a latency SLA: Koordinator's BE, Crane's throttleable."""
    return np.flatnonzero(~vms.sensitive)


def answer(vms, rows, caps):
    """A peer's answer: the caps of ``rows`` that moved, and every one's reason."""
    moved = caps != vms.cap_pct[rows]
    out = policy.Answer().cap(rows[moved], caps[moved], 1.0)
    return out.why(rows, [PEER if cap < limit else policy.UNCAPPED
                          for cap, limit in zip(caps.tolist(), vms.limit_pct[rows].tolist())])


class Departures:
    """Calls ``forget(vm)`` for each VM that left since the last step.

    A peer keeps its per-VM state by VM name; the step's rows say who is
    here (``vms.row_of``), and ``vms.version`` moves when one joins or leaves.
    """

    def __init__(self):
        self._version = None

    def prune(self, vms, known, forget):
        """``forget(vm)`` for every VM of ``known`` (names) no longer among ``vms``."""
        if vms.version == self._version:
            return
        self._version = vms.version
        for vm in [vm for vm in known if vm not in vms.row_of]:
            forget(vm)
