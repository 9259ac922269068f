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

"""Which move of an existing instance a scheduling request is, if any.

Nova 34 runs the filters for every move except a forced one (live migration
and evacuation with ``force``, which skip the scheduler), but the
``RequestSpec`` names no operation. What it does carry:

* a **move** is restricted to the instance's cell: the conductor sets
  ``requested_destination.cell`` for live migration
  (``conductor/tasks/live_migrate.py``), cold migration and resize
  (``conductor/tasks/migrate.py``), unshelve and evacuation
  (``ConductorManager._restrict_request_spec_to_cell``), never for a boot;
  evacuation, live migration and cold migration also list the source host in
  ``ignore_hosts``;
* a **rebuild on the same host** carries the hint ``_nova_check_type:
  rebuild`` (``nova.scheduler.utils.request_is_rebuild``);
* the **kind** of move is the instance's ``task_state``, set by the API
  before it calls the conductor: ``migrating`` (live migration),
  ``resize_prep`` (cold migration, or resize when the request's flavor
  differs from the instance's), ``rebuilding`` (evacuation: a rebuild onto
  another host), ``unshelving``. It costs one read of the instance in its
  cell, done only for a move and only for requests this plugin concerns.

:func:`detect` returns ``None`` for a new instance, a kind from
:data:`KINDS`, or :data:`MOVE` when the request is a move whose kind could
not be read (no database, an instance deleted meanwhile): the filter treats
it as advisory, never strict, so that doubt never blocks an operator.
"""

import logging

from nova.compute import task_states
from nova import context as nova_context
from nova import objects

LOG = logging.getLogger(__name__)

EVACUATE = "evacuate"
LIVE_MIGRATE = "live_migrate"
COLD_MIGRATE = "cold_migrate"
RESIZE = "resize"
UNSHELVE = "unshelve"
KINDS = (EVACUATE, LIVE_MIGRATE, COLD_MIGRATE, RESIZE, UNSHELVE)

#: A move whose kind is unknown.
MOVE = "move"


def _field(obj, name):
    try:
        return getattr(obj, name) if name in obj else None
    except (AttributeError, NotImplementedError, TypeError, ValueError):
        return None


def named_destination(spec_obj):
    """True when the operator named the destination host (or forced hosts or nodes)."""
    if _field(spec_obj, "force_hosts") or _field(spec_obj, "force_nodes"):
        return True
    dest = _field(spec_obj, "requested_destination")
    return dest is not None and bool(_field(dest, "host"))


def detect(spec_obj):
    """The move ``spec_obj`` asks for: None (a new instance), a kind, or :data:`MOVE`."""
    dest = _field(spec_obj, "requested_destination")
    cell = _field(dest, "cell") if dest is not None else None
    if cell is None and not _field(spec_obj, "ignore_hosts"):
        return None
    return _kind(spec_obj, cell) or MOVE


def _kind(spec_obj, cell):
    uuid = _field(spec_obj, "instance_uuid")
    ctxt = getattr(spec_obj, "_context", None)
    if not uuid or ctxt is None or cell is None:
        return None
    try:
        with nova_context.target_cell(ctxt, cell) as cctxt:
            instance = objects.Instance.get_by_uuid(cctxt, uuid, expected_attrs=["flavor"])
    except Exception as exc:  # noqa: BLE001 - the filter never raises
        LOG.debug("ResEx: cannot read instance %s to tell its move: %s", uuid, exc)
        return None
    state = instance.task_state
    if state == task_states.MIGRATING:
        return LIVE_MIGRATE
    if state == task_states.RESIZE_PREP:
        flavor = _field(spec_obj, "flavor")
        new_id = _field(flavor, "flavorid") if flavor is not None else None
        return RESIZE if new_id and new_id != instance.flavor.flavorid else COLD_MIGRATE
    if state in (task_states.REBUILDING, task_states.REBUILD_SPAWNING):
        return EVACUATE
    if state in (task_states.UNSHELVING, task_states.SPAWNING) and \
            instance.vm_state == "shelved_offloaded":
        return UNSHELVE
    return None
