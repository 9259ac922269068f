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

"""The agent's control loop (doc/source/architecture.rst, "The control loop").

Every interval: discover VMs (adopt new ones, drop vanished ones), sample
each VM's CPU and I/O, charge and decide in the market, and write a knob
only when it moved beyond the deadband. Every epoch: replenish, build the
host report once, log one summary line, hand the report to the publisher
and one :class:`EpochRecord` to the metrics sink. Absolute deadlines
(``next += interval``), a warning when late; one VM or one call failing
never stops the loop, and nothing outside makes it wait: the board is
written by a background publisher (:mod:`resex_agent.publisher`) and, on
libvirt, every hypervisor call has a bounded wait (:mod:`resex_agent.watchdog`).

Everything outside comes in through narrow interfaces, so the same loop
drives the simulated host and libvirt: a ``Hypervisor``, a
``FabricMonitor``, latency sources (``sync(vms)``, ``windows()``), an
optional board (``publish(report)``), an optional journal
(:class:`resex_agent.journal.Journal`), a clock (``now()``, ``sleep_until()``,
``finished``) and an optional metrics sink (``observe_interval(IntervalRecord)``,
``observe_epoch(EpochRecord)``, ``start()``, ``close()``). The :class:`Agent`
starts the parts that have work of their own once (:meth:`Agent.start`: the
metrics endpoint, the journal's restore, the latency ``intake``) and, at
:meth:`Agent.shutdown`, closes them all through the one exit stack they were
built with (:class:`resex_agent.builder.Parts`). The hypervisor's optional
calls are those its ``capabilities`` declare
(:class:`resex_libvirt.hypervisor.base.Capability`), never probed.
"""

import contextlib
import dataclasses
import logging
import threading
import time

import numpy as np

from resex_agent import publisher as publisher_mod
from resex_agent import status as status_mod
import resex_libvirt
from resex_libvirt.board import ensembles as ensembles_mod
from resex_libvirt.board import evidence as evidence_mod
from resex_libvirt.board import remote_claims as remote_mod
from resex_libvirt.board import report as report_mod
from resex_libvirt import control
from resex_libvirt import exceptions
from resex_libvirt.hypervisor import base as hyp_base

LOG = logging.getLogger(__name__)

#: Epoch summaries kept in memory (the last minute at the default epoch).
KEEP_SUMMARIES = 60

#: VMs named on the epoch's INFO line; the others are counted (all at DEBUG).
SUMMARY_TOP = 5

#: Seconds between two attempts of SIGTERM's restore while the hypervisor is unavailable.
RESTORE_RETRY_S = 0.25
#: Seconds SIGTERM's restore may take in all when unset (then the journal keeps the rest).
SHUTDOWN_TIMEOUT_S = 10.0


class StartFailed(Exception):
    """A part of the agent could not start; ``step`` says which, the cause is chained."""

    def __init__(self, step, cause):
        super().__init__("%s: %s" % (step, cause))
        self.step = step
        self.cause = cause


@dataclasses.dataclass(frozen=True)
class IntervalRecord:
    """What one control interval hands to the metrics sink.

    ``samples``, ``decisions``, ``windows`` and ``interference`` are the
    interval's own mappings (never mutated afterwards). ``vms`` is the live
    ``{uuid: VMRecord}`` of the controller (read-only for consumers: names,
    SLA source, knobs driver, monitor-only); ``balance(uuid)`` reads a VM's
    Resos left as of the interval (:meth:`Market.balance_reader`), and
    ``reason(uuid)`` why the policy set its cap (one of
    :data:`resex_libvirt.market.policy.REASONS`). ``sent`` is
    ``(uuids, mtus, bytes)``: what each VM sent since it was adopted, a copy
    of the controller's run tallies (:meth:`Controller.sent`); a record
    without it leaves the last one in force. ``min_cap_pct`` is the market's
    ``[market] min_cap_pct`` in force (with each VM's reservation and limit,
    the lowest cap the policy may set); ``consent`` (optional, a
    :class:`resex_libvirt.sla.Consent`) the operator's rule that holds a VM
    that did not opt in at its limit.
    """

    samples: dict
    decisions: dict
    windows: dict
    interference: dict
    interval_s: float
    vms: dict
    balance: object
    reason: object = None
    sent: tuple | None = None
    min_cap_pct: float = 0.0
    consent: object = None


@dataclasses.dataclass(frozen=True)
class Health:
    """Counters of what went wrong so far (monotonic totals, for metrics)."""

    late: int = 0
    skipped_intervals: int = 0
    held_intervals: int = 0
    lateness_s: float = 0.0
    publish_attempts: int = 0
    publish_failures: int = 0
    reports_superseded: int = 0
    journal_write_errors: int = 0
    journal_unsaved: int = 0
    hypervisor_timeouts: int = 0
    hypervisor_available: bool = True
    intake_rejected: dict = dataclasses.field(default_factory=dict)
    status_sent: int = 0
    status_dropped: int = 0
    remote_victims: int = 0
    remote_claims_ignored: dict = dataclasses.field(default_factory=dict)
    link_factors: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class EpochRecord:
    """What one closed epoch hands to the metrics sink: built once, used by all."""

    epoch: int
    ts: float
    summary: object
    report: object
    congestion_index_pct: float
    intervals: int
    health: Health
    host: str = ""
    epoch_s: float = 0.0
    #: ``{vm: {peer: bytes/s}}`` (``[fabric] count_peers``), else empty.
    peer_rates: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class LoopSettings:
    """What the loop needs from the configuration, resolved."""

    host: str
    interval_s: float
    intervals_per_epoch: int
    max_epochs: int = 0
    #: Write the board from a thread of its own (real time), or inline, every
    #: epoch's report in order (a simulated host running faster than real time).
    background_publish: bool = False
    #: Run the market and publish, log the caps it would write, write none.
    observe_only: bool = False


class Agent:
    """One host's ResEx agent: built with its parts, started, run and shut down once.

    ``intake`` (optional) is the latency source with work of its own (a
    socket to bind, a thread): started by :meth:`start`, its rejections
    counted in :meth:`health`; it is one of ``latency_sources`` too. It
    also carries each VM's status back down its channel: every
    ``status_interval_s`` (``[latency] status_interval_s``; 0: never) at most,
    the loop hands it the statuses of the VMs whose channel is connected
    (:mod:`resex_agent.status`).
    ``publisher`` (optional, :class:`resex_agent.publisher.Publisher`) writes the
    host reports; without one, a ``board`` is given a publisher of the
    agent's own. ``closing`` (optional, a :class:`contextlib.ExitStack`)
    closes the parts, each once, at :meth:`shutdown`: the stack they were
    built with (:attr:`resex_agent.builder.Parts.closing`); without one, the caller
    closes them. ``deadband_pct`` is handed to the controller, its one
    owner. ``watchdog`` (optional, :class:`resex_agent.watchdog.Watchdog`) is the
    hypervisor calls' watchdog, read for the health counters; ``reloader``
    (optional) is called with the agent when a reload was requested
    (SIGHUP), before the next interval. ``consent`` (optional, a
    :class:`resex_libvirt.sla.Consent`) maps a VM's SLA, project and flavor
    to the SLA the market applies.
    ``remote`` (optional, :class:`resex_agent.remote.RemoteVictims`): the
    claims other hosts make on this host's VMs; a latency source, the
    controller's SLA overlay, started by :meth:`start` and told the port's
    load every epoch (its evidence rule).
    """

    def __init__(self, settings, market, hypervisor, fabric, latency_sources=(),
                 board=None, journal=None, clock=None, metrics=None, publish_policy=None,
                 watchdog=None, reloader=None, shutdown_timeout_s=SHUTDOWN_TIMEOUT_S,
                 pressure=None, intake=None, publisher=None, closing=None, deadband_pct=1.0,
                 consent=None, status_interval_s=0.0, remote=None, peers=None):
        self.settings = settings
        self.market = market
        self.hypervisor = hypervisor
        self.fabric = fabric
        self.latency_sources = list(latency_sources)
        self.remote = remote
        #: The VMs' bytes per peer (:class:`resex_agent.peers.PeerRates`), or None.
        self.peers = peers
        if remote is not None and remote not in self.latency_sources:
            self.latency_sources.append(remote)
        self.intake = intake
        self.journal = journal
        self.clock = clock
        self.metrics = metrics
        self.watchdog = watchdog
        self.reloader = reloader
        self._closing = closing if closing is not None else contextlib.ExitStack()
        if publisher is None and board is not None:
            # The agent's own: closed by the agent, the publisher before its board.
            publisher = publisher_mod.Publisher(
                board, publish_policy, background=settings.background_publish)
            self._closing.callback(board.close)
            self._closing.callback(publisher.close)
        #: The :class:`resex_agent.publisher.Publisher` of the host reports, or ``None``.
        self.publisher = publisher
        self._started = False
        self._shut = False
        self.controller = control.Controller(
            market, hypervisor, fabric, self.latency_sources, journal=journal,
            deadband_pct=deadband_pct, consent=consent, observe_only=settings.observe_only,
            overlay=remote.slas if remote is not None else None)
        self._run_delay = (hypervisor is not None and
                           hyp_base.Capability.RUN_DELAY in hypervisor.capabilities)
        self.ticks = 0
        self.epochs = 0
        self.late = 0
        self.summaries = []
        self.skipped_intervals = 0
        self.held_intervals = 0
        self._in_force = {}         # uuid -> the cap the written knobs express
        self._claim_new = {}        # uuid -> requests new since the last report (its claim's)
        self._epoch = _EpochCounts()
        self.lateness_s = 0.0
        self._stop = threading.Event()
        self._reload = threading.Event()
        self.version = resex_libvirt.version()
        self.shutdown_timeout_s = shutdown_timeout_s
        self.last_report = None
        self.run_delays = evidence_mod.RunDelayMeter()
        #: The VMs' cgroup CPU pressure (a :class:`~resex_libvirt.hypervisor.psi.DomainPressure`),
        #: or None; why it could not be read is logged once per VM.
        self.pressure = pressure
        self.pressure_meter = evidence_mod.PressureMeter()
        self._pressure_said = set()
        #: When the VMs' statuses are due (:mod:`resex_agent.status`), or None: none are written.
        self._status = None
        self.set_status_interval(status_interval_s)

    @property
    def vms(self):
        """``{uuid: VMRecord}`` of the VMs under control."""
        return self.controller.vms

    @property
    def last_decisions(self):
        return self.controller.last.decisions

    @property
    def last_windows(self):
        return self.controller.last.windows

    def link(self):
        return self.controller.link()

    # -- lifecycle -------------------------------------------------------------
    def start(self):
        """Start the parts, once, in order: the metrics endpoint, the journal, the intake.

        The journal step is what a start after a crash does before
        controlling anything: the knobs operators set live are adopted
        (the restore must not undo them), then the originals the journal
        still holds are written back. A step that fails shuts the agent down
        (:meth:`shutdown`) and raises :class:`StartFailed`. Calling it again
        does nothing, after :meth:`shutdown` it raises; :meth:`run` calls it.
        """
        if self._shut:
            raise StartFailed("starting the agent", "it was shut down")
        if self._started:
            return
        self._started = True
        steps = []
        if self.metrics is not None:
            steps.append(("starting the metrics endpoint", self.metrics.start))
        if self.journal is not None:
            steps.append(("restoring the journal", self._reconcile))
        if self.intake is not None:
            steps.append(("starting the latency intake", self.intake.start))
        if self.remote is not None:
            steps.append(("following the board's remote claims", self.remote.start))
        if self.peers is not None:
            steps.append(("counting bytes per peer", self.peers.start))
        for step, start in steps:
            try:
                start()
            except Exception as exc:
                self.shutdown()
                raise StartFailed(step, exc) from exc

    def _reconcile(self):
        self.hypervisor.adopt_operator_values(self.journal.operator_values())
        self.journal.reconcile(self.hypervisor)

    # -- control ---------------------------------------------------------------
    def stop(self):
        """Ask the loop to stop after the current interval (signal-safe)."""
        self._stop.set()

    def request_reload(self):
        """Ask the loop to call ``reloader`` before its next interval (signal-safe)."""
        self._reload.set()

    @property
    def stopping(self):
        return self._stop.is_set()

    def run(self):
        """Run until stopped, the clock finishes or ``max_epochs`` epochs passed.

        Starts the agent first if :meth:`start` was not called.
        """
        self.start()
        s = self.settings
        LOG.info("agent on %s: interval %.4f s, %d intervals per epoch, policy %s%s",
                 s.host, s.interval_s, s.intervals_per_epoch, self.market.policy.name,
                 ", observe-only (no knob is written)" if s.observe_only else "")
        self.controller.prime(self.clock.now())
        deadline = self.clock.now() + s.interval_s
        while not self._stop.is_set():
            if self._reload.is_set():
                self._reload.clear()
                if self.reloader is not None:
                    try:
                        self.reloader(self)
                    except Exception:
                        LOG.exception("reload failed; keeping the previous settings")
            self.run_interval()
            if self.ticks % s.intervals_per_epoch == 0:
                self.run_epoch()
                if s.max_epochs and self.epochs >= s.max_epochs:
                    break
            if self.clock.finished:
                break
            now = self.clock.now()
            if now > deadline + s.interval_s:
                self.late += 1
                missed = int((now - deadline) / s.interval_s)
                self.skipped_intervals += missed
                self.lateness_s = now - deadline
                LOG.warning("control loop late by %.1f ms; skipping %d interval(s)",
                            (now - deadline) * 1000.0, missed)
                deadline += missed * s.interval_s
            self.clock.sleep_until(deadline, self._stop)
            deadline += s.interval_s

    # -- one interval ----------------------------------------------------------
    def run_interval(self):
        """Sample, charge, decide, actuate (:class:`resex_libvirt.control.Controller`)."""
        self.ticks += 1
        interval = self.controller.step(self.clock.now())
        self._epoch.count(interval is not None, self.controller.skipped)
        if interval is None:
            self.held_intervals += 1    # knobs held
            return
        if interval.windows:
            self._count_claim_requests(interval.windows)
        if self._status is not None and self._status.due(self.clock.now()):
            try:
                channels = self.intake.channels()
                if channels:
                    self.intake.post_status(self.statuses(channels))
            except Exception:
                LOG.exception("could not hand the VMs' statuses to the latency intake")
        if self.metrics is None:
            return
        try:
            self.metrics.observe_interval(IntervalRecord(
                interval.samples, interval.decisions, interval.windows,
                self.market.last_interference, self.settings.interval_s, self.controller.vms,
                self.market.balance_reader(), self.reason, self.controller.sent(),
                self.market.params.min_cap_pct, self.controller.consent))
        except Exception:
            LOG.exception("metrics update failed")

    # -- one epoch -------------------------------------------------------------
    def _count_claim_requests(self, windows):
        """Add up, per VM whose window names a peer, its requests new since the last report."""
        acc = self._claim_new
        for vm, win in windows.items():
            if win.peer and win.new:
                acc[vm] = acc.get(vm, 0) + win.new

    def _remote_claims(self, addresses):
        """The host's victims' remote claims (:func:`~.remote_claims.of_windows`).

        Each says how many of its window's requests are new since the last
        report (counted interval by interval), then the count starts again.
        """
        new, self._claim_new = self._claim_new, {}
        windows = self.controller.last.windows
        if not windows:
            return ()
        specs = {vm: spec.sla for vm, spec in self.market.specs.items() if spec.sla.sensitive}
        return remote_mod.of_windows(specs, windows, addresses, new)

    def _ensembles(self):
        """The host's ensemble members' entries (:func:`~.ensembles.of_windows`).

        Each member's own SLA and own window: a window the remote source
        handed the market (another member's, or a remote victim's) is
        never published as this member's.
        """
        windows = self.controller.last.windows
        members = {uuid: rec.info.ensemble for uuid, rec in self.vms.items()
                   if rec.info.ensemble and rec.info.sla.sensitive}
        if not windows or not members:
            return ()
        handed = set(self.remote.handed()) if self.remote is not None else set()
        specs = {uuid: self.vms[uuid].info.sla for uuid in members}
        own = {uuid: win for uuid, win in windows.items() if uuid not in handed}
        return ensembles_mod.of_windows(specs, own, members)

    def run_epoch(self):
        """Replenish, build the report once, log, publish, feed metrics. Never raises.

        The epoch's counts (:class:`_EpochCounts`) are closed once, here:
        the report's state and the summary line's held intervals read the
        same figures, and the report's congestion index is computed once
        for the line and the metrics.
        """
        self.epochs += 1
        summary = self.market.end_epoch()
        self.summaries.append(summary)
        del self.summaries[:-KEEP_SUMMARIES]
        now = time.time()
        state, skipped = self._epoch.close()
        try:
            addresses = {uuid: rec.info.addresses for uuid, rec in self.vms.items()
                         if rec.info.addresses}
            report = report_mod.HostReport.from_summary(
                self.settings.host, now, summary, self.link().capacity_bytes_per_s,
                self.version, taxes_interferers=self.market.policy.taxes_interferers,
                run_delays=self._epoch_run_delays(), state=state,
                projects={uuid: rec.info.project for uuid, rec in self.vms.items()
                          if rec.info.project},
                addresses=addresses, remote_claims=self._remote_claims(addresses),
                ensembles=self._ensembles(),
                link_tx=self.remote.link_tx() if self.remote is not None else None)
        except Exception:
            LOG.exception("could not build the host report of epoch %d", summary.epoch)
            report = None
        congestion = report_mod.congestion_index(report) if report is not None else 0.0
        self.last_report = report
        if self.peers is not None:
            self.peers.set_taps({tap: uuid for uuid, rec in self.vms.items()
                                 for tap in rec.info.interfaces})
        if self.remote is not None and report is not None and not report.blind:
            self.remote.set_port_load(report.link_utilisation, self._holding(),
                                      _heavy_senders(summary, report))
        if self.journal is not None:
            try:
                self.journal.flush()    # retries a journal write that failed (full disk...)
            except Exception:
                LOG.exception("could not retry the journal write")
        self._log_summary(summary, report, congestion, skipped)
        if self.publisher is not None and report is not None:
            try:
                self.publisher.offer(report)
            except Exception:
                LOG.exception("could not hand the host report to the publisher")
        if self.metrics is not None:
            try:
                self.metrics.observe_epoch(EpochRecord(
                    epoch=summary.epoch, ts=now, summary=summary, report=report,
                    congestion_index_pct=congestion,
                    intervals=self.ticks, health=self.health(), host=self.settings.host,
                    epoch_s=self.settings.interval_s * self.settings.intervals_per_epoch,
                    peer_rates=self.peers.rates() if self.peers is not None else {}))
            except Exception:
                LOG.exception("metrics update failed")

    def _holding(self):
        """True when the market holds a VM under its limit (the remote claims' evidence rule)."""
        market = self.market
        for vm, spec in market.specs.items():
            if market.decision(vm).cap_pct < spec.limit_pct - 0.5:
                return True
        return False

    def _epoch_run_delays(self):
        """The epoch's vCPU run delays (evidence for the report); ``{}`` when none can be read."""
        readings = {}
        if self._run_delay:
            try:
                readings = self.hypervisor.vcpu_times()
            except exceptions.ResexError as exc:
                LOG.warning("no vCPU run delays this epoch: %s", exc)
        now = self.clock.now()
        delays = self.run_delays.epoch(now, readings)
        if self.pressure is None:
            return delays
        return evidence_mod.with_pressure(delays, self._epoch_stalls(now))

    def _epoch_stalls(self, now):
        """Each VM's CPU pressure this epoch (percent of it stalled); says once why not."""
        names = {uuid: rec.info.name for uuid, rec in self.vms.items()}
        try:
            got, why = self.pressure.read(names)
        except Exception:
            LOG.exception("could not read the VMs' CPU pressure")
            return {}
        # Only the VMs here now: one that left is said again if it comes back.
        self._pressure_said &= names.keys()
        for uuid, reason in why.items():
            if uuid not in self._pressure_said:
                self._pressure_said.add(uuid)
                LOG.info("no CPU pressure (PSI) for %s: %s", names[uuid], reason)
        return self.pressure_meter.epoch(now, {u: p.some_total_us for u, p in got.items()})

    def health(self):
        """The :class:`Health` counters now (cheap: a few attribute reads)."""
        pub = self.publisher
        journal = self.journal
        watchdog = self.watchdog
        remote = self.remote
        rejected = {}
        status = (0, 0)
        if self.intake is not None:
            try:
                for counters in self.intake.stats().values():
                    for reason, n in counters["rejected"].items():
                        rejected[reason] = rejected.get(reason, 0) + n
                if self._status is not None:
                    status = self.intake.status_counts()
            except Exception:
                LOG.debug("latency intake %r has no usable stats", self.intake, exc_info=True)
        return Health(
            late=self.late, skipped_intervals=self.skipped_intervals,
            held_intervals=self.held_intervals,
            lateness_s=self.lateness_s,
            publish_attempts=(pub.published + pub.failures) if pub is not None else 0,
            publish_failures=pub.failures if pub is not None else 0,
            reports_superseded=pub.skipped if pub is not None else 0,
            journal_write_errors=journal.write_errors if journal is not None else 0,
            journal_unsaved=len(journal.unsaved) if journal is not None else 0,
            hypervisor_timeouts=watchdog.timeouts if watchdog is not None else 0,
            hypervisor_available=watchdog.available if watchdog is not None else True,
            intake_rejected=rejected, status_sent=status[0], status_dropped=status[1],
            remote_victims=len(remote.slas_in_force()) if remote is not None else 0,
            remote_claims_ignored=dict(remote.ignored) if remote is not None else {},
            link_factors=remote.link_factors() if remote is not None else {})

    def set_status_interval(self, seconds):
        """Write the VMs' statuses at most once per ``seconds`` from now on (0: never).

        On the loop's thread (the reloader). Without an intake there is no
        channel to write to, whatever ``seconds``.
        """
        if self.intake is None or not seconds:
            self._status = None
        elif self._status is None:
            self._status = status_mod.Throttle(seconds)
        else:
            self._status.interval_s = float(seconds)

    def statuses(self, uuids):
        """``{uuid: status line}`` of the VMs ``uuids`` under control (:mod:`resex_agent.status`).

        Each line is built from that VM's own record, window, interference
        and decision only. Once per ``[latency] status_interval_s``, for the
        VMs whose channel is connected: a few dictionary reads and one small
        JSON encoding per VM.
        """
        last = self.controller.last
        interference = self.market.last_interference
        observe_only = self.settings.observe_only
        out = {}
        for uuid in uuids:
            rec = self.vms.get(uuid)
            if rec is None:
                continue
            decision = last.decisions.get(uuid)
            cap = decision.cap_pct if decision is not None and not rec.monitor_only else None
            # A remote victim's window is another tenant's: never told to this one.
            remote = self.remote is not None and self.remote.describe(uuid) is not None
            out[uuid] = status_mod.encode(status_mod.vm_status(
                rec.info, None if remote else last.windows.get(uuid),
                None if remote else interference.get(uuid), cap, self.reason(uuid),
                observe_only))
        return out

    def _name(self, uuid):
        rec = self.controller.vms.get(uuid)
        return rec.info.label if rec is not None else uuid

    def reason(self, uuid):
        """Why the policy set ``uuid``'s cap (:data:`policy.REASONS`)."""
        return self.market.reason(uuid)

    def _vm_part(self, v):
        lat = self.last_windows.get(v.vm)
        return "%s cap %.0f/%.0f%%%s rate %.2f%s%s (%s)" % (
            self._name(v.vm), v.cap_mean, v.cap_min, self._in_force_part(v), v.rate,
            " lat %.0fus" % lat.mean_us if lat is not None else "",
            " peer %s" % lat.peer if lat is not None and lat.peer else "", self.reason(v.vm))

    def _in_force_part(self, v):
        """`` in force 1.93%`` where the knobs written say otherwise than the market's cap."""
        if v.vm not in self._in_force:
            return ""
        cap = self._in_force[v.vm]
        rec = self.vms.get(v.vm)
        full = 100.0 * max(1, rec.info.vcpus if rec is not None else 1)
        if cap is None:
            return "" if v.cap_min >= full - 0.5 else " in force none"
        return "" if abs(cap - v.cap_min) < 0.5 else " in force %.2f%%" % cap

    def _log_summary(self, summary, report, congestion, skipped):
        """One INFO line naming the most throttled VMs and counting the rest.

        The VMs named are the :data:`SUMMARY_TOP` with the lowest mean cap
        (the ones the market throttled most), then the highest charging
        rate; every VM is listed, by name, at DEBUG.
        """
        try:
            self._in_force = self.hypervisor.caps_in_force()
        except Exception:
            LOG.debug("no caps in force this epoch", exc_info=True)
            self._in_force = {}
        columns = summary.columns
        # Lowest mean cap first, then highest rate; ties in row order.
        order = np.lexsort((-columns["rate"], columns["cap_mean"]))
        top = [summary.row(k) for k in order[:SUMMARY_TOP].tolist()]
        count = len(summary)
        rest = count - len(top)
        # Intervals skipped (a late or failed sweep: knobs held) are said,
        # or a loop that controls nothing would look like one with nothing to do.
        if report is not None and report.blind:
            LOG.warning("epoch %d: BLIND, the hypervisor was unavailable for the epoch; "
                        "published as blind (the scheduler treats this host as unknown), "
                        "knobs held as last written", summary.epoch)
            return
        LOG.info("epoch %d: %d VMs, link %.0f%%, prices cpu %.2f io %.2f, inflation %.1f%%, "
                 "congestion %.1f%%%s | %s%s",
                 summary.epoch, count, 100.0 * summary.link_utilisation,
                 summary.cpu_price, summary.io_price, summary.latency_inflation_pct,
                 congestion,
                 ", %d/%d intervals held" % (skipped, self.settings.intervals_per_epoch)
                 if skipped else "",
                 "; ".join(self._vm_part(v) for v in top),
                 " (+%d more)" % rest if rest > 0 else "")
        self._log_remote(summary.epoch)
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("epoch %d, every VM: %s", summary.epoch, "; ".join(
                self._vm_part(v) for v in sorted(summary.vms, key=lambda v: self._name(v.vm))))

    def _log_remote(self, epoch):
        """One INFO line naming the remote victims the market judged this epoch, and their hosts.

        The taxes the epoch's line shows on this host's senders are for them
        (or for this host's own victims, named on that line); a tenant's
        status line never names them (:meth:`statuses`).
        """
        if self.remote is None:
            return
        parts = []
        for vm in sorted(self.remote.slas_in_force()):
            said = self.remote.describe(vm)
            if said is not None:
                parts.append("%s via %s" % (said, self._name(vm)))
        if parts:
            LOG.info("epoch %d: %s", epoch, "; ".join(parts))

    # -- shutdown --------------------------------------------------------------
    def shutdown(self):
        """Restore every knob the agent changed, then close each part once; bounded in time.

        The restore stops after ``shutdown_timeout_s`` (and each hypervisor
        call has its watchdog bound): what could not be restored stays in
        the journal for the next start, which restores it before controlling
        anything. One line says what was restored and what is left. Then the
        parts' exit stack closes each part once, in the reverse order of
        their building (the publisher sends what is pending and closes the
        board; one object playing several parts, the simulated host, is
        closed once). Calling it again does nothing.
        """
        if self._shut:
            return
        self._shut = True
        if self.journal is not None:
            self._restore(time.monotonic() + self.shutdown_timeout_s)
        self._closing.close()

    def _restore(self, deadline):
        """Restore the journal's originals until ``deadline``; retry while libvirt is out.

        A hypervisor call that overran its watchdog bound just before the
        signal (libvirtd busy on a loaded host) makes every call fail at once
        until it returns; it then lands, possibly after a first restore
        attempt. So VMs that failed because the hypervisor was unavailable
        are tried again every ``RESTORE_RETRY_S`` until the deadline, and
        only then left to the journal.
        """
        journal = self.journal
        try:
            pending = journal.originals()
        except Exception:
            LOG.exception("cannot read the journal's originals")
            return
        if not pending:
            return
        hypervisor = _UntilDeadline(self.hypervisor, deadline)
        attempts = 0
        while True:
            attempts += 1
            last = time.monotonic() + RESTORE_RETRY_S >= deadline
            try:
                failed = journal.restore_all(hypervisor, report=last)
            except Exception:
                LOG.exception("could not restore every knob; the journal %s keeps the "
                              "originals", journal.path)
                return
            if last or not any(isinstance(exc, exceptions.HypervisorUnavailable)
                               for exc in failed.values()):
                break
            if attempts == 1:
                LOG.warning("the hypervisor is unavailable (%s): retrying the restore of %d "
                            "VM(s) until the shutdown's time is up",
                            next(iter(failed.values())), len(failed))
            time.sleep(RESTORE_RETRY_S)
        left = [self._name(uuid) for uuid in pending if uuid in failed]
        restored = len(pending) - len(left)
        if left:
            LOG.error("restored the original knobs of %d VM(s); %d left in the journal %s "
                      "for the next start: %s", restored, len(left), journal.path,
                      ", ".join(sorted(left)))
        else:
            LOG.info("restored the original knobs of %d VM(s)%s", restored,
                     " (%d attempts)" % attempts if attempts > 1 else "")

    def table(self):
        """Per-VM rows of what the market did, for the final table."""
        return self.controller.table(self.settings.interval_s)


class _EpochCounts:
    """The intervals of the current epoch: run, held (no hypervisor), skipped (any reason).

    Their one owner: :meth:`close` ends the epoch and gives both what the
    report's state and the summary line say.
    """

    def __init__(self):
        self.ticks = self.held = self.skipped = 0
        self.held_last = False

    def count(self, ran, skipped_why):
        """One interval: ``ran`` or skipped (``skipped_why``: :attr:`Controller.skipped`)."""
        self.ticks += 1
        # Only an unavailable hypervisor blinds the epoch; a late sweep (a
        # domain being created or destroyed) or a failed one does not.
        self.held_last = not ran and skipped_why == control.UNAVAILABLE
        if not ran:
            self.skipped += 1
            if self.held_last:
                self.held += 1

    def close(self):
        """End the epoch: ``(state, skipped)``, and start the next one.

        ``state`` is ``blind`` when the hypervisor was away for half the
        epoch or at its end, else ``controlling``; ``skipped``: the
        intervals skipped for any reason (knobs held).
        """
        ticks, held, skipped, last = self.ticks, self.held, self.skipped, self.held_last
        self.ticks = self.held = self.skipped = 0
        state = report_mod.CONTROLLING
        if held and (last or 2 * held >= ticks):
            state = report_mod.BLIND
        return state, skipped


class _UntilDeadline:
    """The hypervisor, for ``restore_knobs`` calls until ``deadline`` (monotonic)."""

    def __init__(self, hypervisor, deadline):
        self._hypervisor = hypervisor
        self._deadline = deadline

    def restore_knobs(self, uuid, params):
        if time.monotonic() > self._deadline:
            raise exceptions.HypervisorUnavailable("the shutdown's restore time is up")
        return self._hypervisor.restore_knobs(uuid, params)


def _heavy_senders(summary, report):
    """The epoch's heavy I/O VMs, by the report's rule (:func:`~.report.heavy_io`)."""
    columns = summary.columns
    if not len(columns["vm"]):
        return ()
    mtus = columns["tx_mtus"]
    heavy = report_mod.heavy_io(columns, int(mtus[mtus > 0].sum()), report.link_utilisation)
    return tuple(vm for vm, flag in zip(columns["vm"], heavy.tolist()) if flag)
