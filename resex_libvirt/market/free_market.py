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

"""FreeMarket: maximise resource utilisation (paper Section VI-B, Algorithm 1).

Two variants are registered: ``free_market_paper`` (:class:`FreeMarketPaper`)
is Algorithm 1 exactly as below, kept for the reproduction of the paper's
figures; ``free_market`` (:class:`FreeMarket`) adds one rule the paper's two
VMs never needed: a VM with a latency SLA whose own latency is over its SLA
is not cut by the credit rule (cutting its CPU would only make its latency
worse; ResEx exists to protect it). See ``doc/source/market.rst``.

Every VM pays the same fixed price (1 Reso per CPU percent, 1 Reso per MTU)
and may spend its whole allocation as it likes. "When the VM's remaining
Resos is below a certain limit (10% in our case), and more than 10% of the
epoch is remaining, we start decreasing the CPU for that VM gradually. The
CPU is decremented by 10% from its earlier allocated value" — every
interval, until the epoch ends; caps reset when the Resos are replenished.

Parameters are the paper's: ``low_balance`` 0.10, ``epoch_left`` 0.10,
``step`` 0.10. The only addition is mClock's: the market clamps the cap to
the VM's [reservation, limit], and to a 1% floor (a Xen cap of 0 means
"uncapped", so 0 is not a cap).
"""

from resex_libvirt.market import policy


class FreeMarketPaper(policy.Policy):
    """Algorithm 1 exactly (ResEx paper, Section VI-B)."""

    name = "free_market_paper"

    def __init__(self, low_balance=0.10, epoch_left=0.10, step=0.10):
        for label, value in (("low_balance", low_balance), ("epoch_left", epoch_left),
                             ("step", step)):
            if not 0.0 <= value < 1.0:
                raise ValueError("%s must be in [0, 1), got %r" % (label, value))
        self.low_balance = low_balance
        self.epoch_left = epoch_left
        self.step = step
        self._caps = {}
        self._restore = set()
        self._reasons = {}

    def balance_cap(self, view, vm):
        """Algorithm 1's GETCPUCAP: the cap after this interval's charge."""
        cap = self._caps.get(vm)
        if cap is None:
            cap = view.bounds[vm][1]
        if (view.epoch_fraction_left > self.epoch_left
                and view.ledger.fraction_left(vm) < self.low_balance):
            cap = view.clamp(vm, cap * (1.0 - self.step))
        self._caps[vm] = cap
        return cap

    def lowered(self, view):
        """``{vm: cap}`` of the VMs whose cap Algorithm 1 lowers this interval.

        Only those: a VM whose Resos last, or any VM in the last
        ``epoch_left`` of the epoch, keeps the cap it has.
        """
        out = {}
        if self._restore:
            for vm in self._restore:
                if vm in view.bounds:
                    out[vm] = view.bounds[vm][1]
            self._restore = set()
        if not view.epoch_fraction_left > self.epoch_left:
            return out
        low, keep, caps = self.low_balance, 1.0 - self.step, self._caps
        for vm, acct in view.ledger.accounts():
            if (acct.allocation > 0 and acct.balance < low * acct.allocation
                    and self.may_cut(view, vm)):
                cap = caps.get(vm)
                if cap is None:
                    cap = view.bounds[vm][1]
                new = view.clamp(vm, cap * keep)
                if new != cap:
                    caps[vm] = out[vm] = new
        return out

    def may_cut(self, view, vm):
        """Whether the credit rule may lower ``vm``'s cap this interval (always, in Alg. 1)."""
        return True

    def decide(self, view):
        out = {vm: (cap, 1.0) for vm, cap in self.lowered(view).items()}
        self._note_credit(view, out)
        return out

    def _note_credit(self, view, out):
        reasons = self._reasons
        for vm, (cap, _rate) in out.items():
            reasons[vm] = policy.CREDIT if cap < view.bounds[vm][1] else policy.UNCAPPED

    def reasons(self):
        return self._reasons

    def start_epoch(self, view):
        """Caps reset when the Resos are replenished (Alg. 1)."""
        self._restore = {vm for vm, cap in self._caps.items()
                         if vm in view.bounds and cap != view.bounds[vm][1]}
        self._caps.clear()
        for vm in self._restore:
            if self._reasons.get(vm) == policy.CREDIT:
                self._reasons[vm] = policy.UNCAPPED

    def forget(self, vm):
        self._caps.pop(vm, None)
        self._restore.discard(vm)
        self._reasons.pop(vm, None)


def over_sla(view, vm):
    """True when ``vm`` has a latency SLA and its own interference exceeds its threshold."""
    spec = view.specs.get(vm)
    if spec is None or not spec.sla.sensitive:
        return False
    return view.interference.get(vm, 0.0) > spec.sla.interference_threshold_pct


class FreeMarket(FreeMarketPaper):
    """Algorithm 1, never cutting a VM whose own latency is over its SLA.

    ResEx paper, Section VI-B. Deviation: the credit rule ("decrease the CPU
    ... by 10%") skips a VM with a latency SLA while its own interference
    exceeds its threshold, and a credit cap already in force on it is lifted
    as soon as its latency goes over its SLA. The paper's two VMs never needed the rule (its
    reporting VM never ran out of Resos); a sensitive VM that itself moves
    large buffers does, and the paper's rule would cut it to 1%.
    """

    name = "free_market"

    def may_cut(self, view, vm):
        if over_sla(view, vm):
            self._reasons[vm] = policy.PROTECTED
            return False
        return True

    def lowered(self, view):
        out = super().lowered(view)
        if view.interference:
            caps = self._caps
            for vm in [vm for vm in caps if over_sla(view, vm)]:
                # A credit cap in force on a VM now over its SLA is lifted.
                limit = view.bounds[vm][1]
                if caps[vm] < limit:
                    del caps[vm]
                    out[vm] = limit
                    self._reasons[vm] = policy.PROTECTED
        return out
