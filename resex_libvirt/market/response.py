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

"""Does throttling help? A controller's check that its victim responds to the cap.

The ResEx paper's rule is "no interference, no throttling" (Section VI-C:
the rate decays once the victim stops complaining). A controller that cuts
an interferer's cap while the victim's latency does not move (its base
latency is over its SLA, or something the cap does not reach slows it)
never hears the victim stop complaining, and holds the interferer at its
floor for good: a tax that buys nothing is interference of its own.

These helpers keep, per interferer under control, the victim's excess over
its target when the control began (``rs_ref``) and the cap then
(``rs_cap0``); once the cap has been held at or below ``depth`` of that for
``patience`` updates while the victim is still over its target by more than
``keep`` of its first excess, the throttle is judged futile: the caller
releases the interferer to its limit, gives ``no_response`` as the
reason, and leaves it alone for ``backoff`` updates (doubled after each
futile try in a row, at most :data:`MAX_BACKOFF_DOUBLINGS` times), after
which it tries again. Pure: columns in, masks out.
"""

import dataclasses

import numpy as np

from resex_libvirt.market import settle

#: Backoff doubles at most this many times (x64).
MAX_BACKOFF_DOUBLINGS = 6

#: The columns a policy using the check adds to its table.
COLUMNS = {"rs_ref": (np.nan, np.float64), "rs_cap0": (np.nan, np.float64),
           "rs_deep": (0, np.int64), "rs_rest": (0, np.int64), "rs_strikes": (0, np.int64)}


@dataclasses.dataclass(frozen=True)
class ResponseCheck:
    """How a controller judges that its throttling buys nothing (module docstring).

    ``depth``: a cap at or below this fraction of the cap the control began
    with is a deep cut; ``patience``: updates a deep cut is held before it is
    judged; ``keep``: the victim still over its target by more than this
    fraction of its first excess (at least ``min_excess``) has not responded;
    ``backoff``: updates a futile interferer is left alone.
    """

    depth: float = 0.5
    patience: int = 10
    keep: float = 0.75
    min_excess: float = 0.1
    backoff: int = 20

    def __post_init__(self):
        if not 0.0 < self.depth < 1.0:
            raise ValueError("depth must be in (0, 1), got %r" % (self.depth,))
        if not 0.0 < self.keep <= 1.0:
            raise ValueError("keep must be in (0, 1], got %r" % (self.keep,))
        if self.patience < 1 or self.backoff < 1:
            raise ValueError("patience and backoff must be >= 1")
        if self.min_excess < 0.0:
            raise ValueError("min_excess must be >= 0")


def resting(own):
    """Rows left alone after a futile throttle (not to be controlled this update)."""
    return own.rs_rest > 0


def tick(own):
    """One update passed: the rests run down."""
    np.subtract(own.rs_rest, 1, out=own.rs_rest, where=own.rs_rest > 0)


def judge(check, own, rows, started, load, before, caps):
    """Per row of ``rows`` (controlled this update): is its throttle futile?

    ``started``: rows whose control begins now (their reference is taken);
    ``load``: the worst victim's latency over its target (1.0: at target);
    ``before`` and ``caps``: each row's cap before and after this update.
    Rows found futile get their rest and their strike; the caller releases
    them.
    """
    excess = load - 1.0
    first = rows[started]
    own.rs_ref[first] = excess[started]
    own.rs_cap0[first] = before[started]
    own.rs_deep[first] = 0
    cap0 = own.rs_cap0[rows]
    deep = caps <= check.depth * cap0
    own.rs_deep[rows] = np.where(deep, own.rs_deep[rows] + 1, 0)
    ref = np.maximum(own.rs_ref[rows], check.min_excess)
    futile = ((own.rs_deep[rows] >= check.patience) & (excess > 0.0)
              & (excess > check.keep * ref))
    bad = rows[futile]
    if len(bad):
        strikes = np.minimum(own.rs_strikes[bad], MAX_BACKOFF_DOUBLINGS)
        own.rs_rest[bad] = check.backoff * (1 << strikes)
        own.rs_strikes[bad] += 1
        forget(own, bad)
    return futile


def forget(own, rows):
    """The control of ``rows`` ended (released, or futile): no reference any more."""
    own.rs_ref[rows] = np.nan
    own.rs_cap0[rows] = np.nan
    own.rs_deep[rows] = 0


def settled(own, rows):
    """``rows`` went back to their limit because their victims are fine: strikes forgiven."""
    forget(own, rows)
    own.rs_strikes[rows] = 0


def check_plan(check, own, vms, plan, aim, held):
    """Judge a settling law's plan (:func:`.settle.plan`): the caps with futile ones released.

    ``aim``: per row, the inflation (%) each victim is aimed at; ``held``:
    the caps the law held before the plan (NaN: not controlled). Returns
    ``(caps, futile)`` aligned with ``plan.rows``: a futile row's cap is
    its limit (the caller says ``no_response``), and rows back at their
    limit for their victims' sake have their strikes forgiven.
    """
    rows, caps = plan.rows, plan.caps
    limit = vms.limit_pct[rows]
    futile = np.zeros(len(rows), dtype=bool)
    cut = plan.cut
    if cut.any():
        cause = plan.cause[cut]
        load = (1.0 + plan.inflation[cut] / 100.0) / (1.0 + aim[cause] / 100.0)
        was = held[rows[cut]]
        before = np.where(np.isnan(was), vms.cap_pct[rows[cut]], was)
        futile[cut] = judge(check, own, rows[cut], np.isnan(was), load, before, caps[cut])
        caps = np.where(futile, limit, caps)
    settled(own, rows[(caps >= limit) & ~futile])
    return caps, futile


def checked_plan(check, step, aim, plan_of):
    """A settling law's plan, judged: ``(plan, caps, futile)``, or None with no row.

    ``plan_of()`` makes the plan (:func:`.settle.plan`) from ``step``;
    ``aim``: per row, the inflation (%) the victims are aimed at. With
    ``check`` (None: no check) the interval ticks when the plan judged a
    victim, and futile rows go back to their limit and leave the law's
    control (:func:`check_plan`).
    """
    own = step.state
    held = own.st_cap.copy()
    plan = plan_of()
    if plan.judged and check is not None:
        tick(own)
    rows, caps = plan.rows, plan.caps
    if not len(rows):
        return None
    futile = np.zeros(len(rows), dtype=bool)
    if check is not None:
        caps, futile = check_plan(check, own, step.vms, plan, aim, held)
        settle.release(own, rows[futile])
    return plan, caps, futile
