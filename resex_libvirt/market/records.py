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

"""Plain records that flow through the market.

They carry no behaviour beyond validation of their own fields, so that the
simulator, the libvirt adapter, the fabric monitors and the latency intake
can all produce them without importing each other.
"""

import collections.abc
import dataclasses
import math
import typing

import numpy as np

from resex_libvirt.market import table as table_mod
from resex_libvirt import sla as sla_mod


class Sample(typing.NamedTuple):
    """What one VM used during one control interval.

    ``cpu_pct`` is percent of one pCPU over the interval (may exceed 100 for
    a VM with several vCPUs). ``tx_mtus`` is the number of link MTUs the VM
    sent (paper Section V-A: "we track the number of MTUs sent"). ``ts`` is
    the monotonic time at the end of the interval, in seconds; the market
    itself never reads it. ``delay_pct`` is the time the VM's vCPUs sat
    runnable without running (the host's run delay, ``vcpu.<n>.delay``), in
    percent of one pCPU over the interval; 0 where the host gives none. A
    named tuple: one is made per VM per interval.
    """

    vm: str
    ts: float
    cpu_pct: float
    tx_bytes: int = 0
    tx_mtus: int = 0
    rx_bytes: int = 0
    rx_mtus: int = 0
    delay_pct: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class LatencyWindow:
    """Summary of a VM's recent request latencies, in microseconds.

    ``new``: how many of its ``count`` requests are new since the window
    handed to the market before it (None: not known; the market then takes
    a window equal to the last one as no new requests, any other as new).
    A window handed again without new requests is not new evidence.
    ``peer``: the other end of the measured requests, as the VM's latest
    report naming one said (an address or GID, ``benchex.wire.canonical_peer``),
    or None; the market does not read it.
    """

    count: int
    mean_us: float
    std_us: float
    p99_us: float
    new: int | None = None
    peer: str | None = None

    def __post_init__(self):
        for name in ("mean_us", "std_us", "p99_us"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError("%s must be finite and >= 0, got %r" % (name, value))
        if self.count < 0:
            raise ValueError("count must be >= 0")
        if self.new is not None and not 0 <= self.new <= self.count:
            raise ValueError("new must be in [0, count], got %r" % (self.new,))


@dataclasses.dataclass(frozen=True, slots=True)
class VMSpec:
    """A VM as the market sees it: its size and its validated SLA."""

    vm: str
    vcpus: int = 1
    sla: sla_mod.SLA = dataclasses.field(default_factory=sla_mod.SLA)

    @property
    def limit_pct(self):
        return self.sla.effective_limit(self.vcpus)

    @property
    def reservation_pct(self):
        return self.sla.effective_reservation(self.vcpus)


class Decision(typing.NamedTuple):
    """The market's verdict for one VM for the next interval.

    ``cap_pct`` is percent of one pCPU for the whole VM, always within the
    VM's [reservation, limit]; a cap equal to ``100 x vCPUs`` means
    "uncapped". ``weight`` is the credit-scheduler weight (Xen default 256)
    derived from the VM's shares. ``rate`` is the VM's charging-rate
    multiplier (1.0 = the base price; IOShares raises it).
    """

    cap_pct: float
    weight: int
    rate: float = 1.0


def _rx_bytes(readings):
    """Received bytes as an int64 array: ``readings`` is one, or IOCounters (None: 0)."""
    if isinstance(readings, np.ndarray):
        return readings
    return np.array([0 if c is None else c.rx_bytes for c in readings], dtype=np.int64)


def delta(now, last):
    """``now - last``, or ``now`` where the counter went backwards (a reset)."""
    d = now - last
    back = d < table_mod.IZERO
    if np.count_nonzero(back):
        np.copyto(d, now, where=back)
    return d


class SampleBatch(collections.abc.Mapping):
    """One interval's samples as columns aligned with the market's rows: its input record.

    A read-only mapping of VM -> :class:`Sample` (made on access) for the VMs
    sampled; the market reads the columns directly (:meth:`columns_for`).
    The sampler makes one per sweep (:mod:`resex_libvirt.sampling`);
    :meth:`of` aligns a mapping of samples once, at the market's door.
    """

    @classmethod
    def of(cls, samples, layout):
        """A mapping VM -> :class:`Sample` aligned with ``layout`` (others left out).

        A sample below zero counts as zero (a sampler's never is: its deltas
        count a reset from zero).
        """
        names = list(layout.names)
        n = len(names)
        seen, cpu = [False] * n, [0.0] * n
        mtus, tx, rx, rx_mtus = [0] * n, [0] * n, [0] * n, [0] * n
        delay = [0.0] * n
        slots = {vm: k for k, vm in enumerate(names)}
        ts = 0.0
        for vm, s in samples.items():
            k = slots.get(vm)
            if k is not None:
                seen[k] = True
                cpu[k], mtus[k], tx[k] = s.cpu_pct, s.tx_mtus, s.tx_bytes
                rx[k], rx_mtus[k], ts = s.rx_bytes, s.rx_mtus, s.ts
                delay[k] = s.delay_pct
        batch = cls(names, layout.version, ts, np.array(seen, dtype=bool),
                    np.fmax(np.array(cpu, dtype=np.float64), 0.0),
                    np.maximum(np.array(tx, dtype=np.int64), 0),
                    np.maximum(np.array(mtus, dtype=np.int64), 0), None,
                    np.fmax(np.array(delay, dtype=np.float64), 0.0))
        batch._rx = (np.array(rx, dtype=np.int64), np.array(rx_mtus, dtype=np.int64))
        batch._slots = slots
        return batch

    def __init__(self, names, version, ts, seen, cpu_pct, tx_bytes, tx_mtus, receive,
                 delay_pct=None):
        self.names = names
        self.version = version
        self.ts = ts
        self.seen = seen
        self.cpu_pct = cpu_pct
        #: Run delay in percent of one pCPU (never below zero; zeros: none read).
        self.delay_pct = np.zeros(len(names)) if delay_pct is None else delay_pct
        self.tx_bytes = tx_bytes
        self.tx_mtus = tx_mtus
        # (readings, last readings, MTU): received bytes, worked out on first use.
        self._receive = receive
        self._rx = None
        self._slots = None

    @property
    def rx_bytes(self):
        return self._received()[0]

    @property
    def rx_mtus(self):
        return self._received()[1]

    def _received(self):
        if self._rx is None:
            rx, last, mtu = self._receive
            d = delta(_rx_bytes(rx), _rx_bytes(last))
            d[~self.seen] = 0
            self._rx = (d, -(-d // mtu))
        return self._rx

    def columns_for(self, version):
        """``(seen, cpu_pct, tx_mtus, tx_bytes)`` if aligned with table ``version``, else None.

        None of them is ever below zero (a counter that went back counts
        from zero), which the market relies on: it does not clamp them.
        """
        if version != self.version:
            return None
        return self.seen, self.cpu_pct, self.tx_mtus, self.tx_bytes

    def _slot(self, vm):
        if self._slots is None:
            self._slots = {vm: k for k, vm in enumerate(self.names)}
        k = self._slots.get(vm)
        if k is None or not self.seen[k]:
            raise KeyError(vm)
        return k

    def __getitem__(self, vm):
        k = self._slot(vm)
        return Sample(vm, self.ts, float(self.cpu_pct[k]), int(self.tx_bytes[k]),
                      int(self.tx_mtus[k]), int(self.rx_bytes[k]), int(self.rx_mtus[k]),
                      float(self.delay_pct[k]))

    def __contains__(self, vm):
        try:
            self._slot(vm)
        except KeyError:
            return False
        return True

    def __iter__(self):
        names = self.names
        return (names[k] for k in np.flatnonzero(self.seen).tolist())

    def __len__(self):
        return int(np.count_nonzero(self.seen))
