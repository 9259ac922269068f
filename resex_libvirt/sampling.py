"""Per-interval :class:`Sample` records from cumulative readings.

The agent loop and the simulator's runner both read cumulative CPU time
(ns) per VM from a :class:`~resex_libvirt.hypervisor.base.Hypervisor` and
cumulative I/O counters per VM from a
:class:`~resex_libvirt.fabric.base.FabricMonitor`; this turns two
consecutive sweeps into one ``Sample`` per VM (paper Alg. 1 lines 4-5:
GETMTUS, GETCPUPERCENT). Counter resets and wraps never give negative usage
(:class:`~resex_libvirt.counters.DeltaTracker`).
"""

from resex_libvirt import counters as counters_mod
from resex_libvirt.market import records


class Sampler:
    """Turns sweeps of cumulative readings into :class:`Sample` records."""

    def __init__(self):
        self._cpu = counters_mod.DeltaTracker()
        self._tx = counters_mod.DeltaTracker()
        self._rx = counters_mod.DeltaTracker()
        self._last_ts = None

    def sample(self, ts, cpu_times, io_counters, mtu):
        """``{uuid: Sample}`` for the VMs read in both this sweep and the last.

        ``ts`` is the monotonic time of this sweep (s), ``cpu_times`` maps
        uuid -> cumulative CPU ns, ``io_counters`` maps uuid -> IOCounters,
        ``mtu`` is the link MTU in bytes. A VM seen for the first time has no
        sample yet; a VM with CPU time but no I/O counters sent nothing we
        can see.
        """
        last, self._last_ts = self._last_ts, ts
        out = {}
        dt = (ts - last) if last is not None else None
        for uuid, ns in cpu_times.items():
            d_cpu = self._cpu.update(uuid, ns)
            io = io_counters.get(uuid)
            d_tx = self._tx.update(uuid, io.tx_bytes) if io is not None else 0
            d_rx = self._rx.update(uuid, io.rx_bytes) if io is not None else 0
            if d_cpu is None or dt is None or dt <= 0:
                continue
            d_tx = d_tx or 0
            d_rx = d_rx or 0
            out[uuid] = records.Sample(
                vm=uuid, ts=ts, cpu_pct=100.0 * d_cpu / (dt * 1e9),
                tx_bytes=d_tx, tx_mtus=-(-d_tx // mtu), rx_bytes=d_rx, rx_mtus=-(-d_rx // mtu))
        seen = set(cpu_times)
        for tracker in (self._cpu, self._tx, self._rx):
            tracker.retain(seen)
        return out
