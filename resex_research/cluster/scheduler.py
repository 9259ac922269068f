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

"""Nova's own scheduler code over the simulated fleet.

Placement decisions are made by nova 34's ``HostManager`` (its
``get_filtered_hosts``, which honours ``ignore_hosts``, forced hosts and
requested destinations before running the filters through
``HostFilterHandler``, and ``get_weighed_hosts`` through
``HostWeightHandler``), with the filters and weighers that nova.conf enables:
each configuration's ``[nova.<group>]`` options are set on nova's ``CONF``
with oslo.config overrides before the ``HostManager`` is built, and cleared
afterwards (:class:`NovaConfig`). What nova would read from its database
comes from the simulation instead (:class:`FleetHostManager`): the host
states (``HostState`` objects kept up to date as nova's resource tracker
would), no aggregates, no cells to refresh.

Around the filters the sim does what the rest of nova does:

* **placement's allocation candidates** (:meth:`Scheduler.candidates`): the
  hosts with the vCPUs, RAM and disk the flavor asks for; in nova 34 the
  placement service, not a filter, checks capacity, and returns at most
  ``[scheduler] max_placement_results`` of them (default 1000): the first
  ones in provider order, or a random sample when the placement service's
  ``[placement] randomize_allocation_candidates`` is on (the scenario's
  ``hosts.randomize_candidates``). Before that cut it honours the flavor's
  traits as Placement does (``trait:NAME=required`` or ``forbidden`` in
  its extra specs) against the traits each host's provider carries
  (:meth:`Scheduler.set_trait`; every host carries ``CUSTOM_RESEX_MANAGED``,
  as nova-compute sets it from the agent's provider config);
* **the choice** among the weighed hosts as ``SchedulerManager`` makes it:
  one of the best ``[filter_scheduler] host_subset_size`` (a seeded draw);
* **the claim**: ``HostState.consume_from_request`` on the chosen host, as
  the scheduler does, and the release when a VM leaves, as the compute
  node's resource tracker reports it.
* **Evacuation** goes through the same path with the ``RequestSpec`` the
  conductor builds for an evacuation (``ConductorManager.rebuild_instance``):
  the source host in ``ignore_hosts``, forced destinations reset, and the
  request restricted to the instance's cell (``requested_destination.cell``),
  so filters see it as the move it is.
"""

import contextlib
import datetime
import itertools
import os
import random

os.environ.setdefault("OS_NOVA_DISABLE_EVENTLET_PATCHING", "1")  # before nova

import nova.conf  # noqa: E402
from nova import exception as nova_exc  # noqa: E402
from nova import objects  # noqa: E402
from nova.scheduler import host_manager  # noqa: E402

from resex_nova import traits as traits_mod  # noqa: E402

CONF = nova.conf.CONF

#: A flavor's extra spec asking Placement for a trait: ``trait:NAME=required|forbidden``.
TRAIT_PREFIX = "trait:"

CELL_UUID = "7d3c5a1e-0f4f-4c61-9d0a-1c2f3e4d5a6b"
_registered = False


def flavor_traits(extra_specs):
    """``(required, forbidden)`` trait names of a flavor's extra specs, as Placement reads them."""
    required, forbidden = set(), set()
    for key, value in extra_specs.items():
        if key.startswith(TRAIT_PREFIX):
            name = key[len(TRAIT_PREFIX):]
            if value == "required":
                required.add(name)
            elif value == "forbidden":
                forbidden.add(name)
    return frozenset(required), frozenset(forbidden)


def register_objects():
    global _registered
    if not _registered:
        objects.register_all()
        _registered = True


class NovaConfig:
    """oslo.config overrides on nova's CONF, ``{group: {option: value}}``, undone by :meth:`clear`.

    ``apply(sections, registered_only=True)`` sets the groups nova's CONF
    already has and returns the others: an out-of-tree plugin's group (such
    as ``[resex]``) exists only once nova has loaded the plugin's classes by
    the paths nova.conf names, which ``HostManager`` does when it is built.
    """

    def __init__(self):
        self._done = []

    def apply(self, sections, registered_only=False):
        from resex_libvirt import exceptions
        left = {}
        for group, opts in sections.items():
            name = None if group == "DEFAULT" else group
            if name is not None and name not in CONF:
                if registered_only:
                    left[group] = opts
                    continue
                raise exceptions.ConfigError(
                    "nova.conf has no section [%s] (is the plugin that defines it enabled "
                    "in filter_scheduler?)" % group)
            for option, value in opts.items():
                try:
                    CONF.set_override(option, value, name)
                except Exception as exc:
                    raise exceptions.ConfigError("nova.conf [%s] %s = %r: %s"
                                                 % (group, option, value, exc)) from exc
                self._done.append((option, name))
        return left

    def clear(self):
        for option, group in reversed(self._done):
            CONF.clear_override(option, group)
        self._done = []


@contextlib.contextmanager
def nova_config(sections):
    """Set ``{group: {option: value}}`` on nova's CONF for the block, then clear it."""
    register_objects()
    conf = NovaConfig()
    try:
        conf.apply(sections)
        yield conf
    finally:
        conf.clear()


class FleetHostManager(host_manager.HostManager):
    """nova's HostManager with the simulated fleet in place of its database."""

    def refresh_cells_caches(self):
        self.enabled_cells = []
        self.cells = {}

    def _init_aggregates(self):
        """No aggregates in the simulated fleet."""

    def _init_instance_info(self, computes_by_cell=None):
        """Instances are tracked by the simulation."""


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


class Scheduler:
    """Places requests on ``hosts`` (names) of ``vcpus``/``ram_mb``/``disk_gb`` each."""

    def __init__(self, hosts, vcpus, ram_mb, disk_gb, seed=0, randomize_candidates=False):
        register_objects()
        self.manager = FleetHostManager()
        self.filters = [type(f).__name__ for f in self.manager.enabled_filters]
        self.weighers = [type(w).__name__ for w in self.manager.weighers]
        self.subset = max(1, CONF.filter_scheduler.host_subset_size)
        self.limit = CONF.scheduler.max_placement_results
        self.randomize = randomize_candidates
        self._rng = random.Random("scheduler:%d" % seed)
        self.states = {}
        now = _now()
        for name in hosts:
            s = host_manager.HostState(name, name, CELL_UUID)
            s.total_usable_ram_mb = s.free_ram_mb = ram_mb
            s.total_usable_disk_gb = disk_gb
            s.free_disk_mb = disk_gb * 1024
            s.vcpus_total = vcpus
            s.ram_allocation_ratio = s.cpu_allocation_ratio = s.disk_allocation_ratio = 1.0
            s.service = {"disabled": False, "disabled_reason": None, "host": name,
                         "binary": "nova-compute", "last_seen_up": now, "updated_at": now,
                         "created_at": now, "forced_down": False}
            s.updated = now
            self.states[name] = s
        self._order = [self.states[n] for n in hosts]
        self.cell = objects.CellMapping(uuid=CELL_UUID, name="cell1")
        #: trait -> the hosts whose resource provider carries it.
        self.holders = {traits_mod.MANAGED: set(hosts)}
        self._flavor_traits = {}

    # -- requests -----------------------------------------------------------------
    @staticmethod
    def flavor(f):
        return objects.Flavor(name=f.name, flavorid=f.name, vcpus=f.vcpus, memory_mb=f.ram_mb,
                              root_gb=f.disk_gb, ephemeral_gb=0, swap=0,
                              extra_specs=dict(f.extra_specs))

    def boot_spec(self, flavor, instance_uuid, project):
        return objects.RequestSpec(
            flavor=flavor, num_instances=1, instance_uuid=instance_uuid, project_id=project,
            user_id="user", ignore_hosts=None, force_hosts=None, force_nodes=None,
            requested_destination=None, scheduler_hints={}, pci_requests=None,
            numa_topology=None, instance_group=None)

    def evacuate_spec(self, flavor, instance_uuid, project, source_host):
        """The RequestSpec nova's conductor sends for evacuating off ``source_host``."""
        spec = self.boot_spec(flavor, instance_uuid, project)
        spec.ignore_hosts = [source_host]
        spec.reset_forced_destinations()
        spec.requested_destination = objects.Destination(cell=self.cell)
        return spec

    # -- the fleet's state ---------------------------------------------------------
    def heartbeat(self, down=()):
        """Every compute service reports in now, except those in ``down``."""
        now = _now()
        stale = now - datetime.timedelta(seconds=10 * max(60, CONF.service_down_time))
        for name, s in self.states.items():
            s.service["last_seen_up"] = stale if name in down else now
            s.service["updated_at"] = s.service["last_seen_up"]

    def release(self, host, flavor):
        """A VM of ``flavor`` left ``host`` (what the resource tracker would report)."""
        s = self.states[host]
        s.free_ram_mb += flavor.memory_mb
        s.free_disk_mb += (flavor.root_gb + flavor.ephemeral_gb) * 1024
        s.vcpus_used -= flavor.vcpus
        s.num_instances -= 1

    def io_op_done(self, host):
        """A build or rebuild on ``host`` finished (nova's ``io_workload`` stat)."""
        s = self.states[host]
        s.num_io_ops = max(0, s.num_io_ops - 1)

    def set_trait(self, host, trait, present):
        """Put ``trait`` on ``host``'s resource provider, or take it off."""
        have = self.holders.setdefault(trait, set())
        if present:
            have.add(host)
        else:
            have.discard(host)

    def claim(self, host, spec):
        """Claim ``spec`` on ``host`` outside the scheduler (a VM pinned there)."""
        self.states[host].consume_from_request(spec)

    def _traits(self, flavor):
        """``(allowed, barred)`` host sets of ``flavor``'s traits (``allowed`` None: any)."""
        key = (flavor.name, tuple(sorted(flavor.extra_specs.items())))
        wanted = self._flavor_traits.get(key)
        if wanted is None:
            wanted = self._flavor_traits[key] = flavor_traits(flavor.extra_specs)
        required, forbidden = wanted
        allowed = None
        if required:
            allowed = set.intersection(*(self.holders.get(t, set()) for t in required))
        barred = set().union(*(self.holders.get(t, ()) for t in forbidden))
        return allowed, barred

    def candidates(self, spec):
        """Placement's allocation candidates: the hosts with room and the flavor's traits.

        The traits are applied first, then the ``max_placement_results`` cut:
        in provider order (the hosts' order, ``compute-00000`` first) or, with
        ``randomize_candidates``, a seeded sample of every host that fits.
        """
        f = spec.flavor
        disk = (f.root_gb + f.ephemeral_gb) * 1024
        allowed, barred = self._traits(f)
        fit = (s for s in self._order
               if s.vcpus_total * s.cpu_allocation_ratio - s.vcpus_used >= f.vcpus
               and s.free_ram_mb >= f.memory_mb and s.free_disk_mb >= disk
               and s.host not in barred and (allowed is None or s.host in allowed))
        if not self.randomize:
            return list(itertools.islice(fit, self.limit))
        fit = list(fit)
        if len(fit) <= self.limit:
            return fit
        keep = sorted(self._rng.sample(range(len(fit)), self.limit))
        return [fit[i] for i in keep]

    def select(self, spec):
        """The host nova would choose for ``spec`` (claimed), or None (NoValidHost)."""
        hosts = self.candidates(spec)
        if not hosts:
            return None
        try:
            passed = list(self.manager.get_filtered_hosts(hosts, spec))
        except nova_exc.NoValidHost:
            return None
        if not passed:
            return None
        weighed = self.manager.get_weighed_hosts(passed, spec)
        best = weighed[:self.subset]
        chosen = (best[0] if len(best) == 1 else self._rng.choice(best)).obj
        chosen.consume_from_request(spec)
        return chosen.host
