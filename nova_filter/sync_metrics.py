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

"""``resex-placement-sync``'s Prometheus endpoint: what it asks Placement and why.

Off unless ``[placement_sync] metrics_port`` is set; it listens on
``metrics_host`` (loopback by default). As the agent's endpoint
(:mod:`resex_agent.metrics`), it owns its ``CollectorRegistry`` (never the
process-global one) and serves it with ``prometheus_client``'s
``start_http_server`` on a daemon thread. Every name starts with
``resex_placement_sync_`` (the serving is
:class:`resex_libvirt.metrics_http.Endpoint`, shared with the agent):

``resex_placement_sync_placement_requests_total{method,outcome}``
    Placement calls by HTTP method and outcome: the status code
    (``200``, ``409``, ...) or, when no answer came, keystoneauth's
    exception (``ConnectFailure``, ``ConnectTimeout``, ...).
``resex_placement_sync_traits_set_total`` / ``resex_placement_sync_traits_cleared_total``
    ``CUSTOM_RESEX_CLOSED`` written onto / removed from a provider.
``resex_placement_sync_traits_restored_total``
    Of the traits set, those another writer had removed (nova-compute's
    update, an operator), found at a reconciliation.
``resex_placement_sync_generation_conflicts_total``
    409s on a trait write (the provider's generation moved on), each
    followed by a re-read and a retry.
``resex_placement_sync_reconciliations_total{outcome}``
    Reconciliation passes, ``success`` or ``failure`` (Placement failed).
``resex_placement_sync_reconcile_duration_seconds``
    A histogram of how long the successful passes took (listings and writes).
``resex_placement_sync_last_reconcile_timestamp_seconds``
    Unix time of the last successful reconciliation (0 before the first).
``resex_placement_sync_seconds_since_last_reconcile``
    The same as an age, computed when scraped (NaN before the first): alert
    when it exceeds a few ``reconcile_interval``.
``resex_placement_sync_hosts_without_provider``
    Hosts on the board with no resource provider under their name (their
    trait is not kept: see ``provider_names``).
``resex_placement_sync_placement_failing``
    1 while Placement fails (the service is backing off), else 0.
``resex_placement_sync_rate_limit_waits_total``
    Times a call waited for the token bucket (``max_calls_per_second``).
``resex_placement_sync_rate_limit_wait_seconds_total``
    Seconds the calls were made to wait for it.
"""

import math
import threading
import time

import prometheus_client

from resex_libvirt import metrics_http

PREFIX = "resex_placement_sync_"

#: Buckets of the reconciliation's duration, in seconds (two listings and a
#: few writes take milliseconds; a paced, large region seconds).
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    float("inf"))


class NullMetrics:
    """The sink when the endpoint is off: every observation does nothing."""

    def start(self):
        return None

    def close(self):
        pass

    def request(self, method, outcome):
        """One Placement call: ``method`` and its status code or exception name."""

    def waited(self, seconds):
        """One wait of ``seconds`` for the rate limiter's token."""

    def trait_written(self, closed):
        """``CUSTOM_RESEX_CLOSED`` set (``closed``) or cleared on one provider."""

    def restored(self):
        """A trait another writer removed was set again."""

    def conflicts(self, count):
        """``count`` 409s met by a trait write."""

    def reconciled(self, seconds, ok, now=None):
        """A reconciliation ended, successfully (``ok``) or not, after ``seconds``."""

    def without_provider(self, count):
        """``count`` hosts have no resource provider under their name."""

    def failing(self, failing):
        """Placement fails (True) or answers (False)."""


class SyncMetrics(NullMetrics):
    """The service's metrics on ``host``:``port``, in a registry of their own."""

    def __init__(self, host="127.0.0.1", port=0, registry=None, clock=time.time):
        self.host = host
        self.port = port
        self.registry = (registry if registry is not None
                         else prometheus_client.CollectorRegistry())
        self._clock = clock
        self._endpoint = metrics_http.Endpoint(host, port, self.registry,
                                               "[placement_sync] metrics:")
        self._lock = threading.Lock()
        self._last_ok = None
        self._make(self.registry)

    def _make(self, r):
        C, G = prometheus_client.Counter, prometheus_client.Gauge
        self.requests = C(PREFIX + "placement_requests", "Placement calls by method and "
                          "outcome (status code, or the exception when none came)",
                          ("method", "outcome"), registry=r)
        self.set = C(PREFIX + "traits_set", "CUSTOM_RESEX_CLOSED written onto a provider",
                     registry=r)
        self.cleared = C(PREFIX + "traits_cleared",
                         "CUSTOM_RESEX_CLOSED removed from a provider", registry=r)
        self.restores = C(PREFIX + "traits_restored", "Traits set again after another "
                          "writer removed them", registry=r)
        self.conflict = C(PREFIX + "generation_conflicts", "409s on a trait write, each "
                          "re-read and retried", registry=r)
        self.passes = C(PREFIX + "reconciliations", "Reconciliation passes by outcome",
                        ("outcome",), registry=r)
        for outcome in ("success", "failure"):
            self.passes.labels(outcome)
        self.duration = prometheus_client.Histogram(
            PREFIX + "reconcile_duration_seconds", "Duration of the successful "
            "reconciliations", buckets=DURATION_BUCKETS, registry=r)
        self.last = G(PREFIX + "last_reconcile_timestamp_seconds",
                      "Unix time of the last successful reconciliation (0: none yet)",
                      registry=r)
        self.age = G(PREFIX + "seconds_since_last_reconcile", "Seconds since the last "
                     "successful reconciliation (NaN: none yet)", registry=r)
        self.age.set_function(self._age)
        self.missing = G(PREFIX + "hosts_without_provider", "Hosts on the board with no "
                         "resource provider under their name", registry=r)
        self.down = G(PREFIX + "placement_failing", "1 while Placement fails", registry=r)
        self.waits = C(PREFIX + "rate_limit_waits", "Calls that waited for the token "
                       "bucket (max_calls_per_second)", registry=r)
        self.wait_seconds = C(PREFIX + "rate_limit_wait_seconds", "Seconds spent waiting "
                              "for the token bucket", registry=r)

    def _age(self):
        with self._lock:
            last = self._last_ok
        return math.nan if last is None else max(0.0, self._clock() - last)

    # -- serving -------------------------------------------------------------------
    def start(self):
        """Listen and serve on a daemon thread; returns the bound ``(address, port)``."""
        return self._endpoint.start()

    @property
    def address(self):
        """``(host, port)`` the endpoint is bound to (``None`` before :meth:`start`)."""
        return self._endpoint.address

    def close(self):
        """Stop serving and join the server thread."""
        self._endpoint.close()

    # -- observations -----------------------------------------------------------------
    def request(self, method, outcome):
        self.requests.labels(method, str(outcome)).inc()

    def waited(self, seconds):
        self.waits.inc()
        self.wait_seconds.inc(max(0.0, seconds))

    def trait_written(self, closed):
        (self.set if closed else self.cleared).inc()

    def restored(self):
        self.restores.inc()

    def conflicts(self, count):
        if count:
            self.conflict.inc(count)

    def reconciled(self, seconds, ok, now=None):
        self.passes.labels("success" if ok else "failure").inc()
        if not ok:
            return
        self.duration.observe(seconds)
        now = self._clock() if now is None else now
        with self._lock:
            self._last_ok = now
        self.last.set(now)

    def without_provider(self, count):
        self.missing.set(count)

    def failing(self, failing):
        self.down.set(1 if failing else 0)


def from_conf(conf):
    """The endpoint ``[placement_sync]`` asks for (not started), or a :class:`NullMetrics`."""
    group = conf.placement_sync
    if not group.metrics_port:
        return NullMetrics()
    return SyncMetrics(group.metrics_host, group.metrics_port)
