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

"""The onset rule: act on a sustained window inside the epoch, not on the update cadence only.

Every ``window`` intervals (one Xen scheduling period at the paper's 1 ms
interval) each latency-sensitive VM's requests of that window are averaged
(their count-weighted mean). A victim whose window is over its SLA's bound
has each VM without a latency SLA that sent, in the same window, at least
``heavier`` times its own I/O (scaled up by how far its cap holds it down)
cut at once to the cap a linear model calls for: ``cap x aim / inflation``
(the inflation over the SLA falls in proportion to the interferer's
traffic, its traffic in proportion to its cap), never below ``floor`` of
its cap. The window after a cut is not judged (a transfer already on the
wire finishes whatever the cap). The controller then takes over. Pure:
the step's columns and the policy's state in, arrays out; see ``doc/source/market.rst``.
"""

import dataclasses

import numpy as np

from resex_libvirt.market import policy

#: ``on_sum`` and ``on_n``: this window's latency sum and request count (per
#: sensitive VM); ``on_mtus``: the MTUs each VM sent in it; ``on_skip``: windows
#: of this victim not to judge (just after a cut); ``on_cut``: the VMs cut
#: since they were last at their limit (cut once an episode).
COLUMNS = {"on_sum": (0.0, np.float64), "on_n": (0, np.int64),
           "on_mtus": (0.0, np.float64), "on_skip": (0, np.int64), "on_cut": (False, bool)}

OPTIONS = (
    policy.Option("onset_window", 0.01, min=0.0, max=1.0,
                  help="The onset rule's sustained window, as a fraction of an epoch (10 ms "
                       "at the paper's 1 ms interval: one Xen scheduling period, the period "
                       "of a capped sender's bursts); 0: off."),
    policy.Option("onset_floor", 0.15, min=0.01, max=1.0,
                  help="The deepest onset cut, as a fraction of the interferer's cap."),
    policy.Option("onset_heavier", 1.1, min=0.0,
                  help="The onset rule cuts only the VMs that sent at least this many times "
                       "the victim's own I/O in the window (equal senders are left to the "
                       "controller, paper Fig. 8)."),
)


@dataclasses.dataclass
class Onset:
    """The onset rule's state between intervals: the intervals since the window began."""

    since: int = 0


def observe(vms, own):
    """Add this interval's latency windows and MTUs (``vms``) to the sustained window (``own``)."""
    got = vms.reported & (vms.window_count > 0)
    if got.any():
        own.on_sum[got] += vms.window_mean_us[got] * vms.window_count[got]
        own.on_n[got] += vms.window_count[got]
    own.on_mtus += vms.tx_mtus


def cuts(state, vms, own, opts, intervals_per_epoch, aim, eligible):
    """``(rows, caps, load)``: the onset cuts of this interval (empty but at a window's end).

    ``aim`` is, per row, the inflation over the SLA (a fraction, e.g.
    0.085) the cut aims at; ``eligible`` the rows the policy lets the rule
    cut; ``opts`` carries :data:`OPTIONS`. A VM is cut once until it is back
    at its limit (then its controller moves it). ``load``: per row cut, the
    latency of the victim that set its cut over that victim's aim,
    ``(1 + inflation) / (1 + aim)``, for the caller's check that its
    throttling helps (:mod:`.response`). Call after :func:`observe`, every
    interval.
    """
    none = np.zeros(0, dtype=np.intp), np.zeros(0), np.zeros(0)
    if opts.onset_window <= 0.0:
        return none
    state.since += 1
    if state.since < max(1, round(opts.onset_window * intervals_per_epoch)):
        return none
    state.since = 0
    cap, limit, sla_us = vms.cap_pct, vms.limit_pct, vms.latency_sla_us
    own.on_cut[cap >= limit] = False
    heard = own.on_n > 0
    mean = np.divide(own.on_sum, own.on_n, out=np.full(len(own), np.nan), where=heard)
    sent = own.on_mtus.copy()
    own.on_sum[:] = 0.0
    own.on_n[:] = 0
    own.on_mtus[:] = 0.0
    judged = heard & (own.on_skip <= 0)
    np.subtract(own.on_skip, 1, out=own.on_skip, where=heard & (own.on_skip > 0))
    bound = sla_us * (1.0 + vms.threshold_pct / 100.0)
    over = judged & vms.sensitive & (mean > bound) & (sla_us > 0.0)
    if not over.any():
        return none
    # Each VM's I/O in the window, scaled up by how far its cap holds it down.
    held = (cap < limit) & (cap > 0.0)
    demand = np.divide(sent * limit, cap, out=sent, where=held)
    inflation = np.where(over, mean / sla_us - 1.0, np.nan)
    factor = np.full(len(own), np.inf)
    load = np.ones(len(own))
    for victim in over.nonzero()[0].tolist():
        hit = (demand > 0.0) & (demand >= opts.onset_heavier * demand[victim])
        hit &= eligible & ~vms.sensitive & ~own.on_cut
        hit[victim] = False
        want = max(opts.onset_floor, aim[victim] / inflation[victim])
        deeper = hit & (want < factor)
        factor[deeper] = want
        load[deeper] = (1.0 + inflation[victim]) / (1.0 + aim[victim])
    rows = (factor < 1.0).nonzero()[0]
    if not len(rows):
        return none
    own.on_skip[over] = 1
    own.on_cut[rows] = True
    caps = np.maximum(cap[rows] * factor[rows], vms.floor_pct[rows])
    return rows, np.minimum(caps, limit[rows]), load[rows]
