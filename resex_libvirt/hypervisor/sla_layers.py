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

"""A VM's SLA from its layers: own metadata > Nova's flavor > the compute API > defaults.

Each layer is parsed per key over the one below it
(:func:`resex_libvirt.sla.parse`); an invalid value is logged once, naming
the VM, the source and the key, and the lower layer's value applies.

A VM's ensemble (``resex:ensemble``, :func:`resex_libvirt.sla.parse_ensemble`)
is not part of its SLA: :meth:`SLAResolver.ensemble` reads it from the
domain's own metadata, else from the server group the compute API names
(:data:`~resex_libvirt.hypervisor.nova_sla.SERVER_GROUP`). A flavor that sets
it is wrong (a flavor is shared by many groups): the key is unknown there,
logged once and ignored as any unknown key.
"""

import logging

from resex_libvirt import exceptions
from resex_libvirt.hypervisor import nova_sla
from resex_libvirt import sla as sla_mod

LOG = logging.getLogger(__name__)


class SLAResolver:
    """Resolves the SLA of a domain's :class:`~resex_libvirt.hypervisor.metadata.DomainFacts`.

    ``defaults``: the configured :class:`~resex_libvirt.sla.SLA` under every
    VM's own. ``nova_sla``: an optional compute-API source with
    ``lookup(uuid)``.
    """

    def __init__(self, defaults=None, nova_sla=None):
        self.defaults = defaults if defaults is not None else sla_mod.SLA()
        self._nova = nova_sla
        self._warned = set()

    def resolve(self, facts):
        """``(SLA, source)``: source is ``metadata``, ``flavor``, ``nova`` or ``default``."""
        sla = self.defaults
        source = "default"
        api_specs = self._nova.lookup(facts.uuid) if self._nova is not None else None
        if api_specs:
            sla = sla_mod.parse(api_specs, base=sla, on_error=self._warner(facts, "nova"))
            source = "nova"
        flavor_specs = {k: v for k, v in (facts.nova.extra_specs if facts.nova else {}).items()
                        if k.startswith(sla_mod.PREFIX)}
        if flavor_specs:
            sla = sla_mod.parse(flavor_specs, base=sla,
                                on_error=self._warner(facts, "the flavor"))
            source = "flavor"
        own = {k: v for k, v in facts.sla_specs.items() if k != sla_mod.ENSEMBLE}
        if own:
            sla = sla_mod.parse(own, base=sla, on_error=self._warner(facts, "metadata"))
            source = "metadata"
        return sla, source

    def ensemble(self, facts):
        """The VM's ensemble: its metadata's ``resex:ensemble``, else its Nova server group.

        An invalid value is logged once and ignored (the server group, if
        any, applies). Call after :meth:`resolve`, which asks the compute
        API (one answer serves both).
        """
        raw = facts.sla_specs.get(sla_mod.ENSEMBLE)
        if raw is not None:
            try:
                return sla_mod.parse_ensemble(raw)
            except exceptions.SLAError as exc:
                self._warner(facts, "metadata")(exc)
        api = self._nova.lookup(facts.uuid) if self._nova is not None else None
        group = (api or {}).get(nova_sla.SERVER_GROUP)
        return group if sla_mod.is_ensemble(group) else None

    def forget(self, uuid):
        """``uuid`` is gone: the invalid values said about it are dropped (said again if back)."""
        self._warned = {token for token in self._warned if token[0] != uuid}

    def _warner(self, facts, source):
        def warn(error):
            token = (facts.uuid, source, error.key, repr(error.value))
            if token not in self._warned:
                self._warned.add(token)
                LOG.warning("VM %s (%s): invalid %s from %s (%s); the default applies",
                            facts.name, facts.uuid, error.key, source, error)
        return warn
