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

"""A control law that settles on the real plant: the loop's delay, new data only, a hold band.

The production policies (``io_shares``, ``latency_target``) decide *who*
is throttled and *by what share* (Algorithm 2's IOShare, PARDA's target);
this module decides *when* and *how far*, in seconds and in the loop's
delay rather than in fractions of an epoch:

* **The loop's delay** is the time from a cap change to a latency window
  that shows it. Measured per victim from its own windows: the time
  between two windows with new requests (the report period) times the
  window's length in reports (``window_count / window_new``), plus one
  report period, one interval and the plant's own lag (``plant_lag_s``, 0
  by default: a CFS period of 10 ms and a short queue fit in the report period);
  or set (``loop_delay_s``). About 2.5 s on libvirt (a
  report each 0.5 s, a window of 4), a few ms in the simulator.
* **New data only, one correction per delay.** A victim is judged on a
  window with requests new since the last one, and once its interferers
  were corrected it is not judged again before one delay has passed: the
  window then reflects the correction.
* **A hold band instead of a relay.** A victim whose latency inflation
  (``mean / latency_sla_us - 1``) is inside ``[low, high]`` of its
  threshold, or within ``z`` standard errors of the aim, holds every cap:
  no change inside the deadband. Over the threshold for a whole evidence
  span (:data:`EVIDENCE` windows), it is cut whatever the error: the
  deadband never holds a victim over its bound for long.
* **Log-cap steps from a model.** Inflation over the base is taken to
  scale as ``cap ** slope`` (a linear plant at ``slope = 1``: traffic in
  proportion to the cap, queueing in proportion to the traffic). A cut is
  ``cap x (aim / inflation) ** (gain / slope)``, a release the same at
  ``release_gain`` (half the cut's ``gain`` by default); each bounded. The slope is
  estimated online from each correction and the next window, so a victim
  that responds weakly gets larger steps and one that responds strongly
  smaller ones: the gain is scheduled from the plant.
* **Anti-windup** is the cap itself: the law's state is the cap, clamped
  to ``[floor, limit]``; nothing integrates past either.
* **The first cut from the CPU the sender uses**, not from its cap: an
  uncapped sender at 30% CPU cut to 15% of a 100% cap does not slow.
* **Holds in delays.** An interferer that goes quiet keeps its cap for
  ``quiet_delays`` delays (a sender between two bursts is not released);
  an interferer all of whose victims went idle (no new window for
  ``idle_delays`` delays) is released to its limit at once.

Pure: the step's columns and the policy's own columns in, arrays out. The
rules and their limits are in ``doc/source/market.rst``, "Control that
settles".
"""

import math
import typing

import numpy as np

from resex_libvirt.market import policy
from resex_libvirt.market import table

OPTIONS = (
    policy.Option("target", 0.9, min=0.0, max=1.0, open_min=True,
                  help="The inflation a correction aims at, as a fraction of the victim's "
                       "threshold: latency_sla_us x (1 + target x threshold), or lower for a "
                       "noisy victim (noise_z). Cut only over the threshold itself."),
    policy.Option("noise_z", 2.0, min=0.0, max=10.0,
                  help="The aim sits at least this many standard errors of a whole evidence "
                       "span (the victim's window-to-window noise, learnt online) under the "
                       "threshold, down to half of it: a noisy victim's mean over time then "
                       "stays under its bound. 0: the aim is target alone."),
    policy.Option("hold_below", 0.7, min=0.0, max=1.0,
                  help="No release while the victim's inflation is over this fraction of its "
                       "threshold (at most target): from there to the threshold, the hold "
                       "band."),
    policy.Option("loop_delay_s", 0.0, min=0.0, max=600.0,
                  help="The control loop's delay in seconds, from a cap change to a latency "
                       "window that shows it; a victim is corrected at most once per delay. "
                       "0: measured per victim (its report period x the window's length in "
                       "reports, plus one report period)."),
    policy.Option("plant_lag_s", 0.0, min=0.0, max=60.0,
                  help="Seconds the plant takes to show a cap change beyond the measured "
                       "delay (which already counts one report period and one interval): "
                       "raise it for a deep bottleneck queue or a long CFS period."),
    policy.Option("deadband_z", 2.0, min=0.0, max=10.0,
                  help="No correction while the victim's inflation is within this many "
                       "standard errors of the window's mean from the aim."),
    policy.Option("gain", 1.0, min=0.0, max=1.0, open_min=True,
                  help="Fraction of the model's cut taken in one correction."),
    policy.Option("release_gain", 0.5, min=0.0, max=1.0, open_min=True,
                  help="Fraction of the model's release taken in one correction (releases "
                       "at half the cut's gain)."),
    policy.Option("deepest_cut", 0.1, min=0.01, max=1.0,
                  help="The deepest cut in one correction, as a fraction of the cap."),
    policy.Option("deepest_first_cut", 0.02, min=0.001, max=1.0,
                  help="The deepest first cut of a sender not under control yet, as a "
                       "fraction of the CPU it uses (its first correction is all the model "
                       "asks, down to this: a delay spent at a tenth of an uncapped sender's "
                       "rate is a delay over the bound)."),
    policy.Option("largest_release", 1.0, min=0.0, max=100.0, open_min=True,
                  help="The largest release in one correction, as a fraction of the cap "
                       "(1: at most doubled)."),
    policy.Option("quiet_delays", 10.0, min=0.0, max=1000.0,
                  help="A controlled interferer that stops sending keeps its cap this many "
                       "loop delays (a bulk sender that reconnects under a low cap is quiet "
                       "for tens of seconds; holding a quiet sender costs it nothing)."),
    policy.Option("ceiling_delays", 0.0, min=0.0, max=100000.0,
                  help="A cap a cut came down from is the VM's ceiling for this many loop "
                       "delays: a release goes at most two thirds of the way to it (in log) "
                       "and past it only by a creep, so that the cap settles under the last "
                       "cap that was too high instead of doubling back over it. 0 (the "
                       "default): no ceiling; 60 on the verbs lab (doc/source/market.rst)."),
    policy.Option("idle_delays", 1.5, min=0.0, max=1000.0,
                  help="A victim with no new window for this many loop delays is idle: "
                       "interferers that only it held are released to their limit."),
)

#: The slope of log inflation against log cap a victim starts with (a linear plant),
#: and the range its online estimate is kept in.
SLOPE0, SLOPE_MIN, SLOPE_MAX = 1.0, 0.5, 10.0
#: A victim's delay until its second window with new requests (its report
#: period is not known before): long enough for the agent's 0.5 s reports.
UNKNOWN_DELAY_S = 1.0
#: Until its second window measures its report period, a victim is idle only
#: after ``idle_delays`` delays of at least this many seconds: a remote victim's
#: windows come with its own host's reports (one to four seconds apart on the
#: cloud's Soft-RoCE pairs), and its interferer must not be released between
#: its first two windows. Nothing else waits on it.
FIRST_IDLE_DELAY_S = 4.0
#: A correction moves the log cap by at least this much to teach the slope.
MIN_TEACHING_STEP = 0.03
#: The inflation a release is computed from is at least this fraction of the aim
#: (a victim at its base latency releases by a bounded step, not an infinite one).
RELEASE_FLOOR = 0.25
#: A gap between two new windows longer than this many times the usual one is an
#: idle spell, not the report period.
IDLE_GAP = 4.0
#: Between the band's bottom and its aim a cap creeps up by this fraction a delay
#: (a deadband controller settles wherever its first cuts left it; creeping, it
#: ends near the aim whatever the path, at the cost of a small probe).
CREEP_STEP = 0.02
#: A release under a ceiling goes this fraction of the way to it, in log: a binary
#: search leaning up (at a half, BIC's, the simulator's paper scenario lost 8 % of
#: its bulk throughput; at two thirds 4 %, the lab-like knee settling as well).
BISECT = 2.0 / 3.0
#: A latency-sensitive VM is cut for another only if it demands this many times
#: the other's I/O (equal senders are spared, paper Fig. 8).
SENSITIVE_HEAVIER = 1.1
#: ... and by at most this fraction of its cap a correction.
GENTLE_CUT = 0.1
#: Up to this many rows, a few per-interval rules work row by row in Python
#: floats (the same IEEE operations as on the columns): numpy's cost per call
#: is then most of the work.
SMALL_ROWS = 8
#: A victim's evidence counts at most this many windows (older ones fade).
EVIDENCE = 16
#: Weight of a new CPU sample in a VM's CPU use (about ten intervals).
CPU_ALPHA = 0.1
#: Weight of a judgement's window-to-window spread in a victim's noise (about ten
#: judgements), and the fewest windows a spread is taken from.
NOISE_ALPHA, NOISE_WINDOWS = 0.1, 4
#: A noisy victim's aim is never under this fraction of its threshold.
AIM_FLOOR = 0.5

#: Per sensitive VM: ``st_seen`` the time of its last window with new requests,
#: ``st_lastgap`` the seconds before it, ``st_gap`` the seconds between such
#: windows and ``st_span`` its window's span (moving averages; NaN: not yet);
#: ``st_last`` the time its interferers were last corrected (it is not judged
#: again for one delay), ``st_e`` its inflation then, ``st_dlog`` the log-cap
#: step its heaviest interferer got, ``st_slope`` the slope estimate,
#: ``st_want`` its last decision (-1: none), ``st_sd`` its windows'
#: inflations' standard deviation about their evidence's mean (a moving
#: average over judgements; NaN: not yet); its evidence since that
#: correction: ``st_an`` windows, ``st_as``, ``st_aq`` and ``st_ase`` the sums
#: of their inflations, of their squares and of their squared standard
#: errors, ``st_side`` the side (-1, 0, 1) its last window fell off the
#: evidence, ``st_pe`` and ``st_pse`` that window's inflation and standard
#: error. Per VM: ``st_cap`` the cap the law holds (NaN: not controlled),
#: ``st_held`` when a victim last named it as an interferer (or it sent under
#: control), ``st_rel`` the time before which a VM no victim holds is not
#: released again, ``st_moved`` when its cap last moved, ``st_cpu`` its CPU
#: use (a moving average over about ten intervals), ``st_ceil`` the cap its
#: last cut came down from (its ceiling; NaN: none) and ``st_ceilx`` the time
#: that ceiling expires.
COLUMNS = {"st_seen": (np.nan, np.float64), "st_gap": (np.nan, np.float64),
           "st_span": (np.nan, np.float64), "st_last": (-np.inf, np.float64),
           "st_e": (np.nan, np.float64), "st_dlog": (np.nan, np.float64),
           "st_slope": (np.nan, np.float64), "st_cap": (np.nan, np.float64),
           "st_held": (np.nan, np.float64), "st_rel": (-np.inf, np.float64),
           "st_moved": (-np.inf, np.float64),
           "st_want": (-1, np.int8), "st_cpu": (np.nan, np.float64),
           "st_sd": (np.nan, np.float64),
           "st_an": (0.0, np.float64), "st_as": (0.0, np.float64),
           "st_aq": (0.0, np.float64), "st_ase": (0.0, np.float64),
           "st_side": (0.0, np.float64), "st_pe": (np.nan, np.float64),
           "st_pse": (np.nan, np.float64), "st_lastgap": (np.nan, np.float64),
           "st_ceil": (np.nan, np.float64), "st_ceilx": (-np.inf, np.float64)}

HOLD, CUT, RELEASE, CREEP = 0, 1, 2, 3


class Band(typing.NamedTuple):
    """Per row, in percent of the base latency (``latency_sla_us``): where the law aims and holds.

    ``aim``: the inflation a correction aims at; ``high``: a cut only above
    it; ``low``: a release only below it (``low <= aim <= high``).
    """

    aim: np.ndarray
    high: np.ndarray
    low: np.ndarray


class Plan(typing.NamedTuple):
    """One interval's corrections (:func:`plan`).

    ``rows``: the VMs whose cap changes, and those asked to be cut (whose cap
    may already be at its floor); ``caps``: their new caps (the limit:
    released); ``cause``: per row, the victim row that set it (-1:
    released because its victims went idle or it went quiet); ``cut``: per
    row, True for a cut; ``inflation``: per row, the cause's inflation (%).
    ``judged``: the victims judged this interval and what each decided
    (``HOLD``, ``CUT``, ``RELEASE``, ``CREEP``), as ``{row: decision}``.
    """

    rows: np.ndarray
    caps: np.ndarray
    cause: np.ndarray
    cut: np.ndarray
    inflation: np.ndarray
    judged: dict


def band(step, opts):
    """The :class:`Band` of ``target``, ``noise_z`` and ``hold_below`` for the step's VMs.

    The aim is ``target`` of the threshold, or lower by the victim's noise:
    ``noise_z`` standard errors of a whole evidence span (its windows'
    spread, ``st_sd``, over the square root of :data:`EVIDENCE`) under the
    threshold, never under :data:`AIM_FLOOR` of it. The band's bottom keeps
    its ratio to the aim (``hold_below / target``).
    """
    threshold = step.vms.threshold_pct
    if len(threshold) <= SMALL_ROWS:
        return _band_rows(threshold, step.state.st_sd, opts)
    noise = table.nan_to_num(step.state.st_sd) * opts.noise_z / math.sqrt(EVIDENCE)
    # np.clip's definition, without its cost per call.
    aim = np.minimum(np.maximum(threshold - noise, AIM_FLOOR * threshold),
                     opts.target * threshold)
    return Band(aim, threshold.copy(), min(1.0, opts.hold_below / opts.target) * aim)


def _band_rows(threshold, sd, opts):
    """:func:`band` row by row in Python floats: the same IEEE operations.

    numpy's ``nan_to_num`` (NaN 0, an infinity the largest finite float of
    its sign), then ``maximum`` and ``minimum`` with NaN: the same bits.
    """
    z, root, target = opts.noise_z, math.sqrt(EVIDENCE), opts.target
    low = min(1.0, opts.hold_below / target)
    aims, lows = [], []
    for th, s in zip(threshold.tolist(), sd.tolist()):
        if math.isnan(s):
            s = 0.0
        elif math.isinf(s):
            s = _LARGEST if s > 0.0 else -_LARGEST
        a = th - s * z / root
        floor = AIM_FLOOR * th
        a = a if (a > floor or a != a) else floor                 # np.maximum
        top = target * th
        a = a if (a < top or a != a) else top                     # np.minimum
        aims.append(a)
        lows.append(low * a)
    return Band(np.array(aims), threshold.copy(), np.array(lows))


_LARGEST = float(np.finfo(np.float64).max)


def now_s(step):
    """The step's time in seconds since the market's start."""
    return (step.epoch * step.intervals_per_epoch + step.interval) * step.interval_s


def victims(vms):
    """Mask of the VMs with a latency SLA the law can judge."""
    return vms.sensitive & (vms.latency_sla_us > 0.0) & np.isfinite(vms.threshold_pct)


def observe(step, own, judgeable=None):
    """Note this interval's new windows and senders; returns the mask of fresh victims.

    ``judgeable``: :func:`victims` of the step's VMs, if the caller has it.
    """
    vms, t = step.vms, now_s(step)
    fresh = vms.reported & (vms.window_new > 0)
    fresh &= victims(vms) if judgeable is None else judgeable
    # Row by row in Python floats (a host has few victims): the same IEEE
    # operations as on numpy's rows, without its cost per call.
    for v in fresh.nonzero()[0].tolist():
        gap = t - own.st_seen.item(v)
        old = own.st_gap.item(v)
        # An idle spell is not the report period.
        if math.isfinite(gap) and gap > 0.0 and not gap > IDLE_GAP * old:
            # A moving average over about four windows; the first gap is taken as is.
            own.st_gap[v] = old = gap if math.isnan(old) else old + 0.25 * (gap - old)
        span = old * max(vms.window_count.item(v) / max(vms.window_new.item(v), 1), 1.0)
        olds = own.st_span.item(v)
        if not math.isnan(span):
            own.st_span[v] = span if math.isnan(olds) else olds + 0.25 * (span - olds)
        own.st_seen[v] = t
        own.st_lastgap[v] = gap
    got = vms.sampled
    if len(got) <= SMALL_ROWS:
        # old + alpha x (new - old), new where old is NaN: row by row in Python floats.
        st_cpu = own.st_cpu
        for v, (ok, cpu, old) in enumerate(zip(got.tolist(), vms.cpu_pct.tolist(),
                                               st_cpu.tolist())):
            if ok:
                st_cpu[v] = cpu if math.isnan(old) else (cpu - old) * CPU_ALPHA + old
    elif got.any():
        cpu, old = vms.cpu_pct, own.st_cpu
        avg = cpu - old
        avg *= CPU_ALPHA
        avg += old
        np.copyto(avg, cpu, where=np.isnan(old))
        np.copyto(old, avg, where=got)
    return fresh


def delays(step, opts, own):
    """Per row, the loop's delay in seconds: ``loop_delay_s``, or measured, plus the lag."""
    if opts.loop_delay_s > 0.0:
        return np.full(len(step.vms), opts.loop_delay_s)
    tick, lag = step.interval_s, opts.plant_lag_s
    if len(own.st_span) <= SMALL_ROWS:
        out = []
        for span, gap in zip(own.st_span.tolist(), own.st_gap.tolist()):
            m = span + gap
            out.append(((UNKNOWN_DELAY_S if math.isnan(m) else m if m > tick else tick)
                        + tick) + lag)
        return np.array(out)
    measured = own.st_span + own.st_gap
    measured = np.where(np.isnan(measured), UNKNOWN_DELAY_S,
                        np.maximum(measured, step.interval_s))
    # The cap a correction sets is written at the interval's end: one interval more.
    return measured + step.interval_s + opts.plant_lag_s


def idle_after(opts, own, delay):
    """Per row, the seconds without a new window after which a victim is idle."""
    idle = np.multiply(opts.idle_delays, delay)
    # Before the second window, the period is a guess: do not call it idle early.
    np.maximum(idle, opts.idle_delays * FIRST_IDLE_DELAY_S, out=idle, where=np.isnan(own.st_gap))
    return idle


def inflation(vms):
    """Per row, the window's mean over the base latency, in percent (NaN: no window)."""
    sla = vms.latency_sla_us
    base = sla > 0.0
    # 100 x (mean - sla) / sla, divided only where there is a base (no errstate: cheaper).
    out = np.subtract(vms.window_mean_us, sla)
    out *= table.HUNDRED
    np.divide(out, sla, out=out, where=base)
    np.copyto(out, np.nan, where=~base)
    return out


def standard_error(vms):
    """Per row, the standard error of the window's mean, in percent of the base latency."""
    count = np.maximum(vms.window_count, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = 100.0 * vms.window_std_us / np.sqrt(count) / vms.latency_sla_us
    return np.where(np.isfinite(se) & (vms.window_count > 1), se, 0.0)


def decide(e, se, band, z, full=False):
    """Per row, ``HOLD``, ``CUT``, ``RELEASE`` or ``CREEP`` for inflations ``e`` (%).

    ``CUT`` over the band's top, ``RELEASE`` under its bottom, ``CREEP``
    between the bottom and the aim; each only when ``e`` is more than ``z``
    standard errors (``se``) from the aim. ``HOLD`` otherwise: the deadband.
    ``full``: per row (or for all), the evidence spans :data:`EVIDENCE`
    windows; its mean over the band's top is then cut however wide its
    error (the SLA is a mean over time: a victim over its bound for that
    long is missing it, and a deadband that reaches over the bound would
    hold it there).
    """
    cut = (e > band.high) & ((e - z * se > band.aim) | full)
    under = e + z * se < band.aim
    release = (e < band.low) & under
    creep = (e >= band.low) & under
    return np.where(cut, CUT, np.where(release, RELEASE, np.where(creep, CREEP, HOLD)))


def deepest(opts, controlled):
    """Per row, the log of the deepest cut one correction may make.

    ``deepest_cut`` for a VM under the law's control, ``deepest_first_cut``
    for one not yet (its first cut, from the CPU it uses).
    """
    return np.where(controlled, math.log(opts.deepest_cut), math.log(opts.deepest_first_cut))


def log_step(decision, e, aim, slope, opts):
    """The model's log-cap step for one victim (0.0 for ``HOLD``).

    A cut is bounded by the deeper of ``deepest_cut`` and
    ``deepest_first_cut``; each row's own bound comes after (:func:`deepest`).
    """
    if decision == CUT:
        step = -opts.gain * math.log(max(e, 1e-9) / aim) / slope
        return max(step, math.log(min(opts.deepest_cut, opts.deepest_first_cut)))
    if decision == RELEASE:
        step = opts.release_gain * math.log(aim / max(e, RELEASE_FLOOR * aim)) / slope
        return min(step, math.log1p(opts.largest_release))
    if decision == CREEP:
        return math.log1p(CREEP_STEP)
    return 0.0


def learn(own, rows, e):
    """Update each victim's slope from its last correction and this window's inflation."""
    for v, ev in zip(rows.tolist(), e.tolist()):
        dlog, before = own.st_dlog[v], own.st_e[v]
        own.st_dlog[v] = np.nan
        if not (abs(dlog) >= MIN_TEACHING_STEP and before > 0.0 and ev > 0.0):
            continue
        seen = (math.log(ev) - math.log(before)) / dlog
        old = own.st_slope[v]
        old = SLOPE0 if math.isnan(old) else old
        # One window is noisy: an estimate moves at most by half or double a step.
        seen = min(2.0 * old, max(0.5 * old, seen))
        slope = 0.5 * (old + seen)
        own.st_slope[v] = min(SLOPE_MAX, max(SLOPE_MIN, slope))


def accumulate(own, rows, e, se, width, z):
    """Add fresh windows to each victim's evidence since its last correction.

    ``e`` and ``se``: per row of ``rows``, the window's inflation and its
    standard error (%). Returns the evidence's mean and standard error: the
    larger of the windows' own (combined) and the spread between windows
    (windows overlap and requests within one are not independent, so the
    within-window error alone is too small). At most :data:`EVIDENCE`
    windows count (older ones fade). Two windows in a row off the evidence's
    mean, on the same side, by more than ``width`` (per row, %) and than ``z``
    standard deviations of its windows, are a change, not noise: the
    evidence starts again from those two. With :data:`NOISE_WINDOWS` or
    more windows, the spread between them (their standard deviation) goes
    into the victim's noise (``st_sd``, :func:`band`).
    """
    k = own.st_an[rows]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = own.st_as[rows] / k
        off = np.where(k > 0.0, e - mean, 0.0)
        sd = np.sqrt(np.maximum(own.st_aq[rows] / k - mean * mean, 0.0))
    side = np.where(np.abs(off) > np.maximum(width, z * table.nan_to_num(sd)), np.sign(off), 0.0)
    change = (side != 0.0) & (own.st_side[rows] == side)
    if change.any():
        again = rows[change]
        before, before_se = own.st_pe[again], own.st_pse[again]
        own.st_an[again] = 1.0
        own.st_as[again] = before
        own.st_aq[again] = before * before
        own.st_ase[again] = before_se * before_se
        side[change] = 0.0
    own.st_side[rows] = side
    own.st_pe[rows] = e
    own.st_pse[rows] = se
    k = own.st_an[rows]
    full = k >= EVIDENCE
    if full.any():
        fade = (EVIDENCE - 1.0) / EVIDENCE
        for col in (own.st_an, own.st_as, own.st_aq, own.st_ase):
            col[rows[full]] *= fade
    own.st_an[rows] += 1.0
    own.st_as[rows] += e
    own.st_aq[rows] += e * e
    own.st_ase[rows] += se * se
    k = own.st_an[rows]
    mean = own.st_as[rows] / k
    within = np.sqrt(own.st_ase[rows]) / k
    spread = np.maximum(own.st_aq[rows] / k - mean * mean, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        sd = np.sqrt(spread * k / np.maximum(k - 1.0, 1e-9))
        between = np.where(k > 1.5, sd / np.sqrt(k), 0.0)
    enough = k >= NOISE_WINDOWS - 0.5
    if enough.any():
        old, new = own.st_sd[rows[enough]], sd[enough]
        own.st_sd[rows[enough]] = np.where(np.isnan(old), new, old + NOISE_ALPHA * (new - old))
    return mean, np.maximum(within, between)


def forget(own, v):
    """Victim ``v``'s evidence starts again (its interferers were corrected, or it was idle)."""
    own.st_an[v] = own.st_as[v] = own.st_aq[v] = own.st_ase[v] = own.st_side[v] = 0.0


def split(d, traffic, hit, floor):
    """Per row, its log-cap step when the cut ``d`` is shared by ``traffic`` among ``hit``.

    Each row of ``hit`` is cut in proportion to its share of the traffic
    (the largest sender by ``lam x d``, one with half its traffic by half
    that), with ``lam >= 1`` found so that the traffic left is what a cut
    of ``d`` on all of it would leave: the model's cut is on the aggregate.
    ``floor``: per row, the log of its deepest cut (:func:`deepest`).
    """
    x = np.where(hit, traffic, 0.0)
    top = x.max(initial=0.0)
    if top <= 0.0 or d >= 0.0:
        return np.full(len(x), d)
    w = x / top
    goal = math.exp(d) * x.sum()

    def left(lam):
        return float(np.sum(x * np.exp(np.maximum(lam * w * d, floor))))
    lo, hi = 1.0, 1.0
    while left(hi) > goal and hi < 1e3:
        lo, hi = hi, 2.0 * hi
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if left(mid) > goal:
            lo = mid
        else:
            hi = mid
    return np.maximum(hi * w * d, floor)


def grow(d, traffic, hit):
    """Per row, its log-cap step when the release ``d`` is shared by ``traffic`` among ``hit``.

    The mirror of :func:`split`: the largest sender grows by ``d``, one
    with half its traffic by half that. Cuts shared by traffic and releases
    shared equally would ratchet: each cut-and-release cycle would move the
    cap from the larger sender to the smaller until their traffic is equal,
    whatever the naming rule said.
    """
    x = np.where(hit, traffic, 0.0)
    top = x.max(initial=0.0)
    if top <= 0.0:
        return np.full(len(x), d)
    return d * x / top


def plan(step, opts, band, interferes, weight=None, spared=None, e=None):
    """The corrections of this interval (a :class:`Plan`); call every interval.

    Notes the interval's new windows and senders first (:func:`observe`).

    ``band``: a :class:`Band`; ``interferes(v)``: mask of the VMs that
    interfere with victim ``v`` (never ``v``); ``weight(v, mask)``: per
    row, the traffic by which the rows of ``mask`` share ``v``'s cut
    (:func:`split`; default: each takes all of it); ``spared``: mask of the
    VMs never cut (a policy's protected VMs; they may still be released).
    ``e``: the step's :func:`inflation`, if the caller has it (not changed).
    """
    vms, own, t = step.vms, step.state, now_s(step)
    judgeable = victims(vms)
    fresh = observe(step, own, judgeable)
    delay = delays(step, opts, own)
    active = judgeable & (t - own.st_seen <= idle_after(opts, own, delay))
    e_all = inflation(vms) if e is None else e.copy()
    decisions = _judge(step, opts, band, delay, e_all, fresh)
    asks = _Asks(len(vms))
    controlled = ~np.isnan(own.st_cap)
    # Naming decides who comes under control; once there, a VM stays while it
    # sends (its demand may fall under the naming rule's because it is capped)
    # and ``quiet_delays`` delays after it stopped; the law releases it.
    own.st_held[controlled & (vms.mtu_rate > 0.0)] = t
    for v in active.nonzero()[0].tolist():
        _ask(step, opts, band, asks, v, decisions.get(v), e_all, delay,
             interferes, weight, controlled)
    gone, up = _loose(step, opts, asks, controlled, active, delay, spared)
    return _apply(step, opts, asks, controlled, gone, up, spared, e_all)


class _Asks:
    """Per VM, what the victims judged this interval ask of it (:func:`plan`).

    ``cut``: the most restrictive log-cap cut; ``release``: the least
    release; ``blocked``: a victim holds its cap; ``held``: some active
    victim holds it; ``reach``: the longest delay of those victims;
    ``cause``: the victim that set its step (-1: none); ``judged``: the
    victims judged, ``{row: decision}``.
    """

    def __init__(self, n):
        self.cut = np.full(n, np.inf)
        self.release = np.full(n, np.inf)
        self.blocked = np.zeros(n, dtype=bool)
        self.held = np.zeros(n, dtype=bool)
        self.reach = np.zeros(n)
        self.cause = np.full(n, -1)
        self.judged = {}


def _judge(step, opts, band, delay, e_all, fresh):
    """Each victim due to be judged, on its evidence: ``{row: decision}``.

    Due: a fresh window (``fresh``, :func:`observe`'s mask) and one delay
    since its interferers were last corrected. ``e_all`` gets each judged
    victim's evidence mean.
    """
    vms, own, t = step.vms, step.state, now_s(step)
    due_rows = (fresh & (t - own.st_last >= delay)).nonzero()[0]
    if not len(due_rows):
        return {}
    # Evidence from before an idle spell is not evidence about now.
    stale = due_rows[own.st_lastgap[due_rows] > opts.idle_delays * delay[due_rows]]
    for v in stale.tolist():
        forget(own, v)
    width = band.high[due_rows] - band.low[due_rows]
    mean, se = accumulate(own, due_rows, e_all[due_rows], standard_error(vms)[due_rows],
                          width, opts.deadband_z)
    e_all[due_rows] = mean
    learn(own, due_rows, mean / 100.0)
    full = own.st_an[due_rows] >= EVIDENCE - 0.5
    decided = decide(mean, se, Band(*(b[due_rows] for b in band)), opts.deadband_z, full)
    own.st_want[due_rows] = decided
    return dict(zip(due_rows.tolist(), decided.tolist()))


def _ask(step, opts, band, asks, v, decision, e_all, delay, interferes, weight, controlled):
    """Add active victim ``v``'s asks (``decision``: None when not judged now)."""
    vms, own, t = step.vms, step.state, now_s(step)
    n = len(vms)
    named = interferes(v)
    named[v] = False
    own.st_held[named] = t
    hit = named | (controlled & (t - own.st_held <= opts.quiet_delays * delay[v]))
    hit[v] = False
    if not hit.any():
        return
    asks.held |= hit
    # The reach is never under 0.0, nor a delay: as np.where(hit, delay[v], 0.0).
    np.maximum(asks.reach, delay.item(v), out=asks.reach, where=hit)
    if decision is None:
        # Not judged now: its last decision stands for the releases it blocks.
        if own.st_want.item(v) not in (RELEASE, CREEP):
            asks.blocked |= hit
        return
    asks.judged[v] = decision
    if decision == HOLD:
        asks.blocked |= hit
        return
    slope = own.st_slope[v]
    slope = SLOPE0 if math.isnan(slope) else slope
    d = log_step(decision, e_all[v] / 100.0, band.aim[v] / 100.0, slope, opts)
    if decision == CUT:
        floor = deepest(opts, controlled)
        steps = (np.maximum(d, floor) if weight is None
                 else split(d, weight(v, hit), hit, floor))
        want = np.where(hit, steps, np.inf)
        deeper = want < asks.cut
        asks.cut[deeper] = want[deeper]
        asks.cause[deeper] = v
    else:
        steps = np.full(n, d) if weight is None else grow(d, weight(v, hit), hit)
        if opts.ceiling_delays > 0.0:
            steps = _shared_under_ceiling(own, t, hit, steps)
        want = np.where(hit, steps, np.inf)
        lesser = hit & (want < asks.release)
        asks.release[lesser] = want[lesser]
        asks.cause[lesser & (asks.cut == np.inf)] = v


def _loose(step, opts, asks, controlled, active, delay, spared):
    """Controlled VMs no active victim holds: ``(gone, up)`` masks.

    With no victim active at all they are ``gone``, released at once (the
    victim went idle); else (they stopped interfering, or were quiet for
    ``quiet_delays``) they go ``up`` step by step, once per delay. A spared
    VM under control grows back whatever its victims say.
    """
    n, t = len(step.vms), now_s(step)
    own = step.state
    loose = controlled & ~asks.held
    gone = loose if not active.any() else np.zeros(n, dtype=bool)
    up = loose & ~gone & (own.st_rel <= t)
    if spared is not None:
        up |= spared & controlled & (own.st_rel <= t)
    if up.any():
        full = opts.release_gain * math.log1p(opts.largest_release)
        asks.release[up] = np.minimum(asks.release[up], full)
        asks.blocked &= ~up
        own.st_rel[up] = t + np.max(delay, where=active, initial=step.interval_s)
    return gone, up


def _apply(step, opts, asks, controlled, gone, up, spared, e_all):
    """The :class:`Plan` of ``asks``; the law's state moves with it."""
    cut, cause = asks.cut, asks.cause
    if not gone.any() and cut.min(initial=0.0) >= 0.0 and not (asks.release < np.inf).any():
        # Nothing to cut, release or let go (most intervals): no row moves, no state.
        return _NO_CHANGE._replace(judged=asks.judged)
    vms, own, t = step.vms, step.state, now_s(step)
    limit, floor = vms.limit_pct, vms.floor_pct
    base = np.where(controlled, own.st_cap, start_caps(vms, own))
    logd = np.zeros(len(vms))
    # A VM moved less than a delay ago (of the victims that hold it) is not moved
    # again: those victims have not seen it yet (two victims, one interferer).
    ready = t - own.st_moved >= asks.reach
    # A latency-sensitive VM's cap adds to its own latency at once: cut gently.
    np.maximum(cut, math.log1p(-GENTLE_CUT), out=cut, where=vms.sensitive & (cut < 0.0))
    cutting = (cut < 0.0) & ready
    if spared is not None:
        cutting &= ~spared
    logd[cutting] = cut[cutting]
    releasing = ~cutting & controlled & ~asks.blocked & (asks.release < np.inf)
    releasing &= (asks.release > 0.0) & (ready | up)
    logd[releasing] = asks.release[releasing]
    # A spared VM grows back whatever its victims say, ceiling or not.
    if opts.ceiling_delays > 0.0:
        under_ceiling(own, t, base, releasing if spared is None else releasing & ~spared, logd)
    new = np.minimum(np.maximum(base * np.exp(logd), floor), limit)
    # Released at once: controlled VMs no active victim holds (idle victims).
    new[gone] = limit[gone]
    cause[gone] = -1
    was = np.where(controlled, own.st_cap, vms.cap_pct)
    # A VM asked to be cut is answered even where its cap cannot go lower (at its
    # floor): the caller's check that cutting helps counts those corrections too.
    moved = ((releasing | gone) & (np.abs(new - was) > 1e-9)) | cutting
    # The cap a cut came down from was too high: the VM's ceiling for a while. A
    # first cut (from the CPU used, not a cap) keeps a ceiling still live: the
    # victim went idle, the VM was released to its limit, and is back.
    if opts.ceiling_delays > 0.0:
        live = cutting & (own.st_ceilx > t) & np.isfinite(own.st_ceil)
        renew = cutting & (controlled | ~live)
        own.st_ceil[renew] = base[renew]
        own.st_ceilx[cutting] = t + opts.ceiling_delays * asks.reach[cutting]
    rows = moved.nonzero()[0]
    free = new[rows] >= limit[rows]
    own.st_cap[rows] = np.where(free, np.nan, new[rows])
    own.st_moved[rows[np.abs(new[rows] - was[rows]) > 1e-9]] = t
    # A victim whose interferers were corrected waits a delay; its step teaches the slope.
    for v in set(cause[rows][cause[rows] >= 0].tolist()):
        own.st_last[v] = t
        forget(own, v)
        own.st_e[v] = e_all[v] / 100.0
        mine = rows[cause[rows] == v]
        steps = np.log(new[mine] / base[mine])
        own.st_dlog[v] = steps[np.argmax(np.abs(steps))]
    why = cause[rows]
    return Plan(rows, new[rows], why, cutting[rows],
                np.where(why >= 0, e_all[np.maximum(why, 0)], 0.0), asks.judged)


#: :func:`_apply`'s plan when no row moves (read-only empty columns).
_NO_CHANGE = Plan(*(policy.read_only(np.zeros(0, dtype=dtype))
                    for dtype in (np.intp, np.float64, np.intp, bool, np.float64)), {})


def ceiling_bound(own, t, base):
    """Per row, the largest log-cap release its ceiling allows from ``base`` (inf: none).

    A VM with a ceiling (the cap a cut last came down from, ``ceiling_delays``
    delays ago or less) grows at most :data:`BISECT` of the way to it in
    log, or by a creep (:data:`CREEP_STEP`) where that is more (near the
    ceiling, or past it): the model's release from a victim at its base
    doubles the cap, and on a plant whose latency rises steeply past some
    cap (a link that fills) a doubling goes back over the cap that was too
    high, is cut, and doubles again. Searching towards the ceiling, the cap
    settles under it; creeping past it, the law still finds a plant that
    changed, slowly.
    """
    bound = np.full(len(base), np.inf)
    live = (own.st_ceilx > t) & np.isfinite(own.st_ceil)
    if live.any():
        with np.errstate(divide="ignore"):
            gap = np.log(own.st_ceil[live] / base[live])
        bound[live] = np.maximum(BISECT * gap, math.log1p(CREEP_STEP))
    return bound


def under_ceiling(own, t, base, releasing, logd):
    """Bound the releases ``logd`` of the ``releasing`` rows by their ceilings, in place."""
    np.minimum(logd, ceiling_bound(own, t, base), out=logd, where=releasing)


def _shared_under_ceiling(own, t, hit, steps):
    """``steps`` (a release shared among ``hit``) scaled so that no row passes its ceiling.

    All scaled alike: bounded one by one, the larger sender (nearer its
    ceiling, the one the cuts came down on) would grow less than its share
    and each cut-and-release cycle would move cap to the smaller one.
    """
    rows = hit & (steps > 0.0) & ~np.isnan(own.st_cap)
    if not rows.any():
        return steps
    bound = ceiling_bound(own, t, np.where(rows, own.st_cap, 1.0))
    scale = np.min(bound[rows] / steps[rows])
    return steps * min(1.0, scale)


def naming(vms, demands, heavier, eligible, e=None):
    """The ``interferes(v)`` of :func:`plan` both production policies use.

    The VMs of ``eligible`` whose demand is at least ``heavier`` times
    ``v``'s own, less the latency-sensitive VMs never cut for ``v``
    (:func:`not_for`), never ``v``. ``e``: the step's :func:`inflation`,
    if the caller has it (else worked out again).
    """
    load = loads(vms, e)

    def interferes(v):
        hit = eligible & (demands >= heavier * demands[v])
        hit &= ~not_for(vms, v, demands, load)
        hit[v] = False
        return hit
    return interferes


def loads(vms, e=None):
    """Per row, its inflation against its threshold (-inf: no window or no threshold).

    ``e``: the step's :func:`inflation`, if the caller has it (not changed).
    """
    ok = vms.reported & (vms.threshold_pct > 0.0)
    load = inflation(vms) if e is None else e.copy()
    np.divide(load, vms.threshold_pct, out=load, where=ok)
    np.copyto(load, -np.inf, where=~ok)
    return table.nan_to_num(load, nan=-np.inf)


def not_for(vms, v, demands, load):
    """Mask of the latency-sensitive VMs never cut for victim ``v``.

    A sensitive VM is cut for ``v`` only when it demands more I/O than ``v``
    (:data:`SENSITIVE_HEAVIER` times: a cap on a sensitive VM adds to its own
    latency at once, and two of them would cut each other in turn) and
    suffers less than ``v`` (its ``load``, :func:`loads`, below ``v``'s).
    """
    lighter = demands < SENSITIVE_HEAVIER * demands[v]
    return vms.sensitive & (lighter | (load >= load[v]))


def start_caps(vms, own):
    """Per row, the cap a first cut starts from: the CPU the VM uses, if below its cap."""
    used = np.where(own.st_cpu > 0.0, own.st_cpu, np.inf)
    return np.minimum(vms.cap_pct, np.maximum(used, vms.floor_pct))


def hold(own, rows, caps, limit):
    """The law holds ``caps`` for ``rows`` (a policy bounded its plan); at ``limit``: released."""
    own.st_cap[rows] = np.where(caps >= limit, np.nan, caps)


def release(own, rows):
    """``rows`` leave the law's control (a policy released them by a rule of its own)."""
    own.st_cap[rows] = np.nan
