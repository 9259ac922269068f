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

"""What a request asks of a host's congestion, and what a host allows: shared by
the filter and the weigher.

* A **latency-sensitive** request (flavor extra spec ``resex:latency_sla_us``)
  must not land where its SLA is already broken: the host's congestion index
  (:func:`resex_libvirt.board.report.congestion_index`, the expected latency
  inflation of a newcomer) must not exceed the request's
  ``resex:interference_threshold_pct``, the very threshold above which the
  host's market would start taxing its neighbours (paper Algorithm 2), or,
  when the flavor does not set one, the operator's ``congestion_threshold``.
* A **heavy I/O** request (``resex:io_class=bulk``) is kept away from hosts
  with latency-sensitive tenants (the weigher always; the filter past
  ``bulk_max_sensitive_vms``).
* A request whose flavor's keys contradict each other (a
  ``resex:cpu_limit_pct`` below its ``resex:cpu_reservation_pct``) is
  *refused*: nova-api cannot catch it, its validators see one key at a
  time, and the agent would drop the limit.
* A latency-sensitive request for a member of a server group (an
  ensemble: ``RequestSpec.instance_group`` and the ``hosts`` its members
  run on) is weighed, among the hosts that fit, by the shared links
  between each host and the group's hosts too (:func:`group_hosts`,
  :func:`~resex_libvirt.board.links.toward`): the weigher prefers a host
  whose path to the group is clean. The filter does not use it.
* Any other request is not this plugin's business.

Invalid ``resex:`` values in an old flavor (the API validates new ones) are
ignored with a debug line: the filter never raises.
"""

import dataclasses
import logging
import threading

from nova.scheduler.filters import utils as filters_utils

from resex_libvirt.board import links as links_mod
from resex_libvirt.board import reader as reader_mod
from resex_libvirt import exceptions
from resex_libvirt import sla as sla_mod
from resex_nova import conf as conf_mod
from resex_nova import topology as topology_mod

LOG = logging.getLogger(__name__)

SENSITIVE = "sensitive"
BULK = "bulk"

#: What a host is for a request: it fits (known-good), nothing fresh is known
#: about it, or it would break the request's rule (known-bad).
GOOD, UNKNOWN, BAD = "good", "unknown", "bad"


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """A request as this plugin sees it: its kind and, if sensitive, its SLA threshold.

    ``refused`` says why the flavor's ``resex:`` keys cannot all hold, or is ``None``.
    ``group_hosts``: the hosts of the server group the request's server
    joins (a sensitive request's only; :func:`group_hosts`).
    """

    kind: str | None
    threshold_pct: float | None = None
    refused: str | None = None
    group_hosts: tuple = ()


OTHER = Request(None)


def _extra_specs(spec_obj):
    try:
        flavor = spec_obj.flavor
        if not flavor.obj_attr_is_set("extra_specs"):
            return {}
        return flavor.extra_specs or {}
    except (AttributeError, NotImplementedError, KeyError):
        return {}


#: Most of a server group's hosts a request's weighing looks at.
MAX_GROUP_HOSTS = 256


def group_hosts(spec_obj):
    """The hosts of the server group of ``spec_obj`` (``instance_group.hosts``), sorted.

    Nova's conductor sets them (``setup_instance_group``) for a request
    in a server group; ``()`` for one in none, or whatever is unreadable.
    At most :data:`MAX_GROUP_HOSTS`.
    """
    try:
        if not spec_obj.obj_attr_is_set("instance_group"):
            return ()
        group = spec_obj.instance_group
        if group is None or not group.obj_attr_is_set("hosts"):
            return ()
        hosts = sorted({h for h in group.hosts or () if isinstance(h, str) and h})
    except (AttributeError, NotImplementedError, KeyError, TypeError):
        return ()
    return tuple(hosts[:MAX_GROUP_HOSTS])


def classify(spec_obj):
    """The :class:`Request` of a nova ``RequestSpec``."""
    specs = _extra_specs(spec_obj)
    if not any(isinstance(k, str) and k.startswith(sla_mod.PREFIX) for k in specs):
        return OTHER

    conflicts = []

    def ignore(exc):
        if isinstance(exc, exceptions.SLAConflict):
            conflicts.append(str(exc))
        else:
            LOG.debug("ResEx ignores an invalid flavor extra spec: %s", exc)

    sla = sla_mod.parse(specs, on_error=ignore)
    refused = "; ".join(conflicts) or None
    if sla.sensitive:
        explicit = sla_mod.INTERFERENCE_THRESHOLD_PCT.name in specs
        return Request(SENSITIVE, sla.interference_threshold_pct if explicit else None,
                       refused, group_hosts(spec_obj))
    if sla.io_class == BULK:
        return Request(BULK, refused=refused)
    return OTHER if refused is None else Request(None, refused=refused)


def aggregate_value(host_state, option, default, cast):
    """``option``'s per-aggregate override for ``host_state`` (minimum wins), or ``default``."""
    if not host_state.aggregates:
        return default
    key = conf_mod.AGGREGATE_KEYS[option]
    values = filters_utils.aggregate_values_from_key(host_state, key)
    try:
        return filters_utils.validate_num_values(values, default, cast_to=cast)
    except ValueError as exc:
        LOG.warning("Could not decode aggregate metadata %s: %s", key, exc)
        return default


class Judge:
    """Classifies hosts for one request, with the options read once per request."""

    __slots__ = ("request", "reader", "now", "default_threshold", "default_bulk_max",
                 "links")

    def __init__(self, request, conf, now):
        opts = conf.resex
        self.request = request
        self.reader = board_reader(conf)
        self.now = now
        self.default_threshold = opts.congestion_threshold
        self.default_bulk_max = opts.bulk_max_sensitive_vms
        #: ``{host: Load}`` of the most congested shared link of each host, or None.
        self.links = (LINKS.by_host(topology(opts.topology_file), self.reader, now)
                      if request.kind == SENSITIVE and opts.topology_file else None)

    def limit(self, host_state):
        """The request's limit on ``host_state``: a threshold (sensitive) or a count (bulk)."""
        if self.request.kind == SENSITIVE:
            if self.request.threshold_pct is not None:
                return self.request.threshold_pct
            return aggregate_value(host_state, "congestion_threshold",
                                   self.default_threshold, float)
        return aggregate_value(host_state, "bulk_max_sensitive_vms",
                               self.default_bulk_max, int)

    def scan(self, host_states):
        """``(verdicts, entries, limits)``, lists aligned with ``host_states``.

        The request path at 10,000 hosts: one dict lookup and a comparison
        per host; the aggregates are read only for hosts that have some.
        """
        entries, oldest = self.reader.fresh(self.now)
        get = entries.get
        sensitive = self.request.kind == SENSITIVE
        fixed = self.request.threshold_pct if sensitive else None
        found = [get(h.host) for h in host_states]
        if self.links:
            # A host behind a congested shared link is judged by the link's congestion.
            links = self.links.get
            found = [e if e is None else e.behind(links(h.host))
                     for e, h in zip(found, host_states)]
        if fixed is not None:
            limits = [fixed] * len(found)
        else:
            default = self.default_threshold if sensitive else self.default_bulk_max
            limits = [self.limit(h) if h.aggregates else default for h in host_states]
        if sensitive:
            verdicts = [UNKNOWN if e is None or e.ts < oldest or e.blind
                        else BAD if e.latched > limit else GOOD
                        for e, limit in zip(found, limits)]
        else:
            verdicts = [UNKNOWN if e is None or e.ts < oldest or e.blind
                        else BAD if 0 <= limit < e.sensitive_vms else GOOD
                        for e, limit in zip(found, limits)]
        return verdicts, found, limits


def board_reader(conf):
    """The process's shared, started board reader for ``conf.resex``."""
    opts = conf.resex
    return reader_mod.shared(
        opts.board_url, max_age=opts.max_age, refresh_interval=opts.refresh_interval,
        load_timeout=opts.first_load_timeout, mode=opts.board_read_mode,
        tau=opts.admission_time_constant, hysteresis=opts.admission_hysteresis,
        board_opts=conf_mod.board_options(opts))


# -- shared links -------------------------------------------------------------------------

#: The process's topology files (:class:`resex_nova.topology.Topologies`).
topology = topology_mod.Topologies()


class _LinkView:
    """Each host's most congested shared link, from the reader's reports, at most once a second.

    A pass over the links' hosts (a dict lookup per host) off the request's
    path most of the time: requests in the same second share it.
    """

    INTERVAL_S = 1.0

    def __init__(self):
        self._lock = threading.Lock()
        self._last = (None, None, None, None, 0.0)     # topology, reader, by_host, loads, when

    def by_host(self, topo, reader, now):
        """``{host: Load}``: each host's most congested shared link, or None without links."""
        return self._view(topo, reader, now)[0]

    def loads(self, topo, reader, now):
        """``{link name: Load}`` of every shared link, or None without links."""
        return self._view(topo, reader, now)[1]

    def _view(self, topo, reader, now):
        if topo is None or not topo.links:
            return None, None
        last_topo, last_reader, by_host, loads, when = self._last
        if last_topo is topo and last_reader is reader and 0 <= now - when < self.INTERVAL_S:
            return by_host, loads
        with self._lock:
            last_topo, last_reader, by_host, loads, when = self._last
            if not (last_topo is topo and last_reader is reader
                    and 0 <= now - when < self.INTERVAL_S):
                loads = links_mod.loads(topo, reader.snapshot(now))
                by_host = links_mod.worst_by_host(topo, loads)
                self._last = (topo, reader, by_host, loads, now)
            return by_host, loads


#: The process's view of the shared links (:class:`_LinkView`).
LINKS = _LinkView()
