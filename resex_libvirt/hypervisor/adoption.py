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

"""Adopting one domain: what the agent knows of a running VM, read from libvirt.

Its live XML, persistent ``<cputune>`` and scheduler are read once; the
knob mapping, the SLA, the latency channel and the originals are each
worked out by the part whose job it is.
"""

import logging
import xml.etree.ElementTree as ET

import libvirt

from resex_libvirt import exceptions
from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import domains as domains_mod
from resex_libvirt.hypervisor import knobs as knobs_mod
from resex_libvirt.hypervisor import metadata as metadata_mod
from resex_libvirt.hypervisor import nova_metadata

LOG = logging.getLogger(__name__)


class Adopter:
    """Makes the :class:`~resex_libvirt.hypervisor.domains.Adopted` record of a domain.

    ``sla``: an :class:`~resex_libvirt.hypervisor.sla_layers.SLAResolver`;
    ``channel``: a :class:`~resex_libvirt.hypervisor.channel.ChannelHotplug`;
    ``originals``: an :class:`~resex_libvirt.hypervisor.originals.Originals`.
    ``qemu_period_us`` and ``cgroup_version`` go to
    :func:`~resex_libvirt.hypervisor.knobs.discover`.
    """

    def __init__(self, connection, sla, channel, originals, clock, qemu_period_us=None,
                 cgroup_version=1):
        self._conn = connection
        self._sla = sla
        self._channel = channel
        self._originals = originals
        self._clock = clock
        self.qemu_period_us = qemu_period_us
        self.cgroup_version = cgroup_version

    def adopt(self, dom, previous=None):
        """Read ``dom`` (``previous``: its record before a re-read); raises our errors."""
        uuid = dom.UUIDString()
        with self._conn.translated("adopt VM %s" % uuid):
            xml = dom.XMLDesc(0)
            inactive = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
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
        sla, source = self._sla.resolve(facts)
        problem = None
        if self._channel.wants(sla, facts):
            with self._conn.translated("hot-plug the latency channel of VM %s" % uuid):
                facts, problem = self._channel.plug(dom, facts)
        info = base.VMInfo(
            uuid=uuid, name=facts.name, vcpus=facts.vcpus, sla=sla,
            knobs=mapping.knobs if mapping is not None else base.MONITOR_ONLY,
            sla_source=source, latency_channel=facts.latency_channel,
            interfaces=facts.interfaces, hostdevs=facts.hostdevs, latency_problem=problem,
            nova_name=facts.nova_name, addresses=facts.addresses,
            ensemble=self._sla.ensemble(facts),
            project=facts.project.uuid if facts.project is not None else None,
            project_name=facts.project.name if facts.project is not None else None,
            flavor=(facts.nova.name or None) if facts.nova is not None else None)
        live = mapping.read(params) if mapping is not None else {}
        vm = domains_mod.Adopted(
            info=info, facts=facts, mapping=mapping, written=dict(live),
            adopted_at=self._clock(), dom_id=dom_id,
            originals=self._originals.of_definition(facts, mapping, persistent, flavor))
        if previous is not None:
            self._originals.follow(previous, vm, live)
        elif mapping is not None:
            self._originals.seed(vm)
        return vm
