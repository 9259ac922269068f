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

import numpy as np

from resex_libvirt.market import policy
from resex_libvirt.market import table as table_mod


class FreeMarketPaper(policy.Policy):
    """Algorithm 1 exactly (ResEx paper, Section VI-B).

    Its per-VM state is two columns of the market's table: ``credit_cap``,
    the cap the credit rule holds (NaN: none, the VM is at its limit), and
    ``credit_restore``, the VMs whose cap goes back to the limit at the
    first interval of an epoch.
    """

    name = "free_market_paper"
    columns = {"credit_cap": (np.nan, np.float64), "credit_restore": (False, bool)}

    def __init__(self, low_balance=0.10, epoch_left=0.10, step=0.10):
        for label, value in (("low_balance", low_balance), ("epoch_left", epoch_left),
                             ("step", step)):
            if not 0.0 <= value < 1.0:
                raise ValueError("%s must be in [0, 1), got %r" % (label, value))
        self.low_balance = low_balance
        self.epoch_left = epoch_left
        self.step = step
        self._reasons = {}

    def lowered(self, view):
        """Algorithm 1's GETCPUCAP for every VM: the caps it lowers this interval.

        Returns ``[(rows, caps), ...]``: the new cap of each VM whose cap the
        rule lowers (or restores, at the start of an epoch); a later pair
        replaces an earlier one for a row. A VM whose Resos last, or any VM
        in the last ``epoch_left`` of the epoch, keeps the cap it has.
        """
        t = view.t
        out = []
        restore = t.credit_restore
        back = restore.nonzero()[0]
        if len(back):
            restore[back] = False
            out.append((back, t.limit[back]))
        if not view.epoch_fraction_left > self.epoch_left:
            return out
        allocation = t.allocation
        low = t.balance < self.low_balance * allocation
        low &= allocation > 0
        rows = low.nonzero()[0]
        if not len(rows):
            return out
        rows = rows[self.may_cut(view, rows)]
        held = t.credit_cap[rows]
        cap = table_mod.pick(np.isnan(held), t.limit[rows], held)
        new = view.clamp(cap * (1.0 - self.step), rows)
        moved = new != cap
        rows, new = rows[moved], new[moved]
        if len(rows):
            t.credit_cap[rows] = new
            out.append((rows, new))
        return out

    def may_cut(self, view, rows):
        """Which of ``rows`` the credit rule may lower this interval (all, in Alg. 1)."""
        return np.ones(len(rows), dtype=bool)

    def decide_slots(self, view):
        for rows, caps in self.lowered(view):
            view.answer(rows, caps, 1.0)
            self._note_credit(view, rows, caps)

    def _note_credit(self, view, rows, caps):
        reasons, names = self._reasons, view.t.names
        limit = view.t.limit[rows].tolist()
        for k, cap, full in zip(rows.tolist(), caps.tolist(), limit):
            reasons[names[k]] = policy.CREDIT if cap < full else policy.UNCAPPED

    def reasons(self):
        return self._reasons

    def start_epoch(self, view):
        """Caps reset when the Resos are replenished (Alg. 1)."""
        t = view.t
        held = t.credit_cap
        restore = ~np.isnan(held) & (held != t.limit)
        t.credit_restore = restore
        t.credit_cap = np.full(len(t), np.nan)
        reasons = self._reasons
        for k in restore.nonzero()[0].tolist():
            vm = t.names[k]
            if reasons.get(vm) == policy.CREDIT:
                reasons[vm] = policy.UNCAPPED

    def forget(self, vm):
        self._reasons.pop(vm, None)


def over_sla(view):
    """Per row: the VM's interference this interval exceeds its SLA's threshold."""
    t = view.t
    # NaN (no SLA, no report this interval) compares false.
    return t.intf > t.threshold


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

    def may_cut(self, view, rows):
        over = over_sla(view)[rows]
        for k in rows[over].tolist():
            self._reasons[view.t.names[k]] = policy.PROTECTED
        return ~over

    def lowered(self, view):
        out = super().lowered(view)
        t = view.t
        if len(view.win_rows):
            held = t.credit_cap
            # A credit cap in force on a VM now over its SLA is lifted.
            lift = over_sla(view)
            lift &= held < t.limit
            rows = lift.nonzero()[0]
            if len(rows):
                held[rows] = np.nan
                out.append((rows, t.limit[rows]))
                for k in rows.tolist():
                    self._reasons[t.names[k]] = policy.PROTECTED
        return out
