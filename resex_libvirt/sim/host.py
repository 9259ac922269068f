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

"""The simulated host as the agent sees it.

:class:`SimHost` runs a :class:`~resex_libvirt.sim.scenario.Scenario` on the
:class:`~resex_libvirt.sim.testbed.Testbed` and presents it through the
same narrow interfaces as the real adapters, so the agent loop (and the
fast runner) drive it exactly as they drive libvirt:

* :class:`~resex_libvirt.hypervisor.base.Hypervisor`: the scenario's VMs
  that are alive now (each on its own pCPU, as in the paper, unless the
  scenario gives fewer ``pcpus``: then they contend for them), their
  cumulative CPU time and run delay (:meth:`SimHost.vcpu_times`), and a
  Xen-like ``cap``/``weight`` knob;
* :class:`~resex_libvirt.fabric.base.FabricMonitor`: cumulative transmit
  counters per VM (bytes and MTU-sized packets) and the link;
* a latency source (``sync(vms)``, ``windows()``): every completed request's
  server-side latency, as BenchEx reports it, summarised over the last
  ``window_size`` requests that are at most ``freshness_s`` old in
  simulated time (:class:`~resex_libvirt.sim.latency_buffer.LatencyBuffer`),
  for the VMs with a latency SLA (the only ones whose reports the market
  reads); a window is recomputed only when a request completed or its
  oldest request aged out, and says how many of its requests completed
  since the VM's last window was handed (``LatencyWindow.new``: 0 for the
  same window handed again or one whose oldest request aged out);
* :meth:`clock`: a :class:`SimClock` whose ``sleep_until`` advances the
  model, optionally paced against the wall clock.
"""

import dataclasses
import math
import threading
import time
import typing

import numpy as np

from resex_libvirt import exceptions
from resex_libvirt.fabric import base as fabric_base
from resex_libvirt.hypervisor import base as hyp_base
from resex_libvirt.sim import latency_buffer
from resex_libvirt.sim import testbed as testbed_mod

KNOBS = hyp_base.Knobs(driver="simulated", cap=True, weight=True)

#: Xen's default credit-scheduler weight.
DEFAULT_WEIGHT = 256

_NS = 1_000_000_000


class _Rows(typing.NamedTuple):
    """A layout of VMs for the readers by rows (the market's has ``names`` and ``version``)."""

    names: tuple
    version: int = 0


class SimClock:
    """Simulated time for the agent loop.

    ``now()`` is the model's time in seconds; ``sleep_until(deadline)``
    advances the model to ``deadline``, and when the scenario's ``realtime``
    factor is above zero also waits until ``realtime x`` the simulated
    time has passed on the wall clock since the clock was made (1.0: real
    time), waking early if ``stop_event`` is set. ``finished`` turns true
    once the run length is reached.
    """

    def __init__(self, host, realtime=0.0, sleep=None):
        self._host = host
        self.realtime = float(realtime)
        self._origin_real = time.monotonic()
        self._origin_sim = host.now()
        self._sleep = sleep

    def now(self):
        return self._host.now()

    @property
    def finished(self):
        return self._host.finished

    def sleep_until(self, deadline, stop_event=None):
        """Advance the model to ``deadline``; False if ``stop_event`` cut the pacing short."""
        self._host.advance_to(deadline)
        if self.realtime <= 0:
            return True
        target = self._origin_real + (deadline - self._origin_sim) * self.realtime
        delay = target - time.monotonic()
        if delay <= 0:
            return True
        if stop_event is not None:
            return not stop_event.wait(delay)
        (self._sleep or time.sleep)(delay)
        return True


class SimHost(hyp_base.Hypervisor, fabric_base.FabricMonitor):
    """A scenario running on the simulated testbed (see the module docstring).

    ``reports=False`` makes a host without latency reports (:meth:`windows`
    is always empty): for a run that no market reads.
    """

    capabilities = frozenset({
        hyp_base.Capability.ACTUATES, hyp_base.Capability.RUN_DELAY,
        hyp_base.Capability.GENERATION, hyp_base.Capability.CPU_BY_ROWS,
        hyp_base.Capability.DELAY_BY_ROWS, fabric_base.Capability.COUNTS_BY_ROWS})

    def __init__(self, scenario, model=None, window_size=64, freshness_s=0.05, reports=True):
        self.scenario = scenario
        self.testbed = testbed_mod.Testbed(scenario.link_bytes_per_s, seed=scenario.seed,
                                           model=model, pcpus=scenario.pcpus)
        self._lock = threading.RLock()
        self._defs = {}
        self._by_name = {}
        self._buffers = {}
        self._seen = {}
        self._window_size = window_size
        self.freshness_s = freshness_s
        for vm in scenario.vms:
            stop = None if vm.stop_s is None else round(vm.stop_s * _NS)
            self.testbed.add_vm(vm.uuid, vm.workload, start_ns=round(vm.start_s * _NS),
                                stop_ns=stop)
            self._defs[vm.uuid] = vm
            self._by_name[vm.name] = vm.uuid
            if reports and vm.sla.sensitive:
                # Only a VM with a latency SLA has windows: only its reports are kept.
                self._buffers[vm.uuid] = latency_buffer.LatencyBuffer(window_size,
                                                                      max_age=freshness_s)
                self._seen[vm.uuid] = 0
        self._sensitive = list(self._buffers)
        self._windows = {}      # uuid -> (window, values added, oldest value's time)
        # uuid -> values added when its last window was handed (``new`` counts from there).
        self._handed = dict.fromkeys(self._buffers, 0)
        self._infos = {}
        self._infos_at = None
        # Every VM of the scenario: the mapping readers adapt the readers by rows to it.
        self._every = _Rows(tuple(self.testbed.vms))
        self._rows_key = None
        self._rows_vms = []
        self._readings_key = None
        self._readings_rows = None
        self._end_ns = round(scenario.duration_s * _NS)
        self.testbed.run_until(0)

    # -- time -------------------------------------------------------------------
    def now(self):
        return self.testbed.now_ns / _NS

    @property
    def finished(self):
        return self.testbed.now_ns >= self._end_ns

    def advance_to(self, t_s):
        """Run the model up to ``t_s`` simulated seconds (never past the run's end)."""
        if not math.isfinite(t_s):
            raise ValueError("t_s must be finite")
        with self._lock:
            self.testbed.run_through((min(self._end_ns, max(0, round(t_s * _NS))),))
            self._collect()

    def advance_through(self, times_s):
        """:meth:`advance_to` each of ``times_s`` in turn, in one pass of the engine.

        The same model run (``Testbed.run_through``), for a caller that
        reads nothing between the times.
        """
        stops = []
        for t_s in times_s:
            if not math.isfinite(t_s):
                raise ValueError("t_s must be finite")
            stops.append(min(self._end_ns, max(0, round(t_s * _NS))))
        with self._lock:
            self.testbed.run_through(stops)
            self._collect()

    def clock(self, sleep=None):
        return SimClock(self, self.scenario.realtime, sleep=sleep)

    def uuid_of(self, name):
        return self._by_name[name]

    def name_of(self, uuid):
        return self._defs[uuid].name

    def _vm(self, uuid):
        vm = self.testbed.vms.get(uuid)
        if vm is None or not vm.active:
            raise exceptions.VMGone("VM %s is not running on the simulated host" % uuid)
        return vm

    # -- Hypervisor ---------------------------------------------------------------
    def vms(self):
        """The running VMs' records: each made once, the dict rebuilt when a VM starts or stops."""
        with self._lock:
            if self._infos_at != self.testbed.changes:
                out = {}
                for uuid, vm in self.testbed.vms.items():
                    if not vm.active:
                        continue
                    info = self._infos.get(uuid)
                    if info is None:
                        d = self._defs[uuid]
                        info = self._infos[uuid] = hyp_base.VMInfo(
                            uuid=uuid, name=d.name, vcpus=d.vcpus, sla=d.sla, knobs=KNOBS,
                            sla_source="scenario")
                    out[uuid] = info
                self._active, self._infos_at = out, self.testbed.changes
            return dict(self._active)

    @property
    def generation(self):
        """Moves when a VM starts or stops: the only times its records change."""
        return self.testbed.changes

    def cpu_times(self):
        """``{uuid: CPU ns}`` of the running VMs: :meth:`cpu_times_rows`, as a mapping."""
        cpu = self.cpu_times_rows(self._every)
        return {uuid: ns for uuid, ns in zip(self._every.names, cpu.tolist()) if ns >= 0}

    def vcpu_times(self):
        """``{uuid: VcpuTimes}``: each running VM's run delay (parked with work: cap, pCPUs)."""
        with self._lock:
            return {uuid: hyp_base.VcpuTimes(vm.delay_ns, vm.cpu_ns, 1)
                    for uuid, vm in self.testbed.vms.items() if vm.active}

    def _row_vms(self, rows):
        """The model's VMs in the order of ``rows`` (None: unknown), cached per rows version."""
        key = (id(rows), rows.version)
        if self._rows_key != key:
            vms = self.testbed.vms
            self._rows_vms = [vms.get(uuid) for uuid in rows.names]
            self._rows_key = key
        return self._rows_vms

    def _readings(self, rows):
        """The model's readings of the VMs of ``rows`` in its order, as read-only int64 rows.

        ``(CPU ns, run delay ns, tx bytes, rx bytes)``: -1, -1, 0 and 0 for
        a VM not running; ``int()`` truncates the link's float bytes toward
        zero, as ``astype(int64)`` would. Read in one pass and kept while the
        model stands still (same time, no VM started or stopped): the
        controller's three readers of a sweep share it.
        """
        tb = self.testbed
        key = (id(rows), rows.version, tb.now_ns, tb.changes)
        if self._readings_key != key:
            cpu, delay, tx = [], [], []
            for vm in self._row_vms(rows):
                if vm is not None and vm.state == "active":
                    cpu.append(vm.cpu_ns)
                    delay.append(vm.delay_ns)
                    tx.append(int(vm.tx_bytes))
                else:
                    cpu.append(-1)
                    delay.append(-1)
                    tx.append(0)
            # The model keeps no receive counter: a row of zeros.
            readings = np.array((cpu, delay, tx, [0] * len(cpu)), dtype=np.int64)
            readings.setflags(write=False)
            self._readings_rows, self._readings_key = readings, key
        return self._readings_rows

    def cpu_times_rows(self, rows):
        """CPU ns of the VMs of ``rows`` (the market's table) in its order; -1: not running."""
        with self._lock:
            return self._readings(rows)[0]

    def delay_times_rows(self, rows):
        """Run delay ns of the VMs of ``rows`` (the market's table) in order; -1: not running."""
        with self._lock:
            return self._readings(rows)[1]

    def set_knobs(self, uuid, cap_pct, weight):
        with self._lock:
            vm = self._vm(uuid)
            full = 100.0 * max(1, self._defs[uuid].vcpus)
            if cap_pct is not None:
                if not math.isfinite(cap_pct) or cap_pct <= 0:
                    raise exceptions.HypervisorError(
                        "cap must be a positive percentage, got %r" % (cap_pct,))
                if cap_pct >= full:
                    cap_pct = None
            if weight is not None:
                weight = int(weight)
                if not 1 <= weight <= 65535:
                    raise exceptions.HypervisorError("weight must be in 1..65535, got %r"
                                                     % (weight,))
                vm.weight = weight
            self.testbed.set_cap(uuid, cap_pct)

    def get_knobs(self, uuid):
        """Xen credit's raw parameters: ``cap`` (0 = uncapped) and ``weight``."""
        with self._lock:
            vm = self._vm(uuid)
            cap = vm.sched.knob_pct
            return {"cap": 0 if cap is None else cap, "weight": vm.weight}

    def restore_knobs(self, uuid, params):
        try:
            cap = float(params.get("cap", 0))
            weight = int(params.get("weight", DEFAULT_WEIGHT))
        except (AttributeError, TypeError, ValueError) as exc:
            raise exceptions.HypervisorError("bad saved knobs %r" % (params,)) from exc
        self.set_knobs(uuid, None if cap <= 0 else cap, weight)

    def pcpus(self):
        """The scenario's ``pcpus``: by default one per VM (paper Section VII)."""
        return self.scenario.pcpus or len(self.scenario.vms)

    # -- FabricMonitor ------------------------------------------------------------
    def counters(self, vms):
        """``{uuid: IOCounters}`` of the running VMs of ``vms``: :meth:`counters_rows` as a map."""
        mtu = self.scenario.mtu
        with self._lock:
            tx, _rx = self.counters_rows(self._every)
            running = self.cpu_times_rows(self._every)     # -1: not running
        return {uuid: fabric_base.IOCounters(sent, -(-sent // mtu))
                for uuid, sent, ns in zip(self._every.names, tx.tolist(), running.tolist())
                if ns >= 0 and uuid in vms}

    def counters_rows(self, rows):
        """``(tx_bytes, rx_bytes)`` of the VMs of ``rows`` in its order (0: not running).

        The same readings as :meth:`counters` (the model keeps no receive
        counter), aligned with the market's rows.
        """
        with self._lock:
            readings = self._readings(rows)
            return readings[2], readings[3]

    def link(self):
        return fabric_base.LinkInfo("sim0", self.scenario.link_bytes_per_s, self.scenario.mtu)

    # -- latency source -------------------------------------------------------------
    def sync(self, vms):
        """Nothing to attach: every simulated VM reports through the model."""

    def _collect(self):
        """Hand the requests completed since the last call to the buffers of the VMs with an SLA.

        The others' latencies stay in the model (:meth:`results` reads them):
        no window is ever made of them.
        """
        tb_vms = self.testbed.vms
        for uuid in self._sensitive:
            lat = tb_vms[uuid].server.latencies
            start = self._seen[uuid]
            if start == len(lat):
                continue
            new = lat[start:]
            self._buffers[uuid].extend([lat_ns / 1000.0 for _done, lat_ns in new],
                                       [done_ns / _NS for done_ns, _lat in new])
            self._seen[uuid] = len(lat)

    def windows(self):
        """``{uuid: LatencyWindow}`` of the running VMs with an SLA and fresh reports.

        A call hands the windows over: each one's ``new`` is how many of its
        requests completed since the VM's last window was handed.
        """
        with self._lock:
            now = self.now()
            out = {}
            cache = self._windows
            handed = self._handed
            for uuid in self._sensitive:
                vm = self.testbed.vms[uuid]
                if not vm.active:
                    continue
                buf = self._buffers[uuid]
                hit = cache.get(uuid)
                if hit is None or hit[1] != buf.added or buf.aged(now, hit[2]):
                    # Completions are added in time order, so the window is the
                    # buffer's fresh tail and the new values its last ones.
                    win, oldest = buf.window_since(now, buf.added - handed[uuid])
                    hit = cache[uuid] = (win, buf.added, oldest)
                elif hit[0] is not None and hit[0].new:
                    # The same window handed again: nothing in it is new.
                    hit = cache[uuid] = (dataclasses.replace(hit[0], new=0),) + hit[1:]
                if hit[0] is not None:
                    out[uuid] = hit[0]
                    handed[uuid] = buf.added
            return out

    # -- results --------------------------------------------------------------------
    def results(self):
        """Per VM (by name): latency samples (us) after the warm-up, throughput, counters."""
        with self._lock:
            warm_ns = round(self.scenario.warmup_s * _NS)
            out = {}
            for uuid, vm in self.testbed.vms.items():
                d = self._defs[uuid]
                start = max(vm.start_ns, warm_ns)
                end = self.testbed.now_ns if vm.stop_ns is None else min(vm.stop_ns,
                                                                         self.testbed.now_ns)
                alive_s = max(0.0, (end - vm.start_ns) / _NS)
                samples = [lat / 1000.0 for done, lat in vm.server.latencies if done >= start]
                out[d.name] = {
                    "uuid": uuid,
                    "latencies_us": samples,
                    # Every request, warm-up included: (completion time s, latency us).
                    "latency_log": [(done / _NS, lat / 1000.0)
                                    for done, lat in vm.server.latencies],
                    "completed": vm.server.completed,
                    "dropped": vm.server.dropped,
                    "tx_bytes": int(vm.tx_bytes),
                    "cpu_ns": vm.cpu_ns,
                    "delay_ns": vm.delay_ns,
                    "alive_s": alive_s,
                    "throughput_mb_s": (vm.tx_bytes / alive_s / 1e6) if alive_s > 0 else 0.0,
                    "cpu_pct": (100.0 * vm.cpu_ns / (alive_s * _NS)) if alive_s > 0 else 0.0,
                }
            return out

    def format_results(self):
        """The final table of a simulated run (for ``resex-agent``'s exit)."""
        from resex_libvirt.sim import run_output
        rows = []
        for name, r in self.results().items():
            stats = run_output.latency_stats(r["latencies_us"])
            rows.append([name, run_output.fmt(stats["mean_us"]), run_output.fmt(stats["p50_us"]),
                         run_output.fmt(stats["p99_us"]), run_output.fmt(stats["std_us"]),
                         "%.1f" % r["throughput_mb_s"], "%.1f" % r["cpu_pct"]])
        return run_output.table(
            "Simulated run of %s (%.1f s)" % (self.scenario.name, self.now()),
            ["VM", "mean us", "p50 us", "p99 us", "std us", "MB/s", "CPU %"], rows)
