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

"""vCPU run-queue delay from libvirt's bulk domain stats (the ``vcpu.*`` group).

``virConnectGetAllDomainStats(VIR_DOMAIN_STATS_VCPU)`` gives, per vCPU
``<n>``, ``vcpu.<n>.time`` (ns it ran) and, on QEMU/KVM, ``vcpu.<n>.delay``
(ns its thread sat runnable in the host's run queue, from
``/proc/<pid>/task/<tid>/schedstat``: the guest's steal time) or, from older
libvirt, ``vcpu.<n>.wait``. A record without either says nothing (the test
driver, libxl): no :class:`~resex_libvirt.hypervisor.base.VcpuTimes`.
"""

from resex_libvirt.hypervisor import base


def from_record(record):
    """The :class:`VcpuTimes` of one domain's stats record, or ``None`` without delays."""
    count = record.get("vcpu.current")
    if not isinstance(count, int) or count <= 0:
        return None
    delay = run = seen = 0
    for n in range(count):
        waited = record.get("vcpu.%d.delay" % n, record.get("vcpu.%d.wait" % n))
        ran = record.get("vcpu.%d.time" % n)
        if not isinstance(waited, int) or not isinstance(ran, int):
            continue
        delay += max(0, waited)
        run += max(0, ran)
        seen += 1
    if not seen:
        return None
    return base.VcpuTimes(delay, run, seen)


def from_sweep(sweep):
    """``{uuid: VcpuTimes}`` of a bulk sweep ``{uuid: record}`` (those without delays left out)."""
    out = {}
    for uuid, record in sweep.items():
        times = from_record(record)
        if times is not None:
            out[uuid] = times
    return out
