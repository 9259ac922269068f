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

"""LatencyTarget: a feedback controller on the sensitive VMs' latency.

Each interferer's cap is steered towards the largest value that keeps the
victims' latency at a target just inside their SLA. The law is PARDA's
window update (Gulati et al., FAST 2009, Section 3)::

    w(t+1) = (1 - g) w(t) + g (L / lat(t)) w(t)

taken on the logarithm of the cap and on the victim's inflation over its
base latency rather than on the latency itself (``log w += g log(L /
lat)`` with ``L`` the target inflation), applied once per loop delay on
new data only, with a hold band and a gain scheduled from the plant's
measured response (:mod:`.settle`). PARDA updates every host each period
with a fixed gain; its plant (an array's queue) answers within a period,
the plant here (a CFS cap, a fabric queue and a report window) answers
after seconds, and a fixed-gain integrator with that delay cycles. A cap
whose victim's latency does not respond is released (:mod:`.response`);
optionally (``boost`` > 1) a latency-sensitive VM that sends gets a higher
scheduler weight (Xen and Co., VEE 2007); a sensitive VM whose vCPUs wait
for a pCPU gets one too, and its CPU-using neighbours a cap if that is
not enough (:mod:`.cpu_contention`). The mapping of PARDA's terms onto
caps, shares and latency windows is in ``doc/source/market.rst``.
"""

import numpy as np

from resex_libvirt.market import cpu_contention
from resex_libvirt.market import credit
from resex_libvirt.market import interferers
from resex_libvirt.market import policy
from resex_libvirt.market import response
from resex_libvirt.market import settle


def _opt(name, default, help, **bounds):
    return policy.Option(name, default, help=help, **bounds)


class LatencyTarget(policy.Policy):
    """PARDA's window update on the interferers' caps, settled (see the module docstring)."""

    name = "latency_target"
    #: It throttles the VMs that interfere (the board's congestion index counts on it).
    taxes_interferers = True
    #: The law's columns (:data:`.settle.COLUMNS`: ``st_cap`` is the cap it
    #: holds, NaN: not controlled), the response check's, the credit rule's
    #: and the CPU-contention rule's.
    columns = {**credit.COLUMNS, **settle.COLUMNS, **response.COLUMNS,
               **cpu_contention.COLUMNS}

    options = credit.OPTIONS + cpu_contention.OPTIONS + (
        _opt("heavier", 0.0, "Only VMs demanding at least this many times a victim's own I/O "
             "are controlled (0: every other VM that sends).", min=0.0),
        _opt("boost", 1.0, "Scheduler-weight factor of a latency-sensitive VM that sends "
             "(Xen and Co.; 1: off).", min=1.0),
        _opt("use_balance", False, "Apply the credit rule (low_balance, epoch_left, step) to "
             "the VMs the controller leaves at their limit; off: running out of Resos cuts "
             "no VM."),
        _opt("check_response", True, "Release a cap whose victim's latency does not respond "
             "to it (reason no_response), with a doubling backoff."),
    ) + settle.OPTIONS

    def __init__(self, **options):
        self.opts = policy.configure(self.options, options)
        self.check = response.ResponseCheck() if self.opts.check_response else None
        # The weight boosts in force ({row: factor}): ``boost``'s, CPU contention's.
        self._weights = {}
        self._cpu = cpu_contention.Counters()
        self._cpu_weights = {}

    def start_epoch(self, step):
        return credit.reset(step)

    # -- the controller -----------------------------------------------------
    def _update(self, step, answer):
        vms, own = step.vms, step.state
        band = settle.band(step, self.opts)
        demands = interferers.demands(vms)
        eligible = demands > 0.0
        if self.check is not None:
            eligible &= ~response.resting(own)   # left alone: cutting it did not help
        e = settle.inflation(vms)
        # A sensitive VM whose own latency is over its target is never lowered.
        spared = vms.sensitive & vms.reported & (e > band.aim)
        interferes = settle.naming(vms, demands, self.opts.heavier, eligible, e)
        checked = response.checked_plan(self.check, step, band.aim, lambda: settle.plan(
            step, self.opts, band, interferes, spared=spared, e=e))
        if checked is None:
            return
        plan, caps, futile = checked
        rows = plan.rows
        limit = vms.limit_pct[rows]
        free = caps >= limit
        answer.cap(rows[free], limit[free], 1.0)
        kept = rows[~free]
        own.credit_cap[kept] = np.nan      # no credit cap under the controller
        answer.cap(kept, caps[~free], limit[~free] / caps[~free])
        guarded = spared[rows]
        answer.why(rows, [policy.NO_RESPONSE if is_futile else
                          policy.UNCAPPED if is_free else
                          policy.PROTECTED if is_guarded else policy.TARGET
                          for is_free, is_guarded, is_futile in zip(
                              free.tolist(), guarded.tolist(), futile.tolist())])

    # -- the policy contract ----------------------------------------------------
    def decide(self, step):
        answer = policy.Answer()
        self._update(step, answer)
        if self.opts.use_balance:
            self._credit(step, answer)
        if self.opts.boost > 1.0:
            self._boost(step)
        self._contention(step, answer)
        answer.weights = self._weights_in_force()
        return answer

    def _contention(self, step, answer):
        """The CPU-contention rule's boosts, and its caps on top of the controller's."""
        own = step.state
        moved, rows = cpu_contention.answered_rows(step, self.opts, self._cpu)
        if len(rows):
            limit = step.vms.limit_pct[rows]
            mine = np.fmin(own.st_cap[rows], own.credit_cap[rows])
            caps = np.where(np.isnan(mine), limit, mine)
            cpu_contention.answer(answer, step, rows, caps, limit / caps)
        if self._cpu_weights or (own.cc_boost > 1.0).any():
            self._cpu_weights = cpu_contention.weights(step)

    def _boost(self, step):
        vms = step.vms
        sending = vms.sensitive & vms.sampled & (vms.tx_mtus > 0)
        self._weights = dict.fromkeys(sending.nonzero()[0].tolist(), self.opts.boost)

    def _weights_in_force(self):
        """``{row: factor}``: the weight boosts in force (``boost``; CPU contention's)."""
        if not self._cpu_weights:
            return self._weights
        out = dict(self._weights)
        for k, factor in self._cpu_weights.items():
            out[k] = out.get(k, 1.0) * factor
        return out

    def _credit(self, step, answer):
        """The credit rule, on the VMs the controller leaves at their limit only."""
        own = step.state
        answered = answer.answered(len(step.vms))

        def controlled(rows):
            return ~np.isnan(own.st_cap[rows])
        pairs = []
        for rows, caps in credit.spared(step, self.opts, answer, controlled):
            free = ~answered[rows] & np.isnan(own.st_cap[rows])
            pairs.append((rows[free], caps[free]))
        credit.answer(answer, step, pairs)
