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

"""Host-side evidence for the sensitive VMs' latency claims (:doc:`/board`).

A sensitive VM's reported interference is a claim; the host sees evidence no
tenant can forge: each vCPU's run-queue delay (:class:`RunDelayMeter`,
:func:`cpu_evidence_pct`; raised to the VM's cgroup CPU pressure where
PSI can be read, :func:`with_pressure`) and the load the market cannot tax on the link
(the queueing model, :mod:`~resex_libvirt.board.report`).
:func:`heard_inflation_pct` publishes what the tenants agree on or what the
evidence supports for any one of them, whichever is larger.
"""

import typing

#: Evidence and claims are clamped to this (the congestion index's ceiling).
MAX_EVIDENCE_PCT = 9900.0

#: Run delay under this fraction of a vCPU's epoch is noise, not evidence
#: (1 ms a second: a wake-up now and then behind a host thread).
MIN_DELAY_FRACTION = 0.001


class RunDelay(typing.NamedTuple):
    """One VM's vCPU run delay and run time over ``span_ns`` of wall time (ns)."""

    delay_ns: int
    run_ns: int
    vcpus: int
    span_ns: int


class RunDelayMeter:
    """Turns cumulative :class:`~resex_libvirt.hypervisor.base.VcpuTimes` into per-epoch deltas.

    :meth:`epoch` is called once per epoch with the hypervisor's latest
    readings; a VM read for the first time, or whose counters went back (it
    restarted), has no delta this epoch.
    """

    def __init__(self):
        self._last = {}
        self._ts = None

    def epoch(self, ts, readings):
        """``{uuid: RunDelay}`` since the previous call (``ts`` monotonic seconds)."""
        out = {}
        span = None if self._ts is None else max(0, round((ts - self._ts) * 1e9))
        for uuid, now in readings.items():
            before = self._last.get(uuid)
            if (span and before is not None and now.delay_ns >= before.delay_ns
                    and now.run_ns >= before.run_ns):
                out[uuid] = RunDelay(now.delay_ns - before.delay_ns, now.run_ns - before.run_ns,
                                     max(1, now.vcpus), span)
        self._last = dict(readings)
        self._ts = ts
        return out


class PressureMeter:
    """Turns cumulative CPU pressure (PSI ``some`` totals, us) into per-epoch stall shares.

    :meth:`epoch` is called once per epoch with ``{uuid: total_us}``; a VM
    read for the first time, or whose total went back, has none this epoch.
    """

    def __init__(self):
        self._last = {}
        self._ts = None

    def epoch(self, ts, totals):
        """``{uuid: percent of the span some task of the VM's group waited for a CPU}``."""
        out = {}
        span = None if self._ts is None else ts - self._ts
        for uuid, total in totals.items():
            before = self._last.get(uuid)
            if span and span > 0 and before is not None and total >= before:
                out[uuid] = min(100.0, 100.0 * (total - before) / (span * 1e6))
        self._last = dict(totals)
        self._ts = ts
        return out


def with_pressure(delays, stalls):
    """``delays`` with each VM's run delay raised to what its CPU pressure shows.

    PSI's ``some`` share ``s`` of the VM's cgroup says that for ``s`` percent
    of the span at least one of its tasks waited for a CPU: its vCPUs'
    summed run delay is at least that much time. A VM without a
    :class:`RunDelay` (no run time to weigh it against) is left out.
    """
    if not stalls:
        return delays
    out = dict(delays)
    for uuid, stall in stalls.items():
        d = out.get(uuid)
        if d is not None:
            floor = round(stall / 100.0 * d.span_ns)
            if floor > d.delay_ns:
                out[uuid] = d._replace(delay_ns=floor)
    return out


def cpu_evidence_pct(delay, capped=False):
    """The latency inflation a VM's run delay supports, in percent.

    A vCPU that ran ``run_ns`` and waited ``delay_ns`` runnable took
    ``run + delay`` to do ``run`` of work: the work was stretched by
    ``100 x delay / run`` percent, the most the host's CPU contention can
    have added to a request that computed all along. 0 when the delay is
    noise (under :data:`MIN_DELAY_FRACTION` of the span per vCPU) or when
    the VM was ``capped`` during the epoch: a cap's throttling counts as run
    delay too, and the host cannot tell it from contention.
    """
    if delay is None or capped:
        return 0.0
    if delay.delay_ns < MIN_DELAY_FRACTION * delay.span_ns * delay.vcpus:
        return 0.0
    if delay.run_ns <= 0:
        return MAX_EVIDENCE_PCT
    return min(MAX_EVIDENCE_PCT, 100.0 * delay.delay_ns / delay.run_ns)


def _clamp(value):
    return min(max(0.0, float(value)), MAX_EVIDENCE_PCT)


def heard_inflation_pct(claims, evidence, consensus_pct):
    """The published inflation: the tenants' consensus, or the largest supported claim.

    ``claims[i]`` is sensitive VM ``i``'s interference percentage and
    ``evidence[i]`` what the host's evidence supports for it (percent);
    ``consensus_pct`` the tenant-bounded statistic of the claims
    (:func:`~resex_libvirt.board.report.robust_inflation_pct`). Each VM is
    heard up to its evidence (``min(claim, evidence)``): one honest victim
    the host sees suffering is published however few its neighbours, and a
    VM's claim never counts beyond what the host observes for it.
    """
    heard = _clamp(consensus_pct)
    for claim, support in zip(claims, evidence):
        heard = max(heard, min(_clamp(claim), _clamp(support)))
    return heard
