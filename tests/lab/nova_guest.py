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

"""Lab guests defined as Nova defines them, from Nova's own config classes.

:func:`domain_xml` builds the domain with ``nova.virt.libvirt.config``
exactly as ``LibvirtDriver._get_guest_config`` assembles its parts for a
direct-kernel-boot TCG guest: ``LibvirtConfigGuest`` with the
``<nova:instance>`` metadata (``LibvirtConfigGuestMetaNovaInstance`` with a
``LibvirtConfigGuestMetaNovaFlavor`` carrying the flavor's extra specs),
``<cputune>`` from ``quota:cpu_*`` as ``_update_guest_cputune`` writes it,
and the QEMU guest agent channel as ``_add_qga_device`` adds it for an image
with ``hw_qemu_guest_agent=yes``. No resex channel: the agent hot-plugs it.

:class:`NovaGuest` plays Nova's lifecycle on that XML: boot (define +
start), hard reboot (destroy and undefine, define the XML again, start:
``LibvirtDriver._hard_reboot``), resize (the same with a new flavor's extra
specs).

The guest role ``report`` runs the static C BenchEx server and an open-loop
BenchEx client against it on the guest's loopback, reporting through
``/dev/virtio-ports/org.resex.latency.0``. A busybox initramfs has no udev,
so the role keeps that link itself, as udev's rule does
(``SUBSYSTEM=="virtio-ports", ATTR{name}=="?*", SYMLINK+="virtio-ports/$attr{name}"``).
"""

import os
import time
import uuid as uuid_mod

from nova.virt.libvirt import config as vconfig

from resex_libvirt.hypervisor import metadata as metadata_mod
from tests.lab import harness

PORT = 7100

#: The in-guest reporter: BenchEx server + client on loopback, the port linked like udev.
REPORT_ROLE = (
    "ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up\n"
    "mkdir -p /dev/virtio-ports\n"
    "( while :; do for p in /sys/class/virtio-ports/vport*; do [ -e \"$p/name\" ] || continue;"
    " n=$(cat \"$p/name\"); [ -n \"$n\" ] && ln -sfn /dev/${p##*/} /dev/virtio-ports/$n;"
    " done; sleep 0.2; done ) &\n"
    "echo resex: reporter\n"
    "/bin/benchex server --bind 127.0.0.1 --port %d &\n"
    "sleep 1\n"
    "/bin/benchex client --host 127.0.0.1 --port %d --rate 20 --requests 200000"
    " --report-channel /dev/virtio-ports/%s --report-interval 0.2\n"
    % (PORT, PORT, metadata_mod.LATENCY_CHANNEL_NAME))


def domain_xml(name, uuid, kernel, initrd, console, extra_specs, role="report",
               memory_mib=96, vcpus=1, qemu_guest_agent=True):
    """The domain XML Nova 34's config classes produce for this guest."""
    guest = vconfig.LibvirtConfigGuest()
    guest.virt_type = "qemu"
    guest.name = name
    guest.uuid = uuid
    guest.memory = memory_mib * 1024
    guest.vcpus = vcpus
    guest.os_type = "hvm"
    guest.os_mach_type = "pc"
    guest.os_kernel = kernel
    guest.os_initrd = initrd
    guest.os_cmdline = "%s resex.role=%s" % (harness.CMDLINE, role)

    meta = vconfig.LibvirtConfigGuestMetaNovaInstance()
    meta.package = "34.0.0"
    meta.name = name
    meta.creationTime = time.time()
    flavor = vconfig.LibvirtConfigGuestMetaNovaFlavor()
    flavor.name = "lab.latency"
    flavor.id = "1"
    flavor.memory = memory_mib
    flavor.vcpus = vcpus
    flavor.disk = flavor.swap = flavor.ephemeral = 0
    flavor.extra_specs = dict(extra_specs)
    meta.flavor = flavor
    guest.metadata.append(meta)

    # LibvirtDriver._update_guest_cputune
    for knob in ("shares", "period", "quota"):
        key = "quota:cpu_" + knob
        if key in extra_specs:
            if guest.cputune is None:
                guest.cputune = vconfig.LibvirtConfigGuestCPUTune()
            setattr(guest.cputune, knob, int(extra_specs[key]))

    serial = vconfig.LibvirtConfigGuestSerial()
    serial.type = "file"
    serial.source_path = console
    guest.add_device(serial)
    if qemu_guest_agent:
        # LibvirtDriver._add_qga_device (image property hw_qemu_guest_agent=yes)
        qga = vconfig.LibvirtConfigGuestChannel()
        qga.type = "unix"
        qga.target_name = "org.qemu.guest_agent.0"
        qga.source_path = "/var/lib/libvirt/qemu/%s.%s.sock" % (
            "org.qemu.guest_agent.0", name)
        guest.add_device(qga)
    return guest.to_xml()


class NovaGuest:
    """One guest driven through Nova's lifecycle steps (define/start/destroy)."""

    def __init__(self, name, kernel, initrd, extra_specs, workdir, role="report",
                 qemu_guest_agent=True):
        self.name = name
        self.uuid = str(uuid_mod.uuid4())
        self.kernel = kernel
        self.initrd = initrd
        self.extra_specs = dict(extra_specs)
        self.role = role
        self.qemu_guest_agent = qemu_guest_agent
        self.console = os.path.join(workdir, "%s.console" % name)

    def xml(self):
        return domain_xml(self.name, self.uuid, self.kernel, self.initrd, self.console,
                          self.extra_specs, role=self.role,
                          qemu_guest_agent=self.qemu_guest_agent)

    def boot(self, conn):
        """Define and start, as spawn does; returns the domain."""
        dom = conn.defineXML(self.xml())
        dom.create()
        return dom

    def hard_reboot(self, conn):
        """``LibvirtDriver._hard_reboot``: destroy (which undefines), define the XML, start."""
        dom = conn.lookupByUUIDString(self.uuid)
        dom.destroy()
        dom.undefine()
        return self.boot(conn)

    def resize(self, conn, extra_specs):
        """A resize on the same host: the domain is redefined with the new flavor."""
        self.extra_specs = dict(extra_specs)
        return self.hard_reboot(conn)

    def destroy(self, conn):
        try:
            dom = conn.lookupByUUIDString(self.uuid)
        except Exception:
            return
        try:
            if dom.isActive():
                dom.destroy()
        finally:
            dom.undefine()
