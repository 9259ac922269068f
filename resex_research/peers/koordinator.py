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

"""``koordinator_suppress``: Koordinator's koordlet CPU suppress of best-effort pods.

Written from Koordinator's documented algorithm and defaults, not from its
code: the koordlet QoS strategy ``CPUSuppress``
(``pkg/koordlet/qosmanager/plugins/cpusuppress/cpu_suppress.go``, read on
the main branch in 2026, the v1.x API), its defaults
(``DefaultResourceThresholdStrategy`` in ``pkg/util/sloconfig``:
``cpuSuppressThresholdPercent`` 65, ``cpuSuppressPolicy`` cpuset, no
``cpuSuppressMinPercent``; ``--cpu-suppress-interval-seconds`` 1) and the
"SLO configuration" page of koordinator.sh (v1.2). Every run (1 s):

* ``suppress(BE) = capacity x threshold% - used(non-BE) - used(system)``,
  not below ``capacity x cpuSuppressMinPercent%`` when that is set;
* under the ``cfsQuota`` policy, the best-effort group's quota is that, at
  least 2 ms per 100 ms period (2% of one CPU); a change smaller than 1% of
  the node's capacity is skipped (unless it is to the minimum), and an
  increase is limited to 10% of the capacity per run ("scale up slow").

Latency is never read: the rule sees CPU usage only.

Simplifications, stated:

* **Who is best-effort**: a VM without a latency SLA; every VM with one is
  latency-sensitive (LS). Koordinator's BE pods are labelled by the
  operator; this is the mapping an operator of ResEx would make.
* **The cfsQuota policy, not the default cpuset policy**: the cpuset policy
  gives the BE pods at least 2 CPUs shared with the LS pods; a host of
  one-vCPU VMs on their own pCPUs (the paper's testbed) would never be
  throttled by it at all. The quota policy is the one a cap can express.
* **One quota for the BE group, split equally** among the BE VMs as their
  caps. A real CFS parent quota lets a busy child use an idle sibling's
  part; an equal split does not.
* **System usage** is ``system_pct`` (0: the simulated host runs nothing but
  the VMs); Koordinator subtracts the larger of the measured system usage
  and the node's reservations.
* **Usage** is each VM's mean CPU over the last period (the market's
  samples), where Koordinator reads the metric cache's last value
  (collected every second).
* **Capacity** is ``capacity_pct`` (percent of one CPU), by default the
  pCPUs the VMs share (the market's ``pcpus``), at most the sum of the VMs'
  sizes (100 per vCPU: one pCPU per vCPU, as the simulator builds the
  paper's testbed, unless a scenario gives fewer ``pcpus``).

A peer for comparison (``resex-sim compare --peers``), not a production
policy: it is not in the ``resex.policies`` entry points.
"""

import numpy as np

from resex_libvirt.market import policy
from resex_research.peers import common

#: ``beMinQuota``: 2,000 us of each 100,000 us CFS period, in percent of one CPU.
BE_MIN_QUOTA_PCT = 2.0
#: ``suppressBypassQuotaDeltaRatio``: smaller changes are skipped (share of the capacity).
BYPASS_DELTA_RATIO = 0.01
#: ``beMaxIncreaseCPUPercent``: the most the quota grows per run (share of the capacity).
MAX_INCREASE_RATIO = 0.1


class KoordinatorSuppress(policy.Policy):
    """Koordinator's BE CPU suppress, cfsQuota policy (see the module docstring)."""

    name = "koordinator_suppress"

    def __init__(self, threshold_pct=65.0, min_pct=None, period=1.0, system_pct=0.0,
                 capacity_pct=None):
        if not 0.0 < threshold_pct <= 100.0:
            raise ValueError("threshold_pct must be in (0, 100], got %r" % (threshold_pct,))
        if min_pct is not None and not 0.0 <= min_pct <= 100.0:
            raise ValueError("min_pct must be in [0, 100], got %r" % (min_pct,))
        if system_pct < 0.0:
            raise ValueError("system_pct must be >= 0")
        if capacity_pct is not None and not capacity_pct > 0.0:
            raise ValueError("capacity_pct must be > 0")
        self.threshold_pct = float(threshold_pct)
        self.min_pct = None if min_pct is None else float(min_pct)
        self.system_pct = float(system_pct)
        self.capacity_pct = capacity_pct
        self.cadence = common.Cadence(period)
        self._used = common.PeriodMean()
        self._gone = common.Departures()
        #: The BE group's quota in force (percent of one CPU); None: unset (-1).
        self.quota = None

    def capacity(self, step):
        if self.capacity_pct is not None:
            return float(self.capacity_pct)
        sizes = sum(100.0 * max(1, spec.vcpus) for spec in step.specs.values())
        return min(sizes, 100.0 * step.pcpus)

    def target(self, capacity, ls_used):
        """The BE group's quota the rule asks for, before the bypass and the slow scale-up."""
        want = capacity * self.threshold_pct / 100.0 - ls_used - self.system_pct
        if self.min_pct is not None:
            want = max(want, capacity * self.min_pct / 100.0)
        return max(want, BE_MIN_QUOTA_PCT)

    def next_quota(self, capacity, ls_used):
        """The quota written this run, or None when the change is bypassed."""
        new = self.target(capacity, ls_used)
        cur = self.quota
        if cur is not None:
            if abs(new - cur) < BYPASS_DELTA_RATIO * capacity and new != BE_MIN_QUOTA_PCT:
                return None
            if new - cur > MAX_INCREASE_RATIO * capacity:
                new = cur + MAX_INCREASE_RATIO * capacity
        return new

    def decide(self, step):
        vms = step.vms
        self._gone.prune(vms, self._used.names(), self._used.forget)
        self._used.add(vms.names, vms.cpu_pct, vms.sampled)
        if not self.cadence.tick(step.intervals_per_epoch):
            return None
        used = self._used.take()
        be = common.best_effort_rows(vms)
        if not len(be):
            return None
        ls_used = sum(used.get(vms.names[k], 0.0)
                      for k in np.flatnonzero(vms.sensitive).tolist())
        capacity = self.capacity(step)
        quota = self.next_quota(capacity, ls_used)
        if quota is None:
            return None
        self.quota = quota
        caps = vms.clamp(np.full(len(be), quota / len(be)), be)
        return common.answer(vms, be, caps)
