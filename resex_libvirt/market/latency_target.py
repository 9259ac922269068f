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

ResEx prices interference (ResEx paper, Ranadive et al. 2011, Section
VI-C, Algorithm 2): each report over the threshold raises the interferer's
rate by ``IOShare x IntfPct``, and the rate decays when the reports stop.
That is a bang-bang controller: the cap falls fast while the victim is over
its threshold and climbs back as soon as it is under, so it swings around
the point it should hold. This policy instead steers each interferer's cap
towards the largest value that keeps the victims' latency at a target just
inside their SLA, with the window update of PARDA (Gulati et al., "PARDA:
Proportional Allocation of Resources for Distributed Storage Access", FAST
2009, Section 3, the control law used in the end-to-end experiments of
Section 5)::

    w(t+1) = (1 - g) w(t) + g (L / lat(t)) w(t) + a

PARDA adjusts a host's issue-queue window ``w`` so that the array's
latency ``lat`` converges to the threshold ``L``; ``a`` is proportional to
the host's share weight ``beta``, so windows settle in proportion to the
shares (Table 6: windows "in proportion to overall beta values"). Here:

* ``w`` is an interferer's CPU cap (percent), the actuator ResEx already
  has (a cap throttles VMM-bypass I/O in proportion, paper Section V-B);
* ``lat`` is the latency of the most inflated victim the interferer
  interferes with, smoothed as PARDA smooths its latency estimate
  (``lat <- (1 - s) mean + s lat``, ``mean`` the average of the period's
  windows: sampling one window per period would alias with the
  scheduler's period and see the same phase of a capped sender's burst
  every time), and ``L`` its target:
  ``latency_sla_us x (1 + target x threshold)``, ``target`` < 1 so that the
  fixed point (where ``lat = L / (1 - a / (g w))``, just above ``L``) stays
  inside the SLA;
* ``a`` is ``additive`` x the VM's mClock shares / 100: PARDA's per-host
  shares become the VMs' shares;
* every step is bounded: ``w`` moves by at most ``max_step`` of itself per
  update, and updates happen every ``period`` of an epoch (10 ms with the
  paper's 1 ms interval: one Xen scheduling period, the time a new cap
  needs to show in the latency). Bounded, smoothed steps are what make it
  settle instead of oscillating.

Who is controlled follows the IOShares rules (:mod:`.io_shares`): every VM
whose I/O demand is at least ``heavier`` times the victim's own; a VM with
a latency SLA is never lowered while its own latency is over its target
(``protected``); below the target, caps only grow back to the limit. The
charging rate of a controlled VM is ``limit / cap`` (what IOShares'
``cap = limit / rate`` would have charged for that cap). As in
:class:`~.io_shares.IOShares`, running out of Resos cuts no VM by default
(``use_balance=True``: the FreeMarket credit rule, for VMs the controller
leaves at their limit only): the two never stack. Who is an interferer
differs in one point: ``heavier`` is 0, every other VM sending I/O is
controlled, because a controller that stops at the target costs a light
sender little, and a sensitive VM with big buffers is interfered with by
lighter ones.

Optional (``boost`` > 1), the communication-aware scheduling of Xen and Co.
(Govindan et al., "Xen and Co.: Communication-aware CPU Scheduling for
Consolidated Xen-based Hosting Platforms", VEE 2007: "preferentially
schedule communicating domains"): a latency-sensitive VM that sent I/O in
the last interval gets ``boost`` times its scheduler weight, so that when it
shares a pCPU with others the scheduler dispatches it first. The weight is
returned through :meth:`LatencyTarget.weights`; it changes no cap and no
price, and a VM's reservation and limit still bound its CPU.
"""

import numpy as np

from resex_libvirt.market import free_market
from resex_libvirt.market import io_shares
from resex_libvirt.market import policy
from resex_libvirt.market import response


class LatencyTarget(free_market.FreeMarket):
    name = "latency_target"
    #: It throttles the VMs that interfere (the board's congestion index counts on it).
    taxes_interferers = True
    #: ``lt_cap``: the cap the controller holds (NaN: not controlled, at the
    #: limit); ``lt_lat``: each victim's smoothed latency (NaN: none yet);
    #: ``lt_sum`` and ``lt_n``: this period's window means.
    columns = {**free_market.FreeMarket.columns, "lt_cap": (np.nan, np.float64),
               "lt_lat": (np.nan, np.float64), "lt_sum": (0.0, np.float64),
               "lt_n": (0, np.int64), **response.COLUMNS}

    def __init__(self, gain=0.3, smoothing=0.5, target=0.85, additive=0.02, max_step=0.25,
                 period=0.01, heavier=0.0, boost=1.0, use_balance=False, check_response=True,
                 **kwargs):
        super().__init__(**kwargs)
        self.use_balance = use_balance
        checks = (("gain", gain, 0.0, 1.0), ("smoothing", smoothing, 0.0, 0.99),
                  ("target", target, 0.0, 1.0), ("max_step", max_step, 0.0, 1.0),
                  ("period", period, 0.0, 1.0))
        for label, value, lo, hi in checks:
            if not lo <= value <= hi or (label in ("gain", "max_step", "period") and
                                         not value > 0.0):
                raise ValueError("%s must be in (%g, %g], got %r" % (label, lo, hi, value))
        if additive < 0.0:
            raise ValueError("additive must be >= 0")
        if heavier < 0.0:
            raise ValueError("heavier must be >= 0")
        if boost < 1.0:
            raise ValueError("boost must be >= 1")
        self.gain = gain
        self.smoothing = smoothing
        self.target = target
        self.additive = additive
        self.max_step = max_step
        self.period = period
        self.heavier = heavier
        self.boost = boost
        self.check = response.ResponseCheck() if check_response else None
        self._since = 0
        self._weights = {}

    # -- the controller -----------------------------------------------------
    def _observe(self, view):
        t = view.t
        got = t.win & (t.win_count > 0)
        if got.any():
            t.lt_sum[got] += t.win_mean[got]
            t.lt_n[got] += 1

    def _smooth(self, view):
        """PARDA's latency estimate, from the mean of this period's windows."""
        t = view.t
        got = t.lt_n > 0
        if got.any():
            s = self.smoothing
            mean = t.lt_sum[got] / t.lt_n[got]
            old = t.lt_lat[got]
            t.lt_lat[got] = np.where(np.isnan(old), mean, (1.0 - s) * mean + s * old)
            t.lt_sum[:] = 0.0
            t.lt_n[:] = 0

    def ratios(self, view):
        """Per row, ``2 - lat / L`` of each sensitive VM with a latency estimate (else NaN)."""
        t = view.t
        lat = t.lt_lat
        goal = t.sla_us * (1.0 + self.target * t.threshold / 100.0)
        # PARDA's L / lat, linearised around the target (see the module docstring).
        ratio = 2.0 - lat / goal
        ratio = np.where(ratio > 0.0, ratio, 0.0)
        # No estimate, or no latency to aim at (an SLA of 0 us): no ratio.
        return np.where((lat > 0.0) & (goal > 0.0), ratio, np.nan)

    def _update(self, view):
        t = view.t
        ratios = self.ratios(view)
        demands = io_shares._demands(t)
        check = self.check
        # Each VM's signal: the worst ratio among the victims it interferes
        # with; ``worst``: that victim's latency over its target.
        signal = np.full(len(t), np.inf)
        worst = np.full(len(t), -np.inf)
        load = t.lt_lat / (t.sla_us * (1.0 + self.target * t.threshold / 100.0))
        sending = demands > 0.0
        if check is not None:
            sending &= ~response.resting(t)   # left alone: cutting it did not help
            response.tick(t)
        for victim in (~np.isnan(ratios)).nonzero()[0].tolist():
            floor = self.heavier * demands[victim]
            hit = sending & (demands >= floor)
            hit[victim] = False
            signal = np.where(hit & (ratios[victim] < signal), ratios[victim], signal)
            worst = np.where(hit & (load[victim] > worst), load[victim], worst)
        has = signal != np.inf
        own = np.where(np.isnan(ratios), 2.0, ratios)
        # Its own latency is over its target: never lowered, it grows back as
        # fast as the victims' signal would lower it.
        protected = has & (own < 1.0)
        signal = np.where(protected, 2.0 - own, signal)
        held = t.lt_cap
        rows = (has | ~np.isnan(held)).nonzero()[0]
        if not len(rows):
            return
        g, step = self.gain, self.max_step
        limit, floor = t.limit[rows], t.floor[rows]
        w = np.where(np.isnan(held[rows]), t.cap[rows], held[rows])
        ratio = np.where(has[rows], signal[rows], 1.0 + step)   # no victim over target: grow back
        shares = t.shares[rows] / 100.0
        new = (1.0 - g) * w + g * ratio * w + self.additive * shares
        new = np.minimum(w * (1.0 + step), np.maximum(w * (1.0 - step), new))
        new = np.where(new >= limit, limit, np.where(new <= floor, floor, new))
        guarded = protected[rows]
        futile = np.zeros(len(rows), dtype=bool)
        if check is not None:
            cut = has[rows] & ~guarded & (new < limit)
            if cut.any():
                futile[cut] = response.judge(check, t, rows[cut], np.isnan(held[rows[cut]]),
                                             worst[rows[cut]], w[cut], new[cut])
                new = np.where(futile, limit, new)
            response.settled(t, rows[(new >= limit) & ~futile])
        free = new >= limit
        names, reasons = t.names, self._reasons
        back = rows[free]
        held[back] = np.nan
        moved = back[t.cap[back] != t.limit[back]]
        view.answer(moved, t.limit[moved], 1.0)
        kept = rows[~free]
        held[kept] = new[~free]
        t.credit_cap[kept] = np.nan      # no credit cap under the controller
        view.answer(kept, new[~free], limit[~free] / new[~free])
        for k, is_free, is_guarded, is_futile in zip(rows.tolist(), free.tolist(),
                                                     guarded.tolist(), futile.tolist()):
            reasons[names[k]] = (policy.PROTECTED if is_guarded else
                                 policy.NO_RESPONSE if is_futile else
                                 policy.UNCAPPED if is_free else policy.TARGET)

    # -- the policy interface --------------------------------------------------
    def may_cut(self, view, rows):
        controlled = ~np.isnan(view.t.lt_cap[rows])
        ok = np.zeros(len(rows), dtype=bool)
        ok[~controlled] = super().may_cut(view, rows[~controlled])
        return ok

    def decide_slots(self, view):
        self._observe(view)
        every = max(1, round(self.period * view.intervals_per_epoch))
        self._since += 1
        if self._since >= every:
            self._since = 0
            self._smooth(view)
            self._update(view)
        if self.use_balance:
            t = view.t
            answered = view.answered()
            for rows, caps in self.lowered(view):
                free = ~answered[rows] & np.isnan(t.lt_cap[rows])
                rows, caps = rows[free], caps[free]
                view.answer(rows, caps, 1.0)
                self._note_credit(view, rows, caps)
        if self.boost > 1.0:
            self._boost(view)

    def _boost(self, view):
        t = view.t
        sending = t.sensitive & t.seen & (t.tx_mtus > 0)
        self._weights = {t.names[k]: self.boost for k in sending.nonzero()[0].tolist()}

    def weights(self):
        """``{vm: factor}``: the Xen-and-Co. weight boost in force (empty unless ``boost`` > 1)."""
        return self._weights

    def forget(self, vm):
        super().forget(vm)
        self._weights.pop(vm, None)
