"""IOShares: lower latency variation by congestion pricing (Section VI-C, Alg. 2).

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

import math

from resex_libvirt.market import free_market


class IOShares(free_market.FreeMarket):
    name = "io_shares"

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
        if self.use_balance:
            for vm, cap in self.lowered(view).items():
                out[vm] = (cap, rates.get(vm, 1.0))
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
            else:
                self._taxed.add(vm)
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
