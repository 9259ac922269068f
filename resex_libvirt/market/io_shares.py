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

"""IOShares: lower latency variation by congestion pricing (Section VI-C, Alg. 2).

Every VM that interferes with a latency-sensitive VM over its threshold has
its charging rate raised, by its IOShare, and its cap set to ``limit /
rate``; rates come back down when the interference is gone. When and by
how much is the settling law's (:mod:`.settle`). The rules that differ
from the paper, and why, are in the class docstring and
``doc/source/market.rst``; Algorithm 2 as published is the research
code's ``io_shares_paper``.
"""

import numpy as np

from resex_libvirt.market import cpu_contention
from resex_libvirt.market import credit
from resex_libvirt.market import interferers
from resex_libvirt.market import policy
from resex_libvirt.market import response
from resex_libvirt.market import settle
from resex_libvirt.market import table as table_mod

#: Shared with the paper's variant (resex_research/paper_policies.py).
DECAY_HALF_LIFE = policy.Option(
    "decay_half_life", 0.05, min=0.001, max=100.0,
    help="Half-life, in epochs, of a tax once interference is gone.")
MAX_RATE = policy.Option("max_rate", 1000.0, min=1.0,
                         help="The highest charging rate a tax reaches (1: the base price).")


class IOShares(policy.Policy):
    """Algorithm 2 with rules that never hurt the VMs it protects, and a law that settles.

    ResEx paper (Ranadive et al. 2011), Section VI-C, Algorithm 2: a victim
    whose mean latency is over its threshold names its interferers, each
    pays by its IOShare (line 8: ``r' = IOShare x IntfPct``), and the cap is
    the rate's inverse (``New CPU Cap = 100 x PreviousRate / (PreviousRate
    + r')``, applied as ``cap = limit / rate``). What changes, and why:

    * **When and how far are the loop's, not the interval's** (:mod:`.settle`).
      The paper raises the rate every interval while the victim complains
      and lets it decay otherwise: a relay, which on a host whose loop takes
      2-3 s to show a cap change (a report each 0.5 s, a window of 4) swings
      the interferer's cap by 80 points. Here a victim is judged on new
      windows only, once per loop delay; its heaviest interferer's cap moves
      by the plant's model (``cap x (target / IntfPct) ** (gain / slope)``,
      the slope learnt online), and no cap moves while the victim's mean
      inflation is inside the hold band (``hold_below`` to 1 of its
      threshold) or within the window's standard error of the aim.
    * **Every interferer pays by its IOShare**, not only the largest (line 7
      names one VM): every VM other than the victim whose I/O demand is at
      least ``heavier`` times the victim's own is an interferer, and each is
      cut in proportion to its IOShare (the largest the most), so that the
      traffic left is what the model's cut on all of it would leave. With
      two interferers, or many small senders, the paper's rule taxes only
      the largest and the rest keep the queue full. The rate each cut sets is recorded as a tax
      (:data:`policy.TAX_FIELDS`): Resos and rates keep the paper's meaning.
    * **A VM with a latency SLA is never taxed while its own latency is
      near its SLA**: an interferer that is itself latency-sensitive is
      protected (released, never cut) while its own mean inflation is over
      ``protect`` of its threshold. The paper's rule treats the bigger
      sender as the culprit and caps it to 1%.
    * **Below the threshold, no tax.** What triggers a tax is the victim's
      *mean* latency over its threshold (the SLA is on the mean); the
      paper's deviation criterion is not used: against an open-loop
      interferer a tax for jitter alone cuts its service below its arrival
      rate and its queue grows without bound.
    * **The credit floor and the tax never stack**: the cap answers
      congestion only; running out of Resos does not cut a VM (its spending
      at its raised rate is still recorded). With ``use_balance=True``
      Algorithm 1's credit rule comes back for untaxed VMs only.
    * ``heavier`` is 1.1, not 1.5: six 128 KB senders each send only ~1.2
      times the 64 KB VM's rate, and all of them together are the
      interference; equal senders (ratio ~1, paper Fig. 8) are still spared.
    * **A tax that buys nothing is released** (``check_response``, as
      ``latency_target``'s: :mod:`.response`): a victim whose latency does
      not move while its interferer is held deep (its neighbours that are
      equal senders, its own base over its SLA) would otherwise keep the
      interferer at its floor; the paper's decay released it only because
      it decayed every interval.
    * **CPU contention is interference too** (not in the paper, whose VMs
      each have a pCPU): a sensitive VM whose vCPUs wait for a pCPU gets a
      higher weight, and its CPU-using neighbours a cap if the weight is not
      enough (:mod:`.cpu_contention`); the lower of that cap and the tax's
      is in force.

    The paper's Algorithm 2 as published is the research code's
    ``io_shares_paper``.
    """

    name = "io_shares"
    #: It throttles the VMs that interfere (the board's congestion index counts on it).
    taxes_interferers = True
    #: ``tax_rate``: the rate of each taxed VM (NaN: untaxed); the law's
    #: columns (:data:`.settle.COLUMNS`), the credit rule's and the CPU
    #: contention rule's.
    columns = {**credit.COLUMNS, "tax_rate": (np.nan, np.float64), **settle.COLUMNS,
               **response.COLUMNS, **cpu_contention.COLUMNS}
    options = credit.OPTIONS + cpu_contention.OPTIONS + (
        policy.Option("heavier", 1.1, min=1.0, max=1000.0,
                      help="An interferer must demand at least this many times the victim's "
                           "own I/O (equal senders are not taxed, paper Fig. 8)."),
        MAX_RATE,
        policy.Option("use_balance", False,
                      help="Apply the credit rule (low_balance, epoch_left, step) to the VMs "
                           "no tax holds; off: running out of Resos cuts no VM."),
        policy.Option("check_response", True,
                      help="Release a tax whose victim's latency does not respond to it "
                           "(reason no_response), with a doubling backoff."),
        policy.Option("protect", 0.8, min=0.0, max=1.0, open_min=True,
                      help="A sensitive interferer whose own inflation is over this "
                           "fraction of its threshold is protected instead of taxed."),
    ) + settle.OPTIONS

    def __init__(self, **options):
        self.opts = policy.configure(self.options, options)
        self.check = response.ResponseCheck() if self.opts.check_response else None
        self._cpu = cpu_contention.Counters()
        # The weight boosts in force: sensitive VMs waiting for a pCPU ({row: factor}).
        self._weights = {}

    def start_epoch(self, step):
        return credit.reset(step)

    def decide(self, step):
        answer = policy.Answer()
        self._tax(step, answer)
        if self.opts.use_balance:
            own = step.state
            answered = answer.answered(len(step.vms))
            pairs = credit.spared(step, self.opts, answer,
                                  lambda rows: ~np.isnan(own.tax_rate[rows]))
            credit.answer(answer, step,
                          [(rows[~answered[rows]], caps[~answered[rows]]) for rows, caps in pairs])
        self._contention(step, answer)
        answer.weights = self._weights
        return answer

    def _tax(self, step, answer):
        """Algorithm 2's taxes, moved by the settling law (the class docstring)."""
        vms, own = step.vms, step.state
        demands = interferers.demands(vms)
        if self.check is not None:
            demands = np.where(response.resting(own), 0.0, demands)   # cutting did not help
        total = table_mod.seqsum(vms.mtu_rate)
        ioshare = vms.mtu_rate / total if total > 0.0 else np.zeros(len(vms))
        e = settle.inflation(vms)
        spared = vms.sensitive & vms.reported & (e > self.opts.protect * vms.threshold_pct)

        interferes = settle.naming(vms, demands, self.opts.heavier, demands > 0.0, e)

        def weight(v, hit):
            return ioshare

        band = settle.band(step, self.opts)
        checked = response.checked_plan(self.check, step, band.aim, lambda: settle.plan(
            step, self.opts, band, interferes, weight, spared, e))
        if checked is None:
            return
        plan, caps, futile = checked
        rows = plan.rows
        limit = vms.limit_pct[rows]
        # max_rate bounds the tax: the cap never goes under limit / max_rate.
        caps = np.maximum(caps, limit / self.opts.max_rate)
        settle.hold(own, rows, caps, limit)
        old = np.fmax(own.tax_rate[rows], 1.0)
        rate = limit / caps
        free = caps >= limit
        own.tax_rate[rows] = np.where(free, np.nan, rate)
        own.credit_cap[rows] = np.nan      # no credit cap under a tax: they never stack
        answer.cap(rows, caps, np.where(free, 1.0, rate))
        answer.why(rows, [policy.NO_RESPONSE if is_futile else
                          policy.UNCAPPED if is_free else
                          policy.PROTECTED if is_spared else
                          policy.TAX if is_cut else policy.DECAY
                          for is_free, is_spared, is_cut, is_futile in zip(
                              free.tolist(), spared[rows].tolist(), plan.cut.tolist(),
                              futile.tolist())])
        taxed = plan.cut & ~free & (rate > old)
        if taxed.any():
            names = vms.names
            answer.taxes = [(names[v], names[k], intf, float(ioshare[k]), r - r0, r)
                            for k, v, intf, r0, r in zip(
                                rows[taxed].tolist(), plan.cause[taxed].tolist(),
                                plan.inflation[taxed].tolist(), old[taxed].tolist(),
                                rate[taxed].tolist())]

    def _contention(self, step, answer):
        """The CPU-contention rule's boosts, and its caps on top of the tax's (the lower wins)."""
        own = step.state
        moved, rows = cpu_contention.answered_rows(step, self.opts, self._cpu)
        if len(rows):
            limit = step.vms.limit_pct[rows]
            rate = np.fmax(own.tax_rate[rows], 1.0)
            caps = np.fmin(limit / rate, own.credit_cap[rows])
            cpu_contention.answer(answer, step, rows, caps, rate)
        if len(self._weights) or (own.cc_boost > 1.0).any():
            self._weights = cpu_contention.weights(step)
