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

"""One control interval, the same wherever the market runs.

The agent's daemon loop (``agent/loop.py``) and the simulator's fast runner
(``resex_libvirt/sim/runner.py``) both need, every interval (doc/source/architecture.rst,
"The control loop"): discover the VMs (adopt new ones, drop vanished ones),
sample each VM's CPU and I/O, charge and decide in the market, and write a
knob only when it moved beyond the deadband. :class:`Controller` is that
step, so the experiments run exactly the code that production runs. Clocks,
epochs, logging, the board and signals stay with the caller.

Failures are isolated per VM and per interval: a vanished
VM is a debug line, a VM whose knob cannot be written is a warning, and a
hypervisor outage skips the interval with the knobs held.
"""

import dataclasses
import logging

import numpy as np

from resex_libvirt import exceptions
from resex_libvirt.fabric import base as fabric_base
from resex_libvirt.hypervisor import base as hyp_base
from resex_libvirt.market import records
from resex_libvirt.market import table as table_mod
from resex_libvirt import sampling

LOG = logging.getLogger(__name__)

#: Up to this many VMs reporting latency, their tallies are added row by row.
SMALL_ROWS = 8

#: Why :meth:`Controller.step` skipped its interval (``Controller.skipped``).
UNAVAILABLE, LATE, FAILED = "unavailable", "late", "failed"

#: The run's tallies of each VM, kept as columns of the controller's own
#: table, aligned with the market's rows (their one owner).
_RUN_COLUMNS = {"ticks": (0, np.int64), "cap_sum": (0.0, np.float64),
                "cap_min": (np.inf, np.float64), "cpu_sum": (0.0, np.float64),
                "tx_bytes": (0, np.int64), "tx_mtus": (0, np.int64),
                "lat_n": (0, np.int64), "lat_sum": (0.0, np.float64),
                "intf_sum": (0.0, np.float64), "intf_n": (0, np.int64)}

#: The link assumed when no fabric monitor is configured: the paper's.
DEFAULT_LINK = fabric_base.LinkInfo("none", float(1 << 30), 1024)


@dataclasses.dataclass
class VMRecord:
    """What the controller keeps per VM between intervals.

    ``info`` is the hypervisor's record (its one owner); the run's tallies
    are the controller's columns (:meth:`Controller.table`), not copied here.
    """

    info: object
    applied: tuple | None = None
    journaled: bool = False
    monitor_only: bool = False


@dataclasses.dataclass(frozen=True)
class Interval:
    """What one interval saw and decided."""

    samples: dict
    windows: dict
    decisions: dict


class Controller:
    """Discover, sample, decide, actuate: one interval at a time.

    ``hypervisor`` and ``fabric`` are the adapters of
    :mod:`resex_libvirt.hypervisor.base` and :mod:`resex_libvirt.fabric.base`;
    what each can do beyond its interface is read once, here, from the
    ``capabilities`` it declares (:class:`~resex_libvirt.hypervisor.base.Capability`,
    :class:`~resex_libvirt.fabric.base.Capability`): a hypervisor that does
    not declare ``ACTUATES`` has its VMs monitored, never actuated.
    ``latency_sources`` have ``windows()`` and ``sync(vms)``;
    ``journal`` (optional) has ``remember(uuid, params)`` and is given a
    VM's original knobs before its first change. ``deadband_pct`` is the
    deadband's one owner (a reload sets it here). ``consent`` (optional,
    a :class:`resex_libvirt.sla.Consent`) maps a VM's SLA, project and
    flavor to the SLA the market applies. ``observe_only``: the market
    runs and decides, and each cap it would write is logged instead
    (nothing written, nothing journaled). ``overlay`` (optional), called
    once per interval before the windows are taken, returns ``{uuid:
    {SLA field: value}}``: the latency SLA a VM without one of its own is
    judged by this interval (a remote victim's, :mod:`resex_agent.remote`);
    a VM whose entry changes is given to the market again. An entry that
    carries ``"ensemble"`` (its ensemble's worst member,
    :mod:`resex_libvirt.board.ensembles`) judges a VM with an SLA of its own too.
    """

    def __init__(self, market, hypervisor, fabric=None, latency_sources=(), journal=None,
                 deadband_pct=0.0, consent=None, observe_only=False, overlay=None):
        self.market = market
        self.consent = consent
        self.overlay = overlay
        self._overlaid = {}
        self.observe_only = observe_only
        self.hypervisor = hypervisor
        self.fabric = fabric
        self.latency_sources = list(latency_sources)
        caps = hyp_base.Capability
        declared = hypervisor.capabilities if hypervisor is not None else frozenset()
        #: False: the hypervisor writes no knob; every VM is monitor-only.
        self.actuates = caps.ACTUATES in declared
        self._cpu_rows = hypervisor.cpu_times_rows if caps.CPU_BY_ROWS in declared else None
        self._delay_rows = (hypervisor.delay_times_rows if caps.DELAY_BY_ROWS in declared
                            else None)
        self._delay_map = hypervisor.vcpu_times if caps.RUN_DELAY in declared else None
        self._evented = caps.GENERATION in declared
        self._originals = caps.REPORTS_ORIGINALS in declared
        self._io_rows = (fabric.counters_rows if fabric is not None and
                         fabric_base.Capability.COUNTS_BY_ROWS in fabric.capabilities else None)
        self.journal = journal
        self.deadband_pct = deadband_pct
        self.sampler = sampling.Sampler()
        self.vms = {}
        self.last = Interval({}, {}, {})
        self._link = None
        self._down_logged = False
        #: Why the last interval was skipped (:data:`UNAVAILABLE`, :data:`LATE`,
        #: :data:`FAILED`), ``None`` when it ran.
        self.skipped = None
        self._retry = {}
        self._generation = None
        self._sent_names = None
        # The run's tallies of every VM, as columns aligned with the market's
        # rows (doc/source/performance.rst): the VM's row goes when it leaves.
        self._tallies = table_mod.Table()
        self._tallied = None
        for name, (fill, dtype) in _RUN_COLUMNS.items():
            self._tallies.column(name, fill, dtype)

    def link(self):
        """The shared link (read once from the fabric monitor)."""
        if self._link is None:
            link = self.fabric.link() if self.fabric is not None else None
            self._link = link if link is not None else DEFAULT_LINK
        return self._link

    # -- the interval ----------------------------------------------------------
    def prime(self, now):
        """Take the first readings at ``now`` so the first interval has samples.

        Nothing is charged. Errors are left to the first :meth:`step`.
        """
        try:
            vms = self.discover()
            cpu, io = self._readings(vms)
            self.sampler.sample_rows(now, cpu, io, self.link().mtu, self.market.layout,
                                     self._delays())
        except exceptions.ResexError as exc:
            LOG.debug("first readings failed: %s", exc)

    def _readings(self, vms):
        """This sweep's CPU times and I/O counters, by rows when the adapters can.

        An adapter with ``cpu_times_rows(rows)`` / ``counters_rows(rows)``
        (``rows``: the market's layout, its ``names`` and ``version``) fills
        arrays aligned with the market's rows (the simulated host does); the
        others return mappings, which the sampler aligns.
        """
        rows = self.market.layout
        cpu = self._cpu_rows(rows) if self._cpu_rows is not None else self.hypervisor.cpu_times()
        if self.fabric is None:
            return cpu, {}
        return cpu, self._io_rows(rows) if self._io_rows is not None else self.fabric.counters(vms)

    def _delays(self):
        """The vCPUs' cumulative run delays of this sweep (ns), by rows when the adapter can.

        Read after the CPU times: a libvirt host gives them from the same
        sweep (:meth:`~resex_libvirt.hypervisor.base.Hypervisor.vcpu_times`);
        ``{}`` where the driver has none.
        """
        if self._delay_rows is not None:
            return self._delay_rows(self.market.layout)
        if self._delay_map is None:
            return None
        return {uuid: v.delay_ns for uuid, v in self._delay_map().items()}

    def step(self, now):
        """Run one interval ending at monotonic ``now``; ``None`` if it was skipped."""
        try:
            vms = self.discover()
            cpu, io = self._readings(vms)
            samples = self.sampler.sample_rows(now, cpu, io, self.link().mtu, self.market.layout,
                                               self._delays())
        except exceptions.HypervisorUnavailable as exc:
            self.skipped = UNAVAILABLE
            if not self._down_logged:
                LOG.warning("hypervisor unavailable, holding knobs: %s", exc)
                self._down_logged = True
            return None
        except exceptions.SampleLate as exc:
            # Busy, not down (a domain being created or destroyed): hold the
            # knobs this interval; the sweep's result is taken when it comes.
            self.skipped = LATE
            LOG.debug("interval skipped: %s", exc)
            self._write_pending()
            return None
        except exceptions.ResexError as exc:
            self.skipped = FAILED
            LOG.warning("sampling failed this interval: %s", exc)
            return None
        except Exception:
            self.skipped = FAILED
            LOG.exception("unexpected error while sampling; interval skipped")
            return None
        self.skipped = None
        if self._down_logged:
            LOG.info("hypervisor back")
            self._down_logged = False
        if self.overlay is not None:
            self._follow_overlay()

        windows = None
        for source in self.latency_sources:
            try:
                got = source.windows()
            except Exception:
                LOG.exception("latency source %r failed; its windows are skipped", source)
                continue
            if windows is None:
                windows = got          # read only: copied if another source adds to it
            else:
                windows = {**windows, **got}
        specs = self.market.specs
        if windows is None:
            windows = {}
        elif not windows.keys() <= specs.keys():
            windows = {vm: w for vm, w in windows.items() if vm in specs}
        decisions = self.market.step(samples, windows)
        self.actuate(decisions, self.market.changed)
        self._tally(samples, decisions, self.market.windows_seen)
        self.last = Interval(samples, windows, decisions)
        return self.last

    def _write_pending(self):
        """In a skipped interval, write the decisions in force that must be written again.

        A VM whose live knobs are not the market's (one that arrived with
        another host's cap, a write that failed) is written now, with the
        decision in force: a sweep that stays late (libvirtd holds the domain
        list 1-2 s while it destroys a domain) must not leave such a cap in
        force meanwhile. Nothing is decided: the market does not step.
        """
        if not self._retry:
            return
        specs = self.market.specs
        self.actuate({uuid: self.market.decision(uuid) for uuid in self._retry
                      if uuid in specs}, changed=())

    def discover(self):
        """Adopt new VMs, drop vanished ones, follow SLA changes; returns ``{uuid: VMInfo}``.

        A hypervisor with a ``generation`` counter (libvirt's follows domain
        events) is compared only when the counter moved; the journal follows
        the changes of original knobs the hypervisor reports
        (``original_updates()``).
        """
        found = self.hypervisor.vms()
        self._follow_originals()
        generation = self.hypervisor.generation if self._evented else None
        if generation is not None and generation == self._generation:
            return found
        self._generation = generation
        for uuid in [u for u in self.vms if u not in found]:
            LOG.info("VM %s left the host", self.vms[uuid].info.name)
            del self.vms[uuid]
            self.market.remove(uuid)
        for uuid, info in found.items():
            rec = self.vms.get(uuid)
            if rec is None:
                monitor_only = not (info.knobs.cap and self.actuates)
                self.vms[uuid] = VMRecord(info=info, monitor_only=monitor_only)
                self.market.add(self._spec(uuid, info))
                LOG.info("adopted VM %s (%s): %d vCPU, SLA from %s, knobs %s%s",
                         info.name, uuid, info.vcpus, info.sla_source, info.knobs.driver,
                         " (monitor-only)" if monitor_only else "")
            elif rec.info is not info and rec.info != info:
                if (rec.info.sla != info.sla or rec.info.vcpus != info.vcpus or
                        rec.info.flavor != info.flavor or rec.info.project != info.project):
                    self.market.add(self._spec(uuid, info))
                    LOG.info("VM %s: SLA now from %s", info.name, info.sla_source)
                rec.info = info
        for source in self.latency_sources:
            try:
                source.sync(found)
            except Exception:
                LOG.exception("latency source %r failed to sync", source)
        return found

    def _spec(self, uuid, info):
        """The market's record of a VM: its SLA as the consent rule lets the market apply it.

        A VM without a latency SLA of its own that the overlay names is
        judged by the overlay's (its reservation, limit and shares stay its
        own, as consent set them); so is a VM with one, when the overlay's
        is its ensemble's (``"ensemble"``: the group's SLA is the tenant's).
        ``"limit_scale"`` (a shared link's factor,
        :mod:`resex_libvirt.board.link_share`) scales the CPU limit of a VM
        without a latency SLA whose cap the market may move (its consented
        reservation under its limit), never below its reservation.
        """
        sla = (info.sla if self.consent is None else
               self.consent(info.sla, project=info.project, flavor=info.flavor))
        fields = self._overlaid.get(uuid)
        if fields and (not info.sla.sensitive or "ensemble" in fields):
            sla = dataclasses.replace(
                sla, **{k: v for k, v in fields.items() if k not in _OVERLAY_MARKS})
        scale = (fields or {}).get("limit_scale")
        if scale is not None and not info.sla.sensitive:
            limit = sla.effective_limit(info.vcpus)
            if sla.reservation_pct < limit:
                sla = dataclasses.replace(
                    sla, limit_pct=max(sla.reservation_pct, round(limit * scale, 3)))
        return records.VMSpec(vm=uuid, vcpus=info.vcpus, sla=sla)

    def _follow_overlay(self):
        """Give the market again every VM whose overlaid SLA changed (:attr:`overlay`)."""
        try:
            want = self.overlay()
        except Exception:
            LOG.exception("the SLA overlay failed; the last one is kept")
            return
        old = self._overlaid
        if want == old:
            return
        self._overlaid = want
        for uuid in want.keys() | old.keys():
            rec = self.vms.get(uuid)
            wanted, had = want.get(uuid), old.get(uuid)
            if rec is None or wanted == had or (rec.info.sla.sensitive and not any(
                    f and "ensemble" in f for f in (wanted, had))):
                continue
            self.market.add(self._spec(uuid, rec.info))
            _say_overlay(rec.info.name, wanted, had)

    def _follow_originals(self):
        """Forget, refresh or re-adopt journal entries as the hypervisor reports."""
        if not self._originals:
            return
        for update in self.hypervisor.original_updates():
            rec = self.vms.get(update.uuid)
            if update.reassert:
                # The live knobs are no longer what was written (or, for a VM
                # adopted this sweep, not what the market decides): write
                # again at the next interval even if the decision did not change.
                if rec is not None:
                    rec.applied = None
                self._retry[update.uuid] = None
            if self.journal is None:
                continue
            try:
                if update.originals is None:
                    self.journal.forget(update.uuid)
                    if rec is not None:
                        rec.journaled = False
                elif update.uuid in self.journal:
                    self.journal.update(update.uuid, update.originals)
                if update.operator is not None and update.originals is not None:
                    self.journal.set_operator(update.uuid, update.operator, update.dom_id)
            except Exception:
                LOG.exception("could not record the %s originals of VM %s in the journal",
                              update.reason, update.uuid)

    def actuate(self, decisions, changed=None):
        """Write the knobs that moved beyond the deadband; one VM failing stops nothing.

        With ``changed`` (the VMs whose decision changed), only those are
        visited, plus the VMs whose last write failed (they are retried every
        interval until it succeeds); without it, every VM of ``decisions``.
        """
        deadband = self.deadband_pct
        if changed is None:
            visit = decisions
        else:
            visit = dict.fromkeys(changed)
            if self._retry:
                visit.update(self._retry)
                self._retry = {}
        for uuid in visit:
            decision = decisions.get(uuid)
            rec = self.vms.get(uuid)
            if decision is None or rec is None or rec.monitor_only:
                continue
            full = 100.0 * max(1, rec.info.vcpus)
            cap = None if decision.cap_pct >= full - 1e-9 else round(decision.cap_pct, 2)
            wanted = (cap, decision.weight)
            if rec.applied is not None and not moved(rec.applied, wanted, deadband):
                continue
            if self.observe_only:
                before = rec.applied[0] if rec.applied is not None else None
                rec.applied = wanted
                LOG.log(logging.INFO if cap != before else logging.DEBUG,
                        "observe-only: VM %s would get cap %s, weight %d (not written)",
                        rec.info.label, "none" if cap is None else "%.1f%%" % cap,
                        decision.weight)
                continue
            try:
                if self.journal is not None and not rec.journaled:
                    # The originals go to disk before the first change, ever:
                    # the hypervisor's true ones (persistent definition,
                    # Nova's flavor), not the live values.
                    self.journal.remember(uuid, self.hypervisor.original_knobs(uuid))
                    rec.journaled = True
                self.hypervisor.set_knobs(uuid, cap, decision.weight)
                rec.applied = wanted
                LOG.debug("VM %s: cap %s, weight %d", rec.info.label,
                          "none" if cap is None else "%.1f%%" % cap, decision.weight)
            except exceptions.VMGone:
                LOG.debug("VM %s vanished before its knobs were set", rec.info.name)
                self._retry[uuid] = None
            except exceptions.KnobUnsupported as exc:
                LOG.info("VM %s is monitor-only: %s", rec.info.name, exc)
                rec.monitor_only = True
            except exceptions.HypervisorUnavailable as exc:
                LOG.warning("hypervisor unavailable while setting knobs: %s", exc)
                # This VM and the ones not visited yet are written next time.
                left = list(visit)
                self._retry.update(dict.fromkeys(left[left.index(uuid):]))
                return
            except exceptions.ResexError as exc:
                LOG.warning("could not set knobs of VM %s: %s", rec.info.name, exc)
                self._retry[uuid] = None
            except Exception:
                LOG.exception("unexpected error setting knobs of VM %s", rec.info.name)
                self._retry[uuid] = None

    def _aligned_tallies(self):
        """The tally table, its rows made the market's (a VM joined or left)."""
        layout = self.market.layout
        if layout is not self._tallied:
            self._tallies.align(layout.names)
            self._tallied = layout
        return self._tallies

    def _tally(self, samples, decisions, seen):
        """Add this interval to every VM's run tallies (whole columns, one pass).

        ``samples`` is the step's :class:`~resex_libvirt.market.records.SampleBatch`,
        ``decisions`` the market's answer, ``seen`` the windows it took: all
        aligned with the market's rows.
        """
        t = self._aligned_tallies()
        t.ticks += 1
        cap = decisions.caps
        t.cap_sum += cap
        np.minimum(t.cap_min, cap, out=t.cap_min)
        # A VM without a sample has a zero row of usage.
        t.cpu_sum += samples.cpu_pct
        t.tx_bytes += samples.tx_bytes
        t.tx_mtus += samples.tx_mtus
        rows = seen.rows
        if 0 < len(rows) <= SMALL_ROWS:
            # A few reporting VMs: row by row (the same additions, no fancy indexing).
            intf_sum, intf_n, lat_sum, lat_n = t.intf_sum, t.intf_n, t.lat_sum, t.lat_n
            for k, intf, count, mean in zip(rows.tolist(), seen.intf.tolist(),
                                            seen.count.tolist(), seen.mean_us.tolist()):
                intf_sum[k] += intf
                intf_n[k] += 1
                if count > 0:
                    lat_sum[k] += mean
                    lat_n[k] += 1
        elif len(rows):
            t.intf_sum[rows] += seen.intf
            t.intf_n[rows] += 1
            got = seen.count > 0
            t.lat_sum[rows[got]] += seen.mean_us[got]
            t.lat_n[rows[got]] += 1
        for k, w in seen.others:
            # Windows of VMs without a latency SLA: not the market's, still tallied.
            if w.count:
                t.lat_n[k] += 1
                t.lat_sum[k] += w.mean_us

    def sent(self):
        """``(uuids, mtus, bytes)``: what each VM sent since it was adopted (copies)."""
        t = self._aligned_tallies()
        if self._sent_names is None or self._sent_names[0] != t.version:
            self._sent_names = (t.version, tuple(t.names))
        return self._sent_names[1], t.tx_mtus.copy(), t.tx_bytes.copy()

    def table(self, interval_s):
        """Per-VM rows of what the market did, sorted by name (read from the tally columns)."""
        t = self._aligned_tallies()
        cols = {name: getattr(t, name).tolist() for name in _RUN_COLUMNS}
        slots = t.slots
        none = {name: fill for name, (fill, _dtype) in _RUN_COLUMNS.items()}
        rows = []
        for uuid, rec in sorted(self.vms.items(), key=lambda item: item[1].info.name):
            k = slots.get(uuid)
            tally = none if k is None else {name: col[k] for name, col in cols.items()}
            rows.append(_summary(rec, tally, interval_s))
        return rows


def _summary(rec, tally, interval_s):
    """One VM's run so far, as a plain dict (the final tables): its record and tallies."""
    n = max(1, tally["ticks"])
    lat_n, intf_n, cap_min = tally["lat_n"], tally["intf_n"], tally["cap_min"]
    return {
        "vm": rec.info.name,
        "uuid": rec.info.uuid,
        "sensitive": rec.info.sla.sensitive,
        "cap_mean_pct": tally["cap_sum"] / n,
        "cap_min_pct": cap_min if cap_min != float("inf") else None,
        "cpu_mean_pct": tally["cpu_sum"] / n,
        "tx_mb_per_s": tally["tx_bytes"] / (n * interval_s) / 1e6,
        "latency_mean_us": (tally["lat_sum"] / lat_n) if lat_n else None,
        "interference_mean_pct": (tally["intf_sum"] / intf_n) if intf_n else None,
        "monitor_only": rec.monitor_only,
    }


def moved(old, new, deadband):
    """True if ``(cap, weight)`` ``new`` differs from ``old`` enough to be written."""
    old_cap, old_weight = old
    new_cap, new_weight = new
    if old_weight != new_weight:
        return True
    if (old_cap is None) != (new_cap is None):
        return True
    if old_cap is None:
        return False
    return old_cap != new_cap and abs(old_cap - new_cap) >= deadband


#: Overlay entries that mark how a VM is judged, not SLA fields.
_OVERLAY_MARKS = ("ensemble", "limit_scale")


def _say_overlay(name, wanted, had):
    """One INFO line: how a VM is judged now that its overlay entry changed."""
    wanted, had = wanted or {}, had or {}
    sla = {k: v for k, v in wanted.items() if k not in _OVERLAY_MARKS}
    if sla and sla != {k: v for k, v in had.items() if k not in _OVERLAY_MARKS}:
        LOG.info("VM %s judged by %s: %s", name,
                 "ensemble %s's worst member's SLA" % wanted["ensemble"] if "ensemble" in wanted
                 else "a remote victim's SLA",
                 ", ".join("%s=%s" % kv for kv in sorted(sla.items())))
    elif not sla and any(k not in _OVERLAY_MARKS for k in had):
        LOG.info("VM %s: no remote victim's SLA any more", name)
    scale = wanted.get("limit_scale")
    if scale != had.get("limit_scale"):
        if scale is None:
            LOG.info("VM %s: CPU limit no longer scaled by a shared link", name)
        else:
            LOG.info("VM %s: CPU limit scaled x%s by a shared link", name, scale)
