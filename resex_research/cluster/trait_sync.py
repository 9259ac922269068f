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

"""``resex-placement-sync`` in the fleet study: the trait CUSTOM_RESEX_CLOSED over simulated time.

:class:`TraitSync` is the service (:mod:`resex_nova.placement_sync`) as the
fleet sees it: it follows the hosts' reports with the scheduler's admission
state (:mod:`resex_libvirt.board.admission`), decides with the service's own
rule (:func:`resex_nova.traits.admission_closed`, the trait being the
latch), and writes each change with the calls the service makes, paced by
its token bucket. The fleet sets the trait in its simulated Placement when a
write completes. What is modelled, and the defaults, are in
``doc/source/fleet.rst`` ("Placement traits"); :class:`SyncModel` holds the
scenario's ``[placement_sync]`` table.
"""

import collections
import dataclasses
import math
import random

from resex_libvirt.board import admission as admission_mod
from resex_libvirt.sim import run_output
from resex_nova import placement as placement_mod
from resex_nova import traits as traits_mod

#: A reconciliation in the service's queue of work (hosts are names).
RECONCILE = object()

#: Seconds before a write given up on 409s is tried again (the service's next pass).
RETRY_S = 1.0


@dataclasses.dataclass(frozen=True)
class SyncModel:
    """The service's timing and its Placement, as a scenario's ``[placement_sync]`` sets them.

    ``watch_latency_s``: from a report reaching the board to the service
    acting on it (an etcd watch delivers in milliseconds; the service's loop
    then waits its 0.2 s pass interval). ``call_s``: one Placement call's
    round trip. ``max_calls_per_second``: the service's token bucket
    (``[placement_sync] max_calls_per_second``, burst of one second's worth).
    ``conflict_probability``: the chance that a ``PUT`` meets a 409 (another
    writer, such as nova-compute, changed the provider between the service's
    ``GET`` and its ``PUT``). ``reconcile_interval_s`` and
    ``unknown_host_policy``: the service's options of those names.
    """

    watch_latency_s: float = 0.3
    call_s: float = 0.05
    max_calls_per_second: float = 10.0
    conflict_probability: float = 0.01
    reconcile_interval_s: float = 60.0
    unknown_host_policy: str = traits_mod.UNKNOWN_CLOSED


class TraitSync:
    """The service's state, decisions and calls; times are simulated seconds.

    ``threshold``, ``hysteresis``, ``tau`` and ``max_age`` are the
    ``[resex]`` options the service shares with the scheduler. The caller
    feeds every report (:meth:`report`), tells of hosts gone silent
    (:meth:`silent`) and of reconciliations due (:meth:`reconcile_due`), and
    runs the service's single worker (:meth:`work`) whenever :attr:`busy` is
    False and :meth:`ready_at` says a job is waiting.
    """

    def __init__(self, model, threshold, hysteresis, tau, max_age, seed=0):
        self.model = model
        self.threshold = float(threshold)
        self.hysteresis = float(hysteresis)
        self.tau = float(tau)
        self.max_age = float(max_age)
        self.state = {}          # host -> Admission, as the service's reader holds it
        self.silent_hosts = set()
        self.actual = {}         # host -> the trait in Placement (as last written)
        self.since = {}          # host -> when its pending change was decided
        self.queue = collections.deque()   # (ready_at, host or RECONCILE)
        self.queued = set()
        self.busy = False
        self._rate = float(model.max_calls_per_second)
        self._burst = max(1.0, self._rate)
        self._tokens = self._burst
        self._at = 0.0
        self._rng = random.Random("placement-sync:%d" % seed)
        self.calls = collections.Counter()
        self.per_minute = collections.Counter()
        self.written = {True: 0, False: 0}
        self.conflicts = 0
        self.reconciliations = 0
        self.lags = []
        self.closed = 0
        self.closed_peak = 0

    # -- what the service decides -----------------------------------------------------
    def desired(self, host):
        """True/False: the trait the host should carry; None: leave it (unknown, ``keep``)."""
        if host in self.silent_hosts:
            policy = self.model.unknown_host_policy
            return None if policy == traits_mod.UNKNOWN_KEEP else \
                policy == traits_mod.UNKNOWN_CLOSED
        s = self.state.get(host)
        if s is None:
            return None
        return traits_mod.admission_closed(s.smoothed, s.latched, self.threshold,
                                           self.hysteresis, self.actual.get(host))

    def _check(self, host, now):
        """Queue ``host`` if its trait should change; True when the worker has news."""
        want = self.desired(host)
        if want is None or want == self.actual.get(host, False):
            return False
        self.since.setdefault(host, now)
        if host in self.queued:
            return False
        self.queued.add(host)
        self.queue.append((now + self.model.watch_latency_s, host))
        return True

    def report(self, host, rec, now):
        """A report of ``host`` reached the board at ``now``: the reader's rule, then the check."""
        old = self.state.get(host)
        if old is None or rec.ts - old.ts > self.max_age:
            self.state[host] = admission_mod.start(rec)
        elif rec.ts > old.ts and not rec.blind:
            self.state[host] = admission_mod.advance(old, rec, self.tau, self.hysteresis)
        if rec.blind:
            self.silent_hosts.add(host)     # no evidence: an unknown host
        else:
            self.silent_hosts.discard(host)
        return self._check(host, now)

    def silent(self, host, now):
        """``host``'s last report aged past ``max_age`` (a failed host)."""
        self.silent_hosts.add(host)
        return self._check(host, now)

    def begin(self):
        """The day starts with Placement in step with the board: ``{host: closed}``, no calls.

        (The service reconciled before the day; ``was_closed`` unknown, so
        the reader's latch decides, as after a restart with no trait set.)
        """
        for host, s in self.state.items():
            self.actual[host] = s.latched > self.threshold
        self.queue.clear()
        self.queued.clear()
        self.since.clear()
        self.closed = self.closed_peak = sum(self.actual.values())
        return dict(self.actual)

    def reconcile_due(self, now):
        """Queue a reconciliation (its two listings); True when the worker has news."""
        self.queue.append((now, RECONCILE))
        return True

    def ready_at(self):
        """When the first queued job can start, or None."""
        return self.queue[0][0] if self.queue else None

    # -- the calls -----------------------------------------------------------------------
    def _call(self, t, method):
        """One call starting no earlier than ``t`` under the token bucket: its end."""
        if self._rate > 0.0:
            self._tokens = min(self._burst, self._tokens + (t - self._at) * self._rate)
            self._at = t
            if self._tokens < 1.0:
                wait = (1.0 - self._tokens) / self._rate
                t += wait
                self._at = t
                self._tokens = 1.0
            self._tokens -= 1.0
        self.calls[method] += 1
        self.per_minute[int(t // 60.0)] += 1
        return t + self.model.call_s

    def work(self, now):
        """Run the worker's next job at ``now``: ``(end, (host, closed) or None)``, or None.

        A reconciliation lists the providers with each trait (two ``GET``).
        A write reads the provider's traits and puts the set back (``GET``,
        ``PUT``), again on each 409 up to the client's attempts; given up, the
        host waits for the next pass. A host whose change was undone before
        its turn costs nothing. ``(host, closed)`` is the trait to set in
        Placement at ``end``; call :meth:`applied` then.
        """
        while self.queue and self.queue[0][0] <= now:
            _, job = self.queue.popleft()
            if job is RECONCILE:
                self.reconciliations += 1
                t = self._call(now, "GET resource_providers")
                return self._call(t, "GET resource_providers"), None
            self.queued.discard(job)
            want = self.desired(job)
            if want is None or want == self.actual.get(job, False):
                self.since.pop(job, None)
                continue
            return self._write(job, want, now)
        return None

    def _write(self, host, closed, t):
        for _ in range(placement_mod.CONFLICT_ATTEMPTS):
            t = self._call(t, "GET traits")
            t = self._call(t, "PUT traits")
            if self._rng.random() >= self.model.conflict_probability:
                return t, (host, closed)
            self.conflicts += 1
        self.queued.add(host)
        self.queue.append((t + RETRY_S, host))
        return t, None

    def applied(self, host, closed, now):
        """The write of ``host`` completed at ``now``; True when the host needs another."""
        self.actual[host] = closed
        self.written[closed] += 1
        self.closed += 1 if closed else -1
        self.closed_peak = max(self.closed_peak, self.closed)
        start = self.since.pop(host, None)
        if start is not None:
            self.lags.append(now - start)
        return self._check(host, now)

    # -- what it cost ----------------------------------------------------------------------
    def summary(self, duration_s):
        """The service's day: calls, writes, conflicts, per-minute rates, trait lags."""
        total = sum(self.calls.values())
        minutes = max(1, math.ceil(duration_s / 60.0))
        lags = sorted(self.lags)
        pct = run_output.percentile
        return {
            "calls": total, "calls_by_kind": dict(sorted(self.calls.items())),
            "calls_per_min_mean": total / (duration_s / 60.0) if duration_s > 0 else 0.0,
            "calls_per_min_peak": max((self.per_minute.get(i, 0) for i in range(minutes)),
                                      default=0),
            "set": self.written[True], "cleared": self.written[False],
            "conflicts": self.conflicts, "reconciliations": self.reconciliations,
            "closed_peak": self.closed_peak,
            "lag_s_p50": pct(lags, 50) or 0.0, "lag_s_p99": pct(lags, 99) or 0.0,
            "lag_s_max": lags[-1] if lags else 0.0,
        }
