"""The agent's hypervisor on a real host: libvirt (QEMU/KVM, Xen, test driver).

Discovery
    Each :meth:`LibvirtHypervisor.vms` lists the running domains (one RPC).
    A domain seen for the first time is *adopted*: its XML is read once
    (SLA metadata, latency channel, taps, host devices,
    :mod:`~resex_libvirt.hypervisor.metadata`) and its scheduler is
    discovered (:func:`~resex_libvirt.hypervisor.knobs.discover`). What was
    adopted is cached; lifecycle and metadata-change events (where the driver
    sends them), a reconnect, a Nova answer, or ``refresh_s`` seconds make a
    VM's entry be read again. A VM that vanishes in the middle of a call is
    dropped (debug log), never an error for the loop.

CPU time
    One ``virConnectGetAllDomainStats(VIR_DOMAIN_STATS_CPU_TOTAL)`` per sweep
    where the driver offers ``cpu.time`` (QEMU); otherwise, per domain,
    ``virDomainGetCPUStats(total)`` and then ``virDomainGetInfo`` (libxl has
    no bulk stats; the test driver's bulk stats carry only ``state.*``). The
    mode is decided on the first sweep. Deltas, resets and wraps are the
    sampler's business (:class:`resex_libvirt.counters.DeltaTracker`).

Knobs
    :meth:`LibvirtHypervisor.set_knobs` writes only when the cap moved by at
    least ``deadband_pct`` (percentage points of one pCPU), the cap was added
    or removed, or the weight changed (DESIGN.md: "a libvirt call costs
    milliseconds"). Monitor-only VMs raise ``KnobUnsupported``.

SLA
    metadata (per key) > Nova flavor extra specs (per key) > configured
    defaults, each layer parsed by :func:`resex_libvirt.sla.parse`; an invalid
    value is logged once as a warning naming the VM, the source and the key,
    and the lower layer's value applies.
"""

import dataclasses
import functools
import logging
import threading
import time
import xml.etree.ElementTree as ET

import libvirt

from resex_libvirt import exceptions
from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import connection as connection_mod
from resex_libvirt.hypervisor import knobs as knobs_mod
from resex_libvirt.hypervisor import metadata as metadata_mod
from resex_libvirt.hypervisor import nova_sla as nova_sla_mod
from resex_libvirt import sla as sla_mod

LOG = logging.getLogger(__name__)

DEFAULT_URI = "qemu:///system"
XEN_URI = "xen:///system"


def sla_defaults_from_conf(conf):
    """The :class:`SLA` of the ``[sla]`` group (options named like the keys).

    Raises :class:`~resex_libvirt.exceptions.SLAError` (a ``ConfigError``)
    when the defaults contradict each other (limit below reservation).
    """
    group = conf.sla
    specs = {}
    for key in sla_mod.KEYS:
        value = getattr(group, key[len(sla_mod.PREFIX):], None)
        if value is not None:
            specs[key] = value
    return sla_mod.parse(specs)


@dataclasses.dataclass
class _Adopted:
    """What the agent knows about one running domain."""

    info: base.VMInfo
    facts: metadata_mod.DomainFacts
    mapping: knobs_mod.KnobMapping | None
    written: dict
    adopted_at: float


class LibvirtHypervisor(base.Hypervisor):
    """:class:`~resex_libvirt.hypervisor.base.Hypervisor` over one libvirt connection.

    ``uri``: libvirt URI (``qemu:///system`` by default, ``xen:///system``,
    ``test:///...``). ``sla_defaults``: the configured :class:`SLA` under
    every VM's own. ``nova_sla``: an optional
    :class:`~resex_libvirt.hypervisor.nova_sla.NovaSLASource`.
    ``deadband_pct``: smallest cap change (pp) worth a libvirt call.
    ``backoff_min``/``backoff_max``: reconnect backoff (s). ``events``: use
    libvirt domain events. ``refresh_s``: re-read a VM's XML at least this
    often. ``clock``: monotonic clock.
    """

    def __init__(self, uri=DEFAULT_URI, sla_defaults=None, nova_sla=None, deadband_pct=0.5,
                 backoff_min=1.0, backoff_max=60.0, events=True, refresh_s=60.0,
                 clock=time.monotonic, qemu_period_us=None):
        if deadband_pct < 0:
            raise exceptions.ConfigError("deadband_pct must be >= 0, not %r" % deadband_pct)
        self.uri = uri
        self.sla_defaults = sla_defaults if sla_defaults is not None else sla_mod.SLA()
        self.deadband_pct = float(deadband_pct)
        self.qemu_period_us = qemu_period_us
        self.refresh_s = float(refresh_s)
        self._clock = clock
        self._nova = nova_sla
        self._conn = connection_mod.Connection(
            uri, backoff_min=backoff_min, backoff_max=backoff_max, events=events, clock=clock)
        self._lock = threading.Lock()
        self._vms = {}
        self._stale = set()
        self._all_stale = False
        self._warned = set()
        self._bulk_stats = None
        self._per_domain_cpu_stats = True
        self._pcpus = None
        self._owned_nova = None
        self._conn.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_event)
        self._conn.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_METADATA_CHANGE, self._on_event)
        self._conn.on_reconnect(self._on_reconnect)
        if nova_sla is not None:
            nova_sla.subscribe(self._on_event)

    @classmethod
    def from_conf(cls, conf):
        """The hypervisor ``[libvirt]`` and ``[sla]`` describe (see ``agent/conf/hypervisor.py``).

        With ``[libvirt] nova_lookup`` a :class:`NovaSLASource` is created
        and closed with the hypervisor.
        """
        group = conf.libvirt
        nova = None
        if group.nova_lookup:
            nova = nova_sla_mod.NovaSLASource(
                functools.partial(nova_sla_mod.connect_from_cloud, group.nova_cloud,
                                  group.nova_timeout),
                ttl=group.nova_cache_ttl)
        try:
            hyp = cls(group.connection_uri, sla_defaults=sla_defaults_from_conf(conf),
                      nova_sla=nova, deadband_pct=group.deadband_pct,
                      backoff_min=group.reconnect_backoff_min,
                      backoff_max=group.reconnect_backoff_max, events=group.events,
                      refresh_s=group.metadata_refresh_interval,
                      qemu_period_us=group.qemu_cap_period_us)
        except BaseException:
            if nova is not None:
                nova.close()
            raise
        hyp._owned_nova = nova
        return hyp

    @property
    def connection(self):
        return self._conn

    # -- events ----------------------------------------------------------------

    def _on_event(self, uuid, *args):
        with self._lock:
            self._stale.add(uuid)

    def _on_reconnect(self):
        LOG.info("reconnected to %s: re-reading every VM", self.uri)
        with self._lock:
            self._all_stale = True
            self._bulk_stats = None

    def _take_stale(self):
        with self._lock:
            stale, self._stale = self._stale, set()
            everything, self._all_stale = self._all_stale, False
        return stale, everything

    # -- discovery -------------------------------------------------------------

    def _warn_sla(self, vm_name, uuid, source, error):
        token = (uuid, source, error.key, repr(error.value))
        if token in self._warned:
            return
        self._warned.add(token)
        LOG.warning("VM %s (%s): invalid %s from %s (%s); the default applies",
                    vm_name, uuid, error.key, source, error)

    def _resolve_sla(self, facts):
        sla = self.sla_defaults
        source = "default"
        nova_specs = self._nova.lookup(facts.uuid) if self._nova is not None else None
        if nova_specs:
            sla = sla_mod.parse(nova_specs, base=sla, on_error=lambda e: self._warn_sla(
                facts.name, facts.uuid, "nova", e))
            source = "nova"
        if facts.sla_specs:
            sla = sla_mod.parse(facts.sla_specs, base=sla, on_error=lambda e: self._warn_sla(
                facts.name, facts.uuid, "metadata", e))
            source = "metadata"
        return sla, source

    def _adopt(self, dom):
        """Read a domain's XML and scheduler; raises the project's exceptions."""
        uuid = dom.UUIDString()
        with self._conn.translated("adopt VM %s" % uuid):
            xml = dom.XMLDesc(0)
            sched_type = dom.schedulerType()[0]
            params = dom.schedulerParameters()
        try:
            facts = metadata_mod.parse_domain_xml(xml)
        except ET.ParseError as exc:
            raise exceptions.HypervisorError(
                "VM %s: unreadable domain XML: %s" % (uuid, exc)) from exc
        mapping = knobs_mod.discover(sched_type, params, self.qemu_period_us)
        if mapping is None:
            LOG.debug("VM %s (%s): scheduler %r has no cap knob: monitor-only",
                      facts.name, uuid, sched_type)
        sla, source = self._resolve_sla(facts)
        info = base.VMInfo(
            uuid=uuid, name=facts.name, vcpus=facts.vcpus, sla=sla,
            knobs=mapping.knobs if mapping is not None else base.MONITOR_ONLY,
            sla_source=source, latency_channel=facts.latency_channel,
            interfaces=facts.interfaces, hostdevs=facts.hostdevs)
        written = mapping.read(params) if mapping is not None else {}
        return _Adopted(info=info, facts=facts, mapping=mapping, written=written,
                        adopted_at=self._clock())

    def vms(self):
        def list_running(conn):
            return conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)

        domains = self._conn.call("list domains", list_running)
        stale, everything = self._take_stale()
        now = self._clock()
        running = {}
        for dom in domains:
            uuid = dom.UUIDString()
            vm = self._vms.get(uuid)
            if (vm is None or everything or uuid in stale
                    or now - vm.adopted_at >= self.refresh_s):
                try:
                    fresh = self._adopt(dom)
                except exceptions.VMGone:
                    LOG.debug("VM %s vanished while being adopted", uuid)
                    continue
                except exceptions.HypervisorUnavailable:
                    raise
                except exceptions.HypervisorError as exc:
                    LOG.warning("cannot adopt VM %s: %s", uuid, exc)
                    continue
                if vm is None:
                    LOG.debug("adopted VM %s (%s): %d vCPU, knobs %s, SLA from %s",
                              fresh.info.name, uuid, fresh.info.vcpus,
                              fresh.info.knobs.driver, fresh.info.sla_source)
                else:
                    fresh.written = vm.written if vm.mapping is not None else fresh.written
                vm = fresh
            running[uuid] = vm
        for uuid in set(self._vms) - set(running):
            LOG.info("VM %s (%s) is gone", self._vms[uuid].info.name, uuid)
        self._vms = running
        return {uuid: vm.info for uuid, vm in running.items()}

    # -- CPU -------------------------------------------------------------------

    def _bulk_cpu(self, conn):
        try:
            stats = conn.getAllDomainStats(
                libvirt.VIR_DOMAIN_STATS_CPU_TOTAL,
                libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() in (libvirt.VIR_ERR_NO_SUPPORT,
                                        libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED):
                return None
            raise
        out = {}
        missing = 0
        for dom, record in stats:
            if "cpu.time" in record:
                out[dom.UUIDString()] = int(record["cpu.time"])
            else:
                missing += 1
        if missing and not out:
            return None
        return out

    def _domain_cpu(self, dom):
        if self._per_domain_cpu_stats:
            try:
                return int(dom.getCPUStats(True)[0]["cpu_time"])
            except libvirt.libvirtError as exc:
                if exc.get_error_code() not in (libvirt.VIR_ERR_NO_SUPPORT,
                                                libvirt.VIR_ERR_OPERATION_INVALID):
                    raise
                self._per_domain_cpu_stats = False
        return int(dom.info()[4])

    def _per_domain_cpu(self, conn):
        out = {}
        for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
            uuid = dom.UUIDString()
            try:
                with self._conn.translated("CPU time of VM %s" % uuid):
                    out[uuid] = self._domain_cpu(dom)
            except exceptions.VMGone:
                LOG.debug("VM %s vanished while its CPU time was read", uuid)
            except exceptions.HypervisorUnavailable:
                raise
            except exceptions.HypervisorError as exc:
                LOG.warning("no CPU time for VM %s: %s", uuid, exc)
        return out

    def cpu_times(self):
        if self._bulk_stats is not False:
            out = self._conn.call("bulk CPU stats", self._bulk_cpu)
            if out is not None:
                self._bulk_stats = True
                return out
            LOG.info("no bulk cpu.time at %s: reading CPU time per domain", self.uri)
            self._bulk_stats = False
        return self._conn.call("CPU time per domain", self._per_domain_cpu)

    def pcpus(self):
        if self._pcpus is None:
            self._pcpus = int(self._conn.call("node info", lambda conn: conn.getInfo())[2])
        return self._pcpus

    # -- knobs -----------------------------------------------------------------

    def _vm(self, uuid):
        vm = self._vms.get(uuid)
        if vm is not None:
            return vm

        def adopt(conn):
            return self._adopt(conn.lookupByUUIDString(uuid))

        vm = self._conn.call("look up VM %s" % uuid, adopt)
        self._vms[uuid] = vm
        return vm

    def _domain_call(self, uuid, what, fn):
        def run(conn):
            return fn(conn.lookupByUUIDString(uuid))
        return self._conn.call("%s of VM %s" % (what, uuid), run)

    def _changed(self, vm, params):
        mapping = vm.mapping
        vcpus = vm.info.vcpus
        old_cap = mapping.cap_of(vm.written, vcpus) if vm.written else None
        new_cap = mapping.cap_of(params, vcpus)
        if not vm.written:
            return True
        if (old_cap is None) != (new_cap is None):
            return True
        if new_cap is not None and abs(new_cap - old_cap) >= max(self.deadband_pct, 1e-9):
            return True
        return any(name in params and vm.written.get(name) != params[name]
                   for name in mapping.weight_names)

    def set_knobs(self, uuid, cap_pct, weight):
        """Apply the cap/weight; returns True if libvirt was called, False inside the deadband."""
        vm = self._vm(uuid)
        if vm.mapping is None:
            raise exceptions.KnobUnsupported(
                "VM %s (%s) is monitor-only: its scheduler has no cap knob"
                % (vm.info.name, uuid))
        params = vm.mapping.params_for(cap_pct, weight, vm.info.vcpus)
        if not self._changed(vm, params):
            return False
        self._domain_call(uuid, "set knobs", lambda dom: vm.mapping.apply(dom, params))
        vm.written.update(params)
        LOG.debug("VM %s: knobs %s", vm.info.name, params)
        return True

    def get_knobs(self, uuid):
        """The live values of the knobs the VM's mapping writes (``{}`` if monitor-only).

        Always asks libvirt, so a vanished VM raises ``VMGone``.
        """
        vm = self._vm(uuid)
        params = self._domain_call(uuid, "read knobs", lambda dom: dom.schedulerParameters())
        return vm.mapping.read(params) if vm.mapping is not None else {}

    def restore_knobs(self, uuid, params):
        if not params:
            return
        vm = self._vm(uuid)
        if vm.mapping is None:
            raise exceptions.KnobUnsupported(
                "VM %s (%s) is monitor-only: nothing to restore" % (vm.info.name, uuid))
        params = {k: v for k, v in params.items() if k in vm.mapping.names}
        self._domain_call(uuid, "restore knobs", lambda dom: vm.mapping.apply(dom, params))
        vm.written.update(params)
        LOG.info("VM %s: knobs restored to %s", vm.info.name, params)

    def cap_pct(self, uuid):
        """The cap in force now as libvirt reports it (percent of one pCPU, None = none)."""
        vm = self._vm(uuid)
        if vm.mapping is None:
            return None
        return vm.mapping.cap_of(self.get_knobs(uuid), vm.info.vcpus)

    def close(self):
        self._conn.close()
        if self._owned_nova is not None:
            self._owned_nova.close()
            self._owned_nova = None
