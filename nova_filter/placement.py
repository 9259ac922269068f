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

"""The few Placement calls ``resex-placement-sync`` makes, over a keystoneauth adapter.

The caller builds the ``Adapter`` (service type ``placement``) from its own
configuration (:mod:`resex_nova.placement_sync`); this module reads none.
Every call carries microversion :data:`MICROVERSION` (1.18: ``required=``
in provider listings; the traits API needs 1.6), goes through a
:class:`RateLimiter`, and is counted by method and status
(:attr:`PlacementClient.calls`) for the service's log.

Traits are written the way Placement asks writers to (its API reference,
"Resource provider traits"): read the provider's traits and generation,
``PUT`` the whole set with that generation, and on **409** (someone wrote
in between: nova-compute's periodic update, an operator, another tool)
read again and retry. :meth:`PlacementClient.set_trait` changes one name and
leaves every other trait as it read it (:func:`resex_nova.traits.with_trait`).
A keystoneauth failure (Placement or Keystone unreachable, a timeout, no
endpoint) and any unexpected status become one :class:`PlacementError`.
"""

import collections
import threading
import time
import urllib.parse

from keystoneauth1 import exceptions as ks_exc

from resex_nova import traits as traits_mod

#: The microversion of every call: 1.6 (traits API) and 1.18 (``required=``).
MICROVERSION = "1.18"

#: Writes of one trait that may meet a 409 before the write gives up (for now).
CONFLICT_ATTEMPTS = 5


class PlacementError(Exception):
    """Placement could not be reached, or answered with an error."""


class ProviderGone(PlacementError):
    """The resource provider does not exist (any more)."""


class Conflict(PlacementError):
    """The provider's generation moved on every attempt of a write."""


class RateLimiter:
    """A token bucket: at most ``rate`` calls a second on average, ``burst`` at once.

    :meth:`acquire` waits for a token with ``wait(seconds)`` (an event's
    ``wait``, so that a stopping service is not held), and returns False if
    ``wait`` said to stop. ``rate`` 0 means no limit.
    """

    def __init__(self, rate, burst=None, clock=time.monotonic):
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(1.0, self.rate))
        self._clock = clock
        self._tokens = self.burst
        self._at = clock()
        self._lock = threading.Lock()

    def _take(self):
        """0 when a token was taken, else the seconds until one is due."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return 0.0
            return (1.0 - self._tokens) / self.rate

    def acquire(self, wait=time.sleep):
        if self.rate <= 0.0:
            return True
        while True:
            delay = self._take()
            if delay <= 0.0:
                return True
            if wait(delay):
                return False


def _status(resp):
    return resp.status_code


class PlacementClient:
    """Placement's providers and traits, through ``adapter`` (a keystoneauth ``Adapter``).

    ``limiter`` (a :class:`RateLimiter`) paces every call; ``wait`` is what
    it waits with (the service's stop event's ``wait``). ``metrics`` (a
    :class:`resex_nova.sync_metrics.NullMetrics` or its Prometheus sink)
    is told of every call and of every wait for the limiter's token.
    """

    def __init__(self, adapter, limiter=None, wait=None, metrics=None):
        self._adapter = adapter
        self._limiter = limiter
        self._wait = wait or (lambda seconds: time.sleep(seconds) or False)
        self.metrics = metrics
        self.calls = collections.Counter()
        self._calls_lock = threading.Lock()

    def _wait_token(self, seconds):
        if self.metrics is not None:
            self.metrics.waited(seconds)
        return self._wait(seconds)

    def _request(self, method, url, body=None):
        if self._limiter is not None and not self._limiter.acquire(self._wait_token):
            raise PlacementError("%s %s: not sent, the service is stopping" % (method, url))
        kwargs = {"microversion": MICROVERSION, "raise_exc": False}
        if body is not None:
            kwargs["json"] = body
        try:
            resp = self._adapter.request(url, method, **kwargs)
        except ks_exc.ClientException as exc:
            self._count(method, type(exc).__name__)
            raise PlacementError("%s %s: %s" % (method, url, exc)) from exc
        self._count(method, resp.status_code)
        return resp

    def _count(self, method, status):
        with self._calls_lock:
            self.calls["%s %s" % (method, status)] += 1
        if self.metrics is not None:
            self.metrics.request(method, status)

    def calls_summary(self):
        """``"GET 200 x12, PUT 409 x1"``: every call made so far, by method and status."""
        with self._calls_lock:
            items = sorted(self.calls.items())
        return ", ".join("%s x%d" % item for item in items) or "none"

    @staticmethod
    def _failed(method, url, resp):
        text = (resp.text or "").strip().replace("\n", " ")
        return PlacementError("%s %s: HTTP %d %s" % (method, url, resp.status_code, text[:300]))

    def ensure_trait(self, name):
        """Create the custom trait ``name`` unless it exists (``PUT /traits/{name}``)."""
        url = "/traits/%s" % name
        resp = self._request("PUT", url)
        if _status(resp) not in (201, 204):
            raise self._failed("PUT", url, resp)

    def providers(self, name=None, required=None):
        """``{name: uuid}`` of the providers named ``name`` or having trait ``required``."""
        query = [(key, value) for key, value in (("name", name), ("required", required))
                 if value is not None]
        url = "/resource_providers" + ("?" + urllib.parse.urlencode(query) if query else "")
        resp = self._request("GET", url)
        if _status(resp) != 200:
            raise self._failed("GET", url, resp)
        return {p["name"]: p["uuid"] for p in resp.json().get("resource_providers", ())}

    def traits(self, uuid):
        """``(set of trait names, generation)`` of provider ``uuid``."""
        url = "/resource_providers/%s/traits" % uuid
        resp = self._request("GET", url)
        if _status(resp) == 404:
            raise ProviderGone("GET %s: no such resource provider" % url)
        if _status(resp) != 200:
            raise self._failed("GET", url, resp)
        body = resp.json()
        return set(body.get("traits", ())), body["resource_provider_generation"]

    def put_traits(self, uuid, names, generation):
        """Replace the traits of ``uuid`` at ``generation``: the new generation, or None on 409."""
        url = "/resource_providers/%s/traits" % uuid
        resp = self._request("PUT", url, {"traits": sorted(names),
                                          "resource_provider_generation": generation})
        if _status(resp) == 409:
            return None
        if _status(resp) == 404:
            raise ProviderGone("PUT %s: no such resource provider" % url)
        if _status(resp) != 200:
            raise self._failed("PUT", url, resp)
        return resp.json()["resource_provider_generation"]

    def set_trait(self, uuid, name, present, attempts=CONFLICT_ATTEMPTS):
        """Make ``name`` present or absent on ``uuid``, nothing else: ``(written, conflicts)``.

        ``written`` is False when the provider already was as asked (no
        ``PUT``). Each 409 re-reads the traits and the generation: a trait
        someone else added meanwhile is kept. :class:`Conflict` after
        ``attempts`` conflicts in a row.
        """
        for conflicts in range(attempts):
            current, generation = self.traits(uuid)
            wanted = traits_mod.with_trait(current, name, present)
            if wanted == current:
                return False, conflicts
            if self.put_traits(uuid, wanted, generation) is not None:
                return True, conflicts
        raise Conflict("traits of provider %s: the generation moved on %d attempts in a row"
                       % (uuid, attempts))
