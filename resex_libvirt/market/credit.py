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

"""The FreeMarket credit rule (paper Algorithm 1), as functions over the market's columns.

A policy that applies it declares :data:`COLUMNS` and :data:`OPTIONS` and
calls :func:`lowered` (or :func:`spared`, which never cuts a VM over its
SLA) every interval and returns :func:`reset` from its epoch hook. See
``doc/source/market.rst``.
"""

import numpy as np

from resex_libvirt.market import policy
from resex_libvirt.market import table as table_mod

#: ``credit_cap``: the cap the rule holds (NaN: none, the VM is at its limit);
#: ``credit_restore``: the VMs whose cap goes back to the limit at the first
#: interval of an epoch.
COLUMNS = {"credit_cap": (np.nan, np.float64), "credit_restore": (False, bool)}

OPTIONS = (
    policy.Option("low_balance", 0.10, min=0.0, max=1.0, open_max=True,
                  help="Credit rule: a VM with less than this fraction of its Resos left "
                       "starts losing CPU (paper: 10%)."),
    policy.Option("epoch_left", 0.10, min=0.0, max=1.0, open_max=True,
                  help="Credit rule: ...but only while more than this fraction of the epoch "
                       "is left (paper: 10%)."),
    policy.Option("step", 0.10, min=0.0, max=1.0, open_max=True,
                  help="Credit rule: the cap falls by this fraction of its previous value "
                       "each interval (paper: 10%)."),
)


def lowered(step, opts, may_cut=None):
    """Algorithm 1's GETCPUCAP for every VM: the caps it lowers this interval.

    Returns ``[(rows, caps), ...]``: the new cap of each VM whose cap the
    rule lowers (or restores, at the start of an epoch); a later pair
    replaces an earlier one for a row. A VM whose Resos last, or any VM in
    the last ``epoch_left`` of the epoch, keeps the cap it has.
    ``may_cut(rows)``, if given, masks the rows the rule may lower.
    """
    vms, own = step.vms, step.state
    out = []
    restore = own.credit_restore
    back = restore.nonzero()[0]
    if len(back):
        restore[back] = False
        out.append((back, vms.limit_pct[back]))
    if not step.epoch_fraction_left > opts.epoch_left:
        return out
    allocation = vms.allocation
    low = vms.balance < opts.low_balance * allocation
    low &= allocation > 0
    rows = low.nonzero()[0]
    if not len(rows):
        return out
    if may_cut is not None:
        rows = rows[may_cut(rows)]
    held = own.credit_cap[rows]
    cap = table_mod.pick(np.isnan(held), vms.limit_pct[rows], held)
    new = vms.clamp(cap * (1.0 - opts.step), rows)
    moved = new != cap
    rows, new = rows[moved], new[moved]
    if len(rows):
        own.credit_cap[rows] = new
        out.append((rows, new))
    return out


def over_sla(vms):
    """Per row: the VM's interference this interval exceeds its SLA's threshold."""
    # NaN (no SLA, no report this interval) compares false.
    return vms.interference_pct > vms.threshold_pct


def spared(step, opts, answer, held_by=None):
    """:func:`lowered`, never cutting a VM whose own latency is over its SLA.

    The deviation of ``free_market`` from Algorithm 1 (doc/source/market.rst):
    such a VM is skipped (``protected``, in ``answer``'s reasons) and a
    credit cap in force on it is lifted. ``held_by(rows)``, if given, masks
    the rows another rule holds (a tax, a controller): the credit rule
    leaves them alone.
    """
    vms = step.vms

    def may_cut(rows):
        if held_by is not None:
            held = held_by(rows)
            ok = np.zeros(len(rows), dtype=bool)
            ok[~held] = _spare(vms, rows[~held], answer)
            return ok
        return _spare(vms, rows, answer)

    out = lowered(step, opts, may_cut)
    if len(step.reports.rows):
        held = step.state.credit_cap
        # A credit cap in force on a VM now over its SLA is lifted.
        lift = over_sla(vms)
        lift &= held < vms.limit_pct
        rows = lift.nonzero()[0]
        if len(rows):
            held[rows] = np.nan
            out.append((rows, vms.limit_pct[rows]))
            answer.why(rows, policy.PROTECTED)
    return out


def _spare(vms, rows, answer):
    over = over_sla(vms)[rows]
    answer.why(rows[over], policy.PROTECTED)
    return ~over


def note(answer, vms, rows, caps):
    """Why each of ``rows`` has its new credit cap: ``credit``, or ``uncapped`` at its limit."""
    limit = vms.limit_pct[rows].tolist()
    answer.why(rows, [policy.CREDIT if cap < full else policy.UNCAPPED
                      for cap, full in zip(caps.tolist(), limit)])


def reset(step):
    """Caps reset when the Resos are replenished (Alg. 1): at the next interval.

    Returns the epoch's :class:`~.policy.Answer`: a VM cut by the rule is
    ``uncapped`` again.
    """
    vms, own = step.vms, step.state
    held = own.credit_cap
    restore = ~np.isnan(held) & (held != vms.limit_pct)
    own.credit_restore = restore
    own.credit_cap = np.full(len(vms), np.nan)
    answer = policy.Answer()
    rows = [k for k in restore.nonzero()[0].tolist() if vms.reason[k] == policy.CREDIT]
    return answer.why(rows, policy.UNCAPPED)


def answer(out, step, pairs, rates=1.0):
    """Answer the credit rule's ``pairs`` (:func:`lowered`) at ``rates`` in ``out``; note why."""
    for rows, caps in pairs:
        out.cap(rows, caps, rates)
        note(out, step.vms, rows, caps)
