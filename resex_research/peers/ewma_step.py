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

"""``ewma_step``: a Caelus-style detector, an EWMA of latency against a threshold.

Written from the description of Tencent Caelus's online-latency
interference detection and its CPU manager, not from its code: the EWMA
detector (``pkg/caelus/detection/ewma.go``: a moving average of age ``n``,
VividCortex's ``ewma``, weight ``2 / (n + 1)``) feeding the QoS manager that
lowers the offline (batch) jobs' CPU (``pkg/caelus/qos/manager``, never
below ``minCpuBtPercent`` = 10%), read on the main branch in 2026. Every
period (1 s):

* each latency-sensitive VM's latency over the period (the mean of its
  windows) enters its EWMA: ``e <- e + 2 / (age + 1) x (lat - e)``, the first
  reading as it is;
* when any sensitive VM's EWMA is over its SLA (``latency_sla_us x (1 +
  interference_threshold_pct / 100)``), every best-effort VM (no latency SLA)
  has its cap stepped down by ``step_pct`` of itself, never below
  ``min_ratio_pct`` of its limit; otherwise each steps back up by
  ``step_pct`` of itself, up to its limit.

Simplifications, stated:

* **The threshold is the SLA**: Caelus's EWMA detector flags a reading more
  than three standard deviations from the average (and waits for 11
  readings); the issue's and an operator's reading of such a detector is a
  threshold on the latency it smooths, which is what is measured here.
* **The offenders are every VM without a latency SLA**, as Caelus lowers the
  offline class as a whole: it has no blame of its own.
* **One step rule both ways** (multiplicative, ``step_pct``), where Caelus
  recomputes the offline jobs' CPU from the node's usage.

A peer for comparison (``resex-sim compare --peers``), not a production
policy: it is not in the ``resex.policies`` entry points.
"""

import numpy as np

from resex_libvirt.market import policy
from resex_research.peers import common


class EWMAStep(policy.Policy):
    """EWMA of the sensitive VMs' latency against their SLA, step on the others' caps."""

    name = "ewma_step"

    def __init__(self, period=1.0, age=10.0, step_pct=10.0, min_ratio_pct=10.0):
        if not age >= 1.0:
            raise ValueError("age must be >= 1, got %r" % (age,))
        if not 0.0 < step_pct < 100.0 or not 0.0 <= min_ratio_pct <= 100.0:
            raise ValueError("step_pct must be in (0, 100) and min_ratio_pct in [0, 100]")
        self.alpha = 2.0 / (float(age) + 1.0)
        self.step = float(step_pct) / 100.0
        self.min_ratio = float(min_ratio_pct) / 100.0
        self.cadence = common.Cadence(period)
        self._lat = common.PeriodMean()
        #: Each sensitive VM's EWMA of its latency (us).
        self.ewma = {}
        #: Each stepped VM's cap (percent); a VM not here is at its limit.
        self.held = {}
        self._gone = common.Departures()

    def observe(self, lat):
        """Feed one period's latencies ``{vm: us}``; return the VMs whose EWMA is over."""
        for vm, value in lat.items():
            e = self.ewma.get(vm)
            self.ewma[vm] = value if e is None else e + self.alpha * (value - e)
        return self.ewma

    def decide(self, step):
        t = step.vms
        self._gone.prune(t, self._lat.names() + list(self.ewma) + list(self.held), self._forget)
        self._lat.add(t.names, t.window_mean_us, t.reported & (t.window_count > 0) & t.sensitive)
        if not self.cadence.tick(step.intervals_per_epoch):
            return None
        ewma = self.observe(self._lat.take())
        over = False
        for k in np.flatnonzero(t.sensitive).tolist():
            e = ewma.get(t.names[k])
            bound = t.latency_sla_us[k] * (1.0 + t.threshold_pct[k] / 100.0)
            if e is not None and bound > 0.0 and e > bound:
                over = True
        be = common.best_effort_rows(t)
        if not len(be):
            return None
        caps = []
        for k in be.tolist():
            vm, limit = t.names[k], float(t.limit_pct[k])
            cur = self.held.get(vm, limit)
            if over:
                new = max(cur * (1.0 - self.step), limit * self.min_ratio)
            else:
                new = min(cur * (1.0 + self.step), limit)
            if new >= limit:
                self.held.pop(vm, None)
            else:
                self.held[vm] = new
            caps.append(new)
        return common.answer(t, be, t.clamp(np.array(caps), be))

    def _forget(self, vm):
        self._lat.forget(vm)
        self.ewma.pop(vm, None)
        self.held.pop(vm, None)
