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

"""The ResEx lab over real RDMA verbs: three Soft-RoCE guests on one bottleneck.

:class:`VerbsLab` brings up, under the lab's libvirtd (:mod:`tests.lab.harness`),
three guests booted from the RDMA image (:mod:`tests.lab.rdma`), each with
``rxe0`` on its e1000 NIC:

* ``resex-rsrv`` (``rdma-server``): the peer, serving ``ib_send_lat``,
  ``ib_write_bw`` and the verbs BenchEx; it holds a 100 % CPU reservation
  (``resex:cpu_reservation_pct``), so the market never caps the peer for the
  CPU its rxe spends receiving (in the paper's testbed it is on another
  host);
* ``resex-lat`` (``rdma-lat``), the latency-sensitive tenant (SLA in its
  libvirt metadata, the ``org.resex.latency.0`` channel): the verbs
  BenchEx client (``tool="benchex"``) or back-to-back ``ib_send_lat`` runs
  (``tool="perftest"``) to the server, reporting to the agent through the
  channel and printing every result on its console; the BenchEx client runs
  while the host's second gate is open, which it is but in the off-phases of
  an on/off run;
* ``resex-bulk`` (``rdma-bulk``, ``resex:io_class=bulk``), the interferer:
  ``ib_write_bw`` bursts to the same server while the host's gate (a TCP
  listener on the bridge address) is open.

Every tap's transmit path goes through one ifb with a tbf
(:class:`tests.lab.network.Bottleneck`): the two tenants share the link to
the server as in the paper's testbed, and rxe, which has no congestion
control (and the lab no PFC), retransmits what tbf drops. The host reads
each guest's console as it grows (one thread, each line stamped with the
host's monotonic clock), each tap's counters, and the knobs through libvirt.

A TCG guest cannot calibrate its TSC, and perftest turns cycles into time
with ``/proc/cpuinfo``'s MHz: the guests get ``tsc_early_khz`` set to the
host's TSC rate (QEMU's TCG reads the host's TSC).
"""

import logging
import os
import re
import threading
import time

import libvirt

from resex_libvirt.hypervisor import metadata as metadata_mod
from tests.lab import experiment
from tests.lab import harness
from tests.lab import network
from tests.lab import rdma
from tests.lab import sidebyside
from tests import machine

LOG = logging.getLogger(__name__)

SERVER = "resex-rsrv"
SENSITIVE = experiment.SENSITIVE
INTERFERER = experiment.INTERFERER
TAPS = {SERVER: "rvtap-srv", SENSITIVE: "rvtap-lat", INTERFERER: "rvtap-bulk"}
#: Bytes the interferer's tap may carry in half a second and count as idle (0.5 Mbit/s).
QUIET_BYTES = 32 * 1024
GATE_PORT = 5002
#: The sensitive guest's gate: its client runs while it is open (always, but in on/off runs).
VICTIM_GATE_PORT = 5003


def host_tsc_khz():
    """The host's TSC rate in kHz (``/proc/cpuinfo``'s first ``cpu MHz``), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    return int(float(line.split(":", 1)[1]) * 1000)
    except (OSError, ValueError):
        pass
    return None


def load_average():
    """The 1-minute load average of the host."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def tap_tx_bytes(tap):
    """Bytes the guest behind ``tap`` sent (the tap's ``rx_bytes``: offered, retransmits too)."""
    try:
        with open("/sys/class/net/%s/statistics/rx_bytes" % tap) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


# -- console parsing -----------------------------------------------------------------

LAT_LINE = re.compile(r"^resex-lat (.*)$")
BW_LINE = re.compile(r"^resex-bw (.*)$")


def _fields(text):
    return dict(part.split("=", 1) for part in text.split() if "=" in part)


def parse_lat(line):
    """A ``resex-lat`` console line -> dict, or None.

    BenchEx: ``{"tool": "benchex", "samples": [us, ...]}``; perftest:
    ``{"tool": "perftest", "n", "typical", "mean", "std", "p99", ...}`` (us).
    A perftest run whose times are not finite (a guest that could not
    calibrate its clock) is dropped.
    """
    m = LAT_LINE.match(line.strip())
    if not m:
        return None
    f = _fields(m.group(1))
    if f.get("tool") == "benchex":
        try:
            samples = [float(v) for v in f.get("samples", "").split(",") if v]
        except ValueError:
            return None
        return {"tool": "benchex", "samples": samples}
    if f.get("tool") == "perftest":
        try:
            rec = {k: float(f[k]) for k in ("n", "typical", "mean", "std", "p99", "max")}
        except (KeyError, ValueError):
            return None
        if not all(0 < v < float("inf") for k, v in rec.items() if k != "std"):
            return None
        rec["tool"] = "perftest"
        return rec
    return None


def parse_bw(line, burst_s):
    """A ``resex-bw`` console line -> ``{"bytes", "iters", "mbit_s"}`` (goodput), or None.

    The goodput is the burst's completed writes over its duration
    (``iters x bytes / burst_s``): perftest's own ``BW average`` turns TSC
    cycles into seconds and in duration mode on these guests often prints
    0.00.
    """
    m = BW_LINE.match(line.strip())
    if not m:
        return None
    f = _fields(m.group(1))
    try:
        size, iters = int(f["bytes"]), int(f["iters"])
    except (KeyError, ValueError):
        return None
    return {"bytes": size, "iters": iters, "mbit_s": 8.0 * size * iters / burst_s / 1e6,
            "perftest_mbit_s": float(f.get("avg_MBps", "nan")) * 8.0 * 1.048576}


class ConsoleTail:
    """Follows a guest's console file; keeps ``(host monotonic t, line)`` per line."""

    def __init__(self, path):
        self.path = path
        self.lines = []
        self._pos = 0
        self._partial = b""
        self._lock = threading.Lock()

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except OSError:
            return
        if not data:
            return
        self._pos += len(data)
        now = time.monotonic()
        chunks = (self._partial + data).split(b"\n")
        self._partial = chunks.pop()
        with self._lock:
            for chunk in chunks:
                self.lines.append((now, chunk.decode("utf-8", "replace").rstrip("\r")))

    def since(self, t0, t1=None):
        with self._lock:
            return [(t, line) for t, line in self.lines
                    if t >= t0 and (t1 is None or t <= t1)]

    def text(self):
        with self._lock:
            return "\n".join(line for _t, line in self.lines)


class Consoles:
    """A thread polling every guest's :class:`ConsoleTail` every ``period_s``."""

    def __init__(self, guests, period_s=0.2):
        self.tails = {g.name: ConsoleTail(g.console) for g in guests}
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lab-consoles", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            for tail in self.tails.values():
                tail.poll()
            self._stop.wait(self.period_s)

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)

    def wait_for(self, name, text, timeout):
        """True once guest ``name``'s console shows ``text`` (False after ``timeout`` s)."""
        return machine.wait_for(lambda: text in self.tails[name].text(), timeout, step=0.3)


# -- the gate ------------------------------------------------------------------------

class Gate:
    """The interferer's go-ahead: a TCP listener on the host that answers and hangs up.

    While open, the guest's ``nc`` check connects, reads ``go`` and returns
    at once; while closed, its connection is refused. A burst already
    started runs to its end (``burst_s``).
    """

    def __init__(self, host, port=GATE_PORT):
        self.host = host
        self.port = port
        self.accepted = 0
        self._listener = None
        self._thread = None

    def open(self):
        import socket
        if self._listener is not None:
            return self
        lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind((self.host, self.port))
        lst.listen(8)
        lst.settimeout(0.2)
        self._listener = lst
        self._thread = threading.Thread(target=self._serve, args=(lst,), name="lab-gate",
                                        daemon=True)
        self._thread.start()
        return self

    def _serve(self, lst):
        import socket
        while self._listener is lst:
            try:
                conn, _addr = lst.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            try:
                conn.sendall(b"go\n")
            except OSError:
                pass
            conn.close()

    def close(self):
        lst, self._listener = self._listener, None
        if lst is not None:
            lst.close()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None


# -- the lab -------------------------------------------------------------------------

class VerbsLab(harness.SetUpTearDown):
    """Three RDMA guests, one bottleneck, the host's gate; runs with a fresh agent each.

    ``tool`` is the sensitive tenant's latency source: ``"benchex"`` (the
    verbs BenchEx: ``size`` bytes per request, ``rate`` requests/s, every
    latency kept) or ``"perftest"`` (``ib_send_lat`` runs of ``iters``
    messages of ``size`` bytes: one summary per run). The interferer writes
    ``bulk_size`` bytes per ``ib_write_bw`` message in ``burst_s`` bursts.
    """

    def __init__(self, workdir=None, rate_mbit=40.0, queue_ms=100.0, tool="benchex",
                 size=65536, rate=50.0, iters=100, verb="send", bulk_size=65536, burst_s=5,
                 install=True, period_us=10000, memory_mib=192):
        import tempfile
        self.workdir = workdir or tempfile.mkdtemp(prefix="resex-verbs-")
        self.lab = harness.Lab(workdir=self.workdir, install=install)
        self.net = network.Bottleneck(rate_mbit=rate_mbit, latency_ms=queue_ms)
        self.install = install
        self.tool = tool
        self.size = size
        self.rate = rate
        self.iters = iters
        self.verb = verb
        self.bulk_size = bulk_size
        self.burst_s = burst_s
        self.period_us = period_us
        self.memory_mib = memory_mib
        self.gate = self.victim_gate = None
        self.consoles = None
        self.server = self.sensitive = self.interferer = None
        self.originals = {}
        self.image = None
        self.runs = []
        # The first base run's mean latency (us): what a drained victim looks like.
        self.calm_us = None

    # -- setup/teardown ------------------------------------------------------
    def setup(self, sla_us=1000.0, threshold_pct=10.0, boot_timeout=300.0, wait_s=0.0):
        self.lab.setup(wait_s=wait_s)
        # The lab lock is held from here: the bottleneck is ours until teardown.
        kernel, initrd = rdma.guest_image("rxe", install=self.install)
        self.image = rdma.manifest(initrd)
        self.net.setup()
        self.gate = Gate(self.net.host_ip, GATE_PORT)
        self.victim_gate = Gate(self.net.host_ip, VICTIM_GATE_PORT).open()
        tsc = host_tsc_khz()
        common = "resex.peer=%s resex.size=%d resex.iters=%d resex.bsize=%d resex.burst=%d%s" % (
            network.guest_ip(1), self.size, self.iters, self.bulk_size, self.burst_s,
            " tsc_early_khz=%d" % tsc if tsc else "")
        kw = {"memory_mib": self.memory_mib, "bridge": self.net.bridge}
        # The peer of the sensitive tenant (in the paper, on another host) holds a full
        # pCPU's reservation: the market may not cap it for the CPU its rxe spends.
        self.server = self.lab.guest(
            SERVER, initrd, role="rdma-server", tap=TAPS[SERVER],
            sla={"resex:cpu_reservation_pct": 100.0},
            extra_cmdline="resex.ip=%s %s" % (network.guest_ip(1), common), **kw)
        self.sensitive = self.lab.guest(
            SENSITIVE, initrd, role="rdma-lat", tap=TAPS[SENSITIVE],
            sla={"resex:latency_sla_us": sla_us,
                 "resex:interference_threshold_pct": threshold_pct},
            latency_socket=os.path.join(self.workdir, "latency-%s.sock" % SENSITIVE),
            extra_cmdline="resex.ip=%s resex.lat=%s resex.rate=%g resex.verb=%s "
                          "resex.vgate=%s:%d %s" % (
                              network.guest_ip(2), self.tool, self.rate, self.verb,
                              self.net.host_ip, VICTIM_GATE_PORT, common), **kw)
        self.interferer = self.lab.guest(
            INTERFERER, initrd, role="rdma-bulk", tap=TAPS[INTERFERER],
            sla={"resex:io_class": "bulk"},
            extra_cmdline="resex.ip=%s resex.gate=%s:%d %s" % (
                network.guest_ip(3), self.net.host_ip, GATE_PORT, common), **kw)
        for name in (SERVER, SENSITIVE, INTERFERER):
            self.net.redirect(TAPS[name])
        self.consoles = Consoles((self.server, self.sensitive, self.interferer)).start()
        for g in (self.server, self.sensitive, self.interferer):
            if not self.consoles.wait_for(g.name, "resex: rxe0 up", boot_timeout):
                raise RuntimeError("%s: rxe0 not up within %.0f s; its console ends:\n%s"
                                   % (g.name, boot_timeout, self.console_end(g.name)))
        t0 = time.monotonic()
        while not self.latencies(t0)[0]:
            if time.monotonic() - t0 > boot_timeout:
                raise RuntimeError("no latency from %s within %.0f s; its console ends:\n%s"
                                   % (SENSITIVE, boot_timeout, self.console_end(SENSITIVE)))
            time.sleep(0.5)
        self.originals = self.knobs_now()
        return self

    def console_end(self, name, lines=15):
        """The last ``lines`` lines of a guest's console (for error messages)."""
        return "\n".join(self.consoles.tails[name].text().splitlines()[-lines:])

    def teardown(self):
        if self.consoles is not None:
            self.consoles.stop()
        for gate in (self.gate, self.victim_gate):
            if gate is not None:
                gate.close()
        # The bottleneck goes before the lab lock is released (Lab.teardown).
        self.lab.lock.acquire()
        try:
            try:
                self.lab.teardown()
            finally:
                self.net.teardown()
        finally:
            while self.lab.lock.held:
                self.lab.lock.release()

    def guests(self):
        return (self.server, self.sensitive, self.interferer)

    def knobs_now(self):
        conn = libvirt.open(harness.URI)
        try:
            return {g.name: conn.lookupByName(g.name).schedulerParameters()
                    for g in self.guests()}
        finally:
            conn.close()

    def set_sla(self, latency_sla_us, threshold_pct):
        """Declare the sensitive guest's SLA in its libvirt metadata (live and config)."""
        xml = ("<sla><latency_sla_us>%.1f</latency_sla_us>"
               "<interference_threshold_pct>%g</interference_threshold_pct></sla>"
               % (latency_sla_us, threshold_pct))
        conn = libvirt.open(harness.URI)
        try:
            conn.lookupByName(SENSITIVE).setMetadata(
                libvirt.VIR_DOMAIN_METADATA_ELEMENT, xml, metadata_mod.PREFIX,
                metadata_mod.NAMESPACE,
                libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG)
        finally:
            conn.close()

    # -- what the guests report -------------------------------------------------
    def latencies(self, t0, t1=None):
        """``(samples_us, series)`` the sensitive guest printed between ``t0`` and ``t1``.

        BenchEx: every latency. perftest: each run's mean counted ``n``
        times (its typical and p99 kept in ``series``). ``series`` is
        ``[(t, n, mean_us, p99_us)]``, one per console line.
        """
        samples, series = [], []
        for t, line in self.consoles.tails[SENSITIVE].since(t0, t1):
            rec = parse_lat(line)
            if rec is None:
                continue
            if rec["tool"] == "benchex":
                vals = rec["samples"]
                if not vals:
                    continue
                samples.extend(vals)
                ordered = sorted(vals)
                series.append((t, len(vals), sum(vals) / len(vals),
                               ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]))
            else:
                samples.extend([rec["mean"]] * int(rec["n"]))
                series.append((t, int(rec["n"]), rec["mean"], rec["p99"]))
        return samples, series

    def bursts(self, t0, t1=None):
        """The interferer's ``ib_write_bw`` results printed between ``t0`` and ``t1``."""
        out = []
        for _t, line in self.consoles.tails[INTERFERER].since(t0, t1):
            rec = parse_bw(line, self.burst_s)
            if rec is not None:
                out.append(rec)
        return out

    # -- runs ------------------------------------------------------------------
    def measure(self, seconds, interfere, warmup_s=0.0, sla=None, quiesced=None, on_off=None):
        """Open the gate if ``interfere``, measure ``seconds``; the figures of the window.

        Statistics are over ``[warmup_s, seconds]`` after the gate opened;
        ``sla`` (``(sla_us, threshold_pct)``) adds the time the sensitive
        guest took to be back within it (three windows in a row).
        ``on_off`` (``(on_s, off_s)``): the sensitive guest's client runs
        ``on_s`` seconds, then none for ``off_s``, from the start; the
        result's ``phases`` are ``[(on_start, off_start)]`` in the run's
        seconds.
        """
        quiesce_s, drained = quiesced if quiesced is not None else self.quiesce()
        taps0 = {n: tap_tx_bytes(t) for n, t in TAPS.items()}
        t0 = time.monotonic()
        if interfere:
            self.gate.open()
        phases = []
        try:
            if on_off is None:
                time.sleep(seconds)
            else:
                self._alternate(t0, seconds, on_off, phases)
        finally:
            t1 = time.monotonic()
            if interfere:
                self.gate.close()
            self.victim_gate.open()
        taps1 = {n: tap_tx_bytes(t) for n, t in TAPS.items()}
        elapsed = t1 - t0
        samples, _ = self.latencies(t0 + warmup_s, t1)
        _all, series = self.latencies(t0, t1)
        bursts = self.bursts(t0 + warmup_s, t1)
        tap_mbit = {n: (8.0 * (taps1[n] - taps0[n]) / elapsed / 1e6
                        if taps0[n] is not None and taps1[n] is not None else None)
                    for n in TAPS}
        out = {"seconds": round(elapsed, 2), "warmup_s": warmup_s,
               "latency": experiment.latency_stats(samples),
               "latency_series": [(round(t - t0, 2), n, m, p) for t, n, m, p in series],
               "interferer_goodput_mbit_s": (sum(b["mbit_s"] for b in bursts) / len(bursts)
                                             if bursts else 0.0),
               "interferer_bursts": len(bursts),
               "tap_mbit_s": tap_mbit,
               "interferer_mbit_s": tap_mbit[INTERFERER] or 0.0,
               "bottleneck": self.net.stats(),
               "load_avg": load_average(),
               "quiesce_s": round(quiesce_s, 1), "drained": drained}
        if not interfere and self.calm_us is None and samples:
            self.calm_us = sum(samples) / len(samples)
        if sla is not None:
            out["sla_restored_s"] = sla_restored(out["latency_series"], *sla)
        if on_off is not None:
            out["phases"] = phases
        return out

    def _alternate(self, t0, seconds, on_off, phases):
        """Close and open the victim's gate by ``on_off`` until ``seconds`` after ``t0``."""
        on_s, off_s = on_off
        end = t0 + seconds
        while time.monotonic() < end:
            start = time.monotonic()
            self.victim_gate.open()
            time.sleep(max(0.0, min(start + on_s, end) - time.monotonic()))
            stop = time.monotonic()
            self.victim_gate.close()
            phases.append((round(start - t0, 3), round(stop - t0, 3)))
            time.sleep(max(0.0, min(stop + off_s, end) - time.monotonic()))

    def quiesce(self, idle_s=2.0, factor=1.5, timeout_s=None):
        """Wait until the last run is gone; returns ``(seconds waited, drained)``.

        A burst the gate let start runs to its end after the run (``burst_s``),
        uncapped once the agent has restored the knobs, and the sensitive
        guest's open-loop client queues every request it cannot send: a run
        that starts then measures the last one's backlog (seconds of latency
        after an uncontrolled run). So: the interferer's tap idle for
        ``idle_s``, then every console window of the last 2 s within
        ``factor`` times the first base run's mean. ``drained`` is False when
        ``timeout_s`` (``burst_s`` + 90 s) passed first.
        """
        timeout_s = timeout_s if timeout_s is not None else self.burst_s + 90.0
        start = time.monotonic()
        last = tap_tx_bytes(TAPS[INTERFERER])
        idle_since = start
        while True:
            time.sleep(0.5)
            now = time.monotonic()
            cur = tap_tx_bytes(TAPS[INTERFERER])
            if cur is None or last is None or cur - last > QUIET_BYTES:
                idle_since = now
            last = cur
            if now - idle_since >= idle_s:
                if self.calm_us is None:
                    return now - start, True
                _samples, series = self.latencies(now - 2.0, now)
                if series and all(m <= factor * self.calm_us for _t, _n, m, _p in series):
                    return now - start, True
            if now - start > timeout_s:
                LOG.warning("the last run's backlog did not drain in %.0f s", timeout_s)
                return now - start, False

    def run(self, name, policy, seconds, interfere=True, warmup_s=5.0, sla=None,
            window_reports=4, decay_half_life=0.05, link_gbps=None, on_off=None):
        """One run with a fresh ``resex-agent``: the gate opens once the agent is up.

        ``on_off``: the victim alternates (:meth:`measure`).
        """
        link_gbps = link_gbps or self.net.rate_mbit / 1000.0
        agent = experiment.AgentProcess(self.workdir, name, policy, link_gbps,
                                        window_reports=window_reports,
                                        decay_half_life=decay_half_life,
                                        period_us=self.period_us)
        poller = None
        before = self.knobs_now()
        # Drained before the agent starts: an agent up during the drain answers
        # the last run's backlog and meets the gate with the interferer cut.
        quiesced = self.quiesce()
        try:
            agent.start(vms=3)
            poller = experiment.CapPoller(self.guests(), None, 0.5).start()
            result = self.measure(seconds, interfere, warmup_s, sla, quiesced=quiesced,
                                  on_off=on_off)
            rows = poller.stop()
            poller = None
        finally:
            if poller is not None:
                poller.stop()
            agent_rc = agent.stop()
        log = agent.log()
        result.update({
            "name": name, "policy": policy, "interfere": interfere, "polls": rows,
            "agent_exit": agent_rc, "agent_log": agent.log_path,
            "claims_logged": log.count("VM %s claims latency" % self.sensitive.uuid),
            "epochs": experiment.epoch_caps(log),
            "knobs_before": before, "knobs_after": self.knobs_now(),
            "journal_left": agent.journal_left()})
        caps = [r[INTERFERER]["cap_pct"] for r in rows if INTERFERER in r]
        caps = [100.0 if c is None else c for c in caps]
        result["interferer_cap_mean_pct"] = sum(caps) / len(caps) if caps else None
        result["interferer_cap_min_pct"] = min(caps) if caps else None
        result["cap_swing_pct"] = experiment.cap_swing(result)
        self.runs.append(result)
        return result

    def static(self, cap_pct, seconds, period_us=None, warmup_s=5.0, settle_s=2.0):
        """The interferer held at ``cap_pct`` (None = uncapped) by the actuator, no agent."""
        from resex_libvirt.hypervisor import libvirt_host
        period_us = period_us or self.period_us
        hyp = libvirt_host.LibvirtHypervisor(harness.URI, backoff_min=0.2, backoff_max=2.0,
                                             qemu_period_us=period_us)
        uuid = self.interferer.uuid
        original = None
        # Drained before the cap is set, as before a policy's agent starts: the
        # last run's burst, held at a low cap, would outlast any wait.
        quiesced = self.quiesce()
        try:
            hyp.vms()
            original = hyp.get_knobs(uuid)
            hyp.set_knobs(uuid, cap_pct, None)
            time.sleep(settle_s)
            result = self.measure(seconds, True, warmup_s, quiesced=quiesced)
        finally:
            if original is not None:
                hyp.restore_knobs(uuid, original)
            hyp.close()
        result.update({"cap_pct": cap_pct, "period_us": period_us})
        return result


#: The time to SLA of a run's one-second windows (the peers table's ``protect s`` too).
sla_restored = sidebyside.sla_restored
