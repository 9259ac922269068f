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

"""What libvirt's domain events said since the last sweep.

The callbacks run on libvirt's event thread: they only note, under a lock,
which domains to look up again, when a domain started and the tunables
someone wrote; the sweep takes the notes at once (:meth:`DomainEvents.take`).
"""

import logging
import threading

import libvirt

LOG = logging.getLogger(__name__)


class DomainEvents:
    """The notes of libvirt's events on ``connection`` (and of ``nova_sla``'s, if any).

    ``clock``: the monotonic clock a start event is timed with.
    ``on_reconnect``: called (besides noting that every domain must be read
    again) after every reconnect.
    """

    def __init__(self, connection, clock, nova_sla=None, on_reconnect=None):
        self._clock = clock
        self._uri = connection.uri
        self._on_reconnect_hook = on_reconnect
        self._lock = threading.Lock()
        self._stale = set()
        self._everything = True
        self._tunables = []
        self._started = {}        # uuid -> clock() of its last start event
        connection.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle)
        connection.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_METADATA_CHANGE, self._on_event)
        connection.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, self._on_event)
        connection.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_TUNABLE, self._on_tunable)
        connection.on_reconnect(self._on_reconnect)
        if nova_sla is not None:
            nova_sla.subscribe(self._on_event)

    # -- libvirt's event thread: short, under the lock -------------------------

    def _on_event(self, uuid, *args):
        with self._lock:
            self._stale.add(uuid)

    def _on_lifecycle(self, uuid, event, detail=None):
        with self._lock:
            self._stale.add(uuid)
            if event == libvirt.VIR_DOMAIN_EVENT_STARTED:
                self._started[uuid] = self._clock()

    def _on_tunable(self, uuid, params):
        with self._lock:
            self._tunables.append((uuid, dict(params)))

    def _on_reconnect(self):
        LOG.info("reconnected to %s: re-reading every VM", self._uri)
        with self._lock:
            self._everything = True
        if self._on_reconnect_hook is not None:
            self._on_reconnect_hook()

    # -- the sweep -------------------------------------------------------------

    def take(self):
        """``(stale uuids, everything, [(uuid, tunables)])`` since the last call."""
        with self._lock:
            stale, self._stale = self._stale, set()
            everything, self._everything = self._everything, False
            tunables, self._tunables = self._tunables, []
        return stale, everything, tunables

    def put_back(self, stale):
        """A sweep that failed hands back the domains it was to look up."""
        with self._lock:
            self._stale.update(stale)

    def pop_started(self, uuid):
        """When ``uuid``'s last start event came (``None``: none since the last call)."""
        with self._lock:
            return self._started.pop(uuid, None)

    def started(self):
        """The VMs whose start event no channel took yet."""
        with self._lock:
            return list(self._started)

    def forget_all(self, uuids):
        """These VMs are gone: their start events, if no channel took them, are dropped.

        A start event is taken only when a latency channel is hot-plugged;
        kept for every other VM, it was one entry per guest ever started
        (the soak's churn).
        """
        with self._lock:
            for uuid in uuids:
                self._started.pop(uuid, None)
