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

"""SLA extra specs from Nova's compute API: optional, never blocking the agent loop.

Nova writes each flavor's extra specs into the domains it defines, so the
SLA normally comes from the domain's metadata with no API call. This lookup
is the optional extra (off by default in the agent) for instances whose
domains lack them.

On an OpenStack compute node the libvirt domain UUID is the Nova instance
UUID. Since compute API microversion 2.47 ``GET /servers/{id}`` embeds the
server's flavor, including its ``extra_specs`` (nova api-ref, "Show Server
Details": ``flavor.extra_specs``, "New in version 2.47"), so one request per
VM gives its ``resex:`` keys even if the flavor was later deleted or changed.

:class:`NovaSLASource` answers :meth:`~NovaSLASource.lookup` from a cache at
once; a missing or expired entry is queued for a background thread that asks
Nova through a keystoneauth ``Adapter`` for the compute service (built by
the caller from its own configuration: the agent loads it from ``[nova]``
with keystoneauth's loading helpers, session timeout included). Until the
answer arrives the caller uses what it has (metadata or configured
defaults); listeners are told when a VM's answer arrives so the caller can
re-resolve that VM's SLA. A failed lookup is cached for a shorter time and
logged; a 404 (not a Nova instance: a plain libvirt VM on the same host) is
cached like an answer with no specs.

The same request names the server's group: since microversion 2.71 the
server carries ``server_groups`` (the UUIDs of the groups it is in: at most
one; nova api-ref, "Show Server Details", "New in version 2.71"). The answer
gives it under :data:`SERVER_GROUP` (no ``resex:`` key: the SLA's parser
never reads it), the VM's ensemble unless its own metadata names one
(:meth:`~resex_libvirt.hypervisor.sla_layers.SLAResolver.ensemble`).
"""

import logging
import queue
import threading
import time

from resex_libvirt import sla as sla_mod

LOG = logging.getLogger(__name__)

#: The microversion asked: 2.47 embeds ``flavor.extra_specs`` in a server,
#: 2.71 adds its ``server_groups``.
MIN_MICROVERSION = "2.71"
#: The key of a lookup's answer that holds the server's group (its UUID).
SERVER_GROUP = "server_group"


def server_group_of(server):
    """The UUID of the server group a ``GET /servers/{id}`` body's server is in, or None.

    The first of ``server_groups`` that is a valid ensemble identifier
    (:func:`resex_libvirt.sla.is_ensemble`); None when it names none.
    """
    groups = (server or {}).get("server_groups")
    if not isinstance(groups, list):
        return None
    return next((g for g in groups if sla_mod.is_ensemble(g)), None)


def extra_specs_of(server):
    """``{key: value}`` of the flavor embedded in a ``GET /servers/{id}`` body's server."""
    flavor = (server or {}).get("flavor")
    if not isinstance(flavor, dict):
        return {}
    specs = flavor.get("extra_specs")
    return dict(specs) if isinstance(specs, dict) else {}


class NovaLookupFailed(Exception):
    """The compute API answered a lookup with an error."""


class NovaSLASource:
    """Cached, asynchronous ``resex:`` extra specs of Nova instances.

    ``connect`` is a zero-argument callable returning a keystoneauth
    ``Adapter`` of the compute service (or anything with its ``get(url,
    microversion=..., raise_exc=False)``), called lazily on the worker
    thread, so a slow Keystone never delays the caller; ``ttl`` is how long an answer is trusted,
    ``failure_ttl`` how long a failure is remembered before asking again.
    """

    def __init__(self, connect, ttl=600.0, failure_ttl=30.0, clock=time.monotonic):
        self._connect = connect
        self._conn = None
        self.ttl = float(ttl)
        self.failure_ttl = float(failure_ttl)
        self._clock = clock
        self._lock = threading.Lock()
        self._cache = {}          # uuid -> (expires, specs or None on failure)
        self._pending = set()
        self._queue = queue.Queue()
        self._listeners = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._work, name="nova-sla", daemon=True)
        self._thread.start()

    def subscribe(self, listener):
        """Call ``listener(uuid)`` (on the worker thread) when an answer arrives."""
        self._listeners.append(listener)

    def lookup(self, uuid):
        """The ``resex:`` specs Nova gave for ``uuid``, or ``None`` if not known (yet).

        Never blocks: a missing or expired entry is queued for the worker and
        the last known answer (if any) is returned meanwhile.
        """
        now = self._clock()
        with self._lock:
            entry = self._cache.get(uuid)
            if (entry is None or entry[0] <= now) and uuid not in self._pending:
                self._pending.add(uuid)
                self._queue.put(uuid)
        if entry is None:
            return None
        return entry[1]

    def forget(self, uuid):
        with self._lock:
            self._cache.pop(uuid, None)

    def wait_idle(self, timeout=None):
        """Block until every queued lookup is answered (for tests and tools)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._pending:
                    return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def _fetch(self, uuid):
        if self._conn is None:
            self._conn = self._connect()
        resp = self._conn.get("/servers/%s" % uuid, microversion=MIN_MICROVERSION,
                              raise_exc=False)
        if resp.status_code == 404:
            LOG.debug("instance %s unknown to Nova: no flavor extra specs", uuid)
            return {}
        if resp.status_code >= 400:
            raise NovaLookupFailed("GET /servers/%s: HTTP %d" % (uuid, resp.status_code))
        server = resp.json().get("server")
        specs = extra_specs_of(server)
        out = {k: v for k, v in specs.items() if str(k).startswith(sla_mod.PREFIX)}
        group = server_group_of(server)
        if group is not None:
            out[SERVER_GROUP] = group
        return out

    def _work(self):
        while not self._stopped.is_set():
            try:
                uuid = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if uuid is None:
                break
            try:
                specs = self._fetch(uuid)
                ttl = self.ttl
            except Exception as exc:
                # Any failure (Keystone, timeout, 5xx, bad catalogue) is isolated per VM.
                LOG.warning("Nova lookup of instance %s failed: %s", uuid, exc)
                specs, ttl = None, self.failure_ttl
            with self._lock:
                if specs is None:
                    old = self._cache.get(uuid)
                    # Keep serving the last good answer; retry after failure_ttl.
                    specs = old[1] if old is not None else None
                self._cache[uuid] = (self._clock() + ttl, specs)
                self._pending.discard(uuid)
            if specs is not None:
                for listener in list(self._listeners):
                    try:
                        listener(uuid)
                    except Exception:
                        LOG.exception("Nova SLA listener failed for %s", uuid)

    def close(self):
        """Stop the worker thread."""
        self._stopped.set()
        self._queue.put(None)
        self._thread.join(5.0)
