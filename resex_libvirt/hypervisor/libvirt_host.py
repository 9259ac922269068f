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

"""The agent's hypervisor on a real host: libvirt (QEMU/KVM, Xen, test driver).

Domain list
    The running domains are listed once (``listAllDomains``) at start, after
    a reconnect and every ``refresh_s`` seconds as a safety net; in between,
    the list follows libvirt's domain events (lifecycle, metadata change,
    device removal, tunables): only the domains an event named are looked
    up again. Without events (``events=False``, or a driver that sends
    none) the list is taken every sweep. :attr:`LibvirtHypervisor.generation`
    grows whenever the VMs or what is known of them changed, so a caller
    compares nothing when it did not.

Adoption
    A domain seen for the first time, or named by an event, is *adopted*:
    its live XML (SLA metadata, Nova's flavor, latency channel, taps, host
    devices: :mod:`~resex_libvirt.hypervisor.metadata`,
    :mod:`~resex_libvirt.hypervisor.nova_metadata`), its persistent
    ``<cputune>`` and its scheduler
    (:func:`~resex_libvirt.hypervisor.knobs.discover`) are read. A VM that
    vanishes in the middle of a call is dropped (debug log), never an error
    for the loop.

Latency channel
    A running VM that should report latency (``channel_hotplug``:
    ``sensitive`` VMs by default, or ``all``) and has no
    ``org.resex.latency.0`` channel gets one hot-plugged into the *live*
    domain (``attachDeviceFlags(..., VIR_DOMAIN_AFFECT_LIVE)``; the persistent
    definition, Nova's, is never touched). Whatever loses it (a hard or soft
    reboot, a start after a stop, a resize and every other path that
    redefines the domain) sends a lifecycle event, and the VM is adopted
    again, channel included. A VM without a virtio-serial controller cannot
    have one (libvirt cannot hot-plug the controller): it is logged once,
    and :attr:`VMInfo.latency_problem` says why it cannot report.

Original knobs
    :meth:`LibvirtHypervisor.original_knobs` gives the journal what a VM's
    knobs are without the agent: the persistent definition and Nova's
    ``quota:cpu_*`` (:meth:`KnobMapping.originals`), never the live values.
    When a VM is redefined or restarted its originals are computed again;
    when it stops they are dropped; a knob the agent set that someone else
    changed (a tunable event or a re-read not matching what the agent
    wrote) is logged and adopted as the new original. Each such change is
    handed out once by :meth:`LibvirtHypervisor.original_updates`.

CPU time and interface counters
    One ``virConnectGetAllDomainStats(CPU_TOTAL | INTERFACE | VCPU)`` per
    sweep where the driver offers ``cpu.time`` (QEMU): CPU times for the
    market, ``net.*`` for the interface monitor (:meth:`domain_stats`) and
    each vCPU's run-queue delay for the host report's evidence
    (:meth:`vcpu_times`), in one call.
    Otherwise, per domain, ``virDomainGetCPUStats(total)`` and then
    ``virDomainGetInfo`` (libxl has no bulk stats; the test driver's bulk
    stats carry only ``state.*``).

Knobs
    :meth:`LibvirtHypervisor.set_knobs` writes what it is given (the control
    loop owns the one deadband), skipping only a write of the values already
    in force. Monitor-only VMs raise ``KnobUnsupported``.

SLA
    own metadata (per key) > Nova's flavor in the domain (per key) > the
    compute API's answer, if one is configured > configured defaults, each
    layer parsed by :func:`resex_libvirt.sla.parse`; an invalid value is
    logged once as a warning naming the VM, the source and the key, and the
    lower layer's value applies.
"""

import dataclasses
import logging
import threading
import time
import xml.etree.ElementTree as ET

import libvirt

from resex_libvirt import exceptions
from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import connection as connection_mod
from resex_libvirt.hypervisor import domains as domains_mod
from resex_libvirt.hypervisor import knobs as knobs_mod
from resex_libvirt.hypervisor import metadata as metadata_mod
from resex_libvirt.hypervisor import nova_metadata
from resex_libvirt.hypervisor import vcpu_stats
from resex_libvirt import sla as sla_mod

LOG = logging.getLogger(__name__)

DEFAULT_URI = "qemu:///system"
XEN_URI = "xen:///system"

#: Which VMs get the latency channel hot-plugged.
HOTPLUG_CHOICES = ("sensitive", "all", "none")

#: Tunable event parameter -> scheduler parameter.
_TUNABLE = {"cputune.shares": "cpu_shares"}

#: Why a VM cannot report latency (``VMInfo.latency_problem``).
NO_CONTROLLER = ("no virtio-serial controller, so no latency channel can be hot-plugged "
                 "(boot it from an image with hw_qemu_guest_agent=yes)")

_INACTIVE = getattr(libvirt, "VIR_DOMAIN_XML_INACTIVE", 2)
_STATS_INTERFACE = getattr(libvirt, "VIR_DOMAIN_STATS_INTERFACE", 16)
_STATS_VCPU = getattr(libvirt, "VIR_DOMAIN_STATS_VCPU", 8)


@dataclasses.dataclass(frozen=True)
class OriginalsUpdate:
    """A change of a VM's original knobs, for the journal.

    ``originals`` is ``None`` when the VM stopped or was undefined (forget
    it). ``reason``: ``stopped``, ``redefined``, ``restarted`` or
    ``operator``. ``reassert`` asks the caller to write its knobs again (the
    live values are no longer what it wrote, and nobody holds them).
    """

    uuid: str
    originals: dict | None
    reason: str
    reassert: bool = False
    #: The values operators set live that the agent now leaves alone
    #: (``{}``: none any more); ``None``: unchanged. With ``dom_id``, the
    #: domain they hold for (a restart ends them).
    operator: dict | None = None
    dom_id: int = -1


class LibvirtHypervisor(base.Hypervisor):
    """:class:`~resex_libvirt.hypervisor.base.Hypervisor` over one libvirt connection.

    ``uri``: libvirt URI (``qemu:///system`` by default, ``xen:///system``,
    ``test:///...``). ``sla_defaults``: the configured :class:`SLA` under
    every VM's own. ``nova_sla``: an optional compute-API source with
    ``lookup(uuid)`` and ``subscribe(callback)``.
    ``backoff_min``/``backoff_max``: reconnect backoff (s). ``events``: use
    libvirt domain events. ``refresh_s``: list the domains and re-read each
    VM at least this often. ``clock``: monotonic clock. ``qemu_period_us``:
    CFS period of QEMU caps. ``cgroup_version``: 1 or 2, the host's (the
    range of ``cpu_shares``). ``channel_hotplug``: one of
    :data:`HOTPLUG_CHOICES`.
    """

    def __init__(self, uri=DEFAULT_URI, sla_defaults=None, nova_sla=None,
                 backoff_min=1.0, backoff_max=60.0, events=True, refresh_s=60.0,
                 clock=time.monotonic, qemu_period_us=None, cgroup_version=1,
                 channel_hotplug="sensitive"):
        if channel_hotplug not in HOTPLUG_CHOICES:
            raise exceptions.ConfigError("channel_hotplug must be one of %s, not %r"
                                         % (", ".join(HOTPLUG_CHOICES), channel_hotplug))
        if cgroup_version not in knobs_mod.CGROUP_VERSIONS:
            raise exceptions.ConfigError("cgroup_version must be 1 or 2, not %r"
                                         % (cgroup_version,))
        self.uri = uri
        self.sla_defaults = sla_defaults if sla_defaults is not None else sla_mod.SLA()
        self.qemu_period_us = qemu_period_us
        self.cgroup_version = cgroup_version
        self.channel_hotplug = channel_hotplug
        #: False: only say which VMs could not get a channel, attach nothing
        #: (``resex-agent --check`` changes nothing).
        self.attach_channels = True
        self.refresh_s = float(refresh_s)
        self._clock = clock
        self._nova = nova_sla
        self._conn = connection_mod.Connection(
            uri, backoff_min=backoff_min, backoff_max=backoff_max, events=events, clock=clock)
        self._lock = threading.Lock()
        self._vms = domains_mod.DomainCache()
        self._stale = set()
        self._started = {}        # uuid -> clock() of its last start event
        self._tunables = []
        self._all_stale = True
        self._listed_at = None
        self._warned = set()
        self._updates = []
        self._seeded = {}         # uuid -> {"dom_id", "values"} from the journal
        self._bulk_stats = None
        self._sweep = {}
        self._per_domain_cpu_stats = True
        self._pcpus = None
        #: Seconds from the last start event to the channel being attached, per VM.
        self.attach_delays = {}
        self._conn.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle)
        self._conn.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_METADATA_CHANGE, self._on_event)
        self._conn.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, self._on_event)
        self._conn.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_TUNABLE, self._on_tunable)
        self._conn.on_reconnect(self._on_reconnect)
        if nova_sla is not None:
            nova_sla.subscribe(self._on_event)

    @property
    def connection(self):
        return self._conn

    @property
    def generation(self):
        """Grows whenever :meth:`vms` returns something different."""
        return self._vms.generation

    # -- events (libvirt's event thread: short, under the lock) -----------------------

    def _on_event(self, uuid, *args):
        with self._lock:
            self._stale.add(uuid)

    def _on_lifecycle(self, uuid, event, detail=None):
        with self._lock:
            self._stale.add(uuid)
            if event == libvirt.VIR_DOMAIN_EVENT_STARTED:
                self._started[uuid] = self._clock()

    def _on_tunable(self, uuid, params):
        with self._lock:
            self._tunables.append((uuid, dict(params)))

    def _on_reconnect(self):
        LOG.info("reconnected to %s: re-reading every VM", self.uri)
        with self._lock:
            self._all_stale = True
            self._bulk_stats = None

    def _take_events(self):
        with self._lock:
            stale, self._stale = self._stale, set()
            everything, self._all_stale = self._all_stale, False
            tunables, self._tunables = self._tunables, []
        return stale, everything, tunables

    # -- discovery -------------------------------------------------------------

    def _warn_once(self, token, fmt, *args):
        if token in self._warned:
            return
        self._warned.add(token)
        LOG.warning(fmt, *args)

    def _warn_sla(self, vm_name, uuid, source, error):
        self._warn_once((uuid, source, error.key, repr(error.value)),
                        "VM %s (%s): invalid %s from %s (%s); the default applies",
                        vm_name, uuid, error.key, source, error)

    def _resolve_sla(self, facts):
        sla = self.sla_defaults
        source = "default"
        api_specs = self._nova.lookup(facts.uuid) if self._nova is not None else None
        if api_specs:
            sla = sla_mod.parse(api_specs, base=sla, on_error=lambda e: self._warn_sla(
                facts.name, facts.uuid, "nova", e))
            source = "nova"
        flavor_specs = {k: v for k, v in (facts.nova.extra_specs if facts.nova else {}).items()
                        if k.startswith(sla_mod.PREFIX)}
        if flavor_specs:
            sla = sla_mod.parse(flavor_specs, base=sla, on_error=lambda e: self._warn_sla(
                facts.name, facts.uuid, "the flavor", e))
            source = "flavor"
        if facts.sla_specs:
            sla = sla_mod.parse(facts.sla_specs, base=sla, on_error=lambda e: self._warn_sla(
                facts.name, facts.uuid, "metadata", e))
            source = "metadata"
        return sla, source

    def _wants_channel(self, sla):
        return self.channel_hotplug == "all" or (
            self.channel_hotplug == "sensitive" and sla.sensitive)

    def _hotplug(self, dom, facts):
        """Attach the latency channel live; returns ``(facts, problem)``."""
        if not facts.virtio_serial:
            return facts, NO_CONTROLLER
        if not self.attach_channels:
            return facts, None
        started = time.monotonic()
        try:
            dom.attachDeviceFlags(metadata_mod.channel_xml(), libvirt.VIR_DOMAIN_AFFECT_LIVE)
            xml = dom.XMLDesc(0)
        except libvirt.libvirtError as exc:
            error = connection_mod.translate(exc, "hot-plug the latency channel")
            if isinstance(error, (exceptions.VMGone, exceptions.HypervisorUnavailable)):
                raise error from exc
            return facts, "the latency channel could not be hot-plugged: %s" % (
                exc.get_error_message() or exc)
        fresh = metadata_mod.parse_domain_xml(xml)
        if fresh.latency_channel is None:
            return fresh, "the hot-plugged latency channel has no socket path in the live XML"
        with self._lock:
            start = self._started.pop(facts.uuid, None)
        if start is not None:
            self.attach_delays[facts.uuid] = self._clock() - start
        LOG.info("VM %s (%s): latency channel hot-plugged at %s (%.1f ms%s)",
                 fresh.name, fresh.uuid, fresh.latency_channel,
                 (time.monotonic() - started) * 1000.0,
                 "" if start is None else ", %.0f ms after its start event"
                 % (1000.0 * self.attach_delays[facts.uuid]))
        return fresh, None

    def _adopt(self, dom, previous=None):
        """Read a domain's XML and scheduler; raises the project's exceptions."""
        uuid = dom.UUIDString()
        with self._conn.translated("adopt VM %s" % uuid):
            xml = dom.XMLDesc(0)
            inactive = dom.XMLDesc(_INACTIVE)
            sched_type = dom.schedulerType()[0]
            params = dom.schedulerParameters()
            dom_id = dom.ID()
        try:
            facts = metadata_mod.parse_domain_xml(xml)
            persistent = metadata_mod.parse_cputune(inactive)
        except ET.ParseError as exc:
            raise exceptions.HypervisorError(
                "VM %s: unreadable domain XML: %s" % (uuid, exc)) from exc
        flavor = nova_metadata.flavor_knobs(facts.nova.extra_specs) if facts.nova else {}
        mapping = knobs_mod.discover(sched_type, params, self.qemu_period_us,
                                     self.cgroup_version, flavor.get("cpu_shares"))
        if mapping is None:
            LOG.debug("VM %s (%s): scheduler %r has no cap knob: monitor-only",
                      facts.name, uuid, sched_type)
        sla, source = self._resolve_sla(facts)
        problem = None
        if self._wants_channel(sla) and facts.latency_channel is None:
            with self._conn.translated("hot-plug the latency channel of VM %s" % uuid):
                facts, problem = self._hotplug(dom, facts)
            if problem is not None:
                self._warn_once((uuid, "channel", problem),
                                "VM %s (%s) cannot report latency: %s",
                                facts.name, uuid, problem)
        originals = {}
        if mapping is not None:
            originals, refused = mapping.originals(persistent, flavor,
                                                   nova=facts.nova is not None)
            if refused:
                self._warn_once((uuid, "refused", refused),
                                "VM %s (%s): persistent %s refused as an original "
                                "(an agent's cap copied into the definition?); original: "
                                "no cap", facts.name, uuid, refused)
        info = base.VMInfo(
            uuid=uuid, name=facts.name, vcpus=facts.vcpus, sla=sla,
            knobs=mapping.knobs if mapping is not None else base.MONITOR_ONLY,
            sla_source=source, latency_channel=facts.latency_channel,
            interfaces=facts.interfaces, hostdevs=facts.hostdevs, latency_problem=problem,
            nova_name=facts.nova_name)
        live = mapping.read(params) if mapping is not None else {}
        vm = domains_mod.Adopted(info=info, facts=facts, mapping=mapping, written=dict(live),
                                 adopted_at=self._clock(), dom_id=dom_id, originals=originals)
        if previous is not None:
            self._follow(previous, vm, live)
        elif mapping is not None:
            self._seed(vm)
        return vm

    def caps_in_force(self):
        out = {}
        for uuid, vm in self._vms.items():
            if vm.mapping is not None and vm.written:
                out[uuid] = vm.mapping.cap_of(vm.written, vm.info.vcpus)
        return out

    def adopt_operator_values(self, values):
        self._seeded = {uuid: dict(v) for uuid, v in values.items()}

    def _seed(self, vm):
        """A VM seen for the first time takes the operator values the journal kept for it."""
        seeded = self._seeded.pop(vm.info.uuid, None)
        if not seeded:
            return
        if seeded.get("dom_id") != vm.dom_id:
            LOG.info("VM %s (%s) restarted since an operator set %s: its definition's "
                     "values apply again", vm.info.name, vm.info.uuid, seeded.get("values"))
            self._queue(vm.info.uuid, vm.originals, "restarted", operator={},
                        dom_id=vm.dom_id)
            return
        values = {k: v for k, v in seeded.get("values", {}).items()
                  if k in vm.mapping.restorable}
        vm.overrides = dict(values)
        vm.held = set(values)
        vm.originals = {**vm.originals, **values}
        LOG.info("VM %s (%s): %s set by an operator before this start stay the original and "
                 "the agent's hands stay off them", vm.info.name, vm.info.uuid,
                 ", ".join("%s=%s" % kv for kv in sorted(values.items())))

    def _follow(self, old, new, live):
        """Carry what the agent wrote over a re-read; queue changed originals."""
        if new.mapping is None:
            return
        uuid = new.info.uuid
        if old.dom_id != new.dom_id:
            # A restart: the live knobs are the persistent ones again, and
            # nothing an operator set live survives it.
            self._queue(uuid, new.originals, "restarted", reassert=True,
                        operator={} if old.held else None, dom_id=new.dom_id)
            return
        new.ours = old.ours
        new.overrides = dict(old.overrides)
        new.held = set(old.held)
        # The agent knows its own writes by what it wrote (any period); a
        # live value it never wrote on a knob it set is an operator's.
        changed = {k: v for k, v in live.items()
                   if (k in old.ours and not old.agent_wrote(k, v))
                   or (k in old.held and old.overrides.get(k) != v)}
        if changed:
            # The whole group goes to the operator (a cap's period with its quota).
            untouched = new.mapping.without(live, set(changed))
            held = {k: v for k, v in live.items() if k not in untouched}
            new.overrides.update(held)
            new.held.update(held)
            for name in held:
                new.ours.pop(name, None)
            LOG.warning("VM %s (%s): %s changed outside the agent: adopted as the original, "
                        "and the agent leaves %s alone until the VM restarts",
                        new.info.name, uuid,
                        ", ".join("%s=%s" % kv for kv in sorted(changed.items())),
                        ", ".join(sorted(held)))
        new.originals = {**new.originals, **new.overrides}
        if changed:
            self._queue(uuid, new.originals, "operator",
                        operator=dict(new.overrides), dom_id=new.dom_id)
            return
        new.written = old.written
        if new.originals != old.originals:
            LOG.info("VM %s (%s): definition changed; original knobs now %s",
                     new.info.name, uuid, new.originals)
            self._queue(uuid, new.originals, "redefined")

    def _queue(self, uuid, originals, reason, reassert=False, operator=None, dom_id=-1):
        self._updates.append(OriginalsUpdate(
            uuid, None if originals is None else dict(originals), reason, reassert,
            None if operator is None else dict(operator), dom_id))

    def original_updates(self):
        """The :class:`OriginalsUpdate` s since the last call, oldest first."""
        updates, self._updates = self._updates, []
        return updates

    def _check_tunables(self, tunables, stale):
        """Tunable events whose values the agent did not write mark their VM stale."""
        for uuid, params in tunables:
            vm = self._vms.get(uuid)
            if vm is None or vm.mapping is None:
                continue
            for key, value in params.items():
                name = _TUNABLE.get(key, key[len("cputune."):] if key.startswith(
                    "cputune.") else key)
                if ((name in vm.ours and not vm.agent_wrote(name, value))
                        or (name in vm.held and vm.overrides.get(name) != value)):
                    stale.add(uuid)
                    break

    def _list(self, conn):
        return {dom.UUIDString(): dom
                for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)}

    def _lookup(self, conn, uuids):
        out = {}
        for uuid in uuids:
            try:
                dom = conn.lookupByUUIDString(uuid)
                out[uuid] = dom if dom.isActive() else None
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise
                out[uuid] = None
        return out

    def vms(self):
        stale, everything, tunables = self._take_events()
        self._check_tunables(tunables, stale)
        now = self._clock()
        relist = (everything or self._listed_at is None or not self._conn.events_enabled
                  or now - self._listed_at >= self.refresh_s)
        if relist:
            found = self._conn.call("list domains", self._list)
            self._listed_at = now
            gone = set(self._vms) - set(found)
        elif stale:
            looked = self._conn.call("look up %d VM(s)" % len(stale), self._lookup, stale)
            found = {u: d for u, d in looked.items() if d is not None}
            gone = {u for u, d in looked.items() if d is None and u in self._vms}
        else:
            return self._vms.infos()
        for uuid, dom in found.items():
            vm = self._vms.get(uuid)
            if not (vm is None or everything or uuid in stale
                    or now - vm.adopted_at >= self.refresh_s):
                continue
            try:
                fresh = self._adopt(dom, previous=vm)
            except exceptions.VMGone:
                LOG.debug("VM %s vanished while being adopted", uuid)
                if vm is not None:
                    gone.add(uuid)
                continue
            except exceptions.HypervisorUnavailable:
                with self._lock:
                    self._stale.update(stale)
                raise
            except exceptions.HypervisorError as exc:
                LOG.warning("cannot adopt VM %s: %s", uuid, exc)
                continue
            if vm is None:
                LOG.debug("adopted VM %s (%s): %d vCPU, knobs %s, SLA from %s",
                          fresh.info.name, uuid, fresh.info.vcpus,
                          fresh.info.knobs.driver, fresh.info.sla_source)
            self._vms.put(uuid, fresh)
        for uuid in gone:
            vm = self._vms.pop(uuid)
            if vm is None:
                continue
            LOG.info("VM %s (%s) is gone", vm.info.name, uuid)
            self.attach_delays.pop(uuid, None)
            if vm.mapping is not None:
                self._queue(uuid, None, "stopped")
        return self._vms.infos()

    def latency_problems(self):
        """``{uuid: why}`` of the running VMs that should report latency and cannot."""
        return {uuid: vm.info.latency_problem for uuid, vm in self._vms.items()
                if vm.info.latency_problem}

    # -- CPU and interface counters -------------------------------------------

    def _bulk(self, conn):
        try:
            stats = conn.getAllDomainStats(
                libvirt.VIR_DOMAIN_STATS_CPU_TOTAL | _STATS_INTERFACE | _STATS_VCPU,
                libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() in (libvirt.VIR_ERR_NO_SUPPORT,
                                        libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED):
                return None
            raise
        sweep = {dom.UUIDString(): record for dom, record in stats}
        out = {uuid: int(record["cpu.time"]) for uuid, record in sweep.items()
               if "cpu.time" in record}
        if sweep and not out:
            return None
        self._sweep = sweep
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
        for uuid in list(self._vms):
            try:
                with self._conn.translated("CPU time of VM %s" % uuid):
                    out[uuid] = self._domain_cpu(conn.lookupByUUIDString(uuid))
            except exceptions.VMGone:
                LOG.debug("VM %s vanished while its CPU time was read", uuid)
            except exceptions.HypervisorUnavailable:
                raise
            except exceptions.HypervisorError as exc:
                LOG.warning("no CPU time for VM %s: %s", uuid, exc)
        return out

    def cpu_times(self):
        if self._bulk_stats is not False:
            out = self._conn.call("bulk domain stats", self._bulk)
            if out is not None:
                self._bulk_stats = True
                return out
            LOG.info("no bulk cpu.time at %s: reading CPU time per domain", self.uri)
            self._bulk_stats = False
            self._sweep = {}
        return self._conn.call("CPU time per domain", self._per_domain_cpu)

    def domain_stats(self):
        """``{uuid: bulk stats record}`` of the last :meth:`cpu_times` sweep.

        Carries ``net.*`` (the interface group) next to ``cpu.*``, so the
        interface monitor needs no call of its own; ``{}`` where the driver
        has no bulk stats.
        """
        return self._sweep

    def vcpu_times(self):
        """``{uuid: VcpuTimes}`` (run-queue delay) of the last :meth:`cpu_times` sweep."""
        return vcpu_stats.from_sweep(self._sweep)

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
        self._vms.put(uuid, vm)
        return vm

    def _domain_call(self, uuid, what, fn):
        def run(conn):
            return fn(conn.lookupByUUIDString(uuid))
        return self._conn.call("%s of VM %s" % (what, uuid), run)

    def set_knobs(self, uuid, cap_pct, weight):
        """Apply the cap/weight; returns True if libvirt was called, False if already in force."""
        vm = self._vm(uuid)
        if vm.mapping is None:
            raise exceptions.KnobUnsupported(
                "VM %s (%s) is monitor-only: its scheduler has no cap knob"
                % (vm.info.name, uuid))
        params = vm.mapping.without(vm.mapping.params_for(cap_pct, weight, vm.info.vcpus),
                                    vm.held)
        if not params or (vm.ours and all(vm.written.get(k) == v for k, v in params.items())):
            return False
        # Recorded before the call: the tunable event it sends may come first.
        vm.record(params)
        self._domain_call(uuid, "set knobs", lambda dom: vm.mapping.apply(dom, params))
        vm.written.update(params)
        LOG.debug("VM %s: knobs %s", vm.info.label, params)
        return True

    def get_knobs(self, uuid):
        """The live values of the knobs the VM's mapping writes (``{}`` if monitor-only).

        Always asks libvirt, so a vanished VM raises ``VMGone``.
        """
        vm = self._vm(uuid)
        params = self._domain_call(uuid, "read knobs", lambda dom: dom.schedulerParameters())
        return vm.mapping.read(params) if vm.mapping is not None else {}

    def original_knobs(self, uuid):
        """The VM's knobs without the agent (persistent definition, Nova's flavor)."""
        return dict(self._vm(uuid).originals)

    def restore_knobs(self, uuid, params):
        if not params:
            return
        vm = self._vm(uuid)
        if vm.mapping is None:
            raise exceptions.KnobUnsupported(
                "VM %s (%s) is monitor-only: nothing to restore" % (vm.info.name, uuid))
        params = {k: params[k] for k in vm.mapping.restorable if k in params}

        def restore(dom):
            if not dom.isActive():
                raise exceptions.VMGone("VM %s is not running" % uuid)
            vm.record(params)
            vm.mapping.apply(dom, params)

        self._domain_call(uuid, "restore knobs", restore)
        vm.written.update(params)
        LOG.info("VM %s: knobs restored to %s", vm.info.label, params)

    def cap_pct(self, uuid):
        """The cap in force now as libvirt reports it (percent of one pCPU, None = none)."""
        vm = self._vm(uuid)
        if vm.mapping is None:
            return None
        return vm.mapping.cap_of(self.get_knobs(uuid), vm.info.vcpus)

    def close(self):
        self._conn.close()
