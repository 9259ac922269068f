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
SLA) every interval and :func:`reset` at every epoch. See
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


def lowered(view, opts, may_cut=None):
    """Algorithm 1's GETCPUCAP for every VM: the caps it lowers this interval.

    Returns ``[(rows, caps), ...]``: the new cap of each VM whose cap the
    rule lowers (or restores, at the start of an epoch); a later pair
    replaces an earlier one for a row. A VM whose Resos last, or any VM in
    the last ``epoch_left`` of the epoch, keeps the cap it has.
    ``may_cut(rows)``, if given, masks the rows the rule may lower.
    """
    t = view.t
    out = []
    restore = t.credit_restore
    back = restore.nonzero()[0]
    if len(back):
        restore[back] = False
        out.append((back, t.limit[back]))
    if not view.epoch_fraction_left > opts.epoch_left:
        return out
    allocation = t.allocation
    low = t.balance < opts.low_balance * allocation
    low &= allocation > 0
    rows = low.nonzero()[0]
    if not len(rows):
        return out
    if may_cut is not None:
        rows = rows[may_cut(rows)]
    held = t.credit_cap[rows]
    cap = table_mod.pick(np.isnan(held), t.limit[rows], held)
    new = view.clamp(cap * (1.0 - opts.step), rows)
    moved = new != cap
    rows, new = rows[moved], new[moved]
    if len(rows):
        t.credit_cap[rows] = new
        out.append((rows, new))
    return out


def over_sla(t):
    """Per row: the VM's interference this interval exceeds its SLA's threshold."""
    # NaN (no SLA, no report this interval) compares false.
    return t.intf > t.threshold


def spared(view, opts, reasons, held_by=None):
    """:func:`lowered`, never cutting a VM whose own latency is over its SLA.

    The deviation of ``free_market`` from Algorithm 1 (doc/source/market.rst):
    such a VM is skipped (``protected``) and a credit cap in force on it is
    lifted. ``held_by(rows)``, if given, masks the rows another rule holds
    (a tax, a controller): the credit rule leaves them alone.
    """
    t = view.t

    def may_cut(rows):
        if held_by is not None:
            held = held_by(rows)
            ok = np.zeros(len(rows), dtype=bool)
            ok[~held] = _spare(view, rows[~held], reasons)
            return ok
        return _spare(view, rows, reasons)

    out = lowered(view, opts, may_cut)
    if len(view.win_rows):
        held = t.credit_cap
        # A credit cap in force on a VM now over its SLA is lifted.
        lift = over_sla(t)
        lift &= held < t.limit
        rows = lift.nonzero()[0]
        if len(rows):
            held[rows] = np.nan
            out.append((rows, t.limit[rows]))
            for k in rows.tolist():
                reasons[t.names[k]] = policy.PROTECTED
    return out


def _spare(view, rows, reasons):
    over = over_sla(view.t)[rows]
    names = view.t.names
    for k in rows[over].tolist():
        reasons[names[k]] = policy.PROTECTED
    return ~over


def note(view, reasons, rows, caps):
    """Why each of ``rows`` has its new credit cap: ``credit``, or ``uncapped`` at its limit."""
    names = view.t.names
    limit = view.t.limit[rows].tolist()
    for k, cap, full in zip(rows.tolist(), caps.tolist(), limit):
        reasons[names[k]] = policy.CREDIT if cap < full else policy.UNCAPPED


def reset(view, reasons):
    """Caps reset when the Resos are replenished (Alg. 1): at the next interval."""
    t = view.t
    held = t.credit_cap
    restore = ~np.isnan(held) & (held != t.limit)
    t.credit_restore = restore
    t.credit_cap = np.full(len(t), np.nan)
    for k in restore.nonzero()[0].tolist():
        vm = t.names[k]
        if reasons.get(vm) == policy.CREDIT:
            reasons[vm] = policy.UNCAPPED


def answer(view, reasons, pairs, rates=1.0):
    """Answer the credit rule's ``pairs`` (:func:`lowered`) at ``rates``; note the reasons."""
    for rows, caps in pairs:
        view.answer(rows, caps, rates)
        note(view, reasons, rows, caps)
