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

import bisect
import math

from resex_libvirt.market import free_market
from resex_libvirt.market import policy


class IOSharesPaper(free_market.FreeMarketPaper):
    """Algorithm 2 as published, with the deviations listed in the module docstring."""

    name = "io_shares_paper"
    #: It throttles the VMs that interfere (the board's congestion index counts on it).
    taxes_interferers = True

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
        self._rates = {}
        self._taxed = set()
        self._taxes = []

    def _decay_factor(self, view):
        intervals = max(1e-9, self.decay_half_life * view.intervals_per_epoch)
        return math.pow(0.5, 1.0 / intervals)

    def find_interferer(self, view, victim, demands=None, top=None):
        """Alg. 2 line 7: the largest I/O demand other than ``victim``'s.

        ``demands`` (:func:`_demands`) and ``top`` (its two largest,
        :func:`_top_two`) are passed when the caller has them: one pass for
        all victims of an interval instead of one per victim.
        """
        if demands is None:
            demands = _demands(view)
        if top is None:
            top = _top_two(demands)
        best_demand, best = next(((d, vm) for d, vm in top if vm != victim), (0.0, None))
        own = demands.get(victim, 0.0)
        if best is None or best_demand <= 0.0 or best_demand < self.heavier * own:
            return None
        return best

    def decide(self, view):
        self._taxes = []
        named = set()
        mtu_rate = view.mtu_rate
        rates = self._rates
        total_mtus = 0.0
        top = None
        for victim, intf in view.interference.items():
            spec = view.specs.get(victim)
            if spec is None or not spec.sla.sensitive:
                continue
            if intf <= spec.sla.interference_threshold_pct:
                continue
            if top is None:
                demands = _demands(view)
                top = _top_two(demands)
                total_mtus = sum(mtu_rate.get(vm, 0.0) for vm in view.specs)
            culprit = self.find_interferer(view, victim, demands, top)
            if culprit is None or total_mtus <= 0:
                continue
            ioshare = mtu_rate[culprit] / total_mtus
            increase = ioshare * intf / 100.0
            rate = self._rates.get(culprit, 1.0)
            self._rates[culprit] = min(self.max_rate, rate + increase)
            named.add(culprit)
            self._taxes.append((victim, culprit, intf, ioshare, increase,
                                self._rates[culprit]))
        out = {}
        reasons = self._reasons
        if self.use_balance:
            for vm, cap in self.lowered(view).items():
                out[vm] = (cap, rates.get(vm, 1.0))
                reasons[vm] = policy.CREDIT if cap < view.bounds[vm][1] else policy.UNCAPPED
        factor = None
        for vm in list(self._taxed | named):
            rate = rates.get(vm, 1.0)
            if vm not in named:
                if factor is None:
                    factor = self._decay_factor(view)
                rate = 1.0 + (rate - 1.0) * factor
                if rate < 1.0 + 1e-6:
                    rate = 1.0
                rates[vm] = rate
            limit = view.bounds[vm][1]
            cap = limit if rate == 1.0 else view.clamp(vm, limit / rate)
            if self.use_balance:
                balance_cap = self._caps.get(vm, limit)
                if balance_cap < cap:
                    cap = balance_cap
            out[vm] = (cap, rate)
            if rate == 1.0:
                self._taxed.discard(vm)
                rates.pop(vm, None)
                if cap >= limit:
                    reasons[vm] = policy.UNCAPPED
            else:
                self._taxed.add(vm)
                reasons[vm] = policy.TAX if vm in named else policy.DECAY
        return out

    def rate(self, vm):
        return self._rates.get(vm, 1.0)

    def taxes(self):
        return self._taxes

    def forget(self, vm):
        super().forget(vm)
        self._rates.pop(vm, None)
        self._taxed.discard(vm)


def _demands(view):
    """Each VM's I/O demand: its recent MTU rate scaled up by how far its cap holds it down."""
    out = {}
    caps, bounds, specs = view.caps, view.bounds, view.specs
    for vm, rate in view.mtu_rate.items():
        if vm not in specs:
            continue
        cap = caps.get(vm)
        limit = bounds[vm][1]
        if rate > 0.0 and cap is not None and 0.0 < cap < limit:
            rate = rate * limit / cap
        out[vm] = rate
    return out


def _top_two(demands):
    """The two largest demands as ``[(demand, vm), ...]``."""
    first = second = (0.0, None)
    for vm, demand in demands.items():
        if demand > first[0]:
            first, second = (demand, vm), first
        elif demand > second[0]:
            second = (demand, vm)
    return [first, second]


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
        self.decay_half_life = decay_half_life
        self.heavier = heavier
        self.max_rate = max_rate
        self.use_balance = use_balance
        self.smoothing = smoothing
        self.protect = protect
        self.protect_speedup = protect_speedup
        self._rates = {}
        self._taxes = []
        self._smoothed = {}

    def _smooth(self, view):
        """Each reporting sensitive VM's interference, averaged over ``smoothing`` of an epoch.

        ``{vm: (interference, mean_increase)}``: the paper's percentage (the
        larger of the mean's and the deviation's increase) and the mean's
        increase alone, each a moving average.
        """
        alpha = 1.0 / max(1.0, self.smoothing * view.intervals_per_epoch)
        out = {}
        smoothed = self._smoothed
        windows = view.windows
        for vm, intf in view.interference.items():
            spec = view.specs.get(vm)
            if spec is None or not spec.sla.sensitive:
                continue
            win = windows.get(vm)
            base = spec.sla.latency_sla_us
            mean = (100.0 * (win.mean_us - base) / base) if win is not None and base else intf
            old = smoothed.get(vm)
            if old is None:
                value = (intf, mean)
            else:
                value = (old[0] + alpha * (intf - old[0]), old[1] + alpha * (mean - old[1]))
            smoothed[vm] = out[vm] = value
        return out

    def may_cut(self, view, vm):
        if vm in self._rates:
            return False         # taxed: the tax alone sets its cap
        return super().may_cut(view, vm)

    def decide(self, view):
        self._taxes = []
        rates, reasons, specs = self._rates, self._reasons, view.specs
        smoothed = self._smooth(view)
        named = {}
        protected = set()
        victims = [(vm, intf) for vm, (intf, mean) in smoothed.items()
                   if mean > specs[vm].sla.interference_threshold_pct]
        if victims:
            self._tax(view, victims, smoothed, named, protected)
        out = {}
        factor = fast = None
        for vm in list(rates):
            rate = rates[vm]
            if vm in view.bounds and vm not in named:
                if factor is None:
                    factor = self._decay_factor(view)
                    fast = factor ** self.protect_speedup
                rate = 1.0 + (rate - 1.0) * (fast if vm in protected else factor)
                if rate < 1.0 + 1e-6:
                    rate = 1.0
            if vm not in view.bounds:
                del rates[vm]
                continue
            limit = view.bounds[vm][1]
            if rate == 1.0:
                del rates[vm]
                self._caps.pop(vm, None)
                out[vm] = (limit, 1.0)
                reasons[vm] = policy.UNCAPPED
                continue
            rates[vm] = rate
            self._caps.pop(vm, None)      # no credit cap under a tax: they never stack
            out[vm] = (view.clamp(vm, limit / rate), rate)
            reasons[vm] = (policy.TAX if vm in named else
                           policy.PROTECTED if vm in protected else policy.DECAY)
        if self.use_balance:
            for vm, cap in self.lowered(view).items():
                if vm not in out:
                    out[vm] = (cap, 1.0)
                    reasons[vm] = (policy.CREDIT if cap < view.bounds[vm][1]
                                   else policy.UNCAPPED)
        return out

    def _tax(self, view, victims, smoothed, named, protected):
        """Raise every interferer's rate by its IOShare times the victims' inflation.

        Summed over the victims it interferes with: the VM ``u`` interferes
        with victim ``v`` when ``demand(u) >= heavier x demand(v)``, so with
        the victims sorted by their own demand these are a prefix, and the
        sum is a prefix sum: one pass over the VMs, not one per victim.
        """
        specs, rates, mtu_rate = view.specs, self._rates, view.mtu_rate
        demands = _demands(view)
        total = sum(mtu_rate.get(vm, 0.0) for vm in specs)
        if total <= 0.0:
            return
        ranked = sorted((demands.get(vm, 0.0), intf, vm) for vm, intf in victims)
        owns = [own for own, _intf, _vm in ranked]
        sums = [0.0]
        worst = [(0.0, None)]
        for _own, intf, vm in ranked:
            sums.append(sums[-1] + intf)
            worst.append(max(worst[-1], (intf, vm)))
        position = {vm: k for k, (_own, _intf, vm) in enumerate(ranked)}
        heavier, protect, max_rate = self.heavier, self.protect, self.max_rate
        for vm, demand in demands.items():
            if demand <= 0.0:
                continue
            k = bisect.bisect_right(owns, demand / heavier)
            if k == 0:
                continue
            summed, count = sums[k], k
            own_k = position.get(vm)
            if own_k is not None and own_k < k:      # never its own victim
                summed -= ranked[own_k][1]
                count -= 1
                if count == 0:
                    continue
            sla = specs[vm].sla
            if sla.sensitive:
                mine = smoothed.get(vm, (0.0, 0.0))[0]
                if mine > protect * sla.interference_threshold_pct:
                    protected.add(vm)
                    continue
                summed -= count * mine
            ioshare = mtu_rate.get(vm, 0.0) / total
            increase = ioshare * summed / 100.0
            if increase <= 0.0:
                continue
            rate = min(max_rate, rates.get(vm, 1.0) + increase)
            rates[vm] = named[vm] = rate
            intf, victim = worst[k]
            self._taxes.append((victim, vm, intf, ioshare, increase, rate))

    def _decay_factor(self, view):
        intervals = max(1e-9, self.decay_half_life * view.intervals_per_epoch)
        return math.pow(0.5, 1.0 / intervals)

    def rate(self, vm):
        return self._rates.get(vm, 1.0)

    def taxes(self):
        return self._taxes

    def forget(self, vm):
        super().forget(vm)
        self._rates.pop(vm, None)
        self._smoothed.pop(vm, None)
