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

"""CPU contention as interference: functions over the market's columns.

A latency-sensitive VM whose vCPUs wait for a pCPU (the host's run delay,
``run_delay_pct``) is helped first by a higher scheduler weight (Xen and Co.'s
preference for the VM that benefits most), then, if the weight at its
ceiling is not enough, by capping its CPU-using neighbours to the room it
leaves, split by mClock's reservation / shares / limit. A policy that
applies the rule declares :data:`COLUMNS` and :data:`OPTIONS` and calls
:func:`decide` every interval and :func:`answer` after its own answers.
The rule and its limits are in ``doc/source/market.rst``.
"""

import math

import numpy as np

from resex_libvirt.market import policy
from resex_libvirt.market import table

#: ``cc_wait`` and ``cc_run``: each VM's smoothed run delay and CPU use (percent
#: of one pCPU; NaN: none yet); ``cc_boost``: the weight factor in force
#: (1: none); ``cc_cap``: the cap the rule holds on a neighbour (NaN: none).
COLUMNS = {"cc_wait": (np.nan, np.float64), "cc_run": (np.nan, np.float64),
           "cc_boost": (1.0, np.float64), "cc_cap": (np.nan, np.float64)}

OPTIONS = (
    policy.Option("cpu_boost_max", 8.0, min=1.0, max=256.0,
                  help="CPU contention: the highest weight factor a sensitive VM whose "
                       "vCPUs wait for a pCPU is given (1: no boost)."),
    policy.Option("cpu_caps", True,
                  help="CPU contention: when the boost at cpu_boost_max is not enough, cap "
                       "the VMs that use the CPU to the room the waiting VMs leave (mClock: "
                       "reservation first, then shares, never above the limit)."),
    policy.Option("cpu_target", 0.8, min=0.0, max=1.0,
                  help="CPU contention: the caps leave each waiting VM a stretch (run delay "
                       "over run time) of this fraction of its SLA's threshold."),
    policy.Option("cpu_smoothing", 0.02, min=0.0, max=1.0,
                  help="CPU contention: run delay and CPU use are moving averages over this "
                       "fraction of an epoch."),
    policy.Option("cpu_period", 0.01, min=0.0, max=1.0, open_min=True,
                  help="CPU contention: fraction of an epoch between two updates (10 ms at "
                       "the paper's 1 ms interval: one scheduling period)."),
    policy.Option("cpu_half_life", 0.1, min=0.001, max=100.0,
                  help="CPU contention: half-life, in epochs, of a boost or a cap once no "
                       "sensitive VM waits."),
)

#: Up to this many rows, :func:`smooth` folds its samples row by row in Python
#: floats: numpy's cost per call is then most of the work.
SMALL_ROWS = 8
#: Run delay under this percent of one pCPU is noise, not evidence (the
#: board's :data:`~resex_libvirt.board.evidence.MIN_DELAY_FRACTION`).
MIN_WAIT_PCT = 0.1


class Counters:
    """The rule's per-policy counters (its per-VM state is in :data:`COLUMNS`).

    ``quiet``: no VM has run delay on record and the rule holds nothing,
    so an interval without run delay changes nothing (the common case of a
    host whose VMs each have a pCPU: a few operations, not the rule).
    """

    __slots__ = ("since", "quiet")

    def __init__(self):
        self.since = 0
        self.quiet = True


def smooth(step, opts, counters):
    """Fold this interval's ``run_delay_pct`` and ``cpu_pct`` into ``cc_wait`` and ``cc_run``.

    The run delay of a VM whose cap was below its limit this interval starts
    afresh (NaN): it was its own cap's throttling, not evidence of contention.
    Returns False when there was nothing to do (``counters.quiet``).
    """
    vms, own = step.vms, step.state
    if counters.quiet and not vms.run_delay_pct.any():
        return False
    seen = vms.sampled
    if not seen.any():
        return True
    alpha = 1.0 / max(1.0, opts.cpu_smoothing * step.intervals_per_epoch)
    if len(seen) <= SMALL_ROWS:
        _smooth_rows(vms, own, seen, alpha)
        return True
    unseen = ~seen
    for col, new in (("cc_wait", vms.run_delay_pct), ("cc_run", vms.cpu_pct)):
        old = getattr(own, col)
        # old + alpha x (new - old), new where old is NaN, old where unsampled.
        upd = new - old
        upd *= alpha
        upd += old
        np.copyto(upd, new, where=np.isnan(old))
        np.copyto(upd, old, where=unseen)
        if col == "cc_wait":
            np.copyto(upd, np.nan, where=vms.cap_pct < vms.limit_pct)
        setattr(own, col, upd)
    return True


def _smooth_rows(vms, own, seen, alpha):
    """:func:`smooth`'s folding row by row in Python floats (the same IEEE operations)."""
    seen = seen.tolist()
    capped = (vms.cap_pct < vms.limit_pct).tolist()
    for col, new in (("cc_wait", vms.run_delay_pct), ("cc_run", vms.cpu_pct)):
        upd = []
        for ok, x, old in zip(seen, new.tolist(), getattr(own, col).tolist()):
            upd.append((x if math.isnan(old) else (x - old) * alpha + old) if ok else old)
        if col == "cc_wait":
            upd = [math.nan if c else u for u, c in zip(upd, capped)]
        setattr(own, col, np.array(upd))


def stretch_of(own):
    """Per row: ``100 x wait / run`` of the smoothed run delay (inf: waited, never ran)."""
    wait, run = table.nan_to_num(own.cc_wait), table.nan_to_num(own.cc_run)
    with np.errstate(over="ignore"):
        stretch = np.divide(wait, run, out=np.full(len(own), np.inf), where=run > 0.0)
    stretch[wait <= 0.0] = 0.0
    return 100.0 * stretch


def victims(vms, own):
    """Mask of the sensitive VMs whose vCPUs wait for a pCPU beyond their SLA's threshold.

    Waiting evidence is required: a smoothed run delay above
    :data:`MIN_WAIT_PCT` that stretches the VM's CPU work by more than its
    ``interference_threshold_pct`` (``100 x wait / run``), while its cap is
    at its limit (a cap's throttling is run delay too, and no neighbour
    causes it). A VM whose last latency window is within its SLA's bound is
    not a victim, whatever the host sees (a claim may veto, never start,
    an action).
    """
    waiting = vms.sensitive & (own.cc_wait > MIN_WAIT_PCT)
    waiting &= stretch_of(own) > vms.threshold_pct
    fine = vms.reported & (vms.window_mean_us
                           <= vms.latency_sla_us * (1.0 + vms.threshold_pct / 100.0))
    return waiting & ~fine


def mclock_split(room, floor, limit, shares):
    """Divide ``room`` percent of pCPU time: reservations first, then by shares, up to limits.

    mClock (Gulati, Merchant, Varman, OSDI 2010, Section 3): each VM gets
    its reservation ``floor``; what is left is split in proportion to
    ``shares`` (water-filling: a VM at its ``limit`` leaves the rest to the
    others). Never below ``floor`` (even if the reservations add up to more
    than ``room``), never above ``limit``.
    """
    n = len(floor)
    got = np.array(floor, dtype=np.float64)
    left = room - float(got.sum())
    open_ = got < limit
    while left > 1e-9 and open_.any():
        w = np.where(open_, shares, 0.0)
        total = float(w.sum())
        if total <= 0.0:
            w = open_.astype(np.float64)
            total = float(w.sum())
        elif total < 1e-300:
            # Subnormal shares: left x w would underflow; only their proportions count.
            w = w / w.max()
            total = float(w.sum())
        add = left * w / total
        new = np.minimum(got + add, limit)
        moved = float((new - got).sum())
        if not moved > 0.0:
            break              # nothing can move any more (rounding): never spin
        left -= moved
        got = new
        open_ = got < limit - 1e-9
        if n == 0:
            break
    return np.minimum(np.maximum(got, floor), limit)


def decide(step, opts, counters):
    """Update the boosts and caps of the CPU-contention rule; returns the rows whose cap moved.

    Every ``cpu_period`` of an epoch: each victim's (:func:`victims`) weight
    factor rises by its stretch (``x (1 + wait / run)``), up to
    ``cpu_boost_max``; a victim already at that ceiling gets its neighbours
    capped (``cpu_caps``): the VMs that use CPU and are not victims share
    ``100 x pcpus`` minus what the victims demand (``run + wait``, less the
    wait ``cpu_target`` of their threshold allows) by :func:`mclock_split`,
    and a neighbour using more than its part is capped there at once; while
    the victims' stretch is within their threshold the caps move towards
    their part (half-life ``cpu_half_life``), and once no sensitive VM at
    its weight ceiling waits they grow back to the limit. A VM's boost
    decays back the same way while it does not wait at all. Rows of caps
    set or released are returned.
    """
    nothing = np.zeros(0, dtype=np.intp)
    every = max(1, round(opts.cpu_period * step.intervals_per_epoch))
    counters.since += 1
    if not smooth(step, opts, counters):
        return nothing
    if counters.since < every:
        return nothing
    counters.since = 0
    vms, own = step.vms, step.state
    hit = victims(vms, own)
    # Held, not decayed, while a sensitive VM still waits at all (hysteresis:
    # decay until the wait is back, then stay).
    waiting = vms.sensitive & (own.cc_wait > MIN_WAIT_PCT)
    held = own.cc_cap
    factor = math.pow(0.5, 1.0 / max(1e-9, opts.cpu_half_life * step.intervals_per_epoch
                                     / every))
    run = table.nan_to_num(own.cc_run)
    wait = table.nan_to_num(own.cc_wait)
    boost = _boosts(own.cc_boost, opts, hit, waiting, run, wait, factor)
    own.cc_boost = boost
    # The waiting sensitive VMs whose weight is at its ceiling: only caps help them more.
    spent = waiting & (boost >= opts.cpu_boost_max)
    moved = _caps(step, opts, held, hit, spent, run, wait, factor)
    counters.quiet = not (table.nan_to_num(own.cc_wait) > 0.0).any() \
        and not (boost > 1.0).any() and np.isnan(held).all()
    if counters.quiet:
        own.cc_wait = np.full(len(own), np.nan)
        own.cc_run = np.full(len(own), np.nan)
    if not moved:
        return nothing
    return np.unique(np.concatenate(moved))


def answered_rows(step, opts, counters):
    """:func:`decide`, then ``(moved, rows)``: the rows it moved; those and the ones it holds."""
    moved = decide(step, opts, counters)
    held = (~np.isnan(step.state.cc_cap)).nonzero()[0]
    return moved, (np.union1d(moved, held).astype(np.intp) if len(moved) else held)


def _boosts(boost, opts, hit, waiting, run, wait, factor):
    """The weight factors: decayed where no sensitive VM waits, raised by the victims' stretch."""
    calm = ~waiting & (boost > 1.0)
    if calm.any():
        decayed = 1.0 + (boost - 1.0) * factor
        boost = np.where(calm, np.where(decayed < 1.0 + 1e-6, 1.0, decayed), boost)
    if hit.any():
        with np.errstate(over="ignore"):
            stretch = np.divide(wait, run, out=np.full(len(boost), 1.0), where=run > 0.0)
        boost = np.where(hit, np.minimum(opts.cpu_boost_max, boost * (1.0 + stretch)), boost)
    return boost


def _caps(step, opts, held, hit, spent, run, wait, factor):
    """Move the neighbours' caps (``held``, in place); returns the arrays of rows moved."""
    vms = step.vms
    moved = []
    held_rows = (~np.isnan(held)).nonzero()[0]
    if opts.cpu_caps and spent.any() and ((hit & spent).any() or len(held_rows)):
        demand = np.minimum(run + wait, vms.limit_pct)
        # What a victim may still wait: cpu_target of its threshold, over its run.
        slack = run * opts.cpu_target * table.nan_to_num(vms.threshold_pct) / 100.0
        room = max(0.0, 100.0 * step.pcpus - float((demand - slack)[spent].sum()))
        users = ~spent & vms.sampled & (run > 0.0)
        rows = users.nonzero()[0]
        if len(rows):
            part = np.maximum(mclock_split(room, vms.floor_pct[rows], vms.limit_pct[rows],
                                           vms.shares[rows]), vms.floor_pct[rows])
            limit = vms.limit_pct[rows]
            cur = np.where(np.isnan(held[rows]), limit, held[rows])
            if (hit & spent).any():
                # Over the threshold: down to the part at once (never up).
                new = np.where(run[rows] > part, np.minimum(cur, part), cur)
            else:
                # Within it: the held caps move towards the part (half-life).
                new = np.where(np.isnan(held[rows]), cur, part + (cur - part) * factor)
            new = np.minimum(new, limit)
            new = np.where(new >= limit - 0.5, np.nan, new)
            change = ~((new == held[rows]) | (np.isnan(new) & np.isnan(held[rows])))
            if change.any():
                held[rows[change]] = new[change]
                moved.append(rows[change])
    elif not spent.any() and len(held_rows):
        limit = vms.limit_pct[held_rows]
        # Back towards the limit: the gap halves every half-life.
        grown = limit - (limit - held[held_rows]) * factor
        held[held_rows] = np.where(grown >= limit - 0.5, np.nan, grown)
        moved.append(held_rows)
    return moved


def weights(step):
    """``{row: factor}`` of the boosts in force (an answer's ``weights``)."""
    boost = step.state.cc_boost
    rows = (boost > 1.0).nonzero()[0]
    return {k: float(boost[k]) for k in rows.tolist()}


def answer(out, step, rows, caps, rates):
    """Answer (in ``out``) the rule's caps for ``rows`` on top of ``caps`` (each row's otherwise).

    ``caps`` and ``rates`` are what the policy's own rules give these rows
    (their limit and 1.0 when nothing holds them); the lower cap wins.
    Reasons: :data:`~.policy.CONTENTION` where the rule's cap binds.
    """
    if not len(rows):
        return
    vms = step.vms
    held = step.state.cc_cap[rows]
    binds = ~np.isnan(held) & (held < caps)
    final = vms.clamp(np.where(binds, held, caps), rows)
    out.cap(rows, final, rates)
    for k, b in zip(rows.tolist(), binds.tolist()):
        if b:
            out.reasons[k] = policy.CONTENTION
        elif out.reason_of(k, vms) == policy.CONTENTION:
            out.reasons[k] = policy.UNCAPPED
