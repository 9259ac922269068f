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

from resex_libvirt.market import free_market
from resex_libvirt.market import io_shares
from resex_libvirt.market import policy


class LatencyTarget(free_market.FreeMarket):
    name = "latency_target"
    #: It throttles the VMs that interfere (the board's congestion index counts on it).
    taxes_interferers = True

    def __init__(self, gain=0.3, smoothing=0.5, target=0.85, additive=0.02, max_step=0.25,
                 period=0.01, heavier=0.0, boost=1.0, use_balance=False, **kwargs):
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
        self._w = {}           # vm -> cap the controller holds (below the limit)
        self._lat = {}         # victim -> smoothed latency (us)
        self._acc = {}         # victim -> (sum of window means, count) this period
        self._since = 0
        self._weights = {}

    # -- the controller -----------------------------------------------------
    def _observe(self, view):
        acc = self._acc
        for vm, win in view.windows.items():
            spec = view.specs.get(vm)
            if win is None or win.count == 0 or spec is None or not spec.sla.sensitive:
                continue
            total, n = acc.get(vm, (0.0, 0))
            acc[vm] = (total + win.mean_us, n + 1)

    def _smooth(self):
        """PARDA's latency estimate, from the mean of this period's windows."""
        s = self.smoothing
        lat = self._lat
        for vm, (total, n) in self._acc.items():
            mean = total / n
            old = lat.get(vm)
            lat[vm] = mean if old is None else (1.0 - s) * mean + s * old
        self._acc = {}

    def ratios(self, view):
        """``{victim: 2 - lat / L}`` for every sensitive VM with a latency estimate."""
        out = {}
        for vm, lat in self._lat.items():
            spec = view.specs.get(vm)
            if spec is None or lat <= 0.0:
                continue
            sla = spec.sla
            goal = sla.latency_sla_us * (1.0 + self.target * sla.interference_threshold_pct
                                         / 100.0)
            # PARDA's L / lat, linearised around the target (see the module docstring).
            ratio = 2.0 - lat / goal
            out[vm] = ratio if ratio > 0.0 else 0.0
        return out

    def _update(self, view):
        ratios = self.ratios(view)
        demands = io_shares._demands(view)
        # Each VM's signal: the worst ratio among the victims it interferes with.
        signal = {}
        for victim, ratio in ratios.items():
            floor = self.heavier * demands.get(victim, 0.0)
            for vm, demand in demands.items():
                if vm == victim or demand <= 0.0 or demand < floor:
                    continue
                if ratio < signal.get(vm, float("inf")):
                    signal[vm] = ratio
        protected = set()
        for vm in list(signal):
            own = ratios.get(vm, 2.0)
            if own < 1.0:
                # Its own latency is over its target: never lowered, it grows back
                # as fast as the victims' signal would lower it.
                protected.add(vm)
                signal[vm] = 2.0 - own
        out = {}
        g, step = self.gain, self.max_step
        for vm in set(signal) | set(self._w):
            if vm not in view.bounds:
                self._w.pop(vm, None)
                continue
            floor, limit = view.bounds[vm]
            w = self._w.get(vm, view.caps.get(vm, limit))
            ratio = signal.get(vm, 1.0 + step)   # no victim over target: grow back
            shares = view.specs[vm].sla.shares / 100.0
            new = (1.0 - g) * w + g * ratio * w + self.additive * shares
            new = min(w * (1.0 + step), max(w * (1.0 - step), new))
            new = limit if new >= limit else (floor if new <= floor else new)
            if new >= limit:
                self._w.pop(vm, None)
                if view.caps.get(vm) != limit:
                    out[vm] = (limit, 1.0)
                self._reasons[vm] = policy.PROTECTED if vm in protected else policy.UNCAPPED
                continue
            self._w[vm] = new
            self._caps.pop(vm, None)     # no credit cap under the controller
            out[vm] = (new, limit / new)
            self._reasons[vm] = policy.PROTECTED if vm in protected else policy.TARGET
        return out

    # -- the policy interface --------------------------------------------------
    def may_cut(self, view, vm):
        if vm in self._w:
            return False
        return super().may_cut(view, vm)

    def decide(self, view):
        self._observe(view)
        out = {}
        every = max(1, round(self.period * view.intervals_per_epoch))
        self._since += 1
        if self._since >= every:
            self._since = 0
            self._smooth()
            out = self._update(view)
        lowered = self.lowered(view) if self.use_balance else {}
        for vm, cap in lowered.items():
            if vm not in out and vm not in self._w:
                out[vm] = (cap, 1.0)
                self._reasons[vm] = (policy.CREDIT if cap < view.bounds[vm][1]
                                     else policy.UNCAPPED)
        if self.boost > 1.0:
            self._boost(view)
        return out

    def _boost(self, view):
        weights = {}
        for vm, spec in view.specs.items():
            sample = view.samples.get(vm)
            if spec.sla.sensitive and sample is not None and sample.tx_mtus > 0:
                weights[vm] = self.boost
        self._weights = weights

    def weights(self):
        """``{vm: factor}``: the Xen-and-Co. weight boost in force (empty unless ``boost`` > 1)."""
        return self._weights

    def cap(self, vm):
        """The cap the controller holds for ``vm`` (``None``: not controlled)."""
        return self._w.get(vm)

    def forget(self, vm):
        super().forget(vm)
        self._w.pop(vm, None)
        self._lat.pop(vm, None)
        self._acc.pop(vm, None)
        self._weights.pop(vm, None)
