"""The agent's control loop (DESIGN.md "The control loop").

Every interval: discover VMs (adopt new ones, drop vanished ones), sample
each VM's CPU and I/O, charge and decide in the market, and write a knob
only when it moved beyond the deadband. Every epoch: replenish, log one
summary line, publish the host report. Absolute deadlines
(``next += interval``), a warning when late; one VM or one call failing
never stops the loop.

Everything outside comes in through narrow interfaces, so the same loop
drives the simulated host and libvirt: a ``Hypervisor``, a
``FabricMonitor``, latency sources (``sync(vms)``, ``windows()``), an
optional board (``publish(report)``), an optional journal (``remember``,
``restore_all``), a clock (``now()``, ``sleep_until()``, ``finished``) and
an optional metrics sink (``observe_interval``, ``observe_epoch``).
"""

import dataclasses
import logging
import threading
import time

import resex_libvirt
from resex_libvirt import control
from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)

#: Epoch summaries kept in memory (the last minute at the default epoch).
KEEP_SUMMARIES = 60


@dataclasses.dataclass
class LoopSettings:
    """What the loop needs from the configuration, resolved."""

    host: str
    interval_s: float
    intervals_per_epoch: int
    deadband_pct: float = 1.0
    max_epochs: int = 0


class Agent:
    """One host's ResEx agent."""

    def __init__(self, settings, market, hypervisor, fabric, latency_sources=(),
                 board=None, journal=None, clock=None, metrics=None, publish_policy=None):
        self.settings = settings
        self.market = market
        self.hypervisor = hypervisor
        self.fabric = fabric
        self.latency_sources = list(latency_sources)
        self.board = board
        self.journal = journal
        self.clock = clock
        self.metrics = metrics
        self.publish_policy = publish_policy
        self.controller = control.Controller(
            market, hypervisor, fabric, self.latency_sources, journal=journal,
            deadband_pct=settings.deadband_pct)
        self.ticks = 0
        self.epochs = 0
        self.late = 0
        self.summaries = []
        self._stop = threading.Event()
        self._reload = threading.Event()
        self.reloader = None
        self._board_down_logged = False
        self._fleet_counted_at = None
        self.version = resex_libvirt.version()

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
        """Run until stopped, the clock finishes or ``max_epochs`` epochs passed."""
        s = self.settings
        LOG.info("agent on %s: interval %.4f s, %d intervals per epoch, policy %s",
                 s.host, s.interval_s, s.intervals_per_epoch, self.market.policy.name)
        for source in self.latency_sources:
            start = getattr(source, "start", None)
            if start is not None:
                start()
        self.controller.prime(self.clock.now())
        deadline = self.clock.now() + s.interval_s
        while not self._stop.is_set():
            if self._reload.is_set():
                self._reload.clear()
                if self.reloader is not None:
                    try:
                        self.reloader()
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
                LOG.warning("control loop late by %.1f ms; skipping %d interval(s)",
                            (now - deadline) * 1000.0, missed)
                deadline += missed * s.interval_s
            self.clock.sleep_until(deadline, self._stop)
            deadline += s.interval_s

    # -- one interval ----------------------------------------------------------
    def run_interval(self):
        """Sample, charge, decide, actuate (:class:`resex_libvirt.control.Controller`)."""
        self.ticks += 1
        self.controller.deadband_pct = self.settings.deadband_pct
        interval = self.controller.step(self.clock.now())
        if interval is None or self.metrics is None:
            return
        try:
            self.metrics.observe_interval(self, interval.samples, interval.decisions,
                                          interval.windows)
        except Exception:
            LOG.exception("metrics update failed")

    # -- one epoch -------------------------------------------------------------
    def run_epoch(self):
        """Replenish, log the summary line, publish the report. Never raises."""
        self.epochs += 1
        summary = self.market.end_epoch()
        self.summaries.append(summary)
        del self.summaries[:-KEEP_SUMMARIES]
        self._log_summary(summary)
        self._publish(summary)
        if self.metrics is not None:
            try:
                self.metrics.observe_epoch(self, summary)
            except Exception:
                LOG.exception("metrics update failed")

    def _log_summary(self, summary):
        names = {uuid: rec.info.name for uuid, rec in self.vms.items()}
        parts = []
        for v in sorted(summary.vms, key=lambda r: names.get(r.vm, r.vm)):
            lat = self.last_windows.get(v.vm)
            parts.append("%s cap %.0f/%.0f%% rate %.2f%s" % (
                names.get(v.vm, v.vm), v.cap_mean, v.cap_min, v.rate,
                " lat %.0fus" % lat.mean_us if lat is not None else ""))
        LOG.info("epoch %d: %d VMs, link %.0f%%, prices cpu %.2f io %.2f, inflation %.1f%% | %s",
                 summary.epoch, len(summary.vms), 100.0 * summary.link_utilisation,
                 summary.cpu_price, summary.io_price, summary.latency_inflation_pct,
                 "; ".join(parts))

    def _publish(self, summary):
        if self.board is None:
            return
        from resex_libvirt.board import report as report_mod
        now = self.clock.now()
        policy = self.publish_policy
        try:
            report = report_mod.HostReport.from_summary(
                self.settings.host, time.time(), summary, self.link().capacity_bytes_per_s,
                self.version)
            if policy is not None and not policy.should_publish(report, now):
                return
            self.board.publish(report)
            if policy is not None:
                policy.published(report, now)
                # Past a fleet size the agent publishes on change only; the
                # fleet (this host included) is counted after the first
                # publish and then every maximum interval.
                if self._fleet_counted_at is None or \
                        now - self._fleet_counted_at >= policy.max_interval_s:
                    self._fleet_counted_at = now
                    policy.observe_fleet(self.board.count())
            if self._board_down_logged:
                LOG.info("price board reachable again")
                self._board_down_logged = False
        except exceptions.BoardUnavailable as exc:
            if not self._board_down_logged:
                LOG.warning("price board unavailable, controlling locally: %s", exc)
                self._board_down_logged = True
        except Exception:
            LOG.exception("could not publish the host report")

    # -- shutdown --------------------------------------------------------------
    def shutdown(self):
        """Restore every knob the agent changed, then close everything."""
        if self.journal is not None:
            try:
                failed = self.journal.restore_all(self.hypervisor)
                if failed:
                    LOG.error("the knobs of %d VM(s) could not be restored; the journal %s "
                              "keeps them for the next start", len(failed), self.journal.path)
            except Exception:
                LOG.exception("could not restore every knob; the journal keeps the originals")
        for closeable in [*self.latency_sources, self.board, self.fabric, self.hypervisor]:
            close = getattr(closeable, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    LOG.exception("error while closing %r", closeable)

    def table(self):
        """Per-VM rows of what the market did, for the final table."""
        return self.controller.table(self.settings.interval_s)
