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

"""A VM's original knobs (its knobs without the agent) and their changes, for the journal.

See doc/source/hypervisor.rst ("Original knobs").
"""

import dataclasses
import logging

LOG = logging.getLogger(__name__)

#: Tunable event parameter -> scheduler parameter.
_TUNABLE = {"cputune.shares": "cpu_shares"}


@dataclasses.dataclass(frozen=True)
class OriginalsUpdate:
    """A change of a VM's original knobs, for the journal.

    ``originals`` is ``None`` when the VM stopped or was undefined (forget
    it). ``reason``: ``stopped``, ``redefined``, ``restarted``,
    ``operator`` or ``arrived`` (a Nova instance with a cap Nova did not
    set). ``reassert`` asks the caller to write its knobs again (the live
    values are no longer what it wrote, and nobody holds them).
    """

    uuid: str
    originals: dict | None
    reason: str
    reassert: bool = False
    #: The values operators set live that the agent now leaves alone
    #: (``{}``: none any more); ``None``: unchanged. With ``dom_id``, the
    #: domain they hold for (a restart ends them).
    operator: dict | None = None
    dom_id: int = -1


class Originals:
    """Works out each adopted VM's originals and queues their changes.

    A VM's originals come from its persistent definition and Nova's flavor
    (:meth:`of_definition`); a VM seen for the first time takes the operator
    values the journal kept for it (:meth:`seed`); a re-read VM carries over
    what the agent wrote and what operators took over (:meth:`follow`).
    """

    def __init__(self):
        self._updates = []
        self._seeded = {}         # uuid -> {"dom_id", "values"} from the journal
        self._warned = set()

    def of_definition(self, facts, mapping, persistent, flavor):
        """The originals of a VM's definition (``{}`` for a monitor-only VM)."""
        if mapping is None:
            return {}
        originals, refused = mapping.originals(persistent, flavor, nova=facts.nova is not None)
        token = (facts.uuid, refused)
        if refused and token not in self._warned:
            self._warned.add(token)
            LOG.warning("VM %s (%s): persistent %s refused as an original (an agent's cap "
                        "copied into the definition?); original: no cap",
                        facts.name, facts.uuid, refused)
        return originals

    def forget(self, uuid):
        """``uuid`` is gone: the refused originals said about it are dropped."""
        self._warned = {token for token in self._warned if token[0] != uuid}

    def adopt_operator_values(self, values):
        """``{uuid: {"dom_id", "values"}}``: what operators set, as the journal kept it."""
        self._seeded = {uuid: dict(v) for uuid, v in values.items()}

    def updates(self):
        """The :class:`OriginalsUpdate` s since the last call, oldest first."""
        updates, self._updates = self._updates, []
        return updates

    def stopped(self, vm):
        if vm.mapping is not None:
            self._queue(vm.info.uuid, None, "stopped")

    def changed_tunables(self, domains, tunables):
        """The uuids whose tunable events carry values the agent did not write."""
        out = set()
        for uuid, params in tunables:
            vm = domains.get(uuid)
            if vm is None or vm.mapping is None:
                continue
            for key, value in params.items():
                name = _TUNABLE.get(key, key[len("cputune."):] if key.startswith(
                    "cputune.") else key)
                if ((name in vm.ours and not vm.agent_wrote(name, value))
                        or (name in vm.held and vm.overrides.get(name) != value)):
                    out.add(uuid)
                    break
        return out

    def seed(self, vm):
        """A VM seen for the first time (with knobs) takes what the journal kept for it."""
        seeded = self._seeded.pop(vm.info.uuid, None)
        if not seeded:
            self._arrived(vm)
            return
        if seeded.get("dom_id") != vm.dom_id:
            LOG.info("VM %s (%s) restarted since an operator set %s: its definition's "
                     "values apply again", vm.info.name, vm.info.uuid, seeded.get("values"))
            self._queue(vm.info.uuid, vm.originals, "restarted", operator={},
                        dom_id=vm.dom_id)
            return
        values = {k: v for k, v in seeded.get("values", {}).items()
                  if k in vm.mapping.restorable}
        vm.overrides = dict(values)
        vm.held = set(values)
        vm.originals = {**vm.originals, **values}
        LOG.info("VM %s (%s): %s set by an operator before this start stay the original and "
                 "the agent's hands stay off them", vm.info.name, vm.info.uuid,
                 ", ".join("%s=%s" % kv for kv in sorted(values.items())))

    def _arrived(self, vm):
        """A Nova instance that arrives with a cap in force (a live migration) is re-written.

        Nova never writes a global cap, so one in force at first sight is the
        source host's agent's (nova builds the target's domain from the
        source's live XML): the market's decision replaces it at once,
        not only when the decision first moves.
        """
        if vm.facts.nova is None:
            return
        vcpus = vm.info.vcpus
        live = vm.mapping.cap_of(vm.written, vcpus)
        if live is None or live == vm.mapping.cap_of(vm.originals, vcpus):
            return
        LOG.warning("VM %s (%s) arrived with a cap of %.2f%% that Nova did not set (a live "
                    "migration from a host whose agent capped it?): the market's cap replaces it",
                    vm.info.name, vm.info.uuid, live)
        self._queue(vm.info.uuid, vm.originals, "arrived", reassert=True)

    def follow(self, old, new, live):
        """Carry what the agent wrote over a re-read; queue changed originals."""
        if new.mapping is None:
            return
        uuid = new.info.uuid
        if old.dom_id != new.dom_id:
            # A restart: the live knobs are the persistent ones again, and
            # nothing an operator set live survives it.
            self._queue(uuid, new.originals, "restarted", reassert=True,
                        operator={} if old.held else None, dom_id=new.dom_id)
            return
        new.ours = old.ours
        new.overrides = dict(old.overrides)
        new.held = set(old.held)
        # The agent knows its own writes by what it wrote (any period); a
        # live value it never wrote on a knob it set is an operator's.
        changed = {k: v for k, v in live.items()
                   if (k in old.ours and not old.agent_wrote(k, v))
                   or (k in old.held and old.overrides.get(k) != v)}
        if changed:
            self._operator_took(new, live, changed)
        new.originals = {**new.originals, **new.overrides}
        if changed:
            self._queue(uuid, new.originals, "operator",
                        operator=dict(new.overrides), dom_id=new.dom_id)
            return
        new.written = old.written
        if new.originals != old.originals:
            LOG.info("VM %s (%s): definition changed; original knobs now %s",
                     new.info.name, uuid, new.originals)
            self._queue(uuid, new.originals, "redefined")

    def _operator_took(self, new, live, changed):
        # The whole group goes to the operator (a cap's period with its quota).
        untouched = new.mapping.without(live, set(changed))
        held = {k: v for k, v in live.items() if k not in untouched}
        new.overrides.update(held)
        new.held.update(held)
        for name in held:
            new.ours.pop(name, None)
        LOG.warning("VM %s (%s): %s changed outside the agent: adopted as the original, "
                    "and the agent leaves %s alone until the VM restarts",
                    new.info.name, new.info.uuid,
                    ", ".join("%s=%s" % kv for kv in sorted(changed.items())),
                    ", ".join(sorted(held)))

    def _queue(self, uuid, originals, reason, reassert=False, operator=None, dom_id=-1):
        self._updates.append(OriginalsUpdate(
            uuid, None if originals is None else dict(originals), reason, reassert,
            None if operator is None else dict(operator), dom_id))
