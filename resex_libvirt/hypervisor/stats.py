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

"""The domains' CPU time, interface counters and vCPU run delay, one sweep at a time.

Nothing here asks QEMU: a sweep that waits on a guest's monitor is as slow as
the slowest guest, and a guest capped hard answers late (see
:mod:`~resex_libvirt.hypervisor.vcpu_stats`). Per sweep:

* one ``virConnectGetAllDomainStats(INTERFACE)`` (the running domains and
  their taps' counters, from the host's ``/proc/net/dev``);
* each adopted domain's CPU time from ``virDomainGetCPUStats(total)``, which
  libvirt's QEMU driver reads from the domain's cgroup (``cpuacct.usage`` or
  ``cpu.stat``), the same figure as the bulk ``cpu.time``; where the driver
  has no such call (the test driver), ``virDomainGetInfo``'s CPU time;
* each adopted domain's vCPU run delay from the kernel's ``schedstat`` of its
  vCPU threads (:class:`~resex_libvirt.hypervisor.vcpu_stats.VcpuThreads`).

The bulk ``CPU_TOTAL`` and ``VCPU`` groups are not asked for: libvirt 9
collects both through QEMU's monitor (``query-stats``). A driver without bulk
statistics (libxl) is read domain by domain from the adopted VMs' UUIDs.
"""

import logging

import libvirt

from resex_libvirt import exceptions
from resex_libvirt.hypervisor import vcpu_stats

LOG = logging.getLogger(__name__)


class DomainStats:
    """Reads the statistics of the running domains over ``connection``.

    ``uuids()`` names the adopted VMs: only theirs are read. ``threads``
    reads the vCPU run delays (a
    :class:`~resex_libvirt.hypervisor.vcpu_stats.VcpuThreads`, by default
    the system QEMU driver's).
    """

    def __init__(self, connection, uuids, threads=None):
        self._conn = connection
        self._uuids = uuids
        self._threads = threads if threads is not None else vcpu_stats.VcpuThreads()
        self._bulk_stats = None   # None: not known yet; True/False: the driver has them
        self._per_domain_cpu_stats = True
        self._sweep = {}
        self._vcpus = {}
        self._no_delay = set()    # VMs whose missing run delay was said
        self._pcpus = None

    def reset(self):
        """After a reconnect: the driver may have changed, try the bulk statistics again."""
        self._bulk_stats = None

    def cpu_times(self):
        """``{uuid: CPU ns}`` of the adopted running domains (a new sweep)."""
        if self._bulk_stats is not False:
            out = self._conn.call("domain stats", self._bulk)
            if out is not None:
                self._bulk_stats = True
                return out
            LOG.info("no bulk domain stats at %s: reading each domain", self._conn.uri)
            self._bulk_stats = False
            self._sweep = {}
            self._vcpus = {}
        return self._conn.call("CPU time per domain", self._per_domain_cpu)

    def sweep(self):
        """``{uuid: bulk stats record}`` (``net.*``) of the last sweep (``{}``: no bulk stats)."""
        return self._sweep

    def vcpu_times(self):
        """``{uuid: VcpuTimes}`` (run-queue delay) of the last :meth:`cpu_times` sweep."""
        return self._vcpus

    def pcpus(self):
        if self._pcpus is None:
            self._pcpus = int(self._conn.call("node info", lambda conn: conn.getInfo())[2])
        return self._pcpus

    def _bulk(self, conn):
        try:
            stats = conn.getAllDomainStats(libvirt.VIR_DOMAIN_STATS_INTERFACE,
                                           libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() in (libvirt.VIR_ERR_NO_SUPPORT,
                                        libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED):
                return None
            raise
        adopted = set(self._uuids())
        sweep, out, names = {}, {}, {}
        for dom, record in stats:
            uuid = dom.UUIDString()
            sweep[uuid] = record
            if uuid not in adopted:
                continue
            cpu = self._cpu_of(uuid, self._domain_cpu, dom)
            if cpu is not None:
                out[uuid] = cpu
                names[uuid] = dom.name()
        self._sweep = sweep
        self._vcpus = self._delays(names)
        return out

    def _delays(self, names):
        got, why = self._threads.read(names)
        for uuid, reason in why.items():
            if uuid not in self._no_delay:
                self._no_delay.add(uuid)
                LOG.info("no vCPU run delay for VM %s: %s", uuid, reason)
        self._no_delay.intersection_update(names)
        return got

    def _cpu_of(self, uuid, read, *args):
        """``read(*args)``, VM ``uuid``'s CPU time; ``None`` if it is gone or failed (logged)."""
        try:
            with self._conn.translated("CPU time of VM %s" % uuid):
                return read(*args)
        except exceptions.VMGone:
            LOG.debug("VM %s vanished while its CPU time was read", uuid)
        except exceptions.HypervisorUnavailable:
            raise
        except exceptions.HypervisorError as exc:
            LOG.warning("no CPU time for VM %s: %s", uuid, exc)
        return None

    def _domain_cpu(self, dom):
        if self._per_domain_cpu_stats:
            try:
                return int(dom.getCPUStats(True)[0]["cpu_time"])
            except libvirt.libvirtError as exc:
                code = exc.get_error_code()
                if code == libvirt.VIR_ERR_OPERATION_INVALID and not dom.isActive():
                    raise exceptions.VMGone("domain %s stopped" % dom.UUIDString()) from exc
                if code not in (libvirt.VIR_ERR_NO_SUPPORT,
                                libvirt.VIR_ERR_OPERATION_INVALID):
                    raise
                self._per_domain_cpu_stats = False
        return int(dom.info()[4])

    def _per_domain_cpu(self, conn):
        out = {}
        for uuid in self._uuids():
            cpu = self._cpu_of(uuid, lambda: self._domain_cpu(conn.lookupByUUIDString(uuid)))
            if cpu is not None:
                out[uuid] = cpu
        return out
