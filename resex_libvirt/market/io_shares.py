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
its charging rate raised by ``IOShare x IntfPct`` and its cap set to
``limit / rate``; rates decay back when the interference is gone. The
rules that differ from the paper, and why, are in the class docstring and
``doc/source/market.rst``; Algorithm 2 as published is the simulator's
``io_shares_paper``.
"""

import numpy as np

from resex_libvirt.market import cpu_contention
from resex_libvirt.market import credit
from resex_libvirt.market import interferers
from resex_libvirt.market import policy
from resex_libvirt.market import table as table_mod

#: Shared with the paper's variant (resex_research/paper_policies.py).
DECAY_HALF_LIFE = policy.Option(
    "decay_half_life", 0.05, min=0.001, max=100.0,
    help="Half-life, in epochs, of a tax once interference is gone.")
MAX_RATE = policy.Option("max_rate", 1000.0, min=1.0,
                         help="The highest charging rate a tax reaches (1: the base price).")

_FREE, _TAXED, _PROTECTED, _DECAY = range(4)
_KINDS = (policy.UNCAPPED, policy.TAX, policy.PROTECTED, policy.DECAY)


class Taxes(policy.Taxes):
    """One interval's taxes as tuples of :data:`policy.TAX_FIELDS`, made on first use.

    The victim named in each is the most inflated of those the interferer
    interferes with (ties: the larger name).
    """

    def __init__(self, names, victims, intfs, rows, prefix, ioshare, increase, rate):
        self._args = (names, victims, intfs, rows, prefix, ioshare, increase, rate)
        self._items = None

    def _made(self):
        if self._items is None:
            self._items = self.tail(len(self))
        return self._items

    def tail(self, k):
        """The last ``k`` taxes (tuples made for those only)."""
        names, victims, intfs, rows, prefix, ioshare, increase, rate = self._args
        worst = [(0.0, None)]
        for intf, v in zip(intfs.tolist(), victims.tolist()):
            worst.append(max(worst[-1], (intf, names[v])))
        start = len(self) - k
        items = []
        for row, j, share, inc, r in zip(rows[start:].tolist(), prefix[start:].tolist(),
                                         ioshare[start:].tolist(), increase[start:].tolist(),
                                         rate[start:].tolist()):
            intf, victim = worst[j]
            items.append((victim, names[row], intf, share, inc, r))
        return items

    def __getitem__(self, i):
        return self._made()[i]

    def __len__(self):
        return len(self._args[3])


class IOShares(policy.Policy):
    """Algorithm 2 with rules that never hurt the VMs it protects.

    ResEx paper (Ranadive et al. 2011), Section VI-C, Algorithm 2: the same
    interference percentage (line 6), the same ``r' = IOShare x IntfPct``
    (lines 8-9) and the same ``New CPU Cap = 100 x PreviousRate /
    (PreviousRate + r')``, applied as ``cap = limit / rate``. What changes,
    and why:

    * **Every interferer pays by its IOShare**, not only the largest (line 7
      names one VM): every VM other than the victim whose I/O demand is at
      least ``heavier`` times the victim's own is an interferer, and each
      one's rate rises by its own ``IOShare x IntfPct``. With two
      interferers, or many small senders, the paper's rule taxes only the
      largest and the rest keep the queue full.
    * **A VM with a latency SLA is never taxed while its own latency is over
      its SLA.** When the interferer is itself latency-sensitive it is taxed
      only while its own (smoothed) interference is at most ``protect`` of
      its threshold, and by ``IOShare x (IntfPct(victim) - IntfPct(itself))``:
      the excess of the victim's inflation over its own. Once its own
      latency nears its SLA its tax is released (``protected``, decaying
      ``protect_speedup`` times faster), so it settles where its own latency
      stays within its SLA while the other's falls. The paper's rule treats
      the bigger sender as the culprit and caps it to 1%.
    * **Below the threshold, no tax.** What triggers a tax is the victim's
      *mean* latency over its threshold (the SLA is on the mean), as a
      moving average over ``smoothing`` of an epoch, not one window; the
      amount is still the paper's percentage (mean or deviation, also
      averaged). An interferer whose load keeps the victim's mean below its
      threshold is not taxed for the odd collision or for jitter alone:
      against an open-loop interferer such taxes cut its service below its
      arrival rate and its queue grows without bound.
    * **The credit floor and the tax never stack**: the cap answers
      congestion only, through the tax (``limit / rate``); running out of
      Resos does not cut a VM (its spending at its raised rate is still
      recorded, and the host report's prices show it). With
      ``use_balance=True`` Algorithm 1's credit rule comes back for untaxed
      VMs only, never on a taxed one. The paper applies both and takes the
      lower, so a taxed VM that runs out of Resos spends the rest of the
      epoch at the 1% floor; and on a 100 Gb/s link the credit rule alone
      cuts a bulk sender nobody complains about (12% of its throughput).
    * ``heavier`` is 1.1, not 1.5: six 128 KB senders each send only ~1.2
      times the 64 KB VM's rate, and all of them together are the
      interference; equal senders (ratio ~1, paper Fig. 8) are still spared.
    * **CPU contention is interference too** (not in the paper, whose VMs
      each have a pCPU): a sensitive VM whose vCPUs wait for a pCPU gets a
      higher weight, and its CPU-using neighbours a cap if the weight is not
      enough (:mod:`.cpu_contention`); the lower of that cap and the tax's
      is in force.
    """

    name = "io_shares"
    #: It throttles the VMs that interfere (the board's congestion index counts on it).
    taxes_interferers = True
    #: ``tax_rate``: the rate of each taxed VM (NaN: untaxed); ``tax_kind``: why
    #: (the reason last noted); ``smooth_intf`` and ``smooth_mean``: each
    #: sensitive VM's moving averages (NaN: none yet).
    columns = {**credit.COLUMNS, "tax_rate": (np.nan, np.float64),
               "tax_kind": (-1, np.int8), "smooth_intf": (np.nan, np.float64),
               "smooth_mean": (np.nan, np.float64), **cpu_contention.COLUMNS}
    options = credit.OPTIONS + cpu_contention.OPTIONS + (
        DECAY_HALF_LIFE,
        policy.Option("heavier", 1.1, min=1.0, max=1000.0,
                      help="An interferer must demand at least this many times the victim's "
                           "own I/O (equal senders are not taxed, paper Fig. 8)."),
        MAX_RATE,
        policy.Option("use_balance", False,
                      help="Apply the credit rule (low_balance, epoch_left, step) to the VMs "
                           "no tax holds; off: running out of Resos cuts no VM."),
        policy.Option("smoothing", 0.5, min=0.0, max=1.0,
                      help="The victims' interference is a moving average over this fraction "
                           "of an epoch."),
        policy.Option("protect", 0.8, min=0.0, max=1.0, open_min=True,
                      help="A sensitive interferer whose own interference is over this "
                           "fraction of its threshold is protected instead of taxed."),
        policy.Option("protect_speedup", 4.0, min=1.0,
                      help="A protected VM's tax decays this many times faster."),
    )

    def __init__(self, **options):
        self.opts = policy.configure(self.options, options)
        self._cpu = cpu_contention.Counters()
        # The weight boosts in force: sensitive VMs waiting for a pCPU ({row: factor}).
        self._weights = {}

    def start_epoch(self, step):
        return credit.reset(step)

    def _smooth(self, step):
        """Each reporting sensitive VM's interference, averaged over ``smoothing`` of an epoch.

        Updates the ``smooth_intf`` column (the paper's percentage: the
        larger of the mean's and the deviation's increase) and
        ``smooth_mean`` (the mean's increase alone), each a moving average,
        for the VMs that reported this interval (``step.reports``), and
        returns their new ``smooth_mean`` (aligned with those rows).
        """
        own = step.state
        rows, intf, mean = step.reports
        if not len(rows):
            return np.zeros(0)
        alpha = 1.0 / max(1.0, self.opts.smoothing * step.intervals_per_epoch)
        old_intf, old_mean = own.smooth_intf[rows], own.smooth_mean[rows]
        fresh = np.isnan(old_intf)
        new_intf = old_intf + alpha * (intf - old_intf)
        new_mean = old_mean + alpha * (mean - old_mean)
        if np.count_nonzero(fresh):
            np.copyto(new_intf, intf, where=fresh)
            np.copyto(new_mean, mean, where=fresh)
        own.smooth_intf[rows] = new_intf
        own.smooth_mean[rows] = new_mean
        return new_mean

    def decide(self, step):
        answer = policy.Answer()
        vms, own = step.vms, step.state
        mean = self._smooth(step)
        named = protected = None
        reported = step.reports.rows
        victims = reported[mean > vms.threshold_pct[reported]]
        if len(victims):
            named, protected = self._tax(step, victims, answer)
        taxed = (~np.isnan(own.tax_rate)).nonzero()[0]
        if len(taxed):
            self._settle(step, taxed, named, protected, answer)
        if self.opts.use_balance:
            answered = answer.answered(len(vms))
            pairs = credit.spared(step, self.opts, answer,
                                  lambda rows: ~np.isnan(own.tax_rate[rows]))
            credit.answer(answer, step,
                          [(rows[~answered[rows]], caps[~answered[rows]]) for rows, caps in pairs])
        self._contention(step, answer)
        answer.weights = self._weights
        return answer

    def _contention(self, step, answer):
        """The CPU-contention rule's boosts, and its caps on top of the tax's (the lower wins)."""
        own = step.state
        moved, rows = cpu_contention.answered_rows(step, self.opts, self._cpu)
        if len(rows):
            limit = step.vms.limit_pct[rows]
            rate = np.fmax(own.tax_rate[rows], 1.0)
            caps = np.fmin(limit / rate, own.credit_cap[rows])
            if len(moved):
                # A released tax-free row goes back to its limit (and its reason with it).
                for k in moved.tolist():
                    if own.tax_kind[k] > 0:
                        own.tax_kind[k] = -1
            cpu_contention.answer(answer, step, rows, caps, rate)
        if len(self._weights) or (own.cc_boost > 1.0).any():
            self._weights = cpu_contention.weights(step)

    def _settle(self, step, rows, named, protected, answer):
        """Decay the rates of the taxed VMs (``rows``) not named this interval; answer them all."""
        vms, own = step.vms, step.state
        rate = own.tax_rate[rows]
        decaying = np.ones(len(rows), dtype=bool) if named is None else ~named[rows]
        if np.count_nonzero(decaying):
            factor = interferers.decay_factor(self.opts.decay_half_life,
                                              step.intervals_per_epoch)
            f = table_mod.filled(len(rows), factor)
            if protected is not None:
                np.copyto(f, factor ** self.opts.protect_speedup, where=protected[rows])
            decayed = rate - 1.0
            decayed *= f
            decayed += 1.0
            decayed[decayed < 1.0 + 1e-6] = 1.0
            np.copyto(rate, decayed, where=decaying)
        limit = vms.limit_pct[rows]
        done = rate == table_mod.ONE
        caps = limit / rate
        np.minimum(caps, limit, out=caps)       # the clamp of VMColumns.clamp
        np.maximum(caps, vms.floor_pct[rows], out=caps)
        freed = np.count_nonzero(done)
        if freed:
            np.copyto(caps, limit, where=done)
            own.tax_rate[rows] = table_mod.pick(done, np.nan, rate)
        else:
            own.tax_rate[rows] = rate
        answer.cap(rows, caps, rate)
        own.credit_cap[rows] = np.nan      # no credit cap under a tax: they never stack
        # Why each taxed VM has its cap: written only where it changed.
        kind = table_mod.filled(len(rows), _DECAY, np.int8)
        if named is not None:
            np.copyto(kind, _TAXED, where=named[rows])
            np.copyto(kind, _PROTECTED, where=protected[rows])
        if freed:
            np.copyto(kind, _FREE, where=done)
        moved = kind != own.tax_kind[rows]
        if np.count_nonzero(moved):
            own.tax_kind[rows] = kind
            answer.why(rows[moved], [_KINDS[why] for why in kind[moved].tolist()])

    def _tax(self, step, victims, answer):
        """Raise every interferer's rate by its IOShare times the victims' inflation.

        Summed over the victims it interferes with: the VM ``u`` interferes
        with victim ``v`` when ``demand(u) >= heavier x demand(v)``, so with
        the victims sorted by their own demand these are a prefix, and the
        sum is a prefix sum: one pass over the VMs, not one per victim. A
        sensitive interferer's own (smoothed) inflation is taken off each
        victim's, and one whose own is over ``protect`` of its threshold is
        protected instead of taxed. Every row is worked out; the masks say
        which rows the rules keep. Returns the masks of the VMs named
        (taxed) and protected this interval; the taxes go in ``answer``.
        """
        vms, own = step.vms, step.state
        n = len(vms)
        demands = interferers.demands(vms)
        total = table_mod.seqsum(vms.mtu_rate)
        if total <= 0.0:
            nobody = np.zeros(n, dtype=bool)
            return nobody, nobody
        smooth = own.smooth_intf
        victims = interferers.ranked(victims, demands, smooth, vms)
        m = len(victims)
        owns = demands[victims]
        intfs = np.zeros(m + 1)
        intfs[1:] = smooth[victims]
        sums = np.add.accumulate(intfs)
        # How many victims each VM interferes with: a prefix of the ranking.
        reach = demands / self.opts.heavier
        k = owns.searchsorted(reach, side="right")
        summed = sums[k]
        # Never its own victim: a victim is inside its own prefix exactly when
        # its demand is within its own reach (the prefix is every victim whose
        # demand is), and then takes itself out.
        itself = owns <= reach[victims]
        summed[victims] -= intfs[1:] * itself
        count = k.copy()
        count[victims] -= itself
        # Its own inflation this interval (only VMs with an SLA report one).
        mine = np.zeros(n)
        np.copyto(mine, smooth, where=vms.reported)
        guard = mine > self.opts.protect * vms.threshold_pct
        valid = demands > table_mod.ZERO
        valid &= count > table_mod.IZERO
        protected = guard & valid
        summed -= count * mine
        ioshare = vms.mtu_rate / total
        increase = ioshare * summed
        increase /= table_mod.HUNDRED
        named = increase > table_mod.ZERO
        named &= valid
        np.greater(named, guard, out=named)     # and not guarded
        rows = named.nonzero()[0]
        if not len(rows):
            return named, protected
        # An untaxed VM (NaN) starts from the base rate, 1; a taxed one is above it.
        rate = np.fmax(own.tax_rate[rows], table_mod.ONE)
        increase = increase[rows]
        rate += increase
        np.minimum(rate, self.opts.max_rate, out=rate)
        own.tax_rate[rows] = rate
        answer.taxes = Taxes(vms.names, victims, intfs[1:], rows, k[rows], ioshare[rows],
                             increase, rate)
        return named, protected
