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

"""Builds the libvirt hypervisor from ``[libvirt]`` and ``[sla]`` (the service side).

:mod:`resex_libvirt.hypervisor` takes plain arguments; this module reads the
agent's configuration, detects the host's cgroup version and hands both over.
"""

import os

from resex_agent import nova_client
from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import libvirt_host
from resex_libvirt import sla as sla_mod

#: Where the unified (v2) hierarchy lists its controllers.
CGROUP_ROOT = "/sys/fs/cgroup"


def cgroup_version(root=CGROUP_ROOT):
    """2 when ``root`` is a cgroup v2 (unified) mount, else 1.

    The unified hierarchy has ``cgroup.controllers`` at its root; a v1 (or
    hybrid) host has one mount per controller and no such file there.
    """
    return 2 if os.path.exists(os.path.join(root, "cgroup.controllers")) else 1


def sla_defaults(conf):
    """The :class:`SLA` of the ``[sla]`` group (options named like the keys).

    Raises :class:`~resex_libvirt.exceptions.SLAError` (a ``ConfigError``)
    when the defaults contradict each other (limit below reservation).
    """
    group = conf.sla
    specs = {}
    for key in sla_mod.KEYS:
        value = group[key[len(sla_mod.PREFIX):]]
        if value is not None:
            specs[key] = value
    return sla_mod.parse(specs)


class _OwnedNova(libvirt_host.LibvirtHypervisor):
    """A hypervisor that closes the compute-API source it was built with."""

    owned_nova = None

    def close(self):
        super().close()
        if self.owned_nova is not None:
            self.owned_nova.close()
            self.owned_nova = None


def build(conf, cgroup_root=CGROUP_ROOT, read_only=False):
    """The :class:`LibvirtHypervisor` ``[libvirt]`` and ``[sla]`` describe.

    With ``[nova] sla_lookup`` (off by default) a compute-API source is
    created from the ``[nova]`` keystoneauth options (:mod:`resex_agent.nova_client`)
    and closed with the hypervisor. ``read_only`` (``--check``) attaches no
    latency channel (it only says which VMs could not get one) and does not
    declare :attr:`~resex_libvirt.hypervisor.base.Capability.ACTUATES`: it
    reads, never writes a knob.
    """
    group = conf.libvirt
    nova = nova_client.sla_source(conf)
    try:
        hyp = _OwnedNova(
            group.connection_uri, sla_defaults=sla_defaults(conf), nova_sla=nova,
            backoff_min=group.reconnect_backoff_min,
            backoff_max=group.reconnect_backoff_max, events=group.events,
            refresh_s=group.metadata_refresh_interval,
            qemu_period_us=group.qemu_cap_period_us,
            cgroup_version=cgroup_version(cgroup_root),
            channel_hotplug=group.latency_channel_hotplug)
    except BaseException:
        if nova is not None:
            nova.close()
        raise
    hyp.owned_nova = nova
    hyp.attach_channels = not read_only
    if read_only:
        hyp.capabilities = hyp.capabilities - {base.Capability.ACTUATES}
    return hyp
