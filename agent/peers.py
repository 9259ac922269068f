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

"""The agent's bytes per peer (``[fabric] count_peers``): each VM's send rate by destination.

A thread of its own (``nft`` is a process to run: never on the control
loop) keeps the kernel counting the VMs' taps
(:class:`resex_libvirt.fabric.peers.PeerCounter`), reads the totals every
period and turns them into rates: per VM, its :data:`TOP` busiest
destinations and the rest as ``other``. The loop hands it the taps each
epoch (:meth:`PeerRates.set_taps`, a whole dict replaced) and reads the
last rates (:meth:`PeerRates.rates`) for the metrics
(``resex_vm_peer_transmit_bytes_per_second``). A failure (``nft``
missing, a refused table, no CAP_NET_ADMIN) is logged once per message
and counted; the next period tries again. :meth:`PeerRates.close` deletes
the table.
"""

import logging
import threading
import time

LOG = logging.getLogger(__name__)

#: The shortest sampling period (s): two ``nft`` runs a period.
PERIOD_S = 5.0
#: Destinations kept per VM (the busiest); the rest are summed as ``other``.
TOP = 8
OTHER = "other"


class PeerRates:
    """Samples ``counter`` every ``period_s`` seconds on its own thread (module docstring)."""

    def __init__(self, counter, period_s, top=TOP, clock=time.monotonic):
        self.counter = counter
        self.period_s = float(period_s)
        self.top = int(top)
        self._clock = clock
        self._taps = {}             # tap -> vm, replaced whole by the loop
        self._prev = None           # (when, {(tap, peer): bytes})
        self._rates = {}            # vm -> {peer: bytes/s}, replaced whole
        self._said = None
        #: Failed samples since the start, and the last failure's message.
        self.errors = 0
        self.last_error = None
        self._stop = threading.Event()
        self._thread = None

    def set_taps(self, taps):
        """``{tap: vm}``: the taps to count from the next sample on."""
        self._taps = dict(taps)

    def rates(self):
        """``{vm: {peer: bytes a second}}`` over the last period (``other``: the rest)."""
        return self._rates

    def start(self):
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="resex-peer-bytes",
                                            daemon=True)
            self._thread.start()
        return self

    def close(self):
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(10.0)
        self.counter.close()

    def _run(self):
        while not self._stop.wait(self.period_s):
            self.sample()

    def sample(self):
        """Sync the taps, read the totals, compute the rates; never raises."""
        taps = self._taps
        try:
            self.counter.sync(taps)
            totals = self.counter.totals()
        except Exception as exc:
            self.errors += 1
            self.last_error = str(exc)
            if self._said != self.last_error:
                self._said = self.last_error
                LOG.warning("bytes per peer not counted: %s (tried again every %g s)",
                            exc, self.period_s)
            return
        if self._said is not None:
            LOG.info("bytes per peer counted again")
            self._said = None
        now = self._clock()
        flat = {(tap, peer): n for tap, peers in totals.items() for peer, n in peers.items()}
        prev, self._prev = self._prev, (now, flat)
        if prev is None or now <= prev[0]:
            return
        self._rates = rates_by_vm(prev[1], flat, now - prev[0], taps, self.top)


def rates_by_vm(before, after, seconds, taps, top=TOP):
    """``{vm: {peer: bytes/s}}`` between two ``{(tap, peer): bytes}`` totals.

    A total that fell (its element expired and came back, or the table was
    written anew) counts from zero; a tap not in ``taps`` (``{tap: vm}``)
    is left out; per VM the ``top`` busiest peers, the rest as ``other``.
    """
    per_vm = {}
    for (tap, peer), n in after.items():
        vm = taps.get(tap)
        if vm is None:
            continue
        old = before.get((tap, peer), 0)
        delta = n - old if n >= old else n
        if delta > 0:
            peers = per_vm.setdefault(vm, {})
            peers[peer] = peers.get(peer, 0) + delta
    out = {}
    for vm, peers in per_vm.items():
        ranked = sorted(peers.items(), key=lambda kv: (-kv[1], kv[0]))
        kept = {peer: n / seconds for peer, n in ranked[:top]}
        rest = sum(n for _peer, n in ranked[top:])
        if rest:
            kept[OTHER] = rest / seconds
        out[vm] = kept
    return out
