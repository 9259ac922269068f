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

"""The paper's Algorithms 1 and 2 exactly as published, for the reproduction of its figures.

``free_market_paper`` and ``io_shares_paper``: research policies, selected
by ``resex-sim`` (:mod:`.policies`), never installed as agent plugins. They
are composed of the same rules as the production policies
(:mod:`resex_libvirt.market.credit`, :mod:`resex_libvirt.market.interferers`);
how they differ is in ``doc/source/market.rst``.
"""

import numpy as np

from resex_libvirt.market import credit
from resex_libvirt.market import interferers
from resex_libvirt.market import io_shares
from resex_libvirt.market import policy
from resex_libvirt.market import table as table_mod


class FreeMarketPaper(policy.Policy):
    """Algorithm 1 exactly (ResEx paper, Section VI-B): the credit rule, on every VM."""

    name = "free_market_paper"
    columns = credit.COLUMNS
    options = credit.OPTIONS

    def __init__(self, **options):
        self.opts = policy.configure(self.options, options)

    def decide(self, step):
        answer = policy.Answer()
        credit.answer(answer, step, credit.lowered(step, self.opts))
        return answer

    def start_epoch(self, step):
        return credit.reset(step)


class IOSharesPaper(policy.Policy):
    """Algorithm 2 as published (ResEx paper, Section VI-C), with the credit rule on top.

    Its rates are the ``tax_rate`` column (NaN: the VM pays the base
    price). The largest sender other than the victim is the interferer,
    if it demands ``heavier`` times the victim's own I/O; the cap is
    ``limit / rate``, or the credit cap if lower (``use_balance``).
    """

    name = "io_shares_paper"
    #: It throttles the VMs that interfere (the board's congestion index counts on it).
    taxes_interferers = True
    columns = {**credit.COLUMNS, "tax_rate": (np.nan, np.float64)}
    options = credit.OPTIONS + (
        io_shares.DECAY_HALF_LIFE,
        policy.Option("heavier", 1.5, min=1.0, max=1000.0,
                      help="An interferer must demand at least this many times the victim's "
                           "own I/O."),
        io_shares.MAX_RATE,
        policy.Option("use_balance", True, help="Apply the credit rule on top of the tax."),
    )

    def __init__(self, **options):
        self.opts = policy.configure(self.options, options)

    def start_epoch(self, step):
        return credit.reset(step)

    def decide(self, step):
        """Alg. 2: tax each victim's interferer, decay the others, answer every taxed VM.

        Victims over their threshold are taken in row order (the order the
        VMs joined), and each raises its interferer's rate in turn (lines
        5-11); then Alg. 1's credit caps (``use_balance``), and the cap of
        every taxed VM is ``limit / rate``, or its credit cap if lower.
        """
        answer = policy.Answer()
        named = self._tax(step, answer)
        if self.opts.use_balance:
            rates = step.state.tax_rate
            for rows, caps in credit.lowered(step, self.opts):
                got = rates[rows]
                answer.cap(rows, caps, table_mod.pick(np.isnan(got), 1.0, got))
                credit.note(answer, step.vms, rows, caps)
        self._settle(step, named, answer)
        return answer

    def _tax(self, step, answer):
        """Lines 5-11: raise each victim's interferer's rate, tax in ``answer``; the rows named."""
        vms = step.vms
        taxes = answer.taxes = []
        names, rates = vms.names, step.state.tax_rate
        named = set()
        top = None
        total = 0.0
        over = (vms.interference_pct > vms.threshold_pct).nonzero()[0].tolist()
        intf = vms.interference_pct.tolist() if over else ()
        for victim in over:
            if top is None:
                demands = interferers.demands(vms)
                top = interferers.top_two(demands)
                total = table_mod.seqsum(vms.mtu_rate)
            culprit = interferers.largest_other(victim, demands, top, self.opts.heavier)
            if culprit is None or total <= 0:
                continue
            ioshare = float(vms.mtu_rate[culprit]) / total
            increase = ioshare * intf[victim] / 100.0
            rate = float(rates[culprit])
            rate = min(self.opts.max_rate, (1.0 if rate != rate else rate) + increase)
            rates[culprit] = rate
            named.add(culprit)
            taxes.append((names[victim], names[culprit], intf[victim], ioshare, increase, rate))
        return named

    def _settle(self, step, named, answer):
        """Decay the rates not named; answer each taxed VM ``limit / rate`` (or its credit cap)."""
        vms, own = step.vms, step.state
        rates, limit = own.tax_rate, vms.limit_pct
        reasons = answer.reasons
        factor = None
        rows, caps, got = [], [], []
        for k in (~np.isnan(rates)).nonzero()[0].tolist():
            rate = float(rates[k])
            if k not in named:
                if factor is None:
                    factor = interferers.decay_factor(self.opts.decay_half_life,
                                                      step.intervals_per_epoch)
                rate = 1.0 + (rate - 1.0) * factor
                if rate < 1.0 + 1e-6:
                    rate = 1.0
            full = float(limit[k])
            if rate == 1.0:
                cap = full
            else:
                cap = full / rate
                floor = float(vms.floor_pct[k])
                cap = full if cap >= full else (floor if cap <= floor else cap)
            if self.opts.use_balance:
                held = float(own.credit_cap[k])
                if held < cap:
                    cap = held
            rows.append(k)
            caps.append(cap)
            got.append(rate)
            if rate == 1.0:
                rates[k] = np.nan
                if cap >= full:
                    reasons[k] = policy.UNCAPPED
            else:
                rates[k] = rate
                reasons[k] = policy.TAX if k in named else policy.DECAY
        if rows:
            answer.cap(np.array(rows, dtype=np.intp), np.array(caps), np.array(got))
