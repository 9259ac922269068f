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

from resex_libvirt.market import records


class Sampler:
    """Turns sweeps of cumulative readings into :class:`Sample` records.

    A reading below the previous one is a reset (VM rebooted, counter
    re-plugged) and counts from zero, as in
    :class:`~resex_libvirt.counters.DeltaTracker`; wraps of narrow counters
    are the fabric monitors' business (they report 64-bit totals). This is
    on the control loop's hot path, so the per-VM work is inlined.
    """

    def __init__(self):
        self._last = {}
        self._last_ts = None

    def sample(self, ts, cpu_times, io_counters, mtu):
        """``{uuid: Sample}`` for the VMs read in both this sweep and the last.

        ``ts`` is the monotonic time of this sweep (s), ``cpu_times`` maps
        uuid -> cumulative CPU ns, ``io_counters`` maps uuid -> IOCounters,
        ``mtu`` is the link MTU in bytes. A VM seen for the first time has no
        sample yet; a VM with CPU time but no I/O counters sent nothing we
        can see.
        """
        last_ts, self._last_ts = self._last_ts, ts
        dt = (ts - last_ts) if last_ts is not None else 0.0
        scale = 100.0 / (dt * 1e9) if dt > 0 else None
        last_all = self._last
        if len(last_all) != len(cpu_times) or any(k not in cpu_times for k in last_all):
            for key in [k for k in last_all if k not in cpu_times]:
                del last_all[key]
        out = {}
        new_sample = tuple.__new__
        sample_cls = records.Sample
        get_io = io_counters.get
        get_last = last_all.get
        for uuid, ns in cpu_times.items():
            io = get_io(uuid)
            if io is None:
                tx = rx = 0
            else:
                tx = io.tx_bytes
                rx = io.rx_bytes
            last = get_last(uuid)
            last_all[uuid] = (ns, tx, rx)
            if last is None or scale is None:
                continue
            l_ns, l_tx, l_rx = last
            d_cpu = ns - l_ns if ns >= l_ns else ns
            d_tx = tx - l_tx if tx >= l_tx else tx
            d_rx = rx - l_rx if rx >= l_rx else rx
            # tuple.__new__ is Sample(...) without the named tuple's Python-level
            # constructor: this loop runs for every VM every millisecond.
            out[uuid] = new_sample(sample_cls, (uuid, ts, d_cpu * scale, d_tx,
                                                -(-d_tx // mtu), d_rx, -(-d_rx // mtu)))
        return out
