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

"""What a tenant is told about its own VM, down its latency channel.

A tenant whose application reports latency wants to know whether the host
meets its SLA, and a tenant whose VM is capped wants to know why. The agent
tells each VM its own standing (format: :mod:`benchex.status`,
doc/source/latency.rst, "Status back to the guest"), built here from what
the control loop already holds: the VM's SLA, the window the market judged
it on, its cap and the policy's reason.

Privacy is by construction: :func:`vm_status` is given one VM's own record
and figures, never the market's view of the others, and the policy's reason
is mapped to a fixed category (:func:`category`). IOShares caps an
interferer *because of* a named victim, but the tenant is told only
``congestion``: that a latency-sensitive VM of this host misses its SLA on
the link it sends into. No VM, UUID, host-internal name or project reaches
the line, not even the VM's own (the channel is the identity).

The loop builds the lines at most once per ``[latency] status_interval_s``
(:class:`Throttle`) and hands them to the intake, the one owner of the
channel sockets, which writes them without blocking
(:meth:`resex_agent.intake.server.LatencyIntake.post_status`).
"""

from benchex import status as wire
from resex_libvirt.market import policy

#: The policy's reasons (:data:`resex_libvirt.market.policy.REASONS`) as the tenant hears them.
CATEGORIES = {
    policy.TAX: wire.CONGESTION,
    policy.TARGET: wire.CONGESTION,
    policy.DECAY: wire.CONGESTION_EASING,
    policy.NO_RESPONSE: wire.CONGESTION_EASING,
    policy.CREDIT: wire.CPU_PRICE,
    policy.CONTENTION: wire.CPU_CONTENTION,
}

#: A cap within this many percent of one CPU of the VM's limit is no cap.
CAP_TOLERANCE_PCT = 0.5


def category(reason, observe_only=False):
    """The tenant-safe category of a policy ``reason`` (a plugin's own reasons: ``policy``)."""
    if observe_only:
        return wire.OBSERVE_ONLY
    return CATEGORIES.get(reason, wire.POLICY)


def _state(sla, window, interference_pct):
    if not sla.sensitive:
        return wire.NO_SLA
    if window is None or not window.count or interference_pct is None:
        return wire.NO_WINDOW
    return wire.MISSED if interference_pct > sla.interference_threshold_pct else wire.MET


def vm_status(info, window=None, interference_pct=None, cap_pct=None, reason=None,
              observe_only=False):
    """The status (a dict in the :mod:`benchex.status` format) of one VM.

    ``info`` is the VM's own :class:`~resex_libvirt.hypervisor.base.VMInfo`
    (its SLA and size, nothing else of it is read); ``window`` the latency
    window the market judged it on this interval and ``interference_pct``
    its interference over the SLA's base (``None``: no fresh window);
    ``cap_pct`` the cap the agent holds it to (``None``: none, a
    monitor-only VM) and ``reason`` why (the policy's word).
    ``observe_only``: the agent writes no knob, the cap is what it would set.
    """
    sla = info.sla
    out = {"state": _state(sla, window, interference_pct), "sla": None, "window": None,
           "cap": None}
    if sla.sensitive:
        out["sla"] = {"latency_us": round(float(sla.latency_sla_us), 3),
                      "threshold_pct": round(float(sla.interference_threshold_pct), 3),
                      "statistic": sla.latency_statistic}
    if window is not None and window.count:
        out["window"] = {
            "requests": int(window.count), "mean_us": round(float(window.mean_us), 3),
            "p99_us": round(float(window.p99_us), 3) if window.p99_us > 0 else None,
            "interference_pct": (round(float(interference_pct), 2)
                                 if interference_pct is not None else None)}
        if window.peer:
            # The VM's own report named it: the tenant's claim, told back.
            out["window"]["peer"] = window.peer
    limit = sla.effective_limit(info.vcpus)
    if cap_pct is not None and cap_pct < limit - CAP_TOLERANCE_PCT:
        out["cap"] = {"pct": round(float(cap_pct), 2), "limit_pct": round(float(limit), 2),
                      "reason": category(reason, observe_only), "enforced": not observe_only}
    return out


def encode(status):
    """The status as one line for the channel (:func:`benchex.status.encode`)."""
    return wire.encode(status)


class Throttle:
    """At most one status round per ``interval_s`` of the loop's clock.

    :meth:`due` costs one comparison: the loop asks every interval.
    """

    __slots__ = ("interval_s", "_next")

    def __init__(self, interval_s):
        if not interval_s > 0:
            raise ValueError("interval_s must be > 0")
        self.interval_s = float(interval_s)
        self._next = None

    def due(self, now):
        """True at most once per ``interval_s``; the first call is due."""
        if self._next is not None and now < self._next:
            return False
        self._next = now + self.interval_s
        return True
