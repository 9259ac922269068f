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
victims' latency at a target just inside their SLA, with the window update
of PARDA (Gulati et al., FAST 2009, Section 3)::

    w(t+1) = (1 - g) w(t) + g (L / lat(t)) w(t) + a

in bounded, smoothed steps; a cap whose victim's latency does not respond
is released (:mod:`.response`); optionally (``boost`` > 1) a
latency-sensitive VM that sends gets a higher scheduler weight (Xen and
Co., VEE 2007); a sensitive VM whose vCPUs wait for a pCPU gets one too,
and its CPU-using neighbours a cap if that is not enough
(:mod:`.cpu_contention`). The mapping of PARDA's terms onto caps, shares and latency
windows is in ``doc/source/market.rst``.
"""

import numpy as np

from resex_libvirt.market import cpu_contention
from resex_libvirt.market import credit
from resex_libvirt.market import interferers
from resex_libvirt.market import onset
from resex_libvirt.market import policy
from resex_libvirt.market import response


def _opt(name, default, help, **bounds):
    return policy.Option(name, default, help=help, **bounds)


class LatencyTarget(policy.Policy):
    """PARDA's window update on the interferers' caps (see the module docstring)."""

    name = "latency_target"
    #: It throttles the VMs that interfere (the board's congestion index counts on it).
    taxes_interferers = True
    #: ``lt_cap``: the cap the controller holds (NaN: not controlled, at the
    #: limit); ``lt_lat``: each victim's smoothed latency (NaN: none yet);
    #: ``lt_sum`` and ``lt_n``: this period's window means; ``lt_breach``: its
    #: victims were over their SLA's bound at the last update (``breach_step``).
    columns = {**credit.COLUMNS, "lt_cap": (np.nan, np.float64),
               "lt_lat": (np.nan, np.float64), "lt_sum": (0.0, np.float64),
               "lt_n": (0, np.int64), "lt_breach": (False, bool), **response.COLUMNS,
               **cpu_contention.COLUMNS, **onset.COLUMNS}

    options = credit.OPTIONS + cpu_contention.OPTIONS + (
        _opt("gain", 0.3, "PARDA's gain g: how far each update moves towards the target.",
             min=0.0, max=1.0, open_min=True),
        _opt("smoothing", 0.5, "PARDA's latency smoothing s (lat <- (1 - s) mean + s lat).",
             min=0.0, max=0.99),
        _opt("target", 0.85, "The target latency, as a fraction of the SLA's threshold above "
             "the SLA: latency_sla_us x (1 + target x threshold).", min=0.0, max=1.0),
        _opt("additive", 0.02, "PARDA's additive term a, per 100 mClock shares.", min=0.0),
        _opt("max_step", 0.25, "The most a cap moves per update, as a fraction of itself.",
             min=0.0, max=1.0, open_min=True),
        _opt("period", 0.01, "Fraction of an epoch between two updates (10 ms at the "
             "paper's 1 ms interval: one Xen scheduling period).",
             min=0.0, max=1.0, open_min=True),
        _opt("heavier", 0.0, "Only VMs demanding at least this many times a victim's own I/O "
             "are controlled (0: every other VM that sends).", min=0.0),
        _opt("boost", 1.0, "Scheduler-weight factor of a latency-sensitive VM that sends "
             "(Xen and Co.; 1: off).", min=1.0),
        _opt("use_balance", False, "Apply the credit rule (low_balance, epoch_left, step) to "
             "the VMs the controller leaves at their limit; off: running out of Resos cuts "
             "no VM."),
        _opt("check_response", True, "Release a cap whose victim's latency does not respond "
             "to it (reason no_response), with a doubling backoff."),
        _opt("breach_step", 0.0, "While a victim's latency is over its SLA's bound (not only "
             "its target), cut its interferers by this fraction of max_step every update "
             "(0: off, the proportional law alone). Faster protection, at some throughput.",
             min=0.0, max=1.0),
    ) + onset.OPTIONS

    def __init__(self, **options):
        self.opts = policy.configure(self.options, options)
        self.check = response.ResponseCheck() if self.opts.check_response else None
        self._onset = onset.Onset()
        self._since = 0
        # The weight boosts in force ({row: factor}): ``boost``'s, CPU contention's.
        self._weights = {}
        self._cpu = cpu_contention.Counters()
        self._cpu_weights = {}

    def start_epoch(self, step):
        return credit.reset(step)

    # -- the controller -----------------------------------------------------
    def _observe(self, step):
        vms, own = step.vms, step.state
        got = vms.reported & (vms.window_count > 0)
        if got.any():
            own.lt_sum[got] += vms.window_mean_us[got]
            own.lt_n[got] += 1

    def _smooth(self, own):
        """PARDA's latency estimate, from the mean of this period's windows."""
        got = own.lt_n > 0
        if got.any():
            s = self.opts.smoothing
            mean = own.lt_sum[got] / own.lt_n[got]
            old = own.lt_lat[got]
            own.lt_lat[got] = np.where(np.isnan(old), mean, (1.0 - s) * mean + s * old)
            own.lt_sum[:] = 0.0
            own.lt_n[:] = 0

    def ratios(self, step):
        """Per row, ``2 - lat / L`` of each sensitive VM with a latency estimate (else NaN)."""
        vms = step.vms
        lat = step.state.lt_lat
        goal = vms.latency_sla_us * (1.0 + self.opts.target * vms.threshold_pct / 100.0)
        # PARDA's L / lat, linearised around the target (see the module docstring).
        ratio = 2.0 - lat / goal
        ratio = np.where(ratio > 0.0, ratio, 0.0)
        # No estimate, or no latency to aim at (an SLA of 0 us): no ratio.
        return np.where((lat > 0.0) & (goal > 0.0), ratio, np.nan)

    def _update(self, step, answer):
        vms, own = step.vms, step.state
        n = len(vms)
        ratios = self.ratios(step)
        demands = interferers.demands(vms)
        check = self.check
        sla_us, threshold = vms.latency_sla_us, vms.threshold_pct
        # Each VM's signal: the worst ratio among the victims it interferes
        # with; ``worst``: that victim's latency over its target.
        signal = np.full(n, np.inf)
        worst = np.full(n, -np.inf)
        load = own.lt_lat / (sla_us * (1.0 + self.opts.target * threshold / 100.0))
        # Each victim's latency over its SLA's bound, and each VM's worst.
        breach = own.lt_lat / (sla_us * (1.0 + threshold / 100.0))
        over = np.full(n, -np.inf)
        sending = demands > 0.0
        if check is not None:
            sending &= ~response.resting(own)   # left alone: cutting it did not help
            response.tick(own)
        for victim in (~np.isnan(ratios)).nonzero()[0].tolist():
            floor = self.opts.heavier * demands[victim]
            hit = sending & (demands >= floor)
            hit[victim] = False
            signal = np.where(hit & (ratios[victim] < signal), ratios[victim], signal)
            worst = np.where(hit & (load[victim] > worst), load[victim], worst)
            over = np.where(hit & (breach[victim] > over), breach[victim], over)
        has = signal != np.inf
        mine = np.where(np.isnan(ratios), 2.0, ratios)
        # Its own latency is over its target: never lowered, it grows back as
        # fast as the victims' signal would lower it.
        protected = has & (mine < 1.0)
        signal = np.where(protected, 2.0 - mine, signal)
        held = own.lt_cap
        rows = (has | ~np.isnan(held)).nonzero()[0]
        if not len(rows):
            return
        g, step_max = self.opts.gain, self.opts.max_step
        limit, floor = vms.limit_pct[rows], vms.floor_pct[rows]
        w = np.where(np.isnan(held[rows]), vms.cap_pct[rows], held[rows])
        # No victim over target: grow back.
        ratio = np.where(has[rows], signal[rows], 1.0 + step_max)
        shares = vms.shares[rows] / 100.0
        new = (1.0 - g) * w + g * ratio * w + self.opts.additive * shares
        if self.opts.breach_step > 0.0:
            new = self._breach(own, rows, has[rows] & (over[rows] > 1.0), w, new)
        new = np.minimum(w * (1.0 + step_max), np.maximum(w * (1.0 - step_max), new))
        new = np.where(new >= limit, limit, np.where(new <= floor, floor, new))
        guarded = protected[rows]
        futile = np.zeros(len(rows), dtype=bool)
        if check is not None:
            cut = has[rows] & ~guarded & (new < limit)
            if cut.any():
                futile[cut] = response.judge(check, own, rows[cut], np.isnan(held[rows[cut]]),
                                             worst[rows[cut]], w[cut], new[cut])
                new = np.where(futile, limit, new)
            response.settled(own, rows[(new >= limit) & ~futile])
        free = new >= limit
        back = rows[free]
        held[back] = np.nan
        moved = back[vms.cap_pct[back] != vms.limit_pct[back]]
        answer.cap(moved, vms.limit_pct[moved], 1.0)
        kept = rows[~free]
        held[kept] = new[~free]
        own.credit_cap[kept] = np.nan      # no credit cap under the controller
        answer.cap(kept, new[~free], limit[~free] / new[~free])
        answer.why(rows, [policy.PROTECTED if is_guarded else
                          policy.NO_RESPONSE if is_futile else
                          policy.UNCAPPED if is_free else policy.TARGET
                          for is_free, is_guarded, is_futile in zip(
                              free.tolist(), guarded.tolist(), futile.tolist())])

    def _breach(self, own, rows, breached, w, new):
        """Caps of ``rows`` when victims are over their SLA's bound (``breach_step``).

        While a victim's estimate is over its bound, not only over its
        target, each of its interferers is cut by ``breach_step`` x
        ``max_step`` an update, whatever the proportional law says; the
        update after the last such cut takes one cut back (the estimate lags
        the cap by about one update, so the last cut went too far).
        """
        cut = self.opts.breach_step * self.opts.max_step
        was = own.lt_breach[rows]
        own.lt_breach[rows] = breached
        new = np.where(was & ~breached & (new < w / (1.0 - cut)), w / (1.0 - cut), new)
        return np.where(breached, np.minimum(new, w * (1.0 - cut)), new)

    # -- the policy contract ----------------------------------------------------
    def decide(self, step):
        answer = policy.Answer()
        self._observe(step)
        if self.opts.onset_window > 0.0:
            self._cut_at_onset(step, answer)
        every = max(1, round(self.opts.period * step.intervals_per_epoch))
        self._since += 1
        if self._since >= every:
            self._since = 0
            self._smooth(step.state)
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
            mine = np.fmin(own.lt_cap[rows], own.credit_cap[rows])
            caps = np.where(np.isnan(mine), limit, mine)
            cpu_contention.answer(answer, step, rows, caps, limit / caps)
        if self._cpu_weights or (own.cc_boost > 1.0).any():
            self._cpu_weights = cpu_contention.weights(step)

    def _cut_at_onset(self, step, answer):
        """The onset rule (:mod:`.onset`); a VM left alone as futile is not cut.

        An interferer cut at the onset is held by the controller from then
        on, at the cut's cap, and moves by its law (at most ``max_step`` an
        update) until it is back at its limit; the check that the throttle
        helps (``check_response``) counts from the cut.
        """
        vms, own = step.vms, step.state
        onset.observe(vms, own)
        aim = self.opts.target * vms.threshold_pct / 100.0
        rows, caps, load = onset.cuts(self._onset, vms, own, self.opts,
                                      step.intervals_per_epoch, aim, ~response.resting(own))
        if not len(rows):
            return
        if self.check is not None:
            # The control of these rows begins here: the check's reference is taken now.
            response.judge(self.check, own, rows, np.isnan(own.lt_cap[rows]), load,
                           vms.cap_pct[rows], caps)
        own.lt_cap[rows] = caps
        own.credit_cap[rows] = np.nan
        answer.cap(rows, caps, vms.limit_pct[rows] / caps)
        answer.why(rows, policy.TARGET)

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
            return ~np.isnan(own.lt_cap[rows])
        pairs = []
        for rows, caps in credit.spared(step, self.opts, answer, controlled):
            free = ~answered[rows] & np.isnan(own.lt_cap[rows])
            pairs.append((rows[free], caps[free]))
        credit.answer(answer, step, pairs)
