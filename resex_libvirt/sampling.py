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

"""Per-interval :class:`Sample` records from cumulative readings.

The agent loop and the simulator's runner both read cumulative CPU time
(ns) per VM from a :class:`~resex_libvirt.hypervisor.base.Hypervisor` and
cumulative I/O counters per VM from a
:class:`~resex_libvirt.fabric.base.FabricMonitor`; this turns two
consecutive sweeps into one ``Sample`` per VM (paper Alg. 1 lines 4-5:
GETMTUS, GETCPUPERCENT). Counter resets and wraps never give negative usage
(:class:`~resex_libvirt.counters.DeltaTracker`).
"""

import operator

import numpy as np

from resex_libvirt.market import records

_TX = operator.attrgetter("tx_bytes")

#: Rows up to which a sweep read by rows is worked out in plain Python: below
#: it numpy's fixed cost per operation is more than the arithmetic (a host of a
#: few VMs, the paper's two). The same arithmetic either way, to the last bit.
SMALL_ROWS = 8


class Sampler:
    """Turns sweeps of cumulative readings into :class:`Sample` records.

    A reading below the previous one is a reset (VM rebooted, counter
    re-plugged) and counts from zero, as in
    :class:`~resex_libvirt.counters.DeltaTracker`; wraps of narrow counters
    are the fabric monitors' business (they report 64-bit totals). This is
    on the control loop's hot path: a sweep is a few operations on whole
    columns, aligned with the market's rows (:meth:`sample_rows`).
    """

    def __init__(self):
        # The readings of the last sweep of :meth:`sample_rows`, aligned with
        # the rows of the table of version ``_version`` (names ``_names``).
        self._table = None
        self._version = None
        self._names = []
        self._rows_ts = None
        self._has = self._ns = self._tx = self._rx = np.zeros(0, dtype=np.int64)
        self._delay = None
        self._all = np.ones(0, dtype=bool)

    def sample_rows(self, ts, cpu_times, io_counters, mtu, rows, delays=None):
        """This sweep's samples as a :class:`SampleBatch` aligned with ``rows``.

        ``rows`` is the market's :attr:`~resex_libvirt.market.market.Market.layout`
        (or any table: only its ``names`` and ``version`` are read): the
        batch covers its VMs, in its order, so that the market reads whole
        columns. An adapter that reads by rows passes arrays aligned with
        them instead of the mappings: ``cpu_times`` an int64 array (-1: not
        running), ``io_counters`` a tuple ``(tx_bytes, rx_bytes)`` of int64
        arrays. A VM needs a reading in this sweep and the last to have a
        sample, and a reading below the last one counts from zero (a reset).
        ``delays`` (optional) are the VMs' cumulative vCPU run delays (ns),
        an int64 array aligned with ``rows`` or a mapping ``{vm: ns}``; the
        batch's ``delay_pct`` is their increase in percent of one pCPU (0
        where a VM has no reading in this sweep or the last).
        """
        names, version = rows.names, rows.version
        n = len(names)
        if version != self._version or rows is not self._table:
            self._realign(names, version)
            self._table = rows
        names = self._names          # a list (a layout's are a tuple)
        last_ts, self._rows_ts = self._rows_ts, ts
        dt = (ts - last_ts) if last_ts is not None else 0.0
        if (n <= SMALL_ROWS and isinstance(cpu_times, np.ndarray)
                and cpu_times.dtype == np.int64 and isinstance(io_counters, tuple)
                and io_counters[0].dtype == np.int64 and type(mtu) is int
                and (delays is None or isinstance(delays, np.ndarray))):
            return self._sample_small(ts, dt, cpu_times, io_counters, mtu, version, delays)
        if isinstance(cpu_times, np.ndarray):
            # Read by rows already (an adapter's ``cpu_times_rows``): -1 is "not running".
            present = cpu_times >= 0
            ns = np.maximum(cpu_times, 0)
        elif len(cpu_times) == n and list(cpu_times) == names:
            ns = np.fromiter(cpu_times.values(), np.int64, n)
            present = self._all
        else:
            got = [cpu_times.get(vm) for vm in names]
            present = np.array([v is not None for v in got], dtype=bool)
            ns = np.array([0 if v is None else v for v in got], dtype=np.int64)
        # Received bytes are read only if a sample's are asked for: ``rx`` is
        # an array, or the rows' IOCounters (frozen records) to read them from.
        if isinstance(io_counters, tuple):
            tx, rx = io_counters          # by rows (``counters_rows``); 0 where none
        elif len(io_counters) == n and list(io_counters) == names:
            rx = list(io_counters.values())
            tx = np.fromiter(map(_TX, rx), np.int64, n)
        else:
            rx = [io_counters.get(vm) for vm in names]
            tx = np.array([0 if c is None else c.tx_bytes for c in rx], dtype=np.int64)
        l_ns, l_tx, l_rx = self._ns, self._tx, self._rx
        if not dt > 0:
            seen = np.zeros(n, dtype=bool)
        else:
            # Every VM read (``_all``): seen where read last time (never written).
            seen = self._has if present is self._all else present & self._has
        self._has, self._ns, self._tx, self._rx = present, ns, tx, rx
        d_cpu = records.delta(ns, l_ns)
        d_tx = records.delta(tx, l_tx)
        if np.count_nonzero(seen) != n:
            unseen = ~seen
            d_cpu[unseen] = d_tx[unseen] = 0
        scale = 100.0 / (dt * 1e9) if dt > 0 else 0.0
        # The MTUs started: a ceiling division (the deltas are never negative).
        mtus = d_tx + (mtu - 1)
        mtus //= mtu
        delay_pct = None
        if delays is not None or self._delay is not None:
            delay_pct = self._delays(delays, seen, scale)
        return records.SampleBatch(self._names, version, ts, seen, d_cpu * scale, d_tx, mtus,
                                   (rx, l_rx, mtu), delay_pct)

    def _sample_small(self, ts, dt, cpu_times, io_counters, mtu, version, delays):
        """:meth:`sample_rows` of a few rows read by rows, one VM at a time in Python.

        The arithmetic of the columns (a reset counts from zero, no sample
        without a reading in this sweep and the last, the MTUs a ceiling
        division, percentages scaled by the same factor) on Python ints and
        floats, which numpy's int64 and float64 give to the last bit; only
        the batch's columns are made arrays.
        """
        n = len(self._names)
        tx, rx = io_counters
        cpu = cpu_times.tolist()
        sent = tx.tolist()
        present = [c >= 0 for c in cpu]
        seen = ([p and h for p, h in zip(present, self._has.tolist())] if dt > 0
                else [False] * n)
        last_ns, last_tx, l_rx = self._ns.tolist(), self._tx.tolist(), self._rx
        scale = 100.0 / (dt * 1e9) if dt > 0 else 0.0
        cpu_pct, d_tx, mtus = [0.0] * n, [0] * n, [0] * n
        for k in range(n):
            if seen[k]:
                used = cpu[k] - last_ns[k]     # present: cpu[k] >= 0
                cpu_pct[k] = (used if used >= 0 else cpu[k]) * scale
                moved = sent[k] - last_tx[k]
                if moved < 0:
                    moved = sent[k]
                d_tx[k] = moved
                mtus[k] = (moved + (mtu - 1)) // mtu
        self._has = np.array(present, dtype=bool)
        self._ns = (cpu_times if all(present)
                    else np.array([c if c >= 0 else 0 for c in cpu], dtype=np.int64))
        self._tx, self._rx = tx, rx
        delay_pct = None
        if delays is not None or self._delay is not None:
            now = delays if delays is not None else np.full(n, -1, dtype=np.int64)
            last, self._delay = self._delay, now
            if last is None or len(last) != n:
                delay_pct = np.zeros(n)
            else:
                waits = [0.0] * n
                for k, (d_now, d_last) in enumerate(zip(now.tolist(), last.tolist())):
                    if seen[k] and d_now >= 0 and d_last >= 0:
                        wait = d_now - d_last
                        waits[k] = (wait if wait >= 0 else d_now) * scale
                delay_pct = np.array(waits, dtype=np.float64)
        return records.SampleBatch(self._names, version, ts, np.array(seen, dtype=bool),
                                   np.array(cpu_pct, dtype=np.float64),
                                   np.array(d_tx, dtype=np.int64),
                                   np.array(mtus, dtype=np.int64), (rx, l_rx, mtu), delay_pct)

    def _delays(self, delays, seen, scale):
        """Run delay since the last sweep, percent of one pCPU (the last sweep's kept)."""
        n = len(self._names)
        if delays is None:
            now = np.full(n, -1, dtype=np.int64)
        elif isinstance(delays, np.ndarray):
            now = delays
        else:
            now = np.fromiter((delays.get(vm, -1) for vm in self._names), np.int64, n)
        last, self._delay = self._delay, now
        if last is None or len(last) != n:
            return np.zeros(n)
        d = records.delta(now, last)
        d[~seen | (now < 0) | (last < 0)] = 0
        return d * scale

    def _realign(self, names, version):
        """Carry the last readings over to a new row order (VMs joined or left)."""
        where = {vm: k for k, vm in enumerate(self._names)}
        rows = [where.get(vm, -1) for vm in names]
        take = np.array(rows, dtype=np.intp)
        known = take >= 0
        take = np.where(known, take, 0)
        if len(self._names):
            self._has = known & self._has[take]
            self._ns, self._tx = self._ns[take], self._tx[take]
            last = self._rx
            self._rx = (last[take] if isinstance(last, np.ndarray)
                        else [last[k] if k >= 0 else None for k in rows])
        else:
            n = len(names)
            self._has = np.zeros(n, dtype=bool)
            self._ns = self._tx = self._rx = np.zeros(n, dtype=np.int64)
        if self._delay is not None:
            self._delay = (np.where(known, self._delay[take], -1) if len(self._delay)
                           else np.full(len(names), -1, dtype=np.int64))
        # A copy, kept until the next change: batches share it.
        self._names = list(names)
        self._version = version
        self._all = np.ones(len(names), dtype=bool)      # never written
