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
from resex_libvirt import exceptions
from resex_libvirt import market as market_mod
from resex_libvirt import sampling

LOG = logging.getLogger(__name__)


@dataclasses.dataclass
class LoopSettings:
    """What the loop needs from the configuration, resolved."""

    host: str
    interval_s: float
    intervals_per_epoch: int
    deadband_pct: float = 1.0
    max_epochs: int = 0


@dataclasses.dataclass
class VMRecord:
    """What the loop keeps per VM between intervals."""

    info: object
    ticks: int = 0
    applied: tuple | None = None
    journaled: bool = False
    monitor_only: bool = False
    cap_sum: float = 0.0
    cap_min: float = float("inf")
    cpu_sum: float = 0.0
    tx_bytes: int = 0
    lat_n: int = 0
    lat_sum: float = 0.0
    intf_sum: float = 0.0
    intf_n: int = 0


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
        self.sampler = sampling.Sampler()
        self.vms = {}
        self.ticks = 0
        self.epochs = 0
        self.late = 0
        self.summaries = []
        self.last_decisions = {}
        self.last_windows = {}
        self._stop = threading.Event()
        self._reload = threading.Event()
        self.reloader = None
        self._hyp_down_logged = False
        self._board_down_logged = False
        self._link = None
        self.version = resex_libvirt.version()

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
        """Sample, charge, decide, actuate. Never raises."""
        self.ticks += 1
        try:
            vms = self._discover()
            now = self.clock.now()
            cpu = self.hypervisor.cpu_times()
            io = self.fabric.counters(vms) if self.fabric is not None else {}
            link = self.link()
            samples = self.sampler.sample(now, cpu, io, link.mtu)
        except exceptions.HypervisorUnavailable as exc:
            if not self._hyp_down_logged:
                LOG.warning("hypervisor unavailable, holding knobs: %s", exc)
                self._hyp_down_logged = True
            samples = None
        except exceptions.ResexError as exc:
            LOG.warning("sampling failed this interval: %s", exc)
            samples = None
        except Exception:
            LOG.exception("unexpected error while sampling; interval skipped")
            samples = None
        if samples is None:
            return
        if self._hyp_down_logged:
            LOG.info("hypervisor back")
            self._hyp_down_logged = False

        windows = {}
        for source in self.latency_sources:
            try:
                windows.update(source.windows())
            except Exception:
                LOG.exception("latency source %r failed; its windows are skipped", source)
        windows = {vm: w for vm, w in windows.items() if vm in self.market.specs}
        self.last_windows = windows

        decisions = self.market.step(samples, windows)
        self.last_decisions = decisions
        self._actuate(decisions)
        self._tally(samples, decisions, windows)
        if self.metrics is not None:
            try:
                self.metrics.observe_interval(self, samples, decisions, windows)
            except Exception:
                LOG.exception("metrics update failed")

    def link(self):
        if self._link is None:
            self._link = self.fabric.link() if self.fabric is not None else None
            if self._link is None:
                from resex_libvirt.fabric import base as fabric_base
                self._link = fabric_base.LinkInfo("none", float(1 << 30), 1024)
        return self._link

    def _discover(self):
        found = self.hypervisor.vms()
        for uuid in list(self.vms):
            if uuid not in found:
                LOG.info("VM %s left the host", self.vms[uuid].info.name)
                del self.vms[uuid]
                self.market.remove(uuid)
        for uuid, info in found.items():
            rec = self.vms.get(uuid)
            spec = market_mod.VMSpec(vm=uuid, vcpus=info.vcpus, sla=info.sla)
            if rec is None:
                self.vms[uuid] = VMRecord(info=info, monitor_only=not info.knobs.cap)
                self.market.add(spec)
                LOG.info("adopted VM %s (%s): %d vCPU, SLA from %s, knobs %s%s",
                         info.name, uuid, info.vcpus, info.sla_source, info.knobs.driver,
                         "" if info.knobs.cap else " (monitor-only)")
            elif rec.info != info:
                if rec.info.sla != info.sla or rec.info.vcpus != info.vcpus:
                    self.market.add(spec)
                    LOG.info("VM %s: SLA now from %s", info.name, info.sla_source)
                rec.info = info
        for source in self.latency_sources:
            sync = getattr(source, "sync", None)
            if sync is not None:
                try:
                    sync(found)
                except Exception:
                    LOG.exception("latency source %r failed to sync", source)
        return found

    def _actuate(self, decisions):
        deadband = self.settings.deadband_pct
        for uuid, decision in decisions.items():
            rec = self.vms.get(uuid)
            if rec is None or rec.monitor_only:
                continue
            full = 100.0 * max(1, rec.info.vcpus)
            cap = None if decision.cap_pct >= full - 1e-9 else round(decision.cap_pct, 2)
            wanted = (cap, decision.weight)
            if rec.applied is not None and not _moved(rec.applied, wanted, deadband):
                continue
            try:
                if self.journal is not None and not rec.journaled:
                    # The originals go to disk before the first change, ever.
                    self.journal.remember(uuid, self.hypervisor.get_knobs(uuid))
                    rec.journaled = True
                self.hypervisor.set_knobs(uuid, cap, decision.weight)
                rec.applied = wanted
                LOG.debug("VM %s: cap %s, weight %d", rec.info.name,
                          "none" if cap is None else "%.1f%%" % cap, decision.weight)
            except exceptions.VMGone:
                LOG.debug("VM %s vanished before its knobs were set", rec.info.name)
            except exceptions.KnobUnsupported as exc:
                LOG.info("VM %s is monitor-only: %s", rec.info.name, exc)
                rec.monitor_only = True
            except exceptions.HypervisorUnavailable as exc:
                LOG.warning("hypervisor unavailable while setting knobs: %s", exc)
                return
            except exceptions.ResexError as exc:
                LOG.warning("could not set knobs of VM %s: %s", rec.info.name, exc)
            except Exception:
                LOG.exception("unexpected error setting knobs of VM %s", rec.info.name)

    def _tally(self, samples, decisions, windows):
        for uuid, rec in self.vms.items():
            rec.ticks += 1
            d = decisions.get(uuid)
            if d is not None:
                rec.cap_sum += d.cap_pct
                rec.cap_min = min(rec.cap_min, d.cap_pct)
            s = samples.get(uuid)
            if s is not None:
                rec.cpu_sum += s.cpu_pct
                rec.tx_bytes += s.tx_bytes
            w = windows.get(uuid)
            if w is not None and w.count:
                rec.lat_n += 1
                rec.lat_sum += w.mean_us
            intf = self.market.last_interference.get(uuid)
            if intf is not None:
                rec.intf_n += 1
                rec.intf_sum += intf

    # -- one epoch -------------------------------------------------------------
    def run_epoch(self):
        """Replenish, log the summary line, publish the report. Never raises."""
        self.epochs += 1
        summary = self.market.end_epoch()
        self.summaries.append(summary)
        del self.summaries[:-3600]
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
        try:
            report = report_mod.HostReport.from_summary(
                self.settings.host, time.time(), summary, self.link().capacity_bytes_per_s,
                self.version)
            if self.publish_policy is not None and not self.publish_policy.should_publish(
                    report, time.time()):
                return
            self.board.publish(report)
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
        rows = []
        for uuid, rec in sorted(self.vms.items(), key=lambda kv: kv[1].info.name):
            n = max(1, rec.ticks)
            dt = n * self.settings.interval_s
            rows.append({
                "vm": rec.info.name,
                "uuid": uuid,
                "sensitive": rec.info.sla.sensitive,
                "cap_mean_pct": rec.cap_sum / n,
                "cap_min_pct": rec.cap_min if rec.cap_min != float("inf") else None,
                "cpu_mean_pct": rec.cpu_sum / n,
                "tx_mb_per_s": rec.tx_bytes / dt / 1e6,
                "latency_mean_us": (rec.lat_sum / rec.lat_n) if rec.lat_n else None,
                "interference_mean_pct": (rec.intf_sum / rec.intf_n) if rec.intf_n else None,
                "monitor_only": rec.monitor_only,
            })
        return rows


def _moved(old, new, deadband):
    old_cap, old_weight = old
    new_cap, new_weight = new
    if old_weight != new_weight:
        return True
    if (old_cap is None) != (new_cap is None):
        return True
    if old_cap is None:
        return False
    return abs(old_cap - new_cap) >= deadband
