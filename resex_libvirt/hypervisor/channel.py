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

"""The latency channel hot-plugged into a running domain (live only, never persistent).

See doc/source/hypervisor.rst ("The latency channel").
"""

import logging
import time

import libvirt

from resex_libvirt import exceptions
from resex_libvirt.hypervisor import connection as connection_mod
from resex_libvirt.hypervisor import metadata as metadata_mod

LOG = logging.getLogger(__name__)

#: Which VMs get the latency channel hot-plugged.
HOTPLUG_CHOICES = ("sensitive", "all", "none")

#: Why a VM cannot report latency (``VMInfo.latency_problem``).
NO_CONTROLLER = ("no virtio-serial controller, so no latency channel can be hot-plugged "
                 "(boot it from an image with hw_qemu_guest_agent=yes)")


class ChannelHotplug:
    """Hot-plugs ``org.resex.latency.0`` into the VMs ``policy`` names.

    ``policy``: one of :data:`HOTPLUG_CHOICES`. ``clock``: the monotonic
    clock of ``started_at``, which gives (once) when a VM's last start event
    came, so the delay from a start to its channel is measured
    (:attr:`attach_delays`).
    """

    def __init__(self, policy, clock, started_at):
        if policy not in HOTPLUG_CHOICES:
            raise exceptions.ConfigError("channel_hotplug must be one of %s, not %r"
                                         % (", ".join(HOTPLUG_CHOICES), policy))
        self.policy = policy
        #: False: only say which VMs could not get a channel, attach nothing
        #: (``resex-agent --check`` changes nothing).
        self.attach = True
        #: Seconds from the last start event to the channel being attached, per VM.
        self.attach_delays = {}
        self._clock = clock
        self._started_at = started_at
        self._warned = set()

    def wants(self, sla, facts):
        """True if a VM of ``sla`` should have a channel and ``facts`` show none."""
        return facts.latency_channel is None and (self.policy == "all" or (
            self.policy == "sensitive" and sla.sensitive))

    def forget(self, uuid):
        """``uuid`` is gone: its attach delay and the problems said about it are dropped."""
        self.attach_delays.pop(uuid, None)
        self._warned = {token for token in self._warned if token[0] != uuid}

    def plug(self, dom, facts):
        """:meth:`hotplug`, saying once per VM and problem why a VM cannot report."""
        facts, problem = self.hotplug(dom, facts)
        token = (facts.uuid, problem)
        if problem is not None and token not in self._warned:
            self._warned.add(token)
            LOG.warning("VM %s (%s) cannot report latency: %s", facts.name, facts.uuid, problem)
        return facts, problem

    def hotplug(self, dom, facts):
        """Attach the channel live; returns ``(facts, problem)``, ``problem`` None or why not.

        Raises ``VMGone`` or ``HypervisorUnavailable``; any other libvirt
        error is the problem.
        """
        if not facts.virtio_serial:
            return facts, NO_CONTROLLER
        if not self.attach:
            return facts, None
        began = time.monotonic()
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
        start = self._started_at(facts.uuid)
        if start is not None:
            self.attach_delays[facts.uuid] = self._clock() - start
        LOG.info("VM %s (%s): latency channel hot-plugged at %s (%.1f ms%s)",
                 fresh.name, fresh.uuid, fresh.latency_channel,
                 (time.monotonic() - began) * 1000.0,
                 "" if start is None else ", %.0f ms after its start event"
                 % (1000.0 * self.attach_delays[facts.uuid]))
        return fresh, None
