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

"""vCPU run-queue delay read from the kernel, as libvirt reads it, without asking QEMU.

libvirt's ``vcpu.<n>.delay`` (ns a vCPU's thread sat runnable in the host's
run queue: the guest's steal time) is the second field of
``/proc/<QEMU pid>/task/<vCPU thread>/schedstat``, and ``vcpu.<n>.time``
the first, which libvirt rounds to the clock tick. libvirt 9 gives them only
in the ``VCPU`` group of ``virConnectGetAllDomainStats``, whose collection
also asks QEMU itself over its monitor (``query-stats``), and so does the
``CPU_TOTAL`` group: a guest whose CPU cap throttles QEMU's main loop
answers late. Measured on the lab's libvirt 9.0 / QEMU 7.2, one TCG guest:
the bulk call took 1 ms uncapped and 60-180 ms with the guest capped at 5 %
(``global_quota 1000`` per 20 ms), longer than the agent's wait for a
sweep, so a host with one guest capped hard read nothing. Reading the files
takes no time and no monitor.

QEMU names its vCPU threads ``CPU <n>/KVM`` (``/TCG`` without KVM); libvirt
starts QEMU with ``-name ...,debug-threads=on`` so that they are named. The
QEMU pid is the one libvirt's QEMU driver writes to ``<run dir>/<domain
name>.pid`` (:func:`~resex_libvirt.hypervisor.psi.qemu_pid`). Where neither
can be read (another driver, a remote libvirtd, a QEMU without thread names)
a VM has no :class:`~resex_libvirt.hypervisor.base.VcpuTimes`: no evidence,
as with a driver that reports no delays.
"""

import os
import re

from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import psi

#: The name QEMU gives a vCPU thread (``/proc/<pid>/task/<tid>/comm``).
VCPU_THREAD = re.compile(r"^CPU (\d+)/")


def parse_schedstat(text):
    """``(run_ns, delay_ns)`` of a ``schedstat`` text (ValueError if malformed)."""
    fields = text.split()
    if len(fields) < 2:
        raise ValueError("schedstat has %d field(s), not 3: %r" % (len(fields), text[:40]))
    run, delay = int(fields[0]), int(fields[1])
    if run < 0 or delay < 0:
        raise ValueError("negative schedstat times: %r" % text[:40])
    return run, delay


class VcpuThreads:
    """The run delays of libvirt QEMU domains' vCPU threads, by domain name.

    ``run_dir``: where the QEMU driver writes the domains' pid files;
    ``proc``: the proc file system (both for tests).
    """

    def __init__(self, run_dir=psi.QEMU_RUN_DIR, proc="/proc"):
        self.run_dir = run_dir
        self.proc = proc

    def read_one(self, name):
        """The :class:`VcpuTimes` of domain ``name`` (``ValueError`` saying why if none)."""
        try:
            pid = psi.qemu_pid(name, self.run_dir)
        except psi.PressureUnavailable as exc:
            raise ValueError(str(exc)) from exc
        tasks = os.path.join(self.proc, str(pid), "task")
        try:
            tids = os.listdir(tasks)
        except OSError as exc:
            raise ValueError("QEMU process %d of domain %s: %s" % (pid, name, exc)) from exc
        delay = run = seen = 0
        for tid in tids:
            try:
                with open(os.path.join(tasks, tid, "comm")) as f:
                    if not VCPU_THREAD.match(f.read()):
                        continue
                with open(os.path.join(tasks, tid, "schedstat")) as f:
                    ran, waited = parse_schedstat(f.read())
            except OSError:
                continue        # the thread ended meanwhile (a vCPU unplugged)
            run += ran
            delay += waited
            seen += 1
        if not seen:
            raise ValueError("QEMU process %d of domain %s has no thread named "
                             "'CPU <n>/...'" % (pid, name))
        return base.VcpuTimes(delay, run, seen)

    def read(self, names):
        """``names``: ``{uuid: domain name}``; ``({uuid: VcpuTimes}, {uuid: why not})``."""
        got, why = {}, {}
        for uuid, name in names.items():
            try:
                got[uuid] = self.read_one(name)
            except ValueError as exc:
                why[uuid] = str(exc)
        return got, why
