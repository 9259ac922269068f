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

"""``crane_throttle``: Crane's NodeQOS watermark with the throttle avoidance action.

Written from Crane's documented algorithm and defaults, not from its code:
the "Interference Detection and Active Avoidance" page of gocrane.io
(``NodeQOS``, ``AvoidanceAction``, ``PodQOS``), the crane-agent's
``--collect-interval`` (10 s), the anomaly analyzer
(``pkg/ensurance/analyzer/analyzer.go``) and the CPU throttle executor
(``pkg/ensurance/executor/cpu_usage.go``, ``throttle.go``), read on the
main branch in 2026 (the ``ensurance.crane.io/v1alpha1`` API):

* every collection (10 s) the node metric (here ``cpu_total_utilization``,
  percent of the node's capacity) is compared with the rule's watermark;
  ``avoidanceThreshold`` (2) readings in a row over it trigger the action,
  ``restoreThreshold`` (2) readings in a row under it restore;
* triggered: the throttleable pods (``PodQOS``: BestEffort), highest CPU
  usage first, each get ``quota x (1 - stepCPURatio%)`` (their usage when no
  quota is set), never below ``max(request, limit x minCPURatio%)``, one
  after the other until the CPU they release covers the gap between the
  usage and the watermark;
* restored: the throttled pods, in the same order, each get
  ``quota x (1 + stepCPURatio%)`` up to their limit (unset at the limit),
  until the headroom under the watermark is used, once ``coolDownSeconds``
  (300) have passed since the last trigger.

Latency is never read: the rule sees the node's CPU usage only.

Simplifications, stated:

* **The watermark** is ``watermark_pct`` of the node's capacity, 65 by
  default: Crane ships no default (its examples use ``cpu_total_usage``
  4,000 and 6,000 millicores on their own nodes); 65 is Koordinator's
  default threshold, so that both peers watch the same line.
* **Throttleable** means a VM without a latency SLA; **request** is the
  VM's mClock reservation, **limit** its cap limit (its size by default).
* **The cool-down** gates the steps back up, as the throttle action's
  ``coolDownSeconds`` reads in the documentation; the analyzer read checks
  it only before re-enabling scheduling, so the real Crane may step back up
  sooner (``cool_down=0`` gives that reading).
* **Usage** is each VM's mean CPU over the collection period (the market's
  samples), the node's the sum of the VMs' (no system usage).
* **Capacity** as for :mod:`.koordinator`: ``capacity_pct``, or the pCPUs
  the VMs share, at most the sum of their sizes.

With the default cadence the action cannot come before two collections
(20 s): a run shorter than that is an uncontrolled run.

A peer for comparison (``resex-sim compare --peers``), not a production
policy: it is not in the ``resex.policies`` entry points.
"""

import numpy as np

from resex_libvirt.market import policy
from resex_research.peers import common


class CraneThrottle(policy.Policy):
    """Crane's watermark and CPU throttle (see the module docstring)."""

    name = "crane_throttle"

    def __init__(self, watermark_pct=65.0, period=10.0, avoidance_threshold=2,
                 restore_threshold=2, step_pct=10.0, min_ratio_pct=10.0, cool_down=300.0,
                 capacity_pct=None):
        if not 0.0 < watermark_pct <= 100.0:
            raise ValueError("watermark_pct must be in (0, 100], got %r" % (watermark_pct,))
        if avoidance_threshold < 1 or restore_threshold < 1:
            raise ValueError("avoidance_threshold and restore_threshold must be >= 1")
        if not 0.0 < step_pct <= 100.0 or not 0.0 <= min_ratio_pct <= 100.0:
            raise ValueError("step_pct must be in (0, 100] and min_ratio_pct in [0, 100]")
        if cool_down < 0.0:
            raise ValueError("cool_down must be >= 0 (epochs)")
        if capacity_pct is not None and not capacity_pct > 0.0:
            raise ValueError("capacity_pct must be > 0")
        self.watermark_pct = float(watermark_pct)
        self.avoidance_threshold = int(avoidance_threshold)
        self.restore_threshold = int(restore_threshold)
        self.step = float(step_pct) / 100.0
        self.min_ratio = float(min_ratio_pct) / 100.0
        self.cool_down = float(cool_down)
        self.capacity_pct = capacity_pct
        self.cadence = common.Cadence(period)
        self._used = common.PeriodMean()
        self.triggered = 0
        self.restored = 0
        #: Epochs since the start, at the end of the last period; and at the last trigger.
        self.now = 0.0
        self.last_trigger = None
        #: Each throttled VM's quota (percent of one CPU); a VM not here is unset.
        self.quota = {}
        self._gone = common.Departures()

    def capacity(self, step):
        if self.capacity_pct is not None:
            return float(self.capacity_pct)
        sizes = sum(100.0 * max(1, spec.vcpus) for spec in step.specs.values())
        return min(sizes, 100.0 * step.pcpus)

    def analyze(self, utilisation_pct):
        """``(triggered, restored)`` of this collection (the consecutive-readings rule)."""
        if utilisation_pct > self.watermark_pct:
            self.restored = 0
            self.triggered += 1
            return self.triggered >= self.avoidance_threshold, False
        self.triggered = 0
        self.restored += 1
        return False, self.restored >= self.restore_threshold

    def throttle(self, order, used, floors, gap):
        """Step down the VMs of ``order`` until ``gap`` (CPU %) is released."""
        for vm in order:
            if gap <= 0.0:
                break
            cur = self.quota.get(vm)
            new = max((used[vm] if cur is None else cur) * (1.0 - self.step), floors[vm])
            if cur is not None and abs(new - cur) < 1e-9:
                continue
            self.quota[vm] = new
            released = used[vm] - new
            if released > 0.0:
                gap -= released

    def restore(self, order, used, limits, headroom):
        """Step up the throttled VMs of ``order`` until ``headroom`` (CPU %) is used."""
        for vm in order:
            if headroom <= 0.0:
                break
            cur = self.quota.get(vm)
            if cur is None:
                continue
            new = cur * (1.0 + self.step)
            if new >= limits[vm]:
                del self.quota[vm]
                new = limits[vm]
            else:
                self.quota[vm] = new
            grown = new - used[vm]
            if grown > 0.0:
                headroom -= grown

    def decide(self, step):
        t = step.vms
        self._gone.prune(t, self._used.names() + list(self.quota), self._forget)
        self._used.add(t.names, t.cpu_pct, t.sampled)
        if not self.cadence.tick(step.intervals_per_epoch):
            return None
        self.now += self.cadence.period
        used = self._used.take()
        capacity = self.capacity(step)
        usage = sum(used.values())
        triggered, restored = self.analyze(100.0 * usage / capacity)
        be = common.best_effort_rows(t)
        names = [t.names[k] for k in be.tolist()]
        for vm in names:
            used.setdefault(vm, 0.0)
        order = sorted(names, key=lambda vm: -used[vm])
        line = capacity * self.watermark_pct / 100.0
        if triggered:
            self.last_trigger = self.now
            floors = {t.names[k]: max(float(t.floor_pct[k]),
                                      float(t.limit_pct[k]) * self.min_ratio)
                      for k in be.tolist()}
            self.throttle(order, used, floors, usage - line)
        elif restored and (self.last_trigger is None or
                           self.now - self.last_trigger >= self.cool_down):
            limits = {t.names[k]: float(t.limit_pct[k]) for k in be.tolist()}
            self.restore(order, used, limits, line - usage)
        held = np.array([self.quota.get(t.names[k], np.inf) for k in be.tolist()])
        return common.answer(t, be, t.clamp(held, be))

    def _forget(self, vm):
        self._used.forget(vm)
        self.quota.pop(vm, None)
