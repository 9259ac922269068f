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

One ``virConnectGetAllDomainStats(CPU_TOTAL | INTERFACE | VCPU)`` per sweep
where the driver offers ``cpu.time`` (QEMU); otherwise, per domain,
``virDomainGetCPUStats(total)`` and then ``virDomainGetInfo`` (libxl has no
bulk stats; the test driver's carry only ``state.*``).
"""

import logging

import libvirt

from resex_libvirt import exceptions
from resex_libvirt.hypervisor import vcpu_stats

LOG = logging.getLogger(__name__)


class DomainStats:
    """Reads the statistics of the running domains over ``connection``.

    ``uuids()`` names the adopted VMs, read one by one where the driver has
    no bulk statistics.
    """

    def __init__(self, connection, uuids):
        self._conn = connection
        self._uuids = uuids
        self._bulk_stats = None   # None: not known yet; True/False: the driver has them
        self._per_domain_cpu_stats = True
        self._sweep = {}
        self._pcpus = None

    def reset(self):
        """After a reconnect: the driver may have changed, try the bulk statistics again."""
        self._bulk_stats = None

    def cpu_times(self):
        """``{uuid: CPU ns}`` of the running domains (a new sweep)."""
        if self._bulk_stats is not False:
            out = self._conn.call("bulk domain stats", self._bulk)
            if out is not None:
                self._bulk_stats = True
                return out
            LOG.info("no bulk cpu.time at %s: reading CPU time per domain", self._conn.uri)
            self._bulk_stats = False
            self._sweep = {}
        return self._conn.call("CPU time per domain", self._per_domain_cpu)

    def sweep(self):
        """``{uuid: bulk stats record}`` of the last :meth:`cpu_times` (``{}``: no bulk stats)."""
        return self._sweep

    def vcpu_times(self):
        """``{uuid: VcpuTimes}`` (run-queue delay) of the last :meth:`cpu_times` sweep."""
        return vcpu_stats.from_sweep(self._sweep)

    def pcpus(self):
        if self._pcpus is None:
            self._pcpus = int(self._conn.call("node info", lambda conn: conn.getInfo())[2])
        return self._pcpus

    def _bulk(self, conn):
        try:
            stats = conn.getAllDomainStats(
                libvirt.VIR_DOMAIN_STATS_CPU_TOTAL | libvirt.VIR_DOMAIN_STATS_INTERFACE
                | libvirt.VIR_DOMAIN_STATS_VCPU,
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
        for uuid in self._uuids():
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
