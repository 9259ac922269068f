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

"""The adopted domains: the one record of what the agent knows of each running VM.

Whatever adopts a VM (the domain list, an event, the periodic refresh, a
knob write or a restore from the journal before the first list) puts it
here, and :meth:`DomainCache.infos` is always derived from what is here, so
no path can adopt a VM that the control loop does not see.
"""

import collections
import dataclasses

from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import knobs as knobs_mod
from resex_libvirt.hypervisor import metadata as metadata_mod

#: Values the agent wrote recently, per knob: a tunable event names the value
#: in force when it was sent, which may be one of the agent's earlier writes.
HISTORY = 8


@dataclasses.dataclass
class Adopted:
    """What the agent knows about one running domain.

    ``written``: the knob values last known in force (read at adoption,
    then what the agent wrote). ``ours``: per knob, the values the agent
    wrote recently; a live value among them is the agent's, whatever its
    period. ``originals``: the VM's knobs without the agent. ``overrides``:
    originals an operator set live; ``held``: the knobs the operator took
    over (the agent writes them no more until the domain restarts).
    """

    info: base.VMInfo
    facts: metadata_mod.DomainFacts
    mapping: knobs_mod.KnobMapping | None
    written: dict
    adopted_at: float
    dom_id: int = -1
    originals: dict = dataclasses.field(default_factory=dict)
    ours: dict = dataclasses.field(default_factory=dict)
    overrides: dict = dataclasses.field(default_factory=dict)
    held: set = dataclasses.field(default_factory=set)

    def agent_wrote(self, name, value):
        history = self.ours.get(name)
        return history is not None and value in history

    def record(self, params):
        for name, value in params.items():
            self.ours.setdefault(name, collections.deque(maxlen=HISTORY)).append(value)


class DomainCache:
    """``uuid -> Adopted`` with the ``{uuid: VMInfo}`` view derived from it.

    ``generation`` grows whenever the view changes (a VM added or removed,
    or its :class:`~resex_libvirt.hypervisor.base.VMInfo` different), so a
    reader compares nothing when it did not.
    """

    def __init__(self):
        self._vms = {}
        self._infos = {}
        self.generation = 0

    def __contains__(self, uuid):
        return uuid in self._vms

    def __iter__(self):
        return iter(list(self._vms))

    def __len__(self):
        return len(self._vms)

    def get(self, uuid):
        return self._vms.get(uuid)

    def items(self):
        return list(self._vms.items())

    def put(self, uuid, vm):
        """Adopt (or re-adopt) ``vm``; returns True if the view changed."""
        old = self._vms.get(uuid)
        self._vms[uuid] = vm
        if old is not None and old.info == vm.info:
            return False
        self._changed()
        return True

    def pop(self, uuid):
        """Forget a VM; returns its record or None."""
        vm = self._vms.pop(uuid, None)
        if vm is not None:
            self._changed()
        return vm

    def infos(self):
        """``{uuid: VMInfo}`` of every adopted VM (do not modify)."""
        if self._infos is None:
            self._infos = {uuid: vm.info for uuid, vm in self._vms.items()}
        return self._infos

    def _changed(self):
        self.generation += 1
        self._infos = None
