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

"""What the intake knows: each VM's reports, rate limits, counters and log throttles.

No sockets here: the selector thread hands every framed line to
:meth:`ReportStore.offer` with the source it came from and, for a channel,
the VM the channel belongs to; the agent loop reads :meth:`windows`. One lock
guards it all, so the two threads may call it concurrently.

Memory is bounded by construction: state exists only for VMs the agent
learned through :meth:`set_vms` (a probe report naming any other UUID is
rejected before anything is stored for it), each VM has at most one window
of ``window_reports`` reports and one token bucket per source, and the
counters and log throttles are keyed by a closed set of reasons.

New evidence: every accepted report gets an arrival number, and the store
remembers, per VM, the last number it had when it handed that VM a window.
A window says how many of its requests arrived since (``LatencyWindow.new``:
the ``n`` of its reports numbered after the last hand-over), so a window
handed again with no new report, or one that changed only because an old
report aged out, says 0; the market then acts on new requests only.

Trust: a VM without a latency SLA (``resex:latency_sla_us``) has its reports
dropped (``no_latency_sla``), so it can never make the market tax anyone
(IOShares only acts for sensitive VMs anyway, paper Alg. 2, Section VI-C).
Every accepted claim is logged with the VM, the source and the claimed
figures: at WARNING when the claim exceeds the VM's interference threshold
(it will make the market tax someone), at INFO otherwise, at most once per
``log_interval_s`` unless it crosses the threshold.
"""

import collections
import logging
import threading

from benchex import framing
from benchex import wire
from resex_agent.intake import ratelimit
from resex_agent.intake import window as window_mod

LOG = logging.getLogger(__name__)

#: The counters' key for probe-socket messages that name no known VM.
UNATTRIBUTED = "(probe socket)"


class _Counters:
    __slots__ = ("accepted", "rejected")

    def __init__(self):
        self.accepted = 0
        self.rejected = collections.Counter()


class ReportStore:
    """Bounded per-VM report windows fed by untrusted lines."""

    def __init__(self, params, clock):
        self.params = params
        self.limits = params.limits
        self._clock = clock
        self._lock = threading.Lock()
        self._slas = {}
        self._windows = {}
        self._buckets = {}
        self._counters = {}
        self._last_log = {}
        self._last_claim = {}
        self._seq = 0           # arrival number of the last accepted report
        self._handed = {}       # uuid -> self._seq when its last window was handed

    # -- membership ---------------------------------------------------------------
    def set_vms(self, slas):
        """Adopt the VMs now on the host: ``{uuid: SLA}``; forget the others."""
        with self._lock:
            self._slas = dict(slas)
            known = self._slas
            for table in (self._windows, self._buckets, self._last_claim):
                for key in [k for k in table if k[0] not in known]:
                    del table[key]
            for vm in [v for v in self._handed if v not in known]:
                del self._handed[vm]
            for key in [k for k in self._windows if not known[k[0]].sensitive]:
                del self._windows[key]
            for vm in [k for k in self._counters if k not in known and k != UNATTRIBUTED]:
                del self._counters[vm]
            for key in [k for k in self._last_log if k[0] not in known and k[0] != UNATTRIBUTED]:
                del self._last_log[key]

    def known(self, vm):
        with self._lock:
            return vm in self._slas

    # -- intake -------------------------------------------------------------------
    def offer(self, source, line, vm=None):
        """Take one framed line (or :data:`framing.TOO_LONG`); return the Report or ``None``.

        ``vm`` is the channel's VM for :data:`wire.SOURCE_CHANNEL` and must be
        ``None`` for :data:`wire.SOURCE_PROBE` (the VM is read from the message).
        """
        now = self._clock()
        with self._lock:
            if source == wire.SOURCE_CHANNEL:
                if vm not in self._slas:
                    return None
                if line is framing.TOO_LONG:
                    self._reject(vm, wire.TOO_LONG, now)
                    return None
                if not self._take(vm, source, now):
                    self._reject(vm, wire.RATE_LIMITED, now)
                    return None
                try:
                    report = wire.parse(line, source, self.limits)
                except wire.Rejected as exc:
                    self._reject(vm, exc.reason, now)
                    return None
            else:
                if line is framing.TOO_LONG:
                    self._reject(UNATTRIBUTED, wire.TOO_LONG, now)
                    return None
                try:
                    report = wire.parse(line, source, self.limits)
                except wire.Rejected as exc:
                    self._reject(UNATTRIBUTED, exc.reason, now)
                    return None
                vm = report.vm
                if vm not in self._slas:
                    self._reject(UNATTRIBUTED, wire.UNKNOWN_VM, now)
                    return None
                if not self._take(vm, source, now):
                    self._reject(vm, wire.RATE_LIMITED, now)
                    return None
            sla = self._slas[vm]
            if not sla.sensitive:
                self._reject(vm, wire.NO_LATENCY_SLA, now)
                return None
            key = (vm, source)
            win = self._windows.get(key)
            if win is None:
                win = self._windows[key] = window_mod.ReportWindow(self.params.window_reports)
            self._seq += 1
            win.add(now, report, self._seq)
            self._count(vm).accepted += 1
            self._log_claim(vm, source, sla, report, now)
            return report

    def reject(self, vm, reason):
        """Count a rejection found outside the parser (a refused connection...)."""
        with self._lock:
            self._reject(vm if vm in self._slas else UNATTRIBUTED, reason, self._clock())

    # -- output -------------------------------------------------------------------
    def windows(self):
        """``{uuid: LatencyWindow}`` pooled from the fresh reports of sensitive VMs.

        A call hands the windows over: each window's ``new`` counts the
        requests of its reports that arrived since the VM's last window was
        handed (all of them for its first), 0 when none arrived. Its
        ``peer`` is the newest fresh report's that names one, channel and
        probe alike.
        """
        now = self._clock()
        horizon = self.params.freshness_s
        grouped = {}
        fresh = {}
        peers = {}
        with self._lock:
            handed = self._handed
            for key in list(self._windows):
                win = self._windows[key]
                if win.expire(now, horizon) == 0:
                    del self._windows[key]
                    continue
                vm = key[0]
                grouped.setdefault(vm, []).extend(win.reports())
                fresh[vm] = fresh.get(vm, 0) + win.requests_after(handed.get(vm, 0))
                peers[vm] = max(peers.get(vm, (0, None)), win.latest_peer(),
                                key=lambda found: found[0])
            for vm in grouped:
                handed[vm] = self._seq
        return {vm: window_mod.pool(reports, fresh[vm], peers[vm][1])
                for vm, reports in grouped.items()}

    def stats(self):
        """``{uuid or UNATTRIBUTED: {"accepted": n, "rejected": {reason: n}}}``."""
        with self._lock:
            return {vm: {"accepted": c.accepted, "rejected": dict(c.rejected)}
                    for vm, c in self._counters.items()}

    def footprint(self):
        """Sizes of every table (for tests that memory stays bounded)."""
        with self._lock:
            return {
                "windows": len(self._windows),
                "reports": sum(len(w) for w in self._windows.values()),
                "buckets": len(self._buckets),
                "counters": len(self._counters),
                "log_throttles": len(self._last_log) + len(self._last_claim),
            }

    # -- internals (lock held) ------------------------------------------------------
    def _count(self, vm):
        c = self._counters.get(vm)
        if c is None:
            c = self._counters[vm] = _Counters()
        return c

    def _take(self, vm, source, now):
        key = (vm, source)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = ratelimit.TokenBucket(
                self.params.rate_limit_per_s, self.params.rate_burst, now)
        return bucket.take(now)

    def _reject(self, vm, reason, now):
        self._count(vm).rejected[reason] += 1
        key = (vm, reason)
        last = self._last_log.get(key)
        if last is None or now - last >= self.params.log_interval_s:
            self._last_log[key] = now
            LOG.warning("latency report from %s rejected: %s (%d so far; logged at most "
                        "once per %.0f s)", vm, reason, self._counters[vm].rejected[reason],
                        self.params.log_interval_s)

    def _log_claim(self, vm, source, sla, report, now):
        base = sla.latency_sla_us
        excess = 100.0 * (report.mean_us - base) / base
        over = excess > sla.interference_threshold_pct
        key = (vm, source)
        last = self._last_claim.get(key)
        if last is not None and last[1] == over and now - last[0] < self.params.log_interval_s:
            return
        self._last_claim[key] = (now, over)
        LOG.log(logging.WARNING if over else logging.INFO,
                "VM %s claims latency mean %.1f us (std %.1f, p99 %.1f, n %d) via %s%s: "
                "%+.0f%% against its base %.1f us, threshold %.0f%%",
                vm, report.mean_us, report.std_us, report.p99_us, report.n, source,
                " to peer %s" % report.peer if report.peer else "",
                excess, base, sla.interference_threshold_pct)
