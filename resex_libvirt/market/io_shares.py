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

Two variants are registered. ``io_shares_paper`` (:class:`IOSharesPaper`)
is Algorithm 2 as described below, kept exactly for the reproduction of the
paper's figures. ``io_shares`` (:class:`IOShares`) keeps the formulas and
changes who pays and when, for the cases the paper's two VMs do not show
(see the class and ``doc/source/market.rst``).

For every latency-sensitive VM whose interference percentage (Alg. 2 line 6,
:mod:`resex_libvirt.market.latency`) exceeds its SLA threshold, the
interfering VM is "the largest MTU sender other than itself" (line 7) and its
charging rate rises by::

    r' = IOShare x IntfPct,   IOShare = MTUs(interferer) / MTUs(all VMs)

(IntfPct as a fraction: 25% -> 0.25). Its cap becomes::

    New CPU Cap = 100 x PreviousRate / (PreviousRate + r')

Applied to the cap the VM already has, that is ``cap = limit / rate`` with
``rate`` the accumulated multiplier (1 = base price), which is exactly the
paper's formula on the first step and keeps cap and rate consistent on the
next ones. The raised rate is also what the VM is charged at from the next
interval (lines 9-11), so a taxed VM also drains its Resos faster and the
FreeMarket rule of Alg. 1 applies on top: the cap is the smaller of the two.

"Rates decay back when interference is gone": a VM not named as interferer
in an interval sees ``rate - 1`` shrink with a half-life of
``decay_half_life`` of an epoch. No interference, no throttling.

Deviations, and why:

* MTUs are compared as an exponentially weighted rate, not the count of one
  interval: at 1 ms a capped VM is often parked for a whole interval and
  would look idle just when it is the culprit.
* An interferer must *demand* at least ``heavier`` (1.5) times the
  reporting VM's own I/O. The paper's 64KB-64KB case (Fig. 8) shows ResEx
  "not penalize VMs if they are doing the same amount of I/O"; Algorithm 2
  alone would tax the twin whenever the two collide. Demand is the recent
  MTU rate scaled by ``limit / cap``: a cap throttles VMM-bypass I/O in
  proportion (Section V-B, Figs. 3-4), so a 2 MB server capped to a few
  percent still demands 32 times what a 64 KB one does, and stays the
  culprit while the interference lasts. Comparing raw rates instead would
  let the tax lapse as soon as it started working. The largest sender is
  chosen by the same demand; IOShare itself uses the MTUs actually sent, as
  in the paper.
* Only VMs with a declared latency SLA can name an interferer, and the
  market clamps every cap to the interferer's reservation: a tenant that
  lies about its latency can at most push others down to their reservation.
"""

import collections.abc
import math

import numpy as np

from resex_libvirt.market import free_market
from resex_libvirt.market import policy
from resex_libvirt.market import table as table_mod

_NONE = (0.0, None)


class IOSharesPaper(free_market.FreeMarketPaper):
    """Algorithm 2 as published, with the deviations listed in the module docstring.

    Its rates are the ``tax_rate`` column of the market's table (NaN: the
    VM pays the base price).
    """

    name = "io_shares_paper"
    #: It throttles the VMs that interfere (the board's congestion index counts on it).
    taxes_interferers = True
    columns = {**free_market.FreeMarketPaper.columns, "tax_rate": (np.nan, np.float64)}

    def __init__(self, decay_half_life=0.05, heavier=1.5, max_rate=1000.0,
                 use_balance=True, **kwargs):
        super().__init__(**kwargs)
        if not decay_half_life > 0:
            raise ValueError("decay_half_life must be > 0")
        if heavier < 1.0:
            raise ValueError("heavier must be >= 1")
        self.decay_half_life = decay_half_life
        self.heavier = heavier
        self.max_rate = max_rate
        self.use_balance = use_balance
        self._taxes = []

    def _decay_factor(self, view):
        intervals = max(1e-9, self.decay_half_life * view.intervals_per_epoch)
        return math.pow(0.5, 1.0 / intervals)

    def find_interferer(self, victim, demands, top):
        """Alg. 2 line 7: the row of the largest I/O demand other than row ``victim``'s.

        ``demands`` is every VM's demand (:func:`_demands`) and ``top`` its
        two largest (:func:`top_two`): one pass for all victims of an interval.
        """
        best_demand, best = next(((d, k) for d, k in top if k != victim), _NONE)
        own = demands[victim]
        if best is None or best_demand <= 0.0 or best_demand < self.heavier * own:
            return None
        return best

    def decide_slots(self, view):
        """Alg. 2: tax each victim's interferer, decay the others, answer every taxed VM.

        Victims over their threshold are taken in row order (the order the
        VMs joined), and each raises its interferer's rate in turn (lines
        5-11); then Alg. 1's credit caps (``use_balance``), and the cap of
        every taxed VM is ``limit / rate``, or its credit cap if lower.
        """
        self._taxes = []
        t = view.t
        names, rates = t.names, t.tax_rate
        named = set()
        top = None
        total = 0.0
        over = (t.intf > t.threshold).nonzero()[0].tolist()
        intf = t.intf.tolist() if over else ()
        for victim in over:
            if top is None:
                demands = _demands(t)
                top = top_two(demands)
                total = table_mod.seqsum(t.mtu_rate)
            culprit = self.find_interferer(victim, demands, top)
            if culprit is None or total <= 0:
                continue
            ioshare = float(t.mtu_rate[culprit]) / total
            increase = ioshare * intf[victim] / 100.0
            rate = float(rates[culprit])
            rate = min(self.max_rate, (1.0 if rate != rate else rate) + increase)
            rates[culprit] = rate
            named.add(culprit)
            self._taxes.append((names[victim], names[culprit], intf[victim], ioshare, increase,
                                rate))
        reasons = self._reasons
        limit = t.limit
        if self.use_balance:
            for rows, caps in self.lowered(view):
                got = rates[rows]
                view.answer(rows, caps, table_mod.pick(np.isnan(got), 1.0, got))
                self._note_credit(view, rows, caps)
        factor = None
        rows, caps, got = [], [], []
        for k in (~np.isnan(rates)).nonzero()[0].tolist():
            rate = float(rates[k])
            if k not in named:
                if factor is None:
                    factor = self._decay_factor(view)
                rate = 1.0 + (rate - 1.0) * factor
                if rate < 1.0 + 1e-6:
                    rate = 1.0
            full = float(limit[k])
            if rate == 1.0:
                cap = full
            else:
                cap = full / rate
                floor = float(t.floor[k])
                cap = full if cap >= full else (floor if cap <= floor else cap)
            if self.use_balance:
                held = float(t.credit_cap[k])
                if held < cap:
                    cap = held
            rows.append(k)
            caps.append(cap)
            got.append(rate)
            vm = names[k]
            if rate == 1.0:
                rates[k] = np.nan
                if cap >= full:
                    reasons[vm] = policy.UNCAPPED
            else:
                rates[k] = rate
                reasons[vm] = policy.TAX if k in named else policy.DECAY
        if rows:
            view.answer(np.array(rows, dtype=np.intp), np.array(caps), np.array(got))

    def taxes(self):
        return self._taxes


def _demands(t):
    """Each VM's I/O demand: its recent MTU rate scaled up by how far its cap holds it down."""
    rate, cap, limit = t.mtu_rate, t.cap, t.limit
    held = cap < limit
    held &= cap > table_mod.ZERO
    # A rate of zero stays zero either way.
    return np.divide(rate * limit, cap, out=rate.copy(), where=held)


def top_two(demands):
    """The two largest positive demands as ``[(demand, row), ...]`` (``(0.0, None)`` if fewer).

    Ties go to the lower row, as a scan in row order keeping strict maxima would.
    """
    out = []
    if len(demands):
        first = int(np.argmax(demands))
        if demands[first] > 0.0:
            out.append((float(demands[first]), first))
            if len(demands) > 1:
                rest = demands.copy()
                rest[first] = -np.inf
                second = int(np.argmax(rest))
                if rest[second] > 0.0:
                    out.append((float(rest[second]), second))
    while len(out) < 2:
        out.append(_NONE)
    return out


_FREE, _TAXED, _PROTECTED, _DECAY = range(4)
_KINDS = (policy.UNCAPPED, policy.TAX, policy.PROTECTED, policy.DECAY)


def _ranked(rows, demands, intf, t):
    """``rows`` ordered by (demand, interference, name), as a sort of those tuples."""
    return rows[np.lexsort((t.name_rank()[rows], intf[rows], demands[rows]))]


class Taxes(collections.abc.Sequence):
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


class IOShares(free_market.FreeMarket):
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
    """

    name = "io_shares"
    #: It throttles the VMs that interfere (the board's congestion index counts on it).
    taxes_interferers = True
    #: ``tax_rate``: the rate of each taxed VM (NaN: untaxed); ``smooth_intf`` and
    #: ``smooth_mean``: each sensitive VM's moving averages (NaN: none yet).
    columns = {**free_market.FreeMarket.columns, "tax_rate": (np.nan, np.float64),
               "tax_kind": (-1, np.int8), "smooth_intf": (np.nan, np.float64),
               "smooth_mean": (np.nan, np.float64)}

    def __init__(self, decay_half_life=0.05, heavier=1.1, max_rate=1000.0,
                 use_balance=False, smoothing=0.5, protect=0.8, protect_speedup=4.0,
                 **kwargs):
        super().__init__(**kwargs)
        if not decay_half_life > 0:
            raise ValueError("decay_half_life must be > 0")
        if heavier < 1.0:
            raise ValueError("heavier must be >= 1")
        if not 0.0 <= smoothing <= 1.0:
            raise ValueError("smoothing must be in [0, 1] (a fraction of the epoch)")
        if not 0.0 < protect <= 1.0:
            raise ValueError("protect must be in (0, 1]")
        if protect_speedup < 1.0:
            raise ValueError("protect_speedup must be >= 1")
        if not max_rate >= 1.0:
            raise ValueError("max_rate must be >= 1 (the base rate)")
        self.decay_half_life = decay_half_life
        self.heavier = heavier
        self.max_rate = max_rate
        self.use_balance = use_balance
        self.smoothing = smoothing
        self.protect = protect
        self.protect_speedup = protect_speedup
        self._taxes = []
        self._names = None

    def _smooth(self, view):
        """Each reporting sensitive VM's interference, averaged over ``smoothing`` of an epoch.

        Updates the ``smooth_intf`` column (the paper's percentage: the
        larger of the mean's and the deviation's increase) and
        ``smooth_mean`` (the mean's increase alone), each a moving average,
        for the VMs that reported this interval (``view.win_rows``), and
        returns their new ``smooth_mean`` (aligned with those rows).
        """
        t = view.t
        rows = view.win_rows
        if not len(rows):
            return np.zeros(0)
        alpha = 1.0 / max(1.0, self.smoothing * view.intervals_per_epoch)
        intf, mean = view.win_intf, view.win_mean_pct
        old_intf, old_mean = t.smooth_intf[rows], t.smooth_mean[rows]
        fresh = np.isnan(old_intf)
        new_intf = old_intf + alpha * (intf - old_intf)
        new_mean = old_mean + alpha * (mean - old_mean)
        if np.count_nonzero(fresh):
            np.copyto(new_intf, intf, where=fresh)
            np.copyto(new_mean, mean, where=fresh)
        t.smooth_intf[rows] = new_intf
        t.smooth_mean[rows] = new_mean
        return new_mean

    def may_cut(self, view, rows):
        taxed = ~np.isnan(view.t.tax_rate[rows])   # the tax alone sets its cap
        ok = np.zeros(len(rows), dtype=bool)
        ok[~taxed] = super().may_cut(view, rows[~taxed])
        return ok

    def decide_slots(self, view):
        self._taxes = ()
        t = view.t
        mean = self._smooth(view)
        named = protected = None
        reported = view.win_rows
        victims = reported[mean > t.threshold[reported]]
        if len(victims):
            named, protected = self._tax(view, victims)
        taxed = (~np.isnan(t.tax_rate)).nonzero()[0]
        if len(taxed):
            self._settle(view, taxed, named, protected)
        if self.use_balance:
            answered = view.answered()
            for rows, caps in self.lowered(view):
                free = ~answered[rows]
                rows, caps = rows[free], caps[free]
                view.answer(rows, caps, 1.0)
                self._note_credit(view, rows, caps)

    def _settle(self, view, rows, named, protected):
        """Decay the rates of the taxed VMs (``rows``) not named this interval; answer them all."""
        t = view.t
        rate = t.tax_rate[rows]
        decaying = np.ones(len(rows), dtype=bool) if named is None else ~named[rows]
        if np.count_nonzero(decaying):
            factor = self._decay_factor(view)
            f = table_mod.filled(len(rows), factor)
            if protected is not None:
                np.copyto(f, factor ** self.protect_speedup, where=protected[rows])
            decayed = rate - 1.0
            decayed *= f
            decayed += 1.0
            decayed[decayed < 1.0 + 1e-6] = 1.0
            np.copyto(rate, decayed, where=decaying)
        limit = t.limit[rows]
        done = rate == table_mod.ONE
        caps = limit / rate
        np.minimum(caps, limit, out=caps)       # the clamp of SlotView.clamp
        np.maximum(caps, t.floor[rows], out=caps)
        freed = np.count_nonzero(done)
        if freed:
            np.copyto(caps, limit, where=done)
            t.tax_rate[rows] = table_mod.pick(done, np.nan, rate)
        else:
            t.tax_rate[rows] = rate
        view.answer(rows, caps, rate)
        t.credit_cap[rows] = np.nan      # no credit cap under a tax: they never stack
        # Why each taxed VM has its cap: written only where it changed.
        kind = table_mod.filled(len(rows), _DECAY, np.int8)
        if named is not None:
            np.copyto(kind, _TAXED, where=named[rows])
            np.copyto(kind, _PROTECTED, where=protected[rows])
        if freed:
            np.copyto(kind, _FREE, where=done)
        moved = kind != t.tax_kind[rows]
        if np.count_nonzero(moved):
            t.tax_kind[rows] = kind
            reasons, names = self._reasons, t.names
            for k, why in zip(rows[moved].tolist(), kind[moved].tolist()):
                reasons[names[k]] = _KINDS[why]

    def _tax(self, view, victims):
        """Raise every interferer's rate by its IOShare times the victims' inflation.

        Summed over the victims it interferes with: the VM ``u`` interferes
        with victim ``v`` when ``demand(u) >= heavier x demand(v)``, so with
        the victims sorted by their own demand these are a prefix, and the
        sum is a prefix sum: one pass over the VMs, not one per victim. A
        sensitive interferer's own (smoothed) inflation is taken off each
        victim's, and one whose own is over ``protect`` of its threshold is
        protected instead of taxed. Every row is worked out; the masks say
        which rows the rules keep. Returns the masks of the VMs named
        (taxed) and protected this interval.
        """
        t = view.t
        n = len(t)
        demands = _demands(t)
        total = table_mod.seqsum(t.mtu_rate)
        if total <= 0.0:
            nobody = np.zeros(n, dtype=bool)
            return nobody, nobody
        smooth = t.smooth_intf
        victims = _ranked(victims, demands, smooth, t)
        m = len(victims)
        owns = demands[victims]
        intfs = np.zeros(m + 1)
        intfs[1:] = smooth[victims]
        sums = np.add.accumulate(intfs)
        # How many victims each VM interferes with: a prefix of the ranking.
        reach = demands / self.heavier
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
        np.copyto(mine, smooth, where=t.win)
        guard = mine > self.protect * t.threshold
        valid = demands > table_mod.ZERO
        valid &= count > table_mod.IZERO
        protected = guard & valid
        summed -= count * mine
        ioshare = t.mtu_rate / total
        increase = ioshare * summed
        increase /= table_mod.HUNDRED
        named = increase > table_mod.ZERO
        named &= valid
        np.greater(named, guard, out=named)     # and not guarded
        rows = named.nonzero()[0]
        if not len(rows):
            return named, protected
        # An untaxed VM (NaN) starts from the base rate, 1; a taxed one is above it.
        rate = np.fmax(t.tax_rate[rows], table_mod.ONE)
        increase = increase[rows]
        rate += increase
        np.minimum(rate, self.max_rate, out=rate)
        t.tax_rate[rows] = rate
        self._taxes = Taxes(self._names_now(t), victims, intfs[1:], rows, k[rows],
                            ioshare[rows], increase, rate)
        return named, protected

    def _names_now(self, t):
        """The VMs' names as they are now (a copy kept until one joins or leaves)."""
        if self._names is None or self._names[0] != t.version:
            self._names = (t.version, list(t.names))
        return self._names[1]

    def _decay_factor(self, view):
        intervals = max(1e-9, self.decay_half_life * view.intervals_per_epoch)
        return math.pow(0.5, 1.0 / intervals)

    def taxes(self):
        return self._taxes
