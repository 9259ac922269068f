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

:class:`LibvirtHypervisor` composes the parts, each with one job (nova's
host/guest/driver split, ceilometer's inspector):

* :mod:`~resex_libvirt.hypervisor.connection`: the connection, reconnects;
* :mod:`~resex_libvirt.hypervisor.events`: what domain events said;
* :mod:`~resex_libvirt.hypervisor.domains`: the adopted VMs (one record);
* :mod:`~resex_libvirt.hypervisor.adoption`: reading one domain;
* :mod:`~resex_libvirt.hypervisor.sla_layers`: its SLA;
* :mod:`~resex_libvirt.hypervisor.channel`: its latency channel;
* :mod:`~resex_libvirt.hypervisor.originals`: its original knobs;
* :mod:`~resex_libvirt.hypervisor.knobs`: the cap and weight as its
  scheduler's parameters;
* :mod:`~resex_libvirt.hypervisor.stats`: CPU time, interface counters and
  vCPU run delay.

It keeps the domain list (listed at start, after a reconnect and every
``refresh_s``; in between, only the domains an event named are looked up)
and writes the knobs. See doc/source/hypervisor.rst.
"""

import logging
import time

import libvirt

from resex_libvirt import exceptions
from resex_libvirt.hypervisor import adoption
from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import channel as channel_mod
from resex_libvirt.hypervisor import connection as connection_mod
from resex_libvirt.hypervisor import domains as domains_mod
from resex_libvirt.hypervisor import events as events_mod
from resex_libvirt.hypervisor import knobs as knobs_mod
from resex_libvirt.hypervisor import originals as originals_mod
from resex_libvirt.hypervisor import sla_layers
from resex_libvirt.hypervisor import stats as stats_mod

LOG = logging.getLogger(__name__)

DEFAULT_URI = "qemu:///system"
XEN_URI = "xen:///system"


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
    :data:`~resex_libvirt.hypervisor.channel.HOTPLUG_CHOICES`.
    """

    capabilities = frozenset({
        base.Capability.ACTUATES, base.Capability.RUN_DELAY, base.Capability.GENERATION,
        base.Capability.REPORTS_ORIGINALS})

    def __init__(self, uri=DEFAULT_URI, sla_defaults=None, nova_sla=None,
                 backoff_min=1.0, backoff_max=60.0, events=True, refresh_s=60.0,
                 clock=time.monotonic, qemu_period_us=None, cgroup_version=1,
                 channel_hotplug="sensitive"):
        # Options checked before anything is opened.
        self.channel = channel_mod.ChannelHotplug(channel_hotplug, clock, self._pop_started)
        if cgroup_version not in knobs_mod.CGROUP_VERSIONS:
            raise exceptions.ConfigError("cgroup_version must be 1 or 2, not %r"
                                         % (cgroup_version,))
        self.uri = uri
        self.refresh_s = float(refresh_s)
        self._clock = clock
        self._conn = connection_mod.Connection(
            uri, backoff_min=backoff_min, backoff_max=backoff_max, events=events, clock=clock)
        self._vms = domains_mod.DomainCache()
        self._stats = stats_mod.DomainStats(self._conn, lambda: list(self._vms))
        self._events = events_mod.DomainEvents(self._conn, clock, nova_sla=nova_sla,
                                               on_reconnect=self._stats.reset)
        self.sla = sla_layers.SLAResolver(sla_defaults, nova_sla)
        self.originals = originals_mod.Originals()
        self.adopter = adoption.Adopter(self._conn, self.sla, self.channel, self.originals,
                                        clock, qemu_period_us, cgroup_version)
        self._listed_at = None

    def _pop_started(self, uuid):
        return self._events.pop_started(uuid)

    @property
    def connection(self):
        return self._conn

    @property
    def generation(self):
        """Grows whenever :meth:`vms` returns something different."""
        return self._vms.generation

    @property
    def attach_channels(self):
        """False: only say which VMs could not get a channel, attach nothing."""
        return self.channel.attach

    @attach_channels.setter
    def attach_channels(self, value):
        self.channel.attach = bool(value)

    @property
    def attach_delays(self):
        """Seconds from the last start event to the channel being attached, per VM."""
        return self.channel.attach_delays

    # -- the domain list -------------------------------------------------------

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

    def _changed_domains(self, stale, everything, now):
        """``(found, gone)``: the domains to read again and the uuids that left, or None."""
        if (everything or self._listed_at is None or not self._conn.events_enabled
                or now - self._listed_at >= self.refresh_s):
            found = self._conn.call("list domains", self._list)
            self._listed_at = now
            return found, set(self._vms) - set(found)
        if stale:
            looked = self._conn.call("look up %d VM(s)" % len(stale), self._lookup, stale)
            return ({u: d for u, d in looked.items() if d is not None},
                    {u for u, d in looked.items() if d is None and u in self._vms})
        return None

    def vms(self):
        stale, everything, tunables = self._events.take()
        stale |= self.originals.changed_tunables(self._vms, tunables)
        now = self._clock()
        changed = self._changed_domains(stale, everything, now)
        if changed is None:
            return self._vms.infos()
        found, gone = changed
        # Events of VMs no longer there (some started and destroyed between
        # two sweeps, never adopted) are dropped with them.
        self._events.forget_all((set(self._events.started()) if everything else stale)
                                - set(found))
        starting = set()
        for uuid, dom in found.items():
            vm = self._vms.get(uuid)
            if not (vm is None or everything or uuid in stale
                    or now - vm.adopted_at >= self.refresh_s):
                continue
            try:
                if self._starting(dom):
                    starting.add(uuid)
                    continue
                fresh = self.adopter.adopt(dom, previous=vm)
            except exceptions.VMGone:
                LOG.debug("VM %s vanished while being adopted", uuid)
                if vm is not None:
                    gone.add(uuid)
                continue
            except exceptions.HypervisorUnavailable:
                self._events.put_back(stale)
                raise
            except exceptions.HypervisorError as exc:
                LOG.warning("cannot adopt VM %s: %s", uuid, exc)
                continue
            if vm is None:
                LOG.debug("adopted VM %s (%s): %d vCPU, knobs %s, SLA from %s",
                          fresh.info.name, uuid, fresh.info.vcpus,
                          fresh.info.knobs.driver, fresh.info.sla_source)
            self._vms.put(uuid, fresh)
        if starting:
            # Looked up again next sweep (the start event may come before).
            self._events.put_back(starting)
        for uuid in gone:
            vm = self._vms.pop(uuid)
            # Also for a VM gone before it was adopted (started and destroyed
            # between two sweeps): what its events left behind goes with it.
            self.channel.forget(uuid)
            self.sla.forget(uuid)
            self.originals.forget(uuid)
            self._events.forget_all((uuid,))
            if vm is not None:
                LOG.info("VM %s (%s) is gone", vm.info.name, uuid)
                self.originals.stopped(vm)
        return self._vms.infos()

    def _starting(self, dom):
        """True while libvirt is still starting ``dom``: it is left alone until started.

        A domain is listed as active from the moment its QEMU process exists,
        but libvirt holds its start job (400-500 ms for a TCG guest, measured)
        until it runs: a knob write waits for the job, and a scheduler read in
        that window can meet the vCPU cgroups half made ("Failed to create v2
        cgroup .../vcpu0/" on a hybrid cgroup host; once, with such reads in
        flight, the start itself failed). ``virDomainGetState`` takes no job.
        """
        with self._conn.translated("state of VM %s" % dom.UUIDString()):
            state, reason = dom.state()
        return (state == libvirt.VIR_DOMAIN_PAUSED
                and reason == libvirt.VIR_DOMAIN_PAUSED_STARTING_UP)

    def latency_problems(self):
        """``{uuid: why}`` of the running VMs that should report latency and cannot."""
        return {uuid: vm.info.latency_problem for uuid, vm in self._vms.items()
                if vm.info.latency_problem}

    def original_updates(self):
        """The :class:`~resex_libvirt.hypervisor.originals.OriginalsUpdate` s, oldest first."""
        return self.originals.updates()

    def adopt_operator_values(self, values):
        self.originals.adopt_operator_values(values)

    # -- statistics ------------------------------------------------------------

    def cpu_times(self):
        return self._stats.cpu_times()

    def domain_stats(self):
        """``{uuid: bulk stats record}`` of the last :meth:`cpu_times` sweep.

        Carries ``net.*`` (the interface group), so the interface monitor
        needs no call of its own; ``{}`` where the driver has no bulk stats.
        """
        return self._stats.sweep()

    def vcpu_times(self):
        """``{uuid: VcpuTimes}`` (run-queue delay) of the last :meth:`cpu_times` sweep."""
        return self._stats.vcpu_times()

    def pcpus(self):
        return self._stats.pcpus()

    # -- knobs -----------------------------------------------------------------

    def _vm(self, uuid):
        vm = self._vms.get(uuid)
        if vm is not None:
            return vm

        def adopt(conn):
            return self.adopter.adopt(conn.lookupByUUIDString(uuid))

        vm = self._conn.call("look up VM %s" % uuid, adopt)
        self._vms.put(uuid, vm)
        return vm

    def _domain_call(self, uuid, what, fn):
        def run(conn):
            return fn(conn.lookupByUUIDString(uuid))
        return self._conn.call("%s of VM %s" % (what, uuid), run)

    def caps_in_force(self):
        out = {}
        for uuid, vm in self._vms.items():
            if vm.mapping is not None and vm.written:
                out[uuid] = vm.mapping.cap_of(vm.written, vm.info.vcpus)
        return out

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
